// SPDX-License-Identifier: MIT
/* Shared virtual addressing for a local guest (ABI 2.1, vgpu/sva.h) against a real vgpud
 * (../../bin/vgpud next to this binary, a private runtime/state dir, one 512 MiB slice): the
 * GPU's COPY/FILL work reads and writes this process's ordinary malloc/mmap memory through
 * GMMU aperture 2, with the process's own page tables deciding - fork and COW, munmap,
 * mprotect - and nothing of another process reachable. Skipped with the reason when vgpud
 * is not built. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "vf_guest/include/vgpu_vf.h"
#include <vgpu/gpfifo.h>
#include <vgpu/sva.h>
#include "tests/unit/vf_guest/vgpud_fixture.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define UUID		"7e570000-0000-4000-8000-00000000aa02"
#define M2		(2ull << 20)
#define PG		4096ull
#define WAIT_NS		(30ull * 1000 * 1000 * 1000)
#define VRAM_VA		(1ull << 42)	/* fx_open() maps 2 MiB of VRAM here */
#define BIND_LEN	(16u << 10)	/* the binding cases' buffer */

/* ---- per-case fixture ------------------------------------------------------------------ */

struct fx {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	uint64_t vram_va;		/* 2 MiB of VRAM mapped here */
};

/* Open the VF, an address space with 2 MiB of VRAM at VRAM_VA, one (non-replayable)
 * channel; bind SVA if @bind. */
static void fx_open(struct fx *f, bool bind)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_channel_opts co = { 0 };
	struct vgpu_mem *vram;
	int ret;

	vfx_skip_if_down();
	memset(f, 0, sizeof(*f));
	assert_int_equal(vfx_vf_open(&vo, &f->vf), 0);
	assert_int_equal(vgpu_vaspace_create(f->vf, &f->as), 0);
	assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch), 0);
	assert_int_equal(vgpu_mem_alloc(f->vf, VGPU_MEM_VRAM, M2, M2, &vram), 0);
	assert_int_equal(vgpu_va_map(f->as, VRAM_VA, vram, 0, M2, M2, 0), 0);
	f->vram_va = VRAM_VA;
	if (bind) {
		ret = vgpu_sva_bind(f->vf);
		if (ret)
			fail_msg("bind: %s (%s)", vgpu_vf_strerror(ret), vgpu_vf_last_error(f->vf));
	}
}

static void fx_close(struct fx *f)
{
	vfx_vf_close(f->vf);
}

/* A fresh channel after one went into error. */
static void fx_new_channel(struct fx *f)
{
	struct vgpu_channel_opts co = { 0 };

	vgpu_channel_destroy(f->ch);
	assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch), 0);
}

/* Run @pb and wait: 0, or the channel error code (*@fault_va: the VA the host reported). */
static uint32_t run(struct fx *f, const struct vgpu_pb *pb, uint64_t *fault_va)
{
	struct vgpu_fence fe;
	uint32_t code = 0;
	uint64_t va = 0;
	int ret;

	assert_int_equal(pb->err, 0);
	assert_int_equal(vgpu_submit(f->ch, pb->dw, pb->len, &fe), 0);
	ret = vgpu_fence_wait(&fe, WAIT_NS);
	if (!ret)
		return 0;
	assert_int_equal(ret, -VGPU_ECHANERR);
	assert_int_equal(vgpu_channel_error(f->ch, &code, &va), -VGPU_ECHANERR);
	/* A fault's event, which carries its VA, may trail the channel's error word. */
	while (fault_va && !va &&
	       (code == VGPU_CHAN_ERR_IOMMU_FAULT || code == VGPU_CHAN_ERR_MMU_FAULT)) {
		usleep(1000);
		vgpu_channel_error(f->ch, &code, &va);
	}
	if (fault_va)
		*fault_va = va;
	return code;
}

static uint32_t gpu_copy(struct fx *f, const void *src, void *dst, uint64_t len, uint64_t *fva)
{
	uint32_t dw[32];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_copy(&pb, (uint64_t)(uintptr_t)src, (uint64_t)(uintptr_t)dst, len);
	return run(f, &pb, fva);
}

static uint32_t gpu_copy_va(struct fx *f, uint64_t src, uint64_t dst, uint64_t len, uint64_t *fva)
{
	uint32_t dw[32];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_copy(&pb, src, dst, len);
	return run(f, &pb, fva);
}

static uint32_t gpu_fill(struct fx *f, void *dst, uint64_t len, uint32_t v, uint64_t *fva)
{
	uint32_t dw[32];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_fill(&pb, (uint64_t)(uintptr_t)dst, len, v);
	return run(f, &pb, fva);
}

/* Map the whole pages holding [p, p+len) at GPU VA == CPU VA. */
static void map_same(struct fx *f, const void *p, uint64_t len, uint64_t ps, unsigned int flags)
{
	uint64_t a = (uint64_t)(uintptr_t)p & ~(ps - 1);
	uint64_t e = ((uint64_t)(uintptr_t)p + len + ps - 1) & ~(ps - 1);
	int ret = vgpu_va_map_sva(f->as, a, (const void *)(uintptr_t)a, e - a, ps, flags);

	if (ret)
		fail_msg("map_sva: %s (%s)", vgpu_vf_strerror(ret), vgpu_vf_last_error(f->vf));
}

