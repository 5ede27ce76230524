/* SPDX-License-Identifier: MIT */
/* vgpu_vf.h - libvgpu-vf, the guest VF driver: what runs inside a tenant to use one vGPU slice.
 *
 * It attaches to a VF through a transport (a local process: the VF's endpoint socket, where it
 * is an ivshmem peer and maps the BAR2 it receives; inside a VM: the ivshmem PCI device), checks
 * the ABI version, and then drives the slice with nothing but the ABI in include/vgpu/:
 *  - RM calls (alloc, free, control, map) as messages through the VF mailbox, matched by a
 *    sequence number, waited for by spinning and then sleeping on the mailbox interrupt;
 *  - GPU address spaces whose page tables the driver writes itself in its own VRAM;
 *  - channels whose GPFIFO ring, pushbuffers and USERD live in the VF's DMA memory, submitted
 *    to with usermode doorbells: no system call on the hot path;
 *  - fences on semaphore releases, channel errors and MMU faults reported on the channel that
 *    caused them, re-attachment after a VF reset or a vgpud restart, and moving a local
 *    attachment to another vgpud's endpoint with its slice (vgpu_vf_reattach).
 *
 * Every call returns 0 or a negative errno (or one of the project codes, -VGPU_E*, in
 * common/err.h); vgpu_vf_strerror() names both. Errors the host returns are passed up as they
 * are. Objects belong to the struct vgpu_vf they were made from and die with it.
 *
 * Threads: a struct vgpu_vf may be used from many threads. Mailbox calls are serialised inside;
 * a channel is meant to be driven by one thread at a time (vgpu_submit on the same channel from
 * two threads at once is the caller's race), different channels in parallel. */
#ifndef VGPU_VF_H
#define VGPU_VF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vgpu_vf;
struct vgpu_mem;
struct vgpu_vaspace;
struct vgpu_channel;
struct vgpu_vf_transport;
struct vgpu_sva_reply;		/* vgpu/sva.h */

/* ==== attach ================================================================================ */

struct vgpu_vf_opts {
	const char *socket;		/* local transport: the VF's endpoint socket path */
	struct vgpu_vf_transport *transport;	/* or a ready transport (owned by the VF after
						 * a successful open); socket is then ignored */
	uint64_t spin_ns;		/* waits spin this long before sleeping; 0 = 20 us */
	uint64_t rm_timeout_ns;		/* bound on one mailbox call; 0 = 5 s */
	bool quiet;			/* no messages on stderr */
};

/* What the slice offers, from the BAR2 header and the GET_INFO handshake. */
struct vgpu_vf_info {
	uint32_t vf_id;
	uint32_t abi_version;		/* the host's, packed as VGPU_ABI_VERSION */
	uint64_t vram_size;		/* the slice: VF-physical VRAM is [0, vram_size) */
	uint64_t dma_size;		/* DMA memory */
	uint64_t bar_size;
	uint32_t channels, doorbells;	/* as provisioned */
	uint32_t reset_count;
	uint32_t nr_runlists;
	bool usermode_submit;		/* the BAR2 has a doorbell page (see doc/vf_guest.md) */
};

/* Attach to a VF: connect the transport, map BAR2, check magic and ABI major (a mismatch is
 * refused with -VGPU_EABI and a message naming both versions), attach the mailbox rings and
 * handshake (GET_INFO). 0 with *@out, or -errno; nothing is left behind on failure. */
int vgpu_vf_open(const struct vgpu_vf_opts *opts, struct vgpu_vf **out);
/* Free every object, detach and close the transport. NULL is a no-op. */
void vgpu_vf_close(struct vgpu_vf *vf);
/* Copy the slice description. */
void vgpu_vf_get_info(const struct vgpu_vf *vf, struct vgpu_vf_info *out);
/* The last error message the library produced on this VF (never NULL). */
const char *vgpu_vf_last_error(const struct vgpu_vf *vf);
/* Text for an error code this library returns (errno or -VGPU_E*). Never NULL. */
const char *vgpu_vf_strerror(int err);

/* Mailbox PING: the host echoes @len bytes of @buf (<= VF_MSG_MAX_PAYLOAD). 0 if the echo
 * matched, -EBADMSG if it did not, or the transport/host error. */
