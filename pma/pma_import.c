// SPDX-License-Identifier: MIT
/* pma import: re-creating allocations from an exported list of ranges (a restarted daemon
 * restoring its slices); every range is validated and checked claimable before any is
 * taken, so a bad list changes nothing. */
#include <stdlib.h>
#include <string.h>

#include "pma/pma_internal.h"

static int range_cmp(const void *a, const void *b)
{
	const struct pma_range *x = a, *y = b;

	return x->base < y->base ? -1 : x->base > y->base;
}

int pma_import(struct pma *pma, const struct pma_range *ranges, size_t nr)
{
	struct pma_range *sorted;
	int ret = 0;

	if (!pma || (nr && !ranges))
		return -EINVAL;
	if (!nr)
		return 0;
	sorted = malloc(nr * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	memcpy(sorted, ranges, nr * sizeof(*sorted));
	qsort(sorted, nr, sizeof(*sorted), range_cmp);
	for (size_t i = 0; i < nr && !ret; i++) {
		const struct pma_range *x = &sorted[i];
		uint32_t st = x->state & PMA_STATE_MASK;

		if (!x->size || (x->base | x->size) & (PMA_FRAME_SIZE - 1) ||
		    (st != PMA_STATE_PIN && st != PMA_STATE_UNPIN) ||
		    (x->state & ~(PMA_STATE_MASK | PMA_ATTR_PERSISTENT)))
			ret = -EINVAL;
		else if (i && sorted[i - 1].base + sorted[i - 1].size > x->base)
			ret = -EEXIST;
	}
	pma_lock(pma);
	for (size_t i = 0; i < nr && !ret; i++) {
		struct pma_region *r = pma_region_span(pma, sorted[i].base >> PMA_FRAME_SHIFT,
						       sorted[i].size >> PMA_FRAME_SHIFT);

		ret = r ? pma_range_claimable(r, (sorted[i].base >> PMA_FRAME_SHIFT) - r->first,
					      sorted[i].size >> PMA_FRAME_SHIFT)
			: -EINVAL;
	}
	for (size_t i = 0; i < nr && !ret; i++) {
		struct pma_opargs args = {
			.pin = (sorted[i].state & PMA_STATE_MASK) == PMA_STATE_PIN,
			.persist = sorted[i].state & PMA_ATTR_PERSISTENT,
		};
		struct pma_region *r = pma_region_span(pma, sorted[i].base >> PMA_FRAME_SHIFT,
						       sorted[i].size >> PMA_FRAME_SHIFT);

		pma_range_apply(r, (sorted[i].base >> PMA_FRAME_SHIFT) - r->first,
				sorted[i].size >> PMA_FRAME_SHIFT, PMA_OP_ALLOC, &args);
	}
	if (!ret)
		pma_publish_stats_locked(pma);
	pma_unlock(pma);
	free(sorted);
	return ret;
}
