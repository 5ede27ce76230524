# SPDX-License-Identifier: MIT
# migrate_bench: live migration of a 2 GiB slice with 256 MiB populated between two real
# vgpuds over loopback TCP while a writer dirties its VRAM (doc/bench/migrate_bench.md).
BENCHES += migrate_bench
migrate_bench_DEPS := ctlclient mig common
