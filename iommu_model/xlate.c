// SPDX-License-Identifier: MIT
/* Translation: IOTLB lookup, page walks (host tables, and function-owned stage-1 tables
 * read through stage-2), dirty bits, and the DMA helpers that devices use. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
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
 * drops them all at once, in every thread, for free. It holds 4,096 translations, four
 * times the default shared array, so that a DMA working set of hundreds of pages scattered
 * over a large domain stays in it with few conflicts.
 *
 * A set is one 64-byte line holding both of its ways, so a hit reads one line whose
 * address depends only on the page, and a working set of 512 pages touches about 26 KiB of
 * them: they stay in L1 next to the data the DMA moves. A way is 32 bytes: its key (the
 * page number and the domain id in one word), its generation, its memobj and one word with
 * the leaf's offset, size class and permission, so a hit addresses its way with one
 * comparison and reads it at fixed offsets. The stage-2 leaf (for dirty bits) is in a
 * second array only the slow path reads. */
#define UTLB_SETS_SHIFT 11u
#define UTLB_SETS (1u << UTLB_SETS_SHIFT)
#define UTLB_WAYS 2u
#define UTLB_KEY_PAGE ((1ull << IOMMU_FRONT_TAG_SHIFT) - 1)
/* A way's leaf word: the leaf's offset in its memobj (aligned to its size, so its low 12
 * bits are free), log2 of its size and its permission. */
#define UTLB_LEAF_PERM		3ull
#define UTLB_LEAF_SHIFT_SHIFT	2
#define UTLB_LEAF_OFF		(~0xfffull)

struct utlb_way {
	uint64_t key;		/* page | d->front_tag; 0: empty (tags are never 0) */
	uint64_t gen;		/* d->inval_seq when filled */
	struct iommu_memobj *mo;
	uint64_t leaf;		/* offset | log2 size << UTLB_LEAF_SHIFT_SHIFT | perm */
};

struct __attribute__((aligned(64))) utlb_set {
	struct utlb_way way[UTLB_WAYS];
};

struct utlb {
	struct utlb_set set[UTLB_SETS];
	_Atomic uint64_t *ptep[UTLB_SETS][UTLB_WAYS];	/* stage-2 leaf if known, for dirty bits */
	size_t hits_off;	/* this thread's hit counter: its offset in struct iommu */
	unsigned int clock;	/* victim when both ways hold live entries */
};

_Static_assert(sizeof(struct utlb_set) == 64, "a front set is one cache line");
_Static_assert(UTLB_WAYS == 2 && sizeof(struct utlb_way) == 32, "utlb_find picks way 0 or 1");

/* Allocated by a thread's first fill (160 KiB), freed when it exits: only the threads that
 * translate (device and DMA threads) have one. Until then a thread looks into an empty
 * front that nothing fills (its zero keys match no page), so a hit need not test for one. */
static const struct utlb utlb_empty;
static __thread const struct utlb *utlb = &utlb_empty;
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
static struct utlb *utlb_alloc(void)
{
	struct utlb *u;

	pthread_once(&utlb_once, utlb_key_init);
	u = aligned_alloc(64, sizeof(*u));
	if (!u)
		return NULL;
	memset(u, 0, sizeof(*u));
	u->hits_off = offsetof(struct iommu, shard) + offsetof(struct iommu_shard, hits) +
		      iommu_thread_index() % IOMMU_NR_SHARDS * sizeof(struct iommu_shard);
	if (pthread_setspecific(utlb_exit_key, u)) {
		free(u);
		return NULL;
	}
	utlb = u;
	return u;
}

/* The front's key for @iova in @d. What the front never holds gets IOMMU_FRONT_TAG_NONE,
 * which no filled key equals: IOVAs past the 48-bit space (their page number would spill
 * into the tag) and domains without a tag. */
static inline uint64_t utlb_key(const struct iommu_domain *d, uint64_t iova)
{
	if (cmn_unlikely(iova >> IOMMU_IOVA_BITS))
		return IOMMU_FRONT_TAG_NONE;
	return iova >> 12 | d->front_tag;
}

static inline size_t utlb_set_index(uint64_t iova)
{
	/* A multiplicative hash of the 4 KiB page number: DMA buffers are often aligned
	 * alike, and the low bits alone would pile them into a few sets. */
	return (size_t)(((iova >> 12) * 0x9e3779b97f4a7c15ull) >> (64 - UTLB_SETS_SHIFT));
}

/* The way of @s that holds @iova in @d with a current generation, else NULL. The way
 * is chosen without a branch (which way holds a page is random), then checked. */
