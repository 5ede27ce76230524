// SPDX-License-Identifier: MIT
/* RPC transport against the real vgpu-gsp: every queue split boundary in both directions,
 * argument checks, hardware RPCs landing in the privileged region, and concurrent callers
 * on one lane and across lanes. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "gsp_test.h"

static struct gsp_fixture fx;

static int group_up(void **state)
{
	(void)state;
	return gsp_fixture_up(&fx, NULL);
}

static int group_down(void **state)
{
	(void)state;
	gsp_fixture_down(&fx);
	return 0;
}

#define P VGPU_RPC_ELEM_PAYLOAD
#define M VGPU_RPC_MSG_MAX_PAYLOAD

static const struct split_case {
	const char *name;
	size_t len;
} split_cases[] = {
	{ "0 B", 0 }, { "1 B", 1 }, { "256 B", 256 },
	{ "one element - 1", P - 1 }, { "one element", P }, { "one element + 1", P + 1 },
	{ "4 KiB - 1", 4095 }, { "4 KiB", 4096 }, { "4 KiB + 1", 4097 },
	{ "one message - 1", M - 1 }, { "one message", M }, { "one message + 1", M + 1 },
	{ "two messages + 1", 2 * M + 1 }, { "256 KiB", 256 << 10 }, { "1 MiB", 1 << 20 },
};

static uint8_t *pattern(size_t len, unsigned int seed)
{
	uint8_t *p = malloc(len ? len : 1);

	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 131);
	return p;
}

/* ECHO: the same size both ways. */
static void test_split_echo(void **state)
{
	const struct split_case *c = *state;
	uint8_t *req = pattern(c->len, 7), *rep = malloc(c->len + 16);
	size_t got = 12345;

	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, req, c->len, rep, c->len + 16, &got), 0);
	assert_int_equal(got, c->len);
	if (c->len)
		assert_memory_equal(req, rep, c->len);
	free(req);
	free(rep);
}

/* BLOB: small request, split reply. */
static void test_split_reply(void **state)
{
	const struct split_case *c = *state;
	struct vgpu_rpc_blob b = { .len = c->len, .seed = 3 };
	uint8_t *want = pattern(c->len, 3), *rep = malloc(c->len + 1);
	size_t got = 0;

	assert_int_equal(gsp_call(fx.gsp, 2, VGPU_RPC_FN_BLOB, &b, sizeof(b), rep, c->len + 1, &got), 0);
	assert_int_equal(got, c->len);
	if (c->len)
		assert_memory_equal(want, rep, c->len);
	free(want);
	free(rep);
}

/* NOP with a split request: the reply is empty. */
static void test_split_request(void **state)
{
	const struct split_case *c = *state;
	uint8_t *req = pattern(c->len, 9);
	size_t got = 99;

	assert_int_equal(gsp_call(fx.gsp, 3, VGPU_RPC_FN_NOP, req, c->len, NULL, 0, &got), 0);
	assert_int_equal(got, 0);
	free(req);
}

static void test_reply_too_big(void **state)
{
	struct vgpu_rpc_blob b = { .len = 200000, .seed = 1 };
	uint8_t buf[1000];
	size_t got = 7;

	(void)state;
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_BLOB, &b, sizeof(b), buf, sizeof(buf), &got),
			 -EMSGSIZE);
	assert_int_equal(got, 0);
	/* The dropped continuation records did not confuse the lane. */
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL), 0);
}

static const struct arg_case {
	const char *name;
	unsigned int gfid;
	uint32_t fn;
	size_t req_len, cap;
	bool null_req, null_rep;
	int want;
} arg_cases[] = {
	{ "gfid out of range", 4, VGPU_RPC_FN_NOP, 0, 0, false, false, -EINVAL },
	{ "continuation as a call", 0, VGPU_RPC_FN_CONTINUATION, 0, 0, false, false, -EINVAL },
	{ "unknown function number", 0, VGPU_RPC_FN_MAX, 0, 0, false, false, -EINVAL },
	{ "request too large", 0, VGPU_RPC_FN_NOP, VGPU_RPC_MAX_PAYLOAD + 1, 0, false, false, -EINVAL },
	{ "NULL request with length", 0, VGPU_RPC_FN_NOP, 8, 0, true, false, -EINVAL },
	{ "NULL reply with capacity", 0, VGPU_RPC_FN_NOP, 0, 8, false, true, -EINVAL },
	{ "unhandled function", 0, 150, 8, 0, false, false, -EOPNOTSUPP },
	{ "partition: short payload", 0, VGPU_RPC_FN_PARTITION_SET, 4, 0, false, false, -EINVAL },
	{ "scrub of nothing", 0, VGPU_RPC_FN_SCRUB, 24, 0, false, false, -EINVAL },
};

