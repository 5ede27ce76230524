// SPDX-License-Identifier: MIT
/* Managed memory (vgpu_vf_managed.h): allocations in the VF's DMA memory that migrate
 * between system memory and a VRAM pool, on hmm/.
 *
 * The pieces: one hmm mm per VF on the mprotect backend (DMA memory is a shared mapping
 * userfaultfd cannot serve inside a VM; the library writes returning data through a second
 * view of the same pages, made by managed_alloc.c); an hmm_devmem over a VRAM
 * allocation seen through the VRAM aperture; an hmm_mirror whose "device page table" is
 * the GPU's own: at allocation the range is mapped with 4 KiB volatile PTEs (so every
 * table exists from then on) and the CPU address of each leaf PTE is remembered; the
 * mirror then only stores PTE words, which is safe from the SIGSEGV handler's
 * invalidations (no lock, no allocation, no TLB to flush: volatile PTEs are not cached).
 *
 * GPU faults reach us through the driver's MMU-fault hook (managed_fault_hook, called
 * with the mailbox lock held: it only queues); a service thread, or the caller of
 * vgpu_managed_service(), drains the queue in batches through hmm_mirror_service_faults()
 * and replays with VGPU_RM_CTRL_FAULT_REPLAY. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <vgpu/gmmu.h>
#include <vgpu/rm.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "hmm/hmm.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/managed_internal.h"

#define MANAGED_DEFAULT_POOL	(8ull << 20)
#define MANAGED_QUEUE		VGPU_ARRAY_SIZE(((struct vf_managed *)0)->queue)
#define MANAGED_WAIT_NS		(2ull * 1000 * 1000)
/* Late replays (replay_late()): the first one MANAGED_WAIT_NS after a serviced batch, each
 * gap twice the one before up to MANAGED_LATE_GAP_MAX_NS, only while a channel has work
 * pending and none later than MANAGED_LATE_WINDOW_NS after the batch. */
#define MANAGED_LATE_GAP_MAX_NS	(32ull * 1000 * 1000)
#define MANAGED_LATE_WINDOW_NS	(2000ull * 1000 * 1000)

/* ---- GPU page-table entries ----------------------------------------------------------- */

/* The allocation holding CPU address @a, or NULL. Slots change only with no fault
 * possible on them (before the region exists, after it is gone); the allocation stays
 * while the caller holds svc_lock or is in a read section. */
static struct vgpu_managed *alloc_of_cpu(struct vf_managed *st, uintptr_t a)
{
	for (unsigned int i = 0; i < MANAGED_MAX_ALLOCS; i++) {
		struct vgpu_managed *m = atomic_load(&st->allocs[i]);

		if (m && a >= (uintptr_t)m->cpu && a < (uintptr_t)m->cpu + m->size)
			return m;
	}
	return NULL;
}

/* The allocation mapped at GPU VA @va, or NULL. Under svc_lock. */
static struct vgpu_managed *alloc_of_va(struct vf_managed *st, uint64_t va)
{
	cmn_mutex_assert_held(&st->svc_lock);
	for (unsigned int i = 0; i < MANAGED_MAX_ALLOCS; i++) {
		struct vgpu_managed *m = atomic_load(&st->allocs[i]);

		if (m && va >= m->va && va < m->va + m->size)
			return m;
	}
	return NULL;
}

/* Mirror callback: the GPU loses [r->start, r->end). Any context, the signal handler's
 * included: plain stores into VRAM. */
static void mirror_invalidate(struct hmm_mirror *mi, const struct hmm_notify_range *r)
{
	struct vf_managed *st = mi->priv;
	unsigned int rd = managed_read_begin(st);

	for (unsigned int i = 0; i < MANAGED_MAX_ALLOCS; i++) {
		struct vgpu_managed *m = atomic_load(&st->allocs[i]);
		uintptr_t s, e;

		if (!m)
			continue;
		s = cmn_max(r->start, (uintptr_t)m->cpu);
		e = cmn_min(r->end, (uintptr_t)m->cpu + m->size);
		for (uintptr_t a = s; a < e; a += HMM_PAGE_SIZE)
			atomic_store_explicit(m->ptes[(a - (uintptr_t)m->cpu) >> HMM_PAGE_SHIFT], 0,
					      memory_order_release);
	}
	managed_read_end(st, rd);
}

