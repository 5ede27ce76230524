// SPDX-License-Identifier: MIT
/* Crash consistency of vgpud's state directory: every verb is killed at each of its
 * durability points in turn (VGPU_CRASH_AT=N), the daemon restarted, and the state checked:
 * what was acknowledged is there, nothing is half applied (no definition file a verb did
 * not mean to leave, a transient slice still transient), a running slice's VRAM is
 * intact. A second pass runs under the lost-writes shim (libvgpu-lostwrites.so), which
 * also drops what was not fsynced. Then the state loader's checks of damaged files. */
#include <dirent.h>

#include "pf_test.h"

#define U1	"11111111-1111-4111-8111-111111111111"
#define U2	"22222222-2222-4222-8222-222222222222"
#define U3	"33333333-3333-4333-8333-333333333333"
#define CRASH_EXIT	86
#define CRASH_PROG	"vgpud-test"	/* the crash-point switch is in test builds only */
#define MARK		"durability-marker"
#define PARENT		"0000:00:00.0"	/* vgpud's default parent */

/* V_TSTART and V_TSTOP: the transient form, start -p PARENT -t TYPE and its stop. */
enum verb { V_DEFINE, V_START, V_MODIFY, V_STOP, V_UNDEFINE, V_SET_VFS, V_RESET, V_TSTART,
	    V_TSTOP, V_NR };
static const char *const verb_names[V_NR] = {
	"define", "start", "modify", "stop", "undefine", "set-vfs", "reset", "transient start",
	"transient stop",
};

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };

static json_object *ok(json_object *rep)
{
	if (!t_ret(rep))
		fail_msg("request refused: %s", json_object_to_json_string(rep));
	return rep;
}

