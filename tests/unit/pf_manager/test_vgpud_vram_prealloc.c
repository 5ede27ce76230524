// SPDX-License-Identifier: MIT
/* [pf] vram_prealloc: a slice's BAR object is allocated in /dev/shm when it is made, so no
 * other holder of /dev/shm (a tenant filling its own sparse object, any local user) can
 * take its pages away. A real vgpud each time: the object's allocated blocks cover its
 * VRAM, DMA memory and control area after a start, after a reset's scrub and on a live
 * migration's destination after a page went back to zero; a reset whose pages are gone
 * when it takes them again leaves the slice unreserved, saying so, until the next one; a
 * slice larger than the whole of /dev/shm is refused naming it, the bytes and the reason,
 * and nothing of the daemon's state changes, while the same start without the setting
 * succeeds (sparse) and a restart with it adopts that slice's object with its VRAM,
 * running unreserved, saying why. Bad values of the key are refused naming it.
 *
 * As root the program runs in a mount namespace of its own with a 1 GiB tmpfs on
 * /dev/shm, which its daemons share: a test fills it without touching the host's. */
#include <dirent.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>

#include "pf_mig_test.h"
#include "ctlclient/ctlclient.h"

#define U1	"fa110c00-1111-4111-8111-111111111111"
#define U2	"fa110c00-2222-4222-8222-222222222222"

#define MiB		(1ull << 20)
#define SLICE		(512 * MiB)
/* What a reserved vgpu-512M slice holds in /dev/shm: VRAM, DMA memory, control area. */
#define RESERVED	(SLICE + VF_BAR_DMA_DEFAULT + VF_BAR_CTRL_SIZE)
#define FAR_OFF		(300 * MiB)	/* a VRAM page written, then zeroed */

static bool own_shm;		/* /dev/shm is this program's tmpfs */

static char *args_plain[] = { "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			      "--spare-vram", "256M", NULL };

/* @base's arguments (up to 20) into @argv, and a configuration file in @d's root at @conf
 * (@clen bytes) that sets vram_prealloc, as a daemon of the shipped unit reads it. */
static char **with_prealloc(struct tdaemon *d, char *const *base, char **argv, char *conf,
			    size_t clen)
{
	FILE *f;
	int n;

	for (n = 0; base[n] && n < 20; n++)
		argv[n] = base[n];
	snprintf(conf, clen, "%s/prealloc.conf", d->root);
	f = fopen(conf, "w");
	assert_non_null(f);
	fputs("[pf]\nvram_prealloc = yes\n", f);
	fclose(f);
	argv[n++] = "--config";
	argv[n++] = conf;
	argv[n] = NULL;
	return argv;
}

/* Bytes the file system holds for VF @vf's BAR object of @d (its allocated blocks). */
static uint64_t obj_allocated(struct tdaemon *d, unsigned int vf)
{
	int fd = t_bar_open(d, vf);
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	close(fd);
	return (uint64_t)sb.st_blocks * 512;
}

/* The size of VF @vf's BAR object of @d. */
static uint64_t obj_size(struct tdaemon *d, unsigned int vf)
{
	int fd = t_bar_open(d, vf);
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	close(fd);
	return (uint64_t)sb.st_size;
}

/* query-slices' entry of @uuid on @d (the caller puts it). */
static json_object *slice_of(struct tdaemon *d, const char *uuid)
{
	struct tclient *c = t_client(d, true);
	json_object *rep = t_exec(c, "query-slices", t_args("uuid", uuid)), *arr, *s;

	assert_true(json_object_object_get_ex(t_ret(rep), "slices", &arr));
	s = json_object_get(json_object_array_get_idx(arr, 0));
	assert_non_null(s);
	json_object_put(rep);
	t_client_free(c);
	return s;
}

static bool jbool(json_object *o, const char *key)
{
	json_object *v;

	assert_true(json_object_object_get_ex(o, key, &v));
	assert_true(json_object_is_type(v, json_type_boolean));
	return json_object_get_boolean(v);
}

static const char *jstr(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* Whether slice @uuid on @d runs with its VRAM reserved. */
static bool reserved(struct tdaemon *d, const char *uuid)
{
	json_object *s = slice_of(d, uuid);
	bool r = jbool(s, "vram_reserved");

	json_object_put(s);
	return r;
}

/* query-status of @d: whether vram_prealloc is set, and the reserved bytes in @bytes. */
static bool status_prealloc(struct tdaemon *d, uint64_t *bytes)
{
	struct tclient *c = t_client(d, true);
	json_object *rep = t_exec(c, "query-status", NULL);
	bool on = jbool(t_ret(rep), "vram_prealloc");

	*bytes = t_get_u64(t_ret(rep), "shm_reserved_bytes");
	json_object_put(rep);
	t_client_free(c);
	return on;
}

/* Whether [@off, +@len) of @fd reads as zeros. */
static bool zeros(int fd, uint64_t off, size_t len)
{
	uint8_t *buf = malloc(len);
	bool z = true;

	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, len, (off_t)off), (ssize_t)len);
	for (size_t i = 0; i < len && z; i++)
		z = !buf[i];
	free(buf);
	return z;
}

