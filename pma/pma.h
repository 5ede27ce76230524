/* SPDX-License-Identifier: MIT */
/* pma - physical memory allocator: VRAM in 64 KiB frames, handed out as 64K / 128K / 2M /
 * 512M pages with NVIDIA PMA semantics (pin states, eviction, scrub-on-free, blacklist,
 * regions ranked by speed). One instance per device and one per VF slice (a child).
 *
 * Addresses are absolute device addresses (bytes). Every call takes the instance lock
 * unless its name ends in _locked; the statistics calls take it only to bring the largest
 * free extent up to date (see pma_largest_free()).
 * All calls return 0 or a negative errno:
 *   -EINVAL   malformed request (bad page size, alignment, range, flags, unknown region)
 *   -ENOMEM   not enough allocatable memory for the request
 *   -EBUSY    frames are being evicted (pin) or callbacks are busy (unregister)
 *   -EEXIST   fixed/imported range overlaps an allocation
 *   -ENOENT   freeing or pinning something that is not allocated
 *   -EPERM    wrong state for the transition (pin of a pinned page, unpin of an unpinned) */
#ifndef VGPU_PMA_H
#define VGPU_PMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PMA_FRAME_SHIFT		16
#define PMA_FRAME_SIZE		(1ull << PMA_FRAME_SHIFT)	/* 64 KiB */
#define PMA_PAGE_64K		(64ull << 10)
#define PMA_PAGE_128K		(128ull << 10)
#define PMA_PAGE_2M		(2ull << 20)
#define PMA_PAGE_512M		(512ull << 20)
#define PMA_MAX_REGIONS		32
#define PMA_MAX_BLACKLIST	512

struct pma;

/* Allocation flags (pma_alloc_opts.flags). */
enum pma_alloc_flags {
	PMA_DONT_EVICT		= 1u << 0,  /* never call eviction callbacks */
	PMA_PINNED		= 1u << 1,  /* allocate in PIN state (else UNPIN = evictable) */
	PMA_MIN_SPEED		= 1u << 2,  /* only regions with perf >= min_speed */
	PMA_RANGE		= 1u << 3,  /* only inside [range_begin, range_end) */
	PMA_REGION_ID		= 1u << 4,  /* only region region_id */
	PMA_PREFER_SLOWEST	= 1u << 5,  /* try regions slowest first */
	PMA_CONTIGUOUS		= 1u << 6,  /* all pages form one run (within one region) */
	PMA_PERSISTENT		= 1u << 7,  /* mark persistent (kept across suspend lists) */
	PMA_PROTECTED		= 1u << 8,  /* only protected regions (else only unprotected) */
	PMA_FORCE_ALIGNMENT	= 1u << 9,  /* align first page to .alignment (absolute) */
	PMA_NO_ZERO		= 1u << 10, /* caller does not need zeroed memory */
	PMA_ALLOW_PARTIAL	= 1u << 12, /* discontiguous only: take what is there (>= 1 page) */
	PMA_REVERSE		= 1u << 13, /* search top-down */
};

/* Result flags (pma_alloc_opts.result_flags). */
#define PMA_RESULT_IS_ZERO	(1u << 0)	/* every returned page reads as zero */

struct pma_alloc_opts {
	uint32_t flags;			/* enum pma_alloc_flags */
	uint32_t min_speed;		/* with PMA_MIN_SPEED */
	uint64_t range_begin;		/* with PMA_RANGE: page-size aligned */
	uint64_t range_end;		/* with PMA_RANGE: exclusive, page-size aligned */
	uint32_t region_id;		/* with PMA_REGION_ID */
	uint64_t alignment;		/* with PMA_FORCE_ALIGNMENT: power of two >= 64 KiB */
	/* On output: */
	size_t pages_allocated;		/* pages written to pages_out (partial allocations) */
	uint32_t result_flags;		/* PMA_RESULT_* */
};

/* One region of VRAM: base and size 64 KiB aligned, size > 0. */
struct pma_region_desc {
	uint64_t base;
	uint64_t size;
	uint32_t performance;		/* higher is faster */
	bool protected_mem;		/* only PMA_PROTECTED allocations come here */
};

