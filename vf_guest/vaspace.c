// SPDX-License-Identifier: MIT
/* GPU address spaces of one VF. Page tables are 4 KiB blocks carved out of 64 KiB VRAM chunks
 * the driver gets from the RM (one RM call per 16 tables, not per table); gmmu.c writes the
 * entries. Every address space also maps the whole DMA memory at VF_DMA_VA_BASE, so channel
 * rings and semaphores have the same GPU VA everywhere. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/gmmu.h>

#include "vf_guest/vf_internal.h"

#define TABLES_PER_CHUNK	(VF_PT_CHUNK / VGPU_GMMU_TABLE_BYTES)

struct vf_mapping {
	uint64_t va, size;
	struct vgpu_mem *mem;	/* NULL for a raw mapping */
};

/* Mappings are kept in a growing array next to the vaspace (rarely more than a few hundred). */
struct vf_maps {
	struct vf_mapping *v;
	uint32_t n, cap;
};

static struct vf_maps *as_maps(struct vgpu_vaspace *as);

static int pt_alloc(void *ctx, uint64_t *pa)
{
	struct vgpu_vaspace *as = ctx;
	struct vf_pt_chunk *c;
	struct vgpu_mem *m;
	int ret;

	for (uint32_t i = 0; i < as->nr_chunks; i++) {
		c = &as->chunks[i];
		if (c->used == (1u << TABLES_PER_CHUNK) - 1)
			continue;
		unsigned int t = (unsigned int)__builtin_ctz(~c->used);

		c->used |= 1u << t;
		*pa = c->mem->addr + (uint64_t)t * VGPU_GMMU_TABLE_BYTES;
		return 0;
	}
	if (as->nr_chunks == as->cap_chunks) {
		uint32_t cap = as->cap_chunks ? as->cap_chunks * 2 : 4;
		void *p = realloc(as->chunks, cap * sizeof(*as->chunks));

		if (!p)
			return -ENOMEM;
		as->chunks = p;
		as->cap_chunks = cap;
	}
	ret = vgpu_mem_alloc(as->vf, VGPU_MEM_VRAM, VF_PT_CHUNK, VGPU_GMMU_PAGE_64K, &m);
	if (ret)
		return ret;
	as->chunks[as->nr_chunks++] = (struct vf_pt_chunk){ .mem = m, .used = 1 };
	*pa = m->addr;
	return 0;
}

static void pt_free(void *ctx, uint64_t pa)
{
	struct vgpu_vaspace *as = ctx;

	for (uint32_t i = 0; i < as->nr_chunks; i++) {
		struct vf_pt_chunk *c = &as->chunks[i];

		if (pa >= c->mem->addr && pa < c->mem->addr + VF_PT_CHUNK) {
			c->used &= ~(1u << ((pa - c->mem->addr) / VGPU_GMMU_TABLE_BYTES));
			return;
		}
	}
	VGPU_ASSERT(!"page table not from this address space");
}

static const struct vf_pt_ops vf_as_pt_ops = { .alloc = pt_alloc, .free = pt_free };

/* Largest page size that tiles [iova, iova+size). */
static uint64_t dma_page_size(uint64_t iova, uint64_t size)
{
	if (!((iova | size) & (VGPU_GMMU_PAGE_2M - 1)))
		return VGPU_GMMU_PAGE_2M;
	if (!((iova | size) & (VGPU_GMMU_PAGE_64K - 1)))
		return VGPU_GMMU_PAGE_64K;
	return VGPU_GMMU_PAGE_4K;
}

/* A chunk whose FREE the RM does not confirm stays on vf->mems, for vgpu_vf_close(). */
static void as_free_chunks(struct vgpu_vaspace *as)
{
	for (uint32_t i = 0; i < as->nr_chunks; i++)
		vgpu_mem_free(as->chunks[i].mem);
	free(as->chunks);
	as->chunks = NULL;
	as->nr_chunks = as->cap_chunks = 0;
}

