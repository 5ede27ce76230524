// SPDX-License-Identifier: MIT
/* vgpud + vgpuctl integration: every verb, idempotence, dry-run, permissions, bad input
 * and state files, against a real daemon in a temporary runtime/state dir. */
#include "pf_test.h"
#include "common/version.h"
#include "ctlclient/ctlclient.h"

#define U1 "11111111-1111-4111-8111-111111111111"
#define U2 "22222222-2222-4222-8222-222222222222"
#define U3 "33333333-3333-4333-8333-333333333333"

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	return t_daemon_start(d, "--vram", "4G", "--max-vfs", "8", "--spare-vram", "512M", NULL);
}

static int teardown(void **state)
{
	return t_teardown(state);
}

/* Every verb once, in a lifecycle, with its exit code and what it printed. */
static void test_every_verb(void **state)
{
	struct tdaemon *d = *state;
	char svg[256];
	json_object *o, *v;

	assert_int_equal(T_CTL(d, "status"), 0);
	assert_non_null(strstr(t_out.out, "VRAM: 4 GiB"));
	assert_int_equal(T_CTL(d, "types"), 0);
	assert_non_null(strstr(t_out.out, "vgpu-1G"));
	assert_non_null(strstr(t_out.out, "no VFs enabled"));	/* not creatable, with why */
	assert_int_equal(T_CTL(d, "set-vfs", "4"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1, "--manual"), 0);
	assert_non_null(strstr(t_out.out, "defined"));
	assert_int_equal(T_CTL(d, "list"), 0);
	assert_non_null(strstr(t_out.out, U1 " 0000:00:00.0 vgpu-1G manual defined"));
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "VF 1: 1 GiB VRAM"));
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--exec-quantum-ms", "5"), 0);
	assert_non_null(strstr(t_out.out, "modified"));
	assert_int_equal(T_CTL(d, "stats", "--json"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "vfs", &v));
	assert_int_equal(json_object_array_length(v), 1);
	json_object_put(o);
	assert_int_equal(T_CTL(d, "stats"), 0);
	assert_non_null(strstr(t_out.out, "RPC_OK"));
	assert_int_equal(T_CTL(d, "reset", "1"), 0);
	assert_non_null(strstr(t_out.out, "reset"));
	snprintf(svg, sizeof(svg), "%s/map.svg", d->root);
	assert_int_equal(T_CTL(d, "vram-map", "--svg", svg, "--no-color"), 0);
	assert_non_null(strstr(t_out.out, "VRAM 4 GiB: [########1111"));
	assert_int_equal(access(svg, R_OK), 0);
	{
		FILE *f = fopen(svg, "r");
		char head[256] = "";

		assert_non_null(f);
		assert_true(fread(head, 1, sizeof(head) - 1, f) > 0);
		fclose(f);
		assert_non_null(strstr(head, "<svg xmlns='http://www.w3.org/2000/svg'"));
	}
	/* never over a file (a link planted there included): Conflict, the file kept */
	assert_int_equal(T_CTL(d, "vram-map", "--svg", svg, "--no-color"), 4);
	assert_non_null(strstr(t_out.err, "never overwrites a file"));
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "undefine", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "list", "--json"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &v));
	assert_int_equal(json_object_array_length(v), 0);
	assert_true(json_object_object_get_ex(o, "schema", &v));
	json_object_put(o);
}

/* JSON output: versioned, sizes in bytes, quota read back as provisioned (aligned). */
static void test_json_and_alignment(void **state)
{
	struct tdaemon *d = *state;
	json_object *o, *arr, *s, *p;

	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1, "--vram", "1001M",
			       "--channels", "8"), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1, "--json"), 0);
	assert_int_equal(T_CTL(d, "list", "-u", U1, "--json"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &arr));
	s = json_object_array_get_idx(arr, 0);
	assert_true(json_object_object_get_ex(s, "provisioned", &p));
	assert_true(t_get_u64(p, "vram_bytes") == 1002ull << 20);	/* 2 MiB aligned up */
	assert_int_equal(t_get_u64(p, "channels"), 8);
	json_object_put(o);
}

/* define/start of an identical slice: success, "unchanged"; a different spec: conflict. */
static void test_idempotence(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);			/* same value: no-op */
	assert_non_null(strstr(t_out.out, "unchanged"));
	assert_int_equal(T_CTL(d, "set-vfs", "3"), 4);			/* N -> M: busy */
	assert_int_equal(T_CTL(d, "set-vfs", "9"), 5 - 3);		/* over max: range (usage) */
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1, "--auto"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1, "--auto"), 0);
	assert_non_null(strstr(t_out.out, "unchanged"));
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1, "--auto"), 4);
	assert_non_null(strstr(t_out.err, "mdev_type: current \"vgpu-1G\", requested \"vgpu-512M\""));
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "unchanged"));
	assert_int_equal(T_CTL(d, "undefine", "-u", U1), 4);		/* running: busy */
	assert_int_equal(T_CTL(d, "set-vfs", "0"), 4);			/* slices running */
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--vram", "2G"), 4);	/* running */
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "unchanged"));
	/* modify: same values are "unchanged"; a malformed attrs is refused, daemon alive */
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--auto"), 0);
	assert_non_null(strstr(t_out.out, "unchanged"));
	{
		struct tclient *c = t_client(d, true);
		json_object *a = t_args("uuid", U1), *rep;

		json_object_object_add(a, "attrs", json_object_new_int(5));
		rep = t_exec(c, "modify-slice", a);
		assert_string_equal(t_err_class(rep), "InvalidArgument");
		json_object_put(rep);
		a = t_args("uuid", U1);
		json_object_object_add(a, "start", json_object_new_int(5));
		rep = t_exec(c, "modify-slice", a);
		assert_string_equal(t_err_class(rep), "InvalidArgument");
		json_object_put(rep);
		t_client_free(c);
	}
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--manual", "--channels", "4"), 0);
	assert_non_null(strstr(t_out.out, "modified"));
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "manual defined"));
}

/* --dry-run on every mutating verb: same exit code as the real run, nothing changes. */
static const struct dry_case {
	const char *name;
	const char *argv[8];
	int want;
} dry_cases[] = {
	{ "define new", { "define", "-t", "vgpu-1G", "-u", U3 }, 0 },
	{ "define conflict", { "define", "-t", "vgpu-512M", "-u", U1 }, 4 },
	{ "undefine stopped", { "undefine", "-u", U2 }, 0 },
	{ "undefine running", { "undefine", "-u", U1 }, 4 },
	{ "start stopped", { "start", "-u", U2 }, 0 },
	{ "start unknown", { "start", "-u", U3 }, 3 },
	{ "stop running", { "stop", "-u", U1 }, 0 },
	{ "modify running vram", { "modify", "-u", U1, "--vram", "512M" }, 4 },
	{ "modify stopped", { "modify", "-u", U2, "--vram", "512M" }, 0 },
	{ "set-vfs busy", { "set-vfs", "3" }, 4 },
	{ "reset running", { "reset", "1" }, 0 },
	{ "reset idle VF", { "reset", "2" }, 3 },
	{ "start no space", { "start", "-u", U2 }, 5 },
};

