// SPDX-License-Identifier: MIT
/* GMMU: the page-table walker (format in vgpu/gmmu.h), per-engine TLBs with range
 * invalidation, and the per-function replayable fault buffer. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "gpu_model/gpu_internal.h"

static const uint64_t tlb_sizes[3] = { VGPU_GMMU_PAGE_4K, VGPU_GMMU_PAGE_64K, VGPU_GMMU_PAGE_2M };

/* Read the entry at VF-physical @pa; the guest may be rewriting it, hence atomic. */
static int read_entry(struct gpu *g, uint64_t part_base, uint64_t part_size, uint64_t pa,
		      uint64_t *e)
{
	if (pa > part_size || part_size - pa < 8)
		return VGPU_FAULT_OUT_OF_SLICE;
	*e = __atomic_load_n((uint64_t *)(g->vram + part_base + pa), __ATOMIC_RELAXED);
	return 0;
}

/* Check a leaf PTE mapping a @size page and fill @x for @va. */
static int walk_leaf(uint64_t part_base, uint64_t part_size, uint64_t pte, uint64_t size,
		     uint64_t va, int access, struct gpu_xlate *x)
{
	uint64_t addr = pte & VGPU_GMMU_ADDR_MASK, aper = pte & VGPU_GMMU_APER_MASK;
	uint64_t off = va & (size - 1);

	if (pte & VGPU_GMMU_RSVD_MASK || !cmn_is_aligned(addr, size) ||
	    (aper != VGPU_GMMU_APER_VRAM && aper != VGPU_GMMU_APER_SYS &&
	     aper != VGPU_GMMU_APER_SVA))
		return VGPU_FAULT_BAD_ENTRY;
	if (access == VGPU_ACCESS_WRITE && (pte & VGPU_GMMU_RO))
		return VGPU_FAULT_READ_ONLY;
	/* The whole page must lie inside the slice: a PTE past the quota never reaches the
	 * neighbour's VRAM. */
	if (aper == VGPU_GMMU_APER_VRAM && (addr > part_size || part_size - addr < size))
		return VGPU_FAULT_OUT_OF_SLICE;
	x->aper = aper;
	x->addr = (aper == VGPU_GMMU_APER_VRAM ? part_base : 0) + addr + off;
	x->avail = size - off;
	x->pte = pte;
	return 0;
}

static int walk_pde_check(uint64_t e, int level)
{
	if (!(e & VGPU_GMMU_VALID))
		return VGPU_FAULT_PDE_INVALID;
	if (e & (VGPU_GMMU_RSVD_MASK | VGPU_GMMU_APER_MASK | VGPU_GMMU_RO | VGPU_GMMU_VOLATILE))
		return VGPU_FAULT_BAD_ENTRY;
	if (level < 2 && (e & (VGPU_GMMU_LEAF | VGPU_GMMU_PT64K)))
		return VGPU_FAULT_BAD_ENTRY;
	return 0;
}

int gpu_mmu_walk(struct gpu *g, uint64_t part_base, uint64_t part_size, uint64_t pdb,
		 uint64_t va, int access, struct gpu_xlate *x, uint64_t *page_size)
{
	static const unsigned int shifts[3] = { VGPU_GMMU_L0_SHIFT, VGPU_GMMU_L1_SHIFT,
						VGPU_GMMU_L2_SHIFT };
	uint64_t table = pdb, e;
	int ret;

	if (va >= VGPU_GMMU_VA_LIMIT)
		return VGPU_FAULT_VA_RANGE;
	for (int level = 0; level < 3; level++) {
		ret = read_entry(g, part_base, part_size, table + ((va >> shifts[level]) & 511) * 8, &e);
		if (ret)
			return ret;
		if (level == 2 && (e & VGPU_GMMU_VALID) && (e & VGPU_GMMU_LEAF)) {
			*page_size = VGPU_GMMU_PAGE_2M;
			return walk_leaf(part_base, part_size, e & ~VGPU_GMMU_LEAF, VGPU_GMMU_PAGE_2M,
					 va, access, x);
		}
		ret = walk_pde_check(e, level);
		if (ret)
			return ret;
		table = e & VGPU_GMMU_ADDR_MASK;
	}
	bool big = e & VGPU_GMMU_PT64K;
	uint64_t idx = big ? (va >> VGPU_GMMU_L3_64K_SHIFT) & (VGPU_GMMU_ENTRIES_64K - 1)
			   : (va >> VGPU_GMMU_L3_4K_SHIFT) & (VGPU_GMMU_ENTRIES - 1);

	ret = read_entry(g, part_base, part_size, table + idx * 8, &e);
	if (ret)
		return ret;
	if (!(e & VGPU_GMMU_VALID))
		return VGPU_FAULT_PTE_INVALID;
	if (e & VGPU_GMMU_PT64K)
		return VGPU_FAULT_BAD_ENTRY;
	*page_size = big ? VGPU_GMMU_PAGE_64K : VGPU_GMMU_PAGE_4K;
	return walk_leaf(part_base, part_size, e & ~VGPU_GMMU_LEAF, *page_size, va, access, x);
}

