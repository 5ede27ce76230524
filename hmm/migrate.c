// SPDX-License-Identifier: MIT
/* hmm/migrate.c - three-phase migration (setup, copy by the caller, pages + finalize).
 *
 * To the device: collected pages of writable mappings are taken out of the process with
 * UFFDIO_MOVE into a staging area, atomically, so no CPU write can slip in between the
 * copy and the unmap (the kernel installs migration entries for the same reason); the
 * CPU now faults on them and waits. Without UFFDIO_MOVE (before Linux 6.8) they are
 * write-protected in place through userfaultfd instead: reads go on, a write faults and
 * waits (and wins), the copy is taken from the page itself, and the migrated pages are
 * dropped before their state says "device". Read-only pages cannot change under the copy
 * and are copied in place, then dropped. What does not migrate (no device memory, a
 * racing CPU access) is moved back or unprotected. To the system: the caller copies into
 * a staging area and the pages are moved (or, without UFFDIO_MOVE, copied) into the holes
 * the device pages left. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/bitops.h"
#include "common/log.h"
#include "hmm/hmm_internal.h"

/* K_PROT: mprotect backend, collected in place and made read-only (writes wait).
 * K_WP: userfaultfd without UFFDIO_MOVE, collected in place and write-protected. */
enum src_kind { K_NONE, K_STAGED, K_HOLE, K_INPLACE, K_INPLACE_ZERO, K_DEVICE, K_PROT, K_WP };

struct migrate_priv {
	struct hmm_staging *stg;
	uintptr_t base;			/* start rounded down to 2 MiB: staging offset 0 */
	uint8_t kind[HMM_MIGRATE_MAX_PAGES];
	bool vma_write[HMM_MIGRATE_MAX_PAGES];
	struct hmm_region *reg[HMM_MIGRATE_MAX_PAGES];
	uint64_t old[HMM_MIGRATE_MAX_PAGES];	/* state words before collection */
	bool direct;			/* to system without MOVE: UFFDIO_COPY straight from
					 * the device pages, no staging copy (batched helper) */
	char *out;			/* where the way back copies: stg->out, or a spare
					 * block of pages to reuse */
	char *spare;			/* that spare block, or NULL */
	bool recycle;			/* to device: keep the pages given up (batched) */
	/* pages the kernel refused to move (a protection change, a copy into place):
	 * left where they were */
	uint64_t failed[HMM_MIGRATE_MAX_PAGES / 64];
	size_t refused;			/* ... of those, the ones setup gave up (not in cpages) */
};

static uintptr_t page_addr(const struct hmm_migrate *m, size_t i)
{
	return m->start + (i << HMM_PAGE_SHIFT);
}

static char *stage_in(const struct hmm_migrate *m, const struct migrate_priv *p, size_t i)
{
	return p->stg->in + (page_addr(m, i) - p->base);
}

static char *stage_out(const struct hmm_migrate *m, const struct migrate_priv *p, size_t i)
{
	return p->out + (page_addr(m, i) - p->base);
}

static struct hmm_staging *staging_get(struct hmm_mm *mm)
{
	for (unsigned int i = 0; i < HMM_NR_STAGING; i++) {
		if (cmn_mutex_trylock(&mm->staging[i].lock))
			return &mm->staging[i];
	}
	cmn_mutex_lock(&mm->staging[0].lock);
	return &mm->staging[0];
}

static void staging_put(struct hmm_staging *s)
{
	cmn_mutex_unlock(&s->lock);
}

/* Every page needs a readable, non-special VMA (dmirror's -EINVAL rules). */
static int migrate_check_vmas(struct hmm_migrate *m, struct migrate_priv *p, bool *shared)
{
	for (uintptr_t a = m->start; a < m->end;) {
		struct hmm_vma v;

		if (hmm_vma_find(m->mm, a, &v) || v.start > a || v.special)
			return -EINVAL;
		for (; a < cmn_min(v.end, m->end); a += HMM_PAGE_SIZE) {
			size_t i = (a - m->start) >> HMM_PAGE_SHIFT;
			/* a page whose protection is the library's (a device page of the
			 * mprotect backend, an exclusive page) counts as read-write */
			bool ours = (!v.read || !v.write) && hmm_page_prot_ours(m->mm, a);

			if (!v.read && !ours)
				return -EINVAL;
			p->vma_write[i] = v.write || ours;
			shared[i] = v.shared;
		}
	}
	return 0;
}

/* Collect page @i: a state transition only, undone by uncollect(). */
static bool collect(struct hmm_migrate *m, struct migrate_priv *p, size_t i)
{
	struct hmm_region *r = p->reg[i];
	_Atomic uint64_t *w = hmm_region_word(r, page_addr(m, i));
	uint64_t old = atomic_load(w);

	if (m->flags & HMM_MIGRATE_SELECT_SYSTEM) {
		if (old != HMM_PS_SYSTEM || !atomic_compare_exchange_strong(w, &old, HMM_PS_TO_DEVICE))
			return false;
	} else {
		if (hmm_ps_state(old) != HMM_PS_DEVICE || hmm_ps_dm(old) != hmm_devmem_id(m->devmem))
			return false;
		if (!atomic_compare_exchange_strong(w, &old, (old & ~HMM_PS_STATE_MASK) | HMM_PS_TO_SYSTEM))
			return false;
	}
	p->old[i] = old;
	return true;
}

