// SPDX-License-Identifier: MIT
/* fuzz_gspq: the GSP message queue framing (rm/gsp/msgq.c, gsp_q_read()) in both
 * directions: as the GSP reads the RM's command queue and as the RM reads the GSP's status
 * queue. Either peer may be broken (a crashed or corrupt GSP, a stray write): the ring, put,
 * get and the reader's expected seq all come from the input.
 *   byte 0: bit 0 the direction (0 command, 1 status); bit 1 fix up the checksum of the
 *           message at get before each read, so the checks behind it are reached;
 *   bytes 1..12: put, get, expected seq (little endian); the rest: the ring (zero-filled).
 * Checks: the reader never reads or writes outside the ring or its buffer, consumes at most
 * what is published, and what it delivers is whole and self-consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rm/gsp/gsp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ELEMS	VGPU_RPC_MIN_QUEUE

static uint32_t fz_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Recompute the checksum of the message at get, as an honest writer would have. */
static void fz_fix_checksum(struct gsp_q *q, uint8_t *flat)
{
	uint32_t get = atomic_load(q->get), idx = get & (q->nr - 1);
	size_t ring = (size_t)q->nr * VGPU_RPC_ELEM_SIZE, off = (size_t)idx * VGPU_RPC_ELEM_SIZE;
	struct vgpu_rpc_elem *e = (void *)(q->ring + off);
	const struct vgpu_rpc_hdr *rh = (const void *)(e + 1);
	size_t bytes, first;

	if (!e->elem_count || e->elem_count > VGPU_RPC_MAX_ELEMS ||
	    rh->length > (size_t)e->elem_count * VGPU_RPC_ELEM_SIZE - VGPU_RPC_MSG_HDR_SIZE)
		return;
	bytes = (VGPU_RPC_MSG_HDR_SIZE + rh->length + 7) & ~(size_t)7;
	first = bytes < ring - off ? bytes : ring - off;
	memcpy(flat, q->ring + off, first);
	memcpy(flat + first, q->ring, bytes - first);
	((struct vgpu_rpc_elem *)flat)->checksum = 0;
	e->checksum = gsp_checksum(flat, bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gsp_layout l;
	struct gsp_q q;
	uint8_t *mem, *buf;

	if (size < 13 || gsp_layout_compute(1, FZ_ELEMS, 16, &l))
		return 0;
	mem = calloc(1, l.total);
	/* Exactly one message's worth, so ASan sees a copy past the largest message. */
	buf = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
	if (!mem || !buf)
		goto out;
	gsp_q_bind(&q, mem, &l, 0, data[0] & 1);
	atomic_store(q.put, fz_u32(data + 1));
	atomic_store(q.get, fz_u32(data + 5));
	q.seq = fz_u32(data + 9);
	memcpy(q.ring, data + 13, size - 13 < (size_t)FZ_ELEMS * VGPU_RPC_ELEM_SIZE ?
	       size - 13 : (size_t)FZ_ELEMS * VGPU_RPC_ELEM_SIZE);
	for (unsigned int i = 0; i < 2 * FZ_ELEMS; i++) {
		uint32_t get = atomic_load(q.get), avail = atomic_load(q.put) - get;
		const struct vgpu_rpc_elem *e = (const void *)buf;
		const struct vgpu_rpc_hdr *rh = (const void *)(e + 1);
		enum gsp_rx rx;

		if (data[0] & 2)
			fz_fix_checksum(&q, buf);
		rx = gsp_q_read(&q, buf);
		if (rx == GSP_RX_EMPTY || rx == GSP_RX_PARTIAL || rx == GSP_RX_CORRUPT) {
			if (atomic_load(q.get) != get)
				abort();	/* consumed while reporting nothing consumed */
			break;
		}
		if (atomic_load(q.get) - get > avail || atomic_load(q.get) == get)
			abort();	/* consumed more than published, or nothing */
		if ((rx == GSP_RX_OK || rx == GSP_RX_GAP) &&
		    (rh->signature != VGPU_RPC_SIGNATURE || gsp_msg_elems(rh->length) != e->elem_count ||
		     atomic_load(q.get) - get != e->elem_count))
			abort();	/* delivered a message that is not whole */
	}
out:
	free(buf);
	free(mem);
	return 0;
}
