// SPDX-License-Identifier: MIT
/* GMMU: walks for every page size, every fault reason, partition isolation, the TLB and
 * its invalidation (a full queue costing only its functions their entries), replayable
 * faults; VRAM slices, scrub and a 141 GiB device. */
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_test.h"

#define VA 0x200000000ull	/* 8 GiB: away from the T_VA_BASE identity region */

/* ---- walks and fault reasons, through gpu_mmu_translate() ---- */

enum setup_kind { S_4K, S_64K, S_2M, S_SYS, S_RO, S_NONE, S_PTE_RSVD, S_PTE_MISALIGNED,
		  S_L0_LEAF, S_BAD_APER, S_SVA, S_PAST_SLICE, S_TABLE_PAST_SLICE, S_PTE_INVALID_4K };

static const struct walk_case {
	const char *name;
	enum setup_kind kind;
	uint64_t va_off;		/* offset of the probed VA from VA */
	int access;
	int want;			/* 0 or enum vgpu_fault_reason */
	uint64_t want_page;
	uint64_t want_aper;
} walk_cases[] = {
	{ "4K page",			S_4K, 0x1234, VGPU_ACCESS_READ, 0, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_VRAM },
	{ "4K page, 2nd",		S_4K, 0x3ff8, VGPU_ACCESS_WRITE, 0, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_VRAM },
	{ "64K page",			S_64K, 0x2abcd, VGPU_ACCESS_WRITE, 0, VGPU_GMMU_PAGE_64K, VGPU_GMMU_APER_VRAM },
	{ "2M page",			S_2M, 0x1fffff, VGPU_ACCESS_READ, 0, VGPU_GMMU_PAGE_2M, VGPU_GMMU_APER_VRAM },
	{ "system aperture",		S_SYS, 0x10, VGPU_ACCESS_READ, 0, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS },
	{ "SVA aperture (ABI 2.1)",	S_SVA, 0x18, VGPU_ACCESS_WRITE, 0, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SVA },
	{ "RO read ok",			S_RO, 0x8, VGPU_ACCESS_READ, 0, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_VRAM },
	{ "RO write faults",		S_RO, 0x8, VGPU_ACCESS_WRITE, VGPU_FAULT_READ_ONLY, 0, 0 },
	{ "no PDE",			S_NONE, 0, VGPU_ACCESS_READ, VGPU_FAULT_PDE_INVALID, 0, 0 },
	{ "PTE invalid",		S_PTE_INVALID_4K, 0x5000, VGPU_ACCESS_READ, VGPU_FAULT_PTE_INVALID, 0, 0 },
	{ "PTE reserved bit",		S_PTE_RSVD, 0, VGPU_ACCESS_READ, VGPU_FAULT_BAD_ENTRY, 0, 0 },
	{ "PTE misaligned 64K",		S_PTE_MISALIGNED, 0, VGPU_ACCESS_READ, VGPU_FAULT_BAD_ENTRY, 0, 0 },
	{ "leaf at level 0",		S_L0_LEAF, 0, VGPU_ACCESS_READ, VGPU_FAULT_BAD_ENTRY, 0, 0 },
	{ "reserved aperture",		S_BAD_APER, 0, VGPU_ACCESS_READ, VGPU_FAULT_BAD_ENTRY, 0, 0 },
	{ "PTE past the slice",		S_PAST_SLICE, 0, VGPU_ACCESS_READ, VGPU_FAULT_OUT_OF_SLICE, 0, 0 },
	{ "table past the slice",	S_TABLE_PAST_SLICE, 0, VGPU_ACCESS_READ, VGPU_FAULT_OUT_OF_SLICE, 0, 0 },
	{ "VA beyond 49 bits",		S_4K, 1ull << 49, VGPU_ACCESS_READ, VGPU_FAULT_VA_RANGE, 0, 0 },
};