static void uncollect(struct hmm_migrate *m, struct migrate_priv *p, size_t i)
{
	atomic_store(hmm_region_word(p->reg[i], page_addr(m, i)), p->old[i]);
	hmm_uffd_wake(m->mm->uffd, page_addr(m, i), HMM_PAGE_SIZE);
	m->src[i] = 0;
	p->kind[i] = K_NONE;
	m->cpages--;
}

/* Move a run of collected writable pages into staging; pages MOVE refuses (shared with a
 * fork child, pinned) are not collected after all. */
static void isolate_run(struct hmm_migrate *m, struct migrate_priv *p, size_t i, size_t n)
{
	bool retried = false;

	while (n) {
		long moved = hmm_uffd_move(m->mm->uffd, (uintptr_t)stage_in(m, p, i),
					   page_addr(m, i), n << HMM_PAGE_SHIFT, true);
		size_t done = moved > 0 ? (size_t)moved >> HMM_PAGE_SHIFT : 0;

		for (size_t k = 0; k < done; k++)
			p->kind[i + k] = K_STAGED;
		i += done;
		n -= done;
		if (!n)
			break;
		if (done) {		/* progress: try the rest first */
			retried = false;
			continue;
		}
		/* MOVE takes exclusive anonymous pages only; a page that was shared with a
		 * fork child stays "maybe shared" until written. A write fault that changes
		 * nothing (MADV_POPULATE_WRITE) makes it exclusive again. */
		if (!retried && moved == -EBUSY &&
		    !madvise((void *)page_addr(m, i), HMM_PAGE_SIZE, MADV_POPULATE_WRITE)) {
			retried = true;
			continue;
		}
		uncollect(m, p, i);
		retried = false;
		i++;
		n--;
	}
}

/* Write-protect a run of collected writable pages in place (no UFFDIO_MOVE): from now
 * on a CPU write faults and waits. A run the kernel refuses is not collected. */
static void protect_run(struct hmm_migrate *m, struct migrate_priv *p, size_t i, size_t n)
{
	if (hmm_uffd_wp(m->mm->uffd, page_addr(m, i), n << HMM_PAGE_SHIFT, true, false)) {
		for (size_t k = 0; k < n; k++)
			uncollect(m, p, i + k);
		return;
	}
	for (size_t k = 0; k < n; k++)
		p->kind[i + k] = K_WP;
}

/* Fill src[] of the SYSTEM direction from where the data now is. */
static int describe_system_sources(struct hmm_migrate *m, struct migrate_priv *p)
{
	uint64_t pm_in[HMM_MIGRATE_MAX_PAGES], pm_at[HMM_MIGRATE_MAX_PAGES];
	size_t n = m->npages;
	int ret;

	ret = m->mm->has_move ? hmm_pagemap_read(m->mm, (uintptr_t)stage_in(m, p, 0), n, pm_in) : 0;
	if (!ret)
		ret = hmm_pagemap_read(m->mm, m->start, n, pm_at);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		uint64_t wr = p->vma_write[i] ? HMM_MIGRATE_PFN_WRITE : 0;
		uint64_t pm = p->kind[i] == K_STAGED ? pm_in[i] : pm_at[i];
		bool present = (pm & HMM_PM_PRESENT) &&
			       !(m->mm->zero_pfn && (pm & HMM_PM_PFN_MASK) == m->mm->zero_pfn);

		switch (p->kind[i]) {
		case K_STAGED:
			if (!present)
				p->kind[i] = K_HOLE;
			break;
		case K_INPLACE:
			if (!present)
				p->kind[i] = K_INPLACE_ZERO;
			break;
		case K_WP:	/* absent: an empty page (src without VALID) */
			break;
		default:
			continue;
		}
		m->src[i] = HMM_MIGRATE_PFN_MIGRATE | wr |
			    (present ? HMM_MIGRATE_PFN_VALID : 0);
	}
	return 0;
}

static int setup_system(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages;) {
		size_t k = 0;

		if (p->kind[i] != K_INPLACE || !p->vma_write[i]) {
			i++;
			continue;
		}
		while (i + k < m->npages && p->kind[i + k] == K_INPLACE && p->vma_write[i + k])
			k++;
		if (m->mm->has_move)
			isolate_run(m, p, i, k);
		else
			protect_run(m, p, i, k);
		i += k;
	}
	p->stg->in_dirty = m->mm->has_move;
	return describe_system_sources(m, p);
}

/* Length of the run of pages from @i with kind @k and MIGRATE set or not as @mig. */
static size_t run_len(const struct hmm_migrate *m, const struct migrate_priv *p, size_t i,
		      uint8_t k, bool mig)
{
	size_t n = 0;

	while (i + n < m->npages && p->kind[i + n] == k &&
	       !!(m->src[i + n] & HMM_MIGRATE_PFN_MIGRATE) == mig)
		n++;
	return n;
}

