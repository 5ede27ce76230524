// SPDX-License-Identifier: MIT
/* The GSP's side: one thread per lane reads commands, reassembles continuation records,
 * runs the RPC against the privileged region and writes the reply; the main thread beats
 * the heartbeat and watches the device. RPCs dispatch through one table (srv_fns[]); the
 * test-only ones and the faults they arm live in hooks.c, in test builds only.
 *
 * A lane serves the RPCs of several functions in order, so its thread runs each RPC at the
 * nice its function's share gives (common/share.h, the rule vgpud's service threads
 * follow): a function served more than its share of every lane's RPCs in the last window
 * at CMN_SHARE_NICE_BUSY, a light one at 0; an idle lane sleeps at 0. On a loaded CPU a
 * light function's RPC is then not served by a thread queued behind the flood's. */
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
#include "common/lock.h"
#include "common/log.h"
#include "gpu_model/gpu.h"
#include "rm/gsp/fw/gsp_fw.h"
#include "rm/gsp/fw/gsp_fw_internal.h"
#ifdef VGPU_TEST_HOOKS
#include "rm/gsp/gsp_test_rpc.h"
#endif

_Noreturn void gsp_fw_die(int code)
{
	for (;;)
		syscall(SYS_exit_group, code);
}

/* ---- events ---- */
/* Post one record, waiting up to @wait_ns for space. False if the queue stayed full. The
 * wait is outside evt_lock: a lane waiting for room must not hold up the heartbeat's
 * records (which never wait) nor the other lanes' posts for its whole wait. */
static bool srv_event_wait(struct gsp_fw *s, uint32_t type, uint32_t gfid, const uint64_t d[5],
			   uint64_t wait_ns)
{
	_Atomic uint32_t *put = (_Atomic uint32_t *)&s->gp->evt_put;
	_Atomic uint32_t *get = (_Atomic uint32_t *)&s->cp->evt_get;
	uint64_t give_up = cmn_deadline_ns(wait_ns);
	uint32_t p;

	for (;;) {
		cmn_mutex_lock(&s->evt_lock);
		p = atomic_load_explicit(put, memory_order_relaxed);
		if (p - atomic_load_explicit(get, memory_order_acquire) < s->l.nr_events)
			break;
		cmn_mutex_unlock(&s->evt_lock);
		if (cmn_deadline_passed(give_up))
			return false;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	s->evts[p & (s->l.nr_events - 1)] = (struct vgpu_rpc_event){
		.type = type, .gfid = gfid, .seq = ++s->evt_seq,
		.timestamp_ns = cmn_now_ns(), .data = { d[0], d[1], d[2], d[3], d[4] },
	};
	atomic_store_explicit(put, p + 1, memory_order_seq_cst);
	if (__atomic_load_n(&s->cp->evt_waiting, __ATOMIC_SEQ_CST))
		gsp_futex_wake(put);
	cmn_mutex_unlock(&s->evt_lock);
	return true;
}

/* A full queue waits a little for the CPU's worker, then drops: an event storm must never
 * stall the lanes that carry RPC replies. */
static void srv_event_data(struct gsp_fw *s, uint32_t type, uint32_t gfid, const uint64_t d[5])
{
	if (!srv_event_wait(s, type, gfid, d, 10 * VGPU_NSEC_PER_MSEC))
		__atomic_fetch_add(&s->gp->evt_dropped, 1, __ATOMIC_RELAXED);
}

/* A device-error record: never waits (the heartbeat thread posts it) and is never lost; if
 * the queue is full it is counted as deferred and false tells the caller to keep the
 * device's count unseen, so the next poll posts it, folded with whatever came since. */
static bool srv_event_dev(struct gsp_fw *s, uint32_t type, uint32_t gfid, const uint64_t d[5])
{
	if (srv_event_wait(s, type, gfid, d, 0))
		return true;
	__atomic_fetch_add(&s->gp->evt_deferred, 1, __ATOMIC_RELAXED);
	return false;
}

void gsp_fw_event(struct gsp_fw *s, uint32_t type, uint32_t gfid, uint64_t d0)
{
	const uint64_t d[5] = { d0 };

	srv_event_data(s, type, gfid, d);
}

/* ---- VRAM slices ---- */
static void slice_drop_locked(struct gsp_fw *s, unsigned int fn)
{
	cmn_mutex_assert_held(&s->slice_lock);
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
static void srv_slices_poll(struct gsp_fw *s)
{
	struct vgpu_rpc_slice_msg m;
	char cbuf[CMSG_SPACE(sizeof(int))];

	if (s->fd_sock < 0)
		return;
	cmn_mutex_lock(&s->slice_lock);
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
	cmn_mutex_unlock(&s->slice_lock);
}

/* Punch @sc's range of its function's slice. The punch runs on a copy of the memfd, out
 * of slice_lock, which every lane takes to look at the slices: one function's scrub holds
 * up no other lane (a slice dropped meanwhile stays alive until the copy is closed). */
static int srv_scrub(struct gsp_fw *s, const struct vgpu_rpc_scrub *sc)
{
	int ret = 0, fd = -1;

	if (sc->fn >= s->glob->nr_fns || (sc->offset | sc->size) & 4095 || !sc->size)
		return -EINVAL;
	srv_slices_poll(s);
	cmn_mutex_lock(&s->slice_lock);
	if (s->slices[sc->fn].fd < 0)
		ret = -EOPNOTSUPP;
	else if (sc->offset + sc->size > s->slices[sc->fn].size || sc->offset + sc->size < sc->offset)
		ret = -EINVAL;
	else if ((fd = fcntl(s->slices[sc->fn].fd, F_DUPFD_CLOEXEC, 0)) < 0)
		ret = -errno;
	cmn_mutex_unlock(&s->slice_lock);
	if (ret)
		return ret;
	gsp_fw_hook_scrub(s, sc->fn);
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)sc->offset,
		      (off_t)sc->size))
		ret = -errno;
	close(fd);
	if (!ret)
		atomic_fetch_add(&s->scrubs, 1);
	return ret;
}

