// SPDX-License-Identifier: MIT
/* hmm/devmem.c - device memory as a page pool: a bitmap of 4 KiB pages over a CPU
 * mapping, 2 MiB chunks naturally aligned, frees from fault handlers deferred through a
 * second bitmap that only ever sees atomic OR (async-signal-safe). No page reaches a new
 * owner with what an earlier one (or whoever used the memory before the pool) left:
 * pages are zeroed when allocated, except by a migration, which writes every page it
 * allocates whole (data, or zeros for an empty page) before anyone can map it. Zeroing
 * on allocation rather than on free keeps the fault path (which frees) short and covers
 * memory the pool was given dirty. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

struct hmm_devmem {
	struct hmm_devmem_desc desc;
	unsigned int id;		/* index in hmm_devmems[] */
	bool own_base;
	uint64_t npages, nwords;
	struct cmn_mutex lock;		/* protects used[], nr_used, cursor, fail_next */
	uint64_t *used;
	uint64_t nr_used, cursor;
	unsigned int fail_next;
	_Atomic uint64_t *deferred;	/* pages freed by fault handlers */
	atomic_uint nr_deferred;
	_Atomic uint64_t scrubbed, overwritten;	/* hmm_devmem_stats */
};

struct hmm_devmem *_Atomic hmm_devmems[HMM_MAX_DEVMEMS];
static struct cmn_mutex devmems_lock = CMN_MUTEX_INITIALIZER("hmm devmems_lock");

static int dm_slot_get(struct hmm_devmem *dm)
{
	int ret = -ENOSPC;

	cmn_mutex_lock(&devmems_lock);
	for (unsigned int i = 1; i < HMM_MAX_DEVMEMS; i++) {	/* id 0 = none */
		if (!atomic_load(&hmm_devmems[i])) {
			dm->id = i;
			atomic_store(&hmm_devmems[i], dm);
			ret = 0;
			break;
		}
	}
	cmn_mutex_unlock(&devmems_lock);
	return ret;
}

int hmm_devmem_create(const struct hmm_devmem_desc *desc, struct hmm_devmem **out)
{
	struct hmm_devmem *dm;
	int ret = -ENOMEM;

	if (!desc || !out || !desc->size || !cmn_is_aligned(desc->size, HMM_BLOCK_SIZE) ||
	    (desc->base && !cmn_is_aligned((uintptr_t)desc->base, HMM_PAGE_SIZE)))
		return -EINVAL;
	dm = calloc(1, sizeof(*dm));
	if (!dm)
		return -ENOMEM;
	dm->desc = *desc;
	dm->npages = desc->size / HMM_PAGE_SIZE;
	dm->nwords = dm->npages / 64;
	cmn_mutex_init(&dm->lock);
	dm->used = calloc(dm->nwords, sizeof(uint64_t));
	dm->deferred = calloc(dm->nwords, sizeof(uint64_t));
	if (!dm->used || !dm->deferred)
		goto free_maps;
	if (!dm->desc.base) {
		/* Private anonymous, 2 MiB aligned so chunks are THP backed like VRAM pages. */
		size_t len = desc->size + HMM_BLOCK_SIZE;
		char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);

		if (p == MAP_FAILED)
			goto free_maps;
		char *a = (char *)cmn_align_up((uintptr_t)p, HMM_BLOCK_SIZE);

		if (a > p)
			munmap(p, a - p);
		if (a + desc->size < p + len)
			munmap(a + desc->size, (p + len) - (a + desc->size));
		madvise(a, desc->size, MADV_HUGEPAGE);
		dm->desc.base = a;
		dm->own_base = true;
	}
	ret = dm_slot_get(dm);
	if (ret)
		goto unmap;
	*out = dm;
	return 0;
unmap:
	if (dm->own_base)
		munmap(dm->desc.base, desc->size);
free_maps:
	free(dm->used);
	free((void *)dm->deferred);
	free(dm);
	return ret;
}

/* Fold deferred frees into the allocation bitmap. */
static void dm_reclaim_locked(struct hmm_devmem *dm)
{
	cmn_mutex_assert_held(&dm->lock);
	if (!atomic_load_explicit(&dm->nr_deferred, memory_order_acquire))
		return;
	for (uint64_t w = 0; w < dm->nwords; w++) {
		uint64_t bits = atomic_exchange_explicit(&dm->deferred[w], 0, memory_order_acq_rel);

		if (!bits)
			continue;
		VGPU_ASSERT((dm->used[w] & bits) == bits);
		dm->used[w] &= ~bits;
		dm->nr_used -= cmn_popcount(bits);
		atomic_fetch_sub(&dm->nr_deferred, cmn_popcount(bits));
	}
}

