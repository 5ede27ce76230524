// SPDX-License-Identifier: MIT
/* The lazily flushed extent tree and the fast paths.
 *
 * The extent tree is only brought up to date when something reads it, and the largest-free
 * statistic is computed on demand; these cases read the statistics after every operation
 * *without* calling pma_check() first (which flushes), so a stale figure cannot hide.
 * The fast paths (64 KiB and 2 MiB page lists from one region, ascending frees) must hand
 * out exactly the pages the general path would: every case drives a second instance with
 * the same operations through the general path (a PMA_RANGE that covers the whole region,
 * frees listed in descending order) and compares pages and exported state after each step.
 * The last cases corrupt the tree on purpose to show that pma_check() notices a change that
 * was never marked. */
#include "pma_test.h"
#include "pma/pma_internal.h"

#define LZ_MAX_LIVE	256
#define LZ_MAX_PAGES	64

struct lz_alloc {
	uint64_t page_size;
	size_t count;
	bool contig;
	uint64_t pages[LZ_MAX_PAGES];
};

struct lz_case {
	const char *name;
	uint64_t seed;
	unsigned int ops;
	unsigned int nr_regions;	/* 1 or 2 */
	bool scrub;			/* scrub_on_free, scrubs completed at once */
	unsigned int pct_2m;		/* share of 2 MiB page requests, the rest 64K/128K */
	unsigned int pct_contig;
};

static const struct lz_case lz_cases[] = {
	{ "64K lists, one region",		0x1234, 1500, 1, false, 0, 10 },
	{ "2M lists, one region",		0x2345, 1000, 1, false, 100, 10 },
	{ "mixed, one region",			0x3456, 1500, 1, false, 40, 30 },
	{ "mixed, two regions",			0x4567, 1200, 2, false, 40, 30 },
	{ "mixed, scrub on free",		0x5678, 1200, 1, true, 40, 30 },
	{ "contiguous only",			0x6789, 1200, 1, false, 50, 100 },
};

static struct pma *lz_new(const struct lz_case *c)
{
	struct pma_config cfg = { .scrub_on_free = c->scrub };
	struct tp_region r[2] = {
		{ 512 * MiB, 192 * MiB, 1, false },
		{ 1 * GiB, 64 * MiB, 1, false },
	};

	return tp_new(c->scrub ? &cfg : NULL, r, c->nr_regions);
}

/* Every statistic, read before anything flushes, equals its brute-force value. */
static void lz_stats_exact(struct pma *pma)
{
	struct pma_stats got, want;
	struct tp_view v;
	uint64_t largest = pma_largest_free(pma);

	pma_get_stats(pma, &got);
	tp_view_read(pma, &v);
	tp_view_stats(&v, &want);
	tp_view_free(&v);
	assert_int_equal(largest, want.largest_free_bytes);
	tp_assert_stats_equal(&got, &want);
}

