// SPDX-License-Identifier: MIT
/* IOTLB: counters, invalidation by page / range / domain / global, strict and lazy
 * unmap (IOMMU-07), a randomised map/unmap/DMA run against a shadow map that proves no
 * stale translation is used (IOMMU-07), and batched stage-1 invalidation (IOMMU-08). */
#include <errno.h>
#include <stdlib.h>

#include "iommu_test.h"

static void test_hit_miss_counters(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 4 << 20, 0);
	struct iommu_domain *d = t_paging(mmu, 0);
	struct iommu_stats st;
	struct iommu_xlate x;

	(void)state;
	t_map_fixed(d, mo, 0, 4 * PG, IOMMU_READ, 1 << 30);
	t_map_fixed(d, mo, 2 << 20, 2 << 20, IOMMU_READ, 2ull << 30);
	iommu_reset_counters(mmu);
	for (int i = 0; i < 10; i++)
		assert_int_equal(iommu_translate(d, (1 << 30) + 5, 1, IOMMU_READ, &x), 0);
	iommu_get_stats(mmu, &st);
	assert_int_equal(st.iotlb_misses, 1);
	assert_int_equal(st.iotlb_hits, 9);
	/* One 2 MiB leaf: one miss for 512 pages. */
	for (uint64_t off = 0; off < (2 << 20); off += PG)
		assert_int_equal(iommu_translate(d, (2ull << 30) + off, 8, IOMMU_READ, &x), 0);
	iommu_get_stats(mmu, &st);
	assert_int_equal(st.iotlb_misses, 2);
	assert_int_equal(st.iotlb_hits, 9 + 511);
	/* NOCACHE walks every time and neither hits nor fills. */
	assert_int_equal(iommu_translate(d, 1 << 30, 1, IOMMU_READ | IOMMU_NOCACHE, &x), 0);
	iommu_get_stats(mmu, &st);
	assert_int_equal(st.iotlb_hits + st.iotlb_misses, 9 + 511 + 2);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

/* The set of the per-thread front that holds @iova, hashed as xlate.c does: the test needs
 * two pages that share one. */
static unsigned int front_set(uint64_t iova)
{
	return (unsigned int)(((iova >> 12) * 0x9e3779b97f4a7c15ull) >> (64 - 11));
}

/* Two pages in one set of the front are both served by it: with a one-entry shared IOTLB
 * holding a third page, translating them again walks nothing. */
