/* SPDX-License-Identifier: MIT */
/* rm_hw - the RM's device ops (struct rm_device_ops, rm/rm.h) over the emulated GPU
 * (gpu_model) and IOMMU (iommu_model). The device owner fills a struct rm_hw and passes
 *   rm_config.ops = &rm_hw_ops, rm_config.ops_ctx = &hw
 * to rm_device_create(); @hw must outlive the RM. Every op is thread-safe (the models'
 * calls are). */
#ifndef VGPU_RM_HW_RM_HW_H
#define VGPU_RM_HW_RM_HW_H

#include "rm/rm.h"

struct gpu;
struct iommu;

struct rm_hw {
	struct gpu *gpu;		/* the device */
	struct iommu *iommu;		/* its IOMMU; NULL: system-memory USERD is -ENODEV */
};

/* The ops; their ctx is a struct rm_hw. */
extern const struct rm_device_ops rm_hw_ops;

#endif
