// SPDX-License-Identifier: MIT
/* fuzz_gspsrv: the GSP firmware's command path after the framing (rm/gsp/fw/server.c):
 * reassembly of continuation records, the RPC table and its validator, every handler, and
 * the replies, as the GSP serves what a broken or compromised CPU-RM sends. The server runs
 * in this process through gsp_fw_open() / gsp_fw_step() (no lane threads) over a fresh
 * queue memfd per input and the privileged region of a device model built once (64 MiB,
 * 3 VFs), wiped at every open as at a GSP restart.
 * The input is a list of messages, each
 *   u8 flags, u16 n, u32 function, u32 gfid, u32 chunk, u32 total_length (little endian),
 *   then n payload bytes;
 *   flags bit 0: a new RPC sequence (else the previous one's, as continuations carry);
 *   flags bit 1: total_length := n (a whole RPC in one message).
 * The harness writes each one well framed into lane 0's command queue, steps the server
 * until the queue is empty, and reads the status queue back.
 * Checks: every reply message is well framed and belongs to an RPC that was sent; a reply
 * delivers exactly its total_length; a whole one-message RPC gets exactly one reply, with
 * its sequence, function and gfid. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vgpu/version.h>

#include "common/log.h"
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "rm/gsp/fw/gsp_fw.h"
#include "rm/gsp/gsp.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ELEMS	64u	/* per queue: the largest reply an input can cause fits */
#define FZ_EVENTS	64u
#define FZ_MAX_INPUT	(128u << 10)

static struct gpu *fz_gpu;
static struct iommu *fz_iommu;
static struct gsp_layout fz_l;
static int fz_qfd = -1;
static uint8_t *fz_mem;
static uint8_t *fz_buf;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct gpu_config gc = { .vram_size = 64ull << 20, .nr_vfs = 3, .nr_engines = 1 };

	(void)argc; (void)argv;
	cmn_log_set_level(VGPU_LOG_ERR);
	if (iommu_create(NULL, &fz_iommu))
		abort();
	gc.iommu = fz_iommu;
	if (gpu_create(&gc, &fz_gpu) || gsp_layout_compute(1, FZ_ELEMS, FZ_EVENTS, &fz_l))
		abort();
	fz_qfd = memfd_create("fuzz-gsp-queues", MFD_CLOEXEC);
	if (fz_qfd < 0 || ftruncate(fz_qfd, (off_t)fz_l.total))
		abort();
	fz_mem = mmap(NULL, fz_l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fz_qfd, 0);
	fz_buf = malloc(VGPU_RPC_MAX_ELEMS * VGPU_RPC_ELEM_SIZE);
	if (fz_mem == MAP_FAILED || !fz_buf)
		abort();
	return 0;
}

static uint32_t fz_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* What the reader expects of the status queue. */
struct fz_rx {
	uint32_t max_seq;		/* sequences 1..max_seq were sent */
	bool in_reply;			/* a split reply is being read */
	uint32_t seq;
	uint64_t got, total;
	unsigned int replies;		/* first chunks seen */
	struct vgpu_rpc_hdr last;	/* the last first chunk */
};

/* Read every reply message the server wrote; the server only writes well-framed ones. */
static void fz_drain(struct gsp_q *stat, struct fz_rx *rx)
{
	const struct vgpu_rpc_hdr *rh = (const void *)(fz_buf + sizeof(struct vgpu_rpc_elem));
	enum gsp_rx r;

	while ((r = gsp_q_read(stat, fz_buf)) != GSP_RX_EMPTY) {
		if (r != GSP_RX_OK || rh->total_length > VGPU_RPC_MAX_PAYLOAD ||
		    !rh->sequence || rh->sequence > rx->max_seq)
			abort();	/* malformed, or a reply to nothing sent */
		if (rh->function == VGPU_RPC_FN_CONTINUATION) {
			if (!rx->in_reply || rh->sequence != rx->seq)
				abort();	/* a continuation of no reply */
		} else {
			if (rx->in_reply)
				abort();	/* a reply cut short by the next */
			rx->in_reply = true;
			rx->seq = rh->sequence;
			rx->got = 0;
			rx->total = rh->total_length;
			rx->replies++;
			rx->last = *rh;
		}
		rx->got += rh->length;
		if (rx->got > rx->total)
			abort();	/* more than it announced */
		if (rx->got == rx->total)
			rx->in_reply = false;
	}
}

