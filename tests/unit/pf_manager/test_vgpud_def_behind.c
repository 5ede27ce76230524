// SPDX-License-Identifier: MIT
/* A running slice whose definition file cannot be written after its journal commit (a
 * modify, a reclaim of a held slice): the verb is done, the journal holds the new
 * definition, and the file is behind it. A stop, after which the journal no longer names
 * the slice, writes the file first: while it cannot, the stop is refused naming the file
 * and nothing changes; once it can, the stop goes through and a restart finds the new
 * definition. A later definition write that succeeds catches the file up, and a stop then
 * has nothing to write. The same holds for a file a restart finds behind its journal and
 * cannot rewrite, and for a held transient slice whose file a restart cannot write (its
 * journal entry stays its record). The write fails for real: a directory takes the name of
 * the definition file's temporary file. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"

#define U1	"de7b0b0d-1111-4111-8111-111111111111"
#define PARENT	"0000:00:00.0"		/* vgpud's default parent */

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			       "--spare-vram", "256M", NULL };

/* @d's definition file of U1 in @path. */
static void def_path(struct tdaemon *d, char *path, size_t len)
{
	snprintf(path, len, "%s/slices/%s.json", d->state, U1);
}

/* Make (@on) or remove the directory in the place of U1's definition temp file. */
static void def_blocked(struct tdaemon *d, bool on)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/slices/%s.json.tmp", d->state, U1);
	if (on)
		assert_int_equal(mkdir(path, 0700), 0);
	else
		assert_int_equal(rmdir(path), 0);
}

/* The attribute @key of U1's definition file on @d, -1 if it has none. */
static int64_t def_attr(struct tdaemon *d, const char *key)
{
	char path[256];
	json_object *o, *attrs, *v;
	int64_t n = -1;

	def_path(d, path, sizeof(path));
	o = json_object_from_file(path);
	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "attrs", &attrs));
	for (size_t i = 0; i < json_object_array_length(attrs); i++)
		if (json_object_object_get_ex(json_object_array_get_idx(attrs, i), key, &v))
			n = json_object_get_int64(v);
	json_object_put(o);
	return n;
}

/* U1's state in vgpuctl's list ("running", "defined", ...). */
static bool u1_is(struct tdaemon *d, const char *state)
{
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	return strstr(t_out.out, state) != NULL;
}

/* A stop of U1 that must write its definition file and cannot: refused, naming it, U1
 * runs on. */
static void stop_refused(struct tdaemon *d)
{
	assert_int_not_equal(T_CTL(d, "stop", "-u", U1), 0);
	if (!strstr(t_out.err, "definition file") || !strstr(t_out.err, "nothing was stopped"))
		fail_msg("stop: %s", t_out.err);
	assert_true(u1_is(d, "running"));
}

static void restart(struct tdaemon *d)
{
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
}

/* A daemon running U1 whose modify to 8 channels was acknowledged while its definition
 * file could not be written: the file is behind the journal. */
static struct tdaemon *u1_modified_behind(void)
{
	struct tdaemon *d = t_daemon_new();

	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	t_define_start(d, "vgpu-512M", U1);
	def_blocked(d, true);
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--channels", "8"), 0);
	return d;
}

/* Modify of a running slice whose file write fails: acknowledged; the stop waits for the
 * file; a second modify that writes it lets a stop through without writing. */
static void test_modify_then_stop(void **state)
{
	struct tdaemon *d = u1_modified_behind();

	(void)state;
	assert_int_not_equal(def_attr(d, "channels"), 8);
	stop_refused(d);
	def_blocked(d, false);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_int_equal(def_attr(d, "channels"), 8);
	restart(d);
	assert_true(u1_is(d, "defined"));
	assert_int_equal(def_attr(d, "channels"), 8);

	/* Behind, then caught up by the next modify: the stop has nothing to write. */
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	def_blocked(d, true);
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--channels", "16"), 0);
	stop_refused(d);
	def_blocked(d, false);
	assert_int_equal(T_CTL(d, "modify", "-u", U1, "--channels", "32"), 0);
	assert_int_equal(def_attr(d, "channels"), 32);
	def_blocked(d, true);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	def_blocked(d, false);
	restart(d);
	assert_true(u1_is(d, "defined"));
	assert_int_equal(def_attr(d, "channels"), 32);
	t_daemon_free(d);
}

