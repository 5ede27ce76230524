// SPDX-License-Identifier: MIT
/* A channel id and channel memory handed from one RM client to another: whatever the first
 * owner's channels did (GPU work on its VRAM, a replayable fault left stalled and disabled
 * as a kernel driver cancels it, an error), the next owner's channel on the same id and the
 * same memory is clean at its first submission and runs. And a watchdog record about a
 * channel that was freed before the RM got to it recovers nothing: the channel that took
 * the id since is left alone. Through the real vgpu-gsp. */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <vgpu/gmmu.h>

#include "common/compiler.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

#define T_VA		0x40000000ull	/* a 2 MiB page mapped onto the client's block */
#define T_WAIT		(30 * VGPU_NSEC_PER_SEC)	/* a hang guard only */
#define T_HOLE		(T_VA + VGPU_GMMU_PAGE_2M)	/* nothing mapped: a fault */
#define T_DATA		0x100000u	/* block offset of the data the GPU fills */
#define T_DATA_LEN	(64u << 10)
#define T_SEM		0x30000u	/* block offset of the semaphores */

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

/* One RM client of function 1: a 2 MiB VRAM block mapped at T_VA (its page tables in the
 * first pages), a VA space over it. */
struct client {
	uint32_t hc, hd, hs, hv, hmem;
	uint64_t pa;
	uint8_t *host;
};

static void client_up(struct client *cl)
{
	struct vgpu_rm_vidmem_params mp = { .size = VGPU_GMMU_PAGE_2M,
					    .page_size = VGPU_GMMU_PAGE_2M,
					    .flags = VGPU_RM_MEM_CONTIGUOUS };
	struct vgpu_rm_vaspace_params vp;
	uint64_t *l0, *l1, *l2;

	memset(cl, 0, sizeof(*cl));
	assert_int_equal(rm_t_client(fx.rm, 1, &cl->hc, &cl->hd, &cl->hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, cl->hc, cl->hd, &cl->hmem,
				  VGPU_RM_CLASS_MEMORY_VIDMEM, &mp, sizeof(mp)), 0);
	cl->pa = mp.addr;
	cl->host = gpu_fn_vram_ptr(fx.gpu, 1, cl->pa, VGPU_GMMU_PAGE_2M);
	assert_non_null(cl->host);
	/* Only the tables are cleared: the rest keeps whatever the block held before. */
	memset(cl->host, 0, 0x3000);
	l0 = (uint64_t *)cl->host;
	l1 = (uint64_t *)(cl->host + 0x1000);
	l2 = (uint64_t *)(cl->host + 0x2000);
	l0[(T_VA >> VGPU_GMMU_L0_SHIFT) & 511] = vgpu_gmmu_pde(cl->pa + 0x1000);
	l1[(T_VA >> VGPU_GMMU_L1_SHIFT) & 511] = vgpu_gmmu_pde(cl->pa + 0x2000);
	l2[(T_VA >> VGPU_GMMU_L2_SHIFT) & 511] = vgpu_gmmu_pte2m(cl->pa, 0);
	vp = (struct vgpu_rm_vaspace_params){ .pdb = cl->pa };
	assert_int_equal(rm_alloc(fx.rm, 1, cl->hc, cl->hd, &cl->hv, VGPU_RM_CLASS_VASPACE, &vp,
				  sizeof(vp)), 0);
}

/* A channel in slot @k of the client's block: USERD at +0x3000 + k * 128, GPFIFO at
 * +0x40000 + k * 4K, pushbuffer at +0x80000 + k * 4K. */
struct chan {
	uint32_t h, chid, k, put, pb_off;
	uint64_t *gp;
	uint32_t *pb;
	struct vgpu_userd *userd;
};

/* Made as a guest driver makes one: its USERD and GPFIFO cleared first, then allocated
 * and enabled. */
