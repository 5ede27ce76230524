// SPDX-License-Identifier: MIT
/* The copier thread of the way back without UFFDIO_MOVE (hmm/copier.c): a migration to
 * system memory shares its UFFDIO_COPY of a run of device pages with a second thread.
 * A test hook holds the migration before it takes its first piece until the thread has
 * copied one, so that the thread's part is exercised whatever the machine's load. Then:
 * every page comes back with the device's data whichever thread copied it; a CPU reading
 * the block meanwhile waits and sees that data; a short run is copied by the migration
 * alone; the back half of the block unmapped while both copy ends the migration cleanly
 * with the front half's data; two migrations at once share one thread. With UFFDIO_MOVE
 * (the full capability set) the way back moves pages and the thread copies nothing; with
 * one CPU it never starts. Also under ThreadSanitizer. */
#include <pthread.h>
#include <sched.h>

#include "tdev.h"
#include "hmm/hmm_internal.h"	/* hmm_race_hook */

#define BLOCKS	4
#define LEN	((size_t)BLOCKS * M2)
#define PIECE	(128 * 1024)	/* the copier's piece: copier.c */

static int owner;		/* the device's: its pool's owner */

/* What the hook does at the first piece of a migration back. */
static struct hmm_mm *hook_mm;
static void (*_Atomic hook_then)(void);
static atomic_uint hook_calls;

static uint64_t copier_pages(struct hmm_mm *mm)
{
	struct hmm_mm_stats st;

	hmm_mm_get_stats(mm, &st);
	return st.copier_pages;
}

/* Once per armed migration: wait until the thread has copied a piece, then run
 * hook_then. Every later call returns at once. */
static void piece_hook(enum hmm_race_window win, uintptr_t addr)
{
	void (*then)(void);

	(void)addr;
	if (win != HMM_RACE_COPIER_PIECE || atomic_fetch_add(&hook_calls, 1))
		return;
	while (!copier_pages(hook_mm))
		sched_yield();	/* the thread was woken before this call */
	then = atomic_load(&hook_then);
	if (then)
		then();
}

static void hook_arm(struct hmm_mm *mm, void (*then)(void))
{
	hook_mm = mm;
	atomic_store(&hook_then, then);
	atomic_store(&hook_calls, 0);
	atomic_store(&hmm_race_hook, piece_hook);
}

static void hook_disarm(void)
{
	atomic_store(&hmm_race_hook, NULL);
}

/* The thread takes part only without UFFDIO_MOVE and with two CPUs to run on. */
static bool copier_expected(void)
{
	struct hmm_uffd_caps caps;
	cpu_set_t set;

	hmm_uffd_probe(&caps);
	return !caps.move && !sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) >= 2;
}

static int bias_of(size_t pg, bool device)
{
	return (int)(pg * 7919) + (device ? 500009 : 0);
}

/* @len bytes of @buf filled, migrated to the device and overwritten there. */
static void to_device(struct hmm_mm *mm, struct hmm_devmem *dm, char *buf, size_t len)
{
	struct hmm_migrate_result r;

	for (size_t pg = 0; pg < len / PG; pg++)
		fill_ints(buf + pg * PG, PG, bias_of(pg, false));
	assert_int_equal(hmm_migrate_to_device(mm, dm, buf, len, &r), 0);
	assert_int_equal(r.migrated, len / PG);
	for (size_t pg = 0; pg < len / PG; pg++) {
		uint64_t page = 0;

		assert_int_equal(hmm_mm_page_where(mm, buf + pg * PG, NULL, &page),
				 HMM_PAGE_DEVICE);
		fill_ints(hmm_devmem_page_ptr(dm, page), PG, bias_of(pg, true));
	}
}

struct setup {
	struct hmm_mm *mm;
	struct hmm_devmem *dm;
	char *buf;
};

static struct setup setup_new(void **state)
{
	enum hmm_backend backend = (enum hmm_backend)(uintptr_t)*state;
	struct setup s = { .mm = tmm_new(backend, 0), .dm = tpool_new(&owner, LEN),
			   .buf = tbuf_new(LEN, true) };

