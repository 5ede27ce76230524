// SPDX-License-Identifier: MIT
/* A quiesced channel's runtime for a migration: gpu_chan_mig_save() reads GP_GET, GP_PUT,
 * the error and the method count of an idle or errored channel and refuses one with work
 * pending (a semaphore wait, a GP_PUT not yet consumed, a doorbell); gpu_chan_mig_load()
 * gives them to a new allocation of the channel before it is enabled, so its next work
 * starts after the entries already run (none runs twice) and its counts go on; bad values
 * and an enabled channel are refused. The scheduler counters are set as a whole. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/unit/gpu_model/gpu_test.h"

#define ENTRIES	32u

struct mctx {
	struct tgpu *t;
	struct tchan c;
	uint64_t pa;			/* VF-physical buffer of 64 KiB */
	uint32_t *buf;			/* its CPU view */
};

static struct mctx *mctx_new(void)
{
	struct mctx *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->t = tgpu_new(2, 1, 64);
	tchan_init(m->t, &m->c, 1, 0, 0, ENTRIES);
	m->pa = tgpu_alloc(m->t, 1, 64 << 10);
	tgpu_map(m->t, 1, T_VA_BASE + m->pa, m->pa, 64 << 10, VGPU_GMMU_PAGE_4K, 0);
	m->buf = tgpu_ptr(m->t, 1, m->pa, 64 << 10);
	return m;
}

static void mctx_free(struct mctx *m)
{
	tgpu_free(m->t);
	free(m);
}

/* One GP entry: FILL word @w of the buffer with @v. */
static void fill_word(struct mctx *m, unsigned int w, uint32_t v)
{
	uint64_t va = T_VA_BASE + m->pa + 4ull * w;

	TM(&m->c, VGPU_M_FILL, lo32(va), hi32(va), 4, 0, v);
	tchan_gp(&m->c);
}

static void run(struct mctx *m)
{
	tchan_kick(m->t, &m->c);
	assert_int_equal(tchan_wait(&m->c), 0);
}

/* What a destination does: the channel allocated again (a new allocation, disabled). */
static void realloc_disabled(struct mctx *m)
{
	struct gpu_priv_chan cfg = gpu_priv_shared(m->t->p)->fns[1].chans[0];

	assert_int_equal(gpu_priv_runlist_set(m->t->p, 1, 0, 0), 0);
	assert_int_equal(gpu_priv_chan_free(m->t->p, 1, 0), 0);
	assert_int_equal(gpu_chan_quiesce(m->t->g, 1, 0, T_TIMEOUT), 0);
	cfg.flags = 0;
	assert_int_equal(gpu_priv_chan_alloc(m->t->p, 1, 0, &cfg), 0);
}

static void enable(struct mctx *m)
{
	assert_int_equal(gpu_priv_chan_enable(m->t->p, 1, 0, true), 0);
	assert_int_equal(gpu_priv_runlist_set(m->t->p, 1, 0, 1), 0);
}

