// SPDX-License-Identifier: MIT
/* vgpud's service plane, by counts: each VF's mailbox has its own service thread, so a VF
 * whose RM call is stuck in the GSP holds up nobody else, nor does its guest leaving with
 * that call in hand hold up the loop thread, and a VF flooding malformed
 * requests and doorbells gets its errors while only its own counters move; an owner's
 * modify-slice does not race with the thread it serves; the CPU priority by share puts a
 * light VF's thread ahead of busy ones'. Also runs under ThreadSanitizer against the TSan
 * vgpud (pf_manager_TSAN_TESTS). */
#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>

#include "pf_test.h"
#include "common/share.h"
#include <vgpu/gpfifo.h>
#include <vgpu/rm.h>

static char U1[] = "11111111-1111-4111-8111-111111111111";
static char U2[] = "22222222-2222-4222-8222-222222222222";
static char U3[] = "33333333-3333-4333-8333-333333333333";

#define VICTIM_CALLS	32
#define FLOOD_BAD	40	/* malformed requests of each kind */
#define FLOOD_DB	16	/* doorbells with no channel behind them */
#define OWNER_ROUNDS	8	/* owner-only modifies, each between two GET_INFOs */
#define OWNER_VM	"0a0e0000-1111-4111-8111-111111111111"
#define FLOOD_PINGS	3	/* VF 1's share of a window against VF 2's one: busy, and VF 2
				 * light (3 of 4 over 2 VFs is above 3/4 of a share, 1 of 4 not) */

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	if (t_daemon_start(d, "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL))
		return -1;
	if (T_CTL(d, "set-vfs", "3") || T_CTL(d, "define", "-t", "vgpu-256M", "-u", U1) ||
	    T_CTL(d, "define", "-t", "vgpu-256M", "-u", U2) ||
	    T_CTL(d, "define", "-t", "vgpu-256M", "-u", U3) ||
	    T_CTL(d, "start", "-u", U1) || T_CTL(d, "start", "-u", U2) ||
	    T_CTL(d, "start", "-u", U3))
		return -1;
	return 0;
}

static char held_log[256];	/* the stderr of setup_held()'s vgpud */

/* setup() with vgpud-test under a GSP deadline far beyond the suite's timeout: a call the
 * test holds in a stopped GSP stays in flight until the test lets the GSP go. Its log goes
 * to held_log. */
static int setup_held(void **state)
{
	char *args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };
	struct tdaemon *d = t_daemon_new();
	int r;

	*state = d;
	d->prog = "vgpud-test";
	if (setenv("VGPU_GSP_DEADLINE_MS", "3600000", 1))
		return -1;
	r = t_daemon_start_logged(d, args, held_log, sizeof(held_log));
	unsetenv("VGPU_GSP_DEADLINE_MS");
	if (r || T_CTL(d, "set-vfs", "3") || T_CTL(d, "define", "-t", "vgpu-256M", "-u", U1) ||
	    T_CTL(d, "define", "-t", "vgpu-256M", "-u", U2) ||
	    T_CTL(d, "define", "-t", "vgpu-256M", "-u", U3) ||
	    T_CTL(d, "start", "-u", U1) || T_CTL(d, "start", "-u", U2) ||
	    T_CTL(d, "start", "-u", U3))
		return -1;
	return 0;
}

static void attach(struct tdaemon *d, unsigned int vf, struct tguest *g)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/vf%u.sock", d->run, vf);
	assert_int_equal(t_guest_attach(path, g), 0);
}

/* One RM call and its reply (the test fails on a mailbox-level error). */
static struct vgpu_rm_reply rm_call(struct tguest *g, const void *req, uint32_t len)
{
	uint8_t rep[VF_MSG_MAX_PAYLOAD];
	struct vgpu_rm_reply rp;
	uint32_t got = 0;

	assert_int_equal(t_guest_call(g, VF_MSG_RM, req, len, rep, sizeof(rep), &got), 0);
	assert_true(got >= sizeof(rp));
	memcpy(&rp, rep, sizeof(rp));
	return rp;
}

