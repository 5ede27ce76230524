/* SPDX-License-Identifier: MIT */
/* gpu_model internals shared by the model's files; not for other modules. */
#ifndef VGPU_GPU_MODEL_INTERNAL_H
#define VGPU_GPU_MODEL_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/lock.h"
#include "gpu_model/gpu.h"

#define GPU_TLB_WAYS		128	/* direct-mapped entries per page size */
#define GPU_INVAL_QUEUE		16
#define GPU_FAULT_BUF		GPU_FAULT_BUF_ENTRIES
#define GPU_GP_CACHE		16	/* GP entries fetched at once */
#define GPU_CHAN_BATCH		256	/* GP entries per turn before re-polling doorbells */
#define GPU_CHUNK_BYTES		(256u << 10)	/* copy/fill work between preemption checks */
#define GPU_DEFAULT_QUANTUM	(2 * VGPU_NSEC_PER_MSEC)
/* A slice runs at least this long (or its whole length if shorter) before a function that
 * is owed time may cut it short: bounds the switching a waiting function can cause. */
#define GPU_MIN_QUANTUM		(20 * VGPU_NSEC_PER_USEC)
#define GPU_DEFAULT_LINGER	(2 * VGPU_NSEC_PER_USEC)
#define GPU_DB_OWN_SKIP		16	/* tokens of its own a lingering channel looks past */
#define GPU_DEFAULT_PERIOD	(10 * VGPU_NSEC_PER_MSEC)
#define GPU_DEFAULT_PREEMPT_TO	(100 * VGPU_NSEC_PER_MSEC)
#define GPU_DEFAULT_SEM_TO	VGPU_NSEC_PER_SEC
#define GPU_STALL_NS		(500 * VGPU_NSEC_PER_USEC)	/* see gpu_engine_now() */
#define GPU_SPIN_YIELD_NS	(10 * VGPU_NSEC_PER_USEC)
#define GPU_PRIV_POLL_NS	VGPU_NSEC_PER_MSEC
/* Doorbell slots skipped while still empty whose late tokens are still taken (doorbell.c). */
#define GPU_DB_LATE_MAX		4u
#define GPU_ACQ_POLL_NS		(50 * VGPU_NSEC_PER_USEC)
#define GPU_METHOD_ARGS_MAX	6	/* the most arguments a method other than NOP takes */

/* The work model a slice is charged by (sched.c, slot_charge_locked()): a method costs
 * GPU_COST_METHOD units (fetching and decoding it, its share of the GP entry and of the
 * turn), one unit per byte it reads or writes and GPU_COST_ELEM per element it computes
 * (pbdma.c, method_step()). An engine converts units to ns at one rate for every
 * function: its busy time per unit over its last GPU_COST_WINDOW_NS of busy time. A
 * function's charges over its recent slices stay within GPU_COST_CLAMP times their time. */
#define GPU_COST_METHOD		1024u
#define GPU_COST_ELEM		4u
#define GPU_COST_WINDOW_NS	VGPU_NSEC_PER_SEC
#define GPU_COST_CLAMP		2u

/* ---- privileged region access (priv.c) ---- */
struct gpu_priv {
	struct gpu_priv_shared *sh;	/* writable mapping */
	bool owned;			/* from gpu_priv_open(): unmap on close */
	struct gpu *g;			/* in-process writer: wake the engines after a write */
	int kick_fd;			/* other process: eventfd to write after a write, or -1 */
	struct cmn_mutex lock;		/* one writer at a time in this process */
};

/* Consistent copy of function @fn's record; false only if @fn is out of range. */
bool gpu_priv_snapshot_fn(const struct gpu_priv_shared *sh, unsigned int fn, struct gpu_priv_fn *out);
/* Consistent copy of the scheduler words. */
void gpu_priv_snapshot_sched(const struct gpu_priv_shared *sh, uint64_t *policy,
			     uint64_t *quantum, uint64_t *period);
/* The words of function @fn's record a running turn of its channel @chid depends on. */
struct gpu_priv_turn {
	uint64_t part_base, part_size;
	uint64_t chan_flags, chan_gen;
};
/* Consistent copy of those words (a turn's check, without g->lock). */
void gpu_priv_snapshot_turn(const struct gpu_priv_shared *sh, unsigned int fn, unsigned int chid,
			    struct gpu_priv_turn *out);