/* Three entries run, saved, re-allocated, loaded: the fourth runs alone after them. */
static void test_save_load_continues(void **state)
{
	struct mctx *m = mctx_new();
	struct gpu_chan_mig s, bad;
	struct gpu_chan_status st;

	(void)state;
	for (unsigned int i = 0; i < 3; i++)
		fill_word(m, i, 0x100 + i);
	run(m);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 0, &s), 0);
	assert_int_equal(s.gp_get, 3);
	assert_int_equal(s.gp_put, 3);
	assert_int_equal(s.state, GPU_CHAN_STATE_IDLE);
	assert_int_equal(s.error, VGPU_CHAN_OK);
	assert_int_equal(s.methods, 3);
	/* Markers over what the three entries wrote: a re-run would overwrite them. */
	for (unsigned int i = 0; i < 3; i++)
		m->buf[i] = 0xfeed0000u + i;
	realloc_disabled(m);
	bad = s;
	bad.gp_get = ENTRIES;
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 0, &bad), -EINVAL);
	bad = s;
	bad.error = VGPU_CHAN_ERR_SEM_TIMEOUT;		/* an error on an idle channel */
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 1, &s), -ENOENT);
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 0, &bad), -EINVAL);
	/* An error the device does not know (a stream from elsewhere is not trusted). */
	bad = s;
	bad.state = GPU_CHAN_STATE_ERROR;
	bad.error = VGPU_CHAN_ERR_NR;
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 0, &bad), -EINVAL);
	bad.error = (enum vgpu_chan_error)-1;
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 0, &bad), -EINVAL);
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 64, &s), -EINVAL);
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 0, &s), 0);
	enable(m);
	assert_int_equal(gpu_chan_mig_load(m->t->g, 1, 0, &s), -EBUSY);	/* enabled now */
	fill_word(m, 3, 0x103);
	run(m);
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(m->buf[i], 0xfeed0000u + i);
	assert_int_equal(m->buf[3], 0x103);
	assert_int_equal(gpu_chan_status(m->t->g, 1, 0, &st), 0);
	assert_int_equal(st.gp_get, 4);
	assert_int_equal(st.methods, 4);
	mctx_free(m);
}

/* Work pending is not saved: a semaphore wait, a GP_PUT not consumed yet. */
static void test_save_refuses_busy(void **state)
{
	struct mctx *m = mctx_new();
	struct gpu_chan_mig s;
	uint64_t sem = T_VA_BASE + m->pa + 1024;

	(void)state;
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 1, &s), -ENOENT);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 64, &s), -EINVAL);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 9, 0, &s), -EINVAL);
	TM(&m->c, VGPU_M_SEM_ACQUIRE, lo32(sem), hi32(sem), 1, 0, 0, 60000000);
	tchan_gp(&m->c);
	tchan_kick(m->t, &m->c);
	assert_int_equal(tchan_wait_state(m->t, &m->c, GPU_CHAN_STATE_BUSY), 0);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 0, &s), -EBUSY);
	__atomic_store_n(&m->buf[256], 1, __ATOMIC_RELEASE);	/* the semaphore released */
	assert_int_equal(tchan_wait(&m->c), 0);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 0, &s), 0);
	/* GP_PUT written to USERD with no doorbell: not consumed, so not quiesced. */
	fill_word(m, 0, 7);
	__atomic_store_n(&m->c.userd->gp_put, m->c.put, __ATOMIC_RELEASE);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 0, &s), -EBUSY);
	gpu_doorbell_ring(m->t->g, 1, vgpu_token(0, 0));
	assert_int_equal(tchan_wait(&m->c), 0);
	assert_int_equal(gpu_chan_mig_save(m->t->g, 1, 0, &s), 0);
	assert_int_equal(s.gp_get, 2);
	mctx_free(m);
}

/* The counters are set, the slice length kept. */
static void test_sched_stats_set(void **state)
{
	struct mctx *m = mctx_new();
	struct gpu_sched_stats in = { .run_ns = 111, .preempt_ns = 2, .idle_ns = 3,
		.slices = 44, .preempt_timeouts = 5, .stall_ns = 6, .preempted = 7,
		.target_slice_ns = 999 }, out, before;

	(void)state;
	gpu_sched_stats(m->t->g, 2, &before);
	gpu_sched_stats_set(m->t->g, 2, &in);
	gpu_sched_stats(m->t->g, 2, &out);
	assert_int_equal(out.run_ns, 111);
	assert_int_equal(out.slices, 44);
	assert_int_equal(out.preempt_timeouts, 5);
	assert_int_equal(out.preempted, 7);
	assert_int_equal(out.target_slice_ns, before.target_slice_ns);
	mctx_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_save_load_continues),
		cmocka_unit_test(test_save_refuses_busy),
		cmocka_unit_test(test_sched_stats_set),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
