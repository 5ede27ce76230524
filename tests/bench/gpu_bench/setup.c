// SPDX-License-Identifier: MIT
/* gpu_bench device setup: see setup.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/compiler.h"
#include "setup.h"

#define PB_BYTES (64u << 10)

static void die(const char *what)
{
	fprintf(stderr, "gpu_bench: %s\n", what);
	exit(1);
}

static void *ptr(struct bgpu *b, unsigned int fn, uint64_t pa, uint64_t len)
{
	void *p = gpu_fn_vram_ptr(b->g, fn, pa, len);

	if (!p)
		die("VRAM address outside the slice");
	return p;
}

static uint64_t table(struct bgpu *b, unsigned int fn)
{
	uint64_t pa = b->next_table[fn];

	b->next_table[fn] += VGPU_GMMU_TABLE_BYTES;
	if (b->next_table[fn] > B_TABLES)
		die("out of page-table space");
	return pa;
}

static uint64_t alloc(struct bgpu *b, unsigned int fn, uint64_t size)
{
	uint64_t pa = b->next_data[fn];

	b->next_data[fn] += cmn_align_up(size, VGPU_GMMU_PAGE_2M);
	if (b->next_data[fn] > b->slice)
		die("slice too small");
	return pa;
}

static uint64_t next_level(struct bgpu *b, unsigned int fn, uint64_t t, unsigned int idx, bool big)
{
	uint64_t *e = ptr(b, fn, t + idx * 8ull, 8);

	if (!(*e & VGPU_GMMU_VALID)) {
		uint64_t nt = table(b, fn);

		*e = big ? vgpu_gmmu_pde64k(nt) : vgpu_gmmu_pde(nt);
	}
	return *e & VGPU_GMMU_ADDR_MASK;
}

void bgpu_map(struct bgpu *b, unsigned int fn, uint64_t va, uint64_t addr, uint64_t size,
	      uint64_t page_size, uint64_t flags)
{
	for (uint64_t off = 0; off < size; off += page_size) {
		uint64_t v = va + off;
		uint64_t l1 = next_level(b, fn, b->pdb[fn], (v >> VGPU_GMMU_L0_SHIFT) & 511, false);
		uint64_t l2 = next_level(b, fn, l1, (v >> VGPU_GMMU_L1_SHIFT) & 511, false);
		unsigned int i2 = (v >> VGPU_GMMU_L2_SHIFT) & 511;
		uint64_t *pte;

		if (page_size == VGPU_GMMU_PAGE_2M) {
			pte = ptr(b, fn, l2 + i2 * 8ull, 8);
			*pte = vgpu_gmmu_pte2m(addr + off, flags);
			continue;
		}
		bool big = page_size == VGPU_GMMU_PAGE_64K;
		uint64_t l3 = next_level(b, fn, l2, i2, big);
		unsigned int i3 = big ? (v >> 16) & 31 : (v >> 12) & 511;

		pte = ptr(b, fn, l3 + i3 * 8ull, 8);
		*pte = vgpu_gmmu_pte(addr + off, flags);
	}
}

uint64_t bgpu_vmem(struct bgpu *b, unsigned int fn, uint64_t size, uint64_t page_size)
{
	uint64_t pa = alloc(b, fn, size);

	bgpu_map(b, fn, B_VA_BASE + pa, pa, cmn_align_up(size, page_size), page_size, 0);
	return B_VA_BASE + pa;
}

void *bgpu_va(struct bgpu *b, unsigned int fn, uint64_t va)
{
	return ptr(b, fn, va - B_VA_BASE, 1);
}

struct bgpu *bgpu_new(struct gpu_config *cfg, uint64_t slice_mib)
{
	struct bgpu *b = calloc(1, sizeof(*b));

	if (!b)
		die("out of memory");
	cfg->vram_size = (cfg->nr_vfs + 1) * slice_mib * VGPU_MiB;
	if (gpu_create(cfg, &b->g))
		die("gpu_create failed");
	b->p = gpu_priv_get(b->g);
	b->nr_fns = cfg->nr_vfs + 1;
	b->slice = slice_mib * VGPU_MiB;
	for (unsigned int fn = 0; fn < b->nr_fns; fn++) {
		if (gpu_priv_partition_set(b->p, fn, fn * b->slice, b->slice))
			die("partition");
		b->next_data[fn] = B_TABLES;
		b->pdb[fn] = table(b, fn);
	}
	return b;
}

void bgpu_free(struct bgpu *b)
{
	gpu_destroy(b->g);
	free(b);
}

void bchan_init(struct bgpu *b, struct bchan *c, unsigned int fn, unsigned int chid,
		unsigned int rl, uint32_t entries, bool resident)
{
	uint64_t bytes = 8192 + entries * 8ull + PB_BYTES, area = alloc(b, fn, bytes);
	struct gpu_priv_chan cfg;

	memset(c, 0, sizeof(*c));
	c->fn = fn;
	c->chid = chid;
	c->rl = rl;
	c->entries = entries;
	bgpu_map(b, fn, B_VA_BASE + area, area, cmn_align_up(bytes, VGPU_GMMU_PAGE_2M),
		 VGPU_GMMU_PAGE_2M, 0);
	c->userd = ptr(b, fn, area, sizeof(*c->userd));
	c->gp = ptr(b, fn, area + 4096, entries * 8ull);
	c->pb_va = B_VA_BASE + cmn_align_up(area + 4096 + entries * 8ull, 4096);
	c->pb = bgpu_va(b, fn, c->pb_va);
	cfg = (struct gpu_priv_chan){
		.runlist = rl, .pdb = b->pdb[fn], .gpfifo_va = B_VA_BASE + area + 4096,
		.gpfifo_entries = entries, .userd_aper = VGPU_APER_VRAM, .userd_addr = area,
	};
	if (gpu_priv_chan_alloc(b->p, fn, chid, &cfg) || gpu_priv_chan_enable(b->p, fn, chid, true))
		die("channel allocation");
	if (resident) {
		uint64_t mask = gpu_priv_shared(b->p)->fns[fn].runlist[rl];

		if (gpu_priv_runlist_set(b->p, fn, rl, mask | VGPU_BIT(chid)))
			die("runlist");
	}
}

uint32_t bchan_method(struct bchan *c, uint32_t id, const uint32_t *args, uint32_t n)
{
	uint32_t off = c->pb_off;

	if (off + 1 + n > PB_BYTES / 4)
		die("pushbuffer full");
	c->pb[c->pb_off++] = VGPU_MTHD(id, n);
	for (uint32_t i = 0; i < n; i++)
		c->pb[c->pb_off++] = args[i];
	return off;
}

bool bchan_drain(struct bchan *c)
{
	uint64_t dl = cmn_deadline_ns(10 * VGPU_NSEC_PER_SEC);

	while (bchan_get(c) != c->put) {
		if (__atomic_load_n(&c->userd->error, __ATOMIC_ACQUIRE) || cmn_deadline_passed(dl))
			return false;
		cmn_cpu_relax();
	}
	return true;
}
