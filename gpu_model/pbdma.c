// SPDX-License-Identifier: MIT
/* Host/PBDMA: fetches GP entries and pushbuffer methods of one channel and executes them
 * (copy, compute and semaphore engines share this path). Every method is restartable: its
 * progress lives in the channel, so a preemption or a replayable fault resumes it where
 * it stopped. */
#include <errno.h>
#include <string.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/log.h"
#include "gpu_model/gpu_internal.h"
#include "iommu_model/iommu.h"

enum mres {
	M_DONE,
	M_YIELD,	/* slice over mid-method; progress kept */
	M_BLOCKED,	/* semaphore not yet satisfied */
	M_FAULT,	/* access fault, details in ctx */
	M_ERROR,	/* channel error already raised */
};

static const int method_nargs[VGPU_M_NR] = {
	[VGPU_M_NOP] = -1,		[VGPU_M_SEM_RELEASE] = 5,	[VGPU_M_SEM_ACQUIRE] = 6,
	[VGPU_M_COPY] = 6,		[VGPU_M_FILL] = 5,		[VGPU_M_MMU_INVALIDATE] = 5,
	[VGPU_M_TIMESTAMP] = 2,		[VGPU_M_REDUCE_ADD_U32] = 5,	[VGPU_M_AXPY_F32] = 6,
};

/* Work units per unit of a method's progress (bytes or elements): bytes read and written,
 * and GPU_COST_ELEM per element computed (see GPU_COST_METHOD). */
static const uint64_t method_cost[VGPU_M_NR] = {
	[VGPU_M_COPY] = 2,	[VGPU_M_FILL] = 1,	[VGPU_M_REDUCE_ADD_U32] = 4 + GPU_COST_ELEM,
	[VGPU_M_AXPY_F32] = 12 + GPU_COST_ELEM,
};

static uint64_t u64_of(const uint32_t *a)
{
	return (uint64_t)a[0] | (uint64_t)a[1] << 32;
}

void gpu_chan_reset_runtime(struct gpu_chan *c)
{
	c->gp_get = c->gp_put = 0;
	c->gp_cache_idx = c->gp_cache_n = 0;
	c->seg_active = c->seg_inline = false;
	c->mthd_held = false;
	c->progress = c->acc = 0;
	c->acq_waiting = false;
	c->userd_dirty = false;
	c->took_early = false;
	c->pf.gen = 0;
	for (unsigned int i = 0; i < GPU_PF_NR; i++)
		atomic_store_explicit(&c->pf.line[i], 0, memory_order_relaxed);
	atomic_store(&c->state, GPU_CHAN_STATE_IDLE);
	atomic_store(&c->error, VGPU_CHAN_OK);
	atomic_store(&c->methods, 0);
	atomic_store(&c->pub_gp_get, 0);
	if (c->st) {	/* a new allocation: no error, no progress */
		gpu_status_put(&c->st->error, VGPU_CHAN_OK);
		gpu_status_put(&c->st->gp_get, 0);
		gpu_status_put(&c->st->gp_put, 0);
	}
}

/* Take allocation @pc for @c, with the engines off it (g->lock). A restore of the
 * allocation the device ran (GPU_CHAN_RESTORE, same gen: the privileged write kept it
 * because the geometry matched) keeps everything the engines knew: GP_GET and GP_PUT, the
 * segment and the method in progress with its partial result, a semaphore wait, an error;
 * so a device reset neither re-executes nor drops work. GP_PUT is read again (doorbells
 * rung while the channel was gone were dropped). A restore refused for other geometry (the
 * next gen) of an allocation the device ran cannot continue its work: it starts over in
 * error (DEVICE_RESET), so the guest learns its work may be lost. Anything else is a new
 * channel at GP_GET 0 (a restore of an allocation the device never ran included: none of
 * its work had started). */
void gpu_chan_adopt(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c,
		    const struct gpu_priv_chan *pc)
{
	bool restore = pc->flags & GPU_CHAN_RESTORE;
	bool keep = restore && c->cfg_gen == pc->gen && gpu_chan_same_geometry(&c->cfg, pc) &&
		    !((c->cfg.flags ^ pc->flags) & GPU_CHAN_REPLAYABLE);
	bool lost = restore && !keep && c->cfg_gen &&
		    (c->cfg_gen == pc->gen || c->cfg_gen + 1 == pc->gen);

	cmn_mutex_assert_held(&g->lock);
	if (keep) {
		if (atomic_load(&c->state) == GPU_CHAN_STATE_FREE)
			atomic_store(&c->state, c->state_at_free);
		atomic_fetch_or(&f->pending, VGPU_BIT(c - f->chans));
	} else {
		gpu_chan_reset_runtime(c);
	}
	c->state_at_free = GPU_CHAN_STATE_IDLE;
	c->cfg_gen = pc->gen;
	c->cfg = *pc;
	if (lost)
		gpu_chan_set_error(g, f, c, f->cfg.part_base, f->cfg.part_size,
				   VGPU_CHAN_ERR_DEVICE_RESET, 0xffffffffu);
}

int gpu_userd_read_put(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c,
		       uint64_t part_base, uint64_t part_size, uint32_t *put)
{
	return gpu_phys_rw(g, f->id, part_base, part_size, c->cfg.userd_aper,
			   c->cfg.userd_addr + VGPU_USERD_GP_PUT, put, 4, false);
}

static void userd_write32(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c, uint64_t pb,
			  uint64_t ps, uint32_t off, uint32_t v)
{
	gpu_phys_rw(g, f->id, pb, ps, c->cfg.userd_aper, c->cfg.userd_addr + off, &v, 4, true);
}

