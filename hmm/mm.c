// SPDX-License-Identifier: MIT
/* hmm/mm.c - the process object: managed regions, interval notifiers and their
 * sequence numbers, events from userfaultfd and from the application, fork handling. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/log.h"
#include "hmm/hmm_internal.h"

#define STAGING_SIZE	(2 * HMM_BLOCK_SIZE)	/* a batch of <= 2 MiB at any offset */

struct hmm_region *_Atomic hmm_regions[HMM_MAX_REGIONS];
atomic_uint hmm_handlers_inflight;
atomic_bool hmm_fork_pending;

static struct hmm_mm *_Atomic mms[HMM_MAX_MMS];
static struct cmn_mutex mms_lock = CMN_MUTEX_INITIALIZER("hmm mms_lock");
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

void (*_Atomic hmm_race_hook)(enum hmm_race_window win, uintptr_t addr);

void hmm_relax(unsigned int *spins)
{
	if (++*spins < 64)
		cmn_cpu_relax();
	else
		sched_yield();
}

struct hmm_region *hmm_region_find(uintptr_t addr)
{
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load_explicit(&hmm_regions[i], memory_order_acquire);

		if (r && addr >= r->start && addr < r->end)
			return r;
	}
	return NULL;
}

struct hmm_region *hmm_region_find_span(uintptr_t addr, uintptr_t *span_end)
{
	uintptr_t end = UINTPTR_MAX;

	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load_explicit(&hmm_regions[i], memory_order_acquire);

		if (!r)
			continue;
		if (addr >= r->start && addr < r->end) {
			*span_end = r->end;
			return r;
		}
		if (r->start > addr && r->start < end)
			end = r->start;
	}
	*span_end = end;
	return NULL;
}

/* Wait until no fault handler can still be looking at an unpublished region. */
static void handlers_drain(void)
{
	unsigned int spins = 0;

	while (atomic_load(&hmm_handlers_inflight))
		hmm_relax(&spins);
}

void hmm_mm_users_drain(struct hmm_mm *mm)
{
	unsigned int spins = 0;

	while (atomic_load(&mm->users))
		hmm_relax(&spins);
}

/* ---- notifiers ------------------------------------------------------------------------ */

int hmm_interval_notifier_insert(struct hmm_interval_notifier *sub, struct hmm_mm *mm,
				 uintptr_t start, size_t len, const void *owner,
				 const struct hmm_interval_notifier_ops *ops)
{
	int ret = -ENOSPC;

	if (!sub || !mm || !ops || !ops->invalidate || !len || start + len < start)
		return -EINVAL;
	sub->mm = mm;
	sub->start = start;
	sub->end = start + len;
	sub->ops = ops;
	sub->owner = owner;
	atomic_init(&sub->invalidate_seq, atomic_load(&mm->seq));
	atomic_init(&sub->busy, 0);
	cmn_mutex_lock(&mm->lock);
	for (int i = 0; i < HMM_MAX_NOTIFIERS; i++) {
		if (!atomic_load(&mm->subs[i])) {
			sub->slot = i;
			atomic_store_explicit(&mm->subs[i], sub, memory_order_release);
			ret = 0;
			break;
		}
	}
	cmn_mutex_unlock(&mm->lock);
	return ret;
}

void hmm_interval_notifier_remove(struct hmm_interval_notifier *sub)
{
	struct hmm_mm *mm = sub->mm;
	unsigned int spins = 0;

	cmn_mutex_lock(&mm->lock);
	VGPU_ASSERT(atomic_load(&mm->subs[sub->slot]) == sub);
	atomic_store(&mm->subs[sub->slot], NULL);
	cmn_mutex_unlock(&mm->lock);
	/* a walker may have loaded @sub before it was unpublished */
	while (atomic_load(&mm->walkers) || atomic_load(&sub->busy))
		hmm_relax(&spins);
}

uint64_t hmm_interval_read_begin(struct hmm_interval_notifier *sub)
{
	unsigned int spins = 0;

	while (atomic_load_explicit(&sub->busy, memory_order_acquire))
		hmm_relax(&spins);
	return atomic_load_explicit(&sub->invalidate_seq, memory_order_acquire);
}

bool hmm_interval_read_retry(struct hmm_interval_notifier *sub, uint64_t seq)
{
	return atomic_load_explicit(&sub->invalidate_seq, memory_order_acquire) != seq;
}

bool hmm_interval_check_retry(struct hmm_interval_notifier *sub, uint64_t seq)
{
	return atomic_load_explicit(&sub->invalidate_seq, memory_order_relaxed) != seq ||
	       atomic_load_explicit(&sub->busy, memory_order_relaxed);
}

void hmm_interval_set_seq(struct hmm_interval_notifier *sub, uint64_t cur_seq)
{
	atomic_store_explicit(&sub->invalidate_seq, cur_seq, memory_order_release);
}

static bool notifier_wants(const struct hmm_interval_notifier *sub,
			   const struct hmm_notify_range *r)
{
	if (r->end <= sub->start || r->start >= sub->end)
		return false;
	if (sub->events && !(sub->events & HMM_EVENT_BIT(r->event)))
		return false;
	/* the migrating device, or the one taking exclusive access, updates its own
	 * mappings (nouveau skips its own MMU_NOTIFY_EXCLUSIVE the same way) */
	return !((r->event == HMM_EVENT_MIGRATE || r->event == HMM_EVENT_EXCLUSIVE) &&
		 r->owner && r->owner == sub->owner);
}

