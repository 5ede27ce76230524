// SPDX-License-Identifier: MIT
/* The device ops: the RM reaches the device only through struct rm_device_ops. A counting
 * wrapper over rm_hw_ops checks which op each RM call makes, with which arguments and in
 * which order, and that a table missing any op is refused. Runs against the real vgpu-gsp. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "rm_chan_test.h"

static struct rm_fixture fx;

/* What the wrapper saw. */
static struct {
	unsigned int fault_replay, chan_submit, chan_quiesce, dma_map, dma_unmap;
	unsigned int last_fn;
	uint32_t aper, gp_put, token;
	uint64_t addr;
	/* chan_quiesce: channel ids per function, ids seen twice, calls that failed */
	uint64_t quiesced[4], quiesced_twice[4];
	unsigned int quiesce_failed;
	/* vram_scrub: calls, the last range, function 1's quiesced ids then */
	unsigned int scrubs;
	uint64_t scrub_base, scrub_size, quiesced_at_scrub;
} seen;

static void w_fault_replay(void *ctx, unsigned int fn)
{
	seen.fault_replay++;
	seen.last_fn = fn;
	rm_hw_ops.fault_replay(ctx, fn);
}

static int w_chan_submit(void *ctx, unsigned int fn, uint32_t aper, uint64_t addr,
			 uint32_t gp_put, uint32_t token)
{
	seen.chan_submit++;
	seen.last_fn = fn;
	seen.aper = aper;
	seen.addr = addr;
	seen.gp_put = gp_put;
	seen.token = token;
	return rm_hw_ops.chan_submit(ctx, fn, aper, addr, gp_put, token);
}

static int w_chan_quiesce(void *ctx, unsigned int fn, uint32_t chid, uint64_t timeout_ns)
{
	int ret = rm_hw_ops.chan_quiesce(ctx, fn, chid, timeout_ns);

	seen.chan_quiesce++;
	if (fn < VGPU_ARRAY_SIZE(seen.quiesced) && chid < 64) {
		seen.quiesced_twice[fn] |= seen.quiesced[fn] & (1ull << chid);
		seen.quiesced[fn] |= 1ull << chid;
	}
	seen.quiesce_failed += ret != 0;
	return ret;
}

static int w_vram_scrub(void *ctx, uint64_t base, uint64_t size)
{
	seen.scrubs++;
	seen.scrub_base = base;
	seen.scrub_size = size;
	seen.quiesced_at_scrub = seen.quiesced[1];
	return rm_hw_ops.vram_scrub(ctx, base, size);
}

static int w_dma_map(void *ctx, struct iommu_domain *dom, struct iommu_memobj *mo,
		     uint64_t off, uint64_t size, uint64_t *iova)
{
	seen.dma_map++;
	return rm_hw_ops.dma_map(ctx, dom, mo, off, size, iova);
}

static void w_dma_unmap(void *ctx, struct iommu_domain *dom, uint64_t iova, uint64_t size)
{
	seen.dma_unmap++;
	rm_hw_ops.dma_unmap(ctx, dom, iova, size);
}

static struct rm_device_ops wrap;

static int setup(void **state)
{
	struct rm_config c = { .ops = &wrap, .ops_ctx = &fx.hw };

	(void)state;
	memset(&seen, 0, sizeof(seen));
	wrap = rm_hw_ops;
	wrap.fault_replay = w_fault_replay;
	wrap.chan_submit = w_chan_submit;
	wrap.chan_quiesce = w_chan_quiesce;
	wrap.vram_scrub = w_vram_scrub;
	wrap.dma_map = w_dma_map;
	wrap.dma_unmap = w_dma_unmap;
	return rm_fixture_up(&fx, &c);
}

/* The same, with a GSP that the watchdog only marks for reset when it dies: nothing wipes
 * the hardware until the test calls gsp_reset(). */
