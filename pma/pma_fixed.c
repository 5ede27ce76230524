// SPDX-License-Identifier: MIT
/* pma fixed allocation: the caller names the address range (a VF slice carved at a known
 * place, a reserved window); it is taken whole or not at all. */
#include "pma/pma_internal.h"

int pma_range_claimable(const struct pma_region *r, uint64_t s, uint64_t n)
{
	int ret = 0;

	pma_for_each_word(s, n, wi, m) {
		const struct pma_word *w = &r->words[wi];

		if (w->alloc & m)
			return -EEXIST;
		if (pma_word_attrs(r, w) & m)
			ret = -ENOMEM;
	}
	return ret;
}

int pma_alloc_fixed(struct pma *pma, uint64_t addr, uint64_t size, struct pma_alloc_opts *opts)
{
	uint32_t flags = opts ? opts->flags : 0;
	struct pma_opargs args = { .pin = flags & PMA_PINNED, .persist = flags & PMA_PERSISTENT };
	struct pma_region *r;
	uint64_t s;
	int ret;

	if (opts) {
		opts->pages_allocated = 0;
		opts->result_flags = 0;
	}
	if (!pma || !size || (addr | size) & (PMA_FRAME_SIZE - 1) || (flags & ~PMA_ALL_FLAGS))
		return -EINVAL;
	pma_lock(pma);
	r = pma_region_span(pma, addr >> PMA_FRAME_SHIFT, size >> PMA_FRAME_SHIFT);
	if (!r) {
		pma_unlock(pma);
		return -EINVAL;
	}
	s = (addr >> PMA_FRAME_SHIFT) - r->first;
	ret = pma_range_claimable(r, s, size >> PMA_FRAME_SHIFT);
	if (!ret) {
		pma_range_apply(r, s, size >> PMA_FRAME_SHIFT, PMA_OP_ALLOC, &args);
		pma_publish_stats_locked(pma);
	}
	pma_unlock(pma);
	if (opts) {
		opts->pages_allocated = ret ? 0 : 1;
		opts->result_flags = !ret && !args.dirty_seen ? PMA_RESULT_IS_ZERO : 0;
	}
	return ret;
}
