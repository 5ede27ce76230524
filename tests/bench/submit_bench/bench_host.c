/* bench_host: the emulated GPU and IOMMU behind one VF, served in-process (bench_host.h). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/ring.h"
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "tests/bench/submit_bench/bench_host.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_abi_shim.h"
#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>

#define BH_FN		1u
#define BH_NVEC		3u
#define BH_DMA_IOVA	(1ull << 32)
#define BH_MAX_OBJS	1024u

enum bh_kind { BH_FREE, BH_DEVICE, BH_VIDMEM, BH_VASPACE, BH_CHANNEL };

struct bh_obj {
	enum bh_kind kind;
	uint64_t addr, size;		/* vidmem; vaspace: addr = pdb */
	uint32_t chid, runlist;		/* channel */
	uint32_t userd_aper;
	uint64_t userd_addr;
};

struct bench_host {
	struct gpu *g;
	struct gpu_priv *p;
	struct iommu *mmu;
	struct iommu_domain *dom;
	struct iommu_memobj *mo;
	int bar_fd;
	uint8_t *bar;			/* host view of BAR2 */
	uint64_t bar_size, vram, dma, dma_off, ctrl;
	struct vf_bar_header *hdr;
	struct vf_shim_intr_page *intr;
	int to_host[BH_NVEC], to_guest[BH_NVEC];
	struct cmn_ring req, rsp, evt;
	pthread_t thr;
	atomic_int stop;
	/* touched by the mailbox thread only */
	struct bh_obj objs[BH_MAX_OBJS];
	uint64_t chans;			/* allocated chids */
	uint32_t last_chid;
	uint64_t runlist[GPU_MAX_ENGINES];
	_Atomic uint64_t requests;
};

struct bh_transport {
	struct vgpu_vf_transport t;
	struct bench_host *h;
	uint8_t *map;
};

/* ---- RM: the calls of vgpu/rm.h the driver makes, on a flat object table ---- */

#define BH_CLIENT	VGPU_RM_CLIENT_HANDLE(BH_FN, 1)

static int bh_new_obj(struct bench_host *h, enum bh_kind k, uint32_t *handle)
{
	for (uint32_t i = 1; i < BH_MAX_OBJS; i++) {
		if (h->objs[i].kind == BH_FREE) {
			memset(&h->objs[i], 0, sizeof(h->objs[i]));
			h->objs[i].kind = k;
			*handle = VGPU_RM_HANDLE_BASE | i;
			return 0;
		}
	}
	return -ENOSPC;
}

static struct bh_obj *bh_obj(struct bench_host *h, uint32_t handle, enum bh_kind k)
{
	uint32_t i = handle - VGPU_RM_HANDLE_BASE;

	if (handle < VGPU_RM_HANDLE_BASE || i == 0 || i >= BH_MAX_OBJS ||
	    h->objs[i].kind == BH_FREE || (k != BH_FREE && h->objs[i].kind != k))
		return NULL;
	return &h->objs[i];
}

static bool bh_vram_free(struct bench_host *h, uint64_t at, uint64_t size)
{
	if (at > h->vram || size > h->vram - at)
		return false;
	for (uint32_t i = 1; i < BH_MAX_OBJS; i++) {
		const struct bh_obj *o = &h->objs[i];

		if (o->kind == BH_VIDMEM && at < o->addr + o->size && o->addr < at + size)
			return false;
	}
	return true;
}

