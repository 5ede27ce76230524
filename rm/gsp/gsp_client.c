// SPDX-License-Identifier: MIT
/* The CPU-RM's end of the GSP queues: starting and restarting the vgpu-gsp process, RPCs
 * with several in flight per lane, the event worker and the watchdog.
 *
 * Waiting: a caller whose reply is not there yet tries to become its lane's drainer (the
 * rx lock, taken with trylock). The drainer reads the status queue and hands each reply to
 * the slot its sequence names, waking that slot's thread; the others spin on their own
 * slot, then sleep on its wake word. When the drainer's own reply has come it leaves and
 * wakes the rest, one of which takes over. No lock is held while anyone sleeps except the
 * drainer's own rx lock, so a slow RPC on one lane never touches another lane. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <vgpu/version.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/err.h"
#include "common/lock.h"
#include "common/log.h"
#include "rm/gsp/gsp.h"
#ifdef VGPU_TEST_HOOKS
#include "rm/gsp/gsp_test_rpc.h"
#endif

extern char **environ;

/* Happens-before that travels through the other process (a request sent, its reply read
 * by another thread): invisible to ThreadSanitizer, so it is told. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define GSP_HB_RELEASE(p) __tsan_release(p)
#define GSP_HB_ACQUIRE(p) __tsan_acquire(p)
#else
#define GSP_HB_RELEASE(p) ((void)(p))
#define GSP_HB_ACQUIRE(p) ((void)(p))
#endif

/* The GSP program a build starts by default: a test build's serves the test-only RPCs. */
#ifdef VGPU_TEST_HOOKS
#define GSP_PROGRAM "vgpu-gsp-test"
#else
#define GSP_PROGRAM "vgpu-gsp"
#endif

#define GSP_SLOTS	64u	/* RPCs in flight per lane; the low bits of the sequence */
/* A GSP that exits during its start is seen at once (waitpid); this only bounds one that
 * hangs, so it leaves room for a start on a loaded host (under sanitizers it took over 10 s). */
#define GSP_READY_NS	(30 * VGPU_NSEC_PER_SEC)
#define GSP_HUNG_NS	(100 * VGPU_NSEC_PER_MSEC)	/* heartbeat older: "unresponsive" */
#define GSP_PARTIAL_NS	(5 * VGPU_NSEC_PER_MSEC)	/* half-published message: then fatal */

enum slot_state { SLOT_FREE, SLOT_WAITING, SLOT_FILLING, SLOT_DONE };
enum gsp_state { GSP_RUNNING, GSP_FATAL, GSP_RESETTING, GSP_STOPPED };

struct gsp_slot {
	uint32_t seq;
	int state;			/* enum slot_state, under slots_lock */
	_Atomic int done;		/* state reached DONE: the waiter may read the result */
	_Atomic uint32_t wake;		/* futex word: bumped at completion and hand-off */
	int result;
	uint8_t *buf;
	size_t cap, len;
	uint32_t reserve;		/* status elements reserved for the reply */
	unsigned int gfid;		/* whose credit it holds */
};

struct gsp_lane {
	struct gsp *g;
	unsigned int idx;
	struct gsp_q cmd, stat;
	struct cmn_mutex tx_lock;	/* command writes: cmd, tx */
	uint8_t *tx;
	struct cmn_mutex rx_lock;	/* the drainer: stat, msg, the reassembly below */
	uint8_t *msg;
	struct gsp_slot *asm_slot;	/* reply being reassembled into this slot */
	bool asm_drop;			/* continuation records of a dropped reply follow */
	uint32_t asm_seq, asm_chunk;
	uint64_t asm_got, asm_total;
	uint64_t partial_since;
	struct cmn_mutex slots_lock;	/* slots[].state, seq_hi, reserved, inflight, the
					 * fn_* counters of this lane's functions */
	pthread_cond_t credit_cv;	/* a slot was released (slots_lock) */
	unsigned int credit_waiters;
	struct gsp_slot slots[GSP_SLOTS];
	uint32_t seq_hi, reserved;
	_Atomic unsigned int inflight;
	_Atomic bool abort;		/* a reset wants the drainer out */
	/* fair dispatch (gsp_fair_tick()) */
	_Atomic uint64_t bytes;		/* request and reply bytes of completed RPCs */
	uint64_t bytes_seen;		/* watchdog thread: bytes at the last tick */
	_Atomic bool hot;		/* over its share: pauses while others are in flight */
};

/* A caller running an RPC at GSP_FAIR_NICE (on its stack, listed while it lasts). */
struct gsp_fair_ent {
	int tid, old_nice;
	uint64_t since;
	bool restored;			/* the watchdog gave the thread its nice back */
	struct gsp_fair_ent *next;
};

struct gsp {
	struct gsp_config cfg;
	char path[PATH_MAX];
	struct gsp_layout l;
	int qfd;
	uint8_t *base;
	struct vgpu_rpcq_global *glob;
	struct vgpu_rpcq_gsp_page *gp;
	struct vgpu_rpcq_cpu_page *cp;
	struct vgpu_rpc_event *evts;
	pid_t pid;			/* under reset_lock */
	struct cmn_mutex sock_lock;	/* protects sock: slice fds to the GSP */
	int sock;			/* our end of the fd socket; -1 before a start */
	_Atomic int state;		/* enum gsp_state */
	_Atomic unsigned int strikes;
	struct cmn_mutex reset_lock;	/* process lifetime, reaping, queue re-format */
	struct cmn_mutex evt_lock;	/* the event queue's get side */
	pthread_t evt_th, wd_th;
	_Atomic uint32_t evt_kicks;	/* gsp_events_kick() calls: the worker sleeps on none */
	_Atomic bool stop;
	uint64_t fair_at;		/* watchdog thread: start of the fairness window */
	struct cmn_mutex fair_lock;	/* fair_list */
	struct gsp_fair_ent *fair_list;	/* callers running at GSP_FAIR_NICE */
	struct gsp_stats st;		/* updated with __atomic builtins */
	/* Per function, under its lane's slots_lock (read by tests with __atomic loads). */
	unsigned int fn_inflight[64], fn_inflight_max[64];
	struct gsp_lane lanes[VGPU_RPC_MAX_LANES];
};

static __thread struct gsp *tls_replaying;	/* this thread replays after a reset */

#ifdef VGPU_TEST_HOOKS
void (*gsp_send_hook)(struct gsp *g, unsigned int gfid, uint32_t function);	/* gsp.h */
#endif

#define STAT_INC(g, f) __atomic_fetch_add(&(g)->st.f, 1, __ATOMIC_RELAXED)

static const uint64_t default_deadline[GSP_CLASS_NR] = {
	2 * VGPU_NSEC_PER_SEC, 4 * VGPU_NSEC_PER_SEC, 10 * VGPU_NSEC_PER_SEC,
};

