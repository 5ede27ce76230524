# SPDX-License-Identifier: MIT
# gpu_bench: doorbell-to-execution latency, GP entries per second and copy-engine bandwidth
# of the emulated GPU, next to memcpy measured in the same run.
BENCHES += gpu_bench
gpu_bench_DEPS := gpu_model iommu_model common
