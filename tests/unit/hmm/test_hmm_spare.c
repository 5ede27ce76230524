// SPDX-License-Identifier: MIT
/* Whole 2 MiB blocks migrated to the device and back, more of them than hmm keeps spare
 * pages for, on both userfaultfd backends: the way back copies into pages an earlier
 * migration gave up where it can, and the CPU must then read exactly what the device
 * holds — never what those pages held before. Also with the kept pages shared with a
 * fork child while the data comes back (the copy into them breaks the sharing first;
 * the child must keep its own view), and with two threads sharing them. Runs under any
 * capability set; without UFFDIO_MOVE nothing is kept and the same checks hold. */
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>

#include "tdev.h"

#define BLOCKS		36		/* more than hmm keeps (32) */
#define LEN		((size_t)BLOCKS * M2)
#define ROUNDS		3

static int owner;		/* the device's: its pool's owner */

/* The bias of page @pg's ints in round @round, on the CPU or written by the device. */
static int bias_of(size_t pg, int round, bool device)
{
	return (int)(pg * 7919) + round * 1000003 + (device ? 500009 : 0);
}

/* The device overwrites every page of [buf, buf+len) where it lives. */
static void device_write_all(struct hmm_mm *mm, struct hmm_devmem *dm, char *buf, int round)
{
	for (size_t pg = 0; pg < LEN / PG; pg++) {
		struct hmm_devmem *where = NULL;
		uint64_t page = 0;

		assert_int_equal(hmm_mm_page_where(mm, buf + pg * PG, &where, &page),
				 HMM_PAGE_DEVICE);
		assert_ptr_equal(where, dm);
		fill_ints(hmm_devmem_page_ptr(dm, page), PG, bias_of(pg, round, true));
	}
}

static void round_trip(struct hmm_mm *mm, struct hmm_devmem *dm, char *buf, int round)
{
	struct hmm_migrate_result r;

	for (size_t pg = 0; pg < LEN / PG; pg++)
		fill_ints(buf + pg * PG, PG, bias_of(pg, round, false));
	assert_int_equal(hmm_migrate_to_device(mm, dm, buf, LEN, &r), 0);
	assert_int_equal(r.migrated, LEN / PG);
	assert_int_equal(r.chunks, BLOCKS);
	device_write_all(mm, dm, buf, round);
	assert_int_equal(hmm_migrate_to_system(mm, dm, buf, LEN, &r), 0);
	assert_int_equal(r.migrated, LEN / PG);
	assert_int_equal(hmm_devmem_used_pages(dm), 0);
	for (size_t pg = 0; pg < LEN / PG; pg++)
		check_ints(buf + pg * PG, PG, bias_of(pg, round, true));
}

/* Several round trips: every page comes back with the device's data of that round. */
static void test_round_trips(void **state)
{
	enum hmm_backend backend = (enum hmm_backend)(uintptr_t)*state;
	struct hmm_mm *mm = tmm_new(backend, 0);
	struct hmm_devmem *dm = tpool_new(&owner, LEN);
	char *buf = tbuf_new(LEN, true);

	assert_int_equal(hmm_region_add(mm, buf, LEN), 0);
	for (int round = 0; round < ROUNDS; round++)
		round_trip(mm, dm, buf, round);
	assert_int_equal(hmm_region_remove(mm, buf), 0);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
	hmm_mm_destroy(mm);
	munmap(buf, LEN);
}

/* Pages kept from a migration to the device are shared with a child (fork shares what
 * the process holds) while the data comes back: the data must arrive all the same, and
 * the child's view of the region stays what it was at the fork. */
