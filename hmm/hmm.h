/* SPDX-License-Identifier: MIT */
/* hmm - HMM-style address-space mirroring and page migration, in user space.
 *
 * The Linux HMM model re-built over userfaultfd (or mprotect+SIGSEGV): a process ("mm")
 * registers managed regions of its own memory; devices mirror the address space through interval
 * notifiers and a range-fault call with sequence-number retry; pages migrate in three
 * phases (setup, copy, finalize) between system memory and device memory (an abstract
 * page pool), and a CPU access to a device-resident page pulls it back ("migrate back")
 * through one of the CPU-fault backends. UVM-style prefetch and thrashing policies sit
 * on top. The library knows nothing about VFs: a device is a struct hmm_mirror with
 * callbacks, device memory a struct hmm_devmem.
 *
 * What the kernel does for free and user space cannot see: munmap/mprotect/fork by the
 * application. The userfaultfd backends receive unmap/remap/fork events and turn them
 * into invalidations; mprotect and madvise must be reported with hmm_mm_notify(). Fork
 * migrates every device page back first (pthread_atfork), so the child gets a private
 * copy of everything, as with the kernel's COW of device-private entries.
 *
 * Locking: every call takes what it needs unless it says otherwise. Calls named in
 * "signal context" lists are async-signal-safe. Sizes are in bytes, addresses are
 * process virtual addresses, the page size is HMM_PAGE_SIZE (4 KiB). */
#ifndef VGPU_HMM_H
#define VGPU_HMM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/lock.h"

#define HMM_PAGE_SHIFT		12
#define HMM_PAGE_SIZE		(1ull << HMM_PAGE_SHIFT)
#define HMM_BLOCK_SHIFT		21			/* 2 MiB: migration batch, VA block */
#define HMM_BLOCK_SIZE		(1ull << HMM_BLOCK_SHIFT)
#define HMM_BLOCK_PAGES		(HMM_BLOCK_SIZE / HMM_PAGE_SIZE)
#define HMM_MIGRATE_MAX_PAGES	HMM_BLOCK_PAGES	/* one setup covers at most 2 MiB */
#define HMM_RANGE_DEFAULT_TIMEOUT_NS	(1000ull * 1000 * 1000)

struct hmm_mm;
struct hmm_devmem;
struct hmm_interval_notifier;

/* ------------------------------------------------------------------------------------
 * Process ("mm") and CPU-fault backends
 */
enum hmm_backend {
	/* userfaultfd, faults served by a handler thread: correct for every access,
	 * including the kernel's (write(2) from a device-resident page works). Default. */
	HMM_BACKEND_UFFD_THREAD = 0,
	/* userfaultfd with UFFD_FEATURE_SIGBUS: the faulting thread migrates the page back
	 * in its own SIGBUS handler (fast). A system call that touches a device-resident
	 * page fails with EFAULT: call hmm_mm_make_resident() before such calls. */
	HMM_BACKEND_UFFD_SIGBUS,
	/* No userfaultfd: a device-resident page keeps its system page, made PROT_NONE, and
	 * the faulting thread migrates it back in its own SIGSEGV handler (fast). Works on
	 * memory userfaultfd cannot register: MAP_SHARED memfd or device (BAR) mappings,
	 * given a second writable view (hmm_region_add_alias()). The library owns the
	 * protection of managed pages: the application must not mprotect them. munmap of a
	 * managed range must be reported first (hmm_mm_notify(HMM_EVENT_UNMAP)); mremap of
	 * one is not supported. System calls get EFAULT as with the SIGBUS backend. */
	HMM_BACKEND_MPROTECT,
};

struct hmm_mm_opts {
	enum hmm_backend backend;
	uint64_t granule;		/* CPU fault granule: 4 KiB (default), 64 KiB or 2 MiB */
	uint64_t (*clock_ns)(void);	/* time source for the policies; NULL = monotonic */
};

/* Create the mm of the calling process. -ENOSYS if userfaultfd is unavailable (the
 * userfaultfd backends), -EOPNOTSUPP if a feature the backend needs is missing (events;
 * UFFDIO_MOVE or write-protect; SIGBUS for its backend: see hmm_uffd_probe()), -EINVAL
 * for a bad option or a malformed VGPU_HMM_CAPS. At most HMM_MAX_MMS live at once. */
