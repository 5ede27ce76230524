// SPDX-License-Identifier: MIT
/* Migration scenarios (doc/scenarios.md HMM-11..17, 23, 27, 29..36, 38, 39): managed regions
 * migrated to a test device's pool and back, by explicit calls, by CPU faults (every
 * backend and fault granule) and by eviction. Each case checks data, per-page placement,
 * counters, and that no device page leaks. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

#include "scenario_test.h"

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
		CASE(test_alloc_fallback, "35", T, .thp = true),
		CASE(test_alloc_fallback, "36 zero", S, .thp = true, .offset = 1),
		CASE(test_quota, "38", T),
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
		CASE(test_prot_chain, "not ours: chained", P),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
