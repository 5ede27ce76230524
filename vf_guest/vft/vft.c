// SPDX-License-Identifier: MIT
/* The guest suite (vgpu-vf-test): a table of cases run against one attached VF.
 *
 * Each case says what it needs from the host (the RM wire protocol, usermode submission);
 * what the host does not offer is reported as "# SKIP" with the reason, never as a pass.
 * GPU results are checked against a CPU reference computed here. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>
#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/err.h"
#include "common/lock.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_kmod.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/include/vgpu_vf_raw.h"
#include "vf_guest/vf_pci.h"
#include "vf_guest/vft/vft.h"

#define NEED_RM		(1u << 0)	/* VRAM, address spaces */
#define NEED_GPU	(1u << 1)	/* channels and submission */
#define NEED_IOVA	(1u << 2)	/* the IOVA of DMA memory (BAR2 extension) */
#define NEED_DB		(1u << 3)	/* the doorbell page in BAR2 (BAR2 extension) */
#define ONLY_KMOD	(1u << 4)	/* runs only over the kernel driver: not even listed as
					 * skipped elsewhere (other transports' plans unchanged) */
#define VFT_SKIP	(-1)
#define VFT_VA_BASE	(1ull << 32)

struct vft {
	const struct vft_opts *o;
	FILE *out;
	struct vgpu_vf *vf;
	struct vgpu_vf_info info;
	bool rm_ok, gpu_ok;
	const char *rm_why, *gpu_why;
	char skip_why[320];
	bool hush;		/* --loop, a round before the last: diagnostics are held in
				 * held[] and printed only if the case fails */
	char held[1024];
	size_t held_len;
	/* per case */
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	uint64_t next_va;
};

static void diag(struct vft *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diag(struct vft *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->hush) {	/* keep what fits: the first lines say what went wrong */
		size_t room = sizeof(t->held) - t->held_len;

		va_start(ap, fmt);
		n = vsnprintf(t->held + t->held_len, room, fmt, ap);
		va_end(ap);
		if (n > 0 && (size_t)n + 1 < room) {
			t->held_len += (size_t)n;
			t->held[t->held_len++] = '\n';
			t->held[t->held_len] = '\0';
		}
		return;
	}
	fputs("# ", t->out);
	va_start(ap, fmt);
	vfprintf(t->out, fmt, ap);
	va_end(ap);
	fputc('\n', t->out);
}

/* --loop: a case's first failure in a round before the last, with what it said. */
static void diag_held(struct vft *t, unsigned int round, const char *name)
{
	char *line = t->held, *nl;

	diag(t, "loop: round %u: %s failed: %s", round, name, vgpu_vf_last_error(t->vf));
	for (; *line && (nl = strchr(line, '\n')); line = nl + 1) {
		*nl = '\0';
		diag(t, "  %s", line);
	}
}

#define CHECK(t, cond, ...)							\
	do {									\
		if (!(cond)) {							\
			diag(t, "%s:%d: check '%s' failed", __func__, __LINE__, #cond); \
			diag(t, __VA_ARGS__);					\
			return 1;						\
		}								\
	} while (0)
#define CHECK_RET(t, expr, want)						\
	do {									\
		int r_ = (expr);						\
		CHECK(t, r_ == (want), "%s returned %d (%s), expected %d (%s)", #expr, \
		      r_, vgpu_vf_strerror(r_), (int)(want), vgpu_vf_strerror(want)); \
	} while (0)

/* ---- helpers ---- */

/* A fresh GPU VA range aligned to 2 MiB. */
static uint64_t va_get(struct vft *t, uint64_t size)
{
	uint64_t va = t->next_va;

	t->next_va += (size + VGPU_GMMU_PAGE_2M - 1) & ~(VGPU_GMMU_PAGE_2M - 1);
	t->next_va += VGPU_GMMU_PAGE_2M;	/* a guard gap */
	return va;
}

/* Submit @pb on @ch and wait for it. */
static int run_pb(struct vgpu_channel *ch, const struct vgpu_pb *pb)
{
	struct vgpu_fence f;
	int ret;

	if (pb->err)
		return pb->err;
	ret = vgpu_submit(ch, pb->dw, pb->len, &f);
	return ret ? ret : vgpu_fence_wait(&f, 0);
}

/* Drop the function's TLB entries for [va, va+size) (size 0: all). Engine TLBs are per
 * function, so translations cached under an earlier case's address space would survive. */
static int tlb_flush(struct vft *t, uint64_t va, uint64_t size)
{
	struct vgpu_pb pb;
	uint32_t dw[8];

	vgpu_pb_init(&pb, dw, 8);
	vgpu_pb_invalidate(&pb, va, size);
	return run_pb(t->ch, &pb);
}

/* One address space serves every case, as a program keeps one (and a new one would often
 * get the same page-table VRAM back; see doc/vf_guest.md on the device's stale-walk race);
 * each case gets a fresh channel and fresh VAs. */
static int gpu_setup(struct vft *t)
{
	int ret = 0;

	if (!t->as)
		ret = vgpu_vaspace_create(t->vf, &t->as);
	if (!ret)
		ret = vgpu_channel_create(t->vf, t->as, NULL, &t->ch);
	return ret ? ret : tlb_flush(t, 0, 0);
}

/* Allocate @size bytes of @kind and map them at a fresh VA with @ps pages. */
static int buf_new(struct vft *t, enum vgpu_mem_kind kind, uint64_t size, uint64_t ps,
		   struct vgpu_mem **m, uint64_t *va)
{
	int ret = vgpu_mem_alloc(t->vf, kind, size, ps, m);

	if (ret)
		return ret;
	*va = va_get(t, vgpu_mem_size(*m));
	ret = vgpu_va_map(t->as, *va, *m, 0, vgpu_mem_size(*m), ps, 0);
	if (ret) {
		vgpu_mem_free(*m);
		*m = NULL;
	}
	return ret;
}

static void buf_del(struct vft *t, struct vgpu_mem *m, uint64_t va)
{
	if (!m)
		return;
	vgpu_va_unmap(t->as, va, vgpu_mem_size(m));
	tlb_flush(t, va, vgpu_mem_size(m));
	vgpu_mem_free(m);
}

/* xorshift: reproducible test data. */
static uint32_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)*s;
}

/* ---- cases: attach and mailbox ---- */

static int t_attach(struct vft *t)
{
	CHECK(t, t->info.vf_id >= 1 && t->info.vf_id <= 63, "vf id %u", t->info.vf_id);
	CHECK(t, t->info.vram_size > 0, "no VRAM");
	CHECK(t, VGPU_ABI_VERSION_MAJOR(t->info.abi_version) == VGPU_ABI_MAJOR, "abi %#x",
	      t->info.abi_version);
	diag(t, "VF %u: %llu MiB VRAM, %llu KiB DMA, %u channels, ABI %u.%u, usermode "
	     "submission %s", t->info.vf_id, (unsigned long long)(t->info.vram_size >> 20),
	     (unsigned long long)(t->info.dma_size >> 10), t->info.channels,
	     VGPU_ABI_VERSION_MAJOR(t->info.abi_version), VGPU_ABI_VERSION_MINOR(t->info.abi_version),
	     t->info.usermode_submit ? "yes" : "no");
	return 0;
}

