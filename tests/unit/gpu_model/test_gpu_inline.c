// SPDX-License-Identifier: MIT
/* USERD's inline copy of a short segment (vgpu/gpfifo.h, ABI 2.6): the engine runs it in
 * place of the GPFIFO entry and the pushbuffer when it describes the one entry between
 * GP_GET and GP_PUT, and ignores it otherwise. The pushbuffer here holds other methods
 * than the copy, so each case shows which of the two ran. */
#include "gpu_test.h"
#include "gpu_model/gpu_internal.h"	/* test_copy_drops_gp_cache() */

struct ictx {
	struct tgpu *t;
	struct tchan c;
	uint64_t sem_va;
	uint32_t *sem;
};

static int setup(void **state)
{
	struct ictx *x = calloc(1, sizeof(*x));

	assert_non_null(x);
	x->t = tgpu_new(1, 1, 32);
	tchan_init(x->t, &x->c, 1, 2, 0, 16);
	x->sem_va = tgpu_vmem(x->t, 1, 4096, VGPU_GMMU_PAGE_4K);
	x->sem = tgpu_va(x->t, 1, x->sem_va, 4096);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct ictx *x = *state;

	tgpu_free(x->t);
	free(x);
	return 0;
}

/* A release of @v to the semaphore: 6 dwords at @dw. */
static void release_dw(const struct ictx *x, uint32_t *dw, uint32_t v)
{
	const uint32_t m[] = { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(x->sem_va), hi32(x->sem_va),
			       v, 0, 0 };

	memcpy(dw, m, sizeof(m));
}

/* One entry whose pushbuffer releases @pb_v, with a copy releasing @copy_v under @ctl (its
 * index and length as the entry's when @ctl is 0); published and waited for. */
static int submit(struct ictx *x, uint32_t pb_v, uint32_t copy_v, uint32_t ctl)
{
	uint32_t copy[6];
	uint64_t e;

	TM(&x->c, VGPU_M_SEM_RELEASE, lo32(x->sem_va), hi32(x->sem_va), pb_v, 0, 0);
	e = vgpu_gp_entry(x->c.pb_va + x->c.seg_start * 4ull, 6);
	release_dw(x, copy, copy_v);
	tchan_inline_copy(&x->c, copy, 6, e, ctl ? ctl : vgpu_userd_inl_ctl(x->c.put, 6));
	tchan_gp(&x->c);
	tchan_kick(x->t, &x->c);
	return tchan_wait(&x->c);
}

/* Publish GP entry @e alone with a copy releasing @v, and wait: the channel's error or 0. */
static int submit_raw(struct ictx *x, uint64_t e, uint32_t v)
{
	uint32_t copy[6];

	release_dw(x, copy, v);
	tchan_inline_copy(&x->c, copy, 6, e, vgpu_userd_inl_ctl(x->c.put, 6));
	tchan_gp_raw(&x->c, e);
	tchan_kick(x->t, &x->c);
	return tchan_wait(&x->c);
}

static void test_copy_runs(void **state)
{
	struct ictx *x = *state;

	for (uint32_t i = 1; i <= 20; i++) {	/* past the 16-entry ring: indices wrap */
		assert_int_equal(submit(x, 1000 + i, i, 0), 0);
		assert_int_equal(x->sem[0], i);
	}
}

/* The entry's pushbuffer is not even mapped: nothing but the copy is read. */
static void test_copy_without_pushbuffer(void **state)
{
	struct ictx *x = *state;

	assert_int_equal(submit_raw(x, vgpu_gp_entry(0x7000000000ull, 6), 77), 0);
	assert_int_equal(x->sem[0], 77);
}

static void test_copy_of_other_index_ignored(void **state)
{
	struct ictx *x = *state;

	assert_int_equal(submit(x, 5, 6, vgpu_userd_inl_ctl(x->c.put + 1, 6)), 0);
	assert_int_equal(x->sem[0], 5);
}

