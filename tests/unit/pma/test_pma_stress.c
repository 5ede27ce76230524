// SPDX-License-Identifier: MIT
/* pma: multi-threaded stress. Four threads allocate, free, pin and unpin at once (each
 * only its own memory, so every result is predictable), a fifth reads the lock-free
 * statistics and runs pma_check() meanwhile. A shared per-frame owner table catches any
 * frame handed to two threads. At the end everything is freed and the statistics are
 * back to where they started. Runs plain and with scrub-on-free (the default scrubber's
 * worker thread racing with everything else); also built under ThreadSanitizer. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "pma_test.h"

#if defined(__SANITIZE_THREAD__)
#define OPS_PER_THREAD	6000
#elif defined(__SANITIZE_ADDRESS__)
#define OPS_PER_THREAD	20000
#else
#define OPS_PER_THREAD	100000
#endif
#define NR_THREADS	4
#define MAX_HELD	64

static const struct tp_region stress_regions[] = {
	{ 0, 64 * MiB, 10, false },
	{ 1 * GiB, 32 * MiB, 20, false },
};
#define NFRAMES_R0 (64 * MiB / FR)
#define NFRAMES (NFRAMES_R0 + 32 * MiB / FR)

struct held {
	uint64_t pages[16];
	size_t n;
	uint64_t page;
	bool pinned;
};

struct stress {
	struct pma *pma;
	_Atomic uint8_t owner[NFRAMES];	/* 0 free, else thread id + 1 */
	atomic_bool stop;
	atomic_int errors;
	char first_error[256];
	pthread_mutex_t err_lock;
	struct pma_stats start;
	unsigned long reads, checks;
	atomic_bool ev_go;		/* eviction test: the owner holds memory, go */
};

struct worker {
	struct stress *s;
	unsigned int id;
	uint64_t seed;
	struct held held[MAX_HELD];
	size_t nheld;
	unsigned long allocs, frees, pins;
};

