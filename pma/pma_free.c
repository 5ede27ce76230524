// SPDX-License-Identifier: MIT
/* pma free: page lists and ranges. The common list (ascending pages of at most 2 MiB in the
 * first region, no scrub) is checked and freed a word or a group word at a time; anything
 * else takes the general path, which detects duplicates and queues scrubs. Nothing changes
 * unless every page is allocated. */
#include "pma/pma_internal.h"

/* Words (or group words) a fast free handles; longer lists take the general path. */
#define PMA_FAST_WORDS 64

/* Toggle the alloc bits of the first @n pages; used to prove every page is allocated and
 * listed once (a duplicate finds its bits already clear), then to undo exactly. Adjacent
 * pages are handled as one range. */
static int pages_mark(struct pma *pma, const uint64_t *pages, size_t n, uint64_t pf, bool clear,
		      size_t *done)
{
	uint64_t page_size = pf << PMA_FRAME_SHIFT;

	for (size_t p = 0; p < n;) {
		uint64_t idx, run = 1, len_f;
		struct pma_region *r;

		while (p + run < n && pages[p + run] == pages[p] + run * page_size)
			run++;
		len_f = run * pf;
		r = pma_page_locate(pma, pages[p], len_f, &idx);
		if (!r) {
			/* A run may straddle regions: retry page by page. */
			run = 1;
			len_f = pf;
			r = pma_page_locate(pma, pages[p], pf, &idx);
			if (!r)
				return -EINVAL;
		}
		pma_for_each_word(idx, len_f, wi, m) {
			struct pma_word *w = &r->words[wi];

			if (clear && (w->alloc & m) != m) {
				/* Put back the part of this run already cleared. */
				pma_for_each_word(idx, wi * 64 + cmn_ctz(m) - idx, wj, mj)
					r->words[wj].alloc |= mj;
				return -ENOENT;
			}
			w->alloc = clear ? w->alloc & ~m : w->alloc | m;
		}
		p += run;
		*done = p;
	}
	return 0;
}

/* Read-only check that ascending @pages are all allocated and in regions. */
static int pages_check_sorted(struct pma *pma, const uint64_t *pages, size_t n, uint64_t pf)
{
	uint64_t page_size = pf << PMA_FRAME_SHIFT;

	for (size_t p = 0; p < n;) {
		uint64_t idx, run = 1;
		struct pma_region *r;

		while (p + run < n && pages[p + run] == pages[p] + run * page_size)
			run++;
		r = pma_page_locate(pma, pages[p], run * pf, &idx);
		if (!r) {
			run = 1;
			r = pma_page_locate(pma, pages[p], pf, &idx);
			if (!r)
				return -EINVAL;
		}
		pma_for_each_word(idx, run * pf, wi, m)
			if ((r->words[wi].alloc & m) != m)
				return -ENOENT;
		p += run;
	}
	return 0;
}

/* Validate that @pages are allocated, distinct, in regions; nothing changes. */
static int pages_validate_allocated(struct pma *pma, const uint64_t *pages, size_t count,
				    uint64_t pf)
{
	size_t done = 0, undone, p;
	int ret;

	/* An ascending list cannot name a page twice: one read-only pass is enough. */
	for (p = 1; p < count && pages[p] > pages[p - 1]; p++)
		;
	if (p == count)
		return pages_check_sorted(pma, pages, count, pf);
	ret = pages_mark(pma, pages, count, pf, true, &done);

	pages_mark(pma, pages, done, pf, false, &undone);
	return ret;
}

/* Masks per word (@pf <= 2: frames) or per group word (@pf 32: groups) of ascending @pages of
 * @r into @wv / @mv. The number of words; 0 when the list is not strictly ascending or needs
 * more than PMA_FAST_WORDS words (the general path takes it); -EINVAL if a page is not
 * aligned to its size. */
