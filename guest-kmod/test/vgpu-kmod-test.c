// SPDX-License-Identifier: GPL-2.0 OR MIT
/* vgpu-kmod-test - what the guest suite cannot see of the kernel driver vgpu_vf.ko: bad
 * ioctls (wrong sizes, unmapped pointers, foreign handles, bad vectors), what one file may
 * map of BAR2, that memory another process freed reads as zeros, that closing a file or
 * killing its process frees the RM clients it held, SVM, per-file quotas and strict_as
 * (module parameters it sets for its own files and restores); last it unbinds the VF
 * through sysfs while a pool page cannot move, and binds it again.
 * Runs in the guest image (built static by vmm_glue/guest/mkimage.sh), root, with the module
 * bound to one VF:
 *
 *   vgpu-kmod-test [/dev/vgpu-vfN]      (default: the first /dev/vgpu-vf*)
 *   vgpu-kmod-test --svm-hold [DEV]     migrate 64 pages into VRAM, print "# holding", then
 *                                       wait for a signal: a VF reset must end it by SIGBUS
 *   vgpu-kmod-test --svm-evict [DEV]    migrate 64 pages into VRAM, close the device, print
 *                                       "# holding", wait for SIGUSR1 (sent once the driver
 *                                       was unloaded), then exit 0 only if the pages still
 *                                       hold their data (the unload migrated them back)
 *   vgpu-kmod-test --svm-keep [DEV]     the same with the device kept open, SIGUSR1 sent
 *                                       after a VF reset: the announced reset migrated the
 *                                       pages back before it scrubbed VRAM; also 64 KiB the
 *                                       GPU filled through the kernel's address space, which
 *                                       the reset must leave intact and the address space
 *                                       lost
 *   vgpu-kmod-test --svm-lossy [DEV]    migrate 64 pages into VRAM (6 MiB of VRAM of its own
 *                                       below the pool), print "# holding", catch the SIGBUS
 *                                       of a reset that loses them; after SIGUSR1 a child
 *                                       takes all the VRAM it can and writes a pattern where
 *                                       the lost pages are: exit 0 only if it got none of
 *                                       them and the pages do not show the pattern
 *   vgpu-kmod-test --bench [DEV]        figures, one JSON object: mailbox round trip by
 *                                       interrupt (the MBOX ioctl, and the file's own rings
 *                                       rung by NOTIFY), SVM migration GB/s each way with a
 *                                       guest memcpy of the same size as the baseline
 *   vgpu-kmod-test --bench-bar [DEV]    BAR2 write/read GB/s through the driver's mmap against
 *                                       guest memory, with BAR2's MTRR and kernel memory
 *                                       type (/proc/mtrr, debugfs PAT list), one JSON object
 *   vgpu-kmod-test --bench-poll         with the driver unloaded: the same round trip as the
 *                                       polling tier makes it (BAR2 and the doorbell through
 *                                       sysfs, spinning on the reply ring), one JSON object
 *
 * Prints TAP and one "N passed, N failed" line; exit status 0 if nothing failed. Needs only
 * the ABI headers (include/vgpu/). */
#define _GNU_SOURCE
#include <dirent.h>
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vgpu/gpfifo.h>
#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>
#include <vgpu/vf_ioctl.h>

static const char *dev;
static int npoint, nfail;
static char why[256];

/* Record why the current case failed (the first reason wins); returns false. */
static bool fail(const char *fmt, ...)
{
	va_list ap;

	if (!why[0]) {
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
	}
	return false;
}

#define CHECK(cond, ...) do { if (!(cond)) return fail(__VA_ARGS__); } while (0)

static void point(bool ok, const char *name)
{
	printf("%s %d - %s\n", ok ? "ok" : "not ok", ++npoint, name);
	if (!ok) {
		nfail++;
		printf("# %s\n", why[0] ? why : "failed");
	}
	why[0] = '\0';
	fflush(stdout);
}

static int open_dev(void)
{
	int fd = open(dev, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		fail("open %s: %s", dev, strerror(errno));
	return fd;
}

/* ioctl's result as 0 or -errno. */
static int xioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

/* ---- RM calls through VGPU_VF_IOC_MBOX ---- */

struct rm_rsp {
	struct vgpu_rm_reply r;
	uint8_t params[256];
};

/* Send RM message @req (@len bytes; its header is filled here) with the MBOX ioctl's
 * @timeout_ns (0: the driver's default) and return the RM status, or the ioctl's -errno;
 * the reply lands in *@rsp. */
static int rm_call_to(int fd, uint32_t op, void *req, uint32_t len, struct rm_rsp *rsp,
		      uint64_t timeout_ns)
{
	static uint64_t cookie;
	struct vgpu_rm_msg *h = req;
	struct vgpu_vf_ioc_mbox a = { .size = sizeof(a), .type = VF_MSG_RM,
				      .req_ptr = (uintptr_t)req, .req_len = len,
				      .rsp_ptr = (uintptr_t)rsp, .rsp_cap = sizeof(*rsp),
				      .timeout_ns = timeout_ns };
	int ret;

	*h = (struct vgpu_rm_msg){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
				   .abi_version = VGPU_ABI_VERSION, .op = op, .length = len,
				   .cookie = ++cookie };
	memset(rsp, 0, sizeof(*rsp));
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &a);
	if (ret)
		return ret;
	if (a.status)
		return a.status;
	if (a.rsp_len < sizeof(rsp->r) || rsp->r.cookie != h->cookie)
		return -EBADMSG;
	return rsp->r.status;
}

static int rm_call(int fd, uint32_t op, void *req, uint32_t len, struct rm_rsp *rsp)
{
	return rm_call_to(fd, op, req, len, rsp, 0);
}

static int rm_client(int fd, uint32_t *h)
{
	struct vgpu_rm_msg m;
	struct rm_rsp r;
	int ret = rm_call(fd, VGPU_RM_OP_ALLOC_CLIENT, &m, sizeof(m), &r);

	*h = r.r.handle;
	return ret;
}

static int rm_alloc(int fd, uint32_t client, uint32_t parent, uint32_t cls, void *params,
		    uint32_t plen, uint32_t *h)
{
	struct {
		struct vgpu_rm_alloc a;
		uint8_t p[64];
	} m;
	struct rm_rsp r;
	int ret;

	memset(&m, 0, sizeof(m));
	m.a.h_client = client;
	m.a.h_parent = parent;
	m.a.h_class = cls;
	m.a.params_len = plen;
	if (plen)
		memcpy(m.p, params, plen);
	ret = rm_call(fd, VGPU_RM_OP_ALLOC, &m, sizeof(m.a) + plen, &r);
	if (!ret) {
		*h = r.r.handle;
		if (plen)
			memcpy(params, r.params, plen);
	}
	return ret;
}

static int rm_free(int fd, uint32_t client, uint32_t obj)
{
	struct vgpu_rm_free m = { .h_client = client, .h_object = obj };
	struct rm_rsp r;

	return rm_call(fd, VGPU_RM_OP_FREE, &m, sizeof(m), &r);
}

/* A DUP of @src_client's memory @src under @client's DEVICE @parent: the RM status, the new
 * handle in *@h. */
static int rm_dup(int fd, uint32_t client, uint32_t parent, uint32_t src_client, uint32_t src,
		  uint32_t *h)
{
	struct vgpu_rm_dup m = { .h_client = client, .h_parent = parent,
				 .h_client_src = src_client, .h_object_src = src };
	struct rm_rsp r;
	int ret = rm_call(fd, VGPU_RM_OP_DUP, &m, sizeof(m), &r);

	if (!ret)
		*h = r.r.handle;
	return ret;
}

/* A client with a DEVICE and a SUBDEVICE: what quota controls and memory need. */
struct ctx {
	uint32_t client, device, subdevice;
};

static bool ctx_make(int fd, struct ctx *c)
{
	int ret = rm_client(fd, &c->client);

	if (!ret)
		ret = rm_alloc(fd, c->client, c->client, VGPU_RM_CLASS_DEVICE, NULL, 0, &c->device);
	if (!ret)
		ret = rm_alloc(fd, c->client, c->device, VGPU_RM_CLASS_SUBDEVICE, NULL, 0,
			       &c->subdevice);
	CHECK(!ret, "RM context: %d", ret);
	return true;
}

/* RM clients of this VF now (every file's, the host's count). */
static int clients_used(int fd, const struct ctx *c)
{
	struct {
		struct vgpu_rm_control c;
		struct vgpu_rm_quota_info q;
	} m;
	struct rm_rsp r;
	int ret;

	memset(&m, 0, sizeof(m));
	m.c.h_client = c->client;
	m.c.h_object = c->subdevice;
	m.c.cmd = VGPU_RM_CTRL_GET_QUOTA;
	m.c.params_len = sizeof(m.q);
	ret = rm_call(fd, VGPU_RM_OP_CONTROL, &m, sizeof(m), &r);
	if (ret)
		return ret;
	return (int)((struct vgpu_rm_quota_info *)r.params)->client_used;
}

/* VRAM of @size bytes under @c, contiguous (the driver maps nothing else larger than a page):
 * its handle and VF-physical (= BAR2) offset. */
static int vidmem(int fd, const struct ctx *c, uint64_t size, uint32_t *h, uint64_t *off)
{
	struct vgpu_rm_vidmem_params p = { .size = size, .page_size = 64 << 10,
					   .flags = VGPU_RM_MEM_CONTIGUOUS };
	int ret = rm_alloc(fd, c->client, c->device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p, sizeof(p), h);

	*off = p.addr;
	return ret;
}

/* DMA memory of @size bytes under @c: its handle, its parameters (offset) in *@p. */
static int sysmem(int fd, const struct ctx *c, uint64_t size, uint32_t *h,
		  struct vgpu_rm_sysmem_params *p)
{
	*p = (struct vgpu_rm_sysmem_params){ .size = size };
	return rm_alloc(fd, c->client, c->device, VGPU_RM_CLASS_MEMORY_SYSMEM, p, sizeof(*p), h);
}

/* ---- touching pages: SIGBUS is the answer for a page the file may not see ---- */

static sigjmp_buf bus_jmp;

static void on_bus(int sig)
{
	(void)sig;
	siglongjmp(bus_jmp, 1);
}

/* 0 if the access went through, 1 if it raised SIGBUS. */
static int touch(volatile uint8_t *p, bool write)
{
	struct sigaction sa = { .sa_handler = on_bus }, old;
	int bus;

	sigaction(SIGBUS, &sa, &old);
	if (sigsetjmp(bus_jmp, 1) == 0) {
		if (write)
			*p = 0x5a;
		else
			(void)*p;
		bus = 0;
	} else {
		bus = 1;
	}
	sigaction(SIGBUS, &old, NULL);
	return bus;
}

/* ---- cases ---- */

static bool t_info(void)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	int fd = open_dev(), ret;

	CHECK(fd >= 0, "no device");
	ret = xioctl(fd, VGPU_VF_IOC_INFO, &in);
	close(fd);
	CHECK(!ret, "INFO: %s", strerror(-ret));
	CHECK(in.uapi_version >> 16 == VGPU_VF_UAPI_MAJOR, "uapi %#x", in.uapi_version);
	CHECK(in.nr_vectors == VGPU_VF_NR_VECTORS, "%u vectors", in.nr_vectors);
	CHECK(in.bar_size && !(in.bar_size & (in.bar_size - 1)), "BAR2 of %llu bytes",
	      (unsigned long long)in.bar_size);
	CHECK(in.open_files == 1, "%u files open, this one alone expected", in.open_files);
	printf("# VF %u, BAR2 %llu MiB, interrupts mbox %llu event %llu gpu %llu\n", in.vf_id,
	       (unsigned long long)(in.bar_size >> 20), (unsigned long long)in.irq_count[0],
	       (unsigned long long)in.irq_count[1], (unsigned long long)in.irq_count[2]);
	return true;
}

static bool t_sizes(int fd)
{
	struct vgpu_vf_ioc_info in = { .size = 8 };
	struct vgpu_vf_ioc_wait w = { .size = sizeof(w), .vector = 9 };
	struct vgpu_vf_ioc_notify n = { .size = sizeof(n), .vector = VF_VEC_EVENT };
	struct vgpu_vf_ioc_mbox m = { .size = sizeof(m), .type = VF_MSG_PING,
				      .req_len = VF_MSG_MAX_PAYLOAD + 1 };
	char small[8] = { 0 };
	int ret;

	ret = xioctl(fd, VGPU_VF_IOC_INFO, &in);
	CHECK(ret == -EINVAL, "INFO with size field 8: %d, -EINVAL expected", ret);
	ret = xioctl(fd, _IOWR(VGPU_VF_IOC_TYPE, 1, char[8]), small);
	CHECK(ret == -EINVAL, "INFO encoded with 8 bytes: %d, -EINVAL expected", ret);
	ret = xioctl(fd, _IOWR(VGPU_VF_IOC_TYPE, 99, struct vgpu_vf_ioc_info), &in);
	CHECK(ret == -ENOTTY, "unknown ioctl: %d, -ENOTTY expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &m);
	CHECK(ret == -EINVAL, "MBOX past the slot: %d, -EINVAL expected", ret);
	m.req_len = 0;
	m.type = 77;
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &m);
	CHECK(ret == -EINVAL, "MBOX of an unknown type: %d, -EINVAL expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_WAIT, &w);
	CHECK(ret == -EINVAL, "WAIT on vector 9: %d, -EINVAL expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_NOTIFY, &n);
	CHECK(ret == -EINVAL, "NOTIFY of the event vector: %d, -EINVAL expected", ret);
	return true;
}

static bool t_pointers(int fd)
{
	uint8_t buf[64] = { 0 };
	struct vgpu_vf_ioc_mbox m = { .size = sizeof(m), .type = VF_MSG_PING, .req_len = 16,
				      .req_ptr = 8, .rsp_ptr = (uintptr_t)buf, .rsp_cap = 64 };
	struct vgpu_vf_ioc_wait w = { .size = sizeof(w), .vector = VF_VEC_GPU };
	int ret;

	ret = xioctl(fd, VGPU_VF_IOC_INFO, NULL);
	CHECK(ret == -EFAULT, "INFO at NULL: %d, -EFAULT expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &m);
	CHECK(ret == -EFAULT, "MBOX with an unmapped request: %d, -EFAULT expected", ret);
	m.req_ptr = (uintptr_t)buf;
	m.rsp_ptr = 8;
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &m);
	CHECK(ret == -EFAULT, "MBOX with an unmapped reply buffer: %d, -EFAULT expected", ret);
	m.rsp_ptr = (uintptr_t)buf;
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &m);
	CHECK(!ret && !m.status && m.rsp_len == 16, "the same PING then: %d/%d/%u", ret, m.status,
	      m.rsp_len);
	ret = xioctl(fd, VGPU_VF_IOC_WAIT, &w);
	CHECK(ret == -ETIMEDOUT || ret == 0, "a zero-timeout WAIT: %d", ret);
	return true;
}

static bool t_foreign(void)
{
	int a = open_dev(), b = open_dev(), ret;
	struct ctx ca = { 0 };
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	bool ok = false;

	if (a < 0 || b < 0)
		goto out;
	if (!ctx_make(a, &ca))
		goto out;
	ret = rm_free(b, ca.client, ca.client);
	if (ret != VGPU_RM_ERR_NO_OBJECT) {
		fail("another file freeing client %#x: %d, -ENOENT expected", ca.client, ret);
		goto out;
	}
	ret = clients_used(b, &ca);
	if (ret != VGPU_RM_ERR_NO_OBJECT) {
		fail("another file's control on client %#x: %d, -ENOENT expected", ca.client, ret);
		goto out;
	}
	if (clients_used(a, &ca) < 1) {
		fail("the owner lost its client");
		goto out;
	}
	if (xioctl(b, VGPU_VF_IOC_INFO, &in) || in.rm_clients != 0 || in.open_files < 2) {
		fail("the other file holds %u clients, %u files open", in.rm_clients,
		     in.open_files);
		goto out;
	}
	ret = rm_free(a, ca.client, ca.client);
	ok = !ret || fail("the owner freeing its client: %d", ret);
out:
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
	return ok;
}

static bool t_mmap(int fd, const struct ctx *c)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	int other = open_dev();
	struct ctx co;
	uint32_t mine, theirs;
	uint64_t off_mine, off_theirs;
	volatile uint8_t *bar;
	const struct vf_bar_header *h;
	void *p;
	int ret;

	CHECK(other >= 0 && ctx_make(other, &co), "second file");
	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	/* One page: a writable private mapping of all BAR2 would be refused by the guest's
	 * memory accounting before the driver is asked. */
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(p == MAP_FAILED && errno == EINVAL, "a private mapping: %s, EINVAL expected",
	      p == MAP_FAILED ? strerror(errno) : "mapped");
	p = mmap(NULL, 2 * in.bar_size, PROT_READ, MAP_SHARED, fd, 0);
	CHECK(p == MAP_FAILED && errno == EINVAL, "a mapping past BAR2: %s, EINVAL expected",
	      p == MAP_FAILED ? strerror(errno) : "mapped");
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(bar != MAP_FAILED, "mmap of BAR2: %s", strerror(errno));
	h = (const struct vf_bar_header *)(bar + vf_bar_header_off(in.bar_size));
	CHECK(!touch((volatile uint8_t *)h, false) && h->magic == VF_BAR_MAGIC, "header unreadable");
	CHECK(touch((volatile uint8_t *)h + 64, true), "the header page took a write");
	ret = vidmem(other, &co, 64 << 10, &theirs, &off_theirs);
	CHECK(!ret, "VRAM for the other file: %d", ret);
	CHECK(touch(bar + off_theirs, false), "another file's VRAM was readable");
	ret = vidmem(fd, c, 64 << 10, &mine, &off_mine);
	CHECK(!ret, "VRAM: %d", ret);
	CHECK(!touch(bar + off_mine, true) && !touch(bar + off_mine + (60 << 10), false),
	      "own VRAM not accessible");
	CHECK(touch(bar + off_mine + (64 << 10), false) || off_mine + (64 << 10) == off_theirs,
	      "the page after own VRAM was readable");
	CHECK(!rm_free(fd, c->client, mine), "free own VRAM");
	CHECK(touch(bar + off_mine, false), "freed VRAM still mapped");
	munmap((void *)bar, in.bar_size);
	close(other);
	return true;
}

