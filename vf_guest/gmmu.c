// SPDX-License-Identifier: MIT
/* GPU page tables, written by the driver straight into its VRAM (format: vgpu/gmmu.h).
 *
 * A software tree mirrors the tables: each node knows its VF-physical address, its CPU
 * view through the VRAM aperture, how many valid entries it has (so empty tables are freed)
 * and its children. The entries themselves are the ones in VRAM: the device walks them.
 *
 * Ordering: a new table is zeroed before the PDE that points to it is stored, and every
 * entry is stored with release, so a walker that sees a PDE sees an initialised table. A
 * changed PTE reaches the engines only after MMU_INVALIDATE (the caller's job). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/gmmu.h>

#include "vf_guest/vf_internal.h"

struct vf_pt {
	uint64_t pa;
	uint64_t *cpu;
	uint32_t used;		/* valid entries */
	uint8_t level;
	bool pt64k;		/* level 3 only: 64 KiB pages, 32 entries */
	struct vf_pt **child;	/* levels 0..2: one per entry (NULL for a 2 MiB leaf) */
};

static const unsigned int level_shift[3] = {
	VGPU_GMMU_L0_SHIFT, VGPU_GMMU_L1_SHIFT, VGPU_GMMU_L2_SHIFT,
};

static unsigned int pt_index(const struct vf_pt *pt, uint64_t va)
{
	if (pt->level < 3)
		return (unsigned int)(va >> level_shift[pt->level]) & (VGPU_GMMU_ENTRIES - 1);
	if (pt->pt64k)
		return (unsigned int)(va >> VGPU_GMMU_L3_64K_SHIFT) & (VGPU_GMMU_ENTRIES_64K - 1);
	return (unsigned int)(va >> VGPU_GMMU_L3_4K_SHIFT) & (VGPU_GMMU_ENTRIES - 1);
}

static uint64_t pt_load(const struct vf_pt *pt, unsigned int i)
{
	return __atomic_load_n(&pt->cpu[i], __ATOMIC_ACQUIRE);
}

static void pt_store(struct vf_pt *pt, unsigned int i, uint64_t e)
{
	__atomic_store_n(&pt->cpu[i], e, __ATOMIC_RELEASE);
}

static struct vf_pt *pt_new(struct vf_gmmu *g, unsigned int level, bool pt64k, int *err)
{
	struct vf_pt *pt = calloc(1, sizeof(*pt));
	uint64_t pa;

	*err = -ENOMEM;
	if (!pt)
		return NULL;
	if (level < 3) {
		pt->child = calloc(VGPU_GMMU_ENTRIES, sizeof(*pt->child));
		if (!pt->child)
			goto free_pt;
	}
	*err = g->ops->alloc(g->ctx, &pa);
	if (*err)
		goto free_child;
	/* The allocator is ours, but a table outside the aperture would be written blindly. */
	if (pa % VGPU_GMMU_TABLE_BYTES || pa > g->vram_size - VGPU_GMMU_TABLE_BYTES) {
		g->ops->free(g->ctx, pa);
		*err = -EFAULT;
		goto free_child;
	}
	pt->pa = pa;
	pt->cpu = (uint64_t *)(g->vram + pa);
	pt->level = (uint8_t)level;
	pt->pt64k = pt64k;
	memset(pt->cpu, 0, VGPU_GMMU_TABLE_BYTES);
	g->tables++;
	return pt;
free_child:
	free(pt->child);
free_pt:
	free(pt);
	return NULL;
}

static void pt_release(struct vf_gmmu *g, struct vf_pt *pt, bool touch_vram)
{
	if (touch_vram)
		g->ops->free(g->ctx, pt->pa);
	g->tables--;
	free(pt->child);
	free(pt);
}

int vf_gmmu_init(struct vf_gmmu *g, uint8_t *vram, uint64_t vram_size,
		 const struct vf_pt_ops *ops, void *ctx)
{
	int err;

	memset(g, 0, sizeof(*g));
	if (!vram || vram_size < VGPU_GMMU_TABLE_BYTES || !ops)
		return -EINVAL;
	g->vram = vram;
	g->vram_size = vram_size;
	g->ops = ops;
	g->ctx = ctx;
	g->root = pt_new(g, 0, false, &err);
	return g->root ? 0 : err;
}

