// SPDX-License-Identifier: MIT
/* The local transport: the VF's endpoint socket, spoken to as an ivshmem peer.
 *
 * The server sends 8-byte little-endian messages, some with one fd (vgpu/vf_bar.h): the
 * protocol version, our peer id, -1 with the BAR2 memfd, then per vector the server's fds
 * (its peer id is the header's host_peer: 0 on vf<N>.sock, VF_EP_HOST_PEER on
 * vf<N>.master.sock, where we are peer 0) and ours (our id). How many vectors follow is
 * read from the BAR2 header, so the client never has to guess when the server is done. Everything received is checked: a
 * wrong version, a missing fd or a BAR2 of a silly size fails the attach and closes all. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_internal.h"
#include <vgpu/vf_bar.h>

#define LOCAL_MAX_VECTORS	16
#define LOCAL_RECV_TIMEOUT_MS	5000	/* the server sends everything at accept */

struct local_transport {
	struct vgpu_vf_transport t;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int sock;
	int bar_fd;
	void *bar;
	uint64_t bar_size;
	int64_t peer_id;
	unsigned int nr_vec;
	int host_fd[LOCAL_MAX_VECTORS];	/* we write these: ring vgpud */
	int own_fd[LOCAL_MAX_VECTORS];	/* vgpud writes these: our interrupts */
};

static struct local_transport *to_local(struct vgpu_vf_transport *t)
{
	return cmn_container_of(t, struct local_transport, t);
}

/* Receive one message and, if present, its fd (*fd = -1 otherwise). */
static int local_recv(int sock, int64_t *val, int *fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cbuf;
	struct iovec iov = { .iov_base = val, .iov_len = sizeof(*val) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf.buf) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct cmsghdr *c;
	ssize_t n;

	*fd = -1;
	do
		n = poll(&p, 1, LOCAL_RECV_TIMEOUT_MS);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return -ETIMEDOUT;
	if (n < 0)
		return -errno;
	n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)) && *fd < 0)
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	}
	if (n == 0)
		return -ECONNRESET;	/* refused (not the owner, or already attached) */
	if (n != sizeof(*val) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return -EPROTO;
	}
	return 0;
}

/* Receive a message that must carry value @want (or any value if @any) and an fd. */
static int local_recv_fd(int sock, int64_t want, bool any, int *fd, int64_t *got)
{
	int64_t v;
	int ret = local_recv(sock, &v, fd);

	if (ret)
		return ret;
	if (got)
		*got = v;
	if ((!any && v != want) || *fd < 0) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return -EPROTO;
	}
	return 0;
}

static void local_close_all(struct local_transport *lt)
{
	for (unsigned int i = 0; i < LOCAL_MAX_VECTORS; i++) {
		if (lt->host_fd[i] >= 0)
			close(lt->host_fd[i]);
		if (lt->own_fd[i] >= 0)
			close(lt->own_fd[i]);
		lt->host_fd[i] = lt->own_fd[i] = -1;
	}
	if (lt->bar)
		munmap(lt->bar, lt->bar_size);
	lt->bar = NULL;
	if (lt->bar_fd >= 0)
		close(lt->bar_fd);
	lt->bar_fd = -1;
	if (lt->sock >= 0)
		close(lt->sock);
	lt->sock = -1;
	lt->nr_vec = 0;
}

static int local_connect(struct local_transport *lt)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	lt->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lt->sock < 0)
		return -errno;
	memcpy(sa.sun_path, lt->path, sizeof(lt->path));
	if (connect(lt->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return 0;
}

/* Messages 1-3: version, id, BAR2; then map it. */
static int local_recv_bar(struct local_transport *lt)
{
	struct stat st;
	int64_t v;
	int fd, ret;

	ret = local_recv(lt->sock, &v, &fd);
	if (ret)
		return ret;
	if (fd >= 0)
		close(fd);
	if (v == VF_EP_REFUSED)
		return -EBUSY;		/* another client is attached, or we are not the owner */
	if (v != VF_EP_PROTO_VERSION)
		return -VGPU_EABI;
	ret = local_recv(lt->sock, &lt->peer_id, &fd);
	if (ret)
		return ret;
	if (fd >= 0)
		close(fd);
	if (lt->peer_id < 0 || lt->peer_id > 0xffff)
		return -EPROTO;
	ret = local_recv_fd(lt->sock, -1, false, &lt->bar_fd, NULL);
	if (ret)
		return ret;
	if (fstat(lt->bar_fd, &st) < 0)
		return -errno;
	lt->bar_size = (uint64_t)st.st_size;
	if (lt->bar_size < 2 * VF_BAR_HDR_SIZE || (lt->bar_size & (lt->bar_size - 1)))
		return -EPROTO;
	lt->bar = mmap(NULL, lt->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, lt->bar_fd, 0);
	if (lt->bar == MAP_FAILED) {
		lt->bar = NULL;
		return -errno;
	}
	return 0;
}

/* Messages 4-5: the vectors; their count comes from the header just mapped. */
static int local_recv_vectors(struct local_transport *lt)
{
	const struct vf_bar_header *h = (const void *)((uint8_t *)lt->bar +
						       vf_bar_header_off(lt->bar_size));
	uint32_t n = h->nr_vectors, host = h->host_peer;
	int ret;

	if (h->magic != VF_BAR_MAGIC)
		return -EPROTO;
	if (n == 0 || n > LOCAL_MAX_VECTORS || host > 0xffff || host == lt->peer_id)
		return -EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		ret = local_recv_fd(lt->sock, host, false, &lt->host_fd[i], NULL);
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; i < n; i++) {
		ret = local_recv_fd(lt->sock, lt->peer_id, false, &lt->own_fd[i], NULL);
		if (ret)
			return ret;
	}
	lt->nr_vec = n;
	return 0;
}

