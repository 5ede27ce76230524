// SPDX-License-Identifier: MIT
/* The guest-facing dispatcher (every field of a wire message validated, nothing changed on
 * bad input) and device reset through the RM: a GSP crash or hang ends with the partitions
 * and channels replayed from the RM's records, every function notified, and the object
 * count where it was. Every RPC runs under the default deadlines; only the calls a hung
 * GSP never answers take a short one of their own. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "common/err.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

static struct rm_fixture fx;
static _Atomic unsigned int resets_seen;

static void on_notify(void *ctx, unsigned int fn, enum rm_notify what)
{
	(void)ctx;
	if (what == RM_NOTIFY_DEVICE_RESET && fn == 1)
		atomic_fetch_add(&resets_seen, 1);
}

static int setup(void **state)
{
	struct gsp_config gc = { 0 };
	struct rm_config c = { .notify = on_notify, .gsp = &gc };

	(void)state;
	atomic_store(&resets_seen, 0);
	return rm_fixture_up(&fx, &c);
}

static int teardown(void **state)
{
	(void)state;
	return rm_fixture_down_checked(&fx);
}

/* ---- message builders ---- */
struct msg {
	union {
		struct vgpu_rm_msg hdr;
		struct vgpu_rm_alloc alloc;
		struct vgpu_rm_free free;
		struct vgpu_rm_control ctrl;
		uint8_t raw[VGPU_RM_MAX_MSG + 64];
	};
	size_t len;
};

static void hdr(struct msg *m, uint32_t op, size_t len)
{
	m->hdr = (struct vgpu_rm_msg){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
		.abi_version = VGPU_ABI_VERSION, .op = op, .length = (uint32_t)len, .cookie = 77 };
	m->len = len;
}

static int call(unsigned int fn, struct msg *m, struct vgpu_rm_reply **rp)
{
	static uint8_t buf[sizeof(struct vgpu_rm_reply) + VGPU_RM_MAX_PARAMS];
	size_t len = sizeof(buf);

	assert_int_equal(rm_dispatch(fx.rm, fn, m->raw, m->len, buf, &len), 0);
	*rp = (void *)buf;
	assert_int_equal((*rp)->cookie, m->len >= sizeof(struct vgpu_rm_msg) &&
			 m->hdr.magic == (uint32_t)VGPU_RM_MSG_MAGIC ? m->hdr.cookie : (*rp)->cookie);
	assert_int_equal((*rp)->length, len);
	return (*rp)->status;
}

static uint32_t new_client(unsigned int fn)
{
	struct msg m;
	struct vgpu_rm_reply *rp;

	hdr(&m, VGPU_RM_OP_ALLOC_CLIENT, sizeof(m.hdr));
	assert_int_equal(call(fn, &m, &rp), 0);
	return rp->handle;
}

static int alloc(unsigned int fn, uint32_t hc, uint32_t hp, uint32_t cls, void *p, size_t plen,
		 uint32_t *h)
{
	struct msg m;
	struct vgpu_rm_reply *rp;
	int ret;

	hdr(&m, VGPU_RM_OP_ALLOC, sizeof(m.alloc) + plen);
	m.alloc.h_client = hc;
	m.alloc.h_parent = hp;
	m.alloc.h_object = 0;
	m.alloc.h_class = cls;
	m.alloc.params_len = (uint32_t)plen;
	m.alloc.reserved = 0;
	if (plen)
		memcpy(&m.alloc + 1, p, plen);
	ret = call(fn, &m, &rp);
	*h = rp->handle;
	if (!ret && rp->params_len)
		memcpy(p, rp + 1, rp->params_len);
	return ret;
}

