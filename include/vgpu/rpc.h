/* SPDX-License-Identifier: MIT */
/* vgpu/rpc.h - ABI: the CPU-RM <-> GSP message queues in shared memory, and the RPCs.
 *
 * One memfd holds everything (offsets are page multiples, see struct vgpu_rpcq_layout):
 *   page 0          global header, written by the CPU-RM before the GSP starts
 *   page 1          GSP page: heartbeat, ready word, event-queue put, GSP counters
 *   page 2          CPU page: event-queue get, "CPU sleeps on events" word
 *   per lane L      CPU lane page | GSP lane page | command queue | status queue
 *   event queue     nr_events records of 64 bytes
 * Every page has exactly one writer: a reader publishes how far it has read in its own
 * page (the command queue's get lives in the GSP lane page, the status queue's get in the
 * CPU lane page), so no cache line bounces between writers.
 *
 * A lane is one command queue and one status queue served by one GSP thread; a function
 * (PF 0, VFs 1..n) uses lane fn % nr_lanes, so a slow RPC of one VF never sits in front of
 * another VF's. Several RPCs may be in flight per lane; replies are matched by sequence.
 *
 * A message is 1..VGPU_RPC_MAX_ELEMS contiguous 4 KiB elements (wrapping around the ring),
 * starting with struct vgpu_rpc_elem then struct vgpu_rpc_hdr, then the payload. An RPC
 * whose payload is larger than one message goes out as a first message with the real
 * function and then VGPU_RPC_FN_CONTINUATION messages, back to back on the same lane, all
 * with the same RPC sequence; replies are split the same way. Counters are free-running
 * 32-bit element counts; a queue holds nr_elems (power of two) elements. */
#ifndef VGPU_ABI_RPC_H
#define VGPU_ABI_RPC_H

#include <stdint.h>

#include <vgpu/version.h>

#define VGPU_RPCQ_MAGIC		0x51435052475056ull	/* "VGRPCQ" */
#define VGPU_RPC_ELEM_SIZE	4096u
#define VGPU_RPC_MAX_ELEMS	16u		/* per message: 64 KiB */
#define VGPU_RPC_MAX_LANES	16u
#define VGPU_RPC_MIN_QUEUE	16u		/* elements: one largest message must fit */
#define VGPU_RPC_MAX_QUEUE	1024u
#define VGPU_RPC_MAX_PAYLOAD	(16u << 20)	/* one RPC, all continuation records */
#define VGPU_RPC_SIGNATURE	0x43505256u	/* "VRPC" */
#define VGPU_RPC_HDR_VERSION	0x01000000u

/* Element header: starts every message. checksum: XOR of the message's 64-bit words from
 * the start of this header to the end of the payload (padded with zeroes to 8 bytes),
 * computed with checksum = 0 and folded to 32 bits (hi ^ lo). seq: the transport sequence
 * of this queue direction, +1 per message. */
struct vgpu_rpc_elem {
	uint32_t checksum;
	uint32_t elem_count;	/* elements in this message, 1..VGPU_RPC_MAX_ELEMS */
	uint32_t seq;
	uint32_t reserved;
};

/* RPC header: follows the element header. */
struct vgpu_rpc_hdr {
	uint32_t version;	/* VGPU_RPC_HDR_VERSION */
	uint32_t signature;	/* VGPU_RPC_SIGNATURE */
	uint32_t length;	/* payload bytes in this message */
	uint32_t function;	/* enum vgpu_rpc_fn; CONTINUATION for the later chunks */
	int32_t result;		/* replies: 0 or -errno; requests: VGPU_RPC_PENDING */
	uint32_t sequence;	/* RPC sequence: the same for every chunk of one RPC */
	uint32_t gfid;		/* function the RPC is made for (0 = PF) */
	uint32_t chunk;		/* 0 for the first message, then 1, 2, ... */
	uint64_t total_length;	/* payload bytes of the whole RPC (all chunks) */
	uint64_t reserved;
};

#define VGPU_RPC_PENDING	((int32_t)0x7fffffff)
#define VGPU_RPC_MSG_HDR_SIZE	64u
#define VGPU_RPC_MSG_MAX_PAYLOAD (VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE - VGPU_RPC_MSG_HDR_SIZE)
#define VGPU_RPC_ELEM_PAYLOAD	(VGPU_RPC_ELEM_SIZE - VGPU_RPC_MSG_HDR_SIZE)

_Static_assert(sizeof(struct vgpu_rpc_elem) + sizeof(struct vgpu_rpc_hdr) <= VGPU_RPC_MSG_HDR_SIZE,
	       "message header is ABI");

