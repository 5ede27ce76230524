// SPDX-License-Identifier: MIT
/* pma: scrub-on-free (with a scrubber the test controls, and the default one over a backing
 * buffer), IS_ZERO / NO_ZERO / SKIP_SCRUB, eviction callbacks with retries and unregister,
 * and the static and dynamic blacklist. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "pma_test.h"

/* ---- a scrubber the test controls ------------------------------------------------------ */

struct scrubber {
	pthread_mutex_t lock;
	int ret;			/* what each call returns */
	unsigned int sleep_us;
	uint8_t *backing;		/* zeroed by the scrubber when set (like the default) */
	size_t calls;
	uint64_t bytes;
	uint8_t *hits;			/* per frame of [0, nframes): times scrubbed */
	size_t nframes;
	atomic_int running;
	atomic_size_t done;
};

static int scrub_fn(void *ctx, uint64_t addr, uint64_t size)
{
	struct scrubber *s = ctx;
	int ret;

	atomic_fetch_add(&s->running, 1);
	if (s->sleep_us)
		usleep(s->sleep_us);
	pthread_mutex_lock(&s->lock);
	s->calls++;
	s->bytes += size;
	for (uint64_t a = addr; a < addr + size; a += FR)
		if (s->hits && a / FR < s->nframes)
			s->hits[a / FR]++;
	if (s->backing && !s->ret)
		memset(s->backing + addr, 0, size);
	ret = s->ret;
	pthread_mutex_unlock(&s->lock);
	atomic_fetch_sub(&s->running, 1);
	atomic_fetch_add(&s->done, 1);
	return ret;
}

static void scrubber_init(struct scrubber *s, int ret, size_t nframes)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	s->ret = ret;
	s->nframes = nframes;
	s->hits = calloc(nframes, 1);
	assert_non_null(s->hits);
}

static void scrubber_fini(struct scrubber *s)
{
	free(s->hits);
	pthread_mutex_destroy(&s->lock);
}

