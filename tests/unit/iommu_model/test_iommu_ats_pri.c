// SPDX-License-Identifier: MIT
/* ATS/ATC (IOMMU-09), PRI / IO page faults (IOMMU-10) and the per-function fault log. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "iommu_test.h"

#define RID 2
#define IOVA0 (1ull << 30)

struct fx {
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
};

static void fx_setup(struct fx *f, const struct iommu_config *cfg)
{
	assert_int_equal(iommu_create(cfg, &f->mmu), 0);
	f->mo = t_memobj(f->mmu, 64 * PG, 0x10);
	f->d = t_paging(f->mmu, 0);
	t_map_fixed(f->d, f->mo, 0, 8 * PG, IOMMU_READ | IOMMU_WRITE, IOVA0);
	assert_int_equal(iommu_attach(f->mmu, RID, f->d), 0);
}

/* ---- IOMMU-09: ATS ------------------------------------------------------------------- */

static void test_atc_hit(void **state)
{
	struct fx f;
	struct iommu_ats_result r;
	struct iommu_xlate x;
	struct iommu_stats st;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, IOVA0 + 5, IOMMU_READ, &r), -ENODEV);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, 0), 0);
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, IOVA0 + PG + 5, IOMMU_READ, &r), 0);
	assert_int_equal(r.iova, IOVA0 + PG);
	assert_int_equal(r.size, PG);
	assert_int_equal(r.perm, IOMMU_READ | IOMMU_WRITE);
	assert_false(r.untranslated_only);
	iommu_reset_counters(f.mmu);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 0, IOVA0 + PG, 1, IOMMU_READ, &x), 0);
	assert_int_equal(x.offset, PG);
	iommu_get_stats(f.mmu, &st);
	assert_int_equal(st.atc_hits, 1);
	assert_int_equal(st.iotlb_hits + st.iotlb_misses, 0);	/* the IOMMU was not asked */
	/* A refused request is an answer, not a logged fault. */
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, 0, IOMMU_READ, &r), -EFAULT);
	assert_int_equal(t_faults(f.mmu, RID, NULL), 0);
	iommu_destroy(f.mmu);
}

struct poll_dev {
	struct iommu *mmu;
	atomic_bool about_to_poll, stop;
	atomic_int processed;
};

static void *poll_thread(void *arg)
{
	struct poll_dev *p = arg;

	while (!atomic_load(&p->stop)) {
		if (!iommu_ats_outstanding(p->mmu, RID))
			continue;
		atomic_store(&p->about_to_poll, true);
		atomic_fetch_add(&p->processed, iommu_ats_poll(p->mmu, RID));
	}
	return NULL;
}

static void test_unmap_waits_for_atc(void **state)
{
	struct fx f;
	struct iommu_ats_result r;
	struct iommu_xlate x;
	struct poll_dev p = { 0 };
	pthread_t th;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, IOMMU_ATS_POLLED), 0);
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, IOVA0, IOMMU_READ, &r), 0);
	p.mmu = f.mmu;
	assert_int_equal(pthread_create(&th, NULL, poll_thread, &p), 0);
	assert_int_equal(iommu_unmap(f.d, IOVA0, 8 * PG, NULL), 0);
	/* Unmap returned: the device must have processed the invalidation by now. */
	assert_true(atomic_load(&p.about_to_poll));
	assert_int_equal(iommu_ats_outstanding(f.mmu, RID), 0);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 0, IOVA0, 1, IOMMU_READ, &x), -EFAULT);
	atomic_store(&p.stop, true);
	pthread_join(th, NULL);
	assert_true(atomic_load(&p.processed) >= 1);
	iommu_destroy(f.mmu);
}

