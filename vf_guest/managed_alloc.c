// SPDX-License-Identifier: MIT
/* Managed allocations (vgpu_vf_managed.h): DMA memory registered with the VF's hmm mm,
 * mapped for the GPU with every PTE remembered; prefetch and advice. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/bitops.h"
#include "vf_guest/managed_internal.h"
#include "vf_guest/vf_pci.h"

/* The CPU address of the level-3 entry of @va (managed.c's walk, repeated here to keep
 * the allocation path in one file): NULL if the walk does not reach a 4 KiB table. */
static _Atomic uint64_t *pte_find(struct vgpu_vf *vf, uint64_t pdb, uint64_t va)
{
	static const unsigned int shift[3] = { VGPU_GMMU_L0_SHIFT, VGPU_GMMU_L1_SHIFT,
					       VGPU_GMMU_L2_SHIFT };
	uint8_t *vram = vf->bar + vf->hdr->vram_off;
	uint64_t table = pdb;

	for (int l = 0; l < 3; l++) {
		uint64_t e = ((const uint64_t *)(vram + table))[(va >> shift[l]) & 511];

		if (!(e & VGPU_GMMU_VALID) || (e & (VGPU_GMMU_LEAF | VGPU_GMMU_PT64K)))
			return NULL;
		table = e & VGPU_GMMU_ADDR_MASK;
		if (table + VGPU_GMMU_TABLE_BYTES > vf->info.vram_size)
			return NULL;
	}
	return (_Atomic uint64_t *)(vram + table) + ((va >> VGPU_GMMU_L3_4K_SHIFT) & 511);
}

/* Whether [va, va + size) of @as overlaps a managed allocation. Under alloc_lock: no
 * allocation in a slot can be freed meanwhile. */
static bool overlaps_managed(struct vf_managed *st, struct vgpu_vaspace *as, uint64_t va,
			     uint64_t size)
{
	bool hit = false;

	cmn_mutex_lock(&st->alloc_lock);
	for (unsigned int i = 0; i < MANAGED_MAX_ALLOCS && !hit; i++) {
		struct vgpu_managed *o = atomic_load(&st->allocs[i]);

		hit = o && o->as == as && va < o->va + o->size && o->va < va + size;
	}
	cmn_mutex_unlock(&st->alloc_lock);
	return hit;
}

static int slot_get(struct vf_managed *st, struct vgpu_managed *m)
{
	int ret = -ENOSPC;

	cmn_mutex_lock(&st->alloc_lock);
	for (unsigned int i = 0; i < MANAGED_MAX_ALLOCS; i++) {
		if (!atomic_load(&st->allocs[i])) {
			m->slot = i;
			atomic_store_explicit(&st->allocs[i], m, memory_order_release);
			ret = 0;
			break;
		}
	}
	cmn_mutex_unlock(&st->alloc_lock);
	return ret;
}

/* Wait until every read section that may have seen a slot before it was emptied has
 * ended. Readers count themselves under the epoch's parity; flipping it sends new readers
 * to the other count, so the old one only drains. Both counts are drained in turn: a
 * reader may take the epoch just before a flip and count itself just after the wait on
 * that count ended. Under alloc_lock: one grace period at a time. */
static void slot_grace(struct vf_managed *st)
{
	cmn_mutex_assert_held(&st->alloc_lock);
	for (int k = 0; k < 2; k++) {
		unsigned int old = atomic_fetch_add(&st->rd_epoch, 1) & 1;

		while (atomic_load(&st->rd_count[old]))
			sched_yield();
	}
}

/* Empty @m's slot; on return no reader still uses @m. The caller holds svc_lock, so no
 * service pass holds @m either. */
static void slot_put(struct vf_managed *st, struct vgpu_managed *m)
{
	cmn_mutex_assert_held(&st->svc_lock);
	cmn_mutex_lock(&st->alloc_lock);
	atomic_store(&st->allocs[m->slot], NULL);
	slot_grace(st);
	cmn_mutex_unlock(&st->alloc_lock);
}

/* Map the range for the GPU in system memory, find every PTE, then make them invalid:
 * the GPU's first access faults. */
