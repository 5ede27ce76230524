// SPDX-License-Identifier: MIT
/* submit_bench - guest-side work submission through the whole stack: libvgpu-vf writes GP
 * entries, publishes GP_PUT and rings the usermode doorbell; the emulated GPU executes the
 * segment and releases the channel's semaphore; the fence wait sees it. Next to it, in the
 * same run, the same work submitted the kernel-mediated way: one mailbox RPC per submission
 * (the host stores GP_PUT and rings), as pre-Volta GPUs needed an ioctl.
 *
 *   submit_bench [--json] [--iters N] [--seconds S] [--intr] [--bindir DIR | --socket PATH]
 *
 * The host is always a real vgpud (and its vgpu-gsp): started from the directory of this
 * program (or --bindir) with one slice made by vgpuctl (vgpud_host.c), or the VF endpoint of
 * a running vgpud (--socket). The guest opens the VF through its endpoint socket with the
 * local transport; the RPCs are VGPU_RM_CTRL_CHANNEL_SUBMIT calls served by vgpud's RM. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/bench/submit_bench/vgpud_host.h"
#include "vf_guest/include/vgpu_vf.h"
#include "tests/bench/bench_cpu.h"

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
 * clock cmn_now_ns() reads) into when it executes the method. */
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

/* A cache line's round trip between two threads of this machine, in us: what one exchange
 * between the submitter's core and the engine's costs here, so that figures from different
 * machines can be read in transfers rather than microseconds. */
#define PINGPONG_ROUNDS		5
#define PINGPONG_EXCHANGES	20000u

static struct {
	_Alignas(64) _Atomic uint64_t v;	/* the pinger writes odd values, pong() the next */
} pingpong;

/* Spin until the line holds @want; yield now and then, so that two threads that share a
 * CPU (outside load) still finish. */
static void pingpong_wait(uint64_t want)
{
	for (unsigned int i = 1; atomic_load_explicit(&pingpong.v, memory_order_acquire) != want;
	     i++)
		if (!(i % 4096))
			sched_yield();
}

static void *pong(void *arg)
{
	(void)arg;
	for (uint64_t want = 1; want < 2 * PINGPONG_EXCHANGES; want += 2) {
		pingpong_wait(want);
		atomic_store_explicit(&pingpong.v, want + 1, memory_order_release);
	}
	return NULL;
}

/* Median over PINGPONG_ROUNDS of the mean round trip; 0 with one CPU to run on (the two
 * threads would only take turns) or if no thread could be started. */
static double line_roundtrip_us(void)
{
	uint64_t r[PINGPONG_ROUNDS];
	cpu_set_t cpus;

	if (sched_getaffinity(0, sizeof(cpus), &cpus) || CPU_COUNT(&cpus) < 2)
		return 0;
	for (unsigned int i = 0; i < PINGPONG_ROUNDS; i++) {
		pthread_t t;
		uint64_t t0;

		atomic_store(&pingpong.v, 0);
		if (pthread_create(&t, NULL, pong, NULL))
			return 0;
		t0 = cmn_now_ns();
		for (uint64_t v = 1; v < 2 * PINGPONG_EXCHANGES; v += 2) {
			atomic_store_explicit(&pingpong.v, v, memory_order_release);
			pingpong_wait(v + 1);
		}
		r[i] = cmn_now_ns() - t0;
		pthread_join(t, NULL);
	}
	return pct(r, PINGPONG_ROUNDS, 0.5) / PINGPONG_EXCHANGES;
}

/* The round trip before vgpud started (@before) and after it stopped, averaged over those
 * that could be measured. */
