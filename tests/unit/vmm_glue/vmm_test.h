/* SPDX-License-Identifier: MIT */
/* What the vmm_glue suites share: their table-driven cases, one cmocka test per row of a
 * table (a row's first use is its .name), the row as the test's state. */
#ifndef VGPU_TESTS_VMM_GLUE_VMM_TEST_H
#define VGPU_TESTS_VMM_GLUE_VMM_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Append to @tests at index @n (advanced) a test of @fn for each row of the array @table. */
#define VMM_T_ROWS(tests, n, fn, table) \
	for (size_t i_ = 0; i_ < sizeof(table) / sizeof((table)[0]); i_++) \
		(tests)[(n)++] = (struct CMUnitTest){ (table)[i_].name, (fn), NULL, NULL, \
						      (void *)&(table)[i_] }

/* Append the @count tests of @fixed to @tests at index *@n (advanced). */
static inline void vmm_t_add(struct CMUnitTest *tests, size_t *n, const struct CMUnitTest *fixed,
			     size_t count)
{
	for (size_t i = 0; i < count; i++)
		tests[(*n)++] = fixed[i];
}

#endif
