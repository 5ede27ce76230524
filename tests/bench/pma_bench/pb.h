/* SPDX-License-Identifier: MIT */
/* pb.h - internals of pma_bench: the allocator benchmark of
 * doc/bench/pma_bench.md (fill, mixed, fragmented on 80 GiB) run against the pma
 * and against a naive flat-bitmap baseline in the same process.
 *
 * Pieces: the workload generator (gen.c), the backends behind one small interface
 * (backend_pma.c, naive.c), the shadow-bitmap verifier (shadow.c), latency statistics
 * (stats.c) and the phase driver with its table / JSON output (main.c). */
#ifndef PMA_BENCH_PB_H
#define PMA_BENCH_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PB_FRAME_SIZE		(64ull << 10)
#define PB_FRAMES_PER_2M	32u
#define PB_SEED			20240601ull
#define PB_MIXED_MAIN_OPS	1000000u
#define PB_MIXED_HI_PCT		95u	/* nominal occupancy cap of the reference trace */
/* (d) stress, not in the reference: the same generator capped at 99 % (its §6 suggests a
 * harder cap to separate allocators by fragmentation failures). */
#define PB_STRESS_HI_PCT	99u
#define PB_STRESS_MAIN_OPS	200000u
#define PB_STRESS_QUICK_OPS	50000u
#define PB_MAX_PAGES		128u	/* largest page list of one request (D256M) */

/* --- requests ------------------------------------------------------------------------- */
/* Allocation classes of the mixed draw, in hash order (cls byte of the trace hash). */
enum pb_cls {
	PB_CLS_A64K,		/* k discontiguous 64 KiB pages, k in 1..16 */
	PB_CLS_C2M,		/* one 2 MiB page */
	PB_CLS_C32M,		/* 16 contiguous 2 MiB pages */
	PB_CLS_D256M,		/* 128 discontiguous 2 MiB pages */
	PB_NR_CLS,
};

/* One request as the allocators see it. */
struct pb_req {
	uint32_t count;		/* pages */
	uint64_t page_size;	/* bytes: 64 KiB or 2 MiB */
	bool contig;		/* all pages form one run */
};

extern const struct pb_req pb_cls_req[PB_NR_CLS];

/* The request of class @cls (@k pages for A64K); inline because replay calls it per op. */
static inline struct pb_req pb_req_of(unsigned int cls, unsigned int k)
{
	struct pb_req r = pb_cls_req[cls];

	if (cls == PB_CLS_A64K)
		r.count = k;
	return r;
}
/* Frames covered by @r. */
static inline uint64_t pb_req_frames(const struct pb_req *r)
{
	return r->count * (r->page_size / PB_FRAME_SIZE);
}

/* --- workload generator (gen.c) ------------------------------------------------------- */
struct pb_rng {
	uint64_t state;
};

/* splitmix64 step. */
uint64_t pb_rng_next(struct pb_rng *r);

/* One op of the mixed trace. FREE ops carry the freed allocation's class and k too (they
 * are not hashed: the reference hashes FREE as cls = 0, k = 0). */
struct pb_op {
	uint32_t id;		/* allocation id (of the allocation freed, for FREE) */
	uint32_t slot;		/* live-slot index holding the page list while live */
	uint8_t is_alloc;
	uint8_t cls;
	uint8_t k;		/* A64K pages; 1 for the other classes */
};

/* The mixed trace and the figures the reference gives to check a generator against. */
struct pb_trace {
	struct pb_op *ops;
	size_t nr_ops;			/* prefill + main loop */
	size_t nr_prefill;
	size_t nr_slots;		/* most allocations live at once */
	uint64_t hash;			/* FNV-1a-64, 7 bytes per op */
	uint64_t main_allocs;
	uint64_t main_allocs_cls[PB_NR_CLS];
	uint64_t frees;
	uint64_t forced_frees;
	double mean_occupancy;		/* nominal, averaged over main-loop ops */
	double end_occupancy;
	size_t end_live;
};

/* Build the mixed trace of the reference on @nr_frames frames with @main_ops main-loop ops
 * and the nominal live set capped at @hi_pct % (the reference: 95). 0 or -ENOMEM. */
int pb_trace_generate(struct pb_trace *t, uint64_t seed, uint64_t nr_frames, size_t main_ops,
		      unsigned int hi_pct);
/* Compare @t with the reference's figures; 0, or -EPROTO with the first mismatch in @why. */
int pb_trace_check(const struct pb_trace *t, char *why, size_t len);
/* Free the op array. */
void pb_trace_release(struct pb_trace *t);

/* --- backends ------------------------------------------------------------------------- */
/* The five calls the reference harness puts behind every allocator. Pages are absolute
 * byte addresses; alloc is all-or-nothing and returns 0 or -errno. */
