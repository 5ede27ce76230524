// SPDX-License-Identifier: MIT
/* Device events from the GSP: channel errors, MMU faults and the watchdog. The GSP observes
 * them (it reads the device's status region); the RM checks each record, recovers a hung
 * channel through the normal channel-enable path, and hands the owner an rm_event. Runs on
 * the GSP's event worker, which is never inside an RPC wait and holds no lock, so recovery
 * may make RPCs and take the channel owner's client lock as a call of that client does. */
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

/* Lock client @h of @fn as a call does (rm_res.c's rm_enter()): looked up under the
 * function's API lock for reading, so that a VF reset or a migration's export, which take
 * it for writing, never find this thread between lookup and lock. NULL if the client is
 * gone or disabled (a VF reset is dropping its channels). */
static struct rm_client *rm_owner_lock(struct rm *rm, unsigned int fn, uint32_t h)
{
	struct rm_client *c;

	rm_rcu_enter();
	rm_api_read(rm, fn);
	if (rm_client_get(rm, fn, h, &c)) {
		rm_api_unlock(rm, fn);
		return NULL;
	}
	rm_client_lock(c);
	rm_api_unlock(rm, fn);
	if (c->dead || c->disabled) {
		rm_client_unlock(c);
		rm_client_put(c);
		return NULL;
	}
	return c;
}

/* Stop hung channel @chid, allocation @gen: off its runlist and disabled as
 * CHANNEL_ENABLE(0) does (the records follow, so a device reset does not bring it back
 * enabled), then, once no engine runs it, in the error state: USERD tells the guest, and
 * the GSP posts the CHAN_ERROR.
 *
 * Every step acts on the bare id, so the whole recovery holds the lock of the client that
 * owns the channel: only that client frees its channel or changes its state, and a VF reset
 * waits for the lock to mark it disabled. So the id is checked once under that lock and
 * stays the same allocation to the end; without it the owner could free the channel
 * between two steps and another client's new channel take the id and be stopped. */
static int rm_chan_recover(struct rm *rm, unsigned int fn, uint32_t chid, uint64_t gen)
{
	struct rm_chan_rec *ch = &rm->fns[fn].chans[chid];
	struct rm_client *c;
	uint32_t owner;
	bool on;
	int ret;

	rm_dev_lock(rm);
	owner = ch->live ? ch->owner : 0;
	rm_dev_unlock(rm);
	c = owner ? rm_owner_lock(rm, fn, owner) : NULL;
	if (!c)
		return -ENOENT;
	rm_dev_lock(rm);
	on = ch->live && ch->enabled && ch->owner == owner;
	rm_dev_unlock(rm);
	/* Freed or disabled since the GSP looked, or another channel now: nothing to recover. */
	ret = on && rm_chan_same_alloc(rm, fn, chid, gen) ? 0 : -ENOENT;
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
		e.recovery = rm_chan_recover(rm, e.fn, e.chid, gen);
		cmn_warn("rm: watchdog: function %u channel %u stuck at GP %u for %llu ms: %s",
			  e.fn, e.chid, e.gp_get, (unsigned long long)(e.stall_ns / VGPU_NSEC_PER_MSEC),
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
