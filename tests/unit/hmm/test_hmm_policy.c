// SPDX-License-Identifier: MIT
/* UVM policies: the tree prefetch and the thrashing state machine as tables of cases,
 * then wired into a mirror (HMM-40 thrashing between the CPU and a device, HMM-41
 * prefetch of a streaming device read). Time is a fake clock the tests advance. */
#include "tdev.h"

/* ---- prefetch table ------------------------------------------------------------------- */

struct pf_case {
	const char *name;
	unsigned int res_first, res_n;		/* resident pages */
	unsigned int faults[4], nfaults;
	unsigned int thrash_first, thrash_n;
	bool disable;
	unsigned int want;			/* pages prefetched */
	int want_first;				/* first prefetched page, -1 = none */
};

static const struct pf_case pf_cases[] = {
	{ "one fault, empty block", 0, 0, { 10 }, 1, 0, 0, false, 0, -1 },
	{ "faults 0,1,2: subregion 0-3", 0, 0, { 0, 1, 2 }, 3, 0, 0, false, 1, 3 },
	{ "faults 0-4: subregion 0-7", 0, 0, { 0, 1, 2, 4 }, 4, 0, 0, false, 1, 3 },
	{ "262 of 512 populated: whole block", 0, 261, { 261 }, 1, 0, 0, false, 250, 262 },
	{ "256 of 512: 50% is not above 51%", 0, 255, { 300 }, 1, 0, 0, false, 0, -1 },
	{ "thrashing pages never", 0, 261, { 261 }, 1, 300, 10, false, 240, 262 },
	{ "disabled", 0, 261, { 261 }, 1, 0, 0, true, 0, -1 },
};

static void test_prefetch_table(void **state)
{
	const struct pf_case *c = *state;
	struct hmm_prefetch_params p = HMM_PREFETCH_DEFAULTS;
	uint64_t res[HMM_BLOCK_WORDS] = { 0 }, flt[HMM_BLOCK_WORDS] = { 0 };
	uint64_t thr[HMM_BLOCK_WORDS] = { 0 }, out[HMM_BLOCK_WORDS];

	p.enable = !c->disable;
	cmn_bitmap_set(res, c->res_first, c->res_n);
	cmn_bitmap_set(thr, c->thrash_first, c->thrash_n);
	for (unsigned int i = 0; i < c->nfaults; i++)
		cmn_set_bit(flt, c->faults[i]);
	assert_int_equal(hmm_prefetch_compute(&p, res, flt, thr, out), c->want);
	assert_int_equal(cmn_bitmap_weight(out, 0, HMM_BLOCK_PAGES), c->want);
	if (c->want_first >= 0)
		assert_int_equal(cmn_bitmap_next_set(out, HMM_BLOCK_PAGES, 0), c->want_first);
	for (unsigned int w = 0; w < HMM_BLOCK_WORDS; w++)
		assert_int_equal(out[w] & (res[w] | flt[w] | thr[w]), 0);
}

/* ---- thrashing table ------------------------------------------------------------------ */

struct th_step {
	unsigned int proc;
	uint64_t t_us;
	enum hmm_thrash_hint want;
};

struct th_case {
	const char *name;
	struct th_step steps[16];
	unsigned int nsteps;
	struct hmm_thrash_stats want;
};

#define N HMM_THRASH_NONE
#define TH HMM_THRASH_THROTTLE
#define PN HMM_THRASH_PIN

static const struct th_case th_cases[] = {
	{ "slow ping-pong: no events",
	  { { 0, 0, N }, { 1, 600, N }, { 0, 1200, N }, { 1, 1800, N } }, 4, { 0, 0, 0, 0 } },
	{ "same processor: no events",
	  { { 1, 0, N }, { 1, 10, N }, { 1, 20, N }, { 1, 30, N } }, 4, { 0, 0, 0, 0 } },
	{ "third event throttles",
	  { { 0, 0, N }, { 1, 100, N }, { 0, 200, N }, { 1, 300, TH } }, 4, { 3, 1, 0, 0 } },
	{ "throttle lasts the nap",
	  { { 0, 0, N }, { 1, 100, N }, { 0, 200, N }, { 1, 300, TH }, { 1, 700, TH },
	    { 1, 900, N } }, 6, { 3, 1, 0, 0 } },
	{ "quiet epoch resets",
	  { { 0, 0, N }, { 1, 100, N }, { 0, 200, N }, { 1, 1200000, N }, { 0, 1200100, N } },
	  5, { 3, 0, 0, 0 } },
};

