// SPDX-License-Identifier: MIT
/* Serving one page request from an hmm mm: the part of PRI through hmm that needs no IOMMU,
 * so that a process whose page requests are forwarded to it (a guest of vgpud, which owns
 * the IOMMU) links it without the IOMMU model. hmm/pri.c adds the IOMMU's handler. */
#include <errno.h>

#include "common/clock.h"
#include "hmm/hmm_internal.h"

/* hmm_range_fault gives -EBUSY when any invalidation of the process ran meanwhile (the
 * notifier covers the whole address space), and a process migrating other memory makes
 * one every few microseconds: retry until a round goes through, as the kernel's drivers
 * do, for up to a quarter of the IOMMU's default page response timeout (1 s). A count
 * would not do: under a sanitizer or a loaded CPU one round takes long enough for every
 * round to overlap an invalidation of a busy neighbour. Only a range being torn down
 * outlasts it, and then the IOMMU's own retry faults as it should. */
#define PRI_RANGE_BUDGET_NS	(250 * VGPU_NSEC_PER_MSEC)

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

int hmm_pri_serve_page(struct hmm_pri *p, uintptr_t addr, bool write)
{
	uint64_t pfn = 0;
	struct hmm_range r = {
		.notifier = &p->notifier,
		.start = addr & ~(uintptr_t)(HMM_PAGE_SIZE - 1),
		.hmm_pfns = &pfn,
		.default_flags = HMM_PFN_REQ_FAULT | (write ? HMM_PFN_REQ_WRITE : 0),
	};
	uint64_t deadline = cmn_deadline_ns(PRI_RANGE_BUDGET_NS);
	int ret;

	if (!p || !p->notifier.mm || r.start > UINTPTR_MAX - HMM_PAGE_SIZE)
		return -EINVAL;
	r.end = r.start + HMM_PAGE_SIZE;
	do {
		r.notifier_seq = hmm_interval_read_begin(&p->notifier);
		pfn = 0;
		ret = hmm_range_fault(&r);
		atomic_fetch_add(&p->faulted, r.faulted);
	} while (ret == -EBUSY && !cmn_deadline_passed(deadline));
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
