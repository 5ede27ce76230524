/* SPDX-License-Identifier: MIT */
/* What the rm suites that run GPU work through the real vgpu-gsp share: a guest's view of
 * one function (a client, a 2 MiB VRAM block mapped at RM_T_VA with its page tables in the
 * block's first pages, a VA space over it), channels in slots of that block, methods pushed
 * into them and submitted through the RM, and one pass of the GSP's watchdog on its test
 * clock. */
#ifndef VGPU_TESTS_RM_CHAN_TEST_H
#define VGPU_TESTS_RM_CHAN_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <vgpu/gmmu.h>

#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

#define RM_T_VA		0x40000000ull	/* the 2 MiB page mapped onto the guest's block */

struct rm_t_guest {
	unsigned int fn;
	uint32_t hc, hd, hs, hv, hmem;
	uint64_t pa;			/* VF-physical address of the block */
	uint8_t *host;			/* host view of it */
};

/* @g's page tables in its block: L0 at +0, L1 at +4K, L2 at +8K; one 2 MiB leaf, RM_T_VA ->
 * the block itself. */
static inline void rm_t_guest_tables(struct rm_t_guest *g)
{
	uint64_t *l0 = (uint64_t *)g->host, *l1 = (uint64_t *)(g->host + 0x1000);
	uint64_t *l2 = (uint64_t *)(g->host + 0x2000);

	l0[(RM_T_VA >> VGPU_GMMU_L0_SHIFT) & 511] = vgpu_gmmu_pde(g->pa + 0x1000);
	l1[(RM_T_VA >> VGPU_GMMU_L1_SHIFT) & 511] = vgpu_gmmu_pde(g->pa + 0x2000);
	l2[(RM_T_VA >> VGPU_GMMU_L2_SHIFT) & 511] = vgpu_gmmu_pte2m(g->pa, 0);
}

/* The guest of function @fn. The first @clear bytes of its block are zeroed (at least the
 * tables, 0x3000): the rest keeps whatever the block held before. */
static inline void rm_t_guest_up(struct rm_fixture *f, struct rm_t_guest *g, unsigned int fn,
				 size_t clear)
{
	struct vgpu_rm_vidmem_params mp = { .size = VGPU_GMMU_PAGE_2M,
					    .page_size = VGPU_GMMU_PAGE_2M,
					    .flags = VGPU_RM_MEM_CONTIGUOUS };
	struct vgpu_rm_vaspace_params vp;

	memset(g, 0, sizeof(*g));
	g->fn = fn;
	assert_int_equal(rm_t_client(f->rm, fn, &g->hc, &g->hd, &g->hs), 0);
	assert_int_equal(rm_alloc(f->rm, fn, g->hc, g->hd, &g->hmem, VGPU_RM_CLASS_MEMORY_VIDMEM,
				  &mp, sizeof(mp)), 0);
	g->pa = mp.addr;
	g->host = gpu_fn_vram_ptr(f->gpu, fn, g->pa, VGPU_GMMU_PAGE_2M);
	assert_non_null(g->host);
	memset(g->host, 0, clear);
	rm_t_guest_tables(g);
	vp = (struct vgpu_rm_vaspace_params){ .pdb = g->pa };
	assert_int_equal(rm_alloc(f->rm, fn, g->hc, g->hd, &g->hv, VGPU_RM_CLASS_VASPACE, &vp,
				  sizeof(vp)), 0);
}

/* A channel of a guest; slot @k (< 64) picks its USERD (+0x3000 + k * 128), GPFIFO
 * (+0x40000 + k * 4K) and pushbuffer (+0x80000 + k * 4K) inside the block. */
struct rm_t_chan {
	uint32_t h, chid, k;
	uint64_t *gp;
	uint32_t *pb;
	struct vgpu_userd *userd;
	uint32_t put, pb_off;
};

/* Slot @k of @g's rings for @c, cleared: a fresh channel starts from a clean USERD and
 * ring, as a guest driver makes it (a stale GP_PUT would have the device run the previous
 * channel's entries). */
