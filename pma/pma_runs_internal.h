/* SPDX-License-Identifier: MIT */
/* The group run index's update (pma_runs.c holds the rest): inline, because every change of
 * a word of group bits calls it, from the allocation and free fast paths that are built once
 * per instruction set; out of line it cost a call and a frame per change. Included by
 * pma_internal.h only. */
#ifndef VGPU_PMA_RUNS_INTERNAL_H
#define VGPU_PMA_RUNS_INTERNAL_H

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Whole free groups from the start of word @gw + 1 on, counted up to PMA_RUN_CAP. */
uint32_t pma_runs_after(const struct pma_region *r, uint64_t gw);

/* pma_runs_after() with the common answer, a run that ends in the next word, inline. */
static PMA_INLINE uint32_t pma_runs_after_inl(const struct pma_region *r, uint64_t gw)
{
	uint64_t x = gw + 1 < r->runs.nr_words ? r->gfull[gw + 1] : 0;

	return x != ~0ull ? cmn_ctz(~x) : pma_runs_after(r, gw);
}

/* Longest run of whole free groups starting inside word @gw, capped. */
static PMA_INLINE uint8_t pma_runs_word_len(const struct pma_region *r, uint64_t gw)
{
	uint64_t w = r->gfull[gw];
	uint32_t suf, len;

	if (!w)
		return 0;
	if (w == ~0ull)
		len = 64 + pma_runs_after_inl(r, gw);
	else {
		/* The run at the top may go on into the next words; any other lies inside the
		 * 63 - suf bits below it, so it only matters when it could be longer. */
		suf = (uint32_t)__builtin_clzll(~w);
		len = suf ? suf + pma_runs_after_inl(r, gw) : 0;
		if (len < 63 - suf) {
			uint32_t m = pma_word_max_run(w);

			len = m > len ? m : len;
		}
	}
	return (uint8_t)(len < PMA_RUN_CAP ? len : PMA_RUN_CAP);
}

/* Maximum of block @b with entry @gw replaced by @v, read before @gw is written: a vector
 * load right after the byte store would wait for the store to retire. */
static inline uint8_t pma_runs_block_max_with(const struct pma_runs *x, uint64_t gw, uint8_t v)
{
#ifdef __SSE2__
	const __m128i iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	__m128i blk = _mm_loadu_si128((const __m128i *)(x->len + gw / PMA_RUN_BLOCK * PMA_RUN_BLOCK));
	__m128i lane = _mm_cmpeq_epi8(iota, _mm_set1_epi8((char)(gw % PMA_RUN_BLOCK)));

	blk = _mm_or_si128(_mm_andnot_si128(lane, blk), _mm_and_si128(lane, _mm_set1_epi8((char)v)));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 8));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 4));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 2));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 1));
	return (uint8_t)_mm_cvtsi128_si32(blk);
#else
	uint64_t b0 = gw / PMA_RUN_BLOCK * PMA_RUN_BLOCK;
	uint8_t m = v;

	for (uint64_t i = b0; i < b0 + PMA_RUN_BLOCK; i++)
		if (i != gw && x->len[i] > m)
			m = x->len[i];
	return m;
#endif
}

static PMA_INLINE void pma_runs_set(struct pma_runs *x, uint64_t gw, uint8_t v)
{
	uint8_t old = x->len[gw], *bm = &x->bmax[gw / PMA_RUN_BLOCK];

	if (v == old)
		return;
	if (v > *bm)
		*bm = v;
	else if (old == *bm)
		*bm = pma_runs_block_max_with(x, gw, v);
	x->len[gw] = v;
}

/* Word @gw of the group bits changed: its entry and those of the words whose runs reach it. */
static PMA_INLINE void pma_runs_word_changed(struct pma_region *r, uint64_t gw)
{
	struct pma_runs *x = &r->runs;
	uint64_t j = gw;

	pma_runs_set(x, gw, pma_runs_word_len(r, gw));
	/* The words before it whose top run reaches into it (a run that already counts
	 * PMA_RUN_CAP groups before it does not change). */
	while (j > 0 && gw - j < 4) {
		j--;
		if (!(r->gfull[j] >> 63))
			break;
		pma_runs_set(x, j, pma_runs_word_len(r, j));
		if (r->gfull[j] != ~0ull)
			break;
	}
}

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
