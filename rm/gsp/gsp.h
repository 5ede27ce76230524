/* rm/gsp - the emulated GSP and the CPU-RM's end of its message queues.
 *
 * The GSP is its own process (vgpu-gsp): it maps the privileged-state region of the GPU
 * read-write and is the only code that writes it. gsp_start() creates the queue memfd
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vgpu/rpc.h>

struct gsp;

/* Deadline classes: which deadline an RPC function waits under. */
enum gsp_class {
	GSP_CLASS_FAST,		/* NOP, ECHO, GET_INFO, INJECT, channel bind, runlists */
	GSP_CLASS_ALLOC,	/* partition and channel programming, scheduler */
	GSP_CLASS_SLOW,		/* VF reset, scrub, large payloads */
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
	/* Called on the event worker for every GSP event. */
	void (*event_cb)(void *ctx, const struct vgpu_rpc_event *ev);
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
};

/* The program next to the running executable: $VGPU_GSP, <exe dir>/vgpu-gsp or
 * <exe dir>/../../bin/vgpu-gsp (tests). Static buffer; NULL if none exists. */
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

/* Reset the device now (see above). 0 or -errno (the GSP could not be restarted). */
int gsp_reset(struct gsp *g);
/* True while the GSP is marked for reset or resetting. */
bool gsp_needs_reset(const struct gsp *g);
/* Counters. */
void gsp_get_stats(const struct gsp *g, struct gsp_stats *out);
/* RPCs in flight (reserved, sent or being answered) on the lane of function @gfid. */
unsigned int gsp_inflight(const struct gsp *g, unsigned int gfid);
/* pid of the running GSP process. */
int gsp_pid(const struct gsp *g);
/* Nanoseconds since the GSP's last heartbeat. */
uint64_t gsp_heartbeat_age_ns(const struct gsp *g);
/* Deadline class of RPC @function. */
enum gsp_class gsp_fn_class(uint32_t function);

/* ---- the GSP program's side (vgpu-gsp; also usable in-process for debugging) ---- */
/* Serve the queues in memfd @qfd and program privileged region @priv_fd (-1: none),
 * kicking the device's eventfd @kick_fd (-1: none) after each write; watch the device's
 * status region @status_fd (-1: none) for errors, faults and hung channels; until the
 * parent @ppid dies or the process is killed. Returns an exit status. */
int gsp_server_run(int qfd, int priv_fd, int kick_fd, int status_fd, int fd_sock, int ppid);

#endif
