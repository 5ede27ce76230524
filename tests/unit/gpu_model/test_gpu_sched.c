/* Scheduler: 2, 4 and 8 busy functions on one engine for 1 s under each policy; every
 * function's share of engine time within 5 % (relative) of its target. Then the
 * difference between reserved (fixed share) and work-conserving (best effort) slices. */
#include <stdio.h>

#include "gpu_test.h"

#define ENTRIES		4096u
#define FILL_BYTES	(1u << 20)	/* deep queues: a starved test thread must not let one run dry */

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

static void run_for(struct tgpu *t, struct busy *b, unsigned int n, uint64_t ns)
{
	uint64_t end = cmn_now_ns() + ns;

	while (cmn_now_ns() < end) {
		for (unsigned int i = 0; i < n; i++)
			busy_top_up(t, &b[i]);
		cmn_sleep_ns(200 * VGPU_NSEC_PER_USEC);
	}
}

static void snap(struct tgpu *t, unsigned int n, uint64_t *run)
{
	struct gpu_sched_stats s;

	for (unsigned int i = 0; i < n; i++) {
		gpu_sched_stats(t->g, i + 1, &s);
		/* Time the engine gave the function: running, or idle in its own reserved slice
		 * should the top-up thread be starved by the host for a moment. */
		run[i] = s.run_ns + s.idle_ns;
	}
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

/* Fixed-share weights in per mille, all different sizes; the smallest share stays >= 10 %
 * so one host-stretched slice (a few ms on a loaded 2-core machine) is < 5 % of it. */
static uint64_t weight(unsigned int i, unsigned int n)
{
	static const uint64_t w2[] = { 667, 333 }, w4[] = { 400, 300, 200, 100 },
			      w8[] = { 200, 150, 150, 100, 100, 100, 100, 100 };

	return n == 2 ? w2[i] : n == 4 ? w4[i] : w8[i];
}

static void test_shares(void **state)
{
	const struct share_case *c = *state;
	struct tgpu *t = tgpu_new(c->nfn, 1, 16);
	struct busy b[8];
	uint64_t r0[8], r1[8], total = 0, wsum = 0;

	/* 1 ms slices: long against one FILL chunk, short against the 1 s window. */
	assert_int_equal(gpu_priv_sched_set(t->p, c->policy, 1 * VGPU_NSEC_PER_MSEC,
					    c->nfn * 8 * VGPU_NSEC_PER_MSEC), 0);
	for (unsigned int i = 0; i < c->nfn; i++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC,
					       .weight = c->policy == GPU_SCHED_FIXED_SHARE ?
							 weight(i, c->nfn) : 0 };

		wsum += s.weight;
		assert_int_equal(gpu_priv_sched_fn_set(t->p, i + 1, &s), 0);
		busy_init(t, &b[i], i + 1);
	}
	run_for(t, b, c->nfn, 100 * VGPU_NSEC_PER_MSEC);	/* warm up */
	snap(t, c->nfn, r0);
	run_for(t, b, c->nfn, VGPU_NSEC_PER_SEC);
	snap(t, c->nfn, r1);
	for (unsigned int i = 0; i < c->nfn; i++)
		total += r1[i] - r0[i];
	assert_true(total > 0);
	for (unsigned int i = 0; i < c->nfn; i++) {
		double share = (double)(r1[i] - r0[i]) / (double)total;
		double target = c->policy == GPU_SCHED_FIXED_SHARE ? (double)weight(i, c->nfn) / (double)wsum
								    : 1.0 / c->nfn;

		struct gpu_sched_stats st;

		gpu_sched_stats(t->g, i + 1, &st);
		print_message("fn %u: share %.4f target %.4f (%+.1f %%) idle %lu us preempt %lu us slices %lu\n",
			      i + 1, share, target, (share - target) / target * 100, st.idle_ns / 1000,
			      st.preempt_ns / 1000, st.slices);
		assert_true(share >= target * 0.95 && share <= target * 1.05);
	}
	tgpu_free(t);
}

/* One busy function (weight 500) next to an idle one (weight 500): fixed share keeps the
 * idle function's slices and spends them idle, best effort hands them over. */
static void reserve_case(enum gpu_sched_policy policy)
{
	struct tgpu *t = tgpu_new(2, 1, 16);
	struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = 2 * VGPU_NSEC_PER_MSEC, .weight = 500 };
	struct gpu_sched_stats a0, a1, b0, b1;
	struct busy b, idle;
	uint64_t t0, t1;

	assert_int_equal(gpu_priv_sched_set(t->p, policy, 2 * VGPU_NSEC_PER_MSEC, 0), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &s), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 2, &s), 0);
	busy_init(t, &b, 1);
	busy_init(t, &idle, 2);		/* has a channel, never gets work */
	run_for(t, &b, 1, 50 * VGPU_NSEC_PER_MSEC);
	gpu_sched_stats(t->g, 1, &a0);
	gpu_sched_stats(t->g, 2, &b0);
	t0 = cmn_now_ns();
	run_for(t, &b, 1, 300 * VGPU_NSEC_PER_MSEC);
	t1 = cmn_now_ns();
	gpu_sched_stats(t->g, 1, &a1);
	gpu_sched_stats(t->g, 2, &b1);
	double run = (double)(a1.run_ns - a0.run_ns), idle_other = (double)(b1.idle_ns - b0.idle_ns);
	/* Time the host took the engine away counts as the busy function's slice time. */
	double busy_wall = (run + (double)(a1.stall_ns - a0.stall_ns)) / (double)(t1 - t0);

	print_message("busy: run %.1f ms (%.3f of wall with stalls); idle function idled %.1f ms\n",
		      run / 1e6, busy_wall, idle_other / 1e6);
	if (policy == GPU_SCHED_FIXED_SHARE) {
		/* The idle function's slices were kept and spent idle: a large part of the
		 * window (half with equal weights on a quiet host; the busy side's share of
		 * wall time varies with how much CPU the host leaves the engine). */
		assert_true(idle_other >= 0.2 * (double)(t1 - t0));
		assert_true(b1.slices > b0.slices);
		assert_int_equal(b1.target_slice_ns, 2 * VGPU_NSEC_PER_MSEC);
	} else {
		assert_true(busy_wall >= 0.85);
		assert_true(b1.idle_ns == 0 && b1.slices == 0);
	}
	tgpu_free(t);
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

	(void)state;
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &strict), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 2, &normal), 0);
	busy_init(t, &b[0], 1);
	busy_init(t, &b[1], 2);
	run_for(t, b, 2, 50 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(tchan_wait_state(t, &b[0].c, GPU_CHAN_STATE_ERROR), 0);
	assert_int_equal(tchan_err(&b[0].c), VGPU_CHAN_ERR_PREEMPT_TIMEOUT);
	gpu_sched_stats(t->g, 1, &st);
	assert_true(st.preempt_timeouts >= 1);
	assert_int_equal(gpu_chan_status(t->g, 2, 0, &cs), 0);
	assert_int_equal(cs.state == GPU_CHAN_STATE_ERROR, 0);
	uint64_t m0 = cs.methods;

	run_for(t, b + 1, 1, 20 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(gpu_chan_status(t->g, 2, 0, &cs), 0);
	assert_true(cs.methods > m0);
	tgpu_free(t);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(share_cases) + 3];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(share_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = share_cases[i].name, .test_func = test_shares,
						  .initial_state = (void *)&share_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fixed_share_reserves);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_best_effort_conserves);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_preempt_timeout);
	return _cmocka_run_group_tests("gpu_sched", tests, n, NULL, NULL);
}
