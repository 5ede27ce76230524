// SPDX-License-Identifier: GPL-2.0 OR MIT
/* The kernel-owned SVM address space of one open file (uapi: VGPU_VF_IOC_AS_*).
 *
 * The driver makes it with an RM client of its own, which the process cannot name (its RM
 * messages may only name the clients it allocated), so the process can neither rewrite the
 * page tables nor point a channel of its own at them. GPU virtual address = the process's
 * CPU virtual address; the page tables (a 2 MiB VRAM allocation handed out 4 KiB table by
 * table) start empty, and a replayable channel's first access to process memory faults.
 *
 * Fault service: vgpud forwards the fault buffer as VF_EVT_MMU_FAULT events; the event thread
 * hands those of this file's channels to a work item, which for each one checks that the
 * process could make the access itself (a vma it may read, or write for a write), faults the
 * block around it in with hmm_range_fault, moves what is in system memory into the slice's
 * VRAM (the only memory a VF reaches in a VM: the guest's RAM is not in the function's IOMMU
 * domain) and, if no invalidation raced it, writes the PTEs; then one FAULT_REPLAY resumes
 * the stalled channels. A full pool first gives back pages of the same process the GPU
 * mapped earlier (round robin). An access the process could not make cancels its channel.
 *
 * The mirror: one mmu_interval_notifier over the mirrored range. Its invalidation (munmap,
 * fork's write protection, a migration, mprotect, exit) clears the GPU PTEs of the range
 * before it returns. Every PTE is VOLATILE (vgpu/gmmu.h: never cached in an engine TLB, a
 * change is seen by the next access), which is how this ABI invalidates a translation
 * without a channel to send MMU_INVALIDATE on; the user-space driver's managed memory maps
 * its pages the same way.
 *
 * AS_MAP: outside the mirrored range and the channel window, a process maps memory objects
 * it allocated through its own RM calls (VRAM, DMA memory) at GPU addresses it picks; the
 * kernel writes those PTEs too. With strict_as this is how a process that may not build page
 * tables of its own runs GPU work on its buffers. A FREE of such memory unmaps it first
 * (vvf_as_unmap_mem, from the file's RM path before the host frees it). */
#include <linux/hmm.h>
#include <linux/mmu_notifier.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>

#include "vgpu_vf_internal.h"

#define VVF_AS_PT_BYTES		(2ull << 20)	/* VRAM for page tables: 512 tables */
#define VVF_AS_USER_END		(1ull << 47)	/* process addresses the GPU may mirror */
#define VVF_AS_KVA_BASE		(1ull << 47)	/* the kernel window: above every process */
#define VVF_AS_KVA_SIZE		(1ull << 47)	/* ... and inside the 48 bits the tables tell */
#define VVF_AS_CHAN_SPAN	(2ull << 20)	/* kernel window per channel */
#define VVF_AS_BLOCK		16		/* pages serviced per fault (64 KiB) */
#define VVF_AS_RETRIES		8		/* migrate-then-look rounds per fault */
#define VVF_AS_FAULTS		64		/* fault entries queued between services */
#define VVF_AS_EVICT		64		/* pages a full pool gives back per round */

/* One AS_MAP mapping: [va, va + len) onto memory object @handle of @client. */
struct vvf_as_map {
	struct list_head node;
	u64 va, len;
	u32 client, handle;
};

struct vvf_as_chan {
	u32 handle, mem, chid, token;
	u64 addr, size;			/* VF-physical VRAM of its memory */
	bool cancelled;
};

struct vvf_as {
	struct vvf_dev *vd;
	struct mm_struct *mm;		/* mmgrab'd: the mirrored process */
	struct pid *pid;		/* told by SIGBUS if a reset loses pages moved for it */
	struct mmu_interval_notifier mni;
	u64 start, end;			/* the mirrored range */
	u32 reset_count;		/* the VF's reset count when made */
	u32 client, device, subdevice, vaspace, ptmem;
	u64 pt_phys;			/* VF-physical address of the table memory */
	u64 *pt;			/* ... its CPU view (BAR2, write-back) */

	/* Protects the tables, pt_used, evict_cursor and lost: taken by the invalidation, by
	 * the fault service to write PTEs, by reset and release. Never held across an RM call:
	 * the invalidation runs in direct reclaim too, and the mailbox must not wait for it. */
	struct mutex lock;
	u32 pt_used;			/* tables handed out (the root is table 0) */
	u64 evict_cursor;		/* where the next eviction looks for victims */
	bool lost;			/* a VF reset freed everything: touch no VRAM */
	struct list_head maps;		/* struct vvf_as_map (AS_MAP), also under lock */
	u32 nr_maps;

	spinlock_t qlock;		/* protects chans, nr_chans, q, qn, the counters */
	struct vvf_as_chan chans[VGPU_VF_AS_CHANNELS];
	u32 nr_chans;
	struct vgpu_fault_entry q[VVF_AS_FAULTS];
	u32 qn;
	struct work_struct work;
	u64 faults, mapped, migrated, invalidated, replays, cancelled, evicted;
};

/* ---- page tables ---- */

/* The CPU view of the table a PDE points at, or NULL if it points at none of the tables
 * handed out. The tables are VRAM that GPU work of any non-strict process of the VF can
 * write, so a PDE read back from them is untrusted: only one the kernel could have written
 * (VALID, no 64 KiB table, no leaf, a table it handed out) becomes a kernel pointer. */
static u64 *vvf_as_table(struct vvf_as *as, u64 pde)
{
	u64 phys = pde & VGPU_GMMU_ADDR_MASK;

	if ((pde & (VGPU_GMMU_VALID | VGPU_GMMU_PT64K | VGPU_GMMU_LEAF)) != VGPU_GMMU_VALID ||
	    phys < as->pt_phys ||
	    phys - as->pt_phys >= (u64)as->pt_used * VGPU_GMMU_TABLE_BYTES)
		return NULL;
	return as->pt + (phys - as->pt_phys) / sizeof(u64);
}

