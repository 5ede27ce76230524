// SPDX-License-Identifier: MIT
/* Shared virtual addressing for a local guest (ABI 2.1, vgpu/sva.h): the process proves it is
 * the attached guest by opening a second connection to its VF's endpoint socket (vgpud checks
 * the kernel's SO_PEERCRED pid), asks for a bind on it, and then maps ranges of its own
 * address space into GPU VA spaces with aperture 2. The binding dies with the connection, so
 * with the process. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <vgpu/gmmu.h>
#include <vgpu/sva.h>
#include <vgpu/vf_bar.h>

#include "common/lock.h"
#include "hmm/hmm.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_internal.h"

#define SVA_TIMEOUT_MS	5000	/* vgpud answers from its loop at once */
#define SVA_USER_VA_END	(1ull << 47)	/* x86-64 user space (4-level paging) */

/* Read exactly @len bytes within the timeout. */
static int sva_recv(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, SVA_TIMEOUT_MS);
		ssize_t r;

		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		r = recv(fd, (char *)buf + got, len - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ECONNRESET;
		got += (size_t)r;
	}
	return 0;
}

/* Connect the SVA connection and check vgpud's greeting. */
static int sva_connect(struct vgpu_vf *vf)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t hello;
	int fd, ret;

	if (vf->sva_fd >= 0)
		return 0;
	if (vf->opts.transport || !vf->opts.socket)
		return vf_error(vf, -EOPNOTSUPP, "SVA needs the local transport (the endpoint "
				"socket): a VM guest's device reaches only its DMA memory");
	if (strlen(vf->opts.socket) >= sizeof(sa.sun_path))
		return vf_error(vf, -ENAMETOOLONG, "SVA: socket path too long");
	strcpy(sa.sun_path, vf->opts.socket);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return vf_error(vf, -errno, "SVA: socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		close(fd);
		return vf_error(vf, ret, "SVA: cannot connect to %s", vf->opts.socket);
	}
	ret = sva_recv(fd, &hello, sizeof(hello));
	if (!ret && hello == VF_EP_REFUSED)
		ret = vf_error(vf, -EPERM, "SVA: vgpud refused the connection (this process is not "
			       "the attached guest, or its SVA connection is already open)");
	else if (!ret && hello != VGPU_SVA_HELLO)
		ret = vf_error(vf, -EPROTO, "SVA: vgpud greeted with %lld, not the SVA hello "
			       "(a vgpud older than ABI 2.1?)", (long long)hello);
	else if (ret)
		ret = vf_error(vf, ret, "SVA: no greeting from vgpud");
	if (ret) {
		close(fd);
		return ret;
	}
	vf->sva_fd = fd;
	return 0;
}

/* ---- page requests (ABI 2.4) --------------------------------------------------------------
 * Once on, vgpud writes page requests on the connection at any time, between replies too.
 * Whoever holds @io reads and writes the connection: a caller waiting for its reply serves
 * the requests that come first, and the thread serves them while no call is made. */

struct vf_sva_pri {
	struct cmn_mutex io;		/* the connection's one reader and writer */
	struct hmm_pri hp;		/* hmm_pri_attach_mm(): faults pages in */
	pthread_t thread;
	bool running;
	int stop_fd;			/* eventfd: the thread returns */
	_Atomic uint64_t served, refused;
};

/* Make the requested page present as the device asked for it, and answer. */
static int sva_pri_serve(struct vgpu_vf *vf, const struct vgpu_sva_page_req *rq)
{
	struct vf_sva_pri *pr = vf->sva_pri;
	struct vgpu_sva_page_resp a = { .magic = VGPU_SVA_PRQ_MAGIC, .id = rq->id };

	a.status = rq->addr > UINTPTR_MAX ? -EFAULT
		 : hmm_pri_serve_page(&pr->hp, (uintptr_t)rq->addr,
				      rq->access & VGPU_SVA_ACCESS_WRITE);
	atomic_fetch_add(a.status ? &pr->refused : &pr->served, 1);
	return send(vf->sva_fd, &a, sizeof(a), MSG_NOSIGNAL) == (ssize_t)sizeof(a) ? 0 : -EIO;
}

/* Read one message: a page request is served here (0, *@got_reply false), a reply goes
 * to *@reply (when a call waits for one; else it is out of step: -EPROTO). */
