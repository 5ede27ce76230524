// SPDX-License-Identifier: MIT
/* fuzz_mbox: a guest's VF mailbox as vgpud serves it (pf_manager/service.c, pf_svc_handle(),
 * what a VF's service thread runs) and the RM wire messages it carries (rm_dispatch()),
 * run against a real RM with a real vgpu-gsp: the RM unit tests' fixture (a 64 MiB GPU with
 * 3 VFs, VF 1 and 2 partitioned) built once, the input playing VF 1's guest.
 * The input is a list of requests, each
 *   u8 flags, u16 n (little endian), n bytes: the slot's content (struct vf_msg, payload);
 *   flags bit 0: make vf_msg.length and the RM header's magic, ABI version and length agree
 *                with n, so the checks behind them are reached;
 *   flags bit 1: the RM message's first handle (h_client) := the last client this input made;
 *   flags bit 2: its second handle (h_parent / h_object) := the last handle a reply gave.
 * Requests go into the request ring as a guest pushes them; the mailbox is served whenever
 * the ring is full, before a request that takes a handle from a reply, and at the end, and
 * every reply is read back.
 * Checks: one reply per request, in order, each with the request's seq and type and a
 * length within the slot; after the clients this input made are freed, VF 1 holds no RM
 * object and no RPC is in flight (whatever the input did, nothing outlives its clients). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vgpu/rm.h>
#include <vgpu/vf_bar.h>

#include "common/log.h"
#include "pf_manager/pf_internal.h"
#include "tests/unit/rm/rm_test.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_VF		1u
#define FZ_REQS		256u	/* requests per input, so every client made is tracked */

static struct rm_fixture fz_f;
static struct pf_daemon fz_d;
static struct pf_slice fz_s;

/* The fuzz build has no vgpu-gsp of its own (a libFuzzer link has no main of ours): use
 * the rel build's, beside this variant's bin/ folder, unless $VGPU_GSP names one. */
