// SPDX-License-Identifier: MIT
/* The doorbell's prefetch hints: when a channel runs out of work the engine guesses where
 * its next submission will be read from (USERD, the GP entry at GP_GET, the pushbuffer right
 * after the last segment) and the doorbell poll prefetches those lines. A guess is never an
 * access: one that lands on memory the GMMU or the IOMMU does not map records no fault, logs
 * nothing and sends no page request, and the submissions that follow, wherever they are,
 * run as before. */
#include <stdlib.h>

#include "gpu_test.h"
#include "iommu_model/iommu.h"

#define SYS_BYTES	(4u << 20)
#define IOVA		0x40000000ull		/* 1 GiB, 2 MiB aligned */
#define SYS_VA		0x3000000000ull		/* all 4 MiB, 4 KiB pages */
#define PAGE_VA		0x3800000000ull		/* one 4 KiB page: IOVA + 2 MiB */
#define MAPPED		(3u << 20)		/* the IOMMU maps only this much */
#define SEM_OFF		8192u
#define ENTRIES		64u

struct hctx {
	struct tgpu *t;
	struct iommu *mmu;
	struct iommu_domain *dom;
	struct iommu_memobj *mo;
	uint8_t *host;			/* the guest's DMA memory */
	atomic_uint requests;		/* page requests the IOMMU sent */
	struct vgpu_userd *userd;
	uint64_t *gp;
	uint32_t put;
	uint64_t seq;
};

/* Every page request is answered Invalid: none is expected. */
static void h_pri(void *ctx, const struct iommu_page_request *req)
{
	struct hctx *h = ctx;

	atomic_fetch_add(&h->requests, 1);
	iommu_page_response(h->mmu, req->rid, req->prg_index, IOMMU_PRG_INVALID);
}

static struct hctx *hctx_new(void)
{
	struct hctx *h = calloc(1, sizeof(*h));
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct gpu_config cfg = { .vram_size = 3 * 64 * VGPU_MiB, .nr_vfs = 2, .nr_engines = 1 };
	uint64_t iova = IOVA, rl;
	struct gpu_priv_chan chan;

	assert_non_null(h);
	assert_int_equal(iommu_create(NULL, &h->mmu), 0);
	assert_int_equal(iommu_domain_alloc(h->mmu, &o, &h->dom), 0);
	assert_int_equal(iommu_attach(h->mmu, 1, h->dom), 0);
	assert_int_equal(iommu_pri_enable(h->mmu, 1, 16, h_pri, h), 0);
	h->host = aligned_alloc(2u << 20, SYS_BYTES);
	assert_non_null(h->host);
	memset(h->host, 0, SYS_BYTES);
	assert_int_equal(iommu_memobj_register(h->mmu, h->host, SYS_BYTES, &h->mo), 0);
	assert_int_equal(iommu_map(h->dom, h->mo, 0, MAPPED, IOMMU_READ | IOMMU_WRITE,
				   IOMMU_MAP_FIXED_IOVA, &iova), 0);
	h->t = calloc(1, sizeof(*h->t));
	assert_non_null(h->t);
	cfg.iommu = h->mmu;
	assert_int_equal(gpu_create(&cfg, &h->t->g), 0);
	h->t->p = gpu_priv_get(h->t->g);
	h->t->nr_fns = 3;
	h->t->slice = 64 * VGPU_MiB;
	for (unsigned int fn = 0; fn < 3; fn++) {
		assert_int_equal(gpu_priv_partition_set(h->t->p, fn, fn * h->t->slice, h->t->slice), 0);
		h->t->next_data[fn] = T_TABLES;
		h->t->pdb[fn] = tgpu_table(h->t, fn);
	}
	tgpu_map(h->t, 1, SYS_VA, IOVA, SYS_BYTES, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS);
	tgpu_map(h->t, 1, PAGE_VA, IOVA + (2u << 20), 4096, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS);
	/* Channel 0: USERD at IOVA, the GP ring at IOVA + 4 KiB. */
	h->userd = (struct vgpu_userd *)h->host;
	h->gp = (uint64_t *)(h->host + 4096);
	chan = (struct gpu_priv_chan){
		.runlist = 0, .pdb = h->t->pdb[1], .gpfifo_va = SYS_VA + 4096,
		.gpfifo_entries = ENTRIES, .userd_aper = VGPU_APER_SYS, .userd_addr = IOVA,
	};
	assert_int_equal(gpu_priv_chan_alloc(h->t->p, 1, 0, &chan), 0);
	assert_int_equal(gpu_priv_chan_enable(h->t->p, 1, 0, true), 0);
	rl = gpu_priv_shared(h->t->p)->fns[1].runlist[0];
	assert_int_equal(gpu_priv_runlist_set(h->t->p, 1, 0, rl | VGPU_BIT(0)), 0);
	return h;
}

