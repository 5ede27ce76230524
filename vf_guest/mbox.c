// SPDX-License-Identifier: MIT
/* The VF mailbox: one request slot out, one reply slot back, matched by sequence number.
 *
 * Waiting spins first (a reply from a polling host comes back in microseconds), then sleeps
 * on the mailbox vector, always bounded by opts.rm_timeout_ns. A reply whose seq is not the
 * one we wait for belongs to a call that already timed out: it is dropped and counted, never
 * taken for the current call's answer. The reply is host input: its length is checked
 * against the slot before anything is copied. */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include <vgpu/gmmu.h>
#include "vf_guest/vf_internal.h"

#define MBOX_SLEEP_SLICE_NS	(10ull * 1000 * 1000)	/* re-check state while asleep */

static bool vf_state_ready(const struct vgpu_vf *vf)
{
	return atomic_load_explicit((_Atomic uint32_t *)&vf->hdr->state, memory_order_acquire) ==
	       VF_STATE_READY;
}

/* Wait for a free request slot (the host consumes requests as it serves them). */
static void *mbox_slot(struct vgpu_vf *vf, uint64_t deadline)
{
	void *slot;

	while (!(slot = cmn_ring_produce_slot(&vf->req))) {
		if (cmn_deadline_passed(deadline) || !vf_state_ready(vf))
			return NULL;
		vf->t->ops->wait(vf->t, VF_VEC_MBOX, 100 * 1000);
	}
	return slot;
}

/* Take the reply to @seq if it is there: 1 taken, 0 not yet, <0 broken ring. */
static int mbox_take(struct vgpu_vf *vf, uint32_t seq, uint32_t type, void *rsp,
		     size_t *rsp_len, int *status)
{
	const struct vf_msg *m;
	int err;

	for (;;) {
		m = cmn_ring_consume_slot(&vf->rsp, &err);
		if (!m)
			return err;
		if (m->seq != seq || m->type != type) {
			vf->late_replies++;
			cmn_ring_consume_commit(&vf->rsp);
			continue;
		}
		break;
	}
	if (m->length > VF_MSG_MAX_PAYLOAD || m->length > vf->rsp.elem_size - sizeof(*m)) {
		*status = -EPROTO;
	} else if (rsp_len && m->length > *rsp_len) {
		*status = -EMSGSIZE;
	} else {
		*status = m->status;
		if (rsp_len) {
			if (m->length)
				memcpy(rsp, m + 1, m->length);
			*rsp_len = m->length;
		}
	}
	cmn_ring_consume_commit(&vf->rsp);
	return 1;
}

static int mbox_wait(struct vgpu_vf *vf, uint32_t seq, uint32_t type, void *rsp,
		     size_t *rsp_len, uint64_t deadline)
{
	uint64_t spin_end = cmn_deadline_ns(vf->opts.spin_ns);
	int status, ret;

	for (;;) {
		ret = mbox_take(vf, seq, type, rsp, rsp_len, &status);
		if (ret > 0)
			return status;
		if (ret < 0)
			return vf_error(vf, ret, "mailbox reply ring is corrupt");
		if (!vf_state_ready(vf)) {
			atomic_store(&vf->reset_pending, true);
			return -ENOLINK;
		}
		if (cmn_deadline_passed(deadline))
			return vf_error(vf, -ETIMEDOUT, "no mailbox reply to request %u", seq);
		if (!cmn_deadline_passed(spin_end)) {
			cmn_cpu_relax();
			continue;
		}
		ret = vf->t->ops->wait(vf->t, VF_VEC_MBOX, MBOX_SLEEP_SLICE_NS);
		if (ret == -ENOLINK) {
			atomic_store(&vf->reset_pending, true);
			return vf_error(vf, -ENOLINK, "the VF endpoint went away");
		}
	}
}

