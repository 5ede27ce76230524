/* SPDX-License-Identifier: MIT */
/* iommu_model/iommu_internal.h - internals shared by the iommu_model files. */
#ifndef VGPU_IOMMU_MODEL_INTERNAL_H
#define VGPU_IOMMU_MODEL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include <vgpu/iommu.h>

#include "common/compiler.h"
#include "common/lock.h"
#include "iommu_model/iommu.h"

/* Translated ("physical") addresses: memobj id in bits 51:40, offset below. Id 0 is never
 * used, so a zero address is never valid. */
#define IOMMU_PA_ID_SHIFT	40
#define IOMMU_MAX_MEMOBJS	4096
#define IOMMU_MEMOBJ_MAX_SIZE	(1ull << IOMMU_PA_ID_SHIFT)
#define iommu_pa_id(pa)		((uint32_t)((pa) >> IOMMU_PA_ID_SHIFT))
#define iommu_pa_off(pa)	((pa) & (IOMMU_MEMOBJ_MAX_SIZE - 1))

#define IOMMU_IOPTE_PRESENT(pte)	((pte) & (VGPU_IOPTE_R | VGPU_IOPTE_W))
#define IOMMU_IOPTE_PERM(pte)		((unsigned int)((pte) & (VGPU_IOPTE_R | VGPU_IOPTE_W)))

/* ---- translation caches (IOTLB and ATC): seqlocked set-associative entries ---------- */

/* Size classes: 0 = 4K, 1 = 2M, 2 = 1G. */
#define IOMMU_XC_CLASSES		3
#define IOMMU_XC_CLASS_MASK_ALL	7u
#define IOMMU_XC_KEY_VALID		(1ull << 0)
#define IOMMU_XC_KEY_PERM_SHIFT	1	/* bits 1-2: R, W */
#define IOMMU_XC_KEY_CLASS_SHIFT	3	/* bits 3-4 */

/* 32 bytes, two to a cache line: the IOTLB has to stay small in the CPU's own caches. */
struct iommu_xc_entry {
	_Atomic uint32_t seq;		/* odd while being written */
	uint32_t pad;
	_Atomic uint64_t key;		/* page base | class | perm | valid */
	_Atomic uint64_t ctx;		/* domain id << 32 | pasid */
	_Atomic uint64_t pa;		/* translated page base (memobj id | offset) */
};

struct iommu_xcache {
	struct iommu_xc_entry *e;
	unsigned int set_bits;
	unsigned int ways;
};

/* A found translation. A cache hit knows only @pa; @mo and @ptep are filled by walks
 * and by the per-thread front (NULL: look them up when needed). */
struct iommu_xc_hit {
	uint64_t base, size, pa;
	struct iommu_memobj *mo;
	_Atomic uint64_t *ptep;		/* stage-2 leaf entry, for dirty bits */
	unsigned int perm;
	unsigned int cls;
};

int iommu_xcache_init(struct iommu *mmu, struct iommu_xcache *c, unsigned int sets,
		      unsigned int ways);
void iommu_xcache_fini(struct iommu *mmu, struct iommu_xcache *c);
/* Insert @h; then, if *@inval_seq moved away from @seq0, take it back out again. */
void iommu_xcache_fill(struct iommu_xcache *c, uint64_t ctx, const struct iommu_xc_hit *h,
		       _Atomic uint64_t *inval_seq, uint64_t seq0);
/* Which entries an invalidation names, by their context (domain id << 32 | pasid). */
enum iommu_xc_match {
	IOMMU_XC_MATCH_CTX,		/* exactly @ctx */
	IOMMU_XC_MATCH_DID,		/* @ctx's domain, any PASID */
	IOMMU_XC_MATCH_PASID,		/* @ctx's PASID, any domain (ATC: PASID-selective request) */
	IOMMU_XC_MATCH_ALL,		/* everything (global) */
};

/* Drop the entries @match names that overlap [iova, iova + len); len == 0 means every
 * address. @classes: the leaf size classes that may be cached for @ctx
 * (IOMMU_XC_CLASS_MASK_ALL if unknown). */
void iommu_xcache_inval(struct iommu_xcache *c, uint64_t ctx, enum iommu_xc_match match,
			uint64_t iova, uint64_t len, unsigned int classes);

static inline uint64_t iommu_xc_class_size(unsigned int cls)
{
	return 1ull << (12 + 9 * cls);
}

