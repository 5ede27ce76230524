/* SPDX-License-Identifier: MIT */
/* Shared setup for the gsp_fw tests: a small emulated GPU and a real vgpu-gsp process. */
#ifndef VGPU_TESTS_GSP_FW_TEST_H
#define VGPU_TESTS_GSP_FW_TEST_H

#include <errno.h>

#include "common/clock.h"
#include "gpu_model/gpu.h"
#include "rm/gsp/gsp.h"
#include "rm/gsp/gsp_test_rpc.h"

struct gsp_fixture {
	struct gpu *gpu;
	struct gsp *gsp;
	struct gsp_config cfg;
};

/* 64 MiB GPU with 3 VFs; @cfg tweaks (may be NULL) are applied over short test deadlines. */
static inline int gsp_fixture_up(struct gsp_fixture *f, const struct gsp_config *tweak)
{
	struct gpu_config gc = { .vram_size = 64ull << 20, .nr_vfs = 3, .nr_engines = 1 };
	int ret = gpu_create(&gc, &f->gpu);

	if (ret)
		return ret;
	if (tweak)
		f->cfg = *tweak;
	f->cfg.priv_fd = gpu_priv_fd(f->gpu);
	f->cfg.kick_fd = gpu_priv_kick_fd(f->gpu);
	f->cfg.nr_fns = 4;
	for (int c = 0; c < GSP_CLASS_NR; c++)
		if (!f->cfg.deadline_ns[c])
			f->cfg.deadline_ns[c] = 2 * VGPU_NSEC_PER_SEC;
	return gsp_start(&f->cfg, &f->gsp);
}

static inline void gsp_fixture_down(struct gsp_fixture *f)
{
	gsp_stop(f->gsp);
	gpu_destroy(f->gpu);
}

static inline int gsp_inject(struct gsp *g, unsigned int via_fn, uint32_t mode, uint32_t lane,
			     uint32_t fn, uint64_t arg)
{
	struct vgpu_rpc_inject in = { .mode = mode, .lane = lane, .fn = fn, .arg = arg };

	return gsp_call(g, via_fn, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0, NULL);
}

/* Wait until the GSP answers GET_INFO again (after a reset); 0 or -ETIMEDOUT. */
static inline int gsp_wait_working(struct gsp *g, uint64_t timeout_ns)
{
	uint64_t dl = cmn_deadline_ns(timeout_ns);
	struct vgpu_rpc_info info;

	while (!cmn_deadline_passed(dl)) {
		if (!gsp_needs_reset(g) &&
		    gsp_call(g, 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info), NULL) == 0)
			return 0;
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	}
	return -ETIMEDOUT;
}

#endif
