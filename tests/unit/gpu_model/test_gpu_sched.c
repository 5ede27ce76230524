// SPDX-License-Identifier: MIT
/* Scheduler: 2, 4 and 8 busy functions on one engine under each policy; every function's
 * share of engine time within 5 % (relative) of its target. Then the difference between
 * reserved (fixed share) and work-conserving (best effort) slices, and the preemption
 * timeout. Shares and slices are measured on a clock the test drives (each engine read
 * advances it by one tick), so they count scheduler decisions and work, not host load. */
#include <pthread.h>
#include <stdio.h>

#include "common/lock.h"
#include "gpu_test.h"

#define ENTRIES		4096u
#define FILL_BYTES	(64u << 10)	/* one chunk: one clock read per GP entry */
#define TICK_NS		(100 * VGPU_NSEC_PER_USEC)
#define RUN_TIMEOUT	(120 * VGPU_NSEC_PER_SEC)	/* a hang, not a measurement */

/* The engine's clock in these tests: held at 0 (an engine reading it waits) until
 * tclock_start(), then TICK_NS more at every read until it stands still at @stop. The
 * engine goes on running after that, but no slice ends and no more time is charged, so
 * the statistics can be read at leisure. */
struct tclock {
	struct cmn_mutex lock;
	pthread_cond_t cv;
	bool started;
	uint64_t now, stop;
	/* If set, called at every read once started, with the lock held: what a test must
	 * see at one point of the engine's work (it reads the clock between any two turns). */
	void (*peek)(struct tclock *k);
	void *peek_arg;
};

static uint64_t tclock_read(void *arg)
{
	struct tclock *k = arg;
	uint64_t v;

	cmn_mutex_lock(&k->lock);
	while (!k->started)
		cmn_cond_wait(&k->cv, &k->lock);
	if (k->peek)
		k->peek(k);
	if (k->now < k->stop)
		k->now = cmn_min(k->now + TICK_NS, k->stop);
	v = k->now;
	cmn_mutex_unlock(&k->lock);
	return v;
}

/* On the heap: a failed case leaves its device running, and that engine must not read
 * the next case's clock. */
static struct tclock *tclock_new(uint64_t stop)
{
	struct tclock *k = calloc(1, sizeof(*k));

	assert_non_null(k);
	cmn_mutex_init(&k->lock);
	pthread_cond_init(&k->cv, NULL);
	k->stop = stop;
	return k;
}

static void tclock_start(struct tclock *k)
{
	cmn_mutex_lock(&k->lock);
	k->started = true;
	pthread_cond_broadcast(&k->cv);
	cmn_mutex_unlock(&k->lock);
}