static inline void rm_t_chan_slot(struct rm_t_guest *g, struct rm_t_chan *c, uint32_t k)
{
	memset(c, 0, sizeof(*c));
	c->k = k;
	c->gp = (uint64_t *)(g->host + 0x40000 + k * 0x1000);
	c->pb = (uint32_t *)(g->host + 0x80000 + k * 0x1000);
	c->userd = (struct vgpu_userd *)(g->host + 0x3000 + k * 128);
	memset(c->userd, 0, sizeof(*c->userd));
	memset(c->gp, 0, 0x1000);
}

/* A channel on VA space @h_vaspace with @flags (VGPU_RM_CHAN_REPLAYABLE: faults stall it
 * for replay), allocated and enabled. */
static inline void rm_t_chan_up(struct rm_fixture *f, struct rm_t_guest *g, struct rm_t_chan *c,
				uint32_t k, uint32_t h_vaspace, uint32_t flags)
{
	struct vgpu_rm_channel_params p = {
		.h_vaspace = h_vaspace, .gpfifo_va = RM_T_VA + 0x40000 + k * 0x1000ull,
		.gpfifo_entries = 64, .flags = flags, .userd_aper = VGPU_APER_VRAM,
		.userd_addr = g->pa + 0x3000 + k * 128ull,
	};
	struct vgpu_rm_enable_params en = { .enable = 1 };
	size_t len = sizeof(en);

	rm_t_chan_slot(g, c, k);
	assert_int_equal(rm_alloc(f->rm, g->fn, g->hc, g->hd, &c->h, VGPU_RM_CLASS_CHANNEL_GPFIFO,
				  &p, sizeof(p)), 0);
	c->chid = p.chid;
	assert_int_equal(rm_control(f->rm, g->fn, g->hc, c->h, VGPU_RM_CTRL_CHANNEL_ENABLE, &en,
				    &len, sizeof(en)), 0);
}

/* Append a method and close it into one GP entry. */
static inline void rm_t_chan_method(struct rm_t_chan *c, uint32_t id, const uint32_t *args,
				    uint32_t n)
{
	uint32_t start = c->pb_off;

	c->pb[c->pb_off++] = VGPU_MTHD(id, n);
	for (uint32_t i = 0; i < n; i++)
		c->pb[c->pb_off++] = args[i];
	c->gp[c->put++] = vgpu_gp_entry(RM_T_VA + 0x80000 + c->k * 0x1000ull + start * 4ull,
					n + 1);
}

/* Submit through the RM (CHANNEL_SUBMIT: USERD GP_PUT, then the doorbell). */
static inline void rm_t_chan_submit(struct rm_fixture *f, struct rm_t_guest *g,
				    struct rm_t_chan *c)
{
	struct vgpu_rm_submit_params sp = { .gp_put = c->put };
	size_t len = sizeof(sp);

	assert_int_equal(rm_control(f->rm, g->fn, g->hc, c->h, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp,
				    &len, sizeof(sp)), 0);
}

/* USERD words the device writes are read atomically, as the device writes them. */
static inline uint32_t rm_t_userd_error(const struct rm_t_chan *c)
{
	return __atomic_load_n(&c->userd->error, __ATOMIC_ACQUIRE);
}

/* One watchdog pass, the GSP's test clock first advanced by @advance_ns; function 1's
 * channel @chid as the watchdog then accounts for it. */
static inline struct vgpu_rpc_wd_state rm_t_wd_tick(struct rm_fixture *f, uint32_t chid,
						    uint64_t advance_ns)
{
	struct vgpu_rpc_wd_tick t = { .fn = 1, .ch = chid, .advance_ns = advance_ns };
	struct vgpu_rpc_wd_state st;
	size_t len = 0;

	assert_int_equal(gsp_call(rm_gsp(f->rm), 0, VGPU_RPC_FN_WD_TICK, &t, sizeof(t), &st,
				  sizeof(st), &len), 0);
	assert_int_equal(len, sizeof(st));
	return st;
}

#endif