/* The L3 (4 KiB page) table of @va, made if @alloc; NULL if there is none (then *@span is
 * the size of the missing level's reach, all of it without a table), no table left, or a PDE
 * that points outside the tables (then the address space is lost: someone else wrote its
 * tables, and nothing of them is followed again). Under as->lock. */
static u64 *vvf_as_l3(struct vvf_as *as, u64 va, bool alloc, u64 *span)
{
	static const unsigned int shifts[3] = { VGPU_GMMU_L0_SHIFT, VGPU_GMMU_L1_SHIFT,
						VGPU_GMMU_L2_SHIFT };
	u64 *t = as->pt, *e, pde, phys;
	int l;

	for (l = 0; l < 3; l++) {
		*span = 1ull << shifts[l];
		if (as->lost)
			return NULL;
		e = &t[(va >> shifts[l]) & (VGPU_GMMU_ENTRIES - 1)];
		pde = READ_ONCE(*e);	/* once: the check and the walk must see one value */
		if (!(pde & VGPU_GMMU_VALID)) {
			if (!alloc || as->pt_used >= VVF_AS_PT_BYTES / VGPU_GMMU_TABLE_BYTES)
				return NULL;
			/* The table memory was zeroed when the address space was made. */
			phys = as->pt_phys + (u64)as->pt_used++ * VGPU_GMMU_TABLE_BYTES;
			pde = vgpu_gmmu_pde(phys);
			WRITE_ONCE(*e, pde);
		}
		t = vvf_as_table(as, pde);
		if (!t) {
			dev_warn_ratelimited(&as->vd->pdev->dev,
					     "SVM: a PDE points outside the tables: AS lost\n");
			as->lost = true;
			return NULL;
		}
	}
	return t;
}

/* Clear the PTEs of [start, end): how many were valid. Under as->lock. */
static u64 vvf_as_clear(struct vvf_as *as, u64 start, u64 end)
{
	u64 va = start, next, span, n = 0, *l3, *p;

	while (va < end) {
		l3 = vvf_as_l3(as, va, false, &span);
		if (!l3) {
			next = (va & ~(span - 1)) + span;
		} else {
			next = (va & ~(VGPU_GMMU_PAGE_2M - 1)) + VGPU_GMMU_PAGE_2M;
			for (; va < min(next, end); va += PAGE_SIZE) {
				p = &l3[(va >> VGPU_GMMU_L3_4K_SHIFT) & (VGPU_GMMU_ENTRIES - 1)];
				if (READ_ONCE(*p)) {
					WRITE_ONCE(*p, 0);
					n++;
				}
			}
		}
		if (!next)		/* wrapped past the top */
			break;
		va = next;
	}
	return n;
}

/* Up to @max process pages the GPU has mapped, outside [keep_start, keep_end), into @out,
 * from the eviction cursor on: round robin over the mirrored range, so every mapped page
 * takes its turn. Under as->lock. */
static u32 vvf_as_victims(struct vvf_as *as, u64 keep_start, u64 keep_end, u64 *out, u32 max)
{
	u64 va = as->evict_cursor, first, next, span, *l3;
	bool wrapped = false;
	u32 n = 0;

	if (va < as->start || va >= as->end)
		va = as->start;
	first = va;
	for (;;) {
		if (va >= as->end) {
			if (wrapped)
				break;
			wrapped = true;
			va = as->start;
		}
		if (wrapped && va >= first)
			break;
		l3 = vvf_as_l3(as, va, false, &span);
		if (!l3) {
			next = (va & ~(span - 1)) + span;
		} else {
			next = (va & ~(VGPU_GMMU_PAGE_2M - 1)) + VGPU_GMMU_PAGE_2M;
			for (; va < min(next, as->end) && n < max; va += PAGE_SIZE)
				if ((va < keep_start || va >= keep_end) &&
				    READ_ONCE(l3[(va >> VGPU_GMMU_L3_4K_SHIFT) &
						 (VGPU_GMMU_ENTRIES - 1)]))
					out[n++] = va;
			if (n == max) {
				as->evict_cursor = va;
				return n;
			}
		}
		if (!next)
			break;
		va = next;
	}
	as->evict_cursor = as->start;
	return n;
}

/* Whether the VF was reset since the address space was made (its VRAM is not ours any
 * more). Under as->lock: sets lost. */
static bool vvf_as_gone(struct vvf_as *as)
{
	if (!as->lost && smp_load_acquire(&as->vd->hdr->reset_count) != as->reset_count)
		as->lost = true;
	return as->lost;
}

/* ---- the mirror ---- */

static bool vvf_as_invalidate(struct mmu_interval_notifier *mni,
			      const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct vvf_as *as = container_of(mni, struct vvf_as, mni);
	u64 n = 0;

	if (mmu_notifier_range_blockable(range))
		mutex_lock(&as->lock);
	else if (!mutex_trylock(&as->lock))
		return false;
	mmu_interval_set_seq(mni, cur_seq);
	if (!vvf_as_gone(as))
		n = vvf_as_clear(as, max_t(u64, range->start, as->start),
				 min_t(u64, range->end, as->end));
	mutex_unlock(&as->lock);
	if (n) {
		spin_lock(&as->qlock);
		as->invalidated += n;
		spin_unlock(&as->qlock);
	}
	return true;
}

static const struct mmu_interval_notifier_ops vvf_as_mirror_ops = {
	.invalidate = vvf_as_invalidate,
};

/* ---- RM calls of the address space's own client ---- */

static int vvf_as_control(struct vvf_as *as, u32 obj, u32 cmd, void *params, u32 len)
{
	struct {
		struct vgpu_rm_control c;
		u8 p[16];
	} m = { .c = { .h_client = as->client, .h_object = obj, .cmd = cmd, .params_len = len } };

	memcpy(m.p, params, len);
	return vvf_krm(as->vd, VGPU_RM_OP_CONTROL, &m, sizeof(m.c) + len, NULL, 0, NULL);
}

