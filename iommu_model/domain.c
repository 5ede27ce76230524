// SPDX-License-Identifier: MIT
/* Domains: allocation, attachment to functions and PASIDs, map/unmap/query with the
 * iommufd contract, strict and lazy (flush-queue) invalidation, dirty tracking. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/log.h"
#include "iommu_model/iommu_internal.h"

#define IOMMU_FQ_MAX	64	/* lazy unmaps queued before a forced drain */

/* Domain ids are unique across units and never reused: per-thread translation caches
 * and the IOTLB tag entries with them, so a new domain can never match an old entry. */
static _Atomic uint32_t iommu_next_domain_id = 1;
static _Atomic uint64_t iommu_next_front_tag = 1;

/* A tag for a new domain: 1 .. 2^28 - 2, so that no key is 0 or all ones. */
static uint64_t iommu_front_tag_alloc(void)
{
	uint64_t n = atomic_fetch_add_explicit(&iommu_next_front_tag, 1, memory_order_relaxed);

	if (n >= (1ull << (64 - IOMMU_FRONT_TAG_SHIFT)) - 1)
		return IOMMU_FRONT_TAG_NONE;
	return n << IOMMU_FRONT_TAG_SHIFT;
}

/* ---- invalidation ------------------------------------------------------------------ */

/* Drop every cached translation of @d in [iova, iova + len) (len 0: all): IOTLB, every
 * ATC that may hold it, and nested domains built on it. Returns when all are gone. */
void iommu_domain_inval(struct iommu_domain *d, uint64_t iova, uint64_t len)
{
	struct iommu *mmu = d->mmu;

	iommu_inval_begin(d);
	atomic_fetch_add_explicit(&mmu->iotlb_inv, 1, memory_order_relaxed);
	/* IOTLB entries always carry PASID 0, so the exact context names all of @d's.
	 * Acquire: pairs with the release that published a new size class before a fill. */
	iommu_xcache_inval(&mmu->iotlb, iommu_xc_ctx(d->id, 0), IOMMU_XC_MATCH_CTX, iova, len,
			   atomic_load_explicit(&d->classes, memory_order_acquire));
	iommu_ats_inval_domain(mmu, d, iova, len);
	iommu_inval_end(d);
	if (!atomic_load(&d->nr_children))
		return;
	/* A stage-2 change reaches stage-1 translations we cannot name by IOVA. */
	cmn_mutex_lock(&mmu->lock);
	for (struct iommu_domain *c = mmu->domains; c; c = c->next)
		if (c->parent == d)
			iommu_domain_inval(c, 0, 0);
	cmn_mutex_unlock(&mmu->lock);
}

int iommu_iotlb_flush_range(struct iommu_domain *d, uint64_t iova, uint64_t length)
{
	if (!d || !length || iova + length < iova)
		return -EINVAL;
	iommu_domain_inval(d, iova, length);
	return 0;
}

void iommu_iotlb_flush_domain(struct iommu_domain *d)
{
	iommu_domain_inval(d, 0, 0);
}

void iommu_iotlb_flush_all(struct iommu *mmu)
{
	cmn_mutex_lock(&mmu->lock);
	for (struct iommu_domain *d = mmu->domains; d; d = d->next)
		iommu_inval_begin(d);
	atomic_fetch_add(&mmu->iotlb_inv, 1);
	iommu_xcache_inval(&mmu->iotlb, 0, IOMMU_XC_MATCH_ALL, 0, 0, IOMMU_XC_CLASS_MASK_ALL);
	for (unsigned int rid = 0; rid < IOMMU_MAX_FUNCS; rid++)
		iommu_ats_flush_fn(mmu, rid);
	for (struct iommu_domain *d = mmu->domains; d; d = d->next)
		iommu_inval_end(d);
	cmn_mutex_unlock(&mmu->lock);
}

/* ---- memobj references --------------------------------------------------------------- */

static int memobj_get(struct iommu *mmu, struct iommu_memobj *mo)
{
	int ret = 0;

	cmn_mutex_lock(&mmu->lock);
	if (mo->id >= IOMMU_MAX_MEMOBJS || atomic_load(&mmu->memobjs[mo->id]) != mo)
		ret = -ENOENT;
	else
		atomic_fetch_add(&mo->nr_maps, 1);
	cmn_mutex_unlock(&mmu->lock);
	return ret;
}

