// SPDX-License-Identifier: GPL-2.0 OR MIT
/* vgpu_vf.ko: the guest kernel driver of a vgpu VF (QEMU's ivshmem-doorbell device served by
 * vgpud). This file binds the PCI device, owns its mailbox and event rings and its three
 * MSI-X vectors; vgpu_vf_file.c is the character device processes use.
 *
 * Only a device whose BAR2 header carries the VF magic and an ABI major this driver speaks
 * is bound: ivshmem devices of other users are left alone (-ENODEV, said in the log).
 * Interrupts: the mailbox vector wakes the caller waiting for its reply, the event vector
 * runs a thread that drains the event ring (resets, channel faults and errors) into the
 * open files' own event rings, the GPU vector wakes fence waiters. Nothing polls. */
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/slab.h>

#include "vgpu_vf_internal.h"

/* For tests: 0 makes the driver neither evict nor acknowledge an announced reset, so the
 * host's wait runs out and the reset loses the pages still in VRAM (their processes get
 * SIGBUS). Writable at run time (/sys/module/vgpu_vf/parameters/reset_evict). */
static bool reset_evict = true;
module_param(reset_evict, bool, 0644);
MODULE_PARM_DESC(reset_evict, "evict SVM pages and acknowledge an announced VF reset (default 1)");

/* ---- rings (vgpu/ring.h; the host's counters are untrusted) ---- */

static int vvf_ring_attach(struct vvf_dev *vd, struct vvf_ring *r, u64 off, u64 region)
{
	struct vgpu_ring_hdr *h = (struct vgpu_ring_hdr *)(vd->bar2 + off);
	u32 n = READ_ONCE(h->nr_elems), sz = READ_ONCE(h->elem_size);

	if (READ_ONCE(h->magic) != VGPU_RING_MAGIC || !n || (n & (n - 1)) || sz < 8 ||
	    sz % 8 || sizeof(*h) + (u64)n * sz > region)
		return -EPROTO;
	r->hdr = h;
	r->slots = (u8 *)(h + 1);
	r->nr_elems = n;
	r->elem_size = sz;
	return 0;
}

void *vvf_ring_produce_slot(struct vvf_ring *r)
{
	u32 head = READ_ONCE(r->hdr->head), tail = smp_load_acquire(&r->hdr->tail);

	if (head - tail > r->nr_elems)
		return ERR_PTR(-EPROTO);
	if (head - tail == r->nr_elems)
		return NULL;
	return r->slots + (u64)(head & (r->nr_elems - 1)) * r->elem_size;
}

void vvf_ring_produce_commit(struct vvf_ring *r)
{
	smp_store_release(&r->hdr->head, READ_ONCE(r->hdr->head) + 1);
}

void *vvf_ring_consume_slot(struct vvf_ring *r)
{
	u32 tail = READ_ONCE(r->hdr->tail), head = smp_load_acquire(&r->hdr->head);

	if (head - tail > r->nr_elems)
		return ERR_PTR(-EPROTO);
	if (head == tail)
		return NULL;
	return r->slots + (u64)(tail & (r->nr_elems - 1)) * r->elem_size;
}

void vvf_ring_consume_commit(struct vvf_ring *r)
{
	smp_store_release(&r->hdr->tail, READ_ONCE(r->hdr->tail) + 1);
}

void vvf_ring_skip(struct vvf_ring *r)
{
	smp_store_release(&r->hdr->tail, smp_load_acquire(&r->hdr->head));
}

/* ---- the mailbox ---- */

bool vvf_ready(struct vvf_dev *vd)
{
	return !READ_ONCE(vd->gone) && smp_load_acquire(&vd->hdr->state) == VF_STATE_READY;
}

void vvf_notify(struct vvf_dev *vd, unsigned int v)
{
	/* What was pushed into BAR2 must be visible before vgpud is rung. */
	wmb();
	writel(READ_ONCE(vd->hdr->host_peer) << 16 | v, vd->bar0 + VVF_REG_DOORBELL);
}

