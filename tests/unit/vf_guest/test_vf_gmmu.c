// SPDX-License-Identifier: MIT
/* Page tables written by the guest driver (vf_guest/gmmu.c), checked by an independent walker
 * written here from the format in vgpu/gmmu.h: what the device would translate, not what the
 * driver's software tree believes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <vgpu/gmmu.h>

#include "vf_guest/vf_internal.h"

#define VRAM_SIZE	(8ull << 20)	/* 2048 tables' worth */
#define K4		VGPU_GMMU_PAGE_4K
#define K64		VGPU_GMMU_PAGE_64K
#define M2		VGPU_GMMU_PAGE_2M

/* A bump-and-bitmap table allocator over the fake VRAM, with failure injection. */
struct fake_vram {
	uint8_t *mem;
	uint8_t used[VRAM_SIZE / 4096];
	int fail_after;		/* allocations left before -ENOSPC; <0: never fail */
	unsigned int live;
};

static int fv_alloc(void *ctx, uint64_t *pa)
{
	struct fake_vram *v = ctx;

	if (v->fail_after == 0)
		return -ENOSPC;
	if (v->fail_after > 0)
		v->fail_after--;
	/* Table 0 stays unused so that a zero PDE address would be visible as a bug. */
	for (size_t i = 1; i < VRAM_SIZE / 4096; i++) {
		if (!v->used[i]) {
			v->used[i] = 1;
			v->live++;
			memset(v->mem + i * 4096, 0xa5, 4096);	/* garbage: the driver must zero */
			*pa = i * 4096;
			return 0;
		}
	}
	return -ENOSPC;
}

static void fv_free(void *ctx, uint64_t pa)
{
	struct fake_vram *v = ctx;

	assert_true(v->used[pa / 4096]);
	v->used[pa / 4096] = 0;
	v->live--;
}

static const struct vf_pt_ops fv_ops = { .alloc = fv_alloc, .free = fv_free };

