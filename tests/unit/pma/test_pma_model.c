// SPDX-License-Identifier: MIT
/* pma: randomized model-based test. Random operations (alloc with random flags, sizes,
 * ranges and alignments; fixed alloc; free by pages and by range; pin; unpin; blacklist;
 * scrub completion; malformed requests) run against the allocator and against a plain
 * per-frame reference model. After every operation: the return code, the returned pages,
 * IS_ZERO, pma_check(), every statistic and the export list must agree with the model;
 * every 64 operations the whole frame state is compared through pma_query().
 *
 * Placement is not predicted: the model checks that returned pages are legal (aligned, in
 * an eligible region and range, on allocatable frames, region preference respected) and
 * that a request fails exactly when no legal placement exists.
 *
 * PMA_MODEL_SEED and PMA_MODEL_OPS override the seed and the number of operations per
 * mode; the seed is printed so a failure reproduces. */
#include <unistd.h>

#include "common/log.h"
#include "pma_test.h"

#define NOALT 1

static const struct tp_region model_regions[] = {
	{ 0, 16 * MiB, 10, false },
	{ 64 * MiB, 8 * MiB + 3 * FR, 20, false },	/* ends in a partial 2 MiB group */
	{ 128 * MiB, 4 * MiB, 5, true },
	{ 256 * MiB, 12 * MiB, 15, false },
};
#define NR_REGIONS VGPU_ARRAY_SIZE(model_regions)

struct mframe {
	uint8_t state;		/* PMA_STATE_* */
	bool persist, scrubbing, black, clean;
};

struct model {
	struct pma *pma;
	bool scrub;		/* scrub-on-free with a scrubber that always fails */
	struct tp_view v;	/* regions and, in v.st, the model's frames as pma_query words */
	struct mframe *f;
	unsigned int nr_black;
	uint64_t seed0, seed, op;	/* seed0: the seed the run started from */
	char desc[256];
};

static int failing_scrub(void *ctx, uint64_t addr, uint64_t size)
{
	(void)ctx;
	(void)addr;
	(void)size;
	return -EIO;
}

/* Fail with the seed, the operation number and what it was, so the run reproduces. */
static void __attribute__((format(printf, 2, 3))) mfail(const struct model *m, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fail_msg("seed 0x%llx op %llu [%s]: %s", (unsigned long long)m->seed0,
		 (unsigned long long)m->op, m->desc, msg);
}
#define MFAIL(m, ...) mfail((m), __VA_ARGS__)

/* ---- the model ----------------------------------------------------------------------- */

static long frame_index(const struct model *m, uint64_t addr)
{
	int r = tp_view_region(&m->v, addr);

	return r < 0 ? -1 : (long)(m->v.first[r] + (addr - m->v.reg[r].base) / FR);
}

static uint32_t mword(const struct mframe *f)
{
	return f->state | (f->persist ? PMA_ATTR_PERSISTENT : 0) |
	       (f->scrubbing ? PMA_ATTR_SCRUBBING : 0) | (f->black ? PMA_ATTR_BLACKLIST : 0);
}

static void model_sync_view(struct model *m)
{
	for (size_t i = 0; i < m->v.nframes; i++)
		m->v.st[i] = mword(&m->f[i]);
}

/* [addr, addr + size) lies inside one region. */
static bool in_one_region(const struct model *m, uint64_t addr, uint64_t size)
{
	int r = tp_view_region(&m->v, addr);

	return r >= 0 && size && addr + size > addr &&
	       addr + size <= m->v.reg[r].base + m->v.reg[r].size;
}

static void model_alloc(struct model *m, uint64_t addr, uint64_t size, uint32_t flags)
{
	for (uint64_t a = addr; a < addr + size; a += FR) {
		struct mframe *f = &m->f[frame_index(m, a)];

		f->state = (flags & PMA_PINNED) ? PMA_STATE_PIN : PMA_STATE_UNPIN;
		f->persist = flags & PMA_PERSISTENT;
		f->clean = false;	/* the owner may write it */
	}
}