static size_t scrubber_calls(struct scrubber *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->calls;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* One region [0, size) with scrub-on-free and the test's scrubber. */
static struct pma *scrub_pma(struct scrubber *s, uint64_t size, bool on_free)
{
	struct pma_config cfg = { .scrub_on_free = on_free, .scrub = scrub_fn, .scrub_ctx = s };
	struct tp_region r = { 0, size, 0, false };

	return tp_new(&cfg, &r, 1);
}

static bool all_bytes(const uint8_t *p, uint64_t n, uint8_t v)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* Freed frames are scrubbed exactly once each, nothing else is, and they come back. */
static void test_scrub_on_free(void **state)
{
	struct scrubber s;
	struct pma *pma;
	uint64_t pages[3];
	struct pma_stats st;

	(void)state;
	scrubber_init(&s, 0, 256);
	pma = scrub_pma(&s, 16 * MiB, true);
	assert_int_equal(pma_alloc_pages(pma, 3, M2, NULL, pages), 0);
	assert_int_equal(pma_free_pages(pma, pages, 3, M2, 0), 0);
	pma_scrub_wait(pma);
	for (uint64_t f = 0; f < 256; f++) {
		bool freed = false;

		for (int i = 0; i < 3; i++)
			freed |= f * FR >= pages[i] && f * FR < pages[i] + M2;
		if (s.hits[f] != freed)
			fail_msg("frame %llu scrubbed %u times (freed: %d)", (unsigned long long)f,
				 s.hits[f], freed);
		assert_int_equal(tp_state(pma, f * FR), PMA_STATE_FREE);
	}
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 16 * MiB);
	assert_int_equal(st.scrubbing_bytes, 0);
	tp_verify(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
}

/* pma_alloc_pages() on another thread, given @secs to return: a hang fails this test
 * (the stuck thread and its instance are abandoned) instead of stalling the suite. */
struct bounded_alloc {
	struct pma *pma;
	size_t count;
	uint64_t page;
	struct pma_alloc_opts *o;
	uint64_t *pages;
	int ret;
};

static void *bounded_alloc_main(void *arg)
{
	struct bounded_alloc *b = arg;

	b->ret = pma_alloc_pages(b->pma, b->count, b->page, b->o, b->pages);
	return NULL;
}

static bool alloc_bounded(struct pma *pma, size_t count, uint64_t page,
			  struct pma_alloc_opts *o, uint64_t *pages, int *ret)
{
	struct bounded_alloc *b = malloc(sizeof(*b));
	struct timespec deadline;
	pthread_t t;

	assert_non_null(b);
	*b = (struct bounded_alloc){ pma, count, page, o, pages, 1 };
	assert_int_equal(pthread_create(&t, NULL, bounded_alloc_main, b), 0);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 20;
	if (pthread_timedjoin_np(t, NULL, &deadline)) {
		pthread_detach(t);
		return false;		/* b, o, pages stay with the stuck thread */
	}
	*ret = b->ret;
	free(b);
	return true;
}

/* A scrubber that fails keeps frames SCRUBBING: not allocatable, not free, not part of
 * any free extent, until pma_scrub_complete() says they are clean. */
static void test_scrub_held(void **state)
{
	struct scrubber s;
	struct pma *pma;
	struct pma_alloc_opts o = { 0 };
	struct pma_stats st;
	struct tp_snap snap;
	uint64_t p;

	(void)state;
	scrubber_init(&s, -EIO, 128);
	pma = scrub_pma(&s, 8 * MiB, true);
	assert_int_equal(pma_alloc_fixed(pma, 0, 8 * MiB, NULL), 0);
	assert_int_equal(pma_free_range(pma, 0, 4 * MiB, 0), 0);
	/* SCRUBBING from the moment free returns, before the worker ran */
	assert_int_equal(tp_state(pma, 0), PMA_STATE_FREE | PMA_ATTR_SCRUBBING);
	assert_int_equal(tp_state(pma, 4 * MiB - FR), PMA_STATE_FREE | PMA_ATTR_SCRUBBING);
	pma_scrub_wait(pma);
	assert_true(scrubber_calls(&s) >= 1);
	assert_int_equal(tp_state(pma, 2 * MiB), PMA_STATE_FREE | PMA_ATTR_SCRUBBING);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 0);
	assert_int_equal(st.scrubbing_bytes, 4 * MiB);
	assert_int_equal(st.free_2m_pages, 0);
	assert_int_equal(st.largest_free_bytes, 0);
	tp_verify(pma);
	tp_snap_take(pma, &snap);
	static struct pma_alloc_opts held_o;	/* static: a stuck thread may keep using it */
	static uint64_t held_p;
	int ret;

	if (!alloc_bounded(pma, 1, K64, &held_o, &held_p, &ret))
		fail_msg("pma_alloc_pages() did not return in 20 s while only SCRUBBING frames "
			 "(whose scrub failed) were left");
	assert_int_equal(ret, -ENOMEM);
	o.flags = PMA_NO_ZERO;
	assert_int_equal(pma_alloc_pages(pma, 1, K64, &o, &p), -ENOMEM);
	assert_int_equal(pma_alloc_fixed(pma, 0, K64, NULL), -ENOMEM);
	assert_int_equal(pma_scrub_complete(pma, 0, 4096), -EINVAL);
	assert_int_equal(pma_scrub_complete(pma, 64 * MiB, 2 * MiB), -EINVAL);
	assert_int_equal(pma_scrub_complete(pma, 0, 0), -EINVAL);
	tp_snap_assert_same(pma, &snap);
	tp_snap_free(&snap);
	/* half of it is declared clean */
	assert_int_equal(pma_scrub_complete(pma, 0, 2 * MiB), 0);
	assert_int_equal(tp_state(pma, 0), PMA_STATE_FREE);
	assert_int_equal(tp_state(pma, 2 * MiB), PMA_STATE_FREE | PMA_ATTR_SCRUBBING);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 2 * MiB);
	assert_int_equal(st.scrubbing_bytes, 2 * MiB);
	assert_int_equal(st.free_2m_pages, 1);
	tp_verify(pma);
	o.flags = 0;
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_int_equal(p, 0);
	assert_true(o.result_flags & PMA_RESULT_IS_ZERO);	/* scrubbed, as we said */
	/* completing allocated frames changes nothing */
	assert_int_equal(pma_scrub_complete(pma, 0, 2 * MiB), 0);
	assert_int_equal(tp_state(pma, 0), PMA_STATE_UNPIN);
	assert_int_equal(pma_scrub_complete(pma, 2 * MiB, 2 * MiB), 0);
	pma_get_stats(pma, &st);
	assert_int_equal(st.scrubbing_bytes, 0);
	assert_int_equal(st.free_bytes, 2 * MiB);
	tp_verify(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
}

/* The default scrubber zeroes freed memory in the backing buffer and nothing else;
 * IS_ZERO is reported and true. */
static void test_scrub_default_backing(void **state)
{
	uint8_t *mem = aligned_alloc(FR, 32 * MiB);
	struct pma_config cfg = { .scrub_on_free = true, .backing = mem };
	struct tp_region r = { 0, 32 * MiB, 0, false };
	struct pma *pma;
	struct pma_alloc_opts o = { 0 };
	uint64_t p, q;

	(void)state;
	assert_non_null(mem);
	memset(mem, 0, 32 * MiB);		/* fresh device memory reads zero */
	pma = tp_new(&cfg, &r, 1);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	if (o.result_flags & PMA_RESULT_IS_ZERO)
		assert_true(all_bytes(mem + p, M2, 0));
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &q), 0);
	memset(mem + p, 0xab, M2);
	memset(mem + q, 0xcd, M2);
	assert_int_equal(pma_free_pages(pma, &p, 1, M2, 0), 0);
	pma_scrub_wait(pma);
	assert_true(all_bytes(mem + p, M2, 0));
	assert_true(all_bytes(mem + q, M2, 0xcd));	/* still allocated: untouched */
	assert_int_equal(tp_state(pma, p), PMA_STATE_FREE);
	tp_verify(pma);
	o = (struct pma_alloc_opts){ .flags = PMA_RANGE, .range_begin = p, .range_end = p + M2 };
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_true(o.result_flags & PMA_RESULT_IS_ZERO);
	assert_true(all_bytes(mem + p, M2, 0));
	tp_verify(pma);
	pma_destroy(pma);
	free(mem);
}

