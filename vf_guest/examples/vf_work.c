// SPDX-License-Identifier: MIT
/* vf_work - a guest doing real work on its slice, round after round: COPY, REDUCE_ADD_U32,
 * FILL and AXPY_F32 in one submission, every result checked against the CPU, one progress
 * line per round prefixed with the slice's label. `make demo` runs one per slice, all at
 * once. Built by `make` as bin/vf_work (vf_guest/static.mk).
 *
 *   vf_work SOCKET [--rounds N] [--mib M] [--label TEXT]
 *
 * Exit 0 when every round checked out, 1 otherwise (the failing round says what differed). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vf_guest/include/vgpu_vf.h"

#define VA	0x400000000ull		/* where the buffer appears to the GPU */
#define PAGE	(2ull << 20)		/* 2 MiB pages */
#define AXPY_A	1.75f

struct work {
	const char *label;
	unsigned int rounds;
	uint64_t part;			/* bytes of each of A, B, C; X and Y take half each */
	struct vgpu_vf *vf;
	struct vgpu_mem *buf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	uint8_t *cpu;
	float *yref;
	uint64_t rng;
};

/* Layout in the buffer: A | B | C | X Y | sum (one 2 MiB page at the end). */
static uint64_t off_a(const struct work *w) { (void)w; return 0; }
static uint64_t off_b(const struct work *w) { return w->part; }
static uint64_t off_c(const struct work *w) { return 2 * w->part; }
static uint64_t off_x(const struct work *w) { return 3 * w->part; }
static uint64_t off_y(const struct work *w) { return 3 * w->part + w->part / 2; }
static uint64_t off_sum(const struct work *w) { return 4 * w->part; }
static uint64_t buf_size(const struct work *w) { return 4 * w->part + PAGE; }

