// SPDX-License-Identifier: MIT
/* hmm/mirror.c - a device mirror and its batched fault service, the way UVM services
 * replayable faults: sort the batch, one pass per 2 MiB block (dedup, thrashing hints,
 * tree prefetch, optional migration into device memory), then the canonical HMM loop
 * (read_begin, range fault, lock, read_retry, map) and one replay for the batch. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

struct block_bits {
	uintptr_t block;		/* block address + 1; 0 = empty */
	uint64_t populated[HMM_BLOCK_WORDS];	/* pages mapped by the device */
};

struct block_tab {
	struct block_bits *tab;
	size_t cap, used;
};

static size_t block_slot(uintptr_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 24) & (cap - 1);
}

static int block_grow(struct block_tab *bt)
{
	size_t cap = bt->cap ? bt->cap * 2 : 64;
	struct block_bits *tab = calloc(cap, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < bt->cap; i++) {
		size_t s;

		if (!bt->tab[i].block)
			continue;
		for (s = block_slot(bt->tab[i].block, cap); tab[s].block; s = (s + 1) & (cap - 1))
			;
		tab[s] = bt->tab[i];
	}
	free(bt->tab);
	bt->tab = tab;
	bt->cap = cap;
	return 0;
}

/* Bits of the block at @b (2 MiB aligned); NULL if absent and !@create or no memory. */
static struct block_bits *block_get(struct block_tab *bt, uintptr_t b, bool create)
{
	uintptr_t key = b + 1;
	size_t s;

	if (!bt->cap) {
		if (!create || block_grow(bt))
			return NULL;
	}
	for (s = block_slot(key, bt->cap); bt->tab[s].block; s = (s + 1) & (bt->cap - 1)) {
		if (bt->tab[s].block == key)
			return &bt->tab[s];
	}
	if (!create)
		return NULL;
	if ((bt->used + 1) * 2 > bt->cap) {
		if (block_grow(bt))
			return NULL;
		return block_get(bt, b, true);
	}
	bt->used++;
	bt->tab[s].block = key;
	return &bt->tab[s];
}

/* Forget populated pages of [start, end). */
static void blocks_clear(struct block_tab *bt, uintptr_t start, uintptr_t end)
{
	for (size_t i = 0; i < bt->cap; i++) {
		struct block_bits *bb = &bt->tab[i];
		uintptr_t b = bb->block - 1;

		if (!bb->block || end <= b || start >= b + HMM_BLOCK_SIZE)
			continue;
		uintptr_t s = cmn_max(start, b), e = cmn_min(end, b + HMM_BLOCK_SIZE);

		cmn_bitmap_clear(bb->populated, (s - b) >> HMM_PAGE_SHIFT, (e - s) >> HMM_PAGE_SHIFT);
	}
}

static bool mirror_invalidate(struct hmm_interval_notifier *sub, const struct hmm_notify_range *r,
			      uint64_t cur_seq)
{
	struct hmm_mirror *m = cmn_container_of(sub, struct hmm_mirror, notifier);

	if (r->flags & HMM_NOTIFY_BLOCKABLE) {
		cmn_mutex_lock(&m->update);
	} else {
		if (!cmn_mutex_trylock(&m->update))
			return false;
	}
	hmm_interval_set_seq(sub, cur_seq);
	blocks_clear(m->blocks, r->start, r->end);
	if (m->ops->invalidate)
		m->ops->invalidate(m, r);
	cmn_mutex_unlock(&m->update);
	return true;
}

static const struct hmm_interval_notifier_ops mirror_notifier_ops = {
	.invalidate = mirror_invalidate,
};

