// SPDX-License-Identifier: MIT
/* Scheduler and engine workers. Each engine is a thread that time-slices functions
 * (best effort, equal share, fixed share), runs their resident channels on its runlist,
 * drains doorbells, scans GP_PUT against GP_GET, and when idle sleeps on its eventfds
 * (right after work, it polls the doorbells a bounded number of times first). All
 * scheduling state is under g->lock; a channel's execution runs outside it.
 *
 * Slices are picked by virtual time (time charged / weight). A running slice is cut short,
 * once it has run GPU_MIN_QUANTUM, when another function that has work is owed time: its
 * virtual time plus one slice is below what the running function's would be if charged
 * now. Every slice is charged what it really used: the work its methods did, priced by a
 * work model at one rate for every function, and the time it was idle (up to its end) or
 * polled without work (slot_charge_locked()); the time the host took from the engine
 * thread extends a slice and is charged to nobody. Cut slices and overruns carry over into
 * the next picks and shares converge. */
#include <errno.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/efd.h"
#include "common/log.h"
#include "common/share.h"
#include "gpu_model/gpu_internal.h"
#include "iommu_model/iommu.h"

/* Doorbell polls of an engine that just ran work, before it sleeps (engine_idle()). */
#define SCHED_IDLE_POLLS	64
/* Reading the engine thread's CPU time is a system call (about 0.2 us on a KVM guest), so
 * the doorbell -> first method path reads it only where the host may have taken the
 * thread away: a mark at most MARK_FRESH_NS old is carried forward instead (the clock moved
 * that little, so the host took at most that much), and a spinning engine renews its mark
 * every MARK_RENEW_NS (engine_idle(), mark_woke()). */
#define MARK_FRESH_NS		(1 * VGPU_NSEC_PER_USEC)
#define MARK_RENEW_NS		(4 * VGPU_NSEC_PER_USEC)
#define MARK_SPUN_NS		(8 * VGPU_NSEC_PER_USEC)

static uint64_t def(uint64_t v, uint64_t d)
{
	return v ? v : d;
}

/* The engine's clock. A busy engine reads it at least every few tens of microseconds
 * (each bounded work chunk, each turn); a longer gap means the host descheduled the
 * thread. That time is not the function's: it is not charged, and the slice is extended
 * by it, so shares stay right on a loaded host (as a VM's steal time). Unless the thread
 * waited in the IOMMU in it, for a page response or an SVA copy: the guest decides how long
 * those take, and that time is the slice's, so the slice and the preemption timeout hold.
 * A host stall in such a gap goes to the function with it. */
uint64_t gpu_engine_now(struct gpu_engine *e)
{
	uint64_t now = gpu_clock_ns(e->g), waits = iommu_thread_waits();

	if (e->last_tick && waits != e->last_waits) {
		e->waited += now - e->last_tick;
	} else if (e->last_tick && now - e->last_tick > GPU_STALL_NS) {
		e->stolen += now - e->last_tick;
		if (e->cur_fn >= 0)
			e->slot_end += now - e->last_tick;
	}
	e->last_waits = waits;
	e->last_tick = now;
	return now;
}

/* Is @c stopped (in error, stalled on a fault, freed)? Nothing runs it until that changes:
 * neither its doorbells nor a semaphore wait it was in. */
static bool chan_stopped(const struct gpu_chan *c)
{
	int st = atomic_load(&c->state);

	return st == GPU_CHAN_STATE_ERROR || st == GPU_CHAN_STATE_FAULTED ||
	       st == GPU_CHAN_STATE_FREE;
}

/* Can channel @chid of @f run on @e now? Refreshes its config snapshot. */
static bool chan_runnable_locked(struct gpu_engine *e, struct gpu_fn *f, unsigned int chid,
				 uint64_t now)
{
	const struct gpu_priv_chan *pc = &f->cfg.chans[chid];
	struct gpu_chan *c = &f->chans[chid];

	cmn_mutex_assert_held(&e->g->lock);
	if (!(f->cfg.runlist[e->id] & VGPU_BIT(chid)) || !(pc->flags & GPU_CHAN_ENABLED) ||
	    pc->runlist != e->id || c->running || gpu_chan_fenced(f, chid, pc->gen))
		return false;
	/* A new allocation, or a restore whose adoption waited for the engine to let go. */
	if (c->cfg_gen != pc->gen || atomic_load(&c->state) == GPU_CHAN_STATE_FREE)
		gpu_chan_adopt(e->g, f, c, pc);
	c->cfg = *pc;
	if (chan_stopped(c))
		return false;
	if (c->acq_waiting)
		return now >= c->retry_at ||
		       (atomic_load_explicit(&f->pending, memory_order_relaxed) & VGPU_BIT(chid));
	return c->seg_active || c->gp_get != c->gp_put ||
	       (atomic_load_explicit(&f->pending, memory_order_relaxed) & VGPU_BIT(chid));
}

/* Next runnable channel of @f on @e, round robin: the resident channels from next_chan on,
 * visiting only the runlist's set bits (rotated so the first is next_chan's or after). */
static struct gpu_chan *fn_pick_chan_locked(struct gpu_engine *e, struct gpu_fn *f, uint64_t now)
{
	uint64_t rl = f->cfg.runlist[e->id];
	unsigned int start = f->next_chan[e->id] % GPU_FN_MAX_CHANNELS;