/* mprotect backend: collected pages become read-only, so a CPU write waits (and wins)
 * while reads go on; the data is copied from the page itself. A page the kernel keeps
 * writable (vm.max_map_count: the change would split a VMA) is not collected: a write
 * could land after the copy. */
static void setup_system_prot(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages; i++) {
		if (p->kind[i] != K_INPLACE)
			continue;
		p->kind[i] = K_PROT;
		m->src[i] = HMM_MIGRATE_PFN_MIGRATE | HMM_MIGRATE_PFN_VALID | HMM_MIGRATE_PFN_WRITE;
	}
	for (size_t i = 0; i < m->npages;) {
		size_t k = run_len(m, p, i, K_PROT, true);
		uint64_t refused[HMM_MIGRATE_MAX_PAGES / 64];

		if (k && hmm_prot_pages(page_addr(m, i), k, PROT_READ, refused)) {
			for (size_t j = 0; j < k; j++) {
				if (!cmn_test_bit(refused, j))
					continue;
				uncollect(m, p, i + j);
				cmn_set_bit(p->failed, i + j);
				p->refused++;
			}
		}
		i += k ? k : 1;
	}
}

static void setup_device(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages; i++) {
		if (p->kind[i] != K_DEVICE)
			continue;
		m->src[i] = hmm_migrate_pfn(hmm_ps_page(p->old[i])) | HMM_MIGRATE_PFN_MIGRATE |
			    HMM_MIGRATE_PFN_DEVICE |
			    ((p->old[i] & HMM_PS_DEV_WRITE) ? HMM_MIGRATE_PFN_WRITE : 0);
	}
}

static int migrate_args_check(const struct hmm_migrate *m)
{
	if (!m || !m->mm || !m->src || !m->dst || !m->devmem || m->start >= m->end ||
	    !cmn_is_aligned(m->start, HMM_PAGE_SIZE) || !cmn_is_aligned(m->end, HMM_PAGE_SIZE))
		return -EINVAL;
	if ((m->end - m->start) >> HMM_PAGE_SHIFT > HMM_MIGRATE_MAX_PAGES)
		return -EINVAL;
	if (m->flags != HMM_MIGRATE_SELECT_SYSTEM && m->flags != HMM_MIGRATE_SELECT_DEVICE_PRIVATE)
		return -EINVAL;
	return 0;
}

int hmm_migrate_setup(struct hmm_migrate *m)
{
	bool shared[HMM_MIGRATE_MAX_PAGES];
	struct migrate_priv *p;
	int ret = migrate_args_check(m);

	if (ret)
		return ret;
	m->npages = (m->end - m->start) >> HMM_PAGE_SHIFT;
	m->cpages = 0;
	memset(m->src, 0, m->npages * sizeof(*m->src));
	memset(m->dst, 0, m->npages * sizeof(*m->dst));
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	ret = migrate_check_vmas(m, p, shared);
	if (ret)
		goto free_priv;

	struct hmm_notify_range nr = {
		.start = m->start, .end = m->end, .event = HMM_EVENT_MIGRATE,
		.owner = m->flags & HMM_MIGRATE_SELECT_SYSTEM ? hmm_devmem_owner(m->devmem) : NULL,
		.flags = HMM_NOTIFY_BLOCKABLE,
	};
	hmm_notify_invalidate(m->mm, &nr);

	p->base = cmn_align_down(m->start, HMM_BLOCK_SIZE);
	p->stg = staging_get(m->mm);
	p->out = p->stg->out;
	m->priv = p;
	hmm_mm_use(m->mm);	/* until finalize: p->reg[] */
	for (size_t i = 0; i < m->npages; i++) {
		struct hmm_region *r = hmm_region_find(page_addr(m, i));

		if (!r || r->mm != m->mm || (shared[i] && !r->alias) ||
		    !hmm_region_movable(r, m->flags & HMM_MIGRATE_SELECT_SYSTEM))
			continue;
		p->reg[i] = r;
		if (!collect(m, p, i))
			continue;
		p->kind[i] = m->flags & HMM_MIGRATE_SELECT_SYSTEM ? K_INPLACE : K_DEVICE;
		m->cpages++;
	}
	if ((m->flags & HMM_MIGRATE_SELECT_SYSTEM) && hmm_mm_prot(m->mm)) {
		setup_system_prot(m, p);
	} else if (m->flags & HMM_MIGRATE_SELECT_SYSTEM) {
		ret = setup_system(m, p);
		if (ret) {
			hmm_migrate_finalize(m);	/* puts everything back */
			return ret;
		}
	} else {
		setup_device(m, p);
	}
	return 0;
free_priv:
	free(p);
	return ret;
}

