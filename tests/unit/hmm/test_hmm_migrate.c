// SPDX-License-Identifier: MIT
/* Migration scenarios (doc/scenarios.md HMM-11..17, 23, 27, 29..36, 38, 39): managed regions
 * migrated to a test device's pool and back, by explicit calls, by CPU faults (every
 * backend and fault granule) and by eviction. Each case checks data, per-page placement,
 * counters, and that no device page leaks. The kernel refusing a step (a protection
 * change, a copy into place) is made certain with a test hook (hmm_fail_hook). */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

#include "scenario_test.h"
#include "hmm/hmm_internal.h"	/* hmm_fail_hook, HMM_MAX_REGIONS */

#define SZ	(NPAGES * PG)

struct fx {
	struct hmm_mm *mm;
	struct tdev *d;
	char *buf;
	size_t len;
};

/* A mm with the case's backend, a device with @vram, a managed buffer of @len with data i. */
static void fx_init(struct fx *f, const struct mcase *c, uint64_t vram, size_t len)
{
	f->mm = tmm_new(c->backend, c->granule);
	f->d = tdev_new(f->mm, vram, NULL);
	f->len = len;
	f->buf = tbuf_new(len, c->thp);
	fill_ints(f->buf, len, 0);
	assert_int_equal(hmm_region_add(f->mm, f->buf, len), 0);
}

static void fx_fini(struct fx *f)
{
	assert_int_equal(hmm_region_remove(f->mm, f->buf), 0);
	munmap(f->buf, f->len);
	tdev_free(f->d);
	hmm_mm_destroy(f->mm);
}

static size_t count_where(struct hmm_mm *mm, char *p, size_t npages, enum hmm_page_where w)
{
	size_t n = 0;

	for (size_t i = 0; i < npages; i++)
		n += hmm_mm_page_where(mm, p + i * PG, NULL, NULL) == w;
	return n;
}

/* The first 4 pages of @p written to @pfd and read back, as a system call sees them: the
 * ints from 0 that fx_init() wrote. */
static void check_through_pipe(const int pfd[2], const char *p)
{
	int back[4 * PG / sizeof(int)];

	assert_int_equal(write(pfd[1], p, sizeof(back)), (ssize_t)sizeof(back));
	assert_int_equal(read(pfd[0], back, sizeof(back)), (ssize_t)sizeof(back));
	check_ints(back, sizeof(back), 0);
}

/* Every int of the 2 MiB at @p outside the hole [@off, @off + @hole) still holds its
 * index. */
static void check_around_hole(const char *p, size_t off, size_t hole)
{
	for (size_t i = 0; i < M2 / sizeof(int); i++) {
		size_t b = i * sizeof(int);

		if (b >= off && b < off + hole)
			continue;
		if (((const int *)p)[i] != (int)i)
			fail_msg("int %zu: %d", i, ((const int *)p)[i]);
	}
}

static enum hmm_page_where where(struct hmm_mm *mm, const void *p)
{
	return hmm_mm_page_where(mm, p, NULL, NULL);
}

/* The kernel refusing calls of one kind on one page (hmm_fail_hook): the page, the call,
 * the refusals still to come (< 0: every one) and those made. A UFFDIO_COPY reaching the
 * page from below stops at it, as the kernel's copy stops at a page it cannot fill. */
static struct {
	_Atomic uintptr_t page;
	atomic_int call;
	atomic_int left;
	atomic_uint refused;
} refuse;

static long refuse_hook(enum hmm_fail_call call, uintptr_t addr, size_t len)
{
	uintptr_t pg = atomic_load(&refuse.page);
	int left;

	if ((int)call != atomic_load(&refuse.call) || pg < addr || pg >= addr + len)
		return 0;
	if (call == HMM_FAIL_UFFD_COPY && addr < pg)
		return (long)(pg - addr);
	do {
		left = atomic_load(&refuse.left);
		if (!left)
			return 0;
	} while (left > 0 && !atomic_compare_exchange_weak(&refuse.left, &left, left - 1));
	atomic_fetch_add(&refuse.refused, 1);
	return -ENOMEM;
}

static void refuse_set(const void *page, enum hmm_fail_call call, int times)
{
	atomic_store(&refuse.page, (uintptr_t)page);
	atomic_store(&refuse.call, (int)call);
	atomic_store(&refuse.left, times);
	atomic_store(&refuse.refused, 0);
	atomic_store(&hmm_fail_hook, refuse_hook);
}

static int refuse_off(void **state)
{
	(void)state;
	atomic_store(&hmm_fail_hook, NULL);
	return 0;
}

/* HMM-11 + CPU fault back at every granule: migrate, device sees i, CPU reads i back. */
static void test_migrate(void **state)
{
	const struct mcase *c = *state;
	struct fx f;
	struct hmm_migrate_result res;
	struct hmm_mm_stats st;
	int *mirror = malloc(SZ);

	fx_init(&f, c, 8 * M2, SZ);
	assert_int_equal(tdev_migrate(f.d, f.buf, NPAGES, mirror, &res), 0);
	assert_int_equal(res.cpages, NPAGES);
	assert_int_equal(res.migrated, NPAGES);
	assert_int_equal(res.chunks, 2);	/* whole aligned batches: chunks */
	check_ints(mirror, SZ, 0);
	assert_int_equal(count_where(f.mm, f.buf, NPAGES, HMM_PAGE_DEVICE), NPAGES);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), NPAGES);
	check_ints(f.buf, SZ, 0);		/* CPU faults bring every page back */
	hmm_mm_get_stats(f.mm, &st);
	assert_int_equal(st.cpu_fault_pages, NPAGES);
	assert_int_equal(st.cpu_faults, NPAGES / (c->granule ? c->granule / PG : 1));
	assert_int_equal(st.migrated_to_device, NPAGES);
	assert_int_equal(count_where(f.mm, f.buf, NPAGES, HMM_PAGE_SYSTEM), NPAGES);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	free(mirror);
	fx_fini(&f);
}