static uint64_t walk_setup(struct tgpu *t, enum setup_kind k, uint64_t *pa)
{
	*pa = tgpu_alloc(t, 1, VGPU_GMMU_PAGE_2M);
	switch (k) {
	case S_4K:
	case S_PTE_INVALID_4K:
		tgpu_map(t, 1, VA, *pa, 0x4000, VGPU_GMMU_PAGE_4K, 0);
		break;
	case S_64K:
		tgpu_map(t, 1, VA, *pa, 0x40000, VGPU_GMMU_PAGE_64K, 0);
		break;
	case S_2M:
		tgpu_map(t, 1, VA, *pa, VGPU_GMMU_PAGE_2M, VGPU_GMMU_PAGE_2M, 0);
		break;
	case S_SYS:
		*pa = 0x7000;	/* an IOVA */
		tgpu_map(t, 1, VA, *pa, 0x1000, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS);
		break;
	case S_SVA:
		*pa = 0x7f0012345000ull;	/* a process virtual address */
		tgpu_map(t, 1, VA, *pa, 0x1000, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SVA);
		break;
	case S_RO:
		tgpu_map(t, 1, VA, *pa, 0x1000, VGPU_GMMU_PAGE_4K, VGPU_GMMU_RO);
		break;
	case S_NONE:
		break;
	case S_PTE_RSVD:
		*tgpu_pte(t, 1, VA, VGPU_GMMU_PAGE_4K) = vgpu_gmmu_pte(*pa, 0) | (1ull << 60);
		break;
	case S_PTE_MISALIGNED:
		*tgpu_pte(t, 1, VA, VGPU_GMMU_PAGE_64K) = vgpu_gmmu_pte(*pa + 0x1000, 0);
		break;
	case S_L0_LEAF:
		*tgpu_entry(t, 1, t->pdb[1], (VA >> VGPU_GMMU_L0_SHIFT) & 511) =
			vgpu_gmmu_pte(*pa, 0) | VGPU_GMMU_LEAF;
		break;
	case S_BAD_APER:
		*tgpu_pte(t, 1, VA, VGPU_GMMU_PAGE_4K) = vgpu_gmmu_pte(*pa, 3ull << VGPU_GMMU_APER_SHIFT);
		break;
	case S_PAST_SLICE:
		/* The slice is 64 MiB: this is the first page of function 2's slice. */
		tgpu_map(t, 1, VA, t->slice, 0x1000, VGPU_GMMU_PAGE_4K, 0);
		break;
	case S_TABLE_PAST_SLICE:
		*tgpu_entry(t, 1, t->pdb[1], (VA >> VGPU_GMMU_L0_SHIFT) & 511) = vgpu_gmmu_pde(t->slice + 4096);
		break;
	}
	return *pa;
}

static void test_walk(void **state)
{
	const struct walk_case *c = *state;
	struct tgpu *t = tgpu_new(2, 1, 64);
	uint64_t pa, aper = 99, addr = 0, ps = 0;
	int ret;

	walk_setup(t, c->kind, &pa);
	if (c->kind == S_PTE_INVALID_4K)
		*tgpu_pte(t, 1, VA + 0x5000, VGPU_GMMU_PAGE_4K) = 0;
	ret = gpu_mmu_translate(t->g, 1, t->pdb[1], VA + c->va_off, c->access, &aper, &addr, &ps);
	assert_int_equal(ret, c->want);
	if (!c->want) {
		assert_int_equal(ps, c->want_page);
		assert_int_equal(aper, c->want_aper);
		/* VRAM results are device offsets: function 1's slice starts at t->slice. */
		uint64_t base = aper == VGPU_GMMU_APER_VRAM ? t->slice : 0;

		assert_int_equal(addr, base + pa + c->va_off);
	}
	tgpu_free(t);
}

/* ---- through the engines ---- */

struct ectx {
	struct tgpu *t;
	struct tchan c;
	uint64_t buf_va;
	uint8_t *buf;
};

static struct ectx *ectx_new(uint64_t chan_flags)
{
	struct ectx *x = calloc(1, sizeof(*x));

	x->t = tgpu_new(2, 1, 64);
	tchan_init_flags(x->t, &x->c, 1, 0, 0, 32, chan_flags, true);
	x->buf_va = tgpu_vmem(x->t, 1, 1u << 20, VGPU_GMMU_PAGE_4K);
	x->buf = tgpu_va(x->t, 1, x->buf_va, 1u << 20);
	return x;
}

