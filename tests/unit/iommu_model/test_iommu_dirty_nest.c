// SPDX-License-Identifier: MIT
/* Dirty tracking (IOMMU-11), nesting with stage-2 bounds (IOMMU-12), PASID attach /
 * replace / detach (IOMMU-13) and SVA domains. */
#include <errno.h>
#include <stdlib.h>

#include "iommu_test.h"

#define RID 4

static struct iommu_memobj *sparse_memobj(struct iommu *mmu, uint64_t size)
{
	struct iommu_memobj *mo;
	int fd = memfd_create("sparse", MFD_CLOEXEC);

	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(iommu_memobj_register_fd(mmu, fd, 0, size, &mo), 0);
	close(fd);
	return mo;
}

/* ---- IOMMU-11: dirty tracking ----------------------------------------------------------- */

static const struct dirty_case {
	const char *name;
	uint64_t size;
	bool huge;		/* 2 MiB leaves */
	bool no_clear;
} dirty_cases[] = {
	{ "IOMMU-11 8K", 8 << 10, false, false },
	{ "IOMMU-11 16K", 16 << 10, false, false },
	{ "IOMMU-11 64K", 64 << 10, false, false },
	{ "IOMMU-11 128K", 128 << 10, false, false },
	{ "IOMMU-11 320K", 320 << 10, false, false },
	{ "IOMMU-11 64M", 64 << 20, false, false },
	{ "IOMMU-11 64M huge", 64 << 20, true, false },
	{ "IOMMU-11 128M", 128 << 20, false, false },
	{ "IOMMU-11 128M huge", 128 << 20, true, false },
	{ "IOMMU-11 128K no-clear", 128 << 10, false, true },
	{ "IOMMU-11 64M huge no-clear", 64 << 20, true, true },
};

/* Which 4K pages the test writes: every third page. */
static bool dirty_written(uint64_t page)
{
	return page % 3 == 0;
}

static void test_dirty(void **state)
{
	const struct dirty_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = sparse_memobj(mmu, c->size);
	struct iommu_domain *d = t_paging(mmu, 0);
	/* Not 2 MiB aligned unless huge: forces 4 KiB leaves. */
	const uint64_t iova = (1ull << 32) + (c->huge ? 0 : PG);
	const uint64_t pages = c->size / PG, bytes = pages / 8 + 2;
	uint8_t *raw = calloc(1, bytes + 1), *bm = raw + 1;	/* unaligned bitmap */
	const uint8_t one = 1;

	t_map_fixed(d, mo, 0, c->size, IOMMU_READ | IOMMU_WRITE, iova);
	assert_int_equal(iommu_attach(mmu, RID, d), 0);
	/* Writes before tracking starts are not recorded. */
	assert_int_equal(iommu_dma_write(mmu, RID, iova + PG, &one, 1), 0);
	assert_int_equal(iommu_set_dirty_tracking(d, true), 0);
	for (uint64_t p = 0; p < pages; p++)
		if (dirty_written(p))
			assert_int_equal(iommu_dma_write(mmu, RID, iova + p * PG + 17, &one, 1), 0);
	for (int round = 0; round < 2; round++) {
		memset(bm, 0xa5, bytes);
		assert_int_equal(iommu_read_dirty(d, iova, c->size, PG, bm,
						  c->no_clear ? IOMMU_DIRTY_NO_CLEAR : 0), 0);
		for (uint64_t p = 0; p < pages; p++) {
			/* A dirty 2 MiB leaf reports all of its pages. */
			uint64_t first = c->huge ? p / 512 * 512 : p;
			bool want = false;

			for (uint64_t q = first; q < (c->huge ? first + 512 : p + 1); q++)
				want |= dirty_written(q);
			if (round == 1 && !c->no_clear)
				want = false;
			assert_int_equal((bm[p / 8] >> (p % 8)) & 1, want);
		}
		/* Bits past the range are left alone. */
		if (pages % 8)
			assert_int_equal(bm[pages / 8] >> (pages % 8), 0xa5 >> (pages % 8));
	}
	/* Disabled: writes leave no trace. */
	assert_int_equal(iommu_set_dirty_tracking(d, false), 0);
	assert_int_equal(iommu_read_dirty(d, iova, c->size, PG, bm, 0), 0);
	assert_int_equal(iommu_dma_write(mmu, RID, iova, &one, 1), 0);
	assert_int_equal(iommu_read_dirty(d, iova, c->size, PG, bm, 0), 0);
	assert_int_equal(bm[0] & 1, 0);
	free(raw);
	iommu_destroy(mmu);
}

