// SPDX-License-Identifier: MIT
/* A VF reset announced to its guest (ABI 2.5, vgpu/vf_bar.h "RESET ANNOUNCEMENT"). The
 * decision alone, on a clock the test sets: an acknowledgement of the announced number ends
 * the wait at once, anything else waits for the deadline, a gone guest ends it. Then with a
 * real vgpud and this test as the guest: a guest that asked hears VF_EVT_RESET_PENDING,
 * its mailbox is served while the reset waits, and reset-vf is answered when the reset
 * ran: "acknowledged" after its acknowledgement, "timed_out" without one, and a stale
 * number ends nothing; a guest that did not ask (before 2.5, or a 2.5 driver without the
 * flag) is reset at once, as before. */
#include "common/compiler.h"
#include "pf_manager/pf_internal.h"
#include "pf_test.h"

#define SLICE	"5d0c3a1e-25a0-4c5b-9f57-1b7e3c2e9a41"
#define ABI_2_4	((uint32_t)VGPU_ABI_MAJOR << 16 | 4)
#define MARK	"GUESTDATA-GUESTDATA"
#define MARK_OFF	4096
#define LONG_MS	10000		/* longer than any test waits: only an ack ends it early */

/* ---- the decision, on the test's clock ------------------------------------------------- */

static void test_verdict(void **state)
{
	struct pf_reset_wait w = { .seq = 7, .deadline_ns = 1000 };

	(void)state;
	assert_int_equal(pf_reset_verdict(&w, 0, true, 0), PF_RESET_WAIT);
	assert_int_equal(pf_reset_verdict(&w, 7, true, 0), PF_RESET_ACKED);
	assert_int_equal(pf_reset_verdict(&w, 7, true, 999), PF_RESET_ACKED);
	/* A stale or wrong number is no acknowledgement: only the deadline ends it. */
	assert_int_equal(pf_reset_verdict(&w, 6, true, 999), PF_RESET_WAIT);
	assert_int_equal(pf_reset_verdict(&w, 8, true, 999), PF_RESET_WAIT);
	assert_int_equal(pf_reset_verdict(&w, 6, true, 1000), PF_RESET_TIMED_OUT);
	assert_int_equal(pf_reset_verdict(&w, 0, true, UINT64_MAX), PF_RESET_TIMED_OUT);
	/* An acknowledgement that came in time wins over a deadline seen late. */
	assert_int_equal(pf_reset_verdict(&w, 7, true, 5000), PF_RESET_ACKED);
	assert_int_equal(pf_reset_verdict(&w, 0, false, 0), PF_RESET_GUEST_GONE);
	w.seq = 0;		/* nothing announced */
	assert_int_equal(pf_reset_verdict(&w, 0, true, UINT64_MAX), PF_RESET_WAIT);
}

/* ---- with vgpud ---------------------------------------------------------------------------- */

static struct tdaemon *dmn;
static char ep_path[300];