static void ectx_free(struct ectx *x)
{
	tgpu_free(x->t);
	free(x);
}

static int ectx_run(struct ectx *x)
{
	tchan_gp(&x->c);
	tchan_kick(x->t, &x->c);
	return tchan_wait(&x->c);
}

/* A PTE that points past the slice faults; the neighbour's VRAM is neither read nor written. */
static void test_partition_isolation(void **state)
{
	struct ectx *x = ectx_new(0);
	uint8_t *neighbour = gpu_vram_ptr(x->t->g, 2 * x->t->slice, 4096);
	struct vgpu_fault_entry fe;
	struct gpu_chan_status s;

	(void)state;
	memset(neighbour, 0x5a, 4096);
	tgpu_map(x->t, 1, VA, x->t->slice, 4096, VGPU_GMMU_PAGE_4K, 0);	/* = fn 2's pa 0 */
	TM(&x->c, VGPU_M_FILL, lo32(VA), hi32(VA), 4096, 0, 0);
	assert_int_equal(ectx_run(x), VGPU_CHAN_ERR_MMU_FAULT);
	for (int i = 0; i < 4096; i++)
		assert_int_equal(neighbour[i], 0x5a);
	assert_int_equal(gpu_fault_pop(x->t->g, 1, &fe), 0);
	assert_int_equal(fe.reason, VGPU_FAULT_OUT_OF_SLICE);
	assert_true(fe.va == VA);
	assert_int_equal(fe.access, VGPU_ACCESS_WRITE);
	assert_int_equal(fe.chid, 0);
	assert_int_equal(fe.replayable, 0);
	assert_int_equal(gpu_fault_pop(x->t->g, 2, &fe), -EAGAIN);	/* nothing for the victim */
	assert_int_equal(gpu_chan_status(x->t->g, 1, 0, &s), 0);
	assert_int_equal(s.state, GPU_CHAN_STATE_ERROR);
	assert_int_equal(gpu_intr_ack(x->t->g, 1, ~0u), VGPU_INTR_FAULT | VGPU_INTR_CHAN_ERROR);
	ectx_free(x);
}

/* Non-volatile translations are cached until MMU_INVALIDATE; volatile ones never. */
static void test_tlb_invalidate(void **state)
{
	struct ectx *x = ectx_new(0);
	uint64_t pa1 = tgpu_alloc(x->t, 1, 4096), pa2 = tgpu_alloc(x->t, 1, 4096);
	uint64_t res = x->buf_va;
	uint32_t *v1 = tgpu_ptr(x->t, 1, pa1, 4), *v2 = tgpu_ptr(x->t, 1, pa2, 4);
	uint64_t *r = (uint64_t *)x->buf;

	(void)state;
	*v1 = 111;
	*v2 = 222;
	tgpu_map(x->t, 1, VA, pa1, 4096, VGPU_GMMU_PAGE_4K, 0);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res), hi32(res));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[0], 111);
	/* Remap without invalidating: the engine still uses the cached translation. */
	tgpu_map(x->t, 1, VA, pa2, 4096, VGPU_GMMU_PAGE_4K, 0);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res + 8), hi32(res + 8));
	TM(&x->c, VGPU_M_MMU_INVALIDATE, lo32(VA), hi32(VA), 4096, 0, 0);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res + 16), hi32(res + 16));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[1], 111);
	assert_int_equal(r[2], 222);
	/* Volatile: a remap is seen at once. */
	tgpu_map(x->t, 1, VA + 4096, pa1, 4096, VGPU_GMMU_PAGE_4K, VGPU_GMMU_VOLATILE);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA + 4096), hi32(VA), 1, lo32(res + 24), hi32(res + 24));
	assert_int_equal(ectx_run(x), 0);
	tgpu_map(x->t, 1, VA + 4096, pa2, 4096, VGPU_GMMU_PAGE_4K, VGPU_GMMU_VOLATILE);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA + 4096), hi32(VA), 1, lo32(res + 32), hi32(res + 32));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[3], 111);
	assert_int_equal(r[4], 222);
	/* Host-side invalidation of everything. */
	tgpu_map(x->t, 1, VA, pa1, 4096, VGPU_GMMU_PAGE_4K, 0);
	gpu_tlb_invalidate(x->t->g, 1, 0, 0);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res + 40), hi32(res + 40));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[5], 111);
	ectx_free(x);
}

