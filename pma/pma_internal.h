/* SPDX-License-Identifier: MIT */
/* pma internals: per-region frame state, the 2 MiB group indexes and the extent trees.
 *
 * Frame state lives in one struct pma_word (allocated) and one struct pma_attrs (evicting,
 * scrubbing, blacklisted, unpinned, persistent-or-clean) per 64 frames, in two arrays: 6 bits
 * a frame. A frame is *available* (allocatable) iff it is not allocated, not evicting, not
 * scrubbing and not blacklisted. Two indexes are kept exactly in step with the words, under the lock:
 *  - 2 MiB groups (32 frames, naturally aligned): gfull (all 32 available) and gpart (some,
 *    not all), each with a one-bit-per-word summary, so the first full or partial group is
 *    two ctz away. Small pages come from partial groups first, which keeps full groups whole.
 *  - a group run index (pma_runs.c): per word of group bits, the longest run of whole free
 *    groups starting in it (capped at 255), and a maximum per 16 words; it answers "first
 *    run of n whole groups" (32 MiB, 256 MiB requests) with two byte scans and a few bit
 *    operations, and is updated when a word of group bits changes.
 *  - an extent tree: segment trees of (prefix, suffix, max) free runs whose leaves are 64
 *    groups, in two layers (runs of free frames, runs of whole free groups), summarised from
 *    the group bits. It answers "first run of n units" in O(log n) with bounds, alignment
 *    and direction, and holds the largest free extent at its roots. State changes only mark
 *    leaves (a bitmap per layer); a layer is flushed only when it is read: by a search in
 *    it, the largest-free statistic or a check.
 * Metadata is 48 bytes per 64 frames plus well under 1 % for the indexes: ~12 KiB per GiB. */
#ifndef VGPU_PMA_INTERNAL_H
#define VGPU_PMA_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "common/bitops.h"
#include "common/err.h"
#include "common/compiler.h"
#include "common/lock.h"
#include "pma/pma.h"

/* Forced inlining for the small helpers of the fast paths: gcc otherwise keeps some out of
 * line (a call and a frame each, and only the baseline-ISA version of them). */
#define PMA_INLINE inline __attribute__((always_inline))

#define PMA_GROUP_FRAMES	32u		/* frames in a 2 MiB group */
#define PMA_GROUP_SHIFT		5
#define PMA_LEAF_FRAMES		2048u		/* extent-tree leaf: one word of group bits */
#define PMA_BIG_FRAMES		8192u		/* frames in a 512 MiB page */

/* State of 64 frames; bit i is frame (word index * 64 + i) of the region's bitmap. The one
 * mask every allocation and free reads and writes, in an array of its own: 8 bytes per 64
 * frames, so the words the fast paths walk are dense (a 32 MiB run's are one or two cache
 * lines, the whole array of 80 GiB 160 KiB) and most of them stay cached. */
struct pma_word {
	uint64_t alloc;		/* UNPIN or PIN */
};

/* The other masks of the same 64 frames. The attributes are all zero in a plain region
 * (pma_region_plain()); unpin and pzero are zero for a pinned, non-persistent allocation
 * and for a dirty free frame, so the common allocation and free (pma_region_lean()) write
 * neither. */
struct pma_attrs {
	uint64_t evict;		/* EVICTING */
	uint64_t scrub;		/* SCRUBBING */
	uint64_t black;		/* BLACKLIST */
	uint64_t unpin;		/* allocated and UNPIN (an allocated frame without it is PIN) */
	uint64_t pzero;		/* allocated: PERSISTENT; free: known zero (clear: dirty) */
};

/* Visit bitmap indexes [s, s + n) a word at a time: @wi is the word, @m the mask of the
 * range's frames inside it. Only the two end words get a partial mask, both computed once. */
#define pma_for_each_word(s, n, wi, m)							\
	for (uint64_t _ps = (s), _pe = _ps + (n), wi = _ps / 64, _wl = (_pe - 1) / 64,	\
	     _ml = ~0ull >> (63 - (_pe - 1) % 64), m = ~0ull << (_ps % 64);		\
	     _ps < _pe && wi <= _wl && ((m &= wi == _wl ? _ml : ~0ull), 1);		\
	     wi++, m = ~0ull)


/* A free-run summary of a subtree: the run touching its left edge, its right edge, and the
 * longest inside; in frames (frame layer) or whole 2 MiB groups (group layer). */
struct pma_tnode {
	uint32_t pre, suf, max;
};

/* One layer of the tree, with the leaves changed since its last flush: a bitmap, so a mark
 * is one OR whatever was marked before, and a flush visits the leaves in order. */
struct pma_tlayer {
	struct pma_tnode *node;	/* heap order: node[1] root, leaves at [size, 2 size) */
	uint64_t *dirty;	/* one bit per leaf */
	bool marked;		/* some bit of dirty is set (one store: no range to keep) */
};

/* The group run index (pma_runs.c): per word of group bits, the longest run of whole free
 * groups starting in it, capped; per block of PMA_RUN_BLOCK words, the maximum. It is
 * updated when a word of group bits changes, so a 32 MiB search pays for nothing else. */
#define PMA_RUN_CAP	255u		/* runs are counted up to this many groups */
#define PMA_RUN_BLOCK	16u		/* words per block maximum */

struct pma_runs {
	uint8_t *len;		/* per group word, padded to whole blocks */
	uint8_t *bmax;		/* per block, padded to 16 bytes */
	uint32_t nr_words, nr_blocks;
};

/* Longest run of ones in @w in O(log) steps: bit i of @w keeps meaning "a run of at least
 * len ones starts at i". Doubling while such runs exist, then adding smaller steps; a step
 * never exceeds len, so the two runs it combines always touch. */
