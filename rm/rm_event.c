// SPDX-License-Identifier: MIT
/* Device events from the GSP: channel errors, MMU faults and the watchdog. The GSP observes
 * them (it reads the device's status region); the RM checks each record, recovers a hung
 * channel through the normal channel-enable path, and hands the owner an rm_event. Runs on
 * the GSP's event worker, which is never inside an RPC wait and holds no lock, so recovery
 * may make RPCs and take the channel owner's client lock. That one worker serves every
 * function, so it only tries the lock: a call of the owner may hold it up to its RPC
 * deadline, and the other functions' records would wait behind it. A recovery that finds
 * the lock busy waits in its function's pending set (one entry per channel) and is retried
 * when the worker is idle and when the owner's lock is released. */
#include <errno.h>

#include <vgpu/gpfifo.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "rm/rm_internal.h"

/* The error a recovered channel shows its guest in USERD. The device stalls a channel that
 * long only in a semaphore acquire, so the acquire's own timeout code is the truthful one
 * until vgpu/gpfifo.h has a watchdog code. */
#define RM_WD_CHAN_ERROR	VGPU_CHAN_ERR_SEM_TIMEOUT

/* Whether channel @chid of @fn is still allocation @gen, the one the GSP found hung. The
 * record waited in the event queue: meanwhile its channel may have been freed and the id
 * given to a new channel (another client's, on memory just handed out), which must not be
 * stopped for the old one's hang. */
static bool rm_chan_same_alloc(struct rm *rm, unsigned int fn, uint32_t chid, uint64_t gen)
{
	if (!gen || !rm->cfg.ops->chan_gen)
		return true;
	return rm->cfg.ops->chan_gen(rm->cfg.ops_ctx, fn, chid) == gen;
}

/* Lock client @h of @fn as a call does (rm_res.c's rm_enter()), but without waiting:
 * looked up under the function's API lock for reading, so that a VF reset or a migration's
 * export, which take it for writing, never find this thread between lookup and lock. 0 and
 * the client locked in *@out; -ENOENT if it is gone or disabled (a VF reset is dropping its
 * channels); -EBUSY if either lock is held, and then the client's unlock kicks the worker. */
static int rm_owner_trylock(struct rm *rm, unsigned int fn, uint32_t h, struct rm_client **out)
{
	struct rm_client *c;

	rm_rcu_enter();
	if (!rm_api_tryread(rm, fn))
		return -EBUSY;
	if (rm_client_get(rm, fn, h, &c)) {
		rm_api_unlock(rm, fn);
		return -ENOENT;
	}
	/* Asked before the try: a holder that unlocks after a failed try sees it. */
	atomic_store(&c->wd_kick, true);
	if (!rm_client_trylock(c)) {
		rm_api_unlock(rm, fn);
		rm_client_put(c);
		return -EBUSY;
	}
	atomic_store(&c->wd_kick, false);
	rm_api_unlock(rm, fn);
	if (c->dead || c->disabled) {
		rm_client_unlock(c);
		rm_client_put(c);
		return -ENOENT;
	}
	*out = c;
	return 0;
}

/* Stop hung channel @chid, allocation @job->gen of client @job->owner (0: whoever owns the
 * channel, recorded in @job->owner): off its runlist and disabled as CHANNEL_ENABLE(0)
 * does (the records follow, so a device reset does not bring it back enabled), then, once
 * no engine runs it, in the error state: USERD tells the guest, and the GSP posts the
 * CHAN_ERROR. -EBUSY (nothing done) if the owner's lock is held.
 *
 * Every step acts on the bare id, so the whole recovery holds the lock of the client that
 * owns the channel: only that client frees its channel or changes its state, and a VF reset
 * waits for the lock to mark it disabled. So the id is checked once under that lock and
 * stays the same allocation to the end; without it the owner could free the channel
 * between two steps and another client's new channel take the id and be stopped. */
