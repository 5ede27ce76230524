/* SPDX-License-Identifier: MIT */
/* vgpu_vf_raw.h - the raw side of libvgpu-vf, for conformance and isolation suites and
 * diagnostics (vgpu-vf-test): the driver's RM context, RM calls with caller-chosen handles,
 * and the memory the driver lays its objects in (DMA memory, the doorbell page).
 *
 * These calls bypass the driver's bookkeeping: an RM object made or freed here is not one of
 * the driver's objects, and a token written to the doorbell page rings whatever it names.
 * They exist so a suite can do what a hostile or buggy guest would and check that the host
 * refuses it. A tenant driver never needs them: vgpu_vf.h is the whole API for real work. */
#ifndef VGPU_VF_RAW_H
#define VGPU_VF_RAW_H

#include <stdbool.h>
#include <stdint.h>

struct vgpu_vf;
struct vgpu_mem;
struct vgpu_channel;
struct vgpu_managed;		/* vgpu_vf_managed.h */
struct vgpu_doorbell_page;	/* vgpu/gpfifo.h */

/* ==== the RM context ========================================================================= */

/* Whether the driver's RM context (client, device, subdevice) was made at attach. */
bool vgpu_vf_rm_available(const struct vgpu_vf *vf);
/* Why there is no RM context ("" while there is one); never NULL. */
const char *vgpu_vf_rm_why(const struct vgpu_vf *vf);
/* The driver's RM client handle (0 without an RM context). */
uint32_t vgpu_vf_rm_client(const struct vgpu_vf *vf);

/* ==== RM calls outside the driver's objects ================================================ */

/* RM FREE of @handle under the driver's client. Returns the RM's status. */
int vgpu_vf_rm_free(struct vgpu_vf *vf, uint32_t handle);
/* RM FREE of @handle under client @client, any value (forged handles of another function's
 * client must come back -VGPU_EFOREIGN). Returns the RM's status. */
int vgpu_vf_rm_free_as(struct vgpu_vf *vf, uint32_t client, uint32_t handle);
/* RM MEMORY_SYSMEM of @size bytes straight from the host, not through vgpu_mem_alloc: its
 * handle, IOVA and offset in DMA memory (checked to lie inside it). Free it with
 * vgpu_vf_rm_free(). 0, -EOPNOTSUPP (no RM context, or a host RM without MEMORY_SYSMEM),
 * -EPROTO (the host placed it outside DMA memory; it is freed again) or the RM's status. */
int vgpu_vf_rm_sysmem_alloc(struct vgpu_vf *vf, uint64_t size, uint32_t *handle,
			    uint64_t *iova, uint64_t *dma_offset);
/* The RM handle of @mem (VGPU_MEM_VRAM; 0 for memory the driver sub-allocates itself). */
uint32_t vgpu_mem_rm_handle(const struct vgpu_mem *mem);

/* ==== where the driver's objects live ======================================================= */

/* CPU view of the VF's DMA memory: [0, info.dma_size) of it. */
uint8_t *vgpu_vf_dma_cpu(const struct vgpu_vf *vf);
/* IOVA at which the device sees DMA memory; 0 if the host does not say (no IOMMU window). */
uint64_t vgpu_vf_dma_iova(const struct vgpu_vf *vf);
/* The function's doorbell page in BAR2 (vgpu_doorbell_write()), NULL if the host has none. */
struct vgpu_doorbell_page *vgpu_vf_doorbell_page(const struct vgpu_vf *vf);
/* Offset of VGPU_MEM_SYSMEM @mem in DMA memory. 0 with *@off, or -EINVAL for another kind. */
int vgpu_mem_dma_offset(const struct vgpu_mem *mem, uint64_t *off);
/* The block of DMA memory holding @ch's GPFIFO ring, pushbuffer and USERD: 0 with *@off and
 * *@bytes, or -ENOENT if the block lives in VRAM (a host without a DMA IOVA window). */
int vgpu_channel_dma_block(const struct vgpu_channel *ch, uint64_t *off, uint64_t *bytes);
/* The runlist (engine) @ch was created on. */
uint32_t vgpu_channel_runlist(const struct vgpu_channel *ch);
/* How the second CPU view of managed allocation @m's DMA memory was made ("mremap of the
 * BAR2 memfd mapping", "mmap of the vfio BAR2 region", ...): evidence of which path ran. */
const char *vgpu_managed_view(const struct vgpu_managed *m);

#endif