static struct vgpu_rm_msg rm_hdr(uint32_t op, uint32_t len)
{
	return (struct vgpu_rm_msg){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
				     .abi_version = VGPU_ABI_VERSION, .op = op, .length = len };
}

/* Client, device and subdevice: the subdevice's handle in *@hsub, the client's returned. */
static uint32_t rm_subdevice(struct tguest *g, uint32_t *hsub)
{
	struct vgpu_rm_msg c = rm_hdr(VGPU_RM_OP_ALLOC_CLIENT, sizeof(c));
	struct vgpu_rm_alloc a = { .hdr = rm_hdr(VGPU_RM_OP_ALLOC, sizeof(a)) };
	struct vgpu_rm_reply rp = rm_call(g, &c, sizeof(c));
	uint32_t hc = rp.handle;

	assert_int_equal(rp.status, 0);
	a.h_client = hc;
	a.h_parent = hc;
	a.h_class = VGPU_RM_CLASS_DEVICE;
	rp = rm_call(g, &a, sizeof(a));
	assert_int_equal(rp.status, 0);
	a.h_parent = rp.handle;
	a.h_class = VGPU_RM_CLASS_SUBDEVICE;
	rp = rm_call(g, &a, sizeof(a));
	assert_int_equal(rp.status, 0);
	*hsub = rp.handle;
	return hc;
}

/* A GSP_ECHO control message of @plen parameter bytes into @buf; its length. */
static uint32_t rm_echo_msg(uint8_t *buf, uint32_t hc, uint32_t hsub, uint32_t plen)
{
	struct vgpu_rm_control *m = (struct vgpu_rm_control *)buf;

	*m = (struct vgpu_rm_control){ .hdr = rm_hdr(VGPU_RM_OP_CONTROL,
						     (uint32_t)sizeof(*m) + plen),
				       .h_client = hc, .h_object = hsub,
				       .cmd = VGPU_RM_CTRL_GSP_ECHO, .params_len = plen };
	memset(m + 1, 0x5a, plen);
	return m->hdr.length;
}

/* The next thread id of the /proc/<pid>/task listing @dir, or NULL at its end. */
static const char *task_next(DIR *dir)
{
	struct dirent *e;

	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			return e->d_name;
	return NULL;
}

/* The threads of @pid, for task_next(); closedir() when done. */
static DIR *tasks_open(pid_t pid)
{
	char path[64];
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	return dir;
}

/* The first line of /proc/@pid/task/@tid/@file in @buf; false if there is none (a thread
 * that has just ended, an empty file). */
static bool task_line(pid_t pid, const char *tid, const char *file, char *buf, int len)
{
	char path[320];
	bool got;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", (int)pid, tid, file);
	f = fopen(path, "r");
	if (!f)
		return false;
	got = fgets(buf, len, f) != NULL;
	fclose(f);
	return got;
}

/* The pid of @daemon's child vgpu-gsp (any of its threads may have spawned it). */
static pid_t gsp_pid(pid_t daemon)
{
	DIR *dir = tasks_open(daemon);
	const char *tid;
	pid_t found = 0;
	char buf[256];

	while (!found && (tid = task_next(dir)))
		if (task_line(daemon, tid, "children", buf, sizeof(buf)))
			found = (pid_t)atoi(buf);
	closedir(dir);
	assert_true(found > 0);
	return found;
}

/* Whether every thread of @pid is stopped ("T" in its stat). */
static bool all_stopped(pid_t pid)
{
	DIR *dir = tasks_open(pid);
	const char *tid, *st;
	bool stopped = true;
	char buf[512];

	while (stopped && (tid = task_next(dir)))
		/* The state follows the command name's closing parenthesis. */
		if (task_line(pid, tid, "stat", buf, sizeof(buf)) && (st = strrchr(buf, ')')))
			stopped = st[1] == ' ' && st[2] == 'T';
	closedir(dir);
	return stopped;
}

/* Stop @pid and wait until it is: kill() only queues the stop, and a thread of it still
 * running could take one more RPC. */
static void stop_process(pid_t pid)
{
	assert_int_equal(kill(pid, SIGSTOP), 0);
	while (!all_stopped(pid))
		sched_yield();
}