static int gpu_map(struct vgpu_managed *m)
{
	struct vgpu_vf *vf = m->st->vf;
	size_t n = m->size >> HMM_PAGE_SHIFT;
	int ret = vgpu_va_map_raw(m->as, m->va, VGPU_MEM_SYSMEM, m->iova, m->size,
				  VGPU_GMMU_PAGE_4K, VGPU_MAP_VOLATILE);

	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		m->ptes[i] = pte_find(vf, vgpu_vaspace_pdb(m->as), m->va + (i << HMM_PAGE_SHIFT));
		if (!m->ptes[i]) {
			vgpu_va_unmap(m->as, m->va, m->size);
			return vf_error(vf, -EPROTO, "managed memory: no PTE for VA %#llx",
					(unsigned long long)(m->va + (i << HMM_PAGE_SHIFT)));
		}
		m->sys_pte[i] = atomic_load(m->ptes[i]);
	}
	for (size_t i = 0; i < n; i++)
		atomic_store(m->ptes[i], 0);
	return 0;
}

/* The PTEs back as the mapping made them, so the driver's unmap finds what it mapped. */
static void gpu_unmap(struct vgpu_managed *m)
{
	for (size_t i = 0; i < m->size >> HMM_PAGE_SHIFT; i++)
		atomic_store(m->ptes[i], m->sys_pte[i]);
	vgpu_va_unmap(m->as, m->va, m->size);
}

static void managed_free_arrays(struct vgpu_managed *m)
{
	free(m->ptes);
	free(m->sys_pte);
	free(m->advice);
	free(m);
}

static struct vgpu_managed *managed_new(struct vf_managed *st, struct vgpu_vaspace *as,
					uint64_t va, uint64_t size)
{
	struct vgpu_managed *m = calloc(1, sizeof(*m));
	size_t n = size >> HMM_PAGE_SHIFT;

	if (!m)
		return NULL;
	m->st = st;
	m->as = as;
	m->va = va;
	m->size = size;
	m->ptes = calloc(n, sizeof(*m->ptes));
	m->sys_pte = calloc(n, sizeof(*m->sys_pte));
	m->advice = calloc(n, 1);
	if (!m->ptes || !m->sys_pte || !m->advice) {
		managed_free_arrays(m);
		return NULL;
	}
	return m;
}

/* Map the DMA memory @src (in the driver's BAR2 mapping) again, @len bytes, at @at (an
 * address range we own) or anywhere (NULL). The local transport's BAR2 is a memfd
 * mapping, which mremap with old size 0 duplicates; in a VM BAR2 is a device mapping
 * (PFNMAP: sysfs resource2, the vfio region, the kernel driver's device file), which
 * mremap refuses (-EFAULT), so the transport maps those bytes of its BAR2 again. */
static int bar_view(struct vgpu_vf *vf, void *src, uint64_t len, void *at, void **out,
		    const char **how)
{
	uint64_t off = (uint64_t)((uint8_t *)src - vf->bar);
	void *p;

	if (vf_vfio_is(vf->t)) {
		*how = "mmap of the vfio BAR2 region";
		return vf_vfio_bar2_view(vf->t, off, len, at, out);
	}
	if (vf_sysfs_is(vf->t)) {
		*how = "mmap of sysfs resource2";
		return vf_sysfs_bar2_view(vf->t, off, len, at, out);
	}
	if (vf_kmod_is(vf->t)) {
		*how = "mmap of the kernel driver's device file";
		return vf_kmod_bar2_view(vf->t, off, len, at, out);
	}
	*how = "mremap of the BAR2 memfd mapping";
	p = at ? mremap(src, 0, len, MREMAP_MAYMOVE | MREMAP_FIXED, at)
	       : mremap(src, 0, len, MREMAP_MAYMOVE);
	/* EFAULT, EINVAL: a transport of the caller's whose BAR2 mremap cannot duplicate */
	if (p == MAP_FAILED)
		return errno == EFAULT || errno == EINVAL ? -EOPNOTSUPP : -errno;
	*out = p;
	return 0;
}

/* @size bytes of address space at a 2 MiB boundary, reserved (PROT_NONE) for a view. */
static void *aligned_hole(uint64_t size)
{
	uint64_t span = size + HMM_BLOCK_SIZE;
	uint8_t *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			  -1, 0);
	uint8_t *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (uint8_t *)cmn_align_up((uintptr_t)p, HMM_BLOCK_SIZE);
	if (a > p)
		munmap(p, (size_t)(a - p));
	munmap(a + size, (size_t)(p + span - (a + size)));
	return a;
}