static void test_kept_pages_shared_with_child(void **state)
{
	enum hmm_backend backend = (enum hmm_backend)(uintptr_t)*state;
	struct hmm_mm *mm = tmm_new(backend, 0);
	struct hmm_devmem *dm = tpool_new(&owner, LEN);
	char *buf = tbuf_new(LEN, true);
	struct hmm_migrate_result r;
	int go[2], status;
	pid_t pid;

	assert_int_equal(hmm_region_add(mm, buf, LEN), 0);
	for (size_t pg = 0; pg < LEN / PG; pg++)
		fill_ints(buf + pg * PG, PG, bias_of(pg, 0, false));
	assert_int_equal(hmm_migrate_to_device(mm, dm, buf, LEN, &r), 0);
	assert_int_equal(r.migrated, LEN / PG);
	device_write_all(mm, dm, buf, 0);
	assert_int_equal(pipe(go), 0);
	/* fork brings the data back first (fault-back), the kept pages stay kept */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) < 0)
			_exit(2);
		/* the parent's later rounds never show through */
		for (size_t pg = 0; pg < LEN / PG; pg++) {
			const int *p = (const int *)(buf + pg * PG);

			if (p[0] != bias_of(pg, 0, true))
				_exit(1);
		}
		_exit(0);
	}
	close(go[0]);
	for (size_t pg = 0; pg < LEN / PG; pg++)
		check_ints(buf + pg * PG, PG, bias_of(pg, 0, true));
	for (int round = 1; round < ROUNDS; round++)
		round_trip(mm, dm, buf, round);
	assert_int_equal(write(go[1], "x", 1), 1);
	close(go[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(hmm_region_remove(mm, buf), 0);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
	hmm_mm_destroy(mm);
	munmap(buf, LEN);
}

struct job {
	struct hmm_mm *mm;
	struct hmm_devmem *dm;
	char *buf;
	size_t len;
	int bias;
	const char *err;	/* the first thing that went wrong, NULL if nothing */
};

/* One thread's round trips over its own half, checked without cmocka (not thread safe):
 * the device's data of each round on every page. */
static void *job_run(void *arg)
{
	struct job *j = arg;
	struct hmm_migrate_result r;

	for (int round = 0; round < ROUNDS && !j->err; round++) {
		int b = j->bias + round * 1000003;

		for (size_t pg = 0; pg < j->len / PG; pg++)
			fill_ints(j->buf + pg * PG, PG, b + (int)pg);
		if (hmm_migrate_to_device(j->mm, j->dm, j->buf, j->len, &r) ||
		    r.migrated != j->len / PG) {
			j->err = "migration to the device";
			break;
		}
		for (size_t pg = 0; pg < j->len / PG; pg++) {
			struct hmm_devmem *where = NULL;
			uint64_t page = 0;

			if (hmm_mm_page_where(j->mm, j->buf + pg * PG, &where, &page) !=
			    HMM_PAGE_DEVICE) {
				j->err = "a page not on the device";
				return NULL;
			}
			fill_ints(hmm_devmem_page_ptr(j->dm, page), PG, -(b + (int)pg));
		}
		if (hmm_migrate_to_system(j->mm, j->dm, j->buf, j->len, &r) ||
		    r.migrated != j->len / PG) {
			j->err = "migration to the system";
			break;
		}
		for (size_t pg = 0; pg < j->len / PG && !j->err; pg++) {
			const int *p = (const int *)(j->buf + pg * PG);

			for (size_t i = 0; i < PG / sizeof(int); i++) {
				if (p[i] != (int)i - (b + (int)pg)) {
					j->err = "a page back without the device's data";
					break;
				}
			}
		}
	}
	return NULL;
}

/* Two threads migrate their halves of one mm's buffer back and forth at once, sharing
 * the kept pages: each gets its own data back. */
static void test_two_threads(void **state)
{
	enum hmm_backend backend = (enum hmm_backend)(uintptr_t)*state;
	struct hmm_mm *mm = tmm_new(backend, 0);
	struct hmm_devmem *dm = tpool_new(&owner, LEN);
	char *buf = tbuf_new(LEN, true);
	struct job jobs[2];
	pthread_t th[2];

	assert_int_equal(hmm_region_add(mm, buf, LEN), 0);
	for (int t = 0; t < 2; t++) {
		jobs[t] = (struct job){ .mm = mm, .dm = dm, .buf = buf + (size_t)t * (LEN / 2),
					.len = LEN / 2, .bias = t * 77777 };
		assert_int_equal(pthread_create(&th[t], NULL, job_run, &jobs[t]), 0);
	}
	for (int t = 0; t < 2; t++) {
		assert_int_equal(pthread_join(th[t], NULL), 0);
		if (jobs[t].err)
			fail_msg("thread %d: %s", t, jobs[t].err);
	}
	assert_int_equal(hmm_devmem_used_pages(dm), 0);
	assert_int_equal(hmm_region_remove(mm, buf), 0);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
	hmm_mm_destroy(mm);
	munmap(buf, LEN);
}

/* Whether hmm's spare filler can run here: UFFDIO_MOVE, and two CPUs for the process. */
static bool filler_expected(void)
{
	struct hmm_uffd_caps caps;
	cpu_set_t set;

	hmm_uffd_probe(&caps);
	return caps.move && !sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) >= 2;
}

