// SPDX-License-Identifier: MIT
/* Device events through the real vgpu-gsp: the GSP reads the device's status region and
 * posts channel errors, faults and watchdog records; the RM checks them, recovers a hung
 * channel and calls the owner's event callback. Each case: a fresh device, RM and GSP. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "common/compiler.h"
#include "common/log.h"
#include "rm/rm_internal.h"	/* the race and busy-owner cases take a client's lock */
#include "rm_chan_test.h"

#define T_WAIT		(30 * VGPU_NSEC_PER_SEC)	/* a hang guard: events come in ms */
#define T_MAX_EVENTS	1024

static struct rm_fixture fx;

/* Every event the RM handed out, in order. */
static struct {
	pthread_mutex_t lock;
	struct rm_event ev[T_MAX_EVENTS];
	unsigned int n;
	_Atomic bool gate_closed;	/* the handler blocks while set (storm case) */
} rec = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void on_event(void *ctx, const struct rm_event *ev)
{
	(void)ctx;
	pthread_mutex_lock(&rec.lock);
	if (rec.n < T_MAX_EVENTS)
		rec.ev[rec.n++] = *ev;
	pthread_mutex_unlock(&rec.lock);
	while (atomic_load(&rec.gate_closed))
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
}

/* Events of @kind for (@fn, @chid) so far; their counts summed in *@count (may be NULL). */
static unsigned int rec_find(enum rm_event_kind kind, unsigned int fn, uint32_t chid,
			     struct rm_event *last, uint64_t *count)
{
	unsigned int hits = 0;

	if (count)
		*count = 0;
	pthread_mutex_lock(&rec.lock);
	for (unsigned int i = 0; i < rec.n; i++) {
		const struct rm_event *e = &rec.ev[i];

		if (e->kind != kind || e->fn != fn || e->chid != chid)
			continue;
		hits++;
		if (last)
			*last = *e;
		if (count)
			*count += e->count;
	}
	pthread_mutex_unlock(&rec.lock);
	return hits;
}

/* Wait until an event of @kind for (@fn, @chid) arrived; 0 or -ETIMEDOUT. */
static int rec_wait(enum rm_event_kind kind, unsigned int fn, uint32_t chid, struct rm_event *out)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (!rec_find(kind, fn, chid, out, NULL)) {
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	return 0;
}

static int setup_cfg(unsigned int nr_events, bool gate_closed, const struct rm_device_ops *ops)
{
	struct gsp_config gc = { .nr_events = nr_events };
	struct rm_config c = { .event = on_event, .gsp = &gc, .ops = ops,
			       .ops_ctx = ops ? &fx.hw : NULL };

	pthread_mutex_lock(&rec.lock);
	rec.n = 0;
	pthread_mutex_unlock(&rec.lock);
	atomic_store(&rec.gate_closed, gate_closed);
	return rm_fixture_up(&fx, &c);
}

static int setup(void **state)
{
	(void)state;
	return setup_cfg(0, false, NULL);
}

/* A 16-record event queue and a handler held at its gate: the queue fills for sure. */
static int setup_storm(void **state)
{
	(void)state;
	return setup_cfg(16, true, NULL);
}

static int teardown(void **state)
{
	(void)state;
	atomic_store(&rec.gate_closed, false);
	rm_fixture_down(&fx);
	return 0;
}

static int chan_wait_get(struct rm_t_chan *c, uint32_t want)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (__atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE) != want) {
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
	return 0;
}

/* Release a 32-bit semaphore at block offset @off with @val. */
static void m_release(struct rm_t_chan *c, uint32_t off, uint32_t val)
{
	uint64_t va = RM_T_VA + off;
	const uint32_t a[] = { (uint32_t)va, (uint32_t)(va >> 32), val, 0, 0 };

	rm_t_chan_method(c, VGPU_M_SEM_RELEASE, a, VGPU_ARRAY_SIZE(a));
}

/* A GP entry the device refuses (ILLEGAL opcode): an error, no fault. */
static void m_illegal(struct rm_t_chan *c)
{
	c->gp[c->put++] = VGPU_GP_OPCODE_ILLEGAL;
}

/* Channel error: one CHAN_ERROR event with the function, channel, error code and GP_GET;
 * nothing for the other channel of the function or for another function. */