void *hmm_migrate_src_ptr(struct hmm_migrate *m, size_t i)
{
	struct migrate_priv *p = m->priv;

	switch (p->kind[i]) {
	case K_STAGED:
		return stage_in(m, p, i);
	case K_INPLACE:
	case K_PROT:
		return (void *)page_addr(m, i);
	case K_WP:
		return (m->src[i] & HMM_MIGRATE_PFN_VALID) ? (void *)page_addr(m, i) : NULL;
	case K_DEVICE:
		return hmm_devmem_page_ptr(m->devmem, hmm_migrate_pfn_page(m->src[i]));
	default:
		return NULL;
	}
}

void *hmm_migrate_dst_ptr(struct hmm_migrate *m, size_t i)
{
	return stage_out(m, m->priv, i);
}

/* Mark pages [i, i + n) whose bit is set in @left (indexed from @i) as not moved: their
 * state goes back to what it was at finalize. */
static void fail_pages(struct hmm_migrate *m, struct migrate_priv *p, size_t i, size_t n,
		       const uint64_t *left)
{
	for (size_t k = 0; k < n; k++) {
		if (!cmn_test_bit(left, k))
			continue;
		m->src[i + k] &= ~HMM_MIGRATE_PFN_MIGRATE;
		cmn_set_bit(p->failed, i + k);
	}
}

/* After a copy into place that failed partway, set in @left (indexed from @i) the pages
 * of [i, i + n) that did not get a page: they were all missing before. */
static void left_by_pagemap(struct hmm_migrate *m, size_t i, size_t n, uint64_t *left)
{
	uint64_t pm[HMM_MIGRATE_MAX_PAGES];
	bool known = !hmm_pagemap_read(m->mm, page_addr(m, i), n, pm);

	for (size_t k = 0; k < n; k++) {
		if (!known || !(pm[k] & (HMM_PM_PRESENT | HMM_PM_SWAP)))
			cmn_set_bit(left, k);
	}
}

/* Put system pages [i, i+n) from staging "out" into their (missing) places. Pages the
 * kernel refuses to take (no memory; mprotect backend: vm.max_map_count) stay on the
 * device: they are not migrated. */
static void install_system_run(struct hmm_migrate *m, struct migrate_priv *p, size_t i,
			       size_t n)
{
	uint64_t left[HMM_MIGRATE_MAX_PAGES / 64] = { 0 };
	size_t len = n << HMM_PAGE_SHIFT, done = 0;
	long moved = 0, copied;

	if (p->reg[i]->prot) {
		/* data through the write view first, then the page is accessible */
		if (hmm_prot_write(m->mm, p->reg[i], page_addr(m, i), stage_out(m, p, i), len))
			memset(left, 0xff, sizeof(left));
		else
			hmm_prot_pages(page_addr(m, i), n, PROT_READ | PROT_WRITE, left);
		fail_pages(m, p, i, n, left);
		return;
	}
	if (p->direct) {
		bool failed = false;

		/* one copy instead of two: runs of contiguous device pages, a long run
		 * shared with the copier thread */
		for (size_t j = 0; j < n;) {
			uint64_t pg = hmm_migrate_pfn_page(m->src[i + j]);
			const char *src = hmm_devmem_page_ptr(m->devmem, pg);
			size_t k = 1;

			while (j + k < n && hmm_migrate_pfn_page(m->src[i + j + k]) == pg + k)
				k++;
			if (hmm_copier_copy(m->mm, page_addr(m, i + j), src, k << HMM_PAGE_SHIFT))
				failed = true;
			j += k;
		}
		/* the copier's pieces end where each failed: ask the page tables */
		if (failed) {
			left_by_pagemap(m, i, n, left);
			fail_pages(m, p, i, n, left);
		}
		return;
	}
	if (p->vma_write[i] && m->mm->has_move)
		moved = hmm_uffd_move(m->mm->uffd, page_addr(m, i), (uintptr_t)stage_out(m, p, i),
				      len, false);
	if (moved > 0)
		done = (size_t)moved >> HMM_PAGE_SHIFT;
	/* read-only mappings cannot be MOVE targets: copy the rest */
	if (done < n) {
		copied = hmm_uffd_copy(m->mm->uffd, page_addr(m, i + done),
				       stage_out(m, p, i + done), (n - done) << HMM_PAGE_SHIFT,
				       false);
		if (copied > 0)
			done += (size_t)copied >> HMM_PAGE_SHIFT;
	}
	for (size_t k = done; k < n; k++)
		cmn_set_bit(left, k);
	fail_pages(m, p, i, n, left);
}

/* mprotect backend: migrated pages lose all access before their state can say "device"
 * (a CPU access from now on waits, and then faults them back). A page the kernel leaves
 * accessible (vm.max_map_count) does not migrate: a CPU write to it would go unseen. */
static void protect_migrated(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages;) {
		size_t k = run_len(m, p, i, K_PROT, true);
		uint64_t left[HMM_MIGRATE_MAX_PAGES / 64];

		if (k && hmm_prot_pages(page_addr(m, i), k, PROT_NONE, left))
			fail_pages(m, p, i, k, left);
		i += k ? k : 1;
	}
}