static void *anon(uint64_t len, int flags)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static uint8_t pat(size_t i, unsigned int bias)
{
	return (uint8_t)(i * 131 + bias + (i >> 12));
}

static void pat_fill(uint8_t *p, size_t n, unsigned int bias)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(i, bias);
}

static bool pat_ok(const uint8_t *p, size_t n, unsigned int bias)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pat(i, bias)) {
			print_message("byte %zu: %#x, want %#x\n", i, p[i], pat(i, bias));
			return false;
		}
	return true;
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* fx_open() and a fresh BIND_LEN buffer mapped at GPU VA == CPU VA, for the binding cases. */
static uint8_t *fx_open_buf(struct fx *f, bool bind)
{
	uint8_t *p;

	fx_open(f, bind);
	p = anon(BIND_LEN, MAP_PRIVATE);
	map_same(f, p, BIND_LEN, PG, 0);
	return p;
}

/* fx_open() bound, @src and @dst (@len each) mapped at GPU VA == CPU VA, @src holding the
 * pattern @bias: the start of a case that copies between two buffers. */
static void fx_open_copy(struct fx *f, uint8_t *src, uint8_t *dst, uint64_t len,
			 unsigned int bias)
{
	fx_open(f, true);
	map_same(f, src, len, PG, 0);
	map_same(f, dst, len, PG, 0);
	pat_fill(src, len, bias);
}

/* The GPU fills [p, p+len) with byte @b and the CPU sees it. */
static void fill_sees(struct fx *f, uint8_t *p, uint64_t len, uint8_t b)
{
	assert_int_equal(gpu_fill(f, p, len, 0x01010101u * b, NULL), 0);
	assert_true(all_bytes(p, len, b));
}

/* Binding brings the memory back: bind, then the GPU fills [p, p+len) with byte @b. */
static void bind_fill_sees(struct fx *f, uint8_t *p, uint64_t len, uint8_t b)
{
	int ret = vgpu_sva_bind(f->vf);

	if (ret)
		fail_msg("bind: %s (%s)", vgpu_vf_strerror(ret), vgpu_vf_last_error(f->vf));
	fill_sees(f, p, len, b);
}

/* Without a binding the GPU's fill of [p, p+len) faults and leaves byte @old; the channel
 * that went into error is replaced. */
static void fill_faults(struct fx *f, uint8_t *p, uint64_t len, uint8_t b, uint8_t old)
{
	assert_int_equal(gpu_fill(f, p, len, 0x01010101u * b, NULL), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(all_bytes(p, len, old));
	fx_new_channel(f);
}

/* After a VF reset or a vgpud restart: recover (retried until the VF is usable), a new VA
 * space and channel, [p, p+len) mapped again; unbound, so a fill faults and leaves byte @old. */
static void reattach_unbound(struct fx *f, uint8_t *p, uint64_t len, uint8_t b, uint8_t old)
{
	struct vgpu_channel_opts co = { 0 };
	struct vgpu_vf_lost lost;

	while (vgpu_vf_recover(f->vf, &lost))
		usleep(10 * 1000);
	assert_int_equal(vgpu_vaspace_create(f->vf, &f->as), 0);
	assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch), 0);
	map_same(f, p, len, PG, 0);
	fill_faults(f, p, len, b, old);
}

/* ---- cases ---------------------------------------------------------------------------- */

/* HMM-01/03 on SVA: the GPU reads malloc'd data (unaligned, 4 KiB pages) into VRAM and back
 * into another malloc'd buffer, fills never-touched mmap memory (2 MiB pages) that the CPU
 * then sees, and copies CPU data between two such buffers. */