static void test_dirty_errors(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = sparse_memobj(mmu, 4 << 20);
	struct iommu_domain *d = t_paging(mmu, 0), *nd = t_paging(mmu, IOMMU_DOMAIN_NO_DIRTY);
	uint8_t bm[64];
	const uint8_t one = 1;

	(void)state;
	assert_int_equal(iommu_set_dirty_tracking(nd, true), -EOPNOTSUPP);
	assert_int_equal(iommu_read_dirty(nd, 0, PG, PG, bm, 0), -EOPNOTSUPP);
	assert_int_equal(iommu_read_dirty(d, 0, PG, 3000, bm, 0), -EINVAL);
	assert_int_equal(iommu_read_dirty(d, 100, PG, PG, bm, 0), -EINVAL);
	assert_int_equal(iommu_read_dirty(d, 0, 0, PG, bm, 0), -EINVAL);
	assert_int_equal(iommu_read_dirty(d, 0, PG, PG, bm, 4), -EINVAL);
	/* A read over half of a dirty 2 MiB leaf reports it and leaves it dirty. */
	t_map_fixed(d, mo, 0, 2 << 20, IOMMU_READ | IOMMU_WRITE, 2 << 20);
	assert_int_equal(iommu_attach(mmu, RID, d), 0);
	assert_int_equal(iommu_set_dirty_tracking(d, true), 0);
	assert_int_equal(iommu_dma_write(mmu, RID, 2 << 20, &one, 1), 0);
	assert_int_equal(iommu_read_dirty(d, 2 << 20, 1 << 20, 1 << 20, bm, 0), 0);
	assert_int_equal(bm[0] & 1, 1);
	assert_int_equal(iommu_read_dirty(d, 2 << 20, 2 << 20, 1 << 20, bm, 0), 0);
	assert_int_equal(bm[0] & 3, 3);
	assert_int_equal(iommu_read_dirty(d, 2 << 20, 2 << 20, 1 << 20, bm, 0), 0);
	assert_int_equal(bm[0] & 3, 0);
	iommu_destroy(mmu);
}

/* ---- IOMMU-12: nesting ----------------------------------------------------------------- */

#define IPA0 (1ull << 30)

struct vf {
	struct iommu_memobj *mo;
	struct iommu_domain *s2, *s1;
	struct t_s1 tbl;
};

/* A VF: 64 pages of memory at IPA0 in its own stage-2, stage-1 root at IPA0. */
static void vf_setup(struct iommu *mmu, struct vf *v, unsigned int fill)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_NESTED, .s1_root = IPA0 };

	v->mo = t_memobj(mmu, 64 * PG, fill);
	v->s2 = t_paging(mmu, IOMMU_DOMAIN_NEST_PARENT);
	t_map_fixed(v->s2, v->mo, 0, 64 * PG, IOMMU_READ | IOMMU_WRITE, IPA0);
	t_s1_init(&v->tbl, iommu_memobj_base(v->mo), IPA0, IPA0);
	o.parent = v->s2;
	assert_int_equal(iommu_domain_alloc(mmu, &o, &v->s1), 0);
}

