// SPDX-License-Identifier: MIT
/* A device reset's replay (GPU_CHAN_RESTORE): a channel freed by the wipe and allocated
 * again with the same geometry keeps its execution state, so work in flight runs exactly
 * once: a method stopped half-way finishes from where it stopped, methods already done in
 * the segment are not run again, an error stays. A restore the device cannot honour is a
 * visible error (DEVICE_RESET); any other allocation starts over. The
 * stop points are replayable faults, so every case is deterministic. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/unit/gpu_model/gpu_test.h"

#define VA	0x200000000000ull	/* the partly mapped buffer */
#define N	8192u			/* AXPY elements: two engine steps of 4096 */

struct rctx {
	struct tgpu *t;
	struct tchan c;
	uint64_t pa;			/* VF-physical backing of [VA, VA + 64 KiB) */
	float *x, *y;			/* x at VA, y at VA + N * 4: CPU views */
};

/* A replayable channel; x and the first half of y mapped, the second half of y not. */
static struct rctx *rctx_new(void)
{
	struct rctx *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->t = tgpu_new(2, 1, 64);
	tchan_init_flags(r->t, &r->c, 1, 0, 0, 32, GPU_CHAN_REPLAYABLE, true);
	r->pa = tgpu_alloc(r->t, 1, 64 << 10);
	tgpu_map(r->t, 1, VA, r->pa, N * 4 + N * 2, VGPU_GMMU_PAGE_4K, 0);
	r->x = tgpu_ptr(r->t, 1, r->pa, N * 4);
	r->y = tgpu_ptr(r->t, 1, r->pa + N * 4, N * 4);
	for (uint32_t i = 0; i < N; i++) {
		r->x[i] = (float)(i % 9);
		r->y[i] = (float)(i % 5);
	}
	return r;
}

static void rctx_free(struct rctx *r)
{
	tgpu_free(r->t);
	free(r);
}

static void map_rest(struct rctx *r)
{
	tgpu_map(r->t, 1, VA + N * 6, r->pa + N * 6, N * 2, VGPU_GMMU_PAGE_4K, 0);
}

static void state_is(struct rctx *r, enum gpu_chan_state st)
{
	struct gpu_chan_status s;

	assert_int_equal(gpu_chan_status(r->t->g, 1, 0, &s), 0);	/* syncs the snapshot */
	assert_int_equal(s.state, st);
}

/* What a device reset and the owner's replay do to the channel: wipe (off the runlist,
 * freed, and, as the RM's free does, wait until no engine runs it: a turn that saw the
 * fault may still be ending), then allocated again with @flags, enabled, resident. */
static void reset_replay(struct rctx *r, uint64_t flags, uint64_t entries)
{
	struct gpu_priv_chan cfg = gpu_priv_shared(r->t->p)->fns[1].chans[0];

	assert_int_equal(gpu_priv_runlist_set(r->t->p, 1, 0, 0), 0);
	assert_int_equal(gpu_priv_chan_free(r->t->p, 1, 0), 0);
	state_is(r, GPU_CHAN_STATE_FREE);
	assert_int_equal(gpu_chan_quiesce(r->t->g, 1, 0, 10 * VGPU_NSEC_PER_SEC), 0);
	state_is(r, GPU_CHAN_STATE_FREE);
	cfg.flags = flags;
	cfg.gpfifo_entries = entries;
	assert_int_equal(gpu_priv_chan_alloc(r->t->p, 1, 0, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(r->t->p, 1, 0, true), 0);
	assert_int_equal(gpu_priv_runlist_set(r->t->p, 1, 0, 1), 0);
}

static void y_is_once(struct rctx *r)
{
	for (uint32_t i = 0; i < N; i++)
		if (r->y[i] != 2.0f * (float)(i % 9) + (float)(i % 5))
			fail_msg("y[%u] = %g, CPU %g", i, r->y[i], 2.0f * (float)(i % 9) + (float)(i % 5));
}

static void submit_axpy(struct rctx *r)
{
	float a = 2.0f;
	uint32_t ab;

	memcpy(&ab, &a, 4);
	TM(&r->c, VGPU_M_AXPY_F32, lo32(VA), hi32(VA), lo32(VA + N * 4), hi32(VA + N * 4), N, ab);
	tchan_gp(&r->c);
	tchan_kick(r->t, &r->c);
	assert_int_equal(tchan_wait_state(r->t, &r->c, GPU_CHAN_STATE_FAULTED), 0);
}

/* AXPY stopped after its first step: the restored channel finishes it, y += a*x once. */
static void test_restore_mid_method(void **state)
{
	struct rctx *r = rctx_new();

	(void)state;
	submit_axpy(r);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 32);
	state_is(r, GPU_CHAN_STATE_FAULTED);
	map_rest(r);
	gpu_fault_replay(r->t->g, 1);
	assert_int_equal(tchan_wait(&r->c), 0);
	y_is_once(r);
	rctx_free(r);
}