static inline __attribute__((always_inline)) int
pages_collect_shift(const struct pma_region *r, const uint64_t *pages, size_t count,
		    unsigned int shift, uint64_t pmask, uint64_t page_size, uint64_t *wv,
		    uint64_t *mv)
{
	uint64_t prev = pages[0], any = 0, base = r->first << PMA_FRAME_SHIFT;
	uint64_t cw = ((pages[0] - base) >> (PMA_FRAME_SHIFT + shift)) / 64, cm = 0;
	int nw = 0;

	if (count <= PMA_FAST_WORDS) {
		/* Without a branch on "same word as the last page" (half the time either way for
		 * a 64 KiB list, so a misprediction per word change): the current entry is
		 * stored for every page, and the index moves on by a comparison's result. Never
		 * more entries than pages, so the arrays cannot overflow. */
		for (size_t p = 0; p < count; p++) {
			uint64_t i = (pages[p] - base) >> (PMA_FRAME_SHIFT + shift);
			uint64_t next = i / 64 != cw;

			if (p && pages[p] <= prev)
				return 0;
			prev = pages[p];
			any |= pages[p];
			nw += (int)next;
			cm = (next ? 0 : cm) | pmask << (i % 64);
			cw = i / 64;
			wv[nw] = cw;
			mv[nw] = cm;
		}
		return any & (page_size - 1) ? -EINVAL : nw + 1;
	}
	/* The word being filled stays in registers; it is stored when the next one starts. */
	for (size_t p = 0; p < count; p++) {
		uint64_t i = (pages[p] - base) >> (PMA_FRAME_SHIFT + shift);

		if (p && pages[p] <= prev)
			return 0;
		prev = pages[p];
		any |= pages[p];
		if (i / 64 != cw) {
			if (nw == PMA_FAST_WORDS - 1)
				return 0;
			wv[nw] = cw;
			mv[nw++] = cm;
			cw = i / 64;
			cm = 0;
		}
		cm |= pmask << (i % 64);
	}
	wv[nw] = cw;
	mv[nw++] = cm;
	return any & (page_size - 1) ? -EINVAL : nw;
}

static PMA_HOT_INLINE int pages_collect(const struct pma_region *r, const uint64_t *pages, size_t count,
			 uint64_t pf, uint64_t *wv, uint64_t *mv)
{
	uint64_t page_size = pf << PMA_FRAME_SHIFT;

	/* Constant shifts for the two common sizes. */
	if (pf == PMA_GROUP_FRAMES)
		return pages_collect_shift(r, pages, count, PMA_GROUP_SHIFT, 1, page_size, wv, mv);
	if (pf == 1)
		return pages_collect_shift(r, pages, count, 0, 1, page_size, wv, mv);
	return pages_collect_shift(r, pages, count, 0, cmn_mask(0, (unsigned int)pf), page_size,
				   wv, mv);
}

/* Free the 2 MiB pages given as group bits per group word. Every page is allocated with no
 * attribute (checked), so each becomes a whole free group: gfull and the counters move by
 * group words, and gpart does not move (a group wholly allocated or wholly free is never
 * partial). @lean: pma_region_lean() (a constant). */
static PMA_HOT_INLINE void groups_free_words(struct pma_region *r, const uint64_t *gwv,
					     const uint64_t *gbv, int nw, bool lean)
{
	for (int k = 0; k < nw; k++) {
		unsigned int ng = cmn_popcount(gbv[k]);

		pma_gbits_for_each_word(gbv[k], gwv[k], wi, m)
			pma_frames_free(r, &r->words[wi], m, lean);
		r->gfull[gwv[k]] |= gbv[k];
		r->free_groups += ng;
		r->free_frames += (uint64_t)ng * PMA_GROUP_FRAMES;
		pma_gword_changed_bits(r, gwv[k], gbv[k], true);
	}
}

/* Free the frames @mv[k] of ascending words @wv[k] (checked allocated), without scrub: each
 * word's two group bits are re-derived from its new availability and replaced, gpart and
 * its summary without a branch; the run index moves only when a group becomes whole.
 * @simple (a constant): the region is plain and lean, so no attribute is read and only the
 * allocated masks change. */
