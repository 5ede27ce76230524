/* SPDX-License-Identifier: MIT */
/* rm - the shared resource manager (CPU-RM) of the device owner: a resource server with
 * clients and per-client resource trees (classes and controls in include/vgpu/rm.h),
 * handles whose prefix names the owning function, per-function quotas and memory (VRAM
 * through the function's PMA, system memory through its IOMMU domain), and the GSP, which
 * it starts and talks to only by RPC (rm/gsp/gsp.h). A device reset (GSP crash or hang)
 * is replayed from the RM's own records; no partition and no VRAM is lost.
 *
 * The RM never touches the device itself: privileged state goes to the GSP by RPC, and
 * the few unprivileged device actions it needs go through struct rm_device_ops, which its
 * owner hands it at creation (rm/hw/rm_hw.h implements them over the device models).
 *
 * Functions: 0 is the PF, 1..nr_vfs the VFs. Calls made "as function @fn" may only name
 * that function's clients: another function's handle gives -VGPU_EFOREIGN.
 *
 * Locking (checked by a lock-order validator; a violation is reported and aborts unless
 * cmn_lockdep_set_handler() installed a handler): API lock (read for calls on one client,
 * write for partition changes and VF disable) -> client locks in ascending handle order ->
 * device lock. No API or device lock is held while waiting for the GSP. Client lookup is
 * lock-free (RCU hash table). Every call is thread-safe.
 *
 * Errors: 0 or negative: -EINVAL (malformed), -ENOENT (no such handle), -VGPU_EFOREIGN,
 * -EACCES (no share right), -ENOSPC (handle range exhausted), -VGPU_EQUOTA (over quota),
 * -ENOMEM (no space), -EBUSY, -EEXIST, -EOPNOTSUPP, and the GSP's (rm/gsp/gsp.h). */
#ifndef VGPU_RM_RM_H
#define VGPU_RM_RM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rm;
struct gsp;
struct gsp_config;
struct iommu_domain;
struct iommu_memobj;
struct pma;

/* Per-function limits; 0 means "no limit beyond the partition". */
struct rm_quota {
	uint64_t vram;			/* bytes of VRAM */
	uint64_t sysmem;		/* bytes of DMA memory mapped for the GPU */
	uint32_t channels;
	uint32_t clients;
	uint32_t objects;		/* objects of all the function's clients together (not
					 * counting the clients themselves) */
};

/* What the RM tells the owner (vgpud) about a function. */
enum rm_notify {
	RM_NOTIFY_DEVICE_RESET = 1,	/* the GSP was restarted; hardware state replayed */
	RM_NOTIFY_VF_RESET = 2,		/* rm_vf_reset() finished */
};

/* A device event: the GSP observed it (include/vgpu/rpc.h, VGPU_RPC_EVT_*) and the RM
 * checked it and, for a hung channel, recovered. */
enum rm_event_kind {
	RM_EVENT_CHAN_ERROR = 1,	/* a channel stopped with an error; USERD.error has it */
	RM_EVENT_MMU_FAULT = 2,		/* MMU faults of the function (entries: the fault buffer) */
	RM_EVENT_WATCHDOG = 3,		/* the GSP's watchdog fired */
};

struct rm_event {
	enum rm_event_kind kind;
	unsigned int fn;
	uint32_t chid;
	uint32_t code;		/* CHAN_ERROR: enum vgpu_chan_error; MMU_FAULT: enum
				 * vgpu_fault_reason; WATCHDOG: enum vgpu_rpc_wd_reason */
	uint32_t gp_get;	/* CHAN_ERROR, WATCHDOG: where the channel stopped */
	uint64_t count;		/* CHAN_ERROR, MMU_FAULT: occurrences folded in (>= 1) */
	uint64_t va;		/* MMU_FAULT: the last faulting VA */
	uint64_t stall_ns;	/* WATCHDOG (HUNG): how long GP_GET did not move */
	int recovery;		/* WATCHDOG (HUNG): 0 if the RM stopped the channel (a
				 * CHAN_ERROR event follows), else -errno (-ENOENT: freed
				 * or disabled meanwhile, or the id is another channel's
				 * now; -EINPROGRESS: the owner's lock was busy, the RM
				 * retries and logs the outcome, a CHAN_ERROR follows
				 * the stop) */
};

/* What the owner tells the RM about the device (rm_device_ops.info). */
struct rm_device_info {
	unsigned int nr_fns;		/* PF + VFs, 1..64 */
	unsigned int nr_engines;	/* runlists per function, 1..4 */
	uint64_t vram_size;		/* bytes of device VRAM */
	int priv_fd;			/* privileged-region memfd, handed to the GSP process */
	int kick_fd;			/* eventfd the GSP writes after each privileged write */
	int status_fd;			/* device-status memfd the GSP watches (<= 0: none) */
	void *tsan_sync;		/* ThreadSanitizer orders GSP requests and device events
					 * on this address (the device's); may be NULL */
};