static void test_dry_run(void **state)
{
	const struct dry_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	struct tclient *cl;
	char *before, *after, *argv[12];
	int n = 0;

	assert_int_equal(t_daemon_start(d, "--vram", "4G", "--max-vfs", "4", NULL), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-2G", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "define", "-t", strcmp(c->name, "start no space") ? "vgpu-1G" :
			       "vgpu-2G", "-u", U2), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	cl = t_client(d, true);
	before = t_snapshot(cl);
	for (int i = 0; c->argv[i]; i++)
		argv[n++] = (char *)c->argv[i];
	argv[n++] = "--dry-run";
	argv[n] = NULL;
	assert_int_equal(t_ctl_argv(d, &t_out, 0, argv), c->want);
	after = t_snapshot(cl);
	assert_string_equal(before, after);
	if (!c->want)
		assert_non_null(strstr(t_out.out, "dry run"));
	if (c->want == 5)
		assert_non_null(strstr(t_out.err, "largest free extent"));
	free(before);
	free(after);
	t_client_free(cl);
	/* and the real run agrees */
	n--;
	argv[n] = NULL;
	assert_int_equal(t_ctl_argv(d, &t_out, 0, argv), c->want);
	t_daemon_free(d);
}

/* Errors name the exhausted resource and the largest free extent. */
static void test_insufficient(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(T_CTL(d, "set-vfs", "4"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-2G", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-2G", "-u", U2), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U2), 5);
	assert_non_null(strstr(t_out.err, "needs 2 GiB contiguous VRAM; 1.5 GiB free, largest free "
			       "extent 1.5 GiB"));
	assert_int_equal(T_CTL(d, "types"), 0);
	assert_non_null(strstr(t_out.out, "Creatable: no - max instances (1) reached"));
}

/* A non-admin user may query but not mutate; with the default mode it cannot connect. */
static void test_permissions(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct tclient *cl;
	char *before, *after;

	if (geteuid() != 0)
		skip();	/* dropping to nobody needs root */

	(void)state;
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--socket-mode", "0666",
					NULL), 0);
	cl = t_client(d, true);
	before = t_snapshot(cl);
	assert_int_equal(T_CTL_AS(d, 65534, "status"), 0);
	assert_int_equal(T_CTL_AS(d, 65534, "list"), 0);
	assert_int_equal(T_CTL_AS(d, 65534, "set-vfs", "2"), 7);
	assert_non_null(strstr(t_out.err, "permission denied"));
	assert_int_equal(T_CTL_AS(d, 65534, "define", "-t", "vgpu-1G", "-u", U1), 7);
	assert_int_equal(T_CTL_AS(d, 65534, "define", "-t", "vgpu-1G", "-u", U1, "--dry-run"), 7);
	after = t_snapshot(cl);
	assert_string_equal(before, after);
	free(before);
	free(after);
	t_client_free(cl);
	t_daemon_stop(d, SIGTERM);
	/* default 0660 root-owned socket: nobody cannot even connect */
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	assert_int_equal(T_CTL_AS(d, 65534, "status"), 7);
	t_daemon_free(d);
}

/* The admin group owns the socket and may mutate: nobody's primary group is nogroup. */
static void test_admin_group(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct stat sb;

	if (geteuid() != 0)
		skip();	/* dropping to nobody needs root */

	(void)state;
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--admin-group",
					"nogroup", NULL), 0);
	assert_int_equal(stat(d->sock, &sb), 0);
	assert_int_equal(sb.st_gid, 65534);
	assert_int_equal(sb.st_mode & 0777, 0660);
	assert_int_equal(T_CTL_AS(d, 65534, "set-vfs", "1"), 0);
	assert_int_equal(T_CTL_AS(d, 65534, "define", "-t", "vgpu-512M", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	t_daemon_free(d);
}

/* Admin rights come from the groups a client had when it connected (SO_PEERGROUPS), not
 * from /proc/<pid> when vgpud gets round to the accept: a process that gains the admin
 * group after its connect, as a stranger that got a gone connector's pid would show in
 * /proc, stays a user. vgpud is stopped over the connect so that the accept comes after. */
static const struct peer_groups_case {
	const char *name;
	bool at_connect;	/* the admin group is the client's when it connects */
	const char *cls;	/* set-vfs's error class, "" for done */
} peer_groups_cases[] = {
	{ "admin group at connect", true, "" },
	{ "admin group gained after connect", false, "PermissionDenied" },
};

/* The child that connects @fd as nobody, with the admin group @g now or only after. */
static void peer_groups_child(const struct peer_groups_case *c, int fd, const char *path,
			      gid_t g, int ready, int done)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char b = 0;

	if (strlen(path) >= sizeof(sa.sun_path))
		_exit(1);
	memcpy(sa.sun_path, path, strlen(path));
	/* Saved uid 0: the child may take the group after its connect. */
	if (setgroups(c->at_connect, &g) || setgid(65534) || setresuid(65534, 65534, 0) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		_exit(1);
	if (!c->at_connect && (seteuid(0) || setgroups(1, &g) || seteuid(65534)))
		_exit(2);
	if (write(ready, &b, 1) != 1 || read(done, &b, 1) < 0)
		_exit(3);
	_exit(0);
}

static void test_peer_groups(void **state)
{
	const struct peer_groups_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	struct tclient *cl = calloc(1, sizeof(*cl));
	struct group *gr = getgrnam("users");
	int ready[2], done[2], st;
	json_object *rep, *args;
	pid_t pid;
	char b;

	if (geteuid() != 0 || !gr)
		skip();	/* dropping to nobody needs root, and a group besides nogroup */
	assert_non_null(cl);
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--admin-group",
					"users", "--socket-mode", "0666", NULL), 0);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(done), 0);
	cl->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(cl->fd >= 0);
	kill(d->pid, SIGSTOP);
	assert_int_equal(waitpid(d->pid, &st, WUNTRACED), d->pid);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		/* Only the parent's end: a parent that fails and exits ends the child's read. */
		close(done[1]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		peer_groups_child(c, cl->fd, d->sock, gr->gr_gid, ready[1], done[0]);
	}
	close(done[0]);
	close(ready[1]);
	assert_int_equal(read(ready[0], &b, 1), 1);
	kill(d->pid, SIGCONT);
	rep = t_read_json(cl, -1);	/* the greeting */
	assert_non_null(rep);
	json_object_put(rep);
	json_object_put(t_exec(cl, "qmp_capabilities", NULL));
	args = json_object_new_object();
	json_object_object_add(args, "num_vfs", json_object_new_int(1));
	rep = t_exec(cl, "set-vfs", args);
	assert_non_null(rep);
	if (strcmp(t_err_class(rep), c->cls))
		fail_msg("%s: set-vfs got %s", c->name, json_object_to_json_string(rep));
	json_object_put(rep);
	assert_int_equal(write(done[1], &b, 1), 1);
	close(done[1]);
	close(ready[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	t_client_free(cl);
	t_daemon_free(d);
}

/* Raw protocol: each bad request gets an error reply and changes nothing. */
static const struct raw_case {
	const char *name;
	const char *line;
	const char *cls;
} raw_cases[] = {
	{ "malformed JSON", "{\"execute\": ", "GenericError" },
	{ "not an object", "[1,2,3]", "GenericError" },
	{ "trailing garbage", "{\"execute\":\"query-status\"} x", "GenericError" },
	{ "unknown command", "{\"execute\":\"format-disk\"}", "CommandNotFound" },
	{ "unknown member", "{\"execute\":\"query-status\",\"bogus\":1}", "GenericError" },
	{ "arguments not object", "{\"execute\":\"set-vfs\",\"arguments\":3}", "GenericError" },
	{ "bad vram size", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"attrs\":[{\"vram_bytes\":\"12X\"}]}}", "InvalidArgument" },
	{ "vram too big", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"attrs\":[{\"vram_bytes\":\"64G\"}]}}", "InvalidArgument" },
	{ "bad uuid", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"uuid\":\"not-a-uuid\"}}", "InvalidArgument" },
	{ "unknown type", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"h100\"}}",
	  "InvalidArgument" },
	{ "unknown attribute", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"attrs\":[{\"colour\":\"red\"}]}}", "InvalidArgument" },
	{ "channels 0", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"attrs\":[{\"channels\":0}]}}", "InvalidArgument" },
	{ "rm_objects 0", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"attrs\":[{\"rm_objects\":0}]}}", "InvalidArgument" },
	{ "priority high", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-1G\","
	  "\"attrs\":[{\"priority\":\"high\"}]}}", "InvalidArgument" },
	{ "set-vfs negative", "{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":-1}}",
	  "InvalidArgument" },
	{ "set-vfs string", "{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":\"2\"}}",
	  "InvalidArgument" },
	{ "dry-run not bool", "{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":2,"
	  "\"dry-run\":1}}", "GenericError" },
	{ "stop unknown slice", "{\"execute\":\"stop-slice\",\"arguments\":{\"uuid\":\"" U3 "\"}}",
	  "NotFound" },
	{ "reset VF 0", "{\"execute\":\"reset-vf\",\"arguments\":{\"vf\":0}}", "InvalidArgument" },
	{ "define for another parent", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":"
	  "\"vgpu-1G\",\"uuid\":\"" U3 "\",\"parent\":\"no-such-parent\"}}", "NotFound" },
	{ "define with parent not a string", "{\"execute\":\"define-slice\",\"arguments\":"
	  "{\"type\":\"vgpu-1G\",\"uuid\":\"" U3 "\",\"parent\":7}}", "NotFound" },
	{ "define with migrated_out", "{\"execute\":\"define-slice\",\"arguments\":{\"type\":"
	  "\"vgpu-1G\",\"uuid\":\"" U3 "\",\"migrated_out\":\"tcp:evil:1\"}}", "InvalidArgument" },
};

