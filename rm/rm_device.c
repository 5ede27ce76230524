// SPDX-License-Identifier: MIT
/* The device: creating the RM and its GSP, VF partitions and quotas, the hardware records
 * (channels, runlists, partitions) that a device reset replays, and VF reset. Every RPC
 * here is made without the API or device lock held: records are read or reserved under
 * the device lock, which is dropped before the GSP is asked. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "common/compiler.h"
#include "common/err.h"
#include "common/log.h"
#include "pma/pma.h"
#include "rm/rm_internal.h"

static int rpc(struct rm *rm, unsigned int fn, uint32_t function, const void *req, size_t len)
{
	rm_dev_sync_release(rm->dev.tsan_sync);	/* the GSP is another process */
	return gsp_call(rm->gsp, fn, function, req, len, NULL, 0, NULL);
}

/* ---- channels ---- */
/* Whether a failed CHAN_ALLOC may have left the channel in the GSP: it timed out (the GSP
 * may run it later), a reset cancelled it after it was sent, its reply was malformed, or
 * the GSP holds an allocation of the id the RM has no record of. */
static bool chan_alloc_doubtful(int ret)
{
	return ret == -ETIMEDOUT || ret == -EIO || ret == -EBADMSG || ret == -EMSGSIZE ||
	       ret == -EEXIST;
}

/* Take free id @chid of @fn (device lock held); true if it is doubtful, so that the GSP
 * must free it first. */
static bool chan_take_locked(struct rm *rm, unsigned int fn, uint32_t chid)
{
	struct rm_fn *f = &rm->fns[fn];
	bool doubtful = f->chans[chid].doubtful;

	rm_dev_assert_held(rm);
	f->chans[chid] = (struct rm_chan_rec){ .used = true, .doubtful = doubtful };
	rm_acct_lock(rm, fn);
	f->chans_used++;
	rm_acct_unlock(rm, fn);
	return doubtful;
}

/* Give id @chid of @fn back; @doubtful: the GSP may hold an allocation of it (so may it
 * if the record says so already: a VF reset the GSP failed). */
static void chan_unreserve(struct rm *rm, unsigned int fn, uint32_t chid, bool doubtful)
{
	struct rm_fn *f = &rm->fns[fn];

	rm_dev_lock(rm);
	for (unsigned int rl = 0; rl < VGPU_ARRAY_SIZE(f->runlist); rl++)
		f->runlist[rl] &= ~(1ull << chid);
	f->chans[chid] = (struct rm_chan_rec){ .doubtful = doubtful || f->chans[chid].doubtful };
	rm_acct_lock(rm, fn);
	f->chans_used--;
	rm_acct_unlock(rm, fn);
	rm_dev_unlock(rm);
}

/* @chid, just reserved, is doubtful: free it in the GSP before it is allocated again, or
 * the GSP refuses every later allocation of it (-EEXIST). The CHAN_FREE goes on the lane
 * of the CHAN_ALLOC it undoes, so the GSP runs it after that one. A channel the RM never
 * bound has never run: nothing to quiesce. -ENOENT: the GSP never made it (or a reset
 * wiped it). On any other error the id is given back, still doubtful. */
static int chan_settle(struct rm *rm, unsigned int fn, uint32_t chid)
{
	struct vgpu_rpc_chan ch = { .fn = fn, .chid = chid };
	int ret = rpc(rm, fn, VGPU_RPC_FN_CHAN_FREE, &ch, sizeof(ch));

	if (ret && ret != -ENOENT) {
		cmn_warn("rm: fn %u channel %u, left by an allocation of unknown outcome, not "
			 "freed in the GSP: %s", fn, chid, cmn_strerror(ret));
		chan_unreserve(rm, fn, chid, true);
		return ret;
	}
	rm_dev_lock(rm);
	rm->fns[fn].chans[chid].doubtful = false;
	rm_dev_unlock(rm);
	return 0;
}

int rm_chan_reserve(struct rm *rm, unsigned int fn, uint32_t runlist, uint32_t *chid)
{
	struct rm_fn *f = &rm->fns[fn];
	bool doubtful = false;
	int ret = -ENOSPC;

	(void)runlist;
	rm_dev_lock(rm);
	if (f->resetting) {
		ret = -EBUSY;
	} else if (f->quota.channels && f->chans_used >= f->quota.channels) {
		ret = -VGPU_EQUOTA;
	} else {
		for (uint32_t i = 0; i < RM_MAX_CHANNELS; i++) {
			if (f->chans[i].used)
				continue;
			doubtful = chan_take_locked(rm, fn, i);
			*chid = i;
			ret = 0;
			break;
		}
	}
	rm_dev_unlock(rm);
	return !ret && doubtful ? chan_settle(rm, fn, *chid) : ret;
}