/* The PTE word for one hmm_range_fault output word @pfn of page @a in @m. */
static uint64_t pte_of(struct vf_managed *st, struct vgpu_managed *m, uintptr_t a, uint64_t pfn)
{
	uint64_t flags = VGPU_GMMU_VOLATILE | (pfn & HMM_PFN_WRITE ? 0 : VGPU_GMMU_RO);

	if (pfn & HMM_PFN_DEVICE)
		return vgpu_gmmu_pte(st->pool_pa + ((pfn & HMM_PFN_VALUE_MASK) << HMM_PAGE_SHIFT),
				     VGPU_GMMU_APER_VRAM | flags);
	/* a system page of DMA memory: the GPU reaches it by its IOVA */
	return vgpu_gmmu_pte(m->iova + (a - (uintptr_t)m->cpu), VGPU_GMMU_APER_SYS | flags);
}

/* Mirror callback: program PTEs of [start, end) from range-fault words, under update.
 * In a read section: a prefetch maps without svc_lock. */
static int mirror_map(struct hmm_mirror *mi, uintptr_t start, uintptr_t end,
		      const uint64_t *pfns)
{
	struct vf_managed *st = mi->priv;
	unsigned int rd = managed_read_begin(st);

	for (uintptr_t a = start; a < end; a += HMM_PAGE_SIZE) {
		uint64_t pfn = pfns[(a - start) >> HMM_PAGE_SHIFT];
		struct vgpu_managed *m;

		if (!(pfn & HMM_PFN_VALID) || !(m = alloc_of_cpu(st, a)))
			continue;
		if (!(pfn & HMM_PFN_DEVICE))
			st->mapped_remote++;
		atomic_store_explicit(m->ptes[(a - (uintptr_t)m->cpu) >> HMM_PAGE_SHIFT],
				      pte_of(st, m, a, pfn), memory_order_release);
	}
	managed_read_end(st, rd);
	return 0;
}

static const struct hmm_mirror_ops mirror_ops = {
	.invalidate = mirror_invalidate,
	.map = mirror_map,
};

/* The mapping word hmm's range fault would give page @a, from its page state alone; 0 if
 * it is moving (the replay makes the GPU fault on it again). */
static uint64_t word_by_state(struct vf_managed *st, uintptr_t a)
{
	struct hmm_devmem *dm = NULL;
	uint64_t page = 0;

	switch (hmm_mm_page_where(st->mm, (void *)a, &dm, &page)) {
	case HMM_PAGE_SYSTEM:
		return HMM_PFN_VALID | HMM_PFN_WRITE | (a >> HMM_PAGE_SHIFT);
	case HMM_PAGE_DEVICE:
		return dm == st->devmem ? HMM_PFN_VALID | HMM_PFN_WRITE | HMM_PFN_DEVICE | page : 0;
	default:
		return 0;
	}
}

/* In a VM the managed region is a PFNMAP mapping of BAR2, which /proc/self/pagemap shows
 * as holes that MADV_POPULATE refuses: hmm's range fault fails (-EFAULT) every fault of a
 * block holding a page that stays in system memory (advised PREFER_CPU, pinned by the
 * thrashing policy, no room left in the pool). Those pages are device memory, always
 * present and writable: map the failed faults of such regions from hmm's page states.
 * The states are read under the mirror's update lock, which every invalidation takes
 * before it clears PTEs: a page that starts moving afterwards loses its PTE again. */
static void map_by_state(struct vf_managed *st, const struct hmm_dev_fault *f, size_t n,
			 int *status)
{
	hmm_interval_read_begin(&st->mirror.notifier);	/* no invalidation half done */
	cmn_mutex_lock(&st->mirror.update);
	for (size_t i = 0; i < n; i++) {
		struct vgpu_managed *m = alloc_of_cpu(st, f[i].addr);
		uint64_t w;

		if (status[i] != -EFAULT || !m || !m->own_cpu)
			continue;
		w = word_by_state(st, f[i].addr);
		if (w)
			mirror_map(&st->mirror, f[i].addr, f[i].addr + HMM_PAGE_SIZE, &w);
		status[i] = w ? 0 : -EAGAIN;
	}
	cmn_mutex_unlock(&st->mirror.update);
}

