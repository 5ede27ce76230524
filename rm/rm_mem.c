// SPDX-License-Identifier: MIT
/* Memory descriptors: VRAM from the function's PMA (page size, contiguity, alignment) and
 * system memory carved from the function's DMA memory and mapped through its IOMMU
 * domain. Quotas are checked before the allocator is asked, so "over quota" (the function
 * may not have more) and "no space" (the memory is not there) stay distinct errors. */
#include <errno.h>
#include <stdlib.h>

#include <vgpu/gpfifo.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/log.h"
#include "pma/pma.h"
#include "rm/rm_internal.h"

#define SYS_CHUNK (64ull << 10)

/* Charge @bytes to the VRAM or sysmem quota of @fn; -VGPU_EQUOTA if it would exceed it. */
static int quota_charge(struct rm *rm, unsigned int fn, bool vram, uint64_t bytes)
{
	struct rm_fn *f = &rm->fns[fn];
	uint64_t *used = vram ? &f->vram_used : &f->sysmem_used;
	uint64_t lim;
	int ret = 0;

	rm_acct_lock(rm, fn);
	lim = vram ? f->quota.vram : f->quota.sysmem;
	if (lim && (*used + bytes > lim || *used + bytes < *used))
		ret = -VGPU_EQUOTA;
	else
		*used += bytes;
	rm_acct_unlock(rm, fn);
	return ret;
}

static void quota_uncharge(struct rm *rm, unsigned int fn, bool vram, uint64_t bytes)
{
	struct rm_fn *f = &rm->fns[fn];

	rm_acct_lock(rm, fn);
	*(vram ? &f->vram_used : &f->sysmem_used) -= bytes;
	rm_acct_unlock(rm, fn);
}

/* Check a VRAM request; -EINVAL naming the field that is wrong (guest input: debug log). */
static int vram_check(unsigned int fn, const struct vgpu_rm_vidmem_params *p, uint64_t ps)
{
	const char *why = NULL;

	if (ps != PMA_PAGE_64K && ps != PMA_PAGE_2M)
		why = "page size is neither 64 KiB nor 2 MiB";
	else if (!p->size || p->size % ps || p->size > (1ull << 40))
		why = "size is not a multiple of the page size in (0, 1 TiB]";
	else if (p->flags & ~VGPU_RM_MEM_CONTIGUOUS)
		why = "unknown flags";
	else if (p->alignment && (p->alignment & (p->alignment - 1)))
		why = "alignment is not a power of two";
	else if (p->alignment && p->alignment < ps)
		why = "alignment is below the page size";
	else if (p->alignment > (1ull << 40))
		why = "alignment is above 1 TiB";
	if (!why)
		return 0;
	cmn_dbg("rm: fn %u VRAM alloc refused: %s (size %#llx, page %#llx, alignment %#llx)",
		 fn, why, (unsigned long long)p->size, (unsigned long long)ps,
		 (unsigned long long)p->alignment);
	return -EINVAL;
}

/* Alignment is of the VF-physical address; a slice base is only 2 MiB aligned, so when it
 * is not aligned to @align the PMA's (absolute) alignment does not apply. Try each aligned
 * VF-physical address in turn: the whole run there if contiguous, else the first page
 * there and the rest anywhere. */
static int vram_take_rel(struct rm_fn *f, struct rm_mem *m, uint64_t ps, uint64_t align,
			 struct pma_alloc_opts *o)
{
	struct pma_alloc_opts fo = { .flags = PMA_PINNED };
	bool contig = o->flags & PMA_CONTIGUOUS;
	uint64_t first = contig ? m->nr_pages * ps : ps;
	int ret;

	for (uint64_t off = 0; off + first <= f->size; off += align) {
		ret = pma_alloc_fixed(f->pma, f->base + off, first, &fo);
		if (ret == -EEXIST || ret == -ENOMEM)
			continue;
		if (ret)
			return ret;
		for (size_t i = 0; i < (contig ? m->nr_pages : 1); i++)
			m->pages[i] = f->base + off + i * ps;
		if (contig || m->nr_pages == 1)
			return 0;
		ret = pma_alloc_pages(f->pma, m->nr_pages - 1, ps, o, m->pages + 1);
		if (ret)
			pma_free_range(f->pma, f->base + off, ps, 0);
		return ret;
	}
	return -ENOMEM;
}

/* Take the pages of @m from the function's PMA, the first one aligned to @align in the
 * function's VF-physical space. The PMA aligns only contiguous runs beyond their page
 * size, so scattered pages take the first-page path too. */
static int vram_take(struct rm_fn *f, struct rm_mem *m, uint64_t ps, uint64_t align,
		     struct pma_alloc_opts *o)
{
	if (align > ps && ((f->base & (align - 1)) || !(o->flags & PMA_CONTIGUOUS)))
		return vram_take_rel(f, m, ps, align, o);
	if (align > ps) {	/* the base is aligned too: absolute alignment is the same */
		o->flags |= PMA_FORCE_ALIGNMENT;
		o->alignment = align;
	}
	return pma_alloc_pages(f->pma, m->nr_pages, ps, o, m->pages);
}

