// SPDX-License-Identifier: MIT
/* vgpud's VF endpoint as an ivshmem server, checked with our own client and no VM: the
 * greeting's messages in order with their fds (version 0, own id, -1 + the BAR2 fd, the
 * peer-0 eventfds, the own eventfds, nothing else), the BAR's size, each to-host eventfd
 * wired to what vgpud does with it, vgpud interrupting our vectors, refusals (a second
 * client, a uid that is not the owner), ownership of the sockets and the BAR object (its
 * mode 0600), a running slice's owner uid changed from root but not from another uid, and
 * cleanup on disconnect (detached, attachable again, no fd left in vgpud). */
#include "pf_test.h"
#include <vgpu/sva.h>

#define SLICE	"7b4d0ee3-0001-4c7f-8a2f-7f1d3c3e0e81"
#define SLICE2	"7b4d0ee3-0002-4c7f-8a2f-7f1d3c3e0e81"
#define NOBODY	65534

static struct tdaemon *dmn;
static char ep_path[256];

/* A daemon with one running slice that nobody (and root) may attach to. */
static int setup(void **state)
{
	(void)state;
	dmn = t_daemon_new();
	if (t_daemon_start(dmn, "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			   "--spare-vram", "256M", NULL))
		return -1;
	if (T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", SLICE, "--owner-uid", "nobody") ||
	    T_CTL(dmn, "start", "-u", SLICE))
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

static bool is_eventfd(int fd)
{
	char link[64], target[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = 0;
	return !strcmp(target, "anon_inode:[eventfd]");
}

static unsigned int fd_count(pid_t pid)
{
	char cmd[64], buf[32] = "";
	FILE *p;

	snprintf(cmd, sizeof(cmd), "ls /proc/%d/fd | wc -l", (int)pid);
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(buf, sizeof(buf), p));
	pclose(p);
	return (unsigned int)atoi(buf);
}

/* vgpuctl's "attached" for the slice. */
static bool attached(void)
{
	return t_slice_attached(dmn, SLICE);
}

/* Until vgpud reports the slice attached (@want) or not, however long that takes. */
static void wait_attached(bool want)
{
	t_wait_attached(dmn, SLICE, want);
}

/* Attach once vgpud has seen the previous test's client go (it notices the hangup in its
 * poll loop, a moment after the close). */
static void attach(struct tguest *g)
{
	wait_attached(false);
	assert_int_equal(t_guest_attach(ep_path, g), 0);
}

/* ---- the greeting ------------------------------------------------------------------------- */

static void test_greeting(void **state)
{
	int sock, fd, fds[2 * VF_NR_VECTORS + 1];
	struct pollfd p = { .events = POLLIN };
	int64_t v;
	struct stat sb;
	unsigned int nfd = 0;

	(void)state;
	wait_attached(false);
	sock = t_connect(ep_path);
	assert_true(sock >= 0);
	assert_int_equal(t_recv_msg(sock, &v, &fd), 0);
	assert_int_equal(v, VF_EP_PROTO_VERSION);	/* 1. version 0, no fd */
	assert_int_equal(fd, -1);
	assert_int_equal(t_recv_msg(sock, &v, &fd), 0);
	assert_int_equal(v, 1);				/* 2. our peer id: the VF number */
	assert_int_equal(fd, -1);
	assert_int_equal(t_recv_msg(sock, &v, &fd), 0);
	assert_int_equal(v, -1);			/* 3. -1 with the shared memory */
	assert_true(fd >= 0 && !is_eventfd(fd));
	assert_int_equal(fstat(fd, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	fds[nfd++] = fd;
	for (int i = 0; i < 2 * VF_NR_VECTORS; i++) {	/* 4. peer 0 x N, 5. own id x N */
		assert_int_equal(t_recv_msg(sock, &v, &fd), 0);
		assert_int_equal(v, i < VF_NR_VECTORS ? 0 : 1);
		assert_true(is_eventfd(fd));
		fds[nfd++] = fd;
	}
	p.fd = sock;	/* nothing else: vgpud never announces another peer */
	assert_int_equal(poll(&p, 1, 300), 0);
	for (unsigned int i = 0; i < nfd; i++)
		close(fds[i]);
	close(sock);
	wait_attached(false);
}

static void test_bar_size(void **state)
{
	json_object *o, *sl;
	struct tguest g;

	(void)state;
	attach(&g);
	assert_true(g.bar_size && !(g.bar_size & (g.bar_size - 1)));	/* a power of two */
	assert_int_equal(g.hdr->bar_size, g.bar_size);
	assert_int_equal(T_CTL(dmn, "--json", "list", "-u", SLICE), 0);
	o = t_out_json();
	sl = json_object_array_get_idx(json_object_object_get(o, "slices"), 0);
	assert_int_equal(t_get_u64(json_object_object_get(sl, "provisioned"), "bar_bytes"),
			 g.bar_size);
	json_object_put(o);
	t_guest_detach(&g);
}

/* ---- eventfd wiring ------------------------------------------------------------------------ */

/* Until @fd's readable state is @want, however long that takes (one that never changes
 * hangs the test until the suite's timeout, which fails it). */
static void wait_readable(int fd, bool want)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	while ((poll(&p, 1, 0) == 1) != want)
		usleep(1000);
}

static uint64_t mbox_kicks(void)
{
	json_object *top, *o;
	uint64_t kicks;

	assert_int_equal(T_CTL(dmn, "--json", "stats", "1"), 0);
	top = o = t_out_json();
	/* {"vfs":[{... "rpc":{"kicks":N}}]} or the VF's object itself */
	if (json_object_object_get(o, "vfs"))
		o = json_object_array_get_idx(json_object_object_get(o, "vfs"), 0);
	kicks = t_get_u64(json_object_object_get(o, "rpc"), "kicks");
	json_object_put(top);
	return kicks;
}

static const struct vec_case {
	const char *name;
	unsigned int vec;
} vec_cases[] = {
	{ "to-host vector 0 (mailbox): a request is served", VF_VEC_MBOX },
	{ "to-host vector 1 (event): vgpud consumes it", VF_VEC_EVENT },
	{ "to-host vector 2 (GPU kick): the device consumes it", VF_VEC_GPU },
};

static void test_to_host(void **state)
{
	const struct vec_case *c = *state;
	uint8_t reply[16];
	uint32_t got;
	uint64_t one = 1, before;
	struct tguest g;

	attach(&g);
	if (c->vec == VF_VEC_MBOX) {
		before = mbox_kicks();
		/* t_guest_call pushes a PING, writes to_host[0] and waits on our vector 0. */
		assert_int_equal(t_guest_call(&g, VF_MSG_PING, "ping", 4, reply, sizeof(reply),
					      &got), 0);
		assert_int_equal(got, 4);
		assert_memory_equal(reply, "ping", 4);
		assert_int_equal(mbox_kicks(), before + 1);
	} else {
		assert_int_equal(write(g.to_host[c->vec], &one, sizeof(one)), (ssize_t)sizeof(one));
		wait_readable(g.to_host[c->vec], false);
	}
	t_guest_detach(&g);
}

/* vgpud interrupts vector 0 with mailbox replies (above) and vector 1 with events: a VF
 * reset posts VF_EVT_RESET. */
static void test_from_host_event(void **state)
{
	struct tguest g;
	uint8_t slot[VF_EVT_SLOT_SIZE];
	struct vf_event *ev = (struct vf_event *)slot;

	(void)state;
	attach(&g);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	assert_int_equal(t_guest_wait(&g, VF_VEC_EVENT), 0);
	assert_int_equal(cmn_ring_pop(&g.evt, slot), 0);
	assert_int_equal(ev->type, VF_EVT_RESET);
	t_guest_detach(&g);
}

/* ---- refusals and ownership ---------------------------------------------------------------- */

static int64_t attach_as(uid_t uid, gid_t gid);

/* Another process is refused while a guest is attached; the attached process itself gets
 * its SVA connection (vgpu/sva.h), one at a time. */
static void test_second_client(void **state)
{
	struct tguest g;
	int sock, sva, fd;
	int64_t v;
	char c;

	(void)state;
	attach(&g);
	assert_int_equal(attach_as(getuid(), getgid()), VF_EP_REFUSED);
	sva = t_connect(ep_path);
	assert_true(sva >= 0);
	assert_int_equal(t_recv_msg(sva, &v, &fd), 0);
	assert_true(v == VGPU_SVA_HELLO);
	assert_int_equal(fd, -1);
	sock = t_connect(ep_path);
	assert_true(sock >= 0);
	assert_int_equal(t_recv_msg(sock, &v, &fd), 0);
	assert_int_equal(v, VF_EP_REFUSED);
	assert_int_equal(fd, -1);
	assert_int_equal(read(sock, &c, 1), 0);		/* and closed */
	close(sock);
	close(sva);
	assert_true(attached());			/* the first one is untouched */
	t_guest_detach(&g);
}

/* In a child as @uid with @gid: what the greeting's first message was (VF_EP_REFUSED,
 * VF_EP_PROTO_VERSION), or 100 + errno when it could not connect. */
static int64_t attach_as(uid_t uid, gid_t gid)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (!pid) {
		int64_t v;
		int sock, fd;

		if (setgroups(0, NULL) || setgid(gid) || setuid(uid))
			_exit(99);
		sock = t_connect(ep_path);
		if (sock < 0)
			_exit(100 + (errno & 0x3f));
		if (t_recv_msg(sock, &v, &fd))
			_exit(98);
		_exit(v == VF_EP_REFUSED ? 1 : v == VF_EP_PROTO_VERSION ? 0 : 97);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	st = WEXITSTATUS(st);
	return st == 1 ? VF_EP_REFUSED : st == 0 ? VF_EP_PROTO_VERSION : st;
}

static void test_owner_attaches(void **state)
{
	(void)state;
	wait_attached(false);
	assert_int_equal(attach_as(NOBODY, NOBODY), VF_EP_PROTO_VERSION);
	wait_attached(false);
}

/* A uid that reaches the socket through its group but is not the owner: refused by the
 * peer-credential check; one outside the group cannot even connect. */
static void test_non_owner_refused(void **state)
{
	struct stat sb;

	(void)state;
	wait_attached(false);
	assert_int_equal(stat(ep_path, &sb), 0);
	assert_int_equal(attach_as(1, sb.st_gid), VF_EP_REFUSED);
	assert_int_equal(attach_as(1, 1), 100 + EACCES);
	assert_false(attached());
}

static void test_ownership(void **state)
{
	struct passwd *pw = getpwuid(NOBODY);
	struct stat sb, rd;
	struct tguest g;

	(void)state;
	assert_non_null(pw);
	assert_int_equal(stat(ep_path, &sb), 0);
	assert_int_equal(sb.st_uid, NOBODY);
	assert_int_equal(sb.st_gid, pw->pw_gid);	/* the owner's primary group */
	assert_int_equal(sb.st_mode & 0777, 0660);
	assert_int_equal(stat(dmn->run, &rd), 0);
	assert_true(rd.st_mode & S_IXOTH);		/* traversable */
	attach(&g);
	assert_int_equal(fstat(g.bar_fd, &sb), 0);
	assert_int_equal(sb.st_uid, NOBODY);
	assert_int_equal(sb.st_gid, pw->pw_gid);
	/* The VMM gets the object by fd: the owner's group (kvm) gets no way to it by name. */
	assert_int_equal(sb.st_mode & 0777, 0600);
	t_guest_detach(&g);
}

/* Who owns VF @vf's endpoint sockets and BAR object: the one uid all three have, or -1. */
static long vf_owner(unsigned int vf)
{
	char path[300];
	struct stat sb;
	long uid = -2;

	for (int i = 0; i < 3; i++) {
		if (i < 2)
			snprintf(path, sizeof(path), "%s/vf%u.%s", dmn->run, vf,
				 i ? "master.sock" : "sock");
		else
			t_bar_path(dmn, vf, path, sizeof(path));
		assert_int_equal(stat(path, &sb), 0);
		if (uid != -2 && uid != (long)sb.st_uid)
			return -1;
		uid = (long)sb.st_uid;
	}
	return uid;
}

/* The owner uid of a running slice does not change away from a uid: that uid may still
 * map the BAR (the fd it was sent, or by name), and a chown takes nothing away. The slice
 * keeps its owner, who still attaches. */
static void test_owner_change_refused(void **state)
{
	(void)state;
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE, "--owner-uid", "0"), 4);
	assert_non_null(strstr(t_out.err, "stop the slice first: the previous owner uid 65534 "
			       "may still map its BAR"));
	assert_int_equal(vf_owner(1), NOBODY);
	wait_attached(false);
	assert_int_equal(attach_as(NOBODY, NOBODY), VF_EP_PROTO_VERSION);
	wait_attached(false);
}

/* From root, whom no one is kept from, a running slice may get an owner uid: both its
 * sockets and its BAR move to it at once. Back from that uid only once stopped. */
static void test_owner_from_root(void **state)
{
	(void)state;
	assert_int_equal(T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", SLICE2), 0);
	assert_int_equal(T_CTL(dmn, "start", "-u", SLICE2), 0);
	assert_int_equal(vf_owner(2), 0);
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE2, "--owner-uid", "nobody"), 0);
	assert_int_equal(vf_owner(2), NOBODY);
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE2, "--owner-uid", "0"), 4);
	assert_int_equal(T_CTL(dmn, "stop", "-u", SLICE2), 0);
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE2, "--owner-uid", "0"), 0);
	assert_int_equal(T_CTL(dmn, "undefine", "-u", SLICE2), 0);
}