	cmn_mutex_assert_held(&e->g->lock);
	_Static_assert(GPU_FN_MAX_CHANNELS == 64, "a runlist is one word");
	for (uint64_t rot = start ? rl >> start | rl << (64 - start) : rl; rot; rot &= rot - 1) {
		unsigned int chid = (start + cmn_ctz(rot)) % GPU_FN_MAX_CHANNELS;

		if (chan_runnable_locked(e, f, chid, now)) {
			f->next_chan[e->id] = chid + 1;
			return &f->chans[chid];
		}
	}
	return NULL;
}

static bool fn_has_chans_locked(struct gpu_engine *e, struct gpu_fn *f)
{
	cmn_mutex_assert_held(&e->g->lock);
	for (unsigned int c = 0; c < GPU_FN_MAX_CHANNELS; c++) {
		const struct gpu_priv_chan *pc = &f->cfg.chans[c];

		/* A fenced channel is not the function's to run: it reserves no slice. */
		if ((pc->flags & GPU_CHAN_ALLOCATED) && pc->runlist == e->id &&
		    !gpu_chan_fenced(f, c, pc->gen))
			return true;
	}
	return false;
}

/* Length of @f's slice under the current policy; 0 if it takes no part. */
static uint64_t fn_slice_locked(struct gpu_engine *e, struct gpu_fn *f)
{
	struct gpu *g = e->g;

	cmn_mutex_assert_held(&e->g->lock);
	if (!f->cfg.sched.enabled)
		return 0;
	switch (g->sched_policy) {
	case GPU_SCHED_EQUAL_SHARE:
		return fn_has_chans_locked(e, f) ? def(g->sched_quantum, GPU_DEFAULT_QUANTUM) : 0;
	case GPU_SCHED_FIXED_SHARE:
		/* Equal slices, handed out in proportion to the weights by virtual time: short
		 * slices keep every share accurate over short windows. */
		return f->cfg.sched.weight ? def(g->sched_quantum, GPU_DEFAULT_QUANTUM) : 0;
	default:
		return def(f->cfg.sched.quantum_ns, GPU_DEFAULT_QUANTUM);
	}
}

/* Weight of @f whose slice is @len: shares are proportional to it. Best effort is round
 * robin by quantum, so its weight is the quantum; equal share weighs all alike. */
static uint64_t fn_weight_locked(struct gpu_engine *e, struct gpu_fn *f, uint64_t len)
{
	cmn_mutex_assert_held(&e->g->lock);
	switch (e->g->sched_policy) {
	case GPU_SCHED_EQUAL_SHARE:
		return 1000;
	case GPU_SCHED_FIXED_SHARE:
		return cmn_max(f->cfg.sched.weight, 1);
	default:
		return cmn_max(len / 1000, 1);
	}
}

/* Virtual time of one slice of @f: the credit a function back from idle may have. */
static uint64_t fn_lag_locked(struct gpu_engine *e, struct gpu_fn *f, uint64_t len)
{
	return len * 1024 / fn_weight_locked(e, f, len);
}

/* Fixed share: the per mille of the engine no enabled function reserves. Those slices
 * are spent idle, so every function gets weight/1000 of the engine, no more. */
static uint64_t unreserved_weight_locked(struct gpu_engine *e)
{
	struct gpu *g = e->g;
	uint64_t sum = 0;

	cmn_mutex_assert_held(&g->lock);
	for (unsigned int fn = 0; fn < g->nr_fns; fn++)
		if (fn_slice_locked(e, &g->fns[fn]))
			sum += g->fns[fn].cfg.sched.weight;
	return sum < 1000 ? 1000 - sum : 0;
}

static void idle_account_locked(struct gpu_engine *e, uint64_t now)
{
	cmn_mutex_assert_held(&e->g->lock);
	if (!e->idle_from || e->cur_fn < 0)
		return;
	struct gpu_sched_stats *t = &e->g->fns[e->cur_fn].tel[e->id];

	/* Clipped at the slice end: see slot_end_locked(). */
	now = cmn_min(now, e->slot_end);
	if (now > e->idle_from) {
		t->idle_ns += now - e->idle_from;
		e->slot_idle += now - e->idle_from;
	}
	e->idle_from = 0;
}

/* Decay @a and @b by the share of GPU_COST_WINDOW_NS that @ns is, then add @ns and @v. */
static void cost_fold(double *a, double *b, uint64_t ns, double v)
{
	double keep = ns >= GPU_COST_WINDOW_NS ? 0 : 1 - (double)ns / GPU_COST_WINDOW_NS;

	*a = *a * keep + (double)ns;
	*b = *b * keep + v;
}

/* What the current slice of @f, which used @used ns of the engine (host stalls taken out),
 * is charged: the time it was idle and the run time of its turns that did no work (polls
 * of a semaphore, a channel that faulted) as they were, and the rest, the turns that did
 * work, by that work: its units (GPU_COST_METHOD) at the engine's rate. The engine
 * thread's CPU time per unit of work varies from slice to slice with what the host does
 * (steal time that the thread's CPU clock counts, other programs evicting the caches,
 * the CPU's frequency), and charged as time it made a function that ran in a slow stretch
 * pay for work it did not get. A GPU's time for a method is the GPU's; the rate, the
 * engine's busy time per unit over its recent slices of all functions (this one
 * included, so a rate of a few slices cannot be far off), keeps a slice's charge about
 * its length, and every function pays the same for the same work. Over its recent
 * slices, a function is charged at least 1/GPU_COST_CLAMP of their time and at most
 * GPU_COST_CLAMP times it: work the model prices far below what it costs the emulator
 * (a method that invalidates every TLB, copies through the IOMMU) buys a function at most
 * GPU_COST_CLAMP squared times the engine time of another of the same weight (its own
 * charges held up, the other's, at a rate it raised, held down), while a slice that the
 * host slowed is charged its work alone. The rate and those bounds see at most twice
 * the slice's length (@len) of its time: a slice the host stretched many times over
 * (it took the thread unseen, and the slice ran over its end by that much) would raise
 * the rate for a second, or hold the function's charges up, by a long stretch that was
 * the host's, not the work's. */