/* Move the faults of VM regions to the end of @f; returns how many others come first.
 * Remote faults there would only fail in hmm (map_by_state() maps them), and slowly: a
 * failed block is retried page by page, each walk parsing /proc/self/maps (seconds for a
 * 2 MiB block under TCG). */
static size_t vm_faults_last(struct vf_managed *st, struct hmm_dev_fault *f, size_t n)
{
	size_t h = 0;

	for (size_t i = 0; i < n; i++) {
		struct vgpu_managed *m = alloc_of_cpu(st, f[i].addr);

		if (m && m->own_cpu)
			continue;
		struct hmm_dev_fault t = f[h];

		f[h++] = f[i];
		f[i] = t;
	}
	return h;
}

/* Map what is present of [addr, addr+len) for the GPU (after a prefetch): a snapshot
 * range fault with the seq check, then the PTEs. */
int vf_managed_map_present(struct vf_managed *st, uintptr_t addr, size_t len)
{
	size_t n = len >> HMM_PAGE_SHIFT;
	uint64_t *pfns = calloc(n, sizeof(*pfns));
	struct hmm_range r = { .notifier = &st->mirror.notifier, .start = addr,
			       .end = addr + len, .hmm_pfns = pfns,
			       .dev_private_owner = st };
	int ret;

	if (!pfns)
		return -ENOMEM;
	for (;;) {
		r.notifier_seq = hmm_interval_read_begin(&st->mirror.notifier);
		memset(pfns, 0, n * sizeof(*pfns));
		ret = hmm_range_fault(&r);
		if (ret == -EBUSY)
			continue;
		if (ret)
			break;
		cmn_mutex_lock(&st->mirror.update);
		if (hmm_interval_read_retry(&st->mirror.notifier, r.notifier_seq)) {
			cmn_mutex_unlock(&st->mirror.update);
			continue;
		}
		ret = mirror_map(&st->mirror, addr, addr + len, pfns);
		cmn_mutex_unlock(&st->mirror.update);
		break;
	}
	free(pfns);
	return ret;
}

/* ---- the fault queue and its service -------------------------------------------------- */

/* The driver's hook: mailbox lock held, so only queue. */
static void managed_fault_hook(void *ctx, const struct vgpu_fault_entry *f)
{
	struct vf_managed *st = ctx;

	cmn_mutex_lock(&st->qlock);
	if (st->qn < MANAGED_QUEUE)
		memcpy(&st->queue[st->qn++], f, sizeof(*f));
	else
		st->dropped++;	/* the replay makes the device fault again */
	pthread_cond_signal(&st->qcond);
	cmn_mutex_unlock(&st->qlock);
}

/* VGPU_RM_CTRL_FAULT_REPLAY on the subdevice: TLBs invalidated, stalled channels resume. */
static int fault_replay(struct vgpu_vf *vf)
{
	struct vgpu_rm_control c = {
		.hdr = { .magic = (uint32_t)VGPU_RM_MSG_MAGIC, .abi_version = VGPU_ABI_VERSION,
			 .op = VGPU_RM_OP_CONTROL, .length = sizeof(c),
			 .cookie = __atomic_add_fetch(&vf->rm_cookie, 1, __ATOMIC_RELAXED) },
		.h_client = vf->h_client, .h_object = vf->h_subdevice,
		.cmd = VGPU_RM_CTRL_FAULT_REPLAY,
	};
	uint8_t buf[VF_MSG_MAX_PAYLOAD];
	const struct vgpu_rm_reply *r = (const void *)buf;
	size_t rlen = sizeof(buf);
	int ret = vf_rm_raw(vf, &c, sizeof(c), buf, &rlen);

	if (ret)
		return ret;
	if (rlen < sizeof(*r) || r->magic != (uint32_t)VGPU_RM_MSG_MAGIC)
		return -EPROTO;
	return r->status;
}