/* The device actions the RM needs that are not the GSP's: each one is either the device
 * owner's business (memfds it owns, the IOMMU), work a guest does itself unprivileged
 * (submission), or waiting on and reporting the device's engines. All are called without
 * an RM lock held, and may be called from any thread. @ctx is rm_config.ops_ctx. Results
 * are 0 or -errno unless said otherwise. */
struct rm_device_ops {
	/* Geometry and the GSP's memfds; called once, at creation. */
	void (*info)(void *ctx, struct rm_device_info *out);
	/* The GSP runs: the owner gives up its own write access to the privileged state. */
	void (*priv_handover)(void *ctx);
	/* The memfd backing @fn's VRAM slice (owned by the device), or -errno if none. */
	int (*slice_fd)(void *ctx, unsigned int fn);
	/* Zero device VRAM [@base, @base + @size) where the GSP holds no slice memfd. */
	int (*vram_scrub)(void *ctx, uint64_t base, uint64_t size);
	/* Wait until no engine runs @fn's channel @chid (disabled or freed by the GSP). */
	int (*chan_quiesce)(void *ctx, unsigned int fn, uint32_t chid, uint64_t timeout_ns);
	/* Fence off @fn's channel @chid, which the GSP failed to free and may still hold, as
	 * the device has it at the call: no engine runs that allocation (a turn in progress
	 * stops; wait with chan_quiesce) and its doorbells are ignored. The next allocation
	 * of the id, made once the GSP freed it, is not fenced. */
	int (*chan_fence)(void *ctx, unsigned int fn, uint32_t chid);
	/* Stop @fn's quiesced channel @chid with error @err (enum vgpu_chan_error) as the
	 * device does on its own errors; -EALREADY if it is in error already. */
	int (*chan_error)(void *ctx, unsigned int fn, uint32_t chid, uint32_t err);
	/* The allocation @fn's channel @chid is now (the gen of its privileged record), 0 if
	 * it is free. Optional: without it a watchdog record is taken to be about the channel
	 * that holds the id when the RM acts on it. */
	uint64_t (*chan_gen)(void *ctx, unsigned int fn, uint32_t chid);
	/* Submit for a guest as it would itself: store @gp_put (release) at @addr (USERD's
	 * GP_PUT: a device VRAM offset for VGPU_APER_VRAM, an IOVA of @fn's domain for
	 * VGPU_APER_SYS), then ring @fn's doorbell with @token. -EFAULT: not reachable. */
	int (*chan_submit)(void *ctx, unsigned int fn, uint32_t aper, uint64_t addr,
			   uint32_t gp_put, uint32_t token);
	/* Invalidate @fn's TLBs and resume its channels stalled on replayable faults. */
	void (*fault_replay)(void *ctx, unsigned int fn);
	/* Bytes of DMA memory object @mo. */
	uint64_t (*dma_size)(void *ctx, struct iommu_memobj *mo);
	/* Map [@off, @off + @size) of @mo read-write into @dom at *@iova, or (*@iova 0) at
	 * an IOVA it picks and returns in *@iova. */
	int (*dma_map)(void *ctx, struct iommu_domain *dom, struct iommu_memobj *mo,
		       uint64_t off, uint64_t size, uint64_t *iova);
	/* Undo dma_map(). */
	void (*dma_unmap)(void *ctx, struct iommu_domain *dom, uint64_t iova, uint64_t size);
};

struct rm_config {
	const struct rm_device_ops *ops;	/* the device (required); every op is set */
	void *ops_ctx;			/* their @ctx */
	struct pma *pma;		/* device VRAM allocator (the PF's; VF slices are children) */
	/* GSP settings (may be NULL: defaults); priv_fd, nr_fns and callbacks are set here.
	 * Copied: need not outlive rm_device_create(). */
	const struct gsp_config *gsp;
	unsigned int max_clients;	/* per function; 0: 1024, at most 0xfffff */
	unsigned int max_objects;	/* per client; 0: 4096, at most VGPU_RM_HANDLE_RANGE */
	unsigned int free_batch;	/* objects freed per batch in VF teardown; 0: 64 */
	/* Called by rm_vf_reset() between two teardown batches of @fn with no RM lock held
	 * (@batch counts from 1), so other functions' calls run meanwhile. May be NULL;
	 * gets notify_ctx. */
	void (*teardown_batch)(void *ctx, unsigned int fn, unsigned int batch);
	void (*notify)(void *ctx, unsigned int fn, enum rm_notify what);
	/* Device events (may be NULL), on the GSP's event worker: never inside an RPC wait,
	 * so it may call the RM; one at a time, in the GSP's order. Gets notify_ctx. */
	void (*event)(void *ctx, const struct rm_event *ev);
	void *notify_ctx;
};