static void pt_free_tree(struct vf_gmmu *g, struct vf_pt *pt, bool touch_vram)
{
	if (pt->child) {
		for (unsigned int i = 0; i < VGPU_GMMU_ENTRIES; i++) {
			if (!pt->child[i])
				continue;
			if (touch_vram)
				pt_store(pt, i, 0);
			pt_free_tree(g, pt->child[i], touch_vram);
		}
	}
	pt_release(g, pt, touch_vram);
}

void vf_gmmu_fini(struct vf_gmmu *g)
{
	if (g->root)
		pt_free_tree(g, g->root, true);
	g->root = NULL;
}

void vf_gmmu_forget(struct vf_gmmu *g)
{
	if (g->root)
		pt_free_tree(g, g->root, false);
	g->root = NULL;
}

uint64_t vf_gmmu_pdb(const struct vf_gmmu *g)
{
	return g->root ? g->root->pa : 0;
}

static bool page_size_ok(uint64_t ps)
{
	return ps == VGPU_GMMU_PAGE_4K || ps == VGPU_GMMU_PAGE_64K || ps == VGPU_GMMU_PAGE_2M;
}

static int range_ok(uint64_t va, uint64_t addr, uint64_t size, uint64_t ps)
{
	if (!page_size_ok(ps) || !size || (va | addr | size) & (ps - 1))
		return -EINVAL;
	if (va >= VGPU_GMMU_VA_LIMIT || size > VGPU_GMMU_VA_LIMIT - va)
		return -EINVAL;
	if (addr > VGPU_GMMU_ADDR_MASK || size - 1 > VGPU_GMMU_ADDR_MASK - addr)
		return -EINVAL;
	return 0;
}

/* The path of tables covering @va: path[0] = root, down to the level-3 table or the level-2
 * table holding a 2 MiB leaf. Returns the depth reached (index of the last table). */
static int walk(const struct vf_gmmu *g, uint64_t va, struct vf_pt *path[4])
{
	struct vf_pt *pt = g->root;
	int d = 0;

	path[0] = pt;
	while (pt->level < 3) {
		struct vf_pt *c = pt->child[pt_index(pt, va)];

		if (!c)
			break;
		path[++d] = pt = c;
	}
	return d;
}

/* Whether a @ps page at @va could be mapped without touching anything mapped. */
static int check_free(const struct vf_gmmu *g, uint64_t va, uint64_t ps)
{
	struct vf_pt *path[4];
	int d = walk(g, va, path);
	struct vf_pt *pt = path[d];

	if (pt->level < 2)
		return 0;	/* nothing below: free */
	if (pt->level == 2) {
		/* No level-3 table here; a 2 MiB leaf is the only thing that can be in the way. */
		return pt_load(pt, pt_index(pt, va)) & VGPU_GMMU_VALID ? -EEXIST : 0;
	}
	if (ps == VGPU_GMMU_PAGE_2M)
		return -EEXIST;	/* a small-page table occupies the 2 MiB slot */
	if (pt->pt64k != (ps == VGPU_GMMU_PAGE_64K))
		return -EEXIST;	/* the 2 MiB region already uses the other small page size */
	return pt_load(pt, pt_index(pt, va)) & VGPU_GMMU_VALID ? -EEXIST : 0;
}

/* Free empty tables on @va's path, bottom up (never the root). */
static void prune(struct vf_gmmu *g, uint64_t va)
{
	struct vf_pt *path[4];
	int d = walk(g, va, path);

	for (; d > 0; d--) {
		struct vf_pt *pt = path[d], *parent = path[d - 1];
		unsigned int i = pt_index(parent, va);

		if (pt->used)
			break;
		pt_store(parent, i, 0);
		parent->child[i] = NULL;
		parent->used--;
		pt_release(g, pt, true);
	}
}

