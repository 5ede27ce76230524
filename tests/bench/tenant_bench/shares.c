// SPDX-License-Identifier: MIT
/* tenant_bench scheduler shares (see shares.h). The device model runs in this process with
 * 63 VFs and one engine on the real clock, the same scheduler vgpud's device runs. Each busy
 * VF has one channel whose ring is kept at least half full of fixed-size work items (one
 * 4 KiB FILL per GP entry: small, so that all VFs' data stays in the CPU's L2 and an item
 * costs the same however long ago its VF last ran); the work a VF completed is counted
 * from the GP_GET the engine writes back to the VF's USERD after executing the entries,
 * never from the scheduler's own counters. After a warm-up, each 1 s window gives every VF
 * a share of the items completed in it; its error is |share - target| / target, the target
 * being 1/N (equal share) or its weight over the weights of the busy VFs (fixed share). A
 * case's figure is the worst VF in its worst window. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/compiler.h"
#include "gpu_model/gpu.h"
#include "shares.h"

#define SH_VFS		63
#define SH_SLICE	(8ull << 20)		/* per function: tables, ring area, data */
#define SH_ENTRIES	65536u			/* 0.14 s of items of one VF of 8 */
#define SH_ITEM_BYTES	(4u << 10)
#define SH_QUANTUM	(100 * VGPU_NSEC_PER_USEC)	/* 1.25 % of a weight-8 VF's second */
#define SH_WARMUP	(200 * VGPU_NSEC_PER_MSEC)
#define SH_WINDOW	VGPU_NSEC_PER_SEC
#define SH_POLL		(500 * VGPU_NSEC_PER_USEC)
#define SH_SNAP_NS	(20 * VGPU_NSEC_PER_USEC)	/* a pass of 62 reads takes 1-3 us */
#define SH_SNAP_TRIES	8
#define SH_VA		0x100000000ull
#define SH_RING_PA	(2ull << 20)		/* USERD, then the GP ring, then the pushbuffer */
#define SH_DATA_PA	(4ull << 20)
#define SH_IDLE		(-2.0)			/* sh_case(): no work in a window */

struct sh_vf {
	struct vgpu_userd *userd;
	uint64_t *gp;
	uint32_t put, last_get;
	uint64_t done;			/* items completed so far */
};

struct sh_dev {
	struct gpu *g;
	struct gpu_priv *p;
	uint64_t next_table[SH_VFS + 1];
	struct sh_vf vf[SH_VFS + 1];
};

static void *sh_ptr(struct sh_dev *d, unsigned int fn, uint64_t pa, uint64_t len)
{
	return gpu_fn_vram_ptr(d->g, fn, pa, len);
}

/* The table under entry @idx of table @t, made on first use. */
static uint64_t sh_next(struct sh_dev *d, unsigned int fn, uint64_t t, unsigned int idx)
{
	uint64_t *e = sh_ptr(d, fn, t + idx * 8ull, 8);

	if (!(*e & VGPU_GMMU_VALID)) {
		*e = vgpu_gmmu_pde(d->next_table[fn]);
		d->next_table[fn] += VGPU_GMMU_TABLE_BYTES;
	}
	return *e & VGPU_GMMU_ADDR_MASK;
}

/* Map the 2 MiB page at VF-physical @pa at SH_VA + pa. */
static void sh_map2m(struct sh_dev *d, unsigned int fn, uint64_t pa)
{
	uint64_t va = SH_VA + pa;
	uint64_t l1 = sh_next(d, fn, 0, (va >> VGPU_GMMU_L0_SHIFT) & 511);
	uint64_t l2 = sh_next(d, fn, l1, (va >> VGPU_GMMU_L1_SHIFT) & 511);

	*(uint64_t *)sh_ptr(d, fn, l2 + ((va >> VGPU_GMMU_L2_SHIFT) & 511) * 8ull, 8) =
		vgpu_gmmu_pte2m(pa, 0);
}

