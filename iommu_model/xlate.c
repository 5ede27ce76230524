// SPDX-License-Identifier: MIT
/* Translation: IOTLB lookup, page walks (host tables, and function-owned stage-1 tables
 * read through stage-2), dirty bits, and the DMA helpers that devices use. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/bitops.h"
#include "iommu_model/iommu_internal.h"

static inline struct iommu_memobj *hit_memobj(struct iommu *mmu, const struct iommu_xc_hit *h)
{
	struct iommu_memobj *mo = h->mo ? h->mo : iommu_memobj_of_pa(mmu, h->pa);

	VGPU_ASSERT(mo != NULL);	/* mapped memobjs cannot be unregistered */
	return mo;
}

static void xlate_from_hit(struct iommu *mmu, const struct iommu_xc_hit *h, uint64_t iova,
			   size_t len, struct iommu_xlate *out)
{
	uint64_t in = iova - h->base;
	struct iommu_memobj *mo = hit_memobj(mmu, h);

	out->offset = iommu_pa_off(h->pa) + in;
	out->host = (uint8_t *)mo->base + out->offset;
	out->len = (size_t)cmn_min((uint64_t)len, h->size - in);
	out->memobj = mo;
	out->perm = h->perm;
	out->page_size = h->size;
}

static int walk_nested(struct iommu_domain *c, uint64_t iova, unsigned int access,
		       struct iommu_xc_hit *h, unsigned int *reason);

/* Writes mark the stage-2 leaf dirty while its domain tracks dirty pages. Cache hits do
 * not carry the leaf's address: while tracking, a write re-walks to find it. */
static void xlate_mark_dirty(struct iommu_domain *d, const struct iommu_xc_hit *h, uint64_t iova,
			     unsigned int access)
{
	struct iommu_domain *s2 = d->type == IOMMU_DOMAIN_NESTED ? d->parent : d;
	_Atomic uint64_t *ptep = h->ptep;

	if (cmn_likely(!(access & IOMMU_WRITE) ||
			!atomic_load_explicit(&s2->dirty_tracking, memory_order_relaxed)))
		return;
	if (!ptep) {
		struct iommu_xc_hit w;
		unsigned int reason, level;
		uint64_t pte;

		if (d->type == IOMMU_DOMAIN_NESTED) {
			/* Its stage-2 translation marks the leaf itself on the way. */
			walk_nested(d, iova, access, &w, &reason);
			return;
		} else if (iommu_pt_walk(d->root, iova, &pte, &level, &ptep)) {
			return;	/* unmapped meanwhile: nothing to mark */
		}
	}
	if (!(atomic_load_explicit(ptep, memory_order_relaxed) & VGPU_IOPTE_D))
		atomic_fetch_or_explicit(ptep, VGPU_IOPTE_D, memory_order_relaxed);
}

/* Walk a host-owned table. */
static int walk_paging(struct iommu_domain *d, uint64_t iova, struct iommu_xc_hit *h,
		       unsigned int *reason)
{
	uint64_t pte, size;
	unsigned int level;
	_Atomic uint64_t *ptep;
	struct iommu_memobj *mo;

	if (iova > d->aperture_last || iommu_pt_walk(d->root, iova, &pte, &level, &ptep)) {
		*reason = IOMMU_FAULT_UNMAPPED;
		return -EFAULT;
	}
	size = 1ull << VGPU_IOPT_SHIFT(level);
	h->base = cmn_align_down(iova, size);
	h->size = size;
	h->cls = level;
	h->pa = pte & VGPU_IOPTE_ADDR_MASK & ~(size - 1);
	h->perm = IOMMU_IOPTE_PERM(pte);
	h->ptep = ptep;
	h->mo = NULL;
	mo = iommu_memobj_of_pa(d->mmu, h->pa);
	VGPU_ASSERT(mo != NULL);	/* mapped memobjs cannot be unregistered */
	h->mo = mo;
	return 0;
}

