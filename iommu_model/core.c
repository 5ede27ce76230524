// SPDX-License-Identifier: MIT
/* The unit: creation, accounted allocation with fail-nth injection, counters, memory
 * objects. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/log.h"
#include "iommu_model/iommu_internal.h"

/* ---- allocation -------------------------------------------------------------------- */

/* True if this allocation is the one fail_nth asked to fail. */
bool iommu_alloc_should_fail(struct iommu *mmu)
{
	unsigned int n = atomic_load_explicit(&mmu->fail_nth, memory_order_relaxed);

	while (n) {
		if (atomic_compare_exchange_weak(&mmu->fail_nth, &n, n - 1))
			return n == 1;
	}
	return false;
}

void *iommu_zalloc(struct iommu *mmu, size_t size)
{
	void *p;

	if (iommu_alloc_should_fail(mmu))
		return NULL;
	p = calloc(1, size);
	if (p)
		atomic_fetch_add(&mmu->allocs_live, 1);
	return p;
}

void *iommu_realloc_array(struct iommu *mmu, void *p, size_t n, size_t size)
{
	void *q;

	if (n && size > SIZE_MAX / n)
		return NULL;
	if (iommu_alloc_should_fail(mmu))
		return NULL;
	q = realloc(p, n * size);
	if (q && !p)
		atomic_fetch_add(&mmu->allocs_live, 1);
	return q;
}

void iommu_free(struct iommu *mmu, void *p)
{
	if (!p)
		return;
	free(p);
	atomic_fetch_sub(&mmu->allocs_live, 1);
}

void iommu_fail_nth(struct iommu *mmu, unsigned int nth)
{
	atomic_store(&mmu->fail_nth, nth);
}

/* ---- counters ------------------------------------------------------------------------ */

static inline struct iommu_shard *iommu_shard(struct iommu *mmu)
{
	return &mmu->shard[iommu_thread_index_fast() % IOMMU_NR_SHARDS];
}

void iommu_count_atc(struct iommu *mmu, bool hit)
{
	struct iommu_shard *s = iommu_shard(mmu);

	iommu_shard_inc(hit ? &s->atc_hits : &s->atc_misses);
}

void iommu_get_stats(struct iommu *mmu, struct iommu_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned int i = 0; i < IOMMU_NR_SHARDS; i++) {
		out->iotlb_hits += atomic_load_explicit(&mmu->shard[i].hits, memory_order_relaxed);
		out->iotlb_misses += atomic_load_explicit(&mmu->shard[i].misses,
							  memory_order_relaxed);
		out->atc_hits += atomic_load_explicit(&mmu->shard[i].atc_hits,
						      memory_order_relaxed);
		out->atc_misses += atomic_load_explicit(&mmu->shard[i].atc_misses,
							memory_order_relaxed);
	}
	out->iotlb_inv = atomic_load(&mmu->iotlb_inv);
	out->ats_inv_requests = atomic_load(&mmu->ats_inv_requests);
	out->page_requests = atomic_load(&mmu->page_requests);
	out->faults = atomic_load(&mmu->faults);
	out->allocs_live = atomic_load(&mmu->allocs_live);
	out->pt_pages = atomic_load(&mmu->pt_pages);
}

void iommu_reset_counters(struct iommu *mmu)
{
	for (unsigned int i = 0; i < IOMMU_NR_SHARDS; i++) {
		atomic_store(&mmu->shard[i].hits, 0);
		atomic_store(&mmu->shard[i].misses, 0);
		atomic_store(&mmu->shard[i].atc_hits, 0);
		atomic_store(&mmu->shard[i].atc_misses, 0);
	}
	atomic_store(&mmu->iotlb_inv, 0);
	atomic_store(&mmu->ats_inv_requests, 0);
	atomic_store(&mmu->page_requests, 0);
	atomic_store(&mmu->faults, 0);
}

/* ---- the unit ------------------------------------------------------------------------ */