/* A VF partition: its VRAM slice, quotas and DMA memory. */
struct rm_partition {
	uint64_t base, size;		/* device VRAM, 2 MiB aligned */
	struct rm_quota quota;
	struct iommu_domain *dma_domain;	/* the function's IOMMU domain (may be NULL) */
	struct iommu_memobj *dma;	/* its DMA-able memory to carve system memory from */
};

/* ---- device ---- */
/* Start the GSP and create the RM. 0 or -errno. */
int rm_device_create(const struct rm_config *cfg, struct rm **out);
/* Free every client, stop the GSP. NULL is a no-op. */
void rm_device_destroy(struct rm *rm);
/* The GSP connection (for its statistics and fault injection in tests). */
struct gsp *rm_gsp(struct rm *rm);

/* ---- partitions (the PF manager's calls) ---- */
/* Give VF @fn (1..nr_vfs) its slice: a child PMA over it, programmed by the GSP. -EEXIST
 * if it has one, -EINVAL/-EBUSY from the hardware, -ENOMEM. */
int rm_vf_partition_set(struct rm *rm, unsigned int fn, const struct rm_partition *p);
/* Take the slice back: -EBUSY while the function has clients (reset it first). */
int rm_vf_partition_clear(struct rm *rm, unsigned int fn);
/* Change @fn's quotas (not below what is in use: -EBUSY). A call over a client or
 * object limit fails with -VGPU_EQUOTA and changes nothing; the first refusal after the
 * function was below the limit is logged naming it ("VF 3: RM object limit 4096 reached"). */
int rm_quota_set(struct rm *rm, unsigned int fn, const struct rm_quota *q);
/* VF reset / guest gone: disable every client of @fn (no new calls), reset its channels
 * in the GSP, free its objects in bounded batches, scrub its VRAM. The partition stays. */
int rm_vf_reset(struct rm *rm, unsigned int fn);
/* Phase 1 alone: disable @fn's clients and revoke their channels and doorbells. Should the
 * GSP fail the reset, the channels it may still hold are fenced off in the device (the
 * chan_fence op) and the GSP's error is returned. */
int rm_vf_disable(struct rm *rm, unsigned int fn);
/* Phase 2: free at most @budget objects of disabled clients; -EINPROGRESS if more remain. */
int rm_vf_free_disabled(struct rm *rm, unsigned int fn, unsigned int budget);

/* ---- scheduler (recorded, replayed after a device reset) ---- */
/* Device-wide policy (enum gpu_sched_policy values 2..4) and slice (0: default). */
int rm_sched_set(struct rm *rm, uint32_t policy, uint64_t quantum_ns);
/* Per-function settings: @enabled takes part in time-slicing, @quantum_ns its best-effort
 * slice, @preempt_timeout_ns, @weight per mille (fixed share). -EINVAL from the hardware
 * if the weights would pass 1000. */
int rm_fn_sched_set(struct rm *rm, unsigned int fn, bool enabled, uint64_t quantum_ns,
		    uint64_t preempt_timeout_ns, uint64_t weight);

/* Watchdog timeout of @fn (recorded, replayed after a device reset): an enabled, resident
 * channel with pending work whose GP_GET does not move for @timeout_ns is stopped with
 * VGPU_CHAN_ERR_SEM_TIMEOUT (disabled first, through the CHANNEL_ENABLE path) and reported
 * (RM_EVENT_WATCHDOG, then RM_EVENT_CHAN_ERROR). 0: the default, 5 s; else >= 10 ms. */
int rm_fn_watchdog_set(struct rm *rm, unsigned int fn, uint64_t timeout_ns);

/* ---- RM calls as function @fn ---- */
/* New client of @fn; its handle in *@h_client. -ENOSPC when the range is full. */
int rm_client_alloc(struct rm *rm, unsigned int fn, uint32_t *h_client);
/* Free a client and everything under it. */
int rm_client_free(struct rm *rm, unsigned int fn, uint32_t h_client);
/* Allocate an object of @h_class under @h_parent. *@h_object: wanted handle or 0 (picked
 * here, returned). @params (@len bytes, the class's struct from include/vgpu/rm.h) are
 * read and their out fields written. */
int rm_alloc(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_parent,
	     uint32_t *h_object, uint32_t h_class, void *params, size_t len);
