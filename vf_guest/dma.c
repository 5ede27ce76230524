/* The VF's DMA memory, handed out in 4 KiB pages: GPFIFO rings, pushbuffers, USERD,
 * semaphores and the user's system-memory buffers. The guest owns this memory outright (it
 * is its side of BAR2), so this allocator needs no host call; a first-fit bitmap is plenty
 * for a few MiB handed out at channel creation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "vf_guest/vf_internal.h"

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
	if (!d->bitmap)
		return -ENOMEM;
	pthread_mutex_init(&d->lock, NULL);
	return 0;
}

void vf_dma_fini(struct vf_dma *d)
{
	if (!d->bitmap)
		return;
	d->nq = 0;
	free(d->bitmap);
	d->bitmap = NULL;
	pthread_mutex_destroy(&d->lock);
}

static bool run_free(const struct vf_dma *d, uint32_t first, uint32_t n)
{
	for (uint32_t i = first; i < first + n; i++)
		if (bit_test(d->bitmap, i))
			return false;
	return true;
}

static void free_locked(struct vf_dma *d, uint64_t off, uint64_t size)
{
	uint32_t first = (uint32_t)(off / VF_DMA_PAGE);
	uint32_t n = (uint32_t)((size + VF_DMA_PAGE - 1) / VF_DMA_PAGE);

	VGPU_ASSERT(off % VF_DMA_PAGE == 0 && first + n <= d->npages);
	for (uint32_t i = first; i < first + n; i++) {
		VGPU_ASSERT(bit_test(d->bitmap, i));
		bit_clear(d->bitmap, i);
	}
}

/* Release quarantined blocks older than the grace period (all of them if @all). */
static void reclaim_locked(struct vf_dma *d, bool all)
{
	uint64_t now = vgpu_now_ns();
	uint32_t j = 0;

	for (uint32_t i = 0; i < d->nq; i++) {
		if (all || now - d->q[i].since_ns >= VF_DMA_GRACE_NS)
			free_locked(d, d->q[i].off, d->q[i].size);
		else
			d->q[j++] = d->q[i];
	}
	d->nq = j;
}

static int alloc_locked(struct vf_dma *d, uint32_t n, uint32_t step, uint64_t *off)
{
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

int vf_dma_alloc(struct vf_dma *d, uint64_t size, uint64_t align, uint64_t *off)
{
	uint64_t n64 = (size + VF_DMA_PAGE - 1) / VF_DMA_PAGE;
	uint64_t off64 = 0;
	uint32_t n, step;
	int ret;

	if (!size || align < VF_DMA_PAGE || (align & (align - 1)) || n64 > d->npages)
		return size && n64 > d->npages ? -ENOMEM : -EINVAL;
	n = (uint32_t)n64;
	step = (uint32_t)vgpu_min(align / VF_DMA_PAGE, (uint64_t)d->npages);
	pthread_mutex_lock(&d->lock);
	reclaim_locked(d, false);
	ret = alloc_locked(d, n, step, &off64);
	if (ret && d->nq) {
		/* Out of memory with blocks in quarantine: let their grace run out. */
		pthread_mutex_unlock(&d->lock);
		struct timespec ts = { 0, (long)VF_DMA_GRACE_NS };
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&d->lock);
		reclaim_locked(d, true);
		ret = alloc_locked(d, n, step, &off64);
	}
	pthread_mutex_unlock(&d->lock);
	if (!ret)
		*off = off64;
	return ret;
}

void vf_dma_free_deferred(struct vf_dma *d, uint64_t off, uint64_t size)
{
	pthread_mutex_lock(&d->lock);
	if (d->nq == VF_DMA_QUARANTINE)
		reclaim_locked(d, true);	/* full: the oldest have had the most time */
	d->q[d->nq++] = (struct vf_dma_quarantined){ off, size, vgpu_now_ns() };
	pthread_mutex_unlock(&d->lock);
}

void vf_dma_free(struct vf_dma *d, uint64_t off, uint64_t size)
{
	pthread_mutex_lock(&d->lock);
	free_locked(d, off, size);
	pthread_mutex_unlock(&d->lock);
}
