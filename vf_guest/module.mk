# vf_guest: libvgpu-vf, the guest VF driver, and vgpu-vf-test. It links nothing from the host:
# only the ABI headers in include/vgpu/ and the header-only common/ring.h.
MODULES += vf_guest
vf_guest_DIR := vf_guest
vf_guest_DEPS :=
vf_guest_LDLIBS :=
vf_guest_TSAN_TESTS := test_vf_transport
