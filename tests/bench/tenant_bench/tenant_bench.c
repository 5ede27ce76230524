// SPDX-License-Identifier: MIT
/* tenant_bench - does one tenant slow another? A real vgpud with 63 slices of 2 GiB on a
 * 141 GiB device; the victim on the highest-numbered VF (63), flooders on the others, all
 * driven from one flooder process with one thread per 16 flooding VFs. For N = 1, 7, 31
 * and 62 flooding VFs the victim measures, in solo and flooded blocks that alternate in one
 * run: a mailbox PING, a 256 B RM call through the GSP (GSP_ECHO), and usermode submit ->
 * execution (the device's TIMESTAMP of the first method), one round of the three every
 * TB_PERIOD_NS (a light tenant). Each flooding VF sends PINGs and 256 B GSP_ECHO calls
 * back to back, sleeping on each reply; the flooder threads run at nice 19, as the flooding
 * guests' code would run on CPUs of their own. Figures: p50 and p99 of each, flooded over solo,
 * and the flood's calls per second.
 *
 *   tenant_bench [--json] [--quick] [--shares] [--shares-detail] [--bindir DIR]
 *                [--flood-nice N]
 *
 * Scheduler share keys (share_err_pct_*) come from shares(): null until it measures them.
 * --shares measures only those (no vgpud); --shares-detail also prints each window's
 * breakdown of the errors. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "tests/bench/bench_cpu.h"
#include "shares.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"
#include "vf_guest/include/vgpu_vf.h"
#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>

#define TB_VFS		63
#define TB_VICTIM	63
#define TB_PER_THREAD	16	/* flooding VFs per flooder thread */
#define TB_ECHO		256	/* RM call parameter bytes */
/* A flooding VF's call sleeps on its reply at once (1 ns of spin): four flooder threads
 * spinning on two CPUs would be the CPU the victim waits for, not the service plane. */
#define TB_FLOOD_SPIN_NS	1
/* The flooder threads stand for the flooding guests' own CPUs (in a deployment, the vCPUs
 * of other VMs, not the victim's): they run at nice 19, so on one host the victim's chain
 * does not wait for a CPU the flood's guest code holds (doc/bench/tenant_bench.md, "The
 * flooder's threads"). What serves the flood on the host (vgpud, vgpu-gsp) is measured as
 * it runs in a deployment. */
#define TB_FLOOD_NICE		19	/* the default; --flood-nice N (0..19) for a check */
/* The victim is a light tenant: one round of samples (a PING, an RM call, a submit) every
 * TB_PERIOD_NS, under its share of the mailbox service at every N; the flood is heavy. */
#define TB_PERIOD_NS		(20 * VGPU_NSEC_PER_MSEC)

static const unsigned int flood_ns[] = { 1, 7, 31, 62 };
#define TB_NR_N		(sizeof(flood_ns) / sizeof(flood_ns[0]))

enum { M_PING, M_RM, M_SUBMIT, M_NR };
static const char *const m_name[M_NR] = { "ping", "rm", "submit" };

/* Shared with the flooder process. */
struct tb_shared {
	_Atomic unsigned int active;	/* VFs 1..active flood; 0: all quiet */
	_Atomic unsigned int ready;	/* flooding VFs opened */
	_Atomic bool stop;
	_Atomic uint64_t calls;		/* flood calls made */
	_Atomic unsigned int failed;
	int flood_nice;			/* the flooder threads' nice */
	_Atomic unsigned int nice_failed;	/* flooder threads left at nice 0 */
};

/* A VF with what the RM call needs: a client and a subdevice. */
struct tb_vf {
	struct vgpu_vf *vf;
	uint32_t hc, hsub;
};

/* ---- RM calls by raw mailbox messages ---------------------------------------------------- */

static int rm_call(struct vgpu_vf *vf, const void *req, uint32_t len, uint32_t *handle)
{
	uint8_t rep[VF_MSG_MAX_PAYLOAD];
	size_t rlen = sizeof(rep);
	struct vgpu_rm_reply rp;
	int r = vgpu_vf_mbox_call(vf, VF_MSG_RM, req, len, rep, &rlen);

	if (r)
		return r;
	if (rlen < sizeof(rp))
		return -EBADMSG;
	memcpy(&rp, rep, sizeof(rp));
	if (handle)
		*handle = rp.handle;
	return rp.status;
}