static void test_thrash_table(void **state)
{
	const struct th_case *c = *state;
	struct hmm_thrash_params p = HMM_THRASH_DEFAULTS;
	struct hmm_thrash *t;
	struct hmm_thrash_stats st;

	assert_int_equal(hmm_thrash_create(&p, &t), 0);
	for (unsigned int i = 0; i < c->nsteps; i++) {
		enum hmm_thrash_hint h = hmm_thrash_record(t, 0x1000, c->steps[i].proc,
							   c->steps[i].t_us * 1000);

		if (h != c->steps[i].want)
			fail_msg("step %u: hint %d, want %d", i, h, c->steps[i].want);
	}
	hmm_thrash_get_stats(t, &st);
	assert_int_equal(st.events, c->want.events);
	assert_int_equal(st.throttles, c->want.throttles);
	assert_int_equal(st.pins, c->want.pins);
	hmm_thrash_destroy(t);
}

/* Pinning after 10 throttles, unpinned after 150 ms without events. */
static void test_thrash_pin_unpin(void **state)
{
	struct hmm_thrash_params p = HMM_THRASH_DEFAULTS;
	struct hmm_thrash *t;
	struct hmm_thrash_stats st;
	uint64_t now = 0;
	enum hmm_thrash_hint h = N;

	(void)state;
	assert_int_equal(hmm_thrash_create(&p, &t), 0);
	for (unsigned int i = 0; i < 12; i++) {
		now += 100 * 1000;
		h = hmm_thrash_record(t, 0x5000, i & 1, now);
	}
	hmm_thrash_get_stats(t, &st);
	assert_int_equal(st.events, 11);
	assert_int_equal(st.throttles, 9);
	assert_int_equal(st.pins, 0);
	assert_int_equal(h, TH);
	now += 100 * 1000;
	assert_int_equal(hmm_thrash_record(t, 0x5000, 0, now), PN);
	hmm_thrash_get_stats(t, &st);
	assert_int_equal(st.pins, 1);
	assert_int_equal(hmm_thrash_query(t, 0x5000, now + 149 * 1000 * 1000), PN);
	assert_int_equal(hmm_thrash_query(t, 0x5000, now + 151 * 1000 * 1000), N);
	hmm_thrash_get_stats(t, &st);
	assert_int_equal(st.unpins, 1);
	assert_int_equal(hmm_thrash_query(t, 0x6000, now), N);	/* other pages untouched */
	hmm_thrash_destroy(t);
}

/* ---- HMM-40: a CPU thread and a device alternate writes to one page ------------------- */

static uint64_t fake_now;
static uint64_t fake_clock(void)
{
	return fake_now;
}

static void test_thrash_mirror(void **state)
{
	struct hmm_mirror_opts o = { .prefetch = { .enable = false },
				     .thrash = HMM_THRASH_DEFAULTS, .migrate_on_fault = true };
	struct hmm_uffd_caps caps;
	struct hmm_mm_opts mo = { .clock_ns = fake_clock };
	struct hmm_mm *mm;
	struct tdev *d;
	struct hmm_thrash_stats st;
	volatile int *page;
	int cpu_writes = 0, first_throttle = -1, first_pin = -1;

	(void)state;
	hmm_uffd_probe(&caps);
	if (!caps.available || (!caps.move && !caps.wp) || !caps.events) {
		print_message("skip: %s\n", caps.why);
		skip();
	}
	fake_now = 1000000;
	assert_int_equal(hmm_mm_create(&mo, &mm), 0);
	d = tdev_new(mm, 2 * M2, &o);
	page = tbuf_new(PG, false);
	assert_int_equal(hmm_region_add(mm, (void *)page, PG), 0);
	for (int round = 0; round < 40 && first_pin < 0; round++) {
		struct hmm_dev_fault f = { (uintptr_t)page, true };
		int status;

		fake_now += 100 * 1000;
		assert_int_equal(hmm_mirror_service_faults(&d->mirror, &f, 1, &status), 0);
		hmm_thrash_get_stats(d->mirror.thrash, &st);
		if (st.throttles && first_throttle < 0) {
			first_throttle = round;
			assert_int_equal(st.events, 4);	/* the 3rd and 4th events throttle */
			assert_int_equal(status, -EAGAIN);
		}
		if (st.pins && first_pin < 0) {
			first_pin = round;
			assert_true(st.throttles >= 10);
			/* pinned: mapped remotely, the page stays in system memory */
			assert_int_equal(status, 0);
			assert_int_equal(hmm_mm_page_where(mm, (void *)page, NULL, NULL),
					 HMM_PAGE_SYSTEM);
		}
		fake_now += 100 * 1000;
		page[0]++;			/* the CPU's turn: pulls the page back */
		cpu_writes++;
	}
	assert_int_equal(first_throttle, 2);
	assert_true(first_pin > first_throttle);
	assert_true(d->mirror.stats.throttled > 0);
	assert_true(d->mirror.stats.pinned > 0);
	assert_int_equal(page[0], cpu_writes);
	/* 150 ms without events: unpinned, and the next device fault migrates again */
	fake_now += 151ull * 1000 * 1000;
	assert_int_equal(hmm_thrash_query(d->mirror.thrash, (uintptr_t)page, fake_now), N);
	hmm_thrash_get_stats(d->mirror.thrash, &st);
	assert_int_equal(st.unpins, 1);
	struct hmm_dev_fault f = { (uintptr_t)page, true };
	int status;

	assert_int_equal(hmm_mirror_service_faults(&d->mirror, &f, 1, &status), 0);
	assert_int_equal(status, 0);
	assert_int_equal(hmm_mm_page_where(mm, (void *)page, NULL, NULL), HMM_PAGE_DEVICE);
	assert_int_equal(page[0], cpu_writes);
	assert_int_equal(hmm_region_remove(mm, (void *)page), 0);
	tdev_free(d);
	munmap((void *)page, PG);
	hmm_mm_destroy(mm);
}

