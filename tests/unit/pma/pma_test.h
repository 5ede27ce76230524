/* SPDX-License-Identifier: MIT */
/* Helpers shared by the pma unit tests: building instances, a brute-force view of every
 * frame read back through pma_query(), statistics recomputed from that view, snapshots
 * for "a rejected call changed nothing", and a placement-independent oracle that says
 * whether a request can be satisfied at all.
 *
 * Everything here derives from the public contract in pma/pma.h only, so a test that
 * disagrees with the allocator points at either one of them, never at shared code. */
#ifndef VGPU_TESTS_PMA_TEST_H
#define VGPU_TESTS_PMA_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "common/bitops.h"
#include "common/compiler.h"
#include "pma/pma.h"

/* Case tables leave trailing "not checked" fields out on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define FR	PMA_FRAME_SIZE
#define K64	PMA_PAGE_64K
#define K128	PMA_PAGE_128K
#define M2	PMA_PAGE_2M
#define M512	PMA_PAGE_512M
#define MiB	VGPU_MiB
#define GiB	VGPU_GiB

/* Views of more frames than this skip the per-frame brute force (too slow under ASan). */
#define TP_VIEW_MAX_FRAMES	(1u << 16)

struct tp_region {
	uint64_t base, size;
	uint32_t perf;
	bool prot;
};

/* A fresh instance with regions @r[0..n); region i must get id i. */
static inline struct pma *tp_new(const struct pma_config *cfg, const struct tp_region *r,
				 size_t n)
{
	struct pma *pma = pma_create(cfg);

	assert_non_null(pma);
	for (size_t i = 0; i < n; i++) {
		struct pma_region_desc d = { .base = r[i].base, .size = r[i].size,
					     .performance = r[i].perf,
					     .protected_mem = r[i].prot };

		assert_int_equal(pma_region_add(pma, &d, NULL, 0), (int)i);
	}
	return pma;
}

/* One unprotected region [base, base + size), no config. */
static inline struct pma *tp_new1(uint64_t base, uint64_t size)
{
	struct tp_region r = { base, size, 0, false };

	return tp_new(NULL, &r, 1);
}

/* State and attributes of the frame at @addr; the query must succeed. */
static inline uint32_t tp_state(struct pma *pma, uint64_t addr)
{
	uint32_t s = 0xdeadbeef;

	assert_int_equal(pma_query(pma, addr, &s), 0);
	return s;
}

/* Free, and no attribute that keeps it from being handed out. */
static inline bool tp_allocatable(uint32_t s)
{
	return (s & PMA_STATE_MASK) == PMA_STATE_FREE &&
	       !(s & (PMA_ATTR_EVICTING | PMA_ATTR_SCRUBBING | PMA_ATTR_BLACKLIST));
}

static inline bool tp_allocated(uint32_t s)
{
	return (s & PMA_STATE_MASK) == PMA_STATE_UNPIN || (s & PMA_STATE_MASK) == PMA_STATE_PIN;
}

/* Every frame of every region, as pma_query() reports it. */
struct tp_view {
	unsigned int nr_regions;
	struct pma_region_desc reg[PMA_MAX_REGIONS];
	size_t first[PMA_MAX_REGIONS];	/* index of the region's first frame in st[] */
	size_t nframes;
	uint32_t *st;
};

static inline void tp_view_read(struct pma *pma, struct tp_view *v)
{
	memset(v, 0, sizeof(*v));
	v->nr_regions = pma_region_count(pma);
	assert_true(v->nr_regions <= PMA_MAX_REGIONS);
	for (unsigned int i = 0; i < v->nr_regions; i++) {
		assert_int_equal(pma_region_get(pma, i, &v->reg[i]), 0);
		v->first[i] = v->nframes;
		v->nframes += v->reg[i].size / FR;
	}
	v->st = calloc(v->nframes ? v->nframes : 1, sizeof(*v->st));
	assert_non_null(v->st);
	for (unsigned int i = 0; i < v->nr_regions; i++)
		for (uint64_t f = 0; f < v->reg[i].size / FR; f++)
			v->st[v->first[i] + f] = tp_state(pma, v->reg[i].base + f * FR);
}

static inline void tp_view_free(struct tp_view *v)
{
	free(v->st);
	v->st = NULL;
}

static inline uint64_t tp_total_frames(struct pma *pma)
{
	uint64_t n = 0;
	struct pma_region_desc d;

	for (unsigned int i = 0; i < pma_region_count(pma); i++) {
		assert_int_equal(pma_region_get(pma, i, &d), 0);
		n += d.size / FR;
	}
	return n;
}

