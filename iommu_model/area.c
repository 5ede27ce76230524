// SPDX-License-Identifier: MIT
/* The areas (mappings) of a paging domain, kept in a treap ordered by IOVA so that map,
 * unmap and lookups stay O(log n) with tens of thousands of mappings. Areas never
 * overlap, so ordering by start also orders by end. All under d->lock. */
#include "iommu_model/iommu_internal.h"

static struct iommu_area *rot_right(struct iommu_area *t)
{
	struct iommu_area *l = t->left;

	t->left = l->right;
	l->right = t;
	return l;
}

static struct iommu_area *rot_left(struct iommu_area *t)
{
	struct iommu_area *r = t->right;

	t->right = r->left;
	r->left = t;
	return r;
}

static struct iommu_area *treap_insert(struct iommu_area *t, struct iommu_area *a)
{
	if (!t)
		return a;
	if (a->iova < t->iova) {
		t->left = treap_insert(t->left, a);
		if (t->left->prio > t->prio)
			t = rot_right(t);
	} else {
		t->right = treap_insert(t->right, a);
		if (t->right->prio > t->prio)
			t = rot_left(t);
	}
	return t;
}

static struct iommu_area *treap_merge(struct iommu_area *a, struct iommu_area *b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	if (a->prio > b->prio) {
		a->right = treap_merge(a->right, b);
		return a;
	}
	b->left = treap_merge(a, b->left);
	return b;
}

static struct iommu_area *treap_remove(struct iommu_area *t, const struct iommu_area *a)
{
	VGPU_ASSERT(t != NULL);
	if (t == a)
		return treap_merge(t->left, t->right);
	if (a->iova < t->iova)
		t->left = treap_remove(t->left, a);
	else
		t->right = treap_remove(t->right, a);
	return t;
}

struct iommu_area *iommu_area_first_from(const struct iommu_domain *d, uint64_t iova)
{
	struct iommu_area *t = d->areas, *best = NULL;

	while (t) {
		if (t->iova + (t->length - 1) >= iova) {
			best = t;
			t = t->left;
		} else {
			t = t->right;
		}
	}
	return best;
}

struct iommu_area *iommu_area_next(const struct iommu_domain *d, const struct iommu_area *a)
{
	uint64_t end = a->iova + a->length;

	return end ? iommu_area_first_from(d, end) : NULL;
}

void iommu_area_insert(struct iommu_domain *d, struct iommu_area *a)
{
	/* xorshift: priorities only need to look random to keep the tree shallow. */
	d->rng ^= d->rng << 13;
	d->rng ^= d->rng >> 17;
	d->rng ^= d->rng << 5;
	a->prio = d->rng;
	a->left = a->right = NULL;
	d->areas = treap_insert(d->areas, a);
	d->nr_areas++;
}

void iommu_area_remove(struct iommu_domain *d, struct iommu_area *a)
{
	d->areas = treap_remove(d->areas, a);
	d->nr_areas--;
}
