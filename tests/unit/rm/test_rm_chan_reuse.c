// SPDX-License-Identifier: MIT
/* A channel id and channel memory handed from one RM client to another: whatever the first
 * owner's channels did (GPU work on its VRAM, a replayable fault left stalled and disabled
 * as a kernel driver cancels it, an error), the next owner's channel on the same id and the
 * same memory is clean at its first submission and runs. And a watchdog record about a
 * channel that was freed before the RM got to it recovers nothing: the channel that took
 * the id since is left alone. Through the real vgpu-gsp. */
#include <pthread.h>
#include <stdatomic.h>

#include "common/compiler.h"
#include "rm_chan_test.h"

#define T_WAIT		(30 * VGPU_NSEC_PER_SEC)	/* a hang guard only */
#define T_HOLE		(RM_T_VA + VGPU_GMMU_PAGE_2M)	/* nothing mapped: a fault */
#define T_DATA		0x100000u	/* block offset of the data the GPU fills */
#define T_DATA_LEN	(64u << 10)
#define T_SEM		0x30000u	/* block offset of the semaphores */
/* What a client clears of its 2 MiB block: its page tables only, so that the next client
 * of the same block finds whatever the last one left in the rest. */
#define T_TABLES	0x3000u

static struct rm_fixture fx;

/* The watchdog records the RM got, and a gate that holds the GSP's watchdog records
 * before the RM acts on them. */
static struct {
	pthread_mutex_t lock;
	unsigned int watchdog_events;
	struct rm_event last;
	_Atomic bool gate_closed;
	_Atomic unsigned int held;	/* watchdog records that reached the gate */
} rec = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void on_event(void *ctx, const struct rm_event *ev)
{
	(void)ctx;
	if (ev->kind != RM_EVENT_WATCHDOG)
		return;
	pthread_mutex_lock(&rec.lock);
	rec.watchdog_events++;
	rec.last = *ev;
	pthread_mutex_unlock(&rec.lock);
}

/* The GSP's record, before the RM looks at it. */
static void on_gsp_event(void *ctx, const struct vgpu_rpc_event *ev)
{
	(void)ctx;
	if (ev->type != VGPU_RPC_EVT_WATCHDOG)
		return;
	atomic_fetch_add(&rec.held, 1);
	while (atomic_load(&rec.gate_closed))
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
}

static int setup(void **state)
{
	struct gsp_config gc = { .event_cb = on_gsp_event };
	struct rm_config c = { .event = on_event, .gsp = &gc };

	(void)state;
	rec.watchdog_events = 0;
	atomic_store(&rec.held, 0);
	atomic_store(&rec.gate_closed, false);
	return rm_fixture_up(&fx, &c);
}

static int teardown(void **state)
{
	(void)state;
	atomic_store(&rec.gate_closed, false);
	rm_fixture_down(&fx);
	return 0;
}

static void chan_enable(struct rm_t_guest *cl, struct rm_t_chan *c, bool on)
{
	struct vgpu_rm_enable_params en = { .enable = on };
	size_t len = sizeof(en);

	assert_int_equal(rm_control(fx.rm, 1, cl->hc, c->h, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len,
				    sizeof(en)), 0);
}

static uint32_t userd_get(const struct rm_t_chan *c)
{
	return __atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE);
}

/* Wait until GP_GET reaches @want or the channel errors; the error (0: none). */
static uint32_t chan_wait(const struct rm_t_chan *c, uint32_t want)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (userd_get(c) != want && !rm_t_userd_error(c)) {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
	return rm_t_userd_error(c);
}

static void m_fill(struct rm_t_chan *c, uint64_t va, uint32_t len, uint32_t v)
{
	const uint32_t a[] = { (uint32_t)va, (uint32_t)(va >> 32), len, 0, v };

	rm_t_chan_method(c, VGPU_M_FILL, a, VGPU_ARRAY_SIZE(a));
}

