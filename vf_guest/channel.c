// SPDX-License-Identifier: MIT
/* Channels and usermode submission.
 *
 * A channel's memory is one DMA block: GPFIFO ring | pushbuffer ring | one page holding USERD
 * (offset 0) and the channel's 64-bit semaphore (offset 256). Every submission copies its
 * methods into the pushbuffer ring, appends a release of the semaphore with the next sequence
 * number (the fence), writes one GP entry, publishes GP_PUT and rings the doorbell.
 * Pushbuffer space comes back when the semaphore says the submission that used it is done;
 * GP entries come back when the device's GP_GET has passed them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vgpu/gmmu.h>

#include "common/clock.h"
#include "vf_guest/vf_internal.h"

#define CH_DEFAULT_ENTRIES	256u
#define CH_DEFAULT_PB		(16u << 10)
#define CH_SEM_OFF		256u
#define CH_FENCE_DW		6u	/* SEM_RELEASE header and 5 arguments */
#define CH_SLEEP_SLICE_NS	(1000ull * 1000)
/* Channels placed in VRAM (hosts without a DMA IOVA window) are mapped at this VA plus
 * their VF-physical address, so they never collide with each other. */
#define CH_VRAM_VA_BASE		(1ull << 45)

static uint64_t ch_sem_load(const struct vgpu_channel *ch)
{
	return __atomic_load_n(ch->sem, __ATOMIC_ACQUIRE);
}

static uint32_t ch_error_load(const struct vgpu_channel *ch)
{
	return __atomic_load_n(&ch->userd->error, __ATOMIC_ACQUIRE);
}

static int ch_layout(struct vgpu_channel *ch, const struct vgpu_channel_opts *o)
{
	uint32_t entries = o->gpfifo_entries ? o->gpfifo_entries : CH_DEFAULT_ENTRIES;
	uint32_t pb = o->pushbuf_bytes ? o->pushbuf_bytes : CH_DEFAULT_PB;

	if (entries < 2 || entries > 65536 || (entries & (entries - 1)) || pb % VF_DMA_PAGE ||
	    pb < VF_DMA_PAGE || pb > (64u << 20))
		return -EINVAL;
	ch->entries = entries;
	ch->pb_size = pb;
	ch->dma_bytes = ((uint64_t)entries * 8 + VF_DMA_PAGE - 1) / VF_DMA_PAGE * VF_DMA_PAGE +
			pb + VF_DMA_PAGE;
	return 0;
}

/* Lay the channel out in its block: CPU view @base, GPU VA @va, USERD physical @phys. */
static void ch_place(struct vgpu_channel *ch, uint8_t *base, uint64_t va, uint64_t phys)
{
	uint64_t gp_bytes = ch->dma_bytes - ch->pb_size - VF_DMA_PAGE;

	memset(base, 0, ch->dma_bytes);
	ch->gpfifo = (uint64_t *)base;
	ch->gpfifo_va = va;
	ch->pb = base + gp_bytes;
	ch->pb_va = va + gp_bytes;
	ch->userd = (struct vgpu_userd *)(ch->pb + ch->pb_size);
	ch->userd_phys = phys + gp_bytes + ch->pb_size;
	ch->sem = (uint64_t *)((uint8_t *)ch->userd + CH_SEM_OFF);
	ch->sem_va = ch->pb_va + ch->pb_size + CH_SEM_OFF;
}

/* The block in DMA memory (hosts with a DMA IOVA window) or else in VRAM. */
static int ch_get_memory(struct vgpu_channel *ch)
{
	struct vgpu_vf *vf = ch->vf;
	uint64_t size;
	int ret;

	if (vf->dma_iova) {
		ret = vf_dma_alloc(&vf->dma, ch->dma_bytes, VF_DMA_PAGE, &ch->dma_off);
		if (ret)
			return ret;
		ch->userd_aper = VGPU_APER_SYS;
		ch_place(ch, vf->dma.cpu + ch->dma_off, VF_DMA_VA_BASE + ch->dma_off,
			 vf->dma_iova + ch->dma_off);
		return 0;
	}
	size = (ch->dma_bytes + (64u << 10) - 1) & ~((64ull << 10) - 1);
	ret = vgpu_mem_alloc(vf, VGPU_MEM_VRAM, size, VGPU_GMMU_PAGE_64K, &ch->mem);
	if (ret)
		return ret;
	ch->mem_va = CH_VRAM_VA_BASE + vgpu_mem_addr(ch->mem);
	ret = vgpu_va_map(ch->as, ch->mem_va, ch->mem, 0, size, VGPU_GMMU_PAGE_64K, 0);
	if (ret) {
		vgpu_mem_free(ch->mem);
		ch->mem = NULL;
		return ret;
	}
	ch->userd_aper = VGPU_APER_VRAM;
	ch_place(ch, vgpu_mem_cpu(ch->mem), ch->mem_va, vgpu_mem_addr(ch->mem));
	return 0;
}