/* First fit: at 0 or right after an allocation, aligned to the page size. */
static int bh_vidmem(struct bench_host *h, struct vgpu_rm_vidmem_params *p, uint32_t *handle)
{
	uint64_t ps = p->page_size ? p->page_size : 64 << 10, size = p->size, at = 0;
	bool found;
	struct bh_obj *o;
	int ret;

	if (!size || (ps & (ps - 1)) || size % ps)
		return -EINVAL;
	found = bh_vram_free(h, 0, size);
	for (uint32_t i = 1; !found && i < BH_MAX_OBJS; i++) {
		if (h->objs[i].kind != BH_VIDMEM)
			continue;
		at = (h->objs[i].addr + h->objs[i].size + ps - 1) & ~(ps - 1);
		found = bh_vram_free(h, at, size);
	}
	if (!found)
		return -VGPU_EQUOTA;
	ret = bh_new_obj(h, BH_VIDMEM, handle);
	if (ret)
		return ret;
	o = bh_obj(h, *handle, BH_VIDMEM);
	o->addr = p->addr = at;
	o->size = size;
	return 0;
}

/* Channel ids round robin, not lowest-free: a just-freed id is the one most likely to be
 * still held by an engine. */
static uint32_t bh_next_chid(struct bench_host *h)
{
	for (uint32_t i = 0; i < GPU_FN_MAX_CHANNELS; i++) {
		uint32_t c = (h->last_chid + 1 + i) % GPU_FN_MAX_CHANNELS;

		if (!(h->chans & (1ull << c))) {
			h->last_chid = c;
			return c;
		}
	}
	return GPU_FN_MAX_CHANNELS;
}

static int bh_channel(struct bench_host *h, struct vgpu_rm_channel_params *p, uint32_t *handle)
{
	struct bh_obj *vas = bh_obj(h, p->h_vaspace, BH_VASPACE), *o;
	struct gpu_priv_chan cfg;
	uint32_t chid;
	int ret;

	if (!vas || p->runlist >= gpu_nr_engines(h->g))
		return -EINVAL;
	/* Replayable faults need MMU-fault events and FAULT_REPLAY, which this host does not
	 * serve: refused, so the guest suite's managed-memory case skips instead of waiting
	 * for a replay that never comes. */
	if (p->flags & VGPU_RM_CHAN_REPLAYABLE)
		return -EOPNOTSUPP;
	chid = bh_next_chid(h);
	if (chid >= GPU_FN_MAX_CHANNELS)
		return -VGPU_EQUOTA;
	cfg = (struct gpu_priv_chan){
		.runlist = p->runlist, .pdb = vas->addr, .gpfifo_va = p->gpfifo_va,
		.gpfifo_entries = p->gpfifo_entries, .userd_aper = p->userd_aper,
		.userd_addr = p->userd_addr,
	};
	ret = gpu_priv_chan_alloc(h->p, BH_FN, chid, &cfg);
	if (ret)
		return ret;
	ret = bh_new_obj(h, BH_CHANNEL, handle);
	if (ret) {
		gpu_priv_chan_free(h->p, BH_FN, chid);
		return ret;
	}
	h->chans |= 1ull << chid;
	o = bh_obj(h, *handle, BH_CHANNEL);
	o->chid = p->chid = chid;
	o->runlist = p->runlist;
	o->userd_aper = p->userd_aper;
	o->userd_addr = p->userd_addr;
	p->token = vgpu_token(p->runlist, chid);
	return 0;
}

static void bh_chan_enable(struct bench_host *h, struct bh_obj *o, bool on)
{
	gpu_priv_chan_enable(h->p, BH_FN, o->chid, on);
	if (on)
		h->runlist[o->runlist] |= 1ull << o->chid;
	else
		h->runlist[o->runlist] &= ~(1ull << o->chid);
	gpu_priv_runlist_set(h->p, BH_FN, o->runlist, h->runlist[o->runlist]);
}

static void bh_free_obj(struct bench_host *h, struct bh_obj *o)
{
	if (o->kind == BH_CHANNEL) {
		bh_chan_enable(h, o, false);
		gpu_priv_chan_free(h->p, BH_FN, o->chid);
		h->chans &= ~(1ull << o->chid);
	}
	o->kind = BH_FREE;
}