static void m_release(struct rm_t_chan *c, uint64_t va, uint32_t v)
{
	const uint32_t a[] = { (uint32_t)va, (uint32_t)(va >> 32), v, 0, 0 };

	rm_t_chan_method(c, VGPU_M_SEM_RELEASE, a, VGPU_ARRAY_SIZE(a));
}

static uint32_t sem_read(const struct rm_t_guest *cl, uint32_t off)
{
	return __atomic_load_n((const uint32_t *)(cl->host + off), __ATOMIC_ACQUIRE);
}

/* What the device says of channel @chid of function 1. */
static struct gpu_chan_status chan_status(uint32_t chid)
{
	struct gpu_chan_status st;

	assert_int_equal(gpu_chan_status(fx.gpu, 1, chid, &st), 0);
	return st;
}

/* Wait until the device shows channel @chid in @state. */
static void wait_state(uint32_t chid, enum gpu_chan_state state)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (chan_status(chid).state != state) {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
}

/* The first client does what the guest suite's kernel address space does on its channels
 * (a FILL of its VRAM through a replayable channel; a replayable fault on another that is
 * disabled and left stalled, as the kernel driver cancels it; a third channel that errors),
 * then frees everything. The second client gets the same block and the same ids: each of its
 * channels on them shows no error and is idle before its first submission, and runs it. */
static void test_reuse_after_fill_fault_error(void **state)
{
	struct rm_t_guest a, b;
	struct rm_t_chan worker, faulted, errored, n[3];
	uint32_t ids[3];
	uint64_t pa;

	(void)state;
	rm_t_guest_up(&fx, &a, 1, T_TABLES);
	rm_t_chan_up(&fx, &a, &worker, 0, a.hv, VGPU_RM_CHAN_REPLAYABLE);
	rm_t_chan_up(&fx, &a, &faulted, 1, a.hv, VGPU_RM_CHAN_REPLAYABLE);
	rm_t_chan_up(&fx, &a, &errored, 2, a.hv, 0);
	m_fill(&worker, RM_T_VA + T_DATA, T_DATA_LEN, 0x5a5a5a5au);
	rm_t_chan_submit(&fx, &a, &worker);
	assert_int_equal(chan_wait(&worker, 1), 0);
	assert_int_equal(*(uint32_t *)(a.host + T_DATA + T_DATA_LEN - 4), 0x5a5a5a5au);
	m_fill(&faulted, T_HOLE, 4096, 1);
	rm_t_chan_submit(&fx, &a, &faulted);
	wait_state(faulted.chid, GPU_CHAN_STATE_FAULTED);
	chan_enable(&a, &faulted, false);	/* cancelled: disabled, never replayed */
	m_fill(&errored, T_HOLE, 4096, 1);
	rm_t_chan_submit(&fx, &a, &errored);
	assert_int_equal(chan_wait(&errored, 1), VGPU_CHAN_ERR_MMU_FAULT);
	ids[0] = worker.chid;
	ids[1] = faulted.chid;
	ids[2] = errored.chid;
	pa = a.pa;
	assert_int_equal(rm_client_free(fx.rm, 1, a.hc), 0);

	rm_t_guest_up(&fx, &b, 1, T_TABLES);
	assert_int_equal(b.pa, pa);	/* the same VRAM, the FILL's words still in it */
	assert_int_equal(*(uint32_t *)(b.host + T_DATA), 0x5a5a5a5au);
	for (uint32_t k = 0; k < 3; k++) {
		rm_t_chan_up(&fx, &b, &n[k], k, b.hv, k == 2 ? 0 : VGPU_RM_CHAN_REPLAYABLE);
		assert_int_equal(n[k].chid, ids[k]);
		assert_int_equal(rm_t_userd_error(&n[k]), 0);
		assert_int_equal(chan_status(n[k].chid).state, GPU_CHAN_STATE_IDLE);
		assert_int_equal(chan_status(n[k].chid).error, VGPU_CHAN_OK);
	}
	/* A replay now (the first client's stalled fault is long gone) resumes nothing. */
	assert_int_equal(rm_control(fx.rm, 1, b.hc, b.hs, VGPU_RM_CTRL_FAULT_REPLAY, NULL,
				    &(size_t){ 0 }, 0), 0);
	for (uint32_t k = 0; k < 3; k++) {
		m_release(&n[k], RM_T_VA + T_SEM + k * 16, 10 + k);
		rm_t_chan_submit(&fx, &b, &n[k]);
	}
	for (uint32_t k = 0; k < 3; k++) {
		assert_int_equal(chan_wait(&n[k], 1), 0);
		assert_int_equal(sem_read(&b, T_SEM + k * 16), 10 + k);
	}
	assert_int_equal(rm_client_free(fx.rm, 1, b.hc), 0);
}