static int vvf_as_free(struct vvf_as *as, u32 obj)
{
	struct vgpu_rm_free m = { .h_client = as->client, .h_object = obj };

	return vvf_krm(as->vd, VGPU_RM_OP_FREE, &m, sizeof(m), NULL, 0, NULL);
}

/* VRAM of @size bytes, physically contiguous, under the client's DEVICE. */
static int vvf_as_vidmem(struct vvf_as *as, u64 size, u64 page, u32 *h, u64 *addr)
{
	struct vgpu_rm_vidmem_params p = { .size = size, .page_size = page, .alignment = page,
					   .flags = VGPU_RM_MEM_CONTIGUOUS };
	int ret = vvf_krm_alloc(as->vd, as->client, as->device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p,
				sizeof(p), h);
	struct vvf_layout *l = &as->vd->lay;

	if (ret)
		return ret;
	/* Host input: the memory must lie in the VRAM aperture before the CPU touches it, and
	 * be aligned as asked: page tables and PDEs name tables by their aligned addresses,
	 * so a misaligned one would point the GPU at VRAM beside it. */
	if (p.addr > l->vram_size || size > l->vram_size - p.addr || (page && p.addr % page)) {
		dev_err_ratelimited(&as->vd->pdev->dev, "SVM: the RM gave VRAM at %#llx, "
				    "%#llx bytes, for %#llx aligned to %#llx: refused\n", p.addr,
				    p.size, size, page);
		vvf_as_free(as, *h);
		return -EPROTO;
	}
	*addr = p.addr;
	return 0;
}

static void *vvf_as_vram(struct vvf_as *as, u64 addr)
{
	return as->vd->bar2 + as->vd->lay.vram_off + addr;
}

/* ---- cancelling a channel ---- */

/* What a fault service's error means, for the log. */
static const char *vvf_as_why(int err)
{
	switch (err) {
	case -EFAULT:
		return "not an access its process may make";
	case -EOPNOTSUPP:
		return "shared or file-backed memory";
	case -ENOMEM:
		return "no room in VRAM or in the page tables";
	case -ESRCH:
		return "its process is gone";
	case -EBUSY:
		return "a reset is announced, or the SVM pool tracks as many processes as it can";
	default:
		return "not serviced";
	}
}

/* The process could not have made this access: stop the channel (disabled, so no replay
 * resumes it), show VGPU_CHAN_ERR_MMU_FAULT in its USERD as the device shows its own
 * errors, and post VF_EVT_CHAN_ERROR to the file that owns it. Nobody else is affected. */
static void vvf_as_cancel(struct vvf_as *as, u32 chid, u64 va, int why, const char *step)
{
	struct vgpu_rm_enable_params off = { .enable = 0 };
	struct vf_event e = { .type = VF_EVT_CHAN_ERROR, .arg0 = chid,
			      .arg1 = VGPU_CHAN_ERR_MMU_FAULT };
	struct vgpu_userd *u;
	struct vvf_as_chan *c = NULL;
	u32 i, handle = 0;
	u64 addr = 0;

	spin_lock(&as->qlock);
	for (i = 0; i < as->nr_chans; i++)
		if (as->chans[i].chid == chid && !as->chans[i].cancelled) {
			c = &as->chans[i];
			c->cancelled = true;
			handle = c->handle;
			addr = c->addr;
			as->cancelled++;
		}
	spin_unlock(&as->qlock);
	if (!c)
		return;
	vvf_as_control(as, handle, VGPU_RM_CTRL_CHANNEL_ENABLE, &off, sizeof(off));
	mutex_lock(&as->lock);
	if (!vvf_as_gone(as)) {
		u = vvf_as_vram(as, addr);
		WRITE_ONCE(u->error_gp_get, READ_ONCE(u->gp_get));
		WRITE_ONCE(u->error_method, 0xffffffffu);
		WRITE_ONCE(u->error_time_ns, ktime_get_ns());
		smp_store_release(&u->error, VGPU_CHAN_ERR_MMU_FAULT);
	}
	mutex_unlock(&as->lock);
	vvf_files_event(as->vd, &e);
	dev_info_ratelimited(&as->vd->pdev->dev, "channel %u of process %d cancelled: GPU fault at "
			     "%#llx: %s (%d, %s)\n", chid, pid_nr(as->pid), (unsigned long long)va,
			     vvf_as_why(why), why, step);
}

/* ---- fault service ---- */

/* Whether channel @chid was cancelled already: its faults are not serviced again (nor
 * replayed: a cancelled channel that faulted anew would otherwise fault and replay for
 * ever). */
static bool vvf_as_chan_cancelled(struct vvf_as *as, u32 chid)
{
	bool ret = false;
	u32 i;

	spin_lock(&as->qlock);
	for (i = 0; i < as->nr_chans; i++)
		if (as->chans[i].chid == chid)
			ret = as->chans[i].cancelled;
	spin_unlock(&as->qlock);
	return ret;
}

static u64 vvf_as_pte_of(struct vvf_as *as, unsigned long hmm_pfn)
{
	struct page *page = hmm_pfn_to_page(hmm_pfn);
	u64 addr = page_to_phys(page) - as->vd->bar2_phys - as->vd->lay.vram_off;

	return vgpu_gmmu_pte(addr, VGPU_GMMU_APER_VRAM | VGPU_GMMU_VOLATILE |
			     (hmm_pfn & HMM_PFN_WRITE ? 0 : VGPU_GMMU_RO));
}

/* The pool is full: move up to VVF_AS_EVICT of this process's pages the GPU has mapped
 * (outside the block being serviced) back to system memory; the migration's invalidation
 * clears their PTEs, and the GPU faults them back in when it needs them. Under
 * mmap_read_lock(mm). Pages moved. */
