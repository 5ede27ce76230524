// SPDX-License-Identifier: MIT
/* Transient slices (mdevctl's transient devices) against a real vgpud: `vgpuctl start -p
 * PARENT -t TYPE [-u UUID]` creates and starts a slice that has no definition file; it runs
 * and lists like any slice with a "transient" marker, comes back running and still
 * transient after a restart of vgpud (the journal is its record), and is gone, with no file
 * left behind, once stopped. Bad requests name what is wrong and change nothing. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"
#include "ctlclient/ctlclient.h"

#define U1	"11111111-1111-4111-8111-111111111111"
#define U2	"22222222-2222-4222-8222-222222222222"
#define PARENT	"0000:00:00.0"		/* vgpud's default parent */

#define EXIT_USAGE	2
#define EXIT_NOTFOUND	3
#define EXIT_CONFLICT	4

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };

static int setup(void **state)
{
	struct tdaemon *d = t_daemon_new();

	*state = d;
	if (t_daemon_start_argv(d, daemon_args))
		return -1;
	return T_CTL(d, "set-vfs", "2") ? -1 : 0;
}

static int teardown(void **state)
{
	return t_teardown(state);
}

/* The slice @uuid from "list --json -u", or NULL when it does not exist (caller puts). */
static json_object *slice_get(struct tdaemon *d, const char *uuid)
{
	json_object *o, *arr, *s;

	if (T_CTL(d, "--json", "list", "-u", (char *)uuid))
		return NULL;
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &arr));
	assert_int_equal(json_object_array_length(arr), 1);
	s = json_object_get(json_object_array_get_idx(arr, 0));
	json_object_put(o);
	return s;
}

static bool jbool(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

static const char *jstring(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* Whether <state>/slices/<uuid>.json exists. */
static bool def_file(struct tdaemon *d, const char *uuid)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/slices/%s.json", d->state, uuid);
	return access(path, F_OK) == 0;
}

/* The daemon's state, as vgpuctl's client sees it, for "changed nothing". */
static char *snap(struct tdaemon *d)
{
	struct tclient *c = t_client(d, true);
	char *s = t_snapshot(c);

	t_client_free(c);
	return s;
}

/* Start, list, stop: it runs with a VF, lists as transient, leaves no file, and is gone
 * after the stop. */
static void test_start_list_stop(void **state)
{
	struct tdaemon *d = *state;
	json_object *s;

	assert_int_equal(T_CTL(d, "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, U1 " started (transient)"));
	s = slice_get(d, U1);
	assert_non_null(s);
	assert_string_equal(jstring(s, "state"), "running");
	assert_true(jbool(s, "transient"));
	assert_int_equal(json_object_get_int(json_object_object_get(s, "vf")), 1);
	assert_string_equal(jstring(s, "mdev_type"), "vgpu-512M");
	json_object_put(s);
	assert_false(def_file(d, U1));
	/* The text list marks it where a defined slice shows its start mode. */
	assert_int_equal(T_CTL(d, "list"), 0);
	assert_non_null(strstr(t_out.out, U1 " " PARENT " vgpu-512M transient running vf1"));
	/* status counts it as transient, not as defined */
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U2), 0);
	assert_int_equal(T_CTL(d, "status"), 0);
	assert_non_null(strstr(t_out.out, "Slices: 1 defined, 1 transient\n"));
	assert_int_equal(T_CTL(d, "undefine", "-u", U2), 0);

	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_null(slice_get(d, U1));
	assert_int_equal(t_out.rc, EXIT_NOTFOUND);
	assert_false(def_file(d, U1));
	assert_int_equal(T_CTL(d, "list"), 0);
	assert_null(strstr(t_out.out, U1));
}

/* Without -u the daemon picks the UUID; quota flags apply as to a defined slice. */
static void test_generated_uuid_and_quota(void **state)
{
	struct tdaemon *d = *state;
	json_object *o, *p, *arr;
	const char *uuid;
	char keep[64];

	assert_int_equal(T_CTL(d, "--json", "start", "-p", PARENT, "-t", "vgpu-512M",
			       "--channels", "3"), 0);
	o = t_out_json();
	uuid = jstring(o, "uuid");
	assert_int_equal(ctlc_uuid_parse(uuid, NULL, NULL), 0);
	snprintf(keep, sizeof(keep), "%s", uuid);
	assert_true(jbool(o, "transient"));
	assert_true(json_object_object_get_ex(o, "provisioned", &p));
	assert_int_equal(json_object_get_int(json_object_object_get(p, "channels")), 3);
	json_object_put(o);
	assert_int_equal(T_CTL(d, "--json", "list"), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "slices", &arr));
	assert_int_equal(json_object_array_length(arr), 1);
	json_object_put(o);
	assert_false(def_file(d, keep));
	assert_int_equal(T_CTL(d, "stop", "-u", keep), 0);
	assert_null(slice_get(d, keep));
}

