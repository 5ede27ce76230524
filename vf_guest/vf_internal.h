/* SPDX-License-Identifier: MIT */
/* vf_guest internals: the driver's state, shared by the module's files. */
#ifndef VGPU_VF_INTERNAL_H
#define VGPU_VF_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/list.h"
#include "common/lock.h"
#include "common/ring.h"
#include "vf_guest/include/vgpu_vf.h"
#include <vgpu/gpfifo.h>
#include <vgpu/vf_bar.h>

#define VF_DEFAULT_SPIN_NS	(20ull * 1000)
#define VF_DEFAULT_RM_TIMEOUT	(5ull * 1000 * 1000 * 1000)
#define VF_DEFAULT_FENCE_TIMEOUT (10ull * 1000 * 1000 * 1000)
#define VF_DMA_PAGE		4096u
#define VF_PT_CHUNK		(64u << 10)	/* VRAM fetched from the RM per page-table chunk */
/* Every address space maps the whole DMA memory here, so GPFIFO rings, pushbuffers, USERD
 * and semaphores have one GPU VA each, the same in every address space. */
#define VF_DMA_VA_BASE		(1ull << 44)

/* ---- page tables (gmmu.c): independent of the VF so unit tests can drive them ---- */
struct vf_pt;

/* Where 4 KiB tables come from: VF-physical addresses inside the VRAM aperture. */
struct vf_pt_ops {
	int (*alloc)(void *ctx, uint64_t *pa);
	void (*free)(void *ctx, uint64_t pa);
};

struct vf_gmmu {
	uint8_t *vram;			/* CPU view of VF-physical VRAM [0, vram_size) */
	uint64_t vram_size;
	const struct vf_pt_ops *ops;
	void *ctx;
	struct vf_pt *root;		/* level 0 */
	uint64_t tables;		/* tables allocated (root included) */
};

/* Allocate the root table. */
int vf_gmmu_init(struct vf_gmmu *g, uint8_t *vram, uint64_t vram_size,
		 const struct vf_pt_ops *ops, void *ctx);
/* Free every table (the root last); entries are cleared first. */
void vf_gmmu_fini(struct vf_gmmu *g);
/* Forget every table without touching VRAM (it was scrubbed by a reset). */
void vf_gmmu_forget(struct vf_gmmu *g);
/* Map [va, va+size) to @addr in aperture @aper (VGPU_GMMU_APER_*) with @page_size pages and
 * PTE flags @pte_flags (VGPU_GMMU_RO / VOLATILE). All or nothing. */
int vf_gmmu_map(struct vf_gmmu *g, uint64_t va, uint64_t aper, uint64_t addr, uint64_t size,
		uint64_t page_size, uint64_t pte_flags);
/* Unmap exactly what a map of [va, va+size) produced; -ENOENT (nothing changes) if any page
 * in the range is unmapped. Empty tables are freed. */
int vf_gmmu_unmap(struct vf_gmmu *g, uint64_t va, uint64_t size);
/* Walk the software tree (the tables it mirrors). 0 or -ENOENT. */
int vf_gmmu_lookup(const struct vf_gmmu *g, uint64_t va, uint64_t *aper, uint64_t *addr,
		   uint64_t *page_size, uint64_t *pte);
/* VF-physical address of the root. */
uint64_t vf_gmmu_pdb(const struct vf_gmmu *g);

/* ---- DMA memory (dma.c): 4 KiB pages of BAR2's DMA region, first fit ---- */
#define VF_DMA_CHUNK		(2ull << 20)	/* backing asked of the RM at a time */

#define VF_DMA_MAX_CHUNKS	64

/* Backing for the allocator: @size bytes (a 64 KiB multiple) of DMA memory that are now the
 * driver's; 0 with their offset in *@off and a handle for giving them back, or -errno
 * (-ENOMEM: none left, -VGPU_EQUOTA: over the function's quota). Called without the
 * allocator's lock, as is the put that gives a chunk back. */
