/* SPDX-License-Identifier: MIT */
/* iommu_model/iommu.h - the emulated IOMMU: every access the emulated GPU makes to system
 * memory on behalf of a function (requester id 0 = PF, 1..63 = VFs) is translated and
 * checked here, as an IOMMU does for a real SR-IOV device.
 *
 * Objects:
 *   struct iommu          the unit: functions, memory objects, the IOTLB, fault logs.
 *   struct iommu_memobj   a registered host memory region (a memfd or a host buffer); IO page
 *                         tables map IOVA -> memobj + offset.
 *   struct iommu_domain   an IO address space: PAGING (host-owned table and IOVA allocator),
 *                         NESTED (function-owned stage-1 table over a PAGING stage-2 parent)
 *                         or SVA (a local process's address space, bound through a PASID).
 *
 * Page-table format, errno contract, IOTLB/ATS/PRI behaviour: doc/iommu_model.md.
 *
 * Locking: host-side calls (domains, map/unmap, attach, memobjs, dirty) take the unit's or
 * the domain's mutex themselves. Translation and DMA take no lock: any number of device
 * threads may translate while the host maps and unmaps. A host pointer returned by
 * iommu_translate() stays valid until the mapping is unmapped; a device thread that uses
 * one while the host may unmap it brackets translate + access in iommu_access_begin()/
 * iommu_access_end(), which strict unmap waits for (the DMA helpers do this themselves).
 */
#ifndef VGPU_IOMMU_MODEL_IOMMU_H
#define VGPU_IOMMU_MODEL_IOMMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct iommu;
struct iommu_domain;
struct iommu_memobj;

/* Requester ids: 0 is the PF, 1..63 the VFs. */
#define IOMMU_MAX_FUNCS		64
/* PASID 0 means "no PASID": the function's requester-id domain. PASIDs are 20 bits. */
#define IOMMU_NO_PASID		0u
#define IOMMU_PASID_MAX		((1u << 20) - 1)
/* PASIDs that one function may have attached at a time. */
#define IOMMU_MAX_PASIDS_PER_FUNC 16

#define IOMMU_PAGE_SIZE		4096ull
#define IOMMU_PAGE_2M		(2ull << 20)
#define IOMMU_PAGE_1G		(1ull << 30)
/* Default and largest IOVA width (4 levels x 9 bits + 12). */
#define IOMMU_IOVA_BITS		48

/* Access / permission bits (map prot, translate access, granted perm). */
#define IOMMU_READ		(1u << 0)
#define IOMMU_WRITE		(1u << 1)
/* translate access flag: bypass the IOTLB and walk the tables (benchmarks, tests). */
#define IOMMU_NOCACHE		(1u << 8)
/* iommu_fn_translate access flag: an unmapped IOVA faults at once, with no page request even
 * when PRI is on; for a caller that must not wait on the function (it holds a lock others
 * need), since the function answers its page requests when it likes. */
#define IOMMU_NOPRI		(1u << 9)

/* ---- the unit -------------------------------------------------------------------- */

struct iommu_config {
	unsigned int iotlb_sets;	/* power of two; 0 = default 256 */
	unsigned int iotlb_ways;	/* 1..8; 0 = default 4 */
	unsigned int atc_entries;	/* per-function ATC, power of two; 0 = default 64 */
	uint64_t ats_timeout_ns;	/* wait for an ATC invalidation completion; 0 = 1 s */
	uint64_t pri_timeout_ns;	/* wait for a page response in the DMA helpers; 0 = 1 s */
};

/* Create a unit (@cfg may be NULL for defaults). 0, -EINVAL or -ENOMEM. */
int iommu_create(const struct iommu_config *cfg, struct iommu **out);
/* Destroy the unit and everything still in it (domains, memobjs). Nothing may be using it. */
void iommu_destroy(struct iommu *mmu);

/* ---- memory objects ------------------------------------------------------------- */

/* Register @size bytes at host address @base (page aligned, caller keeps it mapped until
 * unregister). 0, -EINVAL (misaligned, zero, > 1 TiB), -ENOSPC (too many objects), -ENOMEM. */
int iommu_memobj_register(struct iommu *mmu, void *base, size_t size, struct iommu_memobj **out);
/* Register @size bytes of @fd (a memfd) from @offset; the unit maps it MAP_SHARED itself
 * and unmaps it at unregister; @fd may be closed afterwards. Errors as above, -EBADF. */
