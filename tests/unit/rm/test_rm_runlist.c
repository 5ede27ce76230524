// SPDX-License-Identifier: MIT
/* A channel's runlist and enabled state when the GSP refuses the runlist update: the
 * CHANNEL_ENABLE call fails, and the RM's records (what rm_vf_export() reports and what a
 * device reset replays) stay what the GSP has, so the hardware after a reset is what it
 * was before it. The GSP's refusal is real: vgpu-gsp-test answers the one RPC so
 * (VGPU_INJ_FAIL, rm/gsp/gsp_test_rpc.h) instead of running it. And two updates of one
 * runlist whose RPCs reach the GSP in the opposite order still leave the record there. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

static struct rm_fixture fx;

static const struct runlist_case {
	const char *name;
	bool enabled;		/* the channel's state before the refused call */
	bool enable;		/* what the refused call asks for */
} runlist_cases[] = {
	{ "enable refused: stays disabled", false, true },
	{ "disable refused: stays enabled", true, false },
	{ "enable again refused: stays enabled", true, true },
};

static int setup(void **state)
{
	(void)state;
	return rm_fixture_up(&fx, NULL);
}

static int teardown(void **state)
{
	(void)state;
	gsp_send_hook = NULL;
	return rm_fixture_down_checked(&fx);
}

static int chan_enable(uint32_t hc, uint32_t hch, bool on)
{
	struct vgpu_rm_enable_params en = { .enable = on };
	size_t len = sizeof(en);

	return rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len, sizeof(en));
}

/* The GSP fails the next RPC @function of function 1 with -EREMOTEIO. */
static void gsp_fail_next(uint32_t function)
{
	struct vgpu_rpc_inject in = { .mode = VGPU_INJ_FAIL, .fn = 1, .arg = function };

	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0,
				  NULL), 0);
}

/* Channel @chid of function 1 in the hardware: enabled, and on runlist 0. */
static void assert_hw(uint32_t chid, bool want)
{
	const struct gpu_priv_fn *p = &gpu_priv_view(fx.gpu)->fns[1];
	uint64_t flags = __atomic_load_n(&p->chans[chid].flags, __ATOMIC_ACQUIRE);
	uint64_t rl = __atomic_load_n(&p->runlist[0], __ATOMIC_ACQUIRE);

	assert_int_equal(!!(flags & GPU_CHAN_ENABLED), want);
	assert_int_equal(!!(rl & (1ull << chid)), want);
}

/* The RM's record of channel @hch of client @hc: enabled or not. */
static void assert_record(uint32_t hc, uint32_t hch, bool want)
{
	struct rm_obj_rec *r;
	size_t n;
	int found = 0;

	assert_int_equal(rm_vf_export(fx.rm, 1, &r, &n), 0);
	for (size_t i = 0; i < n; i++) {
		if (r[i].h_client != hc || r[i].handle != hch)
			continue;
		found++;
		assert_int_equal(!!(r[i].w & RM_OBJ_CHAN_ENABLED), want);
	}
	rm_obj_recs_free(r, n);
	assert_int_equal(found, 1);
}

static void test_runlist_refused(void **state)
{
	const struct runlist_case *c = *state;
	struct vgpu_rm_vaspace_params vp = { .pdb = 0 };
	struct vgpu_rm_channel_params cp;
	uint32_t hc, hd, hs, hv = 0, hch;

	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)),
			 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, hc, hd, hv, &hch, &cp), 0);
	if (c->enabled)
		assert_int_equal(chan_enable(hc, hch, true), 0);
	assert_hw(cp.chid, c->enabled);

	gsp_fail_next(VGPU_RPC_FN_RUNLIST_SET);
	assert_int_equal(chan_enable(hc, hch, c->enable), -EREMOTEIO);
	assert_hw(cp.chid, c->enabled);
	assert_record(hc, hch, c->enabled);
	/* A device reset replays the records: the hardware comes back as it was. */
	assert_int_equal(gsp_reset(rm_gsp(fx.rm)), 0);
	assert_hw(cp.chid, c->enabled);
	assert_record(hc, hch, c->enabled);
	/* And the channel takes the next change as usual. */
	assert_int_equal(chan_enable(hc, hch, !c->enabled), 0);
	assert_hw(cp.chid, !c->enabled);
	assert_record(hc, hch, !c->enabled);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* Two channels of one runlist enabled at once, the first one's RUNLIST_SET held between
 * its record change and its send (gsp_send_hook) until the second's has gone through: the
 * first's bitmap (without the second channel) reaches the GSP last. The RM sends the
 * record again, so both channels end enabled and on the runlist, in the hardware and in
 * the records; without the resend the second stays enabled but off its runlist. */
static struct {
	_Atomic unsigned int sends;	/* function 1's RUNLIST_SETs about to be sent */
	_Atomic bool held, release;
	uint32_t hc, hch;
	int ret;
} race;

static void hold_first_runlist(struct gsp *g, unsigned int gfid, uint32_t function)
{
	(void)g;
	if (gfid != 1 || function != VGPU_RPC_FN_RUNLIST_SET || atomic_fetch_add(&race.sends, 1))
		return;
	atomic_store(&race.held, true);
	while (!atomic_load(&race.release))
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
}

static void *enable_first(void *arg)
{
	(void)arg;
	race.ret = chan_enable(race.hc, race.hch, true);
	return NULL;
}

/* A client of function 1 with a VA space and a channel on runlist 0. */
static void client_channel(uint32_t *hc, uint32_t *hch, uint32_t *chid)
{
	struct vgpu_rm_vaspace_params vp = { .pdb = 0 };
	struct vgpu_rm_channel_params cp;
	uint32_t hd, hs, hv = 0;

	assert_int_equal(rm_t_client(fx.rm, 1, hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, *hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)),
			 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, *hc, hd, hv, hch, &cp), 0);
	*chid = cp.chid;
}

static void test_runlist_race(void **state)
{
	uint32_t hc2, hch2, a, b;
	pthread_t th;

	(void)state;
	memset(&race, 0, sizeof(race));
	client_channel(&race.hc, &race.hch, &a);
	client_channel(&hc2, &hch2, &b);
	assert_int_not_equal(a, b);
	gsp_send_hook = hold_first_runlist;
	assert_int_equal(pthread_create(&th, NULL, enable_first, NULL), 0);
	while (!atomic_load(&race.held))
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	/* The first channel is on the runlist in the records, not yet in the GSP. */
	assert_int_equal(chan_enable(hc2, hch2, true), 0);
	assert_hw(b, true);
	atomic_store(&race.release, true);
	pthread_join(th, NULL);
	gsp_send_hook = NULL;
	assert_int_equal(race.ret, 0);
	assert_hw(a, true);
	assert_hw(b, true);
	assert_record(race.hc, race.hch, true);
	assert_record(hc2, hch2, true);
	/* The same after a device reset's replay of the records. */
	assert_int_equal(gsp_reset(rm_gsp(fx.rm)), 0);
	assert_hw(a, true);
	assert_hw(b, true);
	assert_int_equal(rm_client_free(fx.rm, 1, race.hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc2), 0);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(runlist_cases) + 1];

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(runlist_cases); i++)
		t[i] = (struct CMUnitTest){ runlist_cases[i].name, test_runlist_refused, setup,
					    teardown, (void *)&runlist_cases[i] };
	t[VGPU_ARRAY_SIZE(runlist_cases)] = (struct CMUnitTest){ "two updates race",
		test_runlist_race, setup, teardown, NULL };
	return _cmocka_run_group_tests("rm_runlist", t, VGPU_ARRAY_SIZE(t), NULL, NULL);
}
