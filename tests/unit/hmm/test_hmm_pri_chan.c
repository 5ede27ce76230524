// SPDX-License-Identifier: MIT
/* Page requests served through hmm, end to end through a channel: the GPU model's engines
 * run GPFIFO work (COPY, FILL) whose GMMU PTEs hold this process's own addresses (aperture
 * SVA) and reach them through the IOMMU model's SVA PASID, with hmm_pri_attach() serving
 * the page requests. Never-touched, paged-out and file pages and device-resident managed
 * pages on every backend complete with the right bytes and no channel error; an unmapped
 * address, a missing permission and a bound process that has exited still end in the
 * channel's IOMMU fault. A request storm of one function keeps to its outstanding limit
 * while a channel of another function completes its work.
 *
 * The hmm suites also run with VGPU_HMM_CAPS=6.1, so all of this runs on both paths. */
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "pri_test.h"
#include "tests/unit/gpu_model/gpu_test.h"
#include <vgpu/sva.h>

#define NR_VFS		2
#define MAX_OUT		16

struct cfix {
	struct iommu *mmu;
	struct tgpu *t;
	struct iommu_domain *d0[NR_VFS + 1], *sva[NR_VFS + 1];
	struct hmm_mm *mm;
	struct hmm_pri pri[NR_VFS + 1];
	bool served[NR_VFS + 1];
	unsigned int next_chid[NR_VFS + 1];
};

/* The IOMMU, a device with NR_VFS VFs and 4 engines behind it, and an SVA domain of this
 * process at each VF's SVA PASID (RID = function number, as gpu_model issues them). */
static void cfix_up(struct cfix *f, struct hmm_mm *mm)
{
	struct iommu_domain_opts po = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_domain_opts so = { .type = IOMMU_DOMAIN_SVA };

	memset(f, 0, sizeof(*f));
	f->mm = mm;
	assert_int_equal(iommu_create(NULL, &f->mmu), 0);
	for (unsigned int fn = 1; fn <= NR_VFS; fn++) {
		assert_int_equal(iommu_domain_alloc(f->mmu, &po, &f->d0[fn]), 0);
		assert_int_equal(iommu_domain_alloc(f->mmu, &so, &f->sva[fn]), 0);
		assert_int_equal(iommu_attach(f->mmu, fn, f->d0[fn]), 0);
		assert_int_equal(iommu_pasid_attach(f->mmu, fn, VGPU_SVA_PASID, f->sva[fn]), 0);
	}
	f->t = tgpu_new_cfg((struct gpu_config){ .nr_vfs = NR_VFS, .nr_engines = 4,
						 .iommu = f->mmu }, 32);
}

/* Serve @fn's page requests from the fixture's mm, at most @max outstanding. */
static void cfix_serve(struct cfix *f, unsigned int fn, unsigned int max)
{
	assert_int_equal(hmm_pri_attach(&f->pri[fn], f->mm, f->mmu, fn, VGPU_SVA_PASID, max), 0);
	f->served[fn] = true;
}

static void cfix_down(struct cfix *f)
{
	tgpu_free(f->t);
	for (unsigned int fn = 1; fn <= NR_VFS; fn++) {
		if (f->served[fn])
			hmm_pri_detach(&f->pri[fn]);
		assert_int_equal(iommu_pasid_detach(f->mmu, fn, VGPU_SVA_PASID), 0);
		assert_int_equal(iommu_detach(f->mmu, fn), 0);
		assert_int_equal(iommu_domain_free(f->sva[fn]), 0);
		assert_int_equal(iommu_domain_free(f->d0[fn]), 0);
	}
	iommu_destroy(f->mmu);
	if (f->mm)
		hmm_mm_destroy(f->mm);
}

/* GPU VA == CPU VA: @len bytes at @p mapped with 4 KiB SVA PTEs in @fn's address space. */
static void map_sva(struct cfix *f, unsigned int fn, const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(PG - 1);
	uintptr_t e = cmn_align_up((uintptr_t)p + len, PG);

	tgpu_map(f->t, fn, a, a, e - a, VGPU_GMMU_PAGE_4K, VGPU_GMMU_APER_SVA);
}

