// SPDX-License-Identifier: MIT
/* A channel that caught up after work keeps its turn a while (gpu_config.linger_ns) and
 * runs a submission whose GP_PUT moves meanwhile, doorbell or not; any news for the engine
 * ends the wait at once: another function's token, a stop. Its own token, which comes
 * after the work it announced already ran, is neither news nor counted spurious; a GP_PUT
 * that is misuse ends it; a copy in GP_PUT's line is read with it. With
 * GPU_LINGER_NONE a turn ends as soon as the channel caught up. The waits here are an hour
 * long and the periodic scan never comes: only the behaviour under test can end them. */
#include "gpu_test.h"

#define HOUR (3600 * VGPU_NSEC_PER_SEC)

/* A function's channel and the semaphore its releases go to. */
struct lside {
	struct tchan c;
	uint64_t va;
	uint32_t *sem;
};

struct lctx {
	struct tgpu *t;
	struct lside a, b;		/* function 1 channel 2, function 2 channel 5 */
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

static void lside_init(struct tgpu *t, struct lside *s, unsigned int fn, unsigned int chid)
{
	tchan_init(t, &s->c, fn, chid, 0, 16);
	s->va = tgpu_vmem(t, fn, 4096, VGPU_GMMU_PAGE_4K);
	s->sem = tgpu_va(t, fn, s->va, 4096);
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
	lside_init(l->t, &l->a, 1, 2);
	lside_init(l->t, &l->b, 2, 5);
	wait_asleep(l);
	return l;
}

static void lctx_free(struct lctx *l)
{
	tgpu_free(l->t);
	free(l);
}

/* Queue a release of @v on @s's channel and publish GP_PUT, without a doorbell. */
static void publish(struct lside *s, uint32_t v)
{
	TM(&s->c, VGPU_M_SEM_RELEASE, lo32(s->va), hi32(s->va), v, 0, 0);
	tchan_gp(&s->c);
	__atomic_store_n(&s->c.userd->gp_put, s->c.put, __ATOMIC_RELEASE);
}

static void ring(struct lctx *l, struct lside *s)
{
	gpu_doorbell_ring(l->t->g, s->c.fn, vgpu_token(s->c.rl, s->c.chid));
}

static uint32_t sem(const struct lside *s)
{
	return __atomic_load_n(s->sem, __ATOMIC_ACQUIRE);
}

static void wait_sem(const struct lside *s, uint32_t v)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (sem(s) != v && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_int_equal(sem(s), v);
}

/* A release of @v on @s, its doorbell, and the wait for it. */
static void submit(struct lctx *l, struct lside *s, uint32_t v)
{
	publish(s, v);
	ring(l, s);
	wait_sem(s, v);
}

static uint64_t lingered(struct lctx *l, unsigned int fn)
{
	struct gpu_sched_stats s;

	gpu_sched_stats(l->t->g, fn, &s);
	return s.lingered;
}

/* Until @fn's channels have begun @n waits: the turn that ran the last submission caught
 * up and waits now (nothing else can end an hour's wait here). A submission published
 * before that could still be found by the turn's own look at GP_PUT. */
static void wait_lingering(struct lctx *l, unsigned int fn, uint64_t n)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	struct gpu_sched_stats s;

	for (gpu_sched_stats(l->t->g, fn, &s); s.linger_waits < n && !cmn_deadline_passed(dl);
	     gpu_sched_stats(l->t->g, fn, &s))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_true(s.linger_waits >= n);
}

/* The second submission has no doorbell and the scan is an hour away: only the lingering
 * turn can run it. Its late doorbell waits in the ring (the turn looks past its own
 * tokens) until function 2's token ends the wait; then it is judged, and not spurious. */
static void test_linger_runs_next_submission(void **state)
{
	struct lctx *l = lctx_new(HOUR);

	(void)state;
	submit(l, &l->a, 1);
	wait_lingering(l, 1, 1);
	publish(&l->a, 2);
	wait_sem(&l->a, 2);
	ring(l, &l->a);
	submit(l, &l->b, 7);
	assert_int_equal(tgpu_wait_db(l->t, 1, TGPU_DB(rung), 2), 2);
	assert_int_equal(tgpu_db_stats(l->t, 1).accepted, 2);
	assert_int_equal(tgpu_db_stats(l->t, 1).spurious, 0);
	assert_int_equal(lingered(l, 1), 1);
	assert_int_equal(tchan_err(&l->a.c), 0);
	lctx_free(l);	/* function 2's turn lingers now: the stop must end it */
}

