// SPDX-License-Identifier: MIT
/* A channel that caught up after work keeps its turn a while (gpu_config.linger_ns) and
 * runs a submission whose GP_PUT moves meanwhile, doorbell or not; any news for the engine
 * ends the wait at once: another function's token, a stop. Its own token, which comes
 * after the work it announced already ran, is neither news nor counted spurious. With
 * GPU_LINGER_NONE a turn ends as soon as the channel caught up. The waits here are an hour
 * long and the periodic scan never comes: only the behaviour under test can end them. */
#include "gpu_test.h"

#define HOUR (3600 * VGPU_NSEC_PER_SEC)

struct lctx {
	struct tgpu *t;
	struct tchan a, b;		/* function 1 channel 2, function 2 channel 5 */
	uint32_t *sem_a, *sem_b;
	uint64_t va_a, va_b;
};

/* Until the engine sleeps: it has taken every poke the set-up gave it, so none is left to
 * end a wait below. */
static void wait_asleep(struct lctx *l)
{
	struct vgpu_doorbell_page *db = gpu_doorbell_page(l->t->g, 1);
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (!__atomic_load_n(&db->sleeping, __ATOMIC_ACQUIRE) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_true(__atomic_load_n(&db->sleeping, __ATOMIC_ACQUIRE));
}

static struct lctx *lctx_new(uint64_t linger_ns)
{
	struct gpu_config cfg = { .nr_vfs = 2, .nr_engines = 1, .scan_period_ns = HOUR,
				  .linger_ns = linger_ns };
	struct gpu_priv_sched_fn s = { .enabled = 1, .quantum_ns = HOUR };
	struct lctx *l = calloc(1, sizeof(*l));

	assert_non_null(l);
	l->t = tgpu_new_cfg(cfg, 32);
	assert_int_equal(gpu_priv_sched_set(l->t->p, GPU_SCHED_BEST_EFFORT, 0, 0), 0);
	for (unsigned int fn = 1; fn <= 2; fn++)
		assert_int_equal(gpu_priv_sched_fn_set(l->t->p, fn, &s), 0);
	tchan_init(l->t, &l->a, 1, 2, 0, 16);
	tchan_init(l->t, &l->b, 2, 5, 0, 16);
	l->va_a = tgpu_vmem(l->t, 1, 4096, VGPU_GMMU_PAGE_4K);
	l->va_b = tgpu_vmem(l->t, 2, 4096, VGPU_GMMU_PAGE_4K);
	l->sem_a = tgpu_va(l->t, 1, l->va_a, 4096);
	l->sem_b = tgpu_va(l->t, 2, l->va_b, 4096);
	wait_asleep(l);
	return l;
}

/* Queue a release of @v to @va on @c and publish GP_PUT, without a doorbell. */
static void publish_release(struct tchan *c, uint64_t va, uint32_t v)
{
	TM(c, VGPU_M_SEM_RELEASE, lo32(va), hi32(va), v, 0, 0);
	tchan_gp(c);
	__atomic_store_n(&c->userd->gp_put, c->put, __ATOMIC_RELEASE);
}

static void ring(struct lctx *l, struct tchan *c)
{
	gpu_doorbell_ring(l->t->g, c->fn, vgpu_token(c->rl, c->chid));
}

static void wait_sem(const uint32_t *sem, uint32_t v)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (__atomic_load_n(sem, __ATOMIC_ACQUIRE) != v && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n(sem, __ATOMIC_ACQUIRE), v);
}

static struct gpu_db_stats db_stats(struct lctx *l, unsigned int fn)
{
	struct gpu_db_stats s;

	gpu_db_stats(l->t->g, fn, &s);
	return s;
}

static void wait_rung(struct lctx *l, unsigned int fn, uint64_t n)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (db_stats(l, fn).rung < n && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_int_equal(db_stats(l, fn).rung, n);
}

/* Counted when the channel's turn reads GP_PUT, after the drain counted the token. */
static void wait_spurious(struct lctx *l, unsigned int fn)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (!db_stats(l, fn).spurious && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
}

static uint64_t lingered(struct lctx *l, unsigned int fn)
{
	struct gpu_sched_stats s;

	gpu_sched_stats(l->t->g, fn, &s);
	return s.lingered;
}

/* The second submission has no doorbell and the scan is an hour away: only the lingering
 * turn can run it. Its late doorbell waits in the ring (the turn looks past its own
 * tokens) until function 2's token ends the wait; then it is judged, and not spurious. */
static void test_linger_runs_next_submission(void **state)
{
	struct lctx *l = lctx_new(HOUR);

	(void)state;
	publish_release(&l->a, l->va_a, 1);
	ring(l, &l->a);
	wait_sem(l->sem_a, 1);
	publish_release(&l->a, l->va_a, 2);
	wait_sem(l->sem_a, 2);
	ring(l, &l->a);
	publish_release(&l->b, l->va_b, 7);
	ring(l, &l->b);
	wait_sem(l->sem_b, 7);
	wait_rung(l, 1, 2);
	assert_int_equal(db_stats(l, 1).accepted, 2);
	assert_int_equal(db_stats(l, 1).spurious, 0);
	assert_int_equal(lingered(l, 1), 1);
	assert_int_equal(tchan_err(&l->a), 0);
	tgpu_free(l->t);	/* function 2's turn lingers now: the stop must end it */
	free(l);
}

/* A doorbell that really brings nothing new is still counted spurious. */
static void test_linger_spurious_still_counted(void **state)
{
	struct lctx *l = lctx_new(HOUR);

	(void)state;
	publish_release(&l->a, l->va_a, 1);
	ring(l, &l->a);
	wait_sem(l->sem_a, 1);
	publish_release(&l->b, l->va_b, 1);
	ring(l, &l->b);			/* ends function 1's wait */
	wait_sem(l->sem_b, 1);
	ring(l, &l->a);			/* nothing new: its own token, but no work behind it */
	publish_release(&l->b, l->va_b, 2);
	ring(l, &l->b);			/* ends function 2's wait, so function 1's token drains */
	wait_sem(l->sem_b, 2);
	wait_rung(l, 1, 2);
	wait_spurious(l, 1);
	assert_int_equal(db_stats(l, 1).spurious, 1);
	assert_int_equal(lingered(l, 1), 0);
	tgpu_free(l->t);
	free(l);
}

/* GPU_LINGER_NONE: the turn ends when the channel caught up, so a GP_PUT without a doorbell
 * waits for one; function 2's work, which its token brings, runs meanwhile. */
static void test_linger_none(void **state)
{
	struct lctx *l = lctx_new(GPU_LINGER_NONE);

	(void)state;
	publish_release(&l->a, l->va_a, 1);
	ring(l, &l->a);
	wait_sem(l->sem_a, 1);
	publish_release(&l->a, l->va_a, 2);
	publish_release(&l->b, l->va_b, 1);
	ring(l, &l->b);
	wait_sem(l->sem_b, 1);
	assert_int_equal(__atomic_load_n(l->sem_a, __ATOMIC_ACQUIRE), 1);
	ring(l, &l->a);
	wait_sem(l->sem_a, 2);
	assert_int_equal(lingered(l, 1), 0);
	assert_int_equal(lingered(l, 2), 0);
	tgpu_free(l->t);
	free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linger_runs_next_submission),
		cmocka_unit_test(test_linger_spurious_still_counted),
		cmocka_unit_test(test_linger_none),
	};

	return cmocka_run_group_tests_name("gpu_linger", tests, NULL, NULL);
}
