// SPDX-License-Identifier: MIT
/* Memory objects: VRAM from the host RM (it owns the slice's allocator and the quota), DMA
 * memory from the driver's own page allocator. The VF-physical address the RM returns is
 * host input and is checked to lie inside the slice before the driver writes through it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/gmmu.h>

#include "vf_guest/vf_internal.h"

static bool mem_page_size_ok(uint64_t ps)
{
	return ps == VGPU_GMMU_PAGE_4K || ps == VGPU_GMMU_PAGE_64K || ps == VGPU_GMMU_PAGE_2M;
}

static int mem_get_vram(struct vgpu_vf *vf, struct vgpu_mem *m)
{
	int ret = vf_rm_vidmem_alloc(vf, m->size, m->page_size, &m->handle, &m->addr);

	if (ret)
		return ret;
	if (m->addr % m->page_size || m->addr > vf->info.vram_size ||
	    m->size > vf->info.vram_size - m->addr) {
		vf_rm_free(vf, m->handle);
		return vf_error(vf, -EPROTO, "the RM placed %llu bytes at %#llx, outside the "
				"%llu-byte slice", (unsigned long long)m->size,
				(unsigned long long)m->addr, (unsigned long long)vf->info.vram_size);
	}
	return 0;
}

int vgpu_mem_alloc(struct vgpu_vf *vf, enum vgpu_mem_kind kind, uint64_t size,
		   uint64_t page_size, struct vgpu_mem **out)
{
	struct vgpu_mem *m;
	int ret;

	if (!page_size)
		page_size = VGPU_GMMU_PAGE_4K;
	if (!size || !mem_page_size_ok(page_size) || size > UINT64_MAX - page_size ||
	    (kind != VGPU_MEM_VRAM && kind != VGPU_MEM_SYSMEM))
		return -EINVAL;
	if (!vf->bar || atomic_load(&vf->reset_pending))
		return -ENOLINK;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->vf = vf;
	m->kind = kind;
	m->page_size = page_size;
	m->size = (size + page_size - 1) & ~(page_size - 1);
	if (kind == VGPU_MEM_VRAM) {
		ret = mem_get_vram(vf, m);
	} else {
		ret = vf_dma_alloc(&vf->dma, m->size, page_size, &m->dma_off);
		m->addr = vf->dma_iova + m->dma_off;
	}
	if (ret) {
		free(m);
		return ret;
	}
	cmn_mutex_lock(&vf->obj_lock);
	cmn_list_add(&vf->mems, &m->node);
	cmn_mutex_unlock(&vf->obj_lock);
	*out = m;
	return 0;
}

int vf_mem_free(struct vgpu_mem *m, bool force)
{
	struct vgpu_vf *vf;

	if (!m)
		return 0;
	if (atomic_load(&m->maps))
		return -EBUSY;
	vf = m->vf;
	if (!m->lost) {
		if (m->kind == VGPU_MEM_VRAM) {
			int ret = vf_rm_free(vf, m->handle);

			/* The host may still hold the VRAM: keep the handle for a retry. */
			if (!force && !vf_rm_free_done(ret))
				return ret;
		} else {
			vf_dma_free(&vf->dma, m->dma_off, m->size);
		}
	}
	cmn_mutex_lock(&vf->obj_lock);
	cmn_list_del(&m->node);
	cmn_mutex_unlock(&vf->obj_lock);
	free(m);
	return 0;
}

int vgpu_mem_free(struct vgpu_mem *m)
{
	return vf_mem_free(m, false);
}

void *vgpu_mem_cpu(const struct vgpu_mem *m)
{
	const struct vgpu_vf *vf = m->vf;

	if (m->lost || !vf->bar)
		return NULL;
	if (m->kind == VGPU_MEM_VRAM)
		return vf->bar + vf->hdr->vram_off + m->addr;
	return vf->dma.cpu + m->dma_off;
}

uint64_t vgpu_mem_addr(const struct vgpu_mem *m) { return m->addr; }
uint64_t vgpu_mem_size(const struct vgpu_mem *m) { return m->size; }
enum vgpu_mem_kind vgpu_mem_kind(const struct vgpu_mem *m) { return m->kind; }