static int map_one(struct vf_gmmu *g, uint64_t va, uint64_t pte, uint64_t ps)
{
	struct vf_pt *pt = g->root;
	unsigned int stop = ps == VGPU_GMMU_PAGE_2M ? 2 : 3;
	int err;

	while (pt->level < stop) {
		unsigned int i = pt_index(pt, va);
		struct vf_pt *c = pt->child[i];

		if (!c) {
			bool small64 = pt->level == 2 && ps == VGPU_GMMU_PAGE_64K;

			c = pt_new(g, pt->level + 1u, small64, &err);
			if (!c)
				return err;
			pt->child[i] = c;
			pt->used++;
			pt_store(pt, i, small64 ? vgpu_gmmu_pde64k(c->pa) : vgpu_gmmu_pde(c->pa));
		}
		pt = c;
	}
	pt_store(pt, pt_index(pt, va), ps == VGPU_GMMU_PAGE_2M ? pte | VGPU_GMMU_LEAF : pte);
	pt->used++;
	return 0;
}

static void unmap_one(struct vf_gmmu *g, uint64_t va)
{
	struct vf_pt *path[4];
	int d = walk(g, va, path);
	struct vf_pt *pt = path[d];

	pt_store(pt, pt_index(pt, va), 0);
	pt->used--;
	prune(g, va);
}

int vf_gmmu_map(struct vf_gmmu *g, uint64_t va, uint64_t aper, uint64_t addr, uint64_t size,
		uint64_t page_size, uint64_t pte_flags)
{
	uint64_t off;
	int err = range_ok(va, addr, size, page_size);

	if (err)
		return err;
	if ((aper != VGPU_GMMU_APER_VRAM && aper != VGPU_GMMU_APER_SYS &&
	     aper != VGPU_GMMU_APER_SVA) ||
	    pte_flags & ~(VGPU_GMMU_RO | VGPU_GMMU_VOLATILE))
		return -EINVAL;
	for (off = 0; off < size; off += page_size) {
		err = check_free(g, va + off, page_size);
		if (err)
			return err;
	}
	for (off = 0; off < size; off += page_size) {
		err = map_one(g, va + off, vgpu_gmmu_pte(addr + off, aper | pte_flags), page_size);
		if (err)
			goto undo;
	}
	return 0;
undo:
	prune(g, va + off);	/* tables made for the page that failed */
	while (off) {
		off -= page_size;
		unmap_one(g, va + off);
	}
	return err;
}

int vf_gmmu_lookup(const struct vf_gmmu *g, uint64_t va, uint64_t *aper, uint64_t *addr,
		   uint64_t *page_size, uint64_t *pte)
{
	struct vf_pt *path[4];
	int d;
	struct vf_pt *pt;
	uint64_t e, ps;

	if (!g->root || va >= VGPU_GMMU_VA_LIMIT)
		return -ENOENT;
	d = walk(g, va, path);
	pt = path[d];
	if (pt->level < 2)
		return -ENOENT;
	e = pt_load(pt, pt_index(pt, va));
	if (!(e & VGPU_GMMU_VALID))
		return -ENOENT;
	if (pt->level == 2) {
		if (!(e & VGPU_GMMU_LEAF))
			return -ENOENT;
		ps = VGPU_GMMU_PAGE_2M;
	} else {
		ps = pt->pt64k ? VGPU_GMMU_PAGE_64K : VGPU_GMMU_PAGE_4K;
	}
	if (aper)
		*aper = e & VGPU_GMMU_APER_MASK;
	if (addr)
		*addr = (e & VGPU_GMMU_ADDR_MASK) + (va & (ps - 1));
	if (page_size)
		*page_size = ps;
	if (pte)
		*pte = e;
	return 0;
}

int vf_gmmu_unmap(struct vf_gmmu *g, uint64_t va, uint64_t size)
{
	uint64_t off, ps;

	if (!size || va % VGPU_GMMU_PAGE_4K || size % VGPU_GMMU_PAGE_4K ||
	    va >= VGPU_GMMU_VA_LIMIT || size > VGPU_GMMU_VA_LIMIT - va)
		return -EINVAL;
	/* First prove the whole range is whole pages, then clear: all or nothing. */
	for (off = 0; off < size; off += ps) {
		if (vf_gmmu_lookup(g, va + off, NULL, NULL, &ps, NULL))
			return -ENOENT;
		if ((va + off) & (ps - 1) || ps > size - off)
			return -EINVAL;
	}
	for (off = 0; off < size; off += ps) {
		vf_gmmu_lookup(g, va + off, NULL, NULL, &ps, NULL);
		unmap_one(g, va + off);
	}
	return 0;
}