/* A fresh channel of @fn on runlist @rl (channels in error are left behind). */
static void chan_new(struct cfix *f, struct tchan *c, unsigned int fn, unsigned int rl)
{
	tchan_init(f->t, c, fn, f->next_chid[fn]++, rl, 256);
}

static void m_copy(struct tchan *c, uint64_t src, uint64_t dst, uint64_t len)
{
	TM(c, VGPU_M_COPY, lo32(src), hi32(src), lo32(dst), hi32(dst), lo32(len), hi32(len));
	tchan_gp(c);
}

static void m_fill(struct tchan *c, uint64_t dst, uint64_t len, uint32_t v)
{
	TM(c, VGPU_M_FILL, lo32(dst), hi32(dst), lo32(len), hi32(len), v);
	tchan_gp(c);
}

static uint64_t va(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static void check_u32(const void *p, size_t bytes, uint32_t v)
{
	const uint32_t *w = p;

	for (size_t i = 0; i < bytes / 4; i++)
		if (w[i] != v)
			fail_msg("word %zu: %#x, want %#x", i, w[i], v);
}

/* Pages the process never touched, pages paged out with MADV_PAGEOUT and pages of a file
 * mapping dropped from the page cache: copies to and from VRAM and fills complete, with
 * the right bytes and no channel error or IOMMU fault. */
static void test_not_present(void **state)
{
	struct cfix f;
	struct tchan c;
	uint8_t *anon, *file, *vr;
	uint64_t vram;
	int fd;

	(void)state;
	cfix_up(&f, tmm_any());
	cfix_serve(&f, 1, MAX_OUT);
	vram = tgpu_vmem(f.t, 1, 16 * PG, VGPU_GMMU_PAGE_4K);
	vr = tgpu_va(f.t, 1, vram, 16 * PG);
	memset(vr, 0xee, 16 * PG);
	anon = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(anon != MAP_FAILED);
	fd = tpri_cold_file(8, 0x77, &file);
	/* pages 8..11 written and paged out; 0..7 never touched */
	memset(anon + 8 * PG, 0x42, 4 * PG);
	madvise(anon + 8 * PG, 4 * PG, MADV_PAGEOUT);
	map_sva(&f, 1, anon, 16 * PG);
	map_sva(&f, 1, file, 8 * PG);
	chan_new(&f, &c, 1, 0);
	m_copy(&c, va(anon), vram, 2 * PG);			/* never touched -> VRAM 0..1 */
	m_fill(&c, va(anon + 2 * PG), 2 * PG, 0x5a5a5a5a);	/* never touched, written */
	m_copy(&c, va(anon + 8 * PG), vram + 2 * PG, 2 * PG);	/* paged out -> VRAM 2..3 */
	m_copy(&c, vram + 14 * PG, va(anon + 10 * PG), PG);	/* VRAM -> paged out */
	m_copy(&c, va(file + PG), vram + 4 * PG, 2 * PG);	/* file -> VRAM 4..5 */
	m_copy(&c, vram + 14 * PG, va(file + 4 * PG), PG);	/* VRAM -> file */
	tchan_kick(f.t, &c);
	assert_int_equal(tchan_wait(&c), 0);
	check_u32(vr, 2 * PG, 0);
	check_u32(anon + 2 * PG, 2 * PG, 0x5a5a5a5a);
	check_u32(vr + 2 * PG, 2 * PG, 0x42424242);
	check_u32(anon + 10 * PG, PG, 0xeeeeeeee);
	check_u32(anon + 11 * PG, PG, 0x42424242);
	check_u32(vr + 4 * PG, 2 * PG, 0x77777777);
	assert_int_equal(msync(file, 8 * PG, MS_SYNC), 0);
	{
		uint8_t out[PG];

		assert_int_equal(pread(fd, out, PG, 4 * PG), PG);
		check_u32(out, PG, 0xeeeeeeee);
		assert_int_equal(pread(fd, out, PG, 5 * PG), PG);
		check_u32(out, PG, 0x77777777);
	}
	assert_int_equal(t_faults(f.mmu, 1, NULL), 0);
	munmap(file, 8 * PG);
	close(fd);
	munmap(anon, 16 * PG);
	cfix_down(&f);
}

static const struct backend_case backends[] =
	TPRI_BACKEND_CASES("channel: device-resident managed pages, ");

/* Managed pages migrated to device memory: the channel's copies and fills of them bring
 * them back (a page request each where the backend makes the copy fail: SIGBUS and
 * mprotect), with their data, and the channel ends without an error. */
static void test_managed(void **state)
{
	const struct backend_case *c = *state;
	static int owner;
	struct hmm_devmem *dm;
	struct hmm_pri_stats st;
	struct cfix f;
	struct tchan ch;
	uint64_t vram;
	uint8_t *buf, *vr;

	cfix_up(&f, tmm_new(c->backend, 0));
	cfix_serve(&f, 1, MAX_OUT);
	buf = tpri_managed(f.mm, &owner, 32, 21, &dm);
	vram = tgpu_vmem(f.t, 1, 16 * PG, VGPU_GMMU_PAGE_4K);
	vr = tgpu_va(f.t, 1, vram, 16 * PG);
	memset(vr, 0x3c, 16 * PG);
	map_sva(&f, 1, buf, 32 * PG);
	chan_new(&f, &ch, 1, 1);
	m_copy(&ch, va(buf), vram, 8 * PG);			/* read 0..7 */
	m_fill(&ch, va(buf + 8 * PG), 4 * PG, 0x12345678);	/* write 8..11 */
	m_copy(&ch, vram + 12 * PG, va(buf + 16 * PG), 4 * PG);	/* write 16..19 */
	tchan_kick(f.t, &ch);
	assert_int_equal(tchan_wait(&ch), 0);
	check_ints(vr, 8 * PG, 21);
	for (size_t i = 0; i < 20; i++)
		if (i < 12 || i >= 16)
			assert_int_equal(hmm_mm_page_where(f.mm, buf + i * PG, NULL, NULL),
					 HMM_PAGE_SYSTEM);
	check_u32(buf + 8 * PG, 4 * PG, 0x12345678);
	check_u32(buf + 16 * PG, 4 * PG, 0x3c3c3c3c);
	/* untouched by the GPU: still on the device, and its data comes back to the CPU */
	assert_int_equal(hmm_mm_page_where(f.mm, buf + 24 * PG, NULL, NULL), HMM_PAGE_DEVICE);
	check_ints(buf + 12 * PG, 4 * PG, 21 + (int)(12 * PG / sizeof(int)));
	check_ints(buf + 20 * PG, 12 * PG, 21 + (int)(20 * PG / sizeof(int)));
	assert_int_equal(t_faults(f.mmu, 1, NULL), 0);
	hmm_pri_get_stats(&f.pri[1], &st);
	assert_int_equal(st.invalid, 0);
	assert_int_equal(st.served, st.requests);
	if (c->backend != HMM_BACKEND_UFFD_THREAD)
		assert_true(st.served >= 16);	/* each page the channel touched came by request */
	hmm_pri_detach(&f.pri[1]);
	f.served[1] = false;
	assert_int_equal(hmm_region_remove(f.mm, buf), 0);
	munmap(buf, M2);
	cfix_down(&f);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
}

/* Submit @src -> VRAM on a fresh channel of VF 1 (or a fill of @dst when @write) and
 * check that it ends in the IOMMU fault at that address. */
static void expect_fault(struct cfix *f, uint64_t addr, bool write, unsigned int want_reason)
{
	struct vgpu_fault_entry fe;
	struct tchan c;
	unsigned int reason = 0;
	uint64_t vram = tgpu_vmem(f->t, 1, PG, VGPU_GMMU_PAGE_4K);

	chan_new(f, &c, 1, 0);
	if (write)
		m_fill(&c, addr, PG, 0x11111111);
	else
		m_copy(&c, addr, vram, PG);
	tchan_kick(f->t, &c);
	assert_int_equal(tchan_wait(&c), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(gpu_fault_pop(f->t->g, 1, &fe), 0);
	assert_int_equal(fe.reason, VGPU_FAULT_IOMMU);
	assert_true(fe.va == addr);
	assert_int_equal(fe.access, write ? VGPU_ACCESS_WRITE : VGPU_ACCESS_READ);
	assert_true(t_faults(f->mmu, 1, &reason) >= 1);
	assert_int_equal(reason, want_reason);
}

/* No VMA, a write to a read-only page, a PROT_NONE page hmm does not manage: the page
 * request is answered Invalid and the channel ends in the IOMMU fault it gives without
 * PRI, at the address; the read-only page is unchanged. */
static void test_invalid(void **state)
{
	struct hmm_pri_stats st;
	struct cfix f;
	uint8_t *p;

	(void)state;
	cfix_up(&f, tmm_any());
	cfix_serve(&f, 1, MAX_OUT);
	p = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 0x5e, PG);
	map_sva(&f, 1, p, 3 * PG);
	assert_int_equal(munmap(p + 2 * PG, PG), 0);
	assert_int_equal(mprotect(p, PG, PROT_READ), 0);
	assert_int_equal(mprotect(p + PG, PG, PROT_NONE), 0);
	expect_fault(&f, va(p + 2 * PG), false, IOMMU_FAULT_PRI_INVALID);
	expect_fault(&f, va(p), true, IOMMU_FAULT_PRI_INVALID);
	expect_fault(&f, va(p + PG), false, IOMMU_FAULT_PRI_INVALID);
	check_u32(p, PG, 0x5e5e5e5e);
	hmm_pri_get_stats(&f.pri[1], &st);
	assert_int_equal(st.served, 0);
	assert_true(st.invalid >= 3);
	assert_int_equal(st.invalid, st.requests);
	munmap(p, 2 * PG);
	cfix_down(&f);
}

/* The bound process has exited: no page request is raised (nothing could make its page
 * present) and the channel ends in the IOMMU fault (SVA_GONE). */
static void test_process_gone(void **state)
{
	struct iommu_pri_stats ist;
	struct iommu_domain *gone;
	struct cfix f;
	uint8_t *p;
	int go[2];
	pid_t pid;

	(void)state;
	cfix_up(&f, tmm_any());
	cfix_serve(&f, 1, MAX_OUT);
	p = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 1, PG);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char b;

		close(go[1]);
		_exit(read(go[0], &b, 1) < 0);
	}
	close(go[0]);
	assert_int_equal(iommu_domain_alloc(f.mmu, &(struct iommu_domain_opts){
			.type = IOMMU_DOMAIN_SVA, .pid = pid }, &gone), 0);
	assert_int_equal(iommu_pasid_detach(f.mmu, 1, VGPU_SVA_PASID), 0);
	assert_int_equal(iommu_pasid_attach(f.mmu, 1, VGPU_SVA_PASID, gone), 0);
	close(go[1]);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	map_sva(&f, 1, p, PG);
	expect_fault(&f, va(p), false, IOMMU_FAULT_SVA_GONE);
	expect_fault(&f, va(p), true, IOMMU_FAULT_SVA_GONE);
	assert_int_equal(iommu_pri_get_stats(f.mmu, 1, &ist), 0);
	assert_int_equal(ist.requests, 0);
	assert_int_equal(iommu_pasid_detach(f.mmu, 1, VGPU_SVA_PASID), 0);
	assert_int_equal(iommu_pasid_attach(f.mmu, 1, VGPU_SVA_PASID, f.sva[1]), 0);
	assert_int_equal(iommu_domain_free(gone), 0);
	munmap(p, PG);
	cfix_down(&f);
}

