// SPDX-License-Identifier: MIT
/* Regions: frame words, the 2 MiB group indexes and their upkeep after a state change. */
#include <stdlib.h>

#include "common/log.h"
#include "pma/pma_internal.h"

#define NONE UINT64_MAX

static uint64_t group_words(const struct pma_region *r)
{
	return VGPU_BITMAP_WORDS(r->nr_groups);
}

struct pma_region *pma_region_new(const struct pma_region_desc *desc, unsigned int id, bool clean)
{
	uint64_t base_frame = desc->base >> PMA_FRAME_SHIFT;
	uint64_t nr_frames = desc->size >> PMA_FRAME_SHIFT;
	struct pma_region *r = pma_zalloc(1, sizeof(*r));
	uint64_t gw;

	if (!r)
		return NULL;
	r->desc = *desc;
	r->id = id;
	r->dirty_only = !clean;
	r->first = cmn_align_down(base_frame, PMA_BIG_FRAMES);
	r->lo = base_frame - r->first;
	r->hi = r->lo + nr_frames;
	r->nr_words = VGPU_BITMAP_WORDS(r->hi);
	r->nr_groups = (r->nr_words * 64) >> PMA_GROUP_SHIFT;
	gw = group_words(r);
	r->words = pma_zalloc(r->nr_words, sizeof(*r->words));
	r->attrs = pma_zalloc(r->nr_words, sizeof(*r->attrs));
	r->gfull = pma_zalloc(gw, sizeof(uint64_t));
	r->gpart = pma_zalloc(gw, sizeof(uint64_t));
	r->gfull_sum = pma_zalloc(VGPU_BITMAP_WORDS(gw), sizeof(uint64_t));
	r->gpart_sum = pma_zalloc(VGPU_BITMAP_WORDS(gw), sizeof(uint64_t));
	if (!r->words || !r->attrs || !r->gfull || !r->gpart || !r->gfull_sum || !r->gpart_sum)
		goto fail;

	/* Padding below and above the real frames is allocated+pinned for good. */
	for (uint64_t wi = 0; wi < r->nr_words; wi++) {
		uint64_t lo = wi * 64, real = 0;

		if (lo + 64 > r->lo && lo < r->hi) {
			uint64_t s = cmn_max(lo, r->lo), e = cmn_min(lo + 64, r->hi);

			real = cmn_mask((unsigned int)(s - lo), (unsigned int)(e - s));
		}
		r->words[wi].alloc = ~real;
		r->attrs[wi].pzero = clean ? real : 0;
	}
	if (pma_tree_init(&r->ftree, r) || pma_runs_init(&r->runs, gw))
		goto fail;
	pma_region_refresh(r, 0, r->nr_words - 1, 0);
	pma_tree_flush(&r->ftree, r);
	return r;
fail:
	pma_region_free(r);
	return NULL;
}

void pma_region_free(struct pma_region *r)
{
	if (!r)
		return;
	pma_tree_fini(&r->ftree);
	pma_runs_fini(&r->runs);
	free(r->words);
	free(r->attrs);
	free(r->gfull);
	free(r->gpart);
	free(r->gfull_sum);
	free(r->gpart_sum);
	free(r);
}

uint64_t pma_region_count_avail(const struct pma_region *r, uint64_t w0, uint64_t w1)
{
	uint64_t n = 0;

	for (uint64_t wi = w0; wi <= w1; wi++)
		n += cmn_popcount(pma_word_avail(r, &r->words[wi]));
	return n;
}

void pma_region_refresh(struct pma_region *r, uint64_t w0, uint64_t w1, uint64_t old_avail)
{
	r->free_frames += pma_region_count_avail(r, w0, w1) - old_avail;
	for (uint64_t wi = w0; wi <= w1; wi++)
		pma_region_groups_update(r, wi);
	pma_tree_mark(&r->ftree, w0 * 64, w1 * 64 + 63, false);
	for (uint64_t gw = w0 / 32; gw <= w1 / 32; gw++)
		pma_group_mark(r, (uint32_t)gw);
}

uint64_t pma_bits_next(const uint64_t *map, const uint64_t *sum, uint64_t lo, uint64_t hi)
{
	return pma_bits_next_inl(map, sum, lo, hi);
}

