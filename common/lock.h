/* SPDX-License-Identifier: MIT */
/* common/lock.h - a mutex that knows its owner, so internal functions can assert
 * that their caller holds it (the _locked convention), plus a tiny spinlock.
 *
 * Every mutex belongs to a lock class: all mutexes initialised at one place share one.
 * Builds with CMN_LOCKDEP (the sanitizer builds) validate lock order on every
 * acquisition: the first time class B is taken while A is held, A -> B is learned; a
 * later B -> A anywhere is reported (the ABBA deadlock it stands for may never show in a
 * test run). Release builds pay nothing for it. */
#ifndef VGPU_COMMON_LOCK_H
#define VGPU_COMMON_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/clock.h"
#include "common/compiler.h"

/* The validator's view of the mutexes initialised at one place. */
struct cmn_lock_class {
	const char *name;
	_Atomic unsigned int id;	/* assigned by the validator on first use */
};

struct cmn_mutex {
	pthread_mutex_t m;
	_Atomic(pthread_t) owner;	/* 0 when unlocked; for asserts only */
	struct cmn_lock_class *cls;	/* NULL: not validated */
};

/* Record that the calling thread takes a lock of @cls (validates the order first). */
void cmn_lockdep_acquire(struct cmn_lock_class *cls);
/* Record that the calling thread took a lock of @cls by trylock (learns no order). */
void cmn_lockdep_acquire_try(struct cmn_lock_class *cls);
/* Record that the calling thread released a lock of @cls. */
void cmn_lockdep_release(struct cmn_lock_class *cls);
/* Route order violations to @fn (tests); NULL restores the default: log and abort. */
void cmn_lockdep_set_handler(void (*fn)(const char *what));
/* Report an order violation @what (also other validators' such as rm's ranks). */
void cmn_lockdep_report(const char *what);

/* Initialise @mx as a member of @cls. */
static inline void cmn_mutex_init_class(struct cmn_mutex *mx, struct cmn_lock_class *cls)
{
	pthread_mutex_init(&mx->m, NULL);
	atomic_init(&mx->owner, (pthread_t)0);
	mx->cls = cls;
}

#define CMN_STR_(x) #x
#define CMN_STR(x) CMN_STR_(x)

/* Initialise @mx (a zeroed mutex also needs this); its class is this call site. */
#define cmn_mutex_init(mx)                                                          \
	do {                                                                        \
		static struct cmn_lock_class cmn_lock_class_ = {                    \
			.name = #mx " (" __FILE__ ":" CMN_STR(__LINE__) ")" };      \
		cmn_mutex_init_class((mx), &cmn_lock_class_);                       \
	} while (0)

/* Initialiser for a file-scope mutex named @nm (its class is a file-scope literal). */
#define CMN_MUTEX_INITIALIZER(nm)                                                   \
	{ .m = PTHREAD_MUTEX_INITIALIZER, .owner = 0,                               \
	  .cls = &(struct cmn_lock_class){ .name = nm } }

#ifdef CMN_LOCKDEP
#define cmn_lockdep_on(mx) ((mx)->cls != NULL)
#else
#define cmn_lockdep_on(mx) false
#endif

/* Destroy @mx, which nobody holds. */
static inline void cmn_mutex_destroy(struct cmn_mutex *mx)
{
	pthread_mutex_destroy(&mx->m);
}

/* Take @mx, checked against the lock order when it has a class; records the owner. */
static inline void cmn_mutex_lock(struct cmn_mutex *mx)
{
	if (cmn_lockdep_on(mx))
		cmn_lockdep_acquire(mx->cls);
	pthread_mutex_lock(&mx->m);
	atomic_store_explicit(&mx->owner, pthread_self(), memory_order_relaxed);
}

/* Take @mx only if it is free: true if taken. For paths that must not wait (a
 * non-blocking notifier) or that pick any free one of several mutexes. */
static inline bool cmn_mutex_trylock(struct cmn_mutex *mx)
{
	if (pthread_mutex_trylock(&mx->m))
		return false;
	if (cmn_lockdep_on(mx))
		cmn_lockdep_acquire_try(mx->cls);
	atomic_store_explicit(&mx->owner, pthread_self(), memory_order_relaxed);
	return true;
}

/* Release @mx, held by this thread. */
static inline void cmn_mutex_unlock(struct cmn_mutex *mx)
{
	atomic_store_explicit(&mx->owner, (pthread_t)0, memory_order_relaxed);
	pthread_mutex_unlock(&mx->m);
	if (cmn_lockdep_on(mx))
		cmn_lockdep_release(mx->cls);
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

/* Spin until @s is taken (acquire). */
static inline void cmn_spin_lock(struct cmn_spinlock *s)
{
	for (;;) {
		if (!atomic_exchange_explicit(&s->locked, true, memory_order_acquire))
			return;
		while (atomic_load_explicit(&s->locked, memory_order_relaxed))
			cmn_cpu_relax();
	}
}

/* Release @s (release order). */
static inline void cmn_spin_unlock(struct cmn_spinlock *s)
{
	atomic_store_explicit(&s->locked, false, memory_order_release);
}

#endif