static void test_nest_basic(void **state)
{
	struct iommu *mmu = t_iommu();
	struct vf v;
	struct iommu_xlate x;
	struct iommu_domain *bad;
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_NESTED };
	uint8_t b;
	uint64_t iova = 0;

	(void)state;
	vf_setup(mmu, &v, 0x80);
	t_s1_map(&v.tbl, 1ull << 40, IPA0 + 32 * PG, PG, IOMMU_READ);
	t_s1_map(&v.tbl, (1ull << 40) + PG, IPA0 + 33 * PG, PG, IOMMU_READ | IOMMU_WRITE);
	assert_int_equal(iommu_attach(mmu, RID, v.s1), 0);
	assert_int_equal(iommu_dma_read(mmu, RID, (1ull << 40) + 5, &b, 1), 0);
	assert_int_equal(b, 0x80 + 32);
	/* Stage-1 read-only: write refused. */
	assert_int_equal(iommu_dma_write(mmu, RID, 1ull << 40, &b, 1), -EACCES);
	assert_int_equal(iommu_dma_write(mmu, RID, (1ull << 40) + PG, &b, 1), 0);
	/* Dirty tracking on the stage-2 sees writes made through stage-1, on a walk and on
	 * IOTLB hits alike. */
	assert_int_equal(iommu_set_dirty_tracking(v.s2, true), 0);
	for (int round = 0; round < 3; round++) {
		uint8_t bm[8] = { 0 };

		assert_int_equal(iommu_dma_write(mmu, RID, (1ull << 40) + PG + round, &b, 1), 0);
		assert_int_equal(iommu_read_dirty(v.s2, IPA0, 64 * PG, PG, bm, 0), 0);
		assert_int_equal(bm[33 / 8], 1 << (33 % 8));	/* only data page 33 */
		for (int k = 0; k < 8; k++)
			if (k != 33 / 8)
				assert_int_equal(bm[k], 0);
	}
	/* Host-side rules: nested tables are the function's, parent stays busy. */
	assert_int_equal(iommu_map(v.s1, v.mo, 0, PG, IOMMU_READ, 0, &iova), -EINVAL);
	o.parent = v.s1;
	assert_int_equal(iommu_domain_alloc(mmu, &o, &bad), -EINVAL);	/* nested on nested */
	o.parent = t_paging(mmu, 0);
	assert_int_equal(iommu_domain_alloc(mmu, &o, &bad), -EINVAL);	/* not NEST_PARENT */
	assert_int_equal(iommu_domain_free(v.s2), -EBUSY);
	/* A stage-2 unmap reaches the cached stage-1 result. */
	assert_int_equal(iommu_translate(v.s1, 1ull << 40, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_unmap(v.s2, IPA0, 64 * PG, NULL), 0);
	assert_int_equal(iommu_translate(v.s1, 1ull << 40, 1, IOMMU_READ, &x), -EFAULT);
	assert_int_equal(iommu_detach(mmu, RID), 0);
	assert_int_equal(iommu_domain_free(v.s1), 0);
	assert_int_equal(iommu_domain_free(v.s2), 0);
	iommu_destroy(mmu);
}

static const struct s1_case {
	const char *name;
	uint64_t s1_size;	/* stage-1 leaf */
	bool s2_huge;		/* stage-2 2 MiB leaf */
	uint64_t want_page;
} s1_cases[] = {
	{ "IOMMU-12 4K over 4K", PG, false, PG },
	{ "IOMMU-12 2M over 4K", IOMMU_PAGE_2M, false, PG },
	{ "IOMMU-12 4K over 2M", PG, true, PG },
	{ "IOMMU-12 2M over 2M", IOMMU_PAGE_2M, true, IOMMU_PAGE_2M },
};

static void test_nest_sizes(void **state)
{
	const struct s1_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 4 << 20, 1);
	struct iommu_domain *s2 = t_paging(mmu, IOMMU_DOMAIN_NEST_PARENT), *s1;
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_NESTED, .parent = s2,
				       .s1_root = 4ull << 20 };
	struct t_s1 tbl;
	struct iommu_xlate x;

	/* Tables in the first 2 MiB (4K leaves); data 2 MiB at IPA 4M+2M. */
	t_map_fixed(s2, mo, 0, 2 << 20, IOMMU_READ | IOMMU_WRITE, 4 << 20);
	if (c->s2_huge) {
		t_map_fixed(s2, mo, 2 << 20, 2 << 20, IOMMU_READ | IOMMU_WRITE, 6 << 20);
	} else {
		uint64_t iova = 6 << 20;

		/* Two maps so no 2 MiB leaf can be used. */
		t_map_fixed(s2, mo, 2 << 20, 1 << 20, IOMMU_READ | IOMMU_WRITE, iova);
		t_map_fixed(s2, mo, 3 << 20, 1 << 20, IOMMU_READ | IOMMU_WRITE, iova + (1 << 20));
	}
	t_s1_init(&tbl, iommu_memobj_base(mo), 4 << 20, 4 << 20);
	t_s1_map(&tbl, 1ull << 39, 6 << 20, c->s1_size, IOMMU_READ);
	assert_int_equal(iommu_domain_alloc(mmu, &o, &s1), 0);
	for (int i = 0; i < 2; i++) {	/* walk, then IOTLB hit */
		uint64_t in = c->s1_size == PG ? 9 : PG + 9;

		assert_int_equal(iommu_translate(s1, (1ull << 39) + in, 1, IOMMU_READ, &x), 0);
		assert_int_equal(x.page_size, c->want_page);
		assert_int_equal(x.offset, (2 << 20) + in);
		assert_ptr_equal(iommu_memobj_base(mo), (uint8_t *)x.host - x.offset);
	}
	iommu_destroy(mmu);
}