/* After a reset the host re-formatted the rings: attach them again. Under mbox_lock.
 * *@reset: the rings are those of a reset count the driver has not sent anything on. */
static int vvf_mbox_reattach(struct vvf_dev *vd, bool *reset)
{
	u32 rc = smp_load_acquire(&vd->hdr->reset_count);
	u64 region = vd->lay.ring_region;
	int ret;

	*reset = false;
	if (rc == vd->seen_reset_count && vd->req.hdr)
		return 0;
	ret = vvf_ring_attach(vd, &vd->req, vd->lay.req_off, region);
	if (!ret)
		ret = vvf_ring_attach(vd, &vd->rsp, vd->lay.rsp_off, region);
	if (ret || vd->req.elem_size < sizeof(struct vf_msg) ||
	    vd->rsp.elem_size < sizeof(struct vf_msg)) {
		vd->req.hdr = NULL;
		return -EPROTO;
	}
	vvf_ring_skip(&vd->rsp);
	*reset = rc != vd->seen_reset_count;
	vd->seen_reset_count = rc;
	return 0;
}

/* Take the reply to @seq if it is there: 1 taken, 0 not yet, <0 broken ring. */
static int vvf_mbox_take(struct vvf_dev *vd, u32 seq, u32 type, void *rsp, u32 *rsp_len,
			 s32 *status)
{
	struct vf_msg *m;
	u32 len;

	for (;;) {
		m = vvf_ring_consume_slot(&vd->rsp);
		if (IS_ERR_OR_NULL(m))
			return m ? PTR_ERR(m) : 0;
		if (READ_ONCE(m->seq) == seq && READ_ONCE(m->type) == type)
			break;
		/* The answer to a call that timed out before: drop it. */
		vd->late_replies++;
		vvf_ring_consume_commit(&vd->rsp);
	}
	len = READ_ONCE(m->length);
	/* A reply that cannot be taken has no payload: *rsp_len says how much of @rsp holds
	 * the reply, and the callers copy that much on (to user space, to a file's ring). */
	if (len > VF_MSG_MAX_PAYLOAD || len > vd->rsp.elem_size - sizeof(*m)) {
		*status = -EPROTO;
		*rsp_len = 0;
	} else if (len > *rsp_len) {
		*status = -EMSGSIZE;
		*rsp_len = 0;
	} else {
		*status = READ_ONCE(m->status);
		memcpy(rsp, m + 1, len);
		*rsp_len = len;
	}
	vvf_ring_consume_commit(&vd->rsp);
	return 1;
}

/* Whether @req is an RM ALLOC of VRAM: the one message that makes the host hand out VRAM. */
static bool vvf_msg_takes_vram(u32 type, const void *req, u32 len)
{
	const struct vgpu_rm_alloc *a = req;

	return type == VF_MSG_RM && len >= sizeof(*a) && a->hdr.op == VGPU_RM_OP_ALLOC &&
	       a->h_class == VGPU_RM_CLASS_MEMORY_VIDMEM;
}