/* SKIP_SCRUB frees at once, without the scrubber; the memory is then not known zero. */
static void test_skip_scrub(void **state)
{
	uint8_t *mem = aligned_alloc(FR, 8 * MiB);
	struct scrubber s;
	struct pma_config cfg;
	struct tp_region r = { 0, 8 * MiB, 0, false };
	struct pma_alloc_opts o = { 0 };
	struct pma *pma;
	uint64_t p;

	(void)state;
	assert_non_null(mem);
	memset(mem, 0, 8 * MiB);
	scrubber_init(&s, 0, 128);
	s.backing = mem;
	cfg = (struct pma_config){ .scrub_on_free = true, .scrub = scrub_fn, .scrub_ctx = &s,
				   .backing = mem };
	pma = tp_new(&cfg, &r, 1);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	memset(mem + p, 0xab, M2);
	assert_int_equal(pma_free_pages(pma, &p, 1, M2, PMA_FREE_SKIP_SCRUB), 0);
	assert_int_equal(tp_state(pma, p), PMA_STATE_FREE);
	assert_int_equal(pma_free_bytes(pma), 8 * MiB);
	pma_scrub_wait(pma);
	assert_int_equal(scrubber_calls(&s), 0);
	assert_true(all_bytes(mem + p, M2, 0xab));
	tp_verify(pma);
	o = (struct pma_alloc_opts){ .flags = PMA_RANGE, .range_begin = p, .range_end = p + M2 };
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_false(o.result_flags & PMA_RESULT_IS_ZERO);
	/* a frame of it freed normally is scrubbed and known zero again */
	assert_int_equal(pma_free_pages(pma, &p, 1, M2, 0), 0);
	pma_scrub_wait(pma);
	assert_int_equal(scrubber_calls(&s) > 0, 1);
	assert_true(all_bytes(mem + p, M2, 0));
	o.result_flags = 0;
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_true(o.result_flags & PMA_RESULT_IS_ZERO);
	tp_verify(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
	free(mem);
}

/* NO_ZERO: the caller does not need zeroes, so it gets no scrub on its behalf; IS_ZERO is
 * still a statement of fact: set only when the pages read zero. */
static void test_no_zero(void **state)
{
	uint8_t *mem = aligned_alloc(FR, 8 * MiB);
	struct scrubber s;
	struct pma_config cfg;
	struct tp_region r = { 0, 8 * MiB, 0, false };
	struct pma_alloc_opts o = { .flags = PMA_NO_ZERO };
	struct pma *pma;
	uint64_t p, four[4];

	(void)state;
	assert_non_null(mem);
	memset(mem, 0, 8 * MiB);
	scrubber_init(&s, 0, 128);
	s.backing = mem;
	cfg = (struct pma_config){ .scrub_on_free = true, .scrub = scrub_fn, .scrub_ctx = &s,
				   .backing = mem };
	pma = tp_new(&cfg, &r, 1);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	if (o.result_flags & PMA_RESULT_IS_ZERO)
		assert_true(all_bytes(mem + p, M2, 0));
	memset(mem + p, 0xab, M2);
	assert_int_equal(pma_free_pages(pma, &p, 1, M2, PMA_FREE_SKIP_SCRUB), 0);
	o.result_flags = PMA_RESULT_IS_ZERO;	/* must be overwritten */
	assert_int_equal(pma_alloc_pages(pma, 4, M2, &o, four), 0);
	assert_false(o.result_flags & PMA_RESULT_IS_ZERO);	/* one of them is 0xab */
	tp_verify(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
	free(mem);
}

/* Without scrub-on-free, free is immediate, the scrubber is never called, and reused
 * memory is not claimed zero. */
static void test_no_scrub_on_free(void **state)
{
	struct scrubber s;
	struct pma *pma;
	struct pma_alloc_opts o = { 0 };
	uint64_t p, q;

	(void)state;
	scrubber_init(&s, 0, 128);
	pma = scrub_pma(&s, 8 * MiB, false);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_int_equal(pma_free_pages(pma, &p, 1, M2, 0), 0);
	assert_int_equal(tp_state(pma, p), PMA_STATE_FREE);
	pma_scrub_wait(pma);
	assert_int_equal(scrubber_calls(&s), 0);
	o = (struct pma_alloc_opts){ .flags = PMA_RANGE, .range_begin = p, .range_end = p + M2 };
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &q), 0);
	assert_int_equal(q, p);
	assert_false(o.result_flags & PMA_RESULT_IS_ZERO);
	tp_verify(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
}

/* pma_destroy() waits for the scrubber: no call runs or starts after it returns. */
static void test_destroy_waits_for_scrub(void **state)
{
	struct scrubber s;
	struct pma *pma;
	uint64_t pages[8];

	(void)state;
	scrubber_init(&s, 0, 256);
	s.sleep_us = 20000;
	pma = scrub_pma(&s, 16 * MiB, true);
	assert_int_equal(pma_alloc_pages(pma, 8, M2, NULL, pages), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(pma_free_pages(pma, &pages[i], 1, M2, 0), 0);
	pma_destroy(pma);
	assert_int_equal(atomic_load(&s.running), 0);
	size_t done = atomic_load(&s.done);

	usleep(50000);
	assert_int_equal(atomic_load(&s.done), done);
	scrubber_fini(&s);
}

/* ---- eviction ---------------------------------------------------------------------------- */

/* The owner of unpinned memory, as UVM would be: it tracks what it allocated and frees
 * whatever an eviction callback asks for. */
struct client {
	struct pma *pma;
	pthread_mutex_t lock;
	uint64_t addr[1024], size[1024];
	bool live[1024];
	size_t n;
	/* what the callbacks saw */
	unsigned int range_calls, pages_calls, fail_first;
	uint64_t begin, end, page_size, evict_list[256];
	size_t evict_count;
	bool saw_evicting, saw_not_evicting;
	int pin_probe, free_err;
	/* blocking, for the unregister test */
	bool block;
	atomic_bool in_cb, released, cb_done;
};

static void client_init(struct client *c, struct pma *pma)
{
	memset(c, 0, sizeof(*c));
	c->pma = pma;
	c->pin_probe = 1;
	pthread_mutex_init(&c->lock, NULL);
}

/* Fill region @rid with 64K UNPIN pages the client owns. */
static void client_fill(struct client *c, unsigned int rid, uint32_t flags)
{
	struct pma_region_desc d;

	assert_int_equal(pma_region_get(c->pma, rid, &d), 0);
	for (uint64_t a = d.base; a < d.base + d.size; a += FR) {
		struct pma_alloc_opts o = { .flags = flags };

		assert_true(c->n < VGPU_ARRAY_SIZE(c->addr));
		assert_int_equal(pma_alloc_fixed(c->pma, a, FR, &o), 0);
		c->addr[c->n] = a;
		c->size[c->n] = FR;
		c->live[c->n++] = true;
	}
}

static size_t client_live(struct client *c)
{
	size_t n = 0;

	for (size_t i = 0; i < c->n; i++)
		n += c->live[i];
	return n;
}

/* Free the client's allocations overlapping [b, e); probe pin and state on the way. */
static void client_evict(struct client *c, uint64_t b, uint64_t e)
{
	for (size_t i = 0; i < c->n; i++) {
		uint32_t st = 0;

		if (!c->live[i] || c->addr[i] + c->size[i] <= b || c->addr[i] >= e)
			continue;
		if (pma_query(c->pma, c->addr[i], &st) == 0) {
			if (st & PMA_ATTR_EVICTING)
				c->saw_evicting = true;
			else
				c->saw_not_evicting = true;
		}
		if (c->pin_probe == 1)
			c->pin_probe = pma_pin_pages(c->pma, &c->addr[i], 1, FR);
		int ret = pma_free_range(c->pma, c->addr[i], c->size[i], 0);

		if (ret)
			c->free_err = ret;
		c->live[i] = false;
	}
}

static int evict_range_cb(void *ctx, uint64_t begin, uint64_t end)
{
	struct client *c = ctx;

	pthread_mutex_lock(&c->lock);
	c->range_calls++;
	c->begin = begin;
	c->end = end;
	if (c->range_calls <= c->fail_first) {
		pthread_mutex_unlock(&c->lock);
		return -EAGAIN;
	}
	client_evict(c, begin, end);
	pthread_mutex_unlock(&c->lock);
	if (c->block) {
		atomic_store(&c->in_cb, true);
		while (!atomic_load(&c->released))
			usleep(1000);
	}
	atomic_store(&c->cb_done, true);
	return 0;
}

static int evict_pages_cb(void *ctx, uint64_t page_size, const uint64_t *pages, size_t count)
{
	struct client *c = ctx;

	pthread_mutex_lock(&c->lock);
	c->pages_calls++;
	c->page_size = page_size;
	c->evict_count = count;
	memcpy(c->evict_list, pages, cmn_min(count, VGPU_ARRAY_SIZE(c->evict_list)) * 8);
	if (c->pages_calls <= c->fail_first) {
		pthread_mutex_unlock(&c->lock);
		return -EAGAIN;
	}
	for (size_t i = 0; i < count; i++)
		client_evict(c, pages[i], pages[i] + page_size);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void client_register(struct client *c)
{
	struct pma_evict_ops ops = { evict_range_cb, evict_pages_cb, c };

	assert_int_equal(pma_evict_register(c->pma, &ops), 0);
}

/* No frame anywhere is left EVICTING. */
static void assert_no_evicting(struct pma *pma)
{
	struct tp_view v;

	tp_view_read(pma, &v);
	for (size_t i = 0; i < v.nframes; i++)
		assert_false(v.st[i] & PMA_ATTR_EVICTING);
	tp_view_free(&v);
}

/* Contiguous: one evict_range call for exactly the run handed out; frames in it read
 * EVICTING during the call and cannot be pinned (-EBUSY). */
static void test_evict_range(void **state)
{
	struct pma *pma = tp_new1(0, 16 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS | PMA_PINNED };
	struct client c;
	uint64_t p;

	(void)state;
	client_init(&c, pma);
	client_fill(&c, 0, 0);
	client_register(&c);
	tp_verify(pma);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_int_equal(c.range_calls, 1);
	assert_int_equal(c.pages_calls, 0);
	assert_int_equal(c.end - c.begin, M2);
	assert_true(cmn_is_aligned(c.begin, M2));
	assert_int_equal(p, c.begin);
	assert_true(c.saw_evicting);
	assert_false(c.saw_not_evicting);
	assert_int_equal(c.pin_probe, -EBUSY);
	assert_int_equal(c.free_err, 0);
	assert_int_equal(client_live(&c), 256 - 32);
	for (uint64_t a = 0; a < 16 * MiB; a += FR)
		assert_int_equal(tp_state(pma, a), a >= p && a < p + M2 ? PMA_STATE_PIN :
						    PMA_STATE_UNPIN);
	assert_no_evicting(pma);
	tp_verify(pma);
	pma_evict_unregister(pma);
	pma_destroy(pma);
}

/* A run made of free frames and one evictable allocation. */
static void test_evict_range_mixed(void **state)
{
	struct pma *pma = tp_new1(0, 4 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	struct client c;
	uint64_t p[2];

	(void)state;
	client_init(&c, pma);
	assert_int_equal(pma_alloc_fixed(pma, 1 * MiB, 3 * K64, NULL), 0);
	c.addr[0] = 1 * MiB;
	c.size[0] = 3 * K64;
	c.live[0] = true;
	c.n = 1;
	client_register(&c);
	assert_int_equal(pma_alloc_pages(pma, 2, M2, &o, p), 0);
	assert_int_equal(c.range_calls, 1);
	assert_true(c.begin <= 1 * MiB && c.end >= 1 * MiB + 3 * K64);
	assert_int_equal(p[0], 0);
	assert_int_equal(client_live(&c), 0);
	assert_int_equal(tp_state(pma, 1 * MiB), PMA_STATE_UNPIN);
	assert_no_evicting(pma);
	tp_verify(pma);
	pma_evict_unregister(pma);
	pma_destroy(pma);
}

/* Discontiguous: one evict_pages call listing the pages to free, of the request's size. */
static void test_evict_pages(void **state)
{
	struct pma *pma = tp_new1(0, 16 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_PINNED };
	struct client c;
	uint64_t p[3];

	(void)state;
	client_init(&c, pma);
	client_fill(&c, 0, 0);
	client_register(&c);
	assert_int_equal(pma_alloc_pages(pma, 3, K128, &o, p), 0);
	assert_int_equal(c.pages_calls, 1);
	assert_int_equal(c.range_calls, 0);
	assert_int_equal(c.page_size, K128);
	assert_int_equal(c.evict_count, 3);
	for (int i = 0; i < 3; i++) {
		bool listed = false;

		for (size_t j = 0; j < c.evict_count; j++)
			listed |= c.evict_list[j] == p[i];
		assert_true(listed);
		assert_int_equal(tp_state(pma, p[i]), PMA_STATE_PIN);
		assert_int_equal(tp_state(pma, p[i] + K64), PMA_STATE_PIN);
	}
	assert_int_equal(c.free_err, 0);
	assert_int_equal(client_live(&c), 256 - 6);
	assert_no_evicting(pma);
	tp_verify(pma);
	pma_evict_unregister(pma);
	pma_destroy(pma);
}

/* Cases where no callback may run: DONT_EVICT, pinned memory in the way, none registered. */
static const struct noevict_case {
	const char *name;
	uint32_t fill_flags, alloc_flags;
	bool registered;
} noevict_cases[] = {
	{ "DONT_EVICT, contiguous", 0, PMA_DONT_EVICT | PMA_CONTIGUOUS, true },
	{ "DONT_EVICT, discontiguous", 0, PMA_DONT_EVICT, true },
	{ "pinned memory is never evicted, contiguous", PMA_PINNED, PMA_CONTIGUOUS, true },
	{ "pinned memory is never evicted, discontiguous", PMA_PINNED, 0, true },
	{ "no callbacks registered, contiguous", 0, PMA_CONTIGUOUS, false },
	{ "no callbacks registered, discontiguous", 0, 0, false },
};

static void test_noevict_case(void **state)
{
	const struct noevict_case *nc = *state;
	struct pma *pma = tp_new1(0, 8 * MiB);
	struct pma_alloc_opts o = { .flags = nc->alloc_flags };
	struct client c;
	struct tp_snap s;
	uint64_t p[2];

	client_init(&c, pma);
	client_fill(&c, 0, nc->fill_flags);
	if (nc->registered)
		client_register(&c);
	tp_snap_take(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 2, M2, &o, p), -ENOMEM);
	assert_int_equal(c.range_calls + c.pages_calls, 0);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	if (nc->registered)
		pma_evict_unregister(pma);
	pma_destroy(pma);
}

/* Bounded retries: a callback that fails (without freeing) is called at most
 * evict_retries times (0 means 3); success within the budget completes the allocation. */
static const struct retry_case {
	const char *name;
	unsigned int retries, fail_first;
	bool contiguous;
	int want;
	unsigned int calls;
} retry_cases[] = {
	{ "default 3: fails twice, then evicts", 0, 2, true, 0, 3 },
	{ "default 3: fails three times", 0, 3, true, -ENOMEM, 3 },
	{ "5: fails four times, then evicts", 5, 4, true, 0, 5 },
	{ "5: always fails", 5, 100, true, -ENOMEM, 5 },
	{ "1: fails once", 1, 1, true, -ENOMEM, 1 },
	{ "1: evicts at once", 1, 0, true, 0, 1 },
	{ "pages, default 3: fails twice, then evicts", 0, 2, false, 0, 3 },
	{ "pages, default 3: always fails", 0, 100, false, -ENOMEM, 3 },
};

static void test_retry_case(void **state)
{
	const struct retry_case *rc = *state;
	struct pma_config cfg = { .evict_retries = rc->retries };
	struct tp_region r = { 0, 8 * MiB, 0, false };
	struct pma *pma = tp_new(&cfg, &r, 1);
	struct pma_alloc_opts o = { .flags = PMA_PINNED | (rc->contiguous ? PMA_CONTIGUOUS : 0) };
	struct client c;
	struct tp_snap s;
	uint64_t p[2];

	client_init(&c, pma);
	client_fill(&c, 0, 0);
	client_register(&c);
	c.fail_first = rc->fail_first;
	c.pin_probe = 0;
	tp_snap_take(pma, &s);
	assert_int_equal(pma_alloc_pages(pma, 2, M2, &o, p), rc->want);
	assert_int_equal(c.range_calls + c.pages_calls, rc->calls);
	assert_no_evicting(pma);
	if (rc->want)
		tp_snap_assert_same(pma, &s);
	else
		tp_verify(pma);
	tp_snap_free(&s);
	pma_evict_unregister(pma);
	pma_destroy(pma);
}

static void test_evict_register(void **state)
{
	struct pma *pma = tp_new1(0, 8 * MiB);
	struct client c;
	struct pma_evict_ops ops = { evict_range_cb, evict_pages_cb, &c };

	(void)state;
	client_init(&c, pma);
	assert_int_equal(pma_evict_register(pma, NULL), -EINVAL);
	assert_int_equal(pma_evict_register(pma, &ops), 0);
	assert_int_equal(pma_evict_register(pma, &ops), -EBUSY);
	pma_evict_unregister(pma);
	assert_int_equal(pma_evict_register(pma, &ops), 0);
	pma_evict_unregister(pma);
	pma_evict_unregister(pma);	/* nothing registered: harmless */
	pma_destroy(pma);
}

struct unreg_ctx {
	struct pma *pma;
	struct client *c;
	int alloc_ret;
	atomic_bool returned;
	bool cb_done_at_return;
};

static void *alloc_thread(void *arg)
{
	struct unreg_ctx *u = arg;
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS | PMA_PINNED };
	uint64_t p;

	u->alloc_ret = pma_alloc_pages(u->pma, 1, M2, &o, &p);
	return NULL;
}

static void *unregister_thread(void *arg)
{
	struct unreg_ctx *u = arg;

	pma_evict_unregister(u->pma);
	u->cb_done_at_return = atomic_load(&u->c->cb_done);
	atomic_store(&u->returned, true);
	return NULL;
}

static uint64_t unregister_waits(struct pma *pma)
{
	struct pma_stats st;

	pma_get_stats(pma, &st);
	return st.unregister_waits;
}

/* pma_evict_unregister() returns only once the eviction in flight has finished. */
static void test_unregister_waits(void **state)
{
	struct pma *pma = tp_new1(0, 8 * MiB);
	struct client c;
	struct unreg_ctx u = { .pma = pma, .c = &c };
	pthread_t ta, tu;

	(void)state;
	client_init(&c, pma);
	client_fill(&c, 0, 0);
	client_register(&c);
	c.block = true;
	assert_int_equal(pthread_create(&ta, NULL, alloc_thread, &u), 0);
	while (!atomic_load(&c.in_cb))
		usleep(1000);
	assert_int_equal(pthread_create(&tu, NULL, unregister_thread, &u), 0);
	/* Once the unregister has seen the eviction in flight, only its end may let it return. */
	while (unregister_waits(pma) < 1)
		usleep(1000);
	assert_false(atomic_load(&u.returned));
	atomic_store(&c.released, true);
	pthread_join(ta, NULL);
	pthread_join(tu, NULL);
	assert_int_equal(u.alloc_ret, 0);
	assert_true(u.cb_done_at_return);
	assert_int_equal(unregister_waits(pma), 1);
	assert_no_evicting(pma);
	tp_verify(pma);
	pma_destroy(pma);
}

/* With scrub-on-free, evicted frames are scrubbed before they are handed out. */
static void test_evict_then_scrub(void **state)
{
	struct scrubber s;
	struct pma *pma;
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS | PMA_PINNED };
	struct client c;
	uint64_t p;

	(void)state;
	scrubber_init(&s, 0, 128);
	pma = scrub_pma(&s, 8 * MiB, true);
	client_init(&c, pma);
	client_fill(&c, 0, 0);
	client_register(&c);
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), 0);
	assert_int_equal(c.range_calls, 1);
	assert_true(o.result_flags & PMA_RESULT_IS_ZERO);
	for (uint64_t a = p; a < p + M2; a += FR)
		assert_int_equal(s.hits[a / FR], 1);
	pma_scrub_wait(pma);
	assert_no_evicting(pma);
	tp_verify(pma);
	pma_evict_unregister(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
}

