// SPDX-License-Identifier: MIT
/* The pushbuffer builder against the method encoding of vgpu/gpfifo.h, and the driver's DMA
 * page allocator (alignment, exhaustion, reuse of freed memory). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <vgpu/gpfifo.h>

#include "common/clock.h"
#include "vf_guest/vf_internal.h"

/* ---- pushbuffer: each helper's exact dwords ---- */
static const struct pb_case {
	const char *name;
	int which;
	uint32_t want[8];
	uint32_t n;
} pb_cases[] = {
	{ "NOP", 0, { VGPU_MTHD(VGPU_M_NOP, 0) }, 1 },
	{ "SEM_RELEASE 64-bit", 1, { VGPU_MTHD(VGPU_M_SEM_RELEASE, 5), 0x89abcdef, 0x1234567,
				     0x2, 0x1, VGPU_SEM_64 | VGPU_SEM_INTR }, 6 },
	{ "SEM_ACQUIRE ==", 2, { VGPU_MTHD(VGPU_M_SEM_ACQUIRE, 6), 0x1000, 0x1, 7, 0, VGPU_SEM_EQ,
				 500 }, 7 },
	{ "COPY", 3, { VGPU_MTHD(VGPU_M_COPY, 6), 0x10, 0x2, 0x20, 0x3, 0x40000001, 0x1 }, 7 },
	{ "FILL", 4, { VGPU_MTHD(VGPU_M_FILL, 5), 0x3000, 0, 0x1000, 0, 0xdeadbeef }, 6 },
	{ "MMU_INVALIDATE range", 5, { VGPU_MTHD(VGPU_M_MMU_INVALIDATE, 5), 0x200000, 0, 0x200000,
				       0, 0 }, 6 },
	{ "MMU_INVALIDATE all", 6, { VGPU_MTHD(VGPU_M_MMU_INVALIDATE, 5), 0, 0, 0, 0,
				     VGPU_INVAL_ALL }, 6 },
	{ "REDUCE_ADD_U32", 7, { VGPU_MTHD(VGPU_M_REDUCE_ADD_U32, 5), 0x8000, 0x1, 1024, 0x9000,
				 0x1 }, 6 },
	{ "AXPY_F32 a=1.5", 8, { VGPU_MTHD(VGPU_M_AXPY_F32, 6), 0x100, 0, 0x200, 0, 64,
				 0x3fc00000 }, 7 },
};

static void test_pb(void **state)
{
	const struct pb_case *c = *state;
	struct vgpu_pb pb;
	uint32_t buf[16];

	vgpu_pb_init(&pb, buf, 16);
	switch (c->which) {
	case 0: vgpu_pb_nop(&pb); break;
	case 1: vgpu_pb_sem_release(&pb, 0x0123456789abcdefull, 0x100000002ull,
				    VGPU_SEM_64 | VGPU_SEM_INTR); break;
	case 2: vgpu_pb_sem_acquire(&pb, 0x100001000ull, 7, VGPU_SEM_EQ, 500); break;
	case 3: vgpu_pb_copy(&pb, 0x200000010ull, 0x300000020ull, 0x140000001ull); break;
	case 4: vgpu_pb_fill(&pb, 0x3000, 0x1000, 0xdeadbeef); break;
	case 5: vgpu_pb_invalidate(&pb, 0x200000, 0x200000); break;
	case 6: vgpu_pb_invalidate(&pb, 0, 0); break;
	case 7: vgpu_pb_reduce_add_u32(&pb, 0x100008000ull, 1024, 0x100009000ull); break;
	case 8: vgpu_pb_axpy_f32(&pb, 0x100, 0x200, 64, 1.5f); break;
	}
	assert_int_equal(pb.err, 0);
	assert_int_equal(pb.len, c->n);
	assert_memory_equal(buf, c->want, c->n * 4);
}