static void test_malloc_rw(void **state)
{
	const size_t n = (1u << 20) + 4321;
	uint8_t *a, *b, *big, *m2;
	struct fx f;

	(void)state;
	vfx_skip_if_down();	/* before the allocations: a skip would leak them */
	a = malloc(n);
	b = malloc(n);
	big = anon(2 * M2, MAP_PRIVATE);
	fx_open(&f, true);
	assert_non_null(a);
	assert_non_null(b);
	pat_fill(a, n, 1);
	memset(b, 0, n);
	map_same(&f, a, n, PG, 0);
	map_same(&f, b, n, PG, 0);
	assert_int_equal(gpu_copy_va(&f, (uintptr_t)a, f.vram_va + 3, n, NULL), 0);
	assert_int_equal(gpu_copy_va(&f, f.vram_va + 3, (uintptr_t)b, n, NULL), 0);
	assert_true(pat_ok(b, n, 1));			/* GPU -> malloc memory, via VRAM */
	/* 2 MiB pages over a 2 MiB aligned part of a fresh mapping nobody touched yet */
	m2 = (uint8_t *)(((uintptr_t)big + M2 - 1) & ~(M2 - 1));
	map_same(&f, m2, M2, M2, 0);
	fill_sees(&f, m2, M2, 0xa5);
	pat_fill(m2, M2, 9);				/* CPU writes, GPU copies them */
	assert_int_equal(gpu_copy(&f, m2 + 5, b, n, NULL), 0);
	assert_memory_equal(b, m2 + 5, n);
	/* semaphores in malloc'd memory: a 64-bit release the CPU sees, and an acquire that
	 * waits for the CPU's value */
	uint64_t *sem = malloc(2 * sizeof(uint64_t));
	uint32_t dw[32];
	struct vgpu_pb pb;
	struct vgpu_fence fe;

	assert_non_null(sem);
	sem[0] = 0;
	sem[1] = 0;
	map_same(&f, sem, 2 * sizeof(uint64_t), PG, 0);
	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_sem_acquire(&pb, (uintptr_t)&sem[1], 5, VGPU_SEM_64, 10000000);
	vgpu_pb_sem_release(&pb, (uintptr_t)&sem[0], 0x1122334455667788ull, VGPU_SEM_64);
	assert_int_equal(vgpu_submit(f.ch, pb.dw, pb.len, &fe), 0);
	usleep(20 * 1000);
	assert_true(__atomic_load_n(&sem[0], __ATOMIC_ACQUIRE) == 0);	/* still waiting */
	__atomic_store_n(&sem[1], 5, __ATOMIC_RELEASE);
	assert_int_equal(vgpu_fence_wait(&fe, WAIT_NS), 0);
	assert_true(__atomic_load_n(&sem[0], __ATOMIC_ACQUIRE) == 0x1122334455667788ull);
	free(sem);
	/* never-touched memory reads as zeros (the zero page), and stays untouched */
	uint8_t *fresh = anon(16 * PG, MAP_PRIVATE);

	map_same(&f, fresh, 16 * PG, PG, 0);
	assert_int_equal(gpu_copy(&f, fresh, b, 16 * PG, NULL), 0);
	assert_true(all_bytes(b, 16 * PG, 0));
	munmap(fresh, 16 * PG);
	fx_close(&f);
	munmap(big, 2 * M2);
	free(a);
	free(b);
}

