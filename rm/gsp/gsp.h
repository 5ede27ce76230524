/* SPDX-License-Identifier: MIT */
/* rm/gsp - the CPU-RM's end of the GSP: the RPC client and the message queues.
 *
 * The GSP is its own process (vgpu-gsp, module gsp_fw in rm/gsp/fw/): it maps the
 * privileged-state region of the GPU read-write and is the only code that writes it.
 * This module links no device model: it only speaks the wire protocol of
 * include/vgpu/rpc.h, whose queue code (the last section below) both ends share.
 * gsp_start() creates the queue memfd
 * (layout in include/vgpu/rpc.h), starts the program with that memfd and the privileged
 * memfd inherited, and runs two threads: an event worker that hands GSP -> CPU events to
 * the owner's callback (never inside an RPC wait, so a handler may itself make RPCs) and a
 * watchdog that reaps a crashed GSP and resets the device.
 *
 * gsp_call() is thread-safe and takes no lock of the caller's: several RPCs may be in
 * flight per lane, matched by sequence. It spins up to cfg.spin_ns, then blocks. Results:
 *   0 or the GSP's -errno      the RPC ran
 *   -ETIMEDOUT                 its deadline class ran out (a late reply is dropped, counted)
 *   -EAGAIN                    no queue or reply space within cfg.send_wait_ns; nothing sent
 *   -ENOTRECOVERABLE           the GSP is marked for reset (repeated timeouts, a crash,
 *                              a corrupt stream): fail fast until the reset is done
 *   -EIO                       the RPC was cancelled by a device reset
 *   -EMSGSIZE / -EINVAL        reply larger than the buffer / bad arguments
 * Device reset (automatic after cfg.reset_strikes consecutive timeouts or a crash, or by
 * gsp_reset()): cancel in-flight RPCs, kill and restart the GSP on fresh queues, then call
 * cfg.reset_cb on the watchdog thread so the owner replays the hardware state (its RPCs
 * are let through while others still fail fast). */
#ifndef VGPU_RM_GSP_GSP_H
#define VGPU_RM_GSP_GSP_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vgpu/rpc.h>

#include "common/clock.h"

struct gsp;

/* Deadline classes: which deadline an RPC function waits under. */
enum gsp_class {
	GSP_CLASS_FAST,		/* NOP, ECHO, GET_INFO, channel bind, runlists */
	GSP_CLASS_ALLOC,	/* partition and channel programming, scheduler */
	GSP_CLASS_SLOW,		/* VF reset, scrub */
	GSP_CLASS_NR
};

struct gsp_config {
	const char *path;		/* the vgpu-gsp program; NULL: gsp_default_path() */
	int priv_fd;			/* gpu_priv_fd() of the device; -1: no hardware RPCs */
	int kick_fd;			/* gpu_priv_kick_fd(): the GSP writes it after every
					 * privileged write so sleeping engines see it; <= 0: none */
	int status_fd;			/* gpu_status_fd(): the GSP maps it read-only, posts the
					 * device's channel errors and faults as events and runs
					 * the channel watchdog; <= 0: none */
	unsigned int nr_fns;		/* PF + VFs, 1..64 */
	unsigned int nr_lanes;		/* 0: min(nr_fns, 8) */
	unsigned int queue_elems;	/* per queue, power of two >= 16; 0: 64 (256 KiB) */
	unsigned int nr_events;		/* 0: 4096 */
	uint64_t spin_ns;		/* caller spins before blocking; 0: 50 us */
	uint64_t gsp_spin_ns;		/* idle GSP lane threads spin before sleeping; 0: 50 us */
	uint64_t deadline_ns[GSP_CLASS_NR];	/* 0: 2 s, 4 s, 10 s */
	uint64_t slow_ns;		/* logged and counted as slow above this; 0: 66 ms */
	uint64_t send_wait_ns;		/* wait for queue space; 0: 1 s */
	unsigned int reset_strikes;	/* consecutive timeouts before reset; 0: 3 */
	bool no_auto_reset;		/* the watchdog only marks; the owner calls gsp_reset() */
	/* Fair dispatch (gsp_client.c): while several functions are busy, one carrying more
	 * than 1.25 fair shares of the RPC bytes makes its RPCs at nice 19 whenever another
	 * function has one in flight. true turns it off. */
	bool no_fair;
	/* Credits: RPCs one function may have in flight at once; a function out of credits
	 * waits for one of its own to finish while the others go on, so a flooding function
	 * holds at most its share of its lane's slots. 0: the lane's slots shared by the
	 * functions on it (64 * nr_lanes / nr_fns, at least 1). */
	unsigned int fn_credits;
	/* Called on the event worker for every GSP event. */
	void (*event_cb)(void *ctx, const struct vgpu_rpc_event *ev);
	/* Called on the event worker whenever the event queue is empty: at least every 10 ms
	 * while it stays empty, and soon after gsp_events_kick(). For work the owner put off
	 * (it may make RPCs, as event_cb may). */
	void (*idle_cb)(void *ctx);
	/* Called on the resetting thread after a restart; replay hardware state with gsp_call(). */
	int (*reset_cb)(void *ctx, struct gsp *g);
	void *ctx;
};