static void test_copy_not_valid_ignored(void **state)
{
	struct ictx *x = *state;

	assert_int_equal(submit(x, 5, 6, vgpu_userd_inl_ctl(x->c.put, 6) & ~VGPU_USERD_INL_VALID),
			 0);
	assert_int_equal(x->sem[0], 5);
}

static void test_copy_of_other_length_ignored(void **state)
{
	struct ictx *x = *state;

	assert_int_equal(submit(x, 5, 6, vgpu_userd_inl_ctl(x->c.put, 5)), 0);
	assert_int_equal(x->sem[0], 5);
}

/* Two entries published at once: the copy (of the second) is not the one at GP_GET's,
 * and the second is taken from the GP entries already fetched. */
static void test_copy_with_two_entries_ignored(void **state)
{
	struct ictx *x = *state;
	uint32_t copy[6];
	uint64_t e;

	TM(&x->c, VGPU_M_SEM_RELEASE, lo32(x->sem_va), hi32(x->sem_va), 1, 0, 0);
	tchan_gp(&x->c);
	TM(&x->c, VGPU_M_SEM_RELEASE, lo32(x->sem_va + 4), hi32(x->sem_va), 2, 0, 0);
	e = vgpu_gp_entry(x->c.pb_va + x->c.seg_start * 4ull, 6);
	release_dw(x, copy, 9);
	tchan_inline_copy(&x->c, copy, 6, e, vgpu_userd_inl_ctl(x->c.put, 6));
	tchan_gp(&x->c);
	tchan_kick(x->t, &x->c);
	assert_int_equal(tchan_wait(&x->c), 0);
	assert_int_equal(x->sem[0], 1);
	assert_int_equal(x->sem[1], 2);
}

/* The copy's GP entry is checked as any entry is. */
static void test_copy_malformed_entry(void **state)
{
	struct ictx *x = *state;

	assert_int_equal(submit_raw(x, vgpu_gp_entry(x->c.pb_va, 6) | VGPU_GP_RSVD_MASK, 3),
			 VGPU_CHAN_ERR_GP_MALFORMED);
	assert_int_equal(x->sem[0], 0);
}

/* Set the channel's index into its cache of fetched GP entries to @idx between two of its
 * turns (white box: the index would take 2^32 inline entries to get there). */
static void gp_cache_idx_set(struct ictx *x, uint32_t idx)
{
	struct gpu *g = x->t->g;
	struct gpu_chan *c = &g->fns[x->c.fn].chans[x->c.chid];
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);
	bool idle;

	cmn_mutex_lock(&g->lock);
	while (c->running && !cmn_deadline_passed(dl)) {
		cmn_mutex_unlock(&g->lock);
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
		cmn_mutex_lock(&g->lock);
	}
	idle = !c->running;
	if (idle)
		c->gp_cache_idx = idx;
	cmn_mutex_unlock(&g->lock);
	assert_true(idle);
}

/* An entry fetched from the GPFIFO stays in the engine's cache of fetched entries; an inline
 * copy runs without that cache and drops it. Were the index into the cache only advanced
 * past it, 2^32 inline entries later it would wrap onto the entry already run, and run it
 * again. */
static void test_copy_drops_gp_cache(void **state)
{
	struct ictx *x = *state;

	/* A copy of another index: the entry is fetched from the GPFIFO. */
	assert_int_equal(submit(x, 1, 2, vgpu_userd_inl_ctl(x->c.put + 1, 6)), 0);
	assert_int_equal(x->sem[0], 1);
	x->sem[0] = 0;
	gp_cache_idx_set(x, UINT32_MAX);
	assert_int_equal(submit(x, 5, 6, 0), 0);
	assert_int_equal(x->sem[0], 6);
	assert_int_equal(tchan_get(&x->c), x->c.put);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_copy_runs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_without_pushbuffer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_of_other_index_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_not_valid_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_of_other_length_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_with_two_entries_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_malformed_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copy_drops_gp_cache, setup, teardown),
	};

	return cmocka_run_group_tests_name("gpu_inline", tests, NULL, NULL);
}