static void memobj_put(struct iommu_memobj *mo)
{
	atomic_fetch_sub(&mo->nr_maps, 1);
}

/* ---- domains ------------------------------------------------------------------------- */

static int domain_opts_check(struct iommu *mmu, const struct iommu_domain_opts *o)
{
	switch (o->type) {
	case IOMMU_DOMAIN_PAGING:
		if (o->flags & ~(IOMMU_DOMAIN_NEST_PARENT | IOMMU_DOMAIN_LAZY |
				 IOMMU_DOMAIN_NO_DIRTY))
			return -EINVAL;
		if (o->iova_bits && (o->iova_bits < 32 || o->iova_bits > IOMMU_IOVA_BITS))
			return -EINVAL;
		return 0;
	case IOMMU_DOMAIN_NESTED:
		if (o->flags || !o->parent || o->parent->mmu != mmu ||
		    o->parent->type != IOMMU_DOMAIN_PAGING ||
		    !(o->parent->flags & IOMMU_DOMAIN_NEST_PARENT) ||
		    !cmn_is_aligned(o->s1_root, IOMMU_PAGE_SIZE))
			return -EINVAL;
		return 0;
	case IOMMU_DOMAIN_SVA:
		if ((o->flags & ~IOMMU_DOMAIN_SVA_PIDFD) || o->pid < 0 ||
		    ((o->flags & IOMMU_DOMAIN_SVA_PIDFD) && o->pidfd < 0))
			return -EINVAL;
		return 0;
	}
	return -EINVAL;
}

int iommu_domain_alloc(struct iommu *mmu, const struct iommu_domain_opts *opts,
		       struct iommu_domain **out)
{
	struct iommu_domain *d;
	int ret;

	if (!mmu || !opts || !out)
		return -EINVAL;
	ret = domain_opts_check(mmu, opts);
	if (ret)
		return ret;
	d = iommu_zalloc(mmu, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->mmu = mmu;
	d->rng = 0x2545f491u;
	d->type = opts->type;
	d->flags = opts->flags;
	d->pidfd = -1;
	cmn_mutex_init(&d->lock);
	if (d->type == IOMMU_DOMAIN_SVA) {
		ret = iommu_sva_init(d, opts);
		if (ret)
			goto free_domain;
	}
	if (d->type == IOMMU_DOMAIN_PAGING) {
		d->iova_bits = opts->iova_bits ? opts->iova_bits : IOMMU_IOVA_BITS;
		d->aperture_last = (1ull << d->iova_bits) - 1;
		d->root = iommu_pt_alloc(mmu);
		if (!d->root) {
			ret = -ENOMEM;
			goto free_domain;
		}
	}
	d->parent = opts->parent;
	d->s1_root = opts->s1_root;
	cmn_mutex_lock(&mmu->lock);
	d->id = atomic_fetch_add(&iommu_next_domain_id, 1);
	d->front_tag = iommu_front_tag_alloc();
	if (d->parent)
		atomic_fetch_add(&d->parent->nr_children, 1);
	d->next = mmu->domains;
	mmu->domains = d;
	cmn_mutex_unlock(&mmu->lock);
	*out = d;
	return 0;
free_domain:
	cmn_mutex_destroy(&d->lock);
	iommu_free(mmu, d);
	return ret;
}

static void domain_unlink_locked(struct iommu_domain *d)
{
	struct iommu_domain **pp = &d->mmu->domains;

	cmn_mutex_assert_held(&d->mmu->lock);
	while (*pp != d)
		pp = &(*pp)->next;
	*pp = d->next;
	if (d->parent)
		atomic_fetch_sub(&d->parent->nr_children, 1);
}

/* Take @d off the list unless something still uses it. */
static int domain_remove_locked(struct iommu_domain *d)
{
	cmn_mutex_assert_held(&d->mmu->lock);
	if (d->attach_count || atomic_load(&d->nr_children))
		return -EBUSY;
	domain_unlink_locked(d);
	return 0;
}

/* Free @d, already off the list: nobody can look it up any more. */
static void domain_destroy(struct iommu_domain *d)
{
	struct iommu *mmu = d->mmu;

	cmn_mutex_lock(&d->lock);
	iommu_drain_fq_locked(d);
	while (d->areas) {
		struct iommu_area *a = d->areas;

		iommu_area_remove(d, a);
		memobj_put(a->mo);
		iommu_free(mmu, a);
	}
	cmn_mutex_unlock(&d->lock);
	/* Ids are never reused, but the entries would only waste IOTLB space. */
	iommu_inval_begin(d);
	iommu_xcache_inval(&mmu->iotlb, iommu_xc_ctx(d->id, 0), IOMMU_XC_MATCH_DID, 0, 0,
			   IOMMU_XC_CLASS_MASK_ALL);
	iommu_inval_end(d);
	iommu_pt_free_all(mmu, d->root, VGPU_IOPT_LEVELS - 1);
	iommu_free(mmu, d->fq);
	iommu_free(mmu, d->allowed);
	iommu_free(mmu, d->reserved);
	iommu_sva_fini(d);
	cmn_mutex_destroy(&d->lock);
	iommu_free(mmu, d);
}

int iommu_domain_free(struct iommu_domain *d)
{
	int ret;

	if (!d)
		return -EINVAL;
	cmn_mutex_lock(&d->mmu->lock);
	ret = domain_remove_locked(d);
	cmn_mutex_unlock(&d->mmu->lock);
	if (!ret)
		domain_destroy(d);
	return ret;
}

static struct iommu_domain *domain_lookup_locked(struct iommu *mmu, uint32_t id)
{
	struct iommu_domain *d;

