// SPDX-License-Identifier: MIT
/* Engine memory access: GPU VAs through the GMMU, physical addresses for USERD, and the
 * system aperture through the function's IOMMU domain. Faults come back as a positive
 * enum vgpu_fault_reason with the details left in the context. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "gpu_model/gpu_internal.h"
#include "iommu_model/iommu.h"
#include <vgpu/sva.h>

/* The function's requester id is its number (iommu_model: 0 = PF, 1..63 = VFs); the
 * IOMMU logs the fault in its own per-function log as well. */
int gpu_sys_rw(struct gpu *g, unsigned int fn, uint64_t iova, void *buf, uint64_t len, bool write)
{
	if (!g->cfg.iommu)
		return -EFAULT;
	return write ? iommu_dma_write(g->cfg.iommu, fn, iova, buf, len)
		     : iommu_dma_read(g->cfg.iommu, fn, iova, buf, len);
}

/* SVA goes through the PASID the host bound the guest process at: the IOMMU copies with
 * process_vm_readv/writev, so the process's own page tables (COW, mprotect, munmap) decide,
 * and no PASID bound means a fault, never another process. */
int gpu_aper_rw(struct gpu *g, unsigned int fn, uint64_t aper, uint64_t addr, void *buf,
		uint64_t len, bool write)
{
	if (aper != VGPU_GMMU_APER_SVA)
		return gpu_sys_rw(g, fn, addr, buf, len, write);
	if (!g->cfg.iommu)
		return -EFAULT;
	return write ? iommu_dma_write_pasid(g->cfg.iommu, fn, VGPU_SVA_PASID, addr, buf, len)
		     : iommu_dma_read_pasid(g->cfg.iommu, fn, VGPU_SVA_PASID, addr, buf, len);
}

/* A page the guest answers the page request of late holds the engine for as long (up to
 * the IOMMU's pri_timeout_ns): the access stops after it, so the engine's next look at its
 * slice is before the next page, not after all the access's pages. */
int gpu_aper_rw_at(struct gpu *g, unsigned int fn, uint64_t aper, uint64_t addr, void *buf,
		   uint64_t *n, bool write, uint64_t *bad_off)
{
	uint32_t pasid = aper == VGPU_GMMU_APER_SVA ? VGPU_SVA_PASID : IOMMU_NO_PASID;
	size_t done = 0;
	int ret = g->cfg.iommu ? iommu_dma_rw_some(g->cfg.iommu, fn, pasid, addr, buf, *n, write,
						   &done)
			       : -EFAULT;

	*bad_off = done;
	if (!ret)
		*n = done;
	return ret;
}

uint64_t gpu_copy_stream_default(void)
{
	/* glibc's memcpy streams from 3/4 of the last-level cache: a COPY of a buffer that
	 * size moves its bytes the way one memcpy of the buffer would. */
	long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);

	if (llc <= 0)
		llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
	return llc > 0 ? (uint64_t)llc / 4 * 3 : 8ull << 20;
}

void gpu_copy(void *dst, const void *src, uint64_t n, bool stream)
{
	/* A guest's COPY within one buffer, or through two VAs of the same pages, overlaps:
	 * memcpy() and the forward streaming loop are undefined or wrong there. */
	if ((uintptr_t)dst - (uintptr_t)src < n || (uintptr_t)src - (uintptr_t)dst < n) {
		memmove(dst, src, n);
		return;
	}
#ifdef __SSE2__
	uint8_t *d = dst;
	const uint8_t *s = src;
	uint64_t head = -(uintptr_t)d & 15;

	if (!stream || n < head + 64) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	/* Streaming stores are weakly ordered: what follows the copy (its semaphore release)
	 * must not be seen before them. */
	_mm_sfence();
	memcpy(d, s, n);
#else
	(void)stream;
	memcpy(dst, src, n);
#endif
}

/* Copy between system memory at @iova and a host buffer with one IOMMU translation and
 * one copy for as much as is contiguous (a 2 MiB IO page at best); *n shrinks to what
 * was done. The bracket keeps a concurrent strict unmap from freeing the pages under us. */
int gpu_sys_copy(struct gpu *g, unsigned int fn, uint64_t iova, void *buf, uint64_t *n, bool write,
		 bool stream)
{
	struct iommu_xlate x;
	int ret;

	if (!g->cfg.iommu)
		return -EFAULT;
	iommu_access_begin();
	ret = iommu_fn_translate(g->cfg.iommu, fn, IOMMU_NO_PASID, iova, *n,
				 write ? IOMMU_WRITE : IOMMU_READ, &x);
	if (!ret && x.host) {
		*n = cmn_min(*n, (uint64_t)x.len);
		if (write)
			gpu_copy(x.host, buf, *n, stream);
		else
			gpu_copy(buf, x.host, *n, stream);
	} else if (!ret) {
		ret = -EFAULT;
	}
	iommu_access_end();
	return ret;
}

