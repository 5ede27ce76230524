// SPDX-License-Identifier: MIT
/* Scheduler at tenant scale, by counts: 8, 32 and 62 busy functions on one engine, equal
 * share and fixed share with unequal weights, each function's share of the work completed
 * (fixed-size items whose completion the engine writes as a semaphore) within 5 % of its
 * target; fixed share gives weight/1000 of the engine and leaves the unreserved rest idle;
 * a function with work waiting is served within a bounded number of the busy functions'
 * quanta (best effort: well inside one, because a slice is cut short for a function owed
 * time; equal share: one round; fixed share: one round of virtual time, 1000 / weight
 * slices); an engine that overslept while idle in a reserved slice charges nobody for it;
 * 62 fixed-share functions keep their shares in every 1 s window while the host preempts
 * the engine thread (leaps of the clock that its CPU time does not see); 8 keep their
 * shares of the work while the host robs half of them of time that the engine's CPU time
 * counts (a slice is charged its work, not its time); a function whose work costs far
 * more than the work model prices it at gets at most four times another's engine time;
 * busy functions keep whole slices while doorbells ring. Everything runs on an engine clock the test
 * drives (each read advances it by one tick; an oversleep or a preemption is a leap of it),
 * so the results count scheduler decisions and work, not host load. */
#include <pthread.h>
#include <stdio.h>

#include "common/lock.h"
#include "gpu_test.h"

#define ENTRIES		4096u
#define ITEM_BYTES	4096u		/* one FILL per item: one clock read */
#define TICK_NS		(100 * VGPU_NSEC_PER_USEC)
#define RUN_TIMEOUT	(120 * VGPU_NSEC_PER_SEC)	/* a hang, not a measurement */
#define MAX_BUSY	62u

/* The engine clock: held at 0 until started, then TICK_NS more per read until it stands
 * still at @stop. The read that reaches @stop runs @on_stop first, while that engine waits:
 * the counts it takes are the work done by then, whatever runs later. */
struct sclock {
	struct cmn_mutex lock;
	pthread_cond_t cv;
	bool started, stopped;
	uint64_t now, stop, tick;	/* tick: what a read adds (TICK_NS unless set) */
	uint64_t jump_at, jump_by;	/* the first read at or past jump_at leaps jump_by */
	void (*on_stop)(void *arg);
	void *arg;
	/* The host preempting the engine: a read leaps preempt_by (engine CPU time stands
	 * still) when the generator says so, one read in preempt_1_in on average. */
	uint64_t preempt_by, taken;	/* taken: all leaps, the time the engine did not run */
	uint32_t preempt_1_in, rng, preempts;
	/* Every window of the clock, on_window(arg) runs at the read that reaches its end. */
	uint64_t window, next_edge;
	void (*on_window)(void *arg);
	/* The host robbing some functions' slices: a read at which robbing(arg) says such a
	 * function ran since the last read leaps rob_by, and the engine's CPU time counts it
	 * (a VM's CPU clock runs on while the hypervisor steals the vCPU). */
	bool (*robbing)(void *arg);
	uint64_t rob_by, robbed;	/* robbed: all such leaps */
};

static uint64_t sclock_read(void *arg)
{
	struct sclock *k = arg;
	uint64_t v;

	cmn_mutex_lock(&k->lock);
	while (!k->started)
		cmn_cond_wait(&k->cv, &k->lock);
	if (k->now < k->stop)
		k->now = cmn_min(k->now + k->tick, k->stop);
	if (k->jump_by && k->now >= k->jump_at) {
		k->now = cmn_min(k->now + k->jump_by, k->stop);
		k->jump_by = 0;
	}
	if (k->preempt_1_in && k->now < k->stop) {
		k->rng = k->rng * 1103515245u + 12345u;	/* the same preemptions every run */
		if ((k->rng >> 16) % k->preempt_1_in == 0) {
			uint64_t by = cmn_min(k->preempt_by, k->stop - k->now);

			k->now += by;
			k->taken += by;
			k->preempts++;
		}
	}
	if (k->robbing && k->now < k->stop && k->robbing(k->arg)) {
		uint64_t by = cmn_min(k->rob_by, k->stop - k->now);

		k->now += by;
		k->robbed += by;
	}
	while (k->window && k->now >= k->next_edge && k->next_edge <= k->stop) {
		k->on_window(k->arg);
		k->next_edge += k->window;
	}
	if (k->now >= k->stop && !k->stopped) {
		k->stopped = true;
		if (k->on_stop)
			k->on_stop(k->arg);
	}
	v = k->now;
	cmn_mutex_unlock(&k->lock);
	return v;
}

/* The engine thread's CPU time: the clock less what the preemptions took. */
static uint64_t sclock_cpu(void *arg)
{
	struct sclock *k = arg;
	uint64_t v;

	cmn_mutex_lock(&k->lock);
	v = k->now - k->taken;
	cmn_mutex_unlock(&k->lock);
	return v;
}

/* On the heap: a failed case leaves its device running on it. */
static struct sclock *sclock_new(uint64_t stop)
{
	struct sclock *k = calloc(1, sizeof(*k));

