// SPDX-License-Identifier: MIT
/* The firmware's test hooks: fault injection (INJECT), BLOB and the watchdog's test clock
 * (WD_TICK), the test-only RPCs of rm/gsp/gsp_test_rpc.h, so tests can make the real GSP
 * process hang, crawl, answer late, die mid-reply, corrupt a reply, flood events or fail
 * one RPC, and decide what the watchdog sees by counts instead of by the time their
 * threads take. Compiled only with VGPU_TEST_HOOKS (the -th build behind vgpu-gsp-test):
 * the release vgpu-gsp holds none of it. */
#ifdef VGPU_TEST_HOOKS

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "rm/gsp/fw/gsp_fw_internal.h"
#include "rm/gsp/gsp_test_rpc.h"

/* ---- RPCs ---- */
int gsp_fw_rpc_blob(struct gsp_fw_lane *ln, const void *req, size_t len,
		    struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_blob *b = req;
	int ret;

	(void)len;
	if (b->len > VGPU_RPC_MAX_PAYLOAD)
		return -EINVAL;
	ret = gsp_fw_reserve_reply(ln, b->len);
	if (ret)
		return ret;
	for (uint64_t i = 0; i < b->len; i++)
		ln->rep[i] = (uint8_t)(b->seed + i * 131);
	out->data = ln->rep;
	out->len = b->len;
	return 0;
}

struct storm {
	struct gsp_fw *s;
	uint64_t n;
	uint32_t gfid;
};

/* EVENT_STORM runs on its own thread: the records must not hold up the lane's reply. */
static void *storm_main(void *arg)
{
	struct storm *st = arg;

	for (uint64_t i = 0; i < st->n; i++)
		gsp_fw_event(st->s, VGPU_RPC_EVT_TEST, st->gfid, i);
	free(st);
	return NULL;
}

static int storm_start(struct gsp_fw *s, uint64_t n, uint32_t gfid)
{
	struct storm *st = malloc(sizeof(*st));
	pthread_t th;

	if (!st)
		return -ENOMEM;
	*st = (struct storm){ s, n, gfid };
	if (pthread_create(&th, NULL, storm_main, st)) {
		free(st);
		return -EAGAIN;
	}
	pthread_detach(th);
	return 0;
}

static void faults_clear(struct gsp_fw *s)
{
	for (unsigned int i = 0; i < 64; i++) {
		atomic_store(&s->faults.slow_ns[i], 0);
		atomic_store(&s->faults.fail_fn[i], 0);
	}
	atomic_store(&s->faults.scrub_hold, 0);
	for (unsigned int i = 0; i < s->l.nr_lanes; i++) {
		struct gsp_fw_lane_faults *f = &s->lanes[i].faults;

		atomic_store(&f->late_ns, 0);
		atomic_store(&f->crash_mid, 0);
		atomic_store(&f->corrupt, 0);
		atomic_store(&f->stall_until, 0);
	}
}

int gsp_fw_rpc_inject(struct gsp_fw_lane *ln, const void *req, size_t len,
		      struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_inject *in = req;
	struct gsp_fw *s = ln->s;
	struct gsp_fw_lane_faults *t;

	(void)len;
	(void)out;
	if (in->lane >= s->l.nr_lanes || in->fn >= 64)
		return -EINVAL;
	t = &s->lanes[in->lane].faults;
	switch (in->mode) {
	case VGPU_INJ_CLEAR:
		faults_clear(s);
		return 0;
	case VGPU_INJ_HANG:
		atomic_store(&s->faults.hang, true);
		return 0;
	case VGPU_INJ_SLOW:
		atomic_store(&s->faults.slow_ns[in->fn], in->arg);
		return 0;
	case VGPU_INJ_LATE:
		atomic_store(&t->late_ns, in->arg);
		return 0;
	case VGPU_INJ_CRASH_MID_REPLY:
		atomic_store(&t->crash_mid, 1);
		return 0;
	case VGPU_INJ_CORRUPT:
		if (in->arg < VGPU_CORRUPT_PAYLOAD || in->arg > VGPU_CORRUPT_COUNTER)
			return -EINVAL;
		atomic_store(&t->corrupt, (uint32_t)in->arg);
		return 0;
	case VGPU_INJ_STALL:
		atomic_store(&t->stall_until, in->arg == VGPU_INJ_UNTIL_CLEAR ? UINT64_MAX :
					      cmn_deadline_ns(in->arg));
		return 0;
	case VGPU_INJ_EVENT_STORM:
		return storm_start(s, in->arg, in->fn);
	case VGPU_INJ_CRASH:
		gsp_fw_die(2);
	case VGPU_INJ_FAIL:
		if (in->arg >= UINT32_MAX)
			return -EINVAL;
		atomic_store(&s->faults.fail_fn[in->fn], in->arg + 1);
		return 0;
	case VGPU_INJ_SCRUB_HOLD:
		atomic_store(&s->faults.scrub_hold, 1);
		return 0;
	}
	return -EINVAL;
}