/* A guest's whole session over the wire. */
static void test_session(void **state)
{
	struct vgpu_rm_vidmem_params vp = { .size = 2 << 20, .page_size = 2 << 20 };
	struct vgpu_rm_vaspace_params vas = { .pdb = 0 };
	struct vgpu_rm_channel_params cp = { .gpfifo_va = 0x1000, .gpfifo_entries = 128 };
	uint8_t echo[256];
	uint32_t hc, hd, hs, hm, hv, hch;
	struct msg m;
	struct vgpu_rm_reply *rp;

	(void)state;
	hc = new_client(1);
	assert_int_equal(alloc(1, hc, hc, VGPU_RM_CLASS_DEVICE, NULL, 0, &hd), 0);
	assert_int_equal(alloc(1, hc, hd, VGPU_RM_CLASS_SUBDEVICE, NULL, 0, &hs), 0);
	assert_int_equal(alloc(1, hc, hd, VGPU_RM_CLASS_MEMORY_VIDMEM, &vp, sizeof(vp), &hm), 0);
	assert_int_equal(vp.addr % (2 << 20), 0);
	assert_true(vp.addr < T_SLICE);
	assert_int_equal(alloc(1, hc, hd, VGPU_RM_CLASS_VASPACE, &vas, sizeof(vas), &hv), 0);
	cp.h_vaspace = hv;
	assert_int_equal(alloc(1, hc, hd, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp, sizeof(cp), &hch), 0);
	assert_int_equal(cp.token, vgpu_token(0, cp.chid));
	/* GSP_ECHO: guest -> RM -> GSP -> back */
	for (size_t i = 0; i < sizeof(echo); i++)
		echo[i] = (uint8_t)i;
	hdr(&m, VGPU_RM_OP_CONTROL, sizeof(m.ctrl) + sizeof(echo));
	m.ctrl = (struct vgpu_rm_control){ m.hdr, hc, hs, VGPU_RM_CTRL_GSP_ECHO, sizeof(echo) };
	memcpy(&m.ctrl + 1, echo, sizeof(echo));
	assert_int_equal(call(1, &m, &rp), 0);
	assert_int_equal(rp->params_len, sizeof(echo));
	assert_memory_equal(rp + 1, echo, sizeof(echo));
	/* map */
	hdr(&m, VGPU_RM_OP_MAP, sizeof(m.free));
	m.free.h_client = hc;
	m.free.h_object = hm;
	assert_int_equal(call(1, &m, &rp), 0);
	assert_int_equal(((struct vgpu_rm_map_info *)(rp + 1))->addr, vp.addr);
	/* free the client over the wire */
	hdr(&m, VGPU_RM_OP_FREE, sizeof(m.free));
	m.free.h_client = hc;
	m.free.h_object = hc;
	assert_int_equal(call(1, &m, &rp), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
}

/* Malformed messages: a clear status, no change. */
enum mut { M_MAGIC, M_VERSION, M_LEN_SHORT, M_LEN_LONG, M_HDR_LEN, M_OP, M_PARAMS_LEN,
	   M_RESERVED, M_FOREIGN, M_TINY, M_NOT_CLIENT };
static const struct wire_case {
	const char *name;
	enum mut mut;
	int want;
} wire_cases[] = {
	{ "bad magic", M_MAGIC, VGPU_RM_ERR_BAD_MSG },
	{ "other ABI major", M_VERSION, VGPU_RM_ERR_VERSION },
	{ "shorter than its header says", M_LEN_SHORT, VGPU_RM_ERR_BAD_MSG },
	{ "longer than the op's struct", M_LEN_LONG, VGPU_RM_ERR_BAD_MSG },
	{ "header length lies", M_HDR_LEN, VGPU_RM_ERR_BAD_MSG },
	{ "unknown op", M_OP, VGPU_RM_ERR_NOT_SUPPORTED },
	{ "params_len beyond the message", M_PARAMS_LEN, VGPU_RM_ERR_BAD_MSG },
	{ "reserved field set", M_RESERVED, VGPU_RM_ERR_BAD_MSG },
	{ "another VF's client", M_FOREIGN, VGPU_RM_ERR_FOREIGN },
	{ "four bytes", M_TINY, VGPU_RM_ERR_BAD_MSG },
	{ "not a client handle", M_NOT_CLIENT, VGPU_RM_ERR_NO_OBJECT },
};

static void test_wire(void **state)
{
	const struct wire_case *c = *state;
	uint32_t hc = new_client(1), other = new_client(2);
	uint64_t before = rm_object_count(fx.rm, 1);
	struct msg m;
	struct vgpu_rm_reply *rp;

	hdr(&m, VGPU_RM_OP_ALLOC, sizeof(m.alloc));
	m.alloc = (struct vgpu_rm_alloc){ m.hdr, hc, hc, 0, VGPU_RM_CLASS_DEVICE, 0, 0 };
	switch (c->mut) {
	case M_MAGIC: m.hdr.magic ^= 1; break;
	case M_VERSION: m.hdr.abi_version = (VGPU_ABI_MAJOR + 1) << 16; break;
	case M_LEN_SHORT: m.len -= 4; break;
	case M_LEN_LONG: m.len += 8; m.hdr.length += 8; break;
	case M_HDR_LEN: m.hdr.length += 1; break;
	case M_OP: m.hdr.op = 99; break;
	case M_PARAMS_LEN: m.alloc.params_len = 64; break;
	case M_RESERVED: m.alloc.reserved = 1; break;
	case M_FOREIGN: m.alloc.h_client = other; m.alloc.h_parent = other; break;
	case M_TINY: m.len = 4; break;
	case M_NOT_CLIENT: m.alloc.h_client = 0x1234; break;
	}
	assert_int_equal(call(1, &m, &rp), c->want);
	assert_int_equal(rp->handle, 0);
	assert_int_equal(rp->params_len, 0);
	assert_int_equal(rm_object_count(fx.rm, 1), before);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, other), 0);
}

static void test_reply_too_small(void **state)
{
	struct msg m;
	uint8_t buf[64];
	size_t len = sizeof(buf);

	(void)state;
	hdr(&m, VGPU_RM_OP_ALLOC_CLIENT, sizeof(m.hdr));
	assert_int_equal(rm_dispatch(fx.rm, 1, m.raw, m.len, buf, &len), -EINVAL);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
}

