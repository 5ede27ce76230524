// SPDX-License-Identifier: MIT
/* The system aperture: a channel living entirely in the guest's DMA memory (USERD by IOVA,
 * GPFIFO and pushbuffer mapped through SYS PTEs) reached through the function's IOMMU
 * domain; copies between system memory and VRAM; IOMMU faults confined to the channel.
 * Page requests the guest answers late hold no engine past its slice and preemption
 * timeout; a partition moved while a page request holds a turn's end leaves no translation
 * of the old range behind; USERD read or written under the model lock raises no page
 * request. */
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "gpu_test.h"
#include "iommu_model/iommu.h"
#include <vgpu/sva.h>

#define SYS_BYTES	(4u << 20)
#define IOVA		0x40000000ull		/* 1 GiB, 2 MiB aligned */
#define SYS_VA		0x3000000000ull

struct sctx {
	struct tgpu *t;
	struct iommu *mmu;
	struct iommu_domain *dom;
	struct iommu_memobj *mo;
	uint8_t *host;			/* the "guest DMA memory" */
};

/* COPYs of @stream_min bytes or more stream their stores (0: the default). */
static struct sctx *sctx_new(uint64_t stream_min)
{
	struct sctx *s = calloc(1, sizeof(*s));
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct gpu_config cfg = { .vram_size = 3 * 64 * VGPU_MiB, .nr_vfs = 2, .nr_engines = 1,
				  .copy_stream_min = stream_min };
	uint64_t iova = IOVA;

	assert_int_equal(iommu_create(NULL, &s->mmu), 0);
	assert_int_equal(iommu_domain_alloc(s->mmu, &o, &s->dom), 0);
	assert_int_equal(iommu_attach(s->mmu, 1, s->dom), 0);
	s->host = aligned_alloc(2u << 20, SYS_BYTES);
	memset(s->host, 0, SYS_BYTES);
	assert_int_equal(iommu_memobj_register(s->mmu, s->host, SYS_BYTES, &s->mo), 0);
	/* Only the first 3 MiB are mapped: the last MiB of IOVA space faults. */
	assert_int_equal(iommu_map(s->dom, s->mo, 0, 3u << 20, IOMMU_READ | IOMMU_WRITE,
				   IOMMU_MAP_FIXED_IOVA, &iova), 0);
	/* Build the device by hand to pass the IOMMU. */
	s->t = calloc(1, sizeof(*s->t));
	cfg.iommu = s->mmu;
	assert_int_equal(gpu_create(&cfg, &s->t->g), 0);
	s->t->p = gpu_priv_get(s->t->g);
	s->t->nr_fns = 3;
	s->t->slice = 64 * VGPU_MiB;
	for (unsigned int fn = 0; fn < 3; fn++) {
		assert_int_equal(gpu_priv_partition_set(s->t->p, fn, fn * s->t->slice, s->t->slice), 0);
		s->t->next_data[fn] = T_TABLES;
		s->t->pdb[fn] = tgpu_table(s->t, fn);
	}
	/* GPU VA SYS_VA.. maps IOVA.. with 4 KiB system pages, all 4 MiB of it. */
	tgpu_map(s->t, 1, SYS_VA, IOVA, SYS_BYTES, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS);
	return s;
}

static void sctx_free(struct sctx *s)
{
	tgpu_free(s->t);
	iommu_unmap(s->dom, 0, UINT64_MAX, NULL);
	iommu_detach(s->mmu, 1);
	iommu_domain_free(s->dom);
	iommu_memobj_unregister(s->mo);
	iommu_destroy(s->mmu);
	free(s->host);
	free(s);
}

/* A channel in system memory: USERD at IOVA, GP ring at +4 KiB, pushbuffer at +64 KiB. */
struct schan {
	struct vgpu_userd *userd;
	uint64_t *gp;
	uint32_t *pb;
	uint32_t put, pb_off;
};

