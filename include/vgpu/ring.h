/* SPDX-License-Identifier: MIT */
/* vgpu/ring.h - ABI: layout of a single-producer/single-consumer ring in shared memory.
 *
 * Used for RPC queues, the VF mailbox and event queues. The header sits at the start of
 * the shared area, the slots follow. head and tail are free-running 32-bit counters on
 * their own cache lines; the producer owns head, the consumer owns tail. Both sides must
 * treat the other's counter as untrusted (see common/ring.h). */
#ifndef VGPU_ABI_RING_H
#define VGPU_ABI_RING_H

#ifdef __KERNEL__	/* the guest kernel driver (guest-kmod/) builds against this header too */
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#define VGPU_RING_MAGIC 0x52475056u	/* "VPGR" little-endian */

struct vgpu_ring_hdr {
	uint32_t magic;
	uint32_t nr_elems;	/* power of two */
	uint32_t elem_size;	/* bytes per slot, multiple of 8 */
	uint32_t reserved;
	uint8_t pad0[48];
	uint32_t head;		/* producer: slots written, accessed atomically */
	uint8_t pad1[60];
	uint32_t tail;		/* consumer: slots read, accessed atomically */
	uint8_t pad2[60];
	/* nr_elems * elem_size bytes of slots follow */
};

_Static_assert(sizeof(struct vgpu_ring_hdr) == 192, "ring header is ABI");

#endif