static uint64_t slot_charge_locked(struct gpu_engine *e, struct gpu_fn *f, uint64_t used,
				   uint64_t len)
{
	uint64_t fixed = e->slot_idle + e->slot_plain, busy = used > fixed ? used - fixed : 0;
	uint64_t seen = cmn_min(busy, 2 * cmn_max(len, (uint64_t)GPU_MIN_QUANTUM));
	double *ft = &f->cost_ns[e->id], *fc = &f->cost_charged[e->id], charge;

	cmn_mutex_assert_held(&e->g->lock);
	if (!e->slot_units)
		return fixed + busy;
	cost_fold(&e->rate_ns, &e->rate_units, seen, (double)e->slot_units);
	charge = (double)e->slot_units * e->rate_ns / e->rate_units;
	cost_fold(ft, fc, seen, charge);
	if (*fc < *ft / GPU_COST_CLAMP)
		charge += *ft / GPU_COST_CLAMP - *fc;
	else if (*fc > *ft * GPU_COST_CLAMP)
		charge -= cmn_min(charge, *fc - *ft * GPU_COST_CLAMP);
	*fc = cmn_min(cmn_max(*fc, *ft / GPU_COST_CLAMP), *ft * GPU_COST_CLAMP);
	return fixed + (uint64_t)charge;
}

/* Close the current slice and charge it (slot_charge_locked(): the work it did, its
 * overrun included) to the function's virtual time: the next picks make up for slices the
 * host stretched or cut short. A slice that ends idle is charged up to its end only: an
 * engine that overslept its wake-up there lost that time to the host, as stolen time, not
 * to the function; on a loaded host the oversleep can be many slices long, and charged, it
 * would hold the function off the engine for as long. */
static void slot_end_locked(struct gpu_engine *e, uint64_t now)
{
	struct gpu_fn *f = &e->g->fns[e->cur_fn];
	uint64_t len = fn_slice_locked(e, f);
	uint64_t charge_end = e->idle_from && now > e->slot_end ?
				      cmn_max(e->slot_end, e->idle_from) : now;

	cmn_mutex_assert_held(&e->g->lock);
	idle_account_locked(e, now);
	/* Time past the slice's end until the switch is the preemption cost. */
	uint64_t stolen = e->stolen - e->slot_stolen0, used = charge_end - e->slot_start;

	if (now > e->slot_end)
		f->tel[e->id].preempt_ns += now - e->slot_end;
	f->tel[e->id].stall_ns += stolen;
	used = used > stolen ? used - stolen : 0;
	f->vtime[e->id] += slot_charge_locked(e, f, used, len) * 1024 / fn_weight_locked(e, f, len);
	e->cur_fn = -1;
}

/* Is a function other than the running one owed time and has work? Owed: its virtual
 * time is below e->vclock, the running function's when its slice began and then the least
 * of all: had it had work at that pick, it would have been picked. A busy function never
 * is, so a busy round keeps whole slices whatever the weights; one that was skipped for
 * want of work (best effort) and has some now is. Judged against the running function's
 * virtual time as it grows instead, a light function's slice (which adds the most virtual
 * time per us) would be cut for every heavier busy function next in line, and each extra
 * switch costs it work. */
static bool owed_waiting_locked(struct gpu_engine *e, uint64_t now)
{
	struct gpu *g = e->g;
	struct gpu_fn *cur = &g->fns[e->cur_fn];

	cmn_mutex_assert_held(&g->lock);
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		struct gpu_fn *f = &g->fns[fn];
		uint64_t len = fn_slice_locked(e, f);

		if (f == cur || !len || f->vtime[e->id] >= e->vclock)
			continue;
		for (unsigned int chid = 0; chid < GPU_FN_MAX_CHANNELS; chid++)
			if ((f->cfg.runlist[e->id] & VGPU_BIT(chid)) &&
			    chan_runnable_locked(e, f, chid, now))
				return true;
	}
	return false;
}

/* Fixed share: hold the engine idle for one slice of the unreserved part, if that part is
 * furthest behind (@best_v: the least virtual time of the functions). */
static bool unreserved_turn_locked(struct gpu_engine *e, uint64_t now, uint64_t best_v)
{
	uint64_t w, len = def(e->g->sched_quantum, GPU_DEFAULT_QUANTUM), lag;

	cmn_mutex_assert_held(&e->g->lock);
	if (e->g->sched_policy != GPU_SCHED_FIXED_SHARE || !(w = unreserved_weight_locked(e)))
		return false;
	lag = len * 1024 / w;
	if (e->free_vtime + lag < e->vclock)
		e->free_vtime = e->vclock - lag;
	if (e->free_vtime >= best_v)
		return false;
	e->vclock = e->free_vtime;
	e->hold_start = now;
	e->hold_until = now + len;
	return true;
}

