// SPDX-License-Identifier: MIT
/* The service plane: one service thread per running VF serves that VF's mailbox, so a VF's
 * request never waits behind another VF's request, behind a GSP round trip of another VF,
 * or behind the daemon's loop (the control socket, endpoints, interrupts). Threads, queues
 * and locks: doc/pf_manager.md, "Service threads".
 *
 * The thread's state is shared with the loop thread through svc->lock, which guards the
 * mailbox rings' host views (s->req, s->rsp), s->mbox_broken, the guest's mailbox vectors
 * (kick_fd, reply_fd), the ring generation, the reset count the guest is told and the
 * provisioned quota s->prov (the loop changes it with pf_svc_set_prov() while the thread
 * runs: an owner-only modify is allowed with a guest attached). The lock is never held
 * across a request's handling: what a request needs of it is copied when the request is
 * taken, an RM call through the GSP runs unlocked, and its reply is written back only if
 * the rings were not formatted again meanwhile (gen). The guest holds the open file
 * descriptions of both mailbox vectors too and may clear their O_NONBLOCK: under the lock
 * the kick is read without ever waiting and the reply vector written for a bounded time
 * (common/efd.h), so no guest can keep the lock, and with it the loop thread's detach or
 * reset of the VF, waiting. Nor does the loop wait for the request in hand when a guest
 * leaves (an RM call may be in the GSP for seconds): it asks to be told, and the thread
 * signals its idle eventfd once the request is done (pf_svc_pause_or_notify()).
 *
 * CPU priority by share (common/share.h, the rule the GSP's lanes follow too): every
 * thread counts the requests it serves in windows of CMN_SHARE_WINDOW_NS; a thread whose
 * VF was served at most CMN_SHARE_LIGHT of a fair share in the last window, or that was
 * alone, runs the next window at nice 0, any other at CMN_SHARE_NICE_BUSY. A light VF's
 * thread, woken by its kick, then preempts the busy VFs' threads at once instead of
 * queueing behind them on a busy CPU. Going back to nice 0 needs CAP_SYS_NICE (or
 * RLIMIT_NICE of 20): without it the threads stay at nice 0 and the plane says so once. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/efd.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/share.h"
#include "pf_manager/pf_internal.h"
#include <vgpu/rm.h>

#define PF_SVC_SWEEP_MS	100	/* a mailbox sweep even without a kick (a lost eventfd write) */

/* The plane's counts for CPU priority by share (common/share.h). One vgpud per process: the
 * plane is the process's. */
static struct cmn_share_plane svc_plane;

struct pf_svc {
	struct pf_daemon *d;
	struct pf_slice *s;
	pthread_t th;
	int wake_fd;			/* the loop wakes the thread: stop, vectors changed */
	struct cmn_mutex lock;		/* everything below, and s->req, s->rsp, s->mbox_broken,
					 * s->mbox_held */
	bool stop;
	int kick_fd;			/* the guest's mailbox vector to us; -1: no guest */
	int reply_fd;			/* our mailbox vector to the guest; -1: no guest */
	bool reply_cut;			/* the guest keeps reply_fd full and blocking: not
					 * written again until the next attach */
	uint64_t gen;			/* bumped whenever the rings are formatted again */
	uint32_t resets;		/* what GET_INFO reports, with s->prov */
	bool busy;			/* a request taken, its reply not yet in the ring */
	pthread_cond_t idle;		/* busy went false */
	bool idle_wanted;		/* signal idle_fd when busy goes false */
	/* the thread wakes the loop: the request in hand is done (pf_svc_pause_or_notify());
	 * the loop's to read */
	int idle_fd;
	/* counters, written by the thread, copied into the slice by pf_svc_sync() */
	_Atomic uint64_t rpc_ok, rpc_err, kicks;
	/* the thread's own: its VF's counts for the priority by share, the nice it runs at */
	struct cmn_share_user share;
	int nice;
};

/* ---- CPU priority by share ------------------------------------------------------------------ */

/* Count one request served by @v, and run the thread at the nice its VF's share gives. */
static void svc_account(struct pf_svc *v)
{
	int nice = cmn_share_count(&svc_plane, &v->share, cmn_share_window(cmn_now_ns()));

	if (nice != v->nice && cmn_share_may_renice(&svc_plane, "service threads") &&
	    !cmn_share_set_nice(nice, "service thread"))
		v->nice = nice;
}

/* ---- one request -------------------------------------------------------------------------- */

/* Answer @req as pf_svc_handle() does, GET_INFO from @prov, the quota as it was when the
 * request was taken. */
static bool svc_handle(struct pf_daemon *d, struct pf_slice *s, const struct vf_msg *req,
		       struct vf_msg *rsp, const struct pf_quota *prov, uint32_t resets)
{
	const uint8_t *payload = (const uint8_t *)(req + 1);
	uint8_t *out = (uint8_t *)(rsp + 1);

