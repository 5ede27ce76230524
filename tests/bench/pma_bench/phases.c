// SPDX-License-Identifier: MIT
/* The three workloads of doc/bench/pma_bench.md against one backend.
 *
 * Every phase runs in two modes on a fresh allocator each time: throughput mode times whole
 * segments with no clock read per call (the headline ops/s), latency mode puts a clock pair
 * around every call (p50/p99 per op type). Latency mode also checks every allocation and
 * free against the shadow bitmap and samples the allocator's heap; both cost nothing
 * measured because they happen outside the clock pair. --verify adds the shadow to the
 * throughput runs too, and the backend's own check every 64 Ki ops. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/err.h"
#include "pb.h"

#define FRAG_C2_ATTEMPTS	1000
#define NAIVE_C0_PREFIX		65536u	/* the reference times this prefix and scales it */
#define QUICK_NAIVE_MIXED_OPS	100000u
#define QUICK_NAIVE_C3_OPS	2048u
#define META_SAMPLE_MASK	1023u
#define VERIFY_CHECK_MASK	65535u

void pb_problem(struct pb_result *res, const char *fmt, ...)
{
	char msg[sizeof(res->first_problem)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!res->problems++)
		snprintf(res->first_problem, sizeof(res->first_problem), "%s", msg);
	/* A flood of identical failures says nothing more than the first few. */
	if (res->problems <= 5)
		fprintf(stderr, "pma_bench: FAIL [%s] %s\n", res->be->name, msg);
}

/* One run of one phase on a fresh allocator. */
struct pass {
	struct pb_ctx *c;
	struct pb_result *res;
	const struct pb_backend *be;
	void *h;
	bool shadow;			/* check every call against the shadow */
	bool verify;			/* and the backend's check now and then */
	const char *what;		/* phase name for messages */
	const struct pb_trace *trace;	/* what mixed_replay() replays */
	uint64_t *slot_pages;		/* its page lists, by trace slot */
	uint8_t *slot_ok;
	int64_t *meta_peak;		/* heap samples go here */
};

static bool pass_begin(struct pass *p, struct pb_ctx *c, struct pb_result *res, bool lat,
		       const char *what, int64_t *meta_peak)
{
	*p = (struct pass){
		.c = c, .res = res, .be = res->be, .what = what, .meta_peak = meta_peak,
		.trace = &c->trace, .slot_pages = c->slot_pages, .slot_ok = c->slot_ok,
		.shadow = lat || c->opt.verify, .verify = c->opt.verify,
	};
	pb_shadow_reset(&c->shadow);
	p->h = p->be->create(c->nr_frames);
	if (!p->h) {
		pb_problem(res, "%s: cannot create the allocator", what);
		return false;
	}
	return true;
}

static void pass_sample_meta(struct pass *p)
{
	int64_t m = p->be->metadata(p->h);

	if (m > *p->meta_peak)
		*p->meta_peak = m;
}

/* Backend's check and its free bytes against the shadow. */
static void pass_check(struct pass *p, const char *where)
{
	int ret = p->be->check ? p->be->check(p->h) : 0;

	if (ret)
		pb_problem(p->res, "%s %s: allocator check failed: %s", p->what, where,
			   cmn_strerror(ret));
	if (!p->shadow)
		return;
	uint64_t want = (p->c->nr_frames - p->c->shadow.used_frames) * PB_FRAME_SIZE;
	uint64_t got = p->be->free_bytes(p->h);

	if (got != want)
		pb_problem(p->res, "%s %s: allocator reports %llu free bytes, shadow %llu",
			   p->what, where, (unsigned long long)got, (unsigned long long)want);
}

static void pass_end(struct pass *p)
{
	if (p->shadow)
		pass_check(p, "end");
	if (p->c->shadow.violations)
		pb_problem(p->res, "%s: %llu shadow violations, first: %s", p->what,
			   (unsigned long long)p->c->shadow.violations,
			   p->c->shadow.first_violation);
	p->be->destroy(p->h);
}