/* Until the filler has done what it was asked (no sleep window: it ends by its count). */
static void wait_filler_idle(struct hmm_mm *mm, struct hmm_mm_stats *st)
{
	for (hmm_mm_get_stats(mm, st); st->spare_fills_pending; hmm_mm_get_stats(mm, st))
		sched_yield();
}

/* Blocks come back from the device with no kept pages (nothing went out before, so the
 * spare area is empty): with UFFDIO_MOVE and two CPUs the filler makes blocks of fresh
 * pages ready, the later blocks of the same migration copy into them, and the device's
 * data arrives on every page all the same, then in a second round too. Without
 * UFFDIO_MOVE there is no spare area and nothing is filled. */
static void test_filler(void **state)
{
	enum hmm_backend backend = (enum hmm_backend)(uintptr_t)*state;
	struct hmm_mm *mm = tmm_new(backend, 0);
	struct hmm_devmem *dm = tpool_new(&owner, LEN);
	char *buf = tbuf_new(LEN, true);
	struct hmm_migrate_result r;
	struct hmm_mm_stats st;

	assert_int_equal(hmm_region_add(mm, buf, LEN), 0);
	for (size_t pg = 0; pg < LEN / PG; pg++)
		fill_ints(buf + pg * PG, PG, bias_of(pg, 0, false));
	/* page by page to the device: no whole block, so nothing is kept on the way */
	for (size_t pg = 0; pg < LEN / PG; pg++) {
		assert_int_equal(hmm_migrate_to_device(mm, dm, buf + pg * PG, PG, &r), 0);
		assert_int_equal(r.migrated, 1);
	}
	device_write_all(mm, dm, buf, 0);
	assert_int_equal(hmm_migrate_to_system(mm, dm, buf, LEN, &r), 0);
	assert_int_equal(r.migrated, LEN / PG);
	for (size_t pg = 0; pg < LEN / PG; pg++)
		check_ints(buf + pg * PG, PG, bias_of(pg, 0, true));
	wait_filler_idle(mm, &st);
	if (filler_expected())
		assert_true(st.spare_fills >= 1);
	else
		assert_int_equal(st.spare_fills, 0);
	round_trip(mm, dm, buf, 1);
	wait_filler_idle(mm, &st);
	assert_int_equal(hmm_region_remove(mm, buf), 0);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
	hmm_mm_destroy(mm);
	munmap(buf, LEN);
}

#define CASE(f, b) { #f "/" #b, f, NULL, NULL, (void *)(uintptr_t)(b) }

int main(void)
{
	const struct CMUnitTest tests[] = {
		CASE(test_round_trips, HMM_BACKEND_UFFD_THREAD),
		CASE(test_round_trips, HMM_BACKEND_UFFD_SIGBUS),
		CASE(test_kept_pages_shared_with_child, HMM_BACKEND_UFFD_THREAD),
		CASE(test_kept_pages_shared_with_child, HMM_BACKEND_UFFD_SIGBUS),
		CASE(test_two_threads, HMM_BACKEND_UFFD_THREAD),
		CASE(test_two_threads, HMM_BACKEND_UFFD_SIGBUS),
		CASE(test_filler, HMM_BACKEND_UFFD_THREAD),
		CASE(test_filler, HMM_BACKEND_UFFD_SIGBUS),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
