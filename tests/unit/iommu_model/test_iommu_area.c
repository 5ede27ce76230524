// SPDX-License-Identifier: MIT
/* IOVA space and tables: IOMMU-02 area semantics, IOMMU-03 IOVA allocation, IOMMU-04 all
 * alignments with memobj references, IOMMU-05 byte-granular DMA across pages, IOMMU-06 the
 * page-table loop over aperture widths and leaf sizes. */
#include <errno.h>
#include <stdlib.h>

#include "iommu_test.h"

/* ---- IOMMU-02: area semantics ------------------------------------------------------- */

enum area_op { OP_UNMAP, OP_MAP };

static const struct area_case {
	const char *name;
	unsigned int nmaps;
	struct { uint64_t pg, npg; } maps[4];
	enum area_op op;
	uint64_t op_pg, op_npg;		/* op_npg UINT64_MAX: unmap all */
	int want;
	uint64_t want_bytes;		/* unmapped bytes */
	unsigned int want_areas_left;	/* pages still translatable among the maps */
} area_cases[] = {
	{ "IOMMU-02 unmap nothing", 0, { { 0, 0 } }, OP_UNMAP, 256, 1, -ENOENT, 0, 0 },
	{ "IOMMU-02 map+unmap 10 pages", 1, { { 256, 10 } }, OP_UNMAP, 256, 10, 0, 10 * PG, 0 },
	{ "IOMMU-02 split unmap refused", 1, { { 256, 2 } }, OP_UNMAP, 256, 1, -ENOENT, 0, 2 },
	{ "IOMMU-02 split unmap tail refused", 1, { { 256, 2 } }, OP_UNMAP, 257, 1, -ENOENT, 0, 2 },
	{ "IOMMU-02 overlap same", 1, { { 16, 16 } }, OP_MAP, 16, 16, -EEXIST, 0, 16 },
	{ "IOMMU-02 overlap head", 1, { { 16, 16 } }, OP_MAP, 8, 16, -EEXIST, 0, 16 },
	{ "IOMMU-02 overlap tail", 1, { { 16, 16 } }, OP_MAP, 24, 16, -EEXIST, 0, 16 },
	{ "IOMMU-02 overlap inside", 1, { { 16, 16 } }, OP_MAP, 20, 2, -EEXIST, 0, 16 },
	{ "IOMMU-02 overlap covering", 1, { { 16, 16 } }, OP_MAP, 8, 32, -EEXIST, 0, 16 },
	{ "IOMMU-02 adjacent map ok", 1, { { 16, 16 } }, OP_MAP, 32, 16, 0, 0, 32 },
	{ "IOMMU-02 unmap all", 2, { { 16, 4 }, { 64, 4 } }, OP_UNMAP, 0, UINT64_MAX, 0, 8 * PG, 0 },
	{ "IOMMU-02 unmap all empty", 0, { { 0, 0 } }, OP_UNMAP, 0, UINT64_MAX, 0, 0, 0 },
	{ "IOMMU-02 fully contained areas", 4,
	  { { 16, 8 }, { 32, 8 }, { 48, 8 }, { 64, 8 } }, OP_UNMAP, 8, 72, 0, 32 * PG, 0 },
	{ "IOMMU-02 partly covered area", 4,
	  { { 16, 8 }, { 32, 8 }, { 48, 8 }, { 64, 8 } }, OP_UNMAP, 8, 60, -ENOENT, 0, 32 },
	{ "IOMMU-02 unaligned unmap", 1, { { 16, 8 } }, OP_UNMAP, 16, 0, -EINVAL, 0, 8 },
};

/* Pages among the first 320 that still translate. */
static unsigned int count_mapped_pages(struct iommu_domain *d)
{
	unsigned int n = 0;

	for (uint64_t p = 0; p < 320; p++) {
		struct iommu_xlate x;

		if (!iommu_translate(d, p * PG, 1, IOMMU_READ, &x))
			n++;
	}
	return n;
}

