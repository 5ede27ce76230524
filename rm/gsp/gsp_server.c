/* The GSP's side: one thread per lane reads commands, reassembles continuation records,
 * runs the RPC against the privileged region and writes the reply; the main thread beats
 * the heartbeat. Fault injection (VGPU_RPC_FN_INJECT) lives here, so tests can make the
 * real process hang, crawl, answer late, die mid-reply, corrupt a reply or flood events. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/falloc.h>

#include <vgpu/version.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/err.h"
#include "common/log.h"
#include "gpu_model/gpu.h"
#include "rm/gsp/gsp.h"
#include "rm/gsp/gsp_internal.h"

struct srv;

struct srv_lane {
	struct srv *s;
	unsigned int idx;
	struct gsp_q cmd, stat;
	uint8_t *msg;			/* one message read from the command queue */
	uint8_t *tx;			/* one message being built */
	uint8_t *req;			/* the reassembled request */
	size_t req_cap;
	uint8_t *rep;			/* the reply payload */
	size_t rep_cap;
	/* reassembly of a request sent as continuation records */
	bool asm_active;
	uint32_t asm_seq, asm_fn, asm_gfid, asm_chunk;
	uint64_t asm_total, asm_got;
	/* one-shot faults armed by INJECT for this lane */
	_Atomic uint64_t late_ns;
	_Atomic uint32_t crash_mid, corrupt;
	_Atomic uint64_t stall_until;
	pthread_t th;
};

/* The watchdog's view of one channel. */
struct srv_wd {
	uint64_t gen;			/* the allocation watched (priv gen) */
	uint64_t gp_get;		/* GP_GET at the last change */
	uint64_t faults;		/* the channel's fault count at the last change */
	uint64_t since;			/* pending and unmoved since then; 0: nothing pending */
	bool fired;			/* reported for this stall */
};

struct srv {
	uint8_t *base;
	struct gsp_layout l;
	struct vgpu_rpcq_global *glob;
	struct vgpu_rpcq_gsp_page *gp;
	struct vgpu_rpcq_cpu_page *cp;
	struct vgpu_rpc_event *evts;
	struct gpu_priv *priv;		/* NULL: started without hardware */
	uint64_t spin_ns;
	_Atomic bool hang;
	_Atomic uint64_t slow_ns[64];	/* per gfid */
	pthread_mutex_t evt_lock;	/* protects evt_seq and the event put */
	uint64_t evt_seq;
	int fd_sock;			/* VRAM slices arrive here (SCM_RIGHTS); -1: none */
	pthread_mutex_t slice_lock;	/* protects slices[] and the socket's reads */
	struct { int fd; uint64_t size; void *map; } slices[64];
	_Atomic uint64_t scrubs;
	struct srv_lane lanes[VGPU_RPC_MAX_LANES];
	/* the device's errors (status region); only the main thread touches these */
	const struct gpu_status_shared *st;	/* NULL: started without one */
	uint64_t st_events;		/* the region's event count at the last scan */
	uint64_t seen_faults[GPU_MAX_FNS];
	uint64_t seen_errors[GPU_MAX_FNS][GPU_FN_MAX_CHANNELS];
	struct srv_wd wd[GPU_MAX_FNS][GPU_FN_MAX_CHANNELS];
	_Atomic uint64_t wd_ns[GPU_MAX_FNS];	/* per function watchdog timeout; 0: default */
};

/* Die at once, as firmware does: no atexit handlers, no sanitizer epilogue that could
 * wait for locks other threads hold. */
static _Noreturn void srv_die(int code)
{
	for (;;)
		syscall(SYS_exit_group, code);
}

