// SPDX-License-Identifier: MIT
/* Translation caches: the IOTLB (one per unit, tagged by domain id and PASID) and each
 * function's ATC use the same set-associative array of seqlocked entries. A lookup is a
 * handful of loads and never writes; fills and invalidations take an entry by making
 * its sequence odd. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "iommu_model/iommu_internal.h"

int iommu_xcache_init(struct iommu *mmu, struct iommu_xcache *c, unsigned int sets,
		      unsigned int ways)
{
	c->set_bits = cmn_ilog2(sets);
	c->ways = ways;
	c->e = iommu_zalloc(mmu, (size_t)sets * ways * sizeof(*c->e));
	return c->e ? 0 : -ENOMEM;
}

void iommu_xcache_fini(struct iommu *mmu, struct iommu_xcache *c)
{
	iommu_free(mmu, c->e);
	c->e = NULL;
}

/* Take @e for writing if its sequence is still @s. */
static inline bool iommu_xc_lock(struct iommu_xc_entry *e, uint32_t s)
{
	return !(s & 1) && atomic_compare_exchange_strong_explicit(
				   &e->seq, &s, s + 1, memory_order_acquire, memory_order_relaxed);
}

static inline void iommu_xc_unlock(struct iommu_xc_entry *e)
{
	atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
}

/* Victim choice: a per-thread xorshift, so concurrent fillers rarely pick the same way. */
static unsigned int iommu_xc_victim(unsigned int ways)
{
	static __thread uint32_t x = 0x9e3779b9u;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return x % ways;
}

void iommu_xcache_fill(struct iommu_xcache *c, uint64_t ctx, const struct iommu_xc_hit *h,
		       _Atomic uint64_t *inval_seq, uint64_t seq0)
{
	struct iommu_xc_entry *set = iommu_xc_set(c, ctx, h->base >> (12 + 9 * h->cls), h->cls);
	struct iommu_xc_entry *e = NULL;
	uint32_t s = 0;

	/* An invalid way first, else a random one; give up if a writer holds it. */
	for (unsigned int w = 0; w < c->ways; w++) {
		s = atomic_load_explicit(&set[w].seq, memory_order_relaxed);
		if (!(atomic_load_explicit(&set[w].key, memory_order_relaxed) & IOMMU_XC_KEY_VALID)) {
			e = &set[w];
			break;
		}
	}
	if (!e) {
		e = &set[iommu_xc_victim(c->ways)];
		s = atomic_load_explicit(&e->seq, memory_order_relaxed);
	}
	if (!iommu_xc_lock(e, s))
		return;
	atomic_store_explicit(&e->ctx, ctx, memory_order_relaxed);
	atomic_store_explicit(&e->pa, h->pa, memory_order_relaxed);
	atomic_store_explicit(&e->key,
			      h->base | (uint64_t)h->cls << IOMMU_XC_KEY_CLASS_SHIFT |
				      (uint64_t)h->perm << IOMMU_XC_KEY_PERM_SHIFT | IOMMU_XC_KEY_VALID,
			      memory_order_relaxed);
	/* The walk that produced @h may predate an unmap whose invalidation scan has already
	 * passed this set. Every scan bumps *inval_seq before it starts and waits for
	 * entries that are mid-write (odd). Reading the counter with an RMW while we still
	 * hold the entry orders us against that bump: either the bump comes later, and its
	 * scan then waits for us and finds the entry; or we see it moved and the entry is
	 * never made visible. (Taking it back out after publishing would leave a window in
	 * which another thread could hit it after the unmap returned.) */
	if (atomic_fetch_add_explicit(inval_seq, 0, memory_order_seq_cst) != seq0)
		atomic_store_explicit(&e->key, 0, memory_order_relaxed);
	iommu_xc_unlock(e);
}

static bool iommu_xc_ctx_matches(uint64_t ectx, uint64_t ctx, enum iommu_xc_match match)
{
	switch (match) {
	case IOMMU_XC_MATCH_CTX:
		return ectx == ctx;
	case IOMMU_XC_MATCH_DID:
		return ectx >> 32 == ctx >> 32;
	case IOMMU_XC_MATCH_PASID:
		return (uint32_t)ectx == (uint32_t)ctx;
	case IOMMU_XC_MATCH_ALL:
		break;
	}
	return true;
}

/* Drop @e if it matches; waits out a filler that is mid-write. */
static void iommu_xc_inval_entry(struct iommu_xc_entry *e, uint64_t ctx,
				 enum iommu_xc_match match, uint64_t lo, uint64_t hi)
{
	for (;;) {
		uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);
		uint64_t key, base, size;

		if (s & 1) {
			cmn_cpu_relax();
			continue;
		}
		key = atomic_load_explicit(&e->key, memory_order_relaxed);
		if (!(key & IOMMU_XC_KEY_VALID) ||
		    !iommu_xc_ctx_matches(atomic_load_explicit(&e->ctx, memory_order_relaxed), ctx,
					  match))
			return;
		base = key & ~0xfffull;
		size = iommu_xc_class_size((unsigned int)(key >> IOMMU_XC_KEY_CLASS_SHIFT) & 3);
		if (hi && (base + size <= lo || base >= hi))
			return;
		if (!iommu_xc_lock(e, s))
			continue;
		atomic_store_explicit(&e->key, 0, memory_order_relaxed);
		iommu_xc_unlock(e);
		return;
	}
}

/* Entries a probe of [iova, iova + len) would look at, over the classes in @classes. */
static uint64_t iommu_xc_probe_cost(const struct iommu_xcache *c, uint64_t iova,
				    uint64_t len, unsigned int classes)
{
	uint64_t n = 0;

	for (unsigned int cls = 0; cls < IOMMU_XC_CLASSES; cls++) {
		unsigned int shift = 12 + 9 * cls;

		if (classes & (1u << cls))
			n += (((iova + len - 1) >> shift) - (iova >> shift) + 1) * c->ways;
	}
	return n;
}

void iommu_xcache_inval(struct iommu_xcache *c, uint64_t ctx, enum iommu_xc_match match,
			uint64_t iova, uint64_t len, unsigned int classes)
{
	size_t n = ((size_t)1 << c->set_bits) * c->ways;
	uint64_t hi = len ? iova + len : 0;

	/* Callers bumped an inval_seq with a seq_cst RMW just before: later loads stay after.
	 * An exact context and a range: probe the sets its pages hash to, for the leaf sizes
	 * the domain uses, when that touches fewer entries than a full scan. */
	if (len && hi > iova && match == IOMMU_XC_MATCH_CTX &&
	    iommu_xc_probe_cost(c, iova, len, classes) < n) {
		for (unsigned int cls = 0; cls < IOMMU_XC_CLASSES; cls++) {
			unsigned int shift = 12 + 9 * cls;

			if (!(classes & (1u << cls)))
				continue;
			for (uint64_t vpn = iova >> shift; vpn <= (hi - 1) >> shift; vpn++) {
				struct iommu_xc_entry *set = iommu_xc_set(c, ctx, vpn, cls);

				for (unsigned int w = 0; w < c->ways; w++)
					iommu_xc_inval_entry(&set[w], ctx, match, iova, hi);
			}
		}
		return;
	}
	for (size_t i = 0; i < n; i++)
		iommu_xc_inval_entry(&c->e[i], ctx, match, iova, hi);
}
