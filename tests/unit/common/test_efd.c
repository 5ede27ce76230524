// SPDX-License-Identifier: MIT
/* eventfd calls that another holder of the description cannot keep waiting: a read of an
 * empty blocking eventfd returns -EAGAIN (also with reads guarded as on kernels before
 * RWF_NOWAIT); a write to a full one returns -EAGAIN when non-blocking and is cut by the
 * watchdog (-EINTR, counter unchanged) when blocking, also when its first signal lands
 * before the write enters the kernel, in one thread or many, in threads
 * that come and go and in a forked child; a holder that keeps toggling O_NONBLOCK, filling
 * and draining under a stream of writes makes every write return, and no signal of the
 * watchdog ever lands outside the call it was sent for. Every check is on results and
 * counts, never on time. Also runs under ThreadSanitizer (common_TSAN_TESTS). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/efd.h"

#define FULL		0xfffffffffffffffeull	/* the largest count an eventfd holds */
#define THREADS		4
#define RACE_WRITERS	2
#define RACE_WRITES	20			/* per writer, against the toggling holder */

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#else
#define UNDER_TSAN 0
#endif

/* An eventfd holding @count, blocking unless @nonblock (as a guest may leave it). */
static int efd_new(uint64_t count, bool nonblock)
{
	int fd = eventfd(0, EFD_CLOEXEC | (nonblock ? EFD_NONBLOCK : 0));

	assert_true(fd >= 0);
	if (count)
		assert_int_equal(write(fd, &count, sizeof(count)), (ssize_t)sizeof(count));
	return fd;
}

static struct cmn_efd_stats stats(void)
{
	struct cmn_efd_stats st;

	cmn_efd_stats(&st);
	return st;
}

