// SPDX-License-Identifier: MIT
/* PRI: page requests from a function to a registered handler (the HMM layer), one
 * response per page-request group, an outstanding-allocation limit, and Response Failure
 * stopping the function's requests until reset. Also the per-function fault log. */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "iommu_model/iommu_internal.h"

/* ---- fault log ------------------------------------------------------------------------ */

void iommu_fault_log(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		     unsigned int access, unsigned int reason)
{
	struct iommu_fn *fn = &mmu->fn[rid];
	struct iommu_fault_rec *r;

	atomic_fetch_add(&mmu->faults, 1);
	cmn_mutex_lock(&fn->log_lock);
	if (fn->log_count == IOMMU_FAULT_LOG_LEN) {
		/* Keep the newest: the oldest record is the one a reader can best lose. */
		fn->log_head = (fn->log_head + 1) % IOMMU_FAULT_LOG_LEN;
		fn->log_count--;
		fn->dropped++;
	}
	r = &fn->log[(fn->log_head + fn->log_count++) % IOMMU_FAULT_LOG_LEN];
	*r = (struct iommu_fault_rec){ .iova = iova, .time_ns = cmn_now_ns(), .pasid = pasid,
				       .rid = (uint16_t)rid, .access = (uint8_t)access,
				       .reason = (uint8_t)reason };
	cmn_mutex_unlock(&fn->log_lock);
}

int iommu_fault_log_read(struct iommu *mmu, unsigned int rid, struct iommu_fault_rec *out,
			 size_t max, size_t *n, uint64_t *dropped)
{
	struct iommu_fn *fn;
	size_t k = 0;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || !n || (max && !out))
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&fn->log_lock);
	for (; k < max && fn->log_count; k++) {
		out[k] = fn->log[fn->log_head];
		fn->log_head = (fn->log_head + 1) % IOMMU_FAULT_LOG_LEN;
		fn->log_count--;
	}
	if (dropped) {
		*dropped = fn->dropped;
		fn->dropped = 0;
	}
	cmn_mutex_unlock(&fn->log_lock);
	*n = k;
	return 0;
}

/* ---- PRI ------------------------------------------------------------------------------ */

void iommu_pri_init(struct iommu_fn *fn)
{
	cmn_mutex_init(&fn->pri.lock);
	iommu_cond_init(&fn->pri.cond);
}

void iommu_pri_fini(struct iommu_fn *fn)
{
	pthread_cond_destroy(&fn->pri.cond);
	cmn_mutex_destroy(&fn->pri.lock);
}

static struct iommu_pri *pri_of(struct iommu *mmu, unsigned int rid)
{
	return mmu && rid < IOMMU_MAX_FUNCS ? &mmu->fn[rid].pri : NULL;
}

int iommu_pri_enable(struct iommu *mmu, unsigned int rid, unsigned int max_outstanding,
		     iommu_pri_handler_fn fn, void *ctx)
{
	struct iommu_pri *p = pri_of(mmu, rid);

	if (!p || !fn || !max_outstanding || max_outstanding > IOMMU_PRG_MAX)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	p->enabled = true;
	p->stopped = false;
	p->max = max_outstanding;
	p->outstanding_max = p->outstanding;
	p->requests = p->waited = p->timeouts = 0;
	p->fn = fn;
	p->ctx = ctx;
	cmn_mutex_unlock(&p->lock);
	return 0;
}

/* Answer @i (lock held); an abandoned group is freed at once. */
static void pri_answer_locked(struct iommu_pri *p, unsigned int i, enum iommu_prg_code code)
{
	cmn_mutex_assert_held(&p->lock);
	if (p->abandoned[i]) {
		p->abandoned[i] = false;
		p->state[i] = IOMMU_PRG_STATE_FREE;
		p->outstanding--;
	} else {
		p->state[i] = IOMMU_PRG_STATE_ANSWERED;
		p->code[i] = (uint8_t)code;
	}
	pthread_cond_broadcast(&p->cond);
}

