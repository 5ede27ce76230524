// SPDX-License-Identifier: MIT
/* rpc_bench - the RPC path of issue 5, measured against the real vgpu-gsp process:
 *   (a) round trip CPU-RM -> GSP -> reply for 0 B .. 256 KiB, spinning and blocking, with
 *       a bare two-thread SPSC ring ping-pong of 256 B in the same run as the floor;
 *   (b) RM alloc/free/control ops/s with 1..16 client threads, each its own client on its
 *       own VF;
 *   (c) a victim VF's p99 alone and while another VF floods (interleaved, and as
 *       alternating solo/flood pairs);
 *   (d) GSP crash to a working device (replay included).
 * Usage: rpc_bench [--json] [--quick] [--victim (only (c), as JSON)] [--ops (only (b), as JSON)]
 *                  [--no-fair (the GSP client's fair dispatch off, for A/B runs)] */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <vgpu/rm.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/log.h"
#include "common/ring.h"
#include "gpu_model/gpu.h"
#include "pma/pma.h"
#include "rm/gsp/gsp.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm/hw/rm_hw.h"
#include "rm/rm.h"
#include "tests/bench/bench_cpu.h"

#define FLOODERS 1	/* threads of the flooding VF */
/* One VF per RM-ops thread (up to 16), so every thread is its own client on its own VF. */
#define NR_VFS 16
#define VF_SLICE (14ull << 20)	/* 2 MiB aligned; 17 slices fit the 256 MiB device */
#define MAX_OPS_THREADS 16

static bool quick;
static bool no_fair;	/* --no-fair: the GSP client's fair dispatch off (for A/B runs) */

struct pct {
	double p50, p99, p999, max;	/* microseconds */
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static struct pct percentiles(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (struct pct){ v[n / 2] / 1e3, v[(size_t)(n * 0.99)] / 1e3,
			     v[(size_t)(n * 0.999)] / 1e3, v[n - 1] / 1e3 };
}

/* ---- bare ring: the floor ---- */
struct bare {
	struct cmn_ring req, rep;
	_Atomic bool stop;
};

static void *bare_echo(void *arg)
{
	struct bare *b = arg;
	uint8_t msg[256];

	while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
		if (cmn_ring_pop(&b->req, msg))
			continue;
		while (cmn_ring_push(&b->rep, msg, sizeof(msg)))
			cmn_cpu_relax();
	}
	return NULL;
}

static struct pct bench_bare(size_t iters)
{
	size_t bytes = cmn_ring_bytes(64, 256);
	void *m1 = aligned_alloc(4096, bytes), *m2 = aligned_alloc(4096, bytes);
	struct bare b = { 0 };
	uint64_t *lat = malloc(iters * sizeof(*lat));
	uint8_t msg[256] = { 1 };
	pthread_t th;
	struct pct p;

	cmn_ring_format(m1, bytes, 64, 256);
	cmn_ring_format(m2, bytes, 64, 256);
	cmn_ring_attach(&b.req, m1, bytes);
	cmn_ring_attach(&b.rep, m2, bytes);
	pthread_create(&th, NULL, bare_echo, &b);
	for (size_t i = 0; i < iters + iters / 10; i++) {
		uint64_t t0 = cmn_now_ns();

		while (cmn_ring_push(&b.req, msg, sizeof(msg)))
			cmn_cpu_relax();
		while (cmn_ring_pop(&b.rep, msg))
			cmn_cpu_relax();
		if (i >= iters / 10)	/* the first tenth is warm-up */
			lat[i - iters / 10] = cmn_now_ns() - t0;
	}
	atomic_store(&b.stop, true);
	pthread_join(th, NULL);
	p = percentiles(lat, iters);
	free(lat);
	free(m1);
	free(m2);
	return p;
}

/* ---- device ---- */
struct dev {
	struct gpu *gpu;
	struct pma *pma;
	struct rm *rm;
	struct rm_hw hw;	/* the RM's device ops over gpu */
};