/* Write the initial layout into a fresh region. */
void gpu_priv_format(struct gpu_priv_shared *sh, unsigned int nr_fns, unsigned int nr_engines,
		     uint64_t vram_size);

/* ---- TLB (mmu.c) ---- */
struct gpu_tlb_entry {
	uint64_t va;			/* page-aligned VA; valid iff size != 0 */
	uint64_t size;
	uint64_t pdb;
	uint64_t addr;			/* device VRAM offset or IOVA of the page */
	uint64_t pte;			/* flags of the leaf */
	unsigned int fn;
};

struct gpu_inval {
	unsigned int fn;
	uint64_t va, size;		/* size 0: all of fn's entries */
};

struct gpu_tlb {
	struct gpu_tlb_entry e[3][GPU_TLB_WAYS];	/* 4K, 64K, 2M */
	atomic_uint pending;		/* invalidations queued by other threads */
	struct cmn_spinlock qlock;	/* protects q[], nq, lost */
	struct gpu_inval q[GPU_INVAL_QUEUE];
	unsigned int nq;
	/* Functions whose invalidation found the queue full: all their entries go, and only
	 * theirs, so one function's flood of invalidations costs no other function its
	 * translations. */
	uint64_t lost;
};
_Static_assert(GPU_MAX_FNS <= 64, "gpu_tlb.lost has a bit per function");

/* ---- channels ---- */
/* The lines a channel's next submission will be read from (pbdma.c keeps them, the doorbell
 * poll prefetches them: doorbell.c). Host addresses, 0 = unknown. Only ever prefetched, so
 * a stale one (a mapping changed) or a wrong one (the pushbuffer wrapped) costs a useless
 * transfer, never a wrong read. */
enum { GPU_PF_USERD, GPU_PF_GP, GPU_PF_PB, GPU_PF_NR };

struct gpu_chan_pf {
	_Atomic uintptr_t line[GPU_PF_NR];	/* read by any engine's poll */
	/* owner engine: the page each was translated from, so most updates translate nothing */
	uint64_t va[GPU_PF_NR];
	uintptr_t host[GPU_PF_NR];
	uint64_t gen;			/* cfg_gen they belong to (0: none) */
	unsigned int uses;		/* updates since the pages were last translated */
};

enum gpu_run_result {
	GPU_RUN_EMPTY,		/* nothing to do */
	GPU_RUN_PROGRESS,	/* did work, may have more */
	GPU_RUN_BLOCKED,	/* waiting on a semaphore */
	GPU_RUN_STOPPED,	/* faulted or errored */
};

struct gpu_chan {
	struct gpu_priv_chan cfg;	/* snapshot taken when the engine picks it */
	uint64_t cfg_gen;		/* allocation the runtime below belongs to */
	int state_at_free;		/* state when that allocation was freed (g->lock) */
	bool running;			/* an engine executes it (g->lock) */
	bool freed_running;		/* freed during that turn: see chan_release_locked() */
	/* runtime, owned by the engine while running */
	uint32_t gp_get, gp_put;	/* gp_put: last valid GP_PUT seen */
	uint32_t gp_cache_idx, gp_cache_n;
	uint64_t gp_cache[GPU_GP_CACHE];
	bool seg_active;
	bool seg_inline;		/* the segment is USERD's inline copy, in inl[] */
	uint64_t seg_va;
	uint32_t seg_len, seg_off;	/* dwords */
	uint32_t inl[VGPU_USERD_INL_DW];
	uint64_t inl_early;		/* GP entry at gp_get whose copy the linger took, or 0 */
	/* The method in progress, its header first, as fetched when it began (mthd_held): a
	 * method resumed after a preemption, a semaphore wait or a replayed fault runs with
	 * what was fetched, whatever the guest has written over its pushbuffer since. */
	uint32_t mthd[1 + GPU_METHOD_ARGS_MAX];
	bool mthd_held;
	uint64_t progress;		/* bytes or elements of the current method done */
	uint64_t acc;			/* partial result of a resumable reduction */
	bool acq_waiting;
	bool last_heavy;		/* the last method moved data: check the slice now */
	uint64_t acq_deadline;
	bool userd_dirty;		/* gp_get not yet written back */
	bool took_early;		/* a linger ran work whose doorbell is still to come */
	uint64_t retry_at;		/* blocked on a semaphore: poll again then (g->lock) */
	/* read by other threads */
	atomic_int state;		/* enum gpu_chan_state */
	atomic_int error;		/* enum vgpu_chan_error */
	atomic_uint_fast64_t methods;
	atomic_uint pub_gp_get;
	struct gpu_status_chan *st;	/* this channel's words in the status region */
	struct gpu_chan_pf pf;
};