/* query-stats of @vf: rpc.ok, rpc.errors, doorbell invalid + disabled (DB_BAD). */
static void vf_stats(struct tclient *c, unsigned int vf, uint64_t *ok, uint64_t *err,
		     uint64_t *db_bad)
{
	json_object *a = json_object_new_object(), *rep, *arr, *o, *rpc, *db;

	json_object_object_add(a, "vf", json_object_new_int((int)vf));
	rep = t_exec(c, "query-stats", a);
	assert_true(json_object_object_get_ex(t_ret(rep), "vfs", &arr));
	o = json_object_array_get_idx(arr, 0);
	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "rpc", &rpc));
	assert_true(json_object_object_get_ex(o, "doorbell", &db));
	*ok = t_get_u64(rpc, "ok");
	*err = t_get_u64(rpc, "errors");
	*db_bad = t_get_u64(db, "invalid") + t_get_u64(db, "disabled");
	json_object_put(rep);
}

/* VF 1's RM call is held in a stopped GSP, under a deadline longer than the suite's
 * timeout (setup_held), until the test lets the GSP go: VF 2's pings and VF 3's info
 * requests are all answered meanwhile, VF 1 still has no reply after each of them, and
 * VF 1's call succeeds once the GSP runs again. With one thread for every mailbox, VF 2's
 * first ping would wait behind VF 1's call and the test would hang until the suite's
 * timeout. */
static void test_victim_served_while_gsp_held(void **state)
{
	struct tdaemon *d = *state;
	struct tguest g1, g2, g3;
	uint8_t msg[VF_MSG_MAX_PAYLOAD], slot[VF_MBOX_SLOT_SIZE];
	uint32_t hc, hsub, len;
	struct vf_msg *rsp = (struct vf_msg *)slot;
	struct vgpu_rm_reply rp;
	struct vf_msg_info info;
	pid_t gsp = gsp_pid(d->pid);
	char echo[32];
	uint32_t got;

	attach(d, 1, &g1);
	attach(d, 2, &g2);
	attach(d, 3, &g3);
	hc = rm_subdevice(&g1, &hsub);
	len = rm_echo_msg(msg, hc, hsub, 256);
	assert_int_equal(rm_call(&g1, msg, len).status, 0);	/* it works through the GSP */
	stop_process(gsp);	/* the gate: no RPC completes */
	t_guest_post(&g1, VF_MSG_RM, msg, len);
	/* VF 1's service thread has taken the request and is in its RM call. */
	while (cmn_ring_count(&g1.req))
		usleep(1000);
	for (unsigned int i = 0; i < VICTIM_CALLS; i++) {
		snprintf(echo, sizeof(echo), "victim %u", i);
		assert_int_equal(t_guest_call(&g2, VF_MSG_PING, echo, sizeof(echo), NULL, 0, &got),
				 0);
		assert_int_equal(got, sizeof(echo));
		assert_int_equal(t_guest_call(&g3, VF_MSG_GET_INFO, NULL, 0, &info, sizeof(info),
					      &got), 0);
		assert_int_equal(info.vf_id, 3);
		/* Answered while VF 1's call is still held at the gate. */
		assert_int_equal(cmn_ring_count(&g1.rsp), 0);
	}
	assert_int_equal(kill(gsp, SIGCONT), 0);
	assert_int_equal(t_guest_wait(&g1, VF_VEC_MBOX), 0);
	assert_int_equal(cmn_ring_pop(&g1.rsp, slot), 0);
	assert_int_equal(rsp->seq, g1.seq);
	assert_int_equal(rsp->status, 0);
	assert_true(rsp->length >= sizeof(rp));
	memcpy(&rp, slot + sizeof(*rsp), sizeof(rp));
	assert_int_equal(rp.status, 0);		/* the echo went through, late but whole */
	t_guest_detach(&g1);
	t_guest_detach(&g2);
	t_guest_detach(&g3);
	/* A clean exit: the TSan vgpud ends with 66 once it reported a race. */
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
}

