/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* vgpu_vf.ko internals: the state of one bound VF and of one open file, shared by the
 * driver's files (main: PCI, interrupts, mailbox, events; file: the character device). */
#ifndef VVF_INTERNAL_H
#define VVF_INTERNAL_H

#include <linux/kref.h>
#include <linux/list.h>
#include <linux/memremap.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>
#include <vgpu/vf_ioctl.h>

#define VVF_NAME		"vgpu_vf"
#define VVF_PCI_VENDOR		0x1af4	/* QEMU's ivshmem-doorbell */
#define VVF_PCI_DEVICE		0x1110
#define VVF_REG_DOORBELL	0x0c	/* BAR0: (peer << 16) | vector rings that peer */
#define VVF_MAX_CLIENTS		16	/* RM clients one file may hold */
#define VVF_MAX_CHID		4096	/* channel ids a file's event filter knows */
#define VVF_DEFAULT_TIMEOUT_NS	(5ull * NSEC_PER_SEC)
#define VVF_MAX_TIMEOUT_NS	(60ull * NSEC_PER_SEC)
/* The ring region a host must offer: each file's three rings are formatted in that much of
 * its own memory with the ABI's default geometry (vgpu_vf_file.c), whatever the host's use. */
#define VVF_RING_REGION_MIN	(sizeof(struct vgpu_ring_hdr) + \
				 max(VF_MBOX_SLOTS * VF_MBOX_SLOT_SIZE, \
				     VF_EVT_SLOTS * VF_EVT_SLOT_SIZE))

/* A view of one SPSC ring of vgpu/ring.h. Geometry is the driver's own copy, taken once:
 * only the counters are read from the shared header, and the other side's counter is
 * untrusted (a distance above nr_elems marks the ring broken). */
struct vvf_ring {
	struct vgpu_ring_hdr *hdr;
	u8 *slots;
	u32 nr_elems, elem_size;
};

/* BAR2's layout as the header gave it at probe (checked to lie inside BAR2). */
struct vvf_layout {
	u64 hdr_off, ctrl_off, db_off, intr_off;
	u64 vram_off, vram_size, dma_off, dma_size;
	u64 req_off, rsp_off, evt_off, ring_region;
};

#define VVF_SVM_POOL		(32ull << 20)	/* VRAM the driver takes for migrated pages */
#define VVF_SVM_ALIGN		(2ull << 20)	/* ... aligned to this, and taken in pieces of it */
#define VVF_SVM_OWNERS		64		/* processes tracked as holding pool pages */

/* The pool of device-coherent VRAM pages that process memory migrates into (svm.c). */
struct vvf_svm {
	struct mutex setup_lock;	/* protects everything but the fields under lock or
					 * vd->mbox_lock below */
	bool ready;			/* the pool is there and hands out pages (under lock) */
	bool broken;			/* a reset lost pages still in use: no new pool yet
					 * (under lock) */
	bool mapped;			/* pgmap holds struct pages for [off, off + size) */
	u32 client, device, mem;	/* the driver's own RM objects behind the pool */
	u64 off, size;			/* BAR2 range of the pool */
	struct dev_pagemap pgmap;
	/* Migrations into the pool hold it shared; an announced reset takes it exclusively
	 * to set resetting, so no page enters the pool once the eviction began. */
	struct rw_semaphore migrate_sem;
	bool resetting;			/* a reset is announced: nothing enters the pool */
	u32 resetting_seq;		/* ... the announced reset's number */
	u64 evicted, evict_lost;	/* pages an announced reset moved out / could not */
	spinlock_t lock;		/* protects ready, free and in_use */
	struct page *free;		/* free pages, linked through zone_device_data */
	u64 in_use;
	/* Processes that migrated pages in since the pool was last empty (under lock): the
	 * ones a reset must tell, whether or not they still have the device open. */
	struct pid *owners[VVF_SVM_OWNERS];
	u32 nr_owners;
	/* The pool's VRAM under pages a reset lost, which their processes may still map: from
	 * the first mailbox call after the reset until the last of them is freed, a client of
	 * the driver's own holds it, so the host gives it to no one else (under vd->mbox_lock).
	 */
	struct {
		bool need;		/* [off, off + size) must be held */
		u64 off, size;
		u32 client;		/* the client holding all of it (0: not held) */
		/* Room for the objects taking it back puts elsewhere, made at probe: the
		 * mailbox's holder allocates nothing (reclaim may wait for a mailbox call). */
		u32 *fillers;
		u32 max_fillers;
	} lost;
};

