// SPDX-License-Identifier: MIT
/* ctlclient against a scripted fake vgpud: negotiation, replies and events, error replies
 * as errnos, the reply limit, unreachable sockets, the deadlines against a peer that
 * trickles its bytes (on a clock the test drives); and the value formats. */
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

#include "common/clock.h"
#include "ctlclient/ctlclient.h"
#include "tests/unit/ctlclient/fake_line_io.h"

#define GREETING	"{\"VGPUD\":{\"version\":{\"protocol\":1},\"capabilities\":[]}}\n"
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
	/* Trickling: message @trickle (0 the greeting, i the answer to request i) goes out
	 * after @trickle_pad spaces, one byte per token read from @token_fd (the test's
	 * clock writes one per reading); EOF there ends the fake. */
	int token_fd;			/* -1: no trickling */
	unsigned int trickle, trickle_pad;
	unsigned int sent;		/* bytes of that message (pad included) sent */
};

static bool fake_token(struct fake *f)
{
	char t;

	return read(f->token_fd, &t, 1) == 1;
}

/* Message @idx of the script: at once, or one byte per token. */
static void fake_say(struct fake *f, int fd, unsigned int idx, const char *msg)
{
	if (f->token_fd < 0 || idx != f->trickle) {
		send_all(fd, msg, strlen(msg));
		return;
	}
	for (; f->sent < f->trickle_pad; f->sent++)
		if (!fake_token(f) || send(fd, " ", 1, MSG_NOSIGNAL) != 1)
			return;
	if (fake_token(f)) {
		send_all(fd, msg, strlen(msg));
		f->sent += (unsigned int)strlen(msg);
	}
}

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
	fake_say(f, fd, 0, f->s->greeting);
	for (unsigned int i = 0; f->s->answers[i] && read_request(fd); i++) {
		if (f->s->answers[i] == BIG)
			send_big(fd);
		else
			fake_say(f, fd, i + 1, f->s->answers[i]);
	}
	close(fd);
	return NULL;
}

/* The fake on a socket of its own, its thread started; @token_fd >= 0: it trickles message
 * @trickle after @pad spaces (struct fake). */
static void fake_start_trickle(struct fake *f, const struct script *s, int token_fd,
			       unsigned int trickle, unsigned int pad)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	f->s = s;
	f->token_fd = token_fd;
	f->trickle = trickle;
	f->trickle_pad = pad;
	f->sent = 0;
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