static inline const struct utlb_way *utlb_find(const struct utlb_set *s,
					       const struct iommu_domain *d, uint64_t iova)
{
	uint64_t key = utlb_key(d, iova);
	/* Way 1 is 32 bytes into the line: a shifted flag, not an index, addresses it. */
	const struct utlb_way *e = (const void *)((const char *)s +
						  ((size_t)(s->way[1].key == key) << 5));

	if (e->key != key ||
	    e->gen != atomic_load_explicit(&d->inval_seq, memory_order_acquire))
		return NULL;
	return e;
}

static inline uint64_t utlb_leaf_size(uint64_t leaf)
{
	/* The shift is bits 2-7; x86 shifts use the count's low 6 bits anyway. */
	return 1ull << ((leaf >> UTLB_LEAF_SHIFT_SHIFT) & 63);
}

static inline bool utlb_lookup(struct iommu_domain *d, uint64_t iova, struct iommu_xc_hit *h)
{
	const struct utlb *u = utlb;
	size_t i = utlb_set_index(iova);
	const struct utlb_set *s = &u->set[i];
	const struct utlb_way *e = utlb_find(s, d, iova);
	uint64_t leaf;

	if (!e)
		return false;
	leaf = e->leaf;
	h->size = utlb_leaf_size(leaf);
	h->base = iova & ~(h->size - 1);
	h->cls = iommu_xc_class_of(h->size);
	h->mo = e->mo;
	h->pa = (uint64_t)h->mo->id << IOMMU_PA_ID_SHIFT | (leaf & UTLB_LEAF_OFF);
	h->ptep = u->ptep[i][e - s->way];
	h->perm = (unsigned int)(leaf & UTLB_LEAF_PERM);
	return true;
}

static inline void utlb_fill(struct iommu_domain *d, uint64_t iova, const struct iommu_xc_hit *h,
			     uint64_t seq0)
{
	struct utlb *u;
	uint64_t key = utlb_key(d, iova);
	struct utlb_set *s;
	struct utlb_way *e;
	unsigned int w;
	size_t i;

	if (seq0 & 1)	/* an invalidation was running: nothing read now may be kept */
		return;
	if (key == IOMMU_FRONT_TAG_NONE || !h->mo)
		return;
	if (cmn_unlikely(utlb == &utlb_empty) && !utlb_alloc())
		return;
	u = (struct utlb *)utlb;	/* allocated: not the empty front */
	i = utlb_set_index(iova);
	s = &u->set[i];
	/* The way that held this page before, else an empty or stale one, else in turn. */
	for (w = 0; w < UTLB_WAYS && s->way[w].key != key; w++)
		;
	if (w == UTLB_WAYS) {
		for (w = 0; w < UTLB_WAYS; w++) {
			e = &s->way[w];
			if (!e->key || ((e->key & ~UTLB_KEY_PAGE) == d->front_tag && e->gen != seq0))
				break;
		}
		if (w == UTLB_WAYS)
			w = u->clock++ % UTLB_WAYS;
	}
	e = &s->way[w];
	e->key = key;
	e->gen = seq0;
	e->mo = h->mo;
	e->leaf = (iommu_pa_off(h->pa) & UTLB_LEAF_OFF) |
		  (uint64_t)(12 + 9 * h->cls) << UTLB_LEAF_SHIFT_SHIFT | (h->perm & UTLB_LEAF_PERM);
	u->ptep[i][w] = h->ptep;
}

/* READ, WRITE or both, and nothing else: what the front's hit serves. */
static inline bool utlb_plain_access(unsigned int access)
{
	return access - 1u < (IOMMU_READ | IOMMU_WRITE);
}

/* The IOTLB hit with nothing else to do: the front holds @iova with the permission asked
 * for (@access is READ, WRITE or both, nothing else), and no dirty bit has to be set.
 * Everything a walk or a fault needs is elsewhere, so this is all a hit costs. False: take
 * the full path (it finds the same entry again); so for SVA domains, which are never
 * filled. */
static inline __attribute__((always_inline)) bool utlb_xlate(struct iommu_domain *d,
							     uint64_t iova, size_t len,
							     unsigned int access,
							     struct iommu_xlate *out)
{
	const struct utlb *u = utlb;
	const struct utlb_set *s = &u->set[utlb_set_index(iova)];
	struct iommu_memobj *mo;
	const struct utlb_way *e = utlb_find(s, d, iova);
	uint64_t leaf, size, in, off;

