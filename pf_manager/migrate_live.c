// SPDX-License-Identifier: MIT
/* Live migration of a running slice between two vgpuds (doc/migration.md "Live migration").
 *
 * The destination listens (migrate-incoming), the source connects (migrate-outgoing) and
 * sends the slice as a sequence of passes, each a complete migration stream (HELLO, SLICE,
 * EXTENTs, END) whose SLICE definition carries {"live": {"pass": N, "final": bool}}:
 * pass 0 every populated page, later passes the pages that changed since, the last two
 * with the slice stopped. The destination answers on the same socket: once after pass 0's
 * SLICE (its plan: refusals come before anything is copied or stopped) and once after the
 * final pass (committed), each an ack record (magic, status, message).
 *
 * Which pages changed: the device's dirty bitmap for engine writes (gpu_dirty_collect())
 * and, for guest CPU writes through the BAR that vgpud cannot see, a CRC32C per 4 KiB page
 * remembered for what the destination holds: every pass reads the populated pages and
 * resends those whose CRC differs or whose dirty bit is set. The full compare in STOP_COPY
 * makes the result exact (nothing writes then); the bitmap keeps the pre-copy rounds exact
 * for the engines and catches an engine's last writes after the compare.
 *
 * Each migration runs on its own worker thread; what must run on the loop thread (a
 * destination's plan, bring-up, commit or discard, the source's final stop and undefine,
 * events to control clients) is posted to it through an eventfd in the loop's poll set and
 * waited for. The slice's migration state and every record are under one lock per daemon. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/list.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/mapguard.h"
#include "gpu_model/gpu.h"
#include "pf_manager/migrate_internal.h"

#define LM_PAGE			4096u
#define LM_QUARTER		(LM_PAGE / 4)	/* a fingerprint's CRC32C chains */
#define LM_CHUNK		(1u << 20)	/* bytes read at a time */
#define LM_WR_BUFS		3		/* destination: extents checked ahead of the write */
#define LM_SOCK_BUF		(4 << 20)	/* socket buffers asked for, each way */
/* A TCP peer gone (its host died after END, say: the source waits in stop_copy, its guest
 * stopped) is given up on within LM_TCP_DEAD_MS: keepalive probes on an idle connection,
 * TCP_USER_TIMEOUT for data it does not acknowledge (a zero window included). */
#define LM_TCP_KEEPIDLE_S	10
#define LM_TCP_KEEPINTVL_S	5
#define LM_TCP_KEEPCNT		4	/* 10 s + 4 probes 5 s apart: 30 s */
#define LM_TCP_DEAD_MS		30000u
#define LM_RCVLOWAT		(256u << 10)	/* bytes a waiting destination is woken for */
#define LM_ACK_MAGIC		0x41474d56u	/* "VMGA" */
#define LM_ACK_MSG_MAX		512u
#define LM_ACK_STATUS_MAX	4096u		/* a status is 0 or an errno below it */
#define LM_KEEP_DONE		16		/* finished records kept for migrate-status */
#define LM_MAX_ROUNDS		64
#define LM_DEF_ROUNDS		8
#define LM_DEF_SWITCH_BYTES	(16ull << 20)
#define LM_MAX_DAEMONS		8
#define LM_IDLE_ROUND_MS	50		/* the least wait between rounds while waiting */
#define LM_IDLE_WAIT_MS		5000u		/* for the mailbox's request in hand to be answered */

enum lm_status { LM_LISTENING, LM_CONNECTING, LM_PRE_COPY, LM_WAITING, LM_STOP_COPY,
		 LM_COMPLETED, LM_FAILED, LM_CANCELLED };

static const char *const lm_status_names[] = {
	"listening", "connecting", "pre_copy", "waiting", "stop_copy", "completed", "failed",
	"cancelled",
};

/* What a worker asks the loop thread to do. */
enum lm_req { LM_REQ_NONE, LM_REQ_PLAN, LM_REQ_COMMIT, LM_REQ_DISCARD, LM_REQ_FORGET,
	      LM_REQ_HANDOVER, LM_REQ_UNMARK, LM_REQ_HOLD,
	      LM_REQ_STATE_SAVE, LM_REQ_STATE_LOAD, LM_REQ_RESUME };

struct lm_ctx;

/* One live migration, source or destination. */
struct lm {
	struct cmn_list node;
	struct lm_ctx *L;
	bool source;
	char uuid[PF_UUID_STR];		/* "" on a destination until the SLICE frame */
	char want[PF_UUID_STR];		/* destination: the only slice it accepts ("" any) */
	char want_type[PF_NAME_MAX];	/* destination: the type whose sizes the slice must
					 * have ("" any) */
	long owner_uid;			/* destination: the slice's owner uid here, in place
					 * of the stream's when set_owner */
	bool set_owner;
	char peer[PF_PATH_MAX];		/* connect to / listen on */
	struct pf_slice *s;		/* L->lock; NULL once gone */
	int lfd, sock, wake_fd;
	struct stat lst;		/* destination: the UNIX socket file lfd is bound to */
	int lowat;			/* destination: the socket's SO_RCVLOWAT (0: not set) */
	bool writer;			/* destination: a writer thread (test builds only,
					 * VGPU_MIG_WRITER=1: doc/migration.md, Limits) */
	bool wr_on;			/* destination: it has one (L->lock) */
	pthread_t thread;
	bool started, finished;		/* L->lock */
	bool manual;
	bool vmm;			/* switchover "vmm": a VMM copies the BAR to the
					 * destination too while this side waits */
	unsigned int max_rounds;
	uint64_t switch_bytes;
	int64_t corrupt_at;		/* test builds: flip this stream byte (-1 none) */
	uint64_t wire;			/* stream bytes sent (source) */
	int sock_err;			/* the connection's failure (source), 0 while it works */
	bool got_ack;			/* recv_ack() read a whole ack record */
	bool handed_over;		/* source: the hand-over record is durable */
	bool guest_left;		/* source: its guest detached meanwhile (L->lock) */
	bool end_sent;			/* source: the final pass's END went out: the
					 * destination may commit */
	const char *exit_at;		/* test builds: end the process at this point */
	const char *sync_fail_at;	/* test builds: the state directory's fsync fails
					 * at this point ("handover", "commit") */
	const char *write_fail_at;	/* ... or the first state file write ("unmark",
					 * "commit") */
	bool commit_unsynced;		/* destination: committed, but the state on
					 * disk is unsound (d->state_sync_err) */
	atomic_bool cancel, go;
	/* the record (L->lock) */
	enum lm_status status;
	unsigned int round;
	uint64_t bytes, dirty_bytes, remaining;
	uint64_t t_start, t_stop, t_ack, t_end;	/* t_ack: the destination committed */
	uint64_t stream_ns;		/* time spent in passes */
	unsigned int precopy_rounds;	/* passes sent while the slice ran */
	uint64_t pass_ns;		/* the last pass's time (worker only) */
	uint64_t pass_t0, prev_t0;	/* when the last two passes began to read (worker only) */
	uint64_t dirty_rate;		/* bytes/s the guest and engines dirtied, last round */
	uint64_t pass0_bytes, pass0_ns;	/* the first, full pass: the stream's own rate */
	uint64_t pass0_cpu_ns;		/* the worker's CPU time in it (either side) */
	uint64_t pass_cpu_ns;		/* the last pass's CPU time (source worker only) */
	char error[CMN_FAIL_MSG_MAX];
	uint64_t gen, gen_sent;		/* record changes, and the last one sent as an event */
	/* a request to the loop thread (L->lock) */
	enum lm_req req;
	int req_ret;
	struct pf_err req_err;
	const struct mig_frame *req_frame;
	struct mig_enc *req_enc;	/* STATE_SAVE: writes into sbuf meanwhile */
	unsigned int want_vf;		/* destination: the source's VF number (the guest's
					 * handles name it), taken if free here */
	struct pf_mig_plan plan;
	uint8_t *sbuf;			/* the guest's state frames, gathered on the loop */
	size_t slen, scap;
};

/* The live migrations of one daemon. */
struct lm_ctx {
	struct pf_daemon *d;
	int efd;			/* wakes the loop thread */
	struct cmn_mutex lock;
	pthread_cond_t cond;		/* a request done */
	struct cmn_list migs;
};

static struct lm_ctx *lm_ctxs[LM_MAX_DAEMONS];
static struct cmn_mutex lm_ctxs_lock = CMN_MUTEX_INITIALIZER("lm_ctxs_lock");

/* @d's migrations, made on first use when @make. */
static struct lm_ctx *ctx_of(struct pf_daemon *d, bool make)
{
	struct lm_ctx *L = NULL;
	unsigned int i, free_slot = LM_MAX_DAEMONS;

	cmn_mutex_lock(&lm_ctxs_lock);
	for (i = 0; i < LM_MAX_DAEMONS; i++) {
		if (lm_ctxs[i] && lm_ctxs[i]->d == d)
			L = lm_ctxs[i];
		else if (!lm_ctxs[i] && free_slot == LM_MAX_DAEMONS)
			free_slot = i;
	}
	if (!L && make && free_slot < LM_MAX_DAEMONS && (L = calloc(1, sizeof(*L)))) {
		L->d = d;
		L->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (L->efd < 0) {
			free(L);
			L = NULL;
		} else {
			cmn_mutex_init(&L->lock);
			pthread_cond_init(&L->cond, NULL);
			cmn_list_init(&L->migs);
			lm_ctxs[free_slot] = L;
		}
	}
	cmn_mutex_unlock(&lm_ctxs_lock);
	return L;
}

static void efd_kick(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) < 0)
		(void)0;	/* the counter is saturated: already readable */
}

static void efd_drain(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) == sizeof(v))
		;
}

/* The record changed: the loop thread sends it as an event (L->lock held). */
static void lm_changed(struct lm *m)
{
	m->gen++;
	efd_kick(m->L->efd);
}

static void lm_set_status(struct lm *m, enum lm_status st)
{
	cmn_mutex_lock(&m->L->lock);
	m->status = st;
	lm_changed(m);
	cmn_mutex_unlock(&m->L->lock);
}

/* Move the slice's migration state (L->lock taken). */
static void lm_sm(struct lm *m, enum mig_state to)
{
	cmn_mutex_lock(&m->L->lock);
	if (m->s)
		mig_sm_set(&m->s->mig, to, NULL);
	lm_changed(m);
	cmn_mutex_unlock(&m->L->lock);
}

/* Run @req on the loop thread and wait for it; its result (the message in m->req_err). */
static int lm_request(struct lm *m, enum lm_req req)
{
	struct lm_ctx *L = m->L;
	int r;

	cmn_mutex_lock(&L->lock);
	m->req = req;
	efd_kick(L->efd);
	while (m->req != LM_REQ_NONE)
		cmn_cond_wait(&L->cond, &L->lock);
	r = m->req_ret;
	cmn_mutex_unlock(&L->lock);
	return r;
}

/* ---- the socket ---------------------------------------------------------------------------- */

/* Wait until the socket is ready for @ev or the migration is cancelled. */
static int lm_wait(struct lm *m, short ev)
{
	struct pollfd p[2] = { { .fd = m->sock, .events = ev }, { .fd = m->wake_fd, .events = POLLIN } };

	for (;;) {
		if (atomic_load(&m->cancel))
			return -ECANCELED;
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents)
			efd_drain(m->wake_fd);
		if (p[0].revents)
			return 0;
	}
}

/* Nothing comes back during a pass but a refusal (or the end of the connection): a source
 * looks before each data payload of @len bytes, so it stops within a frame. It also stops
 * at a cancel before each piece it writes, whether or not the socket would take it: a
 * cancel that comes before the final END is sent keeps END from going out, so the
 * destination cannot commit and the source resumes. */
static int src_refused(struct lm *m, size_t len)
{
	struct pollfd p = { .fd = m->sock, .events = POLLIN };

	if (!m->source)
		return 0;
	if (atomic_load(&m->cancel))
		return -ECANCELED;
	if (len >= LM_PAGE && poll(&p, 1, 0) == 1)
		return m->sock_err = -ECONNABORTED;
	return 0;
}

static int lm_send(void *ctx, const void *buf, size_t len)
{
	struct lm *m = ctx;
	const uint8_t *b = buf;
	uint8_t flip[1];
	int r = src_refused(m, len);

	if (r)
		return r;
	while (len) {
		size_t n = len;
		const void *from = b;
		ssize_t k;

		/* A test build can corrupt one byte of the stream it sends. */
		if (m->corrupt_at >= 0 && (uint64_t)m->corrupt_at >= m->wire &&
		    (uint64_t)m->corrupt_at < m->wire + len) {
			uint64_t at = (uint64_t)m->corrupt_at - m->wire;

			if (at) {
				n = at;
			} else {
				flip[0] = b[0] ^ 0x20;
				from = flip;
				n = 1;
			}
		}
		k = send(m->sock, from, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			int r = lm_wait(m, POLLOUT);

			if (r)
				return r;
			continue;
		}
		if (k <= 0)
			return m->sock_err = k < 0 ? -errno : -EPIPE;
		b += k;
		len -= (size_t)k;
		m->wire += (uint64_t)k;
	}
	return 0;
}

/* A frame's pieces in one sendmsg() (header, fixed part and data: a third of the system
 * calls). A test build corrupting a byte goes through lm_send() piece by piece. */