static inline unsigned int pma_word_max_run(uint64_t w)
{
	unsigned int len = 1;

	if (!w)
		return 0;
	while (len < 64 && (w & (w >> len))) {
		w &= w >> len;
		len *= 2;
	}
	for (unsigned int s = len / 2; s; s /= 2) {
		uint64_t y = w & (w >> s);

		if (y) {
			w = y;
			len += s;
		}
	}
	return len;
}

struct pma_region;

/* A state change only marks leaves. A layer is flushed when something reads it (a search in
 * it, the largest-free statistic, a check): most operations never read either layer, so they
 * never pay a climb. The searches the common requests make (whole groups from the start of
 * the region) go to the group run index instead, which is always exact, so no operation
 * inherits the marks of many others. */
struct pma_tree {
	uint32_t leaf_units;	/* frames per leaf */
	uint32_t nr_leaves;	/* real leaves; the rest up to size are empty */
	uint32_t size;		/* leaves rounded up to a power of two */
	/* [0] runs of free frames, [1] runs of whole free groups */
	struct pma_tlayer layer[2];
};

/* Mark leaf @leaf of @ly changed. */
static PMA_INLINE void pma_tlayer_mark(struct pma_tlayer *ly, uint32_t leaf)
{
	ly->dirty[leaf / 64] |= VGPU_BIT(leaf % 64);
	ly->marked = true;
}

static inline bool pma_tlayer_dirty(const struct pma_tlayer *ly)
{
	return ly->marked;
}

/* One region. Bitmap index 0 is absolute frame @first, aligned to 512 MiB so group and big-
 * page alignment is index arithmetic; frames outside [base, base + size) are padding, held
 * allocated+pinned forever and never counted. */
struct pma_region {
	struct pma_region_desc desc;
	unsigned int id;
	uint64_t first;		/* absolute frame of bitmap index 0 */
	uint64_t lo, hi;	/* real frames: bitmap indexes [lo, hi) */
	uint64_t nr_words;	/* bitmap words (covers whole groups) */
	uint64_t nr_groups;
	struct pma_word *words;
	struct pma_attrs *attrs;	/* one per word */
	uint64_t *gfull, *gpart;	/* one bit per group */
	uint64_t *gfull_sum, *gpart_sum;	/* one bit per word of the above */
	struct pma_tree ftree;
	struct pma_runs runs;
	/* counters, protected by the pma lock */
	uint64_t free_frames, free_groups, scrub_frames, black_frames;
	uint64_t evict_frames;	/* frames with EVICTING set (padding included) */
	uint64_t unpin_frames;	/* allocated UNPIN frames */
	uint64_t persist_frames;	/* allocated PERSISTENT frames */
	/* Every free frame is dirty: the region started dirty (no scrub-on-free) and no scrub
	 * has completed in it. Then every free frame's pzero bit is clear, an allocation is
	 * known not zero without reading them, and a pinned, non-persistent one changes the
	 * allocated masks alone. */
	bool dirty_only;
};

/* The attributes of frame word @w of @r. */
#define PMA_ATTRS(r, w)	(&(r)->attrs[(w) - (r)->words])

/* Frames of word @w of @r that carry an attribute (evicting, scrubbing, blacklisted). */
static inline uint64_t pma_word_attrs(const struct pma_region *r, const struct pma_word *w)
{
	const struct pma_attrs *x = PMA_ATTRS(r, w);

	return x->evict | x->scrub | x->black;
}

/* Available frames of word @w of @r. */
static inline uint64_t pma_word_avail(const struct pma_region *r, const struct pma_word *w)
{
	return ~(w->alloc | pma_word_attrs(r, w));
}

/* True if no frame of @r is evicting, scrubbing or blacklisted: then every attribute mask
 * is zero and the fast paths need not read them (three loads per frame word fewer; the
 * common instance never has such frames). */
static inline bool pma_region_plain(const struct pma_region *r)
{
	return !(r->evict_frames | r->scrub_frames | r->black_frames);
}

/* True if no allocated frame of @r is unpinned or persistent: then every unpin and pzero bit
 * of an allocated frame is clear, and a free changes the allocated masks alone. */
static inline bool pma_region_lean(const struct pma_region *r)
{
	return !(r->unpin_frames | r->persist_frames);
}

/* True if an allocation with @pin and @persist in @r changes the allocated masks alone: it
 * is pinned and not persistent, and every free frame is dirty (unpin and pzero clear). */
static inline bool pma_alloc_lean(const struct pma_region *r, bool pin, bool persist)
{
	return pin && !persist && r->dirty_only;
}

/* Frames @m of word @w, all allocated, become free and dirty. @lean (pma_region_lean()):
 * only the allocated mask changes; otherwise their unpin and pzero bits are cleared and the
 * counters follow. */
static PMA_INLINE void pma_frames_free(struct pma_region *r, struct pma_word *w, uint64_t m,
				       bool lean)
{
	struct pma_attrs *x;

	w->alloc &= ~m;
	if (lean)
		return;
	x = PMA_ATTRS(r, w);
	r->unpin_frames -= cmn_popcount(x->unpin & m);
	r->persist_frames -= cmn_popcount(x->pzero & m);
	x->unpin &= ~m;
	x->pzero &= ~m;
}

/* Frames @m of word @w, all free and available, become allocated, unpinned unless @pin,
 * persistent if @persist (the counters follow). The frames that were not known zero are
 * added to *@dirty. */
static PMA_INLINE void pma_frames_alloc(struct pma_region *r, struct pma_word *w, uint64_t m,
					bool pin, bool persist, uint64_t *dirty)
{
	struct pma_attrs *x = PMA_ATTRS(r, w);

	*dirty |= m & ~x->pzero;
	w->alloc |= m;
	if (!pin) {
		x->unpin |= m;
		r->unpin_frames += cmn_popcount(m);
	}
	if (persist) {
		x->pzero |= m;
		r->persist_frames += cmn_popcount(m);
	} else {
		x->pzero &= ~m;
	}
}