/* After a replace the ATC never answers with the old domain's translation. */
static void test_atc_replace(void **state)
{
	struct fx f;
	struct iommu_domain *d2;
	struct iommu_ats_result r;
	uint8_t b;

	(void)state;
	fx_setup(&f, NULL);
	d2 = t_paging(f.mmu, 0);
	t_map_fixed(d2, f.mo, 40 * PG, PG, IOMMU_READ, IOVA0);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, IOMMU_ATS_POLLED), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, IOVA0, IOMMU_READ, &r), 0);
		assert_int_equal(iommu_dma_read(f.mmu, RID, IOVA0, &b, 1), 0);
		assert_int_equal(b, 0x10);		/* page 0 of f.d */
		assert_int_equal(iommu_replace(f.mmu, RID, d2), 0);
		assert_int_equal(iommu_dma_read(f.mmu, RID, IOVA0, &b, 1), 0);
		assert_int_equal(b, 0x10 + 40);	/* d2's page */
		assert_int_equal(iommu_replace(f.mmu, RID, f.d), 0);
	}
	iommu_destroy(f.mmu);
}

struct disabler {
	struct iommu *mmu;
	int ret;
};

static void *disable_thread(void *arg)
{
	struct disabler *dis = arg;

	dis->ret = iommu_ats_disable(dis->mmu, RID);
	return NULL;
}

/* A re-enable while a disable waits out DMA keeps no entry that an unmap in between
 * skipped (ATS was off, so the unmap did not reach the ATC). */
static void test_atc_reenable_during_disable(void **state)
{
	struct disabler dis = { 0 };
	struct iommu_ats_result r;
	struct iommu_xlate x;
	struct fx f;
	pthread_t th;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, 0), 0);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 0, IOVA0, 8, IOMMU_READ, &x), 0);
	/* We are a device thread in a section: the disable cannot get past its sync wait. */
	iommu_access_begin();
	dis.mmu = f.mmu;
	assert_int_equal(pthread_create(&th, NULL, disable_thread, &dis), 0);
	/* ATS reads as off once the disable dropped 'on'; from then on it waits for us. */
	while (iommu_ats_translate(f.mmu, RID, 0, IOVA0, IOMMU_READ, &r) != -ENODEV)
		sched_yield();
	assert_int_equal(iommu_unmap(f.d, IOVA0, 8 * PG, NULL), 0);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, 0), 0);
	iommu_access_end();
	pthread_join(th, NULL);
	assert_int_equal(dis.ret, 0);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 0, IOVA0, 8, IOMMU_READ, &x), -EFAULT);
	iommu_destroy(f.mmu);
}

static void test_itag_limit(void **state)
{
	struct fx f;
	unsigned int tag;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_ats_invalidate(f.mmu, RID, 0, 0, 0, false, &tag), -ENODEV);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, IOMMU_ATS_POLLED), 0);
	for (unsigned int i = 0; i < IOMMU_ATS_MAX_ITAGS; i++) {
		assert_int_equal(iommu_ats_invalidate(f.mmu, RID, 0, IOVA0, PG, false, &tag), 0);
		assert_int_equal(tag, i);
	}
	assert_int_equal(iommu_ats_outstanding(f.mmu, RID), IOMMU_ATS_MAX_ITAGS);
	assert_int_equal(iommu_ats_invalidate(f.mmu, RID, 0, IOVA0, PG, false, &tag), -EBUSY);
	assert_int_equal(iommu_ats_wait(f.mmu, RID, 3, 1000), -ETIMEDOUT);
	assert_int_equal(iommu_ats_poll(f.mmu, RID), IOMMU_ATS_MAX_ITAGS);
	assert_int_equal(iommu_ats_wait(f.mmu, RID, 3, 1000), 0);
	assert_int_equal(iommu_ats_outstanding(f.mmu, RID), 0);
	assert_int_equal(iommu_ats_invalidate(f.mmu, RID, 0, IOVA0, PG, false, &tag), 0);
	assert_int_equal(iommu_ats_poll(f.mmu, RID), 1);
	assert_int_equal(iommu_ats_wait(f.mmu, 64, 0, 1), -EINVAL);
	iommu_destroy(f.mmu);
}

static const struct gi_case {
	const char *name;
	bool global;
	uint32_t pasid;		/* for the non-global request */
	unsigned int want_misses; /* re-translating on pasid 0 and pasid 5 */
} gi_cases[] = {
	{ "IOMMU-09 GI drops all PASIDs", true, 0, 2 },
	{ "IOMMU-09 PASID-selective drops one", false, 5, 1 },
};