struct gpu_db_counters {
	atomic_uint_fast64_t rung, accepted, invalid, disabled, non_resident, spurious, bad_put,
		backwards, scan_found, overruns, overrun_scans;
};

struct gpu_fn {
	unsigned int id;
	struct gpu_priv_fn cfg;		/* snapshot (g->lock) */
	uint64_t cfg_seq;
	struct gpu_chan chans[GPU_FN_MAX_CHANNELS];
	atomic_uint_fast64_t pending;	/* doorbell pending bitmap of chids */
	/* The chids a pending bit gets run: allocated, enabled, resident on their runlist and
	 * not fenced, of a function whose scheduling is enabled (gpu_fn_schedulable_locked();
	 * read without g->lock by others_pending(), pbdma.c). */
	_Atomic uint64_t schedulable;
	/* Per channel id the allocation (gen) the owner fenced off, 0: none (gpu_chan_fence();
	 * written under g->lock, read by turns without it). */
	_Atomic uint64_t fence_gen[GPU_FN_MAX_CHANNELS];
	_Atomic uint64_t linger_waits;	/* chan_linger() waits begun on its channels */
	/* doorbell */
	struct vgpu_doorbell_page *db;
	int kick_fd;
	uint32_t db_stuck_tail;		/* empty slot seen at this tail... */
	uint64_t db_stuck_since;	/* ...since then (0: none) */
	int db_guard;			/* the doorbell page's mapguard slot; -1: none */
	uint32_t db_late[GPU_DB_LATE_MAX];	/* slots skipped while empty, oldest first */
	unsigned int nr_db_late;
	uint64_t db_overrun_scan_at;	/* engine clock from which an overrun of its ring
					 * brings the scans forward again (g->lock) */
	struct gpu_db_counters dbc;
	atomic_uint_fast64_t db_seen_ns;	/* when a token was last consumed */
	/* interrupts */
	atomic_uint intr;
	int intr_fd;
	/* fault buffer */
	struct cmn_spinlock fault_lock;	/* protects faults[], fhead, fcount */
	struct vgpu_fault_entry faults[GPU_FAULT_BUF];
	unsigned int fhead, fcount;
	/* VRAM slice backing (vram_lock) */
	int slice_fd;
	int slice_guard;		/* its common/mapguard.h slot; -1: none */
	uint64_t slice_off, slice_size;
	/* telemetry per engine (g->lock) */
	struct gpu_sched_stats tel[GPU_MAX_ENGINES];
	unsigned int next_chan[GPU_MAX_ENGINES];
	uint64_t vtime[GPU_MAX_ENGINES];	/* charged time / weight (g->lock) */
	/* its recent slices' busy time and charge, decayed (sched.c, slot_charge_locked()) */
	double cost_ns[GPU_MAX_ENGINES], cost_charged[GPU_MAX_ENGINES];
};

struct gpu_engine {
	struct gpu *g;
	unsigned int id;
	pthread_t thread;
	int wake_fd;
	int epfd;
	atomic_bool asleep;
	atomic_bool poked;		/* work was routed here: do not go to sleep */
	struct gpu_tlb tlb;
	/* scheduler state (g->lock) */
	int cur_fn;			/* function owning the slice, -1 none */
	uint64_t slot_start, slot_end;
	uint64_t yield_at;		/* look for an owed function from then on */
	uint64_t hold_start, hold_until;	/* fixed share: unreserved time held idle
						 * (hold_until 0: none) */
	uint64_t free_vtime;		/* fixed share: virtual time of the unreserved part */
	unsigned int rr_fn;
	uint64_t vclock;		/* vtime of the last function given a slice */
	uint64_t next_scan;
	uint64_t idle_from;		/* idle inside cur_fn's reserved slice since (0: not) */
	/* the current slice's charge (slot_charge_locked()) */
	uint64_t slot_units;		/* work units of its turns that did work */
	uint64_t slot_plain;		/* run time of its turns that did none */
	uint64_t slot_idle;		/* time idle in it */
	/* the engine's rate: busy time and work units, each decayed over GPU_COST_WINDOW_NS */
	double rate_ns, rate_units;
	/* host-stall accounting, engine thread only */
	uint64_t last_tick;		/* last clock read while busy (0: was idle) */
	uint64_t last_waits;		/* iommu_thread_waits() then */
	uint64_t waited;		/* total time of the gaps that waited in the IOMMU */
	uint64_t stolen;		/* total time the host took the thread away */
	uint64_t slot_stolen0;		/* stolen at the start of the current slice */
	bool short_slice;		/* engine thread only: asleep on the shortest host slice */
};

