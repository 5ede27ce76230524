// SPDX-License-Identifier: MIT
/* A state file replaced (or removed) whose directory then fails to sync: the change stands
 * in memory as in the file, which is what a restart reads; the request is answered with an
 * error naming the directory and the cause; every later change is refused, queries are
 * still answered. In-process, through pf_command(), with no device: the commands here
 * touch only the state directory. The fsync failure is the test hook of the -th library
 * (pf_test_dir_fsync_err), taken by the real pf_fsync_dir_of(). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "common/log.h"
#include "pf_manager/pf_internal.h"

#define U1	"11111111-1111-4111-8111-111111111111"

static const struct sync_case {
	const char *name;
	bool predefine;		/* U1 defined (synced) before the request */
	const char *req;	/* the change whose directory sync fails */
	const char *dir;	/* the directory it syncs, under the state dir ("" itself) */
	const char *file;	/* the file it writes or removes, under the state dir */
	bool exists;		/* whether that file is there after it */
	unsigned int num_vfs;	/* and the VFs then enabled */
	unsigned int nr_slices;	/* and the slices then defined */
} sync_cases[] = {
	{ "set-vfs: the journal", false,
	  "{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":2},\"id\":7}",
	  "", "journal.json", true, 2, 0 },
	{ "define-slice: a definition file", false,
	  "{\"execute\":\"define-slice\",\"arguments\":{\"uuid\":\"" U1 "\","
	  "\"type\":\"vgpu-auto\"},\"id\":7}",
	  "/slices", "slices/" U1 ".json", true, 0, 1 },
	{ "undefine-slice: a removal", true,
	  "{\"execute\":\"undefine-slice\",\"arguments\":{\"uuid\":\"" U1 "\"},\"id\":7}",
	  "/slices", "slices/" U1 ".json", false, 0, 0 },
};

static char root[64];
static struct pf_daemon *dmn;
static struct pf_client admin = { .fd = -1, .admin = true, .negotiated = true };

/* A daemon struct over the state dir, configured as the test's vgpud, not loaded yet. */
static struct pf_daemon *daemon_new(void)
{
	struct pf_daemon *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	pf_config_defaults(&d->cfg);
	snprintf(d->cfg.model, sizeof(d->cfg.model), "vgpu");
	snprintf(d->cfg.state_dir, sizeof(d->cfg.state_dir), "%s/state", root);
	d->cfg.vram_size = 4ull << 30;
	d->cfg.spare_vram = 256ull << 20;
	d->cfg.max_vfs = 4;
	d->cfg.num_vfs = 0;
	pf_types_build(d);
	return d;
}

/* A daemon struct over the state dir, loaded as vgpud loads it at start. */
static struct pf_daemon *daemon_load(void)
{
	struct pf_daemon *d = daemon_new();

	assert_int_equal(pf_state_load(d), 0);
	return d;
}

static void daemon_free(struct pf_daemon *d)
{
	for (unsigned int i = 0; i < d->nr_slices; i++)
		pf_slice_free(d->slices[i]);
	free(d);
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/vgpu-state-sync-XXXXXX");
	if (!mkdtemp(root))
		return -1;
	pf_test_dir_fsync_err = 0;
	dmn = daemon_load();
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	daemon_free(dmn);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) ? -1 : 0;
}

/* Run request @req (JSON text) as an admin; the reply (the caller puts it). */
static json_object *run(const char *req)
{
	json_object *r = json_tokener_parse(req), *rep;

	assert_non_null(r);
	rep = pf_command(dmn, &admin, r);
	json_object_put(r);
	assert_non_null(rep);
	return rep;
}