static u64 vvf_as_evict(struct vvf_as *as, struct mm_struct *mm, u64 keep_start, u64 keep_end)
{
	u64 va[VVF_AS_EVICT], moved, total = 0;
	u32 n, i, j;

	mutex_lock(&as->lock);
	n = vvf_as_gone(as) ? 0 : vvf_as_victims(as, keep_start, keep_end, va, VVF_AS_EVICT);
	mutex_unlock(&as->lock);
	for (i = 0; i < n; i = j + 1) {
		for (j = i; j + 1 < n && va[j + 1] == va[j] + PAGE_SIZE; j++)
			;
		/* A page whose vma changed since is skipped: its PTE is gone already. */
		if (!vvf_svm_move_locked(as->vd, mm, as->pid, va[i], (u64)(j - i + 1) * PAGE_SIZE,
					 false, &moved))
			total += moved;
	}
	return total;
}

/* The block around @va to service (VVF_AS_BLOCK pages, inside its vma and the mirrored
 * range) into @r, if the process could make the access itself. Under mmap_read_lock.
 * 0, -EFAULT (no vma, or not readable / writable as the access needs) or -EOPNOTSUPP
 * (shared or file memory, which does not move into VRAM); *@step names the check. */
static int vvf_as_block(struct vvf_as *as, u64 va, bool write, struct hmm_range *r,
			const char **step)
{
	struct vm_area_struct *vma = vma_lookup(as->mm, va);
	u64 base = ALIGN_DOWN(va, VVF_AS_BLOCK * PAGE_SIZE);

	*step = "no vma";
	if (!vma)
		return -EFAULT;
	*step = "vma permissions";
	if (!(vma->vm_flags & VM_READ) || (write && !(vma->vm_flags & VM_WRITE)))
		return -EFAULT;
	*step = "vma kind";
	if (!vma_is_anonymous(vma) || (vma->vm_flags & VM_SHARED))
		return -EOPNOTSUPP;
	r->start = max3(as->start, (u64)vma->vm_start, base);
	r->end = min3(as->end, (u64)vma->vm_end, base + VVF_AS_BLOCK * PAGE_SIZE);
	return 0;
}

/* Whether every page of the snapshot @r is one of this VF's pool pages. */
static bool vvf_as_resident(struct vvf_as *as, const struct hmm_range *r)
{
	u64 i, n = (r->end - r->start) >> PAGE_SHIFT;

	for (i = 0; i < n; i++)
		if (!(r->hmm_pfns[i] & HMM_PFN_VALID) ||
		    !vvf_svm_page_ours(as->vd, hmm_pfn_to_page(r->hmm_pfns[i])))
			return false;
	return true;
}

/* Move the block of @r into VRAM, making room in a full pool. Called under
 * mmap_read_lock, which it drops. 0 (look again) or -errno. */
static int vvf_as_make_resident(struct vvf_as *as, const struct hmm_range *r)
{
	u64 moved, evicted = 0;
	int ret = vvf_svm_move_locked(as->vd, as->mm, as->pid, r->start, r->end - r->start,
				      true, &moved);

	/* Pinned pages stay where they are; a full pool gives back pages of this process. */
	if (!ret && !moved && vvf_svm_full(as->vd))
		evicted = vvf_as_evict(as, as->mm, r->start, r->end);
	mmap_read_unlock(as->mm);
	spin_lock(&as->qlock);
	as->migrated += moved;
	as->evicted += evicted;
	spin_unlock(&as->qlock);
	if (ret)
		return ret;
	return moved || evicted ? 0 : -ENOMEM;
}

/* Write the PTEs of the snapshot @r (every page in the pool). Under as->lock. 0, -ENOLINK
 * (a reset freed the tables) or -ENOMEM (no table left). */
static int vvf_as_map(struct vvf_as *as, const struct hmm_range *r)
{
	u64 i, n = (r->end - r->start) >> PAGE_SHIFT, span, *l3;
	int ret = vvf_as_gone(as) ? -ENOLINK : 0;

	for (i = 0; i < n && !ret; i++) {
		u64 a = r->start + i * PAGE_SIZE;

		l3 = vvf_as_l3(as, a, true, &span);
		if (!l3)
			ret = -ENOMEM;
		else
			WRITE_ONCE(l3[(a >> VGPU_GMMU_L3_4K_SHIFT) & (VGPU_GMMU_ENTRIES - 1)],
				   vvf_as_pte_of(as, r->hmm_pfns[i]));
	}
	spin_lock(&as->qlock);
	as->mapped += ret ? 0 : n;
	spin_unlock(&as->qlock);
	return ret;
}

/* Map the block around @va for the GPU: the process's own pages, faulted in as the access
 * needs (writable for a write), moved into VRAM. 0, or why the channel must be cancelled
 * (-EFAULT, -EOPNOTSUPP: see vvf_as_block; -ENOMEM: no room in VRAM or in the page
 * tables; -EBUSY: invalidations kept racing for a second). *@step names the step that
 * failed, for the log: a cancel must say whether the process's own mapping refused the
 * access or a step of the service did. */
static int vvf_as_service(struct vvf_as *as, u64 va, bool write, const char **step)
{
	unsigned long pfns[VVF_AS_BLOCK], timeout = jiffies + msecs_to_jiffies(1000);
	struct hmm_range range = {
		.notifier = &as->mni, .hmm_pfns = pfns, .dev_private_owner = as->vd,
		.default_flags = HMM_PFN_REQ_FAULT | (write ? HMM_PFN_REQ_WRITE : 0),
	};
	int ret, round = 0;

	va &= PAGE_MASK;
	*step = "outside the mirrored range";
	if (va < as->start || va >= as->end)
		return -EFAULT;
	*step = "SVM pool";
	ret = vvf_svm_ensure(as->vd);
	while (!ret) {
		/* A reset freed the address space (or the device is going): none of its VRAM,
		 * the pool's included, is ours to move pages into or to map. */
		*step = "address space lost";
		if (READ_ONCE(as->lost))
			return -ENOLINK;
		*step = "invalidations kept racing";
		if (time_after(jiffies, timeout))
			return -EBUSY;
		range.notifier_seq = mmu_interval_read_begin(&as->mni);
		mmap_read_lock(as->mm);
		ret = vvf_as_block(as, va, write, &range, step);
		if (!ret) {
			*step = "hmm_range_fault";
			ret = hmm_range_fault(&range);
		}
		if (ret) {
			mmap_read_unlock(as->mm);
			if (ret == -EBUSY)
				ret = 0;	/* an invalidation raced the fault: again */
			continue;
		}
		if (!vvf_as_resident(as, &range)) {
			/* In system memory (or the zero page): into VRAM, then look again. */
			*step = "migration into VRAM";
			ret = ++round > VVF_AS_RETRIES ? -ENOMEM : 0;
			if (ret)
				mmap_read_unlock(as->mm);
			else
				ret = vvf_as_make_resident(as, &range);
			continue;
		}
		mutex_lock(&as->lock);
		if (mmu_interval_read_retry(&as->mni, range.notifier_seq)) {
			mutex_unlock(&as->lock);
			mmap_read_unlock(as->mm);
			continue;
		}
		*step = "PTEs";
		ret = vvf_as_map(as, &range);
		mutex_unlock(&as->lock);
		mmap_read_unlock(as->mm);
		return ret;
	}
	return ret;
}