static PMA_HOT_INLINE void small_free_words(struct pma_region *r, const uint64_t *wv,
					    const uint64_t *mv, int nw, bool simple)
{
	uint64_t freed = 0;

	/* Word by word, each word's two group bits replaced in place: grouping the words by
	 * their word of group bits was a loop exit per group word, mispredicted about as often
	 * as taken. Only a group becoming whole (gfull) branches, and that is rare. */
	for (int k = 0; k < nw; k++) {
		struct pma_word *w = &r->words[wv[k]];
		uint64_t attrs = simple ? 0 : pma_word_attrs(r, w);
		uint64_t fm = mv[k] & ~attrs, a1 = ~(w->alloc | attrs) | fm;
		uint64_t gw = wv[k] / 32, sh = (wv[k] % 32) * 2, of = r->gfull[gw], nf, np;
		uint32_t lo = (uint32_t)a1, hi = (uint32_t)(a1 >> 32);
		uint64_t full = (uint64_t)(lo == UINT32_MAX) | (uint64_t)(hi == UINT32_MAX) << 1;
		uint64_t some = (uint64_t)(lo != 0) | (uint64_t)(hi != 0) << 1;

		pma_frames_free(r, w, mv[k], simple || pma_region_lean(r));
		freed += cmn_popcount(fm);	/* every frame of mv[k] was allocated */
		np = (r->gpart[gw] & ~(3ull << sh)) | (some & ~full) << sh;
		r->gpart[gw] = np;
		r->gpart_sum[gw / 64] = (r->gpart_sum[gw / 64] & ~VGPU_BIT(gw % 64)) |
					(uint64_t)(np != 0) << (gw % 64);
		pma_tlayer_mark(&r->ftree.layer[0], (uint32_t)gw);
		nf = (of & ~(3ull << sh)) | full << sh;
		if (nf != of) {
			r->gfull[gw] = nf;
			r->free_groups += (uint64_t)cmn_popcount(nf) - cmn_popcount(of);
			pma_sum_update(r->gfull_sum, r->gfull, gw);
			pma_group_mark_bits(r, (uint32_t)gw, nf & ~of, true);
		}
	}
	r->free_frames += freed;
}

/* The group of bit @gbit of group word @gw, in a plain region, became wholly free: partial
 * no more, whole, and the run index follows. Rare in a free of 64 KiB pages, so out of the
 * loop's way. */
static __attribute__((noinline)) void group_became_whole(struct pma_region *r, uint64_t gw,
							 uint64_t gbit)
{
	r->gpart[gw] &= ~gbit;
	pma_sum_update(r->gpart_sum, r->gpart, gw);
	r->gfull[gw] |= gbit;
	r->gfull_sum[gw / 64] |= VGPU_BIT(gw % 64);
	r->free_groups++;
	pma_group_mark_bits(r, (uint32_t)gw, gbit, true);
}

/* Free a list of 64 KiB pages in a plain, lean region (pma_region_plain(),
 * pma_region_lean()) a page at a time, after one pass that checks them all: ascending (so
 * distinct, and inside the region when the first and last are), aligned and allocated. Each
 * page clears its frame's bit, and its group's bits follow at once: a group with a free frame
 * is partial, or whole when all 32 are free. Neither pass branches on where one word or
 * group ends and the next begins (the pages of a list change word every two or so, as
 * unpredictably); only a group that becomes whole does. 0, -EINVAL, -ENOENT, or 1 when the
 * list is not ascending (the general path takes it). */