static int param_set(const char *name, const char *val, char *old, size_t old_len);

/* Whether process @pid sleeps in the driver's mmap_fault_delay_ms window (its wchan), waiting
 * for it as long as the process lives (the suite's own timeout bounds a hang). */
static bool in_fault_delay(pid_t pid)
{
	char path[64], buf[64];
	int st;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	for (;;) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[n] = '\0';
		if (strstr(buf, "msleep") || strstr(buf, "vvf_fault"))
			return true;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return false;
		usleep(1000);
	}
}

/* One round of t_mmap_race: a forked child (the same file, its own mapping) takes the first
 * touch of 64 KiB of VRAM, for a read or a write (@wr); once it sleeps between the driver's check
 * and its insert, this process frees the memory; then the child reads the page again. */
static bool mmap_race_once(int fd, const struct ctx *c, uint64_t bar_size, bool wr)
{
	uint8_t *bar = mmap(NULL, bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int go[2], st = 0, ret;
	bool in_window;
	uint64_t off;
	uint32_t h;
	pid_t pid;
	char ch;

	CHECK(bar != MAP_FAILED, "mmap of BAR2: %s", strerror(errno));
	ret = vidmem(fd, c, 64 << 10, &h, &off);
	CHECK(!ret && !pipe(go), "VRAM: %d", ret);
	pid = fork();
	if (pid == 0) {
		close(go[1]);
		touch(bar + off, wr);	/* in or refused: the FREE decides which */
		if (read(go[0], &ch, 1) != 1)
			_exit(3);
		_exit(touch(bar + off, false) ? 0 : 1);
	}
	close(go[0]);
	in_window = pid > 0 && in_fault_delay(pid);
	ret = rm_free(fd, c->client, h);
	if (pid > 0) {
		if (write(go[1], "f", 1) != 1)
			kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	close(go[1]);
	munmap(bar, bar_size);
	CHECK(pid > 0, "fork: %s", strerror(errno));
	CHECK(in_window, "the child's %s fault never reached the driver's delay",
	      wr ? "write" : "read");
	CHECK(!ret, "FREE during the child's fault: %d", ret);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "after the FREE the page the child's %s "
	      "faulted in was still %s (status %#x)", wr ? "write" : "read",
	      WIFEXITED(st) && WEXITSTATUS(st) == 1 ? "readable" : "there", st);
	return true;
}

/* A first touch of a memory object's page racing its FREE. The driver holds the file's lock
 * from its check to the insert (the test parameter mmap_fault_delay_ms widens that window
 * to a second), and the FREE zaps the object's pages under the same lock: either the page
 * is mapped before the zap and taken away, or the fault comes after and is refused. A page
 * inserted after the FREE would be memory the host may have given to another process. */
static bool t_mmap_race(int fd, const struct ctx *c)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	char old[32];
	bool ok;
	int ret;

	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	ret = param_set("mmap_fault_delay_ms", "1000", old, sizeof(old));
	CHECK(!ret, "mmap_fault_delay_ms=1000: %d", ret);
	ok = mmap_race_once(fd, c, in.bar_size, false) && mmap_race_once(fd, c, in.bar_size, true);
	param_set("mmap_fault_delay_ms", old, NULL, 0);
	return ok;
}

/* Whether process @pid sleeps in kernel function @fn now (its wchan). */
static bool wchan_is(pid_t pid, const char *fn)
{
	char path[64], buf[128];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : 0;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return strstr(buf, fn) != NULL;
}

/* Until process @pid exits (true, its status in *@st) or sleeps in @fn on 100 looks in a
 * row (false): what a waiter that never gets its lock looks like. */
static bool exits_or_sleeps_in(pid_t pid, const char *fn, int *st)
{
	int seen = 0;

	while (seen < 100) {
		if (waitpid(pid, st, WNOHANG) == pid)
			return true;
		seen = wchan_is(pid, fn) ? seen + 1 : 0;
		usleep(1000);
	}
	return false;
}

/* A file's lock can be held for as long as its mailbox call takes; nothing that every file
 * needs may wait behind it. A forked child holds the shared file's lock (a first touch in
 * mmap_fault_delay_ms's window, which lasts until the parameter is set to 0), a second one
 * asks INFO of that file and waits for its lock; meanwhile a third process must open and
 * close the device, which takes the VF's list of files: INFO must not hold that list while
 * it waits. Only then does this process end the window. */
static bool t_info_unnested(int fd, const struct ctx *c)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	pid_t holder = -1, info = -1, opener = -1;
	int st_h = -1, st_i = -1, st_o = -1;
	bool held = false, waits = false, opened = false;
	uint8_t *bar = MAP_FAILED;
	uint64_t off;
	char old[32];
	uint32_t h;
	int ret;

	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	CHECK(!vidmem(fd, c, 64 << 10, &h, &off), "VRAM");
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(bar != MAP_FAILED, "mmap: %s", strerror(errno));
	ret = param_set("mmap_fault_delay_ms", "600000", old, sizeof(old));
	CHECK(!ret, "mmap_fault_delay_ms=600000: %d", ret);
	holder = fork();
	if (holder == 0)
		_exit(touch(bar + off, false));
	held = holder > 0 && in_fault_delay(holder);
	if (held)
		info = fork();
	if (info == 0) {
		struct vgpu_vf_ioc_info i2 = { .size = sizeof(i2) };

		_exit(xioctl(fd, VGPU_VF_IOC_INFO, &i2) ? 1 : 0);
	}
	if (info > 0) {
		while (!wchan_is(info, "vvf_ioc_info") && waitpid(info, &st_i, WNOHANG) != info)
			usleep(1000);
		waits = wchan_is(info, "vvf_ioc_info");
	}
	if (waits)
		opener = fork();
	if (opener == 0) {
		int k = open(dev, O_RDWR | O_CLOEXEC);

		_exit(k >= 0 && !close(k) ? 0 : 1);
	}
	/* The holder cannot end before the window does: the open went through meanwhile. */
	if (opener > 0)
		opened = exits_or_sleeps_in(opener, "vvf_open", &st_o) &&
			 waitpid(holder, &st_h, WNOHANG) == 0;
	param_set("mmap_fault_delay_ms", old, NULL, 0);
	if (holder > 0 && st_h == -1)
		waitpid(holder, &st_h, 0);
	if (info > 0 && st_i == -1)
		waitpid(info, &st_i, 0);
	if (opener > 0 && st_o == -1)
		waitpid(opener, &st_o, 0);
	munmap(bar, in.bar_size);
	rm_free(fd, c->client, h);
	CHECK(held, "the first child's fault never reached the driver's delay (status %#x)", st_h);
	CHECK(waits, "the second child's INFO never waited for the file's lock (status %#x)",
	      st_i);
	CHECK(opened, "an open of the device waited for a file's lock held by its INFO");
	CHECK(WIFEXITED(st_o) && WEXITSTATUS(st_o) == 0, "open and close: status %#x", st_o);
	CHECK(WIFEXITED(st_i) && WEXITSTATUS(st_i) == 0, "the INFO: status %#x", st_i);
	CHECK(WIFEXITED(st_h) && WEXITSTATUS(st_h) == 0, "the first touch: status %#x", st_h);
	return true;
}

/* ---- memory another process freed ---- */

#define REUSE_SIZE	(1u << 20)
#define REUSE_WORD	0xa5c3e1f0u

/* Whether the @len bytes at @p are all zero. */
static bool all_zero(const volatile uint8_t *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* The first process: on a file of its own, REUSE_SIZE bytes of VRAM and of DMA memory filled
 * with REUSE_WORD through its mapping; it frees the VRAM, and its exit (the file's close)
 * the DMA memory. Their BAR2 offsets through @wfd; exit 0 if all went so. */
static int reuse_writer(int wfd)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	struct vgpu_rm_sysmem_params sp;
	const struct vf_bar_header *hdr;
	uint64_t off[2];
	uint32_t hv, hs;
	uint8_t *bar;
	struct ctx c;
	size_t i;
	int fd = open_dev();

	if (fd < 0 || xioctl(fd, VGPU_VF_IOC_INFO, &in) || !ctx_make(fd, &c) ||
	    vidmem(fd, &c, REUSE_SIZE, &hv, &off[0]) || sysmem(fd, &c, REUSE_SIZE, &hs, &sp))
		return 2;
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (bar == MAP_FAILED)
		return 2;
	hdr = (const struct vf_bar_header *)(bar + vf_bar_header_off(in.bar_size));
	off[1] = hdr->dma_off + sp.dma_offset;
	for (i = 0; i < REUSE_SIZE / 4; i++) {
		((volatile uint32_t *)(bar + off[0]))[i] = REUSE_WORD;
		((volatile uint32_t *)(bar + off[1]))[i] = REUSE_WORD;
	}
	if (rm_free(fd, c.client, hv) || write(wfd, off, sizeof(off)) != sizeof(off))
		return 2;
	return 0;
}

/* Allocations of REUSE_SIZE bytes of VRAM (@dma false) or DMA memory under @c until one
 * covers BAR2 offset @want (at most as many as the VF has room for), each read through
 * @bar: whether one covered it and all of them read zeros. Each is freed again. */
static bool reuse_reader(int fd, const struct ctx *c, uint8_t *bar, uint64_t dma_off,
			 bool dma, uint64_t want)
{
	struct vgpu_rm_sysmem_params sp;
	uint32_t h[512];
	bool hit = false, zero = true;
	uint64_t off;
	int n = 0, i;

	while (!hit && n < 512) {
		if (dma ? sysmem(fd, c, REUSE_SIZE, &h[n], &sp) :
			  vidmem(fd, c, REUSE_SIZE, &h[n], &off))
			break;
		if (dma)
			off = dma_off + sp.dma_offset;
		hit = want >= off && want - off < REUSE_SIZE;
		zero &= all_zero(bar + off, REUSE_SIZE);
		n++;
	}
	for (i = 0; i < n; i++)
		rm_free(fd, c->client, h[i]);
	CHECK(hit, "%s: no ALLOC of %d got the first process's range back", dma ? "DMA" : "VRAM",
	      n);
	CHECK(zero, "%s: a new object showed what another process left in it",
	      dma ? "DMA memory" : "VRAM");
	return true;
}

/* The host hands memory a FREE gave back inside the slice to the next ALLOC unscrubbed (only
 * a VF reset scrubs), so the driver zeroes every object a file allocates before the file
 * may map it. A first process fills VRAM and DMA memory with a pattern, frees the VRAM and
 * exits (so the DMA memory goes with its file); this process allocates the same sizes until
 * it gets those ranges back: it must read zeros, never the pattern. VRAM that is neither
 * contiguous nor a single page is not mappable (its pages need not follow its address). */
static bool t_reuse(void)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	struct vgpu_rm_vidmem_params p = { .size = 128 << 10, .page_size = 64 << 10 };
	const struct vf_bar_header *hdr;
	uint64_t off[2] = { 0, 0 };
	int pfd[2], st = -1, fd;
	uint8_t *bar;
	struct ctx c;
	uint32_t h;
	pid_t pid;
	bool ok;

	CHECK(!pipe(pfd), "pipe");
	pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		_exit(reuse_writer(pfd[1]));
	}
	close(pfd[1]);
	if (pid > 0 && read(pfd[0], off, sizeof(off)) != sizeof(off))
		off[0] = off[1] = 0;
	close(pfd[0]);
	if (pid > 0)
		waitpid(pid, &st, 0);
	CHECK(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the first process: %#x", st);
	fd = open_dev();
	CHECK(fd >= 0 && !xioctl(fd, VGPU_VF_IOC_INFO, &in) && ctx_make(fd, &c), "a new file");
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(bar != MAP_FAILED, "mmap: %s", strerror(errno));
	hdr = (const struct vf_bar_header *)(bar + vf_bar_header_off(in.bar_size));
	ok = reuse_reader(fd, &c, bar, hdr->dma_off, false, off[0]);
	ok = reuse_reader(fd, &c, bar, hdr->dma_off, true, off[1]) && ok;
	if (ok && rm_alloc(fd, c.client, c.device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p, sizeof(p), &h))
		ok = fail("128 KiB of VRAM in 64 KiB pages");
	else if (ok && !touch(bar + p.addr, false))
		ok = fail("VRAM not asked contiguous was mappable");
	munmap(bar, in.bar_size);
	close(fd);
	return ok;
}

/* A file that breaks its own rings (counters out of range, a request longer than its slot,
 * an unknown type) gets errors in its own replies, and the VF keeps serving every file. */