int gpu_mmu_translate(struct gpu *g, unsigned int fn, uint64_t pdb, uint64_t va, int access,
		      uint64_t *aper, uint64_t *addr, uint64_t *page_size)
{
	struct gpu_priv_fn rec;
	struct gpu_xlate x;
	uint64_t ps = 0;
	int ret;

	if (fn >= g->nr_fns || !gpu_priv_snapshot_fn(g->priv, fn, &rec))
		return -EINVAL;
	ret = gpu_mmu_walk(g, rec.part_base, rec.part_size, pdb, va, access, &x, &ps);
	if (ret)
		return ret;
	*aper = x.aper;
	*addr = x.addr;
	*page_size = ps;
	return 0;
}

/* ---- TLB ---- */

static unsigned int tlb_index(unsigned int fn, uint64_t va, int s)
{
	uint64_t page = va >> (s == 0 ? 12 : s == 1 ? 16 : 21);

	return (unsigned int)((page ^ (page >> 7) ^ (uint64_t)fn * 0x9e37u) % GPU_TLB_WAYS);
}

static bool tlb_lookup(struct gpu_tlb *t, unsigned int fn, uint64_t pdb, uint64_t va,
		       struct gpu_tlb_entry **out)
{
	for (int s = 0; s < 3; s++) {
		struct gpu_tlb_entry *e = &t->e[s][tlb_index(fn, va, s)];

		if (e->size && e->fn == fn && e->pdb == pdb && e->va == (va & ~(tlb_sizes[s] - 1))) {
			*out = e;
			return true;
		}
	}
	return false;
}

static void tlb_insert(struct gpu_tlb *t, unsigned int fn, uint64_t pdb, uint64_t va,
		       uint64_t size, const struct gpu_xlate *x)
{
	int s = size == VGPU_GMMU_PAGE_4K ? 0 : size == VGPU_GMMU_PAGE_64K ? 1 : 2;
	struct gpu_tlb_entry *e = &t->e[s][tlb_index(fn, va, s)];
	uint64_t off = va & (size - 1);

	e->va = va - off;
	e->size = size;
	e->fn = fn;
	e->pdb = pdb;
	e->addr = x->addr - off;
	e->pte = x->pte;
}

/* Whether [a, a+an) and [b, b+bn) overlap, as distances from the lower start: a range that
 * would wrap past 2^64 (a guest's MMU_INVALIDATE may name one) reaches to the end. */
static bool range_overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
	return a <= b ? b - a < an : a - b < bn;
}

/* Drop @fn's entries overlapping [va, va+size) (size 0: all of fn's) from this TLB. */
static void tlb_drop(struct gpu_tlb *t, unsigned int fn, uint64_t va, uint64_t size)
{
	for (int s = 0; s < 3; s++) {
		for (unsigned int i = 0; i < GPU_TLB_WAYS; i++) {
			struct gpu_tlb_entry *e = &t->e[s][i];

			if (e->size && e->fn == fn &&
			    (!size || range_overlap(va, size, e->va, e->size)))
				e->size = 0;
		}
	}
}

/* Drop every entry of the functions in bitmap @fns from this TLB. */
static void tlb_drop_fns(struct gpu_tlb *t, uint64_t fns)
{
	for (int s = 0; s < 3; s++)
		for (unsigned int i = 0; i < GPU_TLB_WAYS; i++)
			if (t->e[s][i].size && (fns & VGPU_BIT(t->e[s][i].fn)))
				t->e[s][i].size = 0;
}

/* Run the invalidations other threads queued for this engine. */
void gpu_tlb_process(struct gpu_ctx *ctx)
{
	struct gpu_tlb *t = &ctx->e->tlb;
	struct gpu_inval q[GPU_INVAL_QUEUE];
	unsigned int n;
	uint64_t lost;

	cmn_spin_lock(&t->qlock);
	atomic_store_explicit(&t->pending, 0, memory_order_relaxed);
	n = t->nq;
	lost = t->lost;
	memcpy(q, t->q, n * sizeof(q[0]));
	t->nq = 0;
	t->lost = 0;
	cmn_spin_unlock(&t->qlock);
	if (lost)
		tlb_drop_fns(t, lost);
	for (unsigned int i = 0; i < n; i++)
		if (!(lost & VGPU_BIT(q[i].fn)))
			tlb_drop(t, q[i].fn, q[i].va, q[i].size);
	ctx->mc_size = 0;
}

