# SPDX-License-Identifier: MIT
MODULES += mig
mig_DIR := mig
mig_DEPS := common
mig_LDLIBS :=
mig_TSAN_TESTS :=