	assert_int_equal(hmm_region_add(s.mm, s.buf, LEN), 0);
	return s;
}

/* The first @len bytes of the buffer migrated back to system memory, every page with the
 * data to_device() left on the device. */
static void back_checked(struct setup *s, size_t len)
{
	struct hmm_migrate_result r;

	assert_int_equal(hmm_migrate_to_system(s->mm, s->dm, s->buf, len, &r), 0);
	assert_int_equal(r.migrated, len / PG);
	for (size_t pg = 0; pg < len / PG; pg++)
		check_ints(s->buf + pg * PG, PG, bias_of(pg, true));
}

static void setup_free(struct setup *s)
{
	hook_disarm();
	assert_int_equal(hmm_devmem_used_pages(s->dm), 0);
	assert_int_equal(hmm_region_remove(s->mm, s->buf), 0);
	assert_int_equal(hmm_devmem_destroy(s->dm), 0);
	hmm_mm_destroy(s->mm);	/* joins the thread */
	munmap(s->buf, LEN);
}

/* Every block comes back with the device's data; the thread copied at least one piece
 * of the first (the hook waited for it), at most every page. */
static void test_thread_copies(void **state)
{
	struct setup s = setup_new(state);
	uint64_t by_thread;

	to_device(s.mm, s.dm, s.buf, LEN);
	hook_arm(s.mm, NULL);
	back_checked(&s, LEN);
	by_thread = copier_pages(s.mm);
	if (copier_expected()) {
		assert_true(by_thread >= PIECE / PG);
		assert_true(by_thread <= LEN / PG);
	} else {
		assert_int_equal(by_thread, 0);
		assert_int_equal(atomic_load(&hook_calls), 0);
	}
	setup_free(&s);
}

/* A CPU thread reads the first and the last page of the block while the two copy: it
 * waits for the migration and reads the device's data, never a hole's zeros. */
static char *reader_buf;
static int reader_seen[2];
static pthread_t reader;

static void *reader_run(void *arg)
{
	(void)arg;
	reader_seen[0] = ((volatile int *)reader_buf)[0];
	reader_seen[1] = ((volatile int *)(reader_buf + M2 - PG))[1];
	return NULL;
}

static void start_reader(void)
{
	assert_int_equal(pthread_create(&reader, NULL, reader_run, NULL), 0);
}

static void test_reader_during_copy(void **state)
{
	struct setup s = setup_new(state);
	struct hmm_migrate_result r;
	bool expected = copier_expected();

	to_device(s.mm, s.dm, s.buf, M2);
	reader_buf = s.buf;
	hook_arm(s.mm, start_reader);
	if (!expected)		/* no hook call: the reader runs beside the migration */
		start_reader();
	assert_int_equal(hmm_migrate_to_system(s.mm, s.dm, s.buf, M2, &r), 0);
	assert_int_equal(pthread_join(reader, NULL), 0);
	assert_int_equal(reader_seen[0], bias_of(0, true));
	assert_int_equal(reader_seen[1], 1 + bias_of(M2 / PG - 1, true));
	for (size_t pg = 0; pg < M2 / PG; pg++)
		check_ints(s.buf + pg * PG, PG, bias_of(pg, true));
	setup_free(&s);
}

/* A run shorter than two pieces is not handed to the thread. */
static void test_short_run_alone(void **state)
{
	struct setup s = setup_new(state);
	const size_t len = PIECE + PIECE / 2;

	to_device(s.mm, s.dm, s.buf, len);
	hook_arm(s.mm, NULL);
	back_checked(&s, len);
	assert_int_equal(copier_pages(s.mm), 0);
	assert_int_equal(atomic_load(&hook_calls), 0);
	setup_free(&s);
}

/* The back half of the block is unmapped once the thread is copying it: the pieces
 * there fail, the migration still ends (no hang, no device page left: the unmap event
 * frees what the migration left), and the front half has the device's data. */
static char *unmap_at;

static void unmap_back_half(void)
{
	assert_int_equal(munmap(unmap_at, M2 / 2), 0);
}

