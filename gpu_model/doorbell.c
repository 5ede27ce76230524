// SPDX-License-Identifier: MIT
/* Doorbells: the per-function token rings in shared memory (layout in vgpu/gpfifo.h),
 * token validation against the function's channel table, and the engine sleep/kick
 * handshake. A token only marks its channel pending; the engine that owns the channel
 * reads GP_PUT, so channel progress has a single writer. */
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/efd.h"
#include "common/log.h"
#include "common/mapguard.h"
#include "gpu_model/gpu_internal.h"

/* A producer that claimed a slot but never filled it (a crashed guest) blocks the ring
 * this long before the slot is skipped; the periodic scan covers what it meant to ring,
 * and a token written there after all is still taken (db_late_take_locked()). */
#define DB_STUCK_NS (1 * VGPU_NSEC_PER_MSEC)

#define DB_ATOMIC(p) ((_Atomic uint32_t *)(p))

struct vgpu_doorbell_page *gpu_doorbell_page(struct gpu *g, unsigned int fn)
{
	return fn < g->nr_fns ? (struct vgpu_doorbell_page *)(g->db_pages + (size_t)fn * 4096) : NULL;
}

int gpu_doorbell_fd(const struct gpu *g)
{
	return g->db_fd;
}

int gpu_doorbell_kick_fd(const struct gpu *g, unsigned int fn)
{
	return fn < g->nr_fns ? g->fns[fn].kick_fd : -EINVAL;
}

#if defined(__SANITIZE_THREAD__)
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
static void db_tsan_ignore(bool on)
{
	if (on)
		__tsan_ignore_thread_begin();
	else
		__tsan_ignore_thread_end();
}
#else
static void db_tsan_ignore(bool on)
{
	(void)on;
}
#endif

int gpu_doorbell_page_back(struct gpu *g, unsigned int fn, int fd, uint64_t off)
{
	uint8_t *page;
	void *tmp;
	uint32_t sleeping;
	bool lost = false;
	struct stat st;
	int r = 0, guard = -1;

	if (fn >= g->nr_fns || (off & 4095))
		return -EINVAL;
	/* Another holder of the object (the guest) may shrink it under the page: the guard
	 * repairs the pollers' faulting access instead of the process dying. */
	if (fd >= 0) {
		if (fstat(fd, &st))
			return -errno;
		guard = cmn_mapguard_add(g->db_pages + (size_t)fn * 4096, 4096, fd,
					 (uint64_t)st.st_size, fn);
		if (guard < 0)
			return guard;
	} else {
		fd = g->db_fd;
		off = (uint64_t)fn * 4096;
	}
	page = g->db_pages + (size_t)fn * 4096;
	/* g->lock keeps drains off the page; db_lock keeps the sleeping count exact. */
	cmn_mutex_lock(&g->lock);
	cmn_mutex_lock(&g->db_lock);
	/* Map the new backing aside first: a failure leaves the old page in place. */
	tmp = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
	if (tmp == MAP_FAILED) {
		r = -errno;
		goto unlock;
	}
	sleeping = atomic_load(DB_ATOMIC(&((struct vgpu_doorbell_page *)page)->sleeping));
	memset(tmp, 0, 4096);
	((struct vgpu_doorbell_page *)tmp)->sleeping = sleeping;
	munmap(tmp, 4096);
	/* MAP_FIXED swaps the page atomically: lock-free readers always see one or the other.
	 * ThreadSanitizer takes the new mapping for a plain write racing with the pollers'
	 * atomic loads: it is told to ignore this thread's accesses for the swap. */
	db_tsan_ignore(true);
	if (mmap(page, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)off) ==
	    MAP_FAILED) {
		r = -errno;
		/* The old mapping may be gone: fall back to the default page. */
		lost = mmap(page, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, g->db_fd,
			    (off_t)fn * 4096) == MAP_FAILED;
	}
	db_tsan_ignore(false);
	if (lost)
		cmn_err("gpu: function %u doorbell page lost: %s", fn, cmn_strerror(r));
	/* The page in place is the new one, the default one or none: the old guard goes. */
	cmn_mapguard_del(g->fns[fn].db_guard);
	g->fns[fn].db_guard = r ? -1 : guard;
	g->fns[fn].db_stuck_since = 0;
	g->fns[fn].nr_db_late = 0;