static bool t_broken_rings(int fd)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	struct vgpu_vf_ioc_notify nt = { .size = sizeof(nt), .vector = VF_VEC_MBOX };
	uint8_t req[16] = { 0 }, rsp[16];
	struct vgpu_vf_ioc_mbox m = { .size = sizeof(m), .type = VF_MSG_PING, .req_len = 16,
				      .req_ptr = (uintptr_t)req, .rsp_ptr = (uintptr_t)rsp,
				      .rsp_cap = 16 };
	const struct vf_bar_header *h;
	struct vgpu_ring_hdr *rq, *rs;
	struct vf_msg *slot, *r;
	int other = open_dev(), ret;
	uint32_t head, tail;
	uint8_t *bar;

	CHECK(other >= 0 && !xioctl(fd, VGPU_VF_IOC_INFO, &in), "second file");
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(bar != MAP_FAILED, "mmap");
	h = (const struct vf_bar_header *)(bar + vf_bar_header_off(in.bar_size));
	rq = (struct vgpu_ring_hdr *)(bar + h->req_off);
	rs = (struct vgpu_ring_hdr *)(bar + h->rsp_off);
	/* A head far past the tail: the driver starts the ring over, serves nothing. */
	rq->head = rq->tail + 1000;
	ret = xioctl(fd, VGPU_VF_IOC_NOTIFY, &nt);
	CHECK(!ret && rq->tail == rq->head, "a broken request ring: %d, tail %u head %u", ret,
	      rq->tail, rq->head);
	/* Two requests: one longer than its slot, one of an unknown type. */
	__atomic_store_n(&rs->tail, __atomic_load_n(&rs->head, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
	tail = rs->tail;
	for (int i = 0; i < 2; i++) {
		head = rq->head;
		slot = (struct vf_msg *)((uint8_t *)(rq + 1) +
					 (size_t)(head & (rq->nr_elems - 1)) * rq->elem_size);
		memset(slot, 0, sizeof(*slot));
		slot->type = i ? 99 : VF_MSG_PING;
		slot->seq = 500u + (uint32_t)i;
		slot->length = i ? 0 : 1u << 30;
		__atomic_store_n(&rq->head, head + 1, __ATOMIC_RELEASE);
	}
	ret = xioctl(fd, VGPU_VF_IOC_NOTIFY, &nt);
	CHECK(!ret && rs->head == tail + 2, "two bad requests: %d, %u replies", ret,
	      rs->head - tail);
	r = (struct vf_msg *)((uint8_t *)(rs + 1) + (size_t)(tail & (rs->nr_elems - 1)) * rs->elem_size);
	CHECK(r->seq == 500 && r->status == -EMSGSIZE, "reply to the long request: seq %u status %d",
	      r->seq, r->status);
	r = (struct vf_msg *)((uint8_t *)(rs + 1) +
			      (size_t)((tail + 1) & (rs->nr_elems - 1)) * rs->elem_size);
	CHECK(r->seq == 501 && r->status == -EOPNOTSUPP, "reply to type 99: seq %u status %d",
	      r->seq, r->status);
	/* A reply ring whose tail the process threw away: the driver starts it over. */
	rs->tail = rs->head + 5000;
	ret = xioctl(fd, VGPU_VF_IOC_NOTIFY, &nt);
	CHECK(!ret, "a broken reply ring: %d", ret);
	munmap(bar, in.bar_size);
	ret = xioctl(other, VGPU_VF_IOC_MBOX, &m);
	CHECK(!ret && !m.status, "another file's PING: %d/%d", ret, m.status);
	ret = xioctl(fd, VGPU_VF_IOC_MBOX, &m);
	CHECK(!ret && !m.status, "the same file's PING by ioctl: %d/%d", ret, m.status);
	close(other);
	return true;
}

static bool t_close_frees(int fd, const struct ctx *c)
{
	int before = clients_used(fd, c), during, after, a = open_dev(), i;
	uint32_t h;

	CHECK(before > 0 && a >= 0, "quota: %d", before);
	for (i = 0; i < 3; i++)
		CHECK(!rm_client(a, &h), "client %d", i);
	during = clients_used(fd, c);
	close(a);
	after = clients_used(fd, c);
	CHECK(during == before + 3 && after == before, "clients %d, %d with 3 more, %d after close",
	      before, during, after);
	return true;
}

/* A child with clients, VRAM mapped and the mailbox busy is SIGKILLed mid-call. */
static bool t_killed(int fd, const struct ctx *c)
{
	int before = clients_used(fd, c), during, after, pfd[2], st;
	char ready;
	pid_t pid;

	CHECK(before > 0 && !pipe(pfd), "quota: %d", before);
	pid = fork();
	if (pid == 0) {
		struct vgpu_vf_ioc_mbox m = { .size = sizeof(m), .type = VF_MSG_PING };
		struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
		int k = open_dev();
		struct ctx ck;
		uint32_t hm;
		uint64_t off;
		uint8_t *bar;

		if (k < 0 || !ctx_make(k, &ck) || xioctl(k, VGPU_VF_IOC_INFO, &in) ||
		    vidmem(k, &ck, 1 << 20, &hm, &off))
			_exit(1);
		bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, k, 0);
		if (bar == MAP_FAILED)
			_exit(1);
		memset(bar + off, 0xa5, 1 << 20);
		if (write(pfd[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			ioctl(k, VGPU_VF_IOC_MBOX, &m);
	}
	close(pfd[1]);
	CHECK(pid > 0 && read(pfd[0], &ready, 1) == 1, "the child did not get going");
	close(pfd[0]);
	during = clients_used(fd, c);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	after = clients_used(fd, c);
	CHECK(WIFSIGNALED(st), "the child was not killed");
	CHECK(during == before + 1 && after == before, "clients %d, %d with the child, %d after "
	      "it was killed", before, during, after);
	return true;
}

/* A child that keeps the VF's mailbox busy with PINGs on a file of its own (until killed, at
 * most 100,000 of them): the pid, or -1. */
static pid_t pinger(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct vgpu_vf_ioc_mbox p = { .size = sizeof(p), .type = VF_MSG_PING };
		int k = open_dev();

		for (int i = 0; k >= 0 && i < 100000; i++)
			ioctl(k, VGPU_VF_IOC_MBOX, &p);
		_exit(0);
	}
	return pid;
}

/* An RM call's timeout is never shorter than the driver's default, whatever the caller
 * asks: a call cut short still runs on the host, and what it made or freed would be out of
 * step with the file's records (a freed client still "owned", a made one never freed).
 * Clients made and freed with a 1 ns timeout while another process keeps the mailbox busy:
 * each call must get its answer, and none may be left behind. */
static bool t_rm_timeout(int fd, const struct ctx *c)
{
	int before = clients_used(fd, c), after, ret = 0, i = 0, st;
	struct vgpu_rm_free fr;
	struct vgpu_rm_msg m;
	struct rm_rsp r;
	pid_t pid;

	CHECK(before > 0, "quota: %d", before);
	pid = pinger();
	CHECK(pid > 0, "fork: %s", strerror(errno));
	for (i = 0; i < 500 && !ret; i++) {
		ret = rm_call_to(fd, VGPU_RM_OP_ALLOC_CLIENT, &m, sizeof(m), &r, 1);
		if (ret)
			break;
		fr = (struct vgpu_rm_free){ .h_client = r.r.handle, .h_object = r.r.handle };
		ret = rm_call_to(fd, VGPU_RM_OP_FREE, &fr, sizeof(fr), &r, 1);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	after = clients_used(fd, c);
	CHECK(!ret, "call %d with a 1 ns timeout: %d", i, ret);
	CHECK(after == before, "clients %d before, %d after", before, after);
	return true;
}

/* The first /dev/vgpu-vf<N> by VF number, or NULL. */
static const char *find_dev(void)
{
	static char path[64];
	const size_t plen = strlen(VGPU_VF_DEV_PREFIX);
	long best = -1, n;
	struct dirent *d;
	DIR *dir = opendir("/dev");
	char *end;

	while (dir && (d = readdir(dir))) {
		if (strncmp(d->d_name, VGPU_VF_DEV_PREFIX, plen))
			continue;
		n = strtol(d->d_name + plen, &end, 10);
		if (!*end && end != d->d_name + plen && n >= 0 && (best < 0 || n < best))
			best = n;
	}
	if (dir)
		closedir(dir);
	if (best < 0)
		return NULL;
	snprintf(path, sizeof(path), "/dev/" VGPU_VF_DEV_PREFIX "%ld", best);
	return path;
}

static int svm(int fd, uint32_t to, void *addr, uint64_t len, struct vgpu_vf_ioc_svm *a)
{
	*a = (struct vgpu_vf_ioc_svm){ .size = sizeof(*a), .to = to, .addr = (uintptr_t)addr,
				       .len = len };
	return xioctl(fd, VGPU_VF_IOC_SVM, a);
}

/* The kernel's HMM mirror of @n pages at @p: @vram of them in VRAM (each at a distinct
 * page-aligned VF-physical address inside BAR2), @present present. */
static bool mirror(int fd, void *p, size_t n, unsigned int vram, unsigned int present)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	uint64_t e[VGPU_VF_SVM_QUERY_MAX];
	struct vgpu_vf_ioc_svm_query q = { .size = sizeof(q), .addr = (uintptr_t)p,
					   .len = n * 4096, .out_ptr = (uintptr_t)e };
	size_t i;
	int ret;

	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	ret = xioctl(fd, VGPU_VF_IOC_SVM_QUERY, &q);
	CHECK(!ret, "SVM_QUERY: %s", strerror(-ret));
	CHECK(q.in_vram == vram && q.present == present, "%u in VRAM, %u present; %u and %u "
	      "expected", q.in_vram, q.present, vram, present);
	for (i = 0; i < n; i++) {
		uint64_t a = VGPU_VF_SVM_PAGE_ADDR(e[i]);

		if (!(e[i] & VGPU_VF_SVM_PAGE_VRAM))
			continue;
		CHECK(a % 4096 == 0 && a < in.bar_size, "page %zu at %#llx", i,
		      (unsigned long long)a);
		CHECK(!i || VGPU_VF_SVM_PAGE_ADDR(e[i - 1]) != a, "pages %zu and %zu at %#llx",
		      i - 1, i, (unsigned long long)a);
	}
	return true;
}

/* Process memory into VRAM and back with the kernel's migration: read and written in place
 * while there, shared by a forked child, freed by munmap; shared memory is refused. */
static bool t_svm(int fd)
{
	const size_t n = 1024, len = n * 4096;
	struct vgpu_vf_ioc_svm a;
	uint32_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *sh;
	uint64_t base;
	size_t i;
	pid_t pid;
	int ret, st;

	CHECK(p != MAP_FAILED, "mmap");
	for (i = 0; i < len / 4; i++)
		p[i] = (uint32_t)i * 2654435761u;
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a);
	CHECK(!ret, "to VRAM: %s", strerror(-ret));
	CHECK(a.migrated == n && a.vram_pages >= n, "%llu of %zu pages moved, %llu in VRAM",
	      (unsigned long long)a.migrated, n, (unsigned long long)a.vram_pages);
	base = a.vram_pages - n;
	for (i = 0; i < len / 4; i++)
		CHECK(p[i] == (uint32_t)i * 2654435761u, "word %zu changed in VRAM", i);
	CHECK(mirror(fd, p, VGPU_VF_SVM_QUERY_MAX, VGPU_VF_SVM_QUERY_MAX, VGPU_VF_SVM_QUERY_MAX),
	      "the mirror of pages in VRAM");
	for (i = 0; i < len / 4; i += 1024)
		p[i] = ~(uint32_t)i;
	pid = fork();
	if (pid == 0) {
		for (i = 0; i < len / 4; i += 1024)
			if (p[i] != ~(uint32_t)i)
				_exit(1);
		p[0] = 1;	/* copy on write: the parent must not see it */
		_exit(0);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child saw other data (%#x)", st);
	CHECK(p[0] == ~0u, "the child's write reached the parent");
	ret = svm(fd, VGPU_VF_SVM_TO_SYSTEM, p, len, &a);
	CHECK(!ret && a.migrated == n, "back: %d, %llu of %zu pages", ret,
	      (unsigned long long)a.migrated, n);
	CHECK(a.vram_pages == base, "%llu pages left in VRAM, %llu before",
	      (unsigned long long)a.vram_pages, (unsigned long long)base);
	for (i = 0; i < len / 4; i++)
		CHECK(p[i] == (i % 1024 ? (uint32_t)i * 2654435761u : ~(uint32_t)i),
		      "word %zu changed on the way back", i);
	CHECK(mirror(fd, p, VGPU_VF_SVM_QUERY_MAX, 0, VGPU_VF_SVM_QUERY_MAX),
	      "the mirror of pages back in system memory");
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, p, 16 * 4096, &a);
	CHECK(!ret && a.migrated == 16, "16 pages: %d, %llu", ret, (unsigned long long)a.migrated);
	munmap(p, len);
	ret = svm(fd, VGPU_VF_SVM_TO_SYSTEM, p, 4096, &a);
	CHECK(ret == -EFAULT, "an unmapped range: %d, -EFAULT expected", ret);
	CHECK(a.vram_pages == base, "munmap left %llu pages in VRAM, %llu before",
	      (unsigned long long)a.vram_pages, (unsigned long long)base);
	p = mmap(NULL, 64 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	CHECK(mirror(fd, p, 64, 0, 0), "the mirror of untouched memory");
	{
		uint64_t e[64];
		struct vgpu_vf_ioc_svm_query q = { .size = sizeof(q), .flags = VGPU_VF_SVM_FAULT,
						   .addr = (uintptr_t)p, .len = 64 * 4096,
						   .out_ptr = (uintptr_t)e };

		ret = xioctl(fd, VGPU_VF_IOC_SVM_QUERY, &q);
		CHECK(!ret && q.present == 64 && (e[63] & VGPU_VF_SVM_PAGE_WRITE),
		      "faulting 64 pages in: %d, %u present", ret, q.present);
	}
	munmap(p, 64 * 4096);
	sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(sh != MAP_FAILED, "mmap shared");
	memset(sh, 1, 4096);
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, sh, 4096, &a);
	munmap(sh, 4096);
	CHECK(ret == -EOPNOTSUPP, "shared memory: %d, -EOPNOTSUPP expected", ret);
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, (void *)4096, 4096, &a);
	CHECK(ret == -EFAULT, "unmapped: %d, -EFAULT expected", ret);
	CHECK(a.vram_pages == base, "%llu pages left in VRAM, %llu before",
	      (unsigned long long)a.vram_pages, (unsigned long long)base);
	return true;
}

/* The driver's function an SVM call waits in while svm_pause_round holds it (its wchan). */
#define SVM_PAUSE_FN	"vvf_svm_test_pause"

/* Wait until process @pid sleeps in kernel function @fn (its wchan): 1; or until it exits:
 * 0, its status in *@st. As long as either takes (the suite's own timeout bounds a hang). */
static int wchan_or_exit(pid_t pid, const char *fn, int *st)
{
	char path[64], buf[128];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	for (;;) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : 0;
		if (fd >= 0)
			close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if (strstr(buf, fn))
			return 1;
		if (waitpid(pid, st, WNOHANG) == pid)
			return 0;
		usleep(1000);
	}
}

/* The pool's pages in use (what an SVM call reports), or -1. */
static long long pool_in_use(int fd)
{
	struct vgpu_vf_ioc_svm a;
	int ret = svm(fd, VGPU_VF_SVM_TO_SYSTEM, (void *)4096, 4096, &a);

	return ret == -EFAULT ? (long long)a.vram_pages : -1;
}

/* How many of the @n pages at @p are in VRAM (the mirror), or -1. */
static long long in_vram(int fd, uint8_t *p, size_t n)
{
	uint64_t e[VGPU_VF_SVM_QUERY_MAX];
	long long got = 0;
	size_t i, k;

	for (i = 0; i < n; i += k) {
		struct vgpu_vf_ioc_svm_query q = { .size = sizeof(q), .out_ptr = (uintptr_t)e };

		k = n - i < VGPU_VF_SVM_QUERY_MAX ? n - i : VGPU_VF_SVM_QUERY_MAX;
		q.addr = (uintptr_t)p + i * 4096;
		q.len = k * 4096;
		if (xioctl(fd, VGPU_VF_IOC_SVM_QUERY, &q))
			return -1;
		got += q.in_vram;
	}
	return got;
}

/* A call that is killed stops before its next round of 64 pages. A forked child moves
 * 1,024 pages into VRAM that it shares copy on write with this process, which keeps them
 * mapped after the child is gone; svm_pause_round holds the call before its second round
 * until the child is SIGKILLed. Only the first round's pages may have moved: a call that
 * went on would move all 16 rounds' worth before it returned to die. */
static bool svm_killed(int fd)
{
	const size_t n = 1024, len = n * 4096;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vgpu_vf_ioc_svm a;
	long long moved;
	int ret, in = -1, st = 0;
	size_t i, bad = 0;
	char old[32];
	pid_t pid;

	CHECK(p != MAP_FAILED, "mmap");
	memset(p, 0x6b, len);
	ret = param_set("svm_pause_round", "2", old, sizeof(old));
	CHECK(!ret, "svm_pause_round=2: %d", ret);
	pid = fork();
	if (pid == 0)
		_exit(svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a) ? 1 : 0);
	if (pid > 0)
		in = wchan_or_exit(pid, SVM_PAUSE_FN, &st);
	if (in == 1) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	param_set("svm_pause_round", old, NULL, 0);
	moved = in_vram(fd, p, n);
	ret = svm(fd, VGPU_VF_SVM_TO_SYSTEM, p, len, &a);
	for (i = 0; i < len; i++)
		bad += p[i] != 0x6b;
	munmap(p, len);
	CHECK(pid > 0, "fork: %s", strerror(errno));
	CHECK(in == 1, "the child's call never waited before its second round (status %#x)", st);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the child ended with %#x", st);
	CHECK(moved == 64, "the killed call moved %lld pages into VRAM: only its first round's "
	      "64 may move", moved);
	CHECK(!ret && !bad, "back to system memory: %d, %zu bytes changed", ret, bad);
	return true;
}

