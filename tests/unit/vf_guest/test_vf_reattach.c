// SPDX-License-Identifier: MIT
/* vgpu_vf_reattach() against scripted endpoints written here from vgpu/vf_bar.h: a guest
 * attached to host A moves to host B that serves the same slice (same UUID, VF and layout):
 * the DMA memory pointer it held stays the same and reads B's bytes, the mailbox and its
 * vector are B's, B's reset count is taken, B hears the driver's ABI in GET_INFO and A sees
 * the guest go. Every endpoint that is not the slice as it was - another UUID, another VF,
 * another BAR size, another DMA IOVA, a slice not ready, no endpoint, the endpoint in use,
 * bad arguments, a transport other than the local one - is refused naming what differs,
 * and the guest stays attached to A, which answers as before. */
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
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/ring.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_raw.h"
#include <vgpu/vf_bar.h>

#define BAR_SIZE	(2u << 20)
#define VRAM_SIZE	(512u << 10)
#define DMA_OFF		(512u << 10)
#define DMA_SIZE	(256u << 10)
#define CTRL_OFF	(BAR_SIZE - VF_BAR_CTRL_SIZE)
#define TEST_VF		3u
#define IOVA		(1ull << 32)

/* How a host differs from the slice the guest attached to. */
struct host_cfg {
	uint8_t uuid_last;		/* last UUID byte (0x11: the guest's slice) */
	uint32_t vf_id;
	uint64_t bar_size;
	uint64_t dma_iova;
	uint32_t state;
	uint32_t reset_count;
	uint8_t fill;			/* every DMA memory byte */
};

struct host {
	struct host_cfg cfg;
	char path[128];
	int lsock, conn, bar_fd;
	uint8_t *bar;
	int to_host[VF_NR_VECTORS], to_guest[VF_NR_VECTORS];
	struct cmn_ring req, rsp;
	pthread_t thr;
	atomic_int stop;
	atomic_uint accepted;		/* connections taken */
	atomic_uint announced;		/* the ABI the last GET_INFO carried */
	atomic_uint requests;
};

struct fixture {
	char dir[64];
	struct host a, b;
	struct vgpu_vf *vf;
};

static const struct host_cfg slice = {
	.uuid_last = 0x11, .vf_id = TEST_VF, .bar_size = BAR_SIZE, .dma_iova = IOVA,
	.state = VF_STATE_READY, .fill = 0xaa,
};

static struct vf_bar_header *hdr(struct host *h)
{
	return (struct vf_bar_header *)(h->bar + vf_bar_header_off(h->cfg.bar_size));
}

static void bar_format(struct host *h)
{
	struct vf_bar_header *x = hdr(h);
	uint64_t ctrl = h->cfg.bar_size - VF_BAR_CTRL_SIZE;

	memset(h->bar + DMA_OFF, h->cfg.fill, DMA_SIZE);
	x->magic = VF_BAR_MAGIC;
	x->abi_version = VGPU_ABI_VERSION;
	x->header_size = VF_BAR_HDR_SIZE;
	x->vf_id = h->cfg.vf_id;
	x->state = h->cfg.state;
	x->reset_count = h->cfg.reset_count;
	x->nr_vectors = VF_NR_VECTORS;
	x->bar_size = h->cfg.bar_size;
	x->vram_size = VRAM_SIZE;
	x->dma_off = DMA_OFF;
	x->dma_size = DMA_SIZE;
	x->ctrl_off = ctrl;
	x->req_off = ctrl + VF_BAR_REQ_OFF;
	x->rsp_off = ctrl + VF_BAR_RSP_OFF;
	x->evt_off = ctrl + VF_BAR_EVT_OFF;
	x->ring_region_size = VF_BAR_RING_REGION;
	x->channels = 8;
	x->db_off = ctrl + VF_BAR_DB_OFF;
	x->dma_iova = h->cfg.dma_iova;
	x->nr_runlists = 1;
	x->host_peer = VF_EP_HOST_PEER;
	memset(x->slice_uuid, 0x5a, sizeof(x->slice_uuid));
	x->slice_uuid[15] = h->cfg.uuid_last;
	assert_int_equal(cmn_ring_format(h->bar + x->req_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS,
					  VF_MBOX_SLOT_SIZE), 0);
	assert_int_equal(cmn_ring_format(h->bar + x->rsp_off, VF_BAR_RING_REGION, VF_MBOX_SLOTS,
					  VF_MBOX_SLOT_SIZE), 0);
	assert_int_equal(cmn_ring_format(h->bar + x->evt_off, VF_BAR_RING_REGION, VF_EVT_SLOTS,
					  VF_EVT_SLOT_SIZE), 0);
	assert_int_equal(cmn_ring_attach(&h->req, h->bar + x->req_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&h->rsp, h->bar + x->rsp_off, VF_BAR_RING_REGION), 0);
}