static void vvf_as_work(struct work_struct *w)
{
	struct vvf_as *as = container_of(w, struct vvf_as, work);
	struct vgpu_fault_entry *q;
	bool alive, served = false;
	const char *step = "process gone";
	u32 i, j, n;
	int ret;

	q = kmalloc_array(VVF_AS_FAULTS, sizeof(*q), GFP_KERNEL);
	if (!q)
		return;		/* the stalled channels wait for the next fault's service */
	spin_lock(&as->qlock);
	n = as->qn;
	memcpy(q, as->q, n * sizeof(*q));
	as->qn = 0;
	spin_unlock(&as->qlock);
	alive = mmget_not_zero(as->mm);
	for (i = 0; i < n && !READ_ONCE(as->lost); i++) {
		/* One service per page and access: several channels may fault on one page. */
		for (j = 0; j < i; j++)
			if ((q[j].va ^ q[i].va) < PAGE_SIZE && q[j].access == q[i].access)
				break;
		if (j < i || vvf_as_chan_cancelled(as, q[i].chid))
			continue;
		ret = alive ? vvf_as_service(as, q[i].va, q[i].access == VGPU_ACCESS_WRITE, &step)
			    : -ESRCH;
		/* A lost address space's channels are gone with the reset; their ids may be
		 * another file's by now, so nothing is posted for them. */
		if (ret && !READ_ONCE(as->lost))
			vvf_as_cancel(as, q[i].chid, q[i].va, ret, step);
		served = true;
	}
	if (alive)
		mmput(as->mm);
	if (served && !READ_ONCE(as->lost)) {
		/* The PTEs are in VRAM before the device is told to look again. */
		wmb();
		if (!vvf_as_control(as, as->subdevice, VGPU_RM_CTRL_FAULT_REPLAY, NULL, 0)) {
			spin_lock(&as->qlock);
			as->replays++;
			spin_unlock(&as->qlock);
		}
	}
	kfree(q);
}

bool vvf_as_fault_event(struct vvf_dev *vd, const struct vf_event *e)
{
	struct vvf_file *f;
	struct vvf_as *as;
	bool ours = false;
	u32 i;

	mutex_lock(&vd->files_mutex);
	list_for_each_entry(f, &vd->files, node) {
		as = f->as;
		/* A reset freed a lost one's channels: their ids may be another file's now. */
		if (!as || READ_ONCE(as->lost))
			continue;
		spin_lock(&as->qlock);
		for (i = 0; i < as->nr_chans && as->chans[i].chid != e->arg0; i++)
			;
		ours = i < as->nr_chans;
		if (ours) {
			as->faults++;
			/* A full queue loses the entry, not the fault: the replay after the
			 * queued ones makes the channel fault again. */
			if (as->qn < VVF_AS_FAULTS)
				memcpy(&as->q[as->qn++], e->pad, sizeof(as->q[0]));
		}
		spin_unlock(&as->qlock);
		if (ours) {
			queue_work(vd->as_wq, &as->work);
			break;
		}
	}
	mutex_unlock(&vd->files_mutex);
	return ours;
}

/* ---- making it, and its channels ---- */

static void vvf_as_destroy(struct vvf_as *as)
{
	struct vvf_as_map *m, *tmp;

	list_for_each_entry_safe(m, tmp, &as->maps, node)
		kfree(m);
	if (as->mni.mm)
		mmu_interval_notifier_remove(&as->mni);
	if (as->mm)
		mmdrop(as->mm);
	put_pid(as->pid);
	kfree(as);
}

/* The RM objects: a client of the driver's, its DEVICE and SUBDEVICE, the table memory
 * (zeroed) and the VASPACE on its first table. */
static int vvf_as_rm(struct vvf_as *as)
{
	struct vvf_dev *vd = as->vd;
	struct vgpu_rm_vaspace_params vp = { 0 };
	struct vgpu_rm_msg m = { 0 };
	int ret;

	ret = vvf_krm(vd, VGPU_RM_OP_ALLOC_CLIENT, &m, sizeof(m), NULL, 0, &as->client);
	if (ret)
		return ret;
	ret = vvf_krm_alloc(vd, as->client, as->client, VGPU_RM_CLASS_DEVICE, NULL, 0, &as->device);
	if (!ret)
		ret = vvf_krm_alloc(vd, as->client, as->device, VGPU_RM_CLASS_SUBDEVICE, NULL, 0,
				    &as->subdevice);
	if (!ret)
		ret = vvf_as_vidmem(as, VVF_AS_PT_BYTES, VVF_AS_PT_BYTES, &as->ptmem, &as->pt_phys);
	if (!ret) {
		as->pt = vvf_as_vram(as, as->pt_phys);
		memset(as->pt, 0, VVF_AS_PT_BYTES);
		as->pt_used = 1;
		vp.pdb = as->pt_phys;
		wmb();
		ret = vvf_krm_alloc(vd, as->client, as->device, VGPU_RM_CLASS_VASPACE, &vp,
				    sizeof(vp), &as->vaspace);
	}
	if (ret) {
		struct vgpu_rm_free fr = { .h_client = as->client, .h_object = as->client };

		vvf_krm(vd, VGPU_RM_OP_FREE, &fr, sizeof(fr), NULL, 0, NULL);
		as->client = 0;
	}
	return ret;
}

