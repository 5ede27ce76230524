# SPDX-License-Identifier: MIT
# rpc_bench: CPU-RM -> GSP RPC round trips next to a bare shared-memory ring, RM ops/s over
# 1..16 threads, victim p99 under a one-VF flood, GSP crash-to-working time (issue 5).
BENCHES += rpc_bench
rpc_bench_DEPS := rm rm_hw rm_gsp pma gpu_model iommu_model common