enum gsp_class gsp_fn_class(uint32_t function)
{
	switch (function) {
	case VGPU_RPC_FN_PARTITION_SET: case VGPU_RPC_FN_PARTITION_CLEAR:
	case VGPU_RPC_FN_CHAN_ALLOC: case VGPU_RPC_FN_CHAN_FREE: case VGPU_RPC_FN_VASPACE_BIND:
	case VGPU_RPC_FN_SCHED_SET: case VGPU_RPC_FN_SCHED_FN_SET:
		return GSP_CLASS_ALLOC;
	case VGPU_RPC_FN_VF_RESET: case VGPU_RPC_FN_SCRUB:
#ifdef VGPU_TEST_HOOKS
	case VGPU_RPC_FN_BLOB:		/* large payloads */
#endif
		return GSP_CLASS_SLOW;
	}
	return GSP_CLASS_FAST;
}

const char *gsp_default_path(void)
{
	static char buf[PATH_MAX];
	static const char *const rel[] = { "/" GSP_PROGRAM, "/../../bin/" GSP_PROGRAM,
					   "/../bin/" GSP_PROGRAM };
	const char *env = getenv("VGPU_GSP");
	char exe[PATH_MAX];
	ssize_t n;

	if (env && access(env, X_OK) == 0)
		return env;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(rel); i++) {
		snprintf(buf, sizeof(buf), "%s%s", exe, rel[i]);
		if (access(buf, X_OK) == 0)
			return buf;
	}
	return NULL;
}

/* ---- process ---- */
static void gsp_format(struct gsp *g)
{
	memset(g->base + GSP_PAGE, 0, 2 * GSP_PAGE);
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		struct gsp_lane *ln = &g->lanes[i];

		memset(g->base + g->l.lane_off + i * g->l.lane_stride, 0, 2 * GSP_PAGE);
		gsp_q_bind(&ln->cmd, g->base, &g->l, i, 0);
		gsp_q_bind(&ln->stat, g->base, &g->l, i, 1);
		ln->asm_slot = NULL;
		ln->asm_drop = false;
		ln->partial_since = 0;
	}
	g->glob->epoch++;
	g->glob->wipe_hw = g->glob->epoch > 1;
}

