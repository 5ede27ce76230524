// SPDX-License-Identifier: MIT
/* The driver's attach path against a scripted endpoint written here from vgpu/vf_bar.h: the
 * ivshmem messages, the BAR2 header checks, the mailbox (sequence matching, host status
 * passed up unchanged, bounded wait), reset recovery and the ABI 2.3 negotiation (either
 * ivshmem peer layout as the header's host_peer says, our version in GET_INFO). Each row of the table is one host
 * behaviour; the bad ones must be refused with a clear error and leave nothing behind. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ring.h"
#include "vf_guest/vf_internal.h"
#include "vf_guest/vft/vft.h"
#include <vgpu/vf_bar.h>

#define BAR_SIZE	(2u << 20)
#define VRAM_SIZE	(512u << 10)
#define DMA_OFF		(512u << 10)
#define DMA_SIZE	(256u << 10)
#define CTRL_OFF	(BAR_SIZE - VF_BAR_CTRL_SIZE)
#define HDR_OFF		(BAR_SIZE - VF_BAR_HDR_SIZE)	/* ABI 2: BAR2's last page */
#define TEST_VF		3u

enum rsp_mode { RSP_NORMAL, RSP_LATE_FIRST, RSP_SILENT };

struct host_case {
	const char *name;
	int64_t proto;			/* message 1 */
	uint32_t abi;			/* header abi_version */
	uint64_t magic;
	uint64_t truncate_to;		/* BAR2 size actually sent (0: BAR_SIZE) */
	bool no_bar_fd;
	bool refuse;			/* close before message 1 */
	bool ring_outside;		/* req ring in the header page */
	uint64_t ctrl_off;		/* control area start (0: CTRL_OFF): a host may size it */
	uint32_t info_vf;		/* GET_INFO vf id (0: TEST_VF) */
	enum rsp_mode mode;
	uint64_t db_off;		/* minor-1 extension: doorbell page (0: none) */
	uint32_t host_peer;		/* minor 3: our peer id in the header and messages */
	bool id_zero;			/* message 2 gives the guest peer id 0 (master layout) */
	int want;			/* vgpu_vf_open() */
};

struct host {
	const struct host_case *c;
	char dir[64], path[128];
	int lsock, conn, bar_fd;
	uint8_t *bar;
	int to_host[VF_NR_VECTORS], to_guest[VF_NR_VECTORS];
	struct cmn_ring req, rsp, evt;
	pthread_t thr;
	atomic_int stop;
	uint32_t requests;
	atomic_uint announced;	/* the ABI a GET_INFO request carried, 0: none */
	uint32_t push_failed;	/* replies that did not fit: checked by the test thread */
};

static struct vf_bar_header *hdr(struct host *h)
{
	return (struct vf_bar_header *)(h->bar + HDR_OFF);
}

static void bar_format(struct host *h)
{
	struct vf_bar_header *x = hdr(h);
	const struct host_case *c = h->c;

	memset(x, 0, sizeof(*x));
	x->magic = c->magic ? c->magic : VF_BAR_MAGIC;
	x->abi_version = c->abi ? c->abi : VGPU_ABI_VERSION;
	x->header_size = VF_BAR_HDR_SIZE;
	x->vf_id = TEST_VF;
	x->state = VF_STATE_READY;
	x->nr_vectors = VF_NR_VECTORS;
	x->bar_size = BAR_SIZE;
	x->vram_size = VRAM_SIZE;
	x->dma_off = DMA_OFF;
	x->dma_size = DMA_SIZE;
	x->ctrl_off = c->ctrl_off ? c->ctrl_off : CTRL_OFF;
	x->req_off = c->ring_outside ? HDR_OFF : CTRL_OFF + VF_BAR_REQ_OFF;
	x->rsp_off = CTRL_OFF + VF_BAR_RSP_OFF;
	x->evt_off = CTRL_OFF + VF_BAR_EVT_OFF;
	x->ring_region_size = VF_BAR_RING_REGION;
	x->channels = 8;
	x->host_peer = c->host_peer;
	if (c->db_off) {
		x->db_off = c->db_off;
		x->dma_iova = 1ull << 32;
		x->nr_runlists = 2;
	}
	assert_int_equal(cmn_ring_format(h->bar + CTRL_OFF + VF_BAR_REQ_OFF, VF_BAR_RING_REGION,
					  VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE), 0);
	assert_int_equal(cmn_ring_format(h->bar + x->rsp_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS,
					  VF_MBOX_SLOT_SIZE), 0);
	assert_int_equal(cmn_ring_format(h->bar + x->evt_off, VF_BAR_RING_REGION, VF_EVT_SLOTS,
					  VF_EVT_SLOT_SIZE), 0);
	assert_int_equal(cmn_ring_attach(&h->req, h->bar + CTRL_OFF + VF_BAR_REQ_OFF,
					  VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&h->rsp, h->bar + x->rsp_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&h->evt, h->bar + x->evt_off, VF_BAR_RING_REGION), 0);
}