/* Two resets in a row (the second before the first restore ran anything): still once. */
static void test_restore_twice(void **state)
{
	struct rctx *r = rctx_new();

	(void)state;
	submit_axpy(r);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 32);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 32);
	state_is(r, GPU_CHAN_STATE_FAULTED);
	map_rest(r);
	gpu_fault_replay(r->t->g, 1);
	assert_int_equal(tchan_wait(&r->c), 0);
	y_is_once(r);
	rctx_free(r);
}

/* The privileged record: a restore with the freed record's geometry keeps its gen; other
 * geometry, or no flag, is a new allocation (the next gen). */
static void test_restore_gen(void **state)
{
	struct rctx *r = rctx_new();
	const struct gpu_priv_chan *pc = &gpu_priv_shared(r->t->p)->fns[1].chans[0];
	uint64_t gen = pc->gen;

	(void)state;
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 32);
	assert_int_equal(pc->gen, gen);
	reset_replay(r, GPU_CHAN_REPLAYABLE, 32);
	assert_int_equal(pc->gen, gen + 1);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 16);
	assert_int_equal(pc->gen, gen + 2);
	rctx_free(r);
}

/* A channel freed while an engine runs its turn reads as free once the engine let go, not
 * as the IDLE or BUSY its turn ended in. Long FILLs keep the turn running while the free is
 * written; the engine is seen to have started (methods counted) before it. */
static void test_freed_during_turn(void **state)
{
	struct rctx *r = rctx_new();
	struct gpu_chan_status s;

	(void)state;
	for (unsigned int i = 0; i < 4096; i++)
		TM(&r->c, VGPU_M_FILL, lo32(VA), hi32(VA), N * 4 + N * 2, 0, i);
	tchan_gp(&r->c);
	tchan_kick(r->t, &r->c);
	do
		assert_int_equal(gpu_chan_status(r->t->g, 1, 0, &s), 0);
	while (!s.methods);
	assert_int_equal(gpu_priv_runlist_set(r->t->p, 1, 0, 0), 0);
	assert_int_equal(gpu_priv_chan_free(r->t->p, 1, 0), 0);
	state_is(r, GPU_CHAN_STATE_FREE);
	assert_int_equal(gpu_chan_quiesce(r->t->g, 1, 0, 10 * VGPU_NSEC_PER_SEC), 0);
	state_is(r, GPU_CHAN_STATE_FREE);
	rctx_free(r);
}

