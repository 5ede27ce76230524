// SPDX-License-Identifier: MIT
/* vgpud VF plane: guests attach through the ivshmem-protocol endpoint and make calls
 * through the mailbox; VF reset isolation; kill -9 and restart with VRAM contents; 63 VFs
 * created and destroyed in a loop with the allocator back where it started. */
#include <dirent.h>
#include <sched.h>

#include "pf_test.h"
#include <vgpu/rm.h>

static char U1[] = "11111111-1111-4111-8111-111111111111";
static char U2[] = "22222222-2222-4222-8222-222222222222";
#define MiB (1ull << 20)

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	if (t_daemon_start(d, "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL))
		return -1;
	if (T_CTL(d, "set-vfs", "2") || T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1) ||
	    T_CTL(d, "define", "-t", "vgpu-512M", "-u", U2, "--owner-uid", "65534") ||
	    T_CTL(d, "start", "-u", U1) || T_CTL(d, "start", "-u", U2))
		return -1;
	return 0;
}

static void vf_sock(struct tdaemon *d, unsigned int vf, char *buf, size_t len)
{
	snprintf(buf, len, "%s/vf%u.sock", d->run, vf);
}

/* Fill a few spread-out places of a VRAM aperture with @seed-derived bytes. */
static void pattern_write(uint8_t *vram, uint64_t size, uint8_t seed)
{
	for (uint64_t off = 0; off < size; off += size / 8)
		memset(vram + off, seed ^ (uint8_t)(off >> 20), 4096);
	vram[size - 1] = seed;
}

static bool pattern_check(const uint8_t *vram, uint64_t size, uint8_t seed)
{
	for (uint64_t off = 0; off < size; off += size / 8)
		for (unsigned int i = 0; i < 4096; i++)
			if (vram[off + i] != (uint8_t)(seed ^ (uint8_t)(off >> 20)))
				return false;
	return vram[size - 1] == seed;
}

static bool all_zero(const uint8_t *p, uint64_t size)
{
	for (uint64_t off = 0; off < size; off += size / 8)
		for (unsigned int i = 0; i < 4096; i++)
			if (p[off + i])
				return false;
	return !p[size - 1];
}

/* One RM call: allocate a client (a @cookie of 0xbad also spoils the magic). */
static int rm_call_client(struct tguest *g, uint64_t cookie, struct vgpu_rm_reply *rp)
{
	struct vgpu_rm_msg m = {
		.magic = cookie == 0xbad ? 0 : (uint32_t)VGPU_RM_MSG_MAGIC,
		.abi_version = VGPU_ABI_VERSION, .op = VGPU_RM_OP_ALLOC_CLIENT,
		.length = sizeof(m), .cookie = cookie,
	};
	uint32_t got = 0;
	int r = t_guest_call(g, VF_MSG_RM, &m, sizeof(m), rp, sizeof(*rp), &got);

	assert_true(r || got >= sizeof(*rp));
	return r;
}

/* RM_OP_ALLOC of @cls under @parent with @params (in/out); the reply's status. */
static int rm_alloc_obj(struct tguest *g, uint32_t hc, uint32_t parent, uint32_t cls,
			void *params, uint32_t plen, uint32_t *handle)
{
	uint8_t req[sizeof(struct vgpu_rm_alloc) + 256], rep[sizeof(struct vgpu_rm_reply) + 256];
	struct vgpu_rm_alloc *a = (struct vgpu_rm_alloc *)req;
	struct vgpu_rm_reply *rp = (struct vgpu_rm_reply *)rep;
	uint32_t got = 0;

	memset(req, 0, sizeof(req));
	a->hdr = (struct vgpu_rm_msg){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
				       .abi_version = VGPU_ABI_VERSION, .op = VGPU_RM_OP_ALLOC,
				       .length = (uint32_t)sizeof(*a) + plen, .cookie = cls };
	a->h_client = hc;
	a->h_parent = parent;
	a->h_class = cls;
	a->params_len = plen;
	if (plen)
		memcpy(a + 1, params, plen);
	assert_int_equal(t_guest_call(g, VF_MSG_RM, req, a->hdr.length, rep, sizeof(rep), &got), 0);
	assert_true(got >= sizeof(*rp));
	if (!rp->status && plen && rp->params_len == plen)
		memcpy(params, rp + 1, plen);
	*handle = rp->handle;
	return rp->status;
}