static void chan_up(struct client *cl, struct chan *c, uint32_t k, uint32_t flags)
{
	struct vgpu_rm_channel_params p = {
		.h_vaspace = cl->hv, .gpfifo_va = T_VA + 0x40000 + k * 0x1000ull,
		.gpfifo_entries = 64, .flags = flags, .userd_aper = VGPU_APER_VRAM,
		.userd_addr = cl->pa + 0x3000 + k * 128ull,
	};
	struct vgpu_rm_enable_params en = { .enable = 1 };
	size_t len = sizeof(en);

	memset(c, 0, sizeof(*c));
	c->k = k;
	c->gp = (uint64_t *)(cl->host + 0x40000 + k * 0x1000);
	c->pb = (uint32_t *)(cl->host + 0x80000 + k * 0x1000);
	c->userd = (struct vgpu_userd *)(cl->host + 0x3000 + k * 128);
	memset(c->userd, 0, sizeof(*c->userd));
	memset(c->gp, 0, 0x1000);
	assert_int_equal(rm_alloc(fx.rm, 1, cl->hc, cl->hd, &c->h, VGPU_RM_CLASS_CHANNEL_GPFIFO,
				  &p, sizeof(p)), 0);
	c->chid = p.chid;
	assert_int_equal(rm_control(fx.rm, 1, cl->hc, c->h, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len,
				    sizeof(en)), 0);
}

static void chan_enable(struct client *cl, struct chan *c, bool on)
{
	struct vgpu_rm_enable_params en = { .enable = on };
	size_t len = sizeof(en);

	assert_int_equal(rm_control(fx.rm, 1, cl->hc, c->h, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len,
				    sizeof(en)), 0);
}

static void chan_method(struct chan *c, uint32_t id, const uint32_t *args, uint32_t n)
{
	uint32_t start = c->pb_off;

	c->pb[c->pb_off++] = VGPU_MTHD(id, n);
	for (uint32_t i = 0; i < n; i++)
		c->pb[c->pb_off++] = args[i];
	c->gp[c->put++] = vgpu_gp_entry(T_VA + 0x80000 + c->k * 0x1000ull + start * 4ull, n + 1);
}

static void chan_submit(struct client *cl, struct chan *c)
{
	struct vgpu_rm_submit_params sp = { .gp_put = c->put };
	size_t len = sizeof(sp);

	assert_int_equal(rm_control(fx.rm, 1, cl->hc, c->h, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len,
				    sizeof(sp)), 0);
}

static uint32_t userd_error(const struct chan *c)
{
	return __atomic_load_n(&c->userd->error, __ATOMIC_ACQUIRE);
}

static uint32_t userd_get(const struct chan *c)
{
	return __atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE);
}

/* Wait until GP_GET reaches @want or the channel errors; the error (0: none). */
static uint32_t chan_wait(const struct chan *c, uint32_t want)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (userd_get(c) != want && !userd_error(c)) {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
	return userd_error(c);
}

static void m_fill(struct chan *c, uint64_t va, uint32_t len, uint32_t v)
{
	const uint32_t a[] = { (uint32_t)va, (uint32_t)(va >> 32), len, 0, v };

	chan_method(c, VGPU_M_FILL, a, VGPU_ARRAY_SIZE(a));
}

static void m_release(struct chan *c, uint64_t va, uint32_t v)
{
	const uint32_t a[] = { (uint32_t)va, (uint32_t)(va >> 32), v, 0, 0 };

	chan_method(c, VGPU_M_SEM_RELEASE, a, VGPU_ARRAY_SIZE(a));
}