/* VF @fn: page tables, one channel whose every GP entry runs one FILL of SH_ITEM_BYTES. */
static int sh_vf_init(struct sh_dev *d, unsigned int fn)
{
	struct sh_vf *v = &d->vf[fn];
	uint64_t gp_pa = SH_RING_PA + 4096, pb_pa = gp_pa + SH_ENTRIES * 8ull, dst = SH_VA + SH_DATA_PA;
	struct gpu_priv_chan cfg = {
		.runlist = 0, .pdb = 0, .gpfifo_va = SH_VA + gp_pa, .gpfifo_entries = SH_ENTRIES,
		.userd_aper = VGPU_APER_VRAM, .userd_addr = SH_RING_PA,
	};
	uint32_t *pb;
	int r;

	d->next_table[fn] = VGPU_GMMU_TABLE_BYTES;
	if (!sh_ptr(d, fn, 0, SH_SLICE))
		return -1;
	memset(sh_ptr(d, fn, 0, 3 * VGPU_GMMU_TABLE_BYTES), 0, 3 * VGPU_GMMU_TABLE_BYTES);
	sh_map2m(d, fn, SH_RING_PA);
	sh_map2m(d, fn, SH_DATA_PA);
	v->userd = sh_ptr(d, fn, SH_RING_PA, sizeof(*v->userd));
	memset(v->userd, 0, sizeof(*v->userd));
	v->gp = sh_ptr(d, fn, gp_pa, SH_ENTRIES * 8ull);
	pb = sh_ptr(d, fn, pb_pa, 6 * 4);
	pb[0] = VGPU_MTHD(VGPU_M_FILL, 5);
	pb[1] = (uint32_t)dst;
	pb[2] = (uint32_t)(dst >> 32);
	pb[3] = SH_ITEM_BYTES;
	pb[4] = 0;
	pb[5] = fn;
	for (uint32_t i = 0; i < SH_ENTRIES; i++)
		v->gp[i] = vgpu_gp_entry(SH_VA + pb_pa, 6);
	r = gpu_priv_chan_alloc(d->p, fn, 0, &cfg);
	if (!r)
		r = gpu_priv_chan_enable(d->p, fn, 0, true);
	if (!r)
		r = gpu_priv_runlist_set(d->p, fn, 0, 1);
	return r;
}