void hmm_notify_invalidate(struct hmm_mm *mm, const struct hmm_notify_range *r)
{
	uint64_t cur = atomic_fetch_add(&mm->seq, 1) + 1;

	atomic_fetch_add(&mm->walkers, 1);
	for (unsigned int i = 0; i < HMM_MAX_NOTIFIERS; i++) {
		struct hmm_interval_notifier *sub = atomic_load_explicit(&mm->subs[i],
									 memory_order_acquire);
		unsigned int spins = 0;

		if (!sub || !notifier_wants(sub, r))
			continue;
		atomic_fetch_add(&sub->busy, 1);
		/* a non-blockable callback refuses on contention: retry, as the OOM reaper does */
		while (!sub->ops->invalidate(sub, r, cur))
			hmm_relax(&spins);
		atomic_fetch_sub(&sub->busy, 1);
		atomic_fetch_add_explicit(&mm->c_inval, 1, memory_order_relaxed);
	}
	atomic_fetch_sub(&mm->walkers, 1);
}

/* mprotect backend: a dropped device page reads as zero, like a zapped one, and is
 * accessible again. Before an unmap this is wasted but harmless. 0 or -errno. */
static int prot_drop_page(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a)
{
	static const char zero[HMM_PAGE_SIZE];
	int ret = hmm_prot_write(mm, r, a, zero, HMM_PAGE_SIZE);

	return ret ? ret : hmm_prot_set(a, HMM_PAGE_SIZE, true);
}

/* Drop the device copy, or the exclusive grant, of page @a of @r (@unmap: the page goes
 * away). The page is claimed first, as a CPU fault claims it, and its access restored
 * before its state says "system": a CPU access in between waits for it, where a system
 * page that still faulted would be taken for the application's own PROT_NONE and, after
 * a few faults, handed to the previous SIGSEGV handler. */
static void drop_page(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a, bool unmap)
{
	_Atomic uint64_t *w = hmm_region_word(r, a);
	uint64_t old = atomic_load(w);
	unsigned int spins = 0;
	int ret = 0;

	for (;;) {
		unsigned int st = hmm_ps_state(old);

		if (st == HMM_PS_SYSTEM)
			return;
		if (st == HMM_PS_TO_DEVICE || st == HMM_PS_TO_SYSTEM) {
			hmm_uffd_relax(&spins);
			old = atomic_load(w);
			continue;
		}
		if (atomic_compare_exchange_weak(w, &old,
						 (old & ~HMM_PS_STATE_MASK) | HMM_PS_TO_SYSTEM))
			break;
	}
	hmm_race_window(HMM_RACE_PROT_DROP, a);
	if (hmm_ps_state(old) == HMM_PS_EXCLUSIVE)
		ret = hmm_prot_set(a, HMM_PAGE_SIZE, true);
	else if (r->prot)
		ret = prot_drop_page(mm, r, a);
	if (ret && !unmap) {
		/* Still PROT_NONE: the page stays what it was, so that the next access faults
		 * it back; a device copy reads as zero from now on, as the clear asks. */
		if (hmm_ps_state(old) == HMM_PS_DEVICE) {
			static const char zero[HMM_PAGE_SIZE];

			hmm_devmem_copy(atomic_load(&hmm_devmems[hmm_ps_dm(old)]),
					HMM_COPY_TO_DEVICE, (void *)zero, hmm_ps_page(old), 1);
		}
		atomic_store_explicit(w, old, memory_order_release);
		return;
	}
	atomic_store_explicit(w, HMM_PS_SYSTEM, memory_order_release);
	if (hmm_ps_state(old) == HMM_PS_DEVICE)
		hmm_devmem_free_deferred(atomic_load(&hmm_devmems[hmm_ps_dm(old)]),
					 hmm_ps_page(old));
}

/* Drop the device copies of [start, end) in every region of @mm (unmap, clear). */
static void drop_device_pages(struct hmm_mm *mm, uintptr_t start, uintptr_t end, bool unmap)
{
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load(&hmm_regions[i]);

		if (!r || r->mm != mm || end <= r->start || start >= r->end)
			continue;
		for (uintptr_t a = cmn_max(start, r->start); a < cmn_min(end, r->end);
		     a += HMM_PAGE_SIZE)
			drop_page(mm, r, a, unmap);
	}
}

/* The application changed the protection of [start, end): exclusive pages there are
 * the CPU's again, with the protection the application chose. */
static void exclusive_forget(struct hmm_mm *mm, uintptr_t start, uintptr_t end)
{
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load(&hmm_regions[i]);

		if (!r || r->mm != mm || end <= r->start || start >= r->end)
			continue;
		for (uintptr_t a = cmn_max(start, r->start); a < cmn_min(end, r->end);
		     a += HMM_PAGE_SIZE) {
			uint64_t old = HMM_PS_EXCLUSIVE;

			if (atomic_compare_exchange_strong(hmm_region_word(r, a), &old, HMM_PS_SYSTEM))
				atomic_fetch_add(&mm->c_excl_revoked, 1);
		}
	}
}