/* One allocation; @ns (latency mode) gets the time of the call alone. */
static inline int pass_alloc(struct pass *p, const struct pb_req *r, uint64_t *pages,
			     uint64_t *ns)
{
	uint64_t t0 = 0;
	int ret;

	if (ns)
		t0 = cmn_now_ns();
	ret = p->be->alloc(p->h, r, pages);
	if (ns)
		*ns = cmn_now_ns() - t0;
	if (cmn_unlikely(ret && ret != -ENOMEM))
		pb_problem(p->res, "%s: alloc of %u x %llu returned %s", p->what, r->count,
			   (unsigned long long)r->page_size, cmn_errname(ret));
	if (!ret && p->shadow)
		pb_shadow_alloc(&p->c->shadow, r, pages);
	return ret;
}

static inline int pass_free(struct pass *p, const struct pb_req *r, const uint64_t *pages,
			    uint64_t *ns)
{
	uint64_t t0 = 0;
	int ret;

	if (p->shadow)		/* before the call: afterwards the pages may be reused */
		pb_shadow_free(&p->c->shadow, r, pages);
	if (ns)
		t0 = cmn_now_ns();
	ret = p->be->free(p->h, r, pages);
	if (ns)
		*ns = cmn_now_ns() - t0;
	if (cmn_unlikely(ret))
		pb_problem(p->res, "%s: free of %u x %llu at 0x%llx returned %s", p->what,
			   r->count, (unsigned long long)r->page_size,
			   (unsigned long long)pages[0], cmn_errname(ret));
	return ret;
}

static double median(double *v, unsigned int n)
{
	for (unsigned int i = 1; i < n; i++)
		for (unsigned int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n ? v[n / 2] : 0;
}

static double per_rate(size_t ops, double secs)
{
	return secs > 0 ? (double)ops / secs : 0;
}

static unsigned int pass_reps(const struct pb_ctx *c, const struct pb_result *res)
{
	/* The naive baseline is slow and deterministic enough: one run. */
	return res->be == &pb_backend_naive ? 1 : c->opt.reps;
}

/* --- (a) fill ------------------------------------------------------------------------- */

static void fill_pass(struct pb_ctx *c, struct pb_result *res, bool lat, double *alloc_s,
		      double *free_s)
{
	struct pb_req r = pb_req_of(PB_CLS_C2M, 1);
	uint64_t cap = c->nr_frames / PB_FRAMES_PER_2M + 1, n = 0, t0, t1, ns;
	struct pb_lat la, lf;
	struct pass p;

	if (!pass_begin(&p, c, res, lat, "fill", &res->meta_fill))
		return;
	if (lat) {
		res->meta_empty = p.be->metadata(p.h);
		pb_lat_arena_reset();
		pb_lat_carve(&la, cap);
		pb_lat_carve(&lf, cap);
	}
	t0 = cmn_now_ns();
	for (;;) {
		if (n == cap) {
			pb_problem(res, "fill: more 2 MiB pages than the device holds");
			break;
		}
		if (pass_alloc(&p, &r, &c->frame_pages[n], lat ? &ns : NULL)) {
			if (lat)
				res->fill.fail_ns = ns;
			break;
		}
		if (lat)
			pb_lat_add(&la, ns);
		n++;
	}
	t1 = cmn_now_ns();
	*alloc_s = pb_secs(t0, t1);
	res->fill.allocs = n;
	pass_sample_meta(&p);
	if (p.shadow)
		pass_check(&p, "full");
	t0 = cmn_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		pass_free(&p, &r, &c->frame_pages[i], lat ? &ns : NULL);
		if (lat)
			pb_lat_add(&lf, ns);
	}
	t1 = cmn_now_ns();
	*free_s = pb_secs(t0, t1);
	pass_end(&p);
	if (lat) {
		res->fill.alloc = pb_lat_summary(&la);
		res->fill.free = pb_lat_summary(&lf);
	}
}

