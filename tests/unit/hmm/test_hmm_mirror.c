// SPDX-License-Identifier: MIT
/* Mirroring scenarios (doc/scenarios.md HMM-01..10, 18, 20..22, 24..26, 37): a test device
 * reads and writes process memory through hmm_range_fault and its own page table (and
 * device-exclusive mappings), on the CPU-fault backends. Data and counters are checked in every case. */
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "scenario_test.h"

#define MM(st)		tmm_new(((const struct mcase *)(st))->backend, 0)
#define SZ		(NPAGES * PG)

/* The end of a case: @buf (SZ bytes) unmapped, then the device and the mm destroyed. */
static void case_done(struct hmm_mm *mm, struct tdev *d, char *buf)
{
	munmap(buf, SZ);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-01: read-only buffer, first two pages zero, page 1 CPU-mapped as the zero page. */
static void test_anon_read(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	char *buf = tbuf_new(SZ, false);
	int *mirror = calloc(1, SZ);

	fill_ints(buf, SZ, 0);
	memset(buf, 0, 2 * PG);
	madvise(buf, 2 * PG, MADV_DONTNEED);
	assert_int_equal(mprotect(buf, SZ, PROT_READ), 0);
	assert_int_equal(((volatile int *)buf)[PG / sizeof(int)], 0);
	tdev_rw_all(d, buf, NPAGES, mirror, false);
	for (size_t i = 0; i < 2 * PG / sizeof(int); i++)
		assert_int_equal(mirror[i], 0);
	check_ints((char *)mirror + 2 * PG, SZ - 2 * PG, 2 * PG / sizeof(int));
	free(mirror);
	case_done(mm, d, buf);
}

/* HMM-02: PROT_NONE: -EFAULT, the device buffer untouched, the data intact. */
static void test_anon_read_prot(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	char *buf = tbuf_new(SZ, false);
	int *mirror = malloc(SZ);
	size_t cpages;

	fill_ints(buf, SZ, 0);
	for (size_t i = 0; i < SZ / sizeof(int); i++)
		mirror[i] = -(int)i;
	assert_int_equal(mprotect(buf, SZ, PROT_NONE), 0);
	assert_int_equal(tdev_read(d, buf, NPAGES, mirror, &cpages), -EFAULT);
	assert_int_equal(cpages, 0);
	for (size_t i = 0; i < SZ / sizeof(int); i++)
		assert_int_equal(mirror[i], -(int)i);
	assert_int_equal(mprotect(buf, SZ, PROT_READ), 0);
	check_ints(buf, SZ, 0);
	free(mirror);
	case_done(mm, d, buf);
}

/* HMM-03 (and HMM-07 with THP): device write into never-touched memory. */
static void test_anon_write(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	char *buf = tbuf_new(SZ, c->thp);
	int *src = malloc(SZ);

	fill_ints(src, SZ, 0);
	tdev_rw_all(d, buf, NPAGES, src, true);
	check_ints(buf, SZ, 0);
	free(src);
	case_done(mm, d, buf);
}

/* HMM-04: read-only: device write -EPERM and nothing changes; writable again: works. */
static void test_anon_write_prot(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	char *buf = tbuf_new(SZ, false);
	int *src = malloc(SZ);
	size_t cpages;

	assert_int_equal(mprotect(buf, SZ, PROT_READ), 0);
	tdev_rw_all(d, buf, 1, src, false);
	fill_ints(src, SZ, 0);
	assert_int_equal(tdev_write(d, buf, NPAGES, src, &cpages), -EPERM);
	for (size_t i = 0; i < SZ / sizeof(int); i++)
		assert_int_equal(((int *)buf)[i], 0);
	assert_int_equal(mprotect(buf, SZ, PROT_READ | PROT_WRITE), 0);
	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_PROTECTION, (uintptr_t)buf,
				       (uintptr_t)buf + SZ), 0);
	d->faults = 0;
	tdev_rw_all(d, buf, NPAGES, src, true);
	check_ints(buf, SZ, 0);
	free(src);
	case_done(mm, d, buf);
}