/* ---- disconnect ------------------------------------------------------------------------------ */

static void test_disconnect(void **state)
{
	unsigned int base;
	struct tguest g;

	(void)state;
	wait_attached(false);
	base = fd_count(dmn->pid);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(t_guest_attach(ep_path, &g), 0);
		assert_true(attached());
		assert_true(fd_count(dmn->pid) > base);	/* the connection and its eventfds */
		t_guest_detach(&g);
		wait_attached(false);
	}
	assert_int_equal(fd_count(dmn->pid), base);
	attach(&g);	/* attachable again */
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "x", 1, NULL, 0, NULL), 0);
	t_guest_detach(&g);
}

#define ROWS(fn, table) ({ \
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) { \
		tests[n].name = table[i].name; \
		tests[n].test_func = fn; \
		tests[n].initial_state = (void *)&table[i]; \
		n++; \
	} })

int main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test(test_greeting),
		cmocka_unit_test(test_bar_size),
		cmocka_unit_test(test_from_host_event),
		cmocka_unit_test(test_second_client),
		cmocka_unit_test(test_owner_attaches),
		cmocka_unit_test(test_non_owner_refused),
		cmocka_unit_test(test_ownership),
		cmocka_unit_test(test_owner_change_refused),
		cmocka_unit_test(test_owner_from_root),
		cmocka_unit_test(test_disconnect),
	};
	static struct CMUnitTest tests[32];
	size_t n = 0;

	for (size_t i = 0; i < 2; i++)
		tests[n++] = fixed[i];
	ROWS(test_to_host, vec_cases);
	for (size_t i = 2; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		tests[n++] = fixed[i];
	return _cmocka_run_group_tests("ivshmem_proto", tests, n, setup, teardown);
}