/* An invalidation whose range wraps past 2^64 reaches to the end of the VA space: an
 * MMU_INVALIDATE from VA + 4 KiB of size 2^64 - 1 drops that page's entry and keeps the one
 * below its start (left stale on purpose: the ABI lets the old page be used); the host's
 * gpu_tlb_invalidate() from VA to exactly 2^64 drops both. */
static void test_tlb_invalidate_wrap(void **state)
{
	struct ectx *x = ectx_new(0);
	uint64_t pa1 = tgpu_alloc(x->t, 1, 4096), pa2 = tgpu_alloc(x->t, 1, 4096);
	uint64_t res = x->buf_va, all = UINT64_MAX;
	uint32_t *v1 = tgpu_ptr(x->t, 1, pa1, 4), *v2 = tgpu_ptr(x->t, 1, pa2, 4);
	uint64_t *r = (uint64_t *)x->buf;

	(void)state;
	*v1 = 111;
	*v2 = 222;
	tgpu_map(x->t, 1, VA, pa1, 4096, VGPU_GMMU_PAGE_4K, 0);
	tgpu_map(x->t, 1, VA + 4096, pa1, 4096, VGPU_GMMU_PAGE_4K, 0);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res), hi32(res));
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA + 4096), hi32(VA), 1, lo32(res + 8),
	   hi32(res + 8));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[0], 111);
	assert_int_equal(r[1], 111);
	tgpu_map(x->t, 1, VA, pa2, 4096, VGPU_GMMU_PAGE_4K, 0);
	tgpu_map(x->t, 1, VA + 4096, pa2, 4096, VGPU_GMMU_PAGE_4K, 0);
	TM(&x->c, VGPU_M_MMU_INVALIDATE, lo32(VA + 4096), hi32(VA + 4096), lo32(all), hi32(all),
	   0);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res + 16), hi32(res + 16));
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA + 4096), hi32(VA), 1, lo32(res + 24),
	   hi32(res + 24));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[2], 111);
	assert_int_equal(r[3], 222);
	tgpu_map(x->t, 1, VA + 4096, pa1, 4096, VGPU_GMMU_PAGE_4K, 0);
	gpu_tlb_invalidate(x->t->g, 1, VA, 0 - VA);
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1, lo32(res + 32), hi32(res + 32));
	TM(&x->c, VGPU_M_REDUCE_ADD_U32, lo32(VA + 4096), hi32(VA), 1, lo32(res + 40),
	   hi32(res + 40));
	assert_int_equal(ectx_run(x), 0);
	assert_int_equal(r[4], 222);
	assert_int_equal(r[5], 111);
	ectx_free(x);
}

/* Copy the word at @va to @r (mapped by tgpu_vmem()) on @c and return it. */
static uint32_t chan_read(struct tgpu *t, struct tchan *c, uint64_t va, uint64_t r)
{
	TM(c, VGPU_M_COPY, lo32(va), hi32(va), lo32(r), hi32(r), 4, 0);
	tchan_gp(c);
	tchan_kick(t, c);
	assert_int_equal(tchan_wait(c), 0);
	return __atomic_load_n((uint32_t *)tgpu_va(t, c->fn, r, 4), __ATOMIC_ACQUIRE);
}

/* Point @fn's @va at @pa (4 KiB), without invalidating. */
static void remap(struct tgpu *t, unsigned int fn, uint64_t va, uint64_t pa)
{
	tgpu_map(t, fn, va, pa, 4096, VGPU_GMMU_PAGE_4K, 0);
}

