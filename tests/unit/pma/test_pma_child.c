// SPDX-License-Identifier: MIT
/* pma: child allocators over a slice of a parent (a VF's VRAM), and export / import of
 * the allocated ranges: exact round trips, and all-or-nothing imports. */
#include "pma_test.h"

#define NOALT 1

static const struct tp_region parent_regions[] = {
	{ 0, 256 * MiB, 10, false },
	{ 1 * GiB, 64 * MiB, 20, false },
	{ 2 * GiB, 32 * MiB, 5, true },
};

static struct pma *parent_new(void)
{
	struct pma *pma = tp_new(NULL, parent_regions, VGPU_ARRAY_SIZE(parent_regions));

	tp_verify(pma);
	return pma;
}

/* A child owns its slice: the parent sees it pinned, the child sees only it, and
 * destroying the child gives it back. */
static void test_child_basic(void **state)
{
	struct pma *parent = parent_new(), *child;
	struct pma_stats ps, cs;
	struct pma_region_desc d;
	struct pma_alloc_opts o = { 0 };
	uint64_t pages[512];
	struct tp_snap before;
	int err = 1;

	(void)state;
	tp_snap_take(parent, &before);
	child = pma_child_create(parent, 64 * MiB, 32 * MiB, NULL, &err);
	assert_non_null(child);
	for (uint64_t a = 64 * MiB; a < 96 * MiB; a += FR)
		assert_int_equal(tp_state(parent, a), PMA_STATE_PIN);
	assert_int_equal(tp_state(parent, 64 * MiB - FR), PMA_STATE_FREE);
	assert_int_equal(tp_state(parent, 96 * MiB), PMA_STATE_FREE);
	pma_get_stats(parent, &ps);
	assert_int_equal(ps.free_bytes, before.stats.free_bytes - 32 * MiB);
	tp_verify(parent);

	pma_get_stats(child, &cs);
	assert_int_equal(cs.total_bytes, 32 * MiB);
	assert_int_equal(cs.free_bytes, 32 * MiB);
	assert_int_equal(cs.largest_free_bytes, 32 * MiB);
	assert_int_equal(pma_region_count(child), 1);
	assert_int_equal(pma_region_get(child, 0, &d), 0);
	assert_int_equal(d.base, 64 * MiB);
	assert_int_equal(d.size, 32 * MiB);
	tp_verify(child);
	/* the child hands out exactly its slice, absolute addresses */
	assert_int_equal(pma_alloc_pages(child, 512, K64, &o, pages), 0);
	for (size_t i = 0; i < 512; i++)
		assert_true(pages[i] >= 64 * MiB && pages[i] < 96 * MiB);
	assert_int_equal(pma_alloc_pages(child, 1, K64, &o, pages + 511), -ENOMEM);
	assert_int_equal(pma_free_bytes(child), 0);
	tp_verify(child);
	/* the parent never hands out the slice, and its own figures did not move */
	pma_get_stats(parent, &cs);
	assert_int_equal(cs.free_bytes, ps.free_bytes);
	o.flags = PMA_RANGE;
	o.range_begin = 64 * MiB;
	o.range_end = 96 * MiB;
	assert_int_equal(pma_alloc_pages(parent, 1, K64, &o, pages), -ENOMEM);
	assert_int_equal(pma_alloc_fixed(parent, 70 * MiB, K64, NULL), -EEXIST);
	o.flags = PMA_CONTIGUOUS;
	assert_int_equal(pma_alloc_pages(parent, 3, M2, &o, pages), 0);
	assert_true(pages[0] + 3 * M2 <= 64 * MiB || pages[0] >= 96 * MiB);
	assert_int_equal(pma_free_pages(parent, pages, 3, M2, 0), 0);
	/* the child's queries stop at its slice */
	uint32_t st;

	assert_int_equal(pma_query(child, 64 * MiB - FR, &st), -EINVAL);
	assert_int_equal(pma_query(child, 96 * MiB, &st), -EINVAL);
	assert_int_equal(pma_blacklist_add(child, 200 * MiB), -EINVAL);
	pma_child_destroy(child);
	tp_snap_assert_same(parent, &before);
	tp_snap_free(&before);
	pma_destroy(parent);
}

