/* SPDX-License-Identifier: MIT */
/* vgpu/vf_ioctl.h - uapi of the guest kernel VF driver (guest-kmod/, vgpu_vf.ko): the ioctls
 * of /dev/vgpu-vfN, one character device per bound VF, opened by any number of processes.
 *
 * The kernel owns BAR2's mailbox and event rings. A process talks to the host in one of two
 * ways: VGPU_VF_IOC_MBOX (one call, the reply copied back), or through the rings of its own
 * that its mapping shows where BAR2's rings are: it pushes requests into its request ring
 * and rings VF_VEC_MBOX with VGPU_VF_IOC_NOTIFY, which forwards them through the real
 * mailbox and pushes each reply into its reply ring; events that concern the file (resets
 * and stops to every file, channel faults and errors to the file that allocated the
 * channel) are pushed into its event ring. So a driver written for the bare device runs
 * unchanged on this one, and processes never see each other's messages. RM clients are
 * per open file: an RM message naming a client of this VF that the file did not allocate
 * gets the reply the host gives an unknown handle (status -ENOENT) without reaching the
 * host, and closing the file frees every client it still holds.
 *
 * mmap: file offset = BAR2 offset. One shared mapping of the whole BAR2 is allowed; a page
 * is inserted on first touch only if this file may see it: the header pages (read-only),
 * the doorbell and interrupt pages, the file's own rings, and the DMA or VRAM memory of RM
 * memory objects this file allocated. Any other page (another process's memory) raises
 * SIGBUS. Freeing a memory object, closing the file or a VF reset unmaps the memory.
 *
 * SVM: VGPU_VF_IOC_SVM migrates the caller's own anonymous memory into the slice's VRAM
 * (device-coherent pages it keeps using in place) and back; VGPU_VF_IOC_SVM_QUERY is the
 * kernel's HMM mirror of a range (where each page is, VRAM pages by VF-physical address).
 *
 * SVM address space (uapi 1.1): VGPU_VF_IOC_AS_CREATE gives the file a GPU address space the
 * kernel owns (its page tables, its RM client) that mirrors the calling process: GPU virtual
 * address = the process's CPU virtual address. Nothing is mapped by hand: a GPU access to
 * process memory faults, the kernel faults the page in (hmm_range_fault), moves it into the
 * slice's VRAM (the only memory a VF reaches in a VM), maps it and replays; munmap, fork's
 * copy on write and migration clear the GPU mapping before they complete. VGPU_VF_IOC_AS_CHANNEL
 * makes a replayable channel on it whose USERD, GPFIFO and pushbuffer room the kernel
 * allocates and maps at a GPU address above every process address (the kernel window); the
 * process maps that memory through this file and submits through the doorbell page as
 * usual. A GPU access the process could not make itself (unmapped, PROT_NONE, a write to
 * read-only memory, outside the mirrored range) cancels the faulting channel: it stops with
 * VGPU_CHAN_ERR_MMU_FAULT in USERD and a VF_EVT_CHAN_ERROR in this file's event ring.
 *
 * Per-file quotas (uapi 1.2): a file's memory objects (VRAM and DMA memory bytes), channels
 * and RM clients are counted against limits the module parameters set when it was opened
 * (VGPU_VF_IOC_INFO reports them and the use). An RM call that would exceed one is answered
 * by the driver with the RM status -EDQUOT and reaches no host; closing the file returns
 * everything it held.
 *
 * Strict address spaces (uapi 1.2): a file opened while the module parameter strict_as is
 * set may not build GPU page tables: the driver answers an RM ALLOC of a VASPACE or of a
 * channel, and CHANNEL_BIND_VASPACE, with the RM status -EPERM. Its GPU work runs on the
 * kernel's address space, into which VGPU_VF_IOC_AS_MAP maps memory objects the file
 * allocated. It guards a process against strict files only: set strict_as before the first
 * open (at module load) for every file to be strict.
 *
 * Versioning: every argument struct starts with its own size; the driver refuses a size it
 * does not know (-EINVAL) and VGPU_VF_IOC_INFO reports VGPU_VF_UAPI_VERSION (major in the
 * high 16 bits, as VGPU_ABI_VERSION). A minor version only adds: new ioctls, or fields at
 * the end of a struct whose older size the driver still accepts (and fills up to). Pointers
 * travel as __u64. */
#ifndef VGPU_ABI_VF_IOCTL_H
#define VGPU_ABI_VF_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define VGPU_VF_UAPI_MAJOR	1
#define VGPU_VF_UAPI_MINOR	2	/* 1.1: the kernel-owned SVM address space (AS_*);
					 * 1.2: per-file quotas in INFO, strict_as, AS_MAP/AS_UNMAP */
