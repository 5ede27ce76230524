// SPDX-License-Identifier: MIT
/* pma: the drm_buddy / gpu_buddy KUnit scenarios re-expressed for 64 KiB frames. A buddy
 * "order o block" becomes a contiguous run of 2^o frames aligned to its size
 * (PMA_FORCE_ALIGNMENT); where the buddy test relies on the buddy's own placement, the
 * expected result comes from the oracle in pma_test.h (does a fit exist at all?), so the
 * test holds for any correct placement policy. pma_check() and the statistics recount run
 * after every operation. */
#include "pma_test.h"

/* Allocate one naturally aligned run of 2^order frames; assert the result matches the
 * oracle and that the run is where it must be. Returns the address or UINT64_MAX. */
static uint64_t alloc_order(struct pma *pma, unsigned int order, uint32_t extra_flags)
{
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS | PMA_FORCE_ALIGNMENT | extra_flags,
				    .alignment = FR << order };
	size_t count = (size_t)1 << order;
	uint64_t *pages = calloc(count, sizeof(*pages)), addr = UINT64_MAX;
	struct tp_view v;
	bool fits;
	int ret;

	assert_non_null(pages);
	tp_view_read(pma, &v);
	fits = tp_contig_fits(&v, &o, K64, count);
	ret = pma_alloc_pages(pma, count, K64, &o, pages);
	if (ret != (fits ? 0 : -ENOMEM))
		fail_msg("order %u: returned %d but a fit %s", order, ret,
			 fits ? "exists" : "does not exist");
	if (!ret) {
		tp_check_pages(&v, &o, K64, pages, count);
		addr = pages[0];
	}
	tp_view_free(&v);
	free(pages);
	tp_verify(pma);
	return addr;
}

static void free_run(struct pma *pma, uint64_t addr, uint64_t size)
{
	assert_int_equal(pma_free_range(pma, addr, size, 0), 0);
	tp_verify(pma);
}

/* Request checked against the oracle; returns the pages (caller frees) or NULL. */
static uint64_t *alloc_checked(struct pma *pma, size_t count, uint64_t page,
			       struct pma_alloc_opts *o, int *ret_out)
{
	uint64_t *pages = calloc(count + 1, sizeof(*pages));
	struct tp_view v;
	int want, ret;

