/* SPDX-License-Identifier: MIT */
/* Helpers for the vgpud integration tests: a real daemon in a temporary runtime/state dir
 * (killed and removed even when a test fails) or a pair of them, its VFs' BAR objects,
 * vgpuctl runs with captured output, a raw control-socket client, and an ivshmem-protocol
 * endpoint client that plays the guest. pf_mig_test.h adds what the migration tests share. */
#ifndef VGPU_TEST_PF_TEST_H
#define VGPU_TEST_PF_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "common/ring.h"
#include <vgpu/vf_bar.h>

#define T_MAX_ARGS	48
#define T_OUT_MAX	(1u << 20)

struct tdaemon {
	pid_t pid;
	char root[64];			/* mkdtemp */
	char run[128], state[128], sock[160];
	char *const *wrap;		/* command to run vgpud under (valgrind ...), or NULL */
	const char *prog;		/* the program in bin/: "vgpud" (NULL) or "vgpud-test" */
};

static char t_bindir[PATH_MAX];

static __attribute__((unused)) const char *t_bin(const char *name)
{
	static char path[PATH_MAX + 64];

	if (!t_bindir[0]) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

		assert_true(n > 0);
		self[n] = 0;
		/* build/<variant>/tests/pf_manager/test_x -> build/<variant>/bin */
		snprintf(t_bindir, sizeof(t_bindir), "%s/../../bin", dirname(self));
	}
	snprintf(path, sizeof(path), "%s/%s", t_bindir, name);
	return path;
}

static __attribute__((unused)) void t_rm_rf(const char *path)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "# cannot remove %s\n", path);
}

/* The prefix of this instance's VRAM objects: vgpud names them "vgpud-<FNV-1a 64 of the
 * state dir's real path>-vf<N>" (see doc/pf_manager.md), so a test can find them even when
 * it has just corrupted the journal. */