/* One bound VF. Freed when the device is gone and the last file is closed. */
struct vvf_dev {
	struct kref ref;
	struct pci_dev *pdev;
	void __iomem *bar0;
	u8 *bar2;			/* the whole BAR2, write-back (memremap) */
	resource_size_t bar2_phys, bar2_size;
	struct vf_bar_header *hdr;	/* bar2 + the last page */
	struct vvf_layout lay;
	u32 abi_version, vf_id;
	bool gone;			/* removed: every call fails with -ENODEV */

	struct mutex mbox_lock;		/* one mailbox call at a time; protects req, rsp, seq */
	struct vvf_ring req, rsp;
	u32 seq;
	u64 late_replies;
	u32 seen_reset_count;		/* the rings above are those of this reset count */

	struct vvf_ring evt;		/* drained by the event thread only */
	u32 evt_reset_count;		/* the reset the files last forgot their objects for */
	struct rw_semaphore remove_sem;	/* calls hold it shared; remove takes it to unmap */

	wait_queue_head_t wq[VGPU_VF_NR_VECTORS];
	atomic64_t irq_count[VGPU_VF_NR_VECTORS];
	int nr_vectors;

	struct mutex files_mutex;	/* protects files, nr_files; taken before a file's lock */
	struct list_head files;
	u32 nr_files;

	struct miscdevice misc;
	char name[32];
	struct vvf_svm svm;

	/* An announced reset (ABI 2.5): its number, taken from the header by the event
	 * thread; the work evicts the SVM pool and acknowledges it. */
	struct work_struct reset_work;
	u32 reset_seen;			/* the last number the work was queued for */

	/* The fault service of the files' address spaces (vgpu_vf_as.c) runs here, so that
	 * remove can wait for all of it before BAR2 and the SVM pool go away. */
	struct workqueue_struct *as_wq;
};

enum vvf_mem_kind { VVF_MEM_VRAM, VVF_MEM_DMA, VVF_MEM_KERNEL };

/* One RM memory object a file allocated: the BAR2 range its pages may map, what it counts
 * against the file's quota, and where the GPU reaches it (AS_MAP). */
struct vvf_mem {
	struct list_head node;
	u32 client, handle;
	u64 off, size;			/* BAR2 offset and bytes (size 0: not mappable) */
	u64 bytes;			/* charged to the file's quota of its kind */
	u64 gpu_addr;			/* VF-physical VRAM address or IOVA */
	enum vvf_mem_kind kind;		/* KERNEL: memory of the driver's own client */
};

/* One channel a file allocated through its RM calls: what the channel quota counts, and
 * what a FREE of the channel, its VASPACE, DEVICE or client gives back. */
struct vvf_chan {
	struct list_head node;
	u32 client, handle, vaspace, chid;
};

/* What one file may hold: the module parameters when it was opened. */
struct vvf_quota {
	u64 vram, dma;			/* bytes (0: only the VF's quota) */
	u32 chans;			/* 0: only the VF's quota */
	u32 clients;			/* <= VVF_MAX_CLIENTS */
};

/* One open file: an RM context of its own, its memory, its channels, and a mailbox of its
 * own: three private rings (request, reply, event) that its mapping shows where BAR2's
 * rings are, so a driver written for the bare device runs unchanged on top of this one. */
struct vvf_file {
	struct vvf_dev *vd;
	struct file *filp;
	struct list_head node;		/* vd->files */
	struct mutex lock;		/* protects clients, devices, mems, chids, preq, prsp */
	u32 clients[VVF_MAX_CLIENTS];
	u32 devices[VVF_MAX_CLIENTS];	/* each client's DEVICE handle (0: none yet) */
	u32 nr_clients;
	u32 epoch;			/* the reset count the records belong to */
	struct list_head mems;
	struct list_head chans;		/* struct vvf_chan */
	struct vvf_quota quota;		/* limits, fixed at open */
	u64 vram_used, dma_used;	/* bytes charged (under lock) */
	u32 chans_used;			/* channels charged, the kernel's included (under lock) */
	bool strict;			/* strict_as when opened: no VASPACE of its own */
	unsigned long chids[BITS_TO_LONGS(VVF_MAX_CHID)];	/* channels this file allocated */
	u64 seen[VGPU_VF_NR_VECTORS];	/* interrupt counts when this file last waited */
	void *rings;			/* 3 x ring_region bytes: request, reply, event */
	struct vvf_ring preq, prsp, pevt;	/* pevt: the event thread's, under files_mutex */
	atomic64_t replies;		/* the file's own mailbox "interrupt" count */
	atomic64_t dropped;		/* replies or events lost to a full private ring */
	struct mutex as_lock;		/* serialises the AS ioctls (making as and channels) */
	struct vvf_as *as;		/* the kernel-owned SVM address space, or NULL; set and
					 * cleared under vd->files_mutex (the event thread's) */
};

