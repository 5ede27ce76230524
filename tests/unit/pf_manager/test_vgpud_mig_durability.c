// SPDX-License-Identifier: MIT
/* What a crash leaves of a migration or a refused load, against real vgpuds: a destination
 * killed during pre-copy after another slice's journal write comes back without the
 * incoming slice (the source still owns it); a load refused because an endpoint cannot open
 * leaves the adopted VRAM object as it was; a transient slice handed over by a source that
 * died, whose restart then crashed at any durability point, loads (held, migrated out). */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"

#define U1	"11111111-1111-4111-8111-111111111111"
#define U2	"22222222-2222-4222-8222-222222222222"
#define PARENT	"0000:00:00.0"		/* vgpud's default parent */
#define TYPE	"vgpu-256M"

#define EXIT_NOTFOUND	3
#define CRASH_EXIT	86		/* vgpud-test at a VGPU_CRASH_AT point (PF_CRASH_EXIT) */

#define MARK		"GUESTDATA-GUESTDATA"
#define MARK_OFF	4096

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };

static int teardown(void **state)
{
	return t_teardown(state);
}

/* @d started (0) and two VFs enabled. */
static void start_vfs(struct tdaemon *d)
{
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_int_equal(T_CTL(d, "set-vfs", "2"), 0);
}

/* The next MIGRATION event on @c whose status is @want; other statuses skipped. */
static void wait_status(struct tclient *c, const char *want)
{
	for (;;) {
		json_object *o = t_read_json(c, -1), *ev, *data, *st;
		bool hit;

		if (!o)
			fail_msg("connection closed before a MIGRATION event with status %s", want);
		hit = json_object_object_get_ex(o, "event", &ev) &&
		      !strcmp(json_object_get_string(ev), "MIGRATION") &&
		      json_object_object_get_ex(o, "data", &data) &&
		      json_object_object_get_ex(data, "status", &st) &&
		      !strcmp(json_object_get_string(st), want);
		json_object_put(o);
		if (hit)
			return;
	}
}

/* A sends U1 (transient or defined) to B with a manual switchover; while pre-copy waits,
 * B starts U2, a journal write of its own. B killed and started again must come back
 * with U2 and without U1: U1 was never committed there, and A still owns it. */