static uint64_t srv_nr_slices(struct gsp_fw *s)
{
	uint64_t n = 0;

	srv_slices_poll(s);
	cmn_mutex_lock(&s->slice_lock);
	for (unsigned int i = 0; i < 64; i++)
		n += s->slices[i].fd >= 0;
	cmn_mutex_unlock(&s->slice_lock);
	return n;
}

/* ---- RPC handlers ---- */
int gsp_fw_reserve_reply(struct gsp_fw_lane *ln, size_t len)
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

/* Drop every channel of @fn and empty its runlists (the GSP's half of a VF reset). */
static int srv_vf_reset(struct gsp_fw *s, unsigned int fn)
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

/* @c->flags may hold GPU_CHAN_RESTORE (the owner's replay after a device reset): the
 * device keeps the execution state of the allocation the wipe freed if the geometry is
 * that allocation's, else the channel starts over in error (gpu_chan_adopt). */
static int srv_chan_alloc(struct gsp_fw *s, const struct vgpu_rpc_chan *c)
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
static int srv_vaspace_bind(struct gsp_fw *s, const struct vgpu_rpc_chan *c)
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

/* ---- the RPC table ----
 * Every handler gets a request whose size and target function srv_validate() checked
 * against its entry, and, where the entry has an out size, ln->rep reserved for a reply
 * of that size. */
#define SRV_ANY		UINT32_MAX	/* in: any request size */
#define SRV_HW		1u		/* needs the privileged region (-ENODEV without) */
#define SRV_FN		2u		/* the request starts with a function number < nr_fns */

typedef int (*srv_handler)(struct gsp_fw_lane *ln, const void *req, size_t len,
			   struct gsp_fw_reply *out);

struct srv_fn {
	uint32_t fn;
	uint32_t in;			/* request bytes, or SRV_ANY */
	uint32_t out;			/* reply bytes reserved in ln->rep; 0: none, or the
					 * handler's own (ECHO, BLOB) */
	uint32_t flags;			/* SRV_HW, SRV_FN */
	srv_handler run;
};

static int srv_nop(struct gsp_fw_lane *ln, const void *req, size_t len, struct gsp_fw_reply *out)
{
	(void)ln;
	(void)req;
	(void)len;
	(void)out;
	return 0;
}

static int srv_echo(struct gsp_fw_lane *ln, const void *req, size_t len, struct gsp_fw_reply *out)
{
	(void)ln;
	out->data = req;
	out->len = len;
	return 0;
}

static int srv_get_info(struct gsp_fw_lane *ln, const void *req, size_t len,
			struct gsp_fw_reply *out)
{
	struct gsp_fw *s = ln->s;
	struct vgpu_rpc_info info = { .abi_version = VGPU_ABI_VERSION,
		.nr_fns = s->glob->nr_fns, .pid = (uint64_t)getpid(), .epoch = s->glob->epoch,
		.vram_size = s->priv ? gpu_priv_shared(s->priv)->vram_size : 0,
		.rpcs = __atomic_load_n(&s->gp->rpcs, __ATOMIC_RELAXED),
		.bad_msgs = __atomic_load_n(&s->gp->bad_msgs, __ATOMIC_RELAXED),
		.scrubs = atomic_load(&s->scrubs), .slices = srv_nr_slices(s) };

