// SPDX-License-Identifier: MIT
/* A guest's mailbox requests end with its attachment. The rings live in the slice's BAR2,
 * not in the attachment, and vgpud serves them again as soon as the next guest attaches; a
 * guest driver (vf_guest, guest-kmod) skips the replies queued when it attaches and then
 * takes the first reply with its request's seq and type. So a request the old guest left
 * queued (vgpud had not taken it: the guest left its replies unread) must die with the old
 * attachment: served after the new guest attached, its reply would come after that skip,
 * with a seq and type the new guest may be waiting for; its RM call would run as the VF
 * after the old guest's clients were disabled, for the new guest to carry; its GET_INFO
 * would announce the old driver's ABI and flags for the new attachment. With a real vgpud
 * and our own clients: the old guest fills its reply ring, queues a GET_INFO, an RM client
 * allocation and a PING and leaves; the next guest's first call, a PING of that seq, gets
 * its own echo as the first reply, and none of the three took effect. */
#include <stdatomic.h>

#include "pf_test.h"
#include <vgpu/rm.h>

#define SLICE	"5e1f0a77-0d7e-4c1b-9a6e-3a1d2c4b5e60"

static struct tdaemon *dmn;

static int setup(void **state)
{
	(void)state;
	return t_setup_two_vfs(&dmn, SLICE, NULL);
}

static void attach(struct tguest *g)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/vf1.sock", dmn->run);
	assert_int_equal(t_guest_attach(path, g), 0);
}

/* query-slices' guest_abi of the slice ("null": nothing announced). */
static void guest_abi(char *out, size_t len)
{
	json_object *all, *arr, *v;

	assert_int_equal(T_CTL(dmn, "--json", "list", "-u", SLICE), 0);
	all = t_out_json();
	arr = all;
	if (!json_object_is_type(all, json_type_array))
		assert_true(json_object_object_get_ex(all, "slices", &arr));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "guest_abi", &v));
	snprintf(out, len, "%s", v ? json_object_get_string(v) : "null");
	json_object_put(all);
}

/* Skip the replies queued before this attachment, as a guest driver does when it attaches
 * (vf_guest's vf_bar_rings(), guest-kmod's vvf_ring_skip()): they were someone else's. */
static void skip_old_replies(struct tguest *g)
{
	g->rsp.cached_tail = g->rsp.cached_head;
	atomic_store_explicit(cmn_ring_tail_(g->rsp.hdr), g->rsp.cached_tail,
			      memory_order_release);
}

/* Fill the reply ring with PING replies the guest leaves unread: with it full, vgpud takes
 * no further request of the guest's. */
static void fill_replies(struct tguest *g)
{
	uint32_t cap = cmn_ring_capacity(&g->rsp);

	for (uint32_t i = 0; i < cap; i++)
		t_guest_post(g, VF_MSG_PING, "old", 3);
	/* vgpud rings the vector after each reply is in the ring: no count is missed. */
	while (cmn_ring_count(&g->rsp) < cap)
		assert_int_equal(t_guest_wait(g, VF_VEC_MBOX), 0);
}

/* What the old guest leaves queued: a GET_INFO announcing its ABI and asking for reset
 * acknowledgements, an RM client allocation, and a PING; the PING's seq is returned. */
static uint32_t queue_requests(struct tguest *g)
{
	struct vf_msg_info_req rq = { .abi_version = VGPU_ABI_VERSION,
				      .flags = VF_INFO_REQ_RESET_ACK };
	struct vgpu_rm_msg c = { .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
				 .abi_version = VGPU_ABI_VERSION, .op = VGPU_RM_OP_ALLOC_CLIENT,
				 .length = sizeof(c) };

	t_guest_post(g, VF_MSG_GET_INFO, &rq, sizeof(rq));
	t_guest_post(g, VF_MSG_RM, &c, sizeof(c));
	t_guest_post(g, VF_MSG_PING, "stale", 5);
	/* Not taken: there is no room for their replies. */
	assert_int_equal(cmn_ring_count(&g->req), 3);
	return g->seq;
}

/* The next reply in @g's ring, waiting for it on the mailbox vector. */
static const struct vf_msg *next_reply(struct tguest *g, uint8_t *slot)
{
	while (cmn_ring_pop(&g->rsp, slot) == -EAGAIN)
		assert_int_equal(t_guest_wait(g, VF_VEC_MBOX), 0);
	return (const struct vf_msg *)slot;
}

/* What reached the new guest before the reply to its own PING (@seq, echoing "fresh"). */
struct foreign {
	unsigned int replies;		/* replies to requests it did not send */
	unsigned int impostors;		/* ... of them with its PING's seq and type */
};

static struct foreign await_own_ping(struct tguest *g, uint32_t seq)
{
	uint8_t slot[VF_MBOX_SLOT_SIZE];
	struct foreign f = { 0 };

	for (;;) {
		const struct vf_msg *m = next_reply(g, slot);
		bool match = m->seq == seq && m->type == VF_MSG_PING;

		if (match && m->length == 5 && !memcmp(m + 1, "fresh", 5))
			return f;
		f.replies++;
		f.impostors += match;
	}
}

static void test_queued_requests_die_with_their_guest(void **state)
{
	uint8_t slot[VF_MBOX_SLOT_SIZE];
	const struct vf_msg *m;
	struct tguest old, g;
	struct foreign f;
	uint64_t objs;
	uint32_t seq;
	char abi[32];

	(void)state;
	attach(&old);
	fill_replies(&old);
	seq = queue_requests(&old);
	t_guest_detach(&old);
	t_wait_attached(dmn, SLICE, false);

	attach(&g);
	skip_old_replies(&g);
	/* The new guest's first call has the seq and type of the old guest's last request. */
	g.seq = seq - 1;
	t_guest_post(&g, VF_MSG_PING, "fresh", 5);
	f = await_own_ping(&g, seq);
	objs = t_rm_objects(dmn, 1);
	guest_abi(abi, sizeof(abi));
	if (f.replies || objs || strcmp(abi, "null"))
		fail_msg("the old guest's queued requests reached the new attachment: %u replies "
			 "before its own (%u with its PING's seq and type), %llu RM objects, "
			 "guest_abi %s", f.replies, f.impostors, (unsigned long long)objs, abi);
	/* Served as any guest: its mailbox works on (next_reply(), not t_guest_call(): the
	 * vector may still hold the last reply's ring, which would not wait for this one). */
	t_guest_post(&g, VF_MSG_PING, "on", 2);
	m = next_reply(&g, slot);
	assert_int_equal(m->seq, g.seq);
	assert_int_equal(m->status, 0);
	t_guest_detach(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_queued_requests_die_with_their_guest),
	};

	return cmocka_run_group_tests(tests, setup, t_teardown);
}