static const struct child_err_case {
	const char *name;
	uint64_t base, size;
	int want;
} child_err_cases[] = {
	{ "base not 64K aligned", 64 * MiB + 4096, 2 * MiB, -EINVAL },
	{ "size not 64K aligned", 64 * MiB, 2 * MiB + 4096, -EINVAL },
	{ "size 0", 64 * MiB, 0, -EINVAL },
	{ "outside every region", 512 * MiB, 2 * MiB, -EINVAL },
	{ "past the end of a region", 250 * MiB, 16 * MiB, -EINVAL },
	{ "wraps", UINT64_MAX - K64 + 1, 2 * K64, -EINVAL },
	{ "overlaps an allocation", 8 * MiB, 4 * MiB, -EEXIST },
	{ "overlaps another child", 30 * MiB, 4 * MiB, -EEXIST },
};

static void test_child_err_case(void **state)
{
	const struct child_err_case *c = *state;
	struct pma *parent = parent_new(), *other, *child;
	struct tp_snap s;
	int err = 0;

	assert_int_equal(pma_alloc_fixed(parent, 10 * MiB, K64, NULL), 0);
	other = pma_child_create(parent, 32 * MiB, 16 * MiB, NULL, &err);
	assert_non_null(other);
	tp_snap_take(parent, &s);
	err = 12345;
	child = pma_child_create(parent, c->base, c->size, NULL, &err);
	assert_null(child);
	assert_int_equal(err, c->want);
	tp_snap_assert_same(parent, &s);
	tp_snap_free(&s);
	pma_child_destroy(other);
	pma_destroy(parent);
}

/* Two children side by side, and a grandchild inside one of them. */
static void test_child_nested(void **state)
{
	struct pma *parent = parent_new(), *a, *b, *g;
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	struct tp_snap s;
	uint64_t p[16];
	int err;

	(void)state;
	tp_snap_take(parent, &s);
	a = pma_child_create(parent, 1 * GiB, 32 * MiB, NULL, &err);
	b = pma_child_create(parent, 1 * GiB + 32 * MiB, 32 * MiB, NULL, &err);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(pma_free_bytes(parent), s.stats.free_bytes - 64 * MiB);
	g = pma_child_create(a, 1 * GiB + 8 * MiB, 8 * MiB, NULL, &err);
	assert_non_null(g);
	assert_int_equal(pma_free_bytes(a), 24 * MiB);
	assert_int_equal(pma_alloc_pages(g, 4, M2, &o, p), 0);
	assert_int_equal(p[0], 1 * GiB + 8 * MiB);
	assert_int_equal(pma_alloc_pages(g, 1, K64, NULL, p), -ENOMEM);
	assert_int_equal(pma_alloc_pages(b, 16, M2, &o, p), 0);
	assert_int_equal(p[0], 1 * GiB + 32 * MiB);
	tp_verify(parent);
	tp_verify(a);
	tp_verify(b);
	tp_verify(g);
	pma_child_destroy(g);
	assert_int_equal(pma_free_bytes(a), 32 * MiB);
	tp_verify(a);
	pma_child_destroy(b);
	pma_child_destroy(a);
	tp_snap_assert_same(parent, &s);
	tp_snap_free(&s);
	pma_destroy(parent);
}

/* A child whose slice holds a retired frame either refuses, or never hands it out. */
static void test_child_blacklist(void **state)
{
	struct pma *parent = parent_new(), *child;
	struct pma_alloc_opts o = { 0 };
	uint64_t pages[64];
	int err;

	(void)state;
	assert_int_equal(pma_blacklist_add(parent, 4 * MiB + 5 * K64), 0);
	child = pma_child_create(parent, 4 * MiB, 4 * MiB, NULL, &err);
	if (!child) {
		assert_int_equal(err, -ENOMEM);
		tp_verify(parent);
		pma_destroy(parent);
		return;
	}
	assert_true(tp_state(child, 4 * MiB + 5 * K64) & PMA_ATTR_BLACKLIST);
	assert_int_equal(pma_free_bytes(child), 4 * MiB - FR);
	assert_int_equal(pma_alloc_pages(child, 64, K64, &o, pages), -ENOMEM);
	assert_int_equal(pma_alloc_pages(child, 63, K64, &o, pages), 0);
	for (size_t i = 0; i < 63; i++)
		assert_int_not_equal(pages[i], 4 * MiB + 5 * K64);
	tp_verify(child);
	pma_child_destroy(child);
	tp_verify(parent);
	assert_true(tp_state(parent, 4 * MiB + 5 * K64) & PMA_ATTR_BLACKLIST);
	pma_destroy(parent);
}

