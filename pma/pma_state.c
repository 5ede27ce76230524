// SPDX-License-Identifier: MIT
/* pma frame state changes over any range: whole 2 MiB groups move as a block (the inline
 * helpers in pma_internal.h), anything else a word at a time, each word's group bits,
 * counters and tree marks following it. The allocation, free, pin, scrub and eviction
 * paths all change state through here or those helpers. */
#include "pma/pma_internal.h"

void pma_range_apply(struct pma_region *r, uint64_t s, uint64_t n, enum pma_op op,
		     struct pma_opargs *a)
{
	if (!(s % PMA_GROUP_FRAMES) && !(n % PMA_GROUP_FRAMES) &&
	    (n == PMA_GROUP_FRAMES ? pma_group_apply(r, s, op, a)
				   : pma_groups_apply(r, s / PMA_GROUP_FRAMES, n / PMA_GROUP_FRAMES, op, a)))
		return;
	pma_for_each_word(s, n, wi, m) {
		uint64_t old = pma_word_avail(r, &r->words[wi]);

		pma_word_apply(r, &r->words[wi], m, op, a);
		pma_region_word_update(r, wi, old);
	}
}

void pma_page_apply(struct pma_region *r, uint64_t idx, uint64_t pf, enum pma_op op,
		    struct pma_opargs *a)
{
	if (pf == PMA_GROUP_FRAMES && !(idx % PMA_GROUP_FRAMES) && pma_group_apply(r, idx, op, a))
		return;
	if (pf < PMA_GROUP_FRAMES && pf <= 64 - idx % 64) {
		uint64_t wi = idx / 64, old = pma_word_avail(r, &r->words[wi]);

		pma_word_apply(r, &r->words[wi], cmn_mask(idx % 64, (unsigned int)pf), op, a);
		pma_region_word_update(r, wi, old);
		return;
	}
	pma_range_apply(r, idx, pf, op, a);
}
