// SPDX-License-Identifier: GPL-2.0 OR MIT
/* Process memory into the slice's VRAM with the kernel's own migration (migrate_vma_*).
 *
 * In a VM the device reaches only BAR2, and BAR2 is memory the CPU reaches coherently, so
 * VRAM pages become MEMORY_DEVICE_COHERENT pages (the guest kernel has no DEVICE_PRIVATE):
 * a process keeps reading and writing a migrated page in place, no fault brings it back.
 * The pool is one VRAM allocation of the driver's own RM client, made on first use and
 * handed out page by page; a page comes back through page_free when its last mapping goes
 * (migrated back, unmapped, the process exits).
 *
 * A VF reset scrubs VRAM and frees the driver's client. The host announces it first (ABI
 * 2.5): the pool stops taking pages and every page in it migrates back to system memory,
 * then the driver acknowledges (vgpu_vf_main.c). Pages still in the pool when the reset
 * runs (the host's wait ran out, a page could not move) have lost their contents: every
 * process that migrated pages gets SIGBUS (never a silent loss) and the pool takes no new
 * pages until the old ones are all freed. Those processes may still map the lost pages, so
 * the VRAM under them must go to no other process meanwhile: the first mailbox call after
 * the reset, before anything else reaches the host, takes it again for a client of the
 * driver's own and holds it until the last lost page is freed (vvf_svm_fence_locked).
 *
 * Where a process's pages are now is the kernel's HMM mirror: hmm_range_fault under an
 * mmu_interval_notifier, retried until no invalidation raced it. */
#include <linux/hmm.h>
#include <linux/memremap.h>
#include <linux/migrate.h>
#include <linux/mmu_notifier.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "vgpu_vf_internal.h"

#define VVF_SVM_BATCH		64		/* pages per migrate_vma round */

/* For tests: a VGPU_VF_IOC_SVM call waits before its round number svm_pause_round (rounds
 * of VVF_SVM_BATCH pages, counted from 1; 0: never) until its process is killed, so that a
 * test kills it at a known point of a range and counts how many rounds ran. 0 in use. */
static unsigned int svm_pause_round;
module_param(svm_pause_round, uint, 0644);
MODULE_PARM_DESC(svm_pause_round, "test only: the round of 64 pages before which an SVM call waits to be killed (0)");

/* An RM call of the driver's own; @locked: on the mailbox the caller holds. */
static int vvf_krm_send(struct vvf_dev *vd, bool locked, u32 op, void *req, u32 len, void *out,
			u32 out_len, u32 *handle)
{
	struct vgpu_rm_msg *h = req;
	struct vvf_rm_rsp rsp;
	u32 rsp_len = sizeof(rsp);
	s32 status;
	bool sent;
	int ret;

	h->magic = (u32)VGPU_RM_MSG_MAGIC;
	h->abi_version = VGPU_ABI_VERSION;
	h->op = op;
	h->length = len;
	if (locked)
		ret = vvf_mbox_send_locked(vd, VF_MSG_RM, req, len, &rsp, &rsp_len, &status,
					   VVF_DEFAULT_TIMEOUT_NS, &sent);
	else
		ret = vvf_mbox_call(vd, VF_MSG_RM, req, len, &rsp, &rsp_len, &status,
				    VVF_DEFAULT_TIMEOUT_NS);
	if (ret || status)
		return ret ? ret : status;
	return vvf_rm_rsp_take(&rsp, rsp_len, out, out_len, handle);
}

int vvf_rm_rsp_take(const struct vvf_rm_rsp *rsp, u32 len, void *out, u32 out_len,
		    u32 *handle)
{
	if (len < sizeof(rsp->r))
		return -EPROTO;
	if (rsp->r.status)
		return rsp->r.status;
	if (rsp->r.params_len < out_len || len - sizeof(rsp->r) < out_len)
		return -EPROTO;
	memcpy(out, rsp->params, out_len);
	if (handle)
		*handle = rsp->r.handle;
	return 0;
}

int vvf_krm(struct vvf_dev *vd, u32 op, void *req, u32 len, void *out, u32 out_len,
	    u32 *handle)
{
	return vvf_krm_send(vd, false, op, req, len, out, out_len, handle);
}

static int vvf_krm_alloc_send(struct vvf_dev *vd, bool locked, u32 client, u32 parent, u32 cls,
			      void *params, u32 plen, u32 *handle)
{
	struct {
		struct vgpu_rm_alloc a;
		u8 p[64];
	} m = { .a = { .h_client = client, .h_parent = parent, .h_class = cls,
		       .params_len = plen } };

	memcpy(m.p, params, plen);
	return vvf_krm_send(vd, locked, VGPU_RM_OP_ALLOC, &m, sizeof(m.a) + plen, params, plen,
			    handle);
}

int vvf_krm_alloc(struct vvf_dev *vd, u32 client, u32 parent, u32 cls, void *params, u32 plen,
		  u32 *handle)
{
	return vvf_krm_alloc_send(vd, false, client, parent, cls, params, plen, handle);
}

