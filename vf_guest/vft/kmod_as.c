// SPDX-License-Identifier: MIT
/* The kernel address-space case of the guest suite (kmod transport only): GPU work on plain
 * malloc'd and mmap'd memory through the driver's SVM address space, with no map call. The
 * GPU faults, the kernel services the faults (hmm_range_fault, migration into VRAM, PTEs,
 * replay) and the CPU checks the results in place; munmap and fork's copy on write must
 * leave no stale GPU mapping; a bad address in another process cancels only that process's
 * channel. A VRAM object of the library's is mapped into the address space by AS_MAP. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>

#include "common/err.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_kmod.h"
#include "vf_guest/vft/vft.h"

#define KAS_LEN		(64u << 10)
#define KAS_TIMEOUT_NS	(60ull * 1000 * 1000 * 1000)	/* TCG, a fault per 64 KiB */
#define KAS_MAP_VA	((1ull << 47) + (1ull << 30))	/* past the channel window */

struct kas {
	struct vgpu_vf *vf;
	struct vgpu_channel *ch;
	char *why;
	size_t len;
};

static int why(struct kas *c, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, c->len, fmt, ap);
	va_end(ap);
	return ret;
}

/* Run @pb on @ch and wait for it: 0, or the submission's or the wait's -errno. */
static int run(struct vgpu_channel *ch, const struct vgpu_pb *pb)
{
	struct vgpu_fence f;
	int ret = vgpu_submit(ch, pb->dw, pb->len, &f);

	return ret ? ret : vgpu_fence_wait(&f, KAS_TIMEOUT_NS);
}

static int fill(struct vgpu_channel *ch, void *dst, uint64_t len, uint32_t v)
{
	uint32_t dw[8];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 8);
	vgpu_pb_fill(&pb, (uintptr_t)dst, len, v);
	return run(ch, &pb);
}

static int copy(struct vgpu_channel *ch, void *dst, const void *src, uint64_t len)
{
	uint32_t dw[8];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 8);
	vgpu_pb_copy(&pb, (uintptr_t)src, (uintptr_t)dst, len);
	return run(ch, &pb);
}

/* The first word of @p (@len bytes) that is not @v, or -1. */
static long first_not(const void *p, size_t len, uint32_t v)
{
	const uint32_t *w = p;

	for (size_t i = 0; i < len / 4; i++)
		if (w[i] != v)
			return (long)i;
	return -1;
}

/* In a child, through an attachment of its own (so an address space of its own): a GPU
 * write to memory it unmapped must cancel its channel with MMU_FAULT. Exit status 0 if so. */
