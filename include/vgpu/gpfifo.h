/* SPDX-License-Identifier: MIT */
/* vgpu/gpfifo.h - ABI: usermode work submission. GPFIFO entries, USERD, the work-submit
 * token and doorbell page, the pushbuffer method set and channel error codes.
 *
 * Addresses (chosen so the guest driver needs one mechanism per object):
 *  - GPFIFO base and every pushbuffer address in a GP entry are GPU VAs, translated by the
 *    channel's page tables (vgpu/gmmu.h); they may map VRAM or system memory.
 *  - USERD is a physical address given at channel allocation together with its aperture:
 *    an IOVA in the function's IOMMU domain (VGPU_APER_SYS, the usual case: the guest puts
 *    USERD in its DMA memory) or a VF-physical VRAM address (VGPU_APER_VRAM). USERD needs
 *    no page tables, so a channel can be rung before its address space is complete.
 *  - Method arguments that name memory (COPY, FILL, semaphores...) are GPU VAs.
 *
 * Submission, in this order (the device relies on it):
 *   1. write GP entries at gpfifo[put % entries] (plain stores);
 *   2. store GP_PUT in USERD with release ordering;
 *   3. vgpu_doorbell_write() the channel's token into the function's doorbell page;
 *   4. if it returned true the engines sleep: write 1 to the function's kick eventfd.
 * The device reads GP_PUT after seeing the doorbell and again before it idles, so several
 * submissions may share one doorbell. */
#ifndef VGPU_ABI_GPFIFO_H
#define VGPU_ABI_GPFIFO_H

#ifdef __KERNEL__	/* the guest kernel driver (guest-kmod/) builds against this header too */
#include <linux/types.h>
#else
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#endif

/* ---- apertures for physical addresses (USERD) ---- */
#define VGPU_APER_VRAM	0u
#define VGPU_APER_SYS	1u

/* ---- GP entry: 8 bytes, little endian --------------------------------------------------
 *   bits 1:0   must be 0 in a pushbuffer entry (dword aligned address)
 *   bits 48:2  pushbuffer GPU VA bits 48:2
 *   bits 62:49 LENGTH in dwords (1..16383)
 *   bit  63    reserved, must be 0
 * A control entry has LENGTH 0, bits 48:8 zero and an opcode in bits 7:0: NOP does nothing,
 * ILLEGAL (and any other value) puts the channel in error. A LENGTH-0 entry with address
 * bits set is malformed. Every method must lie wholly inside one entry's segment. */
#define VGPU_GP_LEN_SHIFT	49
#define VGPU_GP_LEN_MAX		0x3fffu
#define VGPU_GP_VA_MASK		0x0001fffffffffffcull
#define VGPU_GP_RSVD_MASK	(1ull << 63)
#define VGPU_GP_OPCODE_NOP	0x00u
#define VGPU_GP_OPCODE_ILLEGAL	0x01u

/* GP entry for @ndw dwords of methods at GPU VA @va. */
static inline uint64_t vgpu_gp_entry(uint64_t va, uint32_t ndw)
{
	return (va & VGPU_GP_VA_MASK) | (uint64_t)(ndw & VGPU_GP_LEN_MAX) << VGPU_GP_LEN_SHIFT;
}

static inline uint64_t vgpu_gp_va(uint64_t e) { return e & VGPU_GP_VA_MASK; }
static inline uint32_t vgpu_gp_len(uint64_t e) { return (uint32_t)(e >> VGPU_GP_LEN_SHIFT) & VGPU_GP_LEN_MAX; }

/* ---- USERD: 128 bytes, 64-byte aligned, must not cross a 4 KiB page -------------------
 * Inline copy (ABI 2.6, optional): a driver may copy a segment of at most VGPU_USERD_INL_DW
 * dwords, and its GP entry, into GP_PUT's line before storing GP_PUT, so that the device
 * reads GP_PUT and the methods in one line. Written as a sequence lock: inl_ctl = 0, the
 * entry and the dwords (each with release), then inl_ctl = VALID | dwords << 16 | the
 * entry's GP index (release), then GP_PUT. The device runs the copy instead of reading the GPFIFO and the pushbuffer
 * only when it describes the one entry between GP_GET and GP_PUT, its length matches the
 * entry's and inl_ctl reads the same before and after the copy; else it reads them as
 * usual. The copy is trusted as that entry's segment: a driver that writes one writes the
 * same methods to the pushbuffer (what replays and restores read), and stores inl_ctl = 0
 * before it publishes an entry without a copy. Zero (an older driver) means no copy. */
#define VGPU_USERD_INL_DW	12u
#define VGPU_USERD_INL_VALID	(1u << 31)