/* Called after the RM's free, which returns only once no engine can touch the channel: its
 * memory may be handed to the next channel at once. */
static void ch_put_memory(struct vgpu_channel *ch)
{
	struct vgpu_vf *vf = ch->vf;

	if (!ch->mem) {
		vf_dma_free(&vf->dma, ch->dma_off, ch->dma_bytes);
		return;
	}
	vgpu_va_unmap(ch->as, ch->mem_va, vgpu_mem_size(ch->mem));
	vgpu_mem_free(ch->mem);
}

int vgpu_channel_create(struct vgpu_vf *vf, struct vgpu_vaspace *as,
			const struct vgpu_channel_opts *opts, struct vgpu_channel **out)
{
	static const struct vgpu_channel_opts defaults;
	const struct vgpu_channel_opts *o = opts ? opts : &defaults;
	struct vf_rm_chan_args a;
	struct vgpu_channel *ch;
	int ret;

	if (!as || as->vf != vf || o->runlist >= vf->info.nr_runlists)
		return -EINVAL;
	if (as->lost || atomic_load(&vf->reset_pending))
		return -ENOLINK;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->vf = vf;
	ch->as = as;
	ch->runlist = o->runlist;
	ret = ch_layout(ch, o);
	if (ret)
		goto free_ch;
	ch->recs = calloc(ch->entries, sizeof(*ch->recs));
	if (!ch->recs) {
		ret = -ENOMEM;
		goto free_ch;
	}
	ret = ch_get_memory(ch);
	if (ret)
		goto free_recs;
	a = (struct vf_rm_chan_args){
		.vaspace = as->handle, .pdb = vgpu_vaspace_pdb(as), .runlist = o->runlist,
		.gpfifo_va = ch->gpfifo_va, .entries = ch->entries, .userd_aper = ch->userd_aper,
		.userd_addr = ch->userd_phys, .replayable = o->replayable,
	};
	ret = vf_rm_channel_alloc(vf, &a, &ch->handle, &ch->chid, &ch->token);
	if (ret)
		goto free_mem;
	ch->rpc_submit = o->rpc_submit;
	ch->sem_flags = VGPU_SEM_64 | (o->no_intr ? 0 : VGPU_SEM_INTR);
	cmn_mutex_lock(&vf->obj_lock);
	cmn_list_add(&vf->channels, &ch->node);
	cmn_mutex_unlock(&vf->obj_lock);
	*out = ch;
	return 0;
free_mem:
	ch_put_memory(ch);
free_recs:
	free(ch->recs);
free_ch:
	free(ch);
	return ret;
}

int vf_channel_destroy(struct vgpu_channel *ch, bool force)
{
	struct vgpu_vf *vf;

	if (!ch)
		return 0;
	vf = ch->vf;
	if (!ch->lost) {
		int ret = vf_rm_free(vf, ch->handle);

		/* Without a completed FREE an engine may still use the GPFIFO and USERD:
		 * they cannot go to the next channel. */
		if (!force && !vf_rm_free_done(ret))
			return ret;
		ch_put_memory(ch);
	}
	cmn_mutex_lock(&vf->obj_lock);
	cmn_list_del(&ch->node);
	cmn_mutex_unlock(&vf->obj_lock);
	free(ch->recs);
	free(ch);
	return 0;
}

int vgpu_channel_destroy(struct vgpu_channel *ch)
{
	return vf_channel_destroy(ch, false);
}

/* Give back the pushbuffer space of completed submissions. */
static void ch_reclaim(struct vgpu_channel *ch)
{
	uint64_t done = ch_sem_load(ch);

	while (ch->rec_tail != ch->rec_head) {
		const struct vf_sub_rec *r = &ch->recs[ch->rec_tail % ch->entries];

		if (r->seq > done)
			break;
		ch->pb_tail = r->pb_end;
		ch->rec_tail++;
	}
}

/* With GP_GET read now; also what ch_fits() then knows (every advance of put is checked
 * against a GP_GET read since the previous one, so put never laps gp_get_seen). */
static bool ch_gp_full(struct vgpu_channel *ch)
{
	uint32_t get = __atomic_load_n(&ch->userd->gp_get, __ATOMIC_ACQUIRE);

	ch->gp_get_seen = get;
	return (ch->put + 1) % ch->entries == get % ch->entries ||
	       ch->rec_head - ch->rec_tail >= ch->entries - 1;
}

/* Room for @bytes after @pad in the pushbuffer, a record and a GP slot, judged from what
 * this side already knows: the tail it last reclaimed to and the GP_GET it last read, both
 * behind the device (so never room that is not there). */