/* Build state on VF 1 (memory, a bound channel), return what to check after a reset. */
static void build_state(uint32_t *hc, struct vgpu_rm_channel_params *cp)
{
	struct vgpu_rm_vaspace_params vas = { .pdb = 0x20000 };
	struct vgpu_rm_enable_params en = { .enable = 1 };
	uint32_t hd, hs, hm, hv = 0, hch;
	size_t len = sizeof(en);

	assert_int_equal(rm_t_client(fx.rm, 1, hc, &hd, &hs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, *hc, hd, 4 << 20, &hm), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, *hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vas, sizeof(vas)), 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, *hc, hd, hv, &hch, cp), 0);
	assert_int_equal(rm_control(fx.rm, 1, *hc, hch, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len, sizeof(en)), 0);
}

static void check_replayed(const struct vgpu_rm_channel_params *cp)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);

	assert_int_equal(sh->fns[1].part_base, T_SLICE);
	assert_int_equal(sh->fns[1].part_size, T_SLICE);
	assert_int_equal(sh->fns[2].part_base, 2 * T_SLICE);
	assert_true(sh->fns[1].chans[cp->chid].flags & GPU_CHAN_ENABLED);
	assert_int_equal(sh->fns[1].chans[cp->chid].pdb, 0x20000);
	assert_int_equal(sh->fns[1].runlist[0], 1ull << cp->chid);
}

static int wait_working(void)
{
	struct vgpu_rpc_info info;
	uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD);

	while (!cmn_deadline_passed(dl)) {
		if (!gsp_needs_reset(rm_gsp(fx.rm)) && atomic_load(&resets_seen) &&
		    !gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info), NULL))
			return 0;
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	return -ETIMEDOUT;
}

/* GSP crash: restarted, hardware state replayed, VF notified, no object lost or leaked. */
static void test_gsp_crash(void **state)
{
	struct vgpu_rpc_inject in = { .mode = VGPU_INJ_CRASH };
	struct vgpu_rm_channel_params cp;
	uint32_t hc;
	uint64_t before;

	(void)state;
	build_state(&hc, &cp);
	assert_int_equal(rm_sched_set(fx.rm, GPU_SCHED_FIXED_SHARE, 3000000), 0);
	assert_int_equal(rm_fn_sched_set(fx.rm, 1, true, 0, 0, 400), 0);
	assert_int_equal(rm_fn_sched_set(fx.rm, 2, true, 0, 0, 700), -EINVAL);	/* 1100 per mille */
	assert_int_equal(rm_sched_set(fx.rm, 9, 0), -EINVAL);
	before = rm_object_count(fx.rm, 1);
	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0, NULL), -EIO);
	assert_int_equal(wait_working(), 0);
	check_replayed(&cp);
	{
		const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
		assert_int_equal(sh->sched_policy, GPU_SCHED_FIXED_SHARE);
		assert_int_equal(sh->sched_quantum_ns, 3000000);
		assert_int_equal(sh->fns[1].sched.weight, 400);
		assert_int_equal(sh->fns[1].sched.enabled, 1);
	}
	assert_int_equal(rm_object_count(fx.rm, 1), before);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* GSP hang: three strikes, automatic reset, the same replay. A hung GSP answers nothing,
 * so each strike's deadline passes whatever it is: a short one keeps the case quick, and
 * no call that must succeed waits under it. */
static void test_gsp_hang(void **state)
{
	struct vgpu_rpc_inject in = { .mode = VGPU_INJ_HANG };
	struct vgpu_rm_channel_params cp;
	struct vgpu_rm_info info;
	uint32_t hc, hd, hdev, hs;
	size_t len;
	int ret;

	(void)state;
	build_state(&hc, &cp);
	assert_int_equal(rm_t_client(fx.rm, 2, &hd, &hdev, &hs), 0);
	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0, NULL), 0);
	for (int i = 0; i < 3; i++) {
		uint8_t e[8] = { 0 };

		ret = gsp_call_deadline(rm_gsp(fx.rm), 2, VGPU_RPC_FN_ECHO, e, sizeof(e), e,
					sizeof(e), NULL, 100 * VGPU_NSEC_PER_MSEC);
		assert_true(ret == -ETIMEDOUT || ret == -ENOTRECOVERABLE || ret == -EIO);
	}
	assert_int_equal(wait_working(), 0);
	check_replayed(&cp);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 2, hd, hs, VGPU_RM_CTRL_GET_INFO, &info, &len, sizeof(info)), 0);
	assert_int_equal(info.gsp_resets, 1);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, hd), 0);
}

int main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test_setup_teardown(test_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reply_too_small, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gsp_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gsp_hang, setup, teardown),
	};
	/* Sized and counted from the tables, so no case is overwritten or left out. */
	struct CMUnitTest t[VGPU_ARRAY_SIZE(fixed) + VGPU_ARRAY_SIZE(wire_cases)];
	size_t n = VGPU_ARRAY_SIZE(fixed);

	memcpy(t, fixed, sizeof(fixed));
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(wire_cases); i++)
		t[n++] = (struct CMUnitTest){ wire_cases[i].name, test_wire, setup, teardown,
					      (void *)&wire_cases[i] };
	return _cmocka_run_group_tests("rm_dispatch", t, n, NULL, NULL);
}
