// SPDX-License-Identifier: MIT
/* The group run index: for every word of group bits (64 groups, 128 MiB), the longest run
 * of whole free 2 MiB groups that starts at one of its groups (continuing into the words
 * after it), capped at PMA_RUN_CAP groups; and the maximum of those over each block of 16
 * words. "First run of n whole groups" (a 32 MiB contiguous page, a 256 MiB page list) is
 * then a byte scan of the block maxima, a byte scan of one block and a few bit operations on
 * one word; a change of one word of group bits recomputes, there and then, that word's
 * entry and those of at most four words before it (the runs that reach into it), and a
 * block maximum. Each update leaves every entry exact for the group bits as they are, so
 * the index is exact between any two changes, inside an operation too.
 *
 * This replaces, for those searches, the group layer of the extent tree, whose climb cost
 * ~265 instructions per changed leaf and had to be paid at the end of every operation (a
 * 32 MiB search cannot wait for the marks of many operations). The tree's group layer stays
 * for bounded, reverse, over-aligned and longer searches, flushed when one of those reads it. */
#include <stdlib.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "pma/pma_internal.h"

#define NONE UINT64_MAX
#define BLOCK PMA_RUN_BLOCK

/* Whole free groups from the start of word @gw + 1 on, counted up to PMA_RUN_CAP. */
static uint32_t runs_after(const struct pma_region *r, uint64_t gw)
{
	uint32_t n = 0;

	for (uint64_t k = gw + 1; k < r->runs.nr_words && n < PMA_RUN_CAP; k++) {
		uint64_t x = r->gfull[k];

		if (x != ~0ull)
			return n + cmn_ctz(~x);
		n += 64;
	}
	return n;
}

static uint8_t block_max(const struct pma_runs *x, uint64_t b)
{
	uint8_t m = 0;

	for (unsigned int i = 0; i < BLOCK; i++)
		m = x->len[b * BLOCK + i] > m ? x->len[b * BLOCK + i] : m;
	return m;
}

/* runs_after() with the common answer, a run that ends in the next word, inline. */
static inline uint32_t runs_after_inl(const struct pma_region *r, uint64_t gw)
{
	uint64_t x = gw + 1 < r->runs.nr_words ? r->gfull[gw + 1] : 0;

	return x != ~0ull ? cmn_ctz(~x) : runs_after(r, gw);
}

/* Longest run of whole free groups starting inside word @gw, capped. */
static inline __attribute__((always_inline)) uint8_t
runs_word_len(const struct pma_region *r, uint64_t gw)
{
	uint64_t w = r->gfull[gw];
	uint32_t suf, len;

	if (!w)
		return 0;
	if (w == ~0ull)
		len = 64 + runs_after_inl(r, gw);
	else {
		/* The run at the top may go on into the next words; any other lies inside the
		 * 63 - suf bits below it, so it only matters when it could be longer. */
		suf = (uint32_t)__builtin_clzll(~w);
		len = suf ? suf + runs_after_inl(r, gw) : 0;
		if (len < 63 - suf) {
			uint32_t m = pma_word_max_run(w);

			len = m > len ? m : len;
		}
	}
	return (uint8_t)(len < PMA_RUN_CAP ? len : PMA_RUN_CAP);
}

/* Maximum of block @b with entry @gw replaced by @v, read before @gw is written: a vector
 * load right after the byte store would wait for the store to retire. */
static uint8_t block_max_with(const struct pma_runs *x, uint64_t gw, uint8_t v)
{
#ifdef __SSE2__
	const __m128i iota = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	__m128i blk = _mm_loadu_si128((const __m128i *)(x->len + gw / BLOCK * BLOCK));
	__m128i lane = _mm_cmpeq_epi8(iota, _mm_set1_epi8((char)(gw % BLOCK)));

	blk = _mm_or_si128(_mm_andnot_si128(lane, blk), _mm_and_si128(lane, _mm_set1_epi8((char)v)));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 8));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 4));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 2));
	blk = _mm_max_epu8(blk, _mm_srli_si128(blk, 1));
	return (uint8_t)_mm_cvtsi128_si32(blk);
#else
	uint64_t b0 = gw / BLOCK * BLOCK;
	uint8_t m = v;

	for (uint64_t i = b0; i < b0 + BLOCK; i++)
		if (i != gw && x->len[i] > m)
			m = x->len[i];
	return m;
#endif
}

static inline void runs_set(struct pma_runs *x, uint64_t gw, uint8_t v)
{
	uint8_t old = x->len[gw], *bm = &x->bmax[gw / BLOCK];

	if (v == old)
		return;
	if (v > *bm)
		*bm = v;
	else if (old == *bm)
		*bm = block_max_with(x, gw, v);
	x->len[gw] = v;
}

static void runs_fix_before(struct pma_region *r, uint64_t gw);

void pma_runs_word_changed(struct pma_region *r, uint64_t gw)
{
	runs_set(&r->runs, gw, runs_word_len(r, gw));
	/* The words before it whose top run reaches into it (a run that already counts
	 * PMA_RUN_CAP groups before it does not change). */
	runs_fix_before(r, gw);
}

