// SPDX-License-Identifier: MIT
/* migrate_bench - live migration of a running slice between two real vgpuds: a 2 GiB slice
 * with 256 MiB populated (4 MiB blocks spread over it) moves from vgpud A to vgpud B over
 * loopback TCP while a writer dirties random 4 KiB pages of the populated part at a set
 * rate, as a guest's CPU would. The migration runs with a manual switchover (the shape of
 * QEMU's pause-before-switchover): the writer runs during pre-copy for --precopy-ms, then
 * stops (the VM would be paused), then migrate-switchover; every byte of VRAM and DMA memory
 * is then compared between A (before the switchover) and B (after) by CRC32C per MiB.
 *
 *   migrate_bench [--json] [--quick] [--bindir DIR] [--dirty-mib-s N] [--precopy-ms N]
 *                 [--unix]
 *
 * Keys: migrate_downtime_ms (the slice's stop: STOP_COPY to the destination's commit),
 * vm_downtime_ms (null: no VM here), migrate_total_s, migrate_bytes, precopy_rounds,
 * stream_gbps (GB/s: the first, full pass's data bytes over its time), src_pass0_cpu_ms and
 * dst_pass0_cpu_ms (the CPU time each side's worker spent in that pass), stream_cpu_gbps
 * (its bytes over the larger of the two: the rate with a CPU per side), populated_bytes,
 * dirtied_bytes, bytes_ratio (migrate_bytes / (populated + dirtied)), verified. Targets:
 * downtime <= 100 ms, stream >= 2 GB/s, bytes_ratio <= 1.2. Exit 1 if the bytes differ. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/clock.h"
#include "ctlclient/ctlclient.h"
#include "mig/mig.h"
#include "tests/bench/bench_cpu.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define MiB		((uint64_t)1 << 20)
#define SLICE_TYPE	"vgpu-2G"
#define UUID		"3c3c3c3c-0000-4000-8000-000000000001"
#define BLOCK		(4 * MiB)	/* populated in blocks of this ... */
#define STRIDE		(32 * MiB)	/* ... one every this */
#define PAGE		4096u

struct writer {
	uint8_t *vram;
	uint64_t populated;
	double mib_s;
	atomic_bool stop;
	uint64_t written;		/* bytes the writer wrote */
	pthread_t thread;
};

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The populated page @i (of populated / PAGE) as an offset in VRAM. */
static uint64_t pop_off(uint64_t i)
{
	uint64_t per = BLOCK / PAGE;

	return (i / per) * STRIDE + (i % per) * PAGE;
}

/* Random pages of the populated part at @mib_s, paced against the clock. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull, t0 = cmn_now_ns(), pages = w->populated / PAGE;

	while (!atomic_load(&w->stop)) {
		double due = (double)(cmn_now_ns() - t0) / 1e9 * w->mib_s * MiB;

		if ((double)w->written >= due) {
			usleep(200);
			continue;
		}
		uint64_t *p = (uint64_t *)(w->vram + pop_off(xorshift(&rng) % pages));

		for (unsigned int i = 0; i < PAGE / 8; i++)
			p[i] = xorshift(&rng) | 1;
		w->written += PAGE;
	}
	return NULL;
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

/* @fx's VRAM object of VF 1: /dev/shm/vgpud-<FNV-1a of the state dir's real path>-vf1. */
static int bar_open(const struct vfx *fx)
{
	char real[PATH_MAX], path[128];
	uint64_t h = 0xcbf29ce484222325ull;

	if (!realpath(fx->statedir, real))
		return -errno;
	for (const char *p = real; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	snprintf(path, sizeof(path), "/dev/shm/vgpud-%016llx-vf1", (unsigned long long)h);
	return open(path, O_RDWR | O_CLOEXEC);
}

/* CRC32C of each MiB of VRAM and DMA memory (the object less its control area). */
static uint32_t *image_crcs(int fd, uint64_t *n)
{
	struct stat sb;
	uint8_t *buf = malloc(MiB);
	uint32_t *c;

	if (fstat(fd, &sb) || !buf)
		return NULL;
	*n = ((uint64_t)sb.st_size - 64 * 1024) / MiB;	/* VF_BAR_CTRL_SIZE: 64 KiB */
	c = calloc(*n, sizeof(*c));
	for (uint64_t i = 0; c && i < *n; i++) {
		if (pread(fd, buf, MiB, (off_t)(i * MiB)) != (ssize_t)MiB) {
			free(c);
			c = NULL;
			break;
		}
		c[i] = mig_crc32c(0, buf, MiB);
	}
	free(buf);
	return c;
}

static json_object *exec(struct ctlc *c, const char *cmd, json_object *args)
{
	json_object *ret = NULL;
	struct cmn_fail f = { 0 };

	if (ctlc_exec(c, cmd, args, &ret, &f)) {
		fprintf(stderr, "migrate_bench: %s: %s\n", cmd, f.msg);
		return NULL;
	}
	return ret;
}

/* A's migration record, or NULL. */
static json_object *status(struct ctlc *c)
{
	json_object *a = json_object_new_object(), *ret, *m;

	json_object_object_add(a, "uuid", json_object_new_string(UUID));
	ret = exec(c, "migrate-status", a);
	if (!ret)
		return NULL;
	m = json_object_get(json_object_array_get_idx(json_object_object_get(ret, "migrations"), 0));
	json_object_put(ret);
	return m;
}

static const char *jstr(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : "";
}

static double jnum(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) ? json_object_get_double(v) : 0;
}