static uint64_t vf_vram_used(struct tdaemon *d, int vf)
{
	json_object *o, *segs, *v;
	uint64_t used = UINT64_MAX;

	assert_int_equal(T_CTL(d, "vram-map", "--json", "--no-color"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "segments", &segs));
	for (size_t i = 0; i < json_object_array_length(segs); i++) {
		json_object *sg = json_object_array_get_idx(segs, i);

		if (json_object_object_get_ex(sg, "vf", &v) && json_object_get_int(v) == vf)
			used = t_get_u64(sg, "used_bytes");
	}
	json_object_put(o);
	return used;
}

/* A guest's RM allocations land in its partition's child allocator: the VRAM map shows
 * them, and a reset or a detach gives them back. */
static void test_rm_allocations(void **state)
{
	struct tdaemon *d = *state;
	struct vgpu_rm_vidmem_params vm = { .size = 64 * MiB, .page_size = 2 * MiB,
					    .flags = VGPU_RM_MEM_CONTIGUOUS };
	struct vgpu_rm_reply rp;
	uint32_t hc, hdev, hmem;
	struct tguest g;
	char path[256];

	vf_sock(d, 1, path, sizeof(path));
	for (int round = 0; round < 2; round++) {
		assert_int_equal(t_guest_attach(path, &g), 0);
		assert_int_equal(rm_call_client(&g, 7, &rp), 0);
		assert_int_equal(rp.status, 0);
		hc = rp.handle;
		assert_int_equal(rm_alloc_obj(&g, hc, hc, VGPU_RM_CLASS_DEVICE, NULL, 0, &hdev), 0);
		assert_int_equal(rm_alloc_obj(&g, hc, hdev, VGPU_RM_CLASS_MEMORY_VIDMEM, &vm, sizeof(vm),
					      &hmem), 0);
		assert_true(vm.addr + vm.size <= 512 * MiB);	/* VF-physical: inside the slice */
		assert_true(vf_vram_used(d, 1) == 64 * MiB);
		assert_true(vf_vram_used(d, 2) == 0);
		assert_int_equal(T_CTL(d, "stats", "1", "--json"), 0);
		assert_non_null(strstr(t_out.out, "\"vram_used_bytes\": 67108864"));
		if (round == 0) {	/* a reset frees them */
			assert_int_equal(T_CTL(d, "reset", "1"), 0);
			assert_true(vf_vram_used(d, 1) == 0);
			t_guest_detach(&g);
			/* the daemon sees the hangup on its next poll */
			t_wait_attached(d, U1, false);
		} else {		/* and so does the guest leaving */
			t_guest_detach(&g);
			/* its objects go with the detach, in batches between the loop's other
			 * work: once vgpud says so, none is left */
			t_wait_attached(d, U1, false);
			while (t_rm_objects(d, 1))
				usleep(1000);
			assert_true(vf_vram_used(d, 1) == 0);
		}
	}
}

/* In a child (another process): the first greeting message on @path (VF_EP_REFUSED or
 * VF_EP_PROTO_VERSION), or 97/98/99 when something else happened. */
static int64_t other_process_greeting(const char *path)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (!pid) {
		int sock = t_connect(path), fd;
		int64_t v;

		if (sock < 0)
			_exit(99);
		if (t_recv_msg(sock, &v, &fd))
			_exit(98);
		_exit(v == VF_EP_REFUSED && fd < 0 ? 1 : v == VF_EP_PROTO_VERSION ? 0 : 97);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	st = WEXITSTATUS(st);
	return st == 1 ? VF_EP_REFUSED : st == 0 ? VF_EP_PROTO_VERSION : st;
}