static int bad_child(const char *dev)
{
	struct vgpu_vf_transport *t;
	struct vgpu_vf_opts o = { .quiet = true };
	struct vgpu_channel *ch;
	struct vgpu_vf *vf;
	uint32_t code = 0;
	void *gone;
	int ret;

	if (vgpu_vf_transport_kmod(dev, &t))
		return 10;
	o.transport = t;
	if (vgpu_vf_open(&o, &vf))
		return 11;
	if (vgpu_kmod_as_create(vf) || vgpu_kmod_channel_create(vf, 0, &ch))
		return 12;
	gone = mmap(NULL, KAS_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (gone == MAP_FAILED)
		return 13;
	munmap(gone, KAS_LEN);
	ret = fill(ch, gone, 4096, 1);
	if (ret != -VGPU_ECHANERR)
		return 14;
	if (vgpu_channel_error(ch, &code, NULL) != -VGPU_ECHANERR || code != VGPU_CHAN_ERR_MMU_FAULT)
		return 15;
	vgpu_kmod_channel_destroy(ch);
	vgpu_vf_close(vf);
	return 0;
}

static int work(struct kas *c)
{
	uint8_t *dst = malloc(4 * KAS_LEN), *src = malloc(KAS_LEN), *p;
	int ret = -ENOMEM, st, go[2];
	char x;
	pid_t pid;

	if (!dst || !src)
		goto out;
	for (size_t i = 0; i < KAS_LEN; i++)
		src[i] = (uint8_t)(i * 7 + 1);
	/* dst was never touched by the CPU: every page is faulted in by the kernel for the GPU. */
	ret = fill(c->ch, dst, 4 * KAS_LEN, 0xa5a5a5a5u);
	if (ret || first_not(dst, 4 * KAS_LEN, 0xa5a5a5a5u) >= 0) {
		ret = why(c, ret ? ret : -EIO, "FILL on malloc'd memory: %s",
			  ret ? vgpu_vf_strerror(ret) : "wrong result");
		goto out;
	}
	ret = copy(c->ch, dst + KAS_LEN, src, KAS_LEN);
	if (ret || memcmp(dst + KAS_LEN, src, KAS_LEN)) {
		ret = why(c, ret ? ret : -EIO, "COPY between malloc'd buffers: %s",
			  ret ? vgpu_vf_strerror(ret) : "wrong result");
		goto out;
	}
	/* munmap, then new memory at the same address: the GPU must read the new pages. */
	p = mmap(NULL, KAS_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ret = p == MAP_FAILED ? -errno : fill(c->ch, p, KAS_LEN, 0x11111111u);
	if (ret) {
		why(c, ret, "FILL on mmap'd memory: %s", vgpu_vf_strerror(ret));
		if (p != MAP_FAILED)
			munmap(p, KAS_LEN);
		goto out;
	}
	munmap(p, KAS_LEN);
	if (mmap(p, KAS_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		 0) != p) {
		ret = why(c, -errno, "mmap at the old address: %s", strerror(errno));
		goto out;
	}
	memset(p, 0x77, KAS_LEN);
	ret = copy(c->ch, dst, p, KAS_LEN);
	if (ret || first_not(dst, KAS_LEN, 0x77777777u) >= 0) {
		ret = why(c, ret ? ret : -EIO, "after munmap the GPU read %s", ret ?
			  vgpu_vf_strerror(ret) : "the old pages");
		goto out_p;
	}
	/* fork: the child keeps what was there, the parent sees the GPU's new write (the
	 * child looks once the parent's write is done). */
	if (pipe(go)) {
		ret = why(c, -errno, "pipe: %s", strerror(errno));
		goto out_p;
	}
	pid = fork();
	if (pid == 0) {
		close(go[1]);
		_exit(read(go[0], &x, 1) != 1 || first_not(p, KAS_LEN, 0x77777777u) >= 0);
	}
	close(go[0]);
	ret = pid < 0 ? -errno : fill(c->ch, p, KAS_LEN, 0x22222222u);
	if (write(go[1], "x", 1) != 1 && !ret)
		ret = -errno;
	close(go[1]);
	if (!ret && first_not(p, KAS_LEN, 0x22222222u) >= 0)
		ret = why(c, -EIO, "the parent does not see its GPU write after fork");
	if (pid > 0 && (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)))
		ret = why(c, -EIO, "the child saw the parent's GPU write (copy on write broken)");
	if (ret)
		goto out_p;
	/* A bad address in another process: only its channel is cancelled. */
	pid = fork();
	if (pid == 0)
		_exit(bad_child(vgpu_kmod_device(c->vf)));
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		ret = why(c, -EIO, "the process with a bad address: status %#x", pid < 0 ? -1 : st);
		goto out_p;
	}
	ret = fill(c->ch, dst, KAS_LEN, 0x33333333u);
	if (ret || first_not(dst, KAS_LEN, 0x33333333u) >= 0)
		ret = why(c, ret ? ret : -EIO, "this channel after the other's cancel: %s",
			  ret ? vgpu_vf_strerror(ret) : "wrong result");
out_p:
	munmap(p, KAS_LEN);
out:
	free(src);
	free(dst);
	return ret;
}