struct pma_scrub_req {
	uint64_t addr, size;
};

struct pma {
	/* allocation state: protected by lock (a spinlock: sections are short) */
	atomic_flag lock;
	_Atomic uintptr_t lock_owner;		/* pma_self() of the holder, 0; for asserts */
	unsigned int nr_regions;
	struct pma_region *regions[PMA_MAX_REGIONS];
	unsigned int nr_black;			/* static + dynamic entries */
	uint64_t black_addrs[PMA_MAX_BLACKLIST];

	struct pma_config cfg;
	struct pma *parent;			/* child: the range came from here */
	uint64_t child_base, child_size;

	/* lock-free statistics: written under lock, read without it */
	_Atomic uint64_t st_total, st_free, st_free_2m, st_largest, st_scrub, st_black;
	/* st_largest is computed when read: set while the frame layers have marks that a reader
	 * must flush first (under the lock) */
	atomic_bool st_largest_stale;

	/* waits (scrub progress, evictions in flight): protected by wait_lock */
	struct cmn_mutex wait_lock;
	pthread_cond_t wait_cond;
	struct pma_evict_ops evict;		/* set/cleared under wait_lock and lock */
	bool evict_registered;
	atomic_bool evict_armed;		/* lock-free copy: skip eviction when unset */
	unsigned int evictions_in_flight;
	_Atomic uint64_t st_unreg_waits;	/* written under wait_lock, read without it */

	/* scrubber worker: queue protected by wait_lock */
	pthread_t scrub_thread;
	bool scrub_thread_running, scrub_stop;
	struct pma_scrub_req *scrub_q;
	size_t scrub_q_len, scrub_q_cap;
	unsigned int scrub_busy;		/* requests popped, not completed */
};

/* Two page addresses in one SSE register for the page-list loops (gcc's generic vectors;
 * 32-byte ones would go through the stack in the x86-64-v2 build). Unaligned, and allowed to
 * alias the uint64_t arrays they are read from and written to. */
typedef uint64_t pma_v2 __attribute__((vector_size(16), aligned(8), may_alias));

/* Runtime CPU dispatch for the allocation and free entry points. On x86-64 each is
 * compiled twice, for the baseline ISA (x86-64-v2) and for x86-64-v3, whose BMI1/BMI2/LZCNT
 * give flag-free variable shifts (shlx/shrx), one-instruction lowest-bit clears (blsr) and
 * tzcnt/lzcnt: the bit loops of the fast paths are made of those. The dynamic loader picks
 * the version for the CPU once (an ifunc), so the binary stays portable. The fast paths they
 * call are PMA_HOT_INLINE, so that each version has its own copy of them. Sanitizer and
 * clang builds keep one version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define PMA_HOT __attribute__((target_clones("default", "arch=x86-64-v3")))
#define PMA_HOT_INLINE inline __attribute__((always_inline))
#else
#define PMA_HOT
#define PMA_HOT_INLINE
#endif

/* The calling thread's identity for the lock-owner asserts: the address of a thread-local
 * byte (defined in pma.c). Two instructions, where pthread_self() would be a library call
 * on every allocation and free, several times over. */
extern __thread char pma_thread_anchor;

static inline uintptr_t pma_self(void)
{
	return (uintptr_t)&pma_thread_anchor;
}

/* Lock: spin briefly, then yield, so a preempted holder does not burn a core. The owner is
 * recorded, as cmn_mutex does, so that every _locked function can assert it is held. */
static inline void pma_lock(struct pma *pma)
{
	unsigned int spins = 0;

	while (atomic_flag_test_and_set_explicit(&pma->lock, memory_order_acquire)) {
		if (++spins < 64)
			cmn_cpu_relax();
		else
			sched_yield();
	}
	atomic_store_explicit(&pma->lock_owner, pma_self(), memory_order_relaxed);
}

static inline void pma_unlock(struct pma *pma)
{
	atomic_store_explicit(&pma->lock_owner, 0, memory_order_relaxed);
	atomic_flag_clear_explicit(&pma->lock, memory_order_release);
}

/* True if the calling thread holds @pma's lock. */
static inline bool pma_lock_held(const struct pma *pma)
{
	return atomic_load_explicit(&pma->lock_owner, memory_order_relaxed) == pma_self();
}

#define pma_assert_locked(pma) VGPU_ASSERT(pma_lock_held(pma))

/* --- pma_tree.c --- */
int pma_tree_init(struct pma_tree *t, struct pma_region *r);
void pma_tree_fini(struct pma_tree *t);
/* Note that frames [first, last] changed (@groups: and which groups are wholly free). */
void pma_tree_mark(struct pma_tree *t, uint64_t first, uint64_t last, bool groups);
/* Bring layer @layer's marked leaves and their ancestors up to date. */
void pma_tree_flush_layer(struct pma_tree *t, const struct pma_region *r, unsigned int layer);
static inline void pma_tree_flush(struct pma_tree *t, const struct pma_region *r)
{
	pma_tree_flush_layer(t, r, 0);
	pma_tree_flush_layer(t, r, 1);
}
/* First (or last, @reverse) start s in [lo, hi) of a free run [s, s + n) inside [lo, hi)
 * with s + @phase a multiple of @align (a power of two). Units are frames, or whole 2 MiB
 * groups with @groups. Flushes the layer it searches. UINT64_MAX if none. */
uint64_t pma_tree_find(struct pma_tree *t, const struct pma_region *r, bool groups,
		       uint64_t lo, uint64_t hi, uint64_t n, uint64_t align, uint64_t phase,
		       bool reverse);