long vvf_ioc_as_create(struct vvf_file *f, unsigned long arg)
{
	struct vvf_dev *vd = f->vd;
	struct vgpu_vf_ioc_as_create a;
	struct mm_struct *mm = current->mm;
	struct vvf_as *as;
	u64 end;
	int ret;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	if (a.size != sizeof(a) || a.flags || (a.addr | a.len) & ~PAGE_MASK || !mm)
		return -EINVAL;
	if (!a.len) {
		a.addr = 0;
		a.len = min_t(u64, mm->task_size, VVF_AS_USER_END) & PAGE_MASK;
	}
	end = a.addr + a.len;
	if (end < a.addr || end > VVF_AS_USER_END)
		return -EINVAL;
	mutex_lock(&f->as_lock);
	if (f->as) {
		ret = -EEXIST;
		goto out;
	}
	ret = vvf_svm_ensure(vd);	/* the fault service moves pages into its pool */
	if (ret)
		goto out;
	ret = vvf_file_charge(f, VVF_AS_PT_BYTES, 0);	/* its page tables are the file's */
	if (ret)
		goto out;
	as = kzalloc(sizeof(*as), GFP_KERNEL);
	if (!as) {
		ret = -ENOMEM;
		goto uncharge;
	}
	as->vd = vd;
	as->start = a.addr;
	as->end = end;
	INIT_LIST_HEAD(&as->maps);
	mutex_init(&as->lock);
	spin_lock_init(&as->qlock);
	INIT_WORK(&as->work, vvf_as_work);
	as->reset_count = smp_load_acquire(&vd->hdr->reset_count);
	as->pid = get_pid(task_tgid(current));
	mmgrab(mm);
	as->mm = mm;
	ret = vvf_as_rm(as);
	if (ret) {
		vvf_as_destroy(as);
		goto uncharge;
	}
	ret = mmu_interval_notifier_insert(&as->mni, mm, as->start, end - as->start,
					   &vvf_as_mirror_ops);
	if (ret) {
		as->mni.mm = NULL;
		vvf_as_free(as, as->client);
		vvf_as_destroy(as);
		goto uncharge;
	}
	a.kva_base = VVF_AS_KVA_BASE;
	a.kva_size = VVF_AS_KVA_SIZE;
	mutex_lock(&vd->files_mutex);	/* the event thread looks for it under this */
	f->as = as;
	mutex_unlock(&vd->files_mutex);
	ret = copy_to_user((void __user *)arg, &a, sizeof(a)) ? -EFAULT : 0;
	goto out;
uncharge:
	vvf_file_uncharge(f, VVF_AS_PT_BYTES, 0);
out:
	mutex_unlock(&f->as_lock);
	return ret;
}

/* The channel's memory into the kernel window at @va, every page VOLATILE. */
static int vvf_as_map_kernel(struct vvf_as *as, u64 va, u64 addr, u64 size)
{
	u64 off, span, *l3;
	int ret = 0;

	mutex_lock(&as->lock);
	for (off = 0; off < size && !ret; off += PAGE_SIZE) {
		l3 = vvf_as_gone(as) ? NULL : vvf_as_l3(as, va + off, true, &span);
		if (!l3)
			ret = as->lost ? -ENOLINK : -ENOMEM;
		else
			WRITE_ONCE(l3[((va + off) >> VGPU_GMMU_L3_4K_SHIFT) &
				      (VGPU_GMMU_ENTRIES - 1)],
				   vgpu_gmmu_pte(addr + off, VGPU_GMMU_APER_VRAM |
						 VGPU_GMMU_VOLATILE));
	}
	if (ret)
		vvf_as_clear(as, va, va + size);
	mutex_unlock(&as->lock);
	wmb();
	return ret;
}

/* The GPFIFO's bytes, page-aligned; 0 if the geometry of @a is not one the uapi allows. */
static u64 vvf_as_chan_gp_bytes(const struct vgpu_vf_ioc_as_channel *a)
{
	u64 gp = ALIGN((u64)a->gpfifo_entries * 8, PAGE_SIZE);

	if (a->size != sizeof(*a) || a->flags || a->gpfifo_entries < 2 ||
	    a->gpfifo_entries > 512 || (a->gpfifo_entries & (a->gpfifo_entries - 1)) ||
	    !a->mem_size || a->mem_size % VGPU_GMMU_PAGE_64K || a->mem_size > VVF_AS_CHAN_SPAN ||
	    PAGE_SIZE + gp >= a->mem_size)
		return 0;
	return gp;
}

/* Undo what vvf_as_chan_make made of @c (handles that are 0 were not made). */
static void vvf_as_chan_unmake(struct vvf_as *as, const struct vvf_as_chan *c, u64 va)
{
	if (c->handle)
		vvf_as_free(as, c->handle);
	mutex_lock(&as->lock);
	if (!vvf_as_gone(as))
		vvf_as_clear(as, va, va + c->size);
	mutex_unlock(&as->lock);
	vvf_as_free(as, c->mem);
}

/* The channel's memory (zeroed, mapped into the kernel window at @va) and the RM channel
 * on it, replayable and enabled: USERD at the memory's start, the GPFIFO on the next page.
 * 0 with @c filled, or -errno with nothing left behind. */
static int vvf_as_chan_make(struct vvf_as *as, const struct vgpu_vf_ioc_as_channel *a, u64 va,
			    struct vvf_as_chan *c)
{
	struct vgpu_rm_channel_params cp = {
		.h_vaspace = as->vaspace, .runlist = a->runlist, .gpfifo_va = va + PAGE_SIZE,
		.gpfifo_entries = a->gpfifo_entries, .flags = VGPU_RM_CHAN_REPLAYABLE,
		.userd_aper = VGPU_APER_VRAM,
	};
	struct vgpu_rm_enable_params on = { .enable = 1 };
	int ret = vvf_as_vidmem(as, a->mem_size, VGPU_GMMU_PAGE_64K, &c->mem, &c->addr);