static int setup(void **state)
{
	(void)state;
	dmn = t_daemon_new();
	if (t_daemon_start(dmn, "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			   "--spare-vram", "256M", "--reset-evict-ms", "100", NULL))
		return -1;
	if (T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", SLICE) || T_CTL(dmn, "start", "-u", SLICE))
		return -1;
	snprintf(ep_path, sizeof(ep_path), "%s/vf1.sock", dmn->run);
	return 0;
}

static int teardown(void **state)
{
	t_daemon_free(dmn);
	dmn = NULL;
	return t_teardown(state);
}

/* Attach and announce ABI @abi with GET_INFO flags @flags (@abi 0: no payload, a driver
 * before 2.3). vgpud refuses while it still holds the last guest's attachment (it sees the
 * hangup on its loop's next poll): retried until it lets go, however long that takes. */
static void attach(struct tguest *g, uint32_t abi, uint32_t flags)
{
	struct vf_msg_info_req rq = { .abi_version = abi, .flags = flags };
	struct vf_msg_info mi;
	uint8_t slot[VF_EVT_SLOT_SIZE];

	while (t_guest_attach(ep_path, g))
		usleep(1000);
	while (!cmn_ring_pop(&g->evt, slot))
		;	/* events of an earlier guest */
	assert_int_equal(t_guest_call(g, VF_MSG_GET_INFO, abi ? &rq : NULL, abi ? sizeof(rq) : 0,
				      &mi, sizeof(mi), NULL), 0);
}

/* The next event of the guest's ring (waiting for its interrupt when it is empty). */
static void next_event(struct tguest *g, struct vf_event *ev)
{
	uint8_t slot[VF_EVT_SLOT_SIZE];

	while (cmn_ring_pop(&g->evt, slot))
		assert_int_equal(t_guest_wait(g, VF_VEC_EVENT), 0);
	memcpy(ev, slot, sizeof(*ev));
}

/* After a reset: the rings were formatted again, the guest takes them anew. */
static void rings_again(struct tguest *g)
{
	assert_int_equal(cmn_ring_attach(&g->req, g->bar + g->hdr->req_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->rsp, g->bar + g->hdr->rsp_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->evt, g->bar + g->hdr->evt_off, g->hdr->ring_region_size), 0);
}

/* Send reset-vf of VF 1 with "evict_ms" @ms on @c without reading the reply. */
static void send_reset(struct tclient *c, int ms)
{
	char req[160];
	int n = snprintf(req, sizeof(req), "{\"execute\":\"reset-vf\",\"id\":42,\"arguments\":"
			 "{\"vf\":1,\"evict_ms\":%d}}\n", ms);

	t_send_raw(c, req, (size_t)n);
}

/* The reply waiting on @c right now, NULL if none is there yet (no waiting). */
static json_object *reply_now(struct tclient *c)
{
	for (;;) {
		json_object *o = t_read_json(c, 0), *ev;

		if (!o || !json_object_object_get_ex(o, "event", &ev))
			return o;
		json_object_put(o);
	}
}

static const char *ret_str(json_object *rep, const char *key)
{
	json_object *v;

	assert_non_null(t_ret(rep));
	assert_true(json_object_object_get_ex(t_ret(rep), key, &v));
	return json_object_get_string(v);
}

/* Acknowledge reset number @seq as a guest does: the header, then its event vector. */
static void ack(struct tguest *g, uint32_t seq)
{
	uint64_t one = 1;

	atomic_store((_Atomic uint32_t *)&g->hdr->reset_ack, seq);
	assert_int_equal(write(g->to_host[VF_VEC_EVENT], &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* Until vgpud has weighed the acknowledgements rung so far (ack()): its loop reads the
 * guest's event vector, then checks the header's acknowledgement in the same iteration
 * (pf_reset_tick, after the dispatch). So once the vector is drained, a command sent after
 * that is read in a later iteration, and its reply comes after that check. As long as it
 * takes: a vector never read hangs the test until the suite's timeout. */
static void stale_acks_seen(struct tguest *g)
{
	struct pollfd p = { .fd = g->to_host[VF_VEC_EVENT], .events = POLLIN };

	while (poll(&p, 1, 0) == 1)
		usleep(1000);
	assert_int_equal(T_CTL(dmn, "status"), 0);
}

/* Announced: the event carries the header's number and the wait; nothing is answered yet
 * and the mailbox still works; the acknowledgement ends the wait well before its 10 s. */
static void test_ack_resets_at_once(void **state)
{
	struct tclient *c = t_client(dmn, true);
	struct tguest g;
	struct vf_event ev;
	json_object *rep, *id;
	uint32_t before;

	(void)state;
	attach(&g, VGPU_ABI_VERSION, VF_INFO_REQ_RESET_ACK);
	before = g.hdr->reset_count;
	send_reset(c, LONG_MS);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	assert_int_not_equal(ev.arg0, 0);
	assert_int_equal(ev.arg1, LONG_MS);
	assert_int_equal(atomic_load((_Atomic uint32_t *)&g.hdr->reset_pending), (uint32_t)ev.arg0);
	assert_int_equal(g.hdr->reset_count, before);
	assert_int_equal(g.hdr->state, VF_STATE_READY);
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "evict", 5, NULL, 0, NULL), 0);
	assert_null(reply_now(c));
	ack(&g, (uint32_t)ev.arg0);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "guest"), "acknowledged");
	assert_string_equal(ret_str(rep, "result"), "reset");
	assert_true(json_object_object_get_ex(rep, "id", &id));
	assert_int_equal(json_object_get_int(id), 42);
	json_object_put(rep);
	assert_int_equal(g.hdr->reset_count, before + 1);
	assert_int_equal(atomic_load((_Atomic uint32_t *)&g.hdr->reset_pending), 0);
	rings_again(&g);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET);
	assert_int_equal(ev.arg0, before + 1);
	assert_int_equal(t_status_u64(c, "resets_acknowledged"), 1);
	assert_int_equal(t_status_u64(c, "resets_timed_out"), 0);
	assert_int_equal(t_status_u64(c, "reset_evict_ms"), 100);
	t_guest_detach(&g);
	t_client_free(c);
}

/* No acknowledgement: the reset runs when the wait is over. */
static void test_no_ack_times_out(void **state)
{
	struct tclient *c = t_client(dmn, true);
	struct tguest g;
	struct vf_event ev;
	json_object *rep;
	uint32_t before;

	(void)state;
	attach(&g, VGPU_ABI_VERSION, VF_INFO_REQ_RESET_ACK);
	before = g.hdr->reset_count;
	send_reset(c, 20);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "guest"), "timed_out");
	json_object_put(rep);
	assert_int_equal(t_status_u64(c, "resets_timed_out"), 1);
	assert_int_equal(g.hdr->reset_count, before + 1);
	rings_again(&g);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET);
	/* vgpuctl: the daemon's own wait (--reset-evict-ms), and what it says of it. */
	assert_int_equal(T_CTL(dmn, "--dry-run", "reset", "1"), 0);
	assert_non_null(strstr(t_out.out, "would be announced to the guest first"));
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	assert_non_null(strstr(t_out.out, "announced to the guest: timed_out after"));
	assert_int_equal(g.hdr->reset_count, before + 2);
	t_guest_detach(&g);
	t_client_free(c);
}

