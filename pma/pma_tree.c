// SPDX-License-Identifier: MIT
/* Extent tree: segment trees of free-run summaries over one region, in two layers over the
 * same leaves (64 groups each): runs of free frames, and runs of whole free 2 MiB groups.
 * The group layer only changes when a group becomes wholly free or stops being so, which is
 * rare next to frame changes, so it keeps its own dirty list and climbs on its own.
 *
 * Each node keeps the free run touching its left edge (pre), its right edge (suf) and the
 * longest inside (max). A state change recomputes the touched leaves and climbs while a
 * level still changes, so a typical update stops well below the root. Searches descend with
 * a "carry" (the free run ending where the next node starts), which finds the first run of
 * n units at or after a bound in O(log n) node visits plus one leaf scan. */
#include <stdlib.h>

#include "pma/pma_internal.h"

#define NONE UINT64_MAX

/* 64 units starting at unit 64 * @wi, 1 = free: frames, or whole 2 MiB groups when @g.
 * Past the end everything is busy. */
static inline uint64_t tree_unit_word(const struct pma_region *r, bool g, uint64_t wi)
{
	if (g)
		return wi < VGPU_BITMAP_WORDS(r->nr_groups) ? r->gfull[wi] : 0;
	return wi < r->nr_words ? pma_word_avail(r, &r->words[wi]) : 0;
}

#define NPRE(nd, g) ((nd)->pre)
#define NSUF(nd, g) ((nd)->suf)
#define NMAX(nd, g) ((nd)->max)

/* Available frames of group @g as the low 32 bits. */
static inline uint32_t group_avail(const struct pma_region *r, uint64_t g)
{
	return (uint32_t)(pma_word_avail(r, &r->words[g / 2]) >> (32 * (g % 2)));
}

/* A leaf is one word of group bits (64 groups, 2048 frames). It is summarised from the group
 * indexes: whole runs of full groups in one step, and only partial groups looked at frame by
 * frame, so the cost follows the number of partial groups, not the leaf size. */
static struct pma_tnode leaf_compute(const struct pma_region *r, uint64_t leaf)
{
	uint64_t gw = VGPU_BITMAP_WORDS(r->nr_groups);
	uint64_t gf = leaf < gw ? r->gfull[leaf] : 0, gp = leaf < gw ? r->gpart[leaf] : 0;
	uint64_t mask = gf | gp, g0 = leaf * 64;
	struct pma_tnode n = { 0 };
	uint32_t cur = 0;
	unsigned int g, next = 0;

	if (!mask)
		return n;
	if (gf == ~0ull)
		return (struct pma_tnode){ 2048, 2048, 2048 };
	g = ~gf ? cmn_ctz(~gf) : 64;		/* leading full groups */
	n.pre = 32 * g;
	if (gp >> g & 1)
		n.pre += cmn_ctz(~group_avail(r, g0 + g));
	g = __builtin_clzll(~gf);		/* trailing full groups */
	n.suf = 32 * g;
	if (gp >> (63 - g) & 1)
		n.suf += __builtin_clz(~group_avail(r, g0 + 63 - g));
	while (mask) {
		g = cmn_ctz(mask);
		if (g != next)
			cur = 0;		/* busy groups in between */
		if (gf >> g & 1) {
			uint64_t rest = ~(gf >> g);
			unsigned int run = rest ? cmn_ctz(rest) : 64 - g;

			cur += 32 * run;
			next = g + run;
		} else {
			uint32_t h = group_avail(r, g0 + g);

			cur += cmn_ctz(~h);
			if (cur > n.max)
				n.max = cur;
			/* A run inside one group is < 32 frames: only look when it could matter (a
			 * leaf with a whole free group has a run of at least 32). */
			if (!gf && n.max < PMA_GROUP_FRAMES - 1) {
				unsigned int m = pma_word_max_run(h);

				if (m > n.max)
					n.max = m;
			}
			cur = __builtin_clz(~h);
			next = g + 1;
		}
		if (cur > n.max)
			n.max = cur;
		mask = next < 64 ? mask & (~0ull << next) : 0;
	}
	return n;
}

