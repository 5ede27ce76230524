# submit_bench: usermode doorbell submission vs one mailbox RPC per submission, guest side
# (libvgpu-vf) against a real vgpud (vgpud_host.c, the default) or the emulated GPU served
# in-process (bench_host.c, --host inproc).
BENCHES += submit_bench
submit_bench_DEPS := vf_guest hmm gpu_model iommu_model common