/* Wait (bounded, in real time) until the clock has reached its stop. */
static void tclock_wait_stop(struct tclock *k)
{
	uint64_t dl = cmn_deadline_ns(RUN_TIMEOUT), now;

	for (;;) {
		cmn_mutex_lock(&k->lock);
		now = k->now;
		cmn_mutex_unlock(&k->lock);
		if (now >= k->stop)
			return;
		if (cmn_deadline_passed(dl))
			fail_msg("the engine clock is at %llu ns of %llu after %llu s",
				 (unsigned long long)now, (unsigned long long)k->stop,
				 (unsigned long long)(RUN_TIMEOUT / VGPU_NSEC_PER_SEC));
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
}

/* The clock as the engine last read it (a look that does not move it). */
static uint64_t tclock_now(struct tclock *k)
{
	uint64_t now;

	cmn_mutex_lock(&k->lock);
	now = k->now;
	cmn_mutex_unlock(&k->lock);
	return now;
}

/* Wait (bounded, in real time) until the engine has read the clock up to @t: it reads it
 * between any two turns, so every turn due before @t has run. */
static void tclock_wait_until(struct tclock *k, uint64_t t)
{
	uint64_t dl = cmn_deadline_ns(RUN_TIMEOUT);

	while (tclock_now(k) < t) {
		if (cmn_deadline_passed(dl))
			fail_msg("the engine clock did not reach %llu ns", (unsigned long long)t);
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
}

/* After the device that read it is gone. */
static void tclock_free(struct tclock *k)
{
	pthread_cond_destroy(&k->cv);
	cmn_mutex_destroy(&k->lock);
	free(k);
}

/* A device of @nfn VFs on one engine that runs on @k and, idle, spins on it instead of
 * sleeping in real time. */
static struct tgpu *tgpu_on_clock(unsigned int nfn, struct tclock *k)
{
	struct gpu_config cfg = { .nr_vfs = nfn, .nr_engines = 1, .spin_ns = VGPU_NSEC_PER_SEC,
				  .clock_ns = tclock_read, .clock_arg = k };

	return tgpu_new_cfg(cfg, 16);
}

struct busy {
	struct tchan c;
};

static void busy_init(struct tgpu *t, struct busy *b, unsigned int fn)
{
	uint64_t dst = tgpu_vmem(t, fn, FILL_BYTES, VGPU_GMMU_PAGE_64K);

	tchan_init(t, &b->c, fn, 0, 0, ENTRIES);
	TM(&b->c, VGPU_M_FILL, lo32(dst), hi32(dst), FILL_BYTES, 0, fn);
	b->c.pb_off = 3 + 3;	/* one FILL method: header + 5 args */
}

/* Keep at least half the ring queued; every entry runs the same FILL segment. */
static void busy_top_up(struct tgpu *t, struct busy *b)
{
	uint32_t mask = ENTRIES - 1, pending = (b->c.put - tchan_get(&b->c)) & mask;

	if (pending > ENTRIES * 3 / 4)
		return;
	for (; pending < ENTRIES - 8; pending++) {
		b->c.gp[b->c.put] = vgpu_gp_entry(b->c.pb_va, 6);
		b->c.put = (b->c.put + 1) & mask;
	}
	tchan_kick(t, &b->c);
}

static const struct share_case {
	const char *name;
	enum gpu_sched_policy policy;
	unsigned int nfn;
} share_cases[] = {
	{ "best effort, 2 functions", GPU_SCHED_BEST_EFFORT, 2 },
	{ "best effort, 4 functions", GPU_SCHED_BEST_EFFORT, 4 },
	{ "best effort, 8 functions", GPU_SCHED_BEST_EFFORT, 8 },
	{ "equal share, 2 functions", GPU_SCHED_EQUAL_SHARE, 2 },
	{ "equal share, 4 functions", GPU_SCHED_EQUAL_SHARE, 4 },
	{ "equal share, 8 functions", GPU_SCHED_EQUAL_SHARE, 8 },
	{ "fixed share, 2 functions", GPU_SCHED_FIXED_SHARE, 2 },
	{ "fixed share, 4 functions", GPU_SCHED_FIXED_SHARE, 4 },
	{ "fixed share, 8 functions", GPU_SCHED_FIXED_SHARE, 8 },
};

/* Fixed-share weights in per mille, all different sizes. */
static uint64_t weight(unsigned int i, unsigned int n)
{
	static const uint64_t w2[] = { 667, 333 }, w4[] = { 400, 300, 200, 100 },
			      w8[] = { 200, 150, 150, 100, 100, 100, 100, 100 };

	return n == 2 ? w2[i] : n == 4 ? w4[i] : w8[i];
}

/* 100 slices per function on average (about 9 GP entries each): every ring, filled once
 * before the clock starts, still holds work when it stops. */
static void test_shares(void **state)
{
	const struct share_case *c = *state;
	const uint64_t window = c->nfn * 100 * VGPU_NSEC_PER_MSEC;
	struct tclock *k;
	struct tgpu *t;
	struct busy b[8];
	struct gpu_sched_stats st[8];
	uint64_t total = 0, wsum = 0;

	k = tclock_new(window);
	t = tgpu_on_clock(c->nfn, k);
	/* 1 ms slices: ten clock ticks. */
	assert_int_equal(gpu_priv_sched_set(t->p, c->policy, 1 * VGPU_NSEC_PER_MSEC,
					    c->nfn * 8 * VGPU_NSEC_PER_MSEC), 0);
	for (unsigned int i = 0; i < c->nfn; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC,
					       .weight = c->policy == GPU_SCHED_FIXED_SHARE ?
							 weight(i, c->nfn) : 0 };

		wsum += s.weight;
		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		busy_init(t, &b[i], i + 1);
		busy_top_up(t, &b[i]);
	}
	tclock_start(k);
	tclock_wait_stop(k);
	/* A turn still running at the stop adds at most one slice to its function. */
	for (unsigned int i = 0; i < c->nfn; i++) {
		gpu_sched_stats(t->g, i + 1, &st[i]);
		total += st[i].run_ns;
	}
	assert_true(total > window / 2);
	for (unsigned int i = 0; i < c->nfn; i++) {
		double share = (double)st[i].run_ns / (double)total;
		double target = c->policy == GPU_SCHED_FIXED_SHARE ? (double)weight(i, c->nfn) / (double)wsum
								    : 1.0 / c->nfn;

		print_message("fn %u: share %.4f target %.4f (%+.1f %%) slices %lu\n", i + 1, share,
			      target, (share - target) / target * 100, st[i].slices);
		assert_true(share >= target * 0.95 && share <= target * 1.05);
		/* No function ran out of work: an idle slice would show here. */
		assert_int_equal(st[i].idle_ns, 0);
		assert_true(st[i].slices > 0);
	}
	tgpu_free(t);
	tclock_free(k);
}

/* One busy function (weight 500) next to an idle one (weight 500), over 150 slices of
 * 2 ms: fixed share keeps the idle function's slices and spends them idle, best effort
 * hands them over. */
static void reserve_case(enum gpu_sched_policy policy)
{
	const uint64_t window = 300 * VGPU_NSEC_PER_MSEC;
	struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = 2 * VGPU_NSEC_PER_MSEC, .weight = 500 };
	struct gpu_sched_stats a, o;
	struct tclock *k;
	struct tgpu *t;
	struct busy b, idle;

	k = tclock_new(window);
	t = tgpu_on_clock(2, k);
	assert_int_equal(gpu_priv_sched_set(t->p, policy, 2 * VGPU_NSEC_PER_MSEC, 0), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &s), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 2, &s), 0);
	busy_init(t, &b, 1);
	busy_init(t, &idle, 2);		/* has a channel, never gets work */
	busy_top_up(t, &b);
	tclock_start(k);
	tclock_wait_stop(k);
	gpu_sched_stats(t->g, 1, &a);
	gpu_sched_stats(t->g, 2, &o);
	print_message("busy: run %.1f ms of %.1f; idle function idled %.1f ms in %lu slices\n",
		      a.run_ns / 1e6, window / 1e6, o.idle_ns / 1e6, o.slices);
	if (policy == GPU_SCHED_FIXED_SHARE) {
		/* Half the slices each; the busy one loses a little to switching. */
		assert_true(o.idle_ns >= window * 4 / 10 && o.idle_ns <= window * 6 / 10);
		assert_true(a.run_ns >= window * 4 / 10 && a.run_ns <= window * 6 / 10);
		assert_true(o.slices > 0);
		assert_int_equal(o.target_slice_ns, 2 * VGPU_NSEC_PER_MSEC);
	} else {
		assert_true(a.run_ns >= window * 85 / 100);
		assert_true(o.idle_ns == 0 && o.slices == 0);
	}
	tgpu_free(t);
	tclock_free(k);
}

