# SPDX-License-Identifier: MIT
MODULES += pma
pma_DIR := pma
pma_DEPS := common
pma_LDLIBS :=
pma_TSAN_TESTS := test_pma_stress
