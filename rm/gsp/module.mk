# rm_gsp: the emulated GSP (program vgpu-gsp) and the CPU-RM side of its message queues.
MODULES += rm_gsp
rm_gsp_DIR := rm/gsp
rm_gsp_DEPS := gpu_model iommu_model common
rm_gsp_LDLIBS :=
rm_gsp_TSAN_TESTS := test_gsp_rpc test_gsp_faults
# `make tsan` builds only the TSan test binaries; these start the TSan build of vgpu-gsp
# (found at ../../bin/vgpu-gsp from the test), so it is made with them.
$(foreach t,$(rm_gsp_TSAN_TESTS),$(BUILD)/tsan/tests/rm_gsp/$(t)): | $(BUILD)/tsan/bin/vgpu-gsp