int rm_chan_reserve_id(struct rm *rm, unsigned int fn, uint32_t chid)
{
	struct rm_fn *f = &rm->fns[fn];
	bool doubtful = false;
	int ret = 0;

	if (chid >= RM_MAX_CHANNELS)
		return -EINVAL;
	rm_dev_lock(rm);
	if (f->resetting)
		ret = -EBUSY;
	else if (f->quota.channels && f->chans_used >= f->quota.channels)
		ret = -VGPU_EQUOTA;
	else if (f->chans[chid].used)
		ret = -EEXIST;
	if (!ret)
		doubtful = chan_take_locked(rm, fn, chid);
	rm_dev_unlock(rm);
	return !ret && doubtful ? chan_settle(rm, fn, chid) : ret;
}

int rm_chan_program(struct rm *rm, unsigned int fn, const struct vgpu_rpc_chan *cfg)
{
	int ret = rpc(rm, fn, VGPU_RPC_FN_CHAN_ALLOC, cfg, sizeof(*cfg));

	if (ret) {
		chan_unreserve(rm, fn, cfg->chid, chan_alloc_doubtful(ret));
		return ret;
	}
	rm_dev_lock(rm);
	rm->fns[fn].chans[cfg->chid].cfg = *cfg;
	rm->fns[fn].chans[cfg->chid].live = true;
	rm_dev_unlock(rm);
	return 0;
}

/* Set @chid's runlist bit and enabled flag in @f's records (device lock held). */
static void runlist_record(struct rm *rm, struct rm_fn *f, uint32_t rl, uint32_t chid, bool on,
			   bool enabled)
{
	rm_dev_assert_held(rm);
	if (on)
		f->runlist[rl] |= 1ull << chid;
	else
		f->runlist[rl] &= ~(1ull << chid);
	f->runlist_gen[rl]++;
	f->chans[chid].enabled = enabled;
}

/* @rl->chans reached the GSP (@force: the GSP may hold anything). Two updates of one
 * runlist compute their bitmaps in turn under the device lock but send them unlocked, so
 * the older bitmap may reach the GSP last (a channel enabled but off its runlist there):
 * while the record differs from what this update last sent, the record is sent again.
 * Whichever RPC the GSP runs last, its sender compares after it ran, so the GSP ends with
 * the record. A resend's failure is logged; the caller's own change went through. */
static void runlist_settle(struct rm *rm, unsigned int fn, struct vgpu_rpc_runlist *rl,
			   bool force)
{
	for (;; force = false) {
		uint64_t now;
		int ret;

		rm_dev_lock(rm);
		now = rm->fns[fn].runlist[rl->runlist];
		rm_dev_unlock(rm);
		if (now == rl->chans && !force)
			return;
		rl->chans = now;
		ret = rpc(rm, fn, VGPU_RPC_FN_RUNLIST_SET, rl, sizeof(*rl));
		if (ret) {
			cmn_warn("rm: fn %u runlist %u not brought up to date in the GSP: %s", fn,
				 rl->runlist, cmn_strerror(ret));
			return;
		}
	}
}

/* Put @chid on or off its runlist and tell the GSP the new bitmap. The record changes
 * first, under the device lock, so that an update of another channel of the runlist made
 * meanwhile sends a bitmap that has this change in it (and runlist_settle() puts the
 * record in the GSP whichever RPC arrives last). If the GSP refuses, the channel's bit and
 * enabled flag go back to what they were: the records (which a device reset replays) keep
 * saying what the GSP has; an update made since this one's record change may have sent
 * the change, so the record is then sent again. A channel freed or reset meanwhile is
 * left as that left it. */
static int runlist_update(struct rm *rm, unsigned int fn, uint32_t chid, bool on)
{
	struct rm_fn *f = &rm->fns[fn];
	struct vgpu_rpc_runlist rl = { .fn = fn };
	bool was_on, was_enabled, others;
	uint64_t gen;
	int ret;

	rm_dev_lock(rm);
	rl.runlist = (uint32_t)f->chans[chid].cfg.runlist;
	was_on = f->runlist[rl.runlist] & (1ull << chid);
	was_enabled = f->chans[chid].enabled;
	runlist_record(rm, f, rl.runlist, chid, on, on);
	gen = f->runlist_gen[rl.runlist];
	rl.chans = f->runlist[rl.runlist];
	rm_dev_unlock(rm);
	ret = rpc(rm, fn, VGPU_RPC_FN_RUNLIST_SET, &rl, sizeof(rl));
	if (!ret) {
		runlist_settle(rm, fn, &rl, false);
		return 0;
	}
	rm_dev_lock(rm);
	others = f->runlist_gen[rl.runlist] != gen;
	if (f->chans[chid].live)
		runlist_record(rm, f, rl.runlist, chid, was_on, was_enabled);
	rm_dev_unlock(rm);
	if (others)
		runlist_settle(rm, fn, &rl, true);
	return ret;
}