	if (!e)
		return false;
	leaf = e->leaf;
	if (~leaf & access)
		return false;
	if ((access & IOMMU_WRITE) &&
	    atomic_load_explicit(&(d->type == IOMMU_DOMAIN_NESTED ? d->parent : d)->dirty_tracking,
				 memory_order_relaxed))
		return false;
	/* The entry is read before anything is stored: the stores may alias it for all the
	 * compiler knows, and would make it read the entry again. */
	mo = e->mo;
	size = utlb_leaf_size(leaf);
	in = iova & (size - 1);
	off = (leaf & UTLB_LEAF_OFF) + in;
	out->host = (uint8_t *)mo->base + off;
	out->memobj = mo;
	out->offset = off;
	out->len = (size_t)cmn_min((uint64_t)len, size - in);
	out->perm = (unsigned int)(leaf & UTLB_LEAF_PERM);
	out->page_size = size;
	iommu_shard_inc((_Atomic uint64_t *)((char *)d->mmu + u->hits_off));
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

/* SVA or anything but the front's hit. Out of line, so the hit is a leaf function. */
static __attribute__((noinline)) int xlate_slow(struct iommu_domain *d, uint64_t iova,
						size_t len, unsigned int access,
						struct iommu_xlate *out, unsigned int *reason)
{
	if (d->type == IOMMU_DOMAIN_SVA)
		return xlate_sva(d, iova, len, out, reason);
	return xlate_full(d, iova, len, access, out, reason);
}

/* A translation without its arguments checked: the front's hit inline, else the rest. */
static inline __attribute__((always_inline)) int xlate_one(struct iommu_domain *d,
							   uint64_t iova, size_t len,
							   unsigned int access,
							   struct iommu_xlate *out,
							   unsigned int *reason)
{
	if (cmn_likely(utlb_plain_access(access)) && utlb_xlate(d, iova, len, access, out))
		return 0;
	return xlate_slow(d, iova, len, access, out, reason);
}

int iommu_xlate(struct iommu_domain *d, uint32_t pasid, uint64_t iova, size_t len,
		unsigned int access, struct iommu_xlate *out, unsigned int *reason)
{
	(void)pasid;	/* a domain translates alike for every PASID: entries are shared */
	return xlate_one(d, iova, len, access, out, reason);
}

/* iommu_translate past the front: the fault reason is not returned. */
static __attribute__((noinline)) int translate_slow(struct iommu_domain *d, uint64_t iova,
						    size_t len, unsigned int access,
						    struct iommu_xlate *out)
{
	unsigned int reason;

