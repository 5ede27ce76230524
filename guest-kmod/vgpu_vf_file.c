// SPDX-License-Identifier: GPL-2.0 OR MIT
/* /dev/vgpu-vfN: the character device of one VF, opened by any number of processes at once
 * (ioctls in include/vgpu/vf_ioctl.h).
 *
 * Each open file is an RM context of its own: the driver reads every RM message a file sends
 * (only the client handle, the op and the class; the host validates the rest), refuses one
 * naming a client of this VF the file did not allocate, and records what the file's calls
 * allocated (clients, each client's DEVICE, memory objects with their BAR2 range, channel
 * ids). That record decides which BAR2 pages the file's mapping may show, which channel
 * events the file gets, and what closing the file frees: its clients, and with them
 * everything under them on the host.
 *
 * A file's mapping of BAR2 shows, where BAR2's mailbox rings are, three rings of its own:
 * the process pushes a request into its request ring and rings the mailbox vector
 * (VGPU_VF_IOC_NOTIFY); the driver forwards it through the real mailbox (one call at a time
 * for the whole VF) and pushes the reply into the file's reply ring; events reach the
 * file's event ring. So a driver written for the bare device (libvgpu-vf) runs on this one
 * unchanged, and several processes share one VF without seeing each other's messages.
 *
 * Quotas: what a file holds (VRAM and DMA bytes of its memory objects, channels, clients)
 * is counted against limits the module parameters set when it opened, so that one process
 * cannot take the whole VF from the others. strict_as (also read at open) refuses the RM
 * calls that would let a process point the GPU at memory of its choosing: its own VASPACE
 * (whose page tables it writes) and channels on it. Both refusals are RM replies the driver
 * makes (-EDQUOT, -EPERM); the host never sees the call. */
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/sched/signal.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#include <vgpu/gpfifo.h>

#include "vgpu_vf_internal.h"

/* ---- limits: module parameters, read when a file opens ---- */

static unsigned int file_vram_pct = 100, file_dma_pct = 100, file_channels;
static unsigned int file_clients = VVF_MAX_CLIENTS;
static bool strict_as;

/* A parameter write outside [lo, hi] is refused and changes nothing. */
static int vvf_param_range(const char *val, const struct kernel_param *kp, unsigned int lo,
			   unsigned int hi)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v < lo || v > hi)
		return -EINVAL;
	*(unsigned int *)kp->arg = v;
	return 0;
}

static int vvf_param_pct(const char *val, const struct kernel_param *kp)
{
	return vvf_param_range(val, kp, 1, 100);
}

static int vvf_param_clients(const char *val, const struct kernel_param *kp)
{
	return vvf_param_range(val, kp, 1, VVF_MAX_CLIENTS);
}

static const struct kernel_param_ops vvf_pct_ops = { .set = vvf_param_pct, .get = param_get_uint };
static const struct kernel_param_ops vvf_clients_ops = { .set = vvf_param_clients,
							 .get = param_get_uint };
module_param_cb(file_vram_pct, &vvf_pct_ops, &file_vram_pct, 0644);
MODULE_PARM_DESC(file_vram_pct, "percent of the VF's VRAM one open file may hold (1-100, default 100: no limit of its own)");
module_param_cb(file_dma_pct, &vvf_pct_ops, &file_dma_pct, 0644);
MODULE_PARM_DESC(file_dma_pct, "percent of the VF's DMA memory one open file may hold (1-100, default 100: no limit of its own)");
module_param(file_channels, uint, 0644);
MODULE_PARM_DESC(file_channels, "channels one open file may hold (default 0: only the VF's quota)");
module_param_cb(file_clients, &vvf_clients_ops, &file_clients, 0644);
MODULE_PARM_DESC(file_clients, "RM clients one open file may hold (1-16, default 16)");
module_param(strict_as, bool, 0644);
MODULE_PARM_DESC(strict_as, "files opened while set may not make a VASPACE or channel of their own, only use the kernel's address space (default 0)");

/* @pct of @size; 0 (no limit of the file's own) for 100 %: the VF's quota then answers as
 * it does for the VF's only process, with the host's own error at its end. */
static u64 vvf_share(u64 size, unsigned int pct)
{
	return pct >= 100 ? 0 : div_u64(size * pct, 100);
}

static void vvf_quota_init(struct vvf_file *f)
{
	const struct vvf_layout *l = &f->vd->lay;

	f->quota.vram = vvf_share(l->vram_size, READ_ONCE(file_vram_pct));
	f->quota.dma = vvf_share(l->dma_size, READ_ONCE(file_dma_pct));
	f->quota.chans = READ_ONCE(file_channels);
	f->quota.clients = READ_ONCE(file_clients);
	f->strict = READ_ONCE(strict_as);
}

/* Whether @bytes more of @kind would go past the file's quota (a limit of 0: none). Under
 * f->lock. */
static bool vvf_over(struct vvf_file *f, enum vvf_mem_kind kind, u64 bytes)
{
	u64 used = kind == VVF_MEM_DMA ? f->dma_used : f->vram_used;
	u64 limit = kind == VVF_MEM_DMA ? f->quota.dma : f->quota.vram;

	return limit && (bytes > limit || used > limit - bytes);
}

/* What the file holds of @kind: its VRAM or DMA bytes. Under f->lock. */
static u64 *vvf_used(struct vvf_file *f, enum vvf_mem_kind kind)
{
	return kind == VVF_MEM_DMA ? &f->dma_used : &f->vram_used;
}

int vvf_file_charge(struct vvf_file *f, u64 vram, u32 chans)
{
	int ret = 0;

	mutex_lock(&f->lock);
	if (vvf_over(f, VVF_MEM_VRAM, vram) ||
	    (f->quota.chans && chans > f->quota.chans - min(f->chans_used, f->quota.chans)))
		ret = -EDQUOT;
	if (!ret) {
		f->vram_used += vram;
		f->chans_used += chans;
	}
	mutex_unlock(&f->lock);
	return ret;
}

void vvf_file_uncharge(struct vvf_file *f, u64 vram, u32 chans)
{
	mutex_lock(&f->lock);
	f->vram_used -= min(vram, f->vram_used);
	f->chans_used -= min(chans, f->chans_used);
	mutex_unlock(&f->lock);
}

/* ---- what a file holds ---- */

static int vvf_client_idx(struct vvf_file *f, u32 client)
{
	u32 i;

	for (i = 0; i < f->nr_clients; i++)
		if (f->clients[i] == client)
			return i;
	return -1;
}

/* Unmap [off, off + size) of BAR2 from every process (each refaults what it still owns). */
static void vvf_zap(struct file *filp, u64 off, u64 size)
{
	if (filp->f_mapping)
		unmap_mapping_range(filp->f_mapping, off, size, 1);
}

/* Whether memory object @m is one of @client's (every client if 0), @handle (any if 0). */
static bool vvf_mem_is(const struct vvf_mem *m, u32 client, u32 handle)
{
	return (!client || m->client == client) && (!handle || m->handle == handle);
}

/* Unmap the memory objects of @client (every one if @handle is 0) from every process, but
 * keep them: a fault needs f->lock, held until the caller is done, so nothing maps them
 * again meanwhile. Under f->lock. */
static void vvf_mems_zap(struct file *filp, struct vvf_file *f, u32 client, u32 handle)
{
	struct vvf_mem *m;

	list_for_each_entry(m, &f->mems, node)
		if (vvf_mem_is(m, client, handle) && m->size)
			vvf_zap(filp, m->off, m->size);
}