static int dev_up(struct dev *d, uint64_t spin_ns, uint64_t gsp_spin_ns)
{
	struct gpu_config gc = { .vram_size = 256ull << 20, .nr_vfs = NR_VFS, .nr_engines = 1 };
	struct pma_region_desc rd = { .base = 0, .size = 256ull << 20, .performance = 1 };
	struct gsp_config gsp = { .spin_ns = spin_ns, .gsp_spin_ns = gsp_spin_ns,
				  .no_fair = no_fair };
	struct rm_config rc = { .gsp = &gsp, .ops = &rm_hw_ops, .ops_ctx = &d->hw };
	int ret;

	if ((ret = gpu_create(&gc, &d->gpu)))
		return ret;
	d->pma = pma_create(NULL);
	if (!d->pma || pma_region_add(d->pma, &rd, NULL, 0) < 0)
		return -ENOMEM;
	d->hw = (struct rm_hw){ .gpu = d->gpu };
	rc.pma = d->pma;
	if ((ret = rm_device_create(&rc, &d->rm)))
		return ret;
	for (unsigned int fn = 1; fn <= NR_VFS; fn++) {
		struct rm_partition p = { .base = fn * VF_SLICE, .size = VF_SLICE };
		if ((ret = rm_vf_partition_set(d->rm, fn, &p)))
			return ret;
	}
	return 0;
}

static void dev_down(struct dev *d)
{
	rm_device_destroy(d->rm);
	gpu_destroy(d->gpu);
	pma_destroy(d->pma);
}

/* ---- (a) round trips ---- */
static const size_t sizes[] = { 0, 256, 4096, 60 << 10, 256 << 10 };

static struct pct bench_rpc(struct gsp *g, unsigned int fn, size_t len, size_t iters)
{
	uint8_t *buf = calloc(1, len + 1);
	uint64_t *lat = malloc(iters * sizeof(*lat));
	uint32_t f = len ? VGPU_RPC_FN_ECHO : VGPU_RPC_FN_NOP;
	struct pct p;
	size_t got;

	for (size_t i = 0; i < iters + iters / 10; i++) {
		uint64_t t0 = cmn_now_ns();
		int ret = gsp_call(g, fn, f, buf, len, buf, len, &got);

		if (ret)
			fprintf(stderr, "rpc_bench: RPC failed: %d\n", ret);
		if (i >= iters / 10)
			lat[i - iters / 10] = cmn_now_ns() - t0;
	}
	p = percentiles(lat, iters);
	free(lat);
	free(buf);
	return p;
}

static size_t iters_for(size_t len, bool spin)
{
	size_t n = len <= 4096 ? 20000 : len <= (60 << 10) ? 3000 : 800;

	if (!spin)
		n /= 4;
	return quick ? n / 10 : n;
}

/* ---- (b) RM ops/s ---- */
/* One per thread, each on its own cache line: the counters are written every loop. */
struct ops_arg {
	struct rm *rm;
	unsigned int fn;
	_Atomic bool *stop;
	pthread_barrier_t *go;
	uint64_t ops;
	uint64_t cpu_ns;	/* the thread's CPU time in the timed loop */
	int err;
} __attribute__((aligned(64)));

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * VGPU_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void *ops_main(void *p)
{
	struct ops_arg *a = p;
	uint32_t hc, hd = 0, hs = 0;
	struct vgpu_rm_quota_info q;

	if (rm_client_alloc(a->rm, a->fn, &hc) ||
	    rm_alloc(a->rm, a->fn, hc, hc, &hd, VGPU_RM_CLASS_DEVICE, NULL, 0) ||
	    rm_alloc(a->rm, a->fn, hc, hd, &hs, VGPU_RM_CLASS_SUBDEVICE, NULL, 0)) {
		a->err = 1;
		pthread_barrier_wait(a->go);
		return NULL;
	}
	/* Every thread set up before the clock starts: the figure is the loop alone. */
	pthread_barrier_wait(a->go);
	a->cpu_ns = thread_cpu_ns();
	while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
		struct vgpu_rm_vidmem_params vp = { .size = 64 << 10 };
		uint32_t hm = 0;
		size_t len = 0;

		if (rm_alloc(a->rm, a->fn, hc, hd, &hm, VGPU_RM_CLASS_MEMORY_VIDMEM, &vp, sizeof(vp)) ||
		    rm_control(a->rm, a->fn, hc, hs, VGPU_RM_CTRL_GET_QUOTA, &q, &len, sizeof(q)) ||
		    rm_free(a->rm, a->fn, hc, hm))
			a->err = 1;
		a->ops += 3;
	}
	a->cpu_ns = thread_cpu_ns() - a->cpu_ns;
	rm_client_free(a->rm, a->fn, hc);
	return NULL;
}

