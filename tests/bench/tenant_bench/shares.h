/* SPDX-License-Identifier: MIT */
/* tenant_bench's scheduler shares: 8, 32 and 62 busy VFs on the device model's engine,
 * equal share and fixed share with unequal weights, each VF's share of the work completed
 * in 1 s windows against its target. */
#ifndef VGPU_TENANT_BENCH_SHARES_H
#define VGPU_TENANT_BENCH_SHARES_H

#include <stdbool.h>

/* Measure and print the share keys: as JSON members (", \"share_err_pct_equal_n8\": 1.23",
 * ...) when @json, else a table. @quick: one window per case instead of three. @detail
 * (table only): each window's errors of the work shares, of the scheduler's own time shares
 * and of the work done per ms of engine time. 0, or -1 if a case was not measured (the
 * device could not be set up, or the engine completed nothing in a window: its key is
 * then printed as null, and why on stderr). */
int tb_shares(bool json, bool quick, bool detail);

#endif