/* The group layer's leaf: runs of whole free groups in one word of group bits. */
static struct pma_tnode gleaf_compute(const struct pma_region *r, uint64_t leaf)
{
	uint64_t gf = leaf < VGPU_BITMAP_WORDS(r->nr_groups) ? r->gfull[leaf] : 0;

	if (!gf || gf == ~0ull)
		return gf ? (struct pma_tnode){ 64, 64, 64 } : (struct pma_tnode){ 0 };
	return (struct pma_tnode){ cmn_ctz(~gf), (uint32_t)__builtin_clzll(~gf), pma_word_max_run(gf) };
}

static inline struct pma_tnode layer_leaf(const struct pma_region *r, unsigned int layer,
					  uint64_t leaf)
{
	return layer ? gleaf_compute(r, leaf) : leaf_compute(r, leaf);
}

/* Parent of two children of @len units each. */
static inline void node_merge(struct pma_tnode *n, const struct pma_tnode *l,
			      const struct pma_tnode *r, uint32_t len)
{
	uint32_t mid = l->suf + r->pre, max = l->max > r->max ? l->max : r->max;

	n->pre = l->pre == len ? len + r->pre : l->pre;
	n->suf = r->suf == len ? len + l->suf : r->suf;
	n->max = mid > max ? mid : max;
}

static inline bool node_eq(const struct pma_tnode *a, const struct pma_tnode *b)
{
	return ((a->pre ^ b->pre) | (a->suf ^ b->suf) | (a->max ^ b->max)) == 0;
}

/* Units in one leaf of @layer: frames, or groups. */
static inline uint32_t layer_leaf_len(const struct pma_tree *t, unsigned int layer)
{
	return layer ? t->leaf_units / PMA_GROUP_FRAMES : t->leaf_units;
}

static void layer_rebuild(struct pma_tree *t, const struct pma_region *r, unsigned int layer)
{
	struct pma_tnode *nd = t->layer[layer].node;
	uint32_t len = layer_leaf_len(t, layer);

	for (uint64_t l = 0; l < t->size; l++)
		nd[t->size + l] = l < t->nr_leaves ? layer_leaf(r, layer, l) : (struct pma_tnode){ 0 };
	for (uint64_t lvl = t->size >> 1; lvl >= 1; lvl >>= 1, len <<= 1)
		for (uint64_t i = lvl; i < 2 * lvl; i++)
			node_merge(&nd[i], &nd[2 * i], &nd[2 * i + 1], len);
}

static void layer_clean(struct pma_tlayer *ly)
{
	ly->marked = false;
}

int pma_tree_init(struct pma_tree *t, struct pma_region *r)
{
	t->leaf_units = PMA_LEAF_FRAMES;
	t->nr_leaves = (uint32_t)VGPU_BITMAP_WORDS(r->nr_groups);
	if (!t->nr_leaves)
		t->nr_leaves = 1;
	t->size = (uint32_t)cmn_roundup_pow2(t->nr_leaves);
	for (unsigned int k = 0; k < 2; k++) {
		struct pma_tlayer *ly = &t->layer[k];

		ly->node = pma_zalloc(2 * (size_t)t->size, sizeof(*ly->node));
		ly->dirty = pma_zalloc(VGPU_BITMAP_WORDS(t->nr_leaves), sizeof(*ly->dirty));
		if (!ly->node || !ly->dirty)
			return -ENOMEM;
		layer_clean(ly);
		layer_rebuild(t, r, k);
	}
	return 0;
}

void pma_tree_fini(struct pma_tree *t)
{
	for (unsigned int k = 0; k < 2; k++) {
		free(t->layer[k].node);
		free(t->layer[k].dirty);
		t->layer[k].node = NULL;
		t->layer[k].dirty = NULL;
	}
}