	assert_non_null(k);
	cmn_mutex_init(&k->lock);
	pthread_cond_init(&k->cv, NULL);
	k->stop = stop;
	k->tick = TICK_NS;
	return k;
}

static void sclock_start(struct sclock *k)
{
	cmn_mutex_lock(&k->lock);
	k->started = true;
	pthread_cond_broadcast(&k->cv);
	cmn_mutex_unlock(&k->lock);
}

/* Wait (bounded, in real time) for the clock's stop. */
static void sclock_wait_stop(struct sclock *k)
{
	uint64_t dl = cmn_deadline_ns(RUN_TIMEOUT);
	bool done;

	for (;;) {
		cmn_mutex_lock(&k->lock);
		done = k->stopped;
		cmn_mutex_unlock(&k->lock);
		if (done)
			return;
		if (cmn_deadline_passed(dl))
			fail_msg("the engine clock did not reach %llu ns", (unsigned long long)k->stop);
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
}

/* The clock as the engines last read it (a look that does not move it). */
static uint64_t sclock_now(struct sclock *k)
{
	uint64_t now;

	cmn_mutex_lock(&k->lock);
	now = k->now;
	cmn_mutex_unlock(&k->lock);
	return now;
}

/* Wait (bounded, in real time) until the clock reads at least @t. */
static void sclock_wait_until(struct sclock *k, uint64_t t)
{
	uint64_t dl = cmn_deadline_ns(RUN_TIMEOUT);

	for (;;) {
		if (sclock_now(k) >= t)
			return;
		if (cmn_deadline_passed(dl))
			fail_msg("the engine clock did not reach %llu ns", (unsigned long long)t);
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
}

static void sclock_free(struct sclock *k)
{
	pthread_cond_destroy(&k->cv);
	cmn_mutex_destroy(&k->lock);
	free(k);
}

/* @nr_vfs VFs on one engine running on @k; idle, it spins on the clock. */
static struct tgpu *tgpu_on_sclock(unsigned int nr_vfs, struct sclock *k)
{
	struct gpu_config cfg = { .nr_vfs = nr_vfs, .nr_engines = 1, .spin_ns = VGPU_NSEC_PER_SEC,
				  .clock_ns = sclock_read, .clock_arg = k };

	return tgpu_new_cfg(cfg, 8);
}

/* A function's queue of work items: item i is FILL(ITEM_BYTES) then SEM_RELEASE(i + 1),
 * each in its own pushbuffer segment, so the semaphore counts the items completed. */
struct worker {
	struct tchan c;
	volatile uint32_t *sem;
};

static void worker_init(struct tgpu *t, struct worker *w, unsigned int fn, uint32_t items)
{
	uint64_t dst = tgpu_vmem(t, fn, ITEM_BYTES + 64, VGPU_GMMU_PAGE_64K), sem = dst + ITEM_BYTES;

	tchan_init(t, &w->c, fn, 0, 0, ENTRIES);
	w->sem = tgpu_va(t, fn, sem, 4);
	*w->sem = 0;
	for (uint32_t i = 0; i < items; i++) {
		TM(&w->c, VGPU_M_FILL, lo32(dst), hi32(dst), ITEM_BYTES, 0, i);
		TM(&w->c, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), i + 1, 0, 0);
		tchan_gp(&w->c);
	}
	tchan_kick(t, &w->c);
}

static uint32_t worker_done(const struct worker *w)
{
	return __atomic_load_n(w->sem, __ATOMIC_ACQUIRE);
}

struct scale_run {
	struct worker w[MAX_BUSY];
	uint32_t done[MAX_BUSY];	/* items completed when the clock stopped */
	unsigned int n;
};

static void scale_snapshot(void *arg)
{
	struct scale_run *r = arg;

	for (unsigned int i = 0; i < r->n; i++)
		r->done[i] = worker_done(&r->w[i]);
}

/* Unequal fixed-share weights for @n functions, at most 1000 in all. */
static uint64_t scale_weight(unsigned int i, unsigned int n)
{
	static const uint64_t w8[] = { 200, 150, 150, 100, 100, 100, 100, 100 };

	if (n == 8)
		return w8[i];
	return n <= 32 ? 15 + 5 * (i % 4) : 8 + 4 * (i % 4);
}

static const struct scale_case {
	const char *name;
	enum gpu_sched_policy policy;
	unsigned int n;
} scale_cases[] = {
	{ "equal share, 8 busy", GPU_SCHED_EQUAL_SHARE, 8 },
	{ "equal share, 32 busy", GPU_SCHED_EQUAL_SHARE, 32 },
	{ "equal share, 62 busy", GPU_SCHED_EQUAL_SHARE, 62 },
	{ "fixed share, 8 busy", GPU_SCHED_FIXED_SHARE, 8 },
	{ "fixed share, 32 busy", GPU_SCHED_FIXED_SHARE, 32 },
	{ "fixed share, 62 busy", GPU_SCHED_FIXED_SHARE, 62 },
	{ "best effort, 62 busy", GPU_SCHED_BEST_EFFORT, 62 },
};

/* 200 us slices (two ticks), about 250 of them per function on average; no queue runs
 * dry before the stop (asserted). */
static void test_scale_shares(void **state)
{
	const struct scale_case *c = *state;
	const uint64_t quantum = 2 * TICK_NS, window = c->n * 250 * quantum;
	struct scale_run *r = calloc(1, sizeof(*r));
	uint64_t total = 0, wsum = 0, items = 0;
	double worst = 0;
	struct sclock *k;
	struct tgpu *t;

	assert_non_null(r);
	r->n = c->n;
	k = sclock_new(window);
	k->on_stop = scale_snapshot;
	k->arg = r;
	t = tgpu_on_sclock(c->n, k);
	assert_int_equal(gpu_priv_sched_set(t->p, c->policy, quantum, 0), 0);
	for (unsigned int i = 0; i < c->n; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = quantum,
					       .weight = c->policy == GPU_SCHED_FIXED_SHARE ?
							 scale_weight(i, c->n) : 0 };

		wsum += s.weight;
		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
	}
	/* Enough items that the largest share cannot finish its queue in the window. */
	items = cmn_min((uint64_t)ENTRIES - 1, window / TICK_NS);
	for (unsigned int i = 0; i < c->n; i++)
		worker_init(t, &r->w[i], i + 1, (uint32_t)items);
	sclock_start(k);
	sclock_wait_stop(k);
	for (unsigned int i = 0; i < c->n; i++) {
		assert_true(r->done[i] < items);
		total += r->done[i];
	}
	assert_true(total > 0);
	for (unsigned int i = 0; i < c->n; i++) {
		double share = (double)r->done[i] / (double)total;
		double target = c->policy == GPU_SCHED_FIXED_SHARE ?
					(double)scale_weight(i, c->n) / (double)wsum : 1.0 / c->n;
		double err = (share - target) / target * 100;

		if (err < 0 ? -err > worst : err > worst)
			worst = err < 0 ? -err : err;
		if (err > 5 || err < -5)
			print_message("fn %u: %u items, share %.4f target %.4f (%+.1f %%)\n", i + 1,
				      r->done[i], share, target, err);
		assert_true(share >= target * 0.95 && share <= target * 1.05);
	}
	print_message("%s: %lu items, worst share error %.2f %%\n", c->name, (unsigned long)total,
		      worst);
	tgpu_free(t);
	sclock_free(k);
	free(r);
}

