// SPDX-License-Identifier: MIT
/* pma: allocation options and errors, regions, fixed allocations, pin/unpin, free, and
 * statistics checked against a brute-force recount from pma_query() after every call. */
#include "pma_test.h"

#define NOALT	1		/* no alternative return code accepted */
#define AT(x)	((x) + 1)	/* expected address + 1; 0 = not checked */
#define RG(i)	((i) + 1)	/* expected region + 1; 0 = not checked */

/* The standard layout: three unprotected regions of different speeds, a protected one,
 * and a slow 1 GiB region (the only one that holds a 512 MiB page). Ranked fastest first:
 * R3 (protected, 30) | R1 (20), R0 (10), R2 (5), R4 (1). */
static const struct tp_region std_regions[] = {
	{ 0, 64 * MiB, 10, false },
	{ 256 * MiB, 32 * MiB, 20, false },
	{ 512 * MiB, 16 * MiB, 5, false },
	{ 1 * GiB, 16 * MiB, 30, true },
	{ 2 * GiB, 1 * GiB, 1, false },
};

static struct pma *std_new(void)
{
	struct pma *pma = tp_new(NULL, std_regions, VGPU_ARRAY_SIZE(std_regions));

	tp_verify(pma);
	return pma;
}

static void assert_ret(int got, int want, int alt)
{
	if (got != want && (alt == NOALT || got != alt))
		fail_msg("returned %d, want %d%s", got, want, alt == NOALT ? "" : " (or alt)");
}

/* ---- pma_alloc_pages: options and errors ------------------------------------------- */