static void test_fixed_share_reserves(void **state)
{
	(void)state;
	reserve_case(GPU_SCHED_FIXED_SHARE);
}

static void test_best_effort_conserves(void **state)
{
	(void)state;
	reserve_case(GPU_SCHED_BEST_EFFORT);
}

/* Methods channel @chid of @fn has run. */
static uint64_t chan_methods(struct tgpu *t, unsigned int fn, unsigned int chid)
{
	struct gpu_chan_status cs;

	assert_int_equal(gpu_chan_status(t->g, fn, chid, &cs), 0);
	return cs.methods;
}

/* A function whose channel does not yield within its preemption timeout (here 1 ns, so
 * any overrun of its slice counts) has that channel put in error; the other keeps going. */
static void test_preempt_timeout(void **state)
{
	struct tgpu *t = tgpu_new(2, 1, 16);
	struct gpu_priv_sched_fn strict = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC,
					    .preempt_timeout_ns = 1 };
	struct gpu_priv_sched_fn normal = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC };
	struct gpu_sched_stats st;
	struct gpu_chan_status cs;
	struct busy b[2];
	uint64_t m0, dl;

	(void)state;
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &strict), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 2, &normal), 0);
	busy_init(t, &b[0], 1);
	busy_init(t, &b[1], 2);
	busy_top_up(t, &b[0]);
	busy_top_up(t, &b[1]);
	assert_int_equal(tchan_wait_state(t, &b[0].c, GPU_CHAN_STATE_ERROR), 0);
	assert_int_equal(tchan_err(&b[0].c), VGPU_CHAN_ERR_PREEMPT_TIMEOUT);
	gpu_sched_stats(t->g, 1, &st);
	assert_true(st.preempt_timeouts >= 1);
	assert_int_equal(gpu_chan_status(t->g, 2, 0, &cs), 0);
	assert_int_equal(cs.state == GPU_CHAN_STATE_ERROR, 0);
	/* The other function goes on running methods (bounded wait for progress). */
	m0 = chan_methods(t, 2, 0);
	dl = cmn_deadline_ns(T_TIMEOUT);
	while (chan_methods(t, 2, 0) <= m0 && !cmn_deadline_passed(dl)) {
		busy_top_up(t, &b[1]);
		cmn_sleep_ns(200 * VGPU_NSEC_PER_USEC);
	}
	assert_true(chan_methods(t, 2, 0) > m0);
	assert_int_equal(gpu_chan_status(t->g, 2, 0, &cs), 0);
	assert_int_equal(cs.state == GPU_CHAN_STATE_ERROR, 0);
	tgpu_free(t);
}