/* Largest free run in frames, and in whole groups (each flushes its layer first). */
static inline uint64_t pma_tree_largest(struct pma_tree *t, const struct pma_region *r)
{
	pma_tree_flush_layer(t, r, 0);
	return t->layer[0].node[1].max;
}
static inline uint64_t pma_tree_largest_groups(struct pma_tree *t, const struct pma_region *r)
{
	pma_tree_flush_layer(t, r, 1);
	return t->layer[1].node[1].max;
}
/* Every leaf not marked must match a fresh computation (a change that was not marked is a
 * bug); then flush and compare every node. 0 or -EIO. */
int pma_tree_check(struct pma_tree *t, const struct pma_region *r);

/* --- pma_runs.c --- */
int pma_runs_init(struct pma_runs *x, uint64_t nr_words);
void pma_runs_fini(struct pma_runs *x);
/* First group g with groups [g, g + @n) all whole and free, 1 <= @n <= PMA_RUN_CAP;
 * UINT64_MAX if none. */
uint64_t pma_runs_find(struct pma_region *r, uint64_t n);
/* Word @gw of the group bits changed: its entry and those of the words whose runs reach it. */
void pma_runs_word_changed(struct pma_region *r, uint64_t gw);
/* The same when only groups @d of word @gw changed, all becoming whole and free (grew) or
 * all ceasing to be (shrank): cheaper when @d is one run of bits, which is the common case
 * (a 2 MiB page, a run of them). */
void pma_runs_word_grew(struct pma_region *r, uint64_t gw, uint64_t d);
void pma_runs_word_shrank(struct pma_region *r, uint64_t gw, uint64_t d);
/* Compare every entry with a fresh computation; 0 or -EIO. */
int pma_runs_check(struct pma_region *r);

#include "pma/pma_runs_internal.h"

/* Group word @gw changed which groups are whole and free: the tree's group layer is marked,
 * the run index follows at once. */
static PMA_INLINE void pma_group_mark(struct pma_region *r, uint32_t gw)
{
	pma_tlayer_mark(&r->ftree.layer[1], gw);
	pma_runs_word_changed(r, gw);
}

/* pma_group_mark() when groups @d of word @gw all became whole (@grew) or all stopped being
 * whole. */
static PMA_INLINE void pma_group_mark_bits(struct pma_region *r, uint32_t gw, uint64_t d, bool grew)
{
	pma_tlayer_mark(&r->ftree.layer[1], gw);
	if (grew)
		pma_runs_word_grew(r, gw, d);
	else
		pma_runs_word_shrank(r, gw, d);
}

/* --- pma.c --- */
/* @n zeroed elements of @size, cache-line aligned and padded to whole lines (NULL if out of
 * memory or the size overflows): the pmas of different functions are written by different
 * threads, and their metadata must never share a line. Freed with free(). */
void *pma_zalloc(size_t n, size_t size);

/* --- pma_region.c --- */
struct pma_region *pma_region_new(const struct pma_region_desc *desc, unsigned int id,
				  bool clean);
void pma_region_free(struct pma_region *r);
/* Available mask of word @wi (padding never available). */
static inline uint64_t pma_region_avail(const struct pma_region *r, uint64_t wi)
{
	return pma_word_avail(r, &r->words[wi]);
}

static PMA_INLINE void pma_sum_update(uint64_t *sum, const uint64_t *map, uint64_t gw)
{
	if (map[gw])
		sum[gw / 64] |= VGPU_BIT(gw % 64);
	else
		sum[gw / 64] &= ~VGPU_BIT(gw % 64);
}

/* Group bits of word @wi (its two groups) from the frames' availability; true if a group
 * became or stopped being wholly free. */
static inline bool pma_region_groups_update_avail(struct pma_region *r, uint64_t wi, uint64_t a)
{
	uint32_t lo = (uint32_t)a, hi = (uint32_t)(a >> 32);
	uint64_t full = (uint64_t)(lo == UINT32_MAX) | (uint64_t)(hi == UINT32_MAX) << 1;
	uint64_t part = (uint64_t)(lo && lo != UINT32_MAX) | (uint64_t)(hi && hi != UINT32_MAX) << 1;
	uint64_t gw = wi / 32, shift = (wi % 32) * 2;
	uint64_t of = r->gfull[gw], nf = (of & ~(3ull << shift)) | full << shift;
	uint64_t op = r->gpart[gw], np = (op & ~(3ull << shift)) | part << shift;

	if (np != op) {
		r->gpart[gw] = np;
		pma_sum_update(r->gpart_sum, r->gpart, gw);
	}
	if (nf == of)
		return false;
	r->gfull[gw] = nf;
	r->free_groups += (uint64_t)cmn_popcount(nf) - cmn_popcount(of);
	pma_sum_update(r->gfull_sum, r->gfull, gw);
	return true;
}

static inline bool pma_region_groups_update(struct pma_region *r, uint64_t wi)
{
	return pma_region_groups_update_avail(r, wi, pma_word_avail(r, &r->words[wi]));
}

/* Word @wi's available mask went from @old_avail to @now: counters, group bits and tree
 * marks follow. */
static inline __attribute__((always_inline)) void
pma_region_word_moved(struct pma_region *r, uint64_t wi, uint64_t old_avail, uint64_t now)
{
	uint32_t leaf = (uint32_t)(wi / (PMA_LEAF_FRAMES / 64));

	if (now == old_avail)
		return;
	r->free_frames += (uint64_t)cmn_popcount(now) - cmn_popcount(old_avail);
	if (pma_region_groups_update_avail(r, wi, now))
		pma_group_mark(r, leaf);
	pma_tlayer_mark(&r->ftree.layer[0], leaf);
}

/* Word @wi changed; @old_avail was its available mask before. Keeps counters, group bits
 * and the tree marks in step. */
