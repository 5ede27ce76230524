// SPDX-License-Identifier: MIT
/* The contract of each call: argument errors change nothing, hmm_range_fault's flags and
 * errors, sequence-number retry, notifier event and owner filtering, migrate_setup's
 * checks and the pool allocator. */
#include <sys/wait.h>

#include "tdev.h"

/* ---- bad arguments -------------------------------------------------------------------- */

static void test_mm_opts(void **state)
{
	static const struct hmm_mm_opts bad[] = {
		{ .granule = 8192 },
		{ .granule = 1 },
		{ .backend = (enum hmm_backend)7 },
	};
	struct hmm_mm *mm = NULL;

	(void)state;
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad); i++) {
		assert_int_equal(hmm_mm_create(&bad[i], &mm), -EINVAL);
		assert_null(mm);
	}
	assert_int_equal(hmm_mm_create(NULL, NULL), -EINVAL);
}

static void test_region_args(void **state)
{
	struct hmm_mm *mm = tmm_any();
	char *p = tbuf_new(M2, false);
	char *shared = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	(void)state;
	assert_int_equal(hmm_region_add(mm, p + 1, PG), -EINVAL);
	assert_int_equal(hmm_region_add(mm, p, PG + 1), -EINVAL);
	assert_int_equal(hmm_region_add(mm, p, 0), -EINVAL);
	assert_int_equal(hmm_region_add(mm, shared, PG), -EINVAL);
	assert_int_equal(hmm_region_add(mm, p, M2), 0);
	assert_int_equal(hmm_region_add(mm, p + PG, PG), -EEXIST);
	assert_int_equal(hmm_region_remove(mm, p + PG), -ENOENT);
	assert_int_equal(hmm_region_remove(mm, p), 0);
	assert_int_equal(hmm_region_remove(mm, p), -ENOENT);
	munmap(shared, PG);
	munmap(p, M2);
	hmm_mm_destroy(mm);
}

/* ---- hmm_range_fault flags and errors ------------------------------------------------- */

struct rf_case {
	const char *name;
	int prot;			/* of the 4-page buffer; -1 = unmapped */
	bool touch;			/* CPU-write the pages first */
	uint64_t default_flags, mask, in2;	/* in2: input word of page 2 */
	int want;
	uint64_t want_flags[4];		/* flag bits of the output (VALID, WRITE, ZERO, ERROR) */
};

#define V	HMM_PFN_VALID
#define W	HMM_PFN_WRITE
#define Z	HMM_PFN_ZERO
#define E	HMM_PFN_ERROR
#define RF	HMM_PFN_REQ_FAULT
#define RW	HMM_PFN_REQ_WRITE
#define RWX	(PROT_READ | PROT_WRITE)

static const struct rf_case rf_cases[] = {
	{ "snapshot, untouched", RWX, false, 0, 0, 0, 0, { 0, 0, 0, 0 } },
	{ "snapshot, written", RWX, true, 0, 0, 0, 0, { V | W, V | W, V | W, V | W } },
	{ "read fault: zero pages", RWX, false, RF, 0, 0, 0, { V | Z, V | Z, V | Z, V | Z } },
	{ "read all, write page 2", RWX, false, RF, RW, RW, 0, { V | Z, V | Z, V | W, V | Z } },
	{ "write fault", RWX, false, RF | RW, 0, 0, 0, { V | W, V | W, V | W, V | W } },
	{ "write on read-only", PROT_READ, false, RF | RW, 0, 0, -EPERM },
	{ "snapshot, read-only written", PROT_READ, true, 0, 0, 0, 0, { V, V, V, V } },
	{ "fault on PROT_NONE", PROT_NONE, false, RF, 0, 0, -EFAULT },
	{ "snapshot PROT_NONE", PROT_NONE, false, 0, 0, 0, 0, { E, E, E, E } },
	{ "fault on a hole", -1, false, RF, 0, 0, -EFAULT },
	{ "snapshot of a hole", -1, false, 0, 0, 0, 0, { E, E, E, E } },
	{ "one page asks, hole", -1, false, 0, RF, RF, -EFAULT },
};

