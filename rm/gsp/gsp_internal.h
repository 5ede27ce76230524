/* rm/gsp internals shared by the CPU-RM side (gsp_client.c) and the GSP program
 * (gsp_server.c): the layout of the queue memfd, message framing, futex waits. */
#ifndef VGPU_RM_GSP_INTERNAL_H
#define VGPU_RM_GSP_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vgpu/rpc.h>

#include <sched.h>

#include "common/clock.h"

#define GSP_PAGE		4096u
#define GSP_EVT_PAGE_BYTES(n)	(((size_t)(n) * sizeof(struct vgpu_rpc_event) + GSP_PAGE - 1) & ~(size_t)(GSP_PAGE - 1))

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

/* Wait while *@addr == @val, at most @timeout_ns (shared futex). */
void gsp_futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t timeout_ns);
/* Wake every waiter on @addr. */
void gsp_futex_wake(_Atomic uint32_t *addr);

#endif