/* ---- the watchdog's test clock ---- */
void gsp_fw_hook_init(struct gsp_fw *s)
{
	cmn_mutex_init(&s->faults.wd_clock.lock);
	pthread_cond_init(&s->faults.wd_clock.cv, NULL);
}

void gsp_fw_hook_fini(struct gsp_fw *s)
{
	pthread_cond_destroy(&s->faults.wd_clock.cv);
	cmn_mutex_destroy(&s->faults.wd_clock.lock);
}

int gsp_fw_rpc_wd_tick(struct gsp_fw_lane *ln, const void *req, size_t len,
		       struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_wd_tick *t = req;
	struct gsp_fw *s = ln->s;
	struct gsp_fw_wd_clock *c = &s->faults.wd_clock;
	uint64_t mine;

	(void)len;
	if (t->fn >= s->glob->nr_fns || t->ch >= GPU_FN_MAX_CHANNELS || t->reserved)
		return -EINVAL;
	if (!s->st)		/* gsp_fw_open(): no main loop, no watchdog */
		return -ENODEV;
	if (atomic_load(&s->faults.hang))
		return -EAGAIN;	/* the main loop runs no pass while hung */
	cmn_mutex_lock(&c->lock);
	while (c->asked != c->answered)	/* one tick at a time */
		cmn_cond_wait(&c->cv, &c->lock);
	c->on = true;
	c->req = *t;
	mine = ++c->asked;
	while (c->answered < mine)
		cmn_cond_wait(&c->cv, &c->lock);
	memcpy(ln->rep, &c->rep, sizeof(c->rep));
	pthread_cond_broadcast(&c->cv);	/* the slot is free for the next tick */
	cmn_mutex_unlock(&c->lock);
	out->len = sizeof(c->rep);
	return 0;
}

/* The record of the channel a tick asked about, as the pass at @now left it. */
static void wd_clock_answer(struct gsp_fw *s, struct gsp_fw_wd_clock *c)
{
	const struct gsp_fw_wd *w = &s->wd[c->req.fn][c->req.ch];

	c->rep = (struct vgpu_rpc_wd_state){ .now_ns = c->now, .gp_get = w->gp_get,
		.faults = w->faults, .stall_ns = w->since ? c->now - w->since : 0,
		.hung_reports = s->wd_hung, .stalled = w->since != 0, .fired = w->fired };
	c->answered = c->asked;
	pthread_cond_broadcast(&c->cv);
}

bool gsp_fw_hook_watchdog(struct gsp_fw *s)
{
	struct gsp_fw_wd_clock *c = &s->faults.wd_clock;
	bool on;

	cmn_mutex_lock(&c->lock);
	on = c->on;
	if (on && c->asked != c->answered) {
		/* Started from the GSP's own clock here, on the thread that ran the passes
		 * before: every stall already recorded began at or before it. */
		if (!c->now)
			c->now = cmn_now_ns();
		c->now += c->req.advance_ns;
		gsp_fw_watchdog(s, c->now);
		wd_clock_answer(s, c);
	}
	cmn_mutex_unlock(&c->lock);
	return on;
}

/* ---- where the server applies the faults ---- */
bool gsp_fw_hook_paused(struct gsp_fw_lane *ln)
{
	return atomic_load_explicit(&ln->s->faults.hang, memory_order_relaxed) ||
	       atomic_load_explicit(&ln->faults.stall_until, memory_order_relaxed) > cmn_now_ns();
}