/* One ivshmem message; false once the client hung up (no assert off the test thread). */
static bool send_msg(int sock, int64_t v, int fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cb;
	struct iovec iov = { .iov_base = &v, .iov_len = sizeof(v) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		memset(&cb, 0, sizeof(cb));
		m.msg_control = cb.buf;
		m.msg_controllen = sizeof(cb.buf);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &m, MSG_NOSIGNAL) == sizeof(v);
}

/* The greeting of vf<N>.master.sock: the guest is peer 0, the host VF_EP_HOST_PEER. */
static void greet(struct host *h, int c)
{
	bool ok = send_msg(c, VF_EP_PROTO_VERSION, -1) && send_msg(c, 0, -1) &&
		  send_msg(c, -1, h->bar_fd);

	for (int v = 0; ok && v < VF_NR_VECTORS; v++)
		ok = send_msg(c, VF_EP_HOST_PEER, h->to_host[v]);
	for (int v = 0; ok && v < VF_NR_VECTORS; v++)
		ok = send_msg(c, 0, h->to_guest[v]);
}

/* PING echoes, GET_INFO describes the slice (and records the driver's ABI), the rest is
 * refused (no RM behind this host). */
static void serve(struct host *h, const struct vf_msg *q)
{
	uint8_t out[VF_MBOX_SLOT_SIZE];
	struct vf_msg *r = (struct vf_msg *)out;
	struct vf_msg_info mi = { .vf_id = h->cfg.vf_id, .abi_version = VGPU_ABI_VERSION,
				  .vram_size = VRAM_SIZE, .reset_count = h->cfg.reset_count };

	atomic_fetch_add(&h->requests, 1);
	memset(out, 0, sizeof(*r));
	r->type = q->type;
	r->seq = q->seq;
	if (q->type == VF_MSG_PING && q->length <= VF_MSG_MAX_PAYLOAD) {
		r->length = q->length;
		memcpy(r + 1, q + 1, q->length);
	} else if (q->type == VF_MSG_GET_INFO) {
		if (q->length >= sizeof(struct vf_msg_info_req))
			atomic_store(&h->announced,
				     ((const struct vf_msg_info_req *)(q + 1))->abi_version);
		r->length = sizeof(mi);
		memcpy(r + 1, &mi, sizeof(mi));
	} else {
		r->status = -EOPNOTSUPP;
	}
	cmn_ring_push(&h->rsp, out, sizeof(*r) + r->length);
}