static void __attribute__((format(printf, 2, 3))) report(struct stress *s, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->err_lock);
	if (atomic_fetch_add(&s->errors, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(s->first_error, sizeof(s->first_error), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&s->err_lock);
}

static long frame_of(uint64_t addr)
{
	if (addr < 64 * MiB)
		return (long)(addr / FR);
	if (addr >= 1 * GiB && addr < 1 * GiB + 32 * MiB)
		return (long)(NFRAMES_R0 + (addr - 1 * GiB) / FR);
	return -1;
}

/* Mark [addr, addr + size) as ours; a frame someone else holds is a double allocation. */
static void claim(struct worker *w, uint64_t addr, uint64_t size)
{
	for (uint64_t a = addr; a < addr + size; a += FR) {
		long f = frame_of(a);
		uint8_t expect = 0;

		if (f < 0) {
			report(w->s, "thread %u got 0x%llx, outside every region", w->id,
			       (unsigned long long)a);
			return;
		}
		if (!atomic_compare_exchange_strong(&w->s->owner[f], &expect, (uint8_t)(w->id + 1)))
			report(w->s, "frame 0x%llx handed to thread %u while thread %u holds it",
			       (unsigned long long)a, w->id, expect - 1);
	}
}

static void unclaim(struct worker *w, uint64_t addr, uint64_t size)
{
	for (uint64_t a = addr; a < addr + size; a += FR)
		atomic_store(&w->s->owner[frame_of(a)], 0);
}

static void do_alloc(struct worker *w)
{
	static const uint64_t sizes[] = { K64, K64, K128, M2 };
	struct held *h = &w->held[w->nheld];
	struct pma_alloc_opts o = { .flags = PMA_DONT_EVICT };
	int ret;

	h->page = sizes[tp_randn(&w->seed, 4)];
	h->n = 1 + tp_randn(&w->seed, h->page == M2 ? 3 : 16);
	if (tp_randn(&w->seed, 3) == 0)
		o.flags |= PMA_CONTIGUOUS;
	else if (tp_randn(&w->seed, 4) == 0)
		o.flags |= PMA_ALLOW_PARTIAL;
	if (tp_randn(&w->seed, 2))
		o.flags |= PMA_PINNED;
	if (tp_randn(&w->seed, 4) == 0)
		o.flags |= PMA_REVERSE;
	if (tp_randn(&w->seed, 5) == 0) {
		o.flags |= PMA_RANGE;
		o.range_begin = w->id * 16 * MiB;
		o.range_end = o.range_begin + 16 * MiB;
	}
	ret = pma_alloc_pages(w->s->pma, h->n, h->page, &o, h->pages);
	if (ret == -ENOMEM)
		return;
	if (ret) {
		report(w->s, "thread %u: alloc returned %d", w->id, ret);
		return;
	}
	h->n = o.pages_allocated;
	h->pinned = o.flags & PMA_PINNED;
	for (size_t i = 0; i < h->n; i++)
		claim(w, h->pages[i], h->page);
	for (size_t i = 0; i < h->n; i++) {
		uint32_t st = 0;

		if (pma_query(w->s->pma, h->pages[i], &st) ||
		    (st & PMA_STATE_MASK) != (h->pinned ? PMA_STATE_PIN : PMA_STATE_UNPIN))
			report(w->s, "thread %u: fresh page 0x%llx reads 0x%x", w->id,
			       (unsigned long long)h->pages[i], st);
	}
	w->nheld++;
	w->allocs++;
}

static void do_fixed(struct worker *w)
{
	struct held *h = &w->held[w->nheld];
	uint64_t addr = tp_randn(&w->seed, NFRAMES_R0 - 32) * FR;
	int ret = pma_alloc_fixed(w->s->pma, addr, 16 * FR, NULL);

	if (ret == -EEXIST || ret == -ENOMEM)
		return;
	if (ret) {
		report(w->s, "thread %u: fixed alloc returned %d", w->id, ret);
		return;
	}
	claim(w, addr, 16 * FR);
	h->page = K64;
	h->n = 16;
	h->pinned = false;
	for (size_t i = 0; i < 16; i++)
		h->pages[i] = addr + i * FR;
	w->nheld++;
	w->allocs++;
}

static void do_free(struct worker *w, size_t k)
{
	struct held *h = &w->held[k];
	unsigned int flags = tp_randn(&w->seed, 4) == 0 ? PMA_FREE_SKIP_SCRUB : 0;
	int ret;

	for (size_t i = 0; i < h->n; i++)
		unclaim(w, h->pages[i], h->page);
	ret = pma_free_pages(w->s->pma, h->pages, h->n, h->page, flags);
	if (ret)
		report(w->s, "thread %u: free returned %d", w->id, ret);
	w->held[k] = w->held[--w->nheld];
	w->frees++;
}

static void do_pin(struct worker *w, size_t k)
{
	struct held *h = &w->held[k];
	bool pin = tp_randn(&w->seed, 2);
	int want = pin == h->pinned ? -EPERM : 0;
	int ret = pin ? pma_pin_pages(w->s->pma, h->pages, h->n, h->page) :
			pma_unpin_pages(w->s->pma, h->pages, h->n, h->page);

	if (ret != want)
		report(w->s, "thread %u: %s of its %s pages returned %d, want %d", w->id,
		       pin ? "pin" : "unpin", h->pinned ? "pinned" : "unpinned", ret, want);
	if (!ret)
		h->pinned = pin;
	w->pins++;
}

/* A VF comes and goes: a child over a random 4 MiB slice, used a little, destroyed. */
static void do_child(struct worker *w)
{
	uint64_t base = tp_randn(&w->seed, NFRAMES_R0 - 64) * FR, pages[8];
	struct pma_alloc_opts o = { .flags = PMA_CONTIGUOUS };
	struct pma *child;
	struct pma_range r[4];
	size_t nr = 0;
	int err = 0, ret;

	child = pma_child_create(w->s->pma, base, 4 * MiB, NULL, &err);
	if (!child) {
		if (err != -EEXIST && err != -ENOMEM)
			report(w->s, "thread %u: child at 0x%llx: error %d", w->id,
			       (unsigned long long)base, err);
		return;
	}
	claim(w, base, 4 * MiB);
	ret = pma_alloc_pages(child, 8, K128, &o, pages);
	if (ret || pages[0] < base || pages[7] + K128 > base + 4 * MiB)
		report(w->s, "thread %u: child alloc returned %d at 0x%llx", w->id, ret,
		       (unsigned long long)pages[0]);
	ret = pma_export(child, r, 4, &nr);
	if (ret || nr != 1 || r[0].base != pages[0] || r[0].size != 1 * MiB)
		report(w->s, "thread %u: child export %d, %zu ranges", w->id, ret, nr);
	if (pma_check(child))
		report(w->s, "thread %u: pma_check(child) failed", w->id);
	unclaim(w, base, 4 * MiB);
	pma_child_destroy(child);
	w->allocs++;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int op = 0; op < OPS_PER_THREAD && !atomic_load(&w->s->errors); op++) {
		uint64_t dice = tp_randn(&w->seed, 100);

		if (w->nheld < MAX_HELD && (dice < 40 || !w->nheld)) {
			if (dice < 4)
				do_fixed(w);
			else if (dice < 6)
				do_child(w);
			else
				do_alloc(w);
		} else if (dice < 75) {
			do_free(w, tp_randn(&w->seed, w->nheld));
		} else {
			do_pin(w, tp_randn(&w->seed, w->nheld));
		}
	}
	while (w->nheld)
		do_free(w, w->nheld - 1);
	return NULL;
}

