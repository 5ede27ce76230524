/* bench_host: the emulated GPU and IOMMU behind one VF, served in-process (bench_host.h). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include "vf_guest/vf_rm_shim.h"
#include <vgpu/vf_bar.h>

#define BH_FN		1u
#define BH_NVEC		3u
#define BH_DMA_IOVA	(1ull << 32)
#define BH_MAX_OBJS	1024u

enum bh_kind { BH_FREE, BH_VIDMEM, BH_VASPACE, BH_CHANNEL };

struct bh_obj {
	enum bh_kind kind;
	uint64_t addr, size;		/* vidmem */
	uint32_t chid, runlist;		/* channel */
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
	struct vgpu_ring req, rsp, evt;
	pthread_t thr;
	atomic_int stop;
	/* touched by the mailbox thread only */
	struct bh_obj objs[BH_MAX_OBJS];
	uint64_t chans;			/* allocated chids */
	uint64_t runlist[GPU_MAX_ENGINES];
	_Atomic uint64_t requests;
};

struct bh_transport {
	struct vgpu_vf_transport t;
	struct bench_host *h;
	uint8_t *map;
};

/* ---- RM (the provisional calls of vf_rm_shim.h) ---- */

static int bh_new_obj(struct bench_host *h, enum bh_kind k, uint32_t *handle)
{
	for (uint32_t i = 1; i < BH_MAX_OBJS; i++) {
		if (h->objs[i].kind == BH_FREE) {
			memset(&h->objs[i], 0, sizeof(h->objs[i]));
			h->objs[i].kind = k;
			*handle = 0xcaf00000u | i;
			return 0;
		}
	}
	return -ENOSPC;
}

static struct bh_obj *bh_obj(struct bench_host *h, uint32_t handle, enum bh_kind k)
{
	uint32_t i = handle & 0xfffff;