/* Forget the memory objects of @client (every one if @handle is 0). Under f->lock. */
static void vvf_mems_drop(struct file *filp, struct vvf_file *f, u32 client, u32 handle)
{
	struct vvf_mem *m, *tmp;

	list_for_each_entry_safe(m, tmp, &f->mems, node) {
		if (!vvf_mem_is(m, client, handle))
			continue;
		list_del(&m->node);
		if (m->size)
			vvf_zap(filp, m->off, m->size);
		if (m->kind != VVF_MEM_KERNEL)	/* charged with its address space, until close */
			*vvf_used(f, m->kind) -= min(m->bytes, *vvf_used(f, m->kind));
		kfree(m);
	}
}

/* Forget the channels of @client (@handle 0: every one) or those on VASPACE @vaspace. Under
 * f->lock. */
static void vvf_chans_drop(struct vvf_file *f, u32 client, u32 handle, u32 vaspace)
{
	struct vvf_chan *c, *tmp;

	list_for_each_entry_safe(c, tmp, &f->chans, node) {
		if ((client && c->client != client) ||
		    (handle && c->handle != handle && c->vaspace != vaspace))
			continue;
		list_del(&c->node);
		if (c->chid < VVF_MAX_CHID)
			clear_bit(c->chid, f->chids);
		f->chans_used -= min(1u, f->chans_used);
		kfree(c);
	}
}

static void vvf_client_drop(struct file *filp, struct vvf_file *f, int i)
{
	vvf_mems_drop(filp, f, f->clients[i], 0);
	vvf_chans_drop(f, f->clients[i], 0, 0);
	f->nr_clients--;
	f->clients[i] = f->clients[f->nr_clients];
	f->devices[i] = f->devices[f->nr_clients];
}

/* Reset @rc freed every RM object the file held: forget them, and unmap BAR2 below @upto
 * (every memory object; the control pages are the same after a reset). Under f->lock. */
static void vvf_file_forget(struct vvf_file *f, u32 rc, u64 upto)
{
	vvf_mems_drop(f->filp, f, 0, 0);
	vvf_chans_drop(f, 0, 0, 0);
	f->nr_clients = 0;
	f->vram_used = f->dma_used = 0;
	f->chans_used = 0;	/* the kernel's channels went with the reset too */
	bitmap_zero(f->chids, VVF_MAX_CHID);
	vvf_zap(f->filp, 0, upto);
	f->epoch = rc;
}

/* The file's records belong to the VF's current reset count: if a reset came since, forget
 * them now rather than when the event thread gets to it, so that none of them names an
 * object the host may already have given to another file, and nothing made after the
 * reset is wiped with them later. Under f->lock. The reset count the records belong to. */
static u32 vvf_file_sync(struct vvf_file *f)
{
	u32 rc = smp_load_acquire(&f->vd->hdr->reset_count);

	if (rc != f->epoch)
		vvf_file_forget(f, rc, f->vd->lay.ctrl_off);
	return rc;
}

static u32 vvf_rm_client_of(const void *req, u32 len)
{
	const struct vgpu_rm_msg *h = req;

	if (len < sizeof(*h) + sizeof(u32))
		return 0;
	switch (h->op) {
	case VGPU_RM_OP_ALLOC:
	case VGPU_RM_OP_FREE:
	case VGPU_RM_OP_CONTROL:
	case VGPU_RM_OP_DUP:
	case VGPU_RM_OP_SHARE:
	case VGPU_RM_OP_MAP:
		/* Every one of these starts with h_client right after the header. */
		return *(const u32 *)(h + 1);
	default:
		return 0;
	}
}

/* May this file send this RM message? 0, or -ENOSPC (its table of clients is full). */
static int vvf_rm_check(struct vvf_file *f, const void *req, u32 len)
{
	const struct vgpu_rm_msg *h = req;

	if (len >= sizeof(*h) && h->op == VGPU_RM_OP_ALLOC_CLIENT && f->nr_clients == VVF_MAX_CLIENTS)
		return -ENOSPC;
	return 0;
}

/* The size an ALLOC of memory asks for (0 if it is no memory ALLOC or too short to say). */
static u64 vvf_alloc_bytes(const struct vgpu_rm_alloc *a, u32 len, enum vvf_mem_kind *kind)
{
	if (a->h_class == VGPU_RM_CLASS_MEMORY_VIDMEM &&
	    len >= sizeof(*a) + sizeof(struct vgpu_rm_vidmem_params)) {
		*kind = VVF_MEM_VRAM;
		return ((const struct vgpu_rm_vidmem_params *)(a + 1))->size;
	}
	if (a->h_class == VGPU_RM_CLASS_MEMORY_SYSMEM &&
	    len >= sizeof(*a) + sizeof(struct vgpu_rm_sysmem_params)) {
		*kind = VVF_MEM_DMA;
		return ((const struct vgpu_rm_sysmem_params *)(a + 1))->size;
	}
	return 0;
}

/* The RM status the driver answers an ALLOC with instead of the host: -EPERM (strict_as:
 * no VASPACE or channel of its own), -EDQUOT (over the file's quota), or 0. Under f->lock. */
static int vvf_alloc_refusal(struct vvf_file *f, const struct vgpu_rm_alloc *a, u32 len)
{
	enum vvf_mem_kind kind;
	u64 bytes;

	if (f->strict && (a->h_class == VGPU_RM_CLASS_VASPACE ||
			  a->h_class == VGPU_RM_CLASS_CHANNEL_GPFIFO))
		return -EPERM;
	if (a->h_class == VGPU_RM_CLASS_CHANNEL_GPFIFO && f->quota.chans &&
	    f->chans_used >= f->quota.chans)
		return -EDQUOT;
	bytes = vvf_alloc_bytes(a, len, &kind);
	return bytes && vvf_over(f, kind, bytes) ? -EDQUOT : 0;
}

/* The memory object @handle of @client the file holds (allocated, or reached through a DUP
 * of its own), the kernel's excepted; NULL if none. Under f->lock. */
static struct vvf_mem *vvf_mem_find(struct vvf_file *f, u32 client, u32 handle)
{
	struct vvf_mem *m;

	list_for_each_entry(m, &f->mems, node)
		if (m->client == client && m->handle == handle && m->kind != VVF_MEM_KERNEL)
			return m;
	return NULL;
}

/* A DUP of memory the file holds keeps that memory alive on the host after the original
 * is freed, so it is charged like the original: -EDQUOT if that goes past the file's
 * quota, else 0. Under f->lock. */
static int vvf_dup_refusal(struct vvf_file *f, const struct vgpu_rm_dup *d)
{
	struct vvf_mem *src = vvf_mem_find(f, d->h_client_src, d->h_object_src);

	return src && vvf_over(f, src->kind, src->bytes) ? -EDQUOT : 0;
}

/* The RM status the driver answers this message with instead of the host, or 0 (the host
 * hears it): a client of this VF the file did not allocate gets the status the host gives
 * an unknown handle; over the file's quota -EDQUOT; what strict_as forbids -EPERM. */