static int bh_free(struct bench_host *h, const struct vgpu_rm_free *f)
{
	struct bh_obj *o;

	if (VGPU_RM_IS_CLIENT(f->h_client) && VGPU_RM_CLIENT_FN(f->h_client) != BH_FN)
		return -VGPU_EFOREIGN;
	if (f->h_client != BH_CLIENT)
		return -ENOENT;
	if (f->h_object == BH_CLIENT) {
		for (uint32_t i = 1; i < BH_MAX_OBJS; i++)
			if (h->objs[i].kind != BH_FREE)
				bh_free_obj(h, &h->objs[i]);
		return 0;
	}
	o = bh_obj(h, f->h_object, BH_FREE);
	if (!o)
		return -ENOENT;
	bh_free_obj(h, o);
	return 0;
}

/* The kernel-mediated path: store GP_PUT in the channel's USERD and ring for the guest. */
static int bh_submit(struct bench_host *h, struct bh_obj *o, uint32_t put)
{
	struct vgpu_userd *u;
	uint64_t off;

	if (o->userd_aper == VGPU_APER_SYS) {
		off = o->userd_addr - BH_DMA_IOVA;
		if (o->userd_addr < BH_DMA_IOVA || off > h->dma - sizeof(*u))
			return -EFAULT;
		u = (struct vgpu_userd *)(h->bar + h->dma_off + off);
	} else {
		if (o->userd_addr > h->vram - sizeof(*u))
			return -EFAULT;
		u = (struct vgpu_userd *)(h->bar + o->userd_addr);
	}
	__atomic_store_n(&u->gp_put, put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(h->g, BH_FN, vgpu_token(o->runlist, o->chid));
	return 0;
}

static int bh_control(struct bench_host *h, const struct vgpu_rm_control *c, void *params,
		      size_t *out_len)
{
	struct bh_obj *o = bh_obj(h, c->h_object, BH_FREE);
	const uint32_t *in = (const uint32_t *)(c + 1);

	*out_len = 0;
	if (c->h_client != BH_CLIENT || !o)
		return -ENOENT;
	switch (c->cmd) {
	case VGPU_RM_CTRL_CHANNEL_ENABLE:
		if (o->kind != BH_CHANNEL || c->params_len < 8)
			return -EINVAL;
		bh_chan_enable(h, o, in[0] != 0);
		*out_len = 8;
		memcpy(params, in, 8);
		return 0;
	case VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN: {
		struct vgpu_rm_token_params t = { .token = vgpu_token(o->runlist, o->chid) };

		if (o->kind != BH_CHANNEL)
			return -EINVAL;
		*out_len = sizeof(t);
		memcpy(params, &t, sizeof(t));
		return 0;
	}
	case VGPU_RM_CTRL_CHANNEL_SUBMIT:	/* the bench's baseline */
		if (o->kind != BH_CHANNEL || c->params_len < 8)
			return -EINVAL;
		*out_len = 8;
		memcpy(params, in, 8);
		return bh_submit(h, o, in[0]);
	default:
		return -EOPNOTSUPP;
	}
}

static int bh_alloc(struct bench_host *h, const struct vgpu_rm_alloc *a, void *params,
		    size_t *out_len, uint32_t *handle)
{
	*out_len = a->params_len;
	memcpy(params, a + 1, a->params_len);
	if (a->h_client != BH_CLIENT)
		return VGPU_RM_IS_CLIENT(a->h_client) && VGPU_RM_CLIENT_FN(a->h_client) != BH_FN ?
		       -VGPU_EFOREIGN : -ENOENT;
	switch (a->h_class) {
	case VGPU_RM_CLASS_DEVICE:
		return bh_new_obj(h, BH_DEVICE, handle);
	case VGPU_RM_CLASS_SUBDEVICE:
		return bh_new_obj(h, BH_DEVICE, handle);
	case VGPU_RM_CLASS_MEMORY_VIDMEM:
		if (a->params_len != sizeof(struct vgpu_rm_vidmem_params))
			return -EINVAL;
		return bh_vidmem(h, params, handle);
	case VGPU_RM_CLASS_VASPACE: {
		struct vgpu_rm_vaspace_params *p = params;
		int ret;

		if (a->params_len != sizeof(*p) || p->pdb >= h->vram)
			return -EINVAL;
		ret = bh_new_obj(h, BH_VASPACE, handle);
		if (!ret)
			bh_obj(h, *handle, BH_VASPACE)->addr = p->pdb;
		return ret;
	}
	case VGPU_RM_CLASS_CHANNEL_GPFIFO:
		if (a->params_len != sizeof(struct vgpu_rm_channel_params))
			return -EINVAL;
		return bh_channel(h, params, handle);
	default:
		return -EOPNOTSUPP;
	}
}

/* One RM message in, one reply out (as rm_dispatch() frames it). */
static size_t bh_rm(struct bench_host *h, const void *req, size_t len, void *out)
{
	const struct vgpu_rm_msg *m = req;
	struct vgpu_rm_reply *r = out;
	void *params = r + 1;
	size_t plen = 0;
	uint32_t handle = 0;
	int st;

	if (len < sizeof(*m) || m->magic != (uint32_t)VGPU_RM_MSG_MAGIC || m->length != len)
		st = -EBADMSG;
	else if (m->op == VGPU_RM_OP_ALLOC_CLIENT)
		st = (handle = BH_CLIENT, 0);
	else if (m->op == VGPU_RM_OP_ALLOC && len >= sizeof(struct vgpu_rm_alloc) &&
		 len == sizeof(struct vgpu_rm_alloc) + ((const struct vgpu_rm_alloc *)m)->params_len &&
		 ((const struct vgpu_rm_alloc *)m)->params_len <= 256)
		st = bh_alloc(h, req, params, &plen, &handle);
	else if (m->op == VGPU_RM_OP_FREE && len == sizeof(struct vgpu_rm_free))
		st = bh_free(h, req);
	else if (m->op == VGPU_RM_OP_CONTROL && len >= sizeof(struct vgpu_rm_control) &&
		 len == sizeof(struct vgpu_rm_control) + ((const struct vgpu_rm_control *)m)->params_len &&
		 ((const struct vgpu_rm_control *)m)->params_len <= 256)
		st = bh_control(h, req, params, &plen);
	else
		st = -EOPNOTSUPP;
	if (st)
		plen = 0;
	*r = (struct vgpu_rm_reply){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
		.abi_version = VGPU_ABI_VERSION, .op = len >= sizeof(*m) ? m->op : 0,
		.length = (uint32_t)(sizeof(*r) + plen), .cookie = len >= sizeof(*m) ? m->cookie : 0,
		.status = st, .handle = st ? 0 : handle, .params_len = (uint32_t)plen };
	return sizeof(*r) + plen;
}

/* ---- mailbox thread ---- */

static void bh_serve(struct bench_host *h, const struct vf_msg *m)
{
	uint8_t out[VF_MBOX_SLOT_SIZE];
	struct vf_msg *r = (struct vf_msg *)out;

	memset(out, 0, sizeof(*r) + 64);
	r->type = m->type;
	r->seq = m->seq;
	switch (m->type) {
	case VF_MSG_PING:
		r->length = m->length <= VF_MSG_MAX_PAYLOAD ? m->length : 0;
		memcpy(r + 1, m + 1, r->length);
		break;
	case VF_MSG_GET_INFO: {
		struct vf_msg_info mi = { .vf_id = BH_FN, .abi_version = h->hdr->abi_version,
					  .vram_size = h->vram, .channels = GPU_FN_MAX_CHANNELS };

		r->length = sizeof(mi);
		memcpy(r + 1, &mi, sizeof(mi));
		break;
	}
	case VF_MSG_RM:
		r->length = (uint32_t)bh_rm(h, m + 1, m->length, r + 1);
		break;
	default:
		r->status = -EOPNOTSUPP;
	}
	atomic_fetch_add(&h->requests, 1);
	while (cmn_ring_push(&h->rsp, out, sizeof(*r) + r->length) == -EAGAIN &&
	       !atomic_load(&h->stop))
		usleep(10);
}

static void bh_forward_intr(struct bench_host *h)
{
	uint32_t bits = gpu_intr_ack(h->g, BH_FN, ~0u);
	uint64_t one = 1;

	if (!bits)
		return;
	if (getenv("BH_DEBUG")) {
		struct vgpu_fault_entry f;

		while (gpu_fault_pop(h->g, BH_FN, &f) == 0)
			fprintf(stderr, "fault va %#llx chid %u reason %u access %u\n",
				(unsigned long long)f.va, f.chid, f.reason, f.access);
	}
	__atomic_fetch_or(&h->intr->status, bits, __ATOMIC_RELEASE);
	__atomic_fetch_add(&h->intr->count, 1, __ATOMIC_RELEASE);
	if (write(h->to_guest[VF_SHIM_VEC_GPU], &one, sizeof(one)) < 0)
		return;
}

static void *bh_thread(void *arg)
{
	struct bench_host *h = arg;
	struct pollfd p[2] = {
		{ .fd = h->to_host[VF_VEC_MBOX], .events = POLLIN },
		{ .fd = gpu_intr_fd(h->g, BH_FN), .events = POLLIN },
	};
	uint64_t cnt, one = 1;

	while (!atomic_load(&h->stop)) {
		const struct vf_msg *m;
		int err, served = 0;

		if (poll(p, 2, 20) <= 0)
			continue;
		if (p[1].revents & POLLIN) {
			if (read(p[1].fd, &cnt, sizeof(cnt)) < 0)
				cnt = 0;
			bh_forward_intr(h);
		}
		if (!(p[0].revents & POLLIN))
			continue;
		if (read(p[0].fd, &cnt, sizeof(cnt)) < 0)
			cnt = 0;
		while ((m = cmn_ring_consume_slot(&h->req, &err))) {
			bh_serve(h, m);
			cmn_ring_consume_commit(&h->req);
			served++;
		}
		if (served && write(h->to_guest[VF_VEC_MBOX], &one, sizeof(one)) < 0)
			break;
	}
	return NULL;
}

/* ---- setup ---- */

static void bh_format(struct bench_host *h)
{
	struct vf_shim_hdr_ext ext = { .db_off = h->ctrl + VF_SHIM_DB_OFF, .dma_iova = BH_DMA_IOVA,
				       .intr_off = h->ctrl + VF_SHIM_INTR_OFF,
				       .nr_runlists = gpu_nr_engines(h->g) };
	struct vf_bar_header *x = h->hdr;

	x->magic = VF_BAR_MAGIC;
	x->abi_version = VGPU_ABI_VERSION;
	x->header_size = VF_BAR_HDR_SIZE;
	x->vf_id = BH_FN;
	x->nr_vectors = BH_NVEC;
	x->bar_size = h->bar_size;
	x->vram_size = h->vram;
	x->dma_off = h->dma_off;
	x->dma_size = h->dma;
	x->ctrl_off = h->ctrl;
	x->req_off = h->ctrl + VF_BAR_REQ_OFF;
	x->rsp_off = h->ctrl + VF_BAR_RSP_OFF;
	x->evt_off = h->ctrl + VF_BAR_EVT_OFF;
	x->ring_region_size = VF_BAR_RING_REGION;
	x->channels = GPU_FN_MAX_CHANNELS;
	/* ABI minor 1 fields (vgpu/vf_bar.h) */
	x->db_off = ext.db_off;
	x->dma_iova = ext.dma_iova;
	x->intr_off = ext.intr_off;
	x->nr_runlists = ext.nr_runlists;
	cmn_ring_format(h->bar + x->req_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	cmn_ring_format(h->bar + x->rsp_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	cmn_ring_format(h->bar + x->evt_off, VF_BAR_RING_REGION, VF_EVT_SLOTS, VF_EVT_SLOT_SIZE);
	cmn_ring_attach(&h->req, h->bar + x->req_off, VF_BAR_RING_REGION);
	cmn_ring_attach(&h->rsp, h->bar + x->rsp_off, VF_BAR_RING_REGION);
	cmn_ring_attach(&h->evt, h->bar + x->evt_off, VF_BAR_RING_REGION);
	h->intr = (struct vf_shim_intr_page *)(h->bar + ext.intr_off);
	__atomic_store_n(&x->state, VF_STATE_READY, __ATOMIC_RELEASE);
}

static int bh_iommu(struct bench_host *h)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	uint64_t iova = BH_DMA_IOVA;
	int ret;

	ret = iommu_domain_alloc(h->mmu, &o, &h->dom);
	if (!ret)
		ret = iommu_memobj_register_fd(h->mmu, h->bar_fd, h->dma_off, h->dma, &h->mo);
	if (!ret)
		ret = iommu_map(h->dom, h->mo, 0, h->dma, IOMMU_READ | IOMMU_WRITE,
				IOMMU_MAP_FIXED_IOVA, &iova);
	if (!ret)
		ret = iommu_attach(h->mmu, BH_FN, h->dom);
	return ret;
}

int bench_host_create(uint64_t vram, uint64_t dma, struct bench_host **out)
{
	struct bench_host *h = calloc(1, sizeof(*h));
	struct gpu_config cfg = { .vram_size = 2 * vram, .nr_vfs = 1, .nr_engines = 1 };
	int ret = -ENOMEM;

	if (!h)
		return -ENOMEM;
	h->vram = vram;
	h->dma = dma;
	h->bar_size = vf_bar_size(vram, dma);
	h->dma_off = vram;
	h->ctrl = h->bar_size - VF_BAR_CTRL_SIZE;
	h->bar_fd = memfd_create("bench-bar2", MFD_CLOEXEC);
	if (h->bar_fd < 0 || ftruncate(h->bar_fd, (off_t)h->bar_size))
		goto fail;
	h->bar = mmap(NULL, h->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, h->bar_fd, 0);
	if (h->bar == MAP_FAILED)
		goto fail;
	h->hdr = (struct vf_bar_header *)(h->bar + vf_bar_header_off(h->bar_size));
	ret = iommu_create(NULL, &h->mmu);
	if (ret)
		goto fail;
	cfg.iommu = h->mmu;
	ret = gpu_create(&cfg, &h->g);
	if (ret)
		goto fail;
	h->p = gpu_priv_get(h->g);
	ret = gpu_priv_partition_set(h->p, BH_FN, vram, vram);
	if (!ret)
		ret = gpu_vram_slice_map(h->g, BH_FN, vram, vram, h->bar_fd);
	if (!ret)
		ret = gpu_priv_sched_fn_set(h->p, BH_FN, &(struct gpu_priv_sched_fn){ .enabled = 1 });
	if (!ret)
		ret = bh_iommu(h);
	if (ret)
		goto fail;
	for (unsigned int v = 0; v < BH_NVEC; v++) {
		/* Vector 2 towards the host is the device's own kick eventfd: no hop. */
		h->to_host[v] = v == VF_SHIM_VEC_GPU ? dup(gpu_doorbell_kick_fd(h->g, BH_FN))
						     : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		h->to_guest[v] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	bh_format(h);
	ret = -pthread_create(&h->thr, NULL, bh_thread, h);
	if (ret)
		goto fail;
	*out = h;
	return 0;
fail:
	/* A benchmark's setup: report and let the process exit. */
	return ret ? ret : -errno;
}

void bench_host_destroy(struct bench_host *h)
{
	atomic_store(&h->stop, 1);
	pthread_join(h->thr, NULL);
	gpu_destroy(h->g);
	iommu_detach(h->mmu, BH_FN);
	iommu_unmap(h->dom, 0, UINT64_MAX, NULL);
	iommu_domain_free(h->dom);
	iommu_memobj_unregister(h->mo);
	iommu_destroy(h->mmu);
	for (unsigned int v = 0; v < BH_NVEC; v++) {
		close(h->to_host[v]);
		close(h->to_guest[v]);
	}
	munmap(h->bar, h->bar_size);
	close(h->bar_fd);
	free(h);
}

uint64_t bench_host_requests(const struct bench_host *h)
{
	return atomic_load(&h->requests);
}

/* ---- the transport ---- */

static struct bh_transport *to_bh(struct vgpu_vf_transport *t)
{
	return cmn_container_of(t, struct bh_transport, t);
}

static int bh_attach(struct vgpu_vf_transport *t, void **bar, uint64_t *size)
{
	struct bh_transport *bt = to_bh(t);
	struct bench_host *h = bt->h;
	uint8_t *m = mmap(NULL, h->bar_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return -errno;
	/* BAR2 as a guest would see it: the memfd, with the device's doorbell page of this
	 * function where the header says it is. */
	if (mmap(m, h->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->bar_fd, 0) ==
		    MAP_FAILED ||
	    mmap(m + h->ctrl + VF_SHIM_DB_OFF, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 gpu_doorbell_fd(h->g), (off_t)BH_FN * 4096) == MAP_FAILED) {
		munmap(m, h->bar_size);
		return -errno;
	}
	bt->map = m;
	*bar = m;
	*size = h->bar_size;
	return 0;
}

static void bh_detach(struct vgpu_vf_transport *t)
{
	struct bh_transport *bt = to_bh(t);

	if (bt->map)
		munmap(bt->map, bt->h->bar_size);
	bt->map = NULL;
}

static int bh_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	uint64_t one = 1;

	if (v >= BH_NVEC)
		return -EINVAL;
	return write(to_bh(t)->h->to_host[v], &one, sizeof(one)) == sizeof(one) ? 0 : -ENOLINK;
}

static int bh_wait(struct vgpu_vf_transport *t, unsigned int v, uint64_t timeout_ns)
{
	struct pollfd p;
	uint64_t cnt;
	int n;

	if (v >= BH_NVEC)
		return -EINVAL;
	p = (struct pollfd){ .fd = to_bh(t)->h->to_guest[v], .events = POLLIN };
	n = poll(&p, 1, (int)((timeout_ns + 999999) / 1000000));
	if (n <= 0)
		return -ETIMEDOUT;
	if (read(p.fd, &cnt, sizeof(cnt)) < 0)
		return -errno;
	return 0;
}

static unsigned int bh_nr_vectors(struct vgpu_vf_transport *t)
{
	(void)t;
	return BH_NVEC;
}

static bool bh_alive(struct vgpu_vf_transport *t)
{
	return to_bh(t)->map != NULL;
}

static void bh_destroy(struct vgpu_vf_transport *t)
{
	bh_detach(t);
	free(to_bh(t));
}

static const struct vgpu_vf_transport_ops bh_ops = {
	.name = "bench-host", .attach = bh_attach, .detach = bh_detach, .notify = bh_notify,
	.wait = bh_wait, .nr_vectors = bh_nr_vectors, .alive = bh_alive, .destroy = bh_destroy,
};

int bench_host_transport(struct bench_host *h, struct vgpu_vf_transport **out)
{
	struct bh_transport *bt = calloc(1, sizeof(*bt));

	if (!bt)
		return -ENOMEM;
	bt->t.ops = &bh_ops;
	bt->h = h;
	*out = &bt->t;
	return 0;
}