static int lm_sendv(void *ctx, const struct iovec *iov, int n)
{
	struct lm *m = ctx;
	struct iovec v[4];
	size_t total = 0;
	int k = 0, r;

	if (m->corrupt_at >= 0 || n > (int)VGPU_ARRAY_SIZE(v)) {
		for (int i = 0; i < n; i++) {
			r = lm_send(m, iov[i].iov_base, iov[i].iov_len);
			if (r)
				return r;
		}
		return 0;
	}
	for (int i = 0; i < n; i++) {
		v[i] = iov[i];
		total += iov[i].iov_len;
	}
	r = src_refused(m, total);
	if (r)
		return r;
	while (k < n) {
		struct msghdr mh = { .msg_iov = v + k, .msg_iovlen = (size_t)(n - k) };
		ssize_t got = sendmsg(m->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
			r = lm_wait(m, POLLOUT);
			if (r)
				return r;
			continue;
		}
		if (got <= 0)
			return m->sock_err = got < 0 ? -errno : -EPIPE;
		m->wire += (uint64_t)got;
		for (; k < n && (size_t)got >= v[k].iov_len; k++)
			got -= (ssize_t)v[k].iov_len;
		if (k < n) {
			v[k].iov_base = (uint8_t *)v[k].iov_base + got;
			v[k].iov_len -= (size_t)got;
		}
	}
	return 0;
}

/* A destination about to wait for @len more bytes asks the kernel to wake it only once
 * min(@len, LM_RCVLOWAT) are there (SO_RCVLOWAT; TCP honours it, a UNIX socket wakes at
 * each message): an extent arrives in many segments, and a wake-up per segment costs more
 * than its copy. Never more than asked for, which the source sends before it waits. */
static void lm_lowat(struct lm *m, size_t len)
{
	int v = (int)cmn_min(len, (size_t)LM_RCVLOWAT);

	if (!m->source && v != m->lowat &&
	    !setsockopt(m->sock, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)))
		m->lowat = v;
}

static ssize_t lm_recv(void *ctx, void *buf, size_t len)
{
	struct lm *m = ctx;

	for (;;) {
		ssize_t k = recv(m->sock, buf, len, MSG_DONTWAIT);

		if (k >= 0)
			return k;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		lm_lowat(m, len);
		k = lm_wait(m, POLLIN);
		if (k)
			return k;
	}
}

static int recv_all(struct lm *m, void *buf, size_t len)
{
	uint8_t *b = buf;

	while (len) {
		ssize_t k = lm_recv(m, b, len);

		if (k <= 0)
			return k < 0 ? (int)k : -EPIPE;
		b += k;
		len -= (size_t)k;
	}
	return 0;
}

/* The encoder's writer while the loop thread writes the guest's state frames: into
 * m->sbuf, sent by the worker afterwards (the loop never waits on the socket). */
static int sbuf_write(void *ctx, const void *p, size_t len)
{
	struct lm *m = ctx;

	if (m->slen + len > m->scap) {
		size_t cap = cmn_max(m->scap * 2, m->slen + len + 4096);
		uint8_t *n = realloc(m->sbuf, cap);

		if (!n)
			return -ENOMEM;
		m->sbuf = n;
		m->scap = cap;
	}
	memcpy(m->sbuf + m->slen, p, len);
	m->slen += len;
	return 0;
}

/* The wire's status for @err: a positive errno below LM_ACK_STATUS_MAX. vgpu's own codes
 * (-VGPU_E*, above it) and anything else a refusal may carry go as EPROTO: still a
 * refusal, whose reason is the message (which names the code). */
static uint32_t ack_status(int err)
{
	return !err ? 0 : err < 0 && (uint32_t)-err < LM_ACK_STATUS_MAX ? (uint32_t)-err : EPROTO;
}

/* An ack record: u32 magic, u32 status (0 or a positive errno), u32 length, message. */
static int send_ack(struct lm *m, int err, const char *msg)
{
	char buf[LM_ACK_MSG_MAX + 1];
	const char *code = cmn_errname(err);
	uint32_t len, st = ack_status(err);
	uint32_t h[3];
	int64_t keep = m->corrupt_at;
	int r;

	if (err && st != (uint32_t)-err)
		snprintf(buf, sizeof(buf), "%.*s (%s)", (int)(LM_ACK_MSG_MAX - 3 - strlen(code)),
			 msg, code);
	else
		snprintf(buf, sizeof(buf), "%s", msg);
	len = (uint32_t)strlen(buf);
	h[0] = htole32(LM_ACK_MAGIC);
	h[1] = htole32(st);
	h[2] = htole32(len);
	m->corrupt_at = -1;
	r = lm_send(m, h, sizeof(h));
	if (!r && len)
		r = lm_send(m, buf, len);
	m->corrupt_at = keep;
	return r;
}

/* The peer's ack: 0, or its refusal (-errno, message in @f), or a broken connection. */
static int recv_ack(struct lm *m, struct cmn_fail *f)
{
	uint32_t h[3], len;
	char msg[LM_ACK_MSG_MAX + 1];
	int r = recv_all(m, h, sizeof(h));

	if (r == -ECANCELED)
		return cmn_fail(f, r, "cancelled");
	if (r)
		return cmn_fail(f, r, "the destination closed the connection without an answer "
				"(%s)", cmn_strerror(r));
	len = le32toh(h[2]);
	if (le32toh(h[0]) != LM_ACK_MAGIC)
		return cmn_fail(f, -EPROTO, "the destination's answer is not a vgpu migration ack: "
				"magic %#x, not %#x", le32toh(h[0]), LM_ACK_MAGIC);
	if (le32toh(h[1]) >= LM_ACK_STATUS_MAX)
		return cmn_fail(f, -EPROTO, "the destination's answer is not a vgpu migration ack: "
				"status %u, not 0 or an errno below %u", le32toh(h[1]),
				LM_ACK_STATUS_MAX);
	if (len > LM_ACK_MSG_MAX)
		return cmn_fail(f, -EPROTO, "the destination's answer is not a vgpu migration ack: "
				"a message of %u bytes, more than %u", len, LM_ACK_MSG_MAX);
	r = recv_all(m, msg, len);
	if (r)
		return cmn_fail(f, r, "the destination's answer was cut short");
	msg[len] = 0;
	m->got_ack = true;
	if (le32toh(h[1]) == ECANCELED)
		return cmn_fail(f, -ECANCELED, "cancelled on the destination");
	if (h[1])
		return cmn_fail(f, -(int)le32toh(h[1]), "the destination refused: %s", msg);
	return 0;
}

/* A failed send: the destination's reason if it sent one before it closed. */
static int send_failed(struct lm *m, int r, struct cmn_fail *f)
{
	struct pollfd p = { .fd = m->sock, .events = POLLIN };
	int ra;

	if (r == -ECANCELED)
		return cmn_fail(f, r, "cancelled");
	m->got_ack = false;
	if (poll(&p, 1, 0) == 1) {
		ra = recv_ack(m, f);
		if (m->got_ack || r == -ECONNABORTED)
			return ra;	/* its refusal, or "closed the connection" */
	}
	return cmn_fail(f, r, "the connection to the destination broke: %s", cmn_strerror(r));
}

/* Parse "tcp:HOST:PORT" (the last colon splits); 0 or -EINVAL. */
static int tcp_split(const char *addr, char *host, size_t hlen, const char **port)
{
	const char *rest = addr + 4, *colon = strrchr(rest, ':');

	if (!colon || colon == rest || !colon[1] || (size_t)(colon - rest) >= hlen)
		return -EINVAL;
	memcpy(host, rest, (size_t)(colon - rest));
	host[colon - rest] = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	*port = colon + 1;
	return 0;
}

/* An address is an absolute UNIX socket path or tcp:HOST:PORT. */
static int addr_check(const char *addr, const char *key, struct pf_err *e)
{
	char host[256];
	const char *port;

	if (addr[0] == '/' && strlen(addr) < sizeof(((struct sockaddr_un *)0)->sun_path))
		return 0;
	if (!strncmp(addr, "tcp:", 4) && !tcp_split(addr, host, sizeof(host), &port))
		return 0;
	return cmn_fail(&e->f, -EINVAL, "\"%s\" must be an absolute UNIX socket path (at most "
			"107 bytes) or tcp:HOST:PORT, not \"%.128s\"", key, addr);
}

/* @sa's path is taken (bind said so): a UNIX socket of vgpud's own user that nobody listens
 * on any more (its owner closed or died without unlinking it) is removed, so that a bind
 * can take the path; 0 then. vgpud runs as root and the path is a client's: anything else
 * stays, a file, a symbolic link (never followed) or another user's socket refused with
 * -EINVAL, a socket still listened on with -EADDRINUSE. */
static int unlink_stale(const struct sockaddr_un *sa, struct pf_err *e)
{
	const char *path = sa->sun_path;
	struct stat st;
	int fd, r;

	if (lstat(path, &st))
		return errno == ENOENT ? 0 : cmn_fail(&e->f, -errno, "cannot listen on %s: %s",
						      path, cmn_strerror(-errno));
	if (!S_ISSOCK(st.st_mode))
		return cmn_fail(&e->f, -EINVAL, "cannot listen on %s: it exists and is %s, not a "
				"socket (only a stale socket of vgpud's own is replaced)", path,
				pf_file_kind(st.st_mode));
	if (st.st_uid != geteuid())
		return cmn_fail(&e->f, -EINVAL, "cannot listen on %s: it is a socket of uid %u, "
				"not of vgpud's uid %u (only a stale socket of vgpud's own is "
				"replaced)", path, (unsigned int)st.st_uid,
				(unsigned int)geteuid());
	/* Non-blocking: a listener with a full backlog answers EAGAIN, in use, at once. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return cmn_fail(&e->f, -errno, "socket: %s", cmn_strerror(-errno));
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ? -errno : 0;
	close(fd);
	if (r != -ECONNREFUSED)
		return cmn_fail(&e->f, -EADDRINUSE, "cannot listen on %s: a socket there is in use",
				path);
	if (unlink(path) && errno != ENOENT)
		return cmn_fail(&e->f, -errno, "cannot listen on %s: removing its stale socket: %s",
				path, cmn_strerror(-errno));
	return 0;
}

/* Bind @fd to @sa as a socket of mode 0600. The mode comes from the umask around bind,
 * not a chmod of the path after it, which by then may name another file. The umask is
 * the process's: a file another thread creates meanwhile gets no more than 0600 either. */
static int bind_0600(int fd, const struct sockaddr_un *sa)
{
	mode_t old = umask(0177);
	int r = bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) ? -errno : 0;

	umask(old);
	return r;
}

/* Listen on UNIX socket @fd at @sa, replacing a stale socket of vgpud's own there; *@own
 * is the socket file bound, which only is removed when the listen ends (lm_unlink_own). */
static int unix_listen(int fd, const struct sockaddr_un *sa, struct stat *own,
		       struct pf_err *e)
{
	int r = bind_0600(fd, sa);

	if (r == -EADDRINUSE) {
		r = unlink_stale(sa, e);
		if (r)
			return r;
		r = bind_0600(fd, sa);
	}
	if (!r && (lstat(sa->sun_path, own) || listen(fd, 1)))
		r = -errno;
	if (r)
		return cmn_fail(&e->f, r, "cannot listen on %s: %s", sa->sun_path,
				cmn_strerror(r));
	return 0;
}

/* A TCP migration socket's options: no Nagle delay on a frame's tail, and a peer that stops
 * answering is an error after LM_TCP_DEAD_MS, not the kernel's hours. Set on the
 * connecting socket, and on the listening one and the accepted one (which inherits them,
 * set again to depend on nothing); a refusal only keeps the kernel's defaults. */
static void tcp_opts(int fd)
{
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &(int){ 1 }, sizeof(int));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &(int){ LM_TCP_KEEPIDLE_S }, sizeof(int));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &(int){ LM_TCP_KEEPINTVL_S }, sizeof(int));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &(int){ LM_TCP_KEEPCNT }, sizeof(int));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &(unsigned int){ LM_TCP_DEAD_MS },
		   sizeof(unsigned int));
}

/* Socket buffers of LM_SOCK_BUF each way (the kernel caps them at its rmem_max and
 * wmem_max): a UNIX socket's default of about 200 KiB makes the two sides take turns every
 * fifth of an extent frame. Set before bind or connect, which an accepted socket inherits
 * and TCP's window scale is chosen from; a refusal only costs speed. */
static void sock_bufs(int fd)
{
	int n = LM_SOCK_BUF;

	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &n, sizeof(n));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &n, sizeof(n));
}

/* A migration's socket for @addr: connected (@listen_on false) or listening, its address
 * (the port chosen, for tcp:HOST:0) into @bound; *@own, for a listen on a UNIX socket, is
 * its socket file. */
static int open_sock(const char *addr, bool listen_on, char *bound, size_t blen, int *out,
		     struct stat *own, struct pf_err *e)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	char host[256];
	const char *port;
	int fd, r;

	if (addr[0] == '/') {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return cmn_fail(&e->f, -errno, "socket: %s", cmn_strerror(-errno));
		sock_bufs(fd);
		if (listen_on) {
			r = unix_listen(fd, &sa, own, e);
		} else {
			r = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0;
			if (r == -EINPROGRESS)
				r = 0;
			if (r)
				cmn_fail(&e->f, -ECONNREFUSED, "cannot connect to %s: %s", addr,
					 cmn_strerror(r));
		}
		if (r) {
			close(fd);
			return e->f.err;
		}
		snprintf(bound, blen, "%s", addr);
		*out = fd;
		return 0;
	}
	tcp_split(addr, host, sizeof(host), &port);
	hints.ai_flags = listen_on ? AI_PASSIVE : 0;
	r = getaddrinfo(host, port, &hints, &ai);
	if (r)
		return cmn_fail(&e->f, -EINVAL, "%s: %s", addr, gai_strerror(r));
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	sock_bufs(fd);
	if (listen_on) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char h[NI_MAXHOST], p[NI_MAXSERV];

		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int));
		r = bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1) ||
		    getsockname(fd, (struct sockaddr *)&ss, &sl) ? -errno : 0;
		if (!r && !getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
				       NI_NUMERICHOST | NI_NUMERICSERV))
			snprintf(bound, blen, strchr(h, ':') ? "tcp:[%s]:%s" : "tcp:%s:%s", h, p);
	} else {
		r = connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS ? -errno : 0;
		snprintf(bound, blen, "%s", addr);
	}
	if (!r)
		tcp_opts(fd);