int vgpu_vf_ping(struct vgpu_vf *vf, const void *buf, size_t len);
/* One raw mailbox call of @type with @req (@req_len bytes); the reply payload goes to @rsp
 * (room for *@rsp_len bytes; on return the payload length). Returns the host's status (0 or
 * -errno as the host sent it), -ETIMEDOUT past opts.rm_timeout_ns, -ENOLINK while the VF is
 * resetting. Serialised with every other mailbox call of @vf. */
int vgpu_vf_mbox_call(struct vgpu_vf *vf, uint32_t type, const void *req, size_t req_len,
		      void *rsp, size_t *rsp_len);

/* ==== memory ================================================================================ */

enum vgpu_mem_kind {
	VGPU_MEM_VRAM = 0,	/* the slice's VRAM, allocated by the host RM (counts to the quota) */
	VGPU_MEM_SYSMEM = 1,	/* the VF's DMA memory, managed by the driver itself */
	VGPU_MEM_SVA = 2,	/* a virtual address of this process (ABI 2.1, vgpu_sva_bind()):
				 * mappings only (vgpu_va_map_sva), never vgpu_mem_alloc */
};

/* Allocate @size bytes (rounded up to @page_size: 4 KiB, 64 KiB or 2 MiB; 0 = 4 KiB) of @kind,
 * physically contiguous and aligned to @page_size. VRAM past the quota: the host's
 * -VGPU_EQUOTA; DMA memory exhausted: -ENOMEM. */
int vgpu_mem_alloc(struct vgpu_vf *vf, enum vgpu_mem_kind kind, uint64_t size,
		   uint64_t page_size, struct vgpu_mem **out);
/* Free @mem (it must not be mapped: -EBUSY). NULL is a no-op (0). When the host's RM does
 * not confirm the free (-ETIMEDOUT, -EIO, ...: it may still hold the VRAM) @mem stays, with
 * its handle, and the error comes back: call again. A host that no longer has the object or
 * a device that is gone (reset, unplug) lets @mem go (0). */
int vgpu_mem_free(struct vgpu_mem *mem);
/* CPU pointer to the memory (through the VRAM aperture or into DMA memory). */
void *vgpu_mem_cpu(const struct vgpu_mem *mem);
/* The address the GPU uses as a PTE target: VF-physical VRAM address or IOVA. */
uint64_t vgpu_mem_addr(const struct vgpu_mem *mem);
/* Size in bytes (rounded up to the page size it was allocated with). */
uint64_t vgpu_mem_size(const struct vgpu_mem *mem);
/* What @mem is: VGPU_MEM_VRAM or VGPU_MEM_SYSMEM. */
enum vgpu_mem_kind vgpu_mem_kind(const struct vgpu_mem *mem);

/* ==== GPU address spaces ===================================================================== */

#define VGPU_MAP_RO		(1u << 0)	/* GPU writes fault */
#define VGPU_MAP_VOLATILE	(1u << 1)	/* never cached in an engine TLB */

/* A new, empty GPU VA space: its level-0 table is allocated in VRAM through the RM and the
 * host is told its page directory base. */
int vgpu_vaspace_create(struct vgpu_vf *vf, struct vgpu_vaspace **out);
/* Unmap everything, free the page tables. NULL is a no-op (0). When the host's RM does not
 * confirm the free (-ETIMEDOUT, -EIO, ...: the host may still walk the page tables) @as
 * stays, mappings, page tables and handle included, and the error comes back: call again.
 * A host that no longer has the object or a device that is gone lets it go (0).
 * vgpu_vf_close() frees what is left either way. */
int vgpu_vaspace_destroy(struct vgpu_vaspace *as);
/* Map [va, va+size) to @mem at byte offset @off with pages of @page_size (4 KiB, 64 KiB or
 * 2 MiB; va, off and size aligned to it). Page tables are allocated as needed. -EEXIST if any
 * page is already mapped (nothing changes), -EINVAL for bad alignment or range. */
