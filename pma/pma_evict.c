// SPDX-License-Identifier: MIT
/* pma eviction: the owner registers callbacks; an allocation short of memory picks spans of
 * free and unpinned frames, marks them EVICTING (so nobody else takes or pins them while the
 * lock is dropped), asks the owner to evict them, and clears the mark. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "pma/pma_internal.h"

int pma_evict_register(struct pma *pma, const struct pma_evict_ops *ops)
{
	int ret = 0;

	if (!pma || !ops || !ops->evict_range || !ops->evict_pages)
		return -EINVAL;
	cmn_mutex_lock(&pma->wait_lock);
	if (pma->evict_registered)
		ret = -EBUSY;
	else {
		pma->evict = *ops;
		pma->evict_registered = true;
		atomic_store_explicit(&pma->evict_armed, true, memory_order_relaxed);
	}
	cmn_mutex_unlock(&pma->wait_lock);
	return ret;
}

void pma_evict_unregister(struct pma *pma)
{
	cmn_mutex_lock(&pma->wait_lock);
	pma->evict_registered = false;
	atomic_store_explicit(&pma->evict_armed, false, memory_order_relaxed);
	if (pma->evictions_in_flight)
		atomic_fetch_add_explicit(&pma->st_unreg_waits, 1, memory_order_relaxed);
	while (pma->evictions_in_flight)
		cmn_cond_wait(&pma->wait_cond, &pma->wait_lock);
	memset(&pma->evict, 0, sizeof(pma->evict));
	cmn_mutex_unlock(&pma->wait_lock);
}

/* Frames that are free, or allocated unpinned and otherwise idle: what eviction can yield. */
static inline uint64_t word_evictable(const struct pma_region *r, const struct pma_word *w)
{
	return pma_word_avail(r, w) | (w->alloc & PMA_ATTRS(r, w)->unpin & ~pma_word_attrs(r, w));
}

static bool span_evictable(const struct pma_region *r, uint64_t s, uint64_t n)
{
	pma_for_each_word(s, n, wi, m)
		if ((word_evictable(r, &r->words[wi]) & m) != m)
			return false;
	return true;
}

/* Pick aligned spans of @n frames made of free and evictable frames (at least one allocated)
 * in [lo, hi); a plain scan: eviction is the slow path. */
static size_t evict_pick(const struct pma_region *r, uint64_t n, uint64_t align, uint64_t lo,
			 uint64_t hi, size_t want, uint64_t *out)
{
	uint64_t phase = r->first % align;
	size_t got = 0;

	for (uint64_t s = cmn_align_up(lo + phase, align) - phase; s + n <= hi && got < want;
	     s += align) {
		if (span_evictable(r, s, n)) {
			bool any_alloc = false;

			pma_for_each_word(s, n, wi, m)
				any_alloc |= !!(r->words[wi].alloc & m);
			if (any_alloc)
				out[got++] = s;
		}
	}
	return got;
}

int pma_evict_for(struct pma *pma, const struct pma_req *q, const struct pma_alloc_opts *o)
{
	struct pma_region *rs[PMA_MAX_REGIONS];
	struct pma_evict_ops ops;
	struct pma_opargs args = { 0 };
	bool contig = q->flags & PMA_CONTIGUOUS;
	uint64_t n = contig ? q->count * q->pf : q->pf, lo, hi;
	size_t want = contig ? 1 : q->count, got = 0;
	uint64_t *spans;
	struct pma_region **owner;
	int ret;

	spans = calloc(want, sizeof(*spans));
	owner = calloc(want, sizeof(*owner));
	if (!spans || !owner) {
		ret = -ENOMEM;
		goto out;
	}
	cmn_mutex_lock(&pma->wait_lock);
	if (!pma->evict_registered) {
		cmn_mutex_unlock(&pma->wait_lock);
		ret = -ENOMEM;
		goto out;
	}
	ops = pma->evict;
	pma->evictions_in_flight++;
	cmn_mutex_unlock(&pma->wait_lock);

	pma_lock(pma);
	unsigned int nr = pma_regions_order(pma, q, o, rs);
	for (unsigned int i = 0; i < nr && got < want; i++) {
		size_t k;

		pma_req_clip(q, rs[i], &lo, &hi);
		k = evict_pick(rs[i], n, contig ? q->align : q->pf, lo, hi, want - got, spans + got);
		for (size_t j = got; j < got + k; j++)
			owner[j] = rs[i];
		got += k;
	}
	/* EVICTING keeps the spans from other allocators and from pinning while unlocked. */
	for (size_t j = 0; j < got; j++) {
		pma_range_apply(owner[j], spans[j], n, PMA_OP_EVICT_SET, &args);
		spans[j] = (owner[j]->first + spans[j]) << PMA_FRAME_SHIFT;
	}
	pma_publish_stats_locked(pma);
	pma_unlock(pma);

	ret = -ENOMEM;
	if (got && contig)
		ret = ops.evict_range(ops.ctx, spans[0], spans[0] + (n << PMA_FRAME_SHIFT));
	else if (got)
		ret = ops.evict_pages(ops.ctx, n << PMA_FRAME_SHIFT, spans, got);
	if (got && ret == -ENOMEM)
		ret = -EAGAIN;	/* the callback failed: retryable, unlike "nothing evictable" */

	pma_lock(pma);
	for (size_t j = 0; j < got; j++)
		pma_range_apply(owner[j], (spans[j] >> PMA_FRAME_SHIFT) - owner[j]->first, n,
				PMA_OP_EVICT_CLR, &args);
	pma_publish_stats_locked(pma);
	pma_unlock(pma);

	cmn_mutex_lock(&pma->wait_lock);
	pma->evictions_in_flight--;
	pthread_cond_broadcast(&pma->wait_cond);
	cmn_mutex_unlock(&pma->wait_lock);
	if (ret)
		cmn_dbg("pma: eviction of %zu span(s) failed: %s", got, ret == -ENOMEM ?
			 "nothing evictable" : "callback error");
out:
	free(spans);
	free(owner);
	return ret;
}
