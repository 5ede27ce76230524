// SPDX-License-Identifier: MIT
/* Privileged state: the memfd-backed region only the GSP writes (gpu_priv_*), and the
 * device model's consistent snapshots of it.
 *
 * Each function's record has a sequence counter: the writer makes it odd, stores the
 * record word by word, makes it even again and bumps gen. Readers (another process) copy
 * with atomic word loads and retry while the counter is odd or moved. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/log.h"
#include "gpu_model/gpu_internal.h"

#define WORDS(x) (sizeof(x) / sizeof(uint64_t))
_Static_assert(sizeof(struct gpu_priv_fn) % 8 == 0, "priv fn record is 64-bit words");

/* Release stores of the words and acquire loads take the place of seqlock fences (which
 * ThreadSanitizer cannot model): a reader that sees any word of a write also sees the odd
 * sequence stored before it. Both are plain moves on x86. */
static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void st(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static void copy_in(uint64_t *dst, const uint64_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = ld(&src[i]);
}

static void copy_out(uint64_t *dst, const uint64_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		st(&dst[i], src[i]);
}

bool gpu_priv_snapshot_fn(const struct gpu_priv_shared *sh, unsigned int fn, struct gpu_priv_fn *out)
{
	const struct gpu_priv_fn *src;
	uint64_t s1, s2;

	if (fn >= GPU_MAX_FNS)
		return false;
	src = &sh->fns[fn];
	do {
		while ((s1 = __atomic_load_n(&src->seq, __ATOMIC_ACQUIRE)) & 1)
			cmn_cpu_relax();
		copy_in((uint64_t *)out, (const uint64_t *)src, WORDS(*out));
		s2 = __atomic_load_n(&src->seq, __ATOMIC_RELAXED);
	} while (s1 != s2);
	return true;
}

void gpu_priv_snapshot_turn(const struct gpu_priv_shared *sh, unsigned int fn, unsigned int chid,
			    struct gpu_priv_turn *out)
{
	const struct gpu_priv_fn *src = &sh->fns[fn];
	uint64_t s1, s2;

	do {
		while ((s1 = __atomic_load_n(&src->seq, __ATOMIC_ACQUIRE)) & 1)
			cmn_cpu_relax();
		out->part_base = ld(&src->part_base);
		out->part_size = ld(&src->part_size);
		out->chan_flags = ld(&src->chans[chid].flags);
		out->chan_gen = ld(&src->chans[chid].gen);
		s2 = __atomic_load_n(&src->seq, __ATOMIC_RELAXED);
	} while (s1 != s2);
}

void gpu_priv_snapshot_sched(const struct gpu_priv_shared *sh, uint64_t *policy,
			     uint64_t *quantum, uint64_t *period)
{
	uint64_t s1, s2;

	do {
		while ((s1 = __atomic_load_n(&sh->sched_seq, __ATOMIC_ACQUIRE)) & 1)
			cmn_cpu_relax();
		*policy = ld(&sh->sched_policy);
		*quantum = ld(&sh->sched_quantum_ns);
		*period = ld(&sh->sched_period_ns);
		s2 = __atomic_load_n(&sh->sched_seq, __ATOMIC_RELAXED);
	} while (s1 != s2);
}

void gpu_priv_format(struct gpu_priv_shared *sh, unsigned int nr_fns, unsigned int nr_engines,
		     uint64_t vram_size)
{
	memset(sh, 0, sizeof(*sh));
	sh->magic = GPU_PRIV_MAGIC;
	sh->version = GPU_PRIV_VERSION;
	sh->nr_fns = nr_fns;
	sh->nr_engines = nr_engines;
	sh->vram_size = vram_size;
	sh->sched_policy = GPU_SCHED_BEST_EFFORT;
	/* Reset state of the scheduler: every function takes part with default slices,
	 * so a device is usable before the GSP tunes it. */
	for (unsigned int f = 0; f < nr_fns; f++)
		sh->fns[f].sched.enabled = 1;
}

/* ---- writer side ---- */

/* An in-process writer wakes sleeping engines; a GSP in another process kicks the
 * device's eventfd if it was given one, else the engines see gen at their 1 ms poll. */
static void priv_notify(struct gpu_priv *p)
{
	uint64_t one = 1;

	if (p->g) {
		for (unsigned int i = 0; i < p->g->nr_engines; i++)
			gpu_engine_wake(&p->g->engines[i]);
	} else if (p->kick_fd >= 0 && write(p->kick_fd, &one, sizeof(one)) < 0) {
		cmn_dbg("gpu: privileged-state kick failed: %d", errno);
	}
}

void gpu_priv_set_kick_fd(struct gpu_priv *p, int fd)
{
	cmn_mutex_lock(&p->lock);
	p->kick_fd = fd;
	cmn_mutex_unlock(&p->lock);
}

/* Publish @rec as function @fn's record. Caller holds p->lock. */
/* A sequence to write from: a GSP killed in the middle of a write left it odd, and
 * counting on from there would mark the next write stable while it is made. */
static uint64_t priv_seq_base(uint64_t seq)
{
	return seq + (seq & 1);
}

static void priv_publish_fn(struct gpu_priv *p, unsigned int fn, const struct gpu_priv_fn *rec)
{
	struct gpu_priv_fn *dst = &p->sh->fns[fn];
	uint64_t seq = priv_seq_base(ld(&dst->seq));

	cmn_mutex_assert_held(&p->lock);
	__atomic_store_n(&dst->seq, seq + 1, __ATOMIC_RELAXED);
	/* Word 0 is seq itself: copy the rest. */
	copy_out((uint64_t *)dst + 1, (const uint64_t *)rec + 1, WORDS(*rec) - 1);
	__atomic_store_n(&dst->seq, seq + 2, __ATOMIC_RELEASE);
	__atomic_fetch_add(&p->sh->gen, 1, __ATOMIC_SEQ_CST);
	priv_notify(p);
}

static bool priv_fn_ok(const struct gpu_priv *p, unsigned int fn)
{
	return fn < ld(&p->sh->nr_fns);
}

/* Copy @fn's record for modification; the writer is the only one changing it. */
static void priv_load_fn(struct gpu_priv *p, unsigned int fn, struct gpu_priv_fn *rec)
{
	copy_in((uint64_t *)rec, (const uint64_t *)&p->sh->fns[fn], WORDS(*rec));
}

static int partition_set_locked(struct gpu_priv *p, unsigned int fn, uint64_t base, uint64_t size)
{
	uint64_t vram = ld(&p->sh->vram_size);
	struct gpu_priv_fn rec;

	cmn_mutex_assert_held(&p->lock);
	if (size && (!cmn_is_aligned(base, GPU_VRAM_ALIGN) || !cmn_is_aligned(size, GPU_VRAM_ALIGN) ||
		     base >= vram || size > vram - base))
		return -EINVAL;
	for (unsigned int o = 0; size && o < ld(&p->sh->nr_fns); o++) {
		uint64_t ob = ld(&p->sh->fns[o].part_base), os = ld(&p->sh->fns[o].part_size);

		if (o != fn && os && base < ob + os && ob < base + size)
			return -EBUSY;
	}
	priv_load_fn(p, fn, &rec);
	rec.part_base = size ? base : 0;
	rec.part_size = size;
	priv_publish_fn(p, fn, &rec);
	return 0;
}

int gpu_priv_partition_set(struct gpu_priv *p, unsigned int fn, uint64_t base, uint64_t size)
{
	int ret;

	if (!priv_fn_ok(p, fn))
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	ret = partition_set_locked(p, fn, base, size);
	cmn_mutex_unlock(&p->lock);
	if (ret)
		cmn_warn("gpu: partition of function %u [%#llx+%#llx] refused: %s", fn,
			  (unsigned long long)base, (unsigned long long)size, cmn_strerror(ret));
	return ret;
}

static int chan_cfg_check(const struct gpu_priv *p, const struct gpu_priv_chan *cfg)
{
	if (cfg->runlist >= ld(&p->sh->nr_engines))
		return -EINVAL;
	/* The ring's end as a distance from the limit: an end past 2^64 wraps below it. */
	if (!cmn_is_pow2(cfg->gpfifo_entries) || cfg->gpfifo_entries < 2 ||
	    cfg->gpfifo_entries > 65536 || cfg->gpfifo_va % 8 ||
	    cfg->gpfifo_va >= VGPU_GMMU_VA_LIMIT ||
	    cfg->gpfifo_entries * 8ull > VGPU_GMMU_VA_LIMIT - cfg->gpfifo_va)
		return -EINVAL;
	if (cfg->userd_aper > VGPU_APER_SYS || cfg->userd_addr % 64 ||
	    (cfg->userd_addr % 4096) + sizeof(struct vgpu_userd) > 4096)
		return -EINVAL;
	if (cfg->pdb % VGPU_GMMU_TABLE_BYTES || (cfg->flags & ~(GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE)))
		return -EINVAL;
	return 0;
}

static int chan_alloc_locked(struct gpu_priv *p, unsigned int fn, unsigned int chid,
			     const struct gpu_priv_chan *cfg)
{
	struct gpu_priv_fn rec;
	int ret = chan_cfg_check(p, cfg);

	cmn_mutex_assert_held(&p->lock);
	if (ret)
		return ret;
	priv_load_fn(p, fn, &rec);
	if (rec.chans[chid].flags & GPU_CHAN_ALLOCATED)
		return -EEXIST;
	/* A freed record keeps its geometry and gen: a restore with the same geometry is that
	 * allocation again (same gen), anything else a new one. */
	uint64_t gen = rec.chans[chid].gen;
	if (!(cfg->flags & GPU_CHAN_RESTORE) || !gen ||
	    !gpu_chan_same_geometry(&rec.chans[chid], cfg))
		gen++;
	rec.chans[chid] = *cfg;
	rec.chans[chid].gen = gen;
	rec.chans[chid].flags = (cfg->flags & (GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE)) |
				GPU_CHAN_ALLOCATED;
	priv_publish_fn(p, fn, &rec);
	return 0;
}

int gpu_priv_chan_alloc(struct gpu_priv *p, unsigned int fn, unsigned int chid,
			const struct gpu_priv_chan *cfg)
{
	int ret;

	if (!priv_fn_ok(p, fn) || chid >= GPU_FN_MAX_CHANNELS || !cfg)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	ret = chan_alloc_locked(p, fn, chid, cfg);
	cmn_mutex_unlock(&p->lock);
	return ret;
}

/* Apply @set/@clear to an allocated channel's flags; @drop also removes it from runlists. */
static int chan_update(struct gpu_priv *p, unsigned int fn, unsigned int chid,
		       uint64_t set, uint64_t clear, bool drop)
{
	struct gpu_priv_fn rec;
	int ret = 0;

	if (!priv_fn_ok(p, fn) || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	priv_load_fn(p, fn, &rec);
	if (!(rec.chans[chid].flags & GPU_CHAN_ALLOCATED)) {
		ret = -ENOENT;
		goto unlock;
	}
	rec.chans[chid].flags = (rec.chans[chid].flags | set) & ~clear;
	for (unsigned int r = 0; drop && r < GPU_MAX_ENGINES; r++)
		rec.runlist[r] &= ~VGPU_BIT(chid);
	priv_publish_fn(p, fn, &rec);
unlock:
	cmn_mutex_unlock(&p->lock);
	return ret;
}

int gpu_priv_chan_enable(struct gpu_priv *p, unsigned int fn, unsigned int chid, bool on)
{
	return on ? chan_update(p, fn, chid, GPU_CHAN_ENABLED, 0, false)
		  : chan_update(p, fn, chid, 0, GPU_CHAN_ENABLED, false);
}

int gpu_priv_chan_free(struct gpu_priv *p, unsigned int fn, unsigned int chid)
{
	return chan_update(p, fn, chid, 0, ~0ull, true);
}

int gpu_priv_runlist_set(struct gpu_priv *p, unsigned int fn, unsigned int rl, uint64_t chans)
{
	struct gpu_priv_fn rec;
	int ret = 0;

	if (!priv_fn_ok(p, fn) || rl >= ld(&p->sh->nr_engines))
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	priv_load_fn(p, fn, &rec);
	for (unsigned int c = 0; c < GPU_FN_MAX_CHANNELS; c++) {
		if ((chans & VGPU_BIT(c)) && (!(rec.chans[c].flags & GPU_CHAN_ALLOCATED) ||
					      rec.chans[c].runlist != rl)) {
			ret = -EINVAL;
			goto unlock;
		}
	}
	rec.runlist[rl] = chans;
	priv_publish_fn(p, fn, &rec);
unlock:
	cmn_mutex_unlock(&p->lock);
	return ret;
}

int gpu_priv_sched_set(struct gpu_priv *p, enum gpu_sched_policy policy,
		       uint64_t quantum_ns, uint64_t period_ns)
{
	uint64_t seq;

	if (policy != GPU_SCHED_BEST_EFFORT && policy != GPU_SCHED_EQUAL_SHARE &&
	    policy != GPU_SCHED_FIXED_SHARE)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	seq = priv_seq_base(ld(&p->sh->sched_seq));
	__atomic_store_n(&p->sh->sched_seq, seq + 1, __ATOMIC_RELAXED);
	st(&p->sh->sched_policy, policy);
	st(&p->sh->sched_quantum_ns, quantum_ns);
	st(&p->sh->sched_period_ns, period_ns);
	__atomic_store_n(&p->sh->sched_seq, seq + 2, __ATOMIC_RELEASE);
	__atomic_fetch_add(&p->sh->gen, 1, __ATOMIC_SEQ_CST);
	priv_notify(p);
	cmn_mutex_unlock(&p->lock);
	return 0;
}

int gpu_priv_sched_fn_set(struct gpu_priv *p, unsigned int fn, const struct gpu_priv_sched_fn *s)
{
	struct gpu_priv_fn rec;
	uint64_t total = s->weight;
	int ret = 0;

	if (!priv_fn_ok(p, fn) || s->weight > 1000)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	for (unsigned int o = 0; o < ld(&p->sh->nr_fns); o++)
		if (o != fn)
			total += ld(&p->sh->fns[o].sched.weight);
	if (total > 1000) {
		ret = -EINVAL;
		goto unlock;
	}
	priv_load_fn(p, fn, &rec);
	rec.sched = *s;
	priv_publish_fn(p, fn, &rec);
unlock:
	cmn_mutex_unlock(&p->lock);
	return ret;
}

const struct gpu_priv_shared *gpu_priv_shared(const struct gpu_priv *p)
{
	return p->sh;
}

int gpu_priv_open(int fd, struct gpu_priv **out)
{
	struct gpu_priv *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	p->sh = mmap(NULL, sizeof(*p->sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p->sh == MAP_FAILED) {
		ret = -errno;
		goto free_p;
	}
	if (p->sh->magic != GPU_PRIV_MAGIC || p->sh->version != GPU_PRIV_VERSION) {
		ret = -VGPU_EABI;
		goto unmap;
	}
	p->owned = true;
	p->kick_fd = -1;
	cmn_mutex_init(&p->lock);
	*out = p;
	return 0;
unmap:
	munmap(p->sh, sizeof(*p->sh));
free_p:
	free(p);
	return ret;
}

void gpu_priv_close(struct gpu_priv *p)
{
	if (!p || !p->owned)
		return;
	munmap(p->sh, sizeof(*p->sh));
	cmn_mutex_destroy(&p->lock);
	free(p);
}

/* ---- model side: refresh the snapshots when the GSP wrote something ---- */

/* A channel whose allocation changed starts over (GP_GET 0, no error) unless it is restored
 * (gpu_chan_adopt). A freed channel remembers the state it had for a restore. */
static void sync_fn_locked(struct gpu *g, struct gpu_fn *f)
{
	struct gpu_priv_fn rec;

	cmn_mutex_assert_held(&g->lock);
	gpu_priv_snapshot_fn(g->priv, f->id, &rec);
	if (rec.seq == f->cfg_seq)
		return;
	/* TLB entries hold device addresses made from the partition: once it moved or went,
	 * the old range may be another function's, and no engine may reach it through them.
	 * (A turn that began before this fills its TLB from the old partition until it
	 * stops: it drops those entries itself, pbdma.c chan_gone().) */
	if (rec.part_base != f->cfg.part_base || rec.part_size != f->cfg.part_size)
		gpu_tlb_invalidate(g, f->id, 0, 0);
	f->cfg = rec;
	f->cfg_seq = rec.seq;
	for (unsigned int c = 0; c < GPU_FN_MAX_CHANNELS; c++) {
		struct gpu_chan *ch = &f->chans[c];

		if (!(rec.chans[c].flags & GPU_CHAN_ALLOCATED)) {
			int st = atomic_exchange(&ch->state, GPU_CHAN_STATE_FREE);

			if (st != GPU_CHAN_STATE_FREE)
				ch->state_at_free = st;
			ch->freed_running |= ch->running;
			continue;
		}
		/* A new allocation; a running engine adopts it when it lets go of the channel. */
		if (!ch->running && (atomic_load(&ch->state) == GPU_CHAN_STATE_FREE ||
				     ch->cfg_gen != rec.chans[c].gen))
			gpu_chan_adopt(g, f, ch, &rec.chans[c]);
	}
	gpu_fn_schedulable_locked(g, f);
}

void gpu_priv_sync_locked(struct gpu *g)
{
	uint64_t gen = __atomic_load_n(&g->priv->gen, __ATOMIC_ACQUIRE);

	cmn_mutex_assert_held(&g->lock);
	if (gen == atomic_load_explicit(&g->priv_gen_seen, memory_order_relaxed))
		return;
	atomic_store_explicit(&g->priv_gen_seen, gen, memory_order_relaxed);
	GPU_TSAN_ACQUIRE(g);	/* the owner's requests that led to it, see gpu_internal.h */
	gpu_priv_snapshot_sched(g->priv, &g->sched_policy, &g->sched_quantum, &g->sched_period);
	for (unsigned int fn = 0; fn < g->nr_fns; fn++)
		sync_fn_locked(g, &g->fns[fn]);
}