int hmm_mm_notify(struct hmm_mm *mm, enum hmm_event event, uintptr_t start, uintptr_t end)
{
	struct hmm_notify_range r = { .start = start, .end = end, .event = event,
				      .flags = HMM_NOTIFY_BLOCKABLE };

	if (!mm || start >= end || (unsigned int)event >= HMM_EVENT_NR)
		return -EINVAL;
	hmm_notify_invalidate(mm, &r);
	hmm_mm_use(mm);
	if (event == HMM_EVENT_CLEAR || event == HMM_EVENT_UNMAP)
		drop_device_pages(mm, start, end, event == HMM_EVENT_UNMAP);
	if (event == HMM_EVENT_PROTECTION)
		exclusive_forget(mm, start, end);
	hmm_mm_unuse(mm);
	return 0;
}

/* ---- regions -------------------------------------------------------------------------- */

static void region_free(struct hmm_region *r)
{
	struct hmm_region_words *w = r->words;

	if (w && atomic_fetch_sub(&w->refs, 1) == 1) {
		free((void *)w->st);
		free((void *)w->back_ns);
		free(w);
	}
	free(r);
}

static struct hmm_region *region_new(struct hmm_mm *mm, uintptr_t start, uintptr_t end)
{
	struct hmm_region *r = calloc(1, sizeof(*r));
	size_t n = (end - start) >> HMM_PAGE_SHIFT;

	if (!r)
		return NULL;
	r->start = r->key = start;
	r->end = end;
	r->mm = mm;
	r->words = calloc(1, sizeof(*r->words));
	if (!r->words) {
		free(r);
		return NULL;
	}
	atomic_init(&r->words->refs, 1);
	r->st = r->words->st = calloc(n, sizeof(*r->st));
	r->back_ns = r->words->back_ns = calloc(n, sizeof(*r->back_ns));
	if (!r->st || !r->back_ns) {
		region_free(r);
		return NULL;
	}
	return r;
}

/* [start, end) of @r as a region of its own, on @r's words. */
static struct hmm_region *region_piece(struct hmm_region *r, uintptr_t start, uintptr_t end)
{
	struct hmm_region *p = calloc(1, sizeof(*p));
	size_t off = (start - r->start) >> HMM_PAGE_SHIFT;

	if (!p)
		return NULL;
	p->start = start;
	p->end = end;
	p->key = r->key;
	p->mm = r->mm;
	p->st = r->st + off;
	p->back_ns = r->back_ns + off;
	p->words = r->words;
	atomic_fetch_add(&p->words->refs, 1);
	p->prot = r->prot;
	p->alias = r->alias ? r->alias + (start - r->start) : NULL;
	return p;
}

/* Publish @r in a free slot; caller holds mm->lock. */
static int region_publish_locked(struct hmm_mm *mm, struct hmm_region *r)
{
	cmn_mutex_assert_held(&mm->lock);
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *o = atomic_load(&hmm_regions[i]);

		if (o && r->start < o->end && o->start < r->end)
			return -EEXIST;
	}
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *expected = NULL;

		if (atomic_compare_exchange_strong(&hmm_regions[i], &expected, r))
			return 0;
	}
	return -ENOSPC;
}

/* The range must be readable, writable and not special all the way, and private (or
 * shared all the way when @shared: an aliased region of the mprotect backend). */
static int region_check_vmas(struct hmm_mm *mm, uintptr_t start, uintptr_t end, bool shared)
{
	for (uintptr_t a = start; a < end;) {
		struct hmm_vma v;

		if (hmm_vma_find(mm, a, &v) || v.start > a)
			return -EINVAL;
		if (!v.read || !v.write || v.shared != shared || v.special)
			return -EINVAL;
		a = v.end;
	}
	return 0;
}

static int region_add(struct hmm_mm *mm, uintptr_t start, size_t len, char *alias)
{
	uintptr_t end = start + len;
	struct hmm_region *r;
	int ret;

	if (!mm || !len || !cmn_is_aligned(start, HMM_PAGE_SIZE) ||
	    !cmn_is_aligned(len, HMM_PAGE_SIZE) || end < start)
		return -EINVAL;
	hmm_regions_reap(mm);
	ret = region_check_vmas(mm, start, end, alias != NULL);
	if (!ret && alias)
		ret = region_check_vmas(mm, (uintptr_t)alias, (uintptr_t)alias + len, true);
	if (ret)
		return ret;
	r = region_new(mm, start, end);
	if (!r)
		return -ENOMEM;
	r->prot = hmm_mm_prot(mm);
	r->alias = alias;
	cmn_mutex_lock(&mm->lock);
	if (!r->prot) {
		ret = hmm_uffd_register(mm->uffd, start, len, mm->has_wp);
		if (ret)
			goto unlock;
	}
	ret = region_publish_locked(mm, r);
	if (ret)
		goto unregister;
	cmn_mutex_unlock(&mm->lock);
	return 0;
unregister:
	if (!r->prot)
		hmm_uffd_unregister(mm->uffd, start, len);
unlock:
	cmn_mutex_unlock(&mm->lock);
	region_free(r);
	return ret;
}

int hmm_region_add(struct hmm_mm *mm, void *addr, size_t len)
{
	return region_add(mm, (uintptr_t)addr, len, NULL);
}