/* ---- shares in every window while the host preempts the engine --------------------- */

#define WIN_TICK	(10 * VGPU_NSEC_PER_USEC)	/* a read: a turn's edges cost little */
#define WIN_QUANTUM	(200 * VGPU_NSEC_PER_USEC)
#define WIN_LEN		VGPU_NSEC_PER_SEC	/* a window: 5000 slices */
#define WIN_COUNT	3u		/* the first one is the warm-up */
#define WIN_PREEMPT	(300 * VGPU_NSEC_PER_USEC)	/* under a stall (GPU_STALL_NS) */

struct win_run {
	struct worker w[MAX_BUSY];
	uint32_t done[WIN_COUNT][MAX_BUSY];	/* items completed at each window's end */
	unsigned int n, windows;
};

#define WIN_FILLS	4u		/* heavy methods per item: a clock read each, so an
					 * item is about 50 us of 200 us slices */
#define WIN_ITEMS	2000u		/* per function: more than the heaviest completes */

/* Like worker_init(), each item WIN_FILLS small FILLs, then its SEM_RELEASE: a few clock
 * reads per item, so the rings last the run, and little memory work per read. */
static void win_worker_init(struct tgpu *t, struct worker *w, unsigned int fn)
{
	uint64_t dst = tgpu_vmem(t, fn, 4096, VGPU_GMMU_PAGE_64K), sem = dst + 2048;

	tchan_init(t, &w->c, fn, 0, 0, ENTRIES);
	w->sem = tgpu_va(t, fn, sem, 4);
	*w->sem = 0;
	for (uint32_t i = 0; i < WIN_ITEMS; i++) {
		for (unsigned int j = 0; j < WIN_FILLS; j++)
			TM(&w->c, VGPU_M_FILL, lo32(dst), hi32(dst), 64, 0, i);
		TM(&w->c, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), i + 1, 0, 0);
		tchan_gp(&w->c);
	}
	tchan_kick(t, &w->c);
}

static void win_snapshot(void *arg)
{
	struct win_run *r = arg;

	if (r->windows >= WIN_COUNT)
		return;
	for (unsigned int i = 0; i < r->n; i++)
		r->done[r->windows][i] = worker_done(&r->w[i]);
	r->windows++;
}

/* 62 busy functions under fixed share with the bench's unequal weights (8-20 per mille,
 * so the lightest gets about 40 slices of 200 us a window) over 1 s windows of engine
 * clock, while the host preempts the engine thread for 300 us at one clock read in
 * @preempt_1_in (0: never; 200: in about one slice of ten). Returns the worst share error
 * of any function in any window after the first, in %. With @cpu, the engine reads its CPU
 * time (gpu_config.cpu_ns); without, it sees only the clock. */