struct pb_backend {
	const char *name;
	void *(*create)(uint64_t nr_frames);
	void (*destroy)(void *be);
	int (*alloc)(void *be, const struct pb_req *r, uint64_t *pages);
	int (*free)(void *be, const struct pb_req *r, const uint64_t *pages);
	/* Heap bytes the allocator owns now (mallinfo2 delta since its create). */
	int64_t (*metadata)(void *be);
	/* Bytes allocatable now, to compare with the shadow. */
	uint64_t (*free_bytes)(void *be);
	/* Internal consistency check (0 or -errno); NULL if the backend has none. */
	int (*check)(void *be);
};

extern const struct pb_backend pb_backend_pma;
extern const struct pb_backend pb_backend_naive;
extern const struct pb_backend pb_backend_null;	/* does nothing: the harness floor */

/* Naive only: take frame @frame directly (the untimed cursor fill of the fragmented
 * phase, which leaves the same bitmap as first fit would). */
void pb_naive_take_frame(void *be, uint64_t frame);

/* Heap bytes in use right now (all arenas, mmapped chunks included). */
int64_t pb_heap_bytes(void);

/* --- shadow verifier (shadow.c) ------------------------------------------------------- */
struct pb_shadow {
	uint64_t *map;			/* 1 bit per frame: allocated */
	uint64_t nr_frames;
	uint64_t used_frames;
	uint64_t violations;
	char first_violation[200];
};

/* An empty shadow of @nr_frames; 0 or -ENOMEM. */
int pb_shadow_init(struct pb_shadow *s, uint64_t nr_frames);
/* Free the map. */
void pb_shadow_release(struct pb_shadow *s);
/* Forget every allocation and every violation (start of a run). */
void pb_shadow_reset(struct pb_shadow *s);
/* Check a successful allocation (range, alignment, contiguity, no overlap with live
 * memory) and record it; false and one more violation if it is wrong. */
bool pb_shadow_alloc(struct pb_shadow *s, const struct pb_req *r, const uint64_t *pages);
/* Check that the pages being freed are exactly live ones and release them. */
bool pb_shadow_free(struct pb_shadow *s, const struct pb_req *r, const uint64_t *pages);
/* Fully free 2 MiB-aligned groups. */
uint64_t pb_shadow_free_2m(const struct pb_shadow *s);
/* True if @r would fit the free frames as they lie (aligned pages, one run if contiguous):
 * a failure then is the allocator's fault. */
bool pb_shadow_fits(const struct pb_shadow *s, const struct pb_req *r);
/* True if at least as many frames as @r covers are free (a failure then is a
 * fragmentation failure as doc/bench/pma_bench.md defines it, not a true out-of-memory). */
static inline bool pb_shadow_enough(const struct pb_shadow *s, const struct pb_req *r)
{
	return s->nr_frames - s->used_frames >= pb_req_frames(r);
}

/* --- latency statistics (stats.c) ----------------------------------------------------- */
/* Latencies of one op type, in ns. */
struct pb_lat {
	uint32_t *v;
	size_t n, cap;
	uint64_t sum;
};

/* Summary of a pb_lat (nearest-rank percentiles). */
struct pb_latstat {
	size_t n;
	uint64_t p50, p99, p999, max;
	double ops_per_s;		/* n / sum of latencies */
};

