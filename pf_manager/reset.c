// SPDX-License-Identifier: MIT
/* reset-vf, announced first to a guest that asked for it (ABI 2.5, vgpu/vf_bar.h "RESET
 * ANNOUNCEMENT"). Such a guest may hold process memory in the VRAM aperture, which the reset
 * scrubs: it gets a number and a deadline, moves its pages out and acknowledges. The wait
 * runs on the loop thread as a deadline the loop polls towards (pf_reset_poll_ms) and a
 * check after every dispatch (pf_reset_tick): nothing blocks, the VF keeps working until
 * the reset runs, and the reset-vf request is answered when it did. */
#include <errno.h>
#include <stdatomic.h>

#include "common/clock.h"
#include "common/log.h"
#include "pf_manager/migrate_internal.h"
#include "pf_manager/pf_internal.h"

enum pf_reset_verdict pf_reset_verdict(const struct pf_reset_wait *w, uint32_t ack,
				       bool attached, uint64_t now_ns)
{
	if (!w->seq)
		return PF_RESET_WAIT;
	if (!attached)
		return PF_RESET_GUEST_GONE;
	if (ack == w->seq)
		return PF_RESET_ACKED;
	if (now_ns >= w->deadline_ns)
		return PF_RESET_TIMED_OUT;
	return PF_RESET_WAIT;
}

bool pf_reset_announces(const struct pf_slice *s, uint32_t evict_ms)
{
	uint32_t abi = pf_endpoint_guest_abi(s);

	return evict_ms && pf_endpoint_attached(s) && vgpu_abi_compatible(abi) &&
	       VGPU_ABI_VERSION_MINOR(abi) >= VGPU_ABI_MINOR_RESET_ACK &&
	       (pf_endpoint_guest_flags(s) & VF_INFO_REQ_RESET_ACK);
}

/* The reset itself, the request already committed to the journal (s->reset_pending): the
 * reply's fields into @ret. */