	(void)req;
	(void)len;
	memcpy(ln->rep, &info, sizeof(info));
	out->len = sizeof(info);
	return 0;
}

static int srv_scrub_rpc(struct gsp_fw_lane *ln, const void *req, size_t len,
			 struct gsp_fw_reply *out)
{
	(void)len;
	(void)out;
	return srv_scrub(ln->s, req);
}

static int srv_partition_set(struct gsp_fw_lane *ln, const void *req, size_t len,
			     struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_partition *pt = req;

	(void)len;
	(void)out;
	return gpu_priv_partition_set(ln->s->priv, pt->fn, pt->base, pt->size);
}

static int srv_partition_clear(struct gsp_fw_lane *ln, const void *req, size_t len,
			       struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_fnarg *fa = req;

	(void)len;
	(void)out;
	return gpu_priv_partition_set(ln->s->priv, fa->fn, 0, 0);
}

static int srv_chan_alloc_rpc(struct gsp_fw_lane *ln, const void *req, size_t len,
			      struct gsp_fw_reply *out)
{
	(void)len;
	(void)out;
	return srv_chan_alloc(ln->s, req);
}

static int srv_chan_bind(struct gsp_fw_lane *ln, const void *req, size_t len,
			 struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_chan_enable *ce = req;

	(void)len;
	(void)out;
	return ce->chid >= GPU_FN_MAX_CHANNELS ? -EINVAL :
		gpu_priv_chan_enable(ln->s->priv, ce->fn, ce->chid, ce->enable != 0);
}

static int srv_chan_free(struct gsp_fw_lane *ln, const void *req, size_t len,
			 struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_chan *ch = req;

	(void)len;
	(void)out;
	return ch->chid >= GPU_FN_MAX_CHANNELS ? -EINVAL :
		gpu_priv_chan_free(ln->s->priv, ch->fn, ch->chid);
}

static int srv_vaspace_bind_rpc(struct gsp_fw_lane *ln, const void *req, size_t len,
				struct gsp_fw_reply *out)
{
	(void)len;
	(void)out;
	return srv_vaspace_bind(ln->s, req);
}

static int srv_runlist_set(struct gsp_fw_lane *ln, const void *req, size_t len,
			   struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_runlist *rl = req;

	(void)len;
	(void)out;
	return gpu_priv_runlist_set(ln->s->priv, rl->fn, rl->runlist, rl->chans);
}

static int srv_sched_set(struct gsp_fw_lane *ln, const void *req, size_t len,
			 struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_sched *sc = req;

	(void)len;
	(void)out;
	return gpu_priv_sched_set(ln->s->priv, sc->policy, sc->quantum_ns, sc->period_ns);
}

static int srv_sched_fn_set(struct gsp_fw_lane *ln, const void *req, size_t len,
			    struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_sched_fn *sf = req;
	struct gpu_priv_sched_fn v = { .enabled = sf->enabled, .quantum_ns = sf->quantum_ns,
		.preempt_timeout_ns = sf->preempt_timeout_ns, .weight = sf->weight };

	(void)len;
	(void)out;
	return gpu_priv_sched_fn_set(ln->s->priv, sf->fn, &v);
}

static int srv_vf_reset_rpc(struct gsp_fw_lane *ln, const void *req, size_t len,
			    struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_fnarg *fa = req;

	(void)len;
	(void)out;
	return srv_vf_reset(ln->s, fa->fn);
}

/* Faults are replayed by the device model (the RM calls it after this RPC); the GSP's
 * part is the record, kept as an event for the owner's log. */
static int srv_fault_replay(struct gsp_fw_lane *ln, const void *req, size_t len,
			    struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_fnarg *fa = req;

	(void)len;
	(void)out;
	srv_event_data(ln->s, VGPU_RPC_EVT_MMU_FAULT, fa->fn,
		       (const uint64_t[5]){ [4] = VGPU_RPC_FAULT_REPLAYED });
	return 0;
}

static int srv_watchdog_set(struct gsp_fw_lane *ln, const void *req, size_t len,
			    struct gsp_fw_reply *out)
{
	const struct vgpu_rpc_watchdog *w = req;

