// SPDX-License-Identifier: MIT
/* Message-queue framing shared by both ends: layout, checksum, element copy with
 * wrap-around, validation of what the peer wrote, futex waits on shared counters. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/compiler.h"
#include "rm/gsp/gsp.h"

static bool is_pow2_u32(uint32_t v)
{
	return v && !(v & (v - 1));
}

int gsp_layout_compute(uint32_t nr_lanes, uint32_t queue_elems, uint32_t nr_events,
		       struct gsp_layout *out)
{
	if (!nr_lanes || nr_lanes > VGPU_RPC_MAX_LANES || !is_pow2_u32(queue_elems) ||
	    queue_elems < VGPU_RPC_MIN_QUEUE || queue_elems > VGPU_RPC_MAX_QUEUE ||
	    !is_pow2_u32(nr_events) || nr_events < 16 || nr_events > (1u << 20))
		return -EINVAL;
	out->nr_lanes = nr_lanes;
	out->queue_elems = queue_elems;
	out->nr_events = nr_events;
	out->lane_off = 3 * GSP_PAGE;
	out->lane_stride = 2 * GSP_PAGE + 2 * (size_t)queue_elems * VGPU_RPC_ELEM_SIZE;
	out->evt_off = out->lane_off + nr_lanes * out->lane_stride;
	out->total = out->evt_off + GSP_EVT_PAGE_BYTES(nr_events);
	return 0;
}

void gsp_q_bind(struct gsp_q *q, uint8_t *base, const struct gsp_layout *l, unsigned int lane,
		int dir)
{
	uint8_t *lp = base + l->lane_off + lane * l->lane_stride;
	struct vgpu_rpcq_lane_cpu *cpu = (void *)lp;
	struct vgpu_rpcq_lane_gsp *gsp = (void *)(lp + GSP_PAGE);

	q->nr = l->queue_elems;
	q->seq = 0;
	if (dir == 0) {		/* command: the CPU writes, the GSP reads */
		q->ring = lp + 2 * GSP_PAGE;
		q->put = (_Atomic uint32_t *)&cpu->cmd_put;
		q->get = (_Atomic uint32_t *)&gsp->cmd_get;
		q->reader_waiting = (_Atomic uint32_t *)&gsp->gsp_waiting;
	} else {		/* status: the GSP writes, the CPU reads */
		q->ring = lp + 2 * GSP_PAGE + (size_t)l->queue_elems * VGPU_RPC_ELEM_SIZE;
		q->put = (_Atomic uint32_t *)&gsp->stat_put;
		q->get = (_Atomic uint32_t *)&cpu->stat_get;
		q->reader_waiting = (_Atomic uint32_t *)&cpu->cpu_waiting;
	}
}