static void test_args(void **state)
{
	const struct arg_case *c = *state;
	static uint8_t buf[64];
	uint8_t *big = c->req_len > sizeof(buf) ? calloc(1, c->req_len) : buf;

	assert_int_equal(gsp_call(fx.gsp, c->gfid, c->fn, c->null_req ? NULL : big, c->req_len,
				  c->null_rep ? NULL : buf, c->cap, NULL), c->want);
	if (big != buf)
		free(big);
}

/* Hardware RPCs land in the privileged region the device model reads. */
static void test_hw_programming(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rpc_partition pt = { .fn = 2, .base = 8 << 20, .size = 8 << 20 };
	struct vgpu_rpc_chan ch = { .fn = 2, .chid = 5, .pdb = 0, .gpfifo_va = 0x10000,
		.gpfifo_entries = 64, .userd_aper = 0, .userd_addr = 0x2000 };
	struct vgpu_rpc_chan_enable en = { .fn = 2, .chid = 5, .enable = 1 };
	struct vgpu_rpc_runlist rl = { .fn = 2, .runlist = 0, .chans = 1ull << 5 };
	struct vgpu_rpc_fnarg fa = { .fn = 2 };

	(void)state;
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_PARTITION_SET, &pt, sizeof(pt), NULL, 0, NULL), 0);
	assert_int_equal(sh->fns[2].part_base, 8 << 20);
	assert_int_equal(sh->fns[2].part_size, 8 << 20);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_CHAN_ALLOC, &ch, sizeof(ch), NULL, 0, NULL), 0);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_CHAN_ALLOC, &ch, sizeof(ch), NULL, 0, NULL), -EEXIST);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_CHAN_BIND, &en, sizeof(en), NULL, 0, NULL), 0);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_RUNLIST_SET, &rl, sizeof(rl), NULL, 0, NULL), 0);
	assert_true(sh->fns[2].chans[5].flags & GPU_CHAN_ENABLED);
	assert_int_equal(sh->fns[2].runlist[0], 1ull << 5);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_VF_RESET, &fa, sizeof(fa), NULL, 0, NULL), 0);
	assert_false(sh->fns[2].chans[5].flags & GPU_CHAN_ALLOCATED);
	assert_int_equal(sh->fns[2].runlist[0], 0);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_PARTITION_CLEAR, &fa, sizeof(fa), NULL, 0, NULL), 0);
	assert_int_equal(sh->fns[2].part_size, 0);
}

/* A VRAM slice handed over the fd socket: the GSP maps it and scrubs it. */
static void test_slice_scrub(void **state)
{
	struct vgpu_rpc_scrub sc = { .fn = 3, .offset = 64 << 10, .size = 1 << 20 };
	struct vgpu_rpc_info info;
	uint64_t base = 48ull << 20, size = 8ull << 20;
	uint8_t *v;

	(void)state;
	assert_int_equal(gsp_call(fx.gsp, 3, VGPU_RPC_FN_SCRUB, &sc, sizeof(sc), NULL, 0, NULL), -EOPNOTSUPP);
	assert_int_equal(gpu_vram_slice_map(fx.gpu, 3, base, size, -1), 0);
	v = gpu_vram_ptr(fx.gpu, base, size);
	assert_non_null(v);
	memset(v, 0xa5, size);
	assert_int_equal(gsp_slice_send(fx.gsp, 3, gpu_vram_slice_fd(fx.gpu, 3), size), 0);
	assert_int_equal(gsp_call(fx.gsp, 3, VGPU_RPC_FN_SCRUB, &sc, sizeof(sc), NULL, 0, NULL), 0);
	assert_int_equal(v[(64 << 10) - 1], 0xa5);		/* before the range */
	assert_int_equal(v[64 << 10], 0);
	assert_int_equal(v[(64 << 10) + (1 << 20) - 1], 0);
	assert_int_equal(v[(64 << 10) + (1 << 20)], 0xa5);	/* after it */
	sc.offset = size;
	assert_int_equal(gsp_call(fx.gsp, 3, VGPU_RPC_FN_SCRUB, &sc, sizeof(sc), NULL, 0, NULL), -EINVAL);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info), NULL), 0);
	assert_int_equal(info.scrubs, 1);
	assert_int_equal(info.slices, 1);
	assert_int_equal(gsp_slice_send(fx.gsp, 3, -1, 0), 0);
	sc.offset = 0;
	assert_int_equal(gsp_call(fx.gsp, 3, VGPU_RPC_FN_SCRUB, &sc, sizeof(sc), NULL, 0, NULL), -EOPNOTSUPP);
	assert_int_equal(gsp_slice_send(fx.gsp, 9, -1, 0), -EINVAL);
	assert_int_equal(gpu_vram_slice_unmap(fx.gpu, 3), 0);
}