/* A call into VRAM ends once the pool is full. A forked child moves 1 TiB, reserved and
 * never touched, into VRAM; the pool takes at most 128 rounds of 64 pages, and
 * svm_pause_round holds a call that reaches round 256 (instead of walking the rest, about
 * 4 million rounds of nothing). munmap (the child's exit) gives every page back. */
static bool svm_full_stops(int fd)
{
	struct vgpu_vf_ioc_svm *r = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	long long base = pool_in_use(fd), after;
	int ret, in = -1, st = 0;
	char old[32];
	pid_t pid;

	CHECK(r != MAP_FAILED && base >= 0, "mmap, the pool: %lld", base);
	ret = param_set("svm_pause_round", "256", old, sizeof(old));
	CHECK(!ret, "svm_pause_round=256: %d", ret);
	pid = fork();
	if (pid == 0) {
		void *big = mmap(NULL, 1ull << 40, PROT_NONE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (big == MAP_FAILED)
			_exit(2);
		_exit(svm(fd, VGPU_VF_SVM_TO_VRAM, big, 1ull << 40, r) ? 1 : 0);
	}
	if (pid > 0)
		in = wchan_or_exit(pid, SVM_PAUSE_FN, &st);
	if (in == 1) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	param_set("svm_pause_round", old, NULL, 0);
	after = pool_in_use(fd);
	CHECK(pid > 0, "fork: %s", strerror(errno));
	CHECK(in == 0, "the call went on past the full pool: it reached round 256");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "1 TiB into VRAM: the child ended with %#x",
	      st);
	CHECK(r->migrated && r->migrated + base == r->vram_pages &&
	      r->vram_pages <= (32 << 20) / 4096, "1 TiB into VRAM: %llu pages moved, %llu in "
	      "use, %lld before", (unsigned long long)r->migrated,
	      (unsigned long long)r->vram_pages, base);
	CHECK(after == base, "munmap of the 1 TiB left %lld pages in VRAM, %lld before", after,
	      base);
	munmap(r, 4096);
	return true;
}

/* A huge range never keeps a process in the SVM ioctl: it stops at a fatal signal and at a
 * full pool, each checked by the rounds it ran (svm_pause_round), not by time. */
static bool t_svm_stops(int fd)
{
	return svm_killed(fd) && svm_full_stops(fd);
}

#define OWNERS_MAX	64		/* processes the driver tracks as holding pool pages */

/* One process of t_svm_owners: a page of its own into VRAM through @fd, the result through
 * @res, then it lives until @hold reaches its end. */
static void owner_child(int fd, int res, int hold)
{
	uint8_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vgpu_vf_ioc_svm a;
	int ret = -ENOMEM;
	char ch;

	if (p != MAP_FAILED) {
		p[0] = 1;
		ret = svm(fd, VGPU_VF_SVM_TO_VRAM, p, 4096, &a);
		if (!ret && a.migrated != 1)
			ret = -EIO;
	}
	if (write(res, &ret, sizeof(ret)) != sizeof(ret) || read(hold, &ch, 1) < 0)
		_exit(1);
	_exit(0);
}

/* Fork one owner_child: its pid (-1 if none) and its result in *@ret. */
static pid_t owner_fork(int fd, const int *res, const int *hold, int *ret)
{
	pid_t pid = fork();

	if (pid == 0) {
		close(res[0]);
		close(hold[1]);
		owner_child(fd, res[1], hold[0]);
	}
	if (pid < 0 || read(res[0], ret, sizeof(*ret)) != sizeof(*ret))
		*ret = -ECHILD;
	return pid;
}

/* A reset must tell every process whose pages the pool holds, and the driver tracks at most
 * OWNERS_MAX of them: a process past that may not put pages into the pool (-EBUSY), and
 * one that is gone makes room. While this process keeps a page in the pool (so the table
 * is not emptied), processes each move one page of their own in until one is refused; one
 * of them exits, and the next process's page goes in. */
static bool t_svm_owners(int fd)
{
	uint8_t *mine = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
	pid_t kids[OWNERS_MAX + 8], extra = -1;
	int res[2], hold[2], n, m = 0, ok = 0, busy = -1, ret = 0, again = -1, st;
	struct vgpu_vf_ioc_svm a;

	CHECK(mine != MAP_FAILED && !pipe(res) && !pipe(hold), "mmap, pipes");
	mine[0] = 1;
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, mine, 4096, &a);
	CHECK(!ret, "a page of this process into VRAM: %d", ret);
	while (m < OWNERS_MAX + 8 && busy < 0) {
		kids[m] = owner_fork(fd, res, hold, &ret);
		if (kids[m] < 0)
			break;
		if (ret && ret != -EBUSY)
			busy = -2;
		else if (ret)
			busy = m;
		else
			ok++;
		m++;
	}
	/* One that holds a page exits: its entry may go. */
	if (busy > 0 && !kill(kids[0], SIGKILL) && waitpid(kids[0], &st, 0) == kids[0]) {
		kids[0] = -1;
		extra = owner_fork(fd, res, hold, &again);
	}
	close(hold[1]);
	for (n = 0; n < m; n++)
		if (kids[n] > 0)
			waitpid(kids[n], &st, 0);
	if (extra > 0)
		waitpid(extra, &st, 0);
	close(hold[0]);
	close(res[0]);
	close(res[1]);
	svm(fd, VGPU_VF_SVM_TO_SYSTEM, mine, 4096, &a);
	munmap(mine, 4096);
	CHECK(busy >= 0, "%d processes put pages into the pool (last result %d): at most %d may",
	      ok, ret, OWNERS_MAX);
	CHECK(ok < OWNERS_MAX, "%d processes besides this one hold pool pages", ok);
	CHECK(!again, "after one of them exited, a new process's page: %d", again);
	return true;
}

/* ---- the kernel-owned SVM address space: GPU work on plain process memory ---- */

#define SEM_OFF		256u		/* the channel's semaphore, after USERD in its memory */

/* One channel of a file's kernel address space, driven by hand: methods into its
 * pushbuffer room, a GP entry, GP_PUT into USERD, the token into the doorbell page. */
struct gch {
	int fd;
	uint8_t *bar;			/* the file's mapping of BAR2 */
	uint64_t bar_size;
	struct vgpu_vf_ioc_as_channel c;
	struct vgpu_doorbell_page *db;
	uint32_t put, sem;
};

static uint8_t *gch_mem(const struct gch *g)
{
	return g->bar + g->c.mmap_offset;
}

static struct vgpu_userd *gch_userd(const struct gch *g)
{
	return (struct vgpu_userd *)(gch_mem(g) + g->c.userd_off);
}

static int as_create(int fd)
{
	struct vgpu_vf_ioc_as_create a = { .size = sizeof(a) };

	return xioctl(fd, VGPU_VF_IOC_AS_CREATE, &a);
}

static int as_info(int fd, struct vgpu_vf_ioc_as_info *i)
{
	*i = (struct vgpu_vf_ioc_as_info){ .size = sizeof(*i) };
	return xioctl(fd, VGPU_VF_IOC_AS_INFO, i);
}

/* A channel on @fd's address space (made already) and the file's mapping of BAR2. */
static bool gch_open(int fd, struct gch *g)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	const struct vf_bar_header *h;
	int ret;

	memset(g, 0, sizeof(*g));
	g->fd = fd;
	g->c = (struct vgpu_vf_ioc_as_channel){ .size = sizeof(g->c), .gpfifo_entries = 64,
						.mem_size = 64 << 10 };
	ret = xioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &g->c);
	CHECK(!ret, "AS_CHANNEL: %s", strerror(-ret));
	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	g->bar_size = in.bar_size;
	g->bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(g->bar != MAP_FAILED, "mmap of BAR2: %s", strerror(errno));
	h = (const struct vf_bar_header *)(g->bar + vf_bar_header_off(in.bar_size));
	g->db = (struct vgpu_doorbell_page *)(g->bar + h->db_off);
	CHECK(g->c.gpu_va >= (1ull << 47) && g->c.pb_off < g->c.mem_size &&
	      !touch(gch_mem(g), false), "the channel's memory (GPU %#llx, pushbuffer at %u)",
	      (unsigned long long)g->c.gpu_va, g->c.pb_off);
	return true;
}

static void gch_close(struct gch *g)
{
	if (g->bar && g->bar != MAP_FAILED)
		munmap(g->bar, g->bar_size);
	g->bar = NULL;
}

static uint32_t *pb_put64(uint32_t *p, uint64_t v)
{
	*p++ = (uint32_t)v;
	*p++ = (uint32_t)(v >> 32);
	return p;
}

/* Run @ndw dwords of methods and a semaphore release after them; wait until the GPU
 * released it. 0, the channel's error (> 0), or -ETIMEDOUT. */
static int gch_run(struct gch *g, const uint32_t *m, uint32_t ndw)
{
	uint32_t *pb = (uint32_t *)(gch_mem(g) + g->c.pb_off), *p = pb, want = ++g->sem, err;
	volatile uint32_t *sem = (volatile uint32_t *)(gch_mem(g) + SEM_OFF);
	uint64_t *gp = (uint64_t *)(gch_mem(g) + g->c.gpfifo_off);
	struct vgpu_userd *u = gch_userd(g);
	struct vgpu_vf_ioc_notify n = { .size = sizeof(n), .vector = VF_VEC_GPU };
	int i;

	memcpy(p, m, ndw * 4);
	p += ndw;
	*p++ = VGPU_MTHD(VGPU_M_SEM_RELEASE, 5);
	p = pb_put64(p, g->c.gpu_va + SEM_OFF);
	p = pb_put64(p, want);
	*p++ = 0;
	gp[g->put] = vgpu_gp_entry(g->c.gpu_va + g->c.pb_off, (uint32_t)(p - pb));
	g->put = (g->put + 1) % g->c.gpfifo_entries;
	__atomic_store_n(&u->gp_put, g->put, __ATOMIC_RELEASE);
	if (vgpu_doorbell_write(g->db, g->c.token))
		xioctl(g->fd, VGPU_VF_IOC_NOTIFY, &n);
	/* TCG, and a fault serviced for every 64 KiB: generous, bounded. */
	for (i = 0; i < 60000; i++) {
		if (*sem == want)
			return 0;
		err = __atomic_load_n(&u->error, __ATOMIC_ACQUIRE);
		if (err)
			return (int)err;
		usleep(500);
	}
	return -ETIMEDOUT;
}

static int gpu_fill(struct gch *g, void *dst, uint64_t len, uint32_t v)
{
	uint32_t m[6] = { VGPU_MTHD(VGPU_M_FILL, 5) };

	pb_put64(pb_put64(m + 1, (uintptr_t)dst), len);
	m[5] = v;
	return gch_run(g, m, 6);
}

static int gpu_copy(struct gch *g, void *dst, const void *src, uint64_t len)
{
	uint32_t m[7] = { VGPU_MTHD(VGPU_M_COPY, 6) };

	pb_put64(pb_put64(pb_put64(m + 1, (uintptr_t)src), (uintptr_t)dst), len);
	return gch_run(g, m, 7);
}

static bool all_words(const void *p, size_t len, uint32_t v)
{
	const uint32_t *w = p;
	size_t i;

	for (i = 0; i < len / 4; i++)
		CHECK(w[i] == v, "word %zu is %#x, %#x expected", i, w[i], v);
	return true;
}

/* The bad-ioctl half: sizes, flags, one address space per file, channel geometry. */
static bool as_refusals(int fd)
{
	struct vgpu_vf_ioc_as_create a = { .size = 8 };
	struct vgpu_vf_ioc_as_channel c = { .size = sizeof(c), .gpfifo_entries = 3,
					    .mem_size = 64 << 10 };
	struct vgpu_vf_ioc_as_info i;
	int ret;

	ret = as_info(fd, &i);
	CHECK(ret == -ENOENT, "AS_INFO before AS_CREATE: %d, -ENOENT expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &c);
	CHECK(ret == -EINVAL, "AS_CHANNEL with 3 entries: %d, -EINVAL expected", ret);
	c.gpfifo_entries = 64;
	ret = xioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &c);
	CHECK(ret == -ENOENT, "AS_CHANNEL without an address space: %d, -ENOENT expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_AS_CREATE, &a);
	CHECK(ret == -EINVAL, "AS_CREATE with size field 8: %d, -EINVAL expected", ret);
	a = (struct vgpu_vf_ioc_as_create){ .size = sizeof(a), .flags = 1 };
	ret = xioctl(fd, VGPU_VF_IOC_AS_CREATE, &a);
	CHECK(ret == -EINVAL, "AS_CREATE with flags 1: %d, -EINVAL expected", ret);
	a = (struct vgpu_vf_ioc_as_create){ .size = sizeof(a), .addr = 4096, .len = 1ull << 47 };
	ret = xioctl(fd, VGPU_VF_IOC_AS_CREATE, &a);
	CHECK(ret == -EINVAL, "AS_CREATE past the process's addresses: %d, -EINVAL expected", ret);
	ret = xioctl(fd, VGPU_VF_IOC_AS_CREATE, NULL);
	CHECK(ret == -EFAULT, "AS_CREATE at NULL: %d, -EFAULT expected", ret);
	ret = as_create(fd);
	CHECK(!ret, "AS_CREATE: %s", strerror(-ret));
	ret = as_create(fd);
	CHECK(ret == -EEXIST, "a second AS_CREATE: %d, -EEXIST expected", ret);
	c.mem_size = 4096;
	ret = xioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &c);
	CHECK(ret == -EINVAL, "AS_CHANNEL with 4 KiB of memory: %d, -EINVAL expected", ret);
	return true;
}

/* In a child, on a file and address space of its own: a GPU write to an unmapped address
 * and one to read-only memory each cancel the faulting channel (USERD shows MMU_FAULT).
 * Exit status 0 if both did. */