int iommu_memobj_register_fd(struct iommu *mmu, int fd, uint64_t offset, size_t size,
			     struct iommu_memobj **out);
/* Unregister. -EBUSY while any domain maps it (including unmaps still in a lazy flush queue);
 * -ENOENT if its id no longer names it (a DESTROY command took it first). */
int iommu_memobj_unregister(struct iommu_memobj *mo);
/* Host address of @mo (where DMA through it lands). */
void *iommu_memobj_base(const struct iommu_memobj *mo);
/* Size of @mo in bytes. */
size_t iommu_memobj_size(const struct iommu_memobj *mo);
/* Stable id (1..4095) used in the command ABI and translated addresses. */
uint32_t iommu_memobj_id(const struct iommu_memobj *mo);
/* Number of mappings (areas) that currently reference @mo. */
unsigned int iommu_memobj_map_count(const struct iommu_memobj *mo);

/* ---- domains -------------------------------------------------------------------- */

enum iommu_domain_type {
	IOMMU_DOMAIN_PAGING = 1,	/* host-owned table, IOVA -> memobj */
	IOMMU_DOMAIN_NESTED,		/* function-owned stage-1 over a NEST_PARENT stage-2 */
	IOMMU_DOMAIN_SVA,		/* a process's own virtual addresses, via a PASID */
};

/* iommu_domain_opts.flags */
#define IOMMU_DOMAIN_NEST_PARENT	(1u << 0)	/* PAGING: may be a stage-2 */
#define IOMMU_DOMAIN_LAZY		(1u << 1)	/* PAGING: lazy (flush-queue) unmap */
#define IOMMU_DOMAIN_NO_DIRTY		(1u << 2)	/* PAGING: no dirty tracking */
#define IOMMU_DOMAIN_SVA_PIDFD		(1u << 3)	/* SVA: @pidfd names the process */

struct iommu_domain_opts {
	enum iommu_domain_type type;
	unsigned int flags;
	unsigned int iova_bits;		/* PAGING: aperture width 32..48; 0 = 48 */
	struct iommu_domain *parent;	/* NESTED: the stage-2 (a NEST_PARENT paging domain) */
	uint64_t s1_root;		/* NESTED: stage-2 IOVA of the stage-1 root table */
	pid_t pid;			/* SVA: process to bind; 0 = this process (or @pidfd's) */
	int pidfd;			/* SVA with IOMMU_DOMAIN_SVA_PIDFD: a pidfd of @pid */
};

/* Allocate a domain. 0, -EINVAL (bad opts, parent not NEST_PARENT, nested on nested),
 * -ENOMEM, -ESRCH (SVA: the process is gone, or @pidfd is not @pid's).
 * An SVA domain follows a PROCESS, never a pid number: it keeps its own pidfd (a dup of
 * opts->pidfd, or one opened on opts->pid at allocation), checks it before and after every
 * copy, and once the process has exited every access faults (IOMMU_FAULT_SVA_GONE), even
 * if another process gets the same pid. */
int iommu_domain_alloc(struct iommu *mmu, const struct iommu_domain_opts *opts,
		       struct iommu_domain **out);
/* Free a domain and its mappings. -EBUSY while attached to a function or PASID, or while
 * nested domains use it as their parent. */
int iommu_domain_free(struct iommu_domain *d);
/* Stable non-zero id (IOTLB tag, command ABI). */
uint32_t iommu_domain_id(const struct iommu_domain *d);
/* PAGING, NESTED or SVA. */
enum iommu_domain_type iommu_domain_type(const struct iommu_domain *d);
/* Domain by id, or NULL. */
struct iommu_domain *iommu_domain_lookup(struct iommu *mmu, uint32_t id);

/* ---- attachment ------------------------------------------------------------------ */

/* Attach function @rid to @d (PAGING or NESTED). -EINVAL (bad rid, SVA domain), -EBUSY if
 * already attached (use iommu_replace). */
int iommu_attach(struct iommu *mmu, unsigned int rid, struct iommu_domain *d);
/* Atomically move @rid to @d; in-flight accesses through the old domain finish first.
 * On error the old attachment stays. -EINVAL if @rid is not attached. */