/* FREE of @obj of the driver's client @client (the client itself if @obj is @client). */
static void vvf_krm_free(struct vvf_dev *vd, bool locked, u32 client, u32 obj)
{
	struct vgpu_rm_free fr = { .h_client = client, .h_object = obj };

	vvf_krm_send(vd, locked, VGPU_RM_OP_FREE, &fr, sizeof(fr), NULL, 0, NULL);
}

static void vvf_svm_page_free(struct page *page)
{
	struct vvf_svm *s = container_of(page->pgmap, struct vvf_svm, pgmap);

	struct pid *gone[VVF_SVM_OWNERS];
	u32 i, n = 0;

	spin_lock(&s->lock);
	page->zone_device_data = s->free;
	s->free = page;
	/* The pool is empty again: nobody holds pages a reset could lose; the last page a
	 * reset lost is gone, so a new pool may be made. */
	if (!--s->in_use) {
		s->broken = false;
		n = s->nr_owners;
		memcpy(gone, s->owners, n * sizeof(gone[0]));
		s->nr_owners = 0;
	}
	spin_unlock(&s->lock);
	for (i = 0; i < n; i++)
		put_pid(gone[i]);
}

static const struct dev_pagemap_ops vvf_svm_pgmap_ops = {
	.page_free = vvf_svm_page_free,
};

/* Free the pool's client and with it everything under it. Under setup_lock. */
static void vvf_svm_free_client(struct vvf_dev *vd)
{
	vvf_krm_free(vd, false, vd->svm.client, vd->svm.client);
	vd->svm.client = vd->svm.device = vd->svm.mem = 0;
}

/* The pool: VRAM of the driver's own client, as device-coherent pages. Under setup_lock. */
static int vvf_svm_setup(struct vvf_dev *vd)
{
	struct vvf_svm *s = &vd->svm;
	struct vgpu_rm_vidmem_params p = { .size = VVF_SVM_POOL, .page_size = VVF_SVM_ALIGN,
					   .alignment = VVF_SVM_ALIGN,
					   .flags = VGPU_RM_MEM_CONTIGUOUS };
	u32 rc = smp_load_acquire(&vd->hdr->reset_count);
	struct vgpu_rm_msg m = { 0 };
	unsigned long pfn, i;
	void *addr;
	int ret;

	ret = vvf_krm(vd, VGPU_RM_OP_ALLOC_CLIENT, &m, sizeof(m), NULL, 0, &s->client);
	if (ret) {
		dev_warn(&vd->pdev->dev, "SVM: no RM client for the VRAM pool: %d\n", ret);
		return ret < 0 && ret > -4096 ? ret : -ENOMEM;
	}
	ret = vvf_krm_alloc(vd, s->client, s->client, VGPU_RM_CLASS_DEVICE, NULL, 0, &s->device);
	if (!ret)
		ret = vvf_krm_alloc(vd, s->client, s->device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p,
				    sizeof(p), &s->mem);
	if (ret) {
		dev_warn(&vd->pdev->dev, "SVM: no VRAM pool from the RM: %d\n", ret);
		ret = ret < 0 && ret > -4096 ? ret : -ENOMEM;
		goto free_client;
	}
	if (p.addr < vd->lay.vram_off || p.addr - vd->lay.vram_off > vd->lay.vram_size ||
	    p.size != VVF_SVM_POOL || p.size > vd->lay.vram_size - (p.addr - vd->lay.vram_off) ||
	    p.addr % VVF_SVM_ALIGN) {
		ret = -EPROTO;
		goto free_client;
	}
	if (s->mapped && (p.addr != s->off || p.size != s->size)) {
		/* A new pool elsewhere (after a reset): every old page is free by now. */
		memunmap_pages(&s->pgmap);
		s->mapped = false;
	}
	s->off = p.addr;
	s->size = p.size;
	if (!s->mapped) {
		memset(&s->pgmap, 0, sizeof(s->pgmap));
		s->pgmap.type = MEMORY_DEVICE_COHERENT;
		s->pgmap.range.start = vd->bar2_phys + s->off;
		s->pgmap.range.end = s->pgmap.range.start + s->size - 1;
		s->pgmap.nr_range = 1;
		s->pgmap.ops = &vvf_svm_pgmap_ops;
		s->pgmap.owner = vd;
		addr = memremap_pages(&s->pgmap, dev_to_node(&vd->pdev->dev));
		if (IS_ERR(addr)) {
			dev_warn(&vd->pdev->dev, "SVM: memremap_pages of VRAM: %ld\n",
				 PTR_ERR(addr));
			ret = PTR_ERR(addr);
			goto free_client;
		}
		s->mapped = true;
	}
	spin_lock(&s->lock);
	/* A reset since the allocation freed it, and the first mailbox call after that reset
	 * (vvf_svm_fence_locked: the pool out of use, under this lock) found it not ready yet:
	 * it must not start now, or its pages would lie in VRAM nobody holds. */
	if (smp_load_acquire(&vd->hdr->reset_count) != rc) {
		spin_unlock(&s->lock);
		s->client = s->device = s->mem = 0;	/* the host freed them */
		return -ENOLINK;
	}
	s->free = NULL;
	for (i = 0, pfn = PHYS_PFN(s->pgmap.range.start); i < s->size >> PAGE_SHIFT; i++, pfn++) {
		struct page *page = pfn_to_page(pfn);

		page->zone_device_data = s->free;
		s->free = page;
	}
	s->in_use = 0;
	s->ready = true;
	spin_unlock(&s->lock);
	dev_info(&vd->pdev->dev, "SVM: %llu MiB of VRAM as device-coherent pages\n",
		 (unsigned long long)(s->size >> 20));
	return 0;
free_client:
	/* Every failure is retried (each SVM ioctl, AS_CREATE, fault service): a client left
	 * behind each time would use up the VF's client quota. The host frees what is under it. */
	vvf_svm_free_client(vd);
	return ret;
}

