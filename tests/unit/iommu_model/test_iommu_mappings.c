// SPDX-License-Identifier: MIT
/* iommu_mappings(): a PAGING domain's mappings listed in ascending IOVA order with their
 * memory object, offset and permissions (what a migration re-creates at the same IOVAs); a
 * list too small is -EMSGSIZE with the count, another domain type -EINVAL. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "iommu_model/iommu.h"

static void test_list(void **state)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_mapping m[4];
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	void *mem = aligned_alloc(1 << 21, 1 << 21);
	uint64_t iova[3] = { 0x30000000, 0x10000000, 0x20000000 };
	size_t n;

	(void)state;
	assert_non_null(mem);
	assert_int_equal(iommu_create(NULL, &mmu), 0);
	assert_int_equal(iommu_memobj_register(mmu, mem, 1 << 21, &mo), 0);
	assert_int_equal(iommu_domain_alloc(mmu, &o, &d), 0);
	n = 4;
	assert_int_equal(iommu_mappings(d, m, &n), 0);
	assert_int_equal(n, 0);
	/* Mapped out of order: listed ascending, each with its offset and permissions. */
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(iommu_map(d, mo, i * 0x10000, 0x10000, i ? IOMMU_READ :
					   IOMMU_READ | IOMMU_WRITE, IOMMU_MAP_FIXED_IOVA, &iova[i]), 0);
	n = 0;
	assert_int_equal(iommu_mappings(d, NULL, &n), -EMSGSIZE);
	assert_int_equal(n, 3);
	n = 2;
	assert_int_equal(iommu_mappings(d, m, &n), -EMSGSIZE);
	assert_int_equal(n, 3);
	n = 4;
	assert_int_equal(iommu_mappings(d, m, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(m[0].iova, 0x10000000);
	assert_int_equal(m[0].offset, 0x10000);
	assert_int_equal(m[0].prot, IOMMU_READ);
	assert_int_equal(m[2].iova, 0x30000000);
	assert_int_equal(m[2].offset, 0);
	assert_int_equal(m[2].prot, IOMMU_READ | IOMMU_WRITE);
	assert_ptr_equal(m[1].memobj, mo);
	assert_int_equal(m[1].length, 0x10000);
	/* One unmapped: gone from the list. */
	assert_int_equal(iommu_unmap(d, 0x20000000, 0x10000, NULL), 0);
	iommu_domain_flush_queue(d);
	n = 4;
	assert_int_equal(iommu_mappings(d, m, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(m[1].iova, 0x30000000);
	assert_int_equal(iommu_mappings(NULL, m, &n), -EINVAL);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_list),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