/* Undo a CHAN_BIND(1) whose runlist update failed: the record says disabled, so must the
 * GSP, or a device reset would differ from what ran before it. */
static void chan_unbind(struct rm *rm, unsigned int fn, uint32_t chid)
{
	struct vgpu_rpc_chan_enable en = { .fn = fn, .chid = chid, .enable = 0 };
	int ret = rpc(rm, fn, VGPU_RPC_FN_CHAN_BIND, &en, sizeof(en));

	if (ret)
		cmn_warn("rm: fn %u channel %u left enabled off its runlist in the GSP: %s", fn,
			 chid, cmn_strerror(ret));
}

int rm_chan_enable(struct rm *rm, unsigned int fn, uint32_t chid, bool on)
{
	struct vgpu_rpc_chan_enable en = { .fn = fn, .chid = chid, .enable = on };
	bool was_enabled;
	int ret;

	if (!on) {	/* off the runlist first: the scheduler must not pick a disabled channel */
		ret = runlist_update(rm, fn, chid, false);
		return ret ? ret : rpc(rm, fn, VGPU_RPC_FN_CHAN_BIND, &en, sizeof(en));
	}
	rm_dev_lock(rm);
	was_enabled = rm->fns[fn].chans[chid].enabled;
	rm_dev_unlock(rm);
	ret = rpc(rm, fn, VGPU_RPC_FN_CHAN_BIND, &en, sizeof(en));
	if (ret)
		return ret;
	ret = runlist_update(rm, fn, chid, true);
	if (ret && !was_enabled)
		chan_unbind(rm, fn, chid);
	return ret;
}

int rm_chan_bind_vaspace(struct rm *rm, unsigned int fn, uint32_t chid, uint64_t pdb)
{
	struct vgpu_rpc_chan ch = { .fn = fn, .chid = chid, .pdb = pdb };
	int ret;

	rm_dev_lock(rm);
	ret = rm->fns[fn].chans[chid].enabled ? -EBUSY : 0;
	rm_dev_unlock(rm);
	if (ret)
		return ret;
	ret = rpc(rm, fn, VGPU_RPC_FN_VASPACE_BIND, &ch, sizeof(ch));
	if (ret)
		return ret;
	rm_dev_lock(rm);
	rm->fns[fn].chans[chid].cfg.pdb = pdb;
	rm_dev_unlock(rm);
	return 0;
}

/* Wait until no engine runs any of @fn's channels in the bitmap @chans, which the GSP freed
 * (or, for a partition, lost the range of). As real RMs do (preempt + wait): what follows
 * reuses the memory those channels wrote (the guest, a scrub, another function's
 * partition), and a turn still in progress would write into it. */
static void chans_quiesce(struct rm *rm, unsigned int fn, uint64_t chans, const char *why)
{
	for (; chans; chans &= chans - 1) {
		uint32_t chid = cmn_ctz(chans);
		int ret = rm_op(rm, chan_quiesce, fn, chid, VGPU_NSEC_PER_SEC);

		if (ret)
			cmn_warn("rm: fn %u channel %u still running after %s: %s", fn, chid, why,
				  cmn_strerror(ret));
	}
}

/* Fence off @fn's channels in the bitmap @chans, which the GSP failed to free (@why's RPC
 * failed) and may still hold, enabled and on their runlists, until a device reset wipes
 * them or a later free or VF reset goes through; a reset's replay may even restore them
 * from records read before they went. Their memory is reused meanwhile (by the guest, a
 * scrub, the next tenant), so the device runs none of them again; the next allocation of
 * an id, which the GSP makes only once it freed the old one, is not fenced. */
static void chans_fence(struct rm *rm, unsigned int fn, uint64_t chans, const char *why)
{
	for (; chans; chans &= chans - 1) {
		uint32_t chid = cmn_ctz(chans);
		int ret = rm_op(rm, chan_fence, fn, chid);

		if (ret)
			cmn_warn("rm: fn %u channel %u not fenced after a failed %s: %s", fn, chid,
				 why, cmn_strerror(ret));
	}
}

void rm_chan_release(struct rm *rm, unsigned int fn, uint32_t chid)
{
	struct vgpu_rpc_chan ch = { .fn = fn, .chid = chid };
	bool live;
	int ret = 0;

	rm_dev_lock(rm);
	live = rm->fns[fn].chans[chid].live;
	rm_dev_unlock(rm);
	/* Freeing drops it from its runlist in the hardware too. After a failed RPC the
	 * channel is fenced off (chans_fence()) and the record goes all the same, the id
	 * doubtful (freed in the GSP before its reuse). The free returns once no engine can
	 * touch the channel, so the guest may reuse its memory at once. */
	if (live) {
		ret = rpc(rm, fn, VGPU_RPC_FN_CHAN_FREE, &ch, sizeof(ch));
		if (ret) {
			cmn_warn("rm: fn %u channel %u free: %s", fn, chid, cmn_strerror(ret));
			chans_fence(rm, fn, 1ull << chid, "free");
		}
		chans_quiesce(rm, fn, 1ull << chid, "free");
	}
	chan_unreserve(rm, fn, chid, ret && ret != -ENOENT);
}