static struct page *vvf_svm_get(struct vvf_svm *s)
{
	struct page *page;

	spin_lock(&s->lock);
	page = s->ready ? s->free : NULL;	/* a reset may have taken the pool meanwhile */
	if (page) {
		s->free = page->zone_device_data;
		s->in_use++;
	}
	spin_unlock(&s->lock);
	if (page)
		zone_device_page_init(page);	/* one reference, locked */
	return page;
}

/* One round over [start, end) of @vma (at most VVF_SVM_BATCH pages): pages moved. */
static long vvf_svm_round(struct vvf_dev *vd, struct vm_area_struct *vma, unsigned long start,
			  unsigned long end, bool to_vram)
{
	unsigned long src[VVF_SVM_BATCH] = { 0 }, dst[VVF_SVM_BATCH] = { 0 };
	struct migrate_vma args = {
		.vma = vma, .start = start, .end = end, .src = src, .dst = dst,
		.pgmap_owner = vd,
		.flags = to_vram ? MIGRATE_VMA_SELECT_SYSTEM : MIGRATE_VMA_SELECT_DEVICE_COHERENT,
	};
	unsigned long i, n = (end - start) >> PAGE_SHIFT;
	long moved = 0;
	int ret;

	ret = migrate_vma_setup(&args);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		struct page *spage = migrate_pfn_to_page(src[i]), *dpage;

		if (!(src[i] & MIGRATE_PFN_MIGRATE))
			continue;
		if (to_vram) {
			dpage = vvf_svm_get(&vd->svm);
		} else {
			dpage = alloc_page(GFP_HIGHUSER_MOVABLE);
			if (dpage)
				lock_page(dpage);
		}
		if (!dpage)
			continue;	/* stays where it is */
		if (spage)
			copy_highpage(dpage, spage);
		else
			clear_highpage(dpage);
		dst[i] = migrate_pfn(page_to_pfn(dpage));
	}
	migrate_vma_pages(&args);
	for (i = 0; i < n; i++)
		if (dst[i] && (src[i] & MIGRATE_PFN_MIGRATE))
			moved++;
	migrate_vma_finalize(&args);
	return moved;
}

/* Forget the processes of the owners table that are gone (their pages went with their
 * memory) into @gone, for put_pid outside the lock: how many. Under s->lock. */
static u32 vvf_svm_owners_prune(struct vvf_svm *s, struct pid **gone)
{
	u32 i = 0, n = 0;

	rcu_read_lock();
	while (i < s->nr_owners) {
		if (pid_task(s->owners[i], PIDTYPE_TGID)) {
			i++;
			continue;
		}
		gone[n++] = s->owners[i];
		s->owners[i] = s->owners[--s->nr_owners];
	}
	rcu_read_unlock();
	return n;
}

/* Remember @who as a process that may hold pool pages (a reset must tell it). A full table
 * first drops the processes that are gone. 0, or -EBUSY: every entry is a live process,
 * and one that a reset could not tell must put no page into the pool. */
static int vvf_svm_owner(struct vvf_svm *s, struct pid *who)
{
	struct pid *gone[VVF_SVM_OWNERS];
	u32 i, n = 0;
	bool known;
	int ret = 0;

	spin_lock(&s->lock);
	for (i = 0; i < s->nr_owners && s->owners[i] != who; i++)
		;
	known = i < s->nr_owners;
	if (!known && s->nr_owners == VVF_SVM_OWNERS)
		n = vvf_svm_owners_prune(s, gone);
	if (!known && s->nr_owners < VVF_SVM_OWNERS)
		s->owners[s->nr_owners++] = get_pid(who);
	else if (!known)
		ret = -EBUSY;
	spin_unlock(&s->lock);
	for (i = 0; i < n; i++)
		put_pid(gone[i]);
	return ret;
}