	if (!d || !out || !len || !(access & (IOMMU_READ | IOMMU_WRITE)) ||
	    (access & ~(IOMMU_READ | IOMMU_WRITE | IOMMU_NOCACHE)))
		return -EINVAL;
	return xlate_slow(d, iova, len, access, out, &reason);
}

int iommu_translate(struct iommu_domain *d, uint64_t iova, size_t len, unsigned int access,
		    struct iommu_xlate *out)
{
	/* The front's hit needs checked arguments; anything unusual is checked out of line. */
	if (cmn_likely(d && out && len && utlb_plain_access(access)) &&
	    utlb_xlate(d, iova, len, access, out))
		return 0;
	return translate_slow(d, iova, len, access, out);
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

/* Translate, turning an unmapped fault into a page request when PRI is on and @access
 * has no IOMMU_NOPRI; logs faults. Called inside an access section; leaves it while
 * waiting for the page response. */
static int fn_xlate(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		    size_t len, unsigned int access, struct iommu_xlate *out)
{
	bool pri = !(access & IOMMU_NOPRI);
	unsigned int reason = 0;
	int ret;

	access &= ~IOMMU_NOPRI;
	ret = fn_xlate_once(mmu, rid, pasid, iova, len, access, out, &reason);
	if (cmn_likely(!ret))
		return 0;
	if (reason == IOMMU_FAULT_UNMAPPED && pri) {
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
	    (access & ~(IOMMU_READ | IOMMU_WRITE | IOMMU_NOCACHE | IOMMU_NOPRI)))
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
	iommu_tls_sva_copies++;
	n = write ? process_vm_writev(d->pid, &local, 1, &remote, 1, 0)
		  : process_vm_readv(d->pid, &local, 1, &remote, 1, 0);
	if (!iommu_sva_alive(d)) {
		if (!write && n > 0)
			memset(buf, 0, (size_t)n);
		return -ESRCH;
	}
	return n == (ssize_t)len ? 0 : -EFAULT;
}

/* After a wait outside the access section: whether @pasid still names the domain whose
 * id is @id. @d may have been freed meanwhile, so only its id (never reused) is compared.
 * A page answered for one binding is never copied through the next one. */
static int sva_still_bound(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint32_t id)
{
	struct iommu_domain *now = iommu_pasid_domain(mmu, rid, pasid);

	if (!now)
		return IOMMU_FAULT_NO_DOMAIN;
	return now->id == id ? 0 : IOMMU_FAULT_SVA_GONE;
}

/* SVA page: a failed copy is the unmapped fault of an SVA domain; a process that has
 * exited is a fault of its own, with no page request (nothing could make it present). */
static int dma_sva_page(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			struct iommu_domain *d, uint64_t iova, uint8_t *p, size_t n, bool write)
{
	unsigned int access = write ? IOMMU_WRITE : IOMMU_READ;
	uint32_t id = d->id;
	int ret = sva_copy(d, iova, p, n, write), gone;

	if (!ret)
		return 0;
	if (ret == -ESRCH) {
		iommu_fault_log(mmu, rid, pasid, iova, access, IOMMU_FAULT_SVA_GONE);
		return -EFAULT;
	}
	iommu_access_end();
	ret = iommu_pri_fault(mmu, rid, pasid, iova, access);
	iommu_access_begin();
	gone = sva_still_bound(mmu, rid, pasid, id);
	if (gone) {
		iommu_fault_log(mmu, rid, pasid, iova, access, (unsigned int)gone);
		return -EFAULT;
	}
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
 * fault are transferred and the fault (and any page request) names its page. With @stop
 * it returns after a page that waited for a page response. *@moved = the bytes moved (on
 * a fault, those before its page). */
static int dma_sva_chunk(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			 struct iommu_domain *d, uint64_t iova, uint8_t *p, size_t n, bool write,
			 bool stop, size_t *moved)
{
	int first = sva_copy(d, iova, p, n, write);

	*moved = 0;
	if (!first) {
		*moved = n;
		return 0;
	}
	if (first == -ESRCH) {
		iommu_fault_log(mmu, rid, pasid, iova, write ? IOMMU_WRITE : IOMMU_READ,
				IOMMU_FAULT_SVA_GONE);
		return -EFAULT;
	}
	while (*moved < n) {
		uint64_t at = iova + *moved, waits = iommu_tls_pri_waits;
		size_t k = (size_t)cmn_min((uint64_t)(n - *moved),
					   IOMMU_PAGE_SIZE - (at & (IOMMU_PAGE_SIZE - 1)));
		int ret = dma_sva_page(mmu, rid, pasid, d, at, p + *moved, k, write);

		if (ret)
			return ret;
		*moved += k;
		if (stop && iommu_tls_pri_waits != waits)
			break;
	}
	return 0;
}

/* With @done: stops after the first page (SVA) or translation (other domains) that waited
 * for a page response, *@done = the bytes moved (iommu_dma_rw_some()). */
static int dma_rw(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		  uint8_t *buf, size_t len, bool write, size_t *done)
{
	unsigned int access = write ? IOMMU_WRITE : IOMMU_READ;
	size_t moved = 0;
	int ret = 0;

	if (!mmu || rid >= IOMMU_MAX_FUNCS || pasid > IOMMU_PASID_MAX || (len && !buf))
		return -EINVAL;
	iommu_access_begin();
	while (len) {
		uint64_t waits = iommu_tls_pri_waits;
		struct iommu_xlate x;
		struct iommu_domain *d;
		size_t k;

		if (len - 1 > UINT64_MAX - iova) {
			ret = -EFAULT;
			iommu_fault_log(mmu, rid, pasid, iova, access, IOMMU_FAULT_UNMAPPED);
			break;
		}
		ret = fn_xlate(mmu, rid, pasid, iova, len, access, &x);
		if (ret)
			break;
		d = x.host ? NULL : iommu_pasid_domain(mmu, rid, pasid);
		k = x.len;
		if (d)
			ret = dma_sva_chunk(mmu, rid, pasid, d, iova, buf, x.len, write,
					    done != NULL, &k);
		else if (write)
			memcpy(x.host, buf, x.len);
		else
			memcpy(buf, x.host, x.len);
		moved += k;
		if (ret || (done && iommu_tls_pri_waits != waits))
			break;
		iova += k;
		buf += k;
		len -= k;
	}
	iommu_access_end();
	if (done)
		*done = moved;
	return ret;
}

int iommu_dma_rw_some(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
		      void *buf, size_t len, bool write, size_t *done)
{
	if (!done)
		return -EINVAL;
	*done = 0;
	return dma_rw(mmu, rid, pasid, iova, buf, len, write, done);
}

int iommu_dma_read(struct iommu *mmu, unsigned int rid, uint64_t iova, void *buf, size_t len)
{
	return dma_rw(mmu, rid, IOMMU_NO_PASID, iova, buf, len, false, NULL);
}

int iommu_dma_write(struct iommu *mmu, unsigned int rid, uint64_t iova, const void *buf,
		    size_t len)
{
	return dma_rw(mmu, rid, IOMMU_NO_PASID, iova, (uint8_t *)(uintptr_t)buf, len, true, NULL);
}

int iommu_dma_read_pasid(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			 void *buf, size_t len)
{
	return dma_rw(mmu, rid, pasid, iova, buf, len, false, NULL);
}

int iommu_dma_write_pasid(struct iommu *mmu, unsigned int rid, uint32_t pasid, uint64_t iova,
			  const void *buf, size_t len)
{
	return dma_rw(mmu, rid, pasid, iova, (uint8_t *)(uintptr_t)buf, len, true, NULL);
}