int vgpu_va_map(struct vgpu_vaspace *as, uint64_t va, struct vgpu_mem *mem, uint64_t off,
		uint64_t size, uint64_t page_size, unsigned int flags);
/* Map raw addresses (aperture VGPU_MEM_VRAM: VF-physical, VGPU_MEM_SYSMEM: IOVA,
 * VGPU_MEM_SVA: process virtual address) with no memory object: for tests that want the
 * device to refuse a mapping the driver allows. */
int vgpu_va_map_raw(struct vgpu_vaspace *as, uint64_t va, enum vgpu_mem_kind aper,
		    uint64_t addr, uint64_t size, uint64_t page_size, unsigned int flags);
/* Unmap [va, va+size) (exactly what was mapped, page by page; -ENOENT if a page is not
 * mapped, nothing changes). The TLB is not touched: see vgpu_pb_invalidate(). */
int vgpu_va_unmap(struct vgpu_vaspace *as, uint64_t va, uint64_t size);
/* Walk the tables as the device would. 0 with *aper, *addr, *page_size, or -ENOENT. */
int vgpu_va_lookup(struct vgpu_vaspace *as, uint64_t va, enum vgpu_mem_kind *aper,
		   uint64_t *addr, uint64_t *page_size);
/* VF-physical address of the level-0 table (the page directory base). */
uint64_t vgpu_vaspace_pdb(const struct vgpu_vaspace *as);
/* Page-table bytes in use (VRAM). */
uint64_t vgpu_vaspace_table_bytes(const struct vgpu_vaspace *as);

/* ==== shared virtual addressing (local guests, ABI 2.1, vgpu/sva.h) ======================== */

/* Bind this process's address space to the VF: a second connection to the endpoint socket
 * proves to vgpud that the caller is the attached process, which then attaches an SVA IOMMU
 * domain for it at the function's SVA PASID. Afterwards GPU work reaches ordinary
 * malloc/mmap memory mapped with vgpu_va_map_sva(); what the process has not mapped, or a
 * write to a read-only page, is an MMU fault (VGPU_FAULT_IOMMU). 0, -EOPNOTSUPP (not the
 * local transport: a VM guest reaches only its DMA memory), -EBUSY (already bound), -EPERM
 * (vgpud refused the connection), or the host's status; vgpu_vf_last_error() says why.
 * A VF reset or a vgpud restart unbinds: bind again after vgpu_vf_recover(). */
int vgpu_sva_bind(struct vgpu_vf *vf);
/* Drop the binding (the SVA connection stays open for a later bind). 0 or -ENOENT. */
int vgpu_sva_unbind(struct vgpu_vf *vf);
/* Map CPU range [cpu, cpu+size) of this process at GPU VA @va (pass (uintptr_t)cpu to have
 * GPU VA == CPU VA) with pages of @page_size (4 KiB, 64 KiB, 2 MiB; cpu, va and size aligned
 * to it), VGPU_MAP_RO / VGPU_MAP_VOLATILE flags. Nothing is pinned or checked against the
 * process's mappings: the device resolves each access when it happens, so later munmap,
 * mprotect or fork (COW) apply to the GPU as to the CPU. Unmap with vgpu_va_unmap(). */
int vgpu_va_map_sva(struct vgpu_vaspace *as, uint64_t va, const void *cpu, uint64_t size,
		    uint64_t page_size, unsigned int flags);
struct hmm_mm;			/* hmm/hmm.h */
/* Serve the device's page requests for the binding from @mm (ABI 2.4): vgpud forwards a
 * GPU access to a page @mm keeps off the CPU - a managed page in device memory under the
 * SIGBUS or mprotect backend, which the kernel's copy cannot fault in - and a thread of
 * this library faults it in (migrating it back), so the access completes instead of
 * faulting. Call after vgpu_sva_bind(); it ends with the binding. 0, -EINVAL, -ENOENT (not
 * bound), -EBUSY (already on), the host's status (a vgpud before 2.4 refuses the op), or
 * -errno; vgpu_vf_last_error() says why. */
