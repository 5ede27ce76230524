// SPDX-License-Identifier: MIT
/* Guarded shared mappings: a file another descriptor shrinks under a guarded mapping is
 * grown back on the faulting access, which reads zeros, counts a hit and wakes the eventfd;
 * past the repair budget a faulting page becomes private; a guard from many threads at once;
 * a SIGBUS outside any guard (or after its removal) still ends the process. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/mapguard.h"

#define SIZE	(64u << 10)
#define TAG	7u

struct obj {
	int fd;
	volatile uint8_t *map;
	int id;
};

static int efd = -1;

static int setup(void **state)
{
	(void)state;
	efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return efd < 0 ? -1 : 0;
}

/* A SIZE-byte shared file filled with 0xa5, mapped; guarded unless @guard is false. The
 * handler goes in again: cmocka puts its own in place for every test. */
static void obj_new(struct obj *o, bool guard)
{
	assert_int_equal(cmn_mapguard_init(efd), 0);
	o->fd = memfd_create("mapguard-test", MFD_CLOEXEC);
	assert_true(o->fd >= 0);
	assert_int_equal(ftruncate(o->fd, SIZE), 0);
	o->map = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, o->fd, 0);
	assert_true(o->map != MAP_FAILED);
	memset((void *)o->map, 0xa5, SIZE);
	o->id = guard ? cmn_mapguard_add((void *)o->map, SIZE, o->fd, SIZE, TAG) : -1;
	if (guard)
		assert_true(o->id >= 0);
}

static void obj_free(struct obj *o)
{
	cmn_mapguard_del(o->id);
	munmap((void *)o->map, SIZE);
	close(o->fd);
}

static uint64_t file_size(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return (uint64_t)st.st_size;
}

static uint64_t wakeups(void)
{
	uint64_t n = 0;

	return read(efd, &n, sizeof(n)) == sizeof(n) ? n : 0;
}

/* Shrunk to 0 by another descriptor: the access reads zeros, the file is whole again. */
static void test_repair(void **state)
{
	struct obj o;
	uint8_t b = 0;

	(void)state;
	obj_new(&o, true);
	assert_int_equal(ftruncate(o.fd, 0), 0);
	assert_int_equal(o.map[8192], 0);
	assert_int_equal(file_size(o.fd), SIZE);
	assert_int_equal(cmn_mapguard_take(TAG), 1);
	assert_int_equal(wakeups(), 1);
	/* Shared again: a write lands in the file. */
	o.map[100] = 0x3c;
	assert_int_equal(pread(o.fd, &b, 1, 100), 1);
	assert_int_equal(b, 0x3c);
	obj_free(&o);
}

/* Shrunk again before every access: past the budget the faulting page is a private zero
 * page, so each access completes; the file no longer sees writes to that page. */
static void test_budget(void **state)
{
	unsigned int n = CMN_MAPGUARD_REPAIRS + 3;
	struct obj o;

	(void)state;
	obj_new(&o, true);
	for (unsigned int i = 0; i < n; i++) {
		assert_int_equal(ftruncate(o.fd, 0), 0);
		assert_int_equal(o.map[4096 * (i % 16)], 0);
	}
	assert_int_equal(cmn_mapguard_take(TAG), n);
	assert_int_equal(wakeups(), n);
	/* The file stays shrunk; the page the last access faulted on is private memory. */
	assert_int_equal(file_size(o.fd), 0);
	o.map[4096 * ((n - 1) % 16)] = 0x77;
	assert_int_equal(o.map[4096 * ((n - 1) % 16)], 0x77);
	obj_free(&o);
}

#define NR_THREADS	4

static void *reader(void *arg)
{
	struct obj *o = arg;
	unsigned int sum = 0;

	for (unsigned int i = 0; i < SIZE; i += 4096)
		sum += o->map[i];
	return (void *)(uintptr_t)sum;
}

/* Threads fault in the same guarded mapping at once: every one completes. */
static void test_threads(void **state)
{
	pthread_t t[NR_THREADS];
	struct obj o;

	(void)state;
	obj_new(&o, true);
	assert_int_equal(ftruncate(o.fd, 0), 0);
	for (unsigned int i = 0; i < NR_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, reader, &o), 0);
	for (unsigned int i = 0; i < NR_THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_true(cmn_mapguard_take(TAG) >= 1);
	wakeups();
	obj_free(&o);
}

/* In a child: a SIGBUS in @o's mapping after it was shrunk must end the child. */
static void dies_on_access(bool guard_then_del)
{
	pid_t pid = fork();
	int st = 0;

	assert_true(pid >= 0);
	if (!pid) {
		struct obj o;

		signal(SIGBUS, SIG_DFL);	/* not cmocka's, which would run the suite on here */
		obj_new(&o, guard_then_del);
		if (guard_then_del)
			cmn_mapguard_del(o.id);
		if (ftruncate(o.fd, 0))
			_exit(2);
		(void)o.map[0];
		_exit(0);	/* survived: wrong */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* By the signal, or by a sanitizer's report of it: never a clean exit. */
	assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

static void test_unguarded_dies(void **state)
{
	(void)state;
	dies_on_access(false);
}

static void test_removed_dies(void **state)
{
	(void)state;
	dies_on_access(true);
}

/* Bad arguments change nothing. */
static void test_bad_args(void **state)
{
	char c;

	(void)state;
	assert_int_equal(cmn_mapguard_add(NULL, 1, 0, 1, 0), -EINVAL);
	assert_int_equal(cmn_mapguard_add(&c, 0, 0, 1, 0), -EINVAL);
	assert_int_equal(cmn_mapguard_add(&c, 1, -1, 1, 0), -EINVAL);
	assert_int_equal(cmn_mapguard_add(&c, 1, 0, 1, CMN_MAPGUARD_TAGS), -EINVAL);
	cmn_mapguard_del(-1);
	cmn_mapguard_del((int)CMN_MAPGUARD_SLOTS);
	assert_int_equal(cmn_mapguard_take(CMN_MAPGUARD_TAGS), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_repair),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_unguarded_dies),
		cmocka_unit_test(test_removed_dies),
		cmocka_unit_test(test_bad_args),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