static void test_gi(void **state)
{
	const struct gi_case *c = *state;
	struct fx f;
	struct iommu_ats_result r;
	struct iommu_xlate x;
	struct iommu_stats st;
	unsigned int tag;

	fx_setup(&f, NULL);
	assert_int_equal(iommu_pasid_attach(f.mmu, RID, 5, f.d), 0);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, 0), 0);
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, IOVA0, IOMMU_READ, &r), 0);
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 5, IOVA0, IOMMU_READ, &r), 0);
	assert_int_equal(iommu_ats_invalidate(f.mmu, RID, c->pasid, 0, 0, c->global, &tag), 0);
	assert_int_equal(iommu_ats_wait(f.mmu, RID, tag, 1000000), 0);
	iommu_reset_counters(f.mmu);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 0, IOVA0, 1, IOMMU_READ, &x), 0);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 5, IOVA0, 1, IOMMU_READ, &x), 0);
	iommu_get_stats(f.mmu, &st);
	assert_int_equal(st.atc_misses, c->want_misses);
	assert_int_equal(st.atc_hits, 2 - c->want_misses);
	iommu_destroy(f.mmu);
}

static void test_ats_timeout(void **state)
{
	struct iommu_config cfg = { .ats_timeout_ns = 20 * 1000 * 1000 };
	struct fx f;
	struct iommu_ats_result r;
	struct iommu_xlate x;
	unsigned int reason = 0;

	(void)state;
	fx_setup(&f, &cfg);
	assert_int_equal(iommu_ats_enable(f.mmu, RID, IOMMU_ATS_POLLED), 0);
	assert_int_equal(iommu_ats_translate(f.mmu, RID, 0, IOVA0, IOMMU_READ, &r), 0);
	/* The device never polls: unmap still completes, the ATC entry is gone anyway and
	 * the timeout is logged against the function. */
	assert_int_equal(iommu_unmap(f.d, IOVA0, 8 * PG, NULL), 0);
	assert_int_equal(t_faults(f.mmu, RID, &reason), 1);
	assert_int_equal(reason, IOMMU_FAULT_ATS_TIMEOUT);
	assert_int_equal(iommu_ats_outstanding(f.mmu, RID), 0);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, 0, IOVA0, 1, IOMMU_READ, &x), -EFAULT);
	iommu_destroy(f.mmu);
}

/* ---- IOMMU-10: PRI --------------------------------------------------------------------- */

enum pri_mode { PRI_MAP_SUCCESS, PRI_INVALID, PRI_FAILURE, PRI_SUCCESS_NOMAP, PRI_HOLD };

struct pri_ctx {
	struct fx *f;
	enum pri_mode mode;
	int calls;
	struct iommu_page_request last;
};

static void pri_handler(void *arg, const struct iommu_page_request *req)
{
	struct pri_ctx *c = arg;
	uint64_t iova = req->addr;

	c->calls++;
	c->last = *req;
	switch (c->mode) {
	case PRI_MAP_SUCCESS:
		/* What the HMM layer does: make the page present, then answer. */
		assert_int_equal(iommu_map(c->f->d, c->f->mo, 32 * PG, PG, IOMMU_READ | IOMMU_WRITE,
					   IOMMU_MAP_FIXED_IOVA, &iova), 0);
		assert_int_equal(iommu_page_response(c->f->mmu, req->rid, req->prg_index,
						     IOMMU_PRG_SUCCESS), 0);
		break;
	case PRI_SUCCESS_NOMAP:
		assert_int_equal(iommu_page_response(c->f->mmu, req->rid, req->prg_index,
						     IOMMU_PRG_SUCCESS), 0);
		break;
	case PRI_INVALID:
		assert_int_equal(iommu_page_response(c->f->mmu, req->rid, req->prg_index,
						     IOMMU_PRG_INVALID), 0);
		break;
	case PRI_FAILURE:
		assert_int_equal(iommu_page_response(c->f->mmu, req->rid, req->prg_index,
						     IOMMU_PRG_FAILURE), 0);
		break;
	case PRI_HOLD:
		break;
	}
}