int vgpu_sva_pri_enable(struct vgpu_vf *vf, struct hmm_mm *mm);
/* Page requests answered "present" (*@served) and refused (*@refused) since enabled. */
void vgpu_sva_pri_stats(struct vgpu_vf *vf, uint64_t *served, uint64_t *refused);
/* Send @len raw bytes as one SVA request and read the reply into *@reply (tests of the
 * host's checks). Opens the SVA connection if needed. 0 if a reply came (its status in
 * reply->status), else -errno. */
int vgpu_sva_call_raw(struct vgpu_vf *vf, const void *req, size_t len,
		      struct vgpu_sva_reply *reply);

/* ==== pushbuffers =========================================================================== */

/* A method stream being built in caller memory; a method that does not fit sets err to
 * -ENOSPC and is dropped (the stream so far stays valid). */
struct vgpu_pb {
	uint32_t *dw;
	uint32_t len, cap;	/* dwords */
	int err;
};

/* Start building into @buf (@cap dwords). */
void vgpu_pb_init(struct vgpu_pb *pb, uint32_t *buf, uint32_t cap);
/* Any method: header and @nargs arguments. */
void vgpu_pb_method(struct vgpu_pb *pb, uint32_t id, const uint32_t *args, uint32_t nargs);
/* NOP: a method that does nothing (padding, the smallest submission). */
void vgpu_pb_nop(struct vgpu_pb *pb);
/* SEM_RELEASE: store @payload at @va (64-bit if @flags has VGPU_SEM_64), VGPU_SEM_INTR wakes. */
void vgpu_pb_sem_release(struct vgpu_pb *pb, uint64_t va, uint64_t payload, uint32_t flags);
/* SEM_ACQUIRE: wait until *va >= payload (or == with VGPU_SEM_EQ); 0 us timeout = 1 s. */
void vgpu_pb_sem_acquire(struct vgpu_pb *pb, uint64_t va, uint64_t payload, uint32_t flags,
			 uint32_t timeout_us);
/* COPY @len bytes from VA @src to VA @dst (any alignment; no overlap). */
void vgpu_pb_copy(struct vgpu_pb *pb, uint64_t src, uint64_t dst, uint64_t len);
/* FILL [dst, dst+len) with the 32-bit @value (dst and len 4-aligned). */
void vgpu_pb_fill(struct vgpu_pb *pb, uint64_t dst, uint64_t len, uint32_t value);
/* MMU_INVALIDATE [va, va+size); size 0 drops every entry of the function. */
void vgpu_pb_invalidate(struct vgpu_pb *pb, uint64_t va, uint64_t size);
/* TIMESTAMP: store the 64-bit device time in ns at @va (8-aligned). */
void vgpu_pb_timestamp(struct vgpu_pb *pb, uint64_t va);
/* REDUCE_ADD_U32: the 64-bit sum of @count u32 at @src (4-aligned) stored at @dst (8-aligned). */
void vgpu_pb_reduce_add_u32(struct vgpu_pb *pb, uint64_t src, uint32_t count, uint64_t dst);
/* AXPY_F32: y[i] = a * x[i] + y[i] over @count floats at VAs @x and @y, in index order. */
void vgpu_pb_axpy_f32(struct vgpu_pb *pb, uint64_t x, uint64_t y, uint32_t count, float a);

/* ==== channels and submission ================================================================ */

struct vgpu_channel_opts {
	uint32_t gpfifo_entries;	/* power of two, 2..65536; 0 = 256 */
	uint32_t pushbuf_bytes;		/* pushbuffer ring in DMA memory, 4 KiB multiple; 0 = 16 KiB */
	uint32_t runlist;		/* engine; < info.nr_runlists */
	bool replayable;		/* MMU faults stall for replay instead of erroring */
	bool rpc_submit;		/* ring through a mailbox RPC per submission instead of the
					 * doorbell (the kernel-mediated baseline of submit_bench) */
	bool no_intr;			/* fence releases raise no interrupt (waits only spin/poll) */
};

/* A fence: the channel's semaphore reaching @value. */
struct vgpu_fence {
	struct vgpu_channel *ch;
	uint64_t value;
};

/* Create a channel in @as: GPFIFO ring, pushbuffer ring, USERD and a 64-bit semaphore in DMA
 * memory (mapped into @as), the channel object through the RM, and its work-submit token. */