int iommu_replace(struct iommu *mmu, unsigned int rid, struct iommu_domain *d);
/* Detach @rid; afterwards every access by it faults. 0 also if it was not attached. */
int iommu_detach(struct iommu *mmu, unsigned int rid);
/* Domain @rid is attached to (no PASID), or NULL. Valid until the host detaches it. */
struct iommu_domain *iommu_function_domain(struct iommu *mmu, unsigned int rid);

/* Attach @d to (@rid, @pasid) (pasid 1..IOMMU_PASID_MAX). -EINVAL bad ids or @rid has no
 * RID domain, -EBUSY already attached, -ENOSPC too many PASIDs, -ENOMEM. */
int iommu_pasid_attach(struct iommu *mmu, unsigned int rid, uint32_t pasid,
		       struct iommu_domain *d);
/* Replace the domain of an attached PASID; on failure the old domain stays. -EINVAL if the
 * PASID is not attached. */
int iommu_pasid_replace(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			struct iommu_domain *d);
/* Detach a PASID; harmless (0) if it was not attached. */
int iommu_pasid_detach(struct iommu *mmu, unsigned int rid, uint32_t pasid);
/* Domain of (@rid, @pasid) (IOMMU_NO_PASID = RID domain), or NULL. */
struct iommu_domain *iommu_pasid_domain(struct iommu *mmu, unsigned int rid, uint32_t pasid);

/* ---- IOVA space, map, unmap (PAGING domains; the iommufd IOAS contract) ------------ */

struct iommu_iova_range {
	uint64_t start;
	uint64_t last;		/* inclusive */
};

/* Replace the allowed ranges for automatic IOVA allocation (n = 0: whole aperture).
 * -EADDRINUSE if one intersects a reserved range, -EINVAL for malformed ranges. */
int iommu_allow_iovas(struct iommu_domain *d, const struct iommu_iova_range *r, size_t n);
/* Reserve [start, last]: no mapping may use it. -EADDRINUSE if it intersects an allowed
 * range or an existing mapping. */
int iommu_reserve_iova(struct iommu_domain *d, uint64_t start, uint64_t last);
/* Usable ranges (allowed or aperture, minus reserved). On entry *@num is the capacity of
 * @out; on return the number of ranges; -EMSGSIZE (with *@num set) if @out is too small. */
int iommu_iova_ranges(struct iommu_domain *d, struct iommu_iova_range *out, uint32_t *num);

/* iommu_map() flags */
#define IOMMU_MAP_FIXED_IOVA	(1u << 0)	/* map at *iova, do not allocate */

/* Map @length bytes of @mo from @offset with @prot (IOMMU_READ|IOMMU_WRITE) at *@iova
 * (FIXED_IOVA) or at an allocated IOVA naturally aligned to the lowest set bit of
 * @length, returned in *@iova. Uses 2 MiB / 1 GiB leaves where IOVA and offset allow.
 * Errors: -EINVAL (zero/unaligned length, offset or iova; prot 0; range outside @mo;
 * not a PAGING domain), -EEXIST (overlaps a mapping), -EADDRINUSE (overlaps reserved),
 * -ERANGE (outside the aperture), -ENOSPC (no free IOVA), -ENOMEM. All or nothing. */
int iommu_map(struct iommu_domain *d, struct iommu_memobj *mo, uint64_t offset,
	      uint64_t length, unsigned int prot, unsigned int flags, uint64_t *iova);
/* Unmap every mapping fully inside [iova, iova + length); *@unmapped (may be NULL) gets the
 * bytes removed. A mapping only partly covered is never split: -ENOENT and nothing changes.
 * Nothing mapped there: -ENOENT. iova 0, length UINT64_MAX unmaps all (0 even if empty).
 * Strict domains return after the IOTLB and every ATC have dropped the translations and
 * in-flight accesses have finished; lazy domains queue the flush and keep the IOVA busy. */
int iommu_unmap(struct iommu_domain *d, uint64_t iova, uint64_t length, uint64_t *unmapped);
/* Drain the lazy flush queue now (invalidate, wait, free the IOVAs). */
void iommu_domain_flush_queue(struct iommu_domain *d);

