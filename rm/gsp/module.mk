# SPDX-License-Identifier: MIT
# rm_gsp: the CPU-RM's end of the GSP (RPC client, process supervision) and the message
# queues both ends share. Links no device model: the GSP program is module gsp_fw.
MODULES += rm_gsp
rm_gsp_DIR := rm/gsp
rm_gsp_DEPS := common
rm_gsp_LDLIBS :=
# Tests and benchmarks link librm_gsp-th.a: it allows the test-only RPCs and starts
# vgpu-gsp-test (rm/gsp/gsp_test_rpc.h).
rm_gsp_TEST_HOOKS := 1