/* Count what the engine completed on @fn's channel and keep its ring over half full. */
static void sh_vf_poll(struct sh_dev *d, unsigned int fn)
{
	struct sh_vf *v = &d->vf[fn];
	uint32_t get = __atomic_load_n(&v->userd->gp_get, __ATOMIC_ACQUIRE) & (SH_ENTRIES - 1);

	v->done += (get - v->last_get) & (SH_ENTRIES - 1);
	v->last_get = get;
	if (((v->put - get) & (SH_ENTRIES - 1)) > SH_ENTRIES / 2)
		return;
	/* Every entry holds the same FILL segment: publishing GP_PUT queues them again. */
	v->put = (get + SH_ENTRIES - 8) & (SH_ENTRIES - 1);
	__atomic_store_n(&v->userd->gp_put, v->put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(d->g, fn, vgpu_token(0, 0));
}

/* Count what the engine completed on @fn's channel so far (no top-up). */
static void sh_vf_count(struct sh_dev *d, unsigned int fn)
{
	struct sh_vf *v = &d->vf[fn];
	uint32_t get = __atomic_load_n(&v->userd->gp_get, __ATOMIC_ACQUIRE) & (SH_ENTRIES - 1);

	v->done += (get - v->last_get) & (SH_ENTRIES - 1);
	v->last_get = get;
}

/* The items every busy VF completed so far, into @out, as at one instant: the engine runs
 * on while the counts are read, so a pass is taken again if it lasted more than
 * SH_SNAP_NS (this thread was preempted in it). Read over a preemption of a few ms, the
 * VFs read after it would be counted a few of their slices into the next window. */
static void sh_snapshot(struct sh_dev *d, unsigned int n, uint64_t *out, uint64_t *run)
{
	for (unsigned int pass = 0; pass < SH_SNAP_TRIES; pass++) {
		uint64_t t0 = cmn_now_ns();

		for (unsigned int fn = 1; fn <= n; fn++)
			sh_vf_count(d, fn);
		if (cmn_now_ns() - t0 <= SH_SNAP_NS)
			break;
	}
	for (unsigned int fn = 1; fn <= n; fn++) {
		struct gpu_sched_stats st;

		out[fn] = d->vf[fn].done;
		gpu_sched_stats(d->g, fn, &st);
		run[fn] = st.run_ns;
	}
}

/* Unequal fixed-share weights (per mille) of @n busy VFs, at most 1000 in all. */
static uint64_t sh_weight(unsigned int i, unsigned int n)
{
	static const uint64_t w8[] = { 200, 150, 150, 100, 100, 100, 100, 100 };

	if (n == 8)
		return w8[i];
	return n <= 32 ? 15 + 5 * (i % 4) : 8 + 4 * (i % 4);
}

/* Poll every busy VF until @until (the real clock). */
static void sh_run_until(struct sh_dev *d, unsigned int n, uint64_t until)
{
	while (cmn_now_ns() < until) {
		for (unsigned int fn = 1; fn <= n; fn++)
			sh_vf_poll(d, fn);
		cmn_sleep_ns(SH_POLL);
	}
}

static double sh_abs(double v)
{
	return v < 0 ? -v : v;
}

static double sh_max(double a, double b)
{
	return a > b ? a : b;
}

/* One window's counts of the busy VFs: items completed and engine run time, since the
 * last window. */
struct sh_win {
	uint64_t items[SH_VFS + 1], run[SH_VFS + 1];
	uint64_t total_items, total_run;
};

/* The worst work-share error of window @w in %; with @detail, also print how far the
 * scheduler's own time shares (run time) were from their targets and how much the work
 * done per ms of run time varied between VFs: the one is the scheduler's accounting, the
 * other the cost of an item from slice to slice. */
static double sh_window_eval(const struct sh_win *w, enum gpu_sched_policy policy,
			     unsigned int n, uint64_t wsum, bool detail)
{
	double worst = 0, worst_t = 0, worst_r = 0, mean = 0, mean_t = 0, mean_r = 0;

	for (unsigned int fn = 1; fn <= n; fn++) {
		double target = policy == GPU_SCHED_FIXED_SHARE ?
					(double)sh_weight(fn - 1, n) / (double)wsum : 1.0 / n;
		double share = (double)w->items[fn] / (double)w->total_items;
		double tshare = w->total_run ? (double)w->run[fn] / (double)w->total_run : 0;
		double err = (share - target) / target * 100;
		double terr = (tshare - target) / target * 100;
		/* work per run time against all busy VFs' */
		double rate = w->run[fn] && w->total_run ?
				      ((double)w->items[fn] / (double)w->run[fn]) /
						      ((double)w->total_items / (double)w->total_run) * 100 -
					      100 : 0;

		worst = sh_max(worst, sh_abs(err));
		worst_t = sh_max(worst_t, sh_abs(terr));
		worst_r = sh_max(worst_r, sh_abs(rate));
		mean += sh_abs(err) / n;
		mean_t += sh_abs(terr) / n;
		mean_r += sh_abs(rate) / n;
	}
	if (detail)
		printf("    window: %llu items, run %.1f ms; |error| worst/mean: work %.2f/%.2f %%, "
		       "run time %.2f/%.2f %%, work per run time %.2f/%.2f %%\n",
		       (unsigned long long)w->total_items, (double)w->total_run / 1e6, worst, mean,
		       worst_t, mean_t, worst_r, mean_r);
	return worst;
}

/* One case: @n busy VFs under @policy; the worst error in %, SH_IDLE if the engine
 * completed nothing in a window (the host gave its thread no CPU for a second), or -1 if
 * the device could not be set up. */
static double sh_case(enum gpu_sched_policy policy, unsigned int n, unsigned int windows,
		      bool detail)
{
	struct gpu_config cfg = { .nr_vfs = SH_VFS, .nr_engines = 1,
				  .vram_size = (SH_VFS + 1) * SH_SLICE };
	struct sh_dev *d = calloc(1, sizeof(*d));
	uint64_t prev[SH_VFS + 1], prev_run[SH_VFS + 1], wsum = 0, t;
	double worst = -1;

	if (!d || gpu_create(&cfg, &d->g)) {
		free(d);
		return -1;
	}
	d->p = gpu_priv_get(d->g);
	if (gpu_priv_sched_set(d->p, policy, SH_QUANTUM, 0))
		goto out;
	for (unsigned int fn = 0; fn <= SH_VFS; fn++) {
		struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = SH_QUANTUM };

		if (fn >= 1 && fn <= n && policy == GPU_SCHED_FIXED_SHARE)
			s.weight = sh_weight(fn - 1, n);
		wsum += s.weight;
		if (gpu_priv_partition_set(d->p, fn, fn * SH_SLICE, SH_SLICE) ||
		    gpu_priv_sched_fn_set(d->p, fn, &s) || (fn >= 1 && fn <= n && sh_vf_init(d, fn)))
			goto out;
	}
	t = cmn_now_ns() + SH_WARMUP;
	sh_run_until(d, n, t);
	worst = 0;
	sh_snapshot(d, n, prev, prev_run);
	for (unsigned int i = 0; i < windows; i++) {
		uint64_t cur[SH_VFS + 1], cur_run[SH_VFS + 1];
		struct sh_win w = { 0 };

		t += SH_WINDOW;
		sh_run_until(d, n, t);
		sh_snapshot(d, n, cur, cur_run);
		for (unsigned int fn = 1; fn <= n; fn++) {
			w.items[fn] = cur[fn] - prev[fn];
			w.run[fn] = cur_run[fn] - prev_run[fn];
			w.total_items += w.items[fn];
			w.total_run += w.run[fn];
			prev[fn] = cur[fn];
			prev_run[fn] = cur_run[fn];
		}
		if (!w.total_items) {
			worst = SH_IDLE;	/* the engine did nothing: not a measurement */
			break;
		}
		worst = sh_max(worst, sh_window_eval(&w, policy, n, wsum, detail));
	}
out:
	gpu_destroy(d->g);
	free(d);
	return worst;
}