/* Reset slice @uuid of @d; the reset ran. */
static void reset(struct tdaemon *d, const char *uuid)
{
	struct tclient *c = t_client(d, true);
	json_object *rep = t_exec(c, "reset-vf", t_args("uuid", uuid));

	assert_non_null(t_ret(rep));
	json_object_put(rep);
	t_client_free(c);
}

/* (1) A started slice's object holds its VRAM, DMA memory and control area (the hole of
 * its power-of-two BAR stays sparse), and still does once a reset has scrubbed its VRAM,
 * which reads as zeros; a stop gives it all back. */
static void test_reserved_start_reset(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char *argv[24], conf[200];
	uint64_t bytes;
	int fd;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, with_prealloc(d, args_plain, argv, conf,
							      sizeof(conf))), 0);
	t_define_start(d, "vgpu-512M", U1);
	assert_true(status_prealloc(d, &bytes));
	assert_true(bytes == RESERVED);
	assert_true(reserved(d, U1));
	assert_true(obj_allocated(d, 1) >= RESERVED);
	assert_true(obj_allocated(d, 1) < obj_size(d, 1));

	fd = t_bar_open(d, 1);
	t_put(fd, 1 * MiB, 64 << 10, 5);
	assert_false(zeros(fd, 1 * MiB, 64 << 10));
	reset(d, U1);
	assert_true(zeros(fd, 1 * MiB, 64 << 10));	/* scrubbed */
	close(fd);
	assert_true(obj_allocated(d, 1) >= RESERVED);	/* and still reserved */
	assert_true(reserved(d, U1));

	assert_int_equal(T_CTL(d, "stop", "-u", U1), 0);
	assert_false(reserved(d, U1));
	assert_true(status_prealloc(d, &bytes));
	assert_true(bytes == 0);
	t_daemon_free(d);
}

/* Without the setting (the default) the object is sparse: only what was touched. */
static void test_default_sparse(void **state)
{
	struct tdaemon *d = t_daemon_new();
	uint64_t bytes;

	(void)state;
	assert_int_equal(t_daemon_start_argv(d, args_plain), 0);
	t_define_start(d, "vgpu-512M", U1);
	assert_false(status_prealloc(d, &bytes));
	assert_true(bytes == 0);
	assert_false(reserved(d, U1));
	assert_true(obj_allocated(d, 1) < SLICE);
	t_daemon_free(d);
}

/* A reset whose scrub gave the pages back while /dev/shm filled up (here its guest had
 * given up its own pages first, and a file took all but what the state files need, which
 * live there too): the reset runs, the slice runs on unreserved, said in the log and its
 * JSON; the next reset with room takes it all again. The file is in the daemon's root,
 * which the teardown removes. */