static void test_chan_error(void **state)
{
	struct rm_t_guest g, g2;
	struct rm_t_chan bad, good, other, mark1, mark2;
	struct rm_event e;

	(void)state;
	rm_t_guest_up(&fx, &g, 1, 0xc0000);
	rm_t_guest_up(&fx, &g2, 2, 0xc0000);
	rm_t_chan_up(&fx, &g, &good, 0, g.hv, 0);
	rm_t_chan_up(&fx, &g, &bad, 1, g.hv, 0);
	rm_t_chan_up(&fx, &g2, &other, 0, g2.hv, 0);
	m_release(&good, 0x30000, 1);
	m_release(&bad, 0x30040, 1);
	m_illegal(&bad);
	rm_t_chan_submit(&fx, &g, &bad);
	rm_t_chan_submit(&fx, &g, &good);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 1, bad.chid, &e), 0);
	assert_int_equal(e.code, VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(e.gp_get, 1);		/* the release ran; the second entry failed */
	assert_int_equal(e.count, 1);
	assert_int_equal(rm_t_userd_error(&bad), VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(chan_wait_get(&good, 1), 0);
	m_release(&other, 0x30080, 2);
	rm_t_chan_submit(&fx, &g2, &other);
	assert_int_equal(chan_wait_get(&other, 1), 0);
	/* a function's events arrive in order: once a later error of each function is in,
	 * none is pending for the channels that ran before */
	rm_t_chan_up(&fx, &g, &mark1, 2, g.hv, 0);
	rm_t_chan_up(&fx, &g2, &mark2, 1, g2.hv, 0);
	m_illegal(&mark1);
	m_illegal(&mark2);
	rm_t_chan_submit(&fx, &g, &mark1);
	rm_t_chan_submit(&fx, &g2, &mark2);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 1, mark1.chid, &e), 0);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 2, mark2.chid, &e), 0);
	assert_int_equal(rec_find(RM_EVENT_CHAN_ERROR, 1, good.chid, NULL, NULL), 0);
	assert_int_equal(rec_find(RM_EVENT_CHAN_ERROR, 2, other.chid, NULL, NULL), 0);
	assert_int_equal(rec_find(RM_EVENT_CHAN_ERROR, 1, bad.chid, NULL, NULL), 1);
	assert_int_equal(rm_client_free(fx.rm, 1, g.hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, g2.hc), 0);
}

/* MMU fault: a release to an unmapped VA; the fault (function, channel, VA) and the
 * channel's MMU_FAULT error both arrive. */
static void test_mmu_fault(void **state)
{
	const uint64_t va = 0x7000000000ull;
	const uint32_t a[] = { (uint32_t)va, (uint32_t)(va >> 32), 1, 0, 0 };
	struct rm_t_guest g;
	struct rm_t_chan c;
	struct rm_event e;

	(void)state;
	rm_t_guest_up(&fx, &g, 2, 0xc0000);
	rm_t_chan_up(&fx, &g, &c, 0, g.hv, 0);
	rm_t_chan_method(&c, VGPU_M_SEM_RELEASE, a, VGPU_ARRAY_SIZE(a));
	rm_t_chan_submit(&fx, &g, &c);
	assert_int_equal(rec_wait(RM_EVENT_MMU_FAULT, 2, c.chid, &e), 0);
	assert_int_equal(e.va & ~0xfffull, va);
	assert_true(e.code != 0);
	assert_int_equal(e.count, 1);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 2, c.chid, &e), 0);
	assert_int_equal(e.code, VGPU_CHAN_ERR_MMU_FAULT);
	assert_int_equal(rm_client_free(fx.rm, 2, g.hc), 0);
}

/* The watchdog runs on a test clock (WD_TICK): each case takes it at the start, so a pass
 * happens only when the case asks and time moves only by what it says. Whether a stall is
 * "slow" or "hung" is then the watchdog's own accounting, the same however long this
 * thread is held up. */

/* Passes at an unmoved clock until the record of @chid satisfies @done: the watchdog has
 * seen the device's latest change (the device runs on its own; a bounded poll). */
static struct vgpu_rpc_wd_state wd_wait(uint32_t chid, bool (*done)(const struct vgpu_rpc_wd_state *,
								  uint64_t), uint64_t arg)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);
	struct vgpu_rpc_wd_state st;

	for (;;) {
		st = rm_t_wd_tick(&fx, chid, 0);
		if (done(&st, arg))
			return st;
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
}

static bool wd_is_stalled(const struct vgpu_rpc_wd_state *st, uint64_t arg)
{
	(void)arg;
	return st->stalled;
}

static bool wd_get_is(const struct vgpu_rpc_wd_state *st, uint64_t get)
{
	return st->gp_get == get;
}

static bool wd_faults_not(const struct vgpu_rpc_wd_state *st, uint64_t faults)
{
	return st->faults != faults;
}

/* A stall the watchdog has just begun to count (@st, at an unmoved clock): one pass short
 * of @wd it is stalled that long and unreported; at @wd it is reported, the GSP's first
 * HUNG record. */
static void wd_expect_fires_at(uint32_t chid, const struct vgpu_rpc_wd_state *st, uint64_t wd)
{
	struct vgpu_rpc_wd_state a, b;

	assert_true(st->stalled);
	assert_int_equal(st->stall_ns, 0);
	a = rm_t_wd_tick(&fx, chid, wd - 1);
	assert_true(a.stalled);
	assert_int_equal(a.stall_ns, wd - 1);
	assert_false(a.fired);
	assert_int_equal(a.hung_reports, 0);
	b = rm_t_wd_tick(&fx, chid, 1);
	assert_true(b.fired);
	assert_int_equal(b.stall_ns, wd);
	assert_int_equal(b.hung_reports, 1);
}

/* Channel @c of function 1, stuck at GP 0 and just reported by the watchdog after @wd of
 * its clock: the RM disables it (off its runlist, record disabled) and stops it with an
 * error its guest sees in USERD, and the CHAN_ERROR follows; however long the clock runs
 * on, it is reported once. */
