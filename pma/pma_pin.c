// SPDX-License-Identifier: MIT
/* pma pin and unpin: moving allocated pages between PIN and UNPIN (only unpinned pages may
 * be evicted); all pages are checked before any changes. */
#include "pma/pma_internal.h"

/* Check every frame of @pages for a pin transition: -EBUSY if evicting, -EPERM if not in
 * the state the transition starts from, -ENOENT if free. */
static int pin_check(struct pma *pma, const uint64_t *pages, size_t count, uint64_t pf, bool pin)
{
	int ret = 0;

	for (size_t p = 0; p < count; p++) {
		uint64_t idx = 0;
		struct pma_region *r = pma_page_locate(pma, pages[p], pf, &idx);

		if (!r)
			return -EINVAL;
		pma_for_each_word(idx, pf, wi, m) {
			const struct pma_word *w = &r->words[wi];

			if (PMA_ATTRS(r, w)->evict & m)
				return -EBUSY;
			if ((w->alloc & m) != m)
				ret = ret ? ret : -ENOENT;
			else if (pin ? (~PMA_ATTRS(r, w)->unpin & m) : (PMA_ATTRS(r, w)->unpin & m))
				ret = ret ? ret : -EPERM;
		}
	}
	return ret;
}

static int pin_change(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		      bool pin)
{
	uint64_t pf = page_size >> PMA_FRAME_SHIFT;
	struct pma_opargs args = { 0 };
	int ret;

	if (!pma || !pages || !count || !pma_page_size_valid(page_size))
		return -EINVAL;
	for (size_t p = 0; p < count; p++)
		if (pages[p] & (page_size - 1))
			return -EINVAL;
	pma_lock(pma);
	ret = pin_check(pma, pages, count, pf, pin);
	for (size_t p = 0; !ret && p < count; p++) {
		uint64_t idx = 0;
		struct pma_region *r = pma_page_locate(pma, pages[p], pf, &idx);

		pma_range_apply(r, idx, pf, pin ? PMA_OP_PIN : PMA_OP_UNPIN, &args);
	}
	pma_unlock(pma);
	return ret;
}

int pma_pin_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size)
{
	return pin_change(pma, pages, count, page_size, true);
}

int pma_unpin_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size)
{
	return pin_change(pma, pages, count, page_size, false);
}