/* A channel stuck in a long semaphore acquire is reported hung; its record is held before
 * the RM acts on it while the owner frees the channel and another client's channel takes
 * its id. Once the record goes through, the RM reports it recovered nothing: the new channel
 * is still enabled, shows no error and runs work. */
static void test_watchdog_record_of_freed_channel(void **state)
{
	const uint64_t wd = 50 * VGPU_NSEC_PER_MSEC, sem = RM_T_VA + T_SEM;
	const uint32_t acq[] = { (uint32_t)sem, (uint32_t)(sem >> 32), 1, 0, 0, 60000000 };
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rpc_wd_state st;
	struct rm_t_guest a, b;
	struct rm_t_chan hung, next;
	uint64_t dl;

	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	rm_t_guest_up(&fx, &a, 1, T_TABLES);
	rm_t_chan_up(&fx, &a, &hung, 0, a.hv, 0);
	rm_t_wd_tick(&fx, hung.chid, 0);			/* the test clock from here on */
	rm_t_chan_method(&hung, VGPU_M_SEM_ACQUIRE, acq, VGPU_ARRAY_SIZE(acq));
	rm_t_chan_submit(&fx, &a, &hung);
	dl = cmn_deadline_ns(T_WAIT);
	do {
		st = rm_t_wd_tick(&fx, hung.chid, 0);
		assert_false(cmn_deadline_passed(dl));
	} while (!st.stalled);
	atomic_store(&rec.gate_closed, true);
	st = rm_t_wd_tick(&fx, hung.chid, wd);
	assert_true(st.fired);
	dl = cmn_deadline_ns(T_WAIT);
	while (!atomic_load(&rec.held)) {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	/* The record waits; the channel goes and its id is another client's. */
	assert_int_equal(rm_free(fx.rm, 1, a.hc, hung.h), 0);
	rm_t_guest_up(&fx, &b, 1, T_TABLES);
	rm_t_chan_up(&fx, &b, &next, 1, b.hv, 0);
	assert_int_equal(next.chid, hung.chid);
	atomic_store(&rec.gate_closed, false);
	dl = cmn_deadline_ns(T_WAIT);
	for (;;) {
		pthread_mutex_lock(&rec.lock);
		unsigned int n = rec.watchdog_events;
		struct rm_event e = rec.last;

		pthread_mutex_unlock(&rec.lock);
		if (n) {
			assert_int_equal(n, 1);
			assert_int_equal(e.chid, next.chid);
			assert_int_equal(e.recovery, -ENOENT);
			break;
		}
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	assert_true(sh->fns[1].chans[next.chid].flags & GPU_CHAN_ENABLED);
	assert_int_equal(rm_t_userd_error(&next), 0);
	m_release(&next, RM_T_VA + T_SEM + 64, 5);
	rm_t_chan_submit(&fx, &b, &next);
	assert_int_equal(chan_wait(&next, 1), 0);
	assert_int_equal(sem_read(&b, T_SEM + 64), 5);
	assert_int_equal(rm_client_free(fx.rm, 1, b.hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, a.hc), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reuse_after_fill_fault_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_record_of_freed_channel, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
