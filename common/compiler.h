/* SPDX-License-Identifier: MIT */
/* common/compiler.h - small language helpers used everywhere: sizes, min/max,
 * container_of, and VGPU_ASSERT (kept in every build, as QEMU keeps assert()). */
#ifndef VGPU_COMMON_COMPILER_H
#define VGPU_COMMON_COMPILER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define VGPU_KiB (1ull << 10)
#define VGPU_MiB (1ull << 20)
#define VGPU_GiB (1ull << 30)

#define VGPU_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define cmn_likely(x)	 __builtin_expect(!!(x), 1)
#define cmn_unlikely(x) __builtin_expect(!!(x), 0)
#define cmn_min(a, b)	 ((a) < (b) ? (a) : (b))
#define cmn_max(a, b)	 ((a) > (b) ? (a) : (b))
#define cmn_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define VGPU_CACHELINE 64

/* Invariant that only a bug can break; never used to validate input. */
#define VGPU_ASSERT(cond)                                                        \
	do {                                                                     \
		if (cmn_unlikely(!(cond))) {                                    \
			fprintf(stderr, "%s:%d: %s: assertion '%s' failed\n",   \
				__FILE__, __LINE__, __func__, #cond);            \
			abort();                                                 \
		}                                                                \
	} while (0)

#endif