/* Function 1 issues more invalidations than engine 1's queue holds (17, from engine 0)
 * while engine 1 is idle. Engine 1 then drops all of function 1's entries, the one whose
 * invalidation found the queue full included, and none of function 2's: function 2's
 * translation, left stale on purpose (its PTE changed, not invalidated: the ABI lets the
 * old page be used), still reads the old page, where dropping the whole TLB read the new. */
static void test_tlb_overflow_per_fn(void **state)
{
	struct tgpu *t = tgpu_new(2, 2, 64);
	uint64_t a1 = tgpu_alloc(t, 1, 4096), b1 = tgpu_alloc(t, 1, 4096);
	uint64_t a2 = tgpu_alloc(t, 2, 4096), b2 = tgpu_alloc(t, 2, 4096);
	uint64_t r1 = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	uint64_t r2 = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_4K);
	uint64_t own = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	struct tchan c1, c1e1, c2;

	(void)state;
	*(uint32_t *)tgpu_ptr(t, 1, a1, 4) = 0x1a;
	*(uint32_t *)tgpu_ptr(t, 1, b1, 4) = 0x1b;
	*(uint32_t *)tgpu_ptr(t, 2, a2, 4) = 0x2a;
	*(uint32_t *)tgpu_ptr(t, 2, b2, 4) = 0x2b;
	tchan_init(t, &c1, 1, 0, 0, 64);	/* engine 0: the flood */
	tchan_init(t, &c1e1, 1, 1, 1, 64);	/* engine 1: function 1's entry there */
	tchan_init(t, &c2, 2, 0, 1, 64);	/* engine 1: function 2's */
	remap(t, 1, VA, a1);
	remap(t, 2, VA, a2);
	assert_int_equal(chan_read(t, &c1e1, VA, r1), 0x1a);
	assert_int_equal(chan_read(t, &c2, VA, r2), 0x2a);
	remap(t, 1, VA, b1);
	remap(t, 2, VA, b2);
	assert_int_equal(chan_read(t, &c1e1, VA, r1), 0x1a);	/* cached */
	assert_int_equal(chan_read(t, &c2, VA, r2), 0x2a);

	/* 16 of another page of function 1's fill engine 1's queue; the 17th, of VA, is
	 * lost from it. */
	for (unsigned int i = 0; i < 16; i++)
		TM(&c1, VGPU_M_MMU_INVALIDATE, lo32(own), hi32(own), 4096, 0, 0);
	TM(&c1, VGPU_M_MMU_INVALIDATE, lo32(VA), hi32(VA), 4096, 0, 0);
	tchan_gp(&c1);
	tchan_kick(t, &c1);
	assert_int_equal(tchan_wait(&c1), 0);
	assert_int_equal(chan_read(t, &c2, VA, r2), 0x2a);	/* kept */
	assert_int_equal(chan_read(t, &c1e1, VA, r1), 0x1b);	/* dropped */
	tgpu_free(t);
}

/* A replayable channel stalls on the fault; the handler maps the page and replays. */
static void test_fault_replay(void **state)
{
	struct ectx *x = ectx_new(GPU_CHAN_REPLAYABLE);
	uint64_t src = x->buf_va, pa = tgpu_alloc(x->t, 1, 3 * 4096);
	struct vgpu_fault_entry fe;

	(void)state;
	for (int i = 0; i < 3 * 4096; i++)
		x->buf[i] = (uint8_t)(i * 13);
	/* Only the first of three destination pages is mapped. */
	tgpu_map(x->t, 1, VA, pa, 4096, VGPU_GMMU_PAGE_4K, 0);
	TM(&x->c, VGPU_M_COPY, lo32(src), hi32(src), lo32(VA), hi32(VA), 3 * 4096, 0);
	tchan_gp(&x->c);
	tchan_kick(x->t, &x->c);
	assert_int_equal(tchan_wait_state(x->t, &x->c, GPU_CHAN_STATE_FAULTED), 0);
	assert_int_equal(gpu_fault_pop(x->t->g, 1, &fe), 0);
	assert_true(fe.va == VA + 4096);
	assert_int_equal(fe.reason, VGPU_FAULT_PTE_INVALID);
	assert_int_equal(fe.access, VGPU_ACCESS_WRITE);
	assert_int_equal(fe.replayable, 1);
	tgpu_map(x->t, 1, VA + 4096, pa + 4096, 4096, VGPU_GMMU_PAGE_4K, 0);
	gpu_fault_replay(x->t->g, 1);
	assert_int_equal(tchan_wait_state(x->t, &x->c, GPU_CHAN_STATE_FAULTED), 0);
	assert_int_equal(gpu_fault_pop(x->t->g, 1, &fe), 0);
	assert_true(fe.va == VA + 8192);
	tgpu_map(x->t, 1, VA + 8192, pa + 8192, 4096, VGPU_GMMU_PAGE_4K, 0);
	gpu_fault_replay(x->t->g, 1);
	assert_int_equal(tchan_wait(&x->c), 0);
	assert_memory_equal(tgpu_ptr(x->t, 1, pa, 3 * 4096), x->buf, 3 * 4096);
	assert_int_equal(gpu_fault_pop(x->t->g, 1, &fe), -EAGAIN);
	ectx_free(x);
}

