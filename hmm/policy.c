// SPDX-License-Identifier: MIT
/* hmm/policy.c - the UVM performance heuristics: tree prefetch over a 2 MiB block
 * (uvm_perf_prefetch.c) and per-page thrashing detection with throttling and pinning
 * (uvm_perf_thrashing.c). Pure state machines with explicit timestamps, so tests drive
 * time instead of sleeping. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

/* ---- prefetch ------------------------------------------------------------------------- */

/* Pages of [first, first + n) set in @map. */
static unsigned int count_range(const uint64_t *map, unsigned int first, unsigned int n)
{
	return (unsigned int)cmn_bitmap_weight(map, first, n);
}

unsigned int hmm_prefetch_compute(const struct hmm_prefetch_params *p,
				  const uint64_t resident[HMM_BLOCK_WORDS],
				  const uint64_t faulted[HMM_BLOCK_WORDS],
				  const uint64_t thrashing[HMM_BLOCK_WORDS],
				  uint64_t out[HMM_BLOCK_WORDS])
{
	uint64_t populated[HMM_BLOCK_WORDS], region[HMM_BLOCK_WORDS] = { 0 };
	unsigned int nfaults, added = 0;

	memset(out, 0, HMM_BLOCK_WORDS * sizeof(uint64_t));
	for (unsigned int w = 0; w < HMM_BLOCK_WORDS; w++)
		populated[w] = resident[w] | faulted[w];
	nfaults = count_range(faulted, 0, HMM_BLOCK_PAGES);
	if (!p->enable || !nfaults || nfaults < p->min_faults)
		return 0;
	/* for each faulted page walk up the tree: the largest subtree more than threshold %
	 * populated is prefetched whole */
	for (unsigned int pg = 0; pg < HMM_BLOCK_PAGES; pg++) {
		unsigned int best = 0, best_first = 0;

		if (!cmn_test_bit(faulted, pg))
			continue;
		for (unsigned int size = 2; size <= HMM_BLOCK_PAGES; size <<= 1) {
			unsigned int first = pg & ~(size - 1);

			if (count_range(populated, first, size) * 100 > p->threshold_pct * size) {
				best = size;
				best_first = first;
			}
		}
		if (best)
			cmn_bitmap_set(region, best_first, best);
	}
	for (unsigned int w = 0; w < HMM_BLOCK_WORDS; w++) {
		out[w] = region[w] & ~populated[w] & ~thrashing[w];
		added += cmn_popcount(out[w]);
	}
	return added;
}

/* ---- thrashing ------------------------------------------------------------------------ */

struct thrash_page {
	uintptr_t addr;			/* page address + 1; 0 = empty slot */
	uint64_t last_ns;		/* last migration */
	uint64_t throttle_until, pin_until;
	unsigned int last_proc, events, throttles;
	bool seen, pinned;
};

struct hmm_thrash {
	struct hmm_thrash_params p;
	struct cmn_mutex lock;		/* protects everything below */
	struct thrash_page *tab;
	size_t cap, used;
	struct hmm_thrash_stats st;
};

int hmm_thrash_create(const struct hmm_thrash_params *p, struct hmm_thrash **out)
{
	struct hmm_thrash *t;

	if (!p || !out || !p->threshold || !p->lapse_ns || p->pin_threshold < 1)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->p = *p;
	t->cap = 1024;
	t->tab = calloc(t->cap, sizeof(*t->tab));
	if (!t->tab) {
		free(t);
		return -ENOMEM;
	}
	cmn_mutex_init(&t->lock);
	*out = t;
	return 0;
}

void hmm_thrash_destroy(struct hmm_thrash *t)
{
	if (!t)
		return;
	cmn_mutex_destroy(&t->lock);
	free(t->tab);
	free(t);
}

