// SPDX-License-Identifier: MIT
/* BAR2: find and check the header page, then the rings and pages it points to.
 *
 * The header is written by the host, but the driver treats it as input all the same: every
 * offset it follows is checked to lie inside the mapped BAR2 and in its own part of it, so
 * a broken or hostile header gives -EPROTO instead of a wild pointer. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "vf_guest/vf_internal.h"

static bool in_bar(const struct vgpu_vf *vf, uint64_t off, uint64_t len)
{
	return off <= vf->bar_size && len <= vf->bar_size - off;
}

/* [a, a+alen) and [b, b+blen) do not overlap. */
static bool disjoint(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a + alen <= b || b + blen <= a;
}

/* The control area as the header gives it: [ctrl_off, header page). Its size is the host's
 * business (ABI 2: only the header's place is fixed). */
static int check_layout(struct vgpu_vf *vf, const struct vf_bar_header *h)
{
	uint64_t hdr_off = vf_bar_header_off(vf->bar_size), ctrl = h->ctrl_off;

	if (h->bar_size != vf->bar_size || ctrl > hdr_off || ctrl % VF_DMA_PAGE)
		return vf_error(vf, -EPROTO, "BAR2 header: size %llu / control area %llu do not "
				"match the %llu-byte BAR", (unsigned long long)h->bar_size,
				(unsigned long long)ctrl, (unsigned long long)vf->bar_size);
	if (!in_bar(vf, h->vram_off, h->vram_size) || !in_bar(vf, h->dma_off, h->dma_size) ||
	    !disjoint(h->vram_off, h->vram_size, ctrl, vf->bar_size - ctrl) ||
	    !disjoint(h->dma_off, h->dma_size, ctrl, vf->bar_size - ctrl) ||
	    !disjoint(h->vram_off, h->vram_size, h->dma_off, h->dma_size) ||
	    h->dma_off % VF_DMA_PAGE || h->vram_off % VF_DMA_PAGE)
		return vf_error(vf, -EPROTO, "BAR2 header: VRAM or DMA region out of place");
	if (h->ring_region_size < sizeof(struct vgpu_ring_hdr) ||
	    h->ring_region_size > hdr_off - ctrl)
		return vf_error(vf, -EPROTO, "BAR2 header: bad ring region size");
	for (int i = 0; i < 3; i++) {
		uint64_t off = i == 0 ? h->req_off : i == 1 ? h->rsp_off : h->evt_off;

		if (off < ctrl || off > hdr_off || h->ring_region_size > hdr_off - off)
			return vf_error(vf, -EPROTO, "BAR2 header: ring %d outside the control area", i);
	}
	if (!disjoint(h->req_off, h->ring_region_size, h->rsp_off, h->ring_region_size) ||
	    !disjoint(h->req_off, h->ring_region_size, h->evt_off, h->ring_region_size) ||
	    !disjoint(h->rsp_off, h->ring_region_size, h->evt_off, h->ring_region_size))
		return vf_error(vf, -EPROTO, "BAR2 header: rings overlap");
	return 0;
}

/* An extension page (doorbell, interrupt) must be a whole page of the control area that no
 * ring uses (the header page is above the control area). */
static bool ext_page_ok(const struct vgpu_vf *vf, const struct vf_bar_header *h, uint64_t off)
{
	uint64_t hdr_off = vf_bar_header_off(vf->bar_size);

	return off % 4096 == 0 && off >= h->ctrl_off && off < hdr_off &&
	       disjoint(off, 4096, h->req_off, h->ring_region_size) &&
	       disjoint(off, 4096, h->rsp_off, h->ring_region_size) &&
	       disjoint(off, 4096, h->evt_off, h->ring_region_size);
}

/* The minor-1 fields (db_off, dma_iova, intr_off, nr_runlists): 0 means the host does not
 * provide one, and the driver then goes without (no usermode submission, one runlist). */
static int parse_minor1(struct vgpu_vf *vf, const struct vf_bar_header *h)
{
	uint64_t db_off = h->db_off, intr_off = h->intr_off;

	vf->dma_iova = h->dma_iova;
	vf->db = NULL;
	vf->intr = NULL;
	if (db_off) {
		if (!ext_page_ok(vf, h, db_off))
			return vf_error(vf, -EPROTO, "BAR2 header: doorbell page out of place");
		vf->db = (struct vgpu_doorbell_page *)(vf->bar + db_off);
	}
	if (intr_off) {
		if (!ext_page_ok(vf, h, intr_off) || intr_off == db_off)
			return vf_error(vf, -EPROTO, "BAR2 header: interrupt page out of place");
		vf->intr = (struct vf_intr_page *)(vf->bar + intr_off);
	}
	return 0;
}

