// SPDX-License-Identifier: MIT
/* The endpoint ABI 2.3 negotiation with a real vgpud and our own client: vf<N>.sock keeps
 * the peer layout of every ABI 2 guest (vgpud peer 0, the guest the VF number, header
 * host_peer 0); vf<N>.master.sock makes the guest peer 0 and vgpud VF_EP_HOST_PEER, and
 * the header says so before the BAR is handed over. What the guest announces in GET_INFO
 * (its ABI, or nothing: a driver before 2.3) is what query-slices reports, and a new
 * attachment starts from nothing again, except the first one through vf<N>.master.sock after
 * the slice moved (save on one vgpud, restore on another): that is the migrated guest's
 * QEMU, and the guest, which announced on the source, does not announce again. */
#include "common/compiler.h"
#include "pf_test.h"

#define SLICE	"7b4d0ee3-0023-4c7f-8a2f-7f1d3c3e0e81"

static struct tdaemon *dmn;

static int setup(void **state)
{
	(void)state;
	return t_setup_two_vfs(&dmn, SLICE, NULL);
}

/* The slice's entry in vgpuctl's JSON list of @d (owned by the caller). */
static json_object *slice_json_of(struct tdaemon *d)
{
	json_object *all, *arr, *s;

	assert_int_equal(T_CTL(d, "--json", "list", "-u", SLICE), 0);
	all = t_out_json();
	assert_non_null(all);
	if (json_object_is_type(all, json_type_array)) {
		arr = all;
	} else {
		assert_true(json_object_object_get_ex(all, "slices", &arr));
	}
	assert_int_equal(json_object_array_length(arr), 1);
	s = json_object_get(json_object_array_get_idx(arr, 0));
	json_object_put(all);
	return s;
}

/* query-slices' @key of the slice on @d as a string ("" when absent, "null" when null). */
static void slice_field_of(struct tdaemon *d, const char *key, char *out, size_t len)
{
	json_object *s = slice_json_of(d), *v;

	if (!json_object_object_get_ex(s, key, &v))
		snprintf(out, len, "%s", "");
	else
		snprintf(out, len, "%s", v ? json_object_get_string(v) : "null");
	json_object_put(s);
}

static void slice_field(const char *key, char *out, size_t len)
{
	slice_field_of(dmn, key, out, len);
}

/* Until vgpud on @d reports the slice detached: it sees a guest go on its loop's next
 * poll, however long a loaded host makes that (a slice that stays attached hangs the test
 * until the suite's timeout, which fails it). */
static void wait_detached_on(struct tdaemon *d)
{
	t_wait_attached(d, SLICE, false);
}

static void wait_detached(void)
{
	wait_detached_on(dmn);
}

/* Attach to @sock of @d expecting our peer id @id and vgpud's @host in the messages and in
 * the header, then map the rings as t_guest_attach() does. */
static void attach_to(struct tdaemon *d, const char *sock, int64_t id, int64_t host,
		      struct tguest *g)
{
	char path[300];
	struct stat sb;
	int64_t v;
	int fd;

	wait_detached_on(d);
	snprintf(path, sizeof(path), "%s/%s", d->run, sock);
	memset(g, 0, sizeof(*g));
	g->sock = t_connect(path);
	assert_true(g->sock >= 0);
	assert_int_equal(t_recv_msg(g->sock, &v, &fd), 0);
	assert_int_equal(v, VF_EP_PROTO_VERSION);
	assert_int_equal(t_recv_msg(g->sock, &g->id, &fd), 0);
	assert_int_equal(g->id, id);
	assert_int_equal(t_recv_msg(g->sock, &v, &g->bar_fd), 0);
	assert_int_equal(v, -1);
	for (int i = 0; i < VF_NR_VECTORS; i++) {
		assert_int_equal(t_recv_msg(g->sock, &v, &g->to_host[i]), 0);
		assert_int_equal(v, host);
	}
	for (int i = 0; i < VF_NR_VECTORS; i++) {
		assert_int_equal(t_recv_msg(g->sock, &v, &g->to_guest[i]), 0);
		assert_int_equal(v, id);
	}
	assert_int_equal(fstat(g->bar_fd, &sb), 0);
	g->bar_size = (uint64_t)sb.st_size;
	g->bar = mmap(NULL, g->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		      g->bar_fd, 0);
	assert_true(g->bar != MAP_FAILED);
	g->hdr = (struct vf_bar_header *)(g->bar + vf_bar_header_off(g->bar_size));
	assert_int_equal(g->hdr->abi_version, VGPU_ABI_VERSION);
	assert_int_equal(g->hdr->host_peer, (uint32_t)host);
	assert_int_equal(cmn_ring_attach(&g->req, g->bar + g->hdr->req_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->rsp, g->bar + g->hdr->rsp_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->evt, g->bar + g->hdr->evt_off, g->hdr->ring_region_size), 0);
}

static void attach_as(const char *sock, int64_t id, int64_t host, struct tguest *g)
{
	attach_to(dmn, sock, id, host, g);
	assert_int_equal(g->hdr->vf_id, 1);
}

/* GET_INFO as a driver of ABI @abi sends it (0: a driver before 2.3, no payload). */
static void get_info(struct tguest *g, uint32_t abi)
{
	struct vf_msg_info_req rq = { .abi_version = abi };
	struct vf_msg_info mi;
	uint32_t got = 0;

	assert_int_equal(t_guest_call(g, VF_MSG_GET_INFO, abi ? &rq : NULL, abi ? sizeof(rq) : 0,
				      &mi, sizeof(mi), &got), 0);
	assert_int_equal(got, sizeof(mi));
	assert_int_equal(mi.abi_version, VGPU_ABI_VERSION);
}