/* ---- HMM-41: a streaming 64 MiB device read faults at most 1/16 of its pages ---------- */

static void test_prefetch_stream(void **state)
{
	const size_t len = (size_t)64 * VGPU_MiB;
	struct hmm_mm *mm = tmm_new(HMM_BACKEND_UFFD_THREAD, 0);
	struct tdev *d = tdev_new(mm, 2 * M2, NULL);
	char *buf = tbuf_new(len, false);
	unsigned long faults = 0;
	long sum = 0;

	(void)state;
	for (size_t i = 0; i < len; i += PG)
		buf[i] = (char)(i / PG);
	cmn_mutex_lock(&d->mirror.update);
	for (size_t i = 0; i < len; i += PG) {
		struct tdev_pte *e = tdev_pte(d, (uintptr_t)buf + i, false);
		char v;

		if (!e || !e->pfn) {
			struct hmm_dev_fault f = { (uintptr_t)buf + i, false };
			int status;

			cmn_mutex_unlock(&d->mirror.update);
			assert_int_equal(hmm_mirror_service_faults(&d->mirror, &f, 1, &status), 0);
			assert_int_equal(status, 0);
			faults++;
			cmn_mutex_lock(&d->mirror.update);
			e = tdev_pte(d, (uintptr_t)buf + i, false);
			assert_non_null(e);
		}
		v = *(char *)((e->pfn & HMM_PFN_VALUE_MASK) << HMM_PAGE_SHIFT);
		assert_int_equal(v, (char)(i / PG));
		sum += v;
	}
	cmn_mutex_unlock(&d->mirror.update);
	print_message("streaming read: %lu faults for %zu pages, %lu prefetched\n", faults,
		      (size_t)(len / PG), (unsigned long)d->mirror.stats.prefetched);
	assert_true(faults * 16 <= len / PG);
	assert_int_equal(d->mirror.stats.faults, faults);
	assert_int_equal(d->mirror.stats.pages_mapped, len / PG);
	assert_int_equal(d->mirror.stats.prefetched, len / PG - faults);
	(void)sum;
	munmap(buf, len);
	tdev_free(d);
	hmm_mm_destroy(mm);
}

#define PF(i) { "prefetch: " #i, test_prefetch_table, NULL, NULL, (void *)&pf_cases[i] }
#define TC(i) { "thrashing: " #i, test_thrash_table, NULL, NULL, (void *)&th_cases[i] }

int main(void)
{
	struct CMUnitTest tests[] = {
		PF(0), PF(1), PF(2), PF(3), PF(4), PF(5), PF(6),
		TC(0), TC(1), TC(2), TC(3), TC(4),
		cmocka_unit_test(test_thrash_pin_unpin),
		{ "HMM-40 thrashing CPU vs device", test_thrash_mirror, NULL, NULL, NULL },
		{ "HMM-41 prefetch of a streaming read", test_prefetch_stream, NULL, NULL, NULL },
	};

	/* name the table rows after their cases */
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(pf_cases); i++)
		tests[i].name = pf_cases[i].name;
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(th_cases); i++)
		tests[VGPU_ARRAY_SIZE(pf_cases) + i].name = th_cases[i].name;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
