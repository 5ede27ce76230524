// SPDX-License-Identifier: MIT
/* IOMMU-14: fail-nth. Each scenario runs with its 1st, 2nd, ... allocation failing until
 * it needs fewer allocations than that; every failure must be clean: the error is
 * -ENOMEM, a failed map leaves nothing mapped, and once the scenario has undone what it
 * did, the unit holds exactly the allocations it held before. */
#include <errno.h>

#include "iommu_test.h"

#define T_IPA0 (1ull << 30)

/* A failed map must leave no translation and no mapping in its range. */
static void check_unmapped(struct iommu_domain *d, uint64_t iova, uint64_t len)
{
	struct iommu_mapping m;
	struct iommu_xlate x;

	for (uint64_t off = 0; off < len; off += PG)
		assert_int_equal(iommu_translate(d, iova + off, 1, IOMMU_READ, &x), -EFAULT);
	assert_int_equal(iommu_query(d, iova, &m), -ENOENT);
}

static int scen_big_map(struct iommu *mmu, struct iommu_memobj *mo)
{
	struct iommu_domain *d;
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	/* Mixed leaves: 4K head, 2M middle, 1G, in two separate top-level slots. */
	const uint64_t iova = (1ull << 39) - IOMMU_PAGE_1G - (2 << 20) - PG;
	const uint64_t len = IOMMU_PAGE_1G + (2 << 20) + 2 * PG;
	struct iommu_xlate x;
	int ret;

	ret = iommu_domain_alloc(mmu, &o, &d);
	if (ret)
		return ret;
	ret = iommu_map(d, mo, 0, len, IOMMU_READ, IOMMU_MAP_FIXED_IOVA,
			&(uint64_t){ iova });
	if (ret) {
		check_unmapped(d, iova, 8 * PG);
		check_unmapped(d, iova + len - 8 * PG, 8 * PG);
		goto free_domain;
	}
	assert_int_equal(iommu_translate(d, iova + len - 1, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_unmap(d, iova, len, NULL), 0);
free_domain:
	assert_int_equal(iommu_domain_free(d), 0);
	return ret;
}

static int scen_two_domains(struct iommu *mmu, struct iommu_memobj *mo)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_domain *a, *b;
	uint64_t ia = 0, ib = 0;
	int ret;

	ret = iommu_domain_alloc(mmu, &o, &a);
	if (ret)
		return ret;
	ret = iommu_domain_alloc(mmu, &o, &b);
	if (ret)
		goto free_a;
	ret = iommu_map(a, mo, 0, 64 * PG, IOMMU_READ | IOMMU_WRITE, 0, &ia);
	if (ret)
		goto free_b;
	ret = iommu_map(b, mo, 0, 64 * PG, IOMMU_READ, 0, &ib);
	if (ret) {
		check_unmapped(b, 0, 64 * PG);
		goto unmap_a;
	}
	assert_int_equal(iommu_unmap(b, ib, 64 * PG, NULL), 0);
unmap_a:
	assert_int_equal(iommu_unmap(a, ia, 64 * PG, NULL), 0);
free_b:
	assert_int_equal(iommu_domain_free(b), 0);
free_a:
	assert_int_equal(iommu_domain_free(a), 0);
	return ret;
}

static int scen_iova_space(struct iommu *mmu, struct iommu_memobj *mo)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING, .flags = IOMMU_DOMAIN_LAZY };
	struct iommu_iova_range r[2] = { { 1 << 20, (64 << 20) - 1 }, { 1ull << 40, (1ull << 41) - 1 } };
	struct iommu_domain *d;
	uint64_t iovas[40];
	int ret, n = 0;

	ret = iommu_domain_alloc(mmu, &o, &d);
	if (ret)
		return ret;
	ret = iommu_allow_iovas(d, r, 2);
	if (ret)
		goto free_domain;
	ret = iommu_reserve_iova(d, 0, PG - 1);
	if (ret)
		goto free_domain;
	for (; n < 40; n++) {
		ret = iommu_map(d, mo, (uint64_t)(n % 8) * PG, PG, IOMMU_READ, 0, &iovas[n]);
		if (ret)
			break;
	}
	/* Lazy unmaps grow the flush queue: may need memory, must never fail for it. */
	for (int i = 0; i < n; i++)
		assert_int_equal(iommu_unmap(d, iovas[i], PG, NULL), 0);
	iommu_domain_flush_queue(d);