	(void)len;
	(void)out;
	if (w->reserved || (w->timeout_ns && w->timeout_ns < VGPU_RPC_WD_MIN_NS))
		return -EINVAL;
	atomic_store(&ln->s->wd_ns[w->fn], w->timeout_ns);
	return 0;
}

#define SRV_SZ(type) ((uint32_t)sizeof(struct type))

static const struct srv_fn srv_fns[] = {
	{ VGPU_RPC_FN_NOP, SRV_ANY, 0, 0, srv_nop },
	{ VGPU_RPC_FN_ECHO, SRV_ANY, 0, 0, srv_echo },
	{ VGPU_RPC_FN_GET_INFO, SRV_ANY, SRV_SZ(vgpu_rpc_info), 0, srv_get_info },
	{ VGPU_RPC_FN_SCRUB, SRV_SZ(vgpu_rpc_scrub), 0, 0, srv_scrub_rpc },
	{ VGPU_RPC_FN_PARTITION_SET, SRV_SZ(vgpu_rpc_partition), 0, SRV_HW | SRV_FN,
	  srv_partition_set },
	{ VGPU_RPC_FN_PARTITION_CLEAR, SRV_SZ(vgpu_rpc_fnarg), 0, SRV_HW | SRV_FN,
	  srv_partition_clear },
	{ VGPU_RPC_FN_CHAN_ALLOC, SRV_SZ(vgpu_rpc_chan), 0, SRV_HW | SRV_FN, srv_chan_alloc_rpc },
	{ VGPU_RPC_FN_CHAN_BIND, SRV_SZ(vgpu_rpc_chan_enable), 0, SRV_HW | SRV_FN, srv_chan_bind },
	{ VGPU_RPC_FN_CHAN_FREE, SRV_SZ(vgpu_rpc_chan), 0, SRV_HW | SRV_FN, srv_chan_free },
	{ VGPU_RPC_FN_VASPACE_BIND, SRV_SZ(vgpu_rpc_chan), 0, SRV_HW | SRV_FN,
	  srv_vaspace_bind_rpc },
	{ VGPU_RPC_FN_RUNLIST_SET, SRV_SZ(vgpu_rpc_runlist), 0, SRV_HW | SRV_FN, srv_runlist_set },
	/* the device-wide policy: the only hardware RPC without a target function */
	{ VGPU_RPC_FN_SCHED_SET, SRV_SZ(vgpu_rpc_sched), 0, SRV_HW, srv_sched_set },
	{ VGPU_RPC_FN_SCHED_FN_SET, SRV_SZ(vgpu_rpc_sched_fn), 0, SRV_HW | SRV_FN, srv_sched_fn_set },
	{ VGPU_RPC_FN_VF_RESET, SRV_SZ(vgpu_rpc_fnarg), 0, SRV_HW | SRV_FN, srv_vf_reset_rpc },
	{ VGPU_RPC_FN_FAULT_REPLAY, SRV_SZ(vgpu_rpc_fnarg), 0, SRV_HW | SRV_FN, srv_fault_replay },
	{ VGPU_RPC_FN_WATCHDOG_SET, SRV_SZ(vgpu_rpc_watchdog), 0, SRV_HW | SRV_FN,
	  srv_watchdog_set },
#ifdef VGPU_TEST_HOOKS
	/* the test-only RPCs (hooks.c) */
	{ VGPU_RPC_FN_BLOB, SRV_SZ(vgpu_rpc_blob), 0, 0, gsp_fw_rpc_blob },
	{ VGPU_RPC_FN_INJECT, SRV_SZ(vgpu_rpc_inject), 0, 0, gsp_fw_rpc_inject },
	{ VGPU_RPC_FN_WD_TICK, SRV_SZ(vgpu_rpc_wd_tick), SRV_SZ(vgpu_rpc_wd_state), 0,
	  gsp_fw_rpc_wd_tick },
#endif
};

/* @fn's entry; NULL for a function this GSP does not know. */
static const struct srv_fn *srv_fn_find(uint32_t fn)
{
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(srv_fns); i++)
		if (srv_fns[i].fn == fn)
			return &srv_fns[i];
	return NULL;
}

/* The one check of a request against its entry: hardware present, target function in
 * range, exact size. */
static int srv_validate(const struct gsp_fw *s, const struct srv_fn *d, const void *req,
			size_t len)
{
	if ((d->flags & SRV_HW) && !s->priv)
		return -ENODEV;
	if ((d->flags & SRV_FN) &&
	    (len < sizeof(uint32_t) || *(const uint32_t *)req >= s->glob->nr_fns))
		return -EINVAL;
	if (d->in != SRV_ANY && len != d->in)
		return -EINVAL;
	return 0;
}