static const struct alloc_case {
	const char *name;
	size_t count;
	uint64_t page;
	struct pma_alloc_opts opts;
	int want, alt;
	int region;		/* RG(id) of every page, 0 = any */
	uint64_t lo, hi;	/* AT(lowest page), AT(highest page); 0 = any */
	size_t npages;		/* pages_allocated on success; 0 = count */
} alloc_cases[] = {
	/* sizes and region ranking */
	{ "64K x1 lands in the fastest unprotected region", 1, K64, { 0 }, 0, NOALT, RG(1) },
	{ "128K x4", 4, K128, { 0 }, 0, NOALT, RG(1) },
	{ "2M x8 contiguous", 8, M2, { .flags = PMA_CONTIGUOUS }, 0, NOALT, RG(1) },
	{ "2M x16 contiguous fills R1 exactly", 16, M2, { .flags = PMA_CONTIGUOUS }, 0, NOALT,
	  RG(1), AT(256 * MiB), AT(286 * MiB) },
	{ "2M x17 contiguous falls back to R0", 17, M2, { .flags = PMA_CONTIGUOUS }, 0, NOALT,
	  RG(0) },
	{ "512M x1 only fits the 1G region", 1, M512, { 0 }, 0, NOALT, RG(4) },
	{ "512M x2 contiguous", 2, M512, { .flags = PMA_CONTIGUOUS }, 0, NOALT, RG(4),
	  AT(2 * GiB), AT(2 * GiB + 512 * MiB) },
	{ "512M x3 is more than any region", 3, M512, { 0 }, -ENOMEM, NOALT },
	{ "64K x600 discontiguous spans R1 then R0", 600, K64, { 0 }, 0, NOALT },
	{ "64K more than all unprotected VRAM", 1136 * 16 + 1, K64, { 0 }, -ENOMEM, NOALT },
	{ "opts: PINNED", 3, K64, { .flags = PMA_PINNED }, 0, NOALT, RG(1) },
	{ "opts: PERSISTENT", 3, K128, { .flags = PMA_PERSISTENT }, 0, NOALT, RG(1) },
	{ "opts: PINNED|PERSISTENT contiguous", 2, M2,
	  { .flags = PMA_PINNED | PMA_PERSISTENT | PMA_CONTIGUOUS }, 0, NOALT, RG(1) },
	{ "opts: DONT_EVICT, NO_ZERO on a fresh instance", 2, K64,
	  { .flags = PMA_DONT_EVICT | PMA_NO_ZERO }, 0, NOALT, RG(1) },
	/* speed */
	{ "PREFER_SLOWEST", 1, K64, { .flags = PMA_PREFER_SLOWEST }, 0, NOALT, RG(4) },
	{ "MIN_SPEED 15", 1, K64, { .flags = PMA_MIN_SPEED, .min_speed = 15 }, 0, NOALT, RG(1) },
	{ "MIN_SPEED 10 + PREFER_SLOWEST", 1, K64,
	  { .flags = PMA_MIN_SPEED | PMA_PREFER_SLOWEST, .min_speed = 10 }, 0, NOALT, RG(0) },
	{ "MIN_SPEED above every unprotected region", 1, K64,
	  { .flags = PMA_MIN_SPEED, .min_speed = 21 }, -ENOMEM, NOALT },
	{ "MIN_SPEED 20: 2M x17 contiguous has no room", 17, M2,
	  { .flags = PMA_MIN_SPEED | PMA_CONTIGUOUS, .min_speed = 20 }, -ENOMEM, NOALT },
	/* protected */
	{ "PROTECTED goes to the protected region", 4, K64, { .flags = PMA_PROTECTED }, 0,
	  NOALT, RG(3) },
	{ "PROTECTED 2M x8 contiguous fills it", 8, M2,
	  { .flags = PMA_PROTECTED | PMA_CONTIGUOUS }, 0, NOALT, RG(3) },
	{ "PROTECTED 2M x9 is more than protected VRAM", 9, M2, { .flags = PMA_PROTECTED },
	  -ENOMEM, NOALT },
	{ "PROTECTED + PREFER_SLOWEST", 1, K64, { .flags = PMA_PROTECTED | PMA_PREFER_SLOWEST },
	  0, NOALT, RG(3) },
	{ "PROTECTED + MIN_SPEED 31", 1, K64, { .flags = PMA_PROTECTED | PMA_MIN_SPEED,
	  .min_speed = 31 }, -ENOMEM, NOALT },
	/* region id */
	{ "REGION_ID 2", 5, K64, { .flags = PMA_REGION_ID, .region_id = 2 }, 0, NOALT, RG(2) },
	{ "REGION_ID 2: 2M x9 does not fit", 9, M2, { .flags = PMA_REGION_ID, .region_id = 2 },
	  -ENOMEM, NOALT },
	{ "REGION_ID 3 + PROTECTED", 1, K64, { .flags = PMA_REGION_ID | PMA_PROTECTED,
	  .region_id = 3 }, 0, NOALT, RG(3) },
	{ "REGION_ID of a protected region without PROTECTED", 1, K64,
	  { .flags = PMA_REGION_ID, .region_id = 3 }, -ENOMEM, -EINVAL },
	{ "REGION_ID unknown (5)", 1, K64, { .flags = PMA_REGION_ID, .region_id = 5 }, -EINVAL,
	  NOALT },
	{ "REGION_ID unknown (32)", 1, K64, { .flags = PMA_REGION_ID, .region_id = 32 },
	  -EINVAL, NOALT },
	/* ranges */
	{ "RANGE inside R0", 8, K64, { .flags = PMA_RANGE, .range_begin = 16 * MiB,
	  .range_end = 32 * MiB }, 0, NOALT, RG(0) },
	{ "RANGE exactly filled, contiguous", 8, M2, { .flags = PMA_RANGE | PMA_CONTIGUOUS,
	  .range_begin = 16 * MiB, .range_end = 32 * MiB }, 0, NOALT, RG(0), AT(16 * MiB),
	  AT(30 * MiB) },
	{ "RANGE one page too small", 9, M2, { .flags = PMA_RANGE, .range_begin = 16 * MiB,
	  .range_end = 32 * MiB }, -ENOMEM, NOALT },
	{ "RANGE over a gap: contiguous cannot span regions", 4, M2,
	  { .flags = PMA_RANGE | PMA_CONTIGUOUS, .range_begin = 60 * MiB,
	    .range_end = 260 * MiB }, -ENOMEM, NOALT },
	{ "RANGE over a gap: discontiguous takes both sides", 4, M2,
	  { .flags = PMA_RANGE, .range_begin = 60 * MiB, .range_end = 260 * MiB }, 0, NOALT },
	{ "RANGE with no memory in it", 1, K64, { .flags = PMA_RANGE, .range_begin = 128 * MiB,
	  .range_end = 192 * MiB }, -ENOMEM, NOALT },
	{ "RANGE begin not page aligned", 1, M2, { .flags = PMA_RANGE, .range_begin = 1 * MiB,
	  .range_end = 8 * MiB }, -EINVAL, NOALT },
	{ "RANGE end not page aligned", 1, M2, { .flags = PMA_RANGE, .range_begin = 0,
	  .range_end = 7 * MiB }, -EINVAL, NOALT },
	{ "RANGE empty", 1, K64, { .flags = PMA_RANGE, .range_begin = 8 * MiB,
	  .range_end = 8 * MiB }, -EINVAL, NOALT },
	{ "RANGE inverted", 1, K64, { .flags = PMA_RANGE, .range_begin = 8 * MiB,
	  .range_end = 4 * MiB }, -EINVAL, NOALT },
	/* direction */
	{ "bottom-up by default: 64K at the base of R0", 1, K64,
	  { .flags = PMA_REGION_ID, .region_id = 0 }, 0, NOALT, RG(0), AT(0), AT(0) },
	{ "REVERSE: 64K at the top of R0", 1, K64,
	  { .flags = PMA_REGION_ID | PMA_REVERSE, .region_id = 0 }, 0, NOALT, RG(0),
	  AT(64 * MiB - K64), AT(64 * MiB - K64) },
	{ "REVERSE: 2M x3 contiguous at the top of R0", 3, M2,
	  { .flags = PMA_REGION_ID | PMA_REVERSE | PMA_CONTIGUOUS, .region_id = 0 }, 0, NOALT,
	  RG(0), AT(58 * MiB), AT(62 * MiB) },
	{ "REVERSE: 2M x2 discontiguous at the top of R0", 2, M2,
	  { .flags = PMA_REGION_ID | PMA_REVERSE, .region_id = 0 }, 0, NOALT, RG(0),
	  AT(60 * MiB), AT(62 * MiB) },
	{ "REVERSE alone: top of the highest region", 1, K64, { .flags = PMA_REVERSE }, 0, NOALT,
	  RG(4), AT(3 * GiB - K64), AT(3 * GiB - K64) },
	{ "REVERSE + PREFER_SLOWEST: still top-down", 1, K64,
	  { .flags = PMA_REVERSE | PMA_PREFER_SLOWEST }, 0, NOALT, RG(4), AT(3 * GiB - K64) },
	{ "REVERSE inside a RANGE", 1, K128, { .flags = PMA_RANGE | PMA_REVERSE,
	  .range_begin = 4 * MiB, .range_end = 6 * MiB }, 0, NOALT, RG(0),
	  AT(6 * MiB - K128), AT(6 * MiB - K128) },
	/* forced alignment */
	{ "FORCE_ALIGNMENT 1M, 64K x3 contiguous", 3, K64,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS, .alignment = 1 * MiB }, 0, NOALT },
	{ "FORCE_ALIGNMENT 32M, 2M x1 contiguous in R1", 1, M2,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS | PMA_REGION_ID, .region_id = 1,
	    .alignment = 32 * MiB }, 0, NOALT, RG(1), AT(256 * MiB), AT(256 * MiB) },
	{ "FORCE_ALIGNMENT 64M in R1 (base 256M, 32M long)", 1, K64,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS | PMA_REGION_ID, .region_id = 1,
	    .alignment = 64 * MiB }, 0, NOALT, RG(1), AT(256 * MiB), AT(256 * MiB) },
	{ "FORCE_ALIGNMENT 64M in R2 (base 512M) REVERSE", 1, K64,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS | PMA_REGION_ID | PMA_REVERSE,
	    .region_id = 2, .alignment = 64 * MiB }, 0, NOALT, RG(2), AT(512 * MiB),
	  AT(512 * MiB) },
	{ "FORCE_ALIGNMENT 1G: no aligned room in R1", 1, K64,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS | PMA_REGION_ID, .region_id = 1,
	    .alignment = 1 * GiB }, -ENOMEM, NOALT },
	{ "FORCE_ALIGNMENT below the page size is the page size", 2, M2,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS, .alignment = K64 }, 0, NOALT },
	{ "FORCE_ALIGNMENT equal to the page size, discontiguous", 4, K128,
	  { .flags = PMA_FORCE_ALIGNMENT, .alignment = K128 }, 0, NOALT },
	{ "FORCE_ALIGNMENT above the page size, discontiguous", 4, K64,
	  { .flags = PMA_FORCE_ALIGNMENT, .alignment = 1 * MiB }, -EINVAL, NOALT },
	{ "FORCE_ALIGNMENT not a power of two", 1, K64,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS, .alignment = 3 * K64 }, -EINVAL,
	  NOALT },
	{ "FORCE_ALIGNMENT below 64K", 1, K64,
	  { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS, .alignment = 32 * VGPU_KiB },
	  -EINVAL, NOALT },
	{ "FORCE_ALIGNMENT 0", 1, K64, { .flags = PMA_FORCE_ALIGNMENT | PMA_CONTIGUOUS },
	  -EINVAL, NOALT },
	/* partial */
	{ "ALLOW_PARTIAL takes what R2 has", 200, M2,
	  { .flags = PMA_ALLOW_PARTIAL | PMA_REGION_ID, .region_id = 2 }, 0, NOALT, RG(2), 0, 0,
	  8 },
	{ "ALLOW_PARTIAL when everything fits", 5, M2, { .flags = PMA_ALLOW_PARTIAL }, 0, NOALT,
	  RG(1), 0, 0, 5 },
	{ "ALLOW_PARTIAL with nothing there", 1, K64,
	  { .flags = PMA_ALLOW_PARTIAL | PMA_MIN_SPEED, .min_speed = 99 }, -ENOMEM, NOALT },
	{ "ALLOW_PARTIAL + CONTIGUOUS", 4, K64, { .flags = PMA_ALLOW_PARTIAL | PMA_CONTIGUOUS },
	  -EINVAL, NOALT },
	/* malformed */
	{ "count 0", 0, K64, { 0 }, -EINVAL, NOALT },
	{ "page size 0", 1, 0, { 0 }, -EINVAL, NOALT },
	{ "page size 32K", 1, 32 * VGPU_KiB, { 0 }, -EINVAL, NOALT },
	{ "page size 256K", 1, 256 * VGPU_KiB, { 0 }, -EINVAL, NOALT },
	{ "page size 1M", 1, 1 * MiB, { 0 }, -EINVAL, NOALT },
	{ "page size 4M", 1, 4 * MiB, { 0 }, -EINVAL, NOALT },
	{ "page size 1G", 1, 1 * GiB, { 0 }, -EINVAL, NOALT },
	{ "page size 64K + 1", 1, K64 + 1, { 0 }, -EINVAL, NOALT },
	{ "unknown flag bit 11", 1, K64, { .flags = 1u << 11 }, -EINVAL, NOALT },
	{ "unknown flag bit 31", 1, K64, { .flags = 1u << 31 }, -EINVAL, NOALT },
	{ "count * page size overflows", SIZE_MAX / 2, M512, { 0 }, -EINVAL, -ENOMEM },
	{ "count * page size overflows, contiguous", SIZE_MAX / 2, M512,
	  { .flags = PMA_CONTIGUOUS }, -EINVAL, -ENOMEM },
};