/* Charge an unreserved hold that has run out what it really lasted, as a slice is. */
static void unreserved_end_locked(struct gpu_engine *e, uint64_t now)
{
	uint64_t w = unreserved_weight_locked(e);

	cmn_mutex_assert_held(&e->g->lock);
	if (w)
		e->free_vtime += (now - e->hold_start) * 1024 / w;
	e->hold_until = 0;
}

/* Start a slice for the eligible function furthest behind its share (least virtual time);
 * best effort skips functions without work. */
static struct gpu_chan *slot_begin_locked(struct gpu_engine *e, uint64_t now)
{
	struct gpu *g = e->g;
	struct gpu_chan *best_c = NULL;
	struct gpu_fn *best = NULL;
	uint64_t best_len = 0;

	cmn_mutex_assert_held(&e->g->lock);
	for (unsigned int i = 0; i < g->nr_fns; i++) {
		unsigned int fn = (e->rr_fn + i) % g->nr_fns;
		struct gpu_fn *f = &g->fns[fn];
		uint64_t len = fn_slice_locked(e, f), lag;
		struct gpu_chan *c = NULL;

		if (!len)
			continue;
		if (g->sched_policy == GPU_SCHED_BEST_EFFORT) {
			c = fn_pick_chan_locked(e, f, now);
			if (!c)
				continue;
		}
		/* A function back from idle gets at most one slice of credit, not a backlog. */
		lag = fn_lag_locked(e, f, len);
		if (f->vtime[e->id] + lag < e->vclock)
			f->vtime[e->id] = e->vclock - lag;
		if (!best || f->vtime[e->id] < best->vtime[e->id]) {
			if (best_c)
				best_c->running = false;
			best = f;
			best_c = c;
			best_len = len;
			if (c)
				c->running = true;	/* hold it while we look further */
		}
	}
	if (best_c)
		best_c->running = false;
	if (!best || unreserved_turn_locked(e, now, best->vtime[e->id]))
		return NULL;
	e->rr_fn = best->id + 1;
	e->vclock = best->vtime[e->id];
	e->cur_fn = (int)best->id;
	e->slot_start = now;
	e->slot_end = now + best_len;
	e->yield_at = now + cmn_min(best_len, (uint64_t)GPU_MIN_QUANTUM);
	e->slot_stolen0 = e->stolen;
	e->slot_units = e->slot_plain = e->slot_idle = 0;
	best->tel[e->id].slices++;
	best->tel[e->id].target_slice_ns = best_len;
	return best_c ? best_c : fn_pick_chan_locked(e, best, now);
}

static struct gpu_chan *sched_pick_locked(struct gpu_engine *e, uint64_t now)
{
	struct gpu_chan *c;

	cmn_mutex_assert_held(&e->g->lock);
	/* A function whose entry was disabled (a stop, a migration's switchover) loses the
	 * rest of its slice: no turn of it starts after gpu_fn_quiesce() saw none running. */
	if (e->cur_fn >= 0 && (now >= e->slot_end || !e->g->fns[e->cur_fn].cfg.sched.enabled))
		slot_end_locked(e, now);
	if (e->cur_fn >= 0 && now >= e->yield_at) {
		/* Look again a minimum quantum later, not at every turn. */
		e->yield_at = now + GPU_MIN_QUANTUM;
		if (owed_waiting_locked(e, now)) {
			e->g->fns[e->cur_fn].tel[e->id].preempted++;
			slot_end_locked(e, now);
		}
	}
	if (e->cur_fn < 0 && e->hold_until) {
		if (now < e->hold_until)
			return NULL;	/* fixed share's unreserved part: idle */
		unreserved_end_locked(e, now);
	}
	if (e->cur_fn >= 0) {
		c = fn_pick_chan_locked(e, &e->g->fns[e->cur_fn], now);
		if (c || e->g->sched_policy != GPU_SCHED_BEST_EFFORT)
			return c;
		/* Work conserving: an idle function gives the rest of its slice away. */
		slot_end_locked(e, now);
	}
	return slot_begin_locked(e, now);
}

/* Periodic safety net: GP_PUT moved without a doorbell we saw. */
static void scan_locked(struct gpu_engine *e)
{
	struct gpu *g = e->g;

	cmn_mutex_assert_held(&e->g->lock);
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		struct gpu_fn *f = &g->fns[fn];
		uint64_t rl = f->cfg.runlist[e->id];

		for (unsigned int chid = 0; rl && chid < GPU_FN_MAX_CHANNELS; chid++) {
			struct gpu_chan *c = &f->chans[chid];
			uint32_t put;

			int st = atomic_load(&c->state);

			/* Any state that would run it when pending: a BUSY channel whose turn ended
			 * at the batch limit needs the scan as much as an IDLE one. */
			if (!(rl & VGPU_BIT(chid)) || c->running || c->cfg_gen != f->cfg.chans[chid].gen ||
			    !(f->cfg.chans[chid].flags & GPU_CHAN_ENABLED) ||
			    gpu_chan_fenced(f, chid, c->cfg_gen) || st == GPU_CHAN_STATE_ERROR ||
			    st == GPU_CHAN_STATE_FAULTED || st == GPU_CHAN_STATE_FREE ||
			    (atomic_load(&f->pending) & VGPU_BIT(chid)))
				continue;
			if (gpu_userd_read_put(g, f, c, f->cfg.part_base, f->cfg.part_size, &put))
				continue;
			if (put != c->gp_put && put < c->cfg.gpfifo_entries) {
				atomic_fetch_or(&f->pending, VGPU_BIT(chid));
				atomic_fetch_add(&f->dbc.scan_found, 1);
			}
		}
	}
}

