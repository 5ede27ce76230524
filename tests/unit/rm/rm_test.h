/* SPDX-License-Identifier: MIT */
/* Shared setup for the rm tests: a 64 MiB GPU with 3 VFs, its PMA, an IOMMU with a domain
 * and 4 MiB of DMA memory per VF, an RM with a real vgpu-gsp, VF 1 and 2 partitioned. */
#ifndef VGPU_TESTS_RM_TEST_H
#define VGPU_TESTS_RM_TEST_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/gpfifo.h>
#include <vgpu/rm.h>

#include "common/clock.h"
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "pma/pma.h"
#include "rm/gsp/gsp.h"
#include "rm/hw/rm_hw.h"
#include "rm/rm.h"

#define T_SLICE (16ull << 20)
/* A hang guard for waits on the GSP (a restart, a replay): generous, since a sanitizer
 * build on a loaded machine is slow, and never the thing a test measures. */
#define RM_T_HANG_GUARD (60 * VGPU_NSEC_PER_SEC)

struct rm_fixture {
	struct gpu *gpu;
	struct pma *pma;
	struct iommu *iommu;
	struct rm_hw hw;		/* the RM's device ops over gpu and iommu */
	struct iommu_domain *dom[4];
	struct iommu_memobj *dma[4];
	void *dma_mem[4];
	struct rm *rm;
};

static inline void rm_fixture_down(struct rm_fixture *f);

/* rm_fixture_up()'s steps; what it made before a failure stays in @f. */
static inline int rm_fixture_build(struct rm_fixture *f, const struct rm_config *tweak)
{
	struct gpu_config gc = { .vram_size = 64ull << 20, .nr_vfs = 3, .nr_engines = 1 };
	struct pma_region_desc rd = { .base = 0, .size = 64ull << 20, .performance = 1 };
	struct iommu_domain_opts dopt = { .type = IOMMU_DOMAIN_PAGING };
	struct rm_config rc = { 0 };
	int ret;

	memset(f, 0, sizeof(*f));
	if (tweak)
		rc = *tweak;
	if ((ret = iommu_create(NULL, &f->iommu)))
		return ret;
	gc.iommu = f->iommu;
	if ((ret = gpu_create(&gc, &f->gpu)))
		return ret;
	f->pma = pma_create(NULL);
	if (!f->pma || pma_region_add(f->pma, &rd, NULL, 0) < 0)
		return -ENOMEM;
	f->hw = (struct rm_hw){ .gpu = f->gpu, .iommu = f->iommu };
	if (!rc.ops) {		/* else the test's own ops, which may wrap rm_hw_ops */
		rc.ops = &rm_hw_ops;
		rc.ops_ctx = &f->hw;
	}
	rc.pma = f->pma;
	if ((ret = rm_device_create(&rc, &f->rm)))
		return ret;
	for (unsigned int fn = 1; fn <= 2; fn++) {
		struct rm_partition p = { .base = fn * T_SLICE, .size = T_SLICE };

		f->dma_mem[fn] = aligned_alloc(1 << 21, 4 << 20);
		if ((ret = iommu_memobj_register(f->iommu, f->dma_mem[fn], 4 << 20, &f->dma[fn])) ||
		    (ret = iommu_domain_alloc(f->iommu, &dopt, &f->dom[fn])) ||
		    (ret = iommu_attach(f->iommu, fn, f->dom[fn])))
			return ret;
		p.dma = f->dma[fn];
		p.dma_domain = f->dom[fn];
		if ((ret = rm_vf_partition_set(f->rm, fn, &p)))
			return ret;
	}
	return 0;
}

/* A failed set-up undoes itself: cmocka runs no teardown after it, and a device left
 * behind would stay in this process for the tests that follow (an extra mapping of the
 * privileged region, engines and a GSP running). */
static inline int rm_fixture_up(struct rm_fixture *f, const struct rm_config *tweak)
{
	int ret = rm_fixture_build(f, tweak);

	if (ret) {
		rm_fixture_down(f);
		memset(f, 0, sizeof(*f));
	}
	return ret;
}

static inline void rm_fixture_down(struct rm_fixture *f)
{
	rm_device_destroy(f->rm);
	for (unsigned int fn = 1; fn <= 2; fn++) {
		if (f->dom[fn]) {
			iommu_detach(f->iommu, fn);
			iommu_domain_free(f->dom[fn]);
		}
		if (f->dma[fn])
			iommu_memobj_unregister(f->dma[fn]);
		free(f->dma_mem[fn]);
	}
	gpu_destroy(f->gpu);
	pma_destroy(f->pma);
	iommu_destroy(f->iommu);
}

/* RPCs in flight on the lanes of every function (0 at rest: nothing leaked a slot). */
static inline unsigned int rm_t_inflight(struct rm_fixture *f)
{
	unsigned int n = 0;

	for (unsigned int fn = 0; fn < gpu_nr_fns(f->gpu); fn++)
		n += gsp_inflight(rm_gsp(f->rm), fn);
	return n;
}

/* A cmocka teardown's body: @f down; -1 if functions 1 and 2 still held RM objects or an
 * RPC slot was in flight (every test frees what it made), else 0. */
static inline int rm_fixture_down_checked(struct rm_fixture *f)
{
	uint64_t leak = rm_object_count(f->rm, 1) + rm_object_count(f->rm, 2) +
			rm_t_inflight(f);

	rm_fixture_down(f);
	return leak ? -1 : 0;
}

/* A client with a device and a subdevice; handles out. */
static inline int rm_t_client(struct rm *rm, unsigned int fn, uint32_t *hc, uint32_t *hd, uint32_t *hs)
{
	int ret = rm_client_alloc(rm, fn, hc);

	*hd = *hs = 0;
	if (!ret)
		ret = rm_alloc(rm, fn, *hc, *hc, hd, VGPU_RM_CLASS_DEVICE, NULL, 0);
	if (!ret)
		ret = rm_alloc(rm, fn, *hc, *hd, hs, VGPU_RM_CLASS_SUBDEVICE, NULL, 0);
	return ret;
}

static inline int rm_t_vidmem(struct rm *rm, unsigned int fn, uint32_t hc, uint32_t hd,
			      uint64_t size, uint32_t *h)
{
	struct vgpu_rm_vidmem_params p = { .size = size, .page_size = 64 << 10 };

	*h = 0;
	return rm_alloc(rm, fn, hc, hd, h, VGPU_RM_CLASS_MEMORY_VIDMEM, &p, sizeof(p));
}

static inline int rm_t_channel(struct rm *rm, unsigned int fn, uint32_t hc, uint32_t hd,
			       uint32_t hvas, uint32_t *h, struct vgpu_rm_channel_params *out)
{
	struct vgpu_rm_channel_params p = { .h_vaspace = hvas, .gpfifo_va = 0x100000,
		.gpfifo_entries = 64, .userd_aper = 0, .userd_addr = 0x2000 };
	int ret;

	*h = 0;
	ret = rm_alloc(rm, fn, hc, hd, h, VGPU_RM_CLASS_CHANNEL_GPFIFO, &p, sizeof(p));
	if (out)
		*out = p;
	return ret;
}

#endif