static void fake_start(struct fake *f, const struct script *s)
{
	fake_start_trickle(f, s, -1, 0, 0);
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
	{ "a newer protocol", { "{\"VGPUD\":{\"version\":{\"protocol\":2}}}\n", { CAPS_OK } },
	  -EPROTO, 0, "speaks control protocol 2; this client speaks protocol 1", NULL },
	{ "an older protocol", { "{\"VGPUD\":{\"version\":{\"protocol\":0}}}\n", { CAPS_OK } },
	  -EPROTO, 0, "speaks control protocol 0; this client speaks protocol 1", NULL },
	{ "no protocol", { "{\"VGPUD\":{\"version\":1}}\n", { CAPS_OK } }, -EPROTO, 0,
	  "names no control protocol (an integer version.protocol); this client speaks "
	  "protocol 1", NULL },
	{ "a protocol that is not an integer",
	  { "{\"VGPUD\":{\"version\":{\"protocol\":\"1\"}}}\n", { CAPS_OK } }, -EPROTO, 0,
	  "names no control protocol", NULL },
	{ "a protocol past any int", { "{\"VGPUD\":{\"version\":{\"protocol\":4294967297}}}\n",
				       { CAPS_OK } },
	  -EPROTO, 0, "speaks control protocol 4294967297;", NULL },
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

/* ---- deadlines ------------------------------------------------------------------------- */

/* The clock ctlclient reads its deadlines on: @step_ns later at each reading, and each
 * reading lets a trickling fake send one more byte (the peer sends a byte per @step_ns). */
struct tclock {
	uint64_t now, step_ns;
	unsigned int reads;
	int token_fd;			/* -1: no trickling fake */
};

static uint64_t tclock_ns(void *arg)
{
	struct tclock *k = arg;

	k->now += k->step_ns;
	k->reads++;
	if (k->token_fd >= 0 && write(k->token_fd, "t", 1) != 1)
		fail_msg("token pipe: %s", strerror(errno));
	return k->now;
}

#define PAD	1000		/* spaces before a trickled line: far past any deadline */

static const struct trickle_case {
	const char *name;
	unsigned int trickle;		/* 0: the greeting, 1: the reply to qmp_capabilities,
					 * 2: the reply to query-x */
	unsigned int timeout_ms;	/* ctlc_opts; 0: the default */
	const char *want;		/* in the failure's message, after the socket's path */
} trickle_cases[] = {
	{ "a greeting trickled a byte each 2 s ends at the open's deadline", 0, 0,
	  ": timed out after 30000 ms waiting for its greeting" },
	{ "a negotiation trickled a byte each 2 s ends at the open's deadline", 1, 0,
	  ": timed out after 30000 ms waiting for the reply to qmp_capabilities" },
	{ "a reply trickled a byte each 2 s ends at the request's deadline", 2, 0,
	  ": timed out after 30000 ms waiting for the reply to query-x" },
	{ "a trickled reply against a deadline of 7 s", 2, 7000,
	  ": timed out after 7000 ms waiting for the reply to query-x" },
};

static void test_trickle(void **state)
{
	static const struct script s = { GREETING, { CAPS_OK, "{\"return\":{\"x\":1}}\n" } };
	const struct trickle_case *c = *state;
	struct tclock k = { .now = 1000 * VGPU_NSEC_PER_SEC };
	struct ctlc_opts o = { .timeout_ms = c->timeout_ms, .clock_ns = tclock_ns,
			       .clock_arg = &k };
	struct cmn_fail e = { 0 };
	struct ctlc *cl = NULL;
	json_object *ret = NULL;
	char want[256];
	int tokens[2], r;
	struct fake f;

	assert_int_equal(pipe(tokens), 0);
	fake_start_trickle(&f, &s, tokens[0], c->trickle, PAD);
	k.token_fd = tokens[1];
	/* The clock runs from the exchange that trickles on. */
	k.step_ns = c->trickle < 2 ? 2 * VGPU_NSEC_PER_SEC : 0;
	r = ctlc_open_opts(f.path, &o, &cl, &e);
	if (c->trickle == 2) {
		if (r)
			fail_msg("open: %s", e.msg);
		k.step_ns = 2 * VGPU_NSEC_PER_SEC;
		k.reads = 0;
		r = ctlc_exec(cl, "query-x", NULL, &ret, &e);
	}
	assert_int_equal(r, -ECONNREFUSED);
	assert_null(ret);
	snprintf(want, sizeof(want), "vgpud at %s%s", f.path, c->want);
	if (!strstr(e.msg, want))
		fail_msg("%s: message \"%s\" does not say \"%s\"", c->name, e.msg, want);
	ctlc_close(cl);
	close(tokens[1]);		/* the fake stops at its next token */
	fake_stop(&f);
	close(tokens[0]);
	/* Given up long before the line was complete: a byte per reading of the clock. */
	assert_true(f.sent < PAD);
	assert_true(k.reads <= 4 + (c->timeout_ms ? c->timeout_ms : CTLC_TIMEOUT_MS) / 2000);
}

/* The deadline belongs to each request, not to the connection: requests far apart on the
 * clock are each answered. */
static void test_deadline_per_request(void **state)
{
	static const struct script s = { GREETING, { CAPS_OK, "{\"return\":{\"x\":1}}\n",
						     "{\"return\":{\"x\":2}}\n" } };
	struct tclock k = { .now = 1, .token_fd = -1 };
	struct ctlc_opts o = { .timeout_ms = 5000, .clock_ns = tclock_ns, .clock_arg = &k };
	struct ctlc *cl;
	json_object *ret;
	struct fake f;

	(void)state;
	fake_start(&f, &s);
	assert_int_equal(ctlc_open_opts(f.path, &o, &cl, NULL), 0);
	for (int i = 0; i < 2; i++) {
		k.now += 60 * VGPU_NSEC_PER_SEC;	/* idle between requests */
		assert_int_equal(ctlc_exec(cl, "query-x", NULL, &ret, NULL), 0);
		assert_true(json_object_object_get_ex(ret, "x", NULL));
		json_object_put(ret);
	}
	assert_true(k.reads >= 2);		/* both waited on the test's clock */
	ctlc_close(cl);
	fake_stop(&f);
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
				sizeof(errno_cases) / sizeof(errno_cases[0]) +
				sizeof(trickle_cases) / sizeof(trickle_cases[0]) + 5];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(exec_cases) / sizeof(exec_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ exec_cases[i].name, test_exec, NULL, NULL,
						  (void *)&exec_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_request_keeps_error);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_unreachable);
	for (size_t i = 0; i < sizeof(errno_cases) / sizeof(errno_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ errno_cases[i].name, test_reply_errno, NULL, NULL,
						  (void *)&errno_cases[i] };
	for (size_t i = 0; i < sizeof(trickle_cases) / sizeof(trickle_cases[0]); i++)
		tests[n++] = (struct CMUnitTest){ trickle_cases[i].name, test_trickle, NULL, NULL,
						  (void *)&trickle_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_deadline_per_request);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_uuid);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_size);
	return _cmocka_run_group_tests("ctlclient", tests, n, NULL, NULL);
}
