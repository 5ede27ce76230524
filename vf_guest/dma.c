// SPDX-License-Identifier: MIT
/* The VF's DMA memory, handed out in 4 KiB pages: GPFIFO rings, pushbuffers, USERD,
 * semaphores and the user's system-memory buffers. The host RM is the only allocator of
 * that memory (ABI 2: MEMORY_SYSMEM says where in it an allocation lives), so this one
 * sub-allocates only what the RM gave it: 2 MiB chunks taken on demand (a smaller one when
 * no 2 MiB run is left), given back when empty (but one). Without a backing (a host without
 * an RM, or the unit tests) the whole memory is the driver's. A first-fit bitmap is
 * plenty for a few MiB handed out at channel creation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vf_guest/vf_internal.h"

#define SYS_GRAIN	(64ull << 10)	/* the RM's MEMORY_SYSMEM granule */

static bool bit_test(const uint64_t *bm, uint32_t i) { return bm[i / 64] >> (i % 64) & 1; }
static void bit_set(uint64_t *bm, uint32_t i) { bm[i / 64] |= 1ull << (i % 64); }
static void bit_clear(uint64_t *bm, uint32_t i) { bm[i / 64] &= ~(1ull << (i % 64)); }

int vf_dma_init(struct vf_dma *d, uint8_t *cpu, uint64_t size, uint64_t iova)
{
	memset(d, 0, sizeof(*d));
	d->cpu = cpu;
	d->size = size - size % VF_DMA_PAGE;
	d->iova = iova;
	d->npages = (uint32_t)(d->size / VF_DMA_PAGE);
	d->bitmap = calloc((d->npages + 63) / 64 + 1, sizeof(uint64_t));
	d->owned = calloc((d->npages + 63) / 64 + 1, sizeof(uint64_t));
	if (!d->bitmap || !d->owned) {
		free(d->bitmap);
		free(d->owned);
		d->bitmap = d->owned = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < d->npages; i++)
		bit_set(d->owned, i);
	d->owned_bytes = d->size;
	cmn_mutex_init(&d->lock);
	return 0;
}

void vf_dma_set_backing(struct vf_dma *d, vf_dma_grow_fn grow, vf_dma_put_fn put, void *ctx)
{
	cmn_mutex_lock(&d->lock);
	for (uint32_t i = 0; i < d->npages; i++)
		VGPU_ASSERT(!bit_test(d->bitmap, i));
	memset(d->owned, 0, ((d->npages + 63) / 64 + 1) * sizeof(uint64_t));
	d->owned_bytes = 0;
	d->grow = grow;
	d->put = put;
	d->grow_ctx = ctx;
	d->nr_chunks = 0;
	cmn_mutex_unlock(&d->lock);
}

void vf_dma_fini(struct vf_dma *d)
{
	if (!d->bitmap)
		return;
	free(d->bitmap);
	free(d->owned);
	d->bitmap = d->owned = NULL;
	cmn_mutex_destroy(&d->lock);
}

/* Pages [first, first+n) are the driver's and none is in use. */
static bool run_free(const struct vf_dma *d, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		if (bit_test(d->bitmap, i) || !bit_test(d->owned, i))
			return false;
	return true;
}

static void free_locked(struct vf_dma *d, uint64_t off, uint64_t size)
{
	uint32_t first = (uint32_t)(off / VF_DMA_PAGE);
	uint32_t n = (uint32_t)((size + VF_DMA_PAGE - 1) / VF_DMA_PAGE);

	cmn_mutex_assert_held(&d->lock);
	VGPU_ASSERT(off % VF_DMA_PAGE == 0 && first + n <= d->npages);
	for (uint32_t i = first; i < first + n; i++) {
		VGPU_ASSERT(bit_test(d->bitmap, i));
		bit_clear(d->bitmap, i);
	}
}

static int alloc_locked(struct vf_dma *d, uint32_t n, uint32_t step, uint64_t *off)
{
	cmn_mutex_assert_held(&d->lock);

	for (uint32_t i = 0; i + n <= d->npages; i += step) {
		if (!run_free(d, i, n))
			continue;
		for (uint32_t j = i; j < i + n; j++)
			bit_set(d->bitmap, j);
		*off = (uint64_t)i * VF_DMA_PAGE;
		return 0;
	}
	return -ENOMEM;
}

/* Take @size more bytes from the backing (lock not held: the backing calls the host). */
static int grow(struct vf_dma *d, uint64_t size)
{
	vf_dma_grow_fn fn;
	vf_dma_put_fn put;
	void *ctx;
	uint64_t off;
	uint32_t handle;
	int ret;

	cmn_mutex_lock(&d->lock);
	fn = d->nr_chunks < VF_DMA_MAX_CHUNKS ? d->grow : NULL;
	put = d->put;
	ctx = d->grow_ctx;
	ret = d->grow ? 0 : 1;
	cmn_mutex_unlock(&d->lock);
	if (ret)
		return 0;	/* another thread adopted the whole memory meanwhile */
	if (!fn)
		return -ENOMEM;	/* as many chunks as we track */
	ret = fn(ctx, size, &off, &handle);
	if (ret)
		return ret;
	cmn_mutex_lock(&d->lock);
	/* Host input: the RM hands each byte out once, inside the memory. A piece that is not
	 * (or that we own already) goes back unused. */
	bool bad = off % VF_DMA_PAGE || off > d->size || size > d->size - off;

	for (uint64_t i = off / VF_DMA_PAGE; !bad && i < (off + size) / VF_DMA_PAGE; i++)
		bad = bit_test(d->owned, (uint32_t)i);
	if (bad) {
		cmn_mutex_unlock(&d->lock);
		if (put)
			put(ctx, handle);
		return -EPROTO;
	}
	for (uint64_t i = off / VF_DMA_PAGE; i < (off + size) / VF_DMA_PAGE; i++)
		bit_set(d->owned, (uint32_t)i);
	d->owned_bytes += size;
	d->chunks[d->nr_chunks++] = (struct vf_dma_chunk){ off, size, handle };
	cmn_mutex_unlock(&d->lock);
	return 0;
}

