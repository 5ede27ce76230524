// SPDX-License-Identifier: MIT
/* A VF's scrub at reset goes to the GSP in bounded SCRUB RPCs, so the other functions on
 * its lane are served between two of them: with two lanes, VF 3 (a 768 MiB slice with its
 * own memfd) shares lane 1 with VF 1. The slice is scrubbed in three 256 MiB RPCs, and VF
 * 1's GSP_ECHO, started between the first and the second (gsp_send_hook holds the second
 * until it is answered), is answered with exactly one chunk done in the GSP. One RPC for
 * the whole slice would hold the lane for all of it (0.8 s for 4 GiB; past other
 * functions' deadlines from about 10 GiB). Through the real vgpu-gsp; ordered by the hook and the
 * GSP's scrub count, not by time. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "rm_test.h"

#define S_VRAM		(1ull << 30)
#define S_CHUNK		(256ull << 20)	/* the RM's SCRUB size (RM_SCRUB_CHUNK) */
#define S3_BASE		S_CHUNK
#define S3_SIZE		(3 * S_CHUNK)
#define S1_BASE		(16ull << 20)
#define S1_SIZE		(16ull << 20)

static struct {
	struct gpu *gpu;
	struct pma *pma;
	struct iommu *iommu;
	struct rm_hw hw;
	struct rm *rm;
} sx;

/* What VF 1 saw, and the hand-off between the hook and its thread. */
static struct {
	_Atomic unsigned int chunks;	/* VF 3's SCRUB RPCs about to be sent */
	_Atomic bool go, done, stop;
	int echo_ret, info_ret;
	uint64_t scrubs_seen;		/* the GSP's scrub count when VF 1 asked */
	uint32_t hc, hs;		/* VF 1's client and subdevice */
} vf1;

static void sx_down(void)
{
	rm_device_destroy(sx.rm);
	if (sx.gpu) {
		gpu_vram_slice_unmap(sx.gpu, 3);
		gpu_destroy(sx.gpu);
	}
	pma_destroy(sx.pma);
	iommu_destroy(sx.iommu);
	memset(&sx, 0, sizeof(sx));
}

static int sx_build(void)
{
	struct gpu_config gc = { .vram_size = S_VRAM, .nr_vfs = 3, .nr_engines = 1 };
	struct pma_region_desc rd = { .base = 0, .size = S_VRAM, .performance = 1 };
	/* fn % 2: VF 1 and 3 share a lane */
	static const struct gsp_config gsp = { .nr_lanes = 2 };
	struct rm_config rc = { .ops = &rm_hw_ops, .ops_ctx = &sx.hw, .gsp = &gsp };
	struct rm_partition p1 = { .base = S1_BASE, .size = S1_SIZE };
	struct rm_partition p3 = { .base = S3_BASE, .size = S3_SIZE };

	if (iommu_create(NULL, &sx.iommu))
		return -1;
	gc.iommu = sx.iommu;
	if (gpu_create(&gc, &sx.gpu))
		return -1;
	sx.pma = pma_create(NULL);
	if (!sx.pma || pma_region_add(sx.pma, &rd, NULL, 0) < 0)
		return -1;
	sx.hw = (struct rm_hw){ .gpu = sx.gpu, .iommu = sx.iommu };
	rc.pma = sx.pma;
	if (rm_device_create(&rc, &sx.rm))
		return -1;
	/* VF 3's slice has its own memfd: the GSP scrubs it. */
	if (gpu_vram_slice_map(sx.gpu, 3, S3_BASE, S3_SIZE, -1) ||
	    rm_vf_partition_set(sx.rm, 3, &p3) || rm_vf_partition_set(sx.rm, 1, &p1))
		return -1;
	return 0;
}

static int setup(void **state)
{
	(void)state;
	memset(&sx, 0, sizeof(sx));
	memset(&vf1, 0, sizeof(vf1));
	if (!sx_build())
		return 0;
	sx_down();		/* cmocka runs no teardown after a failed setup */
	return -1;
}

static int teardown(void **state)
{
	int leak = (int)(rm_object_count(sx.rm, 1) + rm_object_count(sx.rm, 3));

	(void)state;
	gsp_send_hook = NULL;
	for (unsigned int fn = 0; fn < 4; fn++)
		leak += (int)gsp_inflight(rm_gsp(sx.rm), fn);
	sx_down();
	return leak ? -1 : 0;
}

/* Before VF 3's second SCRUB is sent: let VF 1 make its calls and wait for their answers. */
static void between_chunks(struct gsp *g, unsigned int gfid, uint32_t function)
{
	(void)g;
	if (gfid != 3 || function != VGPU_RPC_FN_SCRUB || atomic_fetch_add(&vf1.chunks, 1) != 1)
		return;
	atomic_store(&vf1.go, true);
	while (!atomic_load(&vf1.done))
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
}

/* VF 1: a GSP_ECHO through the RM, then the GSP's scrub count, both on lane 1. */
static void *vf1_main(void *arg)
{
	char msg[16] = "lane 1 is free", back[16];
	struct vgpu_rpc_info info;
	size_t len = sizeof(msg);

	(void)arg;
	while (!atomic_load(&vf1.go) && !atomic_load(&vf1.stop))
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	if (!atomic_load(&vf1.go))
		return NULL;
	memcpy(back, msg, sizeof(msg));
	vf1.echo_ret = rm_control(sx.rm, 1, vf1.hc, vf1.hs, VGPU_RM_CTRL_GSP_ECHO, back, &len,
				  sizeof(back));
	if (!vf1.echo_ret && (len != sizeof(msg) || memcmp(back, msg, sizeof(msg))))
		vf1.echo_ret = -EBADMSG;
	vf1.info_ret = gsp_call(rm_gsp(sx.rm), 1, VGPU_RPC_FN_GET_INFO, NULL, 0, &info,
				sizeof(info), NULL);
	vf1.scrubs_seen = info.scrubs;
	atomic_store(&vf1.done, true);
	return NULL;
}

static void test_scrub_in_chunks(void **state)
{
	uint8_t *v = gpu_vram_ptr(sx.gpu, S3_BASE, S3_SIZE);
	const uint64_t marks[] = { 0, S_CHUNK - 1, S_CHUNK, 2 * S_CHUNK, S3_SIZE - 1 };
	struct vgpu_rpc_info info;
	uint32_t hd;
	pthread_t th;
	int ret;

	(void)state;
	assert_non_null(v);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(marks); i++)
		v[marks[i]] = 0x5a;
	assert_int_equal(rm_t_client(sx.rm, 1, &vf1.hc, &hd, &vf1.hs), 0);
	assert_int_equal(pthread_create(&th, NULL, vf1_main, NULL), 0);
	gsp_send_hook = between_chunks;
	ret = rm_vf_reset(sx.rm, 3);
	gsp_send_hook = NULL;
	atomic_store(&vf1.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(ret, 0);
	assert_int_equal(atomic_load(&vf1.chunks), 3);
	assert_true(atomic_load(&vf1.done));
	assert_int_equal(vf1.echo_ret, 0);
	assert_int_equal(vf1.info_ret, 0);
	assert_int_equal(vf1.scrubs_seen, 1);
	assert_int_equal(gsp_call(rm_gsp(sx.rm), 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info,
				  sizeof(info), NULL), 0);
	assert_int_equal(info.scrubs, 3);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(marks); i++)
		assert_int_equal(v[marks[i]], 0);
	assert_int_equal(rm_client_free(sx.rm, 1, vf1.hc), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_scrub_in_chunks, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
