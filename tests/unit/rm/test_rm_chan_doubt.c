// SPDX-License-Identifier: MIT
/* A channel allocation whose outcome the RM never learns: a CHAN_ALLOC that times out and
 * that the GSP runs afterwards, and one a device reset cancels before it is sent. The
 * first leaves the id allocated in the GSP with no RM record; the RM keeps the id doubtful
 * and frees it in the GSP before its next allocation, so that allocation succeeds on the
 * same id (else the GSP refuses every later one with -EEXIST until a VF reset). The second is
 * never run by the new GSP: its caller was told -EIO. Through the real vgpu-gsp; the
 * timing is set by the GSP's injected stall and by gsp_send_hook, not by sleeps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

static struct rm_fixture fx;

static int setup(void **state)
{
	/* A short allocation deadline: the stalled CHAN_ALLOC times out sooner. The GSP
	 * answers nothing on the stalled lane whatever the deadline, so the outcome is
	 * fixed; reset_strikes keeps that timeout from resetting the device. */
	static const struct gsp_config gc = {
		.deadline_ns = { 0, VGPU_NSEC_PER_SEC, 0 }, .reset_strikes = 100 };
	struct rm_config rc = { .gsp = &gc };

	(void)state;
	return rm_fixture_up(&fx, &rc);
}

static int teardown(void **state)
{
	(void)state;
	gsp_send_hook = NULL;
	return rm_fixture_down_checked(&fx);
}

static void inject(uint32_t mode, uint32_t lane, uint64_t arg)
{
	struct vgpu_rpc_inject in = { .mode = mode, .lane = lane, .arg = arg };

	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0,
				  NULL), 0);
}

/* Function 1's channel @chid in the GSP's privileged table. */
static const struct gpu_priv_chan *hw_chan(uint32_t chid)
{
	return &gpu_priv_view(fx.gpu)->fns[1].chans[chid];
}

static bool hw_allocated(uint32_t chid)
{
	return __atomic_load_n(&hw_chan(chid)->flags, __ATOMIC_ACQUIRE) & GPU_CHAN_ALLOCATED;
}

/* Every RPC of function 1 sent so far has run: its lane serves them in order. */
static void lane1_drained(void)
{
	assert_int_equal(gsp_call(rm_gsp(fx.rm), 1, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL), 0);
}

static void vaspace(uint32_t *hc, uint32_t *hd, uint32_t *hv)
{
	struct vgpu_rm_vaspace_params vp = { .pdb = 0 };
	uint32_t hs;

	assert_int_equal(rm_t_client(fx.rm, 1, hc, hd, &hs), 0);
	*hv = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, *hc, *hd, hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)),
			 0);
}

/* A channel like rm_t_channel()'s with USERD at @userd, so the GSP's record tells two
 * allocations of one id apart. */
static int channel(uint32_t hc, uint32_t hd, uint32_t hv, uint64_t userd, uint32_t *h,
		   uint32_t *chid)
{
	struct vgpu_rm_channel_params p = { .h_vaspace = hv, .gpfifo_va = 0x100000,
		.gpfifo_entries = 64, .userd_addr = userd };
	int ret;

	*h = 0;
	ret = rm_alloc(fx.rm, 1, hc, hd, h, VGPU_RM_CLASS_CHANNEL_GPFIFO, &p, sizeof(p));
	*chid = p.chid;
	return ret;
}