static int xlate_paging(struct iommu_domain *d, uint64_t iova, unsigned int access,
			struct iommu_xc_hit *h, unsigned int *reason);

/* Read one stage-1 entry at stage-2 address @ipa. */
static int s1_read_pte(struct iommu_domain *s2, uint64_t ipa, uint64_t *pte)
{
	struct iommu_xc_hit h;
	unsigned int reason;

	if (xlate_paging(s2, ipa, IOMMU_READ, &h, &reason))
		return -EFAULT;
	/* The function may be rewriting its table right now: one atomic 8-byte load. */
	*pte = __atomic_load_n((uint64_t *)((uint8_t *)hit_memobj(s2->mmu, &h)->base +
					    iommu_pa_off(h.pa) + (ipa - h.base)),
			       __ATOMIC_ACQUIRE);
	return 0;
}

static bool s1_pte_malformed(uint64_t pte, unsigned int level, bool leaf)
{
	uint64_t size = 1ull << VGPU_IOPT_SHIFT(level);

	if (pte & ~(VGPU_IOPTE_ADDR_MASK | VGPU_IOPTE_FLAGS_MASK))
		return true;
	if ((pte & VGPU_IOPTE_PS) && (level == 0 || level == VGPU_IOPT_LEVELS - 1))
		return true;
	return leaf && ((pte & VGPU_IOPTE_ADDR_MASK) & (size - 1));
}

/* Walk the function's stage-1 table (through stage-2) to an IPA. */
static int walk_s1(struct iommu_domain *c, uint64_t iova, uint64_t *ipa, uint64_t *size,
		   unsigned int *perm, unsigned int *reason)
{
	uint64_t table = c->s1_root;

	if (iova >> IOMMU_IOVA_BITS) {
		*reason = IOMMU_FAULT_UNMAPPED;
		return -EFAULT;
	}
	for (unsigned int level = VGPU_IOPT_LEVELS - 1;; level--) {
		unsigned int idx = (unsigned int)(iova >> VGPU_IOPT_SHIFT(level)) & 511;
		uint64_t pte;
		bool leaf;

		if (s1_read_pte(c->parent, table + idx * 8ull, &pte)) {
			*reason = IOMMU_FAULT_STAGE1;
			return -EFAULT;
		}
		if (!IOMMU_IOPTE_PRESENT(pte)) {
			*reason = IOMMU_FAULT_UNMAPPED;
			return -EFAULT;
		}
		leaf = level == 0 || (pte & VGPU_IOPTE_PS);
		if (s1_pte_malformed(pte, level, leaf)) {
			*reason = IOMMU_FAULT_STAGE1;
			return -EFAULT;
		}
		if (!leaf) {
			table = pte & VGPU_IOPTE_ADDR_MASK;
			continue;
		}
		*size = 1ull << VGPU_IOPT_SHIFT(level);
		*ipa = (pte & VGPU_IOPTE_ADDR_MASK) | (iova & (*size - 1));
		*perm = IOMMU_IOPTE_PERM(pte);
		return 0;
	}
}

/* Nested: stage-1 then stage-2; the cached result covers the smaller of the two leaves. */
static int walk_nested(struct iommu_domain *c, uint64_t iova, unsigned int access,
		       struct iommu_xc_hit *h, unsigned int *reason)
{
	uint64_t ipa, s1_size, size;
	unsigned int s1_perm;
	struct iommu_xc_hit s2;
	int ret;

	ret = walk_s1(c, iova, &ipa, &s1_size, &s1_perm, reason);
	if (ret)
		return ret;
	if ((access & s1_perm) != (access & (IOMMU_READ | IOMMU_WRITE))) {
		*reason = IOMMU_FAULT_PERM;
		return -EACCES;
	}
	ret = xlate_paging(c->parent, ipa, access, &s2, reason);
	if (ret)
		return ret;
	size = cmn_min(s1_size, s2.size);
	h->base = cmn_align_down(iova, size);
	h->size = size;
	h->cls = iommu_xc_class_of(size);
	h->pa = s2.pa + (cmn_align_down(ipa, size) - s2.base);
	h->mo = s2.mo;
	h->perm = s1_perm & s2.perm;
	h->ptep = s2.ptep;
	return 0;
}