static int vvf_rm_refusal(struct vvf_file *f, const void *req, u32 len)
{
	const struct vgpu_rm_msg *h = req;
	u32 client = vvf_rm_client_of(req, len);

	/* A full table (VVF_MAX_CLIENTS) stays -ENOSPC, as before the quota existed. */
	if (len >= sizeof(*h) && h->op == VGPU_RM_OP_ALLOC_CLIENT &&
	    f->nr_clients >= f->quota.clients && f->nr_clients < VVF_MAX_CLIENTS)
		return -EDQUOT;
	/* Clients of other functions go on: the host refuses them as foreign. */
	if (client && VGPU_RM_IS_CLIENT(client) && VGPU_RM_CLIENT_FN(client) == f->vd->vf_id &&
	    vvf_client_idx(f, client) < 0)
		return VGPU_RM_ERR_NO_OBJECT;
	if (h->op == VGPU_RM_OP_ALLOC && len >= sizeof(struct vgpu_rm_alloc))
		return vvf_alloc_refusal(f, req, len);
	if (h->op == VGPU_RM_OP_DUP && len >= sizeof(struct vgpu_rm_dup))
		return vvf_dup_refusal(f, req);
	if (h->op == VGPU_RM_OP_CONTROL && len >= sizeof(struct vgpu_rm_control) && f->strict &&
	    ((const struct vgpu_rm_control *)req)->cmd == VGPU_RM_CTRL_CHANNEL_BIND_VASPACE)
		return -EPERM;
	return 0;
}

/* The reply the host gives a message naming an unknown handle. */
static u32 vvf_rm_refuse(const void *req, void *rsp, s32 status)
{
	const struct vgpu_rm_msg *h = req;
	struct vgpu_rm_reply *r = rsp;

	memset(r, 0, sizeof(*r));
	r->magic = h->magic;
	r->abi_version = VGPU_ABI_VERSION;
	r->op = h->op;
	r->length = sizeof(*r);
	r->cookie = h->cookie;
	r->status = status;
	return sizeof(*r);
}

/* Zero BAR2 [off, off + size). The host gives memory freed inside the slice to the next
 * ALLOC as it is (only a VF reset scrubs), so a new object would show what another process
 * left there. BAR2 is mapped write-back (memremap): ordinary memory, written with memset. */
static void vvf_mem_clear(struct vvf_dev *vd, u64 off, u64 size)
{
	u64 n;

	while (size) {
		n = min_t(u64, size, SZ_2M);
		memset(vd->bar2 + off, 0, n);
		off += n;
		size -= n;
		cond_resched();
	}
}

/* Record a memory object the file allocated (or a DUP of one: @bytes charged, @size 0: not
 * mappable) and charge it to its quota. A mappable range is new memory: it is zeroed here,
 * under f->lock, before any fault of the file can map it or the reply names its handle. */
static void vvf_mem_add(struct vvf_file *f, u32 client, u32 handle, enum vvf_mem_kind kind,
			u64 off, u64 size, u64 bytes, u64 gpu_addr)
{
	const struct vvf_layout *l = &f->vd->lay;
	u64 lo = kind == VVF_MEM_DMA ? l->dma_off : l->vram_off;
	u64 hi = lo + (kind == VVF_MEM_DMA ? l->dma_size : l->vram_size);
	struct vvf_mem *m;

	lockdep_assert_held(&f->lock);
	/* Host input: a range outside its region is charged but never mappable. */
	if (!(size && off >= lo && off <= hi && size <= hi - off))
		size = 0;
	if (size)
		vvf_mem_clear(f->vd, off, size);
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return;
	m->client = client;
	m->handle = handle;
	m->kind = kind;
	m->bytes = bytes;
	m->gpu_addr = gpu_addr;
	if (size) {
		m->off = off;
		m->size = size;
	}
	*vvf_used(f, kind) += bytes;
	list_add(&m->node, &f->mems);
}

/* Record a channel the file allocated and charge it. */
static void vvf_chan_add(struct vvf_file *f, u32 client, u32 handle, u32 vaspace, u32 chid)
{
	struct vvf_chan *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (chid < VVF_MAX_CHID)
		set_bit(chid, f->chids);
	if (!c)
		return;
	c->client = client;
	c->handle = handle;
	c->vaspace = vaspace;
	c->chid = chid;
	f->chans_used++;
	list_add(&c->node, &f->chans);
}

int vvf_file_mem_locked(struct vvf_file *f, u32 client, u32 handle, struct vvf_mem *out)
{
	struct vvf_mem *m;

	if (vvf_client_idx(f, client) < 0)
		return -ENOENT;		/* the kernel's clients are not in the file's table */
	list_for_each_entry(m, &f->mems, node)
		if (m->client == client && m->handle == handle && m->kind != VVF_MEM_KERNEL &&
		    m->size) {
			*out = *m;
			return 0;
		}
	return -ENOENT;
}

int vvf_file_own(struct vvf_file *f, u32 epoch, u32 client, u32 handle, u64 off, u64 size,
		 u32 chid)
{
	struct vvf_mem *m = kzalloc(sizeof(*m), GFP_KERNEL);

	if (!m)
		return -ENOMEM;
	m->client = client;
	m->handle = handle;
	m->off = off;
	m->size = size;
	m->kind = VVF_MEM_KERNEL;
	mutex_lock(&f->lock);
	/* Made before a reset the records have forgotten (or will): the host freed it. */
	if (vvf_file_sync(f) != epoch) {
		mutex_unlock(&f->lock);
		kfree(m);
		return -ENOLINK;
	}
	list_add(&m->node, &f->mems);
	if (chid < VVF_MAX_CHID)
		set_bit(chid, f->chids);
	mutex_unlock(&f->lock);
	return 0;
}

/* Whether the VRAM an ALLOC (@len bytes) asked for is one range from the address the reply
 * gives: asked contiguous, or a single page. The RM takes the pages of any other one where
 * it finds them, so [addr, addr + size) may hold other objects, which the file must neither
 * map (CPU or AS_MAP) nor have zeroed for it. */
static bool vvf_vidmem_contiguous(const struct vgpu_rm_alloc *a, u32 len, u64 size)
{
	const struct vgpu_rm_vidmem_params *p = (const void *)(a + 1);

	if (len < sizeof(*a) + sizeof(*p))
		return false;
	return (p->flags & VGPU_RM_MEM_CONTIGUOUS) || size <= (p->page_size ?: SZ_64K);
}

/* Record what a successful ALLOC (@len bytes) of client @i made. Under f->lock. */
static void vvf_rm_record_alloc(struct vvf_file *f, int i, const struct vgpu_rm_alloc *a,
				u32 len, const struct vgpu_rm_reply *r)
{
	const struct vvf_layout *l = &f->vd->lay;
	const void *out = r + 1;

	switch (a->h_class) {
	case VGPU_RM_CLASS_DEVICE:
		f->devices[i] = r->handle;
		break;
	case VGPU_RM_CLASS_MEMORY_SYSMEM:
		if (r->params_len >= sizeof(struct vgpu_rm_sysmem_params)) {
			const struct vgpu_rm_sysmem_params *p = out;

			vvf_mem_add(f, a->h_client, r->handle, VVF_MEM_DMA,
				    l->dma_off + p->dma_offset, p->size, p->size, p->iova);
		}
		break;
	case VGPU_RM_CLASS_MEMORY_VIDMEM:
		if (r->params_len >= sizeof(struct vgpu_rm_vidmem_params)) {
			const struct vgpu_rm_vidmem_params *p = out;

			vvf_mem_add(f, a->h_client, r->handle, VVF_MEM_VRAM, l->vram_off + p->addr,
				    vvf_vidmem_contiguous(a, len, p->size) ? p->size : 0, p->size,
				    p->addr);
		}
		break;
	case VGPU_RM_CLASS_CHANNEL_GPFIFO:
		if (r->params_len >= sizeof(struct vgpu_rm_channel_params)) {
			const struct vgpu_rm_channel_params *p = out;

			vvf_chan_add(f, a->h_client, r->handle, p->h_vaspace, p->chid);
		}
		break;
	}
}

