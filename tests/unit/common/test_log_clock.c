// SPDX-License-Identifier: MIT
/* Logging levels and sinks; the monotonic clock and deadlines. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/log.h"

static const struct level_case {
	const char *name;
	const char *text;
	int want_ret;
	enum cmn_log_level want;
} level_cases[] = {
	{ "error by name", "error", 0, VGPU_LOG_ERR },
	{ "warn by name", "warn", 0, VGPU_LOG_WARN },
	{ "debug by digit", "3", 0, VGPU_LOG_DEBUG },
	{ "unknown name", "loud", -EINVAL, VGPU_LOG_WARN },
	{ "digit out of range", "7", -EINVAL, VGPU_LOG_WARN },
	{ "empty", "", -EINVAL, VGPU_LOG_WARN },
};

static void test_parse_level(void **state)
{
	const struct level_case *c = *state;
	enum cmn_log_level l = VGPU_LOG_WARN;

	assert_int_equal(cmn_log_parse_level(c->text, &l), c->want_ret);
	assert_int_equal(l, c->want);
}

struct captured {
	int count;
	enum cmn_log_level level;
	char msg[128];
};

static void capture(enum cmn_log_level level, const char *msg, void *ctx)
{
	struct captured *c = ctx;

	c->count++;
	c->level = level;
	strncpy(c->msg, msg, sizeof(c->msg) - 1);
}

static void test_threshold_and_sink(void **state)
{
	struct captured c = { 0 };

	(void)state;
	cmn_log_set_sink(capture, &c);
	cmn_log_set_level(VGPU_LOG_WARN);
	cmn_info("dropped %d", 1);
	assert_int_equal(c.count, 0);
	cmn_err("vf %d: %s", 3, "reset");
	assert_int_equal(c.count, 1);
	assert_int_equal(c.level, VGPU_LOG_ERR);
	assert_string_equal(c.msg, "vf 3: reset");
	cmn_log_set_level(VGPU_LOG_DEBUG);
	cmn_dbg("now kept");
	assert_int_equal(c.count, 2);
	cmn_log_set_sink(NULL, NULL);
	cmn_log_set_level(VGPU_LOG_WARN);
}

static void test_clock(void **state)
{
	uint64_t a, b, d;

	(void)state;
	a = cmn_now_ns();
	cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
	b = cmn_now_ns();
	assert_true(b >= a + 2 * VGPU_NSEC_PER_MSEC);	/* a sleep never returns early */
	d = cmn_deadline_ns(UINT64_MAX - 5);
	assert_int_equal(d, UINT64_MAX);		/* saturates instead of wrapping */
	assert_false(cmn_deadline_passed(d));
	assert_true(cmn_deadline_passed(a));
}

int main(void)
{
	struct CMUnitTest tests[sizeof(level_cases) / sizeof(level_cases[0]) + 2];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(level_cases) / sizeof(level_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ .name = level_cases[i].name,
						  .test_func = test_parse_level,
						  .initial_state = (void *)&level_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_threshold_and_sink);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_clock);
	return _cmocka_run_group_tests("log_clock", tests, n, NULL, NULL);
}