/* A's record once @pred says stop: first a sleep until @ms after @t0 (no sooner can
 * it), then a look every FOLLOW_US. Each look costs A's loop thread a request: polling the
 * first pass every millisecond took CPU from the two vgpuds it measures. */
#define FOLLOW_US	2000
static json_object *follow(struct ctlc *c, bool (*pred)(json_object *m, uint64_t t0, uint64_t ms),
			   uint64_t t0, uint64_t ms)
{
	uint64_t now = cmn_now_ns(), until = t0 + ms * 1000000;

	if (now < until)
		usleep((useconds_t)((until - now) / 1000));
	for (;;) {
		json_object *m = status(c);

		if (!m || pred(m, t0, ms))
			return m;
		json_object_put(m);
		usleep(FOLLOW_US);
	}
}

static bool ended(json_object *m)
{
	const char *s = jstr(m, "status");

	return !strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "cancelled");
}

static bool precopy_done(json_object *m, uint64_t t0, uint64_t ms)
{
	return ended(m) || (!strcmp(jstr(m, "status"), "waiting") && cmn_now_ns() - t0 >= ms * 1000000);
}

static bool finished(json_object *m, uint64_t t0, uint64_t ms)
{
	(void)t0;
	(void)ms;
	return ended(m);
}

struct opts {
	bool json, quick, unix_sock;
	const char *bindir;
	double dirty_mib_s;
	uint64_t precopy_ms;
};

struct host {
	struct vfx fx;
	struct ctlc *c;
};

static int host_up(struct host *h, const struct opts *o, const char *prefix)
{
	char sock[PATH_MAX + 16];
	struct cmn_fail f = { 0 };
	int r;

	h->fx = (struct vfx){ .vram = "4G", .max_vfs = "2", .num_vfs = "1" };
	if (o->bindir)
		snprintf(h->fx.bindir, sizeof(h->fx.bindir), "%s", o->bindir);
	else if ((r = self_dir(h->fx.bindir, sizeof(h->fx.bindir))))
		return r;
	if (!vfx_built(&h->fx, sock, sizeof(sock))) {
		fprintf(stderr, "migrate_bench: no vgpud in %s (build it or give --bindir)\n",
			h->fx.bindir);
		return -ENOENT;
	}
	r = vfx_mkdirs(&h->fx, prefix);
	if (!r)
		r = vfx_daemon_start(&h->fx);
	if (r) {
		fprintf(stderr, "migrate_bench: vgpud did not start: %s\n", strerror(-r));
		return r;
	}
	snprintf(sock, sizeof(sock), "%s/control.sock", h->fx.rundir);
	if (ctlc_open(sock, &h->c, &f)) {
		fprintf(stderr, "migrate_bench: %s\n", f.msg);
		return -EIO;
	}
	return 0;
}

static void host_down(struct host *h)
{
	ctlc_close(h->c);
	vfx_stop(&h->fx);
	vfx_clean(&h->fx);
}

struct result {
	json_object *rec;
	json_object *rec_b;		/* the destination's record */
	double total_s;
	uint64_t populated, dirtied;
	bool verified;
};