int vvf_mbox_send_locked(struct vvf_dev *vd, u32 type, const void *req, u32 req_len, void *rsp,
			 u32 *rsp_len, s32 *status, u64 timeout_ns, bool *sent)
{
	unsigned long deadline = jiffies + nsecs_to_jiffies(timeout_ns) + 1;
	struct vf_msg *m;
	int ret, got;
	u32 seq;

	lockdep_assert_held(&vd->mbox_lock);
	*sent = false;
	if (!vvf_ready(vd))
		return READ_ONCE(vd->gone) ? -ENODEV : -ENOLINK;
	if (req_len > VF_MSG_MAX_PAYLOAD || req_len > vd->req.elem_size - sizeof(*m))
		return -EMSGSIZE;
	/* The host consumes requests as it serves them: a full ring empties. */
	wait_event_timeout(vd->wq[VF_VEC_MBOX],
			   vvf_ring_produce_slot(&vd->req) || !vvf_ready(vd),
			   max_t(long, (long)(deadline - jiffies), 1));
	m = vvf_ring_produce_slot(&vd->req);
	if (IS_ERR_OR_NULL(m))
		return m ? PTR_ERR(m) : vvf_ready(vd) ? -ETIMEDOUT : -ENOLINK;
	seq = ++vd->seq;
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->seq = seq;
	m->length = req_len;
	memcpy(m + 1, req, req_len);
	vvf_ring_produce_commit(&vd->req);
	*sent = true;
	vvf_notify(vd, VF_VEC_MBOX);
	/* Uninterruptible but bounded: a caller killed mid-call still takes its reply, so an
	 * object the host made for it is known (and freed when its file closes). */
	for (;;) {
		got = vvf_mbox_take(vd, seq, type, rsp, rsp_len, status);
		if (got)
			break;
		/* A reset re-formats the rings: this request and its reply are gone. */
		if (!vvf_ready(vd) ||
		    smp_load_acquire(&vd->hdr->reset_count) != vd->seen_reset_count) {
			got = READ_ONCE(vd->gone) ? -ENODEV : -ENOLINK;
			break;
		}
		if (time_after_eq(jiffies, deadline)) {
			got = -ETIMEDOUT;
			break;
		}
		wait_event_timeout(vd->wq[VF_VEC_MBOX],
				   vvf_ring_consume_slot(&vd->rsp) || !vvf_ready(vd) ||
				   smp_load_acquire(&vd->hdr->reset_count) != vd->seen_reset_count,
				   max_t(long, (long)(deadline - jiffies), 1));
	}
	ret = got < 0 ? got : 0;
	if (got == -ETIMEDOUT)
		dev_warn_ratelimited(&vd->pdev->dev, "no mailbox reply to request %u\n", seq);
	return ret;
}

/* One mailbox call (vvf_mbox_call); with @epoch, only while the rings are those of reset
 * count *@epoch (-ENOLINK otherwise: the caller's records are of another reset). *@sent
 * says whether the request reached the host's ring, whatever the outcome. The first call
 * on the rings of a new reset count lets the SVM pool fence off the VRAM of pages the
 * reset lost before anything else reaches the host; while it cannot, an ALLOC of VRAM is
 * -EAGAIN without sending. */
static int vvf_mbox_xfer(struct vvf_dev *vd, const u32 *epoch, u32 type, const void *req,
			 u32 req_len, void *rsp, u32 *rsp_len, s32 *status, u64 timeout_ns,
			 bool *sent)
{
	bool reset, vram;
	int ret;

	*sent = false;
	mutex_lock(&vd->mbox_lock);
	if (!vvf_ready(vd)) {
		ret = READ_ONCE(vd->gone) ? -ENODEV : -ENOLINK;
		goto out;
	}
	ret = vvf_mbox_reattach(vd, &reset);
	if (ret)
		goto out;
	vram = vvf_msg_takes_vram(type, req, req_len);
	if (vvf_svm_fence_locked(vd, reset, vram) && vram) {
		ret = -EAGAIN;
		goto out;
	}
	if (epoch && *epoch != vd->seen_reset_count) {
		ret = -ENOLINK;
		goto out;
	}
	ret = vvf_mbox_send_locked(vd, type, req, req_len, rsp, rsp_len, status, timeout_ns,
				   sent);
out:
	mutex_unlock(&vd->mbox_lock);
	return ret;
}

int vvf_mbox_call(struct vvf_dev *vd, u32 type, const void *req, u32 req_len, void *rsp,
		  u32 *rsp_len, s32 *status, u64 timeout_ns)
{
	bool sent;

	return vvf_mbox_xfer(vd, NULL, type, req, req_len, rsp, rsp_len, status, timeout_ns,
			     &sent);
}

int vvf_mbox_file_call(struct vvf_dev *vd, u32 epoch, u32 type, const void *req, u32 req_len,
		       void *rsp, u32 *rsp_len, s32 *status, u64 timeout_ns, bool *sent)
{
	return vvf_mbox_xfer(vd, &epoch, type, req, req_len, rsp, rsp_len, status, timeout_ns,
			     sent);
}