struct gpu {
	struct gpu_config cfg;
	unsigned int nr_fns;
	/* VRAM: one reserved range; the device memfd, slices overlaid on it */
	uint8_t *vram;
	uint64_t vram_size;
	int vram_fd;
	struct cmn_mutex vram_lock;	/* protects the slice fields of fns[] */
	/* dirty tracking of engine writes (dirty.c): a bit per 4 KiB page of VRAM, set only
	 * while someone tracks (a live migration), so the hot path pays one relaxed load */
	_Atomic uint64_t *dirty;
	atomic_uint dirty_users;
	/* status region: written here, read by the GSP */
	int status_fd;
	struct gpu_status_shared *status;
	/* privileged region: model's read-only view, and the in-process writer */
	int priv_fd;
	int priv_kick_fd;		/* eventfd a GSP in another process writes */
	const struct gpu_priv_shared *priv;
	struct gpu_priv *priv_writer;
	atomic_uint_fast64_t priv_gen_seen;	/* written under g->lock */
	atomic_uint_fast64_t fences;	/* bumped by every gpu_chan_fence(): turns look again */
	uint64_t sched_policy, sched_quantum, sched_period;	/* g->lock */
	/* doorbell pages */
	int db_fd;
	uint8_t *db_pages;
	/* Orders sleeping-count updates against a page being re-backed (so no update is
	 * lost in the copy); taken after g->lock, never held while sleeping. */
	struct cmn_mutex db_lock;
	struct cmn_mutex lock;		/* the model lock: snapshots, scheduling, channel picks */
	atomic_bool stop;
	struct gpu_engine engines[GPU_MAX_ENGINES];
	unsigned int nr_engines;
	struct gpu_fn fns[GPU_MAX_FNS];
};

/* ---- execution context of one channel turn ---- */
struct gpu_ctx {
	struct gpu *g;
	struct gpu_engine *e;
	struct gpu_fn *f;
	struct gpu_chan *c;
	unsigned int chid;
	uint64_t part_base, part_size;
	uint64_t priv_gen;		/* privileged generation the turn last checked against */
	uint64_t fences;		/* g->fences then */
	bool gone;			/* the channel's allocation or partition changed: stop */
	uint64_t cost;			/* work units of this turn so far (GPU_COST_METHOD) */
	uint64_t linger_ns;		/* of the turn, spent waiting for more (chan_linger()) */
	uint64_t lingered;		/* submissions those waits found */
	/* one-entry translation cache for VRAM pages, valid during this turn */
	uint64_t mc_va, mc_size, mc_addr, mc_pte;
	/* last fault */
	uint64_t fault_va;
	int fault_reason, fault_access;
};

/* Result of translating one VA. */
struct gpu_xlate {
	uint64_t aper;			/* VGPU_GMMU_APER_VRAM / _SYS / _SVA */
	uint64_t addr;			/* device VRAM offset (VRAM), IOVA (SYS) or process
					 * virtual address (SVA) of va */
	uint64_t avail;			/* bytes from va to the end of its page */
	uint64_t pte;
};

/* priv.c */
void gpu_priv_sync_locked(struct gpu *g);

/* vram.c */
int gpu_vram_init(struct gpu *g, uint64_t size);
void gpu_vram_fini(struct gpu *g);

/* mmu.c */
int gpu_mmu_walk(struct gpu *g, uint64_t part_base, uint64_t part_size, uint64_t pdb,
		 uint64_t va, int access, struct gpu_xlate *x, uint64_t *page_size);
int gpu_ctx_xlate(struct gpu_ctx *ctx, uint64_t va, int access, struct gpu_xlate *x);
void gpu_tlb_process(struct gpu_ctx *ctx);
/* Record the turn's fault (ctx->fault_*) in its function's buffer, the status region and an
 * interrupt; @replayable: the channel stalls (FAULTED) once the entry is in. */