static int rm_chan_recover(struct rm *rm, unsigned int fn, uint32_t chid, struct rm_wd_job *job)
{
	struct rm_chan_rec *ch = &rm->fns[fn].chans[chid];
	struct rm_client *c;
	uint32_t owner;
	bool on;
	int ret;

	rm_dev_lock(rm);
	owner = ch->live ? ch->owner : 0;
	rm_dev_unlock(rm);
	/* Gone or another channel already: not worth a try of the lock, nor a deferral. */
	if (!owner || (job->owner && owner != job->owner) ||
	    !rm_chan_same_alloc(rm, fn, chid, job->gen))
		return -ENOENT;
	job->owner = owner;
	ret = rm_owner_trylock(rm, fn, owner, &c);
	if (ret)
		return ret;
	rm_dev_lock(rm);
	on = ch->live && ch->enabled && ch->owner == owner;
	rm_dev_unlock(rm);
	/* Freed or disabled since the GSP looked, or another channel now: nothing to recover. */
	ret = on && rm_chan_same_alloc(rm, fn, chid, job->gen) ? 0 : -ENOENT;
	if (!ret)
		ret = rm_chan_enable(rm, fn, chid, false);
	if (!ret)
		ret = rm_op(rm, chan_quiesce, fn, chid, VGPU_NSEC_PER_SEC);
	if (!ret)
		ret = rm_op(rm, chan_error, fn, chid, RM_WD_CHAN_ERROR);
	if (ret == -EALREADY)	/* it errored on its own meanwhile: stopped all the same */
		ret = 0;
	rm_client_unlock(c);
	rm_client_put(c);
	return ret;
}

/* ---- the pending set: recoveries whose owner's lock was busy ----
 * Only the event worker adds, retries and drops entries; the device lock orders them with
 * a gsp_events_poll() on another thread. One entry per channel id: a newer HUNG record of
 * the channel replaces it (a reallocation's gen), so the set never grows past 64 a
 * function. A freed channel's or reset function's entry needs no dropping: its retry
 * finds the owner, the allocation or the enable gone and ends with -ENOENT. */

/* Put off the recovery of @chid of @fn (@job: owner and allocation). */
static void rm_wd_defer(struct rm *rm, unsigned int fn, uint32_t chid, const struct rm_wd_job *job)
{
	struct rm_fn *f = &rm->fns[fn];

	rm_dev_lock(rm);
	if (!(f->wd_pending & (1ull << chid)))
		atomic_fetch_add(&rm->wd_pending, 1);
	f->wd_pending |= 1ull << chid;
	f->wd_job[chid] = *job;
	rm_dev_unlock(rm);
}

/* The pending recovery of @chid of @fn in *@job, left in the set: false if none. */
static bool rm_wd_peek(struct rm *rm, unsigned int fn, uint32_t chid, struct rm_wd_job *job)
{
	struct rm_fn *f = &rm->fns[fn];
	bool had;

	rm_dev_lock(rm);
	had = f->wd_pending & (1ull << chid);
	if (had)
		*job = f->wd_job[chid];
	rm_dev_unlock(rm);
	return had;
}

/* Drop the pending recovery of @chid of @fn, if any. */
static void rm_wd_drop(struct rm *rm, unsigned int fn, uint32_t chid)
{
	struct rm_fn *f = &rm->fns[fn];

	rm_dev_lock(rm);
	if (f->wd_pending & (1ull << chid)) {
		f->wd_pending &= ~(1ull << chid);
		atomic_fetch_sub(&rm->wd_pending, 1);
	}
	rm_dev_unlock(rm);
}

/* One more try of every pending recovery of @fn. One that ends is logged, then leaves the
 * set (so whoever sees the set empty sees the log); one still busy stays as it is. */
static void rm_wd_retry_fn(struct rm *rm, unsigned int fn)
{
	uint64_t bits;

	rm_dev_lock(rm);
	bits = rm->fns[fn].wd_pending;
	rm_dev_unlock(rm);
	for (; bits; bits &= bits - 1) {
		uint32_t chid = (uint32_t)__builtin_ctzll(bits);
		struct rm_wd_job job;
		int ret;

		if (!rm_wd_peek(rm, fn, chid, &job))
			continue;
		ret = rm_chan_recover(rm, fn, chid, &job);
		if (ret == -EBUSY)
			continue;
		cmn_warn("rm: watchdog: function %u channel %u: deferred recovery: %s", fn, chid,
			 !ret ? "stopped" : ret == -ENOENT ?
			 "nothing to stop (freed, disabled or reallocated meanwhile)" :
			 cmn_strerror(ret));
		rm_wd_drop(rm, fn, chid);
	}
}

void rm_gsp_idle(void *ctx)
{
	struct rm *rm = ctx;

	if (rm->gsp_cfg.idle_cb)
		rm->gsp_cfg.idle_cb(rm->gsp_cfg.ctx);
	if (!atomic_load_explicit(&rm->wd_pending, memory_order_relaxed))
		return;
	for (unsigned int fn = 0; fn < rm->nr_fns; fn++)
		rm_wd_retry_fn(rm, fn);
}

/* A HUNG record's recovery: at once if the owner's lock is free, else deferred
 * (-EINPROGRESS). It replaces a pending recovery of the same channel: this record names
 * the id's latest allocation. */