/* A doorbell that really brings nothing new is still counted spurious (when the channel's
 * turn reads GP_PUT, after the drain counted the token). */
static void test_linger_spurious_still_counted(void **state)
{
	struct lctx *l = lctx_new(HOUR);

	(void)state;
	submit(l, &l->a, 1);
	submit(l, &l->b, 1);		/* its token ends function 1's wait */
	ring(l, &l->a);			/* nothing new: its own token, but no work behind it */
	submit(l, &l->b, 2);		/* ends function 2's wait, so function 1's token drains */
	assert_int_equal(tgpu_wait_db(l->t, 1, TGPU_DB(rung), 2), 2);
	assert_int_equal(tgpu_wait_db(l->t, 1, TGPU_DB(spurious), 1), 1);
	assert_int_equal(lingered(l, 1), 0);
	lctx_free(l);
}

/* A GP_PUT beyond the ring while the turn waits is misuse: counted once and ignored, and
 * the wait ends (the engine goes to sleep, the channel keeps working). */
static void test_linger_bad_put_ends_wait(void **state)
{
	struct lctx *l = lctx_new(HOUR);

	(void)state;
	submit(l, &l->a, 1);
	wait_lingering(l, 1, 1);
	__atomic_store_n(&l->a.c.userd->gp_put, 1000, __ATOMIC_RELEASE);
	assert_int_equal(tgpu_wait_db(l->t, 1, TGPU_DB(bad_put), 1), 1);
	wait_asleep(l);
	assert_int_equal(tgpu_db_stats(l->t, 1).bad_put, 1);
	assert_int_equal(lingered(l, 1), 0);
	submit(l, &l->a, 2);
	assert_int_equal(tchan_err(&l->a.c), 0);
	lctx_free(l);
}

/* Publish, without a doorbell, one GP entry of @n dwords whose pushbuffer is not mapped,
 * with USERD's inline copy (ABI 2.6) of @dw: only the copy can run. */
static void publish_copy_dw(struct lside *s, const uint32_t *dw, uint32_t n)
{
	uint64_t e = vgpu_gp_entry(0x7000000000ull, n);

	tchan_inline_copy(&s->c, dw, n, e, vgpu_userd_inl_ctl(s->c.put, n));
	tchan_gp_raw(&s->c, e);
	__atomic_store_n(&s->c.userd->gp_put, s->c.put, __ATOMIC_RELEASE);
}

/* The same with a copy releasing @v on @s. */
static void publish_copy(struct lside *s, uint32_t v)
{
	const uint32_t dw[] = { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(s->va), hi32(s->va), v, 0,
				0 };

	publish_copy_dw(s, dw, 6);
}

/* The waiting turn reads the inline copy with the GP_PUT that announced it and runs it; the
 * copy is used for that entry only: the next one, with no copy, runs from the pushbuffer. */
static void test_linger_runs_inline_copy(void **state)
{
	struct lctx *l = lctx_new(HOUR);

	(void)state;
	submit(l, &l->a, 1);
	wait_lingering(l, 1, 1);
	publish_copy(&l->a, 2);
	wait_sem(&l->a, 2);
	wait_lingering(l, 1, 2);
	__atomic_store_n(&l->a.c.userd->inl_ctl, 0, __ATOMIC_RELEASE);
	publish(&l->a, 3);
	wait_sem(&l->a, 3);
	submit(l, &l->b, 7);	/* ends the turn, which counts what it caught */
	assert_int_equal(lingered(l, 1), 2);
	assert_int_equal(tchan_err(&l->a.c), 0);
	lctx_free(l);
}

/* The copy the wait took serves its own entry only. Its release of 2 comes first, then a
 * long FILL; the next entry (no copy) is published while the FILL runs, so the turn finds
 * it by reading GP_PUT, not by waiting, and must run it from the pushbuffer (releasing 3),
 * not run the copy it took before once more (releasing 2 again). The release is watched
 * without sleeping, so the next entry lands microseconds into a FILL of milliseconds; one
 * that landed after it would be run by the next wait, and the case would prove less, not
 * fail. */