static void layer_mark(struct pma_tree *t, struct pma_tlayer *ly, uint64_t first, uint64_t last)
{
	uint64_t lf = first / t->leaf_units, ll = last / t->leaf_units;

	if (ll >= t->nr_leaves)
		ll = t->nr_leaves - 1;
	for (uint64_t l = lf; l <= ll; l++)
		pma_tlayer_mark(ly, (uint32_t)l);
}

void pma_tree_mark(struct pma_tree *t, uint64_t first, uint64_t last, bool groups)
{
	layer_mark(t, &t->layer[0], first, last);
	if (groups)
		layer_mark(t, &t->layer[1], first, last);
}

/* Recompute leaf @l and climb while a level changes. Leaves are taken one at a time, each
 * leaving every node consistent with its children, so stopping at an unchanged node is exact
 * even when several leaves under it changed: the next one climbs through it again. */
static void leaf_update(struct pma_tree *t, const struct pma_region *r, unsigned int layer,
			uint32_t l)
{
	struct pma_tnode *nd = t->layer[layer].node, c = layer_leaf(r, layer, l);
	uint32_t len = layer_leaf_len(t, layer), i = t->size + l;

	if (node_eq(&c, &nd[i]))
		return;
	nd[i] = c;
	for (i >>= 1; i >= 1; i >>= 1, len <<= 1) {
		node_merge(&c, &nd[2 * i], &nd[2 * i + 1], len);
		if (node_eq(&c, &nd[i]))
			return;
		nd[i] = c;
	}
}

void pma_tree_flush_layer(struct pma_tree *t, const struct pma_region *r, unsigned int layer)
{
	struct pma_tlayer *ly = &t->layer[layer];

	if (!pma_tlayer_dirty(ly))
		return;
	/* A bitmap word per 64 leaves (8 GiB): reading all of them is cheaper than keeping the
	 * marked range on every mark. */
	for (uint32_t wi = 0; wi < VGPU_BITMAP_WORDS(t->nr_leaves); wi++) {
		uint64_t w = ly->dirty[wi];

		if (!w)
			continue;
		ly->dirty[wi] = 0;
		for (; w; w &= w - 1)
			leaf_update(t, r, layer, wi * 64 + cmn_ctz(w));
	}
	layer_clean(ly);
}

/* Unit-level scan of [from, to) continuing @carry; start of the first run of @n or NONE. */
static uint64_t scan_fwd(const struct pma_region *r, bool g, uint64_t u,
			 uint64_t to, uint64_t n, uint64_t *carry)
{
	while (u < to) {
		uint64_t w = tree_unit_word(r, g, u / 64) >> (u % 64);
		uint64_t room = cmn_min(64 - u % 64, to - u);
		uint64_t ones = ~w ? cmn_ctz(~w) : 64, zeros;

		ones = cmn_min(ones, room);
		if (ones) {
			*carry += ones;
			u += ones;
			if (*carry >= n)
				return u - *carry;
			if (ones == room)
				continue;
		}
		*carry = 0;
		w >>= ones;
		zeros = w ? cmn_ctz(w) : 64;
		u += cmn_min(zeros, room - ones);
	}
	return NONE;
}

/* Mirror of scan_fwd walking down from @u (exclusive) to @to; returns the END of the last
 * run of @n (its start is end - carry, carry >= n). */
static uint64_t scan_rev(const struct pma_region *r, bool g, uint64_t u,
			 uint64_t to, uint64_t n, uint64_t *carry)
{
	while (u > to) {
		uint64_t top = u - 1;	/* highest unit looked at */
		uint64_t room = cmn_min(top % 64 + 1, u - to);
		uint64_t w = tree_unit_word(r, g, top / 64) << (63 - top % 64);
		uint64_t ones = ~w ? (uint64_t)__builtin_clzll(~w) : 64, zeros;

		ones = cmn_min(ones, room);
		if (ones) {
			*carry += ones;
			u -= ones;
			if (*carry >= n)
				return u + *carry;
			if (ones == room)
				continue;
		}
		*carry = 0;
		w <<= ones;
		zeros = w ? (uint64_t)__builtin_clzll(w) : 64;
		u -= cmn_min(zeros, room - ones);
	}
	return NONE;
}