/* Accept any number of connections (the last one is the guest) and serve the mailbox. */
static void *host_thread(void *arg)
{
	struct host *h = arg;
	uint64_t cnt;

	while (!atomic_load(&h->stop)) {
		struct pollfd p[2] = { { .fd = h->lsock, .events = POLLIN },
				       { .fd = h->to_host[VF_VEC_MBOX], .events = POLLIN } };
		const struct vf_msg *q;
		int err;

		if (poll(p, 2, 5) < 0)
			break;
		if (p[0].revents & POLLIN) {
			int c = accept4(h->lsock, NULL, NULL, SOCK_CLOEXEC);

			/* Recorded before the greeting: the test reads them once the guest
			 * has taken it. */
			if (c >= 0) {
				if (h->conn >= 0)
					close(h->conn);
				h->conn = c;
				atomic_fetch_add(&h->accepted, 1);
				greet(h, c);
			}
		}
		if ((p[1].revents & POLLIN) && read(p[1].fd, &cnt, sizeof(cnt)) < 0)
			break;
		while ((q = cmn_ring_consume_slot(&h->req, &err))) {
			serve(h, q);
			cmn_ring_consume_commit(&h->req);
			cnt = 1;
			if (write(h->to_guest[VF_VEC_MBOX], &cnt, sizeof(cnt)) != sizeof(cnt))
				break;
		}
	}
	return NULL;
}

static void host_start(struct fixture *f, struct host *h, const char *name,
		       const struct host_cfg *cfg)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	h->cfg = *cfg;
	h->conn = -1;
	snprintf(h->path, sizeof(h->path), "%s/%s", f->dir, name);
	h->bar_fd = memfd_create("bar2", MFD_CLOEXEC);
	assert_true(h->bar_fd >= 0);
	assert_int_equal(ftruncate(h->bar_fd, (off_t)cfg->bar_size), 0);
	h->bar = mmap(NULL, cfg->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, h->bar_fd, 0);
	assert_true(h->bar != MAP_FAILED);
	bar_format(h);
	for (int v = 0; v < VF_NR_VECTORS; v++) {
		h->to_host[v] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		h->to_guest[v] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		assert_true(h->to_host[v] >= 0 && h->to_guest[v] >= 0);
	}
	h->lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(h->lsock >= 0);
	strcpy(sa.sun_path, h->path);
	assert_int_equal(bind(h->lsock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(h->lsock, 4), 0);
	assert_int_equal(pthread_create(&h->thr, NULL, host_thread, h), 0);
}

static void host_stop(struct host *h)
{
	if (!h->bar)
		return;
	atomic_store(&h->stop, 1);
	pthread_join(h->thr, NULL);
	if (h->conn >= 0)
		close(h->conn);
	close(h->lsock);
	unlink(h->path);
	for (int v = 0; v < VF_NR_VECTORS; v++) {
		close(h->to_host[v]);
		close(h->to_guest[v]);
	}
	munmap(h->bar, h->cfg.bar_size);
	close(h->bar_fd);
	h->bar = NULL;
}

