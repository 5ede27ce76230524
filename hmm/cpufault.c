// SPDX-License-Identifier: MIT
/* hmm/cpufault.c - the one "migrate back" hook every CPU-fault backend calls (the
 * kernel's migrate_to_ram): claim the device pages of the fault granule, tell the
 * mirrors, copy them into the missing CPU pages with UFFDIO_COPY (or, mprotect backend,
 * through the write view, then unprotect), free the device pages.
 * Async-signal-safe: atomics, system calls and the notifier callbacks only. */
#include <errno.h>
#include <sys/mman.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

/* Claim every HMM_PS_DEVICE page of [start, end) for the trip back; returns how many. */
static size_t claim_device_pages(struct hmm_region *r, uintptr_t start, uintptr_t end,
				 uint64_t *words, uintptr_t *first, uintptr_t *last)
{
	size_t n = 0;

	for (uintptr_t a = start; a < end; a += HMM_PAGE_SIZE) {
		_Atomic uint64_t *w = hmm_region_word(r, a);
		uint64_t old = atomic_load(w);
		size_t i = (a - start) >> HMM_PAGE_SHIFT;

		words[i] = 0;
		while (hmm_ps_state(old) == HMM_PS_DEVICE) {
			uint64_t claimed = (old & ~HMM_PS_STATE_MASK) | HMM_PS_TO_SYSTEM;

			if (atomic_compare_exchange_weak(w, &old, claimed)) {
				words[i] = old;
				if (!n)
					*first = a;
				*last = a + HMM_PAGE_SIZE;
				n++;
				break;
			}
		}
	}
	return n;
}

/* Copy a run of claimed pages [a, a + npages) whose device pages are contiguous, the run
 * starting at page @i of its batch; sets the bit of each page it could not put back in
 * @left (indexed from the batch's start). */
static void copy_back_run(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a, uint64_t w,
			  size_t npages, size_t i, uint64_t *left)
{
	struct hmm_devmem *dm = atomic_load(&hmm_devmems[hmm_ps_dm(w)]);
	const char *src = hmm_devmem_page_ptr(dm, hmm_ps_page(w));
	size_t len = npages << HMM_PAGE_SHIFT, done = 0;
	long ret;

	if (r->prot) {
		uint64_t refused[HMM_BLOCK_PAGES / 64];

		/* data first, through the write view; only then may the page be read. A page
		 * the kernel keeps PROT_NONE stays on the device, its data there too: in
		 * system state its next faults would pass for the application's PROT_NONE. */
		if (hmm_prot_write(mm, r, a, src, len)) {
			for (size_t k = 0; k < npages; k++)
				cmn_set_bit(left, i + k);
			return;
		}
		if (hmm_prot_pages(a, npages, PROT_READ | PROT_WRITE, refused)) {
			for (size_t k = 0; k < npages; k++) {
				if (cmn_test_bit(refused, k))
					cmn_set_bit(left, i + k);
			}
		}
		return;
	}
	/* a page the application mapped there meanwhile counts as copied (it wins); the
	 * pages from one the kernel refused (no memory) on stay on the device */
	ret = hmm_uffd_copy(mm->uffd, a, src, len, false);
	if (ret > 0)
		done = (size_t)ret >> HMM_PAGE_SHIFT;
	for (size_t k = done; k < npages; k++)
		cmn_set_bit(left, i + k);
}

/* Process one batch of at most 2 MiB. */
static long fault_back_batch(struct hmm_mm *mm, struct hmm_region *r, uintptr_t start,
			     uintptr_t end, bool blockable)
{
	uint64_t words[HMM_BLOCK_PAGES], left[HMM_BLOCK_PAGES / 64] = { 0 };
	uintptr_t first = 0, last = 0;
	size_t n = claim_device_pages(r, start, end, words, &first, &last), back = 0;
	struct hmm_notify_range nr = { .start = first, .end = last, .event = HMM_EVENT_MIGRATE,
				       .flags = blockable ? HMM_NOTIFY_BLOCKABLE : 0 };
	uint64_t now;

	if (!n)
		return 0;
	/* owner NULL: every mirror, the owning device included, drops its mapping before
	 * the data moves */
	hmm_notify_invalidate(mm, &nr);
	for (uintptr_t a = first; a < last;) {
		size_t i = (a - start) >> HMM_PAGE_SHIFT, k = 1;

		if (!words[i]) {
			a += HMM_PAGE_SIZE;
			continue;
		}
		while (a + (k << HMM_PAGE_SHIFT) < last && words[i + k] &&
		       hmm_ps_dm(words[i + k]) == hmm_ps_dm(words[i]) &&
		       hmm_ps_page(words[i + k]) == hmm_ps_page(words[i]) + k)
			k++;
		copy_back_run(mm, r, a, words[i], k, i, left);
		a += k << HMM_PAGE_SHIFT;
	}
	now = hmm_mm_now(mm);
	for (uintptr_t a = first; a < last; a += HMM_PAGE_SIZE) {
		size_t i = (a - start) >> HMM_PAGE_SHIFT;

		if (!words[i])
			continue;
		/* Left out: still on the device, for the next fault to try again. Unless
		 * its page is gone (mprotect backend: an munmap nobody reported), where the
		 * data has nowhere to go and the device page would never be freed. With
		 * userfaultfd the unmap's event drops it (a REMAP moves it) instead. */
		if (cmn_test_bit(left, i) && !(r->prot && blockable && hmm_vma_gone(mm, a))) {
			atomic_store_explicit(hmm_region_word(r, a), words[i],
					      memory_order_release);
			continue;
		}
		atomic_store(&r->back_ns[(a - r->start) >> HMM_PAGE_SHIFT], now);
		atomic_store_explicit(hmm_region_word(r, a), HMM_PS_SYSTEM, memory_order_release);
		hmm_devmem_free_deferred(atomic_load(&hmm_devmems[hmm_ps_dm(words[i])]),
					 hmm_ps_page(words[i]));
		back++;
	}
	atomic_fetch_add_explicit(&mm->c_to_sys, back, memory_order_relaxed);
	return (long)back;
}