static uint64_t find_fwd(const struct pma_tree *t, const struct pma_region *r, bool g, uint64_t i,
			 uint64_t nlo, uint64_t len, uint64_t from, uint64_t n, uint64_t *carry)
{
	const struct pma_tnode *nd = &t->layer[g].node[i];

	if (nlo + len <= from)
		return NONE;
	if (nlo >= from) {
		if (*carry + NPRE(nd, g) >= n)
			return nlo - *carry;
		if (NMAX(nd, g) < n) {
			*carry = NPRE(nd, g) == len ? *carry + len : NSUF(nd, g);
			return NONE;
		}
	}
	if (i >= t->size)
		return scan_fwd(r, g, cmn_max(nlo, from), nlo + len, n, carry);
	uint64_t s = find_fwd(t, r, g, 2 * i, nlo, len / 2, from, n, carry);
	if (s != NONE)
		return s;
	return find_fwd(t, r, g, 2 * i + 1, nlo + len / 2, len / 2, from, n, carry);
}

/* Returns the end of the last run of @n ending at or below @to. */
static uint64_t find_rev(const struct pma_tree *t, const struct pma_region *r, bool g, uint64_t i,
			 uint64_t nlo, uint64_t len, uint64_t to, uint64_t n, uint64_t *carry)
{
	const struct pma_tnode *nd = &t->layer[g].node[i];
	uint64_t nhi = nlo + len;

	if (nlo >= to)
		return NONE;
	if (nhi <= to) {
		if (*carry + NSUF(nd, g) >= n)
			return nhi + *carry;
		if (NMAX(nd, g) < n) {
			*carry = NSUF(nd, g) == len ? *carry + len : NPRE(nd, g);
			return NONE;
		}
	}
	if (i >= t->size)
		return scan_rev(r, g, cmn_min(nhi, to), nlo, n, carry);
	uint64_t e = find_rev(t, r, g, 2 * i + 1, nlo + len / 2, len / 2, to, n, carry);
	if (e != NONE)
		return e;
	return find_rev(t, r, g, 2 * i, nlo, len / 2, to, n, carry);
}

/* Number of free units from @u upward (stopping at @limit). */
static uint64_t run_len_fwd(const struct pma_region *r, bool g, uint64_t u,
			    uint64_t limit)
{
	uint64_t start = u;

	while (u < limit) {
		uint64_t w = tree_unit_word(r, g, u / 64) >> (u % 64);
		uint64_t room = cmn_min(64 - u % 64, limit - u);
		uint64_t ones = cmn_min(~w ? (uint64_t)cmn_ctz(~w) : 64, room);

		u += ones;
		if (ones < room)
			break;
	}
	return u - start;
}

/* Number of free units just below @u (down to @limit). */
static uint64_t run_len_rev(const struct pma_region *r, bool g, uint64_t u,
			    uint64_t limit)
{
	uint64_t end = u;

	while (u > limit) {
		uint64_t top = u - 1;
		uint64_t room = cmn_min(top % 64 + 1, u - limit);
		uint64_t w = tree_unit_word(r, g, top / 64) << (63 - top % 64);
		uint64_t ones = cmn_min(~w ? (uint64_t)__builtin_clzll(~w) : 64, room);

		u -= ones;
		if (ones < room)
			break;
	}
	return end - u;
}

/* First run of @n units anywhere in layer @g, with no bound and no alignment: the classic
 * descent (left child, else the run across the middle, else right), one step per level and
 * one scan of the leaf it ends in. The caller has checked that the root holds such a run. */
static uint64_t find_first(const struct pma_tree *t, const struct pma_region *r, bool g,
			   uint64_t n, uint64_t len)
{
	const struct pma_tnode *nd = t->layer[g].node;
	uint64_t i = 1, nlo = 0, carry = 0;

	while (i < t->size) {
		const struct pma_tnode *l = &nd[2 * i], *rt = &nd[2 * i + 1];

		len /= 2;
		if (l->max >= n) {
			i = 2 * i;
		} else if ((uint64_t)l->suf + rt->pre >= n) {
			return nlo + len - l->suf;
		} else {
			i = 2 * i + 1;
			nlo += len;
		}
	}
	return scan_fwd(r, g, nlo, nlo + len, n, &carry);
}

