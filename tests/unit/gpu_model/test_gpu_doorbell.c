// SPDX-License-Identifier: MIT
/* Doorbells: the misuse cases of fault scenario F12 (doc/scenarios.md) each dropped or
 * counted without harm, a doorbell to a non-resident channel never lost, and the
 * spin-then-sleep handshake with its eventfd kick. */
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_test.h"

#define LONG_SCAN (60 * VGPU_NSEC_PER_SEC)	/* the scan must not hide a lost doorbell */

struct dctx {
	struct tgpu *t;
	struct tchan c;			/* function 1, channel 2, runlist 0 */
	uint64_t sem_va;
	uint32_t *sem;
};

/* @poll_ns: the idle engine's look at the privileged region (gpu_config.priv_poll_ns). */
static struct dctx *dctx_new(uint64_t scan_ns, uint64_t poll_ns, bool resident)
{
	struct gpu_config cfg = { .nr_vfs = 2, .nr_engines = 1, .scan_period_ns = scan_ns,
				  .priv_poll_ns = poll_ns };
	struct dctx *d = calloc(1, sizeof(*d));

	d->t = tgpu_new_cfg(cfg, 32);
	tchan_init_flags(d->t, &d->c, 1, 2, 0, 16, 0, resident);
	d->sem_va = tgpu_vmem(d->t, 1, 4096, VGPU_GMMU_PAGE_4K);
	d->sem = tgpu_va(d->t, 1, d->sem_va, 4096);
	return d;
}

static void dctx_free(struct dctx *d)
{
	tgpu_free(d->t);
	free(d);
}

static struct gpu_db_stats stats(struct dctx *d, unsigned int fn)
{
	return tgpu_db_stats(d->t, fn);
}

/* Wait until @fn's doorbell counters say @n tokens were consumed. */
static void wait_rung(struct dctx *d, unsigned int fn, uint64_t n)
{
	assert_true(tgpu_wait_db(d->t, fn, TGPU_DB(rung), n) >= n);
}

/* Queue a semaphore release of @v (GP entry written, GP_PUT not yet published). */
static void queue_release(struct dctx *d, uint32_t v)
{
	TM(&d->c, VGPU_M_SEM_RELEASE, lo32(d->sem_va), hi32(d->sem_va), v, 0, 0);
	tchan_gp(&d->c);
}

static uint32_t sem(struct dctx *d)
{
	return __atomic_load_n(d->sem, __ATOMIC_ACQUIRE);
}

/* Another function's token written to this function's doorbell names nothing here. */
static void case_foreign_token(struct dctx *d)
{
	struct tchan other;

	tchan_init(d->t, &other, 2, 7, 0, 16);
	TM(&other, VGPU_M_NOP);
	tchan_gp(&other);
	__atomic_store_n(&other.userd->gp_put, other.put, __ATOMIC_RELEASE);
	gpu_doorbell_ring(d->t->g, 1, vgpu_token(0, 7));	/* fn 1 has no channel 7 */
	wait_rung(d, 1, 1);
	assert_int_equal(stats(d, 1).invalid, 1);
	cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(tchan_get(&other), 0);		/* the owner's channel did not run */
	assert_int_equal(stats(d, 2).rung, 0);
	gpu_doorbell_ring(d->t->g, 2, vgpu_token(0, 7));	/* its own doorbell works */
	assert_int_equal(tchan_wait(&other), 0);
}

static void case_stale_token(struct dctx *d)
{
	assert_int_equal(gpu_priv_chan_free(d->t->p, 1, 2), 0);
	queue_release(d, 1);
	tchan_kick(d->t, &d->c);
	wait_rung(d, 1, 1);
	assert_int_equal(stats(d, 1).invalid, 1);
	assert_int_equal(stats(d, 1).accepted, 0);
	/* Wrong runlist and out-of-range ids are invalid too. */
	gpu_doorbell_ring(d->t->g, 1, vgpu_token(3, 2));
	gpu_doorbell_ring(d->t->g, 1, vgpu_token(0, 999));
	wait_rung(d, 1, 3);
	assert_int_equal(stats(d, 1).invalid, 3);
	assert_int_equal(sem(d), 0);
}