static struct vgpu_rm_msg rm_hdr(uint32_t op, uint32_t len)
{
	return (struct vgpu_rm_msg){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
				     .abi_version = VGPU_ABI_VERSION, .op = op, .length = len };
}

/* Open VF @n and make its client, device and subdevice. @spin_ns: how long its calls spin
 * for a reply before they sleep on the mailbox vector (0: the library's default). */
static int tb_open(const struct vfx *fx, unsigned int n, uint64_t spin_ns, struct tb_vf *t)
{
	char sock[PATH_MAX];
	struct vgpu_vf_opts o = { .socket = sock, .quiet = true, .spin_ns = spin_ns };
	struct vgpu_rm_msg c = rm_hdr(VGPU_RM_OP_ALLOC_CLIENT, sizeof(c));
	struct vgpu_rm_alloc a = { .hdr = rm_hdr(VGPU_RM_OP_ALLOC, sizeof(a)) };
	uint32_t hdev = 0;
	int r;

	vfx_endpoint(fx, (int)n, sock, sizeof(sock));
	r = vgpu_vf_open(&o, &t->vf);
	if (r)
		return r;
	r = rm_call(t->vf, &c, sizeof(c), &t->hc);
	a.h_client = a.h_parent = t->hc;
	a.h_class = VGPU_RM_CLASS_DEVICE;
	if (!r)
		r = rm_call(t->vf, &a, sizeof(a), &hdev);
	a.h_parent = hdev;
	a.h_class = VGPU_RM_CLASS_SUBDEVICE;
	if (!r)
		r = rm_call(t->vf, &a, sizeof(a), &t->hsub);
	return r;
}

/* One 256 B GSP_ECHO: through the RM to the GSP and back. */
static int tb_echo(struct tb_vf *t)
{
	uint8_t buf[sizeof(struct vgpu_rm_control) + TB_ECHO];
	struct vgpu_rm_control *m = (struct vgpu_rm_control *)buf;

	*m = (struct vgpu_rm_control){ .hdr = rm_hdr(VGPU_RM_OP_CONTROL, sizeof(buf)),
				       .h_client = t->hc, .h_object = t->hsub,
				       .cmd = VGPU_RM_CTRL_GSP_ECHO, .params_len = TB_ECHO };
	memset(m + 1, 0x5a, TB_ECHO);
	return rm_call(t->vf, buf, sizeof(buf), NULL);
}

static int tb_ping(struct tb_vf *t)
{
	static const char msg[64] = "tenant_bench";

	return vgpu_vf_ping(t->vf, msg, sizeof(msg));
}

/* ---- the flooder process ----------------------------------------------------------------- */

struct tb_thread {
	struct tb_shared *sh;
	struct tb_vf vfs[TB_PER_THREAD];
	unsigned int first, count;	/* VF numbers first .. first + count - 1 */
};

static void *flood_thread(void *arg)
{
	struct tb_thread *th = arg;
	struct tb_shared *sh = th->sh;

	/* The flooding guests' own CPUs: nice 19 unless --flood-nice says otherwise. */
	if (setpriority(PRIO_PROCESS, 0, sh->flood_nice))
		atomic_fetch_add(&sh->nice_failed, 1);

	while (!atomic_load(&sh->stop)) {
		unsigned int active = atomic_load(&sh->active), did = 0;

		for (unsigned int i = 0; i < th->count; i++) {
			if (th->first + i > active)
				break;
			if (tb_ping(&th->vfs[i]) || tb_echo(&th->vfs[i]))
				atomic_fetch_add(&sh->failed, 1);
			atomic_fetch_add(&sh->calls, 2);
			did++;
		}
		if (!did)
			cmn_sleep_ns(200 * VGPU_NSEC_PER_USEC);	/* quiet: wait to be told */
	}
	return NULL;
}