static double line_roundtrip_both(double before)
{
	double after = line_roundtrip_us();

	return before > 0 && after > 0 ? (before + after) / 2 : before > 0 ? before : after;
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

		/* The stamp is not cleared: the previous one is older than t0 anyway, and a
		 * store here would make the device's TIMESTAMP wait for this core's line. */
		t0 = cmn_now_ns();
		ret = vgpu_submit(ch, pb.dw, pb.len, &f);
		t1 = cmn_now_ns();
		if (!ret)
			ret = vgpu_fence_wait(&f, 0);
		t2 = cmn_now_ns();
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
	uint64_t start = cmn_now_ns(), end = start + (uint64_t)(seconds * 1e9), n = 0;
	struct vgpu_fence last = { 0 };
	int ret = 0;

	while (cmn_now_ns() < end) {
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
	r->entries_per_s = (double)n / ((double)(cmn_now_ns() - start) / 1e9);
	return 0;
}

static bool intr;	/* --intr: fence releases raise the GPU interrupt */
static const char *ext_socket;		/* --socket: a running vgpud's VF endpoint */

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

static void print_table(const struct result *u, const struct result *k, size_t iters,
			double line_rt)
{
	printf("submit_bench: %zu submissions each (TIMESTAMP + fence release), 1 engine, "
	       "fence interrupts %s, host vgpud (whole stack)\n\n", iters,
	       intr ? "on (--intr)" : "off");
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
	if (line_rt > 0) {
		printf("%-34s %14.3f\n", "cache-line round trip (us)", line_rt);
		printf("%-34s %14.2f\n", "usermode submit to execution, in those",
		       u->exec_p50 / line_rt);
	} else {
		printf("%-34s %14s\n", "cache-line round trip (us)", "n/a");
	}
	printf("\ntarget: usermode submit-to-execution p50 >= 10x lower than RPC: %s\n",
	       k->exec_p50 >= 10 * u->exec_p50 ? "met" : "NOT met");
}

/* usermode/rpc_submit_*: submit to execution; *_roundtrip_*: to the fence seen done;
 * line_roundtrip_us: a cache line's round trip between two threads, and the usermode p50
 * in those (both 0 where it cannot be measured). "host" is always "vgpud" (kept so readers of earlier output need no change). */
static void print_json(const struct result *u, const struct result *k, double line_rt)
{
	bench_cpu_json_begin();
	printf("\"host\": \"vgpud\", \"usermode_submit_p50_us\": %.3f, \"rpc_submit_p50_us\": %.3f, "
	       "\"gp_entries_per_s\": %.0f, \"usermode_submit_p99_us\": %.3f, "
	       "\"rpc_submit_p99_us\": %.3f, \"usermode_call_p50_us\": %.3f, "
	       "\"rpc_call_p50_us\": %.3f, \"usermode_roundtrip_p50_us\": %.3f, "
	       "\"rpc_roundtrip_p50_us\": %.3f, \"rpc_gp_entries_per_s\": %.0f, "
	       "\"latency_ratio\": %.2f, \"line_roundtrip_us\": %.3f, "
	       "\"usermode_submit_roundtrips\": %.2f}\n", u->exec_p50, k->exec_p50,
	       u->entries_per_s, u->exec_p99, k->exec_p99, u->call_p50, k->call_p50, u->rt_p50,
	       k->rt_p50, k->entries_per_s, k->exec_p50 / u->exec_p50, line_rt,
	       line_rt > 0 ? u->exec_p50 / line_rt : 0);
}

/* The directory this program lives in (vgpud, vgpuctl and vgpu-gsp are built next to it). */
static int self_dir(char *out, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n < 0)
		return -errno;
	exe[n] = 0;
	snprintf(out, len, "%s", dirname(exe));
	return 0;
}

/* The vgpud the guest attaches to: --socket's, or one started from @bindir (NULL: this
 * program's directory); its endpoint goes to vo->socket. */
static int host_open(const char *bindir, struct vgpu_vf_opts *vo, char *sock, size_t len)
{
	char dir[PATH_MAX], why[PATH_MAX + 128];
	int ret;

	if (ext_socket) {	/* a vgpud someone else runs */
		vo->socket = ext_socket;
		return 0;
	}
	if (!bindir) {
		ret = self_dir(dir, sizeof(dir));
		if (ret) {
			fprintf(stderr, "submit_bench: cannot find this program's directory: %s "
				"(use --bindir)\n", strerror(-ret));
			return ret;
		}
		bindir = dir;
	}
	ret = vgpud_host_start(bindir, "vgpu-512M", sock, len, why, sizeof(why));
	if (ret)
		fprintf(stderr, "submit_bench: %s\n", why);
	vo->socket = sock;
	return ret;
}

static void host_close(void)
{
	if (!ext_socket)
		vgpud_host_stop();
}

