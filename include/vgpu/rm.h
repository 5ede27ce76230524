/* SPDX-License-Identifier: MIT */
/* vgpu/rm.h - ABI: the guest-facing RM calls. A VF's guest driver sends one request
 * message per call (through the VF mailbox); the host RM validates every field, runs it as
 * a client bound to that VF and answers with one reply message.
 *
 * Every message starts with struct vgpu_rm_msg (magic, ABI version, op, total length,
 * a cookie echoed back). Handles: client handles carry the function in their prefix
 * (VGPU_RM_CLIENT_HANDLE), so the host knows the owner without a lookup and refuses a
 * handle of another function with VGPU_RM_ERR_FOREIGN. Object handles are per client,
 * inside [VGPU_RM_HANDLE_BASE, VGPU_RM_HANDLE_BASE + VGPU_RM_HANDLE_RANGE); 0 asks the
 * host to pick one. Status values are 0 or a negative code below (Linux errno numbers,
 * plus the project's own above 4096). */
#ifndef VGPU_ABI_RM_H
#define VGPU_ABI_RM_H

#ifdef __KERNEL__	/* the guest kernel driver (guest-kmod/) builds against this header too */
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#include <vgpu/version.h>

#define VGPU_RM_MSG_MAGIC	0x4d52475656ull	/* "VVGRM" (low 32 bits used) */
#define VGPU_RM_MAX_PARAMS	4096u		/* bytes of class or control parameters */
#define VGPU_RM_MAX_MSG		(sizeof(struct vgpu_rm_msg) + 32 + VGPU_RM_MAX_PARAMS)

/* Handle namespaces. */
#define VGPU_RM_CLIENT_BASE	0xE0000000u
#define VGPU_RM_CLIENT_HANDLE(fn, idx)	(VGPU_RM_CLIENT_BASE | (uint32_t)(fn) << 20 | (uint32_t)(idx))
#define VGPU_RM_CLIENT_FN(h)	(((uint32_t)(h) - VGPU_RM_CLIENT_BASE) >> 20)
#define VGPU_RM_CLIENT_IDX(h)	((uint32_t)(h) & 0xfffffu)
#define VGPU_RM_IS_CLIENT(h)	((uint32_t)(h) >= VGPU_RM_CLIENT_BASE && VGPU_RM_CLIENT_FN(h) < 64)
#define VGPU_RM_HANDLE_BASE	0xCAF00000u
#define VGPU_RM_HANDLE_RANGE	0x80000u

/* Status codes. */
enum vgpu_rm_status {
	VGPU_RM_OK = 0,
	VGPU_RM_ERR_NO_OBJECT = -2,		/* ENOENT: no such handle */
	VGPU_RM_ERR_IO = -5,			/* EIO: cancelled by a device reset */
	VGPU_RM_ERR_AGAIN = -11,		/* EAGAIN: busy, retry */
	VGPU_RM_ERR_NO_MEMORY = -12,		/* ENOMEM: not enough free VRAM / memory */
	VGPU_RM_ERR_ACCESS = -13,		/* EACCES: not shared with you / no right */
	VGPU_RM_ERR_BUSY = -16,			/* EBUSY: in use (e.g. VA space bound) */
	VGPU_RM_ERR_EXISTS = -17,		/* EEXIST: handle already in use */
	VGPU_RM_ERR_INVALID = -22,		/* EINVAL: malformed field */
	VGPU_RM_ERR_NO_HANDLES = -28,		/* ENOSPC: handle range or table exhausted */
	VGPU_RM_ERR_BAD_MSG = -74,		/* EBADMSG: framing, magic, length */
	VGPU_RM_ERR_NOT_SUPPORTED = -95,	/* EOPNOTSUPP: op, class or control unknown */
	VGPU_RM_ERR_TIMEOUT = -110,		/* ETIMEDOUT: the GSP did not answer */
	VGPU_RM_ERR_RESET_REQUIRED = -131,	/* ENOTRECOVERABLE: device resetting */
	VGPU_RM_ERR_FOREIGN = -4096,		/* handle of another function */
	VGPU_RM_ERR_QUOTA = -4097,		/* over this function's quota */
	VGPU_RM_ERR_VERSION = -4100,		/* incompatible ABI version */
};

