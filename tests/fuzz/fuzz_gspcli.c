// SPDX-License-Identifier: MIT
/* fuzz_gspcli: the CPU-RM's side of the GSP after the framing (rm/gsp/gsp_client.c): the
 * reassembly of reply chunks into the waiting RPC's buffer, matched by sequence, and the
 * event queue, as a broken or compromised GSP writes them. The client is detached
 * (gsp_start_detached(): no program, no threads) and fresh per input; the harness plays
 * the GSP in its queue memory, with one lane and one function.
 * The input is a list of records, each starting with a kind byte k:
 *   k & 3 == 0 or 3, a reply message: u16 n, u32 function, i32 result, u32 sequence, u32 chunk,
 *     u32 total_length (little endian), n payload bytes; k bit 2: sequence := that of the
 *     next call, bit 3: total_length := n. Written well framed into the status queue.
 *   k & 3 == 1, a call: u8 f (f & 0x7f: NOP, ECHO or GET_INFO; bit 7: an empty request,
 *     no buffer), u16 reply buffer size: the
 *     RPC is sent and its reply read from what the queue holds, with a deadline of 1 ms
 *     (the client looks at the clock before it reads: a shorter one times out unread; a
 *     call with no reply there waits this long, the one wait of the harness).
 *   k & 3 == 2, an event: u8 advance, then a 64-byte record written at the event put,
 *     which then moves by advance (0..255: a GSP may claim more than it wrote).
 * Checks: a call returns 0 or -errno and a reply no longer than its buffer (which
 * is allocated to its exact size, so a copy past it is seen); an event poll delivers at
 * most a queue's worth of records; nothing is left in flight. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/rpc.h>

#include "common/log.h"
#include "rm/gsp/gsp.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ELEMS	64u
#define FZ_EVENTS	16u
#define FZ_DEADLINE_NS	1000000u
#define FZ_SLOT_SHIFT	6	/* the client's sequence: (per-lane count << 6) | slot */

static uint8_t *fz_buf;

static void fz_log_drop(enum cmn_log_level level, const char *msg, void *ctx)
{
	(void)level;
	(void)msg;
	(void)ctx;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc; (void)argv;
	cmn_log_set_level(VGPU_LOG_ERR);
	cmn_log_set_sink(fz_log_drop, NULL);	/* a fuzzed GSP is marked for reset often */
	fz_buf = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
	if (!fz_buf)
		abort();
	return 0;
}

static uint32_t fz_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static unsigned int fz_events;

static void fz_event(void *ctx, const struct vgpu_rpc_event *ev)
{
	(void)ctx;
	(void)ev;
	fz_events++;
}

struct fz {
	struct gsp *g;
	struct gsp_layout l;
	struct gsp_q cmd, stat;		/* the GSP's views */
	uint32_t calls;
};

static size_t fz_reply(struct fz *f, uint8_t k, const uint8_t *p, size_t size)
{
	size_t n = p[0] | (size_t)p[1] << 8;
	struct vgpu_rpc_hdr rh = { .version = VGPU_RPC_HDR_VERSION,
		.signature = VGPU_RPC_SIGNATURE, .function = fz_u32(p + 2),
		.result = (int32_t)fz_u32(p + 6), .sequence = fz_u32(p + 10),
		.chunk = fz_u32(p + 14), .total_length = fz_u32(p + 18) };
	size_t bytes;

	n = n < size - 22 ? n : size - 22;
	if (n > VGPU_RPC_MSG_MAX_PAYLOAD)
		n = VGPU_RPC_MSG_MAX_PAYLOAD;
	if (k & 4)
		rh.sequence = (f->calls + 1) << FZ_SLOT_SHIFT;
	if (k & 8)
		rh.total_length = n;
	if (gsp_q_free(&f->stat) < gsp_msg_elems(n))
		return 22 + n;		/* the GSP would wait for room: dropped */
	bytes = gsp_msg_build(&f->stat, fz_buf, &rh, p + 22, n);
	gsp_q_write(&f->stat, fz_buf, bytes, gsp_msg_elems(n), gsp_msg_elems(n));
	return 22 + n;
}

static void fz_call(struct fz *f, const uint8_t *p)
{
	static const uint32_t fns[] = { VGPU_RPC_FN_NOP, VGPU_RPC_FN_ECHO, VGPU_RPC_FN_GET_INFO };
	size_t cap = p[1] | (size_t)p[2] << 8, len = 0;
	uint8_t *reply = malloc(cap ? cap : 1);
	const char req[] = "fuzz";
	bool empty = p[0] & 0x80;
	int ret;

	if (!reply)
		abort();
	ret = gsp_call_deadline(f->g, 0, fns[(p[0] & 0x7f) % 3], empty ? NULL : req,
				empty ? 0 : sizeof(req), cap ? reply : NULL, cap, &len,
				FZ_DEADLINE_NS);
	f->calls++;
	/* What the GSP caught up with (as if it had read the command). */
	atomic_store(f->cmd.get, atomic_load(f->cmd.put));
	if (ret > 0 || ret < -4095 || len > cap)
		abort();	/* not 0 or -errno, or a reply longer than its buffer */
	free(reply);
}

static void fz_event_put(struct fz *f, const uint8_t *p)
{
	uint8_t *base = gsp_queue_mem(f->g);
	struct vgpu_rpcq_gsp_page *gp = (void *)(base + GSP_PAGE);
	struct vgpu_rpc_event *evts = (void *)(base + f->l.evt_off);
	uint32_t put = __atomic_load_n(&gp->evt_put, __ATOMIC_RELAXED);

	memcpy(&evts[put & (f->l.nr_events - 1)], p + 1, sizeof(*evts));
	__atomic_store_n(&gp->evt_put, put + p[0], __ATOMIC_RELEASE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gsp_config cfg = { .nr_fns = 1, .nr_lanes = 1, .queue_elems = FZ_ELEMS,
		.nr_events = FZ_EVENTS, .spin_ns = 1, .send_wait_ns = 1, .reset_strikes = 1000,
		.deadline_ns = { 1, 1, 1 }, .event_cb = fz_event };
	struct fz f = { 0 };

	if (size > (256u << 10))
		return 0;
	if (gsp_start_detached(&cfg, &f.g) ||
	    gsp_layout_compute(1, FZ_ELEMS, FZ_EVENTS, &f.l))
		abort();
	gsp_q_bind(&f.cmd, gsp_queue_mem(f.g), &f.l, 0, 0);
	gsp_q_bind(&f.stat, gsp_queue_mem(f.g), &f.l, 0, 1);
	while (size >= 1) {
		uint8_t k = data[0];
		size_t used = 0;

		data++;
		size--;
		if ((k & 3) % 3 == 0 && size >= 22) {
			used = fz_reply(&f, k, data, size);
		} else if ((k & 3) == 1 && size >= 3) {
			fz_call(&f, data);
			used = 3;
		} else if ((k & 3) == 2 && size >= 1 + sizeof(struct vgpu_rpc_event)) {
			fz_event_put(&f, data);
			fz_events = 0;
			gsp_events_poll(f.g);
			if (fz_events > FZ_EVENTS)
				abort();	/* more records than the queue holds */
			used = 1 + sizeof(struct vgpu_rpc_event);
		} else {
			break;
		}
		data += used;
		size -= used;
	}
	if (gsp_inflight(f.g, 0))
		abort();	/* a call left its slot taken */
	gsp_stop(f.g);
	return 0;
}