static void model_free(struct model *m, uint64_t addr, uint64_t size, unsigned int flags)
{
	for (uint64_t a = addr; a < addr + size; a += FR) {
		struct mframe *f = &m->f[frame_index(m, a)];

		f->state = PMA_STATE_FREE;
		f->persist = false;
		f->scrubbing = m->scrub && !(flags & PMA_FREE_SKIP_SCRUB) && !f->black;
		f->clean = false;
	}
}

/* ---- comparing ------------------------------------------------------------------------- */

static void compare_stats(struct model *m)
{
	struct pma_stats got, want;

	model_sync_view(m);
	tp_view_stats(&m->v, &want);
	pma_get_stats(m->pma, &got);
#define CMP(field)                                                                          \
	if (got.field != want.field)                                                        \
		MFAIL(m, "stats." #field " is 0x%llx, model says 0x%llx",                    \
		      (unsigned long long)got.field, (unsigned long long)want.field)
	CMP(total_bytes);
	CMP(free_bytes);
	CMP(free_2m_pages);
	CMP(largest_free_bytes);
	CMP(scrubbing_bytes);
	CMP(blacklisted_bytes);
#undef CMP
	if (pma_free_bytes(m->pma) != want.free_bytes)
		MFAIL(m, "pma_free_bytes() disagrees with the model");
	if (pma_largest_free(m->pma) != want.largest_free_bytes)
		MFAIL(m, "pma_largest_free() disagrees with the model");
}

/* The export list the model predicts: maximal runs of equal (state | PERSISTENT) over
 * allocated frames, per region, ascending. */
static void compare_export(struct model *m)
{
	struct pma_range *got;
	size_t n, k = 0;

	tp_export_all(m->pma, &got, &n);
	for (unsigned int r = 0; r < m->v.nr_regions; r++) {
		uint64_t frames = m->v.reg[r].size / FR;

		for (uint64_t i = 0; i < frames;) {
			struct mframe *f = &m->f[m->v.first[r] + i];
			uint32_t st = f->state | (f->persist ? PMA_ATTR_PERSISTENT : 0);
			uint64_t j = i + 1;

			if (f->state == PMA_STATE_FREE) {
				i++;
				continue;
			}
			while (j < frames) {
				struct mframe *g = &m->f[m->v.first[r] + j];

				if (g->state != f->state || g->persist != f->persist)
					break;
				j++;
			}
			uint64_t base = m->v.reg[r].base + i * FR;

			if (k >= n || got[k].base != base || got[k].size != (j - i) * FR ||
			    got[k].state != st)
				MFAIL(m, "export entry %zu: got [0x%llx +0x%llx state 0x%x], model "
				      "[0x%llx +0x%llx state 0x%x]", k,
				      k < n ? (unsigned long long)got[k].base : 0ull,
				      k < n ? (unsigned long long)got[k].size : 0ull,
				      k < n ? got[k].state : 0u, (unsigned long long)base,
				      (unsigned long long)((j - i) * FR), st);
			k++;
			i = j;
		}
	}
	if (k != n)
		MFAIL(m, "export has %zu entries, model %zu", n, k);
	free(got);
}

static void compare_frames(struct model *m)
{
	for (unsigned int r = 0; r < m->v.nr_regions; r++)
		for (uint64_t i = 0; i < m->v.reg[r].size / FR; i++) {
			uint64_t a = m->v.reg[r].base + i * FR;
			uint32_t got = 0xdead, want = mword(&m->f[m->v.first[r] + i]);

			if (pma_query(m->pma, a, &got) || got != want)
				MFAIL(m, "frame 0x%llx reads 0x%x, model 0x%x", (unsigned long long)a,
				      got, want);
		}
}

static void check_ret(struct model *m, int got, int want, int alt)
{
	if (got != want && (alt == NOALT || got != alt))
		MFAIL(m, "returned %d, model says %d%s", got, want, alt == NOALT ? "" : " (or alt)");
}

/* ---- operations -------------------------------------------------------------------------- */

static uint64_t rnd(struct model *m, uint64_t n)
{
	return tp_randn(&m->seed, n);
}

