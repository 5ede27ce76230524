// SPDX-License-Identifier: MIT
/* The state vgpud finds at start, against a real daemon: the journal written at start that
 * cannot be written (the loader's finished resets still pending in it: read-only until a
 * restart), a restored slice whose definition file cannot be written (the journal keeps
 * its definition), an empty journal with no VRAM object (taken), a state refused for a
 * later entry with an earlier entry's grown object (left as it was), an entry's record of
 * its VRAM object (written, and refused when it is not a number), and state and runtime
 * directories others could write or that are not vgpud's (refused, naming them). */
#include "pf_test.h"

#define U1	"11111111-1111-4111-8111-111111111111"
#define U2	"22222222-2222-4222-8222-222222222222"
#define MARK	"journal-marker"

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			       "--spare-vram", "256M", NULL };

static char *file_get(const char *path)
{
	char *buf = calloc(1, 1 << 16);
	FILE *f = fopen(path, "r");

	assert_non_null(buf);
	assert_non_null(f);
	assert_true(fread(buf, 1, (1 << 16) - 1, f) > 0);
	fclose(f);
	return buf;
}

static void file_put(const char *path, const char *txt)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(txt, f);
	fclose(f);
}

/* @path's text with the first @from after @after (NULL: the start) replaced by @to. */
static void file_edit(const char *path, const char *after, const char *from, const char *to)
{
	char *text = file_get(path), *at = after ? strstr(text, after) : text, *out;

	assert_non_null(at);
	at = strstr(at, from);
	assert_non_null(at);
	assert_true(asprintf(&out, "%.*s%s%s", (int)(at - text), text, to,
			     at + strlen(from)) > 0);
	file_put(path, out);
	free(out);
	free(text);
}

/* @path's text with the value of the first "@key" after @after set to @val. */
static void field_set(const char *path, const char *after, const char *key, const char *val)
{
	char *text = file_get(path), *at = strstr(text, after), *end, *out, k[64];

	assert_non_null(at);
	snprintf(k, sizeof(k), "\"%s\":", key);
	at = strstr(at, k);
	assert_non_null(at);
	at += strlen(k);
	end = at + strcspn(at, ",\n");
	assert_true(asprintf(&out, "%.*s%s%s", (int)(at - text), text, val, end) > 0);
	file_put(path, out);
	free(out);
	free(text);
}

/* The error reply @rep's errno is @errname and its desc holds @a and @b. */
static void assert_error(json_object *rep, const char *errname, const char *a, const char *b)
{
	json_object *e, *v;
	const char *desc;

	if (!json_object_object_get_ex(rep, "error", &e))
		fail_msg("not an error: %s", json_object_to_json_string(rep));
	assert_true(json_object_object_get_ex(e, "errno", &v));
	assert_string_equal(json_object_get_string(v), errname);
	assert_true(json_object_object_get_ex(e, "desc", &v));
	desc = json_object_get_string(v);
	if (!strstr(desc, a) || !strstr(desc, b))
		fail_msg("\"%s\" does not name \"%s\" and \"%s\"", desc, a, b);
}

/* Slice @uuid's state in query-slices ("running", "defined", or "absent"). */
static void slice_state(struct tdaemon *d, const char *uuid, char *buf, size_t len)
{
	struct tclient *c = t_client(d, true);
	json_object *rep = t_exec(c, "query-slices", NULL), *arr;

	snprintf(buf, len, "absent");
	assert_true(json_object_object_get_ex(t_ret(rep), "slices", &arr));
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		json_object *s = json_object_array_get_idx(arr, i);

		if (!strcmp(json_object_get_string(json_object_object_get(s, "uuid")), uuid))
			snprintf(buf, len, "%s",
				 json_object_get_string(json_object_object_get(s, "state")));
	}
	json_object_put(rep);
	t_client_free(c);
}

/* The journal written at start fails (a directory holds its temporary file's name) after
 * the loader finished a committed reset: the reset ran (its VRAM scrubbed), the journal
 * still holds it pending, and vgpud takes no change, dry runs included, until restarted;
 * queries are answered. */
