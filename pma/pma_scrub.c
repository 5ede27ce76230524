// SPDX-License-Identifier: MIT
/* Scrub-on-free worker: freed ranges wait in a queue, a thread zeroes them through the
 * scrubber callback and then makes them allocatable. The queue lock (wait_lock) may be taken
 * inside the allocator lock, never the other way round. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "pma/pma_internal.h"

static int scrub_default(struct pma *pma, uint64_t addr, uint64_t size)
{
	if (pma->cfg.backing)
		memset((uint8_t *)pma->cfg.backing + addr, 0, size);
	return 0;
}

static void *scrub_worker(void *arg)
{
	struct pma *pma = arg;

	cmn_mutex_lock(&pma->wait_lock);
	for (;;) {
		struct pma_scrub_req req;
		int ret;

		while (!pma->scrub_q_len && !pma->scrub_stop)
			cmn_cond_wait(&pma->wait_cond, &pma->wait_lock);
		if (!pma->scrub_q_len)
			break;
		req = pma->scrub_q[--pma->scrub_q_len];
		pma->scrub_busy++;
		cmn_mutex_unlock(&pma->wait_lock);

		ret = pma->cfg.scrub ? pma->cfg.scrub(pma->cfg.scrub_ctx, req.addr, req.size)
				     : scrub_default(pma, req.addr, req.size);
		if (ret) {
			cmn_warn("pma: scrub of [0x%llx, +0x%llx) failed: %d; frames stay SCRUBBING",
				  (unsigned long long)req.addr, (unsigned long long)req.size, ret);
		} else {
			pma_lock(pma);
			pma_scrub_complete_locked(pma, req.addr, req.size);
			pma_unlock(pma);
		}

		cmn_mutex_lock(&pma->wait_lock);
		pma->scrub_busy--;
		pthread_cond_broadcast(&pma->wait_cond);
	}
	cmn_mutex_unlock(&pma->wait_lock);
	return NULL;
}

int pma_scrub_start(struct pma *pma)
{
	if (pthread_create(&pma->scrub_thread, NULL, scrub_worker, pma))
		return -EAGAIN;
	pma->scrub_thread_running = true;
	return 0;
}

void pma_scrub_stop(struct pma *pma)
{
	if (!pma->scrub_thread_running)
		return;
	cmn_mutex_lock(&pma->wait_lock);
	pma->scrub_stop = true;
	pthread_cond_broadcast(&pma->wait_cond);
	cmn_mutex_unlock(&pma->wait_lock);
	pthread_join(pma->scrub_thread, NULL);
	pma->scrub_thread_running = false;
}

void pma_scrub_submit(struct pma *pma, uint64_t addr, uint64_t size)
{
	cmn_mutex_lock(&pma->wait_lock);
	if (pma->scrub_q_len == pma->scrub_q_cap) {
		size_t cap = pma->scrub_q_cap ? 2 * pma->scrub_q_cap : 64;
		struct pma_scrub_req *q = realloc(pma->scrub_q, cap * sizeof(*q));

		if (!q) {
			/* Out of memory: the frames stay SCRUBBING (safe, never handed out dirty). */
			cmn_mutex_unlock(&pma->wait_lock);
			cmn_err("pma: scrub queue full, [0x%llx, +0x%llx) left unscrubbed",
				 (unsigned long long)addr, (unsigned long long)size);
			return;
		}
		pma->scrub_q = q;
		pma->scrub_q_cap = cap;
	}
	pma->scrub_q[pma->scrub_q_len++] = (struct pma_scrub_req){ addr, size };
	pthread_cond_broadcast(&pma->wait_cond);
	cmn_mutex_unlock(&pma->wait_lock);
}

void pma_scrub_wait(struct pma *pma)
{
	if (!pma || !pma->scrub_thread_running)
		return;
	cmn_mutex_lock(&pma->wait_lock);
	while (pma->scrub_q_len || pma->scrub_busy)
		cmn_cond_wait(&pma->wait_cond, &pma->wait_lock);
	cmn_mutex_unlock(&pma->wait_lock);
}
/* --- completion (the worker, or the owner when it scrubs itself) --- */

int pma_scrub_complete_locked(struct pma *pma, uint64_t addr, uint64_t size)
{
	struct pma_opargs args = { 0 };
	struct pma_region *r;

	pma_assert_locked(pma);
	r = pma_region_span(pma, addr >> PMA_FRAME_SHIFT, size >> PMA_FRAME_SHIFT);
	if (!r)
		return -EINVAL;
	pma_range_apply(r, (addr >> PMA_FRAME_SHIFT) - r->first, size >> PMA_FRAME_SHIFT,
			PMA_OP_SCRUBBED, &args);
	pma_publish_stats_locked(pma);
	return 0;
}

int pma_scrub_complete(struct pma *pma, uint64_t addr, uint64_t size)
{
	int ret;

	if (!pma || !size || (addr | size) & (PMA_FRAME_SIZE - 1))
		return -EINVAL;
	pma_lock(pma);
	ret = pma_scrub_complete_locked(pma, addr, size);
	pma_unlock(pma);
	return ret;
}
