// SPDX-License-Identifier: MIT
/* hmm/exclusive.c - device-exclusive access, the kernel's make_device_exclusive(): a
 * device takes system pages away from the CPU for its atomics without moving them. The
 * page keeps its data in place and is made PROT_NONE (every backend: userfaultfd cannot
 * take access away from a present page); the first CPU access lands in the SIGSEGV
 * handler (hmm/mprotect.c), which gives the page back and fires HMM_EVENT_EXCLUSIVE so
 * the device drops its atomic mapping, as restore_exclusive_pte() does. */
#include <errno.h>
#include <sys/mman.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

int hmm_exclusive_revoke(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a,
			 bool blockable)
{
	_Atomic uint64_t *w = hmm_region_word(r, a);
	uint64_t old = atomic_load(w);
	struct hmm_notify_range nr = { .start = a, .end = a + HMM_PAGE_SIZE,
				       .event = HMM_EVENT_EXCLUSIVE,
				       .flags = blockable ? HMM_NOTIFY_BLOCKABLE : 0 };
	int ret;

	if (hmm_ps_state(old) != HMM_PS_EXCLUSIVE ||
	    !atomic_compare_exchange_strong(w, &old, (old & ~HMM_PS_STATE_MASK) | HMM_PS_TO_SYSTEM))
		return 0;	/* someone else gives it back */
	/* owner NULL: the device holding it drops its atomic mapping before the CPU goes on */
	hmm_notify_invalidate(mm, &nr);
	ret = hmm_prot_set(a, HMM_PAGE_SIZE, true);
	/* Still PROT_NONE: "system" would have the next faults end at the previous handler;
	 * exclusive (its device mapping gone) has the next access try again. Unless the
	 * page is gone (an munmap), where nothing would ever give it back. */
	if (ret && !(blockable && hmm_vma_gone(mm, a))) {
		atomic_store_explicit(w, old, memory_order_release);
		return ret;
	}
	atomic_store_explicit(w, HMM_PS_SYSTEM, memory_order_release);
	atomic_fetch_add_explicit(&mm->c_excl_revoked, 1, memory_order_relaxed);
	return 0;
}

long hmm_exclusive_revoke_range(struct hmm_mm *mm, struct hmm_region *r, uintptr_t start,
				uintptr_t end)
{
	long n = 0;

	for (uintptr_t a = start; a < end; a += HMM_PAGE_SIZE) {
		if (hmm_ps_state(atomic_load(hmm_region_word(r, a))) != HMM_PS_EXCLUSIVE)
			continue;
		if (!hmm_exclusive_revoke(mm, r, a, true))
			n++;
	}
	return n;
}

/* Every page of [start, end) managed by @mm, in a readable and writable VMA. */
static int exclusive_check(struct hmm_mm *mm, uintptr_t start, uintptr_t end)
{
	for (uintptr_t a = start; a < end; a += HMM_PAGE_SIZE) {
		struct hmm_region *r = hmm_region_find(a);

		if (!r || r->mm != mm || atomic_load(&r->dying))
			return -EINVAL;
	}
	for (uintptr_t a = start; a < end;) {
		struct hmm_vma v;

		if (hmm_vma_find(mm, a, &v) || v.start > a)
			return -EFAULT;
		if ((!v.read || !v.write) && !hmm_page_prot_ours(mm, a))
			return -EPERM;
		a = cmn_min(v.end, end);
	}
	return 0;
}

/* Take page @a: wait out migrations, bring a device copy back, then claim it. */
static void exclusive_take(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a)
{
	_Atomic uint64_t *w = hmm_region_word(r, a);
	unsigned int spins = 0;

	for (;;) {
		uint64_t old = atomic_load(w);

		switch (hmm_ps_state(old)) {
		case HMM_PS_SYSTEM:
			if (atomic_compare_exchange_weak(w, &old, HMM_PS_EXCLUSIVE))
				return;
			break;
		case HMM_PS_EXCLUSIVE:
			return;		/* already (another owner's grant is taken over) */
		case HMM_PS_DEVICE:
			hmm_fault_back_range(mm, r, a, a + HMM_PAGE_SIZE, true);
			break;
		default:
			hmm_relax(&spins);
			break;
		}
	}
}

/* Device copies back, then a write fault that breaks COW and fills holes: the device
 * gets pages that are this process's alone. Pages already exclusive stay so (the
 * caller's retry after a seq change must not revoke what it just got). */
static int exclusive_prepare(struct hmm_mm *mm, uintptr_t start, uintptr_t end)
{
	for (uintptr_t a = start; a < end;) {
		struct hmm_region *r = hmm_region_find(a);
		uintptr_t e = a;

		hmm_fault_back_range(mm, r, a, a + HMM_PAGE_SIZE, true);
		while (e < end && hmm_region_find(e) == r &&
		       hmm_ps_state(atomic_load(hmm_region_word(r, e))) != HMM_PS_EXCLUSIVE) {
			hmm_fault_back_range(mm, r, e, e + HMM_PAGE_SIZE, true);
			e += HMM_PAGE_SIZE;
		}
		if (e > a && madvise((void *)a, e - a, MADV_POPULATE_WRITE))
			return errno == ENOMEM ? -EFAULT : -errno;
		a = e > a ? e : a + HMM_PAGE_SIZE;
	}
	return 0;
}

static int make_exclusive(struct hmm_mm *mm, uintptr_t start, uintptr_t end, const void *owner,
			  uint64_t *pfns)
{
	size_t len = end - start;
	struct hmm_notify_range nr = { .start = start, .end = end, .event = HMM_EVENT_EXCLUSIVE,
				       .owner = owner, .flags = HMM_NOTIFY_BLOCKABLE };
	int ret = exclusive_check(mm, start, end);

	if (ret)
		return ret;
	ret = hmm_prot_install();
	if (ret)
		return ret;
	ret = exclusive_prepare(mm, start, end);
	if (ret)
		return ret;
	hmm_notify_invalidate(mm, &nr);
	for (uintptr_t a = start; a < end; a += HMM_PAGE_SIZE)
		exclusive_take(mm, hmm_region_find(a), a);
	/* state first, then protection: a CPU access can only fault once the state says
	 * whose the page is */
	ret = hmm_prot_set(start, len, false);
	if (ret) {
		for (uintptr_t a = start; a < end; a += HMM_PAGE_SIZE)
			atomic_store(hmm_region_word(hmm_region_find(a), a), HMM_PS_SYSTEM);
		return ret;
	}
	for (size_t i = 0; i < len >> HMM_PAGE_SHIFT; i++)
		pfns[i] = HMM_PFN_VALID | HMM_PFN_WRITE | ((start >> HMM_PAGE_SHIFT) + i);
	atomic_fetch_add_explicit(&mm->c_excl, len >> HMM_PAGE_SHIFT, memory_order_relaxed);
	return 0;
}

int hmm_make_exclusive(struct hmm_mm *mm, void *addr, size_t len, const void *owner,
		       uint64_t *pfns)
{
	uintptr_t start = (uintptr_t)addr, end = start + len;
	int ret;

	if (!mm || !pfns || !len || !cmn_is_aligned(start, HMM_PAGE_SIZE) ||
	    !cmn_is_aligned(len, HMM_PAGE_SIZE) || end < start)
		return -EINVAL;
	hmm_mm_use(mm);		/* a region being removed is not taken */
	ret = make_exclusive(mm, start, end, owner, pfns);
	hmm_mm_unuse(mm);
	return ret;
}