static void test_bad_input(void **state)
{
	const struct raw_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	struct tclient *cl;
	json_object *rep;
	char *before, *after;

	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	cl = t_client(d, true);
	before = t_snapshot(cl);
	t_send_raw(cl, c->line, strlen(c->line));
	t_send_raw(cl, "\n", 1);
	rep = t_reply(cl);
	assert_non_null(rep);
	assert_string_equal(t_err_class(rep), c->cls);
	json_object_put(rep);
	after = t_snapshot(cl);		/* and the connection still works */
	assert_string_equal(before, after);
	free(before);
	free(after);
	t_client_free(cl);
	t_daemon_free(d);
}

/* vgpuctl's verb table: a verb given the wrong number of positional arguments is a usage
 * error naming the verb and what it takes, and nothing reaches the daemon. */
static const struct nargs_case {
	const char *name;
	char *argv[6];
	const char *msg;
} nargs_cases[] = {
	{ "set-vfs without N", { "set-vfs" }, "set-vfs takes 1 argument (N), got 0" },
	{ "set-vfs with two", { "set-vfs", "1", "2" }, "set-vfs takes 1 argument (N), got 2" },
	{ "list with an argument", { "list", "x" }, "list takes no arguments, got 1" },
	{ "define with an argument", { "define", "-t", "vgpu-1G", "x" },
	  "define takes no arguments" },
	{ "stats with two", { "stats", "1", "2" }, "stats takes at most 1 argument (VF), got 2" },
	{ "reset with two", { "reset", "1", "2" }, "reset takes at most 1 argument (VF), got 2" },
	{ "reset with both", { "reset", "-u", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70", "1" },
	  "reset takes -u UUID or a VF number, not both" },
	/* Flags a verb does not use are refused the same way, naming the flag and the verb. */
	{ "start with --vram", { "start", "-u", U1, "--vram", "1G" },
	  "start -u UUID does not take --vram (only a transient start, -t TYPE, does)" },
	{ "set-vfs with --vram", { "set-vfs", "4", "--vram", "2G" },
	  "set-vfs does not take --vram" },
	{ "stop with --priority", { "stop", "-u", U1, "--priority", "low" },
	  "stop does not take --priority" },
	{ "list with --to", { "list", "--to", "/tmp/x" }, "list does not take --to" },
	{ "status with --auto", { "status", "--auto" }, "status does not take --auto" },
	{ "define with --switchover", { "define", "-t", "vgpu-1G", "--switchover", "auto" },
	  "define does not take --switchover" },
	/* --owner only where vgpud checks or sets the token: elsewhere it would be refused
	 * as an unknown argument, or dropped. */
	{ "reset with --owner", { "reset", "1", "--owner", U2 }, "reset does not take --owner" },
	{ "reclaim with --owner", { "reclaim", "-u", U1, "--owner", U2 ":1" },
	  "reclaim does not take --owner" },
	/* --owner is VMUUID[:GENERATION], the generation decimal digits. */
	{ "owner not a uuid", { "stop", "-u", U1, "--owner", "not-a-uuid:banana" },
	  "bad --owner \"not-a-uuid:banana\": need VMUUID[:GENERATION]" },
	{ "owner generation 5x", { "stop", "-u", U1, "--owner", U2 ":5x" }, "bad --owner" },
	{ "owner generation negative", { "stop", "-u", U1, "--owner", U2 ":-1" }, "bad --owner" },
	{ "owner generation empty", { "stop", "-u", U1, "--owner", U2 ":" }, "bad --owner" },
	{ "release-owner not a uuid", { "modify", "-u", U1, "--release-owner", "banana" },
	  "bad --release-owner" },
};

static void test_nargs(void **state)
{
	const struct nargs_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	struct tclient *cl;
	char *before, *after;

	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	cl = t_client(d, true);
	before = t_snapshot(cl);
	assert_int_equal(t_ctl_argv(d, &t_out, 0, c->argv), 2);
	if (!strstr(t_out.err, c->msg))
		fail_msg("%s: stderr \"%s\" does not say \"%s\"", c->name, t_out.err, c->msg);
	after = t_snapshot(cl);
	assert_string_equal(before, after);
	free(before);
	free(after);
	t_client_free(cl);
	t_daemon_free(d);
}

/* Garbage of every shape (random bytes, truncated and type-confused requests for every
 * command) from a fixed seed: every line is answered, nothing changes, the daemon lives. */
static void test_fuzz_control(void **state)
{
	static const char *const cmds[] = { "define-slice", "undefine-slice", "start-slice",
		"stop-slice", "modify-slice", "set-vfs", "reset-vf", "query-slices", "query-stats" };
	static const char *const vals[] = { "1", "-1", "\"x\"", "[]", "{}", "null", "true",
		"1e99", "\"" U1 "x\"", "[{\"vram_bytes\":{}}]", "99999999999999999999" };
	static const char *const keys[] = { "uuid", "type", "attrs", "num_vfs", "vf", "start",
		"owner", "owner_uid", "dry-run", "zzz" };
	struct tdaemon *d = *state;
	struct tclient *c;
	unsigned int seed = 12345;
	char line[512], *before, *after;
	json_object *rep;

	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "-u", U1), 0);
	c = t_client(d, true);
	before = t_snapshot(c);
	for (int i = 0; i < 400; i++) {
		int n = 0, kind = rand_r(&seed) % 3;

		if (kind == 0) {		/* random bytes */
			int len = 1 + rand_r(&seed) % 200;

			for (; n < len; n++) {
				line[n] = (char)(1 + rand_r(&seed) % 255);
				if (line[n] == '\n')
					line[n] = ' ';
			}
		} else {			/* a request with one confused argument */
			n = snprintf(line, sizeof(line), "{\"execute\":\"%s\",\"arguments\":{\"%s\":%s}}",
				     cmds[rand_r(&seed) % 9], keys[rand_r(&seed) % 10],
				     vals[rand_r(&seed) % 11]);
			if (kind == 2)		/* truncated */
				n = 1 + rand_r(&seed) % n;
		}
		t_send_raw(c, line, (size_t)n);
		t_send_raw(c, "\n", 1);
		rep = t_reply(c);
		assert_non_null(rep);	/* every line is answered */
		json_object_put(rep);
	}
	/* no value above is valid for a mutating command, so nothing may have changed */
	after = t_snapshot(c);
	assert_string_equal(before, after);
	free(before);
	free(after);
	t_client_free(c);
}