static inline void pma_region_word_update(struct pma_region *r, uint64_t wi, uint64_t old_avail)
{
	pma_region_word_moved(r, wi, old_avail, pma_word_avail(r, &r->words[wi]));
}

/* Re-derive group bits, counters and trees after words [w0, w1] changed.
 * @old_avail: available frames in those words before the change. */
void pma_region_refresh(struct pma_region *r, uint64_t w0, uint64_t w1, uint64_t old_avail);
/* Available frames in words [w0, w1]. */
uint64_t pma_region_count_avail(const struct pma_region *r, uint64_t w0, uint64_t w1);
/* Next/previous set bit of a two-level bitmap (map + summary) in [lo, hi); UINT64_MAX if none. */
uint64_t pma_bits_next(const uint64_t *map, const uint64_t *sum, uint64_t lo, uint64_t hi);
uint64_t pma_bits_prev(const uint64_t *map, const uint64_t *sum, uint64_t lo, uint64_t hi);
/* pma_bits_next(), inline: the fast paths are built once per instruction set, and each
 * wants its own copy rather than a call to the baseline one. */
static PMA_INLINE uint64_t pma_bits_next_inl(const uint64_t *map, const uint64_t *sum, uint64_t lo,
					     uint64_t hi)
{
	uint64_t wi, w, si, s, nw;

	if (lo >= hi)
		return UINT64_MAX;
	wi = lo / 64;
	w = map[wi] & (~0ull << (lo % 64));
	if (!w) {
		/* The summary says which words have a bit set: skip the empty ones. */
		nw = VGPU_BITMAP_WORDS(hi);
		if (wi + 1 >= nw)
			return UINT64_MAX;
		si = (wi + 1) / 64;
		s = sum[si] & (~0ull << ((wi + 1) % 64));
		while (!s) {
			if (++si * 64 >= nw)
				return UINT64_MAX;
			s = sum[si];
		}
		wi = si * 64 + cmn_ctz(s);
		if (wi >= nw)
			return UINT64_MAX;
		w = map[wi];
	}
	lo = wi * 64 + cmn_ctz(w);
	return lo < hi ? lo : UINT64_MAX;
}
/* Check one region's indexes and counters; 0 or -EIO. */
int pma_region_check(struct pma_region *r);

/* --- pma_scrub.c --- */
int pma_scrub_start(struct pma *pma);
void pma_scrub_stop(struct pma *pma);
/* Queue [addr, addr + size) for the worker (takes wait_lock: may be called under the lock). */
void pma_scrub_submit(struct pma *pma, uint64_t addr, uint64_t size);
/* Clear SCRUBBING on [addr, addr + size); lock held. */
int pma_scrub_complete_locked(struct pma *pma, uint64_t addr, uint64_t size);

/* --- pma.c --- */
/* Publish the statistics of every region (any number of them). */
void pma_publish_stats_all_locked(struct pma *pma);
/* Publish the exact largest free extent (flushing the frame layers). */
void pma_largest_publish_locked(struct pma *pma);

/* Publish the statistics at the end of an operation. The common instance has one region
 * whose frame layer the operation marked: five stores and the stale flag, inline. */
static inline void pma_publish_stats_locked(struct pma *pma)
{
	const struct pma_region *r = pma->regions[0];

	pma_assert_locked(pma);
	if (pma->nr_regions != 1 || !pma_tlayer_dirty(&r->ftree.layer[0])) {
		pma_publish_stats_all_locked(pma);
		return;
	}
	atomic_store_explicit(&pma->st_total, (r->hi - r->lo) << PMA_FRAME_SHIFT,
			      memory_order_relaxed);
	atomic_store_explicit(&pma->st_free, r->free_frames << PMA_FRAME_SHIFT,
			      memory_order_relaxed);
	atomic_store_explicit(&pma->st_free_2m, r->free_groups, memory_order_relaxed);
	atomic_store_explicit(&pma->st_scrub, r->scrub_frames << PMA_FRAME_SHIFT,
			      memory_order_relaxed);
	atomic_store_explicit(&pma->st_black, r->black_frames << PMA_FRAME_SHIFT,
			      memory_order_relaxed);
	/* The largest extent is left to the next reader (see pma_publish_stats_all_locked). */
	atomic_store_explicit(&pma->st_largest_stale, true, memory_order_relaxed);
}

/* pma_publish_stats_locked() after an allocation or a free without scrub, which change
 * neither the total, the scrubbing nor the blacklisted figure: the free ones only. */
static inline void pma_publish_free_locked(struct pma *pma)
{
	const struct pma_region *r = pma->regions[0];

	pma_assert_locked(pma);
	if (pma->nr_regions != 1 || !pma_tlayer_dirty(&r->ftree.layer[0])) {
		pma_publish_stats_all_locked(pma);
		return;
	}
	atomic_store_explicit(&pma->st_free, r->free_frames << PMA_FRAME_SHIFT,
			      memory_order_relaxed);
	atomic_store_explicit(&pma->st_free_2m, r->free_groups, memory_order_relaxed);
	atomic_store_explicit(&pma->st_largest_stale, true, memory_order_relaxed);
}

/* Region holding absolute frame @frame, or NULL. */
struct pma_region *pma_region_of(struct pma *pma, uint64_t frame);

/* --- frame state changes (pma_state.c). A request validated into frames, and the block
 * changes of whole 2 MiB groups: inline, they are the allocation and free fast paths. --- */
#define PMA_NONE UINT64_MAX	/* "not found" from the searches */
#define PMA_ALL_FLAGS (PMA_DONT_EVICT | PMA_PINNED | PMA_MIN_SPEED | PMA_RANGE | PMA_REGION_ID | \
		       PMA_PREFER_SLOWEST | PMA_CONTIGUOUS | PMA_PERSISTENT | PMA_PROTECTED | \
		       PMA_FORCE_ALIGNMENT | PMA_NO_ZERO | PMA_ALLOW_PARTIAL | PMA_REVERSE)