static double windows_run(uint32_t preempt_1_in, bool cpu, uint64_t *preempts)
{
	const unsigned int n = MAX_BUSY;
	const uint64_t quantum = WIN_QUANTUM, window = WIN_LEN;
	struct win_run *r = calloc(1, sizeof(*r));
	struct gpu_config cfg = { .nr_vfs = n, .nr_engines = 1, .spin_ns = VGPU_NSEC_PER_SEC,
				  .clock_ns = sclock_read };
	uint64_t wsum = 0;
	double worst = 0;
	struct sclock *k;
	struct tgpu *t;

	assert_non_null(r);
	r->n = n;
	k = sclock_new(WIN_COUNT * window);
	k->tick = WIN_TICK;
	k->preempt_1_in = preempt_1_in;
	k->preempt_by = WIN_PREEMPT;
	k->rng = 1;
	k->window = window;
	k->next_edge = window;
	k->on_window = win_snapshot;
	k->arg = r;
	cfg.clock_arg = k;
	cfg.cpu_ns = cpu ? sclock_cpu : NULL;
	t = tgpu_new_cfg(cfg, 8);
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_FIXED_SHARE, quantum, 0), 0);
	for (unsigned int i = 0; i < n; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .weight = scale_weight(i, n) };

		wsum += s.weight;
		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
	}
	for (unsigned int i = 0; i < n; i++)
		win_worker_init(t, &r->w[i], i + 1);
	sclock_start(k);
	sclock_wait_stop(k);
	assert_int_equal(r->windows, WIN_COUNT);
	for (unsigned int w = 1; w < WIN_COUNT; w++) {
		uint64_t total = 0;

		for (unsigned int i = 0; i < n; i++) {
			assert_true(r->done[w][i] < WIN_ITEMS);	/* nobody ran dry */
			total += r->done[w][i] - r->done[w - 1][i];
		}
		assert_true(total > 0);
		for (unsigned int i = 0; i < n; i++) {
			double share = (double)(r->done[w][i] - r->done[w - 1][i]) / (double)total;
			double target = (double)scale_weight(i, n) / (double)wsum;
			double err = (share - target) / target * 100;

			worst = cmn_max(worst, err < 0 ? -err : err);
		}
	}
	*preempts = k->preempts;
	tgpu_free(t);
	sclock_free(k);
	free(r);
	return worst;
}

/* Every function's share of the work in every window stays within 5 % of its weight's,
 * with and without the host taking the engine thread, and whether or not the engine sees
 * its CPU time. The preemptions are shorter than a stall, so only the engine's CPU time
 * shows them; a slice is charged the work its methods did, not its time, so the functions
 * they hit do not pay for them either way (charged as slice time without the CPU time,
 * they cost those functions work they never did: 16 % in the worst window). The CPU time
 * still extends a preempted slice by what the host took, so it keeps its length. */
static void test_fixed_share_windows(void **state)
{
	uint64_t preempts;
	double quiet, preempted, blind;

	(void)state;
	quiet = windows_run(0, true, &preempts);
	print_message("fixed share, 62 busy, 1 s windows: worst share error %.2f %%\n", quiet);
	assert_true(quiet <= 5);
	preempted = windows_run(200, true, &preempts);
	print_message("the same, engine preempted %lu times for 300 us: %.2f %%\n",
		      (unsigned long)preempts, preempted);
	assert_true(preempts > WIN_COUNT * 250);
	assert_true(preempted <= 5);
	blind = windows_run(200, false, &preempts);
	print_message("the same without the engine's CPU time: %.2f %%\n", blind);
	assert_true(blind <= 5);
}

/* ---- shares of work while the host robs some functions' slices ---------------------- */

#define ROB_BY		(20 * VGPU_NSEC_PER_USEC)	/* per item of a robbed function */
#define ROB_RUN		(400 * VGPU_NSEC_PER_MSEC)	/* 2000 slices of WIN_QUANTUM */
#define ROB_N		8u

struct rob_run {
	struct scale_run s;
	uint32_t seen[ROB_N];		/* each robbed function's items at the last read */
};

/* Did a robbed function (the odd ones) complete an item since the last clock read? Then
 * the engine is running it: the host takes the engine thread for a while. */
static bool rob_robbing(void *arg)
{
	struct rob_run *r = arg;
	bool ran = false;

	for (unsigned int i = 1; i < r->s.n; i += 2) {
		uint32_t done = worker_done(&r->s.w[i]);

		ran = ran || done != r->seen[i];
		r->seen[i] = done;
	}
	return ran;
}

static void rob_snapshot(void *arg)
{
	struct rob_run *r = arg;

	scale_snapshot(&r->s);
}

/* A device of @n functions on one engine whose clock the host robs of @rob_by per item
 * of the robbed functions (rob_robbing()), for ROB_RUN of engine time. */
static struct tgpu *rob_gpu(struct rob_run *r, unsigned int n, uint64_t rob_by,
			    struct sclock **kp)
{
	struct gpu_config cfg = { .nr_vfs = n, .nr_engines = 1, .spin_ns = VGPU_NSEC_PER_SEC,
				  .clock_ns = sclock_read, .cpu_ns = sclock_cpu };
	struct sclock *k = sclock_new(ROB_RUN);