/* Reads the statistics without any lock while the workers run; every field must stay
 * within bounds (fields may be a step apart from each other, never out of range). */
static void *reader_main(void *arg)
{
	struct stress *s = arg;

	while (!atomic_load(&s->stop)) {
		struct pma_stats st;

		pma_get_stats(s->pma, &st);
		if (st.total_bytes != s->start.total_bytes || st.free_bytes > st.total_bytes ||
		    st.largest_free_bytes > st.total_bytes || st.free_2m_pages * M2 > st.total_bytes ||
		    st.scrubbing_bytes > st.total_bytes || st.blacklisted_bytes ||
		    pma_free_bytes(s->pma) > st.total_bytes ||
		    pma_largest_free(s->pma) > st.total_bytes)
			report(s, "statistics out of range: total %llu free %llu largest %llu 2m %llu "
			       "scrubbing %llu", (unsigned long long)st.total_bytes,
			       (unsigned long long)st.free_bytes,
			       (unsigned long long)st.largest_free_bytes,
			       (unsigned long long)st.free_2m_pages,
			       (unsigned long long)st.scrubbing_bytes);
		if (++s->reads % 256 == 0) {
			int ret = pma_check(s->pma);
			struct pma_range r[64];
			size_t nr = 0;

			if (ret)
				report(s, "pma_check() returned %d mid-run", ret);
			s->checks++;
			/* the export list is sorted and never overlaps, whatever runs meanwhile */
			ret = pma_export(s->pma, r, 64, &nr);
			for (size_t i = 1; !ret && i < cmn_min(nr, (size_t)64); i++)
				if (r[i - 1].base + r[i - 1].size > r[i].base)
					report(s, "export entries %zu and %zu overlap or are unsorted",
					       i - 1, i);
			if (ret)
				report(s, "pma_export() returned %d mid-run", ret);
		}
	}
	return NULL;
}

static void run_stress(bool scrub)
{
	struct pma_config cfg = { .scrub_on_free = scrub };
	struct stress *s = calloc(1, sizeof(*s));
	struct worker *w = calloc(NR_THREADS, sizeof(*w));
	pthread_t tw[NR_THREADS], tr;
	struct pma_stats end;

	assert_non_null(s);
	assert_non_null(w);
	alarm(300);		/* a deadlock fails the test */
	pthread_mutex_init(&s->err_lock, NULL);
	s->pma = tp_new(&cfg, stress_regions, VGPU_ARRAY_SIZE(stress_regions));
	pma_get_stats(s->pma, &s->start);
	assert_int_equal(pthread_create(&tr, NULL, reader_main, s), 0);
	for (unsigned int i = 0; i < NR_THREADS; i++) {
		w[i] = (struct worker){ .s = s, .id = i, .seed = 0x1234567ull * (i + 1) + scrub };
		assert_int_equal(pthread_create(&tw[i], NULL, worker_main, &w[i]), 0);
	}
	for (unsigned int i = 0; i < NR_THREADS; i++)
		pthread_join(tw[i], NULL);
	atomic_store(&s->stop, true);
	pthread_join(tr, NULL);
	alarm(0);
	if (atomic_load(&s->errors))
		fail_msg("%d errors; first: %s", atomic_load(&s->errors), s->first_error);
	unsigned long allocs = 0;

	for (unsigned int i = 0; i < NR_THREADS; i++)
		allocs += w[i].allocs;
	print_message("%lu allocations, %lu stats reads, %lu mid-run checks\n", allocs, s->reads,
		      s->checks);
	assert_true(allocs > NR_THREADS * OPS_PER_THREAD / 10);
	pma_scrub_wait(s->pma);
	pma_get_stats(s->pma, &end);
	tp_assert_stats_equal(&end, &s->start);
	for (size_t f = 0; f < NFRAMES; f++)
		assert_int_equal(atomic_load(&s->owner[f]), 0);
	tp_verify(s->pma);
	pma_destroy(s->pma);
	pthread_mutex_destroy(&s->err_lock);
	free(s);
	free(w);
}

