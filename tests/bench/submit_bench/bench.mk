# submit_bench: usermode doorbell submission vs one mailbox RPC per submission, guest side
# (libvgpu-vf) against the emulated GPU served in-process (bench_host.c).
BENCHES += submit_bench
submit_bench_DEPS := vf_guest hmm gpu_model iommu_model common