int hmm_mm_create(const struct hmm_mm_opts *opts, struct hmm_mm **out);
/* Migrate every device page back, send HMM_EVENT_RELEASE to every notifier, tear down.
 * Notifiers must be removed by their owners afterwards (or before). */
void hmm_mm_destroy(struct hmm_mm *mm);

/* Make [addr, addr+len) a managed region: migratable to device memory, CPU faults
 * served by the backend. Page aligned, private anonymous, writable and not overlapping
 * another region. 0, -EINVAL, -EEXIST (overlap), -ENOSPC (region table full). */
int hmm_region_add(struct hmm_mm *mm, void *addr, size_t len);
/* HMM_BACKEND_MPROTECT only: make the shared mapping [addr, addr+len) a managed region.
 * @alias is a second MAP_SHARED, writable view of the same memory (the same memfd or
 * BAR mapped again): data coming back from the device is written there before the page
 * becomes accessible again, so no thread ever reads a page before its data is back.
 * Private regions of this backend need no alias (hmm_region_add(): the write goes
 * through /proc/self/mem). 0, -EINVAL (not shared, not writable, wrong backend),
 * -EEXIST, -ENOSPC. */
int hmm_region_add_alias(struct hmm_mm *mm, void *addr, size_t len, void *alias);
/* Migrate the region's device pages back and stop managing it. The region is the one
 * added at @addr: an mremap that moves part of it away (userfaultfd backends) leaves its
 * other parts under that address, and what it moves, if it needs a region there, gets
 * one under its new start. -ENOENT if no region was added at @addr, or none of it is
 * left. */
int hmm_region_remove(struct hmm_mm *mm, void *addr);

/* Bring every device-resident page of [addr, addr+len) back to system memory (the
 * explicit "migrate back before a system call" of the SIGBUS backend, and the pin path
 * of a long-term GUP). Returns the number of pages brought back or -errno. */
long hmm_mm_make_resident(struct hmm_mm *mm, void *addr, size_t len);

/* Unmap, remap and fork events are read by the handler thread: the thread that caused
 * one resumes when it has been read, not handled. Wait until those read are handled. */
void hmm_mm_sync_events(struct hmm_mm *mm);

/* Kernel capabilities hmm/ uses, as probed once per process and then narrowed by the
 * environment variable VGPU_HMM_CAPS (a comma-separated list of names: uffd, events,
 * sigbus, wp, move, procmap_query; or a set: "all", "6.1", "5.14", "none"), which can
 * only take away what the kernel has. Every capability has a fallback (doc/hmm.md). */
struct hmm_uffd_caps {
	bool available;			/* userfaultfd(2) works for this process */
	bool sigbus, move, events;	/* FEATURE_SIGBUS, UFFDIO_MOVE, UNMAP+REMAP+FORK */
	bool wp;			/* UFFDIO_WRITEPROTECT of anonymous memory */
	bool procmap_query;		/* PROCMAP_QUERY (else /proc/self/maps is parsed) */
	bool overridden;		/* VGPU_HMM_CAPS took something away */
	bool invalid;			/* VGPU_HMM_CAPS is malformed: every mm is refused */
	char why[96];			/* what is missing (or wrong), "" if nothing */
};
/* The capabilities in effect (probed on the first call). */
void hmm_uffd_probe(struct hmm_uffd_caps *caps);

/* ------------------------------------------------------------------------------------
 * Invalidation events and interval notifiers (mmu_interval_notifier)
 */
enum hmm_event {
	HMM_EVENT_UNMAP,	/* munmap, mremap source: the range is gone */
	HMM_EVENT_CLEAR,	/* pages dropped (madvise, reported by the application) */
	HMM_EVENT_PROTECTION,	/* mprotect (reported by the application) */
	HMM_EVENT_MIGRATE,	/* pages migrate; owner = the memory they migrate to/from */
	HMM_EVENT_RELEASE,	/* the mm is going away */
	HMM_EVENT_FORK,		/* fork: mirrors drop write access (COW) */
	HMM_EVENT_EXCLUSIVE,	/* a device takes (owner = it) or loses exclusive access */
	HMM_EVENT_NR,
};
#define HMM_EVENT_BIT(e)	(1u << (e))
#define HMM_EVENTS_ALL		((1u << HMM_EVENT_NR) - 1)

/* Event range flags. */
#define HMM_NOTIFY_BLOCKABLE	(1u << 0)	/* the callback may sleep and lock */

