// SPDX-License-Identifier: MIT
/* CPU priority by share: the light/busy rule on counts, the per-window counting of a plane,
 * and a thread's scheduler slice (its nice and policy kept). */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/share.h"

/* A tenant is light up to 3/4 of a fair share of the last window, or when it was alone. */
static void test_nice_rule(void **state)
{
	(void)state;
	/* 4 tenants, 400 requests: a fair share is 100, light up to 75. */
	assert_int_equal(cmn_share_nice(75, 400, 4), 0);
	assert_int_equal(cmn_share_nice(76, 400, 4), CMN_SHARE_NICE_BUSY);
	assert_int_equal(cmn_share_nice(0, 400, 4), 0);
	assert_int_equal(cmn_share_nice(400, 400, 1), 0);	/* alone */
	assert_int_equal(cmn_share_nice(5, 5, 0), 0);		/* nobody else counted */
	/* 63 tenants, 6300 requests: a fair share is 100; one at half of it is light, one at
	 * a full fair share is not. */
	assert_int_equal(cmn_share_nice(50, 6300, 63), 0);
	assert_int_equal(cmn_share_nice(100, 6300, 63), CMN_SHARE_NICE_BUSY);
}

/* The nice a tenant's requests get in a window is what it was served in the one before. */
static void test_count_windows(void **state)
{
	struct cmn_share_plane p;
	struct cmn_share_user heavy = { 0 }, light = { 0 }, late = { 0 };

	(void)state;
	memset(&p, 0, sizeof(p));
	/* Window 10: heavy 90 requests, light 10; nobody has a last window yet. */
	for (int i = 0; i < 90; i++)
		assert_int_equal(cmn_share_count(&p, &heavy, 10), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(cmn_share_count(&p, &light, 10), 0);
	/* Window 11: weighed against window 10's 100 requests over 2 tenants. */
	assert_int_equal(cmn_share_count(&p, &heavy, 11), CMN_SHARE_NICE_BUSY);
	assert_int_equal(cmn_share_count(&p, &light, 11), 0);
	/* A tenant new in window 11 was not served in 10: light. */
	assert_int_equal(cmn_share_count(&p, &late, 11), 0);
	/* Window 13: nobody was served in 12, so nobody's last window counts. */
	assert_int_equal(cmn_share_count(&p, &heavy, 13), 0);
	assert_int_equal(heavy.served, 1u);
}

/* struct sched_attr, first version (no glibc wrapper or clash-free header). */
struct t_sched_attr {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

/* The slice the calling thread runs with (its nice and policy to @nice, @policy), or 0 if
 * it cannot be read. */
static uint64_t my_slice(int *nice, uint32_t *policy)
{
	struct t_sched_attr a;

	memset(&a, 0, sizeof(a));
	if (syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0))
		return 0;
	*nice = a.sched_nice;
	*policy = a.sched_policy;
	return a.sched_runtime;
}

static void *slice_thread(void *arg)
{
	int *res = arg, nice = -1, r;
	uint32_t policy = 99;
	uint64_t got, def = my_slice(&nice, &policy);

	/* A nice the thread already has stays: sched_setattr sets the nice as well. */
	res[0] = setpriority(PRIO_PROCESS, 0, 5);
	r = cmn_share_set_slice(CMN_SHARE_SLICE_MIN_NS, "test");
	got = my_slice(&nice, &policy);
	res[1] = r;
	res[2] = nice;
	res[3] = (int)policy;
	res[4] = got == CMN_SHARE_SLICE_MIN_NS;
	/* 0 gives the host's default back. */
	res[5] = cmn_share_set_slice(0, "test");
	res[6] = my_slice(&nice, &policy) == def && nice == 5;
	return NULL;
}

/* In a thread of its own: the slice and the nice change only that thread; 0 gives the
 * default slice back. */
static void test_set_slice(void **state)
{
	int res[7] = { -1, -1, -1, -1, -1, -1, -1 };
	int major = 0, minor = 0;
	char rel[64] = "";
	pthread_t t;
	FILE *f;

	(void)state;
	assert_int_equal(pthread_create(&t, NULL, slice_thread, res), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], 0);
	assert_int_equal(res[2], 5);
	assert_int_equal(res[3], SCHED_OTHER);
	f = fopen("/proc/sys/kernel/osrelease", "r");
	if (f) {
		if (fgets(rel, sizeof(rel), f))
			sscanf(rel, "%d.%d", &major, &minor);
		fclose(f);
	}
	/* Kernels before 6.12 take the call and ignore the slice. */
	assert_int_equal(res[5], 0);
	if (major > 6 || (major == 6 && minor >= 12)) {
		assert_true(res[4]);
		assert_true(res[6]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nice_rule),
		cmocka_unit_test(test_count_windows),
		cmocka_unit_test(test_set_slice),
	};

	return cmocka_run_group_tests_name("common_share", tests, NULL, NULL);
}