static int check_perm(const struct iommu_xc_hit *h, unsigned int access, unsigned int *reason)
{
	if ((h->perm & access & (IOMMU_READ | IOMMU_WRITE)) !=
	    (access & (IOMMU_READ | IOMMU_WRITE))) {
		*reason = IOMMU_FAULT_PERM;
		return -EACCES;
	}
	return 0;
}

/* The per-thread front of the IOTLB: a set-associative cache of recent translations,
 * private to the thread, so a hit is a few loads from memory no other thread writes. An
 * entry is valid only while its domain's invalidation count still has the (even) value
 * read before the translation it holds was looked up, so every invalidation of the domain
 * drops them all at once, in every thread, for free. It holds 2,048 translations, twice
 * the default shared array, so that a DMA working set of hundreds of pages scattered over a
 * large domain stays in it with few conflicts, while a walk for the same pages would
 * touch one page-table line per page and make four dependent loads. */
#define UTLB_SETS 512u
#define UTLB_WAYS 4u

struct utlb_entry {
	uint64_t key;			/* the 4 KiB page looked up | low 12 bits of did */
	uint32_t did;			/* 0: empty; domain ids are never reused */
	uint8_t perm, cls;		/* of the leaf (any size) that holds the page */
	uint64_t gen;			/* d->inval_seq when filled */
	uint64_t pa;			/* translated leaf base (memobj id | offset) */
	struct iommu_memobj *mo;
	_Atomic uint64_t *ptep;		/* stage-2 leaf entry if known, for dirty bits */
};

/* Allocated by a thread's first fill (96 KiB), freed when it exits: only the threads that
 * translate (device and DMA threads) have one. */
static __thread struct utlb_entry (*utlb)[UTLB_WAYS];
static __thread unsigned int utlb_clock;	/* round-robin victim when a set is full */
static pthread_key_t utlb_exit_key;
static pthread_once_t utlb_once = PTHREAD_ONCE_INIT;

static void utlb_thread_exit(void *p)
{
	free(p);
}

static void utlb_key_init(void)
{
	pthread_key_create(&utlb_exit_key, utlb_thread_exit);
}

/* This thread's front, allocated now if it has none; NULL if memory is short (then the
 * thread simply has no front). */
static struct utlb_entry (*utlb_alloc(void))[UTLB_WAYS]
{
	pthread_once(&utlb_once, utlb_key_init);
	utlb = calloc(UTLB_SETS, sizeof(*utlb));
	if (utlb && pthread_setspecific(utlb_exit_key, utlb)) {
		free(utlb);
		utlb = NULL;
	}
	return utlb;
}

static inline struct utlb_entry *utlb_set(uint64_t iova)
{
	/* A multiplicative hash of the 4 KiB page number: DMA buffers are often aligned
	 * alike, and the low bits alone would pile them into a few sets. */
	return utlb[(uint32_t)(((iova >> 12) * 0x9e3779b97f4a7c15ull) >> 55) % UTLB_SETS];
}

/* Entries are per 4 KiB page, whatever the leaf size: a match is one compare a way. */
static inline uint64_t utlb_key(uint32_t did, uint64_t iova)
{
	return (iova & ~0xfffull) | (did & 0xfffu);
}

/* The way of @set holding @iova in domain @did (valid or stale), or NULL. The ways are
 * compared without a branch each: which one holds a page is random. */
static inline struct utlb_entry *utlb_way(struct utlb_entry *set, uint32_t did, uint64_t iova)
{
	uint64_t key = utlb_key(did, iova);
	unsigned int m = 0;

#pragma GCC unroll 8
	for (unsigned int w = 0; w < UTLB_WAYS; w++)
		m |= (unsigned int)(set[w].key == key) << w;
	/* Another domain whose id has the same low bits may hold the page too (rare). */
	for (; m; m &= m - 1)
		if (set[__builtin_ctz(m)].did == did)
			return &set[__builtin_ctz(m)];
	return NULL;
}

