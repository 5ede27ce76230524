// SPDX-License-Identifier: MIT
/* Privileged state: the GSP's write API refuses bad input and changes nothing; the region
 * can be opened by fd as another process would, and the model's view follows it. */
#include <sys/mman.h>

#include "gpu_test.h"

static struct gpu *dev(void)
{
	struct gpu_config cfg = { .vram_size = 64 * VGPU_MiB, .nr_vfs = 3, .nr_engines = 2 };
	struct gpu *g;

	assert_int_equal(gpu_create(&cfg, &g), 0);
	return g;
}

static struct gpu_priv_chan good_chan(void)
{
	return (struct gpu_priv_chan){ .runlist = 1, .pdb = 0x1000, .gpfifo_va = 0x10000,
				       .gpfifo_entries = 64, .userd_aper = VGPU_APER_VRAM,
				       .userd_addr = 0x2000 };
}

enum op { OP_PART, OP_CHAN, OP_RUNLIST, OP_SCHED, OP_SCHED_FN };

static const struct priv_case {
	const char *name;
	enum op op;
	unsigned int fn;
	uint64_t a, b;			/* partition base/size, runlist id/mask, weight,
					 * channel id/GP ring VA (64 entries) if not 0 */
	bool bad_entries;		/* channel: 48 GP entries (not a power of two) */
	int want;
} priv_cases[] = {
	{ "partition ok", OP_PART, 1, 16 * VGPU_MiB, 8 * VGPU_MiB, false, 0 },
	{ "partition unaligned", OP_PART, 1, 16 * VGPU_MiB + 4096, 8 * VGPU_MiB, false, -EINVAL },
	{ "partition past VRAM", OP_PART, 1, 60 * VGPU_MiB, 8 * VGPU_MiB, false, -EINVAL },
	{ "partition overlaps fn 2", OP_PART, 1, 2 * VGPU_MiB, 4 * VGPU_MiB, false, -EBUSY },
	{ "partition of a missing VF", OP_PART, 9, 32 * VGPU_MiB, 2 * VGPU_MiB, false, -EINVAL },
	{ "channel ok", OP_CHAN, 1, 5, 0, false, 0 },
	{ "channel id out of range", OP_CHAN, 1, 64, 0, false, -EINVAL },
	{ "channel twice", OP_CHAN, 1, 3, 0, false, -EEXIST },
	{ "GPFIFO not a power of two", OP_CHAN, 1, 5, 0,
	  true, -EINVAL },
	{ "GPFIFO ends at the VA limit", OP_CHAN, 1, 5, VGPU_GMMU_VA_LIMIT - 64 * 8, false, 0 },
	{ "GPFIFO crosses the VA limit", OP_CHAN, 1, 5, VGPU_GMMU_VA_LIMIT - 8, false, -EINVAL },
	{ "GPFIFO at the VA limit", OP_CHAN, 1, 5, VGPU_GMMU_VA_LIMIT, false, -EINVAL },
	{ "GPFIFO wraps past 2^64", OP_CHAN, 1, 5, 0xfffffffffffffff8ull, false, -EINVAL },
	{ "runlist of another engine", OP_RUNLIST, 1, 0, VGPU_BIT(3), false, -EINVAL },
	{ "runlist with a free channel", OP_RUNLIST, 1, 1, VGPU_BIT(4), false, -EINVAL },
	{ "runlist ok", OP_RUNLIST, 1, 1, VGPU_BIT(3), false, 0 },
	{ "runlist id past engines", OP_RUNLIST, 1, 2, 0, false, -EINVAL },
	{ "unknown policy", OP_SCHED, 0, 7, 0, false, -EINVAL },
	{ "weights over 1000", OP_SCHED_FN, 2, 600, 0, false, -EINVAL },
	{ "weight ok", OP_SCHED_FN, 2, 400, 0, false, 0 },
};

static void test_priv(void **state)
{
	const struct priv_case *c = *state;
	struct gpu *g = dev();
	struct gpu_priv *p = gpu_priv_get(g);
	struct gpu_priv_chan ch = good_chan();
	struct gpu_priv_sched_fn s = { .enabled = 1, .weight = 600 };
	struct gpu_priv_shared *before = malloc(sizeof(*before));
	int ret = 0;

	/* Common starting point: fn 2 owns [0, 8M), fn 1 has channel 3 on runlist 1. */
	assert_int_equal(gpu_priv_partition_set(p, 2, 0, 8 * VGPU_MiB), 0);
	assert_int_equal(gpu_priv_chan_alloc(p, 1, 3, &ch), 0);
	assert_int_equal(gpu_priv_sched_fn_set(p, 1, &s), 0);
	memcpy(before, gpu_priv_shared(p), sizeof(*before));
	switch (c->op) {
	case OP_PART:
		ret = gpu_priv_partition_set(p, c->fn, c->a, c->b);
		break;
	case OP_CHAN:
		if (c->bad_entries)
			ch.gpfifo_entries = 48;
		if (c->b)
			ch.gpfifo_va = c->b;
		ret = gpu_priv_chan_alloc(p, c->fn, (unsigned int)c->a, &ch);
		break;
	case OP_RUNLIST:
		ret = gpu_priv_runlist_set(p, c->fn, (unsigned int)c->a, c->b);
		break;
	case OP_SCHED:
		ret = gpu_priv_sched_set(p, (enum gpu_sched_policy)c->a, 0, 0);
		break;
	case OP_SCHED_FN:
		s.weight = c->a;
		ret = gpu_priv_sched_fn_set(p, c->fn, &s);
		break;
	}
	assert_int_equal(ret, c->want);
	if (ret)	/* refused: not one byte of the region changed */
		assert_memory_equal(before, gpu_priv_shared(p), sizeof(*before));
	else
		assert_true(gpu_priv_shared(p)->gen > before->gen);
	free(before);
	gpu_destroy(g);
}