/* ---- export / import ------------------------------------------------------------------------ */

/* A mix of states: adjacent allocations of equal state merge, different ones do not. */
static void populate(struct pma *pma, uint64_t base)
{
	static const struct { uint64_t off, size; uint32_t flags; } allocs[] = {
		{ 0, 2 * MiB, 0 },
		{ 2 * MiB, 1 * MiB, 0 },			/* merges with the one before */
		{ 3 * MiB, 1 * MiB, PMA_PINNED },
		{ 4 * MiB, K64, PMA_PINNED | PMA_PERSISTENT },
		{ 4 * MiB + K64, 3 * K64, PMA_PERSISTENT },
		{ 6 * MiB, 5 * K64, PMA_PINNED },
		{ 7 * MiB, 2 * MiB, PMA_PINNED },
		{ 12 * MiB, K64, 0 },
	};

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(allocs); i++) {
		struct pma_alloc_opts o = { .flags = allocs[i].flags };

		assert_int_equal(pma_alloc_fixed(pma, base + allocs[i].off, allocs[i].size, &o), 0);
	}
}

static void assert_ranges_equal(const struct pma_range *a, size_t na, const struct pma_range *b,
				size_t nb)
{
	assert_int_equal(na, nb);
	for (size_t i = 0; i < na; i++) {
		assert_int_equal(a[i].base, b[i].base);
		assert_int_equal(a[i].size, b[i].size);
		assert_int_equal(a[i].state, b[i].state);
	}
}

/* The export list is sorted, maximal, exact, and matches pma_query() frame by frame. */
static void check_export(struct pma *pma, const struct pma_range *r, size_t n)
{
	struct tp_view v;
	uint64_t allocated = 0, listed = 0;

	tp_view_read(pma, &v);
	for (size_t i = 0; i < n; i++) {
		assert_true(r[i].size > 0);
		assert_true(r[i].state == PMA_STATE_UNPIN || r[i].state == PMA_STATE_PIN ||
			    r[i].state == (PMA_STATE_UNPIN | PMA_ATTR_PERSISTENT) ||
			    r[i].state == (PMA_STATE_PIN | PMA_ATTR_PERSISTENT));
		if (i) {
			assert_true(r[i - 1].base + r[i - 1].size <= r[i].base);
			if (r[i - 1].base + r[i - 1].size == r[i].base &&
			    tp_view_region(&v, r[i].base) == tp_view_region(&v, r[i - 1].base))
				assert_int_not_equal(r[i - 1].state, r[i].state);
		}
		for (uint64_t a = r[i].base; a < r[i].base + r[i].size; a += FR) {
			uint32_t st = tp_view_state(&v, a);

			assert_int_equal(st & (PMA_STATE_MASK | PMA_ATTR_PERSISTENT), r[i].state);
		}
		listed += r[i].size;
	}
	for (size_t i = 0; i < v.nframes; i++)
		allocated += tp_allocated(v.st[i]) ? FR : 0;
	assert_int_equal(listed, allocated);
	tp_view_free(&v);
}