/* Carve @cap entries for @l out of the preallocated arena (so no malloc while timing). */
void pb_lat_carve(struct pb_lat *l, size_t cap);
/* Give every carved entry back (start of a phase). */
void pb_lat_arena_reset(void);
/* Allocate and pre-fault the arena of @cap entries; 0 or -ENOMEM. */
int pb_lat_arena_init(size_t cap);
/* Free the arena. */
void pb_lat_arena_release(void);
/* Record one latency (saturating at 4 s; the sum stays exact). */
static inline void pb_lat_add(struct pb_lat *l, uint64_t ns)
{
	if (l->n < l->cap)
		l->v[l->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
	l->sum += ns;
}
/* Sort and summarise. */
struct pb_latstat pb_lat_summary(struct pb_lat *l);
/* Nanoseconds between two clock reads as a double of seconds. */
static inline double pb_secs(uint64_t t0, uint64_t t1)
{
	return (double)(t1 - t0) / 1e9;
}

/* Peak resident set size so far, bytes. */
uint64_t pb_peak_rss(void);

/* --- phases (phases.c) and their results ---------------------------------------------- */
enum {
	PB_PHASE_FILL = 1, PB_PHASE_MIXED = 2, PB_PHASE_FRAG = 4, PB_PHASE_STRESS = 8,
	PB_PHASE_ALL = 15,
};

/* Op types of the mixed latency table. */
enum pb_optype {
	PB_OP_ALLOC = 0,		/* + class */
	PB_OP_FREE = PB_NR_CLS,		/* + class */
	PB_NR_OPTYPES = 2 * PB_NR_CLS,
};

struct pb_opts {
	bool json, quick, verify;
	bool pma_only;			/* skip the baseline (profiling) */
	unsigned int phases;		/* PB_PHASE_* to run (profiling); all by default */
	unsigned int reps;		/* throughput repetitions of the pma (median) */
	int cpu;			/* pin to this CPU, -1: the one it starts on */
	bool no_pin;			/* --no-pin: leave the scheduler free */
};

/* (a) fill: C2M until an allocation fails, then free all in allocation order. */
struct pb_fill_res {
	uint64_t allocs;		/* successes before the first failure */
	double alloc_s, free_s;		/* throughput mode */
	struct pb_latstat alloc, free;	/* latency mode */
	uint64_t fail_ns;		/* the failing attempt, latency mode */
};

/* (b) mixed: the trace, prefill untimed. */
struct pb_mixed_res {
	size_t ops;			/* main-loop ops replayed */
	double secs;			/* throughput mode (median) */
	double ops_per_s;
	double ops_min, ops_max;	/* spread of the throughput repetitions */
	unsigned int reps;		/* timed throughput repetitions (after one warm-up) */
	/* The pma's passes run between chunks of the baseline's timed pass (0: none). */
	double paired_ops_per_s, paired_min, paired_max;
	unsigned int paired_reps;
	bool partial;			/* --quick: a prefix of the trace */
	uint64_t fails;
	uint64_t fails_cls[PB_NR_CLS];
	uint64_t frag_fails;		/* free frames >= request, yet it failed */
	uint64_t frag_fails_discontig;	/* the same, discontiguous requests only */
	uint64_t missed_fits;		/* the shadow shows a fit existed: an allocator bug */
	uint64_t skipped_frees, free_errors;
	bool has_lat;
	struct pb_latstat lat[PB_NR_OPTYPES];
};

/* (c) fragmented: c0 fill by frames, c1 free odd frames, c2 C2M must fail, c3 D2M. */
struct pb_frag_res {
	double c0_s, c1_s, c3_s;	/* throughput mode, or see the flags */
	bool c0_extrapolated;		/* naive: prefix timed, scaled quadratically */
	uint64_t c0_timed;		/* allocations actually timed in c0 */
	bool c3_from_lat;		/* c3_s is the sum of per-op latencies */
	bool c3_extrapolated;
	uint64_t c3_timed;
	uint64_t c0_fails, c2_successes, c3_fails;
	uint64_t c3_frag_fails;		/* free frames >= 32 (always true in c3) */
	struct pb_latstat c0, c1, c2, c3;
};

struct pb_result {
	const struct pb_backend *be;
	struct pb_fill_res fill;
	struct pb_mixed_res mixed;
	struct pb_frag_res frag;
	struct pb_mixed_res stress;	/* (d): failures only */
	/* metadata: allocator heap bytes */
	int64_t meta_empty, meta_fill, meta_mixed_peak, meta_frag_peak;
	uint64_t rss_fill, rss_mixed, rss_frag;	/* ru_maxrss after each phase */
	uint64_t problems;		/* violations and failed expectations */
	char first_problem[240];
};

/* Everything a phase needs, allocated before any timing. */
struct pb_ctx {
	struct pb_opts opt;
	uint64_t nr_frames;
	struct pb_trace trace;
	struct pb_trace stress;		/* (d): the same generator, PB_STRESS_HI_PCT cap */
	struct pb_shadow shadow;
	uint64_t *slot_pages;		/* trace.nr_slots x PB_MAX_PAGES */
	uint8_t *slot_ok;		/* allocation in this slot succeeded */
	/* Set while the baseline runs: the pma's result, whose mixed passes (with their own
	 * slot buffers) run between chunks of the baseline's, so the ratio compares the two
	 * over the same seconds (NULL: not paired). */
	struct pb_result *pair;
	uint64_t *pair_slot_pages;
	uint8_t *pair_slot_ok;
	uint64_t *frame_pages;		/* one page per allocation: fill, c0 */
	uint64_t *odd;			/* c1: indexes into frame_pages */
	uint64_t *d2m_pages;		/* c3 */
	uint64_t timer_p50, timer_p99;	/* cost of the clock pair itself */
	int pinned_cpu;			/* -1: not pinned */
	size_t harness_bytes;		/* trace and buffers, for the RSS figure */
	double harness_ns_per_op;	/* mixed replay through the null backend */
};

/* Run phase (a), (b) or (c) for @res->be in both modes and fill in @res. */
void pb_run_fill(struct pb_ctx *c, struct pb_result *res);
void pb_run_mixed(struct pb_ctx *c, struct pb_result *res);
void pb_run_frag(struct pb_ctx *c, struct pb_result *res);
void pb_run_stress(struct pb_ctx *c, struct pb_result *res);
/* Measure the harness's own cost per mixed op (c->harness_ns_per_op). */
void pb_measure_harness(struct pb_ctx *c);
/* Record a violation or failed expectation (also on stderr). */
void pb_problem(struct pb_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Output (report.c): the tables, or one JSON object and nothing else on stdout. */
void pb_report_human(const struct pb_ctx *c, const struct pb_result *pma,
		     const struct pb_result *naive);
void pb_report_json(const struct pb_ctx *c, const struct pb_result *pma,
		    const struct pb_result *naive);

#endif