struct fixture {
	struct fake_vram v;
	struct vf_gmmu g;
	const void *c;		/* the case */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->v.mem = malloc(VRAM_SIZE);
	assert_non_null(f->v.mem);
	f->v.fail_after = -1;
	f->c = *state;
	assert_int_equal(vf_gmmu_init(&f->g, f->v.mem, VRAM_SIZE, &fv_ops, &f->v), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	vf_gmmu_fini(&f->g);
	assert_int_equal(f->v.live, 0);	/* every table came back */
	free(f->v.mem);
	free(f);
	return 0;
}

/* The device's walk, from vgpu/gmmu.h alone. Returns 0 or a vgpu_fault_reason. */
static int ref_walk(const uint8_t *vram, uint64_t pdb, uint64_t va, uint64_t *aper,
		    uint64_t *addr, uint64_t *ps)
{
	static const unsigned int shift[3] = { 39, 30, 21 };
	uint64_t table = pdb, e;

	if (va >= VGPU_GMMU_VA_LIMIT)
		return VGPU_FAULT_VA_RANGE;
	for (int l = 0; l < 3; l++) {
		memcpy(&e, vram + table + ((va >> shift[l]) & 511) * 8, 8);
		if (!(e & VGPU_GMMU_VALID))
			return VGPU_FAULT_PDE_INVALID;
		if (e & VGPU_GMMU_RSVD_MASK)
			return VGPU_FAULT_BAD_ENTRY;
		if (l == 2 && (e & VGPU_GMMU_LEAF)) {
			*ps = M2;
			goto leaf;
		}
		if ((e & VGPU_GMMU_LEAF) || (l < 2 && (e & VGPU_GMMU_PT64K)))
			return VGPU_FAULT_BAD_ENTRY;
		if (l == 2 && (e & VGPU_GMMU_PT64K)) {
			table = e & VGPU_GMMU_ADDR_MASK;
			memcpy(&e, vram + table + ((va >> 16) & 31) * 8, 8);
			*ps = K64;
			goto pte;
		}
		table = e & VGPU_GMMU_ADDR_MASK;
	}
	memcpy(&e, vram + table + ((va >> 12) & 511) * 8, 8);
	*ps = K4;
pte:
	if (!(e & VGPU_GMMU_VALID))
		return VGPU_FAULT_PTE_INVALID;
leaf:
	if (e & VGPU_GMMU_RSVD_MASK || (e & VGPU_GMMU_ADDR_MASK) & (*ps - 1))
		return VGPU_FAULT_BAD_ENTRY;
	*aper = e & VGPU_GMMU_APER_MASK;
	*addr = (e & VGPU_GMMU_ADDR_MASK) + (va & (*ps - 1));
	return 0;
}

static void expect_mapped(struct fixture *f, uint64_t va, uint64_t size, uint64_t aper,
			  uint64_t addr, uint64_t ps)
{
	for (uint64_t off = 0; off < size; off += ps) {
		uint64_t a, x, p;

		assert_int_equal(ref_walk(f->v.mem, vf_gmmu_pdb(&f->g), va + off + 8, &a, &x, &p), 0);
		assert_int_equal(a, aper);
		assert_int_equal(x, addr + off + 8);
		assert_int_equal(p, ps);
	}
}

static void expect_unmapped(struct fixture *f, uint64_t va)
{
	uint64_t a, x, p;

	assert_int_not_equal(ref_walk(f->v.mem, vf_gmmu_pdb(&f->g), va, &a, &x, &p), 0);
}

/* ---- map cases ---- */
static const struct map_case {
	const char *name;
	uint64_t va, aper, addr, size, ps;
} map_cases[] = {
	{ "4K VRAM one page", 0x10000000, VGPU_GMMU_APER_VRAM, 0x400000, K4, K4 },
	{ "4K VRAM across a 2M boundary", 0x101ff000, VGPU_GMMU_APER_VRAM, 0x400000, 4 * K4, K4 },
	{ "64K VRAM 16 pages", 0x20000000, VGPU_GMMU_APER_VRAM, 0x800000, 16 * K64, K64 },
	{ "64K sysmem across 1G", 0x3ffe0000, VGPU_GMMU_APER_SYS, 0x100000000ull, 4 * K64, K64 },
	{ "2M VRAM 3 pages", 0x40000000, VGPU_GMMU_APER_VRAM, 0x200000, 3 * M2, M2 },
	{ "2M sysmem near the VA top", VGPU_GMMU_VA_LIMIT - 2 * M2, VGPU_GMMU_APER_SYS,
	  0x100000000ull, 2 * M2, M2 },
	{ "4K sysmem at VA 0", 0, VGPU_GMMU_APER_SYS, 0x1000, 2 * K4, K4 },
};

static void test_map(void **state)
{
	struct fixture *f = *state;
	const struct map_case *c = f->c;
	uint64_t a, x, p, pte;

	assert_int_equal(vf_gmmu_map(&f->g, c->va, c->aper, c->addr, c->size, c->ps, 0), 0);
	expect_mapped(f, c->va, c->size, c->aper, c->addr, c->ps);
	expect_unmapped(f, c->va + c->size);
	if (c->va)
		expect_unmapped(f, c->va - K4);
	/* The software view agrees with the walker. */
	assert_int_equal(vf_gmmu_lookup(&f->g, c->va + c->size - 1, &a, &x, &p, &pte), 0);
	assert_int_equal(x, c->addr + c->size - 1);
	assert_int_equal(p, c->ps);
	/* Mapping any page of it again is refused, at any size, and changes nothing. */
	assert_int_equal(vf_gmmu_map(&f->g, c->va, c->aper, c->addr, c->ps, c->ps, 0), -EEXIST);
	assert_int_equal(vf_gmmu_map(&f->g, c->va & ~(M2 - 1), c->aper, 0, M2, M2, 0), -EEXIST);
	expect_mapped(f, c->va, c->size, c->aper, c->addr, c->ps);
	/* Unmap: nothing translates, every table but the root is freed. */
	assert_int_equal(vf_gmmu_unmap(&f->g, c->va, c->size), 0);
	for (uint64_t off = 0; off < c->size; off += c->ps)
		expect_unmapped(f, c->va + off);
	assert_int_equal(f->g.tables, 1);
	assert_int_equal(f->v.live, 1);
}

/* ---- refused requests: each must change nothing ---- */
static const struct bad_case {
	const char *name;
	uint64_t va, aper, addr, size, ps, flags;
	int want;
} bad_cases[] = {
	{ "unaligned VA", 0x1000 + 0x800, VGPU_GMMU_APER_VRAM, 0, K4, K4, 0, -EINVAL },
	{ "unaligned address", 0x10000, VGPU_GMMU_APER_VRAM, 0x1000, K64, K64, 0, -EINVAL },
	{ "size not a page multiple", 0, VGPU_GMMU_APER_VRAM, 0, M2 + K4, M2, 0, -EINVAL },
	{ "page size 8K", 0, VGPU_GMMU_APER_VRAM, 0, 0x2000, 0x2000, 0, -EINVAL },
	{ "zero size", 0, VGPU_GMMU_APER_VRAM, 0, 0, K4, 0, -EINVAL },
	{ "past the VA limit", VGPU_GMMU_VA_LIMIT - K4, VGPU_GMMU_APER_VRAM, 0, 2 * K4, K4, 0, -EINVAL },
	{ "reserved aperture", 0, 3ull << VGPU_GMMU_APER_SHIFT, 0, K4, K4, 0, -EINVAL },
	{ "unknown PTE flag", 0, VGPU_GMMU_APER_VRAM, 0, K4, K4, 1ull << 8, -EINVAL },
	{ "address past 56 bits", 0, VGPU_GMMU_APER_SYS, 1ull << 56, K4, K4, 0, -EINVAL },
};

static void test_bad(void **state)
{
	struct fixture *f = *state;
	const struct bad_case *c = f->c;

	assert_int_equal(vf_gmmu_map(&f->g, c->va, c->aper, c->addr, c->size, c->ps, c->flags),
			 c->want);
	assert_int_equal(f->g.tables, 1);
	expect_unmapped(f, c->va);
}

/* 4K and 64K pages cannot share one 2 MiB region, nor either share it with a 2M page. */
static void test_mixed_sizes(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(vf_gmmu_map(&f->g, 0x200000, 0, 0x400000, K4, K4, 0), 0);
	assert_int_equal(vf_gmmu_map(&f->g, 0x210000, 0, 0x400000, K64, K64, 0), -EEXIST);
	assert_int_equal(vf_gmmu_map(&f->g, 0x200000, 0, 0x400000, M2, M2, 0), -EEXIST);
	assert_int_equal(vf_gmmu_map(&f->g, 0x400000, 0, 0x400000, K64, K64, 0), 0);
	assert_int_equal(vf_gmmu_map(&f->g, 0x401000, 0, 0x400000, K4, K4, 0), -EEXIST);
	assert_int_equal(vf_gmmu_map(&f->g, 0x600000, 0, 0x400000, M2, M2, 0), 0);
	assert_int_equal(vf_gmmu_map(&f->g, 0x600000, 0, 0x400000, K4, K4, 0), -EEXIST);
	/* Unmapping needs whole mappings: half of the 2M page, or an unmapped page, is refused. */
	assert_int_equal(vf_gmmu_unmap(&f->g, 0x600000, K4), -EINVAL);
	assert_int_equal(vf_gmmu_unmap(&f->g, 0x201000, K4), -ENOENT);
	assert_int_equal(vf_gmmu_unmap(&f->g, 0x200000, 2 * K4), -ENOENT);
	expect_mapped(f, 0x200000, K4, 0, 0x400000, K4);
	/* A range covering different page sizes unmaps page by page. */
	assert_int_equal(vf_gmmu_unmap(&f->g, 0x400000, K64), 0);
	assert_int_equal(vf_gmmu_unmap(&f->g, 0x600000, M2), 0);
	assert_int_equal(vf_gmmu_unmap(&f->g, 0x200000, K4), 0);
	assert_int_equal(f->g.tables, 1);
	/* Now the regions are free for other sizes. */
	assert_int_equal(vf_gmmu_map(&f->g, 0x200000, 0, 0x400000, M2, M2, 0), 0);
	expect_mapped(f, 0x200000, M2, 0, 0x400000, M2);
}

/* RO and VOLATILE end up in the PTE; the aperture too. */
static void test_flags(void **state)
{
	struct fixture *f = *state;
	uint64_t pte;

	assert_int_equal(vf_gmmu_map(&f->g, 0x1000, VGPU_GMMU_APER_SYS, 0x5000, K4, K4,
				     VGPU_GMMU_RO | VGPU_GMMU_VOLATILE), 0);
	assert_int_equal(vf_gmmu_lookup(&f->g, 0x1000, NULL, NULL, NULL, &pte), 0);
	assert_int_equal(pte, vgpu_gmmu_pte(0x5000, VGPU_GMMU_APER_SYS | VGPU_GMMU_RO |
						VGPU_GMMU_VOLATILE));
}

/* A table allocation failing halfway leaves no page mapped and no table behind. */
static void test_alloc_failure(void **state)
{
	struct fixture *f = *state;

	/* 3 x 2 MiB regions of 4K pages need 3 level-3 tables + L1 + L2: allow only 3. */
	f->v.fail_after = 3;
	assert_int_equal(vf_gmmu_map(&f->g, 0x40000000, 0, 0, 3 * M2, K4, 0), -ENOSPC);
	assert_int_equal(f->g.tables, 1);
	assert_int_equal(f->v.live, 1);
	for (uint64_t off = 0; off < 3 * M2; off += 256 * K4)
		expect_unmapped(f, 0x40000000 + off);
	f->v.fail_after = -1;
	assert_int_equal(vf_gmmu_map(&f->g, 0x40000000, 0, 0, 3 * M2, K4, 0), 0);
	expect_mapped(f, 0x40000000, 3 * M2, 0, 0, K4);
}

/* Many scattered mappings, half unmapped, the rest still right, then all gone: every table
 * returns exactly. */
static void test_scatter(void **state)
{
	struct fixture *f = *state;
	uint64_t s = 12345, vas[200], pas[200];
	int n = 0;

	for (int i = 0; i < 200; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t va = (s >> 20) % (VGPU_GMMU_VA_LIMIT >> 21) << 21;
		int r = vf_gmmu_map(&f->g, va, 0, (uint64_t)i << 21, M2, M2, 0);

		assert_true(r == 0 || r == -EEXIST);
		if (!r) {
			vas[n] = va;
			pas[n++] = (uint64_t)i << 21;
		}
	}
	assert_true(n > 190 && f->g.tables > 3);
	for (int i = 0; i < n; i += 2)
		assert_int_equal(vf_gmmu_unmap(&f->g, vas[i], M2), 0);
	for (int i = 1; i < n; i += 2)
		expect_mapped(f, vas[i], M2, VGPU_GMMU_APER_VRAM, pas[i], M2);
	for (int i = 1; i < n; i += 2)
		assert_int_equal(vf_gmmu_unmap(&f->g, vas[i], M2), 0);
	assert_int_equal(f->g.tables, 1);
}

#define CASE(fn, c) { (c)->name, fn, setup, teardown, (void *)(c) }

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(map_cases) + VGPU_ARRAY_SIZE(bad_cases) + 5];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(map_cases); i++)
		tests[n++] = (struct CMUnitTest)CASE(test_map, &map_cases[i]);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad_cases); i++)
		tests[n++] = (struct CMUnitTest)CASE(test_bad, &bad_cases[i]);
	tests[n++] = (struct CMUnitTest){ "4K/64K/2M cannot share a region", test_mixed_sizes,
					  setup, teardown, NULL };
	tests[n++] = (struct CMUnitTest){ "RO and VOLATILE in the PTE", test_flags, setup,
					  teardown, NULL };
	tests[n++] = (struct CMUnitTest){ "table allocation failure rolls back",
					  test_alloc_failure, setup, teardown, NULL };
	tests[n++] = (struct CMUnitTest){ "200 scattered 2M pages, all tables back", test_scatter,
					  setup, teardown, NULL };
	return _cmocka_run_group_tests("vf_gmmu", tests, n, NULL, NULL);
}