/* The two views of @m's DMA memory hmm needs: the managed region (@m->cpu) and its write
 * view (@m->alias). Locally the region is the DMA memory in the driver's BAR2 mapping.
 * In a VM it is a mapping of its own at a 2 MiB boundary: hmm services GPU faults and
 * prefetches per 2 MiB block of CPU addresses, and a block reaching past the region into
 * the rest of BAR2 range-faults pages that are no region's, which in a PFNMAP mapping
 * /proc/self/pagemap reports as holes that cannot be populated: the whole block fails.
 * (Locally those pages are ordinary shared memory and merely get mapped for the GPU.) */
static int views_get(struct vgpu_vf *vf, struct vgpu_managed *m, void *dma)
{
	void *hole, *cpu = dma, *alias = NULL;
	int ret;

	m->own_cpu = vf_vfio_is(vf->t) || vf_sysfs_is(vf->t) || vf_kmod_is(vf->t);
	if (m->own_cpu) {
		hole = aligned_hole(m->size);
		if (!hole)
			return -ENOMEM;
		ret = bar_view(vf, dma, m->size, hole, &cpu, &m->view);
		if (ret) {
			munmap(hole, m->size);
			return ret;
		}
	}
	ret = bar_view(vf, dma, m->size, NULL, &alias, &m->view);
	if (ret) {
		if (m->own_cpu)
			munmap(cpu, m->size);
		return ret;
	}
	m->cpu = cpu;
	m->alias = alias;
	return 0;
}

/* DMA memory for @m and its views. */
static int dma_get(struct vgpu_managed *m)
{
	struct vgpu_vf *vf = m->st->vf;
	int ret = vgpu_mem_alloc(vf, VGPU_MEM_SYSMEM, m->size, VGPU_GMMU_PAGE_2M, &m->mem);

	if (ret)
		return ret;
	m->iova = vgpu_mem_addr(m->mem);
	ret = views_get(vf, m, vgpu_mem_cpu(m->mem));
	if (ret) {
		vgpu_mem_free(m->mem);
		return vf_error(vf, ret, "managed memory: no second view of DMA memory (%s): %s",
				m->view ? m->view : "address space", vgpu_vf_strerror(ret));
	}
	return 0;
}

static void dma_put(struct vgpu_managed *m)
{
	munmap(m->alias, m->size);
	if (m->own_cpu)
		munmap(m->cpu, m->size);
	vgpu_mem_free(m->mem);
}

int vgpu_mem_alloc_managed(struct vgpu_vaspace *as, uint64_t va, uint64_t size,
			   struct vgpu_managed **out)
{
	struct vf_managed *st;
	struct vgpu_managed *m;
	int ret;

	if (!as || !out || !size || va % HMM_BLOCK_SIZE || size > (1ull << 40))
		return -EINVAL;
	size = cmn_align_up(size, HMM_BLOCK_SIZE);
	if (!as->vf->managed.ctx) {
		ret = vgpu_managed_init(as->vf, NULL);
		if (ret)
			return ret;
	}
	st = as->vf->managed.ctx;
	/* An early answer, before any DMA memory is taken; the GPU mapping is what claims
	 * the VA (atomically, in the address space's record of mappings). */
	if (overlaps_managed(st, as, va, size))
		return -EEXIST;
	m = managed_new(st, as, va, size);
	if (!m)
		return -ENOMEM;
	ret = dma_get(m);
	if (ret)
		goto free_m;
	ret = gpu_map(m);
	if (ret)
		goto put_dma;
	ret = slot_get(st, m);
	if (ret)
		goto unmap;
	ret = hmm_region_add_alias(st->mm, m->cpu, m->size, m->alias);
	if (ret) {
		vf_error(st->vf, ret, "managed memory: DMA memory at %p cannot be a managed "
			 "region: %s", (void *)m->cpu, vgpu_vf_strerror(ret));
		goto put_slot;
	}
	*out = m;
	return 0;
put_slot:
	cmn_mutex_lock(&st->svc_lock);
	slot_put(st, m);
	cmn_mutex_unlock(&st->svc_lock);
unmap:
	gpu_unmap(m);
put_dma:
	dma_put(m);
free_m:
	managed_free_arrays(m);
	return ret;
}

