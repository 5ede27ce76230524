/* SPDX-License-Identifier: MIT */
/* hmm/hmm_internal.h - state shared by the files of hmm/: the per-page state words of
 * managed regions, the process-wide region and pool tables the fault handlers read
 * lock-free, and the userfaultfd plumbing. */
#ifndef VGPU_HMM_INTERNAL_H
#define VGPU_HMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/lock.h"
#include "hmm/hmm.h"

/* Reading a CPU page in place after write-protecting (or mprotecting) it: the kernel's
 * page-table change orders every earlier store of the writers before the read, an edge
 * ThreadSanitizer cannot see; a store after it faults and waits. */
#if defined(__SANITIZE_THREAD__)
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define HMM_FENCED_READ_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define HMM_FENCED_READ_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define HMM_FENCED_READ_BEGIN() do { } while (0)
#define HMM_FENCED_READ_END() do { } while (0)
#endif

#define HMM_MAX_MMS		16
#define HMM_MAX_REGIONS		64
#define HMM_MAX_DEVMEMS		32
#define HMM_MAX_NOTIFIERS	64
#define HMM_NR_STAGING		2

/* Page state word of a managed page (one _Atomic uint64_t each):
 *   bits 0-2  state, bit 3 device copy writable, bit 4 a CPU access raced a migration,
 *   bits 8-15 devmem id, bits 32-63 device page index. */
enum hmm_pstate {
	HMM_PS_SYSTEM = 0,	/* in system memory (present or never touched) */
	HMM_PS_TO_DEVICE,	/* collected by a migration to a device */
	HMM_PS_DEVICE,		/* only on the device: the CPU page is missing */
	HMM_PS_TO_SYSTEM,	/* coming back (CPU fault or migration) */
	HMM_PS_EXCLUSIVE,	/* in system memory, PROT_NONE: exclusive to a device */
};
#define HMM_PS_STATE_MASK	0x7ull
#define HMM_PS_DEV_WRITE	(1ull << 3)
#define HMM_PS_CPU_WON		(1ull << 4)
#define HMM_PS_DM_SHIFT		8
#define HMM_PS_PAGE_SHIFT	32

/* The fields of a page state word, and the word of a page only on device @dm. */
static inline unsigned int hmm_ps_state(uint64_t w)
{
	return (unsigned int)(w & HMM_PS_STATE_MASK);
}

static inline unsigned int hmm_ps_dm(uint64_t w)
{
	return (unsigned int)((w >> HMM_PS_DM_SHIFT) & 0xff);
}

static inline uint64_t hmm_ps_page(uint64_t w)
{
	return w >> HMM_PS_PAGE_SHIFT;
}

static inline uint64_t hmm_ps_make_device(unsigned int dm, uint64_t page, bool write)
{
	return HMM_PS_DEVICE | (write ? HMM_PS_DEV_WRITE : 0) | ((uint64_t)dm << HMM_PS_DM_SHIFT) |
	       (page << HMM_PS_PAGE_SHIFT);
}

/* The per-page words of a managed region, shared by the pieces an mremap leaves of it
 * (mm.c): a call that found the region before the split keeps using the same words. */
struct hmm_region_words {
	atomic_uint refs;		/* regions using them */
	_Atomic uint64_t *st;
	_Atomic uint64_t *back_ns;
};

struct hmm_region {
	uintptr_t start, end;
	uintptr_t key;			/* where the application added it: hmm_region_remove()
					 * takes every piece an mremap left of it */
	struct hmm_mm *mm;
	_Atomic uint64_t *st;		/* one state word per page (in @words) */
	_Atomic uint64_t *back_ns;	/* last migration back to the CPU (thrashing) */
	struct hmm_region_words *words;
	bool prot;			/* HMM_BACKEND_MPROTECT: device pages are PROT_NONE */
	char *alias;			/* prot, shared: writable second view; NULL = private */
	atomic_bool dying;		/* being removed: no page may be collected or taken */
	struct hmm_region *retired_next;	/* on the mm's list of retired regions */
};