static int setup_manual_reset(void **state)
{
	struct gsp_config gc = { .no_auto_reset = true };
	struct rm_config c = { .ops = &wrap, .ops_ctx = &fx.hw, .gsp = &gc };

	(void)state;
	memset(&seen, 0, sizeof(seen));
	wrap = rm_hw_ops;
	wrap.chan_quiesce = w_chan_quiesce;
	wrap.vram_scrub = w_vram_scrub;
	return rm_fixture_up(&fx, &c);
}

static int teardown(void **state)
{
	(void)state;
	rm_fixture_down(&fx);
	return 0;
}

/* Each op is required: a table without one is -EINVAL and starts nothing. */
static const struct ops_case {
	const char *name;
	size_t off;
} ops_cases[] = {
	{ "no info", offsetof(struct rm_device_ops, info) },
	{ "no priv_handover", offsetof(struct rm_device_ops, priv_handover) },
	{ "no slice_fd", offsetof(struct rm_device_ops, slice_fd) },
	{ "no vram_scrub", offsetof(struct rm_device_ops, vram_scrub) },
	{ "no chan_quiesce", offsetof(struct rm_device_ops, chan_quiesce) },
	{ "no chan_fence", offsetof(struct rm_device_ops, chan_fence) },
	{ "no chan_error", offsetof(struct rm_device_ops, chan_error) },
	{ "no chan_submit", offsetof(struct rm_device_ops, chan_submit) },
	{ "no fault_replay", offsetof(struct rm_device_ops, fault_replay) },
	{ "no dma_size", offsetof(struct rm_device_ops, dma_size) },
	{ "no dma_map", offsetof(struct rm_device_ops, dma_map) },
	{ "no dma_unmap", offsetof(struct rm_device_ops, dma_unmap) },
};

static void test_ops_required(void **state)
{
	const struct ops_case *c = *state;
	struct rm_device_ops ops = rm_hw_ops;
	struct rm_hw hw = { 0 };	/* never reached: the check comes first */
	struct rm_config rc = { .ops = &ops, .ops_ctx = &hw, .pma = (struct pma *)1 };
	struct rm *rm = NULL;

	memset((char *)&ops + c->off, 0, sizeof(void (*)(void)));
	assert_int_equal(rm_device_create(&rc, &rm), -EINVAL);
	assert_null(rm);
	rc.ops = NULL;
	assert_int_equal(rm_device_create(&rc, &rm), -EINVAL);
}

/* FAULT_REPLAY: the GSP records it, then exactly one fault_replay op for the caller's VF. */
static void test_fault_replay_op(void **state)
{
	uint32_t hc, hd, hs;
	size_t len = 0;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 2, &hc, &hd, &hs), 0);
	assert_int_equal(rm_control(fx.rm, 2, hc, hs, VGPU_RM_CTRL_FAULT_REPLAY, NULL, &len, 0), 0);
	assert_int_equal(seen.fault_replay, 1);
	assert_int_equal(seen.last_fn, 2);
	/* Refused by the validator (wrong class): no op. */
	assert_int_equal(rm_control(fx.rm, 2, hc, hd, VGPU_RM_CTRL_FAULT_REPLAY, NULL, &len, 0), -EINVAL);
	assert_int_equal(seen.fault_replay, 1);
	assert_int_equal(rm_client_free(fx.rm, 2, hc), 0);
}

/* CHANNEL_SUBMIT hands the op USERD's GP_PUT as a device address (slice base + VF-physical);
 * a USERD outside the slice is -EFAULT before any op. Freeing the channel quiesces it. */