/* AnonHugePages (kB) of the mapping that contains @p, from /proc/self/smaps; -1 if absent. */
static long anon_huge_kb(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[256];
	bool in = false;
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* HMM-07 on SVA: a transparent huge page (MADV_HUGEPAGE, 2 MiB GMMU page over it) takes
 * the GPU's write whole and stays huge. Skipped when THP is off. */
static void test_write_huge(void **state)
{
	uint8_t *big = anon(2 * M2, MAP_PRIVATE);
	uint8_t *h = (uint8_t *)(((uintptr_t)big + M2 - 1) & ~(M2 - 1));
	struct fx f;

	(void)state;
	if (madvise(h, M2, MADV_HUGEPAGE)) {
		print_message("skip: MADV_HUGEPAGE: %s\n", strerror(errno));
		munmap(big, 2 * M2);
		skip();
	}
	h[0] = 1;				/* fault in: a huge page if the kernel has one */
	if (anon_huge_kb(h) < 2048) {
		munmap(big, 2 * M2);
		print_message("skip: no transparent huge page here (AnonHugePages %ld kB)\n",
			      anon_huge_kb(h));
		skip();
	}
	fx_open(&f, true);
	map_same(&f, h, M2, M2, 0);
	fill_sees(&f, h, M2, 0x3c);
	assert_true(anon_huge_kb(h) >= 2048);	/* written in place, not split */
	fx_close(&f);
	munmap(big, 2 * M2);
}

/* HMM-09/10 on SVA: a shared file mapping - the GPU reads the file's bytes and its write
 * reaches the file (pread shows it); a private file mapping takes the GPU's write as a COW
 * copy and the file keeps its data. */
static void test_file_mapping(void **state)
{
	const size_t len = 64 << 10;
	char path[] = "/tmp/vgpu-sva-file-XXXXXX";
	uint8_t *buf = anon(len, MAP_PRIVATE), *shr, *prv;
	int fd = mkstemp(path);
	struct fx f;

	(void)state;
	assert_true(fd >= 0);
	unlink(path);
	pat_fill(buf, len, 6);
	assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
	shr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	prv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	assert_true(shr != MAP_FAILED && prv != MAP_FAILED);
	fx_open(&f, true);
	map_same(&f, shr, len, PG, 0);
	map_same(&f, prv, len, PG, 0);
	map_same(&f, buf, len, PG, 0);
	memset(buf, 0, len);
	assert_int_equal(gpu_copy(&f, shr, buf, len, NULL), 0);	/* HMM-09 */
	assert_true(pat_ok(buf, len, 6));
	assert_int_equal(gpu_fill(&f, shr, len, 0x10101010u, NULL), 0);	/* HMM-10 */
	assert_int_equal(pread(fd, buf, len, 0), (ssize_t)len);
	assert_true(all_bytes(buf, len, 0x10));
	fill_sees(&f, prv, len, 0x20);
	assert_int_equal(pread(fd, buf, len, 0), (ssize_t)len);
	assert_true(all_bytes(buf, len, 0x10));			/* the file did not change */
	fx_close(&f);
	munmap(shr, len);
	munmap(prv, len);
	munmap(buf, len);
	close(fd);
}

/* A child that waits for the parent's go and reports through its exit code. */
struct child {
	pid_t pid;
	int go[2], done[2];
};

static void child_wait(int fd)
{
	char c;

	if (read(fd, &c, 1) != 1)
		_exit(90);
}

static void child_say(int fd)
{
	if (write(fd, "x", 1) != 1)
		_exit(91);
}

static int child_exit(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* HMM-05/28 on SVA (private memory, COW): after fork the GPU, bound to the parent, writes
 * the parent's copy - the child still sees the old data; the child's own CPU writes stay in
 * its copy - the GPU still reads the parent's. HMM-06 (MAP_SHARED): both see the GPU's
 * write. */
static void test_fork_cow(void **state)
{
	const uint64_t len = 64 << 10;
	uint8_t *priv = anon(len, MAP_PRIVATE), *shr = anon(len, MAP_SHARED);
	uint8_t *out = anon(len, MAP_PRIVATE);
	struct child c;
	struct fx f;

	(void)state;
	fx_open(&f, true);
	map_same(&f, priv, len, PG, 0);
	map_same(&f, shr, len, PG, 0);
	map_same(&f, out, len, PG, 0);
	pat_fill(priv, len, 1);
	pat_fill(shr, len, 2);
	assert_int_equal(pipe(c.go), 0);
	assert_int_equal(pipe(c.done), 0);
	c.pid = fork();
	assert_true(c.pid >= 0);
	if (!c.pid) {
		/* the child: CPU only (the VF belongs to the parent) */
		child_wait(c.go[0]);			/* the GPU has written */
		if (!pat_ok(priv, len, 1))
			_exit(1);			/* COW: still the old data */
		if (!all_bytes(shr, len, 0x77))
			_exit(2);			/* shared: the GPU's write */
		pat_fill(priv, len, 3);			/* its own copy only */
		child_say(c.done[1]);
		child_wait(c.go[0]);
		_exit(0);
	}
	assert_int_equal(gpu_fill(&f, priv, len, 0x55555555u, NULL), 0);
	assert_int_equal(gpu_fill(&f, shr, len, 0x77777777u, NULL), 0);
	assert_true(all_bytes(priv, len, 0x55));	/* the parent's copy */
	child_say(c.go[1]);
	child_wait(c.done[0]);
	/* the child wrote its copy: the GPU still reads the parent's */
	assert_int_equal(gpu_copy(&f, priv, out, len, NULL), 0);
	assert_true(all_bytes(out, len, 0x55));
	child_say(c.go[1]);
	assert_int_equal(child_exit(c.pid), 0);
	fx_close(&f);
	munmap(priv, len);
	munmap(shr, len);
	munmap(out, len);
}

/* HMM-05 on SVA as written: fork, then the CHILD attaches, binds and device-writes its
 * (COW) copy - it sees the write, the parent's memory is unchanged. */
static void test_child_device_write(void **state)
{
	const uint64_t len = 64 << 10;
	uint8_t *p = anon(len, MAP_PRIVATE);
	pid_t pid;

	(void)state;
	vfx_skip_if_down();
	pat_fill(p, len, 13);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct fx f;
		struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
		struct vgpu_channel_opts co = { 0 };
		int ret = vfx_vf_open(&vo, &f.vf);

		if (ret || vgpu_sva_bind(f.vf) || vgpu_vaspace_create(f.vf, &f.as) ||
		    vgpu_channel_create(f.vf, f.as, &co, &f.ch) ||
		    vgpu_va_map_sva(f.as, (uintptr_t)p, p, len, PG, 0))
			_exit(1);
		uint32_t dw[32];
		struct vgpu_pb pb;
		struct vgpu_fence fe;

		vgpu_pb_init(&pb, dw, 32);
		vgpu_pb_fill(&pb, (uintptr_t)p, len, 0x66666666u);
		if (vgpu_submit(f.ch, pb.dw, pb.len, &fe) || vgpu_fence_wait(&fe, WAIT_NS))
			_exit(2);
		vgpu_vf_close(f.vf);
		_exit(all_bytes(p, len, 0x66) ? 0 : 3);
	}
	assert_int_equal(child_exit(pid), 0);	/* the child saw its device write */
	assert_true(pat_ok(p, len, 13));		/* the parent's copy is untouched */
	munmap(p, len);
}

/* HMM-33 on SVA (partial unmap): a munmap'd range is an MMU fault at its address, for reads and writes;
 * nothing is written (a new mapping there is zeros) and the destination of the failed
 * copy is untouched. */
static void test_munmap_fault(void **state)
{
	const uint64_t len = 64 << 10;
	uint8_t *p = anon(2 * len, MAP_PRIVATE), *dst = anon(len, MAP_PRIVATE);
	uint64_t fva = 0;
	struct fx f;

	(void)state;
	fx_open(&f, true);
	map_same(&f, p, 2 * len, PG, 0);
	map_same(&f, dst, len, PG, 0);
	memset(p, 1, 2 * len);
	memset(dst, 0xee, len);
	assert_int_equal(munmap(p + len, len), 0);
	assert_int_equal(gpu_copy(&f, p + len, dst, len, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)(p + len));
	assert_true(all_bytes(dst, len, 0xee));
	fx_new_channel(&f);
	fva = 0;
	assert_int_equal(gpu_fill(&f, p + len, len, 0x12345678u, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)(p + len));
	assert_true(mmap(p + len, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == p + len);
	assert_true(all_bytes(p + len, len, 0));	/* nothing was written there */
	/* the mapped half still works, and so does the new mapping */
	fx_new_channel(&f);
	assert_int_equal(gpu_copy(&f, p, p + len, len, NULL), 0);
	assert_true(all_bytes(p + len, len, 1));
	/* a hole inside a 2 MiB GMMU page: the fault names the hole's page, not the piece */
	uint8_t *big = anon(2 * M2, MAP_PRIVATE);
	uint8_t *h = (uint8_t *)(((uintptr_t)big + M2 - 1) & ~(M2 - 1));

	memset(h, 2, M2);
	map_same(&f, h, M2, M2, 0);
	assert_int_equal(munmap(h + M2 / 2 + 3 * PG, PG), 0);
	fva = 0;
	assert_int_equal(gpu_copy_va(&f, (uintptr_t)h, f.vram_va, M2, &fva),
			 VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)(h + M2 / 2 + 3 * PG));
	fx_close(&f);
	munmap(big, 2 * M2);
	munmap(p, 2 * len);
	munmap(dst, len);
}

struct unmapper {
	void *addr;
	size_t len;
	uint64_t delay_us;
};

static void *unmap_later(void *arg)
{
	struct unmapper *u = arg;

	usleep((useconds_t)u->delay_us);
	munmap(u->addr, u->len);
	return NULL;
}

/* HMM-19 on SVA: the CPU unmaps half the source while the GPU copies it - the copy either
 * completes with the right data or faults inside the unmapped half; what it wrote before
 * the fault is right and nothing else is garbage. Never a hang or a crash. Delays from 0
 * to 100 ms, so both outcomes occur on an idle host (on a loaded one any mix is right). */
static void test_unmap_race(void **state)
{
	const size_t len = 8 << 20, half = len / 2;
	uint8_t *dst = anon(len, MAP_PRIVATE);
	unsigned int ok = 0, faulted = 0;
	struct fx f;

	(void)state;
	fx_open(&f, true);
	map_same(&f, dst, len, PG, 0);

	static const uint64_t delays_us[] = { 0, 1000, 4000, 16000, 100000 };

	for (size_t k = 0; k < sizeof(delays_us) / sizeof(delays_us[0]); k++) {
		uint64_t delay = delays_us[k];
		uint8_t *src = anon(len, MAP_PRIVATE);
		struct unmapper u = { src + half, half, delay };
		pthread_t th;
		uint64_t fva = 0;
		uint32_t code;

		pat_fill(src, len, 8);
		memset(dst, 0, len);
		map_same(&f, src, len, PG, 0);
		assert_int_equal(pthread_create(&th, NULL, unmap_later, &u), 0);
		code = gpu_copy(&f, src, dst, len, &fva);
		pthread_join(th, NULL);
		if (!code) {
			ok++;
			assert_true(pat_ok(dst, len, 8));
		} else {
			faulted++;
			assert_int_equal(code, VGPU_CHAN_ERR_IOMMU_FAULT);
			assert_true(fva >= (uintptr_t)(src + half) && fva < (uintptr_t)(src + len));
			assert_true(pat_ok(dst, fva - (uintptr_t)src, 8));
			for (size_t i = fva - (uintptr_t)src; i < len; i++)
				if (dst[i] && dst[i] != pat(i, 8))
					fail_msg("byte %zu after the fault is %#x", i, dst[i]);
			fx_new_channel(&f);
		}
		assert_int_equal(vgpu_va_unmap(f.as, (uintptr_t)src, len), 0);
		munmap(src, half);
	}
	print_message("unmap race: %u copies completed, %u faulted\n", ok, faulted);
	fx_close(&f);
	munmap(dst, len);
}

/* HMM-34 on SVA: after mremap moves a buffer, the old address faults for the GPU as for the
 * CPU, and the new one (mapped again) has the data. */
static void test_mremap(void **state)
{
	const size_t len = 64 << 10;
	uint8_t *p = anon(len, MAP_PRIVATE), *out = anon(len, MAP_PRIVATE), *q;
	uint8_t *hole = anon(len, MAP_PRIVATE);
	uint64_t fva = 0;
	struct fx f;

	(void)state;
	fx_open_copy(&f, p, out, len, 11);
	assert_int_equal(munmap(hole, len), 0);
	q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, hole);
	assert_true(q == hole);
	assert_int_equal(gpu_copy(&f, p, out, len, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)p);
	fx_new_channel(&f);
	map_same(&f, q, len, PG, 0);
	assert_int_equal(gpu_copy(&f, q, out, len, NULL), 0);
	assert_true(pat_ok(out, len, 11));
	fx_close(&f);
	munmap(q, len);
	munmap(out, len);
}