/* HMM-12: a private file mapping cannot be a managed region (userfaultfd registers
 * anonymous, shmem and hugetlbfs memory only), so its pages stay in system memory. */
static void test_migrate_file_private(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
	char *p;
	int *mirror = malloc(SZ);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, SZ), 0);
	p = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	assert_true(p != MAP_FAILED);
	fill_ints(p, SZ, 0);
	assert_int_equal(hmm_region_add(mm, p, SZ), -EINVAL);
	assert_int_equal(tdev_migrate(d, p, NPAGES, mirror, NULL), -ENOENT);
	check_ints(mirror, SZ, 0);
	free(mirror);
	munmap(p, SZ);
	close(fd);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-13: migrate, fault the first half back, migrate again: all of it moves. */
static void test_migrate_fault(void **state)
{
	struct fx f;
	struct hmm_migrate_result res;
	int *mirror = malloc(SZ);

	fx_init(&f, *state, 8 * M2, SZ);
	assert_int_equal(tdev_migrate(f.d, f.buf, NPAGES, mirror, &res), 0);
	assert_int_equal(res.cpages, NPAGES);
	check_ints(f.buf, SZ / 2, 0);
	assert_int_equal(count_where(f.mm, f.buf, NPAGES, HMM_PAGE_DEVICE), NPAGES / 2);
	assert_int_equal(tdev_migrate(f.d, f.buf, NPAGES, mirror, &res), 0);
	assert_int_equal(res.cpages, NPAGES / 2);	/* the rest were already there */
	assert_int_equal(count_where(f.mm, f.buf, NPAGES, HMM_PAGE_DEVICE), NPAGES);
	check_ints(mirror, SZ, 0);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), NPAGES);
	check_ints(f.buf, SZ, 0);
	free(mirror);
	fx_fini(&f);
}

/* HMM-14 and HMM-39: evict everything of the device (release, VF reset). */
static void test_migrate_release(void **state)
{
	struct fx f;
	struct hmm_migrate_result res;
	struct hmm_mm_stats st;

	fx_init(&f, *state, 8 * M2, SZ);
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, SZ, &res), 0);
	assert_int_equal(res.migrated, NPAGES);
	assert_int_equal(hmm_devmem_evict_all(f.mm, f.d->dm), NPAGES);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	assert_int_equal(count_where(f.mm, f.buf, NPAGES, HMM_PAGE_SYSTEM), NPAGES);
	check_ints(f.buf, SZ, 0);
	hmm_mm_get_stats(f.mm, &st);
	assert_int_equal(st.cpu_faults, 0);		/* no CPU fault was needed */
	assert_int_equal(st.migrated_to_system, NPAGES);
	fx_fini(&f);
}