static void test_alloc_case(void **state)
{
	const struct alloc_case *c = *state;
	struct pma *pma = std_new();
	struct pma_alloc_opts o = c->opts;
	size_t cap = cmn_min(c->count, (size_t)1 << 15) + 1;
	uint64_t *pages = calloc(cap, sizeof(*pages));
	struct tp_snap before;
	int ret;

	assert_non_null(pages);
	tp_snap_take(pma, &before);
	o.pages_allocated = 12345;
	ret = pma_alloc_pages(pma, c->count, c->page, &o, pages);
	assert_ret(ret, c->want, c->alt);
	if (ret) {
		tp_snap_assert_same(pma, &before);
		/* the header: output fields are written whenever opts is not NULL */
		assert_int_equal(o.pages_allocated, 0);
		goto out;
	}

	size_t n = o.pages_allocated;
	uint64_t lo = UINT64_MAX, hi = 0;

	assert_int_equal(n, c->npages ? c->npages : c->count);
	tp_check_pages(&before.view, &o, c->page, pages, n);
	tp_check_priority(&before.view, &o, c->page, c->count, pages, n);
	tp_check_state(pma, &o, c->page, pages, n);
	for (size_t i = 0; i < n; i++) {
		lo = cmn_min(lo, pages[i]);
		hi = cmn_max(hi, pages[i]);
		if (c->region)
			assert_int_equal(tp_view_region(&before.view, pages[i]), c->region - 1);
	}
	if (c->lo)
		assert_int_equal(lo, c->lo - 1);
	if (c->hi)
		assert_int_equal(hi, c->hi - 1);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, n, c->page, 0), 0);
	tp_snap_assert_same(pma, &before);
out:
	tp_snap_free(&before);
	free(pages);
	pma_destroy(pma);
}

static void test_alloc_null_opts(void **state)
{
	struct pma *pma = std_new();
	uint64_t page = 0;

	(void)state;
	assert_int_equal(pma_alloc_pages(pma, 1, K64, NULL, &page), 0);
	assert_int_equal(tp_state(pma, page), PMA_STATE_UNPIN);
	assert_true(page >= 256 * MiB && page < 288 * MiB);	/* fastest unprotected */
	tp_verify(pma);
	pma_destroy(pma);
}

static void test_alloc_null_pages(void **state)
{
	struct pma *pma = std_new();
	struct tp_snap s;
	struct pma_alloc_opts o = { 0 };

	(void)state;
	tp_snap_take(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 1, K64, &o, NULL), -EINVAL);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* A failed discontiguous request that would have found most of its pages leaves none. */
static void test_alloc_failure_leaves_nothing(void **state)
{
	struct pma *pma = std_new();
	struct pma_alloc_opts o = { .flags = PMA_REGION_ID, .region_id = 2 };
	uint64_t *pages = calloc(300, sizeof(*pages));
	struct tp_snap s;

	(void)state;
	tp_snap_take(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 257, K64, &o, pages), -ENOMEM);
	tp_snap_assert_same(pma, &s);
	o.flags = PMA_REGION_ID | PMA_CONTIGUOUS;
	assert_int_equal(pma_alloc_pages(pma, 257, K64, &o, pages), -ENOMEM);
	tp_snap_assert_same(pma, &s);
	o.flags = PMA_REGION_ID;
	assert_int_equal(pma_alloc_pages(pma, 256, K64, &o, pages), 0);
	tp_verify(pma);
	tp_snap_free(&s);
	free(pages);
	pma_destroy(pma);
}

/* Contiguous is all-or-nothing per region even when two regions touch. */
static void test_alloc_contig_within_one_region(void **state)
{
	static const struct tp_region r[] = {
		{ 0, 4 * MiB, 1, false }, { 4 * MiB, 4 * MiB, 1, false },
	};
	struct pma *pma = tp_new(NULL, r, 2);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	uint64_t pages[96];
	struct tp_snap s;

	(void)state;
	tp_snap_take(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 3, M2, &o, pages), -ENOMEM);
	tp_snap_assert_same(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 96, K64, &o, pages), -ENOMEM);
	tp_snap_assert_same(pma, &s);
	o.flags = 0;
	assert_int_equal(pma_alloc_pages(pma, 3, M2, &o, pages), 0);
	tp_check_pages(&s.view, &o, M2, pages, 3);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, 3, M2, 0), 0);
	assert_int_equal(pma_alloc_pages(pma, 96, K64, &o, pages), 0);
	tp_check_pages(&s.view, &o, K64, pages, 96);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, 96, K64, 0), 0);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* A region whose base is not 2 MiB aligned: pages stay aligned on absolute addresses. */