struct hmm_notify_range {
	uintptr_t start, end;		/* [start, end) */
	enum hmm_event event;
	const void *owner;		/* MIGRATE: owner of the memory involved, else NULL */
	unsigned int flags;		/* HMM_NOTIFY_* */
};

struct hmm_interval_notifier_ops {
	/* Tear down device mappings of r->start..r->end and call hmm_interval_set_seq()
	 * under the driver's update lock. Without HMM_NOTIFY_BLOCKABLE (called from a
	 * SIGBUS handler) only trylock and return false on contention: the caller retries.
	 * Never touch managed memory while holding the update lock. */
	bool (*invalidate)(struct hmm_interval_notifier *sub, const struct hmm_notify_range *r,
			   uint64_t cur_seq);
};

/* Embedded by the driver; fields are private to hmm/ once inserted. */
struct hmm_interval_notifier {
	struct hmm_mm *mm;
	uintptr_t start, end;
	const struct hmm_interval_notifier_ops *ops;
	const void *owner;		/* MIGRATE, EXCLUSIVE events with this owner are not
					 * delivered */
	unsigned int events;		/* HMM_EVENT_BIT mask delivered; 0 = all */
	_Atomic uint64_t invalidate_seq;
	atomic_uint busy;		/* invalidations in progress on this notifier */
	int slot;
};

/* Insert @sub over [start, start+len) with @owner filtering; sub->events may be set
 * before. 0, -EINVAL, -ENOSPC. */
int hmm_interval_notifier_insert(struct hmm_interval_notifier *sub, struct hmm_mm *mm,
				 uintptr_t start, size_t len, const void *owner,
				 const struct hmm_interval_notifier_ops *ops);
/* Remove @sub; waits for invalidations in progress on it. */
void hmm_interval_notifier_remove(struct hmm_interval_notifier *sub);
/* Begin a read side section: waits while an invalidation runs on @sub; returns the seq. */
uint64_t hmm_interval_read_begin(struct hmm_interval_notifier *sub);
/* Authoritative: true if an invalidation happened since @seq. Call under the update lock. */
bool hmm_interval_read_retry(struct hmm_interval_notifier *sub, uint64_t seq);
/* Lockless hint of the same. */
bool hmm_interval_check_retry(struct hmm_interval_notifier *sub, uint64_t seq);
/* From the invalidate callback, under the update lock. Signal context safe. */
void hmm_interval_set_seq(struct hmm_interval_notifier *sub, uint64_t cur_seq);

/* Report an event the library cannot see (mprotect, madvise, ...) and invalidate the
 * overlapping notifiers. HMM_EVENT_CLEAR also drops device copies in the range (the
 * pages read as zero afterwards, as after MADV_DONTNEED). 0 or -EINVAL. */
int hmm_mm_notify(struct hmm_mm *mm, enum hmm_event event, uintptr_t start, uintptr_t end);

/* ------------------------------------------------------------------------------------
 * hmm_range_fault: snapshot or fault a range (include/linux/hmm.h semantics)
 *
 * One word per 4 KiB page. On input: HMM_PFN_REQ_FAULT asks for a valid page (fault it
 * in or fail), HMM_PFN_REQ_WRITE (with REQ_FAULT) for a writable one; the request per
 * page is (pfns[i] & pfn_flags_mask) | default_flags. On output: flags in the top bits,
 * the value in the low HMM_PFN_VALUE_BITS: a device page index for HMM_PFN_DEVICE, else
 * the virtual page number (address >> 12; the in-process device accesses it there).
 * 0 = not present but faultable.
 */
#define HMM_PFN_VALID		(1ull << 63)	/* present, at least readable */
#define HMM_PFN_WRITE		(1ull << 62)	/* writable without a fault */
#define HMM_PFN_ERROR		(1ull << 61)	/* no VMA, PROT_NONE or special mapping */
#define HMM_PFN_DEVICE		(1ull << 60)	/* device page of range->owner */
#define HMM_PFN_ZERO		(1ull << 59)	/* the shared zero page */
#define HMM_PFN_ORDER_SHIFT	53		/* map order (9 for a 2 MiB THP mapping) */
#define HMM_PFN_ORDER_MASK	(0x1full << HMM_PFN_ORDER_SHIFT)
#define HMM_PFN_VALUE_BITS	53
#define HMM_PFN_VALUE_MASK	((1ull << HMM_PFN_VALUE_BITS) - 1)
#define HMM_PFN_REQ_FAULT	HMM_PFN_VALID
#define HMM_PFN_REQ_WRITE	HMM_PFN_WRITE