/* ---- an announced reset (ABI 2.5: vgpu/vf_bar.h, RESET ANNOUNCEMENT) ---- */

/* Evict the SVM pool, then tell the host it may reset: the number in the header, then the
 * event vector. Pages that could not move are the reset's to lose (SIGBUS, svm.c). */
static void vvf_reset_work(struct work_struct *w)
{
	struct vvf_dev *vd = container_of(w, struct vvf_dev, reset_work);
	u32 seq = READ_ONCE(vd->reset_seen);

	if (!READ_ONCE(reset_evict)) {
		dev_info(&vd->pdev->dev, "reset %u announced: not evicting (reset_evict=0)\n", seq);
		return;
	}
	vvf_svm_evict_for_reset(vd, seq);
	if (READ_ONCE(vd->hdr->reset_pending) != seq)
		return;		/* already reset, or no longer announced */
	WRITE_ONCE(vd->hdr->reset_ack, seq);
	vvf_notify(vd, VF_VEC_EVENT);
}

/* The event thread saw an event interrupt: a newly announced reset queues the work. The
 * header is the truth (an event ring that overflowed loses the event, not the number). */
static void vvf_reset_check(struct vvf_dev *vd)
{
	u32 seq = READ_ONCE(vd->hdr->reset_pending);

	if (!seq || seq == vd->reset_seen)
		return;
	WRITE_ONCE(vd->reset_seen, seq);
	schedule_work(&vd->reset_work);
}

/* Tell the host this driver's ABI and that it acknowledges announced resets; the files'
 * own GET_INFO requests carry the same (vgpu_vf_file.c), so none undoes it. */
void vvf_info_req(struct vf_msg_info_req *rq)
{
	rq->abi_version = VGPU_ABI_VERSION;
	rq->flags = VF_INFO_REQ_RESET_ACK;
}

static void vvf_announce(struct vvf_dev *vd)
{
	struct vf_msg_info_req rq;
	struct vf_msg_info mi;
	u32 len = sizeof(mi);
	s32 status;
	int ret;

	vvf_info_req(&rq);
	ret = vvf_mbox_call(vd, VF_MSG_GET_INFO, &rq, sizeof(rq), &mi, &len, &status,
			    VVF_DEFAULT_TIMEOUT_NS);
	if (ret || status)
		dev_warn(&vd->pdev->dev, "GET_INFO failed (%d/%d): resets are not announced to "
			 "this driver\n", ret, status);
}

/* ---- interrupts ---- */

static irqreturn_t vvf_irq_mbox(int irq, void *data)
{
	struct vvf_dev *vd = data;

	atomic64_inc(&vd->irq_count[VF_VEC_MBOX]);
	wake_up_all(&vd->wq[VF_VEC_MBOX]);
	return IRQ_HANDLED;
}

static irqreturn_t vvf_irq_gpu(int irq, void *data)
{
	struct vvf_dev *vd = data;

	atomic64_inc(&vd->irq_count[VF_VEC_GPU]);
	wake_up_all(&vd->wq[VF_VEC_GPU]);
	return IRQ_HANDLED;
}

/* The event thread: a reset re-formats the event ring and frees every RM object, so the
 * files forget theirs before the reset event reaches them. */