static int sva_read_one(struct vgpu_vf *vf, struct vgpu_sva_reply *reply, bool *got_reply)
{
	union {
		uint32_t magic;
		struct vgpu_sva_page_req rq;
		struct vgpu_sva_reply rp;
	} m;
	int ret = sva_recv(vf->sva_fd, &m.magic, sizeof(m.magic));

	*got_reply = false;
	if (ret)
		return ret;
	if (m.magic == VGPU_SVA_PRQ_MAGIC && vf->sva_pri) {
		ret = sva_recv(vf->sva_fd, (char *)&m + 4, sizeof(m.rq) - 4);
		return ret ? ret : sva_pri_serve(vf, &m.rq);
	}
	if (m.magic != VGPU_SVA_MAGIC || !reply)
		return -EPROTO;
	ret = sva_recv(vf->sva_fd, (char *)&m + 4, sizeof(m.rp) - 4);
	if (!ret) {
		*reply = m.rp;
		*got_reply = true;
	}
	return ret;
}

/* The thread: serve page requests while no call holds the connection. A connection that
 * ends or gets out of step stops it: later requests time out at vgpud and fault. */
static void *sva_pri_main(void *arg)
{
	struct vgpu_vf *vf = arg;
	struct vf_sva_pri *pr = vf->sva_pri;
	bool got_reply;
	int ret = 0;

	while (!ret) {
		struct pollfd p[2] = { { .fd = vf->sva_fd, .events = POLLIN },
				       { .fd = pr->stop_fd, .events = POLLIN } };

		if (poll(p, 2, -1) < 0) {
			ret = errno == EINTR ? 0 : -errno;
			continue;
		}
		if (p[1].revents)
			break;
		cmn_mutex_lock(&pr->io);
		/* A caller may have read it meanwhile: only what is still there. */
		if (poll(p, 1, 0) > 0)
			ret = sva_read_one(vf, NULL, &got_reply);
		cmn_mutex_unlock(&pr->io);
	}
	return NULL;
}

/* Stop serving: the thread ends, the mm is let go. */
static void sva_pri_stop(struct vgpu_vf *vf)
{
	struct vf_sva_pri *pr = vf->sva_pri;

	if (!pr)
		return;
	if (pr->running) {
		if (eventfd_write(pr->stop_fd, 1))
			vf_error(vf, -errno, "SVA page requests: cannot stop the thread");
		pthread_join(pr->thread, NULL);
	}
	vf->sva_pri = NULL;
	hmm_pri_detach_mm(&pr->hp);
	if (pr->stop_fd >= 0)
		close(pr->stop_fd);
	cmn_mutex_destroy(&pr->io);
	free(pr);
}