static void test_stress_plain(void **state)
{
	(void)state;
	run_stress(false);
}

static void test_stress_scrub(void **state)
{
	(void)state;
	run_stress(true);
}

/* A big allocation or free is one state change: a lock-free reader sees free_bytes and
 * free_2m_pages either before or after it, never a frame-by-frame value in between. */
struct step_ctx {
	struct pma *pma;
	atomic_bool stop;
	unsigned long reads, odd;
	uint64_t odd_free;
};

static void *step_reader(void *arg)
{
	struct step_ctx *c = arg;

	while (!atomic_load(&c->stop)) {
		uint64_t f = pma_free_bytes(c->pma);
		struct pma_stats st;

		pma_get_stats(c->pma, &st);
		if ((f != 64 * MiB && f != 32 * MiB) ||
		    (st.free_2m_pages != 32 && st.free_2m_pages != 16)) {
			c->odd++;
			c->odd_free = f;
		}
		c->reads++;
	}
	return NULL;
}

static void test_free_is_one_step(void **state)
{
	struct step_ctx c = { .pma = tp_new1(0, 64 * MiB) };
	uint64_t *pages = calloc(512, sizeof(*pages));
	pthread_t t;

	(void)state;
	for (size_t i = 0; i < 512; i++)
		pages[i] = 16 * MiB + i * K64;
	alarm(300);
	assert_int_equal(pthread_create(&t, NULL, step_reader, &c), 0);
	for (int i = 0; i < OPS_PER_THREAD / 50; i++) {
		assert_int_equal(pma_alloc_fixed(c.pma, 16 * MiB, 32 * MiB, NULL), 0);
		if (i % 2)
			assert_int_equal(pma_free_range(c.pma, 16 * MiB, 32 * MiB, 0), 0);
		else
			assert_int_equal(pma_free_pages(c.pma, pages, 512, K64, 0), 0);
	}
	atomic_store(&c.stop, true);
	pthread_join(t, NULL);
	alarm(0);
	if (c.odd)
		fail_msg("%lu of %lu reads saw an in-between value (e.g. free %llu)", c.odd, c.reads,
			 (unsigned long long)c.odd_free);
	tp_verify(c.pma);
	free(pages);
	pma_destroy(c.pma);
}

/* ---- eviction under load --------------------------------------------------------------
 * One thread plays UVM: it owns unpinned memory (allocated with DONT_EVICT), frees and
 * pins some of it, and answers eviction callbacks. Two threads play RM: pinned
 * allocations without DONT_EVICT, which evict the owner's memory when VRAM runs short. */

#define EV_MAX 256

#define EV_GATE 16	/* owner allocations held before the others start */

struct ev_owner {
	struct stress *s;
	pthread_mutex_t lock;		/* protects the arrays and counters below */
	uint64_t addr[EV_MAX], size[EV_MAX];
	bool pinned[EV_MAX];
	size_t n;
	unsigned long evicted, evict_calls;
};

static void ev_remove(struct ev_owner *c, size_t i)
{
	c->addr[i] = c->addr[c->n - 1];
	c->size[i] = c->size[c->n - 1];
	c->pinned[i] = c->pinned[c->n - 1];
	c->n--;
}

/* Free what the owner holds in [b, e); called with c->lock held. Every unpinned frame
 * there must be the owner's: nobody else allocates unpinned memory. */