void hmm_migrate_pages(struct hmm_migrate *m)
{
	struct migrate_priv *p = m->priv;

	for (size_t i = 0; i < m->npages; i++) {
		if (!(m->src[i] & HMM_MIGRATE_PFN_MIGRATE))
			continue;
		if (!(m->dst[i] & HMM_MIGRATE_PFN_VALID)) {
			m->src[i] &= ~HMM_MIGRATE_PFN_MIGRATE;
			continue;
		}
		if (m->flags & HMM_MIGRATE_SELECT_SYSTEM) {
			uint64_t w = atomic_load(hmm_region_word(p->reg[i], page_addr(m, i)));

			if (w & HMM_PS_CPU_WON)	/* the CPU wins a race with the device */
				m->src[i] &= ~HMM_MIGRATE_PFN_MIGRATE;
		}
	}
	if (m->flags & HMM_MIGRATE_SELECT_SYSTEM) {
		protect_migrated(m, p);
		return;
	}
	for (size_t i = 0; i < m->npages;) {
		size_t k = 0;

		while (i + k < m->npages && (m->src[i + k] & HMM_MIGRATE_PFN_MIGRATE) &&
		       p->vma_write[i + k] == p->vma_write[i] && p->reg[i + k] == p->reg[i])
			k++;
		if (k)
			install_system_run(m, p, i, k);
		i += k ? k : 1;
	}
}

static bool copied_in_place(const struct migrate_priv *p, size_t i)
{
	return p->kind[i] == K_INPLACE || p->kind[i] == K_INPLACE_ZERO || p->kind[i] == K_WP;
}

/* Drop the CPU copies of committed pages copied in place (read-only, write-protected);
 * they must be gone before the device state is published, or a fault back would find
 * them and be lost to the zap. One madvise per run. */
static void zap_inplace(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages;) {
		size_t k = 0;

		while (i + k < m->npages && (m->src[i + k] & HMM_MIGRATE_PFN_MIGRATE) &&
		       copied_in_place(p, i + k))
			k++;
		if (k)
			madvise((void *)page_addr(m, i), k << HMM_PAGE_SHIFT, MADV_DONTNEED);
		i += k ? k : 1;
	}
}

/* Write-protected pages that stay get their write access back before their state says
 * "system"; the writers waiting on them are woken at the end of finalize. */
static void unprotect_kept(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages;) {
		size_t k = run_len(m, p, i, K_WP, false);

		if (k)
			hmm_uffd_wp(m->mm->uffd, page_addr(m, i), k << HMM_PAGE_SHIFT, false, false);
		i += k ? k : 1;
	}
}

/* mprotect backend: the pages that stay get their access back before their state says
 * "system" (an access waiting on them then proceeds). Each run is exactly a read-only VMA
 * setup made (the migrated pages around it are PROT_NONE already), so no VMA splits. */
static void unprotect_kept_prot(struct hmm_migrate *m, struct migrate_priv *p)
{
	for (size_t i = 0; i < m->npages;) {
		size_t k = run_len(m, p, i, K_PROT, false);
		uint64_t left[HMM_MIGRATE_MAX_PAGES / 64];

		if (k && hmm_prot_pages(page_addr(m, i), k, PROT_READ | PROT_WRITE, left))
			cmn_warn("hmm: %#lx: the kernel keeps pages read-only after a migration",
				 (unsigned long)page_addr(m, i));
		i += k ? k : 1;
	}
}

/* A whole aligned 2 MiB block that went to the device left all its pages in staging:
 * move them to an empty spare block (one PMD) for a migration back to copy into,
 * instead of dropping them. True if staging is empty again. */
static bool recycle_staged(struct hmm_migrate *m, struct migrate_priv *p, size_t done)
{
	char *blk;

	if (!p->recycle || done != HMM_BLOCK_PAGES || m->npages != HMM_BLOCK_PAGES ||
	    m->start != p->base)
		return false;
	for (size_t i = 0; i < m->npages; i++) {
		if (p->kind[i] != K_STAGED)
			return false;
	}
	blk = hmm_spare_take(m->mm, false);
	if (!blk)
		return false;
	if (hmm_uffd_move(m->mm->uffd, (uintptr_t)blk, (uintptr_t)p->stg->in, HMM_BLOCK_SIZE,
			  false) == (long)HMM_BLOCK_SIZE) {
		hmm_spare_put(m->mm, blk, true);
		return true;
	}
	/* part of it moved: neither block is of use, both are dropped */
	madvise(blk, HMM_BLOCK_SIZE, MADV_DONTNEED);
	hmm_spare_put(m->mm, blk, false);
	return false;
}