static int as_bad_child(void)
{
	struct vgpu_vf_ioc_as_info i;
	struct gch g1, g2;
	void *ro, *gone;
	int fd = open_dev(), ret;

	if (fd < 0 || as_create(fd) || !gch_open(fd, &g1) || !gch_open(fd, &g2))
		return 10;
	gone = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ro = mmap(NULL, 64 << 10, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (gone == MAP_FAILED || ro == MAP_FAILED)
		return 11;
	munmap(gone, 64 << 10);
	ret = gpu_fill(&g1, gone, 4096, 1);
	if (ret != VGPU_CHAN_ERR_MMU_FAULT)
		return 12;
	ret = gpu_fill(&g2, ro, 4096, 1);
	if (ret != VGPU_CHAN_ERR_MMU_FAULT)
		return 13;
	if (as_info(fd, &i) || i.cancelled != 2)
		return 14;
	return 0;
}

/* A fresh private anonymous mapping of @size bytes that starts one page below a 2 MiB
 * boundary (the rest of a larger reservation unmapped), never touched; NULL if none. */
static uint8_t *res_below_2m(size_t size)
{
	const uintptr_t huge = 2 << 20;
	uint8_t *m = mmap(NULL, size + 2 * huge, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *r;

	if (m == MAP_FAILED)
		return NULL;
	r = (uint8_t *)((((uintptr_t)m + huge - 1) & ~(huge - 1)) + huge - 4096);
	munmap(m, r - m);
	munmap(r + size, m + size + 2 * huge - (r + size));
	return r;
}

/* GPU work on malloc'd and mmap'd memory with no map call: the GPU faults, the kernel
 * services (hmm_range_fault, migration into VRAM, PTEs, replay), the CPU checks; munmap and
 * fork's copy on write leave no stale GPU mapping; a bad address cancels only the channel
 * of the process that made it. */
static bool t_as(void)
{
	const size_t len = 64 << 10;
	struct vgpu_vf_ioc_as_info i0, i1;
	uint8_t *src, *dst, *p, *q, *res;
	int fd = open_dev(), ret, st, go[2];
	struct gch g;
	pid_t pid;
	size_t k;

	CHECK(fd >= 0 && as_refusals(fd), "refusals");
	CHECK(gch_open(fd, &g), "channel");
	/* FILL and COPY on malloc'd memory the CPU never touched / wrote. */
	dst = malloc(4 * len);
	src = malloc(len);
	CHECK(dst && src, "malloc");
	for (k = 0; k < len; k++)
		src[k] = (uint8_t)(k * 7 + 1);
	ret = gpu_fill(&g, dst, 4 * len, 0xa5a5a5a5u);
	CHECK(!ret, "FILL on malloc'd memory: %d", ret);
	CHECK(all_words(dst, 4 * len, 0xa5a5a5a5u), "FILL's result");
	ret = gpu_copy(&g, dst + len, src, len);
	CHECK(!ret, "COPY between malloc'd buffers: %d", ret);
	CHECK(!memcmp(dst + len, src, len), "COPY's result");
	CHECK(!as_info(fd, &i0), "AS_INFO");
	CHECK(i0.channels == 1 && i0.faults && i0.mapped >= (5 * len) / 4096 && i0.migrated &&
	      i0.replays && !i0.cancelled && !i0.lost, "after the first work: %u channels, "
	      "%llu faults, %llu mapped, %llu migrated, %llu replays, %llu cancelled",
	      i0.channels, (unsigned long long)i0.faults, (unsigned long long)i0.mapped,
	      (unsigned long long)i0.migrated, (unsigned long long)i0.replays,
	      (unsigned long long)i0.cancelled);
	/* munmap: the GPU must see the new memory at the old address, never the old pages.
	 * The range straddles a 2 MiB boundary (two last-level page tables) inside a fresh
	 * 4 MiB mapping that starts one page below a 2 MiB boundary: the boundary taken is
	 * the first one at least len past the start, so the range lies inside the mapping
	 * wherever the kernel put it. */
	res = res_below_2m(4 << 20);
	CHECK(res, "mmap");
	p = (uint8_t *)(((uintptr_t)res + len + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1)) -
	    len / 2;
	CHECK(p >= res + len / 2 && p + len <= res + (4 << 20), "%p..+%zu outside %p..+4 MiB",
	      (void *)p, len, (void *)res);
	ret = gpu_fill(&g, p, len, 0x11111111u);
	CHECK(!ret && all_words(p, len, 0x11111111u), "FILL on mmap'd memory: %d", ret);
	CHECK(!as_info(fd, &i0), "AS_INFO");
	munmap(p, len);
	CHECK(!as_info(fd, &i1), "AS_INFO");
	CHECK(i1.invalidated >= i0.invalidated + len / 4096, "munmap cleared %llu GPU PTEs",
	      (unsigned long long)(i1.invalidated - i0.invalidated));
	q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK(q == p, "mmap at the old address");
	memset(q, 0x77, len);
	ret = gpu_copy(&g, dst, q, len);
	CHECK(!ret && all_words(dst, len, 0x77777777u), "the GPU read stale pages after munmap "
	      "(%d)", ret);
	/* Migration: pages the GPU mapped go back to system memory (SVM ioctl); the CPU
	 * changes them there; the GPU must read the new data, not the old VRAM page. */
	{
		struct vgpu_vf_ioc_svm m;

		ret = svm(fd, VGPU_VF_SVM_TO_SYSTEM, q, len, &m);
		CHECK(!ret && m.migrated == len / 4096, "back to system memory: %d, %llu pages",
		      ret, (unsigned long long)m.migrated);
		memset(q, 0x66, len);
		ret = gpu_copy(&g, dst, q, len);
		CHECK(!ret && all_words(dst, len, 0x66666666u), "the GPU read stale pages after "
		      "a migration (%d)", ret);
	}
	memset(q, 0x77, len);
	/* fork: the child keeps what the GPU wrote before, the parent sees what it writes now. */
	CHECK(pipe(go) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		char c;

		close(go[1]);
		_exit(read(go[0], &c, 1) == 1 && all_words(q, len, 0x77777777u) ? 0 : 1);
	}
	close(go[0]);
	CHECK(pid > 0, "fork");
	ret = gpu_fill(&g, q, len, 0x22222222u);
	CHECK(!ret && all_words(q, len, 0x22222222u), "FILL after fork in the parent: %d", ret);
	CHECK(write(go[1], "x", 1) == 1, "pipe write");
	close(go[1]);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
	      "the child saw the parent's GPU write (copy on write broken): %#x", st);
	/* More than the VF's 32 MiB pool: the pool gives back pages the GPU mapped earlier. */
	{
		const size_t big = 48 << 20;
		uint8_t *b = malloc(big);

		CHECK(b, "malloc of %zu bytes", big);
		ret = gpu_fill(&g, b, big, 0x44444444u);
		CHECK(!ret && all_words(b, big, 0x44444444u), "FILL over 48 MiB: %d", ret);
		free(b);
		CHECK(!as_info(fd, &i1) && i1.evicted, "48 MiB with no page evicted");
	}
	/* A process killed while the kernel services its GPU faults: its address space goes
	 * with its file, and this one's runs on. */
	CHECK(pipe(go) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		struct gch k;
		uint8_t *b = malloc(16 << 20);
		int kfd = open_dev();

		close(go[0]);
		if (!b || kfd < 0 || as_create(kfd) || !gch_open(kfd, &k))
			_exit(1);
		if (write(go[1], "x", 1) != 1)
			_exit(1);
		gpu_fill(&k, b, 16 << 20, 1);	/* killed in here */
		_exit(2);
	}
	close(go[1]);
	{
		char c;

		CHECK(pid > 0 && read(go[0], &c, 1) == 1, "the child to be killed did not start");
	}
	close(go[0]);
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st), "the child ended with %#x", st);
	/* A bad address: another process's channels are cancelled, this one's runs on. */
	pid = fork();
	if (pid == 0)
		_exit(as_bad_child());
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork");
	CHECK(WIFEXITED(st) && !WEXITSTATUS(st), "bad addresses in the child: status %#x", st);
	ret = gpu_fill(&g, dst, len, 0x33333333u);
	CHECK(!ret && all_words(dst, len, 0x33333333u), "FILL after the child's faults: %d", ret);
	CHECK(!as_info(fd, &i1) && !i1.cancelled, "%llu channels of this process cancelled",
	      (unsigned long long)i1.cancelled);
	printf("# address space: %llu faults, %llu PTEs written, %llu pages moved into VRAM, "
	       "%llu given back by the full pool, %llu PTEs invalidated, %llu replays\n",
	       (unsigned long long)i1.faults, (unsigned long long)i1.mapped,
	       (unsigned long long)i1.migrated, (unsigned long long)i1.evicted,
	       (unsigned long long)i1.invalidated, (unsigned long long)i1.replays);
	munmap(res, 4 << 20);
	free(src);
	free(dst);
	gch_close(&g);
	close(fd);
	return true;
}

/* ---- per-file quotas and strict address spaces (module parameters) ---- */

#define PARAM_DIR	"/sys/module/vgpu_vf/parameters/"

/* Write @val into module parameter @name; its value before into @old (if not NULL). 0 or
 * -errno (the driver refuses a value out of range with -EINVAL). */
static int param_set(const char *name, const char *val, char *old, size_t old_len)
{
	char path[128];
	ssize_t n;
	int fd, ret = 0;

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (old) {
		n = read(fd, old, old_len - 1);
		old[n > 0 ? n : 0] = '\0';
		old[strcspn(old, "\n")] = '\0';
	}
	if (pwrite(fd, val, strlen(val), 0) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* The quota half run by a file opened under small limits: VRAM, DMA memory, channels and
 * clients each up to the limit, then -EDQUOT with nothing changed; a free gives it back. */
static bool quota_limits(int fd)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	struct vgpu_rm_sysmem_params sp;
	struct gch g1, g2;
	struct ctx c;
	uint32_t h1, h2, h3, hc;
	uint64_t off;
	int ret;

	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	CHECK(in.uapi_version >= (1u << 16 | 2) && in.vram_limit >= 50 << 20 &&
	      in.vram_limit < 72 << 20 && in.dma_limit == 1 << 20 &&
	      in.chan_limit == 2 && in.client_limit == 2 && !in.vram_used && !in.strict,
	      "limits: VRAM %llu, DMA %llu, %u channels, %u clients, strict %u",
	      (unsigned long long)in.vram_limit, (unsigned long long)in.dma_limit, in.chan_limit,
	      in.client_limit, in.strict);
	CHECK(ctx_make(fd, &c), "context");
	ret = vidmem(fd, &c, 32 << 20, &h1, &off);
	CHECK(!ret, "32 MiB of VRAM: %d", ret);
	ret = vidmem(fd, &c, 32 << 20, &h2, &off);
	CHECK(ret == -EDQUOT, "32 MiB more, past the file's %llu: %d, -EDQUOT expected",
	      (unsigned long long)in.vram_limit, ret);
	ret = vidmem(fd, &c, 8 << 20, &h2, &off);
	CHECK(!ret, "8 MiB more: %d", ret);
	ret = sysmem(fd, &c, 1 << 20, &h3, &sp);
	CHECK(!ret, "the file's 1 MiB of DMA memory: %d", ret);
	ret = sysmem(fd, &c, 64 << 10, &hc, &sp);
	CHECK(ret == -EDQUOT, "64 KiB more DMA memory: %d, -EDQUOT expected", ret);
	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in) && in.vram_used == 40 << 20 &&
	      in.dma_used == 1 << 20, "used: VRAM %llu, DMA %llu", (unsigned long long)in.vram_used,
	      (unsigned long long)in.dma_used);
	CHECK(!rm_free(fd, c.client, h3), "free the DMA memory");
	ret = sysmem(fd, &c, 64 << 10, &h3, &sp);
	CHECK(!ret, "DMA memory after a free: %d", ret);
	ret = rm_client(fd, &hc);
	CHECK(!ret, "the second client: %d", ret);
	ret = rm_client(fd, &hc);
	CHECK(ret == -EDQUOT, "a third client: %d, -EDQUOT expected", ret);
	/* The kernel's address space counts too: its 2 MiB of tables, each channel. */
	CHECK(!as_create(fd) && gch_open(fd, &g1) && gch_open(fd, &g2), "two channels");
	g1.c = (struct vgpu_vf_ioc_as_channel){ .size = sizeof(g1.c), .gpfifo_entries = 64,
						.mem_size = 64 << 10 };
	ret = xioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &g1.c);
	CHECK(ret == -EDQUOT, "a third channel: %d, -EDQUOT expected", ret);
	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in) && in.chan_used == 2 &&
	      in.vram_used == (40 << 20) + (2 << 20) + (128 << 10), "used: VRAM %llu, %u channels",
	      (unsigned long long)in.vram_used, in.chan_used);
	CHECK(!rm_free(fd, c.client, h1), "free 32 MiB");
	ret = vidmem(fd, &c, 32 << 20, &h1, &off);
	CHECK(!ret, "32 MiB again after the free: %d", ret);
	gch_close(&g1);
	gch_close(&g2);
	return true;
}

/* In a child (another process, a file of its own under the same limits): VRAM and DMA
 * memory while the parent's file is at its quota. Exit status 0 if both came. */
static int quota_other(void)
{
	struct vgpu_rm_sysmem_params sp;
	uint32_t hv, hs;
	uint64_t off;
	struct ctx c;
	int fd = open_dev();

	if (fd < 0 || !ctx_make(fd, &c))
		return 10;
	if (vidmem(fd, &c, 32 << 20, &hv, &off))
		return 11;
	return sysmem(fd, &c, 512 << 10, &hs, &sp) ? 12 : 0;
}

/* VRAM this file's quota counts now (INFO), or -1. */
static long long vram_used(int fd)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };

	return xioctl(fd, VGPU_VF_IOC_INFO, &in) ? -1 : (long long)in.vram_used;
}

/* A DUP of the file's own memory keeps it alive on the host after the original is freed,
 * so it counts like the original: a FREE of the original leaves the DUP charged, a DUP
 * past the file's quota is -EDQUOT. On a file of its own under t_quota's limits. */
static bool quota_dup(void)
{
	uint32_t a, b, d;
	uint64_t off;
	struct ctx c;
	int fd = open_dev(), ret;
	bool ok = false;

	if (fd < 0 || !ctx_make(fd, &c))
		return fail("a file for the DUP case");
	ret = vidmem(fd, &c, 16 << 20, &a, &off);
	if (ret) {
		fail("16 MiB of VRAM: %d", ret);
		goto out;
	}
	ret = rm_dup(fd, c.client, c.device, c.client, a, &d);
	if (ret || vram_used(fd) != 32 << 20) {
		fail("a DUP of 16 MiB: %d, %lld bytes counted, 32 MiB expected", ret,
		     vram_used(fd));
		goto out;
	}
	ret = rm_free(fd, c.client, a);
	if (ret || vram_used(fd) != 16 << 20) {
		fail("the original freed: %d, %lld bytes counted, the DUP's 16 MiB expected", ret,
		     vram_used(fd));
		goto out;
	}
	ret = rm_free(fd, c.client, d);
	if (ret || vram_used(fd) != 0) {
		fail("the DUP freed: %d, %lld bytes still counted", ret, vram_used(fd));
		goto out;
	}
	ret = vidmem(fd, &c, 40 << 20, &b, &off);
	if (ret) {
		fail("40 MiB of VRAM: %d", ret);
		goto out;
	}
	ret = rm_dup(fd, c.client, c.device, c.client, b, &d);
	if (ret != -EDQUOT || vram_used(fd) != 40 << 20) {
		fail("a DUP of 40 MiB past the file's quota: %d, -EDQUOT expected; %lld bytes "
		     "counted", ret, vram_used(fd));
		goto out;
	}
	ok = true;
out:
	close(fd);
	return ok;
}

/* SHARE @client's memory @obj with every client of the VF for DUP: the RM status. */
static int rm_share(int fd, uint32_t client, uint32_t obj)
{
	struct vgpu_rm_share m = { .h_client = client, .h_object = obj,
				   .access = VGPU_RM_ACCESS_DUP };
	struct rm_rsp r;

	return rm_call(fd, VGPU_RM_OP_SHARE, &m, sizeof(m), &r);
}

/* A DUP of another file's memory keeps it alive on the host whatever its owner frees, so it
 * counts for the file that holds the DUP too; else one file could pin without bound what
 * another allocates and frees. Two files under t_quota's limits (about 50 MiB of VRAM
 * each): the owner allocates 40 MiB and SHAREs it, the importer DUPs it (40 MiB counted),
 * the owner frees it (still counted), allocates and SHAREs 40 MiB again; a DUP of that too
 * would hold 80 MiB: -EDQUOT, until the importer frees the first DUP. */
static bool quota_dup_foreign(void)
{
	int o = open_dev(), i = open_dev(), ret;
	uint32_t a, b, d1, d2;
	struct ctx co, ci;
	uint64_t off;
	bool ok = false;

	if (o < 0 || i < 0 || !ctx_make(o, &co) || !ctx_make(i, &ci)) {
		fail("two files for the DUP case");
		goto out;
	}
	ret = vidmem(o, &co, 40 << 20, &a, &off);
	if (!ret)
		ret = rm_share(o, co.client, a);
	if (ret) {
		fail("the owner's 40 MiB of VRAM, shared: %d", ret);
		goto out;
	}
	ret = rm_dup(i, ci.client, ci.device, co.client, a, &d1);
	if (ret || vram_used(i) != 40 << 20) {
		fail("a DUP of another file's 40 MiB: %d, %lld bytes counted for it, 40 MiB "
		     "expected", ret, vram_used(i));
		goto out;
	}
	ret = rm_free(o, co.client, a);
	if (ret || vram_used(i) != 40 << 20 || vram_used(o) != 0) {
		fail("the owner freed it: %d, %lld bytes counted for the DUP, %lld for the owner",
		     ret, vram_used(i), vram_used(o));
		goto out;
	}
	ret = vidmem(o, &co, 40 << 20, &b, &off);
	if (!ret)
		ret = rm_share(o, co.client, b);
	if (ret) {
		fail("the owner's next 40 MiB, shared: %d", ret);
		goto out;
	}
	ret = rm_dup(i, ci.client, ci.device, co.client, b, &d2);
	if (ret != -EDQUOT || vram_used(i) != 40 << 20) {
		fail("a second DUP, 80 MiB held on a quota of about 50: %d, -EDQUOT expected; "
		     "%lld bytes counted", ret, vram_used(i));
		goto out;
	}
	ret = rm_free(i, ci.client, d1);
	if (ret || vram_used(i) != 0) {
		fail("the first DUP freed: %d, %lld bytes still counted", ret, vram_used(i));
		goto out;
	}
	ret = rm_dup(i, ci.client, ci.device, co.client, b, &d2);
	if (ret || vram_used(i) != 40 << 20) {
		fail("the second DUP after the first one's FREE: %d, %lld bytes counted", ret,
		     vram_used(i));
		goto out;
	}
	ok = true;
out:
	if (o >= 0)
		close(o);
	if (i >= 0)
		close(i);
	return ok;
}