static int t_ping(struct vft *t)
{
	static const size_t sizes[] = { 0, 1, 64, 1000, VF_MSG_MAX_PAYLOAD };
	static uint8_t buf[VF_MSG_MAX_PAYLOAD];
	uint64_t s = 42;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rnd(&s);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(sizes); i++)
		CHECK_RET(t, vgpu_vf_ping(t->vf, buf, sizes[i]), 0);
	return 0;
}

static int t_ping_many(struct vft *t)
{
	for (uint32_t i = 0; i < 2000; i++)
		CHECK_RET(t, vgpu_vf_ping(t->vf, &i, sizeof(i)), 0);
	return 0;
}

static int t_mbox_bad(struct vft *t)
{
	static uint8_t big[VF_MSG_MAX_PAYLOAD + 1];
	size_t len = 0;

	/* The host's answer to an unknown type is surfaced as it is. */
	CHECK_RET(t, vgpu_vf_mbox_call(t->vf, 0x7777, NULL, 0, NULL, &len), -EOPNOTSUPP);
	CHECK_RET(t, vgpu_vf_ping(t->vf, big, sizeof(big)), -EMSGSIZE);
	CHECK_RET(t, vgpu_vf_ping(t->vf, "still here", 10), 0);
	return 0;
}

/* ---- DMA memory (the RM's, sub-allocated by the driver) ---- */

static int t_dma(struct vft *t)
{
	struct vgpu_mem *m[4096];
	uint32_t n = 0;
	int ret;

	CHECK(t, t->info.dma_size >= 4096, "no DMA memory");
	while (n < VGPU_ARRAY_SIZE(m) &&
	       (ret = vgpu_mem_alloc(t->vf, VGPU_MEM_SYSMEM, 64 << 10, 0, &m[n])) == 0) {
		memset(vgpu_mem_cpu(m[n]), (int)n, 64 << 10);
		n++;
	}
	CHECK(t, n == VGPU_ARRAY_SIZE(m) || ret == -ENOMEM || ret == -VGPU_EQUOTA, "stopped with %d",
	      ret);
	CHECK(t, (uint64_t)n * (64 << 10) <= t->info.dma_size, "%u blocks", n);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = vgpu_mem_cpu(m[i]);

		CHECK(t, p[0] == (uint8_t)i && p[(64 << 10) - 1] == (uint8_t)i, "block %u overlaps", i);
	}
	for (uint32_t i = 0; i < n; i++)
		CHECK_RET(t, vgpu_mem_free(m[i]), 0);
	CHECK_RET(t, vgpu_mem_alloc(t->vf, VGPU_MEM_SYSMEM, 64 << 10, 0, &m[0]), 0);
	vgpu_mem_free(m[0]);
	return 0;
}

/* One piece of DMA memory somebody holds. */
struct dma_piece {
	uint64_t off, size;
	const char *who;
	bool device_writes;	/* a channel's rings: no CPU pattern there */
};

/* Every piece inside DMA memory and no two overlapping. */
static int pieces_disjoint(struct vft *t, const struct dma_piece *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		CHECK(t, p[i].off + p[i].size <= t->info.dma_size, "%s at %#llx+%#llx is outside",
		      p[i].who, (unsigned long long)p[i].off, (unsigned long long)p[i].size);
		for (uint32_t j = 0; j < i; j++)
			CHECK(t, p[i].off + p[i].size <= p[j].off || p[j].off + p[j].size <= p[i].off,
			      "%s at %#llx+%#llx overlaps %s at %#llx+%#llx", p[i].who,
			      (unsigned long long)p[i].off, (unsigned long long)p[i].size, p[j].who,
			      (unsigned long long)p[j].off, (unsigned long long)p[j].size);
	}
	return 0;
}

/* MEMORY_SYSMEM straight from the RM, the driver's buffers and channels, interleaved: each
 * byte of DMA memory has one owner, and a pattern written into each piece survives the rest. */
static int t_dma_owner(struct vft *t)
{
	enum { ROUNDS = 4 };
	struct dma_piece p[3 * ROUNDS];
	struct vgpu_channel *ch[ROUNDS] = { 0 };
	struct vgpu_mem *m[ROUNDS] = { 0 };
	uint8_t *dma = vgpu_vf_dma_cpu(t->vf);
	uint32_t h[ROUNDS] = { 0 }, n = 0;
	uint64_t iova, off, size;
	int ret = 0, bad = 0;

	for (int i = 0; i < ROUNDS && !ret; i++) {
		ret = vgpu_vf_rm_sysmem_alloc(t->vf, 64 << 10, &h[i], &iova, &p[n].off);
		if (ret == -EOPNOTSUPP && i == 0) {
			snprintf(t->skip_why, sizeof(t->skip_why), "the host RM has no MEMORY_SYSMEM");
			return VFT_SKIP;
		}
		if (ret)
			break;
		p[n].size = 64 << 10;
		p[n].device_writes = false;
		p[n++].who = "RM MEMORY_SYSMEM";
		ret = vgpu_mem_alloc(t->vf, VGPU_MEM_SYSMEM, 64 << 10, 0, &m[i]);
		if (ret)
			break;
		ret = vgpu_mem_dma_offset(m[i], &off);
		if (ret)
			break;
		p[n++] = (struct dma_piece){ off, vgpu_mem_size(m[i]), "a SYSMEM buffer", false };
		ret = vgpu_channel_create(t->vf, t->as, NULL, &ch[i]);
		if (!ret)
			ret = vgpu_channel_dma_block(ch[i], &off, &size);
		if (ret)
			break;
		p[n++] = (struct dma_piece){ off, size, "a channel", true };
	}
	if (!ret)
		bad = pieces_disjoint(t, p, n);
	/* The channels' pieces are written by the device: the patterns go into the others. */
	for (uint32_t i = 0; !ret && !bad && i < n; i++)
		if (!p[i].device_writes)
			memset(dma + p[i].off, 0x40 + (int)i, p[i].size);
	for (int i = 0; !ret && !bad && i < ROUNDS; i++) {
		struct vgpu_pb pb;
		uint32_t dw[8];

		vgpu_pb_init(&pb, dw, 8);
		vgpu_pb_nop(&pb);
		ret = run_pb(ch[i], &pb);
	}
	for (uint32_t i = 0; !ret && !bad && i < n; i++) {
		const uint8_t *b = dma + p[i].off;

		if (p[i].device_writes)
			continue;
		for (uint64_t k = 0; k < p[i].size && !bad; k += 4093)
			bad = b[k] != 0x40 + i;
		if (bad)
			diag(t, "%s at %#llx lost its pattern", p[i].who, (unsigned long long)p[i].off);
	}
	for (int i = 0; i < ROUNDS; i++) {
		vgpu_channel_destroy(ch[i]);
		vgpu_mem_free(m[i]);
		if (h[i])
			vgpu_vf_rm_free(t->vf, h[i]);
	}
	CHECK_RET(t, ret, 0);
	return bad;
}