	r->s.n = n;
	k->tick = WIN_TICK;
	k->on_stop = rob_snapshot;
	k->robbing = rob_robbing;
	k->rob_by = rob_by;
	k->arg = r;
	cfg.clock_arg = k;
	*kp = k;
	return tgpu_new_cfg(cfg, 8);
}

/* Eight busy functions under fixed share with unequal weights (200, 150, 150, 100 x 5 per
 * mille); while every other one runs, the host takes the engine thread for 20 us per item
 * it completes (an item is about 50 us of engine work), and the engine's CPU time runs on
 * meanwhile, as a VM's does while the hypervisor steals its vCPU: nothing tells the engine
 * that time was not spent on the work. Every function's share of the work completed is
 * within 2 % of its weight's all the same: a slice is charged the work its methods did,
 * at one rate for every function, not the time it took. Charged the time, the robbed
 * functions paid for the host's time and completed a fifth less than their share (21 %);
 * charged a fixed cost per turn besides their work, they paid for needing more slices for
 * it (3 %). */
static void test_fixed_share_robbed(void **state)
{
	struct rob_run *r = calloc(1, sizeof(*r));
	uint64_t wsum = 0, total = 0;
	double worst = 0;
	struct sclock *k;
	struct tgpu *t;

	(void)state;
	assert_non_null(r);
	t = rob_gpu(r, ROB_N, ROB_BY, &k);
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_FIXED_SHARE, WIN_QUANTUM, 0), 0);
	for (unsigned int i = 0; i < ROB_N; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .weight = scale_weight(i, ROB_N) };

		wsum += s.weight;
		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		win_worker_init(t, &r->s.w[i], i + 1);
	}
	sclock_start(k);
	sclock_wait_stop(k);
	for (unsigned int i = 0; i < ROB_N; i++) {
		assert_true(r->s.done[i] > 0 && r->s.done[i] < WIN_ITEMS);	/* nobody ran dry */
		total += r->s.done[i];
	}
	for (unsigned int i = 0; i < ROB_N; i++) {
		double share = (double)r->s.done[i] / (double)total;
		double target = (double)scale_weight(i, ROB_N) / (double)wsum;
		double err = (share - target) / target * 100;

		print_message("fn %u%s: %u items, share %.4f target %.4f (%+.1f %%)\n", i + 1,
			      i % 2 ? " (robbed)" : "", r->s.done[i], share, target, err);
		worst = cmn_max(worst, err < 0 ? -err : err);
	}
	print_message("fixed share, 8 busy, half of them robbed of %.1f ms of %.1f: worst share "
		      "error %.2f %%\n", k->robbed / 1e6, ROB_RUN / 1e6, worst);
	/* The host took a good part of the robbed functions' time: a test of something. */
	assert_true(k->robbed >= ROB_RUN / 10);
	assert_true(worst <= 2);
	tgpu_free(t);
	sclock_free(k);
	free(r);
}

#define ROB_HEAVY	(400 * VGPU_NSEC_PER_USEC)	/* per item: 8 times its work, and under
						 * a stall (GPU_STALL_NS): unseen */
#define ROB_CLAMP	2u			/* GPU_COST_CLAMP */
#define ROB_QUANTUM	VGPU_NSEC_PER_MSEC	/* a slice outlasts a leap (see below) */

/* Two busy functions under equal share; the host takes the engine thread for 400 us per
 * item the second completes (8 times the item's work), unseen as before: to the engine,
 * the second function's methods cost 9 times what the model prices them at, as a method
 * the model underprices would. Charged by the work alone, it would get 9 times the
 * other's engine time; it gets at most GPU_COST_CLAMP squared times (its charges are
 * held at half its time at least, the other's, at the engine's rate raised by it, at
 * twice its time at most), and the other function still gets about a fifth of the
 * engine (a sixth at least). Slices of 1 ms, so that a slice is not stretched to more
 * than twice its length by a leap: such a slice would be the host's, not the work's. */
static void test_underpriced_bounded(void **state)
{
	struct rob_run *r = calloc(1, sizeof(*r));
	struct gpu_sched_stats st[2];
	struct sclock *k;
	struct tgpu *t;

	(void)state;
	assert_non_null(r);
	t = rob_gpu(r, 2, ROB_HEAVY, &k);
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_EQUAL_SHARE, ROB_QUANTUM, 0), 0);
	for (unsigned int i = 0; i < 2; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = ROB_QUANTUM };

		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		win_worker_init(t, &r->s.w[i], i + 1);
	}
	sclock_start(k);
	sclock_wait_stop(k);
	for (unsigned int i = 0; i < 2; i++) {
		gpu_sched_stats(t->g, i + 1, &st[i]);
		print_message("fn %u%s: %u items, %.1f ms of engine time\n", i + 1,
			      i ? " (underpriced)" : "", r->s.done[i], st[i].run_ns / 1e6);
		assert_true(r->s.done[i] > 0 && r->s.done[i] < WIN_ITEMS);
	}
	assert_true(st[1].run_ns <= st[0].run_ns * ROB_CLAMP * ROB_CLAMP * 105 / 100);
	assert_true(st[0].run_ns * 6 >= ROB_RUN);
	tgpu_free(t);
	sclock_free(k);
	free(r);
}

