# SPDX-License-Identifier: MIT
# tests/fuzz: libFuzzer harnesses, one per decoder that a less trusted party feeds.
#   FUZZERS += NAME, fuzz_NAME_DEPS := modules it links (each with its own deps);
#   tests/fuzz/fuzz_NAME.c -> $(BUILD)/fuzz/bin/fuzz_NAME, seeds in tests/fuzz/corpus/NAME/,
#   fixed crashes kept as regressions in tests/fuzz/crashes/NAME/.
FUZZERS += ring
fuzz_ring_DEPS := common
FUZZERS += control
fuzz_control_DEPS := pf_manager
FUZZERS += config
fuzz_config_DEPS := pf_manager
FUZZERS += meta
fuzz_meta_DEPS := vmm_glue
FUZZERS += gspq
fuzz_gspq_DEPS := rm_gsp
FUZZERS += state
fuzz_state_DEPS := pf_manager
FUZZERS += mbox
fuzz_mbox_DEPS := pf_manager
# It starts the rel build's vgpu-gsp (a libFuzzer link cannot make the program).
$(BUILD)/fuzz/bin/fuzz_mbox: | $(BUILD)/rel/bin/vgpu-gsp
FUZZERS += gspsrv
fuzz_gspsrv_DEPS := gsp_fw
FUZZERS += gspcli
fuzz_gspcli_DEPS := rm_gsp
FUZZERS += endpoint
fuzz_endpoint_DEPS := pf_manager
FUZZERS += mig
fuzz_mig_DEPS := mig