int hmm_mirror_init(struct hmm_mirror *m, struct hmm_mm *mm, struct hmm_devmem *dm,
		    const struct hmm_mirror_ops *ops, const struct hmm_mirror_opts *opts)
{
	static const struct hmm_mirror_opts defaults = {
		.prefetch = HMM_PREFETCH_DEFAULTS, .thrash = HMM_THRASH_DEFAULTS,
		.migrate_on_fault = false,
	};
	int ret;

	if (!m || !mm || !ops || !ops->map)
		return -EINVAL;
	memset(&m->notifier, 0, sizeof(m->notifier));
	m->mm = mm;
	m->devmem = dm;
	m->ops = ops;
	m->opts = opts ? *opts : defaults;
	memset(&m->stats, 0, sizeof(m->stats));
	cmn_mutex_init(&m->update);
	m->blocks = calloc(1, sizeof(struct block_tab));
	if (!m->blocks)
		return -ENOMEM;
	ret = hmm_thrash_create(m->opts.thrash.threshold ? &m->opts.thrash : &defaults.thrash,
				&m->thrash);
	if (ret)
		goto free_blocks;
	ret = hmm_interval_notifier_insert(&m->notifier, mm, 0, UINTPTR_MAX,
					   dm ? hmm_devmem_owner(dm) : NULL, &mirror_notifier_ops);
	if (ret)
		goto free_thrash;
	return 0;
free_thrash:
	hmm_thrash_destroy(m->thrash);
free_blocks:
	free(m->blocks);
	return ret;
}

void hmm_mirror_fini(struct hmm_mirror *m)
{
	struct block_tab *bt = m->blocks;

	hmm_interval_notifier_remove(&m->notifier);
	hmm_thrash_destroy(m->thrash);
	free(bt->tab);
	free(bt);
	cmn_mutex_destroy(&m->update);
}

/* ---- fault service -------------------------------------------------------------------- */

struct fault_ref {
	uintptr_t addr;
	size_t idx;
	bool write;
};