static int local_attach(struct vgpu_vf_transport *t, void **bar, uint64_t *size)
{
	struct local_transport *lt = to_local(t);
	int ret;

	if (lt->sock >= 0)
		return -EALREADY;
	ret = local_connect(lt);
	if (!ret)
		ret = local_recv_bar(lt);
	if (!ret)
		ret = local_recv_vectors(lt);
	if (ret) {
		local_close_all(lt);
		return ret;
	}
	*bar = lt->bar;
	*size = lt->bar_size;
	return 0;
}

static void local_detach(struct vgpu_vf_transport *t)
{
	local_close_all(to_local(t));
}

static int local_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	struct local_transport *lt = to_local(t);
	uint64_t one = 1;

	if (v >= lt->nr_vec)
		return -EINVAL;
	if (write(lt->host_fd[v], &one, sizeof(one)) != sizeof(one))
		return -ENOLINK;
	return 0;
}

static int local_wait(struct vgpu_vf_transport *t, unsigned int v, uint64_t timeout_ns)
{
	struct local_transport *lt = to_local(t);
	struct pollfd p[2];
	uint64_t cnt;
	int ms, n;

	if (v >= lt->nr_vec)
		return -EINVAL;
	p[0] = (struct pollfd){ .fd = lt->own_fd[v], .events = POLLIN };
	p[1] = (struct pollfd){ .fd = lt->sock, .events = POLLIN };	/* EOF: host gone */
	/* poll() counts in ms: round up so a short wait still sleeps instead of spinning. */
	ms = timeout_ns >= (uint64_t)INT32_MAX * 1000000ull ? INT32_MAX :
	     (int)((timeout_ns + 999999) / 1000000);
	n = poll(p, 2, ms);
	if (n < 0)
		return errno == EINTR ? -ETIMEDOUT : -errno;
	if (p[0].revents & POLLIN) {
		if (read(lt->own_fd[v], &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
			return -errno;
		return 0;
	}
	if (p[1].revents)
		return -ENOLINK;
	return -ETIMEDOUT;
}

static unsigned int local_nr_vectors(struct vgpu_vf_transport *t)
{
	return to_local(t)->nr_vec;
}

static bool local_alive(struct vgpu_vf_transport *t)
{
	struct local_transport *lt = to_local(t);
	struct pollfd p = { .fd = lt->sock, .events = POLLIN };

	int r;

	if (lt->sock < 0)
		return false;
	/* The server never writes after the handshake: readable means EOF or an error. A
	 * signal to the application cutting the poll says nothing of the connection. */
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	return r == 0;
}

static void local_destroy(struct vgpu_vf_transport *t)
{
	struct local_transport *lt = to_local(t);

	local_close_all(lt);
	free(lt);
}

static const struct vgpu_vf_transport_ops local_ops = {
	.name = "local",
	.attach = local_attach,
	.detach = local_detach,
	.notify = local_notify,
	.wait = local_wait,
	.nr_vectors = local_nr_vectors,
	.alive = local_alive,
	.destroy = local_destroy,
};

bool vf_local_is(const struct vgpu_vf_transport *t)
{
	return t->ops == &local_ops;
}

const char *vf_local_path(struct vgpu_vf_transport *t)
{
	return to_local(t)->path;
}

/* Exchange everything but the BAR2 mapping (and the object itself) between @a and @b. */
static void local_swap_conn(struct local_transport *a, struct local_transport *b)
{
	struct local_transport tmp = *a;

	memcpy(a->path, b->path, sizeof(a->path));
	a->sock = b->sock;
	a->bar_fd = b->bar_fd;
	a->peer_id = b->peer_id;
	a->nr_vec = b->nr_vec;
	memcpy(a->host_fd, b->host_fd, sizeof(a->host_fd));
	memcpy(a->own_fd, b->own_fd, sizeof(a->own_fd));
	memcpy(b->path, tmp.path, sizeof(b->path));
	b->sock = tmp.sock;
	b->bar_fd = tmp.bar_fd;
	b->peer_id = tmp.peer_id;
	b->nr_vec = tmp.nr_vec;
	memcpy(b->host_fd, tmp.host_fd, sizeof(b->host_fd));
	memcpy(b->own_fd, tmp.own_fd, sizeof(b->own_fd));
}

int vf_local_take_over(struct vgpu_vf_transport *t, struct vgpu_vf_transport *nt)
{
	struct local_transport *lt = to_local(t), *n = to_local(nt);
	void *at;

	if (!lt->bar || !n->bar || n->bar_size != lt->bar_size)
		return -EINVAL;
	/* One step: the new object's pages replace the old ones at the old address, so no
	 * pointer into BAR2 ever sees an unmapped hole (mremap unmaps what was there). */
	at = mremap(n->bar, n->bar_size, lt->bar_size, MREMAP_MAYMOVE | MREMAP_FIXED, lt->bar);
	if (at == MAP_FAILED)
		return -errno;
	n->bar = NULL;
	local_swap_conn(lt, n);
	nt->ops->destroy(nt);	/* closes the old connection: its vgpud sees the guest go */
	return 0;
}

int vgpu_vf_transport_local(const char *path, struct vgpu_vf_transport **out)
{
	struct local_transport *lt;

	if (!path || !*path || strlen(path) >= sizeof(lt->path))
		return -EINVAL;
	lt = calloc(1, sizeof(*lt));
	if (!lt)
		return -ENOMEM;
	lt->t.ops = &local_ops;
	strcpy(lt->path, path);
	lt->sock = lt->bar_fd = -1;
	for (unsigned int i = 0; i < LOCAL_MAX_VECTORS; i++)
		lt->host_fd[i] = lt->own_fd[i] = -1;
	*out = &lt->t;
	return 0;
}