int iommu_pri_disable(struct iommu *mmu, unsigned int rid)
{
	struct iommu_pri *p = pri_of(mmu, rid);

	if (!p)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	p->enabled = false;
	for (unsigned int i = 0; i < IOMMU_PRG_MAX; i++)
		if (p->state[i] == IOMMU_PRG_STATE_OUTSTANDING)
			pri_answer_locked(p, i, IOMMU_PRG_INVALID);
	/* A handler called before the disable may still run: its context must outlive it,
	 * so the caller may free that context once this returns. */
	while (p->calls)
		cmn_cond_wait(&p->cond, &p->lock);
	cmn_mutex_unlock(&p->lock);
	return 0;
}

int iommu_pri_reset(struct iommu *mmu, unsigned int rid)
{
	struct iommu_pri *p = pri_of(mmu, rid);
	int ret = 0;

	if (!p)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	if (p->enabled)
		p->stopped = false;
	else
		ret = -ENODEV;
	cmn_mutex_unlock(&p->lock);
	return ret;
}

/* Allocate a group index; waits for room until @deadline if @block. */
static int pri_alloc_locked(struct iommu_pri *p, bool block, uint64_t deadline, uint16_t *prg)
{
	bool waited = false;

	cmn_mutex_assert_held(&p->lock);
	for (;;) {
		if (!p->enabled)
			return -ENODEV;
		if (p->stopped)
			return -EPERM;
		if (p->outstanding < p->max)
			break;
		if (!block)
			return -EBUSY;
		waited = true;
		if (iommu_cond_wait_until(&p->cond, &p->lock, deadline)) {
			p->timeouts++;
			return -ETIMEDOUT;
		}
	}
	p->requests++;
	p->waited += waited;
	while (p->state[p->next] != IOMMU_PRG_STATE_FREE)
		p->next = (p->next + 1) % IOMMU_PRG_MAX;
	*prg = (uint16_t)p->next;
	p->state[p->next] = IOMMU_PRG_STATE_OUTSTANDING;
	p->abandoned[p->next] = false;
	if (++p->outstanding > p->outstanding_max)
		p->outstanding_max = p->outstanding;
	p->next = (p->next + 1) % IOMMU_PRG_MAX;
	return 0;
}

/* Issue a request: allocate, then hand it to the handler outside the lock. */
static int pri_issue(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t addr,
		     unsigned int access, bool block, uint16_t *prg)
{
	struct iommu_pri *p = &mmu->fn[rid].pri;
	struct iommu_page_request req;
	iommu_pri_handler_fn fn;
	void *ctx;
	int ret;

	cmn_mutex_lock(&p->lock);
	ret = pri_alloc_locked(p, block, cmn_deadline_ns(mmu->cfg.pri_timeout_ns), prg);
	fn = p->fn;
	ctx = p->ctx;
	p->calls += !ret;
	cmn_mutex_unlock(&p->lock);
	if (ret)
		return ret;
	atomic_fetch_add(&mmu->page_requests, 1);
	req = (struct iommu_page_request){ .addr = addr & ~(IOMMU_PAGE_SIZE - 1), .pasid = pasid,
					   .rid = (uint16_t)rid, .prg_index = *prg,
					   .access = access, .last = true };
	fn(ctx, &req);
	cmn_mutex_lock(&p->lock);
	if (!--p->calls)
		pthread_cond_broadcast(&p->cond);
	cmn_mutex_unlock(&p->lock);
	return 0;
}

int iommu_page_request(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t addr,
		       unsigned int access, uint16_t *prg)
{
	if (!pri_of(mmu, rid) || pasid > IOMMU_PASID_MAX || !prg || !access ||
	    (access & ~(IOMMU_READ | IOMMU_WRITE)))
		return -EINVAL;
	return pri_issue(mmu, rid, pasid, addr, access, false, prg);
}

