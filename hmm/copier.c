// SPDX-License-Identifier: MIT
/* hmm/copier.c - a second thread for the large UFFDIO_COPY of a migration back to system
 * memory without UFFDIO_MOVE.
 *
 * There every page of the way back goes through UFFDIO_COPY: the kernel allocates,
 * copies, charges and maps it, about twice what a memcpy of the page costs, and none of
 * it can be batched from user space. Two UFFDIO_COPY calls into one range run side by
 * side, each about as fast as alone (the page-table lock is held only to set each PTE),
 * so a run of pages is cut into pieces that the migrating thread takes from the front and
 * this thread from the back. The migrating thread never waits for this one to start: if
 * it is asleep or not scheduled, the caller copies every piece itself, and at the end
 * waits only for a piece this thread is in the middle of. The thread starts with the
 * first such copy of an mm, only where two CPUs may run the process. */
#include <errno.h>
#include <sched.h>

#include "common/log.h"
#include "hmm/hmm_internal.h"

#define COPIER_PIECE	(128 * VGPU_KiB)	/* ~40 us: a caller's wait while the thread runs */
#define COPIER_MIN	(2 * COPIER_PIECE)	/* shorter runs are not worth a hand-off */

/* UFFDIO_COPY all of [dst, dst + len) (hmm_uffd_copy steps over a page already there);
 * after a page the kernel refused, once more from it, for the reason. 0 or -errno: the
 * caller finds the pages that got in in the page tables. */
static int copy_whole(int uffd, uintptr_t dst, const char *src, size_t len)
{
	while (len) {
		long done = hmm_uffd_copy(uffd, dst, src, len, false);

		if (done < 0)
			return (int)done;
		dst += (size_t)done;
		src += done;
		len -= (size_t)done;
	}
	return 0;
}

/* Take the next piece, from the back for the thread: false when none is left. */
static bool claim_locked(struct hmm_copier *c, bool from_back, size_t *piece)
{
	cmn_mutex_assert_held(&c->lock);
	if (c->lo >= c->hi)
		return false;
	*piece = from_back ? --c->hi : c->lo++;
	return true;
}

/* Copy piece @i of the job; its first error is kept for the caller. Returns the pages
 * copied. */
static size_t copy_piece(struct hmm_copier *c, int uffd, uintptr_t dst, const char *src,
			 size_t len, size_t i)
{
	size_t off = i * COPIER_PIECE, n = cmn_min(COPIER_PIECE, len - off);
	int ret = copy_whole(uffd, dst + off, src + off, n);

	if (!ret)
		return n >> HMM_PAGE_SHIFT;
	cmn_mutex_lock(&c->lock);
	if (!c->err)
		c->err = ret;
	cmn_mutex_unlock(&c->lock);
	return 0;
}

/* Thread side: pieces from the back until none is left. */
static void copier_help(struct hmm_copier *c)
{
	for (;;) {
		uintptr_t dst;
		const char *src;
		size_t len, i;
		int uffd;

		cmn_mutex_lock(&c->lock);
		if (!claim_locked(c, true, &i)) {
			cmn_mutex_unlock(&c->lock);
			return;
		}
		/* counted before the lock drops: the caller waits for it */
		atomic_fetch_add(&c->busy, 1);
		uffd = c->uffd;
		dst = c->dst;
		src = c->src;
		len = c->len;
		cmn_mutex_unlock(&c->lock);
		atomic_fetch_add_explicit(&c->pages, copy_piece(c, uffd, dst, src, len, i),
					  memory_order_relaxed);
		atomic_fetch_sub_explicit(&c->busy, 1, memory_order_release);
	}
}

/* Sleep until a job after @seen; false when told to stop. The thread does not poll:
 * a caller never waits for it to start, so a late start costs only its share of the
 * pieces, while polling would take CPU time from the callers on a busy machine. */
static bool copier_wait(struct hmm_copier *c, uint64_t *seen)
{
	bool stop;

	cmn_mutex_lock(&c->lock);
	while (c->gen == *seen && !c->stop) {
		c->sleeping = true;
		cmn_cond_wait(&c->wake, &c->lock);
		c->sleeping = false;
	}
	*seen = c->gen;
	stop = c->stop;
	cmn_mutex_unlock(&c->lock);
	return !stop;
}

