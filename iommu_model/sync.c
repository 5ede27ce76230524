// SPDX-License-Identifier: MIT
/* Access sections: a tiny per-thread counter scheme (odd = inside) so that strict unmap,
 * replace and detach can wait for device threads that translated before the change and
 * may still be copying. Readers pay one atomic add to enter and a plain store to leave;
 * writers scan the registered threads.
 * Written here rather than with liburcu because every access is a C11 atomic that
 * ThreadSanitizer understands. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/clock.h"
#include "iommu_model/iommu_internal.h"

struct sync_slot {
	_Atomic uint64_t ctr;		/* odd while its thread is inside a section */
	_Atomic bool used;		/* owned by a live thread */
	unsigned int idx;
	struct sync_slot *next;		/* registry list, append-only */
};

static struct cmn_mutex sync_reg_lock = CMN_MUTEX_INITIALIZER("iommu sync_reg_lock");
static _Atomic(struct sync_slot *) sync_slots;
static unsigned int sync_nr_slots;
static pthread_key_t sync_key;
static pthread_once_t sync_once = PTHREAD_ONCE_INIT;
static __thread struct sync_slot *sync_self;
static __thread unsigned int sync_depth;
__thread unsigned int iommu_tls_index;

/* Thread exit: the slot goes back to the pool (its counter is even by then). */
static void sync_release(void *p)
{
	struct sync_slot *s = p;

	atomic_store_explicit(&s->used, false, memory_order_release);
}

static void sync_key_init(void)
{
	VGPU_ASSERT(pthread_key_create(&sync_key, sync_release) == 0);
}

/* Slots are never freed: a scanning writer may hold a pointer to any of them. */
static struct sync_slot *sync_slot_get(void)
{
	struct sync_slot *s;

	if (cmn_likely(sync_self != NULL))
		return sync_self;
	pthread_once(&sync_once, sync_key_init);
	cmn_mutex_lock(&sync_reg_lock);
	for (s = atomic_load(&sync_slots); s; s = s->next)
		if (!atomic_load(&s->used))
			break;
	if (!s) {
		s = calloc(1, sizeof(*s));
		VGPU_ASSERT(s != NULL);
		s->idx = sync_nr_slots++;
		s->next = atomic_load(&sync_slots);
		atomic_store(&sync_slots, s);
	}
	atomic_store(&s->used, true);
	cmn_mutex_unlock(&sync_reg_lock);
	pthread_setspecific(sync_key, s);
	sync_self = s;
	iommu_tls_index = s->idx + 1;
	return s;
}

unsigned int iommu_thread_index(void)
{
	return sync_slot_get()->idx;
}

void iommu_access_begin(void)
{
	struct sync_slot *s = sync_slot_get();

	/* seq_cst: the odd counter must be visible before this thread reads any PTE or
	 * cache entry, or a writer could miss it and return while we use what it removed. */
	if (sync_depth++ == 0)
		atomic_fetch_add_explicit(&s->ctr, 1, memory_order_seq_cst);
}

void iommu_access_end(void)
{
	struct sync_slot *s = sync_self;

	VGPU_ASSERT(s && sync_depth > 0);
	/* A plain store, not a locked add: only this thread changes its counter (a writer's
	 * fetch_add of 0 writes back what it read), so nothing can come between the load and
	 * the store, and a locked instruction here would make the engine's next access wait
	 * for every load before it. */
	if (--sync_depth == 0)
		atomic_store_explicit(&s->ctr,
				      atomic_load_explicit(&s->ctr, memory_order_relaxed) + 1,
				      memory_order_release);
}

/* Wait for one slot to leave the section it is in now. */
static void sync_wait_slot(struct sync_slot *s)
{
	/* An RMW, not a load: if the reader's entry increment comes after it, that
	 * increment reads from it and so sees every PTE and cache update we made before;
	 * if it came before, we see the odd count and wait. */
	uint64_t c = atomic_fetch_add_explicit(&s->ctr, 0, memory_order_seq_cst);
	unsigned int spins = 0;

	if (!(c & 1))
		return;
	while (atomic_load_explicit(&s->ctr, memory_order_acquire) == c) {
		if (++spins < 128) {
			cmn_cpu_relax();
		} else if (spins < 160) {
			sched_yield();
		} else {
			/* The reader was preempted inside its section. Sleeping (not yielding)
			 * leaves this CPU idle, so the scheduler can run it here. */
			cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
		}
	}
}

void iommu_sync_wait(void)
{
	for (struct sync_slot *s = atomic_load(&sync_slots); s; s = s->next) {
		/* Our own section (a PRI handler unmapping) cannot be waited for. */
		if (s == sync_self)
			continue;
		sync_wait_slot(s);
	}
}