/* Error notifier: the USERD error block (error word last), the interrupt, the state. */
void gpu_chan_set_error(struct gpu *g, struct gpu_fn *f, struct gpu_chan *c,
			uint64_t part_base, uint64_t part_size, enum vgpu_chan_error err,
			uint32_t method)
{
	uint64_t now = cmn_now_ns();

	atomic_store(&c->error, err);
	atomic_store(&c->state, GPU_CHAN_STATE_ERROR);
	atomic_fetch_and(&f->pending, ~VGPU_BIT(c - f->chans));
	userd_write32(g, f, c, part_base, part_size, 0x48, c->gp_get);
	userd_write32(g, f, c, part_base, part_size, 0x4c, method);
	userd_write32(g, f, c, part_base, part_size, 0x50, (uint32_t)now);
	userd_write32(g, f, c, part_base, part_size, 0x54, (uint32_t)(now >> 32));
	userd_write32(g, f, c, part_base, part_size, VGPU_USERD_ERROR, err);
	gpu_status_put(&c->st->error, (uint64_t)err);
	gpu_status_put(&c->st->gp_get, c->gp_get);
	gpu_status_bump(g, &c->st->errors);
	gpu_intr_raise(g, f, VGPU_INTR_CHAN_ERROR);
	cmn_info("gpu: function %u channel %td: error %d at GP %u", f->id, c - f->chans, err,
		  c->gp_get);
}

static enum mres ctx_error(struct gpu_ctx *ctx, enum vgpu_chan_error err, uint32_t method)
{
	gpu_chan_set_error(ctx->g, ctx->f, ctx->c, ctx->part_base, ctx->part_size, err, method);
	return M_ERROR;
}

/* A method's access faulted: stall for replay, or error the channel. */
static enum mres ctx_fault(struct gpu_ctx *ctx, uint32_t method)
{
	bool replayable = ctx->c->cfg.flags & GPU_CHAN_REPLAYABLE;

	if (replayable) {
		gpu_fault_record(ctx, true);	/* stalls the channel: see there */
		return M_FAULT;
	}
	gpu_fault_record(ctx, false);
	return ctx_error(ctx, ctx->fault_reason == VGPU_FAULT_IOMMU ? VGPU_CHAN_ERR_IOMMU_FAULT
								   : VGPU_CHAN_ERR_MMU_FAULT, method);
}

/* Has the turn's channel lost its allocation (freed by the GSP: its own free, a VF reset,
 * a device reset's wipe; or allocated anew), been fenced off by the owner (gpu_chan_fence())
 * or its function's partition changed since the turn began? Such a turn stops at its next
 * method or chunk, with its progress kept (a restore continues it): what it wrote from then
 * on would land in memory the guest reuses, in a slice being scrubbed or, once the range is
 * handed on, in another function's VRAM. gpu_chan_quiesce() waits for it to stop, however
 * long the slice. Two loads while nothing changed; the record's words only when the
 * privileged generation moved. Entries the turn put in its engine's TLB from an old
 * partition go too: the invalidation the change queued (sync_fn_locked()) may have run
 * before them. */
static bool chan_gone(struct gpu_ctx *ctx)
{
	uint64_t gen = __atomic_load_n(&ctx->g->priv->gen, __ATOMIC_ACQUIRE);
	uint64_t fences = atomic_load_explicit(&ctx->g->fences, memory_order_acquire);
	struct gpu_priv_turn r;

	if (ctx->gone || (gen == ctx->priv_gen && fences == ctx->fences))
		return ctx->gone;
	ctx->fences = fences;
	ctx->gone = gpu_chan_fenced(ctx->f, ctx->chid, ctx->c->cfg_gen);
	if (gen == ctx->priv_gen)
		return ctx->gone;
	ctx->priv_gen = gen;
	gpu_priv_snapshot_turn(ctx->g->priv, ctx->f->id, ctx->chid, &r);
	if (r.part_base != ctx->part_base || r.part_size != ctx->part_size) {
		gpu_tlb_drop_fn(ctx);
		ctx->gone = true;
	}
	if (!(r.chan_flags & GPU_CHAN_ALLOCATED) || r.chan_gen != ctx->c->cfg_gen)
		ctx->gone = true;
	return ctx->gone;
}

/* End the turn: the channel is gone, the slice is over, or it ran its minimum quantum and
 * a doorbell came in (it may be a function owed time: the scheduler decides). */
static bool slice_over(struct gpu_ctx *ctx)
{
	uint64_t now;

	if (chan_gone(ctx))
		return true;
	now = gpu_engine_now(ctx->e);
	return now >= ctx->e->slot_end || (now >= ctx->e->yield_at && gpu_doorbell_any(ctx->g));
}

/* ---- methods ---- */

static enum mres m_sem_release(struct gpu_ctx *ctx, const uint32_t *a)
{
	uint64_t va = u64_of(a), flags = a[4];
	unsigned int size = flags & VGPU_SEM_64 ? 8 : 4;

	if (va & (size - 1) || flags & ~(uint64_t)(VGPU_SEM_64 | VGPU_SEM_INTR))
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_SEM_RELEASE);
	if (gpu_va_store(ctx, va, size, u64_of(a + 2)))
		return M_FAULT;
	if (flags & VGPU_SEM_INTR)
		gpu_intr_raise(ctx->g, ctx->f, VGPU_INTR_SEMAPHORE);
	return M_DONE;
}

static enum mres m_sem_acquire(struct gpu_ctx *ctx, const uint32_t *a)
{
	struct gpu_chan *c = ctx->c;
	uint64_t va = u64_of(a), want = u64_of(a + 2), flags = a[4], val;
	unsigned int size = flags & VGPU_SEM_64 ? 8 : 4;
	bool ok;