struct iommu_mapping {
	uint64_t iova;		/* start of the mapping that contains the address */
	uint64_t length;
	struct iommu_memobj *memobj;
	uint64_t offset;	/* of iova within memobj */
	unsigned int prot;
};
/* The mapping containing @iova. 0 or -ENOENT. */
int iommu_query(struct iommu_domain *d, uint64_t iova, struct iommu_mapping *out);
/* Every mapping of PAGING domain @d in ascending IOVA order (a migration's export): up to
 * *@n in @out, *@n set to how many there are. 0, -EMSGSIZE (@out too small; *@n says how
 * many), -EINVAL (not a PAGING domain). */
int iommu_mappings(struct iommu_domain *d, struct iommu_mapping *out, size_t *n);

/* ---- translation and DMA (device side; lock-free) ------------------------------- */

struct iommu_xlate {
	void *host;			/* host address of iova (NULL for SVA domains) */
	size_t len;			/* contiguous bytes from iova, <= the requested len */
	struct iommu_memobj *memobj;	/* NULL for SVA */
	uint64_t offset;		/* of iova within memobj (SVA: process address) */
	unsigned int perm;		/* granted IOMMU_READ|IOMMU_WRITE */
	uint64_t page_size;		/* leaf size backing iova */
};

/* Translate @iova for @access (IOMMU_READ|IOMMU_WRITE[|IOMMU_NOCACHE]) in @d. @len > 0 is
 * what the caller wants; out->len says how much of it is contiguous. 0, -EFAULT (not
 * mapped, beyond the aperture, broken stage-1), -EACCES (permission). No fault logging:
 * the function-level calls below log. Goes through the IOTLB (counters, dirty bits). */
int iommu_translate(struct iommu_domain *d, uint64_t iova, size_t len, unsigned int access,
		    struct iommu_xlate *out);
/* Translate as function @rid with @pasid: picks the attached domain, uses the function's
 * ATC when ATS is enabled, logs faults, and turns an unmapped fault into a page request
 * when PRI is enabled (waits for the response, retries once on Success) unless @access has
 * IOMMU_NOPRI. @access: IOMMU_READ|IOMMU_WRITE[|IOMMU_NOCACHE][|IOMMU_NOPRI]. */
int iommu_fn_translate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		       size_t len, unsigned int access, struct iommu_xlate *out);

/* DMA read/write by function @rid (no PASID): copy @len bytes, crossing pages as needed.
 * 0, or the fault of the first page that failed (-EFAULT / -EACCES, logged); bytes before
 * it were transferred. */
int iommu_dma_read(struct iommu *mmu, unsigned int rid, uint64_t iova, void *buf, size_t len);
/* The write direction of iommu_dma_read(): needs IOMMU_WRITE, marks pages dirty. */
int iommu_dma_write(struct iommu *mmu, unsigned int rid, uint64_t iova, const void *buf,
		    size_t len);
/* Same with a PASID (SVA or any PASID-attached domain). */
int iommu_dma_read_pasid(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			 void *buf, size_t len);
/* iommu_dma_write() with a PASID. */
int iommu_dma_write_pasid(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			  const void *buf, size_t len);

/* A DMA of @len bytes as iommu_dma_read_pasid() (iommu_dma_write_pasid() if @write) by a
 * device that looks at its preemption timer between pages: it stops after the first page
 * whose access waited for a page response, once that page is moved. 0 with *@done the
 * bytes moved (@len unless a page waited), or the fault of the first page that failed with
 * *@done the bytes before it. -EINVAL without @done. */
int iommu_dma_rw_some(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		      void *buf, size_t len, bool write, size_t *done);
/* How many times the calling thread has waited in the IOMMU on something its client
 * controls: a page response (a handler may answer as late as pri_timeout_ns), or an SVA
 * copy (the bound process's pages, which it may back by what it likes). A device model
 * takes a gap in its clock that includes one for its own time, not the host's. */
uint64_t iommu_thread_waits(void);

/* Bracket translate + use of the host pointer when the host may unmap concurrently;
 * strict unmap, replace and detach wait for brackets begun before them. Nestable,
 * per thread, cheap (one atomic). Do not block on other threads' progress inside one. */
void iommu_access_begin(void);
/* End the bracket begun by iommu_access_begin(). */
void iommu_access_end(void);

/* ---- IOTLB ------------------------------------------------------------------------ */

/* Invalidate @d's IOTLB entries (and every ATC that may cache them) for a range / the whole
 * domain; every domain on the unit. Returns when done. Range: -EINVAL if it wraps. */