/* Counters (monotonic since gsp_start). */
struct gsp_stats {
	uint64_t rpcs;			/* completed with a reply */
	uint64_t timeouts;
	uint64_t late_replies;		/* replies whose waiter was gone: dropped by sequence */
	uint64_t slow;			/* replies later than slow_ns */
	uint64_t queue_full;		/* -EAGAIN for lack of space */
	uint64_t bad_msgs;		/* checksum, length, signature or seq gap */
	uint64_t stale_msgs;		/* replayed old elements skipped */
	uint64_t partial_reads;		/* messages seen half published */
	uint64_t events;		/* delivered to event_cb */
	uint64_t events_dropped;	/* the GSP found the event queue full */
	uint64_t events_deferred;	/* device-error records held back by a full queue, sent
					 * folded later */
	uint64_t resets;
	uint64_t last_reset_ns;		/* duration of the last reset, replay included */
	uint64_t hung_class;		/* timeouts with a stale heartbeat ("unresponsive") */
	uint64_t slow_class;		/* timeouts with a fresh heartbeat ("slow") */
	uint64_t fair_waits;		/* RPCs a function over its share made at low priority */
	uint64_t credit_waits;		/* RPCs that waited for their function's credit */
};

/* The program next to the running executable: $VGPU_GSP, <exe dir>/vgpu-gsp or
 * <exe dir>/../../bin/vgpu-gsp (tests); a test-hooks build looks for vgpu-gsp-test, the
 * GSP that serves the test-only RPCs. Static buffer; NULL if none exists. */
const char *gsp_default_path(void);

/* Create the queues, start the GSP and wait until it is ready. 0 or -errno. */
int gsp_start(const struct gsp_config *cfg, struct gsp **out);
/* Stop the GSP and the threads; fails in-flight RPCs. NULL is a no-op. */
void gsp_stop(struct gsp *g);

/* Run RPC @function for function @gfid with @req (@req_len bytes, up to
 * VGPU_RPC_MAX_PAYLOAD); the reply payload goes to @reply (@reply_cap bytes) and its
 * length to *@reply_len (may be NULL). Results above. */
int gsp_call(struct gsp *g, unsigned int gfid, uint32_t function, const void *req,
	     size_t req_len, void *reply, size_t reply_cap, size_t *reply_len);
/* Like gsp_call() with an explicit deadline (0: the function's class). */
int gsp_call_deadline(struct gsp *g, unsigned int gfid, uint32_t function, const void *req,
		      size_t req_len, void *reply, size_t reply_cap, size_t *reply_len,
		      uint64_t deadline_ns);

/* Hand function @fn's VRAM slice memfd (@fd, @size bytes; -1 drops it) to the GSP, which
 * maps it and scrubs it on VGPU_RPC_FN_SCRUB. Ordered before any later RPC. Lost with a
 * GSP restart: the owner sends it again from its reset_cb. 0 or -errno. */