/* Child side of HMM-05/06: its own mm and device write -i. Exit code says what failed. */
static int child_device_write(char *buf)
{
	struct hmm_mm_opts o = { 0 };
	struct hmm_mm *mm;
	int *src = malloc(SZ);
	size_t cpages;
	int ret = 0;

	for (size_t i = 0; i < SZ / sizeof(int); i++)
		if (((int *)buf)[i] != (int)i)
			return 2;		/* the child must see the parent's data */
	if (hmm_mm_create(&o, &mm))
		return 3;
	struct tdev *d = calloc(1, sizeof(*d));
	struct hmm_devmem_desc desc = { .owner = d, .size = 8 * M2 };

	d->mm = mm;
	d->pt_cap = 1 << 16;
	d->pt = calloc(d->pt_cap, sizeof(*d->pt));
	if (hmm_devmem_create(&desc, &d->dm) ||
	    hmm_mirror_init(&d->mirror, mm, d->dm, &tdev_ops, NULL))
		return 4;
	for (size_t i = 0; i < SZ / sizeof(int); i++)
		src[i] = -(int)i;
	if (tdev_rw(d, buf, NPAGES, src, true, &cpages) || cpages != NPAGES || d->faults != 1)
		ret = 5;
	for (size_t i = 0; !ret && i < SZ / sizeof(int); i++)
		if (((int *)buf)[i] != -(int)i)
			ret = 6;
	return ret;
}

static void run_fork_write(struct hmm_mm *mm, char *buf, int want_parent_bias_neg)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (!pid)
		_exit(child_device_write(buf));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	for (size_t i = 0; i < SZ / sizeof(int); i++)
		assert_int_equal(((int *)buf)[i], want_parent_bias_neg ? -(int)i : (int)i);
	(void)mm;
}

/* HMM-05 (x migrate x THP) and HMM-28: fork, the child device-writes, the parent keeps
 * its data (private COW, device-resident pages included). */
static void test_write_child(void **state)
{
	const struct mcase *c = *state;
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	char *buf = tbuf_new(SZ, c->thp);
	struct hmm_migrate_result res;
	struct hmm_mm_stats st;

	fill_ints(buf, SZ, 0);
	assert_int_equal(hmm_region_add(mm, buf, SZ), 0);
	for (int migrate = 0; migrate < 2; migrate++) {
		if (migrate) {
			assert_int_equal(hmm_migrate_to_device(mm, d->dm, buf, SZ, &res), 0);
			assert_int_equal(res.migrated, NPAGES);
		}
		run_fork_write(mm, buf, 0);
		/* everything came back before the fork */
		assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	}
	hmm_mm_get_stats(mm, &st);
	assert_true(st.events_fork >= 2);
	case_done(mm, d, buf);
}