out:
	freeaddrinfo(ai);
	if (r) {
		if (fd >= 0)
			close(fd);
		return cmn_fail(&e->f, listen_on ? r : -ECONNREFUSED, "cannot %s %s: %s",
				listen_on ? "listen on" : "connect to", addr, cmn_strerror(r));
	}
	*out = fd;
	return 0;
}

/* The UNIX socket file a destination bound (m->lst) removed when its listen ends; a file
 * that took the path since, not that socket, stays. */
static void lm_unlink_own(struct lm *m)
{
	struct stat st;

	if (m->peer[0] == '/' && !lstat(m->peer, &st) && S_ISSOCK(st.st_mode) &&
	    st.st_dev == m->lst.st_dev && st.st_ino == m->lst.st_ino)
		unlink(m->peer);
}

/* ---- source ------------------------------------------------------------------------------- */

/* What the destination holds of each page (VRAM pages, then DMA pages). */
struct src_pages {
	uint64_t pages[MIG_NR_REGIONS];	/* pages per region */
	uint64_t first[MIG_NR_REGIONS];	/* index of a region's first page */
	uint64_t rbase[MIG_NR_REGIONS];	/* a region's offset in the object (and the map) */
	uint64_t *fp;			/* fingerprint of each page as sent (zero page's at start) */
	uint64_t *nonzero;		/* bit: the destination holds data there */
	uint64_t *dirty;		/* bit: an engine wrote it since it was last read */
	uint64_t *visit;		/* this pass's pages to read */
	uint64_t *again;		/* bit: sent while a VMM may copy: send at the stop */
	bool mark_again;		/* passes now mark what they send in again */
	bool mapped;			/* the first full pass mapped the populated pages */
	uint64_t words;			/* of each bitmap */
	uint64_t fp_zero;
	const uint8_t *map;		/* VRAM and DMA memory, read-only */
	size_t map_len;
	int guard;			/* map's mapguard slot */
	uint8_t *buf;			/* an extent being sent: a copy, so its CRC holds */
};