static void case_disabled_channel(struct dctx *d)
{
	assert_int_equal(gpu_priv_chan_enable(d->t->p, 1, 2, false), 0);
	queue_release(d, 5);
	tchan_kick(d->t, &d->c);
	wait_rung(d, 1, 1);
	assert_int_equal(stats(d, 1).disabled, 1);
	cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(sem(d), 0);
	assert_int_equal(gpu_priv_chan_enable(d->t->p, 1, 2, true), 0);
	tchan_kick(d->t, &d->c);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 5);
}

static void case_put_unchanged(struct dctx *d)
{
	queue_release(d, 1);
	tchan_kick(d->t, &d->c);
	assert_int_equal(tchan_wait(&d->c), 0);
	tchan_kick(d->t, &d->c);			/* nothing new */
	wait_rung(d, 1, 2);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(tgpu_wait_db(d->t, 1, TGPU_DB(spurious), 1), 1);
	assert_int_equal(tchan_err(&d->c), 0);
}

static void wait_counter(struct dctx *d, size_t off, uint64_t want)
{
	assert_int_equal(tgpu_wait_db(d->t, 1, off, want), want);
}

static void case_put_beyond_ring(struct dctx *d)
{
	queue_release(d, 9);
	__atomic_store_n(&d->c.userd->gp_put, 16 + 3, __ATOMIC_RELEASE);
	gpu_doorbell_ring(d->t->g, 1, vgpu_token(0, 2));
	wait_counter(d, TGPU_DB(bad_put), 1);
	assert_int_equal(sem(d), 0);
	assert_int_equal(tchan_err(&d->c), 0);		/* ignored, channel unharmed */
	tchan_kick(d->t, &d->c);			/* a correct GP_PUT still works */
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 9);
}

static void case_put_backwards(struct dctx *d)
{
	uint64_t gate = d->sem_va + 64;
	uint32_t *gate_p = d->sem + 16;

	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	/* Entry 0 marks that it started (so GP_PUT 4 was read), then blocks on a gate, so
	 * entries 1..3 stay pending while we misbehave. */
	TM(&d->c, VGPU_M_SEM_RELEASE, lo32(gate + 4), hi32(gate), 1, 0, 0);
	TM(&d->c, VGPU_M_SEM_ACQUIRE, lo32(gate), hi32(gate), 1, 0, 0, 5000000);
	tchan_gp(&d->c);
	queue_release(d, 1);
	queue_release(d, 2);
	queue_release(d, 3);
	tchan_kick(d->t, &d->c);
	while (!__atomic_load_n(gate_p + 1, __ATOMIC_ACQUIRE) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n(gate_p + 1, __ATOMIC_ACQUIRE), 1);
	__atomic_store_n(&d->c.userd->gp_put, 2, __ATOMIC_RELEASE);
	gpu_doorbell_ring(d->t->g, 1, vgpu_token(0, 2));
	wait_counter(d, TGPU_DB(backwards), 1);
	__atomic_store_n(&d->c.userd->gp_put, 4, __ATOMIC_RELEASE);
	__atomic_store_n(gate_p, 1, __ATOMIC_RELEASE);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 3);			/* all four ran: the backwards PUT was ignored */
}

/* Rung while not resident: counted, kept pending, run once it becomes resident. */
static void case_non_resident(struct dctx *d)
{
	queue_release(d, 77);
	tchan_kick(d->t, &d->c);
	wait_rung(d, 1, 1);
	assert_int_equal(stats(d, 1).non_resident, 1);
	cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(sem(d), 0);
	assert_int_equal(gpu_priv_runlist_set(d->t->p, 1, 0, VGPU_BIT(2)), 0);
	assert_int_equal(tchan_wait(&d->c), 0);		/* no second doorbell needed */
	assert_int_equal(sem(d), 77);
}