/* HMM-06: MAP_SHARED anonymous: the parent sees the child's device write. */
static void test_write_child_shared(void **state)
{
	struct hmm_mm *mm = MM(*state);
	char *buf = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(buf != MAP_FAILED);
	fill_ints(buf, SZ, 0);
	run_fork_write(mm, buf, 1);
	munmap(buf, SZ);
	hmm_mm_destroy(mm);
}

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static long hugepages_get(void)
{
	FILE *f = fopen(NR_HUGEPAGES, "r");
	long n = -1;

	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

static bool hugepages_set(long n)
{
	FILE *f = fopen(NR_HUGEPAGES, "w");
	bool ok = f && fprintf(f, "%ld\n", n) > 0;

	if (f && fclose(f))
		ok = false;
	return ok;
}

/* HMM-08: hugetlbfs. Without a free huge page, root reserves one for the test (and gives
 * it back); only a machine that cannot reserve one skips. */
static void test_write_hugetlbfs(void **state)
{
	struct hmm_mm *mm = MM(*state);
	long before = -1;
	char *buf = mmap(NULL, M2, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);

	if (buf == MAP_FAILED && (before = hugepages_get()) >= 0 && hugepages_set(before + 1))
		buf = mmap(NULL, M2, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (buf == MAP_FAILED) {
		if (before >= 0)
			hugepages_set(before);
		hmm_mm_destroy(mm);
		print_message("skip: no free hugetlbfs page, and %s cannot reserve one\n",
			      NR_HUGEPAGES);
		skip();
	}
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int *src = malloc(M2);

	fill_ints(src, M2, 0);
	tdev_rw_all(d, buf, M2 / PG, src, true);
	check_ints(buf, M2, 0);
	free(src);
	munmap(buf, M2);
	if (before >= 0)
		assert_true(hugepages_set(before));
	tdev_free(d);
	hmm_mm_destroy(mm);
}

static int tmpfile_fd(size_t len, bool fill)
{
	int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
	int *data = malloc(len);

	assert_true(fd >= 0);
	fill_ints(data, len, 0);
	if (fill)
		assert_int_equal(pwrite(fd, data, len, 0), (ssize_t)len);
	else
		assert_int_equal(ftruncate(fd, (off_t)len), 0);
	free(data);
	return fd;
}

/* HMM-09: read a shared read-only file mapping through the device. */
static void test_file_read(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int fd = tmpfile_fd(SZ, true);
	void *map = mmap(NULL, SZ, PROT_READ, MAP_SHARED, fd, 0);
	int *mirror = malloc(SZ);

	assert_true(map != MAP_FAILED);
	tdev_rw_all(d, map, NPAGES, mirror, false);
	check_ints(mirror, SZ, 0);
	free(mirror);
	munmap(map, SZ);
	close(fd);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-10: a device write to a shared file mapping reaches the file. */
static void test_file_write(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int fd = tmpfile_fd(SZ, false);
	char *map = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int *src = malloc(SZ), *back = malloc(SZ);

	assert_true(map != MAP_FAILED);
	fill_ints(src, SZ, 0);
	tdev_rw_all(d, map, NPAGES, src, true);
	check_ints(map, SZ, 0);
	assert_int_equal(pread(fd, back, SZ, 0), (ssize_t)SZ);
	check_ints(back, SZ, 0);
	free(src);
	free(back);
	munmap(map, SZ);
	close(fd);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-18: ten fresh buffers, each read once by the device. */
static void test_read_multiple(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 8 * M2, NULL);
	int *mirror = malloc(SZ);

	for (int c = 0; c < 10; c++) {
		char *buf = tbuf_new(SZ, false);

		fill_ints(buf, SZ, c);
		d->faults = 0;
		tdev_rw_all(d, buf, NPAGES, mirror, false);
		check_ints(mirror, SZ, c);
		munmap(buf, SZ);
		assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_UNMAP, (uintptr_t)buf,
					       (uintptr_t)buf + SZ), 0);
	}
	free(mirror);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-20: snapshot codes of seven pages seen by device 0. */
static void test_snapshot(void **state)
{
	uint8_t want[7] = {
		PROT_ERROR, PROT_ERROR, PROT_ZERO | PROT_READ_, PROT_READ_, PROT_WRITE_,
		PROT_DEV_PRIVATE_LOCAL | PROT_WRITE_, PROT_NONE_,
	};
	struct hmm_mm *mm = MM(*state);
	struct tdev *d0 = tdev_new(mm, 2 * M2, NULL), *d1 = tdev_new(mm, 2 * M2, NULL);
	char *p = tbuf_new(7 * PG, false);
	struct hmm_migrate_result res;
	uint8_t codes[7];

	/* Page 2 is read only: the zero page where the kernel maps one. */
	if (!tdev_kernel_zero_page())
		want[2] = PROT_READ_;
	assert_int_equal(hmm_region_add(mm, p, 7 * PG), 0);
	p[3 * PG] = 3;
	p[4 * PG] = 4;
	p[5 * PG] = 5;
	p[6 * PG] = 6;
	assert_int_equal(mprotect(p, PG, PROT_NONE), 0);
	assert_int_equal(munmap(p + PG, PG), 0);
	assert_int_equal(mprotect(p + 2 * PG, 2 * PG, PROT_READ), 0);
	assert_int_equal(((volatile char *)p)[2 * PG], 0);
	assert_int_equal(hmm_migrate_to_device(mm, d0->dm, p + 5 * PG, PG, &res), 0);
	assert_int_equal(res.migrated, 1);
	assert_int_equal(hmm_migrate_to_device(mm, d1->dm, p + 6 * PG, PG, &res), 0);
	assert_int_equal(res.migrated, 1);
	assert_int_equal(tdev_snapshot(d0, p, 7, codes), 0);
	for (int i = 0; i < 7; i++) {
		if (codes[i] != want[i])
			fail_msg("page %d: code %#x, want %#x", i, codes[i], want[i]);
	}
	/* the snapshot faulted nothing back */
	assert_int_equal(hmm_mm_page_where(mm, p + 6 * PG, NULL, NULL), HMM_PAGE_DEVICE);
	assert_int_equal(p[5 * PG] + p[6 * PG], 11);
	tdev_free(d0);
	tdev_free(d1);
	munmap(p, 7 * PG);
	hmm_mm_destroy(mm);
}

/* HMM-21: a page of device memory mapped into the process (a memfd, as a VF BAR will be)
 * reads as an ordinary page. */
static void test_mixedmap(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	int fd = memfd_create("bar", MFD_CLOEXEC);
	uint8_t code;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, PG), 0);
	char *m = mmap(NULL, PG, PROT_READ, MAP_PRIVATE, fd, 0);

	assert_true(m != MAP_FAILED);
	assert_int_equal(((volatile char *)m)[0], 0);
	assert_int_equal(tdev_snapshot(d, m, 1, &code), 0);
	assert_int_equal(code, PROT_READ_);
	munmap(m, PG);
	close(fd);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* HMM-22 on THP (and hugetlbfs when available): every page reports the PMD order. */
static void test_compound(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	char *buf = tbuf_new(M2, true);
	uint8_t *codes = malloc(M2 / PG);
	bool thp;

	memset(buf, 1, M2);
	assert_int_equal(tdev_snapshot(d, buf, M2 / PG, codes), 0);
	thp = codes[0] & PROT_PMD;
	if (!thp) {
		print_message("skip: no THP for a MADV_HUGEPAGE 2 MiB buffer "
			      "(transparent_hugepage disabled or memory fragmented)\n");
		goto out;
	}
	for (size_t i = 0; i < M2 / PG; i++)
		assert_int_equal(codes[i], PROT_WRITE_ | PROT_PMD);
	assert_int_equal(mprotect(buf, M2, PROT_READ), 0);
	assert_int_equal(tdev_snapshot(d, buf, M2 / PG, codes), 0);
	for (size_t i = 0; i < M2 / PG; i++)
		assert_int_equal(codes[i], PROT_READ_ | PROT_PMD);
out:
	free(codes);
	munmap(buf, M2);
	tdev_free(d);
	hmm_mm_destroy(mm);
	if (!thp)
		skip();
}

/* ---- HMM-37: a region whose CPU faults a third party serves through its own uffd ---- */

struct third_party {
	int uffd;
	int stop;			/* eventfd: the test is done with the region */
	char *base;
	size_t len;
	pthread_t thread;
	unsigned int served;
};

/* Serves faults until told to stop: the test's accesses wait on it however late they come. */
static void *third_party_thread(void *arg)
{
	struct third_party *tp = arg;
	char *page = aligned_alloc(PG, PG);

	for (;;) {
		struct pollfd pfd[2] = { { .fd = tp->uffd, .events = POLLIN },
					 { .fd = tp->stop, .events = POLLIN } };
		struct uffd_msg msg;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN))
			continue;
		if (read(tp->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		uintptr_t a = msg.arg.pagefault.address & ~(PG - 1);

		/* the handler takes its time, as one that reads from disk would */
		usleep(100);
		memset(page, (int)((a - (uintptr_t)tp->base) / PG) + 1, PG);
		struct uffdio_copy cp = { .dst = a, .src = (uintptr_t)page, .len = PG };

		if (!ioctl(tp->uffd, UFFDIO_COPY, &cp))
			tp->served++;
	}
	free(page);
	return NULL;
}

static void test_uffd_third_party(void **state)
{
	struct hmm_mm *mm = MM(*state);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	struct third_party tp = { .len = 16 * PG };
	struct uffdio_api api = { .api = UFFD_API };
	char *mirror = malloc(tp.len);

	tp.base = tbuf_new(tp.len, false);
	/* Non-blocking: poll() reports a blocking userfaultfd as an error, never as readable. */
	tp.uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	assert_true(tp.uffd >= 0);
	tp.stop = eventfd(0, EFD_CLOEXEC);
	assert_true(tp.stop >= 0);
	assert_int_equal(ioctl(tp.uffd, UFFDIO_API, &api), 0);
	struct uffdio_register reg = { .range = { (uintptr_t)tp.base, tp.len },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };

	assert_int_equal(ioctl(tp.uffd, UFFDIO_REGISTER, &reg), 0);
	assert_int_equal(pthread_create(&tp.thread, NULL, third_party_thread, &tp), 0);
	tdev_rw_all(d, tp.base, tp.len / PG, mirror, false);
	for (size_t i = 0; i < tp.len; i++)
		assert_int_equal(mirror[i], (char)(i / PG + 1));
	assert_int_equal(eventfd_write(tp.stop, 1), 0);
	pthread_join(tp.thread, NULL);
	assert_int_equal(tp.served, tp.len / PG);
	close(tp.stop);
	close(tp.uffd);
	munmap(tp.base, tp.len);
	free(mirror);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* ---- device-exclusive access (HMM-24..26) ---------------------------------------------- */

/* A managed buffer with data i and a device; the fixture of the exclusive cases. */
static void excl_setup(void **state, struct hmm_mm **mm, struct tdev **d, char **buf)
{
	*mm = MM(*state);
	*d = tdev_new(*mm, 2 * M2, NULL);
	*buf = tbuf_new(SZ, false);
	fill_ints(*buf, SZ, 0);
	assert_int_equal(hmm_region_add(*mm, *buf, SZ), 0);
}

static void excl_teardown(struct hmm_mm *mm, struct tdev *d, char *buf)
{
	assert_int_equal(hmm_region_remove(mm, buf), 0);
	case_done(mm, d, buf);
}

static size_t count_exclusive(struct hmm_mm *mm, char *p, size_t npages)
{
	size_t n = 0;

	for (size_t i = 0; i < npages; i++)
		n += hmm_mm_page_where(mm, p + i * PG, NULL, NULL) == HMM_PAGE_EXCLUSIVE;
	return n;
}

/* HMM-24: the device reads i through its atomic mapping; the CPU reads and increments
 * every int, which takes each page back and drops the device's atomic mapping. */
static void test_exclusive(void **state)
{
	struct hmm_mm *mm;
	struct tdev *d;
	char *buf;
	int *mirror = malloc(SZ);
	struct hmm_mm_stats st;

	excl_setup(state, &mm, &d, &buf);
	assert_int_equal(tdev_exclusive(d, buf, NPAGES, mirror), 0);
	check_ints(mirror, SZ, 0);
	assert_int_equal(count_exclusive(mm, buf, NPAGES), NPAGES);
	assert_int_equal(tdev_check_exclusive(d, buf, NPAGES), -EPERM);
	for (size_t i = 0; i < SZ / sizeof(int); i++) {
		if (((int *)buf)[i] != (int)i)
			fail_msg("int %zu: %d", i, ((int *)buf)[i]);
		((int *)buf)[i]++;
	}
	check_ints(buf, SZ, 1);
	assert_int_equal(tdev_check_exclusive(d, buf, NPAGES), 0);
	assert_int_equal(count_exclusive(mm, buf, NPAGES), 0);
	hmm_mm_get_stats(mm, &st);
	assert_int_equal(st.exclusive, NPAGES);
	assert_int_equal(st.exclusive_revoked, NPAGES);
	free(mirror);
	excl_teardown(mm, d, buf);
}

/* HMM-25: exclusive, then the application makes it read-only (and says so): a device
 * write is refused with EPERM and the memory is unchanged. */
static void test_exclusive_mprotect(void **state)
{
	struct hmm_mm *mm;
	struct tdev *d;
	char *buf;
	int *mirror = malloc(SZ);
	size_t cpages;

	excl_setup(state, &mm, &d, &buf);
	assert_int_equal(tdev_exclusive(d, buf, NPAGES, mirror), 0);
	assert_int_equal(mprotect(buf, SZ, PROT_READ), 0);
	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_PROTECTION, (uintptr_t)buf,
				       (uintptr_t)buf + SZ), 0);
	fill_ints(mirror, SZ, -5);
	assert_int_equal(tdev_write(d, buf, NPAGES, mirror, &cpages), -EPERM);
	assert_int_equal(cpages, 0);
	check_ints(buf, SZ, 0);
	assert_int_equal(tdev_check_exclusive(d, buf, NPAGES), 0);
	assert_int_equal(mprotect(buf, SZ, PROT_READ | PROT_WRITE), 0);
	free(mirror);
	excl_teardown(mm, d, buf);
}