static bool bit_get(const uint64_t *b, uint64_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static void bit_put(uint64_t *b, uint64_t i, bool v)
{
	if (v)
		b[i / 64] |= 1ull << (i % 64);
	else
		b[i / 64] &= ~(1ull << (i % 64));
}

/* Bitmaps cover 2 GiB of VRAM in 512 Ki bits per pass: whole words where they can. */
static void bits_set_range(uint64_t *b, uint64_t from, uint64_t to)
{
	while (from < to && from % 64)
		bit_put(b, from++, true);
	for (; from + 64 <= to; from += 64)
		b[from / 64] = ~0ull;
	while (from < to)
		bit_put(b, from++, true);
}

/* The first bit in [@i, @end) of @b that is @set, or @end. */
static uint64_t bit_find(const uint64_t *b, uint64_t i, uint64_t end, bool set)
{
	while (i < end) {
		uint64_t w = (set ? b[i / 64] : ~b[i / 64]) & ~0ull << (i % 64);

		if (w)
			return cmn_min(i - i % 64 + (uint64_t)__builtin_ctzll(w), end);
		i += 64 - i % 64;
	}
	return end;
}

/* Four quarters' CRC32Cs folded into a page's 64-bit fingerprint. */
static uint64_t fp_fold(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
	return ((uint64_t)a ^ (uint64_t)c << 32) ^
	       ((uint64_t)b << 16 | (uint64_t)d << 48 | d >> 16);
}

/* The CRC32C of each 1 KiB quarter of page @p into @qc, computed side by side (four
 * independent chains keep the CRC unit busy, where one chain waits on itself). */
static void page_quarters(const uint8_t *p, uint32_t qc[4])
{
	const size_t q = LM_QUARTER;
#ifdef __SSE4_2__
	uint64_t a = ~0ull, b = ~0ull, c = ~0ull, d = ~0ull;

	for (size_t i = 0; i < q; i += 8) {
		uint64_t va, vb, vc, vd;

		memcpy(&va, p + i, 8);
		memcpy(&vb, p + q + i, 8);
		memcpy(&vc, p + 2 * q + i, 8);
		memcpy(&vd, p + 3 * q + i, 8);
		a = __builtin_ia32_crc32di(a, va);
		b = __builtin_ia32_crc32di(b, vb);
		c = __builtin_ia32_crc32di(c, vc);
		d = __builtin_ia32_crc32di(d, vd);
	}
	/* The chains' registers: each quarter's CRC32C inverted. */
	qc[0] = ~(uint32_t)a;
	qc[1] = ~(uint32_t)b;
	qc[2] = ~(uint32_t)c;
	qc[3] = ~(uint32_t)d;
#else
	for (int i = 0; i < 4; i++)
		qc[i] = mig_crc32c(0, p + i * q, q);
#endif
}

/* A page's fingerprint: its quarters' CRC32Cs two by two folded into 64 bits. Only
 * compared with itself: a page that changed since it was sent differs from the sent
 * one's fingerprint. */
static uint64_t page_fp(const uint8_t *p)
{
	uint32_t qc[4];

	page_quarters(p, qc);
	return fp_fold(qc[0], qc[1], qc[2], qc[3]);
}

/* Copy page @src to @dst and return page_fp() of the copy, with the page's CRC32C joined
 * from its quarters' into *@crc: the extent's frame checksum is made of those, so the
 * copy is not read a second time to checksum it (about 8 ms less per 256 MiB than a
 * CRC32C pass over the extent; folding the fingerprint into the copy loop itself was
 * slower than memcpy() and then one pass over the copy, which is in the cache). */
static uint64_t page_copy_fp(uint8_t *dst, const uint8_t *src, uint32_t *crc)
{
	const size_t q = LM_QUARTER;
	uint32_t qc[4];

	memcpy(dst, src, LM_PAGE);
	page_quarters(dst, qc);
	*crc = mig_crc32c_combine(mig_crc32c_combine(mig_crc32c_combine(qc[0], qc[1], q), qc[2], q),
				  qc[3], q);
	return fp_fold(qc[0], qc[1], qc[2], qc[3]);
}

static int src_pages_init(struct src_pages *sp, const struct pf_slice *s)
{
	static const uint8_t zero[LM_PAGE];
	uint64_t n, words;
	void *map;

	sp->pages[MIG_R_VRAM] = s->prov.vram / LM_PAGE;
	sp->pages[MIG_R_DMA] = s->dma_size / LM_PAGE;
	sp->first[MIG_R_DMA] = sp->pages[MIG_R_VRAM];
	sp->rbase[MIG_R_VRAM] = pf_mig_region_base(s, MIG_R_VRAM);
	sp->rbase[MIG_R_DMA] = pf_mig_region_base(s, MIG_R_DMA);
	n = sp->pages[MIG_R_VRAM] + sp->pages[MIG_R_DMA];
	words = n / 64 + 1;
	sp->fp_zero = page_fp(zero);
	sp->fp = malloc(n * sizeof(*sp->fp));
	sp->nonzero = calloc(words, 8);
	sp->dirty = calloc(words, 8);
	sp->visit = calloc(words, 8);
	sp->again = calloc(words, 8);
	sp->words = words;
	sp->buf = malloc(LM_CHUNK);
	if (!sp->fp || !sp->nonzero || !sp->dirty || !sp->visit || !sp->again || !sp->buf)
		return -ENOMEM;
	/* Read in place: a compare touches every populated page, a copy only those sent. */
	sp->map_len = sp->rbase[MIG_R_DMA] + s->dma_size;
	map = mmap(NULL, sp->map_len, PROT_READ, MAP_SHARED | MAP_NORESERVE, s->bar_fd, 0);
	if (map == MAP_FAILED)
		return -errno;
	/* The guest may shrink the object under the reads (slice.c pf_slice_bar_faults()). */
	sp->guard = cmn_mapguard_add(map, sp->map_len, s->bar_fd, s->bar_size, s->vf);
	if (sp->guard < 0) {
		munmap(map, sp->map_len);
		return sp->guard;
	}
	sp->map = map;
	for (uint64_t i = 0; i < n; i++)
		sp->fp[i] = sp->fp_zero;
	return 0;
}

static void src_pages_fini(struct src_pages *sp)
{
	free(sp->fp);
	free(sp->nonzero);
	free(sp->dirty);
	free(sp->visit);
	free(sp->again);
	free(sp->buf);
	if (sp->map) {
		cmn_mapguard_del(sp->guard);
		munmap((void *)sp->map, sp->map_len);
	}
}

/* Mark the populated pages of @region (SEEK_DATA / SEEK_HOLE) in sp->visit. */
static int visit_data(const struct pf_slice *s, struct src_pages *sp, enum mig_region region,
		      struct cmn_fail *f)
{
	uint64_t rbase = pf_mig_region_base(s, region), size = sp->pages[region] * LM_PAGE, off = 0;

	while (off < size) {
		off_t data = lseek(s->bar_fd, (off_t)(rbase + off), SEEK_DATA), hole;

		if (data < 0 && errno == ENXIO)
			break;
		if (data < 0 || (hole = lseek(s->bar_fd, data, SEEK_HOLE)) < 0)
			return cmn_fail(f, -errno, "SEEK_DATA/SEEK_HOLE on the VRAM object: %s",
					cmn_strerror(-errno));
		if ((uint64_t)data >= rbase + size)
			break;
		off = cmn_min((uint64_t)hole - rbase, size);
		bits_set_range(sp->visit, sp->first[region] + ((uint64_t)data - rbase) / LM_PAGE,
			       sp->first[region] + (off + LM_PAGE - 1) / LM_PAGE);
	}
	return 0;
}

/* Whether page @p of @region changed since it was sent (or an engine wrote it): read in
 * place; a page that must go is copied into @dst and fingerprinted from the copy, so what
 * is remembered is what is sent (its CRC32C into *@crc). A page likely to go (dirty, or
 * nothing sent yet) is copied first, saving the read in place. */
static bool page_changed(struct src_pages *sp, enum mig_region region, uint64_t p, uint8_t *dst,
			 uint32_t *crc)
{
	uint64_t pi = sp->first[region] + p, fp;
	const uint8_t *src = sp->map + sp->rbase[region] + p * LM_PAGE;
	bool likely = bit_get(sp->dirty, pi) || sp->fp[pi] == sp->fp_zero;

	if (!likely && page_fp(src) == sp->fp[pi])
		return false;
	fp = page_copy_fp(dst, src, crc);
	if (fp == sp->fp[pi] && !bit_get(sp->dirty, pi))
		return false;
	bit_put(sp->dirty, pi, false);
	if (sp->mark_again)
		bit_put(sp->again, pi, true);
	sp->fp[pi] = fp;
	bit_put(sp->nonzero, pi, fp != sp->fp_zero);
	return true;
}

/* Compare [@p0, @p1) pages of @region with what was sent and send those that changed (or
 * that an engine wrote), as ascending extents of at most LM_CHUNK bytes. */
static int src_run(struct src_pages *sp, struct mig_enc *enc, enum mig_region region,
		   uint64_t p0, uint64_t p1, struct cmn_fail *f)
{
	uint64_t ext = 0, ext_len = 0;
	uint32_t ext_crc = 0, crc;
	int r = 0;

	for (uint64_t p = p0; p <= p1 && !r; p++) {
		bool send = p < p1 && page_changed(sp, region, p, sp->buf + ext_len * LM_PAGE, &crc);

		if (send)
			ext_crc = ext_len ? mig_crc32c_combine(ext_crc, crc, LM_PAGE) : crc;
		if (send && !ext_len)
			ext = p;
		if (send && ++ext_len < LM_CHUNK / LM_PAGE)
			continue;
		if (ext_len)
			r = mig_enc_extent_crc(enc, region, ext * LM_PAGE, sp->buf, ext_len * LM_PAGE,
					       ext_crc, f);
		ext_len = 0;
	}
	return r;
}

/* Map pages [@p0, @p1) of @region, which the pass reads next, in one call
 * (MADV_POPULATE_READ, Linux 5.14): a fault per 16 pages costs about a third of copying
 * them. Only pages that hold data: a read fault on a hole would allocate it. Later passes
 * find them mapped; an older kernel faults them in as they are read. */
static void src_map_run(struct src_pages *sp, enum mig_region region, uint64_t p0, uint64_t p1)
{
#ifdef MADV_POPULATE_READ
	madvise((void *)(sp->map + sp->rbase[region] + p0 * LM_PAGE), (p1 - p0) * LM_PAGE,
		MADV_POPULATE_READ);
#else
	(void)sp, (void)region, (void)p0, (void)p1;
#endif
}

/* One region of a pass: the pages an engine dirtied, those the destination holds data
 * in, and (unless @dirty_only) every populated page. */
static int src_region(struct lm *m, struct src_pages *sp, struct mig_enc *enc,
		      enum mig_region region, bool dirty_only, struct cmn_fail *f)
{
	uint64_t a = sp->first[region], b = a + sp->pages[region], i = a, j;
	int r = 0;

	for (; i < b && i % 64; i++)
		bit_put(sp->visit, i, bit_get(sp->dirty, i) || (!dirty_only && bit_get(sp->nonzero, i)));
	for (; i + 64 <= b; i += 64)
		sp->visit[i / 64] = sp->dirty[i / 64] | (dirty_only ? 0 : sp->nonzero[i / 64]);
	for (; i < b; i++)
		bit_put(sp->visit, i, bit_get(sp->dirty, i) || (!dirty_only && bit_get(sp->nonzero, i)));
	if (!dirty_only && (r = visit_data(m->s, sp, region, f)))
		return r;
	/* Each run of pages to visit: [i, j). */
	for (i = bit_find(sp->visit, a, b, true); i < b && !r; i = bit_find(sp->visit, j, b, true)) {
		j = bit_find(sp->visit, i, b, false);
		if (!sp->mapped)
			src_map_run(sp, region, i - a, j - a);
		r = src_run(sp, enc, region, i - a, j - a, f);
	}
	return r;
}

/* The engines' writes since the last collection into sp->dirty. */
static void src_collect(struct lm *m, struct src_pages *sp)
{
	struct pf_daemon *d = m->L->d;

	gpu_dirty_collect(d->gpu, m->s->base, m->s->prov.vram, sp->dirty);
}

/* The guest's state frames (none without a guest), gathered by the loop thread, where the
 * RM and the slice are handled, into m->sbuf and then sent from here. */
static int src_state(struct lm *m, struct mig_enc *enc, struct cmn_fail *f)
{
	int r;

	enc->write = sbuf_write;
	enc->writev = NULL;
	m->slen = 0;
	m->req_enc = enc;
	r = lm_request(m, LM_REQ_STATE_SAVE);
	enc->write = lm_send;
	enc->writev = lm_sendv;
	if (r)
		return cmn_fail(f, r, "the guest's state: %s", m->req_err.f.msg);
	/* A failed send is explained once, by src_pass() (send_failed() reads the refusal;
	 * a second call would find the connection closed and lose it). */
	r = m->slen ? lm_send(m, m->sbuf, m->slen) : 0;
	return r ? cmn_fail(f, r, "cannot send the guest's state: %s", cmn_strerror(r)) : 0;
}

/* Test builds: end the process at point @what of the hand-over, as a kill -9 would. A
 * source: "handover" (the record is durable, the switchover not begun), "committed" (the
 * destination's commit acknowledged, the slice not yet stopped here); a destination:
 * "committed" (committed, the ack not sent). */
static void lm_test_exit(const struct lm *m, const char *what)
{
	if (m->exit_at && !strcmp(m->exit_at, what)) {
		fprintf(stderr, "vgpud: exit at the migration point \"%s\"\n", what);
		_exit(PF_CRASH_EXIT);
	}
}

/* The hand-over record, durable before the switchover and so before the final END (on
 * which the destination commits): a source that dies from here on does not run the slice
 * again by itself (state.c). */
static int src_handover(struct lm *m, struct cmn_fail *f)
{
	int r = lm_request(m, LM_REQ_HANDOVER);

	if (r)
		return cmn_fail(f, r, "cannot write the hand-over record: %s", m->req_err.f.msg);
	m->handed_over = true;
	lm_test_exit(m, "handover");
	return 0;
}

/* Whether the destination may have committed without this side knowing: END went out
 * and no answer came (a refusal is an answer). */
static bool lm_unknown(const struct lm *m)
{
	return m->end_sent && !m->got_ack;
}

/* CPU time of the calling thread: what a pass costs, whatever else the machine runs. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* One pass: a complete stream. Pass 0 waits for the destination's plan after SLICE. */
static int src_pass(struct lm *m, struct src_pages *sp, unsigned int pass, bool final,
		    bool dirty_only, uint64_t *sent, struct cmn_fail *f)
{
	struct pf_daemon *d = m->L->d;
	json_object *live = json_object_new_object();
	struct mig_enc enc;
	uint64_t t0 = cmn_now_ns(), c0;
	char *def;
	int r;

	json_object_object_add(live, "pass", json_object_new_int((int)pass));
	json_object_object_add(live, "final", json_object_new_boolean(final));
	json_object_object_add(live, "vf", json_object_new_int((int)m->s->vf));
	def = pf_mig_def(d, m->s, live);
	if (!def)
		return cmn_fail(f, -ENOMEM, "out of memory");
	r = mig_enc_init(&enc, lm_send, m, f);
	enc.writev = lm_sendv;
	if (!r)
		r = mig_enc_slice(&enc, m->s->prov.vram, m->s->dma_size, def, strlen(def), f);
	free(def);
	if (r)
		return send_failed(m, r, f);
	if (!pass && (r = recv_ack(m, f)))
		return r;
	t0 = cmn_now_ns();	/* the destination's plan is not the stream's time */
	c0 = thread_cpu_ns();
	m->prev_t0 = m->pass_t0;
	m->pass_t0 = t0;
	src_collect(m, sp);
	r = src_region(m, sp, &enc, MIG_R_VRAM, dirty_only, f);
	if (!r)
		r = src_region(m, sp, &enc, MIG_R_DMA, dirty_only, f);
	if (!r && !dirty_only)
		sp->mapped = true;
	if (!r && final)
		r = src_state(m, &enc, f);
	if (!r)
		r = mig_enc_end(&enc, f);
	if (!r && final) {
		m->end_sent = true;
		m->got_ack = false;	/* from now on only the commit's answer */
	}
	if (r && (m->sock_err || f->err == -ECANCELED))
		return send_failed(m, m->sock_err ? m->sock_err : -ECANCELED, f);
	if (r)
		return r;
	*sent = enc.tot.bytes[MIG_R_VRAM] + enc.tot.bytes[MIG_R_DMA];
	m->pass_ns = cmn_now_ns() - t0;
	m->pass_cpu_ns = thread_cpu_ns() - c0;
	return 0;
}

static void src_progress(struct lm *m, unsigned int round, uint64_t sent)
{
	cmn_mutex_lock(&m->L->lock);
	m->stream_ns += m->pass_ns;
	/* What a round found changed was written since the previous round read it. */
	m->dirty_rate = round && m->pass_t0 > m->prev_t0 ?
			sent * 1000000000ull / (m->pass_t0 - m->prev_t0) : 0;
	if (!round) {
		m->pass0_bytes = sent;
		m->pass0_ns = m->pass_ns;
		m->pass0_cpu_ns = m->pass_cpu_ns;
	}
	m->round = round;
	m->bytes += sent;
	m->dirty_bytes = sent;
	m->remaining = round ? sent : 0;
	if (m->status != LM_WAITING)	/* an event per round, but not for a waiting one's */
		lm_changed(m);
	cmn_mutex_unlock(&m->L->lock);
}

/* Wait for migrate-switchover: 1 when it came, 0 when it is time for another round (which
 * keeps the dirty set small), or a cancel or the destination gone. The wait is at least
 * LM_IDLE_ROUND_MS and four times the last round, so rounds take at most a fifth of a CPU
 * however much is populated. */
static int src_wait_go(struct lm *m, struct cmn_fail *f)
{
	struct pollfd p[2] = { { .fd = m->sock, .events = POLLIN }, { .fd = m->wake_fd, .events = POLLIN } };
	int ms = (int)cmn_max((uint64_t)LM_IDLE_ROUND_MS, 4 * m->pass_ns / 1000000), n;

	if (atomic_load(&m->go))
		return 1;
	if (atomic_load(&m->cancel))
		return cmn_fail(f, -ECANCELED, "cancelled");
	n = poll(p, 2, ms);
	if (n < 0 && errno != EINTR)
		return cmn_fail(f, -errno, "poll: %s", cmn_strerror(-errno));
	if (n > 0 && p[1].revents)
		efd_drain(m->wake_fd);
	if (n > 0 && p[0].revents)
		return recv_ack(m, f) ? f->err : cmn_fail(f, -EPROTO, "the destination sent an "
							   "ack nobody asked for");
	if (atomic_load(&m->cancel))
		return cmn_fail(f, -ECANCELED, "cancelled");
	return atomic_load(&m->go) ? 1 : 0;
}

/* Give the slice its engine time back. */
static void src_engines_run(struct lm *m)
{
	struct pf_daemon *d = m->L->d;
	struct pf_slice *s = m->s;

	/* As the slice's start applies them (fixed share follows the VRAM share). */
	pf_rm_fn_sched_set(d, s->vf, true, (uint64_t)s->prov.exec_quantum_us * 1000ull,
			   (uint64_t)s->prov.preempt_timeout_us * 1000ull,
			   s->prov.vram * 1000 / pf_usable_vram(d));
}

/* Take the slice's engine time away and wait until no engine runs it: a turn still
 * running would write after the compare read a page, or after the final pass took the
 * dirty bits (DMA memory has none), and that write would not move. */
static int src_engines_stop(struct lm *m, struct cmn_fail *f)
{
	struct pf_daemon *d = m->L->d;
	int r = pf_rm_fn_sched_set(d, m->s->vf, false, 0, 0, 0);

	if (!r)
		r = gpu_fn_quiesce(d->gpu, m->s->vf, LM_IDLE_WAIT_MS * VGPU_NSEC_PER_MSEC);
	if (!r)
		return 0;
	src_engines_run(m);
	return cmn_fail(f, r, "cannot stop the slice's engines: %s", cmn_strerror(r));
}

/* Hold the slice's mailbox (@hold: the request in hand answered first, then none taken
 * until released: what is in the rings moves with the control area) or release it. */
static int src_mbox(struct lm *m, bool hold, struct cmn_fail *f)
{
	int r = hold ? pf_svc_pause_idle(m->s, LM_IDLE_WAIT_MS) : (pf_svc_pause(m->s), 0);

	if (!r)
		m->s->mbox_held = hold;
	pf_svc_resume(m->s);
	return r ? cmn_fail(f, r, "a mailbox request still in hand after %u ms",
			    LM_IDLE_WAIT_MS) : 0;
}

/* A "vmm" switchover: every page sent while the VMM may have copied the BAR goes again.
 * The VMM (QEMU migrating the BAR as RAM) wrote each page at the destination as it read
 * it at the source, whenever its stream got there: a page an engine changed after the
 * VMM's read, and that a round sent before the VMM's copy arrived, holds the VMM's older
 * bytes there, while this side's fingerprint says it holds the round's. The switchover
 * comes after the VMM's last write, so what it sends wins. Returns the pages marked. */
static uint64_t src_again(struct src_pages *sp)
{
	uint64_t n = 0;

	sp->mark_again = false;
	for (uint64_t w = 0; w < sp->words; w++) {
		sp->dirty[w] |= sp->again[w];
		n += (uint64_t)__builtin_popcountll(sp->again[w]);
		sp->again[w] = 0;
	}
	return n;
}

/* The switchover: the slice stopped (no engine time; its mailbox held, so that the RM
 * state, the memory and the rings agree from the full compare on), a full compare, then
 * the engines' last writes, the guest's state and the control area, and the destination's
 * commit. On failure the engines run again and the mailbox is served again. */
static int src_switchover(struct lm *m, struct src_pages *sp, unsigned int round,
			  struct cmn_fail *f)
{
	uint64_t sent = 0, again, t[5];
	int r;

	/* Where the downtime goes, for the log: stops, compare, final pass, commit. */
	t[0] = cmn_now_ns();
	r = src_engines_stop(m, f);
	if (r)
		return r;
	r = src_mbox(m, true, f);
	if (r) {
		src_engines_run(m);
		return r;
	}
	t[1] = cmn_now_ns();
	again = src_again(sp);
	r = src_pass(m, sp, ++round, false, false, &sent, f);
	t[2] = cmn_now_ns();
	if (!r) {
		src_progress(m, round, sent);
		r = src_pass(m, sp, ++round, true, true, &sent, f);
	}
	t[3] = cmn_now_ns();
	if (!r)
		r = recv_ack(m, f);
	t[4] = cmn_now_ns();
	if (!r)
		cmn_info("slice %s: switchover: engines and mailbox stopped in %" PRIu64 " ms, "
			 "compare %" PRIu64 " ms (%" PRIu64 " page(s) sent while a VMM copied "
			 "sent again), final pass %" PRIu64 " ms, commit %" PRIu64 " ms", m->uuid,
			 (t[1] - t[0]) / 1000000, (t[2] - t[1]) / 1000000, again,
			 (t[3] - t[2]) / 1000000, (t[4] - t[3]) / 1000000);
	if (r) {
		if (!lm_unknown(m)) {
			src_mbox(m, false, NULL);
			src_engines_run(m);
		}
		return r;
	}
	lm_test_exit(m, "committed");
	cmn_mutex_lock(&m->L->lock);
	m->t_ack = cmn_now_ns();
	cmn_mutex_unlock(&m->L->lock);
	src_progress(m, round, sent);
	return 0;
}

/* Pre-copy rounds until the dirty set is small or the round limit, then (at once or on
 * migrate-switchover) the stop and the last two passes. */
static int src_migrate(struct lm *m, struct src_pages *sp, struct cmn_fail *f)
{
	unsigned int round = 0;
	uint64_t sent = 0;
	bool waiting = false;
	int r;

	/* Rounds until the dirty set is small or the round limit; a manual switchover then
	 * waits, with a round now and then, for migrate-switchover. */
	r = src_pass(m, sp, round, false, false, &sent, f);
	while (!r) {
		src_progress(m, round, sent);
		if (round && (sent <= m->switch_bytes || round >= m->max_rounds)) {
			if (!m->manual)
				break;
			if (!waiting)
				lm_set_status(m, LM_WAITING);
			waiting = true;
			/* The orchestrator starts the VMM's copy once it sees "waiting". */
			sp->mark_again = m->vmm;
			r = src_wait_go(m, f);
			if (r)
				break;
		}
		r = src_pass(m, sp, ++round, false, false, &sent, f);
	}
	if (r < 0)
		return r;
	/* Before the stop, so that its writes (fsyncs) are not part of the downtime. */
	r = src_handover(m, f);
	if (r)
		return r;
	cmn_mutex_lock(&m->L->lock);
	m->precopy_rounds = round + 1;
	m->t_stop = cmn_now_ns();
	m->status = LM_STOP_COPY;
	cmn_mutex_unlock(&m->L->lock);
	lm_sm(m, MIG_S_STOP_COPY);
	r = src_switchover(m, sp, round, f);
	if (!r)
		lm_sm(m, MIG_S_STOPPED);
	return r;
}

/* The worker's last word: the record's end state from @r (and @msg), seen by status. */
static void lm_finish(struct lm *m, int r, const char *msg)
{
	cmn_mutex_lock(&m->L->lock);
	m->t_end = cmn_now_ns();
	m->status = !r ? LM_COMPLETED : r == -ECANCELED ? LM_CANCELLED : LM_FAILED;
	snprintf(m->error, sizeof(m->error), "%s", r ? msg : "");
	m->s = NULL;		/* the daemon's alone again (or gone) */
	m->finished = true;
	lm_changed(m);
	cmn_mutex_unlock(&m->L->lock);
}

/* Append @note to @f's message (cut at its size). */
static void fail_note(struct cmn_fail *f, const char *note)
{
	size_t n = strlen(f->msg);

	snprintf(f->msg + n, sizeof(f->msg) - n, "%s", note);
}

static void *src_main(void *arg)
{
	struct lm *m = arg;
	struct pf_daemon *d = m->L->d;
	struct src_pages sp = { 0 };
	struct cmn_fail f = { 0 };
	bool unknown;
	int r;

	cmn_log_scope_set(m->s->vf, m->uuid);
	r = lm_wait(m, POLLOUT);
	if (!r) {
		socklen_t sl = sizeof(r);

		if (getsockopt(m->sock, SOL_SOCKET, SO_ERROR, &r, &sl) || r)
			r = -(r ? r : errno);
	}
	if (r)
		cmn_fail(&f, r, r == -ECANCELED ? "cancelled" : "cannot connect to %s: %s", m->peer,
			 cmn_strerror(r));
	else
		lm_set_status(m, LM_PRE_COPY);
	gpu_dirty_track(d->gpu, true);
	if (!r && (r = src_pages_init(&sp, m->s)))
		cmn_fail(&f, r, "out of memory");
	if (!r)
		r = src_migrate(m, &sp, &f);
	gpu_dirty_track(d->gpu, false);
	src_pages_fini(&sp);
	unknown = r && lm_unknown(m);
	if (!r) {
		lm_request(m, LM_REQ_FORGET);	/* stopped and undefined here: it runs there */
	} else if (unknown) {
		lm_sm(m, MIG_S_STOPPED);
		lm_request(m, LM_REQ_HOLD);	/* it may run there: not here */
		fail_note(&f, "; the destination may have committed: the slice is stopped here, "
			  "migrated-out (unconfirmed)");
	} else {
		if (m->handed_over)
			lm_request(m, LM_REQ_UNMARK);	/* refused or never sent: it is ours */
		lm_sm(m, MIG_S_RUNNING);
		lm_request(m, LM_REQ_RESUME);
	}
	lm_finish(m, r, f.msg);
	if (r)
		cmn_warn("migration of %s to %s %s: %s%s", m->uuid, m->peer,
			 r == -ECANCELED ? "cancelled" : "failed", f.msg,
			 unknown ? "" : " (the slice runs on here)");
	else
		cmn_info("slice %s migrated to %s", m->uuid, m->peer);
	return NULL;
}

/* ---- destination --------------------------------------------------------------------------- */

/* Write @len bytes of @region at @off into the slice's memory; in a later pass (not
 * @first_pass) its zero pages become holes again, unless the slice's memory is reserved
 * (vram_prealloc): a hole would give its page back to /dev/shm, so zeros are written. */
static int dst_write(struct pf_slice *s, uint32_t region, uint64_t off, const uint8_t *p,
		     size_t len, bool first_pass, struct cmn_fail *f)
{
	static const uint8_t zero[LM_PAGE];
	uint64_t at = pf_mig_region_base(s, region) + off;

	while (len) {
		size_t n = first_pass || at % LM_PAGE ? len : cmn_min(len, (size_t)LM_PAGE);
		ssize_t k;

		if (!first_pass && n == LM_PAGE && !s->vram_reserved && !memcmp(p, zero, LM_PAGE)) {
			if (fallocate(s->bar_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				      (off_t)at, LM_PAGE))
				return cmn_fail(f, -errno, "cannot punch the VRAM object at %#" PRIx64, at);
		} else if ((k = pwrite(s->bar_fd, p, n, (off_t)at)) != (ssize_t)n) {
			int err = k < 0 ? -errno : -EIO;

			return cmn_fail(f, err, "cannot write the slice's %s at BAR object byte %#"
					PRIx64 ": %s", region == MIG_R_VRAM ? "VRAM" : "DMA memory",
					at, k < 0 ? cmn_strerror(err) : "short write");
		}
		at += n;
		p += n;
		len -= n;
	}
	return 0;
}

/* An extent read and checked, waiting for the writer. */
struct dst_job {
	uint8_t *buf;			/* the decoder's buffer that holds it */
	struct pf_slice *s;
	uint32_t region;
	uint64_t off;
	const uint8_t *data;
	size_t len;
	bool first_pass;
};

/* A destination's writer thread: it writes the extents the worker has read and checked
 * into the slice's memory while the worker reads and checks the next ones. The write (the
 * kernel allocating and filling a page per 4 KiB) is the larger part of a destination's
 * work, so the two halves run side by side where two CPUs are free. Only checked frames
 * are queued, in stream order; the worker waits for the queue to empty before any other
 * frame, the end of a pass, or a failure, so what follows sees every byte written. */
struct dst_wr {
	struct cmn_mutex lock;
	pthread_cond_t cond;		/* a job queued or done, or quit */
	pthread_t thread;
	bool started, quit;
	struct dst_job q[LM_WR_BUFS];	/* queued: q[tail % N] .. q[(head - 1) % N] */
	unsigned int head, tail;
	uint8_t *spare[LM_WR_BUFS];	/* decoder buffers free to hand out: nspare */
	unsigned int nspare;
	struct cmn_fail f;		/* the first failed write (f.err) */
};

static void *dst_wr_main(void *arg)
{
	struct dst_wr *w = arg;

	cmn_mutex_lock(&w->lock);
	for (;;) {
		struct dst_job j;
		struct cmn_fail f = { 0 };

		while (w->head == w->tail && !w->quit)
			cmn_cond_wait(&w->cond, &w->lock);
		if (w->head == w->tail)
			break;
		j = w->q[w->tail % LM_WR_BUFS];
		if (!w->f.err) {	/* after a failure the pass is lost: only drain */
			cmn_mutex_unlock(&w->lock);
			dst_write(j.s, j.region, j.off, j.data, j.len, j.first_pass, &f);
			cmn_mutex_lock(&w->lock);
			if (f.err && !w->f.err)
				w->f = f;
		}
		w->spare[w->nspare++] = j.buf;
		w->tail++;
		pthread_cond_broadcast(&w->cond);
	}
	cmn_mutex_unlock(&w->lock);
	return NULL;
}

/* Start the writer with its spare buffers; without them (no memory, no thread) the
 * worker writes each extent itself. */
static void dst_wr_start(struct dst_wr *w)
{
	memset(w, 0, sizeof(*w));
	for (; w->nspare < LM_WR_BUFS; w->nspare++)
		if (!(w->spare[w->nspare] = malloc(MIG_DEC_BUF)))
			break;
	if (w->nspare < LM_WR_BUFS) {
		while (w->nspare)
			free(w->spare[--w->nspare]);
		return;
	}
	cmn_mutex_init(&w->lock);
	pthread_cond_init(&w->cond, NULL);
	w->started = !pthread_create(&w->thread, NULL, dst_wr_main, w);
	if (!w->started) {
		pthread_cond_destroy(&w->cond);
		cmn_mutex_destroy(&w->lock);
		while (w->nspare)
			free(w->spare[--w->nspare]);
	}
}

/* Stop the writer once its queue is written (dst_wr_drain() came first), free its buffers. */
static void dst_wr_stop(struct dst_wr *w)
{
	if (!w->started)
		return;
	cmn_mutex_lock(&w->lock);
	w->quit = true;
	pthread_cond_broadcast(&w->cond);
	cmn_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cond);
	cmn_mutex_destroy(&w->lock);
	while (w->nspare)
		free(w->spare[--w->nspare]);
	w->started = false;
}