/* Free an object, its children and its dependants first (dependency order, iteratively). */
int rm_free(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object);
/* Run control @cmd on an object; @params is in/out: *@len bytes in, out size back, at most
 * @cap. */
int rm_control(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object,
	       uint32_t cmd, void *params, size_t *len, size_t cap);
/* Share object with @h_target (0: every client of @fn) with @access (VGPU_RM_ACCESS_*). */
int rm_share(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object,
	     uint32_t h_target, uint32_t access);
/* Duplicate memory object (@h_src_client, @h_src) under @h_parent of @h_client; both
 * clients belong to @fn and the source was shared with DUP right (or is the same client). */
int rm_dup(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_parent,
	   uint32_t *h_object, uint32_t h_src_client, uint32_t h_src);
/* Where a memory object lives for the GPU. */
int rm_map(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object, uint64_t *addr,
	   uint64_t *size, uint32_t *aperture);

/* Guest-facing entry: run the RM call in @req (@len bytes, a wire message of
 * include/vgpu/rm.h) as function @fn and write the reply to @reply (capacity *@reply_len,
 * at least sizeof(struct vgpu_rm_reply) + VGPU_RM_MAX_PARAMS is always enough); the
 * reply's status carries the call's result. Returns 0 if a reply was written, -EINVAL if
 * @reply is too small. */
int rm_dispatch(struct rm *rm, unsigned int fn, const void *req, size_t len, void *reply,
		size_t *reply_len);

/* ---- migration: a function's RM objects, moved with their handles ---- */
/* One object (or client: h_class 0, h_parent 0, handle == h_client). Class fields:
 * VASPACE a = pdb; MEMORY_VIDMEM a = size, b = page size, runs = (VF-physical address,
 * pages) pairs; MEMORY_SYSMEM a = size, b = IOVA (not 0), c = offset in the DMA memory; a dup of
 * memory names its source in dep_* and has no runs; CHANNEL_GPFIFO a = GPFIFO VA, b =
 * USERD address, x = chid, y = runlist, z = entries, w = RM_OBJ_CHAN_* flags and USERD
 * aperture, dep_* = its VA space; EVENT x = notify index. */
#define RM_OBJ_CHAN_APER	0xffu		/* w: USERD aperture (VGPU_APER_*) */
#define RM_OBJ_CHAN_REPLAYABLE	(1u << 8)
#define RM_OBJ_CHAN_ENABLED	(1u << 9)	/* export only: import leaves it disabled */
struct rm_obj_rec {
	uint32_t h_client, h_parent, handle, h_class;
	uint32_t share_target, share_access;
	uint32_t dep_client, dep_handle;
	uint64_t a, b, c;
	uint32_t x, y, z, w;
	uint32_t nr_runs;
	uint64_t *runs;			/* 2 * nr_runs words */
};
/* @fn's clients and objects in creation order (parents, VA spaces and dup sources before
 * what needs them), in *@out (*@n records; free with rm_obj_recs_free()). The function's
 * calls wait meanwhile. 0, -EINVAL, -ENOMEM. */
int rm_vf_export(struct rm *rm, unsigned int fn, struct rm_obj_rec **out, size_t *n);
/* Free what rm_vf_export() returned. */
void rm_obj_recs_free(struct rm_obj_rec *r, size_t n);
/* Re-create one exported record as function @fn: the same handle, VRAM pages, DMA offset
 * and IOVA, channel id (so the same work-submit token), channels disabled. Records come in
 * export order. -EEXIST (handle, pages, IOVA or chid taken), -ENOENT (parent or
 * dependency missing), -EINVAL (malformed), -VGPU_EQUOTA, -ENOMEM, or the GSP's error;
 * nothing of that record is left on failure. */
int rm_obj_import(struct rm *rm, unsigned int fn, const struct rm_obj_rec *r);

/* ---- introspection ---- */
/* The PMA of @fn's partition (a child over the slice; the device PMA for the PF), or NULL
 * without a partition. Stable until rm_vf_partition_clear(). */
struct pma *rm_vf_pma(struct rm *rm, unsigned int fn);
/* Clients plus objects @fn holds now (the leak check). */
uint64_t rm_object_count(struct rm *rm, unsigned int fn);
/* Lock ranks, for tests of the validator. */
enum rm_lock_rank { RM_RANK_API = 1, RM_RANK_CLIENT = 2, RM_RANK_DEVICE = 3, RM_RANK_ACCT = 4 };
/* Record taking / dropping a lock of @rank (@key orders locks of one rank). */
void rm_lockdep_acquire(enum rm_lock_rank rank, uint32_t key);
void rm_lockdep_release(enum rm_lock_rank rank, uint32_t key);

#endif