/* Region id holding @addr in @v, or -1. */
static inline int tp_view_region(const struct tp_view *v, uint64_t addr)
{
	for (unsigned int i = 0; i < v->nr_regions; i++)
		if (addr >= v->reg[i].base && addr - v->reg[i].base < v->reg[i].size)
			return (int)i;
	return -1;
}

/* Frame state of @addr in @v; @addr must be inside a region. */
static inline uint32_t tp_view_state(const struct tp_view *v, uint64_t addr)
{
	int r = tp_view_region(v, addr);

	assert_true(r >= 0);
	return v->st[v->first[r] + (addr - v->reg[r].base) / FR];
}

/* Statistics as the contract defines them, recomputed frame by frame. Extents and 2 MiB
 * groups never cross a region boundary; 2 MiB groups are aligned on absolute addresses. */
static inline void tp_view_stats(const struct tp_view *v, struct pma_stats *s)
{
	memset(s, 0, sizeof(*s));
	for (unsigned int i = 0; i < v->nr_regions; i++) {
		const struct pma_region_desc *d = &v->reg[i];
		uint64_t n = d->size / FR, run = 0;

		s->total_bytes += d->size;
		for (uint64_t f = 0; f < n; f++) {
			uint32_t st = v->st[v->first[i] + f];

			if (tp_allocatable(st)) {
				s->free_bytes += FR;
				run += FR;
				if (run > s->largest_free_bytes)
					s->largest_free_bytes = run;
			} else {
				run = 0;
			}
			if (st & PMA_ATTR_SCRUBBING)
				s->scrubbing_bytes += FR;
			if (st & PMA_ATTR_BLACKLIST)
				s->blacklisted_bytes += FR;
		}
		for (uint64_t a = cmn_align_up(d->base, M2); a + M2 <= d->base + d->size; a += M2) {
			bool all = true;

			for (uint64_t f = 0; f < M2 / FR && all; f++)
				all = tp_allocatable(v->st[v->first[i] + (a - d->base) / FR + f]);
			s->free_2m_pages += all;
		}
	}
}

static inline void tp_assert_stats_equal(const struct pma_stats *got, const struct pma_stats *want)
{
	assert_int_equal(got->total_bytes, want->total_bytes);
	assert_int_equal(got->free_bytes, want->free_bytes);
	assert_int_equal(got->free_2m_pages, want->free_2m_pages);
	assert_int_equal(got->largest_free_bytes, want->largest_free_bytes);
	assert_int_equal(got->scrubbing_bytes, want->scrubbing_bytes);
	assert_int_equal(got->blacklisted_bytes, want->blacklisted_bytes);
}

/* The post-condition run after every operation: pma_check() passes and (for instances
 * small enough) every statistic equals its brute-force value. */
static inline void tp_verify(struct pma *pma)
{
	struct pma_stats got, want;

	assert_int_equal(pma_check(pma), 0);
	pma_get_stats(pma, &got);
	assert_int_equal(pma_free_bytes(pma), got.free_bytes);
	assert_int_equal(pma_largest_free(pma), got.largest_free_bytes);
	assert_true(got.free_bytes <= got.total_bytes);
	assert_true(got.largest_free_bytes <= got.free_bytes);
	assert_true(got.free_2m_pages * M2 <= got.free_bytes);
	if (tp_total_frames(pma) > TP_VIEW_MAX_FRAMES)
		return;

	struct tp_view v;

	tp_view_read(pma, &v);
	tp_view_stats(&v, &want);
	tp_view_free(&v);
	tp_assert_stats_equal(&got, &want);
}

/* Everything observable about an instance, to show a rejected call changed nothing. */
struct tp_snap {
	struct pma_stats stats;
	size_t nr_ranges;
	struct pma_range *ranges;
	struct tp_view view;	/* only for instances up to TP_VIEW_MAX_FRAMES */
	bool has_view;
};

static inline void tp_export_all(struct pma *pma, struct pma_range **out, size_t *nr)
{
	size_t n = 0, n2 = 0;

	assert_int_equal(pma_export(pma, NULL, 0, &n), 0);
	*out = calloc(n + 1, sizeof(**out));
	assert_non_null(*out);
	assert_int_equal(pma_export(pma, *out, n, &n2), 0);
	assert_int_equal(n2, n);
	*nr = n;
}