static irqreturn_t vvf_irq_event(int irq, void *data)
{
	struct vvf_dev *vd = data;
	u32 rc = smp_load_acquire(&vd->hdr->reset_count);
	struct vf_event e;
	void *slot;

	/* A caller waiting for a reply the reset swallowed notices it now, not at its timeout
	 * (and lets go of its file, which the reset below needs). */
	if (rc != READ_ONCE(vd->evt_reset_count))
		wake_up_all(&vd->wq[VF_VEC_MBOX]);
	if (rc != READ_ONCE(vd->evt_reset_count) || !vd->evt.hdr) {
		if (vvf_ring_attach(vd, &vd->evt, vd->lay.evt_off, vd->lay.ring_region) ||
		    vd->evt.elem_size < sizeof(e))
			vd->evt.hdr = NULL;
		if (rc != READ_ONCE(vd->evt_reset_count)) {
			WRITE_ONCE(vd->evt_reset_count, rc);
			vvf_files_reset(vd, rc, false);
			vvf_svm_reset(vd);
			dev_info(&vd->pdev->dev, "VF reset (count %u): RM objects of every file freed\n",
				 rc);
		}
	}
	while (vd->evt.hdr) {
		slot = vvf_ring_consume_slot(&vd->evt);
		if (IS_ERR(slot)) {
			dev_warn_ratelimited(&vd->pdev->dev, "event ring is corrupt\n");
			vd->evt.hdr = NULL;
			break;
		}
		if (!slot)
			break;
		/* Only our struct: a newer host's slot may be larger. */
		memcpy(&e, slot, sizeof(e));
		vvf_ring_consume_commit(&vd->evt);
		/* An announced reset is the driver's business alone, and so is a fault of a
		 * channel on a kernel-owned address space (the kernel services it). */
		if (e.type == VF_EVT_RESET_PENDING ||
		    (e.type == VF_EVT_MMU_FAULT && vvf_as_fault_event(vd, &e)))
			continue;
		vvf_files_event(vd, &e);
	}
	vvf_reset_check(vd);
	atomic64_inc(&vd->irq_count[VF_VEC_EVENT]);
	wake_up_all(&vd->wq[VF_VEC_EVENT]);
	return IRQ_HANDLED;
}

static int vvf_irqs(struct vvf_dev *vd)
{
	struct pci_dev *pdev = vd->pdev;
	int n, ret;

	n = pci_alloc_irq_vectors(pdev, VGPU_VF_NR_VECTORS, VGPU_VF_NR_VECTORS, PCI_IRQ_MSIX);
	if (n < 0) {
		dev_err(&pdev->dev, "needs %d MSI-X vectors (QEMU: ivshmem-doorbell vectors=3): %d\n",
			VGPU_VF_NR_VECTORS, n);
		return n;
	}
	vd->nr_vectors = n;
	ret = request_irq(pci_irq_vector(pdev, VF_VEC_MBOX), vvf_irq_mbox, 0, vd->name, vd);
	if (ret)
		goto err_vec;
	ret = request_threaded_irq(pci_irq_vector(pdev, VF_VEC_EVENT), NULL, vvf_irq_event,
				   IRQF_ONESHOT, vd->name, vd);
	if (ret)
		goto err_mbox;
	ret = request_irq(pci_irq_vector(pdev, VF_VEC_GPU), vvf_irq_gpu, 0, vd->name, vd);
	if (ret)
		goto err_evt;
	return 0;
err_evt:
	free_irq(pci_irq_vector(pdev, VF_VEC_EVENT), vd);
err_mbox:
	free_irq(pci_irq_vector(pdev, VF_VEC_MBOX), vd);
err_vec:
	pci_free_irq_vectors(pdev);
	dev_err(&pdev->dev, "cannot take its interrupts: %d\n", ret);
	return ret;
}

static void vvf_irqs_free(struct vvf_dev *vd)
{
	int v;

	for (v = 0; v < VGPU_VF_NR_VECTORS; v++)
		free_irq(pci_irq_vector(vd->pdev, v), vd);
	pci_free_irq_vectors(vd->pdev);
}

/* ---- probe and remove ---- */

static bool vvf_inside(u64 off, u64 len, u64 size)
{
	return off <= size && len <= size - off;
}

/* Is this ivshmem device a VF of ours? Checks the header page at the end of BAR2 through a
 * temporary mapping; 0 or -ENODEV with the reason logged. */