static int gsp_spawn_locked(struct gsp *g)
{
	posix_spawn_file_actions_t fa;
	char ppid[24];
	char *argv[14] = { g->path, "--ppid", ppid, "--queues", "3", "--fdsock", "6" };
	int qd, pd = -1, kd = -1, td = -1, sd, sv[2] = { -1, -1 }, n = 7, ret;
	pid_t pid;

	cmn_mutex_assert_held(&g->reset_lock);
	snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
	/* A fresh fd socket per GSP: whatever the last one had queued died with it. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
	cmn_mutex_lock(&g->sock_lock);
	if (g->sock >= 0)
		close(g->sock);
	g->sock = sv[0];
	cmn_mutex_unlock(&g->sock_lock);
	/* Copies far above 6 first, so no dup2 below clobbers another's source. */
	sd = fcntl(sv[1], F_DUPFD_CLOEXEC, 200);
	qd = fcntl(g->qfd, F_DUPFD_CLOEXEC, 200);
	if (g->cfg.priv_fd >= 0)
		pd = fcntl(g->cfg.priv_fd, F_DUPFD_CLOEXEC, 200);
	if (g->cfg.priv_fd >= 0 && g->cfg.kick_fd > 0)
		kd = fcntl(g->cfg.kick_fd, F_DUPFD_CLOEXEC, 200);
	if (g->cfg.status_fd > 0)
		td = fcntl(g->cfg.status_fd, F_DUPFD_CLOEXEC, 200);
	if (qd < 0 || sd < 0 || (g->cfg.priv_fd >= 0 && pd < 0) ||
	    (g->cfg.priv_fd >= 0 && g->cfg.kick_fd > 0 && kd < 0) || (g->cfg.status_fd > 0 && td < 0)) {
		ret = -errno;
		goto close;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, qd, 3);
	posix_spawn_file_actions_adddup2(&fa, sd, 6);
	if (pd >= 0) {
		posix_spawn_file_actions_adddup2(&fa, pd, 4);
		argv[n++] = "--priv";
		argv[n++] = "4";
	}
	if (kd >= 0) {
		posix_spawn_file_actions_adddup2(&fa, kd, 5);
		argv[n++] = "--kick";
		argv[n++] = "5";
	}
	if (td >= 0) {
		posix_spawn_file_actions_adddup2(&fa, td, 7);
		argv[n++] = "--status";
		argv[n++] = "7";
	}
	argv[n] = NULL;
	ret = -posix_spawn(&pid, g->path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (!ret)
		g->pid = pid;
close:
	if (qd >= 0)
		close(qd);
	if (pd >= 0)
		close(pd);
	if (kd >= 0)
		close(kd);
	if (td >= 0)
		close(td);
	if (sd >= 0)
		close(sd);
	close(sv[1]);
	return ret;
}

static int gsp_wait_ready_locked(struct gsp *g)
{
	uint64_t dl = cmn_deadline_ns(GSP_READY_NS);
	int status;

	cmn_mutex_assert_held(&g->reset_lock);
	while (__atomic_load_n(&g->gp->ready, __ATOMIC_ACQUIRE) != g->glob->epoch) {
		if (waitpid(g->pid, &status, WNOHANG) == g->pid) {
			g->pid = 0;
			cmn_err("gsp: vgpu-gsp exited during start (status %#x)", status);
			return -ECHILD;
		}
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
	}
	return 0;
}

static void gsp_kill_locked(struct gsp *g)
{
	cmn_mutex_assert_held(&g->reset_lock);
	if (g->pid > 0) {
		kill(g->pid, SIGKILL);
		waitpid(g->pid, NULL, 0);
		g->pid = 0;
	}
}

/* ---- slots ---- */
static void slot_complete(struct gsp_lane *ln, struct gsp_slot *s, int result, size_t len)
{
	cmn_mutex_lock(&ln->slots_lock);
	s->result = result;
	s->len = len;
	s->state = SLOT_DONE;
	atomic_store_explicit(&s->done, 1, memory_order_release);
	atomic_fetch_add(&s->wake, 1);
	cmn_mutex_unlock(&ln->slots_lock);
	gsp_futex_wake(&s->wake);
}

static void slot_release_locked(struct gsp_lane *ln, struct gsp_slot *s)
{
	cmn_mutex_assert_held(&ln->slots_lock);
	s->state = SLOT_FREE;
	atomic_store(&s->done, 0);
	ln->reserved -= s->reserve;
	atomic_fetch_sub(&ln->inflight, 1);
	__atomic_store_n(&ln->g->fn_inflight[s->gfid], ln->g->fn_inflight[s->gfid] - 1,
			 __ATOMIC_RELAXED);
	if (ln->credit_waiters)
		pthread_cond_broadcast(&ln->credit_cv);
}

/* Wait (slots_lock held) for a slot to be released, at most 2 ms: the caller re-checks
 * everything, the GSP's state included. */
static void credit_wait_locked(struct gsp_lane *ln)
{
	struct timespec ts;

	cmn_mutex_assert_held(&ln->slots_lock);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 2 * VGPU_NSEC_PER_MSEC;
	if (ts.tv_nsec >= (long)VGPU_NSEC_PER_SEC) {
		ts.tv_sec++;
		ts.tv_nsec -= (long)VGPU_NSEC_PER_SEC;
	}
	ln->credit_waiters++;
	cmn_cond_timedwait(&ln->credit_cv, &ln->slots_lock, &ts);
	ln->credit_waiters--;
}

static bool gsp_call_allowed(struct gsp *g)
{
	int st = atomic_load_explicit(&g->state, memory_order_acquire);

	return st == GSP_RUNNING || (st == GSP_RESETTING && tls_replaying == g);
}

static int slot_get(struct gsp_lane *ln, unsigned int gfid, void *buf, size_t cap,
		    struct gsp_slot **out)
{
	struct gsp *g = ln->g;
	uint32_t need = cmn_min(gsp_rpc_elems(cap), ln->stat.nr);
	uint64_t dl = cmn_deadline_ns(g->cfg.send_wait_ns);
	bool counted = false;

	for (;;) {
		cmn_mutex_lock(&ln->slots_lock);
		if (!gsp_call_allowed(g)) {
			cmn_mutex_unlock(&ln->slots_lock);
			return -ENOTRECOVERABLE;
		}
		/* Out of credits: wait for one of this function's own RPCs, not for queue
		 * space, and without a send deadline (its RPCs end by their own). */
		if (g->fn_inflight[gfid] >= g->cfg.fn_credits) {
			if (!counted)
				STAT_INC(g, credit_waits);
			counted = true;
			credit_wait_locked(ln);
			cmn_mutex_unlock(&ln->slots_lock);
			dl = cmn_deadline_ns(g->cfg.send_wait_ns);
			continue;
		}
		if (ln->reserved + need <= ln->stat.nr) {
			for (uint32_t i = 0; i < GSP_SLOTS; i++) {
				struct gsp_slot *s = &ln->slots[i];

				if (s->state != SLOT_FREE)
					continue;
				s->state = SLOT_WAITING;
				s->seq = (++ln->seq_hi << 6) | i;
				s->buf = buf;
				s->cap = cap;
				s->len = 0;
				s->reserve = need;
				s->gfid = gfid;
				ln->reserved += need;
				atomic_fetch_add(&ln->inflight, 1);
				__atomic_store_n(&g->fn_inflight[gfid], g->fn_inflight[gfid] + 1,
						 __ATOMIC_RELAXED);
				if (g->fn_inflight[gfid] > g->fn_inflight_max[gfid])
					__atomic_store_n(&g->fn_inflight_max[gfid],
							 g->fn_inflight[gfid], __ATOMIC_RELAXED);
				cmn_mutex_unlock(&ln->slots_lock);
				*out = s;
				return 0;
			}
		}
		cmn_mutex_unlock(&ln->slots_lock);
		if (cmn_deadline_passed(dl)) {
			STAT_INC(g, queue_full);
			return -EAGAIN;
		}
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
}

static void slot_put(struct gsp_lane *ln, struct gsp_slot *s)
{
	cmn_mutex_lock(&ln->slots_lock);
	slot_release_locked(ln, s);
	cmn_mutex_unlock(&ln->slots_lock);
}

/* ---- send ---- */
/* Whether @s still waits for its reply: not cancelled by a reset. */
static bool slot_waiting(struct gsp_lane *ln, struct gsp_slot *s)
{
	bool waiting;

	cmn_mutex_lock(&ln->slots_lock);
	waiting = s->state == SLOT_WAITING;
	cmn_mutex_unlock(&ln->slots_lock);
	return waiting;
}

static void gsp_mark_fatal(struct gsp *g, const char *why)
{
	int exp = GSP_RUNNING;

	if (atomic_compare_exchange_strong(&g->state, &exp, GSP_FATAL))
		cmn_err("gsp: %s: device marked for reset", why);
}

static int gsp_send(struct gsp_lane *ln, struct gsp_slot *s, uint32_t gfid, uint32_t function,
		    const uint8_t *req, size_t len, uint64_t deadline)
{
	struct gsp *g = ln->g;
	uint64_t space_dl = cmn_deadline_ns(g->cfg.send_wait_ns);
	size_t off = 0;
	uint32_t chunk = 0;
	int ret = 0;

	cmn_mutex_lock(&ln->tx_lock);
	do {
		size_t n = cmn_min(len - off, (size_t)VGPU_RPC_MSG_MAX_PAYLOAD);
		uint32_t elems = gsp_msg_elems(n);
		struct vgpu_rpc_hdr rh = { .version = VGPU_RPC_HDR_VERSION,
			.signature = VGPU_RPC_SIGNATURE,
			.function = chunk ? VGPU_RPC_FN_CONTINUATION : function,
			.result = VGPU_RPC_PENDING, .sequence = s->seq, .gfid = gfid,
			.chunk = chunk, .total_length = len };

		uint64_t wait_start = cmn_now_ns();

		while (gsp_q_free(&ln->cmd) < elems) {
			if (!gsp_call_allowed(g) || atomic_load(&ln->abort)) {
				ret = -ENOTRECOVERABLE;
				goto out;
			}
			/* Nothing sent yet: give up with EAGAIN. Mid-RPC the GSP holds half a
			 * request, so only the RPC's own deadline ends the wait, fatally. */
			if (!chunk && cmn_deadline_passed(space_dl)) {
				STAT_INC(g, queue_full);
				ret = -EAGAIN;
				goto out;
			}
			if (chunk && cmn_deadline_passed(deadline)) {
				gsp_mark_fatal(g, "command queue stuck mid-RPC");
				ret = -ENOTRECOVERABLE;
				goto out;
			}
			/* The GSP is draining (a split RPC larger than the queue): spin first,
			 * a sleep costs tens of microseconds of timer slack per element. */
			if (cmn_now_ns() - wait_start < g->cfg.spin_ns)
				gsp_spin_step(wait_start);
			else
				cmn_sleep_ns(5 * VGPU_NSEC_PER_USEC);
		}
		if (!gsp_call_allowed(g)) {
			ret = -ENOTRECOVERABLE;
			goto out;
		}
		/* A reset that cancelled the slot (its caller gets -EIO) may have restarted the
		 * GSP since: nothing of it is sent to the new one. Checked under tx_lock, which
		 * the reset takes after cancelling to re-format the queues, so a slot seen
		 * waiting here has whatever is written now wiped by that re-format. */
		if (!slot_waiting(ln, s)) {
			ret = -EIO;
			goto out;
		}
		/* An empty request has no buffer: NULL + 0 is undefined behaviour in C. */
		size_t bytes = gsp_msg_build(&ln->cmd, ln->tx, &rh, n ? req + off : NULL, n);
		GSP_HB_RELEASE(s);	/* the request buffer was read before the GSP saw it */
		gsp_q_write(&ln->cmd, ln->tx, bytes, elems, elems);
		off += n;
		chunk++;
	} while (off < len);
out:
	cmn_mutex_unlock(&ln->tx_lock);
	return ret;
}

/* ---- receive (rx_lock held) ---- */
static void asm_abort(struct gsp_lane *ln, int result)
{
	if (ln->asm_slot)
		slot_complete(ln, ln->asm_slot, result, 0);
	ln->asm_slot = NULL;
	ln->asm_drop = false;
}

/* The GSP's result as the caller gets it: 0 or -errno. Anything else (a positive value
 * would read as success to a caller testing ret < 0) makes the reply malformed. */
static int rx_result(struct gsp_lane *ln, int32_t result)
{
	if (result <= 0 && result >= -4095)
		return result;
	STAT_INC(ln->g, bad_msgs);
	return -EBADMSG;
}

static void deliver_first(struct gsp_lane *ln, const struct vgpu_rpc_hdr *rh, const uint8_t *p)
{
	struct gsp_slot *s = &ln->slots[rh->sequence & (GSP_SLOTS - 1)];
	bool mine;

	if (ln->asm_slot || ln->asm_drop) {	/* a split reply was cut short */
		STAT_INC(ln->g, bad_msgs);
		asm_abort(ln, -EBADMSG);
	}
	cmn_mutex_lock(&ln->slots_lock);
	mine = s->state == SLOT_WAITING && s->seq == rh->sequence;
	if (mine)
		s->state = SLOT_FILLING;
	cmn_mutex_unlock(&ln->slots_lock);
	GSP_HB_ACQUIRE(s);	/* the reply follows the request through the GSP */
	ln->asm_seq = rh->sequence;
	ln->asm_chunk = 0;
	ln->asm_total = rh->total_length;
	ln->asm_got = rh->length;
	if (!mine) {
		/* Its waiter gave up (or never was): dropped by sequence, never delivered. */
		STAT_INC(ln->g, late_replies);
		ln->asm_drop = rh->length < rh->total_length;
		return;
	}
	if (rh->length > rh->total_length || rh->total_length > s->cap) {
		slot_complete(ln, s, rh->length > rh->total_length ? -EBADMSG : -EMSGSIZE, 0);
		ln->asm_drop = rh->length < rh->total_length;
		return;
	}
	if (rh->length)
		memcpy(s->buf, p, rh->length);
	if (rh->length == rh->total_length)
		slot_complete(ln, s, rx_result(ln, rh->result), rh->length);
	else
		ln->asm_slot = s;
}

static void deliver_cont(struct gsp_lane *ln, const struct vgpu_rpc_hdr *rh, const uint8_t *p)
{
	if ((!ln->asm_slot && !ln->asm_drop) || rh->sequence != ln->asm_seq ||
	    rh->chunk != ln->asm_chunk + 1 || ln->asm_got + rh->length > ln->asm_total) {
		STAT_INC(ln->g, bad_msgs);
		asm_abort(ln, -EBADMSG);
		return;
	}
	ln->asm_chunk++;
	if (ln->asm_slot && rh->length)
		memcpy(ln->asm_slot->buf + ln->asm_got, p, rh->length);
	ln->asm_got += rh->length;
	if (ln->asm_got < ln->asm_total)
		return;
	if (ln->asm_slot) {
		const struct vgpu_rpc_hdr *first = rh;	/* result travels in every chunk */
		slot_complete(ln, ln->asm_slot, rx_result(ln, first->result), ln->asm_got);
	}
	ln->asm_slot = NULL;
	ln->asm_drop = false;
}

/* Read everything published; false if a half-published message has stayed too long. */
static bool drain(struct gsp_lane *ln)
{
	for (;;) {
		const struct vgpu_rpc_hdr *rh = (void *)(ln->msg + sizeof(struct vgpu_rpc_elem));

		switch (gsp_q_read(&ln->stat, ln->msg)) {
		case GSP_RX_EMPTY:
			ln->partial_since = 0;
			return true;
		case GSP_RX_CORRUPT:
			STAT_INC(ln->g, bad_msgs);
			return false;	/* fatal: only a reset re-formats the queue */
		case GSP_RX_PARTIAL:
			if (!ln->partial_since) {
				ln->partial_since = cmn_now_ns();
				STAT_INC(ln->g, partial_reads);
			}
			return cmn_now_ns() - ln->partial_since < GSP_PARTIAL_NS;
		case GSP_RX_BAD:
			STAT_INC(ln->g, bad_msgs);
			asm_abort(ln, -EBADMSG);
			break;
		case GSP_RX_STALE:
			STAT_INC(ln->g, stale_msgs);
			break;
		case GSP_RX_GAP:
			STAT_INC(ln->g, bad_msgs);
			/* fall through */
		case GSP_RX_OK:
			ln->partial_since = 0;
			if (rh->function == VGPU_RPC_FN_CONTINUATION)
				deliver_cont(ln, rh, ln->msg + VGPU_RPC_MSG_HDR_SIZE);
			else
				deliver_first(ln, rh, ln->msg + VGPU_RPC_MSG_HDR_SIZE);
			break;
		}
	}
}

/* The drainer's loop: until @s is done (and no split reply is half-assembled), the
 * deadline passes, or a reset asks it to leave. */
static void drainer(struct gsp_lane *ln, struct gsp_slot *s, uint64_t deadline, uint64_t spin_until)
{
	struct gsp *g = ln->g;

	for (;;) {
		if (!drain(ln)) {
			gsp_mark_fatal(g, "status queue corrupt or a reply published in part");
			asm_abort(ln, -EIO);
			return;
		}
		if (atomic_load(&ln->abort)) {
			asm_abort(ln, -EIO);
			return;
		}
		if (atomic_load_explicit(&s->done, memory_order_acquire) && !ln->asm_slot)
			return;
		uint64_t now = cmn_now_ns();
		if (now >= deadline) {
			if (!ln->asm_slot)
				return;
			if (now >= deadline + g->cfg.deadline_ns[GSP_CLASS_FAST]) {
				gsp_mark_fatal(g, "split reply stalled");
				asm_abort(ln, -EIO);
				return;
			}
		}
		if (now < spin_until) {
			gsp_spin_step(spin_until - g->cfg.spin_ns);
			continue;
		}
		uint32_t seen = atomic_load_explicit(ln->stat.put, memory_order_acquire);
		atomic_store(ln->stat.reader_waiting, 1);	/* seq_cst: see gsp_q_write() */
		if (atomic_load_explicit(ln->stat.put, memory_order_seq_cst) == seen)
			gsp_futex_wait(ln->stat.put, seen,
				       cmn_min(deadline > now ? deadline - now : 1000000, 5 * VGPU_NSEC_PER_MSEC));
		atomic_store(ln->stat.reader_waiting, 0);
	}
}

/* Wake every other waiter of the lane: one of them becomes the drainer. */
static void handoff(struct gsp_lane *ln)
{
	if (atomic_load(&ln->inflight) <= 1)
		return;
	for (uint32_t i = 0; i < GSP_SLOTS; i++) {
		struct gsp_slot *s = &ln->slots[i];

		if (!atomic_load_explicit(&s->done, memory_order_relaxed)) {
			atomic_fetch_add(&s->wake, 1);
			gsp_futex_wake(&s->wake);
		}
	}
}

static void gsp_timeout(struct gsp *g, uint32_t function, uint32_t seq)
{
	uint64_t age = gsp_heartbeat_age_ns(g);
	unsigned int strikes = atomic_fetch_add(&g->strikes, 1) + 1;

	STAT_INC(g, timeouts);
	if (age > GSP_HUNG_NS)
		STAT_INC(g, hung_class);
	else
		STAT_INC(g, slow_class);
	cmn_warn("gsp: RPC %u seq %#x timed out (GSP %s, heartbeat %llu us ago, strike %u)",
		  function, seq, age > GSP_HUNG_NS ? "unresponsive" : "slow",
		  (unsigned long long)(age / 1000), strikes);
	if (strikes >= g->cfg.reset_strikes)
		gsp_mark_fatal(g, "repeated RPC timeouts");
}

static int gsp_wait(struct gsp_lane *ln, struct gsp_slot *s, uint32_t function, uint64_t deadline,
		    size_t *len)
{
	struct gsp *g = ln->g;
	uint64_t spin_until = cmn_now_ns() + g->cfg.spin_ns;
	int ret;

	for (;;) {
		if (atomic_load_explicit(&s->done, memory_order_acquire))
			break;
		uint32_t w = atomic_load(&s->wake);
		uint64_t now = cmn_now_ns();
		if (now >= deadline) {
			cmn_mutex_lock(&ln->slots_lock);
			if (s->state == SLOT_WAITING) {
				slot_release_locked(ln, s);
				cmn_mutex_unlock(&ln->slots_lock);
				gsp_timeout(g, function, s->seq);
				return -ETIMEDOUT;
			}
			/* FILLING: a drainer is copying the reply in; it completes or aborts. */
			cmn_mutex_unlock(&ln->slots_lock);
		}
		/* Become the lane's drainer if nobody is (a waiter never blocks on rx_lock). */
		if (cmn_mutex_trylock(&ln->rx_lock)) {
			drainer(ln, s, deadline, spin_until);
			cmn_mutex_unlock(&ln->rx_lock);
			handoff(ln);
			continue;	/* re-check done, then the deadline */
		}
		if (now < spin_until) {
			gsp_spin_step(spin_until - g->cfg.spin_ns);
			continue;
		}
		gsp_futex_wait(&s->wake, w, cmn_min(deadline > now ? deadline - now : 1000000,
						     2 * VGPU_NSEC_PER_MSEC));
	}
	cmn_mutex_lock(&ln->slots_lock);
	ret = s->result;
	*len = s->len;
	slot_release_locked(ln, s);
	cmn_mutex_unlock(&ln->slots_lock);
	return ret;
}

/* ---- fair dispatch ----
 * A real GSP is one processor that serves every function's RPCs in turn; here each lane
 * has its own GSP thread and the CPU-RM's callers their own threads, so what one
 * function's flood takes from another is host CPU time: on a small, loaded machine a
 * light function's thread, woken by its reply, waits behind (or is preempted by) the
 * flood's threads. On every watchdog tick the bytes each lane carried are compared: while
 * at least two lanes are busy, a lane carrying more than GSP_FAIR_HI of a fair share is
 * "hot" (until it falls under GSP_FAIR_LO of one). A hot function's caller runs each RPC
 * at nice GSP_FAIR_NICE while another function has one in flight: its wake-ups no longer
 * preempt the other function's threads, and under contention it gets the CPU last (the
 * watchdog gives back the nice of a caller held that way for GSP_FAIR_MAX_NS, so a flood
 * is slowed, never starved toward its deadline). Alone, next to idle functions, or on an
 * idle CPU it runs as before (nice weighs only contended time). Measured in
 * doc/bench/rpc_bench.md. Needs the right to restore the caller's nice
 * (CAP_SYS_NICE, e.g. root, or RLIMIT_NICE); without it fair dispatch stays off. */
#define GSP_FAIR_ACTIVE_BPS	(1ull << 20)	/* a lane moving more bytes/s is busy */
#define GSP_FAIR_HI		1250		/* per mille of a fair share */
#define GSP_FAIR_LO		1000

static void gsp_fair_tick(struct gsp *g)
{
	uint64_t now = cmn_now_ns(), win = now - g->fair_at, d[VGPU_RPC_MAX_LANES], total = 0;
	unsigned int active = 0;

	if (g->cfg.no_fair || win < VGPU_NSEC_PER_MSEC)
		return;
	g->fair_at = now;
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		struct gsp_lane *ln = &g->lanes[i];
		uint64_t b = atomic_load_explicit(&ln->bytes, memory_order_relaxed);

		d[i] = b - ln->bytes_seen;
		ln->bytes_seen = b;
		if (d[i] * VGPU_NSEC_PER_SEC > win * GSP_FAIR_ACTIVE_BPS) {
			active++;
			total += d[i];
		}
	}
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		struct gsp_lane *ln = &g->lanes[i];
		uint64_t share = total ? d[i] * active * 1000 / total : 0;	/* 1000: fair */
		bool hot = active >= 2 &&
			   (share > GSP_FAIR_HI || (atomic_load(&ln->hot) && share > GSP_FAIR_LO));

		atomic_store_explicit(&ln->hot, hot, memory_order_relaxed);
	}
}