/* The engine thread's clocks at its last look (turn_stolen_locked()). */
struct engine_mark {
	uint64_t wall, cpu;	/* the engine's clock, the thread's CPU time */
	uint64_t stolen;	/* e->stolen */
	uint64_t waited;	/* e->waited */
	bool has_cpu;		/* cpu was read */
};

/* CPU time of the calling engine thread in ns: the test's (gpu_config.cpu_ns) on a test
 * clock, else the thread's own. False if there is none. */
static bool engine_cpu_ns(const struct gpu *g, uint64_t *out)
{
	struct timespec ts;

	if (g->cfg.clock_ns) {
		if (!g->cfg.cpu_ns)
			return false;
		*out = g->cfg.cpu_ns(g->cfg.clock_arg);
		return true;
	}
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return false;
	*out = (uint64_t)ts.tv_sec * VGPU_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
	return true;
}

/* Start measuring from @now (the engine's clock): at start and after a sleep. */
static void mark_set(struct gpu_engine *e, struct engine_mark *m, uint64_t now)
{
	m->wall = now;
	m->has_cpu = engine_cpu_ns(e->g, &m->cpu);
	m->stolen = e->stolen;
	m->waited = e->waited;
}

/* Back from engine_idle() at @now: start measuring from @now. When the spin saw the news
 * (@spun) it kept @m at most MARK_RENEW_NS old; if @now is within MARK_SPUN_NS of it, the
 * thread's CPU time at @now is taken as the mark's plus the time since, without the
 * system call that would delay the first method. Off by at most MARK_SPUN_NS, in the
 * slice's favour (not charged), and only if the host took the thread away or g->lock
 * kept it waiting in that window; a longer window (a real preemption) reads it. */
static void mark_woke(struct gpu_engine *e, struct engine_mark *m, uint64_t now, bool spun)
{
	if (spun && m->has_cpu && now >= m->wall && now - m->wall <= MARK_SPUN_NS) {
		m->cpu += now - m->wall;
		m->wall = now;
		m->stolen = e->stolen;
		m->waited = e->waited;
		return;
	}
	mark_set(e, m, now);
}

/* A turn ended at @now. What the host took from the engine thread since @m is the time
 * that passed less the CPU time the thread used: that is stolen time, not charged and
 * added to the slice, where the long gaps gpu_engine_now() guessed meanwhile fall short of
 * it. A preemption shorter than GPU_STALL_NS would otherwise count as the running slice's
 * time, and no work is done then: the slice would end that much early (its charge is its
 * work, slot_charge_locked(), so it would not be overcharged, but it would run short and
 * the engine's rate would rise for everyone). So a slice lasts the engine thread's CPU
 * time, but for the gaps it waited in the IOMMU (gpu_engine_now()): the thread used no CPU
 * there, and the time was the guest's to decide. */
static void turn_stolen_locked(struct gpu_engine *e, struct engine_mark *m, uint64_t now)
{
	uint64_t cpu, took, guessed = e->stolen - m->stolen, waited = e->waited - m->waited;
	bool has_cpu = engine_cpu_ns(e->g, &cpu);

	cmn_mutex_assert_held(&e->g->lock);
	if (!has_cpu || !m->has_cpu) {
		mark_set(e, m, now);	/* no CPU time: the guesses stand */
		return;
	}
	took = now - m->wall > cpu - m->cpu ? now - m->wall - (cpu - m->cpu) : 0;
	took = took > waited ? took - waited : 0;
	/* Add what the guesses missed. A guess too large (a gap partly spent running) stands:
	 * taking it back could take a slice below what was already counted stolen in it. */
	if (took > guessed) {
		e->stolen += took - guessed;
		if (e->cur_fn >= 0)
			e->slot_end += took - guessed;
	}
	m->wall = now;
	m->cpu = cpu;
	m->stolen = e->stolen;
	m->waited = e->waited;
}

/* turn_stolen_locked(), unless @m is at most MARK_FRESH_NS old: the host took at most that
 * much since, and the next look that finds the mark older measures it, so nothing is lost.
 * The look before a pick that follows a turn at once then reads none: one CPU-time read
 * per turn (at its end), not two, the second on the path of a doorbell rung meanwhile. */
static void turn_measure_locked(struct gpu_engine *e, struct engine_mark *m, uint64_t now)
{
	if (!m->has_cpu || now - m->wall > MARK_FRESH_NS)
		turn_stolen_locked(e, m, now);
}

/* The engine lets go of @c after a turn. Freed during it: the sync marked it free, but
 * the turn's end may have written its own state over that; it is free, and a restore takes
 * the state the turn ended in. Allocated again meanwhile: the deferred adoption runs now. */
