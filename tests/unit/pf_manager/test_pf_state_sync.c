// SPDX-License-Identifier: MIT
/* A state file replaced (or removed) whose directory then fails to sync: the change stands
 * in memory as in the file, which is what a restart reads; the request is answered with an
 * error naming the directory and the cause; every later change is refused, queries are
 * still answered. In-process, through pf_command(), with no device: the commands here
 * touch only the state directory. The fsync failure is the test hook of the -th library
 * (pf_test_dir_fsync_err), taken by the real pf_fsync_dir_of(). Then the state files
 * themselves: a repeated key, the journal's size (no allocations; a file over the bound
 * not written), its temporary name holding a link, a file that is not a regular one, the
 * sync of a new slices/ directory, and a state refused for a system error on a later VRAM
 * object, which leaves an earlier object as it was. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "common/log.h"
#include "pf_manager/pf_internal.h"
#include "pma/pma.h"

#define U1	"11111111-1111-4111-8111-111111111111"
#define U2	"22222222-2222-4222-8222-222222222222"
#define U3	"33333333-3333-4333-8333-333333333333"

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
	char cmd[128], name[96];

	(void)state;
	/* The VRAM objects a test made for the private state dir, also when it failed. */
	for (unsigned int vf = 1; vf <= dmn->cfg.max_vfs; vf++) {
		pf_shm_name(dmn, vf, name, sizeof(name));
		shm_unlink(name);
	}
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

/* ---- the journal's size and the files' kind --------------------------------------------- */

#define J_BASE		(1ull << 30)
#define J_VRAM		(2ull << 30)
#define J_RANGES	(J_VRAM / PMA_FRAME_SIZE)

/* U1 defined, and in memory running on VF 1 over [1 GiB, 3 GiB) with a child PMA of
 * J_RANGES 64 KiB allocations, pinned and evictable in turn (each its own range), as the
 * RM keeps a guest's allocations. No device: only the journal sees it. */
static struct pma *fake_running(void)
{
	struct pma_region_desc rd = { .base = J_BASE, .size = J_VRAM };
	struct pma_alloc_opts pin = { .flags = PMA_PINNED }, unpin = { 0 };
	struct pma *pma = pma_create(NULL);
	struct pf_slice *s;
	json_object *rep;

	rep = run("{\"execute\":\"define-slice\",\"arguments\":{\"uuid\":\"" U1 "\","
		  "\"type\":\"vgpu-auto\"}}");
	assert_ok(rep);
	json_object_put(rep);
	s = pf_slice_find(dmn, U1);
	assert_non_null(s);
	assert_non_null(pma);
	assert_int_equal(pma_region_add(pma, &rd, NULL, 0), 0);
	for (uint64_t i = 0; i < J_RANGES; i++)
		assert_int_equal(pma_alloc_fixed(pma, J_BASE + i * PMA_FRAME_SIZE, PMA_FRAME_SIZE,
						 i % 2 ? &unpin : &pin), 0);
	pf_rm_limits_default(&s->prov);
	s->prov.vram = J_VRAM;
	s->prov.channels = 8;
	s->prov.doorbells = 8;
	s->prov.priority = PF_PRIO_NORMAL;
	s->vf = 1;
	s->base = J_BASE;
	s->child = pma;
	dmn->vfs[1] = s;
	dmn->num_vfs = 1;
	return pma;
}

static void fake_stop(struct pma *pma)
{
	struct pf_slice *s = dmn->vfs[1];

	s->child = NULL;
	s->vf = 0;
	dmn->vfs[1] = NULL;
	pma_destroy(pma);
}

static off_t file_size(const char *path)
{
	struct stat sb;

	assert_int_equal(stat(path, &sb), 0);
	return sb.st_size;
}

/* A slice with 32768 allocations: the journal lists none of them (an older vgpud's grew
 * past the 1 MiB a start reads, and the next start refused it), and it loads. */
static void test_journal_without_allocations(void **state)
{
	char path[256];
	struct pf_daemon *d;
	struct pma *pma;
	char *text;

	(void)state;
	pma = fake_running();
	assert_int_equal(pf_state_save_journal(dmn), 0);
	fake_stop(pma);
	snprintf(path, sizeof(path), "%s/state/journal.json", root);
	text = slurp(path);
	assert_non_null(strstr(text, "\"vram_base\":1073741824"));
	assert_null(strstr(text, "allocations"));
	free(text);
	assert_true(file_size(path) < 16384);
	/* It loads: the slice comes back (stopped, as it has no VRAM object here). */
	d = daemon_new();
	assert_int_equal(pf_state_load(d), 0);
	assert_non_null(pf_slice_find(d, U1));
	assert_int_equal(d->num_vfs, 1);
	daemon_free(d);
}