int iommu_iotlb_flush_range(struct iommu_domain *d, uint64_t iova, uint64_t length);
/* Everything @d may have cached (domain-selective). */
void iommu_iotlb_flush_domain(struct iommu_domain *d);
/* Every domain of the unit (global), and every function's ATC. */
void iommu_iotlb_flush_all(struct iommu *mmu);

/* Batched invalidation of a NESTED domain's stage-1 translations, as a function's driver
 * issues after editing its table (iommufd HWPT_INVALIDATE pattern). */
#define IOMMU_INV_FLAG_ALL	(1u << 0)	/* ignore iova/length: whole domain */
#define IOMMU_INV_FLAG_LEAF	(1u << 1)	/* hint: only leaf entries changed */
struct iommu_inv_entry {
	uint32_t flags;
	uint32_t reserved;	/* must be 0 */
	uint64_t iova;
	uint64_t length;
};
/* Process *@num entries of @entry_len bytes each (>= sizeof(struct iommu_inv_entry), at
 * most 4096; a longer entry's tail must be zero) in order. On return *@num = entries
 * processed; on error the failing entry and those after it were not applied. -EINVAL (bad entry_len, *num > 2^19, bad range,
 * not NESTED), -EOPNOTSUPP (unknown flags or non-zero reserved). */
int iommu_invalidate_batch(struct iommu_domain *d, const void *entries, uint32_t entry_len,
			   uint32_t *num);

struct iommu_stats {
	uint64_t iotlb_hits;
	uint64_t iotlb_misses;		/* = page walks done for the IOTLB */
	uint64_t iotlb_inv;		/* invalidation operations */
	uint64_t atc_hits;
	uint64_t atc_misses;		/* = translation requests */
	uint64_t ats_inv_requests;
	uint64_t page_requests;
	uint64_t faults;
	uint64_t allocs_live;		/* allocations held by the unit (leak checks) */
	uint64_t pt_pages;		/* page-table pages held by all domains */
};
/* Counters summed over threads; exact when one thread translates at a time. */
void iommu_get_stats(struct iommu *mmu, struct iommu_stats *out);
/* Zero the event counters (not allocs_live / pt_pages). Call with no translation running. */
void iommu_reset_counters(struct iommu *mmu);

/* ---- fault log ------------------------------------------------------------------ */

enum iommu_fault_reason {
	IOMMU_FAULT_UNMAPPED = 1,	/* no translation */
	IOMMU_FAULT_PERM,		/* translation lacks the access */
	IOMMU_FAULT_NO_DOMAIN,		/* function (or PASID) not attached */
	IOMMU_FAULT_STAGE1,		/* nested: stage-1 table unreachable or malformed */
	IOMMU_FAULT_PRI_INVALID,	/* page request answered Invalid / Failure / timed out */
	IOMMU_FAULT_ATS_TIMEOUT,	/* ATC invalidation never completed (ITE) */
	IOMMU_FAULT_SVA_GONE,		/* SVA: the bound process has exited */
};

struct iommu_fault_rec {
	uint64_t iova;
	uint64_t time_ns;
	uint32_t pasid;
	uint16_t rid;
	uint8_t access;
	uint8_t reason;		/* enum iommu_fault_reason */
};

/* Pop up to @max records of @rid's log (oldest first) into @out; *@n = count. *@dropped
 * (may be NULL) = records lost to overflow since the last read. -EINVAL bad rid. */
int iommu_fault_log_read(struct iommu *mmu, unsigned int rid, struct iommu_fault_rec *out,
			 size_t max, size_t *n, uint64_t *dropped);

/* ---- ATS / ATC (device-side translation cache, per function) --------------------- */

#define IOMMU_ATS_POLLED	(1u << 0)	/* device processes invalidations in iommu_ats_poll() */
#define IOMMU_ATS_MAX_ITAGS	32		/* invalidation requests outstanding per function */

/* Enable the function's ATC. Without POLLED, invalidation requests are processed inline
 * (a device that answers at once). -EINVAL bad rid/flags. */
int iommu_ats_enable(struct iommu *mmu, unsigned int rid, unsigned int flags);
/* Disable and drop the ATC (pending invalidations complete) once DMA that used it is over.
 * An enable meanwhile starts from an empty cache: nothing cached before the disable is
 * used after it. */
int iommu_ats_disable(struct iommu *mmu, unsigned int rid);