uint64_t pma_bits_prev(const uint64_t *map, const uint64_t *sum, uint64_t lo, uint64_t hi)
{
	uint64_t wi, w, si, s, top;

	if (lo >= hi)
		return NONE;
	top = hi - 1;
	wi = top / 64;
	w = map[wi] & (~0ull >> (63 - top % 64));
	if (!w) {
		if (wi == 0)
			return NONE;
		top = wi - 1;	/* highest word still to look at */
		si = top / 64;
		s = sum[si] & (~0ull >> (63 - top % 64));
		while (!s) {
			if (si-- == 0)
				return NONE;
			s = sum[si];
		}
		wi = si * 64 + cmn_fls(s);
		w = map[wi];
	}
	top = wi * 64 + cmn_fls(w);
	return top >= lo ? top : NONE;
}

static int region_fail(const struct pma_region *r, const char *what, uint64_t at)
{
	cmn_err("pma_check: region %u: %s at %llu", r->id, what, (unsigned long long)at);
	return -EIO;
}

int pma_region_check(struct pma_region *r)
{
	uint64_t free_frames = 0, free_groups = 0, scrub = 0, black = 0, evict = 0;
	uint64_t unpin = 0, persist = 0;

	for (uint64_t wi = 0; wi < r->nr_words; wi++) {
		const struct pma_word *w = &r->words[wi];
		const struct pma_attrs *x = PMA_ATTRS(r, w);
		uint64_t a = pma_word_avail(r, w), real = 0, lo = wi * 64;

		if (lo + 64 > r->lo && lo < r->hi) {
			uint64_t s = cmn_max(lo, r->lo), e = cmn_min(lo + 64, r->hi);

			real = cmn_mask((unsigned int)(s - lo), (unsigned int)(e - s));
		}
		if ((w->alloc & ~real) != ~real || ((x->unpin | x->pzero) & ~real))
			return region_fail(r, "padding frame not held pinned", wi);
		if (x->unpin & ~w->alloc)
			return region_fail(r, "unpinned frame not allocated", wi);
		if (r->dirty_only && (~w->alloc & x->pzero & real))
			return region_fail(r, "clean free frame in a dirty-only region", wi);
		free_frames += cmn_popcount(a);
		scrub += cmn_popcount(x->scrub & real);
		black += cmn_popcount(x->black & real);
		evict += cmn_popcount(x->evict);
		unpin += cmn_popcount(x->unpin);
		persist += cmn_popcount(x->pzero & w->alloc);
		for (unsigned int h = 0; h < 2; h++) {
			uint32_t half = (uint32_t)(a >> (32 * h));
			uint64_t g = wi * 2 + h;

			if (cmn_test_bit(r->gfull, g) != (half == UINT32_MAX))
				return region_fail(r, "gfull bit wrong", g);
			if (cmn_test_bit(r->gpart, g) != (half && half != UINT32_MAX))
				return region_fail(r, "gpart bit wrong", g);
			free_groups += half == UINT32_MAX;
		}
	}
	for (uint64_t gw = 0; gw < group_words(r); gw++) {
		if (cmn_test_bit(r->gfull_sum, gw) != !!r->gfull[gw])
			return region_fail(r, "gfull summary wrong", gw);
		if (cmn_test_bit(r->gpart_sum, gw) != !!r->gpart[gw])
			return region_fail(r, "gpart summary wrong", gw);
	}
	if (free_frames != r->free_frames)
		return region_fail(r, "free frame counter wrong", r->free_frames);
	if (free_groups != r->free_groups)
		return region_fail(r, "free group counter wrong", r->free_groups);
	if (scrub != r->scrub_frames)
		return region_fail(r, "scrubbing counter wrong", r->scrub_frames);
	if (black != r->black_frames)
		return region_fail(r, "blacklist counter wrong", r->black_frames);
	if (evict != r->evict_frames)
		return region_fail(r, "evicting counter wrong", r->evict_frames);
	if (unpin != r->unpin_frames)
		return region_fail(r, "unpinned counter wrong", r->unpin_frames);
	if (persist != r->persist_frames)
		return region_fail(r, "persistent counter wrong", r->persist_frames);
	if (pma_tree_check(&r->ftree, r))
		return region_fail(r, "extent tree wrong", 0);
	if (pma_runs_check(r))
		return region_fail(r, "group run index wrong", 0);
	return 0;
}