/* ---- VRAM slices: the GSP maps and scrubs them ---- */
/* Give the GSP @fn's slice memfd if the owner backed the slice with one. */
static void slice_send(struct rm *rm, struct gsp *g, unsigned int fn, uint64_t size)
{
	int fd = rm_op(rm, slice_fd, fn), ret;

	if (fd < 0)
		return;		/* no slice memfd: VRAM stays in the device memfd, the RM scrubs */
	ret = gsp_slice_send(g, fn, fd, size);
	if (ret)
		cmn_warn("rm: fn %u's VRAM slice to the GSP: %s", fn, cmn_strerror(ret));
}

/* Scrub @fn's slice: by the GSP where it holds the slice memfd, else the owner zeroes the
 * range in the device memfd, which the GSP does not map. The GSP punches at about 200 ms a
 * GiB and serves a lane's RPCs one at a time, so the slice goes in RM_SCRUB_CHUNK RPCs:
 * the other functions on the lane have theirs served between two (one RPC for 16 GiB would
 * hold them for seconds, past their deadlines). What a failed chunk leaves, the owner zeroes. */
static void slice_scrub(struct rm *rm, unsigned int fn)
{
	uint64_t size = rm->fns[fn].size, off;

	for (off = 0; off < size; off += RM_SCRUB_CHUNK) {
		struct vgpu_rpc_scrub sc = { .fn = fn, .offset = off,
			.size = cmn_min(size - off, RM_SCRUB_CHUNK) };

		if (rpc(rm, fn, VGPU_RPC_FN_SCRUB, &sc, sizeof(sc)))
			break;
	}
	if (off < size)
		rm_op(rm, vram_scrub, rm->fns[fn].base + off, size - off);
}

/* ---- scheduler ---- */
int rm_sched_set(struct rm *rm, uint32_t policy, uint64_t quantum_ns)
{
	struct vgpu_rpc_sched s = { .policy = policy, .quantum_ns = quantum_ns };
	int ret;

	if (!rm || policy < RM_SCHED_FIRST || policy > RM_SCHED_LAST)
		return -EINVAL;
	rm_rcu_enter();
	ret = rpc(rm, 0, VGPU_RPC_FN_SCHED_SET, &s, sizeof(s));
	if (ret)
		return ret;
	rm_dev_lock(rm);
	rm->sched = s;
	rm->sched_set = true;
	rm_dev_unlock(rm);
	return 0;
}

int rm_fn_sched_set(struct rm *rm, unsigned int fn, bool enabled, uint64_t quantum_ns,
		    uint64_t preempt_timeout_ns, uint64_t weight)
{
	struct vgpu_rpc_sched_fn s = { .fn = fn, .enabled = enabled, .quantum_ns = quantum_ns,
		.preempt_timeout_ns = preempt_timeout_ns, .weight = weight };
	int ret;

	if (!rm || fn >= rm->nr_fns || weight > 1000)
		return -EINVAL;
	rm_rcu_enter();
	ret = rpc(rm, 0, VGPU_RPC_FN_SCHED_FN_SET, &s, sizeof(s));
	if (ret)
		return ret;
	rm_dev_lock(rm);
	rm->fns[fn].sched = s;
	rm->fns[fn].sched_set = true;
	rm_dev_unlock(rm);
	return 0;
}

/* ---- device reset: replay the hardware state from the records ---- */
struct replay_snap {
	bool sched_set, fn_sched_set[RM_MAX_FNS];
	uint64_t wd_ns[RM_MAX_FNS];
	struct vgpu_rpc_sched sched;
	struct vgpu_rpc_sched_fn fn_sched[RM_MAX_FNS];
	bool active[RM_MAX_FNS];
	uint64_t base[RM_MAX_FNS], size[RM_MAX_FNS];
	struct rm_chan_rec chans[RM_MAX_FNS][RM_MAX_CHANNELS];
	uint64_t runlist[RM_MAX_FNS][4];
};