/* Populate, start the writer, migrate, stop the writer before the switchover, compare. */
static int run(struct host *a, struct host *b, const struct opts *o, struct result *res)
{
	struct writer w = { .mib_s = o->dirty_mib_s };
	json_object *args, *ret, *m = NULL;
	uint32_t *ca = NULL, *cb = NULL;
	uint64_t na = 0, nb = 0, t0, rng = 1;
	char addr[PATH_MAX];
	int fd, r = -EIO;

	if (vfx_slice_up(&a->fx, UUID, SLICE_TYPE))
		return -EIO;
	fd = bar_open(&a->fx);
	if (fd < 0)
		return -errno;
	w.populated = (o->quick ? 64 : 256) * MiB;
	w.vram = mmap(NULL, 2048 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w.vram == MAP_FAILED) {
		close(fd);
		return -errno;
	}
	for (uint64_t i = 0; i < w.populated / 8; i++)
		((uint64_t *)(w.vram + pop_off(i * 8 / PAGE)))[(i * 8 % PAGE) / 8] = xorshift(&rng) | 1;

	if (o->unix_sock)
		snprintf(addr, sizeof(addr), "%s/mig.sock", b->fx.tmpdir);
	else
		snprintf(addr, sizeof(addr), "tcp:127.0.0.1:0");
	args = json_object_new_object();
	json_object_object_add(args, "listen", json_object_new_string(addr));
	ret = exec(b->c, "migrate-incoming", args);
	if (!ret)
		goto out;
	snprintf(addr, sizeof(addr), "%s", jstr(ret, "listen"));
	json_object_put(ret);

	pthread_create(&w.thread, NULL, writer_main, &w);
	t0 = cmn_now_ns();
	args = json_object_new_object();
	json_object_object_add(args, "uuid", json_object_new_string(UUID));
	json_object_object_add(args, "to", json_object_new_string(addr));
	json_object_object_add(args, "switchover", json_object_new_string("manual"));
	ret = exec(a->c, "migrate-outgoing", args);
	if (ret)
		m = follow(a->c, precopy_done, t0, o->precopy_ms);
	/* The VM would be paused here: its CPU writes stop before the switchover. */
	atomic_store(&w.stop, true);
	pthread_join(w.thread, NULL);
	if (!ret || !m || ended(m))
		goto out;
	ca = image_crcs(fd, &na);
	json_object_put(m);
	args = json_object_new_object();
	json_object_object_add(args, "uuid", json_object_new_string(UUID));
	json_object_put(exec(a->c, "migrate-switchover", args));
	m = follow(a->c, finished, t0, 0);
	res->total_s = (double)(cmn_now_ns() - t0) / 1e9;
	if (!m || strcmp(jstr(m, "status"), "completed")) {
		fprintf(stderr, "migrate_bench: the migration did not complete: %s\n",
			m ? json_object_to_json_string(m) : "no record");
		goto out;
	}
	close(fd);
	fd = bar_open(&b->fx);
	cb = fd >= 0 ? image_crcs(fd, &nb) : NULL;
	res->verified = ca && cb && na == nb && !memcmp(ca, cb, na * sizeof(*ca));
	res->populated = w.populated;
	res->dirtied = w.written;
	res->rec = json_object_get(m);
	res->rec_b = status(b->c);
	r = 0;
out:
	json_object_put(ret);
	json_object_put(m);
	free(ca);
	free(cb);
	munmap(w.vram, 2048 * MiB);
	if (fd >= 0)
		close(fd);
	return r;
}