/* Events of a scrub held by VGPU_INJ_SCRUB_HOLD, and the scrub's own thread. */
static _Atomic unsigned int scrub_held;

static void on_scrub_event(void *ctx, const struct vgpu_rpc_event *ev)
{
	(void)ctx;
	if (ev->type == VGPU_RPC_EVT_TEST && ev->gfid == 3 && ev->data[0] == VGPU_INJ_SCRUB_HOLD)
		atomic_fetch_add(&scrub_held, 1);
}

struct scrub_arg {
	struct gsp *g;
	uint64_t size;
	int ret;
};

static void *scrub_main(void *p)
{
	struct scrub_arg *a = p;
	struct vgpu_rpc_scrub sc = { .fn = 3, .offset = 0, .size = a->size };

	a->ret = gsp_call(a->g, 3, VGPU_RPC_FN_SCRUB, &sc, sizeof(sc), NULL, 0, NULL);
	return NULL;
}

/* A scrub in progress (held just before its punch) holds no lock another lane needs:
 * GET_INFO on lane 0, which looks at every slice, is answered meanwhile (a punch under the
 * slices' lock would keep it waiting for the whole punch). */
static void test_scrub_unlocked(void **state)
{
	struct gsp_config cfg = { .event_cb = on_scrub_event };
	uint64_t base = 48ull << 20, size = 8ull << 20;
	struct scrub_arg a = { .size = size };
	struct vgpu_rpc_info info;
	struct gsp_fixture f2;
	pthread_t th;
	uint8_t *v;
	int ret;

	(void)state;
	atomic_store(&scrub_held, 0);
	assert_int_equal(gsp_fixture_up(&f2, &cfg), 0);
	assert_int_equal(gpu_vram_slice_map(f2.gpu, 3, base, size, -1), 0);
	v = gpu_vram_ptr(f2.gpu, base, size);
	assert_non_null(v);
	memset(v, 0xa5, size);
	assert_int_equal(gsp_slice_send(f2.gsp, 3, gpu_vram_slice_fd(f2.gpu, 3), size), 0);
	assert_int_equal(gsp_inject(f2.gsp, 0, VGPU_INJ_SCRUB_HOLD, 0, 3, 0), 0);
	a.g = f2.gsp;
	assert_int_equal(pthread_create(&th, NULL, scrub_main, &a), 0);
	while (!atomic_load(&scrub_held))
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	ret = gsp_call(f2.gsp, 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info), NULL);
	/* Let the scrub go on (through lane 2, whatever lane 0 is doing), then check. */
	assert_int_equal(gsp_inject(f2.gsp, 2, VGPU_INJ_CLEAR, 0, 0, 0), 0);
	pthread_join(th, NULL);
	assert_int_equal(ret, 0);
	assert_int_equal(info.scrubs, 0);	/* answered while the scrub was held */
	assert_int_equal(info.slices, 1);
	assert_int_equal(a.ret, 0);
	assert_int_equal(v[0], 0);
	assert_int_equal(v[size - 1], 0);
	assert_int_equal(gsp_call(f2.gsp, 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info),
				  NULL), 0);
	assert_int_equal(info.scrubs, 1);
	assert_int_equal(atomic_load(&scrub_held), 1);
	gsp_fixture_down(&f2);
}

struct mt_arg {
	unsigned int gfid;
	int iters, fails;
};

static void *mt_main(void *p)
{
	struct mt_arg *a = p;

	for (int i = 0; i < a->iters; i++) {
		uint64_t v[32], r[32];
		size_t got;

		for (int k = 0; k < 32; k++)
			v[k] = (uint64_t)a->gfid << 32 | (uint64_t)i << 8 | (uint64_t)k;
		if (gsp_call(fx.gsp, a->gfid, VGPU_RPC_FN_ECHO, v, sizeof(v), r, sizeof(r), &got) ||
		    got != sizeof(v) || memcmp(v, r, sizeof(v)))
			a->fails++;
	}
	return NULL;
}

/* Four threads on two lanes: replies are matched by sequence, never crossed. */
static void test_concurrent(void **state)
{
	struct mt_arg a[4] = { { 1, 300, 0 }, { 1, 300, 0 }, { 2, 300, 0 }, { 2, 300, 0 } };
	pthread_t th[4];

	(void)state;
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, mt_main, &a[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].fails, 0);
	}
}

/* Fair dispatch: a function flooding 4 KiB ECHOs next to one making 256 B ECHOs carries far
 * more than its share, so it makes RPCs at low priority while the other has one in flight
 * (counted in fair_waits) and its thread's nice is back where it was after each call;
 * alone, or with no_fair, it never does, over four times as many RPCs as the first took
 * to show it (at least 2000). Counted in RPCs, not time: a slow machine makes fewer. */
static int fair_nice0;	/* the nice the callers start with (inherited) */