static void test_range_flags(void **state)
{
	const struct rf_case *c = *state;
	struct hmm_mm *mm = tmm_any();
	struct tdev *d = tdev_new(mm, M2, NULL);
	char *p = tbuf_new(4 * PG, false);
	uint64_t pfns[4] = { 0, 0, c->in2, 0 };
	struct hmm_range r = {
		.notifier = &d->mirror.notifier, .start = (uintptr_t)p,
		.end = (uintptr_t)p + 4 * PG, .hmm_pfns = pfns,
		.default_flags = c->default_flags, .pfn_flags_mask = c->mask,
	};

	if (c->touch)
		memset(p, 7, 4 * PG);
	if (c->prot < 0)
		munmap(p, 4 * PG);
	else
		assert_int_equal(mprotect(p, 4 * PG, c->prot), 0);
	r.notifier_seq = hmm_interval_read_begin(&d->mirror.notifier);
	assert_int_equal(hmm_range_fault(&r), c->want);
	for (int i = 0; !c->want && i < 4; i++) {
		uint64_t got = pfns[i] & (V | W | Z | E), want = c->want_flags[i];

		/* Without the zero page a read fault gives the page a page of its own. */
		if ((want & Z) && !tdev_kernel_zero_page())
			want = (want & ~Z) | (c->prot & PROT_WRITE ? W : 0);
		if (got != want)
			fail_msg("page %d: %#llx, want %#llx", i, (unsigned long long)got,
				 (unsigned long long)want);
		if (got & V)
			assert_int_equal(pfns[i] & HMM_PFN_VALUE_MASK,
					 ((uintptr_t)p >> HMM_PAGE_SHIFT) + i);
	}
	if (c->prot >= 0) {
		mprotect(p, 4 * PG, PROT_READ);
		for (int i = 0; i < 4 * (int)PG; i++)
			assert_int_equal(p[i], c->touch ? 7 : 0);
		munmap(p, 4 * PG);
	}
	tdev_free(d);
	hmm_mm_destroy(mm);
}

static void test_range_args(void **state)
{
	struct hmm_mm *mm = tmm_any();
	struct tdev *d = tdev_new(mm, M2, NULL);
	uint64_t pfns[2];
	struct hmm_range ok = { .notifier = &d->mirror.notifier, .start = 0x10000,
				.end = 0x12000, .hmm_pfns = pfns };
	struct hmm_range r;

	(void)state;
	r = ok; r.end = r.start;
	assert_int_equal(hmm_range_fault(&r), -EINVAL);
	r = ok; r.start += 1;
	assert_int_equal(hmm_range_fault(&r), -EINVAL);
	r = ok; r.hmm_pfns = NULL;
	assert_int_equal(hmm_range_fault(&r), -EINVAL);
	r = ok; r.notifier = NULL;
	assert_int_equal(hmm_range_fault(&r), -EINVAL);
	assert_int_equal(hmm_range_fault(NULL), -EINVAL);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* An invalidation between read_begin and the walk: -EBUSY, and read_retry says so. */
static void test_range_seq_retry(void **state)
{
	struct hmm_mm *mm = tmm_any();
	struct tdev *d = tdev_new(mm, M2, NULL);
	char *p = tbuf_new(PG, false);
	uint64_t pfn;
	struct hmm_range r = { .notifier = &d->mirror.notifier, .start = (uintptr_t)p,
			       .end = (uintptr_t)p + PG, .hmm_pfns = &pfn };
	unsigned long inv;

	(void)state;
	r.notifier_seq = hmm_interval_read_begin(&d->mirror.notifier);
	inv = d->invalidations;
	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_PROTECTION, (uintptr_t)p,
				       (uintptr_t)p + PG), 0);
	assert_int_equal(d->invalidations, inv + 1);
	assert_int_equal(hmm_range_fault(&r), -EBUSY);
	assert_true(hmm_interval_read_retry(&d->mirror.notifier, r.notifier_seq));
	r.notifier_seq = hmm_interval_read_begin(&d->mirror.notifier);
	assert_int_equal(hmm_range_fault(&r), 0);
	assert_false(hmm_interval_read_retry(&d->mirror.notifier, r.notifier_seq));
	munmap(p, PG);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* ---- notifiers: range, event mask, owner ---------------------------------------------- */

struct rec_sub {
	struct hmm_interval_notifier sub;
	unsigned int calls;
	struct hmm_notify_range last;
};