	if (ret)
		return ret;
	c->size = a->mem_size;
	memset(vvf_as_vram(as, c->addr), 0, c->size);
	ret = vvf_as_map_kernel(as, va, c->addr, c->size);
	if (!ret) {
		cp.userd_addr = c->addr;
		ret = vvf_krm_alloc(as->vd, as->client, as->device, VGPU_RM_CLASS_CHANNEL_GPFIFO,
				    &cp, sizeof(cp), &c->handle);
	}
	if (!ret)
		ret = vvf_as_control(as, c->handle, VGPU_RM_CTRL_CHANNEL_ENABLE, &on, sizeof(on));
	if (ret) {
		vvf_as_chan_unmake(as, c, va);
		return ret;
	}
	c->chid = cp.chid;
	c->token = cp.token;
	return 0;
}

long vvf_ioc_as_channel(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_as_channel a;
	struct vvf_as_chan c = { 0 };
	struct vvf_as *as;
	u64 va, gp_bytes;
	int ret;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	gp_bytes = vvf_as_chan_gp_bytes(&a);
	if (!gp_bytes)
		return -EINVAL;
	mutex_lock(&f->as_lock);
	as = f->as;
	ret = !as ? -ENOENT : as->mm != current->mm ? -EACCES : READ_ONCE(as->lost) ? -ENOLINK :
	      as->nr_chans == VGPU_VF_AS_CHANNELS ? -ENOSPC : 0;
	va = VVF_AS_KVA_BASE + (u64)(as ? as->nr_chans : 0) * VVF_AS_CHAN_SPAN;
	if (!ret)
		ret = vvf_file_charge(f, a.mem_size, 1);
	if (!ret) {
		ret = vvf_as_chan_make(as, &a, va, &c);
		if (ret)
			vvf_file_uncharge(f, a.mem_size, 1);
	}
	/* The file may map the memory; the channel's errors reach its event ring. */
	if (!ret) {
		ret = vvf_file_own(f, as->reset_count, as->client, c.mem,
				   as->vd->lay.vram_off + c.addr, c.size, c.chid);
		if (ret) {
			vvf_as_chan_unmake(as, &c, va);
			vvf_file_uncharge(f, a.mem_size, 1);
		}
	}
	if (!ret) {
		spin_lock(&as->qlock);
		as->chans[as->nr_chans++] = c;
		spin_unlock(&as->qlock);
		a = (struct vgpu_vf_ioc_as_channel){
			.size = sizeof(a), .runlist = a.runlist, .gpfifo_entries = a.gpfifo_entries,
			.mem_size = a.mem_size, .mmap_offset = as->vd->lay.vram_off + c.addr,
			.gpu_va = va, .userd_off = 0, .gpfifo_off = PAGE_SIZE,
			.pb_off = PAGE_SIZE + gp_bytes, .chid = c.chid, .token = c.token,
		};
	}
	mutex_unlock(&f->as_lock);
	if (ret)
		return ret;
	return copy_to_user((void __user *)arg, &a, sizeof(a)) ? -EFAULT : 0;
}

long vvf_ioc_as_info(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_as_info a;
	struct vvf_as *as;
	int ret = 0;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	if (a.size != sizeof(a))
		return -EINVAL;
	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	mutex_lock(&f->as_lock);
	as = f->as;
	if (as) {
		spin_lock(&as->qlock);
		a.channels = as->nr_chans;
		a.faults = as->faults;
		a.mapped = as->mapped;
		a.migrated = as->migrated;
		a.invalidated = as->invalidated;
		a.replays = as->replays;
		a.cancelled = as->cancelled;
		a.evicted = as->evicted;
		spin_unlock(&as->qlock);
		a.lost = READ_ONCE(as->lost);
	} else {
		ret = -ENOENT;
	}
	mutex_unlock(&f->as_lock);
	if (ret)
		return ret;
	return copy_to_user((void __user *)arg, &a, sizeof(a)) ? -EFAULT : 0;
}

/* ---- AS_MAP: the process's own memory objects at GPU addresses it picks ---- */

/* Whether [va, va + len) may hold an AS_MAP mapping: below 2^48, outside the mirrored range
 * and the channel window. */
static bool vvf_as_map_range_ok(struct vvf_as *as, u64 va, u64 len)
{
	u64 end = va + len;

	BUILD_BUG_ON(VGPU_VF_AS_CHANNELS * VVF_AS_CHAN_SPAN != VGPU_VF_AS_CHAN_WINDOW);
	if (!len || end < va || end > VVF_AS_KVA_BASE + VVF_AS_KVA_SIZE)
		return false;
	if (va < as->end && as->start < end)
		return false;
	return end <= VVF_AS_KVA_BASE || va >= VVF_AS_KVA_BASE + VGPU_VF_AS_CHAN_WINDOW;
}

/* The mapping that overlaps [va, va + len), or NULL. Under as->lock. */
static struct vvf_as_map *vvf_as_map_find(struct vvf_as *as, u64 va, u64 len)
{
	struct vvf_as_map *m;

	list_for_each_entry(m, &as->maps, node)
		if (va < m->va + m->len && m->va < va + len)
			return m;
	return NULL;
}

/* Write the PTEs of [va, va + len) onto @addr in @aper (VOLATILE, read-only if @ro); on a
 * full table memory clear what was written. Under as->lock. 0 or -ENOMEM. */