static int reset_now(struct pf_daemon *d, struct pf_slice *s, json_object *ret, struct pf_err *e)
{
	uint64_t t0 = cmn_now_ns();
	json_object *v;
	int r;

	r = pf_vf_reset(d, s);
	s->reset_pending = false;
	if (r)
		return cmn_fail(&e->f, r, "VF %u: reset failed: %s", s->vf, cmn_strerror(r));
	json_object_object_add(ret, "duration_us",
			       json_object_new_int64((int64_t)((cmn_now_ns() - t0) / 1000)));
	r = pf_state_save_journal(d);
	if (r)
		pf_state_behind(d, r, "VF %u's reset ran, but the journal still holds it pending: "
				"if vgpud ends before it writes the journal again (it does when "
				"it stops), its next start runs the reset again", s->vf);
	cmn_info("VF %u (slice %s) reset", s->vf, s->uuid);
	v = json_object_new_object();
	json_object_object_add(v, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(v, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(v, "reset_count", json_object_new_int((int)s->resets));
	pf_event(d, "VF_RESET", v);
	return 0;
}

/* The "evict_ms" argument, else the daemon's reset_evict_ms. */
static int evict_ms_arg(struct pf_daemon *d, json_object *args, uint32_t *ms, struct pf_err *e)
{
	json_object *v;
	int64_t x;

	*ms = d->cfg.reset_evict_ms;
	if (!args || !json_object_object_get_ex(args, "evict_ms", &v))
		return 0;
	x = json_object_get_int64(v);
	if (!json_object_is_type(v, json_type_int) || x < 0 || x > PF_RESET_EVICT_MS_MAX)
		return cmn_fail(&e->f, -EINVAL, "\"evict_ms\" must be 0..%u (milliseconds the "
			       "guest gets to evict; 0: reset at once)", PF_RESET_EVICT_MS_MAX);
	*ms = (uint32_t)x;
	return 0;
}

/* Announce a reset of @s to its guest: a fresh number in the header, the event, the
 * deadline. The guest's old acknowledgement is cleared first, so only one written after
 * it saw this number counts. */
static void announce(struct pf_daemon *d, struct pf_slice *s, uint32_t ms)
{
	struct pf_reset_wait *w = &s->rst;

	if (!++s->reset_seq)
		s->reset_seq = 1;
	w->seq = s->reset_seq;
	w->evict_ms = ms;
	w->announced_ns = cmn_now_ns();
	w->deadline_ns = w->announced_ns + (uint64_t)ms * VGPU_NSEC_PER_MSEC;
	atomic_store((_Atomic uint32_t *)&s->hdr->reset_ack, 0);
	atomic_store((_Atomic uint32_t *)&s->hdr->reset_pending, w->seq);
	pf_endpoint_event2(s, VF_EVT_RESET_PENDING, w->seq, ms);
	pf_command_defer(d, &w->client, &w->id);
	cmn_info("VF %u: reset %u announced; the guest has %u ms to acknowledge", s->vf, w->seq,
		 ms);
}

int pf_reset_request(struct pf_daemon *d, struct pf_slice *s, json_object *args, bool dry,
		     json_object *ret, struct pf_err *e)
{
	uint32_t ms;
	int r;

	r = evict_ms_arg(d, args, &ms, e);
	if (r)
		return r;
	if (s->rst.seq)
		return cmn_fail(&e->f, -EBUSY, "VF %u: a reset is already announced and waits "
			       "for the guest (at most %u ms)", s->vf, s->rst.evict_ms);
	json_object_object_add(ret, "announced", json_object_new_boolean(pf_reset_announces(s, ms)));
	if (dry)
		return 0;
	/* Committed before the scrub: a loader that finds it pending finishes it. */
	s->reset_pending = true;
	r = pf_state_save_journal(d);
	if (r) {
		s->reset_pending = false;
		return cmn_fail(&e->f, r, "VF %u: cannot write the journal: %s", s->vf, cmn_strerror(r));
	}
	if (pf_reset_announces(s, ms)) {
		announce(d, s, ms);
		return 0;
	}
	return reset_now(d, s, ret, e);
}

/* End @s's wait: the reset runs now and the waiting request gets its reply. */
static void finish(struct pf_daemon *d, struct pf_slice *s, enum pf_reset_verdict how)
{
	struct pf_reset_wait w = s->rst;
	static const char *const why[] = {
		[PF_RESET_ACKED] = "acknowledged", [PF_RESET_TIMED_OUT] = "timed_out",
		[PF_RESET_GUEST_GONE] = "guest_gone",
	};
	json_object *ret = json_object_new_object();
	struct pf_err e = { 0 };
	uint64_t waited = cmn_now_ns() - w.announced_ns;
	int r;

	s->rst = (struct pf_reset_wait){ 0 };
	atomic_store((_Atomic uint32_t *)&s->hdr->reset_pending, 0);
	if (how == PF_RESET_ACKED)
		d->resets_acked++;
	else if (how == PF_RESET_TIMED_OUT)
		d->resets_timed_out++;
	if (how == PF_RESET_TIMED_OUT)
		cmn_warn("VF %u: no acknowledgement of reset %u within %u ms: resetting anyway",
			 s->vf, w.seq, w.evict_ms);
	json_object_object_add(ret, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(ret, "result", json_object_new_string("reset"));
	json_object_object_add(ret, "dry_run", json_object_new_boolean(false));
	json_object_object_add(ret, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(ret, "announced", json_object_new_boolean(true));
	json_object_object_add(ret, "guest", json_object_new_string(why[how]));
	json_object_object_add(ret, "waited_us", json_object_new_int64((int64_t)(waited / 1000)));
	cmn_log_scope_set(s->vf, s->uuid);
	r = reset_now(d, s, ret, &e);
	cmn_log_scope_clear();
	pf_command_reply_later(d, w.client, w.id, r, ret, &e);
}

/* Cancel @s's announced reset and record that before the requester hears of it: a reply
 * that says "did not run" must not be followed by a restart that runs it. A journal that
 * cannot be written still holds the reset pending, and the reply says so. */
static void cancel_journaled(struct pf_daemon *d, struct pf_slice *s, const char *why)
{
	struct pf_reset_wait w = s->rst;
	struct pf_err e = { 0 };
	int r;

	s->rst = (struct pf_reset_wait){ 0 };
	atomic_store((_Atomic uint32_t *)&s->hdr->reset_pending, 0);
	s->reset_pending = false;
	r = pf_state_save_journal(d);
	if (r) {
		cmn_fail(&e.f, -ECANCELED, "VF %u: the announced reset did not run: %s; the "
			 "journal cannot be written (%s) and still holds it pending: a restart of "
			 "vgpud runs it", s->vf, why, cmn_strerror(r));
		pf_state_behind(d, r, "VF %u's announced reset was cancelled, but the journal "
				"still holds it pending: if vgpud ends before it writes the "
				"journal again (it does when it stops), its next start runs it",
				s->vf);
	} else {
		cmn_fail(&e.f, -ECANCELED, "VF %u: the announced reset did not run: %s", s->vf,
			 why);
	}
	pf_command_reply_later(d, w.client, w.id, -ECANCELED, NULL, &e);
}

void pf_reset_tick(struct pf_daemon *d, uint64_t now_ns)
{
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		struct pf_slice *s = d->vfs[vf];
		enum pf_reset_verdict v;

		if (!s || !s->rst.seq)
			continue;
		/* A live migration that started meanwhile reads the VF: no reset under it. */
		if (pf_live_busy(d, s)) {
			cancel_journaled(d, s, "a live migration of the slice started");
			continue;
		}
		v = pf_reset_verdict(&s->rst, atomic_load((_Atomic uint32_t *)&s->hdr->reset_ack),
				     pf_endpoint_attached(s), now_ns);
		if (v != PF_RESET_WAIT)
			finish(d, s, v);
	}
}

int pf_reset_poll_ms(const struct pf_daemon *d, uint64_t now_ns, int max_ms)
{
	uint64_t best = (uint64_t)max_ms * VGPU_NSEC_PER_MSEC;

	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		const struct pf_slice *s = d->vfs[vf];

		if (!s || !s->rst.seq)
			continue;
		if (s->rst.deadline_ns <= now_ns)
			return 0;
		if (s->rst.deadline_ns - now_ns < best)
			best = s->rst.deadline_ns - now_ns;
	}
	/* Rounded up: waking a little early would only spin until the deadline. */
	return (int)((best + VGPU_NSEC_PER_MSEC - 1) / VGPU_NSEC_PER_MSEC);
}

void pf_reset_cancel(struct pf_daemon *d, struct pf_slice *s, const char *why)
{
	struct pf_reset_wait w = s->rst;
	struct pf_err e = { 0 };

	if (!w.seq)
		return;
	s->rst = (struct pf_reset_wait){ 0 };
	atomic_store((_Atomic uint32_t *)&s->hdr->reset_pending, 0);
	if (!why) {	/* the daemon lets go of the slice: the journal keeps the reset */
		json_object_put(w.id);
		return;
	}
	s->reset_pending = false;
	cmn_fail(&e.f, -ECANCELED, "VF %u: the announced reset did not run: %s", s->vf, why);
	pf_command_reply_later(d, w.client, w.id, -ECANCELED, NULL, &e);
}

void pf_reset_client_gone(struct pf_daemon *d, const struct pf_client *c)
{
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		if (d->vfs[vf] && d->vfs[vf]->rst.client == c)
			d->vfs[vf]->rst.client = NULL;
}