/* The valid front entry for @iova in @d, or NULL. */
static inline const struct utlb_entry *utlb_find(struct iommu_domain *d, uint64_t iova)
{
	const struct utlb_entry *e = cmn_likely(utlb) ? utlb_way(utlb_set(iova), d->id, iova) : NULL;

	if (!e || e->gen != atomic_load_explicit(&d->inval_seq, memory_order_acquire))
		return NULL;
	return e;
}

static inline bool utlb_lookup(struct iommu_domain *d, uint64_t iova, struct iommu_xc_hit *h)
{
	const struct utlb_entry *e = utlb_find(d, iova);
	uint64_t size;

	if (!e)
		return false;
	size = iommu_xc_class_size(e->cls);
	*h = (struct iommu_xc_hit){ .base = iova & ~(size - 1), .size = size, .pa = e->pa,
				    .mo = e->mo, .ptep = e->ptep, .perm = e->perm, .cls = e->cls };
	return true;
}

static inline void utlb_fill(struct iommu_domain *d, uint64_t iova, const struct iommu_xc_hit *h,
			     uint64_t seq0)
{
	struct utlb_entry *set, *e;

	if (seq0 & 1)	/* an invalidation was running: nothing read now may be kept */
		return;
	if (cmn_unlikely(!utlb) && !utlb_alloc())
		return;
	set = utlb_set(iova);
	/* The way that held this page before, else an empty or stale one, else in turn. */
	e = utlb_way(set, d->id, iova);
	for (unsigned int w = 0; !e && w < UTLB_WAYS; w++)
		if (!set[w].did || (set[w].did == d->id && set[w].gen != seq0))
			e = &set[w];
	if (!e)
		e = &set[utlb_clock++ % UTLB_WAYS];
	*e = (struct utlb_entry){ .key = utlb_key(d->id, iova), .did = d->id,
				  .perm = (uint8_t)h->perm, .cls = (uint8_t)h->cls, .gen = seq0,
				  .pa = h->pa, .mo = h->mo, .ptep = h->ptep };
}

/* The IOTLB hit with nothing else to do: the front holds @iova with the permission asked
 * for, and no dirty bit has to be set. Everything a walk or a fault needs is elsewhere, so
 * this is all a hit costs. False: take the full path (it finds the same entry again). */
static inline bool utlb_xlate(struct iommu_domain *d, uint64_t iova, size_t len,
			      unsigned int access, struct iommu_xlate *out)
{
	const struct utlb_entry *e = utlb_find(d, iova);
	uint64_t in, size;

	if (!e || (e->perm & access & (IOMMU_READ | IOMMU_WRITE)) !=
			  (access & (IOMMU_READ | IOMMU_WRITE)))
		return false;
	if ((access & IOMMU_WRITE) &&
	    atomic_load_explicit(&(d->type == IOMMU_DOMAIN_NESTED ? d->parent : d)->dirty_tracking,
				 memory_order_relaxed))
		return false;
	iommu_count_hit(d->mmu);
	size = iommu_xc_class_size(e->cls);
	in = iova & (size - 1);
	out->offset = iommu_pa_off(e->pa) + in;
	out->host = (uint8_t *)e->mo->base + out->offset;
	out->len = (size_t)cmn_min((uint64_t)len, size - in);
	out->memobj = e->mo;
	out->perm = e->perm;
	out->page_size = size;
	return true;
}

/* IOTLB (per-thread front, then the shared array) else walk and fill. PAGING and NESTED
 * domains. */
static int xlate_cached(struct iommu_domain *d, uint64_t iova, unsigned int access,
			struct iommu_xc_hit *h, unsigned int *reason)
{
	struct iommu *mmu = d->mmu;
	uint64_t ctx = iommu_xc_ctx(d->id, 0), seq0;
	int ret;