static void schan_init(struct sctx *s, struct schan *c, unsigned int chid, uint64_t base)
{
	struct gpu_priv_chan cfg = {
		.runlist = 0, .pdb = s->t->pdb[1], .gpfifo_va = SYS_VA + base + 4096,
		.gpfifo_entries = 64, .userd_aper = VGPU_APER_SYS, .userd_addr = IOVA + base,
	};

	c->userd = (struct vgpu_userd *)(s->host + base);
	c->gp = (uint64_t *)(s->host + base + 4096);
	c->pb = (uint32_t *)(s->host + base + 65536);
	c->put = c->pb_off = 0;
	assert_int_equal(gpu_priv_chan_alloc(s->t->p, 1, chid, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(s->t->p, 1, chid, true), 0);
	uint64_t rl = gpu_priv_shared(s->t->p)->fns[1].runlist[0];

	assert_int_equal(gpu_priv_runlist_set(s->t->p, 1, 0, rl | VGPU_BIT(chid)), 0);
}

static void schan_submit(struct sctx *s, struct schan *c, unsigned int chid, uint64_t base,
			 const uint32_t *dw, uint32_t n)
{
	uint64_t pb_va = SYS_VA + base + 65536 + c->pb_off * 4ull;

	memcpy(c->pb + c->pb_off, dw, n * 4);
	c->pb_off += n;
	c->gp[c->put] = vgpu_gp_entry(pb_va, n);
	c->put = (c->put + 1) % 64;
	__atomic_store_n(&c->userd->gp_put, c->put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(s->t->g, 1, vgpu_token(0, chid));
}

static int schan_wait(struct schan *c)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (!cmn_deadline_passed(dl)) {
		uint32_t err = __atomic_load_n(&c->userd->error, __ATOMIC_ACQUIRE);

		if (err)
			return (int)err;
		if (__atomic_load_n(&c->userd->gp_get, __ATOMIC_ACQUIRE) == c->put)
			return 0;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	return -ETIMEDOUT;
}

/* Copies both ways between guest memory and VRAM, and a semaphore in guest memory; with
 * a non-NULL state every copy streams its stores, else none does. */
static void test_sys_channel(void **state)
{
	struct sctx *s = sctx_new(*state ? 1 : UINT64_MAX);
	struct schan c;
	uint64_t vram = tgpu_vmem(s->t, 1, 1u << 20, VGPU_GMMU_PAGE_64K);
	uint64_t src = SYS_VA + (1u << 20), back = SYS_VA + (2u << 20), sem = SYS_VA + 8192;
	uint32_t n = 300000;

	for (uint32_t i = 0; i < n; i++)
		s->host[(1u << 20) + i] = (uint8_t)(i * 7 + 1);
	schan_init(s, &c, 0, 0);
	uint32_t dw[] = {
		VGPU_MTHD(VGPU_M_COPY, 6), lo32(src), hi32(src), lo32(vram), hi32(vram), n, 0,
		VGPU_MTHD(VGPU_M_COPY, 6), lo32(vram), hi32(vram), lo32(back + 3), hi32(back), n, 0,
		VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(sem), hi32(sem), 42, 0, 0,
	};
	schan_submit(s, &c, 0, 0, dw, VGPU_ARRAY_SIZE(dw));
	assert_int_equal(schan_wait(&c), 0);
	assert_memory_equal(tgpu_va(s->t, 1, vram, n), s->host + (1u << 20), n);
	assert_memory_equal(s->host + (2u << 20) + 3, s->host + (1u << 20), n);
	assert_int_equal(*(uint32_t *)(s->host + 8192), 42);
	sctx_free(s);
}

/* A page the IOMMU does not map: an IOMMU fault, only this channel errors. */
static void test_iommu_unmapped(void **state)
{
	struct sctx *s = sctx_new(0);
	struct schan bad, good;
	struct vgpu_fault_entry fe;
	uint64_t unmapped = SYS_VA + (3u << 20) + 64, sem = SYS_VA + 8192;

	(void)state;
	schan_init(s, &bad, 0, 0);
	schan_init(s, &good, 1, 256u << 10);
	uint32_t dw_bad[] = { VGPU_MTHD(VGPU_M_TIMESTAMP, 2), lo32(unmapped), hi32(unmapped) };
	uint32_t dw_good[] = { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(sem), hi32(sem), 7, 0, 0 };

	schan_submit(s, &bad, 0, 0, dw_bad, VGPU_ARRAY_SIZE(dw_bad));
	assert_int_equal(schan_wait(&bad), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(gpu_fault_pop(s->t->g, 1, &fe), 0);
	assert_int_equal(fe.reason, VGPU_FAULT_IOMMU);
	assert_true(fe.va == unmapped);
	schan_submit(s, &good, 1, 256u << 10, dw_good, VGPU_ARRAY_SIZE(dw_good));
	assert_int_equal(schan_wait(&good), 0);
	assert_int_equal(*(uint32_t *)(s->host + 8192), 7);
	sctx_free(s);
}

#define SVA_VA		0x5000000000ull

/* Aperture 2 (ABI 2.1): PTEs holding this process's own virtual addresses, reached through
 * an SVA domain at the function's SVA PASID. Copies both ways and a semaphore in ordinary
 * mmap memory; a read-only page faults on write, an unmapped page on read, and once the
 * PASID is detached every access faults. */
static void test_sva_aperture(void **state)
{
	struct sctx *s = sctx_new(0);
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_SVA };
	struct iommu_domain *sva;
	struct vgpu_fault_entry fe;
	struct schan c;
	const uint64_t len = 64u << 10;
	uint8_t *mem = mmap(NULL, 4 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			    -1, 0);
	uint64_t vram = tgpu_vmem(s->t, 1, len, VGPU_GMMU_PAGE_64K);
	uint64_t src = SVA_VA, dst = SVA_VA + len, ro = SVA_VA + 2 * len, gone = SVA_VA + 3 * len;

	(void)state;
	assert_true(mem != MAP_FAILED);
	assert_int_equal(iommu_domain_alloc(s->mmu, &o, &sva), 0);
	assert_int_equal(iommu_pasid_attach(s->mmu, 1, VGPU_SVA_PASID, sva), 0);
	tgpu_map(s->t, 1, SVA_VA, (uint64_t)(uintptr_t)mem, 4 * len, VGPU_GMMU_PAGE_4K,
		 VGPU_GMMU_APER_SVA);
	for (uint64_t i = 0; i < len; i++)
		mem[i] = (uint8_t)(i * 13 + 5);
	memset(mem + 2 * len, 0x5a, len);
	assert_int_equal(mprotect(mem + 2 * len, len, PROT_READ), 0);
	assert_int_equal(munmap(mem + 3 * len, len), 0);
	schan_init(s, &c, 0, 0);
	uint32_t dw[] = {
		VGPU_MTHD(VGPU_M_COPY, 6), lo32(src), hi32(src), lo32(vram), hi32(vram), len, 0,
		VGPU_MTHD(VGPU_M_COPY, 6), lo32(vram), hi32(vram), lo32(dst), hi32(dst), len, 0,
		VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(dst + 8), hi32(dst + 8), 77, 0, 0,
		VGPU_MTHD(VGPU_M_COPY, 6), lo32(ro), hi32(ro), lo32(vram), hi32(vram), 4096, 0,
	};
	schan_submit(s, &c, 0, 0, dw, VGPU_ARRAY_SIZE(dw));
	assert_int_equal(schan_wait(&c), 0);
	assert_memory_equal(tgpu_va(s->t, 1, vram, 4096), mem + 2 * len, 4096);
	assert_memory_equal(mem + len + 16, mem + 16, len - 16);
	assert_int_equal(*(uint32_t *)(mem + len + 8), 77);
	gpu_priv_chan_free(s->t->p, 1, 0);

	/* GPU write into the read-only page: a fault, the page unchanged. */
	schan_init(s, &c, 1, 256u << 10);
	uint32_t dw_ro[] = { VGPU_MTHD(VGPU_M_FILL, 5), lo32(ro), hi32(ro), 4096, 0, 0x11111111 };

	schan_submit(s, &c, 1, 256u << 10, dw_ro, VGPU_ARRAY_SIZE(dw_ro));
	assert_int_equal(schan_wait(&c), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(gpu_fault_pop(s->t->g, 1, &fe), 0);
	assert_int_equal(fe.reason, VGPU_FAULT_IOMMU);
	assert_true(fe.va == ro && fe.access == VGPU_ACCESS_WRITE);
	assert_int_equal(mem[2 * len], 0x5a);
	gpu_priv_chan_free(s->t->p, 1, 1);

	/* GPU read of the unmapped range: a fault at its VA. */
	schan_init(s, &c, 2, 512u << 10);
	uint32_t dw_gone[] = { VGPU_MTHD(VGPU_M_COPY, 6), lo32(gone), hi32(gone), lo32(vram),
			       hi32(vram), 4096, 0 };

	schan_submit(s, &c, 2, 512u << 10, dw_gone, VGPU_ARRAY_SIZE(dw_gone));
	assert_int_equal(schan_wait(&c), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(gpu_fault_pop(s->t->g, 1, &fe), 0);
	assert_true(fe.va == gone && fe.access == VGPU_ACCESS_READ);
	gpu_priv_chan_free(s->t->p, 1, 2);

	/* No PASID bound: the same good copy faults. */
	assert_int_equal(iommu_pasid_detach(s->mmu, 1, VGPU_SVA_PASID), 0);
	schan_init(s, &c, 3, 768u << 10);
	schan_submit(s, &c, 3, 768u << 10, dw, 7);
	assert_int_equal(schan_wait(&c), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(gpu_fault_pop(s->t->g, 1, &fe), 0);
	assert_true(fe.va == src);
	gpu_priv_chan_free(s->t->p, 1, 3);
	assert_int_equal(iommu_domain_free(sva), 0);
	munmap(mem, 3 * len);
	sctx_free(s);
}

/* ---- page requests the guest answers late ---- */

/* What an engine clock read adds; how late the guest answers a page request (past the
 * default preemption timeout, 100 ms). */
#define PR_TICK		(10 * VGPU_NSEC_PER_USEC)
#define PR_LEAP		(150 * VGPU_NSEC_PER_MSEC)

/* The guest's page-request service, answering in the faulting engine's thread: it moves
 * the engine's clock on by PR_LEAP (the time it took), makes the page present and answers.
 * The engine clock is this test's: PR_TICK more at every read. */
struct slow_pri {
	struct iommu *mmu;
	_Atomic uint64_t now;
	atomic_uint answered;
};

static uint64_t slow_clock(void *arg)
{
	struct slow_pri *p = arg;

	return atomic_fetch_add(&p->now, PR_TICK) + PR_TICK;
}

static void slow_answer(void *ctx, const struct iommu_page_request *req)
{
	struct slow_pri *p = ctx;

	atomic_fetch_add(&p->now, PR_LEAP);
	assert_int_equal(mprotect((void *)(uintptr_t)req->addr, 4096, PROT_READ | PROT_WRITE), 0);
	assert_int_equal(iommu_page_response(p->mmu, req->rid, req->prg_index, IOMMU_PRG_SUCCESS),
			 0);
	atomic_fetch_add(&p->answered, 1);
}

/* A COPY from SVA memory none of whose pages is present, in one 64 KiB GMMU page: the
 * guest answers the first page request PR_LEAP late. That wait is the function's time, not
 * the host's: the COPY stops after the page (not after the piece or 256 KiB) to check its
 * slice, the turn is far past it and the channel is put in error for not yielding within
 * the preemption timeout; no more page is requested, no stall is booked, and the other
 * function's FILL on the same engine runs. */
static void test_sva_late_page_request(void **state)
{
	const uint64_t len = 64u << 10;
	struct iommu_domain_opts po = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_domain_opts so = { .type = IOMMU_DOMAIN_SVA };
	struct slow_pri *p = calloc(1, sizeof(*p));
	struct iommu_domain *pg, *sva;
	struct gpu_sched_stats st;
	struct tchan a, b;
	struct tgpu *t;
	uint8_t *raw, *mem;
	uint64_t vram, dst2;

	(void)state;
	assert_non_null(p);
	atomic_store(&p->now, VGPU_NSEC_PER_SEC);
	assert_int_equal(iommu_create(NULL, &p->mmu), 0);
	assert_int_equal(iommu_domain_alloc(p->mmu, &po, &pg), 0);
	assert_int_equal(iommu_attach(p->mmu, 1, pg), 0);
	assert_int_equal(iommu_domain_alloc(p->mmu, &so, &sva), 0);
	assert_int_equal(iommu_pasid_attach(p->mmu, 1, VGPU_SVA_PASID, sva), 0);
	assert_int_equal(iommu_pri_enable(p->mmu, 1, 32, slow_answer, p), 0);
	raw = mmap(NULL, 2 * len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(raw != MAP_FAILED);
	mem = (uint8_t *)cmn_align_up((uintptr_t)raw, len);
	t = tgpu_new_cfg((struct gpu_config){ .nr_vfs = 2, .nr_engines = 1, .iommu = p->mmu,
					      .spin_ns = VGPU_NSEC_PER_SEC,
					      .clock_ns = slow_clock, .clock_arg = p }, 16);
	tgpu_map(t, 1, SVA_VA, (uint64_t)(uintptr_t)mem, len, VGPU_GMMU_PAGE_64K,
		 VGPU_GMMU_APER_SVA);
	vram = tgpu_vmem(t, 1, len, VGPU_GMMU_PAGE_64K);
	dst2 = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_4K);
	tchan_init(t, &a, 1, 0, 0, 16);
	tchan_init(t, &b, 2, 0, 0, 16);
	TM(&a, VGPU_M_COPY, lo32(SVA_VA), hi32(SVA_VA), lo32(vram), hi32(vram), lo32(len), 0);
	tchan_gp(&a);
	TM(&b, VGPU_M_FILL, lo32(dst2), hi32(dst2), 4096, 0, 0x77);
	tchan_gp(&b);
	tchan_kick(t, &a);
	tchan_kick(t, &b);
	assert_int_equal(tchan_wait(&a), VGPU_CHAN_ERR_PREEMPT_TIMEOUT);
	assert_int_equal(tchan_wait(&b), 0);
	assert_int_equal(*(uint32_t *)tgpu_va(t, 2, dst2, 4), 0x77);
	gpu_sched_stats(t->g, 1, &st);
	print_message("page requests %u, preempt timeouts %lu, stall %lu ns\n",
		      atomic_load(&p->answered), st.preempt_timeouts, st.stall_ns);
	assert_int_equal(atomic_load(&p->answered), 1);
	assert_int_equal(st.preempt_timeouts, 1);
	assert_true(st.stall_ns < PR_LEAP);
	tgpu_free(t);
	iommu_pri_disable(p->mmu, 1);
	iommu_pasid_detach(p->mmu, 1, VGPU_SVA_PASID);
	iommu_detach(p->mmu, 1);
	iommu_domain_free(sva);
	iommu_domain_free(pg);
	iommu_destroy(p->mmu);
	munmap(raw, 2 * len);
	free(p);
}

/* ---- a partition moved at a turn's end ---- */

#define MV_USERD	IOVA			/* USERD's page */
#define MV_SEM		(IOVA + (1u << 20))	/* a semaphore page, mapped on demand */
#define MV_ENTRIES	512u
#define MV_PB		(64u << 10)		/* the pushbuffer, in the channel's area */

/* The guest's page-request service of test_partition_move_at_turn_end(), answering in the
 * engine's thread. The semaphore's request (the turn's last method) maps that page and
 * unmaps USERD's, so the write-back of GP_GET that ends the turn makes a request too; at
 * that one the GSP moves function 1's partition to @to, the contents copied, and an engine
 * look at the privileged region (a quiesce) queues the invalidation of its translations. */
struct mv_pri {
	struct tgpu *t;
	struct iommu *mmu;
	struct iommu_domain *dom;
	struct iommu_memobj *mo;
	uint64_t from, to, pb_pa;
	atomic_uint requests;
	bool moved;
};

static void mv_map(struct mv_pri *m, uint64_t iova)
{
	uint64_t at = iova;

	assert_int_equal(iommu_map(m->dom, m->mo, iova - IOVA, 4096, IOMMU_READ | IOMMU_WRITE,
				   IOMMU_MAP_FIXED_IOVA, &at), 0);
}

static void mv_answer(void *ctx, const struct iommu_page_request *req)
{
	struct mv_pri *m = ctx;
	uint64_t n;

	atomic_fetch_add(&m->requests, 1);
	if (req->addr == MV_SEM) {
		mv_map(m, MV_SEM);
		assert_int_equal(iommu_unmap(m->dom, MV_USERD, 4096, &n), 0);
	} else if (req->addr == MV_USERD && !m->moved) {
		struct tgpu *t = m->t;

		assert_int_equal(gpu_priv_partition_set(t->p, 1, 0, 0), 0);
		memcpy(gpu_vram_ptr(t->g, m->to, t->slice), gpu_vram_ptr(t->g, m->from, t->slice),
		       t->slice);
		assert_int_equal(gpu_priv_partition_set(t->p, 1, m->to, t->slice), 0);
		/* The next segment differs in the new range: a release of 222, not 111. */
		((uint32_t *)gpu_vram_ptr(t->g, m->to + m->pb_pa, 32))[3] = 222;
		assert_int_equal(gpu_chan_quiesce(t->g, 2, 0, T_TIMEOUT), 0);
		m->moved = true;
		mv_map(m, MV_USERD);
	}
	assert_int_equal(iommu_page_response(m->mmu, req->rid, req->prg_index, IOMMU_PRG_SUCCESS),
			 0);
}

/* A turn that ends after exactly GPU_CHAN_BATCH (256) entries writes GP_GET back and then
 * translates the pages its next submission will be read from (prefetch hints), with the
 * partition it began with. The partition moves between the two (mv_answer()): the
 * translation of the ring's page from the old range must not stay in the engine's TLB, or
 * the channel's next entry is read from the range the function left (a release of 111
 * instead of 222). */
static void test_partition_move_at_turn_end(void **state)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct gpu_config cfg = { .nr_vfs = 3, .nr_engines = 1 };
	struct gpu_priv_sched_fn sched = { .enabled = 1, .quantum_ns = 100 * VGPU_NSEC_PER_SEC,
					   .preempt_timeout_ns = 100 * VGPU_NSEC_PER_SEC };
	struct mv_pri *m = calloc(1, sizeof(*m));
	uint8_t *host = aligned_alloc(2u << 20, SYS_BYTES);
	struct vgpu_userd *u = (struct vgpu_userd *)host;
	struct gpu_priv_chan pc;
	uint64_t area, va, sem, sys_sem = 0x3800000000ull, *gp;
	uint32_t *pb;
	struct tgpu *t;

	(void)state;
	assert_non_null(m);
	assert_non_null(host);
	memset(host, 0, SYS_BYTES);
	assert_int_equal(iommu_create(NULL, &m->mmu), 0);
	assert_int_equal(iommu_domain_alloc(m->mmu, &o, &m->dom), 0);
	assert_int_equal(iommu_attach(m->mmu, 1, m->dom), 0);
	assert_int_equal(iommu_memobj_register(m->mmu, host, SYS_BYTES, &m->mo), 0);
	mv_map(m, MV_USERD);
	assert_int_equal(iommu_pri_enable(m->mmu, 1, 32, mv_answer, m), 0);
	cfg.iommu = m->mmu;
	t = m->t = tgpu_new_cfg(cfg, 64);
	m->from = t->slice;
	m->to = 3 * t->slice;		/* function 3's range, which it gives up */
	assert_int_equal(gpu_priv_partition_set(t->p, 3, 0, 0), 0);
	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &sched), 0);
	/* GPFIFO and pushbuffer in VRAM, one 2 MiB page; USERD in system memory. */
	area = tgpu_alloc(t, 1, 2u << 20);
	va = T_VA_BASE + area;
	tgpu_map(t, 1, va, area, 2u << 20, VGPU_GMMU_PAGE_2M, 0);
	tgpu_map(t, 1, sys_sem, MV_SEM, 4096, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SYS);
	sem = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	gp = tgpu_va(t, 1, va, MV_ENTRIES * 8);
	pb = tgpu_va(t, 1, va + MV_PB, 64);
	m->pb_pa = area + MV_PB + 32;
	pc = (struct gpu_priv_chan){ .runlist = 0, .pdb = t->pdb[1], .gpfifo_va = va,
				     .gpfifo_entries = MV_ENTRIES, .userd_aper = VGPU_APER_SYS,
				     .userd_addr = MV_USERD };
	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, 0, &pc), 0);
	assert_int_equal(gpu_priv_chan_enable(t->p, 1, 0, true), 0);
	assert_int_equal(gpu_priv_runlist_set(t->p, 1, 0, 1), 0);
	/* 255 control entries, then the release into the page not yet mapped. */
	const uint32_t last[] = { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(sys_sem), hi32(sys_sem),
				  1, 0, 0 };
	const uint32_t next[] = { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(sem), hi32(sem), 111, 0,
				  0 };

	memcpy(pb, last, sizeof(last));
	memcpy(pb + 8, next, sizeof(next));
	for (unsigned int i = 0; i < 255; i++)
		gp[i] = VGPU_GP_OPCODE_NOP;
	gp[255] = vgpu_gp_entry(va + MV_PB, 6);
	gp[256] = vgpu_gp_entry(va + MV_PB + 32, 6);
	__atomic_store_n(&u->gp_put, 256, __ATOMIC_RELEASE);
	gpu_doorbell_ring(t->g, 1, vgpu_token(0, 0));
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (__atomic_load_n(&u->gp_get, __ATOMIC_ACQUIRE) != 256 && !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n(&u->gp_get, __ATOMIC_ACQUIRE), 256);
	assert_true(m->moved);
	assert_int_equal(atomic_load(&m->requests), 2);
	assert_int_equal(__atomic_load_n(&u->error, __ATOMIC_ACQUIRE), 0);
	/* The next entry, published now, is read from the new range. */
	__atomic_store_n(&u->gp_put, 257, __ATOMIC_RELEASE);
	gpu_doorbell_ring(t->g, 1, vgpu_token(0, 0));
	while (__atomic_load_n(&u->gp_get, __ATOMIC_ACQUIRE) != 257 && !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n(&u->gp_get, __ATOMIC_ACQUIRE), 257);
	assert_int_equal(__atomic_load_n((uint32_t *)tgpu_va(t, 1, sem, 4), __ATOMIC_ACQUIRE), 222);
	assert_int_equal(*(uint32_t *)gpu_vram_ptr(t->g, m->from + sem - T_VA_BASE, 4), 0);
	tgpu_free(t);
	iommu_pri_disable(m->mmu, 1);
	iommu_unmap(m->dom, 0, UINT64_MAX, NULL);
	iommu_detach(m->mmu, 1);
	iommu_domain_free(m->dom);
	iommu_memobj_unregister(m->mo);
	iommu_destroy(m->mmu);
	free(host);
	free(m);
}