/* A successful DUP of memory the file holds: an entry that cannot be mapped (the CPU and
 * AS_MAP reach only what the file allocated), charged with the source's kind and size,
 * since the host keeps the memory until the DUP is freed too. Under f->lock. */
static void vvf_rm_record_dup(struct vvf_file *f, const struct vgpu_rm_dup *d,
			      const struct vgpu_rm_reply *r)
{
	struct vvf_mem *src = vvf_mem_find(f, d->h_client_src, d->h_object_src);

	if (src)
		vvf_mem_add(f, d->h_client, r->handle, src->kind, 0, 0, src->bytes, 0);
}

/* Whether @req is a DUP of memory the file does not hold itself (another file's that its
 * owner SHAREd): its size is known only to the host. Under f->lock. */
static bool vvf_rm_dup_foreign(struct vvf_file *f, const void *req, u32 len)
{
	const struct vgpu_rm_dup *d = req;

	return len >= sizeof(*d) && d->hdr.op == VGPU_RM_OP_DUP &&
	       !vvf_mem_find(f, d->h_client_src, d->h_object_src);
}

/* An RM call the driver makes for the file on object @obj of its client @client (MAP, FREE:
 * struct vgpu_rm_free), on its records' reset count @epoch; @out_len bytes of the reply's
 * parameters into @out. The RM status or the mailbox's -errno. Under f->lock. */
static int vvf_file_rm(struct vvf_file *f, u32 epoch, u32 op, u32 client, u32 obj, void *out,
		       u32 out_len)
{
	struct vgpu_rm_free m = {
		.hdr = { .magic = (u32)VGPU_RM_MSG_MAGIC, .abi_version = VGPU_ABI_VERSION,
			 .op = op, .length = sizeof(m) },
		.h_client = client, .h_object = obj,
	};
	struct vvf_rm_rsp rsp;
	u32 rsp_len = sizeof(rsp);
	s32 status;
	bool sent;
	int ret;

	ret = vvf_mbox_file_call(f->vd, epoch, VF_MSG_RM, &m, sizeof(m), &rsp, &rsp_len, &status,
				 VVF_DEFAULT_TIMEOUT_NS, &sent);
	if (ret || status)
		return ret ? ret : status;
	return vvf_rm_rsp_take(&rsp, rsp_len, out, out_len, NULL);
}

/* A DUP of another file's memory keeps that memory alive on the host for as long as the DUP
 * lives, whatever its owner frees: it counts against this file's quota too, with the size
 * and kind the host reports for the new handle (MAP), or one file could pin without bound
 * what others allocate and free. Past the quota (or when the host does not say) the DUP is
 * freed again and the reply becomes -EDQUOT (or the error). Under f->lock. The reply's new
 * length. */
static u32 vvf_rm_charge_dup(struct vvf_file *f, u32 epoch, const struct vgpu_rm_dup *d,
			     void *rsp, u32 rsp_len)
{
	const struct vgpu_rm_reply *r = rsp;
	struct vgpu_rm_map_info mi = { 0 };
	enum vvf_mem_kind kind;
	u32 handle;
	int ret;

	if (rsp_len < sizeof(*r) || r->status || vvf_client_idx(f, d->h_client) < 0)
		return rsp_len;
	handle = r->handle;
	ret = vvf_file_rm(f, epoch, VGPU_RM_OP_MAP, d->h_client, handle, &mi, sizeof(mi));
	kind = mi.aperture == VGPU_APER_SYS ? VVF_MEM_DMA : VVF_MEM_VRAM;
	if (!ret && !vvf_over(f, kind, mi.size)) {
		vvf_mem_add(f, d->h_client, handle, kind, 0, 0, mi.size, 0);
		return rsp_len;
	}
	vvf_file_rm(f, epoch, VGPU_RM_OP_FREE, d->h_client, handle, NULL, 0);
	return vvf_rm_refuse(d, rsp, ret ? ret : -EDQUOT);
}

/* A successful CHANNEL_BIND_VASPACE moves the host's dependency of the channel to the new
 * VASPACE: a FREE of that one frees the channel, one of the old VASPACE no longer does. The
 * record follows, so the channel stays charged and its events stay this file's for as
 * long as the host keeps it. Under f->lock. */
static void vvf_rm_record_control(struct vvf_file *f, const struct vgpu_rm_control *c, u32 len)
{
	const struct vgpu_rm_bind_params *b = (const void *)(c + 1);
	struct vvf_chan *ch;

	if (c->cmd != VGPU_RM_CTRL_CHANNEL_BIND_VASPACE || c->params_len < sizeof(*b) ||
	    len - sizeof(*c) < sizeof(*b))
		return;
	list_for_each_entry(ch, &f->chans, node)
		if (ch->client == c->h_client && ch->handle == c->h_object)
			ch->vaspace = b->h_vaspace;
}

/* What a FREE of @fr would take from the file, in the order that keeps the GPU and the CPU
 * out of it: the AS_MAP mappings and the CPU mappings of the memory (before the host may
 * hand it out again), and with @freed, once the host may have freed it, the records and the
 * quota it was charged. Under f->lock. */
static void vvf_rm_free_effects(struct file *filp, struct vvf_file *f,
				const struct vgpu_rm_free *fr, bool freed)
{
	int i = vvf_client_idx(f, fr->h_client);
	bool all = fr->h_object == fr->h_client || (i >= 0 && fr->h_object == f->devices[i]);

	if (i < 0)
		return;
	if (!freed) {
		vvf_as_unmap_mem(f, fr->h_client, all ? 0 : fr->h_object);
		vvf_mems_zap(filp, f, fr->h_client, all ? 0 : fr->h_object);
		return;
	}
	if (fr->h_object == fr->h_client) {
		vvf_client_drop(filp, f, i);
	} else if (all) {	/* memory and channels live under the DEVICE */
		vvf_mems_drop(filp, f, fr->h_client, 0);
		vvf_chans_drop(f, fr->h_client, 0, 0);
	} else {
		vvf_mems_drop(filp, f, fr->h_client, fr->h_object);
		vvf_chans_drop(f, fr->h_client, fr->h_object, fr->h_object);
	}
}

/* Record what a successful RM call allocated. Under f->lock. */
static void vvf_rm_record(struct vvf_file *f, const void *req, u32 len, const void *rsp,
			  u32 rsp_len)
{
	const struct vgpu_rm_msg *h = req;
	const struct vgpu_rm_reply *r = rsp;
	int i;

	if (rsp_len < sizeof(*r) || r->status || r->params_len > rsp_len - sizeof(*r))
		return;
	if (h->op == VGPU_RM_OP_ALLOC_CLIENT) {
		if (f->nr_clients < VVF_MAX_CLIENTS && VGPU_RM_IS_CLIENT(r->handle)) {
			f->clients[f->nr_clients] = r->handle;
			f->devices[f->nr_clients++] = 0;
		}
		return;
	}
	i = vvf_client_idx(f, vvf_rm_client_of(req, len));
	if (i < 0)
		return;
	if (h->op == VGPU_RM_OP_ALLOC && len >= sizeof(struct vgpu_rm_alloc))
		vvf_rm_record_alloc(f, i, req, len, r);
	else if (h->op == VGPU_RM_OP_DUP && len >= sizeof(struct vgpu_rm_dup))
		vvf_rm_record_dup(f, req, r);
	else if (h->op == VGPU_RM_OP_CONTROL && len >= sizeof(struct vgpu_rm_control))
		vvf_rm_record_control(f, req, len);
}