/* Whether a thread may go back to nice 0 after GSP_FAIR_NICE. */
static bool gsp_fair_allowed(void)
{
	struct rlimit rl;

	return geteuid() == 0 || (!getrlimit(RLIMIT_NICE, &rl) && rl.rlim_cur >= 20);
}

/* A hot function's caller runs its RPC at nice GSP_FAIR_NICE while another function has
 * one in flight: its wake-ups then do not preempt the other function's threads, and under
 * contention it gets the CPU last. @e is listed so that the watchdog can give the thread
 * its nice back if the RPC outlasts GSP_FAIR_MAX_NS (a thread starved of the CPU cannot do
 * it itself). False if the caller was left alone. */
#define GSP_FAIR_NICE	19
#define GSP_FAIR_MAX_NS	(10 * VGPU_NSEC_PER_MSEC)

static bool gsp_fair_enter(struct gsp *g, struct gsp_lane *ln, struct gsp_fair_ent *e)
{
	if (!atomic_load_explicit(&ln->hot, memory_order_relaxed) || tls_replaying == g)
		return false;
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		if (i == ln->idx || !atomic_load_explicit(&g->lanes[i].inflight, memory_order_relaxed))
			continue;
		errno = 0;
		e->old_nice = getpriority(PRIO_PROCESS, 0);	/* this thread (Linux: per thread) */
		if ((e->old_nice == -1 && errno) || e->old_nice >= GSP_FAIR_NICE ||
		    setpriority(PRIO_PROCESS, 0, GSP_FAIR_NICE))
			return false;
		e->tid = (int)gettid();
		e->since = cmn_now_ns();
		e->restored = false;
		cmn_mutex_lock(&g->fair_lock);
		e->next = g->fair_list;
		g->fair_list = e;
		cmn_mutex_unlock(&g->fair_lock);
		STAT_INC(g, fair_waits);
		return true;
	}
	return false;
}