/* Frame state as seen by pma_query() and the export list. */
enum pma_frame_state {
	PMA_STATE_FREE		= 0,
	PMA_STATE_UNPIN		= 1,	/* allocated, evictable */
	PMA_STATE_PIN		= 2,	/* allocated, pinned */
};
#define PMA_ATTR_EVICTING	(1u << 2)
#define PMA_ATTR_SCRUBBING	(1u << 3)
#define PMA_ATTR_PERSISTENT	(1u << 4)
#define PMA_ATTR_BLACKLIST	(1u << 5)
#define PMA_STATE_MASK		3u

/* Scrubber: zeroes [addr, addr + size) of device memory; 0 or -errno (an error makes the
 * frames stay SCRUBBING and unallocatable until pma_scrub_complete() is called for them). */
typedef int (*pma_scrub_fn)(void *ctx, uint64_t addr, uint64_t size);

/* Eviction callbacks: called without the lock held when only evictable (UNPIN) frames stand
 * in the way. evict_range must make [begin, end) free of the caller's data; evict_pages must
 * free the @count pages of @page_size listed in @pages. 0 on success, -errno otherwise. */
struct pma_evict_ops {
	int (*evict_range)(void *ctx, uint64_t begin, uint64_t end);
	int (*evict_pages)(void *ctx, uint64_t page_size, const uint64_t *pages, size_t count);
	void *ctx;
};

/* Instance options (pma_create). */
struct pma_config {
	bool scrub_on_free;		/* freed frames are scrubbed before reuse; memory never
					 * allocated counts as zero */
	pma_scrub_fn scrub;		/* NULL: memset() over .backing, or nothing if no backing */
	void *scrub_ctx;
	void *backing;			/* optional host view of the device memory (base = address 0) */
	unsigned int evict_retries;	/* eviction attempts per allocation, failed callbacks
					 * included; 0 means 3 */
};

/* Statistics; each field is exact at its last state change (largest_free_bytes: at the
 * time it is read). */
struct pma_stats {
	uint64_t total_bytes;		/* all regions, blacklisted frames included */
	uint64_t free_bytes;		/* allocatable now (not scrubbing, not blacklisted) */
	uint64_t free_2m_pages;		/* 2 MiB-aligned groups wholly allocatable */
	uint64_t largest_free_bytes;	/* largest allocatable contiguous extent */
	uint64_t scrubbing_bytes;	/* freed, waiting for the scrubber */
	uint64_t blacklisted_bytes;
	uint64_t unregister_waits;	/* pma_evict_unregister() calls that found an eviction in
					 * flight and waited for it */
};

/* An allocated range for export / import (persistence, migration). */
struct pma_range {
	uint64_t base;
	uint64_t size;
	uint32_t state;			/* PMA_STATE_UNPIN or PMA_STATE_PIN, | PMA_ATTR_PERSISTENT */
};

/* --- lifetime -------------------------------------------------------------------------- */
/* Create an instance with no regions; @cfg may be NULL. NULL on -ENOMEM. */
struct pma *pma_create(const struct pma_config *cfg);
/* Destroy: waits for the scrubber; memory still allocated is simply forgotten. */
void pma_destroy(struct pma *pma);
/* Add region @desc with @nr_bad blacklisted addresses. Returns the region id (0, 1, ...)
 * or -EINVAL (misaligned, overlapping, too many regions) / -ENOMEM. */
int pma_region_add(struct pma *pma, const struct pma_region_desc *desc,
		   const uint64_t *bad_addrs, size_t nr_bad);
/* Child allocator over [base, base + size) of @parent, taken there as one pinned contiguous
 * allocation; the child manages absolute addresses in that range. NULL with *@err set. */
struct pma *pma_child_create(struct pma *parent, uint64_t base, uint64_t size,
			     const struct pma_config *cfg, int *err);
/* Destroy a child and give its range back to the parent. */
void pma_child_destroy(struct pma *child);