static int iommu_config_check(struct iommu_config *c)
{
	if (!c->iotlb_sets)
		c->iotlb_sets = 256;
	if (!c->iotlb_ways)
		c->iotlb_ways = 4;
	if (!c->atc_entries)
		c->atc_entries = 64;
	if (!c->ats_timeout_ns)
		c->ats_timeout_ns = VGPU_NSEC_PER_SEC;
	if (!c->pri_timeout_ns)
		c->pri_timeout_ns = VGPU_NSEC_PER_SEC;
	if (!cmn_is_pow2(c->iotlb_sets) || c->iotlb_sets > (1u << 20) || c->iotlb_ways > 8 ||
	    !cmn_is_pow2(c->atc_entries) || c->atc_entries > 4096)
		return -EINVAL;
	return 0;
}

int iommu_create(const struct iommu_config *cfg, struct iommu **out)
{
	struct iommu_config c = cfg ? *cfg : (struct iommu_config){ 0 };
	struct iommu *mmu;
	int ret;

	ret = iommu_config_check(&c);
	if (ret)
		return ret;
	mmu = aligned_alloc(VGPU_CACHELINE, cmn_align_up(sizeof(*mmu), VGPU_CACHELINE));
	if (!mmu)
		return -ENOMEM;
	memset(mmu, 0, sizeof(*mmu));
	mmu->cfg = c;
	cmn_mutex_init(&mmu->lock);
	ret = iommu_xcache_init(mmu, &mmu->iotlb, c.iotlb_sets, c.iotlb_ways);
	if (ret)
		goto free_mmu;
	for (unsigned int i = 0; i < IOMMU_MAX_FUNCS; i++) {
		cmn_mutex_init(&mmu->fn[i].log_lock);
		iommu_ats_init(&mmu->fn[i]);
		iommu_pri_init(&mmu->fn[i]);
	}
	*out = mmu;
	return 0;
free_mmu:
	cmn_mutex_destroy(&mmu->lock);
	free(mmu);
	return ret;
}

static void iommu_memobj_release(struct iommu_memobj *mo)
{
	if (mo->owns_mapping)
		munmap(mo->base, mo->size);
	iommu_free(mo->mmu, mo);
}

void iommu_destroy(struct iommu *mmu)
{
	if (!mmu)
		return;
	for (unsigned int i = 0; i < IOMMU_MAX_FUNCS; i++) {
		atomic_store(&mmu->fn[i].domain, NULL);
		for (unsigned int j = 0; j < IOMMU_MAX_PASIDS_PER_FUNC; j++) {
			atomic_store(&mmu->fn[i].pasids[j].pasid, 0);
			atomic_store(&mmu->fn[i].pasids[j].d, NULL);
		}
	}
	/* Children first: a parent refuses to go while nested domains use it. */
	for (int pass = 0; pass < 2; pass++) {
		struct iommu_domain *d = mmu->domains, *next;

		for (; d; d = next) {
			next = d->next;
			d->attach_count = 0;
			if ((d->type == IOMMU_DOMAIN_NESTED) == (pass == 0))
				VGPU_ASSERT(iommu_domain_free(d) == 0);
		}
	}
	for (unsigned int i = 0; i < IOMMU_MAX_MEMOBJS; i++) {
		struct iommu_memobj *mo = atomic_load(&mmu->memobjs[i]);

		if (mo)
			iommu_memobj_release(mo);
	}
	for (unsigned int i = 0; i < IOMMU_MAX_FUNCS; i++) {
		iommu_ats_fini(mmu, &mmu->fn[i]);
		iommu_pri_fini(&mmu->fn[i]);
		cmn_mutex_destroy(&mmu->fn[i].log_lock);
	}
	iommu_xcache_fini(mmu, &mmu->iotlb);
	cmn_mutex_destroy(&mmu->lock);
	free(mmu);
}

/* ---- memory objects -------------------------------------------------------------------- */