static void test_export_basic(void **state)
{
	struct pma *pma = parent_new();
	struct pma_range *r, small[3];
	size_t n, n2 = 0;

	(void)state;
	tp_export_all(pma, &r, &n);
	assert_int_equal(n, 0);
	free(r);
	populate(pma, 0);
	populate(pma, 1 * GiB);
	tp_export_all(pma, &r, &n);
	assert_int_equal(n, 14);	/* 7 runs per copy: the first two allocations merge */
	assert_int_equal(r[0].base, 0);
	assert_int_equal(r[0].size, 3 * MiB);
	assert_int_equal(r[0].state, PMA_STATE_UNPIN);
	assert_int_equal(r[2].state, PMA_STATE_PIN | PMA_ATTR_PERSISTENT);
	check_export(pma, r, n);
	/* a short array: only @max written, *nr still the total */
	memset(small, 0xee, sizeof(small));
	assert_int_equal(pma_export(pma, small, 2, &n2), 0);
	assert_int_equal(n2, n);
	assert_ranges_equal(small, 2, r, 2);
	assert_int_equal(small[2].base, 0xeeeeeeeeeeeeeeeeull);
	assert_int_equal(pma_export(pma, small, 2, NULL), -EINVAL);
	assert_int_equal(pma_export(pma, NULL, 2, &n2), -EINVAL);
	free(r);
	pma_destroy(pma);
}

/* Export from one instance, import into a fresh one with the same regions: identical. */
static void test_export_import_roundtrip(void **state)
{
	struct pma *a = parent_new(), *b = parent_new();
	struct pma_range *ra, *rb;
	size_t na, nb;
	struct tp_view va, vb;
	struct pma_stats sa, sb;

	(void)state;
	populate(a, 0);
	populate(a, 200 * MiB);
	populate(a, 1 * GiB + 16 * MiB);
	assert_int_equal(pma_alloc_fixed(a, 2 * GiB, 4 * MiB, NULL), 0);	/* protected */
	tp_export_all(a, &ra, &na);
	assert_int_equal(pma_import(b, ra, na), 0);
	tp_export_all(b, &rb, &nb);
	assert_ranges_equal(ra, na, rb, nb);
	tp_view_read(a, &va);
	tp_view_read(b, &vb);
	assert_int_equal(va.nframes, vb.nframes);
	assert_memory_equal(va.st, vb.st, va.nframes * sizeof(*va.st));
	pma_get_stats(a, &sa);
	pma_get_stats(b, &sb);
	tp_assert_stats_equal(&sa, &sb);
	tp_verify(b);
	/* imported memory behaves like allocated memory */
	assert_int_equal(pma_unpin_pages(b, (uint64_t[]){ 3 * MiB, 3 * MiB + K128 }, 2, K128), 0);
	assert_int_equal(pma_free_range(b, 0, 4 * MiB, 0), 0);
	tp_verify(b);
	tp_view_free(&va);
	tp_view_free(&vb);
	free(ra);
	free(rb);
	pma_destroy(a);
	pma_destroy(b);
}

/* A VF slice migrates: export from one child, import into a child over another slice of
 * the same size is not allowed (addresses are absolute), but into a new child over the
 * same slice it is exact. */
static void test_child_export_import(void **state)
{
	struct pma *parent = parent_new(), *c1, *c2;
	struct pma_range *r1, *r2;
	size_t n1, n2;
	int err;

	(void)state;
	c1 = pma_child_create(parent, 128 * MiB, 32 * MiB, NULL, &err);
	assert_non_null(c1);
	populate(c1, 128 * MiB);
	tp_export_all(c1, &r1, &n1);
	check_export(c1, r1, n1);
	pma_child_destroy(c1);
	c2 = pma_child_create(parent, 64 * MiB, 32 * MiB, NULL, &err);
	assert_non_null(c2);
	assert_int_equal(pma_import(c2, r1, n1), -EINVAL);	/* outside its slice */
	assert_int_equal(pma_free_bytes(c2), 32 * MiB);
	pma_child_destroy(c2);
	c2 = pma_child_create(parent, 128 * MiB, 32 * MiB, NULL, &err);
	assert_non_null(c2);
	assert_int_equal(pma_import(c2, r1, n1), 0);
	tp_export_all(c2, &r2, &n2);
	assert_ranges_equal(r1, n1, r2, n2);
	tp_verify(c2);
	pma_child_destroy(c2);
	tp_verify(parent);
	free(r1);
	free(r2);
	pma_destroy(parent);
}

/* Imports that must fail whole, changing nothing. The target holds one allocation at
 * [20M, 22M); each list's last range is the bad one, after good ones. */
