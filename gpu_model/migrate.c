// SPDX-License-Identifier: MIT
/* Migration of a quiesced function's device state: a channel's runtime (GP_GET, GP_PUT,
 * error, method count) and the scheduler's counters. Guest memory (GPFIFO, USERD,
 * semaphores) moves with the slice's bytes; the allocation itself is re-made by the GSP on
 * the destination. A channel is loaded after that allocation and before it is enabled, so
 * no engine has run it and no doorbell can reach it meanwhile. */
#include <errno.h>
#include <string.h>

#include "common/bitops.h"
#include "gpu_model/gpu_internal.h"

/* @fn's channel @chid, the device's picture refreshed from the privileged region (g->lock). */
static struct gpu_chan *mig_chan_locked(struct gpu *g, unsigned int fn, unsigned int chid,
					struct gpu_fn **fp)
{
	cmn_mutex_assert_held(&g->lock);
	gpu_priv_sync_locked(g);
	*fp = &g->fns[fn];
	return &g->fns[fn].chans[chid];
}

/* Whether a live channel has nothing left to do: no engine on it, every GP entry it was
 * given consumed (USERD's GP_PUT too: one written without a doorbell counts), no method
 * half done, no semaphore wait, no doorbell pending. A channel whose last turn did work
 * still reads BUSY until its next turn finds nothing: that is idle too. */
static bool mig_chan_idle(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c, unsigned int chid)
{
	uint32_t put;

	if (c->running || c->seg_active || c->acq_waiting || c->gp_get != c->gp_put ||
	    (atomic_load(&f->pending) & VGPU_BIT(chid)))
		return false;
	return !gpu_userd_read_put(g, f, c, f->cfg.part_base, f->cfg.part_size, &put) &&
	       put == c->gp_put;
}

int gpu_chan_mig_save(struct gpu *g, unsigned int fn, unsigned int chid, struct gpu_chan_mig *out)
{
	struct gpu_fn *f;
	struct gpu_chan *c;
	int st, r = 0;

	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	cmn_mutex_lock(&g->lock);
	c = mig_chan_locked(g, fn, chid, &f);
	st = atomic_load(&c->state);
	if (st == GPU_CHAN_STATE_FREE)
		r = -ENOENT;
	else if (c->running || (st != GPU_CHAN_STATE_ERROR &&
				(st == GPU_CHAN_STATE_FAULTED || !mig_chan_idle(g, f, c, chid))))
		r = -EBUSY;
	else
		*out = (struct gpu_chan_mig){ .gp_get = c->gp_get, .gp_put = c->gp_put,
			.state = st == GPU_CHAN_STATE_ERROR ? GPU_CHAN_STATE_ERROR :
				 GPU_CHAN_STATE_IDLE,
			.error = atomic_load(&c->error), .methods = atomic_load(&c->methods) };
	cmn_mutex_unlock(&g->lock);
	return r;
}

/* Whether @in fits channel configuration @pc. Its error is one the device raises, as
 * gpu_chan_error() takes: the status region and the owner's events pass it on as it is. */
static bool mig_chan_ok(const struct gpu_priv_chan *pc, const struct gpu_chan_mig *in)
{
	return in->gp_get < pc->gpfifo_entries && in->gp_put < pc->gpfifo_entries &&
	       (in->state == GPU_CHAN_STATE_IDLE || in->state == GPU_CHAN_STATE_ERROR) &&
	       (in->state == GPU_CHAN_STATE_ERROR) == (in->error != VGPU_CHAN_OK) &&
	       (unsigned int)in->error < VGPU_CHAN_ERR_NR;
}

int gpu_chan_mig_load(struct gpu *g, unsigned int fn, unsigned int chid,
		      const struct gpu_chan_mig *in)
{
	struct gpu_fn *f;
	struct gpu_chan *c;
	int r = 0;

	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	cmn_mutex_lock(&g->lock);
	c = mig_chan_locked(g, fn, chid, &f);
	if (!(f->cfg.chans[chid].flags & GPU_CHAN_ALLOCATED) ||
	    atomic_load(&c->state) == GPU_CHAN_STATE_FREE)
		r = -ENOENT;
	else if (c->running || (f->cfg.chans[chid].flags & GPU_CHAN_ENABLED) ||
		 (f->cfg.runlist[f->cfg.chans[chid].runlist] & VGPU_BIT(chid)))
		r = -EBUSY;
	else if (!mig_chan_ok(&f->cfg.chans[chid], in))
		r = -EINVAL;
	if (!r) {
		gpu_chan_reset_runtime(c);
		c->gp_get = in->gp_get;
		c->gp_put = in->gp_put;
		atomic_store(&c->methods, in->methods);
		atomic_store(&c->pub_gp_get, in->gp_get);
		atomic_store(&c->error, in->error);
		atomic_store(&c->state, in->state);
		atomic_fetch_and(&f->pending, ~VGPU_BIT(chid));
		gpu_status_put(&c->st->gp_get, in->gp_get);
		gpu_status_put(&c->st->gp_put, in->gp_put);
		gpu_status_put(&c->st->error, (uint64_t)in->error);
	}
	cmn_mutex_unlock(&g->lock);
	return r;
}

void gpu_sched_stats_set(struct gpu *g, unsigned int fn, const struct gpu_sched_stats *in)
{
	if (fn >= g->nr_fns)
		return;
	cmn_mutex_lock(&g->lock);
	for (unsigned int e = 0; e < g->nr_engines; e++) {
		struct gpu_sched_stats *t = &g->fns[fn].tel[e];
		uint64_t target = t->target_slice_ns;

		*t = e ? (struct gpu_sched_stats){ 0 } : *in;
		t->target_slice_ns = target;
	}
	cmn_mutex_unlock(&g->lock);
}
