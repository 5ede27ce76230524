/* SPDX-License-Identifier: MIT */
/* gpu_bench: a device with one slice per function, page tables built by the bench (acting
 * as guest) and channels whose GPFIFO, pushbuffer and USERD live in the function's VRAM. */
#ifndef VGPU_GPU_BENCH_SETUP_H
#define VGPU_GPU_BENCH_SETUP_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu_model/gpu.h"

#define B_VA_BASE	0x100000000ull
#define B_TABLES	(2ull << 20)

struct bgpu {
	struct gpu *g;
	struct gpu_priv *p;
	unsigned int nr_fns;
	uint64_t slice;
	uint64_t next_table[GPU_MAX_FNS], next_data[GPU_MAX_FNS], pdb[GPU_MAX_FNS];
};

struct bchan {
	unsigned int fn, chid, rl;
	uint32_t entries, put;
	uint64_t *gp;
	struct vgpu_userd *userd;
	uint32_t *pb;
	uint64_t pb_va;
	uint32_t pb_off;
};

/* Create a device with @nr_vfs VFs, a @slice_mib slice each, and @cfg's other fields. */
struct bgpu *bgpu_new(struct gpu_config *cfg, uint64_t slice_mib);
void bgpu_free(struct bgpu *b);
/* Map @size bytes of fresh VRAM with @page_size pages; returns the VA. */
uint64_t bgpu_vmem(struct bgpu *b, unsigned int fn, uint64_t size, uint64_t page_size);
/* Map [va, va+size) to @addr (VRAM pa or IOVA) with @page_size pages and PTE @flags. */
void bgpu_map(struct bgpu *b, unsigned int fn, uint64_t va, uint64_t addr, uint64_t size,
	      uint64_t page_size, uint64_t flags);
/* Host pointer of a bgpu_vmem() VA. */
void *bgpu_va(struct bgpu *b, unsigned int fn, uint64_t va);
/* Channel with @entries GP slots; @resident puts it in its runlist. */
void bchan_init(struct bgpu *b, struct bchan *c, unsigned int fn, unsigned int chid,
		unsigned int rl, uint32_t entries, bool resident);
/* Append a method to the pushbuffer; returns its dword offset. */
uint32_t bchan_method(struct bchan *c, uint32_t id, const uint32_t *args, uint32_t n);
/* Queue a GP entry for pushbuffer dwords [off, off+ndw). */
static inline void bchan_gp(struct bchan *c, uint32_t off, uint32_t ndw)
{
	c->gp[c->put] = vgpu_gp_entry(c->pb_va + off * 4ull, ndw);
	c->put = (c->put + 1) & (c->entries - 1);
}
/* Publish GP_PUT and ring. */
static inline void bchan_kick(struct bgpu *b, struct bchan *c)
{
	__atomic_store_n(&c->userd->gp_put, c->put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(b->g, c->fn, vgpu_token(c->rl, c->chid));
}
static inline uint32_t bchan_get(const struct bchan *c)
{
	return __atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE);
}
/* Spin until GP_GET reaches put; false on a channel error or after 10 s. */
bool bchan_drain(struct bchan *c);

#endif