int vgpu_mem_free_managed(struct vgpu_managed *m)
{
	struct vf_managed *st;

	if (!m)
		return 0;
	st = m->st;
	/* not while a service pass may hold @m; every page back first (the region's end
	 * waits for fault handlers too) */
	cmn_mutex_lock(&st->svc_lock);
	hmm_region_remove(st->mm, m->cpu);
	slot_put(st, m);
	cmn_mutex_unlock(&st->svc_lock);
	gpu_unmap(m);
	dma_put(m);
	managed_free_arrays(m);
	return 0;
}

void *vgpu_managed_cpu(const struct vgpu_managed *m) { return m->cpu; }
uint64_t vgpu_managed_va(const struct vgpu_managed *m) { return m->va; }
uint64_t vgpu_managed_size(const struct vgpu_managed *m) { return m->size; }

static int range_check(const struct vgpu_managed *m, uint64_t off, uint64_t len)
{
	if (!m || !len || off % HMM_PAGE_SIZE || len % HMM_PAGE_SIZE || off > m->size ||
	    len > m->size - off)
		return -EINVAL;
	return 0;
}

int vgpu_mem_prefetch(struct vgpu_managed *m, uint64_t off, uint64_t len, enum vgpu_mem_loc to,
		      struct vgpu_prefetch_result *res)
{
	struct vgpu_prefetch_result local;
	struct hmm_migrate_result r;
	struct vf_managed *st;
	int ret = range_check(m, off, len);

	if (ret || (to != VGPU_LOC_CPU && to != VGPU_LOC_DEVICE))
		return ret ? ret : -EINVAL;
	st = m->st;
	res = res ? res : &local;
	memset(res, 0, sizeof(*res));
	if (to == VGPU_LOC_CPU)
		ret = hmm_migrate_to_system(st->mm, st->devmem, m->cpu + off, len, &r);
	else
		ret = hmm_migrate_to_device(st->mm, st->devmem, m->cpu + off, len, &r);
	if (ret && ret != -ENOMEM)
		return ret;
	res->pages = len >> HMM_PAGE_SHIFT;
	res->moved = r.migrated;
	res->no_room = r.alloc_failed;
	res->busy = r.cpu_won + r.failed;
	if (to == VGPU_LOC_DEVICE) {
		/* our own migration is not notified to us: map what is now in VRAM */
		ret = vf_managed_map_present(st, (uintptr_t)m->cpu + off, len);
		if (ret)
			return ret;
	}
	if (res->no_room)
		vf_error(st->vf, -ENOSPC, "managed memory: %llu of %llu pages left in system "
			 "memory: the %llu KiB VRAM pool is full",
			 (unsigned long long)res->no_room, (unsigned long long)res->pages,
			 (unsigned long long)(vgpu_mem_size(st->pool) >> 10));
	return 0;
}

int vgpu_mem_advise(struct vgpu_managed *m, uint64_t off, uint64_t len,
		    enum vgpu_mem_advice advice)
{
	int ret = range_check(m, off, len);

	if (ret || (advice != VGPU_ADVISE_PREFER_DEVICE && advice != VGPU_ADVISE_PREFER_CPU))
		return ret ? ret : -EINVAL;
	/* the service reads the advice under svc_lock (a pass splits its faults by it) */
	cmn_mutex_lock(&m->st->svc_lock);
	memset(m->advice + (off >> HMM_PAGE_SHIFT), advice, len >> HMM_PAGE_SHIFT);
	cmn_mutex_unlock(&m->st->svc_lock);
	if (advice == VGPU_ADVISE_PREFER_CPU) {
		struct hmm_migrate_result r;

		hmm_migrate_to_system(m->st->mm, m->st->devmem, m->cpu + off, len, &r);
	}
	return 0;
}

uint64_t vgpu_managed_resident(struct vgpu_managed *m, uint64_t off, uint64_t len)
{
	uint64_t n = 0;

	if (range_check(m, off, len))
		return 0;
	for (uint64_t o = off; o < off + len; o += HMM_PAGE_SIZE)
		n += hmm_mm_page_where(m->st->mm, m->cpu + o, NULL, NULL) == HMM_PAGE_DEVICE;
	return n;
}