int vgpu_vaspace_create(struct vgpu_vf *vf, struct vgpu_vaspace **out)
{
	struct vgpu_vaspace *as;
	uint64_t dma_size = vf->dma.size;
	int ret;

	if (!vf->bar || atomic_load(&vf->reset_pending))
		return -ENOLINK;
	as = calloc(1, sizeof(*as) + sizeof(struct vf_maps));
	if (!as)
		return -ENOMEM;
	as->vf = vf;
	cmn_mutex_init(&as->lock);
	ret = vf_gmmu_init(&as->gmmu, vf->bar + vf->hdr->vram_off, vf->info.vram_size,
			   &vf_as_pt_ops, as);
	if (ret)
		goto free_chunks;
	if (vf->dma_iova && dma_size) {
		ret = vf_gmmu_map(&as->gmmu, VF_DMA_VA_BASE, VGPU_GMMU_APER_SYS, vf->dma_iova,
				  dma_size, dma_page_size(vf->dma_iova, dma_size), 0);
		if (ret)
			goto fini_gmmu;
	}
	ret = vf_rm_vaspace_alloc(vf, vf_gmmu_pdb(&as->gmmu), &as->handle);
	if (ret)
		goto fini_gmmu;
	cmn_mutex_lock(&vf->obj_lock);
	cmn_list_add(&vf->vaspaces, &as->node);
	cmn_mutex_unlock(&vf->obj_lock);
	*out = as;
	return 0;
fini_gmmu:
	vf_gmmu_fini(&as->gmmu);
free_chunks:
	as_free_chunks(as);
	cmn_mutex_destroy(&as->lock);
	free(as);
	return ret;
}

static struct vf_maps *as_maps(struct vgpu_vaspace *as)
{
	return (struct vf_maps *)(as + 1);
}

int vf_vaspace_destroy(struct vgpu_vaspace *as, bool force)
{
	struct vf_maps *mp;
	struct vgpu_vf *vf;
	bool gone;

	if (!as)
		return 0;
	vf = as->vf;
	gone = as->lost || !vf->bar;	/* the tables went with the slice */
	if (!gone && as->handle) {
		int ret = vf_rm_free(vf, as->handle);

		/* Until the FREE is confirmed the host may still walk these page tables: they
		 * cannot go to the next allocation, and the handle is what a retry frees. */
		if (!force && !vf_rm_free_done(ret))
			return ret;
	}
	mp = as_maps(as);
	for (uint32_t i = 0; i < mp->n; i++)
		if (mp->v[i].mem)
			atomic_fetch_sub(&mp->v[i].mem->maps, 1);
	free(mp->v);
	if (gone)
		vf_gmmu_forget(&as->gmmu);
	else
		vf_gmmu_fini(&as->gmmu);
	as_free_chunks(as);
	cmn_mutex_lock(&vf->obj_lock);
	cmn_list_del(&as->node);
	cmn_mutex_unlock(&vf->obj_lock);
	cmn_mutex_destroy(&as->lock);
	free(as);
	return 0;
}

int vgpu_vaspace_destroy(struct vgpu_vaspace *as)
{
	return vf_vaspace_destroy(as, false);
}

static int as_record(struct vgpu_vaspace *as, uint64_t va, uint64_t size, struct vgpu_mem *mem)
{
	struct vf_maps *mp = as_maps(as);

	if (mp->n == mp->cap) {
		uint32_t cap = mp->cap ? mp->cap * 2 : 16;
		void *p = realloc(mp->v, cap * sizeof(*mp->v));

		if (!p)
			return -ENOMEM;
		mp->v = p;
		mp->cap = cap;
	}
	mp->v[mp->n++] = (struct vf_mapping){ .va = va, .size = size, .mem = mem };
	return 0;
}

/* Whether [va, va + size) overlaps a recorded mapping. The page tables alone cannot say:
 * a managed allocation keeps its range mapped with every PTE invalid until the GPU
 * faults a page in, and a map over such PTEs would take entries the managed unmap needs. */
static bool as_overlaps(struct vgpu_vaspace *as, uint64_t va, uint64_t size)
{
	const struct vf_maps *mp = as_maps(as);

	for (uint32_t i = 0; i < mp->n; i++)
		if (va < mp->v[i].va + mp->v[i].size && mp->v[i].va < va + size)
			return true;
	return false;
}

static uint64_t map_flags(unsigned int flags)
{
	return (flags & VGPU_MAP_RO ? VGPU_GMMU_RO : 0) |
	       (flags & VGPU_MAP_VOLATILE ? VGPU_GMMU_VOLATILE : 0);
}