/* Before qmp_capabilities only negotiation is accepted; a huge line gets one error. */
static void test_protocol_edges(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *cl = t_client(d, false);
	json_object *rep;
	size_t big = 200 * 1024;
	char *line = malloc(big + 1);

	rep = t_exec(cl, "query-status", NULL);
	assert_string_equal(t_err_class(rep), "CommandNotFound");
	json_object_put(rep);
	rep = t_exec(cl, "qmp_capabilities", NULL);
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	memset(line, 'x', big);
	line[0] = '{';
	line[big] = '\n';
	t_send_raw(cl, line, big + 1);
	free(line);
	rep = t_reply(cl);
	assert_string_equal(t_err_class(rep), "GenericError");
	json_object_put(rep);
	rep = t_exec(cl, "query-version", NULL);	/* still in sync, the package's version */
	assert_non_null(t_ret(rep));
	assert_string_equal(json_object_get_string(json_object_object_get(t_ret(rep), "package")),
			    "vgpud " VGPU_VERSION);
	json_object_put(rep);
	/* ids are echoed */
	t_send_raw(cl, "{\"execute\":\"query-version\",\"id\":\"abc\"}\n", 40);
	rep = t_reply(cl);
	assert_true(json_object_object_get_ex(rep, "id", NULL));
	json_object_put(rep);
	t_client_free(cl);
	/* vgpuctl-side validation: usage errors */
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-1G", "--vram", "12X"), 2);
	assert_int_equal(T_CTL(d, "start", "-u", "nope"), 2);
	assert_int_equal(T_CTL(d, "frobnicate"), 2);
	assert_int_equal(T_CTL(d, "set-vfs", "two"), 2);
	assert_int_equal(T_CTL(d, "start", "-u", U3), 3);
	assert_int_equal(T_CTL(d, "types", "-p", "0000:99:00.0"), 3);
}

/* The greeting names control protocol CTLC_PROTOCOL (what ctlclient speaks) and offers no
 * capability; qmp_capabilities refuses to enable one, or an argument it does not take,
 * and leaves the connection unnegotiated; query-version names the same protocol. */
static const struct caps_case {
	const char *args;	/* qmp_capabilities' arguments */
	const char *desc;	/* NULL: negotiated */
} caps_cases[] = {
	{ "{\"enable\":[\"oob\"]}", "capability \"oob\" is not offered (vgpud offers none)" },
	{ "{\"enable\":[]}", NULL },
	{ "{\"enable\":\"oob\"}", "\"enable\" must be an array of capability names, not a string" },
	{ "{\"enable\":[7]}", "\"enable\"[0] must be a capability name, not an integer" },
	{ "{\"oob\":true}", "unknown argument \"oob\" for qmp_capabilities (it takes enable)" },
	{ "{}", NULL },
};

static void test_negotiation(void **state)
{
	struct tdaemon *d = *state;
	json_object *g, *v, *rep, *err, *desc;

	for (size_t i = 0; i < sizeof(caps_cases) / sizeof(caps_cases[0]); i++) {
		const struct caps_case *c = &caps_cases[i];
		struct tclient *cl = calloc(1, sizeof(*cl));

		assert_non_null(cl);
		cl->fd = t_connect(d->sock);
		assert_true(cl->fd >= 0);
		g = t_read_json(cl, -1);
		assert_true(json_object_object_get_ex(g, "VGPUD", &v));
		assert_true(json_object_object_get_ex(v, "capabilities", &err));
		assert_int_equal(json_object_array_length(err), 0);
		assert_true(json_object_object_get_ex(v, "version", &v));
		assert_true(json_object_object_get_ex(v, "protocol", &v));
		assert_true(json_object_is_type(v, json_type_int));
		assert_int_equal(json_object_get_int(v), CTLC_PROTOCOL);
		json_object_put(g);
		rep = t_exec(cl, "qmp_capabilities", json_tokener_parse(c->args));
		if (!c->desc) {
			assert_non_null(t_ret(rep));
		} else {
			assert_string_equal(t_err_class(rep), "InvalidArgument");
			assert_true(json_object_object_get_ex(rep, "error", &err));
			assert_true(json_object_object_get_ex(err, "desc", &desc));
			assert_string_equal(json_object_get_string(desc), c->desc);
		}
		json_object_put(rep);
		/* Refused: not negotiated, so only qmp_capabilities is taken. */
		rep = t_exec(cl, "query-version", NULL);
		if (c->desc) {
			assert_string_equal(t_err_class(rep), "CommandNotFound");
		} else {
			assert_true(json_object_object_get_ex(t_ret(rep), "protocol", &v));
			assert_true(json_object_is_type(v, json_type_int));
			assert_int_equal(json_object_get_int(v), CTLC_PROTOCOL);
		}
		json_object_put(rep);
		t_client_free(cl);
	}
}