	if (va & (size - 1) || flags & ~(uint64_t)(VGPU_SEM_64 | VGPU_SEM_EQ))
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_SEM_ACQUIRE);
	if (!c->acq_waiting) {
		c->acq_deadline = cmn_now_ns() + (a[5] ? a[5] * VGPU_NSEC_PER_USEC : GPU_DEFAULT_SEM_TO);
		c->acq_waiting = true;
	}
	if (gpu_va_load(ctx, va, size, &val))
		return M_FAULT;
	if (size == 4)
		want &= 0xffffffffu;
	ok = flags & VGPU_SEM_EQ ? val == want : val >= want;
	if (ok) {
		c->acq_waiting = false;
		return M_DONE;
	}
	if (cmn_now_ns() >= c->acq_deadline) {
		c->acq_waiting = false;
		return ctx_error(ctx, VGPU_CHAN_ERR_SEM_TIMEOUT, VGPU_M_SEM_ACQUIRE);
	}
	return M_BLOCKED;
}

/* Did the engine thread wait in the IOMMU since it read iommu_thread_waits() = @waits? A
 * page request or an SVA copy takes as long as the guest makes it: a chunked method looks
 * at its slice after one, not only every GPU_CHUNK_BYTES. */
static bool waited_since(uint64_t waits)
{
	return iommu_thread_waits() != waits;
}

/* One piece of a copy: both sides translated, at most one page of each; a piece through the
 * IOMMU ends after a page that waited for a page request (gpu_aper_rw_at()). */
static int copy_piece(struct gpu_ctx *ctx, uint64_t src, uint64_t dst, uint64_t *n, bool stream)
{
	struct gpu *g = ctx->g;
	struct gpu_xlate xs, xd;
	static _Thread_local uint8_t bounce[64 << 10];
	bool read_failed = false;
	uint64_t bad = 0;	/* offset of the failing page in the piece */
	int ret;

	ret = gpu_ctx_xlate(ctx, src, VGPU_ACCESS_READ, &xs);
	if (!ret)
		ret = gpu_ctx_xlate(ctx, dst, VGPU_ACCESS_WRITE, &xd);
	if (ret)
		return ret;
	*n = cmn_min(cmn_min(*n, xs.avail), xd.avail);
	if (xs.aper == VGPU_GMMU_APER_VRAM && xd.aper == VGPU_GMMU_APER_VRAM) {
		gpu_copy(g->vram + xd.addr, g->vram + xs.addr, *n, stream);
		gpu_dirty_mark(g, xd.addr, *n);
		return 0;
	}
	if (xd.aper == VGPU_GMMU_APER_VRAM && xs.aper == VGPU_GMMU_APER_SYS)
		ret = gpu_sys_copy(g, ctx->f->id, xs.addr, g->vram + xd.addr, n, false, stream);
	else if (xs.aper == VGPU_GMMU_APER_VRAM && xd.aper == VGPU_GMMU_APER_SYS)
		ret = gpu_sys_copy(g, ctx->f->id, xd.addr, g->vram + xs.addr, n, true, stream);
	else if (xd.aper == VGPU_GMMU_APER_VRAM)	/* SVA -> VRAM: no bounce */
		ret = gpu_aper_rw_at(g, ctx->f->id, xs.aper, xs.addr, g->vram + xd.addr, n, false,
				     &bad);
	else if (xs.aper == VGPU_GMMU_APER_VRAM)	/* VRAM -> SVA */
		ret = gpu_aper_rw_at(g, ctx->f->id, xd.aper, xd.addr, g->vram + xs.addr, n, true,
				     &bad);
	else {
		*n = cmn_min(*n, sizeof(bounce));
		ret = gpu_aper_rw_at(g, ctx->f->id, xs.aper, xs.addr, bounce, n, false, &bad);
		read_failed = ret != 0;
		if (!ret)
			ret = gpu_aper_rw_at(g, ctx->f->id, xd.aper, xd.addr, bounce, n, true,
					     &bad);
	}
	/* After the write (a fault may have left part of it): a collection that raced it
	 * either read the bytes or leaves the bit for the next round. */
	if (xd.aper == VGPU_GMMU_APER_VRAM)
		gpu_dirty_mark(g, xd.addr, *n);
	if (ret) {
		read_failed = read_failed || xd.aper == VGPU_GMMU_APER_VRAM;
		ctx->fault_va = (read_failed ? src : dst) + bad;
		ctx->fault_access = read_failed ? VGPU_ACCESS_READ : VGPU_ACCESS_WRITE;
		return ctx->fault_reason = VGPU_FAULT_IOMMU;
	}
	return 0;
}

static enum mres m_copy(struct gpu_ctx *ctx, const uint32_t *a)
{
	struct gpu_chan *c = ctx->c;
	uint64_t src = u64_of(a), dst = u64_of(a + 2), len = u64_of(a + 4), since = 0;
	/* Decided by the whole copy, as one memcpy of it would: its pieces are all small. */
	bool stream = len >= ctx->g->cfg.copy_stream_min;

	while (c->progress < len) {
		uint64_t n = cmn_min(len - c->progress, (uint64_t)GPU_CHUNK_BYTES);
		uint64_t waits = iommu_thread_waits();

		if (copy_piece(ctx, src + c->progress, dst + c->progress, &n, stream))
			return M_FAULT;
		c->progress += n;
		since += n;
		if ((since >= GPU_CHUNK_BYTES || waited_since(waits)) && c->progress < len) {
			since = 0;
			if (slice_over(ctx))
				return M_YIELD;
		}
	}
	return M_DONE;
}

static void fill32(uint8_t *p, uint64_t n, uint32_t v)
{
	if (!v) {
		memset(p, 0, n);
		return;
	}
	for (uint64_t i = 0; i < n / 4; i++)
		memcpy(p + i * 4, &v, 4);
}

static enum mres m_fill(struct gpu_ctx *ctx, const uint32_t *a)
{
	static _Thread_local uint8_t bounce[16 << 10];
	struct gpu_chan *c = ctx->c;
	uint64_t dst = u64_of(a), len = u64_of(a + 2), since = 0;
	struct gpu_xlate x;