static void test_read_never_waits(void **state)
{
	int fd = efd_new(0, false);
	uint64_t v = 0;

	(void)state;
	assert_int_equal(cmn_efd_read(fd, &v), -EAGAIN);
	assert_int_equal(cmn_efd_write(fd, 5), 0);
	assert_int_equal(cmn_efd_read(fd, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(cmn_efd_read(fd, &v), -EAGAIN);
	close(fd);
	fd = efd_new(FULL, false);
	assert_int_equal(cmn_efd_read(fd, &v), 0);
	assert_true(v == FULL);
	close(fd);
}

/* As on a kernel whose eventfd refuses RWF_NOWAIT: the read is guarded instead. */
static void test_guarded_reads(void **state)
{
	struct cmn_efd_stats before = stats();
	int fd = efd_new(0, false), nb = efd_new(0, true);
	uint64_t v = 0;

	(void)state;
	cmn_efd_force_guarded_reads(true);
	assert_int_equal(cmn_efd_read(nb, &v), -EAGAIN);
	assert_int_equal(cmn_efd_read(fd, &v), -EINTR);
	assert_int_equal(cmn_efd_write(fd, 7), 0);
	assert_int_equal(cmn_efd_read(fd, &v), 0);
	assert_int_equal(v, 7);
	cmn_efd_force_guarded_reads(false);
	assert_true(stats().cuts == before.cuts + 1);
	assert_true(stats().strays == 0);
	close(fd);
	close(nb);
}

static void test_write_adds(void **state)
{
	int fd = efd_new(0, true);
	uint64_t v = 0;

	(void)state;
	assert_int_equal(cmn_efd_write(fd, 3), 0);
	assert_int_equal(cmn_efd_write(fd, 4), 0);
	assert_int_equal(read(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	assert_int_equal(v, 7);
	close(fd);
}

static void test_write_full_nonblocking(void **state)
{
	struct cmn_efd_stats before = stats();
	int fd = efd_new(FULL, true);

	(void)state;
	assert_int_equal(cmn_efd_write(fd, 1), -EAGAIN);
	assert_true(stats().cuts == before.cuts);
	close(fd);
}

/* Full and blocking: the write would wait until someone reads; the watchdog cuts it. */
static void test_write_full_blocking_is_cut(void **state)
{
	struct cmn_efd_stats before = stats();
	int fd = efd_new(FULL, false);
	uint64_t v = 0;

	(void)state;
	assert_int_equal(cmn_efd_write(fd, 1), -EINTR);
	assert_true(stats().cuts == before.cuts + 1);
	assert_true(stats().strays == 0);
	/* Nothing was added, and the thread's next calls work as before. */
	assert_int_equal(cmn_efd_read(fd, &v), 0);
	assert_true(v == FULL);
	assert_int_equal(cmn_efd_write(fd, 1), 0);
	close(fd);
}

/* The first signal lands before the write enters the kernel (the thread was preempted
 * there past the bound) and interrupts nothing: the next tick's signal cuts the write. */
static void test_signal_before_the_write(void **state)
{
	struct cmn_efd_stats before = stats();
	int fd = efd_new(FULL, false);

	(void)state;
	cmn_efd_test_pause(2ull * CMN_EFD_BOUND_MS * 1000000ull);
	assert_int_equal(cmn_efd_write(fd, 1), -EINTR);
	cmn_efd_test_pause(0);
	assert_true(stats().cuts == before.cuts + 1);
	assert_true(stats().strays == 0);
	close(fd);
}

static void *cut_one(void *arg)
{
	int fd = efd_new(FULL, false);

	*(int *)arg = cmn_efd_write(fd, 1);
	close(fd);
	return NULL;
}

/* Several threads cut at once, twice over with new threads: a thread's slot goes with it. */
static void test_cuts_in_many_threads(void **state)
{
	struct cmn_efd_stats before = stats();
	pthread_t th[THREADS];
	int res[THREADS];

	(void)state;
	for (unsigned int round = 0; round < 2; round++) {
		for (unsigned int i = 0; i < THREADS; i++)
			assert_int_equal(pthread_create(&th[i], NULL, cut_one, &res[i]), 0);
		for (unsigned int i = 0; i < THREADS; i++) {
			assert_int_equal(pthread_join(th[i], NULL), 0);
			assert_int_equal(res[i], -EINTR);
		}
	}
	assert_true(stats().cuts == before.cuts + 2 * THREADS);
	assert_true(stats().strays == 0);
}

struct race {
	int fd;
	atomic_int writers_left;
	atomic_uint bad;		/* writes that returned something unexpected */
	atomic_uint done, cut;
};

/* The hostile holder: keeps the counter full and blocking for a while around the bound (a
 * stimulus, not a measure), then drains it, releasing the writes that wait, as the
 * watchdog may be cutting them, and fills it up again (less one per writer, whose
 * released writes then fill it) with O_NONBLOCK flipped on and off. */
static void *race_holder(void *arg)
{
	struct race *r = arg;
	uint64_t v, fill = FULL - RACE_WRITERS;
	unsigned int seed = 1;

	while (atomic_load(&r->writers_left)) {
		usleep((CMN_EFD_BOUND_MS - 20 + (unsigned int)rand_r(&seed) % 40) * 1000);
		fcntl(r->fd, F_SETFL, O_NONBLOCK);
		do
			if (read(r->fd, &v, sizeof(v)) < 0)
				v = 0;
		while (write(r->fd, &fill, sizeof(fill)) < 0);
		fcntl(r->fd, F_SETFL, 0);
	}
	return NULL;
}

static void *race_writer(void *arg)
{
	struct race *r = arg;

	for (unsigned int i = 0; i < RACE_WRITES; i++) {
		int w = cmn_efd_write(r->fd, 1);

		if (w == -EINTR)
			atomic_fetch_add(&r->cut, 1);
		else if (w == 0 || w == -EAGAIN)
			atomic_fetch_add(&r->done, 1);
		else
			atomic_fetch_add(&r->bad, 1);
	}
	atomic_fetch_sub(&r->writers_left, 1);
	return NULL;
}

/* Writes land while the holder releases them at any moment, the watchdog's cut among
 * them: every write returns, and every signal reached the call it was sent for. */
static void test_race_with_toggling_holder(void **state)
{
	struct race r = { .fd = efd_new(FULL, false), .writers_left = RACE_WRITERS };
	pthread_t holder, w[RACE_WRITERS];

	(void)state;
	assert_int_equal(pthread_create(&holder, NULL, race_holder, &r), 0);
	for (unsigned int i = 0; i < RACE_WRITERS; i++)
		assert_int_equal(pthread_create(&w[i], NULL, race_writer, &r), 0);
	for (unsigned int i = 0; i < RACE_WRITERS; i++)
		assert_int_equal(pthread_join(w[i], NULL), 0);
	assert_int_equal(pthread_join(holder, NULL), 0);
	assert_int_equal(atomic_load(&r.bad), 0);
	assert_int_equal(atomic_load(&r.done) + atomic_load(&r.cut), RACE_WRITERS * RACE_WRITES);
	print_message("# %u writes released by the holder, %u cut\n", atomic_load(&r.done),
		      atomic_load(&r.cut));
	assert_true(stats().strays == 0);
	close(r.fd);
}

/* A forked child has no watchdog of its parent's: its first guarded call starts its own. */
static void test_cut_in_forked_child(void **state)
{
	int fd, st;
	pid_t pid;

	(void)state;
	if (UNDER_TSAN)
		skip();	/* TSan stops a child of a threaded process that starts a thread */
	fd = efd_new(0, true);
	assert_int_equal(cmn_efd_write(fd, 1), 0);	/* the parent's watchdog runs */
	close(fd);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		fd = efd_new(FULL, false);
		_exit(cmn_efd_write(fd, 1) == -EINTR ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_never_waits),
		cmocka_unit_test(test_guarded_reads),
		cmocka_unit_test(test_write_adds),
		cmocka_unit_test(test_write_full_nonblocking),
		cmocka_unit_test(test_write_full_blocking_is_cut),
		cmocka_unit_test(test_signal_before_the_write),
		cmocka_unit_test(test_cuts_in_many_threads),
		cmocka_unit_test(test_race_with_toggling_holder),
		cmocka_unit_test(test_cut_in_forked_child),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
