/* SPDX-License-Identifier: MIT */
/* vgpu/iommu.h - guest-visible IOMMU ABI: the IO page-table entry format.
 *
 * A nested (stage-1) table is owned by the function: its driver writes it in its own DMA
 * memory and the emulated IOMMU walks it through the function's stage-2 domain, so the
 * format is ABI. Host-owned tables use the same bits (doc/iommu_model.md).
 *
 * 4 levels of 512 8-byte entries (9 bits each), 4 KiB pages, 48-bit input addresses:
 *   level 3: iova[47:39]  level 2: iova[38:30] (1 GiB leaf)  level 1: iova[29:21] (2 MiB leaf)
 *   level 0: iova[20:12] (4 KiB leaf)
 * An entry with neither R nor W is not present. A present entry at level 2 or 1 is a leaf
 * if PS is set, else it points to the next table. PS at levels 3 and 0 is reserved; every
 * bit not defined below must be zero, and a leaf's address must be aligned to its size,
 * or the walk stops with a stage-1 fault. */
#ifndef VGPU_ABI_IOMMU_H
#define VGPU_ABI_IOMMU_H

#include <stdint.h>

#define VGPU_IOPTE_R		(1ull << 0)	/* read allowed (also: present) */
#define VGPU_IOPTE_W		(1ull << 1)	/* write allowed (also: present) */
#define VGPU_IOPTE_PS		(1ull << 7)	/* leaf at level 2 (1 GiB) or 1 (2 MiB) */
#define VGPU_IOPTE_D		(1ull << 9)	/* dirty: set by the IOMMU on write (host tables) */
#define VGPU_IOPTE_ADDR_MASK	0x000ffffffffff000ull	/* bits 51:12: next table or page */
#define VGPU_IOPTE_FLAGS_MASK	(VGPU_IOPTE_R | VGPU_IOPTE_W | VGPU_IOPTE_PS | VGPU_IOPTE_D)

#define VGPU_IOPT_LEVELS	4
#define VGPU_IOPT_ENTRIES	512
#define VGPU_IOPT_SHIFT(level)	(12 + 9 * (level))

#endif