int hmm_devmem_destroy(struct hmm_devmem *dm)
{
	if (!dm)
		return 0;
	cmn_mutex_lock(&dm->lock);
	dm_reclaim_locked(dm);
	uint64_t used = dm->nr_used;
	cmn_mutex_unlock(&dm->lock);
	if (used)
		return -EBUSY;
	cmn_mutex_lock(&devmems_lock);
	atomic_store(&hmm_devmems[dm->id], NULL);
	cmn_mutex_unlock(&devmems_lock);
	/* a fault handler that looked the pool up has finished before the region it
	 * served went away; no page is in use, so none can look it up any more */
	if (dm->own_base)
		munmap(dm->desc.base, dm->desc.size);
	free(dm->used);
	free((void *)dm->deferred);
	cmn_mutex_destroy(&dm->lock);
	free(dm);
	return 0;
}

void *hmm_devmem_page_ptr(struct hmm_devmem *dm, uint64_t page)
{
	VGPU_ASSERT(page < dm->npages);
	return (char *)dm->desc.base + (page << HMM_PAGE_SHIFT);
}

const void *hmm_devmem_owner(const struct hmm_devmem *dm)
{
	return dm->desc.owner;
}

unsigned int hmm_devmem_id(const struct hmm_devmem *dm)
{
	return dm->id;
}

uint64_t hmm_devmem_used_pages(struct hmm_devmem *dm)
{
	cmn_mutex_lock(&dm->lock);
	dm_reclaim_locked(dm);
	uint64_t n = dm->nr_used;
	cmn_mutex_unlock(&dm->lock);
	return n;
}

void hmm_devmem_fail_next_allocs(struct hmm_devmem *dm, unsigned int n)
{
	cmn_mutex_lock(&dm->lock);
	dm->fail_next = n;
	cmn_mutex_unlock(&dm->lock);
}

/* One free, naturally aligned 2 MiB chunk (8 zero words), or -ENOMEM. */
static int dm_alloc_chunk_locked(struct hmm_devmem *dm, uint64_t *pages)
{
	const uint64_t words = HMM_BLOCK_WORDS;

	cmn_mutex_assert_held(&dm->lock);
	for (uint64_t w = 0; w + words <= dm->nwords; w += words) {
		uint64_t any = 0;

		for (uint64_t k = 0; k < words; k++)
			any |= dm->used[w + k];
		if (any)
			continue;
		for (uint64_t k = 0; k < words; k++)
			dm->used[w + k] = ~0ull;
		for (uint64_t i = 0; i < HMM_BLOCK_PAGES; i++)
			pages[i] = w * 64 + i;
		dm->nr_used += HMM_BLOCK_PAGES;
		return 0;
	}
	return -ENOMEM;
}

/* @n single pages, next fit from the cursor; all or nothing. */
static int dm_alloc_pages_locked(struct hmm_devmem *dm, size_t n, uint64_t *pages)
{
	size_t got = 0;

	cmn_mutex_assert_held(&dm->lock);
	if (dm->npages - dm->nr_used < n)
		return -ENOMEM;
	for (uint64_t scanned = 0; got < n && scanned < dm->nwords; scanned++) {
		uint64_t w = dm->cursor;
		uint64_t free_bits = ~dm->used[w];

		while (free_bits && got < n) {
			unsigned int b = cmn_ctz(free_bits);

			free_bits &= free_bits - 1;
			dm->used[w] |= VGPU_BIT(b);
			pages[got++] = w * 64 + b;
		}
		if (got < n)
			dm->cursor = (w + 1) % dm->nwords;
	}
	VGPU_ASSERT(got == n);
	dm->nr_used += n;
	return 0;
}

static const char zero_page[HMM_PAGE_SIZE];

/* Zero @n allocated pages: memset through the mapping, runs of contiguous pages at
 * once, or page by page through the pool's copy callback when it has one. */
static void dm_scrub(struct hmm_devmem *dm, const uint64_t *pages, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = 1;

		if (dm->desc.copy) {
			dm->desc.copy(dm->desc.ctx, HMM_COPY_TO_DEVICE, (void *)zero_page, pages[i], 1);
			i++;
			continue;
		}
		while (i + k < n && pages[i + k] == pages[i] + k)
			k++;
		memset(hmm_devmem_page_ptr(dm, pages[i]), 0, k << HMM_PAGE_SHIFT);
		i += k;
	}
	atomic_fetch_add_explicit(&dm->scrubbed, n, memory_order_relaxed);
}

