// SPDX-License-Identifier: MIT
/* Page requests served through hmm (hmm_pri_*): a device reading and writing this
 * process's memory through an SVA PASID of the IOMMU model gets pages that were never
 * touched, paged out, dropped from the page cache, or kept in device memory by a managed
 * region, on every CPU-fault backend; addresses with no VMA or without the permission
 * asked for still end in the IOMMU fault they give without PRI. */
#include <sys/stat.h>

#include "pri_test.h"

#define RID	7
#define PASID	3

struct pri_fix {
	struct iommu *mmu;
	struct iommu_domain *d0, *sva;
	struct hmm_mm *mm;
	struct hmm_pri pri;
};

/* An IOMMU with this process bound at (RID, PASID), and @mm (NULL: tmm_any()) serving
 * its page requests when @serve. */
static void fix_up(struct pri_fix *f, struct hmm_mm *mm, bool serve)
{
	struct iommu_domain_opts po = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_domain_opts so = { .type = IOMMU_DOMAIN_SVA };

	memset(f, 0, sizeof(*f));
	f->mm = mm ? mm : tmm_any();
	assert_int_equal(iommu_create(NULL, &f->mmu), 0);
	assert_int_equal(iommu_domain_alloc(f->mmu, &po, &f->d0), 0);
	assert_int_equal(iommu_domain_alloc(f->mmu, &so, &f->sva), 0);
	assert_int_equal(iommu_attach(f->mmu, RID, f->d0), 0);
	assert_int_equal(iommu_pasid_attach(f->mmu, RID, PASID, f->sva), 0);
	if (serve)
		assert_int_equal(hmm_pri_attach(&f->pri, f->mm, f->mmu, RID, PASID, 16), 0);
}

static void fix_down(struct pri_fix *f)
{
	hmm_pri_detach(&f->pri);
	iommu_destroy(f->mmu);
	hmm_mm_destroy(f->mm);
}

static int dev_read(struct pri_fix *f, const void *addr, void *buf, size_t len)
{
	return iommu_dma_read_pasid(f->mmu, RID, PASID, (uintptr_t)addr, buf, len);
}

static int dev_write(struct pri_fix *f, void *addr, const void *buf, size_t len)
{
	return iommu_dma_write_pasid(f->mmu, RID, PASID, (uintptr_t)addr, buf, len);
}

/* Fault records of RID since the last call (the log drained); the last reason. */
static size_t faults(struct pri_fix *f, unsigned int *reason)
{
	return t_faults(f->mmu, RID, reason);
}

/* Pages never touched read as zeros and take writes; so do pages paged out (anonymous,
 * swapped when there is swap) and pages of a file mapping dropped from the page cache. */
static void test_not_present(void **state)
{
	static uint8_t in[PG], out[PG];
	struct pri_fix f;
	uint8_t *anon, *file;
	int fd;

	(void)state;
	fix_up(&f, NULL, true);
	anon = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(anon != MAP_FAILED);
	memset(in, 0x3c, PG);
	/* never touched */
	memset(out, 0xff, PG);
	assert_int_equal(dev_read(&f, anon, out, PG), 0);
	for (size_t i = 0; i < PG; i++)
		assert_int_equal(out[i], 0);
	assert_int_equal(dev_write(&f, anon + PG, in, PG), 0);
	assert_memory_equal(anon + PG, in, PG);
	/* paged out */
	memset(anon + 4 * PG, 0x42, 2 * PG);
	madvise(anon + 4 * PG, 2 * PG, MADV_PAGEOUT);	/* advice: may be refused */
	assert_int_equal(dev_read(&f, anon + 4 * PG, out, PG), 0);
	for (size_t i = 0; i < PG; i++)
		assert_int_equal(out[i], 0x42);
	assert_int_equal(dev_write(&f, anon + 5 * PG, in, PG), 0);
	assert_memory_equal(anon + 5 * PG, in, PG);
	/* a file mapping whose pages were written back and dropped */
	fd = tpri_cold_file(4, 0x77, &file);
	assert_int_equal(dev_read(&f, file + PG, out, PG), 0);
	for (size_t i = 0; i < PG; i++)
		assert_int_equal(out[i], 0x77);
	assert_int_equal(dev_write(&f, file + 2 * PG, in, PG), 0);
	assert_int_equal(msync(file, 4 * PG, MS_SYNC), 0);
	assert_int_equal(pread(fd, out, PG, 2 * PG), PG);
	assert_memory_equal(out, in, PG);
	assert_int_equal(faults(&f, NULL), 0);
	munmap(file, 4 * PG);
	close(fd);
	munmap(anon, 8 * PG);
	fix_down(&f);
}

static const struct backend_case backends[] =
	TPRI_BACKEND_CASES("PRI: device-resident managed pages, ");

/* Managed pages migrated to device memory: the device's read and write through the PASID
 * bring them back to system memory (a page request where the backend makes the copy
 * fault: SIGBUS and mprotect), with the data, and no fault. */