static void ev_evict_locked(struct ev_owner *c, uint64_t b, uint64_t e)
{
	struct worker fake = { .s = c->s, .id = NR_THREADS };

	for (uint64_t a = b; a < e; a += FR) {
		uint32_t st = 0;
		bool ours = false;

		if (pma_query(c->s->pma, a, &st) || (st & PMA_STATE_MASK) != PMA_STATE_UNPIN)
			continue;
		for (size_t i = 0; i < c->n && !ours; i++)
			ours = a >= c->addr[i] && a < c->addr[i] + c->size[i];
		if (!ours)
			report(c->s, "eviction of [0x%llx, 0x%llx): frame 0x%llx is UNPIN (0x%x) but "
			       "nobody owns it", (unsigned long long)b, (unsigned long long)e,
			       (unsigned long long)a, st);
	}

	for (size_t i = 0; i < c->n;) {
		if (c->addr[i] + c->size[i] <= b || c->addr[i] >= e) {
			i++;
			continue;
		}
		if (c->pinned[i])
			report(c->s, "asked to evict pinned memory at 0x%llx",
			       (unsigned long long)c->addr[i]);
		unclaim(&fake, c->addr[i], c->size[i]);
		int ret = pma_free_range(c->s->pma, c->addr[i], c->size[i], 0);

		if (ret)
			report(c->s, "eviction: free of 0x%llx returned %d",
			       (unsigned long long)c->addr[i], ret);
		ev_remove(c, i);
		c->evicted++;
	}
}