struct uffd_server {
	int fd;
	uint8_t *base;
	size_t len;
	unsigned int served;
	volatile bool stop;
};

/* Serve missing-page faults of the region with pattern pages (bias 12), as a third-party
 * userfaultfd handler would. */
static void *uffd_serve(void *arg)
{
	struct uffd_server *u = arg;
	static uint8_t page[4096];

	while (!u->stop) {
		struct pollfd p = { .fd = u->fd, .events = POLLIN };
		struct uffd_msg m;

		if (poll(&p, 1, 10) <= 0 || read(u->fd, &m, sizeof(m)) != sizeof(m) ||
		    m.event != UFFD_EVENT_PAGEFAULT)
			continue;
		uint64_t at = m.arg.pagefault.address & ~(PG - 1);
		struct uffdio_copy c = { .dst = at, .src = (uintptr_t)page, .len = PG };

		for (size_t i = 0; i < PG; i++)
			page[i] = pat(at - (uintptr_t)u->base + i, 12);
		if (!ioctl(u->fd, UFFDIO_COPY, &c))
			u->served++;
	}
	return NULL;
}

/* HMM-37 on SVA: a range whose CPU faults a userfaultfd handler of the process serves - the
 * device's access (process_vm_readv in vgpud) raises those faults and waits for the handler,
 * then reads what it placed. */
