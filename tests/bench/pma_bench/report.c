// SPDX-License-Identifier: MIT
/* Output of pma_bench: the human tables (pma next to the naive baseline, with the ratio)
 * and the single JSON object of --json. Both print the same figures. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/compiler.h"
#include "pb.h"
#include "tests/bench/bench_cpu.h"

#define GIB			(1ull << 30)
#define TARGET_MIXED_OPS	13e6
#define TARGET_MIXED_RATIO	100.0
#define TARGET_CONTIG_P99_NS	1000u
#define TARGET_FILL_S		0.1
#define TARGET_META_PER_GIB	16384.0

static const char *const cls_name[PB_NR_CLS] = { "a64k", "c2m", "c32m", "d256m" };
static const char *const cls_label[PB_NR_CLS] = { "A64K(1..16)", "C2M", "C32M", "D256M" };

/* --- derived figures ------------------------------------------------------------------ */

static double device_gib(const struct pb_ctx *c)
{
	return (double)(c->nr_frames * PB_FRAME_SIZE) / (double)GIB;
}

static int64_t meta_max(const struct pb_result *r)
{
	int64_t m = r->meta_empty;

	m = cmn_max(m, r->meta_fill);
	m = cmn_max(m, r->meta_mixed_peak);
	return cmn_max(m, r->meta_frag_peak);
}