/* The number of an earlier reset (and a wrong one) acknowledges nothing: once vgpud has
 * weighed both, the reset still waits, unanswered; the right number then ends it. */
static void test_stale_ack_ignored(void **state)
{
	struct tclient *c = t_client(dmn, true);
	struct tguest g;
	struct vf_event ev;
	json_object *rep;
	uint32_t first;

	(void)state;
	attach(&g, VGPU_ABI_VERSION, VF_INFO_REQ_RESET_ACK);
	send_reset(c, LONG_MS);
	next_event(&g, &ev);
	first = (uint32_t)ev.arg0;
	ack(&g, first);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "guest"), "acknowledged");
	json_object_put(rep);
	rings_again(&g);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET);

	send_reset(c, LONG_MS);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	assert_int_not_equal((uint32_t)ev.arg0, first);
	ack(&g, first);
	ack(&g, (uint32_t)ev.arg0 + 1);
	stale_acks_seen(&g);
	/* Both were weighed and neither ended the wait. */
	assert_int_equal(atomic_load((_Atomic uint32_t *)&g.hdr->reset_pending), (uint32_t)ev.arg0);
	assert_null(reply_now(c));
	ack(&g, (uint32_t)ev.arg0);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "guest"), "acknowledged");
	json_object_put(rep);
	t_guest_detach(&g);
	t_client_free(c);
}

/* Guests that did not ask are reset at once, the reply in hand before anything else. */
static const struct old_case {
	const char *name;
	uint32_t abi, flags;
} old_cases[] = {
	{ "2.4 guest", ABI_2_4, 0 },
	{ "2.4 guest with the flag", ABI_2_4, VF_INFO_REQ_RESET_ACK },
	{ "2.5 guest without the flag", VGPU_ABI_VERSION, 0 },
	{ "guest before 2.3 (no payload)", 0, 0 },
};