#define VGPU_VF_UAPI_VERSION	((__u32)VGPU_VF_UAPI_MAJOR << 16 | VGPU_VF_UAPI_MINOR)

#define VGPU_VF_DEV_PREFIX	"vgpu-vf"	/* /dev/vgpu-vf<VF number> */
#define VGPU_VF_IOC_TYPE	'V'
#define VGPU_VF_NR_VECTORS	3		/* enum vf_vector of vgpu/vf_bar.h */

/* VGPU_VF_IOC_INFO: what the driver found (out). */
struct vgpu_vf_ioc_info {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_info) */
	__u32 uapi_version;		/* VGPU_VF_UAPI_VERSION */
	__u32 abi_version;		/* the host's, from the BAR2 header */
	__u32 vf_id;
	__u64 bar_size;			/* mmap length of the whole BAR2 */
	__u32 nr_vectors;		/* MSI-X vectors the driver took */
	__u32 reset_count;		/* the header's, now */
	__u64 irq_count[VGPU_VF_NR_VECTORS];	/* interrupts taken per vector */
	__u32 open_files;		/* files open on this VF now (this one included) */
	__u32 rm_clients;		/* RM clients this file holds */
	__u64 dropped;			/* replies and events lost to this file's full rings */
	/* uapi 1.2 (a caller of 1.1 passes VGPU_VF_INFO_SIZE_1_1 and gets the fields above):
	 * this file's limits, fixed when it was opened (0: none of its own, only the VF's
	 * quota), and what it holds now. */
	__u64 vram_limit, vram_used;	/* bytes of VRAM in its memory objects */
	__u64 dma_limit, dma_used;	/* bytes of DMA memory in its memory objects */
	__u32 chan_limit, chan_used;	/* channels */
	__u32 client_limit;		/* RM clients (at most 16) */
	__u32 strict;			/* 1: opened under strict_as (no VASPACE of its own) */
};
#define VGPU_VF_INFO_SIZE_1_1	72u	/* sizeof(struct vgpu_vf_ioc_info) in uapi 1.1 */

/* VGPU_VF_IOC_MBOX: one mailbox call (enum vf_msg_type). The kernel checks RM messages
 * (VF_MSG_RM) against this file's clients and records what they allocate. */
struct vgpu_vf_ioc_mbox {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_mbox) */
	__u32 type;			/* in: enum vf_msg_type */
	__u64 req_ptr;			/* in: request payload */
	__u32 req_len;			/* in: bytes, <= VF_MSG_MAX_PAYLOAD */
	__u32 rsp_cap;			/* in: room at rsp_ptr */
	__u64 rsp_ptr;			/* in: reply payload buffer */
	__u64 timeout_ns;		/* in: 0 = 5 s; capped at 60 s */
	__u32 rsp_len;			/* out: reply payload bytes */
	__s32 status;			/* out: the host's status (0 or -errno) */
};

/* VGPU_VF_IOC_WAIT: sleep until vector @vector fired since this file last waited on it (or
 * @timeout_ns passes: -ETIMEDOUT). VF_VEC_MBOX counts the replies pushed into this file's
 * reply ring. Removal of the device wakes every waiter (-ENODEV); a VF reset is an event
 * (VF_VEC_EVENT). */
struct vgpu_vf_ioc_wait {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_wait) */
	__u32 vector;			/* in: enum vf_vector */
	__u64 timeout_ns;		/* in: 0 = only check */
	__u64 count;			/* out: the vector's interrupt count now */
};

/* VGPU_VF_IOC_NOTIFY: VF_VEC_MBOX serves this file's request ring (returns once every
 * reply is in its reply ring); VF_VEC_GPU rings the host (the engine kick). */
struct vgpu_vf_ioc_notify {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_notify) */
	__u32 vector;			/* in: VF_VEC_MBOX or VF_VEC_GPU */
};

/* VGPU_VF_IOC_SVM: migrate the caller's anonymous private memory [addr, addr + len) (page
 * aligned) into the slice's VRAM as device-coherent pages, which the process keeps reading
 * and writing in place, or back into system memory. Pages that cannot move (pinned, no VRAM
 * left in the driver's pool) stay where they are: @migrated counts what moved. Shared or
 * file-backed memory is refused (-EOPNOTSUPP), an unmapped range is -EFAULT, a VF whose
 * reset lost migrated pages refuses new ones (-EIO) until they are all freed. A VF reset
 * scrubs VRAM: every process with migrated pages gets SIGBUS. */