int hmm_region_add_alias(struct hmm_mm *mm, void *addr, size_t len, void *alias)
{
	int ret;

	if (!mm || !hmm_mm_prot(mm) || !alias || alias == addr ||
	    !cmn_is_aligned((uintptr_t)alias, HMM_PAGE_SIZE))
		return -EINVAL;
	ret = region_add(mm, (uintptr_t)addr, len, alias);
	/* map the write view in now: the fault path then copies without faulting itself
	 * (512 page faults would triple the cost of a 2 MiB granule) */
	if (!ret)
		madvise(alias, len, MADV_POPULATE_WRITE);
	return ret;
}

/* True if every page of @r is in system memory, none claimed, exclusive or on a device. */
static bool region_settled(struct hmm_region *r)
{
	for (uintptr_t a = r->start; a < r->end; a += HMM_PAGE_SIZE) {
		if (hmm_ps_state(atomic_load(hmm_region_word(r, a))) != HMM_PS_SYSTEM)
			return false;
	}
	return true;
}

/* Bring everything of @r back, unpublish, unregister and free it. Marked dying first, no
 * migration or exclusive access takes a page of it any more; the calls that did before
 * are waited for, so that nothing lands on the device behind the way back (a page in
 * flight then is waited for too). Calls that found @r before the unpublish (a range walk)
 * are waited for before the free. */
static void region_teardown(struct hmm_mm *mm, struct hmm_region *r)
{
	unsigned int spins = 0;
	bool owned = false;

	atomic_store(&r->dying, true);
	hmm_mm_users_drain(mm);
	for (;;) {
		hmm_fault_back_range(mm, r, r->start, r->end, true);
		hmm_exclusive_revoke_range(mm, r, r->start, r->end);
		if (region_settled(r))
			break;
		hmm_relax(&spins);
	}
	cmn_mutex_lock(&mm->lock);
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *expected = r;

		owned |= atomic_compare_exchange_strong(&hmm_regions[i], &expected, NULL);
	}
	/* the VMA may be gone (unmapped, remapped): nothing to unregister then; an mremap
	 * that took @r out of the table meanwhile owns it (its pieces are removed next) */
	if (owned && !r->prot)
		hmm_uffd_unregister(mm->uffd, r->start, r->end - r->start);
	cmn_mutex_unlock(&mm->lock);
	hmm_mm_users_drain(mm);
	handlers_drain();
	/* an event the handler thread read before the unpublish (the UNMAP of a munmap that
	 * has returned) may still be walking @r: wait for it, unless we are that thread */
	if (!mm->thread_started || !pthread_equal(pthread_self(), mm->thread))
		hmm_mm_sync_events(mm);
	if (owned)
		region_free(r);
}

/* The region, or a piece an mremap left of it, that the application added at @key. */
static struct hmm_region *region_by_key(struct hmm_mm *mm, uintptr_t key)
{
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *o = atomic_load(&hmm_regions[i]);

		if (o && o->mm == mm && o->key == key)
			return o;
	}
	return NULL;
}

int hmm_region_remove(struct hmm_mm *mm, void *addr)
{
	struct hmm_region *r;
	int ret = -ENOENT;

	if (!mm)
		return -EINVAL;
	hmm_regions_reap(mm);
	while ((r = region_by_key(mm, (uintptr_t)addr))) {
		region_teardown(mm, r);
		ret = 0;
	}
	return ret;
}

long hmm_mm_make_resident(struct hmm_mm *mm, void *addr, size_t len)
{
	uintptr_t start = cmn_align_down((uintptr_t)addr, HMM_PAGE_SIZE);
	uintptr_t end = cmn_align_up((uintptr_t)addr + len, HMM_PAGE_SIZE);
	long total = 0;

	if (!mm || end < start)
		return -EINVAL;
	hmm_mm_use(mm);
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load(&hmm_regions[i]);

		if (!r || r->mm != mm || end <= r->start || start >= r->end)
			continue;
		total += hmm_fault_back_range(mm, r, cmn_max(start, r->start),
					      cmn_min(end, r->end), true);
		total += hmm_exclusive_revoke_range(mm, r, cmn_max(start, r->start),
						    cmn_min(end, r->end));
	}
	hmm_mm_unuse(mm);
	return total;
}

enum hmm_page_where hmm_mm_page_where(struct hmm_mm *mm, const void *addr,
				      struct hmm_devmem **dm_out, uint64_t *page_out)
{
	struct hmm_region *r;
	bool found;
	uint64_t w = 0;

	if (!mm)
		return HMM_PAGE_NONE;
	hmm_mm_use(mm);
	r = hmm_region_find((uintptr_t)addr);
	found = r && r->mm == mm;
	if (found)
		w = atomic_load(hmm_region_word(r, (uintptr_t)addr));
	hmm_mm_unuse(mm);
	if (!found)
		return HMM_PAGE_NONE;
	switch (hmm_ps_state(w)) {
	case HMM_PS_SYSTEM:
		return HMM_PAGE_SYSTEM;
	case HMM_PS_DEVICE:
		if (dm_out)
			*dm_out = atomic_load(&hmm_devmems[hmm_ps_dm(w)]);
		if (page_out)
			*page_out = hmm_ps_page(w);
		return HMM_PAGE_DEVICE;
	case HMM_PS_EXCLUSIVE:
		return HMM_PAGE_EXCLUSIVE;
	default:
		return HMM_PAGE_BUSY;
	}
}