static const struct pri_case {
	const char *name;
	enum pri_mode mode;
	int want;
	unsigned int want_reason;	/* 0: nothing logged */
	int want_calls;
} pri_cases[] = {
	{ "IOMMU-10 success, device retries", PRI_MAP_SUCCESS, 0, 0, 1 },
	{ "IOMMU-10 invalid request", PRI_INVALID, -EFAULT, IOMMU_FAULT_PRI_INVALID, 1 },
	{ "IOMMU-10 success but still unmapped", PRI_SUCCESS_NOMAP, -EFAULT,
	  IOMMU_FAULT_UNMAPPED, 1 },
	{ "IOMMU-10 response failure", PRI_FAILURE, -EFAULT, IOMMU_FAULT_PRI_INVALID, 1 },
};

static void test_pri(void **state)
{
	const struct pri_case *c = *state;
	struct fx f;
	struct pri_ctx pc = { .f = &f, .mode = c->mode };
	const uint64_t hole = IOVA0 + 16 * PG;
	uint8_t b = 0;
	unsigned int reason = 0;

	fx_setup(&f, NULL);
	assert_int_equal(iommu_pri_enable(f.mmu, RID, 4, pri_handler, &pc), 0);
	assert_int_equal(iommu_dma_read(f.mmu, RID, hole + 9, &b, 1), c->want);
	assert_int_equal(pc.calls, c->want_calls);
	assert_int_equal(pc.last.addr, hole);
	assert_int_equal(pc.last.access, IOMMU_READ);
	assert_true(pc.last.last);
	if (!c->want)
		assert_int_equal(b, 0x10 + 32);
	assert_int_equal(t_faults(f.mmu, RID, &reason), c->want_reason ? 1 : 0);
	if (c->want_reason)
		assert_int_equal(reason, c->want_reason);
	if (c->mode == PRI_FAILURE) {
		/* The function's PRI is stopped: the next fault raises no request. */
		assert_int_equal(iommu_dma_read(f.mmu, RID, hole + PG, &b, 1), -EFAULT);
		assert_int_equal(pc.calls, 1);
		assert_int_equal(iommu_pri_reset(f.mmu, RID), 0);
		assert_int_equal(iommu_dma_read(f.mmu, RID, hole + PG, &b, 1), -EFAULT);
		assert_int_equal(pc.calls, 2);
	}
	iommu_destroy(f.mmu);
}

/* The page-request service of test_dma_some(): a page below IOVA0 + 12 pages is mapped
 * (from the same offset of the memory object) and answered Success, one above Invalid. */
static void some_handler(void *arg, const struct iommu_page_request *req)
{
	struct pri_ctx *c = arg;
	uint64_t iova = req->addr;
	bool ok = req->addr < IOVA0 + 12 * PG;

	c->calls++;
	if (ok)
		assert_int_equal(iommu_map(c->f->d, c->f->mo, req->addr - IOVA0, PG,
					   IOMMU_READ | IOMMU_WRITE, IOMMU_MAP_FIXED_IOVA, &iova), 0);
	assert_int_equal(iommu_page_response(c->f->mmu, req->rid, req->prg_index,
					     ok ? IOMMU_PRG_SUCCESS : IOMMU_PRG_INVALID), 0);
}

/* iommu_dma_rw_some() moves what needs no page request in one go and stops after a page
 * that waited for one (a device looks at its preemption timer there); on a fault it says
 * how much came before it. iommu_thread_waits() counts the waits. */