/* ---- blacklist ---------------------------------------------------------------------------- */

static bool is_bad(const uint64_t *bad, size_t n, uint64_t a, uint64_t size)
{
	for (size_t i = 0; i < n; i++)
		if (cmn_align_down(bad[i], FR) >= a && cmn_align_down(bad[i], FR) < a + size)
			return true;
	return false;
}

/* Static list: those frames are never handed out, counted, or part of free extents. */
static void test_blacklist_static(void **state)
{
	static const uint64_t bad[] = { 3 * K64, 5 * MiB + 100, 16 * MiB - K64 };
	struct pma *pma = pma_create(NULL);
	struct pma_region_desc d = { 0, 16 * MiB, 0, false };
	struct pma_alloc_opts o = { 0 };
	uint64_t pages[256];
	struct pma_stats st;

	(void)state;
	assert_int_equal(pma_region_add(pma, &d, bad, 3), 0);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(tp_state(pma, bad[i]), PMA_STATE_FREE | PMA_ATTR_BLACKLIST);
	pma_get_stats(pma, &st);
	assert_int_equal(st.blacklisted_bytes, 3 * FR);
	assert_int_equal(st.total_bytes, 16 * MiB);
	assert_int_equal(st.free_bytes, 16 * MiB - 3 * FR);
	assert_int_equal(st.free_2m_pages, 8 - 3);
	tp_verify(pma);
	assert_int_equal(pma_alloc_fixed(pma, 5 * MiB, K64, NULL), -ENOMEM);
	assert_int_equal(pma_alloc_fixed(pma, 4 * MiB, 2 * MiB, NULL), -ENOMEM);
	assert_int_equal(pma_alloc_pages(pma, 254, K64, &o, pages), -ENOMEM);
	assert_int_equal(pma_alloc_pages(pma, 253, K64, &o, pages), 0);
	for (size_t i = 0; i < 253; i++)
		assert_false(is_bad(bad, 3, pages[i], K64));
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, 253, K64, 0), 0);
	o.flags = PMA_ALLOW_PARTIAL;
	assert_int_equal(pma_alloc_pages(pma, 8, M2, &o, pages), 0);
	assert_int_equal(o.pages_allocated, 5);
	for (size_t i = 0; i < 5; i++)
		assert_false(is_bad(bad, 3, pages[i], M2));
	tp_verify(pma);
	pma_destroy(pma);
}