static bool chance(struct model *m, unsigned int percent)
{
	return rnd(m, 100) < percent;
}

/* A random allocated frame's address, or UINT64_MAX if none. */
static uint64_t pick_allocated(struct model *m)
{
	size_t start = rnd(m, m->v.nframes);

	for (size_t k = 0; k < m->v.nframes; k++) {
		size_t i = (start + k) % m->v.nframes;

		if (m->f[i].state != PMA_STATE_FREE) {
			for (unsigned int r = m->v.nr_regions; r-- > 0;)
				if (i >= m->v.first[r])
					return m->v.reg[r].base + (i - m->v.first[r]) * FR;
		}
	}
	return UINT64_MAX;
}

static uint64_t pick_page_size(struct model *m)
{
	static const uint64_t sizes[] = { K64, K64, K128, M2 };

	return sizes[rnd(m, 4)];
}

/* What the contract says a request returns; *alt is a second acceptable code. */
static int alloc_expect(struct model *m, size_t count, uint64_t page, const struct pma_alloc_opts *o,
			int *alt, size_t *npages)
{
	uint32_t fl = o->flags;
	uint32_t known = PMA_DONT_EVICT | PMA_PINNED | PMA_MIN_SPEED | PMA_RANGE | PMA_REGION_ID |
			 PMA_PREFER_SLOWEST | PMA_CONTIGUOUS | PMA_PERSISTENT | PMA_PROTECTED |
			 PMA_FORCE_ALIGNMENT | PMA_NO_ZERO | PMA_ALLOW_PARTIAL | PMA_REVERSE;

	*alt = NOALT;
	if (!count || (page != K64 && page != K128 && page != M2 && page != M512) || (fl & ~known))
		return -EINVAL;
	if ((fl & PMA_CONTIGUOUS) && (fl & PMA_ALLOW_PARTIAL))
		return -EINVAL;
	if ((fl & PMA_RANGE) && (o->range_begin >= o->range_end ||
				 !cmn_is_aligned(o->range_begin, page) ||
				 !cmn_is_aligned(o->range_end, page)))
		return -EINVAL;
	if ((fl & PMA_REGION_ID) && o->region_id >= m->v.nr_regions)
		return -EINVAL;
	if ((fl & PMA_FORCE_ALIGNMENT) &&
	    (!cmn_is_pow2(o->alignment) || o->alignment < FR ||
	     (!(fl & PMA_CONTIGUOUS) && o->alignment > page)))
		return -EINVAL;
	if ((fl & PMA_REGION_ID) &&
	    m->v.reg[o->region_id].protected_mem != !!(fl & PMA_PROTECTED))
		*alt = -EINVAL;		/* a region of the other kind: no memory, or malformed */
	model_sync_view(m);
	if (fl & PMA_CONTIGUOUS) {
		*npages = count;
		return tp_contig_fits(&m->v, o, page, count) ? 0 : -ENOMEM;
	}
	uint64_t avail = tp_pages_avail(&m->v, o, page);

	if (avail >= count) {
		*npages = count;
		return 0;
	}
	if ((fl & PMA_ALLOW_PARTIAL) && avail) {
		*npages = avail;
		return 0;
	}
	return -ENOMEM;
}

static void random_range(struct model *m, uint64_t page, struct pma_alloc_opts *o)
{
	const struct pma_region_desc *d = &m->v.reg[rnd(m, m->v.nr_regions)];
	uint64_t pages = cmn_max(d->size / page, 1);

	o->range_begin = d->base + rnd(m, pages) * page;
	o->range_end = o->range_begin + (1 + rnd(m, pages)) * page;
	if (chance(m, 10))		/* reach over the gap into the next region */
		o->range_end += 256 * MiB;
}