static PMA_HOT_INLINE int small_free_pages(struct pma_region *r, const uint64_t *pages,
					    size_t count)
{
	/* The arrays in locals: the stores below cannot then make the compiler reload them. */
	struct pma_word *words = r->words;
	uint64_t *gpart = r->gpart, *gpart_sum = r->gpart_sum, *marks = r->ftree.layer[0].dirty;
	uint64_t base = r->first << PMA_FRAME_SHIFT, last = r->nr_words - 1;
	uint64_t prev = pages[0], any = prev, i = (prev - base) >> PMA_FRAME_SHIFT;
	uint64_t bad = ~words[i / 64].alloc >> (i % 64), desc = 0;

	for (size_t p = 1; p < count; p++) {
		uint64_t x = pages[p], wi;

		i = (x - base) >> PMA_FRAME_SHIFT;
		/* A list that is not ascending may point anywhere: its word is read in bounds,
		 * and the list goes to the general path whatever it holds. */
		wi = i / 64 <= last ? i / 64 : last;
		bad |= ~words[wi].alloc >> (i % 64);
		desc |= x <= prev;
		any |= x;
		prev = x;
	}
	if (desc)
		return 1;
	if (any & (PMA_FRAME_SIZE - 1))
		return -EINVAL;
	if (bad & 1)
		return -ENOENT;
	for (size_t p = 0; p < count; p++) {
		uint64_t g, gw, gbit, a;

		i = (pages[p] - base) >> PMA_FRAME_SHIFT;
		g = i / PMA_GROUP_FRAMES;
		gw = g / 64;
		gbit = VGPU_BIT(g % 64);
		a = words[i / 64].alloc & ~VGPU_BIT(i % 64);
		words[i / 64].alloc = a;
		gpart[gw] |= gbit;
		gpart_sum[gw / 64] |= VGPU_BIT(gw % 64);
		marks[gw / 64] |= VGPU_BIT(gw % 64);
		if (!(uint32_t)(a >> (i & 32)))
			group_became_whole(r, gw, gbit);
	}
	r->ftree.layer[0].marked = true;
	r->free_frames += count;
	return 0;
}

/* True if @pages are one run of consecutive, aligned pages of @page_size. */
static PMA_HOT_INLINE bool pages_consecutive(const uint64_t *pages, size_t count, uint64_t page_size)
{
	uint64_t a = pages[0], bad;
	pma_v2 w0 = { a, a + page_size }, w1 = { a + 2 * page_size, a + 3 * page_size };
	pma_v2 d = { 0, 0 };
	size_t p = 0;

	if (a & (page_size - 1))
		return false;
	/* Four at a time, without an exit per page: most lists checked here are one run. */
	for (; p + 4 <= count; p += 4) {
		d |= (*(const pma_v2 *)(pages + p) ^ w0) | (*(const pma_v2 *)(pages + p + 2) ^ w1);
		w0 += 4 * page_size;
		w1 += 4 * page_size;
	}
	bad = d[0] | d[1];
	for (; p < count; p++)
		bad |= pages[p] ^ (a + p * page_size);
	return !bad;
}

/* Free @ng whole groups from bitmap index @s, checked allocated, as one whole-group change
 * (a run of 2 MiB pages, as a 256 MiB request usually gets). 0, -ENOENT, or 1 when a frame
 * carries an attribute (the general path takes it). */
static PMA_HOT_INLINE int groups_free_run(struct pma_region *r, uint64_t s, size_t ng)
{
	int ret = pma_groups_free_check(r, s >> PMA_GROUP_SHIFT, ng);

	if (!ret)
		pma_groups_free_checked(r, s >> PMA_GROUP_SHIFT, ng);
	return ret;
}

/* The common free: an ascending list of pages of at most 2 MiB, all inside the first region,
 * no scrub; checked, then freed a word (small pages) or a group word (2 MiB) at a time.
 * 1 if not applicable (the general path runs), else 0 or -ENOENT. */
