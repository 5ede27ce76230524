// SPDX-License-Identifier: MIT
/* Per-function client and object quotas, and VF teardown in bounded batches: a function at
 * its limit gets -VGPU_EQUOTA and nothing changes, its neighbour is unaffected, and another
 * VF's calls run between the batches of a large teardown (counted through the teardown
 * hook, with the lock-order validator watching). Runs against the real vgpu-gsp. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/lock.h"
#include "rm_test.h"

#define T_BATCH		4

static struct rm_fixture fx;

/* What the teardown hook saw. */
struct batch_log {
	unsigned int batches;
	unsigned int fn2_allocs;		/* objects VF 2 allocated from inside the hook */
	uint64_t fn1_count[256];		/* VF 1's object count at each batch */
	uint32_t fn2_client, fn2_device;
	uint32_t fn2_objs[256];
};

static struct batch_log blog;
static char lockdep_msg[128];

static void on_violation(const char *what)
{
	snprintf(lockdep_msg, sizeof(lockdep_msg), "%s", what);
}

/* Between two batches of VF 1's teardown: VF 2 allocates an object. Had the RM kept a
 * lock across the boundary, the validator would report it (or the call would block). */
static void on_batch(void *ctx, unsigned int fn, unsigned int batch)
{
	uint32_t h = 0;

	(void)ctx;
	if (fn != 1 || blog.batches >= VGPU_ARRAY_SIZE(blog.fn1_count))
		return;
	blog.batches = batch;
	blog.fn1_count[batch - 1] = rm_object_count(fx.rm, 1);
	if (!rm_alloc(fx.rm, 2, blog.fn2_client, blog.fn2_device, &h, VGPU_RM_CLASS_SUBDEVICE,
		      NULL, 0))
		blog.fn2_objs[blog.fn2_allocs++] = h;
}

static int setup(void **state)
{
	struct rm_config c = { .free_batch = T_BATCH, .teardown_batch = on_batch };

	(void)state;
	memset(&blog, 0, sizeof(blog));
	lockdep_msg[0] = '\0';
	return rm_fixture_up(&fx, &c);
}

static int teardown(void **state)
{
	(void)state;
	return rm_fixture_down_checked(&fx);
}

/* The object limit counts every client's objects of the function together; at the limit a
 * call fails with -VGPU_EQUOTA and changes nothing, another VF is unaffected, and a freed
 * object makes room again. */
static void test_object_limit(void **state)
{
	struct rm_quota q = { .objects = 8 };
	uint32_t hc[2], hd[2], hs[2], h = 0, x, hc2, hd2, hs2, dup = 0, mem;
	uint64_t before;
	unsigned int n = 0;

	(void)state;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
	/* two clients, each with a device and a subdevice, one with VRAM: 5 objects */
	assert_int_equal(rm_t_client(fx.rm, 1, &hc[0], &hd[0], &hs[0]), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &hc[1], &hd[1], &hs[1]), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc[0], hd[0], 1 << 20, &mem), 0);
	for (;;) {
		h = 0;
		int r = rm_alloc(fx.rm, 1, hc[n % 2], hd[n % 2], &h, VGPU_RM_CLASS_SUBDEVICE, NULL, 0);

		if (r) {
			assert_int_equal(r, -VGPU_EQUOTA);
			break;
		}
		n++;
		assert_true(n <= 8);
	}
	assert_int_equal(n, 8 - 5);
	/* refused: nothing allocated, nothing counted, on either client or by dup */
	before = rm_object_count(fx.rm, 1);
	assert_int_equal(before, 2 + 8);
	h = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, hc[1], hd[1], &h, VGPU_RM_CLASS_SUBDEVICE, NULL, 0),
			 -VGPU_EQUOTA);
	assert_int_equal(h, 0);
	assert_int_equal(rm_dup(fx.rm, 1, hc[0], hd[0], &dup, hc[0], mem), -VGPU_EQUOTA);
	assert_int_equal(dup, 0);
	assert_int_equal(rm_object_count(fx.rm, 1), before);
	/* a new client is not an object: it may be created, but holds nothing yet */
	assert_int_equal(rm_client_alloc(fx.rm, 1, &x), 0);
	h = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, x, x, &h, VGPU_RM_CLASS_DEVICE, NULL, 0), -VGPU_EQUOTA);
	assert_int_equal(rm_client_free(fx.rm, 1, x), 0);
	/* the other VF has no such limit */
	assert_int_equal(rm_t_client(fx.rm, 2, &hc2, &hd2, &hs2), 0);
	for (unsigned int i = 0; i < 16; i++) {
		h = 0;
		assert_int_equal(rm_alloc(fx.rm, 2, hc2, hd2, &h, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), 0);
	}
	assert_int_equal(rm_client_free(fx.rm, 2, hc2), 0);
	/* the limit cannot drop below what is in use; freeing makes room */
	q.objects = 7;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), -EBUSY);
	assert_int_equal(rm_free(fx.rm, 1, hc[0], hs[0]), 0);
	h = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hd[0], &h, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), 0);
	/* freeing a whole client gives back all of its objects */
	assert_int_equal(rm_client_free(fx.rm, 1, hc[0]), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc[1]), 0);
	q.objects = 2;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &hc[0], &hd[0], &hs[0]), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc[0]), 0);
	q.objects = 0;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
}

