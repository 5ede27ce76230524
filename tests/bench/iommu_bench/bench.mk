# SPDX-License-Identifier: MIT
BENCHES += iommu_bench
iommu_bench_DEPS := iommu_model common
