// SPDX-License-Identifier: MIT
/* The migration state machine: every legal and illegal single arc, the paths a source and
 * a destination take, cancel from PRE_COPY, ERROR and reset. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "mig/mig.h"

#define R MIG_S_RUNNING
#define P MIG_S_PRE_COPY
#define C MIG_S_STOP_COPY
#define S MIG_S_STOPPED
#define M MIG_S_RESUMING
#define E MIG_S_ERROR

/* The whole arc table, written out: vfio migration v2 without the P2P states. */
static const bool legal[MIG_NR_STATES][MIG_NR_STATES] = {
	[R] = { [S] = true, [P] = true },
	[P] = { [R] = true, [C] = true },
	[C] = { [S] = true },
	[S] = { [R] = true, [C] = true, [M] = true },
	[M] = { [S] = true },
};

static void test_arcs(void **state)
{
	(void)state;
	for (int a = 0; a < MIG_NR_STATES; a++)
		for (int b = 0; b < MIG_NR_STATES; b++)
			assert_int_equal(mig_state_arc_ok(a, b), legal[a][b]);
	assert_false(mig_state_arc_ok(MIG_NR_STATES, R));
	assert_false(mig_state_arc_ok(R, (enum mig_state)-1));
}

static void test_names(void **state)
{
	enum mig_state s;

	(void)state;
	for (int a = 0; a < MIG_NR_STATES; a++) {
		assert_int_equal(mig_state_parse(mig_state_name(a), &s), 0);
		assert_int_equal(s, a);
	}
	assert_string_equal(mig_state_name(S), "stopped");
	assert_string_equal(mig_state_name(MIG_NR_STATES), "invalid");
	assert_int_equal(mig_state_parse("paused", &s), -EINVAL);
}

/* The source: RUNNING -> PRE_COPY -> STOP_COPY -> STOPPED, one arc each. */
static void test_source_path(void **state)
{
	struct mig_sm m;

	(void)state;
	mig_sm_init(&m, R);
	assert_int_equal(mig_sm_set(&m, P, NULL), 0);
	assert_int_equal(mig_sm_set(&m, C, NULL), 0);
	assert_int_equal(mig_sm_set(&m, S, NULL), 0);
	assert_int_equal(m.state, S);
	assert_int_equal(m.arcs, 3);
	/* A source that resumes after a failed switchover. */
	assert_int_equal(mig_sm_set(&m, R, NULL), 0);
	assert_int_equal(m.arcs, 4);
}

/* The destination: RESUMING -> RUNNING passes through STOPPED. */
static void test_destination_path(void **state)
{
	struct mig_sm m;

	(void)state;
	mig_sm_init(&m, M);
	assert_int_equal(mig_state_next_hop(M, R, NULL), S);
	assert_int_equal(mig_sm_set(&m, R, NULL), 0);
	assert_int_equal(m.state, R);
	assert_int_equal(m.arcs, 2);
}

/* Cancel during pre-copy goes straight back to RUNNING. */
static void test_cancel_precopy(void **state)
{
	struct mig_sm m;

	(void)state;
	mig_sm_init(&m, R);
	assert_int_equal(mig_sm_set(&m, P, NULL), 0);
	assert_int_equal(mig_state_next_hop(P, R, NULL), R);
	assert_int_equal(mig_sm_set(&m, R, NULL), 0);
	assert_int_equal(m.state, R);
	assert_int_equal(m.arcs, 2);
}

/* Multi-arc requests take the shortest legal path; the offline save's path. */
static void test_paths(void **state)
{
	struct mig_sm m;

	(void)state;
	assert_int_equal(mig_state_next_hop(R, C, NULL), S);	/* R -> S -> C */
	assert_int_equal(mig_state_next_hop(C, R, NULL), S);
	assert_int_equal(mig_state_next_hop(R, M, NULL), S);
	assert_int_equal(mig_state_next_hop(M, P, NULL), S);
	assert_int_equal(mig_state_next_hop(S, S, NULL), S);
	mig_sm_init(&m, R);
	assert_int_equal(mig_sm_set(&m, C, NULL), 0);
	assert_int_equal(m.arcs, 2);
	assert_int_equal(mig_sm_set(&m, S, NULL), 0);
	assert_int_equal(m.arcs, 3);
	/* Every state reaches every other (but ERROR) in at most three arcs. */
	for (int a = 0; a < E; a++) {
		for (int b = 0; b < E; b++) {
			mig_sm_init(&m, a);
			assert_int_equal(mig_sm_set(&m, b, NULL), 0);
			assert_int_equal(m.state, b);
			assert_true(m.arcs <= 3);
		}
	}
}

/* ERROR: reachable only by a failure, left only by a reset; a refused request changes
 * nothing. */
static void test_error_reset(void **state)
{
	struct cmn_fail f = { 0 };
	struct mig_sm m;

	(void)state;
	mig_sm_init(&m, R);
	assert_int_equal(mig_state_next_hop(R, E, &f), -EINVAL);
	assert_int_equal(mig_sm_set(&m, E, &f), -EINVAL);
	assert_int_equal(m.state, R);
	assert_int_equal(m.arcs, 0);
	assert_int_equal(mig_sm_set(&m, P, NULL), 0);
	mig_sm_fail(&m);
	assert_int_equal(m.state, E);
	assert_int_equal(mig_sm_set(&m, R, &f), -EINVAL);
	assert_non_null(strstr(f.msg, "from error to running"));
	assert_non_null(strstr(f.msg, "reset"));
	assert_int_equal(m.state, E);
	mig_sm_reset(&m);
	assert_int_equal(m.state, R);
	assert_int_equal(mig_sm_set(&m, MIG_NR_STATES, NULL), -EINVAL);
	assert_int_equal(m.state, R);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arcs),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_source_path),
		cmocka_unit_test(test_destination_path),
		cmocka_unit_test(test_cancel_precopy),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_error_reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
