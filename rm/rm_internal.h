/* SPDX-License-Identifier: MIT */
/* rm internals: the server, functions, clients, resources; lock helpers. */
#ifndef VGPU_RM_RM_INTERNAL_H
#define VGPU_RM_RM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>
#include <urcu/rculfhash.h>

#include <vgpu/rm.h>
#include <vgpu/rpc.h>

#include "common/list.h"
#include "common/lock.h"
#include "rm/gsp/gsp.h"
#include "rm/rm.h"

/* ---- liburcu under ThreadSanitizer ----
 * liburcu is not instrumented, so TSan sees neither the publication of a node through an
 * rculfhash (add, then another thread's lookup) nor the grace period before a call_rcu
 * callback, and reports our own writes racing with the reader or the callback's free. The
 * wrappers below tell it exactly those edges: release an object before it is published or
 * handed to call_rcu, acquire it where a lookup matches it and in the callback; every
 * read-side section releases rm_rcu_gp at its end and every callback acquires it (a grace
 * period orders all earlier readers before the callback). No-ops in other builds. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char rm_rcu_gp;
#define RM_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define RM_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define RM_TSAN_RELEASE(p) ((void)(p))
#define RM_TSAN_ACQUIRE(p) ((void)(p))
#endif

/* The device's half of the ordering through the GSP (gpu_model/gpu.h): release before
 * each GSP request, acquire on each device event the GSP reports. */
static inline void rm_dev_sync_release(void *sync)
{
	if (sync)
		RM_TSAN_RELEASE(sync);
}

static inline void rm_dev_sync_acquire(void *sync)
{
	if (sync)
		RM_TSAN_ACQUIRE(sync);
}

static inline void rm_rcu_read_lock(void)
{
	urcu_memb_read_lock();
}

static inline void rm_rcu_read_unlock(void)
{
#if defined(__SANITIZE_THREAD__)
	RM_TSAN_RELEASE(&rm_rcu_gp);
#endif
	urcu_memb_read_unlock();
}

/* call_rcu for an object whose callback starts with rm_rcu_cb_enter(). */
static inline void rm_call_rcu(struct rcu_head *head, void (*fn)(struct rcu_head *))
{
	RM_TSAN_RELEASE(head);
	urcu_memb_call_rcu(head, fn);
}

static inline void rm_rcu_cb_enter(struct rcu_head *head)
{
#if defined(__SANITIZE_THREAD__)
	RM_TSAN_ACQUIRE(&rm_rcu_gp);
#endif
	RM_TSAN_ACQUIRE(head);
}

/* @size zeroed bytes, for objects that the hot paths allocate and free. glibc's calloc()
 * bypasses the per-thread cache (tcache) that malloc() and free() use, so a calloc'd
 * object freed again by the same thread went through its arena every time (the arena's
 * lock, and a consolidation of the heap whenever the chunk lay next to its top). The
 * empty asm keeps the compiler from folding malloc() + memset() back into calloc(). */
static inline void *rm_zalloc(size_t size)
{
	void *p = malloc(size);

	__asm__("" : "+r"(p));
	if (p)
		memset(p, 0, size);
	return p;
}

#define RM_MAX_FNS	64
#define RM_MAX_CHANNELS	64	/* channel ids 0..63 per function (the device's) */
#define RM_MAX_DEPTH	6	/* client -> device -> ... as in resserv */
#define RM_VRAM_ALIGN	(2ull << 20)	/* partition granularity of the device */
#define RM_SCRUB_CHUNK	(256ull << 20)	/* bytes of a slice one SCRUB RPC punches */
/* Values the GSP passes on to the device unchanged (vgpu_rpc_chan.flags,
 * vgpu_rpc_sched.policy): the device's GPU_CHAN_REPLAYABLE and GPU_SCHED_* numbers. */
#define RM_CHAN_REPLAYABLE	(1ull << 2)
/* Only in a device reset's replay: GPU_CHAN_RESTORE, the channel keeps its execution state. */
#define RM_CHAN_RESTORE		(1ull << 3)
#define RM_SCHED_FIRST		2	/* best effort */
#define RM_SCHED_LAST		4	/* fixed share */