bool gsp_fw_hook_hung(struct gsp_fw *s)
{
	return atomic_load_explicit(&s->faults.hang, memory_order_relaxed);
}

int gsp_fw_hook_before_rpc(struct gsp_fw *s, uint32_t gfid, uint32_t fn)
{
	uint64_t slow = gfid < 64 ? atomic_load(&s->faults.slow_ns[gfid]) : 0;
	uint64_t armed = (uint64_t)fn + 1;

	if (slow)
		cmn_sleep_ns(slow);
	/* Taken by exchange: of two RPCs of that number racing here, exactly one fails. */
	if (gfid < 64 && atomic_compare_exchange_strong(&s->faults.fail_fn[gfid], &armed, 0))
		return -EREMOTEIO;
	return 0;
}

void gsp_fw_hook_scrub(struct gsp_fw *s, uint32_t fn)
{
	uint32_t armed = 1;

	if (!atomic_compare_exchange_strong(&s->faults.scrub_hold, &armed, 2))
		return;
	gsp_fw_event(s, VGPU_RPC_EVT_TEST, fn, VGPU_INJ_SCRUB_HOLD);
	while (atomic_load(&s->faults.scrub_hold) == 2)
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
}

void gsp_fw_hook_reply_begin(struct gsp_fw_lane *ln)
{
	struct gsp_fw_lane_faults *f = &ln->faults;
	uint64_t late = atomic_exchange(&f->late_ns, 0);

	f->reply_corrupt = atomic_exchange(&f->corrupt, 0);
	f->reply_crash = atomic_exchange(&f->crash_mid, 0);
	if (late)
		cmn_sleep_ns(late);
}

/* Damage the built message @msg (@bytes) as @mode says, keeping it otherwise valid. */
static void corrupt_msg(struct gsp_fw_lane *ln, uint8_t *msg, size_t bytes, uint32_t mode)
{
	struct vgpu_rpc_elem *e = (void *)msg;
	struct vgpu_rpc_hdr *rh = (void *)(msg + sizeof(*e));

	switch (mode) {
	case VGPU_CORRUPT_PAYLOAD:
		msg[bytes - 1] ^= 0x10;		/* payload or padding: both are summed */
		break;
	case VGPU_CORRUPT_LENGTH:
		rh->length = 0xffffff00u;
		e->checksum = 0;
		e->checksum = gsp_checksum(msg, bytes);
		break;
	case VGPU_CORRUPT_SEQ:
		e->seq += 5;
		ln->stat.seq = e->seq + 1;
		e->checksum = 0;
		e->checksum = gsp_checksum(msg, bytes);
		break;
	}
}

bool gsp_fw_hook_reply_write(struct gsp_fw_lane *ln, size_t bytes, uint32_t elems)
{
	struct gsp_fw_lane_faults *f = &ln->faults;
	uint32_t corrupt = f->reply_corrupt;

	if (f->reply_crash) {
		/* Half the message visible, then die: what a GSP crashing mid-copy leaves. */
		gsp_q_write(&ln->stat, ln->tx, bytes, elems, elems / 2);
		gsp_fw_die(3);
	}
	if (!corrupt)
		return false;
	f->reply_corrupt = 0;	/* the first message of the reply only */
	if (corrupt < VGPU_CORRUPT_REPLAY)
		corrupt_msg(ln, ln->tx, bytes, corrupt);
	/* A wild write over our own counter, in the same store that publishes the reply:
	 * the reader can never take the reply first, so the outcome is fixed. */
	gsp_q_write(&ln->stat, ln->tx, bytes, elems,
		    corrupt == VGPU_CORRUPT_COUNTER ? elems + 10 * ln->stat.nr : elems);
	if (corrupt == VGPU_CORRUPT_REPLAY) {
		/* The same message again: its transport seq is now in the past. */
		gsp_fw_wait_space(ln, elems);
		gsp_q_write(&ln->stat, ln->tx, bytes, elems, elems);
	}
	return true;
}

#endif