/* One request, one reply; with page requests on, those that come first are served. */
static int sva_call(struct vgpu_vf *vf, const void *req, size_t len, struct vgpu_sva_reply *reply)
{
	struct vf_sva_pri *pr = vf->sva_pri;
	bool got_reply = false;
	int ret = 0;

	if (pr)
		cmn_mutex_lock(&pr->io);
	if (send(vf->sva_fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
		ret = -errno;
	while (!ret && !got_reply)
		ret = sva_read_one(vf, reply, &got_reply);
	if (pr)
		cmn_mutex_unlock(&pr->io);
	return ret;
}

int vgpu_sva_call_raw(struct vgpu_vf *vf, const void *req, size_t len,
		      struct vgpu_sva_reply *reply)
{
	int ret = sva_connect(vf);

	if (ret)
		return ret;
	ret = sva_call(vf, req, len, reply);
	if (ret) {
		vf_sva_close(vf);	/* out of step with the host: start over next time */
		return vf_error(vf, ret, "SVA: request failed on the connection");
	}
	reply->why[sizeof(reply->why) - 1] = 0;
	return 0;
}

/* One well-formed request; the host's refusal becomes the return value and last error. */
static int sva_op(struct vgpu_vf *vf, uint32_t op, struct vgpu_sva_reply *rp)
{
	struct vgpu_sva_req rq = { .magic = VGPU_SVA_MAGIC, .abi_version = VGPU_ABI_VERSION,
				   .op = op };
	int ret = vgpu_sva_call_raw(vf, &rq, sizeof(rq), rp);

	if (ret)
		return ret;
	if (rp->status)
		return vf_error(vf, rp->status, "SVA %s refused by vgpud: %s",
				op == VGPU_SVA_OP_BIND ? "bind" :
				op == VGPU_SVA_OP_PRI ? "page requests" : "unbind", rp->why);
	return 0;
}

int vgpu_sva_bind(struct vgpu_vf *vf)
{
	struct vgpu_sva_reply rp;
	int ret = sva_op(vf, VGPU_SVA_OP_BIND, &rp);

	if (!ret)
		vf->sva_pasid = rp.pasid;
	return ret;
}

int vgpu_sva_unbind(struct vgpu_vf *vf)
{
	struct vgpu_sva_reply rp;
	int ret;

	if (vf->sva_fd < 0)
		return vf_error(vf, -ENOENT, "SVA unbind: not bound");
	ret = sva_op(vf, VGPU_SVA_OP_UNBIND, &rp);
	if (!ret) {
		vf->sva_pasid = 0;
		sva_pri_stop(vf);	/* vgpud ended them with the binding */
	}
	return ret;
}

/* The serving state, set on @vf before the request goes out (requests may precede the
 * reply). */
static int sva_pri_new(struct vgpu_vf *vf, struct hmm_mm *mm)
{
	struct vf_sva_pri *pr = calloc(1, sizeof(*pr));
	int ret;

	if (!pr)
		return vf_error(vf, -ENOMEM, "SVA page requests: out of memory");
	cmn_mutex_init(&pr->io);
	vf->sva_pri = pr;
	pr->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (pr->stop_fd < 0) {
		ret = vf_error(vf, -errno, "SVA page requests: no eventfd");
		goto stop;
	}
	ret = hmm_pri_attach_mm(&pr->hp, mm);
	if (ret) {
		vf_error(vf, ret, "SVA page requests: no notifier slot left in the hmm mm");
		goto stop;
	}
	return 0;
stop:
	sva_pri_stop(vf);
	return ret;
}

int vgpu_sva_pri_enable(struct vgpu_vf *vf, struct hmm_mm *mm)
{
	struct vgpu_sva_reply rp;
	int ret;

	if (!vf)
		return -EINVAL;
	if (!mm)
		return vf_error(vf, -EINVAL, "SVA page requests: no hmm mm to serve them from");
	if (vf->sva_fd < 0 || !vf->sva_pasid)
		return vf_error(vf, -ENOENT, "SVA page requests: not bound (vgpu_sva_bind first)");
	if (vf->sva_pri)
		return vf_error(vf, -EBUSY, "SVA page requests: already served");
	ret = sva_pri_new(vf, mm);
	if (ret)
		return ret;
	ret = sva_op(vf, VGPU_SVA_OP_PRI, &rp);
	if (ret)
		goto stop;
	ret = -pthread_create(&vf->sva_pri->thread, NULL, sva_pri_main, vf);
	if (ret)
		goto drop;
	vf->sva_pri->running = true;
	return 0;
drop:
	vf_sva_close(vf);	/* vgpud would forward to no one: drop the binding */
	return vf_error(vf, ret, "SVA page requests: no thread; the binding is dropped");
stop:
	sva_pri_stop(vf);	/* (already gone if the connection failed) */
	return ret;
}

void vgpu_sva_pri_stats(struct vgpu_vf *vf, uint64_t *served, uint64_t *refused)
{
	struct vf_sva_pri *pr = vf ? vf->sva_pri : NULL;

	*served = pr ? atomic_load(&pr->served) : 0;
	*refused = pr ? atomic_load(&pr->refused) : 0;
}

void vf_sva_close(struct vgpu_vf *vf)
{
	sva_pri_stop(vf);
	if (vf->sva_fd >= 0)
		close(vf->sva_fd);
	vf->sva_fd = -1;
	vf->sva_pasid = 0;
}

int vgpu_va_map_sva(struct vgpu_vaspace *as, uint64_t va, const void *cpu, uint64_t size,
		    uint64_t page_size, unsigned int flags)
{
	uint64_t addr = (uint64_t)(uintptr_t)cpu;

	if (!cpu || !size || addr >= SVA_USER_VA_END || size > SVA_USER_VA_END - addr)
		return vf_error(as->vf, -EINVAL, "SVA map: [%p, +%#llx) is not a user-space range",
				cpu, (unsigned long long)size);
	if (page_size != VGPU_GMMU_PAGE_4K && page_size != VGPU_GMMU_PAGE_64K &&
	    page_size != VGPU_GMMU_PAGE_2M)
		return vf_error(as->vf, -EINVAL, "SVA map: page size %#llx is not 4K, 64K or 2M",
				(unsigned long long)page_size);
	if ((addr | va | size) & (page_size - 1))
		return vf_error(as->vf, -EINVAL, "SVA map: cpu %p, va %#llx or size %#llx not "
				"aligned to the page size %#llx", cpu, (unsigned long long)va,
				(unsigned long long)size, (unsigned long long)page_size);
	return vf_va_map_aper(as, va, VGPU_GMMU_APER_SVA, addr, size, page_size, flags);
}