/* Events: a second client sees SLICE_STARTED and VF_RESET. */
static void test_events(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *watch = t_client(d, true);
	const char *want[] = { "VFS_CHANGED", "SLICE_DEFINED", "SLICE_STARTED", "VF_RESET",
			       "SLICE_STOPPED" };
	json_object *ev, *name;

	assert_int_equal(T_CTL(d, "set-vfs", "1"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "reset", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	for (unsigned int i = 0; i < 5; i++) {
		ev = t_read_json(watch, -1);
		assert_non_null(ev);
		assert_true(json_object_object_get_ex(ev, "event", &name));
		assert_string_equal(json_object_get_string(name), want[i]);
		assert_true(json_object_object_get_ex(ev, "timestamp", NULL));
		json_object_put(ev);
	}
	t_client_free(watch);
}

static int start_logged_argv(struct tdaemon *d, char *const *extra, char *log, size_t len);

/* A corrupt or foreign state file is reported and refused with exit 3, which the units do
 * not restart; nothing is half-applied. */
static const struct corrupt_case {
	const char *name;
	const char *file;	/* under the state dir */
	const char *text;
	const char *msg;	/* what the refusal says besides the file's name */
} corrupt_cases[] = {
	{ "slice file not JSON", "slices/" U2 ".json", "{\"mdev_type\": \"vgpu-1G\"",
	  "removing it drops the definition of slice " U2 },
	{ "slice file unknown type", "slices/" U2 ".json",
	  "{\"uuid\":\"" U2 "\",\"mdev_type\":\"h100\",\"start\":\"auto\",\"attrs\":[]}",
	  "type \"h100\" is not supported" },
	{ "slice file unknown key", "slices/" U2 ".json",
	  "{\"uuid\":\"" U2 "\",\"mdev_type\":\"vgpu-1G\",\"start\":\"auto\",\"attrs\":[],"
	  "\"numa_node\":0}",
	  "unknown key \"numa_node\"; refusing the state (the file may come from a newer vgpud; "
	  "removing it drops the definition of slice " U2 ")" },
	{ "slice file name mismatch", "slices/" U3 ".json",
	  "{\"uuid\":\"" U2 "\",\"mdev_type\":\"vgpu-1G\",\"start\":\"auto\",\"attrs\":[]}",
	  "does not match the file name" },
	{ "journal not JSON", "journal.json", "\x01\x02garbage", "refusing the state" },
	{ "journal foreign", "journal.json",
	  "{\"kind\":\"vgpud-journal\",\"schema\":1,\"instance\":\"vgpud-0000000000000000\","
	  "\"vram_size\":2147483648,\"spare_vram\":536870912,\"dma_size\":4194304,\"num_vfs\":1,"
	  "\"slices\":[]}", "written by another instance (vgpud-0000000000000000)" },
	{ "journal other kind", "journal.json", "{\"kind\":\"something-else\",\"schema\":1}",
	  "not a vgpud journal (its \"kind\" is \"something-else\", not \"vgpud-journal\")" },
	{ "journal of a newer schema", "journal.json",
	  "{\"kind\":\"vgpud-journal\",\"schema\":2,\"slices\":[]}",
	  "journal schema 2, written by a newer vgpud (this one reads schema 1)" },
	{ "journal of schema 0", "journal.json",
	  "{\"kind\":\"vgpud-journal\",\"schema\":0,\"slices\":[]}",
	  "journal schema 0 is unknown (this vgpud reads schema 1)" },
	{ "journal schema a string", "journal.json",
	  "{\"kind\":\"vgpud-journal\",\"schema\":\"2\",\"slices\":[]}",
	  "journal schema \"2\" is unknown (this vgpud reads schema 1)" },
	{ "journal without a schema", "journal.json", "{\"kind\":\"vgpud-journal\",\"slices\":[]}",
	  "journal schema (none) is unknown (this vgpud reads schema 1)" },
};

static void test_corrupt_state(void **state)
{
	const struct corrupt_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	char path[256], before[4096], after[4096];
	static char log[16384];
	FILE *f;
	int rc;

	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "1"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1, "--auto"), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	snprintf(path, sizeof(path), "%s/%s", d->state, c->file);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(c->text, f);
	fclose(f);
	snprintf(path, sizeof(path), "ls -lR --ignore=vgpud.lock %s | md5sum", d->state);
	f = popen(path, "r");
	assert_non_null(fgets(before, sizeof(before), f));
	pclose(f);
	rc = start_logged_argv(d, (char *const[]){ "--vram", "2G", "--max-vfs", "2", NULL }, log,
			       sizeof(log));
	if (rc != 1000 + 3 || !strstr(log, c->file) || !strstr(log, c->msg) ||
	    !strstr(log, "vgpud: cannot start: the state in ") ||
	    !strstr(log, "is refused (exit 3: a restart refuses it again)"))
		fail_msg("%s: exit %d (want 3), the log does not name %s and say \"%s\":\n%s",
			 c->name, rc - 1000, c->file, c->msg, log);
	f = popen(path, "r");
	assert_non_null(fgets(after, sizeof(after), f));
	pclose(f);
	assert_string_equal(before, after);	/* and touched nothing */
	t_daemon_free(d);
}

/* A hand-edited journal of two running slices (VF 1, VF 2): each wrong field is refused
 * by its key, with the file's name, before anything is applied: no definition file is
 * rewritten and no pending reset scrubs VF 1's VRAM, even when the wrong field is in a
 * later entry. An edit sets entry @entry's @key ("definition/KEY": a key of its
 * definition; entry -1: the journal's own) to the JSON @val. */
struct jedit {
	int entry;
	const char *key, *val;
};

static const struct journal_case {
	const char *name;
	struct jedit edits[5];
	const char *msg;	/* what the refusal says besides the journal's name */
} journal_cases[] = {
	{ "reset_pending a string", { { 0, "resets", "1" }, { 0, "reset_pending", "\"false\"" } },
	  "\"reset_pending\" is not a boolean" },
	{ "vf a string", { { 0, "vf", "\"1\"" } },
	  "\"vf\" is missing or not a non-negative integer" },
	{ "rm_clients a string", { { 1, "rm_clients", "\"5\"" } },
	  "\"rm_clients\" is missing or not a non-negative integer" },
	{ "rm_objects negative", { { 1, "rm_objects", "-1" } },
	  "\"rm_objects\" is missing or not a non-negative integer" },
	{ "transient a number", { { 1, "transient", "0" } }, "\"transient\" is not a boolean" },
	{ "allocations not triples after a pending reset",
	  { { 0, "resets", "1" }, { 0, "reset_pending", "true" },
	    { 0, "definition/start", "\"auto\"" },
	    { 1, "allocations", "[[1,2]]" } },
	  "allocations[0] is not [base, size, state]" },
	{ "allocation outside its partition after a pending reset",
	  { { 0, "resets", "1" }, { 0, "reset_pending", "true" },
	    { 0, "definition/start", "\"auto\"" },
	    { 1, "allocations", "[[0,65536,1]]" } },
	  "allocations[0] holds outside the slice's partition" },
	{ "allocation state a string", { { 1, "allocations", "[[0,65536,\"pinned\"]]" } },
	  "allocations[0] holds not a non-negative integer" },
	{ "an unknown key in the journal", { { -1, "future_key", "5" } },
	  "journal.json: unknown key \"future_key\" (the file may come from a newer vgpud); "
	  "refusing the state" },
	{ "an unknown key in an entry after a pending reset",
	  { { 0, "resets", "1" }, { 0, "reset_pending", "true" }, { 1, "future_key", "5" } },
	  "journal.json: slices[1] (slice " U2 "): unknown key \"future_key\" (the file may come "
	  "from a newer vgpud); refusing the state" },
};

static void journal_edit(struct tdaemon *d, const struct jedit *ed)
{
	char path[256];
	json_object *j, *arr, *o;

	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	j = json_object_from_file(path);
	assert_non_null(j);
	assert_true(json_object_object_get_ex(j, "slices", &arr));
	for (; ed->key; ed++) {
		const char *key = ed->key;

		o = ed->entry < 0 ? j : json_object_array_get_idx(arr, (size_t)ed->entry);
		assert_non_null(o);
		if (!strncmp(key, "definition/", 11)) {
			assert_true(json_object_object_get_ex(o, "definition", &o));
			key += 11;
		}
		json_object_object_add(o, key, json_tokener_parse(ed->val));
	}
	assert_int_equal(json_object_to_file_ext(path, j, JSON_C_TO_STRING_PLAIN), 0);
	json_object_put(j);
}

/* Every file under @d's state dir with its contents' digest, in one line per file. */
static void state_digest(struct tdaemon *d, char *buf, size_t len)
{
	char cmd[256];
	FILE *f;

	/* Not the lock file: each daemon that takes it writes its pid there. */
	snprintf(cmd, sizeof(cmd), "cd %s && find . -type f ! -name vgpud.lock -exec md5sum {} + "
		 "| sort", d->state);
	f = popen(cmd, "r");
	assert_non_null(f);
	t_read_all(fileno(f), buf, len);
	pclose(f);
}

/* Start @d with @extra, its stderr in @log: the exit as t_daemon_start() returns it. */
static int start_logged_argv(struct tdaemon *d, char *const *extra, char *log, size_t len)
{
	char path[] = "/tmp/vgpud-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(2), rc;

	assert_true(fd >= 0 && saved >= 0);
	unlink(path);
	dup2(fd, 2);
	rc = t_daemon_start_argv(d, extra);
	dup2(saved, 2);
	close(saved);
	lseek(fd, 0, SEEK_SET);
	t_read_all(fd, log, len);
	close(fd);
	return rc;
}

static int start_logged(struct tdaemon *d, char *log, size_t len)
{
	return start_logged_argv(d, (char *const[]){ "--vram", "2G", "--max-vfs", "2", NULL },
				 log, len);
}

static void test_journal_refused(void **state)
{
	const struct journal_case *c = *state;
	static char before[8192], after[8192], log[16384];
	struct tdaemon *d = t_daemon_new();
	char mark[16] = "";
	int fd;

	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	t_define_start(d, "vgpu-512M", U1);
	t_define_start(d, "vgpu-512M", U2);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	journal_edit(d, c->edits);
	fd = t_bar_open(d, 1);
	assert_int_equal(pwrite(fd, "MARKER-VF1", 10, 4096), 10);
	state_digest(d, before, sizeof(before));
	assert_int_equal(start_logged(d, log, sizeof(log)), 1000 + 3);
	if (!strstr(log, "journal.json") || !strstr(log, c->msg))
		fail_msg("%s: the log does not name journal.json and say \"%s\":\n%s", c->name,
			 c->msg, log);
	state_digest(d, after, sizeof(after));
	assert_string_equal(before, after);		/* no file rewritten */
	assert_int_equal(pread(fd, mark, 10, 4096), 10);
	assert_string_equal(mark, "MARKER-VF1");	/* no reset scrubbed VF 1 */
	close(fd);
	t_daemon_free(d);
}

/* "migrated_out" is vgpud's own record: modify-slice cannot set it, and the definition
 * file and the slice's state stay as they were. */
static void test_modify_migrated_out(void **state)
{
	struct tdaemon *d = *state;
	static char before[8192], after[8192];
	struct tclient *cl;
	json_object *a, *rep;

	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1), 0);
	state_digest(d, before, sizeof(before));
	cl = t_client(d, true);
	a = t_args("uuid", U1);
	json_object_object_add(a, "start", json_object_new_string("auto"));
	json_object_object_add(a, "migrated_out", json_object_new_string("tcp:evil:1"));
	rep = t_exec(cl, "modify-slice", a);
	assert_string_equal(t_err_class(rep), "InvalidArgument");
	json_object_put(rep);
	t_client_free(cl);
	state_digest(d, after, sizeof(after));
	assert_string_equal(before, after);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	assert_int_equal(t_daemon_start(d, "--vram", "4G", "--max-vfs", "8", "--spare-vram",
					"512M", NULL), 0);
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	assert_null(strstr(t_out.out, "migrated-out"));
}