void hmm_mm_get_stats(struct hmm_mm *mm, struct hmm_mm_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->cpu_faults = atomic_load_explicit(&mm->c_cpu_faults, memory_order_relaxed);
	st->cpu_fault_pages = atomic_load_explicit(&mm->c_cpu_fault_pages, memory_order_relaxed);
	st->zero_fills = atomic_load_explicit(&mm->c_zero_fills, memory_order_relaxed);
	st->cpu_won = atomic_load_explicit(&mm->c_cpu_won, memory_order_relaxed);
	st->migrated_to_device = atomic_load_explicit(&mm->c_to_dev, memory_order_relaxed);
	st->migrated_to_system = atomic_load_explicit(&mm->c_to_sys, memory_order_relaxed);
	st->invalidations = atomic_load_explicit(&mm->c_inval, memory_order_relaxed);
	st->events_unmap = atomic_load_explicit(&mm->c_unmap, memory_order_relaxed);
	st->events_remap = atomic_load_explicit(&mm->c_remap, memory_order_relaxed);
	st->events_fork = atomic_load_explicit(&mm->c_fork, memory_order_relaxed);
	st->event_waits = atomic_load_explicit(&mm->c_event_waits, memory_order_relaxed);
	st->exclusive = atomic_load_explicit(&mm->c_excl, memory_order_relaxed);
	st->exclusive_revoked = atomic_load_explicit(&mm->c_excl_revoked, memory_order_relaxed);
	st->copier_pages = atomic_load_explicit(&mm->copier.pages, memory_order_relaxed);
	st->spare_fills = atomic_load_explicit(&mm->spare.fills, memory_order_relaxed);
	st->spare_fills_pending = hmm_spare_pending(mm);
}

/* ---- userfaultfd events (handler thread) ---------------------------------------------- */

void hmm_uffd_event_unmap(struct hmm_mm *mm, uintptr_t start, uintptr_t end)
{
	hmm_mm_notify(mm, HMM_EVENT_UNMAP, start, end);
	atomic_fetch_add(&mm->c_unmap, 1);
}

/* Take @r out of the table for an mremap that moved [a, b) of it away: the pieces of @r
 * outside that range take its place (none when it moved whole), and @r is retired. A
 * call that found @r before keeps using it, on the words the pieces share, until the
 * reaper frees it. False (@r stays whole) if a piece finds no room. */
static bool region_cut_locked(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a,
			      uintptr_t b)
{
	unsigned int slot = HMM_MAX_REGIONS, spare = HMM_MAX_REGIONS;
	struct hmm_region *lo = NULL, *hi = NULL;

	cmn_mutex_assert_held(&mm->lock);
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *o = atomic_load(&hmm_regions[i]);

		if (o == r)
			slot = i;
		else if (!o && spare == HMM_MAX_REGIONS)
			spare = i;
	}
	if (slot == HMM_MAX_REGIONS)
		return false;		/* being removed */
	if (a > r->start)
		lo = region_piece(r, r->start, a);
	if (b < r->end)
		hi = region_piece(r, b, r->end);
	if ((a > r->start && !lo) || (b < r->end && !hi) ||
	    (lo && hi && spare == HMM_MAX_REGIONS)) {
		if (lo)
			region_free(lo);
		if (hi)
			region_free(hi);
		return false;
	}
	/* the upper piece first: a lookup meanwhile finds @r or a piece, never a hole */
	if (lo && hi)
		atomic_store_explicit(&hmm_regions[spare], hi, memory_order_release);
	atomic_store_explicit(&hmm_regions[slot], lo ? lo : hi, memory_order_release);
	atomic_store(&r->dying, true);
	r->retired_next = mm->retired;
	mm->retired = r;
	atomic_fetch_add(&mm->nr_retired, 1);
	return true;
}

void hmm_regions_reap(struct hmm_mm *mm)
{
	struct hmm_region *list, *next;

	if (!atomic_load(&mm->nr_retired))
		return;
	cmn_mutex_lock(&mm->lock);
	list = mm->retired;
	mm->retired = NULL;
	cmn_mutex_unlock(&mm->lock);
	/* A call that found one of them before it left the table is a user of @mm, a fault
	 * handler, or the handler thread amid its messages; one that starts now cannot. */
	if (atomic_load(&mm->users) || atomic_load(&hmm_handlers_inflight) ||
	    atomic_load(&mm->monitor_busy)) {
		cmn_mutex_lock(&mm->lock);
		for (; list; list = next) {
			next = list->retired_next;
			list->retired_next = mm->retired;
			mm->retired = list;
		}
		cmn_mutex_unlock(&mm->lock);
		return;
	}
	for (; list; list = next) {
		next = list->retired_next;
		atomic_fetch_sub(&mm->nr_retired, 1);
		region_free(list);
	}
}

/* Region of @mm for device pages moved to @x, an address of the moved managed range
 * [lo, hi): the one there, else a new one over the range, or over what of it is free
 * from @x on. NULL if none can be had (a region of another mm, the table full); *@failed
 * then saves the next pages the attempt. */
