// SPDX-License-Identifier: MIT
/* Bitmap range helpers; see bitops.h. */
#include "common/bitops.h"

/* Apply @set or clear to [start, start + n), touching each word once. */
static void bitmap_fill(uint64_t *map, uint64_t start, uint64_t n, bool set)
{
	while (n) {
		unsigned int lo = start % 64;
		unsigned int len = n < 64 - lo ? (unsigned int)n : 64 - lo;
		uint64_t m = cmn_mask(lo, len);

		if (set)
			map[start / 64] |= m;
		else
			map[start / 64] &= ~m;
		start += len;
		n -= len;
	}
}

void cmn_bitmap_set(uint64_t *map, uint64_t start, uint64_t n)
{
	bitmap_fill(map, start, n, true);
}

void cmn_bitmap_clear(uint64_t *map, uint64_t start, uint64_t n)
{
	bitmap_fill(map, start, n, false);
}

uint64_t cmn_bitmap_weight(const uint64_t *map, uint64_t start, uint64_t n)
{
	uint64_t w = 0;

	while (n) {
		unsigned int lo = start % 64;
		unsigned int len = n < 64 - lo ? (unsigned int)n : 64 - lo;

		w += cmn_popcount(map[start / 64] & cmn_mask(lo, len));
		start += len;
		n -= len;
	}
	return w;
}

/* Shared walk: @invert turns "next clear" into "next set" on inverted words. */
static uint64_t bitmap_next(const uint64_t *map, uint64_t nbits, uint64_t start, bool invert)
{
	uint64_t i, w;

	if (start >= nbits)
		return nbits;
	i = start / 64;
	w = (invert ? ~map[i] : map[i]) & (~0ull << (start % 64));
	while (!w) {
		if (++i >= VGPU_BITMAP_WORDS(nbits))
			return nbits;
		w = invert ? ~map[i] : map[i];
	}
	start = i * 64 + cmn_ctz(w);
	return start < nbits ? start : nbits;
}

uint64_t cmn_bitmap_next_set(const uint64_t *map, uint64_t nbits, uint64_t start)
{
	return bitmap_next(map, nbits, start, false);
}

uint64_t cmn_bitmap_next_clear(const uint64_t *map, uint64_t nbits, uint64_t start)
{
	return bitmap_next(map, nbits, start, true);
}