/* Classes (numbers follow NVIDIA's). Parents: CLIENT is the root of a client's tree. */
enum vgpu_rm_class {
	VGPU_RM_CLASS_CLIENT = 0x0000,		/* NV01_ROOT: allocated with VGPU_RM_OP_ALLOC_CLIENT */
	VGPU_RM_CLASS_MEMORY_SYSMEM = 0x003e,	/* parent DEVICE */
	VGPU_RM_CLASS_MEMORY_VIDMEM = 0x0040,	/* parent DEVICE */
	VGPU_RM_CLASS_EVENT = 0x0079,		/* parent: any object */
	VGPU_RM_CLASS_DEVICE = 0x0080,		/* parent CLIENT; one per client */
	VGPU_RM_CLASS_SUBDEVICE = 0x2080,	/* parent DEVICE */
	VGPU_RM_CLASS_VASPACE = 0x90f1,		/* parent DEVICE */
	VGPU_RM_CLASS_USERMODE = 0xc361,	/* parent DEVICE: the doorbell page */
	VGPU_RM_CLASS_CHANNEL_GPFIFO = 0xc36f,	/* parent DEVICE; depends on its VASPACE */
};

enum vgpu_rm_op {
	VGPU_RM_OP_ALLOC_CLIENT = 1,	/* -> reply.handle = the new client */
	VGPU_RM_OP_ALLOC = 2,		/* struct vgpu_rm_alloc + class params */
	VGPU_RM_OP_FREE = 3,		/* struct vgpu_rm_free (hObject == hClient frees the client) */
	VGPU_RM_OP_CONTROL = 4,		/* struct vgpu_rm_control + params */
	VGPU_RM_OP_DUP = 5,		/* struct vgpu_rm_dup */
	VGPU_RM_OP_SHARE = 6,		/* struct vgpu_rm_share */
	VGPU_RM_OP_MAP = 7,		/* struct vgpu_rm_free (hObject: memory) -> vgpu_rm_map_info */
};

struct vgpu_rm_msg {
	uint32_t magic;			/* (uint32_t)VGPU_RM_MSG_MAGIC */
	uint32_t abi_version;		/* VGPU_ABI_VERSION */
	uint32_t op;			/* enum vgpu_rm_op */
	uint32_t length;		/* whole message, header included */
	uint64_t cookie;		/* echoed in the reply */
};

struct vgpu_rm_alloc {
	struct vgpu_rm_msg hdr;
	uint32_t h_client, h_parent, h_object, h_class;
	uint32_t params_len, reserved;	/* params follow */
};

struct vgpu_rm_free {
	struct vgpu_rm_msg hdr;
	uint32_t h_client, h_object;
};

struct vgpu_rm_control {
	struct vgpu_rm_msg hdr;
	uint32_t h_client, h_object, cmd, params_len;	/* params follow */
};

struct vgpu_rm_dup {
	struct vgpu_rm_msg hdr;
	uint32_t h_client, h_parent, h_object;	/* destination; h_object 0 = pick one */
	uint32_t h_client_src, h_object_src, reserved;
};

#define VGPU_RM_ACCESS_DUP	(1u << 0)	/* the share lets others dup the object */

struct vgpu_rm_share {
	struct vgpu_rm_msg hdr;
	uint32_t h_client, h_object;
	uint32_t h_client_target;	/* 0: every client of the same function */
	uint32_t access;		/* VGPU_RM_ACCESS_*; 0 revokes */
};

struct vgpu_rm_reply {
	uint32_t magic, abi_version, op, length;
	uint64_t cookie;
	int32_t status;			/* enum vgpu_rm_status */
	uint32_t handle;		/* allocated client / object handle */
	uint32_t params_len, reserved;	/* out params follow */
};

/* ---- class parameters (in and out in one struct: the reply carries it back) ---- */
struct vgpu_rm_vaspace_params {
	uint64_t pdb;			/* VF-physical VRAM address of the root page table */
	uint32_t flags, reserved;
};

#define VGPU_RM_MEM_CONTIGUOUS	(1u << 0)
struct vgpu_rm_vidmem_params {
	uint64_t size;			/* bytes, multiple of page_size */
	uint64_t page_size;		/* 64 KiB, 2 MiB (0: 64 KiB) */
	uint64_t alignment;		/* 0 or power of two >= page_size */
	uint32_t flags, reserved;	/* VGPU_RM_MEM_* */
	uint64_t addr;			/* out: VF-physical address of the first page */
};

