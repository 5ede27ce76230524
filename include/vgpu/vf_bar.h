/* SPDX-License-Identifier: MIT */
/* vgpu/vf_bar.h - ABI: a VF's BAR2 (the one shared-memory object a guest receives) and the
 * endpoint protocol that hands it over.
 *
 * ENDPOINT. vgpud listens on two sockets per VF (N = VF number, 1-based) and speaks QEMU's
 * ivshmem-server protocol on both, so a local guest process and QEMU's ivshmem-doorbell
 * device attach the same way. They differ only in who is ivshmem peer 0:
 *   <runtime-dir>/vf<N>.sock         vgpud is peer 0, the guest peer N (every ABI 2 guest);
 *                                    QEMU's ivshmem in this "peer mode" blocks migration
 *   <runtime-dir>/vf<N>.master.sock  ABI minor 3: the guest is peer 0 and vgpud peer
 *                                    VF_EP_HOST_PEER, what QEMU's master=on (libvirt's
 *                                    <shmem role='master'>) needs to migrate the VM
 * The header's host_peer names vgpud's peer id for the attachment in place (0 on
 * vf<N>.sock), so a driver that reads it works on either socket; a driver from before
 * minor 3 assumes vgpud is peer 0 and works on vf<N>.sock only. Every message is 8 bytes,
 * a little-endian int64, optionally carrying one fd (SCM_RIGHTS). On accept, vgpud sends
 * in this order (HOST = the header's host_peer, ID = the client's peer id):
 *   1. 0                     protocol version (VF_EP_PROTO_VERSION), no fd
 *   2. ID                    the client's peer id: the VF number, or 0 on vf<N>.master.sock
 *   3. -1 + BAR2 fd          the shared-memory object described below
 *   4. HOST x VF_NR_VECTORS  each with one eventfd: "peer HOST (vgpud) connected"; writing
 *                            8 bytes (value 1) to fd v rings vgpud on vector v
 *   5. ID x VF_NR_VECTORS    each with one eventfd: the client's own vectors; vgpud writes
 *                            fd v to interrupt the client on vector v (MSI-X vector v)
 * Nothing else follows (vgpud never announces other guests: a VF sees only its own
 * BAR2 and vgpud). A client never writes to the socket; closing it detaches. Only the
 * slice's owner (root or the slice's owner uid, by SO_PEERCRED) may attach, and only one
 * client at a time (ABI 2.1: a second connection by the attached process itself is its
 * SVA connection instead, vgpu/sva.h): a refused client gets VF_EP_REFUSED in place of
 * message 1 and the socket is closed (QEMU then fails the device with "server sent version -2"; merely
 * closing would leave QEMU waiting).
 * Inside a VM the driver rings vector v by writing (HOST << 16) | v to BAR0 + 0x0C.
 *
 * GUEST VERSION (minor 3). A driver announces the ABI it speaks with its first GET_INFO
 * request, whose payload is struct vf_msg_info_req; a request with no payload comes from a
 * driver older than minor 3. vgpud keeps what the attached guest announced (query-slices'
 * guest_abi) and refuses to migrate a slice whose guest did not announce minor 3 or later,
 * or that is attached through vf<N>.sock (QEMU cannot migrate peer mode, and an older
 * driver rings peer 0, which on vf<N>.master.sock is itself: it works on vf<N>.sock only).
 *
 * BAR2 LAYOUT. The size is a power of two (QEMU needs one). The VRAM aperture starts at
 * offset 0 so that the very same file backs the device's VRAM slice (vgpud maps file
 * offset 0 into the device's VRAM at the slice's base): the guest and the device see the
 * same bytes and the guest sees nothing outside its slice. The header is the LAST 4 KiB
 * page of BAR2, at vf_bar_header_off(bar_size) = bar_size - VF_BAR_HDR_SIZE, a place that
 * never moves whatever else changes (ABI 2; in ABI 1 it sat at bar_size - VF_BAR_CTRL_SIZE
 * and a change of the control area's size moved it). A driver reads the header there,
 * checks magic and ABI major, then uses only the offsets it finds in it: nothing below is a
 * fixed place for a guest, only how today's vgpud lays it out:
 *
 *   0                      VRAM aperture: the VF's VRAM slice, vram_size bytes
 *   ...                    (hole: unbacked, reads as zeros, costs nothing)
 *   dma_off                DMA-able system memory (GPFIFO rings, pushbuffers, USERD, ...)
 *   ctrl_off = bar_size - VF_BAR_CTRL_SIZE
 *     + 0                  legacy page: magic and abi_version only (struct vf_bar_header
 *                          with every other field 0), so that an ABI 1 driver, which looks
 *                          here, refuses the version by name instead of "bad magic"
 *     + VF_BAR_DB_OFF      the function's doorbell page (struct vgpu_doorbell_page of
 *                          vgpu/gpfifo.h): the device's own doorbell page, the same bytes
 *     + VF_BAR_INTR_OFF    interrupt page (struct vf_intr_page)
 *     + VF_BAR_REQ_OFF     request ring: guest -> vgpud  (struct vgpu_ring_hdr + slots)
 *     + VF_BAR_RSP_OFF     reply ring:   vgpud -> guest
 *     + VF_BAR_EVT_OFF     event ring:   vgpud -> guest (struct vf_event, e.g. VF reset)
 *     + VF_BAR_HDR_CTRL_OFF  header page (struct vf_bar_header), = bar_size - 4096
 *
 * MAILBOX. The rings use the SPSC layout of vgpu/ring.h (common/ring.h implements it;
 * either side treats the other's counters as untrusted). A request is one slot of
 * VF_MBOX_SLOT_SIZE bytes: struct vf_msg then @length payload bytes. The guest pushes it
 * and rings VF_VEC_MBOX; vgpud answers every request with one reply slot carrying the same
 * seq and type (status 0 or -errno) and interrupts VF_VEC_MBOX. VF_MSG_RM carries a guest
 * RM call as an RM wire message (include/vgpu/rm.h); vgpud runs it against the shared RM
 * as a client bound to this VF. Events are pushed to the event ring with VF_VEC_EVENT.
 *
 * RESET. A VF reset (FLR) stops the VF's channels, frees its RM clients and scrubs its
 * VRAM aperture to zeros; vgpud then re-formats the three rings, bumps reset_count, sets
 * state back to VF_STATE_READY and posts VF_EVT_RESET. A guest that sees reset_count
 * change must re-attach its ring views (cmn_ring_attach) and rebuild its GPU state.
 *
 * RESET ANNOUNCEMENT (minor 5). A guest whose data lives in the VRAM aperture (pages a
 * kernel driver migrated there) asks to hear of a reset before it runs: its GET_INFO
 * payload sets VF_INFO_REQ_RESET_ACK (with abi_version minor 5 or later). For such a
 * guest vgpud first stores a new sequence number in header.reset_pending and posts
 * VF_EVT_RESET_PENDING (arg0 = that number, arg1 = the milliseconds it waits); the VF
 * keeps working meanwhile. The guest moves what it must keep out of the aperture, writes
 * the number to header.reset_ack (the one header field a guest writes) and rings
 * VF_VEC_EVENT. vgpud resets as soon as it sees its current number there, or when the
 * time is up, whichever comes first; any other value is ignored, so a late, wrong or
 * missing acknowledgement only means the wait runs out. After the reset reset_pending is
 * 0 again. A guest that did not ask is reset at once, as before minor 5. */
