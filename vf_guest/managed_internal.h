/* SPDX-License-Identifier: MIT */
/* vf_guest/managed_internal.h - state of managed memory shared by managed*.c. */
#ifndef VGPU_VF_MANAGED_INTERNAL_H
#define VGPU_VF_MANAGED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <vgpu/gmmu.h>

#include "hmm/hmm.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/vf_internal.h"

#define MANAGED_MAX_ALLOCS	32

struct vgpu_managed {
	struct vf_managed *st;
	struct vgpu_vaspace *as;
	struct vgpu_mem *mem;		/* the DMA memory holding the pages */
	char *cpu;			/* its CPU view (the managed region) */
	char *alias;			/* a second view: hmm's write view */
	const char *view;		/* how the views were made (the suite prints it) */
	bool own_cpu;			/* @cpu is a mapping of its own (in a VM), not
					 * the driver's BAR2 mapping */
	uint64_t va, size, iova;
	_Atomic uint64_t **ptes;	/* CPU address of each page's level-3 PTE in VRAM */
	uint64_t *sys_pte;		/* the PTE words the mapping was made with */
	uint8_t *advice;		/* enum vgpu_mem_advice per page */
	unsigned int slot;
};

struct vf_managed {
	struct vgpu_vf *vf;
	struct vgpu_managed_opts opts;
	struct hmm_mm *mm;
	struct hmm_devmem *devmem;	/* over @pool, owner = this state */
	struct vgpu_mem *pool;		/* VRAM */
	uint64_t pool_pa;		/* its VF-physical address */
	struct hmm_mirror mirror;	/* priv = this state */
	/* allocations: published for lock-free readers (fault handlers, callbacks) */
	struct vgpu_managed *_Atomic allocs[MANAGED_MAX_ALLOCS];
	struct cmn_mutex alloc_lock;	/* serialises changes to allocs[] */
	/* readers of allocs[] outside svc_lock, in sections (managed_read_begin()) counted
	 * by the epoch's parity; a slot's allocation is freed only once both counts drained
	 * after it was emptied (managed_alloc.c: slot_put()) */
	_Atomic unsigned int rd_epoch;
	_Atomic unsigned long rd_count[2];
	/* fault queue, filled by the driver's hook */
	struct cmn_mutex qlock;		/* protects queue, qn, dropped */
	pthread_cond_t qcond;
	struct vgpu_fault_entry queue[1024];
	size_t qn;
	uint64_t dropped;
	/* service: one pass at a time */
	struct cmn_mutex svc_lock;	/* protects the counters below and mirror.opts */
	uint64_t fault_entries, batches, replays, unserviced, mapped_remote;
	uint64_t last_serviced_ns;	/* when a batch last had something serviced */
	uint64_t late_next_ns;		/* next late replay due (0: none) */
	uint64_t late_gap_ns;		/* its distance from the previous one */
	pthread_t thread;
	bool thread_started;
	atomic_bool stop;
};

/* A section in which allocations read from allocs[] stay allocated; returns the token for
 * managed_read_end(). No lock, no allocation: the SIGSEGV handler's invalidations use it.
 * seq_cst: the count must be visible before the slots are read, and the slots are read
 * seq_cst too, so a writer that empties a slot and then finds the count zero knows every
 * later reader sees the slot empty. */
static inline unsigned int managed_read_begin(struct vf_managed *st)
{
	unsigned int idx = atomic_load(&st->rd_epoch) & 1;

	atomic_fetch_add(&st->rd_count[idx], 1);
	return idx;
}

static inline void managed_read_end(struct vf_managed *st, unsigned int idx)
{
	atomic_fetch_sub_explicit(&st->rd_count[idx], 1, memory_order_release);
}

/* Map what is present of [addr, addr+len) for the GPU: a snapshot range fault with the
 * seq check, then the PTEs (managed.c). */
int vf_managed_map_present(struct vf_managed *st, uintptr_t addr, size_t len);

#endif