static PMA_HOT_INLINE int free_fast_locked(struct pma *pma, const uint64_t *pages, size_t count, uint64_t pf,
			    bool scrub)
{
	struct pma_region *r = pma->nr_regions ? pma->regions[0] : NULL;
	uint64_t f0 = pages[0] >> PMA_FRAME_SHIFT, fl = pages[count - 1] >> PMA_FRAME_SHIFT;
	uint64_t wv[PMA_FAST_WORDS], mv[PMA_FAST_WORDS];
	bool attrs = false;
	int nw;

	pma_assert_locked(pma);
	/* The first page whole inside too, not only its start: a "consecutive" list that wraps
	 * past 2^64 starts above the region and ends inside it. With both ends inside, a run
	 * cannot wrap (that would take more pages than memory holds). */
	if (scrub || pf > PMA_GROUP_FRAMES || !r || f0 < r->first + r->lo ||
	    f0 + pf > r->first + r->hi || fl + pf > r->first + r->hi)
		return 1;
	if (pf == PMA_GROUP_FRAMES && pages_consecutive(pages, count, pf << PMA_FRAME_SHIFT))
		return groups_free_run(r, f0 - r->first, count);
	if (pf == 1 && pma_region_plain(r) && pma_region_lean(r))
		return small_free_pages(r, pages, count);
	/* Ascending (checked) proves the pages distinct and, pages being aligned to their size
	 * in a region aligned to 512 MiB, never straddling a word; first and last inside the
	 * region then put every page there. */
	nw = pages_collect(r, pages, count, pf, wv, mv);
	if (nw <= 0)
		return nw ? nw : 1;
	if (pf == PMA_GROUP_FRAMES) {
		bool plain = pma_region_plain(r);

		/* A plain region's group bits say whether the pages are allocated. */
		for (int k = 0; plain && k < nw; k++)
			if (!pma_groups_unavail(r, wv[k], mv[k]))
				return -ENOENT;
		for (int k = 0; !plain && k < nw; k++)
			pma_gbits_for_each_word(mv[k], wv[k], wi, m) {
				const struct pma_word *w = &r->words[wi];

				if ((w->alloc & m) != m)
					return -ENOENT;
				attrs |= !plain && (pma_word_attrs(r, w) & m);
			}
		if (attrs)
			return 1;	/* such groups do not become whole: the general path */
		if (pma_region_lean(r))
			groups_free_words(r, wv, mv, nw, true);
		else
			groups_free_words(r, wv, mv, nw, false);
		return 0;
	}
	for (int k = 0; k < nw; k++)
		if ((r->words[wv[k]].alloc & mv[k]) != mv[k])
			return -ENOENT;
	if (pma_region_plain(r) && pma_region_lean(r))
		small_free_words(r, wv, mv, nw, true);
	else
		small_free_words(r, wv, mv, nw, false);
	return 0;
}

/* The general free: any regions, scrub, any order (duplicates detected). Out of line so the
 * fast path does not pay for its frame. */
static __attribute__((noinline)) int free_general(struct pma *pma, const uint64_t *pages,
						  size_t count, uint64_t page_size, bool scrub)
{
	uint64_t pf = page_size >> PMA_FRAME_SHIFT;
	struct pma_opargs args = { .scrub = scrub };
	int ret;

	for (size_t p = 0; p < count; p++)
		if (pages[p] & (page_size - 1))
			return -EINVAL;
	ret = pages_validate_allocated(pma, pages, count, pf);
	if (ret)
		return ret;
	for (size_t p = 0; p < count;) {
		uint64_t idx = 0, run = 1;
		struct pma_region *r = pma_page_locate(pma, pages[p], pf, &idx);

		/* Consecutive pages free as one range. */
		while (p + run < count && pages[p + run] == pages[p] + run * page_size &&
		       pages[p + run] >> PMA_FRAME_SHIFT < r->first + r->hi)
			run++;
		pma_page_apply(r, idx, run * pf, PMA_OP_FREE, &args);
		if (args.scrub)
			pma_scrub_submit(pma, pages[p], run * page_size);
		p += run;
	}
	pma_publish_stats_locked(pma);
	return 0;
}