/* A validated allocation request, in frames. */
struct pma_req {
	size_t count;
	uint64_t pf;		/* frames per page */
	uint64_t align;		/* frames, power of two >= pf */
	uint32_t flags;
	uint64_t lo, hi;	/* absolute frame range [lo, hi) */
};

/* A state change, applied to a set of frames. */
enum pma_op {
	PMA_OP_ALLOC, PMA_OP_FREE, PMA_OP_SCRUBBED, PMA_OP_EVICT_SET, PMA_OP_EVICT_CLR, PMA_OP_PIN,
	PMA_OP_UNPIN,
};

/* The arguments and outputs of a state change. */
struct pma_opargs {
	bool pin, persist;	/* PMA_OP_ALLOC */
	bool scrub;		/* PMA_OP_FREE: frames go to SCRUBBING */
	uint64_t dirty_seen;	/* PMA_OP_ALLOC output: some frame was not known zero */
};

/* Apply @op to frames @m of word @w (of @r: the scrub counter follows). */
static inline void pma_word_apply(struct pma_region *r, struct pma_word *w, uint64_t m,
				  enum pma_op op, struct pma_opargs *a)
{
	struct pma_attrs *x = PMA_ATTRS(r, w);
	uint64_t s;

	switch (op) {
	case PMA_OP_ALLOC:
		if (pma_alloc_lean(r, a->pin, a->persist)) {
			w->alloc |= m;
			a->dirty_seen |= m;
		} else {
			pma_frames_alloc(r, w, m, a->pin, a->persist, &a->dirty_seen);
		}
		break;
	case PMA_OP_FREE:
		pma_frames_free(r, w, m, pma_region_lean(r));
		if (a->scrub) {
			s = m & ~x->scrub & ~x->black;
			x->scrub |= s;
			r->scrub_frames += cmn_popcount(s);
		}
		break;
	case PMA_OP_SCRUBBED:
		s = x->scrub & m;
		x->scrub &= ~s;
		x->pzero |= s & ~w->alloc;	/* free and known zero */
		r->scrub_frames -= cmn_popcount(s);
		r->dirty_only &= !(s & ~w->alloc);
		break;
	case PMA_OP_EVICT_SET:
		r->evict_frames += cmn_popcount(m & ~x->evict);
		x->evict |= m;
		break;
	case PMA_OP_EVICT_CLR:
		r->evict_frames -= cmn_popcount(m & x->evict);
		x->evict &= ~m;
		break;
	case PMA_OP_PIN:
		r->unpin_frames -= cmn_popcount(x->unpin & m);
		x->unpin &= ~m;
		break;
	case PMA_OP_UNPIN:
		r->unpin_frames += cmn_popcount(m & ~x->unpin);
		x->unpin |= m;
		break;
	}
}

/* Bits of groups [g0, g0 + ng) that lie in group word @gw. */
static inline uint64_t pma_gword_mask(uint64_t g0, uint64_t ng, uint64_t gw)
{
	uint64_t lo = cmn_max(g0, gw * 64), hi = cmn_min(g0 + ng, gw * 64 + 64);

	return cmn_mask((unsigned int)(lo - gw * 64), (unsigned int)(hi - lo));
}

/* Whole groups changed their wholeness in group word @gw: summary and both tree layers (a
 * leaf is one group word). */
static PMA_INLINE void pma_gword_changed(struct pma_region *r, uint64_t gw)
{
	pma_sum_update(r->gfull_sum, r->gfull, gw);
	pma_tlayer_mark(&r->ftree.layer[0], (uint32_t)gw);
	pma_group_mark(r, (uint32_t)gw);
}

/* pma_gword_changed() when groups @d of word @gw all became whole (@grew) or all stopped
 * being whole. */
static PMA_INLINE void pma_gword_changed_bits(struct pma_region *r, uint64_t gw, uint64_t d,
					      bool grew)
{
	pma_sum_update(r->gfull_sum, r->gfull, gw);
	pma_tlayer_mark(&r->ftree.layer[0], (uint32_t)gw);
	pma_group_mark_bits(r, (uint32_t)gw, d, grew);
}

/* The frame words of whole groups [g0, g0 + ng) are [w0, w1]; a word holds two groups, so
 * only the two end words may hold just one of the range's (their masks m0, m1). */
struct pma_gwords {
	uint64_t w0, w1, m0, m1;
};

static inline struct pma_gwords pma_gwords_of(uint64_t g0, uint64_t ng)
{
	struct pma_gwords x = {
		.w0 = g0 / 2, .w1 = (g0 + ng - 1) / 2,
		.m0 = g0 % 2 ? 0xffffffff00000000ull : ~0ull,
		.m1 = (g0 + ng) % 2 ? 0xffffffffull : ~0ull,
	};

	if (x.w0 == x.w1)
		x.m0 = x.m1 = x.m0 & x.m1;
	return x;
}

/* Run @body(word, mask) over the frame words of @x: the end words with their masks, the
 * words between with a constant full mask (which the compiler folds into plain stores). */
#define pma_gwords_each(x, body)							\
	do {										\
		body(&r->words[(x).w0], (x).m0);					\
		for (uint64_t _wi = (x).w0 + 1; _wi < (x).w1; _wi++)			\
			body(&r->words[_wi], ~0ull);					\
		if ((x).w1 > (x).w0)							\
			body(&r->words[(x).w1], (x).m1);				\
	} while (0)

/* Frames of the range that are not allocated, and that carry an attribute (accumulated). */
#define PMA_GW_CHECK(w, m)								\
	do {										\
		notalloc |= ~(w)->alloc & (m);						\
		attrs |= pma_word_attrs(r, (w)) & (m);					\
	} while (0)