static int iommu_memobj_add(struct iommu *mmu, void *base, size_t size, bool owns,
			    struct iommu_memobj **out)
{
	struct iommu_memobj *mo = iommu_zalloc(mmu, sizeof(*mo));
	int ret = -ENOSPC;

	if (!mo)
		return -ENOMEM;
	mo->mmu = mmu;
	mo->base = base;
	mo->size = size;
	mo->owns_mapping = owns;
	cmn_mutex_lock(&mmu->lock);
	for (uint32_t id = 1; id < IOMMU_MAX_MEMOBJS; id++) {
		if (atomic_load(&mmu->memobjs[id]))
			continue;
		mo->id = id;
		atomic_store_explicit(&mmu->memobjs[id], mo, memory_order_release);
		ret = 0;
		break;
	}
	cmn_mutex_unlock(&mmu->lock);
	if (ret) {
		iommu_free(mmu, mo);
		return ret;
	}
	*out = mo;
	return 0;
}

static bool iommu_memobj_size_ok(uint64_t size)
{
	return size && size <= IOMMU_MEMOBJ_MAX_SIZE && cmn_is_aligned(size, IOMMU_PAGE_SIZE);
}

int iommu_memobj_register(struct iommu *mmu, void *base, size_t size, struct iommu_memobj **out)
{
	if (!mmu || !base || !out || !cmn_is_aligned((uintptr_t)base, IOMMU_PAGE_SIZE) ||
	    !iommu_memobj_size_ok(size))
		return -EINVAL;
	return iommu_memobj_add(mmu, base, size, false, out);
}

int iommu_memobj_register_fd(struct iommu *mmu, int fd, uint64_t offset, size_t size,
			     struct iommu_memobj **out)
{
	struct stat st;
	void *base;
	int ret;

	if (!mmu || !out || !iommu_memobj_size_ok(size) ||
	    !cmn_is_aligned(offset, IOMMU_PAGE_SIZE))
		return -EINVAL;
	if (fd < 0 || fstat(fd, &st))
		return -EBADF;
	if (offset > (uint64_t)st.st_size || size > (uint64_t)st.st_size - offset)
		return -EINVAL;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
	if (base == MAP_FAILED)
		return -errno;
	ret = iommu_memobj_add(mmu, base, size, true, out);
	if (ret)
		munmap(base, size);
	return ret;
}

/* Unregister the object registered as @id if it is @mo (any object if @mo is NULL). The
 * table slot is checked and cleared in one step, so of two racing unregisters only one
 * releases the object. */
static int iommu_memobj_remove(struct iommu *mmu, uint32_t id, struct iommu_memobj *mo)
{
	struct iommu_memobj *cur;
	int ret = 0;

	if (!id || id >= IOMMU_MAX_MEMOBJS)
		return -ENOENT;
	cmn_mutex_lock(&mmu->lock);
	cur = atomic_load(&mmu->memobjs[id]);
	if (!cur || (mo && cur != mo))
		ret = -ENOENT;
	else if (atomic_load(&cur->nr_maps))
		ret = -EBUSY;
	else
		atomic_store(&mmu->memobjs[id], NULL);
	cmn_mutex_unlock(&mmu->lock);
	if (!ret)
		iommu_memobj_release(cur);
	return ret;
}

int iommu_memobj_unregister(struct iommu_memobj *mo)
{
	if (!mo)
		return -EINVAL;
	return iommu_memobj_remove(mo->mmu, mo->id, mo);
}

int iommu_memobj_unregister_id(struct iommu *mmu, uint32_t id)
{
	return iommu_memobj_remove(mmu, id, NULL);
}

void *iommu_memobj_base(const struct iommu_memobj *mo)
{
	return mo->base;
}

size_t iommu_memobj_size(const struct iommu_memobj *mo)
{
	return mo->size;
}

uint32_t iommu_memobj_id(const struct iommu_memobj *mo)
{
	return mo->id;
}

unsigned int iommu_memobj_map_count(const struct iommu_memobj *mo)
{
	return atomic_load(&((struct iommu_memobj *)mo)->nr_maps);
}