/* HMM-15: shared anonymous memory is not migratable. */
static void test_migrate_shared(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	char *p = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct hmm_migrate_result res;

	assert_true(p != MAP_FAILED);
	assert_int_equal(hmm_region_add(mm, p, SZ), -EINVAL);
	assert_int_equal(tdev_migrate(d, p, NPAGES, NULL, &res), -ENOENT);
	assert_int_equal(res.cpages, 0);
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	munmap(p, SZ);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-16: PROT_NONE and holes are -EINVAL; zero/RO/RW pages migrate to device 1; a page
 * of device 1 cannot be taken by device 0. */
static void test_migrate_mixed(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d0 = tdev_new(mm, 2 * M2, NULL), *d1 = tdev_new(mm, 2 * M2, NULL);
	char *p = tbuf_new(6 * PG, false);
	struct hmm_migrate_result res;

	assert_int_equal(hmm_region_add(mm, p, 6 * PG), 0);
	assert_int_equal(mprotect(p, 6 * PG, PROT_NONE), 0);
	assert_int_equal(tdev_migrate(d1, p, 6, NULL, &res), -EINVAL);
	assert_int_equal(munmap(p + PG, PG), 0);
	assert_int_equal(tdev_migrate(d1, p + PG, 3, NULL, &res), -EINVAL);
	assert_int_equal(mprotect(p + 2 * PG, 4 * PG, PROT_READ), 0);
	assert_int_equal(((volatile char *)p)[2 * PG], 0);		/* the zero page */
	assert_int_equal(mprotect(p + 3 * PG, PG, PROT_READ | PROT_WRITE), 0);
	memset(p + 3 * PG, 3, PG);
	assert_int_equal(mprotect(p + 3 * PG, PG, PROT_READ), 0);	/* RO data */
	assert_int_equal(mprotect(p + 4 * PG, 2 * PG, PROT_READ | PROT_WRITE), 0);
	memset(p + 4 * PG, 4, 2 * PG);
	assert_int_equal(tdev_migrate(d1, p + 2 * PG, 4, NULL, &res), 0);
	assert_int_equal(res.cpages, 4);
	assert_int_equal(res.migrated, 4);
	assert_int_equal(tdev_migrate(d0, p + 5 * PG, 1, NULL, &res), -ENOENT);
	assert_int_equal(res.cpages, 0);
	for (size_t i = 0; i < PG; i++) {
		assert_int_equal(p[2 * PG + i], 0);
		assert_int_equal(p[3 * PG + i], 3);
		assert_int_equal(p[4 * PG + i] + p[5 * PG + i], 8);
	}
	assert_int_equal(hmm_devmem_used_pages(d1->dm), 0);
	tdev_free(d0);
	tdev_free(d1);
	munmap(p, 6 * PG);
	hmm_mm_destroy(mm);
}

/* HMM-17: ten rounds of fresh buffer, migrate, explicit migrate back, CPU read. */
static void test_migrate_multiple(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int *mirror = malloc(SZ);

	for (int round = 0; round < 10; round++) {
		char *p = tbuf_new(SZ, c->thp);
		struct hmm_migrate_result res;

		fill_ints(p, SZ, round);
		assert_int_equal(hmm_region_add(mm, p, SZ), 0);
		assert_int_equal(tdev_migrate(d, p, NPAGES, mirror, &res), 0);
		assert_int_equal(res.cpages, NPAGES);
		check_ints(mirror, SZ, round);
		assert_int_equal(hmm_migrate_to_system(mm, d->dm, p, SZ, &res), 0);
		assert_int_equal(res.migrated, NPAGES);
		assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
		check_ints(p, SZ, round);
		assert_int_equal(hmm_region_remove(mm, p), 0);
		munmap(p, SZ);
	}
	free(mirror);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-23: two devices read; migrate to device 1; device 0 reads again and pulls the
 * pages back in one fault round, data intact. */
static void test_double_map(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d0 = tdev_new(mm, 2 * M2, NULL), *d1 = tdev_new(mm, 2 * M2, NULL);
	char *p = tbuf_new(6 * PG, false);
	int *mirror = malloc(6 * PG);
	size_t cpages;

	fill_ints(p, 6 * PG, 0);
	assert_int_equal(hmm_region_add(mm, p, 6 * PG), 0);
	assert_int_equal(mprotect(p, 6 * PG, PROT_READ), 0);
	tdev_rw_all(d0, p, 6, mirror, false);
	assert_int_equal(tdev_read(d1, p, 6, mirror, &cpages), 0);
	assert_int_equal(d1->faults, 1);
	assert_int_equal(tdev_migrate(d1, p, 6, mirror, NULL), 0);
	check_ints(mirror, 6 * PG, 0);
	memset(mirror, 0, 6 * PG);
	d0->faults = 0;
	tdev_rw_all(d0, p, 6, mirror, false);
	check_ints(mirror, 6 * PG, 0);
	assert_int_equal(count_where(mm, p, 6, HMM_PAGE_SYSTEM), 6);
	assert_int_equal(hmm_devmem_used_pages(d1->dm), 0);
	check_ints(p, 6 * PG, 0);
	free(mirror);
	tdev_free(d0);
	tdev_free(d1);
	munmap(p, 6 * PG);
	hmm_mm_destroy(mm);
}

/* HMM-27: a long-term pin (hmm_mm_make_resident) brings device pages back first. */
static void test_pin_longterm(void **state)
{
	struct fx f;
	uint8_t codes[4];

	fx_init(&f, *state, 2 * M2, 4 * PG);
	assert_int_equal(tdev_migrate(f.d, f.buf, 4, NULL, NULL), 0);
	assert_int_equal(tdev_snapshot(f.d, f.buf, 4, codes), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(codes[i], PROT_DEV_PRIVATE_LOCAL | PROT_WRITE_);
	assert_int_equal(hmm_mm_make_resident(f.mm, f.buf, 4 * PG), 4);
	assert_int_equal(tdev_snapshot(f.d, f.buf, 4, codes), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(codes[i], PROT_WRITE_);
	/* a system call now sees the data, whatever the backend */
	int pfd[2];

	assert_int_equal(pipe(pfd), 0);
	check_through_pipe(pfd, f.buf);
	close(pfd[0]);
	close(pfd[1]);
	fx_fini(&f);
}

/* Kernel access to a device-resident page: the thread backend serves it like any fault. */
static void test_kernel_access(void **state)
{
	struct fx f;
	int pfd[2];

	fx_init(&f, *state, 2 * M2, 4 * PG);
	assert_int_equal(tdev_migrate(f.d, f.buf, 4, NULL, NULL), 0);
	assert_int_equal(pipe(pfd), 0);
	check_through_pipe(pfd, f.buf);
	assert_int_equal(count_where(f.mm, f.buf, 4, HMM_PAGE_SYSTEM), 4);
	close(pfd[0]);
	close(pfd[1]);
	fx_fini(&f);
}

/* HMM-28: fork with device-resident pages; the parent writes and owns private copies. The
 * child looks only after the parent's writes (told through a pipe): they must not show. */
static void test_cow_in_device(void **state)
{
	struct fx f;
	uint8_t codes[4];
	int go[2], status;
	pid_t pid;

	fx_init(&f, *state, 2 * M2, 4 * PG);
	assert_int_equal(tdev_migrate(f.d, f.buf, 4, NULL, NULL), 0);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		for (size_t i = 0; i < 4 * PG / sizeof(int); i++)
			if (((int *)f.buf)[i] != (int)i)
				_exit(1);
		_exit(0);
	}
	close(go[0]);
	for (size_t i = 0; i < 4 * PG / sizeof(int); i++)
		((int *)f.buf)[i] += 1;
	assert_int_equal(write(go[1], "x", 1), 1);
	close(go[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(tdev_snapshot(f.d, f.buf, 4, codes), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(codes[i], PROT_WRITE_);
	check_ints(f.buf, 4 * PG, 1);
	fx_fini(&f);
}

/* HMM-29/30: a never-touched (or huge-zero-page) read-only THP range migrates as one
 * zero-filled chunk and reads as zero. */
static void test_huge_empty(void **state)
{
	const struct mcase *c = *state;
	struct fx f;
	struct hmm_migrate_result res;
	int *mirror = malloc(M2);

	f.mm = tmm_new(c->backend, c->granule);
	f.d = tdev_new(f.mm, 4 * M2, NULL);
	f.len = M2;
	f.buf = tbuf_new(M2, true);
	assert_int_equal(hmm_region_add(f.mm, f.buf, M2), 0);
	assert_int_equal(mprotect(f.buf, M2, PROT_READ), 0);
	if (c->offset)		/* HMM-30: the CPU read it once */
		assert_int_equal(((volatile char *)f.buf)[0], 0);
	memset(mirror, 0xff, M2);
	assert_int_equal(tdev_migrate(f.d, f.buf, M2 / PG, mirror, &res), 0);
	assert_int_equal(res.cpages, M2 / PG);
	assert_int_equal(res.chunks, 1);
	for (size_t i = 0; i < M2 / sizeof(int); i++)
		assert_int_equal(mirror[i], 0);
	for (size_t i = 0; i < M2; i += 512)
		assert_int_equal(f.buf[i], 0);
	free(mirror);
	fx_fini(&f);
}

/* HMM-31: MADV_FREE of a device-resident THP range is accepted. */
static void test_huge_free(void **state)
{
	struct fx f;
	int *mirror = malloc(M2);

	fx_init(&f, *state, 4 * M2, M2);
	assert_int_equal(tdev_migrate(f.d, f.buf, M2 / PG, mirror, NULL), 0);
	check_ints(mirror, M2, 0);
	assert_int_equal(madvise(f.buf, M2, MADV_FREE), 0);
	free(mirror);
	fx_fini(&f);
}

/* HMM-32: a collapsed THP migrates as one chunk: the snapshot shows every page
 * DEV_PRIVATE_LOCAL|WRITE|PMD, pagemap shows nothing present, the CPU reads it back. */
static void test_huge_fault(void **state)
{
	struct fx f;
	uint8_t *codes = malloc(M2 / PG);
	uint64_t pm[M2 / PG];
	int fd = open("/proc/self/pagemap", O_RDONLY);

	fx_init(&f, *state, 4 * M2, M2);
	madvise(f.buf, M2, 25 /* MADV_COLLAPSE */);
	assert_int_equal(tdev_migrate(f.d, f.buf, M2 / PG, NULL, NULL), 0);
	assert_int_equal(tdev_snapshot(f.d, f.buf, M2 / PG, codes), 0);
	for (size_t i = 0; i < M2 / PG; i++)
		assert_int_equal(codes[i], PROT_DEV_PRIVATE_LOCAL | PROT_WRITE_ | PROT_PMD);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, pm, sizeof(pm), (off_t)((uintptr_t)f.buf / PG * 8)),
			 (ssize_t)sizeof(pm));
	for (size_t i = 0; i < M2 / PG; i++)
		assert_false(pm[i] >> 63);
	close(fd);
	check_ints(f.buf, M2, 0);
	free(codes);
	fx_fini(&f);
}

/* HMM-33: migrate 2 MiB, unmap a quarter-size hole at an offset, read the rest. */
static void test_partial_unmap(void **state)
{
	const struct mcase *c = *state;
	struct fx f;
	size_t off = c->offset * (M2 / 4), hole = M2 / 4;
	struct hmm_mm_stats st;

	fx_init(&f, c, 4 * M2, M2);
	assert_int_equal(tdev_migrate(f.d, f.buf, M2 / PG, NULL, NULL), 0);
	assert_int_equal(munmap(f.buf + off, hole), 0);
	hmm_mm_sync_events(f.mm);
	hmm_mm_get_stats(f.mm, &st);
	assert_int_equal(st.events_unmap, 1);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), (M2 - hole) / PG);
	check_around_hole(f.buf, off, hole);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	fx_fini(&f);
}

/* HMM-34: mremap half of a migrated (or to-be-migrated) region elsewhere; the data is
 * at the new address, nothing leaks. Rows: before x DONTUNMAP x THP x offset. */
static void test_remap(void **state)
{
	const struct mcase *c = *state;

	for (int before = 0; before < 2; before++) {
		for (int dontunmap = 0; dontunmap < 2; dontunmap++) {
			struct fx f;
			size_t off = c->offset * (M2 / 4), len = M2 / 2;
			char *dst = tbuf_new(M2, c->thp), *moved;

			fx_init(&f, c, 4 * M2, M2);
			if (!before)
				assert_int_equal(tdev_migrate(f.d, f.buf, M2 / PG, NULL, NULL), 0);
			moved = mremap(f.buf + off, len, len,
				       MREMAP_MAYMOVE | MREMAP_FIXED |
				       (dontunmap ? MREMAP_DONTUNMAP : 0), dst);
			assert_true(moved == dst);
			hmm_mm_sync_events(f.mm);
			/* an unmapped range leaves its region; MREMAP_DONTUNMAP keeps it mapped
			 * (and registered), empty */
			assert_int_equal(where(f.mm, f.buf + off),
					 dontunmap ? HMM_PAGE_SYSTEM : HMM_PAGE_NONE);
			if (before) {
				/* the moved VMA keeps its registration; manage it there */
				assert_int_equal(hmm_region_add(f.mm, dst, len), 0);
				assert_int_equal(tdev_migrate(f.d, dst, len / PG, NULL, NULL), 0);
			}
			for (size_t i = 0; i < len / sizeof(int); i++) {
				int want = (int)(off / sizeof(int) + i);

				if (((int *)dst)[i] != want)
					fail_msg("before %d dontunmap %d: int %zu = %d, want %d",
						 before, dontunmap, i, ((int *)dst)[i], want);
			}
			hmm_devmem_evict_all(f.mm, f.d->dm);
			assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
			hmm_region_remove(f.mm, dst);
			munmap(dst, M2);
			fx_fini(&f);
		}
	}
}

/* HMM-34, a buffer grown by mremap again and again (realloc of a large block), its pages
 * on the device each time, moving to where an earlier move left: the data follows every
 * move and the old range leaves the table, so no move runs into a stale region there, and
 * more moves than the table has slots leave it as it was. */
static void test_remap_grow(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	/* two places to move to in turns, kept free of other mappings */
	char *area = mmap(NULL, 2 * M2, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t len = 4 * PG, managed = 4;
	char *buf, *spare;
	struct hmm_migrate_result res;

	assert_true(area != MAP_FAILED);
	buf = mmap(area, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0);
	assert_true(buf == area);
	assert_int_equal(hmm_region_add(mm, buf, len), 0);
	for (int i = 0; i < HMM_MAX_REGIONS + 8; i++) {
		char *dst = area + (size_t)((i + 1) % 2) * M2;

		fill_ints(buf, len, i);
		assert_int_equal(hmm_migrate_to_device(mm, d->dm, buf, len, &res), 0);
		assert_int_equal(res.migrated, managed);
		assert_true(mremap(buf, len, len + PG, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == dst);
		hmm_mm_sync_events(mm);
		assert_int_equal(where(mm, buf), HMM_PAGE_NONE);
		assert_int_equal(count_where(mm, dst, managed, HMM_PAGE_DEVICE), managed);
		len += PG;
		check_ints(dst, len - PG, i);
		buf = dst;
	}
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	/* nothing of the moves stayed in the table */
	spare = tbuf_new(PG, false);
	assert_int_equal(hmm_region_add(mm, spare, PG), 0);
	assert_int_equal(hmm_region_remove(mm, spare), 0);
	assert_int_equal(hmm_region_remove(mm, buf), 0);
	assert_int_equal(hmm_region_remove(mm, buf), -ENOENT);
	munmap(spare, PG);
	munmap(area, 2 * M2);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-34 with the region table full: the part of a region an mremap moves gets no region
 * at its new address, so its device pages come back into place there, with their data, in
 * system memory and unmanaged; the rest of the region, moved whole, takes its slot along
 * and stays on the device. */
static void test_remap_full(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, 0);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	char *src = tbuf_new(M2, false), *dst1 = tbuf_new(M2, false), *dst2 = tbuf_new(M2, false);
	char *fill = tbuf_new(HMM_MAX_REGIONS * PG, false);
	struct hmm_migrate_result res;
	int nfill = 0, ret;

	fill_ints(src, 8 * PG, 3);
	assert_int_equal(hmm_region_add(mm, src, 8 * PG), 0);
	assert_int_equal(hmm_migrate_to_device(mm, d->dm, src, 8 * PG, &res), 0);
	assert_int_equal(res.migrated, 8);
	while (!(ret = hmm_region_add(mm, fill + (size_t)nfill * PG, PG)))
		nfill++;
	assert_int_equal(ret, -ENOSPC);
	assert_true(mremap(src, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, dst1) == dst1);
	hmm_mm_sync_events(mm);
	assert_int_equal(where(mm, src), HMM_PAGE_NONE);
	assert_int_equal(count_where(mm, dst1, 4, HMM_PAGE_NONE), 4);
	assert_int_equal(hmm_devmem_used_pages(d->dm), 4);
	check_ints(dst1, 4 * PG, 3);
	assert_true(mremap(src + 4 * PG, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, dst2) ==
		    dst2);
	hmm_mm_sync_events(mm);
	assert_int_equal(count_where(mm, dst2, 4, HMM_PAGE_DEVICE), 4);
	check_ints(dst2, 4 * PG, 3 + (int)(4 * PG / sizeof(int)));
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	/* the region added at @src has no piece left; the one at @dst2 is the mremap's */
	assert_int_equal(hmm_region_remove(mm, src), -ENOENT);
	assert_int_equal(hmm_region_remove(mm, dst2), 0);
	for (int i = 0; i < nfill; i++)
		assert_int_equal(hmm_region_remove(mm, fill + (size_t)i * PG), 0);
	munmap(fill, HMM_MAX_REGIONS * PG);
	munmap(src, M2);
	munmap(dst1, M2);
	munmap(dst2, M2);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* The kernel's copy into place stops partway (no memory): the pages before the stop come
 * back, the rest stay on the device with their data and come back at the next fault.
 * Without UFFDIO_MOVE a migration back copies into place too: it moves the same pages
 * and counts the rest as failed. */
static void test_copy_refused(void **state)
{
	const struct mcase *c = *state;
	struct hmm_uffd_caps caps;
	struct hmm_migrate_result res;
	struct fx f;
	char *t;

	hmm_uffd_probe(&caps);
	fx_init(&f, c, 2 * M2, 16 * PG);
	t = f.buf + 5 * PG;
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, 16 * PG, &res), 0);
	assert_int_equal(res.migrated, 16);
	refuse_set(t, HMM_FAIL_UFFD_COPY, 1);
	assert_int_equal(((volatile int *)f.buf)[0], 0);	/* its 64 KiB granule back */
	assert_int_equal(atomic_load(&refuse.refused), 1);
	assert_int_equal(count_where(f.mm, f.buf, 5, HMM_PAGE_SYSTEM), 5);
	assert_int_equal(count_where(f.mm, t, 11, HMM_PAGE_DEVICE), 11);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 11);
	check_ints(f.buf, 16 * PG, 0);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);

	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, 16 * PG, &res), 0);
	refuse_set(t, HMM_FAIL_UFFD_COPY, -1);
	assert_int_equal(hmm_migrate_to_system(f.mm, f.d->dm, f.buf, 16 * PG, &res), 0);
	refuse_off(NULL);
	assert_int_equal(res.cpages, 16);
	assert_int_equal(res.migrated, caps.move ? 16 : 5);
	assert_int_equal(res.failed, caps.move ? 0 : 11);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), caps.move ? 0 : 11);
	check_ints(f.buf, 16 * PG, 0);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	fx_fini(&f);
}