static int rm_wd_hung(struct rm *rm, unsigned int fn, uint32_t chid, uint64_t gen)
{
	struct rm_wd_job job = { .gen = gen };
	int ret = rm_chan_recover(rm, fn, chid, &job);

	if (ret == -EBUSY) {
		rm_wd_defer(rm, fn, chid, &job);
		return -EINPROGRESS;
	}
	rm_wd_drop(rm, fn, chid);
	return ret;
}

/* Fill @out (and *@gen: a watchdog record's allocation, 0 if none said) from a GSP record;
 * false if the record is not believable (the GSP may lie). */
static bool rm_event_parse(struct rm *rm, const struct vgpu_rpc_event *ev, struct rm_event *out,
			   uint64_t *gen)
{
	*out = (struct rm_event){ .fn = ev->gfid, .chid = (uint32_t)ev->data[0],
				  .code = (uint32_t)ev->data[1] };
	if (ev->gfid >= rm->nr_fns || ev->data[0] >= RM_MAX_CHANNELS)
		return false;
	switch (ev->type) {
	case VGPU_RPC_EVT_CHAN_ERROR:
		out->kind = RM_EVENT_CHAN_ERROR;
		out->gp_get = (uint32_t)ev->data[2];
		out->count = ev->data[3];
		return ev->data[1] < VGPU_CHAN_ERR_NR && ev->data[3];
	case VGPU_RPC_EVT_MMU_FAULT:
		out->kind = RM_EVENT_MMU_FAULT;
		out->va = ev->data[2];
		out->count = ev->data[3];
		return ev->data[3] != 0;
	case VGPU_RPC_EVT_WATCHDOG:
		out->kind = RM_EVENT_WATCHDOG;
		out->gp_get = (uint32_t)ev->data[2];
		out->stall_ns = ev->data[3];
		*gen = ev->data[4];
		return ev->data[1] == VGPU_RPC_WD_HUNG || ev->data[1] == VGPU_RPC_WD_PREEMPT_TIMEOUT;
	}
	return false;
}

void rm_gsp_event(void *ctx, const struct vgpu_rpc_event *ev)
{
	struct rm *rm = ctx;
	struct rm_event e;
	uint64_t gen = 0;

	if (rm->gsp_cfg.event_cb)
		rm->gsp_cfg.event_cb(rm->gsp_cfg.ctx, ev);
	switch (ev->type) {
	case VGPU_RPC_EVT_INIT_DONE:
	case VGPU_RPC_EVT_TEST:
		return;
	case VGPU_RPC_EVT_MMU_FAULT:
		if (ev->data[4] == VGPU_RPC_FAULT_REPLAYED)	/* the RM's own replay, logged */
			return;
		break;
	}
	rm_dev_sync_acquire(rm->dev.tsan_sync);	/* the device's side, through the GSP */
	if (!rm_event_parse(rm, ev, &e, &gen)) {
		if (atomic_fetch_add(&rm->events_bad, 1) < 8)
			cmn_warn("rm: GSP event %#x for function %u ignored (bad record)", ev->type,
				  ev->gfid);
		return;
	}
	if (e.kind == RM_EVENT_WATCHDOG && e.code == VGPU_RPC_WD_HUNG) {
		e.recovery = rm_wd_hung(rm, e.fn, e.chid, gen);
		cmn_warn("rm: watchdog: function %u channel %u stuck at GP %u for %llu ms: %s",
			  e.fn, e.chid, e.gp_get, (unsigned long long)(e.stall_ns / VGPU_NSEC_PER_MSEC),
			  e.recovery == -EINPROGRESS ?
			  "recovery deferred (its owner's lock is busy)" :
			  e.recovery ? cmn_strerror(e.recovery) : "stopped");
	}
	if (rm->cfg.event)
		rm->cfg.event(rm->cfg.notify_ctx, &e);
}

int rm_fn_watchdog_set(struct rm *rm, unsigned int fn, uint64_t timeout_ns)
{
	struct vgpu_rpc_watchdog w = { .fn = fn, .timeout_ns = timeout_ns };
	int ret;

	if (!rm || fn >= rm->nr_fns || (timeout_ns && timeout_ns < VGPU_RPC_WD_MIN_NS))
		return -EINVAL;
	ret = gsp_call(rm->gsp, 0, VGPU_RPC_FN_WATCHDOG_SET, &w, sizeof(w), NULL, 0, NULL);
	if (ret)
		return ret;
	rm_dev_lock(rm);
	rm->fns[fn].wd_ns = timeout_ns;
	rm_dev_unlock(rm);
	return 0;
}
