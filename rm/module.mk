# SPDX-License-Identifier: MIT
# rm: the shared resource manager (CPU-RM). It talks to the GSP only through rm_gsp's RPCs
# and to the device only through the ops its owner hands it (rm/hw: rm_hw).
MODULES += rm
rm_DIR := rm
rm_DEPS := rm_gsp pma common
# The tests build their device from the models and hand the RM rm_hw's ops over it.
rm_TEST_DEPS := rm_hw
rm_LDLIBS := -lurcu-memb -lurcu-cds -lurcu-common
# Under TSan with tests/tsan.supp (liburcu's own allocations) and the urcu edges annotated
# in rm/rm_internal.h. They start the TSan build of vgpu-gsp, so it is made with them.
rm_TSAN_TESTS := test_rm_mt test_rm_dispatch test_rm_resources test_rm_events test_rm_runlist \
		 test_rm_ops test_rm_chan_doubt test_rm_scrub test_rm_mig
$(foreach t,$(rm_TSAN_TESTS),$(BUILD)/tsan/tests/rm/$(t)): | $(BUILD)/tsan/bin/vgpu-gsp