/* A VRAM object mapped at KAS_MAP_VA: the GPU fills it through the kernel's channel (the CPU
 * sees the words), it is counted in the file's use, a second mapping over it is refused,
 * after the unmap none is left to remove. Freed afterwards with the GPU's words in it, so
 * the channels of the later cases may be made on VRAM that held them. */
static int mapped(struct kas *c)
{
	struct vgpu_kmod_quota q;
	struct vgpu_mem *m;
	int ret = vgpu_mem_alloc(c->vf, VGPU_MEM_VRAM, KAS_LEN, VGPU_GMMU_PAGE_64K, &m);

	if (ret)
		return why(c, ret, "VRAM: %s", vgpu_vf_strerror(ret));
	ret = vgpu_kmod_as_map(c->vf, m, KAS_MAP_VA, false);
	if (ret) {
		why(c, ret, "AS_MAP: %s", vgpu_vf_strerror(ret));
		goto out;
	}
	ret = fill(c->ch, (void *)(uintptr_t)KAS_MAP_VA, KAS_LEN, 0x5a5a5a5au);
	if (ret || first_not(vgpu_mem_cpu(m), KAS_LEN, 0x5a5a5a5au) >= 0) {
		ret = why(c, ret ? ret : -EIO, "FILL on AS_MAP'd VRAM: %s",
			  ret ? vgpu_vf_strerror(ret) : "wrong result");
		goto out;
	}
	ret = vgpu_kmod_as_map(c->vf, m, KAS_MAP_VA, true);
	if (ret != -EEXIST) {
		ret = why(c, -EIO, "a second AS_MAP at the same address: %d", ret);
		goto out;
	}
	ret = vgpu_kmod_quota(c->vf, &q);
	if (!ret && q.vram_used < KAS_LEN)
		ret = why(c, -EIO, "the file holds %llu bytes of VRAM", (unsigned long long)q.vram_used);
	if (!ret)
		ret = vgpu_kmod_as_unmap(c->vf, KAS_MAP_VA);
	if (!ret && vgpu_kmod_as_unmap(c->vf, KAS_MAP_VA) != -ENOENT)
		ret = why(c, -EIO, "a second AS_UNMAP found a mapping");
	if (ret && !c->why[0])
		why(c, ret, "quota or AS_UNMAP: %s", vgpu_vf_strerror(ret));
out:
	vgpu_mem_free(m);	/* unmaps it if still mapped */
	return ret;
}

int vft_kmod_as_case(struct vgpu_vf *vf, char *why_buf, size_t len)
{
	struct kas c = { .vf = vf, .why = why_buf, .len = len };
	struct vgpu_kmod_as_stats s;
	int ret = vgpu_kmod_as_create(vf);

	why_buf[0] = '\0';
	/* One address space per attachment: a second round of the suite reuses it. */
	if (ret && ret != -EEXIST)
		return why(&c, ret, "AS_CREATE: %s", vgpu_vf_strerror(ret));
	ret = vgpu_kmod_channel_create(vf, 0, &c.ch);
	if (ret)
		return why(&c, ret, "a channel on it: %s", vgpu_vf_strerror(ret));
	ret = work(&c);
	if (!ret)
		ret = mapped(&c);
	vgpu_kmod_channel_destroy(c.ch);
	if (ret)
		return ret;
	ret = vgpu_kmod_as_stats(vf, &s);
	if (ret)
		return why(&c, ret, "AS_INFO: %s", vgpu_vf_strerror(ret));
	why(&c, 0, "%llu GPU faults serviced by the kernel: %llu PTEs, %llu pages moved into "
	    "VRAM, %llu PTEs invalidated, %llu replays, %llu cancelled",
	    (unsigned long long)s.faults, (unsigned long long)s.mapped,
	    (unsigned long long)s.migrated, (unsigned long long)s.invalidated,
	    (unsigned long long)s.replays, (unsigned long long)s.cancelled);
	if (!s.faults || !s.mapped || !s.migrated || !s.invalidated || !s.replays || s.cancelled)
		return -EIO;
	return 0;
}