/* inl_ctl for a copy of @ndw dwords of the entry at GP index @idx. */
static inline uint32_t vgpu_userd_inl_ctl(uint32_t idx, uint32_t ndw)
{
	return VGPU_USERD_INL_VALID | (ndw & 0xffu) << 16 | (idx & 0xffffu);
}

struct vgpu_userd {
	uint32_t gp_put;	/* 0x00 driver: next GP index to write, < entries */
	uint32_t inl_ctl;	/* 0x04 driver: the inline copy, VGPU_USERD_INL_* (ABI 2.6) */
	uint64_t inl_entry;	/* 0x08 driver: the GP entry the copy is of */
	uint32_t inl_dw[VGPU_USERD_INL_DW]; /* 0x10 driver: that entry's segment */
	uint32_t gp_get;	/* 0x40 device: next GP index it will fetch */
	uint32_t error;		/* 0x44 device: enum vgpu_chan_error, the error notifier */
	uint32_t error_gp_get;	/* 0x48 device: GP index of the failing entry */
	uint32_t error_method;	/* 0x4c device: method id that failed (or 0xffffffff) */
	uint64_t error_time_ns;	/* 0x50 device: when the error was raised */
	uint32_t reserved1[10];
};

_Static_assert(sizeof(struct vgpu_userd) == 128, "USERD is ABI");
#define VGPU_USERD_GP_PUT	0x00u
#define VGPU_USERD_GP_GET	0x40u
#define VGPU_USERD_ERROR	0x44u
_Static_assert(__builtin_offsetof(struct vgpu_userd, gp_get) == VGPU_USERD_GP_GET,
	       "the inline copy stays in GP_PUT's line");

/* ---- work-submit token -------------------------------------------------------------------
 * runlist << 16 | virtual channel id. The runlist is the engine the channel is scheduled on.
 * Tokens are checked against the function's own channel table; a token naming a channel the
 * function does not own, a free or disabled channel is dropped and counted. */
static inline uint32_t vgpu_token(uint32_t runlist, uint32_t chid)
{
	return (runlist & 0x7fffu) << 16 | (chid & 0xffffu);
}

/* ---- doorbell page: one 4 KiB page per function in shared memory ---------------------------
 * A multi-producer ring of posted token writes. Producers claim a slot with fetch_add on
 * head and store token|VGPU_DB_SLOT_FULL with release; the device consumes in order and
 * clears each slot. If producers lap the device, tokens are overwritten: nothing is lost,
 * because the device also scans every resident channel's GP_PUT against GP_GET. */
#define VGPU_DB_SLOTS		512u
#define VGPU_DB_SLOT_FULL	(1u << 31)

struct vgpu_doorbell_page {
	uint32_t head;		/* 0x000 producers: slots claimed (atomic fetch_add) */
	uint32_t reserved0[15];
	uint32_t tail;		/* 0x040 device: slots consumed */
	uint32_t overruns;	/* 0x044 device: tokens lost to a lapped ring (recovered by scan) */
	uint32_t reserved1[14];
	uint32_t sleeping;	/* 0x080 device: non-zero while every engine sleeps */
	uint32_t reserved2[15];
	uint32_t reserved3[464];
	uint32_t slots[VGPU_DB_SLOTS];	/* 0x800 */
};

_Static_assert(sizeof(struct vgpu_doorbell_page) == 4096, "doorbell page is ABI");

#ifndef __KERNEL__
/* Post @token; true if the device sleeps and the function's kick eventfd must be written.
 * Call after GP_PUT was stored with release. Lock-free; any number of threads. */
static inline bool vgpu_doorbell_write(struct vgpu_doorbell_page *db, uint32_t token)
{
	_Atomic uint32_t *head = (_Atomic uint32_t *)&db->head;
	uint32_t idx = atomic_fetch_add_explicit(head, 1, memory_order_seq_cst);

	atomic_store_explicit((_Atomic uint32_t *)&db->slots[idx % VGPU_DB_SLOTS],
			      token | VGPU_DB_SLOT_FULL, memory_order_seq_cst);
	/* seq_cst pairs with the device's store to sleeping and its re-check of the ring:
	 * either it sees this slot, or we see it asleep and kick. */
	return atomic_load_explicit((_Atomic uint32_t *)&db->sleeping, memory_order_seq_cst);
}
#endif

/* ---- pushbuffer methods --------------------------------------------------------------------
 * A method is a header dword, method id in bits 31:16 and argument count in bits 15:0,
 * followed by that many argument dwords. 64-bit values are two dwords, low first. The
 * count must equal the method's argument count (NOP takes any). */
#define VGPU_MTHD(id, nargs)	((uint32_t)(id) << 16 | ((nargs) & 0xffffu))
#define VGPU_MTHD_ID(hdr)	((hdr) >> 16)
#define VGPU_MTHD_NARGS(hdr)	((hdr) & 0xffffu)