/* The writer thread's CPU time (0 without one): a destination's pass costs both threads'. */
static uint64_t dst_wr_cpu_ns(const struct dst_wr *w)
{
	clockid_t id;
	struct timespec t;

	if (!w->started || pthread_getcpuclockid(w->thread, &id) || clock_gettime(id, &t))
		return 0;
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Queue the checked extent @fr for the writer: the decoder's buffer that holds it goes
 * with it and the decoder reads on into a spare one. Without a writer, write it here. */
static int dst_wr_queue(struct dst_wr *w, struct mig_dec *dec, struct pf_slice *s,
			const struct mig_frame *fr, bool first_pass, struct cmn_fail *f)
{
	int r = 0;

	if (!w->started)
		return dst_write(s, fr->u.extent.region, fr->u.extent.off, fr->u.extent.data,
				 fr->u.extent.len, first_pass, f);
	cmn_mutex_lock(&w->lock);
	while (!w->nspare && !w->f.err)		/* the queue is full */
		cmn_cond_wait(&w->cond, &w->lock);
	if (w->f.err) {
		r = cmn_fail(f, w->f.err, "%s", w->f.msg);
	} else {
		w->q[w->head++ % LM_WR_BUFS] = (struct dst_job){
			.buf = mig_dec_swap_buf(dec, w->spare[--w->nspare]), .s = s,
			.region = fr->u.extent.region, .off = fr->u.extent.off,
			.data = fr->u.extent.data, .len = fr->u.extent.len, .first_pass = first_pass };
		pthread_cond_broadcast(&w->cond);
	}
	cmn_mutex_unlock(&w->lock);
	return r;
}

/* Wait until everything queued is written: 0, or the first failed write (its message into
 * @f unless @f already holds a failure). The failure is reported once per pass. */
static int dst_wr_drain(struct dst_wr *w, struct cmn_fail *f)
{
	int r;

	if (!w->started)
		return 0;
	cmn_mutex_lock(&w->lock);
	while (w->head != w->tail)
		cmn_cond_wait(&w->cond, &w->lock);
	r = w->f.err;
	if (r && !f->err)
		cmn_fail(f, r, "%s", w->f.msg);
	w->f = (struct cmn_fail){ 0 };
	cmn_mutex_unlock(&w->lock);
	return r;
}

/* The "live" member of a SLICE frame: its pass and whether it is the last. */
static int dst_live(const struct mig_frame *fr, unsigned int want, bool *final,
		    unsigned int *vf_out, struct cmn_fail *f)
{
	json_object *o, *live, *pass, *fin, *vf;
	int r = 0;

	/* By its length and strictly, as the plan reads pass 0's: nothing after the text (an
	 * earlier frame's bytes in the decoder's buffer) is read as more of it. */
	pf_json_parse_strict(fr->u.slice.def, fr->u.slice.def_len, &o);
	if (!o || !json_object_object_get_ex(o, "live", &live) ||
	    !json_object_object_get_ex(live, "pass", &pass) ||
	    !json_object_object_get_ex(live, "final", &fin) ||
	    !json_object_is_type(pass, json_type_int) || !json_object_is_type(fin, json_type_boolean))
		r = cmn_fail(f, -EBADMSG, "pass %u: the SLICE frame names no live pass (an offline "
			     "stream? use vgpuctl restore)", want);
	else if (json_object_get_int(pass) != (int)want)
		r = cmn_fail(f, -EBADMSG, "pass %u: the SLICE frame says pass %d", want,
			     json_object_get_int(pass));
	else
		*final = json_object_get_boolean(fin);
	if (!r && !want && json_object_object_get_ex(live, "vf", &vf) &&
	    json_object_is_type(vf, json_type_int))
		*vf_out = (unsigned int)json_object_get_int(vf);
	json_object_put(o);
	return r;
}

/* One pass; *@final once the last one is loaded. Extents go to the writer @w; any other
 * frame waits until they are written. */
static int dst_pass(struct lm *m, struct dst_wr *w, unsigned int pass, bool *final,
		    struct cmn_fail *f)
{
	struct mig_dec dec;
	struct mig_frame fr;
	uint64_t got = 0, c0 = 0, w0 = 0;
	int r = mig_dec_init(&dec, lm_recv, m, f), rw;

	while (!r && (r = mig_dec_next(&dec, &fr, f)) > 0) {
		r = 0;
		if (fr.type == MIG_F_EXTENT) {
			r = dst_wr_queue(w, &dec, m->s, &fr, !pass, f);
			got += fr.u.extent.len;
			continue;
		}
		if ((r = dst_wr_drain(w, f)))
			break;
		if (fr.type == MIG_F_SLICE) {
			r = dst_live(&fr, pass, final, &m->want_vf, f);
			if (!r && !pass) {
				m->req_frame = &fr;
				r = lm_request(m, LM_REQ_PLAN);
				if (r)
					cmn_fail(f, r, "%s", m->req_err.f.msg);
				send_ack(m, r, r ? f->msg : "");
				c0 = thread_cpu_ns();	/* as the source counts pass 0 */
				w0 = dst_wr_cpu_ns(w);
			} else if (!r && (fr.u.slice.vram_bytes != m->plan.vram ||
					  fr.u.slice.dma_bytes != m->plan.dma)) {
				r = cmn_fail(f, -EBADMSG, "pass %u: region sizes differ from pass 0's",
					     pass);
			}
		} else if (fr.type == MIG_F_END) {
			break;
		} else if (fr.type != MIG_F_HELLO && !*final) {
			r = cmn_fail(f, -EBADMSG, "pass %u: frame %u (%s): the guest's state comes "
				     "in the final pass only", pass, fr.seq, mig_frame_name(fr.type));
		} else if (fr.type != MIG_F_HELLO) {
			m->req_frame = &fr;
			r = lm_request(m, LM_REQ_STATE_LOAD);
			if (r)
				cmn_fail(f, r, "%s", m->req_err.f.msg);
		}
	}
	/* Nothing of this pass may be written after it returns (a failed migration's slice
	 * is discarded next). */
	rw = dst_wr_drain(w, f);
	if (!r)
		r = rw;
	mig_dec_fini(&dec);
	if (!r) {
		cmn_mutex_lock(&m->L->lock);
		m->round = pass;
		if (!pass)
			m->pass0_cpu_ns = thread_cpu_ns() - c0 + dst_wr_cpu_ns(w) - w0;
		m->bytes += got;
		m->dirty_bytes = got;
		lm_changed(m);
		cmn_mutex_unlock(&m->L->lock);
	}
	return r < 0 ? r : 0;
}

static int dst_accept(struct lm *m, struct cmn_fail *f)
{
	struct pollfd p[2] = { { .fd = m->lfd, .events = POLLIN }, { .fd = m->wake_fd, .events = POLLIN } };

	for (;;) {
		if (atomic_load(&m->cancel))
			return cmn_fail(f, -ECANCELED, "cancelled");
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return cmn_fail(f, -errno, "poll: %s", cmn_strerror(-errno));
		if (p[1].revents)
			efd_drain(m->wake_fd);
		if (!p[0].revents)
			continue;
		m->sock = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (m->sock >= 0)
			break;
		if (errno != EAGAIN && errno != EINTR)
			return cmn_fail(f, -errno, "accept: %s", cmn_strerror(-errno));
	}
	if (m->peer[0] != '/')
		tcp_opts(m->sock);
	/* One migration per listen: the socket goes away at once. */
	close(m->lfd);
	m->lfd = -1;
	lm_unlink_own(m);
	return 0;
}

/* After a refusal: no more writes, and what the source still sends is read and dropped
 * until it closes (it stops within a frame once it sees the refusal), so that closing with
 * unread data does not reset a TCP connection before the source read why. A few seconds
 * at most. */
static void dst_linger(struct lm *m)
{
	static _Thread_local uint8_t sink[64 << 10];
	struct pollfd p = { .fd = m->sock, .events = POLLIN };
	uint64_t end = cmn_now_ns() + 3 * 1000000000ull;

	lm_lowat(m, 1);
	shutdown(m->sock, SHUT_WR);
	while (cmn_now_ns() < end && poll(&p, 1, 1000) == 1) {
		ssize_t k = recv(m->sock, sink, sizeof(sink), MSG_DONTWAIT);

		if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
			break;
	}
}

static void *dst_main(void *arg)
{
	struct lm *m = arg;
	struct cmn_fail f = { 0 };
	struct dst_wr w = { .started = false };
	bool final = false;
	unsigned int pass = 0;
	int r = dst_accept(m, &f);

	if (!r) {
		if (m->writer)
			dst_wr_start(&w);
		cmn_mutex_lock(&m->L->lock);
		m->wr_on = w.started;
		cmn_mutex_unlock(&m->L->lock);
		lm_set_status(m, LM_PRE_COPY);
	}
	while (!r && !final)
		r = dst_pass(m, &w, pass++, &final, &f);
	dst_wr_stop(&w);
	if (!r) {
		lm_set_status(m, LM_STOP_COPY);
		r = lm_request(m, LM_REQ_COMMIT);
		if (r)
			cmn_fail(&f, r, "%s", m->req_err.f.msg);
		else
			lm_test_exit(m, "committed");	/* before the ack: the source cannot know */
	}
	if (r && atomic_load(&m->cancel))
		cmn_fail(&f, r = -ECANCELED, "cancelled");
	if (!r && m->commit_unsynced) {
		/* Running here, but a crash may lose it: the source must not let it go. No
		 * answer is what it takes as "may have committed": it holds the slice, with
		 * its hand-over record, until an administrator decides. */
		cmn_err("slice %s: committed, but not durable (%s): the source is not told, and "
			"holds it (migrated-out, unconfirmed)", m->uuid,
			m->L->d->state_sync_why);
		shutdown(m->sock, SHUT_RDWR);
	} else if (m->sock >= 0 && !send_ack(m, r, r ? f.msg : "") && r) {
		dst_linger(m);
	}
	if (m->lfd >= 0) {		/* cancelled while listening: the address is free again */
		close(m->lfd);
		m->lfd = -1;
		lm_unlink_own(m);
	}
	if (r && m->s)
		lm_request(m, LM_REQ_DISCARD);
	lm_finish(m, r, f.msg);
	if (r)
		cmn_warn("incoming migration on %s %s: %s (nothing kept)", m->peer,
			 r == -ECANCELED ? "cancelled" : "failed", f.msg);
	else
		cmn_info("slice %s migrated in from %s", m->uuid, m->peer);
	return NULL;
}

/* ---- the loop thread's side ----------------------------------------------------------------- */

/* 0 if the planned slice @s has exactly @q, what the destination's type @type gives here,
 * else -EPERM naming the first field that differs and both values. */
static int type_fits(const struct pf_slice *s, const struct pf_quota *q, const char *type,
		     struct pf_err *e)
{
	const struct pf_quota *h = &s->prov;
	const struct { const char *name; uint64_t have, want; } f[] = {
		{ "vram_bytes", h->vram, q->vram },
		{ "channels", h->channels, q->channels },
		{ "doorbells", h->doorbells, q->doorbells },
		{ "exec_quantum_us", h->exec_quantum_us, q->exec_quantum_us },
		{ "preempt_timeout_us", h->preempt_timeout_us, q->preempt_timeout_us },
		{ "rm_clients", h->rm_clients, q->rm_clients },
		{ "rm_objects", h->rm_objects, q->rm_objects },
	};

	for (unsigned int i = 0; i < VGPU_ARRAY_SIZE(f); i++)
		if (f[i].have != f[i].want)
			return cmn_fail(&e->f, -EPERM, "slice %s is not what this vgpud takes: "
					"\"type\" %s gives %s %" PRIu64 " here, the stream's slice "
					"(type %s) has %" PRIu64, s->uuid, type, f[i].name,
					f[i].want, s->type, f[i].have);
	if (h->priority != q->priority)
		return cmn_fail(&e->f, -EPERM, "slice %s is not what this vgpud takes: \"type\" %s "
				"gives priority %s here, the stream's slice (type %s) has %s",
				s->uuid, type, pf_priority_name(q->priority), s->type,
				pf_priority_name(h->priority));
	return 0;
}

/* A destination given "type": the stream's slice must have exactly what a slice of that
 * type, with nothing custom, gets here at its start (the stream's definition, custom sizes
 * included, as the plan computed it), or it is refused before anything is copied or the
 * source stops its guest. The definition is kept as it came: the type is the destination's
 * check, not a new type for the slice. */
static int plan_type_check(struct pf_daemon *d, struct lm *m, struct pf_err *e)
{
	struct pf_slice *t = calloc(1, sizeof(*t));
	struct pf_quota q;
	int r;

	if (!t)
		return cmn_fail(&e->f, -ENOMEM, "out of memory");
	snprintf(t->type, sizeof(t->type), "%s", m->want_type);
	memcpy(t->uuid, m->plan.s->uuid, sizeof(t->uuid));
	r = pf_slice_quota(d, t, &q, e);
	free(t);
	return r ? r : type_fits(m->plan.s, &q, m->want_type, e);
}

/* A destination's plan: the SLICE frame checked here, the slice brought up RESUMING. */
static int req_plan(struct pf_daemon *d, struct lm *m, struct pf_err *e)
{
	struct pf_slice *s;
	int r = pf_mig_plan(d, m->req_frame, &m->plan, e);

	if (!r && m->want[0] && strcmp(m->want, m->plan.s->uuid))
		r = cmn_fail(&e->f, -EPERM, "this vgpud expects slice %s, the stream holds %s",
			     m->want, m->plan.s->uuid);
	if (!r && m->want_type[0])
		r = plan_type_check(d, m, e);
	if (!r && pf_live_busy(d, pf_slice_find(d, m->plan.s->uuid)))
		r = cmn_fail(&e->f, -EBUSY, "slice %s is migrating here already", m->plan.s->uuid);
	if (r) {
		pf_mig_plan_free(&m->plan);
		return r;
	}
	/* The guest's handles name the source's VF: the same one here if it is free. A
	 * slice whose guest announced itself (guest_abi) carries its state in the final
	 * pass, which loads only on that VF: refused here, before the source stops its guest,
	 * as a restore's plan refuses it (pf_mig_state_vf()). */
	if (m->want_vf && m->want_vf <= d->num_vfs && !d->vfs[m->want_vf]) {
		m->plan.vf = m->want_vf;
	} else if (m->want_vf && m->plan.s->mig_guest_abi) {
		r = cmn_fail(&e->f, -EBUSY, "slice %s: its guest's handles name VF %u, which is %s "
			     "here (its state moves only to the same VF)", m->plan.s->uuid,
			     m->want_vf, m->want_vf <= d->num_vfs ? "in use" : "not enabled");
		pf_mig_plan_free(&m->plan);
		return r;
	}
	snprintf(m->uuid, sizeof(m->uuid), "%s", m->plan.s->uuid);
	cmn_log_scope_set(m->plan.vf, m->uuid);
	/* Before the bring-up, which gives the BAR object and endpoints to the owner; the
	 * commit writes it into the journal and the definition file. */
	if (m->set_owner && m->plan.s->owner_uid != m->owner_uid) {
		cmn_info("slice %s: owner uid %ld here (the stream's: %ld)", m->uuid, m->owner_uid,
			 m->plan.s->owner_uid);
		m->plan.s->owner_uid = m->owner_uid;
	}
	r = pf_mig_bring_up(d, &m->plan, &s, e);
	cmn_log_scope_clear();
	if (!r) {
		cmn_mutex_lock(&m->L->lock);
		m->s = s;
		cmn_mutex_unlock(&m->L->lock);
	}
	return r;
}

/* The source's end: the slice runs on the destination, so it stops and goes here. */
static void req_forget(struct pf_daemon *d, struct lm *m)
{
	json_object *args = json_object_new_object(), *ret = json_object_new_object();
	struct pf_err e = { 0 };
	bool transient = m->s->transient;

	json_object_object_add(args, "uuid", json_object_new_string(m->uuid));
	cmn_mutex_lock(&m->L->lock);
	m->s = NULL;		/* pf_live_busy() no longer holds it */
	cmn_mutex_unlock(&m->L->lock);
	if (pf_slice_stop_cmd(d, args, false, ret, &e) ||
	    (!transient && pf_slice_undefine(d, args, false, ret, &e)))
		cmn_warn("slice %s migrated, but it could not be removed here: %s", m->uuid, e.f.msg);
	json_object_put(e.data);
	json_object_put(args);
	json_object_put(ret);
}

/* Test builds: the next directory fsync (state file write) fails if @m's sync (write)
 * test point is @what. */
static void lm_test_fault(const struct lm *m, const char *what)
{
#ifdef VGPU_TEST_HOOKS
	if (m->sync_fail_at && !strcmp(m->sync_fail_at, what))
		pf_test_dir_fsync_err = -EIO;
	if (m->write_fail_at && !strcmp(m->write_fail_at, what))
		pf_test_write_err = -EIO;
#else
	(void)m;
	(void)what;
#endif
}

/* Write the slice's definition file (unless transient), then the journal, or the reverse
 * (@journal_first). */
static int mark_write(struct pf_daemon *d, struct pf_slice *s, bool journal_first)
{
	int r = 0;

	if (!journal_first)
		r = pf_slice_def_write(d, s);
	if (!r)
		r = pf_state_save_journal(d);
	if (!r && journal_first)
		r = pf_slice_def_write(d, s);
	return r;
}

/* Set (@on) or drop the source's hand-over record. Set: the definition file first, the
 * journal last (a restart believes the journal's copy of the definition, state.c); drop:
 * the reverse. Either way a crash between the two leaves the journal deciding. A record
 * on an unsound state directory (a failed fsync) may vanish in a crash, so it is not set:
 * the switchover, after which the destination may run the slice, must not begin. */
static int req_mark(struct pf_daemon *d, struct lm *m, bool on, struct pf_err *e)
{
	struct pf_slice *s = m->s;
	int r;

	if (on)
		snprintf(s->migrated_to, sizeof(s->migrated_to), "%.*s",
			 (int)sizeof(s->migrated_to) - 1, m->peer);
	else
		s->migrated_to[0] = 0;
	lm_test_fault(m, on ? "handover" : "unmark");
	r = mark_write(d, s, !on);
	if (!r && on && d->state_sync_err) {
		r = d->state_sync_err;
		cmn_fail(&e->f, r, "slice %s: the record is not durable: %s", s->uuid,
			 d->state_sync_why);
	} else if (r) {
		cmn_fail(&e->f, r, "slice %s: %s", s->uuid, cmn_strerror(r));
	}
	if (r && on) {
		/* Not recorded: the slice runs on here, and the state must say so. */
		s->migrated_to[0] = 0;
		r = mark_write(d, s, true);
	}
	/* The slice resumes here all the same (the destination did not commit); a next start
	 * that holds it is the safe side. */
	if (r)
		pf_state_behind(d, r, "slice %s's migration failed and it runs here, but its state "
				"may still hold its hand-over record: if vgpud ends before it "
				"writes it again (it does when it stops), its next start holds the "
				"slice until reclaim-slice", s->uuid);
	return e->f.err;
}

/* The final END went out and no answer came: the destination may run the slice now, so
 * nothing of it runs here, but it keeps its VF and VRAM, as a paused source VM keeps its
 * memory: held, defined (a transient one gets a definition file), its record kept, as a
 * restart after a crash at this point holds it (state.c handed_over()). The switchover
 * left its engines stopped, its mailbox held and its state STOPPED. */
static void req_hold(struct pf_daemon *d, struct lm *m)
{
	struct pf_slice *s = m->s;

	s->transient = false;
	if (mark_write(d, s, false))
		cmn_warn("slice %s: its definition file or journal cannot be written; the journal "
			 "holds its record all the same", s->uuid);
	cmn_mutex_lock(&m->L->lock);
	m->s = NULL;		/* pf_live_busy() no longer holds it */
	cmn_mutex_unlock(&m->L->lock);
	cmn_warn("slice %s: held after an unconfirmed migration to %s: VF %u and its VRAM kept, "
		 "nothing of it runs; `vgpuctl reclaim -u %s` runs it here again, `vgpuctl "
		 "undefine -u %s` drops it", s->uuid, s->migrated_to, s->vf, s->uuid, s->uuid);
	pf_event(d, "SLICE_HELD", pf_slice_json(d, s));
}

static void req_run(struct pf_daemon *d, struct lm *m)
{
	struct pf_err e = { 0 };
	int r = 0;

	switch (m->req) {
	case LM_REQ_PLAN:
		r = req_plan(d, m, &e);
		break;
	case LM_REQ_COMMIT:
		lm_test_fault(m, "commit");
		r = pf_mig_commit(d, m->s, &m->plan, &e);
		if (!r)
			pf_event(d, "SLICE_STARTED", pf_slice_json(d, m->s));
		m->commit_unsynced = !r && d->state_sync_err;
		break;
	case LM_REQ_DISCARD:
		pf_mig_discard(d, m->s);
		cmn_mutex_lock(&m->L->lock);
		m->s = NULL;
		cmn_mutex_unlock(&m->L->lock);
		break;
	case LM_REQ_FORGET:
		req_forget(d, m);
		break;
	case LM_REQ_HANDOVER:
	case LM_REQ_UNMARK:
		r = req_mark(d, m, m->req == LM_REQ_HANDOVER, &e);
		break;
	case LM_REQ_RESUME:
		/* The slice stays here: a guest that left meanwhile lets go of its RM state
		 * and its queued requests now, as its detach would have. */
		if (m->guest_left)
			pf_endpoint_guest_left(d, m->s);
		break;
	case LM_REQ_HOLD:
		req_hold(d, m);
		break;
	case LM_REQ_STATE_SAVE:
		/* A guest may have attached during pre-copy: it must be one that can move. */
		r = pf_endpoint_mig_check(m->s, e.f.msg, sizeof(e.f.msg));
		if (r)
			e.f.err = r;
		else
			r = pf_mig_state_save_live(d, m->s, m->req_enc, &e);
		break;
	case LM_REQ_STATE_LOAD:
		r = pf_mig_load_frame(d, &m->plan, m->s, m->req_frame, &e);
		break;
	case LM_REQ_NONE:
		break;
	}
	json_object_put(e.data);
	cmn_mutex_lock(&m->L->lock);
	m->req_err = (struct pf_err){ .f = e.f };
	m->req_ret = r;
	m->req = LM_REQ_NONE;
	pthread_cond_broadcast(&m->L->cond);
	cmn_mutex_unlock(&m->L->lock);
}

static json_object *lm_json(struct lm *m)
{
	json_object *o = json_object_new_object();
	uint64_t now = m->t_end ? m->t_end : cmn_now_ns(), el = now - m->t_start;
	uint64_t rate = el ? m->bytes * 1000000000ull / el : 0;

	json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
	json_object_object_add(o, "role", json_object_new_string(m->source ? "source" : "destination"));
	json_object_object_add(o, "status", json_object_new_string(lm_status_names[m->status]));
	if (m->s)
		json_object_object_add(o, "state", json_object_new_string(mig_state_name(m->s->mig.state)));
	json_object_object_add(o, "peer", json_object_new_string(m->peer));
	json_object_object_add(o, "round", json_object_new_int((int)m->round));
	json_object_object_add(o, "bytes", json_object_new_uint64(m->bytes));
	json_object_object_add(o, "dirty_bytes", json_object_new_uint64(m->dirty_bytes));
	if (m->source)
		json_object_object_add(o, "dirty_bytes_per_s", json_object_new_uint64(m->dirty_rate));
	json_object_object_add(o, "remaining_bytes", json_object_new_uint64(m->remaining));
	json_object_object_add(o, "estimate_ms", json_object_new_uint64(rate ? m->remaining * 1000 /
									 rate : 0));
	if (m->source && m->t_ack)
		json_object_object_add(o, "downtime_ms", json_object_new_double(
			(double)(m->t_ack - m->t_stop) / 1e6));
	json_object_object_add(o, "total_ms", json_object_new_double((double)el / 1e6));
	if (m->source) {
		json_object_object_add(o, "stream_ms", json_object_new_double(
			(double)m->stream_ns / 1e6));
		json_object_object_add(o, "precopy_rounds", json_object_new_int(
			(int)m->precopy_rounds));
		json_object_object_add(o, "first_pass_bytes", json_object_new_uint64(m->pass0_bytes));
		json_object_object_add(o, "first_pass_ms", json_object_new_double(
			(double)m->pass0_ns / 1e6));
	}
	if (m->pass0_cpu_ns)
		json_object_object_add(o, "first_pass_cpu_ms", json_object_new_double(
			(double)m->pass0_cpu_ns / 1e6));
	if (!m->source)
		json_object_object_add(o, "writer_thread", json_object_new_boolean(m->wr_on));
	if (m->error[0])
		json_object_object_add(o, "error", json_object_new_string(m->error));
	return o;
}

static void lm_free(struct lm *m)
{
	if (m->lfd >= 0) {
		close(m->lfd);
		lm_unlink_own(m);
	}
	if (m->sock >= 0)
		close(m->sock);
	if (m->wake_fd >= 0)
		close(m->wake_fd);
	pf_mig_plan_free(&m->plan);
	free(m->sbuf);
	free(m);
}

/* Join finished workers; keep the last LM_KEEP_DONE finished records. */
static void lm_reap(struct lm_ctx *L)
{
	struct cmn_list *it, *nx;
	unsigned int done = 0;

	for (it = L->migs.prev; it != &L->migs; it = nx) {
		struct lm *m = (struct lm *)((char *)it - offsetof(struct lm, node));
		bool fin, sent;

		nx = it->prev;
		cmn_mutex_lock(&L->lock);
		fin = m->finished;
		sent = m->gen == m->gen_sent;
		cmn_mutex_unlock(&L->lock);
		if (!fin)
			continue;
		if (m->started) {
			pthread_join(m->thread, NULL);
			m->started = false;
			close(m->sock);
			m->sock = -1;
		}
		if (++done > LM_KEEP_DONE && sent) {
			cmn_list_del(&m->node);
			lm_free(m);
		}
	}
}

void pf_live_handle(struct pf_daemon *d)
{
	struct lm_ctx *L = ctx_of(d, false);
	struct cmn_list *it;

	if (!L)
		return;
	efd_drain(L->efd);
	for (it = L->migs.next; it != &L->migs; it = it->next) {
		struct lm *m = (struct lm *)((char *)it - offsetof(struct lm, node));
		json_object *ev = NULL;
		bool req;

		cmn_mutex_lock(&L->lock);
		if (m->gen != m->gen_sent) {
			m->gen_sent = m->gen;
			ev = lm_json(m);
		}
		req = m->req != LM_REQ_NONE;	/* set by the worker, which now waits */
		cmn_mutex_unlock(&L->lock);
		if (ev)
			pf_event(d, "MIGRATION", ev);
		if (req)
			req_run(d, m);
	}
	lm_reap(L);
}

int pf_live_pollfd(struct pf_daemon *d)
{
	struct lm_ctx *L = ctx_of(d, false);

	return L ? L->efd : -1;
}

bool pf_live_keep_guest(struct pf_daemon *d, const struct pf_slice *s)
{
	struct lm_ctx *L = s ? ctx_of(d, false) : NULL;
	bool keep = false;

	if (s && pf_slice_held(s))
		return true;	/* its guest's RM state waits for a reclaim (pf_slice_unhold()) */
	if (!L)
		return false;
	cmn_mutex_lock(&L->lock);
	for (struct cmn_list *it = L->migs.next; it != &L->migs && !keep; it = it->next) {
		struct lm *m = (struct lm *)((char *)it - offsetof(struct lm, node));

		if (m->source && m->s == s)
			keep = m->guest_left = true;
	}
	cmn_mutex_unlock(&L->lock);
	return keep;
}

bool pf_live_busy(struct pf_daemon *d, const struct pf_slice *s)
{
	struct lm_ctx *L = s ? ctx_of(d, false) : NULL;
	bool busy = false;

	if (!L)
		return false;
	cmn_mutex_lock(&L->lock);
	for (struct cmn_list *it = L->migs.next; it != &L->migs && !busy; it = it->next)
		busy = ((struct lm *)((char *)it - offsetof(struct lm, node)))->s == s;
	cmn_mutex_unlock(&L->lock);
	return busy;
}

bool pf_live_active(struct pf_daemon *d)
{
	struct lm_ctx *L = ctx_of(d, false);
	bool active = false;

	if (!L)
		return false;
	cmn_mutex_lock(&L->lock);
	for (struct cmn_list *it = L->migs.next; it != &L->migs && !active; it = it->next)
		active = !((struct lm *)((char *)it - offsetof(struct lm, node)))->finished;
	cmn_mutex_unlock(&L->lock);
	return active;
}

void pf_live_fini(struct pf_daemon *d)
{
	struct lm_ctx *L = ctx_of(d, false);
	struct cmn_list *it;
	bool left = true;

	if (!L)
		return;
	for (it = L->migs.next; it != &L->migs; it = it->next) {
		struct lm *m = (struct lm *)((char *)it - offsetof(struct lm, node));

		atomic_store(&m->cancel, true);
		efd_kick(m->wake_fd);
	}
	/* The workers finish through the loop's requests: serve them until all are done. */
	while (left) {
		struct pollfd p = { .fd = L->efd, .events = POLLIN };

		pf_live_handle(d);
		left = false;
		cmn_mutex_lock(&L->lock);
		for (it = L->migs.next; it != &L->migs; it = it->next)
			left |= !((struct lm *)((char *)it - offsetof(struct lm, node)))->finished;
		cmn_mutex_unlock(&L->lock);
		if (left)
			poll(&p, 1, -1);
	}
	pf_live_handle(d);
	while (!cmn_list_empty(&L->migs)) {
		struct lm *m = (struct lm *)((char *)L->migs.next - offsetof(struct lm, node));

		cmn_list_del(&m->node);
		lm_free(m);
	}
	cmn_mutex_lock(&lm_ctxs_lock);
	for (unsigned int i = 0; i < LM_MAX_DAEMONS; i++)
		if (lm_ctxs[i] == L)
			lm_ctxs[i] = NULL;
	cmn_mutex_unlock(&lm_ctxs_lock);
	close(L->efd);
	pthread_cond_destroy(&L->cond);
	cmn_mutex_destroy(&L->lock);
	free(L);
}

/* ---- the verbs ------------------------------------------------------------------------------ */

static struct lm *lm_new(struct pf_daemon *d, bool source, struct pf_err *e)
{
	struct lm_ctx *L = ctx_of(d, true);
	struct lm *m = L ? calloc(1, sizeof(*m)) : NULL;

	if (!m) {
		cmn_fail(&e->f, -ENOMEM, "out of memory");
		return NULL;
	}
	m->L = L;
	m->source = source;
	m->lfd = m->sock = -1;
	m->corrupt_at = -1;
	m->t_start = cmn_now_ns();
	m->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->wake_fd < 0) {
		free(m);
		cmn_fail(&e->f, -errno, "eventfd: %s", cmn_strerror(-errno));
		return NULL;
	}
#ifdef VGPU_TEST_HOOKS
	if (source && getenv("VGPU_MIG_CORRUPT_AT"))
		m->corrupt_at = strtoll(getenv("VGPU_MIG_CORRUPT_AT"), NULL, 0);
	m->exit_at = getenv(source ? "VGPU_MIG_SRC_EXIT_AT" : "VGPU_MIG_DST_EXIT_AT");
	m->sync_fail_at = getenv(source ? "VGPU_MIG_SRC_SYNC_FAIL_AT" : "VGPU_MIG_DST_SYNC_FAIL_AT");
	m->write_fail_at = getenv(source ? "VGPU_MIG_SRC_WRITE_FAIL_AT" :
				  "VGPU_MIG_DST_WRITE_FAIL_AT");
	if (!source && getenv("VGPU_MIG_WRITER"))
		m->writer = atoi(getenv("VGPU_MIG_WRITER")) != 0;
#endif
	return m;
}