static void tlb_queue(struct gpu_engine *e, unsigned int fn, uint64_t va, uint64_t size)
{
	struct gpu_tlb *t = &e->tlb;

	cmn_spin_lock(&t->qlock);
	if (t->nq < GPU_INVAL_QUEUE)
		t->q[t->nq++] = (struct gpu_inval){ .fn = fn, .va = va, .size = size };
	else
		t->lost |= VGPU_BIT(fn);
	/* Release: the engine that sees pending also sees the queued range. */
	atomic_store_explicit(&t->pending, 1, memory_order_release);
	cmn_spin_unlock(&t->qlock);
}

void gpu_tlb_invalidate(struct gpu *g, unsigned int fn, uint64_t va, uint64_t size)
{
	for (unsigned int i = 0; i < g->nr_engines; i++)
		tlb_queue(&g->engines[i], fn, va, size);
}

/* MMU_INVALIDATE from a channel: its own engine now, the others before their next lookup. */
void gpu_tlb_invalidate_from(struct gpu_ctx *ctx, uint64_t va, uint64_t size)
{
	for (unsigned int i = 0; i < ctx->g->nr_engines; i++)
		if (&ctx->g->engines[i] != ctx->e)
			tlb_queue(&ctx->g->engines[i], ctx->f->id, va, size);
	tlb_drop(&ctx->e->tlb, ctx->f->id, va, size);
	ctx->mc_size = 0;
}

void gpu_tlb_drop_fn(struct gpu_ctx *ctx)
{
	tlb_drop(&ctx->e->tlb, ctx->f->id, 0, 0);
	ctx->mc_size = 0;
}

static int ctx_fault(struct gpu_ctx *ctx, uint64_t va, int access, int reason)
{
	ctx->fault_va = va;
	ctx->fault_access = access;
	ctx->fault_reason = reason;
	return reason;
}

int gpu_ctx_xlate(struct gpu_ctx *ctx, uint64_t va, int access, struct gpu_xlate *x)
{
	struct gpu_tlb *t = &ctx->e->tlb;
	struct gpu_tlb_entry *te;
	uint64_t pdb = ctx->c->cfg.pdb, size = 0;
	int ret;

	if (atomic_load_explicit(&t->pending, memory_order_acquire))
		gpu_tlb_process(ctx);
	if (ctx->mc_size && va - ctx->mc_va < ctx->mc_size &&
	    (access != VGPU_ACCESS_WRITE || !(ctx->mc_pte & VGPU_GMMU_RO))) {
		x->aper = VGPU_GMMU_APER_VRAM;
		x->addr = ctx->mc_addr + (va - ctx->mc_va);
		x->avail = ctx->mc_size - (va - ctx->mc_va);
		x->pte = ctx->mc_pte;
		return 0;
	}
	if (tlb_lookup(t, ctx->f->id, pdb, va, &te)) {
		if (access == VGPU_ACCESS_WRITE && (te->pte & VGPU_GMMU_RO))
			return ctx_fault(ctx, va, access, VGPU_FAULT_READ_ONLY);
		x->aper = te->pte & VGPU_GMMU_APER_MASK;
		x->addr = te->addr + (va - te->va);
		x->avail = te->size - (va - te->va);
		x->pte = te->pte;
		size = te->size;
	} else {
		ret = gpu_mmu_walk(ctx->g, ctx->part_base, ctx->part_size, pdb, va, access, x, &size);
		if (ret)
			return ctx_fault(ctx, va, access, ret);
		if (!(x->pte & VGPU_GMMU_VOLATILE))
			tlb_insert(t, ctx->f->id, pdb, va, size, x);
	}
	if (x->aper == VGPU_GMMU_APER_VRAM && !(x->pte & VGPU_GMMU_VOLATILE)) {
		ctx->mc_va = va & ~(size - 1);
		ctx->mc_size = size;
		ctx->mc_addr = x->addr - (va - ctx->mc_va);
		ctx->mc_pte = x->pte;
	}
	return 0;
}

/* ---- fault buffer ---- */