/* ---- request storm ------------------------------------------------------------------ */

#define STORM_CHANS	3		/* VF 1, runlists 0..2: three engines raising requests */
#define STORM_MAX	2		/* VF 1's outstanding limit, below its engine count */
#define STORM_PAGES	256
#define STORM_ITEM	(16 * PG)	/* one GP entry: 16 page requests */
#define OTHER_ITEMS	256		/* VF 2's work items, on runlist 0 beside a storm channel */

struct storm {
	struct cfix *f;
	struct hmm_devmem *dm;
	struct tchan c[STORM_CHANS];
	uint8_t *buf[STORM_CHANS];
	uint64_t vram[STORM_CHANS];
	const uint8_t *vr[STORM_CHANS];	/* host view of vram[] */
	_Atomic bool stop;
	unsigned long rounds;
	int err;			/* first channel error or failed check */
};

/* Round after round until told to stop: every storm buffer migrated to device memory,
 * then read by its channel in STORM_ITEM pieces, each page by a page request. */
static void *storm_main(void *arg)
{
	struct storm *s = arg;
	struct hmm_migrate_result res;

	while (!atomic_load(&s->stop) && !s->err) {
		for (int i = 0; i < STORM_CHANS; i++) {
			if (hmm_migrate_to_device(s->f->mm, s->dm, s->buf[i], STORM_PAGES * PG,
						  &res)) {
				s->err = -EIO;
				return NULL;
			}
			for (size_t off = 0; off < STORM_PAGES * PG; off += STORM_ITEM)
				m_copy(&s->c[i], va(s->buf[i] + off), s->vram[i] + off,
				       STORM_ITEM);
			tchan_kick(s->f->t, &s->c[i]);
		}
		for (int i = 0; i < STORM_CHANS && !s->err; i++) {
			s->err = tchan_wait(&s->c[i]);
			if (!s->err && memcmp(s->vr[i], s->buf[i], STORM_PAGES * PG))
				s->err = -EBADMSG;
		}
		s->rounds++;
	}
	return NULL;
}