/* Whether the guest's connection to @h is closed at the guest's end. */
static bool guest_gone(struct host *h)
{
	struct pollfd p = { .fd = h->conn, .events = POLLIN };
	char c;

	return poll(&p, 1, 1000) == 1 && recv(h->conn, &c, 1, MSG_DONTWAIT) == 0;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct vgpu_vf_opts o = { .quiet = true, .rm_timeout_ns = 2ull * 1000 * 1000 * 1000 };

	assert_non_null(f);
	strcpy(f->dir, "/tmp/vf-reattach-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	host_start(f, &f->a, "a.sock", &slice);
	o.socket = f->a.path;
	assert_int_equal(vgpu_vf_open(&o, &f->vf), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	vgpu_vf_close(f->vf);
	host_stop(&f->a);
	host_stop(&f->b);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Still attached to A: the mailbox answers there, the DMA memory is A's. */
static void still_on_a(struct fixture *f, const uint8_t *dma)
{
	unsigned int before = atomic_load(&f->a.requests);

	assert_ptr_equal(vgpu_vf_dma_cpu(f->vf), dma);
	assert_int_equal(dma[0], slice.fill);
	assert_int_equal(dma[DMA_SIZE - 1], slice.fill);
	assert_int_equal(vgpu_vf_ping(f->vf, "still", 5), 0);
	assert_true(atomic_load(&f->a.requests) > before);
	assert_false(vgpu_vf_reset_pending(f->vf));
}

static void test_moves_to_same_slice(void **state)
{
	struct fixture *f = *state;
	struct host_cfg b = slice;
	uint8_t *dma = vgpu_vf_dma_cpu(f->vf);
	struct vgpu_vf_info info;
	unsigned int a_requests;

	b.fill = 0x5b;
	b.reset_count = 7;
	host_start(f, &f->b, "b.sock", &b);
	assert_int_equal(vgpu_vf_reattach(f->vf, f->b.path), 0);
	a_requests = atomic_load(&f->a.requests);
	assert_true(guest_gone(&f->a));
	/* The pointer the guest held reaches B's memory now. */
	assert_ptr_equal(vgpu_vf_dma_cpu(f->vf), dma);
	assert_int_equal(dma[0], 0x5b);
	assert_int_equal(dma[DMA_SIZE - 1], 0x5b);
	dma[64] = 0x77;
	assert_int_equal(f->b.bar[DMA_OFF + 64], 0x77);
	assert_int_equal(f->a.bar[DMA_OFF + 64], slice.fill);
	/* B's mailbox, B's vector, B's reset count, and B heard the driver's ABI. */
	assert_int_equal(atomic_load(&f->b.announced), VGPU_ABI_VERSION);
	assert_int_equal(vgpu_vf_ping(f->vf, "on b", 4), 0);
	assert_int_equal(atomic_load(&f->a.requests), a_requests);
	vgpu_vf_get_info(f->vf, &info);
	assert_int_equal(info.reset_count, 7);
	assert_int_equal(info.vf_id, TEST_VF);
	assert_true(info.usermode_submit);
	assert_false(vgpu_vf_reset_pending(f->vf));
	/* And the endpoint in use is refused by its path, as any. */
	assert_int_equal(vgpu_vf_reattach(f->vf, f->b.path), -EBUSY);
}

struct wrong {
	const char *name;
	struct host_cfg cfg;
	int want;
	const char *says;
};

static void test_wrong_endpoints(void **state)
{
	struct fixture *f = *state;
	const struct wrong cases[] = {
		{ "another slice", { .uuid_last = 0x22, .vf_id = TEST_VF, .bar_size = BAR_SIZE,
		  .dma_iova = IOVA, .state = VF_STATE_READY }, -ENODEV,
		  "serves slice 5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a22, this VF is slice "
		  "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a11" },
		{ "the slice as another VF", { .uuid_last = 0x11, .vf_id = TEST_VF + 1,
		  .bar_size = BAR_SIZE, .dma_iova = IOVA, .state = VF_STATE_READY }, -ENODEV,
		  "as VF 4; this driver's RM handles name VF 3" },
		{ "another BAR size", { .uuid_last = 0x11, .vf_id = TEST_VF,
		  .bar_size = 2 * BAR_SIZE, .dma_iova = IOVA, .state = VF_STATE_READY }, -EPROTO,
		  "lays the slice out differently (BAR2 4194304 bytes" },
		{ "another DMA IOVA", { .uuid_last = 0x11, .vf_id = TEST_VF, .bar_size = BAR_SIZE,
		  .dma_iova = 2 * IOVA, .state = VF_STATE_READY }, -EPROTO,
		  "IOVA 0x200000000; here 2097152" },
		{ "not ready", { .uuid_last = 0x11, .vf_id = TEST_VF, .bar_size = BAR_SIZE,
		  .dma_iova = IOVA, .state = VF_STATE_RESETTING }, -EAGAIN, "not ready (state 2)" },
	};
	uint8_t *dma = vgpu_vf_dma_cpu(f->vf);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct wrong *w = &cases[i];

		host_start(f, &f->b, "b.sock", &w->cfg);
		if (vgpu_vf_reattach(f->vf, f->b.path) != w->want)
			fail_msg("%s: not %d: %s", w->name, w->want, vgpu_vf_last_error(f->vf));
		if (!strstr(vgpu_vf_last_error(f->vf), w->says))
			fail_msg("%s: \"%s\" does not say \"%s\"", w->name,
				 vgpu_vf_last_error(f->vf), w->says);
		/* B saw the connection come and go; A keeps the guest. */
		assert_int_equal(atomic_load(&f->b.accepted), 1);
		assert_true(guest_gone(&f->b));
		still_on_a(f, dma);
		host_stop(&f->b);
		memset(&f->b, 0, sizeof(f->b));
	}
	assert_int_equal(vgpu_vf_reattach(f->vf, f->b.path), -EINVAL);	/* "" */
	assert_int_equal(vgpu_vf_reattach(f->vf, NULL), -EINVAL);
	snprintf(f->b.path, sizeof(f->b.path), "%s/nobody.sock", f->dir);
	assert_int_equal(vgpu_vf_reattach(f->vf, f->b.path), -ENOENT);
	assert_non_null(strstr(vgpu_vf_last_error(f->vf), "cannot attach to"));
	assert_int_equal(vgpu_vf_reattach(f->vf, f->a.path), -EBUSY);
	assert_non_null(strstr(vgpu_vf_last_error(f->vf), "already attached"));
	still_on_a(f, dma);
}

/* ---- a transport that is not the local one (it wraps one) ---- */

struct wrap {
	struct vgpu_vf_transport t;
	struct vgpu_vf_transport *in;
};

#define IN(t) (((struct wrap *)(t))->in)

static int w_attach(struct vgpu_vf_transport *t, void **bar, uint64_t *size)
{
	return IN(t)->ops->attach(IN(t), bar, size);
}

static void w_detach(struct vgpu_vf_transport *t)
{
	IN(t)->ops->detach(IN(t));
}

static int w_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	return IN(t)->ops->notify(IN(t), v);
}

static int w_wait(struct vgpu_vf_transport *t, unsigned int v, uint64_t ns)
{
	return IN(t)->ops->wait(IN(t), v, ns);
}

static unsigned int w_nr_vectors(struct vgpu_vf_transport *t)
{
	return IN(t)->ops->nr_vectors(IN(t));
}

static bool w_alive(struct vgpu_vf_transport *t)
{
	return IN(t)->ops->alive(IN(t));
}

static void w_destroy(struct vgpu_vf_transport *t)
{
	IN(t)->ops->destroy(IN(t));
	free(t);
}

static const struct vgpu_vf_transport_ops wrap_ops = {
	.name = "wrapped", .attach = w_attach, .detach = w_detach, .notify = w_notify,
	.wait = w_wait, .nr_vectors = w_nr_vectors, .alive = w_alive, .destroy = w_destroy,
};

static void test_other_transport(void **state)
{
	struct fixture *f = *state;
	struct wrap *w = calloc(1, sizeof(*w));
	struct vgpu_vf_opts o = { .quiet = true, .rm_timeout_ns = 2ull * 1000 * 1000 * 1000 };
	struct vgpu_vf *vf;
	struct host_cfg b = slice;

	/* A takes one guest at a time here: the fixture's leaves first. */
	vgpu_vf_close(f->vf);
	f->vf = NULL;
	assert_non_null(w);
	w->t.ops = &wrap_ops;
	assert_int_equal(vgpu_vf_transport_local(f->a.path, &w->in), 0);
	o.transport = &w->t;
	assert_int_equal(vgpu_vf_open(&o, &vf), 0);
	host_start(f, &f->b, "b.sock", &b);
	assert_int_equal(vgpu_vf_reattach(vf, f->b.path), -EOPNOTSUPP);
	assert_non_null(strstr(vgpu_vf_last_error(vf), "the wrapped transport does not move"));
	assert_int_equal(atomic_load(&f->b.accepted), 0);
	assert_int_equal(vgpu_vf_ping(vf, "x", 1), 0);
	vgpu_vf_close(vf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_moves_to_same_slice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_endpoints, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_transport, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