/* Unlist @e and go back to the caller's own nice, unless the watchdog already did. */
static void gsp_fair_leave(struct gsp *g, struct gsp_fair_ent *e)
{
	bool restored;

	cmn_mutex_lock(&g->fair_lock);
	for (struct gsp_fair_ent **p = &g->fair_list; *p; p = &(*p)->next) {
		if (*p == e) {
			*p = e->next;
			break;
		}
	}
	restored = e->restored;
	cmn_mutex_unlock(&g->fair_lock);
	if (!restored)
		setpriority(PRIO_PROCESS, 0, e->old_nice);
}

/* Watchdog: callers at GSP_FAIR_NICE for longer than GSP_FAIR_MAX_NS get their nice back. */
static void gsp_fair_unstarve(struct gsp *g)
{
	uint64_t now = cmn_now_ns();

	cmn_mutex_lock(&g->fair_lock);
	for (struct gsp_fair_ent *e = g->fair_list; e; e = e->next) {
		if (!e->restored && now - e->since > GSP_FAIR_MAX_NS) {
			setpriority(PRIO_PROCESS, (id_t)e->tid, e->old_nice);
			e->restored = true;
		}
	}
	cmn_mutex_unlock(&g->fair_lock);
}

/* One RPC on lane @ln, arguments checked. */
static int gsp_call_lane(struct gsp *g, struct gsp_lane *ln, unsigned int gfid, uint32_t function,
			 const void *req, size_t req_len, void *reply, size_t reply_cap,
			 size_t *reply_len, uint64_t deadline_ns)
{
	struct gsp_slot *s;
	uint64_t start, deadline, took;
	size_t len = 0;
	int ret;

	start = cmn_now_ns();
	deadline = start + (deadline_ns ? deadline_ns : g->cfg.deadline_ns[gsp_fn_class(function)]);
	ret = slot_get(ln, gfid, reply, reply_cap, &s);
	if (ret)
		return ret;
#ifdef VGPU_TEST_HOOKS
	if (gsp_send_hook)
		gsp_send_hook(g, gfid, function);
#endif
	ret = gsp_send(ln, s, gfid, function, req, req_len, deadline);
	if (ret) {
		slot_put(ln, s);
		return ret;
	}
	ret = gsp_wait(ln, s, function, deadline, &len);
	if (ret == -ETIMEDOUT)
		return ret;
	atomic_fetch_add_explicit(&ln->bytes, req_len + len + 2 * VGPU_RPC_MSG_HDR_SIZE,
				  memory_order_relaxed);
	if (reply_len)
		*reply_len = len;
	took = cmn_now_ns() - start;
	/* Stored only when there is something to clear: every lane's RPCs would otherwise
	 * write the one line all of them read. */
	if (ret != -EIO && atomic_load_explicit(&g->strikes, memory_order_relaxed))
		atomic_store(&g->strikes, 0);
	STAT_INC(g, rpcs);
	if (took > g->cfg.slow_ns) {
		STAT_INC(g, slow);
		cmn_warn("gsp: slow RPC %u for fn %u: %llu ms", function, gfid,
			  (unsigned long long)(took / VGPU_NSEC_PER_MSEC));
	}
	return ret;
}

