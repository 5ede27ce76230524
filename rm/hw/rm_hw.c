// SPDX-License-Identifier: MIT
/* The RM's device ops over gpu_model and iommu_model. Each is a thin call into the model:
 * what the op means, and why it is not a GSP RPC, is in rm/rm.h and doc/rm.md. */
#include <errno.h>

#include <vgpu/gpfifo.h>

#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "rm/hw/rm_hw.h"

/* The RM passes these device numbers through the GSP unchanged (rm_internal.h). */
_Static_assert(GPU_CHAN_REPLAYABLE == (1ull << 2), "RM_CHAN_REPLAYABLE");
_Static_assert(GPU_CHAN_RESTORE == (1ull << 3), "RM_CHAN_RESTORE");
_Static_assert(GPU_SCHED_BEST_EFFORT == 2 && GPU_SCHED_FIXED_SHARE == 4, "RM_SCHED_*");
_Static_assert(GPU_FN_MAX_CHANNELS == 64, "RM_MAX_CHANNELS");
_Static_assert(GPU_VRAM_ALIGN == (2ull << 20), "RM_VRAM_ALIGN");

static void hw_info(void *ctx, struct rm_device_info *out)
{
	struct rm_hw *hw = ctx;

	*out = (struct rm_device_info){ .nr_fns = gpu_nr_fns(hw->gpu),
		.nr_engines = gpu_nr_engines(hw->gpu), .vram_size = gpu_vram_size(hw->gpu),
		.priv_fd = gpu_priv_fd(hw->gpu), .kick_fd = gpu_priv_kick_fd(hw->gpu),
		.status_fd = gpu_status_fd(hw->gpu), .tsan_sync = hw->gpu };
}

static void hw_priv_handover(void *ctx)
{
	gpu_priv_drop_writer(((struct rm_hw *)ctx)->gpu);
}

static int hw_slice_fd(void *ctx, unsigned int fn)
{
	return gpu_vram_slice_fd(((struct rm_hw *)ctx)->gpu, fn);
}

static int hw_vram_scrub(void *ctx, uint64_t base, uint64_t size)
{
	return gpu_vram_scrub(((struct rm_hw *)ctx)->gpu, base, size);
}

static int hw_chan_quiesce(void *ctx, unsigned int fn, uint32_t chid, uint64_t timeout_ns)
{
	return gpu_chan_quiesce(((struct rm_hw *)ctx)->gpu, fn, chid, timeout_ns);
}

static int hw_chan_fence(void *ctx, unsigned int fn, uint32_t chid)
{
	return gpu_chan_fence(((struct rm_hw *)ctx)->gpu, fn, chid);
}

static int hw_chan_error(void *ctx, unsigned int fn, uint32_t chid, uint32_t err)
{
	return gpu_chan_error(((struct rm_hw *)ctx)->gpu, fn, chid, (enum vgpu_chan_error)err);
}

static uint64_t hw_chan_gen(void *ctx, unsigned int fn, uint32_t chid)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(((struct rm_hw *)ctx)->gpu);
	const struct gpu_priv_chan *pc;

	if (fn >= __atomic_load_n(&sh->nr_fns, __ATOMIC_RELAXED) || chid >= GPU_FN_MAX_CHANNELS)
		return 0;
	pc = &sh->fns[fn].chans[chid];
	if (!(__atomic_load_n(&pc->flags, __ATOMIC_ACQUIRE) & GPU_CHAN_ALLOCATED))
		return 0;
	return __atomic_load_n(&pc->gen, __ATOMIC_ACQUIRE);
}

static int hw_chan_submit(void *ctx, unsigned int fn, uint32_t aper, uint64_t addr,
			  uint32_t gp_put, uint32_t token)
{
	struct rm_hw *hw = ctx;
	uint32_t *p;
	int ret;

	if (aper == VGPU_APER_SYS) {
		if (!hw->iommu)
			return -ENODEV;
		/* Through the VF's own IOMMU domain, as the device would reach it. */
		ret = iommu_dma_write(hw->iommu, fn, addr, &gp_put, sizeof(gp_put));
		if (ret)
			return ret;
	} else {
		p = gpu_vram_ptr(hw->gpu, addr, sizeof(gp_put));
		if (!p)
			return -EFAULT;
		/* Release: the engine reads GP_PUT, then the entries the guest wrote before. */
		__atomic_store_n(p, gp_put, __ATOMIC_RELEASE);
	}
	gpu_doorbell_ring(hw->gpu, fn, token);
	return 0;
}

static void hw_fault_replay(void *ctx, unsigned int fn)
{
	gpu_fault_replay(((struct rm_hw *)ctx)->gpu, fn);
}

static uint64_t hw_dma_size(void *ctx, struct iommu_memobj *mo)
{
	(void)ctx;
	return iommu_memobj_size(mo);
}

static int hw_dma_map(void *ctx, struct iommu_domain *dom, struct iommu_memobj *mo,
		      uint64_t off, uint64_t size, uint64_t *iova)
{
	(void)ctx;
	return iommu_map(dom, mo, off, size, IOMMU_READ | IOMMU_WRITE,
			 *iova ? IOMMU_MAP_FIXED_IOVA : 0, iova);
}

static void hw_dma_unmap(void *ctx, struct iommu_domain *dom, uint64_t iova, uint64_t size)
{
	(void)ctx;
	iommu_unmap(dom, iova, size, NULL);
}

const struct rm_device_ops rm_hw_ops = {
	.info = hw_info,
	.priv_handover = hw_priv_handover,
	.slice_fd = hw_slice_fd,
	.vram_scrub = hw_vram_scrub,
	.chan_quiesce = hw_chan_quiesce,
	.chan_fence = hw_chan_fence,
	.chan_error = hw_chan_error,
	.chan_gen = hw_chan_gen,
	.chan_submit = hw_chan_submit,
	.fault_replay = hw_fault_replay,
	.dma_size = hw_dma_size,
	.dma_map = hw_dma_map,
	.dma_unmap = hw_dma_unmap,
};
