// SPDX-License-Identifier: MIT
/* Error codes: names and text for errno values and vgpu's own codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/err.h"

static const struct err_case {
	int err;
	const char *name;
	const char *text_has;
} err_cases[] = {
	{ 0, "OK", "Success" },
	{ -ENOMEM, "ENOMEM", "memory" },
	{ -EINVAL, "EINVAL", "Invalid argument" },
	{ -EEXIST, "EEXIST", "exists" },
	{ -VGPU_EFOREIGN, "VGPU_EFOREIGN", "another function" },
	{ -VGPU_EQUOTA, "VGPU_EQUOTA", "quota" },
	{ -VGPU_ECHANERR, "VGPU_ECHANERR", "error state" },
	{ -100000, "EUNKNOWN", "Unknown" },
};

static void test_err_case(void **state)
{
	const struct err_case *c = *state;

	assert_string_equal(cmn_errname(c->err), c->name);
	assert_non_null(strstr(cmn_strerror(c->err), c->text_has));
	/* The sign does not matter: both spellings name the same error. */
	assert_string_equal(cmn_strerror(c->err), cmn_strerror(-c->err));
}

static void test_err_codes_distinct_from_errno(void **state)
{
	(void)state;
	for (int e = VGPU_ERR_BASE; e < VGPU_ERR_END; e++) {
		assert_true(e > 4095);
		assert_string_not_equal(cmn_strerror(-e), "Unknown error");
	}
}

int main(void)
{
	struct CMUnitTest tests[(sizeof(err_cases) / sizeof(err_cases[0])) + 1];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ .name = err_cases[i].name,
						  .test_func = test_err_case,
						  .initial_state = (void *)&err_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_err_codes_distinct_from_errno);
	return _cmocka_run_group_tests("err", tests, n, NULL, NULL);
}