static bool rec_invalidate(struct hmm_interval_notifier *sub, const struct hmm_notify_range *r,
			   uint64_t cur_seq)
{
	struct rec_sub *s = cmn_container_of(sub, struct rec_sub, sub);

	hmm_interval_set_seq(sub, cur_seq);
	s->calls++;
	s->last = *r;
	return true;
}

static const struct hmm_interval_notifier_ops rec_ops = { .invalidate = rec_invalidate };

static void test_notifier_filter(void **state)
{
	struct hmm_mm *mm = tmm_any();
	struct tdev *d = tdev_new(mm, M2, NULL);
	char *p = tbuf_new(4 * PG, false);
	uintptr_t a = (uintptr_t)p;
	struct rec_sub all = { 0 }, unmap_only = { 0 }, own = { 0 }, far = { 0 };
	struct hmm_migrate_result res;

	(void)state;
	unmap_only.sub.events = HMM_EVENT_BIT(HMM_EVENT_UNMAP);
	assert_int_equal(hmm_interval_notifier_insert(&all.sub, mm, a, 4 * PG, NULL, &rec_ops), 0);
	assert_int_equal(hmm_interval_notifier_insert(&unmap_only.sub, mm, a, 4 * PG, NULL,
						      &rec_ops), 0);
	assert_int_equal(hmm_interval_notifier_insert(&own.sub, mm, a, 4 * PG, d, &rec_ops), 0);
	assert_int_equal(hmm_interval_notifier_insert(&far.sub, mm, a + 4 * PG, PG, NULL,
						      &rec_ops), 0);
	assert_int_equal(hmm_interval_notifier_insert(&far.sub, mm, a, 0, NULL, &rec_ops),
			 -EINVAL);

	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_PROTECTION, a, a + PG), 0);
	assert_int_equal(all.calls, 1);
	assert_int_equal(all.last.event, HMM_EVENT_PROTECTION);
	assert_int_equal(all.last.start, a);
	assert_int_equal(all.last.end, a + PG);
	assert_true(all.last.flags & HMM_NOTIFY_BLOCKABLE);
	assert_int_equal(unmap_only.calls, 0);
	assert_int_equal(own.calls, 1);
	assert_int_equal(far.calls, 0);

	/* a migration to d's memory: d's own notifier is skipped */
	memset(p, 1, 4 * PG);
	assert_int_equal(hmm_region_add(mm, p, 4 * PG), 0);
	assert_int_equal(hmm_migrate_to_device(mm, d->dm, p, 4 * PG, &res), 0);
	assert_int_equal(all.calls, 2);
	assert_int_equal(all.last.event, HMM_EVENT_MIGRATE);
	assert_ptr_equal(all.last.owner, d);
	assert_int_equal(own.calls, 1);
	/* the CPU pulls a page back: everybody, owner included, hears it */
	assert_int_equal(p[0], 1);
	assert_int_equal(own.calls, 2);
	assert_int_equal(own.last.event, HMM_EVENT_MIGRATE);
	assert_null(own.last.owner);
	assert_int_equal(unmap_only.calls, 0);
	assert_int_equal(far.calls, 0);

	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_NR, a, a + PG), -EINVAL);
	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_UNMAP, a + PG, a), -EINVAL);
	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_UNMAP, a, a + PG), 0);
	assert_int_equal(unmap_only.calls, 1);

	hmm_interval_notifier_remove(&all.sub);
	hmm_interval_notifier_remove(&unmap_only.sub);
	hmm_interval_notifier_remove(&own.sub);
	hmm_interval_notifier_remove(&far.sub);
	assert_int_equal(hmm_mm_notify(mm, HMM_EVENT_CLEAR, a, a + 4 * PG), 0);
	assert_int_equal(all.calls, 4);		/* removed: no more calls */
	/* CLEAR drops the device copies: the pages read as zero, no device page is left */
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	assert_int_equal(p[PG], 0);
	assert_int_equal(hmm_region_remove(mm, p), 0);
	munmap(p, 4 * PG);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* RELEASE reaches every notifier when the mm goes away. */