struct hmm_staging {
	struct cmn_mutex lock;		/* one migration batch at a time */
	char *in;			/* 4 MiB, registered with uffd_stage: MOVE target */
	char *out;			/* 4 MiB plain anon: filled by memcpy, MOVE source */
	bool in_dirty;			/* @in holds pages to drop */
};

/* Whole 2 MiB blocks of pages kept for the migrations back (spare.c): those then copy
 * into pages that exist instead of fresh ones the kernel must clear first. Only with
 * UFFDIO_MOVE (pages move in and out whole). */
#define HMM_SPARE_BLOCKS	32	/* at most 64 MiB held per mm */

struct hmm_spare {
	struct cmn_mutex lock;		/* protects everything below but fills */
	char *base;			/* HMM_SPARE_BLOCKS x 2 MiB, registered: MOVE target */
	uint64_t full;			/* blocks holding 512 present pages */
	uint64_t busy;			/* blocks a migration or the filler has taken */
	/* the filler thread */
	pthread_cond_t wake;		/* blocks asked for, or stop */
	pthread_t thread;
	bool tried, running, stop, filling;
	bool broken;			/* the kernel refused a fill: no more asked */
	cpu_set_t cpus;			/* where the process may run */
	int cpu_avoided;		/* the filler runs anywhere but there (the asker) */
	unsigned int asked;		/* blocks to fill */
	char *scratch;			/* 2 MiB plain anon: populated, then moved into a block */
	_Atomic uint64_t fills;		/* blocks the filler filled (stats) */
};

/* The second thread of the way back without UFFDIO_MOVE (copier.c): one job at a time,
 * a run of pages cut into pieces, which the caller takes from the front and the thread
 * from the back. */
enum hmm_copier_state { HMM_COPIER_IDLE, HMM_COPIER_RUNNING, HMM_COPIER_OFF };

struct hmm_copier {
	struct cmn_mutex user;		/* the migration using the thread; protects state */
	enum hmm_copier_state state;	/* not started yet, running, or not to be started */
	pthread_t thread;
	cpu_set_t cpus;			/* where the process may run */
	int cpu_avoided;		/* the thread runs anywhere but there (the caller) */
	struct cmn_mutex lock;		/* protects the job below, sleeping, gen, stop */
	pthread_cond_t wake;		/* a job, or stop, for a sleeping thread */
	bool sleeping;
	int uffd;
	uintptr_t dst;
	const char *src;
	size_t len;
	size_t lo, hi;			/* the pieces nobody has taken yet */
	int err;			/* first error of the job */
	uint64_t gen;			/* jobs posted */
	bool stop;
	atomic_uint busy;		/* pieces the thread is copying */
	_Atomic uint64_t pages;		/* pages the thread copied (stats) */
};

struct hmm_mm {
	struct hmm_mm_opts opts;
	int uffd;			/* managed regions are registered here */
	int uffd_stage;			/* the staging "in" areas are registered here */
	int pagemap_fd, kpageflags_fd, maps_fd;
	/* One /proc/self/maps scan at a time: the kernel keeps the file's read position and
	 * the rest of a line once for the descriptor, not per reader (vma.c). */
	struct cmn_mutex maps_lock;
	int mem_fd;			/* /proc/self/mem: the write view of private prot pages */
	uint64_t zero_pfn;		/* 0: PFNs hidden, or no zero page mapped */
	bool has_move;			/* isolation by UFFDIO_MOVE (Linux 6.8+) */
	bool has_wp;			/* ... else by write-protect: regions registered WP */
	bool procmap_query;		/* VMA lookups by PROCMAP_QUERY (Linux 6.11+) */
	int stop_fd;			/* eventfd that stops the handler thread */
	pthread_t thread;
	bool thread_started;
	atomic_bool monitor_busy;	/* between reading uffd messages and handling them */
	struct cmn_mutex lock;		/* protects regions (add/remove) and notifier slots */
	/* calls that hold region pointers outside a fault handler (migrations from setup to
	 * finalize, range walks, exclusive access, ...): a region is freed only once they
	 * are done (hmm_mm_users_drain) */
	atomic_uint users;
	/* regions an mremap took out of the table, freed once nothing can hold them
	 * (hmm_regions_reap); under @lock */
	struct hmm_region *retired;
	atomic_uint nr_retired;
	/* notifiers: readers walk the slots lock-free, counted in @walkers */
	struct hmm_interval_notifier *_Atomic subs[HMM_MAX_NOTIFIERS];
	atomic_uint walkers;
	_Atomic uint64_t seq;
	struct hmm_staging staging[HMM_NR_STAGING];
	struct hmm_spare spare;
	struct hmm_copier copier;
	struct hmm_thrash *thrash;
	/* counters */
	_Atomic uint64_t c_cpu_faults, c_cpu_fault_pages, c_zero_fills, c_cpu_won;
	_Atomic uint64_t c_to_dev, c_to_sys, c_inval, c_unmap, c_remap, c_fork;
	_Atomic uint64_t c_event_waits;
	_Atomic uint64_t c_excl, c_excl_revoked;
};