/* MEMORY_SYSMEM: a piece of the function's DMA memory (BAR2's DMA part), mapped in its IOMMU
 * domain. The RM is the only allocator of that memory (ABI 2): a guest driver takes its own
 * rings and buffers from allocations like this one, so every byte has one owner. */
struct vgpu_rm_sysmem_params {
	uint64_t size;			/* bytes, multiple of 64 KiB */
	uint64_t iova;			/* out: where the function's IOMMU domain maps it */
	uint64_t dma_offset;		/* out: offset of the allocation inside BAR2's DMA memory
					 * (the guest's CPU view: BAR2 + dma_off + dma_offset) */
};

struct vgpu_rm_channel_params {
	uint32_t h_vaspace;		/* the VA space the channel runs in (a dependency) */
	uint32_t runlist;		/* engine */
	uint64_t gpfifo_va;
	uint32_t gpfifo_entries, flags;	/* flags: VGPU_RM_CHAN_REPLAYABLE */
	uint32_t userd_aper, reserved;	/* VGPU_APER_VRAM / VGPU_APER_SYS */
	uint64_t userd_addr;
	uint32_t chid, token;		/* out: virtual channel id, work-submit token */
};
#define VGPU_RM_CHAN_REPLAYABLE	(1u << 0)

struct vgpu_rm_usermode_params {
	uint64_t doorbell_offset;	/* out: the function's doorbell page in the doorbell memfd */
};

struct vgpu_rm_event_params {
	uint32_t notify_index, reserved;	/* reserved: 0 */
};

/* ---- controls ---- */
enum vgpu_rm_ctrl {
	VGPU_RM_CTRL_GET_INFO = 0x20800101,	/* SUBDEVICE -> vgpu_rm_info */
	VGPU_RM_CTRL_GET_QUOTA = 0x20800102,	/* SUBDEVICE -> vgpu_rm_quota_info */
	VGPU_RM_CTRL_GSP_ECHO = 0x20800103,	/* SUBDEVICE: params go to the GSP and back */
	VGPU_RM_CTRL_FAULT_REPLAY = 0x20800104,	/* SUBDEVICE: resume channels stalled on faults */
	VGPU_RM_CTRL_CHANNEL_ENABLE = 0xc36f0101,	/* CHANNEL: vgpu_rm_enable_params */
	VGPU_RM_CTRL_CHANNEL_RESET = 0xc36f0102,	/* CHANNEL: disable, re-program, enable */
	VGPU_RM_CTRL_CHANNEL_BIND_VASPACE = 0xc36f0103,	/* CHANNEL (disabled): vgpu_rm_bind_params */
	VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN = 0xc36f0108,	/* CHANNEL -> vgpu_rm_token_params */
	VGPU_RM_CTRL_CHANNEL_SUBMIT = 0xc36f01f0,	/* CHANNEL: vgpu_rm_submit_params */
};

struct vgpu_rm_info {
	uint32_t fn, nr_engines;
	uint64_t vram_size;		/* the function's slice */
	uint64_t gsp_resets;
};

struct vgpu_rm_quota_info {
	uint64_t vram_limit, vram_used;
	uint64_t sysmem_limit, sysmem_used;
	uint32_t chan_limit, chan_used;
	uint32_t client_limit, client_used;
};

struct vgpu_rm_enable_params {
	uint32_t enable, reserved;
};

struct vgpu_rm_bind_params {
	uint32_t h_vaspace, reserved;	/* a VASPACE of the same client */
};

struct vgpu_rm_token_params {
	uint32_t token, reserved;
};

/* CHANNEL_SUBMIT: the kernel-mediated submission path (one RM call per submission, the
 * baseline the usermode doorbell is measured against). The host stores @gp_put in the
 * channel's USERD (VRAM through the function's partition, system memory through its IOMMU
 * domain), then rings the channel's doorbell. In: gp_put < the channel's GPFIFO entries,
 * reserved 0 (else VGPU_RM_ERR_INVALID); out: nothing (params_len 0). */
struct vgpu_rm_submit_params {
	uint32_t gp_put, reserved;
};

struct vgpu_rm_map_info {
	uint64_t addr;			/* VF-physical VRAM address or IOVA */
	uint64_t size;
	uint32_t aperture, reserved;	/* VGPU_APER_* */
};

#endif