static const struct oldalloc_case {
	const char *name;
	const char *allocs;	/* the value of "allocations" put into the entry */
	const char *why;	/* the refusal in the log; NULL: it loads */
} oldalloc_cases[] = {
	{ "an older journal's allocations load", "[[1073741824,65536,2],[1073807360,65536,1]]",
	  NULL },
	{ "an older journal's allocation outside the partition",
	  "[[1073741824,65536,2],[0,65536,2]]", "allocations[1] holds outside the slice's" },
	{ "an older journal's allocations not an array", "5", "\"allocations\" is not an array" },
	{ "an older journal's allocation of 2 members", "[[1073741824,65536]]",
	  "allocations[0] is not [base, size, state]" },
};

/* A journal an older vgpud wrote, with "allocations" in its entry: taken when they are
 * sound, refused naming the bad one otherwise, with no file changed. */
static void test_journal_old_allocations(void **state)
{
	const struct oldalloc_case *c = *state;
	char path[256], ins[256], *before, *after;
	struct pf_daemon *d;
	struct pma *pma;
	int r;

	pma = fake_running();
	assert_int_equal(pf_state_save_journal(dmn), 0);
	fake_stop(pma);
	snprintf(path, sizeof(path), "%s/state/journal.json", root);
	snprintf(ins, sizeof(ins), "\"allocations\":%s,", c->allocs);
	insert_after(path, "\"vf\":1,", ins);
	before = slurp(path);
	d = daemon_new();
	logbuf[0] = 0;
	cmn_log_set_sink(log_keep, NULL);
	r = pf_state_load(d);
	cmn_log_set_sink(NULL, NULL);
	if (!c->why) {
		assert_int_equal(r, 0);
		assert_non_null(pf_slice_find(d, U1));
	} else {
		assert_int_equal(r, -EBADMSG);
		assert_int_equal(d->nr_slices, 0);
		if (!strstr(logbuf, c->why) || !strstr(logbuf, path))
			fail_msg("the log does not name \"%s\" in %s:\n%s", c->why, path, logbuf);
	}
	after = slurp(path);
	assert_string_equal(after, before);
	free(after);
	free(before);
	daemon_free(d);
}

/* A state file the loader would refuse for its size is not written: the change fails
 * (its errno EFBIG), the log names the file and the size, the old file stays. */
static void test_state_file_too_large(void **state)
{
	char path[256], *before, *after;
	json_object *rep;

	(void)state;
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":1}}");
	assert_ok(rep);
	json_object_put(rep);
	snprintf(path, sizeof(path), "%s/state/journal.json", root);
	before = slurp(path);
	pf_test_state_max = 64;
	logbuf[0] = 0;
	cmn_log_set_sink(log_keep, NULL);
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":0}}");
	cmn_log_set_sink(NULL, NULL);
	pf_test_state_max = 1u << 20;
	assert_error(rep, "EIO", "cannot write the journal", "VFs unchanged");
	json_object_put(rep);
	if (!strstr(logbuf, path) || !strstr(logbuf, "more than the 64 a start reads"))
		fail_msg("the log does not name %s and its size:\n%s", path, logbuf);
	after = slurp(path);
	assert_string_equal(after, before);
	free(after);
	free(before);
	assert_int_equal(journal_num_vfs(), 1);
}

/* A symbolic link planted at the journal's temporary name: the write replaces the link,
 * never writes through it; the file it names is untouched. */