	if (dst % 4 || len % 4)
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_FILL);
	while (c->progress < len) {
		uint64_t va = dst + c->progress, n = cmn_min(len - c->progress, (uint64_t)GPU_CHUNK_BYTES);
		uint64_t waits = iommu_thread_waits();

		if (gpu_ctx_xlate(ctx, va, VGPU_ACCESS_WRITE, &x))
			return M_FAULT;
		n = cmn_min(n, x.avail);
		if (x.aper == VGPU_GMMU_APER_VRAM) {
			fill32(ctx->g->vram + x.addr, n, a[4]);
			gpu_dirty_mark(ctx->g, x.addr, n);
		} else {
			n = cmn_min(n, sizeof(bounce));
			fill32(bounce, n, a[4]);
			if (gpu_va_write(ctx, va, bounce, n))
				return M_FAULT;
		}
		c->progress += n;
		since += n;
		if ((since >= GPU_CHUNK_BYTES || waited_since(waits)) && c->progress < len) {
			since = 0;
			if (slice_over(ctx))
				return M_YIELD;
		}
	}
	return M_DONE;
}

static enum mres m_invalidate(struct gpu_ctx *ctx, const uint32_t *a)
{
	uint64_t va = u64_of(a), size = u64_of(a + 2), flags = a[4];

	if (flags & ~(uint64_t)VGPU_INVAL_ALL || (!(flags & VGPU_INVAL_ALL) && !size))
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_MMU_INVALIDATE);
	if (flags & VGPU_INVAL_ALL)
		va = size = 0;
	gpu_tlb_invalidate_from(ctx, va, size);
	return M_DONE;
}

static enum mres m_timestamp(struct gpu_ctx *ctx, const uint32_t *a)
{
	uint64_t va = u64_of(a);

	if (va % 8)
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_TIMESTAMP);
	return gpu_va_store(ctx, va, 8, gpu_clock_ns(ctx->g)) ? M_FAULT : M_DONE;
}

#define ELEMS_PER_STEP 4096u

static enum mres m_reduce(struct gpu_ctx *ctx, const uint32_t *a)
{
	static _Thread_local uint32_t buf[ELEMS_PER_STEP];
	struct gpu_chan *c = ctx->c;
	uint64_t src = u64_of(a), count = a[2], dst = u64_of(a + 3);

	if (src % 4 || dst % 8)
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_REDUCE_ADD_U32);
	if (!c->progress)
		c->acc = 0;
	while (c->progress < count) {
		uint64_t n = cmn_min(count - c->progress, (uint64_t)ELEMS_PER_STEP);

		if (gpu_va_read(ctx, src + c->progress * 4, buf, n * 4))
			return M_FAULT;
		for (uint64_t i = 0; i < n; i++)
			c->acc += buf[i];
		c->progress += n;
		if (c->progress < count && slice_over(ctx))
			return M_YIELD;
	}
	return gpu_va_store(ctx, dst, 8, c->acc) ? M_FAULT : M_DONE;
}

static enum mres m_axpy(struct gpu_ctx *ctx, const uint32_t *a)
{
	static _Thread_local float xb[ELEMS_PER_STEP], yb[ELEMS_PER_STEP];
	struct gpu_chan *c = ctx->c;
	uint64_t x = u64_of(a), y = u64_of(a + 2), count = a[4];
	float alpha;

	memcpy(&alpha, &a[5], 4);
	if (x % 4 || y % 4)
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, VGPU_M_AXPY_F32);
	while (c->progress < count) {
		uint64_t n = cmn_min(count - c->progress, (uint64_t)ELEMS_PER_STEP), off = c->progress * 4;

		if (gpu_va_read(ctx, x + off, xb, n * 4) || gpu_va_read(ctx, y + off, yb, n * 4))
			return M_FAULT;
		for (uint64_t i = 0; i < n; i++)
			yb[i] = alpha * xb[i] + yb[i];
		if (gpu_va_write(ctx, y + off, yb, n * 4))
			return M_FAULT;
		c->progress += n;
		if (c->progress < count && slice_over(ctx))
			return M_YIELD;
	}
	return M_DONE;
}

static enum mres method_exec(struct gpu_ctx *ctx, uint32_t id, const uint32_t *a)
{
	switch (id) {
	case VGPU_M_NOP:		return M_DONE;
	case VGPU_M_SEM_RELEASE:	return m_sem_release(ctx, a);
	case VGPU_M_SEM_ACQUIRE:	return m_sem_acquire(ctx, a);
	case VGPU_M_COPY:		return m_copy(ctx, a);
	case VGPU_M_FILL:		return m_fill(ctx, a);
	case VGPU_M_MMU_INVALIDATE:	return m_invalidate(ctx, a);
	case VGPU_M_TIMESTAMP:		return m_timestamp(ctx, a);
	case VGPU_M_REDUCE_ADD_U32:	return m_reduce(ctx, a);
	case VGPU_M_AXPY_F32:		return m_axpy(ctx, a);
	}
	return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ILLEGAL, id);
}

/* Fetch and check the method at the segment's current offset into c->mthd: M_DONE, or
 * M_ERROR with the channel in error. */
static enum mres method_fetch(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	uint64_t va = c->seg_va + (uint64_t)c->seg_off * 4;
	uint32_t *dw = c->mthd, id, nargs, n;

	/* The header and what follows it in the segment, up to the longest method and within
	 * the header's page, in one read: one translation per method, not two. A fault is
	 * then the header's page's, as when the header was read alone. */
	n = cmn_min((uint32_t)VGPU_ARRAY_SIZE(c->mthd), c->seg_len - c->seg_off);
	if (c->seg_inline) {
		memcpy(dw, c->inl + c->seg_off, n * 4);
	} else {
		n = cmn_min(n, (uint32_t)(4096 - (va & 4095)) / 4);
		if (gpu_va_read(ctx, va, dw, n * 4))
			goto pb_fault;
	}
	id = VGPU_MTHD_ID(dw[0]);
	nargs = VGPU_MTHD_NARGS(dw[0]);
	if (id >= VGPU_M_NR || (uint64_t)c->seg_off + 1 + nargs > c->seg_len)
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ILLEGAL, id);
	if (method_nargs[id] >= 0 && nargs != (uint32_t)method_nargs[id])
		return ctx_error(ctx, VGPU_CHAN_ERR_METHOD_ARGS, id);
	/* Arguments on the next page. */
	if (id != VGPU_M_NOP && 1 + nargs > n &&
	    gpu_va_read(ctx, va + n * 4, dw + n, (1 + nargs - n) * 4))
		goto pb_fault;
	return M_DONE;