int hmm_devmem_alloc(struct hmm_devmem *dm, size_t n, bool chunk, uint64_t *pages)
{
	int ret = hmm_devmem_alloc_overwrite(dm, n, chunk, pages);

	if (!ret && n) {
		atomic_fetch_sub_explicit(&dm->overwritten, n, memory_order_relaxed);
		dm_scrub(dm, pages, n);
	}
	return ret;
}

void hmm_devmem_get_stats(struct hmm_devmem *dm, struct hmm_devmem_stats *st)
{
	st->scrubbed_pages = atomic_load_explicit(&dm->scrubbed, memory_order_relaxed);
	st->overwritten_pages = atomic_load_explicit(&dm->overwritten, memory_order_relaxed);
}

int hmm_devmem_alloc_overwrite(struct hmm_devmem *dm, size_t n, bool chunk, uint64_t *pages)
{
	int ret;

	if (!n)
		return 0;
	cmn_mutex_lock(&dm->lock);
	dm_reclaim_locked(dm);
	if (dm->fail_next) {
		dm->fail_next--;
		ret = -ENOMEM;
	} else if (chunk && n == HMM_BLOCK_PAGES) {
		ret = dm_alloc_chunk_locked(dm, pages);
	} else {
		ret = dm_alloc_pages_locked(dm, n, pages);
	}
	cmn_mutex_unlock(&dm->lock);
	if (!ret)
		atomic_fetch_add_explicit(&dm->overwritten, n, memory_order_relaxed);
	return ret;
}

void hmm_devmem_free(struct hmm_devmem *dm, const uint64_t *pages, size_t n)
{
	cmn_mutex_lock(&dm->lock);
	for (size_t i = 0; i < n; i++) {
		VGPU_ASSERT(pages[i] < dm->npages && cmn_test_bit(dm->used, pages[i]));
		cmn_clear_bit(dm->used, pages[i]);
	}
	dm->nr_used -= n;
	cmn_mutex_unlock(&dm->lock);
}

void hmm_devmem_free_deferred(struct hmm_devmem *dm, uint64_t page)
{
	atomic_fetch_or_explicit(&dm->deferred[page / 64], VGPU_BIT(page % 64),
				 memory_order_release);
	atomic_fetch_add_explicit(&dm->nr_deferred, 1, memory_order_release);
}

/* Copy whole pages with streaming (non-temporal) stores, both ways. Into the device: the
 * CPU does not read what it sends there, so the destination is not worth a read for
 * ownership nor a place in the cache (VRAM behind a BAR is write-combining anyway). Back
 * to the system: a batched migration moves 2 MiB at a time that nobody reads before the
 * pages are moved into place, and a destination line not read for ownership halves the
 * memory traffic of the copy (doc/bench/hmm_bench.md). On a CPU whose memcpy does not
 * stream below a threshold scaled to the last-level cache, this is what keeps a
 * migration's copy at memory speed. SSE2: every x86-64 has it. */
static void copy_stream(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	__m128i *d = dst;
	const __m128i *s = src;

	if (((uintptr_t)dst | (uintptr_t)src) % 16 == 0) {
		for (size_t i = 0; i < len / 16; i += 4) {
			__m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1);
			__m128i c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);

			_mm_stream_si128(d + i, a);
			_mm_stream_si128(d + i + 1, b);
			_mm_stream_si128(d + i + 2, c);
			_mm_stream_si128(d + i + 3, e);
		}
		_mm_sfence();	/* ordered before whatever publishes the pages */
		return;
	}
#endif
	memcpy(dst, src, len);
}

int hmm_devmem_copy(struct hmm_devmem *dm, enum hmm_copy_dir dir, void *sys, uint64_t page,
		    size_t npages)
{
	if (dm->desc.copy)
		return dm->desc.copy(dm->desc.ctx, dir, sys, page, npages);
	void *dev = hmm_devmem_page_ptr(dm, page);
	size_t len = npages << HMM_PAGE_SHIFT;

	if (dir == HMM_COPY_TO_DEVICE)
		copy_stream(dev, sys, len);
	else
		copy_stream(sys, dev, len);
	return 0;
}