/* The faults to hand the mirror for page @pg of @m: the page itself, or for a remote
 * mapping (nothing migrates, so the prefetch policy has nothing to say) every page of its
 * 2 MiB block with the same advice: one fault maps the block, not one page per round
 * trip. Returns how many were written to @f. */
static size_t fault_expand(struct vgpu_managed *m, size_t pg, bool write, bool remote,
			   struct hmm_dev_fault *f)
{
	size_t per_block = HMM_BLOCK_PAGES, first = remote ? pg / per_block * per_block : pg;
	size_t last = remote ? cmn_min(first + per_block, (size_t)(m->size >> HMM_PAGE_SHIFT))
			     : pg + 1, k = 0;

	for (size_t p = first; p < last; p++) {
		if (p != pg && m->advice[p] != VGPU_ADVISE_PREFER_CPU)
			continue;
		f[k++] = (struct hmm_dev_fault){ .addr = (uintptr_t)m->cpu + (p << HMM_PAGE_SHIFT),
						 .write = write };
	}
	return k;
}

/* A fault with this status is serviced, or worth a replay: the GPU faults again and the
 * next pass finds the page settled. -EAGAIN: throttled or moving; -EBUSY: hmm's range fault
 * gave up after its deadline (invalidations kept racing with it, or a walk on a loaded VM
 * took that long); -ENOMEM, -EINTR: a resource or a signal, not the page. Anything else
 * (-EFAULT outside a VM region, -EPERM, -EINVAL) would fail the same way again. */
static bool status_retryable(int status)
{
	return !status || status == -EAGAIN || status == -EBUSY || status == -ENOMEM ||
	       status == -EINTR;
}

/* Service @n entries: translate GPU VAs to CPU addresses, split by advice, hand each part
 * to the mirror (dedup per block, prefetch, migrate or map remote, PTEs). Returns how
 * many were serviced or are worth a replay (status_retryable()). */
static size_t service_entries(struct vf_managed *st, const struct vgpu_fault_entry *e, size_t n)
{
	/* room for a whole block per entry: remote faults map their 2 MiB block at once */
	size_t cap = n * HMM_BLOCK_PAGES;
	struct hmm_dev_fault *f = calloc(cap, sizeof(*f));
	int *status = calloc(cap, sizeof(*status));
	size_t ok = 0;

	if (!f || !status) {
		free(f);
		free(status);
		return 0;
	}
	for (int prefer_cpu = 0; prefer_cpu < 2; prefer_cpu++) {
		size_t k = 0;

		for (size_t i = 0; i < n; i++) {
			struct vgpu_managed *m = alloc_of_va(st, e[i].va);
			size_t pg;

			if (!m) {
				if (!prefer_cpu)
					st->unserviced++;
				continue;
			}
			pg = (size_t)((e[i].va - m->va) >> HMM_PAGE_SHIFT);
			if ((m->advice[pg] == VGPU_ADVISE_PREFER_CPU) != prefer_cpu)
				continue;
			k += fault_expand(m, pg, e[i].access == VGPU_ACCESS_WRITE, prefer_cpu, &f[k]);
		}
		if (!k)
			continue;
		/* one service pass at a time (the thread or a caller): the mirror's opts and
		 * counters are ours under svc_lock */
		st->mirror.opts.migrate_on_fault = !prefer_cpu;
		size_t h = prefer_cpu ? vm_faults_last(st, f, k) : k;

		if (h)
			hmm_mirror_service_faults(&st->mirror, f, h, status);
		for (size_t i = h; i < k; i++)
			status[i] = -EFAULT;	/* what hmm would say, after a slow walk */
		map_by_state(st, f, k, status);
		for (size_t i = 0; i < k; i++)
			ok += status_retryable(status[i]);
		size_t bad = 0, first = 0;

		for (size_t i = 0; i < k; i++) {
			if (status_retryable(status[i]))
				continue;
			first = bad++ ? first : i;
		}
		st->unserviced += bad;
		if (bad)
			vf_error(st->vf, status[first], "managed memory: %zu GPU fault(s) not "
				 "serviced, the first on CPU address %p: %s", bad,
				 (void *)f[first].addr, vgpu_vf_strerror(status[first]));
	}
	free(f);
	free(status);
	return ok;
}