static void test_release(void **state)
{
	struct hmm_mm *mm = tmm_any();
	struct rec_sub s = { 0 };

	(void)state;
	assert_int_equal(hmm_interval_notifier_insert(&s.sub, mm, 0x100000, PG, NULL, &rec_ops), 0);
	hmm_mm_destroy(mm);
	assert_int_equal(s.calls, 1);
	assert_int_equal(s.last.event, HMM_EVENT_RELEASE);
}

/* ---- migrate_setup checks ------------------------------------------------------------- */

static void test_migrate_setup_args(void **state)
{
	struct hmm_mm *mm = tmm_any();
	struct tdev *d = tdev_new(mm, M2, NULL);
	char *p = tbuf_new(2 * M2, false);
	static uint64_t src[1024], dst[1024];
	struct hmm_migrate ok = { .mm = mm, .start = (uintptr_t)p, .end = (uintptr_t)p + PG,
				  .src = src, .dst = dst, .devmem = d->dm,
				  .flags = HMM_MIGRATE_SELECT_SYSTEM };
	struct hmm_migrate m;

	(void)state;
	assert_int_equal(hmm_region_add(mm, p, 2 * M2), 0);
	m = ok; m.end = m.start + M2 + PG;		/* more than 512 pages */
	assert_int_equal(hmm_migrate_setup(&m), -EINVAL);
	m = ok; m.start += 8;
	assert_int_equal(hmm_migrate_setup(&m), -EINVAL);
	m = ok; m.flags = HMM_MIGRATE_SELECT_SYSTEM | HMM_MIGRATE_SELECT_DEVICE_PRIVATE;
	assert_int_equal(hmm_migrate_setup(&m), -EINVAL);
	m = ok; m.src = NULL;
	assert_int_equal(hmm_migrate_setup(&m), -EINVAL);
	m = ok; m.devmem = NULL;
	assert_int_equal(hmm_migrate_setup(&m), -EINVAL);
	assert_int_equal(hmm_mm_page_where(mm, p, NULL, NULL), HMM_PAGE_SYSTEM);
	/* a driver that leaves dst empty migrates nothing, and the data stays */
	memset(p, 5, PG);
	m = ok;
	assert_int_equal(hmm_migrate_setup(&m), 0);
	assert_int_equal(m.cpages, 1);
	assert_true(m.src[0] & HMM_MIGRATE_PFN_MIGRATE);
	assert_true(m.src[0] & HMM_MIGRATE_PFN_VALID);
	assert_int_equal(((char *)hmm_migrate_src_ptr(&m, 0))[0], 5);
	hmm_migrate_pages(&m);
	assert_false(m.src[0] & HMM_MIGRATE_PFN_MIGRATE);
	hmm_migrate_finalize(&m);
	assert_int_equal(hmm_mm_page_where(mm, p, NULL, NULL), HMM_PAGE_SYSTEM);
	assert_int_equal(p[0], 5);
	assert_int_equal(hmm_devmem_used_pages(d->dm), 0);
	assert_int_equal(hmm_region_remove(mm, p), 0);
	munmap(p, 2 * M2);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

/* ---- the pool ------------------------------------------------------------------------- */

static void test_devmem(void **state)
{
	struct hmm_devmem_desc bad = { .size = M2 + PG };
	struct hmm_devmem_desc desc = { .owner = &desc, .size = 2 * M2 };
	struct hmm_devmem *dm;
	uint64_t pages[512], one;

	(void)state;
	assert_int_equal(hmm_devmem_create(&bad, &dm), -EINVAL);
	assert_int_equal(hmm_devmem_create(&desc, &dm), 0);
	assert_ptr_equal(hmm_devmem_owner(dm), &desc);
	assert_int_equal(hmm_devmem_alloc(dm, 1, false, &one), 0);
	/* a chunk skips the partly used first 2 MiB and is naturally aligned */
	assert_int_equal(hmm_devmem_alloc(dm, 512, true, pages), 0);
	assert_int_equal(pages[0], 512);
	assert_int_equal(pages[511], 1023);
	assert_int_equal(hmm_devmem_alloc(dm, 512, true, pages), -ENOMEM);
	assert_int_equal(hmm_devmem_used_pages(dm), 513);
	assert_int_equal(hmm_devmem_destroy(dm), -EBUSY);
	hmm_devmem_free(dm, pages, 512);
	hmm_devmem_fail_next_allocs(dm, 1);
	assert_int_equal(hmm_devmem_alloc(dm, 1, false, pages), -ENOMEM);
	assert_int_equal(hmm_devmem_alloc(dm, 1, false, pages), 0);
	assert_int_equal(hmm_devmem_alloc(dm, 1023, false, pages), -ENOMEM);
	assert_int_equal(hmm_devmem_used_pages(dm), 2);
	hmm_devmem_free(dm, pages, 1);
	hmm_devmem_free(dm, &one, 1);
	assert_int_equal(hmm_devmem_destroy(dm), 0);
}

/* ---- capabilities and VGPU_HMM_CAPS ----------------------------------------------------- */

/* In a process started with a malformed VGPU_HMM_CAPS: every mm is refused with -EINVAL
 * and the reason names the bad word. Exit status 0 when so. */
static int caps_child(void)
{
	static const enum hmm_backend backends[] = {
		HMM_BACKEND_UFFD_THREAD, HMM_BACKEND_UFFD_SIGBUS, HMM_BACKEND_MPROTECT,
	};
	struct hmm_uffd_caps caps;
	struct hmm_mm *mm = NULL;

	hmm_uffd_probe(&caps);
	if (!caps.invalid || !strstr(caps.why, "'bogus'"))
		return 1;
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(backends); i++) {
		struct hmm_mm_opts o = { .backend = backends[i] };

		if (hmm_mm_create(&o, &mm) != -EINVAL || mm)
			return 2;
	}
	return 0;
}