/* One daemon per directory: a second vgpud on the same state dir, or on another state dir
 * but the same runtime dir, exits 1 naming the directory and the first one's pid, and the
 * first one goes on serving its socket and its slice. */
static const struct second_case {
	const char *name;
	bool same_state;
	const char *dir;	/* the directory the refusal names */
} second_cases[] = {
	{ "same state and runtime dirs", true, "state" },
	{ "same runtime dir only", false, "runtime" },
};

/* Run vgpud on @b's dirs and wait for it to exit (the socket there is another daemon's):
 * its exit status (one that keeps running hangs the case until the suite's timeout, which
 * fails it). Its stderr in @log. */
static int run_until_exit(struct tdaemon *b, char *log, size_t len)
{
	char path[] = "/tmp/vgpud-log-XXXXXX";
	int fd = mkstemp(path), st = 0, rc;
	pid_t pid;

	assert_true(fd >= 0);
	unlink(path);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(fd, 2);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(t_bin("vgpud"), "vgpud", "--runtime-dir", b->run, "--state-dir", b->state,
		      "--vram", "2G", "--max-vfs", "2", (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	lseek(fd, 0, SEEK_SET);
	t_read_all(fd, log, len);
	close(fd);
	return rc;
}

static void test_second_daemon(void **state)
{
	const struct second_case *c = *state;
	struct tdaemon *a = t_daemon_new(), b;
	static char log[16384];
	char want[256];

	assert_int_equal(t_daemon_start(a, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	assert_int_equal(T_CTL(a, "set-vfs", "1"), 0);
	t_define_start(a, "vgpu-512M", U1);
	b = *a;
	if (!c->same_state)
		snprintf(b.state, sizeof(b.state), "%.64s/state2", a->root);
	assert_int_equal(run_until_exit(&b, log, sizeof(log)), 1);
	snprintf(want, sizeof(want), "another vgpud (pid %d) serves the %s directory %s",
		 (int)a->pid, c->dir, c->same_state ? a->state : a->run);
	if (!strstr(log, want))
		fail_msg("%s: the log does not say \"%s\":\n%s", c->name, want, log);
	assert_int_equal(access(a->sock, F_OK), 0);	/* not unlinked */
	assert_int_equal(T_CTL(a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
	/* The lock goes with the daemon: a restart takes it again. */
	assert_int_equal(t_daemon_stop(a, SIGTERM), 0);
	assert_int_equal(t_daemon_start(a, "--vram", "2G", "--max-vfs", "2", NULL), 0);
	t_daemon_free(a);
}

/* --socket-mode is octal, as chmod(1) takes it, with or without the leading 0. */
static const struct mode_case {
	const char *name, *arg;
	int rc;			/* t_daemon_start()'s result */
	unsigned int mode;	/* the socket's mode when it started */
} mode_cases[] = {
	{ "mode 0660", "0660", 0, 0660 },
	{ "mode 660 is octal", "660", 0, 0660 },
	{ "mode 220 is octal", "220", 0, 0220 },
	{ "mode with a 9", "0690", 1000 + 2, 0 },
	{ "mode above 0777", "1000", 1000 + 2, 0 },
};

static void test_socket_mode(void **state)
{
	const struct mode_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	static char log[16384];
	char *const args[] = { "--vram", "2G", "--max-vfs", "2", "--socket-mode", (char *)c->arg,
			       NULL };
	char want[128];
	struct stat sb;

	assert_int_equal(start_logged_argv(d, args, log, sizeof(log)), c->rc);
	if (c->rc) {
		snprintf(want, sizeof(want), "bad value \"%s\" for --socket-mode (an octal mode, 0 "
			 "to 0777)", c->arg);
		if (!strstr(log, want))
			fail_msg("%s: vgpud did not say \"%s\":\n%s", c->name, want, log);
	} else {
		assert_int_equal(stat(d->sock, &sb), 0);
		assert_int_equal(sb.st_mode & 0777, c->mode);
	}
	t_daemon_free(d);
}

/* The device-wide doorbell budget holds for a modify of a running slice: 1000 doorbells,
 * 64 kept for the PF, three slices of 300 running. A slice's own 300 come back to it, so it
 * may grow to 336 but not to 900, and a refused modify changes nothing. */
static const struct budget_case {
	const char *name, *doorbells;
	int rc;			/* vgpuctl's exit */
	unsigned int used;	/* doorbells_used after it */
} budget_cases[] = {
	{ "modify above the budget", "900", 5, 900 },
	{ "modify up to the budget", "336", 0, 936 },
	{ "modify down", "100", 0, 700 },
};

static void test_modify_budget(void **state)
{
	const struct budget_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	static const char *const u[] = { U1, U2, U3 };
	char conf[200];
	struct tclient *cl;
	FILE *f;

	snprintf(conf, sizeof(conf), "%s/c.ini", d->root);
	f = fopen(conf, "w");
	assert_non_null(f);
	fputs("[gpu]\ndoorbells = 1000\n", f);
	fclose(f);
	assert_int_equal(t_daemon_start(d, "-c", conf, "--vram", "4G", "--max-vfs", "4", NULL), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "4"), 0);
	for (unsigned int i = 0; i < 3; i++) {
		assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", (char *)u[i],
				       "--doorbells", "300"), 0);
		assert_int_equal(T_CTL(d, "start", "-u", (char *)u[i]), 0);
	}
	assert_int_equal(T_CTL(d, "modify", "-u", U2, "--doorbells", (char *)c->doorbells), c->rc);
	if (c->rc)
		assert_non_null(strstr(t_out.err, "needs 900 doorbells; 336 free"));
	cl = t_client(d, true);
	assert_int_equal(t_status_u64(cl, "doorbells_used"), c->used);
	t_client_free(cl);
	t_daemon_free(d);
}

/* vgpuctl takes every switchover vgpud does, "vmm" too (a VMM copies the VRAM): the
 * request reaches the daemon, which answers for the unknown slice. */
static void test_switchover_vmm(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(T_CTL(d, "migrate", "-u", U3, "--to", "/tmp/nowhere.sock", "--switchover",
			       "vmm"), 3);
	assert_null(strstr(t_out.err, "--switchover"));
	assert_int_equal(T_CTL(d, "migrate", "-u", U3, "--to", "/tmp/nowhere.sock", "--switchover",
			       "later"), 2);
	assert_non_null(strstr(t_out.err, "bad --switchover \"later\" (auto, manual, vmm)"));
}

/* Auto slices start when VFs are enabled; the owner token guards stop and undefine. */
static void test_autostart_owner(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1, "--auto", "--owner",
			       "c2177883-f1bb-47f0-914d-32a22e3a8804:3"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U2, "--manual"), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "auto running vf1"));
	assert_int_equal(T_CTL(d, "list", "-u", U2), 0);
	assert_non_null(strstr(t_out.out, "manual defined"));
	/* a stale generation must not release the next owner's slice */
	assert_int_equal(T_CTL(d, "stop", "-u", U1, "--owner",
			       "c2177883-f1bb-47f0-914d-32a22e3a8804:2"), 4);
	assert_non_null(strstr(t_out.err, "owner token does not match"));
	assert_int_equal(T_CTL(d, "stop", "-u", U1, "--owner",
			       "c2177883-f1bb-47f0-914d-32a22e3a8804:3"), 0);
	assert_int_equal(T_CTL(d, "undefine", "-u", U1, "--owner",
			       "00000000-f1bb-47f0-914d-32a22e3a8804:3"), 4);
	assert_int_equal(T_CTL(d, "undefine", "-u", U1), 0);	/* root without a token */
}