int tb_shares(bool json, bool quick, bool detail)
{
	static const struct { const char *key; enum gpu_sched_policy policy; unsigned int n; }
	cases[] = {
		{ "equal_n8", GPU_SCHED_EQUAL_SHARE, 8 }, { "equal_n32", GPU_SCHED_EQUAL_SHARE, 32 },
		{ "equal_n62", GPU_SCHED_EQUAL_SHARE, 62 }, { "fixed_n8", GPU_SCHED_FIXED_SHARE, 8 },
		{ "fixed_n32", GPU_SCHED_FIXED_SHARE, 32 }, { "fixed_n62", GPU_SCHED_FIXED_SHARE, 62 },
	};
	int ret = 0;

	if (!json)
		printf("scheduler shares (%s windows of 1 s, %u us slices, work counted from GP_GET):\n",
		       quick ? "1" : "3", (unsigned int)(SH_QUANTUM / VGPU_NSEC_PER_USEC));
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(cases); i++) {
		double e = sh_case(cases[i].policy, cases[i].n, quick ? 1 : 3, detail && !json);

		if (e < 0) {
			ret = -1;
			fprintf(stderr, "tenant_bench: %s not measured: %s\n", cases[i].key,
				e == SH_IDLE ? "the engine completed nothing in a window"
					     : "device setup failed");
		}
		if (json && e < 0)
			printf(", \"share_err_pct_%s\": null", cases[i].key);
		else if (json)
			printf(", \"share_err_pct_%s\": %.2f", cases[i].key, e);
		else if (e < 0)
			printf("  %-10s not measured\n", cases[i].key);
		else
			printf("  %-10s worst error %.2f %%\n", cases[i].key, e);
	}
	if (!json)
		printf("target: every share error <= 5 %%\n");
	return ret;
}