static inline void tp_snap_take(struct pma *pma, struct tp_snap *s)
{
	memset(s, 0, sizeof(*s));
	pma_get_stats(pma, &s->stats);
	tp_export_all(pma, &s->ranges, &s->nr_ranges);
	s->has_view = tp_total_frames(pma) <= TP_VIEW_MAX_FRAMES;
	if (s->has_view)
		tp_view_read(pma, &s->view);
}

static inline void tp_snap_free(struct tp_snap *s)
{
	free(s->ranges);
	if (s->has_view)
		tp_view_free(&s->view);
}

/* @pma looks exactly as when @s was taken; pma_check() passes. */
static inline void tp_snap_assert_same(struct pma *pma, const struct tp_snap *s)
{
	struct tp_snap now;

	assert_int_equal(pma_check(pma), 0);
	tp_snap_take(pma, &now);
	tp_assert_stats_equal(&now.stats, &s->stats);
	assert_int_equal(now.nr_ranges, s->nr_ranges);
	for (size_t i = 0; i < s->nr_ranges; i++) {
		assert_int_equal(now.ranges[i].base, s->ranges[i].base);
		assert_int_equal(now.ranges[i].size, s->ranges[i].size);
		assert_int_equal(now.ranges[i].state, s->ranges[i].state);
	}
	if (s->has_view) {
		assert_int_equal(now.view.nframes, s->view.nframes);
		for (size_t i = 0; i < s->view.nframes; i++)
			if (now.view.st[i] != s->view.st[i])
				fail_msg("frame %zu changed: 0x%x -> 0x%x", i, s->view.st[i],
					 now.view.st[i]);
	}
	tp_snap_free(&now);
}

/* ---- the oracle: can a request be satisfied on the frames of @v? ------------------- */

/* Regions a request with @o may use (bit i = region i): protected-ness must match, then
 * REGION_ID, MIN_SPEED and RANGE filter. */
static inline uint64_t tp_eligible(const struct tp_view *v, const struct pma_alloc_opts *o)
{
	uint32_t fl = o ? o->flags : 0;
	uint64_t mask = 0;

	for (unsigned int i = 0; i < v->nr_regions; i++) {
		const struct pma_region_desc *d = &v->reg[i];

		if (d->protected_mem != !!(fl & PMA_PROTECTED))
			continue;
		if ((fl & PMA_REGION_ID) && o->region_id != i)
			continue;
		if ((fl & PMA_MIN_SPEED) && d->performance < o->min_speed)
			continue;
		if ((fl & PMA_RANGE) && (o->range_end <= d->base ||
					 o->range_begin >= d->base + d->size))
			continue;
		mask |= 1ull << i;
	}
	return mask;
}

/* [lo, hi) of region @i usable under @o's range. */
static inline void tp_window(const struct tp_view *v, unsigned int i,
			     const struct pma_alloc_opts *o, uint64_t *lo, uint64_t *hi)
{
	*lo = v->reg[i].base;
	*hi = v->reg[i].base + v->reg[i].size;
	if (o && (o->flags & PMA_RANGE)) {
		*lo = cmn_max(*lo, o->range_begin);
		*hi = cmn_min(*hi, o->range_end);
	}
}

static inline bool tp_view_run_free(const struct tp_view *v, uint64_t addr, uint64_t size)
{
	for (uint64_t a = addr; a < addr + size; a += FR)
		if (!tp_allocatable(tp_view_state(v, a)))
			return false;
	return true;
}

/* Effective alignment of a contiguous request. */
static inline uint64_t tp_align(const struct pma_alloc_opts *o, uint64_t page)
{
	if (o && (o->flags & PMA_FORCE_ALIGNMENT) && o->alignment > page)
		return o->alignment;
	return page;
}

/* Lowest address in region @i where a contiguous request fits, or UINT64_MAX. */
static inline uint64_t tp_contig_fit_in(const struct tp_view *v, unsigned int i,
					const struct pma_alloc_opts *o, uint64_t page, size_t count)
{
	uint64_t lo, hi, align = tp_align(o, page), size = page * count;

	tp_window(v, i, o, &lo, &hi);
	for (uint64_t a = cmn_align_up(lo, align); a < hi && hi - a >= size; a += align)
		if (tp_view_run_free(v, a, size))
			return a;
	return UINT64_MAX;
}

/* True if some eligible region can hold the contiguous request. */
static inline bool tp_contig_fits(const struct tp_view *v, const struct pma_alloc_opts *o,
				  uint64_t page, size_t count)
{
	uint64_t m = tp_eligible(v, o);

	for (unsigned int i = 0; i < v->nr_regions; i++)
		if ((m >> i & 1) && tp_contig_fit_in(v, i, o, page, count) != UINT64_MAX)
			return true;
	return false;
}