/* One timed run of @threads threads, each its own client on VF 1 + i: ops/s, and in
 * *@cpu_per_op the threads' CPU time per op (ns). Outside load takes CPUs from the threads
 * but adds little to their CPU time, so a CPU time per op that grows with the thread count
 * is the threads' own contention, whatever the load. */
static double ops_run(struct rm *rm, unsigned int threads, double *cpu_per_op)
{
	static struct ops_arg a[MAX_OPS_THREADS];
	pthread_t th[MAX_OPS_THREADS];
	_Atomic bool stop = false;
	pthread_barrier_t go;
	uint64_t t0, total = 0, cpu = 0;
	double secs;

	pthread_barrier_init(&go, NULL, threads + 1);
	for (unsigned int i = 0; i < threads; i++) {
		a[i] = (struct ops_arg){ .rm = rm, .fn = 1 + i % NR_VFS, .stop = &stop, .go = &go };
		pthread_create(&th[i], NULL, ops_main, &a[i]);
	}
	pthread_barrier_wait(&go);
	t0 = cmn_now_ns();
	cmn_sleep_ns(quick ? 100 * VGPU_NSEC_PER_MSEC : 300 * VGPU_NSEC_PER_MSEC);
	atomic_store(&stop, true);
	secs = (cmn_now_ns() - t0) / 1e9;
	for (unsigned int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		total += a[i].ops;
		cpu += a[i].cpu_ns;
		if (a[i].err)
			fprintf(stderr, "rpc_bench: RM op failed in thread %u\n", i);
	}
	pthread_barrier_destroy(&go);
	*cpu_per_op = total ? (double)cpu / total : 0;
	return total / secs;
}

static int cmp_dbl(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

#define OPS_REPS 7

/* The RM ops/s figures per thread count: median of the rounds with their spread, the
 * median CPU time per op, and the median over the rounds of each round's ratio to its
 * one-thread figure. */
struct ops_res {
	double ops[8], lo[8], hi[8], cpu[8], vs1[8];
};

/* Every thread count of @thr, OPS_REPS rounds, the counts interleaved within a round so
 * that outside load falls on all of them alike. The scaling is taken round by round: the
 * speed of one CPU of a virtual machine moves by half from one second to another (what its
 * host runs beside it), and a ratio of figures measured a second apart moves with it. */
static void bench_ops(struct rm *rm, const unsigned int *thr, size_t n, struct ops_res *res)
{
	double v[8][OPS_REPS], c[8][OPS_REPS], x[8][OPS_REPS];
	unsigned int reps = quick ? 1 : OPS_REPS;

	for (unsigned int r = 0; r < reps; r++) {
		for (size_t i = 0; i < n; i++)
			v[i][r] = ops_run(rm, thr[i], &c[i][r]);
		for (size_t i = 0; i < n; i++)
			x[i][r] = v[0][r] > 0 ? v[i][r] / v[0][r] : 0;
	}
	for (size_t i = 0; i < n; i++) {
		qsort(x[i], reps, sizeof(double), cmp_dbl);
		res->vs1[i] = x[i][reps / 2];
		qsort(v[i], reps, sizeof(double), cmp_dbl);
		qsort(c[i], reps, sizeof(double), cmp_dbl);
		res->ops[i] = v[i][reps / 2];
		res->lo[i] = v[i][0];
		res->hi[i] = v[i][reps - 1];
		res->cpu[i] = c[i][reps / 2];
	}
}

/* ---- (c) victim vs flood ---- */
struct flood_arg {
	struct gsp *g;
	unsigned int fn;
	_Atomic bool *stop;
	uint64_t n;
};

static void *flood_main(void *p)
{
	struct flood_arg *a = p;
	uint8_t buf[4096];

	while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
		gsp_call(a->g, a->fn, VGPU_RPC_FN_ECHO, buf, sizeof(buf), buf, sizeof(buf), NULL);
		a->n++;
	}
	return NULL;
}

