// SPDX-License-Identifier: MIT
/* fuzz_endpoint: what vgpud reads from a guest's endpoint connections
 * (pf_manager/endpoint.c): the ivshmem-server admission (a new guest is greeted, the
 * attached process's second connection becomes its SVA connection, anyone else is refused),
 * the SVA requests on that connection (vgpu/sva.h: ep_sva_check, bind, unbind), stray bytes
 * and hangups on the guest connection, and kicks of the guest's vectors. The endpoint has
 * no socket file (pf_endpoint_open_unlistened): every connection is a socketpair handed to
 * pf_endpoint_admit() as if accepted from this process (or its parent, "another process"),
 * and served by pf_endpoint_handle() as the daemon's loop does. The daemon has an IOMMU
 * (VF 1 attached to a paging domain) but no RM, GPU or service thread; an SVA bind binds
 * this process. Fresh endpoint per input.
 * The input is a list of operations, each starting with a kind byte k (k % 7):
 *   0 connect: u8 f; f bit 0: from another process (only while a guest is attached).
 *   1 SVA bytes: u8 n, n bytes written as they are to the SVA connection.
 *   2 SVA request: u8 op, u8 bad: a well-formed request with op, then bad bit 0 spoils the
 *     magic, 1 the ABI major, 2 the flags, 3 the reserved word, 4 cuts it by one byte.
 *   3 the guest closes its SVA connection.
 *   4 stray bytes on the guest connection: u8 n, n bytes.
 *   5 the guest closes its connection; u8 f, bit 0: connects again at once (before the
 *     daemon has seen the hangup).
 *   6 kick: u8 v, the guest writes 1 to its vector v % VF_NR_VECTORS.
 * After each operation the endpoint is served until nothing is readable.
 * Checks, against a model of the protocol: a greeting exactly as vf_bar.h lists it, HELLO
 * for the attached process's first SVA connection, VF_EP_REFUSED and a close otherwise;
 * one well-formed reply per request (a stream: each read takes up to one request's size),
 * with the status the model expects, a named reason for every refusal, and the IOMMU's
 * PASID attachment changed only by an accepted BIND or UNBIND, by the SVA connection's
 * close or the guest's; no file descriptor outlives the endpoint. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vgpu/sva.h>
#include <vgpu/vf_bar.h>
#include <vgpu/version.h>

#include "common/log.h"
#include "iommu_model/iommu.h"
#include "pf_manager/pf_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_VF		1u
#define FZ_ROUNDS	256	/* serve rounds per operation: far more than one needs */

static struct pf_daemon fz_d;
static struct pf_slice fz_s;
static struct vf_bar_header fz_hdr;	/* the greeting writes vgpud's peer id into it */
static struct iommu_domain *fz_rid_dom;

static void fz_log_drop(enum cmn_log_level level, const char *msg, void *ctx)
{
	(void)level;
	(void)msg;
	(void)ctx;
}

static int fz_fd_count(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!dir)
		abort();
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };

	(void)argc; (void)argv;
	cmn_log_set_level(VGPU_LOG_ERR);
	cmn_log_set_sink(fz_log_drop, NULL);	/* every refusal is logged */
	if (iommu_create(NULL, &fz_d.iommu) || iommu_domain_alloc(fz_d.iommu, &o, &fz_rid_dom) ||
	    iommu_attach(fz_d.iommu, FZ_VF, fz_rid_dom))
		abort();
	fz_s.vf = FZ_VF;
	fz_s.owner_uid = -1;
	fz_s.hdr = &fz_hdr;
	/* Never signalled: the interrupt path needs a GPU. */
	fz_s.intr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	fz_s.kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	fz_s.bar_fd = eventfd(0, EFD_CLOEXEC);	/* any fd: the greeting only passes it on */
	if (fz_s.intr_fd < 0 || fz_s.kick_fd < 0 || fz_s.bar_fd < 0)
		abort();
	return 0;
}