/* ---- USERD under the model lock: no page request ---- */

#define NP_USERD	0x40000000ull	/* an IOVA function 1's domain does not map */

/* The page-request service of a guest that enables PRI and never answers; it only counts,
 * unless told to answer Invalid (@answer). */
struct never_pri {
	struct iommu *mmu;
	atomic_uint calls;
	atomic_bool answer;
};

static void never_answer(void *ctx, const struct iommu_page_request *req)
{
	struct never_pri *p = ctx;

	atomic_fetch_add(&p->calls, 1);
	if (atomic_load(&p->answer))
		assert_int_equal(iommu_page_response(p->mmu, req->rid, req->prg_index,
						     IOMMU_PRG_INVALID), 0);
}

/* Wait until @rid's IOMMU fault log has taken @want more records, each @reason. */
static void wait_iommu_faults(struct iommu *mmu, unsigned int rid, size_t want,
			      unsigned int reason)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	struct iommu_fault_rec r[64];
	size_t got = 0, n;

	while (got < want && !cmn_deadline_passed(dl)) {
		assert_int_equal(iommu_fault_log_read(mmu, rid, r, 64, &n, NULL), 0);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(r[i].reason, reason);
		got += n;
		if (got < want)
			cmn_sleep_ns(50 * VGPU_NSEC_PER_USEC);
	}
	assert_true(got >= want);
}