struct fair_arg {
	struct gsp *g;
	unsigned int fn;
	size_t len;
	_Atomic bool *stop;
	int fails, nice_after;
};

static void *fair_main(void *p)
{
	struct fair_arg *a = p;
	uint8_t buf[4096] = { 0 };

	while (!atomic_load(a->stop))
		a->fails += gsp_call(a->g, a->fn, VGPU_RPC_FN_ECHO, buf, a->len, buf, a->len, NULL) != 0;
	a->nice_after = getpriority(PRIO_PROCESS, 0);
	return NULL;
}

/* Run the flood (and the small caller if @both) until fair_waits moves or @rpcs RPCs
 * completed (*@done: how many did). Returns how much fair_waits moved. */
static uint64_t fair_run(struct gsp *g, bool both, uint64_t rpcs, uint64_t *done)
{
	_Atomic bool stop = false;
	struct fair_arg a[2] = { { g, 2, 4096, &stop, 0, -1 }, { g, 1, 256, &stop, 0, -1 } };
	uint64_t dl = cmn_deadline_ns(60 * VGPU_NSEC_PER_SEC), before, rpcs0;	/* hang guard */
	struct gsp_stats st;
	pthread_t th[2];

	gsp_get_stats(g, &st);
	before = st.fair_waits;
	rpcs0 = st.rpcs;
	for (int i = 0; i < 1 + both; i++)
		pthread_create(&th[i], NULL, fair_main, &a[i]);
	do {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
		gsp_get_stats(g, &st);
	} while (st.fair_waits == before && st.rpcs - rpcs0 < rpcs);
	atomic_store(&stop, true);
	for (int i = 0; i < 1 + both; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].fails, 0);
		assert_int_equal(a[i].nice_after, fair_nice0);
	}
	*done = st.rpcs - rpcs0;
	return st.fair_waits - before;
}

static void test_fair_dispatch(void **state)
{
	struct gsp_config off = { .no_fair = true };
	struct gsp_fixture f2;
	struct rlimit rl;
	uint64_t took, done;

	(void)state;
	if (geteuid() != 0 && (getrlimit(RLIMIT_NICE, &rl) || rl.rlim_cur < 20))
		skip();	/* fair dispatch needs the right to restore a thread's nice */
	/* The suite may itself run niced (nice make check): the callers' own nice is the
	 * one they start with, and fair dispatch only lowers a caller below nice 19. */
	errno = 0;
	fair_nice0 = getpriority(PRIO_PROCESS, 0);
	assert_int_equal(errno, 0);
	if (fair_nice0 >= 19)
		skip();
	assert_true(fair_run(fx.gsp, true, UINT64_MAX, &took) > 0);
	took = 4 * took > 2000 ? 4 * took : 2000;
	assert_int_equal(fair_run(fx.gsp, false, took, &done), 0);
	assert_true(done >= took);
	assert_int_equal(gsp_fixture_up(&f2, &off), 0);
	assert_int_equal(fair_run(f2.gsp, true, took, &done), 0);
	assert_true(done >= took);
	gsp_fixture_down(&f2);
}

#define CASES(fn, tab) do { \
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(tab); i++) \
		t[n++] = (struct CMUnitTest){ .name = tab[i].name, .test_func = fn, \
					      .initial_state = (void *)&tab[i] }; \
	} while (0)

int main(void)
{
	/* Sized from the tables (3 per split case, the argument cases, 6 more). */
	struct CMUnitTest t[3 * VGPU_ARRAY_SIZE(split_cases) + VGPU_ARRAY_SIZE(arg_cases) + 6];
	size_t n = 0;
	static char names[3][VGPU_ARRAY_SIZE(split_cases)][64];

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(split_cases); i++) {
		snprintf(names[0][i], 64, "echo %s", split_cases[i].name);
		snprintf(names[1][i], 64, "reply %s", split_cases[i].name);
		snprintf(names[2][i], 64, "request %s", split_cases[i].name);
		t[n++] = (struct CMUnitTest){ names[0][i], test_split_echo, NULL, NULL, (void *)&split_cases[i] };
		t[n++] = (struct CMUnitTest){ names[1][i], test_split_reply, NULL, NULL, (void *)&split_cases[i] };
		t[n++] = (struct CMUnitTest){ names[2][i], test_split_request, NULL, NULL, (void *)&split_cases[i] };
	}
	CASES(test_args, arg_cases);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_reply_too_big);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_hw_programming);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_slice_scrub);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_scrub_unlocked);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_concurrent);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_fair_dispatch);
	if (n != VGPU_ARRAY_SIZE(t)) {
		fprintf(stderr, "gsp_rpc: %zu cases for a table of %zu\n", n, VGPU_ARRAY_SIZE(t));
		return 1;
	}
	return _cmocka_run_group_tests("gsp_rpc", t, n, group_up, group_down);
}