unlock:
	if (r)
		cmn_mapguard_del(guard);
	cmn_mutex_unlock(&g->db_lock);
	cmn_mutex_unlock(&g->lock);
	return r;
}

void gpu_doorbell_ring(struct gpu *g, unsigned int fn, uint32_t token)
{
	if (fn >= g->nr_fns)
		return;
	/* Bounded: the function's guest holds the kick eventfd too and may keep it full and
	 * blocking (common/efd.h); the doorbell is in the page either way. */
	if (vgpu_doorbell_write(g->fns[fn].db, token) && cmn_efd_write(g->fns[fn].kick_fd, 1) < 0)
		cmn_dbg("gpu: kick of function %u failed", fn);
}

void gpu_engine_wake(struct gpu_engine *e)
{
	uint64_t one = 1;

	/* poked before asleep is read; the engine sets asleep before it reads poked. */
	atomic_store(&e->poked, true);
	if (atomic_load(&e->asleep) && write(e->wake_fd, &one, sizeof(one)) < 0)
		cmn_dbg("gpu: wake of engine %u failed", e->id);
}

void gpu_chan_prefetch(struct gpu_chan *c)
{
	for (unsigned int i = 0; i < GPU_PF_NR; i++) {
		uintptr_t l = atomic_load_explicit(&c->pf.line[i], memory_order_relaxed);

		if (!l)
			continue;
		__builtin_prefetch((const void *)l);
		/* A method is at most 9 dwords: its header may be near the line's end. */
		if (i == GPU_PF_PB && (l & 63) > 64 - 36)
			__builtin_prefetch((const void *)(l + 64));
	}
}

/* A token is in @db's next slot (@slot, as read): start fetching what the engine reads
 * next, the ring's head and the lines of the channel it names, so that their transfers
 * overlap instead of each waiting for the one before. Only prefetches: a token naming no
 * channel of the function's, or one whose lines moved, costs nothing but the transfers. */
static void db_prefetch(struct gpu_fn *f, struct vgpu_doorbell_page *db, uint32_t slot)
{
	unsigned int chid = slot & 0xffff;

	__builtin_prefetch(&db->head);
	if (chid < GPU_FN_MAX_CHANNELS)
		gpu_chan_prefetch(&f->chans[chid]);
}

/* One more in a count only g->lock's holder changes (readers load it atomically): a load
 * and a store, not a locked add, which would wait on the drain's path for the stores
 * before it to leave this core. Release: a reader that sees it sees what it counts. */
static void db_count_locked(struct gpu *g, atomic_uint_fast64_t *n, uint64_t by)
{
	cmn_mutex_assert_held(&g->lock);
	atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + by,
			      memory_order_release);
}

/* Judge @token against @f's channel table: the verdict counter it bumps. The engine that
 * owns the channel is woken unless it is @self, which picks right after its drain. */
static atomic_uint_fast64_t *db_judge_locked(struct gpu *g, struct gpu_engine *self,
					     struct gpu_fn *f, uint32_t token)
{
	unsigned int rl = token >> 16, chid = token & 0xffff;
	const struct gpu_priv_chan *pc;