/* Map order of an output word: 0 for a 4 KiB mapping, 9 for 2 MiB. */
static inline unsigned int hmm_pfn_to_map_order(uint64_t pfn)
{
	return (unsigned int)((pfn & HMM_PFN_ORDER_MASK) >> HMM_PFN_ORDER_SHIFT);
}

struct hmm_range {
	struct hmm_interval_notifier *notifier;
	uint64_t notifier_seq;		/* from hmm_interval_read_begin() */
	uintptr_t start, end;		/* page aligned, end exclusive */
	uint64_t *hmm_pfns;		/* (end - start) / 4 KiB words */
	uint64_t default_flags, pfn_flags_mask;
	const void *dev_private_owner;	/* device pages of this owner are reported VALID */
	uint64_t timeout_ns;		/* waiting on migrations; 0 = default (1 s) */
	/* out */
	unsigned long faulted;		/* pages faulted in or migrated back by this call */
};

/* Fill range->hmm_pfns, faulting pages in as requested. 0; -EINVAL (bad range);
 * -EBUSY (the notifier was invalidated: read_begin again and retry); -EFAULT (a page
 * asked for could not be made valid: no VMA, PROT_NONE, special); -EPERM (write asked
 * on a read-only mapping); -ENOMEM. Never crashes on concurrent munmap. */
int hmm_range_fault(struct hmm_range *range);

/* ------------------------------------------------------------------------------------
 * Device memory: an abstract page pool (in-process memory for tests, a VF's VRAM slice
 * mapped into the process later). Pages are 4 KiB; 2 MiB chunks are handed out
 * naturally aligned when asked for.
 */
enum hmm_copy_dir { HMM_COPY_TO_DEVICE, HMM_COPY_TO_SYSTEM };

struct hmm_devmem_desc {
	const void *owner;		/* the "pgmap owner": one per device (VF) */
	void *base;			/* CPU mapping of the memory; NULL = allocate here */
	uint64_t size;			/* bytes, multiple of 2 MiB */
	/* Copy @npages between system memory at @sys and device pages @dev_page.. (contiguous).
	 * NULL = memcpy through @base. Called in thread context only. */
	int (*copy)(void *ctx, enum hmm_copy_dir dir, void *sys, uint64_t dev_page,
		    size_t npages);
	void *ctx;
};

/* Create a pool. 0, -EINVAL, -ENOMEM, -ENOSPC (HMM_MAX_DEVMEMS pools exist). */
int hmm_devmem_create(const struct hmm_devmem_desc *desc, struct hmm_devmem **out);
/* Destroy an empty pool; -EBUSY while pages are in use (evict first). */
int hmm_devmem_destroy(struct hmm_devmem *dm);
/* CPU address of device page @page. */
void *hmm_devmem_page_ptr(struct hmm_devmem *dm, uint64_t page);
/* Owner given at creation. */
const void *hmm_devmem_owner(const struct hmm_devmem *dm);
/* Pages in use (allocated, including pages freed by a fault not yet reclaimed). */
uint64_t hmm_devmem_used_pages(struct hmm_devmem *dm);
/* Fault injection: the next @n allocations fail (FAIL_ALLOC of lib/test_hmm.c). */
void hmm_devmem_fail_next_allocs(struct hmm_devmem *dm, unsigned int n);
/* Allocate @n zeroed pages (nothing an earlier owner wrote survives); 2 MiB aligned and
 * contiguous when @n == 512 and @chunk. Indices into @pages. 0, -ENOMEM. */
int hmm_devmem_alloc(struct hmm_devmem *dm, size_t n, bool chunk, uint64_t *pages);
/* How pages were cleared of earlier contents before reaching their owner. */
struct hmm_devmem_stats {
	uint64_t scrubbed_pages;	/* zeroed at allocation (hmm_devmem_alloc) */
	uint64_t overwritten_pages;	/* allocated by a migration, which writes each whole */
};
/* Snapshot of @dm's counters (relaxed reads). */
void hmm_devmem_get_stats(struct hmm_devmem *dm, struct hmm_devmem_stats *st);
/* Free pages from hmm_devmem_alloc(). */
void hmm_devmem_free(struct hmm_devmem *dm, const uint64_t *pages, size_t n);
/* Migrate every page of @dm back to system memory (device teardown, VF reset). Never
 * loses data: retries until done. Returns the number of pages evicted. */