/* In a process started with VGPU_HMM_CAPS set empty: nothing is narrowed (as unset).
 * Exit status 0 when so. */
static int caps_empty_child(void)
{
	struct hmm_uffd_caps caps;

	hmm_uffd_probe(&caps);
	return caps.invalid || caps.overridden;
}

/* Run this test binary again as @child_arg with @env only; its exit status. */
static int caps_run_child(const char *child_arg, const char *env)
{
	int status = -1;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = { "test_hmm_api", (char *)child_arg, NULL };
		char *envp[] = { (char *)env, NULL };

		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void test_caps(void **state)
{
	const char *spec = getenv("VGPU_HMM_CAPS");
	struct hmm_uffd_caps caps;

	(void)state;
	hmm_uffd_probe(&caps);
	assert_false(caps.invalid);
	if (spec && (!strcmp(spec, "6.1") || !strcmp(spec, "5.14"))) {
		/* the old kernels' set: no UFFDIO_MOVE, no PROCMAP_QUERY, and everything the
		 * fallbacks need where this kernel has userfaultfd */
		assert_false(caps.move);
		assert_false(caps.procmap_query);
		if (caps.available) {
			assert_true(caps.wp);
			assert_true(caps.events);
		}
	}
	if (spec && !strcmp(spec, "none"))
		assert_false(caps.available);
	assert_int_equal(caps_run_child("--caps-child", "VGPU_HMM_CAPS=move,bogus"), 0);
	assert_int_equal(caps_run_child("--caps-empty-child", "VGPU_HMM_CAPS="), 0);
}

#define RF_CASE(i) { "range_fault", test_range_flags, NULL, NULL, (void *)&rf_cases[i] }

int main(int argc, char **argv)
{
	struct CMUnitTest tests[] = {
		RF_CASE(0), RF_CASE(1), RF_CASE(2), RF_CASE(3), RF_CASE(4), RF_CASE(5),
		RF_CASE(6), RF_CASE(7), RF_CASE(8), RF_CASE(9), RF_CASE(10), RF_CASE(11),
		cmocka_unit_test(test_mm_opts),
		cmocka_unit_test(test_region_args),
		cmocka_unit_test(test_range_args),
		cmocka_unit_test(test_range_seq_retry),
		cmocka_unit_test(test_notifier_filter),
		cmocka_unit_test(test_release),
		cmocka_unit_test(test_migrate_setup_args),
		cmocka_unit_test(test_devmem),
		cmocka_unit_test(test_caps),
	};

	if (argc > 1 && !strcmp(argv[1], "--caps-child"))
		return caps_child();
	if (argc > 1 && !strcmp(argv[1], "--caps-empty-child"))
		return caps_empty_child();

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(rf_cases); i++)
		tests[i].name = rf_cases[i].name;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