/* Whether vgpud reports slice @uuid detaching (query-slices' "detaching"; absent: no). */
static bool slice_detaching(struct tdaemon *d, const char *uuid)
{
	json_object *all, *arr, *v;
	bool det = false;

	assert_int_equal(T_CTL(d, "--json", "list", "-u", (char *)uuid), 0);
	all = t_out_json();
	arr = all;
	if (!json_object_is_type(all, json_type_array))
		assert_true(json_object_object_get_ex(all, "slices", &arr));
	if (json_object_object_get_ex(json_object_array_get_idx(arr, 0), "detaching", &v))
		det = json_object_get_boolean(v);
	json_object_put(all);
	return det;
}

/* VF 1's guest leaves while its RM call is held in a stopped GSP (setup_held): the loop
 * thread does not wait for the call. While it is held, vgpud answers its control socket
 * (status, and the slice list, which shows VF 1 detaching and no longer attached), refuses
 * a new guest on VF 1 saying why, and takes VF 2's guest, whose RM calls (a client, device
 * and subdevice: CPU-RM only) are answered. Once the GSP runs again the call ends, VF 1's
 * detach completes (no longer detaching, its RM state freed) and a new guest attaches to
 * VF 1, finds no reply of the old guest's call in its ring, and is served. With the loop
 * waiting for the call in hand, the first command after the guest left got no reply
 * while the GSP was held (vgpuctl gives up: exit 6). */
static void test_detach_with_call_held(void **state)
{
	struct tdaemon *d = *state;
	struct vgpu_rm_msg c = rm_hdr(VGPU_RM_OP_ALLOC_CLIENT, sizeof(c));
	uint8_t msg[VF_MSG_MAX_PAYLOAD];
	struct tguest g1, g2, again;
	uint32_t hc, hsub, len;
	pid_t gsp = gsp_pid(d->pid);
	char path[256];

	attach(d, 1, &g1);
	hc = rm_subdevice(&g1, &hsub);
	len = rm_echo_msg(msg, hc, hsub, 256);
	stop_process(gsp);	/* the gate: no RPC completes */
	t_guest_post(&g1, VF_MSG_RM, msg, len);
	/* VF 1's service thread has taken the request and is in its RM call. */
	while (cmn_ring_count(&g1.req))
		usleep(1000);
	t_guest_detach(&g1);
	/* The loop saw the guest go; the call stays in the stopped GSP through all of this. */
	while (!slice_detaching(d, U1))
		usleep(1000);
	assert_false(t_slice_attached(d, U1));
	assert_int_equal(T_CTL(d, "status"), 0);
	snprintf(path, sizeof(path), "%s/vf1.sock", d->run);
	assert_int_equal(t_guest_attach(path, &again), -1);
	assert_true(t_log_has(held_log, "the previous guest's mailbox request (an RM call) is "
			      "still in hand"));
	attach(d, 2, &g2);
	rm_subdevice(&g2, &hsub);
	assert_true(slice_detaching(d, U1));
	assert_int_equal(kill(gsp, SIGCONT), 0);
	while (slice_detaching(d, U1))
		usleep(1000);
	/* Its RM state goes in batches from the loop, after the detach. */
	while (t_rm_objects(d, 1))
		usleep(1000);
	attach(d, 1, &again);
	assert_int_equal(cmn_ring_count(&again.rsp), 0);	/* the held call's reply dropped */
	assert_int_equal(rm_call(&again, &c, sizeof(c)).status, 0);
	t_guest_detach(&again);
	t_guest_detach(&g2);
	/* A clean exit: the TSan vgpud ends with 66 once it reported a race. */
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
}

/* VF 1 floods malformed requests (unknown type, oversized, bad RM messages) and doorbells
 * naming no channel: every request is answered with an error, and only VF 1's RPC_ERR and
 * DB_BAD move; VF 2, served in between, has only successes. */