static bool chunk_empty(const struct vf_dma *d, const struct vf_dma_chunk *c)
{
	for (uint64_t i = c->off / VF_DMA_PAGE; i < (c->off + c->size) / VF_DMA_PAGE; i++)
		if (bit_test(d->bitmap, (uint32_t)i))
			return false;
	return true;
}

/* Give empty chunks back to the RM but one (kept for the next allocation, so a channel
 * made and freed in a loop does not cost two RM calls each time). */
static void release_empty(struct vf_dma *d)
{
	uint32_t give[VF_DMA_MAX_CHUNKS], n = 0, j = 0;
	bool kept = false;
	vf_dma_put_fn put;
	void *ctx;

	cmn_mutex_lock(&d->lock);
	put = d->put;
	ctx = d->grow_ctx;
	for (uint32_t i = 0; i < d->nr_chunks; i++) {
		struct vf_dma_chunk *c = &d->chunks[i];

		if (!put || !chunk_empty(d, c) || !kept) {
			kept |= put && chunk_empty(d, c);
			d->chunks[j++] = *c;
			continue;
		}
		for (uint64_t k = c->off / VF_DMA_PAGE; k < (c->off + c->size) / VF_DMA_PAGE; k++)
			bit_clear(d->owned, (uint32_t)k);
		d->owned_bytes -= c->size;
		give[n++] = c->handle;
	}
	d->nr_chunks = j;
	cmn_mutex_unlock(&d->lock);
	for (uint32_t i = 0; i < n; i++)
		put(ctx, give[i]);
}

/* The host's RM has no system-memory allocator (MEMORY_SYSMEM unsupported, or no DMA memory
 * given to it): no one else can hand this memory out, so all of it is the driver's. */
static int adopt_all(struct vf_dma *d)
{
	cmn_mutex_lock(&d->lock);
	for (uint32_t i = 0; i < d->npages; i++)
		bit_set(d->owned, i);
	d->owned_bytes = d->size;
	d->grow = NULL;
	d->put = NULL;
	cmn_mutex_unlock(&d->lock);
	return 0;
}

/* Out of owned memory for @n pages aligned to @align: a chunk, else just enough, else enough
 * to align. A chunk refused for space or quota is no failure yet; what the caller gets is
 * the answer to the smallest request (-ENOMEM "no space", -VGPU_EQUOTA the function's quota and
 * -EDQUOT the guest kernel driver's per-file quota stay distinct). */
static int grow_for(struct vf_dma *d, uint64_t n, uint64_t align)
{
	uint64_t need = (n * VF_DMA_PAGE + SYS_GRAIN - 1) / SYS_GRAIN * SYS_GRAIN;
	uint64_t slack = need + (align > SYS_GRAIN ? align - SYS_GRAIN : 0);
	uint64_t tries[3] = { cmn_max(need, (uint64_t)VF_DMA_CHUNK), need, slack };
	int ret, err = -ENOMEM;

	for (int i = 0; i < 3; i++) {
		if (tries[i] > d->size || (i && tries[i] == tries[i - 1]))
			continue;
		ret = grow(d, tries[i]);
		if (ret == -EOPNOTSUPP || ret == -ENODEV)
			return adopt_all(d);
		if (ret != -ENOMEM && ret != -VGPU_EQUOTA && ret != -EDQUOT)
			return ret;
		if (tries[i] == need)
			err = ret;
	}
	return err;
}

/* One attempt; *@can_grow says whether a backing could give more. */
static int alloc_try(struct vf_dma *d, uint32_t n, uint32_t step, uint64_t *off, bool *can_grow)
{
	int ret;

	cmn_mutex_lock(&d->lock);
	ret = alloc_locked(d, n, step, off);
	*can_grow = d->grow != NULL;
	cmn_mutex_unlock(&d->lock);
	return ret;
}

int vf_dma_alloc(struct vf_dma *d, uint64_t size, uint64_t align, uint64_t *off)
{
	uint64_t n64 = (size + VF_DMA_PAGE - 1) / VF_DMA_PAGE;
	uint64_t off64 = 0;
	uint32_t n, step;
	bool can_grow;
	int ret, gret = 0;

	if (!size || align < VF_DMA_PAGE || (align & (align - 1)) || n64 > d->npages)
		return size && n64 > d->npages ? -ENOMEM : -EINVAL;
	n = (uint32_t)n64;
	step = (uint32_t)cmn_min(align / VF_DMA_PAGE, (uint64_t)d->npages);
	ret = alloc_try(d, n, step, &off64, &can_grow);
	if (ret && can_grow) {
		gret = grow_for(d, n64, align);
		if (!gret)
			ret = alloc_try(d, n, step, &off64, &can_grow);
	}
	if (!ret)
		*off = off64;
	/* "Over quota" stays distinct from "no space". */
	return ret && gret && gret != -ENOMEM ? gret : ret;
}

void vf_dma_free(struct vf_dma *d, uint64_t off, uint64_t size)
{
	cmn_mutex_lock(&d->lock);
	free_locked(d, off, size);
	cmn_mutex_unlock(&d->lock);
	release_empty(d);
}
