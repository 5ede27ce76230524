// SPDX-License-Identifier: MIT
/* Serving one page request from an hmm mm: the part of PRI through hmm that needs no IOMMU,
 * so that a process whose page requests are forwarded to it (a guest of vgpud, which owns
 * the IOMMU) links it without the IOMMU model. hmm/pri.c adds the IOMMU's handler. */
#include <errno.h>

#include "common/clock.h"
#include "hmm/hmm_internal.h"

/* hmm_range_fault gives -EBUSY when an invalidation its notifier covers ran meanwhile:
 * retry until a round goes through, as the kernel's drivers do, for up to a quarter of the
 * IOMMU's default page response timeout (1 s). Each request watches only its own page
 * (pri_page_watch()): with the attach's notifier, which covers the whole address space, a
 * process migrating other memory invalidates every few microseconds, and on a loaded host
 * one round takes long enough for every round to overlap one of those until the budget is
 * gone. Only the page itself being torn down outlasts it, and then the IOMMU's own retry
 * faults as it should. */
#define PRI_RANGE_BUDGET_NS	(250 * VGPU_NSEC_PER_MSEC)
/* A round that brought the page in ends in -EBUSY as well: bringing a device page back is
 * an invalidation of that very page. The round after it finds the page there, so each such
 * round earns one more past the budget (a loaded host can make one round take longer than
 * the whole budget), up to this many: a page taken away again and again still ends. */
#define PRI_FAULTED_ROUNDS	4u

/* The request handler keeps nothing mapped, so an invalidation only moves the sequence
 * that hmm_range_fault checks. */
static bool pri_invalidate(struct hmm_interval_notifier *sub, const struct hmm_notify_range *r,
			   uint64_t cur_seq)
{
	(void)r;
	hmm_interval_set_seq(sub, cur_seq);
	return true;
}

static const struct hmm_interval_notifier_ops pri_notifier_ops = {
	.invalidate = pri_invalidate,
};

/* The notifier a request at [start, start + page) is checked against: @page, inserted
 * over that page alone, or where the mm has no notifier slot left, the attach's own. */
static struct hmm_interval_notifier *pri_page_watch(struct hmm_pri *p,
						    struct hmm_interval_notifier *page,
						    uintptr_t start)
{
	*page = (struct hmm_interval_notifier){ .mm = NULL };
	if (hmm_interval_notifier_insert(page, p->notifier.mm, start, HMM_PAGE_SIZE, NULL,
					 &pri_notifier_ops))
		return &p->notifier;
	return page;
}

int hmm_pri_serve_page(struct hmm_pri *p, uintptr_t addr, bool write)
{
	struct hmm_interval_notifier page;
	uint64_t pfn = 0;
	struct hmm_range r = {
		.start = addr & ~(uintptr_t)(HMM_PAGE_SIZE - 1),
		.hmm_pfns = &pfn,
		.default_flags = HMM_PFN_REQ_FAULT | (write ? HMM_PFN_REQ_WRITE : 0),
	};
	uint64_t deadline = cmn_deadline_ns(PRI_RANGE_BUDGET_NS);
	unsigned int extra = 0;
	int ret;

	if (!p || !p->notifier.mm || r.start > UINTPTR_MAX - HMM_PAGE_SIZE)
		return -EINVAL;
	r.end = r.start + HMM_PAGE_SIZE;
	r.notifier = pri_page_watch(p, &page, r.start);
	do {
		r.notifier_seq = hmm_interval_read_begin(r.notifier);
		pfn = 0;
		ret = hmm_range_fault(&r);
		atomic_fetch_add(&p->faulted, r.faulted);
	} while (ret == -EBUSY && (!cmn_deadline_passed(deadline) ||
				   (r.faulted && extra++ < PRI_FAULTED_ROUNDS)));
	if (r.notifier == &page)
		hmm_interval_notifier_remove(&page);
	return ret;
}

int hmm_pri_attach_mm(struct hmm_pri *p, struct hmm_mm *mm)
{
	int ret;

	if (!p || !mm)
		return -EINVAL;
	*p = (struct hmm_pri){ .mmu = NULL };
	ret = hmm_interval_notifier_insert(&p->notifier, mm, 0, UINTPTR_MAX, NULL,
					   &pri_notifier_ops);
	if (ret)
		p->notifier.mm = NULL;
	return ret;
}

void hmm_pri_detach_mm(struct hmm_pri *p)
{
	if (!p || !p->notifier.mm)
		return;
	hmm_interval_notifier_remove(&p->notifier);
	p->notifier.mm = NULL;
}