/* Both modes on one VF: a VA space, the TIMESTAMP target, then usermode and RPC. */
static int run_both(const struct vgpu_vf_opts *vo, size_t iters, double seconds,
		    struct result *u, struct result *k)
{
	struct stamp st = { .va = 0x300000000ull };
	struct vgpu_vaspace *as;
	struct vgpu_vf *vf;
	int ret = vgpu_vf_open(vo, &vf);

	if (ret) {
		fprintf(stderr, "submit_bench: cannot open the VF: %s\n", vgpu_vf_strerror(ret));
		return ret;
	}
	ret = vgpu_vaspace_create(vf, &as);
	if (!ret)
		ret = vgpu_mem_alloc(vf, VGPU_MEM_VRAM, 64 << 10, 64 << 10, &st.mem);
	if (!ret)
		ret = vgpu_va_map(as, st.va, st.mem, 0, 64 << 10, 64 << 10, 0);
	st.cpu = ret ? NULL : vgpu_mem_cpu(st.mem);
	if (!ret)
		ret = run_mode(vf, as, &st, false, iters, seconds, u);
	if (!ret)
		ret = run_mode(vf, as, &st, true, iters, seconds, k);
	if (ret)
		fprintf(stderr, "submit_bench: %s (%s)\n", vgpu_vf_strerror(ret),
			vgpu_vf_last_error(vf));
	vgpu_vf_close(vf);
	return ret;
}

static void usage(void)
{
	fprintf(stderr, "usage: submit_bench [--json] [--iters N] [--seconds S] [--intr] "
		"[--bindir DIR | --socket PATH]\n");
}

/* A whole positive number for @opt into *@out; 0, or -EINVAL with a message naming it. */
static int parse_count(const char *opt, const char *arg, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 10);
	if (errno || end == arg || *end || !v || arg[0] == '-') {
		fprintf(stderr, "submit_bench: %s '%s': not a positive whole number\n", opt, arg);
		return -EINVAL;
	}
	*out = (size_t)v;
	return 0;
}

/* Seconds (> 0, at most an hour) for @opt into *@out; 0, or -EINVAL with a message. */
static int parse_seconds(const char *opt, const char *arg, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v > 0 && v <= 3600)) {
		fprintf(stderr, "submit_bench: %s '%s': not a number of seconds in (0, 3600]\n",
			opt, arg);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "iters", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 's' }, { "intr", no_argument, NULL, 'i' },
		{ "bindir", required_argument, NULL, 'b' }, { "socket", required_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	/* Waits spin up to 1 ms in both modes: the figures are the submission paths', not
	 * the sleep/wake policy's (fence releases raise no interrupt: see run_mode()). */
	struct vgpu_vf_opts vo = { .spin_ns = 1000 * 1000 };
	struct result u = { 0 }, k = { 0 };
	const char *bindir = NULL;
	bool json = false;
	char sock[PATH_MAX];
	size_t iters = 20000;
	double seconds = 1.0, line_rt;
	int c, ret;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'n':
			if (parse_count("--iters", optarg, &iters))
				return 2;
			break;
		case 's':
			if (parse_seconds("--seconds", optarg, &seconds))
				return 2;
			break;
		case 'i': intr = true; break;
		case 'b': bindir = optarg; break;
		case 'S': ext_socket = optarg; break;
		default:
			usage();
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "submit_bench: unexpected argument '%s'\n", argv[optind]);
		usage();
		return 2;
	}
	if (ext_socket && bindir) {
		fprintf(stderr, "submit_bench: --socket names a running vgpud: not with --bindir\n");
		return 2;
	}
	if (iters < 100)
		iters = 100;
	/* Before vgpud starts and after it stops: its engine's spin would share the CPUs. */
	line_rt = line_roundtrip_us();
	if (host_open(bindir, &vo, sock, sizeof(sock)))
		return 1;
	ret = run_both(&vo, iters, seconds, &u, &k);
	host_close();
	if (ret)
		return 1;
	line_rt = line_roundtrip_both(line_rt);
	if (json)
		print_json(&u, &k, line_rt);
	else
		print_table(&u, &k, iters, line_rt);
	return 0;
}