/* ---- VRAM and page tables ---- */

static int t_vram_quota(struct vft *t)
{
	struct vgpu_mem **m;
	uint64_t total = 0, step = 32 << 20;
	uint32_t n = 0, cap = (uint32_t)(t->info.vram_size / (2 << 20)) + 1;
	int ret;

	m = calloc(cap, sizeof(*m));
	CHECK(t, m, "no memory");
	/* Big steps, then 2 MiB ones to the last byte the quota allows. */
	for (;;) {
		ret = n < cap ? vgpu_mem_alloc(t->vf, VGPU_MEM_VRAM, step, VGPU_GMMU_PAGE_2M, &m[n])
			      : -E2BIG;
		if (!ret) {
			total += vgpu_mem_size(m[n++]);
			continue;
		}
		if (step == (2 << 20) || ret == -E2BIG)
			break;
		step = 2 << 20;
	}
	for (uint32_t i = 0; i < n; i++)
		vgpu_mem_free(m[i]);
	free(m);
	diag(t, "allocated %llu MiB of %llu MiB before the quota error",
	     (unsigned long long)(total >> 20), (unsigned long long)(t->info.vram_size >> 20));
	CHECK(t, total + (32 << 20) > t->info.vram_size / 2, "only %llu bytes",
	      (unsigned long long)total);
	CHECK(t, total <= t->info.vram_size, "more than the slice");
	CHECK(t, ret == -VGPU_EQUOTA || ret == -ENOMEM || ret == -ENOSPC, "past the quota: %d (%s)",
	      ret, vgpu_vf_strerror(ret));
	/* Everything came back: the whole first step fits again. */
	struct vgpu_mem *one = NULL;

	CHECK_RET(t, vgpu_mem_alloc(t->vf, VGPU_MEM_VRAM, 32 << 20, VGPU_GMMU_PAGE_2M, &one), 0);
	vgpu_mem_free(one);
	return 0;
}

static int map_case(struct vft *t, enum vgpu_mem_kind kind, uint64_t ps)
{
	struct vgpu_mem *m;
	uint64_t va, size = ps * 4, addr, got_ps;
	enum vgpu_mem_kind got_kind;
	struct vgpu_pb pb;
	uint32_t dw[64];
	int ret;

	if (kind == VGPU_MEM_SYSMEM && size > t->info.dma_size / 4)
		size = ps;
	ret = buf_new(t, kind, size, ps, &m, &va);
	CHECK(t, ret == 0, "alloc+map %llu bytes: %s", (unsigned long long)size, vgpu_vf_strerror(ret));
	CHECK_RET(t, vgpu_va_lookup(t->as, va + size - 1, &got_kind, &addr, &got_ps), 0);
	CHECK(t, got_kind == kind && got_ps == ps && addr == vgpu_mem_addr(m) + size - 1,
	      "lookup: kind %d ps %llu", got_kind, (unsigned long long)got_ps);
	/* Mapping the same VA twice is refused and changes nothing. */
	CHECK_RET(t, vgpu_va_map(t->as, va, m, 0, ps, ps, 0), -EEXIST);
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_fill(&pb, va, size, 0x5a5a0000u | (uint32_t)(ps >> 12));
	CHECK_RET(t, run_pb(t->ch, &pb), 0);
	const uint32_t *p = vgpu_mem_cpu(m);
	for (uint64_t i = 0; i < size / 4; i += 997)
		CHECK(t, p[i] == (0x5a5a0000u | (uint32_t)(ps >> 12)), "word %llu = %#x",
		      (unsigned long long)i, p[i]);
	/* Unmap, invalidate: the VA now faults in the channel that uses it. */
	CHECK_RET(t, vgpu_va_unmap(t->as, va, size), 0);
	CHECK_RET(t, vgpu_va_lookup(t->as, va, NULL, NULL, NULL), -ENOENT);
	CHECK_RET(t, vgpu_mem_free(m), 0);
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_invalidate(&pb, va, size);
	CHECK_RET(t, run_pb(t->ch, &pb), 0);
	return 0;
}

static int t_map_vram(struct vft *t)
{
	static const uint64_t ps[] = { VGPU_GMMU_PAGE_4K, VGPU_GMMU_PAGE_64K, VGPU_GMMU_PAGE_2M };

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(ps); i++)
		if (map_case(t, VGPU_MEM_VRAM, ps[i]))
			return 1;
	return 0;
}

static int t_map_sysmem(struct vft *t)
{
	static const uint64_t ps[] = { VGPU_GMMU_PAGE_4K, VGPU_GMMU_PAGE_64K, VGPU_GMMU_PAGE_2M };

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(ps); i++) {
		if (ps[i] > t->info.dma_size / 2) {
			diag(t, "DMA memory too small for %llu KiB pages", (unsigned long long)(ps[i] >> 10));
			continue;
		}
		if (map_case(t, VGPU_MEM_SYSMEM, ps[i]))
			return 1;
	}
	return 0;
}

/* ---- engines against a CPU reference ---- */

static int fill_copy_case(struct vft *t, uint64_t size)
{
	struct vgpu_mem *m;
	uint64_t va, half = size / 2, s = size;
	struct vgpu_pb pb;
	uint32_t dw[64], *p;
	int ret;

	ret = buf_new(t, VGPU_MEM_VRAM, size, VGPU_GMMU_PAGE_2M, &m, &va);
	CHECK(t, ret == 0, "%llu MiB: %s", (unsigned long long)(size >> 20), vgpu_vf_strerror(ret));
	p = vgpu_mem_cpu(m);
	for (uint64_t i = 0; i < half / 4; i++)
		p[i] = rnd(&s);
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_fill(&pb, va + half, half, 0xdeadbeef);
	CHECK_RET(t, run_pb(t->ch, &pb), 0);
	for (uint64_t i = half / 4; i < size / 4; i += 4093)
		CHECK(t, p[i] == 0xdeadbeef, "fill: word %llu", (unsigned long long)i);
	/* COPY an odd-sized, odd-aligned range: the engine takes any alignment. */
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_copy(&pb, va + 1, va + half + 3, half - 5);
	CHECK_RET(t, run_pb(t->ch, &pb), 0);
	CHECK(t, memcmp((uint8_t *)p + 1, (uint8_t *)p + half + 3, half - 5) == 0, "copy differs");
	CHECK(t, ((uint8_t *)p)[half + 2] == 0xad, "copy wrote before its destination");
	buf_del(t, m, va);
	return 0;
}