/* Number of page-aligned wholly allocatable pages region @i offers under @o. */
static inline uint64_t tp_pages_in(const struct tp_view *v, unsigned int i,
				   const struct pma_alloc_opts *o, uint64_t page)
{
	uint64_t lo, hi, n = 0;

	tp_window(v, i, o, &lo, &hi);
	for (uint64_t a = cmn_align_up(lo, page); a < hi && hi - a >= page; a += page)
		n += tp_view_run_free(v, a, page);
	return n;
}

static inline uint64_t tp_pages_avail(const struct tp_view *v, const struct pma_alloc_opts *o,
				      uint64_t page)
{
	uint64_t m = tp_eligible(v, o), n = 0;

	for (unsigned int i = 0; i < v->nr_regions; i++)
		if (m >> i & 1)
			n += tp_pages_in(v, i, o, page);
	return n;
}

/* Pages a successful call returned are sane against the view taken before it: aligned,
 * distinct, inside eligible regions and the range, on allocatable frames, contiguous and
 * ascending when asked. */
static inline void tp_check_pages(const struct tp_view *before, const struct pma_alloc_opts *o,
				  uint64_t page, const uint64_t *pages, size_t n)
{
	uint64_t m = tp_eligible(before, o);
	uint32_t fl = o ? o->flags : 0;

	for (size_t i = 0; i < n; i++) {
		int r = tp_view_region(before, pages[i]);
		uint64_t lo, hi;

		if (!cmn_is_aligned(pages[i], page))
			fail_msg("page %zu at 0x%llx is not aligned to 0x%llx", i,
				 (unsigned long long)pages[i], (unsigned long long)page);
		if (r < 0 || !(m >> r & 1))
			fail_msg("page %zu at 0x%llx is outside every eligible region", i,
				 (unsigned long long)pages[i]);
		tp_window(before, (unsigned int)r, o, &lo, &hi);
		if (pages[i] < lo || pages[i] + page > hi)
			fail_msg("page %zu at 0x%llx is outside [0x%llx, 0x%llx)", i,
				 (unsigned long long)pages[i], (unsigned long long)lo,
				 (unsigned long long)hi);
		if (!tp_view_run_free(before, pages[i], page))
			fail_msg("page %zu at 0x%llx was not allocatable", i,
				 (unsigned long long)pages[i]);
		for (size_t j = 0; j < i; j++)
			if (pages[j] == pages[i])
				fail_msg("page 0x%llx returned twice", (unsigned long long)pages[i]);
		if ((fl & PMA_CONTIGUOUS) && i > 0 && pages[i] != pages[i - 1] + page)
			fail_msg("contiguous page %zu at 0x%llx does not follow 0x%llx", i,
				 (unsigned long long)pages[i], (unsigned long long)pages[i - 1]);
	}
	if ((fl & PMA_CONTIGUOUS) && n && !cmn_is_aligned(pages[0], tp_align(o, page)))
		fail_msg("contiguous run at 0x%llx is not aligned to 0x%llx",
			 (unsigned long long)pages[0], (unsigned long long)tp_align(o, page));
}

/* Every page of @pages now reads as allocated with the state @o asked for. */
static inline void tp_check_state(struct pma *pma, const struct pma_alloc_opts *o, uint64_t page,
				  const uint64_t *pages, size_t n)
{
	uint32_t fl = o ? o->flags : 0;
	uint32_t want = (fl & PMA_PINNED) ? PMA_STATE_PIN : PMA_STATE_UNPIN;

	for (size_t i = 0; i < n; i++)
		for (uint64_t a = pages[i]; a < pages[i] + page; a += FR) {
			uint32_t s = tp_state(pma, a);

			assert_int_equal(s & PMA_STATE_MASK, want);
			assert_int_equal(!!(s & PMA_ATTR_PERSISTENT), !!(fl & PMA_PERSISTENT));
		}
}

/* Region ids ordered as the contract ranks them: fastest first, or slowest first with
 * PREFER_SLOWEST; with REVERSE (top-down) the highest region first. rank[] gives each
 * region's place; regions of equal speed share a place (their order is not specified). */