enum vgpu_method {
	/* NOP: arguments ignored. */
	VGPU_M_NOP = 0,
	/* SEM_RELEASE va_lo va_hi payload_lo payload_hi flags(VGPU_SEM_*)
	 * Stores the payload (32 or 64-bit, naturally aligned) with release ordering; with
	 * VGPU_SEM_INTR also raises VGPU_INTR_SEMAPHORE. */
	VGPU_M_SEM_RELEASE = 1,
	/* SEM_ACQUIRE va_lo va_hi payload_lo payload_hi flags(VGPU_SEM_*) timeout_us
	 * Waits until *va >= payload (VGPU_SEM_GEQ, unsigned) or == payload (VGPU_SEM_EQ).
	 * The engine runs other channels meanwhile. timeout_us 0 means 1 s; past it the
	 * channel errors with VGPU_CHAN_ERR_SEM_TIMEOUT. */
	VGPU_M_SEM_ACQUIRE = 2,
	/* COPY src_lo src_hi dst_lo dst_hi len_lo len_hi: copy engine, VA to VA, any aperture,
	 * any alignment; overlapping ranges are undefined. */
	VGPU_M_COPY = 3,
	/* FILL dst_lo dst_hi len_lo len_hi value: stores the 32-bit value; dst and len 4-aligned. */
	VGPU_M_FILL = 4,
	/* MMU_INVALIDATE va_lo va_hi size_lo size_hi flags: drops TLB entries of this function
	 * overlapping [va, va+size) in every engine; VGPU_INVAL_ALL drops them all. */
	VGPU_M_MMU_INVALIDATE = 5,
	/* TIMESTAMP va_lo va_hi: stores the 64-bit device time in ns (8-aligned). */
	VGPU_M_TIMESTAMP = 6,
	/* REDUCE_ADD_U32 src_lo src_hi count dst_lo dst_hi: 64-bit sum of count u32 at src
	 * (4-aligned) stored at dst (8-aligned). */
	VGPU_M_REDUCE_ADD_U32 = 7,
	/* AXPY_F32 x_lo x_hi y_lo y_hi count a: y[i] = a * x[i] + y[i] in IEEE single
	 * precision, in index order, x and y 4-aligned. */
	VGPU_M_AXPY_F32 = 8,
	VGPU_M_NR,
};

#define VGPU_SEM_64		(1u << 0)	/* 64-bit payload (else 32-bit) */
#define VGPU_SEM_INTR		(1u << 1)	/* release: raise VGPU_INTR_SEMAPHORE */
#define VGPU_SEM_EQ		(1u << 2)	/* acquire: == (else >=) */
#define VGPU_INVAL_ALL		(1u << 0)

/* ---- channel errors: USERD.error and gpu_chan_status() ---------------------------------- */
enum vgpu_chan_error {
	VGPU_CHAN_OK = 0,
	VGPU_CHAN_ERR_GP_MALFORMED,	/* reserved bits, or LENGTH 0 with an address */
	VGPU_CHAN_ERR_GP_ILLEGAL,	/* control entry with the ILLEGAL or an unknown opcode */
	VGPU_CHAN_ERR_GPFIFO_FAULT,	/* the GP entry itself could not be read */
	VGPU_CHAN_ERR_PB_FAULT,		/* pushbuffer outside the function's memory */
	VGPU_CHAN_ERR_METHOD_ILLEGAL,	/* unknown method id or a method past its segment */
	VGPU_CHAN_ERR_METHOD_ARGS,	/* wrong argument count, alignment or flags */
	VGPU_CHAN_ERR_MMU_FAULT,	/* a method's access faulted (non-replayable/cancelled) */
	VGPU_CHAN_ERR_IOMMU_FAULT,	/* as above, in the IOMMU */
	VGPU_CHAN_ERR_SEM_TIMEOUT,	/* SEM_ACQUIRE timed out */
	VGPU_CHAN_ERR_PREEMPT_TIMEOUT,	/* did not yield within the preemption timeout */
	VGPU_CHAN_ERR_USERD_FAULT,	/* USERD outside the function's memory */
	VGPU_CHAN_ERR_DEVICE_RESET,	/* (ABI 2.2) a device reset lost the channel's execution
					 * state: work in flight may not have run, or only in part */
	VGPU_CHAN_ERR_NR,
};

/* ---- per-function interrupt status bits ------------------------------------------------- */
#define VGPU_INTR_SEMAPHORE	(1u << 0)	/* a SEM_RELEASE with VGPU_SEM_INTR */
#define VGPU_INTR_FAULT		(1u << 1)	/* the fault buffer has entries */
#define VGPU_INTR_CHAN_ERROR	(1u << 2)	/* a channel entered its error state */
#define VGPU_INTR_FAULT_OVERFLOW (1u << 3)	/* fault entries were dropped */

#endif