/* --- allocation ------------------------------------------------------------------------ */
/* Allocate @count pages of @page_size into @pages_out (ascending for CONTIGUOUS: every page's
 * address). All or nothing unless PMA_ALLOW_PARTIAL. @opts may be NULL; its output fields
 * are written when it is not. */
int pma_alloc_pages(struct pma *pma, size_t count, uint64_t page_size,
		    struct pma_alloc_opts *opts, uint64_t *pages_out);
/* Allocate exactly [addr, addr + size) (64 KiB aligned); -EEXIST if any part is taken,
 * -ENOMEM if part of it is blacklisted or scrubbing. @opts flags PINNED/PERSISTENT apply. */
int pma_alloc_fixed(struct pma *pma, uint64_t addr, uint64_t size, struct pma_alloc_opts *opts);
/* Flags for pma_free_pages(). */
#define PMA_FREE_SKIP_SCRUB	(1u << 0)
/* Free @count pages of @page_size (consecutive pages are freed as one range). -ENOENT and no
 * change if any frame is not allocated. */
int pma_free_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size,
		   unsigned int flags);
/* Free [addr, addr + size) as one state change. */
int pma_free_range(struct pma *pma, uint64_t addr, uint64_t size, unsigned int flags);
/* UNPIN -> PIN for every page; -EBUSY if any frame is evicting, -ENOENT if any is free,
 * -EPERM if any is already pinned; nothing changes on error. */
int pma_pin_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size);
/* PIN -> UNPIN for every page; -ENOENT if any is free, -EPERM if any is not pinned;
 * nothing changes on error. */
int pma_unpin_pages(struct pma *pma, const uint64_t *pages, size_t count, uint64_t page_size);

/* --- scrubbing, eviction, bad pages ------------------------------------------------------ */
/* Mark [addr, addr + size) scrubbed: SCRUBBING frames there become allocatable. */
int pma_scrub_complete(struct pma *pma, uint64_t addr, uint64_t size);
/* Wait until no scrub is pending (the worker has caught up). */
void pma_scrub_wait(struct pma *pma);
/* Register eviction callbacks; -EBUSY if a set is already registered. */
int pma_evict_register(struct pma *pma, const struct pma_evict_ops *ops);
/* Unregister; waits until no eviction is in flight. */
void pma_evict_unregister(struct pma *pma);
/* Retire the frame holding @addr: never handed out again (if allocated now, once freed). */
int pma_blacklist_add(struct pma *pma, uint64_t addr);

/* --- queries ------------------------------------------------------------------------------ */
/* Snapshot of the statistics: each field current to its last state change; the largest
 * free extent as pma_largest_free() gives it. */
void pma_get_stats(const struct pma *pma, struct pma_stats *out);
/* Free bytes (allocatable now); lock-free, O(1). */
uint64_t pma_free_bytes(const struct pma *pma);
/* Largest free contiguous extent in bytes, exact when read. Lock-free and O(1) when no
 * operation changed the free extents since the last read; otherwise it takes the lock once
 * and brings the extent tree up to date (work in proportion to the tree leaves changed
 * since, so allocations never pay for a figure nobody reads). Do not call it with the
 * instance lock held, i.e. from inside the allocator. */
uint64_t pma_largest_free(const struct pma *pma);
/* State and attributes of the frame holding @addr; -EINVAL if outside every region. */
int pma_query(struct pma *pma, uint64_t addr, uint32_t *state_out);
/* Number of regions, and region @id's descriptor. */
unsigned int pma_region_count(const struct pma *pma);
int pma_region_get(const struct pma *pma, unsigned int id, struct pma_region_desc *out);
/* Write up to @max allocated ranges (maximal runs of equal state) to @out; *@nr gets the
 * total number, which may exceed @max (call again with a bigger array). */
int pma_export(struct pma *pma, struct pma_range *out, size_t max, size_t *nr);
/* Re-create exactly the allocations in @ranges (all or nothing; -EEXIST on overlap). */
int pma_import(struct pma *pma, const struct pma_range *ranges, size_t nr);
/* Check every internal invariant (indexes vs bitmaps, counters); 0 or -EIO with a log line. */
int pma_check(struct pma *pma);

#endif