static void op_alloc(struct model *m)
{
	struct pma_alloc_opts o = { 0 };
	uint64_t page = pick_page_size(m), pages[80];
	size_t count = page == K64 ? 1 + rnd(m, chance(m, 20) ? 64 : 16) :
		       page == K128 ? 1 + rnd(m, 8) : 1 + rnd(m, 4);
	size_t npages = 0;
	int want, alt, ret;

	if (chance(m, 50)) o.flags |= PMA_PINNED;
	if (chance(m, 40)) o.flags |= PMA_CONTIGUOUS;
	if (chance(m, 25)) { o.flags |= PMA_RANGE; random_range(m, page, &o); }
	if (chance(m, 10)) { o.flags |= PMA_REGION_ID; o.region_id = (uint32_t)rnd(m, NR_REGIONS); }
	if (chance(m, 10)) { o.flags |= PMA_MIN_SPEED; o.min_speed = (uint32_t)rnd(m, 6) * 5; }
	if (chance(m, 15)) o.flags |= PMA_PREFER_SLOWEST;
	if (chance(m, 15)) o.flags |= PMA_PERSISTENT;
	if (chance(m, 10)) o.flags |= PMA_PROTECTED;
	if (chance(m, 20)) o.flags |= PMA_REVERSE;
	if (chance(m, 10)) o.flags |= PMA_NO_ZERO;
	if (chance(m, 30)) o.flags |= PMA_DONT_EVICT;
	if (!(o.flags & PMA_CONTIGUOUS) && chance(m, 15))
		o.flags |= PMA_ALLOW_PARTIAL;
	if (chance(m, 12)) {
		o.flags |= PMA_FORCE_ALIGNMENT;
		o.alignment = (o.flags & PMA_CONTIGUOUS) ? page << rnd(m, 6) : page >> rnd(m, 2);
		if (o.alignment < FR)
			o.alignment = FR;
	}
	/* one malformation now and then */
	if (chance(m, 4)) {
		switch (rnd(m, 8)) {
		case 0: count = 0; break;
		case 1: page = page * 3; break;
		case 2: o.flags |= 1u << (14 + rnd(m, 18)); break;
		case 3: o.flags |= PMA_RANGE; o.range_begin = page / 2; o.range_end = 8 * page; break;
		case 4: o.flags |= PMA_RANGE; o.range_begin = o.range_end = 2 * page; break;
		case 5: o.flags |= PMA_FORCE_ALIGNMENT; o.alignment = 3 * FR; break;
		case 6: o.flags |= PMA_REGION_ID; o.region_id = NR_REGIONS + (uint32_t)rnd(m, 40); break;
		default: o.flags |= PMA_CONTIGUOUS | PMA_ALLOW_PARTIAL; break;
		}
	}
	snprintf(m->desc, sizeof(m->desc), "alloc %zu x 0x%llx flags 0x%x range [0x%llx,0x%llx) "
		 "region %u speed %u align 0x%llx", count, (unsigned long long)page, o.flags,
		 (unsigned long long)o.range_begin, (unsigned long long)o.range_end, o.region_id,
		 o.min_speed, (unsigned long long)o.alignment);
	want = alloc_expect(m, count, page, &o, &alt, &npages);
	o.pages_allocated = 777;
	ret = pma_alloc_pages(m->pma, count, page, &o, pages);
	check_ret(m, ret, want, alt);
	if (ret) {
		if (o.pages_allocated != 0)
			MFAIL(m, "failed call left pages_allocated = %zu", o.pages_allocated);
		return;
	}
	if (o.pages_allocated != npages)
		MFAIL(m, "pages_allocated %zu, model says %zu", o.pages_allocated, npages);
	tp_check_pages(&m->v, &o, page, pages, npages);
	tp_check_priority(&m->v, &o, page, count, pages, npages);
	bool clean = true;

	for (size_t i = 0; i < npages; i++)
		for (uint64_t a = pages[i]; a < pages[i] + page; a += FR)
			clean &= m->f[frame_index(m, a)].clean;
	if (!!(o.result_flags & PMA_RESULT_IS_ZERO) != clean)
		MFAIL(m, "IS_ZERO is %d but the pages are %s", !!(o.result_flags & PMA_RESULT_IS_ZERO),
		      clean ? "all known zero" : "not all known zero");
	for (size_t i = 0; i < npages; i++)
		model_alloc(m, pages[i], page, o.flags);
}