	if (cmn_likely(!(access & IOMMU_NOCACHE))) {
		if (utlb_lookup(d, iova, h)) {
			iommu_count_hit(mmu);
			return check_perm(h, access, reason);
		}
		/* Read before the lookup: an entry found now is fresh unless this moves. */
		seq0 = atomic_load_explicit(&d->inval_seq, memory_order_acquire);
		if (iommu_xcache_lookup(&mmu->iotlb, ctx, iova,
					atomic_load_explicit(&d->classes, memory_order_relaxed), h)) {
			iommu_count_hit(mmu);
			h->mo = iommu_memobj_of_pa(mmu, h->pa);
			utlb_fill(d, iova, h, seq0);
			return check_perm(h, access, reason);
		}
		iommu_count_miss(mmu);
	} else {
		seq0 = atomic_load_explicit(&d->inval_seq, memory_order_acquire);
	}
	if (d->type == IOMMU_DOMAIN_NESTED)
		ret = walk_nested(d, iova, access, h, reason);
	else
		ret = walk_paging(d, iova, h, reason);
	if (ret)
		return ret;
	if (!(access & IOMMU_NOCACHE)) {
		/* Nested leaf sizes are only known here. Release, before the fill: an
		 * invalidation that misses the entry's class would miss the entry. */
		if (d->type == IOMMU_DOMAIN_NESTED)
			atomic_fetch_or_explicit(&d->classes, 1u << h->cls, memory_order_release);
		iommu_xcache_fill(&mmu->iotlb, ctx, h, &d->inval_seq, seq0);
		utlb_fill(d, iova, h, seq0);
	}
	return check_perm(h, access, reason);
}

static int xlate_paging(struct iommu_domain *d, uint64_t iova, unsigned int access,
			struct iommu_xc_hit *h, unsigned int *reason)
{
	int ret = xlate_cached(d, iova, access, h, reason);

	if (!ret)
		xlate_mark_dirty(d, h, iova, access);
	return ret;
}

/* SVA: the process's own addresses; the kernel checks them when the DMA helpers copy.
 * Up to the next 2 MiB boundary at once: one process_vm_readv/writev costs about a
 * microsecond, so 4 KiB pieces would cap a copy near 3 GB/s; the DMA helpers go page by
 * page only when a piece fails, to find the page that faults. */
static int xlate_sva(struct iommu_domain *d, uint64_t iova, size_t len,
		     struct iommu_xlate *out, unsigned int *reason)
{
	if (!iommu_sva_alive(d)) {
		*reason = IOMMU_FAULT_SVA_GONE;
		return -EFAULT;
	}
	out->host = NULL;
	out->memobj = NULL;
	out->offset = iova;
	out->len = (size_t)cmn_min((uint64_t)len, IOMMU_PAGE_2M - (iova & (IOMMU_PAGE_2M - 1)));
	out->perm = IOMMU_READ | IOMMU_WRITE;
	out->page_size = IOMMU_PAGE_SIZE;
	return 0;
}

/* Everything but the plain hit: the shared array, walks, faults, dirty bits. Out of line,
 * so that a hit does not pay for its frame. */
static __attribute__((noinline)) int xlate_full(struct iommu_domain *d, uint64_t iova,
						size_t len, unsigned int access,
						struct iommu_xlate *out, unsigned int *reason)
{
	struct iommu_xc_hit h;
	int ret = xlate_cached(d, iova, access, &h, reason);

	if (ret)
		return ret;
	xlate_mark_dirty(d, &h, iova, access);
	xlate_from_hit(d->mmu, &h, iova, len, out);
	return 0;
}

int iommu_xlate(struct iommu_domain *d, uint32_t pasid, uint64_t iova, size_t len,
		unsigned int access, struct iommu_xlate *out, unsigned int *reason)
{
	(void)pasid;	/* a domain translates alike for every PASID: entries are shared */
	if (cmn_unlikely(d->type == IOMMU_DOMAIN_SVA))
		return xlate_sva(d, iova, len, out, reason);
	if (cmn_likely(!(access & IOMMU_NOCACHE)) && utlb_xlate(d, iova, len, access, out))
		return 0;
	return xlate_full(d, iova, len, access, out, reason);
}