static void test_alloc_unaligned_region_base(void **state)
{
	struct pma *pma = tp_new1(K64, 8 * MiB);	/* [64K, 8M + 64K) */
	struct pma_alloc_opts o = { 0 };
	struct pma_stats st;
	uint64_t pages[4];
	struct tp_snap s;

	(void)state;
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_2m_pages, 3);		/* 2M, 4M, 6M */
	tp_verify(pma);
	tp_snap_take(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 4, M2, &o, pages), -ENOMEM);
	tp_snap_assert_same(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 3, M2, &o, pages), 0);
	tp_check_pages(&s.view, &o, M2, pages, 3);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, 3, M2, 0), 0);
	o.flags = PMA_CONTIGUOUS | PMA_FORCE_ALIGNMENT;
	o.alignment = 4 * MiB;
	assert_int_equal(pma_alloc_pages(pma, 1, K64, &o, pages), 0);
	assert_int_equal(pages[0], 4 * MiB);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, 1, K64, 0), 0);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* ---- regions ---------------------------------------------------------------------- */

static uint64_t bad_many[PMA_MAX_BLACKLIST + 1];	/* distinct frames of [0, 64M) */

static const struct region_case {
	const char *name;
	struct pma_region_desc d;
	const uint64_t *bad;
	size_t nr_bad;
	int want, alt;
	uint64_t bad_frame;	/* AT(frame that must read BLACKLIST), 0 = none */
} region_cases[] = {
	/* an instance that already has [64M, 128M) */
	{ "ok: below, touching", { 0, 64 * MiB, 1, false }, NULL, 0, 1, NOALT },
	{ "ok: above, touching", { 128 * MiB, 64 * MiB, 1, false }, NULL, 0, 1, NOALT },
	{ "ok: protected", { 1 * GiB, 64 * MiB, 1, true }, NULL, 0, 1, NOALT },
	{ "ok: bad address list", { 256 * MiB, 16 * MiB, 1, false },
	  (const uint64_t[]){ 256 * MiB + 3 * K64 }, 1, 1, NOALT, AT(256 * MiB + 3 * K64) },
	{ "ok: unaligned bad address retires its frame", { 256 * MiB, 16 * MiB, 1, false },
	  (const uint64_t[]){ 256 * MiB + K64 + 100 }, 1, 1, NOALT, AT(256 * MiB + K64) },
	{ "ok: far up", { 1ull << 47, 1 * GiB, 1, false }, NULL, 0, 1, NOALT },
	{ "base not 64K aligned", { 256 * MiB + 32 * VGPU_KiB, 1 * MiB }, NULL, 0, -EINVAL,
	  NOALT },
	{ "size not 64K aligned", { 256 * MiB, 1 * MiB + 4096 }, NULL, 0, -EINVAL, NOALT },
	{ "size 0", { 256 * MiB, 0 }, NULL, 0, -EINVAL, NOALT },
	{ "overlaps the start", { 32 * MiB, 64 * MiB }, NULL, 0, -EINVAL, NOALT },
	{ "overlaps the end", { 96 * MiB, 64 * MiB }, NULL, 0, -EINVAL, NOALT },
	{ "inside", { 80 * MiB, 1 * MiB }, NULL, 0, -EINVAL, NOALT },
	{ "same", { 64 * MiB, 64 * MiB }, NULL, 0, -EINVAL, NOALT },
	{ "encloses", { 0, 256 * MiB }, NULL, 0, -EINVAL, NOALT },
	{ "base + size wraps", { UINT64_MAX - K64 + 1, 2 * K64 }, NULL, 0, -EINVAL, NOALT },
	{ "bad address outside the region", { 256 * MiB, 16 * MiB },
	  (const uint64_t[]){ 512 * MiB }, 1, -EINVAL, NOALT },
	{ "bad address list NULL", { 256 * MiB, 16 * MiB }, NULL, 1, -EINVAL, NOALT },
	{ "more bad addresses than the blacklist holds", { 0, 64 * MiB }, bad_many,
	  PMA_MAX_BLACKLIST + 1, -EINVAL, -ENOMEM },
};

static void test_region_case(void **state)
{
	const struct region_case *c = *state;
	struct pma *pma = tp_new1(64 * MiB, 64 * MiB);
	struct pma_region_desc got;
	struct tp_snap s;
	int ret;

	tp_snap_take(pma, &s);
	ret = pma_region_add(pma, &c->d, c->bad, c->nr_bad);
	assert_ret(ret, c->want, c->alt);
	if (ret < 0) {
		assert_int_equal(pma_region_count(pma), 1);
		tp_snap_assert_same(pma, &s);
		goto out;
	}
	assert_int_equal(pma_region_count(pma), 2);
	assert_int_equal(pma_region_get(pma, 1, &got), 0);
	assert_int_equal(got.base, c->d.base);
	assert_int_equal(got.size, c->d.size);
	assert_int_equal(got.performance, c->d.performance);
	assert_int_equal(got.protected_mem, c->d.protected_mem);
	if (c->bad_frame) {
		assert_true(tp_state(pma, c->bad_frame - 1) & PMA_ATTR_BLACKLIST);
		assert_false(tp_state(pma, c->bad_frame - 1 + FR) & PMA_ATTR_BLACKLIST);
	}
	tp_verify(pma);
out:
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* 32 regions are accepted, a 33rd is not; ids are 0, 1, 2 ... */
static void test_region_limit(void **state)
{
	struct pma *pma = pma_create(NULL);
	struct pma_region_desc d = { 0 }, got;

	(void)state;
	assert_non_null(pma);
	assert_int_equal(pma_region_count(pma), 0);
	for (unsigned int i = 0; i < PMA_MAX_REGIONS; i++) {
		d = (struct pma_region_desc){ i * 4 * MiB, 2 * MiB + i * K64, i * 7 % 5, i % 3 == 0 };
		assert_int_equal(pma_region_add(pma, &d, NULL, 0), (int)i);
	}
	d = (struct pma_region_desc){ 1 * GiB, 2 * MiB, 0, false };
	assert_int_equal(pma_region_add(pma, &d, NULL, 0), -EINVAL);
	assert_int_equal(pma_region_count(pma), PMA_MAX_REGIONS);
	for (unsigned int i = 0; i < PMA_MAX_REGIONS; i++) {
		assert_int_equal(pma_region_get(pma, i, &got), 0);
		assert_int_equal(got.base, i * 4 * MiB);
		assert_int_equal(got.size, 2 * MiB + i * K64);
		assert_int_equal(got.performance, i * 7 % 5);
		assert_int_equal(got.protected_mem, i % 3 == 0);
	}
	assert_int_equal(pma_region_get(pma, PMA_MAX_REGIONS, &got), -EINVAL);
	tp_verify(pma);
	pma_destroy(pma);
}

/* Addresses outside every region (before, between, after) are rejected by query. */
static void test_query_outside(void **state)
{
	struct pma *pma = std_new();
	static const uint64_t out[] = { 64 * MiB, 128 * MiB, 288 * MiB, 3 * GiB, UINT64_MAX };
	uint32_t st;

	(void)state;
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(out); i++)
		assert_int_equal(pma_query(pma, out[i], &st), -EINVAL);
	assert_int_equal(pma_query(pma, 64 * MiB - 1, &st), 0);
	assert_int_equal(st, PMA_STATE_FREE);
	pma_destroy(pma);
}