static void op_fixed(struct model *m)
{
	const struct pma_region_desc *d = &m->v.reg[rnd(m, m->v.nr_regions)];
	uint64_t addr = d->base + rnd(m, d->size / FR) * FR, size = (1 + rnd(m, 32)) * FR;
	struct pma_alloc_opts o = { .flags = (chance(m, 50) ? PMA_PINNED : 0) |
					     (chance(m, 20) ? PMA_PERSISTENT : 0) };
	int want = 0, alt = NOALT, ret;

	if (chance(m, 3))
		addr += 4096;
	snprintf(m->desc, sizeof(m->desc), "fixed [0x%llx +0x%llx) flags 0x%x",
		 (unsigned long long)addr, (unsigned long long)size, o.flags);
	if (!cmn_is_aligned(addr, FR) || !in_one_region(m, addr, size)) {
		want = -EINVAL;
	} else {
		bool taken = false, unavail = false;

		for (uint64_t a = addr; a < addr + size; a += FR) {
			struct mframe *f = &m->f[frame_index(m, a)];

			taken |= f->state != PMA_STATE_FREE;
			unavail |= f->black || f->scrubbing;
		}
		if (taken && unavail) {
			want = -EEXIST;
			alt = -ENOMEM;
		} else if (taken) {
			want = -EEXIST;
		} else if (unavail) {
			want = -ENOMEM;
		}
	}
	ret = pma_alloc_fixed(m->pma, addr, size, &o);
	check_ret(m, ret, want, alt);
	if (!ret)
		model_alloc(m, addr, size, o.flags);
}

/* @count consecutive pages of @page from the page holding @at, clipped to its region;
 * 0 if even one page does not fit. */
static size_t page_run(struct model *m, uint64_t at, uint64_t page, size_t count, uint64_t *pages)
{
	int r = tp_view_region(&m->v, at);
	uint64_t end = m->v.reg[r].base + m->v.reg[r].size, p = cmn_align_down(at, page);
	size_t n = 0;

	if (p < m->v.reg[r].base)
		return 0;
	while (n < count && p + page <= end) {
		pages[n++] = p;
		p += page;
	}
	return n;
}

static void pages_summary(struct model *m, const uint64_t *pages, size_t n, uint64_t page,
			  bool *has_free, bool *has_unpin, bool *has_pin)
{
	*has_free = *has_unpin = *has_pin = false;
	for (size_t i = 0; i < n; i++)
		for (uint64_t a = pages[i]; a < pages[i] + page; a += FR) {
			uint8_t s = m->f[frame_index(m, a)].state;

			*has_free |= s == PMA_STATE_FREE;
			*has_unpin |= s == PMA_STATE_UNPIN;
			*has_pin |= s == PMA_STATE_PIN;
		}
}

static void after_free(struct model *m)
{
	if (m->scrub)
		pma_scrub_wait(m->pma);
}

static void op_free_pages(struct model *m)
{
	uint64_t at = pick_allocated(m), page = pick_page_size(m), pages[48];
	unsigned int flags = chance(m, 30) ? PMA_FREE_SKIP_SCRUB : 0;
	bool fr, un, pi;
	size_t n;
	int ret;

	if (at == UINT64_MAX)
		return;
	/* long runs of small pages too: consecutive pages are freed as one range */
	n = page_run(m, at, page, 1 + rnd(m, page == M2 ? 4 : chance(m, 30) ? 48 : 4), pages);
	if (!n)
		return;
	snprintf(m->desc, sizeof(m->desc), "free %zu x 0x%llx from 0x%llx flags 0x%x", n,
		 (unsigned long long)page, (unsigned long long)pages[0], flags);
	pages_summary(m, pages, n, page, &fr, &un, &pi);
	ret = pma_free_pages(m->pma, pages, n, page, flags);
	check_ret(m, ret, fr ? -ENOENT : 0, NOALT);
	if (!ret) {
		for (size_t i = 0; i < n; i++)
			model_free(m, pages[i], page, flags);
		after_free(m);
	}
}