typedef int (*vf_dma_grow_fn)(void *ctx, uint64_t size, uint64_t *off, uint32_t *handle);
typedef void (*vf_dma_put_fn)(void *ctx, uint32_t handle);

struct vf_dma_chunk {
	uint64_t off, size;
	uint32_t handle;
};

struct vf_dma {
	uint8_t *cpu;
	uint64_t size;
	uint64_t iova;
	uint32_t npages;
	uint64_t *bitmap;		/* set = in use */
	uint64_t *owned;		/* set = the driver's (given by the RM), may be handed out */
	vf_dma_grow_fn grow;		/* NULL: the whole memory is the driver's */
	vf_dma_put_fn put;
	void *grow_ctx;
	uint64_t owned_bytes;
	struct vf_dma_chunk chunks[VF_DMA_MAX_CHUNKS];	/* what the backing gave */
	uint32_t nr_chunks;
	struct cmn_mutex lock;		/* protects everything above but cpu, size, iova, npages */
};

int vf_dma_init(struct vf_dma *d, uint8_t *cpu, uint64_t size, uint64_t iova);
/* From now on hand out only memory @grow gave (nothing yet): the RM owns the DMA memory. */
void vf_dma_set_backing(struct vf_dma *d, vf_dma_grow_fn grow, vf_dma_put_fn put, void *ctx);
void vf_dma_fini(struct vf_dma *d);
/* @size bytes aligned to @align (power of two >= 4 KiB): offset, or -ENOMEM (or the backing's
 * error, e.g. -VGPU_EQUOTA). */
int vf_dma_alloc(struct vf_dma *d, uint64_t size, uint64_t align, uint64_t *off);
void vf_dma_free(struct vf_dma *d, uint64_t off, uint64_t size);

/* ---- managed memory (managed.c) hooks into the driver ---- */
struct vgpu_fault_entry;
struct vf_managed_hooks {
	/* Every MMU-fault event, from vf_events_poll() with mbox_lock held: queue, never block
	 * or make a mailbox call. */
	void (*fault)(void *ctx, const struct vgpu_fault_entry *f);
	/* First thing in vgpu_vf_close(): bring managed pages back, free what it holds. */
	void (*close)(struct vgpu_vf *vf);
	void *ctx;			/* managed.c's state */
};

/* ---- objects ---- */
struct vgpu_mem {
	struct vgpu_vf *vf;
	struct cmn_list node;		/* vf->mems */
	enum vgpu_mem_kind kind;
	uint64_t addr;			/* VF-physical VRAM or IOVA */
	uint64_t dma_off;		/* SYSMEM: offset in DMA memory */
	uint64_t size, page_size;
	uint32_t handle;		/* VRAM: the RM's handle */
	atomic_uint maps;		/* live vgpu_va_map()s */
	bool lost;			/* freed by a reset: the handle is gone */
};

struct vf_pt_chunk {
	struct vgpu_mem *mem;
	uint32_t used;			/* bitmap of its 16 tables */
};

struct vgpu_vaspace {
	struct vgpu_vf *vf;
	struct cmn_list node;		/* vf->vaspaces */
	struct cmn_mutex lock;		/* protects gmmu and chunks */
	struct vf_gmmu gmmu;
	struct vf_pt_chunk *chunks;
	uint32_t nr_chunks, cap_chunks;
	uint32_t handle;		/* RM VASPACE object, 0 if the RM has none */
	bool lost;
};

/* Per submission still in flight: where its pushbuffer segment ends. */
struct vf_sub_rec {
	uint64_t seq;			/* fence value */
	uint64_t pb_end;		/* pushbuffer bytes produced up to this submission */
};

