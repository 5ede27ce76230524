/* common/lock.h - a mutex that knows its owner, so internal functions can assert
 * that their caller holds it (the _locked convention), plus a tiny spinlock. */
#ifndef VGPU_COMMON_LOCK_H
#define VGPU_COMMON_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/clock.h"
#include "common/compiler.h"

struct cmn_mutex {
	pthread_mutex_t m;
	_Atomic(pthread_t) owner;	/* 0 when unlocked; for asserts only */
};

/* Initialise @mx; a zeroed mutex also needs this. */
static inline void cmn_mutex_init(struct cmn_mutex *mx)
{
	pthread_mutex_init(&mx->m, NULL);
	atomic_init(&mx->owner, (pthread_t)0);
}

static inline void cmn_mutex_destroy(struct cmn_mutex *mx)
{
	pthread_mutex_destroy(&mx->m);
}

static inline void cmn_mutex_lock(struct cmn_mutex *mx)
{
	pthread_mutex_lock(&mx->m);
	atomic_store_explicit(&mx->owner, pthread_self(), memory_order_relaxed);
}

static inline void cmn_mutex_unlock(struct cmn_mutex *mx)
{
	atomic_store_explicit(&mx->owner, (pthread_t)0, memory_order_relaxed);
	pthread_mutex_unlock(&mx->m);
}

/* True if the calling thread holds @mx. */
static inline bool cmn_mutex_held(struct cmn_mutex *mx)
{
	return pthread_equal(atomic_load_explicit(&mx->owner, memory_order_relaxed),
			     pthread_self());
}

#define cmn_mutex_assert_held(mx) VGPU_ASSERT(cmn_mutex_held(mx))

/* pthread_cond_wait on @mx, keeping its owner right across the wait. */
static inline void cmn_cond_wait(pthread_cond_t *cv, struct cmn_mutex *mx)
{
	atomic_store_explicit(&mx->owner, (pthread_t)0, memory_order_relaxed);
	pthread_cond_wait(cv, &mx->m);
	atomic_store_explicit(&mx->owner, pthread_self(), memory_order_relaxed);
}

/* pthread_cond_timedwait on @mx until @abstime; its return value (0 or ETIMEDOUT). */
static inline int cmn_cond_timedwait(pthread_cond_t *cv, struct cmn_mutex *mx,
				     const struct timespec *abstime)
{
	int ret;

	atomic_store_explicit(&mx->owner, (pthread_t)0, memory_order_relaxed);
	ret = pthread_cond_timedwait(cv, &mx->m, abstime);
	atomic_store_explicit(&mx->owner, pthread_self(), memory_order_relaxed);
	return ret;
}

/* Test-and-test-and-set spinlock for critical sections of a few dozen instructions. */
struct cmn_spinlock {
	atomic_bool locked;
};

static inline void cmn_spin_lock(struct cmn_spinlock *s)
{
	for (;;) {
		if (!atomic_exchange_explicit(&s->locked, true, memory_order_acquire))
			return;
		while (atomic_load_explicit(&s->locked, memory_order_relaxed))
			cmn_cpu_relax();
	}
}

static inline void cmn_spin_unlock(struct cmn_spinlock *s)
{
	atomic_store_explicit(&s->locked, false, memory_order_release);
}

#endif