static int vvf_identify(struct pci_dev *pdev, resource_size_t phys, resource_size_t size,
			u32 *abi)
{
	struct vf_bar_header *h;
	int ret = 0;

	if (size < 2 * VF_BAR_HDR_SIZE || (size & (size - 1))) {
		dev_info(&pdev->dev, "BAR2 of %pa bytes is no vgpu VF\n", &size);
		return -ENODEV;
	}
	h = memremap(phys + vf_bar_header_off(size), VF_BAR_HDR_SIZE, MEMREMAP_WB);
	if (!h)
		return -ENOMEM;
	*abi = READ_ONCE(h->abi_version);
	if (READ_ONCE(h->magic) != VF_BAR_MAGIC) {
		dev_info(&pdev->dev, "ivshmem device without the vgpu VF magic: not bound\n");
		ret = -ENODEV;
	} else if (!vgpu_abi_compatible(*abi)) {
		dev_info(&pdev->dev, "host speaks vGPU ABI %u.%u, this driver %u.%u: not bound\n",
			 VGPU_ABI_VERSION_MAJOR(*abi), VGPU_ABI_VERSION_MINOR(*abi),
			 VGPU_ABI_MAJOR, VGPU_ABI_MINOR);
		ret = -ENODEV;
	}
	memunmap(h);
	return ret;
}

/* Whether [a, a + alen) and [b, b + blen) share a byte (both inside BAR2). */
static bool vvf_overlap(u64 a, u64 alen, u64 b, u64 blen)
{
	return alen && blen && a < b + blen && b < a + alen;
}

/* The pages every file sees whatever it allocated (the header, control, doorbell and
 * interrupt pages, the rings) must lie outside VRAM and DMA memory, and those two apart:
 * a control page over VRAM would make that VRAM readable or writable by every process,
 * and a memory object's range is checked only against its own region. 0 or -EPROTO. */
static int vvf_check_overlaps(struct vvf_dev *vd, const struct vvf_layout *l)
{
	const struct { const char *what; u64 off, len; } ctl[] = {
		{ "header", l->hdr_off, PAGE_SIZE }, { "control", l->ctrl_off, PAGE_SIZE },
		{ "doorbell", l->db_off, l->db_off ? PAGE_SIZE : 0 },
		{ "interrupt", l->intr_off, l->intr_off ? PAGE_SIZE : 0 },
		{ "request ring", l->req_off, l->ring_region },
		{ "reply ring", l->rsp_off, l->ring_region },
		{ "event ring", l->evt_off, l->ring_region },
	};
	unsigned int i;

	if (vvf_overlap(l->vram_off, l->vram_size, l->dma_off, l->dma_size)) {
		dev_err(&vd->pdev->dev, "BAR2 header: VRAM [%#llx, +%#llx) overlaps DMA memory "
			"[%#llx, +%#llx): not bound\n", l->vram_off, l->vram_size, l->dma_off,
			l->dma_size);
		return -EPROTO;
	}
	for (i = 0; i < ARRAY_SIZE(ctl); i++) {
		if (!vvf_overlap(ctl[i].off, ctl[i].len, l->vram_off, l->vram_size) &&
		    !vvf_overlap(ctl[i].off, ctl[i].len, l->dma_off, l->dma_size))
			continue;
		dev_err(&vd->pdev->dev, "BAR2 header: the %s page(s) at %#llx overlap VRAM or DMA "
			"memory: not bound\n", ctl[i].what, ctl[i].off);
		return -EPROTO;
	}
	return 0;
}

/* The header's layout must lie inside BAR2, page-aligned where user space maps it, with
 * its control pages apart from VRAM and DMA memory, before any offset in it is used; the
 * driver keeps its own copy from then on. */