static void chan_release_locked(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c)
{
	const struct gpu_priv_chan *pc = &f->cfg.chans[c - f->chans];

	cmn_mutex_assert_held(&g->lock);
	c->running = false;
	if (c->freed_running) {
		int st = atomic_exchange(&c->state, GPU_CHAN_STATE_FREE);

		if (st != GPU_CHAN_STATE_FREE)
			c->state_at_free = st;
		c->freed_running = false;
	}
	if ((pc->flags & GPU_CHAN_ALLOCATED) &&
	    (c->cfg_gen != pc->gen || atomic_load(&c->state) == GPU_CHAN_STATE_FREE))
		gpu_chan_adopt(g, f, c, pc);
}

/* Run @c for one turn with g->lock dropped, then account for it. */
static void engine_run_locked(struct gpu_engine *e, struct gpu_chan *c, uint64_t start,
			      struct engine_mark *m)
{
	struct gpu *g = e->g;
	struct gpu_fn *f = &g->fns[e->cur_fn];
	struct gpu_ctx ctx = {
		.g = g, .e = e, .f = f, .c = c, .chid = (unsigned int)(c - f->chans),
		.part_base = f->cfg.part_base, .part_size = f->cfg.part_size,
		/* f->cfg is at least as new as this generation: gpu_priv_sync_locked() */
		.priv_gen = atomic_load_explicit(&g->priv_gen_seen, memory_order_relaxed),
		/* and the pick saw every fence up to this count (both under g->lock) */
		.fences = atomic_load_explicit(&g->fences, memory_order_relaxed),
	};
	uint64_t stolen0 = e->stolen, stolen, ran;
	enum gpu_run_result r;
	uint64_t end, pto = def(f->cfg.sched.preempt_timeout_ns, GPU_DEFAULT_PREEMPT_TO);

	cmn_mutex_assert_held(&e->g->lock);
	idle_account_locked(e, start);
	c->running = true;
	cmn_mutex_unlock(&g->lock);
	r = gpu_chan_run(&ctx);
	cmn_mutex_lock(&g->lock);
	chan_release_locked(g, f, c);
	end = gpu_engine_now(e);
	turn_stolen_locked(e, m, end);
	stolen = e->stolen - stolen0;
	ran = end - start > stolen ? end - start - stolen : 0;
	/* A linger's wait is the slice's idle time, not its work: kept out of the rate. */
	ctx.linger_ns = cmn_min(ctx.linger_ns, ran);
	ran -= ctx.linger_ns;
	f->tel[e->id].run_ns += ran;
	f->tel[e->id].idle_ns += ctx.linger_ns;
	f->tel[e->id].lingered += ctx.lingered;
	e->slot_idle += ctx.linger_ns;
	/* The slice's charge (slot_charge_locked()): a turn that did work by its work, whether
	 * it ended with more to do or caught up, blocked or faulted after it. */
	if (ctx.cost)
		e->slot_units += ctx.cost;
	else
		e->slot_plain += ran;
	if (r == GPU_RUN_BLOCKED)
		c->retry_at = end + GPU_ACQ_POLL_NS;
	/* A channel gone mid-turn (pbdma.c chan_gone()) is no one's to put in error: its USERD
	 * may be in a range that is not its function's any more. */
	if (r == GPU_RUN_PROGRESS && !ctx.gone && end > e->slot_end + pto) {
		f->tel[e->id].preempt_timeouts++;
		gpu_chan_set_error(g, f, c, ctx.part_base, ctx.part_size,
				   VGPU_CHAN_ERR_PREEMPT_TIMEOUT, 0xffffffffu);
	}
}

/* Earliest time this idle engine must look again without being woken. */
static uint64_t idle_deadline_locked(struct gpu_engine *e, uint64_t now)
{
	struct gpu *g = e->g;
	/* The GSP may live in another process and cannot kick us: poll its generation. */
	uint64_t d = cmn_min(e->next_scan, now + def(g->cfg.priv_poll_ns, GPU_PRIV_POLL_NS));

	cmn_mutex_assert_held(&e->g->lock);
	if (e->cur_fn >= 0)
		d = cmn_min(d, e->slot_end);
	else if (e->hold_until)
		d = cmn_min(d, cmn_max(e->hold_until, now));
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		struct gpu_fn *f = &g->fns[fn];
		uint64_t rl = f->cfg.runlist[e->id];

		/* A fenced or stopped channel's wait is never retried (a SEM_ACQUIRE that
		 * faulted leaves acq_waiting set): it would wake the engine in vain, at once
		 * and for ever once its retry time passed. */
		for (unsigned int chid = 0; rl && chid < GPU_FN_MAX_CHANNELS; chid++) {
			const struct gpu_chan *c = &f->chans[chid];

			if ((rl & VGPU_BIT(chid)) && !c->running && c->acq_waiting &&
			    !gpu_chan_fenced(f, chid, c->cfg_gen) && !chan_stopped(c))
				d = cmn_min(d, cmn_max(c->retry_at, now));
		}
	}
	return d;
}

bool gpu_engine_news_but(struct gpu_engine *e, unsigned int fn, uint32_t token)
{
	struct gpu *g = e->g;

	return atomic_load(&g->stop) || atomic_load(&e->poked) ||
	       gpu_doorbell_any_but(g, fn, token) ||
	       __atomic_load_n(&g->priv->gen, __ATOMIC_ACQUIRE) !=
			atomic_load_explicit(&g->priv_gen_seen, memory_order_relaxed);
}

static bool engine_has_news(struct gpu_engine *e)
{
	return gpu_engine_news_but(e, UINT_MAX, 0);
}

