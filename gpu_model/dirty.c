// SPDX-License-Identifier: MIT
/* Dirty tracking of engine writes to VRAM: a bit per 4 KiB page of device VRAM, set with
 * an atomic OR per 64 pages, and only while a tracker is registered, so an engine copies at
 * full speed when nobody migrates. A collector takes and clears the bits with one atomic
 * exchange per word, so a write racing the collection is either taken now or left for the
 * next round, never lost. */
#include "gpu_model/gpu_internal.h"

void gpu_dirty_mark_slow(struct gpu *g, uint64_t off, uint64_t len)
{
	uint64_t first, last;

	if (!len || off >= g->vram_size)
		return;
	len = cmn_min(len, g->vram_size - off);
	first = off / GPU_DIRTY_PAGE;
	last = (off + len - 1) / GPU_DIRTY_PAGE;
	while (first <= last) {
		unsigned int bit = (unsigned int)(first % 64);
		uint64_t n = cmn_min(last - first + 1, (uint64_t)(64 - bit));
		uint64_t mask = (n == 64 ? ~0ull : ((1ull << n) - 1)) << bit;

		atomic_fetch_or_explicit(&g->dirty[first / 64], mask, memory_order_relaxed);
		first += n;
	}
}

void gpu_dirty_track(struct gpu *g, bool on)
{
	if (on)
		atomic_fetch_add(&g->dirty_users, 1);
	else if (atomic_load(&g->dirty_users))
		atomic_fetch_sub(&g->dirty_users, 1);
}

uint64_t gpu_dirty_collect(struct gpu *g, uint64_t off, uint64_t size, uint64_t *bits)
{
	uint64_t first, n, got = 0;

	if (off >= g->vram_size || off % GPU_DIRTY_PAGE)
		return 0;
	size = cmn_min(size, g->vram_size - off);
	first = off / GPU_DIRTY_PAGE;
	n = size / GPU_DIRTY_PAGE;
	for (uint64_t i = 0; i < n;) {
		uint64_t p = first + i, w = p / 64;
		unsigned int bit = (unsigned int)(p % 64);
		uint64_t k = cmn_min(n - i, (uint64_t)(64 - bit));
		uint64_t mask = (k == 64 ? ~0ull : ((1ull << k) - 1)) << bit;
		uint64_t v = mask == ~0ull ? atomic_exchange(&g->dirty[w], 0)
					   : atomic_fetch_and(&g->dirty[w], ~mask) & mask;

		v >>= bit;
		for (uint64_t j = 0; v; j++, v >>= 1) {
			if (v & 1) {
				bits[(i + j) / 64] |= 1ull << ((i + j) % 64);
				got++;
			}
		}
		i += k;
	}
	return got;
}
