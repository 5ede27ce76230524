// SPDX-License-Identifier: MIT
/* Fault scenarios F1-F6, F8, F9 of doc/scenarios.md (F7 is in test_gsp_rpc) against the
 * real vgpu-gsp process, each with a fresh GSP and each ending in a working device whose
 * hardware state was replayed after any reset. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "gsp_test.h"

#define MS VGPU_NSEC_PER_MSEC

static struct gsp_fixture fx;
static _Atomic uint64_t test_events;
static _Atomic int handler_rpc = 1;
static _Atomic int handler_rpc_armed;
static pthread_t handler_thread;

static void on_event(void *ctx, const struct vgpu_rpc_event *ev)
{
	struct vgpu_rpc_info info;

	(void)ctx;
	if (ev->type != VGPU_RPC_EVT_TEST)
		return;
	atomic_fetch_add(&test_events, 1);
	/* Scenario 9: a handler that needs an RPC runs it on the event worker, which is never
	 * inside anyone's RPC wait, so there is no recursion to forbid. */
	if (atomic_exchange(&handler_rpc_armed, 0)) {
		handler_thread = pthread_self();
		atomic_store(&handler_rpc, gsp_call(fx.gsp, 0, VGPU_RPC_FN_GET_INFO, NULL, 0,
						    &info, sizeof(info), NULL));
	}
}

/* Replay after a device reset: the partition the test set, from the "RM's records". */
static int replay(void *ctx, struct gsp *g)
{
	struct vgpu_rpc_partition pt = { .fn = 1, .base = 16 << 20, .size = 8 << 20 };

	(void)ctx;
	return gsp_call(g, 0, VGPU_RPC_FN_PARTITION_SET, &pt, sizeof(pt), NULL, 0, NULL);
}

static int setup_cfg(struct gsp_config *c)
{
	struct vgpu_rpc_partition pt = { .fn = 1, .base = 16 << 20, .size = 8 << 20 };

	atomic_store(&test_events, 0);
	c->event_cb = on_event;
	c->reset_cb = replay;
	c->deadline_ns[GSP_CLASS_FAST] = c->deadline_ns[GSP_CLASS_FAST] ? : 300 * MS;
	c->deadline_ns[GSP_CLASS_ALLOC] = 1000 * MS;
	c->deadline_ns[GSP_CLASS_SLOW] = 2000 * MS;
	c->slow_ns = 50 * MS;
	if (gsp_fixture_up(&fx, c))
		return -1;
	return gsp_call(fx.gsp, 0, VGPU_RPC_FN_PARTITION_SET, &pt, sizeof(pt), NULL, 0, NULL);
}

static int setup(void **state)
{
	struct gsp_config c = { 0 };

	(void)state;
	return setup_cfg(&c);
}

static int setup_manual_reset(void **state)
{
	struct gsp_config c = { .no_auto_reset = true };

	(void)state;
	return setup_cfg(&c);
}

static int setup_small_queue(void **state)
{
	struct gsp_config c = { .queue_elems = 16, .send_wait_ns = 50 * MS,
				.deadline_ns = { [GSP_CLASS_FAST] = 2000 * MS } };

	(void)state;
	return setup_cfg(&c);
}

/* What the GSP holds at rest: nothing in flight on any function's lane, and in the
 * hardware only the partition the fixture set (no channel, runlist or other partition). */
static bool at_baseline(void)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	bool ok = true;

	for (unsigned int fn = 0; fn < fx.cfg.nr_fns; fn++) {
		const struct gpu_priv_fn *f = &sh->fns[fn];

		if (gsp_inflight(fx.gsp, fn)) {
			print_error("fn %u: %u RPCs still in flight\n", fn, gsp_inflight(fx.gsp, fn));
			ok = false;
		}
		if (f->part_size != (fn == 1 ? 8u << 20 : 0) ||
		    f->part_base != (fn == 1 ? 16u << 20 : 0)) {
			print_error("fn %u: partition %#llx+%#llx\n", fn,
				    (unsigned long long)f->part_base, (unsigned long long)f->part_size);
			ok = false;
		}
		for (unsigned int e = 0; e < GPU_MAX_ENGINES; e++)
			ok &= f->runlist[e] == 0;
		for (unsigned int c = 0; c < GPU_FN_MAX_CHANNELS; c++)
			ok &= !(f->chans[c].flags & GPU_CHAN_ALLOCATED);
	}
	return ok;
}

/* Every scenario ends here: the device answers, holds the state the RM replays, and
 * every resource (in-flight RPCs, hardware objects) is back at its baseline. */
static int teardown(void **state)
{
	uint64_t v[4] = { 1, 2, 3, 4 }, r[4];
	size_t got;
	int ok;

	(void)state;
	ok = gsp_wait_working(fx.gsp, 3 * VGPU_NSEC_PER_SEC) == 0 &&
	     gsp_inject(fx.gsp, 0, VGPU_INJ_CLEAR, 0, 0, 0) == 0 &&
	     gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, v, sizeof(v), r, sizeof(r), &got) == 0 &&
	     got == sizeof(v) && !memcmp(v, r, sizeof(v)) && at_baseline();
	gsp_fixture_down(&fx);
	return ok ? 0 : -1;
}