static uint32_t rnd(struct work *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (uint32_t)w->rng;
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static int fail(struct work *w, const char *what, int err)
{
	fprintf(stderr, "[%s] %s: %s%s%s\n", w->label, what, vgpu_vf_strerror(err),
		w->vf ? ": " : "", w->vf ? vgpu_vf_last_error(w->vf) : "");
	return 1;
}

static int setup(struct work *w, const char *socket)
{
	struct vgpu_vf_opts opts = { .socket = socket };
	struct vgpu_vf_info info;
	int err;

	err = vgpu_vf_open(&opts, &w->vf);
	if (err)
		return fail(w, "attach", err);
	vgpu_vf_get_info(w->vf, &info);
	if (buf_size(w) > info.vram_size / 2) {
		fprintf(stderr, "[%s] %llu MiB of work does not fit half of the %llu MiB slice\n",
			w->label, (unsigned long long)(buf_size(w) >> 20),
			(unsigned long long)(info.vram_size >> 20));
		return 1;
	}
	printf("[%s] VF %u: %llu MiB VRAM, %u channels; %u rounds on %llu MiB\n", w->label,
	       info.vf_id, (unsigned long long)(info.vram_size >> 20), info.channels, w->rounds,
	       (unsigned long long)(buf_size(w) >> 20));
	if ((err = vgpu_mem_alloc(w->vf, VGPU_MEM_VRAM, buf_size(w), PAGE, &w->buf)) ||
	    (err = vgpu_vaspace_create(w->vf, &w->as)) ||
	    (err = vgpu_va_map(w->as, VA, w->buf, 0, buf_size(w), PAGE, 0)) ||
	    (err = vgpu_channel_create(w->vf, w->as, NULL, &w->ch)))
		return fail(w, "setup", err);
	w->cpu = vgpu_mem_cpu(w->buf);
	w->yref = malloc(w->part / 2);
	if (!w->yref)
		return fail(w, "setup", -ENOMEM);
	return 0;
}

/* Fresh inputs for round @r: random A, X, Y; the CPU's answers. */
static uint64_t round_inputs(struct work *w)
{
	uint32_t *a = (uint32_t *)(w->cpu + off_a(w));
	float *x = (float *)(w->cpu + off_x(w)), *y = (float *)(w->cpu + off_y(w));
	uint64_t n = w->part / 4, nf = w->part / 8, sum = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += a[i] = rnd(w);
	for (uint64_t i = 0; i < nf; i++) {
		x[i] = (float)(rnd(w) % 2000) / 7.0f - 100.0f;
		y[i] = (float)(rnd(w) % 1000) / 3.0f;
		w->yref[i] = AXPY_A * x[i] + y[i];
	}
	return sum;
}

/* What differs from the CPU's answer, or NULL. */
static const char *round_check(struct work *w, uint64_t want_sum, uint32_t pattern)
{
	const uint32_t *c = (const uint32_t *)(w->cpu + off_c(w));
	const float *y = (const float *)(w->cpu + off_y(w));
	uint64_t sum;

	if (memcmp(w->cpu + off_a(w), w->cpu + off_b(w), w->part))
		return "COPY: B differs from A";
	memcpy(&sum, w->cpu + off_sum(w), sizeof(sum));
	if (sum != want_sum)
		return "REDUCE_ADD_U32: checksum differs from the CPU's";
	for (uint64_t i = 0; i < w->part / 4; i++)
		if (c[i] != pattern)
			return "FILL: a word differs";
	if (memcmp(y, w->yref, w->part / 2))
		return "AXPY_F32: y differs from the CPU's (bit for bit)";
	return NULL;
}

static int run_round(struct work *w, unsigned int r)
{
	uint32_t dw[64], pattern = 0x5eed0000u | r;
	uint64_t want = round_inputs(w);
	struct vgpu_fence f;
	struct timespec t0;
	struct vgpu_pb pb;
	const char *bad;
	int err;

	memset(w->cpu + off_sum(w), 0, 8);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_copy(&pb, VA + off_a(w), VA + off_b(w), w->part);
	vgpu_pb_reduce_add_u32(&pb, VA + off_b(w), (uint32_t)(w->part / 4), VA + off_sum(w));
	vgpu_pb_fill(&pb, VA + off_c(w), w->part, pattern);
	vgpu_pb_axpy_f32(&pb, VA + off_x(w), VA + off_y(w), (uint32_t)(w->part / 8), AXPY_A);
	if (pb.err || (err = vgpu_submit(w->ch, pb.dw, pb.len, &f)) ||
	    (err = vgpu_fence_wait(&f, 0)))
		return fail(w, "submit", pb.err ? pb.err : err);
	bad = round_check(w, want, pattern);
	printf("[%s] round %u/%u: COPY %llu MiB, REDUCE_ADD sum %#llx, FILL %#x, AXPY %llu K "
	       "floats: %s (%.1f ms)\n", w->label, r, w->rounds,
	       (unsigned long long)(w->part >> 20), (unsigned long long)want, pattern,
	       (unsigned long long)(w->part / 8 / 1024), bad ? bad : "checked", ms_since(&t0));
	fflush(stdout);
	return bad != NULL;
}

static void teardown(struct work *w)
{
	/* Teardown: an object whose free the host does not confirm goes with vgpu_vf_close(). */
	vgpu_channel_destroy(w->ch);
	if (w->as && w->buf)
		vgpu_va_unmap(w->as, VA, buf_size(w));
	vgpu_vaspace_destroy(w->as);
	vgpu_mem_free(w->buf);
	vgpu_vf_close(w->vf);
	free(w->yref);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "mib", required_argument, NULL, 'm' },
		{ "label", required_argument, NULL, 'l' },
		{ 0 }
	};
	struct work w = { .label = "vf", .rounds = 8, .part = 2ull << 20, .rng = 0xcbf29ce484222325ull };
	unsigned int failed = 0;
	int c;

	while ((c = getopt_long(argc, argv, "r:m:l:", lo, NULL)) != -1) {
		if (c == 'r')
			w.rounds = (unsigned int)strtoul(optarg, NULL, 0);
		else if (c == 'm')
			w.part = (strtoull(optarg, NULL, 0) << 20) & ~(PAGE - 1);
		else if (c == 'l')
			w.label = optarg;
		else
			goto usage;
	}
	if (optind != argc - 1 || !w.rounds || !w.part)
		goto usage;
	for (const char *p = w.label; *p; p++)	/* each label its own data (FNV-1a) */
		w.rng = (w.rng ^ (uint8_t)*p) * 0x100000001b3ull;
	if (setup(&w, argv[optind])) {
		teardown(&w);
		return 1;
	}
	for (unsigned int r = 1; r <= w.rounds; r++)
		failed += run_round(&w, r) != 0;
	printf("[%s] %u rounds, %u failed%s\n", w.label, w.rounds, failed,
	       failed ? "" : ": every result matched the CPU");
	teardown(&w);
	return failed ? 1 : 0;
usage:
	fprintf(stderr, "usage: %s SOCKET [--rounds N] [--mib M (2 MiB multiple)] [--label TEXT]\n",
		argv[0]);
	return 2;
}
