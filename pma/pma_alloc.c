/* pma: allocation, fixed allocation, free, pin/unpin, eviction and import. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "pma/pma_internal.h"

#define NONE UINT64_MAX
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

/* --- state changes ---------------------------------------------------------------------- */

enum pma_op { OP_ALLOC, OP_FREE, OP_SCRUBBED, OP_EVICT_SET, OP_EVICT_CLR, OP_PIN, OP_UNPIN };

struct pma_opargs {
	bool pin, persist;	/* OP_ALLOC */
	bool scrub;		/* OP_FREE: frames go to SCRUBBING */
	uint64_t dirty_seen;	/* OP_ALLOC output: some frame was not known zero */
};

static inline void word_apply(struct pma_region *r, struct pma_word *w, uint64_t m,
			      enum pma_op op, struct pma_opargs *a)
{
	uint64_t s;

	switch (op) {
	case OP_ALLOC:
		a->dirty_seen |= w->persist & m;
		w->alloc |= m;
		w->pin = a->pin ? w->pin | m : w->pin & ~m;
		w->persist = a->persist ? w->persist | m : w->persist & ~m;
		break;
	case OP_FREE:
		w->alloc &= ~m;
		w->pin &= ~m;
		w->persist |= m;	/* free and dirty until scrubbed */
		if (a->scrub) {
			s = m & ~w->scrub & ~w->black;
			w->scrub |= s;
			r->scrub_frames += cmn_popcount(s);
		}
		break;
	case OP_SCRUBBED:
		s = w->scrub & m;
		w->scrub &= ~s;
		w->persist &= ~(s & ~w->alloc);
		r->scrub_frames -= cmn_popcount(s);
		break;
	case OP_EVICT_SET:
		w->evict |= m;
		break;
	case OP_EVICT_CLR:
		w->evict &= ~m;
		break;
	case OP_PIN:
		w->pin |= m;
		break;
	case OP_UNPIN:
		w->pin &= ~m;
		break;
	}
}

/* Bits of groups [g0, g0 + ng) that lie in group word @gw. */
static inline uint64_t gword_mask(uint64_t g0, uint64_t ng, uint64_t gw)
{
	uint64_t lo = cmn_max(g0, gw * 64), hi = cmn_min(g0 + ng, gw * 64 + 64);

	return cmn_mask((unsigned int)(lo - gw * 64), (unsigned int)(hi - lo));
}

/* Whole groups changed their wholeness in group word @gw: summary and both tree layers (a
 * leaf is one group word). */
static inline void gword_changed(struct pma_region *r, uint64_t gw)
{
	pma_sum_update(r->gfull_sum, r->gfull, gw);
	pma_tlayer_mark(&r->ftree.layer[0], (uint32_t)gw);
	pma_group_mark(r, (uint32_t)gw);
}

/* The frame words of whole groups [g0, g0 + ng) are [w0, w1]; a word holds two groups, so
 * only the two end words may hold just one of the range's (their masks m0, m1). */
struct gwords {
	uint64_t w0, w1, m0, m1;
};