/* The GSP runs a CHAN_ALLOC after the RM gave up on it: the next allocation gets the id. */
static void test_late_alloc(void **state)
{
	struct gsp_stats st;
	uint32_t hc, hd, hv, hch, chid;
	uint64_t late;

	(void)state;
	vaspace(&hc, &hd, &hv);
	gsp_get_stats(rm_gsp(fx.rm), &st);
	late = st.late_replies;
	/* Function 1's lane (1 of 4) reads no command until CLEAR: the CHAN_ALLOC waits. */
	inject(VGPU_INJ_STALL, 1, VGPU_INJ_UNTIL_CLEAR);
	assert_int_equal(channel(hc, hd, hv, 0x2000, &hch, &chid), -ETIMEDOUT);
	assert_false(hw_allocated(0));
	inject(VGPU_INJ_CLEAR, 0, 0);
	/* The GSP runs it now; its reply, late, is read and dropped before the NOP's. */
	lane1_drained();
	gsp_get_stats(rm_gsp(fx.rm), &st);
	assert_int_equal(st.late_replies, late + 1);
	assert_true(hw_allocated(0));
	assert_int_equal(__atomic_load_n(&hw_chan(0)->userd_addr, __ATOMIC_ACQUIRE), 0x2000);
	/* The RM frees the leftover in the GSP first: the same id, allocated anew. */
	assert_int_equal(channel(hc, hd, hv, 0x3000, &hch, &chid), 0);
	assert_int_equal(chid, 0);
	assert_true(hw_allocated(0));
	assert_int_equal(__atomic_load_n(&hw_chan(0)->userd_addr, __ATOMIC_ACQUIRE), 0x3000);
	/* And it is an ordinary channel: freed, the GSP has nothing left on that id. */
	assert_int_equal(rm_free(fx.rm, 1, hc, hch), 0);
	assert_false(hw_allocated(0));
	assert_int_equal(channel(hc, hd, hv, 0x4000, &hch, &chid), 0);
	assert_int_equal(chid, 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_false(hw_allocated(0));
}

/* A device reset between a CHAN_ALLOC's slot and its send (gsp_send_hook): the reset
 * cancels it (-EIO) and restarts the GSP; the request must not reach the new GSP. */
static unsigned int reset_hook_runs;

static void reset_before_send(struct gsp *g, unsigned int gfid, uint32_t function)
{
	if (gfid != 1 || function != VGPU_RPC_FN_CHAN_ALLOC)
		return;
	gsp_send_hook = NULL;	/* the replay's own RPCs go through as usual */
	reset_hook_runs++;
	assert_int_equal(gsp_reset(g), 0);
}

static void test_reset_before_send(void **state)
{
	uint32_t hc, hd, hv, hch, chid;
	uint64_t resets;
	struct gsp_stats st;

	(void)state;
	vaspace(&hc, &hd, &hv);
	gsp_get_stats(rm_gsp(fx.rm), &st);
	resets = st.resets;
	gsp_send_hook = reset_before_send;
	assert_int_equal(channel(hc, hd, hv, 0x2000, &hch, &chid), -EIO);
	assert_int_equal(reset_hook_runs, 1);
	gsp_get_stats(rm_gsp(fx.rm), &st);
	assert_int_equal(st.resets, resets + 1);
	lane1_drained();
	assert_false(hw_allocated(0));
	/* The id is free for the next allocation. */
	assert_int_equal(channel(hc, hd, hv, 0x3000, &hch, &chid), 0);
	assert_int_equal(chid, 0);
	assert_int_equal(__atomic_load_n(&hw_chan(0)->userd_addr, __ATOMIC_ACQUIRE), 0x3000);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_false(hw_allocated(0));
}

/* A client made while a VF reset is under way (after its clients were disabled, before
 * the GSP's VF_RESET: gsp_send_hook) is not disabled, but its channel would be marked not
 * live once the reset returns, whether the GSP ran its CHAN_ALLOC before the VF_RESET or
 * after: refused until the reset has settled the VF's channels. */
static int during_reset_ret = 1;
static uint32_t during_reset_client;

static void alloc_during_reset(struct gsp *g, unsigned int gfid, uint32_t function)
{
	uint32_t hd, hv, hch, chid;

	(void)g;
	if (gfid != 0 || function != VGPU_RPC_FN_VF_RESET)
		return;
	gsp_send_hook = NULL;
	vaspace(&during_reset_client, &hd, &hv);
	during_reset_ret = channel(during_reset_client, hd, hv, 0x2000, &hch, &chid);
}

static void test_alloc_during_reset(void **state)
{
	uint32_t hc, hd, hv, hch, chid;

	(void)state;
	gsp_send_hook = alloc_during_reset;
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	assert_int_equal(during_reset_ret, -EBUSY);
	lane1_drained();
	assert_false(hw_allocated(0));
	assert_int_equal(rm_client_free(fx.rm, 1, during_reset_client), 0);
	/* Once the reset is done, the same kind of client gets its channel. */
	vaspace(&hc, &hd, &hv);
	assert_int_equal(channel(hc, hd, hv, 0x3000, &hch, &chid), 0);
	assert_true(hw_allocated(chid));
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_false(hw_allocated(chid));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_late_alloc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_before_send, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alloc_during_reset, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