/* The fault's replay arrives while the reset has the channel freed: the restore resumes it. */
static void test_restore_replayed_while_freed(void **state)
{
	struct rctx *r = rctx_new();
	struct gpu_priv_chan cfg;

	(void)state;
	submit_axpy(r);
	cfg = gpu_priv_shared(r->t->p)->fns[1].chans[0];
	assert_int_equal(gpu_priv_chan_free(r->t->p, 1, 0), 0);
	state_is(r, GPU_CHAN_STATE_FREE);
	map_rest(r);
	gpu_fault_replay(r->t->g, 1);
	cfg.flags = GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE;
	assert_int_equal(gpu_priv_chan_alloc(r->t->p, 1, 0, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(r->t->p, 1, 0, true), 0);
	assert_int_equal(gpu_priv_runlist_set(r->t->p, 1, 0, 1), 0);
	assert_int_equal(tchan_wait(&r->c), 0);
	y_is_once(r);
	rctx_free(r);
}

/* REDUCE_ADD and a FILL of its own input done, the segment's third method stopped: the
 * first two are not run again (a second REDUCE would sum the filled input). */
static void test_restore_mid_segment(void **state)
{
	struct rctx *r = rctx_new();
	uint32_t *u = (uint32_t *)r->x;
	uint64_t *sum = (uint64_t *)r->y, want = 0;

	(void)state;
	for (uint32_t i = 0; i < 1024; i++)
		want += u[i] = i * 7;
	TM(&r->c, VGPU_M_REDUCE_ADD_U32, lo32(VA), hi32(VA), 1024, lo32(VA + N * 4), hi32(VA + N * 4));
	TM(&r->c, VGPU_M_FILL, lo32(VA), hi32(VA), 4096, 0, 0x01010101);
	TM(&r->c, VGPU_M_FILL, lo32(VA + N * 6), hi32(VA + N * 6), 4, 0, 0x5a5a5a5a);
	tchan_gp(&r->c);
	tchan_kick(r->t, &r->c);
	assert_int_equal(tchan_wait_state(r->t, &r->c, GPU_CHAN_STATE_FAULTED), 0);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 32);
	map_rest(r);
	gpu_fault_replay(r->t->g, 1);
	assert_int_equal(tchan_wait(&r->c), 0);
	assert_int_equal(*sum, want);
	assert_int_equal(u[0], 0x01010101);
	assert_int_equal(*(uint32_t *)tgpu_ptr(r->t, 1, r->pa + N * 6, 4), 0x5a5a5a5a);
	rctx_free(r);
}

/* A channel in error stays in error, its notifier unchanged; new work does not run. */
static void test_restore_keeps_error(void **state)
{
	struct rctx *r = rctx_new();

	(void)state;
	tchan_gp_raw(&r->c, 0xff);			/* a control entry with an unknown opcode */
	tchan_kick(r->t, &r->c);
	assert_int_equal(tchan_wait(&r->c), VGPU_CHAN_ERR_GP_ILLEGAL);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 32);
	state_is(r, GPU_CHAN_STATE_ERROR);
	TM(&r->c, VGPU_M_FILL, lo32(VA), hi32(VA), 4, 0, 0x77);
	tchan_gp(&r->c);
	tchan_kick(r->t, &r->c);
	state_is(r, GPU_CHAN_STATE_ERROR);
	assert_int_equal(tchan_err(&r->c), VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(tchan_get(&r->c), 0);
	assert_true(r->x[0] == 0.0f);			/* the FILL did not run */
	rctx_free(r);
}

/* Without the flag the allocation is new: GP_GET 0, the ring's entries from 0 run (here
 * the faulting AXPY again, from its start). */
static void test_plain_realloc_starts_over(void **state)
{
	struct rctx *r = rctx_new();
	struct gpu_chan_status s;

	(void)state;
	submit_axpy(r);
	assert_true(r->y[1] == 2.0f * 1 + 1);		/* the first step ran */
	reset_replay(r, GPU_CHAN_REPLAYABLE, 32);
	assert_int_equal(tchan_wait_state(r->t, &r->c, GPU_CHAN_STATE_FAULTED), 0);
	assert_int_equal(gpu_chan_status(r->t->g, 1, 0, &s), 0);
	assert_int_equal(s.gp_get, 0);
	assert_true(r->y[1] == 2.0f * 2 + 1);		/* run again from the start */
	rctx_free(r);
}

/* A restore whose geometry is not what the device ran cannot continue the work: the
 * channel is in error (DEVICE_RESET) in its notifier and interrupt, and nothing runs. The
 * same for a restore that changes whether faults are replayable. */
