// SPDX-License-Identifier: MIT
/* Per-VF endpoints: an ivshmem-server on <runtime>/vf<N>.sock (vgpud is peer 0) and on
 * <runtime>/vf<N>.master.sock (the guest is peer 0, as QEMU's master=on needs to migrate)
 * handing out the VF's BAR2 object and the eventfd vectors, and the mailbox behind them;
 * what the attached guest announced of its ABI. Layout and protocol are ABI:
 * include/vgpu/vf_bar.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <poll.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/efd.h"
#include "common/lock.h"
#include "common/log.h"
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "pf_manager/migrate_internal.h"
#include <vgpu/gmmu.h>
#include <vgpu/rm.h>
#include <vgpu/sva.h>

/* Page requests of the bound process forwarded to the guest (vgpu/sva.h, ABI 2.4). */
struct ep_pri {
	struct cmn_mutex lock;		/* writes on the SVA connection: replies and requests */
	int fd;				/* the SVA connection while PRI is on, else -1 */
	struct iommu *mmu;
	_Atomic uint64_t forwarded, answered, refused, dropped;
};

struct pf_endpoint {
	int listen_fd;			/* vf<N>.sock: vgpud is peer 0 */
	int master_fd;			/* vf<N>.master.sock: the guest is peer 0 */
	int client_fd;			/* -1 while detached */
	bool guest_peer0;		/* the attached guest came through master_fd */
	_Atomic uint32_t guest_abi;	/* what it announced in GET_INFO (service thread
					 * writes), 0: nothing (a driver before minor 3) */
	_Atomic uint32_t guest_flags;	/* VF_INFO_REQ_* it asked for (minor 5), likewise */
	int to_host[VF_NR_VECTORS];	/* guest rings us: we read */
	int to_guest[VF_NR_VECTORS];	/* we interrupt the guest: we write */
	uint32_t to_guest_cut;		/* bit v: the guest keeps to_guest[v] full and blocking,
					 * left alone until it attaches again (ep_signal) */
	uint64_t refusals;		/* attaches refused, SVA requests refused (ep_warn_limited) */
	uint64_t sva_refusals;
	uid_t peer_uid;
	pid_t peer_pid;			/* SO_PEERCRED of the attached guest (QEMU for a VM) */
	int peer_pidfd;			/* that process itself (its number may be reused), or -1 */
	int sva_fd;			/* the guest's SVA connection (vgpu/sva.h), or -1 */
	struct iommu *sva_mmu;		/* set while the guest's address space is bound */
	struct iommu_domain *sva_dom;
	struct ep_pri pri;
	/* A guest's leaving whose mailbox request in hand is not done yet (ep_mbox_forget()):
	 * no guest attaches until it is; what is left to do then. Loop thread only. */
	bool detaching;
	bool forget_moves;		/* its queued requests stay: they move with the slice */
	bool forget_rm;			/* its RM state goes (pf_rm_guest_gone()) */
	char path[PF_PATH_MAX + 16];
	char master_path[PF_PATH_MAX + 16];
};

#define EP_WARN_FIRST	8	/* guest-driven warnings logged before the doubling rule */

/* A warning a guest can repeat at will (a refused attach or SVA request), counted in *@n:
 * the first EP_WARN_FIRST go to the log, then each power of two with its count, so that a
 * flood costs a line per doubling and leaves other tenants' lines their share of the log. */
static void __attribute__((format(printf, 4, 5)))
ep_warn_limited(const struct pf_slice *s, uint64_t *n, const char *what, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	++*n;
	if (*n > EP_WARN_FIRST && (*n & (*n - 1)))
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	cmn_warn("VF %u: %s: %s (%" PRIu64 " so far%s)", s->vf, what, why, *n,
		 *n > EP_WARN_FIRST ? "; logged at each doubling" : "");
}

/* ---- BAR2 control area ------------------------------------------------------------------ */
/* The whole BAR is shared with the guest, header included: vgpud writes the header but
 * never believes it afterwards (its own copies of the geometry, the reset count and the
 * ring views are what count), except the guest's own state word, which can only stop
 * the guest's own mailbox. */

/* vgpud's ivshmem peer id for the guest attached now (or the next one: 0 until then). */
static uint32_t ep_host_peer(const struct pf_slice *s)
{
	return s->ep && s->ep->client_fd >= 0 && s->ep->guest_peer0 ? VF_EP_HOST_PEER : 0;
}

/* The ABI minor 1 and 3 fields: what this daemon placed in BAR2 and the IOMMU, and who is
 * peer 0 (a reset re-formats the header under an attached guest: it must stay right). */
static void bar_minor1_fields(struct pf_slice *s)
{
	struct vf_bar_header *h = s->hdr;
	uint64_t ctrl = s->bar_size - VF_BAR_CTRL_SIZE;

	h->db_off = ctrl + VF_BAR_DB_OFF;
	h->dma_iova = s->dma_iova;
	h->intr_off = ctrl + VF_BAR_INTR_OFF;
	h->nr_runlists = s->nr_runlists;
	h->host_peer = ep_host_peer(s);
}

/* The control area's first page, where an ABI 1 driver looks for the header: magic and
 * version only, so that such a driver refuses the version by name instead of a bad magic. */
static void bar_legacy_stub(struct pf_slice *s)
{
	struct vf_bar_header *old = (struct vf_bar_header *)s->bar;

	memset(old, 0, sizeof(*old));
	old->abi_version = VGPU_ABI_VERSION;
	old->header_size = sizeof(*old);
	old->magic = VF_BAR_MAGIC;
}