/* Dynamic, on a free frame: retired at once. */
static void test_blacklist_dynamic_free(void **state)
{
	struct pma *pma = tp_new1(0, 8 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	uint64_t pages[4];
	struct pma_stats st;

	(void)state;
	assert_int_equal(pma_blacklist_add(pma, 2 * MiB + 7 * K64 + 5), 0);
	assert_int_equal(tp_state(pma, 2 * MiB + 7 * K64), PMA_STATE_FREE | PMA_ATTR_BLACKLIST);
	pma_get_stats(pma, &st);
	assert_int_equal(st.blacklisted_bytes, FR);
	assert_int_equal(st.free_2m_pages, 3);
	assert_int_equal(st.largest_free_bytes, 6 * MiB - 8 * K64);
	tp_verify(pma);
	assert_int_equal(pma_alloc_pages(pma, 2, M2, &o, pages), 0);
	assert_int_equal(pages[0], 4 * MiB);
	assert_int_equal(pma_alloc_pages(pma, 2, M2, &o, pages), -ENOMEM);
	tp_verify(pma);
	pma_destroy(pma);
}

/* Dynamic, on an allocated frame: it stays with its owner, and is retired once freed. */
static void test_blacklist_dynamic_allocated(void **state)
{
	struct pma *pma = tp_new1(0, 8 * MiB);
	struct pma_alloc_opts o = { .flags = PMA_PINNED };
	uint64_t p;
	struct pma_stats st;

	(void)state;
	assert_int_equal(pma_alloc_fixed(pma, 0, 2 * MiB, &o), 0);
	assert_int_equal(pma_blacklist_add(pma, K64), 0);
	assert_int_equal(tp_state(pma, K64), PMA_STATE_PIN | PMA_ATTR_BLACKLIST);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 6 * MiB);
	assert_int_equal(st.blacklisted_bytes, FR);
	tp_verify(pma);
	assert_int_equal(pma_free_range(pma, 0, 2 * MiB, 0), 0);
	assert_int_equal(tp_state(pma, K64), PMA_STATE_FREE | PMA_ATTR_BLACKLIST);
	assert_int_equal(tp_state(pma, 0), PMA_STATE_FREE);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 8 * MiB - FR);
	assert_int_equal(st.free_2m_pages, 3);
	tp_verify(pma);
	o = (struct pma_alloc_opts){ .flags = PMA_RANGE, .range_begin = 0, .range_end = 2 * MiB };
	assert_int_equal(pma_alloc_pages(pma, 1, M2, &o, &p), -ENOMEM);
	uint64_t two[2];

	assert_int_equal(pma_alloc_pages(pma, 2, K64, &o, two), 0);
	tp_verify(pma);
	pma_destroy(pma);
}

