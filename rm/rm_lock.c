// SPDX-License-Identifier: MIT
/* Lock helpers with a lock-order validator, and lazy RCU reader registration.
 *
 * The validator keeps, per thread, the locks held in the order taken. Taking a lock of a
 * lower rank than one held, or a client lock whose handle is not above every client lock
 * held, is a violation: the ABBA deadlocks it stands for may never show in a test run, so
 * the order itself is checked on every acquisition. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "rm/rm_internal.h"

#define RM_LOCKDEP_DEPTH 16

static __thread struct { enum rm_lock_rank rank; uint32_t key; } held[RM_LOCKDEP_DEPTH];
static __thread unsigned int nr_held;
/* Record a lock of @rank and @key as held by this thread. */
static void lockdep_push(enum rm_lock_rank rank, uint32_t key)
{
	if (nr_held < RM_LOCKDEP_DEPTH) {
		held[nr_held].rank = rank;
		held[nr_held].key = key;
	}
	nr_held++;
}

void rm_lockdep_acquire(enum rm_lock_rank rank, uint32_t key)
{
	for (unsigned int i = 0; i < nr_held; i++) {
		if (held[i].rank > rank)
			cmn_lockdep_report(rank == RM_RANK_API ? "API lock after a client or device lock" :
				       rank == RM_RANK_CLIENT ? "client lock after the device lock" :
				       "device lock after an accounting lock");
		else if (held[i].rank == rank && (rank != RM_RANK_CLIENT || held[i].key >= key))
			cmn_lockdep_report(rank == RM_RANK_CLIENT ? "client locks out of handle order" :
				       "lock taken twice");
	}
	lockdep_push(rank, key);
}

void rm_lockdep_release(enum rm_lock_rank rank, uint32_t key)
{
	unsigned int n = cmn_min(nr_held, (unsigned int)RM_LOCKDEP_DEPTH);

	for (unsigned int i = n; i-- > 0;) {
		if (held[i].rank == rank && held[i].key == key) {
			for (unsigned int k = i; k + 1 < n; k++)
				held[k] = held[k + 1];
			nr_held--;
			return;
		}
	}
	cmn_lockdep_report("release of a lock not held");
}

/* ---- RCU: every thread that enters the RM becomes a reader once ---- */
static pthread_key_t rcu_key;
static pthread_once_t rcu_once = PTHREAD_ONCE_INIT;
static __thread bool rcu_registered;

static void rcu_thread_exit(void *arg)
{
	(void)arg;
	urcu_memb_unregister_thread();
}

/* Only clients are freed through call_rcu (objects are freed at once, rm_res.c), and a
 * client's free takes the device lock anyway, so liburcu's one default queue serves. */
static void rcu_key_init(void)
{
	pthread_key_create(&rcu_key, rcu_thread_exit);
}

#if defined(__SANITIZE_THREAD__)
char rm_rcu_gp;		/* the grace-period sync object of rm_rcu_read_unlock() */
#endif

void rm_rcu_enter(void)
{
	if (rcu_registered)
		return;
	pthread_once(&rcu_once, rcu_key_init);
	urcu_memb_register_thread();
	pthread_setspecific(rcu_key, (void *)1);
	rcu_registered = true;
}

/* ---- locks ---- */
void rm_api_read(struct rm *rm, unsigned int fn)
{
	rm_lockdep_acquire(RM_RANK_API, fn);
	pthread_rwlock_rdlock(&rm->fns[fn].api_lock);
}

/* A try never waits, so it cannot close a cycle: recorded as held, its order unchecked. */
bool rm_api_tryread(struct rm *rm, unsigned int fn)
{
	if (pthread_rwlock_tryrdlock(&rm->fns[fn].api_lock))
		return false;
	lockdep_push(RM_RANK_API, fn);
	return true;
}

void rm_api_write(struct rm *rm, unsigned int fn)
{
	rm_lockdep_acquire(RM_RANK_API, fn);
	pthread_rwlock_wrlock(&rm->fns[fn].api_lock);
}

void rm_api_unlock(struct rm *rm, unsigned int fn)
{
	pthread_rwlock_unlock(&rm->fns[fn].api_lock);
	rm_lockdep_release(RM_RANK_API, fn);
}

void rm_acct_lock(struct rm *rm, unsigned int fn)
{
	rm_lockdep_acquire(RM_RANK_ACCT, fn);
	cmn_mutex_lock(&rm->fns[fn].acct_lock);
}

void rm_acct_unlock(struct rm *rm, unsigned int fn)
{
	cmn_mutex_unlock(&rm->fns[fn].acct_lock);
	rm_lockdep_release(RM_RANK_ACCT, fn);
}

void rm_client_lock(struct rm_client *c)
{
	rm_lockdep_acquire(RM_RANK_CLIENT, c->handle);
	cmn_mutex_lock(&c->lock);
}

bool rm_client_trylock(struct rm_client *c)
{
	if (!cmn_mutex_trylock(&c->lock))
		return false;
	lockdep_push(RM_RANK_CLIENT, c->handle);
	return true;
}

/* A recovery that found the lock busy (rm_event.c) asked to be woken: the event worker
 * retries it at once instead of at its next idle pass. */
void rm_client_unlock(struct rm_client *c)
{
	cmn_mutex_unlock(&c->lock);
	rm_lockdep_release(RM_RANK_CLIENT, c->handle);
	if (atomic_load_explicit(&c->wd_kick, memory_order_relaxed) &&
	    atomic_exchange(&c->wd_kick, false))
		gsp_events_kick(c->rm->gsp);
}

void rm_dev_lock(struct rm *rm)
{
	rm_lockdep_acquire(RM_RANK_DEVICE, 0);
	cmn_mutex_lock(&rm->dev_lock);
}

void rm_dev_unlock(struct rm *rm)
{
	cmn_mutex_unlock(&rm->dev_lock);
	rm_lockdep_release(RM_RANK_DEVICE, 0);
}

/* True if this thread's validator records a lock of @rank with @key. */
static bool lockdep_holds(enum rm_lock_rank rank, uint32_t key)
{
	unsigned int n = cmn_min(nr_held, (unsigned int)RM_LOCKDEP_DEPTH);

	for (unsigned int i = 0; i < n; i++)
		if (held[i].rank == rank && held[i].key == key)
			return true;
	return false;
}

void rm_client_assert_held(struct rm_client *c)
{
	cmn_mutex_assert_held(&c->lock);
	if (!lockdep_holds(RM_RANK_CLIENT, c->handle))
		cmn_lockdep_report("client lock held but not taken through rm_client_lock()");
}

void rm_dev_assert_held(struct rm *rm)
{
	cmn_mutex_assert_held(&rm->dev_lock);
	if (!lockdep_holds(RM_RANK_DEVICE, 0))
		cmn_lockdep_report("device lock held but not taken through rm_dev_lock()");
}