/* The VRAM part of VF @vf's BAR object, mapped (first page). */
static char *vram_map(struct tdaemon *d, unsigned int vf)
{
	char prefix[64], path[128];
	void *p;
	int fd;

	t_shm_prefix(d, prefix, sizeof(prefix));
	snprintf(path, sizeof(path), "/dev/shm/%s%u", prefix, vf);
	fd = open(path, O_RDWR);
	if (fd < 0)
		return NULL;
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* start-slice's transient form for U3. */
static json_object *transient_request(void)
{
	json_object *a = t_args("uuid", U3);

	json_object_object_add(a, "parent", json_object_new_string(PARENT));
	json_object_object_add(a, "type", json_object_new_string("vgpu-512M"));
	return a;
}

/* The state before the verb: 2 VFs, U1 running on VF 1 with a marker in its VRAM, U2
 * defined (set-vfs starts from no VFs and U1, U2 defined; a transient stop has U3 running
 * transient on VF 2). Left with the daemon killed. */
static void setup(struct tdaemon *d, enum verb v)
{
	struct tclient *c;
	json_object *a;
	char *vram;

	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	c = t_client(d, true);
	if (v != V_SET_VFS) {
		a = json_object_new_object();
		json_object_object_add(a, "num_vfs", json_object_new_int(2));
		json_object_put(ok(t_exec(c, "set-vfs", a)));
	}
	for (int i = 0; i < 2; i++) {
		a = t_args("uuid", i ? U2 : U1);
		json_object_object_add(a, "type", json_object_new_string("vgpu-512M"));
		json_object_put(ok(t_exec(c, "define-slice", a)));
	}
	if (v != V_SET_VFS) {
		json_object_put(ok(t_exec(c, "start-slice", t_args("uuid", U1))));
		vram = vram_map(d, 1);
		assert_non_null(vram);
		memcpy(vram, MARK, sizeof(MARK));
		munmap(vram, 4096);
	}
	if (v == V_TSTOP)
		json_object_put(ok(t_exec(c, "start-slice", transient_request())));
	t_client_free(c);
	t_daemon_stop(d, SIGKILL);
}

static json_object *verb_request(enum verb v, const char **cmd)
{
	json_object *a = NULL, *attrs, *at;

	switch (v) {
	case V_DEFINE:
		*cmd = "define-slice";
		a = t_args("uuid", U3);
		json_object_object_add(a, "type", json_object_new_string("vgpu-512M"));
		break;
	case V_START:
		*cmd = "start-slice";
		a = t_args("uuid", U2);
		break;
	case V_MODIFY:
		*cmd = "modify-slice";
		a = t_args("uuid", U1);
		attrs = json_object_new_array();
		at = json_object_new_object();
		json_object_object_add(at, "channels", json_object_new_int(3));
		json_object_array_add(attrs, at);
		json_object_object_add(a, "attrs", attrs);
		break;
	case V_STOP:
		*cmd = "stop-slice";
		a = t_args("uuid", U1);
		break;
	case V_UNDEFINE:
		*cmd = "undefine-slice";
		a = t_args("uuid", U2);
		break;
	case V_TSTART:
		*cmd = "start-slice";
		a = transient_request();
		break;
	case V_TSTOP:
		*cmd = "stop-slice";
		a = t_args("uuid", U3);
		break;
	case V_SET_VFS:
		*cmd = "set-vfs";
		a = json_object_new_object();
		json_object_object_add(a, "num_vfs", json_object_new_int(2));
		break;
	default:
		*cmd = "reset-vf";
		a = t_args("uuid", U1);
		break;
	}
	return a;
}

/* A slice as "absent", "defined" or "running/<vf>/<resets>/<channels-in-attrs+prov>", the
 * running state prefixed "transient:" for a transient slice. */
static void slice_state(json_object *slices, const char *uuid, char *buf, size_t len)
{
	snprintf(buf, len, "absent");
	for (size_t i = 0; i < json_object_array_length(slices); i++) {
		json_object *s = json_object_array_get_idx(slices, i), *st, *vf, *rc;
		const char *txt = json_object_to_json_string_ext(s, JSON_C_TO_STRING_PLAIN);
		int threes = 0;

		if (strcmp(json_object_get_string(json_object_object_get(s, "uuid")), uuid))
			continue;
		for (const char *p = txt; (p = strstr(p, "\"channels\":3")); p++)
			threes++;
		st = json_object_object_get(s, "state");
		if (strcmp(json_object_get_string(st), "running")) {
			snprintf(buf, len, "defined/%d", threes);
			return;
		}
		vf = json_object_object_get(s, "vf");
		rc = json_object_object_get(s, "reset_count");
		snprintf(buf, len, "%srunning/%d/%d/%d",
			 json_object_get_boolean(json_object_object_get(s, "transient")) ?
			 "transient:" : "", json_object_get_int(vf), json_object_get_int(rc), threes);
	}
}

/* The definition files in <state>/slices: a transient verb must never leave one. */
static int def_files(struct tdaemon *d)
{
	char dir[200];
	struct dirent *de;
	DIR *dp;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/slices", d->state);
	dp = opendir(dir);
	assert_non_null(dp);
	while ((de = readdir(dp))) {
		size_t l = strlen(de->d_name);

		n += l > 5 && !strcmp(de->d_name + l - 5, ".json");
	}
	closedir(dp);
	return n;
}

/* The whole observable state: each slice, the number of VFs and of definition files. */
static void snapshot(struct tdaemon *d, char *buf, size_t len)
{
	struct tclient *c = t_client(d, true);
	json_object *sl = t_exec(c, "query-slices", NULL), *st = t_exec(c, "query-status", NULL);
	json_object *arr = json_object_object_get(t_ret(sl), "slices");
	char a[64], b[64], e[64];

	assert_non_null(arr);
	slice_state(arr, U1, a, sizeof(a));
	slice_state(arr, U2, b, sizeof(b));
	slice_state(arr, U3, e, sizeof(e));
	snprintf(buf, len, "U1=%s U2=%s U3=%s vfs=%d files=%d", a, b, e,
		 json_object_get_int(json_object_object_get(t_ret(st), "num_vfs")), def_files(d));
	json_object_put(sl);
	json_object_put(st);
	t_client_free(c);
}

/* After the restart: the state is the one before or the one after (after if acknowledged),
 * and a slice still running on VF 1 with no reset has its marker. */
static void check(struct tdaemon *d, const char *before, const char *after, bool acked,
		  enum verb v, unsigned int n)
{
	char now[256], *vram;

	snapshot(d, now, sizeof(now));
	if (strcmp(now, after) && (acked || strcmp(now, before)))
		fail_msg("%s, crash point %u: state \"%s\" is neither \"%s\" nor%s \"%s\"",
			 verb_names[v], n, now, before, acked ? " (acknowledged)" : "", after);
	if (strstr(now, "U1=running/1/0/")) {
		vram = vram_map(d, 1);
		assert_non_null(vram);
		if (memcmp(vram, MARK, sizeof(MARK)))
			fail_msg("%s, crash point %u: the VRAM of the running slice lost its marker",
				 verb_names[v], n);
		munmap(vram, 4096);
	}
}

static void run_verb(struct tdaemon *d, enum verb v, char *after, size_t len)
{
	struct tclient *c = t_client(d, true);
	const char *cmd;
	json_object *a = verb_request(v, &cmd);

	json_object_put(ok(t_exec(c, cmd, a)));
	t_client_free(c);
	snapshot(d, after, len);
}

/* A negotiated client, or NULL when the daemon is gone (it may crash just after it
 * listens: its startup rewrites the journal). */
static struct tclient *try_client(struct tdaemon *d)
{
	struct tclient *c = calloc(1, sizeof(*c));
	json_object *g, *r = NULL;

	assert_non_null(c);
	c->fd = t_connect(d->sock);
	g = c->fd >= 0 ? t_read_json(c, 20000) : NULL;
	if (g)
		r = t_exec(c, "qmp_capabilities", NULL);
	json_object_put(g);
	if (!t_ret(r)) {
		json_object_put(r);
		t_client_free(c);
		return NULL;
	}
	json_object_put(r);
	return c;
}

/* Walk the crash points of @v: N = 1, 2, ... until the verb completes before point N. */
static void crash_walk(enum verb v, const char *shim)
{
	char before[256], after[256], n_env[32], lw_env[200], *wrap[8];
	unsigned int n;
	bool done = false;

	/* The state after the verb, from a run with no crash. */
	{
		struct tdaemon *d = t_daemon_new();

		d->prog = CRASH_PROG;
		setup(d, v);
		assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
		snapshot(d, before, sizeof(before));
		run_verb(d, v, after, sizeof(after));
		t_daemon_free(d);
	}
	for (n = 1; !done && n < 200; n++) {
		struct tdaemon *d = t_daemon_new();
		struct tclient *c;
		json_object *rep;
		const char *cmd;
		bool acked = false;
		int rc, st, k = 0;

		d->prog = CRASH_PROG;
		setup(d, v);
		snprintf(n_env, sizeof(n_env), "VGPU_CRASH_AT=%u", n);
		snprintf(lw_env, sizeof(lw_env), "VGPU_LOSTWRITES_DIR=%s", d->state);
		wrap[k++] = "env";
		wrap[k++] = n_env;
		if (shim) {
			wrap[k++] = (char *)shim;
			wrap[k++] = lw_env;
			wrap[k++] = "ASAN_OPTIONS=verify_asan_link_order=0";
		}
		wrap[k] = NULL;
		d->wrap = wrap;
		rc = t_daemon_start_argv(d, daemon_args);
		c = rc == 0 ? try_client(d) : NULL;
		if (c) {
			json_object *a = verb_request(v, &cmd);

			rep = t_exec(c, cmd, a);
			acked = t_ret(rep) != NULL;
			json_object_put(rep);
			t_client_free(c);
		}
		if (rc == 0) {
			if (acked) {
				done = true;	/* the verb ran out of points before N */
				t_daemon_stop(d, SIGKILL);
			} else {
				assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
				d->pid = 0;
				assert_true(WIFEXITED(st) && WEXITSTATUS(st) == CRASH_EXIT);
			}
		} else {
			assert_int_equal(rc, 1000 + CRASH_EXIT);	/* crashed while starting */
		}
		d->wrap = NULL;
		rc = t_daemon_start_argv(d, daemon_args);
		if (rc)
			fail_msg("%s, crash point %u: vgpud refused the state after the crash (%d)",
				 verb_names[v], n, rc);
		check(d, before, after, acked, v, n);
		t_daemon_free(d);
	}
	assert_true(done);
}

static const char *shim_path(void)
{
	static char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "LD_PRELOAD=%s/../lib/libvgpu-lostwrites.so", t_bin(""));
	return path;
}