/* @rep is an error with errno @errname whose text holds @a and @b. */
static void assert_error(json_object *rep, const char *errname, const char *a, const char *b)
{
	json_object *e, *v;
	const char *desc;

	assert_true(json_object_object_get_ex(rep, "error", &e));
	assert_true(json_object_object_get_ex(e, "errno", &v));
	assert_string_equal(json_object_get_string(v), errname);
	assert_true(json_object_object_get_ex(e, "desc", &v));
	desc = json_object_get_string(v);
	if (!strstr(desc, a) || !strstr(desc, b))
		fail_msg("\"%s\" does not name \"%s\" and \"%s\"", desc, a, b);
}

static void assert_ok(json_object *rep)
{
	if (!json_object_object_get_ex(rep, "return", NULL))
		fail_msg("not a success: %s", json_object_to_json_string(rep));
}

/* The journal's num_vfs, as a restart reads it. */
static unsigned int journal_num_vfs(void)
{
	struct pf_daemon *d = daemon_load();
	unsigned int n = d->num_vfs;

	daemon_free(d);
	return n;
}

static void test_dir_sync_fails(void **state)
{
	const struct sync_case *c = *state;
	char path[256], dir[256];
	struct pf_daemon *restarted;
	json_object *rep;

	if (c->predefine)
		json_object_put(run("{\"execute\":\"define-slice\",\"arguments\":{\"uuid\":\""
				    U1 "\",\"type\":\"vgpu-auto\"}}"));
	snprintf(path, sizeof(path), "%s/state/%s", root, c->file);
	snprintf(dir, sizeof(dir), "%s/state%s", root, c->dir);

	pf_test_dir_fsync_err = -EIO;
	rep = run(c->req);
	assert_int_equal(pf_test_dir_fsync_err, 0);	/* the hook was taken */
	/* The change is in the file and in memory alike: a restart reads what runs. */
	assert_int_equal(access(path, F_OK) == 0, c->exists);
	restarted = daemon_load();
	assert_int_equal(dmn->num_vfs, restarted->num_vfs);
	assert_int_equal(dmn->nr_slices, restarted->nr_slices);
	assert_int_equal(!pf_slice_find(dmn, U1), !pf_slice_find(restarted, U1));
	daemon_free(restarted);
	assert_int_equal(dmn->num_vfs, c->num_vfs);
	assert_int_equal(dmn->nr_slices, c->nr_slices);
	/* And the reply says it is not durable, where and why. */
	assert_error(rep, "EIO", "not durable", dir);
	assert_error(rep, "EIO", "Input/output error", "restarted");
	json_object_put(rep);

	/* Read-only from now on: changes (dry runs too) refused, naming the cause. */
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":3}}");
	assert_error(rep, "EROFS", "refused", dir);
	assert_error(rep, "EROFS", "Input/output error", "restarted");
	json_object_put(rep);
	rep = run("{\"execute\":\"define-slice\",\"arguments\":{\"type\":\"vgpu-auto\","
		  "\"dry-run\":true}}");
	assert_error(rep, "EROFS", "refused", dir);
	json_object_put(rep);
	assert_int_equal(dmn->num_vfs, c->num_vfs);
	assert_int_equal(journal_num_vfs(), c->num_vfs);
	assert_int_equal(dmn->nr_slices, c->nr_slices);
	rep = run("{\"execute\":\"query-slices\"}");
	assert_ok(rep);
	json_object_put(rep);
}

/* A sound directory: the change is answered as done and the next one is taken. */
static void test_dir_sync_ok(void **state)
{
	json_object *rep;

	(void)state;
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":2}}");
	assert_ok(rep);
	json_object_put(rep);
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":0}}");
	assert_ok(rep);
	json_object_put(rep);
	assert_int_equal(journal_num_vfs(), 0);
}

/* ---- a state file whose object repeats a key ------------------------------------------- */

static char logbuf[4096];

static void log_keep(enum cmn_log_level level, const char *msg, void *ctx)
{
	size_t n = strlen(logbuf);

	(void)level; (void)ctx;
	snprintf(logbuf + n, sizeof(logbuf) - n, "%s\n", msg);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 65536);

	assert_non_null(f);
	assert_non_null(buf);
	assert_true(fread(buf, 1, 65535, f) > 0);
	fclose(f);
	return buf;
}