void pb_run_fill(struct pb_ctx *c, struct pb_result *res)
{
	unsigned int reps = pass_reps(c, res);
	double a[16] = { 0 }, f[16] = { 0 }, dummy;

	for (unsigned int i = 0; i < reps; i++)
		fill_pass(c, res, false, &a[i], &f[i]);
	res->fill.alloc_s = median(a, reps);
	res->fill.free_s = median(f, reps);
	fill_pass(c, res, true, &dummy, &dummy);
	if (res->fill.allocs != c->nr_frames / PB_FRAMES_PER_2M)
		pb_problem(res, "fill: %llu C2M before the first failure, want %llu",
			   (unsigned long long)res->fill.allocs,
			   (unsigned long long)(c->nr_frames / PB_FRAMES_PER_2M));
	res->rss_fill = pb_peak_rss();
}

/* --- (b) mixed ------------------------------------------------------------------------ */

/* Why an allocation failed, from the shadow: fragmentation (enough free frames) and,
 * worse, a fit the allocator did not find. */
static void mixed_classify(struct pass *p, const struct pb_req *r, struct pb_mixed_res *m)
{
	if (pb_shadow_enough(&p->c->shadow, r)) {
		m->frag_fails++;
		m->frag_fails_discontig += !r->contig;
	}
	m->missed_fits += pb_shadow_fits(&p->c->shadow, r);
}

/* Replay ops [from, to); @lat (latency mode) is one array per op type. */
static void mixed_replay(struct pass *p, size_t from, size_t to, struct pb_lat *lat,
			 struct pb_mixed_res *m)
{
	const struct pb_op *ops = p->trace->ops;
	uint64_t ns;

	for (size_t i = from; i < to; i++) {
		const struct pb_op *op = &ops[i];
		struct pb_req r = pb_req_of(op->cls, op->k);
		uint64_t *pages = p->slot_pages + (size_t)op->slot * PB_MAX_PAGES;

		if (op->is_alloc) {
			int ret = pass_alloc(p, &r, pages, lat ? &ns : NULL);

			p->slot_ok[op->slot] = !ret;
			if (ret) {
				m->fails++;
				m->fails_cls[op->cls]++;
				if (p->shadow)
					mixed_classify(p, &r, m);
			}
			if (lat)
				pb_lat_add(&lat[PB_OP_ALLOC + op->cls], ns);
		} else if (p->slot_ok[op->slot]) {
			/* A failed allocation's free is skipped, as the reference replays. */
			if (pass_free(p, &r, pages, lat ? &ns : NULL))
				m->free_errors++;
			if (lat)
				pb_lat_add(&lat[PB_OP_FREE + op->cls], ns);
		} else {
			m->skipped_frees++;
		}
		if (lat && !(i & META_SAMPLE_MASK))
			pass_sample_meta(p);
		if (p->verify && !(i & VERIFY_CHECK_MASK))
			pass_check(p, "during replay");
	}
}

/* Main-loop ops replayed for this backend (a prefix with --quick for the baseline). */
static size_t mixed_end(const struct pb_ctx *c, const struct pb_result *res)
{
	const struct pb_trace *t = &c->trace;

	if (c->opt.quick && res->be == &pb_backend_naive)
		return cmn_min(t->nr_ops, t->nr_prefill + QUICK_NAIVE_MIXED_OPS);
	return t->nr_ops;
}

/* One timed pass of the pma (@res) with its own slot buffers, between two chunks of the
 * baseline's pass: seconds for the main loop, 0 if it could not run. */
static double mixed_pair_pass(struct pb_ctx *c, struct pb_result *res)
{
	const struct pb_trace *t = &c->trace;
	struct pb_mixed_res m = { 0 };
	struct pass p;
	uint64_t t0;
	double secs;

	if (!pass_begin(&p, c, res, false, "mixed (paired)", &res->meta_mixed_peak))
		return 0;
	p.slot_pages = c->pair_slot_pages;
	p.slot_ok = c->pair_slot_ok;
	mixed_replay(&p, 0, t->nr_prefill, NULL, &m);		/* prefill: untimed */
	t0 = cmn_now_ns();
	mixed_replay(&p, t->nr_prefill, t->nr_ops, NULL, &m);
	secs = pb_secs(t0, cmn_now_ns());
	pass_end(&p);
	return secs;
}

/* Replay the baseline's main loop [from, to) in c->opt.reps chunks with one pma pass after
 * each, and record the pma's figures in c->pair: seconds of the baseline's replay alone.
 * The pma's rate is its ops over its time summed over the passes, as the baseline's is. */
