/* submit_bench - guest-side work submission through the whole stack: libvgpu-vf writes GP
 * entries, publishes GP_PUT and rings the usermode doorbell; the emulated GPU executes the
 * segment and releases the channel's semaphore; the fence wait sees it. Next to it, in the
 * same run, the same work submitted the kernel-mediated way: one mailbox RPC per submission
 * (the host stores GP_PUT and rings), as pre-Volta GPUs needed an ioctl.
 *
 *   submit_bench [--json] [--iters N] [--seconds S] [--intr] [--selftest [--only NAME]]
 *
 * --selftest runs the guest suite (vgpu-vf-test's cases) against the same in-process host.
 * The host is bench_host.c: the real gpu_model and iommu_model behind one VF, because vgpud
 * cannot serve usermode submission yet (doc/bench/submit_bench.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "tests/bench/submit_bench/bench_host.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vft.h"

#define VRAM	(256ull << 20)
#define DMA	(8ull << 20)

struct lat {
	uint64_t *call, *exec, *rt;	/* ns: the vgpu_submit() call, submit to the device
					 * executing the segment's first method, to fence done */
	size_t n;
};

struct result {
	double call_p50, call_p99, exec_p50, exec_p99, rt_p50, rt_p99;	/* us */
	double entries_per_s;
};

/* A TIMESTAMP target: 8 bytes of VRAM the device writes its clock (CLOCK_MONOTONIC, the
 * clock vgpu_now_ns() reads) into when it executes the method. */
struct stamp {
	struct vgpu_mem *mem;
	uint64_t va;
	volatile uint64_t *cpu;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[(size_t)(p * (double)(n - 1))] / 1000.0;
}

/* One submission at a time (a TIMESTAMP, then the fence release): submit, wait, repeat. */
static int measure_latency(struct vgpu_channel *ch, const struct stamp *st, size_t iters,
			   struct result *r)
{
	struct lat l = { calloc(iters, 8), calloc(iters, 8), calloc(iters, 8), iters };
	size_t warm = iters / 10;
	struct vgpu_pb pb;
	uint32_t dw[8];
	int ret = 0;

	if (!l.call || !l.exec || !l.rt)
		return -ENOMEM;
	vgpu_pb_init(&pb, dw, 8);
	vgpu_pb_timestamp(&pb, st->va);
	for (size_t i = 0; i < warm + iters && !ret; i++) {
		struct vgpu_fence f;
		uint64_t t0, t1, t2;

		*st->cpu = 0;
		t0 = vgpu_now_ns();
		ret = vgpu_submit(ch, pb.dw, pb.len, &f);
		t1 = vgpu_now_ns();
		if (!ret)
			ret = vgpu_fence_wait(&f, 0);
		t2 = vgpu_now_ns();
		if (!ret && *st->cpu < t0)
			ret = -EPROTO;	/* the device did not stamp this submission */
		if (i >= warm) {
			l.call[i - warm] = t1 - t0;
			l.exec[i - warm] = *st->cpu - t0;
			l.rt[i - warm] = t2 - t0;
		}
	}
	if (!ret) {
		r->call_p50 = pct(l.call, iters, 0.5);
		r->call_p99 = pct(l.call, iters, 0.99);
		r->exec_p50 = pct(l.exec, iters, 0.5);
		r->exec_p99 = pct(l.exec, iters, 0.99);
		r->rt_p50 = pct(l.rt, iters, 0.5);
		r->rt_p99 = pct(l.rt, iters, 0.99);
	}
	free(l.call);
	free(l.exec);
	free(l.rt);
	return ret;
}

/* Back-to-back submissions for @seconds, the ring kept full; entries that completed per
 * second of wall time (the last fence included). */
static int measure_rate(struct vgpu_channel *ch, double seconds, struct result *r)
{
	uint64_t start = vgpu_now_ns(), end = start + (uint64_t)(seconds * 1e9), n = 0;
	struct vgpu_fence last = { 0 };
	int ret = 0;

	while (vgpu_now_ns() < end) {
		ret = vgpu_submit(ch, NULL, 0, &last);
		if (ret == -EAGAIN) {
			struct vgpu_fence older = { last.ch, last.value > 64 ? last.value - 64 : 1 };

			ret = last.ch ? vgpu_fence_wait(&older, 0) : 0;
			if (ret)
				return ret;
			continue;
		}
		if (ret)
			return ret;
		n++;
	}
	if (last.ch && (ret = vgpu_fence_wait(&last, 0)))
		return ret;
	r->entries_per_s = (double)n / ((double)(vgpu_now_ns() - start) / 1e9);
	return 0;
}

static bool intr;	/* --intr: fence releases raise the GPU interrupt */

/* By default fence releases raise no interrupt, so the host's mailbox thread has nothing
 * but the RPCs to do: the kernel-mediated path at its best. With --intr every release makes
 * the host forward an interrupt, as a host whose guests sleep on fences does. */
static int run_mode(struct vgpu_vf *vf, struct vgpu_vaspace *as, const struct stamp *st,
		    bool rpc, size_t iters, double seconds, struct result *r)
{
	struct vgpu_channel_opts o = { .gpfifo_entries = 1024, .pushbuf_bytes = 64 << 10,
				       .rpc_submit = rpc, .no_intr = !intr };
	struct vgpu_channel *ch;
	int ret = vgpu_channel_create(vf, as, &o, &ch);

	if (ret)
		return ret;
	ret = measure_latency(ch, st, iters, r);
	if (!ret)
		ret = measure_rate(ch, seconds, r);
	if (!ret)
		ret = vgpu_channel_error(ch, NULL, NULL);
	vgpu_channel_destroy(ch);
	return ret;
}

