// SPDX-License-Identifier: MIT
/* IOVA space of a paging domain: the sorted area list, allowed and reserved ranges, and
 * automatic allocation of naturally aligned IOVAs. All under d->lock. */
#include <errno.h>

#include "common/bitops.h"
#include "iommu_model/iommu_internal.h"

static bool ranges_overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
	return a0 <= b1 && b0 <= a1;
}

bool iommu_fq_overlaps(const struct iommu_domain *d, uint64_t iova, uint64_t last)
{
	for (size_t i = 0; i < d->nr_fq; i++)
		if (ranges_overlap(iova, last, d->fq[i].iova, d->fq[i].iova + d->fq[i].length - 1))
			return true;
	return false;
}

static bool reserved_overlaps(const struct iommu_domain *d, uint64_t iova, uint64_t last)
{
	for (size_t i = 0; i < d->nr_reserved; i++)
		if (ranges_overlap(iova, last, d->reserved[i].start, d->reserved[i].last))
			return true;
	return false;
}

/* First busy byte range overlapping [iova, last]: its last byte in *busy_last. */
static bool iova_busy(const struct iommu_domain *d, uint64_t iova, uint64_t last,
		      uint64_t *busy_last)
{
	const struct iommu_area *a = iommu_area_first_from(d, iova);

	if (a && a->iova <= last) {
		*busy_last = a->iova + a->length - 1;
		return true;
	}
	for (size_t j = 0; j < d->nr_reserved; j++)
		if (ranges_overlap(iova, last, d->reserved[j].start, d->reserved[j].last)) {
			*busy_last = d->reserved[j].last;
			return true;
		}
	for (size_t j = 0; j < d->nr_fq; j++) {
		uint64_t fl = d->fq[j].iova + d->fq[j].length - 1;

		if (ranges_overlap(iova, last, d->fq[j].iova, fl)) {
			*busy_last = fl;
			return true;
		}
	}
	return false;
}

int iommu_iova_check_fixed(struct iommu_domain *d, uint64_t iova, uint64_t len)
{
	uint64_t last = iova + len - 1;
	const struct iommu_area *a;

	cmn_mutex_assert_held(&d->lock);
	if (last < iova || last > d->aperture_last)
		return -ERANGE;
	if (reserved_overlaps(d, iova, last))
		return -EADDRINUSE;
	a = iommu_area_first_from(d, iova);
	if (a && a->iova <= last)
		return -EEXIST;
	/* The range is only waiting for its lazy flush: flush now, then it is free. */
	if (iommu_fq_overlaps(d, iova, last))
		iommu_drain_fq_locked(d);
	return 0;
}

/* Find room for @len at @align inside [start, last], from @from on. */
static bool iova_fit(const struct iommu_domain *d, uint64_t start, uint64_t last, uint64_t len,
		     uint64_t align, uint64_t *out)
{
	uint64_t cand = cmn_align_up(start, align), busy_last;

	if (cand < start)
		return false;
	while (cand <= last && len - 1 <= last - cand) {
		if (!iova_busy(d, cand, cand + len - 1, &busy_last)) {
			*out = cand;
			return true;
		}
		if (busy_last >= last)
			return false;
		cand = cmn_align_up(busy_last + 1, align);
		if (cand <= busy_last)
			return false;
	}
	return false;
}

static bool iova_alloc_from(const struct iommu_domain *d, uint64_t len, uint64_t align,
			    uint64_t hint, uint64_t *iova)
{
	struct iommu_iova_range whole = { 0, d->aperture_last };
	const struct iommu_iova_range *r = d->nr_allowed ? d->allowed : &whole;
	size_t n = d->nr_allowed ? d->nr_allowed : 1;

	for (size_t i = 0; i < n; i++) {
		uint64_t start = r[i].start, last = cmn_min(r[i].last, d->aperture_last);

		if (hint > last)
			continue;
		if (hint > start)
			start = hint;
		if (start <= last && iova_fit(d, start, last, len, align, iova))
			return true;
	}
	return false;
}

int iommu_iova_alloc(struct iommu_domain *d, uint64_t len, uint64_t *iova)
{
	/* Natural alignment: the lowest set bit of the length, capped at the largest leaf,
	 * so a 2 MiB mapping can use a 2 MiB leaf. */
	uint64_t align = cmn_min(VGPU_BIT(cmn_ctz(len)), IOMMU_PAGE_1G);

	cmn_mutex_assert_held(&d->lock);
	if (iova_alloc_from(d, len, align, d->alloc_hint, iova) ||
	    iova_alloc_from(d, len, align, 0, iova))
		goto found;
	if (d->nr_fq) {
		iommu_drain_fq_locked(d);
		if (iova_alloc_from(d, len, align, 0, iova))
			goto found;
	}
	return -ENOSPC;
found:
	d->alloc_hint = *iova + len;
	return 0;
}