long hmm_devmem_evict_all(struct hmm_mm *mm, struct hmm_devmem *dm);

/* ------------------------------------------------------------------------------------
 * Device-exclusive access (make_device_exclusive): a device that wants atomics on system
 * pages takes them away from the CPU without moving them. The pages stay where they are,
 * made inaccessible (PROT_NONE) with every backend; the first CPU access to one gives it
 * back and fires HMM_EVENT_EXCLUSIVE (owner NULL) on it, so the device drops its atomic
 * mapping. A system call that touches such a page gets EFAULT: hmm_mm_make_resident()
 * gives the CPU its access back first (and fork does so itself). An mprotect of such a
 * page must be reported with hmm_mm_notify(HMM_EVENT_PROTECTION): exclusivity ends.
 */

/* Make the pages of [addr, addr+len) exclusive to the device @owner: device pages come
 * back first, the pages are faulted in writable (COW broken), the other mirrors get
 * HMM_EVENT_EXCLUSIVE (owner = @owner, which they see and @owner's own notifier skips),
 * then the CPU loses access. @pfns (len / 4 KiB words) gets hmm_range_fault words
 * (VALID|WRITE|page number) for the device to map; do it under the update lock after a
 * hmm_interval_read_retry() check, as after a range fault. Pages must lie in managed
 * regions of @mm. 0, -EINVAL (bad range, not managed), -EFAULT (no VMA), -EPERM (not
 * writable). */
int hmm_make_exclusive(struct hmm_mm *mm, void *addr, size_t len, const void *owner,
		       uint64_t *pfns);

/* ------------------------------------------------------------------------------------
 * Three-phase migration (migrate_vma_setup / _pages / _finalize)
 */
#define HMM_MIGRATE_PFN_VALID		(1ull << 0)	/* entry names a page */
#define HMM_MIGRATE_PFN_MIGRATE		(1ull << 1)	/* collected and still migrating */
#define HMM_MIGRATE_PFN_WRITE		(1ull << 3)	/* the mapping is writable */
#define HMM_MIGRATE_PFN_COMPOUND	(1ull << 4)	/* part of a whole 2 MiB chunk */
#define HMM_MIGRATE_PFN_DEVICE		(1ull << 5)	/* src: a device page */
#define HMM_MIGRATE_PFN_SHIFT		6
#define hmm_migrate_pfn(page)		(((uint64_t)(page) << HMM_MIGRATE_PFN_SHIFT) | \
					 HMM_MIGRATE_PFN_VALID)
#define hmm_migrate_pfn_page(e)		((e) >> HMM_MIGRATE_PFN_SHIFT)

#define HMM_MIGRATE_SELECT_SYSTEM	(1u << 0)	/* system pages -> device */
#define HMM_MIGRATE_SELECT_DEVICE_PRIVATE (1u << 1)	/* pages of @devmem -> system */

struct hmm_migrate {
	struct hmm_mm *mm;
	uintptr_t start, end;		/* page aligned, at most 2 MiB */
	uint64_t *src, *dst;		/* (end - start) / 4 KiB entries each */
	struct hmm_devmem *devmem;	/* destination (SYSTEM) or source (DEVICE_PRIVATE) */
	unsigned int flags;		/* one HMM_MIGRATE_SELECT_* */
	/* out */
	size_t npages, cpages;		/* pages in range, pages collected */
	/* private */
	void *priv;
};

/* Collect and isolate the pages: fires HMM_EVENT_MIGRATE, then CPU accesses to collected
 * pages wait (a write or read of a page moving to the device marks it "CPU wins": it
 * stays in system memory). A src entry with MIGRATE but not VALID is an empty page: the
 * driver clears the destination instead of copying. Pages outside managed regions, in
 * shared mappings or shared with a fork child are not collected. 0 with cpages set (may
 * be 0); -EINVAL for a bad range, a hole, no VM_READ or a special mapping.
 * After 0 the caller must call hmm_migrate_pages() and hmm_migrate_finalize(). */
int hmm_migrate_setup(struct hmm_migrate *m);
/* Source data of collected entry @i (CPU address), NULL for an empty page. */
void *hmm_migrate_src_ptr(struct hmm_migrate *m, size_t i);
/* SELECT_DEVICE_PRIVATE: where to put entry @i's data (system staging memory); the
 * driver then sets dst[i] = HMM_MIGRATE_PFN_VALID. */