/* Dynamic on an allocated frame with scrub-on-free: after free and scrub it is still
 * retired. */
static void test_blacklist_with_scrub(void **state)
{
	struct scrubber s;
	struct pma *pma;
	struct pma_stats st;

	(void)state;
	scrubber_init(&s, -EIO, 128);
	pma = scrub_pma(&s, 8 * MiB, true);
	assert_int_equal(pma_alloc_fixed(pma, 0, 2 * MiB, NULL), 0);
	assert_int_equal(pma_blacklist_add(pma, 3 * K64), 0);
	assert_int_equal(pma_free_range(pma, 0, 2 * MiB, 0), 0);
	pma_scrub_wait(pma);
	assert_true(tp_state(pma, 3 * K64) & PMA_ATTR_BLACKLIST);
	assert_false(tp_allocatable(tp_state(pma, 3 * K64)));
	tp_verify(pma);
	assert_int_equal(pma_scrub_complete(pma, 0, 2 * MiB), 0);
	assert_int_equal(tp_state(pma, 3 * K64) & ~PMA_ATTR_SCRUBBING,
			 PMA_STATE_FREE | PMA_ATTR_BLACKLIST);
	assert_int_equal(tp_state(pma, 0), PMA_STATE_FREE);
	pma_get_stats(pma, &st);
	assert_int_equal(st.free_bytes, 8 * MiB - FR);
	assert_int_equal(st.scrubbing_bytes, 0);
	tp_verify(pma);
	pma_destroy(pma);
	scrubber_fini(&s);
}