static const struct bad_s1_case {
	const char *name;
	uint64_t pte;		/* written as the level-3 entry for iova 0 */
	unsigned int reason;
} bad_s1_cases[] = {
	{ "IOMMU-12 table outside stage-2", (1ull << 45) | VGPU_IOPTE_R, IOMMU_FAULT_STAGE1 },
	{ "IOMMU-12 reserved bits set", (IPA0 + PG) | VGPU_IOPTE_R | (1ull << 60),
	  IOMMU_FAULT_STAGE1 },
	{ "IOMMU-12 PS at level 3", IPA0 | VGPU_IOPTE_R | VGPU_IOPTE_PS, IOMMU_FAULT_STAGE1 },
	{ "IOMMU-12 not present", IPA0 + PG, IOMMU_FAULT_UNMAPPED },
};

static void test_nest_bad_s1(void **state)
{
	const struct bad_s1_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct vf v;
	uint8_t b;
	unsigned int reason = 0;

	vf_setup(mmu, &v, 0);
	*t_s1_pte(&v.tbl, IPA0, 0) = c->pte;
	assert_int_equal(iommu_attach(mmu, RID, v.s1), 0);
	assert_int_equal(iommu_dma_read(mmu, RID, 0x1000, &b, 1), -EFAULT);
	assert_int_equal(t_faults(mmu, RID, &reason), 1);
	assert_int_equal(reason, c->reason);
	iommu_destroy(mmu);
}

/* A VF whose stage-2 maps pages 0-31 read-write (its tables), pages 32-47 read-only and
 * leaves pages 48-63 unmapped; stage-1 maps S1_RO_IOVA to page 32 and S1_HOLE_IOVA to page
 * 50, both read-write, so only stage-2 can refuse an access to them. */
#define S1_RO_IOVA	(1ull << 40)
#define S1_HOLE_IOVA	((1ull << 40) + PG)

static void vf_setup_s2_split(struct iommu *mmu, struct vf *v)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_NESTED, .s1_root = IPA0 };

	v->mo = t_memobj(mmu, 64 * PG, 0x40);
	v->s2 = t_paging(mmu, IOMMU_DOMAIN_NEST_PARENT);
	t_map_fixed(v->s2, v->mo, 0, 32 * PG, IOMMU_READ | IOMMU_WRITE, IPA0);
	t_map_fixed(v->s2, v->mo, 32 * PG, 16 * PG, IOMMU_READ, IPA0 + 32 * PG);
	t_s1_init(&v->tbl, iommu_memobj_base(v->mo), IPA0, IPA0);
	t_s1_map(&v->tbl, S1_RO_IOVA, IPA0 + 32 * PG, PG, IOMMU_READ | IOMMU_WRITE);
	t_s1_map(&v->tbl, S1_HOLE_IOVA, IPA0 + 50 * PG, PG, IOMMU_READ | IOMMU_WRITE);
	o.parent = v->s2;
	assert_int_equal(iommu_domain_alloc(mmu, &o, &v->s1), 0);
}

static const struct s2_perm_case {
	const char *name;
	bool read_first;	/* a read fills the IOTLB before the write */
	unsigned int extra;	/* IOMMU_NOCACHE: every access walks */
} s2_perm_cases[] = {
	{ "IOMMU-12 stage-2 read-only: write on a walk", false, 0 },
	{ "IOMMU-12 stage-2 read-only: write on an IOTLB hit", true, 0 },
	{ "IOMMU-12 stage-2 read-only: write uncached", true, IOMMU_NOCACHE },
};

/* Stage-1 grants write, stage-2 does not: the write faults with a permission fault, the
 * memory keeps its bytes, reads still work and report read-only. */