static int vvf_as_map_ptes(struct vvf_as *as, u64 va, u64 len, u64 addr, u64 aper, bool ro)
{
	u64 off, span, *l3;

	for (off = 0; off < len; off += PAGE_SIZE) {
		l3 = vvf_as_l3(as, va + off, true, &span);
		if (!l3) {
			vvf_as_clear(as, va, va + off);
			return as->lost ? -ENOLINK : -ENOMEM;
		}
		WRITE_ONCE(l3[((va + off) >> VGPU_GMMU_L3_4K_SHIFT) & (VGPU_GMMU_ENTRIES - 1)],
			   vgpu_gmmu_pte(addr + off, aper | VGPU_GMMU_VOLATILE |
					 (ro ? VGPU_GMMU_RO : 0)));
	}
	return 0;
}

/* Drop mapping @m: its PTEs, then the record. Under as->lock. */
static void vvf_as_map_drop(struct vvf_as *as, struct vvf_as_map *m)
{
	if (!vvf_as_gone(as))
		vvf_as_clear(as, m->va, m->va + m->len);
	list_del(&m->node);
	as->nr_maps--;
	kfree(m);
}

/* Map @a (checked: flags, alignment) of memory @mem onto the address space. Under f->lock,
 * which keeps the memory from being freed meanwhile. */
static int vvf_as_map_locked(struct vvf_as *as, struct vgpu_vf_ioc_as_map *a,
			     const struct vvf_mem *mem)
{
	u64 aper = mem->kind == VVF_MEM_DMA ? VGPU_GMMU_APER_SYS : VGPU_GMMU_APER_VRAM;
	struct vvf_as_map *m;
	int ret;

	if (a->offset >= mem->size)
		return -EINVAL;
	if (!a->length)
		a->length = mem->size - a->offset;
	if (a->length > mem->size - a->offset || !vvf_as_map_range_ok(as, a->gpu_va, a->length))
		return -EINVAL;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	mutex_lock(&as->lock);
	ret = vvf_as_gone(as) ? -ENOLINK : vvf_as_map_find(as, a->gpu_va, a->length) ? -EEXIST :
	      as->nr_maps >= VGPU_VF_AS_MAPS ? -ENOSPC : 0;
	if (!ret)
		ret = vvf_as_map_ptes(as, a->gpu_va, a->length, mem->gpu_addr + a->offset, aper,
				      a->flags & VGPU_VF_AS_MAP_READONLY);
	if (!ret) {
		*m = (struct vvf_as_map){ .va = a->gpu_va, .len = a->length,
					  .client = a->client, .handle = a->handle };
		list_add(&m->node, &as->maps);
		as->nr_maps++;
	}
	mutex_unlock(&as->lock);
	wmb();		/* the PTEs are in VRAM before the process may submit work on them */
	if (ret)
		kfree(m);
	return ret;
}

long vvf_ioc_as_map(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_as_map a;
	struct vvf_mem mem;
	struct vvf_as *as;
	int ret;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	if (a.size != sizeof(a) || a.flags & ~VGPU_VF_AS_MAP_READONLY ||
	    (a.gpu_va | a.offset | a.length) & ~PAGE_MASK)
		return -EINVAL;
	mutex_lock(&f->as_lock);
	as = f->as;
	ret = !as ? -ENOENT : as->mm != current->mm ? -EACCES : 0;
	if (!ret) {
		mutex_lock(&f->lock);
		ret = vvf_file_mem_locked(f, a.client, a.handle, &mem);
		if (!ret)
			ret = vvf_as_map_locked(as, &a, &mem);
		mutex_unlock(&f->lock);
	}
	mutex_unlock(&f->as_lock);
	if (ret)
		return ret;
	return copy_to_user((void __user *)arg, &a, sizeof(a)) ? -EFAULT : 0;
}

long vvf_ioc_as_unmap(struct vvf_file *f, unsigned long arg)
{
	struct vgpu_vf_ioc_as_unmap a;
	struct vvf_as_map *m;
	struct vvf_as *as;
	int ret = -ENOENT;

	if (copy_from_user(&a, (void __user *)arg, sizeof(a)))
		return -EFAULT;
	if (a.size != sizeof(a) || a.flags)
		return -EINVAL;
	mutex_lock(&f->as_lock);
	as = f->as;
	if (as && as->mm != current->mm)
		ret = -EACCES;
	else if (as) {
		mutex_lock(&as->lock);
		m = vvf_as_map_find(as, a.gpu_va, 1);
		if (m && m->va == a.gpu_va) {
			vvf_as_map_drop(as, m);
			ret = 0;
		}
		mutex_unlock(&as->lock);
	}
	mutex_unlock(&f->as_lock);
	return ret;
}

void vvf_as_unmap_mem(struct vvf_file *f, u32 client, u32 handle)
{
	struct vvf_as *as = READ_ONCE(f->as);
	struct vvf_as_map *m, *tmp;

	if (!as)
		return;
	mutex_lock(&as->lock);
	list_for_each_entry_safe(m, tmp, &as->maps, node)
		if (m->client == client && (!handle || m->handle == handle))
			vvf_as_map_drop(as, m);
	mutex_unlock(&as->lock);
}

void vvf_as_reset(struct vvf_file *f)
{
	struct vvf_as *as = f->as;

	if (!as)
		return;
	mutex_lock(&as->lock);
	as->lost = true;
	mutex_unlock(&as->lock);
}

void vvf_as_release(struct vvf_file *f)
{
	struct vvf_dev *vd = f->vd;
	struct vvf_as *as;
	bool free;

	mutex_lock(&vd->files_mutex);
	as = f->as;
	f->as = NULL;
	mutex_unlock(&vd->files_mutex);
	if (!as)
		return;
	cancel_work_sync(&as->work);
	/* Freeing the client stops its channels and frees the tables. Marked lost first, under
	 * the lock, so that no invalidation writes into table memory that is no longer ours;
	 * the FREE itself runs without it: an invalidation may come from direct reclaim while
	 * the mailbox's holder allocates, and must not wait behind the mailbox. */
	mutex_lock(&as->lock);
	free = !vvf_as_gone(as) && !READ_ONCE(vd->gone);
	as->lost = true;
	mutex_unlock(&as->lock);
	if (free)
		vvf_as_free(as, as->client);
	vvf_as_destroy(as);
}
