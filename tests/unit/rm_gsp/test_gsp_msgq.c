// SPDX-License-Identifier: MIT
/* The message-queue code both ends of the GSP share, on its own (rm_gsp links no device
 * model and needs no GSP for this): layout limits, and what a reader makes of every kind of
 * message a writer can leave — whole, wrapped around the ring, half published, damaged,
 * replayed, after lost messages, or behind an impossible counter. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "rm/gsp/gsp.h"

/* ---- layout ---- */
static const struct layout_case {
	const char *name;
	uint32_t lanes, elems, events;
	int want;
} layout_cases[] = {
	{ "smallest", 1, VGPU_RPC_MIN_QUEUE, 16, 0 },
	{ "largest", VGPU_RPC_MAX_LANES, VGPU_RPC_MAX_QUEUE, 1u << 20, 0 },
	{ "no lanes", 0, 64, 4096, -EINVAL },
	{ "too many lanes", VGPU_RPC_MAX_LANES + 1, 64, 4096, -EINVAL },
	{ "queue not a power of two", 1, 48, 4096, -EINVAL },
	{ "queue below one message", 1, VGPU_RPC_MIN_QUEUE / 2, 4096, -EINVAL },
	{ "queue too large", 1, VGPU_RPC_MAX_QUEUE * 2, 4096, -EINVAL },
	{ "events not a power of two", 1, 64, 1000, -EINVAL },
	{ "too few events", 1, 64, 8, -EINVAL },
};

static void test_layout(void **state)
{
	const struct layout_case *c = *state;
	struct gsp_layout l;

	assert_int_equal(gsp_layout_compute(c->lanes, c->elems, c->events, &l), c->want);
	if (c->want)
		return;
	/* Every part page aligned and inside the memfd, lanes back to back. */
	assert_int_equal(l.lane_off % GSP_PAGE, 0);
	assert_int_equal(l.lane_stride % GSP_PAGE, 0);
	assert_int_equal(l.evt_off, l.lane_off + c->lanes * l.lane_stride);
	assert_true(l.total >= l.evt_off + (size_t)c->events * sizeof(struct vgpu_rpc_event));
}

/* ---- one queue, a writer's and a reader's view of it ---- */
struct qpair {
	struct gsp_layout l;
	uint8_t *mem;
	struct gsp_q w, r;
	uint8_t msg[VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE];
	uint8_t in[VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE];
};

static struct qpair *qpair_new(void)
{
	struct qpair *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	assert_int_equal(gsp_layout_compute(1, VGPU_RPC_MIN_QUEUE, 16, &p->l), 0);
	p->mem = aligned_alloc(GSP_PAGE, p->l.total);
	assert_non_null(p->mem);
	memset(p->mem, 0, p->l.total);
	gsp_q_bind(&p->w, p->mem, &p->l, 0, 0);
	gsp_q_bind(&p->r, p->mem, &p->l, 0, 0);
	return p;
}

static void qpair_free(struct qpair *p)
{
	free(p->mem);
	free(p);
}

/* Build a message of @len pattern bytes in p->msg; its byte size. */
static size_t build(struct qpair *p, size_t len, uint32_t seq)
{
	uint8_t payload[3 * VGPU_RPC_ELEM_SIZE];
	struct vgpu_rpc_hdr rh = { .version = VGPU_RPC_HDR_VERSION,
		.signature = VGPU_RPC_SIGNATURE, .function = VGPU_RPC_FN_ECHO,
		.result = VGPU_RPC_PENDING, .sequence = seq, .total_length = len };

	for (size_t i = 0; i < len; i++)
		payload[i] = (uint8_t)(seq + i * 7);
	return gsp_msg_build(&p->w, p->msg, &rh, payload, len);
}

/* What the writer does before the reader reads once. */
enum act {
	ACT_NONE,		/* nothing written */
	ACT_WHOLE,		/* one message */
	ACT_WRAP,		/* one message across the end of the ring */
	ACT_HALF,		/* half its elements published */
	ACT_FLIP,		/* a payload bit flipped after the checksum */
	ACT_REPLAY,		/* a message read once, then published again */
	ACT_GAP,		/* two messages built, only the second sent */
	ACT_COUNTER,		/* put moved past anything the queue can hold */
};