static double mixed_replay_paired(struct pass *p, size_t from, size_t to, struct pb_mixed_res *m)
{
	struct pb_ctx *c = p->c;
	struct pb_mixed_res *pm = &c->pair->mixed;
	size_t ops = c->trace.nr_ops - c->trace.nr_prefill;
	unsigned int k = c->opt.reps;
	double secs = 0, sum = 0, lo = 0, hi = 0;

	for (unsigned int i = 0; i < k; i++) {
		uint64_t t0 = cmn_now_ns();
		double s;

		mixed_replay(p, from + (to - from) * i / k, from + (to - from) * (i + 1) / k, NULL, m);
		secs += pb_secs(t0, cmn_now_ns());
		s = mixed_pair_pass(c, c->pair);
		if (s <= 0)
			return secs;
		sum += s;
		lo = i && lo < s ? lo : s;
		hi = hi > s ? hi : s;
	}
	pm->paired_reps = k;
	pm->paired_ops_per_s = per_rate(ops * k, sum);
	pm->paired_min = per_rate(ops, hi);
	pm->paired_max = per_rate(ops, lo);
	return secs;
}

static void mixed_pass(struct pb_ctx *c, struct pb_result *res, bool lat, double *secs)
{
	const struct pb_trace *t = &c->trace;
	struct pb_lat l[PB_NR_OPTYPES];
	struct pb_mixed_res m = { 0 };
	size_t end = mixed_end(c, res);
	uint64_t t0, t1;
	struct pass p;

	if (!pass_begin(&p, c, res, lat, "mixed", &res->meta_mixed_peak))
		return;
	if (lat) {
		size_t count[PB_NR_OPTYPES] = { 0 };

		for (size_t i = t->nr_prefill; i < end; i++)
			count[(t->ops[i].is_alloc ? PB_OP_ALLOC : PB_OP_FREE) + t->ops[i].cls]++;
		pb_lat_arena_reset();
		for (int i = 0; i < PB_NR_OPTYPES; i++)
			pb_lat_carve(&l[i], count[i]);
	}
	mixed_replay(&p, 0, t->nr_prefill, NULL, &m);		/* prefill: untimed */
	m = (struct pb_mixed_res){ 0 };
	pass_sample_meta(&p);
	if (c->pair && !lat) {
		*secs = mixed_replay_paired(&p, t->nr_prefill, end, &m);
	} else {
		t0 = cmn_now_ns();
		mixed_replay(&p, t->nr_prefill, end, lat ? l : NULL, &m);
		t1 = cmn_now_ns();
		*secs = pb_secs(t0, t1);
	}
	pass_sample_meta(&p);
	pass_end(&p);
	m.ops = end - t->nr_prefill;
	m.partial = end != t->nr_ops;
	/* Failure counts come from the last run (latency mode: with the shadow's verdicts). */
	res->mixed.ops = m.ops;
	res->mixed.partial = m.partial;
	res->mixed.fails = m.fails;
	res->mixed.frag_fails = m.frag_fails;
	res->mixed.frag_fails_discontig = m.frag_fails_discontig;
	res->mixed.missed_fits = m.missed_fits;
	res->mixed.skipped_frees = m.skipped_frees;
	res->mixed.free_errors = m.free_errors;
	if (lat) {
		res->mixed.has_lat = true;
		for (int i = 0; i < PB_NR_OPTYPES; i++)
			res->mixed.lat[i] = pb_lat_summary(&l[i]);
	}
}