/* A function number this build may send: the test-only ones only from a test build. */
static bool gsp_fn_known(uint32_t function)
{
#ifdef VGPU_TEST_HOOKS
	if (vgpu_rpc_fn_is_test(function))
		return true;
#endif
	return function < VGPU_RPC_FN_MAX;
}

int gsp_call_deadline(struct gsp *g, unsigned int gfid, uint32_t function, const void *req,
		      size_t req_len, void *reply, size_t reply_cap, size_t *reply_len,
		      uint64_t deadline_ns)
{
	struct gsp_fair_ent fe;
	struct gsp_lane *ln;
	bool fair;
	int ret;

	if (reply_len)
		*reply_len = 0;
	if (!g || (req_len && !req) || req_len > VGPU_RPC_MAX_PAYLOAD || (reply_cap && !reply) ||
	    reply_cap > VGPU_RPC_MAX_PAYLOAD || gfid >= g->cfg.nr_fns ||
	    function == VGPU_RPC_FN_CONTINUATION || !gsp_fn_known(function))
		return -EINVAL;
	if (!gsp_call_allowed(g))
		return -ENOTRECOVERABLE;
	ln = &g->lanes[gfid % g->l.nr_lanes];
	fair = gsp_fair_enter(g, ln, &fe);
	ret = gsp_call_lane(g, ln, gfid, function, req, req_len, reply, reply_cap, reply_len,
			    deadline_ns);
	if (fair)
		gsp_fair_leave(g, &fe);
	return ret;
}

int gsp_call(struct gsp *g, unsigned int gfid, uint32_t function, const void *req,
	     size_t req_len, void *reply, size_t reply_cap, size_t *reply_len)
{
	return gsp_call_deadline(g, gfid, function, req, req_len, reply, reply_cap, reply_len, 0);
}

/* ---- events ---- */
static bool evt_one(struct gsp *g)
{
	_Atomic uint32_t *put = (_Atomic uint32_t *)&g->gp->evt_put;
	_Atomic uint32_t *get = (_Atomic uint32_t *)&g->cp->evt_get;
	struct vgpu_rpc_event ev;
	uint32_t gt, pt;

	cmn_mutex_lock(&g->evt_lock);
	gt = atomic_load_explicit(get, memory_order_relaxed);
	pt = atomic_load_explicit(put, memory_order_seq_cst);
	if (gt == pt || pt - gt > g->l.nr_events) {
		cmn_mutex_unlock(&g->evt_lock);
		return false;
	}
	ev = g->evts[gt & (g->l.nr_events - 1)];
	atomic_store_explicit(get, gt + 1, memory_order_release);
	cmn_mutex_unlock(&g->evt_lock);
	STAT_INC(g, events);
	if (g->cfg.event_cb)
		g->cfg.event_cb(g->cfg.ctx, &ev);
	return true;
}

static void *evt_main(void *arg)
{
	struct gsp *g = arg;
	_Atomic uint32_t *put = (_Atomic uint32_t *)&g->gp->evt_put;
	_Atomic uint32_t *waiting = (_Atomic uint32_t *)&g->cp->evt_waiting;

	while (!atomic_load(&g->stop)) {
		if (evt_one(g))
			continue;
		uint32_t kicks = atomic_load(&g->evt_kicks);

		if (g->cfg.idle_cb)
			g->cfg.idle_cb(g->cfg.ctx);
		uint32_t seen = atomic_load_explicit(put, memory_order_acquire);
		atomic_store(waiting, 1);	/* seq_cst, and evt_one() loads put seq_cst */
		/* A kick during idle_cb is served by the next pass, not after a sleep. */
		if (!evt_one(g) && atomic_load(&g->evt_kicks) == kicks)
			gsp_futex_wait(put, seen, 10 * VGPU_NSEC_PER_MSEC);
		atomic_store(waiting, 0);
	}
	return NULL;
}

/* The worker sleeps on the event queue's put counter: a wake there ends its sleep early,
 * and it finds no record and calls idle_cb. A kick between its check of evt_kicks and its
 * sleep waits for the 10 ms timeout, which bounds it. */
void gsp_events_kick(struct gsp *g)
{
	if (!g || !g->gp)
		return;
	atomic_fetch_add(&g->evt_kicks, 1);
	gsp_futex_wake((_Atomic uint32_t *)&g->gp->evt_put);
}