/* Whether the host may have carried out a FREE: unless it never reached the host or the
 * host answered it with an error, it counts as done. A FREE that timed out may still run,
 * and the handle or memory then goes to someone else: records kept for it would grant this
 * file another's object. What an unanswered FREE did not free stays on the host under the
 * file's client (freed with it) or, for a client, until the next reset. */
static bool vvf_rm_maybe_freed(int ret, bool sent, s32 status, const void *rsp, u32 rsp_len)
{
	const struct vgpu_rm_reply *r = rsp;

	if (ret)
		return sent;
	return !status && (rsp_len < sizeof(*r) || !r->status);
}

/* ---- open and release ---- */

/* An empty ring of @n slots of @size bytes at @base (the file's private pages). */
static void vvf_ring_format(struct vvf_ring *r, void *base, u32 n, u32 size)
{
	struct vgpu_ring_hdr *h = base;

	h->magic = VGPU_RING_MAGIC;
	h->nr_elems = n;
	h->elem_size = size;
	r->hdr = h;
	r->slots = (u8 *)(h + 1);
	r->nr_elems = n;
	r->elem_size = size;
}

static int vvf_open(struct inode *inode, struct file *filp)
{
	struct vvf_dev *vd = container_of(filp->private_data, struct vvf_dev, misc);
	struct vvf_file *f;

	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	f->rings = vmalloc_user(3 * vd->lay.ring_region);
	if (!f->rings) {
		kfree(f);
		return -ENOMEM;
	}
	vvf_ring_format(&f->preq, f->rings, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	vvf_ring_format(&f->prsp, f->rings + vd->lay.ring_region, VF_MBOX_SLOTS,
			VF_MBOX_SLOT_SIZE);
	vvf_ring_format(&f->pevt, f->rings + 2 * vd->lay.ring_region, VF_EVT_SLOTS,
			VF_EVT_SLOT_SIZE);
	f->vd = vd;
	mutex_init(&f->lock);
	mutex_init(&f->as_lock);
	INIT_LIST_HEAD(&f->mems);
	INIT_LIST_HEAD(&f->chans);
	f->filp = filp;
	/* Nothing held yet: whatever reset the event thread has still to handle is not ours. */
	f->epoch = smp_load_acquire(&vd->hdr->reset_count);
	vvf_quota_init(f);
	kref_get(&vd->ref);
	mutex_lock(&vd->files_mutex);
	list_add(&f->node, &vd->files);
	vd->nr_files++;
	mutex_unlock(&vd->files_mutex);
	filp->private_data = f;
	return 0;
}

/* Free every client the file still holds (the host frees what lies under each). */
static void vvf_free_clients(struct file *filp, struct vvf_file *f)
{
	struct vvf_dev *vd = f->vd;
	struct vgpu_rm_free req;
	struct vgpu_rm_reply rsp;
	u32 rsp_len, epoch = vvf_file_sync(f);	/* a reset freed the older ones */
	s32 status;
	bool sent;

	while (f->nr_clients) {
		memset(&req, 0, sizeof(req));
		req.hdr.magic = (u32)VGPU_RM_MSG_MAGIC;
		req.hdr.abi_version = VGPU_ABI_VERSION;
		req.hdr.op = VGPU_RM_OP_FREE;
		req.hdr.length = sizeof(req);
		req.h_client = req.h_object = f->clients[0];
		rsp_len = sizeof(rsp);
		if (vvf_mbox_file_call(vd, epoch, VF_MSG_RM, &req, sizeof(req), &rsp, &rsp_len,
				       &status, VVF_DEFAULT_TIMEOUT_NS, &sent) == -ETIMEDOUT)
			dev_warn(&vd->pdev->dev, "RM client %#x of a closed file not freed\n",
				 f->clients[0]);
		vvf_client_drop(filp, f, 0);
	}
}

static int vvf_release(struct inode *inode, struct file *filp)
{
	struct vvf_file *f = filp->private_data;
	struct vvf_dev *vd = f->vd;

	down_read(&vd->remove_sem);
	vvf_as_release(f);
	mutex_lock(&f->lock);
	if (!READ_ONCE(vd->gone))
		vvf_free_clients(filp, f);
	vvf_mems_drop(filp, f, 0, 0);
	vvf_chans_drop(f, 0, 0, 0);
	mutex_unlock(&f->lock);
	up_read(&vd->remove_sem);
	mutex_lock(&vd->files_mutex);
	list_del(&f->node);
	vd->nr_files--;
	mutex_unlock(&vd->files_mutex);
	vfree(f->rings);
	kfree(f);
	vvf_dev_put(vd);
	return 0;
}

/* ---- events and resets (from the event thread) ---- */

void vvf_files_event(struct vvf_dev *vd, const struct vf_event *e)
{
	bool chan = e->type == VF_EVT_MMU_FAULT || e->type == VF_EVT_CHAN_ERROR;
	struct vvf_file *f;
	void *slot;

	mutex_lock(&vd->files_mutex);
	list_for_each_entry(f, &vd->files, node) {
		if (chan && (e->arg0 >= VVF_MAX_CHID || !test_bit(e->arg0, f->chids)))
			continue;
		slot = vvf_ring_produce_slot(&f->pevt);
		if (IS_ERR(slot))	/* the process broke its own ring: start it over */
			vvf_ring_skip(&f->pevt);
		if (IS_ERR_OR_NULL(slot)) {
			atomic64_inc(&f->dropped);
			continue;
		}
		memcpy(slot, e, sizeof(*e));
		vvf_ring_produce_commit(&f->pevt);
	}
	mutex_unlock(&vd->files_mutex);
}

void vvf_files_reset(struct vvf_dev *vd, u32 rc, bool all)
{
	struct vvf_file *f;

	mutex_lock(&vd->files_mutex);
	list_for_each_entry(f, &vd->files, node) {
		mutex_lock(&f->lock);
		vvf_as_reset(f);
		/* Memory first: every user mapping of it goes; the control pages stay unless
		 * the device is going away. A file that already forgot for this reset (or a
		 * later one) keeps what it made since. */
		if (all)
			vvf_file_forget(f, rc, vd->bar2_size);
		else if ((s32)(rc - f->epoch) > 0)
			vvf_file_forget(f, rc, vd->lay.ctrl_off);
		mutex_unlock(&f->lock);
	}
	mutex_unlock(&vd->files_mutex);
}

/* ---- ioctls ---- */

/* INFO as a caller built against uapi 1.1 encodes it (its struct was shorter). */
#define VVF_IOC_INFO_1_1	_IOC(_IOC_READ | _IOC_WRITE, VGPU_VF_IOC_TYPE, 1, VGPU_VF_INFO_SIZE_1_1)

/* Copy the argument in: its size field must be the struct's (the uapi's versioning). */
static int vvf_arg_in(void *karg, size_t size, unsigned long arg)
{
	if (copy_from_user(karg, (void __user *)arg, size))
		return -EFAULT;
	return *(u32 *)karg == size ? 0 : -EINVAL;
}

/* VGPU_VF_IOC_INFO of @size bytes: this uapi's, or 1.1's (filled up to its end). */
static long vvf_ioc_info(struct vvf_file *f, unsigned long arg, u32 size)
{
	struct vvf_dev *vd = f->vd;
	struct vgpu_vf_ioc_info a;
	int ret = vvf_arg_in(&a, size, arg), v;

	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.size = size;
	a.uapi_version = VGPU_VF_UAPI_VERSION;
	a.abi_version = READ_ONCE(vd->hdr->abi_version);
	a.vf_id = vd->vf_id;
	a.bar_size = vd->bar2_size;
	a.nr_vectors = vd->nr_vectors;
	a.reset_count = smp_load_acquire(&vd->hdr->reset_count);
	for (v = 0; v < VGPU_VF_NR_VECTORS; v++)
		a.irq_count[v] = atomic64_read(&vd->irq_count[v]);
	a.open_files = READ_ONCE(vd->nr_files);
	a.dropped = atomic64_read(&f->dropped);
	/* Only the file's own lock, never inside vd->files_mutex: a mailbox call holds it for
	 * as long as the call takes, and the event thread, every open and every close take
	 * files_mutex. */
	mutex_lock(&f->lock);
	a.rm_clients = f->nr_clients;
	a.vram_limit = f->quota.vram;
	a.vram_used = f->vram_used;
	a.dma_limit = f->quota.dma;
	a.dma_used = f->dma_used;
	a.chan_limit = f->quota.chans;
	a.chan_used = f->chans_used;
	a.client_limit = f->quota.clients;
	a.strict = f->strict;
	mutex_unlock(&f->lock);
	return copy_to_user((void __user *)arg, &a, size) ? -EFAULT : 0;
}

/* One mailbox call of this file: RM messages are checked against its clients (a foreign
 * one gets the reply the host gives an unknown handle) and recorded. Under f->lock. 0 with
 * *@status and the reply, or the driver's -errno. */
static int vvf_file_call(struct vvf_file *f, u32 type, const void *req, u32 req_len, void *rsp,
			 u32 *rsp_len, s32 *status, u64 timeout_ns)
{
	bool rm = type == VF_MSG_RM && req_len >= sizeof(struct vgpu_rm_msg);
	u32 epoch = vvf_file_sync(f);	/* before the records are consulted */
	int refuse = rm ? vvf_rm_refusal(f, req, req_len) : 0;
	int ret = rm ? vvf_rm_check(f, req, req_len) : 0;
	const struct vgpu_rm_msg *h = req;
	bool is_free = rm && h->op == VGPU_RM_OP_FREE && req_len >= sizeof(struct vgpu_rm_free);
	struct vf_msg_info_req rq;
	bool sent;

	*status = 0;
	/* An RM call the caller cut short would still run on the host, out of step with the
	 * records: its timeout may be longer than the default, never shorter. */
	if (type == VF_MSG_RM)
		timeout_ns = max_t(u64, timeout_ns, VVF_DEFAULT_TIMEOUT_NS);
	/* The host hears this driver's ABI and flags, not the process's: the driver is what
	 * speaks to it (and what acknowledges resets). */
	if (type == VF_MSG_GET_INFO) {
		vvf_info_req(&rq);
		req = &rq;
		req_len = sizeof(rq);
	}
	if (refuse) {
		*rsp_len = vvf_rm_refuse(req, rsp, refuse);
		return 0;
	}
	if (ret)
		return ret;
	if (is_free)
		vvf_rm_free_effects(f->filp, f, req, false);
	ret = vvf_mbox_file_call(f->vd, epoch, type, req, req_len, rsp, rsp_len, status,
				 timeout_ns, &sent);
	/* An ALLOC of VRAM while the VRAM of pages a reset lost cannot be held (svm.c): no
	 * VRAM is handed out until those pages are freed. */
	if (rm && ret == -EAGAIN) {
		*rsp_len = vvf_rm_refuse(req, rsp, VGPU_RM_ERR_AGAIN);
		return 0;
	}
	if (is_free && vvf_rm_maybe_freed(ret, sent, *status, rsp, *rsp_len))
		vvf_rm_free_effects(f->filp, f, req, true);
	else if (rm && !ret && !*status && vvf_rm_dup_foreign(f, req, req_len))
		*rsp_len = vvf_rm_charge_dup(f, epoch, req, rsp, *rsp_len);
	else if (rm && !ret && !*status)
		vvf_rm_record(f, req, req_len, rsp, *rsp_len);
	return ret;
}

static long vvf_ioc_mbox(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_mbox a;
	u32 rsp_len = VF_MSG_MAX_PAYLOAD;
	void *req = NULL, *rsp = NULL;
	s32 status = 0;
	int ret = vvf_arg_in(&a, sizeof(a), arg);

	if (ret)
		return ret;
	if ((a.type != VF_MSG_PING && a.type != VF_MSG_GET_INFO && a.type != VF_MSG_RM) ||
	    a.req_len > VF_MSG_MAX_PAYLOAD || a.timeout_ns > VVF_MAX_TIMEOUT_NS)
		return -EINVAL;
	req = kzalloc(VF_MSG_MAX_PAYLOAD, GFP_KERNEL);
	rsp = kzalloc(VF_MSG_MAX_PAYLOAD, GFP_KERNEL);
	if (!req || !rsp) {
		ret = -ENOMEM;
		goto out;
	}
	if (copy_from_user(req, u64_to_user_ptr(a.req_ptr), a.req_len)) {
		ret = -EFAULT;
		goto out;
	}
	mutex_lock(&f->lock);
	ret = vvf_file_call(f, a.type, req, a.req_len, rsp, &rsp_len, &status,
			    a.timeout_ns ? a.timeout_ns : VVF_DEFAULT_TIMEOUT_NS);
	mutex_unlock(&f->lock);
	if (ret)
		goto out;
	if (rsp_len > a.rsp_cap) {
		status = -EMSGSIZE;
		rsp_len = 0;
	}
	if (copy_to_user(u64_to_user_ptr(a.rsp_ptr), rsp, rsp_len)) {
		ret = -EFAULT;
		goto out;
	}
	a.rsp_len = rsp_len;
	a.status = status;
	ret = copy_to_user((void __user *)arg, &a, sizeof(a)) ? -EFAULT : 0;
out:
	kfree(req);
	kfree(rsp);
	return ret;
}

/* Serve the file's request ring: each request through the real mailbox, its reply (or the
 * driver's error as its status) into the file's reply ring, then the file's mailbox
 * "interrupt". The slots are the process's memory: each is copied before it is read. At
 * most a ring's worth per call, and none once the process is being killed: another thread
 * of it refilling the ring must not keep f->lock (which a reset needs) held for ever. */
static int vvf_serve(struct vvf_file *f)
{
	struct vf_msg *slot, m;
	void *req, *rsp;
	u32 rsp_len, n;
	s32 status;
	bool big;
	int ret;

	/* Zeroed: whatever of @rsp a reply names goes to the file's ring, never kernel heap. */
	req = kmalloc(VF_MSG_MAX_PAYLOAD, GFP_KERNEL);
	rsp = kzalloc(VF_MSG_MAX_PAYLOAD, GFP_KERNEL);
	if (!req || !rsp) {
		kfree(req);
		kfree(rsp);
		return -ENOMEM;
	}
	mutex_lock(&f->lock);
	for (n = 0; n < f->preq.nr_elems && !fatal_signal_pending(current); n++) {
		slot = vvf_ring_consume_slot(&f->preq);
		if (IS_ERR(slot))	/* the process broke its own ring: start it over */
			vvf_ring_skip(&f->preq);
		if (IS_ERR_OR_NULL(slot))
			break;
		memcpy(&m, slot, sizeof(m));
		big = m.length > VF_MSG_MAX_PAYLOAD || m.length > f->preq.elem_size - sizeof(m);
		if (!big)
			memcpy(req, slot + 1, m.length);
		vvf_ring_consume_commit(&f->preq);
		rsp_len = VF_MSG_MAX_PAYLOAD;
		if (big)
			ret = -EMSGSIZE;
		else if (m.type != VF_MSG_PING && m.type != VF_MSG_GET_INFO && m.type != VF_MSG_RM)
			ret = -EOPNOTSUPP;	/* what the host answers an unknown type */
		else
			ret = vvf_file_call(f, m.type, req, m.length, rsp, &rsp_len, &status,
					    VVF_DEFAULT_TIMEOUT_NS);
		if (ret) {
			status = ret;
			rsp_len = 0;
		}
		slot = vvf_ring_produce_slot(&f->prsp);
		if (IS_ERR(slot))
			vvf_ring_skip(&f->prsp);
		if (IS_ERR_OR_NULL(slot)) {
			atomic64_inc(&f->dropped);
			continue;
		}
		memset(slot, 0, sizeof(*slot));
		slot->type = m.type;
		slot->seq = m.seq;
		slot->length = rsp_len;
		slot->status = status;
		memcpy(slot + 1, rsp, rsp_len);
		vvf_ring_produce_commit(&f->prsp);
	}
	mutex_unlock(&f->lock);
	atomic64_inc(&f->replies);
	wake_up_all(&f->vd->wq[VF_VEC_MBOX]);
	kfree(req);
	kfree(rsp);
	return 0;
}

/* The count a waiter on vector @v watches: the mailbox vector is the file's own. */
static u64 vvf_count(struct vvf_file *f, u32 v)
{
	return v == VF_VEC_MBOX ? atomic64_read(&f->replies) : atomic64_read(&f->vd->irq_count[v]);
}

static long vvf_ioc_wait(struct vvf_file *f, unsigned long arg)
{
	struct vvf_dev *vd = f->vd;
	struct vgpu_vf_ioc_wait a;
	u64 seen;
	long left;
	int ret = vvf_arg_in(&a, sizeof(a), arg);

	if (ret)
		return ret;
	if (a.vector >= VGPU_VF_NR_VECTORS || a.timeout_ns > VVF_MAX_TIMEOUT_NS)
		return -EINVAL;
	seen = READ_ONCE(f->seen[a.vector]);
	left = wait_event_interruptible_timeout(vd->wq[a.vector],
		vvf_count(f, a.vector) != seen || READ_ONCE(vd->gone),
		nsecs_to_jiffies(a.timeout_ns));
	if (left < 0)
		return left;	/* -ERESTARTSYS: a signal */
	a.count = vvf_count(f, a.vector);
	WRITE_ONCE(f->seen[a.vector], a.count);
	if (a.count == seen)
		ret = READ_ONCE(vd->gone) ? -ENODEV : -ETIMEDOUT;
	if (copy_to_user((void __user *)arg, &a, sizeof(a)))
		return -EFAULT;
	return ret;
}

static long vvf_ioc_notify(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_notify a;
	int ret = vvf_arg_in(&a, sizeof(a), arg);

	if (ret)
		return ret;
	if (a.vector == VF_VEC_MBOX)
		return vvf_serve(f);
	if (a.vector != VF_VEC_GPU)
		return -EINVAL;
	vvf_notify(f->vd, a.vector);
	return 0;
}

static const unsigned int vvf_cmds[] = {
	VGPU_VF_IOC_INFO, VVF_IOC_INFO_1_1, VGPU_VF_IOC_MBOX, VGPU_VF_IOC_WAIT, VGPU_VF_IOC_NOTIFY,
	VGPU_VF_IOC_SVM, VGPU_VF_IOC_SVM_QUERY, VGPU_VF_IOC_AS_CREATE, VGPU_VF_IOC_AS_CHANNEL,
	VGPU_VF_IOC_AS_INFO, VGPU_VF_IOC_AS_MAP, VGPU_VF_IOC_AS_UNMAP,
};

/* A known ioctl number with a struct size this driver does not know: a caller built against
 * another uapi (-EINVAL, where an unknown number is -ENOTTY). */
static bool vvf_wrong_size(unsigned int cmd)
{
	bool nr_known = false;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(vvf_cmds); i++) {
		if (cmd == vvf_cmds[i])
			return false;
		nr_known |= _IOC_TYPE(cmd) == _IOC_TYPE(vvf_cmds[i]) &&
			    _IOC_NR(cmd) == _IOC_NR(vvf_cmds[i]);
	}
	return nr_known;
}