int rm_mem_vram_alloc(struct rm *rm, unsigned int fn, struct vgpu_rm_vidmem_params *p,
		      struct rm_mem **out)
{
	uint64_t ps = p->page_size ? p->page_size : PMA_PAGE_64K;
	struct pma_alloc_opts o = { .flags = PMA_PINNED };
	struct rm_mem *m;
	int ret;

	ret = vram_check(fn, p, ps);
	if (ret)
		return ret;
	if (!rm->fns[fn].pma)
		return -ENODEV;
	if (p->flags & VGPU_RM_MEM_CONTIGUOUS)
		o.flags |= PMA_CONTIGUOUS;
	/* Refused before the page list is allocated: sized by the request, it is up to
	 * 128 MiB for one the slice could never hold. */
	ret = quota_charge(rm, fn, true, p->size);
	if (ret)
		return ret;
	ret = -ENOMEM;
	if (p->size > rm->fns[fn].size)
		goto uncharge;
	m = rm_zalloc(sizeof(*m));
	if (!m)
		goto uncharge;
	m->nr_pages = p->size / ps;
	m->pages = rm_zalloc(m->nr_pages * sizeof(uint64_t));	/* fits the slice */
	if (!m->pages)
		goto free_m;
	ret = vram_take(&rm->fns[fn], m, ps, p->alignment, &o);
	if (ret)
		goto free_pages;
	m->fn = fn;
	m->aper = VGPU_APER_VRAM;
	m->addr = m->pages[0];
	m->size = p->size;
	m->page_size = ps;
	atomic_init(&m->refs, 1);
	p->addr = m->addr - rm->fns[fn].base;
	*out = m;
	return 0;
free_pages:
	free(m->pages);
free_m:
	free(m);
uncharge:
	quota_uncharge(rm, fn, true, p->size);
	return ret;
}

/* First run of @n free chunks in the function's DMA memory; -ENOMEM if none. The chunk map
 * is the function's own, under its accounting lock: sysmem allocations of different
 * functions take no common lock (a partition change swaps the map only while the function
 * has no client, so no memory). */
static int sys_take(struct rm_fn *f, size_t n, size_t *first)
{
	size_t run = 0;

	for (size_t i = 0; i < f->sys_chunks; i++) {
		run = f->sys_map[i / 64] & (1ull << (i % 64)) ? 0 : run + 1;
		if (run == n) {
			*first = i + 1 - n;
			for (size_t k = *first; k <= i; k++)
				f->sys_map[k / 64] |= 1ull << (k % 64);
			return 0;
		}
	}
	return -ENOMEM;
}

static void sys_drop(struct rm_fn *f, size_t first, size_t n)
{
	for (size_t k = first; k < first + n; k++)
		f->sys_map[k / 64] &= ~(1ull << (k % 64));
}

int rm_mem_sys_alloc(struct rm *rm, unsigned int fn, struct vgpu_rm_sysmem_params *p,
		     struct rm_mem **out)
{
	struct rm_fn *f = &rm->fns[fn];
	size_t n = p->size / SYS_CHUNK, first;
	struct rm_mem *m;
	uint64_t iova = 0;
	int ret;

	if (!p->size || p->size % SYS_CHUNK)
		return -EINVAL;
	if (!f->dma || !f->dma_domain)
		return -ENODEV;
	m = rm_zalloc(sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = quota_charge(rm, fn, false, p->size);
	if (ret)
		goto free_m;
	rm_acct_lock(rm, fn);
	ret = sys_take(f, n, &first);
	rm_acct_unlock(rm, fn);
	if (ret)
		goto uncharge;
	ret = rm_op(rm, dma_map, f->dma_domain, f->dma, first * SYS_CHUNK, p->size, &iova);
	if (ret)
		goto drop;
	*m = (struct rm_mem){ .fn = fn, .aper = VGPU_APER_SYS, .addr = iova, .size = p->size,
			      .page_size = SYS_CHUNK, .sys_off = first * SYS_CHUNK, .refs = 1 };
	p->iova = iova;
	p->dma_offset = m->sys_off;
	*out = m;
	return 0;
drop:
	rm_acct_lock(rm, fn);
	sys_drop(f, first, n);
	rm_acct_unlock(rm, fn);
uncharge:
	quota_uncharge(rm, fn, false, p->size);
free_m:
	free(m);
	return ret;
}

/* The pages of record @o, each VF-physical page inside the slice and taken here. */
static int vram_import_pages(struct rm_fn *f, const struct rm_obj_rec *o, struct rm_mem *m)
{
	struct pma_alloc_opts fo = { .flags = PMA_PINNED };
	size_t k = 0;
	int ret = 0;

	for (uint32_t i = 0; !ret && i < o->nr_runs; i++) {
		uint64_t st = o->runs[2 * i], n = o->runs[2 * i + 1];

		if (!n || n > m->nr_pages - k || st % m->page_size || st >= f->size ||
		    n * m->page_size > f->size - st)
			ret = -EINVAL;
		else
			ret = pma_alloc_fixed(f->pma, f->base + st, n * m->page_size, &fo);
		for (uint64_t j = 0; !ret && j < n; j++)
			m->pages[k++] = f->base + st + j * m->page_size;
	}
	if (!ret && k != m->nr_pages)
		ret = -EINVAL;
	if (ret && k)
		pma_free_pages(f->pma, m->pages, k, m->page_size, 0);
	return ret;
}

int rm_mem_vram_import(struct rm *rm, unsigned int fn, const struct rm_obj_rec *o,
		       struct rm_mem **out)
{
	struct vgpu_rm_vidmem_params p = { .size = o->a, .page_size = o->b };
	struct rm_fn *f = &rm->fns[fn];
	struct rm_mem *m;
	int ret = vram_check(fn, &p, o->b);

