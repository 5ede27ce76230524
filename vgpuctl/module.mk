# SPDX-License-Identifier: MIT
MODULES += vgpuctl
vgpuctl_DIR := vgpuctl
vgpuctl_DEPS := ctlclient common
vgpuctl_LDLIBS := -ljson-c
vgpuctl_TSAN_TESTS :=
