// SPDX-License-Identifier: MIT
/* Host-owned IO page tables in the format of include/vgpu/iommu.h. A table entry's address
 * field holds the host address of the next table (host tables are never guest-visible).
 * Tables are written under the domain lock and read lock-free by walkers; a table is never
 * freed before its domain, so a walker can never follow a pointer into freed memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "iommu_model/iommu_internal.h"

_Atomic uint64_t *iommu_pt_alloc(struct iommu *mmu)
{
	void *t;

	if (iommu_alloc_should_fail(mmu))
		return NULL;
	t = aligned_alloc(IOMMU_PAGE_SIZE, IOMMU_PAGE_SIZE);
	if (!t)
		return NULL;
	memset(t, 0, IOMMU_PAGE_SIZE);
	VGPU_ASSERT(((uintptr_t)t & ~VGPU_IOPTE_ADDR_MASK) == 0);
	atomic_fetch_add(&mmu->allocs_live, 1);
	atomic_fetch_add(&mmu->pt_pages, 1);
	return t;
}

static bool pte_is_table(uint64_t pte, unsigned int level)
{
	return IOMMU_IOPTE_PRESENT(pte) && level > 0 && !(pte & VGPU_IOPTE_PS);
}

static _Atomic uint64_t *pte_table(uint64_t pte)
{
	return (_Atomic uint64_t *)(uintptr_t)(pte & VGPU_IOPTE_ADDR_MASK);
}

void iommu_pt_free_all(struct iommu *mmu, _Atomic uint64_t *t, unsigned int level)
{
	if (!t)
		return;
	for (unsigned int i = 0; level > 0 && i < VGPU_IOPT_ENTRIES; i++) {
		uint64_t pte = atomic_load_explicit(&t[i], memory_order_relaxed);

		if (pte_is_table(pte, level))
			iommu_pt_free_all(mmu, pte_table(pte), level - 1);
	}
	free((void *)t);
	atomic_fetch_sub(&mmu->allocs_live, 1);
	atomic_fetch_sub(&mmu->pt_pages, 1);
}

static inline unsigned int pt_index(uint64_t iova, unsigned int level)
{
	return (unsigned int)(iova >> VGPU_IOPT_SHIFT(level)) & (VGPU_IOPT_ENTRIES - 1);
}

int iommu_pt_walk(_Atomic uint64_t *t, uint64_t iova, uint64_t *pte_out, unsigned int *level_out,
		  _Atomic uint64_t **ptep_out)
{
	for (unsigned int level = VGPU_IOPT_LEVELS - 1;; level--) {
		_Atomic uint64_t *ptep = &t[pt_index(iova, level)];
		/* Acquire: a table pointer is published after the table is zeroed. */
		uint64_t pte = atomic_load_explicit(ptep, memory_order_acquire);

		if (!IOMMU_IOPTE_PRESENT(pte))
			return -EFAULT;
		if (pte_is_table(pte, level)) {
			t = pte_table(pte);
			continue;
		}
		*pte_out = pte;
		*level_out = level;
		*ptep_out = ptep;
		return 0;
	}
}

/* Entry for @iova at @level, allocating tables on the way. NULL on -ENOMEM, or (with
 * *blocked set) if a leaf sits above @level. */
static _Atomic uint64_t *pt_slot(struct iommu_domain *d, uint64_t iova, unsigned int level,
				 bool *blocked)
{
	_Atomic uint64_t *t = d->root;

	*blocked = false;
	for (unsigned int l = VGPU_IOPT_LEVELS - 1; l > level; l--) {
		_Atomic uint64_t *ptep = &t[pt_index(iova, l)];
		uint64_t pte = atomic_load_explicit(ptep, memory_order_relaxed);

		if (!IOMMU_IOPTE_PRESENT(pte)) {
			_Atomic uint64_t *nt = iommu_pt_alloc(d->mmu);

			if (!nt)
				return NULL;
			pte = (uint64_t)(uintptr_t)nt | VGPU_IOPTE_R | VGPU_IOPTE_W;
			atomic_store_explicit(ptep, pte, memory_order_release);
		} else if (!pte_is_table(pte, l)) {
			*blocked = true;
			return NULL;
		}
		t = pte_table(pte);
	}
	return &t[pt_index(iova, level)];
}

/* Largest leaf level usable at @iova/@pa for @left bytes whose slot is still empty. */
static unsigned int pt_leaf_level(struct iommu_domain *d, uint64_t iova, uint64_t pa,
				  uint64_t left)
{
	for (unsigned int level = 2; level > 0; level--) {
		uint64_t sz = 1ull << VGPU_IOPT_SHIFT(level);
		_Atomic uint64_t *t = d->root;
		unsigned int l;

		if (!cmn_is_aligned(iova | pa, sz) || left < sz)
			continue;
		/* A table left behind by earlier small mappings keeps this range at a lower
		 * level: replacing it would need the table freed under concurrent walkers. */
		for (l = VGPU_IOPT_LEVELS - 1; l > level; l--) {
			uint64_t pte = atomic_load_explicit(&t[pt_index(iova, l)],
							    memory_order_relaxed);
			if (!IOMMU_IOPTE_PRESENT(pte))
				break;
			t = pte_table(pte);
		}
		if (l > level ||
		    !IOMMU_IOPTE_PRESENT(atomic_load_explicit(&t[pt_index(iova, level)],
							memory_order_relaxed)))
			return level;
	}
	return 0;
}

int iommu_pt_map(struct iommu_domain *d, uint64_t iova, uint64_t pa, uint64_t len,
		 unsigned int prot, uint64_t *done)
{
	uint64_t off = 0;

	cmn_mutex_assert_held(&d->lock);
	while (off < len) {
		unsigned int level = pt_leaf_level(d, iova + off, pa + off, len - off);
		uint64_t sz = 1ull << VGPU_IOPT_SHIFT(level);
		uint64_t pte = (pa + off) | prot | (level ? VGPU_IOPTE_PS : 0);
		_Atomic uint64_t *ptep;
		bool blocked;

		ptep = pt_slot(d, iova + off, level, &blocked);
		if (!ptep) {
			VGPU_ASSERT(!blocked);	/* areas never overlap */
			*done = off;
			return -ENOMEM;
		}
		VGPU_ASSERT(!IOMMU_IOPTE_PRESENT(atomic_load_explicit(ptep, memory_order_relaxed)));
		/* The size class first: a walker that sees the leaf may cache it at once. */
		atomic_fetch_or_explicit(&d->classes, 1u << level, memory_order_release);
		atomic_store_explicit(ptep, pte, memory_order_release);
		off += sz;
	}
	*done = off;
	return 0;
}

void iommu_pt_unmap(struct iommu_domain *d, uint64_t iova, uint64_t len)
{
	uint64_t off = 0;

	cmn_mutex_assert_held(&d->lock);
	while (off < len) {
		uint64_t pte;
		unsigned int level;
		_Atomic uint64_t *ptep;
		int ret = iommu_pt_walk(d->root, iova + off, &pte, &level, &ptep);

		VGPU_ASSERT(ret == 0);
		VGPU_ASSERT(len - off >= 1ull << VGPU_IOPT_SHIFT(level));
		atomic_store_explicit(ptep, 0, memory_order_release);
		off += 1ull << VGPU_IOPT_SHIFT(level);
	}
}