/* ---- fixed allocations -------------------------------------------------------------- */

static const struct fixed_case {
	const char *name;
	uint64_t addr, size;
	uint32_t flags;
	int want, alt;
} fixed_cases[] = {
	/* set up: [4M, 6M) pinned, the frame at 10M + 192K blacklisted */
	{ "exact 2M at the base", 0, 2 * MiB, 0, 0, NOALT },
	{ "touching an allocation from below", 2 * MiB, 2 * MiB, 0, 0, NOALT },
	{ "touching an allocation from above", 6 * MiB, K64, 0, 0, NOALT },
	{ "odd size, odd start", 7 * MiB + 3 * K64, 5 * K64, 0, 0, NOALT },
	{ "PINNED", 8 * MiB, 1 * MiB, PMA_PINNED, 0, NOALT },
	{ "PERSISTENT", 8 * MiB, 1 * MiB, PMA_PERSISTENT, 0, NOALT },
	{ "PINNED|PERSISTENT", 8 * MiB, 1 * MiB, PMA_PINNED | PMA_PERSISTENT, 0, NOALT },
	{ "the whole last region", 2 * GiB, 1 * GiB, 0, 0, NOALT },
	{ "overlaps an allocation", 5 * MiB, 2 * MiB, 0, -EEXIST, NOALT },
	{ "inside an allocation", 4 * MiB + K64, K64, 0, -EEXIST, NOALT },
	{ "covers an allocation", 2 * MiB, 8 * MiB, 0, -EEXIST, NOALT },
	{ "covers a blacklisted frame", 10 * MiB, 1 * MiB, 0, -ENOMEM, NOALT },
	{ "is a blacklisted frame", 10 * MiB + 3 * K64, K64, 0, -ENOMEM, NOALT },
	{ "address not 64K aligned", 1 * MiB + 4096, K64, 0, -EINVAL, NOALT },
	{ "size not 64K aligned", 1 * MiB, K64 + 4096, 0, -EINVAL, NOALT },
	{ "size 0", 1 * MiB, 0, 0, -EINVAL, NOALT },
	{ "outside every region", 128 * MiB, K64, 0, -EINVAL, NOALT },
	{ "past the end of a region", 62 * MiB, 4 * MiB, 0, -EINVAL, NOALT },
	{ "address + size wraps", UINT64_MAX - K64 + 1, 2 * K64, 0, -EINVAL, NOALT },
};

static void test_fixed_case(void **state)
{
	const struct fixed_case *c = *state;
	struct pma *pma = std_new();
	struct pma_alloc_opts pin = { .flags = PMA_PINNED }, o = { .flags = c->flags };
	struct tp_snap s;
	int ret;

	assert_int_equal(pma_alloc_fixed(pma, 4 * MiB, 2 * MiB, &pin), 0);
	assert_int_equal(pma_blacklist_add(pma, 10 * MiB + 3 * K64), 0);
	tp_verify(pma);
	tp_snap_take(pma, &s);
	ret = pma_alloc_fixed(pma, c->addr, c->size, &o);
	assert_ret(ret, c->want, c->alt);
	if (ret) {
		tp_snap_assert_same(pma, &s);
		goto out;
	}
	uint64_t page = c->addr;

	for (uint64_t a = c->addr; a < c->addr + c->size; a += FR)
		assert_true(tp_allocatable(tp_view_state(&s.view, a)));
	tp_check_state(pma, &o, c->size, &page, 1);
	assert_int_equal(tp_state(pma, c->addr + c->size - FR) & PMA_STATE_MASK,
			 (c->flags & PMA_PINNED) ? PMA_STATE_PIN : PMA_STATE_UNPIN);
	if (c->addr >= FR && tp_view_region(&s.view, c->addr - FR) >= 0)
		assert_int_equal(tp_state(pma, c->addr - FR), tp_view_state(&s.view, c->addr - FR));
	tp_verify(pma);
	/* The same range again is taken now. */
	assert_int_equal(pma_alloc_fixed(pma, c->addr, c->size, &o), -EEXIST);
	assert_int_equal(pma_free_range(pma, c->addr, c->size, 0), 0);
	tp_snap_assert_same(pma, &s);
out:
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* NULL opts: unpinned, not persistent. */
static void test_fixed_null_opts(void **state)
{
	struct pma *pma = std_new();

	(void)state;
	assert_int_equal(pma_alloc_fixed(pma, 2 * MiB, 2 * MiB, NULL), 0);
	assert_int_equal(tp_state(pma, 2 * MiB), PMA_STATE_UNPIN);
	assert_int_equal(tp_state(pma, 4 * MiB - FR), PMA_STATE_UNPIN);
	assert_int_equal(tp_state(pma, 4 * MiB), PMA_STATE_FREE);
	tp_verify(pma);
	pma_destroy(pma);
}

/* 2 MiB frees whose group is only partly allocated: the fast paths check whole groups with
 * the group bits, and a group with one free frame must fail them like a wholly free one. */
static void test_free_2m_partial_group(void **state)
{
	struct pma *pma = std_new();
	struct pma_alloc_opts o = { .flags = PMA_PINNED };
	const uint64_t list[] = { 0, 4 * MiB }, run[] = { 2 * MiB, 4 * MiB };
	struct tp_snap s;

	(void)state;
	assert_int_equal(pma_alloc_fixed(pma, 0, 8 * MiB, &o), 0);
	/* One 64 KiB frame of the third group freed: that group is partial. */
	assert_int_equal(pma_free_range(pma, 4 * MiB + 3 * K64, K64, 0), 0);
	tp_verify(pma);
	tp_snap_take(pma, &s);
	assert_int_equal(pma_free_pages(pma, &list[1], 1, M2, 0), -ENOENT);
	assert_int_equal(pma_free_pages(pma, list, 2, M2, 0), -ENOENT);	/* a list */
	assert_int_equal(pma_free_pages(pma, run, 2, M2, 0), -ENOENT);	/* a run */
	assert_int_equal(pma_free_range(pma, 4 * MiB, 2 * MiB, 0), -ENOENT);
	assert_int_equal(pma_free_range(pma, 2 * MiB, 6 * MiB, 0), -ENOENT);
	tp_snap_assert_same(pma, &s);
	tp_verify(pma);
	/* The whole groups around it free as usual. */
	assert_int_equal(pma_free_pages(pma, list, 1, M2, 0), 0);
	assert_int_equal(pma_free_range(pma, 6 * MiB, 2 * MiB, 0), 0);
	assert_int_equal(tp_state(pma, 0), PMA_STATE_FREE);
	assert_int_equal(tp_state(pma, 6 * MiB), PMA_STATE_FREE);
	assert_int_equal(tp_state(pma, 4 * MiB), PMA_STATE_PIN);
	tp_verify(pma);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* Lists of 64 KiB pages in a region holding only pinned, non-persistent allocations, which
 * the allocator frees a page at a time after one checking pass: a page already free, a page
 * named twice, a page outside every region in the middle of a list that is not ascending, or
 * one that is not aligned fails the whole call and changes nothing; a descending list frees;
 * an ascending list that frees the last frames of a 2 MiB group makes the group whole. */
static void test_free_64k_lists(void **state)
{
	struct pma *pma = std_new();
	struct pma_alloc_opts o = { .flags = PMA_PINNED };
	const uint64_t one_free[] = { K64, 3 * K64, 5 * K64 }, twice[] = { 6 * K64, 6 * K64 };
	const uint64_t outside[] = { 7 * K64, 100 * GiB, 8 * K64 };
	const uint64_t unaligned[] = { 9 * K64, 10 * K64 + 4096 }, down[] = { 12 * K64, 11 * K64 };
	uint64_t group[32];
	struct pma_stats st, before;
	struct tp_snap s;

	(void)state;
	assert_int_equal(pma_alloc_fixed(pma, 0, 4 * MiB, &o), 0);
	assert_int_equal(pma_free_pages(pma, &one_free[1], 1, K64, 0), 0);
	tp_verify(pma);
	tp_snap_take(pma, &s);
	assert_int_equal(pma_free_pages(pma, one_free, 3, K64, 0), -ENOENT);
	assert_int_equal(pma_free_pages(pma, twice, 2, K64, 0), -ENOENT);
	assert_int_equal(pma_free_pages(pma, outside, 3, K64, 0), -EINVAL);
	assert_int_equal(pma_free_pages(pma, unaligned, 2, K64, 0), -EINVAL);
	tp_snap_assert_same(pma, &s);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, down, 2, K64, 0), 0);
	assert_int_equal(tp_state(pma, 11 * K64), PMA_STATE_FREE);
	assert_int_equal(tp_state(pma, 12 * K64), PMA_STATE_FREE);
	assert_int_equal(tp_state(pma, 13 * K64), PMA_STATE_PIN);
	tp_verify(pma);
	/* The second group: its first frame alone, then the other 31 in one list. */
	for (size_t i = 0; i < 32; i++)
		group[i] = 2 * MiB + i * K64;
	pma_get_stats(pma, &before);
	assert_int_equal(pma_free_pages(pma, group, 1, K64, 0), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, before.free_bytes + K64);
	assert_int_equal(st.free_2m_pages, before.free_2m_pages);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, &group[1], 31, K64, 0), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, before.free_bytes + 2 * MiB);
	assert_int_equal(st.free_2m_pages, before.free_2m_pages + 1);
	tp_verify(pma);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* A run of 2 MiB pages whose addresses wrap past 2^64 to an allocated page is malformed:
 * -EINVAL, nothing changes. */
