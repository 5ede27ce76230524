/* SPDX-License-Identifier: MIT */
/* An in-process test device for the hmm unit tests, modelled on lib/test_hmm.c's dmirror:
 * a device page table (a hash of page -> hmm_range_fault word) filled by the mirror's
 * fault service, device READ/WRITE through it (one "fault round" per miss pass, counted
 * in faults), MIGRATE to its pool, and SNAPSHOT codes of the dmirror uAPI.
 *
 * Built on the public API of hmm/hmm.h only. */
#ifndef VGPU_TESTS_HMM_TDEV_H
#define VGPU_TESTS_HMM_TDEV_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/bitops.h"
#include "common/compiler.h"
#include "hmm/hmm.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#ifndef PG			/* iommu_test.h's (the same 4 KiB) may come first */
#define PG		HMM_PAGE_SIZE
#endif
#define M2		HMM_BLOCK_SIZE
#define NPAGES		1024		/* HMM_BUFFER_SIZE of hmm-tests.c: 4 MiB */

/* dmirror SNAPSHOT codes */
#define PROT_ERROR		0xFF
#define PROT_NONE_		0x00
#define PROT_READ_		0x01
#define PROT_WRITE_		0x02
#define PROT_PMD		0x04
#define PROT_ZERO		0x10
#define PROT_DEV_PRIVATE_LOCAL	0x20
#define PROT_DEV_PRIVATE_REMOTE	0x30

/* Whether this kernel maps the shared zero page on a read fault of private anonymous
 * memory: two pages read once each show one PFN. Some builds give each its own page, and
 * hmm_range_fault() then reports a read-faulted page as an ordinary, writable one (what
 * the kernel's HMM reports there too). */
