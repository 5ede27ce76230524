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

#include "pma/pma_internal.h"

#define NONE UINT64_MAX
#define BLOCK PMA_RUN_BLOCK

/* Whole free groups from the start of word @gw + 1 on, counted up to PMA_RUN_CAP. */
uint32_t pma_runs_after(const struct pma_region *r, uint64_t gw)
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

int pma_runs_init(struct pma_runs *x, uint64_t nr_words)
{
	x->nr_words = (uint32_t)nr_words;
	x->nr_blocks = (uint32_t)((nr_words + BLOCK - 1) / BLOCK);
	/* Both arrays padded with zeros to whole 16-byte vectors. */
	x->len = calloc((size_t)x->nr_blocks * BLOCK, 1);
	x->bmax = calloc(cmn_align_up(x->nr_blocks, 16), 1);
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
		if (x->len[gw] != (gw < x->nr_words ? pma_runs_word_len(r, gw) : 0))
			return -EIO;
	for (uint64_t b = 0; b < cmn_align_up(x->nr_blocks, 16); b++)
		if (x->bmax[b] != (b < x->nr_blocks ? block_max(x, b) : 0))
			return -EIO;
	return 0;
}