/* Busy functions keep whole slices, whatever their weights: a doorbell ends the running
 * turn (it may be for a function owed time), and the pick that follows finds none, since
 * every busy function's virtual time is at least the running one's when its slice began.
 * Judged against the running function's virtual time as it grows instead, the lightest
 * function's slices were cut for every heavier one next in line: more switches, each
 * costing it work. Four busy functions of weights 100-400 on the test clock while doorbells
 * ring all the time; not one slice is cut. */
static void test_busy_slices_whole(void **state)
{
	static const uint64_t wt[] = { 100, 200, 300, 400 };
	const unsigned int n = VGPU_ARRAY_SIZE(wt);
	struct scale_run *r = calloc(1, sizeof(*r));
	struct gpu_config cfg = { .nr_vfs = n, .nr_engines = 1, .spin_ns = VGPU_NSEC_PER_SEC,
				  .clock_ns = sclock_read, .cpu_ns = sclock_cpu };
	uint64_t dl = cmn_deadline_ns(RUN_TIMEOUT);
	struct gpu_sched_stats st;
	struct sclock *k;
	struct tgpu *t;
	bool stopped = false;

	(void)state;
	assert_non_null(r);
	r->n = n;
	k = sclock_new(500 * WIN_QUANTUM);
	k->tick = WIN_TICK;
	k->on_stop = scale_snapshot;	/* the engine runs on at the stop: count then */
	k->arg = r;
	cfg.clock_arg = k;
	t = tgpu_new_cfg(cfg, 8);
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_FIXED_SHARE, WIN_QUANTUM, 0), 0);
	for (unsigned int i = 0; i < n; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .weight = wt[i] };

		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		win_worker_init(t, &r->w[i], i + 1);
	}
	sclock_start(k);
	while (!stopped) {
		for (unsigned int i = 0; i < n; i++)
			tchan_kick(t, &r->w[i].c);	/* GP_PUT unchanged: a doorbell only */
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
		cmn_mutex_lock(&k->lock);
		stopped = k->stopped;
		cmn_mutex_unlock(&k->lock);
		if (cmn_deadline_passed(dl))
			fail_msg("the engine clock did not reach its stop");
	}
	for (unsigned int i = 0; i < n; i++) {
		gpu_sched_stats(t->g, i + 1, &st);
		print_message("weight %lu: %lu slices, %lu cut\n", (unsigned long)wt[i],
			      (unsigned long)st.slices, (unsigned long)st.preempted);
		assert_true(r->done[i] > 0 && r->done[i] < WIN_ITEMS);
		assert_true(st.slices >= wt[i] / 4);
		assert_int_equal(st.preempted, 0);
	}
	tgpu_free(t);
	sclock_free(k);
	free(r);
}

/* Items two busy fixed-share functions of weights @w0 and @w1 complete in 4000 ticks of
 * 1 ms slices; @done gets each one's count. */
static void fixed_pair_run(uint64_t w0, uint64_t w1, uint32_t done[2])
{
	const uint64_t quantum = 10 * TICK_NS, window = 400 * quantum;
	const uint64_t wt[2] = { w0, w1 };
	struct scale_run *r = calloc(1, sizeof(*r));
	struct sclock *k;
	struct tgpu *t;

	assert_non_null(r);
	r->n = 2;
	k = sclock_new(window);
	k->on_stop = scale_snapshot;
	k->arg = r;
	t = tgpu_on_sclock(2, k);
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_FIXED_SHARE, quantum, 0), 0);
	for (unsigned int i = 0; i < 2; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .weight = wt[i] };

		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		worker_init(t, &r->w[i], i + 1, ENTRIES - 1);
	}
	sclock_start(k);
	sclock_wait_stop(k);
	for (unsigned int i = 0; i < 2; i++) {
		assert_true(r->done[i] > 0 && r->done[i] < ENTRIES - 1);
		done[i] = r->done[i];
	}
	print_message("weights %lu/%lu: %u and %u items\n", (unsigned long)w0, (unsigned long)w1,
		      done[0], done[1]);
	tgpu_free(t);
	sclock_free(k);
	free(r);
}

/* Fixed share is weight/1000 of the engine, not weight over the sum of the weights: busy
 * functions of weights 300 and 200 do half the work that weights 600 and 400 do in the
 * same engine time (the unreserved half is spent idle, given to nobody), split 3:2. */
static void test_fixed_share_unreserved_idle(void **state)
{
	uint32_t half[2], full[2];

	(void)state;
	fixed_pair_run(300, 200, half);
	fixed_pair_run(600, 400, full);
	for (unsigned int i = 0; i < 2; i++)
		assert_true(half[i] * 2 >= full[i] * 95 / 100 && half[i] * 2 <= full[i] * 105 / 100);
	assert_true(half[0] * 2 >= half[1] * 3 * 95 / 100 && half[0] * 2 <= half[1] * 3 * 105 / 100);
}

/* ---- an engine that overslept while idle charges nobody for it ---------------------- */