/* HMM-26: exclusive, fork; parent and child each increment every int and each sees
 * i + 1: the pages came back before the fork and were copied on write. */
static void test_exclusive_cow(void **state)
{
	struct hmm_mm *mm;
	struct tdev *d;
	char *buf;
	pid_t pid;
	int status;

	excl_setup(state, &mm, &d, &buf);
	assert_int_equal(tdev_exclusive(d, buf, NPAGES, NULL), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		for (size_t i = 0; i < SZ / sizeof(int); i++)
			((int *)buf)[i]++;
		for (size_t i = 0; i < SZ / sizeof(int); i++)
			if (((int *)buf)[i] != (int)i + 1)
				_exit(1);
		_exit(0);
	}
	for (size_t i = 0; i < SZ / sizeof(int); i++)
		((int *)buf)[i]++;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	check_ints(buf, SZ, 1);
	assert_int_equal(tdev_check_exclusive(d, buf, NPAGES), 0);
	excl_teardown(mm, d, buf);
}

/* hmm_make_exclusive refuses what it cannot do and changes nothing: unmanaged memory,
 * a read-only mapping, misaligned or empty ranges. */
static void test_exclusive_errors(void **state)
{
	struct hmm_mm *mm;
	struct tdev *d;
	char *buf;
	char *plain = tbuf_new(M2, false);
	uint64_t pfns[4];

	excl_setup(state, &mm, &d, &buf);
	assert_int_equal(hmm_make_exclusive(mm, plain, 4 * PG, d, pfns), -EINVAL);
	assert_int_equal(hmm_make_exclusive(mm, buf + 1, PG, d, pfns), -EINVAL);
	assert_int_equal(hmm_make_exclusive(mm, buf, 0, d, pfns), -EINVAL);
	assert_int_equal(hmm_make_exclusive(mm, buf, PG, d, NULL), -EINVAL);
	assert_int_equal(mprotect(buf, 4 * PG, PROT_READ), 0);
	assert_int_equal(hmm_make_exclusive(mm, buf, 4 * PG, d, pfns), -EPERM);
	assert_int_equal(count_exclusive(mm, buf, NPAGES), 0);
	check_ints(buf, SZ, 0);
	assert_int_equal(mprotect(buf, 4 * PG, PROT_READ | PROT_WRITE), 0);
	munmap(plain, M2);
	excl_teardown(mm, d, buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		CASE_TS(test_anon_read, "01"),
		CASE(test_anon_read_prot, "02", T),
		CASE_TS(test_anon_write, "03"),
		CASE(test_anon_read, "01", P),
		CASE(test_anon_write, "03", P),
		CASE(test_snapshot, "20", P),
		CASE(test_read_multiple, "18", P),
		CASE(test_anon_write_prot, "04", T),
		CASE(test_write_child, "05/28", T),
		CASE(test_write_child, "05/28 thp", T, .thp = true),
		CASE(test_write_child, "05/28", S),
		CASE(test_write_child_shared, "06", T),
		CASE(test_anon_write, "07 thp", T, .thp = true),
		CASE(test_write_hugetlbfs, "08", T),
		CASE(test_file_read, "09", T),
		CASE(test_file_write, "10", T),
		CASE(test_read_multiple, "18", T),
		CASE_TS(test_snapshot, "20"),
		CASE(test_mixedmap, "21", T),
		CASE(test_compound, "22", T),
		CASE(test_uffd_third_party, "37", T),
		CASE_TSP(test_exclusive, "24"),
		CASE(test_exclusive_mprotect, "25", T),
		CASE(test_exclusive_mprotect, "25", P),
		CASE_TSP(test_exclusive_cow, "26"),
		CASE(test_exclusive_errors, "24 errors", T),
		CASE(test_exclusive_errors, "24 errors", P),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
