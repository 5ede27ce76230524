/* SPDX-License-Identifier: MIT */
/* vgpu_vf_managed.h - managed memory of libvgpu-vf: one allocation the CPU and the GPU
 * both use by address, its pages migrating to wherever they are used (CUDA's managed
 * memory, on hmm/).
 *
 * A managed allocation lives in the VF's DMA memory (a MAP_SHARED view of BAR2), so it
 * works the same for a local process and inside a VM. It is mapped at a GPU VA of one
 * address space with 4 KiB volatile PTEs (no TLB to shoot down). "Device-resident" means
 * migrated into a pool of the slice's VRAM (the VF's VRAM aperture, copied by the CPU):
 *  - a GPU access to a page whose PTE is invalid raises a replayable fault; the driver
 *    services faults in batches (dedup per 2 MiB block, UVM-style prefetch and thrashing
 *    throttling), migrates the pages to VRAM (or maps them in system memory when advised
 *    so), writes the PTEs and replays the stalled channels (VGPU_RM_CTRL_FAULT_REPLAY);
 *  - a CPU access to a device-resident page traps (hmm's mprotect backend: the page is
 *    PROT_NONE while its data is in VRAM) and migrates its fault granule back;
 *  - vgpu_managed_evict_all() (before a reset) and vgpu_vf_close() bring every page back;
 *  - migration beyond the pool (the slice's quota) moves what fits and says how much.
 *
 * Channels that touch managed memory must be created with opts.replayable. A GPU access
 * outside every managed allocation on such a channel is not serviced (counted in
 * stats.unserviced) and its channel stays stalled.
 *
 * Limits: the CPU must not use pages the GPU is using at the same moment (wait for the
 * fence first); a system call on a device-resident page gets EFAULT (call
 * vgpu_mem_prefetch(..., VGPU_LOC_CPU) first); a reset the host makes without warning
 * loses the device-resident pages (their VRAM is scrubbed): evict first. */
#ifndef VGPU_VF_MANAGED_H
#define VGPU_VF_MANAGED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vgpu_vf;
struct vgpu_vaspace;
struct vgpu_managed;

struct vgpu_managed_opts {
	uint64_t pool_bytes;		/* VRAM for device-resident pages (2 MiB multiple);
					 * 0 = 8 MiB; halved until the quota allows it */
	uint64_t granule;		/* CPU fault granule: 4 KiB (0), 64 KiB or 2 MiB */
	bool no_prefetch;		/* device faults fetch only the faulted pages */
	bool no_thread;			/* no service thread: call vgpu_managed_service() */
	uint64_t (*clock_ns)(void);	/* policy clock (tests); NULL = monotonic */
};

/* Start managed memory on @vf (the first vgpu_mem_alloc_managed() does it with the
 * defaults): an hmm mm on the mprotect backend, the VRAM pool, the fault-service thread
 * and the driver's MMU-fault hook. 0, -EEXIST (already), -EINVAL, -ENOLINK, or the RM's
 * error for the pool (-VGPU_EQUOTA if not even 2 MiB fit). */
int vgpu_managed_init(struct vgpu_vf *vf, const struct vgpu_managed_opts *opts);
/* Bring every page back, free every managed allocation, stop. Also run by
 * vgpu_vf_close(). NULL or not started: no-op. */
void vgpu_managed_fini(struct vgpu_vf *vf);

/* Allocate @size bytes (rounded up to 2 MiB) of managed memory in @as's VF's DMA memory
 * and map them at GPU VA @va (2 MiB aligned, free in @as). The pages start in system
 * memory, not mapped for the GPU (its first access faults them in). 0, -EINVAL,
 * -EEXIST (VA in use), -ENOMEM (DMA memory), -ENOSPC (too many allocations). */
int vgpu_mem_alloc_managed(struct vgpu_vaspace *as, uint64_t va, uint64_t size,
			   struct vgpu_managed **out);