	cmn_mutex_assert_held(&mmu->lock);
	for (d = mmu->domains; d && d->id != id; d = d->next)
		;
	return d;
}

/* Find and take the domain off the list in one step: of two racing destroys of the same
 * id, only one gets it. */
int iommu_domain_free_id(struct iommu *mmu, uint32_t id)
{
	struct iommu_domain *d;
	int ret = -ENOENT;

	cmn_mutex_lock(&mmu->lock);
	d = id ? domain_lookup_locked(mmu, id) : NULL;
	if (d)
		ret = domain_remove_locked(d);
	cmn_mutex_unlock(&mmu->lock);
	if (!ret)
		domain_destroy(d);
	return ret;
}

uint32_t iommu_domain_id(const struct iommu_domain *d)
{
	return d->id;
}

enum iommu_domain_type iommu_domain_type(const struct iommu_domain *d)
{
	return d->type;
}

struct iommu_domain *iommu_domain_lookup(struct iommu *mmu, uint32_t id)
{
	struct iommu_domain *d;

	cmn_mutex_lock(&mmu->lock);
	d = domain_lookup_locked(mmu, id);
	cmn_mutex_unlock(&mmu->lock);
	return d;
}

/* ---- attachment ------------------------------------------------------------------------ */

static bool rid_ok(struct iommu *mmu, unsigned int rid)
{
	return mmu && rid < IOMMU_MAX_FUNCS;
}

int iommu_attach(struct iommu *mmu, unsigned int rid, struct iommu_domain *d)
{
	struct iommu_fn *fn;
	int ret = 0;

	if (!rid_ok(mmu, rid) || !d || d->mmu != mmu || d->type == IOMMU_DOMAIN_SVA)
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&mmu->lock);
	if (atomic_load(&fn->domain)) {
		ret = -EBUSY;
	} else {
		d->attach_count++;
		atomic_store_explicit(&fn->domain, d, memory_order_release);
	}
	cmn_mutex_unlock(&mmu->lock);
	return ret;
}

/* After the attachment changed: accesses that still use the old domain finish, and the
 * device forgets translations it cached from it. */
static void fn_quiesce(struct iommu *mmu, unsigned int rid)
{
	iommu_sync_wait();
	iommu_ats_flush_fn(mmu, rid);
}

int iommu_replace(struct iommu *mmu, unsigned int rid, struct iommu_domain *d)
{
	struct iommu_domain *old;

	if (!rid_ok(mmu, rid) || !d || d->mmu != mmu || d->type == IOMMU_DOMAIN_SVA)
		return -EINVAL;
	cmn_mutex_lock(&mmu->lock);
	old = atomic_load(&mmu->fn[rid].domain);
	if (!old) {
		cmn_mutex_unlock(&mmu->lock);
		return -EINVAL;
	}
	d->attach_count++;
	old->attach_count--;
	atomic_store_explicit(&mmu->fn[rid].domain, d, memory_order_release);
	cmn_mutex_unlock(&mmu->lock);
	if (old != d)
		fn_quiesce(mmu, rid);
	return 0;
}