static void test_free_wrapping_run(void **state)
{
	struct pma *pma = std_new();
	struct pma_alloc_opts o = { .flags = PMA_PINNED };
	const uint64_t wrap[] = { 0 - M2, 0 };
	struct tp_snap s;

	(void)state;
	assert_int_equal(pma_alloc_fixed(pma, 0, 2 * MiB, &o), 0);
	tp_snap_take(pma, &s);
	assert_int_equal(pma_free_pages(pma, wrap, 2, M2, 0), -EINVAL);
	tp_snap_assert_same(pma, &s);
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, &wrap[1], 1, M2, 0), 0);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* ---- pin, unpin, free ------------------------------------------------------------------ */

enum op { PIN, UNPIN, FREE, FREE_RANGE };
#define A	(0 * MiB)	/* 2M UNPIN */
#define B	(2 * MiB)	/* 2M PIN */
#define C	(4 * MiB)	/* 2M free */
#define D	(6 * MiB)	/* 2M UNPIN|PERSISTENT */
#define STATES0	"UPFu"
#define OK_SAME	NULL

static const struct state_case {
	const char *name;
	enum op op;
	uint64_t pages[4];	/* FREE_RANGE: pages[0] = addr, pages[1] = size */
	size_t count;
	uint64_t page;
	unsigned int flags;
	int want, alt;
	const char *after;	/* A..D afterwards: F U P, u p persistent, ? mixed */
	uint64_t probe;		/* AT(frame) whose state must be probe_state */
	uint32_t probe_state;
	bool run64k;		/* pages = 32 consecutive 64K pages from pages[0] */
	bool null_pages;
} state_cases[] = {
	{ "pin UNPIN", PIN, { A }, 1, M2, 0, 0, NOALT, "PPFu" },
	{ "pin PIN", PIN, { B }, 1, M2, 0, -EPERM, NOALT, STATES0 },
	{ "pin free", PIN, { C }, 1, M2, 0, -ENOENT, -EPERM, STATES0 },
	{ "pin UNPIN|PERSISTENT", PIN, { D }, 1, M2, 0, 0, NOALT, "UPFp" },
	{ "pin UNPIN + PIN: nothing changes", PIN, { A, B }, 2, M2, 0, -EPERM, NOALT, STATES0 },
	{ "pin PIN + UNPIN: nothing changes", PIN, { B, A }, 2, M2, 0, -EPERM, NOALT, STATES0 },
	{ "pin UNPIN + free: nothing changes", PIN, { A, C }, 2, M2, 0, -ENOENT, -EPERM,
	  STATES0 },
	{ "pin two scattered pages", PIN, { D, A }, 2, M2, 0, 0, NOALT, "PPFp" },
	{ "pin 32 x 64K over A", PIN, { A }, 32, K64, 0, 0, NOALT, "PPFu", 0, 0, true },
	{ "pin one 64K frame inside A", PIN, { A + K64 }, 1, K64, 0, 0, NOALT, "?PFu",
	  AT(A + K64), PMA_STATE_PIN },
	{ "pin: page not aligned to its size", PIN, { A + K64 }, 1, K128, 0, -EINVAL, NOALT,
	  STATES0 },
	{ "pin: bad page size", PIN, { A }, 1, 256 * VGPU_KiB, 0, -EINVAL, NOALT, STATES0 },
	{ "pin: outside every region", PIN, { 128 * MiB }, 1, K64, 0, -EINVAL, -ENOENT,
	  STATES0 },
	{ "pin: NULL pages", PIN, { 0 }, 1, K64, 0, -EINVAL, NOALT, STATES0, 0, 0, false, true },
	{ "pin: count 0", PIN, { A }, 0, M2, 0, 0, -EINVAL, STATES0 },
	{ "unpin PIN", UNPIN, { B }, 1, M2, 0, 0, NOALT, "UUFu" },
	{ "unpin UNPIN", UNPIN, { A }, 1, M2, 0, -EPERM, NOALT, STATES0 },
	{ "unpin free", UNPIN, { C }, 1, M2, 0, -ENOENT, -EPERM, STATES0 },
	{ "unpin PIN + UNPIN: nothing changes", UNPIN, { B, A }, 2, M2, 0, -EPERM, NOALT,
	  STATES0 },
	{ "unpin 32 x 64K over B", UNPIN, { B }, 32, K64, 0, 0, NOALT, "UUFu", 0, 0, true },
	{ "unpin: bad page size", UNPIN, { B }, 1, 0, 0, -EINVAL, NOALT, STATES0 },
	{ "free UNPIN", FREE, { A }, 1, M2, 0, 0, NOALT, "FPFu" },
	{ "free PIN", FREE, { B }, 1, M2, 0, 0, NOALT, "UFFu" },
	{ "free clears PERSISTENT", FREE, { D }, 1, M2, 0, 0, NOALT, "UPFF" },
	{ "free two scattered pages", FREE, { D, A }, 2, M2, 0, 0, NOALT, "FPFF" },
	{ "free free memory", FREE, { C }, 1, M2, 0, -ENOENT, NOALT, STATES0 },
	{ "free allocated + free: nothing changes", FREE, { A, C }, 2, M2, 0, -ENOENT, NOALT,
	  STATES0 },
	{ "free the same page twice in one call", FREE, { A, A }, 2, M2, 0, -ENOENT, -EINVAL,
	  STATES0 },
	{ "free 32 x 64K over A", FREE, { A }, 32, K64, 0, 0, NOALT, "FPFu", 0, 0, true },
	{ "free one 64K frame inside A", FREE, { A + K64 }, 1, K64, 0, 0, NOALT, "?PFu",
	  AT(A + K64), PMA_STATE_FREE },
	{ "free part of a 2M page as 128K", FREE, { B + K128 }, 1, K128, 0, 0, NOALT, "U?Fu",
	  AT(B + K128 + K64), PMA_STATE_FREE },
	{ "free: page not aligned to its size", FREE, { A + K64 }, 1, M2, 0, -EINVAL, NOALT,
	  STATES0 },
	{ "free: bad page size", FREE, { A }, 1, 3 * K64, 0, -EINVAL, NOALT, STATES0 },
	{ "free: unknown flag", FREE, { A }, 1, M2, 0x80, -EINVAL, NOALT, STATES0 },
	{ "free: outside every region", FREE, { 128 * MiB }, 1, K64, 0, -EINVAL, -ENOENT,
	  STATES0 },
	{ "free: NULL pages", FREE, { 0 }, 1, K64, 0, -EINVAL, NOALT, STATES0, 0, 0, false, true },
	{ "free with SKIP_SCRUB (no scrubbing configured)", FREE, { A }, 1, M2,
	  PMA_FREE_SKIP_SCRUB, 0, NOALT, "FPFu" },
	{ "free_range over UNPIN and PIN", FREE_RANGE, { 0, 4 * MiB }, 0, 0, 0, 0, NOALT,
	  "FFFu" },
	{ "free_range one frame", FREE_RANGE, { B + 5 * K64, K64 }, 0, 0, 0, 0, NOALT, "U?Fu",
	  AT(B + 5 * K64), PMA_STATE_FREE },
	{ "free_range persistent", FREE_RANGE, { D, 2 * MiB }, 0, 0, 0, 0, NOALT, "UPFF" },
	{ "free_range reaching free memory", FREE_RANGE, { B, 4 * MiB }, 0, 0, 0, -ENOENT,
	  NOALT, STATES0 },
	{ "free_range size 0", FREE_RANGE, { A, 0 }, 0, 0, 0, -EINVAL, NOALT, STATES0 },
	{ "free_range not 64K aligned", FREE_RANGE, { A + 4096, K64 }, 0, 0, 0, -EINVAL, NOALT,
	  STATES0 },
	{ "free_range size not 64K aligned", FREE_RANGE, { A, K64 + 4096 }, 0, 0, 0, -EINVAL,
	  NOALT, STATES0 },
	{ "free_range outside every region", FREE_RANGE, { 128 * MiB, 2 * MiB }, 0, 0, 0,
	  -EINVAL, -ENOENT, STATES0 },
	{ "free_range: unknown flag", FREE_RANGE, { A, 2 * MiB }, 0, 0, 0x80, -EINVAL, NOALT,
	  STATES0 },
};