static void *copier_main(void *arg)
{
	struct hmm_copier *c = arg;
	uint64_t seen = 0;

	while (copier_wait(c, &seen))
		copier_help(c);
	return NULL;
}

/* Two CPUs or more that this process may run on (kept in c->cpus). */
static bool copier_worth_it(struct hmm_copier *c)
{
	return !sched_getaffinity(0, sizeof(c->cpus), &c->cpus) && CPU_COUNT(&c->cpus) >= 2;
}

/* Woken on a busy machine, the scheduler would place a helper thread beside its waker,
 * and the two would take turns on one CPU instead of working at once (measured: no gain
 * at load 3 on two CPUs until the copier ran elsewhere). One system call when the caller
 * has moved since the last time. */
void hmm_keep_off_caller_cpu(pthread_t th, const cpu_set_t *cpus, int *cpu_avoided)
{
	int cpu = sched_getcpu();
	cpu_set_t set;

	if (cpu < 0 || cpu == *cpu_avoided || !CPU_ISSET(cpu, cpus))
		return;
	set = *cpus;
	CPU_CLR(cpu, &set);
	if (!pthread_setaffinity_np(th, sizeof(set), &set))
		*cpu_avoided = cpu;
}

void hmm_copier_init(struct hmm_copier *c)
{
	cmn_mutex_init(&c->lock);
	cmn_mutex_init(&c->user);
	pthread_cond_init(&c->wake, NULL);
}

/* Start the thread once; true if it runs. Caller holds c->user. */
static bool copier_start(struct hmm_copier *c)
{
	if (c->state == HMM_COPIER_IDLE) {
		c->state = HMM_COPIER_OFF;
		c->cpu_avoided = -1;
		if (copier_worth_it(c) && !pthread_create(&c->thread, NULL, copier_main, c))
			c->state = HMM_COPIER_RUNNING;
	}
	return c->state == HMM_COPIER_RUNNING;
}

void hmm_copier_fini(struct hmm_copier *c)
{
	if (c->state == HMM_COPIER_RUNNING) {
		cmn_mutex_lock(&c->lock);
		c->stop = true;
		pthread_cond_signal(&c->wake);
		cmn_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
	}
	pthread_cond_destroy(&c->wake);
	cmn_mutex_destroy(&c->user);
	cmn_mutex_destroy(&c->lock);
}

/* Publish the job: pieces [0, n) of [dst, dst + len) from @src. */
static void copier_post(struct hmm_copier *c, int uffd, uintptr_t dst, const char *src,
			size_t len)
{
	cmn_mutex_lock(&c->lock);
	c->uffd = uffd;
	c->dst = dst;
	c->src = src;
	c->len = len;
	c->lo = 0;
	c->hi = (len + COPIER_PIECE - 1) / COPIER_PIECE;
	c->err = 0;
	c->gen++;
	if (c->sleeping)
		pthread_cond_signal(&c->wake);
	cmn_mutex_unlock(&c->lock);
}

int hmm_copier_copy(struct hmm_mm *mm, uintptr_t dst, const void *src, size_t len)
{
	struct hmm_copier *c = &mm->copier;
	unsigned int spins = 0;
	size_t i;
	int ret;

	/* a second migration at the same time copies alone: the CPUs are busy anyway */
	if (len < COPIER_MIN || !cmn_mutex_trylock(&c->user))
		return copy_whole(mm->uffd, dst, src, len);
	if (!copier_start(c)) {
		cmn_mutex_unlock(&c->user);
		return copy_whole(mm->uffd, dst, src, len);
	}
	hmm_keep_off_caller_cpu(c->thread, &c->cpus, &c->cpu_avoided);	/* c->user held */
	copier_post(c, mm->uffd, dst, src, len);
	for (;;) {
		hmm_race_window(HMM_RACE_COPIER_PIECE, dst);
		cmn_mutex_lock(&c->lock);
		bool more = claim_locked(c, false, &i);

		cmn_mutex_unlock(&c->lock);
		if (!more)
			break;
		copy_piece(c, mm->uffd, dst, src, len, i);
	}
	/* no piece is left to claim: only one the thread took can still be in flight */
	while (atomic_load_explicit(&c->busy, memory_order_acquire))
		hmm_relax(&spins);
	cmn_mutex_lock(&c->lock);
	ret = c->err;
	cmn_mutex_unlock(&c->lock);
	cmn_mutex_unlock(&c->user);
	return ret;
}