int iommu_detach(struct iommu *mmu, unsigned int rid)
{
	struct iommu_domain *old;

	if (!rid_ok(mmu, rid))
		return -EINVAL;
	cmn_mutex_lock(&mmu->lock);
	old = atomic_load(&mmu->fn[rid].domain);
	if (old) {
		old->attach_count--;
		atomic_store_explicit(&mmu->fn[rid].domain, NULL, memory_order_release);
	}
	cmn_mutex_unlock(&mmu->lock);
	if (old)
		fn_quiesce(mmu, rid);
	return 0;
}

struct iommu_domain *iommu_function_domain(struct iommu *mmu, unsigned int rid)
{
	if (!rid_ok(mmu, rid))
		return NULL;
	return atomic_load_explicit(&mmu->fn[rid].domain, memory_order_acquire);
}

static struct iommu_pasid_slot *pasid_slot(struct iommu_fn *fn, uint32_t pasid)
{
	for (unsigned int i = 0; i < IOMMU_MAX_PASIDS_PER_FUNC; i++)
		if (atomic_load_explicit(&fn->pasids[i].pasid, memory_order_acquire) == pasid)
			return &fn->pasids[i];
	return NULL;
}

struct iommu_domain *iommu_pasid_domain(struct iommu *mmu, unsigned int rid, uint32_t pasid)
{
	struct iommu_pasid_slot *s;

	if (!rid_ok(mmu, rid))
		return NULL;
	if (pasid == IOMMU_NO_PASID)
		return iommu_function_domain(mmu, rid);
	s = pasid_slot(&mmu->fn[rid], pasid);
	return s ? atomic_load_explicit(&s->d, memory_order_acquire) : NULL;
}

static bool pasid_args_ok(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			  struct iommu_domain *d)
{
	return rid_ok(mmu, rid) && pasid != IOMMU_NO_PASID && pasid <= IOMMU_PASID_MAX && d &&
	       d->mmu == mmu;
}

int iommu_pasid_attach(struct iommu *mmu, unsigned int rid, uint32_t pasid,
		       struct iommu_domain *d)
{
	struct iommu_fn *fn;
	struct iommu_pasid_slot *s;
	int ret = 0;

	if (!pasid_args_ok(mmu, rid, pasid, d))
		return -EINVAL;
	fn = &mmu->fn[rid];
	cmn_mutex_lock(&mmu->lock);
	if (!atomic_load(&fn->domain)) {
		ret = -EINVAL;	/* PASIDs hang off an attached requester id */
	} else if (pasid_slot(fn, pasid)) {
		ret = -EBUSY;
	} else if (!(s = pasid_slot(fn, 0))) {
		ret = -ENOSPC;
	} else {
		d->attach_count++;
		atomic_store_explicit(&s->d, d, memory_order_relaxed);
		atomic_store_explicit(&s->pasid, pasid, memory_order_release);
	}
	cmn_mutex_unlock(&mmu->lock);
	return ret;
}

int iommu_pasid_replace(struct iommu *mmu, unsigned int rid, uint32_t pasid,
			struct iommu_domain *d)
{
	struct iommu_pasid_slot *s;
	struct iommu_domain *old;

	if (!pasid_args_ok(mmu, rid, pasid, d))
		return -EINVAL;
	cmn_mutex_lock(&mmu->lock);
	s = pasid_slot(&mmu->fn[rid], pasid);
	if (!s) {
		cmn_mutex_unlock(&mmu->lock);
		return -EINVAL;
	}
	old = atomic_load(&s->d);
	d->attach_count++;
	old->attach_count--;
	atomic_store_explicit(&s->d, d, memory_order_release);
	cmn_mutex_unlock(&mmu->lock);
	if (old != d)
		fn_quiesce(mmu, rid);
	return 0;
}

int iommu_pasid_detach(struct iommu *mmu, unsigned int rid, uint32_t pasid)
{
	struct iommu_pasid_slot *s;
	struct iommu_domain *old = NULL;

	if (!rid_ok(mmu, rid) || pasid == IOMMU_NO_PASID || pasid > IOMMU_PASID_MAX)
		return -EINVAL;
	cmn_mutex_lock(&mmu->lock);
	s = pasid_slot(&mmu->fn[rid], pasid);
	if (s) {
		old = atomic_load(&s->d);
		old->attach_count--;
		atomic_store_explicit(&s->pasid, 0, memory_order_release);
		atomic_store_explicit(&s->d, NULL, memory_order_release);
	}
	cmn_mutex_unlock(&mmu->lock);
	if (old)
		fn_quiesce(mmu, rid);
	return 0;
}