/* ---- shared pages ---- */
struct vgpu_rpcq_global {		/* page 0, CPU-written at setup */
	uint64_t magic;			/* VGPU_RPCQ_MAGIC */
	uint32_t abi_version;		/* VGPU_ABI_VERSION */
	uint32_t nr_lanes;		/* 1..VGPU_RPC_MAX_LANES */
	uint32_t queue_elems;		/* elements per command / status queue, power of two */
	uint32_t nr_events;		/* event records, power of two */
	uint32_t nr_fns;		/* functions of the device (PF + VFs) */
	uint32_t wipe_hw;		/* a device reset: the GSP clears the hardware state
					 * at start, the CPU-RM replays it from its records */
	uint64_t total_size;		/* bytes of the memfd */
	uint64_t epoch;			/* bumped at every GSP (re)start */
	uint64_t gsp_spin_ns;		/* idle lane threads spin this long, then sleep */
};

struct vgpu_rpcq_gsp_page {		/* page 1, GSP-written */
	uint64_t ready;			/* the epoch the GSP has attached to; 0 before */
	uint64_t heartbeat_ns;		/* CLOCK_MONOTONIC of the GSP's last beat */
	uint64_t pid;
	uint64_t evt_deferred;		/* device-error records held back by a full queue
					 * (posted at a later poll, folded; never lost) */
	uint8_t pad0[32];
	uint32_t evt_put;		/* event records written (futex word) */
	uint32_t evt_waiting;		/* GSP sleeps for event space */
	uint8_t pad1[56];
	uint64_t evt_dropped;		/* events lost to a full event queue */
	uint64_t rpcs;			/* RPCs handled */
	uint64_t bad_msgs;		/* command messages refused (checksum, seq, length) */
};

struct vgpu_rpcq_cpu_page {		/* page 2, CPU-written */
	uint32_t evt_get;		/* event records consumed (futex word for the GSP) */
	uint32_t evt_waiting;		/* the CPU sleeps on evt_put */
};

struct vgpu_rpcq_lane_cpu {		/* CPU lane page */
	uint32_t cmd_put;		/* command elements written (futex word for the GSP) */
	uint32_t cpu_waiting;		/* a CPU thread sleeps on the status put */
	uint8_t pad0[56];
	uint32_t stat_get;		/* status elements consumed */
};

struct vgpu_rpcq_lane_gsp {		/* GSP lane page */
	uint32_t stat_put;		/* status elements written (futex word for the CPU) */
	uint32_t gsp_waiting;		/* the GSP lane thread sleeps on cmd_put */
	uint8_t pad0[56];
	uint32_t cmd_get;		/* command elements consumed */
};

/* ---- events: GSP -> CPU notifications, one 64-byte record each ----
 * The GSP services the device's errors (it reads the device model's status region, see
 * gpu_model/gpu.h) and posts, for function gfid:
 *   INIT_DONE   data[0] epoch
 *   CHAN_ERROR  data[0] chid, [1] enum vgpu_chan_error, [2] GP_GET at the error,
 *               [3] errors folded into this record (>= 1: several between two polls)
 *   MMU_FAULT   data[0] chid, [1] enum vgpu_fault_reason, [2] faulting VA, [3] faults folded
 *               (>= 1), [4] 0; a FAULT_REPLAY RPC's record has [4] = VGPU_RPC_FAULT_REPLAYED
 *   WATCHDOG    data[0] chid, [1] enum vgpu_rpc_wd_reason, [2] GP_GET,
 *               [3] nanoseconds without progress (HUNG) or 0, [4] the allocation (HUNG:
 *               the channel's gen in the privileged table, gpu_model/gpu.h) or 0
 * Records are folded per channel and poll, so a storm of errors costs at most one record
 * per channel per poll. A device-error record that finds the queue full is not dropped: it
 * stays in the device's counters and goes out, folded, at a later poll (evt_deferred
 * counts these); other records wait 10 ms for space, then are dropped (evt_dropped). */
enum vgpu_rpc_event_type {
	VGPU_RPC_EVT_NONE = 0,
	VGPU_RPC_EVT_INIT_DONE = 0x1001,
	VGPU_RPC_EVT_MMU_FAULT = 0x1005,
	VGPU_RPC_EVT_CHAN_ERROR = 0x1004,	/* robust-channel error */
	VGPU_RPC_EVT_WATCHDOG = 0x1022,		/* GSP watchdog / recovery action */
	VGPU_RPC_EVT_TEST = 0x10ff,		/* only from a test-hooks GSP (event storms);
						 * a CPU-RM ignores it */
};

#define VGPU_RPC_FAULT_REPLAYED	1u

/* Why the watchdog fired. */
enum vgpu_rpc_wd_reason {
	/* An enabled, resident channel with work pending (GP_GET != GP_PUT) whose GP_GET did
	 * not move for its function's watchdog timeout: the CPU-RM recovers it (disable,
	 * quiesce, stop it with an error the guest sees). Posted once per stall. */
	VGPU_RPC_WD_HUNG = 1,
	/* The engine had to take a channel off because it did not yield within the
	 * preemption timeout (the device already stopped it: VGPU_CHAN_ERR_PREEMPT_TIMEOUT). */
	VGPU_RPC_WD_PREEMPT_TIMEOUT = 2,
};