	rsp->type = req->type;
	rsp->seq = req->seq;
	rsp->length = 0;
	rsp->status = 0;
	if (req->length > VF_MSG_MAX_PAYLOAD) {
		rsp->status = -EMSGSIZE;
		return true;
	}
	switch (req->type) {
	case VF_MSG_PING:
		memcpy(out, payload, req->length);
		rsp->length = req->length;
		break;
	case VF_MSG_GET_INFO: {
		struct vf_msg_info info = {
			.vf_id = s->vf, .abi_version = VGPU_ABI_VERSION, .vram_size = prov->vram,
			.channels = prov->channels, .doorbells = prov->doorbells,
			.reset_count = resets,
		};

		pf_endpoint_guest_hello(s, payload, req->length);
		memcpy(out, &info, sizeof(info));
		rsp->length = sizeof(info);
		break;
	}
	case VF_MSG_RM: {
		size_t out_len = VF_MSG_MAX_PAYLOAD;

		/* The RM validates every field of the wire message itself. */
		rsp->status = pf_rm_call(d, s->vf, payload, req->length, out, &out_len);
		if (rsp->status)
			return true;
		rsp->length = (uint32_t)out_len;
		/* A refused call is still a reply: count it by the RM's status. */
		return out_len >= sizeof(struct vgpu_rm_reply) &&
		       ((struct vgpu_rm_reply *)out)->status;
	}
	default:
		rsp->status = -EOPNOTSUPP;
		break;
	}
	return rsp->status != 0;
}

bool pf_svc_handle(struct pf_daemon *d, struct pf_slice *s, const struct vf_msg *req,
		   struct vf_msg *rsp, uint32_t resets)
{
	return svc_handle(d, s, req, rsp, &s->prov, resets);
}

/* Take the next request out of the ring into @req (lock held). 1: got one; 0: nothing to
 * do (empty, no reply space, no guest, not ready, broken). */
static int svc_take(struct pf_svc *v, uint8_t *req)
{
	struct pf_slice *s = v->s;
	const void *slot;
	int err;

	cmn_mutex_assert_held(&v->lock);
	if (v->kick_fd < 0 || s->mbox_broken || s->mbox_held ||
	    atomic_load((_Atomic uint32_t *)&s->hdr->state) != VF_STATE_READY)
		return 0;
	slot = cmn_ring_consume_slot(&s->req, &err);
	if (!slot) {
		if (err) {
			cmn_warn("VF %u: request ring corrupted by the guest; ignoring it until "
				  "reset", s->vf);
			atomic_fetch_add(&v->rpc_err, 1);
			s->mbox_broken = true;
		}
		return 0;
	}
	/* Only this thread produces replies: space seen now is there after the call. */
	if (!cmn_ring_produce_slot(&s->rsp))
		return 0;	/* the guest has not drained its replies: wait for its kick */
	/* Copy first: the guest may rewrite the slot while we look at it. */
	memcpy(req, slot, VF_MBOX_SLOT_SIZE);
	cmn_ring_consume_commit(&s->req);
	v->busy = true;
	return 1;
}

/* Signal the guest's mailbox vector (lock held). The guest holds the eventfd too and can
 * keep it full and blocking: the write is cut after CMN_EFD_BOUND_MS (common/efd.h), and
 * after one cut the vector is left alone until the next attach, so the lock is held that
 * long once, not on every reply. The reply is in the ring either way. */
static void svc_notify(struct pf_svc *v)
{
	int r;

	cmn_mutex_assert_held(&v->lock);
	if (v->reply_cut)
		return;
	r = cmn_efd_write(v->reply_fd, 1);
	if (r == -EINTR) {
		v->reply_cut = true;
		cmn_warn("VF %u: the guest keeps its mailbox vector full and blocking: replies "
			 "go to the ring unsignalled until it attaches again", v->s->vf);
	} else if (r) {
		cmn_dbg("VF %u: mailbox vector not signalled: %s", v->s->vf, cmn_strerror(r));
	}
}

/* The loop waits for the request in hand to be done (lock held): wake it. The eventfd is
 * the thread's own, which no guest holds, so the write never waits. */
static void svc_idle_signal(struct pf_svc *v)
{
	uint64_t one = 1;

	cmn_mutex_assert_held(&v->lock);
	v->idle_wanted = false;
	if (write(v->idle_fd, &one, sizeof(one)) < 0)
		cmn_warn("VF %u: the loop is not told that the request in hand is done: %s",
			 v->s->vf, cmn_strerror(-errno));
}