/* The lookup is inline: it is the translation fast path. Lock-free, never writes. */
static inline struct iommu_xc_entry *iommu_xc_set(const struct iommu_xcache *c, uint64_t ctx,
						  uint64_t vpn, unsigned int cls)
{
	/* One multiply: did, pasid, class and page number land in distinct bit ranges. */
	uint64_t h = (vpn ^ (ctx >> 32) << 36 ^ (ctx & 0xfffff) << 44 ^ (uint64_t)cls << 62) *
		     0x9e3779b97f4a7c15ull;
	size_t set = c->set_bits ? (size_t)(h >> (64 - c->set_bits)) : 0;

	return &c->e[set * c->ways];
}

/* Read one entry consistently; true if it holds the page at @base of class @cls in @ctx. */
static inline bool iommu_xc_read(const struct iommu_xc_entry *e, uint64_t base,
				 unsigned int cls, uint64_t ctx, struct iommu_xc_hit *out)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);
	uint64_t key, pa;

	if (s & 1)
		return false;
	key = atomic_load_explicit(&e->key, memory_order_relaxed);
	if ((key & ~0xfffull) != base || !(key & IOMMU_XC_KEY_VALID) ||
	    ((key >> IOMMU_XC_KEY_CLASS_SHIFT) & 3) != cls ||
	    atomic_load_explicit(&e->ctx, memory_order_relaxed) != ctx)
		return false;
	/* An acquire load keeps the sequence re-check below after it (a plain load on x86;
	 * no fence, which ThreadSanitizer could not follow). */
	pa = atomic_load_explicit(&e->pa, memory_order_acquire);
	if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s)
		return false;
	out->base = base;
	out->size = iommu_xc_class_size(cls);
	out->pa = pa;
	out->mo = NULL;
	out->ptep = NULL;
	out->perm = (unsigned int)(key >> IOMMU_XC_KEY_PERM_SHIFT) & 3;
	out->cls = cls;
	return true;
}

/* Ways of @set whose key names page @base of class @cls (valid, any permission): a bit
 * per way. The keys are compared all at once, with no branch per way: which way holds a
 * page is random, and a branch on it would be mispredicted on most lookups. */
static inline unsigned int iommu_xc_set_match(const struct iommu_xc_entry *set,
					      unsigned int ways, uint64_t base, unsigned int cls)
{
	const uint64_t want = base | (uint64_t)cls << IOMMU_XC_KEY_CLASS_SHIFT | IOMMU_XC_KEY_VALID;
	const uint64_t mask = ~((uint64_t)3 << IOMMU_XC_KEY_PERM_SHIFT);
	unsigned int m = 0;

	for (unsigned int w = 0; w < ways; w++)
		m |= (unsigned int)((atomic_load_explicit(&set[w].key, memory_order_relaxed) &
				     mask) == want) << w;
	return m;
}

static inline bool iommu_xcache_lookup(const struct iommu_xcache *c, uint64_t ctx,
				       uint64_t iova, unsigned int classes,
				       struct iommu_xc_hit *out)
{
	for (unsigned int cls = 0; cls < IOMMU_XC_CLASSES; cls++) {
		unsigned int shift = 12 + 9 * cls;
		uint64_t base = iova >> shift << shift;
		const struct iommu_xc_entry *set;
		unsigned int m;

		if (!(classes & (1u << cls)))
			continue;
		set = iommu_xc_set(c, ctx, iova >> shift, cls);
		/* The unlocked key scan only picks candidates; each is then read under its
		 * sequence, which checks the key again. */
		for (m = iommu_xc_set_match(set, c->ways, base, cls); m; m &= m - 1)
			if (iommu_xc_read(&set[__builtin_ctz(m)], base, cls, ctx, out))
				return true;
	}
	return false;
}

static inline unsigned int iommu_xc_class_of(uint64_t size)
{
	return size == IOMMU_PAGE_1G ? 2 : size == IOMMU_PAGE_2M ? 1 : 0;
}

static inline uint64_t iommu_xc_ctx(uint32_t did, uint32_t pasid)
{
	return (uint64_t)did << 32 | pasid;
}

/* ---- access sections (sync.c) ------------------------------------------------------- */

/* Wait until every access section that began before this call (in other threads) ended. */
void iommu_sync_wait(void);
/* Small per-thread index, for counter shards. */
unsigned int iommu_thread_index(void);
extern __thread unsigned int iommu_tls_index;	/* index + 1, 0 until first use */