/* A pinned, non-persistent allocation where free frames may be known zero: those lose it. */
#define PMA_GW_ALLOC_PINNED(w, m)							\
	do {										\
		dirty |= (m) & ~PMA_ATTRS(r, (w))->pzero;				\
		(w)->alloc |= (m);							\
		PMA_ATTRS(r, (w))->pzero &= ~(m);					\
	} while (0)
/* The same where every free frame is known dirty (pma_alloc_lean()): the allocated masks
 * alone, with stores for the whole words. */
#define PMA_GW_ALLOC_LEAN(w, m)	((w)->alloc |= (m))
/* A free in a lean region (pma_region_lean(): the allocated masks alone), and in any other. */
#define PMA_GW_FREE_LEAN(w, m)	pma_frames_free(r, (w), (m), true)
#define PMA_GW_FREE(w, m)	pma_frames_free(r, (w), (m), false)

/* True if groups @gbits of group word @gw hold no available frame. In a plain region that
 * means every frame of them is allocated: the free paths check a 2 MiB page there with the
 * group bits, which are in cache, instead of loading its frame words (which are mostly not,
 * and then only need stores). */
static PMA_INLINE bool pma_groups_unavail(const struct pma_region *r, uint64_t gw, uint64_t gbits)
{
	return !((r->gfull[gw] | r->gpart[gw]) & gbits);
}

/* Check whole groups [g0, g0 + ng) for a plain free: -ENOENT if a frame is not allocated,
 * 1 if a frame carries an attribute (such groups do not become whole: the general path),
 * 0 if they can be freed as a block. */
static PMA_INLINE int pma_groups_free_check(const struct pma_region *r, uint64_t g0, uint64_t ng)
{
	struct pma_gwords x = pma_gwords_of(g0, ng);
	uint64_t notalloc = 0, attrs = 0;

	if (pma_region_plain(r)) {
		for (uint64_t gw = g0 / 64; gw <= (g0 + ng - 1) / 64; gw++)
			notalloc |= !pma_groups_unavail(r, gw, pma_gword_mask(g0, ng, gw));
		return notalloc ? -ENOENT : 0;
	}
	pma_gwords_each(x, PMA_GW_CHECK);
	return notalloc ? -ENOENT : attrs ? 1 : 0;
}

/* Move gfull and the counters for whole groups [g0, g0 + ng) that became allocated (all
 * their bits were set) or free (all clear). */
static PMA_INLINE void pma_groups_flip(struct pma_region *r, uint64_t g0, uint64_t ng, bool alloc)
{
	for (uint64_t gw = g0 / 64; gw <= (g0 + ng - 1) / 64; gw++) {
		uint64_t gm = pma_gword_mask(g0, ng, gw);

		r->gfull[gw] ^= gm;
		pma_gword_changed_bits(r, gw, gm, !alloc);
	}
	if (alloc) {
		r->free_frames -= ng * PMA_GROUP_FRAMES;
		r->free_groups -= ng;
	} else {
		r->free_frames += ng * PMA_GROUP_FRAMES;
		r->free_groups += ng;
	}
}

/* Free whole groups [g0, g0 + ng) that pma_groups_free_check() passed: a block change. */
static PMA_INLINE void pma_groups_free_checked(struct pma_region *r, uint64_t g0, uint64_t ng)
{
	struct pma_gwords x = pma_gwords_of(g0, ng);

	if (pma_region_lean(r))
		pma_gwords_each(x, PMA_GW_FREE_LEAN);
	else
		pma_gwords_each(x, PMA_GW_FREE);
	pma_groups_flip(r, g0, ng, false);
}

/* Whole groups [g0, g0 + ng) that are all free (ALLOC) or all allocated and carry no
 * attribute (FREE without scrub) change as a block: the group bits and counters move by
 * whole words instead of being re-derived word by word (a group that is wholly allocated or
 * wholly free is never partial, so gpart does not move). False if the range does not
 * qualify. */
static PMA_INLINE bool pma_groups_apply(struct pma_region *r, uint64_t g0, uint64_t ng,
				    enum pma_op op, struct pma_opargs *a)
{
	struct pma_gwords x = pma_gwords_of(g0, ng);

	if (op == PMA_OP_FREE) {
		if (a->scrub || pma_groups_free_check(r, g0, ng))
			return false;
		pma_groups_free_checked(r, g0, ng);
		return true;
	}
	if (op != PMA_OP_ALLOC)
		return false;
	for (uint64_t gw = g0 / 64; gw <= (g0 + ng - 1) / 64; gw++) {
		uint64_t gm = pma_gword_mask(g0, ng, gw);

		if ((r->gfull[gw] & gm) != gm)
			return false;
	}
	if (pma_alloc_lean(r, a->pin, a->persist)) {
		/* The common pinned allocation: the allocated masks alone, no loads. */
		pma_gwords_each(x, PMA_GW_ALLOC_LEAN);
		a->dirty_seen = 1;
	} else if (a->pin && !a->persist) {
		uint64_t dirty = 0;

		pma_gwords_each(x, PMA_GW_ALLOC_PINNED);
		a->dirty_seen |= dirty;
	} else {
		pma_for_each_word(g0 * PMA_GROUP_FRAMES, ng * PMA_GROUP_FRAMES, wi, m)
			pma_frames_alloc(r, &r->words[wi], m, a->pin, a->persist, &a->dirty_seen);
	}
	pma_groups_flip(r, g0, ng, true);
	return true;
}

/* One whole group, allocated from full or freed from plain allocated: the common 2 MiB page.
 * False if it does not qualify (then the general path runs). */
static PMA_INLINE bool pma_group_apply(struct pma_region *r, uint64_t idx, enum pma_op op,
				   struct pma_opargs *a)
{
	uint64_t g = idx >> PMA_GROUP_SHIFT, wi = idx / 64;
	uint64_t m = 0xffffffffull << (idx % 64), gbit = VGPU_BIT(g % 64);
	struct pma_word *w = &r->words[wi];