static int ev_range_cb(void *ctx, uint64_t begin, uint64_t end)
{
	struct ev_owner *c = ctx;

	pthread_mutex_lock(&c->lock);
	c->evict_calls++;
	ev_evict_locked(c, begin, end);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int ev_pages_cb(void *ctx, uint64_t page_size, const uint64_t *pages, size_t count)
{
	struct ev_owner *c = ctx;

	pthread_mutex_lock(&c->lock);
	c->evict_calls++;
	for (size_t i = 0; i < count; i++)
		ev_evict_locked(c, pages[i], pages[i] + page_size);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

struct ev_args {
	struct ev_owner *c;
	struct worker w;
};

static void *ev_owner_main(void *arg)
{
	struct ev_args *a = arg;
	struct ev_owner *c = a->c;
	struct worker *w = &a->w;

	for (int op = 0; op < OPS_PER_THREAD / 2 && !atomic_load(&w->s->errors); op++) {
		uint64_t dice = tp_randn(&w->seed, 100);

		if (dice < 50) {
			uint64_t page = tp_randn(&w->seed, 2) ? K64 : M2, p;
			struct pma_alloc_opts o = { .flags = PMA_DONT_EVICT };

			/* Allocate and record under the owner's lock, so a callback never sees
			 * memory of ours it does not know about. DONT_EVICT: no callback from
			 * this call, so holding the lock cannot deadlock. */
			pthread_mutex_lock(&c->lock);
			int ret = c->n < EV_MAX ? pma_alloc_pages(w->s->pma, 1, page, &o, &p) : -ENOMEM;

			if (ret && ret != -ENOMEM)
				report(w->s, "owner: alloc returned %d", ret);
			if (!ret) {
				claim(w, p, page);
				c->addr[c->n] = p;
				c->size[c->n] = page;
				c->pinned[c->n++] = false;
				if (c->n >= EV_GATE)
					atomic_store(&w->s->ev_go, true);
			}
			pthread_mutex_unlock(&c->lock);
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (c->n) {
			size_t i = tp_randn(&w->seed, c->n);

			if (dice < 80) {
				unclaim(w, c->addr[i], c->size[i]);
				int ret = pma_free_range(w->s->pma, c->addr[i], c->size[i], 0);

				if (ret)
					report(w->s, "owner: free returned %d", ret);
				ev_remove(c, i);
			} else {
				int ret = c->pinned[i] ?
					pma_unpin_pages(w->s->pma, &c->addr[i], 1, c->size[i]) :
					pma_pin_pages(w->s->pma, &c->addr[i], 1, c->size[i]);

				if (ret && ret != -EBUSY)
					report(w->s, "owner: (un)pin returned %d", ret);
				if (!ret)
					c->pinned[i] = !c->pinned[i];
			}
		}
		pthread_mutex_unlock(&c->lock);
	}
	atomic_store(&w->s->ev_go, true);
	return NULL;
}

static void *ev_rm_main(void *arg)
{
	struct worker *w = arg;
	uint64_t held[8][4];
	uint64_t held_page[8];
	size_t held_n[8], nheld = 0;

	/* Start once the owner holds some memory: a fast allocator could otherwise run all
	 * of its operations before the owner is in the way, and nothing would be evicted. */
	while (!atomic_load(&w->s->ev_go) && !atomic_load(&w->s->errors))
		sched_yield();

	for (int op = 0; op < OPS_PER_THREAD / 2 && !atomic_load(&w->s->errors); op++) {
		if (nheld < 8 && tp_randn(&w->seed, 100) < 55) {
			struct pma_alloc_opts o = { .flags = PMA_PINNED };
			uint64_t page = tp_randn(&w->seed, 2) ? K128 : M2;
			size_t n = 1 + tp_randn(&w->seed, 4);

			if (tp_randn(&w->seed, 2))
				o.flags |= PMA_CONTIGUOUS;
			int ret = pma_alloc_pages(w->s->pma, n, page, &o, held[nheld]);

			if (ret && ret != -ENOMEM)
				report(w->s, "rm %u: alloc returned %d", w->id, ret);
			if (ret)
				continue;
			for (size_t i = 0; i < n; i++)
				claim(w, held[nheld][i], page);
			held_page[nheld] = page;
			held_n[nheld++] = n;
		} else if (nheld) {
			nheld--;
			for (size_t i = 0; i < held_n[nheld]; i++)
				unclaim(w, held[nheld][i], held_page[nheld]);
			int ret = pma_free_pages(w->s->pma, held[nheld], held_n[nheld],
						 held_page[nheld], 0);

			if (ret)
				report(w->s, "rm %u: free returned %d", w->id, ret);
		}
	}
	while (nheld--) {
		for (size_t i = 0; i < held_n[nheld]; i++)
			unclaim(w, held[nheld][i], held_page[nheld]);
		pma_free_pages(w->s->pma, held[nheld], held_n[nheld], held_page[nheld], 0);
	}
	return NULL;
}

static void test_stress_evict(void **state)
{
	static const struct tp_region r = { 0, 32 * MiB, 0, false };
	struct stress *s = calloc(1, sizeof(*s));
	struct ev_owner *c = calloc(1, sizeof(*c));
	struct ev_args oa;
	struct worker rm[2];
	pthread_t to, trm[2], tr;
	struct pma_evict_ops ops;

	(void)state;
	assert_non_null(s);
	assert_non_null(c);
	alarm(300);
	pthread_mutex_init(&s->err_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	s->pma = tp_new(NULL, &r, 1);
	pma_get_stats(s->pma, &s->start);
	c->s = s;
	ops = (struct pma_evict_ops){ ev_range_cb, ev_pages_cb, c };
	assert_int_equal(pma_evict_register(s->pma, &ops), 0);
	oa = (struct ev_args){ .c = c, .w = { .s = s, .id = 0, .seed = 0xe71c7ull } };
	assert_int_equal(pthread_create(&tr, NULL, reader_main, s), 0);
	assert_int_equal(pthread_create(&to, NULL, ev_owner_main, &oa), 0);
	for (unsigned int i = 0; i < 2; i++) {
		rm[i] = (struct worker){ .s = s, .id = i + 1, .seed = 0xa11ull * (i + 3) };
		assert_int_equal(pthread_create(&trm[i], NULL, ev_rm_main, &rm[i]), 0);
	}
	for (unsigned int i = 0; i < 2; i++)
		pthread_join(trm[i], NULL);
	pthread_join(to, NULL);
	pma_evict_unregister(s->pma);
	atomic_store(&s->stop, true);
	pthread_join(tr, NULL);
	alarm(0);
	if (atomic_load(&s->errors))
		fail_msg("%d errors; first: %s", atomic_load(&s->errors), s->first_error);
	print_message("%lu eviction calls, %lu owner allocations evicted\n", c->evict_calls,
		      c->evicted);
	assert_true(c->evict_calls > 0);
	/* the owner lets go of the rest */
	for (size_t i = 0; i < c->n; i++) {
		if (c->pinned[i])
			assert_int_equal(pma_unpin_pages(s->pma, &c->addr[i], 1, c->size[i]), 0);
		assert_int_equal(pma_free_range(s->pma, c->addr[i], c->size[i], 0), 0);
	}
	struct pma_stats end;

	pma_get_stats(s->pma, &end);
	tp_assert_stats_equal(&end, &s->start);
	tp_verify(s->pma);
	pma_destroy(s->pma);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&s->err_lock);
	free(c);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stress_plain),
		cmocka_unit_test(test_stress_scrub),
		cmocka_unit_test(test_free_is_one_step),
		cmocka_unit_test(test_stress_evict),
	};

	return cmocka_run_group_tests_name("pma_stress", tests, NULL, NULL);
}
