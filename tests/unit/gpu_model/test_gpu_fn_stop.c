// SPDX-License-Identifier: MIT
/* A function whose scheduler entry is disabled in the middle of a long slice (what a live
 * migration's switchover does): gpu_fn_quiesce() returns once no engine runs it, and from
 * then on the engine takes none of its work, though its ring is full and most of its slice
 * is left; another function's work runs meanwhile, and a doorbell on the disabled one is
 * kept for later. Enabled again, it finishes. Every wait is for GP_GET or a method count. */
#include "gpu_test.h"

#define ENTRIES		4096u
#define FILL_BYTES	(1u << 20)	/* a GP entry's work: about 0.1 ms */

/* Methods @fn's channel 0 has executed. */
static uint64_t methods(struct tgpu *t, unsigned int fn)
{
	struct gpu_chan_status st;

	assert_int_equal(gpu_chan_status(t->g, fn, 0, &st), 0);
	return st.methods;
}

/* One FILL on @c, waited for. */
static void fill_once(struct tgpu *t, struct tchan *c, uint64_t dst)
{
	TM(c, VGPU_M_FILL, lo32(dst), hi32(dst), 4096, 0, 7);
	tchan_gp(c);
	tchan_kick(t, c);
	assert_int_equal(tchan_wait(c), 0);
}

static void test_disabled_fn_takes_no_turn(void **state)
{
	struct gpu_priv_sched_fn long_slice = { .enabled = 1, .quantum_ns = 60 * VGPU_NSEC_PER_SEC };
	struct gpu_priv_sched_fn short_slice = { .enabled = 1, .quantum_ns = VGPU_NSEC_PER_MSEC };
	struct gpu_priv_sched_fn off = { .enabled = 0 };
	struct tgpu *t = tgpu_new(2, 1, 16);
	uint64_t dst1, dst2, m0, dl;
	struct tchan a, b;

	(void)state;
	assert_int_equal(gpu_priv_sched_set(t->p, GPU_SCHED_BEST_EFFORT, VGPU_NSEC_PER_MSEC, 0), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &long_slice), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 2, &short_slice), 0);
	/* Function 1: a full ring, every entry the same FILL: seconds of work in one slice. */
	dst1 = tgpu_vmem(t, 1, FILL_BYTES, VGPU_GMMU_PAGE_64K);
	tchan_init(t, &a, 1, 0, 0, ENTRIES);
	TM(&a, VGPU_M_FILL, lo32(dst1), hi32(dst1), FILL_BYTES, 0, 1);
	for (unsigned int i = 0; i < ENTRIES - 1; i++)
		tchan_gp_raw(&a, vgpu_gp_entry(a.pb_va, 6));
	tchan_kick(t, &a);
	dl = cmn_deadline_ns(T_TIMEOUT);
	while (!methods(t, 1) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_true(methods(t, 1) > 0);

	assert_int_equal(gpu_fn_quiesce(t->g, 1, T_TIMEOUT), -EBUSY);	/* still enabled */
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &off), 0);
	/* The turn in progress ends at its next check for a waiting doorbell (within a FILL
	 * chunk), not after its batch of GP entries (hundreds of FILLs: seconds on a loaded
	 * host); the token is kept for later. */
	gpu_doorbell_ring(t->g, 1, vgpu_token(0, 0));
	assert_int_equal(gpu_fn_quiesce(t->g, 1, T_TIMEOUT), 0);
	/* The guest may rewrite the pushbuffer the engine has not reached: the FILLs left
	 * shrink to a page, so finishing them later costs little on a loaded host. A FILL
	 * the turn left half done ends at once (its progress is past the new length). */
	__atomic_store_n(&a.pb[3], 4096u, __ATOMIC_RELEASE);
	m0 = methods(t, 1);
	assert_true(m0 < ENTRIES - 1);

	/* Function 2 runs; function 1, rung again, does not: each of function 2's FILLs
	 * completing means the engine picked since. */
	dst2 = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_64K);
	tchan_init(t, &b, 2, 0, 0, 16);
	fill_once(t, &b, dst2);
	gpu_doorbell_ring(t->g, 1, vgpu_token(0, 0));
	fill_once(t, &b, dst2);
	assert_int_equal(methods(t, 1), m0);

	/* Enabled again, it finishes what it was given. */
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &long_slice), 0);
	gpu_doorbell_ring(t->g, 1, vgpu_token(0, 0));
	dl = cmn_deadline_ns(20 * T_TIMEOUT);
	while (tchan_get(&a) != a.put && !cmn_deadline_passed(dl))
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	assert_int_equal(tchan_get(&a), a.put);
	assert_int_equal(methods(t, 1), ENTRIES - 1);
	tgpu_free(t);
}

static void test_quiesce_bad_fn(void **state)
{
	struct tgpu *t = tgpu_new(1, 1, 16);

	(void)state;
	assert_int_equal(gpu_fn_quiesce(t->g, 2, T_TIMEOUT), -EINVAL);
	tgpu_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_disabled_fn_takes_no_turn),
		cmocka_unit_test(test_quiesce_bad_fn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