/* Enter and leave a call that keeps region pointers of @mm (not a fault handler: those
 * count in hmm_handlers_inflight). Sequentially consistent: a caller that then reads a
 * region's dying flag or hmm_fork_pending, and a remover that sets one and then reads
 * @users, cannot both miss each other. */
static inline void hmm_mm_use(struct hmm_mm *mm)
{
	atomic_fetch_add(&mm->users, 1);
}

static inline void hmm_mm_unuse(struct hmm_mm *mm)
{
	atomic_fetch_sub(&mm->users, 1);
}

/* Wait until no call holds region pointers of @mm. */
void hmm_mm_users_drain(struct hmm_mm *mm);

/* Set from fork's prepare handler until the fork returns: no page may move to a device,
 * whose copy the child would not get. */
extern atomic_bool hmm_fork_pending;

/* True if a migration may collect pages of @r: it is not being removed and, for a
 * migration @to_device, the process is not forking. Read inside hmm_mm_use(). */
static inline bool hmm_region_movable(struct hmm_region *r, bool to_device)
{
	return !atomic_load(&r->dying) && !(to_device && atomic_load(&hmm_fork_pending));
}

/* process-wide tables read by fault handlers */
extern struct hmm_region *_Atomic hmm_regions[HMM_MAX_REGIONS];
extern struct hmm_devmem *_Atomic hmm_devmems[HMM_MAX_DEVMEMS];
extern atomic_uint hmm_handlers_inflight;

/* Region covering @addr, or NULL. Signal context safe; hold hmm_handlers_inflight. */
struct hmm_region *hmm_region_find(uintptr_t addr);
/* hmm_region_find() for a walk: also sets *span_end to where the answer stops holding
 * (the region's end, or the next region's start), so pages up to it need no lookup. */
struct hmm_region *hmm_region_find_span(uintptr_t addr, uintptr_t *span_end);
/* State word of @addr in @r. */
static inline _Atomic uint64_t *hmm_region_word(struct hmm_region *r, uintptr_t addr)
{
	return &r->st[(addr - r->start) >> HMM_PAGE_SHIFT];
}

/* spare.c: the locks (at creation, before anything can fail) */
void hmm_spare_init(struct hmm_mm *mm);
/* The spare area itself, once the backend is known: nothing without UFFDIO_MOVE. */
int hmm_spare_map(struct hmm_mm *mm);
/* Stop and join the filler: before the userfaultfd it moves pages with is closed. */
void hmm_spare_stop(struct hmm_mm *mm);
/* Stop the filler, unmap the area, destroy the locks. */
void hmm_spare_fini(struct hmm_mm *mm);
/* Take a spare block that is @full (512 pages to copy into) or empty (a MOVE target);
 * NULL if there is none. */
char *hmm_spare_take(struct hmm_mm *mm, bool full);
/* Give a taken block back, saying whether it now holds 512 pages. */
void hmm_spare_put(struct hmm_mm *mm, char *blk, bool full);
/* A migration back took a full block or found none: have the filler fill one if fewer
 * than a few are ready. */
void hmm_spare_ask(struct hmm_mm *mm);
/* Fills asked for and not done yet. */
unsigned int hmm_spare_pending(struct hmm_mm *mm);
/* mm.c: @len of anonymous memory aligned to 2 MiB, huge pages advised; NULL if none. */
void *hmm_map_aligned(size_t len);