static struct hmm_region *remap_dst(struct hmm_mm *mm, uintptr_t x, uintptr_t lo,
				    uintptr_t hi, bool *failed)
{
	struct hmm_region *r = hmm_region_find(x);
	uintptr_t span_end;
	int ret;

	if (r)
		return r->mm == mm ? r : NULL;
	if (*failed)
		return NULL;
	cmn_mutex_lock(&mm->lock);
	for (int tries = 0; tries < 2; tries++) {
		r = region_new(mm, lo, hi);
		if (!r)
			break;
		ret = region_publish_locked(mm, r);
		if (!ret)
			break;
		region_free(r);
		r = NULL;
		if (ret != -EEXIST || lo == x)
			break;
		/* another region of ours covers part of the range */
		hmm_region_find_span(x, &span_end);
		lo = x;
		hi = cmn_min(hi, span_end);
	}
	cmn_mutex_unlock(&mm->lock);
	*failed = !r;
	return r;
}

/* No region can take the device page @w that moved to @x: its data goes into place there
 * (the VMA took the registration along, so UFFDIO_COPY fills it), where it lives on in
 * system memory, unmanaged. */
static void remap_unmanaged(struct hmm_mm *mm, uintptr_t x, uint64_t w)
{
	struct hmm_devmem *dm = atomic_load(&hmm_devmems[hmm_ps_dm(w)]);
	long ret = hmm_uffd_copy(mm->uffd, x, hmm_devmem_page_ptr(dm, hmm_ps_page(w)),
				 HMM_PAGE_SIZE, true);

	if (ret != (long)HMM_PAGE_SIZE)
		cmn_warn("hmm: mremap to %#lx: no region there and the copy failed (%ld): "
			 "page lost", (unsigned long)x, ret);
	hmm_devmem_free_deferred(dm, hmm_ps_page(w));
}

/* [a, b) of @src, moved from @from to @to: its device pages move along, as device-private
 * entries move with their page tables. The range leaves @src unless it is still mapped
 * (MREMAP_DONTUNMAP): an unmapped range would keep the table slot and block regions at
 * the address. *@window: the race window was opened. */
static void remap_region(struct hmm_mm *mm, struct hmm_region *src, uintptr_t a, uintptr_t b,
			 uintptr_t from, uintptr_t to, bool *window)
{
	uintptr_t lo = to + (a - from), hi = to + (b - from);
	struct hmm_region *dst = NULL;
	bool failed = false;

	/* out of the table first: its slot may be what the new region needs */
	if (hmm_vma_gone(mm, a)) {
		cmn_mutex_lock(&mm->lock);
		region_cut_locked(mm, src, a, b);
		cmn_mutex_unlock(&mm->lock);
	}
	for (uintptr_t x = a; x < b; x += HMM_PAGE_SIZE) {
		_Atomic uint64_t *ws = hmm_region_word(src, x);
		uintptr_t y = lo + (x - a);
		unsigned int spins = 0;
		uint64_t w;

		/* a page a migration has in flight lands where it started: wait for it */
		while (hmm_ps_state(w = atomic_load(ws)) == HMM_PS_TO_DEVICE ||
		       hmm_ps_state(w) == HMM_PS_TO_SYSTEM)
			hmm_uffd_relax(&spins);
		if (hmm_ps_state(w) != HMM_PS_DEVICE)
			continue;
		if (!dst || y < dst->start || y >= dst->end)
			dst = remap_dst(mm, y, lo, hi, &failed);
		if (!*window) {
			*window = true;
			hmm_race_window(HMM_RACE_REMAP, to);
		}
		atomic_store(ws, HMM_PS_SYSTEM);
		if (dst)
			atomic_store(hmm_region_word(dst, y), w);
		else
			remap_unmanaged(mm, y, w);
	}
}

/* mremap moved [from, from+len) to @to. */
void hmm_uffd_event_remap(struct hmm_mm *mm, uintptr_t from, uintptr_t to, size_t len)
{
	struct hmm_notify_range unmap = { .start = from, .end = from + len,
					  .event = HMM_EVENT_UNMAP, .flags = HMM_NOTIFY_BLOCKABLE };
	struct hmm_region *src[HMM_MAX_REGIONS];
	unsigned int n = 0;
	bool window = false;

	atomic_fetch_add(&mm->c_remap, 1);
	hmm_notify_invalidate(mm, &unmap);
	/* the regions first: moving pages changes the table */
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load(&hmm_regions[i]);

		if (r && r->mm == mm && r->start < from + len && from < r->end)
			src[n++] = r;
	}
	for (unsigned int i = 0; i < n; i++)
		remap_region(mm, src[i], cmn_max(from, src[i]->start),
			     cmn_min(from + len, src[i]->end), from, to, &window);
}

void hmm_uffd_event_fork(struct hmm_mm *mm)
{
	struct hmm_notify_range r = { .start = 0, .end = UINTPTR_MAX, .event = HMM_EVENT_FORK,
				      .flags = HMM_NOTIFY_BLOCKABLE };

	atomic_fetch_add(&mm->c_fork, 1);
	hmm_notify_invalidate(mm, &r);
}

bool hmm_mm_events_pending(struct hmm_mm *mm)
{
	struct pollfd pfd = { .fd = mm->uffd, .events = POLLIN };

	if (atomic_load(&mm->monitor_busy))
		return true;
	/* queued and not read yet (the thread that caused one waits for the read) */
	return mm->uffd >= 0 && mm->thread_started && poll(&pfd, 1, 0) == 1 &&
	       (pfd.revents & POLLIN);
}