static void test_submit_op(void **state)
{
	struct vgpu_rm_vaspace_params vp = { .pdb = 0 };
	struct vgpu_rm_channel_params cp = { .gpfifo_va = 0x100000, .gpfifo_entries = 64,
					     .userd_addr = T_SLICE };
	struct vgpu_rm_submit_params sp = { .gp_put = 7 };
	uint32_t hc, hd, hs, hv = 0, hch, hfar = 0;
	size_t len = sizeof(sp);

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)), 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, hc, hd, hv, &hch, NULL), 0);
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len,
				    sizeof(sp)), 0);
	assert_int_equal(seen.chan_submit, 1);
	assert_int_equal(seen.aper, VGPU_APER_VRAM);
	assert_int_equal(seen.addr, T_SLICE + 0x2000 + VGPU_USERD_GP_PUT);
	assert_int_equal(seen.gp_put, 7);
	cp.h_vaspace = hv;
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hfar, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp,
				  sizeof(cp)), 0);
	len = sizeof(sp);
	assert_int_equal(rm_control(fx.rm, 1, hc, hfar, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len,
				    sizeof(sp)), -EFAULT);
	assert_int_equal(seen.chan_submit, 1);
	assert_int_equal(rm_free(fx.rm, 1, hc, hch), 0);
	assert_int_equal(seen.chan_quiesce, 1);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_int_equal(seen.chan_quiesce, 2);
}

/* A FILL that never ends in a test: 32 TiB of VA from RM_T_ALIAS_VA, every 2 MiB of it the
 * guest's second block, through tables at +0x10000 (level 2) and +0x11000 (level 1) of its
 * first block, named by 64 level-0 entries. */
#define RM_T_ALIAS_VA	(1ull << VGPU_GMMU_L0_SHIFT)
#define RM_T_ALIAS_L0	64u
#define RM_T_SEM	0x1f0000u	/* offset of a semaphore in the first block */

static uint64_t alias_map(struct rm_t_guest *g, uint64_t pa2)
{
	uint64_t *l0 = (uint64_t *)g->host, *l1 = (uint64_t *)(g->host + 0x11000);
	uint64_t *l2 = (uint64_t *)(g->host + 0x10000);
	unsigned int i0 = (RM_T_ALIAS_VA >> VGPU_GMMU_L0_SHIFT) & 511;

	for (unsigned int i = 0; i < 512; i++) {
		l2[i] = vgpu_gmmu_pte2m(pa2, 0);
		l1[i] = vgpu_gmmu_pde(g->pa + 0x10000);
	}
	for (unsigned int i = 0; i < RM_T_ALIAS_L0; i++)
		l0[i0 + i] = vgpu_gmmu_pde(g->pa + 0x11000);
	return (uint64_t)RM_T_ALIAS_L0 << VGPU_GMMU_L0_SHIFT;
}

/* Wait until the 32-bit word at @p holds @want (a hang guard only). */
static void word_wait(const void *p, uint32_t want)
{
	uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD);

	while (__atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE) != want &&
	       !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE), want);
}

/* Submit on @c a semaphore release of 1 at RM_T_VA + RM_T_SEM, then a FILL of @len bytes of
 * the alias (alias_map()) that runs for minutes; return once the semaphore is out: the
 * channel's turn is then in the FILL. */
static void fill_start(struct rm_t_guest *g, struct rm_t_chan *c, uint64_t len)
{
	uint32_t args[5];

	memcpy(args, (uint32_t[]){ (uint32_t)(RM_T_VA + RM_T_SEM), 0, 1, 0, 0 }, 5 * 4);
	rm_t_chan_method(c, VGPU_M_SEM_RELEASE, args, 5);
	memcpy(args, (uint32_t[]){ (uint32_t)RM_T_ALIAS_VA, (uint32_t)(RM_T_ALIAS_VA >> 32),
				   (uint32_t)len, (uint32_t)(len >> 32), 0x5a5a5a5au }, 5 * 4);
	rm_t_chan_method(c, VGPU_M_FILL, args, 5);
	rm_t_chan_submit(&fx, g, c);
	word_wait(g->host + RM_T_SEM, 1);
}

/* Wait for @c's GP_GET to reach its GP_PUT (a hang guard only). */
static void chan_wait(const struct rm_t_chan *c)
{
	uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD);

	while (__atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE) != c->put &&
	       !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE), c->put);
}