static void op_free_range(struct model *m)
{
	uint64_t at = pick_allocated(m), size = (1 + rnd(m, 16)) * FR;
	unsigned int flags = chance(m, 30) ? PMA_FREE_SKIP_SCRUB : 0;
	int want = 0, ret;

	if (at == UINT64_MAX)
		return;
	if (chance(m, 60)) {		/* mostly: the whole allocated run from here */
		int r = tp_view_region(&m->v, at);
		uint64_t end = m->v.reg[r].base + m->v.reg[r].size;

		for (size = FR; at + size < end && size < 128 * FR; size += FR)
			if (m->f[frame_index(m, at + size)].state == PMA_STATE_FREE)
				break;
	} else if (chance(m, 50)) {	/* start a little before, within the region */
		uint64_t base = m->v.reg[tp_view_region(&m->v, at)].base;

		at -= cmn_min(rnd(m, 4) * FR, at - base);
	}
	snprintf(m->desc, sizeof(m->desc), "free_range [0x%llx +0x%llx) flags 0x%x",
		 (unsigned long long)at, (unsigned long long)size, flags);
	if (!in_one_region(m, at, size)) {
		want = -EINVAL;
	} else {
		for (uint64_t a = at; a < at + size; a += FR)
			if (m->f[frame_index(m, a)].state == PMA_STATE_FREE)
				want = -ENOENT;
	}
	ret = pma_free_range(m->pma, at, size, flags);
	check_ret(m, ret, want, want == -EINVAL ? -ENOENT : NOALT);
	if (!ret) {
		model_free(m, at, size, flags);
		after_free(m);
	}
}

static void op_pin(struct model *m, bool pin)
{
	uint64_t at = pick_allocated(m), page = pick_page_size(m), pages[4];
	bool fr, un, pi;
	size_t n;
	int want, alt = NOALT, ret;

	if (at == UINT64_MAX)
		return;
	if (chance(m, 25)) {		/* two scattered 64K pages */
		uint64_t other = pick_allocated(m);

		page = K64;
		pages[0] = at;
		n = 1;
		if (other != at)
			pages[n++] = other;
	} else {
		n = page_run(m, at, page, 1 + rnd(m, 3), pages);
		if (!n)
			return;
	}
	snprintf(m->desc, sizeof(m->desc), "%s %zu x 0x%llx from 0x%llx", pin ? "pin" : "unpin",
		 n, (unsigned long long)page, (unsigned long long)pages[0]);
	pages_summary(m, pages, n, page, &fr, &un, &pi);
	bool wrong = pin ? pi : un;

	if (fr) {
		want = -ENOENT;		/* pma.h is split on this: ENOENT vs EPERM */
		alt = -EPERM;
	} else {
		want = wrong ? -EPERM : 0;
	}
	ret = pin ? pma_pin_pages(m->pma, pages, n, page) : pma_unpin_pages(m->pma, pages, n, page);
	check_ret(m, ret, want, alt);
	if (ret)
		return;
	for (size_t i = 0; i < n; i++)
		for (uint64_t a = pages[i]; a < pages[i] + page; a += FR)
			m->f[frame_index(m, a)].state = pin ? PMA_STATE_PIN : PMA_STATE_UNPIN;
}

static void op_blacklist(struct model *m)
{
	uint64_t addr = 0;
	long i;
	int ret;

	if (m->nr_black >= 60)
		return;
	i = (long)rnd(m, m->v.nframes);
	for (unsigned int r = m->v.nr_regions; r-- > 0;)
		if ((size_t)i >= m->v.first[r]) {
			addr = m->v.reg[r].base + (i - m->v.first[r]) * FR + rnd(m, FR);
			break;
		}
	/* With scrubbing on, what a retired frame does when freed is not specified. */
	if (m->scrub && m->f[i].state != PMA_STATE_FREE)
		return;
	snprintf(m->desc, sizeof(m->desc), "blacklist 0x%llx", (unsigned long long)addr);
	ret = pma_blacklist_add(m->pma, addr);
	check_ret(m, ret, 0, m->f[i].black ? -EEXIST : NOALT);
	if (!m->f[i].black)
		m->nr_black++;
	m->f[i].black = true;
}

