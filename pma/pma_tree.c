/* Extent trees: a segment tree of free-run summaries over frames or 2 MiB groups.
 *
 * Each node keeps the free run touching its left edge (pre), its right edge (suf) and the
 * longest inside (max). A state change recomputes the touched leaves and climbs while a
 * level still changes, so a typical update stops well below the root. Searches descend with
 * a "carry" (the free run ending where the next node starts), which finds the first run of
 * n units at or after a bound in O(log n) node visits plus one leaf scan. */
#include <stdlib.h>

#include "pma/pma_internal.h"

#define NONE UINT64_MAX

static uint64_t tree_words(const struct pma_tree *t, const struct pma_region *r)
{
	return t->kind == PMA_TREE_FRAMES ? r->nr_words : VGPU_BITMAP_WORDS(r->nr_groups);
}

/* 64 units starting at unit 64 * @wi, 1 = free; past the end everything is busy. */
static inline uint64_t tree_unit_word(const struct pma_tree *t, const struct pma_region *r,
				      uint64_t wi)
{
	if (t->kind == PMA_TREE_FRAMES)
		return wi < r->nr_words ? pma_word_avail(&r->words[wi]) : 0;
	return wi < VGPU_BITMAP_WORDS(r->nr_groups) ? r->gfull[wi] : 0;
}

/* Longest run of ones in @w: one step per run, not per bit. */
static unsigned int word_max_run(uint64_t w)
{
	unsigned int best = 0;

	while (w) {
		unsigned int r;

		w >>= vgpu_ctz(w);
		r = ~w ? vgpu_ctz(~w) : 64;
		if (r > best)
			best = r;
		if (r == 64)
			break;
		w >>= r;
	}
	return best;
}

static struct pma_tnode leaf_compute(const struct pma_tree *t, const struct pma_region *r,
				     uint64_t leaf)
{
	unsigned int nw = t->leaf_units / 64;
	uint64_t w[PMA_LEAF_WORDS];
	struct pma_tnode n = { 0, 0, 0 };
	uint32_t cur = 0;
	unsigned int i;
	bool all_busy = true;

	for (i = 0; i < nw; i++) {
		w[i] = tree_unit_word(t, r, leaf * nw + i);
		all_busy &= !w[i];
	}
	if (all_busy)
		return n;
	for (i = 0; i < nw && w[i] == ~0ull; i++)
		n.pre += 64;
	if (i < nw)
		n.pre += vgpu_ctz(~w[i]);
	for (i = nw; i > 0 && w[i - 1] == ~0ull; i--)
		n.suf += 64;
	if (i > 0)
		n.suf += __builtin_clzll(~w[i - 1]);
	for (i = 0; i < nw; i++) {
		unsigned int m;

		if (w[i] == ~0ull) {
			cur += 64;
			continue;
		}
		cur += vgpu_ctz(~w[i]);
		if (cur > n.max)
			n.max = cur;
		m = word_max_run(w[i]);
		if (m > n.max)
			n.max = m;
		cur = __builtin_clzll(~w[i]);
	}
	if (cur > n.max)
		n.max = cur;
	return n;
}

static inline struct pma_tnode node_merge(struct pma_tnode l, struct pma_tnode r, uint64_t len)
{
	struct pma_tnode n;
	uint32_t mid = l.suf + r.pre;

	n.pre = l.pre == len ? (uint32_t)len + r.pre : l.pre;
	n.suf = r.suf == len ? (uint32_t)len + l.suf : r.suf;
	n.max = l.max > r.max ? l.max : r.max;
	if (mid > n.max)
		n.max = mid;
	return n;
}

static inline bool node_eq(struct pma_tnode a, struct pma_tnode b)
{
	return a.pre == b.pre && a.suf == b.suf && a.max == b.max;
}

int pma_tree_init(struct pma_tree *t, struct pma_region *r, enum pma_tree_kind kind)
{
	uint64_t units_words;

	t->kind = kind;
	t->leaf_units = kind == PMA_TREE_FRAMES ? PMA_LEAF_WORDS * 64 : 64;
	units_words = tree_words(t, r);
	t->nr_leaves = (uint32_t)((units_words * 64 + t->leaf_units - 1) / t->leaf_units);
	if (!t->nr_leaves)
		t->nr_leaves = 1;
	t->size = (uint32_t)vgpu_roundup_pow2(t->nr_leaves);
	t->node = calloc(2 * (size_t)t->size, sizeof(*t->node));
	if (!t->node)
		return -ENOMEM;
	pma_tree_update(t, r, 0, (uint64_t)t->nr_leaves * t->leaf_units - 1);
	return 0;
}