#ifndef VGPU_ABI_VF_BAR_H
#define VGPU_ABI_VF_BAR_H

#ifdef __KERNEL__	/* the guest kernel driver (guest-kmod/) builds against this header too */
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#include <vgpu/ring.h>
#include <vgpu/version.h>

#define VF_EP_PROTO_VERSION	0		/* ivshmem-server protocol revision */
#define VF_EP_REFUSED		(-2)		/* sent instead of the version: refused */
#define VF_EP_HOST_PEER		1		/* vgpud's peer id on vf<N>.master.sock */

#define VF_BAR_MAGIC		0x3146564d55504756ull	/* "VGPUMVF1" little-endian */
#define VF_BAR_HDR_SIZE		4096u
#define VF_BAR_CTRL_SIZE	(512u << 10)	/* header + rings, at the end of BAR2 */
#define VF_BAR_DB_OFF		(4u << 10)	/* offsets inside the control area */
#define VF_BAR_INTR_OFF		(8u << 10)
#define VF_BAR_REQ_OFF		(64u << 10)
#define VF_BAR_RSP_OFF		(192u << 10)
#define VF_BAR_EVT_OFF		(320u << 10)
#define VF_BAR_RING_REGION	(128u << 10)	/* bytes reserved for each ring */
#define VF_BAR_HDR_CTRL_OFF	(VF_BAR_CTRL_SIZE - VF_BAR_HDR_SIZE)	/* the header: last page */
#define VF_BAR_DMA_DEFAULT	(4u << 20)	/* default DMA memory size */