static void finalize_system(struct hmm_migrate *m, struct migrate_priv *p)
{
	unsigned int dm_id = hmm_devmem_id(m->devmem);
	size_t done = 0;

	zap_inplace(m, p);
	unprotect_kept_prot(m, p);
	unprotect_kept(m, p);
	for (size_t i = 0; i < m->npages; i++) {
		_Atomic uint64_t *w;

		if (p->kind[i] == K_NONE)
			continue;
		w = hmm_region_word(p->reg[i], page_addr(m, i));
		if (m->src[i] & HMM_MIGRATE_PFN_MIGRATE) {
			atomic_store(w, hmm_ps_make_device(dm_id, hmm_migrate_pfn_page(m->dst[i]),
						       p->vma_write[i]));
			done++;
			continue;
		}
		/* back into place; a copy where the move is refused, before staging is
		 * dropped with the only copy of the page */
		if (p->kind[i] == K_STAGED &&
		    hmm_uffd_move(m->mm->uffd, page_addr(m, i), (uintptr_t)stage_in(m, p, i),
				  HMM_PAGE_SIZE, false) != (long)HMM_PAGE_SIZE)
			hmm_uffd_copy(m->mm->uffd, page_addr(m, i), stage_in(m, p, i),
				      HMM_PAGE_SIZE, false);
		if (m->dst[i] & HMM_MIGRATE_PFN_VALID) {
			uint64_t pg = hmm_migrate_pfn_page(m->dst[i]);

			hmm_devmem_free(m->devmem, &pg, 1);
			m->dst[i] = 0;
		}
		atomic_store(w, HMM_PS_SYSTEM);
	}
	if (p->stg->in_dirty) {
		if (!recycle_staged(m, p, done))
			madvise(p->stg->in, 2 * HMM_BLOCK_SIZE, MADV_DONTNEED);
		p->stg->in_dirty = false;
	}
	atomic_fetch_add_explicit(&m->mm->c_to_dev, done, memory_order_relaxed);
}

static void finalize_device(struct hmm_migrate *m, struct migrate_priv *p)
{
	size_t done = 0;

	for (size_t i = 0; i < m->npages; i++) {
		_Atomic uint64_t *w;

		if (p->kind[i] != K_DEVICE)
			continue;
		w = hmm_region_word(p->reg[i], page_addr(m, i));
		if (m->src[i] & HMM_MIGRATE_PFN_MIGRATE) {
			uint64_t pg = hmm_ps_page(p->old[i]);

			atomic_store(w, HMM_PS_SYSTEM);
			hmm_devmem_free(m->devmem, &pg, 1);
			done++;
		} else {
			atomic_store(w, p->old[i]);
		}
	}
	/* what the caller filled but did not install */
	if (p->spare) {
		madvise(p->spare, HMM_BLOCK_SIZE, MADV_DONTNEED);
		hmm_spare_put(m->mm, p->spare, false);
	} else {
		madvise(p->stg->out, 2 * HMM_BLOCK_SIZE, MADV_DONTNEED);
	}
	atomic_fetch_add_explicit(&m->mm->c_to_sys, done, memory_order_relaxed);
}

void hmm_migrate_finalize(struct hmm_migrate *m)
{
	struct migrate_priv *p = m->priv;

	if (!p)
		return;
	if (m->flags & HMM_MIGRATE_SELECT_SYSTEM)
		finalize_system(m, p);
	else
		finalize_device(m, p);
	/* CPU accesses that waited on collected pages retry now */
	hmm_uffd_wake(m->mm->uffd, m->start, m->end - m->start);
	staging_put(p->stg);
	hmm_mm_unuse(m->mm);
	free(p);
	m->priv = NULL;
}

/* ---- batched helpers ------------------------------------------------------------------ */

static const char zero_page[HMM_PAGE_SIZE];

/* Device pages for the collected entries: one chunk for a whole 2 MiB batch, else single
 * pages, as many as the pool gives. Returns pages allocated. */
static size_t alloc_dst(struct hmm_migrate *m, struct hmm_migrate_result *res)
{
	uint64_t pages[HMM_MIGRATE_MAX_PAGES];
	size_t want = m->cpages, got = 0;
	bool chunk = want == HMM_BLOCK_PAGES;

	if (!want)
		return 0;
	/* not zeroed: copy_to_device() writes every page (zeros for an empty one) */
	if (chunk && !hmm_devmem_alloc_overwrite(m->devmem, want, true, pages)) {
		got = want;
		res->chunks++;
	} else if (!hmm_devmem_alloc_overwrite(m->devmem, want, false, pages)) {
		got = want;
		chunk = false;
	} else {
		chunk = false;
		while (got < want && !hmm_devmem_alloc_overwrite(m->devmem, 1, false, &pages[got]))
			got++;
	}
	for (size_t i = 0, k = 0; i < m->npages && k < got; i++) {
		if (!(m->src[i] & HMM_MIGRATE_PFN_MIGRATE))
			continue;
		m->dst[i] = hmm_migrate_pfn(pages[k++]) | (m->src[i] & HMM_MIGRATE_PFN_WRITE) |
			    (chunk ? HMM_MIGRATE_PFN_COMPOUND : 0);
	}
	res->alloc_failed += want - got;
	return got;
}

