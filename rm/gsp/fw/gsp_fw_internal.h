/* SPDX-License-Identifier: MIT */
/* rm/gsp/fw internals shared by the firmware's RPC server (server.c) and its test hooks
 * (hooks.c, compiled to nothing without VGPU_TEST_HOOKS). */
#ifndef VGPU_RM_GSP_FW_INTERNAL_H
#define VGPU_RM_GSP_FW_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vgpu/rpc.h>

#include "common/lock.h"
#include "common/share.h"
#include "gpu_model/gpu.h"
#include "rm/gsp/gsp.h"
#ifdef VGPU_TEST_HOOKS
#include "rm/gsp/gsp_test_rpc.h"
#endif

struct gsp_fw;

#ifdef VGPU_TEST_HOOKS
/* Faults armed by the INJECT RPC for one lane. The one-shot ones are taken by the next
 * reply of the lane (gsp_fw_hook_reply_begin()) and apply to that reply only. */
struct gsp_fw_lane_faults {
	_Atomic uint64_t late_ns;
	_Atomic uint32_t crash_mid, corrupt;
	_Atomic uint64_t stall_until;
	uint32_t reply_corrupt, reply_crash;	/* the reply being written (lane thread) */
};

/* The watchdog's test clock (WD_TICK). A lane thread asks for a tick and waits; the main
 * loop, which alone touches the watchdog's records, runs the pass and answers it. */
struct gsp_fw_wd_clock {
	struct cmn_mutex lock;		/* protects the rest */
	pthread_cond_t cv;		/* a tick answered, or the asking slot free again */
	bool on;			/* passes run only on ticks */
	uint64_t now;			/* the test clock; 0: not started */
	uint64_t asked, answered;	/* ticks */
	struct vgpu_rpc_wd_tick req;	/* the tick asked */
	struct vgpu_rpc_wd_state rep;	/* its answer */
};

/* Faults armed for the whole GSP. */
struct gsp_fw_faults {
	_Atomic bool hang;
	_Atomic uint64_t slow_ns[64];	/* per gfid */
	_Atomic uint64_t fail_fn[64];	/* per gfid: RPC number + 1 that FAIL fails; 0: none */
	_Atomic uint32_t scrub_hold;	/* SCRUB_HOLD: 1 armed, 2 a scrub is held; 0: off */
	struct gsp_fw_wd_clock wd_clock;
};
#endif

struct gsp_fw_lane {
	struct gsp_fw *s;
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
#ifdef VGPU_TEST_HOOKS
	struct gsp_fw_lane_faults faults;
#endif
	/* CPU priority by share (common/share.h): each function's RPCs this lane served, and
	 * the nice the lane thread runs at now (lane thread only) */
	struct cmn_share_user share[GPU_MAX_FNS];
	int nice;
	uint64_t light_win;		/* 1 + the last window it served a light RPC; 0: never */
	pthread_t th;
};

/* The watchdog's view of one channel. */
struct gsp_fw_wd {
	uint64_t gen;			/* the allocation watched (priv gen) */
	uint64_t gp_get;		/* GP_GET at the last change */
	uint64_t faults;		/* the channel's fault count at the last change */
	uint64_t since;			/* pending and unmoved since then; 0: nothing pending */
	bool fired;			/* reported for this stall */
};

struct gsp_fw {
	uint8_t *base;
	struct gsp_layout l;
	struct vgpu_rpcq_global *glob;
	struct vgpu_rpcq_gsp_page *gp;
	struct vgpu_rpcq_cpu_page *cp;
	struct vgpu_rpc_event *evts;
	struct gpu_priv *priv;		/* NULL: started without hardware */
	uint64_t spin_ns;
	bool renice;			/* lane threads run at their RPCs' share's nice */
	struct cmn_share_plane share;	/* every lane's RPCs, per window */
#ifdef VGPU_TEST_HOOKS
	struct gsp_fw_faults faults;
#endif
	struct cmn_mutex evt_lock;	/* protects evt_seq and the event put */
	uint64_t evt_seq;
	int fd_sock;			/* VRAM slices arrive here (SCM_RIGHTS); -1: none */
	struct cmn_mutex slice_lock;	/* protects slices[] and the socket's reads */
	struct { int fd; uint64_t size; void *map; } slices[64];
	_Atomic uint64_t scrubs;
	struct gsp_fw_lane lanes[VGPU_RPC_MAX_LANES];
	/* the device's errors (status region); only the main thread touches these */
	const struct gpu_status_shared *st;	/* NULL: started without one */
	uint64_t st_events;		/* the region's event count at the last scan */
	uint64_t seen_faults[GPU_MAX_FNS];
	uint64_t seen_errors[GPU_MAX_FNS][GPU_FN_MAX_CHANNELS];
	struct gsp_fw_wd wd[GPU_MAX_FNS][GPU_FN_MAX_CHANNELS];
	_Atomic uint64_t wd_ns[GPU_MAX_FNS];	/* per function watchdog timeout; 0: default */
	uint64_t wd_hung;		/* HUNG records posted (main thread) */
};

/* A reply being produced by an RPC handler. */
struct gsp_fw_reply {
	const uint8_t *data;		/* NULL: no payload */
	size_t len;
};

