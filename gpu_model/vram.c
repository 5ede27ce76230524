// SPDX-License-Identifier: MIT
/* VRAM: one reserved address range backed by a sparse device memfd, with each function's
 * slice overlaid by its own memfd at the slice's offset (MAP_FIXED), so the slice can be
 * handed to a guest by fd while the device keeps one flat VRAM. Host RAM is spent only on
 * touched pages; scrubbing punches holes instead of writing zeros. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/log.h"
#include "common/mapguard.h"
#include "gpu_model/gpu_internal.h"

int gpu_vram_init(struct gpu *g, uint64_t size)
{
	void *p;
	int ret;

	g->vram_fd = memfd_create("vgpu-vram", MFD_CLOEXEC);
	if (g->vram_fd < 0)
		return -errno;
	if (ftruncate(g->vram_fd, (off_t)size)) {
		ret = -errno;
		goto close_fd;
	}
	/* MAP_NORESERVE: 141 GiB of VRAM must not be charged against host memory up front. */
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, g->vram_fd, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		goto close_fd;
	}
	/* The dirty bitmap: 4 KiB per GiB of VRAM, untouched (no host RAM) until tracked. */
	g->dirty = calloc(size / GPU_DIRTY_PAGE / 64 + 1, sizeof(*g->dirty));
	if (!g->dirty) {
		munmap(p, size);
		ret = -ENOMEM;
		goto close_fd;
	}
	g->vram = p;
	g->vram_size = size;
	cmn_mutex_init(&g->vram_lock);
	for (unsigned int f = 0; f < GPU_MAX_FNS; f++) {
		g->fns[f].slice_fd = -1;
		g->fns[f].slice_guard = -1;
	}
	return 0;
close_fd:
	close(g->vram_fd);
	return ret;
}

void gpu_vram_fini(struct gpu *g)
{
	if (!g->vram)
		return;
	for (unsigned int f = 0; f < GPU_MAX_FNS; f++)
		if (g->fns[f].slice_fd >= 0)
			close(g->fns[f].slice_fd);
	munmap(g->vram, g->vram_size);
	free((void *)g->dirty);
	close(g->vram_fd);
	cmn_mutex_destroy(&g->vram_lock);
}

uint64_t gpu_vram_size(const struct gpu *g)
{
	return g->vram_size;
}

void *gpu_vram_ptr(struct gpu *g, uint64_t off, uint64_t len)
{
	if (off > g->vram_size || len > g->vram_size - off)
		return NULL;
	return g->vram + off;
}

void *gpu_fn_vram_ptr(struct gpu *g, unsigned int fn, uint64_t pa, uint64_t len)
{
	struct gpu_priv_fn rec;

	if (!gpu_priv_snapshot_fn(g->priv, fn, &rec) || fn >= g->nr_fns)
		return NULL;
	if (pa > rec.part_size || len > rec.part_size - pa)
		return NULL;
	return g->vram + rec.part_base + pa;
}

static bool slice_overlaps_locked(struct gpu *g, unsigned int fn, uint64_t off, uint64_t size)
{
	cmn_mutex_assert_held(&g->vram_lock);
	for (unsigned int o = 0; o < g->nr_fns; o++) {
		struct gpu_fn *f = &g->fns[o];

		if (o != fn && f->slice_fd >= 0 && off < f->slice_off + f->slice_size &&
		    f->slice_off < off + size)
			return true;
	}
	return false;
}