static void hctx_free(struct hctx *h)
{
	tgpu_free(h->t);
	iommu_pri_disable(h->mmu, 1);
	iommu_unmap(h->dom, 0, UINT64_MAX, NULL);
	iommu_detach(h->mmu, 1);
	iommu_domain_free(h->dom);
	iommu_memobj_unregister(h->mo);
	iommu_destroy(h->mmu);
	free(h->host);
	free(h);
}

/* Submit one segment (a release of the semaphore with the next value) whose methods sit at
 * host offset @host_off and GPU VA @va; wait until it ran and the engine ended the turn,
 * which is when it makes its guesses for the next submission. */
static void h_submit(struct hctx *h, uint64_t host_off, uint64_t va)
{
	uint64_t sem = SYS_VA + SEM_OFF, dl = cmn_deadline_ns(T_TIMEOUT);
	uint32_t dw[] = { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(sem), hi32(sem),
			  (uint32_t)++h->seq, 0, 0 };
	struct gpu_chan_status st;

	memcpy(h->host + host_off, dw, sizeof(dw));
	h->gp[h->put] = vgpu_gp_entry(va, VGPU_ARRAY_SIZE(dw));
	h->put = (h->put + 1) % ENTRIES;
	__atomic_store_n(&h->userd->gp_put, h->put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(h->t->g, 1, vgpu_token(0, 0));
	for (;;) {
		assert_int_equal(gpu_chan_status(h->t->g, 1, 0, &st), 0);
		if (st.error || st.gp_get == h->put)
			break;
		assert_false(cmn_deadline_passed(dl));
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	assert_int_equal(st.error, VGPU_CHAN_OK);
	assert_int_equal(gpu_chan_quiesce(h->t->g, 1, 0, T_TIMEOUT), 0);
	assert_int_equal(__atomic_load_n((uint32_t *)(h->host + SEM_OFF), __ATOMIC_ACQUIRE),
			 (uint32_t)h->seq);
}

/* Nothing anywhere says a fault happened. */
static void h_no_fault(struct hctx *h)
{
	struct vgpu_fault_entry fe;
	struct iommu_fault_rec rec;
	size_t n = 1;

	assert_int_equal(gpu_fault_pop(h->t->g, 1, &fe), -EAGAIN);
	assert_int_equal(iommu_fault_log_read(h->mmu, 1, &rec, 1, &n, NULL), 0);
	assert_int_equal(n, 0);
	assert_int_equal(atomic_load(&h->requests), 0);
	assert_int_equal(__atomic_load_n(&h->userd->error, __ATOMIC_ACQUIRE), VGPU_CHAN_OK);
}

/* The next segment guessed on an IOVA the IOMMU does not map (the segment ends where the
 * mapping ends), then on a GPU VA the GMMU does not map (it ends where its page ends): no
 * fault, no log, no page request; the submissions after them, elsewhere, run. */
static void test_hint_unmapped(void **state)
{
	struct hctx *h = hctx_new();
	const uint64_t seg = 6 * 4;

	(void)state;
	h_submit(h, 65536, SYS_VA + 65536);
	h_no_fault(h);
	h_submit(h, MAPPED - seg, SYS_VA + MAPPED - seg);
	h_no_fault(h);
	h_submit(h, (2u << 20) + 4096 - seg, PAGE_VA + 4096 - seg);
	h_no_fault(h);
	/* Guessed wrong three ways (back to the start, not after the last segment). */
	h_submit(h, 65536, SYS_VA + 65536);
	h_submit(h, (2u << 20) + 64, PAGE_VA + 64);
	h_submit(h, 65536 + 4096, SYS_VA + 65536 + 4096);
	h_no_fault(h);
	hctx_free(h);
}

/* The GP ring wraps many times and the pushbuffer moves across pages and back: every
 * submission runs once, in order, whatever was guessed. */
static void test_hint_wrap(void **state)
{
	struct hctx *h = hctx_new();

	(void)state;
	for (unsigned int i = 0; i < 3 * ENTRIES; i++) {
		uint64_t off = 65536 + (uint64_t)(i * 40 % 12288);

		h_submit(h, off, SYS_VA + off);
	}
	h_no_fault(h);
	hctx_free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hint_unmapped),
		cmocka_unit_test(test_hint_wrap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