static int fault_cmp(const void *a, const void *b)
{
	const struct fault_ref *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

struct block_work {
	uintptr_t block;
	uint64_t faulted[HMM_BLOCK_WORDS], write[HMM_BLOCK_WORDS];
	uint64_t skip[HMM_BLOCK_WORDS];		/* throttled: not serviced now */
	uint64_t pinned[HMM_BLOCK_WORDS];	/* serviced, but stay in system memory */
	uint64_t prefetch[HMM_BLOCK_WORDS];
	uint64_t pfns[HMM_BLOCK_PAGES];
};

/* Thrashing hints for the faulted pages of @bw (records device migrations). */
static void block_thrash(struct hmm_mirror *m, struct block_work *bw)
{
	uint64_t now = hmm_mm_now(m->mm);

	hmm_mm_use(m->mm);	/* r->back_ns below */
	for (unsigned int pg = 0; pg < HMM_BLOCK_PAGES; pg++) {
		uintptr_t a = bw->block + ((uintptr_t)pg << HMM_PAGE_SHIFT);
		struct hmm_region *r;
		enum hmm_thrash_hint h;

		if (!cmn_test_bit(bw->faulted, pg))
			continue;
		r = hmm_region_find(a);
		if (!r || r->mm != m->mm)
			continue;
		/* the CPU's last pull is an event of its own, at its own time */
		uint64_t back = atomic_exchange(&r->back_ns[(a - r->start) >> HMM_PAGE_SHIFT], 0);

		if (back)
			hmm_thrash_record(m->thrash, a, 0, back);
		h = hmm_thrash_record(m->thrash, a, 1, now);
		if (h == HMM_THRASH_THROTTLE) {
			cmn_set_bit(bw->skip, pg);
			m->stats.throttled++;
		} else if (h == HMM_THRASH_PIN) {
			cmn_set_bit(bw->pinned, pg);
			m->stats.pinned++;
		}
	}
	hmm_mm_unuse(m->mm);
}

/* Migrate the runs of pages to service that are not pinned. */
static void block_migrate(struct hmm_mirror *m, struct block_work *bw, const uint64_t *want)
{
	for (unsigned int pg = 0; pg < HMM_BLOCK_PAGES;) {
		unsigned int k = 0;

		while (pg + k < HMM_BLOCK_PAGES && cmn_test_bit(want, pg + k) &&
		       !cmn_test_bit(bw->pinned, pg + k))
			k++;
		if (!k) {
			pg++;
			continue;
		}
		struct hmm_migrate_result res;
		uintptr_t a = bw->block + ((uintptr_t)pg << HMM_PAGE_SHIFT);

		if (hmm_region_find(a) &&
		    !hmm_migrate_to_device(m->mm, m->devmem, (void *)a,
					   (size_t)k << HMM_PAGE_SHIFT, &res))
			m->stats.migrated += res.migrated;
		pg += k;
	}
}

/* range fault + map of [lo, hi) pages of the block, with the seq retry loop. */
static int block_map(struct hmm_mirror *m, struct block_work *bw, unsigned int lo,
		     unsigned int hi, const uint64_t *want)
{
	struct hmm_range r = {
		.notifier = &m->notifier, .start = bw->block + ((uintptr_t)lo << HMM_PAGE_SHIFT),
		.end = bw->block + ((uintptr_t)hi << HMM_PAGE_SHIFT), .hmm_pfns = bw->pfns,
		.pfn_flags_mask = HMM_PFN_REQ_FAULT | HMM_PFN_REQ_WRITE,
		.dev_private_owner = m->devmem ? hmm_devmem_owner(m->devmem) : NULL,
	};
	uint64_t deadline = cmn_deadline_ns(HMM_RANGE_DEFAULT_TIMEOUT_NS);
	int ret;

	for (;;) {
		for (unsigned int pg = lo; pg < hi; pg++) {
			bw->pfns[pg - lo] = !cmn_test_bit(want, pg) ? 0 :
				HMM_PFN_REQ_FAULT |
				(cmn_test_bit(bw->write, pg) ? HMM_PFN_REQ_WRITE : 0);
		}
		r.notifier_seq = hmm_interval_read_begin(&m->notifier);
		ret = hmm_range_fault(&r);
		if (ret == -EBUSY && !cmn_deadline_passed(deadline)) {
			m->stats.retries++;
			continue;
		}
		if (ret)
			return ret;
		cmn_mutex_lock(&m->update);
		if (hmm_interval_read_retry(&m->notifier, r.notifier_seq)) {
			cmn_mutex_unlock(&m->update);
			m->stats.retries++;
			continue;
		}
		ret = m->ops->map(m, r.start, r.end, bw->pfns);
		if (!ret) {
			struct block_bits *bb = block_get(m->blocks, bw->block, true);

			for (unsigned int pg = lo; pg < hi; pg++) {
				if (!(bw->pfns[pg - lo] & HMM_PFN_VALID) || !cmn_test_bit(want, pg))
					continue;
				m->stats.pages_mapped++;
				if (bb)
					cmn_set_bit(bb->populated, pg);
			}
		}
		cmn_mutex_unlock(&m->update);
		return ret;
	}
}

/* Prefetch only what a fault there could map: pages of readable, ordinary VMAs. */
static void prefetch_clip(struct hmm_mirror *m, struct block_work *bw)
{
	uint64_t keep[HMM_BLOCK_WORDS] = { 0 };
	uintptr_t end = bw->block + HMM_BLOCK_SIZE;

	for (uintptr_t a = bw->block; a < end;) {
		struct hmm_vma v;

		if (hmm_vma_find(m->mm, a, &v) || v.start >= end)
			break;
		uintptr_t s = cmn_max(v.start, bw->block), e = cmn_min(v.end, end);

		if (v.read && !v.special)
			cmn_bitmap_set(keep, (s - bw->block) >> HMM_PAGE_SHIFT,
					(e - s) >> HMM_PAGE_SHIFT);
		a = e;
	}
	for (unsigned int w = 0; w < HMM_BLOCK_WORDS; w++)
		bw->prefetch[w] &= keep[w];
}

/* Service one block; per-fault errors go to @status through @refs. */
static void block_service(struct hmm_mirror *m, struct block_work *bw,
			  const struct fault_ref *refs, size_t nrefs, int *status)
{
	uint64_t resident[HMM_BLOCK_WORDS] = { 0 }, want[HMM_BLOCK_WORDS];
	unsigned int lo = HMM_BLOCK_PAGES, hi = 0;
	struct block_bits *bb;
	int ret;

	if (m->opts.migrate_on_fault && m->devmem)
		block_thrash(m, bw);
	cmn_mutex_lock(&m->update);
	bb = block_get(m->blocks, bw->block, false);
	if (bb)
		memcpy(resident, bb->populated, sizeof(resident));
	cmn_mutex_unlock(&m->update);
	for (unsigned int w = 0; w < HMM_BLOCK_WORDS; w++)
		bw->faulted[w] &= ~bw->skip[w];
	if (hmm_prefetch_compute(&m->opts.prefetch, resident, bw->faulted, bw->pinned,
				 bw->prefetch)) {
		prefetch_clip(m, bw);
		m->stats.prefetched += cmn_bitmap_weight(bw->prefetch, 0, HMM_BLOCK_PAGES);
	}
	for (unsigned int w = 0; w < HMM_BLOCK_WORDS; w++)
		want[w] = bw->faulted[w] | bw->prefetch[w];
	for (unsigned int pg = 0; pg < HMM_BLOCK_PAGES; pg++) {
		if (cmn_test_bit(want, pg)) {
			lo = cmn_min(lo, pg);
			hi = pg + 1;
		}
	}
	if (m->opts.migrate_on_fault && m->devmem)
		block_migrate(m, bw, want);
	ret = lo < hi ? block_map(m, bw, lo, hi, want) : 0;
	m->stats.blocks++;
	for (size_t i = 0; i < nrefs; i++) {
		unsigned int pg = (unsigned int)((refs[i].addr - bw->block) >> HMM_PAGE_SHIFT);
		int st = cmn_test_bit(bw->skip, pg) ? -EAGAIN : ret;

		if (st && st != -EAGAIN)
			m->stats.errors++;
		if (status)
			status[refs[i].idx] = st;
	}
}

/* The block's faults one by one, when the block as a whole failed (one bad page must
 * not cancel its neighbours). */
static void block_service_each(struct hmm_mirror *m, struct block_work *bw,
			       const struct fault_ref *refs, size_t nrefs, int *status)
{
	for (size_t i = 0; i < nrefs; i++) {
		struct block_work one = { .block = bw->block };
		unsigned int pg = (unsigned int)((refs[i].addr - bw->block) >> HMM_PAGE_SHIFT);

		cmn_set_bit(one.faulted, pg);
		if (refs[i].write)
			cmn_set_bit(one.write, pg);
		block_service(m, &one, &refs[i], 1, status);
	}
}

int hmm_mirror_service_faults(struct hmm_mirror *m, const struct hmm_dev_fault *faults,
			      size_t n, int *status)
{
	struct fault_ref *refs;
	struct block_work *bw;

	if (!m || (!faults && n))
		return -EINVAL;
	refs = malloc(n * sizeof(*refs) + 1);
	bw = malloc(sizeof(*bw));
	if (!refs || !bw) {
		free(refs);
		free(bw);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		refs[i] = (struct fault_ref){ faults[i].addr & ~(HMM_PAGE_SIZE - 1), i,
					      faults[i].write };
	qsort(refs, n, sizeof(*refs), fault_cmp);
	m->stats.faults += n;
	for (size_t i = 0; i < n;) {
		size_t j = i;

		memset(bw, 0, sizeof(*bw));
		bw->block = cmn_align_down(refs[i].addr, HMM_BLOCK_SIZE);
		for (; j < n && cmn_align_down(refs[j].addr, HMM_BLOCK_SIZE) == bw->block; j++) {
			unsigned int pg = (unsigned int)((refs[j].addr - bw->block) >> HMM_PAGE_SHIFT);

			if (cmn_test_bit(bw->faulted, pg))
				m->stats.dedup++;
			cmn_set_bit(bw->faulted, pg);
			if (refs[j].write)
				cmn_set_bit(bw->write, pg);
		}
		uint64_t errs = m->stats.errors;

		block_service(m, bw, &refs[i], j - i, status);
		if (m->stats.errors != errs && j - i > 1) {
			m->stats.errors = errs;
			block_service_each(m, bw, &refs[i], j - i, status);
		}
		i = j;
	}
	m->stats.replays++;
	free(refs);
	free(bw);
	return 0;
}