static struct pct bench_victim(struct gsp *g, unsigned int flooders, uint64_t *flood_rpcs)
{
	struct flood_arg a[4];
	pthread_t th[4];
	_Atomic bool stop = false;
	struct pct p;

	*flood_rpcs = 0;
	for (unsigned int i = 0; i < flooders; i++) {
		a[i] = (struct flood_arg){ .g = g, .fn = 2, .stop = &stop };
		pthread_create(&th[i], NULL, flood_main, &a[i]);
	}
	p = bench_rpc(g, 1, 256, quick ? 2000 : 10000);
	atomic_store(&stop, true);
	for (unsigned int i = 0; i < flooders; i++) {
		pthread_join(th[i], NULL);
		*flood_rpcs += a[i].n;
	}
	return p;
}

/* Solo and flooded alternately, VICTIM_RUNS times; the run with the median ratio is kept,
 * so one unlucky preemption on this 2-CPU machine does not decide the figure, and the
 * spread (lowest and highest ratio) is reported beside it. */
#define VICTIM_RUNS 5

struct victim {
	struct pct solo, flood;
	uint64_t flood_rpcs;
	double ratio_min, ratio_max;
};

static double victim_ratio(const struct pct *f, const struct pct *s)
{
	return f->p99 / s->p99;
}

static void victim_runs(struct gsp *g, struct victim *out)
{
	struct pct s[VICTIM_RUNS], f[VICTIM_RUNS];
	uint64_t n[VICTIM_RUNS];
	int order[VICTIM_RUNS];

	for (int i = 0; i < VICTIM_RUNS; i++) {
		order[i] = i;
		s[i] = bench_victim(g, 0, &n[i]);
		f[i] = bench_victim(g, FLOODERS, &n[i]);
	}
	for (int i = 0; i < VICTIM_RUNS; i++)
		for (int k = i + 1; k < VICTIM_RUNS; k++)
			if (victim_ratio(&f[order[k]], &s[order[k]]) <
			    victim_ratio(&f[order[i]], &s[order[i]])) {
				int t = order[i];
				order[i] = order[k];
				order[k] = t;
			}
	out->solo = s[order[VICTIM_RUNS / 2]];
	out->flood = f[order[VICTIM_RUNS / 2]];
	out->flood_rpcs = n[order[VICTIM_RUNS / 2]];
	out->ratio_min = victim_ratio(&f[order[0]], &s[order[0]]);
	out->ratio_max = victim_ratio(&f[order[VICTIM_RUNS - 1]], &s[order[VICTIM_RUNS - 1]]);
}

/* Interleaved: the flooder stays up and is switched on and off every VICTIM_BLOCK victim
 * samples, solo and flooded blocks alternating; all solo samples are pooled, all flooded
 * ones too. Both then see the same outside load (on a shared machine it changes faster
 * than the 100 ms phases above), so the ratio is the flood's own effect. The first
 * VICTIM_SETTLE samples after each switch are dropped (the flooder starting or draining). */
#define VICTIM_BLOCK	500
#define VICTIM_SETTLE	25

struct gated_flood {
	struct gsp *g;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool on, stop;
	uint64_t n;
};

static void *gated_flood_main(void *p)
{
	struct gated_flood *f = p;
	uint8_t buf[4096] = { 0 };

	pthread_mutex_lock(&f->lock);
	while (!f->stop) {
		if (!f->on) {
			pthread_cond_wait(&f->cv, &f->lock);
			continue;
		}
		pthread_mutex_unlock(&f->lock);
		gsp_call(f->g, 2, VGPU_RPC_FN_ECHO, buf, sizeof(buf), buf, sizeof(buf), NULL);
		pthread_mutex_lock(&f->lock);
		f->n++;
	}
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

static void gate(struct gated_flood *f, bool on, bool stop)
{
	pthread_mutex_lock(&f->lock);
	f->on = on;
	f->stop = stop;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->lock);
}