static void test_startup_journal_unwritable(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char journal[200], tmp[220], log[200], buf[sizeof(MARK)], *text;
	struct tclient *c;
	json_object *a, *rep;
	int fd;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	t_define_start(d, "vgpu-512M", U1);
	fd = t_bar_open(d, 1);
	assert_int_equal(pwrite(fd, MARK, sizeof(MARK), 0), (ssize_t)sizeof(MARK));
	close(fd);
	t_daemon_stop(d, SIGKILL);
	snprintf(journal, sizeof(journal), "%s/journal.json", d->state);
	snprintf(tmp, sizeof(tmp), "%s.tmp", journal);
	/* A reset committed and not done, as a crash between the two leaves it. */
	file_edit(journal, "\"slices\"", "\"resets\":0", "\"resets\":1,\"reset_pending\":true");
	assert_int_equal(mkdir(tmp, 0700), 0);

	assert_int_equal(t_daemon_start_logged(d, daemon_args, log, sizeof(log)), 0);
	fd = t_bar_open(d, 1);
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	close(fd);
	assert_memory_not_equal(buf, MARK, sizeof(MARK));	/* the loader's reset ran */
	text = file_get(journal);
	assert_non_null(strstr(text, "\"reset_pending\":true"));
	free(text);
	assert_true(t_log_has(log, "no change is taken until vgpud is restarted"));

	c = t_client(d, true);
	a = json_object_new_object();
	json_object_object_add(a, "num_vfs", json_object_new_int(1));
	json_object_object_add(a, "dry-run", json_object_new_boolean(true));
	rep = t_exec(c, "set-vfs", a);
	assert_error(rep, "EROFS", "no changes until it is restarted", "runs those resets again");
	assert_error(rep, "EROFS", "Is a directory", d->state);
	json_object_put(rep);
	rep = t_exec(c, "query-status", NULL);
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	t_client_free(c);
	assert_int_equal(rmdir(tmp), 0);
	t_daemon_free(d);
}

/* A restored slice (its journal entry marked "restored", no definition file) whose file
 * cannot be written at start: the slice runs, the journal written at start keeps the mark
 * and the definition, and the next start, with the file writable again, loads it and
 * writes the file. */
static void test_restored_definition_unwritable(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char journal[200], def[200], tmp[220], now[32], *text;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	t_define_start(d, "vgpu-512M", U1);
	t_daemon_stop(d, SIGKILL);
	snprintf(journal, sizeof(journal), "%s/journal.json", d->state);
	snprintf(def, sizeof(def), "%s/slices/" U1 ".json", d->state);
	snprintf(tmp, sizeof(tmp), "%s.tmp", def);
	/* What a restore that crashed before its definition file leaves. */
	file_edit(journal, "\"slices\"", "\"vf\":1,", "\"vf\":1,\"restored\":true,");
	assert_int_equal(unlink(def), 0);
	assert_int_equal(mkdir(tmp, 0700), 0);

	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	slice_state(d, U1, now, sizeof(now));
	assert_string_equal(now, "running");
	assert_int_equal(access(def, F_OK), -1);
	text = file_get(journal);
	assert_non_null(strstr(text, "\"restored\":true"));
	assert_non_null(strstr(text, "\"definition\""));
	free(text);
	t_daemon_stop(d, SIGKILL);

	assert_int_equal(rmdir(tmp), 0);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	slice_state(d, U1, now, sizeof(now));
	assert_string_equal(now, "running");
	assert_int_equal(access(def, F_OK), 0);
	t_daemon_free(d);
}

/* An empty journal with no VRAM object of the instance: nothing ran, vgpud starts. */
static void test_empty_journal_no_objects(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char journal[200], log[200];

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	snprintf(journal, sizeof(journal), "%s/journal.json", d->state);
	file_put(journal, "");
	assert_int_equal(t_daemon_start_logged(d, daemon_args, log, sizeof(log)), 0);
	assert_true(t_log_has(log, "journal.json is empty: no slice is running"));
	t_daemon_free(d);
}

/* A journal refused for its second entry, the first entry's VRAM object grown by its
 * guest: the refusal leaves the object as it was (the vetting that cuts it back runs only
 * once every entry passed). */
static void test_refused_state_cuts_nothing(void **state)
{
	struct tdaemon *d = t_daemon_two_vfs(U1, U2);
	char journal[200], obj[128], log[200];
	struct stat sb;
	off_t grown;

	(void)state;
	assert_non_null(d);
	t_daemon_stop(d, SIGKILL);
	t_bar_path(d, 1, obj, sizeof(obj));
	assert_int_equal(stat(obj, &sb), 0);
	grown = sb.st_size + (1 << 20);
	assert_int_equal(truncate(obj, grown), 0);
	snprintf(journal, sizeof(journal), "%s/journal.json", d->state);
	field_set(journal, "\"vf\":2,", "channels", "0");
	assert_true(t_daemon_start_logged(d, daemon_args, log, sizeof(log)) == 1003);
	assert_true(t_log_has(log, "channels 0 outside"));
	assert_int_equal(stat(obj, &sb), 0);
	assert_int_equal(sb.st_size, grown);
	t_daemon_free(d);
}

/* The journal records the VRAM object each running slice runs on (its device and inode);
 * a record that is not a number refuses the state, naming the key, and changes nothing. */