static void test_reset_cannot_rereserve(void **state)
{
	struct tdaemon *d = t_daemon_new();
	char *argv[24], conf[200], log[200], filler[200];
	struct statvfs sv;
	json_object *s;
	uint64_t bytes;
	int fd, ff, r;

	(void)state;
	if (!own_shm) {
		fprintf(stderr, "# needs a /dev/shm of its own to fill (root): skipped\n");
		skip();
	}
	assert_int_equal(t_daemon_start_logged(d, with_prealloc(d, args_plain, argv, conf,
								 sizeof(conf)), log, sizeof(log)), 0);
	t_define_start(d, "vgpu-512M", U1);
	fd = t_bar_open(d, 1);
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
				   (off_t)SLICE), 0);
	close(fd);
	snprintf(filler, sizeof(filler), "%s/filler", d->root);
	ff = open(filler, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(ff >= 0);
	assert_int_equal(statvfs("/dev/shm", &sv), 0);
	assert_true(sv.f_bavail * sv.f_frsize > SLICE);
	r = fallocate(ff, 0, 0, (off_t)(sv.f_bavail * sv.f_frsize - 16 * MiB));
	close(ff);
	assert_int_equal(r, 0);

	reset(d, U1);
	s = slice_of(d, U1);
	assert_false(jbool(s, "vram_reserved"));
	if (!strstr(jstr(s, "vram_reserve_error"), "No space left on device"))
		fail_msg("vram_reserve_error is \"%s\"", jstr(s, "vram_reserve_error"));
	json_object_put(s);
	assert_true(status_prealloc(d, &bytes));
	assert_true(bytes == 0);
	assert_true(t_log_has(log, "runs unreserved until its next reset or start"));

	assert_int_equal(unlink(filler), 0);
	reset(d, U1);
	s = slice_of(d, U1);
	assert_true(jbool(s, "vram_reserved"));
	assert_false(json_object_object_get_ex(s, "vram_reserve_error", NULL));
	json_object_put(s);
	assert_true(obj_allocated(d, 1) >= RESERVED);
	t_daemon_free(d);
}

/* The names of @d's objects in /dev/shm, sorted, in one string (the caller frees it). */
static char *shm_objects(struct tdaemon *d)
{
	struct dirent **ents;
	char prefix[64], *all = calloc(1, 1);
	int n;

	assert_non_null(all);
	t_shm_prefix(d, prefix, sizeof(prefix));
	n = scandir("/dev/shm", &ents, NULL, alphasort);
	assert_true(n >= 0);
	for (int i = 0; i < n; i++) {
		char *more;

		if (!strncmp(ents[i]->d_name, prefix, strlen(prefix))) {
			assert_true(asprintf(&more, "%s%s ", all, ents[i]->d_name) > 0);
			free(all);
			all = more;
		}
		free(ents[i]);
	}
	free(ents);
	return all;
}

/* The journal of @d, or "" if it has none (the caller frees it). */
static char *journal_of(struct tdaemon *d)
{
	char path[200], *buf = calloc(1, 1 << 20);
	FILE *f;

	assert_non_null(buf);
	snprintf(path, sizeof(path), "%s/journal.json", d->state);
	f = fopen(path, "r");
	if (f) {
		if (fread(buf, 1, (1 << 20) - 1, f) == 0)
			buf[0] = 0;
		fclose(f);
	}
	return buf;
}

/* Start @d with @args (stderr in @log) and check that it listens. */
static void start_with(struct tdaemon *d, char **args, char *log, size_t len)
{
	assert_int_equal(t_daemon_start_logged(d, args, log, len), 0);
}

/* (2) A slice larger than the whole of /dev/shm (tmpfs refuses such an fallocate() at once,
 * allocating nothing): with the setting its start is refused naming the slice, the bytes
 * and the reason, and the slice list, the status (free VRAM), the journal and the objects
 * in /dev/shm are as before. Without it the same start succeeds (sparse). A restart with
 * the setting then cannot reserve that running slice's object: it is adopted with its
 * VRAM and runs unreserved, the reason in the log and in its JSON; the other runs on,
 * reserved. */