static void op_scrub_complete(struct model *m)
{
	const struct pma_region_desc *d = &m->v.reg[rnd(m, m->v.nr_regions)];
	uint64_t frames = d->size / FR, first = rnd(m, frames);
	uint64_t n = 1 + rnd(m, frames - first);
	uint64_t addr = d->base + first * FR;

	snprintf(m->desc, sizeof(m->desc), "scrub_complete [0x%llx +0x%llx)",
		 (unsigned long long)addr, (unsigned long long)(n * FR));
	check_ret(m, pma_scrub_complete(m->pma, addr, n * FR), 0, NOALT);
	for (uint64_t a = addr; a < addr + n * FR; a += FR) {
		struct mframe *f = &m->f[frame_index(m, a)];

		if (f->scrubbing) {
			f->scrubbing = false;
			f->clean = true;
		}
	}
}

static void run_model(bool scrub, uint64_t seed, uint64_t ops)
{
	struct pma_config cfg = { .scrub_on_free = scrub, .scrub = failing_scrub };
	struct model m = { .scrub = scrub, .seed0 = seed, .seed = seed };

	m.pma = tp_new(&cfg, model_regions, NR_REGIONS);
	tp_view_read(m.pma, &m.v);
	m.f = calloc(m.v.nframes, sizeof(*m.f));
	assert_non_null(m.f);
	/* Never-used memory counts as known zero only where PMA scrubs (pma_region_new()
	 * takes boot memory as clean then); without scrubbing nothing is ever known zero. */
	for (size_t i = 0; i < m.v.nframes; i++)
		m.f[i].clean = scrub;
	for (m.op = 0; m.op < ops; m.op++) {
		/* alternate filling and draining phases so every fill level is visited */
		bool drain = (m.op / 2500) % 2;
		uint64_t dice = rnd(&m, 100);

		alarm(60);	/* one operation never takes this long: a hang fails the test */
		snprintf(m.desc, sizeof(m.desc), "no-op");
		if (dice < (drain ? 16 : 34))
			op_alloc(&m);
		else if (dice < 40)
			op_fixed(&m);
		else if (dice < 58)
			op_free_pages(&m);
		else if (dice < 74)
			op_free_range(&m);
		else if (dice < 82)
			op_pin(&m, true);
		else if (dice < 90)
			op_pin(&m, false);
		else if (dice < 91)
			op_blacklist(&m);
		else if (scrub && dice < 97)
			op_scrub_complete(&m);
		int ret = pma_check(m.pma);

		if (ret)
			MFAIL(&m, "pma_check() returned %d", ret);
		compare_stats(&m);
		compare_export(&m);
		if (m.op % 64 == 0)
			compare_frames(&m);
	}
	alarm(0);
	compare_frames(&m);
	free(m.f);
	tp_view_free(&m.v);
	pma_destroy(m.pma);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

static void test_model_plain(void **state)
{
	uint64_t seed = env_u64("PMA_MODEL_SEED", 0x9e3779b97f4a7c15ull);
	uint64_t ops = env_u64("PMA_MODEL_OPS", 100000);

	(void)state;
	print_message("model without scrubbing: seed 0x%llx, %llu ops\n",
		      (unsigned long long)seed, (unsigned long long)ops);
	run_model(false, seed, ops);
}

static void test_model_scrub(void **state)
{
	uint64_t seed = env_u64("PMA_MODEL_SEED", 0x243f6a8885a308d3ull);
	uint64_t ops = env_u64("PMA_MODEL_OPS", 100000);

	(void)state;
	print_message("model with scrub-on-free (scrubs held until completed): seed 0x%llx, "
		      "%llu ops\n", (unsigned long long)seed, (unsigned long long)ops);
	run_model(true, seed, ops);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_plain),
		cmocka_unit_test(test_model_scrub),
	};

	cmn_log_set_level(VGPU_LOG_ERR);	/* each held scrub logs a warning */
	return cmocka_run_group_tests_name("pma_model", tests, NULL, NULL);
}