/* The GSP in another process maps the region by fd; the model sees its writes. */
static void test_priv_by_fd(void **state)
{
	struct gpu *g = dev();
	struct gpu_priv *p;
	struct gpu_priv_chan ch = good_chan();
	struct gpu_chan_status st;
	const uint64_t *ro;

	(void)state;
	assert_int_equal(gpu_priv_open(gpu_priv_fd(g), &p), 0);
	gpu_priv_set_kick_fd(p, gpu_priv_kick_fd(g));	/* as the GSP process would */
	assert_int_equal(gpu_priv_partition_set(p, 3, 32 * VGPU_MiB, 4 * VGPU_MiB), 0);
	assert_non_null(gpu_fn_vram_ptr(g, 3, 4 * VGPU_MiB - 1, 1));
	assert_null(gpu_fn_vram_ptr(g, 3, 4 * VGPU_MiB, 1));
	assert_int_equal(gpu_priv_chan_alloc(p, 3, 9, &ch), 0);
	assert_int_equal(gpu_chan_status(g, 3, 9, &st), 0);
	assert_int_equal(st.state, GPU_CHAN_STATE_IDLE);
	assert_int_equal(gpu_priv_chan_free(p, 3, 9), 0);
	assert_int_equal(gpu_chan_status(g, 3, 9, &st), 0);
	assert_int_equal(st.state, GPU_CHAN_STATE_FREE);
	assert_int_equal(gpu_priv_chan_free(p, 3, 9), -ENOENT);
	gpu_priv_close(p);
	/* A read-only mapping (the host RM's view) reads the same layout. */
	ro = mmap(false, sizeof(struct gpu_priv_shared), PROT_READ, MAP_SHARED, gpu_priv_fd(g), 0);
	assert_true(ro != MAP_FAILED);
	assert_true(ro[0] == GPU_PRIV_MAGIC);
	munmap((void *)ro, sizeof(struct gpu_priv_shared));
	gpu_destroy(g);
}

/* The owner drops its writer once a GSP runs: the handle is gone, its read-only view
 * stays, and a writer opened by fd (the GSP's) still programs the device. */
static void test_drop_writer(void **state)
{
	struct gpu *g = dev();
	const struct gpu_priv_shared *view = gpu_priv_view(g);
	struct gpu_priv *p;

	(void)state;
	assert_non_null(gpu_priv_get(g));
	assert_ptr_not_equal(gpu_priv_shared(gpu_priv_get(g)), view);
	gpu_priv_drop_writer(g);
	gpu_priv_drop_writer(g);	/* idempotent */
	assert_null(gpu_priv_get(g));
	assert_true(view->magic == GPU_PRIV_MAGIC);
	assert_int_equal(gpu_priv_open(gpu_priv_fd(g), &p), 0);
	assert_int_equal(gpu_priv_partition_set(p, 2, 8 * VGPU_MiB, 2 * VGPU_MiB), 0);
	assert_true(view->fns[2].part_size == 2 * VGPU_MiB);
	assert_non_null(gpu_fn_vram_ptr(g, 2, 2 * VGPU_MiB - 1, 1));
	gpu_priv_close(p);
	gpu_destroy(g);
}

static void test_bad_config(void **state)
{
	struct gpu_config cfg = { .vram_size = 3 * VGPU_MiB };
	struct gpu *g = NULL;

	(void)state;
	assert_int_equal(gpu_create(&cfg, &g), -EINVAL);
	cfg = (struct gpu_config){ .vram_size = 64 * VGPU_MiB, .nr_vfs = 64 };
	assert_int_equal(gpu_create(&cfg, &g), -EINVAL);
	cfg = (struct gpu_config){ .vram_size = 64 * VGPU_MiB, .nr_engines = 5 };
	assert_int_equal(gpu_create(&cfg, &g), -EINVAL);
	assert_null(g);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(priv_cases) + 3];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(priv_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = priv_cases[i].name, .test_func = test_priv,
						  .initial_state = (void *)&priv_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_priv_by_fd);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_drop_writer);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_bad_config);
	return _cmocka_run_group_tests("gpu_priv", tests, n, NULL, NULL);
}