int vf_mbox_call_locked(struct vgpu_vf *vf, uint32_t type, const void *req, size_t req_len,
			void *rsp, size_t *rsp_len)
{
	uint64_t deadline = cmn_deadline_ns(vf->opts.rm_timeout_ns);
	struct vf_msg *m;
	uint32_t seq;

	cmn_mutex_assert_held(&vf->mbox_lock);
	if (req_len > VF_MSG_MAX_PAYLOAD || req_len > vf->req.elem_size - sizeof(*m))
		return -EMSGSIZE;
	if (atomic_load(&vf->reset_pending) || !vf_state_ready(vf))
		return -ENOLINK;
	m = mbox_slot(vf, deadline);
	if (!m)
		return vf_error(vf, -ETIMEDOUT, "mailbox request ring stays full");
	seq = ++vf->seq;
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->seq = seq;
	m->length = (uint32_t)req_len;
	if (req_len)
		memcpy(m + 1, req, req_len);
	cmn_ring_produce_commit(&vf->req);
	if (vf->t->ops->notify(vf->t, VF_VEC_MBOX)) {
		atomic_store(&vf->reset_pending, true);
		return vf_error(vf, -ENOLINK, "the VF endpoint went away");
	}
	return mbox_wait(vf, seq, type, rsp, rsp_len, deadline);
}

int vgpu_vf_mbox_call(struct vgpu_vf *vf, uint32_t type, const void *req, size_t req_len,
		      void *rsp, size_t *rsp_len)
{
	int ret;

	cmn_mutex_lock(&vf->mbox_lock);
	ret = vf_mbox_call_locked(vf, type, req, req_len, rsp, rsp_len);
	cmn_mutex_unlock(&vf->mbox_lock);
	return ret;
}

int vgpu_vf_ping(struct vgpu_vf *vf, const void *buf, size_t len)
{
	uint8_t echo[VF_MSG_MAX_PAYLOAD];
	size_t echo_len = sizeof(echo);
	int ret;

	if (len > VF_MSG_MAX_PAYLOAD)
		return -EMSGSIZE;
	ret = vgpu_vf_mbox_call(vf, VF_MSG_PING, buf, len, echo, &echo_len);
	if (ret)
		return ret;
	if (echo_len != len || (len && memcmp(echo, buf, len)))
		return vf_error(vf, -EBADMSG, "PING echo differs from the request");
	return 0;
}

static void event_on_channel(struct vgpu_vf *vf, const struct vf_event *e)
{
	struct cmn_list *n;

	cmn_mutex_lock(&vf->obj_lock);
	for (n = vf->channels.next; n != &vf->channels; n = n->next) {
		struct vgpu_channel *ch = cmn_container_of(n, struct vgpu_channel, node);

		if (ch->lost || ch->chid != e->arg0)
			continue;
		if (e->type == VF_EVT_MMU_FAULT) {
			struct vgpu_fault_entry f;

			memcpy(&f, e->pad, sizeof(f));
			ch->fault_reason = (uint32_t)e->arg1 ? (uint32_t)e->arg1 : f.reason;
			ch->fault_va = f.va;
		}
	}
	cmn_mutex_unlock(&vf->obj_lock);
}

void vf_events_poll(struct vgpu_vf *vf)
{
	const void *slot;
	struct vf_event e;
	int err;

	cmn_mutex_lock(&vf->mbox_lock);
	/* Copy only our struct: the host's slot may be larger (a newer minor). */
	while ((slot = cmn_ring_consume_slot(&vf->evt, &err))) {
		memcpy(&e, slot, sizeof(e));
		cmn_ring_consume_commit(&vf->evt);
		switch (e.type) {
		case VF_EVT_RESET:
		case VF_EVT_STOP:
			atomic_store(&vf->reset_pending, true);
			break;
		case VF_EVT_MMU_FAULT:
			if (vf->managed.fault)
				vf->managed.fault(vf->managed.ctx, (const void *)e.pad);
			event_on_channel(vf, &e);
			break;
		case VF_EVT_CHAN_ERROR:
			event_on_channel(vf, &e);
			break;
		default:
			break;	/* a newer host's event: ignorable by the ABI's MINOR rule */
		}
	}
	cmn_mutex_unlock(&vf->mbox_lock);
}