static size_t slot_of(uintptr_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static int grow_locked(struct hmm_thrash *t)
{
	size_t cap = t->cap * 2;
	struct thrash_page *tab;

	cmn_mutex_assert_held(&t->lock);
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < t->cap; i++) {
		size_t s;

		if (!t->tab[i].addr)
			continue;
		for (s = slot_of(t->tab[i].addr, cap); tab[s].addr; s = (s + 1) & (cap - 1))
			;
		tab[s] = t->tab[i];
	}
	free(t->tab);
	t->tab = tab;
	t->cap = cap;
	return 0;
}

/* The record of @addr, created if @create; NULL if absent or out of memory. */
static struct thrash_page *lookup_locked(struct hmm_thrash *t, uintptr_t addr, bool create)
{
	uintptr_t key = (addr & ~(HMM_PAGE_SIZE - 1)) + 1;
	size_t s;

	cmn_mutex_assert_held(&t->lock);
	for (s = slot_of(key, t->cap); t->tab[s].addr; s = (s + 1) & (t->cap - 1)) {
		if (t->tab[s].addr == key)
			return &t->tab[s];
	}
	if (!create)
		return NULL;
	if ((t->used + 1) * 2 > t->cap) {
		if (grow_locked(t))
			return NULL;
		return lookup_locked(t, addr, true);
	}
	t->used++;
	t->tab[s].addr = key;
	return &t->tab[s];
}

static enum hmm_thrash_hint hint_locked(struct hmm_thrash *t, struct thrash_page *pg,
					uint64_t now)
{
	cmn_mutex_assert_held(&t->lock);
	if (pg->pinned) {
		if (now < pg->pin_until)
			return HMM_THRASH_PIN;
		/* quiet for the pin period: back to normal */
		pg->pinned = false;
		pg->events = pg->throttles = 0;
		t->st.unpins++;
	}
	return now < pg->throttle_until ? HMM_THRASH_THROTTLE : HMM_THRASH_NONE;
}

enum hmm_thrash_hint hmm_thrash_record(struct hmm_thrash *t, uintptr_t addr,
				       unsigned int proc, uint64_t now)
{
	enum hmm_thrash_hint h = HMM_THRASH_NONE;
	struct thrash_page *pg;

	if (!t->p.enable)
		return HMM_THRASH_NONE;
	cmn_mutex_lock(&t->lock);
	pg = lookup_locked(t, addr, true);
	if (!pg)
		goto unlock;
	h = hint_locked(t, pg, now);
	if (pg->seen && now - pg->last_ns > t->p.epoch_ns)
		pg->events = pg->throttles = 0;		/* a quiet epoch: start over */
	if (pg->seen && pg->last_proc != proc && now - pg->last_ns < t->p.lapse_ns) {
		pg->events++;
		t->st.events++;
		if (pg->events >= t->p.threshold) {
			pg->throttles++;
			pg->throttle_until = now + t->p.nap_ns;
			t->st.throttles++;
			h = HMM_THRASH_THROTTLE;
			if (pg->throttles >= t->p.pin_threshold && !pg->pinned) {
				pg->pinned = true;
				t->st.pins++;
			}
		}
	}
	if (pg->pinned) {
		pg->pin_until = now + t->p.pin_ns;	/* each event extends the pin */
		h = HMM_THRASH_PIN;
	}
	pg->seen = true;
	pg->last_ns = now;
	pg->last_proc = proc;
unlock:
	cmn_mutex_unlock(&t->lock);
	return h;
}

enum hmm_thrash_hint hmm_thrash_query(struct hmm_thrash *t, uintptr_t addr, uint64_t now)
{
	enum hmm_thrash_hint h = HMM_THRASH_NONE;
	struct thrash_page *pg;

	if (!t->p.enable)
		return HMM_THRASH_NONE;
	cmn_mutex_lock(&t->lock);
	pg = lookup_locked(t, addr, false);
	if (pg)
		h = hint_locked(t, pg, now);
	cmn_mutex_unlock(&t->lock);
	return h;
}

void hmm_thrash_get_stats(struct hmm_thrash *t, struct hmm_thrash_stats *st)
{
	cmn_mutex_lock(&t->lock);
	*st = t->st;
	cmn_mutex_unlock(&t->lock);
}