static void test_crash_points(void **state)
{
	(void)state;
	for (enum verb v = 0; v < V_NR; v++)
		crash_walk(v, NULL);
}

/* Under the shim what was not fsynced is lost at the crash: an fsync missing before a
 * rename shows up as an acknowledged start or modify that comes back gone. */
static void test_lost_writes(void **state)
{
	(void)state;
	crash_walk(V_START, shim_path());
	crash_walk(V_MODIFY, shim_path());
	crash_walk(V_STOP, shim_path());
	crash_walk(V_TSTART, shim_path());
	crash_walk(V_TSTOP, shim_path());
}

/* Start @prog with VGPU_CRASH_AT=1 and send one mutating request: the exit status if it
 * exited before or while serving it, -1 if it acknowledged and is still running. */
static int crash_at_1(const char *prog)
{
	struct tdaemon *d = t_daemon_new();
	char *wrap[] = { "env", "VGPU_CRASH_AT=1", NULL };
	struct tclient *c;
	json_object *a, *rep;
	bool acked = false;
	int rc, st;

	d->prog = prog;
	d->wrap = wrap;
	rc = t_daemon_start_argv(d, daemon_args);
	d->wrap = NULL;
	if (rc) {
		t_daemon_free(d);
		return rc - 1000;	/* exited while starting */
	}
	c = try_client(d);
	if (c) {
		a = json_object_new_object();
		json_object_object_add(a, "num_vfs", json_object_new_int(2));
		rep = t_exec(c, "set-vfs", a);
		acked = t_ret(rep) != NULL;
		json_object_put(rep);
		t_client_free(c);
	}
	/* Acknowledged and still there, or gone: then it has exited (or is exiting). */
	rc = waitpid(d->pid, &st, acked ? WNOHANG : 0);
	assert_true(rc == 0 || rc == d->pid);
	if (rc == d->pid)
		d->pid = 0;
	t_daemon_free(d);
	if (!rc)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The switch is test scaffolding: vgpud-test stops at point 1, the product vgpud runs on
 * through the same points. */
static void test_release_ignores_crash_at(void **state)
{
	(void)state;
	assert_int_equal(crash_at_1(CRASH_PROG), CRASH_EXIT);
	assert_int_equal(crash_at_1("vgpud"), -1);
}

/* ---- the loader's checks ------------------------------------------------------------------- */

static void file_put(struct tdaemon *d, const char *rel, const char *txt)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", d->state, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(txt, f);
	fclose(f);
}