static int rm_replay(void *ctx, struct gsp *g)
{
	struct rm *rm = ctx;
	struct replay_snap *s = malloc(sizeof(*s));
	int ret = 0, r;

	if (!s)
		return -ENOMEM;
	rm_dev_lock(rm);
	s->sched_set = rm->sched_set;
	s->sched = rm->sched;
	for (unsigned int fn = 0; fn < rm->nr_fns; fn++) {
		s->fn_sched_set[fn] = rm->fns[fn].sched_set;
		s->fn_sched[fn] = rm->fns[fn].sched;
		s->wd_ns[fn] = rm->fns[fn].wd_ns;
		s->active[fn] = rm->fns[fn].active && fn;
		s->base[fn] = rm->fns[fn].base;
		s->size[fn] = rm->fns[fn].size;
		memcpy(s->chans[fn], rm->fns[fn].chans, sizeof(s->chans[fn]));
		memcpy(s->runlist[fn], rm->fns[fn].runlist, sizeof(s->runlist[fn]));
	}
	rm_dev_unlock(rm);
	if (s->sched_set)
		ret = gsp_call(g, 0, VGPU_RPC_FN_SCHED_SET, &s->sched, sizeof(s->sched), NULL, 0, NULL);
	for (unsigned int fn = 0; fn < rm->nr_fns; fn++) {
		if (s->fn_sched_set[fn]) {
			r = gsp_call(g, 0, VGPU_RPC_FN_SCHED_FN_SET, &s->fn_sched[fn],
				     sizeof(s->fn_sched[fn]), NULL, 0, NULL);
			ret = ret ? ret : r;
		}
		if (s->wd_ns[fn]) {
			struct vgpu_rpc_watchdog w = { .fn = fn, .timeout_ns = s->wd_ns[fn] };

			r = gsp_call(g, 0, VGPU_RPC_FN_WATCHDOG_SET, &w, sizeof(w), NULL, 0, NULL);
			ret = ret ? ret : r;
		}
		if (s->active[fn]) {
			struct vgpu_rpc_partition pt = { .fn = fn, .base = s->base[fn], .size = s->size[fn] };
			r = gsp_call(g, 0, VGPU_RPC_FN_PARTITION_SET, &pt, sizeof(pt), NULL, 0, NULL);
			ret = ret ? ret : r;
			slice_send(rm, g, fn, s->size[fn]);
		}
		for (unsigned int ch = 0; ch < RM_MAX_CHANNELS; ch++) {
			struct rm_chan_rec *c = &s->chans[fn][ch];
			struct vgpu_rpc_chan_enable en = { .fn = fn, .chid = ch, .enable = 1 };
			if (!c->live)
				continue;
			/* Restored, not started over: the work in flight runs exactly once. */
			c->cfg.flags |= RM_CHAN_RESTORE;
			r = gsp_call(g, 0, VGPU_RPC_FN_CHAN_ALLOC, &c->cfg, sizeof(c->cfg), NULL, 0, NULL);
			if (!r && c->enabled)
				r = gsp_call(g, 0, VGPU_RPC_FN_CHAN_BIND, &en, sizeof(en), NULL, 0, NULL);
			ret = ret ? ret : r;
		}
		for (unsigned int rl = 0; rl < rm->nr_engines && rl < 4; rl++) {
			struct vgpu_rpc_runlist l = { .fn = fn, .runlist = rl, .chans = s->runlist[fn][rl] };
			if (!l.chans)
				continue;
			r = gsp_call(g, 0, VGPU_RPC_FN_RUNLIST_SET, &l, sizeof(l), NULL, 0, NULL);
			ret = ret ? ret : r;
		}
	}
	free(s);
	atomic_fetch_add(&rm->gsp_resets, 1);
	if (rm->cfg.notify)
		for (unsigned int fn = 0; fn < rm->nr_fns; fn++)
			if (fn == 0 || rm->fns[fn].active)
				rm->cfg.notify(rm->cfg.notify_ctx, fn, RM_NOTIFY_DEVICE_RESET);
	return ret;
}

/* ---- partitions and quotas ---- */
static int partition_check(struct rm *rm, unsigned int fn, const struct rm_partition *p)
{
	if (!rm || !p || !fn || fn >= rm->nr_fns || !p->size || (p->base | p->size) % RM_VRAM_ALIGN ||
	    p->base + p->size > rm->dev.vram_size || p->base + p->size < p->base ||
	    (p->quota.vram && p->quota.vram > p->size) || (!p->dma) != (!p->dma_domain))
		return -EINVAL;
	return 0;
}