/* Drop finished records of @uuid (a new migration of it replaces them), then add @m. */
static int lm_start(struct lm *m, void *(*fn)(void *), struct pf_err *e)
{
	struct lm_ctx *L = m->L;
	struct cmn_list *it, *nx;
	int r;

	for (it = L->migs.next; it != &L->migs; it = nx) {
		struct lm *o = (struct lm *)((char *)it - offsetof(struct lm, node));
		bool done;

		nx = it->next;
		cmn_mutex_lock(&L->lock);
		done = o->finished && !o->started;	/* reaped: its worker is gone */
		cmn_mutex_unlock(&L->lock);
		if (done && m->uuid[0] && !strcmp(o->uuid, m->uuid)) {
			cmn_list_del(&o->node);
			lm_free(o);
		}
	}
	cmn_mutex_lock(&L->lock);
	cmn_list_add(&L->migs, &m->node);
	lm_changed(m);
	cmn_mutex_unlock(&L->lock);
	r = pthread_create(&m->thread, NULL, fn, m);
	if (r) {
		cmn_mutex_lock(&L->lock);
		cmn_list_del(&m->node);
		cmn_mutex_unlock(&L->lock);
		return cmn_fail(&e->f, -r, "cannot start the migration thread: %s", cmn_strerror(-r));
	}
	m->started = true;
	return 0;
}