/* ---- vgpu_vf_main.c ---- */
void vvf_dev_put(struct vvf_dev *vd);
/* The next free slot to produce into, or NULL (full; ERR_PTR(-EPROTO): broken ring). */
void *vvf_ring_produce_slot(struct vvf_ring *r);
void vvf_ring_produce_commit(struct vvf_ring *r);
/* The oldest unread slot, or NULL (empty; ERR_PTR(-EPROTO): broken ring). */
void *vvf_ring_consume_slot(struct vvf_ring *r);
void vvf_ring_consume_commit(struct vvf_ring *r);
/* Skip what is queued (replies or events meant for an earlier attach or reset). */
void vvf_ring_skip(struct vvf_ring *r);
/* One mailbox call: @req (kernel memory) out, the reply's payload into @rsp (room for
 * *@rsp_len bytes; its length on return), the host's status in *@status. 0 or -errno
 * (-ETIMEDOUT, -ENOLINK while the VF resets, -EMSGSIZE, -EPROTO for a broken ring). */
int vvf_mbox_call(struct vvf_dev *vd, u32 type, const void *req, u32 req_len, void *rsp,
		  u32 *rsp_len, s32 *status, u64 timeout_ns);
/* A mailbox call on behalf of an open file whose records belong to reset count @epoch: as
 * vvf_mbox_call, but -ENOLINK without sending once the rings are of another reset count, so
 * nothing a call makes is recorded against a reset the file has not forgotten. *@sent: the
 * request reached the host (whatever the outcome: a timed-out call may still run). */
int vvf_mbox_file_call(struct vvf_dev *vd, u32 epoch, u32 type, const void *req, u32 req_len,
		       void *rsp, u32 *rsp_len, s32 *status, u64 timeout_ns, bool *sent);
/* One call on the mailbox the caller holds (vd->mbox_lock, the rings attached), for what
 * must reach the host before anyone else's call: no reattach, no fence. As vvf_mbox_xfer. */
int vvf_mbox_send_locked(struct vvf_dev *vd, u32 type, const void *req, u32 req_len, void *rsp,
			 u32 *rsp_len, s32 *status, u64 timeout_ns, bool *sent);
/* Ring the host on vector @v. */
void vvf_notify(struct vvf_dev *vd, unsigned int v);
/* Whether the VF's mailbox is served (header state READY). */
bool vvf_ready(struct vvf_dev *vd);
/* The GET_INFO payload this driver sends, whoever asks: its ABI, and that it acknowledges
 * announced resets. */
void vvf_info_req(struct vf_msg_info_req *rq);

/* ---- vgpu_vf_file.c ---- */
extern const struct file_operations vvf_fops;
/* Push @e into the event ring of every file it concerns (channel events: the file owning
 * the channel). Called from the event thread. */
void vvf_files_event(struct vvf_dev *vd, const struct vf_event *e);
/* Reset @rc freed every RM object: every file whose records are older forgets what it held
 * and loses its memory mappings (@all: the device goes away, every file, every page).
 * Sleeps. */
void vvf_files_reset(struct vvf_dev *vd, u32 rc, bool all);

/* Let the file map BAR2 [off, off + size) (an RM memory object @handle of @client, one of
 * the driver's own, made under reset count @epoch) and have the events of channel @chid.
 * 0, -ENOMEM, or -ENOLINK (a reset since freed it). */
int vvf_file_own(struct vvf_file *f, u32 epoch, u32 client, u32 handle, u64 off, u64 size,
		 u32 chid);
/* Charge @vram bytes of VRAM and @chans channels made for the file by the kernel (its
 * address space) to its quota: 0 or -EDQUOT, nothing charged. vvf_file_uncharge gives
 * them back. */
int vvf_file_charge(struct vvf_file *f, u64 vram, u32 chans);
void vvf_file_uncharge(struct vvf_file *f, u64 vram, u32 chans);
/* The memory object @handle of @client that the file allocated through its own RM calls
 * (not the kernel's), copied into *@out. Under f->lock. 0 or -ENOENT. */
int vvf_file_mem_locked(struct vvf_file *f, u32 client, u32 handle, struct vvf_mem *out);

/* ---- vgpu_vf_as.c ---- */
struct vvf_as;
/* A VF_EVT_MMU_FAULT of a channel of some file's address space: queued for the kernel's
 * fault service (true), or not one of those (false). From the event thread. */
bool vvf_as_fault_event(struct vvf_dev *vd, const struct vf_event *e);
/* A VF reset freed the file's address space: nothing of it is touched again. Under the
 * file's lock and vd->files_mutex. */