static double per_s(double n, double secs)
{
	return secs > 0 ? n / secs : 0;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* The targets, evaluated on this run. */
struct target {
	const char *key, *what;
	double value;
	const char *unit;
	bool met;
};

/* The pma's mixed figure the ratio to the baseline uses: its passes run between chunks of
 * the baseline's when they were paired, else its own. */
static double mixed_vs_naive(const struct pb_result *p, const struct pb_result *n)
{
	return ratio(p->mixed.paired_reps ? p->mixed.paired_ops_per_s : p->mixed.ops_per_s,
		     n->mixed.ops_per_s);
}

static unsigned int targets(const struct pb_ctx *c, const struct pb_result *p,
			    const struct pb_result *n, struct target *t)
{
	double r = mixed_vs_naive(p, n);
	double meta = (double)meta_max(p) / device_gib(c);
	uint64_t c2m = p->mixed.lat[PB_OP_ALLOC + PB_CLS_C2M].p99;
	uint64_t c32m = p->mixed.lat[PB_OP_ALLOC + PB_CLS_C32M].p99;
	/* Mixed, c3 and the 99 % stress: the stress is where it can actually happen. */
	uint64_t frag = p->mixed.frag_fails_discontig + p->frag.c3_frag_fails +
			p->stress.frag_fails_discontig;
	unsigned int i = 0;

	t[i++] = (struct target){ "mixed_ge_13m", "mixed ops/s >= 13 M", p->mixed.ops_per_s / 1e6,
				  "M/s", p->mixed.ops_per_s >= TARGET_MIXED_OPS };
	t[i++] = (struct target){ "mixed_ge_100x_naive", "mixed >= 100x naive", r, "x",
				  r >= TARGET_MIXED_RATIO };
	t[i++] = (struct target){ "c2m_p99_le_1us", "C2M alloc p99 <= 1 us", (double)c2m, "ns",
				  c2m <= TARGET_CONTIG_P99_NS };
	t[i++] = (struct target){ "c32m_p99_le_1us", "C32M alloc p99 <= 1 us", (double)c32m, "ns",
				  c32m <= TARGET_CONTIG_P99_NS };
	t[i++] = (struct target){ "fill_64k_le_0_1s", "80 GiB 64K fill <= 0.1 s", p->frag.c0_s, "s",
				  p->frag.c0_s <= TARGET_FILL_S };
	t[i++] = (struct target){ "metadata_le_16k_per_gib", "metadata <= 16 KiB/GiB", meta,
				  "B/GiB", meta <= TARGET_META_PER_GIB };
	t[i++] = (struct target){ "no_discontig_frag_failure", "no discontiguous frag failure",
				  (double)frag, "failures", frag == 0 };
	return i;
}

/* --- human tables --------------------------------------------------------------------- */

/* Formatters return one of a few rotating static buffers, so several fit in one printf. */
static char *fmt_buf(void)
{
	static char bufs[16][32];
	static unsigned int next;

	return bufs[next++ % VGPU_ARRAY_SIZE(bufs)];
}

static const char *fmt_rate(double v)
{
	char *b = fmt_buf();

	if (v <= 0)
		return "-";
	if (v >= 1e6)
		snprintf(b, 32, "%.2f M/s", v / 1e6);
	else if (v >= 1e3)
		snprintf(b, 32, "%.1f k/s", v / 1e3);
	else
		snprintf(b, 32, "%.0f /s", v);
	return b;
}

static const char *fmt_ns(uint64_t ns)
{
	char *b = fmt_buf();

	if (ns < 1000)
		snprintf(b, 32, "%llu ns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(b, 32, "%.2f us", (double)ns / 1e3);
	else
		snprintf(b, 32, "%.2f ms", (double)ns / 1e6);
	return b;
}

static const char *fmt_pct(const struct pb_latstat *s)
{
	char *b = fmt_buf();

	if (!s->n)
		return "-";
	snprintf(b, 32, "%s / %s", fmt_ns(s->p50), fmt_ns(s->p99));
	return b;
}

static const char *fmt_secs(double s, bool approx)
{
	char *b = fmt_buf();

	snprintf(b, 32, "%s%.3f s", approx ? "~" : "", s);
	return b;
}

static const char *fmt_x(double x)
{
	char *b = fmt_buf();

	if (x <= 0)
		return "-";
	snprintf(b, 32, x < 1 ? "%.2gx" : "%.1fx", x);	/* 0.02x, not 0.0x */
	return b;
}

static void row(const char *what, const char *p, const char *n, const char *x)
{
	printf("  %-30s %22s %22s %10s\n", what, p, n, x);
}

static void header(const char *title)
{
	printf("\n%s\n", title);
	row("", "pma", "naive", "pma gain");
}

static double lat_speedup(const struct pb_latstat *p, const struct pb_latstat *n)
{
	return p->n && n->n && p->ops_per_s > 0 ? n->ops_per_s > 0 ?
	       p->ops_per_s / n->ops_per_s : 0 : 0;
}

static void human_fill(const struct pb_ctx *c, const struct pb_result *p,
		       const struct pb_result *n)
{
	const struct pb_fill_res *pf = &p->fill, *nf = &n->fill;
	double pa = per_s((double)pf->allocs, pf->alloc_s), na = per_s((double)nf->allocs, nf->alloc_s);
	double pr = per_s((double)pf->allocs, pf->free_s), nr = per_s((double)nf->allocs, nf->free_s);
	char b1[32], b2[32];

	header("(a) fill: C2M until an allocation fails, then free all in allocation order");
	snprintf(b1, sizeof(b1), "%llu", (unsigned long long)pf->allocs);
	snprintf(b2, sizeof(b2), "%llu", (unsigned long long)nf->allocs);
	row("C2M before the failure", b1, b2, "");
	row("alloc ops/s (throughput)", fmt_rate(pa), fmt_rate(na), fmt_x(ratio(pa, na)));
	row("alloc p50 / p99", fmt_pct(&pf->alloc), fmt_pct(&nf->alloc),
	    fmt_x(lat_speedup(&pf->alloc, &nf->alloc)));
	row("the failing C2M", fmt_ns(pf->fail_ns), nf->allocs ? fmt_ns(nf->fail_ns) : "-",
	    fmt_x(ratio((double)nf->fail_ns, (double)pf->fail_ns)));
	row("free ops/s (throughput)", fmt_rate(pr), fmt_rate(nr), fmt_x(ratio(pr, nr)));
	row("free p50 / p99", fmt_pct(&pf->free), fmt_pct(&nf->free),
	    fmt_x(lat_speedup(&pf->free, &nf->free)));
	(void)c;
}

static void human_mixed(const struct pb_ctx *c, const struct pb_result *p,
			const struct pb_result *n)
{
	const struct pb_mixed_res *pm = &p->mixed, *nm = &n->mixed;
	char title[160], b1[48], b2[48];

	snprintf(title, sizeof(title),
		 "(b) mixed: %zu main-loop ops after %zu untimed prefill ops, %.2f %% mean "
		 "nominal occupancy", pm->ops, c->trace.nr_prefill,
		 c->trace.mean_occupancy * 100);
	header(title);
	snprintf(b1, sizeof(b1), "%s%s", fmt_rate(nm->ops_per_s),
		 nm->partial ? " (prefix)" : "");
	row("ops/s (throughput)", fmt_rate(pm->ops_per_s), b1,
	    fmt_x(ratio(pm->ops_per_s, nm->ops_per_s)));
	if (pm->reps > 1) {
		snprintf(b1, sizeof(b1), "%s", fmt_rate(pm->ops_min));
		snprintf(b2, sizeof(b2), "%s", fmt_rate(pm->ops_max));
		snprintf(title, sizeof(title), "  spread of %u reps: min / max", pm->reps);
		row(title, b1, b2, "");
	}
	if (pm->paired_reps) {
		snprintf(title, sizeof(title), "  paired with the baseline's chunks (%u passes)",
			 pm->paired_reps);
		row(title, fmt_rate(pm->paired_ops_per_s), "", fmt_x(mixed_vs_naive(p, n)));
		snprintf(b1, sizeof(b1), "%s", fmt_rate(pm->paired_min));
		snprintf(b2, sizeof(b2), "%s", fmt_rate(pm->paired_max));
		row("    their min / max", b1, b2, "");
	}
	snprintf(b1, sizeof(b1), "%llu / %llu / %llu", (unsigned long long)pm->fails,
		 (unsigned long long)pm->frag_fails, (unsigned long long)pm->missed_fits);
	snprintf(b2, sizeof(b2), "%llu / %llu / %llu", (unsigned long long)nm->fails,
		 (unsigned long long)nm->frag_fails, (unsigned long long)nm->missed_fits);
	row("alloc fails / frag / missed fit", b1, b2, "");
	for (int k = 0; k < PB_NR_OPTYPES; k++) {
		const struct pb_latstat *ps = &pm->lat[k], *ns = &nm->lat[k];
		char what[40];

		snprintf(what, sizeof(what), "%s %s p50 / p99", k < PB_OP_FREE ? "alloc" : "free",
			 cls_label[k % PB_NR_CLS]);
		row(what, fmt_pct(ps), fmt_pct(ns), "");
		snprintf(what, sizeof(what), "  ops/s (n / sum of latency)");
		row(what, fmt_rate(ps->ops_per_s), fmt_rate(ns->ops_per_s),
		    fmt_x(lat_speedup(ps, ns)));
	}
}

static void human_frag(const struct pb_ctx *c, const struct pb_result *p,
		       const struct pb_result *n)
{
	const struct pb_frag_res *pf = &p->frag, *nf = &n->frag;
	double nfr = (double)c->nr_frames;
	double p0 = per_s(nfr, pf->c0_s), n0 = per_s(nfr, nf->c0_s);
	double p1 = per_s(nfr / 2, pf->c1_s), n1 = per_s(nfr / 2, nf->c1_s);
	double d = nfr / 64;
	double p3 = per_s(d, pf->c3_s), n3 = per_s(d, nf->c3_s);
	char b1[48], b2[48];

	header("(c) fragmented: c0 every frame as A64K(1), c1 free the odd frames, "
	       "c2 1000 x C2M (must fail), c3 D2M until full");
	row("c0 time", fmt_secs(pf->c0_s, false), fmt_secs(nf->c0_s, nf->c0_extrapolated),
	    fmt_x(ratio(nf->c0_s, pf->c0_s)));
	row("c0 ops/s", fmt_rate(p0), fmt_rate(n0), "");
	row("c0 p50 / p99", fmt_pct(&pf->c0), fmt_pct(&nf->c0), "");
	row("c1 ops/s", fmt_rate(p1), fmt_rate(n1), fmt_x(ratio(p1, n1)));
	row("c1 p50 / p99", fmt_pct(&pf->c1), fmt_pct(&nf->c1), "");
	snprintf(b1, sizeof(b1), "%llu", (unsigned long long)pf->c2_successes);
	snprintf(b2, sizeof(b2), "%llu", (unsigned long long)nf->c2_successes);
	row("c2 C2M that succeeded (want 0)", b1, b2, "");
	row("c2 p50 / p99", fmt_pct(&pf->c2), fmt_pct(&nf->c2),
	    fmt_x(ratio((double)nf->c2.p50, (double)pf->c2.p50)));
	row("c3 time", fmt_secs(pf->c3_s, false), fmt_secs(nf->c3_s, nf->c3_extrapolated),
	    fmt_x(ratio(nf->c3_s, pf->c3_s)));
	row("c3 ops/s", fmt_rate(p3), fmt_rate(n3), "");
	row("c3 p50 / p99", fmt_pct(&pf->c3), fmt_pct(&nf->c3), "");
	snprintf(b1, sizeof(b1), "%llu", (unsigned long long)pf->c3_fails);
	snprintf(b2, sizeof(b2), "%llu", (unsigned long long)nf->c3_fails);
	row("c3 D2M that failed (want 0)", b1, b2, "");
	if (nf->c0_extrapolated)
		printf("  ~ naive c0: only the first %llu allocations were timed, scaled by "
		       "(%llu / %llu)^2 (first fit from frame 0 is quadratic); the rest was "
		       "taken untimed with a cursor, leaving the same bitmap.\n",
		       (unsigned long long)nf->c0_timed, (unsigned long long)c->nr_frames,
		       (unsigned long long)nf->c0_timed);
	if (nf->c3_extrapolated)
		printf("  ~ naive c3 (--quick): first %llu D2M timed, scaled quadratically.\n",
		       (unsigned long long)nf->c3_timed);
}

static void count_row(const char *what, uint64_t p, uint64_t n)
{
	char b1[24], b2[24];

	snprintf(b1, sizeof(b1), "%llu", (unsigned long long)p);
	snprintf(b2, sizeof(b2), "%llu", (unsigned long long)n);
	row(what, b1, b2, "");
}

static void human_stress(const struct pb_ctx *c, const struct pb_result *p,
			 const struct pb_result *n)
{
	const struct pb_mixed_res *ps = &p->stress, *ns = &n->stress;
	char title[200];

	snprintf(title, sizeof(title),
		 "(d) stress (not in the reference): the mixed generator capped at %u %% instead "
		 "of 95 %%, %zu main-loop ops, %.2f %% mean nominal occupancy; every failure "
		 "classified by the shadow", PB_STRESS_HI_PCT, ps->ops,
		 c->stress.mean_occupancy * 100);
	header(title);
	count_row("failed allocations", ps->fails, ns->fails);
	for (int k = 0; k < PB_NR_CLS; k++) {
		char what[40];

		snprintf(what, sizeof(what), "  of them %s", cls_label[k]);
		count_row(what, ps->fails_cls[k], ns->fails_cls[k]);
	}
	count_row("frag fails (free >= request)", ps->frag_fails, ns->frag_fails);
	count_row("  discontiguous ones", ps->frag_fails_discontig, ns->frag_fails_discontig);
	count_row("missed fits (want 0)", ps->missed_fits, ns->missed_fits);
}

static void meta_row(const char *what, int64_t p, int64_t n, double gib, bool no_naive)
{
	char b1[48], b2[48];

	snprintf(b1, sizeof(b1), "%lld B (%.0f/GiB)", (long long)p, (double)p / gib);
	snprintf(b2, sizeof(b2), "%lld B (%.0f/GiB)", (long long)n, (double)n / gib);
	row(what, b1, no_naive ? "-" : b2, "");
}

static void human_memory(const struct pb_ctx *c, const struct pb_result *p,
			 const struct pb_result *n)
{
	double gib = device_gib(c);
	char b[48];

	header("metadata: allocator heap bytes (mallinfo2 delta since create)");
	bool nn = c->opt.pma_only;

	meta_row("empty", p->meta_empty, n->meta_empty, gib, nn);
	meta_row("after (a) fill", p->meta_fill, n->meta_fill, gib, nn);
	meta_row("peak in (b) mixed", p->meta_mixed_peak, n->meta_mixed_peak, gib, nn);
	meta_row("peak in (c) fragmented", p->meta_frag_peak, n->meta_frag_peak, gib, nn);
	meta_row("max", meta_max(p), meta_max(n), gib, nn);
	printf("\npeak RSS (ru_maxrss; includes %.1f MB of harness buffers, all pre-faulted)\n",
	       (double)c->harness_bytes / 1e6);
	snprintf(b, sizeof(b), "%.1f MB", (double)p->rss_fill / 1e6);
	printf("  after pma fill %s, pma mixed %.1f MB, pma fragmented %.1f MB; "
	       "whole run (naive included) %.1f MB\n", b, (double)p->rss_mixed / 1e6,
	       (double)p->rss_frag / 1e6, (double)pb_peak_rss() / 1e6);
}

static void human_targets(const struct pb_ctx *c, const struct pb_result *p,
			  const struct pb_result *n)
{
	struct target t[8];
	unsigned int nt = targets(c, p, n, t), met = 0;

	printf("\ntargets\n");
	for (unsigned int i = 0; i < nt; i++) {
		printf("  %-32s %14.3f %-9s %s\n", t[i].what, t[i].value, t[i].unit,
		       t[i].met ? "met" : "MISSED");
		met += t[i].met;
	}
	printf("  %u of %u met%s\n", met, nt,
	       n->mixed.partial ? " (--quick: the naive ratio uses a prefix of the trace)" : "");
}

void pb_report_human(const struct pb_ctx *c, const struct pb_result *p,
		     const struct pb_result *n)
{
	printf("pma_bench: %.0f GiB = %llu frames of 64 KiB, seed %llu, single thread%s%s\n",
	       device_gib(c), (unsigned long long)c->nr_frames, (unsigned long long)PB_SEED,
	       c->opt.quick ? ", --quick" : "", c->opt.pma_only ? ", --pma-only (no baseline)" : "");
	printf("generator: %zu ops (%zu prefill), trace hash 0x%016llx: matches the reference "
	       "(counts, forced frees, occupancy, first ops, hash)\n", c->trace.nr_ops,
	       c->trace.nr_prefill, (unsigned long long)c->trace.hash);
	char cpu[200];

	printf("machine: %s, %ld CPUs; %s\n", bench_cpu_describe(cpu, sizeof(cpu)), bench_cpu_cores(),
	       c->pinned_cpu >= 0 ? "pinned to one CPU" : "not pinned");
	printf("timing: throughput = whole segments, no per-call clock (pma: one warm-up, then "
	       "median of %u runs, naive: 1); latency = clock_gettime pair per call, which alone costs "
	       "p50 %llu ns / p99 %llu ns\n", c->opt.reps, (unsigned long long)c->timer_p50,
	       (unsigned long long)c->timer_p99);
	printf("harness floor: %.1f ns per mixed op (the trace replayed through a backend that "
	       "does nothing; included in every ops/s)\n", c->harness_ns_per_op);
	human_fill(c, p, n);
	human_mixed(c, p, n);
	human_frag(c, p, n);
	human_stress(c, p, n);
	human_memory(c, p, n);
	human_targets(c, p, n);
	printf("\nverification: shadow bitmap on every call of the latency runs%s; problems: "
	       "pma %llu, naive %llu%s%s\n", c->opt.verify ? " and the throughput runs" : "",
	       (unsigned long long)p->problems, (unsigned long long)n->problems,
	       p->problems ? "; first: " : "", p->problems ? p->first_problem : "");
	if (n->problems)
		printf("  naive first problem: %s\n", n->first_problem);
}

/* --- JSON ------------------------------------------------------------------------------- */

struct json {
	bool first;
};

static void json_key(struct json *j, const char *fmt, va_list ap)
{
	printf("%s\n  \"", j->first ? "{" : ",");
	j->first = false;
	vprintf(fmt, ap);
	printf("\": ");
}

__attribute__((format(printf, 3, 4)))
static void jnum(struct json *j, double v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_key(j, fmt, ap);
	va_end(ap);
	if (v == (double)(int64_t)v && v < 9e15 && v > -9e15)
		printf("%lld", (long long)v);
	else
		printf("%.6g", v);
}

__attribute__((format(printf, 3, 4)))
static void jbool(struct json *j, bool v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_key(j, fmt, ap);
	va_end(ap);
	printf("%s", v ? "true" : "false");
}

__attribute__((format(printf, 3, 4)))
static void jstr(struct json *j, const char *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_key(j, fmt, ap);
	va_end(ap);
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* Latency keys of one op type; none if it was not measured per call. */
static void json_lat(struct json *j, const char *pre, const char *name,
		     const struct pb_latstat *s)
{
	if (!s->n)
		return;
	jnum(j, (double)s->p50, "%s%s_p50_ns", pre, name);
	jnum(j, (double)s->p99, "%s%s_p99_ns", pre, name);
	jnum(j, (double)s->max, "%s%s_max_ns", pre, name);
	jnum(j, s->ops_per_s, "%s%s_lat_ops_per_s", pre, name);
}

/* Every figure of one backend, keys prefixed "" (pma) or "naive_". */
static void json_backend(struct json *j, const struct pb_ctx *c, const struct pb_result *r,
			 const char *pre)
{
	const struct pb_fill_res *f = &r->fill;
	const struct pb_mixed_res *m = &r->mixed;
	const struct pb_frag_res *g = &r->frag;
	double gib = device_gib(c), nfr = (double)c->nr_frames;
	char name[32];

	jnum(j, (double)f->allocs, "%sfill_c2m_allocs", pre);
	jnum(j, per_s((double)f->allocs, f->alloc_s), "%sfill_alloc_ops_per_s", pre);
	jnum(j, per_s((double)f->allocs, f->free_s), "%sfill_free_ops_per_s", pre);
	json_lat(j, pre, "fill_alloc", &f->alloc);
	json_lat(j, pre, "fill_free", &f->free);
	jnum(j, (double)f->fail_ns, "%sfill_failing_c2m_ns", pre);

	jnum(j, m->ops_per_s, "%smixed_ops_per_s", pre);
	jnum(j, m->ops_min, "%smixed_ops_per_s_min", pre);
	jnum(j, m->ops_max, "%smixed_ops_per_s_max", pre);
	/* The spread of the repetitions, relative to the median: how far to trust one run. */
	jnum(j, m->ops_per_s > 0 ? (m->ops_max - m->ops_min) / m->ops_per_s * 100 : 0,
	     "%smixed_spread_pct", pre);
	jnum(j, m->reps, "%smixed_reps", pre);
	jnum(j, (double)m->ops, "%smixed_ops", pre);
	jbool(j, m->partial, "%smixed_partial", pre);
	jnum(j, (double)m->fails, "%smixed_alloc_failures", pre);
	jnum(j, (double)m->frag_fails, "%smixed_frag_failures", pre);
	jnum(j, (double)m->frag_fails_discontig, "%smixed_discontig_frag_failures", pre);
	jnum(j, (double)m->missed_fits, "%smixed_missed_fits", pre);
	jnum(j, (double)m->skipped_frees, "%smixed_skipped_frees", pre);
	for (int k = 0; k < PB_NR_OPTYPES && m->has_lat; k++) {
		snprintf(name, sizeof(name), "%s_%s", cls_name[k % PB_NR_CLS],
			 k < PB_OP_FREE ? "alloc" : "free");
		json_lat(j, pre, name, &m->lat[k]);
	}

	jnum(j, g->c0_s, "%sfill_64k_s", pre);
	jbool(j, g->c0_extrapolated, "%sfill_64k_extrapolated", pre);
	json_lat(j, pre, "frag_c0", &g->c0);
	jnum(j, per_s(nfr / 2, g->c1_s), "%sfrag_c1_ops_per_s", pre);
	json_lat(j, pre, "frag_c1", &g->c1);
	jnum(j, (double)g->c2_successes, "%sfrag_c2_successes", pre);
	json_lat(j, pre, "frag_c2", &g->c2);
	jnum(j, g->c3_s, "%sfrag_c3_s", pre);
	jbool(j, g->c3_extrapolated, "%sfrag_c3_extrapolated", pre);
	jnum(j, per_s(nfr / 64, g->c3_s), "%sfrag_c3_ops_per_s", pre);
	json_lat(j, pre, "frag_c3", &g->c3);
	jnum(j, (double)g->c3_fails, "%sfrag_c3_failures", pre);

	jnum(j, (double)r->stress.fails, "%sstress_alloc_failures", pre);
	for (int k = 0; k < PB_NR_CLS; k++)
		jnum(j, (double)r->stress.fails_cls[k], "%sstress_%s_failures", pre, cls_name[k]);
	jnum(j, (double)r->stress.frag_fails, "%sstress_frag_failures", pre);
	jnum(j, (double)r->stress.frag_fails_discontig, "%sstress_discontig_frag_failures", pre);
	jnum(j, (double)r->stress.missed_fits, "%sstress_missed_fits", pre);

	jnum(j, (double)r->meta_empty, "%smetadata_bytes_empty", pre);
	jnum(j, (double)r->meta_fill, "%smetadata_bytes_fill", pre);
	jnum(j, (double)r->meta_mixed_peak, "%smetadata_bytes_mixed_peak", pre);
	jnum(j, (double)r->meta_frag_peak, "%smetadata_bytes_frag_peak", pre);
	jnum(j, (double)meta_max(r) / gib, "%smetadata_bytes_per_gib_max", pre);
	jnum(j, (double)r->problems, "%sproblems", pre);
	jstr(j, r->first_problem, "%sfirst_problem", pre);
}

void pb_report_json(const struct pb_ctx *c, const struct pb_result *p,
		    const struct pb_result *n)
{
	struct json j = { .first = true };
	struct target t[8];
	unsigned int nt = targets(c, p, n, t), met = 0;
	char hash[24], cpu[160];
	int family, id;

	snprintf(hash, sizeof(hash), "0x%016llx", (unsigned long long)c->trace.hash);
	jstr(&j, hash, "mixed_trace_hash");
	jbool(&j, true, "trace_checks_ok");
	jnum(&j, (double)(c->nr_frames * PB_FRAME_SIZE), "device_bytes");
	jbool(&j, c->opt.quick, "quick");
	jbool(&j, c->opt.verify, "verify");
	jbool(&j, c->opt.pma_only, "pma_only");
	jnum(&j, c->opt.reps, "reps");
	jstr(&j, bench_cpu_model(cpu, sizeof(cpu)), "cpu_model");
	jnum(&j, (double)bench_cpu_cores(), "cpu_cores");
	bench_cpu_id(&family, &id);
	jnum(&j, family, "cpu_family");
	jnum(&j, id, "cpu_model_id");
	jnum(&j, c->pinned_cpu, "pinned_cpu");
	jnum(&j, (double)c->timer_p50, "timer_pair_p50_ns");
	jnum(&j, (double)c->timer_p99, "timer_pair_p99_ns");
	jnum(&j, c->harness_ns_per_op, "harness_ns_per_op");
	jnum(&j, (double)p->mixed.lat[PB_OP_ALLOC + PB_CLS_C2M].p99, "c2m_alloc_p99_ns");
	jnum(&j, (double)p->mixed.lat[PB_OP_ALLOC + PB_CLS_C32M].p99, "c32m_alloc_p99_ns");
	jnum(&j, mixed_vs_naive(p, n), "mixed_vs_naive");
	jnum(&j, p->mixed.paired_ops_per_s, "mixed_paired_ops_per_s");
	jnum(&j, p->mixed.paired_min, "mixed_paired_ops_per_s_min");
	jnum(&j, p->mixed.paired_max, "mixed_paired_ops_per_s_max");
	jnum(&j, p->mixed.paired_reps, "mixed_paired_reps");
	jnum(&j, PB_STRESS_HI_PCT, "stress_cap_pct");
	jnum(&j, (double)p->stress.ops, "stress_ops");
	jnum(&j, c->stress.mean_occupancy * 100, "stress_mean_nominal_occupancy_pct");
	json_backend(&j, c, p, "");
	json_backend(&j, c, n, "naive_");
	jnum(&j, (double)p->rss_fill, "peak_rss_bytes_after_fill");
	jnum(&j, (double)p->rss_mixed, "peak_rss_bytes_after_mixed");
	jnum(&j, (double)p->rss_frag, "peak_rss_bytes_after_frag");
	jnum(&j, (double)pb_peak_rss(), "peak_rss_bytes");
	for (unsigned int i = 0; i < nt; i++) {
		jbool(&j, t[i].met, "target_%s", t[i].key);
		met += t[i].met;
	}
	jnum(&j, met, "targets_met");
	jnum(&j, nt, "targets_total");
	printf("\n}\n");
}