int vgpu_channel_create(struct vgpu_vf *vf, struct vgpu_vaspace *as,
			const struct vgpu_channel_opts *opts, struct vgpu_channel **out);
/* Free the channel (after its work, if it still makes progress). NULL is a no-op (0). When
 * the host's RM does not confirm the free (-ETIMEDOUT, -EIO, ...: an engine may still use
 * the channel) the channel stays, GPFIFO and USERD memory included, and the error comes
 * back: call again. A host that no longer has the channel or a device that is gone lets it
 * go (0). vgpu_vf_close() frees what is left either way. */
int vgpu_channel_destroy(struct vgpu_channel *ch);
/* Submit @ndw dwords of methods: copied into the pushbuffer ring, followed by a release of the
 * channel's semaphore; one GP entry, GP_PUT with release, the token to the doorbell, a kick
 * only if the engines sleep. *@fence (may be NULL) completes when the work has executed.
 * -VGPU_ECHANERR if the channel is in error, -EAGAIN if the rings are full (wait a fence). */
int vgpu_submit(struct vgpu_channel *ch, const uint32_t *methods, uint32_t ndw,
		struct vgpu_fence *fence);
/* Submit one raw GP entry (tests: a GP entry the device must refuse). */
int vgpu_submit_gp_raw(struct vgpu_channel *ch, uint64_t gp_entry);
/* Wait for @f: spin opts.spin_ns, then sleep on the GPU interrupt; bounded by @timeout_ns
 * (0 = 10 s). 0, -ETIMEDOUT, or -VGPU_ECHANERR if the channel errored first. */
int vgpu_fence_wait(const struct vgpu_fence *f, uint64_t timeout_ns);
/* Whether @f has completed (no wait). */
bool vgpu_fence_done(const struct vgpu_fence *f);

/* The channel's error state: 0, or -VGPU_ECHANERR with *@code (enum vgpu_chan_error) and, for
 * MMU faults the host reported, *@fault_va (both may be NULL). */
int vgpu_channel_error(struct vgpu_channel *ch, uint32_t *code, uint64_t *fault_va);
/* The channel id the host gave @ch. */
uint32_t vgpu_channel_id(const struct vgpu_channel *ch);
/* @ch's work-submit token (what the driver writes to the doorbell page). */
uint32_t vgpu_channel_token(const struct vgpu_channel *ch);
/* GPU VA and CPU pointer of the channel's 64-bit semaphore (fences across channels). */
uint64_t vgpu_channel_sem_va(const struct vgpu_channel *ch);

/* ==== reset and recovery ===================================================================== */

/* What a reset or a daemon restart took away. */
struct vgpu_vf_lost {
	uint32_t resets;		/* resets seen since the last call */
	uint32_t vram_objects;		/* VRAM allocations (their contents are scrubbed) */
	uint32_t vaspaces;		/* address spaces (page tables lived in VRAM) */
	uint32_t channels;
};

/* Check for a VF reset or a lost endpoint and recover: re-attach the transport if it died,
 * re-attach the rings, re-handshake, and mark every host object as lost (their handles are
 * gone; using them gives -ENOLINK). 0 if nothing happened or recovery worked (*@lost says
 * what was lost), or -errno if the VF is not usable yet. */
int vgpu_vf_recover(struct vgpu_vf *vf, struct vgpu_vf_lost *lost);
/* True once the host reported a reset the driver has not recovered from yet. */
bool vgpu_vf_reset_pending(struct vgpu_vf *vf);

/* ==== moving with the slice (local guests) ==================================================== */

