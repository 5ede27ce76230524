// SPDX-License-Identifier: MIT
/* Page requests through hmm: the IOMMU's PRI handler for a PASID bound to this process.
 * A request is served in the thread that raised it (the IOMMU calls the handler there):
 * hmm_range_fault() on the one page with a fault asked for, as a CPU access would make it
 * present - MADV_POPULATE for pages never touched, swapped out or dropped from the page
 * cache, the backend's own path for managed pages, and migration back for pages kept in
 * device memory (the device reaches SVA memory only at its CPU address). Then the
 * response: Success once the page is there, Invalid when hmm refuses it, so that the
 * IOMMU's retry, or its fault, follows at once. */
#include <errno.h>

#include "common/log.h"
#include "hmm/hmm_internal.h"
#include "iommu_model/iommu.h"

/* hmm_range_fault retries while an invalidation overlaps it; a page request is one page,
 * so a few rounds are enough unless the range is being torn down, and then the IOMMU's
 * own retry faults as it should. */
#define PRI_RANGE_TRIES	8

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
	int ret = -EBUSY;

	if (!p || !p->notifier.mm || r.start > UINTPTR_MAX - HMM_PAGE_SIZE)
		return -EINVAL;
	r.end = r.start + HMM_PAGE_SIZE;
	for (int i = 0; i < PRI_RANGE_TRIES && ret == -EBUSY; i++) {
		r.notifier_seq = hmm_interval_read_begin(&p->notifier);
		pfn = 0;
		ret = hmm_range_fault(&r);
		atomic_fetch_add(&p->faulted, r.faulted);
	}
	return ret;
}

static void pri_handler(void *ctx, const struct iommu_page_request *req)
{
	struct hmm_pri *p = ctx;
	enum iommu_prg_code code = IOMMU_PRG_INVALID;

	atomic_fetch_add(&p->requests, 1);
	/* Another PASID of the function is another address space: not this process's. */
	if (req->pasid == p->pasid && req->addr <= UINTPTR_MAX &&
	    !hmm_pri_serve_page(p, (uintptr_t)req->addr, req->access & IOMMU_WRITE))
		code = IOMMU_PRG_SUCCESS;
	atomic_fetch_add(code == IOMMU_PRG_SUCCESS ? &p->served : &p->invalid, 1);
	if (iommu_page_response(p->mmu, req->rid, req->prg_index, code))
		cmn_warn("hmm: PRI: RID %u group %u: no response taken", req->rid,
			 req->prg_index);
}

int hmm_pri_attach(struct hmm_pri *p, struct hmm_mm *mm, struct iommu *mmu, unsigned int rid,
		   uint32_t pasid, unsigned int max_outstanding)
{
	int ret;

	if (!p || !mm || !mmu || rid >= IOMMU_MAX_FUNCS || pasid > IOMMU_PASID_MAX)
		return -EINVAL;
	*p = (struct hmm_pri){ .mmu = mmu, .rid = rid, .pasid = pasid };
	ret = hmm_interval_notifier_insert(&p->notifier, mm, 0, UINTPTR_MAX, NULL,
					   &pri_notifier_ops);
	if (ret)
		return ret;
	ret = iommu_pri_enable(mmu, rid, max_outstanding, pri_handler, p);
	if (ret) {
		hmm_interval_notifier_remove(&p->notifier);
		p->notifier.mm = NULL;
	}
	return ret;
}

void hmm_pri_detach(struct hmm_pri *p)
{
	if (!p || !p->notifier.mm)
		return;
	iommu_pri_disable(p->mmu, p->rid);
	hmm_interval_notifier_remove(&p->notifier);
	p->notifier.mm = NULL;
}

void hmm_pri_get_stats(struct hmm_pri *p, struct hmm_pri_stats *st)
{
	*st = (struct hmm_pri_stats){ .requests = atomic_load(&p->requests),
				      .served = atomic_load(&p->served),
				      .invalid = atomic_load(&p->invalid),
				      .faulted = atomic_load(&p->faulted) };
}