static void victim_interleaved(struct gsp *g, struct victim *out)
{
	size_t per = quick ? 5000 : 20000, ns = 0, nf = 0;
	uint64_t *solo = malloc(per * sizeof(*solo)), *flood = malloc(per * sizeof(*flood));
	struct gated_flood f = { .g = g };
	uint8_t buf[256] = { 0 };
	pthread_t th;
	size_t got;

	pthread_mutex_init(&f.lock, NULL);
	pthread_cond_init(&f.cv, NULL);
	pthread_create(&th, NULL, gated_flood_main, &f);
	for (unsigned int blk = 0; ns < per || nf < per; blk++) {
		bool on = blk & 1;

		gate(&f, on, false);
		for (size_t i = 0; i < VICTIM_SETTLE + VICTIM_BLOCK; i++) {
			uint64_t t0 = cmn_now_ns();

			if (gsp_call(g, 1, VGPU_RPC_FN_ECHO, buf, sizeof(buf), buf, sizeof(buf), &got))
				fprintf(stderr, "rpc_bench: victim RPC failed\n");
			t0 = cmn_now_ns() - t0;
			if (i < VICTIM_SETTLE)
				continue;
			if (on && nf < per)
				flood[nf++] = t0;
			else if (!on && ns < per)
				solo[ns++] = t0;
		}
	}
	gate(&f, false, true);
	pthread_join(th, NULL);
	out->solo = percentiles(solo, per);
	out->flood = percentiles(flood, per);
	out->flood_rpcs = f.n;
	free(solo);
	free(flood);
}

/* ---- (d) crash to working ---- */
static double bench_crash(struct dev *d)
{
	struct vgpu_rpc_inject in = { .mode = VGPU_INJ_CRASH };
	struct vgpu_rm_vaspace_params vp = { 0 };
	struct vgpu_rm_channel_params cp = { .gpfifo_va = 0x1000, .gpfifo_entries = 64 };
	struct vgpu_rm_info info;
	uint32_t hc, hd = 0, hs = 0, hv = 0, hch = 0;
	uint64_t t0, worst = 0;
	size_t len;

	rm_client_alloc(d->rm, 1, &hc);
	rm_alloc(d->rm, 1, hc, hc, &hd, VGPU_RM_CLASS_DEVICE, NULL, 0);
	rm_alloc(d->rm, 1, hc, hd, &hs, VGPU_RM_CLASS_SUBDEVICE, NULL, 0);
	rm_alloc(d->rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp));
	cp.h_vaspace = hv;
	rm_alloc(d->rm, 1, hc, hd, &hch, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp, sizeof(cp));
	for (int rep = 0; rep < 3; rep++) {
		t0 = cmn_now_ns();
		gsp_call(rm_gsp(d->rm), 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0, NULL);
		do {
			len = 0;
		} while (rm_control(d->rm, 1, hc, hs, VGPU_RM_CTRL_GET_INFO, &info, &len, sizeof(info)) ||
			 info.gsp_resets < (uint64_t)rep + 1);
		worst = cmn_max(worst, cmn_now_ns() - t0);
	}
	rm_client_free(d->rm, 1, hc);
	return worst / 1e6;
}

static void machine(double load)
{
	char cpu[200];

	printf("machine: %s, %ld CPUs, load average %.2f at the start\n",
	       bench_cpu_describe(cpu, sizeof(cpu)), bench_cpu_cores(), load);
}

/* The RM ops/s keys (one per thread count), without braces. */
static void print_ops_json(const unsigned int *thr, size_t n, const struct ops_res *r)
{
	for (size_t i = 0; i < n; i++)
		printf("\"rm_ops_per_s_%ut\": %.0f, \"rm_ops_per_s_%ut_min\": %.0f, "
		       "\"rm_ops_per_s_%ut_max\": %.0f, \"rm_cpu_ns_per_op_%ut\": %.1f, ", thr[i],
		       r->ops[i], thr[i], r->lo[i], thr[i], r->hi[i], thr[i], r->cpu[i]);
	printf("\"rm_ops_2t_vs_1t\": %.2f, \"rm_ops_16t_vs_1t\": %.2f, "
	       "\"rm_cpu_per_op_2t_vs_1t\": %.2f", r->vs1[1], r->vs1[n - 1],
	       r->cpu[1] / r->cpu[0]);
}