static void lz_same_export(struct pma *a, struct pma *b)
{
	struct pma_range *ra, *rb;
	size_t na, nb;

	tp_export_all(a, &ra, &na);
	tp_export_all(b, &rb, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(ra, rb, na * sizeof(*ra));
	free(ra);
	free(rb);
}

/* The general path's view of the same request: a range that takes in every region. */
static void lz_opts(const struct lz_alloc *x, bool general, struct pma_alloc_opts *o)
{
	*o = (struct pma_alloc_opts){ .flags = PMA_PINNED | (x->contig ? PMA_CONTIGUOUS : 0) };
	if (general) {
		o->flags |= PMA_RANGE;
		o->range_begin = 0;
		o->range_end = 2 * GiB;
	}
}

static void lz_free(struct pma *pma, const struct lz_alloc *x, bool descending)
{
	uint64_t list[LZ_MAX_PAGES];

	for (size_t i = 0; i < x->count; i++)
		list[i] = x->pages[descending ? x->count - 1 - i : i];
	if (x->contig)
		assert_int_equal(pma_free_range(pma, x->pages[0], x->count * x->page_size, 0), 0);
	else
		assert_int_equal(pma_free_pages(pma, list, x->count, x->page_size, 0), 0);
}

/* Scrub-on-free instances: finish the scrubs so both instances see the same free frames. */
static void lz_settle(struct pma *pma, const struct lz_case *c)
{
	if (c->scrub)
		pma_scrub_wait(pma);
}

static void lz_random_alloc(uint64_t *seed, const struct lz_case *c, struct lz_alloc *x)
{
	static const uint64_t small[] = { K64, K128 };

	x->contig = tp_randn(seed, 100) < c->pct_contig;
	x->page_size = tp_randn(seed, 100) < c->pct_2m ? M2 : small[tp_randn(seed, 2)];
	x->count = 1 + tp_randn(seed, x->page_size == M2 ? 24 : LZ_MAX_PAGES);
}

static void test_lazy_case(void **state)
{
	const struct lz_case *c = *state;
	struct pma *fast = lz_new(c), *gen = lz_new(c);
	struct lz_alloc *live = calloc(LZ_MAX_LIVE, sizeof(*live));
	uint64_t seed = c->seed;
	size_t nlive = 0;

	assert_non_null(live);
	for (unsigned int op = 0; op < c->ops; op++) {
		bool do_free = nlive == LZ_MAX_LIVE || (nlive && tp_randn(&seed, 100) < 45);

		if (do_free) {
			size_t i = tp_randn(&seed, nlive);

			lz_free(fast, &live[i], false);
			lz_free(gen, &live[i], true);
			live[i] = live[--nlive];
		} else {
			struct lz_alloc *x = &live[nlive];
			uint64_t other[LZ_MAX_PAGES];
			struct pma_alloc_opts of, og;
			int rf, rg;

			lz_random_alloc(&seed, c, x);
			lz_opts(x, false, &of);
			lz_opts(x, true, &og);
			rf = pma_alloc_pages(fast, x->count, x->page_size, &of, x->pages);
			rg = pma_alloc_pages(gen, x->count, x->page_size, &og, other);
			assert_int_equal(rf, rg);
			if (!rf) {
				assert_memory_equal(x->pages, other, x->count * sizeof(*other));
				nlive++;
			}
		}
		lz_settle(fast, c);
		lz_settle(gen, c);
		lz_stats_exact(fast);
		lz_same_export(fast, gen);
		if (op % 97 == 0) {
			assert_int_equal(pma_check(fast), 0);
			assert_int_equal(pma_check(gen), 0);
		}
	}
	tp_verify(fast);
	tp_verify(gen);
	free(live);
	pma_destroy(fast);
	pma_destroy(gen);
}

/* A reader sees every operation: the figure is recomputed after each one it did not see. */
static void test_largest_each_op(void **state)
{
	struct pma *pma = tp_new1(0, 64 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	uint64_t p[8];

	(void)state;
	assert_int_equal(pma_largest_free(pma), 64 * MiB);
	assert_int_equal(pma_alloc_pages(pma, 1, K64, NULL, p), 0);	/* frame 0 */
	assert_int_equal(pma_largest_free(pma), 64 * MiB - K64);
	assert_int_equal(pma_alloc_fixed(pma, 32 * MiB, K64, NULL), 0);	/* splits the rest */
	assert_int_equal(pma_largest_free(pma), 32 * MiB - K64);
	assert_int_equal(pma_free_range(pma, 32 * MiB, K64, 0), 0);
	assert_int_equal(pma_largest_free(pma), 64 * MiB - K64);
	assert_int_equal(pma_alloc_pages(pma, 4, M2, &o, &p[1]), 0);	/* [2M, 10M) */
	assert_int_equal(pma_largest_free(pma), 54 * MiB);
	assert_int_equal(pma_free_pages(pma, p, 1, K64, 0), 0);
	assert_int_equal(pma_largest_free(pma), 54 * MiB);
	assert_int_equal(pma_free_range(pma, p[1], 8 * MiB, 0), 0);
	assert_int_equal(pma_largest_free(pma), 64 * MiB);
	assert_int_equal(pma_blacklist_add(pma, 16 * MiB), 0);
	assert_int_equal(pma_largest_free(pma), 48 * MiB - K64);
	tp_verify(pma);
	pma_destroy(pma);
}

/* White box: a tree node that no longer matches its frames, with no mark to say so, is
 * what a state change that forgot to mark looks like; pma_check() must say so. */
struct lz_corrupt_case {
	const char *name;
	unsigned int layer;
	bool leaf;		/* corrupt a leaf (else the root) */
};

static const struct lz_corrupt_case corrupt_cases[] = {
	{ "frame layer leaf, unmarked", 0, true },
	{ "group layer leaf, unmarked", 1, true },
	{ "frame layer root", 0, false },
	{ "group layer root", 1, false },
};

static void test_corrupt_case(void **state)
{
	const struct lz_corrupt_case *c = *state;
	struct pma *pma = tp_new1(0, 1 * GiB);
	uint64_t p[4];
	struct pma_tree *t;
	struct pma_tnode *nd;

	assert_int_equal(pma_alloc_pages(pma, 4, K64, NULL, p), 0);
	assert_int_equal(pma_check(pma), 0);	/* flushed and consistent */
	t = &pma->regions[0]->ftree;
	nd = &t->layer[c->layer].node[c->leaf ? t->size : 1];
	nd->max ^= 1;
	assert_int_equal(pma_check(pma), -EIO);
	nd->max ^= 1;
	assert_int_equal(pma_check(pma), 0);
	pma_destroy(pma);
}

/* Marking a corrupted leaf dirty makes it legal: the next flush recomputes it. */
static void test_marked_leaf_is_recomputed(void **state)
{
	struct pma *pma = tp_new1(0, 1 * GiB);
	struct pma_tree *t;

	(void)state;
	assert_int_equal(pma_check(pma), 0);
	t = &pma->regions[0]->ftree;
	t->layer[0].node[t->size].max = 0;
	pma_tlayer_mark(&t->layer[0], 0);
	/* ...as a state change would do, the published figure is stale now. */
	atomic_store(&pma->st_largest_stale, true);
	assert_int_equal(pma_check(pma), 0);
	assert_int_equal(pma_largest_free(pma), 1 * GiB);
	pma_destroy(pma);
}

/* White box: the group run index (what 32 MiB and 256 MiB requests search) answers "first
 * run of n whole free groups" exactly as a plain scan of the group bits and as the tree's
 * group layer, over runs that cross words and blocks, in a region with padding on both
 * sides; and pma_check() notices an entry that is wrong. */
struct lz_runs_case {
	const char *name;
	uint64_t base, size, seed;
};

static const struct lz_runs_case runs_cases[] = {
	{ "4 GiB, aligned base", 0, 4 * GiB, 0x77 },
	{ "3 GiB + 6 MiB, unaligned base", 100 * MiB, 3 * GiB + 6 * MiB, 0x78 },
};

/* First g with groups [g, g + n) whole and free, by looking at every bit. */
static uint64_t lz_runs_brute(const struct pma_region *r, uint64_t n)
{
	uint64_t run = 0;

	for (uint64_t g = 0; g < r->nr_groups; g++) {
		run = cmn_test_bit(r->gfull, g) ? run + 1 : 0;
		if (run == n)
			return g + 1 - n;
	}
	return UINT64_MAX;
}

static void lz_runs_compare(struct pma *pma)
{
	static const uint64_t ns[] = { 1, 2, 3, 15, 16, 17, 63, 64, 65, 100, 128, 129, 192, 193,
				       194, 200, 224, 240, 250, 254, 255 };
	struct pma_region *r = pma->regions[0];

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(ns); i++) {
		uint64_t want = lz_runs_brute(r, ns[i]);

		assert_int_equal(pma_runs_find(r, ns[i]), want);
		assert_int_equal(pma_tree_find(&r->ftree, r, true, 0, r->nr_groups, ns[i], 1, 0,
					       false), want);
	}
}

static void test_runs_case(void **state)
{
	const struct lz_runs_case *c = *state;
	struct pma *pma = tp_new1(c->base, c->size);
	struct pma_alloc_opts co = { .flags = PMA_CONTIGUOUS };
	struct { uint64_t addr, size; } live[256];
	uint64_t seed = c->seed, p[300];
	size_t nlive = 0;

	lz_runs_compare(pma);
	for (unsigned int op = 0; op < 3000; op++) {
		if (nlive == VGPU_ARRAY_SIZE(live) || (nlive && tp_randn(&seed, 100) < 40)) {
			size_t i = tp_randn(&seed, nlive);

			assert_int_equal(pma_free_range(pma, live[i].addr, live[i].size, 0), 0);
			live[i] = live[--nlive];
		} else if (tp_randn(&seed, 100) < 20) {
			/* A 64 KiB page breaks a whole group. */
			if (!pma_alloc_pages(pma, 1, K64, NULL, p)) {
				live[nlive].addr = p[0];
				live[nlive++].size = K64;
			}
		} else {
			size_t n = 1 + tp_randn(&seed, tp_randn(&seed, 4) ? 40 : 300);

			if (!pma_alloc_pages(pma, n, M2, &co, p)) {
				live[nlive].addr = p[0];
				live[nlive++].size = n * M2;
			}
		}
		lz_runs_compare(pma);
		if (op % 101 == 0)
			assert_int_equal(pma_check(pma), 0);
	}
	assert_int_equal(pma_check(pma), 0);
	pma_destroy(pma);
}

/* A run that starts at the top of one word and crosses three whole words changes length
 * when the fifth word changes: the entries of all five words must follow. */
static void test_runs_reach(void **state)
{
	struct pma *pma = tp_new1(0, 4 * GiB);

	(void)state;
	assert_int_equal(pma_alloc_fixed(pma, 0, 63 * M2, NULL), 0);	/* group 63 starts a run */
	lz_runs_compare(pma);
	for (uint64_t k = 0; k < 64; k += 3) {
		assert_int_equal(pma_alloc_fixed(pma, (4 * 64 + k) * M2, M2, NULL), 0);
		lz_runs_compare(pma);
		assert_int_equal(pma_check(pma), 0);
		assert_int_equal(pma_free_range(pma, (4 * 64 + k) * M2, M2, 0), 0);
		lz_runs_compare(pma);
	}
	/* From the other side: the run's start word changes. */
	assert_int_equal(pma_alloc_fixed(pma, (4 * 64 + 10) * M2, M2, NULL), 0);
	for (uint64_t g = 63; g > 40; g -= 5) {
		assert_int_equal(pma_free_range(pma, (g - 4) * M2, 4 * M2, 0), 0);
		lz_runs_compare(pma);
		assert_int_equal(pma_alloc_fixed(pma, (g - 4) * M2, 4 * M2, NULL), 0);
		lz_runs_compare(pma);
	}
	assert_int_equal(pma_check(pma), 0);
	pma_destroy(pma);
}

static void test_runs_corrupt(void **state)
{
	struct pma *pma = tp_new1(0, 4 * GiB);
	struct pma_runs *x = &pma->regions[0]->runs;

	(void)state;
	assert_int_equal(pma_check(pma), 0);
	x->len[5] ^= 1;
	assert_int_equal(pma_check(pma), -EIO);
	x->len[5] ^= 1;
	x->bmax[1] ^= 2;
	assert_int_equal(pma_check(pma), -EIO);
	x->bmax[1] ^= 2;
	assert_int_equal(pma_check(pma), 0);
	pma_destroy(pma);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(lz_cases) + VGPU_ARRAY_SIZE(corrupt_cases) +
				VGPU_ARRAY_SIZE(runs_cases) + 6];
	size_t n = 0;

	TP_TABLE_TESTS(tests, n, lz_cases, test_lazy_case);
	TP_TEST(tests, n, test_largest_each_op);
	TP_TABLE_TESTS(tests, n, corrupt_cases, test_corrupt_case);
	TP_TEST(tests, n, test_marked_leaf_is_recomputed);
	TP_TABLE_TESTS(tests, n, runs_cases, test_runs_case);
	TP_TEST(tests, n, test_runs_reach);
	TP_TEST(tests, n, test_runs_corrupt);
	return _cmocka_run_group_tests("pma_lazy", tests, n, NULL, NULL);
}