/* Keep helper thread @th off the calling thread's CPU, within @cpus; *@cpu_avoided is the
 * CPU it was last kept off (-1: none yet). */
void hmm_keep_off_caller_cpu(pthread_t th, const cpu_set_t *cpus, int *cpu_avoided);
/* Set up @c (no thread yet: the first large copy starts it). */
void hmm_copier_init(struct hmm_copier *c);
/* Stop and join the thread if it runs. */
void hmm_copier_fini(struct hmm_copier *c);
/* UFFDIO_COPY (without waking) all of [dst, dst + len) of @mm from @src, with the
 * copier thread taking part when the run is long enough. 0 or the first -errno. */
int hmm_copier_copy(struct hmm_mm *mm, uintptr_t dst, const void *src, size_t len);

/* Run the invalidation of @r over @mm's notifiers; retries non-blockable refusals. */
void hmm_notify_invalidate(struct hmm_mm *mm, const struct hmm_notify_range *r);

/* devmem internals */
unsigned int hmm_devmem_id(const struct hmm_devmem *dm);
/* hmm_devmem_alloc() for a caller that writes every page whole before anyone can read
 * it (a migration): not zeroed, counted as overwritten. */
int hmm_devmem_alloc_overwrite(struct hmm_devmem *dm, size_t n, bool chunk, uint64_t *pages);
/* Free from any context (a fault handler): reclaimed at the next allocation. */
void hmm_devmem_free_deferred(struct hmm_devmem *dm, uint64_t page);
int hmm_devmem_copy(struct hmm_devmem *dm, enum hmm_copy_dir dir, void *sys,
		    uint64_t page, size_t npages);

/* Zero-fill the missing page @addr of @mm whose word @pw read @w, a system-memory state,
 * claiming the page for the fill so that no migration collects it meanwhile. Does not
 * wake. 0 (filled, or present meanwhile), -EAGAIN (the word changed: look again), -EBUSY
 * (an unmap/remap event is pending: the access retries after it). */
int hmm_zero_fill_claimed(struct hmm_mm *mm, _Atomic uint64_t *pw, uint64_t w, uintptr_t addr);
/* CPU fault service: bring the granule around @addr of @r back to system memory (or
 * zero-fill a missing page). @blockable: thread context. 0 or -errno. */
int hmm_cpu_fault(struct hmm_mm *mm, struct hmm_region *r, uintptr_t addr, bool blockable,
		  bool wake);
/* Bring device pages of [start, end) in @r back; returns pages brought back. */
long hmm_fault_back_range(struct hmm_mm *mm, struct hmm_region *r, uintptr_t start,
			  uintptr_t end, bool blockable);

/* userfaultfd plumbing (uffd.c) */
int hmm_uffd_open(struct hmm_mm *mm);
void hmm_uffd_close(struct hmm_mm *mm);
/* MISSING registration, and write-protect mode with @wp. */
int hmm_uffd_register(int uffd, uintptr_t start, size_t len, bool wp);
int hmm_uffd_unregister(int uffd, uintptr_t start, size_t len);
/* UFFDIO_MOVE of @len from @src to @dst through @uffd; returns bytes moved or -errno. */
long hmm_uffd_move(int uffd, uintptr_t dst, uintptr_t src, size_t len, bool allow_holes);
/* UFFDIO_COPY of all of [dst, dst + len): goes on where a partial copy stopped, steps over
 * a page already there (it counts as copied). Returns @len, or the bytes copied before a
 * page the kernel refused (the rest is not copied), or -errno if that was the first. */
long hmm_uffd_copy(int uffd, uintptr_t dst, const void *src, size_t len, bool wake);
/* UFFDIO_ZEROPAGE; 0, -EBUSY while an unmap/remap/fork event is pending, or -errno. */
int hmm_uffd_zeropage(int uffd, uintptr_t dst, size_t len, bool wake);
void hmm_uffd_wake(int uffd, uintptr_t start, size_t len);
/* Wait a moment for another thread; the handler thread reads queued messages meanwhile
 * (handled after the one at hand), so that a thread the kernel holds until they are read
 * can go on. */