static void fz_gsp_path(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (getenv("VGPU_GSP") || n <= 0)
		return;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return;
	*slash = '\0';
	snprintf(path, sizeof(path), "%s/../../rel/bin/vgpu-gsp", exe);
	setenv("VGPU_GSP", path, 1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int ret;

	(void)argc; (void)argv;
	cmn_log_set_level(VGPU_LOG_ERR);
	fz_gsp_path();
	ret = rm_fixture_up(&fz_f, NULL);
	if (ret) {
		fprintf(stderr, "fuzz_mbox: RM fixture: %s (is the rel vgpu-gsp built?)\n",
			strerror(-ret));
		abort();
	}
	fz_d.rm = fz_f.rm;
	fz_s.vf = FZ_VF;
	fz_s.bar_size = VF_BAR_CTRL_SIZE;	/* the control area only: all the mailbox uses */
	fz_s.bar = aligned_alloc(4096, VF_BAR_CTRL_SIZE);
	if (!fz_s.bar)
		abort();
	memset(fz_s.bar, 0, VF_BAR_CTRL_SIZE);
	fz_s.hdr = (struct vf_bar_header *)(fz_s.bar + VF_BAR_HDR_CTRL_OFF);
	fz_s.prov.vram = T_SLICE;
	return 0;
}

struct fz_state {
	struct cmn_ring req, rsp;	/* the guest's views */
	uint32_t clients[FZ_REQS];
	unsigned int nr_clients;
	uint32_t last_handle;
	uint32_t sent_seq[VF_MBOX_SLOTS], sent_type[VF_MBOX_SLOTS];
	unsigned int sent, answered;
};

/* What the VF's service thread does, on this thread: every request that has room for its
 * reply is taken out of the ring, answered by pf_svc_handle() and the reply published. */
static void fz_mbox_serve(void)
{
	uint8_t req[VF_MBOX_SLOT_SIZE], rsp[VF_MBOX_SLOT_SIZE];
	const void *slot;
	int err;

	while ((slot = cmn_ring_consume_slot(&fz_s.req, &err)) && cmn_ring_produce_slot(&fz_s.rsp)) {
		memcpy(req, slot, sizeof(req));
		cmn_ring_consume_commit(&fz_s.req);
		memset(rsp, 0, sizeof(rsp));
		pf_svc_handle(&fz_d, &fz_s, (const struct vf_msg *)req, (struct vf_msg *)rsp, 0);
		memcpy(cmn_ring_produce_slot(&fz_s.rsp), rsp, sizeof(rsp));
		cmn_ring_produce_commit(&fz_s.rsp);
	}
}

/* Serve the mailbox and read every reply back, checking it answers what was sent. */
static void fz_serve(struct fz_state *st)
{
	uint8_t rsp[VF_MBOX_SLOT_SIZE];

	fz_mbox_serve();
	while (cmn_ring_pop(&st->rsp, rsp) == 0) {
		const struct vf_msg *m = (const void *)rsp;
		const struct vgpu_rm_reply *rp = (const void *)(m + 1);
		unsigned int i = st->answered % VF_MBOX_SLOTS;

		if (st->answered == st->sent || m->seq != st->sent_seq[i] ||
		    m->type != st->sent_type[i] || m->length > VF_MSG_MAX_PAYLOAD)
			abort();	/* a reply that answers nothing sent, or out of order */
		st->answered++;
		if (m->type != VF_MSG_RM || m->status || m->length < sizeof(*rp) || rp->status)
			continue;
		if (rp->op == VGPU_RM_OP_ALLOC_CLIENT && st->nr_clients < FZ_REQS)
			st->clients[st->nr_clients++] = rp->handle;
		if (rp->handle)
			st->last_handle = rp->handle;
	}
	if (st->answered != st->sent)
		abort();	/* a request consumed without a reply */
}

/* Build one request slot from the input and push it. */
static void fz_push(struct fz_state *st, uint8_t flags, const uint8_t *p, size_t n)
{
	uint8_t slot[VF_MBOX_SLOT_SIZE] = { 0 };
	struct vf_msg *m = (void *)slot;
	struct vgpu_rm_msg *rh = (void *)(m + 1);
	size_t pl;

	if (flags & 6)
		fz_serve(st);	/* the handles come from replies: wait for them, as a guest does */
	memcpy(slot, p, n);
	pl = n > sizeof(*m) ? n - sizeof(*m) : 0;
	if (flags & 1) {
		m->length = (uint32_t)pl;
		if (m->type == VF_MSG_RM && pl >= sizeof(*rh)) {
			rh->magic = (uint32_t)VGPU_RM_MSG_MAGIC;
			rh->abi_version = VGPU_ABI_VERSION;
			rh->length = (uint32_t)pl;
		}
	}
	if ((flags & 2) && st->nr_clients && pl >= sizeof(*rh) + 4)
		memcpy((uint8_t *)(rh + 1), &st->clients[st->nr_clients - 1], 4);
	if ((flags & 4) && pl >= sizeof(*rh) + 8)
		memcpy((uint8_t *)(rh + 1) + 4, &st->last_handle, 4);
	if (cmn_ring_push(&st->req, slot, sizeof(slot))) {
		fz_serve(st);	/* full: the guest kicks and waits */
		if (cmn_ring_push(&st->req, slot, sizeof(slot)))
			abort();	/* served, yet still no room */
	}
	st->sent_seq[st->sent % VF_MBOX_SLOTS] = m->seq;
	st->sent_type[st->sent % VF_MBOX_SLOTS] = m->type;
	st->sent++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_state st = { 0 };
	unsigned int reqs = 0;

	if (size > (64u << 10))
		return 0;
	pf_bar_format(&fz_s);
	if (cmn_ring_attach(&st.req, fz_s.bar + VF_BAR_REQ_OFF, VF_BAR_RING_REGION) ||
	    cmn_ring_attach(&st.rsp, fz_s.bar + VF_BAR_RSP_OFF, VF_BAR_RING_REGION))
		abort();
	while (size >= 3 && reqs++ < FZ_REQS) {
		size_t n = data[1] | (size_t)data[2] << 8;

		if (n > size - 3)
			n = size - 3;
		if (n > VF_MBOX_SLOT_SIZE)
			n = VF_MBOX_SLOT_SIZE;
		fz_push(&st, data[0], data + 3, n);
		data += 3 + n;
		size -= 3 + n;
	}
	fz_serve(&st);
	for (unsigned int i = 0; i < st.nr_clients; i++)
		rm_client_free(fz_f.rm, FZ_VF, st.clients[i]);	/* -ENOENT if freed already */
	if (rm_object_count(fz_f.rm, FZ_VF) || rm_t_inflight(&fz_f)) {
		fprintf(stderr, "fuzz_mbox: VF %u keeps %llu RM objects, %u RPCs in flight\n", FZ_VF,
			(unsigned long long)rm_object_count(fz_f.rm, FZ_VF), rm_t_inflight(&fz_f));
		abort();
	}
	return 0;
}