static void test_front_two_ways(void **state)
{
	const struct iommu_config cfg = { .iotlb_sets = 1, .iotlb_ways = 1 };
	uint64_t a = 1ull << 30, b = a + PG, c = a + PG;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	struct iommu_stats st;
	struct iommu_xlate x;
	struct iommu *mmu;

	(void)state;
	while (front_set(b) != front_set(a))
		b += PG;
	while (front_set(c) == front_set(a))
		c += PG;
	assert_int_equal(iommu_create(&cfg, &mmu), 0);
	mo = t_memobj(mmu, 3 * PG, 0);
	d = t_paging(mmu, 0);
	t_map_fixed(d, mo, 0, PG, IOMMU_READ, a);
	t_map_fixed(d, mo, PG, PG, IOMMU_READ, b);
	t_map_fixed(d, mo, 2 * PG, PG, IOMMU_READ, c);
	/* c last: the shared IOTLB's one entry holds it. */
	assert_int_equal(iommu_translate(d, a, 8, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_translate(d, b, 8, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_translate(d, c, 8, IOMMU_READ, &x), 0);
	iommu_reset_counters(mmu);
	assert_int_equal(iommu_translate(d, a, 8, IOMMU_READ, &x), 0);
	assert_int_equal(*(uint8_t *)x.host, 0);
	assert_int_equal(iommu_translate(d, b, 8, IOMMU_READ, &x), 0);
	assert_int_equal(*(uint8_t *)x.host, 1);
	iommu_get_stats(mmu, &st);
	assert_int_equal(st.iotlb_misses, 0);
	assert_int_equal(st.iotlb_hits, 2);
	assert_int_equal(iommu_domain_free(d), 0);
	iommu_destroy(mmu);
}

enum flush_kind { FLUSH_PAGE, FLUSH_RANGE, FLUSH_DOMAIN, FLUSH_ALL };

static const struct flush_case {
	const char *name;
	enum flush_kind kind;
	unsigned int want_misses;	/* re-translating 4 pages of d1 and 1 of d2 */
} flush_cases[] = {
	{ "IOTLB flush page", FLUSH_PAGE, 1 },
	{ "IOTLB flush range", FLUSH_RANGE, 2 },
	{ "IOTLB flush domain", FLUSH_DOMAIN, 4 },
	{ "IOTLB flush global", FLUSH_ALL, 5 },
};

static void test_flush(void **state)
{
	const struct flush_case *c = *state;
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 1 << 20, 0);
	struct iommu_domain *d1 = t_paging(mmu, 0), *d2 = t_paging(mmu, 0);
	struct iommu_stats st;
	struct iommu_xlate x;
	const uint64_t base = 1 << 20;

	t_map_fixed(d1, mo, 0, 4 * PG, IOMMU_READ, base);
	t_map_fixed(d2, mo, 0, PG, IOMMU_READ, base);
	for (unsigned int i = 0; i < 4; i++)
		assert_int_equal(iommu_translate(d1, base + i * PG, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_translate(d2, base, 1, IOMMU_READ, &x), 0);
	switch (c->kind) {
	case FLUSH_PAGE:
		assert_int_equal(iommu_iotlb_flush_range(d1, base + PG, PG), 0);
		break;
	case FLUSH_RANGE:
		assert_int_equal(iommu_iotlb_flush_range(d1, base + 2 * PG, 2 * PG), 0);
		break;
	case FLUSH_DOMAIN:
		iommu_iotlb_flush_domain(d1);
		break;
	case FLUSH_ALL:
		iommu_iotlb_flush_all(mmu);
		break;
	}
	iommu_reset_counters(mmu);
	for (unsigned int i = 0; i < 4; i++)
		assert_int_equal(iommu_translate(d1, base + i * PG, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_translate(d2, base, 1, IOMMU_READ, &x), 0);
	iommu_get_stats(mmu, &st);
	assert_int_equal(st.iotlb_misses, c->want_misses);
	assert_int_equal(iommu_iotlb_flush_range(d1, UINT64_MAX - PG, 2 * PG), -EINVAL);
	iommu_destroy(mmu);
}

/* Strict: once unmap returns, the cached translation is gone. */
static void test_strict_unmap(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 1 << 20, 0);
	struct iommu_domain *d = t_paging(mmu, 0);
	struct iommu_xlate x;
	uint64_t iova;

	(void)state;
	iova = t_map_fixed(d, mo, 0, PG, IOMMU_READ, 1 << 20);
	assert_int_equal(iommu_translate(d, iova, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_unmap(d, iova, PG, NULL), 0);
	assert_int_equal(iommu_translate(d, iova, 1, IOMMU_READ, &x), -EFAULT);
	assert_int_equal(iommu_memobj_map_count(mo), 0);
	iommu_destroy(mmu);
}

/* Lazy: the IOVA stays busy (and the memory referenced) until the flush queue drains. */
static void test_lazy_unmap(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_memobj *mo = t_memobj(mmu, 1 << 20, 0);
	struct iommu_domain *d = t_paging(mmu, IOMMU_DOMAIN_LAZY);
	struct iommu_iova_range win = { 1 << 20, (1 << 20) + 2 * PG - 1 };
	struct iommu_xlate x;
	uint64_t a, b, c;

	(void)state;
	assert_int_equal(iommu_allow_iovas(d, &win, 1), 0);
	assert_int_equal(iommu_map(d, mo, 0, PG, IOMMU_READ, 0, &a), 0);
	assert_int_equal(iommu_map(d, mo, PG, PG, IOMMU_READ, 0, &b), 0);
	assert_int_equal(iommu_translate(d, a, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_unmap(d, a, PG, NULL), 0);
	/* Still cached (lazy), still pointing at the old memory, still referenced. */
	assert_int_equal(iommu_translate(d, a, 1, IOMMU_READ, &x), 0);
	assert_int_equal(x.offset, 0);
	assert_int_equal(iommu_memobj_map_count(mo), 2);
	assert_int_equal(iommu_memobj_unregister(mo), -EBUSY);
	/* The only free IOVA in the window is the one pending: allocation drains first. */
	assert_int_equal(iommu_map(d, mo, 2 * PG, PG, IOMMU_READ, 0, &c), 0);
	assert_int_equal(c, a);
	assert_int_equal(iommu_translate(d, c, 1, IOMMU_READ, &x), 0);
	assert_int_equal(x.offset, 2 * PG);
	/* Explicit drain. */
	assert_int_equal(iommu_unmap(d, b, PG, NULL), 0);
	iommu_domain_flush_queue(d);
	assert_int_equal(iommu_translate(d, b, 1, IOMMU_READ, &x), -EFAULT);
	assert_int_equal(iommu_memobj_map_count(mo), 1);
	iommu_destroy(mmu);
}

/* ---- IOMMU-07: randomised run against a shadow map ---------------------------------------- */

#define SH_PAGES 2048		/* 8 MiB window */
#define SH_BASE (1ull << 32)

struct shadow_pg {
	bool mapped, stale;
	uint64_t off, stale_off;
	unsigned int prot;
	uint64_t map_iova, map_len;	/* the mapping it belongs to */
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void shadow_check_page(struct iommu *mmu, struct iommu_domain *d, struct shadow_pg *sh,
			      uint64_t p, const uint8_t *base)
{
	struct iommu_xlate x;
	uint8_t b;
	int ret = iommu_translate(d, SH_BASE + p * PG + 3, 1, IOMMU_READ, &x);

	if (sh[p].mapped) {
		assert_int_equal(ret, (sh[p].prot & IOMMU_READ) ? 0 : -EACCES);
		if (!ret) {
			assert_int_equal(x.offset, sh[p].off + 3);
			assert_ptr_equal(x.host, base + sh[p].off + 3);
		}
		ret = iommu_dma_read(mmu, 1, SH_BASE + p * PG + 3, &b, 1);
		assert_int_equal(ret, (sh[p].prot & IOMMU_READ) ? 0 : -EACCES);
		if (!ret)
			assert_int_equal(b, base[sh[p].off + 3]);
	} else if (sh[p].stale) {
		/* Lazy: an old translation may linger, but only to the old memory. */
		if (!ret)
			assert_int_equal(x.offset, sh[p].stale_off + 3);
		else if (ret == -EACCES)	/* old entry, old permissions */
			assert_false(sh[p].prot & IOMMU_READ);
		else
			assert_int_equal(ret, -EFAULT);
	} else {
		assert_int_equal(ret, -EFAULT);
		assert_int_equal(iommu_dma_read(mmu, 1, SH_BASE + p * PG + 3, &b, 1), -EFAULT);
	}
}

static void shadow_drained(struct shadow_pg *sh)
{
	for (unsigned int p = 0; p < SH_PAGES; p++)
		sh[p].stale = false;
}

static void test_random_shadow(void **state)
{
	const bool lazy = *state != NULL;
	struct iommu_config cfg = { .iotlb_sets = 16, .iotlb_ways = 2 };
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	struct shadow_pg *sh = calloc(SH_PAGES, sizeof(*sh));
	const uint8_t *base;
	uint64_t seed = 0x1234567 + lazy;

	assert_int_equal(iommu_create(&cfg, &mmu), 0);
	mo = t_memobj(mmu, 16 << 20, 7);
	base = iommu_memobj_base(mo);
	d = t_paging(mmu, lazy ? IOMMU_DOMAIN_LAZY : 0);
	assert_int_equal(iommu_attach(mmu, 1, d), 0);
	for (int op = 0; op < 3000; op++) {
		static const uint64_t sizes[] = { PG, 2 * PG, 16 * PG, 2 << 20 };
		uint64_t len = sizes[rnd(&seed) % 4], p = rnd(&seed) % SH_PAGES, n;
		uint64_t iova, off, unmapped;

		p -= p % (len / PG);
		n = len / PG;
		if (p + n > SH_PAGES)
			continue;
		iova = SH_BASE + p * PG;
		if (rnd(&seed) % 2) {
			unsigned int prot = 1 + rnd(&seed) % 3;
			bool busy = false;
			int ret;

			off = (rnd(&seed) % ((16 << 20) / len - 1)) * len;
			for (uint64_t k = 0; k < n; k++)
				busy |= sh[p + k].mapped;
			ret = iommu_map(d, mo, off, len, prot, IOMMU_MAP_FIXED_IOVA, &iova);
			assert_int_equal(ret, busy ? -EEXIST : 0);
			if (!ret) {
				bool drained = false;

				for (uint64_t k = 0; k < n; k++)
					drained |= sh[p + k].stale;
				if (drained)	/* fixed map over pending IOVAs drains the queue */
					shadow_drained(sh);
				for (uint64_t k = 0; k < n; k++)
					sh[p + k] = (struct shadow_pg){ true, false, off + k * PG, 0,
									prot, iova, len };
			}
		} else if (sh[p].mapped) {
			uint64_t mi = sh[p].map_iova, ml = sh[p].map_len, mp = (mi - SH_BASE) / PG;

			/* Sometimes try to split it first: refused, nothing changes. */
			if (ml > PG && rnd(&seed) % 4 == 0)
				assert_int_equal(iommu_unmap(d, mi, ml - PG, &unmapped), -ENOENT);
			assert_int_equal(iommu_unmap(d, mi, ml, &unmapped), 0);
			assert_int_equal(unmapped, ml);
			for (uint64_t k = 0; k < ml / PG; k++) {
				sh[mp + k].mapped = false;
				sh[mp + k].stale = lazy;
				sh[mp + k].stale_off = sh[mp + k].off;
			}
		}
		if (lazy && rnd(&seed) % 50 == 0) {
			iommu_domain_flush_queue(d);
			shadow_drained(sh);
		}
		for (int k = 0; k < 24; k++)
			shadow_check_page(mmu, d, sh, rnd(&seed) % SH_PAGES, base);
	}
	iommu_domain_flush_queue(d);
	shadow_drained(sh);
	for (uint64_t p = 0; p < SH_PAGES; p++)
		shadow_check_page(mmu, d, sh, p, base);
	free(sh);
	iommu_destroy(mmu);
}

/* ---- IOMMU-08: batched invalidation of a nested domain ----------------------------------- */

struct nest_fixture {
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *s2, *s1;
	struct t_s1 tbl;
};

#define N_IPA0 (1ull << 30)	/* the function's memory in its stage-2 */
#define N_IOVA (1ull << 40)	/* where its stage-1 maps data */
#define N_DATA (N_IPA0 + 16 * PG)

static void nest_setup(struct nest_fixture *f)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_NESTED };

	f->mmu = t_iommu();
	f->mo = t_memobj(f->mmu, 64 * PG, 0);
	f->s2 = t_paging(f->mmu, IOMMU_DOMAIN_NEST_PARENT);
	t_map_fixed(f->s2, f->mo, 0, 64 * PG, IOMMU_READ | IOMMU_WRITE, N_IPA0);
	t_s1_init(&f->tbl, iommu_memobj_base(f->mo), N_IPA0, N_IPA0);
	for (unsigned int i = 0; i < 8; i++)
		t_s1_map(&f->tbl, N_IOVA + i * PG, N_DATA + i * PG, PG, IOMMU_READ | IOMMU_WRITE);
	o.parent = f->s2;
	o.s1_root = N_IPA0;
	assert_int_equal(iommu_domain_alloc(f->mmu, &o, &f->s1), 0);
}

/* Data page (index from N_DATA) that @iova translates to now. */
static int nest_page(struct nest_fixture *f, uint64_t iova)
{
	struct iommu_xlate x;

	assert_int_equal(iommu_translate(f->s1, iova, 1, IOMMU_READ, &x), 0);
	return (int)((x.offset - (N_DATA - N_IPA0)) / PG);
}

static const struct batch_case {
	const char *name;
	uint32_t entry_len;
	uint32_t num;
	struct iommu_inv_entry e[3];
	uint8_t tail;		/* byte after the known part, when entry_len is longer */
	int want;
	uint32_t want_done;
	int want_pages[2];	/* pages IOVA 0 and 1 translate to afterwards */
} batch_cases[] = {
	{ "IOMMU-08 all valid", 24, 2,
	  { { 0, 0, N_IOVA, PG }, { 0, 0, N_IOVA + PG, PG } }, 0, 0, 2, { 4, 5 } },
	{ "IOMMU-08 flag ALL", 24, 1, { { IOMMU_INV_FLAG_ALL, 0, 0, 0 } }, 0, 0, 1, { 4, 5 } },
	{ "IOMMU-08 partial: bad flag", 24, 3,
	  { { 0, 0, N_IOVA, PG }, { 0x80, 0, 0, PG }, { 0, 0, N_IOVA + PG, PG } }, 0,
	  -EOPNOTSUPP, 1, { 4, 1 } },
	{ "IOMMU-08 partial: reserved set", 24, 2,
	  { { IOMMU_INV_FLAG_LEAF, 0, N_IOVA, PG }, { 0, 1, N_IOVA + PG, PG } }, 0, -EOPNOTSUPP, 1,
	  { 4, 1 } },
	{ "IOMMU-08 first entry bad range", 24, 2,
	  { { 0, 0, N_IOVA, 0 }, { 0, 0, N_IOVA + PG, PG } }, 0, -EINVAL, 0, { 0, 1 } },
	{ "IOMMU-08 entry_len short", 16, 1, { { 0, 0, N_IOVA, PG } }, 0, -EINVAL, 0, { 0, 1 } },
	{ "IOMMU-08 entry_len longer, zero tail", 32, 1, { { 0, 0, N_IOVA, PG } }, 0, 0, 1,
	  { 4, 1 } },
	{ "IOMMU-08 entry_len longer, non-zero tail", 32, 1, { { 0, 0, N_IOVA, PG } }, 1, -E2BIG,
	  0, { 0, 1 } },
	{ "IOMMU-08 too many entries", 24, (1u << 19) + 1, { { 0, 0, 0, 0 } }, 0, -EINVAL, 0,
	  { 0, 1 } },
};

static void test_batch(void **state)
{
	const struct batch_case *c = *state;
	struct nest_fixture f;
	uint8_t raw[3 * 32] = { 0 };
	uint32_t num = c->num;

	nest_setup(&f);
	assert_int_equal(nest_page(&f, N_IOVA), 0);
	assert_int_equal(nest_page(&f, N_IOVA + PG), 1);
	/* The function's driver edits its table: pages 0, 1 now point at data 4, 5. */
	t_s1_map(&f.tbl, N_IOVA, N_DATA + 4 * PG, PG, IOMMU_READ | IOMMU_WRITE);
	t_s1_map(&f.tbl, N_IOVA + PG, N_DATA + 5 * PG, PG, IOMMU_READ | IOMMU_WRITE);
	/* Until it invalidates, the IOTLB keeps serving the old translation. */
	assert_int_equal(nest_page(&f, N_IOVA), 0);
	for (unsigned int i = 0; i < 3 && c->entry_len <= 32; i++) {
		memcpy(raw + i * c->entry_len, &c->e[i], sizeof(c->e[i]));
		if (c->entry_len > sizeof(c->e[i]))
			raw[i * c->entry_len + sizeof(c->e[i])] = c->tail;
	}
	assert_int_equal(iommu_invalidate_batch(f.s1, raw, c->entry_len, &num), c->want);
	assert_int_equal(num, c->want_done);
	assert_int_equal(nest_page(&f, N_IOVA), c->want_pages[0]);
	assert_int_equal(nest_page(&f, N_IOVA + PG), c->want_pages[1]);
	/* Invalidation is a nested-domain operation. */
	num = 1;
	assert_int_equal(iommu_invalidate_batch(f.s2, raw, 24, &num), -EINVAL);
	num = 1;
	assert_int_equal(iommu_invalidate_batch(f.s1, NULL, 24, &num), -EINVAL);
	iommu_destroy(f.mmu);
}

int main(void)
{
	struct CMUnitTest tests[32];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_hit_miss_counters);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_front_two_ways);
	T_CASES(tests, n, flush_cases, test_flush);
	tests[n++] = (struct CMUnitTest){ "IOMMU-07 strict unmap drops translation",
					  test_strict_unmap, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-07 lazy unmap reuses IOVA after drain",
					  test_lazy_unmap, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-07 random vs shadow (strict)", test_random_shadow,
					  NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-07 random vs shadow (lazy)", test_random_shadow,
					  NULL, NULL, (void *)1 };
	T_CASES(tests, n, batch_cases, test_batch);
	return _cmocka_run_group_tests("iommu_iotlb", tests, n, NULL, NULL);
}