static struct gsp_stats stats(void)
{
	struct gsp_stats s;

	gsp_get_stats(fx.gsp, &s);
	return s;
}

/* 1: hang. Deadlines hit and are classed "unresponsive"; the third strike marks the device;
 * calls fail fast; the reset brings it back. */
static void test_hang(void **state)
{
	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_HANG, 0, 0, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL), -ETIMEDOUT);
	assert_int_equal(stats().timeouts, 3);
	assert_true(stats().hung_class >= 1);
	assert_true(gsp_needs_reset(fx.gsp));
	assert_int_equal(gsp_call(fx.gsp, 2, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL), -ENOTRECOVERABLE);
	assert_int_equal(gsp_reset(fx.gsp), 0);
	assert_int_equal(stats().resets, 1);
}

struct bg {
	unsigned int gfid;
	uint32_t fn;
	size_t len;
	int ret;
	_Atomic int done;
};

static void *bg_main(void *p)
{
	struct bg *b = p;
	uint8_t *buf = calloc(1, b->len + 1);

	b->ret = gsp_call(fx.gsp, b->gfid, b->fn, buf, b->len, buf, b->len, NULL);
	atomic_store(&b->done, 1);
	free(buf);
	return NULL;
}

/* 2: slow GSP for VF 1. No false timeout below the deadline, counted as slow, and VF 2's
 * RPCs complete while VF 1's is still being served. */
static void test_slow(void **state)
{
	struct bg b = { .gfid = 1, .fn = VGPU_RPC_FN_PARTITION_SET };
	struct vgpu_rpc_partition pt = { .fn = 1, .base = 16 << 20, .size = 8 << 20 };
	pthread_t th;
	int others = 0;

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_SLOW, 0, 1, 300 * MS), 0);
	b.len = sizeof(pt);	/* a zeroed partition record: clears the PF's (empty) one */
	pthread_create(&th, NULL, bg_main, &b);
	while (!atomic_load(&b.done) && others < 20)
		if (gsp_call(fx.gsp, 2, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL) == 0)
			others++;
	assert_int_equal(others, 20);
	pthread_join(th, NULL);
	assert_int_equal(b.ret, 0);
	assert_int_equal(stats().timeouts, 0);
	assert_true(stats().slow >= 1);
}

/* 3: late reply. The stale reply is dropped by sequence; the next RPC gets its own. */
static void test_late(void **state)
{
	uint64_t v = 0x1234, r = 0;
	size_t got;

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_LATE, 1, 0, 700 * MS), 0);
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL), -ETIMEDOUT);
	assert_int_equal(gsp_call_deadline(fx.gsp, 1, VGPU_RPC_FN_ECHO, &v, sizeof(v), &r, sizeof(r),
					   &got, 2000 * MS), 0);
	assert_int_equal(r, 0x1234);
	assert_int_equal(stats().late_replies, 1);
	assert_false(gsp_needs_reset(fx.gsp));
}

/* 4: crash mid-reply. Half a message is published and the GSP dies: the waiter gets an
 * error, the device is reset and replayed. */
static void test_crash_mid_reply(void **state)
{
	uint8_t buf[16384] = { 1 };
	int ret;

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_CRASH_MID_REPLY, 1, 0, 0), 0);
	ret = gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, buf, sizeof(buf), buf, sizeof(buf), NULL);
	assert_true(ret == -EIO || ret == -ENOTRECOVERABLE);
	assert_int_equal(gsp_wait_working(fx.gsp, 3 * VGPU_NSEC_PER_SEC), 0);
	assert_int_equal(stats().resets, 1);
}

/* 5: corruption. Checksum, length and sequence checks catch it; a replayed old message is
 * skipped and the RPC still succeeds. */
static const struct corrupt_case {
	const char *name;
	uint32_t mode;
	int want;
} corrupt_cases[] = {
	{ "corrupt payload bit", VGPU_CORRUPT_PAYLOAD, -ETIMEDOUT },
	{ "corrupt length", VGPU_CORRUPT_LENGTH, -ETIMEDOUT },
	{ "corrupt transport seq", VGPU_CORRUPT_SEQ, 0 },	/* counted, resynchronised, delivered */
	{ "replayed old message", VGPU_CORRUPT_REPLAY, 0 },
};

static void test_corrupt(void **state)
{
	const struct corrupt_case *c = *state;
	uint64_t v[8] = { 9, 8, 7 }, r[8];
	size_t got;

	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_CORRUPT, 1, 0, c->mode), 0);
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, v, sizeof(v), r, sizeof(r), &got), c->want);
	/* The next call drains whatever the fault left behind, then gets its own reply. */
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, v, sizeof(v), r, sizeof(r), &got), 0);
	assert_memory_equal(v, r, sizeof(v));
	if (c->mode == VGPU_CORRUPT_REPLAY)
		assert_int_equal(stats().stale_msgs, 1);
	else
		assert_true(stats().bad_msgs >= 1);
	assert_false(gsp_needs_reset(fx.gsp));
}

