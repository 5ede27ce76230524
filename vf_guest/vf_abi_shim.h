/* vf_abi_shim.h - the BAR2 ABI extensions the driver needs for usermode submission. The
 * header fields (db_off, dma_iova, intr_off, nr_runlists) came with ABI 1.1 and are part of
 * ABI 2.0 (include/vgpu/vf_bar.h); a field that is 0 means the host does not provide it and
 * the driver then runs without usermode submission. */
#ifndef VGPU_VF_ABI_SHIM_H
#define VGPU_VF_ABI_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <vgpu/vf_bar.h>
#include <vgpu/version.h>

#define VF_SHIM_DB_OFF		VF_BAR_DB_OFF
#define VF_SHIM_INTR_OFF	VF_BAR_INTR_OFF
#define VF_SHIM_VEC_GPU		VF_VEC_GPU	/* kick / GPU interrupt */
#define VF_SHIM_EVT_MMU_FAULT	VF_EVT_MMU_FAULT
#define VF_SHIM_EVT_CHAN_ERROR	VF_EVT_CHAN_ERROR

/* The minor-1 header fields the driver uses. */
struct vf_shim_hdr_ext {
	uint64_t db_off;	/* doorbell page (struct vgpu_doorbell_page) */
	uint64_t dma_iova;	/* IOVA of DMA memory offset 0 in the VF's IOMMU domain */
	uint64_t intr_off;	/* struct vf_shim_intr_page */
	uint32_t nr_runlists;
	uint32_t reserved;
};

/* The interrupt page is vf_bar.h's (same layout as proposed). */
#define vf_shim_intr_page vf_intr_page

/* The extension fields (0 where the host does not provide one). Called only once the
 * major has been checked: every ABI 2 header has the fields. */
static inline void vf_shim_hdr_ext(const struct vf_bar_header *h, struct vf_shim_hdr_ext *out)
{
	memset(out, 0, sizeof(*out));
	out->db_off = h->db_off;
	out->dma_iova = h->dma_iova;
	out->intr_off = h->intr_off;
	out->nr_runlists = h->nr_runlists;
}

#endif