#define VGPU_VF_SVM_TO_VRAM	1
#define VGPU_VF_SVM_TO_SYSTEM	2
struct vgpu_vf_ioc_svm {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_svm) */
	__u32 to;			/* in: VGPU_VF_SVM_TO_VRAM or VGPU_VF_SVM_TO_SYSTEM */
	__u64 addr, len;		/* in: the caller's range */
	__u64 migrated;			/* out: pages moved */
	__u64 vram_pages;		/* out: pages of the VF's pool in use now (every process) */
};

/* VGPU_VF_IOC_SVM_QUERY: where each page of the caller's [addr, addr + len) (page aligned,
 * at most VGPU_VF_SVM_QUERY_MAX pages) lives now, as the kernel's HMM mirror sees it
 * (hmm_range_fault under an mmu_interval_notifier: a consistent snapshot). With
 * VGPU_VF_SVM_FAULT, missing pages are faulted in writable first. out_ptr receives one
 * __u64 per page: 0 (not present), or VGPU_VF_SVM_PAGE_VRAM | its VF-physical VRAM address
 * (a page migrated into this VF's VRAM: what GPU page tables map with the VRAM aperture), or
 * VGPU_VF_SVM_PAGE_SYSTEM (present in system memory); VGPU_VF_SVM_PAGE_WRITE if writable. */
#define VGPU_VF_SVM_FAULT		(1u << 0)
#define VGPU_VF_SVM_QUERY_MAX		512
#define VGPU_VF_SVM_PAGE_VRAM		(1ull << 63)
#define VGPU_VF_SVM_PAGE_SYSTEM		(1ull << 62)
#define VGPU_VF_SVM_PAGE_WRITE		(1ull << 61)
#define VGPU_VF_SVM_PAGE_ADDR(e)	((e) & ((1ull << 52) - 1))
struct vgpu_vf_ioc_svm_query {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_svm_query) */
	__u32 flags;			/* in: VGPU_VF_SVM_FAULT */
	__u64 addr, len;		/* in: the caller's range */
	__u64 out_ptr;			/* in: __u64[len / page size] */
	__u32 in_vram;			/* out: pages in this VF's VRAM */
	__u32 present;			/* out: pages present anywhere */
};

/* VGPU_VF_IOC_AS_CREATE: one per file (-EEXIST for a second); lives until the file closes.
 * The mirrored range [addr, addr + len) is page aligned; len 0 mirrors the whole user address
 * space. The kernel window [kva_base, kva_base + kva_size) holds the kernel's own mappings
 * (channel memory) and never a process address. Only the creating process may use it
 * (another process sharing the file gets -EACCES). */
struct vgpu_vf_ioc_as_create {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_as_create) */
	__u32 flags;			/* in: 0 */
	__u64 addr, len;		/* in: the mirrored range of the caller */
	__u64 kva_base, kva_size;	/* out: the kernel window */
};

/* VGPU_VF_IOC_AS_CHANNEL: a replayable channel on this file's address space. Its memory
 * (mem_size bytes of VRAM, a multiple of 64 KiB up to 2 MiB) holds USERD at userd_off, the
 * GPFIFO (gpfifo_entries entries, a power of two from 2 to 512) at gpfifo_off and pushbuffer
 * room from pb_off to the end. The process maps it with mmap(file, mmap_offset), writes GP
 * entries and methods there, stores GP_PUT in USERD and posts token in the doorbell page;
 * GP entries and methods use GPU addresses: gpu_va + offset for this memory, the process's
 * own addresses for its memory. At most VGPU_VF_AS_CHANNELS per address space (-ENOSPC). */
#define VGPU_VF_AS_CHANNELS		8
struct vgpu_vf_ioc_as_channel {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_as_channel) */
	__u32 runlist;			/* in: the engine */
	__u32 gpfifo_entries;		/* in */
	__u32 flags;			/* in: 0 */
	__u64 mem_size;			/* in */
	__u64 mmap_offset;		/* out: the memory's offset in this file's mapping */
	__u64 gpu_va;			/* out: its GPU address, in the kernel window */
	__u32 userd_off, gpfifo_off;	/* out: byte offsets inside the memory */
	__u32 pb_off;			/* out: the first byte of pushbuffer room */
	__u32 chid, token;		/* out: the channel id (events) and work-submit token */
	__u32 reserved;			/* out: 0 */
};

