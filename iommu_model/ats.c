// SPDX-License-Identifier: MIT
/* ATS invalidation: Invalidate Requests to a function's device-side translation cache,
 * tagged with one of 32 ITags, each answered by a completion. Unmap waits for them. The
 * device side either answers at once (default) or when the device model polls. */
#include <errno.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "iommu_model/iommu_internal.h"

void iommu_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

/* Wait on @c until woken or @deadline (monotonic ns). -ETIMEDOUT once it passed. */
int iommu_cond_wait_until(pthread_cond_t *c, struct cmn_mutex *mx, uint64_t deadline)
{
	struct timespec ts = { (time_t)(deadline / VGPU_NSEC_PER_SEC),
			       (long)(deadline % VGPU_NSEC_PER_SEC) };
	int ret;

	if (cmn_now_ns() >= deadline)
		return -ETIMEDOUT;
	ret = cmn_cond_timedwait(c, mx, &ts);
	return ret == ETIMEDOUT ? -ETIMEDOUT : 0;
}

void iommu_ats_init(struct iommu_fn *fn)
{
	cmn_mutex_init(&fn->ats.lock);
	iommu_cond_init(&fn->ats.cond);
}

void iommu_ats_fini(struct iommu *mmu, struct iommu_fn *fn)
{
	iommu_xcache_fini(mmu, &fn->ats.atc);
	pthread_cond_destroy(&fn->ats.cond);
	cmn_mutex_destroy(&fn->ats.lock);
}

/* The device drops what request @i names and completes it. */
static void ats_process_locked(struct iommu_fn *fn, unsigned int i)
{
	struct iommu_ats_req *r = &fn->ats.req[i];

	cmn_mutex_assert_held(&fn->ats.lock);
	atomic_fetch_add_explicit(&fn->ats.inval_seq, 1, memory_order_seq_cst);
	iommu_xcache_inval(&fn->ats.atc, r->ctx, r->match, r->iova, r->len,
			   IOMMU_XC_CLASS_MASK_ALL);
	r->pending = false;
	r->busy = false;
	r->gen++;
	fn->ats.outstanding--;
	pthread_cond_broadcast(&fn->ats.cond);
}

/* Drop every ATC entry; the bump first voids fills by walks that began before it. */
static void ats_drop_all_locked(struct iommu_fn *fn)
{
	cmn_mutex_assert_held(&fn->ats.lock);
	atomic_fetch_add_explicit(&fn->ats.inval_seq, 1, memory_order_seq_cst);
	iommu_xcache_inval(&fn->ats.atc, 0, IOMMU_XC_MATCH_ALL, 0, 0, IOMMU_XC_CLASS_MASK_ALL);
}

/* Post a request naming the entries @match selects by @ctx; blocks for a free ITag if
 * @block (until the timeout), else -EBUSY. */
static int ats_post_locked(struct iommu *mmu, unsigned int rid, uint64_t ctx,
			   enum iommu_xc_match match, uint64_t iova, uint64_t len, bool block,
			   unsigned int *itag, uint32_t *gen)
{
	struct iommu_fn *fn = &mmu->fn[rid];
	uint64_t deadline = cmn_deadline_ns(mmu->cfg.ats_timeout_ns);
	unsigned int i;

	cmn_mutex_assert_held(&fn->ats.lock);
	while (fn->ats.outstanding >= IOMMU_ATS_MAX_ITAGS) {
		if (!block)
			return -EBUSY;
		if (iommu_cond_wait_until(&fn->ats.cond, &fn->ats.lock, deadline))
			return -ETIMEDOUT;
		if (!fn->ats.enabled)
			return -ENODEV;
	}
	for (i = 0; fn->ats.req[i].busy; i++)
		;
	fn->ats.req[i] = (struct iommu_ats_req){ .busy = true, .pending = true,
						 .match = (uint8_t)match, .ctx = ctx,
						 .pasid = (uint32_t)ctx, .iova = iova, .len = len,
						 .gen = fn->ats.req[i].gen };
	fn->ats.outstanding++;
	atomic_fetch_add(&mmu->ats_inv_requests, 1);
	*itag = i;
	*gen = fn->ats.req[i].gen;
	if (!fn->ats.polled)
		ats_process_locked(fn, i);
	return 0;
}