static const struct abi_case {
	const char *name;
	const char *sock;
	int64_t id, host;		/* expected peer ids: ours, vgpud's */
	const char *peer;		/* query-slices guest_peer */
	uint32_t announce;		/* GET_INFO payload's ABI, 0: none */
	const char *guest_abi;		/* query-slices guest_abi after it */
} cases[] = {
	{ "master socket, 2.3 guest", "vf1.master.sock", 0, VF_EP_HOST_PEER, "peer0",
	  VGPU_ABI_MAJOR << 16 | 3, "2.3" },
	{ "master socket, guest before 2.3", "vf1.master.sock", 0, VF_EP_HOST_PEER, "peer0",
	  0, "null" },
	{ "peer-mode socket, 2.3 guest", "vf1.sock", 1, 0, "peer_mode", VGPU_ABI_MAJOR << 16 | 3,
	  "2.3" },
	{ "peer-mode socket, 2.1 guest (no payload)", "vf1.sock", 1, 0, "peer_mode", 0, "null" },
	{ "peer-mode socket, 2.1 announced", "vf1.sock", 1, 0, "peer_mode",
	  VGPU_ABI_MAJOR << 16 | 1, "2.1" },
};

static void test_negotiate(void **state)
{
	const struct abi_case *c = *state;
	struct tguest g;
	char v[64];

	attach_as(c->sock, c->id, c->host, &g);
	slice_field("guest_peer", v, sizeof(v));
	assert_string_equal(v, c->peer);
	slice_field("guest_abi", v, sizeof(v));
	assert_string_equal(v, "null");		/* nothing announced yet on a new attachment */
	get_info(&g, c->announce);
	slice_field("guest_abi", v, sizeof(v));
	assert_string_equal(v, c->guest_abi);
	/* Rings reach vgpud through the vectors tagged with its peer id: a ping answers. */
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "hi", 2, NULL, 0, NULL), 0);
	t_guest_detach(&g);
}

/* Both sockets exist while the slice runs; the master one is reported. */
static void test_both_sockets(void **state)
{
	char path[300], v[300];
	struct stat sb;

	(void)state;
	snprintf(path, sizeof(path), "%s/vf1.master.sock", dmn->run);
	assert_int_equal(stat(path, &sb), 0);
	assert_true(S_ISSOCK(sb.st_mode));
	slice_field("endpoint_master", v, sizeof(v));
	assert_string_equal(v, path);
	wait_detached();
	slice_field("guest_peer", v, sizeof(v));
	assert_string_equal(v, "");		/* no guest: no peer layout */
}

/* One guest at a time across both sockets: another process is refused whichever it uses
 * (the attached process itself would open its SVA connection instead). */
static void test_one_guest(void **state)
{
	char path[300];
	struct tguest g;
	int status;
	pid_t pid;

	(void)state;
	attach_as("vf1.sock", 1, 0, &g);
	snprintf(path, sizeof(path), "%s/vf1.master.sock", dmn->run);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int64_t v = 0;
		int fd, s = t_connect(path);

		_exit(s >= 0 && !t_recv_msg(s, &v, &fd) && v == VF_EP_REFUSED ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	t_guest_detach(&g);
}

/* The slice moves to a second vgpud with its guest's announcement: save while a 2.3 guest is
 * attached through the master socket, restore on the other daemon; there the first guest on
 * the master socket (the migrated guest's QEMU) has announced 2.3 without a GET_INFO, a
 * later one has not, and a guest in peer mode never inherits. */
static void test_moved_guest(void **state)
{
	struct tdaemon *b = t_daemon_new();
	char file[256], v[64];
	struct tguest g;

	(void)state;
	assert_int_equal(t_daemon_start(b, "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
					"--spare-vram", "256M", NULL), 0);
	snprintf(file, sizeof(file), "%s/moved.vgpumig", dmn->state);
	unlink(file);
	attach_as("vf1.master.sock", 0, VF_EP_HOST_PEER, &g);
	get_info(&g, VGPU_ABI_MAJOR << 16 | 3);
	if (T_CTL(dmn, "save", "-u", SLICE, file))
		fail_msg("save: %s", t_out.err);
	t_guest_detach(&g);
	if (T_CTL(b, "restore", file))
		fail_msg("restore: %s", t_out.err);
	attach_to(b, "vf1.sock", 1, 0, &g);
	slice_field_of(b, "guest_abi", v, sizeof(v));
	assert_string_equal(v, "null");		/* peer mode: not the migrated guest */
	t_guest_detach(&g);
	attach_to(b, "vf1.master.sock", 0, VF_EP_HOST_PEER, &g);
	slice_field_of(b, "guest_abi", v, sizeof(v));
	assert_string_equal(v, "2.3");
	t_guest_detach(&g);
	attach_to(b, "vf1.master.sock", 0, VF_EP_HOST_PEER, &g);
	slice_field_of(b, "guest_abi", v, sizeof(v));
	assert_string_equal(v, "null");		/* once: a later guest announces itself */
	t_guest_detach(&g);
	unlink(file);
	t_daemon_free(b);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(cases) + 3];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(cases); i++)
		t[n++] = (struct CMUnitTest){ cases[i].name, test_negotiate, NULL, NULL,
					      (void *)&cases[i] };
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_both_sockets);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_one_guest);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_moved_guest);
	return _cmocka_run_group_tests("endpoint_abi", t, n, setup, t_teardown);
}