/* Take the queued entries and service them; replay if anything was serviced. */
static int service_queue(struct vf_managed *st)
{
	struct vgpu_fault_entry *batch;
	size_t n, ok;
	int ret = 0;

	cmn_mutex_lock(&st->qlock);
	n = st->qn;
	batch = n ? malloc(n * sizeof(*batch)) : NULL;
	if (batch)
		memcpy(batch, st->queue, n * sizeof(*batch));
	st->qn = batch ? 0 : st->qn;
	cmn_mutex_unlock(&st->qlock);
	if (!batch)
		return n ? -ENOMEM : 0;
	st->fault_entries += n;
	st->batches++;
	ok = service_entries(st, batch, n);
	free(batch);
	if (ok) {
		ret = fault_replay(st->vf);
		if (!ret)
			st->replays++;
		st->last_serviced_ns = cmn_now_ns();
		st->late_gap_ns = MANAGED_WAIT_NS;
		st->late_next_ns = st->last_serviced_ns + st->late_gap_ns;
	}
	return ret ? ret : (int)n;
}

/* True if a channel of @vf has work the device has not finished: GP_GET behind GP_PUT in
 * its USERD (the device advances GP_GET past an entry when the entry is done, so a channel
 * stalled on a fault shows as pending). Under obj_lock, as event_on_channel() reads them;
 * a channel being destroyed may show stale words, which costs at most a replay. */
static bool work_pending(struct vgpu_vf *vf)
{
	bool pending = false;

	cmn_mutex_lock(&vf->obj_lock);
	for (struct cmn_list *n = vf->channels.next; n != &vf->channels && !pending; n = n->next) {
		struct vgpu_channel *ch = cmn_container_of(n, struct vgpu_channel, node);

		if (ch->lost || !ch->userd)
			continue;
		pending = __atomic_load_n(&ch->userd->gp_get, __ATOMIC_ACQUIRE) !=
			  __atomic_load_n(&ch->userd->gp_put, __ATOMIC_RELAXED);
	}
	cmn_mutex_unlock(&vf->obj_lock);
	return pending;
}

/* The device model reports a fault before it marks the channel stalled: a replay that
 * overtakes the stall finds nothing to resume and the channel would wait forever (until
 * the RM watchdog stops it, 5 s after its GP_GET last moved). So more replays follow a
 * serviced batch while no new fault arrives and a channel still has work, at growing gaps,
 * for up to MANAGED_LATE_WINDOW_NS: the window between the report and the stall is a few
 * instructions, but on a loaded host (two TCG guests and a test run on two cores) the
 * device's thread can be preempted inside it for tens or hundreds of milliseconds, far
 * longer than the three replays 2 ms apart this once made. A replay with no stalled
 * channel only invalidates TLBs. */
static void replay_late(struct vf_managed *st)
{
	uint64_t now = cmn_now_ns();

	if (!st->late_next_ns || now < st->late_next_ns)
		return;
	if (now - st->last_serviced_ns > MANAGED_LATE_WINDOW_NS || !work_pending(st->vf)) {
		st->late_next_ns = 0;
		return;
	}
	if (!fault_replay(st->vf))
		st->replays++;
	st->late_gap_ns = cmn_min(st->late_gap_ns * 2, MANAGED_LATE_GAP_MAX_NS);
	st->late_next_ns = now + st->late_gap_ns;
}

static int service_once(struct vf_managed *st, uint64_t wait_ns)
{
	struct vgpu_vf *vf = st->vf;
	int ret;

	vf_events_poll(vf);
	cmn_mutex_lock(&st->qlock);
	if (!st->qn && wait_ns) {
		cmn_mutex_unlock(&st->qlock);
		vf->t->ops->wait(vf->t, VF_VEC_EVENT, wait_ns);
		vf_events_poll(vf);
	} else {
		cmn_mutex_unlock(&st->qlock);
	}
	cmn_mutex_lock(&st->svc_lock);
	ret = service_queue(st);
	if (!ret)
		replay_late(st);
	cmn_mutex_unlock(&st->svc_lock);
	return ret;
}

