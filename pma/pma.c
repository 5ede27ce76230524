// SPDX-License-Identifier: MIT
/* pma: lifetime, regions, statistics, queries, export/import and sub-allocation. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "pma/pma_internal.h"

__thread char pma_thread_anchor;

void *pma_zalloc(size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (__builtin_mul_overflow(n, size, &bytes) || bytes > SIZE_MAX - VGPU_CACHELINE)
		return NULL;
	bytes = cmn_align_up(bytes ? bytes : 1, (size_t)VGPU_CACHELINE);
	p = aligned_alloc(VGPU_CACHELINE, bytes);
	if (p)
		memset(p, 0, bytes);
	return p;
}

struct pma *pma_create(const struct pma_config *cfg)
{
	struct pma *pma = pma_zalloc(1, sizeof(*pma));

	if (!pma)
		return NULL;
	atomic_flag_clear(&pma->lock);
	atomic_init(&pma->lock_owner, 0);
	if (cfg)
		pma->cfg = *cfg;
	if (!pma->cfg.evict_retries)
		pma->cfg.evict_retries = 3;
	cmn_mutex_init(&pma->wait_lock);
	pthread_cond_init(&pma->wait_cond, NULL);
	if (pma->cfg.scrub_on_free && pma_scrub_start(pma)) {
		pthread_cond_destroy(&pma->wait_cond);
		cmn_mutex_destroy(&pma->wait_lock);
		free(pma);
		return NULL;
	}
	return pma;
}

void pma_destroy(struct pma *pma)
{
	if (!pma)
		return;
	pma_scrub_stop(pma);
	for (unsigned int i = 0; i < pma->nr_regions; i++)
		pma_region_free(pma->regions[i]);
	pthread_cond_destroy(&pma->wait_cond);
	cmn_mutex_destroy(&pma->wait_lock);
	free(pma->scrub_q);
	free(pma);
}

/* Largest free extent over every region in frames, flushing their frame layers; lock held. */
static uint64_t largest_locked(struct pma *pma)
{
	uint64_t largest = 0;

	pma_assert_locked(pma);
	for (unsigned int i = 0; i < pma->nr_regions; i++) {
		struct pma_region *r = pma->regions[i];

		largest = cmn_max(largest, pma_tree_largest(&r->ftree, r));
	}
	return largest;
}

/* Publish the exact largest extent; the release pairs with a reader's acquire of the flag. */
void pma_largest_publish_locked(struct pma *pma)
{
	uint64_t largest;

	pma_assert_locked(pma);
	largest = largest_locked(pma);
	atomic_store_explicit(&pma->st_largest, largest << PMA_FRAME_SHIFT, memory_order_relaxed);
	atomic_store_explicit(&pma->st_largest_stale, false, memory_order_release);
}

void pma_publish_stats_all_locked(struct pma *pma)
{
	uint64_t total = 0, free_frames = 0, groups = 0, scrub = 0, black = 0;
	bool stale = false;

	pma_assert_locked(pma);
	for (unsigned int i = 0; i < pma->nr_regions; i++) {
		struct pma_region *r = pma->regions[i];

		/* Both tree layers wait for a reader (the group run index is always exact). */
		total += r->hi - r->lo;
		free_frames += r->free_frames;
		groups += r->free_groups;
		scrub += r->scrub_frames;
		black += r->black_frames;
		stale |= pma_tlayer_dirty(&r->ftree.layer[0]);
	}
	atomic_store_explicit(&pma->st_total, total << PMA_FRAME_SHIFT, memory_order_relaxed);
	atomic_store_explicit(&pma->st_free, free_frames << PMA_FRAME_SHIFT, memory_order_relaxed);
	atomic_store_explicit(&pma->st_free_2m, groups, memory_order_relaxed);
	atomic_store_explicit(&pma->st_scrub, scrub << PMA_FRAME_SHIFT, memory_order_relaxed);
	atomic_store_explicit(&pma->st_black, black << PMA_FRAME_SHIFT, memory_order_relaxed);
	/* The largest extent needs the frame layer climbed, which most operations never need
	 * otherwise: leave that to the next reader. A clean layer's root is already exact. */
	if (stale)
		atomic_store_explicit(&pma->st_largest_stale, true, memory_order_relaxed);
	else
		pma_largest_publish_locked(pma);
}

/* The largest free extent in bytes, exact at the time of the call: lock-free while no
 * operation changed the frame layers since the last read, else one locked flush. The lock
 * and the cached figure are not part of the instance's logical state, so a const caller may
 * bring them up to date. */