void *hmm_migrate_dst_ptr(struct hmm_migrate *m, size_t i);
/* Commit: entries lost to a racing CPU fault, or whose page the kernel refused to move
 * (see hmm_migrate_result.failed), drop HMM_MIGRATE_PFN_MIGRATE. */
void hmm_migrate_pages(struct hmm_migrate *m);
/* Install the new state, restore what did not migrate, free unused destination pages
 * and wake waiting CPU accesses. */
void hmm_migrate_finalize(struct hmm_migrate *m);

/* Result of the batched helpers below. */
struct hmm_migrate_result {
	size_t npages;		/* pages in the range */
	size_t cpages;		/* pages collected */
	size_t migrated;	/* pages that ended where asked */
	size_t cpu_won;		/* collected but kept by a racing CPU access */
	size_t alloc_failed;	/* no device memory (quota): left in system memory */
	size_t chunks;		/* 2 MiB chunks used whole (compound) */
	size_t skipped;		/* pinned by the thrashing policy */
	size_t failed;		/* collected, but the kernel refused to move them (mprotect
				 * backend: a protection change at vm.max_map_count; a copy
				 * into place without memory): left where they were */
};

/* Migrate [addr, addr+len) to @dm in batches of at most 2 MiB, copying with @dm's copy
 * callback; whole aligned 2 MiB batches get one chunk, falling back to 4 KiB pages when
 * the pool cannot give one. Partial success is reported in @res with 0; -EINVAL as
 * hmm_migrate_setup; -ENOMEM if nothing could be allocated. */
int hmm_migrate_to_device(struct hmm_mm *mm, struct hmm_devmem *dm, void *addr, size_t len,
			  struct hmm_migrate_result *res);
/* Migrate @dm's pages in [addr, addr+len) back to system memory (2 MiB batches). */
int hmm_migrate_to_system(struct hmm_mm *mm, struct hmm_devmem *dm, void *addr, size_t len,
			  struct hmm_migrate_result *res);

/* ------------------------------------------------------------------------------------
 * Counters (per mm)
 */
struct hmm_mm_stats {
	uint64_t cpu_faults;		/* CPU faults served by the backend */
	uint64_t cpu_fault_pages;	/* pages migrated back by CPU faults */
	uint64_t zero_fills;		/* missing managed pages filled with zeros */
	uint64_t cpu_won;		/* migrations lost to a racing CPU access */
	uint64_t migrated_to_device, migrated_to_system;	/* pages */
	uint64_t invalidations;		/* notifier callbacks run */
	uint64_t events_unmap, events_remap, events_fork;	/* from userfaultfd */
	uint64_t event_waits;		/* SIGBUS faults retried while events they may
					 * depend on were queued or being handled */
	uint64_t exclusive;		/* pages made device-exclusive */
	uint64_t exclusive_revoked;	/* ... and given back to the CPU */
	uint64_t copier_pages;		/* pages of migrations back copied by the copier
					 * thread (no UFFDIO_MOVE: doc/hmm.md) */
	uint64_t spare_fills;		/* 2 MiB blocks of fresh pages the spare filler
					 * made ready for migrations back (doc/hmm.md) */
	uint64_t spare_fills_pending;	/* ... asked for and not done yet */
};
/* Snapshot of @mm's counters (relaxed reads). */
void hmm_mm_get_stats(struct hmm_mm *mm, struct hmm_mm_stats *st);

/* Per-page state of a managed page, for tests and debugging. */
enum hmm_page_where { HMM_PAGE_NONE, HMM_PAGE_SYSTEM, HMM_PAGE_DEVICE, HMM_PAGE_BUSY,
		      HMM_PAGE_EXCLUSIVE };
/* Where the page at @addr lives; @dm_out/@page_out set for HMM_PAGE_DEVICE. */
enum hmm_page_where hmm_mm_page_where(struct hmm_mm *mm, const void *addr,
				      struct hmm_devmem **dm_out, uint64_t *page_out);

/* ------------------------------------------------------------------------------------
 * Policies (NVIDIA UVM): tree prefetch and thrashing detection
 */