int vf_bar_parse(struct vgpu_vf *vf)
{
	const struct vf_bar_header *h;
	uint32_t state;
	int ret;

	if (vf->bar_size < 2 * VF_BAR_HDR_SIZE || (vf->bar_size & (vf->bar_size - 1)))
		return vf_error(vf, -EPROTO, "BAR2 of %llu bytes is not a power of two above %u",
				(unsigned long long)vf->bar_size, VF_BAR_HDR_SIZE);
	/* ABI 2: the header is the last page whatever the layout, so a host of another major
	 * is refused by name below, not by a bad magic. */
	h = (const struct vf_bar_header *)(vf->bar + vf_bar_header_off(vf->bar_size));
	if (h->magic != VF_BAR_MAGIC)
		return vf_error(vf, -EPROTO, "BAR2 header: bad magic %#llx",
				(unsigned long long)h->magic);
	if (!vgpu_abi_compatible(h->abi_version))
		return vf_error(vf, -VGPU_EABI, "host speaks vGPU ABI %u.%u, this driver %u.%u: "
				"refusing to attach", VGPU_ABI_VERSION_MAJOR(h->abi_version),
				VGPU_ABI_VERSION_MINOR(h->abi_version), VGPU_ABI_MAJOR,
				VGPU_ABI_MINOR);
	if (h->header_size != VF_BAR_HDR_SIZE)
		return vf_error(vf, -EPROTO, "BAR2 header: size %u", h->header_size);
	ret = check_layout(vf, h);
	if (ret)
		return ret;
	state = atomic_load_explicit((_Atomic uint32_t *)&h->state, memory_order_acquire);
	if (state != VF_STATE_READY)
		return vf_error(vf, -EAGAIN, "VF is not ready (state %u)", state);
	ret = parse_minor1(vf, h);
	if (ret)
		return ret;
	vf->hdr = h;
	memcpy(vf->slice_uuid, h->slice_uuid, sizeof(vf->slice_uuid));
	vf->vram_off = h->vram_off;
	vf->info.vf_id = h->vf_id;
	vf->info.abi_version = h->abi_version;
	vf->info.vram_size = h->vram_size;
	vf->info.dma_size = h->dma_size;
	vf->info.bar_size = h->bar_size;
	vf->info.channels = h->channels;
	vf->info.doorbells = h->doorbells;
	vf->info.reset_count = atomic_load_explicit((_Atomic uint32_t *)&h->reset_count,
						    memory_order_acquire);
	vf->info.nr_runlists = h->nr_runlists ? h->nr_runlists : 1;
	vf->info.usermode_submit = vf->db != NULL && vf->dma_iova != 0;
	return 0;
}

int vf_bar_rings(struct vgpu_vf *vf)
{
	const struct vf_bar_header *h = vf->hdr;
	size_t len = h->ring_region_size;

	if (cmn_ring_attach(&vf->req, vf->bar + h->req_off, len) ||
	    cmn_ring_attach(&vf->rsp, vf->bar + h->rsp_off, len) ||
	    cmn_ring_attach(&vf->evt, vf->bar + h->evt_off, len))
		return vf_error(vf, -EPROTO, "BAR2 mailbox rings are not formatted");
	if (vf->req.elem_size < sizeof(struct vf_msg) || vf->rsp.elem_size < sizeof(struct vf_msg) ||
	    vf->evt.elem_size < sizeof(struct vf_event))
		return vf_error(vf, -EPROTO, "BAR2 mailbox slots too small");
	/* Replies and events still queued were meant for an earlier attach (an old reset's
	 * event would look like a new one): skip them. */
	vf->rsp.cached_tail = vf->rsp.cached_head;
	atomic_store_explicit(cmn_ring_tail_(vf->rsp.hdr), vf->rsp.cached_tail,
			      memory_order_release);
	vf->evt.cached_tail = vf->evt.cached_head;
	atomic_store_explicit(cmn_ring_tail_(vf->evt.hdr), vf->evt.cached_tail,
			      memory_order_release);
	return 0;
}
