// SPDX-License-Identifier: MIT
/* vgpuctl against malformed replies: a scripted fake vgpud on a real UNIX socket answers
 * each request with a reply whose members have the wrong type (a JSON null where a string
 * belongs, an object or a string where an array does, an array element that is no object,
 * a [base, size] pair outside its slice, a segment outside the VRAM, no record of the
 * migration being followed). vgpuctl_main runs in a child process per case, so a crash
 * is the case's failure, not the run's: each must exit 1 with a message that names the
 * member, and well-formed replies still exit 0. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "vgpuctl/vgpuctl.h"
#include "tests/unit/ctlclient/fake_line_io.h"

#define GREETING	"{\"VGPUD\":{\"version\":{\"protocol\":1},\"capabilities\":[]}}\n"
#define CAPS_OK		"{\"return\":{}}\n"
#define UUID		"12345678-1234-1234-1234-123456789abc"
#define MAX_ARGS	8
#define MAX_REPLIES	4

struct reply_case {
	const char *name;
	const char *args[MAX_ARGS];	/* vgpuctl's arguments after --socket PATH */
	const char *replies[MAX_REPLIES]; /* one line per request, in order */
	int want_exit;
	const char *want_err;		/* in stderr; NULL: nothing checked */
};

static const struct reply_case cases[] = {
	{ "status: error class null", { "status" },
	  { "{\"error\":{\"class\":null,\"desc\":\"x\"}}" }, 1, "\"class\" is null" },
	{ "status: return null", { "status" }, { "{\"return\":null}" }, 1,
	  "\"return\" is not an object" },
	{ "status: error not an object", { "status" }, { "{\"error\":\"boom\"}" }, 1,
	  "neither a \"return\" nor an \"error\" object" },
	{ "status: parent an object", { "status" }, { "{\"return\":{\"parent\":{}}}" }, 1,
	  "to query-status: \"parent\" is an object, not a string" },
	{ "types: parent null", { "types" },
	  { "{\"return\":{\"parent\":null,\"types\":[]}}" }, 1, "\"parent\" is null" },
	{ "types -p: parent null", { "-p", "pf0", "types" }, { "{\"return\":{\"parent\":null}}" },
	  1, "\"parent\" is null" },
	{ "types: no types", { "types" }, { "{\"return\":{\"parent\":\"pf0\"}}" }, 1,
	  "no \"types\"" },
	{ "types: element a number", { "types" },
	  { "{\"return\":{\"parent\":\"pf0\",\"types\":[7]}}" }, 1,
	  "\"types\"[0] is a number, not an object" },
	{ "list: slices a string", { "list" }, { "{\"return\":{\"slices\":\"oops\"}}" }, 1,
	  "\"slices\" is a string, not an array" },
	{ "list: uuid null", { "list", "-v" },
	  { "{\"return\":{\"slices\":[{\"uuid\":null,\"provisioned\":{}}]}}" }, 1,
	  "\"uuid\" is null" },
	{ "list --dumpjson: parent null", { "list", "--dumpjson" },
	  { "{\"return\":{\"slices\":[{\"parent\":null,\"uuid\":\"u\"}]}}" }, 1,
	  "\"parent\" is null" },
	{ "list --dumpjson: attrs a string", { "list", "--dumpjson" },
	  { "{\"return\":{\"slices\":[{\"parent\":\"pf0\",\"uuid\":\"u\",\"attrs\":\"a\"}]}}" },
	  1, "\"attrs\" is a string" },
	{ "stats: vfs element a string", { "stats" }, { "{\"return\":{\"vfs\":[\"x\"]}}" }, 1,
	  "\"vfs\"[0] is a string" },
	{ "vram-map: kind null", { "vram-map", "--no-color" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":null}]}}" }, 1,
	  "\"kind\" is null" },
	{ "vram-map: segments an object", { "vram-map", "--no-color" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":{}}}" }, 1,
	  "\"segments\" is an object, not an array" },
	{ "vram-map: segment outside the VRAM", { "vram-map", "--no-color" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":\"free\",\"base\":512,"
	    "\"size\":18446744073709551615}]}}" }, 1, "\"segments\"[0]" },
	{ "vram-map --svg: allocations an object", { "vram-map", "--no-color", "--svg", "SVG" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":\"slice\",\"vf\":1,"
	    "\"base\":0,\"size\":1024,\"uuid\":\"u\",\"allocations\":{}}]}}" }, 1,
	  "\"allocations\" is an object, not an array" },
	{ "vram-map --svg: allocation not a pair", { "vram-map", "--no-color", "--svg", "SVG" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":\"slice\",\"vf\":1,"
	    "\"base\":0,\"size\":1024,\"uuid\":\"u\",\"allocations\":[[1]]}]}}" }, 1,
	  "\"allocations\"[0] of VF 1" },
	{ "vram-map --svg: allocation outside the slice",
	  { "vram-map", "--no-color", "--svg", "SVG" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":\"slice\",\"vf\":1,"
	    "\"base\":0,\"size\":512,\"uuid\":\"u\",\"allocations\":[[256,512]]}]}}" }, 1,
	  "pair inside the slice" },
	{ "vram-map --svg: uuid null", { "vram-map", "--no-color", "--svg", "SVG" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":\"slice\",\"vf\":1,"
	    "\"base\":0,\"size\":1024,\"uuid\":null}]}}" }, 1, "\"uuid\" is null" },
	{ "stop: diff an object", { "stop", "-u", UUID },
	  { "{\"error\":{\"class\":\"Conflict\",\"desc\":\"busy\","
	    "\"data\":{\"diff\":{\"a\":1}}}}" },
	  1, "to stop-slice: \"diff\" is an object, not an array" },
	{ "modify: diff element null", { "modify", "-u", UUID, "--channels", "4" },
	  { "{\"return\":{\"uuid\":\"" UUID "\",\"result\":\"modified\",\"diff\":[null]}}" }, 1,
	  "\"diff\"[0] is null" },
	{ "migrate-status: migrations an object", { "migrate-status" },
	  { "{\"return\":{\"migrations\":{}}}" }, 1, "\"migrations\" is an object" },
	{ "migrate: migrations an object", { "migrate", "-u", UUID, "--to", "/nonexistent" },
	  { "{\"return\":{\"result\":\"started\"}}", "{\"return\":{\"migrations\":{}}}" }, 1,
	  "to migrate-status: \"migrations\" is an object" },
	{ "migrate: no record", { "migrate", "-u", UUID, "--to", "/nonexistent" },
	  { "{\"return\":{\"result\":\"started\"}}", "{\"return\":{\"migrations\":[]}}" }, 1,
	  "\"migrations\" is empty" },
	/* A status it cannot read must end the wait, not loop on "not done yet". */
	{ "migrate: status null", { "migrate", "-u", UUID, "--to", "/nonexistent" },
	  { "{\"return\":{\"result\":\"started\"}}",
	    "{\"return\":{\"migrations\":[{\"uuid\":\"" UUID "\",\"status\":null}]}}" }, 1,
	  "\"status\" is null" },
	/* Well-formed replies are read as before. */
	{ "status: well-formed", { "status" },
	  { "{\"return\":{\"parent\":\"pf0\",\"model\":\"m\",\"vram_bytes\":1024}}" }, 0, NULL },
	{ "list: well-formed, empty", { "list" }, { "{\"return\":{\"slices\":[]}}" }, 0, NULL },
	{ "vram-map --svg: well-formed", { "vram-map", "--no-color", "--svg", "SVG" },
	  { "{\"return\":{\"vram_bytes\":1024,\"segments\":[{\"kind\":\"slice\",\"vf\":1,"
	    "\"base\":0,\"size\":512,\"uuid\":\"u\",\"allocations\":[[256,256]]},"
	    "{\"kind\":\"free\",\"base\":512,\"size\":512}]}}" }, 0, NULL },
	{ "migrate: completes", { "migrate", "-u", UUID, "--to", "/nonexistent" },
	  { "{\"return\":{\"result\":\"started\"}}",
	    "{\"return\":{\"migrations\":[{\"uuid\":\"" UUID "\",\"role\":\"source\","
	    "\"status\":\"completed\"}]}}" }, 0, NULL },
	/* Not a reply problem: the daemon's own error keeps its exit code. */
	{ "stop: conflict", { "stop", "-u", UUID },
	  { "{\"error\":{\"class\":\"Conflict\",\"desc\":\"busy\",\"data\":{\"diff\":[]}}}" }, 4,
	  "busy" },
};