static void test_old_guest_no_wait(void **state)
{
	const struct old_case *oc = *state;
	struct tclient *c = t_client(dmn, true);
	struct tguest g;
	struct vf_event ev;
	json_object *rep, *v;
	uint32_t before;

	attach(&g, oc->abi, oc->flags);
	before = g.hdr->reset_count;
	send_reset(c, LONG_MS);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "result"), "reset");
	assert_true(json_object_object_get_ex(t_ret(rep), "announced", &v));
	assert_false(json_object_get_boolean(v));
	json_object_put(rep);
	assert_int_equal(g.hdr->reset_count, before + 1);
	rings_again(&g);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET);	/* no VF_EVT_RESET_PENDING before it */
	t_guest_detach(&g);
	t_client_free(c);
}

/* While one waits: another reset is refused; the guest leaving ends the wait; a stop
 * answers the waiting request with its reason. */
static void test_busy_and_gone(void **state)
{
	struct tclient *c = t_client(dmn, true), *c2 = t_client(dmn, true);
	struct tguest g;
	struct vf_event ev;
	json_object *rep;

	(void)state;
	attach(&g, VGPU_ABI_VERSION, VF_INFO_REQ_RESET_ACK);
	send_reset(c, LONG_MS);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	send_reset(c2, LONG_MS);
	rep = t_reply(c2);
	assert_string_equal(t_err_class(rep), "Conflict");
	json_object_put(rep);
	t_guest_detach(&g);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "guest"), "guest_gone");
	json_object_put(rep);

	attach(&g, VGPU_ABI_VERSION, VF_INFO_REQ_RESET_ACK);
	send_reset(c, LONG_MS);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	rep = t_exec(c2, "stop-slice", t_args("uuid", SLICE));
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	rep = t_reply(c);
	assert_non_null(rep);
	assert_null(t_ret(rep));
	json_object_put(rep);
	t_guest_detach(&g);
	assert_int_equal(T_CTL(dmn, "start", "-u", SLICE), 0);
	t_client_free(c);
	t_client_free(c2);
}

/* "evict_ms" out of range is refused by name; nothing is reset. */
static void test_bad_evict_ms(void **state)
{
	struct tclient *c = t_client(dmn, true);
	json_object *rep;

	(void)state;
	send_reset(c, -1);
	rep = t_reply(c);
	assert_string_equal(t_err_class(rep), "InvalidArgument");
	json_object_put(rep);
	send_reset(c, PF_RESET_EVICT_MS_MAX + 1);
	rep = t_reply(c);
	assert_string_equal(t_err_class(rep), "InvalidArgument");
	json_object_put(rep);
	t_client_free(c);
}

/* The error reply @rep's text. */
static const char *err_desc(json_object *rep)
{
	json_object *e, *v;

	assert_true(json_object_object_get_ex(rep, "error", &e));
	assert_true(json_object_object_get_ex(e, "desc", &v));
	return json_object_get_string(v);
}

/* @uuid's reset_count as query-slices reports it. */
static int slice_resets(struct tclient *c, const char *uuid)
{
	json_object *rep = t_exec(c, "query-slices", NULL), *arr;
	int n = -1;

	assert_non_null(t_ret(rep));
	assert_true(json_object_object_get_ex(t_ret(rep), "slices", &arr));
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *s = json_object_array_get_idx(arr, i);

		if (!strcmp(json_object_get_string(json_object_object_get(s, "uuid")), uuid))
			n = json_object_get_int(json_object_object_get(s, "reset_count"));
	}
	json_object_put(rep);
	assert_int_not_equal(n, -1);
	return n;
}

/* The journal cannot be written once the announced reset ran (its temporary file's name
 * is taken by a directory): the reset stands, the reply says it is not durable and that
 * a crash makes the next start run it again, and vgpud takes no change until restarted.
 * Killed (-9), vgpud then finds the reset pending in the journal and runs it again (what
 * the guest wrote since is scrubbed). Last: it restarts the daemon. */