int iommu_translate(struct iommu_domain *d, uint64_t iova, size_t len, unsigned int access,
		    struct iommu_xlate *out)
{
	unsigned int reason;

	if (cmn_unlikely(!d || !out || !len || !(access & (IOMMU_READ | IOMMU_WRITE)) ||
			  (access & ~(IOMMU_READ | IOMMU_WRITE | IOMMU_NOCACHE))))
		return -EINVAL;
	return iommu_xlate(d, IOMMU_NO_PASID, iova, len, access, out, &reason);
}

/* ---- ATC (device side) ------------------------------------------------------------------ */

/* Translation Request: translate through the IOTLB, grant, and let the device cache it. */
static int ats_request(struct iommu_fn *fn, uint32_t pasid,
		       struct iommu_domain *d, uint64_t iova, unsigned int access,
		       struct iommu_xc_hit *h, unsigned int *reason)
{
	uint64_t seq0 = atomic_load_explicit(&fn->ats.inval_seq, memory_order_acquire);
	int ret = xlate_paging(d, iova, access & ~IOMMU_NOCACHE, h, reason);

	if (ret)
		return ret;
	iommu_xcache_fill(&fn->ats.atc, iommu_atc_ctx(d, pasid), h, &fn->ats.inval_seq, seq0);
	return 0;
}

int iommu_atc_translate(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			struct iommu_domain *d, uint64_t iova, size_t len, unsigned int access,
			struct iommu_xlate *out, unsigned int *reason)
{
	struct iommu_fn *fn = &mmu->fn[rid];
	struct iommu_xc_hit h;
	int ret;

	/* A cached entry without the wanted permission sends a new request, as a device
	 * would; the IOMMU then grants or refuses it. */
	if (iommu_xcache_lookup(&fn->ats.atc, iommu_atc_ctx(d, pasid), iova,
				IOMMU_XC_CLASS_MASK_ALL, &h) &&
	    !check_perm(&h, access, reason)) {
		iommu_count_atc(mmu, true);
		xlate_mark_dirty(d, &h, iova, access);
	} else {
		iommu_count_atc(mmu, false);
		ret = ats_request(fn, pasid, d, iova, access, &h, reason);
		if (ret)
			return ret;
	}
	xlate_from_hit(mmu, &h, iova, len, out);
	return 0;
}

int iommu_ats_translate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			unsigned int access, struct iommu_ats_result *out)
{
	struct iommu_domain *d;
	struct iommu_xc_hit h;
	unsigned int reason;
	int ret = 0;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || pasid > IOMMU_PASID_MAX || !out ||
	    !access || (access & ~(IOMMU_READ | IOMMU_WRITE)))
		return -EINVAL;
	iommu_access_begin();
	d = iommu_pasid_domain(mmu, rid, pasid);
	if (!d) {
		ret = -EFAULT;
	} else if (d->type == IOMMU_DOMAIN_SVA) {
		*out = (struct iommu_ats_result){ cmn_align_down(iova, IOMMU_PAGE_SIZE),
						  IOMMU_PAGE_SIZE, access, true };
	} else if (!atomic_load(&mmu->fn[rid].ats.on)) {
		ret = -ENODEV;
	} else {
		iommu_count_atc(mmu, false);
		ret = ats_request(&mmu->fn[rid], pasid, d, iova, access, &h, &reason);
		if (!ret)
			*out = (struct iommu_ats_result){ h.base, h.size, h.perm, false };
	}
	iommu_access_end();
	return ret;
}

/* ---- function-level translation ------------------------------------------------------ */