static const struct import_case {
	const char *name;
	struct pma_range bad;
	int want, alt;
} import_cases[] = {
	{ "overlaps an allocation", { 21 * MiB, 4 * MiB, PMA_STATE_PIN }, -EEXIST, NOALT },
	{ "overlaps an earlier range of the list", { 1 * MiB, 1 * MiB, PMA_STATE_PIN }, -EEXIST,
	  -EINVAL },
	{ "state FREE", { 30 * MiB, 1 * MiB, PMA_STATE_FREE }, -EINVAL, NOALT },
	{ "state 3", { 30 * MiB, 1 * MiB, 3 }, -EINVAL, NOALT },
	{ "state with EVICTING", { 30 * MiB, 1 * MiB, PMA_STATE_PIN | PMA_ATTR_EVICTING },
	  -EINVAL, NOALT },
	{ "base not 64K aligned", { 30 * MiB + 4096, 1 * MiB, PMA_STATE_PIN }, -EINVAL, NOALT },
	{ "size not 64K aligned", { 30 * MiB, 4096, PMA_STATE_PIN }, -EINVAL, NOALT },
	{ "size 0", { 30 * MiB, 0, PMA_STATE_PIN }, -EINVAL, NOALT },
	{ "outside every region", { 512 * MiB, 1 * MiB, PMA_STATE_PIN }, -EINVAL, NOALT },
	{ "past the end of a region", { 255 * MiB, 2 * MiB, PMA_STATE_PIN }, -EINVAL, NOALT },
	{ "wraps", { UINT64_MAX - K64 + 1, 2 * K64, PMA_STATE_PIN }, -EINVAL, NOALT },
	{ "onto a blacklisted frame", { 40 * MiB, 1 * MiB, PMA_STATE_PIN }, -ENOMEM, -EEXIST },
};

static void test_import_case(void **state)
{
	const struct import_case *c = *state;
	struct pma *pma = parent_new();
	struct pma_range list[4] = {
		{ 0, 2 * MiB, PMA_STATE_UNPIN },
		{ 4 * MiB, 1 * MiB, PMA_STATE_PIN | PMA_ATTR_PERSISTENT },
		{ 1 * GiB, 2 * MiB, PMA_STATE_PIN },
		c->bad,
	};
	struct tp_snap s;
	int ret;

	assert_int_equal(pma_alloc_fixed(pma, 20 * MiB, 2 * MiB, NULL), 0);
	assert_int_equal(pma_blacklist_add(pma, 40 * MiB + 3 * K64), 0);
	tp_snap_take(pma, &s);
	ret = pma_import(pma, list, 4);
	if (ret != c->want && (c->alt == NOALT || ret != c->alt))
		fail_msg("import returned %d, want %d", ret, c->want);
	tp_snap_assert_same(pma, &s);
	/* the good part alone goes in */
	assert_int_equal(pma_import(pma, list, 3), 0);
	tp_verify(pma);
	tp_snap_free(&s);
	pma_destroy(pma);
}

static void test_import_empty(void **state)
{
	struct pma *pma = parent_new();
	struct tp_snap s;

	(void)state;
	tp_snap_take(pma, &s);
	assert_int_equal(pma_import(pma, NULL, 0), 0);
	assert_int_equal(pma_import(pma, NULL, 1), -EINVAL);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	pma_destroy(pma);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(child_err_cases) + VGPU_ARRAY_SIZE(import_cases) +
				16];
	size_t n = 0;

	TP_TEST(tests, n, test_child_basic);
	TP_TABLE_TESTS(tests, n, child_err_cases, test_child_err_case);
	TP_TEST(tests, n, test_child_nested);
	TP_TEST(tests, n, test_child_blacklist);
	TP_TEST(tests, n, test_export_basic);
	TP_TEST(tests, n, test_export_import_roundtrip);
	TP_TEST(tests, n, test_child_export_import);
	TP_TABLE_TESTS(tests, n, import_cases, test_import_case);
	TP_TEST(tests, n, test_import_empty);
	return _cmocka_run_group_tests("pma_child", tests, n, NULL, NULL);
}