static inline void tp_region_order(const struct tp_view *v, const struct pma_alloc_opts *o,
				   unsigned int *ord, unsigned int *rank)
{
	bool slow = o && (o->flags & PMA_PREFER_SLOWEST), rev = o && (o->flags & PMA_REVERSE);

	for (unsigned int i = 0; i < v->nr_regions; i++)
		ord[i] = i;
	for (unsigned int i = 1; i < v->nr_regions; i++)
		for (unsigned int j = i; j > 0; j--) {
			const struct pma_region_desc *a = &v->reg[ord[j - 1]], *b = &v->reg[ord[j]];
			bool keep = rev ? a->base > b->base :
				    slow ? a->performance <= b->performance :
					   a->performance >= b->performance;

			if (keep)
				break;
			unsigned int t = ord[j];

			ord[j] = ord[j - 1];
			ord[j - 1] = t;
		}
	for (unsigned int k = 0; k < v->nr_regions; k++) {
		bool tie = k && !rev &&
			   v->reg[ord[k]].performance == v->reg[ord[k - 1]].performance;

		rank[ord[k]] = tie ? rank[ord[k - 1]] : k;
	}
}

/* Highest address in region @i where a contiguous request fits, or UINT64_MAX. */
static inline uint64_t tp_contig_fit_top(const struct tp_view *v, unsigned int i,
					 const struct pma_alloc_opts *o, uint64_t page, size_t count)
{
	uint64_t lo, hi, align = tp_align(o, page), size = page * count;

	tp_window(v, i, o, &lo, &hi);
	if (hi - lo < size)
		return UINT64_MAX;
	for (uint64_t a = cmn_align_down(hi - size, align); a >= lo; a -= align) {
		if (tp_view_run_free(v, a, size))
			return a;
		if (a < align)
			break;
	}
	return UINT64_MAX;
}

/* Region preference: a contiguous run lands in the first ranked region that could hold
 * it; discontiguous pages come from a lower-ranked region only once every higher-ranked
 * one had no page left. A REVERSE contiguous run is the highest fit in its region.
 * Checked against the view from before the call. */
static inline void tp_check_priority(const struct tp_view *before, const struct pma_alloc_opts *o,
				     uint64_t page, size_t count, const uint64_t *pages, size_t n)
{
	unsigned int ord[PMA_MAX_REGIONS], rank[PMA_MAX_REGIONS];
	uint64_t m = tp_eligible(before, o);
	uint32_t fl = o ? o->flags : 0;

	if (!n)
		return;
	tp_region_order(before, o, ord, rank);
	if (fl & PMA_CONTIGUOUS) {
		int got = tp_view_region(before, pages[0]);

		for (unsigned int r = 0; r < before->nr_regions; r++)
			if ((m >> r & 1) && rank[r] < rank[got] &&
			    tp_contig_fit_in(before, r, o, page, count) != UINT64_MAX)
				fail_msg("contiguous run went to region %d though region %u "
					 "(ahead in this order) had room", got, r);
		if ((fl & PMA_REVERSE) &&
		    pages[0] != tp_contig_fit_top(before, (unsigned int)got, o, page, count))
			fail_msg("REVERSE run at 0x%llx, but 0x%llx is the highest fit",
				 (unsigned long long)pages[0],
				 (unsigned long long)tp_contig_fit_top(before, (unsigned int)got, o,
								       page, count));
		return;
	}
	/* Pages used per region; a region used while one ranked ahead of it still had pages
	 * left over after the call is a violation. */
	uint64_t used[PMA_MAX_REGIONS] = { 0 };

	for (size_t i = 0; i < n; i++)
		used[tp_view_region(before, pages[i])]++;
	for (unsigned int r = 0; r < before->nr_regions; r++) {
		if (!(m >> r & 1) || used[r] >= tp_pages_in(before, r, o, page))
			continue;
		for (unsigned int l = 0; l < before->nr_regions; l++)
			if (used[l] && rank[l] > rank[r])
				fail_msg("pages taken from region %u while region %u still had "
					 "free pages", l, r);
	}
}

/* Simple deterministic PRNG (xorshift64*), so a seed reproduces a run. */
static inline uint64_t tp_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n). */
static inline uint64_t tp_randn(uint64_t *s, uint64_t n)
{
	return n ? tp_rand(s) % n : 0;
}

/* Builds a CMUnitTest array from a case table whose rows start with "const char *name". */
#define TP_TABLE_TESTS(tests, n, table, fn)                                            \
	do {                                                                           \
		for (size_t _i = 0; _i < VGPU_ARRAY_SIZE(table); _i++)                 \
			(tests)[(n)++] = (struct CMUnitTest){                          \
				.name = (table)[_i].name, .test_func = (fn),           \
				.initial_state = (void *)&(table)[_i] };               \
	} while (0)

#define TP_TEST(tests, n, fn) \
	((tests)[(n)++] = (struct CMUnitTest)cmocka_unit_test(fn))

#endif