/* Function 1's guest with a 100 s slice, 2 MiB of VRAM aliased over a huge VA range and
 * two channels, @busy and @idle; the aliased length (fill_start()'s). */
static uint64_t busy_idle_up(struct rm_t_guest *g1, struct rm_t_chan *busy,
			     struct rm_t_chan *idle)
{
	struct vgpu_rm_vidmem_params mp = { .size = VGPU_GMMU_PAGE_2M,
					    .page_size = VGPU_GMMU_PAGE_2M,
					    .flags = VGPU_RM_MEM_CONTIGUOUS };
	uint32_t hm = 0;
	uint64_t len;

	assert_int_equal(rm_fn_sched_set(fx.rm, 1, true, 100 * VGPU_NSEC_PER_SEC,
					 100 * VGPU_NSEC_PER_SEC, 0), 0);
	rm_t_guest_up(&fx, g1, 1, 0x20000);
	assert_int_equal(rm_alloc(fx.rm, 1, g1->hc, g1->hd, &hm, VGPU_RM_CLASS_MEMORY_VIDMEM, &mp,
				  sizeof(mp)), 0);
	len = alias_map(g1, mp.addr);
	rm_t_chan_up(&fx, g1, busy, 0, g1->hv, 0);
	rm_t_chan_up(&fx, g1, idle, 1, g1->hv, 0);
	return len;
}

/* A VF reset frees the VF's channels in the GSP (VF_RESET), so freeing their objects after
 * it sends no CHAN_FREE and quiesces nothing: the reset waits for the engines itself, once
 * per channel the GSP had, before the slice is scrubbed. One of the two channels is in a
 * FILL with minutes left, in a 100 s slice: its quiesce succeeds (the engine stops the turn
 * at the free), and the scrubbed slice stays clean while function 2's work runs on the same
 * engine after it. Clearing the partition then waits for every channel id of the function
 * before its range goes back to the allocator. */
static void test_reset_quiesce(void **state)
{
	static const uint8_t zero[4096];
	struct rm_t_chan busy, idle, c2;
	struct rm_t_guest g1, g2;
	uint32_t args[5];
	uint64_t len, want;
	const uint8_t *slice;

	(void)state;
	len = busy_idle_up(&g1, &busy, &idle);
	rm_t_guest_up(&fx, &g2, 2, 0x3000);
	rm_t_chan_up(&fx, &g2, &c2, 0, g2.hv, 0);

	fill_start(&g1, &busy, len);

	memset(&seen, 0, sizeof(seen));
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	want = 1ull << busy.chid | 1ull << idle.chid;
	/* The fixture gives the GSP no slice memfd: the scrub is the vram_scrub op. */
	assert_int_equal(seen.scrubs, 1);
	assert_int_equal(seen.scrub_base, T_SLICE);
	assert_int_equal(seen.scrub_size, T_SLICE);
	assert_int_equal(seen.quiesced_at_scrub, want);
	assert_int_equal(seen.quiesced[1], want);
	assert_int_equal(seen.quiesced_twice[1], 0);
	assert_int_equal(seen.quiesced[2], 0);
	assert_int_equal(seen.quiesce_failed, 0);

	/* Function 2's FILL runs on the engine after function 1's turn; then function 1's
	 * slice is still all zero. */
	memcpy(args, (uint32_t[]){ (uint32_t)(RM_T_VA + 0x100000), 0, 4096, 0, 7 }, 5 * 4);
	rm_t_chan_method(&c2, VGPU_M_FILL, args, 5);
	rm_t_chan_submit(&fx, &g2, &c2);
	chan_wait(&c2);
	slice = gpu_vram_ptr(fx.gpu, T_SLICE, T_SLICE);
	assert_non_null(slice);
	for (uint64_t off = 0; off < T_SLICE; off += sizeof(zero))
		assert_memory_equal(slice + off, zero, sizeof(zero));

	memset(&seen, 0, sizeof(seen));
	assert_int_equal(rm_vf_partition_clear(fx.rm, 1), 0);
	assert_int_equal(seen.quiesced[1], ~0ull);
	assert_int_equal(seen.quiesced_twice[1], 0);
	assert_int_equal(seen.quiesce_failed, 0);
}