static void test_larger_than_shm(void **state)
{
	struct tdaemon *d;
	struct statfs sf;
	struct tclient *c;
	json_object *rep, *err, *s;
	char vram[32], big_s[32], big_fmt[32], log[200], want[160], conf[200];
	char *snap, *journal, *objs, *snap2, *journal2, *objs2;
	char *pre[24], *plain[16];
	uint64_t shm, big, dev, bytes;
	const char *desc;
	int n, fd;

	(void)state;
	assert_int_equal(statfs("/dev/shm", &sf), 0);
	if (sf.f_type != TMPFS_MAGIC || !sf.f_blocks) {
		fprintf(stderr, "# /dev/shm is not a tmpfs with a size: skipped\n");
		skip();
	}
	shm = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
	big = (shm + 4 * MiB) & ~(2 * MiB - 1);		/* 2 MiB aligned, above the whole */
	dev = big + SLICE + 256 * MiB + 256 * MiB;	/* U1, U2, the PF spare, slack */
	if (dev > (1ull << 40)) {
		fprintf(stderr, "# /dev/shm is larger than a vgpud's VRAM can be: skipped\n");
		skip();
	}
	snprintf(vram, sizeof(vram), "%lluM", (unsigned long long)(dev >> 20));
	snprintf(big_s, sizeof(big_s), "%lluM", (unsigned long long)(big >> 20));
	ctlc_size_format(big, big_fmt, sizeof(big_fmt));
	for (n = 0; args_plain[n]; n++)
		plain[n] = args_plain[n];
	plain[1] = vram;			/* --vram */
	plain[n] = NULL;

	d = t_daemon_new();
	with_prealloc(d, plain, pre, conf, sizeof(conf));
	start_with(d, pre, log, sizeof(log));
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-auto", "-u", U1, "--vram", big_s), 0);
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-auto", "-u", U2, "--vram", "512M"), 0);
	assert_int_equal(T_CTL(d, "start", "-u", U2), 0);	/* VF 1, a journal to keep */
	c = t_client(d, true);
	snap = t_snapshot(c);
	journal = journal_of(d);
	objs = shm_objects(d);
	assert_non_null(strstr(journal, U2));

	rep = t_exec(c, "start-slice", t_args("uuid", U1));
	assert_string_equal(t_err_class(rep), "InsufficientResources");
	assert_true(json_object_object_get_ex(rep, "error", &err));
	desc = jstr(err, "desc");
	snprintf(want, sizeof(want), "slice %s: cannot reserve %s of VRAM in /dev/shm (", U1,
		 big_fmt);
	if (!strstr(desc, want) || !strstr(desc, "No space left on device"))
		fail_msg("the error is \"%s\"", desc);
	json_object_put(rep);
	snap2 = t_snapshot(c);
	journal2 = journal_of(d);
	objs2 = shm_objects(d);
	assert_string_equal(snap2, snap);
	assert_string_equal(journal2, journal);
	assert_string_equal(objs2, objs);
	free(snap2);
	free(journal2);
	free(objs2);
	t_client_free(c);

	/* Without the setting: sparse, so it starts (VF 2). */
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	start_with(d, plain, log, sizeof(log));
	assert_int_equal(T_CTL(d, "start", "-u", U1), 0);
	assert_false(reserved(d, U1));
	assert_true(obj_allocated(d, 2) < big);

	/* With it again: U1's object cannot be reserved at adoption. It is adopted all the
	 * same, with the guest's VRAM (the marker), running unreserved and saying why. */
	fd = t_bar_open(d, 2);
	t_put(fd, 4096, 4096, 7);
	close(fd);
	assert_int_equal(t_daemon_stop(d, SIGTERM), 0);
	start_with(d, pre, log, sizeof(log));
	s = slice_of(d, U1);
	assert_string_equal(jstr(s, "state"), "running");
	assert_false(jbool(s, "vram_reserved"));
	if (!strstr(jstr(s, "vram_reserve_error"), "adopted at vgpud's start") ||
	    !strstr(jstr(s, "vram_reserve_error"), "No space left on device"))
		fail_msg("vram_reserve_error is \"%s\"", jstr(s, "vram_reserve_error"));
	json_object_put(s);
	assert_true(t_log_has(log, "runs unreserved until its next reset or start"));
	assert_false(t_log_has(log, "the slice comes back stopped"));
	assert_true(reserved(d, U2));
	assert_true(obj_allocated(d, 1) >= RESERVED);
	fd = t_bar_open(d, 2);
	assert_false(zeros(fd, 4096, 4096));
	close(fd);
	assert_true(status_prealloc(d, &bytes));
	assert_true(bytes == RESERVED);		/* U2's only */
	free(snap);
	free(journal);
	free(objs);
	t_daemon_free(d);
}

/* (3) Bad values of the key are refused naming it (exit 2, the line, the section and key,
 * what it takes); a good one in any spelling is taken. */
static const struct config_case {
	const char *name;
	const char *file;	/* INI text */
	int want;		/* 0: started, else the exit status */
	const char *msg;	/* in its stderr */
	bool on;		/* started: query-status' vram_prealloc */
} config_cases[] = {
	{ "config: maybe", "[pf]\nvram_prealloc = maybe\n", 2,
	  "line 2: [pf] vram_prealloc = maybe: bad value (true or false", false },
	{ "config: empty", "[pf]\nvram_prealloc =\n", 2,
	  "line 2: [pf] vram_prealloc = : bad value", false },
	{ "config: 2", "[pf]\nvram_prealloc = 2\n", 2,
	  "[pf] vram_prealloc = 2: bad value", false },
	{ "config: in [gpu]", "[gpu]\nvram_prealloc = true\n", 2,
	  "[gpu] vram_prealloc = true: unknown key", false },
	{ "config: TRUE", "[pf]\nvram_prealloc = TRUE\n", 0, NULL, true },
	{ "config: off", "[pf]\nvram_prealloc = off\n", 0, NULL, false },
	{ "config: none", "", 0, NULL, false },
};