static long vvf_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct vvf_file *f = filp->private_data;
	struct vvf_dev *vd = f->vd;
	long ret;

	if (vvf_wrong_size(cmd))
		return -EINVAL;
	down_read(&vd->remove_sem);
	if (READ_ONCE(vd->gone)) {
		ret = -ENODEV;
		goto out;
	}
	switch (cmd) {
	case VGPU_VF_IOC_INFO:
		ret = vvf_ioc_info(f, arg, sizeof(struct vgpu_vf_ioc_info));
		break;
	case VVF_IOC_INFO_1_1:
		ret = vvf_ioc_info(f, arg, VGPU_VF_INFO_SIZE_1_1);
		break;
	case VGPU_VF_IOC_MBOX:
		ret = vvf_ioc_mbox(f, arg);
		break;
	case VGPU_VF_IOC_WAIT:
		ret = vvf_ioc_wait(f, arg);
		break;
	case VGPU_VF_IOC_NOTIFY:
		ret = vvf_ioc_notify(f, arg);
		break;
	case VGPU_VF_IOC_SVM:
		ret = vvf_ioc_svm(f, arg);
		break;
	case VGPU_VF_IOC_SVM_QUERY:
		ret = vvf_ioc_svm_query(f, arg);
		break;
	case VGPU_VF_IOC_AS_CREATE:
		ret = vvf_ioc_as_create(f, arg);
		break;
	case VGPU_VF_IOC_AS_CHANNEL:
		ret = vvf_ioc_as_channel(f, arg);
		break;
	case VGPU_VF_IOC_AS_INFO:
		ret = vvf_ioc_as_info(f, arg);
		break;
	case VGPU_VF_IOC_AS_MAP:
		ret = vvf_ioc_as_map(f, arg);
		break;
	case VGPU_VF_IOC_AS_UNMAP:
		ret = vvf_ioc_as_unmap(f, arg);
		break;
	default:
		ret = -ENOTTY;
	}
