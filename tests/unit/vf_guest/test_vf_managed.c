// SPDX-License-Identifier: MIT
/* Managed memory of the VF driver against a real vgpud (../../bin/vgpud next to this
 * binary, in a private runtime/state dir, one 512 MiB slice with 32 MiB of DMA memory):
 * the HMM scenarios that apply to managed VF memory. Each case opens the VF, checks the
 * data the GPU and the CPU see and the counters, and closes it. Skipped with the reason
 * when vgpud is not built. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/clock.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/vft/vft.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define UUID		"7e570000-0000-4000-8000-00000000aa01"
#define MVA		(1ull << 40)
#define M2		(2ull << 20)
#define PG		4096ull
#define WAIT_NS		(30ull * 1000 * 1000 * 1000)

/* ---- per-case fixture ------------------------------------------------------------------ */

struct fx {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch[2];
	struct vgpu_managed *m;
	uint32_t *p;
	uint64_t size;
};

static uint32_t word(size_t i, uint32_t bias)
{
	return (uint32_t)i * 2654435761u + bias;
}

static void fill(uint32_t *p, size_t from, size_t n, uint32_t bias)
{
	for (size_t i = from; i < from + n; i++)
		p[i] = word(i - from, bias);
}

static void check(const uint32_t *p, size_t from, size_t n, uint32_t bias)
{
	for (size_t i = from; i < from + n; i++)
		if (p[i] != word(i - from, bias))
			fail_msg("word %zu: %#x, want %#x", i, p[i], word(i - from, bias));
}

/* Open the VF, start managed memory with @o, an address space, two replayable channels
 * and a managed allocation of @size. */
static void fx_open(struct fx *f, const struct vgpu_managed_opts *o, uint64_t size)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_channel_opts co = { .replayable = true };
	int ret;

	vfx_skip_if_down();
	memset(f, 0, sizeof(*f));
	assert_int_equal(vfx_vf_open(&vo, &f->vf), 0);
	assert_int_equal(vgpu_managed_init(f->vf, o), 0);
	assert_int_equal(vgpu_vaspace_create(f->vf, &f->as), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch[i]), 0);
	ret = vgpu_mem_alloc_managed(f->as, MVA, size, &f->m);
	if (ret)
		fail_msg("managed allocation: %s (%s)", vgpu_vf_strerror(ret),
			 vgpu_vf_last_error(f->vf));
	f->p = vgpu_managed_cpu(f->m);
	f->size = size;
}

static void fx_close(struct fx *f)
{
	vfx_vf_close(f->vf);	/* managed memory goes first (its close hook) */
}

/* Submit @pb's methods on channel @c; the fence to @fe. */
static void submit(struct fx *f, int c, const struct vgpu_pb *pb, struct vgpu_fence *fe)
{
	assert_int_equal(pb->err, 0);
	assert_int_equal(vgpu_submit(f->ch[c], pb->dw, pb->len, fe), 0);
}

/* Wait for @fe; a failure names the channel's error and fault address. */
static void fence_ok(struct fx *f, int c, const struct vgpu_fence *fe)
{
	int ret = vgpu_fence_wait(fe, WAIT_NS);
	uint32_t code = 0;
	uint64_t va = 0;

	if (!ret)
		return;
	vgpu_channel_error(f->ch[c], &code, &va);
	fail_msg("fence: %s (channel error %u, fault VA %#llx; %s)", vgpu_vf_strerror(ret),
		 code, (unsigned long long)va, vgpu_vf_last_error(f->vf));
}

static void gpu_copy(struct fx *f, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
	uint32_t dw[32];
	struct vgpu_pb pb;
	struct vgpu_fence fe;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_copy(&pb, MVA + src_off, MVA + dst_off, len);
	submit(f, 0, &pb, &fe);
	fence_ok(f, 0, &fe);
}

static void gpu_fill(struct fx *f, int c, uint64_t off, uint64_t len, uint32_t v,
		     struct vgpu_fence *fe)
{
	uint32_t dw[32];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_fill(&pb, MVA + off, len, v);
	submit(f, c, &pb, fe);
}

/* ---- cases ---------------------------------------------------------------------------- */

/* HMM-11/13 on a VF: the GPU reads CPU data through faults (migrated to VRAM, replayed),
 * the CPU reads the GPU's result back through its own faults. */