/* Exit the process at once, as firmware dies: no atexit handlers, no sanitizer epilogue
 * that could wait for locks other threads hold. */
_Noreturn void gsp_fw_die(int code);
/* One watchdog pass over every function's channels at time @now (main thread). */
void gsp_fw_watchdog(struct gsp_fw *s, uint64_t now);
/* Post one event record carrying @d0, waiting a little for space (then dropped). */
void gsp_fw_event(struct gsp_fw *s, uint32_t type, uint32_t gfid, uint64_t d0);
/* Make ln->rep hold at least @len bytes; 0 or -ENOMEM. */
int gsp_fw_reserve_reply(struct gsp_fw_lane *ln, size_t len);

#ifdef VGPU_TEST_HOOKS
/* The test-only RPCs (rm/gsp/gsp_test_rpc.h), entries of the server's RPC table. */
int gsp_fw_rpc_blob(struct gsp_fw_lane *ln, const void *req, size_t len,
		    struct gsp_fw_reply *out);
int gsp_fw_rpc_inject(struct gsp_fw_lane *ln, const void *req, size_t len,
		      struct gsp_fw_reply *out);
int gsp_fw_rpc_wd_tick(struct gsp_fw_lane *ln, const void *req, size_t len,
		       struct gsp_fw_reply *out);
/* Set up and tear down the hooks' own state. */
void gsp_fw_hook_init(struct gsp_fw *s);
void gsp_fw_hook_fini(struct gsp_fw *s);
/* The main loop's watchdog turn: true if the test clock has it (a tick asked was run and
 * answered, or none was asked); false: run the pass on the GSP's clock. */
bool gsp_fw_hook_watchdog(struct gsp_fw *s);
/* Every lane stopped (HANG) or @ln's reading stalled (STALL): the lane thread waits. */
bool gsp_fw_hook_paused(struct gsp_fw_lane *ln);
/* HANG: the heartbeat and the device polling stop too. */
bool gsp_fw_hook_hung(struct gsp_fw *s);
/* SLOW: delay an RPC of @gfid before it runs. 0, or -EREMOTEIO if FAIL was armed for
 * RPC number @fn of @gfid: that one is answered so and not run. */
int gsp_fw_hook_before_rpc(struct gsp_fw *s, uint32_t gfid, uint32_t fn);
/* SCRUB_HOLD: a scrub of @fn about to punch (no lock held) reports it and waits. */
void gsp_fw_hook_scrub(struct gsp_fw *s, uint32_t fn);
/* Take @ln's one-shot reply faults for the reply about to be written; LATE sleeps here. */
void gsp_fw_hook_reply_begin(struct gsp_fw_lane *ln);
/* Publish one reply message (@bytes in ln->tx, @elems elements) with the armed fault
 * applied; false if none is armed and the caller writes it as usual. May not return
 * (CRASH_MID_REPLY). */
bool gsp_fw_hook_reply_write(struct gsp_fw_lane *ln, size_t bytes, uint32_t elems);
#else
/* A release GSP has no faults to apply and its watchdog runs on its own clock. */
static inline void gsp_fw_hook_init(struct gsp_fw *s) { (void)s; }
static inline void gsp_fw_hook_fini(struct gsp_fw *s) { (void)s; }
static inline bool gsp_fw_hook_watchdog(struct gsp_fw *s) { (void)s; return false; }
static inline bool gsp_fw_hook_paused(struct gsp_fw_lane *ln) { (void)ln; return false; }
static inline bool gsp_fw_hook_hung(struct gsp_fw *s) { (void)s; return false; }
static inline int gsp_fw_hook_before_rpc(struct gsp_fw *s, uint32_t gfid, uint32_t fn)
{
	(void)s;
	(void)gfid;
	(void)fn;
	return 0;
}
static inline void gsp_fw_hook_scrub(struct gsp_fw *s, uint32_t fn)
{
	(void)s;
	(void)fn;
}
static inline void gsp_fw_hook_reply_begin(struct gsp_fw_lane *ln) { (void)ln; }
static inline bool gsp_fw_hook_reply_write(struct gsp_fw_lane *ln, size_t bytes, uint32_t elems)
{
	(void)ln;
	(void)bytes;
	(void)elems;
	return false;
}
#endif

/* Count an RPC of function @gfid served by @ln in share window @win (common/share.h) and
 * return the nice it runs at: 0 if @gfid was light in the last window (or alone), else
 * CMN_SHARE_NICE_BUSY. A @gfid past GPU_MAX_FNS is not counted and runs at 0. */
int gsp_fw_lane_share(struct gsp_fw_lane *ln, uint32_t gfid, uint64_t win);

/* The nice @ln sleeps at in window @win: 0 if it served a light function's RPC in the
 * last second (so that function's next RPC wakes it at 0), else the nice it runs at. */
int gsp_fw_lane_sleep_nice(const struct gsp_fw_lane *ln, uint64_t win);

/* Wait until the status queue of @ln has room for @elems elements. */
void gsp_fw_wait_space(struct gsp_fw_lane *ln, uint32_t elems);

#endif
