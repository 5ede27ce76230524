// SPDX-License-Identifier: MIT
/* hmm/vma.c - what the kernel's page walk knows and user space has to ask for: the VMA
 * at an address (PROCMAP_QUERY on /proc/self/maps, Linux 6.11+, else a parse of the
 * file) and the page-table state of a range (/proc/self/pagemap, /proc/kpageflags). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/bitops.h"
#include "hmm/hmm_internal.h"

/* Debian 12's headers predate PROCMAP_QUERY. */
struct hmm_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define HMM_PROCMAP_QUERY	_IOWR('f', 17, struct hmm_procmap_query)
#define PMQ_READ		0x01
#define PMQ_WRITE		0x02
#define PMQ_SHARED		0x08
#define PMQ_COVERING_OR_NEXT	0x10

static int vma_from_query(struct hmm_mm *mm, uintptr_t addr, struct hmm_vma *v)
{
	char name[32] = "";
	struct hmm_procmap_query q = {
		.size = sizeof(q), .query_flags = PMQ_COVERING_OR_NEXT, .query_addr = addr,
		.vma_name_size = sizeof(name), .vma_name_addr = (uintptr_t)name,
	};

	if (ioctl(mm->maps_fd, HMM_PROCMAP_QUERY, &q)) {
		if (errno != ENAMETOOLONG)
			return -errno;
		/* a long file name (a BAR object in /dev/shm): only "[...]" names matter */
		q.vma_name_size = 0;
		q.vma_name_addr = 0;
		name[0] = 0;
		if (ioctl(mm->maps_fd, HMM_PROCMAP_QUERY, &q))
			return -errno;
	}
	v->start = q.vma_start;
	v->end = q.vma_end;
	v->read = q.vma_flags & PMQ_READ;
	v->write = q.vma_flags & PMQ_WRITE;
	v->shared = q.vma_flags & PMQ_SHARED;
	/* [vvar], [vsyscall] and friends are PFNMAP/IO-like: nothing to mirror */
	v->special = name[0] == '[' && strncmp(name, "[heap]", 6) && strncmp(name, "[stack", 6);
	return 0;
}

/* One line of /proc/self/maps ("start-end perms offset dev inode name") into @v; false
 * if it does not parse. */
static bool maps_line(const char *l, const char *eol, struct hmm_vma *v)
{
	char *p;
	unsigned long long s = strtoull(l, &p, 16), e;

	if (*p != '-')
		return false;
	e = strtoull(p + 1, &p, 16);
	if (*p != ' ' || eol - p < 5)
		return false;
	v->start = (uintptr_t)s;
	v->end = (uintptr_t)e;
	v->read = p[1] == 'r';
	v->write = p[2] == 'w';
	v->shared = p[4] == 's';
	/* the name is the sixth field: skip perms, offset, dev and inode */
	p += 5;
	for (int f = 0; f < 3 && p < eol; f++) {
		while (p < eol && *p == ' ')
			p++;
		while (p < eol && *p != ' ')
			p++;
	}
	while (p < eol && *p == ' ')
		p++;
	v->special = p < eol && *p == '[' && strncmp(p, "[heap]", 6) && strncmp(p, "[stack", 6);
	return true;
}

/* Before Linux 6.11: scan /proc/self/maps for the first VMA ending above @addr. Read a
 * page at a time from the descriptor the mm keeps and stop at that VMA: the kernel then
 * prints only the lines before it, and no file is opened per lookup (which was a third of
 * the cost of a lookup, and range faults look up a VMA per 2 MiB segment). The caller
 * holds maps_lock: the kernel keeps one read position per descriptor, and a read at
 * another offset than where the last one ended makes it print the file again from the
 * start, as the VMAs are by then; two threads scanning at once would each get the other's
 * offset, and join the first half of a line to the second half of another (a VMA with
 * the wrong permissions, or none at the address). */
#define MAPS_CHUNK	1024	/* a few lines: the kernel prints what a read asks for */

static int maps_scan(struct hmm_mm *mm, uintptr_t addr, struct hmm_vma *v)
{
	char buf[4096 + 1];
	size_t have = 0;
	off_t off = 0;
	bool skip = false;	/* the rest of a line longer than buf, already looked at */
	struct hmm_vma t;

	for (;;) {
		ssize_t got = pread(mm->maps_fd, buf + have,
				    cmn_min(MAPS_CHUNK, sizeof(buf) - 1 - have), off);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (got == 0)
			return -ENOENT;
		off += got;
		have += (size_t)got;
		buf[have] = 0;

		char *l = buf, *eol;

		while ((eol = memchr(l, '\n', have - (size_t)(l - buf)))) {
			if (!skip && maps_line(l, eol, &t) && t.end > addr) {
				*v = t;
				return 0;
			}
			skip = false;
			l = eol + 1;
		}
		/* a line the kernel split across reads: keep its start */
		have -= (size_t)(l - buf);
		if (have == sizeof(buf) - 1) {
			/* a file name of thousands of bytes: what matters is at the start */
			if (!skip && maps_line(buf, buf + have, &t) && t.end > addr) {
				*v = t;
				return 0;
			}
			skip = true;
			have = 0;
		}
		memmove(buf, l, have);
	}
}

static int vma_from_maps(struct hmm_mm *mm, uintptr_t addr, struct hmm_vma *v)
{
	int ret;

	cmn_mutex_lock(&mm->maps_lock);
	ret = maps_scan(mm, addr, v);
	cmn_mutex_unlock(&mm->maps_lock);
	return ret;
}

bool hmm_vma_query_works(int fd)
{
	struct hmm_procmap_query q = {
		.size = sizeof(q), .query_flags = PMQ_COVERING_OR_NEXT,
		.query_addr = (uintptr_t)&hmm_vma_query_works,
	};

	return !ioctl(fd, HMM_PROCMAP_QUERY, &q);
}

int hmm_vma_find(struct hmm_mm *mm, uintptr_t addr, struct hmm_vma *v)
{
	int ret;

	if (!mm->procmap_query)		/* before Linux 6.11, or taken away */
		return vma_from_maps(mm, addr, v);
	ret = vma_from_query(mm, addr, v);
	if (ret == -ENOTTY || ret == -EINVAL)
		ret = vma_from_maps(mm, addr, v);
	return ret;
}

bool hmm_vma_gone(struct hmm_mm *mm, uintptr_t addr)
{
	struct hmm_vma v;
	int ret = hmm_vma_find(mm, addr, &v);

	return ret == -ENOENT || (!ret && v.start > addr);
}

int hmm_pagemap_read(struct hmm_mm *mm, uintptr_t start, size_t n, uint64_t *out)
{
	off_t off = (off_t)(start >> HMM_PAGE_SHIFT) * 8;
	size_t len = n * 8;
	char *p = (char *)out;

	while (len) {
		ssize_t got = pread(mm->pagemap_fd, p, len, off);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (got == 0)
			return -EIO;
		p += got;
		len -= (size_t)got;
		off += got;
	}
	return 0;
}

#define KPF_THP		22

bool hmm_pfn_is_thp(struct hmm_mm *mm, uint64_t pm)
{
	uint64_t flags = 0;
	uint64_t pfn = pm & HMM_PM_PFN_MASK;

	if (mm->kpageflags_fd < 0 || !pfn)
		return false;
	if (pread(mm->kpageflags_fd, &flags, sizeof(flags), (off_t)pfn * 8) != sizeof(flags))
		return false;
	return flags & (1ull << KPF_THP);
}
