# SPDX-License-Identifier: MIT
# submit_bench: usermode doorbell submission vs one mailbox RPC per submission, guest side
# (libvgpu-vf) against a real vgpud (vgpud_host.c). Like any guest it links no host code.
BENCHES += submit_bench
submit_bench_DEPS := vf_guest hmm common