	cmn_mutex_assert_held(&g->lock);
	if (rl >= g->nr_engines || chid >= GPU_FN_MAX_CHANNELS)
		return &f->dbc.invalid;
	pc = &f->cfg.chans[chid];
	if (!(pc->flags & GPU_CHAN_ALLOCATED) || pc->runlist != rl ||
	    gpu_chan_fenced(f, chid, pc->gen))
		return &f->dbc.invalid;
	if (!(pc->flags & GPU_CHAN_ENABLED))
		return &f->dbc.disabled;
	/* Non-resident: the bit stays set until the channel is scheduled, so it is not lost. */
	if (!(f->cfg.runlist[rl] & VGPU_BIT(chid)))
		db_count_locked(g, &f->dbc.non_resident, 1);
	else	/* a woken engine did not poll: its first look at the token is this drain */
		gpu_chan_prefetch(&f->chans[chid]);
	atomic_fetch_or(&f->pending, VGPU_BIT(chid));
	/* Not ourselves: the wake is a seq_cst store, which would wait for this drain's
	 * stores (the slot just cleared, a line the submitter wrote) to leave this core. */
	if (&g->engines[rl] != self)
		gpu_engine_wake(&g->engines[rl]);
	return &f->dbc.accepted;
}

/* Validate @token and mark its channel pending. rung is counted after the verdict, so
 * whoever sees a token counted as rung also sees how it was judged. */
static void db_token_locked(struct gpu *g, struct gpu_engine *self, struct gpu_fn *f,
			    uint32_t token)
{
	cmn_mutex_assert_held(&g->lock);
	db_count_locked(g, db_judge_locked(g, self, f, token), 1);
	db_count_locked(g, &f->dbc.rung, 1);
}

/* Remember @idx, a slot skipped while empty: its producer may only have been preempted
 * between its claim and its store, and write the token behind tail. With the list full the
 * oldest is forgotten (the periodic scan finds its work). */
static void db_late_add_locked(struct gpu *g, struct gpu_fn *f, uint32_t idx)
{
	cmn_mutex_assert_held(&g->lock);
	if (f->nr_db_late == GPU_DB_LATE_MAX) {
		memmove(f->db_late, f->db_late + 1, (GPU_DB_LATE_MAX - 1) * sizeof(f->db_late[0]));
		f->nr_db_late--;
	}
	f->db_late[f->nr_db_late++] = idx;
}

/* Take the tokens written late into skipped slots; true if there was one. A slot that a
 * producer has claimed again since (@head more than a ring past it) is the ring's again. The
 * idle poll does not look here: a late token whose producer saw no sleeper waits for the
 * engine's next pass (at most gpu_config.priv_poll_ns), not for the scan. */
static bool db_late_take_locked(struct gpu *g, struct gpu_engine *self, struct gpu_fn *f,
				uint32_t head)
{
	unsigned int kept = 0;
	bool seen = false;

	cmn_mutex_assert_held(&g->lock);
	for (unsigned int i = 0; i < f->nr_db_late; i++) {
		uint32_t idx = f->db_late[i];
		_Atomic uint32_t *slot = DB_ATOMIC(&f->db->slots[idx % VGPU_DB_SLOTS]);
		uint32_t v;

		if (head - idx > VGPU_DB_SLOTS)
			continue;
		v = atomic_load_explicit(slot, memory_order_acquire);
		if (!(v & VGPU_DB_SLOT_FULL)) {
			f->db_late[kept++] = idx;
			continue;
		}
		atomic_store_explicit(slot, 0, memory_order_relaxed);
		seen = true;
		db_token_locked(g, self, f, v & ~VGPU_DB_SLOT_FULL);
	}
	f->nr_db_late = kept;
	return seen;
}

/* @f's ring was lapped: every engine scans on its next pass instead of waiting for the
 * period, at most once a scan period for the function. The guest writes head and tail and
 * laps its ring at will: each scan reads every resident channel's GP_PUT under g->lock. */
static void db_overrun_scan_locked(struct gpu *g, struct gpu_fn *f)
{
	uint64_t now = gpu_clock_ns(g);

	cmn_mutex_assert_held(&g->lock);
	if (now < f->db_overrun_scan_at)
		return;
	f->db_overrun_scan_at = now + (g->cfg.scan_period_ns ? g->cfg.scan_period_ns
							     : VGPU_NSEC_PER_MSEC);
	db_count_locked(g, &f->dbc.overrun_scans, 1);
	for (unsigned int i = 0; i < g->nr_engines; i++)
		g->engines[i].next_scan = 0;
}