static inline unsigned int iommu_thread_index_fast(void)
{
	unsigned int i = iommu_tls_index;

	return cmn_likely(i) ? i - 1 : iommu_thread_index();
}

/* What this thread waited in that its client controls (iommu_thread_waits()): page
 * responses (pri.c iommu_pri_fault()) and SVA copies (xlate.c sva_copy()). */
extern __thread uint64_t iommu_tls_pri_waits, iommu_tls_sva_copies;

/* ---- the unit ----------------------------------------------------------------------- */

#define IOMMU_NR_SHARDS		16
#define IOMMU_FAULT_LOG_LEN	64
#define IOMMU_PRG_MAX		512

struct iommu_shard {
	_Atomic uint64_t hits, misses, atc_hits, atc_misses;
} __attribute__((aligned(VGPU_CACHELINE)));

struct iommu_memobj {
	struct iommu *mmu;
	uint32_t id;
	void *base;
	size_t size;
	bool owns_mapping;		/* registered from an fd: we munmap */
	_Atomic unsigned int nr_maps;	/* areas (live or in a flush queue) using it */
};

struct iommu_pasid_slot {
	_Atomic uint32_t pasid;		/* 0: free */
	_Atomic(struct iommu_domain *) d;
};

struct iommu_ats_req {
	bool busy;		/* issued, not completed */
	bool pending;		/* not yet processed by the device */
	uint8_t match;		/* enum iommu_xc_match: what the request names */
	uint64_t ctx;		/* domain id << 32 | pasid */
	uint32_t pasid;
	uint32_t gen;		/* bumped at completion: tells ITag reuses apart */
	uint64_t iova, len;	/* len 0: everything */
};

struct iommu_ats {
	struct cmn_mutex lock;		/* protects the fields below, not the cache */
	pthread_cond_t cond;		/* completions and freed itags */
	bool enabled;
	bool polled;
	unsigned int outstanding;
	struct iommu_ats_req req[IOMMU_ATS_MAX_ITAGS];
	_Atomic bool on;		/* lock-free view of enabled for the DMA path */
	_Atomic uint64_t inval_seq;	/* bumped by every invalidation the device processes */
	struct iommu_xcache atc;		/* the device-side cache */
};

enum iommu_prg_state {
	IOMMU_PRG_STATE_FREE, IOMMU_PRG_STATE_OUTSTANDING, IOMMU_PRG_STATE_ANSWERED,
};

struct iommu_pri {
	struct cmn_mutex lock;		/* protects everything here */
	pthread_cond_t cond;
	bool enabled, stopped;
	unsigned int max, outstanding, next;
	unsigned int outstanding_max;	/* high-water mark since enable */
	unsigned int calls;		/* handler calls running (disable waits for them) */
	uint64_t requests, waited, timeouts;
	iommu_pri_handler_fn fn;
	void *ctx;
	uint8_t state[IOMMU_PRG_MAX];	/* enum iommu_prg_state */
	uint8_t code[IOMMU_PRG_MAX];
	bool abandoned[IOMMU_PRG_MAX];	/* waiter gave up: free on response */
};

struct iommu_fn {
	_Atomic(struct iommu_domain *) domain;	/* RID domain; written under mmu->lock */
	struct iommu_pasid_slot pasids[IOMMU_MAX_PASIDS_PER_FUNC];
	struct cmn_mutex log_lock;	/* fault log: protects log, log_head, log_count, dropped */
	struct iommu_fault_rec log[IOMMU_FAULT_LOG_LEN];
	unsigned int log_head, log_count;
	uint64_t dropped;
	struct iommu_ats ats;
	struct iommu_pri pri;
};

struct iommu {
	struct iommu_config cfg;
	struct cmn_mutex lock;		/* domains list, memobj table, attachments, next ids */
	struct iommu_domain *domains;
	_Atomic(struct iommu_memobj *) memobjs[IOMMU_MAX_MEMOBJS];
	struct iommu_xcache iotlb;
	_Atomic unsigned int fail_nth;
	_Atomic uint64_t allocs_live, pt_pages;
	_Atomic uint64_t iotlb_inv, ats_inv_requests, page_requests, faults;
	struct iommu_shard shard[IOMMU_NR_SHARDS];
	struct iommu_fn fn[IOMMU_MAX_FUNCS];
};

/* ---- domains ------------------------------------------------------------------------ */