/* ---- VRAM slices ---- */
int gsp_slice_send(struct gsp *g, unsigned int fn, int fd, uint64_t size)
{
	struct vgpu_rpc_slice_msg m = { .fn = fn, .size = size };
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (!g || fn >= g->cfg.nr_fns || (fd >= 0 && !size))
		return -EINVAL;
	if (fd >= 0) {
		struct cmsghdr *cm;

		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
	}
	cmn_mutex_lock(&g->sock_lock);
	n = g->sock >= 0 ? sendmsg(g->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
	cmn_mutex_unlock(&g->sock_lock);
	return n == (ssize_t)sizeof(m) ? 0 : -errno;
}

/* ---- reset ---- */
static void gsp_cancel_all(struct gsp *g)
{
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		struct gsp_lane *ln = &g->lanes[i];

		atomic_store(&ln->abort, true);
		cmn_mutex_lock(&ln->slots_lock);
		for (uint32_t k = 0; k < GSP_SLOTS; k++) {
			struct gsp_slot *s = &ln->slots[k];

			if (s->state != SLOT_WAITING)
				continue;
			s->result = -EIO;
			s->state = SLOT_DONE;
			atomic_store_explicit(&s->done, 1, memory_order_release);
			atomic_fetch_add(&s->wake, 1);
			gsp_futex_wake(&s->wake);
		}
		cmn_mutex_unlock(&ln->slots_lock);
		/* Wake a drainer sleeping on the status queue. */
		gsp_futex_wake(ln->stat.put);
	}
}

static int gsp_reset_locked(struct gsp *g)
{
	uint64_t t0 = cmn_now_ns();
	int ret;

	cmn_mutex_assert_held(&g->reset_lock);
	atomic_store(&g->state, GSP_RESETTING);
	gsp_cancel_all(g);
	gsp_kill_locked(g);
	/* Every drainer and sender out of the queues: all rx locks, then all tx locks, the
	 * one order in which a thread ever holds both kinds. */
	for (unsigned int i = 0; i < g->l.nr_lanes; i++)
		cmn_mutex_lock(&g->lanes[i].rx_lock);
	for (unsigned int i = 0; i < g->l.nr_lanes; i++)
		cmn_mutex_lock(&g->lanes[i].tx_lock);
	cmn_mutex_lock(&g->evt_lock);
	gsp_format(g);
	cmn_mutex_unlock(&g->evt_lock);
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		atomic_store(&g->lanes[i].abort, false);
		cmn_mutex_unlock(&g->lanes[i].tx_lock);
	}
	for (unsigned int i = 0; i < g->l.nr_lanes; i++)
		cmn_mutex_unlock(&g->lanes[i].rx_lock);
	ret = gsp_spawn_locked(g);
	if (!ret)
		ret = gsp_wait_ready_locked(g);
	if (ret) {
		cmn_err("gsp: restart failed: %s", cmn_strerror(ret));
		atomic_store(&g->state, GSP_FATAL);
		return ret;
	}
	atomic_store(&g->strikes, 0);
	if (g->cfg.reset_cb) {
		tls_replaying = g;
		ret = g->cfg.reset_cb(g->cfg.ctx, g);
		tls_replaying = NULL;
		if (ret)
			cmn_err("gsp: replay after reset failed: %s", cmn_strerror(ret));
	}
	atomic_store(&g->state, GSP_RUNNING);
	STAT_INC(g, resets);
	__atomic_store_n(&g->st.last_reset_ns, cmn_now_ns() - t0, __ATOMIC_RELAXED);
	cmn_info("gsp: device reset done in %llu us (GSP pid %d)",
		  (unsigned long long)((cmn_now_ns() - t0) / 1000), (int)g->pid);
	return ret;
}

int gsp_reset(struct gsp *g)
{
	cmn_mutex_lock(&g->reset_lock);
	int ret = gsp_reset_locked(g);
	cmn_mutex_unlock(&g->reset_lock);
	return ret;
}

static void *wd_main(void *arg)
{
	struct gsp *g = arg;
	int status;

	while (!atomic_load(&g->stop)) {
		cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
		gsp_fair_tick(g);
		gsp_fair_unstarve(g);
		cmn_mutex_lock(&g->reset_lock);
		if (g->pid > 0 && waitpid(g->pid, &status, WNOHANG) == g->pid) {
			g->pid = 0;
			cmn_err("gsp: vgpu-gsp died (%s %d)", WIFSIGNALED(status) ? "signal" : "exit",
				 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
			gsp_mark_fatal(g, "GSP crashed");
		}
		if (atomic_load(&g->state) == GSP_FATAL && !g->cfg.no_auto_reset &&
		    !atomic_load(&g->stop))
			gsp_reset_locked(g);
		cmn_mutex_unlock(&g->reset_lock);
	}
	return NULL;
}

/* ---- lifetime ---- */
static int gsp_cfg_check(struct gsp *g, const struct gsp_config *cfg)
{
	const char *path = cfg->path ? cfg->path : gsp_default_path();

	g->cfg = *cfg;
	if (!path) {
		cmn_err("gsp: no %s next to this program, in ../bin or in $VGPU_GSP", GSP_PROGRAM);
		return -ENOENT;
	}
	if (strlen(path) >= sizeof(g->path) || !cfg->nr_fns || cfg->nr_fns > 64)
		return -EINVAL;
	strcpy(g->path, path);
	if (!g->cfg.nr_lanes)
		g->cfg.nr_lanes = cmn_min(cfg->nr_fns, 8u);
	if (!g->cfg.queue_elems)
		g->cfg.queue_elems = 64;
	if (!g->cfg.nr_events)
		g->cfg.nr_events = 4096;
	if (!g->cfg.spin_ns)
		g->cfg.spin_ns = 50 * VGPU_NSEC_PER_USEC;
	if (!g->cfg.gsp_spin_ns)
		g->cfg.gsp_spin_ns = 50 * VGPU_NSEC_PER_USEC;
	for (int c = 0; c < GSP_CLASS_NR; c++)
		if (!g->cfg.deadline_ns[c])
			g->cfg.deadline_ns[c] = default_deadline[c];
	if (!g->cfg.slow_ns)
		g->cfg.slow_ns = 66 * VGPU_NSEC_PER_MSEC;
	if (!g->cfg.no_fair && !gsp_fair_allowed()) {
		cmn_info("gsp: fair dispatch off: no right to restore a thread's nice");
		g->cfg.no_fair = true;
	}
	if (!g->cfg.send_wait_ns)
		g->cfg.send_wait_ns = VGPU_NSEC_PER_SEC;
	if (!g->cfg.reset_strikes)
		g->cfg.reset_strikes = 3;
	if (!g->cfg.fn_credits)
		g->cfg.fn_credits = cmn_max(GSP_SLOTS * g->cfg.nr_lanes / cfg->nr_fns, 1u);
	return gsp_layout_compute(g->cfg.nr_lanes, g->cfg.queue_elems, g->cfg.nr_events, &g->l);
}

static int gsp_map(struct gsp *g)
{
	g->qfd = memfd_create("vgpu-gsp-queues", MFD_CLOEXEC);
	if (g->qfd < 0)
		return -errno;
	if (ftruncate(g->qfd, (off_t)g->l.total))
		return -errno;
	g->base = mmap(NULL, g->l.total, PROT_READ | PROT_WRITE, MAP_SHARED, g->qfd, 0);
	if (g->base == MAP_FAILED) {
		g->base = NULL;
		return -errno;
	}
	g->glob = (void *)g->base;
	g->gp = (void *)(g->base + GSP_PAGE);
	g->cp = (void *)(g->base + 2 * GSP_PAGE);
	g->evts = (void *)(g->base + g->l.evt_off);
	*g->glob = (struct vgpu_rpcq_global){ .magic = VGPU_RPCQ_MAGIC,
		.abi_version = VGPU_ABI_VERSION, .nr_lanes = g->l.nr_lanes,
		.queue_elems = g->l.queue_elems, .nr_events = g->l.nr_events,
		.nr_fns = g->cfg.nr_fns, .total_size = g->l.total,
		.gsp_spin_ns = g->cfg.gsp_spin_ns };
	return 0;
}

static int gsp_lanes_init(struct gsp *g)
{
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		struct gsp_lane *ln = &g->lanes[i];

		ln->g = g;
		ln->idx = i;
		cmn_mutex_init(&ln->tx_lock);
		cmn_mutex_init(&ln->rx_lock);
		cmn_mutex_init(&ln->slots_lock);
		pthread_cond_init(&ln->credit_cv, NULL);
		ln->tx = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
		ln->msg = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
		if (!ln->tx || !ln->msg)
			return -ENOMEM;
	}
	return 0;
}

