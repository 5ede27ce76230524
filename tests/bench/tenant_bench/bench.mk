# SPDX-License-Identifier: MIT
# tenant_bench: one victim tenant against N flooding tenants on a 63-slice vgpud (141 GiB
# device): mailbox PING, a 256 B RM call through the GSP, usermode submit -> execution, solo
# and flooded blocks alternating (doc/bench/tenant_bench.md). Guest side only (libvgpu-vf).
BENCHES += tenant_bench
tenant_bench_DEPS := vf_guest hmm gpu_model iommu_model common