/* Send one message; false once the client hung up (it may refuse us halfway: no assert in
 * this thread, cmocka's checks belong to the test thread). */
static bool send_msg(int sock, int64_t v, int fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cb;
	struct iovec iov = { .iov_base = &v, .iov_len = sizeof(v) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		memset(&cb, 0, sizeof(cb));
		m.msg_control = cb.buf;
		m.msg_controllen = sizeof(cb.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &m, MSG_NOSIGNAL) == sizeof(v);
}

/* Serve one request: the reply the case calls for. */
static void serve(struct host *h, const struct vf_msg *q)
{
	uint8_t out[VF_MBOX_SLOT_SIZE];
	struct vf_msg *r = (struct vf_msg *)out;

	h->requests++;
	if (h->c->mode == RSP_SILENT && q->type != VF_MSG_GET_INFO)
		return;
	memset(out, 0, sizeof(out));
	r->type = q->type;
	r->seq = q->seq;
	switch (q->type) {
	case VF_MSG_PING:
		r->length = q->length <= VF_MSG_MAX_PAYLOAD ? q->length : 0;
		memcpy(r + 1, q + 1, r->length);
		break;
	case VF_MSG_GET_INFO: {
		struct vf_msg_info mi = { .vf_id = h->c->info_vf ? h->c->info_vf : TEST_VF,
					  .abi_version = VGPU_ABI_VERSION, .vram_size = VRAM_SIZE,
					  .reset_count = __atomic_load_n(&hdr(h)->reset_count,
									 __ATOMIC_ACQUIRE) };

		if (q->length >= sizeof(struct vf_msg_info_req))
			atomic_store(&h->announced,
				     ((const struct vf_msg_info_req *)(q + 1))->abi_version);
		r->length = sizeof(mi);
		memcpy(r + 1, &mi, sizeof(mi));
		break;
	}
	case 0x55:
		r->status = -VGPU_EQUOTA;
		break;
	default:
		r->status = -EOPNOTSUPP;
	}
	if (h->c->mode == RSP_LATE_FIRST && q->type == VF_MSG_PING) {
		r->seq = q->seq - 1;	/* a reply to a call that already gave up */
		if (cmn_ring_push(&h->rsp, out, sizeof(*r) + r->length))
			h->push_failed++;
		r->seq = q->seq;
	}
	if (cmn_ring_push(&h->rsp, out, sizeof(*r) + r->length))
		h->push_failed++;
}

static void *host_thread(void *arg)
{
	struct host *h = arg;
	const struct host_case *c = h->c;
	int64_t id = c->id_zero ? 0 : TEST_VF;
	uint64_t cnt;

	h->conn = accept4(h->lsock, NULL, NULL, SOCK_CLOEXEC);
	if (h->conn < 0)
		return NULL;
	if (c->refuse) {
		close(h->conn);
		h->conn = -1;
		return NULL;
	}
	if (!send_msg(h->conn, c->proto, -1) || !send_msg(h->conn, id, -1) ||
	    !send_msg(h->conn, -1, c->no_bar_fd ? -1 : h->bar_fd))
		return NULL;
	for (int v = 0; v < VF_NR_VECTORS; v++)
		if (!send_msg(h->conn, c->host_peer, h->to_host[v]))
			return NULL;
	for (int v = 0; v < VF_NR_VECTORS; v++)
		if (!send_msg(h->conn, id, h->to_guest[v]))
			return NULL;
	while (!atomic_load(&h->stop)) {
		struct pollfd p = { .fd = h->to_host[VF_VEC_MBOX], .events = POLLIN };
		const struct vf_msg *q;
		int err;

		if (poll(&p, 1, 5) > 0 && read(p.fd, &cnt, sizeof(cnt)) < 0)
			break;
		while ((q = cmn_ring_consume_slot(&h->req, &err))) {
			serve(h, q);
			cmn_ring_consume_commit(&h->req);
			cnt = 1;
			if (write(h->to_guest[VF_VEC_MBOX], &cnt, 8) != 8)
				h->push_failed++;
		}
	}
	return NULL;
}

static int host_setup(void **state)
{
	struct host *h = calloc(1, sizeof(*h));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	assert_non_null(h);
	h->c = *state;
	strcpy(h->dir, "/tmp/vf-transport-XXXXXX");
	assert_non_null(mkdtemp(h->dir));
	snprintf(h->path, sizeof(h->path), "%s/vf3.sock", h->dir);
	h->bar_fd = memfd_create("bar2", MFD_CLOEXEC);
	assert_true(h->bar_fd >= 0);
	assert_int_equal(ftruncate(h->bar_fd, BAR_SIZE), 0);
	h->bar = mmap(NULL, BAR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, h->bar_fd, 0);
	assert_true(h->bar != MAP_FAILED);
	bar_format(h);
	if (h->c->truncate_to)
		assert_int_equal(ftruncate(h->bar_fd, h->c->truncate_to), 0);
	for (int v = 0; v < VF_NR_VECTORS; v++) {
		h->to_host[v] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		h->to_guest[v] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	h->lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	strcpy(sa.sun_path, h->path);
	assert_int_equal(bind(h->lsock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(h->lsock, 1), 0);
	h->conn = -1;
	assert_int_equal(pthread_create(&h->thr, NULL, host_thread, h), 0);
	*state = h;
	return 0;
}

static int host_teardown(void **state)
{
	struct host *h = *state;

	atomic_store(&h->stop, 1);
	shutdown(h->lsock, SHUT_RDWR);
	pthread_join(h->thr, NULL);
	assert_int_equal(h->push_failed, 0);
	if (h->conn >= 0)
		close(h->conn);
	close(h->lsock);
	unlink(h->path);
	rmdir(h->dir);
	for (int v = 0; v < VF_NR_VECTORS; v++) {
		close(h->to_host[v]);
		close(h->to_guest[v]);
	}
	munmap(h->bar, BAR_SIZE);
	close(h->bar_fd);
	free(h);
	return 0;
}

static int open_vf(struct host *h, struct vgpu_vf **vf)
{
	struct vgpu_vf_opts o = { .socket = h->path, .quiet = true,
				  .rm_timeout_ns = 200ull * 1000 * 1000 };

	return vgpu_vf_open(&o, vf);
}

static const struct host_case attach_cases[] = {
	{ .name = "good host", .want = 0 },
	{ .name = "good host with the doorbell page", .abi = VGPU_ABI_MAJOR << 16 | 1,
	  .db_off = CTRL_OFF + 4096, .want = 0 },
	{ .name = "larger control area: the header stays in the last page",
	  .ctrl_off = CTRL_OFF - (256u << 10), .want = 0 },
	{ .name = "control area over the DMA memory", .ctrl_off = DMA_OFF, .want = -EPROTO },
	{ .name = "control area above the header", .ctrl_off = BAR_SIZE, .want = -EPROTO },
	{ .name = "endpoint protocol 1", .proto = 1, .want = -VGPU_EABI },
	{ .name = "endpoint refuses (VF_EP_REFUSED): busy, not an ABI mismatch",
	  .proto = VF_EP_REFUSED, .want = -EBUSY },
	{ .name = "ABI major 1 in the header", .abi = 1u << 16 | 1, .want = -VGPU_EABI },
	{ .name = "next ABI major in the header", .abi = (VGPU_ABI_MAJOR + 1u) << 16,
	  .want = -VGPU_EABI },
	{ .name = "bad magic", .magic = 0x1234, .want = -EPROTO },
	{ .name = "BAR2 not a power of two", .truncate_to = BAR_SIZE - 4096, .want = -EPROTO },
	{ .name = "BAR2 message without an fd", .no_bar_fd = true, .want = -EPROTO },
	{ .name = "refused (closed before message 1)", .refuse = true, .want = -ECONNRESET },
	{ .name = "request ring over the header page", .ring_outside = true, .want = -EPROTO },
	{ .name = "GET_INFO names another VF", .info_vf = TEST_VF + 1, .want = -EPROTO },
	{ .name = "doorbell page over a ring", .abi = VGPU_ABI_MAJOR << 16 | 1,
	  .db_off = CTRL_OFF + VF_BAR_RSP_OFF, .want = -EPROTO },
	{ .name = "ABI 2.3 master layout: we are peer 0, vgpud peer 1", .host_peer = VF_EP_HOST_PEER,
	  .id_zero = true, .want = 0 },
	{ .name = "ABI 2.1 host (no host_peer): vgpud is peer 0", .abi = VGPU_ABI_MAJOR << 16 | 1,
	  .want = 0 },
	{ .name = "host_peer is our own peer id", .host_peer = TEST_VF, .want = -EPROTO },
	{ .name = "both peer 0", .id_zero = true, .want = -EPROTO },
};

static void test_attach(void **state)
{
	struct host *h = *state;
	struct vgpu_vf *vf = NULL;
	struct vgpu_vf_info info;
	int ret = open_vf(h, &vf);

	assert_int_equal(ret, h->c->want);
	if (ret) {
		assert_null(vf);
		return;
	}
	vgpu_vf_get_info(vf, &info);
	assert_int_equal(info.vf_id, TEST_VF);
	assert_int_equal(info.vram_size, VRAM_SIZE);
	assert_int_equal(info.dma_size, DMA_SIZE);
	assert_int_equal(info.usermode_submit, h->c->db_off != 0);
	assert_int_equal(vgpu_vf_ping(vf, "hello", 5), 0);
	/* The ping went through the host's vectors whatever its peer id, and the driver said
	 * which ABI it speaks (vgpud migrates only a guest that did). */
	assert_int_equal(atomic_load(&h->announced), VGPU_ABI_VERSION);
	vgpu_vf_close(vf);
}

/* The message for a version mismatch names both versions (read from stderr: the VF is not
 * returned on failure, so its last_error is gone). */
static void test_abi_message(void **state)
{
	struct host *h = *state;
	struct vgpu_vf_opts o = { .socket = h->path, .quiet = false };
	struct vgpu_vf *vf = NULL;
	char msg[4096], want[128];
	int cap = memfd_create("stderr", MFD_CLOEXEC), saved = dup(STDERR_FILENO);
	ssize_t n;

	assert_true(cap >= 0 && saved >= 0);
	fflush(stderr);
	assert_int_equal(dup2(cap, STDERR_FILENO), STDERR_FILENO);
	int ret = vgpu_vf_open(&o, &vf);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	assert_int_equal(ret, -VGPU_EABI);
	assert_null(vf);
	n = pread(cap, msg, sizeof(msg) - 1, 0);
	close(cap);
	assert_true(n > 0);
	msg[n] = 0;
	snprintf(want, sizeof(want), "host speaks vGPU ABI 1.1, this driver %u.%u: refusing",
		 VGPU_ABI_MAJOR, VGPU_ABI_MINOR);
	if (!strstr(msg, want))
		fail_msg("message \"%s\" lacks \"%s\"", msg, want);
	assert_string_equal(vgpu_vf_strerror(-VGPU_EABI), "incompatible vGPU ABI version");
}

static const struct host_case mbox_normal = { .name = "mailbox", .mode = RSP_NORMAL };
static const struct host_case mbox_late = { .name = "late reply", .mode = RSP_LATE_FIRST };
static const struct host_case mbox_silent = { .name = "silent host", .mode = RSP_SILENT };
static const struct host_case abi_old = { .name = "ABI message", .abi = 1u << 16 | 1 };

static void test_mbox_status(void **state)
{
	struct host *h = *state;
	struct vgpu_vf *vf;
	size_t len = 0;

	assert_int_equal(open_vf(h, &vf), 0);
	assert_int_equal(vgpu_vf_mbox_call(vf, 0x55, NULL, 0, NULL, &len), -VGPU_EQUOTA);
	assert_int_equal(vgpu_vf_mbox_call(vf, 0x99, NULL, 0, NULL, &len), -EOPNOTSUPP);
	for (int i = 0; i < 100; i++)
		assert_int_equal(vgpu_vf_ping(vf, &i, sizeof(i)), 0);
	vgpu_vf_close(vf);
}

static void test_mbox_late(void **state)
{
	struct host *h = *state;
	struct vgpu_vf *vf;

	assert_int_equal(open_vf(h, &vf), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(vgpu_vf_ping(vf, &i, sizeof(i)), 0);
	assert_int_equal(vf->late_replies, 10);
	vgpu_vf_close(vf);
}

static void test_mbox_timeout(void **state)
{
	struct host *h = *state;
	struct vgpu_vf *vf;

	assert_int_equal(open_vf(h, &vf), 0);
	assert_int_equal(vgpu_vf_ping(vf, "x", 1), -ETIMEDOUT);
	assert_string_not_equal(vgpu_vf_last_error(vf), "");
	vgpu_vf_close(vf);
}

/* A case that stalls is reported and ends the run: the suite never hangs silently. The
 * silent host makes "mailbox ping" wait its full (bounded, 5 s) RM timeout, far past a 1 s
 * case limit; the suite runs in a child because the watchdog ends the process. */
static void test_suite_hang(void **state)
{
	struct host *h = *state;
	struct vft_opts o = { .socket = h->path, .only = "mailbox ping", .case_timeout_s = 1 };
	int out = memfd_create("tap", MFD_CLOEXEC), st = 0;
	char tap[4096];
	ssize_t n;
	pid_t pid;

#if defined(__SANITIZE_THREAD__)
	skip();		/* fork() of a threaded process under TSan: not meaningful */
#endif
	assert_true(out >= 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *f = fdopen(out, "w");

		_exit(f ? vft_run(&o, f) : 99);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	n = pread(out, tap, sizeof(tap) - 1, 0);
	close(out);
	assert_true(n > 0);
	tap[n] = 0;
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 124 || !strstr(tap, "not ok 1 - mailbox ping") ||
	    !strstr(tap, "hung") || !strstr(tap, "Bail out!"))
		fail_msg("exit %d, TAP:\n%s", WEXITSTATUS(st), tap);
}

/* A VF reset: the host bumps reset_count, re-formats the rings and posts an event; the
 * driver notices, recovers, and reports what was lost. */
static void test_reset(void **state)
{
	struct host *h = *state;
	struct vf_event ev = { .type = VF_EVT_RESET, .arg0 = 1 };
	struct vgpu_vf_lost lost;
	struct vgpu_mem *m;
	struct vgpu_vf *vf;

	assert_int_equal(open_vf(h, &vf), 0);
	assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_SYSMEM, 8192, 0, &m), 0);
	assert_false(vgpu_vf_reset_pending(vf));
	__atomic_store_n(&hdr(h)->reset_count, 1, __ATOMIC_RELEASE);
	assert_int_equal(cmn_ring_push(&h->evt, &ev, sizeof(ev)), 0);
	assert_true(vgpu_vf_reset_pending(vf));
	assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_SYSMEM, 8192, 0, &m), -ENOLINK);
	assert_int_equal(vgpu_vf_recover(vf, &lost), 0);
	assert_int_equal(lost.resets, 1);
	assert_false(vgpu_vf_reset_pending(vf));
	assert_null(vgpu_mem_cpu(m));		/* a tombstone */
	assert_int_equal(vgpu_mem_free(m), 0);
	assert_int_equal(vgpu_vf_ping(vf, "after", 5), 0);
	assert_int_equal(vgpu_vf_recover(vf, &lost), 0);	/* nothing new */
	assert_int_equal(lost.resets, 0);
	vgpu_vf_close(vf);
}