#define NOP_ENTRIES	4096u
/* GP entries a function's turns may take before its slice or turn ends: two turns of 256
 * (GPU_CHAN_BATCH). A 1 ms slice is ten clock reads; NOPs read the clock every 16. */
#define NOP_BOUND	512u

/* A flood of NOP control entries on @fn's channel 0: the whole ring but one, published. */
static void nop_flood_init(struct tgpu *t, struct tchan *c, unsigned int fn)
{
	tchan_init(t, c, fn, 0, 0, NOP_ENTRIES);
	for (uint32_t i = 0; i < NOP_ENTRIES - 1; i++)
		tchan_gp_raw(c, VGPU_GP_OPCODE_NOP);
}

/* The flood's GP_GET when the engine first read its clock after the victim's release. */
struct nop_watch {
	struct tchan *flood;
	const uint32_t *sem;
	bool seen;
	uint32_t flood_get;
};

static void nop_peek(struct tclock *k)
{
	struct nop_watch *w = k->peek_arg;

	if (!w->seen && __atomic_load_n(w->sem, __ATOMIC_ACQUIRE) == 1) {
		w->seen = true;
		w->flood_get = tchan_get(w->flood);
	}
}

/* A GPFIFO of NOPs is work like any other: its turns end after GPU_CHAN_BATCH entries or
 * at the slice's end, so another function's job runs after a bounded number of them, not
 * after the whole ring (nor ever, with a GP_PUT that keeps moving). */
static void test_nop_flood_yields(void **state)
{
	struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC };
	struct tclock *k = tclock_new(10 * VGPU_NSEC_PER_SEC);
	struct tgpu *t = tgpu_on_clock(2, k);
	struct nop_watch w = { 0 };
	struct tchan flood, victim;
	uint64_t sem;
	uint32_t get;
	bool seen;

	(void)state;
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_BEST_EFFORT, VGPU_NSEC_PER_MSEC, 0), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &s), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 2, &s), 0);
	nop_flood_init(t, &flood, 1);
	tchan_init(t, &victim, 2, 0, 0, 16);
	sem = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_64K);
	w.flood = &flood;
	w.sem = tgpu_va(t, 2, sem, 4);
	TM(&victim, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), 1, 0, 0);
	tchan_gp(&victim);
	k->peek_arg = &w;
	k->peek = nop_peek;
	/* The flood first: with both pending at the first pick, function 1 runs first. */
	tchan_kick(t, &flood);
	tchan_kick(t, &victim);
	tclock_start(k);
	assert_int_equal(tchan_wait(&victim), 0);
	cmn_mutex_lock(&k->lock);
	seen = w.seen;
	get = w.flood_get;
	cmn_mutex_unlock(&k->lock);
	print_message("flood GP_GET when the victim ran: %u of %u\n", get, NOP_ENTRIES - 1);
	assert_true(seen);
	assert_true(get <= NOP_BOUND);
	tgpu_free(t);
	tclock_free(k);
}