/* svm_pause_round's wait: until the caller is killed or the parameter is 0 again. Its own
 * function, so that a test finds the caller here by its wchan. */
static noinline void vvf_svm_test_pause(void)
{
	while (READ_ONCE(svm_pause_round) && !fatal_signal_pending(current))
		schedule_timeout_killable(HZ / 10);
}

int vvf_svm_ensure(struct vvf_dev *vd)
{
	struct vvf_svm *s = &vd->svm;
	bool ready, broken;
	int ret = 0;

	mutex_lock(&s->setup_lock);
	spin_lock(&s->lock);
	ready = s->ready;
	broken = s->broken;
	spin_unlock(&s->lock);
	/* No pool once the device is going: vvf_svm_fini took it for good. */
	if (READ_ONCE(vd->gone))
		ret = -ENODEV;
	else if (!ready)
		ret = broken ? -EIO : vvf_svm_setup(vd);
	mutex_unlock(&s->setup_lock);
	return ret;
}

int vvf_svm_move_locked(struct vvf_dev *vd, struct mm_struct *mm, struct pid *who, u64 addr,
			u64 len, bool to_vram, u64 *moved)
{
	unsigned int pause = READ_ONCE(svm_pause_round), round;
	unsigned long start = addr, end = addr + len, next;
	struct vm_area_struct *vma;
	long got;
	int ret = 0;

	*moved = 0;
	if (to_vram) {
		down_read(&vd->svm.migrate_sem);
		/* An announced reset the host dropped (the slice stopped or moved) ends the
		 * wait here: the header no longer names it. */
		if ((vd->svm.resetting &&
		     READ_ONCE(vd->hdr->reset_pending) == vd->svm.resetting_seq) ||
		    vvf_svm_owner(&vd->svm, who)) {
			up_read(&vd->svm.migrate_sem);
			return -EBUSY;
		}
	}
	for (round = 1; start < end; start = next, round++) {
		if (unlikely(round == pause) && !(current->flags & PF_KTHREAD))
			vvf_svm_test_pause();
		/* A range may be as large as the address space: a killed caller stops here
		 * rather than after every round of it, and so does every caller once the device
		 * is going (remove waits for the calls in flight). */
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		if (READ_ONCE(vd->gone)) {
			ret = -ENODEV;
			break;
		}
		cond_resched();
		vma = vma_lookup(mm, start);
		/* Anonymous private memory only: shared and file pages are refused. */
		if (!vma || !vma_is_anonymous(vma) || (vma->vm_flags & VM_SHARED)) {
			ret = vma ? -EOPNOTSUPP : -EFAULT;
			break;
		}
		next = min3(end, vma->vm_end, start + VVF_SVM_BATCH * PAGE_SIZE);
		got = vvf_svm_round(vd, vma, start, next, to_vram);
		if (got < 0) {
			ret = got;
			break;
		}
		*moved += got;
		/* Once the pool is full no later round moves anything into it: stop, and
		 * the count says how much of the range moved. */
		if (to_vram && vvf_svm_full(vd))
			break;
	}
	if (to_vram)
		up_read(&vd->svm.migrate_sem);
	return ret;
}

static int vvf_svm_migrate(struct vvf_file *f, u64 addr, u64 len, bool to_vram, u64 *moved)
{
	struct mm_struct *mm = current->mm;
	int ret;

	*moved = 0;
	if (!mm || !len || (addr | len) & ~PAGE_MASK || addr + len < addr)
		return -EINVAL;
	ret = vvf_svm_ensure(f->vd);
	if (ret)
		return ret;
	mmap_read_lock(mm);
	ret = vvf_svm_move_locked(f->vd, mm, task_tgid(current), addr, len, to_vram, moved);
	mmap_read_unlock(mm);
	return ret;
}

bool vvf_svm_full(struct vvf_dev *vd)
{
	bool full;

	spin_lock(&vd->svm.lock);
	full = vd->svm.ready && !vd->svm.free;
	spin_unlock(&vd->svm.lock);
	return full;
}

bool vvf_svm_page_ours(struct vvf_dev *vd, struct page *page)
{
	return is_device_coherent_page(page) && page->pgmap == &vd->svm.pgmap;
}

long vvf_ioc_svm(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_svm a;
	int ret;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	if (a.size != sizeof(a) || (a.to != VGPU_VF_SVM_TO_VRAM && a.to != VGPU_VF_SVM_TO_SYSTEM))
		return -EINVAL;
	ret = vvf_svm_migrate(f, a.addr, a.len, a.to == VGPU_VF_SVM_TO_VRAM, &a.migrated);
	spin_lock(&f->vd->svm.lock);
	a.vram_pages = f->vd->svm.in_use;
	spin_unlock(&f->vd->svm.lock);
	if (copy_to_user((void __user *)arg, &a, sizeof(a)))
		return -EFAULT;
	return ret;
}