/* A method that does not fit is dropped whole; what was built stays. */
static void test_pb_full(void **state)
{
	struct vgpu_pb pb;
	uint32_t buf[8];

	(void)state;
	vgpu_pb_init(&pb, buf, 8);
	vgpu_pb_fill(&pb, 0, 4, 1);		/* 6 dwords */
	vgpu_pb_copy(&pb, 0, 8, 4);		/* 7 more: no room */
	assert_int_equal(pb.err, -ENOSPC);
	assert_int_equal(pb.len, 6);
	assert_int_equal(buf[0], VGPU_MTHD(VGPU_M_FILL, 5));
	vgpu_pb_nop(&pb);			/* still fits */
	assert_int_equal(pb.len, 7);
}

/* ---- DMA allocator ---- */
#define DMA_BYTES	(1u << 20)

struct dma_fix {
	uint8_t *mem;
	struct vf_dma d;
};

static int dma_setup(void **state)
{
	struct dma_fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->mem = aligned_alloc(4096, DMA_BYTES);
	assert_non_null(f->mem);
	assert_int_equal(vf_dma_init(&f->d, f->mem, DMA_BYTES, 1ull << 32), 0);
	*state = f;
	return 0;
}

static int dma_teardown(void **state)
{
	struct dma_fix *f = *state;

	vf_dma_fini(&f->d);
	free(f->mem);
	free(f);
	return 0;
}

static void test_dma_align(void **state)
{
	struct dma_fix *f = *state;
	uint64_t a, b, c;

	assert_int_equal(vf_dma_alloc(&f->d, 4096, 4096, &a), 0);
	assert_int_equal(vf_dma_alloc(&f->d, 1, 64 << 10, &b), 0);	/* rounds up to a page */
	assert_int_equal(b % (64 << 10), 0);
	assert_int_not_equal(a, b);
	assert_int_equal(vf_dma_alloc(&f->d, 8192, 4096, &c), 0);
	assert_true(c >= a + 4096 && (c + 8192 <= b || c >= b + 4096));
	assert_int_equal(vf_dma_alloc(&f->d, 0, 4096, &c), -EINVAL);
	assert_int_equal(vf_dma_alloc(&f->d, 4096, 3000, &c), -EINVAL);
	assert_int_equal(vf_dma_alloc(&f->d, DMA_BYTES + 4096, 4096, &c), -ENOMEM);
}

static void test_dma_exhaust(void **state)
{
	struct dma_fix *f = *state;
	uint64_t off[256 + 1];
	unsigned int n = 0;

	while (n <= 256 && vf_dma_alloc(&f->d, 4096, 4096, &off[n]) == 0)
		n++;
	assert_int_equal(n, DMA_BYTES / 4096);
	vf_dma_free(&f->d, off[17], 4096);
	assert_int_equal(vf_dma_alloc(&f->d, 4096, 4096, &off[256]), 0);
	assert_int_equal(off[256], off[17]);
}

/* A freed block is handed out again at once, to the next request that fits: the RM's channel
 * free returns only when no engine can touch the channel, so nothing waits for it here. */
static void test_dma_reuse(void **state)
{
	struct dma_fix *f = *state;
	uint64_t a, b;

	assert_int_equal(vf_dma_alloc(&f->d, 64 << 10, 4096, &a), 0);
	vf_dma_free(&f->d, a, 64 << 10);
	assert_int_equal(vf_dma_alloc(&f->d, 64 << 10, 4096, &b), 0);
	assert_int_equal(b, a);
}

#define PB_TEST(c) { (c)->name, test_pb, NULL, NULL, (void *)(c) }

/* ---- DMA allocator over a fake RM (the one owner of DMA memory) ---- */
#define FAKE_BYTES	(8u << 20)
#define FAKE_GRAIN	(64u << 10)
#define FAKE_GRAINS	(FAKE_BYTES / FAKE_GRAIN)

enum fake_mode { FAKE_OK, FAKE_NO_SYSMEM, FAKE_TWICE, FAKE_OUTSIDE };

struct fake_rm {
	enum fake_mode mode;
	uint64_t quota;			/* bytes the driver may hold (0: no limit) */
	uint8_t owner[FAKE_GRAINS];	/* 0 free, 1 someone else, 2 + handle: the driver */
	uint64_t held;
	uint32_t calls, puts;
	uint8_t *mem;
	struct vf_dma d;
};

