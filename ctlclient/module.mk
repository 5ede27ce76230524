# SPDX-License-Identifier: MIT
MODULES += ctlclient
ctlclient_DIR := ctlclient
ctlclient_DEPS := common
ctlclient_LDLIBS := -ljson-c
ctlclient_TSAN_TESTS :=