void gpu_fault_record(struct gpu_ctx *ctx, bool replayable);
void gpu_tlb_invalidate_from(struct gpu_ctx *ctx, uint64_t va, uint64_t size);
/* Drop every entry of the turn's function from its own engine's TLB. */
void gpu_tlb_drop_fn(struct gpu_ctx *ctx);

/* dirty.c: set the dirty bits of device VRAM [off, off+len) after an engine wrote it. */
void gpu_dirty_mark_slow(struct gpu *g, uint64_t off, uint64_t len);
static inline void gpu_dirty_mark(struct gpu *g, uint64_t off, uint64_t len)
{
	if (atomic_load_explicit(&g->dirty_users, memory_order_relaxed))
		gpu_dirty_mark_slow(g, off, len);
}

/* mem.c: 0 or a positive enum vgpu_fault_reason (fault details left in ctx) */
int gpu_va_read(struct gpu_ctx *ctx, uint64_t va, void *buf, uint64_t len);
int gpu_va_write(struct gpu_ctx *ctx, uint64_t va, const void *buf, uint64_t len);
/* Physical access for USERD: 0 or -EFAULT. Called with g->lock held, an unmapped USERD in
 * system memory faults at once: no page request (mem.c, userd_access()). */
int gpu_phys_rw(struct gpu *g, unsigned int fn, uint64_t part_base, uint64_t part_size,
		uint64_t aper, uint64_t addr, void *buf, uint64_t len, bool write);
int gpu_sys_rw(struct gpu *g, unsigned int fn, uint64_t iova, void *buf, uint64_t len, bool write);
/* Host address of @c's USERD (its first @len bytes), or NULL; for a caller inside an
 * iommu_access_begin() bracket, valid until the bracket ends. No page request under
 * g->lock, as gpu_phys_rw(). */
const struct vgpu_userd *gpu_userd_host(struct gpu *g, unsigned int fn, const struct gpu_chan *c,
					uint64_t part_base, uint64_t part_size, uint64_t len);
/* Copy to/from a non-VRAM aperture (SYS: IOVA; SVA: address of the process bound at the
 * function's SVA PASID): 0 or -EFAULT / -EACCES (logged by the IOMMU). */
int gpu_aper_rw(struct gpu *g, unsigned int fn, uint64_t aper, uint64_t addr, void *buf,
		uint64_t len, bool write);
/* gpu_aper_rw() of *@n bytes that stops after a page whose access waited for a page
 * response: 0 with *@n = the bytes moved; or the fault with *@bad_off = the offset of the
 * failing page, so a fault inside a large GMMU page names its page (*@n as it was: a part
 * of the failing page may have been written too). */
int gpu_aper_rw_at(struct gpu *g, unsigned int fn, uint64_t aper, uint64_t addr, void *buf,
		   uint64_t *n, bool write, uint64_t *bad_off);
int gpu_sys_atomic(struct gpu *g, unsigned int fn, uint64_t iova, unsigned int size,
		   uint64_t *val, bool write);
/* Copy between VRAM (@buf) and the system page at @iova, at most *@n bytes, up to the page's
 * end (*@n = bytes copied); @stream as for gpu_copy(). 0 or -EFAULT / -EACCES. */
int gpu_sys_copy(struct gpu *g, unsigned int fn, uint64_t iova, void *buf, uint64_t *n, bool write,
		 bool stream);
/* memcpy(), or with @stream, stores that bypass the caches (ordered before what follows);
 * memmove() where the ranges overlap. */
void gpu_copy(void *dst, const void *src, uint64_t n, bool stream);
/* The default of gpu_config.copy_stream_min for this machine's caches. */
uint64_t gpu_copy_stream_default(void);
/* Atomic 32/64-bit load/store at a VA (semaphores, USERD): 0 or a fault reason. */
int gpu_va_load(struct gpu_ctx *ctx, uint64_t va, unsigned int size, uint64_t *val);
int gpu_va_store(struct gpu_ctx *ctx, uint64_t va, unsigned int size, uint64_t val);

/* pbdma.c */
enum gpu_run_result gpu_chan_run(struct gpu_ctx *ctx);
void gpu_chan_reset_runtime(struct gpu_chan *c);
/* Whether two allocations of a channel have the same geometry (what a restore keeps; a
 * freed record keeps everything but its flags). */