static char *file_get(struct tdaemon *d, const char *rel)
{
	char path[256], *buf = calloc(1, 1 << 16);
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", d->state, rel);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_true(fread(buf, 1, (1 << 16) - 1, f) > 0);
	fclose(f);
	return buf;
}

/* @rel's contents, empty or not. */
static char *file_get_raw(struct tdaemon *d, const char *rel)
{
	char path[256], *buf = calloc(1, 1 << 16);
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", d->state, rel);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(buf);
	if (fread(buf, 1, (1 << 16) - 1, f) == 0)
		buf[0] = 0;
	fclose(f);
	return buf;
}

/* Start vgpud with its stderr in <root>/log; returns t_daemon_start's result. */
static int start_logged(struct tdaemon *d, char *log, size_t len)
{
	return t_daemon_start_logged(d, daemon_args, log, len);
}

/* A journal entry's field replaced by @val: the loader refuses it and changes nothing. */
static void journal_bad(struct tdaemon *d, const char *orig, const char *field, const char *val)
{
	char key[64], *j = strdup(orig), *p, *end, *txt, log[200];

	snprintf(key, sizeof(key), "\"%s\":", field);
	p = strstr(strstr(j, "\"slices\""), key);
	assert_non_null(p);
	p += strlen(key);
	end = p + strcspn(p, ",\n");
	assert_true(asprintf(&txt, "%.*s%s%s", (int)(p - j), j, val, end) > 0);
	file_put(d, "journal.json", txt);
	assert_true(start_logged(d, log, sizeof(log)) >= 1000);
	assert_true(t_log_has(log, field) || t_log_has(log, "journal.json"));
	free(txt);
	free(j);
}

static void test_loader(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char *orig, *txt, *vram, log[200], prefix[64], path[200], now[256];

	(void)state;
	setup(d, V_START);
	orig = file_get(d, "journal.json");
	journal_bad(d, orig, "channels", "100000");
	journal_bad(d, orig, "channels", "0");
	journal_bad(d, orig, "priority", "2");
	journal_bad(d, orig, "doorbells", "4294967297");
	/* Trailing data after the JSON value. */
	assert_true(asprintf(&txt, "%s{}", orig) > 0);
	file_put(d, "journal.json", txt);
	free(txt);
	assert_true(start_logged(d, log, sizeof(log)) >= 1000);
	assert_true(t_log_has(log, "journal.json: not one valid JSON value"));
	/* The original is fine. */
	file_put(d, "journal.json", orig);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	snapshot(d, now, sizeof(now));
	assert_non_null(strstr(now, "U1=running/1/0/0"));
	t_daemon_stop(d, SIGKILL);
	/* An emptied journal (vgpud never writes one), VRAM object present: refused (exit 3)
	 * naming the object and the way out; the file and the object as they were. */
	file_put(d, "journal.json", "");
	assert_true(truncate(log, 0) == 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 1000 + 3);
	t_shm_prefix(d, prefix, sizeof(prefix));
	assert_true(t_log_has(log, "journal.json is empty, but 1 VRAM objects of this instance "
			      "exist ("));
	assert_true(t_log_has(log, prefix));
	assert_true(t_log_has(log, "refusing the state (restore the journal, or remove "));
	txt = file_get_raw(d, "journal.json");
	assert_string_equal(txt, "");
	free(txt);
	vram = vram_map(d, 1);
	assert_non_null(vram);
	assert_memory_equal(vram, MARK, sizeof(MARK));
	munmap(vram, 4096);
	/* Removed: started without it, the object named (a later start replaces it). */
	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "journal.json is missing but 1 VRAM objects"));
	snapshot(d, now, sizeof(now));
	assert_non_null(strstr(now, "U1=defined"));
	t_daemon_stop(d, SIGKILL);
	/* A journal naming a missing object: that slice comes back stopped, not a refusal. */
	file_put(d, "journal.json", orig);
	snprintf(path, sizeof(path), "/dev/shm/%s1", prefix);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(start_logged(d, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "is missing; the slice comes back stopped"));
	snapshot(d, now, sizeof(now));
	assert_non_null(strstr(now, "U1=defined"));
	free(orig);
	t_daemon_free(d);
}