static void expect_hung_once(struct rm_t_chan *c, uint64_t wd)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct rm_event e;

	assert_int_equal(rec_wait(RM_EVENT_WATCHDOG, 1, c->chid, &e), 0);
	assert_int_equal(e.code, VGPU_RPC_WD_HUNG);
	assert_int_equal(e.recovery, 0);
	assert_int_equal(e.gp_get, 0);
	assert_int_equal(e.stall_ns, wd);
	assert_int_equal(rm_t_userd_error(c), VGPU_CHAN_ERR_SEM_TIMEOUT);
	assert_false(sh->fns[1].runlist[0] & (1ull << c->chid));
	assert_false(sh->fns[1].chans[c->chid].flags & GPU_CHAN_ENABLED);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 1, c->chid, &e), 0);
	assert_int_equal(e.code, VGPU_CHAN_ERR_SEM_TIMEOUT);
	for (int i = 0; i < 4; i++) {
		struct vgpu_rpc_wd_state st = rm_t_wd_tick(&fx, c->chid, 10 * wd);

		assert_false(st.stalled);	/* disabled: nothing it could run */
		assert_int_equal(st.hung_reports, 1);
	}
	assert_int_equal(rec_find(RM_EVENT_WATCHDOG, 1, c->chid, NULL, NULL), 1);
}

/* Watchdog: a channel stuck in a 60 s SEM_ACQUIRE with a 50 ms watchdog is reported when
 * the watchdog has counted 50 ms of stall and not a pass before, disabled through the RM's
 * path and stopped with an error (expect_hung_once); another channel of the same function
 * then runs work, and the hung one can be freed. */
static void test_watchdog_hung(void **state)
{
	const uint64_t wd = 50 * VGPU_NSEC_PER_MSEC, sem = RM_T_VA + 0x30000;
	const uint32_t acq[] = { (uint32_t)sem, (uint32_t)(sem >> 32), 1, 0, 0, 60000000 };
	struct vgpu_rpc_wd_state st;
	struct rm_t_guest g;
	struct rm_t_chan hung, next;

	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	rm_t_guest_up(&fx, &g, 1, 0xc0000);
	rm_t_chan_up(&fx, &g, &hung, 0, g.hv, 0);
	st = rm_t_wd_tick(&fx, hung.chid, 0);		/* the test clock from here on */
	assert_false(st.stalled);
	rm_t_chan_method(&hung, VGPU_M_SEM_ACQUIRE, acq, VGPU_ARRAY_SIZE(acq));
	rm_t_chan_submit(&fx, &g, &hung);
	st = wd_wait(hung.chid, wd_is_stalled, 0);
	wd_expect_fires_at(hung.chid, &st, wd);
	expect_hung_once(&hung, wd);
	/* The device keeps working. */
	rm_t_chan_up(&fx, &g, &next, 1, g.hv, 0);
	m_release(&next, 0x30100, 7);
	rm_t_chan_submit(&fx, &g, &next);
	assert_int_equal(chan_wait_get(&next, 1), 0);
	assert_int_equal(__atomic_load_n((uint32_t *)(g.host + 0x30100), __ATOMIC_ACQUIRE), 7);
	assert_int_equal(rm_free(fx.rm, 1, g.hc, hung.h), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, g.hc), 0);
}

/* Watchdog argument checks change nothing. */
static void test_watchdog_args(void **state)
{
	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 9, 0), -EINVAL);
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, VGPU_NSEC_PER_MSEC), -EINVAL);
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, 0), 0);
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, VGPU_RPC_WD_MIN_NS), 0);
}

/* Work that waits but moves is not hung: with a 600 ms watchdog, a chain of STEPS acquires
 * released one by one, each after the watchdog has counted it stalled for 599 ms, is
 * pending for (STEPS - 1) * 599 ms of the watchdog's clock in all, many timeouts, yet
 * every GP_GET move starts its count again: no report, no WATCHDOG event, no error. */
static void test_watchdog_slow_not_hung(void **state)
{
	enum { STEPS = 30 };		/* the GP ring holds 64 entries */
	const uint64_t wd = 600 * VGPU_NSEC_PER_MSEC, sem = RM_T_VA + 0x30000;
	struct vgpu_rpc_wd_state st;
	uint32_t *val;
	struct rm_t_guest g;
	struct rm_t_chan c;

	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	rm_t_guest_up(&fx, &g, 1, 0xc0000);
	val = (uint32_t *)(g.host + 0x30000);
	rm_t_chan_up(&fx, &g, &c, 0, g.hv, 0);
	rm_t_wd_tick(&fx, c.chid, 0);			/* the test clock from here on */
	for (uint32_t i = 1; i <= STEPS; i++) {
		const uint32_t acq[] = { (uint32_t)sem, (uint32_t)(sem >> 32), i, 0, 0, 30000000 };

		rm_t_chan_method(&c, VGPU_M_SEM_ACQUIRE, acq, VGPU_ARRAY_SIZE(acq));
	}
	rm_t_chan_submit(&fx, &g, &c);
	st = wd_wait(c.chid, wd_is_stalled, 0);
	for (uint32_t step = 1; step < STEPS; step++) {
		/* counted from the last move: just short of the timeout, unreported */
		assert_int_equal(st.stall_ns, 0);
		st = rm_t_wd_tick(&fx, c.chid, wd - 1);
		assert_true(st.stalled);
		assert_int_equal(st.stall_ns, wd - 1);
		assert_false(st.fired);
		assert_int_equal(st.hung_reports, 0);
		__atomic_store_n(val, step, __ATOMIC_RELEASE);
		assert_int_equal(chan_wait_get(&c, step), 0);
		st = wd_wait(c.chid, wd_get_is, step);	/* the move seen: the count restarts */
		assert_true(st.stalled);
	}
	__atomic_store_n(val, STEPS, __ATOMIC_RELEASE);
	assert_int_equal(chan_wait_get(&c, STEPS), 0);
	st = wd_wait(c.chid, wd_get_is, STEPS);
	assert_false(st.stalled);		/* all done: nothing pending */
	st = rm_t_wd_tick(&fx, c.chid, 10 * wd);
	assert_int_equal(st.hung_reports, 0);
	assert_int_equal(rec_find(RM_EVENT_WATCHDOG, 1, c.chid, NULL, NULL), 0);
	assert_int_equal(rm_t_userd_error(&c), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, g.hc), 0);
}

