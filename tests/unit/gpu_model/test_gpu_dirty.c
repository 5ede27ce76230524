// SPDX-License-Identifier: MIT
/* Dirty tracking of engine writes (live migration's pre-copy): while tracked, FILL, COPY
 * and semaphore releases set exactly the 4 KiB pages they wrote (a copy's destination, not
 * its source); a collection takes the bits and clears them; untracked, nothing is set. */
#include "gpu_test.h"

#define BUF_BYTES	(8u << 20)
#define BUF_PAGES	(BUF_BYTES / GPU_DIRTY_PAGE)

struct dctx {
	struct tgpu *t;
	struct tchan c;
	uint64_t buf_va, buf_dev;	/* the scratch buffer's VA and device VRAM offset */
	uint8_t *buf;
	uint64_t bits[BUF_PAGES / 64];
};

static int setup(void **state)
{
	struct dctx *m = calloc(1, sizeof(*m));

	m->t = tgpu_new(1, 1, 64);
	tchan_init(m->t, &m->c, 1, 3, 0, 64);
	m->buf_va = tgpu_vmem(m->t, 1, BUF_BYTES, VGPU_GMMU_PAGE_64K);
	m->buf = tgpu_va(m->t, 1, m->buf_va, BUF_BYTES);
	m->buf_dev = m->t->slice + (m->buf_va - T_VA_BASE);	/* function 1's slice */
	*state = m;
	return 0;
}

static int teardown(void **state)
{
	struct dctx *m = *state;

	gpu_dirty_track(m->t->g, false);
	tgpu_free(m->t);
	free(m);
	return 0;
}

static void run(struct dctx *m)
{
	tchan_gp(&m->c);
	tchan_kick(m->t, &m->c);
	assert_int_equal(tchan_wait(&m->c), 0);
}

/* The buffer's dirty pages, taken; the count returned. */
static uint64_t collect(struct dctx *m)
{
	memset(m->bits, 0, sizeof(m->bits));
	return gpu_dirty_collect(m->t->g, m->buf_dev, BUF_BYTES, m->bits);
}

static bool dirty(struct dctx *m, uint64_t page)
{
	return m->bits[page / 64] >> (page % 64) & 1;
}

static void test_untracked(void **state)
{
	struct dctx *m = *state;
	uint64_t dst = m->buf_va + 4096;

	TM(&m->c, VGPU_M_FILL, lo32(dst), hi32(dst), 8192, 0, 0x5a5a5a5a);
	run(m);
	assert_int_equal(collect(m), 0);
}

static void test_fill_copy_sem(void **state)
{
	struct dctx *m = *state;
	uint64_t fill = m->buf_va + 5 * 4096 + 100, src = m->buf_va, dst = m->buf_va + 100 * 4096;
	uint64_t sem = m->buf_va + 200 * 4096 + 64;

	gpu_dirty_track(m->t->g, true);
	/* FILL of 8192 bytes from 100 bytes into page 5: pages 5, 6 and 7. */
	TM(&m->c, VGPU_M_FILL, lo32(fill), hi32(fill), 8192, 0, 0x11223344);
	run(m);
	assert_int_equal(collect(m), 3);
	assert_true(dirty(m, 5) && dirty(m, 6) && dirty(m, 7));
	assert_int_equal(collect(m), 0);	/* taken: cleared */

	/* COPY marks its destination only. */
	TM(&m->c, VGPU_M_COPY, lo32(src), hi32(src), lo32(dst), hi32(dst), 4096, 0);
	run(m);
	assert_int_equal(collect(m), 1);
	assert_true(dirty(m, 100) && !dirty(m, 0));

	TM(&m->c, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), 7, 0, 0);
	run(m);
	assert_int_equal(collect(m), 1);
	assert_true(dirty(m, 200));

	/* Tracking stops with its last user. */
	gpu_dirty_track(m->t->g, false);
	TM(&m->c, VGPU_M_FILL, lo32(fill), hi32(fill), 4, 0, 1);
	run(m);
	assert_int_equal(collect(m), 0);
}

/* A collection of part of the range leaves the rest for later. */
static void test_partial_collect(void **state)
{
	struct dctx *m = *state;
	uint64_t a = m->buf_va + 10 * 4096, b = m->buf_va + 300 * 4096;

	gpu_dirty_track(m->t->g, true);
	TM(&m->c, VGPU_M_FILL, lo32(a), hi32(a), 4, 0, 1);
	TM(&m->c, VGPU_M_FILL, lo32(b), hi32(b), 4, 0, 2);
	run(m);
	memset(m->bits, 0, sizeof(m->bits));
	assert_int_equal(gpu_dirty_collect(m->t->g, m->buf_dev + 4096, 100 * 4096, m->bits), 1);
	assert_true(m->bits[0] >> 9 & 1);	/* page 10 is bit 9 from page 1 */
	assert_int_equal(collect(m), 1);
	assert_true(dirty(m, 300) && !dirty(m, 10));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_untracked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fill_copy_sem, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_collect, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