/* A string argument, or NULL. */
static const char *arg_str(json_object *args, const char *key)
{
	json_object *v;

	return args && json_object_object_get_ex(args, key, &v) &&
	       json_object_is_type(v, json_type_string) && pf_json_str_clean(v) ?
	       json_object_get_string(v) : NULL;
}

/* The slice named by "uuid". */
static int arg_slice(struct pf_daemon *d, json_object *args, const char *cmd,
		     struct pf_slice **out, struct pf_err *e)
{
	const char *u = arg_str(args, "uuid");
	char norm[PF_UUID_STR];

	if (!u || ctlc_uuid_parse(u, norm, NULL))
		return cmn_fail(&e->f, -EINVAL, "%s needs \"uuid\", a slice's UUID", cmd);
	*out = pf_slice_find(d, norm);
	if (!*out)
		return cmn_fail(&e->f, -ENOENT, "slice %s not found", norm);
	return 0;
}

/* The options of migrate-outgoing. */
static int out_opts(json_object *args, struct lm *m, struct pf_err *e)
{
	const char *sw = arg_str(args, "switchover");
	json_object *v;

	m->max_rounds = LM_DEF_ROUNDS;
	m->switch_bytes = LM_DEF_SWITCH_BYTES;
	if (sw && strcmp(sw, "auto") && strcmp(sw, "manual") && strcmp(sw, "vmm"))
		return cmn_fail(&e->f, -EINVAL, "\"switchover\" is \"auto\", \"manual\" or "
				"\"vmm\", not \"%.32s\"", sw);
	/* "vmm": manual, for a guest whose VMM copies the BAR to the destination as well. */
	m->vmm = sw && !strcmp(sw, "vmm");
	m->manual = m->vmm || (sw && !strcmp(sw, "manual"));
	if (json_object_object_get_ex(args, "max-rounds", &v)) {
		int64_t n = json_object_get_int64(v);

		if (!json_object_is_type(v, json_type_int) || n < 1 || n > LM_MAX_ROUNDS)
			return cmn_fail(&e->f, -EINVAL, "\"max-rounds\" must be 1..%d", LM_MAX_ROUNDS);
		m->max_rounds = (unsigned int)n;
	}
	if (json_object_object_get_ex(args, "switchover-bytes", &v)) {
		if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
			return cmn_fail(&e->f, -EINVAL, "\"switchover-bytes\" must be a byte count");
		m->switch_bytes = (uint64_t)json_object_get_int64(v);
	}
	return 0;
}