struct hmm_prefetch_params {
	bool enable;
	unsigned int threshold_pct;	/* subregion prefetched when > this % populated (51) */
	unsigned int min_faults;	/* faults in the block before prefetching (1) */
};
#define HMM_PREFETCH_DEFAULTS	{ .enable = true, .threshold_pct = 51, .min_faults = 1 }
#define HMM_BLOCK_WORDS		(HMM_BLOCK_PAGES / 64)

/* For one 2 MiB block: @resident pages already at the destination, @faulted pages being
 * faulted now, @thrashing pages never to prefetch. Writes the pages to prefetch to @out
 * (never resident, faulted or thrashing ones). Returns the number of pages in @out. */
unsigned int hmm_prefetch_compute(const struct hmm_prefetch_params *p,
				  const uint64_t resident[HMM_BLOCK_WORDS],
				  const uint64_t faulted[HMM_BLOCK_WORDS],
				  const uint64_t thrashing[HMM_BLOCK_WORDS],
				  uint64_t out[HMM_BLOCK_WORDS]);

struct hmm_thrash_params {
	bool enable;
	unsigned int threshold;		/* events within lapse before throttling (3) */
	unsigned int pin_threshold;	/* throttles before pinning (10) */
	uint64_t lapse_ns;		/* two migrations closer than this = an event (500 us) */
	uint64_t nap_ns;		/* throttle period (500 us) */
	uint64_t pin_ns;		/* pinned this long after the last event (150 ms) */
	uint64_t epoch_ns;		/* quiet this long: state reset (1 s) */
};
#define HMM_THRASH_DEFAULTS { .enable = true, .threshold = 3, .pin_threshold = 10,	\
			      .lapse_ns = 500000, .nap_ns = 500000,			\
			      .pin_ns = 150000000, .epoch_ns = 1000000000 }

enum hmm_thrash_hint { HMM_THRASH_NONE, HMM_THRASH_THROTTLE, HMM_THRASH_PIN };

struct hmm_thrash_stats {
	uint64_t events, throttles, pins, unpins;
};

struct hmm_thrash;
/* A tracker of per-page migration history. 0, -EINVAL, -ENOMEM. */
int hmm_thrash_create(const struct hmm_thrash_params *p, struct hmm_thrash **out);
/* Free @t (NULL is fine). */
void hmm_thrash_destroy(struct hmm_thrash *t);
/* Record that page @addr migrated at @now_ns (by processor @proc: 0 = CPU, others =
 * devices) and return what to do with the next migration request for it. */
enum hmm_thrash_hint hmm_thrash_record(struct hmm_thrash *t, uintptr_t addr,
				       unsigned int proc, uint64_t now_ns);
/* Current hint for @addr at @now_ns without recording (unpins expired pins). */
enum hmm_thrash_hint hmm_thrash_query(struct hmm_thrash *t, uintptr_t addr, uint64_t now_ns);
/* Counters. */
void hmm_thrash_get_stats(struct hmm_thrash *t, struct hmm_thrash_stats *st);

/* ------------------------------------------------------------------------------------
 * Mirror: a device that mirrors the mm and services its own page faults in batches
 * (UVM replayable faults: sort, dedup per 2 MiB block, fault, map, replay).
 */
struct hmm_mirror;

struct hmm_mirror_ops {
	/* Drop device mappings of r->start..r->end (see hmm_interval_notifier_ops); the
	 * library has already called hmm_interval_set_seq() under m->update. */
	void (*invalidate)(struct hmm_mirror *m, const struct hmm_notify_range *r);
	/* Program device PTEs of [start, end) from @pfns (hmm_range_fault output; 0 entries
	 * are to be left alone). Called with m->update held, after the seq check. */
	int (*map)(struct hmm_mirror *m, uintptr_t start, uintptr_t end, const uint64_t *pfns);
};

struct hmm_dev_fault {
	uintptr_t addr;
	bool write;
};

struct hmm_mirror_opts {
	struct hmm_prefetch_params prefetch;
	struct hmm_thrash_params thrash;
	bool migrate_on_fault;		/* faults migrate pages into @devmem (else map remote) */
};

struct hmm_fault_stats {
	uint64_t faults;		/* entries handed in */
	uint64_t dedup;			/* dropped as duplicates */
	uint64_t blocks;		/* 2 MiB blocks serviced */
	uint64_t pages_mapped;		/* pages mapped (faulted + prefetched) */
	uint64_t prefetched;		/* pages added by the prefetch policy */
	uint64_t migrated;		/* pages migrated to device memory */
	uint64_t throttled;		/* faults deferred by the thrashing policy */
	uint64_t pinned;		/* pages kept in system memory, mapped remotely */
	uint64_t retries;		/* range-fault or seq retries */
	uint64_t errors;		/* faults that could not be serviced (cancelled) */
	uint64_t replays;		/* batches replayed */
};