/* HMM-35/36: the pool cannot give a 2 MiB chunk: 4 KiB pages, data intact both ways. */
static void test_alloc_fallback(void **state)
{
	const struct mcase *c = *state;
	struct fx f;
	struct hmm_migrate_result res;

	fx_init(&f, c, 4 * M2, M2);
	if (c->offset)		/* HMM-36: zero pages */
		memset(f.buf, 0, M2);
	hmm_devmem_fail_next_allocs(f.d->dm, 1);
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, M2, &res), 0);
	assert_int_equal(res.migrated, M2 / PG);
	assert_int_equal(res.chunks, 0);
	assert_int_equal(((int *)f.buf)[2048], c->offset ? 0 : 2048);
	/* the page the CPU read came back; it alone migrates again, then all return */
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, M2, &res), 0);
	assert_int_equal(res.migrated, 1);
	assert_int_equal(hmm_migrate_to_system(f.mm, f.d->dm, f.buf, M2, &res), 0);
	assert_int_equal(res.migrated, M2 / PG);
	if (c->offset) {
		for (size_t i = 0; i < M2; i += 256)
			assert_int_equal(f.buf[i], 0);
	} else {
		check_ints(f.buf, M2, 0);
	}
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	fx_fini(&f);
}

/* HMM-38: a 2 MiB quota: half of 4 MiB migrates, the rest stays, the other pool is
 * never touched. */