static int fake_grow(void *ctx, uint64_t size, uint64_t *off, uint32_t *handle)
{
	struct fake_rm *r = ctx;
	uint32_t n = (uint32_t)(size / FAKE_GRAIN), run = 0;

	r->calls++;
	if (r->mode == FAKE_NO_SYSMEM)
		return -EOPNOTSUPP;
	if ((r->mode == FAKE_TWICE && r->calls > 1) || r->mode == FAKE_OUTSIDE) {
		/* a broken host: the same piece again, or one past the memory */
		*off = r->mode == FAKE_TWICE ? 0 : FAKE_BYTES - FAKE_GRAIN;
		*handle = 2 + r->calls;
		r->held += size;
		return 0;
	}
	if (size % FAKE_GRAIN)
		return -EINVAL;
	if (r->quota && r->held + size > r->quota)
		return -VGPU_EQUOTA;
	for (uint32_t i = 0; i < FAKE_GRAINS; i++) {
		run = r->owner[i] ? 0 : run + 1;
		if (run == n) {
			*off = (uint64_t)(i + 1 - n) * FAKE_GRAIN;
			*handle = 2 + r->calls;
			for (uint32_t k = i + 1 - n; k <= i; k++)
				r->owner[k] = (uint8_t)*handle;
			r->held += size;
			return 0;
		}
	}
	return -ENOMEM;
}

static void fake_put(void *ctx, uint32_t handle)
{
	struct fake_rm *r = ctx;

	r->puts++;
	if (r->mode == FAKE_TWICE || r->mode == FAKE_OUTSIDE)
		return;		/* its pieces are not in owner[] */
	for (uint32_t i = 0; i < FAKE_GRAINS; i++) {
		if (r->owner[i] == handle) {
			r->owner[i] = 0;
			r->held -= FAKE_GRAIN;
		}
	}
}

static struct fake_rm *fake_new(enum fake_mode mode, uint64_t quota)
{
	struct fake_rm *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->mode = mode;
	r->quota = quota;
	r->mem = aligned_alloc(4096, FAKE_BYTES);
	assert_non_null(r->mem);
	assert_int_equal(vf_dma_init(&r->d, r->mem, FAKE_BYTES, 1ull << 32), 0);
	vf_dma_set_backing(&r->d, fake_grow, fake_put, r);
	return r;
}

static void fake_del(struct fake_rm *r)
{
	vf_dma_fini(&r->d);
	free(r->mem);
	free(r);
}

/* Every page handed out lies in a grain the RM gave the driver, and none twice. */
static void test_dma_backed_owner(void **state)
{
	struct fake_rm *r = fake_new(FAKE_OK, 0);
	static uint8_t used[FAKE_BYTES / 4096];
	uint64_t off, total = 0;
	int ret;

	(void)state;
	memset(used, 0, sizeof(used));
	/* Someone else's MEMORY_SYSMEM (another client of the VF) before and between. */
	r->owner[0] = r->owner[40] = r->owner[100] = 1;
	while ((ret = vf_dma_alloc(&r->d, 4096, 4096, &off)) == 0) {
		assert_true(off % 4096 == 0 && off < FAKE_BYTES);
		assert_true(r->owner[off / FAKE_GRAIN] >= 2);
		assert_false(used[off / 4096]);
		used[off / 4096] = 1;
		total += 4096;
	}
	assert_int_equal(ret, -ENOMEM);
	assert_true(total == FAKE_BYTES - 3 * FAKE_GRAIN);	/* a 2 MiB chunk, then smaller */
	fake_del(r);
}

/* "Over quota" from the RM is not "no space". */
static void test_dma_backed_quota(void **state)
{
	struct fake_rm *r = fake_new(FAKE_OK, 3 * FAKE_GRAIN);
	uint64_t off;
	uint32_t n = 0;
	int ret;

	(void)state;
	while ((ret = vf_dma_alloc(&r->d, 4096, 4096, &off)) == 0)
		n++;
	assert_int_equal(ret, -VGPU_EQUOTA);
	assert_int_equal(n, 3 * FAKE_GRAIN / 4096);
	fake_del(r);
}