/* A turn of NOPs is a turn that did work: one still running past its slice's end by more
 * than the preemption timeout (1 ns: any overrun) puts the channel in error, as a turn of
 * methods would, instead of ending as "empty" and escaping the check. */
static void test_nop_flood_preempt_timeout(void **state)
{
	struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC,
				       .preempt_timeout_ns = 1 };
	struct tclock *k = tclock_new(10 * VGPU_NSEC_PER_SEC);
	struct tgpu *t = tgpu_on_clock(1, k);
	struct gpu_sched_stats st;
	struct tchan flood;

	(void)state;
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &s), 0);
	nop_flood_init(t, &flood, 1);
	tchan_kick(t, &flood);
	tclock_start(k);
	/* Done with the ring or in error: either ends the wait. */
	assert_int_equal(tchan_wait(&flood), VGPU_CHAN_ERR_PREEMPT_TIMEOUT);
	assert_true(tchan_get(&flood) <= NOP_BOUND);
	gpu_sched_stats(t->g, 1, &st);
	assert_true(st.preempt_timeouts >= 1);
	tgpu_free(t);
	tclock_free(k);
}

/* A SEM_ACQUIRE the guest rewrites into a NOP while the channel waits in it stays the
 * acquire the channel fetched: the release after it runs only once the semaphore is
 * released, however many times the wait was retried after the rewrite. Then the channel has
 * nothing to do and gets no more turns: over a second of the engine's clock its function
 * is given no slice (a wait that outlived its method once made the channel runnable at
 * every pick). */
static void test_acquire_rewritten(void **state)
{
	/* A wait retried every 50 us runs through the clock fast: no stop in sight. */
	struct tclock *k = tclock_new(UINT64_MAX / 2);
	struct tgpu *t = tgpu_on_clock(1, k);
	uint64_t sem = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_64K);
	uint32_t *s = tgpu_va(t, 1, sem, 16), acq;
	struct gpu_sched_stats before, after;
	struct tchan c;

	(void)state;
	tchan_init(t, &c, 1, 0, 0, 16);
	acq = c.pb_off;
	/* Its timeout (in us, on the host's clock) is not what ends the wait here. */
	TM(&c, VGPU_M_SEM_ACQUIRE, lo32(sem), hi32(sem), 1, 0, 0, UINT32_MAX);
	TM(&c, VGPU_M_SEM_RELEASE, lo32(sem + 8), hi32(sem + 8), 7, 0, 0);
	tchan_gp(&c);
	tchan_kick(t, &c);
	tclock_start(k);
	tclock_wait_until(k, 10 * VGPU_NSEC_PER_MSEC);	/* retried every 50 us meanwhile */
	assert_int_equal(__atomic_load_n(&s[2], __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&c.pb[acq], VGPU_MTHD(VGPU_M_NOP, 6), __ATOMIC_RELEASE);
	/* Every turn that reads the clock past this look sees the rewrite. */
	tclock_wait_until(k, tclock_now(k) + 10 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(__atomic_load_n(&s[2], __ATOMIC_ACQUIRE), 0);
	__atomic_store_n(&s[0], 1, __ATOMIC_RELEASE);
	assert_int_equal(tchan_wait(&c), 0);
	assert_int_equal(__atomic_load_n(&s[2], __ATOMIC_ACQUIRE), 7);
	tclock_wait_until(k, tclock_now(k) + 10 * VGPU_NSEC_PER_MSEC);
	gpu_sched_stats(t->g, 1, &before);
	tclock_wait_until(k, tclock_now(k) + VGPU_NSEC_PER_SEC);
	gpu_sched_stats(t->g, 1, &after);
	print_message("slices in a second after the work: %lu\n", after.slices - before.slices);
	assert_int_equal(after.slices, before.slices);
	tgpu_free(t);
	tclock_free(k);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(share_cases) + 6];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(share_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = share_cases[i].name, .test_func = test_shares,
						  .initial_state = (void *)&share_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fixed_share_reserves);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_best_effort_conserves);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_preempt_timeout);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_nop_flood_yields);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_nop_flood_preempt_timeout);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_acquire_rewritten);
	return _cmocka_run_group_tests("gpu_sched", tests, n, NULL, NULL);
}