/* ---- map / unmap / query ---------------------------------------------------------------- */

static int map_args_check(struct iommu_domain *d, struct iommu_memobj *mo, uint64_t offset,
			  uint64_t length, unsigned int prot, unsigned int flags, uint64_t *iova)
{
	if (!d || d->type != IOMMU_DOMAIN_PAGING || !mo || mo->mmu != d->mmu || !iova)
		return -EINVAL;
	if (!prot || (prot & ~(IOMMU_READ | IOMMU_WRITE)) || (flags & ~IOMMU_MAP_FIXED_IOVA))
		return -EINVAL;
	if (!length || !cmn_is_aligned(length | offset, IOMMU_PAGE_SIZE))
		return -EINVAL;
	if (offset > mo->size || length > mo->size - offset)
		return -EINVAL;
	if ((flags & IOMMU_MAP_FIXED_IOVA) && !cmn_is_aligned(*iova, IOMMU_PAGE_SIZE))
		return -EINVAL;
	return 0;
}

static int iommu_map_locked(struct iommu_domain *d, struct iommu_memobj *mo, uint64_t offset,
			    uint64_t length, unsigned int prot, unsigned int flags,
			    uint64_t *iova)
{
	struct iommu_area *a;
	uint64_t done = 0, start;
	int ret;

	cmn_mutex_assert_held(&d->lock);
	if (flags & IOMMU_MAP_FIXED_IOVA) {
		start = *iova;
		ret = iommu_iova_check_fixed(d, start, length);
	} else {
		ret = iommu_iova_alloc(d, length, &start);
	}
	if (ret)
		return ret;
	a = iommu_zalloc(d->mmu, sizeof(*a));
	if (!a)
		return -ENOMEM;
	*a = (struct iommu_area){ .iova = start, .length = length, .mo = mo, .offset = offset,
				  .prot = prot };
	ret = memobj_get(d->mmu, mo);
	if (ret)
		goto free_area;
	ret = iommu_pt_map(d, start, (uint64_t)mo->id << IOMMU_PA_ID_SHIFT | offset, length,
			   prot, &done);
	if (ret)
		goto unwind;
	iommu_area_insert(d, a);
	*iova = start;
	return 0;
unwind:
	/* A device may already have cached part of the half-built range. */
	iommu_pt_unmap(d, start, done);
	iommu_domain_inval(d, start, length);
	iommu_sync_wait();
	memobj_put(mo);
free_area:
	iommu_free(d->mmu, a);
	return ret;
}

int iommu_map(struct iommu_domain *d, struct iommu_memobj *mo, uint64_t offset,
	      uint64_t length, unsigned int prot, unsigned int flags, uint64_t *iova)
{
	int ret = map_args_check(d, mo, offset, length, prot, flags, iova);

	if (ret)
		return ret;
	cmn_mutex_lock(&d->lock);
	ret = iommu_map_locked(d, mo, offset, length, prot, flags, iova);
	cmn_mutex_unlock(&d->lock);
	return ret;
}

void iommu_drain_fq_locked(struct iommu_domain *d)
{
	cmn_mutex_assert_held(&d->lock);
	if (!d->nr_fq)
		return;
	if (d->nr_fq > 8) {
		iommu_domain_inval(d, 0, 0);
	} else {
		for (size_t i = 0; i < d->nr_fq; i++)
			iommu_domain_inval(d, d->fq[i].iova, d->fq[i].length);
	}
	iommu_sync_wait();
	for (size_t i = 0; i < d->nr_fq; i++)
		memobj_put(d->fq[i].mo);
	d->nr_fq = 0;
}

void iommu_domain_flush_queue(struct iommu_domain *d)
{
	if (!d || d->type != IOMMU_DOMAIN_PAGING)
		return;
	cmn_mutex_lock(&d->lock);
	iommu_drain_fq_locked(d);
	cmn_mutex_unlock(&d->lock);
}

/* Lazy: park copies of the @n areas from @first on in the flush queue. False if the
 * queue cannot grow (the caller then flushes at once, as strict mode does). */