/* Bring the pages back, unmap and free. NULL is a no-op (0). */
int vgpu_mem_free_managed(struct vgpu_managed *m);
/* The CPU address of @m. */
void *vgpu_managed_cpu(const struct vgpu_managed *m);
/* The GPU VA of @m. */
uint64_t vgpu_managed_va(const struct vgpu_managed *m);
/* The size of @m in bytes (a 2 MiB multiple). */
uint64_t vgpu_managed_size(const struct vgpu_managed *m);

enum vgpu_mem_loc { VGPU_LOC_CPU, VGPU_LOC_DEVICE };

struct vgpu_prefetch_result {
	uint64_t pages;			/* pages in the range */
	uint64_t moved;			/* migrated by this call */
	uint64_t no_room;		/* left in system memory: the VRAM pool is full */
	uint64_t busy;			/* kept where they were by a racing CPU access, or
					 * by a protection change the kernel refused */
};

/* Migrate [off, off+len) of @m to @to (cudaMemPrefetchAsync, synchronous). To the device
 * the pages are also mapped for the GPU. What does not fit in the pool stays in system
 * memory: 0 with @res->no_room set (and vgpu_vf_last_error() saying so). @res may be
 * NULL. 0, -EINVAL (range), or -errno. */
int vgpu_mem_prefetch(struct vgpu_managed *m, uint64_t off, uint64_t len, enum vgpu_mem_loc to,
		      struct vgpu_prefetch_result *res);

enum vgpu_mem_advice {
	VGPU_ADVISE_PREFER_DEVICE,	/* GPU faults migrate pages to VRAM (default) */
	VGPU_ADVISE_PREFER_CPU,		/* GPU faults map the pages in system memory, remote;
					 * device-resident ones come back now */
};
/* Advice for [off, off+len) of @m (4 KiB aligned). 0 or -EINVAL. */
int vgpu_mem_advise(struct vgpu_managed *m, uint64_t off, uint64_t len,
		    enum vgpu_mem_advice advice);

/* Service pending GPU faults now (the thread does it otherwise): drain the event ring,
 * service what is queued, replay. Waits up to @timeout_ns for a fault event when none
 * is queued. Returns the number of fault entries serviced, or -errno. */
int vgpu_managed_service(struct vgpu_vf *vf, uint64_t timeout_ns);
/* Drain the event ring into the fault queue without servicing it; returns how many
 * fault entries wait (tests that want one batch to hold several entries). */
int vgpu_managed_pending(struct vgpu_vf *vf);
/* Bring every device-resident page back to system memory (before a reset). Returns the
 * number of pages or -errno. */
long vgpu_managed_evict_all(struct vgpu_vf *vf);

struct vgpu_managed_stats {
	uint64_t fault_entries;		/* fault-buffer entries handed to the service */
	uint64_t dedup;			/* dropped as duplicates of the same page */
	uint64_t blocks;		/* 2 MiB blocks serviced */
	uint64_t batches, replays;	/* service passes, FAULT_REPLAY calls */
	uint64_t migrated_to_device;	/* pages, by faults and prefetch */
	uint64_t migrated_to_cpu;	/* pages, by CPU faults, prefetch and eviction */
	uint64_t prefetched;		/* pages added by the prefetch policy */
	uint64_t mapped_remote;		/* pages mapped in system memory for the GPU */
	uint64_t cpu_faults;		/* CPU faults that brought pages back */
	uint64_t throttled, pinned;	/* thrashing policy */
	uint64_t thrash_events;
	uint64_t unserviced;		/* faults outside managed memory, or failed */
	uint64_t pool_pages, pool_used;	/* VRAM pool size and use, 4 KiB pages */
	uint64_t last_serviced_ns;	/* CLOCK_MONOTONIC ns when a pass last serviced
					 * faults (then replayed); 0: never */
};
/* Counters of @vf's managed memory (zero if not started). */
void vgpu_managed_get_stats(struct vgpu_vf *vf, struct vgpu_managed_stats *st);

/* Which of @m's pages are in VRAM now (for tests): the count in [off, off+len). */
uint64_t vgpu_managed_resident(struct vgpu_managed *m, uint64_t off, uint64_t len);

#endif
