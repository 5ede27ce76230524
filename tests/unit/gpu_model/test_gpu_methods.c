// SPDX-License-Identifier: MIT
/* Every pushbuffer method executed by the engines, checked against a CPU reference. */
#include <poll.h>
#include <unistd.h>

#include "gpu_test.h"

struct mctx {
	struct tgpu *t;
	struct tchan c;
	uint64_t buf_va;		/* 8 MiB of scratch VRAM, 64K pages */
	uint8_t *buf;
};

#define BUF_BYTES (8u << 20)

/* A VF, one engine, a 64 MiB slice each; COPYs of @stream_min bytes or more stream. */
static struct mctx *mctx_new(uint64_t stream_min)
{
	struct gpu_config cfg = { .nr_vfs = 1, .nr_engines = 1, .copy_stream_min = stream_min };
	struct mctx *m = calloc(1, sizeof(*m));

	m->t = tgpu_new_cfg(cfg, 64);
	tchan_init(m->t, &m->c, 1, 3, 0, 64);
	m->buf_va = tgpu_vmem(m->t, 1, BUF_BYTES, VGPU_GMMU_PAGE_64K);
	m->buf = tgpu_va(m->t, 1, m->buf_va, BUF_BYTES);
	return m;
}

static int setup(void **state)
{
	*state = mctx_new(0);
	return 0;
}

static int teardown(void **state)
{
	struct mctx *m = *state;

	tgpu_free(m->t);
	free(m);
	return 0;
}

static int run(struct mctx *m)
{
	tchan_gp(&m->c);
	tchan_kick(m->t, &m->c);
	return tchan_wait(&m->c);
}

static void test_nop(void **state)
{
	struct mctx *m = *state;
	struct gpu_chan_status s;

	TM(&m->c, VGPU_M_NOP);
	TM(&m->c, VGPU_M_NOP, 1, 2, 3);
	assert_int_equal(run(m), 0);
	assert_int_equal(gpu_chan_status(m->t->g, 1, 3, &s), 0);
	assert_int_equal(s.methods, 2);
	assert_int_equal(s.gp_get, 1);
}

static void test_sem_release(void **state)
{
	struct mctx *m = *state;
	uint64_t va = m->buf_va + 64;
	uint32_t *p32 = (uint32_t *)(m->buf + 64);
	uint64_t *p64 = (uint64_t *)(m->buf + 128);
	int fd = gpu_intr_fd(m->t->g, 1);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	*p64 = 0;
	gpu_intr_ack(m->t->g, 1, ~0u);
	TM(&m->c, VGPU_M_SEM_RELEASE, lo32(va), hi32(va), 0xdeadbeef, 0x1234, 0);
	TM(&m->c, VGPU_M_SEM_RELEASE, lo32(va + 64), hi32(va + 64), 0x89abcdef, 0x01234567,
	   VGPU_SEM_64 | VGPU_SEM_INTR);
	assert_int_equal(run(m), 0);
	assert_int_equal(*p32, 0xdeadbeef);
	assert_int_equal(*(p32 + 1), 0);	/* a 32-bit release touches 4 bytes only */
	assert_true(*p64 == 0x0123456789abcdefull);
	assert_int_equal(poll(&pfd, 1, 1000), 1);
	assert_int_equal(gpu_intr_ack(m->t->g, 1, VGPU_INTR_SEMAPHORE), VGPU_INTR_SEMAPHORE);
}