#define FAULT_ROUNDS 10000

/* Spin (no sleep: the race is a few instructions wide) until @x's channel reads FAULTED. */
static bool spin_faulted(struct ectx *x)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	struct gpu_chan_status s;

	do
		assert_int_equal(gpu_chan_status(x->t->g, 1, 0, &s), 0);
	while (s.state != GPU_CHAN_STATE_FAULTED && !cmn_deadline_passed(dl));
	return s.state == GPU_CHAN_STATE_FAULTED;
}

/* A channel seen stalled on a replayable fault has its fault entry in the buffer already
 * (the entry is recorded first): a handler that pops it at once finds it, round after round
 * of the same fault replayed without a fix (each replay turns the channel BUSY before it
 * returns, so the next FAULTED is the next fault's). */
static void test_fault_seen_with_entry(void **state)
{
	struct ectx *x = ectx_new(GPU_CHAN_REPLAYABLE);
	struct vgpu_fault_entry fe;
	unsigned int missing = 0;

	(void)state;
	TM(&x->c, VGPU_M_COPY, lo32(x->buf_va), hi32(x->buf_va), lo32(VA), hi32(VA), 64, 0);
	tchan_gp(&x->c);
	tchan_kick(x->t, &x->c);
	for (unsigned int i = 0; i < FAULT_ROUNDS; i++) {
		assert_true(spin_faulted(x));
		if (gpu_fault_pop(x->t->g, 1, &fe)) {
			missing++;
			continue;	/* the same fault again: its entry comes, replay it */
		}
		assert_true(fe.va == VA);
		gpu_fault_replay(x->t->g, 1);
	}
	assert_int_equal(missing, 0);
	ectx_free(x);
}

static void test_fault_cancel(void **state)
{
	struct ectx *x = ectx_new(GPU_CHAN_REPLAYABLE);

	(void)state;
	TM(&x->c, VGPU_M_TIMESTAMP, lo32(VA), hi32(VA));
	tchan_gp(&x->c);
	tchan_kick(x->t, &x->c);
	assert_int_equal(tchan_wait_state(x->t, &x->c, GPU_CHAN_STATE_FAULTED), 0);
	assert_int_equal(gpu_fault_cancel(x->t->g, 1, 1), -EINVAL);	/* not stalled */
	assert_int_equal(gpu_fault_cancel(x->t->g, 1, 0), 0);
	assert_int_equal(tchan_wait(&x->c), VGPU_CHAN_ERR_MMU_FAULT);
	ectx_free(x);
}