/* Wait until VF 1 has raised a page request; false if none came in T_TIMEOUT. */
static bool storm_started(struct cfix *f)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	struct iommu_pri_stats ist;

	for (;;) {
		assert_int_equal(iommu_pri_get_stats(f->mmu, 1, &ist), 0);
		if (ist.requests)
			return true;
		if (cmn_deadline_passed(dl))
			return false;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
}

/* One function's channels raise page requests continuously (device-resident managed
 * pages, mprotect backend) while a channel of another function, on an engine one of them
 * uses, completes OTHER_ITEMS work items: all of them complete with the right data, the
 * storm's channels end without an error, and the storm never has more than its limit of
 * requests outstanding. Counts only. */
static void test_storm(void **state)
{
	static int owner;
	struct iommu_pri_stats ist;
	struct hmm_pri_stats st;
	struct storm s = { 0 };
	struct cfix f;
	struct tchan other;
	uint64_t ovram;
	uint8_t *obuf;
	pthread_t th;

	(void)state;
	cfix_up(&f, tmm_new(HMM_BACKEND_MPROTECT, 0));
	cfix_serve(&f, 1, STORM_MAX);
	cfix_serve(&f, 2, STORM_MAX);
	s.f = &f;
	s.dm = tpool_new(&owner, 2 * M2);
	for (int i = 0; i < STORM_CHANS; i++) {
		s.buf[i] = tbuf_new(STORM_PAGES * PG, false);
		assert_int_equal(hmm_region_add(f.mm, s.buf[i], STORM_PAGES * PG), 0);
		fill_ints(s.buf[i], STORM_PAGES * PG, 1000 * i);
		map_sva(&f, 1, s.buf[i], STORM_PAGES * PG);
		s.vram[i] = tgpu_vmem(f.t, 1, STORM_PAGES * PG, VGPU_GMMU_PAGE_64K);
		s.vr[i] = tgpu_va(f.t, 1, s.vram[i], STORM_PAGES * PG);
		tchan_init(f.t, &s.c[i], 1, i, (unsigned int)i, 256);
	}
	/* VF 2: fills of its own (ordinary) memory, copied on to its VRAM */
	obuf = mmap(NULL, OTHER_ITEMS * 64, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(obuf != MAP_FAILED);
	map_sva(&f, 2, obuf, OTHER_ITEMS * 64);
	ovram = tgpu_vmem(f.t, 2, OTHER_ITEMS * 64, VGPU_GMMU_PAGE_4K);
	tchan_init(f.t, &other, 2, 0, 0, 1024);

	assert_int_equal(pthread_create(&th, NULL, storm_main, &s), 0);
	/* the storm is under way before the other function submits anything */
	assert_true(storm_started(&f));
	for (uint32_t i = 0; i < OTHER_ITEMS; i++) {
		m_fill(&other, va(obuf + i * 64), 64, i + 1);
		m_copy(&other, va(obuf + i * 64), ovram + i * 64, 64);
		if (i % 64 == 63)
			tchan_kick(f.t, &other);
		if (i % 64 == 63)
			assert_int_equal(tchan_wait(&other), 0);
	}
	atomic_store(&s.stop, true);
	assert_int_equal(pthread_join(th, NULL), 0);
	/* What the storm's requests came to, before any verdict: a failure says why. */
	assert_int_equal(iommu_pri_get_stats(f.mmu, 1, &ist), 0);
	hmm_pri_get_stats(&f.pri[1], &st);
	print_message("storm: %lu rounds (error %d), %llu requests, %llu waited for a group, at "
		      "most %u outstanding (limit %u), %llu timed out; hmm: %llu of %llu served, "
		      "%llu invalid\n", s.rounds, s.err, (unsigned long long)ist.requests,
		      (unsigned long long)ist.waited, ist.outstanding_max, ist.max,
		      (unsigned long long)ist.timeouts, (unsigned long long)st.served,
		      (unsigned long long)st.requests, (unsigned long long)st.invalid);

	for (uint32_t i = 0; i < OTHER_ITEMS; i++) {
		check_u32(obuf + i * 64, 64, i + 1);
		check_u32(tgpu_va(f.t, 2, ovram + i * 64, 64), 64, i + 1);
	}
	assert_int_equal(tchan_get(&other), other.put);
	assert_int_equal(tchan_err(&other), 0);
	assert_int_equal(s.err, 0);
	assert_true(s.rounds >= 1);
	assert_int_equal(iommu_pri_get_stats(f.mmu, 1, &ist), 0);
	assert_true(ist.requests >= STORM_PAGES);
	assert_true(ist.outstanding_max >= 1);
	assert_true(ist.outstanding_max <= STORM_MAX);
	assert_int_equal(ist.timeouts, 0);
	assert_int_equal(ist.outstanding, 0);
	hmm_pri_get_stats(&f.pri[1], &st);
	assert_int_equal(st.invalid, 0);
	assert_int_equal(st.served, st.requests);
	assert_int_equal(t_faults(f.mmu, 1, NULL), 0);
	assert_int_equal(t_faults(f.mmu, 2, NULL), 0);
	for (int i = 0; i < STORM_CHANS; i++) {
		assert_int_equal(tchan_err(&s.c[i]), 0);
		assert_int_equal(hmm_region_remove(f.mm, s.buf[i]), 0);
		munmap(s.buf[i], STORM_PAGES * PG);
	}
	munmap(obuf, OTHER_ITEMS * 64);
	cfix_down(&f);
	assert_int_equal(hmm_devmem_destroy(s.dm), 0);
}

int main(void)
{
	struct CMUnitTest tests[8];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest){ "channel: never-touched, paged-out and file pages",
					  test_not_present, NULL, NULL, NULL };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(backends); i++)
		tests[n++] = (struct CMUnitTest){ backends[i].name, test_managed, NULL, NULL,
						  (void *)&backends[i] };
	tests[n++] = (struct CMUnitTest){ "channel: invalid requests end in the channel error",
					  test_invalid, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "channel: a bound process gone ends in the channel error",
					  test_process_gone, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "channel: a request storm keeps to its limit, others finish",
					  test_storm, NULL, NULL, NULL };
	return _cmocka_run_group_tests("hmm_pri_chan", tests, n, NULL, NULL);
}
