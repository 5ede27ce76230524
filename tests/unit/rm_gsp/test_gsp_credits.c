// SPDX-License-Identifier: MIT
/* Per-function credits into the GSP queues, by counts: a function that floods from many
 * threads never has more RPCs in flight than its credits (the client counts in-flight RPCs
 * per function and keeps the maximum), the surplus waits (credit_waits), and another
 * function on the same lane gets all of its RPCs through meanwhile. A real vgpu-gsp-test
 * with no device (echo RPCs only); the flood is made slow by fault injection so that it
 * would pile up without credits. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/clock.h"
#include "rm/gsp/gsp.h"
#include "rm/gsp/gsp_test_rpc.h"

#define FLOOD_FN	1
#define VICTIM_FN	2
#define FLOOD_THREADS	8
#define CREDITS		2
#define VICTIM_CALLS	50

struct flood {
	struct gsp *g;
	atomic_bool stop;
	atomic_uint done, failed;
};

static void *flooder(void *arg)
{
	struct flood *f = arg;
	uint64_t x = 7, y;

	while (!atomic_load(&f->stop)) {
		if (gsp_call(f->g, FLOOD_FN, VGPU_RPC_FN_ECHO, &x, sizeof(x), &y, sizeof(y), NULL))
			atomic_fetch_add(&f->failed, 1);
		atomic_fetch_add(&f->done, 1);
	}
	return NULL;
}

static struct gsp *start(unsigned int credits)
{
	struct gsp_config c = { .priv_fd = -1, .nr_fns = 4, .nr_lanes = 1, .fn_credits = credits,
				.no_fair = true };
	struct gsp *g = NULL;

	assert_int_equal(gsp_start(&c, &g), 0);
	return g;
}

/* The default gives each function its lane's share of the 64 slots. */
static void test_default_credits(void **state)
{
	struct gsp *g = start(0);

	(void)state;
	assert_int_equal(gsp_fn_credits(g), 16);	/* 64 slots, 1 lane, 4 functions */
	gsp_stop(g);
}

static void test_flood_held_to_credits(void **state)
{
	struct flood f = { 0 };
	pthread_t th[FLOOD_THREADS];
	struct gsp_stats st;
	struct vgpu_rpc_inject in = { .mode = VGPU_INJ_SLOW, .fn = FLOOD_FN,
				      .arg = 200 * VGPU_NSEC_PER_USEC };

	(void)state;
	f.g = start(CREDITS);
	assert_int_equal(gsp_fn_credits(f.g), CREDITS);
	assert_int_equal(gsp_call(f.g, 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0, NULL), 0);
	for (int i = 0; i < FLOOD_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, flooder, &f), 0);
	/* Until the flood has hit its credits (more threads than credits must wait). */
	for (;;) {
		gsp_get_stats(f.g, &st);
		if (st.credit_waits >= FLOOD_THREADS && atomic_load(&f.done) >= FLOOD_THREADS)
			break;
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	/* The victim, on the same lane, gets every call through while the flood goes on. */
	for (uint64_t i = 0; i < VICTIM_CALLS; i++) {
		uint64_t back = 0;
		size_t len = 0;

		assert_int_equal(gsp_call(f.g, VICTIM_FN, VGPU_RPC_FN_ECHO, &i, sizeof(i), &back,
					  sizeof(back), &len), 0);
		assert_int_equal(len, sizeof(back));
		assert_true(back == i);
		assert_true(gsp_fn_inflight(f.g, FLOOD_FN) <= CREDITS);
	}
	atomic_store(&f.stop, true);
	for (int i = 0; i < FLOOD_THREADS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&f.failed), 0);
	/* The flooder reached its credits and never went past them; the victim had one. */
	assert_int_equal(gsp_fn_inflight_max(f.g, FLOOD_FN), CREDITS);
	assert_int_equal(gsp_fn_inflight_max(f.g, VICTIM_FN), 1);
	assert_int_equal(gsp_fn_inflight(f.g, FLOOD_FN), 0);
	assert_int_equal(gsp_fn_inflight(f.g, VICTIM_FN), 0);
	gsp_stop(f.g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_credits),
		cmocka_unit_test(test_flood_held_to_credits),
	};

	return cmocka_run_group_tests_name("gsp_credits", tests, NULL, NULL);
}