/* Call device op @op of @rm with its context. */
#define rm_op(rm, op, ...) ((rm)->cfg.ops->op((rm)->cfg.ops_ctx, ##__VA_ARGS__))

struct rm_client;

/* A memory object; shared by every dup of it (refs). */
struct rm_mem {
	unsigned int fn;
	uint32_t aper;			/* VGPU_APER_VRAM / VGPU_APER_SYS */
	uint64_t addr;			/* VRAM: device address of the first page; SYS: IOVA */
	uint64_t size, page_size;
	uint64_t *pages;		/* VRAM: every page (device addresses) */
	size_t nr_pages;
	uint64_t sys_off;		/* SYS: offset in the function's DMA memobj */
	_Atomic unsigned int refs;	/* dups of it; the last put frees it */
};

/* An object. Found only through its client's table and freed at once (no grace period):
 * every access is under its client's lock. */
struct rm_res {
	uint32_t handle, h_class;
	struct rm_client *client;
	struct rm_res *parent;
	struct cmn_list children, sibling;
	struct rm_res *depends_on;	/* channel -> its VA space */
	struct cmn_list dependants, dep_link;
	unsigned int depth;
	uint64_t seq;			/* creation order in its function (rm_fn.obj_seq) */
	bool visit;			/* on the pending-free list */
	uint32_t share_target, share_access;
	union {
		struct rm_mem *mem;
		struct {
			uint32_t chid, token, entries, userd_aper;
			uint64_t userd_addr;
		} chan;
		struct { uint64_t pdb; } vas;
		struct { uint32_t notify_index; } evt;
	} u;
};

/* 64 slots of a client's object table; it lives while one of its handles is taken. */
#define RM_OBJ_LEAF 64
struct rm_obj_leaf {
	struct rm_res *obj[RM_OBJ_LEAF];	/* NULL: taken but not yet inserted */
	unsigned int taken;
};

struct rm_client {
	struct cds_lfht_node node;	/* rm->clients, key handle */
	struct rcu_head rcu;
	uint32_t handle;
	unsigned int fn;
	struct rm *rm;
	struct cmn_mutex lock;		/* rank CLIENT: everything below and the tree */
	_Atomic int refs;		/* lookups in flight + 1 while alive */
	bool disabled;			/* VF reset: no new calls; freed in batches */
	bool dead;			/* removed from the table */
	struct rm_res root;		/* class CLIENT */
	struct rm_res *device;
	uint64_t *hmap;			/* object handle bitmap, max_objects bits */
	/* Object table: handle index / 64 -> its leaf (NULL: none of those 64 taken). Private
	 * to the client (its lock), so calls of different clients write no common line. */
	struct rm_obj_leaf **objs;
	/* The last leaf emptied, kept for the next one needed: a client with one object at a
	 * time walks its handles from leaf to leaf and would otherwise allocate each anew. */
	struct rm_obj_leaf *spare;
	uint32_t cursor;
	unsigned int nr_objects;	/* not counting root */
	/* A hung channel's recovery found this lock busy: its unlock wakes the event worker
	 * to retry (rm_event.c). */
	_Atomic bool wd_kick;
	struct cmn_list fn_link;		/* rm_fn.clients, under the device lock */
};

/* Hardware records: what the GSP was told, replayed after a device reset. */
struct rm_chan_rec {
	bool used, live, enabled;	/* used: reserved or allocated; live: the GSP has it */
	/* A CHAN_ALLOC of the id ended with its outcome unknown (timed out, cancelled by a
	 * reset, a malformed reply) or refused as taken: the GSP may hold it, so the next
	 * reservation frees it there first (rm_device.c, chan_settle()). Kept while unused. */
	bool doubtful;
	uint32_t owner;			/* handle of the client whose channel it is */
	struct vgpu_rpc_chan cfg;
};

/* One function's state. Calls of different functions share no lock and no cache line: each
 * has its own API lock, accounting lock and counters, on lines of its own. */