void hmm_uffd_relax(unsigned int *spins);
/* UFFDIO_WRITEPROTECT of [start, start+len): @protect on, or off (waking with @wake). */
int hmm_uffd_wp(int uffd, uintptr_t start, size_t len, bool protect, bool wake);

/* VMA lookup (vma.c) */
struct hmm_vma {
	uintptr_t start, end;
	bool read, write, shared, special;
};
/* True if PROCMAP_QUERY works on the open /proc/self/maps @fd (the probe). */
bool hmm_vma_query_works(int fd);
/* VMA covering @addr, or the next one above it (@covering false); -ENOENT if none. */
int hmm_vma_find(struct hmm_mm *mm, uintptr_t addr, struct hmm_vma *vma);
/* True if no VMA holds @addr any more. Thread context. */
bool hmm_vma_gone(struct hmm_mm *mm, uintptr_t addr);
/* Read pagemap words for [start, start + n pages). 0 or -errno. */
int hmm_pagemap_read(struct hmm_mm *mm, uintptr_t start, size_t n, uint64_t *out);
/* Bits of a pagemap word (Documentation/admin-guide/mm/pagemap.rst in Linux). */
#define HMM_PM_PRESENT		(1ull << 63)
#define HMM_PM_SWAP		(1ull << 62)
#define HMM_PM_FILE		(1ull << 61)
#define HMM_PM_EXCLUSIVE	(1ull << 56)
#define HMM_PM_PFN_MASK		((1ull << 55) - 1)
/* True if the present page with pagemap word @pm is part of a THP. */
bool hmm_pfn_is_thp(struct hmm_mm *mm, uint64_t pm);

/* mprotect backend (mprotect.c) */
static inline bool hmm_mm_prot(const struct hmm_mm *mm)
{
	return mm->opts.backend == HMM_BACKEND_MPROTECT;
}
/* Install the SIGSEGV handler (once; again if someone replaced it). 0 or -errno. */
int hmm_prot_install(void);
/* Write @len bytes from @src to the managed page(s) at @dst of prot region @r through its
 * write view (alias or /proc/self/mem), whatever the protection. Signal context safe. */
int hmm_prot_write(struct hmm_mm *mm, struct hmm_region *r, uintptr_t dst, const void *src,
		   size_t len);
/* mprotect() of [start, start+len): PROT_NONE (@access false) or read-write. 0 or -errno:
 * the kernel refuses (ENOMEM) when the change would split a VMA at vm.max_map_count. */
int hmm_prot_set(uintptr_t start, size_t len, bool access);
/* ... or read-only: pages collected for a device (writes wait, reads proceed). */
int hmm_prot_readonly(uintptr_t start, size_t len);
/* The protection @prot (PROT_NONE, PROT_READ or PROT_READ | PROT_WRITE) for the @n <= 512
 * pages at @start: the run at once, and where the kernel refuses that, page by page, so
 * that each page's protection is known afterwards (a refused run may have changed part
 * of itself). Sets bit k of @failed (cleared first) for each page left without it;
 * returns how many those are. Signal context safe. */
size_t hmm_prot_pages(uintptr_t start, size_t n, int prot, uint64_t *failed);

/* True if the PROT_NONE of the page at @a is the library's: a device page of the
 * mprotect backend (or one on its way), or a device-exclusive page of any backend. */
static inline bool hmm_page_prot_ours(struct hmm_mm *mm, uintptr_t a)
{
	struct hmm_region *r = hmm_region_find(a);
	unsigned int st;

	if (!r || r->mm != mm)
		return false;
	st = hmm_ps_state(atomic_load(hmm_region_word(r, a)));
	return st == HMM_PS_EXCLUSIVE || (r->prot && st != HMM_PS_SYSTEM);
}

/* device-exclusive (exclusive.c) */
/* Give the CPU back the exclusive page at @a of @r (a CPU access, a range fault, fork).
 * @blockable: thread context. Signal context safe otherwise. 0, or -errno when the kernel
 * refuses to restore the access: the page stays exclusive. */
int hmm_exclusive_revoke(struct hmm_mm *mm, struct hmm_region *r, uintptr_t a,
			 bool blockable);