/* Empty chunks go back to the RM, but one. */
static void test_dma_backed_release(void **state)
{
	struct fake_rm *r = fake_new(FAKE_OK, 0);
	uint64_t off[3];

	(void)state;
	for (int i = 0; i < 3; i++)
		assert_int_equal(vf_dma_alloc(&r->d, 2u << 20, 4096, &off[i]), 0);
	assert_true(r->held == 6u << 20);
	for (int i = 0; i < 3; i++)
		vf_dma_free(&r->d, off[i], 2u << 20);
	assert_true(r->held == 2u << 20);
	assert_int_equal(r->puts, 2);
	assert_int_equal(vf_dma_alloc(&r->d, 4096, 4096, &off[0]), 0);
	assert_int_equal(r->calls, 3);	/* served from the chunk kept */
	fake_del(r);
}

/* A host that hands a piece out twice, or one past the memory: refused, given back, and
 * nothing of it is handed out. */
static void test_dma_backed_broken(void **state)
{
	static const enum fake_mode modes[] = { FAKE_TWICE, FAKE_OUTSIDE };

	(void)state;
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(modes); i++) {
		struct fake_rm *r = fake_new(modes[i], 0);
		uint64_t off, off2;

		if (modes[i] == FAKE_TWICE)
			assert_int_equal(vf_dma_alloc(&r->d, 4096, 4096, &off), 0);
		assert_int_equal(vf_dma_alloc(&r->d, VF_DMA_CHUNK, 4096, &off2), -EPROTO);
		assert_true(r->puts >= 1);
		assert_true(r->d.nr_chunks == (modes[i] == FAKE_TWICE ? 1u : 0u));
		fake_del(r);
	}
}

/* A host RM without MEMORY_SYSMEM: nobody else hands the memory out, the driver takes it all. */
static void test_dma_backed_none(void **state)
{
	struct fake_rm *r = fake_new(FAKE_NO_SYSMEM, 0);
	uint64_t off;

	(void)state;
	assert_int_equal(vf_dma_alloc(&r->d, FAKE_BYTES, 4096, &off), 0);
	assert_true(off == 0);
	assert_int_equal(r->calls, 1);
	fake_del(r);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(pb_cases) + 9];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(pb_cases); i++)
		t[n++] = (struct CMUnitTest)PB_TEST(&pb_cases[i]);
	t[n++] = (struct CMUnitTest){ "pushbuffer full: method dropped whole", test_pb_full,
				      NULL, NULL, NULL };
	t[n++] = (struct CMUnitTest){ "DMA alignment and bad sizes", test_dma_align, dma_setup,
				      dma_teardown, NULL };
	t[n++] = (struct CMUnitTest){ "DMA exhaustion and reuse", test_dma_exhaust, dma_setup,
				      dma_teardown, NULL };
	t[n++] = (struct CMUnitTest){ "DMA freed memory reused at once",
				      test_dma_reuse, dma_setup, dma_teardown, NULL };
	t[n++] = (struct CMUnitTest){ "RM-backed DMA: each page from the RM's, once",
				      test_dma_backed_owner, NULL, NULL, NULL };
	t[n++] = (struct CMUnitTest){ "RM-backed DMA: quota error stays distinct",
				      test_dma_backed_quota, NULL, NULL, NULL };
	t[n++] = (struct CMUnitTest){ "RM-backed DMA: empty chunks returned but one",
				      test_dma_backed_release, NULL, NULL, NULL };
	t[n++] = (struct CMUnitTest){ "RM-backed DMA: a broken host's piece is refused",
				      test_dma_backed_broken, NULL, NULL, NULL };
	t[n++] = (struct CMUnitTest){ "RM without MEMORY_SYSMEM: the driver owns it all",
				      test_dma_backed_none, NULL, NULL, NULL };
	return _cmocka_run_group_tests("vf_pb_dma", t, n, NULL, NULL);
}
