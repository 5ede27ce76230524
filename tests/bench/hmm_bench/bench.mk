# SPDX-License-Identifier: MIT
# hmm_bench: PERF-01..05 of doc/scenarios.md (CPU fault-back per backend and
# granule, 2 MiB migration both ways, device fault service) next to memcpy and the raw
# userfaultfd mechanisms measured in the same run.
BENCHES += hmm_bench
hmm_bench_DEPS := hmm iommu_model common