static int t_fill_copy(struct vft *t)
{
	uint64_t max = t->o->big ? 256ull << 20 : 16ull << 20;

	for (uint64_t size = 2 << 20; size <= max; size *= 8)
		if (fill_copy_case(t, size))
			return 1;
	return t->o->big ? fill_copy_case(t, 256ull << 20) : 0;
}

/* The compute case's inputs, drawn again from the seed to check (no reference copy: a
 * --big buffer is 256 MiB and a VM guest may have no more RAM than that). */
static void compute_draw(uint64_t *s, uint32_t *u, float *x, float *y)
{
	*u = (uint32_t)rnd(s);
	*x = (float)(rnd(s) % 2000) / 7.0f - 100.0f;
	*y = (float)(rnd(s) % 1000) / 3.0f;
}

/* REDUCE_ADD_U32 and AXPY_F32 over three arrays filling the buffer: 12 MiB, or 256 MiB with
 * --big. */
static int t_compute(struct vft *t)
{
	uint64_t bytes = t->o->big ? 256ull << 20 : 12ull << 20;
	uint32_t n = (uint32_t)((bytes - 4096) / 12 / 1024 * 1024);
	struct vgpu_mem *m;
	uint64_t va, s = 7, want = 0, *sum;
	uint32_t *u, dw[64], uw;
	float *x, *y, xw, yw;
	struct vgpu_pb pb;
	int ret;

	ret = buf_new(t, VGPU_MEM_VRAM, bytes, VGPU_GMMU_PAGE_64K, &m, &va);
	CHECK(t, ret == 0, "%s", vgpu_vf_strerror(ret));
	u = vgpu_mem_cpu(m);
	x = (float *)(u + n);
	y = x + n;
	sum = (uint64_t *)(y + n);
	for (uint32_t i = 0; i < n; i++) {
		compute_draw(&s, &u[i], &x[i], &y[i]);
		want += u[i];
	}
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_reduce_add_u32(&pb, va, n, va + 3ull * n * 4);
	vgpu_pb_axpy_f32(&pb, va + (uint64_t)n * 4, va + 2ull * n * 4, n, 1.75f);
	ret = run_pb(t->ch, &pb);
	if (!ret && *sum != want)
		ret = -EBADMSG;
	s = 7;
	for (uint32_t i = 0; !ret && i < n; i++) {
		float yref;

		compute_draw(&s, &uw, &xw, &yw);
		yref = 1.75f * xw + yw;
		if (memcmp(&y[i], &yref, sizeof(float)))
			ret = -EDOM;
	}
	buf_del(t, m, va);
	diag(t, "%u elements, %llu MiB", n, (unsigned long long)(bytes >> 20));
	CHECK_RET(t, ret, 0);
	return 0;
}

/* ---- synchronisation ---- */

static int t_sem_across(struct vft *t)
{
	struct vgpu_channel *b;
	struct vgpu_mem *m;
	struct vgpu_fence fa, fb;
	struct vgpu_pb pb;
	uint32_t dw[64], *p;
	uint64_t va;

	CHECK_RET(t, vgpu_channel_create(t->vf, t->as, NULL, &b), 0);
	CHECK_RET(t, buf_new(t, VGPU_MEM_VRAM, 64 << 10, VGPU_GMMU_PAGE_64K, &m, &va), 0);
	p = vgpu_mem_cpu(m);
	/* A waits for B's semaphore to reach 1, then copies what B wrote. */
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_sem_acquire(&pb, vgpu_channel_sem_va(b), 1, VGPU_SEM_64, 0);
	vgpu_pb_copy(&pb, va, va + 4096, 4096);
	CHECK_RET(t, vgpu_submit(t->ch, pb.dw, pb.len, &fa), 0);
	CHECK(t, !vgpu_fence_done(&fa), "A ran before B released");
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_fill(&pb, va, 4096, 0x600dcafe);
	CHECK_RET(t, vgpu_submit(b, pb.dw, pb.len, &fb), 0);
	CHECK_RET(t, vgpu_fence_wait(&fa, 0), 0);
	CHECK(t, vgpu_fence_done(&fb), "A finished before B");
	CHECK(t, p[1024] == 0x600dcafe && p[2047] == 0x600dcafe, "A copied before B filled");
	buf_del(t, m, va);
	vgpu_channel_destroy(b);
	return 0;
}

static int t_64_channels(struct vft *t)
{
	/* 64 (the suite's own channel is one of them), or all the slice has. */
	uint32_t n = cmn_min(64u, t->info.channels ? t->info.channels : 64u);
	struct vgpu_channel **ch = calloc(n, sizeof(*ch));
	struct vgpu_fence *f = calloc(n, sizeof(*f));
	struct vgpu_mem *m = NULL;
	uint32_t made = 0, dw[64], *p;
	struct vgpu_pb pb;
	uint64_t va = 0;
	int ret = 0;

	CHECK(t, ch && f, "no memory");
	ret = buf_new(t, VGPU_MEM_VRAM, (uint64_t)n * 64 * 1024, VGPU_GMMU_PAGE_64K, &m, &va);
	ch[0] = t->ch;
	for (made = 1; !ret && made < n; made++)
		ret = vgpu_channel_create(t->vf, t->as, NULL, &ch[made]);
	if (ret)
		made--;
	for (uint32_t r = 0; !ret && r < 8; r++) {
		for (uint32_t i = 0; !ret && i < n; i++) {
			vgpu_pb_init(&pb, dw, 64);
			vgpu_pb_fill(&pb, va + (uint64_t)i * 65536 + r * 8192, 8192, i << 8 | r);
			ret = vgpu_submit(ch[i], pb.dw, pb.len, &f[i]);
		}
	}
	for (uint32_t i = 0; !ret && i < n; i++)
		ret = vgpu_fence_wait(&f[i], 0);
	p = m ? vgpu_mem_cpu(m) : NULL;
	for (uint32_t i = 0; !ret && i < n; i++)
		for (uint32_t r = 0; r < 8; r++)
			if (p[(i * 65536 + r * 8192) / 4 + 7] != (i << 8 | r))
				ret = -EBADMSG;
	for (uint32_t i = 1; i < made; i++)
		vgpu_channel_destroy(ch[i]);
	buf_del(t, m, va);
	free(ch);
	free(f);
	diag(t, "%u channels x 8 submissions", made);
	CHECK_RET(t, ret, 0);
	return 0;
}

/* Four threads, each with its own channel and buffer in the shared address space. */
struct thr_arg {
	struct vft *t;
	uint64_t va;
	int ret;
};

