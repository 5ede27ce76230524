// SPDX-License-Identifier: MIT
/* cmn_mutex: owner tracking across waits and the lock-order validator. The validator is
 * switched on here in every build variant so the rel run checks it too. */
#define CMN_LOCKDEP 1

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/lock.h"

static unsigned int nr_reports;
static char last_report[512];

static void count_report(const char *what)
{
	nr_reports++;
	snprintf(last_report, sizeof(last_report), "%s", what);
}

static int setup(void **state)
{
	(void)state;
	nr_reports = 0;
	last_report[0] = '\0';
	cmn_lockdep_set_handler(count_report);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	cmn_lockdep_set_handler(NULL);
	return 0;
}

static void lock_pair(struct cmn_mutex *first, struct cmn_mutex *second)
{
	cmn_mutex_lock(first);
	cmn_mutex_lock(second);
	cmn_mutex_unlock(second);
	cmn_mutex_unlock(first);
}

static void test_inversion_reported(void **state)
{
	struct cmn_mutex a, b;

	(void)state;
	cmn_mutex_init(&a);
	cmn_mutex_init(&b);
	lock_pair(&a, &b);
	assert_int_equal(nr_reports, 0);
	lock_pair(&b, &a);
	assert_int_equal(nr_reports, 1);
	assert_non_null(strstr(last_report, "&a"));
	assert_non_null(strstr(last_report, "&b"));
	assert_non_null(strstr(last_report, "test_lock.c"));
}

static void test_consistent_order_silent(void **state)
{
	struct cmn_mutex a, b, c;

	(void)state;
	cmn_mutex_init(&a);
	cmn_mutex_init(&b);
	cmn_mutex_init(&c);
	for (int i = 0; i < 100; i++) {
		lock_pair(&a, &b);
		lock_pair(&b, &c);
		lock_pair(&a, &c);
	}
	assert_int_equal(nr_reports, 0);
}

/* Two mutexes initialised at one place are one class: nesting them is not judged. */
static void test_same_class_nesting_silent(void **state)
{
	struct cmn_mutex m[2];

	(void)state;
	for (int i = 0; i < 2; i++)
		cmn_mutex_init(&m[i]);
	lock_pair(&m[0], &m[1]);
	lock_pair(&m[1], &m[0]);
	assert_int_equal(nr_reports, 0);
}

/* Releasing out of order and taking the first lock again while the second is still held
 * is the B -> A half of a deadlock. */
static void test_out_of_order_release(void **state)
{
	struct cmn_mutex a, b;

	(void)state;
	cmn_mutex_init(&a);
	cmn_mutex_init(&b);
	cmn_mutex_lock(&a);
	cmn_mutex_lock(&b);
	cmn_mutex_unlock(&a);
	assert_int_equal(nr_reports, 0);
	cmn_mutex_lock(&a);
	assert_int_equal(nr_reports, 1);
	cmn_mutex_unlock(&a);
	cmn_mutex_unlock(&b);
}

static struct cmn_mutex file_lock = CMN_MUTEX_INITIALIZER("test file_lock");

struct held_probe {
	struct cmn_mutex *mx;
	bool held;
};

static void *probe_held(void *arg)
{
	struct held_probe *p = arg;

	p->held = cmn_mutex_held(p->mx);
	return NULL;
}

static void test_owner_tracking(void **state)
{
	struct held_probe p = { .mx = &file_lock, .held = true };
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	struct timespec now;
	pthread_t t;

	(void)state;
	assert_false(cmn_mutex_held(&file_lock));
	cmn_mutex_lock(&file_lock);
	assert_true(cmn_mutex_held(&file_lock));
	assert_int_equal(pthread_create(&t, NULL, probe_held, &p), 0);
	pthread_join(t, NULL);
	assert_false(p.held);
	clock_gettime(CLOCK_REALTIME, &now);
	assert_int_equal(cmn_cond_timedwait(&cv, &file_lock, &now), ETIMEDOUT);
	assert_true(cmn_mutex_held(&file_lock));
	cmn_mutex_unlock(&file_lock);
	assert_false(cmn_mutex_held(&file_lock));
	assert_int_equal(nr_reports, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_inversion_reported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_consistent_order_silent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_same_class_nesting_silent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_order_release, setup, teardown),
		cmocka_unit_test_setup_teardown(test_owner_tracking, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