static bool fq_push(struct iommu_domain *d, struct iommu_area *first, size_t n)
{
	size_t need = d->nr_fq + n;

	if (need > d->cap_fq) {
		size_t cap = cmn_max(need, d->cap_fq * 2);
		struct iommu_area *nf = iommu_realloc_array(d->mmu, d->fq, cap, sizeof(*nf));

		if (!nf)
			return false;
		d->fq = nf;
		d->cap_fq = cap;
	}
	for (struct iommu_area *a = first; n--; a = iommu_area_next(d, a))
		d->fq[d->nr_fq++] = *a;
	return true;
}

static int iommu_unmap_locked(struct iommu_domain *d, uint64_t iova, uint64_t last,
			      uint64_t *unmapped)
{
	struct iommu_area *first = iommu_area_first_from(d, iova), *a;
	uint64_t bytes = 0, lo, hi = 0;
	size_t n = 0;
	bool queued;

	cmn_mutex_assert_held(&d->lock);
	/* Every area that intersects must lie wholly inside: never split one. */
	for (a = first; a && a->iova <= last; a = iommu_area_next(d, a)) {
		if (a->iova < iova || a->iova + (a->length - 1) > last)
			return -ENOENT;
		bytes += a->length;
		hi = a->iova + a->length;
		n++;
	}
	if (!n)
		return -ENOENT;
	lo = first->iova;
	a = first;
	for (size_t k = 0; k < n; k++, a = iommu_area_next(d, a))
		iommu_pt_unmap(d, a->iova, a->length);
	queued = (d->flags & IOMMU_DOMAIN_LAZY) && fq_push(d, first, n);
	if (!queued) {
		iommu_domain_inval(d, lo, hi - lo);
		iommu_sync_wait();
	}
	while (n--) {
		a = iommu_area_first_from(d, lo);
		iommu_area_remove(d, a);
		if (!queued)
			memobj_put(a->mo);
		iommu_free(d->mmu, a);
	}
	if (d->nr_fq >= IOMMU_FQ_MAX)
		iommu_drain_fq_locked(d);
	*unmapped = bytes;
	return 0;
}

int iommu_unmap(struct iommu_domain *d, uint64_t iova, uint64_t length, uint64_t *unmapped)
{
	bool all = iova == 0 && length == UINT64_MAX;
	uint64_t bytes = 0;
	int ret;

	if (unmapped)
		*unmapped = 0;
	if (!d || d->type != IOMMU_DOMAIN_PAGING || !length)
		return -EINVAL;
	if (!all && (!cmn_is_aligned(iova | length, IOMMU_PAGE_SIZE) || iova + length < iova))
		return -EINVAL;
	cmn_mutex_lock(&d->lock);
	ret = iommu_unmap_locked(d, iova, all ? UINT64_MAX : iova + length - 1, &bytes);
	cmn_mutex_unlock(&d->lock);
	if (all && ret == -ENOENT)
		ret = 0;
	if (unmapped)
		*unmapped = bytes;
	return ret;
}

int iommu_query(struct iommu_domain *d, uint64_t iova, struct iommu_mapping *out)
{
	const struct iommu_area *a;
	int ret = -ENOENT;

	if (!d || !out || d->type != IOMMU_DOMAIN_PAGING)
		return -EINVAL;
	cmn_mutex_lock(&d->lock);
	a = iommu_area_first_from(d, iova);
	if (a && a->iova <= iova) {
		*out = (struct iommu_mapping){ a->iova, a->length, a->mo, a->offset, a->prot };
		ret = 0;
	}
	cmn_mutex_unlock(&d->lock);
	return ret;
}

/* ---- dirty tracking ----------------------------------------------------------------------- */

int iommu_set_dirty_tracking(struct iommu_domain *d, bool enable)
{
	if (!d || d->type != IOMMU_DOMAIN_PAGING || (d->flags & IOMMU_DOMAIN_NO_DIRTY))
		return -EOPNOTSUPP;
	/* Cached entries need no flush: every write looks at this flag and sets the leaf's
	 * dirty bit through the entry's PTE pointer. */
	atomic_store(&d->dirty_tracking, enable);
	return 0;
}

static void bitmap_put(uint8_t *map, uint64_t bit, bool v)
{
	if (v)
		map[bit / 8] |= (uint8_t)(1u << (bit % 8));
	else
		map[bit / 8] &= (uint8_t)~(1u << (bit % 8));
}