static void test_tmp_link_not_followed(void **state)
{
	char victim[256], tmp[300], journal[256], *text;
	struct stat sb;
	json_object *rep;
	FILE *f;

	(void)state;
	snprintf(victim, sizeof(victim), "%s/victim", root);
	snprintf(journal, sizeof(journal), "%s/state/journal.json", root);
	snprintf(tmp, sizeof(tmp), "%s.tmp", journal);
	f = fopen(victim, "w");
	assert_non_null(f);
	fputs("not vgpud's\n", f);
	fclose(f);
	assert_int_equal(symlink(victim, tmp), 0);
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":2}}");
	assert_ok(rep);
	json_object_put(rep);
	text = slurp(victim);
	assert_string_equal(text, "not vgpud's\n");
	free(text);
	assert_int_equal(lstat(journal, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(lstat(tmp, &sb), -1);
	assert_int_equal(journal_num_vfs(), 2);
}

/* What stands at a state file's name and is not a regular file is refused naming it and
 * what it is, without waiting on it (a FIFO with a writer would read as empty, one without
 * would hold the open) and without following a link. */
static const struct kind_case {
	const char *name;
	const char *file;	/* under the state dir */
	const char *kind;	/* as the log names it */
} kind_cases[] = {
	{ "the journal a FIFO", "journal.json", "it is a FIFO, not a regular file" },
	{ "the journal a symbolic link", "journal.json",
	  "it is a symbolic link, not a regular file" },
	{ "the journal a directory", "journal.json", "it is a directory, not a regular file" },
	{ "a definition file a FIFO", "slices/" U1 ".json", "it is a FIFO, not a regular file" },
	{ "a definition file a symbolic link", "slices/" U1 ".json",
	  "it is a symbolic link, not a regular file" },
};

static void test_state_file_kind(void **state)
{
	const struct kind_case *c = *state;
	char path[256], real[300], want[400];
	struct pf_daemon *d;
	json_object *rep;
	int fd = -1, r;

	rep = run("{\"execute\":\"define-slice\",\"arguments\":{\"uuid\":\"" U1 "\","
		  "\"type\":\"vgpu-auto\"}}");
	assert_ok(rep);
	json_object_put(rep);
	rep = run("{\"execute\":\"set-vfs\",\"arguments\":{\"num_vfs\":1}}");
	assert_ok(rep);
	json_object_put(rep);
	snprintf(path, sizeof(path), "%s/state/%s", root, c->file);
	snprintf(real, sizeof(real), "%s/real.json", root);
	if (strstr(c->kind, "link")) {
		assert_int_equal(rename(path, real), 0);	/* a sound file, behind a link */
		assert_int_equal(symlink(real, path), 0);
	} else if (strstr(c->kind, "FIFO")) {
		assert_int_equal(unlink(path), 0);
		assert_int_equal(mkfifo(path, 0600), 0);
		/* Held open for writing: an open that follows it returns, and reads nothing. */
		fd = open(path, O_RDWR | O_NONBLOCK);
		assert_true(fd >= 0);
	} else {
		assert_int_equal(unlink(path), 0);
		assert_int_equal(mkdir(path, 0700), 0);
	}
	d = daemon_new();
	logbuf[0] = 0;
	cmn_log_set_sink(log_keep, NULL);
	r = pf_state_load(d);
	cmn_log_set_sink(NULL, NULL);
	if (fd >= 0)
		close(fd);
	assert_int_equal(r, -EBADMSG);
	assert_int_equal(d->nr_slices, 0);
	snprintf(want, sizeof(want), "%s: %s", path, c->kind);
	if (!strstr(logbuf, want))
		fail_msg("the log does not say \"%s\":\n%s", want, logbuf);
	daemon_free(d);
}

/* A slices/ directory the load makes is synced into the state directory (the first
 * directory fsync, made to fail here, fails the load); one already there is not. */
static void test_slices_dir_synced(void **state)
{
	char dir[256], slices[300];
	struct pf_daemon *d;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/fresh", root);
	snprintf(slices, sizeof(slices), "%s/slices", dir);
	assert_int_equal(mkdir(dir, 0750), 0);
	d = daemon_new();
	snprintf(d->cfg.state_dir, sizeof(d->cfg.state_dir), "%s", dir);
	pf_test_dir_fsync_err = -EIO;
	assert_int_equal(pf_state_load(d), -EIO);
	assert_int_equal(pf_test_dir_fsync_err, 0);	/* taken */
	assert_int_equal(access(slices, F_OK), 0);
	daemon_free(d);
	d = daemon_new();
	snprintf(d->cfg.state_dir, sizeof(d->cfg.state_dir), "%s", dir);
	pf_test_dir_fsync_err = -EIO;
	assert_int_equal(pf_state_load(d), 0);
	assert_int_equal(pf_test_dir_fsync_err, -EIO);	/* nothing made, nothing synced */
	pf_test_dir_fsync_err = 0;
	daemon_free(d);
}

/* ---- a refused state changes no VRAM object ------------------------------------------- */

#define O_VRAM		(64ull << 20)

/* Slice @uuid defined, and in memory running on VF @vf at @base (no device), its VRAM
 * object made in /dev/shm as a start makes it (@extra bytes longer: its guest grew it),
 * recorded for the journal. */
static void fake_object(const char *uuid, unsigned int vf, uint64_t base, off_t extra)
{
	uint64_t size = vf_bar_size(O_VRAM, dmn->cfg.dma_size);
	char req[256], name[96];
	struct pf_slice *s;
	json_object *rep;
	struct stat sb;
	int fd;

	snprintf(req, sizeof(req), "{\"execute\":\"define-slice\",\"arguments\":{\"uuid\":"
		 "\"%s\",\"type\":\"vgpu-auto\",\"owner_uid\":%u}}", uuid,
		 (unsigned int)getuid());
	rep = run(req);
	assert_ok(rep);
	json_object_put(rep);
	s = pf_slice_find(dmn, uuid);
	assert_non_null(s);
	pf_rm_limits_default(&s->prov);
	s->prov.vram = O_VRAM;
	s->prov.channels = 8;
	s->prov.doorbells = 8;
	s->prov.priority = PF_PRIO_NORMAL;
	s->vf = vf;
	s->base = base;
	dmn->vfs[vf] = s;
	pf_shm_name(dmn, vf, name, sizeof(name));
	shm_unlink(name);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size + extra), 0);
	assert_int_equal(fstat(fd, &sb), 0);
	close(fd);
	dmn->bar_ino[vf].dev = sb.st_dev;
	dmn->bar_ino[vf].ino = sb.st_ino;
}