int pf_live_outgoing_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e)
{
	const char *to = arg_str(args, "to");
	struct pf_slice *s;
	struct lm *m;
	int r = arg_slice(d, args, "migrate-outgoing", &s, e);

	if (r)
		return r;
	if (!to)
		return cmn_fail(&e->f, -EINVAL, "migrate-outgoing needs \"to\": the destination's "
				"migrate-incoming address");
	if ((r = addr_check(to, "to", e)))
		return r;
	if (!s->vf)
		return cmn_fail(&e->f, -EBUSY, "slice %s is not running: a stopped slice has no "
				"contents to migrate (move its definition instead)", s->uuid);
	if (pf_live_busy(d, s) || s->mig.state != MIG_S_RUNNING)
		return cmn_fail(&e->f, -EBUSY, "slice %s is migrating already (%s)", s->uuid,
				mig_state_name(s->mig.state));
	if ((r = pf_endpoint_mig_check(s, e->f.msg, sizeof(e->f.msg))))
		return e->f.err = r;	/* a guest that cannot move: peer mode, an old driver */
	m = lm_new(d, true, e);
	if (!m)
		return e->f.err;
	r = out_opts(args, m, e);
	if (!r && dry) {
		lm_free(m);
		json_object_object_add(ret, "uuid", json_object_new_string(s->uuid));
		json_object_object_add(ret, "result", json_object_new_string("would migrate"));
		return 0;
	}
	if (!r)
		r = open_sock(to, false, m->peer, sizeof(m->peer), &m->sock, NULL, e);
	if (r) {
		lm_free(m);
		return r;
	}
	snprintf(m->uuid, sizeof(m->uuid), "%s", s->uuid);
	m->s = s;
	m->status = LM_CONNECTING;
	cmn_mutex_lock(&m->L->lock);
	mig_sm_set(&s->mig, MIG_S_PRE_COPY, NULL);
	cmn_mutex_unlock(&m->L->lock);
	r = lm_start(m, src_main, e);
	if (r) {
		mig_sm_set(&s->mig, MIG_S_RUNNING, NULL);
		lm_free(m);
		return r;
	}
	json_object_object_add(ret, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(ret, "state", json_object_new_string("pre_copy"));
	json_object_object_add(ret, "to", json_object_new_string(m->peer));
	json_object_object_add(ret, "result", json_object_new_string("migrating"));
	cmn_info("slice %s: migrating to %s (%s switchover)", s->uuid, m->peer,
		 m->vmm ? "manual, VMM copying" : m->manual ? "manual" : "automatic");
	return 0;
}

/* The destination's say over the slice it takes (migrate-incoming): "type", whose sizes
 * the stream's slice must have (checked at the plan), and "owner_uid", its owner here. */
struct in_opts {
	const char *type;		/* NULL: any */
	long owner_uid;
	bool set_owner;
};

static int in_opts_parse(struct pf_daemon *d, json_object *args, struct in_opts *o,
			 struct pf_err *e)
{
	json_object *v;

	if (args && json_object_object_get_ex(args, "type", &v)) {
		if (!json_object_is_type(v, json_type_string) || !pf_json_str_clean(v))
			return cmn_fail(&e->f, -EINVAL, "\"type\" must be a string (a slice type), "
					"not %s", pf_json_kind(v));
		o->type = json_object_get_string(v);
		if (!pf_type_find(d, o->type))
			return cmn_fail(&e->f, -EINVAL, "type \"%.64s\" is not supported (see "
					"types)", o->type);
	}
	if (args && json_object_object_get_ex(args, "owner_uid", &v)) {
		/* As define takes it: a uid, or -1 for root alone. */
		if (!json_object_is_type(v, json_type_int))
			return cmn_fail(&e->f, -EINVAL, "\"owner_uid\" must be an integer (a uid, "
					"or -1: root only), not %s", pf_json_kind(v));
		if (json_object_get_int64(v) < -1 || json_object_get_int64(v) > INT32_MAX)
			return cmn_fail(&e->f, -EINVAL, "\"owner_uid\" must be a uid (0..%d, or -1: "
					"root only), not %" PRId64, INT32_MAX,
					json_object_get_int64(v));
		o->owner_uid = (long)json_object_get_int64(v);
		o->set_owner = true;
	}
	return 0;
}

int pf_live_incoming_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e)
{
	const char *addr = arg_str(args, "listen"), *u = arg_str(args, "uuid");
	char norm[PF_UUID_STR] = "";
	struct in_opts o = { .owner_uid = -1 };
	struct lm *m;
	int r;

	if (!addr)
		return cmn_fail(&e->f, -EINVAL, "migrate-incoming needs \"listen\": a UNIX socket "
				"path or tcp:HOST:PORT");
	if ((r = addr_check(addr, "listen", e)))
		return r;
	if (u && ctlc_uuid_parse(u, norm, NULL))
		return cmn_fail(&e->f, -EINVAL, "\"uuid\" is not a UUID: \"%.64s\"", u);
	if ((r = in_opts_parse(d, args, &o, e)))
		return r;
	if (norm[0] && pf_slice_find(d, norm))
		return cmn_fail(&e->f, -EEXIST, "slice %s already exists here", norm);
	if (dry) {
		json_object_object_add(ret, "result", json_object_new_string("would listen"));
		return 0;
	}
	m = lm_new(d, false, e);
	if (!m)
		return e->f.err;
	snprintf(m->want, sizeof(m->want), "%s", norm);
	snprintf(m->uuid, sizeof(m->uuid), "%s", norm);
	snprintf(m->want_type, sizeof(m->want_type), "%s", o.type ? o.type : "");
	m->owner_uid = o.owner_uid;
	m->set_owner = o.set_owner;
	m->status = LM_LISTENING;
	r = open_sock(addr, true, m->peer, sizeof(m->peer), &m->lfd, &m->lst, e);
	if (!r)
		r = lm_start(m, dst_main, e);
	if (r) {
		lm_free(m);
		return r;
	}
	json_object_object_add(ret, "listen", json_object_new_string(m->peer));
	cmn_info("waiting for an incoming migration on %s", m->peer);
	return 0;
}

/* The unfinished migration of @uuid (or listening on @listen). */
static struct lm *lm_find(struct pf_daemon *d, const char *uuid, const char *listen)
{
	struct lm_ctx *L = ctx_of(d, false);
	struct lm *found = NULL;

	if (!L)
		return NULL;
	cmn_mutex_lock(&L->lock);
	for (struct cmn_list *it = L->migs.next; it != &L->migs && !found; it = it->next) {
		struct lm *m = (struct lm *)((char *)it - offsetof(struct lm, node));

		if (!m->finished && ((uuid && !strcmp(m->uuid, uuid)) ||
				     (listen && !strcmp(m->peer, listen))))
			found = m;
	}
	cmn_mutex_unlock(&L->lock);
	return found;
}

static int find_arg(struct pf_daemon *d, json_object *args, const char *cmd, bool by_listen,
		    struct lm **out, struct pf_err *e)
{
	const char *u = arg_str(args, "uuid"), *l = by_listen ? arg_str(args, "listen") : NULL;
	char norm[PF_UUID_STR];

	if (u && ctlc_uuid_parse(u, norm, NULL))
		return cmn_fail(&e->f, -EINVAL, "\"uuid\" is not a UUID: \"%.64s\"", u);
	if (!u && !l)
		return cmn_fail(&e->f, -EINVAL, "%s needs \"uuid\"%s", cmd,
				by_listen ? " or \"listen\"" : "");
	*out = lm_find(d, u ? norm : NULL, l);
	if (!*out)
		return cmn_fail(&e->f, -ENOENT, "no migration of %s in progress here",
				u ? norm : l);
	return 0;
}

/* The state without @s's record. A held slice's journal names it: the journal first (what
 * a restart believes), the file after, whose failure leaves it behind the journal (a stop
 * writes it first, a start of vgpud rewrites it). A stopped one has only its file. */
static int reclaim_write(struct pf_daemon *d, struct pf_slice *s)
{
	int r;

	if (!s->vf)
		return pf_state_save_slice(d, s);
	r = pf_state_save_journal(d);
	if (!r)
		pf_slice_def_follow(d, s, "reclaimed");
	return r;
}

int pf_live_reclaim_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			struct pf_err *e)
{
	char was[PF_MIGRATED_TO_MAX];
	struct pf_slice *s;
	int r = arg_slice(d, args, "reclaim-slice", &s, e);

	if (r)
		return r;
	if (!s->migrated_to[0])
		return cmn_fail(&e->f, -EINVAL, "slice %s has no hand-over record (it did not "
				"migrate out unconfirmed)", s->uuid);
	json_object_object_add(ret, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(ret, "migrated_to", json_object_new_string(s->migrated_to));
	json_object_object_add(ret, "result", json_object_new_string(dry ? "would reclaim" :
								      "reclaimed"));
	/* A held slice runs on with its VRAM; a stopped one may start, with empty VRAM. */
	json_object_object_add(ret, "state", json_object_new_string(s->vf ? "running" :
								     "defined"));
	if (dry)
		return 0;
	memcpy(was, s->migrated_to, sizeof(was));
	s->migrated_to[0] = 0;
	r = reclaim_write(d, s);
	if (r) {
		memcpy(s->migrated_to, was, sizeof(was));
		return cmn_fail(&e->f, r, "slice %s: cannot write the %s without its record: %s",
				s->uuid, s->vf ? "journal" : "definition file", cmn_strerror(r));
	}
	if (s->vf)
		pf_slice_unhold(d, s);
	cmn_info("slice %s reclaimed: its hand-over record to %s is dropped, it %s here", s->uuid,
		 was, s->vf ? "runs on with its VRAM" : "may start");
	pf_event(d, "SLICE_RECLAIMED", pf_slice_json(d, s));
	return 0;
}

int pf_live_switchover_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			   struct pf_err *e)
{
	struct lm *m;
	int r = find_arg(d, args, "migrate-switchover", false, &m, e);

	if (r)
		return r;
	if (!m->source)
		return cmn_fail(&e->f, -EINVAL, "slice %s is migrating in here: the switchover is "
				"the source's", m->uuid);
	json_object_object_add(ret, "uuid", json_object_new_string(m->uuid));
	if (dry)
		return 0;
	atomic_store(&m->go, true);
	efd_kick(m->wake_fd);
	return 0;
}

/* A cancel reaches a worker wherever it waits (the wake descriptor beside its socket) and
 * before each write: a source in pre-copy, or in its switchover before the final END went
 * out, resumes; after END, with no answer yet, the destination may have committed, so the
 * source holds the slice as when the connection breaks there (src_main()). Over a UNIX
 * socket, whose living peer may stop reading for ever, this is what ends a stuck stop_copy. */
int pf_live_cancel_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		       struct pf_err *e)
{
	struct lm *m;
	int r = find_arg(d, args, "migrate-cancel", true, &m, e);

	if (r)
		return r;
	json_object_object_add(ret, "uuid", json_object_new_string(m->uuid));
	json_object_object_add(ret, "result", json_object_new_string(dry ? "would cancel" :
								      "cancelling"));
	if (dry)
		return 0;
	atomic_store(&m->cancel, true);
	efd_kick(m->wake_fd);
	return 0;
}

int pf_live_status_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		       struct pf_err *e)
{
	struct lm_ctx *L = ctx_of(d, false);
	const char *u = arg_str(args, "uuid");
	json_object *arr = json_object_new_array();
	char norm[PF_UUID_STR] = "";

	(void)dry;
	if (u && ctlc_uuid_parse(u, norm, NULL)) {
		json_object_put(arr);
		return cmn_fail(&e->f, -EINVAL, "\"uuid\" is not a UUID: \"%.64s\"", u);
	}
	if (L) {
		cmn_mutex_lock(&L->lock);
		for (struct cmn_list *it = L->migs.next; it != &L->migs; it = it->next) {
			struct lm *m = (struct lm *)((char *)it - offsetof(struct lm, node));

			if (!norm[0] || !strcmp(m->uuid, norm))
				json_object_array_add(arr, lm_json(m));
		}
		cmn_mutex_unlock(&L->lock);
	}
	if (norm[0] && !json_object_array_length(arr)) {
		json_object_put(arr);
		return cmn_fail(&e->f, -ENOENT, "no migration of %s here", norm);
	}
	json_object_object_add(ret, "migrations", arr);
	return 0;
}