static void test_linger_copy_used_once(void **state)
{
	struct lctx *l = lctx_new(HOUR);
	uint64_t len = 16 * VGPU_MiB, dst = tgpu_vmem(l->t, 1, len, VGPU_GMMU_PAGE_64K);
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	const uint32_t *filled = tgpu_va(l->t, 1, dst, len);
	const uint32_t dw[] = {
		VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(l->a.va), hi32(l->a.va), 2, 0, 0,
		VGPU_MTHD(VGPU_M_FILL, 5), lo32(dst), hi32(dst), lo32(len), hi32(len), 0xa5a5a5a5,
	};

	(void)state;
	submit(l, &l->a, 1);
	wait_lingering(l, 1, 1);
	publish_copy_dw(&l->a, dw, 12);
	while (sem(&l->a) != 2 && !cmn_deadline_passed(dl))
		;
	assert_int_equal(sem(&l->a), 2);
	__atomic_store_n(&l->a.c.userd->inl_ctl, 0, __ATOMIC_RELEASE);
	publish(&l->a, 3);
	wait_sem(&l->a, 3);
	assert_int_equal(filled[0], 0xa5a5a5a5);
	assert_int_equal(filled[len / 4 - 1], 0xa5a5a5a5);
	assert_int_equal(tchan_err(&l->a.c), 0);
	lctx_free(l);
}

/* GPU_LINGER_NONE: the turn ends when the channel caught up, so a GP_PUT without a doorbell
 * waits for one; function 2's work, which its token brings, runs meanwhile. */
static void test_linger_none(void **state)
{
	struct lctx *l = lctx_new(GPU_LINGER_NONE);

	(void)state;
	submit(l, &l->a, 1);
	wait_asleep(l);		/* the turn is over: its own look at GP_PUT cannot find 2 */
	publish(&l->a, 2);
	submit(l, &l->b, 1);
	assert_int_equal(sem(&l->a), 1);
	ring(l, &l->a);
	wait_sem(&l->a, 2);
	assert_int_equal(lingered(l, 1), 0);
	assert_int_equal(lingered(l, 2), 0);
	lctx_free(l);
}

/* Pending bits of channels no engine runs do not keep a caught-up turn from waiting: the
 * token of a channel not on its runlist (its bit stays for when it is), the token of a
 * channel in error, and the bit a restore sets on a channel its owner fenced off. Each
 * submission's turn then begins its wait. */
static void test_linger_past_unrunnable(void **state)
{
	struct lctx *l = lctx_new(0);
	struct tchan off, bad, fenced;
	struct gpu_priv_chan cfg;
	uint64_t rl;

	(void)state;
	tchan_init_flags(l->t, &off, 2, 7, 0, 16, 0, false);
	gpu_doorbell_ring(l->t->g, 2, vgpu_token(0, 7));
	assert_int_equal(tgpu_wait_db(l->t, 2, TGPU_DB(non_resident), 1), 1);
	submit(l, &l->a, 1);
	wait_lingering(l, 1, 1);

	tchan_init(l->t, &bad, 2, 8, 0, 16);
	tchan_gp_raw(&bad, VGPU_GP_RSVD_MASK);
	tchan_kick(l->t, &bad);
	assert_int_equal(tchan_wait(&bad), VGPU_CHAN_ERR_GP_MALFORMED);
	gpu_doorbell_ring(l->t->g, 2, vgpu_token(0, 8));
	assert_int_equal(tgpu_wait_db(l->t, 2, TGPU_DB(accepted), 3), 3);
	submit(l, &l->a, 2);
	wait_lingering(l, 1, 2);

	/* Freed (and seen freed) and restored as the same allocation: the restore marks it
	 * pending, to read its GP_PUT again, but it stays fenced. */
	tchan_init(l->t, &fenced, 2, 9, 0, 16);
	assert_int_equal(gpu_chan_fence(l->t->g, 2, 9), 0);
	cfg = gpu_priv_shared(l->t->p)->fns[2].chans[9];
	rl = gpu_priv_shared(l->t->p)->fns[2].runlist[0];
	assert_int_equal(gpu_priv_chan_free(l->t->p, 2, 9), 0);
	assert_int_equal(gpu_chan_quiesce(l->t->g, 2, 9, T_TIMEOUT), 0);
	cfg.flags = GPU_CHAN_RESTORE;
	assert_int_equal(gpu_priv_chan_alloc(l->t->p, 2, 9, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(l->t->p, 2, 9, true), 0);
	assert_int_equal(gpu_priv_runlist_set(l->t->p, 2, 0, rl), 0);
	submit(l, &l->a, 3);
	wait_lingering(l, 1, 3);
	lctx_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linger_runs_next_submission),
		cmocka_unit_test(test_linger_spurious_still_counted),
		cmocka_unit_test(test_linger_bad_put_ends_wait),
		cmocka_unit_test(test_linger_runs_inline_copy),
		cmocka_unit_test(test_linger_copy_used_once),
		cmocka_unit_test(test_linger_none),
		cmocka_unit_test(test_linger_past_unrunnable),
	};

	return cmocka_run_group_tests_name("gpu_linger", tests, NULL, NULL);
}
