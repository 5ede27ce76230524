// SPDX-License-Identifier: MIT
/* hmm/range.c - hmm_range_fault(): the kernel's page walk re-done from user space.
 *
 * A segment at a time (one VMA, at most 2 MiB): VMA rules first (no VMA, no read,
 * special -> ERROR or -EFAULT; write asked on read-only -> -EPERM), then the pagemap
 * of the segment, then the managed-page states. Pages that must be faulted are faulted
 * with MADV_POPULATE_READ/WRITE (handle_mm_fault from user space: it fails cleanly on a
 * range unmapped under us instead of crashing, and lets a third party's userfaultfd
 * serve the fault), managed pages through the backend's own calls, device pages of other
 * owners through the migrate-back hook; the segment is then walked again. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

#define SEG_PAGES	HMM_BLOCK_PAGES
#define REQ_MASK	(HMM_PFN_REQ_FAULT | HMM_PFN_REQ_WRITE)

struct walk {
	struct hmm_range *range;
	struct hmm_mm *mm;
	bool refault;			/* something was faulted: walk the segment again */
};

static uint64_t page_req(const struct hmm_range *r, size_t i)
{
	uint64_t req = ((r->hmm_pfns[i] & r->pfn_flags_mask) | r->default_flags) & REQ_MASK;

	return (req & HMM_PFN_REQ_WRITE) ? req | HMM_PFN_REQ_FAULT : req;
}

static size_t page_index(const struct hmm_range *r, uintptr_t a)
{
	return (a - r->start) >> HMM_PAGE_SHIFT;
}

/* [a, e) has no usable VMA: ERROR everywhere, or -EFAULT if a fault was asked for. */
static int walk_error(struct walk *w, uintptr_t a, uintptr_t e)
{
	for (uintptr_t x = a; x < e; x += HMM_PAGE_SIZE) {
		if (page_req(w->range, page_index(w->range, x)) & HMM_PFN_REQ_FAULT)
			return -EFAULT;
	}
	for (uintptr_t x = a; x < e; x += HMM_PAGE_SIZE)
		w->range->hmm_pfns[page_index(w->range, x)] = HMM_PFN_ERROR;
	return 0;
}

static int populate(uintptr_t a, size_t n, bool write)
{
	if (!madvise((void *)a, n << HMM_PAGE_SHIFT,
		     write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ))
		return 0;
	switch (errno) {
	case EINTR:
	case EAGAIN:
		return 0;	/* walk again */
	case ENOMEM:		/* unmapped under us */
	case EFAULT:
	case EINVAL:
	case EHWPOISON:
		return -EFAULT;
	default:
		return -errno;
	}
}

/* Managed page @a in state @st: report it or fault it. */
static int walk_managed(struct walk *w, struct hmm_region *reg, uintptr_t a, uint64_t st,
			uint64_t req, bool present, const struct hmm_vma *v, uint64_t *out)
{
	struct hmm_range *r = w->range;

	switch (hmm_ps_state(st)) {
	case HMM_PS_TO_DEVICE:
	case HMM_PS_TO_SYSTEM:
		w->refault = true;	/* a migration entry: wait for it */
		return 0;
	case HMM_PS_EXCLUSIVE:
		/* a device-exclusive entry is faulted (given back) whoever asks, the owner
		 * included, or reported as not present */
		if (!(req & HMM_PFN_REQ_FAULT))
			return 0;
		hmm_exclusive_revoke(w->mm, reg, a, true);
		r->faulted++;
		w->refault = true;
		return 0;
	case HMM_PS_DEVICE: {
		struct hmm_devmem *dm = atomic_load(&hmm_devmems[hmm_ps_dm(st)]);

		if (dm && r->dev_private_owner && hmm_devmem_owner(dm) == r->dev_private_owner) {
			*out = HMM_PFN_VALID | HMM_PFN_DEVICE | hmm_ps_page(st) |
			       ((st & HMM_PS_DEV_WRITE) && v->write ? HMM_PFN_WRITE : 0);
			return 0;
		}
		if (!(req & HMM_PFN_REQ_FAULT))
			return 0;
		r->faulted += (unsigned long)hmm_fault_back_range(w->mm, reg, a, a + HMM_PAGE_SIZE,
								  true);
		w->refault = true;
		return 0;
	}
	default:
		break;
	}
	/* mprotect backend: a missing page is an ordinary one (no userfaultfd behind it) */
	if (present || !(req & HMM_PFN_REQ_FAULT) || reg->prot)
		return 1;	/* an ordinary page */
	/* missing, never touched: fill it as the fault would, claimed as the fault does it;
	 * a write breaks the zero page's COW on the walk again, and is counted there */
	if (!hmm_zero_fill_claimed(w->mm, hmm_region_word(reg, a), st, a)) {
		hmm_uffd_wake(w->mm->uffd, a, HMM_PAGE_SIZE);
		r->faulted += !(req & HMM_PFN_REQ_WRITE);
	}
	w->refault = true;
	return 0;
}