#define OVER_QUANTUM	(10 * TICK_NS)
#define OVER_AT		(20 * OVER_QUANTUM)	/* the oversleep: both functions idle */
#define OVER_BY		(200 * OVER_QUANTUM)
#define OVER_WINDOW	(100 * OVER_QUANTUM)	/* then both busy until the stop */

/* Two functions with reserved slices and nothing to do; the engine, idle in one's slice,
 * wakes 200 slices late (the clock leaps while it waits, as a host that ran something else
 * would make it). Both then get work: each completes about half of what is done in the
 * next 100 slices. Charged for the oversleep, the function whose slice it was would be 200
 * slices behind and get none of them. */
static void oversleep_case(enum gpu_sched_policy policy)
{
	struct scale_run *r = calloc(1, sizeof(*r));
	const uint32_t items = ENTRIES - 1;
	struct sclock *k;
	struct tgpu *t;

	assert_non_null(r);
	r->n = 2;
	k = sclock_new(OVER_AT + OVER_BY + OVER_WINDOW);
	k->jump_at = OVER_AT;
	k->jump_by = OVER_BY;
	k->on_stop = scale_snapshot;
	k->arg = r;
	t = tgpu_on_sclock(2, k);
	assert_int_equal(gpu_priv_sched_set(t->p, policy, OVER_QUANTUM, 0), 0);
	for (unsigned int i = 0; i < 2; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = OVER_QUANTUM,
					       .weight = policy == GPU_SCHED_FIXED_SHARE ? 500 : 0 };

		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		/* A channel on the runlist, nothing queued: the slices are reserved, spent idle. */
		tchan_init(t, &r->w[i].c, i + 1, 0, 0, ENTRIES);
	}
	sclock_start(k);
	sclock_wait_until(k, OVER_AT + OVER_BY);
	for (unsigned int i = 0; i < 2; i++) {
		uint64_t dst = tgpu_vmem(t, i + 1, ITEM_BYTES + 64, VGPU_GMMU_PAGE_64K);
		uint64_t sem = dst + ITEM_BYTES;

		r->w[i].sem = tgpu_va(t, i + 1, sem, 4);
		*r->w[i].sem = 0;
		for (uint32_t j = 0; j < items; j++) {
			TM(&r->w[i].c, VGPU_M_FILL, lo32(dst), hi32(dst), ITEM_BYTES, 0, j);
			TM(&r->w[i].c, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), j + 1, 0, 0);
			tchan_gp(&r->w[i].c);
		}
	}
	for (unsigned int i = 0; i < 2; i++)
		tchan_kick(t, &r->w[i].c);
	sclock_wait_stop(k);
	print_message("after the oversleep: %u and %u items\n", r->done[0], r->done[1]);
	for (unsigned int i = 0; i < 2; i++) {
		assert_true(r->done[i] < items);
		/* Half each, less a few slices one got before the other's work was queued. */
		assert_true(r->done[i] * 100 >= (r->done[0] + r->done[1]) * 40);
	}
	tgpu_free(t);
	sclock_free(k);
	free(r);
}

static void test_oversleep_equal_share(void **state)
{
	(void)state;
	oversleep_case(GPU_SCHED_EQUAL_SHARE);
}

static void test_oversleep_fixed_share(void **state)
{
	(void)state;
	oversleep_case(GPU_SCHED_FIXED_SHARE);
}

/* ---- a waiting function is served within a bounded number of others' quanta ---------- */

/* Keep a flooder's ring at least half full of one FILL segment. */
static void flood_top_up(struct tgpu *t, struct worker *w)
{
	uint32_t mask = ENTRIES - 1, pending = (w->c.put - tchan_get(&w->c)) & mask;

	if (pending > ENTRIES / 2)
		return;
	for (; pending < ENTRIES - 8; pending++) {
		w->c.gp[w->c.put] = vgpu_gp_entry(w->c.pb_va, 6);
		w->c.put = (w->c.put + 1) & mask;
	}
	tchan_kick(t, &w->c);
}

static void flood_init(struct tgpu *t, struct worker *w, unsigned int fn)
{
	uint64_t dst = tgpu_vmem(t, fn, ITEM_BYTES, VGPU_GMMU_PAGE_64K);

	tchan_init(t, &w->c, fn, 0, 0, ENTRIES);
	TM(&w->c, VGPU_M_FILL, lo32(dst), hi32(dst), ITEM_BYTES, 0, fn);
	flood_top_up(t, w);
}

static const struct wait_case {
	const char *name;
	enum gpu_sched_policy policy;
	unsigned int n;		/* flooding functions; the waiting one is n + 1 */
	uint64_t bound_quanta;	/* worst wait, in slices of the flooders */
} wait_cases[] = {
	/* Best effort: a slice is cut for the function owed time; a fraction of one. */
	{ "best effort, 8 flooding", GPU_SCHED_BEST_EFFORT, 8, 0 },
	{ "best effort, 62 flooding", GPU_SCHED_BEST_EFFORT, 62, 0 },
	/* Equal share: slices are reserved, the waiting function's comes within a round (its
	 * own slot and the others', each a few ticks of switching longer than a quantum). */
	{ "equal share, 8 flooding", GPU_SCHED_EQUAL_SHARE, 8, 10 },
	/* Fixed share, the flooders weighted 8-20 and the waiting function the lightest (8
	 * per mille): its reserved slice comes once in 1000 / 8 = 125 slices of the others
	 * and the unreserved part, each a few ticks of switching longer than a quantum. */
	{ "fixed share, 62 flooding, unequal weights", GPU_SCHED_FIXED_SHARE, 62, 140 },
};