/* GP_PUT advanced with no doorbell at all: the periodic scan finds it. */
static void case_missed_doorbell_scan(struct dctx *d)
{
	queue_release(d, 4);
	__atomic_store_n(&d->c.userd->gp_put, d->c.put, __ATOMIC_RELEASE);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 4);
	assert_true(stats(d, 1).scan_found >= 1);
}

/* A producer that claimed a slot and died does not block later doorbells for long. */
static void case_abandoned_slot(struct dctx *d)
{
	struct vgpu_doorbell_page *db = gpu_doorbell_page(d->t->g, 1);

	__atomic_fetch_add(&db->head, 1, __ATOMIC_SEQ_CST);
	queue_release(d, 6);
	tchan_kick(d->t, &d->c);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 6);
}

/* A producer that claimed a slot and stalled past the skip (a submitter preempted between
 * its claim and its store) still has its token taken when it writes it at last: the work it
 * announced runs without the scan. */
static void case_late_slot(struct dctx *d)
{
	struct vgpu_doorbell_page *db = gpu_doorbell_page(d->t->g, 1);
	uint32_t idx = __atomic_fetch_add(&db->head, 1, __ATOMIC_SEQ_CST);
	uint64_t one = 1;

	queue_release(d, 6);
	tchan_kick(d->t, &d->c);	/* behind the claimed slot: taken once that is skipped */
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 6);
	wait_rung(d, 1, 1);
	queue_release(d, 7);
	__atomic_store_n(&d->c.userd->gp_put, d->c.put, __ATOMIC_RELEASE);
	__atomic_store_n(&db->slots[idx % VGPU_DB_SLOTS], vgpu_token(d->c.rl, d->c.chid) |
			 VGPU_DB_SLOT_FULL, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&db->sleeping, __ATOMIC_SEQ_CST))
		assert_int_equal(write(gpu_doorbell_kick_fd(d->t->g, 1), &one, 8), 8);
	wait_rung(d, 1, 2);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 7);
	assert_int_equal(stats(d, 1).scan_found, 0);
	queue_release(d, 8);				/* the ring goes on as before */
	tchan_kick(d->t, &d->c);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 8);
	wait_rung(d, 1, 3);
}

/* An idle engine sleeps after spinning; a doorbell then kicks its eventfd. Neither the scan
 * nor the engine's look at the privileged region comes within the test, and the function
 * gives its slice away when idle: a sleeping engine only runs the work if the kick wakes
 * it. Each round waits until the engine sleeps again. */
static void case_sleep_and_kick(struct dctx *d)
{
	struct vgpu_doorbell_page *db = gpu_doorbell_page(d->t->g, 1);

	for (uint32_t i = 1; i <= 20; i++) {
		while (!__atomic_load_n(&db->sleeping, __ATOMIC_SEQ_CST))
			cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
		queue_release(d, i);
		tchan_kick(d->t, &d->c);
		assert_int_equal(tchan_wait(&d->c), 0);
		assert_int_equal(sem(d), i);
	}
}

/* Function 1's doorbell page re-backed by a page of another object (as vgpud does with the
 * VF's BAR2): a producer that maps only that object rings the device; bad arguments change
 * nothing; restoring the default page keeps doorbells working. */