/* A client with no queue, no socket and its locks ready, or NULL. */
static struct gsp *gsp_new(void)
{
	struct gsp *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->qfd = -1;
	g->sock = -1;
	cmn_mutex_init(&g->sock_lock);
	cmn_mutex_init(&g->reset_lock);
	cmn_mutex_init(&g->fair_lock);
	cmn_mutex_init(&g->evt_lock);
	return g;
}

int gsp_start(const struct gsp_config *cfg, struct gsp **out)
{
	struct gsp *g = gsp_new();
	int ret;

	if (!g)
		return -ENOMEM;
	ret = gsp_cfg_check(g, cfg);
	if (ret)
		goto fail;
	ret = gsp_map(g);
	if (ret)
		goto fail;
	ret = gsp_lanes_init(g);
	if (ret)
		goto fail;
	gsp_format(g);
	cmn_mutex_lock(&g->reset_lock);
	ret = gsp_spawn_locked(g);
	if (!ret)
		ret = gsp_wait_ready_locked(g);
	cmn_mutex_unlock(&g->reset_lock);
	if (ret)
		goto fail;
	if (pthread_create(&g->evt_th, NULL, evt_main, g)) {
		ret = -EAGAIN;
		goto fail;
	}
	if (pthread_create(&g->wd_th, NULL, wd_main, g)) {
		atomic_store(&g->stop, true);
		pthread_join(g->evt_th, NULL);
		ret = -EAGAIN;
		goto fail;
	}
	*out = g;
	return 0;
fail:
	cmn_err("gsp: start failed: %s", cmn_strerror(ret));
	g->evt_th = g->wd_th = 0;
	atomic_store(&g->stop, true);
	gsp_stop(g);
	return ret;
}

int gsp_start_detached(const struct gsp_config *cfg, struct gsp **out)
{
	struct gsp_config c = *cfg;
	struct gsp *g = gsp_new();
	int ret;

	if (!g)
		return -ENOMEM;
	c.path = "";		/* no program is started */
	c.no_fair = true;	/* no watchdog thread restores a caller's nice */
	ret = gsp_cfg_check(g, &c);
	if (!ret)
		ret = gsp_map(g);
	if (!ret)
		ret = gsp_lanes_init(g);
	if (ret) {
		gsp_stop(g);
		return ret;
	}
	gsp_format(g);
	*out = g;
	return 0;
}

uint8_t *gsp_queue_mem(struct gsp *g)
{
	return g->base;
}

unsigned int gsp_events_poll(struct gsp *g)
{
	unsigned int n = 0;

	while (evt_one(g))
		n++;
	if (g->cfg.idle_cb)
		g->cfg.idle_cb(g->cfg.ctx);
	return n;
}

void gsp_stop(struct gsp *g)
{
	if (!g)
		return;
	if (g->wd_th) {
		atomic_store(&g->stop, true);
		pthread_join(g->wd_th, NULL);
		pthread_join(g->evt_th, NULL);
	}
	cmn_mutex_lock(&g->reset_lock);
	atomic_store(&g->state, GSP_STOPPED);
	if (g->base)
		gsp_cancel_all(g);
	gsp_kill_locked(g);
	cmn_mutex_unlock(&g->reset_lock);
	for (unsigned int i = 0; i < g->l.nr_lanes; i++) {
		free(g->lanes[i].tx);
		free(g->lanes[i].msg);
	}
	if (g->base)
		munmap(g->base, g->l.total);
	if (g->qfd >= 0)
		close(g->qfd);
	if (g->sock >= 0)
		close(g->sock);
	free(g);
}

bool gsp_needs_reset(const struct gsp *g)
{
	return atomic_load(&((struct gsp *)g)->state) != GSP_RUNNING;
}

void gsp_get_stats(const struct gsp *g, struct gsp_stats *out)
{
	const uint64_t *src = (const uint64_t *)&g->st;
	uint64_t *dst = (uint64_t *)out;

	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	out->events_dropped = __atomic_load_n(&g->gp->evt_dropped, __ATOMIC_RELAXED);
	out->events_deferred = __atomic_load_n(&g->gp->evt_deferred, __ATOMIC_RELAXED);
}

unsigned int gsp_fn_inflight(const struct gsp *g, unsigned int gfid)
{
	return gfid < g->cfg.nr_fns ? __atomic_load_n(&g->fn_inflight[gfid], __ATOMIC_RELAXED) : 0;
}

unsigned int gsp_fn_inflight_max(const struct gsp *g, unsigned int gfid)
{
	return gfid < g->cfg.nr_fns ?
	       __atomic_load_n(&g->fn_inflight_max[gfid], __ATOMIC_RELAXED) : 0;
}

unsigned int gsp_fn_credits(const struct gsp *g)
{
	return g->cfg.fn_credits;
}

unsigned int gsp_inflight(const struct gsp *g, unsigned int gfid)
{
	if (gfid >= g->cfg.nr_fns)
		return 0;
	return atomic_load(&((struct gsp *)g)->lanes[gfid % g->l.nr_lanes].inflight);
}

int gsp_pid(const struct gsp *g)
{
	return (int)__atomic_load_n(&g->gp->pid, __ATOMIC_RELAXED);
}

uint64_t gsp_heartbeat_age_ns(const struct gsp *g)
{
	uint64_t hb = __atomic_load_n(&g->gp->heartbeat_ns, __ATOMIC_ACQUIRE), now = cmn_now_ns();

	return now > hb ? now - hb : 0;
}
