# SPDX-License-Identifier: MIT
MODULES += pf_manager
pf_manager_DIR := pf_manager
pf_manager_DEPS := rm rm_hw rm_gsp pma gpu_model iommu_model ctlclient mig common
pf_manager_LDLIBS := -ljson-c -linih -lurcu-memb -lurcu-cds -lurcu-common -lsystemd
# The service-plane suite runs the TSan vgpud (its per-VF service threads under
# ThreadSanitizer), with the TSan vgpuctl and GSP beside it; its held-GSP case runs the TSan
# vgpud-test (a GSP deadline longer than the test) and so vgpu-gsp-test.
pf_manager_TSAN_TESTS := test_vgpud_svc test_vgpud_migrate_live test_vgpud_reattach test_vgpud_reset_ack \
	test_vgpud_mig_guest
$(BUILD)/tsan/tests/pf_manager/test_vgpud_svc: | $(BUILD)/tsan/bin/vgpud $(BUILD)/tsan/bin/vgpuctl \
	$(BUILD)/tsan/bin/vgpu-gsp $(BUILD)/tsan/bin/vgpud-test $(BUILD)/tsan/bin/vgpu-gsp-test
# Live migration's worker threads, under TSan (the corrupted-byte case needs vgpud-test).
$(BUILD)/tsan/tests/pf_manager/test_vgpud_migrate_live: | $(BUILD)/tsan/bin/vgpud \
	$(BUILD)/tsan/bin/vgpud-test $(BUILD)/tsan/bin/vgpuctl $(BUILD)/tsan/bin/vgpu-gsp
# A local guest's reattach between two vgpuds, the announced reset's deadline on the loop, and
# the guest's flags carried by a migration.
$(BUILD)/tsan/tests/pf_manager/test_vgpud_reattach $(BUILD)/tsan/tests/pf_manager/test_vgpud_reset_ack \
$(BUILD)/tsan/tests/pf_manager/test_vgpud_mig_guest: \
	| $(BUILD)/tsan/bin/vgpud $(BUILD)/tsan/bin/vgpuctl $(BUILD)/tsan/bin/vgpu-gsp
pf_manager_TEST_HOOKS := 1
# test_vgpud_mig_state drives a real guest (libvgpu-vf) against two vgpuds.
pf_manager_TEST_DEPS := vf_guest