static void test_unmap_while_copying(void **state)
{
	struct setup s = setup_new(state);
	struct hmm_migrate_result r;

	to_device(s.mm, s.dm, s.buf, M2);
	unmap_at = s.buf + M2 / 2;
	if (copier_expected()) {
		hook_arm(s.mm, unmap_back_half);
		assert_int_equal(hmm_migrate_to_system(s.mm, s.dm, s.buf, M2, &r), 0);
	} else {
		/* unmapped first, the block is refused as a whole (a page with no VMA);
		 * the front half then comes back alone */
		unmap_back_half();
		assert_int_equal(hmm_migrate_to_system(s.mm, s.dm, s.buf, M2, &r), -EINVAL);
		assert_int_equal(hmm_migrate_to_system(s.mm, s.dm, s.buf, M2 / 2, &r), 0);
	}
	hmm_mm_sync_events(s.mm);
	for (size_t pg = 0; pg < M2 / 2 / PG; pg++)
		check_ints(s.buf + pg * PG, PG, bias_of(pg, true));
	assert_int_equal(hmm_devmem_used_pages(s.dm), 0);
	/* the rest of the region is still mapped and managed */
	to_device(s.mm, s.dm, s.buf + M2, M2);
	assert_int_equal(hmm_migrate_to_system(s.mm, s.dm, s.buf + M2, M2, &r), 0);
	for (size_t pg = 0; pg < M2 / PG; pg++)
		check_ints(s.buf + M2 + pg * PG, PG, bias_of(pg, true));
	setup_free(&s);
}

/* Two threads migrate their own halves back at once: one of them has the copier (the
 * other copies alone), both get their data. */
struct job {
	struct hmm_mm *mm;
	struct hmm_devmem *dm;
	char *buf;
	int ret;
	size_t migrated;
};

static void *job_run(void *arg)
{
	struct job *j = arg;
	struct hmm_migrate_result r;

	j->ret = hmm_migrate_to_system(j->mm, j->dm, j->buf, LEN / 2, &r);
	j->migrated = r.migrated;
	return NULL;
}

static void test_two_migrations(void **state)
{
	struct setup s = setup_new(state);
	struct job jobs[2];
	pthread_t th[2];

	to_device(s.mm, s.dm, s.buf, LEN);
	for (int t = 0; t < 2; t++) {
		jobs[t] = (struct job){ .mm = s.mm, .dm = s.dm, .buf = s.buf + t * (LEN / 2) };
		assert_int_equal(pthread_create(&th[t], NULL, job_run, &jobs[t]), 0);
	}
	for (int t = 0; t < 2; t++) {
		assert_int_equal(pthread_join(th[t], NULL), 0);
		assert_int_equal(jobs[t].ret, 0);
		assert_int_equal(jobs[t].migrated, LEN / 2 / PG);
	}
	for (size_t pg = 0; pg < LEN / PG; pg++)
		check_ints(s.buf + pg * PG, PG, bias_of(pg, true));
	if (!copier_expected())
		assert_int_equal(copier_pages(s.mm), 0);
	setup_free(&s);
}

#define CASE(f, b) { #f "/" #b, f, NULL, NULL, (void *)(uintptr_t)(b) }

int main(void)
{
	const struct CMUnitTest tests[] = {
		CASE(test_thread_copies, HMM_BACKEND_UFFD_THREAD),
		CASE(test_thread_copies, HMM_BACKEND_UFFD_SIGBUS),
		CASE(test_reader_during_copy, HMM_BACKEND_UFFD_THREAD),
		CASE(test_reader_during_copy, HMM_BACKEND_UFFD_SIGBUS),
		CASE(test_short_run_alone, HMM_BACKEND_UFFD_THREAD),
		CASE(test_unmap_while_copying, HMM_BACKEND_UFFD_THREAD),
		CASE(test_unmap_while_copying, HMM_BACKEND_UFFD_SIGBUS),
		CASE(test_two_migrations, HMM_BACKEND_UFFD_THREAD),
		CASE(test_two_migrations, HMM_BACKEND_UFFD_SIGBUS),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