/* 5, continued: a wild status counter cannot be resynchronised on: the device is reset.
 * The GSP publishes the wild counter with the reply, so the call never gets its reply: the
 * reset cancels it (-EIO); once the GSP is back the same call works. */
static void test_corrupt_counter(void **state)
{
	uint64_t v = 3, r = 0;
	size_t got = 0;

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_CORRUPT, 1, 0, VGPU_CORRUPT_COUNTER), 0);
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, &v, sizeof(v), &r, sizeof(r), &got),
			 -EIO);
	assert_int_equal(got, 0);
	assert_true(stats().bad_msgs >= 1);
	assert_int_equal(gsp_wait_working(fx.gsp, 3 * VGPU_NSEC_PER_SEC), 0);
	assert_int_equal(stats().resets, 1);
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, &v, sizeof(v), &r, sizeof(r), &got), 0);
	assert_int_equal(got, sizeof(v));
	assert_int_equal(r, v);
	assert_int_equal(stats().resets, 1);
}

/* 6: queue full. The consumer stalls until told to go on: a bounded wait, then EAGAIN with
 * nothing sent; the RPCs already queued get their replies (their space was reserved). */
static void test_queue_full(void **state)
{
	struct bg a = { .gfid = 1, .fn = VGPU_RPC_FN_ECHO, .len = 60000 };
	struct bg b = { .gfid = 1, .fn = VGPU_RPC_FN_ECHO, .len = 256 };
	uint8_t buf[256];
	pthread_t ta, tb;

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 2, VGPU_INJ_STALL, 1, 0, VGPU_INJ_UNTIL_CLEAR), 0);
	/* 15 + 1 elements of reply space fill the 16-element lane. */
	pthread_create(&ta, NULL, bg_main, &a);
	pthread_create(&tb, NULL, bg_main, &b);
	while (gsp_inflight(fx.gsp, 1) < 2)
		cmn_sleep_ns(MS);
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, buf, sizeof(buf), buf, sizeof(buf), NULL),
			 -EAGAIN);
	assert_int_equal(stats().queue_full, 1);
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_CLEAR, 0, 0, 0), 0);	/* lane 1 reads on */
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(a.ret, 0);
	assert_int_equal(b.ret, 0);
}

/* 8: event storm while RPCs are pending: they complete, events keep flowing. */
static void test_event_storm(void **state)
{
	uint64_t v = 5, r;
	struct gsp_stats s;

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_EVENT_STORM, 0, 1, 10000), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_ECHO, &v, sizeof(v), &r, sizeof(r), NULL), 0);
	do {
		cmn_sleep_ns(MS);
		s = stats();
	} while (atomic_load(&test_events) + s.events_dropped < 10000);
	assert_int_equal(atomic_load(&test_events) + s.events_dropped, 10000);
	assert_true(atomic_load(&test_events) > 0);
}

/* 9: an event handler that needs an RPC gets it, on the event worker, not inline. */
static void test_event_handler_rpc(void **state)
{
	(void)state;
	atomic_store(&handler_rpc, 1);
	atomic_store(&handler_rpc_armed, 1);
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_EVENT_STORM, 0, 1, 1), 0);
	while (atomic_load(&handler_rpc) == 1)
		cmn_sleep_ns(MS);
	assert_int_equal(atomic_load(&handler_rpc), 0);
	assert_false(pthread_equal(handler_thread, pthread_self()));
}

/* Crash outright: the watchdog reaps, restarts and replays without anyone asking. */
static void test_crash(void **state)
{
	int pid = gsp_pid(fx.gsp);

	(void)state;
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_CRASH, 0, 0, 0), -EIO);
	assert_int_equal(gsp_wait_working(fx.gsp, 3 * VGPU_NSEC_PER_SEC), 0);
	assert_int_not_equal(gsp_pid(fx.gsp), pid);
	assert_int_equal(stats().resets, 1);
}

int main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test_setup_teardown(test_hang, setup_manual_reset, teardown),
		cmocka_unit_test_setup_teardown(test_slow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_late, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_mid_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_full, setup_small_queue, teardown),
		cmocka_unit_test_setup_teardown(test_event_storm, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_handler_rpc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_counter, setup, teardown),
	};
	/* Sized and counted from the tables, so no case is overwritten or left out. */
	struct CMUnitTest t[VGPU_ARRAY_SIZE(fixed) + VGPU_ARRAY_SIZE(corrupt_cases)];
	size_t n = VGPU_ARRAY_SIZE(fixed);

	memcpy(t, fixed, sizeof(fixed));
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(corrupt_cases); i++)
		t[n++] = (struct CMUnitTest){ corrupt_cases[i].name, test_corrupt, setup, teardown,
					      (void *)&corrupt_cases[i] };
	return _cmocka_run_group_tests("gsp_faults", t, n, NULL, NULL);
}