/* Wait for ITag @i of generation @gen. On timeout: an Invalidation Time-out Error. */
static int ats_wait_locked(struct iommu *mmu, unsigned int rid, unsigned int i, uint32_t gen,
			   uint64_t timeout_ns)
{
	struct iommu_fn *fn = &mmu->fn[rid];
	uint64_t deadline = cmn_deadline_ns(timeout_ns);

	cmn_mutex_assert_held(&fn->ats.lock);
	while (fn->ats.req[i].busy && fn->ats.req[i].gen == gen)
		if (iommu_cond_wait_until(&fn->ats.cond, &fn->ats.lock, deadline))
			return -ETIMEDOUT;
	return 0;
}

/* A device that never answers: the host cannot trust its ATC; drop it ourselves (we
 * emulate the device side too) so no stale translation survives, and log the error. */
static void ats_timeout_locked(struct iommu *mmu, unsigned int rid, unsigned int i)
{
	struct iommu_fn *fn = &mmu->fn[rid];

	cmn_mutex_assert_held(&fn->ats.lock);
	cmn_warn("iommu: function %u: ATC invalidation (ITag %u) timed out", rid, i);
	iommu_fault_log(mmu, rid, fn->ats.req[i].pasid, fn->ats.req[i].iova, 0,
			IOMMU_FAULT_ATS_TIMEOUT);
	ats_process_locked(fn, i);
}

/* No ITag came free in time: same remedy as a timeout, for the whole cache. */
static void ats_stuck_locked(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova)
{
	struct iommu_fn *fn = &mmu->fn[rid];

	cmn_mutex_assert_held(&fn->ats.lock);
	cmn_warn("iommu: function %u: no ITag completed in time, ATC dropped", rid);
	iommu_fault_log(mmu, rid, pasid, iova, 0, IOMMU_FAULT_ATS_TIMEOUT);
	ats_drop_all_locked(fn);
}

/* Post an invalidation for one (rid, pasid) user of @d, or drop the whole ATC. */
static void ats_post_or_drop(struct iommu *mmu, unsigned int rid, struct iommu_domain *d,
			     uint32_t pasid, uint64_t iova, uint64_t len, unsigned int *tags,
			     uint32_t *gens, unsigned int *n)
{
	if (!ats_post_locked(mmu, rid, iommu_atc_ctx(d, pasid), IOMMU_XC_MATCH_CTX, iova, len, true,
			     &tags[*n], &gens[*n]))
		(*n)++;
	else
		ats_stuck_locked(mmu, rid, pasid, iova);
}

/* Invalidate what @rid's ATC may cache from @d (its RID and PASID attachments), wait. */
static void ats_inval_fn(struct iommu *mmu, unsigned int rid, struct iommu_domain *d,
			 uint64_t iova, uint64_t len)
{
	struct iommu_fn *fn = &mmu->fn[rid];
	unsigned int tags[1 + IOMMU_MAX_PASIDS_PER_FUNC];
	uint32_t gens[1 + IOMMU_MAX_PASIDS_PER_FUNC];
	unsigned int n = 0;

	cmn_mutex_lock(&fn->ats.lock);
	if (!fn->ats.enabled)
		goto unlock;
	if (atomic_load(&fn->domain) == d)
		ats_post_or_drop(mmu, rid, d, IOMMU_NO_PASID, iova, len, tags, gens, &n);
	for (unsigned int i = 0; i < IOMMU_MAX_PASIDS_PER_FUNC; i++) {
		uint32_t pasid = atomic_load(&fn->pasids[i].pasid);

		if (pasid && atomic_load(&fn->pasids[i].d) == d)
			ats_post_or_drop(mmu, rid, d, pasid, iova, len, tags, gens, &n);
	}
	for (unsigned int k = 0; k < n; k++)
		if (ats_wait_locked(mmu, rid, tags[k], gens[k], mmu->cfg.ats_timeout_ns))
			ats_timeout_locked(mmu, rid, tags[k]);
unlock:
	cmn_mutex_unlock(&fn->ats.lock);
}

void iommu_ats_inval_domain(struct iommu *mmu, struct iommu_domain *d, uint64_t iova,
			    uint64_t len)
{
	for (unsigned int rid = 0; rid < IOMMU_MAX_FUNCS; rid++)
		if (atomic_load_explicit(&mmu->fn[rid].ats.on, memory_order_acquire))
			ats_inval_fn(mmu, rid, d, iova, len);
}

void iommu_ats_flush_fn(struct iommu *mmu, unsigned int rid)
{
	struct iommu_fn *fn = &mmu->fn[rid];

	cmn_mutex_lock(&fn->ats.lock);
	if (fn->ats.atc.e)
		ats_drop_all_locked(fn);
	cmn_mutex_unlock(&fn->ats.lock);
}