/* The client limit: the next client is refused and nothing changes. */
static void test_client_limit(void **state)
{
	struct rm_quota q = { .clients = 3 };
	uint32_t hc[4];

	(void)state;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(rm_client_alloc(fx.rm, 1, &hc[i]), 0);
	hc[3] = 0;
	assert_int_equal(rm_client_alloc(fx.rm, 1, &hc[3]), -VGPU_EQUOTA);
	assert_int_equal(hc[3], 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 3);
	assert_int_equal(rm_client_alloc(fx.rm, 2, &hc[3]), 0);	/* VF 2 unaffected */
	assert_int_equal(rm_client_free(fx.rm, 2, hc[3]), 0);
	q.clients = 2;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), -EBUSY);
	for (unsigned int i = 0; i < 3; i++)
		assert_int_equal(rm_client_free(fx.rm, 1, hc[i]), 0);
	q.clients = 0;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
}

/* A VF reset frees at most free_batch objects per batch, and between batches VF 2 gets
 * its calls through: one allocation per boundary, no lock-order report. */
static void test_teardown_batches(void **state)
{
	enum { CLIENTS = 3, PER = 20 };
	uint32_t hc[CLIENTS], hd[CLIENTS], hs[CLIENTS];
	uint64_t total;
	unsigned int min_batches;

	(void)state;
	for (unsigned int c = 0; c < CLIENTS; c++) {
		assert_int_equal(rm_t_client(fx.rm, 1, &hc[c], &hd[c], &hs[c]), 0);
		for (unsigned int i = 0; i < PER; i++) {
			uint32_t h = 0;

			assert_int_equal(rm_alloc(fx.rm, 1, hc[c], hd[c], &h, VGPU_RM_CLASS_SUBDEVICE,
						  NULL, 0), 0);
		}
	}
	total = rm_object_count(fx.rm, 1);
	assert_int_equal(total, CLIENTS * (1 + 2 + PER));
	assert_int_equal(rm_client_alloc(fx.rm, 2, &blog.fn2_client), 0);
	assert_int_equal(rm_alloc(fx.rm, 2, blog.fn2_client, blog.fn2_client, &blog.fn2_device,
				  VGPU_RM_CLASS_DEVICE, NULL, 0), 0);
	cmn_lockdep_set_handler(on_violation);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	cmn_lockdep_set_handler(NULL);
	assert_string_equal(lockdep_msg, "");
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	/* objects (not clients) bound each batch: at least this many boundaries */
	min_batches = (unsigned int)((CLIENTS * (2 + PER)) / T_BATCH) - 1;
	assert_true(blog.batches >= min_batches);
	assert_int_equal(blog.fn2_allocs, blog.batches);
	for (unsigned int b = 0; b < blog.batches; b++) {
		uint64_t prev = b ? blog.fn1_count[b - 1] : total;

		/* progress every batch, never more than a batch's objects plus the client */
		assert_true(blog.fn1_count[b] < prev);
		assert_true(prev - blog.fn1_count[b] <= T_BATCH + 1);
	}
	assert_int_equal(rm_object_count(fx.rm, 2), 2 + blog.fn2_allocs);
	assert_int_equal(rm_client_free(fx.rm, 2, blog.fn2_client), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_object_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_teardown_batches, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
