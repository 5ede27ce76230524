// SPDX-License-Identifier: MIT
/* The raw side of the driver (vgpu_vf_raw.h): thin wrappers that hand a suite the driver's
 * RM context and memory layout, so the runner needs nothing of vf_internal.h. */
#include <errno.h>

#include "vf_guest/include/vgpu_vf_raw.h"
#include "vf_guest/managed_internal.h"
#include "vf_guest/vf_internal.h"

bool vgpu_vf_rm_available(const struct vgpu_vf *vf)
{
	return vf_rm_available(vf);
}

const char *vgpu_vf_rm_why(const struct vgpu_vf *vf)
{
	/* rm_why keeps the last refusal after a later setup succeeded: only say it while true. */
	return vf_rm_available(vf) ? "" : vf->rm_why;
}

uint32_t vgpu_vf_rm_client(const struct vgpu_vf *vf)
{
	return vf_rm_available(vf) ? vf->h_client : 0;
}

int vgpu_vf_rm_free(struct vgpu_vf *vf, uint32_t handle)
{
	return vf_rm_free(vf, handle);
}

int vgpu_vf_rm_free_as(struct vgpu_vf *vf, uint32_t client, uint32_t handle)
{
	return vf_rm_free_as(vf, client, handle);
}

int vgpu_vf_rm_sysmem_alloc(struct vgpu_vf *vf, uint64_t size, uint32_t *handle,
			    uint64_t *iova, uint64_t *dma_offset)
{
	return vf_rm_sysmem_alloc(vf, size, handle, iova, dma_offset);
}

uint32_t vgpu_mem_rm_handle(const struct vgpu_mem *mem)
{
	return mem->kind == VGPU_MEM_VRAM ? mem->handle : 0;
}

uint8_t *vgpu_vf_dma_cpu(const struct vgpu_vf *vf)
{
	return vf->dma.cpu;
}

uint64_t vgpu_vf_dma_iova(const struct vgpu_vf *vf)
{
	return vf->dma_iova;
}

struct vgpu_doorbell_page *vgpu_vf_doorbell_page(const struct vgpu_vf *vf)
{
	return vf->db;
}

int vgpu_mem_dma_offset(const struct vgpu_mem *mem, uint64_t *off)
{
	if (mem->kind != VGPU_MEM_SYSMEM)
		return -EINVAL;
	*off = mem->dma_off;
	return 0;
}

int vgpu_channel_dma_block(const struct vgpu_channel *ch, uint64_t *off, uint64_t *bytes)
{
	if (ch->mem)
		return -ENOENT;
	*off = ch->dma_off;
	*bytes = ch->dma_bytes;
	return 0;
}

uint32_t vgpu_channel_runlist(const struct vgpu_channel *ch)
{
	return ch->runlist;
}

const char *vgpu_managed_view(const struct vgpu_managed *m)
{
	return m->view ? m->view : "none";
}