static void test_fault_migrate_replay(void **state)
{
	struct fx f;
	struct vgpu_managed_stats st;
	size_t words = M2 / 4;

	(void)state;
	fx_open(&f, NULL, 2 * M2);
	fill(f.p, 0, words, 1);
	gpu_copy(&f, 0, M2, M2);
	vgpu_managed_get_stats(f.vf, &st);
	print_message("%llu fault entries, %llu prefetched, %llu blocks, %llu replays\n",
		      (unsigned long long)st.fault_entries, (unsigned long long)st.prefetched,
		      (unsigned long long)st.blocks, (unsigned long long)st.replays);
	assert_true(st.fault_entries > 0);
	assert_true(st.replays > 0);
	assert_true(st.migrated_to_device >= M2 / PG);	/* the source, then the destination */
	/* HMM-41: the tree prefetch turns a stream of page faults into a few per block */
	assert_true(st.prefetched > 0);
	assert_true(st.fault_entries < 2 * M2 / PG / 4);
	assert_int_equal(vgpu_managed_resident(f.m, 0, 2 * M2), 2 * M2 / PG);
	check(f.p, words, words, 1);		/* CPU faults bring the copy back */
	check(f.p, 0, words, 1);
	vgpu_managed_get_stats(f.vf, &st);
	assert_true(st.cpu_faults > 0);
	assert_int_equal(st.migrated_to_cpu, 2 * M2 / PG);
	assert_int_equal(vgpu_managed_resident(f.m, 0, 2 * M2), 0);
	assert_int_equal(st.pool_used, 0);
	assert_int_equal(st.unserviced, 0);
	fx_close(&f);
}

/* CPU fault-back at a 64 KiB granule: one CPU fault per granule. */
static void test_cpu_fault_back(void **state)
{
	struct vgpu_managed_opts o = { .granule = 64 << 10 };
	struct vgpu_prefetch_result r;
	struct vgpu_managed_stats st;
	struct fx f;

	(void)state;
	fx_open(&f, &o, M2);
	fill(f.p, 0, M2 / 4, 7);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, M2, VGPU_LOC_DEVICE, &r), 0);
	assert_int_equal(r.moved, M2 / PG);
	assert_int_equal(vgpu_managed_resident(f.m, 0, M2), M2 / PG);
	check(f.p, 0, M2 / 4, 7);
	vgpu_managed_get_stats(f.vf, &st);
	/* one per granule, and one more when DMA memory is not 64 KiB aligned in the BAR */
	assert_in_range(st.cpu_faults, M2 / (64 << 10), M2 / (64 << 10) + 1);
	assert_int_equal(vgpu_managed_resident(f.m, 0, M2), 0);
	fx_close(&f);
}

/* Prefetch: whole range to VRAM and mapped, so the GPU runs without a single fault. */
static void test_prefetch(void **state)
{
	struct vgpu_prefetch_result r;
	struct vgpu_managed_stats st;
	struct fx f;

	(void)state;
	fx_open(&f, NULL, 2 * M2);
	fill(f.p, 0, M2 / 4, 3);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, 2 * M2, VGPU_LOC_DEVICE, &r), 0);
	assert_int_equal(r.pages, 2 * M2 / PG);
	assert_int_equal(r.moved, 2 * M2 / PG);
	assert_int_equal(r.no_room, 0);
	gpu_copy(&f, 0, M2, M2);
	vgpu_managed_get_stats(f.vf, &st);
	assert_int_equal(st.fault_entries, 0);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, 2 * M2, VGPU_LOC_CPU, &r), 0);
	assert_int_equal(r.moved, 2 * M2 / PG);
	vgpu_managed_get_stats(f.vf, &st);
	assert_int_equal(st.cpu_faults, 0);	/* brought back explicitly */
	check(f.p, M2 / 4, M2 / 4, 3);
	fx_close(&f);
}