/* Serve every pending request, one at a time, the lock dropped while each is handled. */
static void svc_serve(struct pf_svc *v)
{
	uint8_t req[VF_MBOX_SLOT_SIZE], rsp[VF_MBOX_SLOT_SIZE];
	struct pf_quota prov;
	uint64_t gen;
	uint32_t resets;
	bool failed;

	for (;;) {
		cmn_mutex_lock(&v->lock);
		if (!svc_take(v, req)) {
			cmn_mutex_unlock(&v->lock);
			return;
		}
		gen = v->gen;
		resets = v->resets;
		prov = v->s->prov;
		cmn_mutex_unlock(&v->lock);
		svc_account(v);	/* its nice first: it runs the request at it */
		memset(rsp, 0, sizeof(rsp));
		failed = svc_handle(v->d, v->s, (const struct vf_msg *)req, (struct vf_msg *)rsp,
				    &prov, resets);
		atomic_fetch_add(failed ? &v->rpc_err : &v->rpc_ok, 1);
		cmn_mutex_lock(&v->lock);
		/* A reset formatted the rings meanwhile: the request died with them. */
		if (gen == v->gen && v->reply_fd >= 0) {
			memcpy(cmn_ring_produce_slot(&v->s->rsp), rsp, sizeof(rsp));
			cmn_ring_produce_commit(&v->s->rsp);
			svc_notify(v);
		}
		v->busy = false;
		pthread_cond_broadcast(&v->idle);
		if (v->idle_wanted)
			svc_idle_signal(v);
		cmn_mutex_unlock(&v->lock);
	}
}

/* ---- the thread ------------------------------------------------------------------------------ */