static void test_dma_some(void **state)
{
	struct fx f;
	struct pri_ctx pc = { .f = &f };
	uint8_t buf[6 * PG];
	uint64_t w0;
	size_t done;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_pri_enable(f.mmu, RID, 4, some_handler, &pc), 0);
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0, buf, 6 * PG, false,
					   NULL), -EINVAL);
	w0 = iommu_thread_waits();
	/* Mapped: all of it, no wait. */
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 2 * PG, buf,
					   6 * PG, false, &done), 0);
	assert_int_equal(done, 6 * PG);
	assert_int_equal(iommu_thread_waits(), w0);
	/* Pages 6 and 7 mapped, 8 and 9 not: up to the end of 8, which waited. */
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 6 * PG, buf,
					   4 * PG, false, &done), 0);
	assert_int_equal(done, 3 * PG);
	assert_int_equal(pc.calls, 1);
	assert_int_equal(iommu_thread_waits(), w0 + 1);
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(buf[i * PG], 0x10 + 6 + i);
	/* A write from page 9 on: 9 waits; then 10 and 11 one at a time; 12 is refused. */
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 9 * PG, buf,
					   4 * PG, true, &done), 0);
	assert_int_equal(done, PG);
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 10 * PG, buf,
					   3 * PG, true, &done), 0);
	assert_int_equal(done, PG);
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 11 * PG, buf,
					   2 * PG, true, &done), 0);
	assert_int_equal(done, PG);
	assert_int_equal(iommu_dma_rw_some(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 8 * PG, buf,
					   5 * PG, true, &done), -EFAULT);
	assert_int_equal(done, 4 * PG);
	assert_int_equal(pc.calls, 5);
	assert_int_equal(iommu_thread_waits(), w0 + 5);
	iommu_destroy(f.mmu);
}

static void test_pri_outstanding_and_once(void **state)
{
	struct fx f;
	struct pri_ctx pc = { .f = &f, .mode = PRI_HOLD };
	uint16_t a, b, c;
	enum iommu_prg_code code;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_page_request(f.mmu, RID, 0, IOVA0, IOMMU_READ, &a), -ENODEV);
	assert_int_equal(iommu_pri_enable(f.mmu, RID, 2, pri_handler, &pc), 0);
	assert_int_equal(iommu_page_request(f.mmu, RID, 0, IOVA0, IOMMU_READ, &a), 0);
	assert_int_equal(iommu_page_request(f.mmu, RID, 0, IOVA0 + PG, IOMMU_WRITE, &b), 0);
	assert_int_not_equal(a, b);
	assert_int_equal(iommu_page_request(f.mmu, RID, 0, IOVA0, IOMMU_READ, &c), -EBUSY);
	/* Never issued, bad code: refused. */
	assert_int_equal(iommu_page_response(f.mmu, RID, 300, IOMMU_PRG_SUCCESS), -EINVAL);
	assert_int_equal(iommu_page_response(f.mmu, RID, a, 7), -EINVAL);
	/* Answered once; a second answer is refused. */
	assert_int_equal(iommu_page_response(f.mmu, RID, a, IOMMU_PRG_SUCCESS), 0);
	assert_int_equal(iommu_page_response(f.mmu, RID, a, IOMMU_PRG_SUCCESS), -EINVAL);
	assert_int_equal(iommu_page_request_wait(f.mmu, RID, a, 1000000, &code), 0);
	assert_int_equal(code, IOMMU_PRG_SUCCESS);
	assert_int_equal(iommu_page_request(f.mmu, RID, 0, IOVA0, IOMMU_READ, &c), 0);
	assert_int_equal(iommu_page_request_wait(f.mmu, RID, b, 1000, &code), -ETIMEDOUT);
	/* Disabling answers what is outstanding. */
	assert_int_equal(iommu_pri_disable(f.mmu, RID), 0);
	assert_int_equal(iommu_page_request_wait(f.mmu, RID, c, 1000000, &code), 0);
	assert_int_equal(code, IOMMU_PRG_INVALID);
	iommu_destroy(f.mmu);
}

/* IOMMU_NOPRI (a caller that holds a lock others need): an unmapped IOVA faults at once as
 * UNMAPPED, with no page request, though PRI is on, its handler never answers and the one
 * group allowed is taken by an abandoned request; with ATS on too. A mapped IOVA translates.
 * Only iommu_fn_translate() takes the flag. */