static void dirty_scan_locked(struct iommu_domain *d, uint64_t iova, uint64_t length,
			      uint64_t page_size, uint8_t *bitmap, bool clear)
{
	uint64_t end = iova + length, cur = iova;

	cmn_mutex_assert_held(&d->lock);
	for (uint64_t b = 0; b < length / page_size; b++)
		bitmap_put(bitmap, b, false);
	while (cur < end) {
		uint64_t pte, lb, le, lo, hi;
		unsigned int level;
		_Atomic uint64_t *ptep;

		if (iommu_pt_walk(d->root, cur, &pte, &level, &ptep)) {
			cur = cmn_align_down(cur, IOMMU_PAGE_SIZE) + IOMMU_PAGE_SIZE;
			continue;
		}
		lb = cmn_align_down(cur, 1ull << VGPU_IOPT_SHIFT(level));
		le = lb + (1ull << VGPU_IOPT_SHIFT(level));
		lo = cmn_max(lb, iova);
		hi = cmn_min(le, end);
		if (pte & VGPU_IOPTE_D) {
			for (uint64_t a = cmn_align_down(lo, page_size); a < hi; a += page_size)
				bitmap_put(bitmap, (a - iova) / page_size, true);
			/* A huge leaf only partly inside stays dirty: over-report, never lose. */
			if (clear && lb >= iova && le <= end)
				atomic_fetch_and(ptep, ~VGPU_IOPTE_D);
		}
		cur = hi;
	}
}

int iommu_read_dirty(struct iommu_domain *d, uint64_t iova, uint64_t length,
		     uint64_t page_size, uint8_t *bitmap, unsigned int flags)
{
	if (!d || !bitmap || (flags & ~IOMMU_DIRTY_NO_CLEAR))
		return -EINVAL;
	if (d->type != IOMMU_DOMAIN_PAGING || (d->flags & IOMMU_DOMAIN_NO_DIRTY))
		return -EOPNOTSUPP;
	if (!cmn_is_pow2(page_size) || page_size < IOMMU_PAGE_SIZE || !length ||
	    !cmn_is_aligned(iova | length, page_size) || iova + length < iova ||
	    iova + length - 1 > d->aperture_last)
		return -EINVAL;
	cmn_mutex_lock(&d->lock);
	dirty_scan_locked(d, iova, length, page_size, bitmap, !(flags & IOMMU_DIRTY_NO_CLEAR));
	cmn_mutex_unlock(&d->lock);
	return 0;
}

/* ---- batched stage-1 invalidation ---------------------------------------------------------- */

static int inv_entry_check(const uint8_t *raw, uint32_t entry_len,
			   struct iommu_inv_entry *e)
{
	memcpy(e, raw, sizeof(*e));
	/* A newer caller's longer entry is fine if the part we do not know is zero. */
	for (uint32_t i = sizeof(*e); i < entry_len; i++)
		if (raw[i])
			return -E2BIG;
	if ((e->flags & ~(IOMMU_INV_FLAG_ALL | IOMMU_INV_FLAG_LEAF)) || e->reserved)
		return -EOPNOTSUPP;
	if (!(e->flags & IOMMU_INV_FLAG_ALL) &&
	    (!e->length || e->iova + e->length < e->iova ||
	     !cmn_is_aligned(e->iova | e->length, IOMMU_PAGE_SIZE)))
		return -EINVAL;
	return 0;
}

int iommu_invalidate_batch(struct iommu_domain *d, const void *entries, uint32_t entry_len,
			   uint32_t *num)
{
	uint32_t n, done = 0;
	int ret = 0;

	if (!num)
		return -EINVAL;
	n = *num;
	*num = 0;
	if (!d || d->type != IOMMU_DOMAIN_NESTED || entry_len < sizeof(struct iommu_inv_entry) ||
	    entry_len > IOMMU_PAGE_SIZE || n > (1u << 19) || (n && !entries))
		return -EINVAL;
	for (; done < n; done++) {
		struct iommu_inv_entry e;

		ret = inv_entry_check((const uint8_t *)entries + (size_t)done * entry_len, entry_len,
				      &e);
		if (ret)
			break;
		if (e.flags & IOMMU_INV_FLAG_ALL)
			iommu_domain_inval(d, 0, 0);
		else
			iommu_domain_inval(d, e.iova, e.length);
	}
	*num = done;
	return ret;
}
