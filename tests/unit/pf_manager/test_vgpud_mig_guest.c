// SPDX-License-Identifier: MIT
/* What a guest announced moves with a live migration (stream 1.3's GUEST frame): a guest
 * attached to vgpud A through vf1.master.sock announces ABI 2.5 with VF_INFO_REQ_RESET_ACK,
 * the slice moves live to vgpud B, and there the migrated guest's VMM, which attaches
 * through B's vf1.master.sock and does not announce again, has B announce a reset-vf and
 * wait for its acknowledgement at once: whether it attached while B was resuming the slice
 * (as QEMU started with -incoming does, before the final pass) or after the move. A guest
 * that asked for nothing is reset at once on B, as on A. Every wait is for an event or a
 * reply, never a sleep. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"

#define U1		"6c6c6c6c-1111-4111-8111-111111111111"
#define LONG_MS		10000	/* longer than any test waits: only an ack ends it early */

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M",
			       "--reset-evict-ms", "100", NULL };

struct fixture {
	struct tdaemon *a, *b;
	struct tclient *ea, *eb;	/* event listeners */
	char sock[128];			/* B's migrate-incoming address */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (t_daemon_pair(daemon_args, &f->a, &f->b))
		return -1;
	snprintf(f->sock, sizeof(f->sock), "%s/mig.sock", f->b->root);
	if (T_CTL(f->a, "define", "-t", "vgpu-512M", "-u", U1) || T_CTL(f->a, "start", "-u", U1))
		return -1;
	f->ea = t_client(f->a, true);
	f->eb = t_client(f->b, true);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	t_client_free(f->ea);
	t_client_free(f->eb);
	free(f);
	return t_teardown(state);
}

/* The rings as the header places them now, and no event of an earlier guest. */
static void rings_take(struct tguest *g)
{
	uint8_t slot[VF_EVT_SLOT_SIZE];

	assert_int_equal(g->hdr->host_peer, VF_EP_HOST_PEER);
	assert_int_equal(cmn_ring_attach(&g->req, g->bar + g->hdr->req_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->rsp, g->bar + g->hdr->rsp_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->evt, g->bar + g->hdr->evt_off, g->hdr->ring_region_size), 0);
	while (!cmn_ring_pop(&g->evt, slot))
		;
}

/* Attach to @d's vf1.master.sock as the VMM of a guest in a VM does, the rings mapped if
 * @rings (on a slice still resuming, the VMM's copy brings them later). vgpud refuses while
 * it still holds the last guest's attachment (it sees the hangup on its loop's next poll):
 * retried until it lets go, however long that takes. */
static void attach_master(struct tdaemon *d, struct tguest *g, bool rings)
{
	char path[300];

	snprintf(path, sizeof(path), "%s/vf1.master.sock", d->run);
	while (t_guest_attach_as(path, g, true))
		usleep(1000);
	if (rings)
		rings_take(g);
}

/* The guest's GET_INFO: ABI 2.5 (this build's) with @flags. */
static void announce(struct tguest *g, uint32_t flags)
{
	struct vf_msg_info_req rq = { .abi_version = VGPU_ABI_VERSION, .flags = flags };
	struct vf_msg_info mi;

	assert_int_equal(t_guest_call(g, VF_MSG_GET_INFO, &rq, sizeof(rq), &mi, sizeof(mi), NULL), 0);
}

/* The next event of the guest's ring (waiting for its interrupt when it is empty). */
static void next_event(struct tguest *g, struct vf_event *ev)
{
	uint8_t slot[VF_EVT_SLOT_SIZE];

	while (cmn_ring_pop(&g->evt, slot))
		assert_int_equal(t_guest_wait(g, VF_VEC_EVENT), 0);
	memcpy(ev, slot, sizeof(*ev));
}

static const char *ret_str(json_object *rep, const char *key)
{
	json_object *v;

	assert_non_null(t_ret(rep));
	assert_true(json_object_object_get_ex(t_ret(rep), key, &v));
	return json_object_get_string(v);
}

static bool ret_bool(json_object *rep, const char *key)
{
	json_object *v;

	assert_non_null(t_ret(rep));
	assert_true(json_object_object_get_ex(t_ret(rep), key, &v));
	return json_object_get_boolean(v);
}