static __attribute__((unused)) void t_shm_prefix(struct tdaemon *d, char *buf, size_t len)
{
	char real[PATH_MAX];
	uint64_t h = 0xcbf29ce484222325ull;

	if (!realpath(d->state, real))
		snprintf(real, sizeof(real), "%s", d->state);
	for (const char *p = real; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	snprintf(buf, len, "vgpud-%016llx-vf", (unsigned long long)h);
}

/* The path of @d's VRAM object of VF @vf (its BAR 2, as a guest maps it). */
static __attribute__((unused)) void t_bar_path(struct tdaemon *d, unsigned int vf, char *buf,
					       size_t len)
{
	char prefix[64];

	t_shm_prefix(d, prefix, sizeof(prefix));
	snprintf(buf, len, "/dev/shm/%s%u", prefix, vf);
}

/* @d's VRAM object of VF @vf, opened read/write. */
static __attribute__((unused)) int t_bar_open(struct tdaemon *d, unsigned int vf)
{
	char path[128];
	int fd;

	t_bar_path(d, vf, path, sizeof(path));
	fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* Where the DMA memory starts in the BAR object @fd: its last part before the control area. */
static __attribute__((unused)) uint64_t t_bar_dma_off(int fd)
{
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	return (uint64_t)sb.st_size - VF_BAR_CTRL_SIZE - VF_BAR_DMA_DEFAULT;
}

/* @len bytes of the pattern numbered @seed (pages of one seed differ from each other). */
static __attribute__((unused)) void t_pattern(uint8_t *p, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)((i * 131 + seed) ^ (i >> 12));
}

/* Write @len bytes of pattern @seed (zeros for seed 0) at @off of @fd. */
static __attribute__((unused)) void t_put(int fd, uint64_t off, size_t len, unsigned int seed)
{
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	if (seed)
		t_pattern(buf, len, seed);
	else
		memset(buf, 0, len);
	assert_int_equal(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
	free(buf);
}

static __attribute__((unused)) void t_shm_cleanup(struct tdaemon *d)
{
	char cmd[128], prefix[64];

	t_shm_prefix(d, prefix, sizeof(prefix));
	snprintf(cmd, sizeof(cmd), "rm -f /dev/shm/%s*", prefix);
	if (system(cmd) != 0)
		fprintf(stderr, "# shm cleanup failed\n");
}

static __attribute__((unused)) int t_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Start vgpud with the common flags plus @extra (NULL-terminated); wait until it listens.
 * Returns 0, or the daemon's exit status + 1000 if it exited instead. */
static __attribute__((unused)) int t_daemon_start_argv(struct tdaemon *d, char *const *extra)
{
	char *argv[T_MAX_ARGS];
	int n = 0, st;

	for (int i = 0; d->wrap && d->wrap[i]; i++)
		argv[n++] = d->wrap[i];
	argv[n++] = (char *)t_bin(d->prog ? d->prog : "vgpud");
	argv[n++] = "--runtime-dir";
	argv[n++] = d->run;
	argv[n++] = "--state-dir";
	argv[n++] = d->state;
	argv[n++] = "--log-level";
	argv[n++] = "warn";
	for (int i = 0; extra && extra[i] && n < T_MAX_ARGS - 1; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	d->pid = fork();
	assert_true(d->pid >= 0);
	if (!d->pid) {
		/* A test that dies (sanitizer abort, timeout) takes its daemon with it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execvp(argv[0], argv);
		_exit(127);
	}
	/* However long a sanitizer, valgrind or a loaded host makes the start: one that never
	 * listens hangs the test until the suite's timeout, which fails it. */
	for (;;) {
		int fd = t_connect(d->sock);

		if (fd >= 0) {
			close(fd);
			return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return 1000 + (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		}
		usleep(10000);
	}
}

static __attribute__((unused)) int t_daemon_start(struct tdaemon *d, ...)
{
	char *extra[T_MAX_ARGS];
	va_list ap;
	int n = 0;

	va_start(ap, d);
	for (char *a = va_arg(ap, char *); a && n < T_MAX_ARGS - 1; a = va_arg(ap, char *))
		extra[n++] = a;
	va_end(ap);
	extra[n] = NULL;
	return t_daemon_start_argv(d, extra);
}

/* Stop with @sig and reap; returns the exit status (128 + signal if killed). */
static __attribute__((unused)) int t_daemon_stop(struct tdaemon *d, int sig)
{
	int st = 0;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	/* The socket of a killed daemon stays behind; a restart replaces it. */
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Every live daemon, so a failed assertion (which longjmps out of the test) still gets
 * its daemon killed and its directories removed by t_teardown(). */
static struct tdaemon *t_live[8];

static __attribute__((unused)) struct tdaemon *t_daemon_new(void)
{
	struct tdaemon *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	for (unsigned int i = 0; i < 8; i++) {
		if (!t_live[i]) {
			t_live[i] = d;
			break;
		}
	}
	/* On tmpfs: vgpud fsyncs its journal before it answers, as it must, and on a loaded
	 * machine's disk one fsync can outlast a client's reply timeout (30 s seen); /dev/shm,
	 * where vgpud keeps its VRAM objects anyway, makes that wait no disk's. */
	snprintf(d->root, sizeof(d->root), "/dev/shm/vgpud-test-XXXXXX");
	assert_non_null(mkdtemp(d->root));
	chmod(d->root, 0755);	/* a test drops to nobody, who must reach the socket */
	snprintf(d->run, sizeof(d->run), "%s/run", d->root);
	snprintf(d->state, sizeof(d->state), "%s/state", d->root);
	snprintf(d->sock, sizeof(d->sock), "%s/control.sock", d->run);
	return d;
}

static __attribute__((unused)) void t_daemon_free(struct tdaemon *d)
{
	if (!d)
		return;
	for (unsigned int i = 0; i < 8; i++)
		if (t_live[i] == d)
			t_live[i] = NULL;
	if (d->pid > 0)
		t_daemon_stop(d, SIGKILL);
	t_shm_cleanup(d);
	t_rm_rf(d->root);
	free(d);
}

/* cmocka teardown: free whatever daemons the test left. */
static __attribute__((unused)) int t_teardown(void **state)
{
	(void)state;
	for (unsigned int i = 0; i < 8; i++)
		t_daemon_free(t_live[i]);
	return 0;
}

/* ---- vgpuctl ---------------------------------------------------------------------------- */

struct tout {
	char out[T_OUT_MAX];
	char err[65536];
	int rc;
};

static __attribute__((unused)) void t_read_all(int fd, char *buf, size_t max)
{
	size_t len = 0;
	ssize_t n;

	while ((n = read(fd, buf + len, max - 1 - len)) > 0 && len + (size_t)n < max - 1)
		len += (size_t)n;
	buf[len] = 0;
}

/* Run vgpuctl against @d with @argv (NULL-terminated) as @uid (0: as we are). */
static __attribute__((unused)) int t_ctl_argv(struct tdaemon *d, struct tout *o, uid_t uid, char *const *args)
{
	char *argv[T_MAX_ARGS];
	int po[2], pe[2], n = 0, st;
	pid_t pid;

	argv[n++] = (char *)t_bin("vgpuctl");
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	for (int i = 0; args[i] && n < T_MAX_ARGS - 1; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	assert_int_equal(pipe(po), 0);
	assert_int_equal(pipe(pe), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		if (uid && (setgroups(0, NULL) || setgid(65534) || setuid(uid)))
			_exit(99);
		execv(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	/* stderr is small; drain stdout first, then stderr. */
	t_read_all(po[0], o->out, sizeof(o->out));
	t_read_all(pe[0], o->err, sizeof(o->err));
	close(po[0]);
	close(pe[0]);
	waitpid(pid, &st, 0);
	o->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	/* Unreachable (6: no connection, or no reply in time) or killed: an assertion on the
	 * exit code alone would not say which, so the log gets vgpuctl's own words. */
	if (o->rc == 6 || o->rc >= 128) {
		fprintf(stderr, "# vgpuctl");
		for (int i = 3; argv[i]; i++)
			fprintf(stderr, " %s", argv[i]);
		fprintf(stderr, ": exit %d: %s\n", o->rc, o->err);
	}
	return o->rc;
}

static __attribute__((unused)) struct tout t_out;	/* last vgpuctl output (large: static) */

#define T_CTL(d, ...) t_ctl_argv((d), &t_out, 0, (char *const[]){ __VA_ARGS__, NULL })
#define T_CTL_AS(d, uid, ...) t_ctl_argv((d), &t_out, (uid), (char *const[]){ __VA_ARGS__, NULL })

/* Two daemons started with @args, two VFs each (the tests that move a slice between
 * them); one with a @wrap_a / @wrap_b (env settings) runs the test build, vgpud-test,
 * under it. 0, or -1 if either did not start. */
static __attribute__((unused)) int t_daemon_pair_wrap(char *const *args, char *const *wrap_a,
						      char *const *wrap_b, struct tdaemon **a,
						      struct tdaemon **b)
{
	*a = t_daemon_new();
	*b = t_daemon_new();
	if (wrap_a) {
		(*a)->prog = "vgpud-test";
		(*a)->wrap = wrap_a;
	}
	if (wrap_b) {
		(*b)->prog = "vgpud-test";
		(*b)->wrap = wrap_b;
	}
	if (t_daemon_start_argv(*a, args) || t_daemon_start_argv(*b, args))
		return -1;
	return T_CTL(*a, "set-vfs", "2") || T_CTL(*b, "set-vfs", "2") ? -1 : 0;
}

/* The same, both daemons vgpud itself. */
static __attribute__((unused)) int t_daemon_pair(char *const *args, struct tdaemon **a,
						 struct tdaemon **b)
{
	return t_daemon_pair_wrap(args, NULL, NULL, a, b);
}

/* Define slice @uuid of @type on @d and start it. */
static __attribute__((unused)) void t_define_start(struct tdaemon *d, const char *type,
						   const char *uuid)
{
	assert_int_equal(T_CTL(d, "define", "-t", (char *)type, "-u", (char *)uuid), 0);
	assert_int_equal(T_CTL(d, "start", "-u", (char *)uuid), 0);
}

/* Start @d with @args and its stderr appended to <root>/log, whose path goes to @log:
 * t_daemon_start_argv()'s result. */
static __attribute__((unused)) int t_daemon_start_logged(struct tdaemon *d, char *const *args,
							  char *log, size_t len)
{
	char sh[300];
	char *wrap[] = { "sh", "-c", sh, NULL };
	int r;

	snprintf(log, len, "%s/log", d->root);
	snprintf(sh, sizeof(sh), "exec \"$0\" \"$@\" 2>>%s", log);
	d->wrap = wrap;
	r = t_daemon_start_argv(d, args);
	d->wrap = NULL;
	return r;
}

/* Whether the file @log (its first 16 KiB) holds @what. */
static __attribute__((unused)) bool t_log_has(const char *log, const char *what)
{
	char buf[1 << 14] = "";
	FILE *f = fopen(log, "r");

	if (f) {
		if (fread(buf, 1, sizeof(buf) - 1, f) == 0)
			buf[0] = 0;
		fclose(f);
	}
	return strstr(buf, what) != NULL;
}

/* A vgpud with 2 GiB of VRAM and two VFs, running the vgpu-512M slices @u1 and, unless
 * NULL, @u2: a cmocka setup's (NULL if anything failed; t_teardown() frees it). */
static __attribute__((unused)) struct tdaemon *t_daemon_two_vfs(const char *u1, const char *u2)
{
	struct tdaemon *d = t_daemon_new();
	const char *u[2] = { u1, u2 };

	if (t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			   "--spare-vram", "256M", NULL))
		return NULL;
	for (unsigned int i = 0; i < 2 && u[i]; i++)
		if (T_CTL(d, "define", "-t", "vgpu-512M", "-u", (char *)u[i]) ||
		    T_CTL(d, "start", "-u", (char *)u[i]))
			return NULL;
	return d;
}

/* A cmocka setup's body: t_daemon_two_vfs(@u1, @u2) into *@d; 0, or -1 if it failed. */
static __attribute__((unused)) int t_setup_two_vfs(struct tdaemon **d, const char *u1,
						   const char *u2)
{
	*d = t_daemon_two_vfs(u1, u2);
	return *d ? 0 : -1;
}

/* Parse the last vgpuctl stdout as JSON (caller puts it). */
static __attribute__((unused)) json_object *t_out_json(void)
{
	json_object *o = json_tokener_parse(t_out.out);

	if (!o)
		fail_msg("vgpuctl printed no JSON: %s / %s", t_out.out, t_out.err);
	return o;
}

/* ---- raw control client ------------------------------------------------------------------- */

struct tclient {
	int fd;
	char buf[1 << 16];
	size_t len;
};

/* The next line from vgpud as JSON; NULL at EOF or when @timeout_ms passes first (-1: as
 * long as it takes; a line that never comes hangs the test until the suite's timeout). */
static __attribute__((unused)) json_object *t_read_json(struct tclient *c, int timeout_ms)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		ssize_t n;
		int r;

		if (nl) {
			json_object *o;

			*nl = 0;
			o = json_tokener_parse(c->buf);
			c->len -= (size_t)(nl + 1 - c->buf);
			memmove(c->buf, nl + 1, c->len);
			return o;
		}
		r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return NULL;
		n = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
		if (n <= 0)
			return NULL;
		c->len += (size_t)n;
	}
}

static __attribute__((unused)) void t_send_raw(struct tclient *c, const char *s, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(c->fd, s + off, len - off, MSG_NOSIGNAL);

		assert_true(n > 0);
		off += (size_t)n;
	}
}

/* The next reply, skipping events. */
static __attribute__((unused)) json_object *t_reply(struct tclient *c)
{
	for (;;) {
		json_object *o = t_read_json(c, -1), *ev;

		if (!o || !json_object_object_get_ex(o, "event", &ev))
			return o;
		json_object_put(o);
	}
}

/* The next MIGRATION event on @c whose status is @want (earlier ones skipped); its data. */
static __attribute__((unused)) json_object *t_wait_migration(struct tclient *c, const char *want)
{
	for (;;) {
		json_object *o = t_read_json(c, -1), *ev, *data, *st;

		if (!o)
			fail_msg("connection closed before a MIGRATION event with status %s", want);
		if (json_object_object_get_ex(o, "event", &ev) &&
		    !strcmp(json_object_get_string(ev), "MIGRATION") &&
		    json_object_object_get_ex(o, "data", &data) &&
		    json_object_object_get_ex(data, "status", &st)) {
			const char *s = json_object_get_string(st);

			if (!strcmp(s, want)) {
				json_object_get(data);
				json_object_put(o);
				return data;
			}
			if (!strcmp(s, "completed") || !strcmp(s, "failed") || !strcmp(s, "cancelled"))
				fail_msg("migration ended %s, not %s: %s", s, want,
					 json_object_to_json_string(data));
		}
		json_object_put(o);
	}
}

static __attribute__((unused)) json_object *t_exec(struct tclient *c, const char *cmd, json_object *args)
{
	json_object *req = json_object_new_object();
	const char *s;

	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", args);
	s = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	t_send_raw(c, s, strlen(s));
	t_send_raw(c, "\n", 1);
	json_object_put(req);
	return t_reply(c);
}

static __attribute__((unused)) struct tclient *t_client(struct tdaemon *d, bool negotiate)
{
	struct tclient *c = calloc(1, sizeof(*c));
	json_object *g, *r;

	assert_non_null(c);
	c->fd = t_connect(d->sock);
	assert_true(c->fd >= 0);
	g = t_read_json(c, -1);
	assert_non_null(g);
	assert_true(json_object_object_get_ex(g, "VGPUD", NULL));
	json_object_put(g);
	if (negotiate) {
		r = t_exec(c, "qmp_capabilities", NULL);
		assert_non_null(r);
		assert_true(json_object_object_get_ex(r, "return", NULL));
		json_object_put(r);
	}
	return c;
}

static __attribute__((unused)) void t_client_free(struct tclient *c)
{
	if (c) {
		close(c->fd);
		free(c);
	}
}

/* "return" member of @rep or NULL; "error"."class" as a string or "". */
static __attribute__((unused)) json_object *t_ret(json_object *rep)
{
	json_object *r = NULL;

	if (rep)
		json_object_object_get_ex(rep, "return", &r);
	return r;
}

static __attribute__((unused)) const char *t_err_class(json_object *rep)
{
	json_object *e, *c;

	if (!rep || !json_object_object_get_ex(rep, "error", &e) ||
	    !json_object_object_get_ex(e, "class", &c))
		return "";
	return json_object_get_string(c);
}

static __attribute__((unused)) json_object *t_args(const char *key, const char *val)
{
	json_object *a = json_object_new_object();

	json_object_object_add(a, key, json_object_new_string(val));
	return a;
}

static __attribute__((unused)) uint64_t t_get_u64(json_object *o, const char *key)
{
	json_object *v;

	assert_true(json_object_object_get_ex(o, key, &v));
	return json_object_get_uint64(v);
}

/* Status field @key as a number. */
static __attribute__((unused)) uint64_t t_status_u64(struct tclient *c, const char *key)
{
	json_object *rep = t_exec(c, "query-status", NULL);
	uint64_t v = t_get_u64(t_ret(rep), key);

	json_object_put(rep);
	return v;
}

/* A string snapshot of the slice list and status (to compare "changed nothing"). */
static __attribute__((unused)) char *t_snapshot(struct tclient *c)
{
	json_object *a = t_exec(c, "query-slices", NULL), *b = t_exec(c, "query-status", NULL);
	json_object *st = t_ret(b);
	char *s;

	json_object_object_del(st, "uptime_ms");
	assert_true(asprintf(&s, "%s|%s", json_object_to_json_string(t_ret(a)),
			     json_object_to_json_string(st)) > 0);
	json_object_put(a);
	json_object_put(b);
	return s;
}

/* Counter @key of group @group ("rpc", "sched", ...) of VF @vf on @d (vgpuctl stats). */
static __attribute__((unused)) uint64_t t_vf_stat(struct tdaemon *d, unsigned int vf,
						  const char *group, const char *key)
{
	json_object *o, *vfs, *g;
	char arg[16];
	uint64_t n;

	snprintf(arg, sizeof(arg), "%u", vf);
	assert_int_equal(T_CTL(d, "--json", "stats", arg), 0);
	o = t_out_json();
	vfs = json_object_is_type(o, json_type_array) ? o : NULL;
	if (!vfs)
		json_object_object_get_ex(o, "vfs", &vfs);
	assert_non_null(vfs);
	assert_true(json_object_object_get_ex(json_object_array_get_idx(vfs, 0), group, &g));
	n = t_get_u64(g, key);
	json_object_put(o);
	return n;
}

/* The RM objects VF @vf on @d holds (vgpuctl stats). */
static __attribute__((unused)) uint64_t t_rm_objects(struct tdaemon *d, unsigned int vf)
{
	return t_vf_stat(d, vf, "rpc", "rm_objects");
}

/* Whether slice @uuid on @d has a guest attached ("attached" in vgpuctl's JSON list). */
static __attribute__((unused)) bool t_slice_attached(struct tdaemon *d, const char *uuid)
{
	json_object *all, *arr, *v;
	bool att;

	assert_int_equal(T_CTL(d, "--json", "list", "-u", (char *)uuid), 0);
	all = t_out_json();
	arr = all;
	if (!json_object_is_type(all, json_type_array))
		assert_true(json_object_object_get_ex(all, "slices", &arr));
	assert_int_equal(json_object_array_length(arr), 1);
	assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "attached", &v));
	att = json_object_get_boolean(v);
	json_object_put(all);
	return att;
}

/* Wait until vgpud reports slice @uuid attached (@want) or not: it sees a guest go on its
 * loop's next poll, a moment after the close. As long as it takes: a state that never
 * comes hangs the test until the suite's timeout, which fails it. */
static __attribute__((unused)) void t_wait_attached(struct tdaemon *d, const char *uuid,
						    bool want)
{
	while (t_slice_attached(d, uuid) != want)
		usleep(1000);
}

/* ---- endpoint client (the guest) ------------------------------------------------------------ */

struct tguest {
	int sock;
	int64_t id;
	int bar_fd;
	int to_host[VF_NR_VECTORS];
	int to_guest[VF_NR_VECTORS];
	uint64_t bar_size;
	uint8_t *bar;			/* the whole BAR2 */
	struct vf_bar_header *hdr;
	struct cmn_ring req, rsp, evt;
	uint32_t seq;
};

/* One protocol message: 8-byte value and an optional fd. 0, or -1 on EOF/error. Waits
 * as long as it takes: vgpud either sends or closes the connection, so -1 always means
 * the socket said so, never that a loaded host was slow. */
static __attribute__((unused)) int t_recv_msg(int sock, int64_t *val, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = val, .iov_len = sizeof(*val) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int r;

	*fd = -1;
	do
		r = poll(&p, 1, -1);
	while (r < 0 && errno == EINTR);
	if (r != 1 || recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != sizeof(*val))
		return -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
	return 0;
}

/* Attach to @path as a guest, or with @master as the VMM of a guest in a VM (peer 0, vgpud
 * VF_EP_HOST_PEER; the BAR only mapped, its header may still be a resuming slice's). 0 with
 * @g filled, -1 if refused (VF_EP_REFUSED or the socket closed before the greeting), or
 * fails the test on a protocol violation. */
static __attribute__((unused)) int t_guest_attach_as(const char *path, struct tguest *g,
						     bool master)
{
	int64_t host_peer = master ? VF_EP_HOST_PEER : 0;
	struct stat sb;
	int64_t v;
	int fd;

	memset(g, 0, sizeof(*g));
	g->sock = t_connect(path);
	if (g->sock < 0)
		return -1;
	if (t_recv_msg(g->sock, &v, &fd) || v == VF_EP_REFUSED) {
		close(g->sock);
		return -1;
	}
	assert_int_equal(v, VF_EP_PROTO_VERSION);
	assert_int_equal(fd, -1);
	assert_int_equal(t_recv_msg(g->sock, &g->id, &fd), 0);
	assert_int_equal(fd, -1);
	if (master)
		assert_int_equal(g->id, 0);
	assert_int_equal(t_recv_msg(g->sock, &v, &g->bar_fd), 0);
	assert_int_equal(v, -1);
	assert_true(g->bar_fd >= 0);
	for (int i = 0; i < VF_NR_VECTORS; i++) {	/* vgpud's vectors */
		assert_int_equal(t_recv_msg(g->sock, &v, &g->to_host[i]), 0);
		assert_int_equal(v, host_peer);
		assert_true(g->to_host[i] >= 0);
	}
	for (int i = 0; i < VF_NR_VECTORS; i++) {	/* our own vectors */
		assert_int_equal(t_recv_msg(g->sock, &v, &g->to_guest[i]), 0);
		assert_int_equal(v, g->id);
		assert_true(g->to_guest[i] >= 0);
	}
	assert_int_equal(fstat(g->bar_fd, &sb), 0);
	g->bar_size = (uint64_t)sb.st_size;
	assert_true(g->bar_size && !(g->bar_size & (g->bar_size - 1)));
	g->bar = mmap(NULL, g->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		      g->bar_fd, 0);
	assert_true(g->bar != MAP_FAILED);
	g->hdr = (struct vf_bar_header *)(g->bar + vf_bar_header_off(g->bar_size));
	if (master)
		return 0;
	assert_true(g->hdr->magic == VF_BAR_MAGIC);
	assert_true(vgpu_abi_compatible(g->hdr->abi_version));
	assert_int_equal(g->hdr->vf_id, (uint32_t)g->id);
	assert_int_equal(g->hdr->state, VF_STATE_READY);
	assert_int_equal(cmn_ring_attach(&g->req, g->bar + g->hdr->req_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->rsp, g->bar + g->hdr->rsp_off, g->hdr->ring_region_size), 0);
	assert_int_equal(cmn_ring_attach(&g->evt, g->bar + g->hdr->evt_off, g->hdr->ring_region_size), 0);
	return 0;
}

/* Attach to @path as a guest (t_guest_attach_as). */
static __attribute__((unused)) int t_guest_attach(const char *path, struct tguest *g)
{
	return t_guest_attach_as(path, g, false);
}

static __attribute__((unused)) void t_guest_detach(struct tguest *g)
{
	if (g->bar)
		munmap(g->bar, g->bar_size);
	for (int i = 0; i < VF_NR_VECTORS; i++) {
		close(g->to_host[i]);
		close(g->to_guest[i]);
	}
	close(g->bar_fd);
	close(g->sock);
	memset(g, 0, sizeof(*g));
}

/* Wait for an interrupt on @vec, as long as it takes (one that never comes hangs the test
 * until the suite's timeout). 0, or -1 if the eventfd cannot be read. */
static __attribute__((unused)) int t_guest_wait(struct tguest *g, unsigned int vec)
{
	struct pollfd p = { .fd = g->to_guest[vec], .events = POLLIN };
	uint64_t cnt;
	int r;

	/* vgpud may have made the eventfd non-blocking: poll, then read what is there. */
	do
		r = poll(&p, 1, -1);
	while (r < 0 && errno == EINTR);
	if (r != 1)
		return -1;
	return read(g->to_guest[vec], &cnt, sizeof(cnt)) == sizeof(cnt) ? 0 : -1;
}

/* Push one mailbox request and ring the doorbell, without waiting for the reply. */
static __attribute__((unused)) void t_guest_post(struct tguest *g, uint32_t type,
						 const void *payload, uint32_t len)
{
	uint8_t slot[VF_MBOX_SLOT_SIZE];
	struct vf_msg *m = (struct vf_msg *)slot;
	uint64_t one = 1;

	memset(slot, 0, sizeof(slot));
	m->type = type;
	m->seq = ++g->seq;
	m->length = len;
	if (payload && len <= VF_MSG_MAX_PAYLOAD)
		memcpy(m + 1, payload, len);
	assert_int_equal(cmn_ring_push(&g->req, slot, sizeof(slot)), 0);
	assert_int_equal(write(g->to_host[VF_VEC_MBOX], &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* One mailbox call: push, ring, wait for the reply; returns the reply's status and copies
 * up to @out_len payload bytes to @out. */
static __attribute__((unused)) int t_guest_call(struct tguest *g, uint32_t type, const void *payload, uint32_t len,
			void *out, uint32_t out_len, uint32_t *got)
{
	uint8_t slot[VF_MBOX_SLOT_SIZE];
	struct vf_msg *m = (struct vf_msg *)slot;

	t_guest_post(g, type, payload, len);
	assert_int_equal(t_guest_wait(g, VF_VEC_MBOX), 0);
	assert_int_equal(cmn_ring_pop(&g->rsp, slot), 0);
	assert_int_equal(m->seq, g->seq);
	assert_int_equal(m->type, type);
	if (out)
		memcpy(out, m + 1, m->length < out_len ? m->length : out_len);
	if (got)
		*got = m->length;
	return m->status;
}

#endif