static void test_malformed_flood_isolated(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *c = t_client(d, true);
	struct tguest g1, g2;
	struct vgpu_rm_msg bad = { .magic = 0, .abi_version = VGPU_ABI_VERSION,
				   .op = VGPU_RM_OP_ALLOC_CLIENT, .length = sizeof(bad) };
	struct vgpu_doorbell_page *db;
	uint64_t ok1, err1, bad1, ok2, err2, bad2, ok3, err3, bad3, one = 1;
	uint8_t junk[VF_MBOX_SLOT_SIZE];
	struct vgpu_rm_reply rp;

	attach(d, 1, &g1);
	attach(d, 2, &g2);
	vf_stats(c, 1, &ok1, &err1, &bad1);
	vf_stats(c, 2, &ok2, &err2, &bad2);
	vf_stats(c, 3, &ok3, &err3, &bad3);
	assert_true(err1 == 0 && err2 == 0 && err3 == 0);
	assert_true(bad1 == 0 && bad2 == 0 && bad3 == 0);
	memset(junk, 0xa5, sizeof(junk));
	db = (struct vgpu_doorbell_page *)(g1.bar + g1.hdr->db_off);
	for (unsigned int i = 0; i < FLOOD_BAD; i++) {
		assert_int_equal(t_guest_call(&g1, 0x7000 + i, NULL, 0, NULL, 0, NULL),
				 -EOPNOTSUPP);
		assert_int_equal(t_guest_call(&g1, VF_MSG_PING, junk, VF_MBOX_SLOT_SIZE, NULL, 0,
					      NULL), -EMSGSIZE);
		assert_int_equal(t_guest_call(&g1, VF_MSG_RM, &bad, sizeof(bad), &rp, sizeof(rp),
					      NULL), 0);
		assert_true(rp.status < 0);	/* bad magic: refused by the RM */
		if (i < FLOOD_DB && vgpu_doorbell_write(db, 0x00ffffffu - i))
			assert_int_equal(write(g1.to_host[VF_VEC_GPU], &one, sizeof(one)),
					 (ssize_t)sizeof(one));
		assert_int_equal(t_guest_call(&g2, VF_MSG_PING, "ok", 3, NULL, 0, NULL), 0);
	}
	/* The device counts the doorbells as it consumes them, however late a loaded host
	 * runs it (one it never counts hangs the test until the suite's timeout). */
	vf_stats(c, 1, &ok1, &err1, &bad1);
	while (bad1 < FLOOD_DB) {
		usleep(1000);
		vf_stats(c, 1, &ok1, &err1, &bad1);
	}
	vf_stats(c, 2, &ok2, &err2, &bad2);
	vf_stats(c, 3, &ok3, &err3, &bad3);
	assert_true(err1 == 3 * FLOOD_BAD);
	assert_true(ok1 == 0);
	assert_true(bad1 == FLOOD_DB);
	assert_true(ok2 == FLOOD_BAD && err2 == 0 && bad2 == 0);
	assert_true(ok3 == 0 && err3 == 0 && bad3 == 0);
	t_guest_detach(&g1);
	t_guest_detach(&g2);
	t_client_free(c);
}

/* An owner-only modify-slice, taken with a guest attached, sets the quota that the VF's
 * service thread reads for GET_INFO: it does so under the service lock, where the thread
 * copies it, so the TSan vgpud sees no race (ThreadSanitizer ends a process that reported
 * one with status 66), and every GET_INFO answers the provisioned quota. The owner token
 * changes (taken, released): a running slice's owner uid changes only away from root. */
static void test_owner_modify_while_served(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *c = t_client(d, true);
	struct vf_msg_info first, info;
	struct tguest g;
	uint32_t got;

	attach(d, 1, &g);
	assert_int_equal(t_guest_call(&g, VF_MSG_GET_INFO, NULL, 0, &first, sizeof(first), &got),
			 0);
	assert_int_equal(first.vf_id, 1);
	for (unsigned int i = 0; i < OWNER_ROUNDS; i++) {
		json_object *a = t_args("uuid", U1), *rep, *tok = t_args("vm", OWNER_VM);

		json_object_object_add(tok, "generation", json_object_new_int64(i / 2));
		json_object_object_add(a, i % 2 ? "release-owner" : "owner", tok);
		rep = t_exec(c, "modify-slice", a);
		assert_non_null(t_ret(rep));
		json_object_put(rep);
		assert_int_equal(t_guest_call(&g, VF_MSG_GET_INFO, NULL, 0, &info, sizeof(info),
					      &got), 0);
		assert_int_equal(got, sizeof(info));
		assert_true(info.vram_size == first.vram_size);
		assert_int_equal(info.channels, first.channels);
		assert_int_equal(info.doorbells, first.doorbells);
	}
	t_guest_detach(&g);
	t_client_free(c);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
}

