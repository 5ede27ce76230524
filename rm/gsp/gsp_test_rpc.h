/* SPDX-License-Identifier: MIT */
/* rm/gsp/gsp_test_rpc.h - the test-only RPCs of the CPU-RM <-> GSP protocol.
 *
 * They exist only in test builds (-DVGPU_TEST_HOOKS: the -th libraries and vgpu-gsp-test,
 * see the Makefile): fault injection, so tests can make the real GSP process hang, crawl,
 * answer late, die mid-reply, corrupt a reply, flood events or fail one RPC; BLOB, a
 * reply of any size for the transport tests; and WD_TICK, which puts the channel watchdog
 * on a clock the test drives. A release vgpu-gsp answers the three numbers -EOPNOTSUPP, like
 * any function it does not know, and a release client refuses INJECT and WD_TICK (above
 * VGPU_RPC_FN_MAX) with -EINVAL. Numbers and layouts follow include/vgpu/rpc.h. */
#ifndef VGPU_RM_GSP_TEST_RPC_H
#define VGPU_RM_GSP_TEST_RPC_H

#include <stdbool.h>
#include <stdint.h>

#include <vgpu/rpc.h>

enum vgpu_rpc_test_fn {
	VGPU_RPC_FN_BLOB = 212,		/* struct vgpu_rpc_blob -> @len bytes of pattern */
	VGPU_RPC_FN_INJECT = 250,	/* struct vgpu_rpc_inject: fault injection */
	VGPU_RPC_FN_WD_TICK = 251,	/* struct vgpu_rpc_wd_tick -> struct vgpu_rpc_wd_state */
};

/* True for a test-only function number. */
static inline bool vgpu_rpc_fn_is_test(uint32_t function)
{
	return function == VGPU_RPC_FN_BLOB || function == VGPU_RPC_FN_INJECT ||
	       function == VGPU_RPC_FN_WD_TICK;
}

struct vgpu_rpc_blob {
	uint64_t len;			/* reply bytes */
	uint32_t seed, reserved;
};

/* Fault injection (handled by the lane thread that receives it, applied to @lane). */
enum vgpu_rpc_inject_mode {
	VGPU_INJ_CLEAR = 0,		/* every fault off */
	VGPU_INJ_HANG = 1,		/* stop every lane and the heartbeat */
	VGPU_INJ_SLOW = 2,		/* delay every RPC of gfid @fn by @arg ns */
	VGPU_INJ_LATE = 3,		/* hold the next reply of @lane for @arg ns */
	VGPU_INJ_CRASH_MID_REPLY = 4,	/* next reply of @lane: publish half its elements, exit */
	VGPU_INJ_CORRUPT = 5,		/* next reply of @lane: @arg = enum vgpu_rpc_corrupt */
	VGPU_INJ_STALL = 6,		/* @lane stops reading commands for @arg ns (queue full);
					 * VGPU_INJ_UNTIL_CLEAR: until VGPU_INJ_CLEAR */
	VGPU_INJ_EVENT_STORM = 7,	/* emit @arg VGPU_RPC_EVT_TEST events now */
	VGPU_INJ_CRASH = 8,		/* exit at once */
	VGPU_INJ_FAIL = 9,		/* the next RPC @arg (function number) of gfid @fn
					 * is not run and fails with -EREMOTEIO */
	VGPU_INJ_SCRUB_HOLD = 10,	/* the next SCRUB, about to punch, posts a
					 * VGPU_RPC_EVT_TEST event (gfid: the scrubbed function,
					 * data[0]: VGPU_INJ_SCRUB_HOLD) and waits for CLEAR */
};

#define VGPU_INJ_UNTIL_CLEAR	UINT64_MAX

enum vgpu_rpc_corrupt {
	VGPU_CORRUPT_PAYLOAD = 1,	/* flip a payload bit after the checksum */
	VGPU_CORRUPT_LENGTH = 2,	/* impossible length, checksum recomputed */
	VGPU_CORRUPT_SEQ = 3,		/* transport seq skips ahead, checksum recomputed */
	VGPU_CORRUPT_REPLAY = 4,	/* send the reply, then the previous message again */
	VGPU_CORRUPT_COUNTER = 5,	/* send the reply, then make the status put impossible */
};

struct vgpu_rpc_inject {
	uint32_t mode;			/* enum vgpu_rpc_inject_mode */
	uint32_t lane;
	uint32_t fn;
	uint32_t reserved;
	uint64_t arg;
};

/* The channel watchdog on a test clock. The first WD_TICK takes the watchdog off the
 * GSP's own clock for the rest of the GSP's life: from then on it makes one pass per tick
 * and no other, at the test clock advanced by @advance_ns (the clock starts where the
 * GSP's own was at the first tick). The reply, taken right after that pass, is channel
 * @ch of function @fn as the watchdog accounts for it, so a test decides "slow" and
 * "hung" by that accounting, however long its own threads are held up. The device
 * polling (errors, faults) keeps its own pace. -ENODEV: this GSP runs no watchdog (no status region);
 * -EAGAIN: HANG is armed (no pass runs); -EINVAL: @fn, @ch or @reserved out of range. */
struct vgpu_rpc_wd_tick {
	uint32_t fn, ch;
	uint64_t advance_ns;
	uint64_t reserved;
};

struct vgpu_rpc_wd_state {
	uint64_t now_ns;		/* the test clock at this pass */
	uint64_t gp_get;		/* the channel's GP_GET at its last progress */
	uint64_t faults;		/* its fault count then */
	uint64_t stall_ns;		/* work pending without progress this long; 0 if none */
	uint64_t hung_reports;		/* HUNG records this GSP posted, every channel */
	uint32_t stalled;		/* 1: work pending, no progress since the above */
	uint32_t fired;			/* 1: this stall was reported HUNG */
};

#endif