void pma_tree_fini(struct pma_tree *t)
{
	free(t->node);
	t->node = NULL;
}

void pma_tree_update(struct pma_tree *t, struct pma_region *r, uint64_t first, uint64_t last)
{
	uint64_t lf = first / t->leaf_units, ll = last / t->leaf_units;
	uint64_t lo, hi, len = t->leaf_units;
	bool changed = false;

	if (ll >= t->nr_leaves)
		ll = t->nr_leaves - 1;
	for (uint64_t l = lf; l <= ll; l++) {
		struct pma_tnode n = leaf_compute(t, r, l);

		if (!node_eq(n, t->node[t->size + l])) {
			t->node[t->size + l] = n;
			changed = true;
		}
	}
	lo = (t->size + lf) >> 1;
	hi = (t->size + ll) >> 1;
	/* An unchanged level means unchanged ancestors: stop climbing. */
	while (changed && lo >= 1) {
		changed = false;
		for (uint64_t i = lo; i <= hi; i++) {
			struct pma_tnode n = node_merge(t->node[2 * i], t->node[2 * i + 1], len);

			if (!node_eq(n, t->node[i])) {
				t->node[i] = n;
				changed = true;
			}
		}
		lo >>= 1;
		hi >>= 1;
		len <<= 1;
	}
}

/* Unit-level scan of [from, to) continuing @carry; start of the first run of @n or NONE. */
static uint64_t scan_fwd(const struct pma_tree *t, const struct pma_region *r, uint64_t u,
			 uint64_t to, uint64_t n, uint64_t *carry)
{
	while (u < to) {
		uint64_t w = tree_unit_word(t, r, u / 64) >> (u % 64);
		uint64_t room = vgpu_min(64 - u % 64, to - u);
		uint64_t ones = ~w ? vgpu_ctz(~w) : 64, zeros;

		ones = vgpu_min(ones, room);
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
		zeros = w ? vgpu_ctz(w) : 64;
		u += vgpu_min(zeros, room - ones);
	}
	return NONE;
}

/* Mirror of scan_fwd walking down from @u (exclusive) to @to; returns the END of the last
 * run of @n (its start is end - carry, carry >= n). */
static uint64_t scan_rev(const struct pma_tree *t, const struct pma_region *r, uint64_t u,
			 uint64_t to, uint64_t n, uint64_t *carry)
{
	while (u > to) {
		uint64_t top = u - 1;	/* highest unit looked at */
		uint64_t room = vgpu_min(top % 64 + 1, u - to);
		uint64_t w = tree_unit_word(t, r, top / 64) << (63 - top % 64);
		uint64_t ones = ~w ? (uint64_t)__builtin_clzll(~w) : 64, zeros;

		ones = vgpu_min(ones, room);
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
		u -= vgpu_min(zeros, room - ones);
	}
	return NONE;
}

static uint64_t find_fwd(const struct pma_tree *t, const struct pma_region *r, uint64_t i,
			 uint64_t nlo, uint64_t len, uint64_t from, uint64_t n, uint64_t *carry)
{
	const struct pma_tnode *nd = &t->node[i];

	if (nlo + len <= from)
		return NONE;
	if (nlo >= from) {
		if (*carry + nd->pre >= n)
			return nlo - *carry;
		if (nd->max < n) {
			*carry = nd->pre == len ? *carry + len : nd->suf;
			return NONE;
		}
	}
	if (i >= t->size)
		return scan_fwd(t, r, vgpu_max(nlo, from), nlo + len, n, carry);
	uint64_t s = find_fwd(t, r, 2 * i, nlo, len / 2, from, n, carry);
	if (s != NONE)
		return s;
	return find_fwd(t, r, 2 * i + 1, nlo + len / 2, len / 2, from, n, carry);
}