void vvf_as_reset(struct vvf_file *f);
/* Closing: stop the fault service, free the address space and its channels. */
void vvf_as_release(struct vvf_file *f);
/* VGPU_VF_IOC_AS_CREATE, _CHANNEL, _INFO, _MAP, _UNMAP. */
long vvf_ioc_as_create(struct vvf_file *f, unsigned long arg);
long vvf_ioc_as_channel(struct vvf_file *f, unsigned long arg);
long vvf_ioc_as_info(struct vvf_file *f, unsigned long arg);
long vvf_ioc_as_map(struct vvf_file *f, unsigned long arg);
long vvf_ioc_as_unmap(struct vvf_file *f, unsigned long arg);
/* The memory object @handle of @client (every one of the client if @handle is 0) is about
 * to be freed: remove its AS_MAP mappings first, so the GPU never reaches it once the host
 * may give it to someone else. Under f->lock. */
void vvf_as_unmap_mem(struct vvf_file *f, u32 client, u32 handle);

/* ---- vgpu_vf_svm.c ---- */
/* An RM call's reply as the mailbox returns it: its header and up to 64 parameter bytes. */
struct vvf_rm_rsp {
	struct vgpu_rm_reply r;
	u8 params[64];
};
/* Of @rsp (@len bytes received): the RM's status, or -EPROTO if it is short, else its first
 * @out_len parameter bytes into @out and its new handle into *@handle (if not NULL). */
int vvf_rm_rsp_take(const struct vvf_rm_rsp *rsp, u32 len, void *out, u32 out_len,
		    u32 *handle);
/* An RM call of one of the driver's own clients: @req (@len bytes, its header filled here),
 * @out_len bytes of the reply's parameters into @out, the new handle into *@handle. The RM
 * status or the mailbox's -errno. */
int vvf_krm(struct vvf_dev *vd, u32 op, void *req, u32 len, void *out, u32 out_len,
	    u32 *handle);
/* ALLOC of class @cls under @parent; @params (@plen <= 64 bytes) in and out. As vvf_krm. */
int vvf_krm_alloc(struct vvf_dev *vd, u32 client, u32 parent, u32 cls, void *params, u32 plen,
		  u32 *handle);
void vvf_svm_init(struct vvf_dev *vd);
/* What the pool needs of the layout, made at probe once it is checked: 0 or -ENOMEM.
 * vvf_svm_free gives it back (with the device). */
int vvf_svm_prepare(struct vvf_dev *vd);
void vvf_svm_free(struct vvf_dev *vd);
/* Migrate every page still in the pool back to system memory (its processes keep their
 * data) and drop the pool's struct pages. */
void vvf_svm_fini(struct vvf_dev *vd);
/* A reset took the pool: SIGBUS to the processes whose pages it held. From the event thread. */
void vvf_svm_reset(struct vvf_dev *vd);
/* Before a mailbox call, under vd->mbox_lock (@reset: the first call on the rings of a new
 * reset count, so nothing has reached the host since the reset; @vram: the call is an ALLOC
 * of VRAM): the reset took the pool, and the VRAM under pages it lost is held until they
 * are all freed. 0, or -EAGAIN while that VRAM is not held: then no ALLOC of VRAM may reach
 * the host. */
int vvf_svm_fence_locked(struct vvf_dev *vd, bool reset, bool vram);
/* Reset @seq is announced: no page enters the pool any more, every page in it goes back to
 * system memory while the host has not begun the reset (checked after each batch, so no
 * page is copied from scrubbed VRAM). Returns the pages left in the pool. Sleeps. */
u64 vvf_svm_evict_for_reset(struct vvf_dev *vd, u32 seq);
/* Make the pool if there is none yet (RM calls: not under a process's mmap lock). 0,
 * -EIO while a reset's lost pages are still in use, or the RM's -errno. */
int vvf_svm_ensure(struct vvf_dev *vd);
/* Move @mm's anonymous private [addr, addr + len) into the pool (@to_vram) or back, under
 * mmap_read_lock(@mm); @who is told by SIGBUS if a reset loses its pages. Pages that cannot
 * move stay; *@moved counts the others. -EOPNOTSUPP (shared or file memory), -EFAULT
 * (unmapped), -EBUSY (a reset is announced). */
int vvf_svm_move_locked(struct vvf_dev *vd, struct mm_struct *mm, struct pid *who, u64 addr,
			u64 len, bool to_vram, u64 *moved);
/* Whether the pool is there and has no free page. */
bool vvf_svm_full(struct vvf_dev *vd);
/* Whether @page is one of this VF's pool pages (device-coherent VRAM). */
bool vvf_svm_page_ours(struct vvf_dev *vd, struct page *page);
/* VGPU_VF_IOC_SVM. */
long vvf_ioc_svm(struct vvf_file *f, unsigned long arg);
/* VGPU_VF_IOC_SVM_QUERY. */
long vvf_ioc_svm_query(struct vvf_file *f, unsigned long arg);

#endif