/* Bad input, duplicates and the table limit change nothing. */
static void test_blacklist_errors(void **state)
{
	struct pma *pma = pma_create(NULL);
	struct pma_region_desc d = { 0, 64 * MiB, 0, false };
	uint64_t *bad = calloc(PMA_MAX_BLACKLIST, sizeof(*bad));
	struct tp_snap s;
	int ret;

	(void)state;
	for (size_t i = 0; i < 100; i++)
		bad[i] = i * 2 * FR;
	assert_int_equal(pma_region_add(pma, &d, bad, 100), 0);
	tp_snap_take(pma, &s);
	assert_int_equal(pma_blacklist_add(pma, 64 * MiB), -EINVAL);
	assert_int_equal(pma_blacklist_add(pma, UINT64_MAX), -EINVAL);
	ret = pma_blacklist_add(pma, 2 * FR);		/* already retired */
	assert_true(ret == 0 || ret == -EEXIST);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	for (size_t i = 100; i < PMA_MAX_BLACKLIST; i++)
		assert_int_equal(pma_blacklist_add(pma, i * 2 * FR), 0);
	tp_verify(pma);
	tp_snap_take(pma, &s);
	ret = pma_blacklist_add(pma, 1 * FR);		/* the 513th */
	assert_true(ret < 0);
	tp_snap_assert_same(pma, &s);
	tp_snap_free(&s);
	free(bad);
	pma_destroy(pma);
}