static void test_uffd_region(void **state)
{
	const size_t len = 64 << 10;
	struct uffd_server u = { .fd = -1, .len = len, .served = 0, .stop = false };
	struct uffdio_api api = { .api = UFFD_API };
	uint8_t *out;
	pthread_t th;
	struct fx f;

	(void)state;
	/* Skips leave by longjmp: none may come once the server thread runs on this frame. */
	vfx_skip_if_down();
	out = anon(len, MAP_PRIVATE);
	u.base = anon(len, MAP_PRIVATE);
	u.fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (u.fd < 0) {
		print_message("skip: userfaultfd: %s\n", strerror(errno));
		skip();
	}
	assert_int_equal(ioctl(u.fd, UFFDIO_API, &api), 0);
	struct uffdio_register reg = { .range = { (uintptr_t)u.base, len },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };

	assert_int_equal(ioctl(u.fd, UFFDIO_REGISTER, &reg), 0);
	fx_open(&f, true);
	map_same(&f, u.base, len, PG, 0);
	map_same(&f, out, len, PG, 0);
	assert_int_equal(pthread_create(&th, NULL, uffd_serve, &u), 0);
	assert_int_equal(gpu_copy(&f, u.base, out, len, NULL), 0);
	assert_true(pat_ok(out, len, 12));
	u.stop = true;
	pthread_join(th, NULL);
	assert_int_equal(u.served, len / PG);		/* every page through the handler */
	fx_close(&f);
	close(u.fd);
	munmap(u.base, len);
	munmap(out, len);
}

/* HMM-02/04 on SVA: PROT_READ - a GPU write faults and changes nothing, a GPU read works;
 * after mprotect RW the write succeeds. PROT_NONE - a read faults too. */