/* Run one reassembled RPC; the reply payload is left in ln->rep (or points at the
 * request). An unknown function is -EOPNOTSUPP. */
static int srv_handle(struct gsp_fw_lane *ln, uint32_t fn, uint32_t gfid,
		      struct gsp_fw_reply *out)
{
	const struct srv_fn *d = srv_fn_find(fn);
	const void *req = ln->req;
	size_t len = ln->asm_total;
	int ret;

	*out = (struct gsp_fw_reply){ 0 };
	ret = gsp_fw_hook_before_rpc(ln->s, gfid, fn);
	if (ret)
		return ret;
	if (!d)
		return -EOPNOTSUPP;
	ret = srv_validate(ln->s, d, req, len);
	if (ret)
		return ret;
	if (d->out) {
		ret = gsp_fw_reserve_reply(ln, d->out);
		if (ret)
			return ret;
		out->data = ln->rep;
	}
	return d->run(ln, req, len, out);
}

/* ---- reply path ---- */
void gsp_fw_wait_space(struct gsp_fw_lane *ln, uint32_t elems)
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

static void srv_reply(struct gsp_fw_lane *ln, uint32_t fn, uint32_t seq, uint32_t gfid, int result,
		      const uint8_t *rep, size_t rep_len)
{
	size_t off = 0;
	uint32_t chunk = 0;

	gsp_fw_hook_reply_begin(ln);
	do {
		size_t n = cmn_min(rep_len - off, (size_t)VGPU_RPC_MSG_MAX_PAYLOAD);
		struct vgpu_rpc_hdr rh = { .version = VGPU_RPC_HDR_VERSION,
			.signature = VGPU_RPC_SIGNATURE, .function = chunk ? VGPU_RPC_FN_CONTINUATION : fn,
			.result = result, .sequence = seq, .gfid = gfid, .chunk = chunk,
			.total_length = rep_len };
		/* An empty reply has no buffer: NULL + 0 is undefined behaviour in C. */
		size_t bytes = gsp_msg_build(&ln->stat, ln->tx, &rh, n ? rep + off : NULL, n);
		uint32_t elems = gsp_msg_elems(n);

		gsp_fw_wait_space(ln, elems);
		if (!gsp_fw_hook_reply_write(ln, bytes, elems))
			gsp_q_write(&ln->stat, ln->tx, bytes, elems, elems);
		off += n;
		chunk++;
	} while (off < rep_len);
}

/* ---- CPU priority by share ---- */
/* Windows a lane remembers having served a light function's RPC (SRV_LIGHT_MEMORY *
 * CMN_SHARE_WINDOW_NS: 1 s). */
#define SRV_LIGHT_MEMORY	20

int gsp_fw_lane_share(struct gsp_fw_lane *ln, uint32_t gfid, uint64_t win)
{
	int nice = gfid < GPU_MAX_FNS ? cmn_share_count(&ln->s->share, &ln->share[gfid], win) : 0;

	if (!nice)
		ln->light_win = win + 1;	/* + 1: window 0 is a window too */
	return nice;
}

int gsp_fw_lane_sleep_nice(const struct gsp_fw_lane *ln, uint64_t win)
{
	return ln->light_win && win + 1 - ln->light_win < SRV_LIGHT_MEMORY ? 0 : ln->nice;
}

/* Run the lane thread at @nice (a thread of vgpu-gsp only, never a stepping caller's). */
static void srv_lane_nice(struct gsp_fw_lane *ln, int nice)
{
	if (nice != ln->nice && ln->s->renice &&
	    cmn_share_may_renice(&ln->s->share, "vgpu-gsp lanes") &&
	    !cmn_share_set_nice(nice, "vgpu-gsp lane"))
		ln->nice = nice;
}

/* ---- command path ---- */
static void srv_bad(struct gsp_fw_lane *ln)
{
	ln->asm_active = false;
	__atomic_fetch_add(&ln->s->gp->bad_msgs, 1, __ATOMIC_RELAXED);
}

static int srv_req_reserve(struct gsp_fw_lane *ln, uint64_t total)
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