/* A one-shot mirror of a range: the notifier's sequence tells a snapshot that an
 * invalidation (migration, munmap, COW) raced. */
struct vvf_mirror {
	struct mmu_interval_notifier mni;
	struct mutex lock;
};

static bool vvf_mirror_invalidate(struct mmu_interval_notifier *mni,
				  const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct vvf_mirror *m = container_of(mni, struct vvf_mirror, mni);

	if (mmu_notifier_range_blockable(range))
		mutex_lock(&m->lock);
	else if (!mutex_trylock(&m->lock))
		return false;
	mmu_interval_set_seq(mni, cur_seq);
	mutex_unlock(&m->lock);
	return true;
}

static const struct mmu_interval_notifier_ops vvf_mirror_ops = {
	.invalidate = vvf_mirror_invalidate,
};

/* The entry of vgpu/vf_ioctl.h for one hmm pfn. */
static u64 vvf_svm_entry(struct vvf_dev *vd, unsigned long pfn)
{
	struct page *page;
	u64 e;

	if (!(pfn & HMM_PFN_VALID))
		return 0;
	page = hmm_pfn_to_page(pfn);
	e = pfn & HMM_PFN_WRITE ? VGPU_VF_SVM_PAGE_WRITE : 0;
	if (vvf_svm_page_ours(vd, page))
		return e | VGPU_VF_SVM_PAGE_VRAM | (page_to_phys(page) - vd->bar2_phys);
	return e | VGPU_VF_SVM_PAGE_SYSTEM;
}

/* Snapshot [start, start + n pages) of @mm into @out. Under the mirror's lock once no
 * invalidation raced the fault. */
static int vvf_svm_snapshot(struct vvf_dev *vd, struct mm_struct *mm, unsigned long start,
			    unsigned long n, bool fault, u64 *out, u32 *in_vram, u32 *present)
{
	unsigned long timeout = jiffies + msecs_to_jiffies(HMM_RANGE_DEFAULT_TIMEOUT);
	struct vvf_mirror m;
	struct hmm_range range = {
		.notifier = &m.mni, .start = start, .end = start + n * PAGE_SIZE,
		.default_flags = fault ? HMM_PFN_REQ_FAULT | HMM_PFN_REQ_WRITE : 0,
		.dev_private_owner = vd,
	};
	unsigned long i;
	int ret;

	range.hmm_pfns = kvcalloc(n, sizeof(*range.hmm_pfns), GFP_KERNEL);
	if (!range.hmm_pfns)
		return -ENOMEM;
	mutex_init(&m.lock);
	ret = mmu_interval_notifier_insert(&m.mni, mm, start, n * PAGE_SIZE, &vvf_mirror_ops);
	if (ret)
		goto out_free;
	for (;;) {
		if (time_after(jiffies, timeout)) {
			ret = -EBUSY;
			break;
		}
		range.notifier_seq = mmu_interval_read_begin(&m.mni);
		mmap_read_lock(mm);
		ret = hmm_range_fault(&range);
		mmap_read_unlock(mm);
		if (ret == -EBUSY)
			continue;
		if (ret)
			break;
		mutex_lock(&m.lock);
		if (mmu_interval_read_retry(&m.mni, range.notifier_seq)) {
			mutex_unlock(&m.lock);
			continue;
		}
		*in_vram = *present = 0;
		for (i = 0; i < n; i++) {
			out[i] = vvf_svm_entry(vd, range.hmm_pfns[i]);
			*in_vram += !!(out[i] & VGPU_VF_SVM_PAGE_VRAM);
			*present += !!out[i];
		}
		mutex_unlock(&m.lock);
		break;
	}
	mmu_interval_notifier_remove(&m.mni);
out_free:
	kvfree(range.hmm_pfns);
	return ret;
}

long vvf_ioc_svm_query(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_svm_query a;
	struct mm_struct *mm = current->mm;
	unsigned long n;
	u64 *out;
	int ret;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	n = a.len >> PAGE_SHIFT;
	if (a.size != sizeof(a) || (a.flags & ~VGPU_VF_SVM_FAULT) || !a.len ||
	    (a.addr | a.len) & ~PAGE_MASK || n > VGPU_VF_SVM_QUERY_MAX ||
	    a.addr + a.len < a.addr || !mm)
		return -EINVAL;
	out = kvcalloc(n, sizeof(*out), GFP_KERNEL);
	if (!out)
		return -ENOMEM;
	ret = vvf_svm_snapshot(f->vd, mm, a.addr, n, a.flags & VGPU_VF_SVM_FAULT, out,
			       &a.in_vram, &a.present);
	if (!ret && (copy_to_user(u64_to_user_ptr(a.out_ptr), out, n * sizeof(*out)) ||
		     copy_to_user((void __user *)arg, &a, sizeof(a))))
		ret = -EFAULT;
	kvfree(out);
	return ret;
}