/* Output word of a present system page. */
static uint64_t system_word(const struct walk *w, uintptr_t a, uint64_t pm,
			    const struct hmm_vma *v)
{
	uint64_t pfn = pm & HMM_PM_PFN_MASK;
	bool zero = w->mm->zero_pfn && pfn == w->mm->zero_pfn;
	/* pagemap has no PTE write bit: a private page is writable once it is ours alone
	 * (anonymous, exclusive: no COW pending); a shared mapping's page is writable as
	 * soon as it is present in a writable VMA */
	bool write = v->write && !zero &&
		     (v->shared || ((pm & HMM_PM_EXCLUSIVE) && !(pm & HMM_PM_FILE)));

	return HMM_PFN_VALID | (write ? HMM_PFN_WRITE : 0) | (zero ? HMM_PFN_ZERO : 0) |
	       (a >> HMM_PAGE_SHIFT);
}

/* Whole 2 MiB THP mappings inside [a, e) get map order 9. */
static void mark_thp(struct walk *w, uintptr_t a, uintptr_t e, const uint64_t *pm)
{
	struct hmm_range *r = w->range;

	for (uintptr_t b = cmn_align_up(a, HMM_BLOCK_SIZE); b + HMM_BLOCK_SIZE <= e;
	     b += HMM_BLOCK_SIZE) {
		const uint64_t *p = &pm[(b - a) >> HMM_PAGE_SHIFT];
		size_t base = page_index(r, b);
		uint64_t *out = &r->hmm_pfns[base];
		bool ok;

		if (out[0] & HMM_PFN_DEVICE) {
			/* a whole naturally aligned device chunk is a device "PMD" */
			uint64_t first = out[0] & HMM_PFN_VALUE_MASK;

			ok = !(first % HMM_BLOCK_PAGES);
			for (size_t i = 1; ok && i < HMM_BLOCK_PAGES; i++)
				ok = (out[i] & HMM_PFN_DEVICE) &&
				     (out[i] & HMM_PFN_VALUE_MASK) == first + i;
		} else {
			ok = (out[0] & HMM_PFN_VALID) && (p[0] & HMM_PM_PRESENT) &&
			     hmm_pfn_is_thp(w->mm, p[0]);
			for (size_t i = 1; ok && i < HMM_BLOCK_PAGES; i++)
				ok = (p[i] & HMM_PM_PRESENT) &&
				     (p[i] & HMM_PM_PFN_MASK) == (p[0] & HMM_PM_PFN_MASK) + i &&
				     (out[i] & HMM_PFN_VALID) && !(out[i] & HMM_PFN_DEVICE);
		}
		for (size_t i = 0; ok && i < HMM_BLOCK_PAGES; i++)
			r->hmm_pfns[base + i] |= 9ull << HMM_PFN_ORDER_SHIFT;
	}
}

/* Fault the run [a, a + n) of ordinary pages. */
static int fault_run(struct walk *w, uintptr_t a, size_t n, bool write)
{
	int ret = populate(a, n, write);

	if (ret)
		return ret;
	w->range->faulted += n;
	w->refault = true;
	return 0;
}

/* One VMA segment [a, e), e - a <= 2 MiB. */
static int walk_segment(struct walk *w, uintptr_t a, uintptr_t e, const struct hmm_vma *v)
{
	struct hmm_range *r = w->range;
	uint64_t pm[SEG_PAGES];
	size_t n = (e - a) >> HMM_PAGE_SHIFT;
	uintptr_t run = 0, span_end = 0;
	struct hmm_region *reg = NULL;
	size_t run_n = 0;
	bool run_write = false;
	int ret = hmm_pagemap_read(w->mm, a, n, pm);

	if (ret)
		return ret;
	for (size_t k = 0; k <= n; k++) {
		uintptr_t x = a + (k << HMM_PAGE_SHIFT);
		size_t i = page_index(r, x);
		uint64_t req = k < n ? page_req(r, i) : 0, out = 0;
		bool present = k < n && (pm[k] & HMM_PM_PRESENT);
		bool need = false;

		if (k < n) {
			int sys = 1;

			if (x >= span_end)	/* one region lookup per region or gap */
				reg = hmm_region_find_span(x, &span_end);

			if ((req & HMM_PFN_REQ_WRITE) && !v->write)
				return -EPERM;
			if (reg && reg->mm == w->mm) {
				sys = walk_managed(w, reg, x, atomic_load(hmm_region_word(reg, x)),
						   req, present, v, &out);
			}
			if (sys == 1 && present) {
				out = system_word(w, x, pm[k], v);
				need = (req & HMM_PFN_REQ_WRITE) && !(out & HMM_PFN_WRITE);
			} else if (sys == 1) {
				need = req & HMM_PFN_REQ_FAULT;
			}
			r->hmm_pfns[i] = out;
		}
		bool wr = req & HMM_PFN_REQ_WRITE;

		/* a run is faulted one way: read faults must not turn into write faults */
		if (need && run_n && wr == run_write) {
			run_n++;
			continue;
		}
		if (run_n) {
			ret = fault_run(w, run, run_n, run_write);
			if (ret)
				return ret;
			run_n = 0;
		}
		if (need) {
			run = x;
			run_n = 1;
			run_write = wr;
		}
	}
	mark_thp(w, a, e, pm);
	return 0;
}