/* ... every exclusive page of [start, end) in @r; returns how many. */
long hmm_exclusive_revoke_range(struct hmm_mm *mm, struct hmm_region *r, uintptr_t start,
				uintptr_t end);

/* Time source of @mm. */
static inline uint64_t hmm_mm_now(struct hmm_mm *mm)
{
	return mm->opts.clock_ns ? mm->opts.clock_ns() : cmn_now_ns();
}

/* True while @mm's userfaultfd has events queued or its handler thread handles messages
 * it read. Signal safe. */
bool hmm_mm_events_pending(struct hmm_mm *mm);
/* An mm whose events are pending, or NULL. Signal safe. */
struct hmm_mm *hmm_events_pending(void);
/* SIGBUS backend: zero-fill the missing page @addr of a VMA registered with an mm's
 * userfaultfd but in none of its regions (an mremap grew the mapping, or moved pages no
 * region could take), as the handler thread fills such a page for the thread backend.
 * True if the access may retry. Signal safe. */
bool hmm_sigbus_fill_unmanaged(uintptr_t addr);

/* Race windows a test may widen (test_hmm_race): each is a point where another thread
 * may change the page, so that the code after it must re-check what it saw before. */
enum hmm_race_window {
	HMM_RACE_ZERO_FILL,	/* a CPU fault found its page in system memory, before the fill */
	HMM_RACE_COPIER_PIECE,	/* a migration back is about to take a piece of its copy
				 * (copier.c), which the copier thread may take first */
	HMM_RACE_REMAP,		/* a REMAP event has a region at the new address, the
				 * device pages are not moved there yet */
	HMM_RACE_MONITOR_WAKE,	/* the handler thread has seen messages, not read them */
	HMM_RACE_PROT_DROP,	/* a CLEAR or UNMAP claimed a device or exclusive page; its
				 * access (mprotect backend, exclusive) is not back yet */
	HMM_RACE_FAULT_WAIT,	/* a CPU fault waits for its page, collected or on its way */
};
/* Test only: called at each window when set (NULL in normal use: one relaxed load). It
 * runs in the fault handler's context, a signal handler included. */
extern void (*_Atomic hmm_race_hook)(enum hmm_race_window win, uintptr_t addr);
static inline void hmm_race_window(enum hmm_race_window win, uintptr_t addr)
{
	void (*fn)(enum hmm_race_window, uintptr_t) =
		atomic_load_explicit(&hmm_race_hook, memory_order_relaxed);

	if (fn)
		fn(win, addr);
}

/* Kernel calls a test may make fail (hmm_fail_hook), as the kernel makes them fail at
 * vm.max_map_count or under memory pressure. */
enum hmm_fail_call {
	HMM_FAIL_PROT_READ,	/* hmm_prot_readonly(): isolation for a migration */
	HMM_FAIL_PROT_NONE,	/* hmm_prot_set() without access: pages going to a device */
	HMM_FAIL_PROT_RW,	/* hmm_prot_set() read-write: pages coming back */
	HMM_FAIL_UFFD_COPY,	/* one UFFDIO_COPY of hmm_uffd_copy() */
};
/* Test only: called before each such call when set (NULL in normal use: one relaxed
 * load). Returns 0 to let the call run, -errno to fail it before it changes anything, or
 * (HMM_FAIL_UFFD_COPY) a byte count below @len to end the ioctl there, as the kernel's
 * copy ends when something stops it partway. Runs in the caller's context, a signal
 * handler included. */
extern long (*_Atomic hmm_fail_hook)(enum hmm_fail_call call, uintptr_t addr, size_t len);
static inline long hmm_fail_check(enum hmm_fail_call call, uintptr_t addr, size_t len)
{
	long (*fn)(enum hmm_fail_call, uintptr_t, size_t) =
		atomic_load_explicit(&hmm_fail_hook, memory_order_relaxed);

	return fn ? fn(call, addr, len) : 0;
}

/* Free the regions an mremap retired when nothing can hold them any more (mm.c). Not
 * from a fault handler or the handler thread. */
void hmm_regions_reap(struct hmm_mm *mm);

/* Thread yield usable in signal context. */
void hmm_relax(unsigned int *spins);

#endif