static void test_mprotect(void **state)
{
	const uint64_t len = 64 << 10;
	uint8_t *p = anon(len, MAP_PRIVATE), *out = anon(len, MAP_PRIVATE);
	uint64_t fva = 0;
	struct fx f;

	(void)state;
	fx_open_copy(&f, p, out, len, 4);
	assert_int_equal(mprotect(p, len, PROT_READ), 0);
	assert_int_equal(gpu_fill(&f, p + PG, PG, 0xdeadbeefu, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)(p + PG));
	assert_true(pat_ok(p, len, 4));
	fx_new_channel(&f);
	assert_int_equal(gpu_copy(&f, p, out, len, NULL), 0);
	assert_true(pat_ok(out, len, 4));
	assert_int_equal(mprotect(p, len, PROT_READ | PROT_WRITE), 0);
	fill_sees(&f, p, len, 0x01);
	assert_int_equal(mprotect(p, len, PROT_NONE), 0);
	assert_int_equal(gpu_copy(&f, p, out, PG, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_true(fva == (uintptr_t)p);
	assert_true(pat_ok(out, len, 4));
	fx_close(&f);
	munmap(p, len);
	munmap(out, len);
}

/* A bound guest that stops being dumpable, as an exec of a set-user-ID program makes it,
 * is no longer reached: its pages fault for the GPU both ways, untouched, while it stays
 * so (vgpud has no CAP_SYS_PTRACE in effect; the kernel checks every copy). */
static void test_not_dumpable(void **state)
{
	const uint64_t len = 64 << 10;
	uint8_t *p = anon(len, MAP_PRIVATE), *out = anon(len, MAP_PRIVATE);
	uint64_t fva = 0;
	struct fx f;

	(void)state;
	fx_open_copy(&f, p, out, len, 6);
	assert_int_equal(gpu_copy(&f, p, out, len, NULL), 0);
	assert_true(pat_ok(out, len, 6));
	memset(out, 0, len);
	assert_int_equal(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), 0);
	assert_int_equal(gpu_copy(&f, p, out, len, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	fx_new_channel(&f);
	assert_int_equal(gpu_fill(&f, p, len, 0xdeadbeefu, &fva), VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 0);
	assert_true(all_bytes(out, len, 0));
	assert_true(pat_ok(p, len, 6));
	fx_new_channel(&f);
	assert_int_equal(gpu_copy(&f, p, out, len, NULL), 0);
	assert_true(pat_ok(out, len, 6));
	fx_close(&f);
	munmap(p, len);
	munmap(out, len);
}

/* Without a binding (never bound, unbound, or after a VF reset) SVA accesses fault; binding
 * again brings them back. */
static void test_unbind_reset(void **state)
{
	struct fx f;
	uint8_t *p = fx_open_buf(&f, false);

	(void)state;
	memset(p, 0, BIND_LEN);
	fill_faults(&f, p, BIND_LEN, 0x02, 0);
	assert_int_equal(vgpu_sva_unbind(f.vf), -ENOENT);
	bind_fill_sees(&f, p, BIND_LEN, 0x03);
	assert_int_equal(vgpu_sva_unbind(f.vf), 0);
	fill_faults(&f, p, BIND_LEN, 0x04, 3);
	bind_fill_sees(&f, p, BIND_LEN, 0x05);
	/* a VF reset unbinds: after recovery, a new VA space faults until the next bind */
	assert_int_equal(vfx_ctl(&vfx_group.fx, "reset", UUID, NULL), 0);
	reattach_unbound(&f, p, BIND_LEN, 0x06, 5);
	bind_fill_sees(&f, p, BIND_LEN, 0x07);
	fx_close(&f);
	munmap(p, BIND_LEN);
}

/* Another process's memory is unreachable: an address mapped only in a child faults for
 * the parent's GPU (the secret stays the child's), and the child cannot bind: vgpud
 * refuses its connection, as it would QEMU's guest. */
static void test_other_process(void **state)
{
	const uint64_t len = 64 << 10;
	uint8_t *out = anon(len, MAP_PRIVATE);
	struct child c;
	uint64_t addr, fva = 0;
	struct fx f;

	(void)state;
	fx_open(&f, false);
	assert_int_equal(pipe(c.go), 0);
	assert_int_equal(pipe(c.done), 0);
	c.pid = fork();
	assert_true(c.pid >= 0);
	if (!c.pid) {
		uint8_t *secret = anon(len, MAP_PRIVATE);
		uint64_t a = (uintptr_t)secret;

		memset(secret, 0x5e, len);
		/* not the attached process: refused by vgpud */
		if (vgpu_sva_bind(f.vf) != -EPERM)
			_exit(1);
		if (write(c.done[1], &a, sizeof(a)) != sizeof(a))
			_exit(2);
		child_wait(c.go[0]);
		_exit(all_bytes(secret, len, 0x5e) ? 0 : 3);
	}
	assert_int_equal(read(c.done[0], &addr, sizeof(addr)), sizeof(addr));
	assert_int_equal(vgpu_sva_bind(f.vf), 0);	/* the child's try left nothing behind */
	map_same(&f, out, len, PG, 0);
	if (addr != (uintptr_t)out) {
		/* the child's address is not mapped here, so the parent's GPU cannot reach it */
		assert_int_equal(vgpu_va_map_raw(f.as, addr, VGPU_MEM_SVA, addr, len, PG, 0), 0);
		assert_int_equal(gpu_copy_va(&f, addr, (uintptr_t)out, len, &fva),
				 VGPU_CHAN_ERR_IOMMU_FAULT);
		assert_true(fva == addr);
		fx_new_channel(&f);
		assert_int_equal(gpu_fill(&f, (void *)(uintptr_t)addr, len, 0, NULL),
				 VGPU_CHAN_ERR_IOMMU_FAULT);
	}
	child_say(c.go[1]);
	assert_int_equal(child_exit(c.pid), 0);	/* its secret untouched */
	fx_close(&f);
	munmap(out, len);
}

/* A guest that dies bound leaves nothing behind: vgpud unbinds at its detach, so the next
 * guest binds (not -EBUSY) and reaches its own memory. */
static void test_guest_death(void **state)
{
	uint8_t *p;
	int go[2], st;
	pid_t pid;
	struct fx f;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
		struct vgpu_vf *vf;
		int ret = vfx_vf_open(&vo, &vf);

		if (ret || vgpu_sva_bind(vf))
			_exit(1);
		child_say(go[1]);
		pause();			/* bound, until killed */
		_exit(2);
	}
	child_wait(go[0]);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	p = fx_open_buf(&f, true);		/* fails on -EBUSY if the binding had survived */
	fill_sees(&f, p, BIND_LEN, 0x09);
	fx_close(&f);
	munmap(p, BIND_LEN);
}

/* vgpud killed (-9) and restarted while a guest is bound: the new daemon knows no binding,
 * the guest recovers, binds again on a fresh SVA connection and reaches its memory. Runs
 * last but one: it replaces the daemon. */
static void test_daemon_restart(void **state)
{
	struct fx f;
	uint8_t *p = fx_open_buf(&f, true);

	(void)state;
	assert_int_equal(gpu_fill(&f, p, BIND_LEN, 0x0a0a0a0au, NULL), 0);
	assert_int_equal(vfx_daemon_restart(&vfx_group.fx), 0);
	reattach_unbound(&f, p, BIND_LEN, 0x0b, 0x0a);
	bind_fill_sees(&f, p, BIND_LEN, 0x0c);
	fx_close(&f);
	munmap(p, BIND_LEN);
}

/* Bad input: each malformed request is refused with the field named and changes nothing;
 * mapping calls check their arguments. */
static void test_bad_input(void **state)
{
#define REQ(magic, abi, op, flags, reserved) { magic, abi, op, flags, reserved }
#define GOOD_BUT(...) REQ(VGPU_SVA_MAGIC, VGPU_ABI_VERSION, __VA_ARGS__)
	/* one thing wrong in each; the last is well formed but unbinds what none bound */
	static const struct {
		struct vgpu_sva_req r;
		size_t len;
		int32_t status;
		const char *why;
	} bad[] = {
		{ GOOD_BUT(VGPU_SVA_OP_BIND, 0, 0), 10, -EBADMSG, "10 bytes" },
		{ REQ(0x1234, VGPU_ABI_VERSION, VGPU_SVA_OP_BIND, 0, 0), 24, -EBADMSG, "magic" },
		{ REQ(VGPU_SVA_MAGIC, 1u << 16, VGPU_SVA_OP_BIND, 0, 0), 24, -EPROTO,
		  "abi_version 1.0" },
		{ GOOD_BUT(VGPU_SVA_OP_BIND, 4, 0), 24, -EINVAL, "flags" },
		{ GOOD_BUT(VGPU_SVA_OP_BIND, 0, 1), 24, -EINVAL, "reserved" },
		{ GOOD_BUT(7, 0, 0), 24, -EINVAL, "op 7" },
		{ GOOD_BUT(VGPU_SVA_OP_UNBIND, 0, 0), 24, -ENOENT, "not bound" },
	};
#undef GOOD_BUT
#undef REQ
	struct vgpu_sva_reply rp;
	uint8_t *p = anon(M2, MAP_PRIVATE);
	struct fx f;

	(void)state;
	fx_open(&f, false);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(vgpu_sva_call_raw(f.vf, &bad[i].r, bad[i].len, &rp), 0);
		assert_int_equal(rp.status, bad[i].status);
		if (!strstr(rp.why, bad[i].why))
			fail_msg("request %zu: reason \"%s\" does not name \"%s\"", i, rp.why,
				 bad[i].why);
	}
	assert_int_equal(vgpu_sva_bind(f.vf), 0);
	assert_int_equal(vgpu_sva_bind(f.vf), -EBUSY);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "already bound"));
	/* mapping: alignment, page size, range */
	assert_int_equal(vgpu_va_map_sva(f.as, (uintptr_t)p + 1, p + 1, PG, PG, 0), -EINVAL);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "aligned"));
	assert_int_equal(vgpu_va_map_sva(f.as, (uintptr_t)p, p, PG, 8192, 0), -EINVAL);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "page size"));
	assert_int_equal(vgpu_va_map_sva(f.as, 0, NULL, PG, PG, 0), -EINVAL);
	assert_int_equal(vgpu_va_map_sva(f.as, 1ull << 47, (void *)(uintptr_t)(1ull << 47), PG,
					 PG, 0), -EINVAL);
	assert_non_null(strstr(vgpu_vf_last_error(f.vf), "user-space"));
	assert_int_equal(vgpu_va_map_sva(f.as, (uintptr_t)p, p, PG, PG, 0x100), -EINVAL);
	/* overlapping an existing mapping */
	assert_int_equal(vgpu_va_map_sva(f.as, (uintptr_t)p, p, PG, PG, 0), 0);
	assert_int_equal(vgpu_va_map_sva(f.as, (uintptr_t)p, p, PG, PG, 0), -EEXIST);
	fx_close(&f);
	munmap(p, M2);
}

