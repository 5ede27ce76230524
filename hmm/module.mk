# SPDX-License-Identifier: MIT
# hmm: HMM-style mirroring and migration over userfaultfd (see doc/hmm.md).
MODULES += hmm
hmm_DIR := hmm
hmm_DEPS := iommu_model common
hmm_LDLIBS :=
hmm_TSAN_TESTS := test_hmm_race test_hmm_pri_chan test_hmm_spare test_hmm_copier
# The channel tests of page requests build their device from gpu_model.
hmm_TEST_DEPS := gpu_model
