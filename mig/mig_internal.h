/* SPDX-License-Identifier: MIT */
/* mig internals: the CRC32C implementations behind mig_crc32c(), for the tests that check
 * the fast path against the tables. */
#ifndef VGPU_MIG_INTERNAL_H
#define VGPU_MIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mig_crc32c() with the slicing-by-8 tables, whatever the CPU. */
uint32_t mig_crc32c_sw(uint32_t crc, const void *p, size_t len);
/* mig_crc32c() with the crc32 instruction into *@out: false (nothing done) if the CPU
 * lacks it. */
bool mig_crc32c_hw(uint32_t crc, const void *p, size_t len, uint32_t *out);
/* Which implementation mig_crc32c() uses: "sse4.2" or "table". */
const char *mig_crc32c_impl(void);

#endif