static void test_nest_s2_readonly(void **state)
{
	const struct s2_perm_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_xlate x;
	struct vf v;
	uint8_t b = 0, *page;
	const uint8_t w = 0xee;
	unsigned int reason = 0;

	vf_setup_s2_split(mmu, &v);
	page = (uint8_t *)iommu_memobj_base(v.mo) + 32 * PG;
	assert_int_equal(iommu_attach(mmu, RID, v.s1), 0);
	for (int round = 0; round < 2; round++) {
		if (c->read_first || round) {
			assert_int_equal(iommu_translate(v.s1, S1_RO_IOVA + 7, 1,
							 IOMMU_READ | c->extra, &x), 0);
			assert_int_equal(x.perm, IOMMU_READ);
			assert_int_equal(iommu_dma_read(mmu, RID, S1_RO_IOVA + 7, &b, 1), 0);
			assert_int_equal(b, 0x40 + 32);
		}
		assert_int_equal(iommu_translate(v.s1, S1_RO_IOVA + 7, 1,
						 IOMMU_WRITE | c->extra, &x), -EACCES);
		assert_int_equal(iommu_translate(v.s1, S1_RO_IOVA + 7, 1,
						 IOMMU_READ | IOMMU_WRITE | c->extra, &x), -EACCES);
		assert_int_equal(iommu_dma_write(mmu, RID, S1_RO_IOVA + 7, &w, 1), -EACCES);
		assert_int_equal(t_faults(mmu, RID, &reason), 1);
		assert_int_equal(reason, IOMMU_FAULT_PERM);
		assert_int_equal(page[7], 0x40 + 32);
	}
	/* Dirty tracking on the stage-2 sees no write either. */
	{
		uint8_t bm[8] = { 0 };

		assert_int_equal(iommu_set_dirty_tracking(v.s2, true), 0);
		assert_int_equal(iommu_dma_write(mmu, RID, S1_RO_IOVA, &w, 1), -EACCES);
		assert_int_equal(iommu_read_dirty(v.s2, IPA0, 48 * PG, PG, bm, 0), 0);
		for (int k = 0; k < 6; k++)
			assert_int_equal(bm[k], 0);
	}
	iommu_destroy(mmu);
}

/* Stage-1 points at an IPA that stage-2 does not map: every access faults as unmapped
 * (a stage-2 hole, not a malformed stage-1), on every try; once stage-2 maps the IPA the
 * same stage-1 entry works. */