pb_fault:
	/* The pushbuffer itself is outside the function's memory: never replayable. */
	gpu_fault_record(ctx, false);
	return ctx_error(ctx, VGPU_CHAN_ERR_PB_FAULT, 0xffffffffu);
}

/* Run the method at the segment's current offset: the one in progress (c->mthd), else the
 * next one, fetched. */
static enum mres method_step(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	uint64_t progress0 = c->progress;
	uint32_t id, nargs;
	enum mres r;

	if (!c->mthd_held && method_fetch(ctx) != M_DONE)
		return M_ERROR;
	id = VGPU_MTHD_ID(c->mthd[0]);
	nargs = VGPU_MTHD_NARGS(c->mthd[0]);
	r = method_exec(ctx, id, c->mthd + 1);
	ctx->cost += GPU_COST_METHOD + (c->progress - progress0) * method_cost[id];
	c->last_heavy = id >= VGPU_M_COPY && id != VGPU_M_TIMESTAMP && id != VGPU_M_MMU_INVALIDATE;
	if (r == M_FAULT)
		r = atomic_load(&c->state) == GPU_CHAN_STATE_ERROR ? M_ERROR : ctx_fault(ctx, id);
	/* Kept while it is to resume: a wait, the slice's end, a stall for replay (M_FAULT
	 * after ctx_fault()). A SEM_ACQUIRE the guest rewrote meanwhile is still the acquire
	 * its wait (acq_waiting) belongs to. */
	c->mthd_held = r == M_YIELD || r == M_BLOCKED || r == M_FAULT;
	if (r == M_DONE) {
		c->seg_off += 1 + nargs;
		c->progress = 0;
		/* Only the engine running the channel counts: a load and a store, not a locked
		 * add, which would wait here for the method's stores (a semaphore line the
		 * guest is polling) to leave this core. */
		atomic_store_explicit(&c->methods,
				      atomic_load_explicit(&c->methods, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	}
	return r;
}

/* ---- GPFIFO ---- */

static void gp_advance(struct gpu_chan *c)
{
	c->gp_get = (c->gp_get + 1) & (uint32_t)(c->cfg.gpfifo_entries - 1);
	c->gp_cache_idx++;
	c->userd_dirty = true;
}

/* Take @put, just read from USERD, as the channel's GP_PUT unless it is misuse (counted and
 * ignored). True if GP_PUT moved. */
static bool gp_take_put(struct gpu_ctx *ctx, uint32_t put)
{
	struct gpu_chan *c = ctx->c;
	uint32_t mask = (uint32_t)c->cfg.gpfifo_entries - 1;
	struct gpu_db_counters *dbc = &ctx->f->dbc;

	if (put == c->gp_put)
		return false;
	if (put > mask) {
		atomic_fetch_add(&dbc->bad_put, 1);
		return false;
	}
	if (((put - c->gp_get) & mask) < ((c->gp_put - c->gp_get) & mask)) {
		atomic_fetch_add(&dbc->backwards, 1);
		return false;
	}
	c->gp_put = put;
	gpu_status_put(&c->st->gp_put, put);
	return true;
}

/* Re-read GP_PUT after a doorbell or when the known work ran out. */
static int gp_refresh_put(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	uint64_t bit = VGPU_BIT(ctx->chid);
	uint32_t put;
	/* Clear before reading: a doorbell racing with the read sets it again. Only when set:
	 * the locked instruction would wait for every load before it. */
	bool rung = (atomic_load_explicit(&ctx->f->pending, memory_order_relaxed) & bit) &&
		    (atomic_fetch_and(&ctx->f->pending, ~bit) & bit);

	if (gpu_userd_read_put(ctx->g, ctx->f, c, ctx->part_base, ctx->part_size, &put)) {
		ctx_error(ctx, VGPU_CHAN_ERR_USERD_FAULT, 0xffffffffu);
		return -EFAULT;
	}
	/* The doorbell of work a linger already ran is not spurious. */
	if (put == c->gp_put && rung && !c->took_early)
		atomic_fetch_add(&ctx->f->dbc.spurious, 1);
	gp_take_put(ctx, put);
	if (rung)
		c->took_early = false;
	return 0;
}

/* A GP entry is well formed: checked before its segment is read. */
static bool gp_entry_ok(struct gpu_ctx *ctx, uint64_t e)
{
	uint32_t len = vgpu_gp_len(e);

	if (e & VGPU_GP_RSVD_MASK || (len && (e & 3)) || (!len && (e & ~0xffull))) {
		ctx_error(ctx, VGPU_CHAN_ERR_GP_MALFORMED, 0xffffffffu);
		return false;
	}
	if (!len && (e & 0xff) != VGPU_GP_OPCODE_NOP) {
		ctx_error(ctx, VGPU_CHAN_ERR_GP_ILLEGAL, 0xffffffffu);
		return false;
	}
	return true;
}

/* Make entry @e's segment current, from the pushbuffer or (@inl) from c->inl. */
static void seg_begin(struct gpu_chan *c, uint64_t e, bool inl)
{
	c->seg_active = true;
	c->seg_inline = inl;
	c->seg_va = vgpu_gp_va(e);
	c->seg_len = vgpu_gp_len(e);
	c->seg_off = 0;
}

/* Copy USERD @u's inline copy of the entry at GP_GET into c->inl (vgpu/gpfifo.h); returns
 * that GP entry, or 0 if there is no usable copy. Inside an access bracket, with GP_PUT read
 * (acquire) before: a copy is taken only for the one entry between GP_GET and @put, with
 * inl_ctl read the same before and after it. */
static uint64_t userd_inline_read(struct gpu_chan *c, const struct vgpu_userd *u, uint32_t put)
{
	uint32_t ctl, n;
	uint64_t e;

	if (((put - c->gp_get) & (uint32_t)(c->cfg.gpfifo_entries - 1)) != 1)
		return 0;
	ctl = __atomic_load_n(&u->inl_ctl, __ATOMIC_ACQUIRE);
	n = ctl >> 16 & 0xff;
	if (!(ctl & VGPU_USERD_INL_VALID) || (ctl & 0xffff) != c->gp_get || !n ||
	    n > VGPU_USERD_INL_DW)
		return 0;
	/* Acquire loads pair with the driver's release stores: a word of a newer copy brings
	 * its inl_ctl = 0 with it, and the second look sees the change. */
	e = __atomic_load_n(&u->inl_entry, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++)
		c->inl[i] = __atomic_load_n(&u->inl_dw[i], __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&u->inl_ctl, __ATOMIC_RELAXED) != ctl || vgpu_gp_len(e) != n)
		return 0;
	return e;
}

/* The inline copy of the entry at GP_GET, in c->inl: the one the linger took, else read from
 * USERD now. Returns its GP entry, or 0 if there is no usable copy. */
static uint64_t gp_inline_copy(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	const struct vgpu_userd *u;
	uint64_t e = c->inl_early;

	c->inl_early = 0;
	if (e)
		return e;
	iommu_access_begin();
	u = gpu_userd_host(ctx->g, ctx->f->id, c, ctx->part_base, ctx->part_size, 64);
	e = u ? userd_inline_read(c, u, c->gp_put) : 0;
	iommu_access_end();
	return e;
}

/* What gp_next() found at GP_GET. */
enum gp_res {
	GP_STOPPED = -1,	/* the channel is in error */
	GP_NONE,		/* caught up with GP_PUT */
	GP_SEGMENT,		/* a segment is current */
	GP_CONTROL,		/* a control entry (NOP) was consumed */
};

/* Take the next GP entry: make its segment current, or consume it if it is a control entry.
 * One entry per call, so the caller counts and times every entry: a GPFIFO of NOPs behind
 * a GP_PUT the guest keeps moving would otherwise hold the engine inside this call. */
static enum gp_res gp_next(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	uint32_t mask = (uint32_t)c->cfg.gpfifo_entries - 1;

	if (c->gp_cache_idx >= c->gp_cache_n) {
		if (c->gp_get == c->gp_put || (atomic_load_explicit(&ctx->f->pending,
					memory_order_relaxed) & VGPU_BIT(ctx->chid))) {
			if (gp_refresh_put(ctx))
				return GP_STOPPED;
			if (c->gp_get == c->gp_put)
				return GP_NONE;
		}
		uint64_t inl = gp_inline_copy(ctx);

		if (inl) {
			if (!gp_entry_ok(ctx, inl))
				return GP_STOPPED;
			/* Run without the cache, which is used up: emptied, so gp_advance()'s
			 * step past its end cannot wrap, 2^32 such entries on, back onto
			 * entries already run. */
			c->gp_cache_idx = c->gp_cache_n = 0;
			seg_begin(c, inl, true);
			return GP_SEGMENT;
		}
		uint32_t n = cmn_min((c->gp_put - c->gp_get) & mask, mask + 1 - c->gp_get);

		n = cmn_min(n, (uint32_t)GPU_GP_CACHE);
		if (gpu_va_read(ctx, c->cfg.gpfifo_va + (uint64_t)c->gp_get * 8, c->gp_cache,
				n * 8)) {
			gpu_fault_record(ctx, false);
			ctx_error(ctx, VGPU_CHAN_ERR_GPFIFO_FAULT, 0xffffffffu);
			return GP_STOPPED;
		}
		c->gp_cache_idx = 0;
		c->gp_cache_n = n;
	}
	uint64_t e = c->gp_cache[c->gp_cache_idx];

	if (!gp_entry_ok(ctx, e))
		return GP_STOPPED;
	if (!vgpu_gp_len(e)) {
		gp_advance(c);
		return GP_CONTROL;
	}
	seg_begin(c, e, false);
	return GP_SEGMENT;
}

static void userd_writeback(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;

	if (!c->userd_dirty)
		return;
	c->userd_dirty = false;
	atomic_store_explicit(&c->pub_gp_get, c->gp_get, memory_order_relaxed);
	gpu_status_put(&c->st->gp_get, c->gp_get);
	userd_write32(ctx->g, ctx->f, c, ctx->part_base, ctx->part_size, VGPU_USERD_GP_GET, c->gp_get);
}

/* ---- prefetch hints (struct gpu_chan_pf) ----
 * From the doorbell to the first method the engine reads USERD's GP_PUT, then the GP entry
 * at GP_GET, then the pushbuffer: each line the submitter just wrote, so each a transfer from
 * its core, and each read waits for the one before (the IOMMU bracket around every read
 * opens with a locked add). Where the next submission will be is predictable: USERD does not
 * move, the entry is the one at GP_GET, and a driver fills its pushbuffer as a ring, so the
 * next segment starts where the last one ended. The doorbell poll prefetches those lines as
 * soon as it sees the token: a prefetch holds up nothing after it (a locked instruction
 * waits for earlier loads, not for prefetches), so the transfers overlap, and the reads that
 * follow, in protocol order and deciding as before, find the lines there. A wrong guess
 * costs a useless transfer, never a wrong read. */

/* Translate the hint pages again after this many updates, so a moved mapping is followed. */
#define PF_RETRANSLATE 256u

/* Host address of IOVA @iova of function @fn, or 0. The IOMMU's plain translation: no
 * fault logged and no page request for an address nothing is mapped at (a guess may be). */
static uintptr_t pf_sys_host(struct gpu *g, unsigned int fn, uint64_t iova)
{
	struct iommu_domain *d;
	struct iommu_xlate x;
	uintptr_t host = 0;

	if (!g->cfg.iommu)
		return 0;
	iommu_access_begin();
	d = iommu_function_domain(g->cfg.iommu, fn);
	if (d && !iommu_translate(d, iova, 1, IOMMU_READ, &x) && x.host)
		host = (uintptr_t)x.host;
	iommu_access_end();
	return host;
}

/* Host address of the page at GPU VA @va (@va true) or USERD physical address @addr, or 0.
 * A failed GMMU translation is no fault of the channel: its fault record stays as it was. */
static uintptr_t pf_page_host(struct gpu_ctx *ctx, uint64_t addr, bool va)
{
	uint64_t fva = ctx->fault_va;
	int freason = ctx->fault_reason, faccess = ctx->fault_access;
	struct gpu_xlate x;
	uintptr_t host = 0;

	if (!va) {
		if (ctx->c->cfg.userd_aper == VGPU_APER_SYS)
			return pf_sys_host(ctx->g, ctx->f->id, addr);
		return addr < ctx->part_size ? (uintptr_t)(ctx->g->vram + ctx->part_base + addr) : 0;
	}
	if (!gpu_ctx_xlate(ctx, addr, VGPU_ACCESS_READ, &x)) {
		if (x.aper == VGPU_GMMU_APER_VRAM)
			host = (uintptr_t)(ctx->g->vram + x.addr);
		else if (x.aper == VGPU_GMMU_APER_SYS)
			host = pf_sys_host(ctx->g, ctx->f->id, x.addr);
	}
	ctx->fault_va = fva;
	ctx->fault_reason = freason;
	ctx->fault_access = faccess;
	return host;
}

/* Publish hint @i for @addr, translating only when it left the page translated last. */
static void pf_set(struct gpu_ctx *ctx, unsigned int i, uint64_t addr, bool va)
{
	struct gpu_chan_pf *pf = &ctx->c->pf;
	uint64_t page = addr & ~4095ull;

	/* Bit 0 marks the page as translated (a failure is remembered too). */
	if (pf->va[i] != (page | 1)) {
		pf->va[i] = page | 1;
		pf->host[i] = pf_page_host(ctx, page, va);
	}
	atomic_store_explicit(&pf->line[i], pf->host[i] ? pf->host[i] + (addr & 4095) : 0,
			      memory_order_relaxed);
}

/* The channel ran all it knows of: say where its next submission will be read from. */
static void pf_update(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	struct gpu_chan_pf *pf = &c->pf;

	if (pf->gen != c->cfg_gen || ++pf->uses >= PF_RETRANSLATE) {
		pf->gen = c->cfg_gen;
		pf->uses = 0;
		memset(pf->va, 0, sizeof(pf->va));
	}
	pf_set(ctx, GPU_PF_USERD, c->cfg.userd_addr + VGPU_USERD_GP_PUT, false);
	pf_set(ctx, GPU_PF_GP, c->cfg.gpfifo_va + (uint64_t)c->gp_get * 8, true);
	if (c->seg_len)
		pf_set(ctx, GPU_PF_PB, c->seg_va + (uint64_t)c->seg_len * 4, true);
}

static uint64_t def_linger(const struct gpu *g)
{
	return g->cfg.linger_ns ? g->cfg.linger_ns : GPU_DEFAULT_LINGER;
}

/* Has a doorbell marked any channel but @ctx's pending that an engine will run? Its
 * channel may run on another engine: then this one only stops waiting for nothing. Drains
 * set these bits under g->lock: one by another engine pokes this one, which chan_linger()
 * sees as news. A bit no engine takes soon (a channel not on its runlist, disabled, fenced,
 * in error or stalled on a fault: a guest rings such a channel at will) is not waiting
 * work, and would otherwise end every function's lingering for as long as it stays. */
static bool others_pending(const struct gpu_ctx *ctx)
{
	const struct gpu *g = ctx->g;

	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		const struct gpu_fn *f = &g->fns[fn];
		uint64_t p = atomic_load_explicit(&f->pending, memory_order_relaxed) &
			     atomic_load_explicit(&f->schedulable, memory_order_relaxed);

		if (fn == ctx->f->id)
			p &= ~VGPU_BIT(ctx->chid);
		for (; p; p &= p - 1) {
			int st = atomic_load_explicit(&f->chans[cmn_ctz(p)].state,
						      memory_order_relaxed);

			if (st == GPU_CHAN_STATE_IDLE || st == GPU_CHAN_STATE_BUSY)
				return true;
		}
	}
	return false;
}

