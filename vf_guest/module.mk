# SPDX-License-Identifier: MIT
# vf_guest: libvgpu-vf, the guest VF driver (no test code: the runner is vf_guest/vft/). It
# links nothing from the host: only the ABI headers in include/vgpu/, the header-only
# common/ring.h, and the guest-side libraries hmm (managed memory) and common.
MODULES += vf_guest
vf_guest_DIR := vf_guest
vf_guest_DEPS := hmm common
vf_guest_LDLIBS :=
vf_guest_TSAN_TESTS := test_vf_transport test_vf_reattach test_vf_managed_free
# Some suites run the guest suite's cases (vft_run, vft_managed_case) against their hosts.
vf_guest_TEST_DEPS := vft