/* Copy collected sources to their device pages, runs of contiguous pages at once. */
static void copy_to_device(struct hmm_migrate *m)
{
	for (size_t i = 0; i < m->npages;) {
		char *src = hmm_migrate_src_ptr(m, i);
		uint64_t pg = hmm_migrate_pfn_page(m->dst[i]);
		size_t k = 1;

		if (!(m->dst[i] & HMM_MIGRATE_PFN_VALID)) {
			i++;
			continue;
		}
		if (!src) {	/* an empty page: clear instead of copying */
			hmm_devmem_copy(m->devmem, HMM_COPY_TO_DEVICE, (void *)zero_page, pg, 1);
			i++;
			continue;
		}
		while (i + k < m->npages && (m->dst[i + k] & HMM_MIGRATE_PFN_VALID) &&
		       hmm_migrate_pfn_page(m->dst[i + k]) == pg + k &&
		       hmm_migrate_src_ptr(m, i + k) == src + (k << HMM_PAGE_SHIFT))
			k++;
		if (src == (char *)page_addr(m, i)) {	/* in place: fenced by protection */
			HMM_FENCED_READ_BEGIN();
			hmm_devmem_copy(m->devmem, HMM_COPY_TO_DEVICE, src, pg, k);
			HMM_FENCED_READ_END();
		} else {
			hmm_devmem_copy(m->devmem, HMM_COPY_TO_DEVICE, src, pg, k);
		}
		i += k;
	}
}

static void count_result(const struct hmm_migrate *m, struct hmm_migrate_result *res)
{
	const struct migrate_priv *p = m->priv;

	/* the pages setup gave up were collected too: the counts add up to cpages */
	res->cpages += m->cpages + p->refused;
	res->failed += p->refused;
	for (size_t i = 0; i < m->npages; i++) {
		if (m->src[i] & HMM_MIGRATE_PFN_MIGRATE)
			res->migrated++;
		else if (p->kind[i] != K_NONE && cmn_test_bit(p->failed, i))
			res->failed++;
		else if (m->dst[i] & HMM_MIGRATE_PFN_VALID)
			res->cpu_won++;
	}
}

static int range_args_check(struct hmm_mm *mm, struct hmm_devmem *dm, void *addr, size_t len,
			    struct hmm_migrate_result *res)
{
	if (!mm || !dm || !res || !len || !cmn_is_aligned((uintptr_t)addr, HMM_PAGE_SIZE) ||
	    !cmn_is_aligned(len, HMM_PAGE_SIZE))
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	res->npages = len >> HMM_PAGE_SHIFT;
	return 0;
}

static int migrate_batch_to_device(struct hmm_mm *mm, struct hmm_devmem *dm, uintptr_t a,
				   uintptr_t e, struct hmm_migrate_result *res)
{
	uint64_t src[HMM_MIGRATE_MAX_PAGES], dst[HMM_MIGRATE_MAX_PAGES];
	struct hmm_migrate m = { .mm = mm, .start = a, .end = e, .src = src, .dst = dst,
				 .devmem = dm, .flags = HMM_MIGRATE_SELECT_SYSTEM };
	int ret = hmm_migrate_setup(&m);

	if (ret)
		return ret;
	((struct migrate_priv *)m.priv)->recycle = true;
	alloc_dst(&m, res);
	copy_to_device(&m);
	hmm_migrate_pages(&m);
	count_result(&m, res);
	hmm_migrate_finalize(&m);
	return 0;
}

int hmm_migrate_to_device(struct hmm_mm *mm, struct hmm_devmem *dm, void *addr, size_t len,
			  struct hmm_migrate_result *res)
{
	uintptr_t start = (uintptr_t)addr, end = start + len;
	int ret = range_args_check(mm, dm, addr, len, res);

	for (uintptr_t a = start; !ret && a < end;) {
		uintptr_t e = cmn_min(cmn_align_down(a, HMM_BLOCK_SIZE) + HMM_BLOCK_SIZE, end);

		ret = migrate_batch_to_device(mm, dm, a, e, res);
		a = e;
	}
	if (!ret && res->cpages && res->alloc_failed == res->cpages)
		ret = -ENOMEM;
	return ret;
}

/* Copy runs of device pages into staging, each run faulted in first when it is fresh:
 * the kernel clears a fresh huge page, and a copy that then stores into the cleared lines
 * pays a read for ownership of each; faulted in beforehand, the copy streams past the
 * cache (on the 2-vCPU Xeon guest, per CPU second: populate then a streaming copy
 * 4.4 GB/s, memcpy into fresh pages 3.6-3.9). Kept pages (a spare block) exist already.
 * Where the kernel lacks MADV_POPULATE_WRITE the copy faults them in as before. */