struct vgpu_rpc_event {
	uint32_t type;			/* enum vgpu_rpc_event_type */
	uint32_t gfid;
	uint64_t seq;			/* per GSP start, +1 per event */
	uint64_t timestamp_ns;
	uint64_t data[5];
};
_Static_assert(sizeof(struct vgpu_rpc_event) == 64, "event record is ABI");

/* ---- RPC functions (numbers follow NVIDIA's where one exists) ---- */
enum vgpu_rpc_fn {
	VGPU_RPC_FN_NOP = 0,			/* empty reply */
	VGPU_RPC_FN_ECHO = 1,			/* reply = request payload */
	VGPU_RPC_FN_GET_INFO = 3,		/* -> struct vgpu_rpc_info */
	VGPU_RPC_FN_CONTINUATION = 71,
	VGPU_RPC_FN_PARTITION_SET = 200,	/* struct vgpu_rpc_partition */
	VGPU_RPC_FN_PARTITION_CLEAR = 201,	/* struct vgpu_rpc_fnarg */
	VGPU_RPC_FN_CHAN_ALLOC = 202,		/* struct vgpu_rpc_chan */
	VGPU_RPC_FN_CHAN_BIND = 203,		/* struct vgpu_rpc_chan_enable */
	VGPU_RPC_FN_CHAN_FREE = 204,		/* struct vgpu_rpc_chan */
	VGPU_RPC_FN_VASPACE_BIND = 205,		/* struct vgpu_rpc_chan (pdb; channel disabled) */
	VGPU_RPC_FN_RUNLIST_SET = 206,		/* struct vgpu_rpc_runlist */
	VGPU_RPC_FN_SCHED_SET = 207,		/* struct vgpu_rpc_sched */
	VGPU_RPC_FN_SCHED_FN_SET = 208,		/* struct vgpu_rpc_sched_fn */
	VGPU_RPC_FN_VF_RESET = 209,		/* struct vgpu_rpc_fnarg: channels freed, runlists empty */
	VGPU_RPC_FN_SCRUB = 210,		/* struct vgpu_rpc_scrub; -EOPNOTSUPP without a slice */
	VGPU_RPC_FN_FAULT_REPLAY = 211,		/* struct vgpu_rpc_fnarg */
	/* 212 and 250: test-only RPCs (rm/gsp/gsp_test_rpc.h), unknown to a release GSP */
	VGPU_RPC_FN_WATCHDOG_SET = 213,		/* struct vgpu_rpc_watchdog */
	VGPU_RPC_FN_MAX
};

struct vgpu_rpc_fnarg {
	uint32_t fn;
	uint32_t reserved;
};

struct vgpu_rpc_partition {
	uint32_t fn;
	uint32_t reserved;
	uint64_t base, size;		/* device VRAM, 2 MiB aligned */
};

struct vgpu_rpc_chan {
	uint32_t fn, chid;
	uint64_t flags;			/* GPU_CHAN_REPLAYABLE, GPU_CHAN_RESTORE */
	uint64_t runlist, pdb, gpfifo_va, gpfifo_entries, userd_aper, userd_addr;
};

struct vgpu_rpc_chan_enable {
	uint32_t fn, chid;
	uint32_t enable, reserved;
};

struct vgpu_rpc_runlist {
	uint32_t fn, runlist;
	uint64_t chans;			/* bitmap of resident chids */
};

struct vgpu_rpc_sched {
	uint32_t policy, reserved;
	uint64_t quantum_ns, period_ns;
};

struct vgpu_rpc_sched_fn {
	uint32_t fn, reserved;
	uint64_t enabled, quantum_ns, preempt_timeout_ns, weight;
};

/* The watchdog timeout of function @fn: a channel with pending work whose GP_GET does not
 * move for @timeout_ns is reported (VGPU_RPC_WD_HUNG). 0: the default (5 s); at least
 * 10 ms (-EINVAL below). */
struct vgpu_rpc_watchdog {
	uint32_t fn, reserved;
	uint64_t timeout_ns;
};
#define VGPU_RPC_WD_DEFAULT_NS	5000000000ull
#define VGPU_RPC_WD_MIN_NS	10000000ull

struct vgpu_rpc_scrub {
	uint32_t fn, reserved;
	uint64_t offset, size;		/* inside the function's slice */
};

struct vgpu_rpc_info {
	uint32_t abi_version, nr_fns;
	uint64_t pid, epoch, vram_size, rpcs, bad_msgs;
	uint64_t scrubs;		/* SCRUB RPCs done on a mapped slice */
	uint64_t slices;		/* functions whose VRAM slice the GSP holds */
};

/* VRAM slices reach the GSP over the fd socket (fd 6 of vgpu-gsp): one SOCK_SEQPACKET
 * message of this struct with the slice memfd attached (SCM_RIGHTS). fd -1 (no
 * attachment) drops the function's slice. */
struct vgpu_rpc_slice_msg {
	uint32_t fn, reserved;
	uint64_t size;
};

#endif
