// SPDX-License-Identifier: MIT
/* SPSC ring: geometry checks, FIFO order, full/empty, a hostile peer's counters, and a
 * two-thread stream that ThreadSanitizer also runs. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/ring.h"

static const struct geom_case {
	const char *name;
	uint32_t nr, elem;
	size_t bytes_delta;	/* added to the exact size */
	int want;
} geom_cases[] = {
	{ "8 x 64", 8, 64, 0, 0 },
	{ "1 x 8", 1, 8, 0, 0 },
	{ "not a power of two", 6, 64, 0, -EINVAL },
	{ "zero slots", 0, 64, 0, -EINVAL },
	{ "slot not 8-aligned", 8, 12, 0, -EINVAL },
	{ "buffer one byte short", 8, 64, (size_t)-1, -EINVAL },
};

static void test_geometry(void **state)
{
	const struct geom_case *c = *state;
	size_t bytes = cmn_ring_bytes(c->nr, c->elem) + c->bytes_delta;
	void *mem = calloc(1, cmn_ring_bytes(c->nr ? c->nr : 1, c->elem) + 64);
	struct cmn_ring r = { 0 };

	assert_int_equal(cmn_ring_format(mem, bytes, c->nr, c->elem), c->want);
	assert_int_equal(cmn_ring_attach(&r, mem, bytes), c->want ? -EPROTO : 0);
	if (!c->want)
		assert_int_equal(cmn_ring_capacity(&r), c->nr);
	free(mem);
}

static void test_fifo_full_empty(void **state)
{
	size_t bytes = cmn_ring_bytes(4, 16);
	void *mem = calloc(1, bytes);
	struct cmn_ring prod = { 0 }, cons = { 0 };
	uint64_t v[2], out[2], big[3] = { 0 };

	(void)state;
	assert_int_equal(cmn_ring_format(mem, bytes, 4, 16), 0);
	assert_int_equal(cmn_ring_attach(&prod, mem, bytes), 0);
	assert_int_equal(cmn_ring_attach(&cons, mem, bytes), 0);
	assert_int_equal(cmn_ring_pop(&cons, out), -EAGAIN);
	for (uint64_t i = 0; i < 4; i++) {
		v[0] = i;
		v[1] = ~i;
		assert_int_equal(cmn_ring_push(&prod, v, sizeof(v)), 0);
	}
	assert_int_equal(cmn_ring_push(&prod, v, sizeof(v)), -EAGAIN);
	assert_int_equal(cmn_ring_count(&prod), 4);
	assert_int_equal(cmn_ring_push(&prod, big, 17), -EMSGSIZE);
	for (uint64_t i = 0; i < 4; i++) {
		assert_int_equal(cmn_ring_pop(&cons, out), 0);
		assert_int_equal(out[0], i);
		assert_int_equal(out[1], ~i);
	}
	assert_int_equal(cmn_ring_pop(&cons, out), -EAGAIN);
	/* Short pushes zero the rest of the slot: nothing stale leaks to the peer. */
	v[0] = 7;
	assert_int_equal(cmn_ring_push(&prod, v, 8), 0);
	assert_int_equal(cmn_ring_pop(&cons, out), 0);
	assert_int_equal(out[0], 7);
	assert_int_equal(out[1], 0);
	free(mem);
}

/* A peer that writes garbage counters must never make us read or write out of bounds. */
static void test_hostile_peer(void **state)
{
	size_t bytes = cmn_ring_bytes(8, 8);
	void *mem = calloc(1, bytes);
	struct vgpu_ring_hdr *h = mem;
	struct cmn_ring prod = { 0 }, cons = { 0 };
	uint64_t x = 1;

	(void)state;
	assert_int_equal(cmn_ring_format(mem, bytes, 8, 8), 0);
	assert_int_equal(cmn_ring_attach(&cons, mem, bytes), 0);
	assert_int_equal(cmn_ring_attach(&prod, mem, bytes), 0);
	__atomic_store_n(&h->head, 1000, __ATOMIC_RELEASE);	/* claims 1000 pending */
	assert_int_equal(cmn_ring_pop(&cons, &x), -EPROTO);
	__atomic_store_n(&h->head, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 8; i++)
		assert_int_equal(cmn_ring_push(&prod, &x, 8), 0);
	/* A consumer whose tail runs ahead of head looks full: the producer stops rather than
	 * trusting a count that cannot be. */
	__atomic_store_n(&h->tail, 1000, __ATOMIC_RELEASE);
	assert_int_equal(cmn_ring_push(&prod, &x, 8), -EAGAIN);
	/* A header that lies about its size is refused at attach. */
	h->nr_elems = 1u << 20;
	assert_int_equal(cmn_ring_attach(&cons, mem, bytes), -EPROTO);
	free(mem);
}

#define STREAM_N 200000

struct stream {
	struct cmn_ring r;
	void *mem;
	size_t bytes;
};

static void *producer(void *arg)
{
	struct stream *s = arg;
	struct cmn_ring r = { 0 };

	if (cmn_ring_attach(&r, s->mem, s->bytes))
		return NULL;
	for (uint64_t i = 1; i <= STREAM_N; i++) {
		uint64_t v[4] = { i, i * 3, i ^ 0x5a5a, ~i };

		while (cmn_ring_push(&r, v, sizeof(v)) == -EAGAIN)
			cmn_cpu_relax();
	}
	return NULL;
}

static void test_two_threads(void **state)
{
	struct stream s = { .bytes = cmn_ring_bytes(64, 32) };
	pthread_t t;
	uint64_t next = 1;

	(void)state;
	s.mem = calloc(1, s.bytes);
	assert_int_equal(cmn_ring_format(s.mem, s.bytes, 64, 32), 0);
	assert_int_equal(cmn_ring_attach(&s.r, s.mem, s.bytes), 0);
	assert_int_equal(pthread_create(&t, NULL, producer, &s), 0);
	while (next <= STREAM_N) {
		uint64_t v[4];
		int ret = cmn_ring_pop(&s.r, v);

		if (ret == -EAGAIN) {
			cmn_cpu_relax();
			continue;
		}
		/* Every element arrives once, in order, never torn. */
		assert_int_equal(ret, 0);
		assert_int_equal(v[0], next);
		assert_int_equal(v[1], next * 3);
		assert_int_equal(v[2], next ^ 0x5a5a);
		assert_int_equal(v[3], ~next);
		next++;
	}
	pthread_join(t, NULL);
	assert_int_equal(cmn_ring_count(&s.r), 0);
	free(s.mem);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(geom_cases) + 3];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(geom_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = geom_cases[i].name,
						  .test_func = test_geometry,
						  .initial_state = (void *)&geom_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fifo_full_empty);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_hostile_peer);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_two_threads);
	return _cmocka_run_group_tests("ring", tests, n, NULL, NULL);
}