static void srv_message(struct gsp_fw_lane *ln)
{
	struct vgpu_rpc_hdr *rh = (void *)(ln->msg + sizeof(struct vgpu_rpc_elem));
	const uint8_t *payload = ln->msg + VGPU_RPC_MSG_HDR_SIZE;
	struct gsp_fw_reply rep;
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
	/* Its function's share sets the nice it runs at (and the reply is written at). */
	srv_lane_nice(ln, gsp_fw_lane_share(ln, ln->asm_gfid, cmn_share_window(cmn_now_ns())));
	ret = srv_handle(ln, ln->asm_fn, ln->asm_gfid, &rep);
	__atomic_fetch_add(&ln->s->gp->rpcs, 1, __ATOMIC_RELAXED);
	srv_reply(ln, ln->asm_fn, ln->asm_seq, ln->asm_gfid, ret, rep.data, rep.len);
}

/* Spin a while for the next command, then sleep on the command put. A lane that just
 * served a light function's RPC spins at nice 0; one that served a busy function's does
 * not spin: preempted there at its low priority, it would hold up whoever's RPC comes
 * next. It sleeps at nice 0 if it served a light function in the last second, so that
 * function's next RPC does not wake a thread that runs behind the busy ones (a busy
 * function's RPC puts it back at CMN_SHARE_NICE_BUSY once read); a lane that served only
 * busy functions for that long sleeps at its nice, and its flood's wake-ups do not run
 * ahead of anyone. */
static void srv_idle(struct gsp_fw_lane *ln)
{
	uint32_t seen = atomic_load_explicit(ln->cmd.put, memory_order_acquire);
	uint64_t start = cmn_now_ns(), until = start + (ln->nice ? 0 : ln->s->spin_ns);

	while (cmn_now_ns() < until) {
		if (atomic_load_explicit(ln->cmd.put, memory_order_acquire) != seen)
			return;
		gsp_spin_step(start);
	}
	srv_lane_nice(ln, gsp_fw_lane_sleep_nice(ln, cmn_share_window(cmn_now_ns())));
	atomic_store(ln->cmd.reader_waiting, 1);	/* seq_cst: see gsp_q_write() */
	if (atomic_load_explicit(ln->cmd.put, memory_order_seq_cst) == seen)
		gsp_futex_wait(ln->cmd.put, seen, 50 * VGPU_NSEC_PER_MSEC);
	atomic_store(ln->cmd.reader_waiting, 0);
}

/* Read the next command message and serve it; the caller waits on EMPTY and PARTIAL. */
static enum gsp_rx srv_lane_step(struct gsp_fw_lane *ln)
{
	enum gsp_rx rx = gsp_q_read(&ln->cmd, ln->msg);

	switch (rx) {
	case GSP_RX_GAP:
		__atomic_fetch_add(&ln->s->gp->bad_msgs, 1, __ATOMIC_RELAXED);
		/* fall through */
	case GSP_RX_OK:
		srv_message(ln);
		break;
	case GSP_RX_CORRUPT:
	case GSP_RX_BAD:
		srv_bad(ln);
		break;
	case GSP_RX_EMPTY:
	case GSP_RX_PARTIAL:
	case GSP_RX_STALE:
		break;
	}
	return rx;
}