struct rm_fn {
	/* rank API: calls of this function read-hold it; rm_vf_disable() write-holds it */
	pthread_rwlock_t api_lock;
	/* rank ACCT (innermost): the quota, every *_used / nr_clients counter and sys_map. The
	 * hot paths (VRAM/sysmem charges, object charges, GET_QUOTA) take it alone; the writers
	 * of quota, chans_used and nr_clients hold the device lock too, so device-locked code
	 * may read those without it. */
	struct cmn_mutex acct_lock;
	bool active;			/* has a partition (the PF always) */
	bool busy;			/* a partition change is in progress */
	bool resetting;			/* rm_vf_disable() between its clients and its
					 * channels: no channel may be reserved */
	uint64_t base, size;
	struct pma *pma;		/* VF: a child over the slice; PF: the device pma */
	struct rm_quota quota;
	uint64_t vram_used, sysmem_used;
	unsigned int chans_used, nr_clients;
	uint64_t *client_map;		/* client index bitmap */
	uint32_t client_cursor;
	struct cmn_list clients;
	struct iommu_domain *dma_domain;
	struct iommu_memobj *dma;
	uint64_t *sys_map;		/* 64 KiB chunks of @dma in use */
	size_t sys_chunks;
	struct rm_chan_rec chans[RM_MAX_CHANNELS];
	uint64_t runlist[4];
	uint64_t runlist_gen[4];	/* changes of runlist[i] (device lock) */
	bool sched_set;			/* sched holds what the GSP was told */
	struct vgpu_rpc_sched_fn sched;
	_Atomic uint64_t nr_objects;	/* clients + objects: the leak check */
	/* The next rm_res.seq of this function's clients and objects: creation order, which
	 * only a migration of this function compares. One counter per function, not per
	 * device, so creations in different functions write no common line. */
	_Atomic uint64_t obj_seq;
	uint32_t objs_used;		/* objects charged to quota.objects (device lock) */
	bool obj_limit_logged, client_limit_logged;	/* a refusal was logged since the
							 * last time below the limit */
	uint64_t wd_ns;			/* watchdog timeout told to the GSP; 0: its default */
	/* Hung channels whose recovery waits for their owner's lock (rm_event.c; device
	 * lock): a bit per channel id, the owner's handle and the allocation reported. */
	uint64_t wd_pending;
	struct rm_wd_job { uint32_t owner; uint64_t gen; } wd_job[RM_MAX_CHANNELS];
} __attribute__((aligned(64)));

struct rm {
	struct rm_config cfg;
	struct gsp_config gsp_cfg;	/* the owner's GSP settings (cfg.gsp points here) */
	struct rm_device_info dev;	/* from cfg.ops->info() */
	struct gsp *gsp;
	unsigned int nr_fns, nr_engines;
	struct cmn_mutex dev_lock;	/* rank DEVICE: fns[] bookkeeping and records */
	struct cds_lfht *clients;	/* handle -> rm_client, lock-free lookup */
	struct rm_fn fns[RM_MAX_FNS];
	bool sched_set;			/* under dev_lock: the device-wide policy record */
	struct vgpu_rpc_sched sched;
	_Atomic uint64_t gsp_resets;
	_Atomic uint64_t events_bad;	/* GSP event records that failed the checks */
	_Atomic unsigned int wd_pending;	/* bits set in every fns[].wd_pending */
};

/* ---- rm_lock.c ---- */
void rm_rcu_enter(void);
void rm_api_read(struct rm *rm, unsigned int fn);
void rm_api_write(struct rm *rm, unsigned int fn);
void rm_api_unlock(struct rm *rm, unsigned int fn);
/* Function @fn's accounting lock (rank ACCT: nothing is taken under it). */
void rm_acct_lock(struct rm *rm, unsigned int fn);
void rm_acct_unlock(struct rm *rm, unsigned int fn);
void rm_client_lock(struct rm_client *c);
void rm_client_unlock(struct rm_client *c);
/* Take the lock only if it is free (true): for the event worker, which must not wait on one
 * client. Recorded by the validator as held, its order unchecked (a try cannot deadlock). */
bool rm_client_trylock(struct rm_client *c);
bool rm_api_tryread(struct rm *rm, unsigned int fn);
void rm_dev_lock(struct rm *rm);
void rm_dev_unlock(struct rm *rm);
/* The _locked functions open with these: abort unless the calling thread holds it. */
void rm_client_assert_held(struct rm_client *c);
void rm_dev_assert_held(struct rm *rm);