struct iommu_ats_result {
	uint64_t iova;		/* page base of the translated range */
	uint64_t size;		/* S-bit range size (4K, 2M, 1G) */
	unsigned int perm;	/* granted R/W */
	bool untranslated_only;	/* U bit: SVA and other non-cacheable translations */
};
/* Translation Request from @rid: translate and fill the ATC. Faults as iommu_translate
 * (not logged: a refused ATS request is a normal answer). */
int iommu_ats_translate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			unsigned int access, struct iommu_ats_result *out);
/* Host: send one Invalidate Request to @rid's ATC without waiting (len 0: all addresses;
 * @global: all PASIDs). *@itag gets its ITag. -EBUSY while IOMMU_ATS_MAX_ITAGS are
 * outstanding, -ENODEV if ATS is off. */
int iommu_ats_invalidate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			 uint64_t len, bool global, unsigned int *itag);
/* Host: wait for the completion of @itag. 0, -ETIMEDOUT (logged as an ATS timeout fault;
 * the request stays outstanding), -EINVAL. */
int iommu_ats_wait(struct iommu *mmu, unsigned int rid, unsigned int itag, uint64_t timeout_ns);
/* POLLED devices: process pending invalidation requests, send completions. Count done. */
int iommu_ats_poll(struct iommu *mmu, unsigned int rid);
/* Invalidation requests issued to @rid and not yet completed. */
unsigned int iommu_ats_outstanding(struct iommu *mmu, unsigned int rid);

/* ---- PRI / IO page faults ---------------------------------------------------------- */

enum iommu_prg_code {
	IOMMU_PRG_SUCCESS = 0x0,
	IOMMU_PRG_INVALID = 0x1,
	IOMMU_PRG_FAILURE = 0xf,	/* device stops issuing requests until iommu_pri_reset */
};

struct iommu_page_request {
	uint64_t addr;		/* page-aligned untranslated address */
	uint32_t pasid;
	uint16_t rid;
	uint16_t prg_index;	/* 9 bits */
	unsigned int access;	/* IOMMU_READ|IOMMU_WRITE wanted */
	bool last;		/* L bit: last request of the group (always set here) */
};

/* Called in the faulting thread; must not block on that thread's progress. It answers
 * now or later (any thread) with iommu_page_response(); a later answer that comes after
 * the device gave up (pri_timeout_ns) only frees the group. */
typedef void (*iommu_pri_handler_fn)(void *ctx, const struct iommu_page_request *req);

/* Enable PRI for @rid with an outstanding-allocation limit (1..512). -EINVAL. */
int iommu_pri_enable(struct iommu *mmu, unsigned int rid, unsigned int max_outstanding,
		     iommu_pri_handler_fn fn, void *ctx);
/* Disable; outstanding requests are answered Invalid. Returns once no handler call is
 * running (so its context may go): never call it from the handler. */
int iommu_pri_disable(struct iommu *mmu, unsigned int rid);
/* Re-arm PRI after a Response Failure stopped it. */
int iommu_pri_reset(struct iommu *mmu, unsigned int rid);
/* Issue a page request (device side) without waiting: *@prg gets its index. -ENODEV PRI
 * off, -EPERM stopped by Response Failure, -EBUSY outstanding limit reached. */
int iommu_page_request(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t addr,
		       unsigned int access, uint16_t *prg);
/* Answer group @prg of @rid exactly once. -EINVAL if it is not outstanding (never issued,
 * or already answered) or @code is unknown. */
int iommu_page_response(struct iommu *mmu, unsigned int rid, uint16_t prg,
			enum iommu_prg_code code);
/* Wait (device side) for the answer to @prg; *@code gets it. -ETIMEDOUT, -EINVAL. */
int iommu_page_request_wait(struct iommu *mmu, unsigned int rid, uint16_t prg,
			    uint64_t timeout_ns, enum iommu_prg_code *code);

/* One function's page requests, for a check that a storm keeps to its limit. */
struct iommu_pri_stats {
	uint64_t requests;		/* issued */
	uint64_t waited;		/* issued after waiting for a free group (limit reached) */
	uint64_t timeouts;		/* the device gave up waiting for the answer */
	unsigned int outstanding;	/* groups issued and not yet freed */
	unsigned int outstanding_max;	/* the most at once since enable */
	unsigned int max;		/* the limit given to iommu_pri_enable */
};
/* @rid's PRI counters into *@st. -EINVAL. */
int iommu_pri_get_stats(struct iommu *mmu, unsigned int rid, struct iommu_pri_stats *st);