static PMA_HOT_INLINE int free_locked(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		       unsigned int flags)
{
	bool scrub = pma->cfg.scrub_on_free && !(flags & PMA_FREE_SKIP_SCRUB);
	int ret;

	pma_assert_locked(pma);
	ret = free_fast_locked(pma, pages, count, page_size >> PMA_FRAME_SHIFT, scrub);
	if (ret > 0)
		return free_general(pma, pages, count, page_size, scrub);
	if (!ret)
		pma_publish_free_locked(pma);	/* the fast path does not scrub */
	return ret;
}

PMA_HOT int pma_free_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		   unsigned int flags)
{
	int ret;

	if (!pma || !pages || !count || !pma_page_size_valid(page_size) || (flags & ~PMA_FREE_SKIP_SCRUB))
		return -EINVAL;
	/* The caller's list is often not in cache: start loading its ends before the lock,
	 * whose atomic exchange would otherwise hold those loads back until it completes. */
	__builtin_prefetch(pages);
	if (count <= PMA_FAST_WORDS * 2)
		__builtin_prefetch(pages + count - 1);
	pma_lock(pma);
	ret = free_locked(pma, pages, count, page_size, flags);
	pma_unlock(pma);
	return ret;
}

/* The general range free: every frame checked allocated, then one state change (frames
 * with attributes, scrub-on-free, partial groups). Out of line: the common frees are whole
 * groups. */
static __attribute__((noinline)) int free_range_general(struct pma *pma, struct pma_region *r,
							uint64_t s, uint64_t n, bool scrub)
{
	struct pma_opargs args = { .scrub = scrub };

	pma_for_each_word(s, n, wi, m)
		if ((r->words[wi].alloc & m) != m)
			return -ENOENT;
	pma_range_apply(r, s, n, PMA_OP_FREE, &args);
	if (scrub)
		pma_scrub_submit(pma, (r->first + s) << PMA_FRAME_SHIFT, n << PMA_FRAME_SHIFT);
	return 0;
}

PMA_HOT int pma_free_range(struct pma *pma, uint64_t addr, uint64_t size, unsigned int flags)
{
	uint64_t n = size >> PMA_FRAME_SHIFT, s;
	struct pma_opargs args = { 0 };
	struct pma_region *r;
	int ret;

	if (!pma || !size || (addr | size) & (PMA_FRAME_SIZE - 1) || (flags & ~PMA_FREE_SKIP_SCRUB))
		return -EINVAL;
	pma_lock(pma);
	/* One state change for the whole range, once every frame is known allocated. */
	r = pma_region_span(pma, addr >> PMA_FRAME_SHIFT, n);
	if (!r) {
		pma_unlock(pma);
		return -EINVAL;
	}
	s = (addr >> PMA_FRAME_SHIFT) - r->first;
	args.scrub = pma->cfg.scrub_on_free && !(flags & PMA_FREE_SKIP_SCRUB);
	/* One whole group, plainly allocated: pma_group_apply() checks and frees it. Several whole
	 * groups without scrub: checked and freed as a block, one pass each. Anything else (or
	 * a frame with an attribute): the general path, which also says what is wrong. */
	if (n == PMA_GROUP_FRAMES && !(s % PMA_GROUP_FRAMES) && pma_group_apply(r, s, PMA_OP_FREE, &args))
		ret = 0;
	else if (!args.scrub && !(s % PMA_GROUP_FRAMES) && !(n % PMA_GROUP_FRAMES) &&
		 n > PMA_GROUP_FRAMES &&
		 (ret = pma_groups_free_check(r, s >> PMA_GROUP_SHIFT, n >> PMA_GROUP_SHIFT)) <= 0) {
		if (!ret)
			pma_groups_free_checked(r, s >> PMA_GROUP_SHIFT, n >> PMA_GROUP_SHIFT);
	} else {
		ret = free_range_general(pma, r, s, n, args.scrub);
	}
	if (!ret && args.scrub)
		pma_publish_stats_locked(pma);
	else if (!ret)
		pma_publish_free_locked(pma);
	pma_unlock(pma);
	return ret;
}