static void test_config(void **state)
{
	const struct config_case *c = *state;
	struct tdaemon *d = t_daemon_new();
	char path[200], log[200];
	char *args[] = { "--config", path, NULL };
	uint64_t bytes;
	FILE *f;

	snprintf(path, sizeof(path), "%s/vgpud.conf", d->root);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(c->file, f);
	fclose(f);
	assert_int_equal(t_daemon_start_logged(d, args, log, sizeof(log)), c->want ?
			 1000 + c->want : 0);
	if (c->msg && !t_log_has(log, c->msg))
		fail_msg("%s: \"%s\" is not in vgpud's stderr", c->name, c->msg);
	if (!c->want)
		assert_int_equal(status_prealloc(d, &bytes), c->on);
	t_daemon_free(d);
}

/* (4) A live migration's destination writes a page that went back to zero instead of
 * punching it (a hole would give the page back to /dev/shm): B's reserved object still
 * holds all of it, the page reads as zeros and is data. */
static void test_migrate_zero_page(void **state)
{
	struct tdaemon *a = t_daemon_new(), *b = t_daemon_new();
	char sock[128], *argv[24], conf[200];
	struct tclient *ea, *eb;
	int fd;

	(void)state;
	assert_int_equal(t_daemon_start_argv(a, args_plain), 0);
	assert_int_equal(t_daemon_start_argv(b, with_prealloc(b, args_plain, argv, conf,
							      sizeof(conf))), 0);
	ea = t_client(a, true);
	eb = t_client(b, true);
	snprintf(sock, sizeof(sock), "%s/mig.sock", b->root);
	t_define_start(a, "vgpu-512M", U1);
	fd = t_bar_open(a, 1);
	t_put(fd, 0, 64 << 10, 1);
	t_put(fd, FAR_OFF, 4096, 2);
	t_mig_listen(b, sock, U1);
	t_mig_manual(a, ea, sock, U1);
	t_put(fd, FAR_OFF, 4096, 0);		/* zeroed during pre-copy */
	close(fd);
	t_mig_switchover(a, ea, eb, U1);

	assert_true(reserved(b, U1));
	assert_true(obj_allocated(b, 1) >= RESERVED);
	fd = t_bar_open(b, 1);
	assert_false(zeros(fd, 0, 64 << 10));
	assert_true(zeros(fd, FAR_OFF, 4096));
	assert_int_equal(lseek(fd, FAR_OFF, SEEK_DATA), (off_t)FAR_OFF);
	close(fd);
	t_client_free(ea);
	t_client_free(eb);
	t_daemon_free(a);
	t_daemon_free(b);
}

#define CASE(fn, arr, i) { arr[i].name, fn, NULL, t_teardown, (void *)&arr[i] }

/* This program's own /dev/shm (a 1 GiB tmpfs in a mount namespace of its own, not seen
 * outside it), if it may make one; else the host's. */
static void shm_private(void)
{
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("vgpu-test-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
		  "size=1g,mode=1777")) {
		fprintf(stderr, "# no /dev/shm of its own (%s): the host's is used\n",
			strerror(errno));
		return;
	}
	own_shm = true;
}

int main(void)
{
	struct CMUnitTest t[16];
	size_t n = 0;

	shm_private();

	t[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_reserved_start_reset,
							       t_teardown);
	t[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_default_sparse, t_teardown);
	t[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_reset_cannot_rereserve,
							       t_teardown);
	t[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_larger_than_shm, t_teardown);
	for (size_t i = 0; i < sizeof(config_cases) / sizeof(config_cases[0]); i++)
		t[n++] = (struct CMUnitTest)CASE(test_config, config_cases, i);
	t[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_migrate_zero_page, t_teardown);
	return _cmocka_run_group_tests("vgpud_vram_prealloc", t, n, NULL, NULL);
}