/* Only the local transport can bind: a driver opened on another transport (as in a VM)
 * gets -EOPNOTSUPP with the reason. Checked without a VM: a VF opened with a ready
 * transport object takes the same path. */
static void test_vm_transport_refused(void **state)
{
	struct vgpu_vf_transport *t;
	struct vgpu_vf_opts vo = { .quiet = true };
	struct vgpu_vf *vf;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vgpu_vf_transport_local(vfx_group.sock, &t), 0);
	vo.transport = t;
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_sva_bind(vf), -EOPNOTSUPP);
	assert_non_null(strstr(vgpu_vf_last_error(vf), "VM guest"));
	vfx_vf_close(vf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_malloc_rw, vfx_case_teardown),
		cmocka_unit_test_teardown(test_write_huge, vfx_case_teardown),
		cmocka_unit_test_teardown(test_file_mapping, vfx_case_teardown),
		cmocka_unit_test_teardown(test_fork_cow, vfx_case_teardown),
		cmocka_unit_test_teardown(test_child_device_write, vfx_case_teardown),
		cmocka_unit_test_teardown(test_munmap_fault, vfx_case_teardown),
		cmocka_unit_test_teardown(test_unmap_race, vfx_case_teardown),
		cmocka_unit_test_teardown(test_mremap, vfx_case_teardown),
		cmocka_unit_test_teardown(test_mprotect, vfx_case_teardown),
		cmocka_unit_test_teardown(test_not_dumpable, vfx_case_teardown),
		cmocka_unit_test_teardown(test_uffd_region, vfx_case_teardown),
		cmocka_unit_test_teardown(test_unbind_reset, vfx_case_teardown),
		cmocka_unit_test_teardown(test_other_process, vfx_case_teardown),
		cmocka_unit_test_teardown(test_guest_death, vfx_case_teardown),
		cmocka_unit_test_teardown(test_bad_input, vfx_case_teardown),
		cmocka_unit_test_teardown(test_vm_transport_refused, vfx_case_teardown),
		cmocka_unit_test_teardown(test_daemon_restart, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF("32M"), "/dev/shm/vgpu-sva", UUID, "vgpu-512M");
}