static void test_quota(void **state)
{
	struct fx f;
	struct tdev *other;
	struct hmm_migrate_result res;

	fx_init(&f, *state, M2, SZ);
	other = tdev_new(f.mm, M2, NULL);
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, SZ, &res), 0);
	assert_int_equal(res.cpages, NPAGES);
	assert_int_equal(res.migrated, M2 / PG);
	assert_int_equal(res.alloc_failed, NPAGES - M2 / PG);
	assert_int_equal(count_where(f.mm, f.buf, NPAGES, HMM_PAGE_DEVICE), M2 / PG);
	assert_int_equal(hmm_devmem_used_pages(other->dm), 0);
	check_ints(f.buf, SZ, 0);
	tdev_free(other);
	fx_fini(&f);
}

/* ---- mprotect backend only ----------------------------------------------------------- */

/* A MAP_SHARED memfd region with a second view (the in-VM layout: DMA memory is a shared
 * mapping of BAR2): migrate, the device sees the data, CPU faults bring it back through
 * the alias at the case's granule, both views agree, nothing leaks. */
static void test_prot_shared(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = tmm_new(c->backend, c->granule);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int fd = memfd_create("hmm-prot", MFD_CLOEXEC);
	char *p, *alias;
	int *mirror = malloc(SZ);
	struct hmm_migrate_result res;
	struct hmm_mm_stats st;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, SZ), 0);
	/* 2 MiB aligned, so that the fault granules do not straddle the region's start */
	p = mmap(tbuf_new(SZ, false), SZ, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	alias = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED && alias != MAP_FAILED);
	fill_ints(p, SZ, 5);
	/* a shared region needs its alias, and the alias must be shared too */
	assert_int_equal(hmm_region_add(mm, p, SZ), -EINVAL);
	assert_int_equal(hmm_region_add_alias(mm, p, SZ, mirror), -EINVAL);
	assert_int_equal(hmm_region_add_alias(mm, p, SZ, alias), 0);
	assert_int_equal(tdev_migrate(d, p, NPAGES, mirror, &res), 0);
	assert_int_equal(res.migrated, NPAGES);
	check_ints(mirror, SZ, 5);
	assert_int_equal(count_where(mm, p, NPAGES, HMM_PAGE_DEVICE), NPAGES);
	/* the device owns the data now: a write through the alias is lost when the page
	 * comes back, which is what the alias is for (the library's write view) */
	check_ints(p, SZ, 5);
	hmm_mm_get_stats(mm, &st);
	assert_int_equal(st.cpu_fault_pages, NPAGES);
	assert_int_equal(st.cpu_faults, NPAGES / (c->granule ? c->granule / PG : 1));
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	((int *)p)[7] = -7;			/* both views are one memory again */
	assert_int_equal(((int *)alias)[7], -7);
	assert_int_equal(hmm_region_remove(mm, p), 0);
	munmap(p, SZ);
	munmap(alias, SZ);
	close(fd);
	free(mirror);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* A system call on a device-resident page of the in-thread backends fails with EFAULT
 * (the kernel's access does not raise a signal); after hmm_mm_make_resident it works. */
static void test_prot_kernel_access(void **state)
{
	struct fx f;
	int pfd[2];

	fx_init(&f, *state, 2 * M2, 4 * PG);
	assert_int_equal(tdev_migrate(f.d, f.buf, 4, NULL, NULL), 0);
	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(write(pfd[1], f.buf, 4 * PG), -1);
	assert_int_equal(errno, EFAULT);
	assert_int_equal(count_where(f.mm, f.buf, 4, HMM_PAGE_DEVICE), 4);
	assert_int_equal(hmm_mm_make_resident(f.mm, f.buf, 4 * PG), 4);
	check_through_pipe(pfd, f.buf);
	close(pfd[0]);
	close(pfd[1]);
	fx_fini(&f);
}

/* HMM-33 for the mprotect backend: the application reports the unmap first (no
 * userfaultfd event exists here); the hole's device pages are freed, the rest reads. */
static void test_prot_unmap_reported(void **state)
{
	const struct mcase *c = *state;
	struct fx f;
	size_t off = c->offset * (M2 / 4), hole = M2 / 4;

	fx_init(&f, c, 4 * M2, M2);
	assert_int_equal(tdev_migrate(f.d, f.buf, M2 / PG, NULL, NULL), 0);
	assert_int_equal(hmm_mm_notify(f.mm, HMM_EVENT_UNMAP, (uintptr_t)f.buf + off,
				       (uintptr_t)f.buf + off + hole), 0);
	assert_int_equal(munmap(f.buf + off, hole), 0);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), (M2 - hole) / PG);
	check_around_hole(f.buf, off, hole);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	fx_fini(&f);
}