void pb_run_mixed(struct pb_ctx *c, struct pb_result *res)
{
	unsigned int reps = pass_reps(c, res);
	double s[16] = { 0 }, dummy, lo = 0, hi = 0;

	/* One untimed pass first (the pma only: the baseline runs once), so that the timed
	 * ones find the code, the branch history and the allocator's memory warm. */
	if (reps > 1)
		mixed_pass(c, res, false, &dummy);
	for (unsigned int i = 0; i < reps; i++) {
		mixed_pass(c, res, false, &s[i]);
		lo = i && lo < s[i] ? lo : s[i];
		hi = hi > s[i] ? hi : s[i];
	}
	res->mixed.reps = reps;
	res->mixed.secs = median(s, reps);
	res->mixed.ops_per_s = res->mixed.secs > 0 ? (double)res->mixed.ops / res->mixed.secs : 0;
	res->mixed.ops_min = hi > 0 ? (double)res->mixed.ops / hi : 0;
	res->mixed.ops_max = lo > 0 ? (double)res->mixed.ops / lo : 0;
	/* The baseline's latency run costs as much as its throughput run; --quick drops it. */
	if (!(c->opt.quick && res->be == &pb_backend_naive))
		mixed_pass(c, res, true, &dummy);
	if (res->mixed.missed_fits)
		pb_problem(res, "mixed: %llu allocations failed although a fit existed",
			   (unsigned long long)res->mixed.missed_fits);
	res->rss_mixed = pb_peak_rss();
}

void pb_measure_harness(struct pb_ctx *c)
{
	static struct pb_result res = { .be = &pb_backend_null };
	const struct pb_trace *t = &c->trace;
	struct pb_mixed_res m = { 0 };
	double best = 0;
	struct pass p;

	/* Best of three: this is a floor, so the least disturbed run is the right one. */
	for (int i = 0; i < 3; i++) {
		uint64_t t0, t1;

		if (!pass_begin(&p, c, &res, false, "harness", &res.meta_mixed_peak))
			return;
		p.shadow = p.verify = false;	/* the null backend's pages are not real */
		t0 = cmn_now_ns();
		mixed_replay(&p, t->nr_prefill, t->nr_ops, NULL, &m);
		t1 = cmn_now_ns();
		p.be->destroy(p.h);
		if (!i || pb_secs(t0, t1) < best)
			best = pb_secs(t0, t1);
	}
	c->harness_ns_per_op = best * 1e9 / (double)(t->nr_ops - t->nr_prefill);
}

/* --- (d) stress ---------------------------------------------------------------------- */

/* The mixed generator with a higher cap, replayed once with the shadow classifying every
 * failure: how the allocator resists fragmentation when the device is nearly full. */
void pb_run_stress(struct pb_ctx *c, struct pb_result *res)
{
	struct pb_mixed_res m = { 0 };
	struct pass p;

	if (!pass_begin(&p, c, res, true, "stress", &res->meta_mixed_peak))
		return;
	p.trace = &c->stress;
	mixed_replay(&p, 0, c->stress.nr_ops, NULL, &m);
	pass_end(&p);
	m.ops = c->stress.nr_ops - c->stress.nr_prefill;
	res->stress = m;
	if (m.missed_fits)
		pb_problem(res, "stress: %llu allocations failed although a fit existed",
			   (unsigned long long)m.missed_fits);
}

/* --- (c) fragmented ------------------------------------------------------------------- */

/* Which steps get a clock pair per call (c2 always does: it is a latency probe). */
enum { LAT_C0 = 1, LAT_C1 = 2, LAT_C3 = 4 };

struct frag_times {
	double c0, c1, c3;
};

/* c0: every frame as its own A64K(1). The naive baseline is quadratic here, so only a
 * prefix is timed; the rest is taken with a cursor, which leaves the bitmap first fit
 * would have left. Returns the seconds (extrapolated for the baseline). */
static double frag_c0(struct pass *p, unsigned int lat, struct pb_lat *l)
{
	struct pb_ctx *c = p->c;
	struct pb_req r = pb_req_of(PB_CLS_A64K, 1);
	bool naive = p->be == &pb_backend_naive;
	uint64_t n = naive ? cmn_min(NAIVE_C0_PREFIX, c->nr_frames) : c->nr_frames;
	uint64_t t0, t1, ns;

	t0 = cmn_now_ns();
	for (uint64_t f = 0; f < n; f++) {
		if (pass_alloc(p, &r, &c->frame_pages[f], (lat & LAT_C0) ? &ns : NULL)) {
			p->res->frag.c0_fails++;
			c->frame_pages[f] = UINT64_MAX;
		}
		if (lat & LAT_C0)
			pb_lat_add(l, ns);
		if ((lat & LAT_C0) && !(f & META_SAMPLE_MASK))
			pass_sample_meta(p);
	}
	t1 = cmn_now_ns();
	p->res->frag.c0_timed = n;
	if (!naive)
		return pb_secs(t0, t1);
	for (uint64_t f = n; f < c->nr_frames; f++) {
		pb_naive_take_frame(p->h, f);
		c->frame_pages[f] = f * PB_FRAME_SIZE;
		if (p->shadow)
			pb_shadow_alloc(&c->shadow, &r, &c->frame_pages[f]);
	}
	p->res->frag.c0_extrapolated = n < c->nr_frames;
	double scale = (double)c->nr_frames / (double)n;

	return pb_secs(t0, t1) * scale * scale;
}