int iommu_ats_enable(struct iommu *mmu, unsigned int rid, unsigned int flags)
{
	struct iommu_fn *fn;
	int ret = 0;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || (flags & ~IOMMU_ATS_POLLED))
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&fn->ats.lock);
	if (!fn->ats.atc.e) {
		unsigned int ways = mmu->cfg.atc_entries >= 4 ? 4 : mmu->cfg.atc_entries;

		ret = iommu_xcache_init(mmu, &fn->ats.atc, mmu->cfg.atc_entries / ways, ways);
	} else if (!fn->ats.enabled) {
		/* A disable still waiting out DMA left the cache in place. Unmaps made while
		 * ATS was off skipped it, so nothing it holds may be used again. The bump also
		 * voids fills by translations that looked at it before the disable. */
		ats_drop_all_locked(fn);
	}
	if (!ret) {
		fn->ats.enabled = true;
		fn->ats.polled = flags & IOMMU_ATS_POLLED;
		atomic_store_explicit(&fn->ats.on, true, memory_order_release);
	}
	cmn_mutex_unlock(&fn->ats.lock);
	return ret;
}

int iommu_ats_disable(struct iommu *mmu, unsigned int rid)
{
	struct iommu_fn *fn;

	if (!mmu || rid >= IOMMU_MAX_FUNCS)
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&fn->ats.lock);
	atomic_store_explicit(&fn->ats.on, false, memory_order_release);
	for (unsigned int i = 0; i < IOMMU_ATS_MAX_ITAGS; i++)
		if (fn->ats.req[i].busy)
			ats_process_locked(fn, i);
	fn->ats.enabled = false;
	cmn_mutex_unlock(&fn->ats.lock);
	/* DMA that looked at the ATC before 'on' dropped finishes before the flush. */
	iommu_sync_wait();
	cmn_mutex_lock(&fn->ats.lock);
	/* Re-enabled meanwhile: the cache stays, but not what was filled before 'on' dropped
	 * (an unmap in between did not reach it). */
	if (fn->ats.atc.e)
		ats_drop_all_locked(fn);
	if (!fn->ats.enabled)
		iommu_xcache_fini(mmu, &fn->ats.atc);
	cmn_mutex_unlock(&fn->ats.lock);
	return 0;
}

int iommu_ats_invalidate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			 uint64_t len, bool global, unsigned int *itag)
{
	struct iommu_fn *fn;
	uint32_t gen;
	int ret;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || pasid > IOMMU_PASID_MAX || !itag ||
	    (len && iova + len < iova))
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&fn->ats.lock);
	/* The host names a PASID (or all of them), not a domain. */
	ret = fn->ats.enabled ? ats_post_locked(mmu, rid, pasid,
						global ? IOMMU_XC_MATCH_ALL : IOMMU_XC_MATCH_PASID, iova, len,
						false, itag, &gen)
			      : -ENODEV;
	cmn_mutex_unlock(&fn->ats.lock);
	return ret;
}

int iommu_ats_wait(struct iommu *mmu, unsigned int rid, unsigned int itag, uint64_t timeout_ns)
{
	struct iommu_fn *fn;
	int ret;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || itag >= IOMMU_ATS_MAX_ITAGS)
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&fn->ats.lock);
	ret = ats_wait_locked(mmu, rid, itag, fn->ats.req[itag].gen, timeout_ns);
	if (ret)
		iommu_fault_log(mmu, rid, fn->ats.req[itag].pasid, fn->ats.req[itag].iova, 0,
				IOMMU_FAULT_ATS_TIMEOUT);
	cmn_mutex_unlock(&fn->ats.lock);
	return ret;
}

int iommu_ats_poll(struct iommu *mmu, unsigned int rid)
{
	struct iommu_fn *fn;
	int n = 0;

	if (!mmu || rid >= IOMMU_MAX_FUNCS)
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&fn->ats.lock);
	for (unsigned int i = 0; i < IOMMU_ATS_MAX_ITAGS; i++)
		if (fn->ats.req[i].busy && fn->ats.req[i].pending) {
			ats_process_locked(fn, i);
			n++;
		}
	cmn_mutex_unlock(&fn->ats.lock);
	return n;
}

unsigned int iommu_ats_outstanding(struct iommu *mmu, unsigned int rid)
{
	unsigned int n;

	if (!mmu || rid >= IOMMU_MAX_FUNCS)
		return 0;
	cmn_mutex_lock(&mmu->fn[rid].ats.lock);
	n = mmu->fn[rid].ats.outstanding;
	cmn_mutex_unlock(&mmu->fn[rid].ats.lock);
	return n;
}