/* Mailbox calls from several threads at once: serialised inside, each gets its own answer. */
static void *ping_thread(void *arg)
{
	struct vgpu_vf *vf = arg;
	uintptr_t bad = 0;

	for (uint32_t i = 0; i < 200; i++) {
		uint64_t v = (uint64_t)(uintptr_t)&i << 16 | i;

		bad += vgpu_vf_ping(vf, &v, sizeof(v)) != 0;
	}
	return (void *)bad;
}

static void test_mbox_threads(void **state)
{
	struct host *h = *state;
	pthread_t thr[4];
	struct vgpu_vf *vf;
	void *bad;

	assert_int_equal(open_vf(h, &vf), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&thr[i], NULL, ping_thread, vf), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(thr[i], &bad), 0);
		assert_null(bad);
	}
	assert_int_equal(vf->late_replies, 0);
	vgpu_vf_close(vf);
}

#define HOST_TEST(fn, c) { (c)->name, fn, host_setup, host_teardown, (void *)(c) }

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(attach_cases) + 8];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(attach_cases); i++)
		t[n++] = (struct CMUnitTest)HOST_TEST(test_attach, &attach_cases[i]);
	t[n++] = (struct CMUnitTest){ "ABI mismatch names both versions", test_abi_message,
				      host_setup, host_teardown, (void *)&abi_old };
	t[n++] = (struct CMUnitTest){ "host status passed up unchanged", test_mbox_status,
				      host_setup, host_teardown, (void *)&mbox_normal };
	t[n++] = (struct CMUnitTest){ "stale-seq replies dropped and counted", test_mbox_late,
				      host_setup, host_teardown, (void *)&mbox_late };
	t[n++] = (struct CMUnitTest){ "silent host: bounded wait", test_mbox_timeout,
				      host_setup, host_teardown, (void *)&mbox_silent };
	t[n++] = (struct CMUnitTest){ "a stalled suite case: reported, run ends", test_suite_hang,
				      host_setup, host_teardown, (void *)&mbox_silent };
	t[n++] = (struct CMUnitTest){ "4 threads calling at once", test_mbox_threads,
				      host_setup, host_teardown, (void *)&mbox_normal };
	t[n++] = (struct CMUnitTest){ "VF reset: detect, recover, report", test_reset,
				      host_setup, host_teardown, (void *)&mbox_normal };
	return _cmocka_run_group_tests("vf_transport", t, n, NULL, NULL);
}