static int flooder(const struct vfx *fx, struct tb_shared *sh)
{
	struct tb_thread th[(TB_VFS - 1 + TB_PER_THREAD - 1) / TB_PER_THREAD];
	pthread_t tid[sizeof(th) / sizeof(th[0])];
	unsigned int nth = 0;

	for (unsigned int first = 1; first < TB_VICTIM; first += TB_PER_THREAD, nth++) {
		th[nth] = (struct tb_thread){ .sh = sh, .first = first,
					      .count = cmn_min(TB_PER_THREAD, TB_VICTIM - first) };
		for (unsigned int i = 0; i < th[nth].count; i++) {
			int r = tb_open(fx, first + i, TB_FLOOD_SPIN_NS, &th[nth].vfs[i]);

			if (r) {
				fprintf(stderr, "tenant_bench: flooder VF %u: %s\n", first + i,
					vgpu_vf_strerror(r));
				return 1;
			}
			atomic_fetch_add(&sh->ready, 1);
		}
	}
	for (unsigned int i = 0; i < nth; i++)
		if (pthread_create(&tid[i], NULL, flood_thread, &th[i]))
			return 1;
	for (unsigned int i = 0; i < nth; i++)
		pthread_join(tid[i], NULL);
	return 0;
}

/* ---- the victim -------------------------------------------------------------------------- */

struct tb_victim {
	struct tb_vf t;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	struct vgpu_mem *mem;
	uint64_t va;
	volatile uint64_t *stamp;
};

static int victim_open(const struct vfx *fx, struct tb_victim *v)
{
	struct vgpu_channel_opts o = { .gpfifo_entries = 256, .pushbuf_bytes = 64 << 10,
				       .no_intr = true };
	int r = tb_open(fx, TB_VICTIM, 0, &v->t);

	v->va = 0x300000000ull;
	if (!r)
		r = vgpu_vaspace_create(v->t.vf, &v->as);
	if (!r)
		r = vgpu_mem_alloc(v->t.vf, VGPU_MEM_VRAM, 64 << 10, 64 << 10, &v->mem);
	if (!r)
		r = vgpu_va_map(v->as, v->va, v->mem, 0, 64 << 10, 64 << 10, 0);
	if (!r)
		r = vgpu_channel_create(v->t.vf, v->as, &o, &v->ch);
	if (!r)
		v->stamp = vgpu_mem_cpu(v->mem);
	return r;
}

