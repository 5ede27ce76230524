# SPDX-License-Identifier: MIT
MODULES += iommu_model
iommu_model_DIR := iommu_model
iommu_model_DEPS := common
iommu_model_LDLIBS :=
iommu_model_TSAN_TESTS := test_iommu_mt test_iommu_ats_pri
