/* SPDX-License-Identifier: MIT */
/* The group run index's search (pma_runs.c holds the rest): inline, because the 32 MiB and
 * 256 MiB fast paths call it once per request and are built once per instruction set; out
 * of line it cost a call and a frame, in the baseline version only. The update stays out of
 * line: inlined at its many call sites it tripled the fast paths' code for no measurable
 * gain. Included by pma_internal.h only. */
#ifndef VGPU_PMA_RUNS_INTERNAL_H
#define VGPU_PMA_RUNS_INTERNAL_H

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Index of the first of @cnt bytes (a multiple of 16) that is >= @n, or -1. */
static PMA_INLINE int64_t pma_runs_first_ge(const uint8_t *a, size_t cnt, uint8_t n)
{
#ifdef __SSE2__
	__m128i t = _mm_set1_epi8((char)n);

	for (size_t i = 0; i < cnt; i += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(a + i));
		unsigned int m = (unsigned int)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(v, t), v));

		if (m)
			return (int64_t)(i + (unsigned int)__builtin_ctz(m));
	}
#else
	for (size_t i = 0; i < cnt; i++)
		if (a[i] >= n)
			return (int64_t)i;
#endif
	return -1;
}

/* pma_runs_find(), inline for the fast paths. */
static PMA_INLINE uint64_t pma_runs_find_inl(struct pma_region *r, uint64_t n)
{
	struct pma_runs *x = &r->runs;
	int64_t b, i;
	uint64_t gw, w;

	if (!n || n > PMA_RUN_CAP)
		return UINT64_MAX;
	b = pma_runs_first_ge(x->bmax, cmn_align_up(x->nr_blocks, 16), (uint8_t)n);
	if (b < 0)
		return UINT64_MAX;
	i = pma_runs_first_ge(x->len + b * PMA_RUN_BLOCK, PMA_RUN_BLOCK, (uint8_t)n);
	gw = (uint64_t)b * PMA_RUN_BLOCK + (uint64_t)i;
	w = r->gfull[gw];
	if (n <= 64) {
		/* Bit p of y: groups p .. p + n - 1 of the word are all whole and free. */
		uint64_t y = w, have = 1;

		while (have * 2 <= n) {
			y &= y >> have;
			have *= 2;
		}
		if (have < n)
			y &= y >> (n - have);
		if (y)
			return gw * 64 + cmn_ctz(y);
	}
	/* Only the run at the top of the word goes on into the next: it is the one. */
	return w == ~0ull ? gw * 64 : gw * 64 + 64 - (uint64_t)__builtin_clzll(~w);
}

#endif