/* c1: free the allocations on odd frames (by address: allocators differ in order). */
static double frag_c1(struct pass *p, unsigned int lat, struct pb_lat *l)
{
	struct pb_ctx *c = p->c;
	struct pb_req r = pb_req_of(PB_CLS_A64K, 1);
	uint64_t n = 0, t0, t1, ns;

	for (uint64_t i = 0; i < c->nr_frames; i++)
		if (c->frame_pages[i] != UINT64_MAX && (c->frame_pages[i] / PB_FRAME_SIZE) & 1)
			c->odd[n++] = i;
	if (n != c->nr_frames / 2)
		pb_problem(p->res, "frag c1: %llu allocations on odd frames, want %llu",
			   (unsigned long long)n, (unsigned long long)(c->nr_frames / 2));
	/* Timed as a segment, the shadow's work would be timed too: do it afterwards. */
	bool shadow_after = p->shadow && !(lat & LAT_C1);

	if (shadow_after)
		p->shadow = false;
	t0 = cmn_now_ns();
	for (uint64_t j = 0; j < n; j++) {
		pass_free(p, &r, &c->frame_pages[c->odd[j]], (lat & LAT_C1) ? &ns : NULL);
		if (lat & LAT_C1)
			pb_lat_add(l, ns);
	}
	t1 = cmn_now_ns();
	if (shadow_after) {
		p->shadow = true;
		for (uint64_t j = 0; j < n; j++)
			pb_shadow_free(&c->shadow, &r, &c->frame_pages[c->odd[j]]);
	}
	return pb_secs(t0, t1);
}

/* c2: 2 MiB contiguous while no 2 MiB group is free: every attempt must fail. */
static void frag_c2(struct pass *p, struct pb_lat *l)
{
	struct pb_req r = pb_req_of(PB_CLS_C2M, 1);
	uint64_t page, ns;

	for (int i = 0; i < FRAG_C2_ATTEMPTS; i++) {
		if (!pass_alloc(p, &r, &page, &ns)) {
			p->res->frag.c2_successes++;
			pass_free(p, &r, &page, NULL);
		}
		pb_lat_add(l, ns);
	}
}

/* c3: D2M (32 discontiguous 64 KiB pages) until the device is full; all must succeed. */
static double frag_c3(struct pass *p, unsigned int lat, struct pb_lat *l)
{
	struct pb_ctx *c = p->c;
	struct pb_req r = { .count = 32, .page_size = PB_FRAME_SIZE, .contig = false };
	uint64_t n = c->nr_frames / 2 / 32, t0, t1, ns;
	bool cut = c->opt.quick && p->be == &pb_backend_naive && n > QUICK_NAIVE_C3_OPS;
	uint64_t todo = cut ? QUICK_NAIVE_C3_OPS : n;

	t0 = cmn_now_ns();
	for (uint64_t j = 0; j < todo; j++) {
		if (pass_alloc(p, &r, &c->d2m_pages[j * 32], (lat & LAT_C3) ? &ns : NULL)) {
			p->res->frag.c3_fails++;
			if (p->shadow && pb_shadow_enough(&c->shadow, &r))
				p->res->frag.c3_frag_fails++;
		}
		if (lat & LAT_C3)
			pb_lat_add(l, ns);
		if ((lat & LAT_C3) && !(j & META_SAMPLE_MASK))
			pass_sample_meta(p);
	}
	t1 = cmn_now_ns();
	p->res->frag.c3_timed = todo;
	p->res->frag.c3_extrapolated = cut;
	if (!cut)
		return pb_secs(t0, t1);
	/* Each D2M scans past the ones before it: cost grows linearly, the sum quadratically. */
	double scale = (double)n / (double)todo;

	return pb_secs(t0, t1) * scale * scale;
}