/* The channel caught up after doing work, and a guest that waited for that work submits
 * again at once. Wait up to linger_ns for its GP_PUT to move, as a GPU keeps a channel
 * loaded while its timeslice lasts: the next submission then runs in this turn, without
 * the turn's end, a doorbell drain and a pick before its first method (about half of
 * that path). Only while nothing else waits: another channel pending, any news for the
 * engine (a token of any function but this channel's own, a poke, a GSP change, a stop)
 * and the slice's end stop it. The wait is the slice's idle time, not its work. True if
 * GP_PUT moved, checked as after a doorbell. */
static bool chan_linger(struct gpu_ctx *ctx)
{
	struct gpu *g = ctx->g;
	struct gpu_chan *c = ctx->c;
	uint32_t own = vgpu_token(ctx->e->id, ctx->chid), put;
	bool moved = false, sys = c->cfg.userd_aper == VGPU_APER_SYS;
	uint64_t start, end, t;

	if (g->cfg.clock_ns || g->cfg.linger_ns == GPU_LINGER_NONE || others_pending(ctx))
		return false;
	/* GP_GET is written back at the turn's end, after the wait: its line holds the
	 * channel's error word, which vgpu_submit() reads, and written now it would be a
	 * transfer on the next submission's path. A guest out of room has work queued, so
	 * no turn of its channel waits. */
	pf_update(ctx);
	atomic_fetch_add_explicit(&ctx->f->linger_waits, 1, memory_order_relaxed);
	start = gpu_clock_ns(g);
	end = ctx->e->slot_end;
	if (end > start && end - start > def_linger(g))	/* no overflow for a huge linger_ns */
		end = start + def_linger(g);
	for (t = start; t < end; t = gpu_clock_ns(g)) {
		const struct vgpu_userd *u;
		uint64_t e = 0;

		cmn_cpu_relax();
		/* GP_PUT and, once it moved, the inline copy in the same line: one translation
		 * and, for USERD in system memory, one access bracket. */
		if (sys)
			iommu_access_begin();
		u = gpu_userd_host(g, ctx->f->id, c, ctx->part_base, ctx->part_size, 64);
		if (u) {
			put = __atomic_load_n(&u->gp_put, __ATOMIC_ACQUIRE);
			if (put != c->gp_put)
				e = userd_inline_read(c, u, put);
		}
		if (sys)
			iommu_access_end();
		if (!u)
			break;
		if (put != c->gp_put) {
			/* Taken here, so the turn goes on to the entries without reading it
			 * again; a value that is misuse ends the wait. */
			gpu_chan_prefetch(c);
			moved = gp_take_put(ctx, put);
			c->inl_early = moved ? e : 0;
			c->took_early |= moved;
			ctx->lingered += moved;
			break;
		}
		if (gpu_engine_news_but(ctx->e, ctx->f->id, own))
			break;
	}
	/* Counted up to the last look at the clock: one more read would sit between the new
	 * GP_PUT and its first method. The last poll (uncounted) is charged to the turn. */
	ctx->linger_ns += t - start;
	return moved;
}

