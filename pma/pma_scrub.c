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

	pthread_mutex_lock(&pma->wait_lock);
	for (;;) {
		struct pma_scrub_req req;
		int ret;

		while (!pma->scrub_q_len && !pma->scrub_stop)
			pthread_cond_wait(&pma->wait_cond, &pma->wait_lock);
		if (!pma->scrub_q_len)
			break;
		req = pma->scrub_q[--pma->scrub_q_len];
		pma->scrub_busy++;
		pthread_mutex_unlock(&pma->wait_lock);

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

		pthread_mutex_lock(&pma->wait_lock);
		pma->scrub_busy--;
		pthread_cond_broadcast(&pma->wait_cond);
	}
	pthread_mutex_unlock(&pma->wait_lock);
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
	pthread_mutex_lock(&pma->wait_lock);
	pma->scrub_stop = true;
	pthread_cond_broadcast(&pma->wait_cond);
	pthread_mutex_unlock(&pma->wait_lock);
	pthread_join(pma->scrub_thread, NULL);
	pma->scrub_thread_running = false;
}

void pma_scrub_submit(struct pma *pma, uint64_t addr, uint64_t size)
{
	pthread_mutex_lock(&pma->wait_lock);
	if (pma->scrub_q_len == pma->scrub_q_cap) {
		size_t cap = pma->scrub_q_cap ? 2 * pma->scrub_q_cap : 64;
		struct pma_scrub_req *q = realloc(pma->scrub_q, cap * sizeof(*q));

		if (!q) {
			/* Out of memory: the frames stay SCRUBBING (safe, never handed out dirty). */
			pthread_mutex_unlock(&pma->wait_lock);
			cmn_err("pma: scrub queue full, [0x%llx, +0x%llx) left unscrubbed",
				 (unsigned long long)addr, (unsigned long long)size);
			return;
		}
		pma->scrub_q = q;
		pma->scrub_q_cap = cap;
	}
	pma->scrub_q[pma->scrub_q_len++] = (struct pma_scrub_req){ addr, size };
	pthread_cond_broadcast(&pma->wait_cond);
	pthread_mutex_unlock(&pma->wait_lock);
}

void pma_scrub_wait(struct pma *pma)
{
	if (!pma || !pma->scrub_thread_running)
		return;
	pthread_mutex_lock(&pma->wait_lock);
	while (pma->scrub_q_len || pma->scrub_busy)
		pthread_cond_wait(&pma->wait_cond, &pma->wait_lock);
	pthread_mutex_unlock(&pma->wait_lock);
}