/* The journal's native protocol: field @key of datagram @buf (@len bytes), in either form
 * ("KEY=value\n", or "KEY\n" + 64-bit little-endian length + value + "\n" for values
 * with newlines), into @out. */
static bool journal_field(const char *buf, size_t len, const char *key, char *out, size_t max)
{
	size_t k = strlen(key);

	for (size_t i = 0; i < len;) {
		const char *line = buf + i, *nl = memchr(line, '\n', len - i);
		size_t end = nl ? (size_t)(nl - buf) : len;

		if (end - i == k && !memcmp(line, key, k) && end + 9 <= len) {	/* binary form */
			uint64_t n = 0;

			for (int b = 0; b < 8; b++)
				n |= (uint64_t)(unsigned char)buf[end + 1 + b] << (8 * b);
			if (end + 9 + n > len)
				return false;
			snprintf(out, max, "%.*s", (int)n, buf + end + 9);
			return true;
		}
		if (end - i > k && !memcmp(line, key, k) && line[k] == '=') {
			snprintf(out, max, "%.*s", (int)(end - i - k - 1), line + k + 1);
			return true;
		}
		if (end - i == k && !memcmp(line, key, k))
			return false;
		i = end + 1;
	}
	return false;
}

/* Under systemd: READY=1 on $NOTIFY_SOCKET once listening, journal entries (sent by
 * libsystemd to /run/systemd/journal/socket, here a socket of the test's bound there in
 * vgpud's own mount namespace) with the VF and slice as fields, a message with a newline
 * whole in one entry. */