static void db_drain_fn_locked(struct gpu *g, struct gpu_engine *self, struct gpu_fn *f)
{
	struct vgpu_doorbell_page *db = f->db;
	uint32_t tail = atomic_load_explicit(DB_ATOMIC(&db->tail), memory_order_relaxed);
	uint32_t head = atomic_load_explicit(DB_ATOMIC(&db->head), memory_order_acquire);
	bool seen = false;

	cmn_mutex_assert_held(&g->lock);
	/* Tokens are judged against the channel table as it was when they were written: the
	 * GSP's write that allocated or freed a channel precedes the doorbell that names it. */
	gpu_priv_sync_locked(g);
	if (f->nr_db_late)	/* claimed before the slots at tail: judged first */
		seen = db_late_take_locked(g, self, f, head);
	if (head - tail > VGPU_DB_SLOTS) {
		/* Producers lapped us: the oldest tokens are gone, the scan finds their work. */
		uint32_t lost = head - tail - VGPU_DB_SLOTS;

		db_count_locked(g, &f->dbc.overruns, lost);
		atomic_fetch_add_explicit(DB_ATOMIC(&db->overruns), lost, memory_order_relaxed);
		tail = head - VGPU_DB_SLOTS;
		db_overrun_scan_locked(g, f);
	}
	while (tail != head) {
		_Atomic uint32_t *slot = DB_ATOMIC(&db->slots[tail % VGPU_DB_SLOTS]);
		uint32_t v = atomic_load_explicit(slot, memory_order_acquire);

		if (!(v & VGPU_DB_SLOT_FULL)) {
			uint64_t now = cmn_now_ns();

			if (f->db_stuck_tail != tail || !f->db_stuck_since) {
				f->db_stuck_tail = tail;
				f->db_stuck_since = now;
				break;
			}
			if (now - f->db_stuck_since < DB_STUCK_NS)
				break;
			f->db_stuck_since = 0;
			db_late_add_locked(g, f, tail);
			tail++;
			continue;
		}
		/* Judged before the slot is cleared: the clear takes the slot's line back from
		 * the submitter's core, and the pending bitmap's locked or would wait for it. */
		db_token_locked(g, self, f, v & ~VGPU_DB_SLOT_FULL);
		atomic_store_explicit(slot, 0, memory_order_relaxed);
		tail++;
		seen = true;
	}
	if (seen)
		atomic_store_explicit(&f->db_seen_ns, cmn_now_ns(), memory_order_relaxed);
	atomic_store_explicit(DB_ATOMIC(&db->tail), tail, memory_order_release);
}

void gpu_doorbell_drain_locked(struct gpu *g, struct gpu_engine *self)
{
	cmn_mutex_assert_held(&g->lock);
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		struct vgpu_doorbell_page *db = g->fns[fn].db;

		if (atomic_load_explicit(DB_ATOMIC(&db->head), memory_order_relaxed) !=
		    atomic_load_explicit(DB_ATOMIC(&db->tail), memory_order_relaxed) ||
		    g->fns[fn].nr_db_late)
			db_drain_fn_locked(g, self, &g->fns[fn]);
	}
}

/* Lock-free check used while polling: has any function posted a token? It watches the
 * slot the next token lands in, not head: a submitter moves head before it fills the slot,
 * so a poll that saw head move would start a drain that may find the slot still empty,
 * and the slot is the line the drain reads anyway. A claimed slot not yet filled is not
 * news: the drain (each engine pass, or after the kick a sleeping engine gets) sees it. */
bool gpu_doorbell_any(struct gpu *g)
{
	return gpu_doorbell_any_but(g, UINT_MAX, 0);
}