/* VGPU_VF_IOC_AS_INFO: what the kernel did for this file's address space (-ENOENT: none). */
struct vgpu_vf_ioc_as_info {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_as_info) */
	__u32 channels;			/* out: channels made */
	__u64 faults;			/* out: GPU fault entries taken */
	__u64 mapped;			/* out: GPU PTEs written for process pages */
	__u64 migrated;			/* out: pages the fault service moved into VRAM */
	__u64 invalidated;		/* out: GPU PTEs cleared by invalidations */
	__u64 replays;			/* out: FAULT_REPLAY calls */
	__u64 cancelled;		/* out: channels cancelled (a fault the process could not make) */
	__u64 evicted;			/* out: pages a full VRAM pool gave back to system memory */
	__u32 lost;			/* out: 1 if a VF reset freed the address space */
	__u32 reserved;
};

/* VGPU_VF_IOC_AS_MAP (uapi 1.2): map [offset, offset + length) of an RM memory object this
 * file allocated (VRAM or DMA memory; client and handle as its ALLOC returned them) into the
 * file's kernel address space at gpu_va: VRAM by its VF-physical address, DMA memory by its
 * IOVA, 4 KiB PTEs, every one VOLATILE. gpu_va, offset and length are page aligned (length
 * 0: to the object's end); the range must lie below 2^48, outside the mirrored range and
 * outside the channel window [kva_base, kva_base + VGPU_VF_AS_CHAN_WINDOW), and overlap no
 * other mapping (-EEXIST). A handle the file did not allocate (another file's, a DUP, the
 * kernel's) is -ENOENT. Freeing the object (or its DEVICE or client) unmaps it before the
 * host frees it, so the GPU never reaches memory that is somebody else's next. At most
 * VGPU_VF_AS_MAPS mappings per address space (-ENOSPC). */
#define VGPU_VF_AS_MAP_READONLY		(1u << 0)
#define VGPU_VF_AS_MAPS			256
#define VGPU_VF_AS_CHAN_WINDOW		(16ull << 20)	/* 8 channels of 2 MiB */
struct vgpu_vf_ioc_as_map {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_as_map) */
	__u32 flags;			/* in: VGPU_VF_AS_MAP_READONLY */
	__u32 client, handle;		/* in: the memory object */
	__u64 gpu_va;			/* in */
	__u64 offset, length;		/* in: the part of the object (out: length as mapped) */
};

/* VGPU_VF_IOC_AS_UNMAP (uapi 1.2): remove the mapping that starts at gpu_va (-ENOENT: none). */
struct vgpu_vf_ioc_as_unmap {
	__u32 size;			/* in: sizeof(struct vgpu_vf_ioc_as_unmap) */
	__u32 flags;			/* in: 0 */
	__u64 gpu_va;			/* in */
};

#define VGPU_VF_IOC_INFO	_IOWR(VGPU_VF_IOC_TYPE, 1, struct vgpu_vf_ioc_info)
#define VGPU_VF_IOC_MBOX	_IOWR(VGPU_VF_IOC_TYPE, 2, struct vgpu_vf_ioc_mbox)
#define VGPU_VF_IOC_WAIT	_IOWR(VGPU_VF_IOC_TYPE, 3, struct vgpu_vf_ioc_wait)
#define VGPU_VF_IOC_NOTIFY	_IOW(VGPU_VF_IOC_TYPE, 4, struct vgpu_vf_ioc_notify)
#define VGPU_VF_IOC_SVM		_IOWR(VGPU_VF_IOC_TYPE, 5, struct vgpu_vf_ioc_svm)
#define VGPU_VF_IOC_SVM_QUERY	_IOWR(VGPU_VF_IOC_TYPE, 6, struct vgpu_vf_ioc_svm_query)
#define VGPU_VF_IOC_AS_CREATE	_IOWR(VGPU_VF_IOC_TYPE, 7, struct vgpu_vf_ioc_as_create)
#define VGPU_VF_IOC_AS_CHANNEL	_IOWR(VGPU_VF_IOC_TYPE, 8, struct vgpu_vf_ioc_as_channel)
#define VGPU_VF_IOC_AS_INFO	_IOWR(VGPU_VF_IOC_TYPE, 9, struct vgpu_vf_ioc_as_info)
#define VGPU_VF_IOC_AS_MAP	_IOWR(VGPU_VF_IOC_TYPE, 10, struct vgpu_vf_ioc_as_map)
#define VGPU_VF_IOC_AS_UNMAP	_IOW(VGPU_VF_IOC_TYPE, 11, struct vgpu_vf_ioc_as_unmap)

#endif