static uint32_t sem_read(const struct client *cl, uint32_t off)
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
	struct client a, b;
	struct chan worker, faulted, errored, n[3];
	uint32_t ids[3];
	uint64_t pa;

	(void)state;
	client_up(&a);
	chan_up(&a, &worker, 0, VGPU_RM_CHAN_REPLAYABLE);
	chan_up(&a, &faulted, 1, VGPU_RM_CHAN_REPLAYABLE);
	chan_up(&a, &errored, 2, 0);
	m_fill(&worker, T_VA + T_DATA, T_DATA_LEN, 0x5a5a5a5au);
	chan_submit(&a, &worker);
	assert_int_equal(chan_wait(&worker, 1), 0);
	assert_int_equal(*(uint32_t *)(a.host + T_DATA + T_DATA_LEN - 4), 0x5a5a5a5au);
	m_fill(&faulted, T_HOLE, 4096, 1);
	chan_submit(&a, &faulted);
	wait_state(faulted.chid, GPU_CHAN_STATE_FAULTED);
	chan_enable(&a, &faulted, false);	/* cancelled: disabled, never replayed */
	m_fill(&errored, T_HOLE, 4096, 1);
	chan_submit(&a, &errored);
	assert_int_equal(chan_wait(&errored, 1), VGPU_CHAN_ERR_MMU_FAULT);
	ids[0] = worker.chid;
	ids[1] = faulted.chid;
	ids[2] = errored.chid;
	pa = a.pa;
	assert_int_equal(rm_client_free(fx.rm, 1, a.hc), 0);

	client_up(&b);
	assert_int_equal(b.pa, pa);	/* the same VRAM, the FILL's words still in it */
	assert_int_equal(*(uint32_t *)(b.host + T_DATA), 0x5a5a5a5au);
	for (uint32_t k = 0; k < 3; k++) {
		chan_up(&b, &n[k], k, k == 2 ? 0 : VGPU_RM_CHAN_REPLAYABLE);
		assert_int_equal(n[k].chid, ids[k]);
		assert_int_equal(userd_error(&n[k]), 0);
		assert_int_equal(chan_status(n[k].chid).state, GPU_CHAN_STATE_IDLE);
		assert_int_equal(chan_status(n[k].chid).error, VGPU_CHAN_OK);
	}
	/* A replay now (the first client's stalled fault is long gone) resumes nothing. */
	assert_int_equal(rm_control(fx.rm, 1, b.hc, b.hs, VGPU_RM_CTRL_FAULT_REPLAY, NULL,
				    &(size_t){ 0 }, 0), 0);
	for (uint32_t k = 0; k < 3; k++) {
		m_release(&n[k], T_VA + T_SEM + k * 16, 10 + k);
		chan_submit(&b, &n[k]);
	}
	for (uint32_t k = 0; k < 3; k++) {
		assert_int_equal(chan_wait(&n[k], 1), 0);
		assert_int_equal(sem_read(&b, T_SEM + k * 16), 10 + k);
	}
	assert_int_equal(rm_client_free(fx.rm, 1, b.hc), 0);
}

/* One watchdog pass of the GSP's test clock, advanced by @advance_ns first. */
static struct vgpu_rpc_wd_state wd_tick(uint32_t chid, uint64_t advance_ns)
{
	struct vgpu_rpc_wd_tick t = { .fn = 1, .ch = chid, .advance_ns = advance_ns };
	struct vgpu_rpc_wd_state st;
	size_t len = 0;

	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_WD_TICK, &t, sizeof(t), &st,
				  sizeof(st), &len), 0);
	assert_int_equal(len, sizeof(st));
	return st;
}

/* A channel stuck in a long semaphore acquire is reported hung; its record is held before
 * the RM acts on it while the owner frees the channel and another client's channel takes
 * its id. Once the record goes through, the RM reports it recovered nothing: the new channel
 * is still enabled, shows no error and runs work. */
static void test_watchdog_record_of_freed_channel(void **state)
{
	const uint64_t wd = 50 * VGPU_NSEC_PER_MSEC, sem = T_VA + T_SEM;
	const uint32_t acq[] = { (uint32_t)sem, (uint32_t)(sem >> 32), 1, 0, 0, 60000000 };
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rpc_wd_state st;
	struct client a, b;
	struct chan hung, next;
	uint64_t dl;

	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	client_up(&a);
	chan_up(&a, &hung, 0, 0);
	wd_tick(hung.chid, 0);			/* the test clock from here on */
	chan_method(&hung, VGPU_M_SEM_ACQUIRE, acq, VGPU_ARRAY_SIZE(acq));
	chan_submit(&a, &hung);
	dl = cmn_deadline_ns(T_WAIT);
	do {
		st = wd_tick(hung.chid, 0);
		assert_false(cmn_deadline_passed(dl));
	} while (!st.stalled);
	atomic_store(&rec.gate_closed, true);
	st = wd_tick(hung.chid, wd);
	assert_true(st.fired);
	dl = cmn_deadline_ns(T_WAIT);
	while (!atomic_load(&rec.held)) {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	/* The record waits; the channel goes and its id is another client's. */
	assert_int_equal(rm_free(fx.rm, 1, a.hc, hung.h), 0);
	client_up(&b);
	chan_up(&b, &next, 1, 0);
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
	assert_int_equal(userd_error(&next), 0);
	m_release(&next, T_VA + T_SEM + 64, 5);
	chan_submit(&b, &next);
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
