/* Races (also run under ThreadSanitizer): HMM-19 munmap during a device read, CPU
 * writes racing migrations to the device (the CPU wins, no write is lost), and several
 * threads faulting the same device-resident pages back at once. */
#include <pthread.h>
#include <time.h>

#include "tdev.h"

#define SZ	(NPAGES * PG)

struct unmapper {
	char *addr;
	size_t len;
	unsigned int delay_us;
};

static void *unmap_thread(void *arg)
{
	struct unmapper *u = arg;

	if (u->delay_us)
		usleep(u->delay_us);
	munmap(u->addr, u->len);
	return NULL;
}

/* HMM-19: a device read of a buffer whose second half is unmapped meanwhile either
 * fails cleanly or returns the right data; never hangs, never reads freed memory. */
static void test_teardown(void **state)
{
	struct hmm_mm *mm = tmm_new(HMM_BACKEND_UFFD_THREAD, 0);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	int *mirror = malloc(SZ);
	unsigned int seed = 1, ok = 0, failed = 0;

	(void)state;
	d->safe_dma = true;
	for (int round = 0; round < 12; round++) {
		char *p = tbuf_new(SZ, false);
		/* 0-32 us as in hmm-tests.c */
		struct unmapper u = { p + SZ / 2, SZ / 2, (unsigned int)rand_r(&seed) % 33 };
		pthread_t t;
		size_t cpages;
		int ret;

		fill_ints(p, SZ, round);
		assert_int_equal(hmm_region_add(mm, p, SZ), 0);
		if (round < 10) {
			assert_int_equal(pthread_create(&t, NULL, unmap_thread, &u), 0);
			ret = tdev_read(d, p, NPAGES, mirror, &cpages);
		} else {
			/* the unmap comes after the read: the success path is checked too */
			ret = tdev_read(d, p, NPAGES, mirror, &cpages);
			assert_int_equal(pthread_create(&t, NULL, unmap_thread, &u), 0);
		}
		pthread_join(t, NULL);
		if (ret) {
			failed++;
		} else {
			assert_int_equal(cpages, NPAGES);
			check_ints(mirror, SZ, round);
			ok++;
		}
		hmm_mm_sync_events(mm);
		check_ints(p, SZ / 2, round);
		assert_int_equal(hmm_region_remove(mm, p), 0);
		munmap(p, SZ / 2);
	}
	print_message("teardown: %u reads completed, %u failed cleanly\n", ok, failed);
	assert_int_equal(ok + failed, 12);
	assert_true(ok >= 2);
	free(mirror);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

struct writer {
	volatile int *pages;
	size_t npages;
	int iterations;
	atomic_bool done;
};

static void *writer_thread(void *arg)
{
	struct writer *w = arg;

	for (int it = 0; it < w->iterations; it++) {
		for (size_t i = 0; i < w->npages; i++)
			__atomic_fetch_add(&w->pages[i * PG / sizeof(int)], 1, __ATOMIC_RELAXED);
	}
	atomic_store(&w->done, true);
	return NULL;
}

/* CPU writes race migrations: every write lands, whatever wins each page. */
static void test_cpu_wins(void **state)
{
	struct hmm_mm *mm = tmm_new(HMM_BACKEND_UFFD_THREAD, 0);
	struct tdev *d = tdev_new(mm, 4 * M2, NULL);
	char *p = tbuf_new(M2, false);
	struct writer w = { (volatile int *)p, M2 / PG, 40 };
	struct hmm_mm_stats st;
	pthread_t t;
	unsigned int rounds = 0;
	size_t migrated = 0, won = 0;

	(void)state;
	memset(p, 0, M2);
	assert_int_equal(hmm_region_add(mm, p, M2), 0);
	assert_int_equal(pthread_create(&t, NULL, writer_thread, &w), 0);
	while (!atomic_load(&w.done) || rounds < 3) {
		struct hmm_migrate_result res;

		assert_int_equal(hmm_migrate_to_device(mm, d->dm, p, M2, &res), 0);
		assert_int_equal(res.migrated + res.cpu_won + res.alloc_failed, res.cpages);
		migrated += res.migrated;
		won += res.cpu_won;
		rounds++;
	}
	pthread_join(t, NULL);
	for (size_t i = 0; i < M2 / PG; i++)
		assert_int_equal(((int *)p)[i * PG / sizeof(int)], w.iterations);
	hmm_mm_get_stats(mm, &st);
	print_message("%u migrations: %zu pages moved, %zu kept by the CPU, %lu CPU faults\n",
		      rounds, migrated, won, (unsigned long)st.cpu_faults);
	/* without a racing CPU everything moves, and the data is intact */
	struct hmm_migrate_result res;

	assert_int_equal(hmm_migrate_to_device(mm, d->dm, p, M2, &res), 0);
	assert_int_equal(res.migrated + (M2 / PG - res.cpages), M2 / PG);
	for (size_t i = 0; i < M2 / PG; i++)
		assert_int_equal(((int *)p)[i * PG / sizeof(int)], w.iterations);
	assert_int_equal(hmm_region_remove(mm, p), 0);
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	munmap(p, M2);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

struct reader {
	const int *p;
	size_t bytes;
	int bias;
	bool ok;
};

static void *reader_thread(void *arg)
{
	struct reader *r = arg;

	r->ok = true;
	for (size_t i = 0; i < r->bytes / sizeof(int); i++)
		if (__atomic_load_n(&r->p[i], __ATOMIC_RELAXED) != (int)i + r->bias)
			r->ok = false;
	return NULL;
}

/* Four threads fault the same 4 MiB of device pages back, two per half. */
static void test_parallel_fault_back(void **state)
{
	const struct { enum hmm_backend be; uint64_t granule; } variants[] = {
		{ HMM_BACKEND_UFFD_THREAD, 0 }, { HMM_BACKEND_UFFD_THREAD, 64 * 1024 },
		{ HMM_BACKEND_MPROTECT, 0 }, { HMM_BACKEND_MPROTECT, 64 * 1024 },
	};

	(void)state;
	for (size_t v = 0; v < VGPU_ARRAY_SIZE(variants); v++) {
		struct hmm_mm *mm = tmm_new(variants[v].be, variants[v].granule);
		struct tdev *d = tdev_new(mm, 4 * M2, NULL);
		char *p = tbuf_new(SZ, false);
		struct reader r[4];
		pthread_t t[4];
		struct hmm_migrate_result res;
		struct hmm_mm_stats st;

		fill_ints(p, SZ, 3);
		assert_int_equal(hmm_region_add(mm, p, SZ), 0);
		assert_int_equal(hmm_migrate_to_device(mm, d->dm, p, SZ, &res), 0);
		assert_int_equal(res.migrated, NPAGES);
		for (int i = 0; i < 4; i++) {
			size_t half = (size_t)(i / 2) * (SZ / 2);

			r[i] = (struct reader){ (const int *)(p + half), SZ / 2,
						3 + (int)(half / sizeof(int)), false };
			assert_int_equal(pthread_create(&t[i], NULL, reader_thread, &r[i]), 0);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
			assert_true(r[i].ok);
		}
		hmm_mm_get_stats(mm, &st);
		assert_int_equal(st.cpu_fault_pages, NPAGES);	/* each page came back once */
		assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
		assert_int_equal(hmm_region_remove(mm, p), 0);
		munmap(p, SZ);
		tdev_free(d);
		hmm_mm_destroy(mm);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		{ "HMM-19 teardown race", test_teardown, NULL, NULL, NULL },
		{ "CPU wins against migrations", test_cpu_wins, NULL, NULL, NULL },
		{ "parallel fault back (4K, 64K)", test_parallel_fault_back, NULL, NULL, NULL },
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