void pf_bar_format(struct pf_slice *s)
{
	struct vf_bar_header *h = s->hdr;
	uint64_t ctrl = s->bar_size - VF_BAR_CTRL_SIZE;

	VGPU_ASSERT((uint8_t *)h == s->bar + VF_BAR_HDR_CTRL_OFF);
	pf_svc_pause(s);	/* the VF's service thread keeps out of the rings meanwhile */
	bar_legacy_stub(s);
	atomic_store((_Atomic uint32_t *)&h->state, VF_STATE_RESETTING);
	h->abi_version = VGPU_ABI_VERSION;
	h->header_size = sizeof(*h);
	h->vf_id = s->vf;
	h->nr_vectors = VF_NR_VECTORS;
	h->bar_size = s->bar_size;
	h->vram_off = 0;
	h->vram_size = s->prov.vram;
	h->ctrl_off = ctrl;
	h->dma_size = s->dma_size;
	h->dma_off = ctrl - s->dma_size;
	h->req_off = ctrl + VF_BAR_REQ_OFF;
	h->rsp_off = ctrl + VF_BAR_RSP_OFF;
	h->evt_off = ctrl + VF_BAR_EVT_OFF;
	h->ring_region_size = VF_BAR_RING_REGION;
	h->channels = s->prov.channels;
	h->doorbells = s->prov.doorbells;
	h->exec_quantum_ms = pf_quantum_ms(s->prov.exec_quantum_us);
	h->preempt_timeout_us = s->prov.preempt_timeout_us;
	memcpy(h->slice_uuid, s->uuid_bytes, 16);
	/* The doorbell page is the device's (gpu_doorbell_page_back at bring-up): not touched. */
	memset(s->bar + VF_BAR_INTR_OFF, 0, sizeof(struct vf_intr_page));
	s->chan_err_seen = 0;
	bar_minor1_fields(s);
	cmn_ring_format(s->bar + VF_BAR_REQ_OFF, VF_BAR_RING_REGION, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	cmn_ring_format(s->bar + VF_BAR_RSP_OFF, VF_BAR_RING_REGION, VF_MBOX_SLOTS, VF_MBOX_SLOT_SIZE);
	cmn_ring_format(s->bar + VF_BAR_EVT_OFF, VF_BAR_RING_REGION, VF_EVT_SLOTS, VF_EVT_SLOT_SIZE);
	cmn_ring_attach(&s->req, s->bar + VF_BAR_REQ_OFF, VF_BAR_RING_REGION);
	cmn_ring_attach(&s->rsp, s->bar + VF_BAR_RSP_OFF, VF_BAR_RING_REGION);
	cmn_ring_attach(&s->evt, s->bar + VF_BAR_EVT_OFF, VF_BAR_RING_REGION);
	s->mbox_broken = false;
	atomic_store((_Atomic uint32_t *)&h->reset_count, (uint32_t)s->resets);
	/* Magic and READY last: a guest that sees them sees a complete control area. */
	h->magic = VF_BAR_MAGIC;
	atomic_store((_Atomic uint32_t *)&h->state, VF_STATE_READY);
	pf_svc_resume(s);
}

int pf_bar_adopt_rings(struct pf_slice *s)
{
	if (cmn_ring_attach(&s->req, s->bar + VF_BAR_REQ_OFF, VF_BAR_RING_REGION) ||
	    cmn_ring_attach(&s->rsp, s->bar + VF_BAR_RSP_OFF, VF_BAR_RING_REGION) ||
	    cmn_ring_attach(&s->evt, s->bar + VF_BAR_EVT_OFF, VF_BAR_RING_REGION) ||
	    s->req.elem_size != VF_MBOX_SLOT_SIZE || s->rsp.elem_size != VF_MBOX_SLOT_SIZE ||
	    s->evt.elem_size != VF_EVT_SLOT_SIZE)
		return -EPROTO;
	return 0;
}

int pf_bar_attach(struct pf_slice *s)
{
	struct vf_bar_header *h = s->hdr;

	if (h->magic != VF_BAR_MAGIC || !vgpu_abi_compatible(h->abi_version) ||
	    h->vf_id != s->vf || h->bar_size != s->bar_size || h->vram_size != s->prov.vram)
		return -EPROTO;
	if (pf_bar_adopt_rings(s))
		return -EPROTO;
	s->resets = h->reset_count;
	bar_legacy_stub(s);
	/* An adopted BAR may come from an older daemon: newly attaching guests see what this
	 * one provides (additive fields only, the attached guest keeps its view). */
	bar_minor1_fields(s);
	h->nr_vectors = VF_NR_VECTORS;	/* what the greeting hands over */
	h->abi_version = VGPU_ABI_VERSION;
	return 0;
}

int pf_bar_adopt_ctrl(struct pf_slice *s)
{
	/* The source's header, but this daemon's VF (the same one when the guest's state
	 * moved) and its attachment (bar_minor1_fields() in pf_bar_attach()). */
	s->hdr->vf_id = s->vf;
	return pf_bar_attach(s);
}

/* ---- notification ---------------------------------------------------------------------- */

/* Interrupt the guest on @vec. The guest holds the eventfd too (the same open file
 * description) and can clear O_NONBLOCK and fill the counter, which would keep this write,
 * and the loop thread with it, waiting for the guest: it is cut after CMN_EFD_BOUND_MS
 * (common/efd.h), and a vector cut once is not written again until the guest attaches
 * again, so a guest costs the loop that bound at most once per vector and attachment. */
static void ep_signal(struct pf_slice *s, unsigned int vec)
{
	struct pf_endpoint *ep = s->ep;
	int r;

	if (!ep || ep->client_fd < 0 || (ep->to_guest_cut & (1u << vec)))
		return;
	r = cmn_efd_write(ep->to_guest[vec], 1);
	if (r == -EINTR) {
		ep->to_guest_cut |= 1u << vec;
		cmn_warn("VF %u: the guest keeps vector %u full and blocking: not signalled "
			 "until it attaches again", s->vf, vec);
	} else if (r) {
		cmn_dbg("VF %u: vector %u not signalled: %s", s->vf, vec, cmn_strerror(r));
	}
}

/* The device interrupted the VF: forward the status bits to the interrupt page and the
 * fault buffer's entries to the event ring, then interrupt the guest on VF_VEC_GPU. At most
 * a buffer's worth of entries per call, with one signal of the event vector for them: a
 * guest whose channels fault again as fast as it replays them would otherwise keep the
 * loop thread here. What is left waits for the next call, which the interrupt eventfd
 * brings: the buffer held at most a buffer's worth at the second ack, so an entry left
 * after that many were popped came in after it, and the first fault after an ack raises
 * its bit again and writes the eventfd. */
static void ep_forward_intr(struct pf_daemon *d, struct pf_slice *s)
{
	struct vf_intr_page *ip = (struct vf_intr_page *)(s->bar + VF_BAR_INTR_OFF);
	struct vgpu_fault_entry f;
	uint32_t st = gpu_intr_ack(d->gpu, s->vf, ~0u);
	unsigned int popped = 0;
	uint64_t cnt;
	int r;

	/* The device's own eventfd (no guest holds it), read as the vectors are. */
	r = cmn_efd_read(s->intr_fd, &cnt);
	if (r && r != -EAGAIN)
		cmn_dbg("VF %u: interrupt read: %s", s->vf, cmn_strerror(r));
	/* Bits raised after the ack signal the eventfd again: nothing is lost. */
	st |= gpu_intr_ack(d->gpu, s->vf, ~0u);
	while (popped < GPU_FAULT_BUF_ENTRIES && gpu_fault_pop(d->gpu, s->vf, &f) == 0) {
		struct vf_event ev = { .type = VF_EVT_MMU_FAULT, .arg0 = f.chid, .arg1 = f.reason,
				       .timestamp_ns = cmn_now_ns() };

		memcpy(ev.pad, &f, sizeof(f));
		if (cmn_ring_push(&s->evt, &ev, sizeof(ev)))
			cmn_dbg("VF %u: fault event dropped (ring full)", s->vf);
		s->faults++;
		popped++;
	}
	if (popped)
		ep_signal(s, VF_VEC_EVENT);
	/* Channel errors come from the GSP through the RM, whose event wakes this eventfd. */
	pf_rm_chan_events(d, s);
	if (!st)
		return;
	atomic_fetch_or((_Atomic uint32_t *)&ip->status, st);
	atomic_fetch_add((_Atomic uint64_t *)&ip->count, 1);
	s->intrs++;
	ep_signal(s, VF_VEC_GPU);
}

void pf_endpoint_event(struct pf_slice *s, uint32_t type, uint64_t arg0)
{
	pf_endpoint_event2(s, type, arg0, 0);
}

void pf_endpoint_event2(struct pf_slice *s, uint32_t type, uint64_t arg0, uint64_t arg1)
{
	struct vf_event ev = { .type = type, .arg0 = arg0, .arg1 = arg1,
			       .timestamp_ns = cmn_now_ns() };

	/* A full event ring means the guest is not listening; the header still tells. */
	if (cmn_ring_push(&s->evt, &ev, sizeof(ev)))
		cmn_dbg("VF %u: event %u dropped (ring full)", s->vf, type);
	ep_signal(s, VF_VEC_EVENT);
}

/* ---- the ivshmem server -------------------------------------------------------------------- */

static int send_msg(int sock, int64_t val, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = &val, .iov_len = sizeof(val) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	/* The protocol is little-endian int64; so is every host we build for. */
	if (fd >= 0) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	do {
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(val) ? 0 : -EIO;
}

static void ep_drop_vectors(struct pf_endpoint *ep)
{
	for (unsigned int v = 0; v < VF_NR_VECTORS; v++) {
		if (ep->to_host[v] >= 0)
			close(ep->to_host[v]);
		if (ep->to_guest[v] >= 0)
			close(ep->to_guest[v]);
		ep->to_host[v] = ep->to_guest[v] = -1;
	}
	ep->to_guest_cut = 0;
}

/* ---- the peer process: a pidfd, never just a pid number ----------------------------------- */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD	77		/* Linux 6.5; older headers lack it */
#endif

/* Whether @pidfd's process has not exited (a pidfd polls readable from its exit on). */
static bool ep_pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r;

	/* A signal cuts even a poll that does not wait: it says nothing of the process. */
	do
		r = pidfd >= 0 ? poll(&p, 1, 0) : 1;
	while (r < 0 && errno == EINTR);
	return r == 0;
}

/* Now, in clock ticks since boot: the unit of /proc/PID/stat's starttime. */
static uint64_t ep_boot_ticks(void)
{
	struct timespec ts;
	uint64_t hz = (uint64_t)sysconf(_SC_CLK_TCK);

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * hz + (uint64_t)ts.tv_nsec * hz / 1000000000u;
}

/* starttime (field 22) of /proc/@pid/stat, or 0 if it cannot be read. The command name
 * (field 2) may hold spaces and parentheses: fields are counted after its last ')'. */
static uint64_t ep_start_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long t = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu", &t) != 1)
		return 0;
	return t;
}