static const struct rx_case {
	const char *name;
	enum act act;
	size_t len;
	enum gsp_rx want;
	uint32_t consumed;	/* elements the read took */
} rx_cases[] = {
	{ "empty queue", ACT_NONE, 0, GSP_RX_EMPTY, 0 },
	{ "header only", ACT_WHOLE, 0, GSP_RX_OK, 1 },
	{ "one element", ACT_WHOLE, VGPU_RPC_ELEM_PAYLOAD, GSP_RX_OK, 1 },
	{ "three elements", ACT_WHOLE, 2 * VGPU_RPC_ELEM_SIZE + 1, GSP_RX_OK, 3 },
	{ "wrapped around the ring", ACT_WRAP, 2 * VGPU_RPC_ELEM_SIZE + 1, GSP_RX_OK, 3 },
	{ "half published", ACT_HALF, 2 * VGPU_RPC_ELEM_SIZE + 1, GSP_RX_PARTIAL, 0 },
	{ "payload bit flipped", ACT_FLIP, 256, GSP_RX_BAD, 1 },
	{ "replayed", ACT_REPLAY, 256, GSP_RX_STALE, 1 },
	{ "after lost messages", ACT_GAP, 256, GSP_RX_GAP, 1 },
	{ "impossible counter", ACT_COUNTER, 256, GSP_RX_CORRUPT, 0 },
};

static void test_rx(void **state)
{
	const struct rx_case *c = *state;
	struct qpair *p = qpair_new();
	uint32_t elems = gsp_msg_elems(c->len), get0;
	size_t bytes = 0;

	switch (c->act) {
	case ACT_NONE:
		break;
	case ACT_WRAP:
		/* Both counters two elements short of the ring's end. */
		atomic_store(p->w.put, p->w.nr - 2);
		atomic_store(p->w.get, p->w.nr - 2);
		/* fall through */
	case ACT_WHOLE:
	case ACT_FLIP:
		bytes = build(p, c->len, 1);
		if (c->act == ACT_FLIP)
			p->msg[bytes - 1] ^= 0x10;
		gsp_q_write(&p->w, p->msg, bytes, elems, elems);
		break;
	case ACT_HALF:
		bytes = build(p, c->len, 1);
		gsp_q_write(&p->w, p->msg, bytes, elems, elems / 2);
		break;
	case ACT_REPLAY:
		bytes = build(p, c->len, 1);
		gsp_q_write(&p->w, p->msg, bytes, elems, elems);
		assert_int_equal(gsp_q_read(&p->r, p->in), GSP_RX_OK);
		gsp_q_write(&p->w, p->msg, bytes, elems, elems);
		break;
	case ACT_GAP:
		build(p, c->len, 1);	/* transport seq 0, never sent */
		bytes = build(p, c->len, 2);
		gsp_q_write(&p->w, p->msg, bytes, elems, elems);
		break;
	case ACT_COUNTER:
		bytes = build(p, c->len, 1);
		gsp_q_write(&p->w, p->msg, bytes, elems, elems + 10 * p->w.nr);
		break;
	}
	get0 = atomic_load(p->r.get);
	assert_int_equal(gsp_q_read(&p->r, p->in), c->want);
	assert_int_equal(atomic_load(p->r.get) - get0, c->consumed);
	if (c->want == GSP_RX_OK || c->want == GSP_RX_GAP) {
		const struct vgpu_rpc_hdr *rh = (void *)(p->in + sizeof(struct vgpu_rpc_elem));

		assert_int_equal(rh->length, c->len);
		/* The message as built, checksum word aside (the reader zeroes its copy). */
		assert_memory_equal(p->in + 4, p->msg + 4, bytes - 4);
		assert_int_equal(p->r.seq, p->w.seq);
	}
	qpair_free(p);
}

/* ---- a peer that rewrites a header while the reader copies the message ----
 * The ring is shared with the GSP, which may lie: between the reader's copy of a message's
 * header and its copy of the rest (gsp_q_read_hook, the one moment that matters) the peer
 * puts another header there, self-consistent (element count for its length, checksum over
 * the bytes the reader copies) but claiming more than was published or than the reader's
 * buffer holds. Every case runs on a fresh queue, the message starting at each element of
 * the ring in turn. Whatever the reader returns, nothing it accepts was left unchecked: the
 * length fits its buffer and the elements published, and get moves no further than put. */
static struct {
	uint8_t hdr[VGPU_RPC_MSG_HDR_SIZE];	/* what the peer writes over the header */
	unsigned int calls;
} swap;

static void swap_header(struct gsp_q *q)
{
	uint32_t get = atomic_load(q->get);

	memcpy(q->ring + (size_t)(get & (q->nr - 1)) * VGPU_RPC_ELEM_SIZE, swap.hdr,
	       sizeof(swap.hdr));
	swap.calls++;
}