/* Never waits: a guest holds a copy of each function's kick eventfd (its vector 2) and may
 * clear O_NONBLOCK and drain it between the epoll and this read (common/efd.h). */
static void engine_drain_fds(struct gpu_engine *e, const struct epoll_event *ev, int n)
{
	uint64_t v;
	int r;

	for (int i = 0; i < n; i++)
		if ((r = cmn_efd_read(ev[i].data.fd, &v)) && r != -EAGAIN)
			cmn_dbg("gpu: engine %u: eventfd read: %d", e->id, -r);
}

/* Wait up to @wait_ns for @epfd: epoll_pwait2's nanoseconds where the kernel has it (5.11),
 * else epoll_wait's milliseconds, rounded up (older kernels, valgrind). */
static int engine_epoll_wait(int epfd, struct epoll_event *ev, int max, uint64_t wait_ns)
{
	static atomic_bool no_pwait2;
	struct timespec ts = { .tv_sec = (time_t)(wait_ns / VGPU_NSEC_PER_SEC),
			       .tv_nsec = (long)(wait_ns % VGPU_NSEC_PER_SEC) };
	int n;

	if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
		n = epoll_pwait2(epfd, ev, max, &ts, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n;
		atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
	}
	return epoll_wait(epfd, ev, max,
			  (int)cmn_min((wait_ns + VGPU_NSEC_PER_MSEC - 1) / VGPU_NSEC_PER_MSEC,
				       (uint64_t)INT32_MAX));
}

/* Nothing to run. Right after work (@worked), poll the doorbells at most SCHED_IDLE_POLLS
 * times and no longer than spin_ns: a guest that submits again at once, as one waiting on
 * its fence does, is served without a wake-up. Then, and at once after a wake that found
 * nothing, sleep until a kick, a wake or @deadline: the engine's periodic looks cost no
 * spinning, and a doorbell wakes a thread that was asleep, which the host scheduler runs
 * at once, not one that spent its share of the CPU spinning. True if the spin saw news,
 * with @m (exact at its wall time) at most MARK_RENEW_NS older than that look. */
static bool engine_idle(struct gpu_engine *e, struct engine_mark *m, uint64_t now,
			uint64_t deadline, bool worked)
{
	struct gpu *g = e->g;
	uint64_t spin_end = cmn_min(deadline, now + def(g->cfg.spin_ns, 50 * VGPU_NSEC_PER_USEC));
	uint64_t next_yield = now + GPU_SPIN_YIELD_NS, t;
	struct epoll_event ev[GPU_MAX_FNS + 1];
	int n;

	for (unsigned int polls = 0; worked && polls < SCHED_IDLE_POLLS &&
				     (t = gpu_clock_ns(g)) < spin_end; polls++) {
		if (engine_has_news(e) || gpu_doorbell_spin(g, 32))
			return true;
		/* Renewed after a look found nothing, so a token is not kept waiting by it:
		 * mark_woke() carries it to the turn the next news starts. */
		if (t - m->wall > MARK_RENEW_NS)
			mark_set(e, m, t);
		/* On an oversubscribed host the submitter may be queued behind us on this
		 * very core: give it the CPU now and then instead of spinning it out. */
		if (t >= next_yield) {
			sched_yield();
			next_yield = t + GPU_SPIN_YIELD_NS;
		}
	}
	now = gpu_clock_ns(g);
	if (now >= deadline)
		return false;
	/* A doorbell wakes this thread and a guest waits for it: with the shortest slice, woken,
	 * it preempts a thread running a longer one (the default: 1.4 ms on two CPUs) at once
	 * instead of waiting for that slice's end. Busy, it runs on the default slice again
	 * (engine_slice_default()): preempted every 0.1 ms on a loaded host, the functions'
	 * data would be evicted that much more often, and their work shares suffer. */
	if (!e->short_slice)
		e->short_slice = !cmn_share_set_slice(CMN_SHARE_SLICE_MIN_NS, "gpu: engine");
	atomic_store(&e->asleep, true);
	gpu_doorbell_set_sleeping(g, 1);
	/* Advertised first, checked second: a submitter either sees us asleep and kicks,
	 * or its token is already visible here. */
	if (!engine_has_news(e)) {
		uint64_t wait = deadline - now;

		n = engine_epoll_wait(e->epfd, ev, (int)VGPU_ARRAY_SIZE(ev), wait);
		if (n > 0)
			engine_drain_fds(e, ev, n);
	}
	gpu_doorbell_set_sleeping(g, -1);
	atomic_store(&e->asleep, false);
	return false;
}

/* A turn ran after a sleep: back to the host's default slice (see engine_idle()). Outside
 * the doorbell -> first method path: the turn has run. */
static void engine_slice_default(struct gpu_engine *e)
{
	if (e->short_slice) {
		cmn_share_set_slice(0, "gpu: engine");
		e->short_slice = false;
	}
}