/* The reset took the pool's client and its VRAM: no page leaves the pool any more, and the
 * pages in use lost their contents, so the processes that migrated them get SIGBUS (never
 * a read of zeros as data) and no new pool is made until those pages are freed. Whichever
 * comes first after the reset, the event thread or the first mailbox call, does it. The
 * pages in use. */
static u64 vvf_svm_lose(struct vvf_dev *vd)
{
	struct vvf_svm *s = &vd->svm;
	bool lost;
	u64 in_use;
	u32 i;

	spin_lock(&s->lock);
	in_use = s->in_use;
	lost = s->ready && in_use;
	s->ready = false;
	if (lost) {
		s->broken = true;
		for (i = 0; i < s->nr_owners; i++)
			kill_pid(s->owners[i], SIGBUS, 1);
	}
	spin_unlock(&s->lock);
	if (lost)
		dev_warn(&vd->pdev->dev, "SVM: a reset lost %llu migrated pages: their processes "
			 "got SIGBUS\n", (unsigned long long)in_use);
	return in_use;
}

void vvf_svm_reset(struct vvf_dev *vd)
{
	struct vvf_svm *s = &vd->svm;

	mutex_lock(&s->setup_lock);
	vvf_svm_lose(vd);
	s->resetting = false;	/* a new pool may be made (after the lost pages are freed) */
	mutex_unlock(&s->setup_lock);
}

/* Taking back a lost range [off, off + size) of VRAM, under vd->mbox_lock. The allocator's
 * placement is the host's: what lands elsewhere is a filler, kept until every piece of the
 * range is held, so that the allocator must hand out the range next. */
struct vvf_hold {
	u32 client, device;
	u64 off, size;
	u64 held;			/* the range's VVF_SVM_ALIGN pieces held (bitmap) */
	u32 *fillers;			/* objects elsewhere, freed at the end */
	u32 nr_fillers, max_fillers;
	u32 calls;			/* ALLOCs sent */
};

enum { VVF_HOLD_IN, VVF_HOLD_OUT, VVF_HOLD_ACROSS };

#define VVF_HOLD_MAX		(1ull << 30)	/* the largest filler asked for */

/* @size bytes of contiguous VRAM for @h: VVF_HOLD_IN (inside the range: kept), _OUT
 * (elsewhere: a filler), _ACROSS (over its edge: freed again, the range is taken in pieces
 * instead), or the RM's or the mailbox's error. */
static int vvf_hold_take(struct vvf_dev *vd, struct vvf_hold *h, u64 size)
{
	struct vgpu_rm_vidmem_params p = { .size = size, .page_size = VVF_SVM_ALIGN,
					   .alignment = VVF_SVM_ALIGN,
					   .flags = VGPU_RM_MEM_CONTIGUOUS };
	bool across;
	u32 mem;
	int ret;

	h->calls++;
	ret = vvf_krm_alloc_send(vd, true, h->client, h->device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p,
				 sizeof(p), &mem);
	if (ret)
		return ret;
	if (p.size != size || p.addr % VVF_SVM_ALIGN) {
		vvf_krm_free(vd, true, h->client, mem);
		return -EPROTO;
	}
	if (p.addr >= h->off && p.addr - h->off < h->size && size <= h->size - (p.addr - h->off)) {
		h->held |= GENMASK_ULL((p.addr - h->off + size) / VVF_SVM_ALIGN - 1,
				       (p.addr - h->off) / VVF_SVM_ALIGN);
		return VVF_HOLD_IN;
	}
	across = p.addr < h->off + h->size && p.addr + size > h->off;
	if (!across && h->nr_fillers < h->max_fillers) {
		h->fillers[h->nr_fillers++] = mem;
		return VVF_HOLD_OUT;
	}
	vvf_krm_free(vd, true, h->client, mem);
	return across ? VVF_HOLD_ACROSS : -ENOSPC;
}

/* Allocate until every piece of the range is held. The first try is the range's size (on an
 * empty VRAM a first fit lands on it at once, or right below it); fillers double while they
 * land elsewhere, so a range far from where the allocator starts is reached in about
 * log(distance) calls, and anything over the range's edge makes the next tries single
 * pieces. Each call holds a new piece of VRAM or is followed by one that does, so this ends
 * once the range is held or the VF's VRAM (or quota) is used up. */
static int vvf_hold_fill(struct vvf_dev *vd, struct vvf_hold *h)
{
	u64 all = GENMASK_ULL(h->size / VVF_SVM_ALIGN - 1, 0), chunk = h->size;
	int ret;

	BUILD_BUG_ON(VVF_SVM_POOL / VVF_SVM_ALIGN > 64 || VVF_SVM_POOL % VVF_SVM_ALIGN);
	while (h->held != all) {
		ret = vvf_hold_take(vd, h, chunk);
		if ((ret == VGPU_RM_ERR_NO_MEMORY || ret == VGPU_RM_ERR_QUOTA) &&
		    chunk > VVF_SVM_ALIGN) {
			chunk = VVF_SVM_ALIGN;	/* no room that large: pieces */
			continue;
		}
		if (ret < 0)
			return ret;
		chunk = ret == VVF_HOLD_OUT ? min(chunk * 2, VVF_HOLD_MAX) : VVF_SVM_ALIGN;
	}
	return 0;
}