static int as_map_locked(struct vgpu_vaspace *as, uint64_t va, uint64_t aper, uint64_t addr,
			 uint64_t size, uint64_t ps, unsigned int flags, struct vgpu_mem *mem)
{
	int ret;

	cmn_mutex_assert_held(&as->lock);
	if (flags & ~(VGPU_MAP_RO | VGPU_MAP_VOLATILE))
		return -EINVAL;
	if (as->lost)
		return -ENOLINK;
	/* va + size wrapping: range_ok() in the map below refuses it; skip the overlap test
	 * rather than let it misjudge. */
	if (va + size > va && as_overlaps(as, va, size))
		return -EEXIST;
	ret = as_record(as, va, size, mem);
	if (ret)
		return ret;
	ret = vf_gmmu_map(&as->gmmu, va, aper, addr, size, ps, map_flags(flags));
	if (ret) {
		as_maps(as)->n--;
		return ret;
	}
	if (mem)
		atomic_fetch_add(&mem->maps, 1);
	return 0;
}

int vgpu_va_map(struct vgpu_vaspace *as, uint64_t va, struct vgpu_mem *mem, uint64_t off,
		uint64_t size, uint64_t page_size, unsigned int flags)
{
	uint64_t aper;
	int ret;

	if (!mem || mem->vf != as->vf || off > mem->size || size > mem->size - off)
		return -EINVAL;
	if (mem->lost)
		return -ENOLINK;
	aper = mem->kind == VGPU_MEM_VRAM ? VGPU_GMMU_APER_VRAM : VGPU_GMMU_APER_SYS;
	cmn_mutex_lock(&as->lock);
	ret = as_map_locked(as, va, aper, mem->addr + off, size, page_size, flags, mem);
	cmn_mutex_unlock(&as->lock);
	return ret;
}

/* GMMU aperture of a memory kind (0 if there is none). */
static uint64_t kind_aper(enum vgpu_mem_kind kind)
{
	switch (kind) {
	case VGPU_MEM_VRAM:
		return VGPU_GMMU_APER_VRAM;
	case VGPU_MEM_SYSMEM:
		return VGPU_GMMU_APER_SYS;
	case VGPU_MEM_SVA:
		return VGPU_GMMU_APER_SVA;
	}
	return 0;
}

int vf_va_map_aper(struct vgpu_vaspace *as, uint64_t va, uint64_t aper, uint64_t addr,
		   uint64_t size, uint64_t page_size, unsigned int flags)
{
	int ret;

	cmn_mutex_lock(&as->lock);
	ret = as_map_locked(as, va, aper, addr, size, page_size, flags, NULL);
	cmn_mutex_unlock(&as->lock);
	return ret;
}

int vgpu_va_map_raw(struct vgpu_vaspace *as, uint64_t va, enum vgpu_mem_kind kind,
		    uint64_t addr, uint64_t size, uint64_t page_size, unsigned int flags)
{
	if (kind != VGPU_MEM_VRAM && kind != VGPU_MEM_SYSMEM && kind != VGPU_MEM_SVA)
		return -EINVAL;
	return vf_va_map_aper(as, va, kind_aper(kind), addr, size, page_size, flags);
}

int vgpu_va_unmap(struct vgpu_vaspace *as, uint64_t va, uint64_t size)
{
	struct vf_maps *mp = as_maps(as);
	int ret = -ENOENT;

	cmn_mutex_lock(&as->lock);
	for (uint32_t i = 0; i < mp->n; i++) {
		struct vf_mapping *m = &mp->v[i];

		if (m->va != va || m->size != size)
			continue;
		ret = as->lost ? 0 : vf_gmmu_unmap(&as->gmmu, va, size);
		if (ret)
			break;
		if (m->mem)
			atomic_fetch_sub(&m->mem->maps, 1);
		*m = mp->v[--mp->n];
		break;
	}
	cmn_mutex_unlock(&as->lock);
	return ret;
}

int vgpu_va_lookup(struct vgpu_vaspace *as, uint64_t va, enum vgpu_mem_kind *kind,
		   uint64_t *addr, uint64_t *page_size)
{
	uint64_t aper;
	int ret;

	cmn_mutex_lock(&as->lock);
	ret = as->lost ? -ENOLINK : vf_gmmu_lookup(&as->gmmu, va, &aper, addr, page_size, NULL);
	cmn_mutex_unlock(&as->lock);
	if (!ret && kind)
		*kind = aper == VGPU_GMMU_APER_VRAM ? VGPU_MEM_VRAM :
			aper == VGPU_GMMU_APER_SVA ? VGPU_MEM_SVA : VGPU_MEM_SYSMEM;
	return ret;
}

uint64_t vgpu_vaspace_pdb(const struct vgpu_vaspace *as)
{
	return vf_gmmu_pdb(&as->gmmu);
}

uint64_t vgpu_vaspace_table_bytes(const struct vgpu_vaspace *as)
{
	return as->gmmu.tables * VGPU_GMMU_TABLE_BYTES;
}