/* gpu_sys_atomic() with the IOMMU access flags @access (IOMMU_READ or IOMMU_WRITE, which
 * says the direction, and optionally IOMMU_NOPRI). */
static int sys_atomic(struct gpu *g, unsigned int fn, uint64_t iova, unsigned int size,
		      uint64_t *val, unsigned int access)
{
	bool write = access & IOMMU_WRITE;
	struct iommu_xlate x;
	int ret;

	if (!g->cfg.iommu)
		return -EFAULT;
	iommu_access_begin();
	ret = iommu_fn_translate(g->cfg.iommu, fn, IOMMU_NO_PASID, iova, size, access, &x);
	if (!ret && (!x.host || x.len < size))
		ret = -EFAULT;
	if (!ret && size == 8) {
		if (write)
			__atomic_store_n((uint64_t *)x.host, *val, __ATOMIC_RELEASE);
		else
			*val = __atomic_load_n((uint64_t *)x.host, __ATOMIC_ACQUIRE);
	} else if (!ret) {
		if (write)
			__atomic_store_n((uint32_t *)x.host, (uint32_t)*val, __ATOMIC_RELEASE);
		else
			*val = __atomic_load_n((uint32_t *)x.host, __ATOMIC_ACQUIRE);
	}
	iommu_access_end();
	return ret;
}

/* A naturally aligned 4/8-byte access to system memory as one atomic load (acquire) or
 * store (release): USERD words and semaphores are shared with a CPU polling them. */
int gpu_sys_atomic(struct gpu *g, unsigned int fn, uint64_t iova, unsigned int size,
		   uint64_t *val, bool write)
{
	return sys_atomic(g, fn, iova, size, val, write ? IOMMU_WRITE : IOMMU_READ);
}

/* A 4/8-byte semaphore word in SVA memory. process_vm_readv/writev copy it in one piece but
 * not as one atomic access: a CPU polling it sees it whole on x86 only because an aligned
 * word never splits a page (documented in doc/vf_guest.md). Little-endian: the low bytes. */
static int sva_word(struct gpu *g, unsigned int fn, uint64_t addr, unsigned int size,
		    uint64_t *val, bool write)
{
	uint64_t v = write ? *val : 0;
	int ret = gpu_aper_rw(g, fn, VGPU_GMMU_APER_SVA, addr, &v, size, write);

	if (!ret && !write)
		*val = v;
	return ret;
}

/* Copy @len bytes between GPU VA @va and @buf, a translation per contiguous piece; an IOMMU
 * fault is recorded in @ctx like an MMU fault. */
static int gpu_va_copy(struct gpu_ctx *ctx, uint64_t va, uint8_t *p, uint64_t len, bool write)
{
	unsigned int access = write ? VGPU_ACCESS_WRITE : VGPU_ACCESS_READ;
	struct gpu_xlate x;
	uint64_t bad;
	int ret;

	while (len) {
		ret = gpu_ctx_xlate(ctx, va, access, &x);
		if (ret)
			return ret;
		uint64_t n = cmn_min(len, x.avail);

		if (x.aper == VGPU_GMMU_APER_VRAM) {
			if (write) {
				memcpy(ctx->g->vram + x.addr, p, n);
				gpu_dirty_mark(ctx->g, x.addr, n);
			} else
				memcpy(p, ctx->g->vram + x.addr, n);
		} else if (gpu_aper_rw_at(ctx->g, ctx->f->id, x.aper, x.addr, p, &n, write, &bad)) {
			ctx->fault_va = va + bad;
			ctx->fault_access = access;
			ctx->fault_reason = VGPU_FAULT_IOMMU;
			return VGPU_FAULT_IOMMU;
		}
		p += n;
		va += n;
		len -= n;
	}
	return 0;
}

int gpu_va_read(struct gpu_ctx *ctx, uint64_t va, void *buf, uint64_t len)
{
	return gpu_va_copy(ctx, va, buf, len, false);
}

int gpu_va_write(struct gpu_ctx *ctx, uint64_t va, const void *buf, uint64_t len)
{
	return gpu_va_copy(ctx, va, (uint8_t *)buf, len, true);
}

/* Semaphores are naturally aligned, so one translation covers them. */
int gpu_va_load(struct gpu_ctx *ctx, uint64_t va, unsigned int size, uint64_t *val)
{
	struct gpu_xlate x;
	uint32_t v32 = 0;
	int ret = gpu_ctx_xlate(ctx, va, VGPU_ACCESS_READ, &x);

	if (ret)
		return ret;
	if (x.aper == VGPU_GMMU_APER_VRAM) {
		uint8_t *p = ctx->g->vram + x.addr;

		*val = size == 8 ? __atomic_load_n((uint64_t *)p, __ATOMIC_ACQUIRE)
				 : __atomic_load_n((uint32_t *)p, __ATOMIC_ACQUIRE);
		return 0;
	}
	(void)v32;
	if (x.aper == VGPU_GMMU_APER_SVA ? sva_word(ctx->g, ctx->f->id, x.addr, size, val, false)
	    : gpu_sys_atomic(ctx->g, ctx->f->id, x.addr, size, val, false)) {
		ctx->fault_va = va;
		ctx->fault_access = VGPU_ACCESS_READ;
		return ctx->fault_reason = VGPU_FAULT_IOMMU;
	}
	return 0;
}