/* Release from the CPU while the engine waits; GEQ and EQ, 32 and 64 bit. */
static void test_sem_acquire(void **state)
{
	struct mctx *m = *state;
	uint64_t sem = m->buf_va + 256, done = m->buf_va + 512;
	uint32_t *s32 = (uint32_t *)(m->buf + 256);
	uint64_t *s64 = (uint64_t *)(m->buf + 320);
	uint32_t *d = (uint32_t *)(m->buf + 512);

	__atomic_store_n(s32, 5, __ATOMIC_RELEASE);
	__atomic_store_n(s64, 0, __ATOMIC_RELEASE);
	*d = 0;
	TM(&m->c, VGPU_M_SEM_ACQUIRE, lo32(sem), hi32(sem), 7, 0, 0, 2000000);
	TM(&m->c, VGPU_M_SEM_ACQUIRE, lo32(sem + 64), hi32(sem + 64), 1, 1, VGPU_SEM_64 | VGPU_SEM_EQ,
	   2000000);
	TM(&m->c, VGPU_M_SEM_RELEASE, lo32(done), hi32(done), 1, 0, 0);
	tchan_gp(&m->c);
	tchan_kick(m->t, &m->c);
	cmn_sleep_ns(5 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(__atomic_load_n(d, __ATOMIC_ACQUIRE), 0);	/* 5 < 7: still waiting */
	__atomic_store_n(s32, 9, __ATOMIC_RELEASE);
	cmn_sleep_ns(5 * VGPU_NSEC_PER_MSEC);
	assert_int_equal(__atomic_load_n(d, __ATOMIC_ACQUIRE), 0);	/* 64-bit == not yet */
	__atomic_store_n(s64, 0x100000001ull, __ATOMIC_RELEASE);
	assert_int_equal(tchan_wait(&m->c), 0);
	assert_int_equal(*d, 1);
}

static void test_sem_acquire_timeout(void **state)
{
	struct mctx *m = *state;
	uint64_t sem = m->buf_va + 1024;

	*(uint32_t *)(m->buf + 1024) = 0;
	TM(&m->c, VGPU_M_SEM_ACQUIRE, lo32(sem), hi32(sem), 1, 0, VGPU_SEM_EQ, 3000);
	assert_int_equal(run(m), VGPU_CHAN_ERR_SEM_TIMEOUT);
}

/* A SEM_ACQUIRE whose semaphore is not mapped puts the channel (not replayable) in error:
 * its wait is over, and the engine, with nothing left to run, goes to sleep instead of
 * retrying it at every pass. */
static void test_sem_acquire_fault(void **state)
{
	struct mctx *m = *state;
	struct vgpu_doorbell_page *db = gpu_doorbell_page(m->t->g, 1);
	uint64_t unmapped = 0x7000000000ull, dl;

	TM(&m->c, VGPU_M_SEM_ACQUIRE, lo32(unmapped), hi32(unmapped), 1, 0, 0, 0);
	assert_int_equal(run(m), VGPU_CHAN_ERR_MMU_FAULT);
	dl = cmn_deadline_ns(T_TIMEOUT);
	while (!__atomic_load_n(&db->sleeping, __ATOMIC_ACQUIRE) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(10 * VGPU_NSEC_PER_USEC);
	assert_true(__atomic_load_n(&db->sleeping, __ATOMIC_ACQUIRE));
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/* stream: every COPY streams its stores (copy_stream_min 1), else none does (UINT64_MAX). */
static const struct copy_case {
	const char *name;
	uint64_t src_off, dst_off, len;
	bool stream;
} copy_cases[] = {
	{ "copy 1 byte", 3, 4096 + 5, 1, false },
	{ "copy unaligned 100k", 7, (1u << 20) + 3, 100000, false },
	{ "copy across 64K pages", 65536 - 100, (2u << 20) + 65536 - 7, 3 * 65536 + 11, false },
	{ "copy 3 MiB", 0, 4u << 20, 3u << 20, false },
	{ "streamed copy 1 byte", 3, 4096 + 5, 1, true },
	{ "streamed copy 79 bytes", 1, 4096 + 14, 79, true },
	{ "streamed copy unaligned 100k", 7, (1u << 20) + 3, 100000, true },
	{ "streamed copy across 64K pages", 65536 - 100, (2u << 20) + 65536 - 7, 3 * 65536 + 11,
	  true },
	{ "streamed copy 3 MiB", 0, 4u << 20, 3u << 20, true },
};

static void test_copy_case(void **state)
{
	const struct copy_case *cc = *state;
	struct mctx *m;
	void *ms;
	uint8_t *ref = malloc(cc->len);
	uint64_t src, dst;

	ms = m = mctx_new(cc->stream ? 1 : UINT64_MAX);
	src = m->buf_va + cc->src_off;
	dst = m->buf_va + cc->dst_off;
	fill_pattern(m->buf + cc->src_off, cc->len, (uint32_t)cc->len);
	memset(m->buf + cc->dst_off - 1, 0xee, cc->len + 2);
	memcpy(ref, m->buf + cc->src_off, cc->len);
	TM(&m->c, VGPU_M_COPY, lo32(src), hi32(src), lo32(dst), hi32(dst), lo32(cc->len), hi32(cc->len));
	assert_int_equal(run(m), 0);
	assert_memory_equal(m->buf + cc->dst_off, ref, cc->len);
	assert_int_equal(m->buf[cc->dst_off - 1], 0xee);
	assert_int_equal(m->buf[cc->dst_off + cc->len], 0xee);
	free(ref);
	teardown(&ms);
}

/* A COPY whose source and destination overlap within a page, either way and by less than
 * a store's width or more, streamed or not, leaves what memmove() leaves. */
static void test_copy_overlap(void **state)
{
	static const int shifts[] = { 16, -16, 1, -1, 200, -200 };
	const uint64_t at = 8192, len = 2048;
	uint8_t *ref = malloc(len + 512);

	(void)state;
	for (int stream = 0; stream < 2; stream++) {
		struct mctx *m = mctx_new(stream ? 1 : UINT64_MAX);
		void *ms = m;

		for (size_t i = 0; i < VGPU_ARRAY_SIZE(shifts); i++) {
			uint64_t src = m->buf_va + at, dst = src + (uint64_t)(int64_t)shifts[i];

			fill_pattern(m->buf + at - 256, len + 512, (uint32_t)i + 1);
			memcpy(ref, m->buf + at - 256, len + 512);
			memmove(ref + 256 + shifts[i], ref + 256, len);
			TM(&m->c, VGPU_M_COPY, lo32(src), hi32(src), lo32(dst), hi32(dst),
			   lo32(len), 0);
			assert_int_equal(run(m), 0);
			assert_memory_equal(m->buf + at - 256, ref, len + 512);
		}
		teardown(&ms);
	}
	free(ref);
}

static void test_fill(void **state)
{
	struct mctx *m = *state;
	uint64_t dst = m->buf_va + 4100;
	uint32_t *p = (uint32_t *)(m->buf + 4100);
	uint32_t n = 70000;

	memset(m->buf + 4096, 0x11, 4 + n * 4 + 4);
	TM(&m->c, VGPU_M_FILL, lo32(dst), hi32(dst), n * 4, 0, 0xa5a5f00d);
	TM(&m->c, VGPU_M_FILL, lo32(dst + 8), hi32(dst + 8), 8, 0, 0);
	assert_int_equal(run(m), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(p[i], (i == 2 || i == 3) ? 0 : 0xa5a5f00d);
	assert_int_equal(p[-1], 0x11111111);
	assert_int_equal(p[n], 0x11111111);
}

static void test_timestamp(void **state)
{
	struct mctx *m = *state;
	uint64_t va = m->buf_va + 2048, t0 = cmn_now_ns(), t1;
	uint64_t *ts = (uint64_t *)(m->buf + 2048);

	TM(&m->c, VGPU_M_TIMESTAMP, lo32(va), hi32(va));
	TM(&m->c, VGPU_M_TIMESTAMP, lo32(va + 8), hi32(va + 8));
	assert_int_equal(run(m), 0);
	t1 = cmn_now_ns();
	assert_true(ts[0] >= t0 && ts[0] <= ts[1] && ts[1] <= t1);
}

static void test_reduce(void **state)
{
	struct mctx *m = *state;
	uint32_t n = 300001, *src = (uint32_t *)(m->buf + 8);
	uint64_t sum = 0, va = m->buf_va + 8, dst = m->buf_va + (6u << 20);

	for (uint32_t i = 0; i < n; i++) {
		src[i] = 0xfffffff0u - i * 7u;
		sum += src[i];
	}
	TM(&m->c, VGPU_M_REDUCE_ADD_U32, lo32(va), hi32(va), n, lo32(dst), hi32(dst));
	assert_int_equal(run(m), 0);
	assert_true(*(uint64_t *)(m->buf + (6u << 20)) == sum);
}

static void test_axpy(void **state)
{
	struct mctx *m = *state;
	uint32_t n = 20000, abits;
	float *x = (float *)m->buf, *y = (float *)(m->buf + (1u << 20)), *ref = malloc(n * 4), a = 1.5f;
	uint64_t xv = m->buf_va, yv = m->buf_va + (1u << 20);

	memcpy(&abits, &a, 4);
	for (uint32_t i = 0; i < n; i++) {
		x[i] = (float)i * 0.25f - 7.0f;
		y[i] = (float)(n - i) / 3.0f;
		ref[i] = a * x[i] + y[i];
	}
	TM(&m->c, VGPU_M_AXPY_F32, lo32(xv), hi32(xv), lo32(yv), hi32(yv), n, abits);
	assert_int_equal(run(m), 0);
	assert_memory_equal(y, ref, n * 4);
	free(ref);
}

/* Many small GP entries, several doorbells: all execute, in order. */
static void test_many_entries(void **state)
{
	struct mctx *m = *state;
	uint64_t va = m->buf_va + 8192;
	uint32_t *p = (uint32_t *)(m->buf + 8192);

	for (uint32_t i = 0; i < 1000; i++) {
		TM(&m->c, VGPU_M_SEM_RELEASE, lo32(va + (i % 16) * 4), hi32(va), i, 0, 0);
		tchan_gp(&m->c);
		/* A 64-entry ring holds 63: wait at least that often. */
		if (i % 7 == 6 || i % 32 == 31) {
			tchan_kick(m->t, &m->c);
			if (i % 32 == 31)
				assert_int_equal(tchan_wait(&m->c), 0);
		}
	}
	tchan_kick(m->t, &m->c);
	assert_int_equal(tchan_wait(&m->c), 0);
	for (uint32_t i = 1000 - 16; i < 1000; i++)
		assert_int_equal(p[i % 16], i);
}

/* A pushbuffer of two 4 KiB pages mapped the other way round from VRAM, so that the VA's
 * next page is not the next host page: a method whose arguments continue past the first
 * page, from every offset, reads them through a second translation. */
static void test_method_across_pages(void **state)
{
	struct mctx *m = *state;
	const uint64_t pb_va = 0x7400000000ull;
	uint64_t pa = tgpu_alloc(m->t, 1, 8192), sem_va = m->buf_va + 4096;
	uint32_t *page[2] = { tgpu_ptr(m->t, 1, pa + 4096, 4096), tgpu_ptr(m->t, 1, pa, 4096) };
	uint32_t *sem = (uint32_t *)(m->buf + 4096);

	tgpu_map(m->t, 1, pb_va, pa + 4096, 4096, VGPU_GMMU_PAGE_4K, 0);
	tgpu_map(m->t, 1, pb_va + 4096, pa, 4096, VGPU_GMMU_PAGE_4K, 0);
	memset(sem, 0, 64);
	for (uint32_t k = 1; k <= 8; k++) {
		/* SEM_RELEASE, then a NOP with two arguments, from k dwords before the end. */
		const uint32_t seg[] = {
			VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), lo32(sem_va + k * 4), hi32(sem_va),
			100 + k, 0, 0, VGPU_MTHD(VGPU_M_NOP, 2), 1, 2,
		};
		uint32_t first = 1024 - k;

		for (uint32_t i = 0; i < VGPU_ARRAY_SIZE(seg); i++)
			page[(first + i) / 1024][(first + i) % 1024] = seg[i];
		tchan_gp_raw(&m->c, vgpu_gp_entry(pb_va + first * 4ull, VGPU_ARRAY_SIZE(seg)));
		tchan_kick(m->t, &m->c);
		assert_int_equal(tchan_wait(&m->c), 0);
		assert_int_equal(sem[k], 100 + k);
	}
}

int main(void)
{
	struct CMUnitTest tests[32];
	size_t n = 0;

	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_nop, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_sem_release, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_sem_acquire, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_sem_acquire_timeout, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_sem_acquire_fault,
									 setup, teardown);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(copy_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = copy_cases[i].name, .test_func = test_copy_case,
						  .initial_state = (void *)&copy_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_copy_overlap);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_fill, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_timestamp, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_reduce, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_axpy, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_many_entries, setup, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_method_across_pages, setup, teardown);
	return _cmocka_run_group_tests("gpu_methods", tests, n, NULL, NULL);
}