/* A domain's tag in the per-thread front of the IOTLB sits above the 36-bit page number of
 * a 48-bit IOVA. Tags are never reused (a front entry of a destroyed domain must never
 * answer for another), so a domain created after the 2^28 - 2 tags ran out gets
 * IOMMU_FRONT_TAG_NONE and is translated without the front. */
#define IOMMU_FRONT_TAG_SHIFT	(IOMMU_IOVA_BITS - 12)
#define IOMMU_FRONT_TAG_NONE	(~0ull)

struct iommu_area {
	uint64_t iova, length;
	struct iommu_memobj *mo;
	uint64_t offset;
	unsigned int prot;
	uint32_t prio;			/* treap (area.c) */
	struct iommu_area *left, *right;
};

struct iommu_domain {
	struct iommu *mmu;
	struct iommu_domain *next;	/* mmu->domains, under mmu->lock */
	uint32_t id;
	enum iommu_domain_type type;
	unsigned int flags;
	unsigned int attach_count;	/* RID + PASID attachments, under mmu->lock */
	_Atomic unsigned int nr_children; /* nested domains over it; changed under mmu->lock */
	_Atomic uint64_t inval_seq;	/* odd while an invalidation runs (iommu_inval_begin) */
	_Atomic unsigned int classes;	/* leaf size classes ever used (lookup shortcut) */
	_Atomic bool dirty_tracking;
	uint64_t front_tag;		/* its key bits in the per-thread front (xlate.c) */

	/* PAGING */
	struct cmn_mutex lock;		/* table writes, areas, ranges, flush queue */
	_Atomic uint64_t *root;		/* level-3 table */
	unsigned int iova_bits;
	uint64_t aperture_last;
	struct iommu_area *areas;	/* treap root, ordered by iova, non-overlapping */
	size_t nr_areas;
	uint32_t rng;			/* treap priorities */
	struct iommu_iova_range *allowed, *reserved;
	size_t nr_allowed, nr_reserved;
	struct iommu_area *fq;		/* lazy: copies of unmapped areas, not yet flushed */
	size_t nr_fq, cap_fq;
	uint64_t alloc_hint;

	/* NESTED */
	struct iommu_domain *parent;
	uint64_t s1_root;

	/* SVA: the process, as a pidfd (its number alone could be another's later) */
	pid_t pid;
	int pidfd;			/* -1 for other types */
};

/* core.c */
/* True if fail-nth says this allocation fails (every allocation path asks once). */
bool iommu_alloc_should_fail(struct iommu *mmu);
void *iommu_zalloc(struct iommu *mmu, size_t size);
void *iommu_realloc_array(struct iommu *mmu, void *p, size_t n, size_t size);
void iommu_free(struct iommu *mmu, void *p);
/* Unregister by id (the command interface), checked and cleared under mmu->lock. */
int iommu_memobj_unregister_id(struct iommu *mmu, uint32_t id);
/* Owner-only increments: a plain load + store is enough when each thread has its own
 * shard, and costs far less than a locked add on the translation fast path. Threads
 * that share a shard (more than IOMMU_NR_SHARDS) may lose a count. */