/* Pop @fn's next fault-buffer entry, waiting for it; 0 or -ETIMEDOUT. */
static int fault_wait(unsigned int fn, struct vgpu_fault_entry *out)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (gpu_fault_pop(fx.gpu, fn, out)) {
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	return 0;
}

/* A new fault is progress, an unserviced one is not: a replayable channel's FILL to an
 * unmapped VA stalls at GP 0 and faults again after every replay. With a 500 ms watchdog,
 * ROUNDS of "pop the fault, let the watchdog count the stall to 499 ms (the driver's
 * service, mapping nothing), FAULT_REPLAY through the RM" keep it stalled for ROUNDS *
 * 499 ms of the watchdog's clock with no report (GP_GET never moves, the fault count
 * does, and each new fault starts the count again). Once nobody services the last fault,
 * the channel is reported hung at 500 ms and recovered as in test_watchdog_hung: disabled,
 * off the runlist, SEM_TIMEOUT in USERD, the CHAN_ERROR after, one report per stall. */
static void test_watchdog_fault_progress(void **state)
{
	enum { ROUNDS = 15 };
	const uint64_t wd = 500 * VGPU_NSEC_PER_MSEC, va = 0x7000000000ull;
	const uint32_t fill[] = { (uint32_t)va, (uint32_t)(va >> 32), 0x1000, 0, 0x5a5a5a5a };
	struct vgpu_rpc_wd_state st;
	struct vgpu_fault_entry fe;
	struct rm_t_guest g;
	struct rm_t_chan c;
	size_t len = 0;

	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	rm_t_guest_up(&fx, &g, 1, 0xc0000);
	rm_t_chan_up(&fx, &g, &c, 0, g.hv, VGPU_RM_CHAN_REPLAYABLE);
	st = rm_t_wd_tick(&fx, c.chid, 0);		/* the test clock from here on */
	rm_t_chan_method(&c, VGPU_M_FILL, fill, VGPU_ARRAY_SIZE(fill));
	rm_t_chan_submit(&fx, &g, &c);
	for (unsigned int i = 0; i < ROUNDS; i++) {
		assert_int_equal(fault_wait(1, &fe), 0);
		assert_int_equal(fe.chid, c.chid);
		assert_int_equal(fe.replayable, 1);
		assert_int_equal(fe.va & ~0xfffull, va);
		st = wd_wait(c.chid, wd_faults_not, st.faults);	/* the fault seen */
		assert_true(st.stalled);
		assert_int_equal(st.stall_ns, 0);
		st = rm_t_wd_tick(&fx, c.chid, wd - 1);	/* the driver's service: no mapping */
		assert_true(st.stalled);
		assert_int_equal(st.stall_ns, wd - 1);
		assert_false(st.fired);
		assert_int_equal(st.hung_reports, 0);
		assert_int_equal(rm_control(fx.rm, 1, g.hc, g.hs, VGPU_RM_CTRL_FAULT_REPLAY, NULL,
					    &len, 0), 0);
	}
	/* The last replay faults again; still stalled at GP 0, no error, never reported. */
	assert_int_equal(fault_wait(1, &fe), 0);
	assert_int_equal(fe.chid, c.chid);
	assert_int_equal(__atomic_load_n(&c.userd->gp_get, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(rm_t_userd_error(&c), 0);
	assert_int_equal(rec_find(RM_EVENT_WATCHDOG, 1, c.chid, NULL, NULL), 0);
	assert_true(rec_find(RM_EVENT_MMU_FAULT, 1, c.chid, NULL, NULL) >= 1);
	/* Nobody services this one: hung at the timeout, and recovered. */
	st = wd_wait(c.chid, wd_faults_not, st.faults);
	wd_expect_fires_at(c.chid, &st, wd);
	expect_hung_once(&c, wd);
	assert_int_equal(gpu_fault_pop(fx.gpu, 1, &fe), -EAGAIN);	/* no fault after the stop */
	assert_int_equal(rm_free(fx.rm, 1, g.hc, c.h), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, g.hc), 0);
}

/* ---- recovery while the hung channel's id changes hands ----
 * The window: recovery has checked that the reported channel is still the allocation the
 * GSP found hung and goes on to stop it through its id. If meanwhile the owner (client A)
 * frees the channel and another client of the function (B) allocates one, B's channel
 * takes the lowest free id, the hung one's, and must not be stopped for A's hang. The
 * device op chan_quiesce, which recovery calls between disabling the channel and erroring
 * it, opens that window: it starts a thread that does the free and the allocation, and
 * goes on once that thread is done, or at once if recovery holds client A's lock (then
 * A's free waits for the recovery: the id cannot change hands inside it). */
static struct rm_device_ops race_ops;
static struct {
	_Atomic bool armed;		/* the next quiesce of chid is the recovery's */
	uint32_t chid;
	struct rm_client *owner;	/* client A (a reference held by the case) */
	struct rm_t_guest a, b;		/* the two clients' guests */
	struct rm_t_chan hung, fresh;	/* A's channel; B's, made by the racing thread */
	struct vgpu_rm_channel_params p;	/* B's channel */
	pthread_t th;
	bool started, joined;
	_Atomic bool done;
	int free_ret, alloc_ret, enable_ret;
} race;

static void *race_main(void *arg)
{
	struct vgpu_rm_enable_params en = { .enable = 1 };
	size_t len = sizeof(en);

	(void)arg;
	race.free_ret = rm_free(fx.rm, 1, race.a.hc, race.hung.h);
	race.alloc_ret = rm_alloc(fx.rm, 1, race.b.hc, race.b.hd, &race.fresh.h,
				  VGPU_RM_CLASS_CHANNEL_GPFIFO, &race.p, sizeof(race.p));
	if (!race.alloc_ret)
		race.enable_ret = rm_control(fx.rm, 1, race.b.hc, race.fresh.h,
					     VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len, sizeof(en));
	atomic_store(&race.done, true);
	return NULL;
}

static int race_quiesce(void *ctx, unsigned int fn, uint32_t chid, uint64_t timeout_ns)
{
	/* armed first: its load orders the case's writes of race before they are read */
	if (atomic_load(&race.armed) && fn == 1 && chid == race.chid &&
	    atomic_exchange(&race.armed, false)) {
		uint64_t dl = cmn_deadline_ns(T_WAIT);

		race.started = !pthread_create(&race.th, NULL, race_main, NULL);
		while (race.started && !atomic_load(&race.done) &&
		       !cmn_mutex_held(&race.owner->lock) && !cmn_deadline_passed(dl))
			cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
	return rm_hw_ops.chan_quiesce(ctx, fn, chid, timeout_ns);
}

static int setup_race(void **state)
{
	(void)state;
	memset(&race, 0, sizeof(race));
	race_ops = rm_hw_ops;
	race_ops.chan_quiesce = race_quiesce;
	return setup_cfg(0, false, &race_ops);
}

/* The racing thread is gone before the device is (also when the case failed). */
static void race_join(void)
{
	if (race.started && !race.joined) {
		pthread_join(race.th, NULL);
		race.joined = true;
	}
}

static int teardown_race(void **state)
{
	race_join();
	if (race.owner)
		rm_client_put(race.owner);
	race.owner = NULL;
	return teardown(state);
}

/* The channel of slot @k of @g as rm_t_chan_up() makes it, allocated by the racing thread:
 * its parameters in race.p. */
static void race_chan_prepare(struct rm_t_guest *g, struct rm_t_chan *c, uint32_t k)
{
	rm_t_chan_slot(g, c, k);
	race.p = (struct vgpu_rm_channel_params){
		.h_vaspace = g->hv, .gpfifo_va = RM_T_VA + 0x40000 + k * 0x1000ull,
		.gpfifo_entries = 64, .userd_aper = VGPU_APER_VRAM,
		.userd_addr = g->pa + 0x3000 + k * 128ull,
	};
}

/* Client A's channel hangs and is reported; inside the recovery A frees it and client B
 * allocates a channel, which gets the same id. A's hung channel is stopped (its USERD shows
 * the error, recovery 0); B's channel is left as B made it: no error, enabled, on its
 * runlist, and it runs work. */
static void test_watchdog_recover_reuse(void **state)
{
	const uint64_t wd = 50 * VGPU_NSEC_PER_MSEC, sem = RM_T_VA + 0x30000;
	const uint32_t acq[] = { (uint32_t)sem, (uint32_t)(sem >> 32), 1, 0, 0, 60000000 };
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct rm_t_guest *a = &race.a, *b = &race.b;
	struct rm_t_chan *hung = &race.hung, *fresh = &race.fresh;
	struct vgpu_rpc_wd_state st;
	struct rm_event e;

	(void)state;
	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	rm_t_guest_up(&fx, a, 1, 0xc0000);
	rm_t_guest_up(&fx, b, 1, 0xc0000);
	rm_rcu_enter();
	assert_int_equal(rm_client_get(fx.rm, 1, a->hc, &race.owner), 0);
	rm_t_chan_up(&fx, a, hung, 0, a->hv, 0);
	race_chan_prepare(b, fresh, 0);
	race.chid = hung->chid;
	st = rm_t_wd_tick(&fx, hung->chid, 0);		/* the test clock from here on */
	assert_false(st.stalled);
	rm_t_chan_method(hung, VGPU_M_SEM_ACQUIRE, acq, VGPU_ARRAY_SIZE(acq));
	rm_t_chan_submit(&fx, a, hung);
	st = wd_wait(hung->chid, wd_is_stalled, 0);
	atomic_store(&race.armed, true);
	wd_expect_fires_at(hung->chid, &st, wd);
	assert_int_equal(rec_wait(RM_EVENT_WATCHDOG, 1, hung->chid, &e), 0);
	assert_true(race.started);
	race_join();
	assert_int_equal(race.free_ret, 0);
	assert_int_equal(race.alloc_ret, 0);
	assert_int_equal(race.enable_ret, 0);
	fresh->chid = race.p.chid;
	assert_int_equal(fresh->chid, hung->chid);	/* B's channel has the hung one's id */
	/* B's channel is untouched by A's recovery. */
	assert_int_equal(rm_t_userd_error(fresh), 0);
	assert_true(sh->fns[1].runlist[0] & (1ull << fresh->chid));
	assert_true(sh->fns[1].chans[fresh->chid].flags & GPU_CHAN_ENABLED);
	m_release(fresh, 0x30100, 9);
	rm_t_chan_submit(&fx, b, fresh);
	assert_int_equal(chan_wait_get(fresh, 1), 0);
	assert_int_equal(__atomic_load_n((uint32_t *)(b->host + 0x30100), __ATOMIC_ACQUIRE), 9);
	/* A's hung channel was the one stopped. */
	assert_int_equal(e.recovery, 0);
	assert_int_equal(rm_t_userd_error(hung), VGPU_CHAN_ERR_SEM_TIMEOUT);
	rm_client_put(race.owner);
	race.owner = NULL;
	assert_int_equal(rm_client_free(fx.rm, 1, a->hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, b->hc), 0);
}

/* ---- recovery while the hung channel's owner holds its lock ----
 * A call of the owner may hold its client lock up to its RPC deadline, and the one event
 * worker serves every function: it must not wait for that lock. A thread of the case holds
 * client A's lock as such a call would, until the case lets it go; a log sink counts the
 * RM's watchdog lines. */
static struct {
	struct rm_client *c;		/* client A (a reference held by the case) */
	pthread_t th;
	bool started, joined;
	_Atomic bool held, release;
	/* log lines "recovery deferred" and "deferred recovery" (its outcome) */
	_Atomic unsigned int deferred, retried;
	enum cmn_log_level level;
} busy;

static void busy_log(enum cmn_log_level level, const char *msg, void *ctx)
{
	(void)ctx;
	if (strstr(msg, "recovery deferred"))
		atomic_fetch_add(&busy.deferred, 1);
	if (strstr(msg, "deferred recovery"))
		atomic_fetch_add(&busy.retried, 1);
	fprintf(stderr, "%s: %s\n", level == VGPU_LOG_WARN ? "warn" : "log", msg);
}

static void *busy_main(void *arg)
{
	(void)arg;
	rm_client_lock(busy.c);
	atomic_store(&busy.held, true);
	while (!atomic_load(&busy.release))
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	rm_client_unlock(busy.c);
	return NULL;
}

/* Client @hc of function 1 locked by the holder thread once this returns. */
static void busy_hold(uint32_t hc)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	rm_rcu_enter();
	assert_int_equal(rm_client_get(fx.rm, 1, hc, &busy.c), 0);
	busy.started = !pthread_create(&busy.th, NULL, busy_main, NULL);
	assert_true(busy.started);
	while (!atomic_load(&busy.held)) {
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
}

/* The holder lets the lock go and is gone (also when the case failed: the worker waits
 * for the lock in a build that blocks on it). */
static void busy_let_go(void)
{
	atomic_store(&busy.release, true);
	if (busy.started && !busy.joined) {
		pthread_join(busy.th, NULL);
		busy.joined = true;
	}
}

static int setup_busy(void **state)
{
	memset(&busy, 0, sizeof(busy));
	busy.level = cmn_log_get_level();
	if (busy.level < VGPU_LOG_WARN)
		cmn_log_set_level(VGPU_LOG_WARN);
	cmn_log_set_sink(busy_log, NULL);
	return setup(state);
}

static int teardown_busy(void **state)
{
	busy_let_go();
	if (busy.c)
		rm_client_put(busy.c);
	busy.c = NULL;
	atomic_store(&rec.gate_closed, false);
	rm_fixture_down(&fx);
	cmn_log_set_sink(NULL, NULL);
	cmn_log_set_level(busy.level);
	(void)state;
	return 0;
}

/* Wait until no recovery is pending in the RM; 0 or -ETIMEDOUT. */
static int busy_wait_settled(void)
{
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	while (atomic_load(&fx.rm->wd_pending)) {
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	return 0;
}

/* Function 1's channel @hung of guest @a, stuck in a 60 s acquire, reported by a 50 ms
 * watchdog while client A's lock is held: the WATCHDOG event comes at once with its
 * recovery deferred, and the channel is still enabled, on its runlist, without error. */
static void busy_hang(struct rm_t_guest *a, struct rm_t_chan *hung)
{
	const uint64_t wd = 50 * VGPU_NSEC_PER_MSEC, sem = RM_T_VA + 0x30000;
	const uint32_t acq[] = { (uint32_t)sem, (uint32_t)(sem >> 32), 1, 0, 0, 60000000 };
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rpc_wd_state st;
	struct rm_event e;

	assert_int_equal(rm_fn_watchdog_set(fx.rm, 1, wd), 0);
	rm_t_chan_up(&fx, a, hung, 0, a->hv, 0);
	st = rm_t_wd_tick(&fx, hung->chid, 0);		/* the test clock from here on */
	rm_t_chan_method(hung, VGPU_M_SEM_ACQUIRE, acq, VGPU_ARRAY_SIZE(acq));
	rm_t_chan_submit(&fx, a, hung);
	st = wd_wait(hung->chid, wd_is_stalled, 0);
	busy_hold(a->hc);
	wd_expect_fires_at(hung->chid, &st, wd);
	assert_int_equal(rec_wait(RM_EVENT_WATCHDOG, 1, hung->chid, &e), 0);
	assert_int_equal(e.recovery, -EINPROGRESS);
	assert_int_equal(atomic_load(&busy.deferred), 1);
	assert_int_equal(atomic_load(&fx.rm->wd_pending), 1);
	assert_int_equal(rm_t_userd_error(hung), 0);
	assert_true(sh->fns[1].runlist[0] & (1ull << hung->chid));
	assert_true(sh->fns[1].chans[hung->chid].flags & GPU_CHAN_ENABLED);
}

/* Client A holds its lock (as a call waiting in the GSP would) when its channel is reported
 * hung: the event worker goes on, function 2's channel error is delivered while the lock is
 * held, and the hung channel is left as it is. Once A lets the lock go, the RM's retry stops
 * it as test_watchdog_hung's recovery does: disabled, off its runlist, SEM_TIMEOUT in
 * USERD, the CHAN_ERROR after; one WATCHDOG event, one log line for the deferral and one
 * for its outcome. */
static void test_watchdog_owner_busy(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct rm_t_guest a, g2;
	struct rm_t_chan hung, other;
	struct rm_event e;

	(void)state;
	rm_t_guest_up(&fx, &a, 1, 0xc0000);
	rm_t_guest_up(&fx, &g2, 2, 0xc0000);
	rm_t_chan_up(&fx, &g2, &other, 0, g2.hv, 0);
	busy_hang(&a, &hung);
	m_illegal(&other);
	rm_t_chan_submit(&fx, &g2, &other);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 2, other.chid, &e), 0);
	assert_int_equal(e.code, VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(rm_t_userd_error(&hung), 0);	/* still waiting for A's lock */
	assert_int_equal(rec_find(RM_EVENT_CHAN_ERROR, 1, hung.chid, NULL, NULL), 0);
	busy_let_go();
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 1, hung.chid, &e), 0);
	assert_int_equal(e.code, VGPU_CHAN_ERR_SEM_TIMEOUT);
	assert_int_equal(rm_t_userd_error(&hung), VGPU_CHAN_ERR_SEM_TIMEOUT);
	assert_false(sh->fns[1].runlist[0] & (1ull << hung.chid));
	assert_false(sh->fns[1].chans[hung.chid].flags & GPU_CHAN_ENABLED);
	assert_int_equal(busy_wait_settled(), 0);
	assert_int_equal(atomic_load(&busy.retried), 1);
	assert_int_equal(atomic_load(&busy.deferred), 1);
	assert_int_equal(rec_find(RM_EVENT_WATCHDOG, 1, hung.chid, NULL, NULL), 1);
	assert_int_equal(rm_t_wd_tick(&fx, hung.chid, VGPU_NSEC_PER_SEC).hung_reports, 1);
	rm_client_put(busy.c);
	busy.c = NULL;
	assert_int_equal(rm_client_free(fx.rm, 1, a.hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, g2.hc), 0);
}