static void case_page_back(struct dctx *d)
{
	int fd = memfd_create("t-bar", MFD_CLOEXEC);
	struct vgpu_doorbell_page *bar_db;
	uint64_t one = 1;
	uint8_t *p;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4 * 4096), 0);
	p = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 0xa5, 4 * 4096);	/* whatever a guest left there */
	assert_int_equal(gpu_doorbell_page_back(d->t->g, 99, fd, 8192), -EINVAL);
	assert_int_equal(gpu_doorbell_page_back(d->t->g, 1, fd, 100), -EINVAL);
	assert_int_equal(gpu_doorbell_page_back(d->t->g, 1, 1000, 8192), -EBADF);
	queue_release(d, 1);
	tchan_kick(d->t, &d->c);	/* the default page still works */
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 1);
	assert_int_equal(gpu_doorbell_page_back(d->t->g, 1, fd, 8192), 0);
	bar_db = (struct vgpu_doorbell_page *)(p + 8192);
	assert_true(gpu_doorbell_page(d->t->g, 1)->head == 0 && bar_db->head == 0);
	assert_int_equal(bar_db->tail, 0);
	assert_int_equal(bar_db->slots[7], 0);
	for (uint32_t i = 2; i <= 6; i++) {
		queue_release(d, i);
		__atomic_store_n(&d->c.userd->gp_put, d->c.put, __ATOMIC_RELEASE);
		if (vgpu_doorbell_write(bar_db, vgpu_token(d->c.rl, d->c.chid)))
			assert_int_equal(write(gpu_doorbell_kick_fd(d->t->g, 1), &one, 8), 8);
		assert_int_equal(tchan_wait(&d->c), 0);
		assert_int_equal(sem(d), i);
	}
	assert_true(stats(d, 1).accepted >= 6);
	assert_int_equal(stats(d, 1).scan_found, 0);
	assert_int_equal(gpu_doorbell_page_back(d->t->g, 1, -1, 0), 0);
	queue_release(d, 7);
	tchan_kick(d->t, &d->c);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 7);
	assert_int_equal(bar_db->head, 5);	/* the old page is the object's again, untouched */
	munmap(p, 4 * 4096);
	close(fd);
}

/* Quiesce: returns once no engine runs the channel (at once for one that finished its
 * work); bad ids are refused. */
static void case_quiesce(struct dctx *d)
{
	queue_release(d, 9);
	tchan_kick(d->t, &d->c);
	assert_int_equal(gpu_chan_quiesce(d->t->g, 1, d->c.chid, VGPU_NSEC_PER_SEC), 0);
	assert_int_equal(tchan_wait(&d->c), 0);
	assert_int_equal(sem(d), 9);
	assert_int_equal(gpu_chan_quiesce(d->t->g, 1, d->c.chid, VGPU_NSEC_PER_SEC), 0);
	assert_int_equal(gpu_chan_quiesce(d->t->g, 99, 0, VGPU_NSEC_PER_SEC), -EINVAL);
	assert_int_equal(gpu_chan_quiesce(d->t->g, 1, GPU_FN_MAX_CHANNELS, VGPU_NSEC_PER_SEC),
			 -EINVAL);
}

/* Many threads ringing at once through one doorbell page: nothing lost. */
struct storm_arg {
	struct dctx *d;
	struct tchan *c;
	int failures;		/* cmocka asserts belong to the main thread */
};

static void *storm_thread(void *arg)
{
	struct storm_arg *a = arg;
	uint64_t sem_va = a->d->sem_va + 128 + a->c->chid * 8;

	for (uint32_t i = 1; i <= 300; i++) {
		TM(a->c, VGPU_M_SEM_RELEASE, lo32(sem_va), hi32(sem_va), i, 0, 0);
		tchan_gp(a->c);
		tchan_kick(a->d->t, a->c);
		if (i % 8 == 0 && tchan_wait(a->c))
			a->failures++;
	}
	return NULL;
}

static void case_storm(struct dctx *d)
{
	struct tchan cs[3];
	struct storm_arg a[3];
	pthread_t th[3];
	uint64_t mask = 0;

	for (int i = 0; i < 3; i++) {
		tchan_init(d->t, &cs[i], 1, 10 + i, 0, 64);
		mask |= VGPU_BIT(10 + i);
	}
	for (int i = 0; i < 3; i++) {
		a[i] = (struct storm_arg){ d, &cs[i], 0 };
		pthread_create(&th[i], NULL, storm_thread, &a[i]);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(a[i].failures, 0);
		assert_int_equal(tchan_wait(&cs[i]), 0);
		assert_int_equal(d->sem[32 + (10 + i) * 2], 300);
	}
	assert_int_equal(stats(d, 1).invalid + stats(d, 1).disabled, 0);
}