#define RM_T_SEM2	0x1f8000u	/* a second semaphore there */

/* @c's ring at its slot, written again by whoever has the memory now (the function's next
 * guest, or the guest itself once the RM dropped the channel) with a semaphore release of
 * @value at RM_T_VA + @off, and submitted as a guest does without the RM: GP_PUT into
 * USERD, then the function's doorbell with the channel's token. Returns once the device
 * has judged the token, with the function's doorbell counters from before it in @before
 * and after it in @after. */
static void ring_bare(struct rm_t_guest *g, struct rm_t_chan *c, uint32_t off, uint32_t value,
		      struct gpu_db_stats *before, struct gpu_db_stats *after)
{
	uint32_t chid = c->chid, args[5] = { (uint32_t)(RM_T_VA + off), 0, value, 0, 0 };
	uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD);

	rm_t_chan_slot(g, c, c->k);
	c->chid = chid;
	rm_t_chan_method(c, VGPU_M_SEM_RELEASE, args, 5);
	gpu_db_stats(fx.gpu, g->fn, before);
	__atomic_store_n(&c->userd->gp_put, c->put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(fx.gpu, g->fn, vgpu_token(0, chid));
	gpu_db_stats(fx.gpu, g->fn, after);
	while (after->rung == before->rung && !cmn_deadline_passed(dl)) {
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
		gpu_db_stats(fx.gpu, g->fn, after);
	}
	assert_int_equal(after->rung, before->rung + 1);
}

/* Run a semaphore release of @value at RM_T_VA + @off on @c through the RM, to its end. */
static void run_sem(struct rm_t_guest *g, struct rm_t_chan *c, uint32_t off, uint32_t value)
{
	uint32_t args[5] = { (uint32_t)(RM_T_VA + off), 0, value, 0, 0 };

	rm_t_chan_method(c, VGPU_M_SEM_RELEASE, args, 5);
	rm_t_chan_submit(&fx, g, c);
	chan_wait(c);
	assert_int_equal(__atomic_load_n((uint32_t *)(g->host + off), __ATOMIC_ACQUIRE), value);
}

/* Channel @chid of function 1 is allocated in the hardware (the GSP holds it). */
static bool hw_allocated(uint32_t chid)
{
	const struct gpu_priv_fn *p = &gpu_priv_view(fx.gpu)->fns[1];

	return __atomic_load_n(&p->chans[chid].flags, __ATOMIC_ACQUIRE) & GPU_CHAN_ALLOCATED;
}

/* A VF reset whose VF_RESET the GSP cannot run (killed; with no_auto_reset nothing wipes
 * the hardware until gsp_reset()): rm_vf_reset() fails with -ENOTRECOVERABLE and tears the
 * function down all the same, while the hardware still has its two channels enabled and
 * on their runlist. Both are fenced off: the one in a FILL with minutes left in a 100 s
 * slice stops (its quiesce succeeds, and the scrubbed slice stays zero), and the idle one,
 * its ring written again in the scrubbed block and rung, is not accepted and runs nothing.
 * After the device reset, channels allocated on the same ids run. */
