# SPDX-License-Identifier: MIT
# rm_hw: the RM's device ops (rm/rm.h, struct rm_device_ops) over the device models; the
# device owner links it and hands rm_hw_ops to rm_device_create().
MODULES += rm_hw
rm_hw_DIR := rm/hw
rm_hw_DEPS := gpu_model iommu_model common
rm_hw_LDLIBS :=