	assert_non_null(pages);
	tp_view_read(pma, &v);
	if (o->flags & PMA_CONTIGUOUS)
		want = tp_contig_fits(&v, o, page, count) ? 0 : -ENOMEM;
	else
		want = tp_pages_avail(&v, o, page) >= count ? 0 : -ENOMEM;
	ret = pma_alloc_pages(pma, count, page, o, pages);
	if (ret != want)
		fail_msg("%zu x 0x%llx (flags 0x%x): returned %d, oracle says %d", count,
			 (unsigned long long)page, o->flags, ret, want);
	if (!ret)
		tp_check_pages(&v, o, page, pages, count);
	tp_view_free(&v);
	tp_verify(pma);
	if (ret_out)
		*ret_out = ret;
	if (ret) {
		free(pages);
		return NULL;
	}
	return pages;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* alloc_limit: the biggest thing there is. A 64 GiB region is handed out as one contiguous
 * run of 512 MiB pages; a region far up the address space works; a 512 MiB page needs a
 * 512 MiB-aligned slot. */
static void test_limit(void **state)
{
	struct pma *pma = tp_new1(0, 64 * GiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	uint64_t pages[128], p;
	struct pma_stats st;

	(void)state;
	assert_int_equal(pma_alloc_pages(pma, 128, M512, &o, pages), 0);
	for (size_t i = 0; i < 128; i++)
		assert_int_equal(pages[i], i * M512);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 0);
	assert_int_equal(st.largest_free_bytes, 0);
	assert_int_equal(st.free_2m_pages, 0);
	assert_int_equal(pma_check(pma), 0);
	assert_int_equal(pma_alloc_pages(pma, 1, K64, NULL, &p), -ENOMEM);
	assert_int_equal(pma_free_range(pma, 0, 64 * GiB, 0), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 64 * GiB);
	assert_int_equal(st.largest_free_bytes, 64 * GiB);
	assert_int_equal(st.free_2m_pages, 64 * GiB / M2);
	assert_int_equal(pma_check(pma), 0);
	pma_destroy(pma);

	pma = tp_new1(1ull << 47, 1 * GiB);
	assert_int_equal(pma_alloc_pages(pma, 2, M512, &o, pages), 0);
	assert_int_equal(pages[0], 1ull << 47);
	assert_int_equal(pages[1], (1ull << 47) + M512);
	tp_verify(pma);
	pma_destroy(pma);

	pma = tp_new1(K64, M512 + K64);		/* [64K, 512M + 128K): no aligned 512M slot */
	assert_int_equal(pma_alloc_pages(pma, 1, M512, NULL, pages), -ENOMEM);
	tp_verify(pma);
	pma_destroy(pma);
}

/* alloc_optimistic: 2^13 - 1 frames hold exactly one run of each order 12..0. Largest
 * first, each has exactly one aligned place; then the region is full. */
static void test_optimistic(void **state)
{
	struct pma *pma = tp_new1(0, ((1ull << 13) - 1) * FR);
	uint64_t p;

	(void)state;
	for (int order = 12; order >= 0; order--) {
		uint64_t a = alloc_order(pma, (unsigned int)order, 0);

		assert_int_equal(a, ((1ull << 13) - (2ull << order)) * FR);
	}
	assert_int_equal(pma_free_bytes(pma), 0);
	assert_int_equal(pma_alloc_pages(pma, 1, K64, NULL, &p), -ENOMEM);
	tp_verify(pma);
	/* free in a scrambled order; the whole region is one run again */
	for (unsigned int i = 0; i < 13; i++) {
		unsigned int order = (i * 5) % 13;

		free_run(pma, ((1ull << 13) - (2ull << order)) * FR, FR << order);
	}
	assert_int_equal(pma_largest_free(pma), ((1ull << 13) - 1) * FR);
	pma_destroy(pma);
}

/* alloc_pessimistic: 2^12 frames; runs of order 0..11 plus one frame fill it; then no
 * order fits; freeing the small runs one by one re-opens each next order. */
static void test_pessimistic(void **state)
{
	struct pma *pma = tp_new1(0, (1ull << 12) * FR);
	uint64_t addr[12], extra, p;

	(void)state;
	for (unsigned int order = 0; order < 12; order++) {
		addr[order] = alloc_order(pma, order, 0);
		assert_int_not_equal(addr[order], UINT64_MAX);
	}
	assert_int_equal(pma_alloc_pages(pma, 1, K64, NULL, &extra), 0);
	tp_verify(pma);
	assert_int_equal(pma_free_bytes(pma), 0);
	for (int order = 11; order >= 0; order--)
		assert_int_equal(alloc_order(pma, (unsigned int)order, 0), UINT64_MAX);
	free_run(pma, extra, FR);
	for (unsigned int order = 0; order < 12; order++) {
		free_run(pma, addr[order], FR << order);
		p = alloc_order(pma, order + 1, 0);	/* the oracle decides */
		if (p != UINT64_MAX)
			free_run(pma, p, FR << (order + 1));
	}
	p = alloc_order(pma, 12, 0);
	assert_int_equal(p, 0);
	free_run(pma, 0, FR << 12);
	pma_destroy(pma);
}

/* alloc_pathological: a full region with every other frame freed is 50 % free yet has
 * no two adjacent free frames: nothing of two frames or more fits. */
static void test_pathological(void **state)
{
	struct pma *pma = tp_new1(0, 32 * MiB);
	struct pma_alloc_opts o = { 0 };
	uint64_t *pages = calloc(512, sizeof(*pages)), p;

	(void)state;
	assert_int_equal(pma_alloc_pages(pma, 512, K64, &o, pages), 0);
	tp_verify(pma);
	for (uint64_t f = 0; f < 512; f += 2)
		free_run(pma, f * FR, FR);
	assert_int_equal(pma_free_bytes(pma), 16 * MiB);
	assert_int_equal(pma_largest_free(pma), FR);
	for (unsigned int order = 1; order <= 9; order++)
		assert_int_equal(alloc_order(pma, order, 0), UINT64_MAX);
	o.flags = PMA_CONTIGUOUS;
	assert_int_equal(pma_alloc_pages(pma, 2, K64, &o, pages), -ENOMEM);
	o.flags = 0;
	assert_int_equal(pma_alloc_pages(pma, 1, K128, &o, &p), -ENOMEM);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), -ENOMEM);
	assert_int_equal(pma_alloc_pages(pma, 257, K64, &o, pages), -ENOMEM);
	tp_verify(pma);
	assert_int_equal(pma_alloc_pages(pma, 256, K64, &o, pages), 0);
	for (size_t i = 0; i < 256; i++)
		assert_true(pages[i] / FR % 2 == 0);
	assert_int_equal(pma_free_bytes(pma), 0);
	tp_verify(pma);
	free(pages);
	pma_destroy(pma);
}