static inline bool tdev_kernel_zero_page(void)
{
	volatile char *p = mmap(NULL, 2 * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t pm[2] = { 0, 0 };
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	bool zero;

	assert_true(p != MAP_FAILED && fd >= 0);
	(void)p[0];
	(void)p[PG];
	assert_int_equal(pread(fd, pm, sizeof(pm), (off_t)((uintptr_t)p / PG * 8)),
			 (ssize_t)sizeof(pm));
	close(fd);
	munmap((void *)p, 2 * PG);
	/* bit 63: present; bits 0-54: the PFN */
	zero = (pm[0] & pm[1]) >> 63 && !((pm[0] ^ pm[1]) & ((1ull << 55) - 1));
	return zero;
}

struct tdev_pte {
	uintptr_t va;			/* 0 = empty */
	uint64_t pfn;			/* hmm_range_fault word */
	bool atomic;			/* dmirror's ATOMIC tag: a device-exclusive mapping */
};

struct tdev {
	struct hmm_mirror mirror;
	struct hmm_devmem *dm;
	struct hmm_mm *mm;
	struct tdev_pte *pt;		/* open addressing; under mirror.update */
	size_t pt_cap;
	unsigned long faults;		/* fault rounds (dmirror's cmd.faults) */
	unsigned long invalidations;
	bool safe_dma;			/* copy with process_vm_* (survives munmap races) */
};

static inline size_t tdev_slot(const struct tdev *d, uintptr_t va)
{
	return (size_t)((va >> 12) * 0x9e3779b97f4a7c15ull >> 17) & (d->pt_cap - 1);
}

static inline struct tdev_pte *tdev_pte(struct tdev *d, uintptr_t va, bool create)
{
	size_t s = tdev_slot(d, va);

	for (size_t n = 0; n < d->pt_cap; n++, s = (s + 1) & (d->pt_cap - 1)) {
		if (d->pt[s].va == va)
			return &d->pt[s];
		if (!d->pt[s].va)
			break;
	}
	if (!create)
		return NULL;
	VGPU_ASSERT(!d->pt[s].va);	/* the table is sized far beyond the tests */
	d->pt[s].va = va;
	return &d->pt[s];
}

/* Invalidate [start, end): entries stay in the table with pfn 0 (= missing). */
static inline void tdev_pt_clear(struct tdev *d, uintptr_t start, uintptr_t end)
{
	if ((end - start) / PG < d->pt_cap / 4) {
		for (uintptr_t a = start; a < end; a += PG) {
			struct tdev_pte *e = tdev_pte(d, a, false);

			if (e) {
				e->pfn = 0;
				e->atomic = false;
			}
		}
		return;
	}
	for (size_t i = 0; i < d->pt_cap; i++) {
		if (d->pt[i].va >= start && d->pt[i].va < end) {
			d->pt[i].pfn = 0;
			d->pt[i].atomic = false;
		}
	}
}

static inline void tdev_invalidate(struct hmm_mirror *m, const struct hmm_notify_range *r)
{
	struct tdev *d = cmn_container_of(m, struct tdev, mirror);

	d->invalidations++;
	tdev_pt_clear(d, r->start, r->end);
}

static inline int tdev_map(struct hmm_mirror *m, uintptr_t start, uintptr_t end,
			   const uint64_t *pfns)
{
	struct tdev *d = cmn_container_of(m, struct tdev, mirror);

	for (uintptr_t a = start; a < end; a += PG) {
		uint64_t p = pfns[(a - start) / PG];

		if (p & HMM_PFN_VALID)
			tdev_pte(d, a, true)->pfn = p;
	}
	return 0;
}

static const struct hmm_mirror_ops tdev_ops = {
	.invalidate = tdev_invalidate,
	.map = tdev_map,
};

/* A device with a @vram_bytes pool and the default policies (@opts NULL). */
static inline struct tdev *tdev_new(struct hmm_mm *mm, uint64_t vram_bytes,
				    const struct hmm_mirror_opts *opts)
{
	struct tdev *d = calloc(1, sizeof(*d));
	struct hmm_devmem_desc desc = { .size = vram_bytes };

	assert_non_null(d);
	desc.owner = d;
	d->mm = mm;
	d->pt_cap = 1 << 16;
	d->pt = calloc(d->pt_cap, sizeof(*d->pt));
	assert_non_null(d->pt);
	assert_int_equal(hmm_devmem_create(&desc, &d->dm), 0);
	assert_int_equal(hmm_mirror_init(&d->mirror, mm, d->dm, &tdev_ops, opts), 0);
	return d;
}

static inline void tdev_free(struct tdev *d)
{
	hmm_devmem_evict_all(d->mm, d->dm);
	hmm_mirror_fini(&d->mirror);
	assert_int_equal(hmm_devmem_destroy(d->dm), 0);
	free(d->pt);
	free(d);
}

/* Device access to one page through its page table: 0, or 1 if the entry is missing
 * or lacks write permission. Called under mirror.update. */
static inline int tdev_access(struct tdev *d, uintptr_t va, void *buf, bool write)
{
	struct tdev_pte *e = tdev_pte(d, va, false);
	void *p;

	if (!e || !e->pfn || (write && !(e->pfn & HMM_PFN_WRITE)))
		return 1;
	if (e->pfn & HMM_PFN_DEVICE)
		p = hmm_devmem_page_ptr(d->dm, e->pfn & HMM_PFN_VALUE_MASK);
	else
		p = (void *)((e->pfn & HMM_PFN_VALUE_MASK) << HMM_PAGE_SHIFT);
	if (e->atomic) {
		/* the CPU has no access to an exclusive page: the device reaches the memory
		 * itself, as /proc/self/mem does (FOLL_FORCE ignores PROT_NONE) */
		static int mem_fd = -1;
		ssize_t n;

		if (mem_fd < 0)
			mem_fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
		n = write ? pwrite(mem_fd, buf, PG, (off_t)(uintptr_t)p)
			  : pread(mem_fd, buf, PG, (off_t)(uintptr_t)p);
		return n == (ssize_t)PG ? 0 : -EFAULT;
	}
	if (d->safe_dma && !(e->pfn & HMM_PFN_DEVICE)) {
		struct iovec l = { buf, PG }, r = { p, PG };
		ssize_t n = write ? process_vm_writev(getpid(), &l, 1, &r, 1, 0)
				  : process_vm_readv(getpid(), &l, 1, &r, 1, 0);

		return n == (ssize_t)PG ? 0 : -EFAULT;
	}
	if (write)
		memcpy(p, buf, PG);
	else
		memcpy(buf, p, PG);
	return 0;
}

/* dmirror READ/WRITE: copy @npages at @addr to/from @buf; faults missing pages in rounds.
 * Returns 0 or the fault's -errno; *cpages = pages copied. */
static inline int tdev_rw(struct tdev *d, void *addr, size_t npages, void *buf, bool write,
			  size_t *cpages)
{
	uintptr_t start = (uintptr_t)addr;
	struct hmm_dev_fault *f = calloc(npages, sizeof(*f));
	int *st = calloc(npages, sizeof(int));
	int ret = 0;

	assert_non_null(f);
	assert_non_null(st);
	*cpages = 0;
	for (unsigned int round = 0; round < 8; round++) {
		size_t miss = 0;

		cmn_mutex_lock(&d->mirror.update);
		for (size_t i = *cpages; i < npages; i++) {
			int r = tdev_access(d, start + i * PG, (char *)buf + i * PG, write);

			if (r < 0) {
				ret = r;
				break;
			}
			if (r) {
				f[miss++] = (struct hmm_dev_fault){ start + i * PG, write };
				break;
			}
			(*cpages)++;
		}
		/* the rest of the missing pages in one batch, as a fault buffer would hold */
		for (size_t i = *cpages + 1; miss && i < npages; i++) {
			struct tdev_pte *e = tdev_pte(d, start + i * PG, false);

			if (!e || !e->pfn || (write && !(e->pfn & HMM_PFN_WRITE)))
				f[miss++] = (struct hmm_dev_fault){ start + i * PG, write };
		}
		cmn_mutex_unlock(&d->mirror.update);
		if (ret || !miss)
			break;
		d->faults++;
		assert_int_equal(hmm_mirror_service_faults(&d->mirror, f, miss, st), 0);
		for (size_t i = 0; i < miss; i++) {
			if (st[i] && st[i] != -EAGAIN) {
				ret = st[i];
				break;
			}
		}
		if (ret)
			break;
	}
	free(f);
	free(st);
	return ret;
}

static inline int tdev_read(struct tdev *d, void *addr, size_t npages, void *buf,
			    size_t *cpages)
{
	return tdev_rw(d, addr, npages, buf, false, cpages);
}

/* A device read of @npages at @addr into @buf (a write from it when @write) that copies
 * every page and leaves the device at one fault round counted. */
static inline void tdev_rw_all(struct tdev *d, void *addr, size_t npages, void *buf, bool write)
{
	size_t cpages;

	assert_int_equal(tdev_rw(d, addr, npages, buf, write, &cpages), 0);
	assert_int_equal(cpages, npages);
	assert_int_equal(d->faults, 1);
}

static inline int tdev_write(struct tdev *d, void *addr, size_t npages, const void *buf,
			     size_t *cpages)
{
	return tdev_rw(d, addr, npages, (void *)buf, true, cpages);
}

/* dmirror MIGRATE_TO_DEV: migrate, then read back through the device (-ENOENT when a
 * page did not end in device memory, as dmirror reports it). */
static inline int tdev_migrate(struct tdev *d, void *addr, size_t npages, void *buf,
			       struct hmm_migrate_result *res)
{
	struct hmm_migrate_result local;
	size_t cpages;
	int ret;

	res = res ? res : &local;
	ret = hmm_migrate_to_device(d->mm, d->dm, addr, npages * PG, res);
	if (ret)
		return ret;
	/* our own MIGRATE event is filtered out: like dmirror, the migrating device drops
	 * its stale entries for the old system pages itself */
	cmn_mutex_lock(&d->mirror.update);
	tdev_pt_clear(d, (uintptr_t)addr, (uintptr_t)addr + npages * PG);
	cmn_mutex_unlock(&d->mirror.update);
	if (buf) {
		ret = tdev_read(d, addr, npages, buf, &cpages);
		if (ret)
			return ret;
	}
	for (size_t i = 0; i < npages; i++) {
		struct hmm_devmem *dm = NULL;

		if (hmm_mm_page_where(d->mm, (char *)addr + i * PG, &dm, NULL) != HMM_PAGE_DEVICE ||
		    dm != d->dm)
			return -ENOENT;
	}
	return 0;
}

/* dmirror EXCLUSIVE: make every page exclusive to the device, map it ATOMIC, read it
 * back through the device into @buf (may be NULL). */
static inline int tdev_exclusive(struct tdev *d, void *addr, size_t npages, void *buf)
{
	uint64_t *pfns = calloc(npages, sizeof(*pfns));
	size_t cpages;
	int ret;

	assert_non_null(pfns);
	for (;;) {
		uint64_t seq = hmm_interval_read_begin(&d->mirror.notifier);

		ret = hmm_make_exclusive(d->mm, addr, npages * PG, d, pfns);
		if (ret)
			break;
		cmn_mutex_lock(&d->mirror.update);
		if (hmm_interval_read_retry(&d->mirror.notifier, seq)) {
			cmn_mutex_unlock(&d->mirror.update);
			continue;
		}
		for (size_t i = 0; i < npages; i++) {
			struct tdev_pte *e = tdev_pte(d, (uintptr_t)addr + i * PG, true);

			e->pfn = pfns[i];
			e->atomic = true;
		}
		cmn_mutex_unlock(&d->mirror.update);
		break;
	}
	free(pfns);
	if (!ret && buf)
		ret = tdev_read(d, addr, npages, buf, &cpages);
	return ret;
}

/* dmirror CHECK_EXCLUSIVE: -EPERM while a page still has its ATOMIC mapping. */
static inline int tdev_check_exclusive(struct tdev *d, void *addr, size_t npages)
{
	int ret = 0;

	cmn_mutex_lock(&d->mirror.update);
	for (size_t i = 0; i < npages && !ret; i++) {
		struct tdev_pte *e = tdev_pte(d, (uintptr_t)addr + i * PG, false);

		if (e && e->pfn && e->atomic)
			ret = -EPERM;
	}
	cmn_mutex_unlock(&d->mirror.update);
	return ret;
}

/* dmirror SNAPSHOT: one code byte per page. */
static inline int tdev_snapshot(struct tdev *d, void *addr, size_t npages, uint8_t *codes)
{
	uint64_t *pfns = calloc(npages, sizeof(*pfns));
	struct hmm_range r = {
		.notifier = &d->mirror.notifier, .start = (uintptr_t)addr,
		.end = (uintptr_t)addr + npages * PG, .hmm_pfns = pfns,
		.dev_private_owner = d,
	};
	int ret;

	assert_non_null(pfns);
	do {
		r.notifier_seq = hmm_interval_read_begin(&d->mirror.notifier);
		ret = hmm_range_fault(&r);
	} while (ret == -EBUSY);
	for (size_t i = 0; !ret && i < npages; i++) {
		uint64_t p = pfns[i];
		uint8_t c = 0;

		if (p & HMM_PFN_ERROR)
			c = PROT_ERROR;
		else if (p & HMM_PFN_VALID) {
			c = (p & HMM_PFN_WRITE) ? PROT_WRITE_ : PROT_READ_;
			if (p & HMM_PFN_ZERO)
				c |= PROT_ZERO;
			if (p & HMM_PFN_DEVICE)
				c |= PROT_DEV_PRIVATE_LOCAL;
			if (hmm_pfn_to_map_order(p) == 9)
				c |= PROT_PMD;
		}
		codes[i] = c;
	}
	free(pfns);
	return ret;
}

/* A device memory pool of @size bytes whose pages belong to @owner (an address the caller
 * keeps for the pool's identity). */
static inline struct hmm_devmem *tpool_new(const void *owner, uint64_t size)
{
	struct hmm_devmem *dm;

	assert_int_equal(hmm_devmem_create(&(struct hmm_devmem_desc){ .owner = owner,
					   .size = size }, &dm), 0);
	return dm;
}

/* A 2 MiB aligned private anonymous buffer of @len bytes (THP when @thp). */
static inline void *tbuf_new(size_t len, bool thp)
{
	char *p = mmap(NULL, len + M2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	char *a;

	assert_true(p != MAP_FAILED);
	a = (char *)cmn_align_up((uintptr_t)p, M2);
	if (a > p)
		munmap(p, a - p);
	munmap(a + len, (p + len + M2) - (a + len));
	madvise(a, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	return a;
}

static inline void fill_ints(void *buf, size_t bytes, int bias)
{
	int *p = buf;

	for (size_t i = 0; i < bytes / sizeof(int); i++)
		p[i] = (int)i + bias;
}

static inline void check_ints(const void *buf, size_t bytes, int bias)
{
	const int *p = buf;

	for (size_t i = 0; i < bytes / sizeof(int); i++) {
		if (p[i] != (int)i + bias)
			fail_msg("int %zu: %d, want %d", i, p[i], (int)i + bias);
	}
}

/* A mm with @backend and @granule (0 = 4 KiB); skips the test when userfaultfd or a
 * feature a userfaultfd backend needs is missing, with the reason. */
static inline struct hmm_mm *tmm_new(enum hmm_backend backend, uint64_t granule)
{
	struct hmm_uffd_caps caps;
	struct hmm_mm_opts o = { .backend = backend, .granule = granule };
	struct hmm_mm *mm = NULL;

	hmm_uffd_probe(&caps);
	if (backend == HMM_BACKEND_MPROTECT)
		;	/* needs no userfaultfd */
	else if (!caps.available || (!caps.move && !caps.wp) || !caps.events ||
	    (backend == HMM_BACKEND_UFFD_SIGBUS && !caps.sigbus)) {
		print_message("skip: %s\n", caps.why);
		skip();
	}
	assert_int_equal(hmm_mm_create(&o, &mm), 0);
	return mm;
}

/* A mm for a call whose contract does not depend on the CPU-fault mechanism: the
 * userfaultfd thread backend where it can run, else the mprotect backend (no userfaultfd
 * at all), so that such tests run on every kernel and capability set. */
static inline struct hmm_mm *tmm_any(void)
{
	struct hmm_uffd_caps caps;

	hmm_uffd_probe(&caps);
	if (caps.available && caps.events && (caps.move || caps.wp))
		return tmm_new(HMM_BACKEND_UFFD_THREAD, 0);
	return tmm_new(HMM_BACKEND_MPROTECT, 0);
}

#endif