bool gpu_doorbell_any_but(struct gpu *g, unsigned int own_fn, uint32_t own_token)
{
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		struct vgpu_doorbell_page *db = g->fns[fn].db;
		uint32_t tail = atomic_load_explicit(DB_ATOMIC(&db->tail), memory_order_relaxed);
		unsigned int skip = fn == own_fn ? GPU_DB_OWN_SKIP : 0;
		uint32_t v;

		for (;;) {
			v = atomic_load_explicit(DB_ATOMIC(&db->slots[tail++ % VGPU_DB_SLOTS]),
						 memory_order_seq_cst);
			if (v != (own_token | VGPU_DB_SLOT_FULL) || !skip--)
				break;
		}
		if (v & VGPU_DB_SLOT_FULL) {
			db_prefetch(&g->fns[fn], db, v);
			return true;
		}
	}
	return false;
}

/* Look at the doorbells after every pause, not after the whole spin: a token is seen within
 * one pause and one look at the rings instead of up to @relax pauses later (32 pauses are
 * 0.3 us on one x86 and 1.4 us on another). Looking costs no traffic: each slot line stays
 * in this core's cache until a submitter writes it. */
bool gpu_doorbell_spin(struct gpu *g, unsigned int relax)
{
	for (unsigned int i = 0; i < relax; i++) {
		cmn_cpu_relax();
		if (gpu_doorbell_any(g))
			return true;
	}
	return false;
}

/* Advertise (delta 1) or withdraw (-1) one sleeping engine in every doorbell page. */
void gpu_doorbell_set_sleeping(struct gpu *g, int delta)
{
	cmn_mutex_lock(&g->db_lock);
	for (unsigned int fn = 0; fn < g->nr_fns; fn++)
		atomic_fetch_add_explicit(DB_ATOMIC(&g->fns[fn].db->sleeping), (uint32_t)delta,
					  memory_order_seq_cst);
	cmn_mutex_unlock(&g->db_lock);
}

void gpu_db_stats_reset(struct gpu *g, unsigned int fn)
{
	struct gpu_fn *f;

	if (fn >= g->nr_fns)
		return;
	f = &g->fns[fn];
	/* Each counter alone: a doorbell consumed meanwhile is the new tenant's anyway. */
	atomic_store(&f->dbc.rung, 0);
	atomic_store(&f->dbc.accepted, 0);
	atomic_store(&f->dbc.invalid, 0);
	atomic_store(&f->dbc.disabled, 0);
	atomic_store(&f->dbc.non_resident, 0);
	atomic_store(&f->dbc.spurious, 0);
	atomic_store(&f->dbc.bad_put, 0);
	atomic_store(&f->dbc.backwards, 0);
	atomic_store(&f->dbc.scan_found, 0);
	atomic_store(&f->dbc.overruns, 0);
	atomic_store(&f->dbc.overrun_scans, 0);
	atomic_store(&f->db_seen_ns, 0);
}

void gpu_db_stats(struct gpu *g, unsigned int fn, struct gpu_db_stats *out)
{
	struct gpu_db_counters *c;

	if (fn >= g->nr_fns)
		return;
	c = &g->fns[fn].dbc;
	*out = (struct gpu_db_stats){
		.rung = atomic_load(&c->rung),
		.accepted = atomic_load(&c->accepted),
		.invalid = atomic_load(&c->invalid),
		.disabled = atomic_load(&c->disabled),
		.non_resident = atomic_load(&c->non_resident),
		.spurious = atomic_load(&c->spurious),
		.bad_put = atomic_load(&c->bad_put),
		.backwards = atomic_load(&c->backwards),
		.scan_found = atomic_load(&c->scan_found),
		.overruns = atomic_load(&c->overruns),
		.overrun_scans = atomic_load(&c->overrun_scans),
		.last_seen_ns = atomic_load(&g->fns[fn].db_seen_ns),
	};
}