static uint64_t largest_read(const struct pma *cpma)
{
	struct pma *pma = (struct pma *)cpma;

	if (atomic_load_explicit(&pma->st_largest_stale, memory_order_acquire)) {
		pma_lock(pma);
		if (atomic_load_explicit(&pma->st_largest_stale, memory_order_relaxed))
			pma_largest_publish_locked(pma);
		pma_unlock(pma);
	}
	return atomic_load_explicit(&pma->st_largest, memory_order_relaxed);
}

struct pma_region *pma_region_of(struct pma *pma, uint64_t frame)
{
	for (unsigned int i = 0; i < pma->nr_regions; i++) {
		struct pma_region *r = pma->regions[i];

		if (frame >= r->first + r->lo && frame < r->first + r->hi)
			return r;
	}
	return NULL;
}

/* Take the lock and find the region of @frame; on NULL the lock is not held. */
static struct pma_region *region_lock(struct pma *pma, uint64_t frame)
{
	struct pma_region *r;

	pma_lock(pma);
	r = pma_region_of(pma, frame);
	if (!r)
		pma_unlock(pma);
	return r;
}

/* Mark frame index @idx of @r, one of @pma's regions, blacklisted. */
static void region_blacklist_locked(struct pma *pma, struct pma_region *r, uint64_t idx)
{
	uint64_t wi = idx / 64, old = pma_region_count_avail(r, wi, wi);
	struct pma_word *w = &r->words[wi];
	uint64_t m = VGPU_BIT(idx % 64);

	pma_assert_locked(pma);
	if (PMA_ATTRS(r, w)->black & m)
		return;
	PMA_ATTRS(r, w)->black |= m;
	r->black_frames++;
	pma_region_refresh(r, wi, wi, old);
}

static int blacklist_note_locked(struct pma *pma, uint64_t frame)
{
	pma_assert_locked(pma);
	for (unsigned int i = 0; i < pma->nr_black; i++)
		if (pma->black_addrs[i] >> PMA_FRAME_SHIFT == frame)
			return 0;
	if (pma->nr_black == PMA_MAX_BLACKLIST)
		return -ENOSPC;
	pma->black_addrs[pma->nr_black++] = frame << PMA_FRAME_SHIFT;
	return 1;
}

static bool region_desc_valid(const struct pma *pma, const struct pma_region_desc *d)
{
	if (!d->size || (d->base | d->size) & (PMA_FRAME_SIZE - 1) || d->base + d->size < d->base)
		return false;
	/* Frame counts live in 32-bit tree fields: keep a region below 2^32 frames. */
	if (d->size >> PMA_FRAME_SHIFT >= 1ull << 31)
		return false;
	for (unsigned int i = 0; i < pma->nr_regions; i++) {
		const struct pma_region_desc *o = &pma->regions[i]->desc;

		if (d->base < o->base + o->size && o->base < d->base + d->size)
			return false;
	}
	return true;
}

int pma_region_add(struct pma *pma, const struct pma_region_desc *desc,
		   const uint64_t *bad_addrs, size_t nr_bad)
{
	struct pma_region *r;
	int id, ret = 0;

	if (!pma || !desc || (nr_bad && !bad_addrs))
		return -EINVAL;
	pma_lock(pma);
	if (pma->nr_regions == PMA_MAX_REGIONS || !region_desc_valid(pma, desc) ||
	    nr_bad > PMA_MAX_BLACKLIST - pma->nr_black) {
		pma_unlock(pma);
		return -EINVAL;
	}
	for (size_t i = 0; i < nr_bad; i++) {
		if (bad_addrs[i] < desc->base || bad_addrs[i] >= desc->base + desc->size) {
			pma_unlock(pma);
			return -EINVAL;
		}
	}
	id = (int)pma->nr_regions;
	r = pma_region_new(desc, (unsigned int)id, pma->cfg.scrub_on_free);
	if (!r) {
		pma_unlock(pma);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nr_bad && ret >= 0; i++) {
		uint64_t f = bad_addrs[i] >> PMA_FRAME_SHIFT;

		ret = blacklist_note_locked(pma, f);
		if (ret > 0)
			region_blacklist_locked(pma, r, f - r->first);
	}
	pma->regions[pma->nr_regions++] = r;
	pma_publish_stats_locked(pma);
	pma_unlock(pma);
	return id;
}

