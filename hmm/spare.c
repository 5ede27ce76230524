// SPDX-License-Identifier: MIT
/* hmm/spare.c - the spare area: whole 2 MiB blocks of pages kept for migrations back to
 * system memory, and the thread that refills it.
 *
 * A migration back needs 512 pages to copy a block into. Fresh ones cost the kernel a
 * clear of 2 MiB first, on the migrating thread, which then writes every line again: the
 * way back ran at 65-75 % of memcpy where it found no kept block, and at the speed of the
 * way out where it did. Blocks come from migrations to the device (their pages, moved
 * whole), and from the filler: while migrations back leave fewer than HMM_SPARE_LOW full
 * blocks, it populates a plain 2 MiB area (the kernel clears it on the filler's CPU) and
 * moves the pages whole into an empty block, one block per block they took or missed. The area never holds more than HMM_SPARE_BLOCKS
 * blocks, so an mm holds at most that much memory beyond its own. The filler starts with
 * the first block asked for, only where two CPUs may run the process, and sleeps while
 * nothing is asked. Only with UFFDIO_MOVE (pages move in and out whole). */
#include <errno.h>
#include <sched.h>
#include <sys/mman.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

void hmm_spare_init(struct hmm_mm *mm)
{
	cmn_mutex_init(&mm->spare.lock);
	pthread_cond_init(&mm->spare.wake, NULL);
}

int hmm_spare_map(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;
	const size_t len = HMM_SPARE_BLOCKS * HMM_BLOCK_SIZE;

	if (!mm->has_move)
		return 0;
	sp->base = hmm_map_aligned(len);
	if (!sp->base)
		return -ENOMEM;
	return hmm_uffd_register(mm->uffd, (uintptr_t)sp->base, len, false);
}

void hmm_spare_stop(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;

	cmn_mutex_lock(&sp->lock);
	sp->stop = true;
	pthread_cond_signal(&sp->wake);
	cmn_mutex_unlock(&sp->lock);
	if (sp->running) {
		pthread_join(sp->thread, NULL);
		sp->running = false;
	}
}

void hmm_spare_fini(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;

	hmm_spare_stop(mm);
	if (sp->base)
		munmap(sp->base, HMM_SPARE_BLOCKS * HMM_BLOCK_SIZE);
	if (sp->scratch)
		munmap(sp->scratch, HMM_BLOCK_SIZE);
	pthread_cond_destroy(&sp->wake);
	cmn_mutex_destroy(&sp->lock);
}

char *hmm_spare_take(struct hmm_mm *mm, bool full)
{
	struct hmm_spare *sp = &mm->spare;
	char *blk = NULL;

	if (!sp->base)
		return NULL;
	cmn_mutex_lock(&sp->lock);
	uint64_t cand = (full ? sp->full : ~sp->full) & ~sp->busy &
			(VGPU_BIT(HMM_SPARE_BLOCKS) - 1);

	if (cand) {
		unsigned int b = cmn_ctz(cand);

		sp->busy |= VGPU_BIT(b);
		blk = sp->base + (size_t)b * HMM_BLOCK_SIZE;
	}
	cmn_mutex_unlock(&sp->lock);
	return blk;
}

void hmm_spare_put(struct hmm_mm *mm, char *blk, bool full)
{
	struct hmm_spare *sp = &mm->spare;
	unsigned int b = (unsigned int)((size_t)(blk - sp->base) / HMM_BLOCK_SIZE);

	cmn_mutex_lock(&sp->lock);
	VGPU_ASSERT(sp->busy & VGPU_BIT(b));
	sp->busy &= ~VGPU_BIT(b);
	if (full)
		sp->full |= VGPU_BIT(b);
	else
		sp->full &= ~VGPU_BIT(b);
	cmn_mutex_unlock(&sp->lock);
}

/* Fill one empty block with fresh pages: 0, -ENOENT if no block is empty, or -EIO if the
 * kernel refused (then the filler stops). */
static int spare_fill_one(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;
	char *blk = hmm_spare_take(mm, false);
	bool ok;

	if (!blk)
		return -ENOENT;
	ok = !madvise(sp->scratch, HMM_BLOCK_SIZE, MADV_POPULATE_WRITE) &&
	     hmm_uffd_move(mm->uffd, (uintptr_t)blk, (uintptr_t)sp->scratch, HMM_BLOCK_SIZE,
			   false) == (long)HMM_BLOCK_SIZE;
	if (!ok) {
		/* part of it may have moved: neither area keeps anything */
		madvise(blk, HMM_BLOCK_SIZE, MADV_DONTNEED);
		madvise(sp->scratch, HMM_BLOCK_SIZE, MADV_DONTNEED);
	}
	hmm_spare_put(mm, blk, ok);
	if (!ok)
		return -EIO;
	atomic_fetch_add_explicit(&sp->fills, 1, memory_order_relaxed);
	return 0;
}

static void *spare_filler_main(void *arg)
{
	struct hmm_mm *mm = arg;
	struct hmm_spare *sp = &mm->spare;

	cmn_mutex_lock(&sp->lock);
	for (;;) {
		while (!sp->asked && !sp->stop)
			cmn_cond_wait(&sp->wake, &sp->lock);
		if (sp->stop)
			break;
		sp->asked--;
		sp->filling = true;
		cmn_mutex_unlock(&sp->lock);
		int ret = spare_fill_one(mm);

		cmn_mutex_lock(&sp->lock);
		sp->filling = false;
		if (ret == -EIO) {
			sp->broken = true;
			sp->asked = 0;
		}
	}
	cmn_mutex_unlock(&sp->lock);
	return NULL;
}

/* Full blocks the filler keeps ready while migrations back take them: enough for the
 * blocks that come while it fills one. Fewer than the area holds, so that the pages the
 * next migration to the device gives up still find empty blocks (each block filled here
 * costs a clear of 2 MiB that a kept one does not). */
#define HMM_SPARE_LOW	8

/* Start the filler once, where it can run beside the migrating thread. Caller holds
 * sp->lock; true if it runs. */
static bool spare_filler_start_locked(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;

	cmn_mutex_assert_held(&sp->lock);
	if (sp->tried)
		return sp->running;
	sp->tried = true;
	if (sched_getaffinity(0, sizeof(sp->cpus), &sp->cpus) || CPU_COUNT(&sp->cpus) < 2)
		return false;
	sp->cpu_avoided = -1;
	sp->scratch = hmm_map_aligned(HMM_BLOCK_SIZE);
	if (!sp->scratch)
		return false;
	sp->running = !pthread_create(&sp->thread, NULL, spare_filler_main, mm);
	return sp->running;
}

unsigned int hmm_spare_pending(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;
	unsigned int n;

	cmn_mutex_lock(&sp->lock);
	n = sp->asked + sp->filling;
	cmn_mutex_unlock(&sp->lock);
	return n;
}

void hmm_spare_ask(struct hmm_mm *mm)
{
	struct hmm_spare *sp = &mm->spare;

	if (!sp->base)
		return;
	cmn_mutex_lock(&sp->lock);
	if (!sp->stop && !sp->broken &&
	    cmn_popcount(sp->full & ~sp->busy) + sp->asked + sp->filling <
		    HMM_SPARE_LOW &&
	    spare_filler_start_locked(mm)) {
		hmm_keep_off_caller_cpu(sp->thread, &sp->cpus, &sp->cpu_avoided);
		sp->asked++;
		pthread_cond_signal(&sp->wake);
	}
	cmn_mutex_unlock(&sp->lock);
}