/* Advice: PREFER_CPU pages are mapped remote for the GPU (nothing migrates). */
static void test_advise_remote(void **state)
{
	struct vgpu_managed_stats st;
	struct fx f;

	(void)state;
	fx_open(&f, NULL, 2 * M2);
	fill(f.p, 0, M2 / 4, 9);
	assert_int_equal(vgpu_mem_advise(f.m, 0, 2 * M2, VGPU_ADVISE_PREFER_CPU), 0);
	assert_int_equal(vgpu_mem_advise(f.m, 1, PG, VGPU_ADVISE_PREFER_CPU), -EINVAL);
	gpu_copy(&f, 0, M2, M2);
	vgpu_managed_get_stats(f.vf, &st);
	assert_true(st.fault_entries > 0);
	assert_true(st.mapped_remote > 0);
	assert_int_equal(st.migrated_to_device, 0);
	assert_int_equal(vgpu_managed_resident(f.m, 0, 2 * M2), 0);
	check(f.p, M2 / 4, M2 / 4, 9);
	fx_close(&f);
}

/* Batch dedup: two channels fault on the same block; one service pass takes both
 * entries, services the block once and replays once. */
static void test_batch_dedup(void **state)
{
	struct vgpu_managed_opts o = { .no_thread = true };
	struct vgpu_managed_stats st;
	struct vgpu_fence fe[2];
	struct fx f;
	int n = 0;

	(void)state;
	fx_open(&f, &o, M2);
	gpu_fill(&f, 0, 0, PG, 0x11111111, &fe[0]);
	gpu_fill(&f, 1, 0, PG, 0x11111111, &fe[1]);
	while ((n = vgpu_managed_pending(f.vf)) < 2)
		usleep(1000);
	assert_int_equal(n, 2);
	assert_int_equal(vgpu_managed_service(f.vf, 0), 2);
	vgpu_managed_get_stats(f.vf, &st);
	assert_int_equal(st.fault_entries, 2);
	assert_int_equal(st.batches, 1);
	assert_int_equal(st.blocks, 1);
	assert_int_equal(st.dedup, 1);
	assert_int_equal(st.replays, 1);
	while (!(vgpu_fence_done(&fe[0]) && vgpu_fence_done(&fe[1])))
		vgpu_managed_service(f.vf, 1000 * 1000);
	assert_int_equal(f.p[0], 0x11111111);
	assert_int_equal(f.p[PG / 4 - 1], 0x11111111);
	fx_close(&f);
}

/* A policy clock 20 times slower than real time: GPU and CPU taking turns on one page
 * a few milliseconds apart are "within 500 us" for the thrashing policy. */
static uint64_t slow_clock(void)
{
	return cmn_now_ns() / 20;
}

/* HMM-40 on a VF: the GPU and the CPU write one page in turns; the thrashing counters
 * move, and the data is always the last writer's. */
static void test_thrashing(void **state)
{
	struct vgpu_managed_opts o = { .clock_ns = slow_clock, .no_prefetch = true };
	struct vgpu_managed_stats st;
	struct fx f;

	(void)state;
	fx_open(&f, &o, M2);
	for (uint32_t round = 0; round < 8; round++) {
		struct vgpu_fence fe;

		gpu_fill(&f, 0, 0, PG, 0xa0000000u + round, &fe);
		fence_ok(&f, 0, &fe);
		assert_int_equal(f.p[5], 0xa0000000u + round);	/* the CPU takes it back */
		f.p[6] = round;
	}
	vgpu_managed_get_stats(f.vf, &st);
	assert_true(st.thrash_events >= 3);
	assert_true(st.throttled + st.pinned > 0);
	assert_int_equal(f.p[6], 7);
	fx_close(&f);
}

/* HMM-39 on a VF: eviction before a reset brings everything back; after the reset (VRAM
 * scrubbed) and recovery the data is intact in system memory. */
static void test_evict_before_reset(void **state)
{
	struct vgpu_vf_lost lost;
	struct fx f;

	(void)state;
	fx_open(&f, NULL, 2 * M2);
	fill(f.p, 0, 2 * M2 / 4, 5);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, 2 * M2, VGPU_LOC_DEVICE, NULL), 0);
	gpu_copy(&f, 0, M2, M2 / 2);	/* the device changes data only it holds */
	assert_int_equal(vgpu_managed_evict_all(f.vf), 2 * M2 / PG);
	assert_int_equal(vgpu_managed_resident(f.m, 0, 2 * M2), 0);
	vgpu_managed_fini(f.vf);
	assert_int_equal(vfx_ctl(&vfx_group.fx, "reset", UUID, NULL), 0);
	while (vgpu_vf_recover(f.vf, &lost))	/* retried until the VF is usable */
		usleep(10 * 1000);
	/* the DMA memory survived the reset: the evicted data is there */
	check(f.p, M2 / 4, M2 / 8, 5);
	check(f.p, 0, M2 / 4, 5);
	fx_close(&f);
}

