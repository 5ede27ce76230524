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
	ret = hmm_pri_attach_mm(p, mm);
	if (ret)
		return ret;
	p->mmu = mmu;
	p->rid = rid;
	p->pasid = pasid;
	ret = iommu_pri_enable(mmu, rid, max_outstanding, pri_handler, p);
	if (ret)
		hmm_pri_detach_mm(p);
	return ret;
}

void hmm_pri_detach(struct hmm_pri *p)
{
	if (!p || !p->notifier.mm)
		return;
	if (p->mmu)
		iommu_pri_disable(p->mmu, p->rid);
	hmm_pri_detach_mm(p);
}

void hmm_pri_get_stats(struct hmm_pri *p, struct hmm_pri_stats *st)
{
	*st = (struct hmm_pri_stats){ .requests = atomic_load(&p->requests),
				      .served = atomic_load(&p->served),
				      .invalid = atomic_load(&p->invalid),
				      .faulted = atomic_load(&p->faulted) };
}