	if ((handle & 0xfff00000u) != 0xcaf00000u || i == 0 || i >= BH_MAX_OBJS ||
	    (k != BH_FREE && h->objs[i].kind != k) || h->objs[i].kind == BH_FREE)
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
static int bh_vidmem(struct bench_host *h, const struct vf_shim_rm_req *q, struct vf_shim_rm_rsp *r)
{
	uint64_t ps = q->a[1] ? q->a[1] : 4096, size = q->a[0], at = 0;
	bool found = bh_vram_free(h, 0, size);
	struct bh_obj *o;
	int ret;

	if (!size || (ps & (ps - 1)) || size > h->vram)
		return size > h->vram ? -VGPU_EQUOTA : -EINVAL;
	for (uint32_t i = 1; !found && i < BH_MAX_OBJS; i++) {
		if (h->objs[i].kind != BH_VIDMEM)
			continue;
		at = (h->objs[i].addr + h->objs[i].size + ps - 1) & ~(ps - 1);
		found = bh_vram_free(h, at, size);
	}
	if (!found)
		return -VGPU_EQUOTA;
	ret = bh_new_obj(h, BH_VIDMEM, &r->handle);
	if (ret)
		return ret;
	o = bh_obj(h, r->handle, BH_VIDMEM);
	o->addr = at;
	o->size = size;
	r->o[0] = at;
	return 0;
}

static int bh_channel(struct bench_host *h, const struct vf_shim_rm_req *q, struct vf_shim_rm_rsp *r)
{
	struct gpu_priv_chan cfg = {
		.flags = q->a[7] ? GPU_CHAN_REPLAYABLE : 0, .runlist = q->a[2], .pdb = q->a[1],
		.gpfifo_va = q->a[3], .gpfifo_entries = q->a[4], .userd_aper = q->a[5],
		.userd_addr = q->a[6],
	};
	uint32_t chid = (uint32_t)__builtin_ctzll(~h->chans);
	struct bh_obj *o;
	int ret;

	if (!bh_obj(h, (uint32_t)q->a[0], BH_VASPACE) || q->a[2] >= gpu_nr_engines(h->g))
		return -EINVAL;
	if (chid >= GPU_FN_MAX_CHANNELS)
		return -VGPU_EQUOTA;
	ret = gpu_priv_chan_alloc(h->p, BH_FN, chid, &cfg);
	if (ret)
		return ret;
	ret = bh_new_obj(h, BH_CHANNEL, &r->handle);
	if (ret)
		goto free_chan;
	gpu_priv_chan_enable(h->p, BH_FN, chid, true);
	h->runlist[q->a[2]] |= 1ull << chid;
	gpu_priv_runlist_set(h->p, BH_FN, (unsigned int)q->a[2], h->runlist[q->a[2]]);
	h->chans |= 1ull << chid;
	o = bh_obj(h, r->handle, BH_CHANNEL);
	o->chid = chid;
	o->runlist = (uint32_t)q->a[2];
	o->userd_addr = q->a[6];
	r->o[0] = chid;
	r->o[1] = vgpu_token(o->runlist, chid);
	return 0;
free_chan:
	gpu_priv_chan_free(h->p, BH_FN, chid);
	return ret;
}

static int bh_free(struct bench_host *h, uint32_t handle)
{
	struct bh_obj *o = bh_obj(h, handle, BH_FREE);

	if (!o)
		return -ENOENT;
	if (o->kind == BH_CHANNEL) {
		h->runlist[o->runlist] &= ~(1ull << o->chid);
		gpu_priv_runlist_set(h->p, BH_FN, o->runlist, h->runlist[o->runlist]);
		gpu_priv_chan_free(h->p, BH_FN, o->chid);
		h->chans &= ~(1ull << o->chid);
	}
	o->kind = BH_FREE;
	return 0;
}

/* The kernel-mediated path: store GP_PUT in the channel's USERD and ring for the guest. */
static int bh_submit(struct bench_host *h, uint32_t handle, uint64_t put)
{
	struct bh_obj *o = bh_obj(h, handle, BH_CHANNEL);
	uint64_t off;

	if (!o)
		return -ENOENT;
	off = o->userd_addr - BH_DMA_IOVA;
	if (o->userd_addr < BH_DMA_IOVA || off > h->dma - sizeof(struct vgpu_userd))
		return -EFAULT;
	__atomic_store_n(&((struct vgpu_userd *)(h->bar + h->dma_off + off))->gp_put,
			 (uint32_t)put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(h->g, BH_FN, vgpu_token(o->runlist, o->chid));
	return 0;
}

static int bh_rm(struct bench_host *h, const struct vf_msg *m, struct vf_shim_rm_rsp *r)
{
	const struct vf_shim_rm_req *q = (const void *)(m + 1);

	if (m->length < sizeof(*q) || q->magic != VF_SHIM_RM_MAGIC)
		return -EBADMSG;
	r->magic = VF_SHIM_RM_MAGIC;
	r->op = q->op;
	switch (q->op) {
	case VF_SHIM_RM_VIDMEM_ALLOC:
		return bh_vidmem(h, q, r);
	case VF_SHIM_RM_FREE:
		return bh_free(h, q->handle);
	case VF_SHIM_RM_VASPACE_ALLOC:
		if (q->a[0] >= h->vram)
			return -EINVAL;
		return bh_new_obj(h, BH_VASPACE, &r->handle);
	case VF_SHIM_RM_CHANNEL_ALLOC:
		return bh_channel(h, q, r);
	case VF_SHIM_RM_CHANNEL_SUBMIT:
		return bh_submit(h, q->handle, q->a[0]);
	default:
		return -EOPNOTSUPP;
	}
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
		r->status = bh_rm(h, m, (struct vf_shim_rm_rsp *)(r + 1));
		r->length = sizeof(struct vf_shim_rm_rsp);
		break;
	default:
		r->status = -EOPNOTSUPP;
	}
	atomic_fetch_add(&h->requests, 1);
	while (vgpu_ring_push(&h->rsp, out, sizeof(*r) + r->length) == -EAGAIN &&
	       !atomic_load(&h->stop))
		usleep(10);
}

static void bh_forward_intr(struct bench_host *h)
{
	uint32_t bits = gpu_intr_ack(h->g, BH_FN, ~0u);
	uint64_t one = 1;

	if (!bits)
		return;
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
		while ((m = vgpu_ring_consume_slot(&h->req, &err))) {
			bh_serve(h, m);
			vgpu_ring_consume_commit(&h->req);
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
	x->abi_version = VGPU_ABI_MAJOR << 16 | 1;
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
	memcpy(x->reserved, &ext, sizeof(ext));
	vgpu_ring_format(h->bar + x->req_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	vgpu_ring_format(h->bar + x->rsp_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	vgpu_ring_format(h->bar + x->evt_off, VF_BAR_RING_REGION, VF_EVT_SLOTS, VF_EVT_SLOT_SIZE);
	vgpu_ring_attach(&h->req, h->bar + x->req_off, VF_BAR_RING_REGION);
	vgpu_ring_attach(&h->rsp, h->bar + x->rsp_off, VF_BAR_RING_REGION);
	vgpu_ring_attach(&h->evt, h->bar + x->evt_off, VF_BAR_RING_REGION);
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
	h->hdr = (struct vf_bar_header *)(h->bar + h->ctrl);
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
	return vgpu_container_of(t, struct bh_transport, t);
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