static void test_nest_s2_unmapped(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_xlate x;
	struct vf v;
	uint8_t b = 0;
	const uint8_t w = 0xee;
	unsigned int reason = 0;

	(void)state;
	vf_setup_s2_split(mmu, &v);
	assert_int_equal(iommu_attach(mmu, RID, v.s1), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(iommu_translate(v.s1, S1_HOLE_IOVA, 1, IOMMU_READ, &x), -EFAULT);
		assert_int_equal(iommu_translate(v.s1, S1_HOLE_IOVA, 1,
						 IOMMU_READ | IOMMU_NOCACHE, &x), -EFAULT);
		assert_int_equal(iommu_dma_read(mmu, RID, S1_HOLE_IOVA + 3, &b, 1), -EFAULT);
		assert_int_equal(t_faults(mmu, RID, &reason), 1);
		assert_int_equal(reason, IOMMU_FAULT_UNMAPPED);
		assert_int_equal(iommu_dma_write(mmu, RID, S1_HOLE_IOVA + 3, &w, 1), -EFAULT);
		assert_int_equal(t_faults(mmu, RID, &reason), 1);
		assert_int_equal(reason, IOMMU_FAULT_UNMAPPED);
	}
	/* Its neighbour through the same stage-1 table still translates. */
	assert_int_equal(iommu_dma_read(mmu, RID, S1_RO_IOVA, &b, 1), 0);
	assert_int_equal(b, 0x40 + 32);
	t_map_fixed(v.s2, v.mo, 50 * PG, PG, IOMMU_READ | IOMMU_WRITE, IPA0 + 50 * PG);
	assert_int_equal(iommu_dma_write(mmu, RID, S1_HOLE_IOVA + 3, &w, 1), 0);
	assert_int_equal(iommu_dma_read(mmu, RID, S1_HOLE_IOVA + 3, &b, 1), 0);
	assert_int_equal(b, 0xee);
	assert_int_equal(((uint8_t *)iommu_memobj_base(v.mo))[50 * PG + 3], 0xee);
	iommu_destroy(mmu);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A hostile VF fills its table pages with arbitrary entries aimed at addresses where the
 * other VF's memory lives in *its* stage-2: every translation faults or lands in the
 * VF's own memory. */
static void test_nest_isolation(void **state)
{
	struct iommu *mmu = t_iommu();
	struct vf a, b;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	uint8_t *mem;
	unsigned int ok = 0;

	(void)state;
	vf_setup(mmu, &a, 0x11);
	vf_setup(mmu, &b, 0x22);
	/* VF b's memory also sits at IPA0.. in b's stage-2; a's stage-2 maps nothing past
	 * its own 64 pages, so aim a's entries at IPA0 + 64 pages and beyond too. */
	mem = iommu_memobj_base(a.mo);
	for (int round = 0; round < 20; round++) {
		for (uint64_t i = 0; i < 16 * 512; i++) {
			uint64_t target = IPA0 + (rnd(&seed) % 128) * PG;
			uint64_t pte = target | VGPU_IOPTE_R | (rnd(&seed) & VGPU_IOPTE_W) |
				       (rnd(&seed) % 8 ? 0 : VGPU_IOPTE_PS);

			if (rnd(&seed) % 16 == 0)
				pte = rnd(&seed);	/* pure garbage */
			__atomic_store_n((uint64_t *)mem + i, pte, __ATOMIC_RELAXED);
		}
		iommu_iotlb_flush_domain(a.s1);
		for (int k = 0; k < 500; k++) {
			struct iommu_xlate x;
			uint64_t iova = rnd(&seed) & ((1ull << 48) - 1);

			if (iommu_translate(a.s1, iova, 1, IOMMU_READ, &x))
				continue;
			ok++;
			assert_ptr_equal(x.memobj, a.mo);
			assert_true(x.offset < 64 * PG);
		}
	}
	assert_true(ok > 0);	/* some walks did succeed */
	iommu_destroy(mmu);
}

/* ---- IOMMU-13: PASID attach / replace / detach ------------------------------------------- */

static void test_pasid(void **state)
{
	struct iommu *mmu = t_iommu(), *other = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 16 * PG, 0x30);
	struct iommu_domain *d1 = t_paging(mmu, 0), *d2 = t_paging(mmu, 0);
	struct iommu_domain *foreign = t_paging(other, 0);
	uint8_t b;

	(void)state;
	t_map_fixed(d1, mo, 0, PG, IOMMU_READ, 1 << 20);
	t_map_fixed(d2, mo, PG, PG, IOMMU_READ, 1 << 20);
	/* Detaching an unattached PASID is harmless. */
	assert_int_equal(iommu_pasid_detach(mmu, RID, 9), 0);
	/* A PASID needs the requester id attached first. */
	assert_int_equal(iommu_pasid_attach(mmu, RID, 9, d1), -EINVAL);
	assert_int_equal(iommu_attach(mmu, RID, d2), 0);
	assert_int_equal(iommu_attach(mmu, RID, d1), -EBUSY);
	assert_int_equal(iommu_pasid_attach(mmu, RID, 0, d1), -EINVAL);
	assert_int_equal(iommu_pasid_attach(mmu, RID, IOMMU_PASID_MAX + 1, d1), -EINVAL);
	assert_int_equal(iommu_pasid_replace(mmu, RID, 9, d1), -EINVAL);	/* unattached */
	assert_int_equal(iommu_pasid_attach(mmu, RID, 9, d1), 0);
	assert_int_equal(iommu_pasid_attach(mmu, RID, 9, d2), -EBUSY);		/* use replace */
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 9, 1 << 20, &b, 1), 0);
	assert_int_equal(b, 0x30);
	assert_int_equal(iommu_dma_read(mmu, RID, 1 << 20, &b, 1), 0);
	assert_int_equal(b, 0x31);
	/* Failed replace keeps the old domain. */
	assert_int_equal(iommu_pasid_replace(mmu, RID, 9, foreign), -EINVAL);
	assert_int_equal(iommu_pasid_replace(mmu, RID, 9, NULL), -EINVAL);
	assert_ptr_equal(iommu_pasid_domain(mmu, RID, 9), d1);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 9, 1 << 20, &b, 1), 0);
	assert_int_equal(b, 0x30);
	assert_int_equal(iommu_domain_free(d1), -EBUSY);
	assert_int_equal(iommu_pasid_replace(mmu, RID, 9, d2), 0);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 9, 1 << 20, &b, 1), 0);
	assert_int_equal(b, 0x31);
	assert_int_equal(iommu_domain_free(d1), 0);
	/* Table full. */
	for (uint32_t p = 100; p < 100 + IOMMU_MAX_PASIDS_PER_FUNC - 1; p++)
		assert_int_equal(iommu_pasid_attach(mmu, RID, p, d2), 0);
	assert_int_equal(iommu_pasid_attach(mmu, RID, 99, d2), -ENOSPC);
	assert_int_equal(iommu_pasid_detach(mmu, RID, 9), 0);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 9, 1 << 20, &b, 1), -EFAULT);
	assert_int_equal(iommu_replace(mmu, 5, d2), -EINVAL);	/* RID not attached */
	iommu_destroy(other);
	iommu_destroy(mmu);
}