/* Random retired frames are never handed out by any kind of request. */
static void test_blacklist_never_returned(void **state)
{
	struct pma *pma = tp_new1(0, 32 * MiB);
	uint64_t seed = 0xbadull, bad[24], *pages = calloc(512, sizeof(*pages));
	struct pma_alloc_opts o = { .flags = PMA_ALLOW_PARTIAL };
	size_t nbad = 0;

	(void)state;
	while (nbad < 24) {
		uint64_t a = tp_randn(&seed, 512) * FR;

		if (is_bad(bad, nbad, a, FR))
			continue;
		bad[nbad++] = a;
		assert_int_equal(pma_blacklist_add(pma, a), 0);
	}
	tp_verify(pma);
	assert_int_equal(pma_alloc_pages(pma, 512, K64, &o, pages), 0);
	assert_int_equal(o.pages_allocated, 512 - 24);
	for (size_t i = 0; i < o.pages_allocated; i++)
		assert_false(is_bad(bad, nbad, pages[i], K64));
	tp_verify(pma);
	assert_int_equal(pma_free_pages(pma, pages, o.pages_allocated, K64, 0), 0);
	for (uint64_t len = 2; len <= 32; len *= 2) {
		struct pma_alloc_opts c = { .flags = PMA_CONTIGUOUS };
		struct tp_view v;
		bool fits;
		int ret;

		tp_view_read(pma, &v);
		fits = tp_contig_fits(&v, &c, K64, len);
		tp_view_free(&v);
		ret = pma_alloc_pages(pma, len, K64, &c, pages);
		assert_int_equal(ret, fits ? 0 : -ENOMEM);
		if (!ret) {
			assert_false(is_bad(bad, nbad, pages[0], len * FR));
			assert_int_equal(pma_free_pages(pma, pages, len, K64, 0), 0);
		}
		tp_verify(pma);
	}
	free(pages);
	pma_destroy(pma);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(noevict_cases) + VGPU_ARRAY_SIZE(retry_cases) + 32];
	size_t n = 0;

	TP_TEST(tests, n, test_scrub_on_free);
	TP_TEST(tests, n, test_scrub_held);
	TP_TEST(tests, n, test_scrub_default_backing);
	TP_TEST(tests, n, test_skip_scrub);
	TP_TEST(tests, n, test_no_zero);
	TP_TEST(tests, n, test_no_scrub_on_free);
	TP_TEST(tests, n, test_destroy_waits_for_scrub);
	TP_TEST(tests, n, test_evict_range);
	TP_TEST(tests, n, test_evict_range_mixed);
	TP_TEST(tests, n, test_evict_pages);
	TP_TABLE_TESTS(tests, n, noevict_cases, test_noevict_case);
	TP_TABLE_TESTS(tests, n, retry_cases, test_retry_case);
	TP_TEST(tests, n, test_evict_register);
	TP_TEST(tests, n, test_unregister_waits);
	TP_TEST(tests, n, test_evict_then_scrub);
	TP_TEST(tests, n, test_blacklist_static);
	TP_TEST(tests, n, test_blacklist_dynamic_free);
	TP_TEST(tests, n, test_blacklist_dynamic_allocated);
	TP_TEST(tests, n, test_blacklist_with_scrub);
	TP_TEST(tests, n, test_blacklist_errors);
	TP_TEST(tests, n, test_blacklist_never_returned);
	return _cmocka_run_group_tests("pma_scrub_evict", tests, n, NULL, NULL);
}