static void test_journal_unwritable_after_reset(void **state)
{
	struct tclient *c = t_client(dmn, true);
	static char buf[65536];
	char tmp[320], journal[300];
	struct tguest g;
	struct vf_event ev;
	json_object *rep;
	uint32_t before;
	int fd;

	(void)state;
	snprintf(journal, sizeof(journal), "%s/journal.json", dmn->state);
	snprintf(tmp, sizeof(tmp), "%s.tmp", journal);
	attach(&g, VGPU_ABI_VERSION, VF_INFO_REQ_RESET_ACK);
	before = g.hdr->reset_count;
	assert_int_equal(slice_resets(c, SLICE), (int)before);
	send_reset(c, LONG_MS);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	assert_int_equal(mkdir(tmp, 0700), 0);
	ack(&g, (uint32_t)ev.arg0);
	rep = t_reply(c);
	assert_null(t_ret(rep));
	assert_non_null(strstr(err_desc(rep), "not durable"));
	assert_non_null(strstr(err_desc(rep), "its next start runs the reset again"));
	assert_non_null(strstr(err_desc(rep), "Is a directory"));
	json_object_put(rep);
	assert_int_equal(g.hdr->reset_count, before + 1);
	assert_int_equal(slice_resets(c, SLICE), (int)before + 1);
	/* The journal on disk still holds the reset pending. */
	fd = open(journal, O_RDONLY);
	assert_true(fd >= 0);
	t_read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "\"reset_pending\"")); /* written only when true */
	/* Read-only: a change is refused naming why, a query still answered. */
	assert_int_not_equal(T_CTL(dmn, "set-vfs", "1"), 0);
	assert_non_null(strstr(t_out.err, "no changes until it is restarted"));
	assert_non_null(strstr(t_out.err, "runs the reset again"));
	assert_int_equal(T_CTL(dmn, "status"), 0);
	t_guest_detach(&g);
	t_client_free(c);
	/* What the guest wrote after the reset, for the restart's reset to scrub. */
	fd = t_bar_open(dmn, 1);
	assert_int_equal(pwrite(fd, MARK, sizeof(MARK), MARK_OFF), (ssize_t)sizeof(MARK));
	close(fd);

	assert_int_equal(rmdir(tmp), 0);
	assert_int_equal(t_daemon_stop(dmn, SIGKILL), 128 + SIGKILL);
	assert_int_equal(t_daemon_start(dmn, "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
					"--spare-vram", "256M", "--reset-evict-ms", "100", NULL), 0);
	/* The count already held the pending reset; its scrub ran again. */
	c = t_client(dmn, true);
	assert_int_equal(slice_resets(c, SLICE), (int)before + 1);
	fd = t_bar_open(dmn, 1);
	assert_int_equal(pread(fd, buf, sizeof(MARK), MARK_OFF), (ssize_t)sizeof(MARK));
	close(fd);
	assert_memory_not_equal(buf, MARK, sizeof(MARK));
	assert_int_equal(T_CTL(dmn, "set-vfs", "2"), 0);	/* changes taken again */
	t_client_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verdict),
		cmocka_unit_test(test_ack_resets_at_once),
		cmocka_unit_test(test_no_ack_times_out),
		cmocka_unit_test(test_stale_ack_ignored),
		{ old_cases[0].name, test_old_guest_no_wait, NULL, NULL, (void *)&old_cases[0] },
		{ old_cases[1].name, test_old_guest_no_wait, NULL, NULL, (void *)&old_cases[1] },
		{ old_cases[2].name, test_old_guest_no_wait, NULL, NULL, (void *)&old_cases[2] },
		{ old_cases[3].name, test_old_guest_no_wait, NULL, NULL, (void *)&old_cases[3] },
		cmocka_unit_test(test_busy_and_gone),
		cmocka_unit_test(test_bad_evict_ms),
		cmocka_unit_test(test_journal_unwritable_after_reset),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
