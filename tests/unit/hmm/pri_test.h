/* SPDX-License-Identifier: MIT */
/* What the page-request suites (test_hmm_pri, test_hmm_pri_chan) share: a file mapping
 * whose pages left memory, managed pages resident on a device, the CPU-fault backends the
 * managed cases run on, and iommu_test.h's reader of a function's IOMMU fault log
 * (t_faults). */
#ifndef VGPU_TESTS_HMM_PRI_TEST_H
#define VGPU_TESTS_HMM_PRI_TEST_H

#include "tests/unit/iommu_model/iommu_test.h"
#include "tdev.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT	21
#endif

/* An unlinked file of @pages pages of @byte mapped shared at *@map, written back and
 * dropped from the page cache (advice: the kernel may keep some); its descriptor. */
static inline int tpri_cold_file(size_t pages, int byte, uint8_t **map)
{
	char path[] = "/tmp/hmm-pri-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(ftruncate(fd, pages * PG), 0);
	*map = mmap(NULL, pages * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(*map != MAP_FAILED);
	memset(*map, byte, pages * PG);
	assert_int_equal(msync(*map, pages * PG, MS_SYNC), 0);
	madvise(*map, pages * PG, MADV_PAGEOUT);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return fd;
}

/* The first @pages pages of a fresh 2 MiB buffer, a managed region of @mm holding
 * fill_ints(@bias), migrated to a new 2 MiB pool of @owner (*@dm): each of them is in
 * device memory. The caller removes the region, unmaps M2 and destroys the pool. */
static inline uint8_t *tpri_managed(struct hmm_mm *mm, const void *owner, size_t pages,
				    int bias, struct hmm_devmem **dm)
{
	struct hmm_migrate_result res;
	uint8_t *buf;

	*dm = tpool_new(owner, M2);
	buf = tbuf_new(M2, false);
	assert_int_equal(hmm_region_add(mm, buf, pages * PG), 0);
	fill_ints(buf, pages * PG, bias);
	assert_int_equal(hmm_migrate_to_device(mm, *dm, buf, pages * PG, &res), 0);
	for (size_t i = 0; i < pages; i++)
		assert_int_equal(hmm_mm_page_where(mm, buf + i * PG, NULL, NULL),
				 HMM_PAGE_DEVICE);
	return buf;
}

/* A managed case on one CPU-fault backend. */
struct backend_case {
	const char *name;
	enum hmm_backend backend;
};

/* The three backends, each case named @prefix and the backend's name. */
#define TPRI_BACKEND_CASES(prefix) { \
	{ prefix "uffd thread backend", HMM_BACKEND_UFFD_THREAD }, \
	{ prefix "SIGBUS backend", HMM_BACKEND_UFFD_SIGBUS }, \
	{ prefix "mprotect backend", HMM_BACKEND_MPROTECT }, \
}

#endif