int pma_blacklist_add(struct pma *pma, uint64_t addr)
{
	uint64_t frame = addr >> PMA_FRAME_SHIFT;
	struct pma_region *r;
	int ret;

	if (!pma)
		return -EINVAL;
	r = region_lock(pma, frame);
	if (!r)
		return -EINVAL;
	ret = blacklist_note_locked(pma, frame);
	if (ret > 0) {
		region_blacklist_locked(pma, r, frame - r->first);
		pma_publish_stats_locked(pma);
	}
	pma_unlock(pma);
	return ret < 0 ? ret : 0;
}

void pma_get_stats(const struct pma *pma, struct pma_stats *out)
{
	out->total_bytes = atomic_load_explicit(&pma->st_total, memory_order_relaxed);
	out->free_bytes = atomic_load_explicit(&pma->st_free, memory_order_relaxed);
	out->free_2m_pages = atomic_load_explicit(&pma->st_free_2m, memory_order_relaxed);
	out->largest_free_bytes = largest_read(pma);
	out->scrubbing_bytes = atomic_load_explicit(&pma->st_scrub, memory_order_relaxed);
	out->blacklisted_bytes = atomic_load_explicit(&pma->st_black, memory_order_relaxed);
	out->unregister_waits = atomic_load_explicit(&pma->st_unreg_waits, memory_order_relaxed);
}

uint64_t pma_free_bytes(const struct pma *pma)
{
	return atomic_load_explicit(&pma->st_free, memory_order_relaxed);
}

uint64_t pma_largest_free(const struct pma *pma)
{
	return largest_read(pma);
}

int pma_query(struct pma *pma, uint64_t addr, uint32_t *state_out)
{
	uint64_t frame = addr >> PMA_FRAME_SHIFT;
	struct pma_region *r;
	const struct pma_word *w;
	uint64_t idx, m;
	uint32_t st;

	if (!pma || !state_out)
		return -EINVAL;
	r = region_lock(pma, frame);
	if (!r)
		return -EINVAL;
	idx = frame - r->first;
	w = &r->words[idx / 64];
	m = VGPU_BIT(idx % 64);
	st = (w->alloc & m) ? ((PMA_ATTRS(r, w)->unpin & m) ? PMA_STATE_UNPIN : PMA_STATE_PIN)
			    : PMA_STATE_FREE;
	if ((w->alloc & m) && (PMA_ATTRS(r, w)->pzero & m))
		st |= PMA_ATTR_PERSISTENT;
	if (PMA_ATTRS(r, w)->evict & m)
		st |= PMA_ATTR_EVICTING;
	if (PMA_ATTRS(r, w)->scrub & m)
		st |= PMA_ATTR_SCRUBBING;
	if (PMA_ATTRS(r, w)->black & m)
		st |= PMA_ATTR_BLACKLIST;
	pma_unlock(pma);
	*state_out = st;
	return 0;
}

unsigned int pma_region_count(const struct pma *pma)
{
	return pma->nr_regions;
}

int pma_region_get(const struct pma *pma, unsigned int id, struct pma_region_desc *out)
{
	if (!pma || !out || id >= pma->nr_regions)
		return -EINVAL;
	*out = pma->regions[id]->desc;
	return 0;
}

/* State of one real frame of word @w of @r as exported: 0 when free. */
static uint32_t frame_export_state(const struct pma_region *r, const struct pma_word *w,
				   uint64_t m)
{
	const struct pma_attrs *x = PMA_ATTRS(r, w);

	if (!(w->alloc & m))
		return 0;
	return ((x->unpin & m) ? PMA_STATE_UNPIN : PMA_STATE_PIN) |
	       ((x->pzero & m) ? PMA_ATTR_PERSISTENT : 0);
}

int pma_export(struct pma *pma, struct pma_range *out, size_t max, size_t *nr)
{
	size_t n = 0;

	if (!pma || !nr || (max && !out))
		return -EINVAL;
	pma_lock(pma);
	for (unsigned int i = 0; i < pma->nr_regions; i++) {
		const struct pma_region *r = pma->regions[i];
		uint32_t cur = 0;
		uint64_t start = 0;

		for (uint64_t f = r->lo; f <= r->hi; f++) {
			uint32_t st = 0;

			if (f < r->hi) {
				const struct pma_word *w = &r->words[f / 64];

				/* Whole free words are skipped in one step. */
				if (!cur && f % 64 == 0 && f + 64 <= r->hi && !w->alloc) {
					f += 63;
					continue;
				}
				st = frame_export_state(r, w, VGPU_BIT(f % 64));
			}
			if (st == cur)
				continue;
			if (cur) {
				if (n < max)
					out[n] = (struct pma_range){
						.base = (r->first + start) << PMA_FRAME_SHIFT,
						.size = (f - start) << PMA_FRAME_SHIFT,
						.state = cur,
					};
				n++;
			}
			cur = st;
			start = f;
		}
	}
	pma_unlock(pma);
	*nr = n;
	return 0;
}