int rm_vf_partition_set(struct rm *rm, unsigned int fn, const struct rm_partition *p)
{
	struct vgpu_rpc_partition pt;
	struct rm_fn *f;
	struct pma *child;
	uint64_t *sys_map = NULL;
	size_t chunks = 0;
	int ret = partition_check(rm, fn, p);

	if (ret)
		return ret;
	f = &rm->fns[fn];
	rm_rcu_enter();
	rm_dev_lock(rm);
	ret = f->active ? -EEXIST : f->busy ? -EBUSY : 0;
	f->busy = !ret;
	rm_dev_unlock(rm);
	if (ret)
		return ret;
	child = pma_child_create(rm->cfg.pma, p->base, p->size, NULL, &ret);
	if (!child)
		goto unbusy;
	if (p->dma) {
		chunks = rm_op(rm, dma_size, p->dma) / (64 << 10);
		sys_map = calloc((chunks + 63) / 64 + 1, sizeof(uint64_t));
		if (!sys_map) {
			ret = -ENOMEM;
			goto destroy_child;
		}
	}
	pt = (struct vgpu_rpc_partition){ .fn = fn, .base = p->base, .size = p->size };
	ret = rpc(rm, 0, VGPU_RPC_FN_PARTITION_SET, &pt, sizeof(pt));
	if (ret)
		goto free_map;
	rm_dev_lock(rm);
	f->base = p->base;
	f->size = p->size;
	f->pma = child;
	rm_acct_lock(rm, fn);
	f->quota = p->quota;
	rm_acct_unlock(rm, fn);
	f->dma = p->dma;
	f->dma_domain = p->dma_domain;
	f->sys_map = sys_map;
	f->sys_chunks = chunks;
	f->active = true;
	f->busy = false;
	rm_dev_unlock(rm);
	slice_send(rm, rm->gsp, fn, p->size);
	return 0;
free_map:
	free(sys_map);
destroy_child:
	pma_child_destroy(child);
unbusy:
	rm_dev_lock(rm);
	f->busy = false;
	rm_dev_unlock(rm);
	cmn_err("rm: partition of fn %u: %s", fn, cmn_strerror(ret));
	return ret;
}

int rm_vf_partition_clear(struct rm *rm, unsigned int fn)
{
	struct vgpu_rpc_fnarg fa = { .fn = fn };
	struct rm_fn *f;
	int ret;

	if (!rm || !fn || fn >= rm->nr_fns)
		return -EINVAL;
	f = &rm->fns[fn];
	rm_dev_lock(rm);
	ret = !f->active ? -ENOENT : f->busy || f->nr_clients ? -EBUSY : 0;
	if (!ret) {
		f->busy = true;
		f->active = false;
	}
	rm_dev_unlock(rm);
	if (ret)
		return ret;
	gsp_slice_send(rm->gsp, fn, -1, 0);
	ret = rpc(rm, 0, VGPU_RPC_FN_PARTITION_CLEAR, &fa, sizeof(fa));
	if (ret)
		cmn_warn("rm: clearing fn %u's partition in the GSP: %s", fn, cmn_strerror(ret));
	/* The range goes back to the device allocator, for another function's partition: no
	 * channel of this one may still be in a turn then. A reset quiesced the channels it
	 * freed; every id is waited for here, as one that outran that wait (or that the RM no
	 * longer has a record of) writes there as well. A channel that is not running costs
	 * one look. */
	chans_quiesce(rm, fn, ~0ull, "partition clear");
	pma_child_destroy(f->pma);
	free(f->sys_map);
	rm_dev_lock(rm);
	f->pma = NULL;
	f->sys_map = NULL;
	f->dma = NULL;
	f->dma_domain = NULL;
	f->base = f->size = 0;
	f->busy = false;
	rm_dev_unlock(rm);
	return 0;
}

int rm_quota_set(struct rm *rm, unsigned int fn, const struct rm_quota *q)
{
	struct rm_fn *f;
	int ret = 0;

	if (!rm || !q || fn >= rm->nr_fns)
		return -EINVAL;
	f = &rm->fns[fn];
	rm_dev_lock(rm);
	rm_acct_lock(rm, fn);
	if ((q->vram && q->vram < f->vram_used) || (q->sysmem && q->sysmem < f->sysmem_used) ||
	    (q->channels && q->channels < f->chans_used) || (q->clients && q->clients < f->nr_clients) ||
	    (q->objects && q->objects < f->objs_used))
		ret = -EBUSY;
	else if (fn && q->vram > f->size)
		ret = -EINVAL;
	else
		f->quota = *q;
	rm_acct_unlock(rm, fn);
	rm_dev_unlock(rm);
	return ret;
}