static int vvf_check_layout(struct vvf_dev *vd)
{
	const struct vf_bar_header *h = vd->hdr;
	struct vvf_layout l = {
		.hdr_off = vf_bar_header_off(vd->bar2_size), .ctrl_off = h->ctrl_off,
		.db_off = h->db_off, .intr_off = h->intr_off,
		.vram_off = h->vram_off, .vram_size = h->vram_size,
		.dma_off = h->dma_off, .dma_size = h->dma_size,
		.req_off = h->req_off, .rsp_off = h->rsp_off, .evt_off = h->evt_off,
		.ring_region = h->ring_region_size,
	};
	u64 sz = vd->bar2_size;

	if (h->header_size != VF_BAR_HDR_SIZE || h->bar_size != sz ||
	    !vvf_inside(l.vram_off, l.vram_size, sz) || !vvf_inside(l.dma_off, l.dma_size, sz) ||
	    !vvf_inside(l.req_off, l.ring_region, sz) || !vvf_inside(l.rsp_off, l.ring_region, sz) ||
	    !vvf_inside(l.evt_off, l.ring_region, sz) || !vvf_inside(l.ctrl_off, PAGE_SIZE, sz) ||
	    (l.db_off && !vvf_inside(l.db_off, PAGE_SIZE, sz)) ||
	    (l.intr_off && !vvf_inside(l.intr_off, PAGE_SIZE, sz)) ||
	    (l.ctrl_off | l.db_off | l.intr_off | l.vram_off | l.dma_off | l.req_off | l.rsp_off |
	     l.evt_off | l.ring_region) % PAGE_SIZE || l.ring_region < VVF_RING_REGION_MIN ||
	    h->nr_vectors < VGPU_VF_NR_VECTORS) {
		dev_err(&vd->pdev->dev, "BAR2 header describes a layout this driver cannot use\n");
		return -EPROTO;
	}
	if (vvf_check_overlaps(vd, &l))
		return -EPROTO;
	vd->lay = l;
	return 0;
}

/* The last reference: remove ran and every file is closed, so no address space's work is
 * queued or running any more. */
static void vvf_dev_release(struct kref *ref)
{
	struct vvf_dev *vd = container_of(ref, struct vvf_dev, ref);

	if (vd->as_wq)
		destroy_workqueue(vd->as_wq);
	vvf_svm_free(vd);
	kfree(vd);
}

void vvf_dev_put(struct vvf_dev *vd)
{
	kref_put(&vd->ref, vvf_dev_release);
}

static int vvf_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vvf_dev *vd;
	u32 abi = 0;
	int ret, v;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = vvf_identify(pdev, pci_resource_start(pdev, 2), pci_resource_len(pdev, 2), &abi);
	if (ret)
		return ret;
	ret = pcim_iomap_regions(pdev, BIT(0), VVF_NAME);
	if (ret)
		return ret;
	ret = pci_request_region(pdev, 2, VVF_NAME);
	if (ret)
		return ret;
	vd = kzalloc(sizeof(*vd), GFP_KERNEL);
	if (!vd) {
		ret = -ENOMEM;
		goto err_region;
	}
	kref_init(&vd->ref);
	vd->pdev = pdev;
	vd->abi_version = abi;
	vd->bar0 = pcim_iomap_table(pdev)[0];
	vd->bar2_phys = pci_resource_start(pdev, 2);
	vd->bar2_size = pci_resource_len(pdev, 2);
	mutex_init(&vd->mbox_lock);
	mutex_init(&vd->files_mutex);
	vvf_svm_init(vd);
	INIT_WORK(&vd->reset_work, vvf_reset_work);
	INIT_LIST_HEAD(&vd->files);
	init_rwsem(&vd->remove_sem);
	for (v = 0; v < VGPU_VF_NR_VECTORS; v++)
		init_waitqueue_head(&vd->wq[v]);
	vd->as_wq = alloc_workqueue("vgpu_vf_as", WQ_UNBOUND, 0);
	if (!vd->as_wq) {
		ret = -ENOMEM;
		goto err_free;
	}
	/* BAR2 is the slice's shared memory: write-back, as the host maps it. The mapping
	 * also records the range as write-back for the user mappings of vgpu_vf_file.c. */
	vd->bar2 = memremap(vd->bar2_phys, vd->bar2_size, MEMREMAP_WB);
	if (!vd->bar2) {
		ret = -ENOMEM;
		goto err_free;
	}
	vd->hdr = (struct vf_bar_header *)(vd->bar2 + vf_bar_header_off(vd->bar2_size));
	ret = vvf_check_layout(vd);
	if (!ret)
		ret = vvf_svm_prepare(vd);
	if (ret)
		goto err_unmap;
	vd->vf_id = vd->hdr->vf_id;
	vd->seen_reset_count = vd->evt_reset_count = smp_load_acquire(&vd->hdr->reset_count);
	vd->reset_seen = READ_ONCE(vd->hdr->reset_pending);	/* announced to a driver before */
	snprintf(vd->name, sizeof(vd->name), VGPU_VF_DEV_PREFIX "%u", vd->vf_id);
	if (vvf_ring_attach(vd, &vd->evt, vd->lay.evt_off, vd->lay.ring_region) == 0)
		vvf_ring_skip(&vd->evt);
	else
		vd->evt.hdr = NULL;
	pci_set_master(pdev);
	ret = vvf_irqs(vd);
	if (ret)
		goto err_unmap;
	vvf_announce(vd);
	vd->misc.minor = MISC_DYNAMIC_MINOR;
	vd->misc.name = vd->name;
	vd->misc.fops = &vvf_fops;
	vd->misc.parent = &pdev->dev;
	vd->misc.mode = 0600;
	ret = misc_register(&vd->misc);
	if (ret)
		goto err_irqs;
	pci_set_drvdata(pdev, vd);
	dev_info(&pdev->dev, "VF %u, ABI %u.%u, BAR2 %llu MiB, %d MSI-X vectors: /dev/%s\n",
		 vd->vf_id, VGPU_ABI_VERSION_MAJOR(abi), VGPU_ABI_VERSION_MINOR(abi),
		 (unsigned long long)(vd->bar2_size >> 20), vd->nr_vectors, vd->name);
	return 0;