/* A control entry was consumed: it is the turn's work as a segment is, counted toward
 * GPU_CHAN_BATCH, charged a method's cost and followed by the same slice check, so a
 * GPFIFO of NOPs ends its turn, is charged and meets the preemption timeout. True if the
 * slice is over. */
static bool gp_control_done(struct gpu_ctx *ctx, unsigned int *entries, unsigned int *methods)
{
	(*entries)++;
	ctx->cost += GPU_COST_METHOD;
	return !(++*methods % 16) && slice_over(ctx);
}

/* One turn of a channel: up to GPU_CHAN_BATCH GP entries (control entries included) or the
 * end of the slice. */
static enum gpu_run_result chan_turn(struct gpu_ctx *ctx)
{
	struct gpu_chan *c = ctx->c;
	unsigned int entries = 0, methods = 0;
	bool did = false;

	/* A doorbell while mid-segment (e.g. blocked on a semaphore): look at GP_PUT now, so
	 * misuse is seen and new work is known. */
	if (c->seg_active && (atomic_load_explicit(&ctx->f->pending, memory_order_relaxed) &
			      VGPU_BIT(ctx->chid)) && !chan_gone(ctx) && gp_refresh_put(ctx))
		return GPU_RUN_STOPPED;
	for (;;) {
		/* Before every entry and method (a chunked one looks again between chunks): a
		 * turn that began just before its channel's free runs nothing of it. */
		if (chan_gone(ctx))
			return GPU_RUN_PROGRESS;
		if (!c->seg_active) {
			if (entries >= GPU_CHAN_BATCH)
				return GPU_RUN_PROGRESS;
			enum gp_res r = gp_next(ctx);

			if (r == GP_STOPPED)
				return GPU_RUN_STOPPED;
			if (r == GP_CONTROL) {
				did = true;
				if (gp_control_done(ctx, &entries, &methods))
					return GPU_RUN_PROGRESS;
				continue;
			}
			if (r == GP_NONE && did && chan_linger(ctx))
				continue;
			if (r == GP_NONE)
				return did ? GPU_RUN_PROGRESS : GPU_RUN_EMPTY;
		}
		switch (method_step(ctx)) {
		case M_DONE:
			did = true;
			if (c->seg_off >= c->seg_len) {
				c->seg_active = false;
				gp_advance(c);
				entries++;
			}
			/* Clock reads cost: after cheap methods check the slice every 16. */
			if ((c->last_heavy || !(++methods % 16)) && slice_over(ctx))
				return GPU_RUN_PROGRESS;
			break;
		case M_YIELD:
			return GPU_RUN_PROGRESS;
		case M_BLOCKED:
			return did ? GPU_RUN_PROGRESS : GPU_RUN_BLOCKED;
		case M_FAULT:
		case M_ERROR:
			return GPU_RUN_STOPPED;
		}
	}
}

enum gpu_run_result gpu_chan_run(struct gpu_ctx *ctx)
{
	enum gpu_run_result r = chan_turn(ctx);
	struct gpu_chan *c = ctx->c;

	c->inl_early = 0;	/* only ever for the turn's next entry */
	/* Gone, it writes nothing more, not even GP_GET to USERD (that stays dirty for a
	 * restore's next turn); a turn that ended on its own looks once more, for the TLB
	 * entries it may have made from a partition that went meanwhile. */
	if (chan_gone(ctx))
		return r;

	userd_writeback(ctx);
	/* Caught up with all it knows of: the next thing is a doorbell. The hints translate
	 * with the turn's partition, which may have gone since the look above (the write-back
	 * can wait on a page request): a look after them drops what they put in the TLB. */
	if (r != GPU_RUN_STOPPED && !c->seg_active && c->gp_get == c->gp_put) {
		pf_update(ctx);
		if (chan_gone(ctx))
			return r;
	}
	if (r == GPU_RUN_EMPTY)
		atomic_store(&c->state, GPU_CHAN_STATE_IDLE);
	else if (r != GPU_RUN_STOPPED)
		atomic_store(&c->state, GPU_CHAN_STATE_BUSY);
	return r;
}