	if (op == PMA_OP_ALLOC) {
		if (!(r->gfull[g / 64] & gbit))
			return false;
		r->gfull[g / 64] &= ~gbit;
		r->free_frames -= PMA_GROUP_FRAMES;
		r->free_groups--;
	} else if (op == PMA_OP_FREE && !a->scrub &&
		   (pma_region_plain(r) ? pma_groups_unavail(r, g / 64, gbit)
					: (w->alloc & m) == m &&
					  !(pma_word_attrs(r, w) & m))) {
		r->gfull[g / 64] |= gbit;
		r->free_frames += PMA_GROUP_FRAMES;
		r->free_groups++;
	} else {
		return false;
	}
	pma_word_apply(r, w, m, op, a);
	pma_gword_changed_bits(r, g / 64, gbit, op == PMA_OP_FREE);
	return true;
}

/* Frame mask of a word from its two group bits (bit 0: low group, bit 1: high group). */
static const uint64_t pma_gpair_mask[4] = { 0, 0xffffffffull, 0xffffffff00000000ull, ~0ull };

/* Visit the frame words of the groups set in @gbits (group word @gw): @wi the word, @m its
 * frames among those groups. One bit per frame word (the even bit of its pair) drives the
 * loop; the pair picks the mask. */
#define pma_gbits_for_each_word(gbits, gw, wi, m)						\
	for (uint64_t _t = ((gbits) | (gbits) >> 1) & 0x5555555555555555ull, wi = 0, m = 0;	\
	     _t && ((wi = (gw) * 32 + cmn_ctz(_t) / 2),				\
		    (m = pma_gpair_mask[((gbits) >> cmn_ctz(_t)) & 3]), 1);		\
	     _t &= _t - 1)


/* Apply @op to bitmap indexes [s, s + n) of @r and bring the indexes up to date. */
void pma_range_apply(struct pma_region *r, uint64_t s, uint64_t n, enum pma_op op,
		     struct pma_opargs *a);
/* Apply @op to one page of @pf frames at bitmap index @idx. */
void pma_page_apply(struct pma_region *r, uint64_t idx, uint64_t pf, enum pma_op op,
		    struct pma_opargs *a);

/* --- lookups shared by the operations --- */
static inline bool pma_page_size_valid(uint64_t ps)
{
	/* All four are powers of two: one of their bits and no other, without a branch per
	 * size (a chain of compares mispredicts on a mix of sizes). */
	return ((ps & (PMA_PAGE_64K | PMA_PAGE_128K | PMA_PAGE_2M | PMA_PAGE_512M)) != 0) &
	       !(ps & (ps - 1));
}

/* Region holding all of [frame, frame + n), or NULL. */
static inline struct pma_region *pma_region_span(struct pma *pma, uint64_t frame, uint64_t n)
{
	struct pma_region *r = pma->nr_regions ? pma->regions[0] : NULL;

	/* Most instances have one region: try it before the search. */
	if (!r || frame < r->first + r->lo || frame >= r->first + r->hi)
		r = pma_region_of(pma, frame);
	if (!r || frame + n > r->first + r->hi || frame + n < frame)
		return NULL;
	return r;
}

/* Resolve page @addr to its region and bitmap index; NULL if not wholly inside one. */
static inline struct pma_region *pma_page_locate(struct pma *pma, uint64_t addr, uint64_t pf,
						 uint64_t *idx)
{
	uint64_t f = addr >> PMA_FRAME_SHIFT;
	struct pma_region *r = pma->nr_regions ? pma->regions[0] : NULL;

	/* Most instances have one region: try it before the search. */
	if (!r || f < r->first + r->lo || f + pf > r->first + r->hi)
		r = pma_region_span(pma, f, pf);

	if (r)
		*idx = (addr >> PMA_FRAME_SHIFT) - r->first;
	return r;
}

/* Request range clipped to @r's real frames, as bitmap indexes. */
static inline void pma_req_clip(const struct pma_req *q, const struct pma_region *r, uint64_t *lo,
				uint64_t *hi)
{
	uint64_t base = r->first + r->lo, end = r->first + r->hi;

	*lo = cmn_max(q->lo, base) - r->first;
	*hi = cmn_min(q->hi, end) - r->first;
}

/* --- pma_alloc.c --- */
/* The regions @q may use, in the order it tries them, into @out; their number. */
unsigned int pma_regions_order(struct pma *pma, const struct pma_req *q,
			       const struct pma_alloc_opts *o, struct pma_region **out);

/* --- pma_search.c --- */
/* First aligned free run of @n frames in [lo, hi) of @r (bitmap indexes); PMA_NONE if none. */
uint64_t pma_find_contig(struct pma_region *r, uint64_t n, uint64_t align, uint64_t lo,
			 uint64_t hi, bool rev);
/* Find up to @need discontiguous pages in [lo, hi) of @r; bitmap indexes into @out. */
size_t pma_find_pages(struct pma_region *r, const struct pma_req *q, size_t need, uint64_t lo,
		      uint64_t hi, uint64_t *out);

/* --- pma_fixed.c --- */
/* Check [s, s + n) of @r for a fixed allocation: -EEXIST if allocated, -ENOMEM if otherwise
 * unavailable (blacklisted, scrubbing, evicting). */
int pma_range_claimable(const struct pma_region *r, uint64_t s, uint64_t n);

/* --- pma_evict.c --- */
/* Evict what @q needs (lock not held): 0, -EAGAIN if the callback failed (retryable),
 * -ENOMEM if nothing is evictable. */
int pma_evict_for(struct pma *pma, const struct pma_req *q, const struct pma_alloc_opts *o);

#endif