/* The published memory figures as they stand (lock held, so no reader flush is involved);
 * the other fields of @out are left as they are. */
static void stats_snapshot_locked(const struct pma *pma, struct pma_stats *out, bool *stale)
{
	pma_assert_locked(pma);
	out->total_bytes = atomic_load_explicit(&pma->st_total, memory_order_relaxed);
	out->free_bytes = atomic_load_explicit(&pma->st_free, memory_order_relaxed);
	out->free_2m_pages = atomic_load_explicit(&pma->st_free_2m, memory_order_relaxed);
	out->largest_free_bytes = atomic_load_explicit(&pma->st_largest, memory_order_relaxed);
	out->scrubbing_bytes = atomic_load_explicit(&pma->st_scrub, memory_order_relaxed);
	out->blacklisted_bytes = atomic_load_explicit(&pma->st_black, memory_order_relaxed);
	*stale = atomic_load_explicit(&pma->st_largest_stale, memory_order_relaxed);
}

int pma_check(struct pma *pma)
{
	struct pma_stats before = { 0 }, after = { 0 };
	bool stale, stale_after, dirty = false;
	int ret = 0;

	if (!pma)
		return -EINVAL;
	pma_lock(pma);
	stats_snapshot_locked(pma, &before, &stale);
	for (unsigned int i = 0; i < pma->nr_regions; i++)
		dirty |= pma_tlayer_dirty(&pma->regions[i]->ftree.layer[0]);
	/* Marks left in a frame layer must have made the published figure stale. */
	if (dirty && !stale) {
		cmn_err("pma_check: extent tree marked but the largest-free figure is not stale");
		ret = -EIO;
	}
	/* Each region check verifies that every unmarked leaf is exact, then flushes. */
	for (unsigned int i = 0; i < pma->nr_regions && !ret; i++)
		ret = pma_region_check(pma->regions[i]);
	if (!ret) {
		pma_publish_stats_locked(pma);
		stats_snapshot_locked(pma, &after, &stale_after);
		if (stale)
			before.largest_free_bytes = after.largest_free_bytes;
		if (stale_after || memcmp(&before, &after, sizeof(before))) {
			cmn_err("pma_check: published statistics are stale");
			ret = -EIO;
		}
	}
	pma_unlock(pma);
	return ret;
}

struct pma *pma_child_create(struct pma *parent, uint64_t base, uint64_t size,
			     const struct pma_config *cfg, int *err)
{
	struct pma_alloc_opts opts = { .flags = PMA_PINNED };
	struct pma_region_desc desc = { .base = base, .size = size };
	struct pma_region *pr;
	struct pma *child;
	int ret;

	if (!parent || !size) {
		ret = -EINVAL;
		goto out;
	}
	pma_lock(parent);
	pr = pma_region_of(parent, base >> PMA_FRAME_SHIFT);
	if (pr) {
		desc.performance = pr->desc.performance;
		desc.protected_mem = pr->desc.protected_mem;
	}
	pma_unlock(parent);
	ret = pma_alloc_fixed(parent, base, size, &opts);
	if (ret)
		goto out;
	child = pma_create(cfg);
	if (!child) {
		ret = -ENOMEM;
		goto free_range;
	}
	ret = pma_region_add(child, &desc, NULL, 0);
	if (ret < 0)
		goto destroy;
	child->parent = parent;
	child->child_base = base;
	child->child_size = size;
	if (err)
		*err = 0;
	return child;
destroy:
	pma_destroy(child);
free_range:
	pma_free_range(parent, base, size, PMA_FREE_SKIP_SCRUB);
out:
	if (err)
		*err = ret;
	return NULL;
}

void pma_child_destroy(struct pma *child)
{
	struct pma *parent;
	uint64_t base, size;

	if (!child)
		return;
	parent = child->parent;
	base = child->child_base;
	size = child->child_size;
	pma_destroy(child);
	if (parent)
		pma_free_range(parent, base, size, 0);
}
