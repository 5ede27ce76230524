// SPDX-License-Identifier: MIT
/* ctlclient against a scripted fake vgpud: negotiation, replies and events, error replies
 * as errnos, the reply limit, unreachable sockets; and the value formats. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <json-c/json.h>

#include "ctlclient/ctlclient.h"
#include "tests/unit/ctlclient/fake_line_io.h"

#define GREETING	"{\"VGPUD\":{\"version\":1}}\n"
#define CAPS_OK		"{\"return\":{}}\n"
#define BIG		((const char *)1)	/* a reply line one byte over CTLC_MAX_REPLY */

/* What the fake vgpud says: the greeting, then one answer (any lines) per request line. */
struct script {
	const char *greeting;
	const char *answers[4];		/* NULL ends; BIG sends the oversized line */
};

struct fake {
	const struct script *s;
	char dir[32], path[64];
	int lfd;
	pthread_t thr;
};

static void send_big(int fd)
{
	size_t len = CTLC_MAX_REPLY + 1;
	char *big = malloc(len);

	assert_non_null(big);
	memset(big, ' ', len);
	send_all(fd, big, len);
	free(big);
}

static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	send_all(fd, f->s->greeting, strlen(f->s->greeting));
	for (unsigned int i = 0; f->s->answers[i] && read_request(fd); i++) {
		if (f->s->answers[i] == BIG)
			send_big(fd);
		else
			send_all(fd, f->s->answers[i], strlen(f->s->answers[i]));
	}
	close(fd);
	return NULL;
}

static void fake_start(struct fake *f, const struct script *s)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	f->s = s;
	snprintf(f->dir, sizeof(f->dir), "/tmp/ctlc-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/control.sock", f->dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 1), 0);
	assert_int_equal(pthread_create(&f->thr, NULL, fake_serve, f), 0);
}

static void fake_stop(struct fake *f)
{
	pthread_join(f->thr, NULL);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
}

/* ---- one exec against a script -------------------------------------------------------- */

static const struct exec_case {
	const char *name;
	struct script script;
	int open_err;			/* what ctlc_open returns */
	int exec_err;			/* what ctlc_exec("query-x") returns */
	const char *want_msg;		/* in the failure's message; NULL: none checked */
	const char *want_key;		/* in the return object on success */
} exec_cases[] = {
	{ "plain return", { GREETING, { CAPS_OK, "{\"return\":{\"x\":1}}\n" } }, 0, 0, NULL, "x" },
	{ "events before the reply are skipped",
	  { GREETING, { "{\"event\":\"A\"}\n" CAPS_OK,
			"{\"event\":\"B\"}\n{\"event\":\"C\"}\n{\"return\":{\"y\":2}}\n" } },
	  0, 0, NULL, "y" },
	{ "error reply with an errno",
	  { GREETING, { CAPS_OK, "{\"error\":{\"class\":\"NotFound\",\"errno\":\"ENOENT\","
			"\"desc\":\"slice u1 is not defined\"}}\n" } },
	  0, -ENOENT, "slice u1 is not defined", NULL },
	{ "error reply with only a class",
	  { GREETING, { CAPS_OK, "{\"error\":{\"class\":\"InsufficientResources\","
			"\"desc\":\"no VRAM\"}}\n" } }, 0, -ENOSPC, "no VRAM", NULL },
	{ "error reply of an unknown class", { GREETING, { CAPS_OK,
	  "{\"error\":{\"class\":\"Weird\",\"desc\":\"odd\"}}\n" } }, 0, -EIO, "odd", NULL },
	{ "neither return nor error", { GREETING, { CAPS_OK, "{\"hello\":1}\n" } }, 0, -EPROTO,
	  "neither a return nor an error", NULL },
	{ "reply over the limit", { GREETING, { CAPS_OK, BIG } }, 0, -ECONNREFUSED, "MiB", NULL },
	/* The send may fail or the read may see EOF first: both are "vgpud at ... closed". */
	{ "daemon goes away", { GREETING, { CAPS_OK } }, 0, -ECONNREFUSED, "vgpud at",
	  NULL },
	{ "not vgpud", { "{\"QMP\":{}}\n", { CAPS_OK } }, -EPROTO, 0,
	  "is not a vgpud control socket", NULL },
	{ "negotiation refused", { GREETING, { "{\"error\":{\"class\":\"GenericError\"}}\n" } },
	  -EPROTO, 0, "refused the negotiation", NULL },
};

static void test_exec(void **state)
{
	const struct exec_case *c = *state;
	struct fake f;
	struct cmn_fail e = { 0 };
	struct ctlc *cl = NULL;
	json_object *ret = NULL;
	int r;

	fake_start(&f, &c->script);
	r = ctlc_open(f.path, &cl, &e);
	assert_int_equal(r, c->open_err);
	if (!r) {
		assert_string_equal(ctlc_path(cl), f.path);
		r = ctlc_exec(cl, "query-x", NULL, &ret, &e);
		assert_int_equal(r, c->exec_err);
	}
	if (r) {
		assert_int_equal(e.err, r);
		if (c->want_msg && !strstr(e.msg, c->want_msg))
			fail_msg("%s: message \"%s\" does not say \"%s\"", c->name, e.msg,
				 c->want_msg);
		assert_null(ret);
	} else {
		assert_true(json_object_object_get_ex(ret, c->want_key, NULL));
	}
	json_object_put(ret);
	ctlc_close(cl);
	fake_stop(&f);
}