static void *thr_work(void *p)
{
	struct thr_arg *a = p;
	struct vgpu_channel *ch = NULL;
	struct vgpu_mem *m = NULL;
	struct vgpu_fence f;
	struct vgpu_pb pb;
	uint32_t dw[32], *cpu;

	a->ret = vgpu_channel_create(a->t->vf, a->t->as, NULL, &ch);
	if (!a->ret)
		a->ret = vgpu_mem_alloc(a->t->vf, VGPU_MEM_VRAM, 2 << 20, VGPU_GMMU_PAGE_2M, &m);
	if (!a->ret)
		a->ret = vgpu_va_map(a->t->as, a->va, m, 0, 2 << 20, VGPU_GMMU_PAGE_2M, 0);
	for (uint32_t r = 0; !a->ret && r < 20; r++) {
		vgpu_pb_init(&pb, dw, 32);
		vgpu_pb_fill(&pb, a->va, 2 << 20, (uint32_t)a->va ^ r);
		a->ret = vgpu_submit(ch, pb.dw, pb.len, &f);
		if (!a->ret)
			a->ret = vgpu_fence_wait(&f, 0);
		cpu = a->ret ? NULL : vgpu_mem_cpu(m);
		if (cpu && (cpu[0] != ((uint32_t)a->va ^ r) || cpu[(1 << 19) - 1] != ((uint32_t)a->va ^ r)))
			a->ret = -EBADMSG;
	}
	if (m) {
		vgpu_va_unmap(a->t->as, a->va, 2 << 20);
		vgpu_mem_free(m);
	}
	vgpu_channel_destroy(ch);
	return NULL;
}