/* ---- dirty tracking (PAGING domains) ---------------------------------------------- */

/* Enable/disable: while on, a write through a translation sets the leaf's dirty bit.
 * -EOPNOTSUPP for NO_DIRTY or non-PAGING domains. */
int iommu_set_dirty_tracking(struct iommu_domain *d, bool enable);

#define IOMMU_DIRTY_NO_CLEAR	(1u << 0)
/* Read dirty state of [iova, iova + length) into @bitmap: bit i (byte i / 8, bit i % 8) for
 * the @page_size unit at iova + i * page_size; @bitmap may be at any byte address, @iova
 * and @length multiples of @page_size (a power of two >= 4 KiB). Clears the bits read
 * unless NO_CLEAR (a huge leaf only partly inside the range stays dirty). */
int iommu_read_dirty(struct iommu_domain *d, uint64_t iova, uint64_t length,
		     uint64_t page_size, uint8_t *bitmap, unsigned int flags);

/* ---- command interface ---------------------------------------------------------------- */

/* The same operations as extensible request structs, for callers that pass requests
 * through from elsewhere (the PF manager's control socket), with the iommufd contract:
 * every struct starts with its size; a size below the first version is -EINVAL; a larger
 * size is accepted if the bytes this unit does not know are zero, else -E2BIG; an
 * unknown op is -ENOTTY; a NULL request -EFAULT; object id 0 or unknown -ENOENT; an
 * object in use -EBUSY; reserved fields must be zero (-EINVAL). Outputs are written back
 * within the caller's size. */
enum iommu_cmd_op {
	IOMMU_CMD_DESTROY = 0x80,
	IOMMU_CMD_DOMAIN_ALLOC,
	IOMMU_CMD_ATTACH,
	IOMMU_CMD_DETACH,
	IOMMU_CMD_MAP,
	IOMMU_CMD_UNMAP,
	IOMMU_CMD_IOVA_RANGES,
};

enum iommu_cmd_obj { IOMMU_OBJ_DOMAIN = 1, IOMMU_OBJ_MEMOBJ = 2 };

struct iommu_cmd_destroy {
	uint32_t size;
	uint32_t obj;		/* enum iommu_cmd_obj */
	uint32_t id;
	uint32_t reserved;
};

struct iommu_cmd_domain_alloc {
	uint32_t size;
	uint32_t type;		/* enum iommu_domain_type */
	uint32_t flags;		/* IOMMU_DOMAIN_* */
	uint32_t parent_id;	/* NESTED */
	uint64_t s1_root;	/* NESTED */
	uint32_t iova_bits;	/* PAGING, 0 = 48 */
	uint32_t out_domain_id;
};

struct iommu_cmd_attach {	/* also IOMMU_CMD_DETACH (domain_id ignored) */
	uint32_t size;
	uint32_t rid;
	uint32_t pasid;		/* IOMMU_NO_PASID: the requester id itself */
	uint32_t domain_id;
};

struct iommu_cmd_map {
	uint32_t size;
	uint32_t flags;		/* IOMMU_MAP_FIXED_IOVA */
	uint32_t domain_id;
	uint32_t memobj_id;
	uint64_t offset;
	uint64_t length;
	uint64_t iova;		/* in with FIXED_IOVA, out always */
	uint32_t prot;
	uint32_t reserved;
};

struct iommu_cmd_unmap {
	uint32_t size;
	uint32_t domain_id;
	uint64_t iova;
	uint64_t length;	/* in: range; out: bytes unmapped */
};

struct iommu_cmd_iova_ranges {
	uint32_t size;
	uint32_t domain_id;
	uint32_t num_ranges;	/* in: capacity of ranges; out: count (-EMSGSIZE if short) */
	uint32_t reserved;
	uint64_t ranges;	/* struct iommu_iova_range *, as an integer */
};

/* Run one request; @arg points at the struct for @op. 0 or -errno as above. */
int iommu_cmd(struct iommu *mmu, unsigned int op, void *arg);

/* ---- fault injection ----------------------------------------------------------------- */

/* Make the @nth allocation from now fail with -ENOMEM (1 = the next one; 0 = off).
 * Every allocation path of the unit honours it. */
void iommu_fail_nth(struct iommu *mmu, unsigned int nth);

#endif
