/* SPDX-License-Identifier: MIT */
/* Helpers shared by the iommu_model unit tests: a unit with memfd-backed memory objects. */
#ifndef VGPU_TEST_IOMMU_H
#define VGPU_TEST_IOMMU_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "iommu_model/iommu.h"

#define PG IOMMU_PAGE_SIZE

static inline struct iommu *t_iommu(void)
{
	struct iommu *mmu;

	assert_int_equal(iommu_create(NULL, &mmu), 0);
	return mmu;
}

/* A memfd of @size bytes registered with @mmu; bytes filled with (offset / 4096 + seed). */
static inline struct iommu_memobj *t_memobj(struct iommu *mmu, size_t size, unsigned int seed)
{
	struct iommu_memobj *mo;
	int fd = memfd_create("iommu-test", MFD_CLOEXEC);
	uint8_t *p;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(iommu_memobj_register_fd(mmu, fd, 0, size, &mo), 0);
	close(fd);
	p = iommu_memobj_base(mo);
	for (size_t off = 0; off < size; off += PG)
		memset(p + off, (int)((off / PG + seed) & 0xff), PG);
	return mo;
}

static inline struct iommu_domain *t_paging(struct iommu *mmu, unsigned int flags)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING, .flags = flags };
	struct iommu_domain *d;

	assert_int_equal(iommu_domain_alloc(mmu, &o, &d), 0);
	return d;
}

static inline uint64_t t_map_fixed(struct iommu_domain *d, struct iommu_memobj *mo,
				   uint64_t off, uint64_t len, unsigned int prot, uint64_t iova)
{
	assert_int_equal(iommu_map(d, mo, off, len, prot, IOMMU_MAP_FIXED_IOVA, &iova), 0);
	return iova;
}

/* Number of fault records of @rid (drains the log); last reason in *reason. */
static inline size_t t_faults(struct iommu *mmu, unsigned int rid, unsigned int *reason)
{
	struct iommu_fault_rec r[64];
	size_t n;

	assert_int_equal(iommu_fault_log_read(mmu, rid, r, 64, &n, NULL), 0);
	if (n && reason)
		*reason = r[n - 1].reason;
	return n;
}

/* Run a table of cases: one named CMUnitTest per row. */
#define T_CASES(tests, n, cases, fn)                                                   \
	do {                                                                            \
		for (size_t i_ = 0; i_ < VGPU_ARRAY_SIZE(cases); i_++)                  \
			(tests)[(n)++] = (struct CMUnitTest){ .name = (cases)[i_].name, \
							      .test_func = (fn),        \
							      .initial_state =          \
								      (void *)&(cases)[i_] };   \
	} while (0)

#endif

/* ---- stage-1 tables written the way a function's driver would ------------------------ */

#include <vgpu/iommu.h>

/* A function's DMA memory as seen through its stage-2: @mem at IPA @ipa0, tables bumped
 * from @next_table (an IPA) on. */
struct t_s1 {
	uint8_t *mem;
	uint64_t ipa0;
	uint64_t root;
	uint64_t next_table;
};

static inline uint64_t *t_s1_pte(struct t_s1 *s, uint64_t table_ipa, unsigned int idx)
{
	return (uint64_t *)(s->mem + (table_ipa - s->ipa0)) + idx;
}

static inline void t_s1_init(struct t_s1 *s, uint8_t *mem, uint64_t ipa0, uint64_t root_ipa)
{
	s->mem = mem;
	s->ipa0 = ipa0;
	s->root = root_ipa;
	s->next_table = root_ipa + PG;
	memset(mem + (root_ipa - ipa0), 0, PG);
}

/* Map one leaf of @size (4K / 2M / 1G) at @iova -> @ipa with R/W @perm. */
static inline void t_s1_map(struct t_s1 *s, uint64_t iova, uint64_t ipa, uint64_t size,
			    unsigned int perm)
{
	unsigned int leaf = size == IOMMU_PAGE_1G ? 2 : size == IOMMU_PAGE_2M ? 1 : 0;
	uint64_t table = s->root;

	for (unsigned int level = 3; level > leaf; level--) {
		uint64_t *pte = t_s1_pte(s, table, (iova >> VGPU_IOPT_SHIFT(level)) & 511);

		if (!(*pte & (VGPU_IOPTE_R | VGPU_IOPTE_W))) {
			memset(s->mem + (s->next_table - s->ipa0), 0, PG);
			__atomic_store_n(pte, s->next_table | VGPU_IOPTE_R | VGPU_IOPTE_W,
					 __ATOMIC_RELEASE);
			s->next_table += PG;
		}
		table = *pte & VGPU_IOPTE_ADDR_MASK;
	}
	__atomic_store_n(t_s1_pte(s, table, (iova >> VGPU_IOPT_SHIFT(leaf)) & 511),
			 ipa | perm | (leaf ? VGPU_IOPTE_PS : 0), __ATOMIC_RELEASE);
}
