// SPDX-License-Identifier: MIT
/* pma searches for free frames, for the general allocation path: a contiguous aligned run
 * (the first whole group, the group run index, or the extent tree), and discontiguous pages
 * (small ones from partial groups first, so whole 2 MiB groups stay whole). Nothing here
 * changes state: the caller commits what was found. */
#include "pma/pma_internal.h"

uint64_t pma_find_contig(struct pma_region *r, uint64_t n, uint64_t align, uint64_t lo,
			 uint64_t hi, bool rev)
{
	uint64_t phase = r->first % align;

	/* One 2 MiB page: the first full group is the answer. */
	if (n == PMA_GROUP_FRAMES && align == PMA_GROUP_FRAMES) {
		uint64_t glo = (lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
		uint64_t ghi = hi >> PMA_GROUP_SHIFT;
		uint64_t g = rev ? pma_bits_prev(r->gfull, r->gfull_sum, glo, ghi)
				 : pma_bits_next(r->gfull, r->gfull_sum, glo, ghi);

		return g == PMA_NONE ? PMA_NONE : g << PMA_GROUP_SHIFT;
	}
	/* Whole groups: search group runs, so alignment to 2 MiB comes for free. */
	if (!(n % PMA_GROUP_FRAMES) && !(align % PMA_GROUP_FRAMES)) {
		uint64_t glo = (lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
		uint64_t ghi = hi >> PMA_GROUP_SHIFT, g;

		/* The first run anywhere, 2 MiB aligned, of up to PMA_RUN_CAP groups: the run
		 * index answers (bounds that take in every real group are no bound: padding is
		 * never free). Anything else searches the tree's group layer. */
		if (!rev && align == PMA_GROUP_FRAMES && n >> PMA_GROUP_SHIFT <= PMA_RUN_CAP &&
		    glo <= (r->lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT &&
		    ghi >= r->hi >> PMA_GROUP_SHIFT)
			g = pma_runs_find(r, n >> PMA_GROUP_SHIFT);
		else
			g = pma_tree_find(&r->ftree, r, true, glo, ghi, n >> PMA_GROUP_SHIFT,
					  align >> PMA_GROUP_SHIFT, phase >> PMA_GROUP_SHIFT, rev);

		return g == PMA_NONE ? PMA_NONE : g << PMA_GROUP_SHIFT;
	}
	return pma_tree_find(&r->ftree, r, false, lo, hi, n, align, phase, rev);
}

/* Take up to @need pages of 1 or 2 frames from the groups set in @map within [lo, hi). */
static size_t take_small(const struct pma_region *r, const uint64_t *map, const uint64_t *sum,
			 uint64_t pf, size_t need, uint64_t lo, uint64_t hi, bool rev,
			 uint64_t *out)
{
	uint64_t glo = lo >> PMA_GROUP_SHIFT, ghi = (hi + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
	size_t got = 0;

	while (got < need && glo < ghi) {
		uint64_t g = rev ? pma_bits_prev(map, sum, glo, ghi) : pma_bits_next(map, sum, glo, ghi);
		uint64_t base, m;

		if (g == PMA_NONE)
			break;
		if (rev)
			ghi = g;
		else
			glo = g + 1;
		base = g << PMA_GROUP_SHIFT;
		m = (pma_word_avail(r, &r->words[base / 64]) >> (base % 64)) & 0xffffffffull;
		if (base < lo)
			m &= ~0ull << (lo - base);
		if (base + PMA_GROUP_FRAMES > hi)
			m &= (1ull << (hi - base)) - 1;
		if (pf == 2)
			m &= (m >> 1) & 0x55555555ull;
		while (m && got < need) {
			unsigned int b = rev ? cmn_fls(m) : cmn_ctz(m);

			m &= ~VGPU_BIT(b);
			out[got++] = base + b;
		}
	}
	return got;
}

size_t pma_find_pages(struct pma_region *r, const struct pma_req *q, size_t need, uint64_t lo,
		      uint64_t hi, uint64_t *out)
{
	bool rev = q->flags & PMA_REVERSE;
	size_t got = 0;

	if (q->pf <= 2) {
		/* Partial groups first: small pages should not break whole 2 MiB groups. */
		got = take_small(r, r->gpart, r->gpart_sum, q->pf, need, lo, hi, rev, out);
		if (got < need)
			got += take_small(r, r->gfull, r->gfull_sum, q->pf, need - got, lo, hi, rev,
					  out + got);
		return got;
	}
	if (q->pf == PMA_GROUP_FRAMES) {
		uint64_t glo = (lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
		uint64_t ghi = hi >> PMA_GROUP_SHIFT;

		/* Many 2 MiB pages: one run of whole groups, when there is one, keeps the request
		 * to a few tree leaves and leaves the scattered groups to smaller requests. */
		if (need > 1 && need <= UINT32_MAX &&
		    (need <= PMA_RUN_CAP || pma_tree_largest_groups(&r->ftree, r) >= need)) {
			uint64_t s = pma_find_contig(r, need * PMA_GROUP_FRAMES, PMA_GROUP_FRAMES, lo, hi,
						     rev);

			if (s != PMA_NONE) {
				for (size_t i = 0; i < need; i++)
					out[i] = s + i * PMA_GROUP_FRAMES;
				return need;
			}
		}
		/* Forward: drain each word of full groups before asking the summary again. */
		while (!rev && got < need) {
			uint64_t g = pma_bits_next(r->gfull, r->gfull_sum, glo, ghi), w;

			if (g == PMA_NONE)
				break;
			w = r->gfull[g / 64] & (~0ull << (g % 64));
			while (w && got < need) {
				g = (g & ~63ull) + cmn_ctz(w);
				if (g >= ghi)
					return got;
				w &= w - 1;
				out[got++] = g << PMA_GROUP_SHIFT;
			}
			glo = (g | 63) + 1;
		}
		while (rev && got < need) {
			uint64_t g = rev ? pma_bits_prev(r->gfull, r->gfull_sum, glo, ghi)
					 : pma_bits_next(r->gfull, r->gfull_sum, glo, ghi);

			if (g == PMA_NONE)
				break;
			out[got++] = g << PMA_GROUP_SHIFT;
			ghi = g;
		}
		return got;
	}
	while (got < need) {
		uint64_t s = pma_find_contig(r, q->pf, q->pf, lo, hi, rev);

		if (s == PMA_NONE)
			break;
		out[got++] = s;
		if (rev)
			hi = s;
		else
			lo = s + q->pf;
	}
	return got;
}