static void *service_thread(void *arg)
{
	struct vf_managed *st = arg;

	while (!atomic_load(&st->stop)) {
		if (atomic_load(&st->vf->reset_pending)) {
			cmn_sleep_ns(MANAGED_WAIT_NS);
			continue;
		}
		service_once(st, MANAGED_WAIT_NS);
	}
	return NULL;
}

int vgpu_managed_pending(struct vgpu_vf *vf)
{
	struct vf_managed *st = vf ? vf->managed.ctx : NULL;
	int n;

	if (!st)
		return -EINVAL;
	vf_events_poll(vf);
	cmn_mutex_lock(&st->qlock);
	n = (int)st->qn;
	cmn_mutex_unlock(&st->qlock);
	return n;
}

int vgpu_managed_service(struct vgpu_vf *vf, uint64_t timeout_ns)
{
	struct vf_managed *st = vf->managed.ctx;

	if (!st)
		return -EINVAL;
	return service_once(st, timeout_ns);
}

/* ---- start and stop ------------------------------------------------------------------- */

/* The VRAM pool: as much of @want as the quota gives, halving down to 2 MiB. */
static int pool_get(struct vf_managed *st, uint64_t want)
{
	int ret = -EINVAL;

	for (uint64_t sz = want; sz >= HMM_BLOCK_SIZE; sz /= 2) {
		ret = vgpu_mem_alloc(st->vf, VGPU_MEM_VRAM, sz, VGPU_GMMU_PAGE_2M, &st->pool);
		if (!ret)
			break;
		if (ret != -VGPU_EQUOTA && ret != -EDQUOT && ret != -ENOMEM && ret != -ENOSPC)
			return ret;
	}
	if (ret)
		return ret;
	st->pool_pa = vgpu_mem_addr(st->pool);
	struct hmm_devmem_desc d = { .owner = st, .base = vgpu_mem_cpu(st->pool),
				     .size = vgpu_mem_size(st->pool) };

	ret = hmm_devmem_create(&d, &st->devmem);
	if (ret) {
		vgpu_mem_free(st->pool);
		st->pool = NULL;
	}
	return ret;
}

static void managed_close_hook(struct vgpu_vf *vf)
{
	vgpu_managed_fini(vf);
}

static int opts_check(const struct vgpu_managed_opts *o)
{
	if (o->pool_bytes % HMM_BLOCK_SIZE)
		return -EINVAL;
	if (o->granule && o->granule != 4096 && o->granule != (64u << 10) &&
	    o->granule != HMM_BLOCK_SIZE)
		return -EINVAL;
	return 0;
}

static int mirror_start(struct vf_managed *st)
{
	struct hmm_mirror_opts mo = { .prefetch = HMM_PREFETCH_DEFAULTS,
				      .thrash = HMM_THRASH_DEFAULTS, .migrate_on_fault = true };

	mo.prefetch.enable = !st->opts.no_prefetch;
	return hmm_mirror_init(&st->mirror, st->mm, st->devmem, &mirror_ops, &mo);
}

int vgpu_managed_init(struct vgpu_vf *vf, const struct vgpu_managed_opts *opts)
{
	struct hmm_mm_opts mo = { .backend = HMM_BACKEND_MPROTECT };
	struct vf_managed *st;
	int ret;

	if (!vf)
		return -EINVAL;
	if (vf->managed.ctx)
		return -EEXIST;
	if (!vf->bar || atomic_load(&vf->reset_pending))
		return -ENOLINK;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	if (opts)
		st->opts = *opts;
	ret = opts_check(&st->opts);
	if (ret)
		goto free_st;
	st->vf = vf;
	mo.granule = st->opts.granule ? st->opts.granule : HMM_PAGE_SIZE;
	mo.clock_ns = st->opts.clock_ns;
	ret = hmm_mm_create(&mo, &st->mm);
	if (ret)
		goto free_st;
	ret = pool_get(st, st->opts.pool_bytes ? st->opts.pool_bytes : MANAGED_DEFAULT_POOL);
	if (ret)
		goto destroy_mm;
	ret = mirror_start(st);
	if (ret)
		goto free_pool;
	cmn_mutex_init(&st->qlock);
	pthread_cond_init(&st->qcond, NULL);
	cmn_mutex_init(&st->svc_lock);
	cmn_mutex_init(&st->alloc_lock);
	st->mirror.priv = st;
	/* the hook goes in before the thread polls: the ring has one reader at a time */
	cmn_mutex_lock(&vf->mbox_lock);
	vf->managed = (struct vf_managed_hooks){ .fault = managed_fault_hook,
						 .close = managed_close_hook, .ctx = st };
	cmn_mutex_unlock(&vf->mbox_lock);
	if (!st->opts.no_thread) {
		ret = -pthread_create(&st->thread, NULL, service_thread, st);
		if (ret)
			goto unhook;
		st->thread_started = true;
	}
	return 0;
unhook:
	cmn_mutex_lock(&vf->mbox_lock);
	vf->managed = (struct vf_managed_hooks){ 0 };
	cmn_mutex_unlock(&vf->mbox_lock);
	hmm_mirror_fini(&st->mirror);
free_pool:
	hmm_devmem_destroy(st->devmem);
	vgpu_mem_free(st->pool);
destroy_mm:
	hmm_mm_destroy(st->mm);
free_st:
	free(st);
	return vf_error(vf, ret, "managed memory: cannot start: %s", vgpu_vf_strerror(ret));
}