struct fake {
	const struct reply_case *c;
	char dir[32], path[64], out[64];
	int lfd;
	pthread_t thr;
};

/* The fake vgpud: greeting, the negotiation, then the case's replies in order. */
static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;		/* shut down: the child never connected */
	send_all(fd, GREETING, strlen(GREETING));
	if (read_request(fd))
		send_all(fd, CAPS_OK, strlen(CAPS_OK));
	for (unsigned int i = 0; i < MAX_REPLIES && f->c->replies[i] && read_request(fd); i++) {
		send_all(fd, f->c->replies[i], strlen(f->c->replies[i]));
		send_all(fd, "\n", 1);
	}
	/* A request past the script is answered by closing, as is vgpuctl's own close. */
	read_request(fd);
	close(fd);
	return NULL;
}

/* Run vgpuctl with @c's arguments in a child, its output in f->out; the wait status. */
static int run_vgpuctl(struct fake *f, const struct reply_case *c)
{
	char *argv[MAX_ARGS + 4] = { "vgpuctl", "--socket", f->path };
	char svg[64];
	int argc = 3, status;
	pid_t pid;

	snprintf(svg, sizeof(svg), "%s/map.svg", f->dir);
	for (unsigned int i = 0; i < MAX_ARGS && c->args[i]; i++)
		argv[argc++] = strcmp(c->args[i], "SVG") ? (char *)c->args[i] : svg;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		static const int sigs[] = { SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE };
		int fd = open(f->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(127);
		/* cmocka's handlers would resume the suite in the child: a crash must kill it. */
		for (unsigned int i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
		signal(SIGPIPE, SIG_IGN);
		_exit(vgpuctl_main(argc, argv));
	}
	assert_int_equal(pthread_create(&f->thr, NULL, fake_serve, f), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	/* Wakes an accept() still waiting for a child that never connected. */
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->thr, NULL);
	unlink(svg);
	return status;
}

static void test_reply(void **state)
{
	const struct reply_case *c = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct fake f = { .c = c };
	char out[8192] = "";
	FILE *o;
	int status;

	snprintf(f.dir, sizeof(f.dir), "/tmp/vgpuctl-rep-XXXXXX");
	assert_non_null(mkdtemp(f.dir));
	snprintf(f.path, sizeof(f.path), "%s/control.sock", f.dir);
	snprintf(f.out, sizeof(f.out), "%s/out", f.dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f.path);
	f.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f.lfd >= 0);
	assert_int_equal(bind(f.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f.lfd, 1), 0);

	status = run_vgpuctl(&f, c);

	o = fopen(f.out, "r");
	assert_non_null(o);
	out[fread(out, 1, sizeof(out) - 1, o)] = 0;
	fclose(o);
	close(f.lfd);
	unlink(f.path);
	unlink(f.out);
	rmdir(f.dir);
	if (!WIFEXITED(status))
		fail_msg("vgpuctl died by signal %d; output:\n%s", WTERMSIG(status), out);
	if (WEXITSTATUS(status) != c->want_exit)
		fail_msg("vgpuctl exited %d, want %d; output:\n%s", WEXITSTATUS(status),
			 c->want_exit, out);
	if (c->want_err && !strstr(out, c->want_err))
		fail_msg("no \"%s\" in vgpuctl's output:\n%s", c->want_err, out);
	if (c->want_exit == 1 && !strstr(out, "vgpuctl: malformed reply from vgpud to "))
		fail_msg("no malformed-reply message in vgpuctl's output:\n%s", out);
}

int main(void)
{
	struct CMUnitTest tests[sizeof(cases) / sizeof(cases[0])];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ cases[i].name, test_reply, NULL, NULL,
						  (void *)&cases[i] };
	return _cmocka_run_group_tests("vgpuctl_replies", tests, n, NULL, NULL);
}
