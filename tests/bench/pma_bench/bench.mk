# SPDX-License-Identifier: MIT
# pma_bench: the allocator workloads of doc/bench/pma_bench.md (fill, mixed,
# fragmented on 80 GiB), the pma next to a naive flat-bitmap baseline in one process.
BENCHES += pma_bench
pma_bench_DEPS := pma common