/* Priority by share, by counts of one window: a VF served at most 3/4 of a fair share
 * keeps nice 0, any other gets CMN_SHARE_NICE_BUSY; alone it is never lowered. */
static void test_share_nice(void **state)
{
	(void)state;
	/* Alone, or nobody served: nothing to be fair to. */
	assert_int_equal(cmn_share_nice(1000, 1000, 1), 0);
	assert_int_equal(cmn_share_nice(0, 0, 0), 0);
	/* The victim against 62 VFs of 12 requests each: share 760 / 63, light at <= 9. */
	assert_int_equal(cmn_share_nice(4, 62 * 12 + 4, 63), 0);
	assert_int_equal(cmn_share_nice(12, 62 * 12 + 4, 63), CMN_SHARE_NICE_BUSY);
	/* The boundary: exactly 750 per mille of a share is light, one more is not. */
	assert_int_equal(cmn_share_nice(75, 400, 4), 0);
	assert_int_equal(cmn_share_nice(76, 400, 4), CMN_SHARE_NICE_BUSY);
	/* VFs that all flood alike are all busy: none is put behind another. */
	assert_int_equal(cmn_share_nice(100, 6300, 63), CMN_SHARE_NICE_BUSY);
	/* Two VFs, one flooding: the flood is busy, the light one is not. */
	assert_int_equal(cmn_share_nice(10000, 10010, 2), CMN_SHARE_NICE_BUSY);
	assert_int_equal(cmn_share_nice(10, 10010, 2), 0);
	/* A light VF among 1 to 62 flooding ones stays at 0, each flood goes busy. */
	for (uint32_t n = 1; n <= 62; n++) {
		uint64_t per = 12, light = 4, total = n * per + light;

		assert_int_equal(cmn_share_nice(light, total, n + 1), 0);
		assert_int_equal(cmn_share_nice(per, total, n + 1), CMN_SHARE_NICE_BUSY);
	}
}

/* The nice of @daemon's thread named @comm, read from /proc; fails if there is none. */
static int thread_nice(pid_t daemon, const char *comm)
{
	DIR *dir = tasks_open(daemon);
	size_t n = strlen(comm);
	const char *tid;
	char buf[512], *st;

	while ((tid = task_next(dir))) {
		if (!task_line(daemon, tid, "comm", buf, sizeof(buf)) || strncmp(buf, comm, n) ||
		    (buf[n] != '\n' && buf[n]))
			continue;
		assert_true(task_line(daemon, tid, "stat", buf, sizeof(buf)));
		closedir(dir);
		/* Past the command's closing parenthesis: state is field 3, nice field 19. */
		st = strrchr(buf, ')');
		assert_non_null(st);
		st = strtok(st + 1, " ");
		for (int i = 3; st && i < 19; i++)
			st = strtok(NULL, " ");
		assert_non_null(st);
		return atoi(st);
	}
	closedir(dir);
	fail_msg("vgpud has no thread named %s", comm);
	return 0;
}

static uint64_t share_window_now(void)
{
	return cmn_share_window(cmn_now_ns());
}

/* Until the next share window starts; its number. */
static uint64_t next_share_window(void)
{
	uint64_t w = share_window_now();

	while (share_window_now() == w)
		usleep(1000);
	return share_window_now();
}

static void ping(struct tguest *g)
{
	assert_int_equal(t_guest_call(g, VF_MSG_PING, "x", 1, NULL, 0, NULL), 0);
}