static void test_pri_nopri(void **state)
{
	struct iommu_config cfg = { .pri_timeout_ns = 1000000 };	/* the abandoned one */
	struct fx f;
	struct pri_ctx pc = { .f = &f, .mode = PRI_HOLD };
	const uint64_t hole = IOVA0 + 16 * PG;
	struct iommu_pri_stats st;
	struct iommu_xlate x;
	unsigned int reason = 0;

	(void)state;
	fx_setup(&f, &cfg);
	assert_int_equal(iommu_pri_enable(f.mmu, RID, 1, pri_handler, &pc), 0);
	/* Without the flag: a request, never answered, so the group stays taken. */
	assert_int_equal(iommu_fn_translate(f.mmu, RID, IOMMU_NO_PASID, hole, 8, IOMMU_READ, &x),
			 -EFAULT);
	assert_int_equal(pc.calls, 1);
	assert_int_equal(t_faults(f.mmu, RID, &reason), 1);
	assert_int_equal(reason, IOMMU_FAULT_PRI_INVALID);
	for (unsigned int ats = 0; ats < 2; ats++) {
		if (ats)
			assert_int_equal(iommu_ats_enable(f.mmu, RID, 0), 0);
		for (uint64_t at = hole; at < hole + 3 * PG; at += PG)
			assert_int_equal(iommu_fn_translate(f.mmu, RID, IOMMU_NO_PASID, at, 8,
							    IOMMU_WRITE | IOMMU_NOPRI, &x),
					 -EFAULT);
		assert_int_equal(t_faults(f.mmu, RID, &reason), 3);
		assert_int_equal(reason, IOMMU_FAULT_UNMAPPED);
		assert_int_equal(iommu_fn_translate(f.mmu, RID, IOMMU_NO_PASID, IOVA0 + 8, 8,
						    IOMMU_READ | IOMMU_WRITE | IOMMU_NOPRI, &x), 0);
		assert_int_equal(*(uint8_t *)x.host, 0x10);
	}
	assert_int_equal(pc.calls, 1);
	assert_int_equal(iommu_pri_get_stats(f.mmu, RID, &st), 0);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.waited, 0);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.outstanding, 1);
	assert_int_equal(iommu_translate(f.d, IOVA0, 8, IOMMU_READ | IOMMU_NOPRI, &x), -EINVAL);
	assert_int_equal(iommu_fn_translate(f.mmu, RID, IOMMU_NO_PASID, IOVA0, 8, IOMMU_NOPRI, &x),
			 -EINVAL);
	iommu_destroy(f.mmu);
}

/* The answer comes from another thread, as the HMM layer's worker would give it. */
struct async_ctx {
	struct fx *f;
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool have;
	struct iommu_page_request req;
};

static void async_handler(void *arg, const struct iommu_page_request *req)
{
	struct async_ctx *a = arg;

	pthread_mutex_lock(&a->m);
	a->req = *req;
	a->have = true;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->m);
}

static void *async_worker(void *arg)
{
	struct async_ctx *a = arg;
	uint64_t iova;

	pthread_mutex_lock(&a->m);
	while (!a->have)
		pthread_cond_wait(&a->cv, &a->m);
	pthread_mutex_unlock(&a->m);
	iova = a->req.addr;
	assert_int_equal(iommu_map(a->f->d, a->f->mo, 33 * PG, PG, IOMMU_READ | IOMMU_WRITE,
				   IOMMU_MAP_FIXED_IOVA, &iova), 0);
	assert_int_equal(iommu_page_response(a->f->mmu, a->req.rid, a->req.prg_index,
					      IOMMU_PRG_SUCCESS), 0);
	return NULL;
}

