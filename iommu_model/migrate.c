// SPDX-License-Identifier: MIT
/* A PAGING domain's mappings as a list, for a migration: the destination re-creates each
 * at the same IOVA (IOMMU_MAP_FIXED_IOVA) over its own copy of the memory. */
#include <errno.h>

#include "iommu_model/iommu_internal.h"

int iommu_mappings(struct iommu_domain *d, struct iommu_mapping *out, size_t *n)
{
	size_t cap, k = 0;

	if (!d || !n || d->type != IOMMU_DOMAIN_PAGING || (*n && !out))
		return -EINVAL;
	cap = *n;
	cmn_mutex_lock(&d->lock);
	for (const struct iommu_area *a = iommu_area_first_from(d, 0); a;
	     a = iommu_area_next(d, a), k++)
		if (k < cap)
			out[k] = (struct iommu_mapping){ a->iova, a->length, a->mo, a->offset,
							 a->prot };
	cmn_mutex_unlock(&d->lock);
	*n = k;
	return k > cap ? -EMSGSIZE : 0;
}
