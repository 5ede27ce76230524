/* SPDX-License-Identifier: MIT */
/* vgpu/version.h - version of the host/guest ABI (everything under include/vgpu/).
 *
 * The guest driver links nothing from the host; what the two share is this directory.
 * MAJOR changes when a layout or message changes incompatibly (peers must refuse each
 * other); MINOR grows when something is added that an older peer may ignore. */
#ifndef VGPU_ABI_VERSION_H
#define VGPU_ABI_VERSION_H

#ifdef __KERNEL__	/* the guest kernel driver (guest-kmod/) builds against this header too */
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#define VGPU_ABI_MAJOR 2
#define VGPU_ABI_MINOR 6	/* 2.1: GMMU aperture 2 (SVA), vgpu/sva.h;
				 * 2.2: VGPU_CHAN_ERR_DEVICE_RESET;
				 * 2.3: the guest as ivshmem peer 0 (vf<N>.master.sock,
				 *      header.host_peer) and the guest's version in
				 *      GET_INFO, both needed to migrate (vgpu/vf_bar.h);
				 * 2.4: page requests on the SVA connection
				 *      (VGPU_SVA_OP_PRI, vgpu/sva.h);
				 * 2.5: a VF reset announced before it runs
				 *      (VF_EVT_RESET_PENDING, header.reset_ack);
				 * 2.6: the inline copy of a short segment in USERD
				 *      (vgpu/gpfifo.h) */
#define VGPU_ABI_MINOR_MIGRATE 3	/* the first minor whose guests can be migrated */
#define VGPU_ABI_MINOR_RESET_ACK 5	/* the first minor whose guests acknowledge a reset */

/* Packed form carried in headers and handshakes: major in the high 16 bits. */
#define VGPU_ABI_VERSION ((uint32_t)VGPU_ABI_MAJOR << 16 | VGPU_ABI_MINOR)
#define VGPU_ABI_VERSION_MAJOR(v) ((uint32_t)(v) >> 16)
#define VGPU_ABI_VERSION_MINOR(v) ((uint32_t)(v) & 0xffffu)

/* A peer speaking @v can talk to us iff the majors match. */
static inline int vgpu_abi_compatible(uint32_t v)
{
	return VGPU_ABI_VERSION_MAJOR(v) == VGPU_ABI_MAJOR;
}

#endif