/* One sample of @m in ns, or 0 on failure. */
static uint64_t sample(struct tb_victim *v, int m)
{
	uint64_t t0 = cmn_now_ns(), t1;
	struct vgpu_fence f;
	struct vgpu_pb pb;
	uint32_t dw[8];

	switch (m) {
	case M_PING:
		return tb_ping(&v->t) ? 0 : cmn_now_ns() - t0;
	case M_RM:
		return tb_echo(&v->t) ? 0 : cmn_now_ns() - t0;
	default:
		vgpu_pb_init(&pb, dw, 8);
		vgpu_pb_timestamp(&pb, v->va);
		t0 = cmn_now_ns();
		if (vgpu_submit(v->ch, pb.dw, pb.len, &f) || vgpu_fence_wait(&f, 0))
			return 0;
		t1 = *v->stamp;
		return t1 > t0 ? t1 - t0 : 1;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(uint64_t *s, size_t n, double p)
{
	qsort(s, n, sizeof(*s), cmp_u64);
	return n ? (double)s[(size_t)(p * (double)(n - 1))] / 1000.0 : 0;
}

struct tb_result {
	double p50[2][M_NR], p99[2][M_NR];	/* [solo, flooded][metric], us */
	double flood_cps;			/* flood calls per second, flooded blocks */
};

/* Blocks of @per samples of each metric, solo and flooded by @n VFs alternating. */
static int measure(struct tb_victim *v, struct tb_shared *sh, unsigned int n,
		   unsigned int blocks, size_t per, struct tb_result *r)
{
	size_t cap = blocks * per;
	uint64_t *s[2][M_NR];
	size_t cnt[2][M_NR] = { { 0 } };
	uint64_t calls = 0, flood_ns = 0;
	int ret = 0;

	for (int k = 0; k < 2; k++)
		for (int m = 0; m < M_NR; m++)
			s[k][m] = calloc(cap, sizeof(uint64_t));
	for (unsigned int b = 0; b < 2 * blocks && !ret; b++) {
		int k = b & 1;	/* even: solo, odd: flooded */
		uint64_t calls0, t0;

		atomic_store(&sh->active, k ? n : 0);
		/* Let the flood reach its pace (or die down) before sampling. */
		cmn_sleep_ns(20 * VGPU_NSEC_PER_MSEC);
		calls0 = atomic_load(&sh->calls);
		t0 = cmn_now_ns();
		for (size_t i = 0; i < per && !ret; i++) {
			uint64_t next = cmn_now_ns() + TB_PERIOD_NS;

			for (int m = 0; m < M_NR && !ret; m++) {
				uint64_t ns = sample(v, m);

				if (!ns)
					ret = -EIO;
				else
					s[k][m][cnt[k][m]++] = ns;
			}
			if (cmn_now_ns() < next)
				cmn_sleep_ns(next - cmn_now_ns());
		}
		if (k) {
			calls += atomic_load(&sh->calls) - calls0;
			flood_ns += cmn_now_ns() - t0;
		}
	}
	atomic_store(&sh->active, 0);
	r->flood_cps = flood_ns ? (double)calls * 1e9 / (double)flood_ns : 0;
	for (int k = 0; k < 2; k++)
		for (int m = 0; m < M_NR; m++) {
			r->p50[k][m] = pct(s[k][m], cnt[k][m], 0.5);
			r->p99[k][m] = pct(s[k][m], cnt[k][m], 0.99);
			free(s[k][m]);
		}
	return ret;
}

/* --shares-detail: print each share window's error breakdown (table only). */
static bool shares_detail;

/* Scheduler shares (share_err_pct_equal_n*, share_err_pct_fixed_n*): shares.c, from the
 * work items each VF completed. */
static int shares(bool json, bool quick)
{
	return tb_shares(json, quick, shares_detail);
}

/* --shares: the share keys alone, with the machine's. */
static int shares_only(bool json, bool quick, double load)
{
	int r;

	if (!json)
		return shares(false, quick) ? 1 : 0;
	bench_cpu_json_begin();
	printf("\"load_avg_start\": %.2f, \"quick\": %s", load, quick ? "true" : "false");
	r = shares(true, quick);
	printf("}\n");
	return r ? 1 : 0;
}

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

/* vgpud with 63 VFs on a 141 GiB device and a 2 GiB slice on each. */
static int host_up(struct vfx *fx, const char *bindir)
{
	char prog[PATH_MAX + 16], uuid[40];
	int r;

	*fx = (struct vfx){ .vram = "141G", .max_vfs = "63", .num_vfs = "63" };
	if (bindir)
		snprintf(fx->bindir, sizeof(fx->bindir), "%s", bindir);
	else if ((r = self_dir(fx->bindir, sizeof(fx->bindir))))
		return r;
	if (!vfx_built(fx, prog, sizeof(prog))) {
		fprintf(stderr, "tenant_bench: no vgpud in %s (build it or give --bindir)\n",
			fx->bindir);
		return -ENOENT;
	}
	r = vfx_mkdirs(fx, "/tmp/vgpu-tenant-bench");
	if (!r)
		r = vfx_daemon_start(fx);
	for (unsigned int i = 1; !r && i <= TB_VFS; i++) {
		snprintf(uuid, sizeof(uuid), "7e0a0000-0000-4000-8000-%012x", i);
		if (vfx_slice_up(fx, uuid, "vgpu-2G"))
			r = -EIO;
	}
	if (r)
		fprintf(stderr, "tenant_bench: vgpud with 63 slices did not come up: %s "
			"(logs in %s)\n", strerror(-r), fx->tmpdir);
	return r;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "quick", no_argument, NULL, 'q' },
		{ "shares", no_argument, NULL, 's' }, { "shares-detail", no_argument, NULL, 'd' },
		{ "bindir", required_argument, NULL, 'b' },
		{ "flood-nice", required_argument, NULL, 'n' }, { NULL, 0, NULL, 0 },
	};
	struct tb_result res[TB_NR_N];
	struct tb_shared *sh;
	struct tb_victim v = { 0 };
	const char *bindir = NULL;
	bool json = false, quick = false, only_shares = false;
	long flood_nice = TB_FLOOD_NICE;
	char *end;
	unsigned int blocks;
	double load;
	size_t per;
	struct vfx fx;
	pid_t fl;
	int c, r;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 'j')
			json = true;
		else if (c == 'q')
			quick = true;
		else if (c == 's')
			only_shares = true;
		else if (c == 'd')
			only_shares = shares_detail = true;
		else if (c == 'b')
			bindir = optarg;
		else if (c == 'n' && (flood_nice = strtol(optarg, &end, 10)) >= 0 &&
			 flood_nice <= 19 && *optarg && !*end)
			continue;
		else {
			if (c == 'n')
				fprintf(stderr, "tenant_bench: --flood-nice %s: not a nice value "
					"from 0 to 19\n", optarg);
			fprintf(stderr, "usage: tenant_bench [--json] [--quick] [--shares] [--shares-detail] "
				"[--bindir DIR] [--flood-nice N]\n");
			return 2;
		}
	}
	if (getloadavg(&load, 1) != 1)
		load = -1;	/* not known */
	if (only_shares)
		return shares_only(json, quick, load);
	blocks = quick ? 3 : 6;
	per = quick ? 40 : 100;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof(*sh));
	sh->flood_nice = (int)flood_nice;
	r = host_up(&fx, bindir);
	if (r)
		goto out;
	fl = fork();
	if (fl == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(flooder(&fx, sh));
	}
	r = victim_open(&fx, &v);
	if (r)
		fprintf(stderr, "tenant_bench: victim VF %d: %s\n", TB_VICTIM, vgpu_vf_strerror(r));
	while (!r && atomic_load(&sh->ready) < TB_VICTIM - 1) {
		if (waitpid(fl, NULL, WNOHANG) == fl)
			r = -ECHILD;
		cmn_sleep_ns(10 * VGPU_NSEC_PER_MSEC);
	}
	for (size_t i = 0; !r && i < TB_NR_N; i++)
		r = measure(&v, sh, flood_ns[i], blocks, per, &res[i]);
	atomic_store(&sh->stop, true);
	waitpid(fl, NULL, 0);
	if (!r && atomic_load(&sh->failed))
		r = -EIO;
	if (r) {
		fprintf(stderr, "tenant_bench: failed: %s (%u flood calls failed)\n", strerror(-r),
			atomic_load(&sh->failed));
		goto out;
	}
	if (json) {
		bench_cpu_json_begin();
		printf("\"load_avg_start\": %.2f, \"vfs\": %d, \"victim_vf\": %d, \"quick\": %s, "
		       "\"flooder_nice\": %d", load, TB_VFS, TB_VICTIM, quick ? "true" : "false",
		       atomic_load(&sh->nice_failed) ? 0 : sh->flood_nice);
		for (int m = 0; m < M_NR; m++)
			for (size_t i = 0; i < TB_NR_N; i++)
				printf(", \"victim_%s_p50_ratio_n%u\": %.2f, "
				       "\"victim_%s_p99_ratio_n%u\": %.2f", m_name[m], flood_ns[i],
				       res[i].p50[1][m] / res[i].p50[0][m], m_name[m], flood_ns[i],
				       res[i].p99[1][m] / res[i].p99[0][m]);
		for (size_t i = 0; i < TB_NR_N; i++)
			printf(", \"flood_calls_per_s_n%u\": %.0f", flood_ns[i], res[i].flood_cps);
		printf(", \"doorbell_first_method_p50_us\": %.2f", res[0].p50[0][M_SUBMIT]);
		shares(true, quick);
		printf("}\n");
	} else {
		printf("tenant_bench: victim VF %d, flooders on VFs 1..N (threads at nice %d), "
		       "%u solo + %u flooded blocks of %zu samples each, load average %.2f at "
		       "start\n\n", TB_VICTIM, atomic_load(&sh->nice_failed) ? 0 : sh->flood_nice,
		       blocks, blocks, per, load);
		printf("%-8s %4s %10s %10s %7s %10s %10s %7s\n", "metric", "N", "solo p50",
		       "flood p50", "ratio", "solo p99", "flood p99", "ratio");
		for (int m = 0; m < M_NR; m++)
			for (size_t i = 0; i < TB_NR_N; i++)
				printf("%-8s %4u %10.2f %10.2f %6.2fx %10.2f %10.2f %6.2fx\n",
				       m_name[m], flood_ns[i], res[i].p50[0][m], res[i].p50[1][m],
				       res[i].p50[1][m] / res[i].p50[0][m], res[i].p99[0][m],
				       res[i].p99[1][m], res[i].p99[1][m] / res[i].p99[0][m]);
		printf("\nflood calls/s:");
		for (size_t i = 0; i < TB_NR_N; i++)
			printf(" N=%u %.0f", flood_ns[i], res[i].flood_cps);
		printf("\nidle-engine doorbell -> first method p50: %.2f us\n",
		       res[0].p50[0][M_SUBMIT]);
		shares(false, quick);
		printf("target: every victim p99 ratio <= 2 at N = 62\n");
	}
out:
	vfx_stop(&fx);
	vfx_clean(&fx);
	return r ? 1 : 0;
}