int gsp_slice_send(struct gsp *g, unsigned int fn, int fd, uint64_t size);

/* Wake the event worker for an idle_cb call, without waiting for it. NULL is a no-op. */
void gsp_events_kick(struct gsp *g);

/* Reset the device now (see above). 0 or -errno (the GSP could not be restarted). */
int gsp_reset(struct gsp *g);
/* True while the GSP is marked for reset or resetting. */
bool gsp_needs_reset(const struct gsp *g);
/* Counters. */
void gsp_get_stats(const struct gsp *g, struct gsp_stats *out);
/* RPCs in flight (reserved, sent or being answered) on the lane of function @gfid. */
unsigned int gsp_inflight(const struct gsp *g, unsigned int gfid);
/* RPCs function @gfid has in flight now, the most it ever had at once, and its credits
 * (cfg.fn_credits as applied). */
unsigned int gsp_fn_inflight(const struct gsp *g, unsigned int gfid);
unsigned int gsp_fn_inflight_max(const struct gsp *g, unsigned int gfid);
unsigned int gsp_fn_credits(const struct gsp *g);
/* pid of the running GSP process. */
int gsp_pid(const struct gsp *g);
/* Nanoseconds since the GSP's last heartbeat. */
uint64_t gsp_heartbeat_age_ns(const struct gsp *g);
/* Deadline class of RPC @function. */
enum gsp_class gsp_fn_class(uint32_t function);

/* ---- the client without a GSP, on the caller's thread (harnesses) ----
 * gsp_start_detached() is gsp_start() without the program and the threads: the caller
 * plays the GSP in the queue memory at gsp_queue_mem() (laid out by gsp_layout_compute()
 * of the config's counts, formatted as for a first start). gsp_call() then sends into the
 * command queue and reads, as its lane's drainer, the replies the caller put in the status
 * queue, until its deadline: give it a short one (cfg.deadline_ns too), nothing else will
 * answer. Events reach cfg.event_cb only through gsp_events_poll(). gsp_stop() frees it. */
int gsp_start_detached(const struct gsp_config *cfg, struct gsp **out);
/* The queue memory of @g. */
uint8_t *gsp_queue_mem(struct gsp *g);
/* Hand every pending event record to cfg.event_cb on the caller's thread, then call
 * cfg.idle_cb, as the event worker does. Returns how many records. */
unsigned int gsp_events_poll(struct gsp *g);

/* ---- the message queues: framing and counters both ends share (the GSP firmware,
 * module gsp_fw, is the other end). Not for the CPU-RM's callers. ---- */
#define GSP_PAGE		4096u
#define GSP_EVT_PAGE_BYTES(n)	(((size_t)(n) * sizeof(struct vgpu_rpc_event) + GSP_PAGE - 1) & ~(size_t)(GSP_PAGE - 1))

#define GSP_YIELD_AFTER_NS 200000ull

/* One step of a spin wait begun at @start: a pause at first, then a yield, so that on an
 * oversubscribed machine the peer we wait for, if it was preempted, gets the CPU instead
 * of being spun at for a whole time slice. */
static inline void gsp_spin_step(uint64_t start)
{
	if (cmn_now_ns() - start < GSP_YIELD_AFTER_NS) {
		for (int i = 0; i < 8; i++)
			cmn_cpu_relax();
	} else {
		sched_yield();
	}
}

/* Byte offsets inside the queue memfd. */
struct gsp_layout {
	uint32_t nr_lanes, queue_elems, nr_events;
	size_t lane_off;	/* first lane */
	size_t lane_stride;	/* cpu page, gsp page, command queue, status queue */
	size_t evt_off;
	size_t total;
};

/* Compute the layout; -EINVAL if a count is out of range or not a power of two. */
int gsp_layout_compute(uint32_t nr_lanes, uint32_t queue_elems, uint32_t nr_events,
		       struct gsp_layout *out);