static void copy_to_system(struct hmm_migrate *m)
{
	bool fresh = !((struct migrate_priv *)m->priv)->spare;

	for (size_t i = 0; i < m->npages;) {
		size_t k = 1;
		uint64_t pg = hmm_migrate_pfn_page(m->src[i]);

		if (!(m->src[i] & HMM_MIGRATE_PFN_MIGRATE)) {
			i++;
			continue;
		}
		while (i + k < m->npages && (m->src[i + k] & HMM_MIGRATE_PFN_MIGRATE) &&
		       hmm_migrate_pfn_page(m->src[i + k]) == pg + k)
			k++;
		if (fresh)
			(void)madvise(hmm_migrate_dst_ptr(m, i), k << HMM_PAGE_SHIFT,
				      MADV_POPULATE_WRITE);
		hmm_devmem_copy(m->devmem, HMM_COPY_TO_SYSTEM, hmm_migrate_dst_ptr(m, i), pg, k);
		for (size_t j = i; j < i + k; j++)
			m->dst[j] = HMM_MIGRATE_PFN_VALID;
		i += k;
	}
}

static int migrate_batch_to_system(struct hmm_mm *mm, struct hmm_devmem *dm, uintptr_t a,
				   uintptr_t e, struct hmm_migrate_result *res)
{
	uint64_t src[HMM_MIGRATE_MAX_PAGES], dst[HMM_MIGRATE_MAX_PAGES];
	struct hmm_migrate m = { .mm = mm, .start = a, .end = e, .src = src, .dst = dst,
				 .devmem = dm, .flags = HMM_MIGRATE_SELECT_DEVICE_PRIVATE };
	int ret = hmm_migrate_setup(&m);
	struct migrate_priv *p;

	if (ret)
		return ret;
	p = m.priv;
	/* without UFFDIO_MOVE the pages are copied into place anyway: copy them once,
	 * from the device pages themselves (as a CPU fault does) */
	p->direct = !mm->has_move && !hmm_mm_prot(mm);
	if (p->direct) {
		for (size_t i = 0; i < m.npages; i++)
			if (m.src[i] & HMM_MIGRATE_PFN_MIGRATE)
				m.dst[i] = HMM_MIGRATE_PFN_VALID;
	} else {
		/* a whole block copies into kept pages if there are some: fresh ones would
		 * cost the kernel a clear of 2 MiB first; the filler keeps some ready for
		 * the blocks after this one */
		if (mm->has_move && !hmm_mm_prot(mm) && m.start == p->base &&
		    m.npages == HMM_BLOCK_PAGES) {
			p->spare = hmm_spare_take(mm, true);
			if (p->spare)
				p->out = p->spare;
			hmm_spare_ask(mm);
		}
		copy_to_system(&m);
	}
	hmm_migrate_pages(&m);
	count_result(&m, res);
	hmm_migrate_finalize(&m);
	return 0;
}

int hmm_migrate_to_system(struct hmm_mm *mm, struct hmm_devmem *dm, void *addr, size_t len,
			  struct hmm_migrate_result *res)
{
	uintptr_t start = (uintptr_t)addr, end = start + len;
	int ret = range_args_check(mm, dm, addr, len, res);

	for (uintptr_t a = start; !ret && a < end;) {
		uintptr_t e = cmn_min(cmn_align_down(a, HMM_BLOCK_SIZE) + HMM_BLOCK_SIZE, end);

		ret = migrate_batch_to_system(mm, dm, a, e, res);
		a = e;
	}
	return ret;
}

/* True if a page of [a, e) in @r lives on @dm. */
static bool batch_has_pages_of(struct hmm_region *r, uintptr_t a, uintptr_t e, unsigned int id)
{
	for (; a < e; a += HMM_PAGE_SIZE) {
		uint64_t w = atomic_load(hmm_region_word(r, a));

		if (hmm_ps_state(w) == HMM_PS_DEVICE && hmm_ps_dm(w) == id)
			return true;
	}
	return false;
}

static long evict_all(struct hmm_mm *mm, struct hmm_devmem *dm)
{
	unsigned int id = hmm_devmem_id(dm);
	long total = 0;

	for (unsigned int i = 0; i < HMM_MAX_REGIONS; i++) {
		struct hmm_region *r = atomic_load(&hmm_regions[i]);

		/* a region being removed brings its pages back itself */
		if (!r || r->mm != mm || !hmm_region_movable(r, false))
			continue;
		for (uintptr_t a = r->start; a < r->end;) {
			uintptr_t e = cmn_min(cmn_align_down(a, HMM_BLOCK_SIZE) + HMM_BLOCK_SIZE,
					       r->end);
			struct hmm_migrate_result res = { 0 };

			/* retried until nothing of @dm is left: device memory is never pinned;
			 * pages a migration cannot collect (shared after the VMA changed) come
			 * back the way a CPU fault brings them */
			while (hmm_region_movable(r, false) && batch_has_pages_of(r, a, e, id)) {
				size_t moved = res.migrated;

				if (migrate_batch_to_system(mm, dm, a, e, &res) || res.migrated == moved)
					total += hmm_fault_back_range(mm, r, a, e, true);
			}
			total += (long)res.migrated;
			a = e;
		}
	}
	return total;
}

long hmm_devmem_evict_all(struct hmm_mm *mm, struct hmm_devmem *dm)
{
	long n;

	hmm_mm_use(mm);
	n = evict_all(mm, dm);
	hmm_mm_unuse(mm);
	return n;
}