/* The size of VF @vf's object. */
static off_t object_size(unsigned int vf)
{
	char name[96], path[128];

	pf_shm_name(dmn, vf, name, sizeof(name));
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	return file_size(path);
}

/* The second free descriptor number: a file limit one above it leaves two descriptors. */
static int second_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);	/* the lowest free one */

	assert_true(fd >= 0);
	close(fd);
	do
		fd++;
	while (fcntl(fd, F_GETFD) >= 0);
	return fd;
}

/* U1's object grown by its guest, then the state refused for a system error on U3's
 * object (EMFILE here: the file limit leaves two descriptors, which the objects of U1 and
 * U2 take; the load needs two at once before, the slices/ directory and a file in it): U1's
 * object is still as its guest left it. Vetting changes nothing; the cut-back comes once
 * the state is applied. */
static void test_refused_state_keeps_objects(void **state)
{
	off_t grown = (off_t)vf_bar_size(O_VRAM, dmn->cfg.dma_size) + (1 << 20);
	struct rlimit lim, low;
	struct pf_daemon *d;
	char name[96];
	int r;

	(void)state;
	fake_object(U1, 1, 256ull << 20, 1 << 20);
	fake_object(U2, 2, 512ull << 20, 0);
	fake_object(U3, 3, 768ull << 20, 0);
	dmn->num_vfs = 3;
	assert_int_equal(pf_state_save_journal(dmn), 0);
	for (unsigned int vf = 1; vf <= 3; vf++) {
		dmn->vfs[vf]->vf = 0;
		dmn->vfs[vf] = NULL;
	}
	d = daemon_new();
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &lim), 0);
	low = lim;
	low.rlim_cur = (rlim_t)second_free_fd() + 1;
	logbuf[0] = 0;
	cmn_log_set_sink(log_keep, NULL);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	r = pf_state_load(d);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
	cmn_log_set_sink(NULL, NULL);
	assert_int_equal(r, -EMFILE);
	pf_shm_name(dmn, 3, name, sizeof(name));
	if (!strstr(logbuf, name) || !strstr(logbuf, "refusing the state"))
		fail_msg("the log does not refuse the state for %s:\n%s", name, logbuf);
	assert_int_equal(d->nr_slices, 0);
	assert_int_equal(object_size(1), grown);
	daemon_free(d);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(sync_cases) + VGPU_ARRAY_SIZE(dupfile_cases) +
			    VGPU_ARRAY_SIZE(oldalloc_cases) + VGPU_ARRAY_SIZE(kind_cases) + 6];
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
	t[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
		test_journal_without_allocations, setup, teardown);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(oldalloc_cases); i++)
		t[n++] = (struct CMUnitTest){ oldalloc_cases[i].name, test_journal_old_allocations,
					      setup, teardown, (void *)&oldalloc_cases[i] };
	t[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_state_file_too_large,
								    setup, teardown);
	t[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_tmp_link_not_followed,
								    setup, teardown);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(kind_cases); i++)
		t[n++] = (struct CMUnitTest){ kind_cases[i].name, test_state_file_kind, setup,
					      teardown, (void *)&kind_cases[i] };
	t[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(test_slices_dir_synced,
								    setup, teardown);
	t[n++] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
		test_refused_state_keeps_objects, setup, teardown);
	return _cmocka_run_group_tests("pf_state_sync", t, n, NULL, NULL);
}