/* A channel of the file's own on VASPACE @hv, its USERD at VF-physical @userd. */
static int own_channel(int fd, const struct ctx *c, uint32_t hv, uint64_t userd, uint32_t *h)
{
	struct vgpu_rm_channel_params cp = { .h_vaspace = hv, .gpfifo_va = 1 << 20,
					     .gpfifo_entries = 64, .userd_aper = VGPU_APER_VRAM,
					     .userd_addr = userd };

	return rm_alloc(fd, c->client, c->device, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp, sizeof(cp),
			h);
}

/* Channels used by the file (INFO), or -1. */
static int chans_used(int fd)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };

	return xioctl(fd, VGPU_VF_IOC_INFO, &in) ? -1 : (int)in.chan_used;
}

/* CHANNEL_BIND_VASPACE moves a channel to another VASPACE on the host: freeing the old one
 * no longer frees the channel, freeing the new one does. The file's channel count (and
 * with it file_channels=1) follows: the channel stays counted after the old VASPACE's
 * FREE, so a second channel is -EDQUOT, and it is given back with the new one's. */
static bool quota_rebind(void)
{
	struct {
		struct vgpu_rm_control c;
		struct vgpu_rm_bind_params b;
	} bind;
	struct {
		struct vgpu_rm_control c;
		struct vgpu_rm_token_params t;
	} tok;
	struct vgpu_rm_vaspace_params vp;
	uint32_t hm, v1, v2, v3, ch, ch2;
	struct rm_rsp r;
	char old[32];
	uint64_t pt;
	struct ctx c;
	int fd, ret;
	bool ok = false;

	ret = param_set("file_channels", "1", old, sizeof(old));
	CHECK(!ret, "file_channels=1: %d", ret);
	fd = open_dev();
	if (fd < 0 || !ctx_make(fd, &c)) {
		fail("a file for the rebind case");
		goto out_param;
	}
	/* Room for three root tables and a USERD; nothing runs on them. */
	ret = vidmem(fd, &c, 64 << 10, &hm, &pt);
	vp = (struct vgpu_rm_vaspace_params){ .pdb = pt };
	if (!ret)
		ret = rm_alloc(fd, c.client, c.device, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp), &v1);
	vp = (struct vgpu_rm_vaspace_params){ .pdb = pt + 4096 };
	if (!ret)
		ret = rm_alloc(fd, c.client, c.device, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp), &v2);
	if (!ret)
		ret = own_channel(fd, &c, v1, pt + 3 * 4096, &ch);
	if (ret || chans_used(fd) != 1) {
		fail("two VASPACEs and a channel on the first: %d, %d channels counted", ret,
		     chans_used(fd));
		goto out;
	}
	memset(&bind, 0, sizeof(bind));
	bind.c = (struct vgpu_rm_control){ .h_client = c.client, .h_object = ch,
					   .cmd = VGPU_RM_CTRL_CHANNEL_BIND_VASPACE,
					   .params_len = sizeof(bind.b) };
	bind.b.h_vaspace = v2;
	ret = rm_call(fd, VGPU_RM_OP_CONTROL, &bind, sizeof(bind), &r);
	if (ret) {
		fail("CHANNEL_BIND_VASPACE to the second VASPACE: %d", ret);
		goto out;
	}
	ret = rm_free(fd, c.client, v1);
	if (ret || chans_used(fd) != 1) {
		fail("the first VASPACE freed after the bind: %d, %d channels counted, the bound "
		     "channel's 1 expected", ret, chans_used(fd));
		goto out;
	}
	ret = own_channel(fd, &c, v2, pt + 4 * 4096, &ch2);
	if (ret != -EDQUOT) {
		fail("a second channel with the bound one alive: %d, -EDQUOT expected", ret);
		goto out;
	}
	ret = rm_free(fd, c.client, v2);
	if (ret || chans_used(fd) != 0) {
		fail("the second VASPACE freed: %d, %d channels still counted", ret,
		     chans_used(fd));
		goto out;
	}
	/* The host freed the channel with it: the handle is gone there too. */
	memset(&tok, 0, sizeof(tok));
	tok.c = (struct vgpu_rm_control){ .h_client = c.client, .h_object = ch,
					  .cmd = VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN,
					  .params_len = sizeof(tok.t) };
	ret = rm_call(fd, VGPU_RM_OP_CONTROL, &tok, sizeof(tok), &r);
	if (ret != VGPU_RM_ERR_NO_OBJECT) {
		fail("the channel's token after its VASPACE was freed: %d, -ENOENT expected", ret);
		goto out;
	}
	vp = (struct vgpu_rm_vaspace_params){ .pdb = pt + 2 * 4096 };
	ret = rm_alloc(fd, c.client, c.device, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp), &v3);
	if (!ret)
		ret = own_channel(fd, &c, v3, pt + 3 * 4096, &ch);
	if (ret || chans_used(fd) != 1) {
		fail("a channel again: %d, %d counted", ret, chans_used(fd));
		goto out;
	}
	ok = true;
out:
	if (fd >= 0)
		close(fd);
out_param:
	param_set("file_channels", old, NULL, 0);
	return ok;
}

/* The VF's VRAM and DMA memory sizes, from its BAR2 header. */
static bool vf_sizes(uint64_t *vram, uint64_t *dma)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	const struct vf_bar_header *h;
	int fd = open_dev();
	uint8_t *bar;

	CHECK(fd >= 0 && !xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	bar = mmap(NULL, in.bar_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(bar != MAP_FAILED, "mmap: %s", strerror(errno));
	h = (const struct vf_bar_header *)(bar + vf_bar_header_off(in.bar_size));
	*vram = h->vram_size;
	*dma = h->dma_size;
	munmap(bar, in.bar_size);
	return true;
}

static const char *const quota_params[] = { "file_vram_pct", "file_dma_pct", "file_channels",
					    "file_clients" };

/* Quotas: a file at its quota gets -EDQUOT, another process still allocates, closing the
 * file returns everything, and a parameter out of range is refused; DUPs count, of the
 * file's own memory and of another file's, and a channel bound to another VASPACE stays
 * counted until the host frees it. */
static bool t_quota(void)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	char old[4][32], vals[4][32];
	struct vgpu_vf_ioc_info v11 = { .size = VGPU_VF_INFO_SIZE_1_1, .strict = 77 };
	uint64_t vram = 0, dma = 0;
	int fd, ret, st, i;
	bool ok;
	pid_t pid;

	fd = open_dev();
	CHECK(fd >= 0 && !xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	close(fd);
	CHECK(!in.vram_limit && !in.dma_limit && !in.chan_limit && in.client_limit == 16 &&
	      !in.strict, "the defaults: VRAM %llu, DMA %llu, %u channels, %u clients, strict %u",
	      (unsigned long long)in.vram_limit, (unsigned long long)in.dma_limit, in.chan_limit,
	      in.client_limit, in.strict);
	CHECK(vf_sizes(&vram, &dma), "the VF's sizes");
	/* About 50 MiB of VRAM (10 % of a 512 MiB slice), 1 MiB of DMA memory, 2 channels,
	 * 2 clients. */
	CHECK(vram >= 128 << 20 && dma && (100ull << 20) % dma == 0, "VRAM of %llu bytes, DMA "
	      "memory of %llu", (unsigned long long)vram, (unsigned long long)dma);
	snprintf(vals[0], sizeof(vals[0]), "%llu",
		 (unsigned long long)((50ull << 20) * 100 / vram + 1));
	snprintf(vals[1], sizeof(vals[1]), "%llu", (unsigned long long)((100ull << 20) / dma));
	snprintf(vals[2], sizeof(vals[2]), "2");
	snprintf(vals[3], sizeof(vals[3]), "2");
	ret = param_set("file_vram_pct", "0", NULL, 0);
	CHECK(ret == -EINVAL, "file_vram_pct=0: %d, -EINVAL expected", ret);
	ret = param_set("file_clients", "17", NULL, 0);
	CHECK(ret == -EINVAL, "file_clients=17: %d, -EINVAL expected", ret);
	for (i = 0; i < 4; i++) {
		ret = param_set(quota_params[i], vals[i], old[i], sizeof(old[i]));
		CHECK(!ret, "%s=%s: %d", quota_params[i], vals[i], ret);
	}
	fd = open_dev();
	ok = fd >= 0 && quota_limits(fd);
	pid = ok ? fork() : -1;
	if (pid == 0)
		_exit(quota_other());
	ok = ok && pid > 0 && waitpid(pid, &st, 0) == pid;
	if (ok && !(WIFEXITED(st) && !WEXITSTATUS(st)))
		ok = fail("another process at the same time: status %#x", st);
	ok = ok && quota_dup() && quota_dup_foreign();
	if (fd >= 0)
		close(fd);
	for (i = 0; i < 4; i++)
		param_set(quota_params[i], old[i], NULL, 0);
	CHECK(ok, "quota");
	CHECK(quota_rebind(), "quota after CHANNEL_BIND_VASPACE");
	/* Closing gave everything back; a caller of uapi 1.1 still gets its INFO. */
	fd = open_dev();
	CHECK(fd >= 0 && !xioctl(fd, VGPU_VF_IOC_INFO, &in), "INFO");
	ret = xioctl(fd, _IOWR(VGPU_VF_IOC_TYPE, 1, uint8_t[VGPU_VF_INFO_SIZE_1_1]), &v11);
	close(fd);
	CHECK(!in.vram_used && !in.dma_used && !in.chan_used && !in.vram_limit &&
	      in.client_limit == 16,
	      "a new file: VRAM %llu, DMA %llu, %u channels used, %u clients allowed",
	      (unsigned long long)in.vram_used, (unsigned long long)in.dma_used, in.chan_used,
	      in.client_limit);
	CHECK(!ret && v11.open_files >= 1 && v11.strict == 77, "INFO of uapi 1.1: %d, %u files, "
	      "a field past its size %u", ret, v11.open_files, v11.strict);
	return true;
}

/* AS_MAP of @client/@handle at @va on @fd: 0 or -errno. */
static int as_map(int fd, uint32_t client, uint32_t handle, uint64_t va, uint64_t len)
{
	struct vgpu_vf_ioc_as_map m = { .size = sizeof(m), .client = client, .handle = handle,
					.gpu_va = va, .length = len };

	return xioctl(fd, VGPU_VF_IOC_AS_MAP, &m);
}

/* In a child: a VRAM object of its own, its client and handle sent to @wfd, then wait for
 * @rfd to close. */
static int strict_other(int wfd, int rfd)
{
	uint32_t h[2];
	uint64_t off;
	struct ctx c;
	char x;
	int fd = open_dev();

	if (fd < 0 || !ctx_make(fd, &c) || vidmem(fd, &c, 64 << 10, &h[1], &off))
		return 1;
	h[0] = c.client;
	if (write(wfd, h, sizeof(h)) != sizeof(h))
		return 2;
	return read(rfd, &x, 1) < 0 ? 3 : 0;
}

/* Refusals of a strict file: no VASPACE or channel of its own; AS_MAP's range checks and
 * another process's handle. */
static bool strict_refusals(int fd, const struct ctx *c, uint32_t hv, uint64_t va)
{
	struct vgpu_rm_vaspace_params vp = { 0 };
	struct vgpu_rm_channel_params cp = { .gpfifo_entries = 64 };
	uint32_t h, other[2];
	uint64_t off;
	int ret, go[2], back[2], st;
	pid_t pid;

	CHECK(!vidmem(fd, c, 64 << 10, &h, &off), "VRAM for page tables");
	vp.pdb = off;
	ret = rm_alloc(fd, c->client, c->device, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp), &h);
	CHECK(ret == -EPERM, "a VASPACE of its own: %d, -EPERM expected", ret);
	ret = rm_alloc(fd, c->client, c->device, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp, sizeof(cp), &h);
	CHECK(ret == -EPERM, "a channel of its own: %d, -EPERM expected", ret);
	ret = as_map(fd, c->client, hv, va, 0);
	CHECK(ret == -EEXIST, "a second mapping over the first: %d, -EEXIST expected", ret);
	ret = as_map(fd, c->client, hv, 1ull << 30, 0);
	CHECK(ret == -EINVAL, "a mapping inside the mirrored range: %d, -EINVAL expected", ret);
	ret = as_map(fd, c->client, hv, 1ull << 47, 0);
	CHECK(ret == -EINVAL, "a mapping in the channel window: %d, -EINVAL expected", ret);
	ret = as_map(fd, c->client, hv, (1ull << 48) - 4096, 0);
	CHECK(ret == -EINVAL, "a mapping past 2^48: %d, -EINVAL expected", ret);
	ret = as_map(fd, c->client, hv, va + (64 << 20) + 100, 0);
	CHECK(ret == -EINVAL, "an unaligned address: %d, -EINVAL expected", ret);
	ret = as_map(fd, c->client, 0xcaf0ffffu, va + (64 << 20), 0);
	CHECK(ret == -ENOENT, "a handle nobody has: %d, -ENOENT expected", ret);
	CHECK(!pipe(go) && !pipe(back), "pipe");
	pid = fork();
	if (pid == 0) {
		close(go[0]);
		close(back[1]);
		_exit(strict_other(go[1], back[0]));
	}
	close(go[1]);
	close(back[0]);
	CHECK(pid > 0 && read(go[0], other, sizeof(other)) == sizeof(other), "the other process");
	ret = as_map(fd, other[0], other[1], va + (64 << 20), 0);
	close(back[1]);
	close(go[0]);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st), "the other "
	      "process: %#x", st);
	CHECK(ret == -ENOENT, "another process's memory: %d, -ENOENT expected", ret);
	return true;
}

/* strict_as: a file may not build page tables; its GPU work runs on the kernel's address
 * space, on its own VRAM and DMA memory mapped there by AS_MAP; unmapping or freeing the
 * memory takes it away from the GPU. */
static bool strict_file(int fd)
{
	const uint64_t va = (1ull << 47) + (1ull << 30), va2 = va + (16 << 20);
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	struct vgpu_vf_ioc_as_unmap um = { .size = sizeof(um), .gpu_va = va };
	struct vgpu_rm_sysmem_params sp;
	struct gch g, g2, g3;
	struct ctx c;
	uint32_t hv, hs;
	uint64_t off;
	const struct vf_bar_header *h;
	int ret;

	CHECK(!xioctl(fd, VGPU_VF_IOC_INFO, &in) && in.strict == 1, "INFO: strict %u", in.strict);
	CHECK(ctx_make(fd, &c) && !as_create(fd) && gch_open(fd, &g), "context, address space");
	CHECK(!vidmem(fd, &c, 1 << 20, &hv, &off), "1 MiB of VRAM");
	CHECK(!sysmem(fd, &c, 64 << 10, &hs, &sp), "64 KiB of DMA memory");
	ret = as_map(fd, c.client, hv, va, 0);
	CHECK(!ret, "AS_MAP of its VRAM: %s", strerror(-ret));
	ret = as_map(fd, c.client, hs, va2, 0);
	CHECK(!ret, "AS_MAP of its DMA memory: %s", strerror(-ret));
	CHECK(strict_refusals(fd, &c, hv, va), "refusals");
	ret = gpu_fill(&g, (void *)(uintptr_t)va, 1 << 20, 0x5eed5eedu);
	CHECK(!ret, "FILL of mapped VRAM: %d", ret);
	CHECK(all_words(g.bar + off, 1 << 20, 0x5eed5eedu), "FILL's result in VRAM");
	ret = gpu_copy(&g, (void *)(uintptr_t)va2, (void *)(uintptr_t)va, 64 << 10);
	CHECK(!ret, "COPY from VRAM into DMA memory: %d", ret);
	h = (const struct vf_bar_header *)(g.bar + vf_bar_header_off(g.bar_size));
	CHECK(all_words(g.bar + h->dma_off + sp.dma_offset, 64 << 10, 0x5eed5eedu),
	      "COPY's result in DMA memory");
	/* Unmapped, then freed: the GPU's next access to either cancels its channel. */
	CHECK(!xioctl(fd, VGPU_VF_IOC_AS_UNMAP, &um), "AS_UNMAP");
	ret = xioctl(fd, VGPU_VF_IOC_AS_UNMAP, &um);
	CHECK(ret == -ENOENT, "AS_UNMAP again: %d, -ENOENT expected", ret);
	CHECK(gch_open(fd, &g2) && gch_open(fd, &g3), "two more channels");
	ret = gpu_fill(&g2, (void *)(uintptr_t)va, 4096, 1);
	CHECK(ret == VGPU_CHAN_ERR_MMU_FAULT, "FILL after AS_UNMAP: %d, MMU_FAULT expected", ret);
	CHECK(!rm_free(fd, c.client, hs), "free the DMA memory");
	ret = gpu_fill(&g3, (void *)(uintptr_t)va2, 4096, 1);
	CHECK(ret == VGPU_CHAN_ERR_MMU_FAULT, "FILL after the free: %d, MMU_FAULT expected", ret);
	gch_close(&g);
	gch_close(&g2);
	gch_close(&g3);
	return true;
}