/* vgpud's restart is not the host's reboot: the journal brings the transient slice back
 * running on its VF, still transient (still no file), and a later stop removes it. Also
 * after SIGTERM, which leaves running slices to the next start. */
static void test_restart_keeps_it_transient(void **state)
{
	struct tdaemon *d = *state;
	json_object *s;
	int sig[] = { SIGKILL, SIGTERM };

	assert_int_equal(T_CTL(d, "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1), 0);
	for (unsigned int i = 0; i < 2; i++) {
		t_daemon_stop(d, sig[i]);
		assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
		s = slice_get(d, U1);
		assert_non_null(s);
		assert_string_equal(jstring(s, "state"), "running");
		assert_true(jbool(s, "transient"));
		assert_int_equal(json_object_get_int(json_object_object_get(s, "vf")), 1);
		json_object_put(s);
		assert_false(def_file(d, U1));
	}
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	t_daemon_stop(d, SIGKILL);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_null(slice_get(d, U1));
}

/* A restart that finds a transient slice's VRAM object gone (removed by hand) drops the
 * slice: with no definition it has nothing to come back as. */
static void test_restart_without_object(void **state)
{
	struct tdaemon *d = *state;
	char prefix[64], path[200];

	assert_int_equal(T_CTL(d, "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1), 0);
	t_daemon_stop(d, SIGKILL);
	t_shm_prefix(d, prefix, sizeof(prefix));
	snprintf(path, sizeof(path), "/dev/shm/%s1", prefix);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_null(slice_get(d, U1));
	assert_false(def_file(d, U1));
}

/* Each bad request fails with the exit code and a message naming what is wrong, and the
 * daemon's state is as before. */
static void test_bad_input(void **state)
{
	struct tdaemon *d = *state;
	char *before = NULL, *after;
	static const struct {
		const char *argv[10];
		int rc;
		const char *msg;
	} cases[] = {
		{ { "start", "-p", "0000:99:00.0", "-t", "vgpu-512M" }, EXIT_NOTFOUND,
		  "parent \"0000:99:00.0\" not found (this daemon serves " PARENT ")" },
		{ { "start", "-p", PARENT, "-t", "vgpu-3T" }, EXIT_USAGE,
		  "type \"vgpu-3T\" is not supported" },
		{ { "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U2 }, EXIT_CONFLICT,
		  "slice " U2 " already exists (defined); start it by its uuid alone" },
		{ { "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1 }, EXIT_CONFLICT,
		  "slice " U1 " already exists (transient, running on VF 1)" },
		{ { "start", "-t", "vgpu-512M" }, EXIT_USAGE, "needs -p/--parent" },
		{ { "start", "-p", PARENT, "-t", "vgpu-512M", "-u", "not-a-uuid" }, EXIT_USAGE,
		  "\"not-a-uuid\" is not a UUID" },
		{ { "start", "-p", PARENT, "-t", "vgpu-512M", "--auto" }, EXIT_USAGE,
		  "a transient slice has no start mode" },
		{ { "define", "-t", "vgpu-512M", "-u", U1 }, EXIT_CONFLICT,
		  "slice " U1 " is running as a transient slice" },
		{ { "undefine", "-u", U1 }, EXIT_CONFLICT, "stop removes it" },
		{ { "modify", "-u", U1, "--auto" }, EXIT_USAGE, "is transient: it has no start mode" },
	};

	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", U2), 0);
	assert_int_equal(T_CTL(d, "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1), 0);
	before = snap(d);
	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = t_ctl_argv(d, &t_out, 0, (char *const *)cases[i].argv);

		if (rc != cases[i].rc || !strstr(t_out.err, cases[i].msg))
			fail_msg("case %u (%s %s ...): exit %d, stderr \"%s\"; want exit %d and \"%s\"",
				 i, cases[i].argv[0], cases[i].argv[1], rc, t_out.err, cases[i].rc,
				 cases[i].msg);
		after = snap(d);
		assert_string_equal(before, after);
		free(after);
		assert_false(def_file(d, U1));
	}
	free(before);
}

/* The protocol form: "parent" is required with "type", a dry run plans and changes
 * nothing, and a stop's reply says the slice was transient. */
static void test_protocol(void **state)
{
	struct tdaemon *d = *state;
	struct tclient *c = t_client(d, true);
	json_object *a, *rep;
	char *before = t_snapshot(c), *after;

	a = t_args("type", "vgpu-512M");
	rep = t_exec(c, "start-slice", a);
	assert_string_equal(t_err_class(rep), "InvalidArgument");
	json_object_put(rep);
	a = t_args("type", "vgpu-512M");
	json_object_object_add(a, "parent", json_object_new_int(7));
	rep = t_exec(c, "start-slice", a);
	assert_string_equal(t_err_class(rep), "NotFound");
	json_object_put(rep);
	a = t_args("type", "vgpu-512M");
	json_object_object_add(a, "parent", json_object_new_string(PARENT));
	json_object_object_add(a, "uuid", json_object_new_string(U1));
	json_object_object_add(a, "dry-run", json_object_new_boolean(true));
	rep = t_exec(c, "start-slice", a);
	assert_non_null(t_ret(rep));
	assert_string_equal(jstring(t_ret(rep), "result"), "would start");
	assert_true(jbool(t_ret(rep), "transient"));
	json_object_put(rep);
	after = t_snapshot(c);
	assert_string_equal(before, after);
	free(after);
	free(before);
	assert_false(def_file(d, U1));

	a = t_args("type", "vgpu-512M");
	json_object_object_add(a, "parent", json_object_new_string(PARENT));
	json_object_object_add(a, "uuid", json_object_new_string(U1));
	json_object_put(t_exec(c, "start-slice", a));
	rep = t_exec(c, "stop-slice", t_args("uuid", U1));
	assert_string_equal(jstring(t_ret(rep), "result"), "stopped");
	assert_true(jbool(t_ret(rep), "transient"));
	json_object_put(rep);
	rep = t_exec(c, "query-slices", t_args("uuid", U1));
	assert_string_equal(t_err_class(rep), "NotFound");
	json_object_put(rep);
	t_client_free(c);
}

/* A running transient slice takes quota changes like any running slice, and they stay in
 * the journal (no file appears); it survives a restart with them. */
static void test_modify(void **state)
{
	struct tdaemon *d = *state;
	json_object *s, *p;

	assert_int_equal(T_CTL(d, "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1), 0);
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--channels", "5"), 0);
	assert_false(def_file(d, U1));
	t_daemon_stop(d, SIGKILL);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	s = slice_get(d, U1);
	assert_non_null(s);
	assert_true(jbool(s, "transient"));
	assert_true(json_object_object_get_ex(s, "provisioned", &p));
	assert_int_equal(json_object_get_int(json_object_object_get(p, "channels")), 5);
	json_object_put(s);
	assert_false(def_file(d, U1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_start_list_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generated_uuid_and_quota, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_keeps_it_transient, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_without_object, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
		cmocka_unit_test_setup_teardown(test_protocol, setup, teardown),
		cmocka_unit_test_setup_teardown(test_modify, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