uint64_t pma_tree_find(struct pma_tree *t, const struct pma_region *r, bool g, uint64_t lo,
		       uint64_t hi, uint64_t n, uint64_t align, uint64_t phase, bool reverse)
{
	uint64_t root_len = (uint64_t)t->size * (g ? 64 : t->leaf_units);

	pma_tree_flush_layer(t, r, g);
	if (!n || hi <= lo || hi - lo < n || NMAX(&t->layer[g].node[1], g) < n)
		return NONE;
	/* Bounds that take in every real unit (padding is never free) and no alignment: the
	 * first run anywhere is the answer. */
	if (!reverse && align == 1 &&
	    lo <= (g ? (r->lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT : r->lo) &&
	    hi >= (g ? r->hi >> PMA_GROUP_SHIFT : r->hi))
		return find_first(t, r, g, n, root_len);
	if (!reverse) {
		/* Each round either fits an aligned start in the run found or skips the run. */
		while (hi - lo >= n) {
			uint64_t carry = 0, s, a, have;

			s = find_fwd(t, r, g, 1, 0, root_len, lo, n, &carry);
			if (s == NONE || s + n > hi)
				return NONE;
			a = cmn_align_up(s + phase, align) - phase;
			if (a + n > hi)
				return NONE;
			have = s + n + run_len_fwd(r, g, s + n, a + n);
			if (have >= a + n)
				return a;
			lo = have + 1;
		}
		return NONE;
	}
	while (hi - lo >= n) {
		uint64_t carry = 0, e, a, low;

		e = find_rev(t, r, g, 1, 0, root_len, hi, n, &carry);
		if (e == NONE || e < lo + n)
			return NONE;
		a = cmn_align_down(e - n + phase, align);
		if (a < phase)
			return NONE;
		a -= phase;
		if (a < lo)
			return NONE;
		low = e - n - run_len_rev(r, g, e - n, a);
		if (low <= a)
			return a;
		if (low == 0)
			return NONE;
		hi = low - 1;
	}
	return NONE;
}

int pma_tree_check(struct pma_tree *t, const struct pma_region *r)
{
	for (unsigned int k = 0; k < 2; k++) {
		const struct pma_tlayer *ly = &t->layer[k];

		for (uint32_t l = 0; l < t->nr_leaves; l++) {
			struct pma_tnode want = layer_leaf(r, k, l);

			if (!cmn_test_bit(ly->dirty, l) && !node_eq(&want, &ly->node[t->size + l]))
				return -EIO;	/* changed but never marked */
		}
		for (uint32_t l = 0; l < t->nr_leaves; l++)
			if (cmn_test_bit(ly->dirty, l) && !pma_tlayer_dirty(ly))
				return -EIO;	/* a mark the flush would not visit */
	}
	pma_tree_flush(t, r);
	for (unsigned int k = 0; k < 2; k++) {
		const struct pma_tnode *nd = t->layer[k].node;
		uint32_t len = layer_leaf_len(t, k);

		for (uint64_t l = 0; l < t->size; l++) {
			struct pma_tnode want = l < t->nr_leaves ? layer_leaf(r, k, l)
								 : (struct pma_tnode){ 0 };

			if (!node_eq(&want, &nd[t->size + l]))
				return -EIO;
		}
		for (uint64_t lvl = t->size >> 1; lvl >= 1; lvl >>= 1, len <<= 1)
			for (uint64_t i = lvl; i < 2 * lvl; i++) {
				struct pma_tnode want;

				node_merge(&want, &nd[2 * i], &nd[2 * i + 1], len);
				if (!node_eq(&want, &nd[i]))
					return -EIO;
			}
	}
	return 0;
}