/* ctlc_request hands back the whole error reply, for callers that print its data. */
static void test_request_keeps_error(void **state)
{
	static const struct script s = { GREETING, { CAPS_OK, "{\"error\":{\"class\":"
						     "\"Conflict\",\"data\":{\"diff\":[]}}}\n" } };
	struct fake f;
	struct ctlc *cl;
	json_object *rep, *err;

	(void)state;
	fake_start(&f, &s);
	assert_int_equal(ctlc_open(f.path, &cl, NULL), 0);
	assert_int_equal(ctlc_request(cl, "define-slice", json_object_new_object(), &rep, NULL), 0);
	assert_true(json_object_object_get_ex(rep, "error", &err));
	assert_true(json_object_object_get_ex(err, "data", NULL));
	assert_int_equal(ctlc_reply_errno(err), -EBUSY);
	json_object_put(rep);
	ctlc_close(cl);
	fake_stop(&f);
}

/* An error of a broken peer: "errno" or "class" null or a number is no name; the other
 * member, or -EIO, decides. */
static const struct errno_case {
	const char *name, *error;
	int want;
} errno_cases[] = {
	{ "errno null", "{\"errno\":null,\"class\":\"NotFound\"}", -ENOENT },
	{ "errno a number", "{\"errno\":16,\"class\":\"Conflict\"}", -EBUSY },
	{ "class null", "{\"class\":null}", -EIO },
	{ "both null", "{\"errno\":null,\"class\":null}", -EIO },
	{ "errno a name", "{\"errno\":\"ENOSPC\",\"class\":null}", -ENOSPC },
};

static void test_reply_errno(void **state)
{
	const struct errno_case *c = *state;
	json_object *err = json_tokener_parse(c->error);

	assert_non_null(err);
	assert_int_equal(ctlc_reply_errno(err), c->want);
	json_object_put(err);
}

static void test_unreachable(void **state)
{
	char longpath[200];
	struct cmn_fail e = { 0 };
	struct ctlc *cl = (struct ctlc *)&e;

	(void)state;
	assert_int_equal(ctlc_open("/nonexistent/control.sock", &cl, &e), -ECONNREFUSED);
	assert_null(cl);
	assert_non_null(strstr(e.msg, "vgpud is not reachable at /nonexistent/control.sock"));
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = 0;
	assert_int_equal(ctlc_open(longpath, &cl, &e), -ENAMETOOLONG);
	assert_non_null(strstr(e.msg, "too long"));
	ctlc_close(NULL);
}

/* ---- values ---------------------------------------------------------------------------- */

static const struct uuid_case {
	const char *in;
	int want;
	const char *norm;
} uuid_cases[] = {
	{ "6A3C9DD2-0001-4B6E-9F1E-6F0C2F2B9D70", 0, "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70" },
	{ "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70", 0, "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70" },
	{ "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d7", -EINVAL, NULL },
	{ "6a3c9dd2x0001-4b6e-9f1e-6f0c2f2b9d70", -EINVAL, NULL },
	{ "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9dzz", -EINVAL, NULL },
	{ NULL, -EINVAL, NULL },
};

static void test_uuid(void **state)
{
	char out[CTLC_UUID_STR], gen[CTLC_UUID_STR];

	(void)state;
	for (size_t i = 0; i < sizeof(uuid_cases) / sizeof(uuid_cases[0]); i++) {
		const struct uuid_case *c = &uuid_cases[i];

		assert_int_equal(ctlc_uuid_parse(c->in, out, NULL), c->want);
		if (!c->want)
			assert_string_equal(out, c->norm);
	}
	ctlc_uuid_generate(gen);
	assert_int_equal(ctlc_uuid_parse(gen, out, NULL), 0);
	assert_string_equal(out, gen);		/* generated lower case */
	assert_int_equal(gen[14], '4');		/* version 4 */
}

static void test_size(void **state)
{
	uint64_t v = 0;
	char buf[32];

	(void)state;
	assert_int_equal(ctlc_size_parse("512M", &v), 0);
	assert_true(v == 512ull << 20);
	assert_int_equal(ctlc_size_parse("12X", &v), -EINVAL);
	assert_int_equal(ctlc_size_parse("99999999999999999999", &v), -ERANGE);
	assert_string_equal(ctlc_size_format(3ull << 29, buf, sizeof(buf)), "1.5 GiB");
}

int main(void)
{
	struct CMUnitTest tests[sizeof(exec_cases) / sizeof(exec_cases[0]) +
				sizeof(errno_cases) / sizeof(errno_cases[0]) + 4];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(exec_cases) / sizeof(exec_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ exec_cases[i].name, test_exec, NULL, NULL,
						  (void *)&exec_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_request_keeps_error);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_unreachable);
	for (size_t i = 0; i < sizeof(errno_cases) / sizeof(errno_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ errno_cases[i].name, test_reply_errno, NULL, NULL,
						  (void *)&errno_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_uuid);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_size);
	return _cmocka_run_group_tests("ctlclient", tests, n, NULL, NULL);
}