/* vgpu_vf_close brings device-resident pages back first: a second view of the DMA memory,
 * kept past the close, sees what only the device had written. */
static void test_close_migrates_back(void **state)
{
	struct vgpu_fence fe;
	uint32_t *view;
	struct fx f;

	(void)state;
	fx_open(&f, NULL, M2);
	fill(f.p, 0, M2 / 4, 2);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, M2, VGPU_LOC_DEVICE, NULL), 0);
	gpu_fill(&f, 0, 0, M2, 0x5a5a5a5a, &fe);
	fence_ok(&f, 0, &fe);
	view = mremap(f.p, 0, M2, MREMAP_MAYMOVE);
	assert_true(view != MAP_FAILED);
	/* the copy inherits the device pages' PROT_NONE */
	assert_int_equal(mprotect(view, M2, PROT_READ), 0);
	assert_int_not_equal(view[0], 0x5a5a5a5a);	/* still only in VRAM */
	fx_close(&f);
	for (size_t i = 0; i < M2 / 4; i += 997)
		assert_int_equal(view[i], 0x5a5a5a5a);
	munmap(view, M2);
}

/* HMM-38 on a VF: a 2 MiB pool and a 4 MiB prefetch: half moves, the rest stays and the
 * call says so; everything reads right. */
static void test_quota_partial(void **state)
{
	struct vgpu_managed_opts o = { .pool_bytes = M2 };
	struct vgpu_prefetch_result r;
	struct vgpu_managed_stats st;
	struct fx f;

	(void)state;
	fx_open(&f, &o, 2 * M2);
	fill(f.p, 0, 2 * M2 / 4, 4);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, 2 * M2, VGPU_LOC_DEVICE, &r), 0);
	assert_int_equal(r.moved, M2 / PG);
	assert_int_equal(r.no_room, M2 / PG);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "pool is full"));
	vgpu_managed_get_stats(f.vf, &st);
	assert_int_equal(st.pool_pages, M2 / PG);
	assert_int_equal(st.pool_used, M2 / PG);
	check(f.p, 0, 2 * M2 / 4, 4);
	fx_close(&f);
}

/* Bad input changes nothing. */
static void test_errors(void **state)
{
	struct vgpu_managed *m;
	struct fx f;

	(void)state;
	fx_open(&f, NULL, M2);
	assert_int_equal(vgpu_managed_init(f.vf, NULL), -EEXIST);
	assert_int_equal(vgpu_mem_alloc_managed(f.as, MVA + 4096, M2, &m), -EINVAL);
	assert_int_equal(vgpu_mem_alloc_managed(f.as, MVA, M2, &m), -EEXIST);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, 2 * M2, VGPU_LOC_DEVICE, NULL), -EINVAL);
	assert_int_equal(vgpu_mem_prefetch(f.m, 0, M2, 7, NULL), -EINVAL);
	assert_int_equal(vgpu_managed_resident(f.m, 0, M2), 0);
	fx_close(&f);
}

/* The guest-suite case (vft_managed_case) passes here too. */
static void test_vft_case(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_vf *vf;
	char why[160] = "";

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	if (vft_managed_case(vf, why, sizeof(why)))
		fail_msg("%s", why);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_fault_migrate_replay, vfx_case_teardown),
		cmocka_unit_test_teardown(test_cpu_fault_back, vfx_case_teardown),
		cmocka_unit_test_teardown(test_prefetch, vfx_case_teardown),
		cmocka_unit_test_teardown(test_advise_remote, vfx_case_teardown),
		cmocka_unit_test_teardown(test_batch_dedup, vfx_case_teardown),
		cmocka_unit_test_teardown(test_thrashing, vfx_case_teardown),
		cmocka_unit_test_teardown(test_evict_before_reset, vfx_case_teardown),
		cmocka_unit_test_teardown(test_close_migrates_back, vfx_case_teardown),
		cmocka_unit_test_teardown(test_quota_partial, vfx_case_teardown),
		cmocka_unit_test_teardown(test_errors, vfx_case_teardown),
		cmocka_unit_test_teardown(test_vft_case, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF("32M"), "/dev/shm/vgpu-managed", UUID, "vgpu-512M");
}