/* ---- VF reset: two-phase teardown ---- */
int rm_vf_disable(struct rm *rm, unsigned int fn)
{
	struct vgpu_rpc_fnarg fa = { .fn = fn };
	struct rm_client **list = NULL;
	uint64_t live = 0;
	struct rm_fn *f;
	size_t n = 0;
	int ret;

	if (!rm || fn >= rm->nr_fns)
		return -EINVAL;
	f = &rm->fns[fn];
	rm_rcu_enter();
	rm_api_write(rm, fn);
	rm_dev_lock(rm);
	list = calloc(f->nr_clients + 1, sizeof(*list));
	/* A client made once the API lock is let go is not disabled: a channel of it the
	 * GSP's VF_RESET might or might not drop would be marked not live below. */
	f->resetting = list != NULL;
	if (list)
		for (struct cmn_list *l = f->clients.next; l != &f->clients; l = l->next) {
			list[n] = cmn_container_of(l, struct rm_client, fn_link);
			atomic_fetch_add(&list[n++]->refs, 1);
		}
	rm_dev_unlock(rm);
	/* Under the API write lock no call is between lookup and client lock; taking each
	 * client's lock waits for the calls that already hold one. */
	for (size_t i = 0; i < n; i++) {
		rm_client_lock(list[i]);
		list[i]->disabled = true;
		rm_client_unlock(list[i]);
		rm_client_put(list[i]);
	}
	rm_api_unlock(rm, fn);
	free(list);
	if (!list)
		return -ENOMEM;
	/* The GSP drops every channel and runlist entry: doorbells of the VF now name no
	 * channel and are counted as invalid by the device. */
	ret = fn ? rpc(rm, 0, VGPU_RPC_FN_VF_RESET, &fa, sizeof(fa)) : 0;
	rm_dev_lock(rm);
	for (unsigned int i = 0; i < RM_MAX_CHANNELS && fn; i++) {
		if (f->chans[i].live)
			live |= 1ull << i;
		/* The GSP may still hold them after a failed RPC: freed there before reuse. */
		f->chans[i].doubtful |= ret && f->chans[i].live;
		f->chans[i].live = false;
		f->chans[i].enabled = false;
	}
	if (fn)
		memset(f->runlist, 0, sizeof(f->runlist));
	f->resetting = false;
	rm_dev_unlock(rm);
	if (ret)
		chans_fence(rm, fn, live, "VF reset");
	/* Not live any more, so freeing the objects does not quiesce them (rm_chan_release()):
	 * the engines are waited for here, before the caller frees their memory and scrubs the
	 * slice. Fenced after a failed RPC, none of them runs again once stopped. */
	chans_quiesce(rm, fn, live, "VF reset");
	return ret;
}

static struct rm_client *first_disabled(struct rm *rm, struct rm_fn *f)
{
	struct rm_client *c = NULL;

	rm_dev_lock(rm);
	for (struct cmn_list *l = f->clients.next; l != &f->clients; l = l->next) {
		struct rm_client *x = cmn_container_of(l, struct rm_client, fn_link);
		if (x->disabled) {
			c = x;
			atomic_fetch_add(&c->refs, 1);
			break;
		}
	}
	rm_dev_unlock(rm);
	return c;
}

int rm_vf_free_disabled(struct rm *rm, unsigned int fn, unsigned int budget)
{
	unsigned int freed = 0;
	struct rm_client *c;
	bool done;

	if (!rm || fn >= rm->nr_fns || !budget)
		return -EINVAL;
	rm_rcu_enter();
	rm_api_read(rm, fn);
	while (freed < budget && (c = first_disabled(rm, &rm->fns[fn]))) {
		rm_client_lock(c);
		if (c->dead) {
			rm_client_unlock(c);
		} else {
			freed += rm_res_free_tree(c, &c->root, budget - freed, &done);
			if (done)
				rm_client_destroy_locked(c);
			else
				rm_client_unlock(c);
		}
		rm_client_put(c);
	}
	c = first_disabled(rm, &rm->fns[fn]);
	rm_api_unlock(rm, fn);
	if (c) {
		rm_client_put(c);
		return -EINPROGRESS;
	}
	return 0;
}

int rm_vf_reset(struct rm *rm, unsigned int fn)
{
	int ret = rm_vf_disable(rm, fn), r;

	if (ret && ret != -ENOTRECOVERABLE && ret != -EIO && ret != -ETIMEDOUT)
		return ret;
	/* Between batches no RM lock is held: other functions' calls (and this one's new
	 * clients) run while a large teardown is in progress. */
	for (unsigned int batch = 1;
	     (r = rm_vf_free_disabled(rm, fn, rm->cfg.free_batch)) == -EINPROGRESS; batch++)
		if (rm->cfg.teardown_batch)
			rm->cfg.teardown_batch(rm->cfg.notify_ctx, fn, batch);
	if (fn && rm->fns[fn].active)
		slice_scrub(rm, fn);
	if (rm->cfg.notify)
		rm->cfg.notify(rm->cfg.notify_ctx, fn, RM_NOTIFY_VF_RESET);
	return ret ? ret : r;
}

/* ---- lifetime ---- */
static bool ops_complete(const struct rm_device_ops *o)
{
	return o && o->info && o->priv_handover && o->slice_fd && o->vram_scrub &&
	       o->chan_quiesce && o->chan_fence && o->chan_error && o->chan_submit &&
	       o->fault_replay && o->dma_size && o->dma_map && o->dma_unmap;
}

static int rm_cfg_fill(struct rm *rm, const struct rm_config *cfg)
{
	if (!cfg || !ops_complete(cfg->ops) || !cfg->pma)
		return -EINVAL;
	rm->cfg = *cfg;
	if (cfg->gsp)
		rm->gsp_cfg = *cfg->gsp;
	rm->cfg.gsp = &rm->gsp_cfg;
	if (!rm->cfg.max_clients)
		rm->cfg.max_clients = 1024;
	if (!rm->cfg.max_objects)
		rm->cfg.max_objects = 4096;
	if (!rm->cfg.free_batch)
		rm->cfg.free_batch = 64;
	if (rm->cfg.max_clients >= 0xfffff || rm->cfg.max_objects > VGPU_RM_HANDLE_RANGE)
		return -EINVAL;
	rm_op(rm, info, &rm->dev);
	if (!rm->dev.nr_fns || rm->dev.nr_fns > RM_MAX_FNS || !rm->dev.nr_engines ||
	    rm->dev.nr_engines > VGPU_ARRAY_SIZE(rm->fns[0].runlist))
		return -EINVAL;
	rm->nr_fns = rm->dev.nr_fns;
	rm->nr_engines = rm->dev.nr_engines;
	return 0;
}

