// SPDX-License-Identifier: MIT
/* common/lockdep.c - the lock-order validator behind cmn_mutex (CMN_LOCKDEP builds).
 *
 * Classes get small ids on first use. after[a] is the set of classes ever taken while a
 * class-a lock was held; taking b while holding a checks b -> a first, then learns a -> b.
 * Only direct inversions are reported: a longer cycle (A -> B -> C -> A) needs each of its
 * edges seen and is left to review. Nesting two locks of one class (two slices' locks of
 * the same kind) is not an order the validator can judge, so it is not checked. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/lock.h"
#include "common/log.h"

#define LOCKDEP_CLASSES 512	/* id 0 means "not tracked" */
#define LOCKDEP_DEPTH	32
#define LOCKDEP_WORDS	((LOCKDEP_CLASSES + 63) / 64)

static _Atomic unsigned int nr_classes;
static struct cmn_lock_class *_Atomic classes[LOCKDEP_CLASSES];
static _Atomic uint64_t after[LOCKDEP_CLASSES][LOCKDEP_WORDS];
static void (*_Atomic lockdep_handler)(const char *what);

static __thread unsigned int held[LOCKDEP_DEPTH];
static __thread unsigned int nr_held;

void cmn_lockdep_set_handler(void (*fn)(const char *what))
{
	atomic_store(&lockdep_handler, fn);
}

void cmn_lockdep_report(const char *what)
{
	void (*h)(const char *) = atomic_load(&lockdep_handler);

	if (h) {
		h(what);
		return;
	}
	cmn_err("lockdep: %s", what);
	abort();
}

/* @cls's id, assigning one on first use; 0 once the table is full (then untracked). */
static unsigned int lockdep_class_id(struct cmn_lock_class *cls)
{
	unsigned int id = atomic_load_explicit(&cls->id, memory_order_acquire);
	unsigned int expect = 0, fresh;

	if (id)
		return id;
	fresh = atomic_fetch_add(&nr_classes, 1) + 1;
	if (fresh >= LOCKDEP_CLASSES)
		return 0;
	atomic_store(&classes[fresh], cls);
	if (!atomic_compare_exchange_strong(&cls->id, &expect, fresh))
		return expect;	/* another thread named it first; @fresh stays unused */
	return fresh;
}

static bool lockdep_test(unsigned int a, unsigned int b)
{
	return atomic_load_explicit(&after[a][b / 64], memory_order_relaxed) & (1ull << (b % 64));
}

static void lockdep_learn(unsigned int a, unsigned int b)
{
	if (!lockdep_test(a, b))
		atomic_fetch_or_explicit(&after[a][b / 64], 1ull << (b % 64), memory_order_relaxed);
}

static const char *lockdep_name(unsigned int id)
{
	struct cmn_lock_class *c = atomic_load(&classes[id]);

	return c && c->name ? c->name : "?";
}

void cmn_lockdep_acquire(struct cmn_lock_class *cls)
{
	unsigned int id = lockdep_class_id(cls);
	unsigned int n = cmn_min(nr_held, (unsigned int)LOCKDEP_DEPTH);

	for (unsigned int i = 0; id && i < n; i++) {
		unsigned int h = held[i];
		char what[512];

		if (!h || h == id)
			continue;
		if (lockdep_test(id, h)) {
			snprintf(what, sizeof(what), "lock order inversion: %s taken while %s is held, "
				 "the opposite order was seen before", lockdep_name(id), lockdep_name(h));
			cmn_lockdep_report(what);
		}
		lockdep_learn(h, id);
	}
	if (nr_held < LOCKDEP_DEPTH)
		held[nr_held] = id;
	nr_held++;
}

void cmn_lockdep_acquire_try(struct cmn_lock_class *cls)
{
	unsigned int id = lockdep_class_id(cls);

	/* A trylock never waits, so it cannot close a deadlock cycle: held, no order. */
	if (nr_held < LOCKDEP_DEPTH)
		held[nr_held] = id;
	nr_held++;
}

void cmn_lockdep_release(struct cmn_lock_class *cls)
{
	unsigned int id = atomic_load_explicit(&cls->id, memory_order_acquire);
	unsigned int n = cmn_min(nr_held, (unsigned int)LOCKDEP_DEPTH);

	if (!nr_held)
		return;
	nr_held--;
	if (nr_held >= LOCKDEP_DEPTH)
		return;
	/* Locks need not be released in reverse order: drop the newest of this class. */
	for (unsigned int i = n; i-- > 0;) {
		if (held[i] != id)
			continue;
		for (unsigned int k = i; k + 1 < n; k++)
			held[k] = held[k + 1];
		return;
	}
}
