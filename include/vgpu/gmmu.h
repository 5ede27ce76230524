/* SPDX-License-Identifier: MIT */
/* vgpu/gmmu.h - ABI: the GPU MMU page-table format and the fault-buffer entry.
 *
 * A function's GPU virtual address space is 49 bits wide and mapped by a four-level tree
 * of 8-byte entries. Every table lives in the function's own VRAM slice and is addressed
 * by a VF-physical VRAM address (an offset into the slice); the walker never reads
 * memory outside the slice.
 *
 *   level 0: VA bits 48:39, 512 entries, 4 KiB table  - PDEs only
 *   level 1: VA bits 38:30, 512 entries, 4 KiB table  - PDEs only
 *   level 2: VA bits 29:21, 512 entries, 4 KiB table  - PDE, or a 2 MiB PTE (LEAF set)
 *   level 3: either VA bits 20:12, 512 entries (4 KiB pages, 4 KiB table)
 *            or     VA bits 20:16,  32 entries (64 KiB pages, 256 bytes at a 4 KiB
 *                   aligned address),
 *            chosen by PT64K in the level-2 PDE that points to it.
 *
 * Entry bits (PDE and PTE):
 *   0      VALID
 *   1      LEAF     level 2 only: this entry maps a 2 MiB page
 *   2      PT64K    level-2 PDE only: the child table maps 64 KiB pages
 *   4:3    APERTURE PTE only: 0 VRAM (VF-physical address), 1 SYSMEM (an IOVA in the
 *                   function's IOMMU domain), 2 SVA (ABI 2.1: a virtual address of the
 *                   local guest process the host bound to the function's SVA PASID, see
 *                   vgpu/sva.h; unbound, unmapped or a write to a read-only page faults
 *                   with VGPU_FAULT_IOMMU); 3 is reserved. PDEs are always VRAM.
 *   5      RO       PTE only: writes fault with VGPU_FAULT_READ_ONLY
 *   6      VOLATILE PTE only: the translation is never cached in an engine TLB, so a
 *                   change to the PTE is seen by the next access without an invalidate
 *   11:7   reserved, must be 0
 *   55:12  ADDR     address bits 55:12; must be aligned to the page (or table) size
 *   63:56  reserved, must be 0
 * Any reserved bit set, a misaligned address, LEAF above level 2 or a bad aperture is
 * reported as VGPU_FAULT_BAD_ENTRY.
 *
 * Engine TLBs cache non-volatile translations; after changing a valid PTE, invalidate it
 * with the MMU_INVALIDATE method (vgpu/gpfifo.h) before relying on the new mapping. */
#ifndef VGPU_ABI_GMMU_H
#define VGPU_ABI_GMMU_H

#ifdef __KERNEL__	/* the guest kernel driver (guest-kmod/) builds against this header too */
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#define VGPU_GMMU_VA_BITS	49
#define VGPU_GMMU_VA_LIMIT	(1ull << VGPU_GMMU_VA_BITS)
#define VGPU_GMMU_LEVELS	4
#define VGPU_GMMU_TABLE_BYTES	4096u
#define VGPU_GMMU_TABLE64K_BYTES 256u
#define VGPU_GMMU_ENTRIES	512u
#define VGPU_GMMU_ENTRIES_64K	32u

#define VGPU_GMMU_PAGE_4K	0x1000ull
#define VGPU_GMMU_PAGE_64K	0x10000ull
#define VGPU_GMMU_PAGE_2M	0x200000ull

/* Index shifts for levels 0..2, and level 3 for each small page size. */
#define VGPU_GMMU_L0_SHIFT	39
#define VGPU_GMMU_L1_SHIFT	30
#define VGPU_GMMU_L2_SHIFT	21
#define VGPU_GMMU_L3_4K_SHIFT	12
#define VGPU_GMMU_L3_64K_SHIFT	16

