# SPDX-License-Identifier: MIT
MODULES += common
common_DIR := common
common_DEPS :=
common_LDLIBS :=
common_TSAN_TESTS := test_ring test_mapguard test_efd
