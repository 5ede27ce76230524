// SPDX-License-Identifier: MIT
/* What a guest repeats at will costs a log line per doubling: with a guest attached to VF 1,
 * 200 more connections to its socket are each refused, and vgpud's log holds the first 8
 * refusals and then the 16th, 32nd, 64th and 128th, each with its count; the next attach
 * after the guest left is served. Each connection (from another process) is waited for
 * until vgpud closed it. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_test.h"

#define U1		"f100d000-1111-4111-8111-111111111111"
#define REFUSALS	200u

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2",
			       "--spare-vram", "256M", NULL };

/* Lines of @log that hold @what. */
static unsigned int log_count(const char *log, const char *what)
{
	char line[1024];
	unsigned int n = 0;
	FILE *f = fopen(log, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

/* From a child (the attached guest's own pid would be taken for its SVA connection):
 * @n connections to @path, each waited for until vgpud refused and closed it. */
static void refuse_from_child(const char *path, unsigned int n)
{
	pid_t pid = fork();
	int st = 0;

	assert_true(pid >= 0);
	if (!pid) {
		for (unsigned int i = 0; i < n; i++) {
			char buf[64];
			int fd = t_connect(path);

			if (fd < 0)
				_exit(1);
			while (read(fd, buf, sizeof(buf)) > 0)
				;
			close(fd);
		}
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_refusals_logged_per_doubling(void **state)
{
	struct tdaemon *d = t_daemon_new();
	struct tguest g, h;
	char log[256], path[256];

	(void)state;
	assert_int_equal(t_daemon_start_logged(d, daemon_args, log, sizeof(log)), 0);
	t_define_start(d, "vgpu-512M", U1);
	snprintf(path, sizeof(path), "%s/vf1.sock", d->run);
	assert_int_equal(t_guest_attach(path, &g), 0);
	refuse_from_child(path, REFUSALS);
	/* vgpuctl's answer comes after the loop wrote every line before it. */
	assert_int_equal(T_CTL(d, "list"), 0);
	assert_int_equal(log_count(log, "attach refused"), 8 + 4);
	assert_int_equal(log_count(log, "(128 so far; logged at each doubling)"), 1);
	assert_int_equal(log_count(log, "(8 so far)"), 1);
	assert_int_equal(log_count(log, "(9 so far"), 0);
	t_guest_detach(&g);
	t_wait_attached(d, U1, false);
	assert_int_equal(t_guest_attach(path, &h), 0);
	t_guest_detach(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_refusals_logged_per_doubling, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