struct hmm_mirror {
	struct hmm_interval_notifier notifier;
	struct hmm_mm *mm;
	struct hmm_devmem *devmem;	/* local memory; its owner is the mirror's owner */
	const struct hmm_mirror_ops *ops;
	void *priv;			/* the driver's */
	struct cmn_mutex update;	/* the HMM "driver->update" lock */
	struct hmm_mirror_opts opts;
	struct hmm_thrash *thrash;
	struct hmm_fault_stats stats;	/* by the fault service: one caller at a time */
	void *blocks;			/* populated-page bitmaps per 2 MiB block */
};

/* Mirror the whole address space of @mm for a device with local memory @dm (may be NULL
 * for a device without memory). @opts NULL = defaults. 0, -EINVAL, -ENOMEM, -ENOSPC. */
int hmm_mirror_init(struct hmm_mirror *m, struct hmm_mm *mm, struct hmm_devmem *dm,
		    const struct hmm_mirror_ops *ops, const struct hmm_mirror_opts *opts);
/* Stop mirroring. */
void hmm_mirror_fini(struct hmm_mirror *m);
/* Service a batch of device faults: dedup per block, prefetch, (migrate), range fault
 * with seq retry, map. Faults that cannot be serviced count in stats.errors and
 * @status[i] (may be NULL) gets their -errno (the device cancels them); 0 = replay.
 * Returns 0, or -EINVAL for a bad batch. */
int hmm_mirror_service_faults(struct hmm_mirror *m, const struct hmm_dev_fault *faults,
			      size_t n, int *status);

/* ------------------------------------------------------------------------------------
 * Page requests (PRI): serve an IOMMU function's page requests for a PASID bound to this
 * process's address space (an SVA domain of getpid()), so that a device access to a page
 * that is not present - never touched, swapped or dropped, or a managed page kept on the
 * device (PROT_NONE under the mprotect backend) - is faulted in (device pages migrate
 * back to system memory) and the access retried instead of ending in a fault. Requests
 * for an address with no VMA, or without the permission asked for, are answered Invalid.
 */
struct iommu;

struct hmm_pri_stats {
	uint64_t requests;		/* page requests received */
	uint64_t served;		/* answered Success: the page is present now */
	uint64_t invalid;		/* answered Invalid: no VMA, no permission, other PASID */
	uint64_t faulted;		/* pages faulted in or migrated back for them */
};

struct hmm_pri {
	struct hmm_interval_notifier notifier;
	struct iommu *mmu;
	unsigned int rid;
	uint32_t pasid;
	_Atomic uint64_t requests, served, invalid, faulted;
};

/* Serve @rid's page requests at @pasid from @mm (PRI enabled with @max_outstanding
 * groups). 0, -EINVAL (bad argument), -ENOSPC (no notifier slot). */
int hmm_pri_attach(struct hmm_pri *p, struct hmm_mm *mm, struct iommu *mmu, unsigned int rid,
		   uint32_t pasid, unsigned int max_outstanding);
/* Serve page requests that reach this process some other way - forwarded by a daemon that
 * owns the IOMMU (vgpud) - from @mm with hmm_pri_serve_page(); no IOMMU here. 0, -EINVAL,
 * -ENOSPC. */
int hmm_pri_attach_mm(struct hmm_pri *p, struct hmm_mm *mm);
/* Disable PRI for the function (outstanding requests end Invalid) and stop serving. */
void hmm_pri_detach(struct hmm_pri *p);
/* Stop serving after hmm_pri_attach_mm() (needs no IOMMU model at link time). */
void hmm_pri_detach_mm(struct hmm_pri *p);
/* Fault in the page at @addr of @mm as a device access would need it (@write: writable).
 * 0, -EFAULT (no VMA or no access), -EPERM (write to a read-only mapping), -EBUSY. */
int hmm_pri_serve_page(struct hmm_pri *p, uintptr_t addr, bool write);
/* Counters since attach. */
void hmm_pri_get_stats(struct hmm_pri *p, struct hmm_pri_stats *st);

#endif