/* vgpud's own service threads, by the counts of two share windows on the clock vgpud
 * windows by (CLOCK_MONOTONIC): in window W, VF 1 is served FLOOD_PINGS requests and
 * VF 2 one; in W + 1 each is served one more, at the nice W gave it. VF 1's thread then
 * runs at CMN_SHARE_NICE_BUSY, VF 2's and the idle VF 3's at 0: a light VF's thread, once
 * woken, runs ahead of a flooding one's. A round whose requests are not all served in
 * their window (every request is counted before its reply) is played again. */
static void test_light_vf_ahead_of_flood(void **state)
{
	struct tdaemon *d = *state;
	struct tguest g1, g2;
	struct rlimit rl;
	bool done = false;
	uint64_t w;

	/* vgpud can put a thread back to nice 0 only with this (cmn_share_may_renice). */
	if (geteuid() && (getrlimit(RLIMIT_NICE, &rl) || rl.rlim_cur < 20))
		skip();
	attach(d, 1, &g1);
	attach(d, 2, &g2);
	while (!done) {
		/* Skip a whole window: W - 1 then has none of the requests, all start light. */
		next_share_window();
		w = next_share_window();
		ping(&g2);
		for (unsigned int i = 0; i < FLOOD_PINGS; i++)
			ping(&g1);
		if (share_window_now() != w)
			continue;
		if (next_share_window() != w + 1)
			continue;
		ping(&g2);
		ping(&g1);
		done = share_window_now() == w + 1;
	}
	/* A thread's nice changes only when it serves a request: these stay. */
	assert_int_equal(thread_nice(d->pid, "vgpud-vf1"), CMN_SHARE_NICE_BUSY);
	assert_int_equal(thread_nice(d->pid, "vgpud-vf2"), 0);
	assert_int_equal(thread_nice(d->pid, "vgpud-vf3"), 0);
	t_guest_detach(&g1);
	t_guest_detach(&g2);
	/* A clean exit: the TSan vgpud ends with 66 once it reported a race. */
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
}

/* The counts across windows, by window number: a VF's requests of one window set its nice
 * for the next; a VF silent for a window comes back light; a VF alone is never lowered. */
static void test_share_windows(void **state)
{
	struct cmn_share_plane p = { 0 };
	struct cmn_share_user flood = { 0 }, light = { 0 };

	(void)state;
	/* Window 1: the first requests of both run at nice 0 (nothing known yet). */
	for (int i = 0; i < 100; i++)
		assert_int_equal(cmn_share_count(&p, &flood, 1), 0);
	assert_int_equal(cmn_share_count(&p, &light, 1), 0);
	/* Window 2: the flood's 100 of 101 is over 3/4 of half: busy; the light one is not. */
	assert_int_equal(cmn_share_count(&p, &flood, 2), CMN_SHARE_NICE_BUSY);
	assert_int_equal(cmn_share_count(&p, &light, 2), 0);
	for (int i = 0; i < 99; i++)
		assert_int_equal(cmn_share_count(&p, &flood, 2), CMN_SHARE_NICE_BUSY);
	/* Window 4: the light VF skipped window 3, the flood was alone there: both at 0. */
	for (int i = 0; i < 50; i++)
		assert_int_equal(cmn_share_count(&p, &flood, 3), CMN_SHARE_NICE_BUSY);
	assert_int_equal(cmn_share_count(&p, &flood, 4), 0);
	assert_int_equal(cmn_share_count(&p, &light, 4), 0);
	for (int i = 0; i < 49; i++)
		assert_int_equal(cmn_share_count(&p, &flood, 4), 0);
	/* Window 6: the flood skipped window 5 and is light again, whatever it did before. */
	assert_int_equal(cmn_share_count(&p, &light, 5), 0);
	assert_int_equal(cmn_share_count(&p, &flood, 6), 0);
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test_setup_teardown(test_victim_served_while_gsp_held, setup_held,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_detach_with_call_held, setup_held,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_malformed_flood_isolated, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_owner_modify_while_served, setup, t_teardown),
		cmocka_unit_test(test_share_nice),
		cmocka_unit_test_setup_teardown(test_light_vf_ahead_of_flood, setup, t_teardown),
		cmocka_unit_test(test_share_windows),
	};

	return cmocka_run_group_tests_name("vgpud_svc", t, NULL, NULL);
}