/* @path's text with @ins put after the first @after in it. */
static void insert_after(const char *path, const char *after, const char *ins)
{
	char *text = slurp(path), *at = strstr(text, after);
	FILE *f = fopen(path, "w");

	assert_non_null(at);
	assert_non_null(f);
	at += strlen(after);
	fprintf(f, "%.*s%s%s", (int)(at - text), text, ins, at);
	fclose(f);
	free(text);
}

static const struct dupfile_case {
	const char *name;
	const char *file;	/* under the state dir */
	const char *after;	/* where the repeat goes in it */
	const char *ins;
	const char *why;	/* in the log line naming the file */
} dupfile_cases[] = {
	{ "a definition file repeats \"mdev_type\"", "slices/" U1 ".json", "{",
	  "\"mdev_type\":\"vgpu-512M\",",
	  "key \"mdev_type\" appears twice in the top-level object" },
	{ "a definition's attrs entry repeats \"channels\"", "slices/" U1 ".json",
	  "\"channels\"", ":8, \"channels\"", "key \"channels\" appears twice in \"attrs[0]\"" },
	{ "the journal repeats \"num_vfs\", escaped", "journal.json", "{",
	  "\"num_\\u0076fs\":0,", "key \"num_vfs\" appears twice in the top-level object" },
};

/* A state file with a repeated key is refused at load, naming the file and the key; nothing
 * of the state is taken and no file is changed. */
static void test_dup_key_refused(void **state)
{
	const struct dupfile_case *c = *state;
	char path[256], slice[256], journal[256], want[512];
	char *before_slice, *before_journal, *after;
	struct pf_daemon *d;
	json_object *rep;

	rep = run("{\"execute\":\"define-slice\",\"arguments\":{\"uuid\":\"" U1 "\","
		  "\"type\":\"vgpu-auto\",\"attrs\":[{\"channels\":4}]}}");
	assert_ok(rep);
	json_object_put(rep);
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":2}}");
	assert_ok(rep);
	json_object_put(rep);
	snprintf(path, sizeof(path), "%s/state/%s", root, c->file);
	snprintf(slice, sizeof(slice), "%s/state/slices/" U1 ".json", root);
	snprintf(journal, sizeof(journal), "%s/state/journal.json", root);
	insert_after(path, c->after, c->ins);
	before_slice = slurp(slice);
	before_journal = slurp(journal);

	d = daemon_new();
	logbuf[0] = 0;
	cmn_log_set_sink(log_keep, NULL);
	assert_int_not_equal(pf_state_load(d), 0);
	cmn_log_set_sink(NULL, NULL);
	snprintf(want, sizeof(want), "%s: %s", path, c->why);
	if (!strstr(logbuf, want))
		fail_msg("the log does not say \"%s\":\n%s", want, logbuf);
	assert_int_equal(d->nr_slices, 0);
	assert_int_equal(d->num_vfs, 0);
	after = slurp(slice);
	assert_string_equal(after, before_slice);
	free(after);
	after = slurp(journal);
	assert_string_equal(after, before_journal);
	free(after);
	free(before_slice);
	free(before_journal);
	daemon_free(d);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(sync_cases) + VGPU_ARRAY_SIZE(dupfile_cases) + 1];
	size_t n = 0;

	cmn_log_set_level(VGPU_LOG_ERR);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(sync_cases); i++)
		t[n++] = (struct CMUnitTest){ sync_cases[i].name, test_dir_sync_fails, setup,
					      teardown, (void *)&sync_cases[i] };
	t[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_dir_sync_ok, setup,
								    teardown);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(dupfile_cases); i++)
		t[n++] = (struct CMUnitTest){ dupfile_cases[i].name, test_dup_key_refused, setup,
					      teardown, (void *)&dupfile_cases[i] };
	return _cmocka_run_group_tests("pf_state_sync", t, n, NULL, NULL);
}