/* A pidfd of the process at the other end of @c (SO_PEERCRED pid @pid), taken when it is
 * accepted (@accepted, ep_boot_ticks()): SO_PEERPIDFD, which names the very process that
 * connected; on kernels without it, pidfd_open(@pid), but only if the process with that
 * number started no later than the accept (a later one got the number after the peer
 * exited) and was still alive after the check. The pidfd, or -errno. */
static int ep_peer_pidfd(int c, pid_t pid, uint64_t accepted)
{
	int fd = -1;
	socklen_t len = sizeof(fd);
	uint64_t start;

	if (!getsockopt(c, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) && fd >= 0)
		return fd;
	if (errno != ENOPROTOOPT)
		return -errno;	/* the kernel knows the peer and says it is gone */
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -errno;
	start = ep_start_ticks(pid);
	if (!start || start > accepted || !ep_pidfd_alive(fd)) {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

/* ---- SVA (vgpu/sva.h): the attached local guest's own address space at a PASID -------- */

/* End PRI first: the disable answers what is outstanding Invalid (those accesses fault)
 * and returns once no handler call runs, so nothing is sent on the connection after. */
static void ep_pri_off(struct pf_slice *s)
{
	struct ep_pri *pr = &s->ep->pri;

	if (!pr->mmu)
		return;
	iommu_pri_disable(pr->mmu, s->vf);
	cmn_mutex_lock(&pr->lock);
	pr->fd = -1;
	cmn_mutex_unlock(&pr->lock);
	pr->mmu = NULL;
	cmn_info("VF %u: SVA page requests off: %llu forwarded, %llu answered, %llu refused, "
		 "%llu answers dropped", s->vf, (unsigned long long)atomic_load(&pr->forwarded),
		 (unsigned long long)atomic_load(&pr->answered),
		 (unsigned long long)atomic_load(&pr->refused),
		 (unsigned long long)atomic_load(&pr->dropped));
}

void pf_endpoint_sva_unbind(struct pf_slice *s, const char *why)
{
	struct pf_endpoint *ep = s->ep;
	int r;

	if (!ep || !ep->sva_dom)
		return;
	ep_pri_off(s);
	/* Detach waits for accesses in flight: once it returns the device reaches nothing of
	 * the process, so the domain can go. */
	r = iommu_pasid_detach(ep->sva_mmu, s->vf, VGPU_SVA_PASID);
	if (!r)
		r = iommu_domain_free(ep->sva_dom);
	if (r)
		cmn_warn("VF %u: SVA unbind: %s", s->vf, cmn_strerror(r));
	cmn_info("VF %u: SVA: pid %d unbound (%s)", s->vf, (int)ep->peer_pid, why);
	ep->sva_dom = NULL;
	ep->sva_mmu = NULL;
}

static void ep_sva_close(struct pf_slice *s, const char *why)
{
	struct pf_endpoint *ep = s->ep;

	pf_endpoint_sva_unbind(s, why);
	if (ep->sva_fd >= 0)
		close(ep->sva_fd);
	ep->sva_fd = -1;
}

/* Whether this daemon may reach @pid's memory at all (the ptrace access rules of
 * process_vm_readv): one byte at address 0 is -EFAULT when it may, -EPERM when it may not,
 * so a bind that could only ever fault is refused with the reason instead. */
static int ep_sva_probe(pid_t pid, char *why, size_t wlen)
{
	char c;
	struct iovec l = { &c, 1 }, r = { NULL, 1 };

	if (process_vm_readv(pid, &l, 1, &r, 1, 0) >= 0 || errno == EFAULT)
		return 0;
	if (errno == ESRCH) {
		snprintf(why, wlen, "pid %d is gone", (int)pid);
		return -ESRCH;
	}
	snprintf(why, wlen, "vgpud may not access pid %d's memory (%s): SVA reaches only "
		 "processes of vgpud's own user (uid %u)", (int)pid, cmn_strerror(-errno),
		 (unsigned int)getuid());
	return -EPERM;
}

/* Bind the attached guest process, nothing else: the request came on a connection whose
 * peer was checked at accept to be that very process. The domain gets the process's pidfd,
 * so it reaches nothing once the process has exited, whoever gets its pid next. */
static int ep_sva_bind(struct pf_daemon *d, struct pf_slice *s, char *why, size_t wlen)
{
	struct pf_endpoint *ep = s->ep;
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_SVA, .pid = ep->peer_pid,
				       .flags = IOMMU_DOMAIN_SVA_PIDFD, .pidfd = ep->peer_pidfd };
	struct iommu_domain *dom;
	int r;

	if (ep->sva_dom) {
		snprintf(why, wlen, "already bound (pid %d at PASID %u)", (int)ep->peer_pid,
			 VGPU_SVA_PASID);
		return -EBUSY;
	}
	if (!d->iommu) {
		snprintf(why, wlen, "this device has no IOMMU");
		return -ENODEV;
	}
	if (!ep_pidfd_alive(ep->peer_pidfd)) {
		snprintf(why, wlen, "the attached process (pid %d) has exited", (int)ep->peer_pid);
		return -ESRCH;
	}
	r = ep_sva_probe(ep->peer_pid, why, wlen);
	if (r)
		return r;
	r = iommu_domain_alloc(d->iommu, &o, &dom);
	if (r) {
		snprintf(why, wlen, "SVA domain for pid %d: %s", (int)ep->peer_pid, cmn_strerror(r));
		return r;
	}
	r = iommu_pasid_attach(d->iommu, s->vf, VGPU_SVA_PASID, dom);
	if (r) {
		iommu_domain_free(dom);
		snprintf(why, wlen, "attach at PASID %u: %s", VGPU_SVA_PASID, cmn_strerror(r));
		return r;
	}
	ep->sva_mmu = d->iommu;
	ep->sva_dom = dom;
	cmn_info("VF %u: SVA: pid %d bound at PASID %u", s->vf, (int)ep->peer_pid, VGPU_SVA_PASID);
	return 0;
}

/* Check one request field by field; the first wrong one is named and nothing changes. */
static int ep_sva_check(const struct vgpu_sva_req *rq, ssize_t n, char *why, size_t wlen)
{
	if (n != (ssize_t)sizeof(*rq))
		return snprintf(why, wlen, "request is %zd bytes, not %zu", n, sizeof(*rq)), -EBADMSG;
	if (rq->magic != VGPU_SVA_MAGIC)
		return snprintf(why, wlen, "magic 0x%08x is not VGPU_SVA_MAGIC", rq->magic), -EBADMSG;
	if (!vgpu_abi_compatible(rq->abi_version))
		return snprintf(why, wlen, "abi_version %u.%u: this vgpud speaks %u.%u",
				VGPU_ABI_VERSION_MAJOR(rq->abi_version),
				VGPU_ABI_VERSION_MINOR(rq->abi_version), VGPU_ABI_MAJOR,
				VGPU_ABI_MINOR), -EPROTO;
	if (rq->flags)
		return snprintf(why, wlen, "flags 0x%x: none are defined", rq->flags), -EINVAL;
	if (rq->reserved)
		return snprintf(why, wlen, "reserved is not 0"), -EINVAL;
	if (rq->op != VGPU_SVA_OP_BIND && rq->op != VGPU_SVA_OP_UNBIND &&
	    rq->op != VGPU_SVA_OP_PRI)
		return snprintf(why, wlen, "op %u is not BIND (1), UNBIND (2) or PRI (3)", rq->op),
		       -EINVAL;
	return 0;
}

/* The IOMMU's PRI handler for the VF, in the engine thread whose access failed: forward a
 * request for the bound process to the guest and return; the engine waits for the answer
 * (or the IOMMU's timeout). Another PASID, or a connection going away, is Invalid now. */
static void ep_pri_handler(void *ctx, const struct iommu_page_request *req)
{
	struct ep_pri *pr = ctx;
	struct vgpu_sva_page_req m = {
		.magic = VGPU_SVA_PRQ_MAGIC, .id = req->prg_index, .addr = req->addr,
		.access = (req->access & IOMMU_READ ? VGPU_SVA_ACCESS_READ : 0) |
			  (req->access & IOMMU_WRITE ? VGPU_SVA_ACCESS_WRITE : 0),
	};
	bool sent = false;

	if (req->pasid == VGPU_SVA_PASID) {
		/* Never blocks: a guest that stops reading gets its requests refused. */
		cmn_mutex_lock(&pr->lock);
		sent = pr->fd >= 0 && send(pr->fd, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL) ==
				      (ssize_t)sizeof(m);
		cmn_mutex_unlock(&pr->lock);
	}
	if (sent) {
		atomic_fetch_add(&pr->forwarded, 1);
		return;
	}
	atomic_fetch_add(&pr->refused, 1);
	iommu_page_response(pr->mmu, req->rid, req->prg_index, IOMMU_PRG_INVALID);
}

/* VGPU_SVA_OP_PRI: page requests of the binding go to this connection from now on. */
static int ep_pri_on(struct pf_slice *s, char *why, size_t wlen)
{
	struct pf_endpoint *ep = s->ep;
	struct ep_pri *pr = &ep->pri;
	int r;

	if (!ep->sva_dom)
		return snprintf(why, wlen, "PRI: not bound"), -ENOENT;
	if (pr->mmu)
		return snprintf(why, wlen, "PRI: already on"), -EBUSY;
	cmn_mutex_lock(&pr->lock);
	pr->fd = ep->sva_fd;
	cmn_mutex_unlock(&pr->lock);
	pr->mmu = ep->sva_mmu;
	atomic_store(&pr->forwarded, 0);
	atomic_store(&pr->answered, 0);
	atomic_store(&pr->refused, 0);
	atomic_store(&pr->dropped, 0);
	r = iommu_pri_enable(pr->mmu, s->vf, VGPU_SVA_PRI_MAX_OUTSTANDING, ep_pri_handler, pr);
	if (r) {
		cmn_mutex_lock(&pr->lock);
		pr->fd = -1;
		cmn_mutex_unlock(&pr->lock);
		pr->mmu = NULL;
		return snprintf(why, wlen, "PRI: %s", cmn_strerror(r)), r;
	}
	cmn_info("VF %u: SVA page requests forwarded to pid %d (at most %u outstanding)",
		 s->vf, (int)ep->peer_pid, VGPU_SVA_PRI_MAX_OUTSTANDING);
	return 0;
}

/* The guest's answer to a page request: the IOMMU retries the access (status 0) or faults
 * it. A malformed answer, or one for a group not outstanding (answered after the device
 * gave up, or never asked), is dropped: it gets no reply, and changes nothing. */
static void ep_pri_answer(struct pf_slice *s, const struct vgpu_sva_page_resp *a)
{
	struct ep_pri *pr = &s->ep->pri;
	const char *bad = NULL;

	if (!pr->mmu)
		bad = "PRI is off";
	else if (a->reserved || a->reserved2)
		bad = "reserved fields are not 0";
	else if (a->id > UINT16_MAX ||
		 iommu_page_response(pr->mmu, s->vf, (uint16_t)a->id,
				     a->status ? IOMMU_PRG_INVALID : IOMMU_PRG_SUCCESS))
		bad = "no such request outstanding";
	if (bad) {
		atomic_fetch_add(&pr->dropped, 1);
		cmn_dbg("VF %u: page response %u dropped: %s", s->vf, a->id, bad);
		return;
	}
	atomic_fetch_add(&pr->answered, 1);
}

/* One request on the SVA connection, one reply; EOF or an error closes it (and unbinds). */
static void ep_sva_request(struct pf_daemon *d, struct pf_slice *s)
{
	struct pf_endpoint *ep = s->ep;
	union {
		struct vgpu_sva_req rq;
		struct vgpu_sva_page_resp pa;
	} m;
	struct vgpu_sva_req rq;
	struct vgpu_sva_reply rp = { .magic = VGPU_SVA_MAGIC };
	ssize_t n;
	int sent;

	/* Its exit may not have been polled yet: a request never sees a binding it outlived. */
	if (ep->sva_dom && !ep_pidfd_alive(ep->peer_pidfd))
		pf_endpoint_sva_unbind(s, "the bound process exited");
	n = recv(ep->sva_fd, &m, sizeof(m), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		ep_sva_close(s, "SVA connection closed");
		return;
	}
	if (n == (ssize_t)sizeof(m.pa) && m.pa.magic == VGPU_SVA_PRQ_MAGIC) {
		ep_pri_answer(s, &m.pa);
		return;
	}
	memcpy(&rq, &m.rq, sizeof(rq));
	rp.status = ep_sva_check(&rq, n, rp.why, sizeof(rp.why));
	if (!rp.status && rq.op == VGPU_SVA_OP_BIND) {
		rp.status = ep_sva_bind(d, s, rp.why, sizeof(rp.why));
		rp.pasid = rp.status ? 0 : VGPU_SVA_PASID;
	} else if (!rp.status && rq.op == VGPU_SVA_OP_PRI) {
		rp.status = ep_pri_on(s, rp.why, sizeof(rp.why));
	} else if (!rp.status && !ep->sva_dom) {
		rp.status = -ENOENT;
		snprintf(rp.why, sizeof(rp.why), "UNBIND: not bound");
	} else if (!rp.status) {
		pf_endpoint_sva_unbind(s, "guest request");
	}
	if (rp.status)
		ep_warn_limited(s, &ep->sva_refusals, "SVA request refused", "%s", rp.why);
	cmn_mutex_lock(&ep->pri.lock);	/* page requests go out on it too */
	sent = send(ep->sva_fd, &rp, sizeof(rp), MSG_DONTWAIT | MSG_NOSIGNAL) ==
	       (ssize_t)sizeof(rp);
	cmn_mutex_unlock(&ep->pri.lock);
	if (!sent)
		ep_sva_close(s, "reply not delivered");
}

/* A second connection from the attached process itself: its SVA connection. */
static void ep_sva_accept(struct pf_slice *s, int c)
{
	struct pf_endpoint *ep = s->ep;

	if (send_msg(c, VGPU_SVA_HELLO, -1)) {
		close(c);
		return;
	}
	ep->sva_fd = c;
	cmn_info("VF %u: SVA connection from the guest (pid %d)", s->vf, (int)ep->peer_pid);
}

/* Drop the requests the guest that left queued, unless they move with the slice (@moves,
 * or the mailbox held: an incoming slice's VMM may be writing the rings). At most a ring's
 * worth: a process that keeps the BAR mapped may still be pushing. The service thread is
 * kept out (paused) or gone. */
static void ep_drop_queued(struct pf_slice *s, bool moves)
{
	unsigned int dropped = 0;
	int err;

	for (uint32_t n = cmn_ring_capacity(&s->req); !moves && !s->mbox_held && n; n--) {
		if (!cmn_ring_consume_slot(&s->req, &err))
			break;
		cmn_ring_consume_commit(&s->req);
		dropped++;
	}
	if (dropped)
		cmn_info("VF %u: %u mailbox requests of the guest that left dropped", s->vf,
			 dropped);
}

/* The rest of a guest's leaving, once no request of it is in hand (the service thread
 * paused, when there is one): its queued requests dropped, a new ring generation, its
 * announcement forgotten (a GET_INFO that was in hand may have made one after it left),
 * its RM state freed. The endpoint takes guests again. */
static void ep_forget_finish(struct pf_daemon *d, struct pf_slice *s)
{
	struct pf_endpoint *ep = s->ep;

	if (s->svc) {		/* the endpoint harness serves the rings itself */
		ep_drop_queued(s, ep->forget_moves);
		pf_svc_resume(s);	/* the new generation */
	}
	atomic_store(&ep->guest_abi, 0);
	atomic_store(&ep->guest_flags, 0);
	if (ep->forget_rm && d->rm_glue)
		pf_rm_guest_gone(d, s->vf);
	ep->detaching = ep->forget_moves = ep->forget_rm = false;
}

/* The mailbox's side of a guest leaving. The rings are the slice's (BAR2), not the
 * attachment's, and the service thread serves them again as soon as the next guest
 * attaches: what this guest asked must not outlive it there. The request in hand is let
 * finish (its reply is dropped: the guest's vector is gone, pf_svc_detach()), the requests
 * the guest left queued are dropped and a new ring generation starts. Then nothing the
 * guest asked runs or is answered once the next guest is attached (that one skips only the
 * replies queued before it attached), and no GET_INFO of it announces an ABI for the next
 * one. The request in hand may be an RM call the GSP takes seconds on, and a guest can
 * leave with one in hand again and again: the loop serves every other socket meanwhile
 * and never waits for it. The endpoint is detaching until the service thread says the
 * request is done (its idle eventfd, which the loop polls: ep_forget_done()), and takes no
 * guest before, so the rings never pass to the next guest with a request of this one in
 * hand. @moves: the guest migrates out and its queued requests go with the control area;
 * so they do while the mailbox is held (an incoming slice: the VMM may be writing the
 * rings). @rm: its RM state goes too, after the request (the disable would wait for the
 * call in hand). A second leaving while one waits (the slice stays after a migration, or
 * a held slice is reclaimed) joins it. */
static void ep_mbox_forget(struct pf_daemon *d, struct pf_slice *s, bool moves, bool rm)
{
	struct pf_endpoint *ep = s->ep;

	ep->forget_moves = ep->detaching ? ep->forget_moves && moves : moves;
	ep->forget_rm |= rm;
	if (pf_svc_pause_or_notify(s)) {
		if (!ep->detaching)
			cmn_info("VF %u: the guest that left has a mailbox request in hand: no "
				 "guest attaches until it is done", s->vf);
		ep->detaching = true;
		return;
	}
	ep_forget_finish(d, s);
}

/* The service thread signalled its idle eventfd: the request in hand may be done. */
static void ep_forget_done(struct pf_daemon *d, struct pf_slice *s)
{
	if (!s->ep->detaching || pf_svc_pause_or_notify(s))
		return;		/* still in hand: the thread signals again */
	ep_forget_finish(d, s);
	cmn_info("VF %u: the request in hand of the guest that left is done: detached", s->vf);
}

void pf_endpoint_guest_left(struct pf_daemon *d, struct pf_slice *s)
{
	if (pf_endpoint_attached(s))
		return;
	if (s->ep)
		ep_mbox_forget(d, s, false, true);
	else if (d->rm_glue)
		pf_rm_guest_gone(d, s->vf);
}

bool pf_endpoint_detaching(const struct pf_slice *s)
{
	return s->ep && s->ep->detaching;
}

static void ep_detach(struct pf_daemon *d, struct pf_slice *s)
{
	struct pf_endpoint *ep = s->ep;
	bool moves;

	/* First of all: the device must not reach the process (or a process that reuses its
	 * pid) once the guest is gone. */
	ep_sva_close(s, "guest detached");
	if (ep->client_fd < 0)
		return;
	/* A daemon without an RM: the endpoint harness. A guest that migrates out: its RM
	 * state and its mailbox go with the slice. Closing (d NULL) is not a guest leaving:
	 * the service thread is stopped, the rings stay for the next daemon. */
	moves = d && pf_live_keep_guest(d, s);
	pf_svc_detach(s);	/* it takes no request after, and lets go of the vectors */
	close(ep->client_fd);
	ep->client_fd = -1;
	if (ep->peer_pidfd >= 0)
		close(ep->peer_pidfd);
	ep->peer_pidfd = -1;
	ep_drop_vectors(ep);
	ep->guest_peer0 = false;
	atomic_store(&ep->guest_abi, 0);
	atomic_store(&ep->guest_flags, 0);
	cmn_info("VF %u: guest detached", s->vf);
	if (d)
		ep_mbox_forget(d, s, moves, !moves);
}

/* Greeting of the ivshmem-server protocol, in QEMU's order (see vgpu/vf_bar.h); @peer0:
 * the guest is peer 0 and vgpud VF_EP_HOST_PEER, else vgpud is 0 and the guest the VF. The
 * header says which before the BAR is handed over, so the guest finds it right at once. */
static int ep_greet(struct pf_slice *s, int c, bool peer0)
{
	struct pf_endpoint *ep = s->ep;
	int64_t host = peer0 ? VF_EP_HOST_PEER : 0, id = peer0 ? 0 : s->vf;
	int r = 0;

	for (unsigned int v = 0; v < VF_NR_VECTORS; v++) {
		/* The kick vector is the device's own eventfd: a guest's kick wakes the
		 * engines directly, with no hop through this daemon. */
		ep->to_host[v] = v == VF_VEC_GPU ? fcntl(s->kick_fd, F_DUPFD_CLOEXEC, 0) :
			eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ep->to_guest[v] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (ep->to_host[v] < 0 || ep->to_guest[v] < 0)
			return -errno;
	}
	s->hdr->host_peer = (uint32_t)host;
	r |= send_msg(c, VF_EP_PROTO_VERSION, -1);
	r |= send_msg(c, id, -1);
	r |= send_msg(c, -1, s->bar_fd);
	for (unsigned int v = 0; !r && v < VF_NR_VECTORS; v++)
		r |= send_msg(c, host, ep->to_host[v]);
	for (unsigned int v = 0; !r && v < VF_NR_VECTORS; v++)
		r |= send_msg(c, id, ep->to_guest[v]);
	return r ? -EIO : 0;
}

/* Say no in a way every client notices: a version nobody speaks, then close. */
static void ep_refuse(int c)
{
	send_msg(c, VF_EP_REFUSED, -1);
	close(c);
}

static bool ep_peer_allowed(const struct pf_slice *s, uid_t uid)
{
	return uid == 0 || (s->owner_uid >= 0 && (uid_t)s->owner_uid == uid);
}

/* Whether the attached guest's connection has been closed by its end (the loop may not
 * have seen the hangup yet when the same process connects again). */
static bool ep_client_closed(const struct pf_endpoint *ep)
{
	struct pollfd p = { .fd = ep->client_fd, .events = POLLIN };
	char c;
	int r;

	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR))
		return true;
	return (p.revents & POLLIN) && recv(ep->client_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Whether a connection from @pid (@pidfd) is the attached process's SVA connection. Only
 * the attached process itself can open a second connection with its pid: QEMU never does,
 * and nothing inside a VM can make it. Same number and both alive is the same process (a
 * live process keeps its number); one that got the number after the attached process
 * exited is not. */
static bool ep_sva_peer(const struct pf_endpoint *ep, pid_t pid, int pidfd)
{
	return pid == ep->peer_pid && ep->sva_fd < 0 && ep_pidfd_alive(ep->peer_pidfd) &&
	       ep_pidfd_alive(pidfd);
}

static void ep_admit(struct pf_daemon *d, struct pf_slice *s, int c, uid_t uid, pid_t pid,
		     int pidfd, bool peer0);

/* A connection on @lfd: vf<N>.sock or, @peer0, vf<N>.master.sock. */
static void ep_accept(struct pf_daemon *d, struct pf_slice *s, int lfd, bool peer0)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), pidfd;
	uint64_t accepted = ep_boot_ticks();

	if (c < 0)
		return;
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len)) {
		ep_warn_limited(s, &s->ep->refusals, "attach refused",
				"the peer's credentials cannot be read: %s", cmn_strerror(-errno));
		ep_refuse(c);
		return;
	}
	if (!ep_peer_allowed(s, cr.uid)) {
		ep_warn_limited(s, &s->ep->refusals, "attach refused",
				"uid %d is not the slice's owner", (int)cr.uid);
		ep_refuse(c);
		return;
	}
	/* The process, now: later its number may be another's. */
	pidfd = ep_peer_pidfd(c, cr.pid, accepted);
	if (pidfd < 0) {
		ep_warn_limited(s, &s->ep->refusals, "attach refused", "no pidfd for pid %d: %s",
				(int)cr.pid, cmn_strerror(pidfd));
		ep_refuse(c);
		return;
	}
	ep_admit(d, s, c, cr.uid, cr.pid, pidfd, peer0);
}