out:
	up_read(&vd->remove_sem);
	return ret;
}

/* ---- mmap: file offset = BAR2 offset, pages inserted on first touch ---- */

/* For tests: milliseconds a fault on a memory object's page waits between deciding that the
 * file may map it and inserting the page, with the file's lock held as always, so a test
 * can make a FREE race that window deterministically (the FREE must find the page mapped
 * and zap it), or hold the file's lock while it checks who waits for it. Setting it to 0
 * ends the waits under way. 0 in use. */
static unsigned int mmap_fault_delay_ms;
module_param(mmap_fault_delay_ms, uint, 0644);
MODULE_PARM_DESC(mmap_fault_delay_ms,
		 "test only: ms a memory fault waits before its insert, until set to 0 (0)");

/* mmap_fault_delay_ms's wait: @ms, or until the parameter is 0 again. Its own function, so
 * that a test finds the fault here by its wchan. */
static noinline void vvf_fault_test_delay(unsigned int ms)
{
	unsigned long end = jiffies + msecs_to_jiffies(ms);

	while (READ_ONCE(mmap_fault_delay_ms) && time_before(jiffies, end))
		schedule_timeout_uninterruptible(msecs_to_jiffies(10));
}

/* VVF_PAGE_MEM: a page only a memory object of the file's makes accessible. */
enum vvf_page { VVF_PAGE_NONE, VVF_PAGE_RO, VVF_PAGE_RW, VVF_PAGE_MEM };