/* The ivshmem greeting, BAR2 layout, and mailbox calls. */
static void test_attach_and_mailbox(void **state)
{
	struct tdaemon *d = *state;
	struct tguest g;
	struct vf_msg_info info;
	struct vgpu_rm_reply rp;
	char path[256], echo[64], back[64];
	uint32_t got;

	vf_sock(d, 1, path, sizeof(path));
	assert_int_equal(t_guest_attach(path, &g), 0);
	assert_int_equal(g.id, 1);
	assert_true(g.bar_size == vf_bar_size(512 * MiB, VF_BAR_DMA_DEFAULT));
	assert_true(g.hdr->vram_off == 0 && g.hdr->vram_size == 512 * MiB);
	assert_true(g.hdr->dma_off + g.hdr->dma_size == g.hdr->ctrl_off);
	assert_true(g.hdr->dma_off >= g.hdr->vram_size);
	assert_true(g.hdr->ctrl_off == g.bar_size - VF_BAR_CTRL_SIZE);
	/* ABI minor 1: doorbell page in the control area, DMA memory's IOVA, runlists. */
	assert_int_equal(g.hdr->abi_version, VGPU_ABI_VERSION);
	assert_int_equal(g.hdr->nr_vectors, VF_NR_VECTORS);
	assert_true(g.hdr->db_off == g.hdr->ctrl_off + VF_BAR_DB_OFF);
	assert_true(g.hdr->dma_iova == 1ull << 32);
	assert_true(g.hdr->nr_runlists >= 1);
	assert_true(g.hdr->intr_off == g.hdr->ctrl_off + VF_BAR_INTR_OFF);
	snprintf(echo, sizeof(echo), "hello from VF 1");
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, echo, sizeof(echo), back, sizeof(back), &got), 0);
	assert_int_equal(got, sizeof(echo));
	assert_string_equal(back, echo);
	assert_int_equal(t_guest_call(&g, VF_MSG_GET_INFO, NULL, 0, &info, sizeof(info), &got), 0);
	assert_int_equal(info.vf_id, 1);
	assert_true(info.vram_size == 512 * MiB);
	assert_int_equal(t_guest_call(&g, 0x7777, NULL, 0, NULL, 0, NULL), -EOPNOTSUPP);
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, echo, VF_MBOX_SLOT_SIZE, NULL, 0, NULL),
			 -EMSGSIZE);
	/* RM calls go to the shared RM as a client bound to this VF */
	assert_int_equal(rm_call_client(&g, 42, &rp), 0);
	assert_int_equal(rp.status, 0);
	assert_true(rp.cookie == 42);
	assert_true(VGPU_RM_IS_CLIENT(rp.handle));
	assert_int_equal(VGPU_RM_CLIENT_FN(rp.handle), 1);
	assert_int_equal(rm_call_client(&g, 0xbad, &rp), 0);	/* bad magic: refused by the RM */
	assert_true(rp.status < 0);
	/* a second attach by another process while one is active is refused, explicitly (the
	 * attached process's own second connection is its SVA connection: test_ivshmem_proto) */
	assert_int_equal(other_process_greeting(path), VF_EP_REFUSED);
	/* stats count the calls */
	assert_int_equal(T_CTL(d, "stats", "1", "--json"), 0);
	assert_non_null(strstr(t_out.out, "\"ok\": 3"));
	assert_non_null(strstr(t_out.out, "\"errors\": 3"));
	assert_non_null(strstr(t_out.out, "\"rm_objects\": 1"));
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "attached"));
	/* quota changes only while idle */
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--exec-quantum-ms", "3"), 4);
	t_guest_detach(&g);
	t_wait_attached(d, U1, false);
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--exec-quantum-ms", "3"), 0);
	/* the guest's RM client went with it */
	assert_int_equal(T_CTL(d, "stats", "1", "--json"), 0);
	assert_non_null(strstr(t_out.out, "\"rm_objects\": 0"));
	/* and after detaching, a new attach works */
	assert_int_equal(t_guest_attach(path, &g), 0);
	t_guest_detach(&g);
}