/* One attempt: domain lookup, ATC or IOTLB. Fills *reason on a fault. */
static int fn_xlate_once(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			 size_t len, unsigned int access, struct iommu_xlate *out,
			 unsigned int *reason)
{
	struct iommu_domain *d = iommu_pasid_domain(mmu, rid, pasid);

	if (!d) {
		*reason = IOMMU_FAULT_NO_DOMAIN;
		return -EFAULT;
	}
	if (atomic_load_explicit(&mmu->fn[rid].ats.on, memory_order_acquire) &&
	    d->type != IOMMU_DOMAIN_SVA)
		return iommu_atc_translate(mmu, rid, pasid, d, iova, len, access, out, reason);
	return iommu_xlate(d, pasid, iova, len, access, out, reason);
}

/* Translate, turning an unmapped fault into a page request when PRI is on; logs faults.
 * Called inside an access section; leaves it while waiting for the page response. */
static int fn_xlate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		    size_t len, unsigned int access, struct iommu_xlate *out)
{
	unsigned int reason = 0;
	int ret = fn_xlate_once(mmu, rid, pasid, iova, len, access, out, &reason);

	if (cmn_likely(!ret))
		return 0;
	if (reason == IOMMU_FAULT_UNMAPPED) {
		int pr;

		iommu_access_end();
		pr = iommu_pri_fault(mmu, rid, pasid, iova, access);
		iommu_access_begin();
		if (pr == 0) {
			ret = fn_xlate_once(mmu, rid, pasid, iova, len, access, out, &reason);
			if (!ret)
				return 0;
		} else if (pr != -ENODEV) {
			reason = IOMMU_FAULT_PRI_INVALID;
		}
	}
	iommu_fault_log(mmu, rid, pasid, iova, access, reason);
	return ret;
}

int iommu_fn_translate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		       size_t len, unsigned int access, struct iommu_xlate *out)
{
	int ret;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || pasid > IOMMU_PASID_MAX || !out || !len ||
	    !(access & (IOMMU_READ | IOMMU_WRITE)) ||
	    (access & ~(IOMMU_READ | IOMMU_WRITE | IOMMU_NOCACHE)))
		return -EINVAL;
	iommu_access_begin();
	ret = fn_xlate(mmu, rid, pasid, iova, len, access, out);
	iommu_access_end();
	return ret;
}

/* ---- DMA -------------------------------------------------------------------------------- */

/* SVA copy of one chunk with process_vm_readv/writev: 0, -EFAULT (the process's own page
 * tables refused), -ESRCH (the process has exited). The pid number is only what the
 * syscall takes: the domain's pidfd says whether it is still the bound process. Before: a
 * copy for a process that has exited never starts (its number may be another's already).
 * After: the process was alive across the whole copy, so the number was still its own (a
 * pid is not reused while its process lives); if it exited meanwhile, bytes read are
 * wiped and the copy is a fault, so nothing that may be another process's is ever used. */
static int sva_copy(struct iommu_domain *d, uint64_t addr, void *buf, size_t len, bool write)
{
	struct iovec local = { buf, len };
	struct iovec remote = { (void *)(uintptr_t)addr, len };
	ssize_t n;

	if (!iommu_sva_alive(d))
		return -ESRCH;
	n = write ? process_vm_writev(d->pid, &local, 1, &remote, 1, 0)
		  : process_vm_readv(d->pid, &local, 1, &remote, 1, 0);
	if (!iommu_sva_alive(d)) {
		if (!write && n > 0)
			memset(buf, 0, (size_t)n);
		return -ESRCH;
	}
	return n == (ssize_t)len ? 0 : -EFAULT;
}

/* SVA page: a failed copy is the unmapped fault of an SVA domain; a process that has
 * exited is a fault of its own, with no page request (nothing could make it present). */
