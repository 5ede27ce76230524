# SPDX-License-Identifier: MIT
# vft: the guest test runner (vft.h), its own library beside libvgpu-vf, and vgpu-vf-test,
# which links both. Like the driver it links nothing from the host.
MODULES += vft
vft_DIR := vf_guest/vft
vft_DEPS := vf_guest hmm common
vft_LDLIBS :=