int iommu_page_response(struct iommu *mmu, unsigned int rid, uint16_t prg,
			enum iommu_prg_code code)
{
	struct iommu_pri *p = pri_of(mmu, rid);
	int ret = 0;

	if (!p || prg >= IOMMU_PRG_MAX ||
	    (code != IOMMU_PRG_SUCCESS && code != IOMMU_PRG_INVALID && code != IOMMU_PRG_FAILURE))
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	if (p->state[prg] != IOMMU_PRG_STATE_OUTSTANDING) {
		ret = -EINVAL;	/* never issued, or already answered: answer once */
	} else {
		if (code == IOMMU_PRG_FAILURE)
			p->stopped = true;
		pri_answer_locked(p, prg, code);
	}
	cmn_mutex_unlock(&p->lock);
	return ret;
}

static int pri_wait_locked(struct iommu_pri *p, uint16_t prg, uint64_t deadline,
			   enum iommu_prg_code *code)
{
	cmn_mutex_assert_held(&p->lock);
	if (p->state[prg] == IOMMU_PRG_STATE_FREE || p->abandoned[prg])
		return -EINVAL;
	while (p->state[prg] == IOMMU_PRG_STATE_OUTSTANDING) {
		if (iommu_cond_wait_until(&p->cond, &p->lock, deadline)) {
			/* The answer may still come; it frees the group then. */
			p->abandoned[prg] = true;
			p->timeouts++;
			return -ETIMEDOUT;
		}
	}
	*code = p->code[prg];
	p->state[prg] = IOMMU_PRG_STATE_FREE;
	p->outstanding--;
	pthread_cond_broadcast(&p->cond);
	return 0;
}

int iommu_page_request_wait(struct iommu *mmu, unsigned int rid, uint16_t prg,
			    uint64_t timeout_ns, enum iommu_prg_code *code)
{
	struct iommu_pri *p = pri_of(mmu, rid);
	int ret;

	if (!p || prg >= IOMMU_PRG_MAX || !code)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	ret = pri_wait_locked(p, prg, cmn_deadline_ns(timeout_ns), code);
	cmn_mutex_unlock(&p->lock);
	return ret;
}

__thread uint64_t iommu_tls_pri_waits, iommu_tls_sva_copies;

uint64_t iommu_thread_waits(void)
{
	return iommu_tls_pri_waits + iommu_tls_sva_copies;
}

int iommu_pri_fault(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		    unsigned int access)
{
	struct iommu_pri *p = &mmu->fn[rid].pri;
	enum iommu_prg_code code;
	uint16_t prg;
	int ret;

	ret = pri_issue(mmu, rid, pasid, iova, access & (IOMMU_READ | IOMMU_WRITE), true, &prg);
	/* The wait for a free group and the handler's call are the client's time as the wait
	 * for the answer is, a wait that timed out included; PRI off or stopped refuses at
	 * once. */
	if (ret != -ENODEV && ret != -EPERM)
		iommu_tls_pri_waits++;
	if (ret)
		return ret;
	cmn_mutex_lock(&p->lock);
	ret = pri_wait_locked(p, prg, cmn_deadline_ns(mmu->cfg.pri_timeout_ns), &code);
	cmn_mutex_unlock(&p->lock);
	if (ret)
		return ret;
	return code == IOMMU_PRG_SUCCESS ? 0 : -EFAULT;
}

int iommu_pri_get_stats(struct iommu *mmu, unsigned int rid, struct iommu_pri_stats *st)
{
	struct iommu_pri *p = pri_of(mmu, rid);

	if (!p || !st)
		return -EINVAL;
	cmn_mutex_lock(&p->lock);
	*st = (struct iommu_pri_stats){ .requests = p->requests, .waited = p->waited,
					.timeouts = p->timeouts, .outstanding = p->outstanding,
					.outstanding_max = p->outstanding_max, .max = p->max };
	cmn_mutex_unlock(&p->lock);
	return 0;
}