static void report(const struct opts *o, const struct result *res)
{
	double down = jnum(res->rec, "downtime_ms"), bytes = jnum(res->rec, "bytes");
	double p0_ms = jnum(res->rec, "first_pass_ms");
	double gbps = p0_ms > 0 ? jnum(res->rec, "first_pass_bytes") / (p0_ms / 1e3) / 1e9 : 0;
	double ratio = bytes / (double)(res->populated + res->dirtied);
	/* What the first pass cost each side's worker in CPU time: the stream's rate with a
	 * CPU per side, whatever else the machine runs. */
	double cpu_a = jnum(res->rec, "first_pass_cpu_ms"), cpu_b = jnum(res->rec_b, "first_pass_cpu_ms");
	double cpu_max = cpu_a > cpu_b ? cpu_a : cpu_b;
	double cpu_gbps = cpu_max > 0 ? jnum(res->rec, "first_pass_bytes") / (cpu_max / 1e3) / 1e9 : 0;

	if (o->json) {
		bench_cpu_json_begin();
		printf("\"quick\": %s, \"transport\": \"%s\", \"slice_bytes\": %llu, "
		       "\"populated_bytes\": %" PRIu64 ", \"dirty_rate_mib_s\": %.0f, "
		       "\"dirtied_bytes\": %" PRIu64 ", \"migrate_downtime_ms\": %.2f, "
		       "\"vm_downtime_ms\": null, \"migrate_total_s\": %.3f, \"migrate_bytes\": %.0f, "
		       "\"precopy_rounds\": %d, \"stream_gbps\": %.2f, \"src_pass0_cpu_ms\": %.1f, "
		       "\"dst_pass0_cpu_ms\": %.1f, \"stream_cpu_gbps\": %.2f, \"bytes_ratio\": %.3f, "
		       "\"verified\": %s}\n", o->quick ? "true" : "false",
		       o->unix_sock ? "unix" : "tcp-loopback", 2048ull * MiB, res->populated,
		       o->dirty_mib_s, res->dirtied, down, res->total_s, bytes,
		       (int)jnum(res->rec, "precopy_rounds"), gbps, cpu_a, cpu_b, cpu_gbps, ratio,
		       res->verified ? "true" : "false");
		return;
	}
	printf("migrate_bench: a 2 GiB slice, %" PRIu64 " MiB populated, writer at %.0f MiB/s "
	       "for %" PRIu64 " ms of pre-copy, over %s\n\n", res->populated / MiB, o->dirty_mib_s,
	       o->precopy_ms, o->unix_sock ? "a UNIX socket" : "loopback TCP");
	printf("%-22s %12.2f   target <= 100\n", "migrate_downtime_ms", down);
	printf("%-22s %12s   no VM in this bench: the slice's stop only\n", "vm_downtime_ms", "-");
	printf("%-22s %12.3f\n", "migrate_total_s", res->total_s);
	printf("%-22s %12.0f   (populated %" PRIu64 " + dirtied %" PRIu64 ": ratio %.3f, "
	       "target <= 1.2)\n", "migrate_bytes", bytes, res->populated, res->dirtied, ratio);
	printf("%-22s %12d\n", "precopy_rounds", (int)jnum(res->rec, "precopy_rounds"));
	printf("%-22s %12.2f   GB/s, target >= 2\n", "stream_gbps", gbps);
	printf("%-22s %12.2f   GB/s with a CPU per side (first pass: source %.1f ms, "
	       "destination %.1f ms of CPU)\n", "stream_cpu_gbps", cpu_gbps, cpu_a, cpu_b);
	printf("%-22s %12s\n", "verified", res->verified ? "yes" : "NO");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "quick", no_argument, NULL, 'q' },
		{ "bindir", required_argument, NULL, 'b' },
		{ "dirty-mib-s", required_argument, NULL, 'd' },
		{ "precopy-ms", required_argument, NULL, 'p' }, { "unix", no_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .dirty_mib_s = 64, .precopy_ms = 1000 };
	struct result res = { 0 };
	struct host a = { 0 }, b = { 0 };
	int c, r;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'j': o.json = true; break;
		case 'q': o.quick = true; break;
		case 'b': o.bindir = optarg; break;
		case 'd': o.dirty_mib_s = strtod(optarg, NULL); break;
		case 'p': o.precopy_ms = strtoull(optarg, NULL, 0); break;
		case 'u': o.unix_sock = true; break;
		default:
			fprintf(stderr, "usage: migrate_bench [--json] [--quick] [--bindir DIR] "
				"[--dirty-mib-s N] [--precopy-ms N] [--unix]\n");
			return 2;
		}
	}
	if (o.quick)
		o.precopy_ms = 300;
	r = host_up(&a, &o, "/tmp/vgpu-migrate-bench-a");
	if (!r)
		r = host_up(&b, &o, "/tmp/vgpu-migrate-bench-b");
	if (!r)
		r = run(&a, &b, &o, &res);
	if (!r)
		report(&o, &res);
	else
		fprintf(stderr, "migrate_bench: failed: %s (logs in %s, %s)\n", strerror(-r),
			a.fx.tmpdir, b.fx.tmpdir);
	json_object_put(res.rec);
	json_object_put(res.rec_b);
	host_down(&a);
	host_down(&b);
	return r ? 1 : res.verified ? 0 : 1;
}