static void *svc_main(void *arg)
{
	struct pf_svc *v = arg;
	char name[16];
	uint64_t cnt;

	/* Named by its VF: ps -L, top and the tests tell the service threads apart. */
	snprintf(name, sizeof(name), "vgpud-vf%u", v->s->vf);
	pthread_setname_np(pthread_self(), name);
	/* Its guest waits for the reply: at nice 0 (a light VF), woken, it preempts a thread
	 * running a longer slice at once; at CMN_SHARE_NICE_BUSY its deadline stays behind
	 * every nice-0 thread's. */
	cmn_share_set_slice(CMN_SHARE_SLICE_MIN_NS, "service thread");

	for (;;) {
		struct pollfd p[2] = { { .fd = v->wake_fd, .events = POLLIN } };
		nfds_t n = 1;

		cmn_mutex_lock(&v->lock);
		if (v->stop) {
			cmn_mutex_unlock(&v->lock);
			break;
		}
		if (v->kick_fd >= 0)
			p[n++] = (struct pollfd){ .fd = v->kick_fd, .events = POLLIN };
		cmn_mutex_unlock(&v->lock);
		/* The kick fd may be closed by a detach while we poll it: the detach wakes
		 * us first, and the fd is only read under the lock below. */
		poll(p, n, PF_SVC_SWEEP_MS);
		if (read(v->wake_fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
			cmn_dbg("VF %u: service wake read: %s", v->s->vf, cmn_strerror(-errno));
		cmn_mutex_lock(&v->lock);
		/* Never waits: the guest may have made its end blocking and drained it. */
		if (v->kick_fd >= 0 && !cmn_efd_read(v->kick_fd, &cnt))
			atomic_fetch_add(&v->kicks, 1);
		cmn_mutex_unlock(&v->lock);
		svc_serve(v);
	}
	return NULL;
}

static void svc_wake(struct pf_svc *v)
{
	uint64_t one = 1;

	if (write(v->wake_fd, &one, sizeof(one)) < 0)
		cmn_dbg("VF %u: service thread not woken: %s", v->s->vf, cmn_strerror(-errno));
}

/* ---- the loop thread's side ------------------------------------------------------------------ */

int pf_svc_start(struct pf_daemon *d, struct pf_slice *s)
{
	struct pf_svc *v = calloc(1, sizeof(*v));
	int r;

	if (!v)
		return -ENOMEM;
	v->d = d;
	v->s = s;
	v->kick_fd = v->reply_fd = -1;
	v->resets = (uint32_t)s->resets;
	/* The slice's counters run on across stops and starts. */
	atomic_init(&v->rpc_ok, s->rpc_ok);
	atomic_init(&v->rpc_err, s->rpc_err);
	atomic_init(&v->kicks, s->mbox_kicks);
	cmn_mutex_init(&v->lock);
	pthread_cond_init(&v->idle, NULL);
	v->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (v->wake_fd < 0) {
		r = -errno;
		goto free_v;
	}
	v->idle_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (v->idle_fd < 0) {
		r = -errno;
		goto close_wake;
	}
	r = -pthread_create(&v->th, NULL, svc_main, v);
	if (r)
		goto close_idle;
	s->svc = v;
	return 0;
close_idle:
	close(v->idle_fd);
close_wake:
	close(v->wake_fd);
free_v:
	pthread_cond_destroy(&v->idle);
	cmn_mutex_destroy(&v->lock);
	free(v);
	return r;
}

void pf_svc_stop(struct pf_slice *s)
{
	struct pf_svc *v = s->svc;

	if (!v)
		return;
	cmn_mutex_lock(&v->lock);
	v->stop = true;
	cmn_mutex_unlock(&v->lock);
	svc_wake(v);
	/* Waits for a request in hand: at most one RM call of this VF. */
	pthread_join(v->th, NULL);
	pf_svc_sync(s);
	close(v->wake_fd);
	close(v->idle_fd);	/* the thread, which writes it, has ended */
	pthread_cond_destroy(&v->idle);
	cmn_mutex_destroy(&v->lock);
	free(v);
	s->svc = NULL;
}

void pf_svc_attach(struct pf_slice *s, int kick_fd, int reply_fd)
{
	struct pf_svc *v = s->svc;

	if (!v)
		return;
	cmn_mutex_lock(&v->lock);
	v->kick_fd = kick_fd;
	v->reply_fd = reply_fd;
	v->reply_cut = false;	/* a new guest's own eventfd */
	cmn_mutex_unlock(&v->lock);
	svc_wake(v);
}

void pf_svc_detach(struct pf_slice *s)
{
	struct pf_svc *v = s->svc;

	if (!v)
		return;
	cmn_mutex_lock(&v->lock);
	v->kick_fd = v->reply_fd = -1;
	cmn_mutex_unlock(&v->lock);
	svc_wake(v);
}

void pf_svc_pause(struct pf_slice *s)
{
	struct pf_svc *v = s->svc;

	if (!v)
		return;
	/* Held until pf_svc_resume(): the thread finishes the ring operation in hand and
	 * then waits (it never holds the lock while it handles a request). */
	cmn_mutex_lock(&v->lock);
}

int pf_svc_pause_idle(struct pf_slice *s, unsigned int timeout_ms)
{
	struct pf_svc *v = s->svc;
	struct timespec until;
	uint64_t t;

	if (!v)
		return 0;
	clock_gettime(CLOCK_REALTIME, &until);	/* the condition's clock */
	t = (uint64_t)until.tv_nsec + (uint64_t)timeout_ms * 1000000ull;
	until.tv_sec += (time_t)(t / 1000000000ull);
	until.tv_nsec = (long)(t % 1000000000ull);
	cmn_mutex_lock(&v->lock);
	/* A request in hand finishes with its reply in the ring; the thread then waits. */
	while (v->busy && !cmn_cond_timedwait(&v->idle, &v->lock, &until))
		;
	return v->busy ? -EBUSY : 0;
}

int pf_svc_pause_or_notify(struct pf_slice *s)
{
	struct pf_svc *v = s->svc;
	uint64_t cnt;

	if (!v)
		return 0;
	cmn_mutex_lock(&v->lock);
	/* A signal of an earlier wait is stale: drained under the lock, where it is sent. */
	if (read(v->idle_fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		cmn_dbg("VF %u: idle eventfd read: %s", s->vf, cmn_strerror(-errno));
	if (!v->busy) {
		v->idle_wanted = false;
		return 0;	/* held: pf_svc_resume() */
	}
	v->idle_wanted = true;
	cmn_mutex_unlock(&v->lock);
	return -EBUSY;
}

int pf_svc_idle_fd(const struct pf_slice *s)
{
	return s->svc ? s->svc->idle_fd : -1;
}

void pf_svc_resume(struct pf_slice *s)
{
	struct pf_svc *v = s->svc;

	if (!v)
		return;
	cmn_mutex_assert_held(&v->lock);
	v->gen++;
	v->resets = (uint32_t)s->resets;
	cmn_mutex_unlock(&v->lock);
	svc_wake(v);	/* requests may already wait in the fresh rings */
}

void pf_svc_set_prov(struct pf_slice *s, const struct pf_quota *prov)
{
	struct pf_svc *v = s->svc;

	if (v)
		cmn_mutex_lock(&v->lock);
	s->prov = *prov;
	if (v)
		cmn_mutex_unlock(&v->lock);
}

void pf_svc_sync(struct pf_slice *s)
{
	struct pf_svc *v = s->svc;

	if (!v)
		return;
	s->rpc_ok = atomic_load_explicit(&v->rpc_ok, memory_order_relaxed);
	s->rpc_err = atomic_load_explicit(&v->rpc_err, memory_order_relaxed);
	s->mbox_kicks = atomic_load_explicit(&v->kicks, memory_order_relaxed);
}