/* What this file may do with the BAR2 page at @off if it is one of the pages whose access
 * never changes (the header and control pages, the doorbell and interrupt pages, the
 * file's own rings); VVF_PAGE_MEM for any other page. *@pfn: the page to show there (the
 * file's own for the ring pages). */
static enum vvf_page vvf_page_access(struct vvf_file *f, u64 off, unsigned long *pfn)
{
	const struct vvf_layout *l = &f->vd->lay;
	u64 ring[3] = { l->req_off, l->rsp_off, l->evt_off };
	int i;

	*pfn = (f->vd->bar2_phys + off) >> PAGE_SHIFT;
	for (i = 0; i < 3; i++)
		if (off >= ring[i] && off - ring[i] < l->ring_region) {
			*pfn = vmalloc_to_pfn(f->rings + i * l->ring_region + (off - ring[i]));
			return VVF_PAGE_RW;
		}
	if (off == l->hdr_off || off == l->ctrl_off)
		return VVF_PAGE_RO;
	if ((l->db_off && off == l->db_off) || (l->intr_off && off == l->intr_off))
		return VVF_PAGE_RW;
	return VVF_PAGE_MEM;
}

/* Whether the file holds a memory object over the BAR2 page at @off: VVF_PAGE_RW or
 * VVF_PAGE_NONE. Under f->lock, which a fault holds until the page is inserted: a FREE or a
 * reset zaps the object's pages under the same lock, so the page is either inserted before
 * the zap (which removes it) or refused after it, never inserted once the host may have
 * given the memory to another file. */
static enum vvf_page vvf_page_mem_locked(struct vvf_file *f, u64 off)
{
	struct vvf_mem *m;

	lockdep_assert_held(&f->lock);
	/* Records of an earlier reset name memory the host may have given to another file. */
	if (smp_load_acquire(&f->vd->hdr->reset_count) != f->epoch)
		return VVF_PAGE_NONE;
	list_for_each_entry(m, &f->mems, node)
		if (off >= m->off && off - m->off < m->size)
			return VVF_PAGE_RW;
	return VVF_PAGE_NONE;
}

/* Insert the memory object page at @off for a fault, if the file holds it. The lock order
 * is mmap_lock (the fault's), f->lock, then the page table lock; a zap takes f->lock,
 * i_mmap_rwsem, then the page table lock, and no holder of f->lock takes mmap_lock (the
 * ioctls copy user memory outside it). */
static vm_fault_t vvf_fault_mem(struct vm_fault *vmf, struct vvf_file *f, u64 off,
				unsigned long pfn)
{
	unsigned int delay = READ_ONCE(mmap_fault_delay_ms);
	vm_fault_t ret = VM_FAULT_SIGBUS;

	mutex_lock(&f->lock);
	if (vvf_page_mem_locked(f, off) == VVF_PAGE_RW) {
		if (unlikely(delay))
			vvf_fault_test_delay(delay);
		ret = vmf_insert_pfn(vmf->vma, vmf->address, pfn);
	}
	mutex_unlock(&f->lock);
	return ret;
}

static vm_fault_t vvf_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct vvf_file *f = vma->vm_private_data;
	struct vvf_dev *vd = f->vd;
	u64 off = (u64)vmf->pgoff << PAGE_SHIFT;
	unsigned long pfn;
	enum vvf_page acc;
	vm_fault_t ret = VM_FAULT_SIGBUS;

	/* Only remove takes it for writing: then the device is going, and a fault inside an
	 * ioctl that holds it for reading must not wait behind remove. */
	if (!down_read_trylock(&vd->remove_sem))
		return VM_FAULT_SIGBUS;
	if (READ_ONCE(vd->gone) || off >= vd->bar2_size)
		goto out;
	acc = vvf_page_access(f, off, &pfn);
	if (acc == VVF_PAGE_MEM)
		ret = vvf_fault_mem(vmf, f, off, pfn);
	else if (acc == VVF_PAGE_RW)
		ret = vmf_insert_pfn(vma, vmf->address, pfn);
	else if (acc == VVF_PAGE_RO && !(vmf->flags & FAULT_FLAG_WRITE))
		ret = vmf_insert_pfn_prot(vma, vmf->address, pfn,
					  vm_get_page_prot(vma->vm_flags & ~VM_WRITE));
out:
	up_read(&vd->remove_sem);
	return ret;
}

/* A write to a page inserted read-only (every page: the mapping write-notifies): allowed
 * only where the file may write. It only makes a present PTE writable, and the core checks
 * under the page table lock that the PTE is still the one it faulted on, so a zap racing
 * it leaves nothing behind; the check itself needs the device (its header) still there. */
static vm_fault_t vvf_pfn_mkwrite(struct vm_fault *vmf)
{
	struct vvf_file *f = vmf->vma->vm_private_data;
	struct vvf_dev *vd = f->vd;
	u64 off = (u64)vmf->pgoff << PAGE_SHIFT;
	vm_fault_t ret = VM_FAULT_SIGBUS;
	unsigned long pfn;
	enum vvf_page acc;

	if (!down_read_trylock(&vd->remove_sem))
		return VM_FAULT_SIGBUS;
	if (READ_ONCE(vd->gone) || off >= vd->bar2_size)
		goto out;
	acc = vvf_page_access(f, off, &pfn);
	if (acc == VVF_PAGE_MEM) {
		mutex_lock(&f->lock);
		acc = vvf_page_mem_locked(f, off);
		mutex_unlock(&f->lock);
	}
	if (acc == VVF_PAGE_RW)
		ret = 0;
out:
	up_read(&vd->remove_sem);
	return ret;
}

static const struct vm_operations_struct vvf_vm_ops = {
	.fault = vvf_fault,
	.pfn_mkwrite = vvf_pfn_mkwrite,
};

static int vvf_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct vvf_file *f = filp->private_data;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT, len = vma->vm_end - vma->vm_start;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;		/* a private copy of device memory means nothing */
	if (off > f->vd->bar2_size || len > f->vd->bar2_size - off)
		return -EINVAL;
	vma->vm_flags |= VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_DONTDUMP;
	vma->vm_private_data = f;
	vma->vm_ops = &vvf_vm_ops;
	return 0;
}

const struct file_operations vvf_fops = {
	.owner = THIS_MODULE,
	.open = vvf_open,
	.release = vvf_release,
	.unlocked_ioctl = vvf_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = vvf_mmap,
	.llseek = noop_llseek,
};