/* The kernel refuses a protection change of one page (at vm.max_map_count, where the
 * change splits a VMA; made certain by hmm_fail_hook). The page stays where it was, with
 * the protection its state says (a writable "device" page would take CPU writes that the
 * way back then overwrites), and is counted; the other pages of the batch move. */
static void test_prot_refused(void **state)
{
	struct hmm_migrate_result res;
	struct hmm_mm_stats st0, st1;
	struct fx f;
	int *t;

	fx_init(&f, *state, 2 * M2, 8 * PG);
	t = (int *)(f.buf + 2 * PG);

	/* read-only at setup: the page is not collected */
	refuse_set(t, HMM_FAIL_PROT_READ, -1);
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, 8 * PG, &res), 0);
	refuse_off(NULL);
	assert_int_equal(res.cpages, 8);
	assert_int_equal(res.migrated, 7);
	assert_int_equal(res.failed, 1);
	assert_int_equal(where(f.mm, t), HMM_PAGE_SYSTEM);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 7);
	check_ints(f.buf, 8 * PG, 0);

	/* PROT_NONE at commit: not migrated, its device page freed, writable */
	refuse_set(t, HMM_FAIL_PROT_NONE, -1);
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, 8 * PG, &res), 0);
	refuse_off(NULL);
	assert_int_equal(res.migrated, 7);
	assert_int_equal(res.failed, 1);
	assert_int_equal(res.cpu_won, 0);
	assert_int_equal(where(f.mm, t), HMM_PAGE_SYSTEM);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 7);
	hmm_mm_get_stats(f.mm, &st0);
	t[0] = -1;				/* no fault, and not lost */
	hmm_mm_get_stats(f.mm, &st1);
	assert_int_equal(st1.cpu_faults, st0.cpu_faults);
	assert_int_equal(hmm_mm_make_resident(f.mm, f.buf, 8 * PG), 7);
	assert_int_equal(t[0], -1);
	t[0] = (int)(2 * PG / sizeof(int));
	check_ints(f.buf, 8 * PG, 0);

	/* read-write on the way back: the page stays on the device, with its data */
	assert_int_equal(hmm_migrate_to_device(f.mm, f.d->dm, f.buf, 8 * PG, &res), 0);
	assert_int_equal(res.migrated, 8);
	refuse_set(t, HMM_FAIL_PROT_RW, -1);
	assert_int_equal(hmm_mm_make_resident(f.mm, f.buf, 8 * PG), 7);
	assert_int_equal(where(f.mm, t), HMM_PAGE_DEVICE);
	assert_int_equal(hmm_migrate_to_system(f.mm, f.d->dm, f.buf, 8 * PG, &res), 0);
	assert_int_equal(res.cpages, 1);
	assert_int_equal(res.migrated, 0);
	assert_int_equal(res.failed, 1);
	assert_int_equal(where(f.mm, t), HMM_PAGE_DEVICE);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 1);
	/* a CPU access faults again until the kernel gives in: two faults here (each tries
	 * the run, then the page) */
	refuse_set(t, HMM_FAIL_PROT_RW, 3);
	hmm_mm_get_stats(f.mm, &st0);
	assert_int_equal(t[0], (int)(2 * PG / sizeof(int)));
	hmm_mm_get_stats(f.mm, &st1);
	refuse_off(NULL);
	assert_int_equal(atomic_load(&refuse.refused), 3);
	assert_int_equal(st1.cpu_faults - st0.cpu_faults, 2);
	assert_int_equal(where(f.mm, t), HMM_PAGE_SYSTEM);
	assert_int_equal(hmm_devmem_used_pages(f.d->dm), 0);
	check_ints(f.buf, 8 * PG, 0);

	/* a device-exclusive page the kernel keeps PROT_NONE stays exclusive */
	assert_int_equal(tdev_exclusive(f.d, t, 1, NULL), 0);
	refuse_set(t, HMM_FAIL_PROT_RW, -1);
	assert_int_equal(hmm_mm_make_resident(f.mm, t, PG), 0);
	assert_int_equal(where(f.mm, t), HMM_PAGE_EXCLUSIVE);
	refuse_off(NULL);
	assert_int_equal(hmm_mm_make_resident(f.mm, t, PG), 1);
	assert_int_equal(where(f.mm, t), HMM_PAGE_SYSTEM);
	check_ints(f.buf, 8 * PG, 0);
	fx_fini(&f);
}

