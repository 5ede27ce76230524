// SPDX-License-Identifier: MIT
/* vgpud's control-socket fairness: idle connections of an unprivileged user cannot lock root
 * out (slots kept for root and the admin group, a per-uid cap), a refused connection gets a
 * QMP GenericError "too many clients" that vgpuctl reports as such, and a connection that
 * never negotiates is told so and closed. Counts and close events only; no timing. */
#include "pf_test.h"

#include "common/clock.h"

#define NOBODY		65534
#define T_TRIES		40	/* more connections than the table has */
#define T_FOREVER	"3600000"	/* negotiation timeout that no test reaches */

static int setup(void **state)
{
	(void)state;
	return 0;
}

/* The first line vgpud sends on a new connection: 1 greeting, 2 "too many clients", 0
 * anything else. */
static int first_line_kind(struct tclient *c)
{
	json_object *o = t_read_json(c, -1), *e, *desc;
	int kind = 0;

	if (o && json_object_object_get_ex(o, "VGPUD", NULL))
		kind = 1;
	else if (o && !strcmp(t_err_class(o), "GenericError") &&
		 json_object_object_get_ex(o, "error", &e) &&
		 json_object_object_get_ex(e, "desc", &desc) &&
		 strstr(json_object_get_string(desc), "too many clients"))
		kind = 2;
	json_object_put(o);
	return kind;
}

/* In a child that dropped to nobody: open T_TRIES connections and keep them idle, report
 * "greeted refused other" on @report, hold them until @hold is closed by the parent. */
static void nobody_hoard(struct tdaemon *d, int report, int hold)
{
	static struct tclient cl[T_TRIES];
	unsigned int n[3] = { 0, 0, 0 };
	char line[64], c;

	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
		_exit(99);
	for (unsigned int i = 0; i < T_TRIES; i++) {
		cl[i].fd = t_connect(d->sock);
		if (cl[i].fd < 0) {
			n[0]++;
			continue;
		}
		n[first_line_kind(&cl[i])]++;
	}
	snprintf(line, sizeof(line), "%u %u %u\n", n[1], n[2], n[0]);
	if (write(report, line, strlen(line)) < 0)
		_exit(98);
	while (read(hold, &c, 1) > 0)
		;
	_exit(0);
}

struct hoard {
	pid_t pid;
	int hold;
	unsigned int greeted, refused, other;
};

static void hoard_start(struct tdaemon *d, struct hoard *h)
{
	int rp[2], hp[2];
	char line[64] = "";

	assert_int_equal(pipe(rp), 0);
	assert_int_equal(pipe(hp), 0);
	h->pid = fork();
	assert_true(h->pid >= 0);
	if (!h->pid) {
		close(rp[0]);
		close(hp[1]);
		nobody_hoard(d, rp[1], hp[0]);
	}
	close(rp[1]);
	close(hp[0]);
	h->hold = hp[1];
	/* One line; the child keeps its end open while it holds the connections. */
	for (size_t n = 0; n + 1 < sizeof(line) && read(rp[0], line + n, 1) == 1 &&
	     line[n] != '\n'; n++)
		;
	close(rp[0]);
	assert_int_equal(sscanf(line, "%u %u %u", &h->greeted, &h->refused, &h->other), 3);
}

static void hoard_end(struct hoard *h)
{
	int st;

	close(h->hold);
	assert_int_equal(waitpid(h->pid, &st, 0), h->pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Root still gets in and is served, through vgpuctl and a raw negotiated connection. */
static void root_gets_in(struct tdaemon *d)
{
	struct tclient *cl;
	json_object *rep;

	assert_int_equal(T_CTL(d, "status"), 0);
	cl = t_client(d, true);
	rep = t_exec(cl, "query-status", NULL);
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	t_client_free(cl);
}

/* One user's idle connections stop at the per-uid cap; the rest are refused with
 * "too many clients", and root (and vgpuctl as root) is served meanwhile. */
static void test_per_uid_cap(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct hoard h;

	(void)state;
	if (geteuid() != 0)
		skip();	/* dropping to nobody needs root */
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--socket-mode", "0666",
					"--per-uid", "4", "--negotiate-timeout-ms", T_FOREVER, NULL), 0);
	hoard_start(d, &h);
	assert_int_equal(h.greeted, 4);
	assert_int_equal(h.refused, T_TRIES - 4);
	assert_int_equal(h.other, 0);
	root_gets_in(d);
	/* nobody's vgpuctl is refused for the same reason and says so */
	assert_int_equal(T_CTL_AS(d, NOBODY, "status"), 4);
	assert_non_null(strstr(t_out.err, "too many clients"));
	assert_null(strstr(t_out.err, "not a vgpud control socket"));
	hoard_end(&h);
	/* its connections gone, nobody is served again */
	assert_int_equal(T_CTL_AS(d, NOBODY, "status"), 0);
	t_daemon_free(d);
}