void pf_endpoint_admit(struct pf_daemon *d, struct pf_slice *s, int c, uid_t uid, pid_t pid,
		       int pidfd)
{
	ep_admit(d, s, c, uid, pid, pidfd, false);
}

static void ep_admit(struct pf_daemon *d, struct pf_slice *s, int c, uid_t uid, pid_t pid,
		     int pidfd, bool peer0)
{
	struct pf_endpoint *ep = s->ep;

	/* A guest that closed and reconnects (the same pid) is a new attach, not an SVA
	 * connection: finish the old attachment first. */
	if (ep->client_fd >= 0 && ep_client_closed(ep))
		ep_detach(d, s);
	if (ep->client_fd >= 0 && ep_sva_peer(ep, pid, pidfd)) {
		close(pidfd);
		ep_sva_accept(s, c);
		return;
	}
	if (ep->client_fd >= 0) {
		close(pidfd);
		ep_warn_limited(s, &ep->refusals, "attach refused",
				"a guest (uid %d) is already attached", (int)ep->peer_uid);
		ep_refuse(c);
		return;
	}
	/* The rings pass to a guest only once no request of the previous one is in hand. */
	if (ep->detaching) {
		close(pidfd);
		ep_warn_limited(s, &ep->refusals, "attach refused", "the previous guest's mailbox "
				"request (an RM call) is still in hand; the VF takes a guest again "
				"once it is done (query-slices: \"detaching\")");
		ep_refuse(c);
		return;
	}
	/* Held after an unconfirmed migration: the slice may run at the destination. */
	if (pf_slice_held(s)) {
		close(pidfd);
		ep_warn_limited(s, &ep->refusals, "attach refused", "slice %s migrated out to %s "
				"(unconfirmed) and is held here until reclaimed", s->uuid,
				s->migrated_to);
		ep_refuse(c);
		return;
	}
	if (ep_greet(s, c, peer0)) {
		cmn_warn("VF %u: attach failed while sending the greeting", s->vf);
		ep_drop_vectors(ep);
		close(pidfd);
		close(c);
		return;
	}
	ep->client_fd = c;
	ep->guest_peer0 = peer0;
	atomic_store(&ep->guest_abi, 0);
	atomic_store(&ep->guest_flags, 0);
	/* The QEMU that arrives with a migrated guest: the guest announced its ABI on the
	 * source and does not know it moved (once: a later guest announces itself). */
	if (peer0 && s->mig_guest_abi) {
		atomic_store(&ep->guest_abi, s->mig_guest_abi);
		atomic_store(&ep->guest_flags, s->mig_guest_flags);
		s->mig_guest_abi = 0;
		s->mig_guest_flags = 0;
	}
	ep->peer_pidfd = pidfd;
	ep->peer_uid = uid;
	ep->peer_pid = pid;
	pf_svc_attach(s, ep->to_host[VF_VEC_MBOX], ep->to_guest[VF_VEC_MBOX]);
	cmn_info("VF %u: guest attached (pid %d, uid %d, %s)", s->vf, (int)pid, (int)uid,
		 peer0 ? "peer 0: migratable" : "peer mode");
}