/* Hold the lost range for a new client of the driver's own: 0, or the error (nothing held).
 * The ALLOCs it took into *@calls. */
static int vvf_svm_hold_lost(struct vvf_dev *vd, u32 *calls)
{
	struct vvf_svm *s = &vd->svm;
	struct vvf_hold h = { .off = s->lost.off, .size = s->lost.size,
			      .fillers = s->lost.fillers, .max_fillers = s->lost.max_fillers };
	struct vgpu_rm_msg m = { 0 };
	int ret;
	u32 i;

	ret = vvf_krm_send(vd, true, VGPU_RM_OP_ALLOC_CLIENT, &m, sizeof(m), NULL, 0, &h.client);
	if (!ret)
		ret = vvf_krm_alloc_send(vd, true, h.client, h.client, VGPU_RM_CLASS_DEVICE, NULL,
					 0, &h.device);
	if (!ret)
		ret = vvf_hold_fill(vd, &h);
	for (i = 0; i < h.nr_fillers; i++)
		vvf_krm_free(vd, true, h.client, h.fillers[i]);
	*calls = h.calls;
	if (ret && h.client)
		vvf_krm_free(vd, true, h.client, h.client);
	if (!ret)
		s->lost.client = h.client;
	return ret;
}

int vvf_svm_fence_locked(struct vvf_dev *vd, bool reset, bool vram)
{
	struct vvf_svm *s = &vd->svm;
	u32 calls = 0;
	u64 in_use;
	int ret;

	lockdep_assert_held(&vd->mbox_lock);
	if (reset) {
		s->lost.client = 0;	/* the reset freed whatever held a range before */
		in_use = vvf_svm_lose(vd);
		/* Pages in use keep the pool's range where it was (a new pool is made only
		 * once they are all free): read after the lock that counted them. */
		if (in_use) {
			s->lost.need = true;
			s->lost.off = s->off;
			s->lost.size = s->size;
		}
	}
	if (!s->lost.need)
		return 0;
	spin_lock(&s->lock);
	in_use = s->in_use;
	spin_unlock(&s->lock);
	if (!in_use) {
		/* The last lost page is freed: nobody maps the range any more. */
		if (s->lost.client)
			vvf_krm_free(vd, true, s->lost.client, s->lost.client);
		s->lost.client = 0;
		s->lost.need = false;
		dev_info(&vd->pdev->dev, "SVM: the VRAM of the lost pages is free again\n");
		return 0;
	}
	/* Tried on the first call after the reset and again by each ALLOC of VRAM while it
	 * fails: the other calls cannot give the range to anyone. */
	if (s->lost.client || (!reset && !vram))
		return 0;
	ret = vvf_svm_hold_lost(vd, &calls);
	if (ret)
		dev_warn_ratelimited(&vd->pdev->dev, "SVM: cannot hold the VRAM of %llu lost pages "
				     "(%d): no VRAM is allocated until they are freed\n",
				     (unsigned long long)in_use, ret);
	else
		dev_info(&vd->pdev->dev, "SVM: the VRAM of %llu lost pages (%llu MiB at %#llx) is "
			 "held until they are freed (%u ALLOCs)\n", (unsigned long long)in_use,
			 (unsigned long long)(s->lost.size >> 20),
			 (unsigned long long)s->lost.off, calls);
	return ret ? -EAGAIN : 0;
}

/* Whether the host has not begun a reset since reset count @rc: the VRAM just read was
 * not scrubbed yet. The host marks the header RESETTING before it scrubs, and x86 keeps
 * loads in order, so seeing READY after the copies means they read the old contents. */
static bool vvf_svm_vram_intact(struct vvf_dev *vd, u32 rc)
{
	smp_rmb();
	return smp_load_acquire(&vd->hdr->state) == VF_STATE_READY &&
	       smp_load_acquire(&vd->hdr->reset_count) == rc;
}

/* Every page of the pool that is in use goes back to system memory, @n pfns at a time
 * from @pfn, its process keeping its data. @vd: a reset is announced (device memory
 * still there for reset count @rc): a batch copied once the reset began stays in the pool
 * (lost, so SIGBUS) instead of bringing scrubbed bytes back; -EAGAIN then. NULL: the
 * device is going. Otherwise the pages moved. */