int gpu_va_store(struct gpu_ctx *ctx, uint64_t va, unsigned int size, uint64_t val)
{
	struct gpu_xlate x;
	uint32_t v32 = (uint32_t)val;
	int ret = gpu_ctx_xlate(ctx, va, VGPU_ACCESS_WRITE, &x);

	if (ret)
		return ret;
	if (x.aper == VGPU_GMMU_APER_VRAM) {
		uint8_t *p = ctx->g->vram + x.addr;

		if (size == 8)
			__atomic_store_n((uint64_t *)p, val, __ATOMIC_RELEASE);
		else
			__atomic_store_n((uint32_t *)p, v32, __ATOMIC_RELEASE);
		gpu_dirty_mark(ctx->g, x.addr, size);
		return 0;
	}
	(void)v32;
	if (x.aper == VGPU_GMMU_APER_SVA ? sva_word(ctx->g, ctx->f->id, x.addr, size, &val, true)
	    : gpu_sys_atomic(ctx->g, ctx->f->id, x.addr, size, &val, true)) {
		ctx->fault_va = va;
		ctx->fault_access = VGPU_ACCESS_WRITE;
		return ctx->fault_reason = VGPU_FAULT_IOMMU;
	}
	return 0;
}

/* IOMMU access flags for USERD in system memory. With g->lock held (the GP_PUT scan, a
 * channel put in error by the scheduler, the host or a device reset's replay, a
 * migration's look at a channel) an unmapped USERD faults at once instead of raising a
 * page request: the function answers those when it likes (the IOMMU waits up to its
 * pri_timeout_ns for each, and once the function's groups are used up for a free one too),
 * and every engine of every function waits for g->lock meanwhile. A channel's own turn,
 * which runs without the lock, keeps them. */
static unsigned int userd_access(struct gpu *g, bool write)
{
	return (write ? IOMMU_WRITE : IOMMU_READ) | (cmn_mutex_held(&g->lock) ? IOMMU_NOPRI : 0);
}

const struct vgpu_userd *gpu_userd_host(struct gpu *g, unsigned int fn, const struct gpu_chan *c,
					uint64_t part_base, uint64_t part_size, uint64_t len)
{
	uint64_t addr = c->cfg.userd_addr;
	struct iommu_xlate x;

	if (c->cfg.userd_aper != VGPU_APER_SYS)
		return addr <= part_size && part_size - addr >= len ?
		       (const struct vgpu_userd *)(g->vram + part_base + addr) : NULL;
	if (!g->cfg.iommu || iommu_fn_translate(g->cfg.iommu, fn, IOMMU_NO_PASID, addr, len,
						userd_access(g, false), &x) ||
	    !x.host || x.len < len)
		return NULL;
	return (const struct vgpu_userd *)x.host;
}

/* USERD words are shared with a submitter polling them: 4/8-byte aligned accesses are atomic.
 * USERD is 64-byte aligned within one page and its words are 4 bytes: always that path. */
int gpu_phys_rw(struct gpu *g, unsigned int fn, uint64_t part_base, uint64_t part_size,
		uint64_t aper, uint64_t addr, void *buf, uint64_t len, bool write)
{
	uint8_t *p;

	if (aper == VGPU_APER_SYS && (len == 4 || len == 8) && !(addr % len)) {
		uint64_t v = len == 8 ? *(uint64_t *)buf : *(uint32_t *)buf;
		int ret = sys_atomic(g, fn, addr, (unsigned int)len, &v, userd_access(g, write));

		if (!ret && !write && len == 8)
			*(uint64_t *)buf = v;
		else if (!ret && !write)
			*(uint32_t *)buf = (uint32_t)v;
		return ret;
	}
	if (aper == VGPU_APER_SYS)
		return gpu_sys_rw(g, fn, addr, buf, len, write);
	if (addr > part_size || len > part_size - addr)
		return -EFAULT;
	p = g->vram + part_base + addr;
	if (len == 4 && !(addr % 4)) {
		if (write)
			__atomic_store_n((uint32_t *)p, *(uint32_t *)buf, __ATOMIC_RELEASE);
		else
			*(uint32_t *)buf = __atomic_load_n((uint32_t *)p, __ATOMIC_ACQUIRE);
	} else if (len == 8 && !(addr % 8)) {
		if (write)
			__atomic_store_n((uint64_t *)p, *(uint64_t *)buf, __ATOMIC_RELEASE);
		else
			*(uint64_t *)buf = __atomic_load_n((uint64_t *)p, __ATOMIC_ACQUIRE);
	} else if (write) {
		memcpy(p, buf, len);
	} else {
		memcpy(buf, p, len);
	}
	if (write)
		gpu_dirty_mark(g, part_base + addr, len);
	return 0;
}