/* [a, e) is PROT_NONE by the library's doing (a device page of the mprotect backend, a
 * device-exclusive page), not the application's. */
static bool prot_vma_is_ours(struct hmm_mm *mm, uintptr_t a, uintptr_t e)
{
	for (; a < e; a += HMM_PAGE_SIZE) {
		if (hmm_page_prot_ours(mm, a))
			return true;
	}
	return false;
}

/* Walk from @a up to the end of its VMA (or of the hole before the next one); sets *next.
 * @v is looked up unless @reuse: the same segment walked again after faulting pages in,
 * which changes no VMA (a change the application reports bumps the sequence and ends the
 * walk; without PROCMAP_QUERY a lookup parses /proc/self/maps, the walk's largest cost). */
static int walk_one(struct walk *w, uintptr_t a, uintptr_t *next, struct hmm_vma *vp,
		    bool reuse)
{
	struct hmm_range *r = w->range;
	struct hmm_vma v;
	int ret = reuse ? 0 : hmm_vma_find(w->mm, a, vp);

	if (ret == -ENOENT || (!ret && vp->start >= r->end)) {
		*next = r->end;
		return walk_error(w, a, r->end);
	}
	if (ret)
		return ret;
	v = *vp;
	if (v.start > a) {
		*next = v.start;
		return walk_error(w, a, v.start);
	}
	*next = cmn_min(cmn_min(v.end, r->end), cmn_align_down(a, HMM_BLOCK_SIZE) + HMM_BLOCK_SIZE);
	if (!v.read && !v.special && prot_vma_is_ours(w->mm, a, *next))
		v.read = v.write = true;	/* device pages of the mprotect backend */
	if (!v.read || v.special)
		return walk_error(w, a, *next);
	return walk_segment(w, a, *next, &v);
}

static int range_check(const struct hmm_range *r)
{
	if (!r || !r->notifier || !r->hmm_pfns || r->start >= r->end ||
	    !cmn_is_aligned(r->start, HMM_PAGE_SIZE) || !cmn_is_aligned(r->end, HMM_PAGE_SIZE))
		return -EINVAL;
	if (r->start < r->notifier->start || r->end > r->notifier->end)
		return -EINVAL;
	return 0;
}

static int range_fault(struct hmm_range *range)
{
	struct walk w = { .range = range, .mm = range->notifier->mm };
	uint64_t deadline;
	int ret;

	range->faulted = 0;
	deadline = cmn_deadline_ns(range->timeout_ns ? range->timeout_ns
						     : HMM_RANGE_DEFAULT_TIMEOUT_NS);
	for (uintptr_t a = range->start; a < range->end;) {
		uintptr_t next;
		unsigned int spins = 0;
		struct hmm_vma v;
		bool again = false;

		for (;;) {
			if (hmm_interval_check_retry(range->notifier, range->notifier_seq))
				return -EBUSY;
			w.refault = false;
			ret = walk_one(&w, a, &next, &v, again);
			if (ret)
				return ret;
			if (!w.refault)
				break;
			/* Walk the same segment again. The first walk's faults always get that
			 * look, however long a loaded host made them take: the timeout is for
			 * pages that stay in motion (another thread's migration), and a fault
			 * that merely took long would otherwise end in -EBUSY with its page in. */
			if (again && cmn_deadline_passed(deadline))
				return -EBUSY;
			hmm_relax(&spins);
			again = true;
		}
		a = next;
	}
	return hmm_interval_check_retry(range->notifier, range->notifier_seq) ? -EBUSY : 0;
}

int hmm_range_fault(struct hmm_range *range)
{
	int ret = range_check(range);

	if (ret)
		return ret;
	hmm_mm_use(range->notifier->mm);	/* the walk keeps region pointers */
	ret = range_fault(range);
	hmm_mm_unuse(range->notifier->mm);
	return ret;
}