static void test_bar_record(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char journal[200], obj[128], log[200], num[32], *text, *before, *after;
	struct stat sb;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	t_define_start(d, "vgpu-512M", U1);
	t_daemon_stop(d, SIGKILL);
	snprintf(journal, sizeof(journal), "%s/journal.json", d->state);
	t_bar_path(d, 1, obj, sizeof(obj));
	assert_int_equal(stat(obj, &sb), 0);
	text = file_get(journal);
	snprintf(num, sizeof(num), "\"bar_ino\":%ju", (uintmax_t)sb.st_ino);
	assert_non_null(strstr(text, num));
	snprintf(num, sizeof(num), "\"bar_dev\":%ju", (uintmax_t)sb.st_dev);
	assert_non_null(strstr(text, num));
	free(text);
	field_set(journal, "\"vf\":1,", "bar_ino", "\"x\"");
	before = file_get(journal);
	assert_true(t_daemon_start_logged(d, daemon_args, log, sizeof(log)) == 1003);
	assert_true(t_log_has(log, "\"bar_ino\" is missing or not a non-negative integer"));
	after = file_get(journal);
	assert_string_equal(after, before);
	free(after);
	free(before);
	assert_int_equal(access(obj, F_OK), 0);
	t_daemon_free(d);
}

static const struct dir_case {
	const char *name;
	bool runtime;		/* the runtime dir (else the state dir) */
	mode_t mode;
	uid_t uid;
	const char *says;	/* in the refusal; NULL: vgpud starts */
} dir_cases[] = {
	{ "state dir 0770", false, 0770, 0, "is owned by uid 0 with mode 0770" },
	{ "state dir 0757", false, 0757, 0, "is owned by uid 0 with mode 0757" },
	{ "state dir of nobody", false, 0750, 65534, "is owned by uid 65534 with mode 0750" },
	{ "runtime dir 0777", true, 0777, 0, "is owned by uid 0 with mode 0777" },
	{ "runtime dir 01777 (sticky)", true, 01777, 0, "is owned by uid 0 with mode 1777" },
	{ "runtime dir 0775", true, 0775, 0, "is owned by uid 0 with mode 0775" },
	{ "state dir 0700, runtime dir 0711", false, 0700, 0, NULL },
};

/* A state or runtime directory others could write, or not vgpud's own, is refused at
 * start (exit 1) naming it, its owner and its mode, before anything is made in it. */
static void test_dir_refused(void **state)
{
	const struct dir_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	char log[200], want[300], path[200];
	const char *dir = c->runtime ? d->run : d->state;

	if (c->uid && geteuid()) {
		t_daemon_free(d);
		skip();
	}
	assert_int_equal(mkdir(d->state, 0750), 0);
	assert_int_equal(mkdir(d->run, 0755), 0);
	if (!c->says)
		assert_int_equal(chmod(d->run, 0711), 0);
	assert_int_equal(chmod(dir, c->mode), 0);
	assert_int_equal(chown(dir, c->uid, 0), 0);
	if (!c->says) {
		assert_int_equal(t_daemon_start_logged(d, daemon_args, log, sizeof(log)), 0);
		t_daemon_free(d);
		return;
	}
	assert_int_equal(t_daemon_start_logged(d, daemon_args, log, sizeof(log)), 1001);
	snprintf(want, sizeof(want), "the %s directory %s %s", c->runtime ? "runtime" : "state",
		 dir, c->says);
	if (!t_log_has(log, want))
		fail_msg("the log does not say \"%s\"", want);
	snprintf(path, sizeof(path), "%s/vgpud.lock", dir);
	assert_int_equal(access(path, F_OK), -1);
	snprintf(path, sizeof(path), "%s/slices", d->state);
	assert_int_equal(access(path, F_OK), -1);
	t_daemon_free(d);
}

int main(void)
{
	struct CMUnitTest t[5 + sizeof(dir_cases) / sizeof(dir_cases[0])] = {
		cmocka_unit_test_teardown(test_startup_journal_unwritable, t_teardown),
		cmocka_unit_test_teardown(test_restored_definition_unwritable, t_teardown),
		cmocka_unit_test_teardown(test_empty_journal_no_objects, t_teardown),
		cmocka_unit_test_teardown(test_refused_state_cuts_nothing, t_teardown),
		cmocka_unit_test_teardown(test_bar_record, t_teardown),
	};
	size_t n = 5;

	for (size_t i = 0; i < sizeof(dir_cases) / sizeof(dir_cases[0]); i++)
		t[n++] = (struct CMUnitTest){ dir_cases[i].name, test_dir_refused, NULL,
					      t_teardown, (void *)&dir_cases[i] };
	return cmocka_run_group_tests(t, NULL, NULL);
}