#define VF_MBOX_SLOT_SIZE	8192u		/* one request or reply: fits any RM message */
#define VF_MBOX_SLOTS		8u
#define VF_EVT_SLOT_SIZE	64u
#define VF_EVT_SLOTS		256u

/* Notification vectors (eventfds in both directions, MSI-X vectors inside a VM). */
enum vf_vector {
	VF_VEC_MBOX	= 0,	/* guest->host: request pushed; host->guest: reply pushed */
	VF_VEC_EVENT	= 1,	/* host->guest: event pushed */
	VF_VEC_GPU	= 2,	/* guest->device: kick (the fd vgpud sends is the device's own
				 * kick eventfd of the function: write it when
				 * vgpu_doorbell_write() says the engines sleep);
				 * host->guest: GPU interrupt (ABI minor 1) */
	VF_NR_VECTORS	= 3,
};

/* The interrupt page (ABI minor 1). vgpud ORs the function's VGPU_INTR_* bits (vgpu/gpfifo.h)
 * into status, bumps count and interrupts VF_VEC_GPU; the guest clears the bits it handled
 * (atomic fetch_and). A reset clears the page. */
struct vf_intr_page {
	uint32_t status;	/* VGPU_INTR_*, accessed atomically */
	uint32_t reserved0[15];
	uint64_t count;		/* interrupts forwarded (monotonic), accessed atomically */
	uint8_t reserved[4096 - 72];
};
_Static_assert(sizeof(struct vf_intr_page) == 4096, "interrupt page is ABI");

/* header.state */
enum vf_state {
	VF_STATE_READY		= 1,	/* rings formatted, mailbox served */
	VF_STATE_RESETTING	= 2,	/* an FLR is in progress: do not touch the rings */
	VF_STATE_STOPPED	= 3,	/* the slice is being stopped: detach */
};

/* The header page. Written by vgpud only (but reset_ack, minor 5); a guest reads it. */
struct vf_bar_header {
	uint64_t magic;			/* VF_BAR_MAGIC */
	uint32_t abi_version;		/* VGPU_ABI_VERSION (vgpu/version.h) */
	uint32_t header_size;		/* sizeof(struct vf_bar_header) */
	uint32_t vf_id;			/* 1..63 */
	uint32_t state;			/* enum vf_state, accessed atomically */
	uint32_t reset_count;		/* bumped after each completed reset, atomically */
	uint32_t nr_vectors;		/* VF_NR_VECTORS */
	uint64_t bar_size;		/* power of two */
	uint64_t vram_off, vram_size;	/* the VRAM aperture (vram_off is 0) */
	uint64_t dma_off, dma_size;	/* DMA memory */
	uint64_t ctrl_off;		/* start of the control area (rings, pages, header) */
	uint64_t req_off, rsp_off, evt_off;	/* ring headers, absolute BAR2 offsets */
	uint64_t ring_region_size;	/* VF_BAR_RING_REGION */
	/* what the slice was provisioned with (as vgpuctl reports it) */
	uint32_t channels;
	uint32_t doorbells;
	uint32_t exec_quantum_ms;	/* 0 = unlimited */
	uint32_t preempt_timeout_us;	/* 0 = unlimited */
	uint8_t slice_uuid[16];		/* the slice (RFC 4122 byte order) */
	/* ABI minor 1. A field that is 0 means the host does not provide it. */
	uint64_t db_off;		/* doorbell page, absolute (ctrl_off + VF_BAR_DB_OFF) */
	uint64_t dma_iova;		/* DMA memory [dma_off, +dma_size) is mapped read/write in
					 * the VF's IOMMU domain at [dma_iova, +dma_size); every
					 * other IOVA faults */
	uint64_t intr_off;		/* interrupt page, absolute (ctrl_off + VF_BAR_INTR_OFF) */
	uint32_t nr_runlists;		/* runlist ids for channels and tokens are 0..n-1 */
	/* ABI minor 3. */
	uint32_t host_peer;		/* vgpud's ivshmem peer id for this attachment: 0 on
					 * vf<N>.sock, VF_EP_HOST_PEER on vf<N>.master.sock
					 * (0 from a host older than minor 3) */
	/* ABI minor 5 (RESET ANNOUNCEMENT above). */
	uint32_t reset_pending;		/* host: the announced reset's number, 0: none */
	uint32_t reset_ack;		/* GUEST writes: the number it is ready for */
	uint8_t reserved[3912];
};
_Static_assert(sizeof(struct vf_bar_header) == VF_BAR_HDR_SIZE, "header page is ABI");