/* ---- events ---- */
/* Post one record, waiting up to @wait_ns for space. False if the queue stayed full. */
static bool srv_event_wait(struct srv *s, uint32_t type, uint32_t gfid, const uint64_t d[5],
			   uint64_t wait_ns)
{
	_Atomic uint32_t *put = (_Atomic uint32_t *)&s->gp->evt_put;
	_Atomic uint32_t *get = (_Atomic uint32_t *)&s->cp->evt_get;
	uint64_t give_up = cmn_deadline_ns(wait_ns);
	uint32_t p;

	pthread_mutex_lock(&s->evt_lock);
	p = atomic_load_explicit(put, memory_order_relaxed);
	while (p - atomic_load_explicit(get, memory_order_acquire) >= s->l.nr_events) {
		if (cmn_deadline_passed(give_up)) {
			pthread_mutex_unlock(&s->evt_lock);
			return false;
		}
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	s->evts[p & (s->l.nr_events - 1)] = (struct vgpu_rpc_event){
		.type = type, .gfid = gfid, .seq = ++s->evt_seq,
		.timestamp_ns = cmn_now_ns(), .data = { d[0], d[1], d[2], d[3], d[4] },
	};
	atomic_store_explicit(put, p + 1, memory_order_seq_cst);
	if (__atomic_load_n(&s->cp->evt_waiting, __ATOMIC_SEQ_CST))
		gsp_futex_wake(put);
	pthread_mutex_unlock(&s->evt_lock);
	return true;
}

/* A full queue waits a little for the CPU's worker, then drops: an event storm must never
 * stall the lanes that carry RPC replies. */
static void srv_event_data(struct srv *s, uint32_t type, uint32_t gfid, const uint64_t d[5])
{
	if (!srv_event_wait(s, type, gfid, d, 10 * VGPU_NSEC_PER_MSEC))
		__atomic_fetch_add(&s->gp->evt_dropped, 1, __ATOMIC_RELAXED);
}

/* A device-error record: never waits (the heartbeat thread posts it) and is never lost; if
 * the queue is full it is counted as deferred and false tells the caller to keep the
 * device's count unseen, so the next poll posts it, folded with whatever came since. */
static bool srv_event_dev(struct srv *s, uint32_t type, uint32_t gfid, const uint64_t d[5])
{
	if (srv_event_wait(s, type, gfid, d, 0))
		return true;
	__atomic_fetch_add(&s->gp->evt_deferred, 1, __ATOMIC_RELAXED);
	return false;
}

static void srv_event(struct srv *s, uint32_t type, uint32_t gfid, uint64_t d0)
{
	const uint64_t d[5] = { d0 };

	srv_event_data(s, type, gfid, d);
}

struct storm {
	struct srv *s;
	uint64_t n;
	uint32_t gfid;
};

static void *storm_main(void *arg)
{
	struct storm *st = arg;

	for (uint64_t i = 0; i < st->n; i++)
		srv_event(st->s, VGPU_RPC_EVT_TEST, st->gfid, i);
	free(st);
	return NULL;
}

/* ---- VRAM slices ---- */
static void slice_drop_locked(struct srv *s, unsigned int fn)
{
	if (s->slices[fn].map)
		munmap(s->slices[fn].map, s->slices[fn].size);
	if (s->slices[fn].fd >= 0)
		close(s->slices[fn].fd);
	s->slices[fn].fd = -1;
	s->slices[fn].map = NULL;
	s->slices[fn].size = 0;
}

/* Take every slice message waiting on the socket: the sender's message went out before
 * the RPC that needs it, so draining here is enough to see it. */
static void srv_slices_poll(struct srv *s)
{
	struct vgpu_rpc_slice_msg m;
	char cbuf[CMSG_SPACE(sizeof(int))];

	if (s->fd_sock < 0)
		return;
	pthread_mutex_lock(&s->slice_lock);
	for (;;) {
		struct iovec iov = { &m, sizeof(m) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm;
		int fd = -1;
		ssize_t n = recvmsg(s->fd_sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0)
			break;
		cm = CMSG_FIRSTHDR(&mh);
		if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
		if (n != sizeof(m) || m.fn >= s->glob->nr_fns || m.fn >= 64) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		slice_drop_locked(s, m.fn);
		if (fd < 0)
			continue;
		s->slices[m.fn].fd = fd;
		s->slices[m.fn].size = m.size;
		/* The GSP maps the slice read-write, as it would its VRAM aperture. */
		s->slices[m.fn].map = mmap(NULL, m.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (s->slices[m.fn].map == MAP_FAILED)
			s->slices[m.fn].map = NULL;
	}
	pthread_mutex_unlock(&s->slice_lock);
}

static int srv_scrub(struct srv *s, const struct vgpu_rpc_scrub *sc)
{
	int ret;

	if (sc->fn >= s->glob->nr_fns || (sc->offset | sc->size) & 4095 || !sc->size)
		return -EINVAL;
	srv_slices_poll(s);
	pthread_mutex_lock(&s->slice_lock);
	if (s->slices[sc->fn].fd < 0)
		ret = -EOPNOTSUPP;
	else if (sc->offset + sc->size > s->slices[sc->fn].size || sc->offset + sc->size < sc->offset)
		ret = -EINVAL;
	else if (fallocate(s->slices[sc->fn].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			   (off_t)sc->offset, (off_t)sc->size))
		ret = -errno;
	else
		ret = 0;
	pthread_mutex_unlock(&s->slice_lock);
	if (!ret)
		atomic_fetch_add(&s->scrubs, 1);
	return ret;
}

static uint64_t srv_nr_slices(struct srv *s)
{
	uint64_t n = 0;

	srv_slices_poll(s);
	pthread_mutex_lock(&s->slice_lock);
	for (unsigned int i = 0; i < 64; i++)
		n += s->slices[i].fd >= 0;
	pthread_mutex_unlock(&s->slice_lock);
	return n;
}

/* ---- RPC handlers ---- */
#define NEED(len, type) do { if ((len) != sizeof(type)) return -EINVAL; } while (0)

static int srv_reserve_reply(struct srv_lane *ln, size_t len)
{
	if (len <= ln->rep_cap)
		return 0;
	uint8_t *p = realloc(ln->rep, len);
	if (!p)
		return -ENOMEM;
	ln->rep = p;
	ln->rep_cap = len;
	return 0;
}

static int srv_inject(struct srv_lane *ln, const struct vgpu_rpc_inject *in)
{
	struct srv *s = ln->s;
	struct srv_lane *t;
	struct storm *st;
	pthread_t th;

	if (in->lane >= s->l.nr_lanes || in->fn >= 64)
		return -EINVAL;
	t = &s->lanes[in->lane];
	switch (in->mode) {
	case VGPU_INJ_CLEAR:
		for (unsigned int i = 0; i < 64; i++)
			atomic_store(&s->slow_ns[i], 0);
		for (unsigned int i = 0; i < s->l.nr_lanes; i++) {
			atomic_store(&s->lanes[i].late_ns, 0);
			atomic_store(&s->lanes[i].crash_mid, 0);
			atomic_store(&s->lanes[i].corrupt, 0);
			atomic_store(&s->lanes[i].stall_until, 0);
		}
		return 0;
	case VGPU_INJ_HANG:
		atomic_store(&s->hang, true);
		return 0;
	case VGPU_INJ_SLOW:
		atomic_store(&s->slow_ns[in->fn], in->arg);
		return 0;
	case VGPU_INJ_LATE:
		atomic_store(&t->late_ns, in->arg);
		return 0;
	case VGPU_INJ_CRASH_MID_REPLY:
		atomic_store(&t->crash_mid, 1);
		return 0;
	case VGPU_INJ_CORRUPT:
		if (in->arg < VGPU_CORRUPT_PAYLOAD || in->arg > VGPU_CORRUPT_COUNTER)
			return -EINVAL;
		atomic_store(&t->corrupt, (uint32_t)in->arg);
		return 0;
	case VGPU_INJ_STALL:
		atomic_store(&t->stall_until, cmn_deadline_ns(in->arg));
		return 0;
	case VGPU_INJ_EVENT_STORM:
		st = malloc(sizeof(*st));
		if (!st)
			return -ENOMEM;
		*st = (struct storm){ s, in->arg, in->fn };
		if (pthread_create(&th, NULL, storm_main, st)) {
			free(st);
			return -EAGAIN;
		}
		pthread_detach(th);
		return 0;
	case VGPU_INJ_CRASH:
		srv_die(2);
	}
	return -EINVAL;
}

/* Drop every channel of @fn and empty its runlists (the GSP's half of a VF reset). */
static int srv_vf_reset(struct srv *s, unsigned int fn)
{
	const struct gpu_priv_shared *sh = gpu_priv_shared(s->priv);
	int ret = 0;

	for (unsigned int rl = 0; rl < GPU_MAX_ENGINES && rl < sh->nr_engines; rl++)
		ret = ret ? ret : gpu_priv_runlist_set(s->priv, fn, rl, 0);
	for (unsigned int ch = 0; ch < GPU_FN_MAX_CHANNELS; ch++)
		if (__atomic_load_n(&sh->fns[fn].chans[ch].flags, __ATOMIC_ACQUIRE) & GPU_CHAN_ALLOCATED)
			ret = ret ? ret : gpu_priv_chan_free(s->priv, fn, ch);
	return ret;
}

static int srv_chan_alloc(struct srv *s, const struct vgpu_rpc_chan *c)
{
	struct gpu_priv_chan cfg = {
		.flags = c->flags, .runlist = c->runlist, .pdb = c->pdb,
		.gpfifo_va = c->gpfifo_va, .gpfifo_entries = c->gpfifo_entries,
		.userd_aper = c->userd_aper, .userd_addr = c->userd_addr,
	};

	if (c->chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	return gpu_priv_chan_alloc(s->priv, c->fn, c->chid, &cfg);
}

/* VA-space bind reprograms the channel's page directory: the hardware takes the PDB only
 * at allocation, so a disabled channel is freed and allocated again with the new one. */
static int srv_vaspace_bind(struct srv *s, const struct vgpu_rpc_chan *c)
{
	const struct gpu_priv_shared *sh = gpu_priv_shared(s->priv);
	struct vgpu_rpc_chan n;
	uint64_t fl;
	int ret;

	if (c->chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	fl = __atomic_load_n(&sh->fns[c->fn].chans[c->chid].flags, __ATOMIC_ACQUIRE);
	if (!(fl & GPU_CHAN_ALLOCATED))
		return -ENOENT;
	if (fl & GPU_CHAN_ENABLED)
		return -EBUSY;
	const struct gpu_priv_chan *o = &sh->fns[c->fn].chans[c->chid];
	n = (struct vgpu_rpc_chan){ .fn = c->fn, .chid = c->chid,
		.flags = fl & GPU_CHAN_REPLAYABLE, .runlist = o->runlist, .pdb = c->pdb,
		.gpfifo_va = o->gpfifo_va, .gpfifo_entries = o->gpfifo_entries,
		.userd_aper = o->userd_aper, .userd_addr = o->userd_addr };
	ret = gpu_priv_chan_free(s->priv, c->fn, c->chid);
	return ret ? ret : srv_chan_alloc(s, &n);
}

static int srv_hw(struct srv *s, uint32_t fn, const void *req, size_t len)
{
	const struct vgpu_rpc_partition *pt = req;
	const struct vgpu_rpc_fnarg *fa = req;
	const struct vgpu_rpc_chan *ch = req;
	const struct vgpu_rpc_chan_enable *ce = req;
	const struct vgpu_rpc_runlist *rl = req;
	const struct vgpu_rpc_sched *sc = req;
	const struct vgpu_rpc_sched_fn *sf = req;

	if (!s->priv)
		return -ENODEV;
	/* Every struct starts with the target function except the device-wide policy. */
	if (fn != VGPU_RPC_FN_SCHED_SET && (len < 4 || fa->fn >= s->glob->nr_fns))
		return -EINVAL;
	switch (fn) {
	case VGPU_RPC_FN_PARTITION_SET:
		NEED(len, *pt);
		return gpu_priv_partition_set(s->priv, pt->fn, pt->base, pt->size);
	case VGPU_RPC_FN_PARTITION_CLEAR:
		NEED(len, *fa);
		return gpu_priv_partition_set(s->priv, fa->fn, 0, 0);
	case VGPU_RPC_FN_CHAN_ALLOC:
		NEED(len, *ch);
		return srv_chan_alloc(s, ch);
	case VGPU_RPC_FN_CHAN_BIND:
		NEED(len, *ce);
		return ce->chid >= GPU_FN_MAX_CHANNELS ? -EINVAL :
			gpu_priv_chan_enable(s->priv, ce->fn, ce->chid, ce->enable != 0);
	case VGPU_RPC_FN_CHAN_FREE:
		NEED(len, *ch);
		return ch->chid >= GPU_FN_MAX_CHANNELS ? -EINVAL :
			gpu_priv_chan_free(s->priv, ch->fn, ch->chid);
	case VGPU_RPC_FN_VASPACE_BIND:
		NEED(len, *ch);
		return srv_vaspace_bind(s, ch);
	case VGPU_RPC_FN_RUNLIST_SET:
		NEED(len, *rl);
		return gpu_priv_runlist_set(s->priv, rl->fn, rl->runlist, rl->chans);
	case VGPU_RPC_FN_SCHED_SET:
		NEED(len, *sc);
		return gpu_priv_sched_set(s->priv, sc->policy, sc->quantum_ns, sc->period_ns);
	case VGPU_RPC_FN_SCHED_FN_SET: {
		NEED(len, *sf);
		struct gpu_priv_sched_fn v = { .enabled = sf->enabled, .quantum_ns = sf->quantum_ns,
			.preempt_timeout_ns = sf->preempt_timeout_ns, .weight = sf->weight };
		return gpu_priv_sched_fn_set(s->priv, sf->fn, &v);
	}
	case VGPU_RPC_FN_VF_RESET:
		NEED(len, *fa);
		return srv_vf_reset(s, fa->fn);
	case VGPU_RPC_FN_FAULT_REPLAY:
		NEED(len, *fa);
		/* Faults are replayed by the device model (the RM calls it after this RPC);
		 * the GSP's part is the record, kept as an event for the owner's log. */
		srv_event_data(s, VGPU_RPC_EVT_MMU_FAULT, fa->fn,
			       (const uint64_t[5]){ [4] = VGPU_RPC_FAULT_REPLAYED });
		return 0;
	case VGPU_RPC_FN_WATCHDOG_SET: {
		const struct vgpu_rpc_watchdog *w = req;

		NEED(len, *w);
		if (w->reserved || (w->timeout_ns && w->timeout_ns < VGPU_RPC_WD_MIN_NS))
			return -EINVAL;
		atomic_store(&s->wd_ns[w->fn], w->timeout_ns);
		return 0;
	}
	}
	return -EOPNOTSUPP;
}

/* Run one reassembled RPC; the reply payload is left in ln->rep (or points at the request). */
static int srv_handle(struct srv_lane *ln, uint32_t fn, uint32_t gfid, const uint8_t **rep,
		      size_t *rep_len)
{
	struct srv *s = ln->s;
	const void *req = ln->req;
	size_t len = ln->asm_total;
	struct vgpu_rpc_info info;
	uint64_t slow = gfid < 64 ? atomic_load(&s->slow_ns[gfid]) : 0;
	int ret;

	*rep = NULL;
	*rep_len = 0;
	if (slow)
		cmn_sleep_ns(slow);
	switch (fn) {
	case VGPU_RPC_FN_NOP:
		return 0;
	case VGPU_RPC_FN_ECHO:
		*rep = req;
		*rep_len = len;
		return 0;
	case VGPU_RPC_FN_GET_INFO:
		info = (struct vgpu_rpc_info){ .abi_version = VGPU_ABI_VERSION,
			.nr_fns = s->glob->nr_fns, .pid = (uint64_t)getpid(), .epoch = s->glob->epoch,
			.vram_size = s->priv ? gpu_priv_shared(s->priv)->vram_size : 0,
			.rpcs = __atomic_load_n(&s->gp->rpcs, __ATOMIC_RELAXED),
			.bad_msgs = __atomic_load_n(&s->gp->bad_msgs, __ATOMIC_RELAXED),
			.scrubs = atomic_load(&s->scrubs), .slices = srv_nr_slices(s) };
		ret = srv_reserve_reply(ln, sizeof(info));
		if (ret)
			return ret;
		memcpy(ln->rep, &info, sizeof(info));
		*rep = ln->rep;
		*rep_len = sizeof(info);
		return 0;
	case VGPU_RPC_FN_BLOB: {
		const struct vgpu_rpc_blob *b = req;
		NEED(len, *b);
		if (b->len > VGPU_RPC_MAX_PAYLOAD)
			return -EINVAL;
		ret = srv_reserve_reply(ln, b->len);
		if (ret)
			return ret;
		for (uint64_t i = 0; i < b->len; i++)
			ln->rep[i] = (uint8_t)(b->seed + i * 131);
		*rep = ln->rep;
		*rep_len = b->len;
		return 0;
	}
	case VGPU_RPC_FN_INJECT:
		NEED(len, struct vgpu_rpc_inject);
		return srv_inject(ln, req);
	case VGPU_RPC_FN_SCRUB:
		NEED(len, struct vgpu_rpc_scrub);
		return srv_scrub(s, req);
	}
	return srv_hw(s, fn, req, len);
}

/* ---- reply path ---- */
static void srv_wait_space(struct srv_lane *ln, uint32_t elems)
{
	uint64_t start = cmn_now_ns();

	/* The CPU drains a reply larger than the queue while it arrives: spin like an idle
	 * lane would, then back off to short sleeps. */
	while (gsp_q_free(&ln->stat) < elems) {
		if (cmn_now_ns() - start < ln->s->spin_ns)
			gsp_spin_step(start);
		else
			cmn_sleep_ns(5 * VGPU_NSEC_PER_USEC);
	}
}

/* Apply an armed corruption to the built message; returns the elements to publish. */
static void srv_corrupt(struct srv_lane *ln, uint8_t *msg, size_t bytes, uint32_t mode)
{
	struct vgpu_rpc_elem *e = (void *)msg;
	struct vgpu_rpc_hdr *rh = (void *)(msg + sizeof(*e));

	switch (mode) {
	case VGPU_CORRUPT_PAYLOAD:
		msg[bytes - 1] ^= 0x10;		/* payload or padding: both are summed */
		break;
	case VGPU_CORRUPT_LENGTH:
		rh->length = 0xffffff00u;
		e->checksum = 0;
		e->checksum = gsp_checksum(msg, bytes);
		break;
	case VGPU_CORRUPT_SEQ:
		e->seq += 5;
		ln->stat.seq = e->seq + 1;
		e->checksum = 0;
		e->checksum = gsp_checksum(msg, bytes);
		break;
	}
}

static void srv_reply(struct srv_lane *ln, uint32_t fn, uint32_t seq, uint32_t gfid, int result,
		      const uint8_t *rep, size_t rep_len)
{
	uint64_t late = atomic_exchange(&ln->late_ns, 0);
	uint32_t corrupt = atomic_exchange(&ln->corrupt, 0);
	uint32_t crash = atomic_exchange(&ln->crash_mid, 0);
	size_t off = 0;
	uint32_t chunk = 0;

	if (late)
		cmn_sleep_ns(late);
	do {
		size_t n = cmn_min(rep_len - off, (size_t)VGPU_RPC_MSG_MAX_PAYLOAD);
		struct vgpu_rpc_hdr rh = { .version = VGPU_RPC_HDR_VERSION,
			.signature = VGPU_RPC_SIGNATURE, .function = chunk ? VGPU_RPC_FN_CONTINUATION : fn,
			.result = result, .sequence = seq, .gfid = gfid, .chunk = chunk,
			.total_length = rep_len };
		size_t bytes = gsp_msg_build(&ln->stat, ln->tx, &rh, rep + off, n);
		uint32_t elems = gsp_msg_elems(n);

		srv_wait_space(ln, elems);
		if (crash) {
			/* Half the message visible, then die: what a GSP crashing mid-copy leaves. */
			gsp_q_write(&ln->stat, ln->tx, bytes, elems, elems / 2);
			srv_die(3);
		}
		if (corrupt && corrupt < VGPU_CORRUPT_REPLAY)
			srv_corrupt(ln, ln->tx, bytes, corrupt);
		/* A wild write over our own counter, in the same store that publishes the
		 * reply: the reader can never take the reply first, so the outcome is fixed. */
		gsp_q_write(&ln->stat, ln->tx, bytes, elems,
			    corrupt == VGPU_CORRUPT_COUNTER ? elems + 10 * ln->stat.nr : elems);
		if (corrupt == VGPU_CORRUPT_REPLAY) {
			/* The same message again: its transport seq is now in the past. */
			srv_wait_space(ln, elems);
			gsp_q_write(&ln->stat, ln->tx, bytes, elems, elems);
		}
		corrupt = 0;
		off += n;
		chunk++;
	} while (off < rep_len);
}

/* ---- command path ---- */
static void srv_bad(struct srv_lane *ln)
{
	ln->asm_active = false;
	__atomic_fetch_add(&ln->s->gp->bad_msgs, 1, __ATOMIC_RELAXED);
}

static int srv_req_reserve(struct srv_lane *ln, uint64_t total)
{
	if (total <= ln->req_cap)
		return 0;
	uint8_t *p = realloc(ln->req, total);
	if (!p)
		return -ENOMEM;
	ln->req = p;
	ln->req_cap = total;
	return 0;
}

static void srv_message(struct srv_lane *ln)
{
	struct vgpu_rpc_hdr *rh = (void *)(ln->msg + sizeof(struct vgpu_rpc_elem));
	const uint8_t *payload = ln->msg + VGPU_RPC_MSG_HDR_SIZE;
	const uint8_t *rep;
	size_t rep_len;
	int ret;

	if (rh->function != VGPU_RPC_FN_CONTINUATION) {
		if (ln->asm_active)
			srv_bad(ln);	/* the previous RPC's continuation never came */
		if (rh->chunk || rh->total_length > VGPU_RPC_MAX_PAYLOAD ||
		    rh->length > rh->total_length ||
		    (rh->length < rh->total_length && rh->length != VGPU_RPC_MSG_MAX_PAYLOAD)) {
			srv_bad(ln);
			srv_reply(ln, rh->function, rh->sequence, rh->gfid, -EBADMSG, NULL, 0);
			return;
		}
		ret = srv_req_reserve(ln, rh->total_length);
		if (ret) {
			srv_reply(ln, rh->function, rh->sequence, rh->gfid, ret, NULL, 0);
			return;
		}
		ln->asm_active = true;
		ln->asm_seq = rh->sequence;
		ln->asm_fn = rh->function;
		ln->asm_gfid = rh->gfid;
		ln->asm_chunk = 0;
		ln->asm_total = rh->total_length;
		ln->asm_got = 0;
	} else if (!ln->asm_active || rh->sequence != ln->asm_seq ||
		   rh->chunk != ln->asm_chunk + 1 || ln->asm_got + rh->length > ln->asm_total ||
		   (ln->asm_got + rh->length < ln->asm_total && rh->length != VGPU_RPC_MSG_MAX_PAYLOAD)) {
		srv_bad(ln);
		return;
	} else {
		ln->asm_chunk++;
	}
	if (rh->length)
		memcpy(ln->req + ln->asm_got, payload, rh->length);
	ln->asm_got += rh->length;
	if (ln->asm_got < ln->asm_total)
		return;
	ln->asm_active = false;
	ret = srv_handle(ln, ln->asm_fn, ln->asm_gfid, &rep, &rep_len);
	__atomic_fetch_add(&ln->s->gp->rpcs, 1, __ATOMIC_RELAXED);
	srv_reply(ln, ln->asm_fn, ln->asm_seq, ln->asm_gfid, ret, rep, rep_len);
}

/* Spin a while for the next command, then sleep on the command put. */
static void srv_idle(struct srv_lane *ln)
{
	uint32_t seen = atomic_load_explicit(ln->cmd.put, memory_order_acquire);
	uint64_t until = cmn_now_ns() + ln->s->spin_ns;

	while (cmn_now_ns() < until) {
		if (atomic_load_explicit(ln->cmd.put, memory_order_acquire) != seen)
			return;
		gsp_spin_step(until - ln->s->spin_ns);
	}
	atomic_store(ln->cmd.reader_waiting, 1);	/* seq_cst: see gsp_q_write() */
	if (atomic_load_explicit(ln->cmd.put, memory_order_seq_cst) == seen)
		gsp_futex_wait(ln->cmd.put, seen, 50 * VGPU_NSEC_PER_MSEC);
	atomic_store(ln->cmd.reader_waiting, 0);
}

static void *srv_lane_main(void *arg)
{
	struct srv_lane *ln = arg;
	struct srv *s = ln->s;

	for (;;) {
		if (atomic_load_explicit(&s->hang, memory_order_relaxed) ||
		    atomic_load_explicit(&ln->stall_until, memory_order_relaxed) > cmn_now_ns()) {
			cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
			continue;
		}
		switch (gsp_q_read(&ln->cmd, ln->msg)) {
		case GSP_RX_GAP:
			__atomic_fetch_add(&s->gp->bad_msgs, 1, __ATOMIC_RELAXED);
			/* fall through */
		case GSP_RX_OK:
			srv_message(ln);
			break;
		case GSP_RX_EMPTY:
			srv_idle(ln);
			break;
		case GSP_RX_PARTIAL:
			cmn_cpu_relax();
			break;
		case GSP_RX_CORRUPT:	/* the CPU-RM will reset us; do not spin on it */
			srv_bad(ln);
			cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
			break;
		case GSP_RX_BAD:
			srv_bad(ln);
			break;
		case GSP_RX_STALE:
			break;
		}
	}
	return NULL;
}

/* ---- the device's errors ------------------------------------------------------------------
 * As GSP-RM services the GPU's interrupts, the GSP reads the device model's status region
 * (gpu_model/gpu.h) every heartbeat and posts what changed: per channel one CHAN_ERROR
 * record with the number of errors since the last look, per function one MMU_FAULT record
 * likewise, so an error storm costs at most one record per channel per poll. */
static uint64_t st_load(const uint64_t *w)
{
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

/* Post @fn's new channel errors; false if the queue filled up (the rest waits). */
static bool srv_chan_errors(struct srv *s, unsigned int fn)
{
	for (unsigned int ch = 0; ch < GPU_FN_MAX_CHANNELS; ch++) {
		const struct gpu_status_chan *sc = &s->st->fns[fn].chans[ch];
		uint64_t n = st_load(&sc->errors), seen = s->seen_errors[fn][ch];

		if (n == seen)
			continue;
		uint64_t err = st_load(&sc->error), get = st_load(&sc->gp_get);

		if (!srv_event_dev(s, VGPU_RPC_EVT_CHAN_ERROR, fn,
				   (const uint64_t[5]){ ch, err, get, n - seen }))
			return false;
		s->seen_errors[fn][ch] = n;
		/* The engine took the channel off for not yielding: the watchdog's other half,
		 * the recovery already done by the device. A hint only: not retried. */
		if (err == VGPU_CHAN_ERR_PREEMPT_TIMEOUT)
			srv_event_dev(s, VGPU_RPC_EVT_WATCHDOG, fn,
				      (const uint64_t[5]){ ch, VGPU_RPC_WD_PREEMPT_TIMEOUT, get });
	}
	return true;
}

/* Post @fn's new faults (one folded record); false if the queue is full. */
static bool srv_faults(struct srv *s, unsigned int fn)
{
	const struct gpu_status_fn *sf = &s->st->fns[fn];
	uint64_t n = st_load(&sf->faults), seen = s->seen_faults[fn];

	if (n == seen)
		return true;
	if (!srv_event_dev(s, VGPU_RPC_EVT_MMU_FAULT, fn, (const uint64_t[5]){
			st_load(&sf->fault_chid), st_load(&sf->fault_reason),
			st_load(&sf->fault_va), n - seen }))
		return false;
	s->seen_faults[fn] = n;
	return true;
}

static void srv_errors_scan(struct srv *s)
{
	uint64_t ev = st_load(&s->st->events);

	if (ev == s->st_events)
		return;
	for (unsigned int fn = 0; fn < s->glob->nr_fns; fn++)
		if (!srv_faults(s, fn) || !srv_chan_errors(s, fn))
			return;	/* queue full: st_events stays old, so the next poll rescans */
	s->st_events = ev;
}

/* Could the device run @fn's channel @ch now (allocated, enabled, on its runlist, the
 * function scheduled)? Only such a channel can be hung: others wait for the owner. */
static bool srv_chan_schedulable(const struct gpu_priv_fn *pf, unsigned int ch)
{
	const struct gpu_priv_chan *pc = &pf->chans[ch];
	uint64_t fl = st_load(&pc->flags), rl = st_load(&pc->runlist);

	return (fl & GPU_CHAN_ALLOCATED) && (fl & GPU_CHAN_ENABLED) && rl < GPU_MAX_ENGINES &&
	       (st_load(&pf->runlist[rl]) >> ch & 1) && st_load(&pf->sched.enabled) &&
	       st_load(&pf->part_size);
}

/* One channel's watchdog step: a stall starts when work is pending and GP_GET stops; it is
 * reported once, after the function's timeout, and ends when GP_GET moves, the work is
 * done, the channel errors or is reallocated. A new fault on the channel also ends it: the
 * previous one was serviced and replayed (one GP entry touching many non-resident pages
 * takes many fault round trips), while a fault nobody services leaves the count still. */
static void srv_wd_chan(struct srv *s, unsigned int fn, unsigned int ch, uint64_t now,
			uint64_t timeout)
{
	const struct gpu_priv_fn *pf = &gpu_priv_shared(s->priv)->fns[fn];
	const struct gpu_status_chan *sc = &s->st->fns[fn].chans[ch];
	struct srv_wd *w = &s->wd[fn][ch];
	uint64_t gen = st_load(&pf->chans[ch].gen), get = st_load(&sc->gp_get);
	uint64_t faults = st_load(&sc->faults);
	bool pending = get != st_load(&sc->gp_put) && !st_load(&sc->error);

	if (!pending || !srv_chan_schedulable(pf, ch) || gen != w->gen || get != w->gp_get ||
	    faults != w->faults) {
		*w = (struct srv_wd){ .gen = gen, .gp_get = get, .faults = faults,
				      .since = pending ? now : 0 };
		return;
	}
	if (!w->since)
		w->since = now;
	if (w->fired || now - w->since < timeout)
		return;
	/* Full queue: not fired yet, so the next poll tries again. */
	if (!srv_event_dev(s, VGPU_RPC_EVT_WATCHDOG, fn,
			   (const uint64_t[5]){ ch, VGPU_RPC_WD_HUNG, get, now - w->since }))
		return;
	w->fired = true;
	cmn_warn("vgpu-gsp: watchdog: function %u channel %u made no progress for %llu ms at GP %llu",
		  fn, ch, (unsigned long long)((now - w->since) / VGPU_NSEC_PER_MSEC),
		  (unsigned long long)get);
}

static void srv_watchdog(struct srv *s)
{
	uint64_t now = cmn_now_ns();

	for (unsigned int fn = 0; fn < s->glob->nr_fns; fn++) {
		uint64_t t = atomic_load_explicit(&s->wd_ns[fn], memory_order_relaxed);

		for (unsigned int ch = 0; ch < GPU_FN_MAX_CHANNELS; ch++)
			srv_wd_chan(s, fn, ch, now, t ? t : VGPU_RPC_WD_DEFAULT_NS);
	}
}

/* Map the status region; what it already counts happened before this GSP (a restart):
 * it is not posted again. */
static int srv_status_open(struct srv *s, int fd)
{
	size_t bytes = (sizeof(struct gpu_status_shared) + GSP_PAGE - 1) & ~(size_t)(GSP_PAGE - 1);
	const struct gpu_status_shared *st;
	struct stat sb;

	if (fstat(fd, &sb) || (size_t)sb.st_size < bytes)
		return -EINVAL;
	st = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED)
		return -errno;
	if (st->magic != GPU_STATUS_MAGIC || st->nr_fns < s->glob->nr_fns) {
		munmap((void *)st, bytes);
		return -EPROTO;
	}
	s->st = st;
	s->st_events = st_load(&st->events);
	for (unsigned int fn = 0; fn < s->glob->nr_fns; fn++) {
		s->seen_faults[fn] = st_load(&st->fns[fn].faults);
		for (unsigned int ch = 0; ch < GPU_FN_MAX_CHANNELS; ch++)
			s->seen_errors[fn][ch] = st_load(&st->fns[fn].chans[ch].errors);
	}
	return 0;
}

/* ---- setup ---- */
/* A device reset loses what the hardware held: every channel, runlist and partition, and
 * the scheduler goes back to its reset state (best effort, every function enabled). */
static void srv_wipe(struct srv *s)
{
	struct gpu_priv_sched_fn def = { .enabled = 1 };

	gpu_priv_sched_set(s->priv, GPU_SCHED_BEST_EFFORT, 0, 0);
	for (unsigned int fn = 0; fn < s->glob->nr_fns; fn++) {
		srv_vf_reset(s, fn);
		gpu_priv_partition_set(s->priv, fn, 0, 0);
		gpu_priv_sched_fn_set(s->priv, fn, &def);
	}
}

static int srv_attach(struct srv *s, int qfd)
{
	struct stat st;
	const struct vgpu_rpcq_global *g;
	int ret;

	if (fstat(qfd, &st) || st.st_size < (off_t)(3 * GSP_PAGE))
		return -EINVAL;
	s->base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, qfd, 0);
	if (s->base == MAP_FAILED)
		return -errno;
	g = s->glob = (void *)s->base;
	if (g->magic != VGPU_RPCQ_MAGIC || !vgpu_abi_compatible(g->abi_version) ||
	    g->total_size != (uint64_t)st.st_size || !g->nr_fns || g->nr_fns > 64)
		return -EPROTO;
	ret = gsp_layout_compute(g->nr_lanes, g->queue_elems, g->nr_events, &s->l);
	if (ret || s->l.total != g->total_size)
		return -EPROTO;
	s->gp = (void *)(s->base + GSP_PAGE);
	s->cp = (void *)(s->base + 2 * GSP_PAGE);
	s->evts = (void *)(s->base + s->l.evt_off);
	s->spin_ns = g->gsp_spin_ns;
	return 0;
}

static int srv_lanes_start(struct srv *s)
{
	for (unsigned int i = 0; i < s->l.nr_lanes; i++) {
		struct srv_lane *ln = &s->lanes[i];

		ln->s = s;
		ln->idx = i;
		gsp_q_bind(&ln->cmd, s->base, &s->l, i, 0);
		gsp_q_bind(&ln->stat, s->base, &s->l, i, 1);
		ln->msg = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
		ln->tx = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
		if (!ln->msg || !ln->tx)
			return -ENOMEM;
		if (pthread_create(&ln->th, NULL, srv_lane_main, ln))
			return -EAGAIN;
	}
	return 0;
}

int gsp_server_run(int qfd, int priv_fd, int kick_fd, int status_fd, int fd_sock, int ppid)
{
	static struct srv s;	/* lives as long as the process */
	int ret;

	s.fd_sock = fd_sock;
	pthread_mutex_init(&s.slice_lock, NULL);
	for (unsigned int i = 0; i < 64; i++)
		s.slices[i].fd = -1;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ppid > 0 && getppid() != ppid)
		return 1;
	pthread_mutex_init(&s.evt_lock, NULL);
	ret = srv_attach(&s, qfd);
	if (ret) {
		cmn_err("vgpu-gsp: queue memfd: %s", cmn_strerror(ret));
		return 1;
	}
	if (priv_fd >= 0) {
		ret = gpu_priv_open(priv_fd, &s.priv);
		if (ret) {
			cmn_err("vgpu-gsp: privileged region: %s", cmn_strerror(ret));
			return 1;
		}
		if (kick_fd >= 0)
			gpu_priv_set_kick_fd(s.priv, kick_fd);
	}
	if (s.priv && status_fd >= 0) {
		ret = srv_status_open(&s, status_fd);
		if (ret) {
			cmn_err("vgpu-gsp: status region: %s", cmn_strerror(ret));
			return 1;
		}
	}
	if (s.priv && s.glob->wipe_hw)
		srv_wipe(&s);
	s.gp->pid = (uint64_t)getpid();
	__atomic_store_n(&s.gp->heartbeat_ns, cmn_now_ns(), __ATOMIC_RELEASE);
	ret = srv_lanes_start(&s);
	if (ret)
		return 1;
	__atomic_store_n(&s.gp->ready, s.glob->epoch, __ATOMIC_RELEASE);
	srv_event(&s, VGPU_RPC_EVT_INIT_DONE, 0, s.glob->epoch);
	for (;;) {
		if (!atomic_load_explicit(&s.hang, memory_order_relaxed)) {
			__atomic_store_n(&s.gp->heartbeat_ns, cmn_now_ns(), __ATOMIC_RELEASE);
			if (s.st) {
				srv_errors_scan(&s);
				srv_watchdog(&s);
			}
		}
		if (ppid > 0 && getppid() != ppid)
			return 0;
		cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
	}
}