/* One direction of a lane as seen by one side. */
struct gsp_q {
	uint8_t *ring;			/* nr * VGPU_RPC_ELEM_SIZE bytes */
	uint32_t nr;
	_Atomic uint32_t *put;		/* the writer's counter */
	_Atomic uint32_t *get;		/* the reader's counter */
	_Atomic uint32_t *reader_waiting;	/* writer wakes put when set */
	uint32_t seq;			/* transport seq: next to send / next expected */
};

/* Bind queue @dir (0 = command, 1 = status) of lane @lane in @base. */
void gsp_q_bind(struct gsp_q *q, uint8_t *base, const struct gsp_layout *l, unsigned int lane,
		int dir);

/* Elements a message carrying @len payload bytes needs. */
static inline uint32_t gsp_msg_elems(size_t len)
{
	return (uint32_t)((len + VGPU_RPC_MSG_HDR_SIZE + VGPU_RPC_ELEM_SIZE - 1) / VGPU_RPC_ELEM_SIZE);
}

/* Elements a whole RPC of @len payload bytes needs, all chunks. */
uint32_t gsp_rpc_elems(uint64_t len);

/* XOR-64 folded to 32 bits over @len bytes (multiple of 8). */
uint32_t gsp_checksum(const void *buf, size_t len);

/* Free elements for the writer. */
static inline uint32_t gsp_q_free(struct gsp_q *q)
{
	uint32_t used = atomic_load_explicit(q->put, memory_order_relaxed) -
			atomic_load_explicit(q->get, memory_order_acquire);
	return used > q->nr ? 0 : q->nr - used;
}

/* Writer: copy message @msg (header + payload, @bytes) into the ring at put; the caller
 * checked there is room for @elems elements. Publishes @publish elements (normally
 * @elems) with release and wakes a sleeping reader. */
void gsp_q_write(struct gsp_q *q, const void *msg, size_t bytes, uint32_t elems, uint32_t publish);

/* Build a message in @buf (>= header + @len bytes): element and RPC header, payload, seq
 * and checksum. Returns the message's byte size (padded to 8). */
size_t gsp_msg_build(struct gsp_q *q, void *buf, const struct vgpu_rpc_hdr *rh,
		     const void *payload, size_t len);

/* Reader results. */
enum gsp_rx {
	GSP_RX_OK = 0,
	GSP_RX_EMPTY = 1,		/* nothing there */
	GSP_RX_PARTIAL = 2,		/* fewer elements published than the message has */
	GSP_RX_BAD = 3,			/* malformed; consumed and counted */
	GSP_RX_STALE = 4,		/* older transport seq (a replay): consumed */
	GSP_RX_GAP = 5,			/* valid, but seqs were skipped: resynchronised */
	GSP_RX_CORRUPT = 6,		/* the writer's counter is impossible: nothing to resync on */
};

/* Reader: copy the next message into @buf (VGPU_RPC_MAX_ELEMS elements) and validate
 * count, length, checksum, signature and transport seq. Consumes it unless EMPTY or
 * PARTIAL. On a seq gap the expected seq resynchronises past it (returns GAP). */
enum gsp_rx gsp_q_read(struct gsp_q *q, void *buf);
/* Test builds only (librm_gsp-th.a): when set, gsp_q_read() calls it between its copy of
 * a message's header and its copy of the rest, the moment a peer rewriting the shared ring
 * would pick, so that a test plays that peer deterministically. */
extern void (*gsp_q_read_hook)(struct gsp_q *q);

/* Test builds only (librm_gsp-th.a): when set, gsp_call() calls it on the caller's thread
 * once the RPC holds its slot and before anything of it is sent, so that a test can put an
 * event there (a reset, another function's RPC) deterministically. */
extern void (*gsp_send_hook)(struct gsp *g, unsigned int gfid, uint32_t function);

/* Wait while *@addr == @val, at most @timeout_ns (shared futex). */
void gsp_futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t timeout_ns);
/* Wake every waiter on @addr. */
void gsp_futex_wake(_Atomic uint32_t *addr);

#endif