/* Function 1's channel @chid, resident and enabled, its USERD at unmapped NP_USERD. */
static void np_chan(struct tgpu *t, unsigned int chid)
{
	uint64_t ring = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	struct gpu_priv_chan pc = { .runlist = 0, .pdb = t->pdb[1], .gpfifo_va = ring,
				    .gpfifo_entries = 16, .userd_aper = VGPU_APER_SYS,
				    .userd_addr = NP_USERD + chid * 4096ull };
	uint64_t rl = gpu_priv_shared(t->p)->fns[1].runlist[0];

	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, chid, &pc), 0);
	assert_int_equal(gpu_priv_chan_enable(t->p, 1, chid, true), 0);
	assert_int_equal(gpu_priv_runlist_set(t->p, 1, 0, rl | VGPU_BIT(chid)), 0);
}

/* A guest enables PRI, never answers, and has a resident, enabled channel whose USERD in
 * system memory is unmapped. The GP_PUT scan reads that USERD every period with the model
 * lock held, which every engine needs: the read faults at once (UNMAPPED), with no page
 * request, else each scan would hold the lock for the IOMMU's wait (1 s). Function 2's
 * channel on the same engine completes its work meanwhile, and an error the host puts the
 * faulty channel in (under the lock too) writes its notifier with no request either. The
 * channel's own turn, run without the lock, still asks. */