static uint32_t state_of(char c)
{
	switch (c) {
	case 'U': return PMA_STATE_UNPIN;
	case 'P': return PMA_STATE_PIN;
	case 'u': return PMA_STATE_UNPIN | PMA_ATTR_PERSISTENT;
	case 'p': return PMA_STATE_PIN | PMA_ATTR_PERSISTENT;
	default: return PMA_STATE_FREE;
	}
}

static void test_state_case(void **state)
{
	const struct state_case *c = *state;
	struct pma *pma = std_new();
	struct pma_alloc_opts o = { 0 };
	uint64_t pages[32];
	struct tp_snap s;
	int ret;

	assert_int_equal(pma_alloc_fixed(pma, A, 2 * MiB, &o), 0);
	o.flags = PMA_PINNED;
	assert_int_equal(pma_alloc_fixed(pma, B, 2 * MiB, &o), 0);
	o.flags = PMA_PERSISTENT;
	assert_int_equal(pma_alloc_fixed(pma, D, 2 * MiB, &o), 0);
	tp_verify(pma);
	tp_snap_take(pma, &s);

	memcpy(pages, c->pages, sizeof(c->pages));
	size_t count = c->count;

	if (c->run64k) {
		for (size_t i = 0; i < 32; i++)
			pages[i] = c->pages[0] + i * K64;
	}
	const uint64_t *p = c->null_pages ? NULL : pages;

	switch (c->op) {
	case PIN: ret = pma_pin_pages(pma, p, count, c->page); break;
	case UNPIN: ret = pma_unpin_pages(pma, p, count, c->page); break;
	case FREE: ret = pma_free_pages(pma, p, count, c->page, c->flags); break;
	default: ret = pma_free_range(pma, c->pages[0], c->pages[1], c->flags); break;
	}
	assert_ret(ret, c->want, c->alt);
	if (ret) {
		tp_snap_assert_same(pma, &s);
		goto out;
	}
	for (int blk = 0; blk < 4; blk++) {
		if (c->after[blk] == '?')
			continue;
		for (uint64_t a = blk * 2 * MiB; a < (blk + 1) * 2 * MiB; a += FR)
			if (tp_state(pma, a) != state_of(c->after[blk]))
				fail_msg("frame 0x%llx: state 0x%x, want '%c'", (unsigned long long)a,
					 tp_state(pma, a), c->after[blk]);
	}
	if (c->probe)
		assert_int_equal(tp_state(pma, c->probe - 1), c->probe_state);
	tp_verify(pma);
out:
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* Consecutive pages are freed as one range: runs of every length from every offset
 * (crossing 64-frame words and 2 MiB groups, aligned or not) free exactly their frames. */
static void test_free_runs(void **state)
{
	struct pma *pma = tp_new1(0, 16 * MiB);
	uint64_t pages[72];
	struct tp_snap s;

	(void)state;
	tp_snap_take(pma, &s);
	for (uint64_t page = K64; page <= K128; page *= 2)
		for (uint64_t off = 0; off < 72 * FR; off += page)
			for (size_t n = 1; n * page <= 72 * FR; n += n < 8 ? 1 : 3) {
				uint64_t base = 2 * MiB + off;

				for (size_t i = 0; i < n; i++)
					pages[i] = base + i * page;
				assert_int_equal(pma_alloc_fixed(pma, base, n * page, NULL), 0);
				assert_int_equal(pma_free_pages(pma, pages, n, page, 0), 0);
				if (pma_check(pma) || pma_free_bytes(pma) != 16 * MiB)
					fail_msg("%zu x 0x%llx from 0x%llx", n, (unsigned long long)page,
						 (unsigned long long)base);
				assert_int_equal(pma_alloc_fixed(pma, base, n * page, NULL), 0);
				assert_int_equal(pma_free_range(pma, base, n * page, 0), 0);
			}
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	pma_destroy(pma);
}

/* ---- statistics ---------------------------------------------------------------------- */

/* Random fixed allocations, frees, pins and blacklisting; after each the statistics must
 * equal the brute-force recount (largest free extent included). */
static void test_stats_random(void **state)
{
	struct pma *pma = std_new();
	uint64_t seed = 0x5eed5eedull, addr, size;
	struct pma_region_desc d;
	unsigned int nr = pma_region_count(pma);

	(void)state;
	for (int op = 0; op < 300; op++) {
		assert_int_equal(pma_region_get(pma, (unsigned int)tp_randn(&seed, nr), &d), 0);
		if (d.protected_mem)	/* fixed allocations there are not specified */
			continue;
		uint64_t frames = d.size / FR, len = 1 + tp_randn(&seed, 64);

		if (d.size > 64 * MiB)		/* keep to the low part of the 1G region */
			frames = 2048;
		addr = d.base + tp_randn(&seed, frames) * FR;
		size = cmn_min(len, frames - (addr - d.base) / FR) * FR;
		switch (tp_randn(&seed, 4)) {
		case 0:
		case 1: {
			struct pma_alloc_opts o = { .flags = tp_randn(&seed, 2) ? PMA_PINNED : 0 };
			int ret = pma_alloc_fixed(pma, addr, size, &o);

			assert_true(ret == 0 || ret == -EEXIST || ret == -ENOMEM);
			break;
		}
		case 2: {
			/* free the allocated run starting at addr, if any */
			uint64_t n = 0;

			while (n * FR < size && tp_allocated(tp_state(pma, addr + n * FR)))
				n++;
			if (n)
				assert_int_equal(pma_free_range(pma, addr, n * FR, 0), 0);
			break;
		}
		default:
			if (tp_randn(&seed, 8) == 0) {
				int ret = pma_blacklist_add(pma, addr);

				assert_true(ret == 0 || ret == -EEXIST);
			}
			break;
		}
		tp_verify(pma);
	}
	pma_destroy(pma);
}

/* Hand-made layouts with known figures, including the 2 MiB group count. */
static void test_stats_known(void **state)
{
	struct pma *pma = tp_new1(0, 16 * MiB);
	struct pma_stats st;

	(void)state;
	pma_get_stats(pma, &st);
	assert_int_equal(st.total_bytes, 16 * MiB);
	assert_int_equal(st.free_bytes, 16 * MiB);
	assert_int_equal(st.free_2m_pages, 8);
	assert_int_equal(st.largest_free_bytes, 16 * MiB);
	assert_int_equal(st.scrubbing_bytes, 0);
	assert_int_equal(st.blacklisted_bytes, 0);
	/* one frame in the 3rd 2M group and one in the 6th */
	assert_int_equal(pma_alloc_fixed(pma, 4 * MiB + 5 * K64, K64, NULL), 0);
	assert_int_equal(pma_alloc_fixed(pma, 10 * MiB, K64, NULL), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 16 * MiB - 2 * K64);
	assert_int_equal(st.free_2m_pages, 6);
	assert_int_equal(st.largest_free_bytes, 6 * MiB - K64);	/* (10M, 16M) */
	assert_int_equal(pma_largest_free(pma), 6 * MiB - K64);
	assert_int_equal(pma_free_bytes(pma), 16 * MiB - 2 * K64);
	tp_verify(pma);
	assert_int_equal(pma_free_range(pma, 10 * MiB, K64, 0), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.largest_free_bytes, 12 * MiB - 6 * K64);	/* (4M + 5*64K, 16M) */
	assert_int_equal(st.free_2m_pages, 7);
	tp_verify(pma);
	assert_int_equal(pma_blacklist_add(pma, 15 * MiB), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.blacklisted_bytes, K64);
	assert_int_equal(st.total_bytes, 16 * MiB);
	assert_int_equal(st.free_bytes, 16 * MiB - 2 * K64);
	assert_int_equal(st.free_2m_pages, 6);
	tp_verify(pma);
	pma_destroy(pma);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(alloc_cases) + VGPU_ARRAY_SIZE(region_cases) +
				VGPU_ARRAY_SIZE(fixed_cases) + VGPU_ARRAY_SIZE(state_cases) + 16];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad_many); i++)
		bad_many[i] = i * FR;
	TP_TABLE_TESTS(tests, n, alloc_cases, test_alloc_case);
	TP_TEST(tests, n, test_alloc_null_opts);
	TP_TEST(tests, n, test_alloc_null_pages);
	TP_TEST(tests, n, test_alloc_failure_leaves_nothing);
	TP_TEST(tests, n, test_alloc_contig_within_one_region);
	TP_TEST(tests, n, test_alloc_unaligned_region_base);
	TP_TABLE_TESTS(tests, n, region_cases, test_region_case);
	TP_TEST(tests, n, test_region_limit);
	TP_TEST(tests, n, test_query_outside);
	TP_TABLE_TESTS(tests, n, fixed_cases, test_fixed_case);
	TP_TEST(tests, n, test_fixed_null_opts);
	TP_TEST(tests, n, test_free_2m_partial_group);
	TP_TEST(tests, n, test_free_wrapping_run);
	TP_TEST(tests, n, test_free_64k_lists);
	TP_TABLE_TESTS(tests, n, state_cases, test_state_case);
	TP_TEST(tests, n, test_free_runs);
	TP_TEST(tests, n, test_stats_random);
	TP_TEST(tests, n, test_stats_known);
	return _cmocka_run_group_tests("pma_alloc", tests, n, NULL, NULL);
}