/* Only root or the slice's owner uid may attach. */
static void test_attach_owner(void **state)
{
	struct tdaemon *d = *state;
	char p1[256], p2[256];
	int st;
	pid_t pid;

	if (geteuid() != 0)
		skip();	/* dropping to nobody needs root */

	vf_sock(d, 1, p1, sizeof(p1));
	vf_sock(d, 2, p2, sizeof(p2));
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct tguest g;
		int bad, good;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(90);
		bad = t_guest_attach(p1, &g);		/* VF 1: root only */
		if (!bad)
			_exit(91);
		good = t_guest_attach(p2, &g);		/* VF 2: owner_uid 65534 */
		_exit(good ? 92 : 0);
	}
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* A capability set of /proc/@pid/status ("CapEff", "CapPrm", ...). */
static uint64_t proc_caps(pid_t pid, const char *set)
{
	char path[64], line[256], key[16];
	unsigned long long v = 0;
	bool seen = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(key, sizeof(key), "%s:\t%%llx", set);
	f = fopen(path, "re");
	assert_non_null(f);
	while (!seen && fgets(line, sizeof(line), f))
		seen = sscanf(line, key, &v) == 1;
	fclose(f);
	assert_true(seen);
	return v;
}

/* vgpud has no CAP_SYS_PTRACE in effect, even started by root: the kernel then lets its
 * SVA copies reach only processes of its own uid that are still dumpable, checked at each
 * copy, so a binding cannot follow its guest through an exec of a set-user-ID program.
 * What it needs of root (chown of sockets to slice owners) it keeps. */
static void test_no_ptrace(void **state)
{
	/* CAP_SYS_PTRACE, CAP_CHOWN */
	const uint64_t ptrace = 1ull << 19, chown = 1ull << 0;
	struct tdaemon *d = *state;

	assert_int_equal(proc_caps(d->pid, "CapEff") & ptrace, 0);
	assert_int_equal(proc_caps(d->pid, "CapInh") & ptrace, 0);
	if (proc_caps(getpid(), "CapEff") & chown)
		assert_true(proc_caps(d->pid, "CapEff") & chown);
}

/* A VF reset scrubs that VF's VRAM, re-formats its mailbox and tells its guest; the other
 * VF's VRAM, mailbox and guest are untouched. */