static void *srv_lane_main(void *arg)
{
	struct gsp_fw_lane *ln = arg;

	/* A light function's RPC wakes this thread at nice 0 and its caller waits: the
	 * shortest slice lets it preempt a thread running a longer one at once. At
	 * CMN_SHARE_NICE_BUSY its deadline stays behind every nice-0 thread's. */
	cmn_share_set_slice(CMN_SHARE_SLICE_MIN_NS, "vgpu-gsp lane");

	for (;;) {
		if (gsp_fw_hook_paused(ln)) {
			cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
			continue;
		}
		switch (srv_lane_step(ln)) {
		case GSP_RX_EMPTY:
			srv_idle(ln);
			break;
		case GSP_RX_PARTIAL:
			cmn_cpu_relax();
			break;
		case GSP_RX_CORRUPT:	/* the CPU-RM will reset us; do not spin on it */
			cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
			break;
		default:
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
static bool srv_chan_errors(struct gsp_fw *s, unsigned int fn)
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
static bool srv_faults(struct gsp_fw *s, unsigned int fn)
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

static void srv_errors_scan(struct gsp_fw *s)
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
static void srv_wd_chan(struct gsp_fw *s, unsigned int fn, unsigned int ch, uint64_t now,
			uint64_t timeout)
{
	const struct gpu_priv_fn *pf = &gpu_priv_shared(s->priv)->fns[fn];
	const struct gpu_status_chan *sc = &s->st->fns[fn].chans[ch];
	struct gsp_fw_wd *w = &s->wd[fn][ch];
	uint64_t gen = st_load(&pf->chans[ch].gen), get = st_load(&sc->gp_get);
	uint64_t faults = st_load(&sc->faults);
	bool pending = get != st_load(&sc->gp_put) && !st_load(&sc->error);

	if (!pending || !srv_chan_schedulable(pf, ch) || gen != w->gen || get != w->gp_get ||
	    faults != w->faults) {
		*w = (struct gsp_fw_wd){ .gen = gen, .gp_get = get, .faults = faults,
				      .since = pending ? now : 0 };
		return;
	}
	if (!w->since)
		w->since = now;
	if (w->fired || now - w->since < timeout)
		return;
	/* Full queue: not fired yet, so the next poll tries again. */
	if (!srv_event_dev(s, VGPU_RPC_EVT_WATCHDOG, fn,
			   (const uint64_t[5]){ ch, VGPU_RPC_WD_HUNG, get, now - w->since, gen }))
		return;
	w->fired = true;
	s->wd_hung++;
	cmn_warn("vgpu-gsp: watchdog: function %u channel %u made no progress for %llu ms at GP %llu",
		  fn, ch, (unsigned long long)((now - w->since) / VGPU_NSEC_PER_MSEC),
		  (unsigned long long)get);
}

void gsp_fw_watchdog(struct gsp_fw *s, uint64_t now)
{
	for (unsigned int fn = 0; fn < s->glob->nr_fns; fn++) {
		uint64_t t = atomic_load_explicit(&s->wd_ns[fn], memory_order_relaxed);

		for (unsigned int ch = 0; ch < GPU_FN_MAX_CHANNELS; ch++)
			srv_wd_chan(s, fn, ch, now, t ? t : VGPU_RPC_WD_DEFAULT_NS);
	}
}

/* Map the status region; what it already counts happened before this GSP (a restart):
 * it is not posted again. */
static int srv_status_open(struct gsp_fw *s, int fd)
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
 * the scheduler goes back to its reset state (best effort, every function enabled). A freed
 * channel's record keeps its geometry and gen, which the owner's replay restores. */
static void srv_wipe(struct gsp_fw *s)
{
	struct gpu_priv_sched_fn def = { .enabled = 1 };

	gpu_priv_sched_set(s->priv, GPU_SCHED_BEST_EFFORT, 0, 0);
	for (unsigned int fn = 0; fn < s->glob->nr_fns; fn++) {
		srv_vf_reset(s, fn);
		gpu_priv_partition_set(s->priv, fn, 0, 0);
		gpu_priv_sched_fn_set(s->priv, fn, &def);
	}
}

static int srv_attach(struct gsp_fw *s, int qfd)
{
	struct stat st;
	const struct vgpu_rpcq_global *g;
	int ret;

	if (fstat(qfd, &st) || st.st_size < (off_t)(3 * GSP_PAGE))
		return -EINVAL;
	s->base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, qfd, 0);
	if (s->base == MAP_FAILED) {
		s->base = NULL;
		return -errno;
	}
	g = s->glob = (void *)s->base;
	ret = g->magic != VGPU_RPCQ_MAGIC || !vgpu_abi_compatible(g->abi_version) ||
	      g->total_size != (uint64_t)st.st_size || !g->nr_fns || g->nr_fns > 64 ||
	      gsp_layout_compute(g->nr_lanes, g->queue_elems, g->nr_events, &s->l) ||
	      s->l.total != g->total_size;
	if (ret) {
		munmap(s->base, (size_t)st.st_size);
		s->base = NULL;
		return -EPROTO;
	}
	s->gp = (void *)(s->base + GSP_PAGE);
	s->cp = (void *)(s->base + 2 * GSP_PAGE);
	s->evts = (void *)(s->base + s->l.evt_off);
	s->spin_ns = g->gsp_spin_ns;
	return 0;
}

/* Bind every lane to its queues and give it its message buffers (no thread yet). */
static int srv_lanes_init(struct gsp_fw *s)
{
	for (unsigned int i = 0; i < s->l.nr_lanes; i++) {
		struct gsp_fw_lane *ln = &s->lanes[i];

		ln->s = s;
		ln->idx = i;
		gsp_q_bind(&ln->cmd, s->base, &s->l, i, 0);
		gsp_q_bind(&ln->stat, s->base, &s->l, i, 1);
		ln->msg = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
		ln->tx = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
		if (!ln->msg || !ln->tx)
			return -ENOMEM;
	}
	return 0;
}

static int srv_lanes_start(struct gsp_fw *s)
{
	for (unsigned int i = 0; i < s->l.nr_lanes; i++)
		if (pthread_create(&s->lanes[i].th, NULL, srv_lane_main, &s->lanes[i]))
			return -EAGAIN;
	return 0;
}

/* What vgpu-gsp and gsp_fw_open() share: the queues, the privileged region, the lanes'
 * buffers. Says what failed. */
static int srv_setup(struct gsp_fw *s, int qfd, int priv_fd, int kick_fd)
{
	int ret;

	s->fd_sock = -1;
	cmn_mutex_init(&s->slice_lock);
	for (unsigned int i = 0; i < 64; i++)
		s->slices[i].fd = -1;
	cmn_mutex_init(&s->evt_lock);
	gsp_fw_hook_init(s);
	ret = srv_attach(s, qfd);
	if (ret) {
		cmn_err("vgpu-gsp: queue memfd: %s", cmn_strerror(ret));
		return ret;
	}
	if (priv_fd >= 0) {
		ret = gpu_priv_open(priv_fd, &s->priv);
		if (ret) {
			cmn_err("vgpu-gsp: privileged region: %s", cmn_strerror(ret));
			return ret;
		}
		if (kick_fd >= 0)
			gpu_priv_set_kick_fd(s->priv, kick_fd);
	}
	ret = srv_lanes_init(s);
	if (ret)
		cmn_err("vgpu-gsp: lanes: %s", cmn_strerror(ret));
	return ret;
}

int gsp_fw_open(int qfd, int priv_fd, struct gsp_fw **out)
{
	struct gsp_fw *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	ret = srv_setup(s, qfd, priv_fd, -1);
	if (ret) {
		gsp_fw_close(s);
		return ret;
	}
	if (s->priv && s->glob->wipe_hw)
		srv_wipe(s);
	*out = s;
	return 0;
}

int gsp_fw_step(struct gsp_fw *s, unsigned int lane)
{
	if (lane >= s->l.nr_lanes)
		return -EINVAL;
	return (int)srv_lane_step(&s->lanes[lane]);
}

void gsp_fw_close(struct gsp_fw *s)
{
	if (!s)
		return;
	for (unsigned int i = 0; i < VGPU_RPC_MAX_LANES; i++) {
		free(s->lanes[i].msg);
		free(s->lanes[i].tx);
		free(s->lanes[i].req);
		free(s->lanes[i].rep);
	}
	if (s->priv)
		gpu_priv_close(s->priv);
	if (s->base)
		munmap(s->base, s->l.total);
	gsp_fw_hook_fini(s);
	cmn_mutex_destroy(&s->evt_lock);
	cmn_mutex_destroy(&s->slice_lock);
	free(s);
}

int gsp_fw_run(int qfd, int priv_fd, int kick_fd, int status_fd, int fd_sock, int ppid)
{
	static struct gsp_fw s;	/* lives as long as the process */
	int ret;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ppid > 0 && getppid() != ppid)
		return 1;
	if (srv_setup(&s, qfd, priv_fd, kick_fd))
		return 1;
	s.fd_sock = fd_sock;
	if (s.priv && status_fd >= 0) {
		ret = srv_status_open(&s, status_fd);
		if (ret) {
			cmn_err("vgpu-gsp: status region: %s", cmn_strerror(ret));
			return 1;
		}
	}
	if (s.priv && s.glob->wipe_hw)
		srv_wipe(&s);
	s.renice = true;
	s.gp->pid = (uint64_t)getpid();
	__atomic_store_n(&s.gp->heartbeat_ns, cmn_now_ns(), __ATOMIC_RELEASE);
	ret = srv_lanes_start(&s);
	if (ret)
		return 1;
	__atomic_store_n(&s.gp->ready, s.glob->epoch, __ATOMIC_RELEASE);
	gsp_fw_event(&s, VGPU_RPC_EVT_INIT_DONE, 0, s.glob->epoch);
	for (;;) {
		if (!gsp_fw_hook_hung(&s)) {
			__atomic_store_n(&s.gp->heartbeat_ns, cmn_now_ns(), __ATOMIC_RELEASE);
			if (s.st) {
				srv_errors_scan(&s);
				/* a test build's WD_TICK may have put it on a test clock */
				if (!gsp_fw_hook_watchdog(&s))
					gsp_fw_watchdog(&s, cmn_now_ns());
			}
		}
		if (ppid > 0 && getppid() != ppid)
			return 0;
		cmn_sleep_ns(2 * VGPU_NSEC_PER_MSEC);
	}
}