static bool t_strict(void)
{
	char old[32];
	bool ok;
	int fd, ret;

	ret = param_set("strict_as", "1", old, sizeof(old));
	CHECK(!ret, "strict_as=1: %d", ret);
	fd = open_dev();
	param_set("strict_as", old, NULL, 0);	/* the file keeps what it was opened with */
	ok = fd >= 0 && strict_file(fd);
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Keep 64 pages in VRAM until a signal comes (a reset's SIGBUS kills us by default). */
static int svm_hold(void)
{
	const size_t len = 64 * 4096;
	struct vgpu_vf_ioc_svm a;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = open_dev(), ret;

	if (p == MAP_FAILED || fd < 0)
		return 2;
	memset(p, 0x3c, len);
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a);
	printf("# holding %llu pages in VRAM (%d)\n", (unsigned long long)a.migrated, ret);
	fflush(stdout);
	if (ret || a.migrated != 64)
		return 2;
	for (;;)
		pause();
}

/* ---- a reset that loses pages: their VRAM goes to no one else ---- */

#define LOSSY_PAGES	64
#define LOSSY_WORD	0xb0b5b0b5u	/* what the other process writes into its VRAM */

static volatile sig_atomic_t lossy_bus;

static void on_lossy_bus(int sig)
{
	(void)sig;
	lossy_bus = 1;
}

/* The VF-physical addresses of the @n pages at @p that are in VRAM into @addr: how many. */
static int vram_addrs(int fd, uint8_t *p, size_t n, uint64_t *addr)
{
	uint64_t e[LOSSY_PAGES];
	struct vgpu_vf_ioc_svm_query q = { .size = sizeof(q), .addr = (uintptr_t)p,
					   .len = n * 4096, .out_ptr = (uintptr_t)e };
	size_t i;
	int k = 0;

	if (n > LOSSY_PAGES || xioctl(fd, VGPU_VF_IOC_SVM_QUERY, &q))
		return -1;
	for (i = 0; i < n; i++)
		if (e[i] & VGPU_VF_SVM_PAGE_VRAM)
			addr[k++] = VGPU_VF_SVM_PAGE_ADDR(e[i]);
	return k;
}

/* Another process, after the reset: every byte of VRAM its own file can get (2 MiB pieces,
 * then 64 KiB ones), and LOSSY_WORD over each page of it that is at one of @addr (the lost
 * pages the holder still maps). How many such pages it got, or -1. */
static int lossy_other(const uint64_t *addr, int n)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	static const uint64_t piece[2] = { 2 << 20, 64 << 10 };
	int fd = open_dev(), got = 0, k, j;
	uint8_t *bar;
	struct ctx c;

	if (fd < 0 || xioctl(fd, VGPU_VF_IOC_INFO, &in) || !ctx_make(fd, &c))
		return -1;
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (bar == MAP_FAILED)
		return -1;
	for (k = 0; k < 2; k++) {
		for (;;) {
			struct vgpu_rm_vidmem_params p = { .size = piece[k], .page_size = piece[k],
							   .flags = VGPU_RM_MEM_CONTIGUOUS };
			uint32_t h;

			if (rm_alloc(fd, c.client, c.device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p,
				     sizeof(p), &h))
				break;
			for (j = 0; j < n; j++) {
				if (addr[j] < p.addr || addr[j] - p.addr >= p.size)
					continue;
				for (size_t w = 0; w < 4096 / 4; w++)
					((volatile uint32_t *)(bar + addr[j]))[w] = LOSSY_WORD;
				got++;
			}
		}
	}
	return got;	/* kept until the process exits: the holder reads meanwhile */
}

/* --svm-lossy: 64 pages migrated into VRAM through a reset that loses them (reset_evict=0).
 * The reset's SIGBUS is caught, so this process keeps mapping the lost pages; after SIGUSR1
 * a child (another process, a file of its own) takes all the VRAM it can get and writes
 * LOSSY_WORD over every page of it where a lost page is: it must get none of them, and the
 * lost pages must not show its words (zeros, the old bytes or a SIGBUS, never another
 * process's data). 6 MiB of VRAM of this file's below the pool make the pool lie away from
 * where a first fit starts, so the driver must take that very range back after the reset.
 * Exit 0 if so, 1 if not, 2 if the setup failed. */
static int svm_lossy(void)
{
	struct sigaction sa = { .sa_handler = on_lossy_bus };
	const size_t len = LOSSY_PAGES * 4096;
	uint64_t addr[LOSSY_PAGES];
	int fd = open_dev(), sig, n, got = -1, st, go[2], done[2];
	struct vgpu_vf_ioc_svm a;
	size_t i, words = 0;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ctx c;
	sigset_t set;
	uint64_t off;
	uint32_t h;
	pid_t pid;

	sigaction(SIGBUS, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (p == MAP_FAILED || fd < 0 || !ctx_make(fd, &c) || vidmem(fd, &c, 6 << 20, &h, &off))
		return 2;
	memset(p, 0x3c, len);
	if (svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a) || a.migrated != LOSSY_PAGES ||
	    vram_addrs(fd, p, LOSSY_PAGES, addr) != LOSSY_PAGES)
		return 2;
	printf("# holding %d pages in VRAM from %#llx, 6 MiB of VRAM at %#llx\n", LOSSY_PAGES,
	       (unsigned long long)addr[0], (unsigned long long)off);
	fflush(stdout);
	sigwait(&set, &sig);
	if (!lossy_bus) {
		printf("# no SIGBUS: the reset lost no page\n");
		return 1;
	}
	n = vram_addrs(fd, p, LOSSY_PAGES, addr);
	if (n < 0 || pipe(go) || pipe(done))
		return 2;
	pid = fork();
	if (pid == 0) {
		char ch;

		got = lossy_other(addr, n);
		if (write(done[1], &got, sizeof(got)) != sizeof(got) || read(go[0], &ch, 1) != 1)
			_exit(3);
		_exit(0);
	}
	if (pid < 0 || read(done[0], &got, sizeof(got)) != sizeof(got))
		got = -1;
	for (i = 0; i < len / 4; i++)
		words += ((volatile uint32_t *)p)[i] == LOSSY_WORD;
	if (pid > 0 && write(go[1], "g", 1) == 1)
		waitpid(pid, &st, 0);
	printf("# %d lost pages still in VRAM; the other process got %d of them; %zu words of "
	       "its pattern in the lost pages\n", n, got, words);
	return got == 0 && words == 0 ? 0 : 1;
}

/* ---- removing the device while a page cannot leave the pool ---- */

#define DRV_DIR		"/sys/bus/pci/drivers/vgpu_vf/"

/* The PCI address of the VF behind the device node ("0000:00:01.0") into @bdf. */
static bool dev_bdf(char *bdf, size_t len)
{
	const char *name = strrchr(dev, '/');
	char path[128], link[256];
	ssize_t n;

	snprintf(path, sizeof(path), "/sys/class/misc/%s/device", name ? name + 1 : dev);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	name = strrchr(link, '/');
	snprintf(bdf, len, "%s", name ? name + 1 : link);
	return true;
}

/* Write @val into the sysfs file @path: 0 or -errno. */
static int sysfs_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* The holder: 64 pages into VRAM through a file of its own, the first one spliced into the
 * pipe @spl (whose reference keeps the page from migrating until the pipe is read), "r" on
 * @ready, then it waits to be killed. */
static int remove_holder(int spl, int ready)
{
	const size_t len = 64 * 4096;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vgpu_vf_ioc_svm a;
	struct iovec iov = { .iov_base = p, .iov_len = 4096 };
	int fd = open_dev();

	if (p == MAP_FAILED || fd < 0)
		return 2;
	memset(p, 0x77, len);
	if (svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a) || a.migrated != 64 ||
	    vmsplice(spl, &iov, 1, 0) != 4096 || write(ready, "r", 1) != 1)
		return 2;
	for (;;)
		pause();
}

/* Removing the VF waits until every page of the SVM pool is free, and a page that cannot
 * migrate is freed only when its process lets go of it, maybe only after its next ioctl or
 * its close: remove must not keep the calls out meanwhile. A child holds a pool page that a
 * pipe references; the VF is unbound (remove), and while remove waits for that page, an
 * ioctl on this process's file must return -ENODEV. Then the page goes (the pipe read, its
 * process killed), remove ends, and the VF is bound again for what runs after. This
 * process's file (@fd) is dead afterwards. */
static bool t_remove(int fd)
{
	int spl[2], rdy[2], st_c = -1, st_u = -1, st_d = -1, bound;
	pid_t holder = -1, unbind = -1, call = -1;
	bool waits = false, through = false;
	char bdf[256], ch, buf[4096];

	CHECK(dev_bdf(bdf, sizeof(bdf)), "the VF's PCI address");
	CHECK(!pipe(spl) && !pipe(rdy), "pipes");
	holder = fork();
	if (holder == 0) {
		close(rdy[0]);
		close(spl[0]);
		_exit(remove_holder(spl[1], rdy[1]));
	}
	close(rdy[1]);
	close(spl[1]);
	if (holder > 0 && read(rdy[0], &ch, 1) == 1)
		unbind = fork();
	if (unbind == 0)
		_exit(sysfs_write(DRV_DIR "unbind", bdf) ? 1 : 0);
	if (unbind > 0)
		waits = wchan_or_exit(unbind, "memunmap_pages", &st_u) == 1;
	if (waits)
		call = fork();
	if (call == 0) {
		struct vgpu_vf_ioc_info in = { .size = sizeof(in) };

		_exit(xioctl(fd, VGPU_VF_IOC_INFO, &in) == -ENODEV ? 0 : 1);
	}
	/* Remove cannot end before the page goes: the call went through meanwhile. */
	if (call > 0)
		through = exits_or_sleeps_in(call, "vvf_ioctl", &st_d) &&
			  waitpid(unbind, &st_u, WNOHANG) == 0;
	/* Let the page go: the pipe's reference, then its process's mapping. */
	if (read(spl[0], buf, sizeof(buf)) != sizeof(buf))
		fail("reading the spliced page back");
	if (holder > 0) {
		kill(holder, SIGKILL);
		waitpid(holder, &st_c, 0);
	}
	if (unbind > 0 && st_u == -1)
		waitpid(unbind, &st_u, 0);
	if (call > 0 && st_d == -1)
		waitpid(call, &st_d, 0);
	close(spl[0]);
	close(rdy[0]);
	bound = sysfs_write(DRV_DIR "bind", bdf);
	if (!bound && access(dev, F_OK))
		bound = -ENOENT;
	CHECK(holder > 0 && unbind > 0, "the holder (status %#x) or the unbind never started",
	      st_c);
	CHECK(waits, "remove did not wait for the pool page (unbind: status %#x)", st_u);
	CHECK(through, "an ioctl waited while remove waited for a pool page");
	CHECK(WIFEXITED(st_d) && WEXITSTATUS(st_d) == 0, "the ioctl during remove was not "
	      "-ENODEV (status %#x)", st_d);
	CHECK(WIFEXITED(st_u) && WEXITSTATUS(st_u) == 0, "unbind: status %#x", st_u);
	CHECK(!bound, "binding the VF again: %s", strerror(-bound));
	return true;
}

/* ---- figures (not a test: nothing here is asserted) ---- */

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* @n samples: the median and the 99th percentile, sorted in place. */
static void pcts(double *v, int n, double *p50, double *p99)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	*p50 = v[n / 2];
	*p99 = v[n * 99 / 100];
}

/* PING round trips through the MBOX ioctl. */
static int bench_ioctl(int fd, double *v, int n)
{
	uint8_t req[64] = { 1 }, rsp[64];
	struct vgpu_vf_ioc_mbox m = { .size = sizeof(m), .type = VF_MSG_PING, .req_len = 64,
				      .req_ptr = (uintptr_t)req, .rsp_ptr = (uintptr_t)rsp,
				      .rsp_cap = 64 };

	for (int i = 0; i < n; i++) {
		double t0 = now_us();

		if (xioctl(fd, VGPU_VF_IOC_MBOX, &m) || m.status)
			return -1;
		v[i] = now_us() - t0;
	}
	return 0;
}

/* PING round trips as libvgpu-vf makes them: a slot in the file's own request ring,
 * NOTIFY on the mailbox vector, the reply taken from its own reply ring. */