static void frag_pass(struct pb_ctx *c, struct pb_result *res, unsigned int lat,
		      struct frag_times *ft)
{
	struct pb_lat l0, l1, l2, l3;
	struct pass p;

	if (!pass_begin(&p, c, res, lat != 0, "frag", &res->meta_frag_peak))
		return;
	res->frag.c0_fails = res->frag.c2_successes = 0;
	res->frag.c3_fails = res->frag.c3_frag_fails = 0;
	pb_lat_arena_reset();
	pb_lat_carve(&l0, (lat & LAT_C0) ? c->nr_frames : 0);
	pb_lat_carve(&l1, (lat & LAT_C1) ? c->nr_frames / 2 : 0);
	pb_lat_carve(&l2, FRAG_C2_ATTEMPTS);
	pb_lat_carve(&l3, (lat & LAT_C3) ? c->nr_frames / 64 : 0);
	ft->c0 = frag_c0(&p, lat, &l0);
	pass_sample_meta(&p);
	if (p.shadow)
		pass_check(&p, "after c0");
	ft->c1 = frag_c1(&p, lat, &l1);
	pass_sample_meta(&p);
	frag_c2(&p, &l2);
	ft->c3 = frag_c3(&p, lat, &l3);
	pass_sample_meta(&p);
	pass_end(&p);
	if (lat & LAT_C0)
		res->frag.c0 = pb_lat_summary(&l0);
	if (lat & LAT_C1)
		res->frag.c1 = pb_lat_summary(&l1);
	res->frag.c2 = pb_lat_summary(&l2);
	if (lat & LAT_C3)
		res->frag.c3 = pb_lat_summary(&l3);
}

static void frag_expectations(struct pb_ctx *c, struct pb_result *res)
{
	struct pb_frag_res *f = &res->frag;

	if (f->c0_fails)
		pb_problem(res, "frag c0: %llu of %llu 64 KiB allocations failed",
			   (unsigned long long)f->c0_fails, (unsigned long long)c->nr_frames);
	if (f->c2_successes)
		pb_problem(res, "frag c2: %llu of %d C2M succeeded, all must fail",
			   (unsigned long long)f->c2_successes, FRAG_C2_ATTEMPTS);
	if (f->c3_fails)
		pb_problem(res, "frag c3: %llu D2M failed (%llu with enough free frames)",
			   (unsigned long long)f->c3_fails, (unsigned long long)f->c3_frag_fails);
}

void pb_run_frag(struct pb_ctx *c, struct pb_result *res)
{
	struct frag_times t[16] = { 0 }, lt = { 0 };
	double v0[16], v1[16], v3[16];
	unsigned int reps = c->opt.reps;

	if (res->be == &pb_backend_naive) {
		/* One run: c0 prefix, c2 and c3 per call (each call is tens of µs or more,
		 * so the clock pair is noise), c1 as a segment. */
		frag_pass(c, res, LAT_C0 | LAT_C3, &lt);
		res->frag.c0_s = lt.c0;
		res->frag.c1_s = lt.c1;
		res->frag.c3_s = lt.c3;
		res->frag.c3_from_lat = true;
		frag_expectations(c, res);
		res->rss_frag = pb_peak_rss();
		return;
	}
	for (unsigned int i = 0; i < reps; i++) {
		frag_pass(c, res, 0, &t[i]);
		v0[i] = t[i].c0;
		v1[i] = t[i].c1;
		v3[i] = t[i].c3;
	}
	res->frag.c0_s = median(v0, reps);
	res->frag.c1_s = median(v1, reps);
	res->frag.c3_s = median(v3, reps);
	frag_pass(c, res, LAT_C0 | LAT_C1 | LAT_C3, &lt);
	frag_expectations(c, res);
	res->rss_frag = pb_peak_rss();
}