static void test_other_geometry_errors(void **state)
{
	struct rctx *r = rctx_new();

	(void)state;
	submit_axpy(r);
	gpu_intr_ack(r->t->g, 1, ~0u);
	reset_replay(r, GPU_CHAN_REPLAYABLE | GPU_CHAN_RESTORE, 16);
	state_is(r, GPU_CHAN_STATE_ERROR);
	assert_int_equal(tchan_err(&r->c), VGPU_CHAN_ERR_DEVICE_RESET);
	assert_int_equal(tgpu_wait_intr(r->t, 1, VGPU_INTR_CHAN_ERROR), VGPU_INTR_CHAN_ERROR);
	tchan_kick(r->t, &r->c);
	state_is(r, GPU_CHAN_STATE_ERROR);
	assert_true(r->y[1] == 2.0f * 1 + 1);		/* the first step ran once, no more */
	rctx_free(r);
	r = rctx_new();
	submit_axpy(r);
	reset_replay(r, GPU_CHAN_RESTORE, 32);
	state_is(r, GPU_CHAN_STATE_ERROR);
	assert_int_equal(tchan_err(&r->c), VGPU_CHAN_ERR_DEVICE_RESET);
	rctx_free(r);
}

/* A GSP killed in the middle of a write leaves a record's sequence odd: the next GSP's
 * write (its wipe) makes it consistent again, and the device reads it. */
static void test_writer_killed_mid_write(void **state)
{
	struct rctx *r = rctx_new();
	struct gpu_priv_shared *sh = (struct gpu_priv_shared *)gpu_priv_shared(r->t->p);

	(void)state;
	__atomic_fetch_add(&sh->fns[1].seq, 1, __ATOMIC_RELEASE);	/* died after "odd" */
	__atomic_fetch_add(&sh->sched_seq, 1, __ATOMIC_RELEASE);
	assert_int_equal(gpu_priv_runlist_set(r->t->p, 1, 0, 1), 0);
	assert_int_equal(gpu_priv_sched_set(r->t->p, GPU_SCHED_BEST_EFFORT, 0, 0), 0);
	assert_int_equal(sh->fns[1].seq & 1, 0);
	assert_int_equal(sh->sched_seq & 1, 0);
	state_is(r, GPU_CHAN_STATE_IDLE);
	TM(&r->c, VGPU_M_FILL, lo32(VA), hi32(VA), 4, 0, 0x77);
	tchan_gp(&r->c);
	tchan_kick(r->t, &r->c);
	assert_int_equal(tchan_wait(&r->c), 0);
	assert_int_equal(*(uint32_t *)r->x, 0x77);
	rctx_free(r);
}

/* Unknown flag bits are still refused. */
static void test_bad_flags(void **state)
{
	struct tgpu *t = tgpu_new(2, 1, 64);
	struct gpu_priv_chan cfg = { .flags = 1ull << 4, .pdb = t->pdb[1], .gpfifo_va = T_VA_BASE,
				     .gpfifo_entries = 16, .userd_aper = VGPU_APER_VRAM };

	(void)state;
	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, 5, &cfg), -EINVAL);
	assert_int_equal(gpu_priv_shared(t->p)->fns[1].chans[5].flags, 0);
	cfg.flags = GPU_CHAN_RESTORE;
	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, 5, &cfg), 0);
	tgpu_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restore_mid_method),
		cmocka_unit_test(test_restore_twice),
		cmocka_unit_test(test_restore_gen),
		cmocka_unit_test(test_restore_replayed_while_freed),
		cmocka_unit_test(test_freed_during_turn),
		cmocka_unit_test(test_restore_mid_segment),
		cmocka_unit_test(test_restore_keeps_error),
		cmocka_unit_test(test_plain_realloc_starts_over),
		cmocka_unit_test(test_other_geometry_errors),
		cmocka_unit_test(test_writer_killed_mid_write),
		cmocka_unit_test(test_bad_flags),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