/* alloc_contiguous: 48 frames dealt into left / middle / right by index mod 3. */
static void test_contiguous(void **state)
{
	struct pma *pma = tp_new1(0, 48 * FR);
	struct pma_alloc_opts contig = { .flags = PMA_CONTIGUOUS }, none = { 0 };
	uint64_t pages[48], *two, *three;
	int ret;

	(void)state;
	assert_int_equal(pma_alloc_pages(pma, 48, K64, &none, pages), 0);
	qsort(pages, 48, sizeof(pages[0]), cmp_u64);
	for (size_t i = 0; i < 48; i++)
		assert_int_equal(pages[i], i * FR);
	tp_verify(pma);
	assert_null(alloc_checked(pma, 3, K64, &contig, &ret));
	assert_int_equal(ret, -ENOMEM);
	for (size_t i = 1; i < 48; i += 3)		/* middle */
		free_run(pma, pages[i], FR);
	assert_null(alloc_checked(pma, 3, K64, &contig, &ret));
	assert_null(alloc_checked(pma, 2, K64, &contig, &ret));
	assert_int_equal(ret, -ENOMEM);
	for (size_t i = 2; i < 48; i += 3)		/* right */
		free_run(pma, pages[i], FR);
	assert_null(alloc_checked(pma, 3, K64, &contig, &ret));
	assert_int_equal(ret, -ENOMEM);
	two = alloc_checked(pma, 2, K64, &contig, &ret);	/* neighbours, not buddies */
	assert_non_null(two);
	for (size_t i = 0; i < 48; i += 3)		/* left */
		free_run(pma, pages[i], FR);
	three = alloc_checked(pma, 3, K64, &contig, &ret);
	assert_non_null(three);
	assert_int_equal(pma_free_bytes(pma), (48 - 5) * FR);
	free(two);
	free(three);
	pma_destroy(pma);
}

/* An exact range: RANGE [b, e) with CONTIGUOUS and count = (e - b) / page. */
static int alloc_exact(struct pma *pma, uint64_t b, uint64_t e, uint64_t page)
{
	struct pma_alloc_opts o = { .flags = PMA_RANGE | PMA_CONTIGUOUS, .range_begin = b,
				    .range_end = e };
	size_t count = (e - b) / page;
	uint64_t *pages = calloc(count + 1, sizeof(*pages));
	int ret;

	assert_non_null(pages);
	ret = pma_alloc_pages(pma, count, page, &o, pages);
	if (!ret) {
		for (size_t i = 0; i < count; i++)
			assert_int_equal(pages[i], b + i * page);
		for (uint64_t a = b; a < e; a += FR)
			assert_int_equal(tp_state(pma, a), PMA_STATE_UNPIN);
	}
	free(pages);
	tp_verify(pma);
	return ret;
}

