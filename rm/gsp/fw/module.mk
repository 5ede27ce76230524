# SPDX-License-Identifier: MIT
# gsp_fw: the emulated GSP firmware, program vgpu-gsp; the only writer of the device's
# privileged state. Speaks the queue protocol through rm_gsp's queue code.
MODULES += gsp_fw
gsp_fw_DIR := rm/gsp/fw
gsp_fw_DEPS := rm_gsp gpu_model iommu_model common
gsp_fw_LDLIBS :=
# Built a second time as vgpu-gsp-test, with fault injection and the test-only RPCs.
gsp_fw_TEST_HOOKS := 1
gsp_fw_TSAN_TESTS := test_gsp_rpc test_gsp_faults
# test_gsp_release checks the release vgpu-gsp (found at ../../bin/vgpu-gsp from the test).
$(foreach v,$(VARIANTS),$(eval $(BUILD)/$(v)/tests/gsp_fw/test_gsp_release: | $(BUILD)/$(v)/bin/vgpu-gsp))
