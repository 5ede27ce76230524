// SPDX-License-Identifier: MIT
/* The failure record: errno and message kept, NULL allowed, long messages cut. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/fail.h"

static void test_fail_records(void **state)
{
	struct cmn_fail f = { 0 };

	(void)state;
	assert_int_equal(cmn_fail(&f, -ENOENT, "slice %s is not defined", "u1"), -ENOENT);
	assert_int_equal(f.err, -ENOENT);
	assert_string_equal(f.msg, "slice u1 is not defined");
}

static void test_fail_null(void **state)
{
	(void)state;
	/* Callers that want only the errno pass NULL. */
	assert_int_equal(cmn_fail(NULL, -EINVAL, "ignored %d", 1), -EINVAL);
}

static void test_fail_long_message_cut(void **state)
{
	static char big[2 * CMN_FAIL_MSG_MAX];
	struct cmn_fail f = { 0 };

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	assert_int_equal(cmn_fail(&f, -E2BIG, "%s", big), -E2BIG);
	assert_int_equal(strlen(f.msg), CMN_FAIL_MSG_MAX - 1);
}

static void test_fail_last_wins(void **state)
{
	struct cmn_fail f = { 0 };

	(void)state;
	cmn_fail(&f, -EIO, "first");
	cmn_fail(&f, -EBUSY, "second");
	assert_int_equal(f.err, -EBUSY);
	assert_string_equal(f.msg, "second");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fail_records),
		cmocka_unit_test(test_fail_null),
		cmocka_unit_test(test_fail_long_message_cut),
		cmocka_unit_test(test_fail_last_wins),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