static bool ch_fits(const struct vgpu_channel *ch, uint32_t pad, uint32_t bytes)
{
	return ch->pb_head + pad + bytes - ch->pb_tail <= ch->pb_size &&
	       ch->rec_head - ch->rec_tail < ch->entries - 1 &&
	       (ch->put + 1) % ch->entries != ch->gp_get_seen % ch->entries;
}

/* The semaphore and GP_GET are lines the engine writes: reading them on every submission
 * puts a cross-core transfer before the doorbell. They are read only when what is known
 * does not leave room. */
static bool ch_room(struct vgpu_channel *ch, uint32_t pad, uint32_t bytes)
{
	if (ch_fits(ch, pad, bytes))
		return true;
	ch_reclaim(ch);
	return !ch_gp_full(ch) && ch_fits(ch, pad, bytes);
}

/* Copy the segment of @ndw dwords at @dw, whose GP entry @gp goes at ch->put, into USERD
 * next to GP_PUT (the sequence vgpu/gpfifo.h gives), or withdraw an earlier copy: the
 * engine then reads GP_PUT and the methods in one line. */
static void ch_inline(struct vgpu_channel *ch, const uint32_t *dw, uint32_t ndw, uint64_t gp)
{
	struct vgpu_userd *u = ch->userd;

	if (ch->inl_valid)
		__atomic_store_n(&u->inl_ctl, 0, __ATOMIC_RELAXED);
	ch->inl_valid = ndw <= VGPU_USERD_INL_DW;
	if (!ch->inl_valid)
		return;
	/* Release: a device that reads one of these words also sees inl_ctl = 0 before it. */
	__atomic_store_n(&u->inl_entry, gp, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < ndw; i++)
		__atomic_store_n(&u->inl_dw[i], dw[i], __ATOMIC_RELEASE);
	__atomic_store_n(&u->inl_ctl, vgpu_userd_inl_ctl(ch->put, ndw), __ATOMIC_RELEASE);
}

/* Entries, then GP_PUT with release: the engine reads GP_PUT and then the entries without a
 * lock; only this order keeps it from a half-written one. Then the doorbell. The inline
 * copy of the segment (@dw, @ndw; none if @ndw is too long) goes after the entry, so that
 * the stores to GP_PUT's line leave this core together, with no other line's between
 * them: the polling engine would take the line back in such a gap, and GP_PUT's store
 * then wait for it once more. */
static int ch_publish(struct vgpu_channel *ch, uint64_t gp, const uint32_t *dw, uint32_t ndw)
{
	struct vgpu_vf *vf = ch->vf;

	ch->gpfifo[ch->put] = gp;
	ch_inline(ch, dw, ndw, gp);
	ch->put = (ch->put + 1) % ch->entries;
	if (ch->rpc_submit)
		return vf_rm_channel_submit(vf, ch->handle, ch->put);
	__atomic_store_n(&ch->userd->gp_put, ch->put, __ATOMIC_RELEASE);
	/* Without a doorbell page in BAR2 the device's periodic GP_PUT scan finds the work. */
	if (vf->db && vgpu_doorbell_write(vf->db, ch->token))
		return vf->t->ops->notify(vf->t, VF_VEC_GPU);
	return 0;
}

static int ch_usable(struct vgpu_channel *ch)
{
	if (ch->lost || atomic_load(&ch->vf->reset_pending))
		return -ENOLINK;
	if (ch_error_load(ch))
		return -VGPU_ECHANERR;
	return 0;
}

/* Ask for ownership of @p's line now, so that the stores to it do not wait for it one
 * after the other. A hint: on x86 CPUs without PREFETCHW the opcode is a no-op. */
static inline void ch_prefetchw(const volatile void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetchw %0" : : "m"(*(const volatile char *)p));
#else
	__builtin_prefetch((const void *)p, 1);
#endif
}

/* Every line the doorbell path stores to was last read by the engine, so each store waits
 * for its line to come back from the engine's core; and the doorbell's locked operations
 * wait for all stores before them. Asked for together before the first store, the lines
 * move side by side instead of one after the other. */
static void ch_prefetch_lines(const struct vgpu_channel *ch, uint32_t pos, uint32_t bytes)
{
	struct vgpu_doorbell_page *db = ch->vf->db;
	uint32_t head;

	ch_prefetchw(ch->pb + pos);
	ch_prefetchw(ch->pb + pos + bytes - 1);
	ch_prefetchw(&ch->gpfifo[ch->put]);
	ch_prefetchw(&ch->userd->gp_put);
	if (!db)
		return;
	head = __atomic_load_n(&db->head, __ATOMIC_RELAXED);
	ch_prefetchw(&db->head);
	ch_prefetchw(&db->slots[head % VGPU_DB_SLOTS]);
}