/* The header of message @msg (@bytes copied by the reader) claiming @len bytes instead. */
static void forge_header(const uint8_t *msg, size_t bytes, uint32_t len)
{
	uint8_t m[VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE];
	struct vgpu_rpc_elem *e = (void *)m;
	struct vgpu_rpc_hdr *rh = (void *)(m + sizeof(*e));

	memcpy(m, msg, bytes);
	rh->length = len;
	rh->total_length = len;
	e->elem_count = gsp_msg_elems(len);
	e->checksum = 0;
	e->checksum = gsp_checksum(m, bytes);
	memcpy(swap.hdr, m, sizeof(swap.hdr));
}

/* One message of @sent bytes published at element @at of a fresh ring, its header
 * rewritten to claim @forged bytes while the reader reads it. */
static void read_rewritten(size_t sent, uint32_t forged, uint32_t at)
{
	struct qpair *p = qpair_new();
	const struct vgpu_rpc_hdr *rh = (void *)(p->in + sizeof(struct vgpu_rpc_elem));
	uint32_t elems = gsp_msg_elems(sent), moved;
	size_t bytes;
	enum gsp_rx rx;

	atomic_store(p->w.put, at);
	atomic_store(p->w.get, at);
	bytes = build(p, sent, 1);
	gsp_q_write(&p->w, p->msg, bytes, elems, elems);
	forge_header(p->msg, bytes, forged);
	swap.calls = 0;
	rx = gsp_q_read(&p->r, p->in);
	moved = atomic_load(p->r.get) - at;
	assert_int_equal(swap.calls, 1);	/* the peer did act */
	assert_true(moved <= elems);
	if (rx == GSP_RX_OK || rx == GSP_RX_GAP) {
		assert_true(rh->length <= VGPU_RPC_MSG_MAX_PAYLOAD);
		assert_true(gsp_msg_elems(rh->length) <= elems);
		assert_int_equal(moved, gsp_msg_elems(rh->length));
	}
	qpair_free(p);
}

static void test_rx_header_rewritten(void **state)
{
	/* Published: one element, three elements. Claimed: 49 elements (past the buffer),
	 * the largest message (16), 4 and 2 elements, 1 element a few bytes short, 8 bytes. */
	const size_t sent[] = { 100, 2 * VGPU_RPC_ELEM_SIZE + 1 };
	const uint32_t forged[] = { 200000, VGPU_RPC_MSG_MAX_PAYLOAD, 3 * VGPU_RPC_ELEM_SIZE,
				    VGPU_RPC_ELEM_SIZE, 92, 8 };

	(void)state;
	gsp_q_read_hook = swap_header;
	for (size_t s = 0; s < VGPU_ARRAY_SIZE(sent); s++)
		for (size_t f = 0; f < VGPU_ARRAY_SIZE(forged); f++)
			for (uint32_t at = 0; at < VGPU_RPC_MIN_QUEUE; at++)
				read_rewritten(sent[s], forged[f], at);
}

static int hook_off(void **state)
{
	(void)state;
	gsp_q_read_hook = NULL;
	return 0;
}

/* Whole RPCs: elements over every chunk. */
static void test_rpc_elems(void **state)
{
	(void)state;
	assert_int_equal(gsp_rpc_elems(0), 1);
	assert_int_equal(gsp_rpc_elems(VGPU_RPC_ELEM_PAYLOAD), 1);
	assert_int_equal(gsp_rpc_elems(VGPU_RPC_ELEM_PAYLOAD + 1), 2);
	assert_int_equal(gsp_rpc_elems(VGPU_RPC_MSG_MAX_PAYLOAD), VGPU_RPC_MAX_ELEMS);
	assert_int_equal(gsp_rpc_elems(VGPU_RPC_MSG_MAX_PAYLOAD + 1), VGPU_RPC_MAX_ELEMS + 1);
	assert_int_equal(gsp_rpc_elems(2ull * VGPU_RPC_MSG_MAX_PAYLOAD), 2 * VGPU_RPC_MAX_ELEMS);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(layout_cases) + VGPU_ARRAY_SIZE(rx_cases) + 2];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(layout_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = layout_cases[i].name,
			.test_func = test_layout, .initial_state = (void *)&layout_cases[i] };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(rx_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = rx_cases[i].name,
			.test_func = test_rx, .initial_state = (void *)&rx_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_rx_header_rewritten,
										  hook_off);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_rpc_elems);
	return _cmocka_run_group_tests("gsp_msgq", tests, n, NULL, NULL);
}