static void test_systemd(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct sockaddr_un n = { .sun_family = AF_UNIX }, j = { .sun_family = AF_UNIX };
	int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int jfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	char buf[4096], jdir[80], val[512];
	char *const wrap[] = { "unshare", "-m", "--propagation", "private", "sh", "-c",
			       "mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/journal && "
			       "mount --bind \"$0\" /run/systemd/journal && exec \"$@\"", jdir, NULL };
	bool ready = false, vf_field = false, whole = false;
	ssize_t len;

	(void)state;
	snprintf(n.sun_path, sizeof(n.sun_path), "%s/notify", d->root);
	snprintf(jdir, sizeof(jdir), "%.64s/journal", d->root);
	assert_int_equal(mkdir(jdir, 0755), 0);
	snprintf(j.sun_path, sizeof(j.sun_path), "%s/socket", jdir);
	assert_int_equal(bind(nfd, (struct sockaddr *)&n, sizeof(n)), 0);
	assert_int_equal(bind(jfd, (struct sockaddr *)&j, sizeof(j)), 0);
	setenv("NOTIFY_SOCKET", n.sun_path, 1);
	setenv("JOURNAL_STREAM", "8:1234", 1);
	d->wrap = wrap;
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--log-level", "info",
					NULL), 0);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("JOURNAL_STREAM");
	/* Each datagram waited for as long as it takes: one that never comes hangs the test
	 * until the suite's timeout, which fails it. */
	while (!ready) {
		len = recv(nfd, buf, sizeof(buf) - 1, 0);
		assert_true(len > 0);
		buf[len] = 0;
		ready = strstr(buf, "READY=1") != NULL;
	}
	assert_int_equal(T_CTL(d, "set-vfs", "1"), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	while (!vf_field) {
		len = recv(jfd, buf, sizeof(buf) - 1, 0);
		assert_true(len > 0);
		buf[len] = 0;
		vf_field = strstr(buf, "VGPU_VF=1\n") && strstr(buf, "VGPU_UUID=" U1) &&
			   strstr(buf, "SYSLOG_IDENTIFIER=vgpud\n");
	}
	/* A refused define logs the request's type, newline and all: one entry, whole. */
	assert_int_equal(T_CTL(d, "define", "-t", "no\ntype", "-u", U2), 2);
	while (!whole) {
		len = recv(jfd, buf, sizeof(buf) - 1, 0);
		assert_true(len > 0);
		whole = journal_field(buf, (size_t)len, "MESSAGE", val, sizeof(val)) &&
			strstr(val, "no\ntype") && strstr(val, "refused");
	}
	close(nfd);
	close(jfd);
	t_daemon_free(d);
}

/* SIGTERM: exit 0; the control socket is removed. */
static void test_sigterm(void **state)
{
	struct tdaemon *d = *state;

	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	assert_int_equal(access(d->sock, F_OK), -1);
}

#define FIX(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
#define ROW(fn, arr, i) { arr[i].name, fn, NULL, t_teardown, (void *)&arr[i] }

int main(void)
{
	struct CMUnitTest t[112] = {
		FIX(test_every_verb), FIX(test_json_and_alignment), FIX(test_idempotence),
		FIX(test_insufficient), cmocka_unit_test_teardown(test_permissions, t_teardown), FIX(test_protocol_edges),
		FIX(test_events), FIX(test_sigterm), FIX(test_autostart_owner), FIX(test_fuzz_control),
		cmocka_unit_test_teardown(test_systemd, t_teardown),
		cmocka_unit_test_teardown(test_admin_group, t_teardown),
		FIX(test_modify_migrated_out), FIX(test_switchover_vmm), FIX(test_negotiation),
	};
	size_t n = 15;

	for (size_t i = 0; i < sizeof(dry_cases) / sizeof(dry_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_dry_run, dry_cases, i);
	for (size_t i = 0; i < sizeof(raw_cases) / sizeof(raw_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_bad_input, raw_cases, i);
	for (size_t i = 0; i < sizeof(corrupt_cases) / sizeof(corrupt_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_corrupt_state, corrupt_cases, i);
	for (size_t i = 0; i < sizeof(nargs_cases) / sizeof(nargs_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_nargs, nargs_cases, i);
	for (size_t i = 0; i < sizeof(mode_cases) / sizeof(mode_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_socket_mode, mode_cases, i);
	for (size_t i = 0; i < sizeof(budget_cases) / sizeof(budget_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_modify_budget, budget_cases, i);
	for (size_t i = 0; i < sizeof(second_cases) / sizeof(second_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_second_daemon, second_cases, i);
	for (size_t i = 0; i < sizeof(journal_cases) / sizeof(journal_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_journal_refused, journal_cases, i);
	for (size_t i = 0; i < sizeof(peer_groups_cases) / sizeof(peer_groups_cases[0]); i++)
		t[n++] = (struct CMUnitTest)ROW(test_peer_groups, peer_groups_cases, i);
	return _cmocka_run_group_tests("vgpud_cli", t, n, NULL, NULL);
}