/* Returns the end of the last run of @n ending at or below @to. */
static uint64_t find_rev(const struct pma_tree *t, const struct pma_region *r, uint64_t i,
			 uint64_t nlo, uint64_t len, uint64_t to, uint64_t n, uint64_t *carry)
{
	const struct pma_tnode *nd = &t->node[i];
	uint64_t nhi = nlo + len;

	if (nlo >= to)
		return NONE;
	if (nhi <= to) {
		if (*carry + nd->suf >= n)
			return nhi + *carry;
		if (nd->max < n) {
			*carry = nd->suf == len ? *carry + len : nd->pre;
			return NONE;
		}
	}
	if (i >= t->size)
		return scan_rev(t, r, vgpu_min(nhi, to), nlo, n, carry);
	uint64_t e = find_rev(t, r, 2 * i + 1, nlo + len / 2, len / 2, to, n, carry);
	if (e != NONE)
		return e;
	return find_rev(t, r, 2 * i, nlo, len / 2, to, n, carry);
}

/* Number of free units from @u upward (stopping at @limit). */
static uint64_t run_len_fwd(const struct pma_tree *t, const struct pma_region *r, uint64_t u,
			    uint64_t limit)
{
	uint64_t start = u;

	while (u < limit) {
		uint64_t w = tree_unit_word(t, r, u / 64) >> (u % 64);
		uint64_t room = vgpu_min(64 - u % 64, limit - u);
		uint64_t ones = vgpu_min(~w ? (uint64_t)vgpu_ctz(~w) : 64, room);

		u += ones;
		if (ones < room)
			break;
	}
	return u - start;
}

/* Number of free units just below @u (down to @limit). */
static uint64_t run_len_rev(const struct pma_tree *t, const struct pma_region *r, uint64_t u,
			    uint64_t limit)
{
	uint64_t end = u;

	while (u > limit) {
		uint64_t top = u - 1;
		uint64_t room = vgpu_min(top % 64 + 1, u - limit);
		uint64_t w = tree_unit_word(t, r, top / 64) << (63 - top % 64);
		uint64_t ones = vgpu_min(~w ? (uint64_t)__builtin_clzll(~w) : 64, room);

		u -= ones;
		if (ones < room)
			break;
	}
	return end - u;
}

uint64_t pma_tree_find(const struct pma_tree *t, const struct pma_region *r, uint64_t lo,
		       uint64_t hi, uint64_t n, uint64_t align, uint64_t phase, bool reverse)
{
	uint64_t root_len = (uint64_t)t->size * t->leaf_units;

	if (!n || hi <= lo || hi - lo < n || t->node[1].max < n)
		return NONE;
	if (!reverse) {
		/* Each round either fits an aligned start in the run found or skips the run. */
		while (hi - lo >= n) {
			uint64_t carry = 0, s, a, have;

			s = find_fwd(t, r, 1, 0, root_len, lo, n, &carry);
			if (s == NONE || s + n > hi)
				return NONE;
			a = vgpu_align_up(s + phase, align) - phase;
			if (a + n > hi)
				return NONE;
			have = s + n + run_len_fwd(t, r, s + n, a + n);
			if (have >= a + n)
				return a;
			lo = have + 1;
		}
		return NONE;
	}
	while (hi - lo >= n) {
		uint64_t carry = 0, e, a, low;

		e = find_rev(t, r, 1, 0, root_len, hi, n, &carry);
		if (e == NONE || e < lo + n)
			return NONE;
		a = vgpu_align_down(e - n + phase, align);
		if (a < phase)
			return NONE;
		a -= phase;
		if (a < lo)
			return NONE;
		low = e - n - run_len_rev(t, r, e - n, a);
		if (low <= a)
			return a;
		if (low == 0)
			return NONE;
		hi = low - 1;
	}
	return NONE;
}

int pma_tree_check(const struct pma_tree *t, struct pma_region *r)
{
	uint64_t len = t->leaf_units;

	for (uint64_t l = 0; l < t->size; l++) {
		struct pma_tnode want = l < t->nr_leaves ? leaf_compute(t, r, l)
							 : (struct pma_tnode){ 0, 0, 0 };

		if (!node_eq(want, t->node[t->size + l]))
			return -EIO;
	}
	for (uint64_t lvl = t->size >> 1; lvl >= 1; lvl >>= 1, len <<= 1)
		for (uint64_t i = lvl; i < 2 * lvl; i++)
			if (!node_eq(node_merge(t->node[2 * i], t->node[2 * i + 1], len), t->node[i]))
				return -EIO;
	return 0;
}