static void test_reset_gsp_gone(void **state)
{
	struct rm_t_chan busy, idle, c0, c1;
	struct gpu_db_stats before, after;
	struct rm_t_guest g1, n1;
	uint64_t len, dl, quiesced, dirty = 0;
	unsigned int failed, scrubs;
	const uint64_t *slice;
	uint32_t sem;
	int ret;

	(void)state;
	len = busy_idle_up(&g1, &busy, &idle);
	fill_start(&g1, &busy, len);
	/* Killed outright, with no RPC in flight: the watchdog reaps it and marks the device. */
	assert_int_equal(kill(gsp_pid(rm_gsp(fx.rm)), SIGKILL), 0);
	dl = cmn_deadline_ns(RM_T_HANG_GUARD);
	while (!gsp_needs_reset(rm_gsp(fx.rm)) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_true(gsp_needs_reset(rm_gsp(fx.rm)));

	memset(&seen, 0, sizeof(seen));
	ret = rm_vf_reset(fx.rm, 1);
	failed = seen.quiesce_failed;
	quiesced = seen.quiesced[1];
	scrubs = seen.scrubs;
	slice = gpu_vram_ptr(fx.gpu, T_SLICE, T_SLICE);
	assert_non_null(slice);
	for (uint64_t i = 0; i < T_SLICE / 8; i++)
		dirty |= slice[i];
	rm_t_guest_tables(&g1);
	ring_bare(&g1, &idle, RM_T_SEM2, 2, &before, &after);
	sem = __atomic_load_n((uint32_t *)(g1.host + RM_T_SEM2), __ATOMIC_ACQUIRE);
	/* Before any check: the wipe ends whatever still runs, so a failure ends the case. */
	assert_int_equal(gsp_reset(rm_gsp(fx.rm)), 0);

	assert_int_equal(ret, -ENOTRECOVERABLE);
	assert_int_equal(scrubs, 1);
	assert_int_equal(quiesced, 1ull << busy.chid | 1ull << idle.chid);
	assert_int_equal(failed, 0);
	assert_int_equal(dirty, 0);
	assert_int_equal(after.accepted, before.accepted);
	assert_int_equal(after.invalid, before.invalid + 1);
	assert_int_equal(sem, 0);

	/* Wiped by the reset: the next allocations of the ids are not fenced. */
	assert_false(hw_allocated(busy.chid) || hw_allocated(idle.chid));
	rm_t_guest_up(&fx, &n1, 1, 0x3000);
	rm_t_chan_up(&fx, &n1, &c0, 0, n1.hv, 0);
	rm_t_chan_up(&fx, &n1, &c1, 1, n1.hv, 0);
	assert_int_equal(c0.chid, busy.chid);
	assert_int_equal(c1.chid, idle.chid);
	run_sem(&n1, &c0, RM_T_SEM, 3);
	run_sem(&n1, &c1, RM_T_SEM2, 4);
}

/* Guests of functions 1 and 2 with a channel each (@c1, @c2), and the GSP told to refuse
 * as @fail says. */
static void refused_up(struct vgpu_rpc_inject *fail, struct rm_t_guest *g1, struct rm_t_chan *c1,
		       struct rm_t_guest *g2, struct rm_t_chan *c2)
{
	rm_t_guest_up(&fx, g1, 1, 0x3000);
	rm_t_chan_up(&fx, g1, c1, 0, g1->hv, 0);
	rm_t_guest_up(&fx, g2, 2, 0x3000);
	rm_t_chan_up(&fx, g2, c2, 0, g2->hv, 0);
	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, fail, sizeof(*fail), NULL,
				  0, NULL), 0);
}

/* @c1, fenced off, its ring written again and rung by its guest: the token is invalid and
 * its semaphore stays 0, while @g2's @c2 runs on the engine. */
static void fenced_runs_nothing(struct rm_t_guest *g1, struct rm_t_chan *c1,
				struct rm_t_guest *g2, struct rm_t_chan *c2)
{
	struct gpu_db_stats before, after;

	ring_bare(g1, c1, RM_T_SEM, 1, &before, &after);
	run_sem(g2, c2, RM_T_SEM, 5);
	assert_int_equal(__atomic_load_n((uint32_t *)(g1->host + RM_T_SEM), __ATOMIC_ACQUIRE), 0);
	assert_int_equal(after.accepted, before.accepted);
	assert_int_equal(after.invalid, before.invalid + 1);
}