static int bench_rings(int fd, double *v, int n)
{
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	struct vgpu_vf_ioc_notify nt = { .size = sizeof(nt), .vector = VF_VEC_MBOX };
	const struct vf_bar_header *h;
	struct vgpu_ring_hdr *rq, *rs;
	uint8_t *bar;
	int ret = -1;

	if (xioctl(fd, VGPU_VF_IOC_INFO, &in))
		return -1;
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (bar == MAP_FAILED)
		return -1;
	h = (const struct vf_bar_header *)(bar + vf_bar_header_off(in.bar_size));
	rq = (struct vgpu_ring_hdr *)(bar + h->req_off);
	rs = (struct vgpu_ring_hdr *)(bar + h->rsp_off);
	__atomic_store_n(&rs->tail, __atomic_load_n(&rs->head, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
	for (int i = 0; i < n; i++) {
		double t0 = now_us();
		uint32_t head = rq->head, tail = rs->tail;
		struct vf_msg *m = (struct vf_msg *)((uint8_t *)(rq + 1) +
				   (size_t)(head & (rq->nr_elems - 1)) * rq->elem_size);

		memset(m, 0, sizeof(*m) + 64);
		m->type = VF_MSG_PING;
		m->seq = (uint32_t)i;
		m->length = 64;
		__atomic_store_n(&rq->head, head + 1, __ATOMIC_RELEASE);
		if (xioctl(fd, VGPU_VF_IOC_NOTIFY, &nt) ||
		    __atomic_load_n(&rs->head, __ATOMIC_ACQUIRE) == tail)
			goto out;
		m = (struct vf_msg *)((uint8_t *)(rs + 1) +
				      (size_t)(tail & (rs->nr_elems - 1)) * rs->elem_size);
		if (m->seq != (uint32_t)i || m->status)
			goto out;
		__atomic_store_n(&rs->tail, tail + 1, __ATOMIC_RELEASE);
		v[i] = now_us() - t0;
	}
	ret = 0;
out:
	munmap(bar, in.bar_size);
	return ret;
}

/* The VF's ivshmem device in sysfs (vendor 1af4, device 1110), or -1. */
static int find_sysfs(char *dir, size_t len)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *e;
	char path[512], id[32];
	int found = -1;

	while (d && found < 0 && (e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/device", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(id, sizeof(id), f) && !strncmp(id, "0x1110", 6)) {
			snprintf(dir, len, "/sys/bus/pci/devices/%s", e->d_name);
			found = 0;
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/* Map sysfs resource @n of @dir whole: its address and size, or NULL. */
static void *map_resource(const char *dir, int n, uint64_t *size)
{
	char path[600];
	struct stat st;
	void *p;
	off_t end;
	int fd;

	snprintf(path, sizeof(path), "%s/resource%d", dir, n);
	fd = open(path, O_RDWR | O_SYNC | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	end = fstat(fd, &st) ? 0 : st.st_size;	/* sysfs gives the BAR's size */
	*size = end > 0 ? (uint64_t)end : 0;
	p = *size ? mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* PING round trips the polling way: the real rings in BAR2, the doorbell register rung
 * through BAR0, a spin on the reply ring's head. Needs the device unbound. */
static int bench_poll(void)
{
	enum { N = 2000 };
	static double v[N];
	char dir[300];
	uint64_t s0, s2;
	volatile uint32_t *bar0;
	uint8_t *bar2;
	const struct vf_bar_header *h;
	struct vgpu_ring_hdr *rq, *rs;
	double p50, p99;

	if (find_sysfs(dir, sizeof(dir)))
		return fprintf(stderr, "no VF device in sysfs\n"), 1;
	bar0 = map_resource(dir, 0, &s0);
	bar2 = map_resource(dir, 2, &s2);
	if (!bar0 || !bar2)
		return fprintf(stderr, "cannot map %s's BARs\n", dir), 1;
	h = (const struct vf_bar_header *)(bar2 + vf_bar_header_off(s2));
	if (h->magic != VF_BAR_MAGIC)
		return fprintf(stderr, "no VF magic\n"), 1;
	rq = (struct vgpu_ring_hdr *)(bar2 + h->req_off);
	rs = (struct vgpu_ring_hdr *)(bar2 + h->rsp_off);
	__atomic_store_n(&rs->tail, __atomic_load_n(&rs->head, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
	for (int i = 0; i < N; i++) {
		double t0 = now_us(), give_up = t0 + 5e6;
		uint32_t head = rq->head, tail = rs->tail;
		struct vf_msg *m = (struct vf_msg *)((uint8_t *)(rq + 1) +
				   (size_t)(head & (rq->nr_elems - 1)) * rq->elem_size);

		memset(m, 0, sizeof(*m) + 64);
		m->type = VF_MSG_PING;
		m->seq = 0x10000u + (uint32_t)i;
		m->length = 64;
		__atomic_store_n(&rq->head, head + 1, __ATOMIC_RELEASE);
		bar0[0x0c / 4] = h->host_peer << 16 | VF_VEC_MBOX;
		while (__atomic_load_n(&rs->head, __ATOMIC_ACQUIRE) == tail)
			if (now_us() > give_up)
				return fprintf(stderr, "no reply to ping %d\n", i), 1;
		__atomic_store_n(&rs->tail, tail + 1, __ATOMIC_RELEASE);
		v[i] = now_us() - t0;
	}
	pcts(v, N, &p50, &p99);
	printf("{\"poll_mbox_p50_us\": %.1f, \"poll_mbox_p99_us\": %.1f}\n", p50, p99);
	return 0;
}

static int bench(void)
{
	enum { N = 2000 };
	const size_t len = 16 << 20;
	static double v[N];
	double i50, i99, r50, r99, t0, to_vram, to_sys, cpy;
	struct vgpu_vf_ioc_svm a;
	uint8_t *p, *q;
	int fd = open_dev(), ret;

	if (fd < 0 || bench_ioctl(fd, v, N))
		return fail("mailbox by ioctl"), 1;
	pcts(v, N, &i50, &i99);
	if (bench_rings(fd, v, N))
		return fail("mailbox by the file's rings"), 1;
	pcts(v, N, &r50, &r99);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || q == MAP_FAILED)
		return 1;
	memset(p, 0x5a, len);
	memset(q, 0xa5, len);
	t0 = now_us();
	memcpy(q, p, len);
	cpy = now_us() - t0;
	t0 = now_us();
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a);
	to_vram = now_us() - t0;
	if (ret || a.migrated != len / 4096)
		return fprintf(stderr, "SVM to VRAM: %d, %llu pages\n", ret,
			       (unsigned long long)a.migrated), 1;
	t0 = now_us();
	ret = svm(fd, VGPU_VF_SVM_TO_SYSTEM, p, len, &a);
	to_sys = now_us() - t0;
	if (ret || a.migrated != len / 4096)
		return 1;
	printf("{\"kmod_mbox_ioctl_p50_us\": %.1f, \"kmod_mbox_ioctl_p99_us\": %.1f, "
	       "\"kmod_mbox_rings_p50_us\": %.1f, \"kmod_mbox_rings_p99_us\": %.1f, "
	       "\"svm_to_vram_gbps\": %.3f, \"svm_to_system_gbps\": %.3f, "
	       "\"guest_memcpy_gbps\": %.3f, \"svm_bytes\": %zu, \"round_trips\": %d}\n",
	       i50, i99, r50, r99, len / to_vram / 1e3, len / to_sys / 1e3, len / cpy / 1e3,
	       len, N);
	return 0;
}

/* BAR2's physical range from sysfs ("resource", third line), 0 on success. */
static int bar2_range(uint64_t *start, uint64_t *end)
{
	char dir[300], path[340], line[128];
	FILE *f;
	int i, ret = -1;

	if (find_sysfs(dir, sizeof(dir)))
		return -1;
	snprintf(path, sizeof(path), "%s/resource", dir);
	f = fopen(path, "r");
	for (i = 0; f && i < 3 && fgets(line, sizeof(line), f); i++)
		if (i == 2 && sscanf(line, "%" SCNx64 " %" SCNx64, start, end) == 2)
			ret = 0;
	if (f)
		fclose(f);
	return ret;
}

/* The type of the variable MTRR that covers @phys in /proc/mtrr ("uncachable",
 * "write-back", ...) into @out, or "default" when none does (the MTRR default type, which
 * /proc/mtrr does not show, applies), "none" without /proc/mtrr. */
static void bar2_mtrr(uint64_t phys, char *out, size_t len)
{
	FILE *f = fopen("/proc/mtrr", "r");
	char line[256], type[64];
	unsigned long long base, mb;

	snprintf(out, len, "%s", f ? "default" : "none");
	while (f && fgets(line, sizeof(line), f)) {
		/* reg01: base=0x080000000 ( 2048MB), size= 2048MB, count=1: uncachable */
		char *b = strstr(line, "base="), *s = strstr(line, "size="), *t = strrchr(line, ':');

		if (!b || !s || !t || sscanf(b, "base=%llx", &base) != 1 ||
		    sscanf(s, "size=%lluMB", &mb) != 1 || sscanf(t + 1, " %63s", type) != 1)
			continue;
		if (phys >= base && phys - base < (uint64_t)mb << 20)
			snprintf(out, len, "%s", type);
	}
	if (f)
		fclose(f);
}

/* The memory type the kernel's PAT code recorded for @phys (debugfs
 * x86/pat_memtype_list: what the driver's memremap of BAR2 got, and so what its user
 * mappings get), or "unknown". */
static void bar2_pat(uint64_t phys, char *out, size_t len)
{
	const char *list = "/sys/kernel/debug/x86/pat_memtype_list";
	char line[256], type[64];
	unsigned long long lo, hi;
	FILE *f;

	if (access(list, R_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	f = fopen(list, "r");
	snprintf(out, len, "unknown");
	while (f && fgets(line, sizeof(line), f))	/* PAT: [mem 0x...-0x...] write-back */
		if (sscanf(line, "PAT: [mem %llx-%llx] %63s", &lo, &hi, type) == 3 &&
		    phys >= lo && phys < hi)
			snprintf(out, len, "%s", type);
	if (f)
		fclose(f);
}

/* GB/s of one memset on @p (@write) or memcpy from @p into @buf; *@best keeps the best. */
static void bar_pass(uint8_t *p, uint8_t *buf, size_t len, bool write, double *best)
{
	double t0 = now_us(), gbps;

	if (write)
		memset(p, 0x5a, len);
	else
		memcpy(buf, p, len);
	gbps = len / (now_us() - t0) / 1e3;
	*best = gbps > *best ? gbps : *best;
}

/* BAR2 write and read bandwidth through the driver's mmap (16 MiB of this file's VRAM),
 * the same copies on ordinary guest memory as the baseline, and what decides BAR2's
 * cache attributes: the MTRR over it and the kernel's memory type. One JSON object. */
static int bench_bar(void)
{
	const size_t len = 16 << 20;
	struct vgpu_vf_ioc_info in = { .size = sizeof(in) };
	uint64_t start = 0, end = 0, off;
	char mtrr[64], pat[64];
	uint8_t *bar, *buf, *ram;
	double w = 0, r = 0, rw = 0, rr = 0;
	struct ctx c;
	uint32_t h;
	int fd = open_dev();

	if (fd < 0 || xioctl(fd, VGPU_VF_IOC_INFO, &in) || !ctx_make(fd, &c) ||
	    vidmem(fd, &c, len, &h, &off))
		return fprintf(stderr, "bench-bar: no VRAM: %s\n", why), 1;
	bar = mmap(NULL, in.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ram = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (bar == MAP_FAILED || buf == MAP_FAILED || ram == MAP_FAILED)
		return fprintf(stderr, "bench-bar: mmap: %s\n", strerror(errno)), 1;
	/* A first pass inserts the pages (one fault each): not part of the figures. */
	memset(bar + off, 0, len);
	memset(buf, 0, len);
	memset(ram, 0, len);
	/* Best of 5, BAR2 and guest memory in turns: a host busy for a while slows both. */
	for (int i = 0; i < 5; i++) {
		bar_pass(bar + off, buf, len, true, &w);
		bar_pass(ram, buf, len, true, &rw);
		bar_pass(bar + off, buf, len, false, &r);
		bar_pass(ram, buf, len, false, &rr);
	}
	bar2_range(&start, &end);
	bar2_mtrr(start, mtrr, sizeof(mtrr));
	bar2_pat(start, pat, sizeof(pat));
	printf("{\"bar2_phys\": \"0x%" PRIx64 "\", \"bar2_above_4g\": %s, \"bar2_mtrr\": \"%s\", "
	       "\"bar2_memtype\": \"%s\", \"bar2_write_gbps\": %.3f, \"bar2_read_gbps\": %.3f, "
	       "\"ram_write_gbps\": %.3f, \"ram_read_gbps\": %.3f, \"bar2_bench_bytes\": %zu}\n",
	       start, start >= (1ull << 32) ? "true" : "false", mtrr, pat, w, r, rw, rr, len);
	munmap(bar, in.bar_size);
	close(fd);
	return 0;
}

/* Migrate 64 pages into VRAM, let go of the device, and after SIGUSR1 check that the
 * pages kept their data (exit 0) or not (1); 2 if the migration failed. */
static int svm_evict(bool keep_open)
{
	const size_t len = 64 * 4096;
	struct vgpu_vf_ioc_svm a;
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *q = malloc(64 << 10);
	int fd = open_dev(), ret, sig;
	struct gch g;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (p == MAP_FAILED || fd < 0 || !q)
		return 2;
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 7 + 3);
	ret = svm(fd, VGPU_VF_SVM_TO_VRAM, p, len, &a);
	if (!keep_open)
		close(fd);
	/* Kept open: pages the GPU wrote through the kernel's address space are in the pool
	 * too, and the reset frees the address space. */
	if (keep_open && !ret && (as_create(fd) || !gch_open(fd, &g) ||
				  gpu_fill(&g, q, 64 << 10, 0x55555555u))) {
		printf("# the kernel's address space: %s\n", why);
		return 2;
	}
	printf("# holding %llu pages in VRAM (%d)\n", (unsigned long long)a.migrated, ret);
	fflush(stdout);
	if (ret || a.migrated != 64)
		return 2;
	sigwait(&set, &sig);
	for (size_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(i * 7 + 3)) {
			printf("# byte %zu lost\n", i);
			return 1;
		}
	if (keep_open) {
		struct vgpu_vf_ioc_as_channel c = { .size = sizeof(c), .gpfifo_entries = 64,
						    .mem_size = 64 << 10 };
		struct vgpu_vf_ioc_as_info i;

		if (!all_words(q, 64 << 10, 0x55555555u)) {
			printf("# the GPU's write lost: %s\n", why);
			return 1;
		}
		ret = xioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &c);
		if (as_info(fd, &i) || !i.lost || ret != -ENOLINK) {
			printf("# the address space after the reset: lost %u, AS_CHANNEL %d\n",
			       i.lost, ret);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ctx c;
	int fd;

	bool hold = argc > 1 && !strcmp(argv[1], "--svm-hold");
	bool figures = argc > 1 && !strcmp(argv[1], "--bench");
	bool bar_figures = argc > 1 && !strcmp(argv[1], "--bench-bar");

	if (argc > 1 && !strcmp(argv[1], "--bench-poll"))
		return bench_poll();
	if (argc > 1 && !strcmp(argv[1], "--svm-keep")) {
		dev = argc > 2 ? argv[2] : find_dev();
		return dev ? svm_evict(true) : 2;
	}
	if (argc > 1 && !strcmp(argv[1], "--svm-lossy")) {
		dev = argc > 2 ? argv[2] : find_dev();
		return dev ? svm_lossy() : 2;
	}
	if (argc > 1 && !strcmp(argv[1], "--svm-evict")) {
		dev = argc > 2 ? argv[2] : find_dev();
		return dev ? svm_evict(false) : 2;
	}
	if (hold || figures || bar_figures) {
		argc--;
		argv++;
	}
	dev = argc > 1 ? argv[1] : find_dev();
	if (!dev) {
		printf("1..1\nnot ok 1 - a /dev/" VGPU_VF_DEV_PREFIX "N device\n0 passed, 1 failed\n");
		return 1;
	}
	if (hold)
		return svm_hold();
	if (bar_figures)
		return bench_bar();
	if (figures) {
		int ret = bench();

		if (ret)
			fprintf(stderr, "vgpu-kmod-test --bench: %s\n", why[0] ? why : "failed");
		return ret;
	}
	printf("1..19\n");
	point(t_info(), "INFO: uapi, vectors, BAR2");
	fd = open_dev();
	point(fd >= 0 && t_sizes(fd), "wrong sizes, types and vectors are -EINVAL/-ENOTTY");
	point(fd >= 0 && t_pointers(fd), "unmapped pointers are -EFAULT and change nothing");
	point(t_foreign(), "another file's RM client is -ENOENT, its owner keeps it");
	point(t_reuse(), "VRAM and DMA memory another process freed read as zeros in a new "
	      "object; VRAM not contiguous is not mappable");
	point(fd >= 0 && t_broken_rings(fd), "a file that breaks its own rings gets errors, "
	      "the VF serves every file");
	if (fd < 0 || !ctx_make(fd, &c)) {
		point(false, "a file maps only its own memory");
		point(false, "a first touch racing a FREE never maps the freed memory");
		point(false, "INFO waiting for a file's lock keeps no other file waiting");
		point(false, "closing a file frees its RM clients");
		point(false, "a process killed mid-call leaves no RM client behind");
		point(false, "an RM call's timeout is never the caller's 1 ns");
		point(false, "SVM: process memory into VRAM and back");
		point(false, "SVM: a call stops once killed and once the pool is full");
		point(false, "SVM: at most 64 live processes hold pool pages");
		point(false, "SVM address space: GPU faults serviced by the kernel");
		point(false, "quotas per file");
		point(false, "strict_as");
		point(false, "remove waiting for a pool page lets the calls through");
	} else {
		point(t_mmap(fd, &c), "a file maps only its own memory");
		point(t_mmap_race(fd, &c), "a first touch racing a FREE never maps the freed "
		      "memory: a touch after the FREE is SIGBUS");
		point(t_info_unnested(fd, &c), "INFO waiting for a file's lock keeps no other "
		      "file waiting: open and close go on");
		point(t_close_frees(fd, &c), "closing a file frees its RM clients");
		point(t_killed(fd, &c), "a process killed mid-call leaves no RM client behind");
		point(t_rm_timeout(fd, &c), "an RM call's timeout is never the caller's 1 ns: "
		      "every call answered, no client left behind");
		point(t_svm(fd), "SVM: process memory into VRAM and back in place, its HMM mirror, "
		      "fork, munmap");
		point(t_svm_stops(fd), "SVM: a call stops at its next round once killed, and "
		      "once the pool is full");
		point(t_svm_owners(fd), "SVM: at most 64 live processes hold pool pages, the "
		      "next gets -EBUSY; one that exited makes room");
		point(t_as(), "SVM address space: GPU work on malloc'd memory, faults serviced "
		      "by the kernel, munmap, migration, fork, a full pool, a process killed "
		      "mid-fault, a bad address cancels one process's channel");
		point(t_quota(), "quotas per file: VRAM, DMA memory, channels and clients up to "
		      "the file's limit, then -EDQUOT; another process still allocates; closing "
		      "returns all; DUPs count; a rebound channel stays counted");
		point(t_strict(), "strict_as: no VASPACE or channel of a process's own; AS_MAP of "
		      "its VRAM and DMA memory, FILL and COPY on them; overlaps, ranges and "
		      "another process's handle refused; unmap and free take it from the GPU");
		point(t_remove(fd), "remove waiting for a pool page that cannot move lets the "
		      "calls through (-ENODEV); the VF bound again");
	}
	if (fd >= 0)
		close(fd);
	printf("%d passed, %d failed\n", npoint - nfail, nfail);
	return nfail ? 1 : 0;
}