/* A deferred recovery whose channel is freed before the retry, and its id given to a new
 * channel of the same client: the retry stops nothing. The event handler is held at its
 * gate (on function 2's error) while the case lets A's lock go, frees the hung channel and
 * allocates the new one, so no retry runs in between; once the gate opens the pending
 * entry goes, logged once, and the new channel is enabled, on its runlist, without error,
 * and runs work. */
static void test_watchdog_deferred_freed(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct rm_t_guest a, g2;
	struct rm_t_chan hung, fresh, other;

	(void)state;
	rm_t_guest_up(&fx, &a, 1, 0xc0000);
	rm_t_guest_up(&fx, &g2, 2, 0xc0000);
	rm_t_chan_up(&fx, &g2, &other, 0, g2.hv, 0);
	busy_hang(&a, &hung);
	atomic_store(&rec.gate_closed, true);
	m_illegal(&other);
	rm_t_chan_submit(&fx, &g2, &other);
	assert_int_equal(rec_wait(RM_EVENT_CHAN_ERROR, 2, other.chid, NULL), 0);
	busy_let_go();				/* the worker is at the gate: no retry yet */
	assert_int_equal(rm_free(fx.rm, 1, a.hc, hung.h), 0);
	rm_t_chan_up(&fx, &a, &fresh, 1, a.hv, 0);
	assert_int_equal(fresh.chid, hung.chid);
	assert_int_equal(atomic_load(&fx.rm->wd_pending), 1);
	atomic_store(&rec.gate_closed, false);
	assert_int_equal(busy_wait_settled(), 0);
	assert_int_equal(atomic_load(&busy.retried), 1);
	assert_int_equal(rm_t_userd_error(&fresh), 0);
	assert_true(sh->fns[1].runlist[0] & (1ull << fresh.chid));
	assert_true(sh->fns[1].chans[fresh.chid].flags & GPU_CHAN_ENABLED);
	m_release(&fresh, 0x30100, 5);
	rm_t_chan_submit(&fx, &a, &fresh);
	assert_int_equal(chan_wait_get(&fresh, 1), 0);
	assert_int_equal(__atomic_load_n((uint32_t *)(a.host + 0x30100), __ATOMIC_ACQUIRE), 5);
	assert_int_equal(rec_find(RM_EVENT_CHAN_ERROR, 1, fresh.chid, NULL, NULL), 0);
	rm_client_put(busy.c);
	busy.c = NULL;
	assert_int_equal(rm_client_free(fx.rm, 1, a.hc), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, g2.hc), 0);
}