/* Faults from the system aperture without an IOMMU domain are IOMMU faults. */
static void test_iommu_fault(void **state)
{
	struct ectx *x = ectx_new(0);
	struct vgpu_fault_entry fe;

	(void)state;
	tgpu_map(x->t, 1, VA, 0x10000, 4096, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS);
	TM(&x->c, VGPU_M_TIMESTAMP, lo32(VA), hi32(VA));
	assert_int_equal(ectx_run(x), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(gpu_fault_pop(x->t->g, 1, &fe), 0);
	assert_int_equal(fe.reason, VGPU_FAULT_IOMMU);
	ectx_free(x);
}

/* ---- VRAM ---- */

static void test_vram_slice_fd(void **state)
{
	struct gpu_config cfg = { .vram_size = 64 * VGPU_MiB, .nr_vfs = 2 };
	struct gpu *g;
	uint8_t *dev, *view;
	int fd;

	(void)state;
	assert_int_equal(gpu_create(&cfg, &g), 0);
	assert_int_equal(gpu_vram_slice_map(g, 1, 16 * VGPU_MiB, 8 * VGPU_MiB, -1), 0);
	assert_int_equal(gpu_vram_slice_map(g, 1, 32 * VGPU_MiB, 2 * VGPU_MiB, -1), -EEXIST);
	assert_int_equal(gpu_vram_slice_map(g, 2, 20 * VGPU_MiB, 2 * VGPU_MiB, -1), -EBUSY);
	assert_int_equal(gpu_vram_slice_map(g, 2, 20 * VGPU_MiB + 4096, 2 * VGPU_MiB, -1), -EINVAL);
	fd = gpu_vram_slice_fd(g, 1);
	assert_true(fd >= 0);
	view = mmap(NULL, 8 * VGPU_MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(view != MAP_FAILED);
	dev = gpu_vram_ptr(g, 16 * VGPU_MiB, 8 * VGPU_MiB);
	dev[12345] = 0x42;			/* device writes, the guest's view sees it */
	assert_int_equal(view[12345], 0x42);
	view[8 * VGPU_MiB - 1] = 0x24;		/* and the other way */
	assert_int_equal(dev[8 * VGPU_MiB - 1], 0x24);
	assert_int_equal(gpu_vram_scrub(g, 16 * VGPU_MiB, 4096 * 4), 0);
	assert_int_equal(view[12345], 0);
	assert_int_equal(view[8 * VGPU_MiB - 1], 0x24);
	assert_int_equal(gpu_vram_slice_unmap(g, 1), 0);
	/* After unmap the range is back on the device memfd, scrubbed. */
	assert_int_equal(dev[8 * VGPU_MiB - 1], 0);
	assert_int_equal(gpu_vram_slice_unmap(g, 1), -ENOENT);
	munmap(view, 8 * VGPU_MiB);
	gpu_destroy(g);
}

/* 141 GiB of VRAM costs only what is touched; scrub gives it back. */
static void test_vram_large_sparse(void **state)
{
	struct gpu_config cfg = { .vram_size = 141 * VGPU_GiB, .nr_vfs = 63 };
	struct gpu *g;
	uint8_t *p;

	(void)state;
	assert_int_equal(gpu_create(&cfg, &g), 0);
	assert_true(gpu_vram_size(g) == 141 * VGPU_GiB);
	assert_true(gpu_vram_resident(g) < VGPU_MiB);
	p = gpu_vram_ptr(g, 140 * VGPU_GiB, 4 * VGPU_MiB);
	assert_non_null(p);
	memset(p, 1, 4 * VGPU_MiB);
	assert_true(gpu_vram_resident(g) >= 4 * VGPU_MiB && gpu_vram_resident(g) < 8 * VGPU_MiB);
	assert_int_equal(gpu_vram_scrub(g, 140 * VGPU_GiB, 4 * VGPU_MiB), 0);
	assert_true(gpu_vram_resident(g) < VGPU_MiB);
	assert_int_equal(p[0], 0);
	assert_null(gpu_vram_ptr(g, 141 * VGPU_GiB - 4096, 8192));
	gpu_destroy(g);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(walk_cases) + 11];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(walk_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = walk_cases[i].name, .test_func = test_walk,
						  .initial_state = (void *)&walk_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_partition_isolation);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_tlb_invalidate);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_tlb_invalidate_wrap);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_tlb_overflow_per_fn);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fault_replay);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fault_seen_with_entry);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fault_cancel);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_iommu_fault);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_vram_slice_fd);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_vram_large_sparse);
	return _cmocka_run_group_tests("gpu_mmu", tests, n, NULL, NULL);
}