/* The GSP refuses a VF reset (FAIL: -EREMOTEIO, VF_RESET not run): rm_vf_reset() fails,
 * the function's channel gone from the RM's records and still enabled and on its runlist
 * in the hardware. It is fenced off: the guest's own submission on it (its ring and
 * doorbell, which it still maps) is not accepted, and its semaphore stays 0 while function
 * 2's work runs on the engine. The next VF reset goes through, and a channel allocated on
 * the same id runs. */
static void test_reset_refused(void **state)
{
	struct vgpu_rpc_inject fail = { .mode = VGPU_INJ_FAIL, .fn = 0,
					.arg = VGPU_RPC_FN_VF_RESET };
	struct rm_t_guest g1, g2, n1;
	struct rm_t_chan c1, c2, n;

	(void)state;
	refused_up(&fail, &g1, &c1, &g2, &c2);
	assert_int_equal(rm_vf_reset(fx.rm, 1), -EREMOTEIO);
	assert_true(hw_allocated(c1.chid));

	fenced_runs_nothing(&g1, &c1, &g2, &c2);

	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	assert_false(hw_allocated(c1.chid));
	rm_t_guest_up(&fx, &n1, 1, 0x3000);
	rm_t_chan_up(&fx, &n1, &n, 0, n1.hv, 0);
	assert_int_equal(n.chid, c1.chid);
	run_sem(&n1, &n, RM_T_SEM, 6);
}

/* The GSP refuses a channel's free (FAIL: -EREMOTEIO, CHAN_FREE not run): the RM frees the
 * object and its record all the same, and the channel, still enabled and on its runlist in
 * the hardware, is fenced off: the guest's submission on it is not accepted and runs
 * nothing, while function 2's work runs. */
static void test_free_refused(void **state)
{
	struct vgpu_rpc_inject fail = { .mode = VGPU_INJ_FAIL, .fn = 1,
					.arg = VGPU_RPC_FN_CHAN_FREE };
	struct rm_t_guest g1, g2;
	struct rm_t_chan c1, c2;

	(void)state;
	refused_up(&fail, &g1, &c1, &g2, &c2);
	assert_int_equal(rm_free(fx.rm, 1, g1.hc, c1.h), 0);
	assert_true(hw_allocated(c1.chid));

	fenced_runs_nothing(&g1, &c1, &g2, &c2);
}

/* System memory: mapped into the VF's domain at alloc, unmapped when the last reference
 * (the dup's) goes. */
static void test_dma_ops(void **state)
{
	struct vgpu_rm_sysmem_params sp = { .size = 128 << 10 };
	uint32_t hc, hd, hs, hm = 0, hdup = 0;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hm, VGPU_RM_CLASS_MEMORY_SYSMEM, &sp,
				  sizeof(sp)), 0);
	assert_int_equal(seen.dma_map, 1);
	assert_int_equal(rm_dup(fx.rm, 1, hc, hd, &hdup, hc, hm), 0);
	assert_int_equal(rm_free(fx.rm, 1, hc, hm), 0);
	assert_int_equal(seen.dma_unmap, 0);
	assert_int_equal(rm_free(fx.rm, 1, hc, hdup), 0);
	assert_int_equal(seen.dma_unmap, 1);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

#define OPS_CASE(i) { ops_cases[i].name, test_ops_required, NULL, NULL, (void *)&ops_cases[i] }

int main(void)
{
	const struct CMUnitTest tests[] = {
		OPS_CASE(0), OPS_CASE(1), OPS_CASE(2), OPS_CASE(3), OPS_CASE(4), OPS_CASE(5),
		OPS_CASE(6), OPS_CASE(7), OPS_CASE(8), OPS_CASE(9), OPS_CASE(10), OPS_CASE(11),
		cmocka_unit_test_setup_teardown(test_fault_replay_op, setup, teardown),
		cmocka_unit_test_setup_teardown(test_submit_op, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_quiesce, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_gsp_gone, setup_manual_reset, teardown),
		cmocka_unit_test_setup_teardown(test_reset_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dma_ops, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