free_domain:
	assert_int_equal(iommu_domain_free(d), 0);
	return ret;
}

static int scen_nested_ats(struct iommu *mmu, struct iommu_memobj *mo)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING,
				       .flags = IOMMU_DOMAIN_NEST_PARENT };
	struct iommu_domain *s2, *s1;
	struct t_s1 tbl;
	uint8_t b;
	int ret;

	ret = iommu_domain_alloc(mmu, &o, &s2);
	if (ret)
		return ret;
	ret = iommu_map(s2, mo, 0, 64 * PG, IOMMU_READ, IOMMU_MAP_FIXED_IOVA, &(uint64_t){ T_IPA0 });
	if (ret)
		goto free_s2;
	t_s1_init(&tbl, iommu_memobj_base(mo), T_IPA0, T_IPA0);
	t_s1_map(&tbl, 0, T_IPA0 + 40 * PG, PG, IOMMU_READ);
	o = (struct iommu_domain_opts){ .type = IOMMU_DOMAIN_NESTED, .parent = s2,
					.s1_root = T_IPA0 };
	ret = iommu_domain_alloc(mmu, &o, &s1);
	if (ret)
		goto free_s2;
	ret = iommu_attach(mmu, 1, s1);
	if (ret)
		goto free_s1;
	ret = iommu_pasid_attach(mmu, 1, 7, s1);
	if (ret)
		goto detach;
	ret = iommu_ats_enable(mmu, 1, 0);
	if (ret)
		goto detach_pasid;
	assert_int_equal(iommu_dma_read(mmu, 1, 5, &b, 1), 0);
	assert_int_equal(iommu_ats_disable(mmu, 1), 0);
detach_pasid:
	assert_int_equal(iommu_pasid_detach(mmu, 1, 7), 0);
detach:
	assert_int_equal(iommu_detach(mmu, 1), 0);
free_s1:
	assert_int_equal(iommu_domain_free(s1), 0);
free_s2:
	assert_int_equal(iommu_domain_free(s2), 0);
	return ret;
}

static int scen_memobj(struct iommu *mmu, struct iommu_memobj *mo)
{
	struct iommu_memobj *m2;
	int ret = iommu_memobj_register(mmu, iommu_memobj_base(mo), 16 * PG, &m2);

	if (ret)
		return ret;
	assert_int_equal(iommu_memobj_unregister(m2), 0);
	return 0;
}

static const struct failnth_case {
	const char *name;
	int (*scen)(struct iommu *mmu, struct iommu_memobj *mo);
	unsigned int min_allocs;	/* the scenario must hit at least this many */
} failnth_cases[] = {
	{ "IOMMU-14 map with all leaf sizes", scen_big_map, 5 },
	{ "IOMMU-14 map two domains", scen_two_domains, 6 },
	{ "IOMMU-14 IOVA ranges, reserved, lazy queue", scen_iova_space, 6 },
	{ "IOMMU-14 nested, PASID, ATS, DMA", scen_nested_ats, 6 },
	{ "IOMMU-14 memobj register", scen_memobj, 1 },
};

static void test_failnth(void **state)
{
	const struct failnth_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo;
	struct iommu_stats base, now;
	int fd = memfd_create("failnth", MFD_CLOEXEC);
	unsigned int nth;

	assert_int_equal(ftruncate(fd, (2ll << 30)), 0);
	assert_int_equal(iommu_memobj_register_fd(mmu, fd, 0, 2ull << 30, &mo), 0);
	close(fd);
	iommu_get_stats(mmu, &base);
	for (nth = 1; nth < 1000; nth++) {
		int ret;

		iommu_fail_nth(mmu, nth);
		ret = c->scen(mmu, mo);
		iommu_fail_nth(mmu, 0);
		iommu_get_stats(mmu, &now);
		assert_int_equal(now.allocs_live, base.allocs_live);
		assert_int_equal(now.pt_pages, base.pt_pages);
		assert_int_equal(iommu_memobj_map_count(mo), 0);
		if (!ret)
			break;
		assert_int_equal(ret, -ENOMEM);
	}
	assert_true(nth > c->min_allocs);
	assert_int_equal(c->scen(mmu, mo), 0);
	iommu_destroy(mmu);
}

int main(void)
{
	struct CMUnitTest tests[8];
	size_t n = 0;

	T_CASES(tests, n, failnth_cases, test_failnth);
	return _cmocka_run_group_tests("iommu_failnth", tests, n, NULL, NULL);
}