static sigjmp_buf chain_jmp;
static volatile sig_atomic_t chain_hits;

static void chain_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	chain_hits++;
	siglongjmp(chain_jmp, 1);
}

/* A SIGSEGV that is not a device page goes to whoever had SIGSEGV before: outside any
 * region at once, and inside a region whose page the application protected itself
 * after the handler sees it keep faulting on a system page. */
static void test_prot_chain(void **state)
{
	const struct mcase *c = *state;
	struct sigaction sa = { .sa_sigaction = chain_handler, .sa_flags = SA_SIGINFO }, old;
	struct hmm_mm *mm;
	char *plain = mmap(NULL, PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p = tbuf_new(4 * PG, false);

	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
	mm = tmm_new(c->backend, 0);
	chain_hits = 0;
	if (!sigsetjmp(chain_jmp, 1))
		(void)((volatile char *)plain)[0];
	assert_int_equal(chain_hits, 1);
	assert_int_equal(hmm_region_add(mm, p, 4 * PG), 0);
	assert_int_equal(mprotect(p + PG, PG, PROT_NONE), 0);
	if (!sigsetjmp(chain_jmp, 1))
		((volatile char *)p)[PG] = 1;
	assert_int_equal(chain_hits, 2);
	assert_int_equal(mprotect(p + PG, PG, PROT_READ | PROT_WRITE), 0);
	assert_int_equal(hmm_region_remove(mm, p), 0);
	hmm_mm_destroy(mm);
	sigaction(SIGSEGV, &old, NULL);
	munmap(plain, PG);
	munmap(p, 4 * PG);
}

/* The way back refused for good: a CPU access does not fault forever, it goes to the
 * previous SIGSEGV handler after a bounded number of tries (as the kernel's fault ends in
 * a signal when it cannot get the page), with the page still on the device. */
static void test_prot_refused_chain(void **state)
{
	const struct mcase *c = *state;
	struct sigaction sa = { .sa_sigaction = chain_handler, .sa_flags = SA_SIGINFO }, old;
	struct fx f;

	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
	fx_init(&f, c, 2 * M2, 4 * PG);
	assert_int_equal(tdev_migrate(f.d, f.buf, 4, NULL, NULL), 0);
	refuse_set(f.buf, HMM_FAIL_PROT_RW, -1);
	chain_hits = 0;
	if (!sigsetjmp(chain_jmp, 1))
		(void)((volatile char *)f.buf)[0];
	refuse_off(NULL);
	assert_int_equal(chain_hits, 1);
	assert_true(atomic_load(&refuse.refused) > 1);
	assert_int_equal(where(f.mm, f.buf), HMM_PAGE_DEVICE);
	check_ints(f.buf, 4 * PG, 0);
	fx_fini(&f);
	sigaction(SIGSEGV, &old, NULL);
}

/* A case that sets hmm_fail_hook: taken away again whatever the case's end. */
#define REFUSE(fn, nm, be, ...) \
	{ "HMM-" nm " " #fn " [" #be "]", fn, NULL, refuse_off, \
	  &(struct mcase){ .name = nm, .backend = be, __VA_ARGS__ } }

int main(void)
{
	const struct CMUnitTest tests[] = {
		CASE(test_migrate, "11", T),
		CASE(test_migrate, "11 64K", T, .granule = 64 * 1024),
		CASE(test_migrate, "11 2M", T, .granule = M2),
		CASE(test_migrate, "11", S),
		CASE(test_migrate, "11 64K", S, .granule = 64 * 1024),
		CASE(test_migrate, "11 2M thp", S, .granule = M2, .thp = true),
		CASE(test_migrate_file_private, "12", T),
		CASE_TS(test_migrate_fault, "13"),
		CASE_TS(test_migrate_release, "14/39"),
		CASE(test_migrate_shared, "15", T),
		CASE_TS(test_migrate_mixed, "16"),
		CASE(test_migrate_multiple, "17", T),
		CASE(test_migrate_multiple, "17 thp", S, .thp = true),
		CASE_TS(test_double_map, "23"),
		CASE_TS(test_pin_longterm, "27"),
		CASE(test_kernel_access, "27 kernel access", T),
		CASE_TS(test_cow_in_device, "28"),
		CASE(test_huge_empty, "29", T),
		CASE(test_huge_empty, "30", S, .offset = 1),
		CASE(test_huge_free, "31", T, .thp = true),
		CASE(test_huge_fault, "32", T, .thp = true),
		CASE(test_huge_fault, "32 2M", S, .thp = true, .granule = M2),
		CASE(test_partial_unmap, "33 off 0", T, .offset = 0),
		CASE(test_partial_unmap, "33 off 1/4 thp", T, .offset = 1, .thp = true),
		CASE(test_partial_unmap, "33 off 1/2", S, .offset = 2),
		CASE(test_partial_unmap, "33 off 1/2 thp", S, .offset = 2, .thp = true),
		CASE(test_remap, "34 off 0", T, .offset = 0),
		CASE(test_remap, "34 off 1/4 thp", T, .offset = 1, .thp = true),
		CASE(test_remap, "34 off 1/2", T, .offset = 2),
		CASE(test_remap, "34 off 0 thp", S, .offset = 0, .thp = true),
		CASE(test_remap, "34 off 1/4", S, .offset = 1),
		CASE(test_remap, "34 off 1/2 thp", S, .offset = 2, .thp = true),
		CASE_TS(test_remap_grow, "34 grown again and again"),
		CASE_TS(test_remap_full, "34 region table full"),
		CASE(test_alloc_fallback, "35", T, .thp = true),
		CASE(test_alloc_fallback, "36 zero", S, .thp = true, .offset = 1),
		CASE(test_quota, "38", T),
		REFUSE(test_copy_refused, "copy into place refused", T, .granule = 64 * 1024),
		REFUSE(test_copy_refused, "copy into place refused", S, .granule = 64 * 1024),
		/* the mprotect+SIGSEGV backend */
		CASE(test_migrate, "11", P),
		CASE(test_migrate, "11 64K", P, .granule = 64 * 1024),
		CASE(test_migrate, "11 2M thp", P, .granule = M2, .thp = true),
		CASE(test_migrate_fault, "13", P),
		CASE(test_migrate_release, "14/39", P),
		CASE(test_migrate_mixed, "16", P),
		CASE(test_migrate_multiple, "17 thp", P, .thp = true),
		CASE(test_double_map, "23", P),
		CASE(test_pin_longterm, "27", P),
		CASE(test_prot_kernel_access, "27 kernel access EFAULT", P),
		CASE(test_cow_in_device, "28", P),
		CASE(test_prot_unmap_reported, "33 off 1/4", P, .offset = 1),
		CASE(test_alloc_fallback, "35", P, .thp = true),
		CASE(test_alloc_fallback, "36 zero", P, .thp = true, .offset = 1),
		CASE(test_quota, "38", P),
		CASE(test_prot_shared, "15 memfd+alias", P),
		CASE(test_prot_shared, "15 memfd+alias 64K", P, .granule = 64 * 1024),
		CASE(test_prot_shared, "15 memfd+alias 2M", P, .granule = M2),
		REFUSE(test_prot_refused, "protection change refused", P),
		REFUSE(test_prot_refused_chain, "way back refused for good: chained", P),
		CASE(test_prot_chain, "not ours: chained", P),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
