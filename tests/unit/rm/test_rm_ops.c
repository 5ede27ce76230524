// SPDX-License-Identifier: MIT
/* The device ops: the RM reaches the device only through struct rm_device_ops. A counting
 * wrapper over rm_hw_ops checks which op each RM call makes, with which arguments, and
 * that a table missing any op is refused. Runs against the real vgpu-gsp. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "rm_test.h"

static struct rm_fixture fx;

/* What the wrapper saw. */
static struct {
	unsigned int fault_replay, chan_submit, chan_quiesce, dma_map, dma_unmap;
	unsigned int last_fn;
	uint32_t aper, gp_put, token;
	uint64_t addr;
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
	seen.chan_quiesce++;
	return rm_hw_ops.chan_quiesce(ctx, fn, chid, timeout_ns);
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
	wrap.dma_map = w_dma_map;
	wrap.dma_unmap = w_dma_unmap;
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
		OPS_CASE(6), OPS_CASE(7), OPS_CASE(8), OPS_CASE(9), OPS_CASE(10),
		cmocka_unit_test_setup_teardown(test_fault_replay_op, setup, teardown),
		cmocka_unit_test_setup_teardown(test_submit_op, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dma_ops, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