long hmm_fault_back_range(struct hmm_mm *mm, struct hmm_region *r, uintptr_t start,
			  uintptr_t end, bool blockable)
{
	long total = 0;

	for (uintptr_t a = start; a < end;) {
		uintptr_t e = cmn_min(cmn_align_down(a, HMM_BLOCK_SIZE) + HMM_BLOCK_SIZE, end);

		total += fault_back_batch(mm, r, a, e, blockable);
		a = e;
	}
	return total;
}

/* Wait until the page at @w is neither collected nor on its way back. A page collected
 * for the device is marked "CPU wins": the migration leaves it in system memory. The mark
 * is set by compare-and-swap on the collected word itself: an OR after the migration has
 * finished would leave the bit on a settled word, and collect() would skip that page for
 * good. */
static uint64_t wait_page_settled(struct hmm_mm *mm, _Atomic uint64_t *w, uintptr_t addr)
{
	unsigned int spins = 0;
	bool won = false;
	uint64_t old = atomic_load(w);

	for (;;) {
		switch (hmm_ps_state(old)) {
		case HMM_PS_TO_DEVICE:
			if (old & HMM_PS_CPU_WON)
				break;
			if (!atomic_compare_exchange_weak(w, &old, old | HMM_PS_CPU_WON))
				continue;	/* @old is the new word: look again */
			if (!won)
				atomic_fetch_add_explicit(&mm->c_cpu_won, 1, memory_order_relaxed);
			won = true;
			break;
		case HMM_PS_TO_SYSTEM:
			break;
		default:
			return old;
		}
		if (!spins)
			hmm_race_window(HMM_RACE_FAULT_WAIT, addr);
		hmm_relax(&spins);
		old = atomic_load(w);
	}
}

/* The page is claimed for the fill as a device page is for its trip back: without the
 * claim a migration could collect it between our look at @w and the fill and move its
 * data out, the zero page would then take its place and every write the page had seen
 * was lost (test_hmm_race "zero fill against migrations", "range fault zero fill against
 * a migration"). A faulting thread is woken by the caller once the claim is released, so
 * that it never sees its own page busy. */
int hmm_zero_fill_claimed(struct hmm_mm *mm, _Atomic uint64_t *pw, uint64_t w, uintptr_t addr)
{
	int ret;

	hmm_race_window(HMM_RACE_ZERO_FILL, addr);
	if (!atomic_compare_exchange_strong(pw, &w, (w & ~HMM_PS_STATE_MASK) | HMM_PS_TO_SYSTEM))
		return -EAGAIN;
	ret = hmm_uffd_zeropage(mm->uffd, addr, HMM_PAGE_SIZE, false);
	/* present: with write-protect isolation this may be the write fault of a page a
	 * migration let go; its protection is gone then, but make sure under the claim
	 * (no migration can collect the page meanwhile) so the write cannot loop */
	if (ret == -EEXIST && mm->has_wp)
		hmm_uffd_wp(mm->uffd, addr, HMM_PAGE_SIZE, false, false);
	atomic_store_explicit(pw, HMM_PS_SYSTEM, memory_order_release);
	if (!ret)
		atomic_fetch_add_explicit(&mm->c_zero_fills, 1, memory_order_relaxed);
	return ret == -EEXIST ? 0 : ret;
}

int hmm_cpu_fault(struct hmm_mm *mm, struct hmm_region *r, uintptr_t addr, bool blockable,
		  bool wake)
{
	uint64_t g = mm->opts.granule;
	uintptr_t gs = cmn_max(cmn_align_down(addr, g), r->start);
	uintptr_t ge = cmn_min(cmn_align_down(addr, g) + g, r->end);
	_Atomic uint64_t *pw = hmm_region_word(r, addr);
	uint64_t w;
	int ret = 0;

	do {
		w = wait_page_settled(mm, pw, addr);
		if (hmm_ps_state(w) != HMM_PS_SYSTEM || r->prot)
			break;
		/* missing and not on a device (or brought back by someone else meanwhile) */
		ret = hmm_zero_fill_claimed(mm, pw, w, addr);
	} while (ret == -EAGAIN);
	if (hmm_ps_state(w) == HMM_PS_SYSTEM) {
		/* filled, present, or (prot) brought back by another thread: just retry */
	} else {
		long n = hmm_fault_back_range(mm, r, gs, ge, blockable);

		atomic_fetch_add_explicit(&mm->c_cpu_faults, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&mm->c_cpu_fault_pages, (uint64_t)(n > 0 ? n : 0),
					  memory_order_relaxed);
		/* the kernel refused to put the page back: the access faults again */
		if (hmm_ps_state(atomic_load(pw)) == HMM_PS_DEVICE)
			ret = -ENOMEM;
	}
	if (wake && !r->prot)
		hmm_uffd_wake(mm->uffd, addr, HMM_PAGE_SIZE);
	return ret;
}