static void test_pri_async(void **state)
{
	struct fx f;
	struct async_ctx a = { .f = &f, .m = PTHREAD_MUTEX_INITIALIZER,
			       .cv = PTHREAD_COND_INITIALIZER };
	uint8_t buf[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, back[8];
	pthread_t th;

	(void)state;
	fx_setup(&f, NULL);
	assert_int_equal(iommu_pri_enable(f.mmu, RID, 1, async_handler, &a), 0);
	assert_int_equal(pthread_create(&th, NULL, async_worker, &a), 0);
	assert_int_equal(iommu_dma_write(f.mmu, RID, IOVA0 + 20 * PG, buf, 8), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.req.access, IOMMU_WRITE);
	assert_int_equal(iommu_dma_read(f.mmu, RID, IOVA0 + 20 * PG, back, 8), 0);
	assert_memory_equal(buf, back, 8);
	assert_memory_equal((uint8_t *)iommu_memobj_base(f.mo) + 33 * PG, buf, 8);
	iommu_destroy(f.mmu);
}

/* ---- fault log ----------------------------------------------------------------------- */

static const struct log_case {
	const char *name;
	unsigned int rid;
	uint64_t iova;
	bool write;
	int want;
	unsigned int reason;
} log_cases[] = {
	{ "fault log: unmapped", RID, IOVA0 + 30 * PG, false, -EFAULT, IOMMU_FAULT_UNMAPPED },
	{ "fault log: permission", RID, IOVA0 + 9 * PG, true, -EACCES, IOMMU_FAULT_PERM },
	{ "fault log: unattached function", 7, IOVA0, false, -EFAULT, IOMMU_FAULT_NO_DOMAIN },
	{ "fault log: wrapping range", RID, UINT64_MAX - 2, false, -EFAULT, IOMMU_FAULT_UNMAPPED },
};

static void test_fault_log(void **state)
{
	const struct log_case *c = *state;
	struct fx f;
	uint8_t buf[8] = { 0 };
	struct iommu_fault_rec r[4];
	size_t n;
	uint64_t dropped;

	fx_setup(&f, NULL);
	t_map_fixed(f.d, f.mo, 0, PG, IOMMU_READ, IOVA0 + 9 * PG);
	assert_int_equal(c->write ? iommu_dma_write(f.mmu, c->rid, c->iova, buf, 8)
				  : iommu_dma_read(f.mmu, c->rid, c->iova, buf, 8), c->want);
	assert_int_equal(iommu_fault_log_read(f.mmu, c->rid, r, 4, &n, &dropped), 0);
	assert_int_equal(n, 1);
	assert_int_equal(dropped, 0);
	assert_int_equal(r[0].reason, c->reason);
	assert_int_equal(r[0].rid, c->rid);
	assert_int_equal(r[0].iova, c->iova);
	assert_int_equal(r[0].access, c->write ? IOMMU_WRITE : IOMMU_READ);
	/* Other functions saw nothing. */
	assert_int_equal(t_faults(f.mmu, c->rid == RID ? 7 : RID, NULL), 0);
	iommu_destroy(f.mmu);
}

static void test_fault_log_overflow(void **state)
{
	struct fx f;
	struct iommu_fault_rec r[128];
	uint8_t b;
	size_t n;
	uint64_t dropped;

	(void)state;
	fx_setup(&f, NULL);
	for (unsigned int i = 0; i < 100; i++)
		assert_int_equal(iommu_dma_read(f.mmu, RID, i * PG, &b, 1), -EFAULT);
	assert_int_equal(iommu_fault_log_read(f.mmu, RID, r, 128, &n, &dropped), 0);
	assert_int_equal(n, 64);
	assert_int_equal(dropped, 36);
	assert_int_equal(r[0].iova, 36 * PG);	/* the newest are kept */
	assert_int_equal(iommu_fault_log_read(f.mmu, 64, r, 1, &n, NULL), -EINVAL);
	iommu_destroy(f.mmu);
}

int main(void)
{
	struct CMUnitTest tests[32];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest){ "IOMMU-09 ATC hit after translation", test_atc_hit,
					  NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-09 unmap waits for ATC completion",
					  test_unmap_waits_for_atc, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-09 ATC after replace", test_atc_replace, NULL,
					  NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-09 re-enable during disable drops the ATC",
					  test_atc_reenable_during_disable, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-09 32 ITags outstanding, then EBUSY",
					  test_itag_limit, NULL, NULL, NULL };
	T_CASES(tests, n, gi_cases, test_gi);
	tests[n++] = (struct CMUnitTest){ "IOMMU-09 invalidation timeout", test_ats_timeout, NULL,
					  NULL, NULL };
	T_CASES(tests, n, pri_cases, test_pri);
	tests[n++] = (struct CMUnitTest){ "IOMMU-10 outstanding limit, answered once",
					  test_pri_outstanding_and_once, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-10 answer from another thread", test_pri_async,
					  NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-10 DMA up to a page that waited", test_dma_some,
					  NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-10 NOPRI: a fault at once, no page request",
					  test_pri_nopri, NULL, NULL, NULL };
	T_CASES(tests, n, log_cases, test_fault_log);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fault_log_overflow);
	return _cmocka_run_group_tests("iommu_ats_pri", tests, n, NULL, NULL);
}