static void test_reset_isolation(void **state)
{
	struct tdaemon *d = *state;
	struct vgpu_rm_vidmem_params vm = { .size = 32 * MiB, .page_size = 2 * MiB };
	struct tguest g1, g2;
	struct vf_event ev;
	struct vgpu_rm_reply rp;
	uint32_t h;
	char p1[256], p2[256], msg[16] = "still here";

	vf_sock(d, 1, p1, sizeof(p1));
	vf_sock(d, 2, p2, sizeof(p2));
	assert_int_equal(t_guest_attach(p1, &g1), 0);
	assert_int_equal(t_guest_attach(p2, &g2), 0);
	/* VF 2 also holds RM objects: a client, its device and 32 MiB of VRAM */
	assert_int_equal(rm_call_client(&g2, 9, &rp), 0);
	assert_int_equal(rm_alloc_obj(&g2, rp.handle, rp.handle, VGPU_RM_CLASS_DEVICE, NULL, 0, &h), 0);
	assert_int_equal(rm_alloc_obj(&g2, rp.handle, h, VGPU_RM_CLASS_MEMORY_VIDMEM, &vm, sizeof(vm),
				      &h), 0);
	pattern_write(g1.bar, g1.hdr->vram_size, 0x5a);
	pattern_write(g2.bar, g2.hdr->vram_size, 0xa5);
	memset(g1.bar + g1.hdr->dma_off, 0x11, 4096);
	assert_int_equal(T_CTL(d, "reset", "1"), 0);
	/* VF 1: event + interrupt, new reset count, VRAM zero, mailbox usable again */
	assert_int_equal(t_guest_wait(&g1, VF_VEC_EVENT), 0);
	assert_int_equal(cmn_ring_attach(&g1.evt, g1.bar + g1.hdr->evt_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_pop(&g1.evt, &ev), 0);
	assert_int_equal(ev.type, VF_EVT_RESET);
	assert_int_equal(ev.arg0, 1);
	assert_int_equal(g1.hdr->reset_count, 1);
	assert_int_equal(g1.hdr->state, VF_STATE_READY);
	assert_true(all_zero(g1.bar, g1.hdr->vram_size));
	assert_int_equal(cmn_ring_attach(&g1.req, g1.bar + g1.hdr->req_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&g1.rsp, g1.bar + g1.hdr->rsp_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(t_guest_call(&g1, VF_MSG_PING, msg, sizeof(msg), NULL, 0, NULL), 0);
	/* VF 2: nothing happened */
	assert_true(pattern_check(g2.bar, g2.hdr->vram_size, 0xa5));
	assert_int_equal(g2.hdr->reset_count, 0);
	assert_int_equal(cmn_ring_count(&g2.evt), 0);
	assert_int_equal(t_guest_call(&g2, VF_MSG_PING, msg, sizeof(msg), NULL, 0, NULL), 0);
	assert_true(vf_vram_used(d, 2) == 32 * MiB);
	assert_int_equal(T_CTL(d, "stats", "2", "--json"), 0);
	assert_non_null(strstr(t_out.out, "\"rm_objects\": 3"));
	t_guest_detach(&g1);
	t_guest_detach(&g2);
}

/* A hostile guest scribbles over its ring headers and counters: vgpud ignores the ring
 * until a reset, serves the other VF as before, and a reset makes the VF usable again. */
static void test_hostile_guest(void **state)
{
	struct tdaemon *d = *state;
	struct tguest g1, g2;
	char p1[256], p2[256];
	uint64_t one = 1;

	vf_sock(d, 1, p1, sizeof(p1));
	vf_sock(d, 2, p2, sizeof(p2));
	assert_int_equal(t_guest_attach(p1, &g1), 0);
	assert_int_equal(t_guest_attach(p2, &g2), 0);
	/* head far ahead of tail, geometry rewritten, then a kick */
	__atomic_store_n(&g1.req.hdr->head, g1.req.hdr->tail + 100000, __ATOMIC_RELEASE);
	g1.req.hdr->nr_elems = 1u << 30;
	g1.req.hdr->elem_size = 3;
	g1.rsp.hdr->tail = 0xdeadbeef;
	assert_int_equal(write(g1.to_host[VF_VEC_MBOX], &one, sizeof(one)), (ssize_t)sizeof(one));
	memset(g1.bar + g1.hdr->evt_off, 0xff, 256);
	assert_int_equal(t_guest_call(&g2, VF_MSG_PING, "ok", 2, NULL, 0, NULL), 0);
	/* the broken ring, counted once VF 1's own service thread has taken the kick: a
	 * thread apart from VF 2's, so VF 2's answer says nothing about it */
	for (;;) {
		assert_int_equal(T_CTL(d, "stats", "1", "--json"), 0);
		if (!strstr(t_out.out, "\"errors\": 0"))
			break;
		sched_yield();
	}
	assert_non_null(strstr(t_out.out, "\"errors\": 1"));
	assert_int_equal(T_CTL(d, "reset", "1"), 0);
	assert_int_equal(cmn_ring_attach(&g1.req, g1.bar + g1.hdr->req_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&g1.rsp, g1.bar + g1.hdr->rsp_off, VF_BAR_RING_REGION), 0);
	/* drain the reset's kick on the mailbox vector if one is pending, then call */
	assert_int_equal(t_guest_call(&g1, VF_MSG_PING, "ok", 2, NULL, 0, NULL), 0);
	t_guest_detach(&g1);
	t_guest_detach(&g2);
}

static uint64_t slice_base(struct tdaemon *d, char *uuid)
{
	json_object *o, *arr, *p;
	uint64_t base;

	assert_int_equal(T_CTL(d, "list", "-u", uuid, "--json"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &arr));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "provisioned", &p));
	base = t_get_u64(p, "vram_base");
	json_object_put(o);
	return base;
}

/* kill -9, restart: every slice back at the same offset with its VRAM; guests reconnect.
 * Then the same through a clean SIGTERM. */
static void test_kill9_recovery(void **state)
{
	struct tdaemon *d = *state;
	struct tguest g1, g2;
	char p1[256], p2[256];
	uint64_t b1 = slice_base(d, U1), b2 = slice_base(d, U2);
	const int sigs[] = { SIGKILL, SIGTERM };

	vf_sock(d, 1, p1, sizeof(p1));
	vf_sock(d, 2, p2, sizeof(p2));
	assert_int_equal(t_guest_attach(p1, &g1), 0);
	pattern_write(g1.bar, g1.hdr->vram_size, 0x3c);
	t_guest_detach(&g1);
	assert_int_equal(T_CTL(d, "reset", "2"), 0);
	for (unsigned int round = 0; round < 2; round++) {
		int st = t_daemon_stop(d, sigs[round]);

		assert_int_equal(st, round ? 0 : 128 + SIGKILL);
		assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "4", "--spare-vram",
						"256M", NULL), 0);
		assert_true(slice_base(d, U1) == b1);
		assert_true(slice_base(d, U2) == b2);
		assert_int_equal(t_guest_attach(p1, &g1), 0);
		assert_true(pattern_check(g1.bar, g1.hdr->vram_size, 0x3c));
		assert_int_equal(t_guest_call(&g1, VF_MSG_PING, "x", 1, NULL, 0, NULL), 0);
		t_guest_detach(&g1);
		assert_int_equal(t_guest_attach(p2, &g2), 0);
		assert_int_equal(g2.hdr->reset_count, 1);	/* the reset count survives too */
		t_guest_detach(&g2);
	}
	/* a stopped slice gives its VRAM back and is not resurrected */
	assert_int_equal(T_CTL(d, "stop", "-u", U2), 0);
	t_daemon_stop(d, SIGKILL);
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M",
					NULL), 0);
	assert_int_equal(T_CTL(d, "list", "-u", U2), 0);
	assert_non_null(strstr(t_out.out, "manual defined"));
}