static const struct db_case {
	const char *name;
	void (*fn)(struct dctx *d);
	uint64_t scan_ns;
	uint64_t poll_ns;		/* gpu_config.priv_poll_ns */
	bool resident;
} db_cases[] = {
	{ "foreign function's token",	case_foreign_token, LONG_SCAN, 0, true },
	{ "stale token after free",	case_stale_token, LONG_SCAN, 0, true },
	{ "token for disabled channel",	case_disabled_channel, LONG_SCAN, 0, true },
	{ "GP_PUT unchanged",		case_put_unchanged, LONG_SCAN, 0, true },
	{ "GP_PUT beyond the ring",	case_put_beyond_ring, LONG_SCAN, 0, true },
	{ "GP_PUT moving backwards",	case_put_backwards, LONG_SCAN, 0, true },
	{ "non-resident channel",	case_non_resident, LONG_SCAN, 0, false },
	{ "no doorbell: scan finds it",	case_missed_doorbell_scan, 0, 0, true },
	{ "abandoned doorbell slot",	case_abandoned_slot, LONG_SCAN, 0, true },
	{ "slot written after its skip", case_late_slot, LONG_SCAN, 0, true },
	{ "engine sleeps, kick wakes",	case_sleep_and_kick, LONG_SCAN, LONG_SCAN, true },
	{ "three submitters at once",	case_storm, LONG_SCAN, 0, true },
	{ "page backed by another object", case_page_back, LONG_SCAN, 0, true },
	{ "quiesce a channel",		case_quiesce, LONG_SCAN, 0, true },
};

/* The engine clock of test_overrun_scans_limited(): it stands where the test puts it. */
static uint64_t still_clock(void *arg)
{
	return __atomic_load_n((uint64_t *)arg, __ATOMIC_ACQUIRE);
}

/* Lap function 1's ring (the guest writes head at will) and wait for the drain to see it. */
static void lap_ring(struct tgpu *t)
{
	struct vgpu_doorbell_page *db = gpu_doorbell_page(t->g, 1);
	uint64_t before = tgpu_db_stats(t, 1).overruns, one = 1;

	__atomic_fetch_add(&db->head, VGPU_DB_SLOTS + 1, __ATOMIC_SEQ_CST);
	assert_int_equal(write(gpu_doorbell_kick_fd(t->g, 1), &one, sizeof(one)), sizeof(one));
	assert_true(tgpu_wait_db(t, 1, TGPU_DB(overruns), before + 1) > before);
}

/* A guest lapping its own doorbell ring again and again brings the engines' GP_PUT scans
 * (every function's channels, under the model lock) forward once per scan period, not once
 * per lap: ten laps at one engine time, one; a period later, one more. */
static void test_overrun_scans_limited(void **state)
{
	uint64_t *clock = calloc(1, sizeof(*clock));
	struct gpu_config cfg = { .nr_vfs = 1, .nr_engines = 1,
				  .scan_period_ns = 5 * VGPU_NSEC_PER_MSEC,
				  .clock_ns = still_clock, .clock_arg = clock };
	struct tgpu *t;

	(void)state;
	assert_non_null(clock);
	*clock = VGPU_NSEC_PER_SEC;
	t = tgpu_new_cfg(cfg, 16);
	for (int lap = 0; lap < 10; lap++)
		lap_ring(t);
	assert_int_equal(tgpu_db_stats(t, 1).overrun_scans, 1);
	__atomic_store_n(clock, VGPU_NSEC_PER_SEC + 5 * VGPU_NSEC_PER_MSEC, __ATOMIC_RELEASE);
	lap_ring(t);
	lap_ring(t);
	assert_int_equal(tgpu_db_stats(t, 1).overrun_scans, 2);
	tgpu_free(t);
	free(clock);
}

static void test_db_case(void **state)
{
	const struct db_case *c = *state;
	struct dctx *d = dctx_new(c->scan_ns, c->poll_ns, c->resident);

	c->fn(d);
	dctx_free(d);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(db_cases) + 1];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(db_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = db_cases[i].name,
						  .test_func = test_db_case,
						  .initial_state = (void *)&db_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_overrun_scans_limited);
	return _cmocka_run_group_tests("gpu_doorbell", tests, n, NULL, NULL);
}