static int slice_map_locked(struct gpu *g, struct gpu_fn *f, uint64_t off, uint64_t size, int fd)
{
	struct stat sb;
	int ret, own;

	cmn_mutex_assert_held(&g->vram_lock);
	own = fd < 0 ? memfd_create("vgpu-vf-vram", MFD_CLOEXEC) : dup(fd);
	if (own < 0)
		return -errno;
	if (fd < 0 && ftruncate(own, (off_t)size)) {
		ret = -errno;
		goto close_own;
	}
	if (fstat(own, &sb) || (uint64_t)sb.st_size < size) {
		ret = -EINVAL;
		goto close_own;
	}
	/* The object's other holder (the guest) may shrink it: an engine's access past its
	 * end then faults, and the guard repairs it instead of the process dying. */
	ret = cmn_mapguard_add(g->vram + off, size, own, (uint64_t)sb.st_size, f->id);
	if (ret < 0)
		goto close_own;
	f->slice_guard = ret;
	if (mmap(g->vram + off, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
		 own, 0) == MAP_FAILED) {
		ret = -errno;
		goto unguard;
	}
	/* The device memfd's pages under the slice are never seen again: free them. */
	fallocate(g->vram_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
	f->slice_fd = own;
	f->slice_off = off;
	f->slice_size = size;
	return 0;
unguard:
	cmn_mapguard_del(f->slice_guard);
	f->slice_guard = -1;
close_own:
	close(own);
	return ret;
}

int gpu_vram_slice_map(struct gpu *g, unsigned int fn, uint64_t off, uint64_t size, int fd)
{
	int ret;

	if (fn >= g->nr_fns || !size || !cmn_is_aligned(off, GPU_VRAM_ALIGN) ||
	    !cmn_is_aligned(size, GPU_VRAM_ALIGN) || off >= g->vram_size || size > g->vram_size - off)
		return -EINVAL;
	cmn_mutex_lock(&g->vram_lock);
	if (g->fns[fn].slice_fd >= 0)
		ret = -EEXIST;
	else if (slice_overlaps_locked(g, fn, off, size))
		ret = -EBUSY;
	else
		ret = slice_map_locked(g, &g->fns[fn], off, size, fd);
	cmn_mutex_unlock(&g->vram_lock);
	return ret;
}

int gpu_vram_slice_unmap(struct gpu *g, unsigned int fn)
{
	struct gpu_fn *f;
	int ret = 0;

	if (fn >= g->nr_fns)
		return -EINVAL;
	f = &g->fns[fn];
	cmn_mutex_lock(&g->vram_lock);
	if (f->slice_fd < 0) {
		ret = -ENOENT;
		goto unlock;
	}
	/* Scrub before the range can reach another tenant; the device memfd beneath was
	 * punched at map time, so it reads as zeros too. */
	fallocate(f->slice_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)f->slice_size);
	if (mmap(g->vram + f->slice_off, f->slice_size, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_FIXED | MAP_NORESERVE, g->vram_fd, (off_t)f->slice_off) == MAP_FAILED) {
		ret = -errno;
		cmn_err("gpu: cannot restore VRAM under function %u's slice: %s", fn,
			 cmn_strerror(ret));
		goto unlock;
	}
	cmn_mapguard_del(f->slice_guard);
	f->slice_guard = -1;
	close(f->slice_fd);
	f->slice_fd = -1;
	f->slice_off = f->slice_size = 0;
unlock:
	cmn_mutex_unlock(&g->vram_lock);
	return ret;
}

int gpu_vram_slice_fd(struct gpu *g, unsigned int fn)
{
	int fd;

	if (fn >= g->nr_fns)
		return -EINVAL;
	cmn_mutex_lock(&g->vram_lock);
	fd = g->fns[fn].slice_fd >= 0 ? g->fns[fn].slice_fd : -ENOENT;
	cmn_mutex_unlock(&g->vram_lock);
	return fd;
}

/* Punch [off, off+size) of whichever memfds back it. */
static int scrub_locked(struct gpu *g, uint64_t off, uint64_t size)
{
	uint64_t end = off + size;

	cmn_mutex_assert_held(&g->vram_lock);
	for (unsigned int o = 0; o < g->nr_fns; o++) {
		struct gpu_fn *f = &g->fns[o];
		uint64_t lo, hi;

		if (f->slice_fd < 0)
			continue;
		lo = cmn_max(off, f->slice_off);
		hi = cmn_min(end, f->slice_off + f->slice_size);
		if (lo < hi && fallocate(f->slice_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 (off_t)(lo - f->slice_off), (off_t)(hi - lo)))
			return -errno;
	}
	if (fallocate(g->vram_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size))
		return -errno;
	return 0;
}

int gpu_vram_scrub(struct gpu *g, uint64_t off, uint64_t size)
{
	int ret;

	if (!cmn_is_aligned(off, 4096) || !cmn_is_aligned(size, 4096) || off > g->vram_size ||
	    size > g->vram_size - off)
		return -EINVAL;
	cmn_mutex_lock(&g->vram_lock);
	ret = scrub_locked(g, off, size);
	cmn_mutex_unlock(&g->vram_lock);
	return ret;
}

static uint64_t fd_resident(int fd)
{
	struct stat sb;

	return fstat(fd, &sb) ? 0 : (uint64_t)sb.st_blocks * 512;
}

uint64_t gpu_vram_resident(struct gpu *g)
{
	uint64_t sum;

	cmn_mutex_lock(&g->vram_lock);
	sum = fd_resident(g->vram_fd);
	for (unsigned int o = 0; o < g->nr_fns; o++)
		if (g->fns[o].slice_fd >= 0)
			sum += fd_resident(g->fns[o].slice_fd);
	cmn_mutex_unlock(&g->vram_lock);
	return sum;
}