static int ranges_valid(const struct iommu_iova_range *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].start > r[i].last)
			return -EINVAL;
	return 0;
}

int iommu_allow_iovas(struct iommu_domain *d, const struct iommu_iova_range *r, size_t n)
{
	struct iommu_iova_range *copy = NULL;
	int ret;

	if (!d || d->type != IOMMU_DOMAIN_PAGING || (n && !r) || n > 4096)
		return -EINVAL;
	ret = ranges_valid(r, n);
	if (ret)
		return ret;
	cmn_mutex_lock(&d->lock);
	for (size_t i = 0; i < n; i++)
		if (reserved_overlaps(d, r[i].start, r[i].last)) {
			ret = -EADDRINUSE;
			goto unlock;
		}
	if (n) {
		copy = iommu_realloc_array(d->mmu, NULL, n, sizeof(*copy));
		if (!copy) {
			ret = -ENOMEM;
			goto unlock;
		}
		for (size_t i = 0; i < n; i++)
			copy[i] = r[i];
	}
	iommu_free(d->mmu, d->allowed);
	d->allowed = copy;
	d->nr_allowed = n;
	d->alloc_hint = 0;
unlock:
	cmn_mutex_unlock(&d->lock);
	return ret;
}

int iommu_reserve_iova(struct iommu_domain *d, uint64_t start, uint64_t last)
{
	struct iommu_iova_range *nr;
	const struct iommu_area *a;
	int ret = 0;

	if (!d || d->type != IOMMU_DOMAIN_PAGING || start > last)
		return -EINVAL;
	cmn_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nr_allowed; i++)
		if (ranges_overlap(start, last, d->allowed[i].start, d->allowed[i].last)) {
			ret = -EADDRINUSE;
			goto unlock;
		}
	a = iommu_area_first_from(d, start);
	if ((a && a->iova <= last) || iommu_fq_overlaps(d, start, last)) {
		ret = -EADDRINUSE;
		goto unlock;
	}
	nr = iommu_realloc_array(d->mmu, d->reserved, d->nr_reserved + 1, sizeof(*nr));
	if (!nr) {
		ret = -ENOMEM;
		goto unlock;
	}
	nr[d->nr_reserved++] = (struct iommu_iova_range){ start, last };
	d->reserved = nr;
unlock:
	cmn_mutex_unlock(&d->lock);
	return ret;
}

/* Emit [start, last] minus the reserved ranges into @out (counting past @cap). */
static uint32_t ranges_subtract(const struct iommu_domain *d, uint64_t start, uint64_t last,
				struct iommu_iova_range *out, uint32_t cap, uint32_t n)
{
	uint64_t cur = start;

	while (cur <= last) {
		uint64_t next_res = UINT64_MAX, res_last = 0;

		/* Nearest reserved range that overlaps [cur, last]. */
		for (size_t i = 0; i < d->nr_reserved; i++) {
			const struct iommu_iova_range *r = &d->reserved[i];

			if (ranges_overlap(cur, last, r->start, r->last) &&
			    cmn_max(r->start, cur) < next_res) {
				next_res = cmn_max(r->start, cur);
				res_last = r->last;
			}
		}
		if (next_res == UINT64_MAX) {
			if (n < cap)
				out[n] = (struct iommu_iova_range){ cur, last };
			return n + 1;
		}
		if (next_res > cur) {
			if (n < cap)
				out[n] = (struct iommu_iova_range){ cur, next_res - 1 };
			n++;
		}
		if (res_last >= last)
			break;
		cur = res_last + 1;
	}
	return n;
}

int iommu_iova_ranges(struct iommu_domain *d, struct iommu_iova_range *out, uint32_t *num)
{
	uint32_t n = 0;

	if (!d || !num || d->type != IOMMU_DOMAIN_PAGING || (*num && !out))
		return -EINVAL;
	cmn_mutex_lock(&d->lock);
	if (!d->nr_allowed)
		n = ranges_subtract(d, 0, d->aperture_last, out, *num, 0);
	for (size_t i = 0; i < d->nr_allowed; i++) {
		uint64_t last = cmn_min(d->allowed[i].last, d->aperture_last);

		if (d->allowed[i].start <= last)
			n = ranges_subtract(d, d->allowed[i].start, last, out, *num, n);
	}
	cmn_mutex_unlock(&d->lock);
	if (n > *num) {
		*num = n;
		return -EMSGSIZE;
	}
	*num = n;
	return 0;
}