static int t_threads(struct vft *t)
{
	struct thr_arg a[4];
	pthread_t thr[4];

	for (int i = 0; i < 4; i++) {
		a[i] = (struct thr_arg){ .t = t, .va = va_get(t, 2 << 20) };
		CHECK_RET(t, pthread_create(&thr[i], NULL, thr_work, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(thr[i], NULL);
	for (int i = 0; i < 4; i++)
		CHECK(t, a[i].ret == 0, "thread %d: %d (%s)", i, a[i].ret, vgpu_vf_strerror(a[i].ret));
	/* The VAs are reused by no one: flush so no later case sees their translations. */
	return tlb_flush(t, 0, 0);
}

/* ---- managed memory (managed.c: its own address space and replayable channel) ---- */

static int t_managed(struct vft *t)
{
	char why[640] = "";
	int ret = vft_managed_case(t->vf, why, sizeof(why));

	if (ret > 0) {
		/* a skip reason is short; a failure (below) may name much more */
		snprintf(t->skip_why, sizeof(t->skip_why), "%.*s", (int)sizeof(t->skip_why) - 1,
			 why);
		return VFT_SKIP;
	}
	diag(t, "managed: %s", why);
	return ret ? 1 : 0;
}

/* ---- SVM through the kernel driver: process memory the kernel migrated into VRAM ---- */

/* Fill @n pages of @p on the GPU where the kernel's mirror says they are; the CPU must read
 * the GPU's value in place, and keep it once the pages are back in system memory. */
static int kmod_svm_fill(struct vft *t, uint32_t *p, size_t n, uint64_t *addr)
{
	uint64_t va = va_get(t, n * 4096), moved;
	struct vgpu_pb pb;
	uint32_t dw[16];
	size_t i, mapped = 0;
	int ret;

	for (i = 0; i < n * 1024; i++)
		p[i] = 0x11111111u;
	ret = vgpu_kmod_svm_where(t->vf, p, n, addr);
	for (i = 0; !ret && i < n; i++, mapped++) {
		CHECK(t, addr[i], "page %zu is not in VRAM", i);
		ret = vgpu_va_map_raw(t->as, va + i * 4096, VGPU_MEM_VRAM, addr[i], 4096,
				      VGPU_GMMU_PAGE_4K, 0);
	}
	if (!ret) {
		vgpu_pb_init(&pb, dw, 16);
		vgpu_pb_fill(&pb, va, n * 4096, 0xc0ffee42u);
		ret = run_pb(t->ch, &pb);
	}
	for (i = 0; i < mapped; i++)
		vgpu_va_unmap(t->as, va + i * 4096, 4096);
	tlb_flush(t, va, n * 4096);
	CHECK_RET(t, ret, 0);
	for (i = 0; i < n * 1024; i++)
		CHECK(t, p[i] == 0xc0ffee42u, "word %zu: %#x after the GPU's fill", i, p[i]);
	CHECK_RET(t, vgpu_kmod_svm_migrate(t->vf, p, n * 4096, false, &moved), 0);
	CHECK(t, moved == n, "%llu of %zu pages back", (unsigned long long)moved, n);
	for (i = 0; i < n * 1024; i++)
		CHECK(t, p[i] == 0xc0ffee42u, "word %zu: %#x back in system memory", i, p[i]);
	return 0;
}

static int t_kmod_svm(struct vft *t)
{
	const size_t n = 64;
	uint64_t addr[64], moved = 0;
	uint32_t *p = mmap(NULL, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			   -1, 0);
	int ret;

	CHECK(t, p != MAP_FAILED, "mmap");
	memset(p, 0x5a, n * 4096);
	ret = vgpu_kmod_svm_migrate(t->vf, p, n * 4096, true, &moved);
	ret = ret ? ret : moved == n ? kmod_svm_fill(t, p, n, addr) : -ENOMEM;
	munmap(p, n * 4096);
	CHECK(t, ret == 0, "%llu of %zu pages moved: %s", (unsigned long long)moved, n,
	      vgpu_vf_strerror(ret));
	return 0;
}

/* GPU work on malloc'd memory through the kernel's own SVM address space (kmod_as.c). */
static int t_kmod_as(struct vft *t)
{
	char why[512] = "";
	int ret = vft_kmod_as_case(t->vf, why, sizeof(why));

	diag(t, "kernel address space: %s", why);
	return ret ? 1 : 0;
}

/* ---- isolation: each attack must fail on its own channel, and the VF must keep working ---- */

/* Wait, bounded, for @ch to enter its error state: -VGPU_ECHANERR, or -ETIMEDOUT. */
static int chan_error_wait(struct vgpu_channel *ch, uint64_t timeout_ns)
{
	uint64_t deadline = cmn_deadline_ns(timeout_ns);
	struct timespec ts = { 0, 100 * 1000 };
	int ret;

	while ((ret = vgpu_channel_error(ch, NULL, NULL)) == 0 && !cmn_deadline_passed(deadline))
		nanosleep(&ts, NULL);
	return ret ? ret : -ETIMEDOUT;
}

/* Run @pb on a fresh channel and expect the channel error @want; then prove the VF still works. */
static int attack(struct vft *t, const struct vgpu_pb *pb, uint64_t raw_gp, uint32_t want)
{
	struct vgpu_channel *bad;
	struct vgpu_fence f;
	uint32_t code = 0;
	int ret;

	CHECK_RET(t, vgpu_channel_create(t->vf, t->as, NULL, &bad), 0);
	if (pb) {
		CHECK_RET(t, vgpu_submit(bad, pb->dw, pb->len, &f), 0);
		ret = vgpu_fence_wait(&f, 2ull * 1000 * 1000 * 1000);
	} else {
		/* The raw entry alone: the device may reach it at once (doorbell) and put the
		 * channel in its error state before any further submission, so wait on that. */
		CHECK_RET(t, vgpu_submit_gp_raw(bad, raw_gp), 0);
		ret = chan_error_wait(bad, 2ull * 1000 * 1000 * 1000);
	}
	CHECK(t, ret == -VGPU_ECHANERR, "the attack ran: %d (%s)", ret, vgpu_vf_strerror(ret));
	CHECK_RET(t, vgpu_channel_error(bad, &code, NULL), -VGPU_ECHANERR);
	CHECK(t, code == want, "channel error %u, expected %u", code, want);
	vgpu_channel_destroy(bad);
	/* The other channel of this VF is untouched. */
	CHECK_RET(t, vgpu_channel_error(t->ch, NULL, NULL), 0);
	struct vgpu_pb ok;
	uint32_t dw[8];
	vgpu_pb_init(&ok, dw, 8);
	vgpu_pb_nop(&ok);
	CHECK_RET(t, run_pb(t->ch, &ok), 0);
	return 0;
}

static int t_pte_past_slice(struct vft *t)
{
	uint64_t va = va_get(t, VGPU_GMMU_PAGE_2M);
	struct vgpu_pb pb;
	uint32_t dw[16];

	/* The driver writes the PTE (it trusts its caller); the device must refuse it. */
	CHECK_RET(t, vgpu_va_map_raw(t->as, va, VGPU_MEM_VRAM, t->info.vram_size,
				     VGPU_GMMU_PAGE_2M, VGPU_GMMU_PAGE_2M, 0), 0);
	vgpu_pb_init(&pb, dw, 16);
	vgpu_pb_fill(&pb, va, 4096, 0xbad);
	if (attack(t, &pb, 0, VGPU_CHAN_ERR_MMU_FAULT))
		return 1;
	CHECK_RET(t, vgpu_va_unmap(t->as, va, VGPU_GMMU_PAGE_2M), 0);
	return 0;
}

static int t_iova_outside(struct vft *t)
{
	uint64_t va = va_get(t, 4096);
	struct vgpu_pb pb;
	uint32_t dw[16];

	/* IOVA 0 is below the DMA window: not mapped in the VF's IOMMU domain. */
	CHECK_RET(t, vgpu_va_map_raw(t->as, va, VGPU_MEM_SYSMEM, 0, 4096, 4096, 0), 0);
	vgpu_pb_init(&pb, dw, 16);
	vgpu_pb_fill(&pb, va, 4096, 0xbad);
	if (attack(t, &pb, 0, VGPU_CHAN_ERR_IOMMU_FAULT))
		return 1;
	CHECK_RET(t, vgpu_va_unmap(t->as, va, 4096), 0);
	return 0;
}

static int t_gp_outside(struct vft *t)
{
	/* A pushbuffer at a VA nothing maps. */
	return attack(t, NULL, vgpu_gp_entry(VGPU_GMMU_VA_LIMIT - (1ull << 30), 16),
		      VGPU_CHAN_ERR_PB_FAULT);
}

static int t_foreign_token(struct vft *t)
{
	struct vgpu_doorbell_page *db = vgpu_vf_doorbell_page(t->vf);
	struct vgpu_pb pb;
	uint32_t dw[8];

	CHECK(t, db, "no doorbell page");
	/* Tokens of channels this VF does not own are dropped by the device. */
	for (uint32_t chid = 0; chid < 64; chid++)
		if (chid != vgpu_channel_id(t->ch))
			vgpu_doorbell_write(db, vgpu_token(0, chid));
	vgpu_doorbell_write(db, vgpu_token(0x7fff, vgpu_channel_id(t->ch)));
	vgpu_doorbell_write(db, 0xffffu);
	vgpu_pb_init(&pb, dw, 8);
	vgpu_pb_nop(&pb);
	CHECK_RET(t, run_pb(t->ch, &pb), 0);
	CHECK_RET(t, vgpu_channel_error(t->ch, NULL, NULL), 0);
	return 0;
}

static int t_forged_handle(struct vft *t)
{
	struct vgpu_vf *vf = t->vf;
	uint32_t other = t->info.vf_id == 1 ? 2 : 1;
	uint32_t client_idx = VGPU_RM_CLIENT_IDX(vgpu_vf_rm_client(vf));
	uint32_t forged = VGPU_RM_CLIENT_HANDLE(other, client_idx);
	struct vgpu_mem *m;

	/* Our own object, named through another VF's client: refused as foreign. */
	CHECK_RET(t, vgpu_mem_alloc(vf, VGPU_MEM_VRAM, 2 << 20, VGPU_GMMU_PAGE_2M, &m), 0);
	CHECK_RET(t, vgpu_vf_rm_free_as(vf, forged, vgpu_mem_rm_handle(m)), -VGPU_EFOREIGN);
	/* Another VF's client itself. */
	CHECK_RET(t, vgpu_vf_rm_free_as(vf, forged, forged), -VGPU_EFOREIGN);
	/* Our object still exists and frees normally. */
	CHECK_RET(t, vgpu_mem_free(m), 0);
	return 0;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* ---- reset recovery (the reset comes from outside: vgpuctl reset, or a vgpud restart) ---- */

static int t_reset(struct vft *t)
{
	uint64_t deadline = cmn_deadline_ns(t->o->reset_wait_s * VGPU_NSEC_PER_SEC);
	struct vgpu_mem *sys, *vram = NULL, *again;
	struct vgpu_vf_info after;
	struct vgpu_vf_lost lost;
	int ret;

	CHECK_RET(t, vgpu_mem_alloc(t->vf, VGPU_MEM_SYSMEM, 64 << 10, 0, &sys), 0);
	memset(vgpu_mem_cpu(sys), 0x77, 64 << 10);
	if (t->rm_ok)
		CHECK_RET(t, vgpu_mem_alloc(t->vf, VGPU_MEM_VRAM, 2 << 20, VGPU_GMMU_PAGE_2M, &vram), 0);
	diag(t, "ready for reset");
	fflush(t->out);
	while (!vgpu_vf_reset_pending(t->vf)) {
		CHECK(t, !cmn_deadline_passed(deadline), "no reset within %u s", t->o->reset_wait_s);
		sleep_ms(1);
	}
	/* A restarting vgpud refuses connections for a moment: retry until it is back. */
	while ((ret = vgpu_vf_recover(t->vf, &lost)) != 0) {
		CHECK(t, !cmn_deadline_passed(deadline), "no recovery: %d (%s): %s", ret,
		      vgpu_vf_strerror(ret), vgpu_vf_last_error(t->vf));
		sleep_ms(20);
	}
	diag(t, "recovered after %u reset(s): lost %u VRAM objects, %u address spaces, %u channels",
	     lost.resets, lost.vram_objects, lost.vaspaces, lost.channels);
	CHECK(t, lost.resets >= 1, "no reset reported");
	CHECK(t, lost.vram_objects == (vram ? 1u : 0u), "lost %u VRAM objects", lost.vram_objects);
	CHECK(t, vgpu_mem_cpu(sys) == NULL, "a lost object still has memory");
	CHECK_RET(t, vgpu_mem_free(sys), 0);
	CHECK_RET(t, vgpu_mem_free(vram), 0);
	vgpu_vf_get_info(t->vf, &after);
	CHECK(t, after.vf_id == t->info.vf_id, "came back as VF %u", after.vf_id);
	CHECK_RET(t, vgpu_vf_ping(t->vf, "after reset", 11), 0);
	CHECK_RET(t, vgpu_mem_alloc(t->vf, VGPU_MEM_SYSMEM, 64 << 10, 0, &again), 0);
	CHECK_RET(t, vgpu_mem_free(again), 0);
	return 0;
}

/* ---- the table ---- */

static const struct vft_case {
	const char *name;
	int (*fn)(struct vft *t);
	unsigned int needs;
	bool gpu_ctx;		/* gets t->as and t->ch */
	bool external;		/* needs someone outside to act: only with --reset-wait */
} cases[] = {
	{ "attach and handshake", t_attach, 0, false, false },
	{ "mailbox ping 0..4072 bytes", t_ping, 0, false, false },
	{ "mailbox 2000 round trips", t_ping_many, 0, false, false },
	{ "mailbox unknown type and oversized request", t_mbox_bad, 0, false, false },
	{ "DMA memory alloc/free to exhaustion", t_dma, 0, false, false },
	{ "DMA memory has one owner (RM, buffers, channels)", t_dma_owner,
	  NEED_RM | NEED_GPU | NEED_IOVA, true, false },
	{ "VRAM alloc/free up to the quota", t_vram_quota, NEED_RM, false, false },
	{ "map/unmap VRAM 4K/64K/2M", t_map_vram, NEED_RM | NEED_GPU, true, false },
	{ "map/unmap sysmem 4K/64K/2M", t_map_sysmem, NEED_RM | NEED_GPU | NEED_IOVA, true, false },
	{ "FILL and COPY vs CPU", t_fill_copy, NEED_RM | NEED_GPU, true, false },
	{ "REDUCE_ADD_U32 and AXPY_F32 vs CPU", t_compute, NEED_RM | NEED_GPU, true, false },
	{ "semaphore across channels", t_sem_across, NEED_RM | NEED_GPU, true, false },
	{ "64 channels submitting at once", t_64_channels, NEED_RM | NEED_GPU, true, false },
	{ "4 threads, a channel each", t_threads, NEED_RM | NEED_GPU, true, false },
	{ "managed memory: GPU and CPU faults migrate pages", t_managed,
	  NEED_RM | NEED_GPU | NEED_IOVA, false, false },
	{ "SVM: the GPU fills process memory the kernel migrated into VRAM", t_kmod_svm,
	  NEED_RM | NEED_GPU | ONLY_KMOD, true, false },
	{ "SVM: GPU work on malloc'd memory, faults serviced by the kernel", t_kmod_as,
	  NEED_RM | NEED_GPU | ONLY_KMOD, false, false },
	{ "attack: PTE past the slice", t_pte_past_slice, NEED_RM | NEED_GPU, true, false },
	{ "attack: IOVA outside the domain", t_iova_outside, NEED_RM | NEED_GPU, true, false },
	{ "attack: GP entry outside the DMA memory", t_gp_outside, NEED_RM | NEED_GPU, true, false },
	{ "attack: foreign work-submit tokens", t_foreign_token, NEED_RM | NEED_GPU | NEED_DB, true,
	  false },
	{ "attack: forged RM handle of another VF", t_forged_handle, NEED_RM, false, false },
	{ "reset recovery", t_reset, 0, false, true },
};

void vft_list(FILE *out)
{
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(cases); i++)
		fprintf(out, "%s\n", cases[i].name);
}

/* Does @name contain one of the '|'-separated parts of @only? */
static bool name_matches(const char *name, const char *only)
{
	char part[128];
	const char *end;
	size_t len;

	for (;; only = end + 1) {
		end = strchr(only, '|');
		len = end ? (size_t)(end - only) : strlen(only);
		if (len < sizeof(part)) {
			memcpy(part, only, len);
			part[len] = '\0';
			if (strstr(name, part))
				return true;
		}
		if (!end)
			return false;
	}
}

static bool case_selected(const struct vft_opts *o, const struct vft_case *c)
{
	if ((c->needs & ONLY_KMOD) && !vf_kmod_is(o->transport))
		return false;
	return (!o->only || name_matches(c->name, o->only)) && (!c->external || o->reset_wait_s);
}

static const char *why_not(struct vft *t, unsigned int needs)
{
	if ((needs & NEED_RM) && !t->rm_ok)
		return t->rm_why;
	if ((needs & NEED_GPU) && !t->gpu_ok)
		return t->gpu_why;
	if ((needs & NEED_IOVA) && !vgpu_vf_dma_iova(t->vf))
		return "the host does not say at which IOVA DMA memory is mapped (abi-requests.md)";
	if ((needs & NEED_DB) && !vgpu_vf_doorbell_page(t->vf))
		return "the host's BAR2 has no doorbell page (abi-requests.md)";
	return NULL;
}

static int run_case(struct vft *t, const struct vft_case *c)
{
	int ret;

	t->ch = NULL;
	if (c->gpu_ctx) {
		ret = gpu_setup(t);
		if (ret) {
			diag(t, "address space and channel: %s (%s)", vgpu_vf_strerror(ret),
			     vgpu_vf_last_error(t->vf));
			ret = 1;
			goto out;
		}
	}
	ret = c->fn(t);
	if (ret && t->ch) {
		uint32_t code = 0;
		uint64_t fva = 0;

		if (vgpu_channel_error(t->ch, &code, &fva))
			diag(t, "the case's channel is in error %u (fault VA %#llx)", code,
			     (unsigned long long)fva);
	}
out:
	vgpu_channel_destroy(t->ch);
	t->ch = NULL;
	return ret;
}

static void probe_host(struct vft *t)
{
	t->rm_ok = vgpu_vf_rm_available(t->vf);
	t->rm_why = vgpu_vf_rm_why(t->vf);
	t->gpu_ok = t->rm_ok;
	t->gpu_why = t->rm_why;
}

/* ---- the watchdog: a hang is never silent ---- */

/* Every wait in the driver and the suite is bounded, but a bug may still stall a case (a
 * missing bound, a device that stops). The watchdog turns that into a TAP failure naming the
 * case and then ends the process: a case cannot be torn out of its thread, and a runner
 * waiting forever is what must not happen. */
struct vft_dog {
	struct cmn_mutex lock;		/* protects everything below */
	pthread_cond_t cond;
	FILE *out;
	const struct vft *t;
	unsigned int n;			/* TAP number of the running case, 0: none */
	const char *name;
	uint64_t deadline_ns, limit_s;
	bool stop;
};

static void *dog_main(void *arg)
{
	struct vft_dog *d = arg;

	cmn_mutex_lock(&d->lock);
	while (!d->stop) {
		if (d->n && cmn_now_ns() >= d->deadline_ns) {
			fprintf(d->out, "not ok %u - %s # no result after %llu s: hung\n", d->n,
				d->name, (unsigned long long)d->limit_s);
			fprintf(d->out, "# driver: %s\n", vgpu_vf_last_error(d->t->vf));
			fprintf(d->out, "Bail out! case \"%s\" hung\n", d->name);
			fflush(d->out);
			_exit(124);
		}
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		cmn_cond_timedwait(&d->cond, &d->lock, &ts);
	}
	cmn_mutex_unlock(&d->lock);
	return NULL;
}

static unsigned int dog_limit_s(const struct vft_opts *o, const struct vft_case *c)
{
	const char *env = getenv("VGPU_VFT_CASE_TIMEOUT");
	unsigned int s = o->case_timeout_s;

	if (!s && env)
		s = (unsigned int)strtoul(env, NULL, 10);
	if (!s)
		s = o->big ? 600 : 120;
	return c->external ? s + o->reset_wait_s : s;
}

static void dog_arm(struct vft_dog *d, unsigned int n, const char *name, unsigned int limit_s)
{
	cmn_mutex_lock(&d->lock);
	d->n = n;
	d->name = name;
	d->limit_s = limit_s;
	d->deadline_ns = cmn_now_ns() + (uint64_t)limit_s * VGPU_NSEC_PER_SEC;
	cmn_mutex_unlock(&d->lock);
}

static void dog_stop(struct vft_dog *d, pthread_t thr)
{
	cmn_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_signal(&d->cond);
	cmn_mutex_unlock(&d->lock);
	pthread_join(thr, NULL);
	pthread_cond_destroy(&d->cond);
	cmn_mutex_destroy(&d->lock);
}

int vft_run(const struct vft_opts *o, FILE *out)
{
	struct vgpu_vf_opts vo = { .socket = o->socket, .transport = o->transport,
				   .quiet = !o->verbose };
	struct vft t = { .o = o, .out = out };
	unsigned int pass = 0, fail = 0, skip = 0, n = 0;
	int ret;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(cases); i++)
		n += case_selected(o, &cases[i]);
	fprintf(out, "1..%u\n", n);
	ret = vgpu_vf_open(&vo, &t.vf);
	if (ret) {
		fprintf(out, "not ok 1 - attach: %s\n# %s\n0 passed, %u failed\n",
			vgpu_vf_strerror(ret), o->socket ? o->socket : "(transport)", n);
		return (int)n;
	}
	vgpu_vf_get_info(t.vf, &t.info);
	probe_host(&t);
	struct vft_dog dog = { .lock = { .m = PTHREAD_MUTEX_INITIALIZER },
			       .cond = PTHREAD_COND_INITIALIZER,
			       .out = out, .t = &t };
	pthread_t dog_thr;
	bool dog_on = pthread_create(&dog_thr, NULL, dog_main, &dog) == 0;

	t.next_va = VFT_VA_BASE;
	/* --loop: the selected cases again and again in this one attachment (a VM migrating
	 * meanwhile must not notice); one point per case from the last round, a case that
	 * failed in any round failing it. */
	uint64_t loop_end = cmn_now_ns() + (uint64_t)o->loop_s * VGPU_NSEC_PER_SEC, said = 0;
	bool failed[VGPU_ARRAY_SIZE(cases)] = { false }, last;
	unsigned int round = 0;

next_round:
	round++;
	last = !o->loop_s || cmn_now_ns() >= loop_end;
	/* The round line at most once a second (and the first and last): a console to follow,
	 * not thousands of lines. */
	if (o->loop_s && (round == 1 || last || cmn_now_ns() - said >= VGPU_NSEC_PER_SEC)) {
		fprintf(out, "# loop: round %u%s\n", round, last ? " (last)" : "");
		fflush(out);
		said = cmn_now_ns();
	}
	n = 0;
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(cases); i++) {
		const struct vft_case *c = &cases[i];
		const char *why;

		if (!case_selected(o, c))
			continue;
		n++;
		why = why_not(&t, c->needs);
		t.skip_why[0] = 0;
		dog_arm(&dog, n, c->name, dog_limit_s(o, c));
		t.hush = !last;
		t.held_len = 0;
		t.held[0] = '\0';
		ret = why ? VFT_SKIP : run_case(&t, c);
		t.hush = false;
		dog_arm(&dog, 0, NULL, 0);
		if (ret && ret != VFT_SKIP && !failed[i]) {
			failed[i] = o->loop_s != 0;
			if (!last)
				diag_held(&t, round, c->name);
		}
		if (!last)
			continue;
		if (failed[i] && ret != VFT_SKIP)
			ret = 1;
		if (ret == VFT_SKIP) {
			fprintf(out, "ok %u - %s # SKIP %s\n", n, c->name, why ? why : t.skip_why);
			skip++;
		} else if (ret) {
			fprintf(out, "not ok %u - %s\n", n, c->name);
			if (vgpu_vf_last_error(t.vf)[0])
				diag(&t, "driver: %s", vgpu_vf_last_error(t.vf));
			fail++;
		} else {
			fprintf(out, "ok %u - %s\n", n, c->name);
			pass++;
		}
		fflush(out);
	}
	if (!last)
		goto next_round;
	if (o->loop_s)
		fprintf(out, "# loop: %u rounds\n", round);
	if (dog_on)
		dog_stop(&dog, dog_thr);
	vgpu_vaspace_destroy(t.as);	/* a free the host does not confirm: the close takes it */
	vgpu_vf_close(t.vf);
	if (skip)
		fprintf(out, "%u passed, %u failed, %u skipped\n", pass, fail, skip);
	else
		fprintf(out, "%u passed, %u failed\n", pass, fail);
	return (int)fail;
}