/* Mailbox message types. */
enum vf_msg_type {
	VF_MSG_PING	= 1,	/* echo: the reply carries the request's payload back */
	VF_MSG_GET_INFO	= 2,	/* request payload: none or struct vf_msg_info_req;
				 * reply payload: struct vf_msg_info */
	VF_MSG_RM	= 3,	/* payload: an RM wire message (vgpu/rm.h); reply: its reply */
};

/* Start of every mailbox slot. */
struct vf_msg {
	uint32_t type;		/* enum vf_msg_type */
	uint32_t seq;		/* chosen by the guest, echoed in the reply */
	uint32_t length;	/* payload bytes, <= VF_MSG_MAX_PAYLOAD */
	int32_t status;		/* requests: 0; replies: 0 or -errno (-EOPNOTSUPP: unknown type) */
	uint32_t flags;		/* 0 (reserved) */
	uint32_t reserved;
	/* payload follows */
};
#define VF_MSG_MAX_PAYLOAD	(VF_MBOX_SLOT_SIZE - sizeof(struct vf_msg))

/* VF_MSG_GET_INFO request payload (ABI minor 3; older drivers send none). */
struct vf_msg_info_req {
	uint32_t abi_version;	/* VGPU_ABI_VERSION the driver was built with */
	uint32_t flags;		/* VF_INFO_REQ_* (minor 5; 0 before) */
};
#define VF_INFO_REQ_RESET_ACK	(1u << 0)	/* announce resets to me, I acknowledge */

/* VF_MSG_GET_INFO reply. */
struct vf_msg_info {
	uint32_t vf_id;
	uint32_t abi_version;
	uint64_t vram_size;
	uint32_t channels;
	uint32_t doorbells;
	uint32_t reset_count;
	uint32_t reserved;
};

/* Event types (event ring). */
enum vf_event_type {
	VF_EVT_RESET	= 1,	/* arg0: new reset_count */
	VF_EVT_STOP	= 2,	/* the slice is being stopped; the BAR will go away */
	VF_EVT_MMU_FAULT = 3,	/* minor 1: arg0 chid, arg1 enum vgpu_fault_reason;
				 * pad holds the struct vgpu_fault_entry (vgpu/gmmu.h) */
	VF_EVT_CHAN_ERROR = 4,	/* minor 1: arg0 chid, arg1 enum vgpu_chan_error; a wake-up
				 * hint that may repeat (USERD.error is the truth) */
	VF_EVT_RESET_PENDING = 5, /* minor 5: arg0 the reset's number (header.reset_pending),
				 * arg1 milliseconds until it runs without an acknowledgement */
};

/* One event slot. */
struct vf_event {
	uint32_t type;		/* enum vf_event_type */
	uint32_t reserved;
	uint64_t arg0, arg1;
	uint64_t timestamp_ns;	/* host CLOCK_MONOTONIC */
	uint8_t pad[32];
};
_Static_assert(sizeof(struct vf_event) == VF_EVT_SLOT_SIZE, "event slot is ABI");

/* Where the header page of a BAR2 of @bar_size bytes is: its last 4 KiB page, in every
 * ABI from 2 on (a driver recognises the device by the magic there). */
static inline uint64_t vf_bar_header_off(uint64_t bar_size)
{
	return bar_size - VF_BAR_HDR_SIZE;
}

/* BAR2 size for a slice with @vram_size bytes of VRAM and @dma_size bytes of DMA memory
 * (both 2 MiB multiples): the smallest power of two holding all three parts. */
static inline uint64_t vf_bar_size(uint64_t vram_size, uint64_t dma_size)
{
	uint64_t need = vram_size + dma_size + VF_BAR_CTRL_SIZE, s = 1;

	while (s < need)
		s <<= 1;
	return s;
}

#endif