/* Without a useful per-uid cap, one user fills every unreserved slot and no more: the
 * slots kept for root and the admin group stay free, so root is still served. */
static void test_admin_slots(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct hoard h;

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2", "--socket-mode", "0666",
					"--per-uid", "32", "--admin-slots", "8",
					"--negotiate-timeout-ms", T_FOREVER, NULL), 0);
	hoard_start(d, &h);
	assert_int_equal(h.greeted, 32 - 8);
	assert_int_equal(h.refused, T_TRIES - (32 - 8));
	assert_int_equal(h.other, 0);
	root_gets_in(d);
	/* root may take every reserved slot */
	{
		struct tclient *cl[8];

		for (unsigned int i = 0; i < 8; i++)
			cl[i] = t_client(d, false);
		/* the table is full now: root too is told so, not left hanging */
		struct tclient extra = { .fd = t_connect(d->sock) };

		assert_true(extra.fd >= 0);
		assert_int_equal(first_line_kind(&extra), 2);
		close(extra.fd);
		for (unsigned int i = 0; i < 8; i++)
			t_client_free(cl[i]);
	}
	hoard_end(&h);
	t_daemon_free(d);
}

/* A connection that does not negotiate within the timeout gets a GenericError naming it
 * and is closed (the close is the event waited for). */
static void test_negotiation_timeout(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct tclient *cl;
	json_object *o, *e, *desc;
	char c;

	(void)state;
	assert_int_equal(t_daemon_start(d, "--vram", "2G", "--max-vfs", "2",
					"--negotiate-timeout-ms", "1", NULL), 0);
	cl = t_client(d, false);	/* greeting read, nothing sent */
	o = t_read_json(cl, -1);
	assert_non_null(o);
	assert_string_equal(t_err_class(o), "GenericError");
	assert_true(json_object_object_get_ex(o, "error", &e));
	assert_true(json_object_object_get_ex(e, "desc", &desc));
	assert_non_null(strstr(json_object_get_string(desc), "negotiation timeout"));
	json_object_put(o);
	assert_int_equal(read(cl->fd, &c, 1), 0);	/* closed by vgpud */
	t_client_free(cl);
	t_daemon_free(d);
}

/* A client that sent qmp_capabilities in time, while vgpud's loop was held past the
 * deadline by another client's command (here the process stops before running it:
 * vgpud-test's VGPU_STOP_AT_CMD), is served, not closed: its input is read before the
 * sweep judges it. The wait is for the deadline to pass; nothing is timed. */
static void test_negotiation_late_read(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct tclient *a, *b;
	json_object *r;
	uint64_t until;
	int st;

	(void)state;
	d->prog = "vgpud-test";
	setenv("VGPU_STOP_AT_CMD", "query-version", 1);
	assert_int_equal(t_daemon_start(d, "--negotiate-timeout-ms", "2000", NULL), 0);
	unsetenv("VGPU_STOP_AT_CMD");
	a = t_client(d, true);
	b = t_client(d, false);		/* greeted: its deadline runs */
	until = cmn_now_ns() + 2000 * VGPU_NSEC_PER_MSEC;
	t_send_raw(a, "{\"execute\": \"query-version\"}\n", 29);
	assert_int_equal(waitpid(d->pid, &st, WUNTRACED), d->pid);
	assert_true(WIFSTOPPED(st));
	t_send_raw(b, "{\"execute\": \"qmp_capabilities\"}\n", 32);
	while (cmn_now_ns() < until)
		usleep(10000);
	kill(d->pid, SIGCONT);
	r = t_reply(a);
	assert_non_null(t_ret(r));
	json_object_put(r);
	r = t_reply(b);
	assert_non_null(r);
	assert_string_equal(t_err_class(r), "");
	assert_non_null(t_ret(r));
	json_object_put(r);
	t_client_free(a);
	t_client_free(b);
	t_daemon_free(d);
}

/* Bad limits are refused at start, naming the setting. */
static void test_bad_limits(void **state)
{
	struct tdaemon *d = t_daemon_new();

	(void)state;
	assert_int_equal(t_daemon_start(d, "--per-uid", "0", NULL), 1002);
	assert_int_equal(t_daemon_start(d, "--admin-slots", "32", NULL), 1002);
	assert_int_equal(t_daemon_start(d, "--negotiate-timeout-ms", "0", NULL), 1002);
	t_daemon_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_per_uid_cap, t_teardown),
		cmocka_unit_test_teardown(test_admin_slots, t_teardown),
		cmocka_unit_test_teardown(test_negotiation_timeout, t_teardown),
		cmocka_unit_test_teardown(test_negotiation_late_read, t_teardown),
		cmocka_unit_test_teardown(test_bad_limits, t_teardown),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