/* Serve until the command queue is empty, reading the replies and taking the events. */
static void fz_serve(struct gsp_fw *fw, struct gsp_q *stat, struct fz_rx *rx)
{
	struct vgpu_rpcq_gsp_page *gp = (void *)(fz_mem + GSP_PAGE);
	struct vgpu_rpcq_cpu_page *cp = (void *)(fz_mem + 2 * GSP_PAGE);

	for (unsigned int i = 0; i < 4 * FZ_ELEMS; i++) {
		int r = gsp_fw_step(fw, 0);

		fz_drain(stat, rx);
		__atomic_store_n(&cp->evt_get, __atomic_load_n(&gp->evt_put, __ATOMIC_ACQUIRE),
				 __ATOMIC_RELEASE);
		if (r == GSP_RX_EMPTY)
			return;
		if (r != GSP_RX_OK)
			abort();	/* the harness frames every message well */
	}
	abort();	/* the server did not empty the queue */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vgpu_rpcq_global *glob = (void *)fz_mem;
	struct gsp_q cmd, stat;
	struct fz_rx rx = { 0 };
	struct gsp_fw *fw;
	uint32_t seq = 0;

	if (size > FZ_MAX_INPUT)
		return 0;
	memset(fz_mem, 0, fz_l.total);
	*glob = (struct vgpu_rpcq_global){ .magic = VGPU_RPCQ_MAGIC,
		.abi_version = VGPU_ABI_VERSION, .nr_lanes = 1, .queue_elems = FZ_ELEMS,
		.nr_events = FZ_EVENTS, .nr_fns = gpu_nr_fns(fz_gpu), .wipe_hw = 1,
		.total_size = fz_l.total, .epoch = 1 };
	if (gsp_fw_open(fz_qfd, gpu_priv_fd(fz_gpu), &fw))
		abort();
	gsp_q_bind(&cmd, fz_mem, &fz_l, 0, 0);
	gsp_q_bind(&stat, fz_mem, &fz_l, 0, 1);
	while (size >= 19) {
		uint8_t flags = data[0];
		size_t n = data[1] | (size_t)data[2] << 8;
		struct vgpu_rpc_hdr rh = { .version = VGPU_RPC_HDR_VERSION,
			.signature = VGPU_RPC_SIGNATURE, .result = VGPU_RPC_PENDING,
			.function = fz_u32(data + 3), .gfid = fz_u32(data + 7),
			.chunk = fz_u32(data + 11), .total_length = fz_u32(data + 15) };
		unsigned int before = rx.replies;
		size_t bytes;

		data += 19;
		size -= 19;
		if (n > size)
			n = size;
		if (n > VGPU_RPC_MSG_MAX_PAYLOAD)
			n = VGPU_RPC_MSG_MAX_PAYLOAD;
		if ((flags & 1) || !seq)
			seq++;
		rh.sequence = seq;
		if (flags & 2)
			rh.total_length = n;
		rx.max_seq = seq;
		bytes = gsp_msg_build(&cmd, fz_buf, &rh, data, n);
		gsp_q_write(&cmd, fz_buf, bytes, gsp_msg_elems(n), gsp_msg_elems(n));
		fz_serve(fw, &stat, &rx);
		if (rh.function != VGPU_RPC_FN_CONTINUATION && !rh.chunk && rh.total_length == n &&
		    (rx.replies != before + 1 || rx.in_reply || rx.last.sequence != seq ||
		     rx.last.function != rh.function || rx.last.gfid != rh.gfid))
			abort();	/* a whole RPC not answered exactly once */
		data += n;
		size -= n;
	}
	gsp_fw_close(fw);
	return 0;
}