/* ---- rm_client.c ---- */
/* rm_client_alloc() with *@h_client the handle wanted (0: any). -EEXIST if it is taken,
 * -EINVAL if it is not one of @fn's client handles. */
int rm_client_alloc_at(struct rm *rm, unsigned int fn, uint32_t *h_client);
/* Look @h up as function @fn and take a reference: 0, -ENOENT, -VGPU_EFOREIGN. */
int rm_client_get(struct rm *rm, unsigned int fn, uint32_t h, struct rm_client **out);
void rm_client_put(struct rm_client *c);
/* Free one client whose lock is held and that is marked dead; unlocks. */
void rm_client_destroy_locked(struct rm_client *c);
/* Charge one object to @c's function's object quota (-VGPU_EQUOTA at the limit) / give it
 * back. Takes the function's accounting lock. */
int rm_obj_charge(struct rm_client *c);
void rm_obj_uncharge(struct rm_client *c);
/* Take object handle *@h of @c (0: the next free one) and its table slot: -EINVAL out of
 * range, -EEXIST taken, -ENOSPC none left, -ENOMEM. Client lock held. */
int rm_handle_take(struct rm_client *c, uint32_t *h);
/* Give back handle @h and empty its slot. */
void rm_handle_drop(struct rm_client *c, uint32_t h);
/* Put @r in the slot of its handle (taken with rm_handle_take()). */
void rm_obj_insert(struct rm_client *c, struct rm_res *r);
/* The object @h of @c, NULL if none (the root is not in the table). */
struct rm_res *rm_obj_find(struct rm_client *c, uint32_t h);

/* ---- rm_res.c ---- */
struct rm_res *rm_res_lookup(struct rm_client *c, uint32_t h);
/* Free up to @budget objects of the tree under @r (all if 0), dependants and children
 * first; returns the number freed, and whether @r itself went in *@done. */
unsigned int rm_res_free_tree(struct rm_client *c, struct rm_res *r, unsigned int budget, bool *done);

/* ---- rm_mem.c ---- */
int rm_mem_vram_alloc(struct rm *rm, unsigned int fn, struct vgpu_rm_vidmem_params *p,
		      struct rm_mem **out);
int rm_mem_sys_alloc(struct rm *rm, unsigned int fn, struct vgpu_rm_sysmem_params *p,
		     struct rm_mem **out);
/* Migration: the memory of record @o at its recorded pages / DMA offset and IOVA. */
int rm_mem_vram_import(struct rm *rm, unsigned int fn, const struct rm_obj_rec *o,
		       struct rm_mem **out);
int rm_mem_sys_import(struct rm *rm, unsigned int fn, const struct rm_obj_rec *o,
		      struct rm_mem **out);
/* Drop one reference; the last frees the memory and returns quota. Device lock not held. */
void rm_mem_put(struct rm *rm, struct rm_mem *m);
void rm_mem_get(struct rm *rm, struct rm_mem *m);

/* ---- rm_event.c ---- */
/* The GSP's event callback (gsp_config.event_cb, ctx = the rm). */
void rm_gsp_event(void *ctx, const struct vgpu_rpc_event *ev);
/* The event worker's idle callback (gsp_config.idle_cb): retries deferred recoveries. */
void rm_gsp_idle(void *ctx);

/* ---- rm_mig.c ---- */
/* Comparisons and lookups of the calling thread's last rm_vf_export() (tests: the export
 * sorts, so they grow as n log n in its objects, not n^2). */
uint64_t rm_mig_last_steps(void);

/* ---- rm_device.c ---- */
int rm_chan_program(struct rm *rm, unsigned int fn, const struct vgpu_rpc_chan *cfg);
int rm_chan_enable(struct rm *rm, unsigned int fn, uint32_t chid, bool on);

int rm_chan_bind_vaspace(struct rm *rm, unsigned int fn, uint32_t chid, uint64_t pdb);
void rm_chan_release(struct rm *rm, unsigned int fn, uint32_t chid);
int rm_chan_reserve(struct rm *rm, unsigned int fn, uint32_t runlist, uint32_t *chid);
/* Reserve channel @chid itself (migration): -EEXIST if it is used. */
int rm_chan_reserve_id(struct rm *rm, unsigned int fn, uint32_t chid);

#endif
