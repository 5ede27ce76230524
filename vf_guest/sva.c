// SPDX-License-Identifier: MIT
/* Shared virtual addressing for a local guest (ABI 2.1, vgpu/sva.h): the process proves it is
 * the attached guest by opening a second connection to its VF's endpoint socket (vgpud checks
 * the kernel's SO_PEERCRED pid), asks for a bind on it, and then maps ranges of its own
 * address space into GPU VA spaces with aperture 2. The binding dies with the connection, so
 * with the process. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <vgpu/gmmu.h>
#include <vgpu/sva.h>
#include <vgpu/vf_bar.h>

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

int vgpu_sva_call_raw(struct vgpu_vf *vf, const void *req, size_t len,
		      struct vgpu_sva_reply *reply)
{
	int ret = sva_connect(vf);

	if (ret)
		return ret;
	if (send(vf->sva_fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
		ret = -errno;
	if (!ret)
		ret = sva_recv(vf->sva_fd, reply, sizeof(*reply));
	if (!ret && reply->magic != VGPU_SVA_MAGIC)
		ret = -EPROTO;
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
				op == VGPU_SVA_OP_BIND ? "bind" : "unbind", rp->why);
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
	if (!ret)
		vf->sva_pasid = 0;
	return ret;
}

void vf_sva_close(struct vgpu_vf *vf)
{
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