/* The GSP learns of faults from the status region (it cannot pop the buffer: that is the
 * owner's), so even a fault that overflowed the buffer is counted there. */
static void fault_status(struct gpu *g, unsigned int fn, const struct vgpu_fault_entry *e)
{
	struct gpu_status_fn *sf = &g->status->fns[fn];

	gpu_status_put(&sf->fault_chid, e->chid);
	gpu_status_put(&sf->fault_reason, e->reason);
	gpu_status_put(&sf->fault_va, e->va);
	__atomic_fetch_add(&sf->chans[e->chid].faults, 1, __ATOMIC_RELAXED);
	gpu_status_bump(g, &sf->faults);
}

void gpu_fault_record(struct gpu_ctx *ctx, bool replayable)
{
	struct gpu_fn *f = ctx->f;
	struct vgpu_fault_entry ent = {
		.va = ctx->fault_va,
		.timestamp_ns = cmn_now_ns(),
		.chid = (uint16_t)ctx->chid,
		.engine = (uint8_t)ctx->e->id,
		.access = (uint8_t)ctx->fault_access,
		.reason = (uint8_t)ctx->fault_reason,
		.replayable = replayable,
	};
	bool full;

	cmn_spin_lock(&f->fault_lock);
	full = f->fcount == GPU_FAULT_BUF;
	if (!full)
		f->faults[(f->fhead + f->fcount++) % GPU_FAULT_BUF] = ent;
	/* A replayable fault stalls the channel after its entry is in, so one that reads
	 * FAULTED finds the entry, and before the lock is dropped, so a handler that popped
	 * the entry (under the lock) and replays finds the channel to resume. */
	if (replayable)
		atomic_store(&ctx->c->state, GPU_CHAN_STATE_FAULTED);
	cmn_spin_unlock(&f->fault_lock);
	fault_status(ctx->g, f->id, &ent);
	gpu_intr_raise(ctx->g, f, full ? VGPU_INTR_FAULT_OVERFLOW : VGPU_INTR_FAULT);
}

int gpu_fault_pop(struct gpu *g, unsigned int fn, struct vgpu_fault_entry *out)
{
	struct gpu_fn *f;
	int ret = -EAGAIN;

	if (fn >= g->nr_fns)
		return -EINVAL;
	f = &g->fns[fn];
	cmn_spin_lock(&f->fault_lock);
	if (f->fcount) {
		*out = f->faults[f->fhead];
		f->fhead = (f->fhead + 1) % GPU_FAULT_BUF;
		f->fcount--;
		ret = 0;
	}
	cmn_spin_unlock(&f->fault_lock);
	return ret;
}

void gpu_fault_replay(struct gpu *g, unsigned int fn)
{
	struct gpu_fn *f;

	if (fn >= g->nr_fns)
		return;
	f = &g->fns[fn];
	/* Invalidate first: the handler changed PTEs and the retried access must see them. */
	gpu_tlb_invalidate(g, fn, 0, 0);
	cmn_mutex_lock(&g->lock);
	gpu_priv_sync_locked(g);
	for (unsigned int c = 0; c < GPU_FN_MAX_CHANNELS; c++) {
		struct gpu_chan *ch = &f->chans[c];
		int want = GPU_CHAN_STATE_FAULTED;

		if (atomic_compare_exchange_strong(&ch->state, &want, GPU_CHAN_STATE_BUSY))
			atomic_fetch_or(&f->pending, VGPU_BIT(c));
		/* Freed by a device reset while stalled: its restore resumes it (gpu_chan_adopt). */
		else if (want == GPU_CHAN_STATE_FREE && ch->state_at_free == GPU_CHAN_STATE_FAULTED)
			ch->state_at_free = GPU_CHAN_STATE_BUSY;
	}
	cmn_mutex_unlock(&g->lock);
	for (unsigned int i = 0; i < g->nr_engines; i++)
		gpu_engine_wake(&g->engines[i]);
}

int gpu_fault_cancel(struct gpu *g, unsigned int fn, unsigned int chid)
{
	struct gpu_fn *f;
	struct gpu_chan *c;
	int ret = 0;

	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	f = &g->fns[fn];
	c = &f->chans[chid];
	cmn_mutex_lock(&g->lock);
	if (atomic_load(&c->state) != GPU_CHAN_STATE_FAULTED)
		ret = -EINVAL;
	else
		gpu_chan_set_error(g, f, c, f->cfg.part_base, f->cfg.part_size,
				   VGPU_CHAN_ERR_MMU_FAULT, 0xffffffffu);
	cmn_mutex_unlock(&g->lock);
	return ret;
}