/* Send reset-vf of VF 1 on @d with a wait of LONG_MS without reading the reply. */
static struct tclient *send_reset(struct tdaemon *d)
{
	struct tclient *c = t_client(d, true);
	char req[160];
	int n = snprintf(req, sizeof(req), "{\"execute\":\"reset-vf\",\"id\":7,\"arguments\":"
			 "{\"vf\":1,\"evict_ms\":%d}}\n", LONG_MS);

	t_send_raw(c, req, (size_t)n);
	return c;
}

/* A reset-vf on B is announced to @g and waits for its acknowledgement. */
static void reset_announced(struct fixture *f, struct tguest *g)
{
	struct tclient *c = send_reset(f->b);
	struct vf_event ev;
	uint64_t one = 1;
	json_object *rep;

	next_event(g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET_PENDING);
	assert_int_not_equal(ev.arg0, 0);
	assert_int_equal(ev.arg1, LONG_MS);
	atomic_store((_Atomic uint32_t *)&g->hdr->reset_ack, (uint32_t)ev.arg0);
	assert_int_equal(write(g->to_host[VF_VEC_EVENT], &one, sizeof(one)), (ssize_t)sizeof(one));
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "result"), "reset");
	assert_string_equal(ret_str(rep, "guest"), "acknowledged");
	json_object_put(rep);
	assert_int_equal(t_status_u64(c, "resets_acknowledged"), 1);
	t_client_free(c);
}

/* A guest on A asks for @flags; U1 moves to B with an automatic switchover. With
 * @attach_early the VMM attaches to B before the final pass into @g_b, else after. */
static void move(struct fixture *f, uint32_t flags, bool attach_early, struct tguest *g_b)
{
	struct tguest g;

	attach_master(f->a, &g, true);
	announce(&g, flags);
	assert_int_equal(T_CTL(f->b, "migrate-incoming", "--listen", f->sock, "-u", U1), 0);
	if (attach_early) {
		/* A waits for a manual switchover once it converged: B runs RESUMING. */
		assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock, "--switchover",
				       "manual"), 0);
		json_object_put(t_wait_migration(f->ea, "waiting"));
		attach_master(f->b, g_b, false);
		assert_int_equal(T_CTL(f->a, "migrate-switchover", "-u", U1), 0);
	} else {
		assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 0);
	}
	json_object_put(t_wait_migration(f->ea, "completed"));
	json_object_put(t_wait_migration(f->eb, "completed"));
	t_guest_detach(&g);		/* A let go of the slice */
	if (!attach_early)
		attach_master(f->b, g_b, true);
	else
		rings_take(g_b);		/* the final pass brought the source's */
}

/* The VMM attaches after the move: B holds the announcement for it. */
static void test_flags_after_move(void **state)
{
	struct fixture *f = *state;
	struct tguest g;

	move(f, VF_INFO_REQ_RESET_ACK, false, &g);
	reset_announced(f, &g);
	t_guest_detach(&g);
}

/* The VMM attached while B resumed the slice (before the final pass that carries the
 * announcement): it has announced once the move is done. */
static void test_flags_attached_early(void **state)
{
	struct fixture *f = *state;
	struct tguest g;

	move(f, VF_INFO_REQ_RESET_ACK, true, &g);
	reset_announced(f, &g);
	t_guest_detach(&g);
}

/* A 2.5 guest that asked for nothing is reset at once on B (no announcement). */
static void test_no_flags(void **state)
{
	struct fixture *f = *state;
	struct tclient *c;
	struct tguest g;
	struct vf_event ev;
	json_object *rep;

	move(f, 0, false, &g);
	c = send_reset(f->b);
	rep = t_reply(c);
	assert_string_equal(ret_str(rep, "result"), "reset");
	assert_false(ret_bool(rep, "announced"));
	json_object_put(rep);
	next_event(&g, &ev);
	assert_int_equal(ev.type, VF_EVT_RESET);	/* no VF_EVT_RESET_PENDING before it */
	t_client_free(c);
	t_guest_detach(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_flags_after_move, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flags_attached_early, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_flags, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
