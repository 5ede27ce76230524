/* vf_abi_shim.h - the parts of the BAR2 ABI the driver needs for usermode submission that
 * include/vgpu/vf_bar.h does not have yet, as proposed in /work/briefs/abi-requests.md
 * ("From vf_guest"). They are read from the header's reserved bytes only when the host
 * announces ABI minor >= 1; with a minor-0 host every getter says "absent" and the driver
 * runs without usermode submission. When vf_bar.h gains the fields, each getter becomes a
 * one-line read of the named field (and VF_SHIM_* become the vf_bar.h names). */
#ifndef VGPU_VF_ABI_SHIM_H
#define VGPU_VF_ABI_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <vgpu/vf_bar.h>
#include <vgpu/version.h>

#define VF_SHIM_DB_OFF		(4u << 10)	/* proposed VF_BAR_DB_OFF */
#define VF_SHIM_INTR_OFF	(8u << 10)	/* proposed VF_BAR_INTR_OFF */
#define VF_SHIM_VEC_GPU		2u		/* proposed VF_VEC_GPU (kick / GPU interrupt) */
#define VF_SHIM_EVT_MMU_FAULT	3u		/* proposed VF_EVT_MMU_FAULT */
#define VF_SHIM_EVT_CHAN_ERROR	4u		/* proposed VF_EVT_CHAN_ERROR */

/* Proposed fields, in order, at the start of vf_bar_header.reserved[]. */
struct vf_shim_hdr_ext {
	uint64_t db_off;	/* doorbell page (struct vgpu_doorbell_page) */
	uint64_t dma_iova;	/* IOVA of DMA memory offset 0 in the VF's IOMMU domain */
	uint64_t intr_off;	/* struct vf_shim_intr_page */
	uint32_t nr_runlists;
	uint32_t reserved;
};

/* Proposed interrupt page: vgpud ORs VGPU_INTR_* into status, the guest clears them. */
struct vf_shim_intr_page {
	uint32_t status;
	uint32_t reserved0[15];
	uint64_t count;
};

/* The extension fields if the host has them (minor >= 1), else zeros. */
static inline void vf_shim_hdr_ext(const struct vf_bar_header *h, struct vf_shim_hdr_ext *out)
{
	memset(out, 0, sizeof(*out));
	if (VGPU_ABI_VERSION_MINOR(h->abi_version) >= 1)
		memcpy(out, h->reserved, sizeof(*out));
}

#endif