	if (ret)
		return ret;
	if (!f->pma)
		return -ENODEV;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	*m = (struct rm_mem){ .fn = fn, .aper = VGPU_APER_VRAM, .size = o->a, .page_size = o->b,
			      .nr_pages = o->a / o->b, .refs = 1 };
	m->pages = calloc(m->nr_pages, sizeof(uint64_t));
	ret = m->pages ? quota_charge(rm, fn, true, o->a) : -ENOMEM;
	if (!ret) {
		ret = vram_import_pages(f, o, m);
		if (ret)
			quota_uncharge(rm, fn, true, o->a);
	}
	if (ret) {
		free(m->pages);
		free(m);
		return ret;
	}
	m->addr = m->pages[0];
	*out = m;
	return 0;
}

/* Take the chunks [@first, @first + @n) of the function's DMA memory: -EEXIST if any is used. */
static int sys_take_at(struct rm_fn *f, size_t first, size_t n)
{
	if (first > f->sys_chunks || n > f->sys_chunks - first)
		return -EINVAL;
	for (size_t k = first; k < first + n; k++)
		if (f->sys_map[k / 64] & (1ull << (k % 64)))
			return -EEXIST;
	for (size_t k = first; k < first + n; k++)
		f->sys_map[k / 64] |= 1ull << (k % 64);
	return 0;
}

int rm_mem_sys_import(struct rm *rm, unsigned int fn, const struct rm_obj_rec *o,
		      struct rm_mem **out)
{
	struct rm_fn *f = &rm->fns[fn];
	uint64_t iova = o->b;
	struct rm_mem *m;
	int ret;

	if (!o->a || o->a % SYS_CHUNK || o->c % SYS_CHUNK || !iova || iova % SYS_CHUNK)
		return -EINVAL;
	if (!f->dma || !f->dma_domain)
		return -ENODEV;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	ret = quota_charge(rm, fn, false, o->a);
	if (ret)
		goto free_m;
	rm_acct_lock(rm, fn);
	ret = sys_take_at(f, o->c / SYS_CHUNK, o->a / SYS_CHUNK);
	rm_acct_unlock(rm, fn);
	if (ret)
		goto uncharge;
	ret = rm_op(rm, dma_map, f->dma_domain, f->dma, o->c, o->a, &iova);
	if (!ret && iova != o->b) {
		rm_op(rm, dma_unmap, f->dma_domain, iova, o->a);
		ret = -EEXIST;
	}
	if (ret)
		goto drop;
	*m = (struct rm_mem){ .fn = fn, .aper = VGPU_APER_SYS, .addr = iova, .size = o->a,
			      .page_size = SYS_CHUNK, .sys_off = o->c, .refs = 1 };
	*out = m;
	return 0;
drop:
	rm_acct_lock(rm, fn);
	sys_drop(f, o->c / SYS_CHUNK, o->a / SYS_CHUNK);
	rm_acct_unlock(rm, fn);
uncharge:
	quota_uncharge(rm, fn, false, o->a);
free_m:
	free(m);
	return ret;
}

void rm_mem_get(struct rm *rm, struct rm_mem *m)
{
	(void)rm;
	atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void rm_mem_put(struct rm *rm, struct rm_mem *m)
{
	struct rm_fn *f = &rm->fns[m->fn];
	unsigned int left;

	/* Release: this holder's uses of @m happen before the last holder frees it. */
	left = atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) - 1;
	if (left)
		return;
	if (m->aper == VGPU_APER_VRAM) {
		pma_free_pages(f->pma, m->pages, m->nr_pages, m->page_size, 0);
		free(m->pages);
	} else {
		rm_op(rm, dma_unmap, f->dma_domain, m->addr, m->size);
		rm_acct_lock(rm, m->fn);
		sys_drop(f, m->sys_off / SYS_CHUNK, m->size / SYS_CHUNK);
		rm_acct_unlock(rm, m->fn);
	}
	quota_uncharge(rm, m->fn, m->aper == VGPU_APER_VRAM, m->size);
	free(m);
}