#define VGPU_GMMU_VALID		(1ull << 0)
#define VGPU_GMMU_LEAF		(1ull << 1)
#define VGPU_GMMU_PT64K		(1ull << 2)
#define VGPU_GMMU_APER_SHIFT	3
#define VGPU_GMMU_APER_MASK	(3ull << VGPU_GMMU_APER_SHIFT)
#define VGPU_GMMU_APER_VRAM	(0ull << VGPU_GMMU_APER_SHIFT)
#define VGPU_GMMU_APER_SYS	(1ull << VGPU_GMMU_APER_SHIFT)
#define VGPU_GMMU_APER_SVA	(2ull << VGPU_GMMU_APER_SHIFT)	/* ABI 2.1 */
#define VGPU_GMMU_RO		(1ull << 5)
#define VGPU_GMMU_VOLATILE	(1ull << 6)
#define VGPU_GMMU_ADDR_MASK	0x00fffffffffff000ull
#define VGPU_GMMU_RSVD_MASK	(0xff00000000000000ull | 0xf80ull)

/* A PDE pointing at the next table (4 KiB aligned VF-physical VRAM address). */
static inline uint64_t vgpu_gmmu_pde(uint64_t table_pa)
{
	return (table_pa & VGPU_GMMU_ADDR_MASK) | VGPU_GMMU_VALID;
}

/* A level-2 PDE whose child is a 64 KiB-page table (also 4 KiB aligned; 256 bytes used). */
static inline uint64_t vgpu_gmmu_pde64k(uint64_t table_pa)
{
	return (table_pa & VGPU_GMMU_ADDR_MASK) | VGPU_GMMU_VALID | VGPU_GMMU_PT64K;
}

/* A PTE mapping @addr (aligned to the page size) with flags RO/VOLATILE/APER_*. */
static inline uint64_t vgpu_gmmu_pte(uint64_t addr, uint64_t flags)
{
	return (addr & VGPU_GMMU_ADDR_MASK) | flags | VGPU_GMMU_VALID;
}

/* A 2 MiB PTE for a level-2 slot. */
static inline uint64_t vgpu_gmmu_pte2m(uint64_t addr, uint64_t flags)
{
	return vgpu_gmmu_pte(addr, flags) | VGPU_GMMU_LEAF;
}

/* Why a translation failed; also the reason code in a fault-buffer entry. */
enum vgpu_fault_reason {
	VGPU_FAULT_NONE = 0,
	VGPU_FAULT_PDE_INVALID,	/* a PDE on the walk is not VALID */
	VGPU_FAULT_PTE_INVALID,	/* the leaf PTE is not VALID */
	VGPU_FAULT_BAD_ENTRY,	/* reserved bits, misaligned address, bad aperture */
	VGPU_FAULT_READ_ONLY,	/* write to a RO page */
	VGPU_FAULT_OUT_OF_SLICE,/* a table or page lies past the function's VRAM slice */
	VGPU_FAULT_IOMMU,	/* the system-aperture IOVA (or SVA address) did not translate */
	VGPU_FAULT_VA_RANGE,	/* VA at or above VGPU_GMMU_VA_LIMIT */
	VGPU_FAULT_NR,
};

enum vgpu_fault_access {
	VGPU_ACCESS_READ = 0,
	VGPU_ACCESS_WRITE = 1,
};

/* One fault-buffer entry, as kept per function by the device (gpu_fault_pop()). */
struct vgpu_fault_entry {
	uint64_t va;		/* faulting GPU VA */
	uint64_t timestamp_ns;	/* device clock (CLOCK_MONOTONIC) */
	uint16_t chid;		/* virtual channel id within the function */
	uint8_t engine;		/* engine (runlist) that faulted */
	uint8_t access;		/* enum vgpu_fault_access */
	uint8_t reason;		/* enum vgpu_fault_reason */
	uint8_t replayable;	/* 1: the channel is stalled and may be replayed */
	uint16_t reserved;
	uint32_t reserved2;
};

_Static_assert(sizeof(struct vgpu_fault_entry) == 32, "fault entry is ABI");

#endif