struct hmm_mm *hmm_events_pending(void)
{
	for (unsigned int i = 0; i < HMM_MAX_MMS; i++) {
		struct hmm_mm *mm = atomic_load(&mms[i]);

		if (mm && hmm_mm_events_pending(mm))
			return mm;
	}
	return NULL;
}

bool hmm_sigbus_fill_unmanaged(uintptr_t addr)
{
	for (unsigned int i = 0; i < HMM_MAX_MMS; i++) {
		struct hmm_mm *mm = atomic_load(&mms[i]);
		int ret;

		if (!mm || mm->opts.backend != HMM_BACKEND_UFFD_SIGBUS)
			continue;
		/* only the descriptor the VMA is registered with takes it; -EBUSY: an event
		 * is queued meanwhile, the access retries after it */
		ret = hmm_uffd_zeropage(mm->uffd, addr, HMM_PAGE_SIZE, true);
		if (!ret || ret == -EEXIST || ret == -EBUSY)
			return true;
	}
	return false;
}

void hmm_mm_sync_events(struct hmm_mm *mm)
{
	unsigned int spins = 0;

	while (atomic_load(&mm->monitor_busy))
		hmm_relax(&spins);
	hmm_regions_reap(mm);
}

/* ---- fork ----------------------------------------------------------------------------- */

/* Before fork: everything back in system memory, so the child gets a private COW copy
 * of each page, device-resident or not. No migration to a device starts until the fork
 * returns, and those under way are waited for: a page they took would be missing in the
 * child, whose userfaultfd the parent's handler closes (the kernel's fork holds the mmap
 * lock that migrate_vma needs for the same reason). */
static void atfork_prepare(void)
{
	atomic_store(&hmm_fork_pending, true);
	for (unsigned int i = 0; i < HMM_MAX_MMS; i++) {
		struct hmm_mm *mm = atomic_load(&mms[i]);

		if (mm) {
			hmm_mm_users_drain(mm);
			hmm_mm_make_resident(mm, NULL, UINTPTR_MAX - HMM_PAGE_SIZE);
		}
	}
}

static void atfork_parent(void)
{
	atomic_store(&hmm_fork_pending, false);
}

/* In the child: the parent's regions, descriptors and thread are not ours. */
static void atfork_child(void)
{
	atomic_store(&hmm_fork_pending, false);
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++)
		atomic_store(&hmm_regions[i], NULL);
	for (unsigned int i = 0; i < HMM_MAX_MMS; i++)
		atomic_store(&mms[i], NULL);
	atomic_store(&hmm_handlers_inflight, 0);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- create / destroy ----------------------------------------------------------------- */