err_irqs:
	vvf_irqs_free(vd);
	/* The event thread may have queued it (a reset announced meanwhile): it uses vd. */
	cancel_work_sync(&vd->reset_work);
err_unmap:
	memunmap(vd->bar2);
err_free:
	vvf_dev_put(vd);
err_region:
	pci_release_region(pdev, 2);
	return ret;
}

static void vvf_remove(struct pci_dev *pdev)
{
	struct vvf_dev *vd = pci_get_drvdata(pdev);
	int v;

	misc_deregister(&vd->misc);
	/* Wake every sleeper first (they see gone), then wait for the calls in flight. */
	WRITE_ONCE(vd->gone, true);
	for (v = 0; v < VGPU_VF_NR_VECTORS; v++)
		wake_up_all(&vd->wq[v]);
	down_write(&vd->remove_sem);
	vvf_files_reset(vd, READ_ONCE(vd->evt_reset_count), true);
	vvf_irqs_free(vd);
	cancel_work_sync(&vd->reset_work);	/* after the irqs: nothing queues it again */
	/* The address spaces are lost (files reset above) and no event queues their fault
	 * service again: what still runs of it writes tables in BAR2 and takes pool pages,
	 * so it ends before either goes. */
	flush_workqueue(vd->as_wq);
	memunmap(vd->bar2);
	vd->bar2 = NULL;
	/* Every call from here on sees gone and touches neither BAR2 nor a file's records,
	 * which the reset above emptied: let them through before waiting for the SVM pool,
	 * whose last page goes only when its process lets go of it (one that cannot move
	 * stays mapped until then), maybe only once its ioctl or close has returned. The pool
	 * reaches its pages through their own mapping (memremap_pages), not BAR2's. */
	up_write(&vd->remove_sem);
	vvf_svm_fini(vd);
	pci_clear_master(pdev);
	pci_release_region(pdev, 2);
	vvf_dev_put(vd);
}

static const struct pci_device_id vvf_ids[] = {
	{ PCI_DEVICE(VVF_PCI_VENDOR, VVF_PCI_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, vvf_ids);

static struct pci_driver vvf_driver = {
	.name = VVF_NAME,
	.id_table = vvf_ids,
	.probe = vvf_probe,
	.remove = vvf_remove,
};
module_pci_driver(vvf_driver);

MODULE_DESCRIPTION("vgpu VF driver: the mailbox, interrupts and a device node per VF");
MODULE_LICENSE("Dual MIT/GPL");