static unsigned int shm_count(struct tdaemon *d)
{
	char prefix[64];
	unsigned int n = 0;
	struct dirent *de;
	DIR *dp = opendir("/dev/shm");

	t_shm_prefix(d, prefix, sizeof(prefix));
	while (dp && (de = readdir(dp)))
		n += !strncmp(de->d_name, prefix, strlen(prefix));
	if (dp)
		closedir(dp);
	return n;
}

/* 63 VFs created and destroyed in a loop; the device allocator's free count ends where it
 * started and no VRAM object is left behind. */
static void test_63_vfs_loop(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct tclient *c;
	char uuids[64][37];
	uint64_t free0;
	json_object *r, *a;

	(void)state;
	assert_int_equal(t_daemon_start(d, "--vram", "4G", "--max-vfs", "63", "--spare-vram", "256M",
					NULL), 0);
	c = t_client(d, true);
	a = json_object_new_object();
	json_object_object_add(a, "num_vfs", json_object_new_int(63));
	json_object_put(t_exec(c, "set-vfs", a));
	free0 = t_status_u64(c, "free_vram_bytes");
	assert_true(free0 == t_status_u64(c, "free_vram_bytes_at_start"));
	for (unsigned int round = 0; round < 3; round++) {
		for (unsigned int i = 0; i < 64; i++) {
			a = t_args("type", "vgpu-auto");
			r = t_exec(c, "define-slice", a);
			assert_non_null(t_ret(r));
			snprintf(uuids[i], 37, "%s",
				 json_object_get_string(json_object_object_get(t_ret(r), "uuid")));
			json_object_put(r);
			r = t_exec(c, "start-slice", t_args("uuid", uuids[i]));
			if (i < 63)
				assert_non_null(t_ret(r));
			else	/* the 64th: no VF left */
				assert_string_equal(t_err_class(r), "InsufficientResources");
			json_object_put(r);
		}
		assert_int_equal(t_status_u64(c, "vfs_in_use"), 63);
		assert_true(t_status_u64(c, "free_vram_bytes") == free0 - 63 * (32 * MiB));
		assert_int_equal(shm_count(d), 63);
		for (unsigned int i = 0; i < 64; i++) {
			r = t_exec(c, "stop-slice", t_args("uuid", uuids[i]));
			assert_non_null(t_ret(r));
			json_object_put(r);
			r = t_exec(c, "undefine-slice", t_args("uuid", uuids[i]));
			assert_non_null(t_ret(r));
			json_object_put(r);
		}
		assert_true(t_status_u64(c, "free_vram_bytes") == free0);
		assert_true(t_status_u64(c, "largest_free_bytes") == free0);
		assert_int_equal(t_status_u64(c, "vfs_in_use"), 0);
		assert_int_equal(shm_count(d), 0);
	}
	t_client_free(c);
	t_daemon_free(d);
}