int vgpu_submit(struct vgpu_channel *ch, const uint32_t *methods, uint32_t ndw,
		struct vgpu_fence *fence)
{
	uint32_t total = ndw + CH_FENCE_DW, bytes = total * 4, pos, pad;
	struct vgpu_pb pb;
	uint64_t seq;
	int ret = ch_usable(ch);

	if (ret)
		return ret;
	if (total > VGPU_GP_LEN_MAX || bytes > ch->pb_size / 2 || (ndw && !methods))
		return -EINVAL;
	pos = (uint32_t)(ch->pb_head % ch->pb_size);
	pad = pos + bytes > ch->pb_size ? ch->pb_size - pos : 0;	/* no segment wraps */
	if (!ch_room(ch, pad, bytes))
		return -EAGAIN;
	pos = (uint32_t)((ch->pb_head + pad) % ch->pb_size);
	if (!ch->rpc_submit)
		ch_prefetch_lines(ch, pos, bytes);
	seq = ++ch->seq;
	vgpu_pb_init(&pb, (uint32_t *)(ch->pb + pos), total);
	if (ndw)
		memcpy(pb.dw, methods, (size_t)ndw * 4);
	pb.len = ndw;
	vgpu_pb_sem_release(&pb, ch->sem_va, seq, ch->sem_flags);
	ch->pb_head += pad + bytes;
	ch->recs[ch->rec_head++ % ch->entries] = (struct vf_sub_rec){ seq, ch->pb_head };
	ret = ch_publish(ch, vgpu_gp_entry(ch->pb_va + pos, total), pb.dw, total);
	if (fence)
		*fence = (struct vgpu_fence){ .ch = ch, .value = seq };
	return ret;
}

int vgpu_submit_gp_raw(struct vgpu_channel *ch, uint64_t gp_entry)
{
	int ret = ch_usable(ch);

	if (ret)
		return ret;
	if (ch_gp_full(ch))
		return -EAGAIN;
	return ch_publish(ch, gp_entry, NULL, UINT32_MAX);
}

bool vgpu_fence_done(const struct vgpu_fence *f)
{
	return !f->ch->lost && ch_sem_load(f->ch) >= f->value;
}

static void ch_sleep(struct vgpu_vf *vf)
{
	struct timespec ts = { 0, 50 * 1000 };

	if (vf->t->ops->nr_vectors(vf->t) > VF_VEC_GPU)
		vf->t->ops->wait(vf->t, VF_VEC_GPU, CH_SLEEP_SLICE_NS);
	else
		nanosleep(&ts, NULL);	/* no GPU interrupt from this host: poll gently */
}

int vgpu_fence_wait(const struct vgpu_fence *f, uint64_t timeout_ns)
{
	struct vgpu_channel *ch = f->ch;
	struct vgpu_vf *vf = ch->vf;
	uint64_t deadline = cmn_deadline_ns(timeout_ns ? timeout_ns : VF_DEFAULT_FENCE_TIMEOUT);
	uint64_t spin_end = cmn_deadline_ns(vf->opts.spin_ns);
	bool spinning = true;
	int ret;

	for (uint32_t turn = 0;; turn++) {
		if (ch->lost)
			return -ENOLINK;
		if (ch_sem_load(ch) >= f->value)
			return 0;
		/* While spinning, the error notifier and the clock only every 32nd turn: the
		 * notifier shares its line with GP_GET, which the engine writes as it fetches
		 * the very entry waited for, and a clock read per turn slows the reaction. */
		if (spinning && turn % 32) {
			cmn_cpu_relax();
			continue;
		}
		ret = ch_usable(ch);
		if (ret)
			return ret;
		if (cmn_deadline_passed(deadline))
			return -ETIMEDOUT;
		if (spinning && !cmn_deadline_passed(spin_end))
			continue;
		spinning = false;
		vf_events_poll(vf);
		ch_sleep(vf);
	}
}

int vgpu_channel_error(struct vgpu_channel *ch, uint32_t *code, uint64_t *fault_va)
{
	uint32_t e;

	if (ch->lost)
		return -ENOLINK;
	vf_events_poll(ch->vf);
	e = ch_error_load(ch);
	if (code)
		*code = e;
	if (fault_va)
		*fault_va = ch->fault_reason ? ch->fault_va : 0;
	return e ? -VGPU_ECHANERR : 0;
}

uint32_t vgpu_channel_id(const struct vgpu_channel *ch) { return ch->chid; }
uint32_t vgpu_channel_token(const struct vgpu_channel *ch) { return ch->token; }
uint64_t vgpu_channel_sem_va(const struct vgpu_channel *ch) { return ch->sem_va; }