static inline struct gwords gwords_of(uint64_t g0, uint64_t ng)
{
	struct gwords x = {
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
#define gwords_each(x, body)								do {											body(&r->words[(x).w0], (x).m0);						for (uint64_t _wi = (x).w0 + 1; _wi < (x).w1; _wi++)					body(&r->words[_wi], ~0ull);						if ((x).w1 > (x).w0)									body(&r->words[(x).w1], (x).m1);				} while (0)

/* Frames of the range that are not allocated, and that carry an attribute (accumulated). */
#define GW_CHECK(w, m)									do {											notalloc |= ~(w)->alloc & (m);							attrs |= ((w)->evict | (w)->scrub | (w)->black) & (m);			} while (0)
#define GW_ALLOC_PINNED(w, m)								do {											dirty |= (w)->persist & (m);							(w)->alloc |= (m);								(w)->pin |= (m);								(w)->persist &= ~(m);							} while (0)
#define GW_FREE(w, m)									do {											(w)->alloc &= ~(m);								(w)->pin &= ~(m);								(w)->persist |= (m);	/* free and dirty until scrubbed */		} while (0)

/* Check whole groups [g0, g0 + ng) for a plain free: -ENOENT if a frame is not allocated,
 * 1 if a frame carries an attribute (such groups do not become whole: the general path),
 * 0 if they can be freed as a block. */
static int groups_free_check(const struct pma_region *r, uint64_t g0, uint64_t ng)
{
	struct gwords x = gwords_of(g0, ng);
	uint64_t notalloc = 0, attrs = 0;

	gwords_each(x, GW_CHECK);
	return notalloc ? -ENOENT : attrs ? 1 : 0;
}

/* Move gfull and the counters for whole groups [g0, g0 + ng) that became allocated (all
 * their bits were set) or free (all clear). */
static void groups_flip(struct pma_region *r, uint64_t g0, uint64_t ng, bool alloc)
{
	for (uint64_t gw = g0 / 64; gw <= (g0 + ng - 1) / 64; gw++) {
		r->gfull[gw] ^= gword_mask(g0, ng, gw);
		gword_changed(r, gw);
	}
	if (alloc) {
		r->free_frames -= ng * PMA_GROUP_FRAMES;
		r->free_groups -= ng;
	} else {
		r->free_frames += ng * PMA_GROUP_FRAMES;
		r->free_groups += ng;
	}
}

/* Free whole groups [g0, g0 + ng) that groups_free_check() passed: a block change. */
static void groups_free_checked(struct pma_region *r, uint64_t g0, uint64_t ng)
{
	struct gwords x = gwords_of(g0, ng);

	gwords_each(x, GW_FREE);
	groups_flip(r, g0, ng, false);
}

/* Whole groups [g0, g0 + ng) that are all free (ALLOC) or all allocated and carry no
 * attribute (FREE without scrub) change as a block: the group bits and counters move by
 * whole words instead of being re-derived word by word (a group that is wholly allocated or
 * wholly free is never partial, so gpart does not move). False if the range does not
 * qualify. */
static bool groups_apply(struct pma_region *r, uint64_t g0, uint64_t ng, enum pma_op op,
			 struct pma_opargs *a)
{
	struct gwords x = gwords_of(g0, ng);

	if (op == OP_FREE) {
		if (a->scrub || groups_free_check(r, g0, ng))
			return false;
		groups_free_checked(r, g0, ng);
		return true;
	}
	if (op != OP_ALLOC)
		return false;
	for (uint64_t gw = g0 / 64; gw <= (g0 + ng - 1) / 64; gw++) {
		uint64_t gm = gword_mask(g0, ng, gw);

		if ((r->gfull[gw] & gm) != gm)
			return false;
	}
	if (a->pin && !a->persist) {
		uint64_t dirty = 0;

		/* The common pinned allocation, without the per-word blends. */
		gwords_each(x, GW_ALLOC_PINNED);
		a->dirty_seen |= dirty;
	} else {
		uint64_t pin = a->pin ? ~0ull : 0, persist = a->persist ? ~0ull : 0;

		pma_for_each_word(g0 * PMA_GROUP_FRAMES, ng * PMA_GROUP_FRAMES, wi, m) {
			struct pma_word *w = &r->words[wi];

			a->dirty_seen |= w->persist & m;
			w->alloc |= m;
			w->pin = (w->pin & ~m) | (pin & m);
			w->persist = (w->persist & ~m) | (persist & m);
		}
	}
	groups_flip(r, g0, ng, true);
	return true;
}

/* One whole group, allocated from full or freed from plain allocated: the common 2 MiB page.
 * False if it does not qualify (then the general path runs). */
static inline bool group_apply(struct pma_region *r, uint64_t idx, enum pma_op op,
			       struct pma_opargs *a)
{
	uint64_t g = idx >> PMA_GROUP_SHIFT, wi = idx / 64;
	uint64_t m = 0xffffffffull << (idx % 64), gbit = VGPU_BIT(g % 64);
	struct pma_word *w = &r->words[wi];

	if (op == OP_ALLOC) {
		if (!(r->gfull[g / 64] & gbit))
			return false;
		r->gfull[g / 64] &= ~gbit;
		r->free_frames -= PMA_GROUP_FRAMES;
		r->free_groups--;
	} else if (op == OP_FREE && !a->scrub && (w->alloc & m) == m &&
		   !((w->evict | w->scrub | w->black) & m)) {
		r->gfull[g / 64] |= gbit;
		r->free_frames += PMA_GROUP_FRAMES;
		r->free_groups++;
	} else {
		return false;
	}
	word_apply(r, w, m, op, a);
	gword_changed(r, g / 64);
	return true;
}

/* Apply @op to bitmap indexes [s, s + n) of @r and bring the indexes up to date. */
static void range_apply(struct pma_region *r, uint64_t s, uint64_t n, enum pma_op op,
			struct pma_opargs *a)
{
	if (!(s % PMA_GROUP_FRAMES) && !(n % PMA_GROUP_FRAMES) &&
	    (n == PMA_GROUP_FRAMES ? group_apply(r, s, op, a)
				   : groups_apply(r, s / PMA_GROUP_FRAMES, n / PMA_GROUP_FRAMES, op, a)))
		return;
	pma_for_each_word(s, n, wi, m) {
		uint64_t old = pma_word_avail(&r->words[wi]);

		word_apply(r, &r->words[wi], m, op, a);
		pma_region_word_update(r, wi, old);
	}
}

/* Apply @op to one page of @pf frames at bitmap index @idx. */
static inline void page_apply(struct pma_region *r, uint64_t idx, uint64_t pf, enum pma_op op,
			      struct pma_opargs *a)
{
	if (pf == PMA_GROUP_FRAMES && !(idx % PMA_GROUP_FRAMES) && group_apply(r, idx, op, a))
		return;
	if (pf < PMA_GROUP_FRAMES && pf <= 64 - idx % 64) {
		uint64_t wi = idx / 64, old = pma_word_avail(&r->words[wi]);

		word_apply(r, &r->words[wi], cmn_mask(idx % 64, (unsigned int)pf), op, a);
		pma_region_word_update(r, wi, old);
		return;
	}
	range_apply(r, idx, pf, op, a);
}

/* --- request validation and region order ------------------------------------------------- */

static bool page_size_valid(uint64_t ps)
{
	return ps == PMA_PAGE_64K || ps == PMA_PAGE_128K || ps == PMA_PAGE_2M || ps == PMA_PAGE_512M;
}

static int req_init(struct pma *pma, struct pma_req *q, size_t count, uint64_t page_size,
		    const struct pma_alloc_opts *o)
{
	uint32_t flags = o ? o->flags : 0;

	if (!page_size_valid(page_size) || !count || (flags & ~PMA_ALL_FLAGS))
		return -EINVAL;
	if (count > (UINT64_MAX >> PMA_FRAME_SHIFT) >> cmn_ctz(page_size))	/* no division */
		return -EINVAL;
	if ((flags & PMA_ALLOW_PARTIAL) && (flags & PMA_CONTIGUOUS))
		return -EINVAL;
	q->count = count;
	q->flags = flags;
	q->pf = page_size >> PMA_FRAME_SHIFT;
	q->align = q->pf;
	q->lo = 0;
	q->hi = NONE;
	if (flags & PMA_FORCE_ALIGNMENT) {
		if (!cmn_is_pow2(o->alignment) || o->alignment < PMA_FRAME_SIZE)
			return -EINVAL;
		/* Discontiguous pages are aligned to their size; more cannot be honoured. */
		if (!(flags & PMA_CONTIGUOUS) && o->alignment > page_size)
			return -EINVAL;
		q->align = cmn_max(q->pf, o->alignment >> PMA_FRAME_SHIFT);
	}
	if (flags & PMA_RANGE) {
		if (o->range_begin >= o->range_end || (o->range_begin | o->range_end) & (page_size - 1))
			return -EINVAL;
		q->lo = o->range_begin >> PMA_FRAME_SHIFT;
		q->hi = o->range_end >> PMA_FRAME_SHIFT;
	}
	if ((flags & PMA_REGION_ID) && o->region_id >= pma->nr_regions)
		return -EINVAL;
	return 0;
}

static inline bool region_eligible(const struct pma_region *r, const struct pma_req *q,
			    const struct pma_alloc_opts *o)
{
	uint64_t base = r->first + r->lo, end = r->first + r->hi;

	/* The common request names no region, speed or range: any unprotected region. */
	if (!(q->flags & (PMA_REGION_ID | PMA_PROTECTED | PMA_MIN_SPEED | PMA_RANGE)))
		return !r->desc.protected_mem;
	if ((q->flags & PMA_REGION_ID) && r->id != o->region_id)
		return false;
	if (!!(q->flags & PMA_PROTECTED) != r->desc.protected_mem)
		return false;
	if ((q->flags & PMA_MIN_SPEED) && r->desc.performance < o->min_speed)
		return false;
	return q->lo < end && q->hi > base;
}

/* True if @a should be tried before @b. */
static bool region_before(const struct pma_region *a, const struct pma_region *b, uint32_t flags)
{
	if (flags & PMA_REVERSE)
		return a->desc.base > b->desc.base;
	if (a->desc.performance != b->desc.performance)
		return (flags & PMA_PREFER_SLOWEST) ? a->desc.performance < b->desc.performance
						    : a->desc.performance > b->desc.performance;
	return a->desc.base < b->desc.base;
}

static inline unsigned int regions_order(struct pma *pma, const struct pma_req *q,
				  const struct pma_alloc_opts *o, struct pma_region **out)
{
	unsigned int n = 0;

	if (pma->nr_regions == 1) {
		out[0] = pma->regions[0];
		return region_eligible(out[0], q, o);
	}
	for (unsigned int i = 0; i < pma->nr_regions; i++) {
		struct pma_region *r = pma->regions[i];
		unsigned int j = n++;

		if (!region_eligible(r, q, o)) {
			n--;
			continue;
		}
		while (j > 0 && region_before(r, out[j - 1], q->flags)) {
			out[j] = out[j - 1];
			j--;
		}
		out[j] = r;
	}
	return n;
}

/* Request range clipped to @r's real frames, as bitmap indexes. */
static void req_clip(const struct pma_req *q, const struct pma_region *r, uint64_t *lo,
		     uint64_t *hi)
{
	uint64_t base = r->first + r->lo, end = r->first + r->hi;

	*lo = cmn_max(q->lo, base) - r->first;
	*hi = cmn_min(q->hi, end) - r->first;
}

/* --- searching ----------------------------------------------------------------------------- */

/* First aligned free run of @n frames in [lo, hi) of @r (bitmap indexes); NONE if none. */
static uint64_t find_contig(struct pma_region *r, uint64_t n, uint64_t align, uint64_t lo,
			    uint64_t hi, bool rev)
{
	uint64_t phase = r->first % align;

	/* One 2 MiB page: the first full group is the answer. */
	if (n == PMA_GROUP_FRAMES && align == PMA_GROUP_FRAMES) {
		uint64_t glo = (lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
		uint64_t ghi = hi >> PMA_GROUP_SHIFT;
		uint64_t g = rev ? pma_bits_prev(r->gfull, r->gfull_sum, glo, ghi)
				 : pma_bits_next(r->gfull, r->gfull_sum, glo, ghi);

		return g == NONE ? NONE : g << PMA_GROUP_SHIFT;
	}
	/* Whole groups: search group runs, so alignment to 2 MiB comes for free. */
	if (!(n % PMA_GROUP_FRAMES) && !(align % PMA_GROUP_FRAMES)) {
		uint64_t glo = (lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
		uint64_t ghi = hi >> PMA_GROUP_SHIFT, g;

		/* The first run anywhere, 2 MiB aligned, of up to PMA_RUN_CAP groups: the run
		 * index answers (bounds that take in every real group are no bound: padding is
		 * never free). Anything else searches the tree's group layer. */
		if (!rev && align == PMA_GROUP_FRAMES && n >> PMA_GROUP_SHIFT <= PMA_RUN_CAP &&
		    glo <= (r->lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT &&
		    ghi >= r->hi >> PMA_GROUP_SHIFT)
			g = pma_runs_find(r, n >> PMA_GROUP_SHIFT);
		else
			g = pma_tree_find(&r->ftree, r, true, glo, ghi, n >> PMA_GROUP_SHIFT,
					  align >> PMA_GROUP_SHIFT, phase >> PMA_GROUP_SHIFT, rev);

		return g == NONE ? NONE : g << PMA_GROUP_SHIFT;
	}
	return pma_tree_find(&r->ftree, r, false, lo, hi, n, align, phase, rev);
}

/* Take up to @need pages of 1 or 2 frames from the groups set in @map within [lo, hi). */
static size_t take_small(const struct pma_region *r, const uint64_t *map, const uint64_t *sum,
			 uint64_t pf, size_t need, uint64_t lo, uint64_t hi, bool rev,
			 uint64_t *out)
{
	uint64_t glo = lo >> PMA_GROUP_SHIFT, ghi = (hi + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
	size_t got = 0;

	while (got < need && glo < ghi) {
		uint64_t g = rev ? pma_bits_prev(map, sum, glo, ghi) : pma_bits_next(map, sum, glo, ghi);
		uint64_t base, m;

		if (g == NONE)
			break;
		if (rev)
			ghi = g;
		else
			glo = g + 1;
		base = g << PMA_GROUP_SHIFT;
		m = (pma_word_avail(&r->words[base / 64]) >> (base % 64)) & 0xffffffffull;
		if (base < lo)
			m &= ~0ull << (lo - base);
		if (base + PMA_GROUP_FRAMES > hi)
			m &= (1ull << (hi - base)) - 1;
		if (pf == 2)
			m &= (m >> 1) & 0x55555555ull;
		while (m && got < need) {
			unsigned int b = rev ? cmn_fls(m) : cmn_ctz(m);

			m &= ~VGPU_BIT(b);
			out[got++] = base + b;
		}
	}
	return got;
}

/* Find up to @need discontiguous pages in [lo, hi) of @r; bitmap indexes into @out. */
static size_t find_pages(struct pma_region *r, const struct pma_req *q, size_t need,
			 uint64_t lo, uint64_t hi, uint64_t *out)
{
	bool rev = q->flags & PMA_REVERSE;
	size_t got = 0;

	if (q->pf <= 2) {
		/* Partial groups first: small pages should not break whole 2 MiB groups. */
		got = take_small(r, r->gpart, r->gpart_sum, q->pf, need, lo, hi, rev, out);
		if (got < need)
			got += take_small(r, r->gfull, r->gfull_sum, q->pf, need - got, lo, hi, rev,
					  out + got);
		return got;
	}
	if (q->pf == PMA_GROUP_FRAMES) {
		uint64_t glo = (lo + PMA_GROUP_FRAMES - 1) >> PMA_GROUP_SHIFT;
		uint64_t ghi = hi >> PMA_GROUP_SHIFT;

		/* Many 2 MiB pages: one run of whole groups, when there is one, keeps the request
		 * to a few tree leaves and leaves the scattered groups to smaller requests. */
		if (need > 1 && need <= UINT32_MAX &&
		    (need <= PMA_RUN_CAP || pma_tree_largest_groups(&r->ftree, r) >= need)) {
			uint64_t s = find_contig(r, need * PMA_GROUP_FRAMES, PMA_GROUP_FRAMES, lo, hi,
						 rev);

			if (s != NONE) {
				for (size_t i = 0; i < need; i++)
					out[i] = s + i * PMA_GROUP_FRAMES;
				return need;
			}
		}
		/* Forward: drain each word of full groups before asking the summary again. */
		while (!rev && got < need) {
			uint64_t g = pma_bits_next(r->gfull, r->gfull_sum, glo, ghi), w;

			if (g == NONE)
				break;
			w = r->gfull[g / 64] & (~0ull << (g % 64));
			while (w && got < need) {
				g = (g & ~63ull) + cmn_ctz(w);
				if (g >= ghi)
					return got;
				w &= w - 1;
				out[got++] = g << PMA_GROUP_SHIFT;
			}
			glo = (g | 63) + 1;
		}
		while (rev && got < need) {
			uint64_t g = rev ? pma_bits_prev(r->gfull, r->gfull_sum, glo, ghi)
					 : pma_bits_next(r->gfull, r->gfull_sum, glo, ghi);

			if (g == NONE)
				break;
			out[got++] = g << PMA_GROUP_SHIFT;
			ghi = g;
		}
		return got;
	}
	while (got < need) {
		uint64_t s = find_contig(r, q->pf, q->pf, lo, hi, rev);

		if (s == NONE)
			break;
		out[got++] = s;
		if (rev)
			hi = s;
		else
			lo = s + q->pf;
	}
	return got;
}

/* --- allocation ----------------------------------------------------------------------------- */

static uint64_t avail_frames_in(struct pma_region *const *rs, unsigned int n)
{
	uint64_t f = 0;

	for (unsigned int i = 0; i < n; i++)
		f += rs[i]->free_frames;
	return f;
}

#define PMA_FAST_WORDS 64

/* Frame mask of a word from its two group bits (bit 0: low group, bit 1: high group). */
static const uint64_t gpair_mask[4] = { 0, 0xffffffffull, 0xffffffff00000000ull, ~0ull };

/* Visit the frame words of the groups set in @gbits (group word @gw): @wi the word, @m its
 * frames among those groups. One bit per frame word (the even bit of its pair) drives the
 * loop; the pair picks the mask. */
#define gbits_for_each_word(gbits, gw, wi, m)						\
	for (uint64_t _t = ((gbits) | (gbits) >> 1) & 0x5555555555555555ull, wi = 0, m = 0;	\
	     _t && ((wi = (gw) * 32 + cmn_ctz(_t) / 2),				\
		    (m = gpair_mask[((gbits) >> cmn_ctz(_t)) & 3]), 1);		\
	     _t &= _t - 1)

/* @pages[p] = @addr + p * @step for p < @n, two at a time. */
static inline void pages_fill(uint64_t *pages, uint64_t addr, size_t n, uint64_t step)
{
	size_t p = 0;

	for (; p + 2 <= n; p += 2) {
		pages[p] = addr + p * step;
		pages[p + 1] = addr + (p + 1) * step;
	}
	if (p < n)
		pages[p] = addr + p * step;
}

/* The lowest @k set bits of @m (@k < popcount(@m)). */
static inline uint64_t low_bits(uint64_t m, size_t k)
{
	uint64_t sel = 0;

	while (k--) {
		sel |= m & (0 - m);
		m &= m - 1;
	}
	return sel;
}

/* Take @need 64 KiB pages from the partial (@partial) or the whole free groups, ascending,
 * committing each group's pages with one word update as soon as they are chosen. The caller
 * has proved that the request fits, so nothing ever has to be undone. Which group bits move
 * is known from where the group came from: a partial group stays partial or becomes empty
 * (never whole), a whole group (all 32 frames available) stops being whole. The group bits,
 * their summaries and the tree marks move once per word of group bits, the counters once.
 * Returns the pages taken. */
static inline __attribute__((always_inline)) size_t
take_commit_64k(struct pma_region *r, bool partial, size_t need, struct pma_opargs *a,
		uint64_t pin, uint64_t persist, uint64_t *out)
{
	uint64_t *map = partial ? r->gpart : r->gfull, *sum = partial ? r->gpart_sum : r->gfull_sum;
	uint64_t g = pma_bits_next_inl(map, sum, 0, r->nr_groups), dirty = 0, taken = 0;
	size_t got = 0;

	while (got < need && g != NONE) {
		uint64_t gw = g / 64, bits = map[gw] & (~0ull << (g % 64)), gone = 0, broken = 0;

		for (; bits && got < need; bits &= bits - 1) {
			unsigned int gb = cmn_ctz(bits);
			uint64_t base = (gw * 64 + gb) << PMA_GROUP_SHIFT, sh = base % 64;
			struct pma_word *w = &r->words[base / 64];
			uint64_t m = partial ? (pma_word_avail(w) >> sh) & 0xffffffffull : 0xffffffffull;
			uint64_t addr0 = (r->first + base) << PMA_FRAME_SHIFT, fm;
			size_t left = need - got, nm = cmn_popcount(m);
			uint64_t sel = nm <= left ? m : low_bits(m, left);

			for (uint64_t t = sel; t; t &= t - 1)
				out[got++] = addr0 + ((uint64_t)cmn_ctz(t) << PMA_FRAME_SHIFT);
			fm = sel << sh;
			dirty |= w->persist & fm;
			w->alloc |= fm;
			w->pin = (w->pin & ~fm) | (pin & fm);
			w->persist = (w->persist & ~fm) | (persist & fm);
			taken += nm <= left ? nm : left;
			if (!partial || sel == m)	/* not whole any more / nothing left */
				gone |= VGPU_BIT(gb);
			if (!partial && sel != m)	/* a broken whole group is partial */
				broken |= VGPU_BIT(gb);
		}
		map[gw] &= ~gone;
		if (!map[gw])
			sum[gw / 64] &= ~VGPU_BIT(gw % 64);
		if (!partial) {
			r->free_groups -= cmn_popcount(gone);
			if (broken) {
				r->gpart[gw] |= broken;
				r->gpart_sum[gw / 64] |= VGPU_BIT(gw % 64);
			}
			pma_group_mark(r, (uint32_t)gw);
		}
		pma_tlayer_mark(&r->ftree.layer[0], (uint32_t)gw);
		if (got < need)
			g = pma_bits_next(map, sum, (gw + 1) * 64, r->nr_groups);
	}
	r->free_frames -= taken;
	a->dirty_seen |= dirty;
	return got;
}

/* Partial groups first, then whole ones; @pin and @persist are the masks the pages get
 * (constants in the common pinned case, so the blends fold away). */
static inline __attribute__((always_inline)) void
take_commit_64k_all(struct pma_region *r, size_t count, struct pma_opargs *a, uint64_t pin,
		    uint64_t persist, uint64_t *pages)
{
	size_t got = take_commit_64k(r, true, count, a, pin, persist, pages);

	if (got < count)
		got += take_commit_64k(r, false, count - got, a, pin, persist, pages + got);
	VGPU_ASSERT(got == count);
}

/* The common small request: 64 KiB pages from the only eligible region, anywhere in it,
 * bottom-up. The free-frame counter proves it fits (every available frame lies in a full or
 * a partial group), so it commits while it searches: partial groups first, as find_pages()
 * would, then whole groups. Same pages as the general path, a fraction of the work. */
static bool alloc_64k_fast(struct pma_region *r, const struct pma_req *q, struct pma_opargs *a,
			   uint64_t *pages)
{
	if (q->pf != 1 || (q->flags & (PMA_RANGE | PMA_REVERSE)) || r->free_frames < q->count)
		return false;
	if (a->pin && !a->persist)
		take_commit_64k_all(r, q->count, a, ~0ull, 0, pages);
	else
		take_commit_64k_all(r, q->count, a, a->pin ? ~0ull : 0, a->persist ? ~0ull : 0, pages);
	return true;
}

/* Many 2 MiB pages from the only eligible region, anywhere, bottom-up, when no single run of
 * whole groups holds them all (find_pages() would take such a run): whole groups are taken a
 * group word at a time, in the order find_pages() drains them. The free-group counter proves
 * the request fits. */
static bool alloc_2m_fast(struct pma_region *r, const struct pma_req *q, struct pma_opargs *a,
			  uint64_t *pages)
{
	uint64_t g = 0, pin = a->pin ? ~0ull : 0, persist = a->persist ? ~0ull : 0;
	size_t got = 0;

	if (q->pf != PMA_GROUP_FRAMES || (q->flags & (PMA_RANGE | PMA_REVERSE)) ||
	    r->free_groups < q->count)
		return false;
	if (q->count > 1 && q->count <= PMA_RUN_CAP)
		g = pma_runs_find(r, q->count);
	else if (q->count > 1 && q->count <= UINT32_MAX &&
		 pma_tree_largest_groups(&r->ftree, r) >= q->count)
		g = pma_tree_find(&r->ftree, r, true, 0, r->nr_groups, q->count, 1, 0, false);
	else
		g = NONE;
	if (g != NONE) {
		/* One run holds them all: find_pages() would take the first such run. */
		uint64_t addr = (r->first + (g << PMA_GROUP_SHIFT)) << PMA_FRAME_SHIFT;
		bool whole;

		whole = groups_apply(r, g, q->count, OP_ALLOC, a);
		VGPU_ASSERT(whole);
		pages_fill(pages, addr, q->count, PMA_PAGE_2M);
		return true;
	}
	g = 0;
	while (got < q->count) {
		uint64_t gw, take, dirty = 0;
		size_t have, want = q->count - got;

		g = pma_bits_next(r->gfull, r->gfull_sum, g, r->nr_groups);
		VGPU_ASSERT(g != NONE);
		gw = g / 64;
		take = r->gfull[gw] & (~0ull << (g % 64));
		have = cmn_popcount(take);
		/* Keep the lowest groups that are still needed (whichever end is shorter to walk). */
		if (have > want && want <= have - want)
			take = low_bits(take, want);
		else
			for (; have > want; have--)
				take &= ~VGPU_BIT(cmn_fls(take));
		r->gfull[gw] &= ~take;
		r->free_groups -= cmn_popcount(take);
		r->free_frames -= (uint64_t)cmn_popcount(take) * PMA_GROUP_FRAMES;
		gword_changed(r, gw);
		if (a->pin && !a->persist) {
			gbits_for_each_word(take, gw, wi, m)
				GW_ALLOC_PINNED(&r->words[wi], m);
		} else {
			gbits_for_each_word(take, gw, wi, m) {
				struct pma_word *w = &r->words[wi];

				dirty |= w->persist & m;
				w->alloc |= m;
				w->pin = (w->pin & ~m) | (pin & m);
				w->persist = (w->persist & ~m) | (persist & m);
			}
		}
		a->dirty_seen |= dirty;
		for (uint64_t t = take; t; t &= t - 1)
			pages[got++] = (r->first + ((gw * 64 + cmn_ctz(t)) << PMA_GROUP_SHIFT))
				       << PMA_FRAME_SHIFT;
		g = gw * 64 + 64;
	}
	return true;
}

/* Contiguous 2 MiB pages anywhere in @r: the first whole free group (one page, two ctz
 * away) or the first run of them (the run index), as find_contig() finds them. 0, -ENOMEM,
 * or 1 when the run is longer than the index counts (the general path takes it). */
static int alloc_contig_groups(struct pma_region *r, const struct pma_req *q,
			       struct pma_opargs *a, uint64_t *pages)
{
	uint64_t ng = q->count, g, addr;
	bool whole;

	if (ng > PMA_RUN_CAP)
		return 1;
	if (r->free_groups < ng)
		return -ENOMEM;
	g = ng == 1 ? pma_bits_next(r->gfull, r->gfull_sum, 0, r->nr_groups) : pma_runs_find(r, ng);
	if (g == NONE)
		return -ENOMEM;
	whole = ng == 1 ? group_apply(r, g << PMA_GROUP_SHIFT, OP_ALLOC, a)
			: groups_apply(r, g, ng, OP_ALLOC, a);
	VGPU_ASSERT(whole);
	addr = (r->first + (g << PMA_GROUP_SHIFT)) << PMA_FRAME_SHIFT;
	pages_fill(pages, addr, ng, PMA_PAGE_2M);
	return 0;
}

/* Flags of the requests the one-region fast lane takes: no range, region, speed, alignment,
 * order or partial result to honour. */
#define PMA_SIMPLE_FLAGS (PMA_PINNED | PMA_PERSISTENT | PMA_CONTIGUOUS | PMA_DONT_EVICT | \
			  PMA_NO_ZERO)

/* The common requests on a one-region instance, without region ordering and clipping: the
 * same pages as the general path. 0, -ENOMEM, or 1 (not taken: the general path runs). */
static int alloc_simple(struct pma *pma, const struct pma_req *q, struct pma_opargs *a,
			uint64_t *pages)
{
	struct pma_region *r = pma->regions[0];

	if (pma->nr_regions != 1 || (q->flags & ~PMA_SIMPLE_FLAGS) || r->desc.protected_mem)
		return 1;
	if (!(q->flags & PMA_CONTIGUOUS))
		return alloc_64k_fast(r, q, a, pages) || alloc_2m_fast(r, q, a, pages) ? 0 : 1;
	return q->pf == PMA_GROUP_FRAMES ? alloc_contig_groups(r, q, a, pages) : 1;
}

static int alloc_general(struct pma *pma, const struct pma_req *q,
			 const struct pma_alloc_opts *o, uint64_t *pages, size_t *got,
			 uint32_t *result);

/* One locked attempt. 0 with *@got pages, or -ENOMEM (nothing allocated). */
static int alloc_locked(struct pma *pma, const struct pma_req *q, const struct pma_alloc_opts *o,
			uint64_t *pages, size_t *got, uint32_t *result)
{
	struct pma_opargs args = {
		.pin = q->flags & PMA_PINNED,
		.persist = q->flags & PMA_PERSISTENT,
	};
	int ret = alloc_simple(pma, q, &args, pages);

	if (ret > 0)
		return alloc_general(pma, q, o, pages, got, result);
	*got = ret ? 0 : q->count;
	*result = args.dirty_seen ? 0 : PMA_RESULT_IS_ZERO;
	return ret;
}

/* The general path: every region in order, clipped to the request. Kept out of line so the
 * fast lane does not pay for its frame. */
static __attribute__((noinline)) int alloc_general(struct pma *pma, const struct pma_req *q,
						   const struct pma_alloc_opts *o,
						   uint64_t *pages, size_t *got, uint32_t *result)
{
	struct pma_region *rs[PMA_MAX_REGIONS];
	struct pma_opargs args = {
		.pin = q->flags & PMA_PINNED,
		.persist = q->flags & PMA_PERSISTENT,
	};
	unsigned int nr = regions_order(pma, q, o, rs);
	uint64_t need = q->count * q->pf, lo, hi;
	size_t n = 0;

	/* Counters first: a request that cannot fit fails without a scan. */
	if (avail_frames_in(rs, nr) < ((q->flags & PMA_ALLOW_PARTIAL) ? q->pf : need))
		return -ENOMEM;
	if (q->flags & PMA_CONTIGUOUS) {
		for (unsigned int i = 0; i < nr; i++) {
			struct pma_region *r = rs[i];
			uint64_t s;

			if (r->free_frames < need)
				continue;
			req_clip(q, r, &lo, &hi);
			s = find_contig(r, need, q->align, lo, hi, q->flags & PMA_REVERSE);
			if (s == NONE)
				continue;
			range_apply(r, s, need, OP_ALLOC, &args);
			for (size_t p = 0; p < q->count; p++)
				pages[p] = (r->first + s + p * q->pf) << PMA_FRAME_SHIFT;
			*got = q->count;
			*result = args.dirty_seen ? 0 : PMA_RESULT_IS_ZERO;
			return 0;
		}
		return -ENOMEM;
	}
	if (nr == 1 && (alloc_64k_fast(rs[0], q, &args, pages) ||
			alloc_2m_fast(rs[0], q, &args, pages))) {
		*got = q->count;
		*result = args.dirty_seen ? 0 : PMA_RESULT_IS_ZERO;
		return 0;
	}
	/* Discontiguous: find everything first (indexes in @pages), then commit. */
	unsigned int used[PMA_MAX_REGIONS];
	size_t upto[PMA_MAX_REGIONS];
	unsigned int nused = 0;

	for (unsigned int i = 0; i < nr && n < q->count; i++) {
		size_t k;

		req_clip(q, rs[i], &lo, &hi);
		k = find_pages(rs[i], q, q->count - n, lo, hi, pages + n);
		if (k) {
			used[nused] = i;
			upto[nused++] = n + k;
			n += k;
		}
	}
	if (!n || (n < q->count && !(q->flags & PMA_ALLOW_PARTIAL)))
		return -ENOMEM;

	size_t p = 0;

	for (unsigned int u = 0; u < nused; u++) {
		struct pma_region *r = rs[used[u]];

		while (p < upto[u]) {
			size_t run = 1;

			/* Adjacent pages commit as one range (whole groups move as a block). */
			while (p + run < upto[u] && pages[p + run] == pages[p] + run * q->pf)
				run++;
			if (run == 1)
				page_apply(r, pages[p], q->pf, OP_ALLOC, &args);
			else
				range_apply(r, pages[p], run * q->pf, OP_ALLOC, &args);
			for (size_t e = p + run; p < e; p++)
				pages[p] = (r->first + pages[p]) << PMA_FRAME_SHIFT;
		}
	}
	*got = n;
	*result = args.dirty_seen ? 0 : PMA_RESULT_IS_ZERO;
	return 0;
}

/* True while the scrubber has work queued or in hand: waiting for it can free frames.
 * (Frames whose scrub failed stay SCRUBBING with nothing queued: waiting cannot help.) */
static bool scrub_pending(struct pma *pma)
{
	bool busy;

	if (!pma->scrub_thread_running)
		return false;
	pthread_mutex_lock(&pma->wait_lock);
	busy = pma->scrub_q_len || pma->scrub_busy;
	pthread_mutex_unlock(&pma->wait_lock);
	return busy;
}

static int evict_for(struct pma *pma, const struct pma_req *q, const struct pma_alloc_opts *o);

int pma_alloc_pages(struct pma *pma, size_t count, uint64_t page_size,
		    struct pma_alloc_opts *opts, uint64_t *pages_out)
{
	struct pma_req q;
	unsigned int evictions = 0;
	uint32_t result = 0;
	size_t got = 0;
	int ret;

	if (opts) {
		opts->pages_allocated = 0;
		opts->result_flags = 0;
	}
	if (!pma || !pages_out)
		return -EINVAL;
	ret = req_init(pma, &q, count, page_size, opts);
	if (ret)
		return ret;
	for (;;) {
		pma_lock(pma);
		ret = alloc_locked(pma, &q, opts, pages_out, &got, &result);
		if (!ret)
			pma_publish_stats_locked(pma);
		pma_unlock(pma);
		if (ret != -ENOMEM)
			break;
		/* Short of memory: let pending scrubs finish (unless the caller is the kind that
		 * must not wait for them), then try eviction, a bounded number of times. */
		if (scrub_pending(pma) && !(q.flags & PMA_NO_ZERO)) {
			pma_scrub_wait(pma);
			continue;
		}
		if ((q.flags & PMA_DONT_EVICT) || evictions++ >= pma->cfg.evict_retries ||
		    !atomic_load_explicit(&pma->evict_armed, memory_order_relaxed))
			break;
		/* A callback error counts as an attempt and is retried within the budget;
		 * nothing evictable at all ends the allocation. */
		if (evict_for(pma, &q, opts) == -ENOMEM)
			break;
	}
	if (opts) {
		opts->pages_allocated = ret ? 0 : got;
		opts->result_flags = ret ? 0 : result;
	}
	return ret;
}

/* Check [s, s + n) of @r for a fixed allocation: -EEXIST if allocated, -ENOMEM if otherwise
 * unavailable (blacklisted, scrubbing, evicting). */
static int range_claimable(const struct pma_region *r, uint64_t s, uint64_t n)
{
	int ret = 0;

	pma_for_each_word(s, n, wi, m) {
		const struct pma_word *w = &r->words[wi];

		if (w->alloc & m)
			return -EEXIST;
		if ((w->evict | w->scrub | w->black) & m)
			ret = -ENOMEM;
	}
	return ret;
}

/* Region holding all of [frame, frame + n), or NULL. */
static struct pma_region *region_span(struct pma *pma, uint64_t frame, uint64_t n)
{
	struct pma_region *r = pma->nr_regions ? pma->regions[0] : NULL;

	/* Most instances have one region: try it before the search. */
	if (!r || frame < r->first + r->lo || frame >= r->first + r->hi)
		r = pma_region_of(pma, frame);
	if (!r || frame + n > r->first + r->hi || frame + n < frame)
		return NULL;
	return r;
}

int pma_alloc_fixed(struct pma *pma, uint64_t addr, uint64_t size, struct pma_alloc_opts *opts)
{
	uint32_t flags = opts ? opts->flags : 0;
	struct pma_opargs args = { .pin = flags & PMA_PINNED, .persist = flags & PMA_PERSISTENT };
	struct pma_region *r;
	uint64_t s;
	int ret;

	if (opts) {
		opts->pages_allocated = 0;
		opts->result_flags = 0;
	}
	if (!pma || !size || (addr | size) & (PMA_FRAME_SIZE - 1) || (flags & ~PMA_ALL_FLAGS))
		return -EINVAL;
	pma_lock(pma);
	r = region_span(pma, addr >> PMA_FRAME_SHIFT, size >> PMA_FRAME_SHIFT);
	if (!r) {
		pma_unlock(pma);
		return -EINVAL;
	}
	s = (addr >> PMA_FRAME_SHIFT) - r->first;
	ret = range_claimable(r, s, size >> PMA_FRAME_SHIFT);
	if (!ret) {
		range_apply(r, s, size >> PMA_FRAME_SHIFT, OP_ALLOC, &args);
		pma_publish_stats_locked(pma);
	}
	pma_unlock(pma);
	if (opts) {
		opts->pages_allocated = ret ? 0 : 1;
		opts->result_flags = !ret && !args.dirty_seen ? PMA_RESULT_IS_ZERO : 0;
	}
	return ret;
}

/* --- free, pin, unpin ---------------------------------------------------------------------- */

/* Resolve page @addr to its region and bitmap index; NULL if not wholly inside one. */
static struct pma_region *page_locate(struct pma *pma, uint64_t addr, uint64_t pf, uint64_t *idx)
{
	uint64_t f = addr >> PMA_FRAME_SHIFT;
	struct pma_region *r = pma->nr_regions ? pma->regions[0] : NULL;

	/* Most instances have one region: try it before the search. */
	if (!r || f < r->first + r->lo || f + pf > r->first + r->hi)
		r = region_span(pma, f, pf);

	if (r)
		*idx = (addr >> PMA_FRAME_SHIFT) - r->first;
	return r;
}

/* Toggle the alloc bits of the first @n pages; used to prove every page is allocated and
 * listed once (a duplicate finds its bits already clear), then to undo exactly. Adjacent
 * pages are handled as one range. */
static int pages_mark(struct pma *pma, const uint64_t *pages, size_t n, uint64_t pf, bool clear,
		      size_t *done)
{
	uint64_t page_size = pf << PMA_FRAME_SHIFT;

	for (size_t p = 0; p < n;) {
		uint64_t idx, run = 1, len_f;
		struct pma_region *r;

		while (p + run < n && pages[p + run] == pages[p] + run * page_size)
			run++;
		len_f = run * pf;
		r = page_locate(pma, pages[p], len_f, &idx);
		if (!r) {
			/* A run may straddle regions: retry page by page. */
			run = 1;
			len_f = pf;
			r = page_locate(pma, pages[p], pf, &idx);
			if (!r)
				return -EINVAL;
		}
		pma_for_each_word(idx, len_f, wi, m) {
			struct pma_word *w = &r->words[wi];

			if (clear && (w->alloc & m) != m) {
				/* Put back the part of this run already cleared. */
				pma_for_each_word(idx, wi * 64 + cmn_ctz(m) - idx, wj, mj)
					r->words[wj].alloc |= mj;
				return -ENOENT;
			}
			w->alloc = clear ? w->alloc & ~m : w->alloc | m;
		}
		p += run;
		*done = p;
	}
	return 0;
}

/* Read-only check that ascending @pages are all allocated and in regions. */
static int pages_check_sorted(struct pma *pma, const uint64_t *pages, size_t n, uint64_t pf)
{
	uint64_t page_size = pf << PMA_FRAME_SHIFT;

	for (size_t p = 0; p < n;) {
		uint64_t idx, run = 1;
		struct pma_region *r;

		while (p + run < n && pages[p + run] == pages[p] + run * page_size)
			run++;
		r = page_locate(pma, pages[p], run * pf, &idx);
		if (!r) {
			run = 1;
			r = page_locate(pma, pages[p], pf, &idx);
			if (!r)
				return -EINVAL;
		}
		pma_for_each_word(idx, run * pf, wi, m)
			if ((r->words[wi].alloc & m) != m)
				return -ENOENT;
		p += run;
	}
	return 0;
}

/* Validate that @pages are allocated, distinct, in regions; nothing changes. */
static int pages_validate_allocated(struct pma *pma, const uint64_t *pages, size_t count,
				    uint64_t pf)
{
	size_t done = 0, undone, p;
	int ret;

	/* An ascending list cannot name a page twice: one read-only pass is enough. */
	for (p = 1; p < count && pages[p] > pages[p - 1]; p++)
		;
	if (p == count)
		return pages_check_sorted(pma, pages, count, pf);
	ret = pages_mark(pma, pages, count, pf, true, &done);

	pages_mark(pma, pages, done, pf, false, &undone);
	return ret;
}

/* Masks per word (@pf <= 2: frames) or per group word (@pf 32: groups) of ascending @pages of
 * @r into @wv / @mv. The number of words; 0 when the list is not strictly ascending or needs
 * more than PMA_FAST_WORDS words (the general path takes it); -EINVAL if a page is not
 * aligned to its size. */
static inline __attribute__((always_inline)) int
pages_collect_shift(const struct pma_region *r, const uint64_t *pages, size_t count,
		    unsigned int shift, uint64_t pmask, uint64_t page_size, uint64_t *wv,
		    uint64_t *mv)
{
	uint64_t prev = pages[0], any = 0, base = r->first << PMA_FRAME_SHIFT;
	uint64_t cw = ((pages[0] - base) >> (PMA_FRAME_SHIFT + shift)) / 64, cm = 0;
	int nw = 0;

	/* The word being filled stays in registers; it is stored when the next one starts. */
	for (size_t p = 0; p < count; p++) {
		uint64_t i = (pages[p] - base) >> (PMA_FRAME_SHIFT + shift);

		if (p && pages[p] <= prev)
			return 0;
		prev = pages[p];
		any |= pages[p];
		if (i / 64 != cw) {
			if (nw == PMA_FAST_WORDS - 1)
				return 0;
			wv[nw] = cw;
			mv[nw++] = cm;
			cw = i / 64;
			cm = 0;
		}
		cm |= pmask << (i % 64);
	}
	wv[nw] = cw;
	mv[nw++] = cm;
	return any & (page_size - 1) ? -EINVAL : nw;
}

static int pages_collect(const struct pma_region *r, const uint64_t *pages, size_t count,
			 uint64_t pf, uint64_t *wv, uint64_t *mv)
{
	uint64_t page_size = pf << PMA_FRAME_SHIFT;

	/* Constant shifts for the two common sizes. */
	if (pf == PMA_GROUP_FRAMES)
		return pages_collect_shift(r, pages, count, PMA_GROUP_SHIFT, 1, page_size, wv, mv);
	if (pf == 1)
		return pages_collect_shift(r, pages, count, 0, 1, page_size, wv, mv);
	return pages_collect_shift(r, pages, count, 0, cmn_mask(0, (unsigned int)pf), page_size,
				   wv, mv);
}

/* Free the 2 MiB pages given as group bits per group word. Every page is allocated with no
 * attribute (checked), so each becomes a whole free group: gfull and the counters move by
 * group words, and gpart does not move (a group wholly allocated or wholly free is never
 * partial). */
static void groups_free_words(struct pma_region *r, const uint64_t *gwv, const uint64_t *gbv,
			      int nw)
{
	for (int k = 0; k < nw; k++) {
		unsigned int ng = cmn_popcount(gbv[k]);

		gbits_for_each_word(gbv[k], gwv[k], wi, m) {
			struct pma_word *w = &r->words[wi];

			w->alloc &= ~m;
			w->pin &= ~m;
			w->persist |= m;	/* free and dirty until scrubbed */
		}
		r->gfull[gwv[k]] |= gbv[k];
		r->free_groups += ng;
		r->free_frames += (uint64_t)ng * PMA_GROUP_FRAMES;
		gword_changed(r, gwv[k]);
	}
}

/* Free the frames @mv[k] of ascending words @wv[k] (checked allocated), without scrub. The
 * group bits of all the words under one word of group bits are re-derived in registers and
 * stored once, with one summary update, one run-index update and one tree mark. */
static void small_free_words(struct pma_region *r, const uint64_t *wv, const uint64_t *mv,
			     int nw)
{
	uint64_t freed = 0;

	for (int k = 0; k < nw;) {
		uint64_t gw = wv[k] / 32, of = r->gfull[gw], op = r->gpart[gw], nf = of, np = op;

		for (; k < nw && wv[k] / 32 == gw; k++) {
			struct pma_word *w = &r->words[wv[k]];
			uint64_t attrs = w->evict | w->scrub | w->black, a0 = ~(w->alloc | attrs);
			uint64_t a1 = a0 | (mv[k] & ~attrs), sh = (wv[k] % 32) * 2;
			uint32_t lo = (uint32_t)a1, hi = (uint32_t)(a1 >> 32);

			w->alloc &= ~mv[k];
			w->pin &= ~mv[k];
			w->persist |= mv[k];	/* free and dirty until scrubbed */
			freed += cmn_popcount(a1 & ~a0);
			nf = (nf & ~(3ull << sh)) |
			     ((uint64_t)(lo == UINT32_MAX) | (uint64_t)(hi == UINT32_MAX) << 1) << sh;
			np = (np & ~(3ull << sh)) |
			     ((uint64_t)(lo && lo != UINT32_MAX) |
			      (uint64_t)(hi && hi != UINT32_MAX) << 1) << sh;
		}
		if (np != op) {
			r->gpart[gw] = np;
			pma_sum_update(r->gpart_sum, r->gpart, gw);
		}
		if (nf != of) {
			r->gfull[gw] = nf;
			r->free_groups += (uint64_t)cmn_popcount(nf) - cmn_popcount(of);
			pma_sum_update(r->gfull_sum, r->gfull, gw);
			pma_group_mark(r, (uint32_t)gw);
		}
		pma_tlayer_mark(&r->ftree.layer[0], (uint32_t)gw);
	}
	r->free_frames += freed;
}

/* True if @pages are one run of consecutive, aligned pages of @page_size. */
static bool pages_consecutive(const uint64_t *pages, size_t count, uint64_t page_size)
{
	if (pages[0] & (page_size - 1))
		return false;
	for (size_t p = 1; p < count; p++)
		if (pages[p] != pages[0] + p * page_size)
			return false;
	return true;
}

/* Free @ng whole groups from bitmap index @s, checked allocated, as one whole-group change
 * (a run of 2 MiB pages, as a 256 MiB request usually gets). 0, -ENOENT, or 1 when a frame
 * carries an attribute (the general path takes it). */
static int groups_free_run(struct pma_region *r, uint64_t s, size_t ng)
{
	int ret = groups_free_check(r, s >> PMA_GROUP_SHIFT, ng);

	if (!ret)
		groups_free_checked(r, s >> PMA_GROUP_SHIFT, ng);
	return ret;
}

/* The common free: an ascending list of pages of at most 2 MiB, all inside the first region,
 * no scrub; checked, then freed a word (small pages) or a group word (2 MiB) at a time.
 * 1 if not applicable (the general path runs), else 0 or -ENOENT. */
static int free_fast_locked(struct pma *pma, const uint64_t *pages, size_t count, uint64_t pf,
			    bool scrub)
{
	struct pma_region *r = pma->nr_regions ? pma->regions[0] : NULL;
	uint64_t f0 = pages[0] >> PMA_FRAME_SHIFT, fl = pages[count - 1] >> PMA_FRAME_SHIFT;
	uint64_t wv[PMA_FAST_WORDS], mv[PMA_FAST_WORDS];
	bool attrs = false;
	int nw;

	if (scrub || pf > PMA_GROUP_FRAMES || !r || f0 < r->first + r->lo ||
	    fl + pf > r->first + r->hi)
		return 1;
	if (pf == PMA_GROUP_FRAMES && pages_consecutive(pages, count, pf << PMA_FRAME_SHIFT))
		return groups_free_run(r, f0 - r->first, count);
	/* Ascending (checked) proves the pages distinct and, pages being aligned to their size
	 * in a region aligned to 512 MiB, never straddling a word; first and last inside the
	 * region then put every page there. */
	nw = pages_collect(r, pages, count, pf, wv, mv);
	if (nw <= 0)
		return nw ? nw : 1;
	if (pf == PMA_GROUP_FRAMES) {
		for (int k = 0; k < nw; k++)
			gbits_for_each_word(mv[k], wv[k], wi, m) {
				const struct pma_word *w = &r->words[wi];

				if ((w->alloc & m) != m)
					return -ENOENT;
				attrs |= !!((w->evict | w->scrub | w->black) & m);
			}
		if (attrs)
			return 1;	/* such groups do not become whole: the general path */
		groups_free_words(r, wv, mv, nw);
		return 0;
	}
	for (int k = 0; k < nw; k++)
		if ((r->words[wv[k]].alloc & mv[k]) != mv[k])
			return -ENOENT;
	small_free_words(r, wv, mv, nw);
	return 0;
}

/* The general free: any regions, scrub, any order (duplicates detected). Out of line so the
 * fast path does not pay for its frame. */
static __attribute__((noinline)) int free_general(struct pma *pma, const uint64_t *pages,
						  size_t count, uint64_t page_size, bool scrub)
{
	uint64_t pf = page_size >> PMA_FRAME_SHIFT;
	struct pma_opargs args = { .scrub = scrub };
	int ret;

	for (size_t p = 0; p < count; p++)
		if (pages[p] & (page_size - 1))
			return -EINVAL;
	ret = pages_validate_allocated(pma, pages, count, pf);
	if (ret)
		return ret;
	for (size_t p = 0; p < count;) {
		uint64_t idx = 0, run = 1;
		struct pma_region *r = page_locate(pma, pages[p], pf, &idx);

		/* Consecutive pages free as one range. */
		while (p + run < count && pages[p + run] == pages[p] + run * page_size &&
		       pages[p + run] >> PMA_FRAME_SHIFT < r->first + r->hi)
			run++;
		page_apply(r, idx, run * pf, OP_FREE, &args);
		if (args.scrub)
			pma_scrub_submit(pma, pages[p], run * page_size);
		p += run;
	}
	pma_publish_stats_locked(pma);
	return 0;
}

static int free_locked(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		       unsigned int flags)
{
	bool scrub = pma->cfg.scrub_on_free && !(flags & PMA_FREE_SKIP_SCRUB);
	int ret = free_fast_locked(pma, pages, count, page_size >> PMA_FRAME_SHIFT, scrub);

	if (ret > 0)
		return free_general(pma, pages, count, page_size, scrub);
	if (!ret)
		pma_publish_stats_locked(pma);
	return ret;
}

int pma_free_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		   unsigned int flags)
{
	int ret;

	if (!pma || !pages || !count || !page_size_valid(page_size) || (flags & ~PMA_FREE_SKIP_SCRUB))
		return -EINVAL;
	pma_lock(pma);
	ret = free_locked(pma, pages, count, page_size, flags);
	pma_unlock(pma);
	return ret;
}

/* The general range free: every frame checked allocated, then one state change (frames
 * with attributes, scrub-on-free, partial groups). Out of line: the common frees are whole
 * groups. */
static __attribute__((noinline)) int free_range_general(struct pma *pma, struct pma_region *r,
							uint64_t s, uint64_t n, bool scrub)
{
	struct pma_opargs args = { .scrub = scrub };

	pma_for_each_word(s, n, wi, m)
		if ((r->words[wi].alloc & m) != m)
			return -ENOENT;
	range_apply(r, s, n, OP_FREE, &args);
	if (scrub)
		pma_scrub_submit(pma, (r->first + s) << PMA_FRAME_SHIFT, n << PMA_FRAME_SHIFT);
	return 0;
}

int pma_free_range(struct pma *pma, uint64_t addr, uint64_t size, unsigned int flags)
{
	uint64_t n = size >> PMA_FRAME_SHIFT, s;
	struct pma_opargs args = { 0 };
	struct pma_region *r;
	int ret;

	if (!pma || !size || (addr | size) & (PMA_FRAME_SIZE - 1) || (flags & ~PMA_FREE_SKIP_SCRUB))
		return -EINVAL;
	pma_lock(pma);
	/* One state change for the whole range, once every frame is known allocated. */
	r = region_span(pma, addr >> PMA_FRAME_SHIFT, n);
	if (!r) {
		pma_unlock(pma);
		return -EINVAL;
	}
	s = (addr >> PMA_FRAME_SHIFT) - r->first;
	args.scrub = pma->cfg.scrub_on_free && !(flags & PMA_FREE_SKIP_SCRUB);
	/* One whole group, plainly allocated: group_apply() checks and frees it. Several whole
	 * groups without scrub: checked and freed as a block, one pass each. Anything else (or
	 * a frame with an attribute): the general path, which also says what is wrong. */
	if (n == PMA_GROUP_FRAMES && !(s % PMA_GROUP_FRAMES) && group_apply(r, s, OP_FREE, &args))
		ret = 0;
	else if (!args.scrub && !(s % PMA_GROUP_FRAMES) && !(n % PMA_GROUP_FRAMES) &&
		 n > PMA_GROUP_FRAMES &&
		 (ret = groups_free_check(r, s >> PMA_GROUP_SHIFT, n >> PMA_GROUP_SHIFT)) <= 0) {
		if (!ret)
			groups_free_checked(r, s >> PMA_GROUP_SHIFT, n >> PMA_GROUP_SHIFT);
	} else {
		ret = free_range_general(pma, r, s, n, args.scrub);
	}
	if (!ret)
		pma_publish_stats_locked(pma);
	pma_unlock(pma);
	return ret;
}

/* Check every frame of @pages for a pin transition: -EBUSY if evicting, -EPERM if not in
 * the state the transition starts from, -ENOENT if free. */
static int pin_check(struct pma *pma, const uint64_t *pages, size_t count, uint64_t pf, bool pin)
{
	int ret = 0;

	for (size_t p = 0; p < count; p++) {
		uint64_t idx = 0;
		struct pma_region *r = page_locate(pma, pages[p], pf, &idx);

		if (!r)
			return -EINVAL;
		pma_for_each_word(idx, pf, wi, m) {
			const struct pma_word *w = &r->words[wi];

			if (w->evict & m)
				return -EBUSY;
			if ((w->alloc & m) != m)
				ret = ret ? ret : -ENOENT;
			else if (pin ? (w->pin & m) : (~w->pin & m))
				ret = ret ? ret : -EPERM;
		}
	}
	return ret;
}

static int pin_change(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		      bool pin)
{
	uint64_t pf = page_size >> PMA_FRAME_SHIFT;
	struct pma_opargs args = { 0 };
	int ret;

	if (!pma || !pages || !count || !page_size_valid(page_size))
		return -EINVAL;
	for (size_t p = 0; p < count; p++)
		if (pages[p] & (page_size - 1))
			return -EINVAL;
	pma_lock(pma);
	ret = pin_check(pma, pages, count, pf, pin);
	for (size_t p = 0; !ret && p < count; p++) {
		uint64_t idx = 0;
		struct pma_region *r = page_locate(pma, pages[p], pf, &idx);

		range_apply(r, idx, pf, pin ? OP_PIN : OP_UNPIN, &args);
	}
	pma_unlock(pma);
	return ret;
}

int pma_pin_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size)
{
	return pin_change(pma, pages, count, page_size, true);
}

int pma_unpin_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size)
{
	return pin_change(pma, pages, count, page_size, false);
}

/* --- scrub completion ------------------------------------------------------------------- */

int pma_scrub_complete_locked(struct pma *pma, uint64_t addr, uint64_t size)
{
	struct pma_opargs args = { 0 };
	struct pma_region *r = region_span(pma, addr >> PMA_FRAME_SHIFT, size >> PMA_FRAME_SHIFT);

	if (!r)
		return -EINVAL;
	range_apply(r, (addr >> PMA_FRAME_SHIFT) - r->first, size >> PMA_FRAME_SHIFT, OP_SCRUBBED,
		    &args);
	pma_publish_stats_locked(pma);
	return 0;
}

int pma_scrub_complete(struct pma *pma, uint64_t addr, uint64_t size)
{
	int ret;

	if (!pma || !size || (addr | size) & (PMA_FRAME_SIZE - 1))
		return -EINVAL;
	pma_lock(pma);
	ret = pma_scrub_complete_locked(pma, addr, size);
	pma_unlock(pma);
	return ret;
}

/* --- eviction ------------------------------------------------------------------------------ */

int pma_evict_register(struct pma *pma, const struct pma_evict_ops *ops)
{
	int ret = 0;

	if (!pma || !ops || !ops->evict_range || !ops->evict_pages)
		return -EINVAL;
	pthread_mutex_lock(&pma->wait_lock);
	if (pma->evict_registered)
		ret = -EBUSY;
	else {
		pma->evict = *ops;
		pma->evict_registered = true;
		atomic_store_explicit(&pma->evict_armed, true, memory_order_relaxed);
	}
	pthread_mutex_unlock(&pma->wait_lock);
	return ret;
}

void pma_evict_unregister(struct pma *pma)
{
	pthread_mutex_lock(&pma->wait_lock);
	pma->evict_registered = false;
	atomic_store_explicit(&pma->evict_armed, false, memory_order_relaxed);
	while (pma->evictions_in_flight)
		pthread_cond_wait(&pma->wait_cond, &pma->wait_lock);
	memset(&pma->evict, 0, sizeof(pma->evict));
	pthread_mutex_unlock(&pma->wait_lock);
}

/* Frames that are free, or allocated unpinned and otherwise idle: what eviction can yield. */
static inline uint64_t word_evictable(const struct pma_word *w)
{
	return pma_word_avail(w) | (w->alloc & ~w->pin & ~w->evict & ~w->scrub & ~w->black);
}

static bool span_evictable(const struct pma_region *r, uint64_t s, uint64_t n)
{
	pma_for_each_word(s, n, wi, m)
		if ((word_evictable(&r->words[wi]) & m) != m)
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

static int evict_for(struct pma *pma, const struct pma_req *q, const struct pma_alloc_opts *o)
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
	pthread_mutex_lock(&pma->wait_lock);
	if (!pma->evict_registered) {
		pthread_mutex_unlock(&pma->wait_lock);
		ret = -ENOMEM;
		goto out;
	}
	ops = pma->evict;
	pma->evictions_in_flight++;
	pthread_mutex_unlock(&pma->wait_lock);

	pma_lock(pma);
	unsigned int nr = regions_order(pma, q, o, rs);
	for (unsigned int i = 0; i < nr && got < want; i++) {
		size_t k;

		req_clip(q, rs[i], &lo, &hi);
		k = evict_pick(rs[i], n, contig ? q->align : q->pf, lo, hi, want - got, spans + got);
		for (size_t j = got; j < got + k; j++)
			owner[j] = rs[i];
		got += k;
	}
	/* EVICTING keeps the spans from other allocators and from pinning while unlocked. */
	for (size_t j = 0; j < got; j++) {
		range_apply(owner[j], spans[j], n, OP_EVICT_SET, &args);
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
		range_apply(owner[j], (spans[j] >> PMA_FRAME_SHIFT) - owner[j]->first, n,
			    OP_EVICT_CLR, &args);
	pma_publish_stats_locked(pma);
	pma_unlock(pma);

	pthread_mutex_lock(&pma->wait_lock);
	pma->evictions_in_flight--;
	pthread_cond_broadcast(&pma->wait_cond);
	pthread_mutex_unlock(&pma->wait_lock);
	if (ret)
		cmn_dbg("pma: eviction of %zu span(s) failed: %s", got, ret == -ENOMEM ?
			 "nothing evictable" : "callback error");
out:
	free(spans);
	free(owner);
	return ret;
}

/* --- import ------------------------------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
	const struct pma_range *x = a, *y = b;

	return x->base < y->base ? -1 : x->base > y->base;
}

int pma_import(struct pma *pma, const struct pma_range *ranges, size_t nr)
{
	struct pma_range *sorted;
	int ret = 0;

	if (!pma || (nr && !ranges))
		return -EINVAL;
	if (!nr)
		return 0;
	sorted = malloc(nr * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	memcpy(sorted, ranges, nr * sizeof(*sorted));
	qsort(sorted, nr, sizeof(*sorted), range_cmp);
	for (size_t i = 0; i < nr && !ret; i++) {
		const struct pma_range *x = &sorted[i];
		uint32_t st = x->state & PMA_STATE_MASK;

		if (!x->size || (x->base | x->size) & (PMA_FRAME_SIZE - 1) ||
		    (st != PMA_STATE_PIN && st != PMA_STATE_UNPIN) ||
		    (x->state & ~(PMA_STATE_MASK | PMA_ATTR_PERSISTENT)))
			ret = -EINVAL;
		else if (i && sorted[i - 1].base + sorted[i - 1].size > x->base)
			ret = -EEXIST;
	}
	pma_lock(pma);
	for (size_t i = 0; i < nr && !ret; i++) {
		struct pma_region *r = region_span(pma, sorted[i].base >> PMA_FRAME_SHIFT,
						   sorted[i].size >> PMA_FRAME_SHIFT);

		ret = r ? range_claimable(r, (sorted[i].base >> PMA_FRAME_SHIFT) - r->first,
					  sorted[i].size >> PMA_FRAME_SHIFT)
			: -EINVAL;
	}
	for (size_t i = 0; i < nr && !ret; i++) {
		struct pma_opargs args = {
			.pin = (sorted[i].state & PMA_STATE_MASK) == PMA_STATE_PIN,
			.persist = sorted[i].state & PMA_ATTR_PERSISTENT,
		};
		struct pma_region *r = region_span(pma, sorted[i].base >> PMA_FRAME_SHIFT,
						   sorted[i].size >> PMA_FRAME_SHIFT);

		range_apply(r, (sorted[i].base >> PMA_FRAME_SHIFT) - r->first,
			    sorted[i].size >> PMA_FRAME_SHIFT, OP_ALLOC, &args);
	}
	if (!ret)
		pma_publish_stats_locked(pma);
	pma_unlock(pma);
	free(sorted);
	return ret;
}