/* Storm: 24 channels error at once, then one channel errors 40 times (freed and
 * reallocated), while the handler is held and the queue has 16 records: the GSP defers
 * what does not fit (counted) instead of losing it, RPCs keep completing, and once the
 * handler runs again every channel's counts add up to its errors, in fewer records than
 * errors for the channel that errored 40 times. */
static void test_storm(void **state)
{
	enum { WIDE = 24, DEEP = 40 };
	struct rm_t_guest g;
	struct rm_t_chan c[WIDE], d;
	struct gsp_stats st;
	uint64_t count, deep_chid;
	unsigned int deep_events;

	(void)state;
	rm_t_guest_up(&fx, &g, 1, 0xc0000);
	for (unsigned int i = 0; i < WIDE; i++) {
		rm_t_chan_up(&fx, &g, &c[i], i, g.hv, 0);
		m_illegal(&c[i]);
	}
	for (unsigned int i = 0; i < WIDE; i++)
		rm_t_chan_submit(&fx, &g, &c[i]);
	uint64_t dl = cmn_deadline_ns(T_WAIT);

	do {	/* 24 records for a 16-record queue whose reader is held: the rest waits */
		gsp_get_stats(rm_gsp(fx.rm), &st);
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	} while (!st.events_deferred);
	for (unsigned int i = 0; i < DEEP; i++) {
		rm_t_chan_up(&fx, &g, &d, WIDE, g.hv, 0);
		m_illegal(&d);
		rm_t_chan_submit(&fx, &g, &d);
		dl = cmn_deadline_ns(T_WAIT);
		while (!rm_t_userd_error(&d) && !cmn_deadline_passed(dl))
			cmn_sleep_ns(50 * VGPU_NSEC_PER_USEC);
		assert_int_equal(rm_t_userd_error(&d), VGPU_CHAN_ERR_GP_ILLEGAL);
		/* An RPC in the middle of the storm is answered. */
		assert_int_equal(rm_control(fx.rm, 1, g.hc, d.h, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN,
					    &(struct vgpu_rm_token_params){ 0 }, &(size_t){ 0 },
					    sizeof(struct vgpu_rm_token_params)), 0);
		deep_chid = d.chid;
		assert_int_equal(rm_free(fx.rm, 1, g.hc, d.h), 0);
	}
	assert_int_equal(st.events_dropped, 0);
	atomic_store(&rec.gate_closed, false);
	/* Everything arrives: the wide channels once each, the deep one's counts sum to 40. */
	dl = cmn_deadline_ns(4 * T_WAIT);

	for (;;) {
		unsigned int done = 0;

		for (unsigned int i = 0; i < WIDE; i++)
			done += rec_find(RM_EVENT_CHAN_ERROR, 1, c[i].chid, NULL, NULL) == 1;
		deep_events = rec_find(RM_EVENT_CHAN_ERROR, 1, (uint32_t)deep_chid, NULL, &count);
		if (done == WIDE && count == DEEP)
			break;
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(5 * VGPU_NSEC_PER_MSEC);
	}
	gsp_get_stats(rm_gsp(fx.rm), &st);
	assert_true(deep_events < DEEP);	/* folded while the queue was full */
	assert_int_equal(st.events_dropped, 0);
	assert_int_equal(st.timeouts, 0);
	assert_int_equal(rm_client_free(fx.rm, 1, g.hc), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_chan_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mmu_fault, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_hung, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_slow_not_hung, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_fault_progress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watchdog_recover_reuse, setup_race,
						teardown_race),
		cmocka_unit_test_setup_teardown(test_watchdog_owner_busy, setup_busy,
						teardown_busy),
		cmocka_unit_test_setup_teardown(test_watchdog_deferred_freed, setup_busy,
						teardown_busy),
		cmocka_unit_test_setup_teardown(test_storm, setup_storm, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