#define WAIT_ROUNDS	8u
#define WAIT_QUANTUM	(20 * TICK_NS)	/* 2 ms, the default slice */

/* The waiting function's wait, submission to execution, in engine-clock ns: the test
 * rings with the clock held (under its lock), the engine stamps its own clock. */
static void test_wait_bounded(void **state)
{
	const struct wait_case *c = *state;
	/* Best effort: the minimum quantum and the ticks of one switch, half a slice at most. */
	const uint64_t bound = c->bound_quanta ? c->bound_quanta * WAIT_QUANTUM : WAIT_QUANTUM / 2;
	struct worker *fl = calloc(c->n, sizeof(*fl));
	struct tchan v;
	struct gpu_sched_stats st;
	uint64_t *stamps, stamps_va, worst = 0;
	struct sclock *k;
	struct tgpu *t;

	assert_non_null(fl);
	k = sclock_new(UINT64_MAX);
	t = tgpu_on_sclock(c->n + 1, k);
	assert_int_equal(gpu_priv_sched_set(t->p, c->policy, WAIT_QUANTUM, 0), 0);
	for (unsigned int i = 0; i <= c->n; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = WAIT_QUANTUM };

		if (c->policy == GPU_SCHED_FIXED_SHARE)
			s.weight = i < c->n ? scale_weight(i, c->n) : scale_weight(0, c->n);
		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
	}
	for (unsigned int i = 0; i < c->n; i++)
		flood_init(t, &fl[i], i + 1);
	tchan_init(t, &v, c->n + 1, 0, 0, 64);
	stamps_va = tgpu_vmem(t, c->n + 1, 4096, VGPU_GMMU_PAGE_64K);
	stamps = tgpu_va(t, c->n + 1, stamps_va, WAIT_ROUNDS * 8);
	memset(stamps, 0, WAIT_ROUNDS * 8);
	sclock_start(k);
	/* Every flooder has had its first slice: from here on the waiting function is owed
	 * more than any of them. */
	sclock_wait_until(k, (c->n + 2) * WAIT_QUANTUM);
	for (unsigned int r = 0; r < WAIT_ROUNDS; r++) {
		uint64_t va = stamps_va + r * 8ull, t0, ts = 0, dl;

		/* A round of the flooders' slices between submissions: the waiting function's
		 * credit (one slice) is back. Then a varying real-time while, so the ring lands
		 * anywhere in a slice. */
		for (unsigned int i = 0; i < c->n; i++)
			flood_top_up(t, &fl[i]);
		t0 = sclock_now(k);
		sclock_wait_until(k, t0 + (c->n + 1) * WAIT_QUANTUM);
		cmn_sleep_ns((r % 4 + 1) * 100 * VGPU_NSEC_PER_USEC);
		TM(&v, VGPU_M_TIMESTAMP, lo32(va), hi32(va));
		tchan_gp(&v);
		cmn_mutex_lock(&k->lock);
		t0 = k->now;
		tchan_kick(t, &v);
		cmn_mutex_unlock(&k->lock);
		/* Until the stamp, or until the engine's clock is well past the bound (the
		 * clock moves only as the engines read it: on a loaded host the bound's engine
		 * time can take seconds of real time). */
		dl = cmn_deadline_ns(T_TIMEOUT);
		while (!(ts = __atomic_load_n(&stamps[r], __ATOMIC_ACQUIRE)) &&
		       sclock_now(k) <= t0 + 4 * bound && !cmn_deadline_passed(dl))
			cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
		if (!ts)
			fail_msg("round %u: no stamp by engine time %+.1f ms (bound %.1f)", r,
				 (sclock_now(k) - t0) / 1e6, bound / 1e6);
		assert_true(ts > t0);
		worst = cmn_max(worst, ts - t0);
	}
	gpu_sched_stats(t->g, c->n + 1, &st);
	print_message("%s: worst wait %.1f ms of engine time (bound %.1f), %lu slices\n", c->name,
		      worst / 1e6, bound / 1e6, (unsigned long)st.slices);
	assert_true(worst <= bound);
	tgpu_free(t);
	sclock_free(k);
	free(fl);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(scale_cases) + VGPU_ARRAY_SIZE(wait_cases) + 7];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(scale_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = scale_cases[i].name,
						  .test_func = test_scale_shares,
						  .initial_state = (void *)&scale_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fixed_share_unreserved_idle);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fixed_share_windows);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fixed_share_robbed);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_underpriced_bounded);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_busy_slices_whole);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_oversleep_equal_share);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_oversleep_fixed_share);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(wait_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = wait_cases[i].name,
						  .test_func = test_wait_bounded,
						  .initial_state = (void *)&wait_cases[i] };
	return _cmocka_run_group_tests("gpu_sched_scale", tests, n, NULL, NULL);
}