static void test_area(void **state)
{
	const struct area_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 128 * PG, 0);
	struct iommu_domain *d = t_paging(mmu, 0);
	uint64_t bytes = 12345, iova, len;
	int ret;

	for (unsigned int m = 0; m < c->nmaps; m++)
		t_map_fixed(d, mo, 0, c->maps[m].npg * PG, IOMMU_READ, c->maps[m].pg * PG);
	if (c->op == OP_MAP) {
		iova = c->op_pg * PG;
		ret = iommu_map(d, mo, 0, c->op_npg * PG, IOMMU_READ, IOMMU_MAP_FIXED_IOVA, &iova);
	} else {
		len = c->op_npg == UINT64_MAX ? UINT64_MAX : c->op_npg * PG;
		iova = c->op_npg == UINT64_MAX ? 0 : c->op_pg * PG + (c->op_npg ? 0 : 1);
		ret = iommu_unmap(d, iova, len ? len : PG, &bytes);
		if (!ret || ret == -ENOENT)
			assert_int_equal(bytes, c->want_bytes);
	}
	assert_int_equal(ret, c->want);
	assert_int_equal(count_mapped_pages(d), c->want_areas_left);
	/* Unmapping everything twice works and leaves nothing. */
	assert_int_equal(iommu_unmap(d, 0, UINT64_MAX, NULL), 0);
	assert_int_equal(iommu_unmap(d, 0, UINT64_MAX, &bytes), 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(iommu_memobj_map_count(mo), 0);
	assert_int_equal(iommu_domain_free(d), 0);
	assert_int_equal(iommu_memobj_unregister(mo), 0);
	iommu_destroy(mmu);
}

/* ---- IOMMU-03: IOVA allocation ---------------------------------------------------------- */

static void test_auto_iova_natural_alignment(void **state)
{
	static const uint64_t lens[] = { PG, 2 * PG, 3 * PG, 4 * PG, 16 * PG, 2 << 20,
					 (2 << 20) + PG, 8 << 20 };
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 16 << 20, 0);
	struct iommu_domain *d = t_paging(mmu, 0);

	(void)state;
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < VGPU_ARRAY_SIZE(lens); i++) {
			uint64_t iova = 0, low = lens[i] & -lens[i];
			struct iommu_xlate x;

			assert_int_equal(iommu_map(d, mo, 0, lens[i], IOMMU_READ, 0, &iova), 0);
			assert_int_equal(iova % low, 0);
			assert_int_equal(iommu_translate(d, iova + lens[i] - 1, 1, IOMMU_READ, &x), 0);
			assert_int_equal(x.offset, lens[i] - 1);
		}
	/* 2 MiB-aligned IOVA and offset: one 2 MiB leaf. */
	{
		uint64_t iova;
		struct iommu_xlate x;

		assert_int_equal(iommu_map(d, mo, 2 << 20, 2 << 20, IOMMU_READ, 0, &iova), 0);
		assert_int_equal(iommu_translate(d, iova, 1, IOMMU_READ, &x), 0);
		assert_int_equal(x.page_size, IOMMU_PAGE_2M);
	}
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

static const struct iova_case {
	const char *name;
	struct iommu_iova_range allowed;	/* last == 0: none */
	struct iommu_iova_range reserved;	/* last == 0: none */
	uint64_t len;
	unsigned int nmaps;			/* maps attempted */
	unsigned int want_ok;			/* of which succeed, the rest -ENOSPC */
	uint64_t lo, hi;			/* every IOVA in [lo, hi) */
} iova_cases[] = {
	{ "IOMMU-03 avoid reserved", { 0, 0 }, { 0, (1ull << 30) - 1 }, PG, 8, 8,
	  1ull << 30, 1ull << 48 },
	{ "IOMMU-03 allowed clamp", { 16 << 20, (32 << 20) - 1 }, { 0, 0 }, 1 << 20, 17, 16,
	  16 << 20, 32 << 20 },
	{ "IOMMU-03 reserved overflow", { 0, 0 }, { PG, (1ull << 48) - 1 }, 2 * PG, 1, 0, 0, 0 },
	{ "IOMMU-03 reserved overflow fits one page", { 0, 0 }, { PG, (1ull << 48) - 1 }, PG, 2, 1,
	  0, PG },
};

static void test_iova(void **state)
{
	const struct iova_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 1 << 20, 0);
	struct iommu_domain *d = t_paging(mmu, 0);
	unsigned int ok = 0;

	if (c->allowed.last)
		assert_int_equal(iommu_allow_iovas(d, &c->allowed, 1), 0);
	if (c->reserved.last)
		assert_int_equal(iommu_reserve_iova(d, c->reserved.start, c->reserved.last), 0);
	for (unsigned int i = 0; i < c->nmaps; i++) {
		uint64_t iova = 0;
		int ret = iommu_map(d, mo, 0, c->len, IOMMU_READ, 0, &iova);

		if (ret == 0) {
			ok++;
			assert_true(iova >= c->lo && iova + c->len <= c->hi);
		} else {
			assert_int_equal(ret, -ENOSPC);
		}
	}
	assert_int_equal(ok, c->want_ok);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