/* Move the attachment to @socket, the endpoint of this same slice on another vgpud, after a
 * live migration took the slice there with the guest's state (migrate-status: completed),
 * keeping every object: memory, VA spaces, channels (GPFIFO and USERD positions as they
 * moved), fences and RM handles stay valid and work on the new vgpud. The new endpoint's
 * BAR2 replaces the old one at the same address (one mremap over the old mapping), so every
 * pointer into it - vgpu_mem_cpu(), the DMA memory - stays valid and reaches the new
 * vgpud's copy; the mailbox rings, doorbell page, interrupt page and vectors are taken from
 * the new endpoint, the old connection is closed, and this driver's ABI is announced there
 * (so the slice can move on again). From the source's stop until this returns the
 * application must not touch the BAR (the source scrubs its VRAM: reads give zeros) and no
 * other call on @vf may run. An SVA binding stays behind: bind again. Managed memory
 * (vgpu_vf_managed.h) does not move: it must be off (-EBUSY). A move is seen as the
 * endpoint going away (vgpu_vf_reset_pending() true); call this, not vgpu_vf_recover(),
 * which would drop every object. Local transport only: a VM's VMM carries its BAR itself.
 * 0, or -errno with the VF attached as before (its old endpoint, if that still lives):
 * -ENODEV (@socket serves another slice, or the slice as another VF), -EPROTO (laid out
 * differently), -EAGAIN (not ready), -EBUSY (already attached there, or managed memory
 * on), -EOPNOTSUPP (not the local transport), the connect's error (-ENOENT: no such
 * endpoint), or the host's status to the handshake once attached; vgpu_vf_last_error()
 * names what is wrong. */
int vgpu_vf_reattach(struct vgpu_vf *vf, const char *socket);

/* ==== transports ============================================================================ */

/* How the driver reaches a VF. One driver sits above this interface; a local process uses the
 * endpoint socket (vgpu_vf_transport_local), the in-VM transport (vfio on the ivshmem PCI
 * device: BAR2 region, BAR0+0x0C doorbell register, MSI-X eventfds) implements the same five
 * operations. Vectors are the enum vf_vector numbers of vgpu/vf_bar.h. */
struct vgpu_vf_transport_ops {
	const char *name;
	/* Connect and map BAR2: *@bar, *@size. Called again after detach to re-attach. */
	int (*attach)(struct vgpu_vf_transport *t, void **bar, uint64_t *size);
	/* Unmap BAR2 and drop the connection (the object stays reusable by attach). */
	void (*detach)(struct vgpu_vf_transport *t);
	/* Ring the host on vector @v. 0, -ENOLINK if the host is gone, -EINVAL if no such vector. */
	int (*notify)(struct vgpu_vf_transport *t, unsigned int v);
	/* Sleep until the host signals vector @v (consuming it) or @timeout_ns passes. 0,
	 * -ETIMEDOUT, -ENOLINK if the host is gone, -EINVAL if no such vector. */
	int (*wait)(struct vgpu_vf_transport *t, unsigned int v, uint64_t timeout_ns);
	/* Number of vectors each way (what the host handed over). */
	unsigned int (*nr_vectors)(struct vgpu_vf_transport *t);
	/* False once the host end has gone away (endpoint closed, device unplugged). */
	bool (*alive)(struct vgpu_vf_transport *t);
	/* Detach if attached and free. */
	void (*destroy)(struct vgpu_vf_transport *t);
};

struct vgpu_vf_transport {
	const struct vgpu_vf_transport_ops *ops;
};

/* A local transport: connects to the endpoint socket @path as an ivshmem peer (protocol in
 * vgpu/vf_bar.h) and maps the BAR2 it is handed. Nothing is connected until attach. */
int vgpu_vf_transport_local(const char *path, struct vgpu_vf_transport **out);
/* Inside a VM, through vfio-pci: the ivshmem PCI device (1af4:1110 with the VF magic in its
 * BAR2 header) at @bdf ("0000:00:03.0"), or the first such device if @bdf is NULL. attach
 * binds it to vfio-pci, maps BAR2, sets bus-master and takes the MSI-X vectors as eventfds;
 * notify writes BAR0's doorbell register. Needs a vIOMMU (q35 + intel-iommu, guest
 * intel_iommu=on) and root. -ENODEV if no such device. */
int vgpu_vf_transport_vfio(const char *bdf, struct vgpu_vf_transport **out);
/* Inside a VM without a vIOMMU: the same device through sysfs (resource2 mapped, doorbell
 * through resource0), no interrupts: waits poll. Needs root. -ENODEV if no such device. */
int vgpu_vf_transport_sysfs(const char *bdf, struct vgpu_vf_transport **out);

#endif