static void test_userd_scan_no_page_request(void **state)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct never_pri *p = calloc(1, sizeof(*p));
	struct iommu_pri_stats st;
	struct iommu_domain *dom;
	struct gpu_chan_status cs;
	struct tchan b;
	struct tgpu *t;
	uint64_t dst;

	(void)state;
	assert_non_null(p);
	assert_int_equal(iommu_create(NULL, &p->mmu), 0);
	assert_int_equal(iommu_domain_alloc(p->mmu, &o, &dom), 0);
	assert_int_equal(iommu_attach(p->mmu, 1, dom), 0);
	assert_int_equal(iommu_pri_enable(p->mmu, 1, 16, never_answer, p), 0);
	t = tgpu_new_cfg((struct gpu_config){ .nr_vfs = 2, .nr_engines = 1, .iommu = p->mmu,
					      .scan_period_ns = 100 * VGPU_NSEC_PER_USEC }, 16);
	np_chan(t, 0);
	wait_iommu_faults(p->mmu, 1, 3, IOMMU_FAULT_UNMAPPED);	/* three scans passed it */
	dst = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_4K);
	tchan_init(t, &b, 2, 0, 0, 16);
	for (unsigned int i = 0; i < 8; i++) {
		TM(&b, VGPU_M_FILL, lo32(dst), hi32(dst), 4096, 0, 0x100 + i);
		tchan_gp(&b);
		tchan_kick(t, &b);
		assert_int_equal(tchan_wait(&b), 0);
		assert_int_equal(*(uint32_t *)tgpu_va(t, 2, dst, 4), 0x100 + i);
	}
	wait_iommu_faults(p->mmu, 1, 3, IOMMU_FAULT_UNMAPPED);
	/* The host's error: the notifier's five words, each a fault at once. */
	assert_int_equal(gpu_chan_error(t->g, 1, 0, VGPU_CHAN_ERR_PREEMPT_TIMEOUT), 0);
	assert_int_equal(gpu_chan_status(t->g, 1, 0, &cs), 0);
	assert_int_equal(cs.state, GPU_CHAN_STATE_ERROR);
	assert_int_equal(atomic_load(&p->calls), 0);
	assert_int_equal(iommu_pri_get_stats(p->mmu, 1, &st), 0);
	assert_int_equal(st.requests, 0);
	assert_int_equal(st.timeouts, 0);
	/* A turn of another such channel, rung: its own read asks (answered Invalid now). */
	atomic_store(&p->answer, true);
	np_chan(t, 1);
	gpu_doorbell_ring(t->g, 1, vgpu_token(0, 1));
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	do {
		assert_int_equal(gpu_chan_status(t->g, 1, 1, &cs), 0);
		if (cs.state != GPU_CHAN_STATE_ERROR)
			cmn_sleep_ns(50 * VGPU_NSEC_PER_USEC);
	} while (cs.state != GPU_CHAN_STATE_ERROR && !cmn_deadline_passed(dl));
	assert_int_equal(cs.state, GPU_CHAN_STATE_ERROR);
	assert_int_equal(cs.error, VGPU_CHAN_ERR_USERD_FAULT);
	assert_true(atomic_load(&p->calls) >= 1);
	tgpu_free(t);
	iommu_pri_disable(p->mmu, 1);
	iommu_detach(p->mmu, 1);
	iommu_domain_free(dom);
	iommu_destroy(p->mmu);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sys_channel),
		{ "test_sys_channel streamed", test_sys_channel, NULL, NULL, (void *)1 },
		cmocka_unit_test(test_iommu_unmapped),
		cmocka_unit_test(test_sva_aperture),
		cmocka_unit_test(test_sva_late_page_request),
		cmocka_unit_test(test_partition_move_at_turn_end),
		cmocka_unit_test(test_userd_scan_no_page_request),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