static inline void iommu_shard_inc(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static inline void iommu_count_hit(struct iommu *mmu)
{
	iommu_shard_inc(&mmu->shard[iommu_thread_index_fast() % IOMMU_NR_SHARDS].hits);
}

static inline void iommu_count_miss(struct iommu *mmu)
{
	iommu_shard_inc(&mmu->shard[iommu_thread_index_fast() % IOMMU_NR_SHARDS].misses);
}

void iommu_count_atc(struct iommu *mmu, bool hit);
static inline struct iommu_memobj *iommu_memobj_of_pa(struct iommu *mmu, uint64_t pa)
{
	uint32_t id = iommu_pa_id(pa);

	return id < IOMMU_MAX_MEMOBJS ?
		atomic_load_explicit(&mmu->memobjs[id], memory_order_acquire) : NULL;
}

/* pgtable.c: host-owned tables; table writes under d->lock. */
_Atomic uint64_t *iommu_pt_alloc(struct iommu *mmu);
void iommu_pt_free_all(struct iommu *mmu, _Atomic uint64_t *root, unsigned int level);
/* Walk to the leaf for @iova. 0 with *pte, *level, *ptep; -EFAULT if not present. */
int iommu_pt_walk(_Atomic uint64_t *root, uint64_t iova, uint64_t *pte, unsigned int *level,
		  _Atomic uint64_t **ptep);
/* Install leaves mapping [iova, iova + len) -> pa with @prot. On -ENOMEM, *done = bytes
 * installed (the caller clears them). */
int iommu_pt_map(struct iommu_domain *d, uint64_t iova, uint64_t pa, uint64_t len,
		 unsigned int prot, uint64_t *done);
/* Clear the leaves of [iova, iova + len), all installed by one iommu_pt_map. */
void iommu_pt_unmap(struct iommu_domain *d, uint64_t iova, uint64_t len);

/* iova.c: under d->lock */
int iommu_iova_check_fixed(struct iommu_domain *d, uint64_t iova, uint64_t len);
int iommu_iova_alloc(struct iommu_domain *d, uint64_t len, uint64_t *iova);

/* area.c: under d->lock */
/* First area that ends at or after @iova, or NULL. */
struct iommu_area *iommu_area_first_from(const struct iommu_domain *d, uint64_t iova);
struct iommu_area *iommu_area_next(const struct iommu_domain *d, const struct iommu_area *a);
void iommu_area_insert(struct iommu_domain *d, struct iommu_area *a);
void iommu_area_remove(struct iommu_domain *d, struct iommu_area *a);
bool iommu_fq_overlaps(const struct iommu_domain *d, uint64_t iova, uint64_t last);

/* domain.c */
/* Bracket an invalidation of @d's cached translations: the count is odd while it runs
 * and moves twice, so a cache filled from a state read before either bump (or while
 * odd) is recognised as possibly stale. */
static inline void iommu_inval_begin(struct iommu_domain *d)
{
	atomic_fetch_add_explicit(&d->inval_seq, 1, memory_order_seq_cst);
}

static inline void iommu_inval_end(struct iommu_domain *d)
{
	atomic_fetch_add_explicit(&d->inval_seq, 1, memory_order_seq_cst);
}

void iommu_domain_inval(struct iommu_domain *d, uint64_t iova, uint64_t len);
void iommu_drain_fq_locked(struct iommu_domain *d);
/* Destroy by id (the command interface): lookup and removal are one step under mmu->lock.
 * -ENOENT: no such id (or another destroy took it); -EBUSY: still in use. */
int iommu_domain_free_id(struct iommu *mmu, uint32_t id);

/* xlate.c */
int iommu_xlate(struct iommu_domain *d, uint32_t pasid, uint64_t iova, size_t len,
		unsigned int access, struct iommu_xlate *out, unsigned int *reason);

/* ats.c */
void iommu_ats_init(struct iommu_fn *fn);
void iommu_ats_fini(struct iommu *mmu, struct iommu_fn *fn);
/* Invalidate, in every function's ATC, what may cache @d (range; len 0 = all). Waits. */
void iommu_ats_inval_domain(struct iommu *mmu, struct iommu_domain *d, uint64_t iova,
			    uint64_t len);
void iommu_ats_flush_fn(struct iommu *mmu, unsigned int rid);
/* ATC entries carry the domain id as well as the PASID: after a replace, translations of
 * the old domain can never answer a lookup made for the new one. */
static inline uint64_t iommu_atc_ctx(const struct iommu_domain *d, uint32_t pasid)
{
	return iommu_xc_ctx(d->id, pasid);
}
int iommu_atc_translate(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			struct iommu_domain *d, uint64_t iova, size_t len, unsigned int access,
			struct iommu_xlate *out, unsigned int *reason);

/* sva.c */
/* SVA domain @d follows the process @o names (its pidfd, or one opened on its pid now). */
int iommu_sva_init(struct iommu_domain *d, const struct iommu_domain_opts *o);
/* Let go of @d's process (its pidfd); nothing for other domain types. */
void iommu_sva_fini(struct iommu_domain *d);
/* Whether @d's process has not exited: false from its exit on, whoever has its pid. */
bool iommu_sva_alive(const struct iommu_domain *d);

/* pri.c (also the helpers shared with ats.c) */
void iommu_cond_init(pthread_cond_t *c);
int iommu_cond_wait_until(pthread_cond_t *c, struct cmn_mutex *mx, uint64_t deadline);
void iommu_pri_init(struct iommu_fn *fn);
void iommu_pri_fini(struct iommu_fn *fn);
void iommu_fault_log(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		     unsigned int access, unsigned int reason);
/* Raise a page request for a DMA fault and wait: 0 if answered Success. */
int iommu_pri_fault(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		    unsigned int access);

#endif