static void incoming_not_journaled(bool transient)
{
	struct tdaemon *a = t_daemon_new(), *b = t_daemon_new();
	struct tclient *ea;
	char sock[128];

	start_vfs(a);
	start_vfs(b);
	ea = t_client(a, true);
	if (transient)
		assert_int_equal(T_CTL(a, "start", "-p", PARENT, "-t", TYPE, "-u", U1), 0);
	else
		t_define_start(a, TYPE, U1);
	snprintf(sock, sizeof(sock), "%s/mig.sock", b->root);
	assert_int_equal(T_CTL(b, "migrate-incoming", "--listen", sock, "-u", U1), 0);
	assert_int_equal(T_CTL(a, "migrate", "-u", U1, "--to", sock, "--switchover", "manual",
			       "--no-wait"), 0);
	wait_status(ea, "waiting");
	assert_int_equal(T_CTL(b, "start", "-p", PARENT, "-t", TYPE, "-u", U2), 0);

	assert_int_equal(t_daemon_stop(b, SIGKILL), 128 + SIGKILL);
	assert_int_equal(t_daemon_start_argv(b, daemon_args), 0);
	assert_int_equal(T_CTL(b, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(b, "list", "-u", U2), 0);
	assert_non_null(strstr(t_out.out, "running"));
	/* A's migration fails with B gone; U1 stays A's. */
	wait_status(ea, "failed");
	assert_int_equal(T_CTL(a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
	t_client_free(ea);
}

static void test_incoming_defined_not_journaled(void **state)
{
	(void)state;
	incoming_not_journaled(false);
}

static void test_incoming_transient_not_journaled(void **state)
{
	(void)state;
	incoming_not_journaled(true);
}

static void mark_read(struct tdaemon *d, char *buf)
{
	int fd = t_bar_open(d, 1);

	assert_int_equal(pread(fd, buf, sizeof(MARK) - 1, MARK_OFF), (ssize_t)sizeof(MARK) - 1);
	buf[sizeof(MARK) - 1] = 0;
	close(fd);
}

/* VF 1's endpoint cannot open on a restart (a directory holds its path): vgpud refuses
 * the state and exits, and U1's VRAM object keeps the guest's bytes; once the path is
 * free, the next start runs U1 with them. */
static void test_refused_load_keeps_vram(void **state)
{
	struct tdaemon *d = t_daemon_new();
	static char log[160], cmd[200];
	static char *wrap[] = { "sh", "-c", cmd, "sh", NULL };
	char path[192], got[sizeof(MARK)], *text;
	int fd;
	FILE *f;

	(void)state;
	start_vfs(d);
	t_define_start(d, TYPE, U1);
	fd = t_bar_open(d, 1);
	assert_int_equal(pwrite(fd, MARK, sizeof(MARK) - 1, MARK_OFF), (ssize_t)sizeof(MARK) - 1);
	close(fd);
	assert_int_equal(t_daemon_stop(d, SIGKILL), 128 + SIGKILL);

	snprintf(path, sizeof(path), "%s/vf1.sock", d->run);
	unlink(path);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(log, sizeof(log), "%s/log", d->root);
	snprintf(cmd, sizeof(cmd), "exec \"$@\" 2>>%s", log);
	d->wrap = wrap;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 1000 + 1);
	f = fopen(log, "r");
	assert_non_null(f);
	text = calloc(1, 1 << 16);
	assert_non_null(text);
	assert_true(fread(text, 1, (1 << 16) - 1, f) > 0);
	fclose(f);
	assert_non_null(strstr(text, "refusing the state (nothing was written)"));
	free(text);
	mark_read(d, got);
	assert_string_equal(got, MARK);

	assert_int_equal(rmdir(path), 0);
	d->wrap = NULL;
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
	mark_read(d, got);
	assert_string_equal(got, MARK);
}

/* A (vgpud-test) sends transient U1 to B and ends at the hand-over record. A's restart
 * crashes at durability point @n: 0 if it did, 1 if it started (past its last point).
 * Either way a plain restart then loads A's state with U1 held (its VF and VRAM kept),
 * migrated out. */
static int handed_over_crash_at(unsigned int n)
{
	static char *wrap_ho[] = { "env", "VGPU_MIG_SRC_EXIT_AT=handover", NULL };
	static char crash[32];
	static char *wrap_crash[] = { "env", crash, NULL };
	struct tdaemon *a = t_daemon_new(), *b = t_daemon_new();
	char sock[128];
	int r, ret;

	a->prog = "vgpud-test";
	a->wrap = wrap_ho;
	start_vfs(a);
	start_vfs(b);
	assert_int_equal(T_CTL(a, "start", "-p", PARENT, "-t", TYPE, "-u", U1), 0);
	snprintf(sock, sizeof(sock), "%s/mig.sock", b->root);
	assert_int_equal(T_CTL(b, "migrate-incoming", "--listen", sock, "-u", U1), 0);
	assert_int_equal(T_CTL(a, "migrate", "-u", U1, "--to", sock, "--no-wait"), 0);
	/* Signal 0: only the wait for A's own exit at the hand-over. */
	assert_int_not_equal(t_daemon_stop(a, 0), 128 + SIGKILL);

	snprintf(crash, sizeof(crash), "VGPU_CRASH_AT=%u", n);
	a->wrap = wrap_crash;
	r = t_daemon_start_argv(a, daemon_args);
	if (r) {
		assert_int_equal(r, 1000 + CRASH_EXIT);
		ret = 0;
	} else {
		/* A point after it listens (the stray objects' sweep) may end it first. */
		r = t_daemon_stop(a, SIGKILL);
		assert_true(r == 128 + SIGKILL || r == CRASH_EXIT);
		ret = r == 128 + SIGKILL;
	}
	a->prog = NULL;
	a->wrap = NULL;
	assert_int_equal(t_daemon_start_argv(a, daemon_args), 0);
	assert_int_equal(T_CTL(a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "migrated-out"));
	assert_int_equal(T_CTL(a, "--json", "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "\"held\": true"));
	t_daemon_free(a);
	t_daemon_free(b);
	return ret;
}

static void test_handed_over_restart_crash(void **state)
{
	(void)state;
	for (unsigned int n = 1; !handed_over_crash_at(n); n++)
		;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_incoming_defined_not_journaled, teardown),
		cmocka_unit_test_teardown(test_incoming_transient_not_journaled, teardown),
		cmocka_unit_test_teardown(test_refused_load_keeps_vram, teardown),
		cmocka_unit_test_teardown(test_handed_over_restart_crash, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