static void test_managed(void **state)
{
	const struct backend_case *c = *state;
	static int owner;
	struct hmm_devmem *dm;
	struct hmm_pri_stats st;
	struct pri_fix f;
	uint8_t in[PG], out[PG];
	uint8_t *buf;

	fix_up(&f, tmm_new(c->backend, 0), true);
	buf = tpri_managed(f.mm, &owner, 4, 11, &dm);
	assert_int_equal(dev_read(&f, buf, out, PG), 0);
	check_ints(out, PG, 11);
	memset(in, 0x6b, PG);
	assert_int_equal(dev_write(&f, buf + 2 * PG, in, PG), 0);
	assert_int_equal(hmm_mm_page_where(f.mm, buf, NULL, NULL), HMM_PAGE_SYSTEM);
	assert_int_equal(hmm_mm_page_where(f.mm, buf + 2 * PG, NULL, NULL), HMM_PAGE_SYSTEM);
	assert_memory_equal(buf + 2 * PG, in, PG);
	check_ints(buf + PG, PG, 11 + (int)(PG / sizeof(int)));
	assert_int_equal(faults(&f, NULL), 0);
	hmm_pri_get_stats(&f.pri, &st);
	assert_int_equal(st.invalid, 0);
	assert_int_equal(st.served, st.requests);
	if (c->backend != HMM_BACKEND_UFFD_THREAD)
		assert_true(st.served >= 2);	/* the copy faulted: PRI brought each page */
	hmm_pri_detach(&f.pri);
	assert_int_equal(hmm_region_remove(f.mm, buf), 0);
	munmap(buf, M2);
	fix_down(&f);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
}

/* Without a PRI handler the device-resident page of the mprotect backend (the backend of
 * a kernel without UFFDIO_MOVE for shared memory) is an unmapped fault: what PRI fixes. */
static void test_managed_without_pri(void **state)
{
	static int owner;
	struct hmm_devmem *dm;
	struct hmm_migrate_result res;
	struct pri_fix f;
	unsigned int reason = 0;
	uint8_t out[PG];
	uint8_t *buf;

	(void)state;
	fix_up(&f, tmm_new(HMM_BACKEND_MPROTECT, 0), false);
	dm = tpool_new(&owner, M2);
	buf = tbuf_new(M2, false);
	assert_int_equal(hmm_region_add(f.mm, buf, PG), 0);
	memset(buf, 1, PG);
	assert_int_equal(hmm_migrate_to_device(f.mm, dm, buf, PG, &res), 0);
	assert_int_equal(dev_read(&f, buf, out, PG), -EFAULT);
	assert_int_equal(faults(&f, &reason), 1);
	assert_int_equal(reason, IOMMU_FAULT_UNMAPPED);
	assert_int_equal(hmm_region_remove(f.mm, buf), 0);
	munmap(buf, M2);
	fix_down(&f);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
}

/* No VMA, a write to a read-only mapping, a PROT_NONE mapping hmm does not manage: the
 * request is answered Invalid and the access ends in the PRI-invalid fault. */
static void test_invalid(void **state)
{
	uint8_t in[64] = { 1 }, out[64];
	struct hmm_pri_stats st;
	struct pri_fix f;
	unsigned int reason = 0;
	uint8_t *p;

	(void)state;
	fix_up(&f, NULL, true);
	p = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(munmap(p + 2 * PG, PG), 0);
	assert_int_equal(mprotect(p, PG, PROT_READ), 0);
	assert_int_equal(mprotect(p + PG, PG, PROT_NONE), 0);
	assert_int_equal(dev_read(&f, p + 2 * PG, out, sizeof(out)), -EFAULT);
	assert_int_equal(dev_write(&f, p, in, sizeof(in)), -EFAULT);
	assert_int_equal(dev_read(&f, p + PG, out, sizeof(out)), -EFAULT);
	assert_int_equal(faults(&f, &reason), 3);
	assert_int_equal(reason, IOMMU_FAULT_PRI_INVALID);
	hmm_pri_get_stats(&f.pri, &st);
	assert_int_equal(st.requests, 3);
	assert_int_equal(st.invalid, 3);
	assert_int_equal(st.served, 0);
	/* the read-only page still reads */
	assert_int_equal(dev_read(&f, p, out, sizeof(out)), 0);
	munmap(p, 2 * PG);
	fix_down(&f);
}

/* Bad arguments change nothing: PRI stays off for the function. */
static void test_bad_args(void **state)
{
	struct pri_fix f;
	struct hmm_pri p;

	(void)state;
	fix_up(&f, NULL, false);
	assert_int_equal(hmm_pri_attach(NULL, f.mm, f.mmu, RID, PASID, 4), -EINVAL);
	assert_int_equal(hmm_pri_attach(&p, NULL, f.mmu, RID, PASID, 4), -EINVAL);
	assert_int_equal(hmm_pri_attach(&p, f.mm, NULL, RID, PASID, 4), -EINVAL);
	assert_int_equal(hmm_pri_attach(&p, f.mm, f.mmu, IOMMU_MAX_FUNCS, PASID, 4), -EINVAL);
	assert_int_equal(hmm_pri_attach(&p, f.mm, f.mmu, RID, IOMMU_PASID_MAX + 1, 4), -EINVAL);
	assert_int_equal(hmm_pri_attach(&p, f.mm, f.mmu, RID, PASID, 0), -EINVAL);
	assert_int_equal(iommu_page_request(f.mmu, RID, PASID, 0x1000, IOMMU_READ,
					    &(uint16_t){ 0 }), -ENODEV);
	fix_down(&f);
}

int main(void)
{
	struct CMUnitTest tests[8];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest){ "PRI: never-touched, paged-out and file pages",
					  test_not_present, NULL, NULL, NULL };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(backends); i++)
		tests[n++] = (struct CMUnitTest){ backends[i].name, test_managed, NULL, NULL,
						  (void *)&backends[i] };
	tests[n++] = (struct CMUnitTest){ "PRI: without a handler a device-resident page faults",
					  test_managed_without_pri, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "PRI: invalid requests end in the fault",
					  test_invalid, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "PRI: bad arguments", test_bad_args, NULL, NULL, NULL };
	return _cmocka_run_group_tests("hmm_pri", tests, n, NULL, NULL);
}
