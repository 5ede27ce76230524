// SPDX-License-Identifier: MIT
/* Bit helpers and bitmap ranges, checked against a one-bit-at-a-time reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/bitops.h"
#include "common/compiler.h"

static void test_pow2_align(void **state)
{
	(void)state;
	assert_false(cmn_is_pow2(0));
	assert_true(cmn_is_pow2(1));
	assert_true(cmn_is_pow2(1ull << 63));
	assert_false(cmn_is_pow2(96));
	assert_int_equal(cmn_align_up(65, 64), 128);
	assert_int_equal(cmn_align_up(64, 64), 64);
	assert_int_equal(cmn_align_down(127, 64), 64);
	assert_true(cmn_is_aligned(4096, 4096));
	assert_false(cmn_is_aligned(4097, 4096));
	assert_int_equal(cmn_roundup_pow2(1), 1);
	assert_int_equal(cmn_roundup_pow2(5), 8);
	assert_int_equal(cmn_roundup_pow2(8), 8);
	assert_int_equal(cmn_ilog2(1), 0);
	assert_int_equal(cmn_ilog2(4096), 12);
	assert_int_equal(cmn_fls(0x8000000000000001ull), 63);
	assert_int_equal(cmn_ctz(0x8000000000000000ull), 63);
	assert_int_equal(cmn_popcount(0xf0f0), 8);
	assert_int_equal(cmn_mask(0, 64), ~0ull);
	assert_int_equal(cmn_mask(4, 4), 0xf0);
	assert_int_equal(cmn_mask(60, 4), 0xf000000000000000ull);
}

static const struct range_case {
	const char *name;
	uint64_t start, n;
} range_cases[] = {
	{ "single bit", 5, 1 },
	{ "inside a word", 3, 40 },
	{ "whole word", 64, 64 },
	{ "across one boundary", 60, 10 },
	{ "many words", 7, 300 },
	{ "to the end", 250, 70 },
	{ "empty", 9, 0 },
};

#define NBITS 320

static void test_bitmap_range(void **state)
{
	const struct range_case *c = *state;
	uint64_t map[VGPU_BITMAP_WORDS(NBITS)];

	memset(map, 0, sizeof(map));
	cmn_bitmap_set(map, c->start, c->n);
	for (uint64_t i = 0; i < NBITS; i++)
		assert_int_equal(cmn_test_bit(map, i), i >= c->start && i < c->start + c->n);
	assert_int_equal(cmn_bitmap_weight(map, 0, NBITS), c->n);
	assert_int_equal(cmn_bitmap_next_set(map, NBITS, 0), c->n ? c->start : NBITS);
	assert_int_equal(cmn_bitmap_next_clear(map, NBITS, c->start), c->n ? c->start + c->n
		: c->start);
	cmn_bitmap_clear(map, c->start, c->n);
	assert_int_equal(cmn_bitmap_weight(map, 0, NBITS), 0);
	assert_int_equal(cmn_bitmap_next_set(map, NBITS, 0), NBITS);
}

/* next_set / next_clear against a linear reference on a pseudo-random map. */
static void test_bitmap_search_random(void **state)
{
	uint64_t map[VGPU_BITMAP_WORDS(NBITS)], x = 88172645463325252ull;

	(void)state;
	for (int round = 0; round < 50; round++) {
		for (size_t w = 0; w < VGPU_ARRAY_SIZE(map); w++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			map[w] = round % 2 ? x & (x >> 3) : x | (x >> 5);
		}
		for (uint64_t s = 0; s <= NBITS; s++) {
			uint64_t ws = s, wc = s;

			while (ws < NBITS && !cmn_test_bit(map, ws))
				ws++;
			while (wc < NBITS && cmn_test_bit(map, wc))
				wc++;
			assert_int_equal(cmn_bitmap_next_set(map, NBITS, s), ws);
			assert_int_equal(cmn_bitmap_next_clear(map, NBITS, s), wc);
		}
	}
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(range_cases) + 2];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_pow2_align);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(range_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = range_cases[i].name,
						  .test_func = test_bitmap_range,
						  .initial_state = (void *)&range_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_bitmap_search_random);
	return _cmocka_run_group_tests("bitops", tests, n, NULL, NULL);
}