static long vvf_svm_evict_range(unsigned long pfn, unsigned long n, struct vvf_dev *vd, u32 rc)
{
	unsigned long src[VVF_SVM_BATCH], dst[VVF_SVM_BATCH] = { 0 }, i;
	long moved = 0;

	if (migrate_device_range(src, pfn, n))
		return 0;
	for (i = 0; i < n; i++) {
		struct page *spage = migrate_pfn_to_page(src[i]), *dpage;

		if (!spage || !(src[i] & MIGRATE_PFN_MIGRATE))
			continue;
		/* No failure allowed: the device memory is about to go away. */
		dpage = alloc_page(GFP_HIGHUSER_MOVABLE | __GFP_NOFAIL);
		lock_page(dpage);
		copy_highpage(dpage, spage);
		dst[i] = migrate_pfn(page_to_pfn(dpage));
	}
	if (vd && !vvf_svm_vram_intact(vd, rc)) {
		for (i = 0; i < n; i++) {
			struct page *dpage = migrate_pfn_to_page(dst[i]);

			if (!dpage)
				continue;
			unlock_page(dpage);
			put_page(dpage);
			dst[i] = 0;
		}
		moved = -EAGAIN;
	}
	migrate_device_pages(src, dst, n);
	for (i = 0; i < n && moved >= 0; i++)
		if (dst[i] && (src[i] & MIGRATE_PFN_MIGRATE))
			moved++;
	migrate_device_finalize(src, dst, n);
	return moved;
}

u64 vvf_svm_evict_for_reset(struct vvf_dev *vd, u32 seq)
{
	struct vvf_svm *s = &vd->svm;
	u32 rc = smp_load_acquire(&vd->hdr->reset_count);
	unsigned long pfn, end;
	u64 in_use, moved = 0;
	long got;

	down_write(&s->migrate_sem);
	s->resetting = true;
	s->resetting_seq = seq;
	up_write(&s->migrate_sem);
	mutex_lock(&s->setup_lock);
	if (s->mapped && !s->broken) {
		pfn = PHYS_PFN(s->pgmap.range.start);
		end = pfn + (s->size >> PAGE_SHIFT);
		for (; pfn < end; pfn += VVF_SVM_BATCH) {
			got = vvf_svm_evict_range(pfn, min_t(unsigned long, VVF_SVM_BATCH,
							     end - pfn), vd, rc);
			if (got < 0)
				break;	/* the reset began: the rest is lost */
			moved += got;
		}
	}
	mutex_unlock(&s->setup_lock);
	spin_lock(&s->lock);
	in_use = s->ready ? s->in_use : 0;
	spin_unlock(&s->lock);
	s->evicted += moved;
	s->evict_lost += in_use;
	if (moved || in_use)
		dev_info(&vd->pdev->dev, "SVM: reset %u announced: %llu pages migrated back to "
			 "system memory, %llu left in VRAM\n", seq, (unsigned long long)moved,
			 (unsigned long long)in_use);
	return in_use;
}

void vvf_svm_fini(struct vvf_dev *vd)
{
	struct vvf_svm *s = &vd->svm;
	unsigned long pfn, end;
	u64 in_use;

	if (!s->mapped)
		return;
	/* No page leaves the pool from here on: the pages freed by the eviction below go back
	 * onto the free list, whose struct pages memunmap_pages tears down. */
	spin_lock(&s->lock);
	s->ready = false;
	s->free = NULL;
	in_use = s->in_use;
	spin_unlock(&s->lock);
	if (in_use && !s->broken) {
		pfn = PHYS_PFN(s->pgmap.range.start);
		end = pfn + (s->size >> PAGE_SHIFT);
		for (; pfn < end; pfn += VVF_SVM_BATCH)
			vvf_svm_evict_range(pfn, min_t(unsigned long, VVF_SVM_BATCH, end - pfn),
					    NULL, 0);
		dev_info(&vd->pdev->dev, "SVM: %llu pages migrated back to system memory\n",
			 (unsigned long long)in_use);
	}
	/* Waits until every page is free (after a reset's loss: until their processes are
	 * gone, which SIGBUS sees to). */
	memunmap_pages(&s->pgmap);
	spin_lock(&s->lock);
	s->free = NULL;
	spin_unlock(&s->lock);
	s->mapped = false;
}

int vvf_svm_prepare(struct vvf_dev *vd)
{
	struct vvf_svm *s = &vd->svm;

	/* Every 2 MiB of the VF's VRAM a filler at worst, one more for a piece over its end. */
	s->lost.max_fillers = div64_u64(vd->lay.vram_size, VVF_SVM_ALIGN) + 1;
	s->lost.fillers = kvmalloc_array(s->lost.max_fillers, sizeof(*s->lost.fillers),
					 GFP_KERNEL);
	return s->lost.fillers ? 0 : -ENOMEM;
}

void vvf_svm_free(struct vvf_dev *vd)
{
	kvfree(vd->svm.lost.fillers);
	vd->svm.lost.fillers = NULL;
}

void vvf_svm_init(struct vvf_dev *vd)
{
	mutex_init(&vd->svm.setup_lock);
	init_rwsem(&vd->svm.migrate_sem);
	spin_lock_init(&vd->svm.lock);
}