int rm_device_create(const struct rm_config *cfg, struct rm **out)
{
	/* Aligned: each function's state has cache lines of its own. */
	struct rm *rm = aligned_alloc(_Alignof(struct rm), cmn_align_up(sizeof(struct rm),
								     _Alignof(struct rm)));
	struct gsp_config gc;
	int ret;

	if (!rm)
		return -ENOMEM;
	memset(rm, 0, sizeof(*rm));
	ret = rm_cfg_fill(rm, cfg);
	if (ret)
		goto free_rm;
	rm_rcu_enter();
	cmn_mutex_init(&rm->dev_lock);
	for (unsigned int fn = 0; fn < RM_MAX_FNS; fn++) {
		pthread_rwlock_init(&rm->fns[fn].api_lock, NULL);
		cmn_mutex_init(&rm->fns[fn].acct_lock);
	}
	rm->clients = cds_lfht_new_flavor(256, 256, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
					  &urcu_memb_flavor, NULL);
	ret = rm->clients ? 0 : -ENOMEM;
	for (unsigned int fn = 0; fn < rm->nr_fns && !ret; fn++) {
		cmn_list_init(&rm->fns[fn].clients);
		rm->fns[fn].client_map = calloc((rm->cfg.max_clients + 63) / 64, sizeof(uint64_t));
		ret = rm->fns[fn].client_map ? 0 : -ENOMEM;
	}
	if (ret)
		goto free_tables;
	rm->fns[0].active = true;
	rm->fns[0].size = rm->dev.vram_size;
	rm->fns[0].pma = cfg->pma;
	gc = rm->gsp_cfg;
	gc.priv_fd = rm->dev.priv_fd;
	gc.kick_fd = rm->dev.kick_fd;
	gc.status_fd = rm->dev.status_fd;
	gc.nr_fns = rm->nr_fns;
	gc.event_cb = rm_gsp_event;
	gc.idle_cb = rm_gsp_idle;
	gc.reset_cb = rm_replay;
	gc.ctx = rm;
	ret = gsp_start(&gc, &rm->gsp);
	if (ret)
		goto free_tables;
	/* Only the GSP programs the hardware: this process keeps a read-only view. A GSP
	 * restart maps the region from the memfd again, so nothing here needs the writer. */
	rm_op(rm, priv_handover);
	*out = rm;
	return 0;
free_tables:
	for (unsigned int fn = 0; fn < rm->nr_fns; fn++)
		free(rm->fns[fn].client_map);
	if (rm->clients)
		cds_lfht_destroy(rm->clients, NULL);
free_rm:
	free(rm);
	return ret;
}

void rm_device_destroy(struct rm *rm)
{
	if (!rm)
		return;
	for (unsigned int fn = 0; fn < rm->nr_fns; fn++) {
		rm_vf_disable(rm, fn);
		while (rm_vf_free_disabled(rm, fn, 1u << 30) == -EINPROGRESS)
			;
		if (fn && rm->fns[fn].active)
			rm_vf_partition_clear(rm, fn);
	}
	gsp_stop(rm->gsp);
	urcu_memb_barrier();	/* every deferred free has run */
	cds_lfht_destroy(rm->clients, NULL);
	for (unsigned int fn = 0; fn < rm->nr_fns; fn++)
		free(rm->fns[fn].client_map);
	cmn_mutex_destroy(&rm->dev_lock);
	for (unsigned int fn = 0; fn < RM_MAX_FNS; fn++) {
		pthread_rwlock_destroy(&rm->fns[fn].api_lock);
		cmn_mutex_destroy(&rm->fns[fn].acct_lock);
	}
	free(rm);
}

struct gsp *rm_gsp(struct rm *rm)
{
	return rm->gsp;
}

struct pma *rm_vf_pma(struct rm *rm, unsigned int fn)
{
	struct pma *p = NULL;

	if (!rm || fn >= rm->nr_fns)
		return NULL;
	rm_dev_lock(rm);
	if (rm->fns[fn].active)
		p = rm->fns[fn].pma;
	rm_dev_unlock(rm);
	return p;
}

uint64_t rm_object_count(struct rm *rm, unsigned int fn)
{
	return fn < rm->nr_fns ? atomic_load(&rm->fns[fn].nr_objects) : 0;
}