/* alloc_range: exact ranges, whole and in pieces, with negative cases. */
static void test_range(void **state)
{
	struct pma *pma = tp_new1(0, 16 * MiB);
	uint64_t seed = 0x7a11e5ull, cuts[17];
	struct pma_alloc_opts o = { .flags = PMA_RANGE };
	uint64_t p;
	struct tp_snap s;

	(void)state;
	/* whole */
	assert_int_equal(alloc_exact(pma, 0, 16 * MiB, K64), 0);
	assert_int_equal(pma_free_bytes(pma), 0);
	assert_int_equal(pma_alloc_pages(pma, 1, K64, NULL, &p), -ENOMEM);
	free_run(pma, 0, 16 * MiB);
	assert_int_equal(pma_free_bytes(pma), 16 * MiB);
	/* quarters, out of order */
	static const int q[] = { 2, 0, 3, 1 };
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(alloc_exact(pma, q[i] * 4 * MiB, (q[i] + 1) * 4 * MiB, M2), 0);
	assert_int_equal(pma_free_bytes(pma), 0);
	free_run(pma, 0, 16 * MiB);
	/* single frames at both ends and the middle */
	assert_int_equal(alloc_exact(pma, 0, K64, K64), 0);
	assert_int_equal(alloc_exact(pma, 8 * MiB, 8 * MiB + K64, K64), 0);
	assert_int_equal(alloc_exact(pma, 16 * MiB - K64, 16 * MiB, K64), 0);
	free_run(pma, 0, K64);
	free_run(pma, 8 * MiB, K64);
	free_run(pma, 16 * MiB - K64, K64);
	/* 16 random slices, allocated exactly in random order */
	cuts[0] = 0;
	cuts[16] = 256;
	for (int i = 1; i < 16; i++)
		cuts[i] = 1 + tp_randn(&seed, 254);
	qsort(cuts, 17, sizeof(cuts[0]), cmp_u64);
	for (int i = 15; i >= 0; i--) {
		int k = (int)tp_randn(&seed, 16);

		for (int j = 0; j < 16; j++) {	/* the k-th slice not yet taken */
			int idx = (k + j) % 16;

			if (cuts[idx] == cuts[idx + 1] ||
			    tp_state(pma, cuts[idx] * FR) != PMA_STATE_FREE)
				continue;
			assert_int_equal(alloc_exact(pma, cuts[idx] * FR, cuts[idx + 1] * FR, K64), 0);
			break;
		}
	}
	assert_int_equal(pma_free_bytes(pma), 0);
	free_run(pma, 0, 16 * MiB);
	/* negative: half taken */
	assert_int_equal(alloc_exact(pma, 0, 8 * MiB, M2), 0);
	tp_snap_take(pma, &s);
	assert_int_equal(alloc_exact(pma, 0, 16 * MiB, M2), -ENOMEM);
	assert_int_equal(alloc_exact(pma, 0, 8 * MiB, M2), -ENOMEM);
	assert_int_equal(pma_alloc_fixed(pma, 0, 8 * MiB, NULL), -EEXIST);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	assert_int_equal(alloc_exact(pma, 8 * MiB, 16 * MiB, M2), 0);
	free_run(pma, 0, 16 * MiB);
	/* checkerboard of 64K frames */
	for (uint64_t a = 0; a < 4 * MiB; a += 2 * K64)
		assert_int_equal(pma_alloc_fixed(pma, a, K64, NULL), 0);
	tp_verify(pma);
	assert_int_equal(alloc_exact(pma, 0, 2 * K64, K64), -ENOMEM);
	assert_int_equal(alloc_exact(pma, 4 * K64, 6 * K64, K64), -ENOMEM);
	assert_int_equal(alloc_exact(pma, K64, 2 * K64, K64), 0);
	assert_int_equal(alloc_exact(pma, 3 * K64, 4 * K64, K64), 0);
	free_run(pma, 0, 4 * K64);
	for (uint64_t a = 4 * K64; a < 4 * MiB; a += 2 * K64)
		free_run(pma, a, K64);
	/* malformed ranges */
	tp_snap_take(pma, &s);
	o.range_begin = 32 * VGPU_KiB;
	o.range_end = 1 * MiB;
	assert_int_equal(pma_alloc_pages(pma, 1, K64, &o, &p), -EINVAL);
	o.range_begin = 0;
	o.range_end = K64 + 4096;
	assert_int_equal(pma_alloc_pages(pma, 1, K64, &o, &p), -EINVAL);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	/* the same exact range five times stays inside it */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(alloc_exact(pma, 4 * MiB, 6 * MiB, K128), 0);
		free_run(pma, 4 * MiB, 2 * MiB);
	}
	/* power-of-two exact ranges of each size */
	assert_int_equal(alloc_exact(pma, 0, K64, K64), 0);
	assert_int_equal(alloc_exact(pma, K128, 2 * K128, K128), 0);
	assert_int_equal(alloc_exact(pma, 1 * MiB, 2 * MiB, K128), 0);
	assert_int_equal(alloc_exact(pma, 4 * MiB, 8 * MiB, M2), 0);
	assert_int_equal(pma_free_bytes(pma), 16 * MiB - K64 - K128 - 1 * MiB - 4 * MiB);
	pma_destroy(pma);

	/* a region of 7 MiB (not a power of two): pieces and the whole */
	pma = tp_new1(0, 7 * MiB);
	assert_int_equal(alloc_exact(pma, 0, 4 * MiB, M2), 0);
	assert_int_equal(alloc_exact(pma, 4 * MiB, 6 * MiB, M2), 0);
	assert_int_equal(alloc_exact(pma, 6 * MiB, 7 * MiB, K64), 0);
	assert_int_equal(pma_free_bytes(pma), 0);
	free_run(pma, 0, 7 * MiB);
	assert_int_equal(alloc_exact(pma, 0, 7 * MiB, K64), 0);
	free_run(pma, 0, 7 * MiB);
	pma_destroy(pma);
}