void *hmm_map_aligned(size_t len)
{
	char *p = mmap(NULL, len + HMM_BLOCK_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (char *)cmn_align_up((uintptr_t)p, HMM_BLOCK_SIZE);
	if (a > p)
		munmap(p, a - p);
	munmap(a + len, (p + len + HMM_BLOCK_SIZE) - (a + len));
	madvise(a, len, MADV_HUGEPAGE);
	return a;
}

static int staging_init(struct hmm_mm *mm)
{
	for (unsigned int i = 0; i < HMM_NR_STAGING; i++) {
		struct hmm_staging *s = &mm->staging[i];

		cmn_mutex_init(&s->lock);
		s->in = hmm_map_aligned(STAGING_SIZE);
		s->out = hmm_map_aligned(STAGING_SIZE);
		if (!s->in || !s->out)
			return -ENOMEM;
		if (!mm->has_move)	/* mprotect backend, write-protect isolation */
			continue;
		int ret = hmm_uffd_register(mm->uffd, (uintptr_t)s->in, STAGING_SIZE, false);

		if (ret)
			return ret;
	}
	return 0;
}

static void staging_fini(struct hmm_mm *mm)
{
	for (unsigned int i = 0; i < HMM_NR_STAGING; i++) {
		struct hmm_staging *s = &mm->staging[i];

		if (s->in)
			munmap(s->in, STAGING_SIZE);
		if (s->out)
			munmap(s->out, STAGING_SIZE);
		cmn_mutex_destroy(&s->lock);
	}
}

/* PFN of the shared zero page; 0 if pagemap hides PFNs from us, or if the kernel gives a
 * read fault of private anonymous memory a page of its own (some builds never map the
 * zero page there). Two mappings read once each must show the same PFN: one page read
 * alone could be any free page, which the next allocation may take and which would then
 * be taken for the zero page. */
static uint64_t probe_zero_pfn(struct hmm_mm *mm)
{
	volatile char *p = mmap(NULL, 2 * HMM_PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
				-1, 0);
	uint64_t pm[2] = { 0, 0 };

	if (p == MAP_FAILED)
		return 0;
	(void)p[0];
	(void)p[HMM_PAGE_SIZE];
	if (hmm_pagemap_read(mm, (uintptr_t)p, 2, pm))
		pm[0] = pm[1] = 0;
	munmap((void *)p, 2 * HMM_PAGE_SIZE);
	if (!(pm[0] & pm[1] & HMM_PM_PRESENT) ||
	    (pm[0] & HMM_PM_PFN_MASK) != (pm[1] & HMM_PM_PFN_MASK))
		return 0;
	return pm[0] & HMM_PM_PFN_MASK;
}

static int mm_publish(struct hmm_mm *mm)
{
	int ret = -ENOSPC;

	cmn_mutex_lock(&mms_lock);
	for (unsigned int i = 0; i < HMM_MAX_MMS; i++) {
		if (!atomic_load(&mms[i])) {
			atomic_store(&mms[i], mm);
			ret = 0;
			break;
		}
	}
	cmn_mutex_unlock(&mms_lock);
	return ret;
}

static void mm_unpublish(struct hmm_mm *mm)
{
	cmn_mutex_lock(&mms_lock);
	for (unsigned int i = 0; i < HMM_MAX_MMS; i++) {
		if (atomic_load(&mms[i]) == mm)
			atomic_store(&mms[i], NULL);
	}
	cmn_mutex_unlock(&mms_lock);
}

static int opts_check(const struct hmm_mm_opts *o)
{
	if (o->backend != HMM_BACKEND_UFFD_THREAD && o->backend != HMM_BACKEND_UFFD_SIGBUS &&
	    o->backend != HMM_BACKEND_MPROTECT)
		return -EINVAL;
	if (o->granule != 4 * VGPU_KiB && o->granule != 64 * VGPU_KiB &&
	    o->granule != 2 * VGPU_MiB)
		return -EINVAL;
	return 0;
}

static void mm_close_fds(struct hmm_mm *mm)
{
	if (mm->pagemap_fd >= 0)
		close(mm->pagemap_fd);
	if (mm->kpageflags_fd >= 0)
		close(mm->kpageflags_fd);
	if (mm->maps_fd >= 0)
		close(mm->maps_fd);
	if (mm->mem_fd >= 0)
		close(mm->mem_fd);
}

/* The CPU-fault backend: a userfaultfd and its thread, or the SIGSEGV handler and the
 * /proc/self/mem write view of the mprotect backend. */
static int backend_open(struct hmm_mm *mm)
{
	if (!hmm_mm_prot(mm))
		return hmm_uffd_open(mm);
	mm->mem_fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	if (mm->mem_fd < 0)
		return -errno;
	return hmm_prot_install();
}

int hmm_mm_create(const struct hmm_mm_opts *opts, struct hmm_mm **out)
{
	struct hmm_uffd_caps caps;
	struct hmm_mm *mm;
	int ret;

	if (!out)
		return -EINVAL;
	hmm_uffd_probe(&caps);
	if (caps.invalid)
		return -EINVAL;
	mm = calloc(1, sizeof(*mm));
	if (!mm)
		return -ENOMEM;
	if (opts)
		mm->opts = *opts;
	if (!mm->opts.granule)
		mm->opts.granule = HMM_PAGE_SIZE;
	ret = opts_check(&mm->opts);
	if (ret)
		goto free_mm;
	cmn_mutex_init(&mm->lock);
	cmn_mutex_init(&mm->maps_lock);
	hmm_spare_init(mm);
	hmm_copier_init(&mm->copier);
	mm->uffd = mm->stop_fd = mm->mem_fd = -1;
	mm->procmap_query = caps.procmap_query;
	mm->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	mm->kpageflags_fd = open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
	mm->maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (mm->pagemap_fd < 0 || mm->maps_fd < 0) {
		ret = -errno;
		goto close_fds;
	}
	mm->zero_pfn = probe_zero_pfn(mm);
	ret = backend_open(mm);
	if (ret)
		goto close_fds;
	ret = staging_init(mm);
	if (!ret)
		ret = hmm_spare_map(mm);
	if (ret)
		goto close_staging;
	ret = mm_publish(mm);
	if (ret)
		goto close_staging;
	pthread_once(&atfork_once, atfork_register);
	*out = mm;
	return 0;
close_staging:
	hmm_spare_stop(mm);
	hmm_uffd_close(mm);
	staging_fini(mm);
close_fds:
	hmm_spare_fini(mm);
	mm_close_fds(mm);
	hmm_copier_fini(&mm->copier);
	cmn_mutex_destroy(&mm->maps_lock);
	cmn_mutex_destroy(&mm->lock);
free_mm:
	free(mm);
	return ret;
}

void hmm_mm_destroy(struct hmm_mm *mm)
{
	struct hmm_notify_range rel = { .start = 0, .end = UINTPTR_MAX,
					.event = HMM_EVENT_RELEASE,
					.flags = HMM_NOTIFY_BLOCKABLE };

	if (!mm)
		return;
	mm_unpublish(mm);
	handlers_drain();	/* a fault handler that found it there is done with it */
	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load(&hmm_regions[i]);

		if (r && r->mm == mm)
			region_teardown(mm, r);
	}
	hmm_notify_invalidate(mm, &rel);
	hmm_copier_fini(&mm->copier);
	hmm_spare_stop(mm);
	hmm_uffd_close(mm);
	/* no handler thread, no region of @mm left: nothing holds a retired one */
	hmm_mm_users_drain(mm);
	for (struct hmm_region *r = mm->retired, *next; r; r = next) {
		next = r->retired_next;
		region_free(r);
	}
	staging_fini(mm);
	hmm_spare_fini(mm);
	mm_close_fds(mm);
	cmn_mutex_destroy(&mm->maps_lock);
	cmn_mutex_destroy(&mm->lock);
	free(mm);
}