/* The maximal run of ones of @w that holds bit @b (set in @w), as its lowest bit *@s and its
 * length counted from there, continuing into the words after @gw when it reaches the top. */
static inline uint32_t runs_through(const struct pma_region *r, uint64_t gw, uint64_t w,
				    unsigned int b, unsigned int *s)
{
	uint64_t below = ~w & (VGPU_BIT(b) - 1), above = ~w & (~0ull << b);
	uint32_t e = above ? cmn_ctz(above) : 64 + runs_after_inl(r, gw);

	*s = below ? cmn_fls(below) + 1 : 0;
	return e - *s;
}

/* Words before @gw whose top run reaches into it: their entries recomputed. */
static void runs_fix_before(struct pma_region *r, uint64_t gw)
{
	struct pma_runs *x = &r->runs;

	for (uint64_t j = gw; j > 0 && gw - j < 4;) {
		j--;
		if (!(r->gfull[j] >> 63))
			break;
		runs_set(x, j, runs_word_len(r, j));
		if (r->gfull[j] != ~0ull)
			break;
	}
}

void pma_runs_word_grew(struct pma_region *r, uint64_t gw, uint64_t d)
{
	struct pma_runs *x = &r->runs;
	unsigned int s;
	uint32_t n;
	uint8_t v;

	/* One run of new bits: every run it does not touch is as it was, and the one it
	 * makes is the longest it can have joined, so the entry is the larger of the two. */
	if (!d || (d + (d & (0 - d))) & d) {
		pma_runs_word_changed(r, gw);
		return;
	}
	n = runs_through(r, gw, r->gfull[gw], cmn_ctz(d), &s);
	v = (uint8_t)(n < PMA_RUN_CAP ? n : PMA_RUN_CAP);
	if (v > x->len[gw]) {
		x->len[gw] = v;
		if (v > x->bmax[gw / BLOCK])
			x->bmax[gw / BLOCK] = v;
	}
	/* Only a run that starts at the word's first group lengthens the runs before it: the
	 * top run of each word before that reaches it, by the same rule (the larger of the
	 * entry and that run, now @n groups longer than the word's top bits). */
	for (uint64_t j = gw; !s && j > 0 && gw - j < 4;) {
		uint64_t w = r->gfull[--j];
		uint32_t top = (~w ? (uint32_t)__builtin_clzll(~w) : 64) + n;

		if (!(w >> 63))
			break;
		v = (uint8_t)(top < PMA_RUN_CAP ? top : PMA_RUN_CAP);
		if (v > x->len[j]) {
			x->len[j] = v;
			if (v > x->bmax[j / BLOCK])
				x->bmax[j / BLOCK] = v;
		}
		if (w != ~0ull)
			break;
		n += 64;
	}
}

void pma_runs_word_shrank(struct pma_region *r, uint64_t gw, uint64_t d)
{
	unsigned int s;
	uint32_t n;

	/* One run of bits cleared: it cut only the run that held it. Unless that run was the
	 * entry's longest (or as long), the entry stands. */
	if (!d || (d + (d & (0 - d))) & d) {
		pma_runs_word_changed(r, gw);
		return;
	}
	n = runs_through(r, gw, r->gfull[gw] | d, cmn_ctz(d), &s);
	if (r->runs.len[gw] <= (n < PMA_RUN_CAP ? n : PMA_RUN_CAP))
		runs_set(&r->runs, gw, runs_word_len(r, gw));
	if (!s)
		runs_fix_before(r, gw);
}

int pma_runs_init(struct pma_runs *x, uint64_t nr_words)
{
	x->nr_words = (uint32_t)nr_words;
	x->nr_blocks = (uint32_t)((nr_words + BLOCK - 1) / BLOCK);
	/* Both arrays padded with zeros to whole 16-byte vectors. */
	x->len = pma_zalloc((size_t)x->nr_blocks * BLOCK, 1);
	x->bmax = pma_zalloc(cmn_align_up(x->nr_blocks, 16), 1);
	return x->len && x->bmax ? 0 : -ENOMEM;
}

void pma_runs_fini(struct pma_runs *x)
{
	free(x->len);
	free(x->bmax);
	x->len = x->bmax = NULL;
}

uint64_t pma_runs_find(struct pma_region *r, uint64_t n)
{
	return pma_runs_find_inl(r, n);
}

int pma_runs_check(struct pma_region *r)
{
	struct pma_runs *x = &r->runs;

	for (uint64_t gw = 0; gw < (uint64_t)x->nr_blocks * BLOCK; gw++)
		if (x->len[gw] != (gw < x->nr_words ? runs_word_len(r, gw) : 0))
			return -EIO;
	for (uint64_t b = 0; b < cmn_align_up(x->nr_blocks, 16); b++)
		if (x->bmax[b] != (b < x->nr_blocks ? block_max(x, b) : 0))
			return -EIO;
	return 0;
}