/* The older alloc_range: consecutive exact fixed ranges of prime numbers of frames until
 * a region of random size is full. */
static void test_range_primes(void **state)
{
	static const unsigned int primes[] = { 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41,
					       43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97 };
	uint64_t seed = 0x9a1e5ull;

	(void)state;
	for (int round = 0; round < 3; round++) {
		uint64_t frames = 64 + tp_randn(&seed, 1500), base = tp_randn(&seed, 64) * 4 * MiB;
		struct pma *pma = tp_new1(base, frames * FR);
		uint64_t at = 0;

		for (size_t i = 0; at < frames; i = (i + 1) % VGPU_ARRAY_SIZE(primes)) {
			uint64_t n = cmn_min(primes[i], frames - at);
			struct pma_alloc_opts o = { .flags = i % 2 ? PMA_PINNED : 0 };

			assert_int_equal(pma_alloc_fixed(pma, base + at * FR, n * FR, &o), 0);
			assert_int_equal(tp_state(pma, base + at * FR) & PMA_STATE_MASK,
					 i % 2 ? PMA_STATE_PIN : PMA_STATE_UNPIN);
			if (at)
				assert_true(tp_allocated(tp_state(pma, base + (at - 1) * FR)));
			at += n;
			tp_verify(pma);
		}
		assert_int_equal(pma_free_bytes(pma), 0);
		free_run(pma, base, frames * FR);
		assert_int_equal(pma_largest_free(pma), frames * FR);
		pma_destroy(pma);
	}
}

/* alloc_range_bias: windows of 16 pages; in each, what does not fit fails and what fits
 * succeeds, until every window is full. Then one window grows from a random start. */