uint32_t gsp_rpc_elems(uint64_t len)
{
	uint64_t full = len / VGPU_RPC_MSG_MAX_PAYLOAD, rest = len % VGPU_RPC_MSG_MAX_PAYLOAD;
	uint64_t n = full * VGPU_RPC_MAX_ELEMS + (rest || !full ? gsp_msg_elems(rest) : 0);

	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint32_t gsp_checksum(const void *buf, size_t len)
{
	const uint64_t *w = buf;
	uint64_t x = 0;

	for (size_t i = 0; i < len / 8; i++)
		x ^= w[i];
	return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* Copy @bytes between a flat buffer and the ring, from byte @skip (< one element) of the
 * message at element @idx on, wrapping once. */
static void ring_copy(struct gsp_q *q, uint32_t idx, size_t skip, void *flat, size_t bytes,
		      bool to_ring)
{
	size_t ring_bytes = (size_t)q->nr * VGPU_RPC_ELEM_SIZE;
	size_t off = (size_t)(idx & (q->nr - 1)) * VGPU_RPC_ELEM_SIZE + skip;
	size_t first = cmn_min(bytes, ring_bytes - off);

	if (to_ring) {
		memcpy(q->ring + off, flat, first);
		memcpy(q->ring, (uint8_t *)flat + first, bytes - first);
	} else {
		memcpy(flat, q->ring + off, first);
		memcpy((uint8_t *)flat + first, q->ring, bytes - first);
	}
}

size_t gsp_msg_build(struct gsp_q *q, void *buf, const struct vgpu_rpc_hdr *rh,
		     const void *payload, size_t len)
{
	struct vgpu_rpc_elem *e = buf;
	size_t bytes = (VGPU_RPC_MSG_HDR_SIZE + len + 7) & ~(size_t)7;

	memset(buf, 0, VGPU_RPC_MSG_HDR_SIZE);
	memcpy((uint8_t *)buf + sizeof(*e), rh, sizeof(*rh));
	((struct vgpu_rpc_hdr *)((uint8_t *)buf + sizeof(*e)))->length = (uint32_t)len;
	if (len)
		memcpy((uint8_t *)buf + VGPU_RPC_MSG_HDR_SIZE, payload, len);
	memset((uint8_t *)buf + VGPU_RPC_MSG_HDR_SIZE + len, 0, bytes - VGPU_RPC_MSG_HDR_SIZE - len);
	e->elem_count = gsp_msg_elems(len);
	e->seq = q->seq++;
	e->checksum = gsp_checksum(buf, bytes);
	return bytes;
}

void gsp_q_write(struct gsp_q *q, const void *msg, size_t bytes, uint32_t elems, uint32_t publish)
{
	uint32_t put = atomic_load_explicit(q->put, memory_order_relaxed);

	ring_copy(q, put, 0, (void *)msg, bytes, true);
	(void)elems;
	/* Elements first, then put with release: the reader loads put with acquire and only
	 * then copies, so it never sees a half-written message it was told is there. */
	atomic_store_explicit(q->put, put + publish, memory_order_seq_cst);
	/* seq_cst store then load, as the reader stores reader_waiting then loads put: one
	 * of the two sides sees the other's store, so no wakeup is lost. */
	if (atomic_load_explicit(q->reader_waiting, memory_order_seq_cst))
		gsp_futex_wake(q->put);
}

#ifdef VGPU_TEST_HOOKS
void (*gsp_q_read_hook)(struct gsp_q *q);	/* gsp.h: a test's peer rewriting the ring */
#endif

enum gsp_rx gsp_q_read(struct gsp_q *q, void *buf)
{
	uint32_t get = atomic_load_explicit(q->get, memory_order_relaxed);
	uint32_t avail = atomic_load_explicit(q->put, memory_order_acquire) - get;
	struct vgpu_rpc_elem *e = buf;
	struct vgpu_rpc_hdr *rh = (void *)((uint8_t *)buf + sizeof(*e));
	uint32_t count, sum;
	size_t bytes;
	int32_t gap;

	if (!avail)
		return GSP_RX_EMPTY;
	if (avail > q->nr)		/* the peer's counter is garbage: skip nothing, fail */
		return GSP_RX_CORRUPT;
	/* The header is copied once and every value of it used is one checked on that copy:
	 * the peer may rewrite the ring at any time, and a second look at the header could
	 * see a message longer than the buffer or than was published. */
	ring_copy(q, get, 0, buf, VGPU_RPC_MSG_HDR_SIZE, false);
	count = e->elem_count;
	if (!count || count > VGPU_RPC_MAX_ELEMS)
		goto bad_one;
	if (avail < count)
		return GSP_RX_PARTIAL;
	if (rh->length > (size_t)count * VGPU_RPC_ELEM_SIZE - VGPU_RPC_MSG_HDR_SIZE ||
	    gsp_msg_elems(rh->length) != count || rh->signature != VGPU_RPC_SIGNATURE ||
	    rh->version != VGPU_RPC_HDR_VERSION)
		goto bad;
	bytes = (VGPU_RPC_MSG_HDR_SIZE + rh->length + 7) & ~(size_t)7;
#ifdef VGPU_TEST_HOOKS
	if (gsp_q_read_hook)
		gsp_q_read_hook(q);
#endif
	/* Then the payload alone, next to the checked header. Only the copy is checked and
	 * used: the peer may still be scribbling on the ring. */
	ring_copy(q, get, VGPU_RPC_MSG_HDR_SIZE, (uint8_t *)buf + VGPU_RPC_MSG_HDR_SIZE,
		  bytes - VGPU_RPC_MSG_HDR_SIZE, false);
	sum = e->checksum;
	e->checksum = 0;
	if (gsp_checksum(buf, bytes) != sum)
		goto bad;
	gap = (int32_t)(e->seq - q->seq);
	atomic_store_explicit(q->get, get + count, memory_order_release);
	if (gap < 0)
		return GSP_RX_STALE;
	q->seq = e->seq + 1;
	/* A gap means messages were lost (or the seq was hit): resynchronise and say so, but
	 * the message itself passed its checksum and is delivered. */
	return gap ? GSP_RX_GAP : GSP_RX_OK;
bad_one:
	count = 1;
bad:
	/* A malformed message may be followed by good ones: skip what it claims (bounded by
	 * what is published), the next read resynchronises on the transport seq. */
	count = cmn_min(cmn_max(count, 1u), avail);
	atomic_store_explicit(q->get, get + count, memory_order_release);
	return GSP_RX_BAD;
}

void gsp_futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(timeout_ns / 1000000000ull),
		.tv_nsec = (long)(timeout_ns % 1000000000ull),
	};

	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

void gsp_futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