void *gpu_engine_main(void *arg)
{
	struct gpu_engine *e = arg;
	struct gpu *g = e->g;

	bool worked = false;	/* ran a channel since the last sleep */
	bool woke = true;	/* started or back from a sleep: m is not set */
	bool spun = false;	/* the spin saw the news that ended the idle */
	struct engine_mark m;

	cmn_mutex_lock(&g->lock);
	e->next_scan = gpu_clock_ns(g) + def(g->cfg.scan_period_ns, VGPU_NSEC_PER_MSEC);
	while (!atomic_load(&g->stop)) {
		uint64_t now = gpu_engine_now(e), deadline;
		struct gpu_chan *c;

		/* What the host took since the last turn ended belongs to the slice that turn
		 * ran in: count it (and extend that slice) before the pick may end it. Counted
		 * at the next turn's end instead, it would go to the next slice, which would then
		 * run that much longer than its charge, and the last one be charged for it.
		 * After a sleep, measuring starts here: what the host took between the wake-up
		 * and this clock read (taking g->lock included) is no slice's time. Counted at
		 * the next turn's end, it would go to the slice the pick is about to start, after
		 * it: that slice would run that much longer than its charge. */
		if (woke)
			mark_woke(e, &m, now, spun);
		else
			turn_measure_locked(e, &m, now);
		woke = false;
		/* Cleared only when set: a seq_cst store waits for this core's stores to drain. */
		if (atomic_load_explicit(&e->poked, memory_order_relaxed))
			atomic_store(&e->poked, false);
		gpu_priv_sync_locked(g);
		gpu_doorbell_drain_locked(g, e);
		if (now >= e->next_scan) {
			scan_locked(e);
			e->next_scan = now + def(g->cfg.scan_period_ns, VGPU_NSEC_PER_MSEC);
		}
		c = sched_pick_locked(e, now);
		if (c) {
			engine_run_locked(e, c, now, &m);
			engine_slice_default(e);
			worked = true;
			continue;
		}
		if (e->cur_fn >= 0 && !e->idle_from)
			e->idle_from = now;
		deadline = idle_deadline_locked(e, now);
		cmn_mutex_unlock(&g->lock);
		spun = engine_idle(e, &m, now, deadline, worked);
		worked = false;
		/* Idle gaps are not stalls: restart the stall clock. */
		e->last_tick = 0;
		woke = true;
		cmn_mutex_lock(&g->lock);
	}
	cmn_mutex_unlock(&g->lock);
	return NULL;
}

/* Wait until no engine runs channel @chid of @fn (every channel of it: @chid < 0, whose
 * scheduling the caller disabled, else -EBUSY). Each look first syncs the table as the
 * caller left it (a free or disable just written), so an engine that ends its turn does not
 * pick the channel again (sched_pick_locked() skips a disabled function). */
static int quiesce_wait(struct gpu *g, unsigned int fn, int chid, uint64_t timeout_ns)
{
	unsigned int first = chid < 0 ? 0 : (unsigned int)chid;
	unsigned int end = chid < 0 ? GPU_FN_MAX_CHANNELS : first + 1;
	uint64_t dl = cmn_deadline_ns(timeout_ns);
	bool busy;

	for (;;) {
		cmn_mutex_lock(&g->lock);
		gpu_priv_sync_locked(g);
		if (chid < 0 && g->fns[fn].cfg.sched.enabled) {
			cmn_mutex_unlock(&g->lock);
			return -EBUSY;
		}
		busy = false;
		for (unsigned int c = first; c < end && !busy; c++)
			busy = g->fns[fn].chans[c].running;
		cmn_mutex_unlock(&g->lock);
		if (!busy)
			return 0;
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
}

int gpu_chan_quiesce(struct gpu *g, unsigned int fn, unsigned int chid, uint64_t timeout_ns)
{
	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	return quiesce_wait(g, fn, (int)chid, timeout_ns);
}

void gpu_fn_schedulable_locked(struct gpu *g, struct gpu_fn *f)
{
	uint64_t m = 0;

	cmn_mutex_assert_held(&g->lock);
	for (unsigned int chid = 0; f->cfg.sched.enabled && chid < GPU_FN_MAX_CHANNELS; chid++) {
		const struct gpu_priv_chan *pc = &f->cfg.chans[chid];
		uint64_t on = GPU_CHAN_ALLOCATED | GPU_CHAN_ENABLED;

		if ((pc->flags & on) == on && pc->runlist < g->nr_engines &&
		    (f->cfg.runlist[pc->runlist] & VGPU_BIT(chid)) &&
		    !gpu_chan_fenced(f, chid, pc->gen))
			m |= VGPU_BIT(chid);
	}
	atomic_store_explicit(&f->schedulable, m, memory_order_relaxed);
}

int gpu_chan_fence(struct gpu *g, unsigned int fn, unsigned int chid)
{
	struct gpu_fn *f;

	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	f = &g->fns[fn];
	cmn_mutex_lock(&g->lock);
	/* The record as the GSP left it: a freed one keeps its gen, which a restore takes. */
	gpu_priv_sync_locked(g);
	atomic_store_explicit(&f->fence_gen[chid], f->cfg.chans[chid].gen, memory_order_release);
	/* After the gen: a turn that sees the count sees the fence (chan_gone()). */
	atomic_fetch_add_explicit(&g->fences, 1, memory_order_release);
	/* Its doorbells are invalid from now on and no engine picks it: a bit it has pending
	 * would stay for good. */
	atomic_fetch_and(&f->pending, ~VGPU_BIT(chid));
	gpu_fn_schedulable_locked(g, f);
	cmn_mutex_unlock(&g->lock);
	return 0;
}

int gpu_fn_quiesce(struct gpu *g, unsigned int fn, uint64_t timeout_ns)
{
	if (fn >= g->nr_fns)
		return -EINVAL;
	return quiesce_wait(g, fn, -1, timeout_ns);
}