static void bias_round(uint64_t page, uint64_t *seed)
{
	uint64_t W = 16 * page, size = 8 * W - page, base = 1 * GiB;
	struct pma *pma = tp_new1(base, size);
	unsigned int order[8];
	int ret;

	for (unsigned int i = 0; i < 8; i++)
		order[i] = i;
	for (unsigned int i = 7; i > 0; i--) {
		unsigned int j = (unsigned int)tp_randn(seed, i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (unsigned int k = 0; k < 8; k++) {
		uint64_t b = base + order[k] * W, e = cmn_min(b + W, base + size);
		size_t n = (e - b) / page, r;
		struct pma_alloc_opts o = { .flags = PMA_RANGE, .range_begin = b, .range_end = e };
		uint64_t *p;

		o.flags = PMA_RANGE | PMA_CONTIGUOUS;
		assert_null(alloc_checked(pma, n + 1, page, &o, &ret));
		o.flags = PMA_RANGE;
		assert_null(alloc_checked(pma, n + 1, page, &o, &ret));
		o.range_begin = b + page;	/* shifted window: one page short */
		assert_null(alloc_checked(pma, n, page, &o, &ret));
		if (e - b == W) {
			/* half a window aligned to half a window, from a misaligned start */
			o = (struct pma_alloc_opts){ .flags = PMA_RANGE | PMA_CONTIGUOUS |
				PMA_FORCE_ALIGNMENT, .range_begin = b + page,
				.range_end = b + page + W / 2, .alignment = W / 2 };
			assert_null(alloc_checked(pma, n / 2, page, &o, &ret));
			/* the whole window aligned to itself */
			o.range_begin = b;
			o.range_end = e;
			o.alignment = W;
			p = alloc_checked(pma, n, page, &o, &ret);
			assert_non_null(p);
			assert_int_equal(p[0], b);
			free_run(pma, b, W);
			free(p);
			/* one page aligned to the window lands on its start */
			p = alloc_checked(pma, 1, page, &o, &ret);
			assert_non_null(p);
			assert_int_equal(p[0], b);
			free_run(pma, b, page);
			free(p);
		}
		o = (struct pma_alloc_opts){ .flags = PMA_RANGE, .range_begin = b, .range_end = e };
		r = 1 + tp_randn(seed, n);
		p = alloc_checked(pma, r, page, &o, &ret);
		assert_non_null(p);
		free(p);
		assert_null(alloc_checked(pma, n - r + 1, page, &o, &ret));
		if (n > r) {
			p = alloc_checked(pma, n - r, page, &o, &ret);
			assert_non_null(p);
			free(p);
		}
	}
	assert_int_equal(pma_free_bytes(pma), 0);
	free_run(pma, base, size);

	/* a window that grows both ways from a random start, filled as it grows */
	uint64_t lo = base + tp_randn(seed, size / page) * page, hi = lo;

	while (lo > base || hi < base + size) {
		uint64_t grow = (1 + tp_randn(seed, 8)) * page;
		struct pma_alloc_opts o = { .flags = PMA_RANGE };
		struct tp_view v;
		uint64_t *p;
		size_t avail;

		if (tp_randn(seed, 2))
			lo = lo - base >= grow ? lo - grow : base;
		else
			hi = base + size - hi >= grow ? hi + grow : base + size;
		o.range_begin = lo;
		o.range_end = hi;
		tp_view_read(pma, &v);
		avail = tp_pages_avail(&v, &o, page);
		tp_view_free(&v);
		if (!avail)
			continue;
		p = alloc_checked(pma, 1 + tp_randn(seed, avail), page, &o, &ret);
		assert_non_null(p);
		free(p);
	}
	struct pma_alloc_opts all = { 0 };
	struct tp_view v;

	tp_view_read(pma, &v);
	size_t left = tp_pages_avail(&v, &all, page);
	tp_view_free(&v);
	if (left) {
		uint64_t *p = alloc_checked(pma, left, page, &all, &ret);

		assert_non_null(p);
		free(p);
	}
	assert_int_equal(pma_free_bytes(pma), 0);
	assert_null(alloc_checked(pma, 1, page, &all, &ret));
	pma_destroy(pma);
}

static void test_range_bias(void **state)
{
	uint64_t seed = 0xb1a5ull;

	(void)state;
	bias_round(K64, &seed);
	bias_round(K128, &seed);
	bias_round(M2, &seed);
}

/* alloc_exceeds_max_order: 10 GiB, not a power of two. Contiguous 9 GiB fits in one
 * region; split into 8 GiB + 2 GiB regions it cannot, yet discontiguous 9 GiB can. */
static void test_exceeds_max_order(void **state)
{
	struct pma *pma = tp_new1(0, 10 * GiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	uint64_t *pages = calloc(4608, sizeof(*pages));

	(void)state;
	assert_int_equal(pma_alloc_pages(pma, 18, M512, &o, pages), 0);
	assert_int_equal(pages[17], pages[0] + 17 * M512);
	assert_int_equal(pma_check(pma), 0);
	assert_int_equal(pma_free_pages(pma, pages, 18, M512, 0), 0);
	assert_int_equal(pma_alloc_pages(pma, 4608, M2, &o, pages), 0);
	assert_int_equal(pages[4607], pages[0] + 4607 * M2);
	assert_int_equal(pma_free_pages(pma, pages, 4608, M2, 0), 0);
	assert_int_equal(pma_alloc_pages(pma, 21, M512, &o, pages), -ENOMEM);
	o.flags = PMA_CONTIGUOUS | PMA_RANGE;
	o.range_end = 10 * GiB;
	assert_int_equal(pma_alloc_pages(pma, 20, M512, &o, pages), 0);
	assert_int_equal(pages[0], 0);
	assert_int_equal(pma_free_bytes(pma), 0);
	assert_int_equal(pma_free_pages(pma, pages, 20, M512, 0), 0);
	assert_int_equal(pma_largest_free(pma), 10 * GiB);
	assert_int_equal(pma_check(pma), 0);
	pma_destroy(pma);

	static const struct tp_region two[] = {
		{ 0, 8 * GiB, 1, false }, { 8 * GiB, 2 * GiB, 1, false },
	};
	pma = tp_new(NULL, two, 2);
	o.flags = PMA_CONTIGUOUS;
	assert_int_equal(pma_alloc_pages(pma, 18, M512, &o, pages), -ENOMEM);
	assert_int_equal(pma_free_bytes(pma), 10 * GiB);
	assert_int_equal(pma_alloc_pages(pma, 16, M512, &o, pages), 0);
	assert_int_equal(pages[0], 0);
	assert_int_equal(pma_free_pages(pma, pages, 16, M512, 0), 0);
	o.flags = 0;
	assert_int_equal(pma_alloc_pages(pma, 18, M512, &o, pages), 0);
	assert_int_equal(pma_free_bytes(pma), 1 * GiB);
	assert_int_equal(pma_check(pma), 0);
	assert_int_equal(pma_free_pages(pma, pages, 18, M512, 0), 0);
	assert_int_equal(pma_check(pma), 0);
	free(pages);
	pma_destroy(pma);
}

/* offset_aligned_allocation: small pages on large alignments, in a 4 MiB region. */
static void test_offset_aligned(void **state)
{
	struct pma *pma = tp_new1(0, 4 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS | PMA_FORCE_ALIGNMENT,
				    .alignment = 256 * VGPU_KiB };
	uint64_t held[16], *p;
	int ret;

	(void)state;
	for (int i = 0; i < 16; i++) {
		p = alloc_checked(pma, 1, K64, &o, &ret);
		assert_non_null(p);
		assert_true(cmn_is_aligned(p[0], 256 * VGPU_KiB));
		held[i] = p[0];
		free(p);
	}
	assert_null(alloc_checked(pma, 1, K64, &o, &ret));
	assert_int_equal(ret, -ENOMEM);
	assert_int_equal(pma_free_bytes(pma), 48 * FR);
	for (int i = 0; i < 16; i++)
		free_run(pma, held[i], K64);
	/* 128K pages on 256K: 16 fit, free every other, 8 more fit, then none */
	for (int i = 0; i < 16; i++) {
		p = alloc_checked(pma, 1, K128, &o, &ret);
		assert_non_null(p);
		held[i] = p[0];
		free(p);
	}
	qsort(held, 16, sizeof(held[0]), cmp_u64);
	for (int i = 0; i < 16; i += 2)
		free_run(pma, held[i], K128);
	for (int i = 0; i < 8; i++) {
		p = alloc_checked(pma, 1, K128, &o, &ret);
		assert_non_null(p);
		assert_true(cmn_is_aligned(p[0], 256 * VGPU_KiB));
		free(p);
	}
	assert_null(alloc_checked(pma, 1, K128, &o, &ret));
	assert_int_equal(pma_free_bytes(pma), 2 * MiB);
	pma_destroy(pma);
}

/* subtree_offset_alignment_stress: in 2 MiB, 64K pages at alignments 1M .. 128K until
 * each runs out; everything freed in reverse, the region is whole again. */
static void test_alignment_stress(void **state)
{
	struct pma *pma = tp_new1(0, 2 * MiB);
	uint64_t held[32];
	size_t n = 0;
	int ret;

	(void)state;
	for (uint64_t align = 1 * MiB; align >= K128; align /= 2) {
		struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS | PMA_FORCE_ALIGNMENT,
					    .alignment = align };
		uint64_t *p;

		while ((p = alloc_checked(pma, 1, K64, &o, &ret))) {
			assert_true(cmn_is_aligned(p[0], align));
			held[n++] = p[0];
			free(p);
		}
		assert_int_equal(n, 2 * MiB / align);	/* every slot of this alignment */
	}
	while (n--)
		free_run(pma, held[n], K64);
	assert_int_equal(alloc_order(pma, 5, 0), 0);
	pma_destroy(pma);
}

/* fragmentation (the SLOW KUnit case, without the timing): a region filled with 64K
 * pages and freed in patterns that keep neighbours apart for a long time must still be
 * whole 2 MiB pages afterwards. Clean/dirty is played by scrubbed vs SKIP_SCRUB frees. */
static void test_fragmentation(void **state)
{
	struct pma_config cfg = { .scrub_on_free = true };
	struct tp_region r = { 0, 64 * MiB, 0, false };
	struct pma *pma = tp_new(&cfg, &r, 1);
	uint64_t *pages = calloc(1024, sizeof(*pages));
	struct pma_alloc_opts o = { 0 };

	(void)state;
	for (int part = 0; part < 2; part++) {
		assert_int_equal(pma_alloc_pages(pma, 1024, K64, &o, pages), 0);
		qsort(pages, 1024, sizeof(pages[0]), cmp_u64);
		if (part == 0) {
			/* groups of four: 0 and 3 freed scrubbed, 1 and 2 freed dirty */
			for (size_t i = 0; i < 1024; i++) {
				unsigned int fl = (i % 4 == 0 || i % 4 == 3) ? 0 : PMA_FREE_SKIP_SCRUB;

				assert_int_equal(pma_free_pages(pma, &pages[i], 1, K64, fl), 0);
				pma_scrub_wait(pma);
				tp_verify(pma);
			}
		} else {
			/* every second one, then the rest from the top down */
			for (size_t i = 0; i < 1024; i += 2) {
				assert_int_equal(pma_free_pages(pma, &pages[i], 1, K64, 0), 0);
				pma_scrub_wait(pma);
				tp_verify(pma);
			}
			for (size_t i = 1024; i-- > 0;) {
				if (!(i % 2))
					continue;
				assert_int_equal(pma_free_pages(pma, &pages[i], 1, K64, 0), 0);
				pma_scrub_wait(pma);
				tp_verify(pma);
			}
		}
		assert_int_equal(pma_free_bytes(pma), 64 * MiB);
		assert_int_equal(pma_alloc_pages(pma, 32, M2, &o, pages), 0);
		tp_verify(pma);
		assert_int_equal(pma_free_pages(pma, pages, 32, M2, PMA_FREE_SKIP_SCRUB), 0);
		o.flags = PMA_CONTIGUOUS;
		assert_int_equal(pma_alloc_pages(pma, 32, M2, &o, pages), 0);
		assert_int_equal(pages[0], 0);
		assert_int_equal(pma_free_pages(pma, pages, 32, M2, PMA_FREE_SKIP_SCRUB), 0);
		o.flags = 0;
		tp_verify(pma);
	}
	free(pages);
	pma_destroy(pma);
}

/* The older alloc_smoke: regions of random size are filled greedily, largest page size
 * first, and every step the oracle says fits must succeed; the region ends full. */
static void test_smoke(void **state)
{
	static const uint64_t sizes[] = { M512, M2, K128, K64 };
	uint64_t seed = 0x5a0cull;

	(void)state;
	for (int round = 0; round < 4; round++) {
		uint64_t size = (1 + tp_randn(&seed, 24576)) * FR;	/* up to 1.5 GiB */
		uint64_t base = tp_randn(&seed, 4) * M512 + tp_randn(&seed, 32) * FR;
		struct pma *pma = tp_new1(base, size);
		struct pma_alloc_opts o = { 0 };

		for (size_t k = 0; k < VGPU_ARRAY_SIZE(sizes); k++) {
			uint64_t *p;
			struct tp_view v;
			int ret;

			for (int j = 0; j < 6; j++) {
				p = alloc_checked(pma, 1 + tp_randn(&seed, 3), sizes[k], &o, &ret);
				if (!p)
					break;
				free(p);
			}
			/* what is left at this size goes in one call */
			tp_view_read(pma, &v);
			size_t left = tp_pages_avail(&v, &o, sizes[k]);

			tp_view_free(&v);
			if (left) {
				p = alloc_checked(pma, left, sizes[k], &o, &ret);
				assert_non_null(p);
				free(p);
			}
		}
		assert_int_equal(pma_free_bytes(pma), 0);
		free_run(pma, base, size);
		pma_destroy(pma);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_optimistic),
		cmocka_unit_test(test_pessimistic),
		cmocka_unit_test(test_pathological),
		cmocka_unit_test(test_contiguous),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_range_primes),
		cmocka_unit_test(test_range_bias),
		cmocka_unit_test(test_exceeds_max_order),
		cmocka_unit_test(test_offset_aligned),
		cmocka_unit_test(test_alignment_stress),
		cmocka_unit_test(test_fragmentation),
		cmocka_unit_test(test_smoke),
	};

	return cmocka_run_group_tests_name("pma_buddy", tests, NULL, NULL);
}