struct vgpu_channel {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct cmn_list node;		/* vf->channels */
	uint32_t handle, chid, token, runlist;
	/* DMA memory: one block, laid out GPFIFO | pushbuffer | USERD page (USERD, semaphore) */
	uint64_t dma_off, dma_bytes;
	uint64_t *gpfifo;
	uint32_t entries, put;
	uint32_t gp_get_seen;		/* the device's GP_GET when last read (behind or equal) */
	uint8_t *pb;
	uint32_t pb_size;
	uint64_t pb_head, pb_tail;	/* bytes produced / known free (monotonic) */
	struct vgpu_userd *userd;
	uint64_t *sem;
	uint64_t gpfifo_va, pb_va, sem_va;
	uint64_t seq;			/* last fence value handed out */
	struct vf_sub_rec *recs;	/* ring of entries slots */
	uint32_t rec_head, rec_tail;
	uint32_t fault_reason;		/* from VF_EVT_MMU_FAULT, 0 if none */
	uint64_t fault_va;
	uint32_t sem_flags;		/* of the fence release */
	uint32_t userd_aper;		/* VGPU_APER_* */
	uint64_t userd_phys;		/* IOVA or VF-physical address of USERD */
	struct vgpu_mem *mem;		/* the block, when it lives in VRAM (else DMA memory) */
	uint64_t mem_va;
	bool rpc_submit;		/* ring through the mailbox instead of the doorbell */
	bool inl_valid;			/* USERD holds an inline copy (vgpu/gpfifo.h) */
	bool lost;
};

struct vgpu_vf {
	struct vgpu_vf_opts opts;
	struct vgpu_vf_transport *t;
	uint8_t *bar;
	uint64_t bar_size;
	const struct vf_bar_header *hdr;
	uint64_t dma_iova;		/* header's dma_iova at attach; 0: no IOMMU window */
	struct vgpu_doorbell_page *db;	/* NULL: the host has no doorbell page in BAR2 */
	struct vf_intr_page *intr;	/* NULL: the host has no interrupt page */
	struct vgpu_vf_info info;
	struct vf_dma dma;

	struct cmn_mutex mbox_lock;	/* protects the rings and seq below */
	struct cmn_ring req, rsp, evt;
	uint32_t seq;
	uint64_t late_replies;		/* replies with a stale seq, dropped */

	struct cmn_mutex obj_lock;	/* protects the lists */
	struct cmn_list mems, vaspaces, channels;

	uint32_t seen_reset_count;
	atomic_bool reset_pending;
	struct vgpu_vf_lost lost;	/* found lost since the last successful recovery */
	/* RM context */
	bool rm_ok;
	uint32_t h_client, h_device, h_subdevice;
	uint64_t rm_cookie;
	char rm_why[160];
	char last_error[256];
	struct vf_managed_hooks managed;	/* all NULL until managed memory starts */
	uint8_t slice_uuid[16];		/* the header's, at the last attach */
	uint64_t vram_off;		/* the header's, at the last attach */
	char ep_path[108];		/* local endpoint after a reattach (opts.socket's) */
	int sva_fd;			/* SVA connection to vgpud (vgpu/sva.h), -1 if none */
	uint32_t sva_pasid;		/* bound at this PASID; 0 while not bound */
	struct vf_sva_pri *sva_pri;	/* page requests served (sva.c), or NULL */
};