/* ---- SVA ---------------------------------------------------------------------------------- */

struct sva_pri {
	struct iommu *mmu;
	void *region;
	int calls;
};

static void sva_handler(void *arg, const struct iommu_page_request *req)
{
	struct sva_pri *s = arg;

	/* The HMM layer would migrate the page back; here it just becomes present. */
	s->calls++;
	assert_ptr_equal(mmap(s->region, PG, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), s->region);
	memset(s->region, 0x5a, PG);
	assert_int_equal(iommu_page_response(s->mmu, req->rid, req->prg_index,
					      IOMMU_PRG_SUCCESS), 0);
}

static void test_sva(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_domain *d0 = t_paging(mmu, 0), *sva;
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_SVA };
	uint8_t *buf = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t in[6000], out[6000];
	struct sva_pri sp = { .mmu = mmu, .region = buf + 3 * PG };
	unsigned int reason = 0;
	struct iommu_xlate x;

	(void)state;
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), 0);
	assert_int_equal(iommu_attach(mmu, RID, sva), -EINVAL);	/* PASID only */
	assert_int_equal(iommu_attach(mmu, RID, d0), 0);
	assert_int_equal(iommu_pasid_attach(mmu, RID, 3, sva), 0);
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 7);
	/* The process's own addresses, across a page boundary. */
	assert_int_equal(iommu_dma_write_pasid(mmu, RID, 3, (uintptr_t)buf + 100, in, sizeof(in)), 0);
	assert_memory_equal(buf + 100, in, sizeof(in));
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 3, (uintptr_t)buf + 100, out, sizeof(out)), 0);
	assert_memory_equal(out, in, sizeof(out));
	assert_int_equal(iommu_fn_translate(mmu, RID, 3, (uintptr_t)buf, 8, IOMMU_READ, &x), 0);
	assert_null(x.host);
	assert_int_equal(x.offset, (uintptr_t)buf);
	/* Read-only and missing pages fault. */
	assert_int_equal(mprotect(buf, PG, PROT_READ), 0);
	assert_int_equal(iommu_dma_write_pasid(mmu, RID, 3, (uintptr_t)buf, in, 8), -EFAULT);
	assert_int_equal(munmap(buf + 3 * PG, PG), 0);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 3, (uintptr_t)buf + 3 * PG, out, 8), -EFAULT);
	assert_int_equal(t_faults(mmu, RID, &reason), 2);
	assert_int_equal(reason, IOMMU_FAULT_UNMAPPED);
	/* With PRI: the page request makes it present and the device retries. */
	assert_int_equal(iommu_pri_enable(mmu, RID, 4, sva_handler, &sp), 0);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, 3, (uintptr_t)buf + 3 * PG, out, 8), 0);
	assert_int_equal(sp.calls, 1);
	assert_int_equal(out[0], 0x5a);
	munmap(buf, 4 * PG);
	iommu_destroy(mmu);
}

int main(void)
{
	struct CMUnitTest tests[48];
	size_t n = 0;

	T_CASES(tests, n, dirty_cases, test_dirty);
	tests[n++] = (struct CMUnitTest){ "IOMMU-11 errors and partial huge leaf",
					  test_dirty_errors, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-12 nested translate, parent busy",
					  test_nest_basic, NULL, NULL, NULL };
	T_CASES(tests, n, s1_cases, test_nest_sizes);
	T_CASES(tests, n, bad_s1_cases, test_nest_bad_s1);
	T_CASES(tests, n, s2_perm_cases, test_nest_s2_readonly);
	tests[n++] = (struct CMUnitTest){ "IOMMU-12 stage-1 into a stage-2 hole faults",
					  test_nest_s2_unmapped, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-12 hostile stage-1 stays in its stage-2",
					  test_nest_isolation, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-13 PASID attach/replace/detach", test_pasid,
					  NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "SVA: process addresses via PASID, PRI retry", test_sva,
					  NULL, NULL, NULL };
	return _cmocka_run_group_tests("iommu_dirty_nest", tests, n, NULL, NULL);
}