static inline bool gpu_chan_same_geometry(const struct gpu_priv_chan *a,
					  const struct gpu_priv_chan *b)
{
	return a->runlist == b->runlist && a->pdb == b->pdb && a->gpfifo_va == b->gpfifo_va &&
	       a->gpfifo_entries == b->gpfifo_entries && a->userd_aper == b->userd_aper &&
	       a->userd_addr == b->userd_addr;
}
void gpu_chan_adopt(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c,
		    const struct gpu_priv_chan *pc);
/* Is allocation @gen of @f's channel @chid fenced off (gpu_chan_fence())? A fenced channel
 * is never picked, its doorbells are invalid and a turn of it stops; the next allocation of
 * the id (the next gen) is not fenced. */
static inline bool gpu_chan_fenced(struct gpu_fn *f, unsigned int chid, uint64_t gen)
{
	return gen && atomic_load_explicit(&f->fence_gen[chid], memory_order_acquire) == gen;
}
void gpu_chan_set_error(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c,
			uint64_t part_base, uint64_t part_size, enum vgpu_chan_error err,
			uint32_t method);
int gpu_userd_read_put(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c,
		       uint64_t part_base, uint64_t part_size, uint32_t *put);

/* doorbell.c */
void gpu_doorbell_drain_locked(struct gpu *g, struct gpu_engine *self);
bool gpu_doorbell_any(struct gpu *g);
/* gpu_doorbell_any(), but up to GPU_DB_OWN_SKIP tokens @own_token at the front of function
 * @own_fn's ring are no news: a lingering channel's own (chan_linger()). */
bool gpu_doorbell_any_but(struct gpu *g, unsigned int own_fn, uint32_t own_token);
/* Pause @relax times, returning early (true) as soon as a doorbell holds a token. */
bool gpu_doorbell_spin(struct gpu *g, unsigned int relax);
/* Start the transfers of the lines @c's next submission is read from (see gpu_chan_pf). */
void gpu_chan_prefetch(struct gpu_chan *c);
void gpu_doorbell_set_sleeping(struct gpu *g, int delta);
void gpu_engine_wake(struct gpu_engine *e);

/* gpu.c */
void gpu_intr_raise(struct gpu *g, struct gpu_fn *f, uint32_t bits);

/* ThreadSanitizer cannot follow causality through the GSP, another process: an owner's
 * request (made after it wrote guest memory) changes the privileged region there, and the
 * device's errors reach the owner's event handler only through it. The owner releases the
 * struct gpu before each GSP request and acquires it on each device event (rm/); the model
 * acquires it when it sees a new privileged generation and releases it when it counts an
 * error or fault in the status region. No-ops in other builds. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define GPU_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define GPU_TSAN_RELEASE(p) __tsan_release((void *)(p))
#else
#define GPU_TSAN_ACQUIRE(p) ((void)(p))
#define GPU_TSAN_RELEASE(p) ((void)(p))
#endif

/* Status-region words: plain atomic stores (the GSP copies them with atomic loads). */
static inline void gpu_status_put(uint64_t *w, uint64_t v)
{
	__atomic_store_n(w, v, __ATOMIC_RELAXED);
}

/* Bump a status count after the words it describes: release, so a reader that loads the
 * count with acquire sees them; then the region's event count the GSP polls. */
static inline void gpu_status_bump(struct gpu *g, uint64_t *count)
{
	GPU_TSAN_RELEASE(g);
	__atomic_fetch_add(count, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&g->status->events, 1, __ATOMIC_RELEASE);
}

/* sched.c */
void *gpu_engine_main(void *arg);
/* Work out @f->schedulable again after its record or a fence of it changed (g->lock). */
void gpu_fn_schedulable_locked(struct gpu *g, struct gpu_fn *f);
uint64_t gpu_engine_now(struct gpu_engine *e);
/* Anything for @e (a stop, a poke, a token, a GSP change) while it runs @fn's channel
 * whose doorbell token is @token: up to GPU_DB_OWN_SKIP of its own tokens are no news. */
bool gpu_engine_news_but(struct gpu_engine *e, unsigned int fn, uint32_t token);
/* The engines' time source: the configured clock, else CLOCK_MONOTONIC. */
static inline uint64_t gpu_clock_ns(const struct gpu *g)
{
	return g->cfg.clock_ns ? g->cfg.clock_ns(g->cfg.clock_arg) : cmn_now_ns();
}

#endif