static void test_allowed_reserved_conflict(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_domain *d = t_paging(mmu, 0);
	struct iommu_iova_range a = { 1 << 20, (2 << 20) - 1 }, bad = { 5, 4 };

	(void)state;
	/* Reserved first, then an allowed range over it; and the other order. */
	assert_int_equal(iommu_reserve_iova(d, 1 << 20, (1 << 20) + PG - 1), 0);
	assert_int_equal(iommu_allow_iovas(d, &a, 1), -EADDRINUSE);
	assert_int_equal(iommu_domain_free(d), 0);
	d = t_paging(mmu, 0);
	assert_int_equal(iommu_allow_iovas(d, &a, 1), 0);
	assert_int_equal(iommu_reserve_iova(d, (2 << 20) - PG, (3 << 20)), -EADDRINUSE);
	assert_int_equal(iommu_allow_iovas(d, &bad, 1), -EINVAL);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

static void test_iova_ranges_emsgsize(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_domain *d = t_paging(mmu, 0);
	struct iommu_iova_range r[4];
	uint32_t num = 1;

	(void)state;
	assert_int_equal(iommu_iova_ranges(d, r, &num), 0);
	assert_int_equal(num, 1);
	assert_int_equal(r[0].start, 0);
	assert_int_equal(r[0].last, (1ull << 48) - 1);
	/* A reserved hole splits the space in two. */
	assert_int_equal(iommu_reserve_iova(d, 1 << 20, (2 << 20) - 1), 0);
	num = 1;
	assert_int_equal(iommu_iova_ranges(d, r, &num), -EMSGSIZE);
	assert_int_equal(num, 2);
	num = 4;
	assert_int_equal(iommu_iova_ranges(d, r, &num), 0);
	assert_int_equal(num, 2);
	assert_int_equal(r[0].last, (1 << 20) - 1);
	assert_int_equal(r[1].start, 2 << 20);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

static const struct maperr_case {
	const char *name;
	uint64_t off, len, iova;
	unsigned int prot, flags;
	int want;
} maperr_cases[] = {
	{ "IOMMU-03 zero length", 0, 0, 0, IOMMU_READ, 0, -EINVAL },
	{ "IOMMU-03 short length", 0, 100, 0, IOMMU_READ, 0, -EINVAL },
	{ "IOMMU-03 unaligned offset", 1, PG, 0, IOMMU_READ, 0, -EINVAL },
	{ "IOMMU-03 past memobj", 0, 2 << 20, 0, IOMMU_READ, 0, -EINVAL },
	{ "IOMMU-03 no prot", 0, PG, 0, 0, 0, -EINVAL },
	{ "IOMMU-03 unknown prot", 0, PG, 0, 0x10, 0, -EINVAL },
	{ "IOMMU-03 unknown flag", 0, PG, 0, IOMMU_READ, 0x80, -EINVAL },
	{ "IOMMU-03 unaligned fixed iova", 0, PG, 12, IOMMU_READ, IOMMU_MAP_FIXED_IOVA, -EINVAL },
	{ "IOMMU-03 beyond aperture", 0, PG, 1ull << 48, IOMMU_READ, IOMMU_MAP_FIXED_IOVA, -ERANGE },
	{ "IOMMU-03 fixed on reserved", 0, PG, 0, IOMMU_READ, IOMMU_MAP_FIXED_IOVA, -EADDRINUSE },
};

static void test_map_errors(void **state)
{
	const struct maperr_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 1 << 20, 0);
	struct iommu_domain *d = t_paging(mmu, 0);
	uint64_t iova = c->iova;
	struct iommu_stats st0, st1;

	assert_int_equal(iommu_reserve_iova(d, 0, PG - 1), 0);
	iommu_get_stats(mmu, &st0);
	assert_int_equal(iommu_map(d, mo, c->off, c->len, c->prot, c->flags, &iova), c->want);
	/* Refused requests change nothing. */
	iommu_get_stats(mmu, &st1);
	assert_int_equal(st0.allocs_live, st1.allocs_live);
	assert_int_equal(iommu_memobj_map_count(mo), 0);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

/* ---- IOMMU-04: all alignments, with memobj references -------------------------------- */

static void test_all_aligns(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 8 * PG, 0x40);
	struct iommu_domain *d = t_paging(mmu, 0), *d2 = t_paging(mmu, 0);
	const uint8_t *base = iommu_memobj_base(mo);

	(void)state;
	for (unsigned int s = 0; s < 8; s++)
		for (unsigned int e = s + 1; e <= 8; e++) {
			uint64_t iova, iova2, unmapped;

			assert_int_equal(iommu_map(d, mo, s * PG, (e - s) * PG, IOMMU_READ, 0, &iova), 0);
			assert_int_equal(iommu_memobj_map_count(mo), 1);
			/* A second domain over the same pages while the first exists. */
			assert_int_equal(iommu_map(d2, mo, s * PG, (e - s) * PG, IOMMU_READ, 0,
						   &iova2), 0);
			assert_int_equal(iommu_memobj_map_count(mo), 2);
			assert_int_equal(iommu_memobj_unregister(mo), -EBUSY);
			for (unsigned int p = s; p < e; p++) {
				struct iommu_xlate x;

				assert_int_equal(iommu_translate(d, iova + (p - s) * PG + 7, 1,
								 IOMMU_READ, &x), 0);
				assert_ptr_equal(x.host, base + p * PG + 7);
				assert_int_equal(*(uint8_t *)x.host, 0x40 + p);
				assert_int_equal(iommu_translate(d2, iova2 + (p - s) * PG, 1,
								 IOMMU_READ, &x), 0);
				assert_ptr_equal(x.host, base + p * PG);
			}
			assert_int_equal(iommu_unmap(d2, iova2, (e - s) * PG, &unmapped), 0);
			assert_int_equal(iommu_unmap(d, iova, (e - s) * PG, &unmapped), 0);
			assert_int_equal(unmapped, (e - s) * PG);
			assert_int_equal(iommu_memobj_map_count(mo), 0);
		}
	assert_int_equal(iommu_domain_free(d), 0);
	assert_int_equal(iommu_domain_free(d2), 0);
	assert_int_equal(iommu_memobj_unregister(mo), 0);
	iommu_destroy(mmu);
}

/* ---- IOMMU-05: byte-granular DMA across page boundaries --------------------------------- */

static void test_access_rw(void **state)
{
	const bool ats = *state != NULL;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 16 * PG, 0);
	struct iommu_domain *d = t_paging(mmu, 0);
	uint8_t *base = iommu_memobj_base(mo), buf[64], back[64];
	/* Pages in scattered order so that contiguous IOVA is not contiguous memory. */
	static const unsigned int order[4] = { 3, 0, 2, 1 };
	const uint64_t iova0 = 1 << 20;

	for (unsigned int i = 0; i < 4; i++)
		t_map_fixed(d, mo, order[i] * PG, PG, IOMMU_READ | IOMMU_WRITE, iova0 + i * PG);
	assert_int_equal(iommu_attach(mmu, 3, d), 0);
	if (ats)
		assert_int_equal(iommu_ats_enable(mmu, 3, 0), 0);
	for (unsigned int len = 1; len < 64; len++)
		for (int delta = -50; delta <= 50; delta += 7) {
			uint64_t iova = iova0 + PG + (uint64_t)((int64_t)PG + delta) - PG;

			iova += PG;	/* around the boundary between pages 1 and 2 */
			for (unsigned int k = 0; k < len; k++)
				buf[k] = (uint8_t)(len * 31 + k + (unsigned int)delta);
			assert_int_equal(iommu_dma_write(mmu, 3, iova, buf, len), 0);
			memset(back, 0, sizeof(back));
			assert_int_equal(iommu_dma_read(mmu, 3, iova, back, len), 0);
			assert_memory_equal(buf, back, len);
			/* Each byte landed in the memory its page maps. */
			for (unsigned int k = 0; k < len; k++) {
				uint64_t o = iova + k - iova0;

				assert_int_equal(base[order[o / PG] * PG + o % PG], buf[k]);
			}
		}
	/* A read that runs off the mapped window fails at the first unmapped page, after
	 * copying what was mapped. */
	memset(back, 0, sizeof(back));
	assert_int_equal(iommu_dma_read(mmu, 3, iova0 + 4 * PG - 8, back, 16), -EFAULT);
	assert_memory_equal(back, base + order[3] * PG + PG - 8, 8);
	assert_int_equal(iommu_detach(mmu, 3), 0);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

/* ---- IOMMU-06: page-table loop ------------------------------------------------------------ */

static const struct pt_case {
	const char *name;
	unsigned int bits;
} pt_cases[] = {
	{ "IOMMU-06 IAS 32", 32 }, { "IOMMU-06 IAS 36", 36 }, { "IOMMU-06 IAS 40", 40 },
	{ "IOMMU-06 IAS 42", 42 }, { "IOMMU-06 IAS 44", 44 }, { "IOMMU-06 IAS 48", 48 },
};

static void test_pgtable(void **state)
{
	const struct pt_case *c = *state;
	static const uint64_t sizes[3] = { PG, IOMMU_PAGE_2M, IOMMU_PAGE_1G };
	struct iommu *mmu = t_iommu();
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING, .iova_bits = c->bits };
	struct iommu_domain *d;
	struct iommu_memobj *mo;
	struct iommu_xlate x;
	uint64_t top = (1ull << c->bits) - IOMMU_PAGE_1G, iova, bytes;
	int fd = memfd_create("pt", MFD_CLOEXEC);

	/* Sparse 2 GiB memfd: never touched, so it costs nothing. */
	assert_int_equal(ftruncate(fd, 2ll << 30), 0);
	assert_int_equal(iommu_memobj_register_fd(mmu, fd, 0, 2ull << 30, &mo), 0);
	close(fd);
	assert_int_equal(iommu_domain_alloc(mmu, &o, &d), 0);
	/* Empty table translates nothing. */
	for (uint64_t a = 42; a < 3 * IOMMU_PAGE_1G; a += IOMMU_PAGE_1G)
		assert_int_equal(iommu_translate(d, a, 1, IOMMU_READ, &x), -EFAULT);
	for (int pass = 0; pass < 2; pass++) {
		unsigned int prot = pass ? IOMMU_READ | IOMMU_WRITE : IOMMU_READ;

		for (unsigned int i = 0; i < 3; i++) {
			iova = i * IOMMU_PAGE_1G;
			t_map_fixed(d, mo, IOMMU_PAGE_1G, sizes[i], prot, iova);
			/* Overlapping map must fail. */
			assert_int_equal(iommu_map(d, mo, 0, sizes[i], prot, IOMMU_MAP_FIXED_IOVA,
						   &iova), -EEXIST);
			assert_int_equal(iommu_translate(d, iova + 42, 1, IOMMU_READ, &x), 0);
			assert_int_equal(x.offset, IOMMU_PAGE_1G + 42);
			assert_int_equal(x.page_size, sizes[i]);
			assert_int_equal(iommu_translate(d, iova + 42, 1, IOMMU_WRITE, &x),
					 pass ? 0 : -EACCES);
		}
		for (unsigned int i = 0; i < 3; i++) {
			assert_int_equal(iommu_unmap(d, i * IOMMU_PAGE_1G, sizes[i], &bytes), 0);
			assert_int_equal(bytes, sizes[i]);
			assert_int_equal(iommu_translate(d, i * IOMMU_PAGE_1G + 42, 1, IOMMU_READ, &x),
					 -EFAULT);
		}
	}
	/* The largest page at the very top of the input address space. */
	t_map_fixed(d, mo, 0, IOMMU_PAGE_1G, IOMMU_READ, top);
	assert_int_equal(iommu_translate(d, top + IOMMU_PAGE_1G - 1, 1, IOMMU_READ, &x), 0);
	assert_int_equal(x.page_size, IOMMU_PAGE_1G);
	assert_int_equal(x.offset, IOMMU_PAGE_1G - 1);
	assert_int_equal(iommu_unmap(d, top, IOMMU_PAGE_1G, &bytes), 0);
	iova = top + IOMMU_PAGE_1G;
	assert_int_equal(iommu_map(d, mo, 0, PG, IOMMU_READ, IOMMU_MAP_FIXED_IOVA, &iova),
			 -ERANGE);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

int main(void)
{
	struct CMUnitTest tests[64];
	size_t n = 0;

	T_CASES(tests, n, area_cases, test_area);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_auto_iova_natural_alignment);
	T_CASES(tests, n, iova_cases, test_iova);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_allowed_reserved_conflict);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_iova_ranges_emsgsize);
	T_CASES(tests, n, maperr_cases, test_map_errors);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_all_aligns);
	tests[n++] = (struct CMUnitTest){ "IOMMU-05 access rw (IOTLB path)", test_access_rw, NULL,
					  NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-05 access rw (ATC path)", test_access_rw, NULL,
					  NULL, (void *)1 };
	T_CASES(tests, n, pt_cases, test_pgtable);
	return _cmocka_run_group_tests("iommu_area", tests, n, NULL, NULL);
}