/* A file behind the journal that the restart cannot rewrite either: it stays behind, the
 * journal written at start keeps the definition, and the stop waits for the file as
 * before the restart. */
static void test_restart_behind_then_stop(void **state)
{
	struct tdaemon *d = u1_modified_behind();

	(void)state;
	restart(d);
	assert_true(u1_is(d, "running"));
	assert_int_not_equal(def_attr(d, "channels"), 8);
	stop_refused(d);
	def_blocked(d, false);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	restart(d);
	assert_true(u1_is(d, "defined"));
	assert_int_equal(def_attr(d, "channels"), 8);
	t_daemon_free(d);
}

/* Add a hand-over record to @def, a slice's definition. */
static void add_record(json_object *def)
{
	json_object_object_add(def, "migrated_out", json_object_new_string("/nowhere/mig.sock"));
}

/* U1 held on @d with its VRAM, as a live migration that ended unconfirmed leaves it: the
 * record in its definition file and in its journal entry's definition, then a restart. */
static void held_u1(struct tdaemon *d)
{
	char path[256];
	json_object *j, *arr, *def;

	t_define_start(d, "vgpu-512M", U1);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	def_path(d, path, sizeof(path));
	j = json_object_from_file(path);
	assert_non_null(j);
	add_record(j);
	assert_int_equal(json_object_to_file_ext(path, j, JSON_C_TO_STRING_PRETTY), 0);
	json_object_put(j);
	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	j = json_object_from_file(path);
	assert_non_null(j);
	assert_true(json_object_object_get_ex(j, "slices", &arr));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "definition",
					      &def));
	add_record(def);
	assert_int_equal(json_object_to_file_ext(path, j, JSON_C_TO_STRING_PRETTY), 0);
	json_object_put(j);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_true(u1_is(d, "migrated-out"));
}

/* Reclaim of a held slice whose file write fails: acknowledged, it runs on; the stop waits
 * for the file, and a restart then finds the slice defined without its record. */
static void test_reclaim_then_stop(void **state)
{
	struct tdaemon *d = t_daemon_new();

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	held_u1(d);
	def_blocked(d, true);
	assert_int_equal(T_CTL(d, "reclaim", "-u", U1), 0);
	assert_false(u1_is(d, "migrated-out"));
	stop_refused(d);
	def_blocked(d, false);
	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	restart(d);
	assert_true(u1_is(d, "defined"));
	assert_false(u1_is(d, "migrated-out"));
	t_daemon_free(d);
}

/* A transient slice held after a live migration (the record in its journal entry's
 * definition): the loader makes it defined and writes its file. When that write fails the
 * journal keeps its definition, so the next start, with the file still unwritable, holds it
 * again; once the file can be written, a start writes it. */
static void test_held_transient_unwritable(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char path[256];
	json_object *j, *arr, *def;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_int_equal(T_CTL(d, "start", "-p", PARENT, "-t", "vgpu-512M", "-u", U1), 0);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	j = json_object_from_file(path);
	assert_non_null(j);
	assert_true(json_object_object_get_ex(j, "slices", &arr));
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "definition",
					      &def));
	add_record(def);
	assert_int_equal(json_object_to_file_ext(path, j, JSON_C_TO_STRING_PRETTY), 0);
	json_object_put(j);
	def_blocked(d, true);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_true(u1_is(d, "migrated-out"));
	restart(d);
	assert_true(u1_is(d, "migrated-out"));
	def_path(d, path, sizeof(path));
	assert_int_equal(access(path, F_OK), -1);
	def_blocked(d, false);
	restart(d);
	assert_true(u1_is(d, "migrated-out"));
	assert_int_equal(access(path, F_OK), 0);
	t_daemon_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_modify_then_stop, t_teardown),
		cmocka_unit_test_teardown(test_reclaim_then_stop, t_teardown),
		cmocka_unit_test_teardown(test_restart_behind_then_stop, t_teardown),
		cmocka_unit_test_teardown(test_held_transient_unwritable, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