/* A transient entry: a "transient" that is not a boolean, or a transient slice that also
 * has a definition file, is refused with nothing applied; the original loads with U3
 * running and still transient. */
static void test_loader_transient(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char *orig, *def, *txt, *p, log[200], now[256];

	(void)state;
	setup(d, V_TSTOP);
	orig = file_get(d, "journal.json");
	journal_bad(d, orig, "transient", "1");
	def = file_get(d, "slices/" U2 ".json");
	p = strstr(def, U2);
	assert_non_null(p);
	memcpy(p, U3, strlen(U3));
	file_put(d, "slices/" U3 ".json", def);
	file_put(d, "journal.json", orig);
	assert_true(start_logged(d, log, sizeof(log)) >= 1000);
	assert_true(t_log_has(log, "slice " U3 ": transient, but a definition file"));
	assert_true(asprintf(&txt, "%s/slices/" U3 ".json", d->state) > 0);
	assert_int_equal(unlink(txt), 0);
	free(txt);
	file_put(d, "journal.json", orig);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	snapshot(d, now, sizeof(now));
	assert_string_equal(now, "U1=running/1/0/0 U2=defined/0 U3=transient:running/2/0/0 vfs=2 "
			    "files=2");
	free(def);
	free(orig);
	t_daemon_free(d);
}

/* Requests: a VRAM size near 2^64, a verb with a NUL inside, bytes that are not UTF-8. */
static void test_requests(void **state)
{
	struct tdaemon *d = t_daemon_new();
	static const char nul[] = "{\"execute\":\"query-status\\u0000x\"}\n";
	static const char bad[] = "{\"execute\":\"query-status\",\"\xff\xfe\":1}\n";
	struct tclient *c;
	json_object *a, *attrs, *at, *rep, *e;
	char *before, *after;
	const char *desc;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	c = t_client(d, true);
	before = t_snapshot(c);
	a = t_args("type", "vgpu-auto");
	attrs = json_object_new_array();
	at = json_object_new_object();
	json_object_object_add(at, "vram_bytes", json_object_new_string("18446744073709551615"));
	json_object_array_add(attrs, at);
	json_object_object_add(a, "attrs", attrs);
	rep = t_exec(c, "define-slice", a);
	assert_string_equal(t_err_class(rep), "InvalidArgument");
	json_object_put(rep);
	after = t_snapshot(c);
	assert_string_equal(before, after);
	free(after);
	t_send_raw(c, nul, sizeof(nul) - 1);
	rep = t_reply(c);
	assert_string_equal(t_err_class(rep), "GenericError");
	json_object_put(rep);
	t_send_raw(c, bad, sizeof(bad) - 1);
	rep = t_reply(c);
	assert_non_null(rep);
	assert_true(json_object_object_get_ex(rep, "error", &e));
	desc = json_object_get_string(json_object_object_get(e, "desc"));
	assert_non_null(desc);
	assert_null(strchr(desc, '\xff'));
	assert_null(strchr(desc, '\xfe'));
	json_object_put(rep);
	a = t_args("uuid", U1);
	json_object_object_add(a, "type", json_object_new_string("vgpu-512M\xff"));
	rep = t_exec(c, "define-slice", a);
	assert_string_equal(t_err_class(rep), "InvalidArgument");
	json_object_put(rep);
	after = t_snapshot(c);
	assert_string_equal(before, after);
	free(after);
	free(before);
	t_client_free(c);
	t_daemon_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_requests, t_teardown),
		cmocka_unit_test_teardown(test_loader, t_teardown),
		cmocka_unit_test_teardown(test_loader_transient, t_teardown),
		cmocka_unit_test_teardown(test_release_ignores_crash_at, t_teardown),
		cmocka_unit_test_teardown(test_crash_points, t_teardown),
		cmocka_unit_test_teardown(test_lost_writes, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