static void print_table(const struct result *u, const struct result *k, size_t iters)
{
	printf("submit_bench: %zu submissions each (TIMESTAMP + fence release), 1 engine, "
	       "fence interrupts %s\n\n", iters, intr ? "on (--intr)" : "off");
	printf("%-34s %14s %14s %8s\n", "", "usermode", "RPC (mailbox)", "ratio");
	printf("%-34s %14.2f %14.2f %7.1fx\n", "submit to execution, p50 (us)", u->exec_p50,
	       k->exec_p50, k->exec_p50 / u->exec_p50);
	printf("%-34s %14.2f %14.2f %7.1fx\n", "submit to execution, p99 (us)", u->exec_p99,
	       k->exec_p99, k->exec_p99 / u->exec_p99);
	printf("%-34s %14.2f %14.2f %7.1fx\n", "submit to fence done, p50 (us)", u->rt_p50,
	       k->rt_p50, k->rt_p50 / u->rt_p50);
	printf("%-34s %14.2f %14.2f %7.1fx\n", "submit to fence done, p99 (us)", u->rt_p99,
	       k->rt_p99, k->rt_p99 / u->rt_p99);
	printf("%-34s %14.3f %14.2f %7.1fx\n", "vgpu_submit() call, p50 (us)", u->call_p50,
	       k->call_p50, k->call_p50 / u->call_p50);
	printf("%-34s %14.3f %14.2f %7.1fx\n", "vgpu_submit() call, p99 (us)", u->call_p99,
	       k->call_p99, k->call_p99 / u->call_p99);
	printf("%-34s %14.0f %14.0f %7.1fx\n", "GP entries/s (ring kept full)", u->entries_per_s,
	       k->entries_per_s, u->entries_per_s / k->entries_per_s);
	printf("\ntarget: usermode submit-to-execution p50 >= 10x lower than RPC: %s\n",
	       k->exec_p50 >= 10 * u->exec_p50 ? "met" : "NOT met");
}

/* usermode/rpc_submit_*: submit to execution; *_roundtrip_*: to the fence seen done. */
static void print_json(const struct result *u, const struct result *k)
{
	printf("{\"usermode_submit_p50_us\": %.3f, \"rpc_submit_p50_us\": %.3f, "
	       "\"gp_entries_per_s\": %.0f, \"usermode_submit_p99_us\": %.3f, "
	       "\"rpc_submit_p99_us\": %.3f, \"usermode_call_p50_us\": %.3f, "
	       "\"rpc_call_p50_us\": %.3f, \"usermode_roundtrip_p50_us\": %.3f, "
	       "\"rpc_roundtrip_p50_us\": %.3f, \"rpc_gp_entries_per_s\": %.0f, "
	       "\"latency_ratio\": %.2f}\n", u->exec_p50, k->exec_p50, u->entries_per_s,
	       u->exec_p99, k->exec_p99, u->call_p50, k->call_p50, u->rt_p50, k->rt_p50,
	       k->entries_per_s, k->exec_p50 / u->exec_p50);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "iters", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 's' }, { "selftest", no_argument, NULL, 't' },
		{ "only", required_argument, NULL, 'o' },
		{ "intr", no_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	/* Waits spin up to 1 ms in both modes: the figures are the submission paths', not
	 * the sleep/wake policy's (fence releases raise no interrupt: see run_mode()). */
	struct vgpu_vf_opts vo = { .spin_ns = 1000 * 1000 };
	struct result u = { 0 }, k = { 0 };
	struct bench_host *h;
	struct stamp st = { .va = 0x300000000ull };
	struct vgpu_vaspace *as;
	struct vgpu_vf *vf;
	bool json = false, selftest = false;
	const char *only = NULL;
	size_t iters = 20000;
	double seconds = 1.0;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'n': iters = strtoul(optarg, NULL, 0); break;
		case 's': seconds = strtod(optarg, NULL); break;
		case 't': selftest = true; break;
		case 'o': only = optarg; break;
		case 'i': intr = true; break;
		default:
			fprintf(stderr, "usage: submit_bench [--json] [--iters N] [--seconds S] "
				"[--intr] [--selftest [--only NAME]]\n");
			return 2;
		}
	}
	if (iters < 100)
		iters = 100;
	ret = bench_host_create(VRAM, DMA, &h);
	if (ret) {
		fprintf(stderr, "submit_bench: host: %s\n", vgpu_vf_strerror(ret));
		return 1;
	}
	ret = bench_host_transport(h, &vo.transport);
	if (ret)
		goto host;
	if (selftest) {
		struct vft_opts to = { .socket = "bench-host", .transport = vo.transport,
				       .only = only };

		ret = vft_run(&to, stdout);
		bench_host_destroy(h);
		return ret ? 1 : 0;
	}
	ret = vgpu_vf_open(&vo, &vf);
	if (ret)
		goto host;
	ret = vgpu_vaspace_create(vf, &as);
	if (!ret)
		ret = vgpu_mem_alloc(vf, VGPU_MEM_VRAM, 64 << 10, 64 << 10, &st.mem);
	if (!ret)
		ret = vgpu_va_map(as, st.va, st.mem, 0, 64 << 10, 64 << 10, 0);
	st.cpu = ret ? NULL : vgpu_mem_cpu(st.mem);
	if (!ret)
		ret = run_mode(vf, as, &st, false, iters, seconds, &u);
	if (!ret)
		ret = run_mode(vf, as, &st, true, iters, seconds, &k);
	vgpu_vf_close(vf);
	if (!ret) {
		if (json)
			print_json(&u, &k);
		else
			print_table(&u, &k, iters);
	}
host:
	bench_host_destroy(h);
	if (ret)
		fprintf(stderr, "submit_bench: %s\n", vgpu_vf_strerror(ret));
	return ret ? 1 : 0;
}