/* The shutdown path frees everything: vgpud under valgrind, with a running slice and an
 * attached guest, exits 0 on SIGTERM with no leak and no error. */
static void test_valgrind_shutdown(void **state)
{
	static char *const wrap[] = { "valgrind", "--quiet", "--leak-check=full",
				      "--errors-for-leak-kinds=definite,indirect",
				      "--error-exitcode=9", NULL };
	struct tdaemon *d;
	struct tguest g;
	char path[256];

	(void)state;
	if (strstr(t_bin("vgpud"), "/asan/") || strstr(t_bin("vgpud"), "/tsan/"))
		skip();		/* sanitizer builds cannot run under valgrind */
	if (system("valgrind --version >/dev/null 2>&1") != 0)
		skip();
	d = t_daemon_new();
	d->wrap = wrap;
	assert_int_equal(t_daemon_start(d, "--vram", "1G", "--max-vfs", "2", "--spare-vram", "256M",
					"--num-vfs", "1", NULL), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-256M", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	vf_sock(d, 1, path, sizeof(path));
	assert_int_equal(t_guest_attach(path, &g), 0);
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "x", 1, NULL, 0, NULL), 0);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	t_guest_detach(&g);
	t_daemon_free(d);
}

static pid_t qemu_start(const char *sock)
{
	char chardev[320];
	pid_t pid;

	snprintf(chardev, sizeof(chardev), "socket,path=%s,id=vf", sock);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* -S: devices are realized (QEMU reads our greeting then) but no CPU runs. */
		execlp("qemu-system-x86_64", "qemu-system-x86_64", "-S", "-accel", "tcg", "-M", "q35",
		       "-m", "64", "-nographic", "-nodefaults", "-display", "none", "-monitor", "none",
		       "-serial", "none", "-chardev", chardev, "-device",
		       "ivshmem-doorbell,chardev=vf,vectors=2", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* QEMU's own ivshmem-doorbell device attaches to the endpoint exactly as our test guest
 * does: it accepts the greeting and the BAR2 object during realize, and a second VM for
 * the same VF is refused. */
static void test_qemu_attach(void **state)
{
	struct tdaemon *d = *state;
	char path[256];
	pid_t q1, q2;
	int st;

	if (system("qemu-system-x86_64 --version >/dev/null 2>&1") != 0)
		skip();		/* Debian package qemu-system-x86 */
	vf_sock(d, 1, path, sizeof(path));
	q1 = qemu_start(path);
	/* QEMU attaches while it realizes its devices, however long that takes here; one that
	 * exits instead fails the test. */
	while (!t_slice_attached(d, U1)) {
		assert_int_equal(waitpid(q1, &st, WNOHANG), 0);
		usleep(1000);
	}
	q2 = qemu_start(path);
	assert_int_equal(waitpid(q2, &st, 0), q2);		/* the second VM gives up */
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
	assert_int_equal(waitpid(q1, &st, WNOHANG), 0);	/* the first still runs */
	kill(q1, SIGTERM);
	waitpid(q1, &st, 0);
	t_wait_attached(d, U1, false);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test_setup_teardown(test_attach_and_mailbox, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_attach_owner, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_no_ptrace, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_reset_isolation, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_rm_allocations, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_hostile_guest, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_kill9_recovery, setup, t_teardown),
		cmocka_unit_test_teardown(test_63_vfs_loop, t_teardown),
		cmocka_unit_test_teardown(test_valgrind_shutdown, t_teardown),
		cmocka_unit_test_setup_teardown(test_qemu_attach, setup, t_teardown),
	};

	return cmocka_run_group_tests_name("vgpud_vf", t, NULL, NULL);
}