/* Record a message for vgpu_vf_last_error() (and stderr unless quiet); returns @err. */
int vf_error(struct vgpu_vf *vf, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- sva.c ---- */
/* Close the SVA connection (vgpud unbinds); stops serving page requests first. */
void vf_sva_close(struct vgpu_vf *vf);

/* ---- transport_local.c: moving an attachment (vgpu_vf_reattach) ---- */
/* Whether @t is a local transport (vgpu_vf_transport_local). */
bool vf_local_is(const struct vgpu_vf_transport *t);
/* The endpoint path @t connects to. */
const char *vf_local_path(struct vgpu_vf_transport *t);
/* Put attached local transport @nt's BAR2 at @t's mapping address in place of @t's (same
 * size), give @t @nt's connection and vectors, close @t's old ones and free @nt. 0, or
 * -errno with both unchanged. */
int vf_local_take_over(struct vgpu_vf_transport *t, struct vgpu_vf_transport *nt);

/* ---- mem.c, channel.c, vaspace.c ---- */
/* vgpu_mem_free(), vgpu_channel_destroy() and vgpu_vaspace_destroy(); @force drops the
 * object whatever the RM's FREE says (the close, whose client free takes every host object
 * with it). */
int vf_mem_free(struct vgpu_mem *m, bool force);
int vf_channel_destroy(struct vgpu_channel *ch, bool force);
int vf_vaspace_destroy(struct vgpu_vaspace *as, bool force);

/* ---- vaspace.c ---- */
/* Map raw @aper (VGPU_GMMU_APER_*) addresses with no memory object. */
int vf_va_map_aper(struct vgpu_vaspace *as, uint64_t va, uint64_t aper, uint64_t addr,
		   uint64_t size, uint64_t page_size, unsigned int flags);

/* ---- bar.c ---- */
/* Validate the header of the BAR2 at vf->bar and fill vf->hdr, dma_iova, info, db, intr. */
int vf_bar_parse(struct vgpu_vf *vf);
/* Attach the three rings of the current BAR2. */
int vf_bar_rings(struct vgpu_vf *vf);

/* ---- mbox.c ---- */
int vf_mbox_call_locked(struct vgpu_vf *vf, uint32_t type, const void *req, size_t req_len,
			void *rsp, size_t *rsp_len);
/* Drain the event ring: resets and per-channel faults/errors. */
void vf_events_poll(struct vgpu_vf *vf);

/* ---- rm_client.c: RM calls over VF_MSG_RM (wire format: include/vgpu/rm.h) ---- */
struct vf_rm_chan_args {
	uint32_t vaspace;		/* RM VASPACE handle */
	uint64_t pdb;			/* VF-physical address of the level-0 table */
	uint32_t runlist;
	uint64_t gpfifo_va;
	uint32_t entries;
	uint32_t userd_aper;		/* VGPU_APER_* */
	uint64_t userd_addr;
	bool replayable;
};
/* Whether the driver's RM context (client, device, subdevice) exists. */
bool vf_rm_available(const struct vgpu_vf *vf);
/* Make the RM context; on failure vf->rm_why says why (not fatal for the attach). */
int vf_rm_setup(struct vgpu_vf *vf);
/* Free the RM context (the host frees everything under the client). */
void vf_rm_teardown(struct vgpu_vf *vf);
/* FREE with an explicit client handle (tests: another function's handle). */
int vf_rm_free_as(struct vgpu_vf *vf, uint32_t client, uint32_t handle);
int vf_rm_vidmem_alloc(struct vgpu_vf *vf, uint64_t size, uint64_t page_size,
		       uint32_t *handle, uint64_t *pa);
int vf_rm_free(struct vgpu_vf *vf, uint32_t handle);
/* Whether a FREE's result lets the driver drop its object: done (0), or nothing left to
 * free (-ENOENT: the host has no such object, e.g. a timed-out earlier FREE went through;
 * -ENOLINK: the device is gone). Any other error may leave the host's object allocated. */
static inline bool vf_rm_free_done(int ret)
{
	return !ret || ret == -ENOENT || ret == -ENOLINK;
}
/* MEMORY_SYSMEM of @size bytes: its handle, IOVA and offset in DMA memory (checked to lie
 * inside it). */
int vf_rm_sysmem_alloc(struct vgpu_vf *vf, uint64_t size, uint32_t *handle, uint64_t *iova,
		       uint64_t *dma_offset);
int vf_rm_vaspace_alloc(struct vgpu_vf *vf, uint64_t pdb, uint32_t *handle);
int vf_rm_channel_alloc(struct vgpu_vf *vf, const struct vf_rm_chan_args *a,
			uint32_t *handle, uint32_t *chid, uint32_t *token);
/* The kernel-mediated submit: the host stores GP_PUT and rings for us. */
int vf_rm_channel_submit(struct vgpu_vf *vf, uint32_t handle, uint32_t gp_put);
/* A raw RM call with a caller-built wire message (tests: forged handles). */
int vf_rm_raw(struct vgpu_vf *vf, const void *req, size_t len, void *rsp, size_t *rsp_len);

#endif
