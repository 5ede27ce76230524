// SPDX-License-Identifier: MIT
/* The mixed workload generator of doc/bench/pma_bench.md, workload (b): a nominal live set between 50 %
 * and 95 % of the device, driven by splitmix64, emitted as an op trace that every backend
 * replays. The generator assumes every allocation succeeds; replay skips the frees of
 * allocations that failed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/compiler.h"
#include "pb.h"

#define FNV64_OFFSET	0xcbf29ce484222325ull
#define FNV64_PRIME	0x100000001b3ull

const struct pb_req pb_cls_req[PB_NR_CLS] = {
	[PB_CLS_A64K]  = { 1, 64ull << 10, false },	/* count is k */
	[PB_CLS_C2M]   = { 1, 2ull << 20, true },
	[PB_CLS_C32M]  = { 16, 2ull << 20, true },
	[PB_CLS_D256M] = { 128, 2ull << 20, false },
};

uint64_t pb_rng_next(struct pb_rng *r)
{
	uint64_t z;

	r->state += 0x9E3779B97F4A7C15ull;
	z = r->state;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* rnd(n) of the reference: plain modulo, no rejection sampling (the hash depends on it). */
static uint64_t rnd(struct pb_rng *r, uint64_t n)
{
	return pb_rng_next(r) % n;
}

/* A nominal live allocation. */
struct live {
	uint32_t id, slot;
	uint8_t cls, k;
	uint32_t frames;
};

/* Generator state; the live array order matters (swap-with-last removal picks victims). */
struct gen {
	struct pb_rng rng;
	struct pb_trace *t;
	struct live *live;
	size_t nlive;
	uint64_t live_frames;
	uint32_t next_id;
	uint32_t *free_slots;	/* stack of slots given back */
	size_t nfree_slots;
	uint32_t next_slot;
	size_t cap;
};

/* draw(): 1 or 2 PRNG values -> class (and k). */
static void gen_draw(struct gen *g, uint8_t *cls, uint8_t *k)
{
	uint64_t u = rnd(&g->rng, 100);

	*k = 1;
	if (u < 40) {
		*cls = PB_CLS_A64K;
		*k = (uint8_t)(1 + rnd(&g->rng, 16));
	} else if (u < 75) {
		*cls = PB_CLS_C2M;
	} else if (u < 95) {
		*cls = PB_CLS_C32M;
	} else {
		*cls = PB_CLS_D256M;
	}
}

static uint32_t cls_frames(uint8_t cls, uint8_t k)
{
	struct pb_req r = pb_req_of(cls, k);

	return (uint32_t)pb_req_frames(&r);
}

static uint64_t fnv_byte(uint64_t h, uint8_t b)
{
	return (h ^ b) * FNV64_PRIME;
}

/* The 7 hashed bytes: is_alloc, cls, k, id (LE); FREE hashes cls = k = 0. */
static uint64_t fnv_op(uint64_t h, const struct pb_op *op)
{
	h = fnv_byte(h, op->is_alloc);
	h = fnv_byte(h, op->is_alloc ? op->cls : 0);
	h = fnv_byte(h, op->is_alloc ? op->k : 0);
	for (int i = 0; i < 4; i++)
		h = fnv_byte(h, (uint8_t)(op->id >> (8 * i)));
	return h;
}

static void gen_push(struct gen *g, const struct pb_op *op)
{
	VGPU_ASSERT(g->t->nr_ops < g->cap);
	g->t->ops[g->t->nr_ops++] = *op;
	g->t->hash = fnv_op(g->t->hash, op);
}

static void gen_alloc(struct gen *g, uint8_t cls, uint8_t k)
{
	struct live *l = &g->live[g->nlive++];
	struct pb_op op;

	l->id = g->next_id++;
	l->slot = g->nfree_slots ? g->free_slots[--g->nfree_slots] : g->next_slot++;
	l->cls = cls;
	l->k = k;
	l->frames = cls_frames(cls, k);
	g->live_frames += l->frames;
	op = (struct pb_op){ .id = l->id, .slot = l->slot, .is_alloc = 1, .cls = cls, .k = k };
	gen_push(g, &op);
	if (g->nlive > g->t->nr_slots)
		g->t->nr_slots = g->nlive;
}

static void gen_free(struct gen *g, size_t i)
{
	struct live *l = &g->live[i];
	struct pb_op op = { .id = l->id, .slot = l->slot, .is_alloc = 0, .cls = l->cls, .k = l->k };

	gen_push(g, &op);
	g->live_frames -= l->frames;
	g->free_slots[g->nfree_slots++] = l->slot;
	*l = g->live[--g->nlive];
}

/* One main-loop step; returns the number of ops it emitted. */
static size_t gen_step(struct gen *g, uint64_t lo, uint64_t hi, size_t budget)
{
	size_t emitted = 0;
	uint8_t cls, k;

	if (rnd(&g->rng, 100) < 60) {
		gen_draw(g, &cls, &k);
		while (g->live_frames + cls_frames(cls, k) > hi && emitted < budget) {
			VGPU_ASSERT(g->nlive);
			gen_free(g, rnd(&g->rng, g->nlive));
			g->t->forced_frees++;
			g->t->frees++;
			emitted++;
		}
		if (emitted < budget) {
			gen_alloc(g, cls, k);
			g->t->main_allocs++;
			g->t->main_allocs_cls[cls]++;
			emitted++;
		}
		return emitted;
	}
	VGPU_ASSERT(g->nlive);
	size_t i = rnd(&g->rng, g->nlive);

	if (g->live_frames - g->live[i].frames >= lo) {
		gen_free(g, i);
		g->t->frees++;
	} else {
		gen_draw(g, &cls, &k);
		gen_alloc(g, cls, k);
		g->t->main_allocs++;
		g->t->main_allocs_cls[cls]++;
	}
	return 1;
}

/* Emit ops until @main_ops main-loop ops exist; occupancy is sampled after every op. */
static void gen_main(struct gen *g, uint64_t nr_frames, size_t main_ops, unsigned int hi_pct)
{
	uint64_t lo = nr_frames / 2, hi = nr_frames * hi_pct / 100;
	double occ_sum = 0;
	size_t done = 0;

	while (done < main_ops) {
		size_t before = g->t->nr_ops;
		size_t n = gen_step(g, lo, hi, main_ops - done);

		done += n;
		/* The occupancy after each emitted op; forced frees are ops of their own, so
		 * replay the step's frame deltas op by op. */
		uint64_t f = g->live_frames;
		for (size_t j = g->t->nr_ops; j > before; j--) {
			const struct pb_op *op = &g->t->ops[j - 1];

			occ_sum += (double)f / (double)nr_frames;
			f += op->is_alloc ? -(uint64_t)cls_frames(op->cls, op->k)
					  : cls_frames(op->cls, op->k);
		}
	}
	g->t->mean_occupancy = main_ops ? occ_sum / (double)main_ops : 0;
	g->t->end_occupancy = (double)g->live_frames / (double)nr_frames;
	g->t->end_live = g->nlive;
}

int pb_trace_generate(struct pb_trace *t, uint64_t seed, uint64_t nr_frames, size_t main_ops,
		      unsigned int hi_pct)
{
	struct gen g = { .rng = { seed }, .t = t };
	uint8_t cls, k;

	memset(t, 0, sizeof(*t));
	t->hash = FNV64_OFFSET;
	/* Every allocation is at least one frame, so live count <= frames; the trace holds at
	 * most the prefill (<= LO frames) plus main_ops. */
	g.cap = nr_frames / 2 + main_ops + 1;
	t->ops = malloc(g.cap * sizeof(*t->ops));
	g.live = malloc(nr_frames * sizeof(*g.live));
	g.free_slots = malloc(nr_frames * sizeof(*g.free_slots));
	if (!t->ops || !g.live || !g.free_slots) {
		free(t->ops);
		free(g.live);
		free(g.free_slots);
		t->ops = NULL;
		return -ENOMEM;
	}
	while (g.live_frames < nr_frames / 2) {
		gen_draw(&g, &cls, &k);
		gen_alloc(&g, cls, k);
	}
	t->nr_prefill = t->nr_ops;
	gen_main(&g, nr_frames, main_ops, hi_pct);
	free(g.live);
	free(g.free_slots);
	return 0;
}

void pb_trace_release(struct pb_trace *t)
{
	free(t->ops);
	t->ops = NULL;
}

/* The reference's generator checks for 80 GiB, seed 20240601, 1,000,000 main-loop ops. */
static const struct {
	uint64_t prefill, main_allocs, cls[PB_NR_CLS], frees, forced, end_live, hash;
	double mean_occ, end_occ;
	uint8_t first_cls[8], first_k[8];
} ref = {
	.prefill = 1920,
	.main_allocs = 500904,
	.cls = { 200534, 175303, 100247, 24820 },
	.frees = 499096,
	.forced = 164738,
	.end_live = 3728,
	.hash = 0x6b9c5751b18f8cd9ull,
	.mean_occ = 94.33,
	.end_occ = 94.77,
	.first_cls = { PB_CLS_A64K, PB_CLS_C32M, PB_CLS_D256M, PB_CLS_D256M,
		       PB_CLS_C2M, PB_CLS_C32M, PB_CLS_A64K, PB_CLS_C2M },
	.first_k = { 12, 1, 1, 1, 1, 1, 14, 1 },
};

/* |a - b| < eps without libm (benchmarks link no extra libraries). */
static bool near(double a, double b, double eps)
{
	return a - b < eps && b - a < eps;
}

#define CHECK(cond, ...)                                         \
	do {                                                     \
		if (!(cond)) {                                   \
			snprintf(why, len, __VA_ARGS__);         \
			return -EPROTO;                          \
		}                                                \
	} while (0)

int pb_trace_check(const struct pb_trace *t, char *why, size_t len)
{
	CHECK(t->nr_prefill == ref.prefill, "prefill ops %zu, want %llu", t->nr_prefill,
	      (unsigned long long)ref.prefill);
	CHECK(t->main_allocs == ref.main_allocs, "main-loop allocs %llu, want %llu",
	      (unsigned long long)t->main_allocs, (unsigned long long)ref.main_allocs);
	for (int c = 0; c < PB_NR_CLS; c++)
		CHECK(t->main_allocs_cls[c] == ref.cls[c], "class %d allocs %llu, want %llu", c,
		      (unsigned long long)t->main_allocs_cls[c], (unsigned long long)ref.cls[c]);
	CHECK(t->frees == ref.frees, "frees %llu, want %llu", (unsigned long long)t->frees,
	      (unsigned long long)ref.frees);
	CHECK(t->forced_frees == ref.forced, "forced frees %llu, want %llu",
	      (unsigned long long)t->forced_frees, (unsigned long long)ref.forced);
	CHECK(t->end_live == ref.end_live, "live at end %zu, want %llu", t->end_live,
	      (unsigned long long)ref.end_live);
	CHECK(near(t->mean_occupancy * 100, ref.mean_occ, 0.005),
	      "mean occupancy %.4f %%, want %.2f %%", t->mean_occupancy * 100, ref.mean_occ);
	CHECK(near(t->end_occupancy * 100, ref.end_occ, 0.005),
	      "end occupancy %.4f %%, want %.2f %%", t->end_occupancy * 100, ref.end_occ);
	for (int i = 0; i < 8; i++)
		CHECK(t->ops[i].is_alloc && t->ops[i].cls == ref.first_cls[i] &&
		      t->ops[i].k == ref.first_k[i], "op %d is cls %u k %u, want cls %u k %u", i,
		      t->ops[i].cls, t->ops[i].k, ref.first_cls[i], ref.first_k[i]);
	CHECK(t->hash == ref.hash, "trace hash 0x%016llx, want 0x%016llx",
	      (unsigned long long)t->hash, (unsigned long long)ref.hash);
	return 0;
}