static int dma_sva_page(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			struct iommu_domain *d, uint64_t iova, uint8_t *p, size_t n, bool write)
{
	unsigned int access = write ? IOMMU_WRITE : IOMMU_READ;
	int ret = sva_copy(d, iova, p, n, write);

	if (!ret)
		return 0;
	if (ret == -ESRCH) {
		iommu_fault_log(mmu, rid, pasid, iova, access, IOMMU_FAULT_SVA_GONE);
		return -EFAULT;
	}
	iommu_access_end();
	ret = iommu_pri_fault(mmu, rid, pasid, iova, access);
	iommu_access_begin();
	if (!ret) {
		ret = sva_copy(d, iova, p, n, write);
		if (!ret)
			return 0;
		if (ret == -ESRCH) {
			iommu_fault_log(mmu, rid, pasid, iova, access, IOMMU_FAULT_SVA_GONE);
			return -EFAULT;
		}
		ret = -ENODEV;	/* answered, still not there: the unmapped fault */
	}
	iommu_fault_log(mmu, rid, pasid, iova, access,
			ret != -ENODEV ? IOMMU_FAULT_PRI_INVALID : IOMMU_FAULT_UNMAPPED);
	return -EFAULT;
}

/* SVA chunk (up to 2 MiB): one copy; if it fails, page by page, so the bytes before the
 * fault are transferred and the fault (and any page request) names its page. */
static int dma_sva_chunk(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			 struct iommu_domain *d, uint64_t iova, uint8_t *p, size_t n, bool write)
{
	int first = sva_copy(d, iova, p, n, write);

	if (!first)
		return 0;
	if (first == -ESRCH) {
		iommu_fault_log(mmu, rid, pasid, iova, write ? IOMMU_WRITE : IOMMU_READ,
				IOMMU_FAULT_SVA_GONE);
		return -EFAULT;
	}
	while (n) {
		size_t k = (size_t)cmn_min((uint64_t)n, IOMMU_PAGE_SIZE - (iova & (IOMMU_PAGE_SIZE - 1)));
		int ret = dma_sva_page(mmu, rid, pasid, d, iova, p, k, write);

		if (ret)
			return ret;
		iova += k;
		p += k;
		n -= k;
	}
	return 0;
}

static int dma_rw(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		  uint8_t *buf, size_t len, bool write)
{
	unsigned int access = write ? IOMMU_WRITE : IOMMU_READ;
	int ret = 0;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || pasid > IOMMU_PASID_MAX || (len && !buf))
		return -EINVAL;
	iommu_access_begin();
	while (len) {
		struct iommu_xlate x;
		struct iommu_domain *d;

		if (len - 1 > UINT64_MAX - iova) {
			ret = -EFAULT;
			iommu_fault_log(mmu, rid, pasid, iova, access, IOMMU_FAULT_UNMAPPED);
			break;
		}
		ret = fn_xlate(mmu, rid, pasid, iova, len, access, &x);
		if (ret)
			break;
		d = x.host ? NULL : iommu_pasid_domain(mmu, rid, pasid);
		if (d) {
			ret = dma_sva_chunk(mmu, rid, pasid, d, iova, buf, x.len, write);
			if (ret)
				break;
		} else if (write) {
			memcpy(x.host, buf, x.len);
		} else {
			memcpy(buf, x.host, x.len);
		}
		iova += x.len;
		buf += x.len;
		len -= x.len;
	}
	iommu_access_end();
	return ret;
}

int iommu_dma_read(struct iommu *mmu, unsigned int rid, uint64_t iova, void *buf, size_t len)
{
	return dma_rw(mmu, rid, IOMMU_NO_PASID, iova, buf, len, false);
}

int iommu_dma_write(struct iommu *mmu, unsigned int rid, uint64_t iova, const void *buf,
		    size_t len)
{
	return dma_rw(mmu, rid, IOMMU_NO_PASID, iova, (uint8_t *)(uintptr_t)buf, len, true);
}

int iommu_dma_read_pasid(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			 void *buf, size_t len)
{
	return dma_rw(mmu, rid, pasid, iova, buf, len, false);
}

int iommu_dma_write_pasid(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			  const void *buf, size_t len)
{
	return dma_rw(mmu, rid, pasid, iova, (uint8_t *)(uintptr_t)buf, len, true);
}