/* An endpoint with nothing open yet. */
static struct pf_endpoint *ep_new(void)
{
	struct pf_endpoint *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	ep->listen_fd = -1;
	ep->master_fd = -1;
	ep->client_fd = -1;
	ep->peer_pidfd = -1;
	ep->sva_fd = -1;
	ep->pri.fd = -1;
	cmn_mutex_init(&ep->pri.lock);
	for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
		ep->to_host[v] = ep->to_guest[v] = -1;
	return ep;
}

int pf_endpoint_open_unlistened(struct pf_slice *s)
{
	s->ep = ep_new();
	return s->ep ? 0 : -ENOMEM;
}

/* Listen on @path for slice @s: *fd, or -errno with nothing left behind. */
static int ep_listen(struct pf_daemon *d, struct pf_slice *s, const char *path, int *fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	*fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (*fd < 0)
		return -errno;
	unlink(path);
	if (bind(*fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(*fd, 4)) {
		r = -errno;
		close(*fd);
		*fd = -1;
		return r;
	}
	/* The owner (a VMM running as its own user, libvirt's QEMU as libvirt-qemu:kvm) must
	 * be able to connect: 0660, owned by that user and its primary group, in a runtime
	 * dir it can traverse; root always can. */
	if (s->owner_uid >= 0) {
		struct passwd pw, *pwr = NULL;
		char pwbuf[4096];
		struct stat sb;

		if (getpwuid_r((uid_t)s->owner_uid, &pw, pwbuf, sizeof(pwbuf), &pwr))
			pwr = NULL;
		if (chown(path, (uid_t)s->owner_uid, pwr ? pw.pw_gid : (gid_t)-1))
			cmn_warn("VF %u: cannot give %s to uid %ld", s->vf, path, s->owner_uid);
		if (!stat(d->cfg.runtime_dir, &sb) && !(sb.st_mode & S_IXOTH) &&
		    chmod(d->cfg.runtime_dir, (sb.st_mode & 07777) | S_IXOTH))
			cmn_warn("VF %u: uid %ld cannot reach %s: %s is not searchable", s->vf,
				  s->owner_uid, path, d->cfg.runtime_dir);
	}
	chmod(path, 0660);
	return 0;
}

static void ep_unlisten(struct pf_endpoint *ep)
{
	if (ep->listen_fd >= 0) {
		close(ep->listen_fd);
		unlink(ep->path);
	}
	if (ep->master_fd >= 0) {
		close(ep->master_fd);
		unlink(ep->master_path);
	}
	ep->listen_fd = ep->master_fd = -1;
}

int pf_endpoint_open(struct pf_daemon *d, struct pf_slice *s)
{
	struct pf_endpoint *ep = ep_new();
	int r;

	if (!ep)
		return -ENOMEM;
	snprintf(ep->path, sizeof(ep->path), "%s/vf%u.sock", d->cfg.runtime_dir, s->vf);
	snprintf(ep->master_path, sizeof(ep->master_path), "%s/vf%u.master.sock",
		 d->cfg.runtime_dir, s->vf);
	r = ep_listen(d, s, ep->path, &ep->listen_fd);
	if (r)
		goto free_ep;
	r = ep_listen(d, s, ep->master_path, &ep->master_fd);
	if (r)
		goto unlisten;
	r = pf_svc_start(d, s);
	if (r)
		goto unlisten;
	s->ep = ep;
	return 0;
unlisten:
	ep_unlisten(ep);
free_ep:
	free(ep);
	return r;
}

void pf_endpoint_close(struct pf_daemon *d, struct pf_slice *s)
{
	if (!s->ep)
		return;
	pf_svc_stop(s);		/* waits for a request in hand */
	/* A guest that left before: what it queued goes now that nothing is in hand. */
	if (s->ep->detaching)
		ep_drop_queued(s, s->ep->forget_moves);
	/* Closing (stop, shutdown) is not a guest leaving: the RM side is handled by the
	 * caller (reset and release, or left to the next daemon). */
	ep_detach(NULL, s);
	(void)d;
	ep_unlisten(s->ep);
	free(s->ep);
	s->ep = NULL;
}

bool pf_endpoint_attached(const struct pf_slice *s)
{
	return s->ep && s->ep->client_fd >= 0;
}

int pf_endpoint_pollfds(struct pf_slice *s, struct pollfd *p, int max)
{
	struct pf_endpoint *ep = s->ep;
	int n = 0;

	if (!ep || max < PF_EP_MAX_POLLFDS)
		return 0;
	p[n++] = (struct pollfd){ .fd = ep->listen_fd, .events = POLLIN };
	if (ep->master_fd >= 0)
		p[n++] = (struct pollfd){ .fd = ep->master_fd, .events = POLLIN };
	/* Interrupts are acknowledged even with no guest, so the eventfd does not stay hot. */
	p[n++] = (struct pollfd){ .fd = s->intr_fd, .events = POLLIN };
	if (ep->client_fd < 0) {
		/* No guest while detaching: the thread says when the request in hand is done. */
		if (ep->detaching)
			p[n++] = (struct pollfd){ .fd = pf_svc_idle_fd(s), .events = POLLIN };
		return n;
	}
	p[n++] = (struct pollfd){ .fd = ep->client_fd, .events = POLLIN };
	if (ep->sva_fd >= 0)
		p[n++] = (struct pollfd){ .fd = ep->sva_fd, .events = POLLIN };
	/* Only while bound: the pidfd of a process that has exited stays readable. */
	if (ep->sva_dom && ep->peer_pidfd >= 0)
		p[n++] = (struct pollfd){ .fd = ep->peer_pidfd, .events = POLLIN };
	/* Not the kick vector (the device's to read), nor the mailbox one (the VF's service
	 * thread's, service.c). */
	for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
		if (v != VF_VEC_GPU && v != VF_VEC_MBOX)
			p[n++] = (struct pollfd){ .fd = ep->to_host[v], .events = POLLIN };
	return n;
}

/* Drain a vector the guest rang. Never waits: the guest holds the eventfd too and may have
 * made it blocking and drained it after the poll. A full counter is drained like any
 * other, so the level-triggered poll never finds it readable again by itself. */
static void ep_vector_read(struct pf_slice *s, int fd)
{
	uint64_t cnt;
	int r = cmn_efd_read(fd, &cnt);

	if (r && r != -EAGAIN)
		cmn_dbg("VF %u: vector read: %s", s->vf, cmn_strerror(r));
}

void pf_endpoint_handle(struct pf_daemon *d, struct pf_slice *s, const struct pollfd *p, int n)
{
	struct pf_endpoint *ep = s->ep;
	char junk[64];

	for (int i = 0; i < n && s->ep; i++) {
		if (!p[i].revents)
			continue;
		if (p[i].fd == ep->listen_fd || p[i].fd == ep->master_fd) {
			ep_accept(d, s, p[i].fd, p[i].fd == ep->master_fd);
			/* The accept may have replaced the attachment: the other entries are
			 * stale (fd numbers reused); poll is level-triggered, they come again. */
			return;
		} else if (p[i].fd == s->intr_fd) {
			ep_forward_intr(d, s);
		} else if (p[i].fd == ep->client_fd) {
			/* Clients never write: stray data is dropped; EOF or hangup ends the attachment. */
			if (read(ep->client_fd, junk, sizeof(junk)) <= 0 || (p[i].revents & POLLHUP))
				ep_detach(d, s);
			return;
		} else if (p[i].fd == ep->sva_fd) {
			ep_sva_request(d, s);
		} else if (p[i].fd == ep->peer_pidfd) {
			pf_endpoint_sva_unbind(s, "the bound process exited");
		} else if (ep->detaching && p[i].fd == pf_svc_idle_fd(s)) {
			ep_forget_done(d, s);
		} else {
			ep_vector_read(s, p[i].fd);
		}
	}
}

/* ---- the guest's version and migration --------------------------------------------------- */

void pf_endpoint_guest_hello(struct pf_slice *s, const void *payload, uint32_t len)
{
	struct vf_msg_info_req rq;

	if (!s->ep || len < sizeof(rq))
		return;		/* a driver before minor 3: nothing announced */
	memcpy(&rq, payload, sizeof(rq));
	atomic_store(&s->ep->guest_abi, rq.abi_version);
	atomic_store(&s->ep->guest_flags, rq.flags);
}

uint32_t pf_endpoint_guest_abi(const struct pf_slice *s)
{
	return s->ep ? atomic_load(&s->ep->guest_abi) : 0;
}

uint32_t pf_endpoint_guest_flags(const struct pf_slice *s)
{
	return s->ep ? atomic_load(&s->ep->guest_flags) : 0;
}

void pf_endpoint_mig_guest(struct pf_slice *s, uint32_t abi, uint32_t flags)
{
	/* The destination's VMM attaches while the slice resumes, before the final pass that
	 * carries this: then it is the migrated guest's, which will not announce again. */
	if (pf_endpoint_attached(s) && s->ep->guest_peer0) {
		atomic_store(&s->ep->guest_abi, abi);
		atomic_store(&s->ep->guest_flags, flags);
		return;
	}
	s->mig_guest_abi = abi;
	s->mig_guest_flags = flags;
}

int pf_endpoint_mig_check(const struct pf_slice *s, char *why, size_t wlen)
{
	const struct pf_endpoint *ep = s->ep;
	uint32_t abi;

	if (!ep || ep->client_fd < 0)
		return 0;	/* no guest: nothing on this side cares who is peer 0 */
	if (!ep->guest_peer0)
		return snprintf(why, wlen, "slice %s: its guest is attached through %s (ivshmem "
				"peer mode), which QEMU cannot migrate; attach it through %s "
				"(vgpu-vm launch --migratable)", s->uuid, ep->path,
				ep->master_path), -EOPNOTSUPP;
	abi = atomic_load(&ep->guest_abi);
	if (!abi)
		return snprintf(why, wlen, "slice %s: its guest driver speaks vGPU ABI 2.2 or "
				"older (it did not announce its version); migration needs 2.%u",
				s->uuid, VGPU_ABI_MINOR_MIGRATE), -EOPNOTSUPP;
	if (VGPU_ABI_VERSION_MAJOR(abi) != VGPU_ABI_MAJOR ||
	    VGPU_ABI_VERSION_MINOR(abi) < VGPU_ABI_MINOR_MIGRATE)
		return snprintf(why, wlen, "slice %s: its guest driver speaks vGPU ABI %u.%u; "
				"migration needs %u.%u or later", s->uuid,
				VGPU_ABI_VERSION_MAJOR(abi), VGPU_ABI_VERSION_MINOR(abi),
				VGPU_ABI_MAJOR, VGPU_ABI_MINOR_MIGRATE), -EOPNOTSUPP;
	return 0;
}

void pf_endpoint_json(const struct pf_slice *s, json_object *o)
{
	const struct pf_endpoint *ep = s->ep;
	uint32_t abi;
	char v[16];

	if (!ep)
		return;
	json_object_object_add(o, "endpoint_master", json_object_new_string(ep->master_path));
	json_object_object_add(o, "detaching", json_object_new_boolean(ep->detaching));
	if (ep->client_fd < 0)
		return;
	json_object_object_add(o, "guest_peer", json_object_new_string(ep->guest_peer0 ?
							"peer0" : "peer_mode"));
	abi = atomic_load(&ep->guest_abi);
	snprintf(v, sizeof(v), "%u.%u", VGPU_ABI_VERSION_MAJOR(abi), VGPU_ABI_VERSION_MINOR(abi));
	json_object_object_add(o, "guest_abi", abi ? json_object_new_string(v) : NULL);
}