/* The 1-minute load average when the run started: the share of the machine others took. */
static double loadavg(void)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double l = -1;

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

int main(int argc, char **argv)
{
	bool json = false;
	struct pct bare, spin[VGPU_ARRAY_SIZE(sizes)], block[VGPU_ARRAY_SIZE(sizes)];
	struct victim v, vi;
	bool victim_only = false;
	static const unsigned int thr[] = { 1, 2, 4, 8, 16 };
	struct ops_res ops;
	double load = loadavg();
	double crash_ms;
	bool ops_only = false;
	char cpu_json[320];
	struct dev d;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--victim"))
			victim_only = true;
		else if (!strcmp(argv[i], "--ops"))
			ops_only = true;
		else if (!strcmp(argv[i], "--no-fair"))
			no_fair = true;
		else {
			fprintf(stderr, "usage: rpc_bench [--json] [--quick] [--victim] [--ops] [--no-fair]\n");
			return 2;
		}
	}
	cmn_log_set_level(VGPU_LOG_ERR);
	bench_cpu_json(cpu_json, sizeof(cpu_json));
	if (ops_only) {	/* (b) alone, as JSON, for repeated measurements */
		if (dev_up(&d, 1, 1))
			return 1;
		bench_ops(d.rm, thr, VGPU_ARRAY_SIZE(thr), &ops);
		dev_down(&d);
		printf("{%s, \"loadavg_1m\": %.2f, ", cpu_json, load);
		print_ops_json(thr, VGPU_ARRAY_SIZE(thr), &ops);
		printf("}\n");
		return 0;
	}
	if (victim_only) {	/* (c) alone, for repeated measurements */
		if (dev_up(&d, 1, 1))
			return 1;
		victim_interleaved(rm_gsp(d.rm), &vi);
		victim_runs(rm_gsp(d.rm), &v);
		dev_down(&d);
		printf("{%s, \"victim_p99_ratio\": %.2f, \"victim_solo_p99_us\": %.2f, "
		       "\"victim_flood_p99_us\": %.2f, \"victim_flood_p50_us\": %.2f, "
		       "\"victim_p99_ratio_pairs\": %.2f, \"victim_p99_ratio_pairs_min\": %.2f, "
		       "\"victim_p99_ratio_pairs_max\": %.2f}\n", cpu_json,
		       victim_ratio(&vi.flood, &vi.solo), vi.solo.p99, vi.flood.p99, vi.flood.p50,
		       victim_ratio(&v.flood, &v.solo), v.ratio_min, v.ratio_max);
		return 0;
	}
	bare = bench_bare(quick ? 20000 : 200000);
	/* spinning: callers and GSP lanes spin 1 ms before sleeping */
	if (dev_up(&d, VGPU_NSEC_PER_MSEC, VGPU_NSEC_PER_MSEC)) {
		fprintf(stderr, "rpc_bench: device setup failed\n");
		return 1;
	}
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(sizes); i++)
		spin[i] = bench_rpc(rm_gsp(d.rm), 1, sizes[i], iters_for(sizes[i], true));
	crash_ms = bench_crash(&d);
	dev_down(&d);
	/* blocking: nobody spins; every wait is a futex sleep */
	if (dev_up(&d, 1, 1))
		return 1;
	/* RM ops need no RPC: on the device whose GSP lanes do not spin, so that spinning
	 * lanes take no CPU from the client threads. */
	bench_ops(d.rm, thr, VGPU_ARRAY_SIZE(thr), &ops);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(sizes); i++)
		block[i] = bench_rpc(rm_gsp(d.rm), 1, sizes[i], iters_for(sizes[i], false));
	victim_interleaved(rm_gsp(d.rm), &vi);
	victim_runs(rm_gsp(d.rm), &v);
	dev_down(&d);

	if (json) {
		printf("{%s, \"loadavg_1m\": %.2f, \"rpc_256b_p50_us\": %.2f, "
		       "\"bare_ring_256b_p50_us\": %.2f, "
		       "\"victim_p99_ratio\": %.2f, \"gsp_crash_recovery_ms\": %.1f, "
		       "\"rpc_256b_p99_us\": %.2f, \"rpc_256b_block_p50_us\": %.2f, ",
		       cpu_json, load, spin[1].p50, bare.p50, victim_ratio(&vi.flood, &vi.solo), crash_ms,
		       spin[1].p99, block[1].p50);
		print_ops_json(thr, VGPU_ARRAY_SIZE(thr), &ops);
		printf(", \"victim_p99_ratio_pairs\": %.2f, \"victim_p99_ratio_pairs_min\": %.2f, "
		       "\"victim_p99_ratio_pairs_max\": %.2f}\n", victim_ratio(&v.flood, &v.solo),
		       v.ratio_min, v.ratio_max);
		return 0;
	}
	machine(load);
	printf("\n(a) round trip CPU-RM -> vgpu-gsp -> reply, ECHO both ways (NOP for 0 B), us\n");
	printf("%-10s %-9s %9s %9s %9s %9s %12s\n", "payload", "mode", "p50", "p99", "p99.9", "max",
	       "p50/bare");
	printf("%-10s %-9s %9.2f %9.2f %9.2f %9.2f %12s\n", "256 B", "bare ring", bare.p50, bare.p99,
	       bare.p999, bare.max, "1.00");
	for (int m = 0; m < 2; m++)
		for (size_t i = 0; i < VGPU_ARRAY_SIZE(sizes); i++) {
			struct pct *p = m ? &block[i] : &spin[i];
			char sz[32];

			snprintf(sz, sizeof(sz), sizes[i] >= 1024 ? "%zu KiB" : "%zu B",
				 sizes[i] >= 1024 ? sizes[i] >> 10 : sizes[i]);
			printf("%-10s %-9s %9.2f %9.2f %9.2f %9.2f %12.2f\n", sz, m ? "blocking" : "spin",
			       p->p50, p->p99, p->p999, p->max, p->p50 / bare.p50);
		}
	printf("\n(b) RM ops/s (vidmem alloc + GET_QUOTA control + free, 3 ops per loop; each "
	       "thread its own client on its own VF; median of %d, [min-max]; x 1 thread: median of "
	       "the rounds' own ratios; CPU time per op)\n", OPS_REPS);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(thr); i++)
		printf("  %2u threads: %10.0f ops/s  [%.0f-%.0f]  (%.2f x 1 thread)  %6.1f ns CPU/op\n",
		       thr[i], ops.ops[i], ops.lo[i], ops.hi[i], ops.vs1[i], ops.cpu[i]);
	printf("\n(c) victim VF 1 (256 B ECHO, blocking) while VF 2 floods (%d thread, 4 KiB ECHO "
	       "back to back), fair dispatch %s\n", FLOODERS, no_fair ? "off" : "on");
	printf("  interleaved (%d-sample blocks, pooled):\n", VICTIM_BLOCK);
	printf("  solo : p50 %.2f  p99 %.2f us\n", vi.solo.p50, vi.solo.p99);
	printf("  flood: p50 %.2f  p99 %.2f us   ratio p99 %.2f (target <= 2), flood RPCs %llu\n",
	       vi.flood.p50, vi.flood.p99, victim_ratio(&vi.flood, &vi.solo),
	       (unsigned long long)vi.flood_rpcs);
	printf("  alternating solo/flood phases, median of %d pairs:\n", VICTIM_RUNS);
	printf("  solo : p50 %.2f  p99 %.2f us\n", v.solo.p50, v.solo.p99);
	printf("  flood: p50 %.2f  p99 %.2f us   ratio p99 %.2f (spread %.2f .. %.2f), "
	       "flood RPCs %llu\n", v.flood.p50, v.flood.p99, victim_ratio(&v.flood, &v.solo),
	       v.ratio_min, v.ratio_max, (unsigned long long)v.flood_rpcs);
	printf("\n(d) GSP crash to working device (restart + replay + first RM control), worst of 3: "
	       "%.1f ms (target <= 1000)\n", crash_ms);
	printf("\ntargets: 256 B spin p50 <= 5 us: %.2f us\n", spin[1].p50);
	return 0;
}