void vgpu_managed_fini(struct vgpu_vf *vf)
{
	struct vf_managed *st = vf ? vf->managed.ctx : NULL;

	if (!st)
		return;
	if (st->thread_started) {
		atomic_store(&st->stop, true);
		pthread_join(st->thread, NULL);
	}
	for (unsigned int i = 0; i < MANAGED_MAX_ALLOCS; i++) {
		struct vgpu_managed *m = atomic_load(&st->allocs[i]);

		if (m)
			vgpu_mem_free_managed(m);
	}
	cmn_mutex_lock(&vf->mbox_lock);
	vf->managed = (struct vf_managed_hooks){ 0 };
	cmn_mutex_unlock(&vf->mbox_lock);
	hmm_devmem_evict_all(st->mm, st->devmem);
	hmm_mirror_fini(&st->mirror);
	hmm_devmem_destroy(st->devmem);
	vgpu_mem_free(st->pool);
	hmm_mm_destroy(st->mm);
	pthread_cond_destroy(&st->qcond);
	cmn_mutex_destroy(&st->qlock);
	cmn_mutex_destroy(&st->svc_lock);
	cmn_mutex_destroy(&st->alloc_lock);
	free(st);
}

long vgpu_managed_evict_all(struct vgpu_vf *vf)
{
	struct vf_managed *st = vf ? vf->managed.ctx : NULL;

	if (!st)
		return -EINVAL;
	return hmm_devmem_evict_all(st->mm, st->devmem);
}

void vgpu_managed_get_stats(struct vgpu_vf *vf, struct vgpu_managed_stats *out)
{
	struct vf_managed *st = vf ? vf->managed.ctx : NULL;
	struct hmm_thrash_stats ts = { 0 };
	struct hmm_mm_stats ms;

	memset(out, 0, sizeof(*out));
	if (!st)
		return;
	hmm_mm_get_stats(st->mm, &ms);
	if (st->mirror.thrash)
		hmm_thrash_get_stats(st->mirror.thrash, &ts);
	cmn_mutex_lock(&st->svc_lock);
	*out = (struct vgpu_managed_stats){
		.fault_entries = st->fault_entries, .dedup = st->mirror.stats.dedup,
		.blocks = st->mirror.stats.blocks, .batches = st->batches,
		.replays = st->replays, .migrated_to_device = ms.migrated_to_device,
		.migrated_to_cpu = ms.migrated_to_system,
		.prefetched = st->mirror.stats.prefetched, .mapped_remote = st->mapped_remote,
		.cpu_faults = ms.cpu_faults, .throttled = st->mirror.stats.throttled,
		.pinned = st->mirror.stats.pinned, .thrash_events = ts.events,
		.unserviced = st->unserviced,
		.pool_pages = vgpu_mem_size(st->pool) >> HMM_PAGE_SHIFT,
		.pool_used = hmm_devmem_used_pages(st->devmem),
		.last_serviced_ns = st->last_serviced_ns,
	};
	cmn_mutex_unlock(&st->svc_lock);
}