/* The harness's view: the guest's ends and what the protocol says the daemon holds. */
struct fz {
	int guest;			/* our end of the guest connection, or -1 */
	int sva;			/* our end of the SVA connection, or -1 */
	int vec[VF_NR_VECTORS];		/* the vectors the greeting gave us to write */
	bool bound;
	bool pri;			/* page requests forwarded (VGPU_SVA_OP_PRI) */
	uint8_t pending[512];		/* written to the SVA connection, not yet answered */
	size_t head, tail;
};

static bool fz_bound(void)
{
	return iommu_pasid_domain(fz_d.iommu, FZ_VF, VGPU_SVA_PASID) != NULL;
}

/* One int64 of the ivshmem protocol, with its fd (else -1). */
static int64_t fz_recv(int sock, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	int64_t v;
	struct iovec iov = { .iov_base = &v, .iov_len = sizeof(v) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	*fd = -1;
	if (recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(v))
		abort();	/* every message is sent before admit returns */
	c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	return v;
}

/* The next message is @val, with an fd or without; the fd goes to @keep or is closed. */
static void fz_expect(int sock, int64_t val, bool with_fd, int *keep)
{
	int fd;

	if (fz_recv(sock, &fd) != val || (fd >= 0) != with_fd)
		abort();
	if (keep)
		*keep = fd;
	else if (fd >= 0)
		close(fd);
}

/* @sock's peer has closed it, with nothing left to read. */
static void fz_expect_eof(int sock)
{
	char c;

	if (recv(sock, &c, 1, MSG_DONTWAIT) != 0)
		abort();
}

static void fz_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* The daemon has let the guest go: its SVA connection is closed and nothing is bound. */
static void fz_guest_gone(struct fz *f)
{
	fz_close(&f->guest);
	for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
		fz_close(&f->vec[v]);
	if (f->sva >= 0)
		fz_expect_eof(f->sva);
	fz_close(&f->sva);
	f->bound = f->pri = false;
	f->head = f->tail = 0;
}

/* The status the daemon must give the @n bytes @p it read as one request (ep_sva_check,
 * then the binding's state), and the model's binding after it. */
static int fz_model(struct fz *f, const uint8_t *p, size_t n)
{
	struct vgpu_sva_req rq;

	if (n != sizeof(rq))
		return -EBADMSG;
	memcpy(&rq, p, sizeof(rq));
	if (rq.magic != VGPU_SVA_MAGIC)
		return -EBADMSG;
	if (!vgpu_abi_compatible(rq.abi_version))
		return -EPROTO;
	if (rq.flags || rq.reserved)
		return -EINVAL;
	if (rq.op == VGPU_SVA_OP_BIND) {
		if (f->bound)
			return -EBUSY;
		f->bound = true;
		return 0;
	}
	if (rq.op == VGPU_SVA_OP_UNBIND) {
		if (!f->bound)
			return -ENOENT;
		f->bound = f->pri = false;
		return 0;
	}
	if (rq.op == VGPU_SVA_OP_PRI) {
		if (!f->bound)
			return -ENOENT;
		if (f->pri)
			return -EBUSY;
		f->pri = true;
		return 0;
	}
	return -EINVAL;
}

/* The next read's size of what is pending (up to one request), and whether the daemon
 * takes it without a reply: exactly a page response (no request is ever outstanding
 * here, so every one is a stray answer, dropped). */
static size_t fz_next_read(const struct fz *f, bool *silent)
{
	size_t n = f->tail - f->head;
	uint32_t magic;

	if (n > sizeof(struct vgpu_sva_req))
		n = sizeof(struct vgpu_sva_req);
	memcpy(&magic, f->pending + f->head, sizeof(magic));
	*silent = n == sizeof(struct vgpu_sva_page_resp) && magic == VGPU_SVA_PRQ_MAGIC;
	return n;
}

/* Drop the pending reads the daemon answers with nothing. */
static void fz_skip_silent(struct fz *f)
{
	bool silent = true;

	while (f->tail - f->head >= sizeof(uint32_t) && silent) {
		size_t n = fz_next_read(f, &silent);

		if (silent)
			f->head += n;
	}
}

/* The replies the last round produced: each answers one read, which takes up to one
 * request's size of what was pending (a stream has no message boundaries). */
static void fz_replies(struct fz *f)
{
	struct vgpu_sva_reply rp;
	struct vgpu_sva_req rq;
	ssize_t r;

	while (f->sva >= 0 && (r = recv(f->sva, &rp, sizeof(rp), MSG_DONTWAIT)) > 0) {
		size_t n;
		bool silent, bind;
		int want;

		fz_skip_silent(f);
		if (r != (ssize_t)sizeof(rp) || f->head == f->tail)
			abort();	/* a whole reply, to bytes that were sent */
		n = fz_next_read(f, &silent);
		memcpy(&rq, f->pending + f->head, sizeof(rq));
		bind = n == sizeof(rq) && rq.op == VGPU_SVA_OP_BIND;
		want = fz_model(f, f->pending + f->head, n);
		f->head += n;
		if (rp.magic != VGPU_SVA_MAGIC || rp.status != want || rp.reserved)
			abort();
		if (!memchr(rp.why, 0, sizeof(rp.why)))
			abort();
		if (want && (!rp.why[0] || rp.pasid))
			abort();	/* a refusal names its reason and binds nothing */
		if (!want && rp.pasid != (bind ? VGPU_SVA_PASID : 0))
			abort();	/* only a BIND names the PASID */
		if (f->bound != fz_bound())
			abort();	/* what the model says the request did, and no more */
	}
	fz_skip_silent(f);
	if (f->head == f->tail)
		f->head = f->tail = 0;
}

/* Serve the endpoint as the daemon's loop does until nothing is readable. */
static void fz_serve(struct fz *f)
{
	for (int r = 0; r < FZ_ROUNDS; r++) {
		struct pollfd p[PF_EP_MAX_POLLFDS];
		int n = pf_endpoint_pollfds(&fz_s, p, PF_EP_MAX_POLLFDS), ready;

		if (n <= 0)
			abort();
		/* libFuzzer's -timeout watchdog is a SIGALRM: poll() may end in EINTR. */
		do
			ready = poll(p, (nfds_t)n, 0);
		while (ready < 0 && errno == EINTR);
		if (ready < 0)
			abort();
		if (!ready) {
			if (f->head != f->tail)
				abort();	/* bytes sent and never answered */
			return;
		}
		pf_endpoint_handle(&fz_d, &fz_s, p, n);
		fz_replies(f);
	}
	abort();	/* something stays readable whatever the daemon does */
}

/* A new connection from this process, or with @other from its parent. */
static void fz_connect(struct fz *f, bool other)
{
	pid_t pid = other ? getppid() : getpid();
	int sp[2], pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (pidfd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		abort();
	/* A guest whose connection is closed but not yet served is replaced. */
	if (f->guest < 0 && pf_endpoint_attached(&fz_s)) {
		if (other)
			abort();
		pf_endpoint_admit(&fz_d, &fz_s, sp[0], getuid(), pid, pidfd);
		fz_guest_gone(f);
	} else {
		pf_endpoint_admit(&fz_d, &fz_s, sp[0], getuid(), pid, pidfd);
	}
	if (!pf_endpoint_attached(&fz_s))
		abort();
	if (f->guest < 0) {
		/* The greeting, in QEMU's order (vgpu/vf_bar.h). */
		fz_expect(sp[1], VF_EP_PROTO_VERSION, false, NULL);
		fz_expect(sp[1], FZ_VF, false, NULL);
		fz_expect(sp[1], -1, true, NULL);
		for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
			fz_expect(sp[1], 0, true, &f->vec[v]);
		for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
			fz_expect(sp[1], FZ_VF, true, NULL);
		f->guest = sp[1];
	} else if (!other && f->sva < 0) {
		fz_expect(sp[1], VGPU_SVA_HELLO, false, NULL);
		f->sva = sp[1];
	} else {
		fz_expect(sp[1], VF_EP_REFUSED, false, NULL);
		fz_expect_eof(sp[1]);
		close(sp[1]);
	}
}

static void fz_sva_write(struct fz *f, const void *p, size_t n)
{
	if (f->sva < 0 || !n)
		return;
	if (f->tail + n > sizeof(f->pending) ||
	    send(f->sva, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)n)
		abort();
	memcpy(f->pending + f->tail, p, n);
	f->tail += n;
}

static void fz_request(struct fz *f, const uint8_t *p)
{
	struct vgpu_sva_req rq = { .magic = VGPU_SVA_MAGIC, .abi_version = VGPU_ABI_VERSION,
				   .op = p[0] };

	if (p[1] & 1)
		rq.magic ^= 1;
	if (p[1] & 2)
		rq.abi_version += 1u << 16;
	if (p[1] & 4)
		rq.flags = 1;
	if (p[1] & 8)
		rq.reserved = 1;
	fz_sva_write(f, &rq, sizeof(rq) - !!(p[1] & 16));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz f = { .guest = -1, .sva = -1 };
	int fds = fz_fd_count();
	uint64_t cnt;
	size_t i = 0;

	for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
		f.vec[v] = -1;
	if (pf_endpoint_open_unlistened(&fz_s))
		abort();
	while (i < size) {
		uint8_t k = data[i++] % 7;
		const uint8_t *p = data + i;
		size_t left = size - i;

		switch (k) {
		case 0:
			if (left < 1)
				goto out;
			fz_connect(&f, (p[0] & 1) && f.guest >= 0);
			i += 1;
			break;
		case 1:
			if (left < 1 || left < 1u + p[0])
				goto out;
			fz_sva_write(&f, p + 1, p[0]);
			i += 1u + p[0];
			break;
		case 2:
			if (left < 2)
				goto out;
			fz_request(&f, p);
			i += 2;
			break;
		case 3:
			fz_close(&f.sva);
			f.bound = f.pri = false;	/* its close unbinds */
			f.head = f.tail = 0;
			break;
		case 4:
			if (left < 1 || left < 1u + p[0])
				goto out;
			if (f.guest >= 0 && p[0] &&
			    send(f.guest, p + 1, p[0], MSG_DONTWAIT | MSG_NOSIGNAL) != p[0])
				abort();
			i += 1u + p[0];
			break;
		case 5:
			if (left < 1)
				goto out;
			i += 1;
			if (f.guest < 0)
				break;
			fz_close(&f.guest);
			if (p[0] & 1) {
				fz_connect(&f, false);
				break;
			}
			fz_serve(&f);
			if (pf_endpoint_attached(&fz_s))
				abort();
			fz_guest_gone(&f);
			break;
		default:
			if (left < 1)
				goto out;
			cnt = 1;
			if (f.vec[p[0] % VF_NR_VECTORS] >= 0 &&
			    write(f.vec[p[0] % VF_NR_VECTORS], &cnt, sizeof(cnt)) != sizeof(cnt))
				abort();
			i += 1;
			break;
		}
		fz_serve(&f);
		if (pf_endpoint_attached(&fz_s) != (f.guest >= 0) || f.bound != fz_bound())
			abort();
	}
out:
	pf_endpoint_close(&fz_d, &fz_s);
	if (fz_bound() || fz_s.ep)
		abort();
	if (f.guest >= 0)
		fz_expect_eof(f.guest);
	fz_guest_gone(&f);
	/* The guest's kicks of the device vector land on the device's eventfd. */
	if (read(fz_s.kick_fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		abort();
	if (fz_fd_count() != fds)
		abort();	/* a descriptor the endpoint kept */
	return 0;
}
