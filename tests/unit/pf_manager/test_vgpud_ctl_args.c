// SPDX-License-Identifier: MIT
/* vgpud's checks of a control request's arguments and id, against a real daemon: every
 * command takes only its own argument keys (and "dry-run") and refuses any other by name;
 * an argument of the wrong JSON type is refused naming the key and the type it has; the
 * owner token is checked member by member; reset-vf takes "uuid" or "vf", never both, so
 * a migrating slice cannot be reset through another slice's UUID and its own VF; an "id"
 * is echoed only if it is a clean string of at most 128 bytes or an integer of at most
 * 2^53 in magnitude, any other is refused naming "id" and not echoed. A key twice in one
 * object (however spelled, at any depth) is refused naming the key and its object, the
 * request unread; the same key in sibling objects is no repeat. Every reply is a line of
 * valid JSON and UTF-8, and a refused request changes nothing. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_mig_test.h"

#define U_RUN	"7a7a7a7a-1111-4111-8111-111111111111"	/* running on VF 1 */
#define U_DEF	"7a7a7a7a-2222-4222-8222-222222222222"	/* defined, stopped */
#define U_TWO	"7a7a7a7a-3333-4333-8333-333333333333"	/* the migration case's VF 2 */
#define VM	"7a7a7a7a-9999-4999-8999-999999999999"

#define X16	"xxxxxxxxxxxxxxxx"
#define X128	X16 X16 X16 X16 X16 X16 X16 X16

#define REQ(cmd, args)	"{\"execute\":\"" cmd "\",\"arguments\":" args "}"

static struct tdaemon *dmn;

static int setup(void **state)
{
	(void)state;
	dmn = t_daemon_two_vfs(U_RUN, NULL);
	if (!dmn || T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", U_DEF))
		return -1;
	return 0;
}

/* The next line from vgpud that is not an event, parsed strictly (valid UTF-8, JSON's
 * own grammar): NULL if it is not valid JSON. */
static json_object *strict_reply(struct tclient *c)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		struct json_tokener *tok;
		json_object *o;
		ssize_t n;

		if (!nl) {
			n = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
			assert_true(n > 0);
			c->len += (size_t)n;
			continue;
		}
		tok = json_tokener_new();
		json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
		o = json_tokener_parse_ex(tok, c->buf, (int)(nl - c->buf));
		if (o && json_tokener_get_parse_end(tok) != (size_t)(nl - c->buf)) {
			json_object_put(o);
			o = NULL;
		}
		json_tokener_free(tok);
		c->len -= (size_t)(nl + 1 - c->buf);
		memmove(c->buf, nl + 1, c->len);
		if (o && json_object_object_get_ex(o, "event", NULL)) {
			json_object_put(o);
			continue;
		}
		return o;
	}
}

static const char *err_desc(json_object *rep)
{
	json_object *e, *d;

	if (!json_object_object_get_ex(rep, "error", &e) ||
	    !json_object_object_get_ex(e, "desc", &d))
		return "";
	return json_object_get_string(d);
}

static const struct req_case {
	const char *name;
	const char *line;
	const char *cls;	/* the error class, "" for a reply with "return" */
	const char *desc;	/* in the error's desc */
	const char *id;		/* the "id" echoed, as JSON text; NULL: none */
} req_cases[] = {
	/* ---- unknown argument keys, by name ---- */
	{ "start with dry_run", REQ("start-slice", "{\"uuid\":\"" U_DEF "\",\"dry_run\":true}"),
	  "InvalidArgument", "unknown argument \"dry_run\" for start-slice", NULL },
	{ "stop with dryrun", REQ("stop-slice", "{\"uuid\":\"" U_RUN "\",\"dryrun\":true}"),
	  "InvalidArgument", "unknown argument \"dryrun\" for stop-slice", NULL },
	{ "undefine with vf", REQ("undefine-slice", "{\"uuid\":\"" U_DEF "\",\"vf\":1}"),
	  "InvalidArgument", "unknown argument \"vf\" for undefine-slice", NULL },
	{ "reset with owner", REQ("reset-vf", "{\"uuid\":\"" U_RUN "\",\"owner\":{\"vm\":\"" VM
				  "\"}}"),
	  "InvalidArgument", "unknown argument \"owner\" for reset-vf", NULL },
	{ "set-vfs with force", REQ("set-vfs", "{\"num_vfs\":2,\"force\":true}"),
	  "InvalidArgument", "unknown argument \"force\" for set-vfs", NULL },
	{ "modify with dry_run", REQ("modify-slice", "{\"uuid\":\"" U_DEF "\",\"start\":\"auto\","
				     "\"dry_run\":true}"),
	  "InvalidArgument", "unknown argument \"dry_run\" for modify-slice", NULL },
	{ "define with colour", REQ("define-slice", "{\"type\":\"vgpu-512M\",\"colour\":\"red\"}"),
	  "InvalidArgument", "unknown argument \"colour\" for define-slice", NULL },
	{ "query-slices with verbose", REQ("query-slices", "{\"verbose\":true}"),
	  "InvalidArgument", "unknown argument \"verbose\" for query-slices", NULL },
	{ "query-status with uuid", REQ("query-status", "{\"uuid\":\"" U_RUN "\"}"),
	  "InvalidArgument", "unknown argument \"uuid\" for query-status (it takes none)", NULL },
	{ "migrate-status with all", REQ("migrate-status", "{\"all\":true}"),
	  "InvalidArgument", "unknown argument \"all\" for migrate-status", NULL },
	{ "save with to", REQ("save-slice", "{\"uuid\":\"" U_RUN "\",\"to\":\"/tmp/x\"}"),
	  "InvalidArgument", "unknown argument \"to\" for save-slice", NULL },
	{ "start of a defined slice with attrs",
	  REQ("start-slice", "{\"uuid\":\"" U_DEF "\",\"attrs\":[{\"channels\":2}]}"),
	  "InvalidArgument", "\"attrs\" is for a transient start-slice", NULL },
	/* ---- the owner token, member by member ---- */
	{ "owner.vm not a UUID", REQ("start-slice", "{\"uuid\":\"" U_DEF "\",\"owner\":"
				     "{\"vm\":\"x\",\"generation\":\"abc\"}}"),
	  "InvalidArgument", "owner.vm \"x\" is not a UUID", NULL },
	{ "owner.generation a string", REQ("start-slice", "{\"uuid\":\"" U_DEF "\",\"owner\":"
					   "{\"vm\":\"" VM "\",\"generation\":\"abc\"}}"),
	  "InvalidArgument", "owner.generation must be a non-negative integer, not a string",
	  NULL },
	{ "owner.generation negative", REQ("stop-slice", "{\"uuid\":\"" U_RUN "\",\"owner\":"
					   "{\"vm\":\"" VM "\",\"generation\":-1}}"),
	  "InvalidArgument", "owner.generation must be a non-negative integer, not -1", NULL },
	{ "owner an integer", REQ("stop-slice", "{\"uuid\":\"" U_RUN "\",\"owner\":5}"),
	  "InvalidArgument", "\"owner\" must be an object", NULL },
	{ "owner.vm an integer", REQ("modify-slice", "{\"uuid\":\"" U_DEF "\",\"owner\":"
				     "{\"vm\":5}}"),
	  "InvalidArgument", "owner.vm must be a string (a VM's UUID), not an integer", NULL },
	{ "owner without vm", REQ("stop-slice", "{\"uuid\":\"" U_RUN "\",\"owner\":"
				  "{\"generation\":1}}"),
	  "InvalidArgument", "owner.vm is missing", NULL },
	{ "owner with gen", REQ("stop-slice", "{\"uuid\":\"" U_RUN "\",\"owner\":{\"vm\":\"" VM
				"\",\"gen\":1}}"),
	  "InvalidArgument", "unknown member \"gen\" in \"owner\"", NULL },
	{ "release-owner.generation a string",
	  REQ("modify-slice", "{\"uuid\":\"" U_DEF "\",\"release-owner\":{\"vm\":\"" VM
	      "\",\"generation\":\"1\"}}"),
	  "InvalidArgument", "release-owner.generation must be a non-negative integer, not a "
	  "string", NULL },
	/* ---- reset-vf: "uuid" or "vf" ---- */
	{ "reset with uuid and vf", REQ("reset-vf", "{\"uuid\":\"" U_RUN "\",\"vf\":1}"),
	  "InvalidArgument", "reset-vf takes \"uuid\" or \"vf\", not both", NULL },
	{ "reset with neither", "{\"execute\":\"reset-vf\"}",
	  "InvalidArgument", "reset-vf needs \"uuid\" (a slice's UUID) or \"vf\" (1..63)", NULL },
	{ "reset with evict_ms only", REQ("reset-vf", "{\"evict_ms\":0}"),
	  "InvalidArgument", "reset-vf needs \"uuid\" (a slice's UUID) or \"vf\" (1..63)", NULL },
	/* ---- an argument of the wrong type, named with its type ---- */
	{ "query-slices uuid null", REQ("query-slices", "{\"uuid\":null}"),
	  "InvalidArgument", "\"uuid\" must be a string (a slice's UUID), not null", NULL },
	{ "query-slices uuid 5", REQ("query-slices", "{\"uuid\":5}"),
	  "InvalidArgument", "\"uuid\" must be a string (a slice's UUID), not an integer", NULL },
	{ "query-slices uuid with a NUL", REQ("query-slices", "{\"uuid\":\"" U_RUN "\\u0000x\"}"),
	  "InvalidArgument", "not a string holding a NUL byte or invalid UTF-8", NULL },
	{ "stop uuid array", REQ("stop-slice", "{\"uuid\":[]}"),
	  "InvalidArgument", "\"uuid\" must be a string (a slice's UUID), not an array", NULL },
	{ "set-vfs num_vfs a string", REQ("set-vfs", "{\"num_vfs\":\"2\"}"),
	  "InvalidArgument", "\"num_vfs\" must be an integer 0..2, not a string", NULL },
	{ "set-vfs num_vfs 1e300", REQ("set-vfs", "{\"num_vfs\":1e300}"),
	  "InvalidArgument", "\"num_vfs\" must be an integer 0..2, not a number with a fraction "
	  "or an exponent", NULL },
	{ "set-vfs num_vfs 2.0", REQ("set-vfs", "{\"num_vfs\":2.0}"),
	  "InvalidArgument", "\"num_vfs\" must be an integer 0..2, not a number", NULL },
	{ "set-vfs without num_vfs", REQ("set-vfs", "{}"),
	  "InvalidArgument", "set-vfs needs \"num_vfs\"", NULL },
	{ "query-stats vf a string", REQ("query-stats", "{\"vf\":\"1\"}"),
	  "InvalidArgument", "\"vf\" must be an integer, not a string", NULL },
	{ "migrate-status uuid 5", REQ("migrate-status", "{\"uuid\":5}"),
	  "InvalidArgument", "\"uuid\" must be a string (a slice's UUID), not an integer", NULL },
	{ "migrate switchover 5", REQ("migrate-outgoing", "{\"uuid\":\"" U_RUN "\",\"to\":"
				      "\"/nonexistent.sock\",\"switchover\":5,\"dry-run\":true}"),
	  "InvalidArgument", "\"switchover\" must be a string, not an integer", NULL },
	/* ---- a key twice in one object: refused unread, naming the key and its object ---- */
	{ "key twice at the top level", "{\"execute\":\"query-version\",\"execute\":\"set-vfs\"}",
	  "GenericError", "request: key \"execute\" appears twice in the top-level object", NULL },
	{ "key twice in arguments",
	  REQ("reset-vf", "{\"uuid\":\"" U_DEF "\",\"uuid\":\"" U_RUN "\"}"),
	  "GenericError", "request: key \"uuid\" appears twice in \"arguments\"", NULL },
	{ "key twice, once escaped", REQ("reset-vf", "{\"vf\":2,\"\\u0076f\":1}"),
	  "GenericError", "request: key \"vf\" appears twice in \"arguments\"", NULL },
	{ "key twice in an array's object",
	  REQ("define-slice", "{\"type\":\"vgpu-512M\",\"attrs\":[{\"channels\":2},"
	      "{\"priority\":\"low\",\"priority\":\"high\"}]}"),
	  "GenericError", "request: key \"priority\" appears twice in \"arguments.attrs[1]\"",
	  NULL },
	{ "key twice, the id not echoed", "{\"execute\":\"query-version\",\"id\":1,\"id\":2}",
	  "GenericError", "request: key \"id\" appears twice in the top-level object", NULL },
	{ "a key again in sibling objects",
	  REQ("define-slice", "{\"type\":\"vgpu-512M\",\"attrs\":[{\"channels\":2},"
	      "{\"channels\":4}],\"dry-run\":true}"), "", "", NULL },
	/* ---- the id ---- */
	{ "id invalid UTF-8", "{\"execute\":\"query-version\",\"id\":\"\xff\xfe\"}",
	  "GenericError", "\"id\"", NULL },
	{ "id with a NUL", "{\"execute\":\"query-version\",\"id\":\"a\\u0000b\"}",
	  "GenericError", "\"id\"", NULL },
	{ "id 1e999", "{\"execute\":\"query-version\",\"id\":1e999}",
	  "GenericError", "\"id\"", NULL },
	{ "id 1.5", "{\"execute\":\"query-version\",\"id\":1.5}", "GenericError", "\"id\"", NULL },
	{ "id null", "{\"execute\":\"query-version\",\"id\":null}", "GenericError", "\"id\"",
	  NULL },
	{ "id true", "{\"execute\":\"query-version\",\"id\":true}", "GenericError", "\"id\"",
	  NULL },
	{ "id an object", "{\"execute\":\"query-version\",\"id\":{\"a\":1}}", "GenericError",
	  "\"id\"", NULL },
	{ "id an array", "{\"execute\":\"query-version\",\"id\":[1]}", "GenericError", "\"id\"",
	  NULL },
	{ "id 2^53 + 1", "{\"execute\":\"query-version\",\"id\":9007199254740993}",
	  "GenericError", "\"id\"", NULL },
	{ "id past 2^64", "{\"execute\":\"query-version\",\"id\":99999999999999999999}",
	  "GenericError", "\"id\"", NULL },
	{ "id of 129 bytes", "{\"execute\":\"query-version\",\"id\":\"" X128 "x\"}",
	  "GenericError", "at most 128 bytes", NULL },
	{ "id bad on a mutating command", "{\"execute\":\"start-slice\",\"arguments\":{\"uuid\":\""
	  U_DEF "\"},\"id\":1.5}", "GenericError", "\"id\"", NULL },
	{ "id bad on a bad envelope", "{\"execute\":5,\"id\":1e999}", "GenericError", "\"id\"",
	  NULL },
	{ "id a string", "{\"execute\":\"query-version\",\"id\":\"abc\"}", "", "", "\"abc\"" },
	{ "id of 128 bytes", "{\"execute\":\"query-version\",\"id\":\"" X128 "\"}", "", "",
	  "\"" X128 "\"" },
	{ "id -42", "{\"execute\":\"query-version\",\"id\":-42}", "", "", "-42" },
	{ "id 2^53", "{\"execute\":\"query-version\",\"id\":9007199254740992}", "", "",
	  "9007199254740992" },
	{ "id on an error", "{\"execute\":\"stop-slice\",\"arguments\":{\"uuid\":\"" U_RUN
	  "\",\"bogus\":1},\"id\":7}", "InvalidArgument", "unknown argument \"bogus\"", "7" },
};

/* One request line: the reply's class, desc and id as the row says; nothing changed. */
static void test_request(void **state)
{
	const struct req_case *c = *state;
	struct tclient *cl = t_client(dmn, true);
	char *before = t_snapshot(cl), *after;
	json_object *rep, *id;

	t_send_raw(cl, c->line, strlen(c->line));
	t_send_raw(cl, "\n", 1);
	rep = strict_reply(cl);
	if (!rep)
		fail_msg("%s: the reply is not valid JSON", c->name);
	if (!c->cls[0] && !t_ret(rep))
		fail_msg("%s: %s", c->name, json_object_to_json_string(rep));
	if (c->cls[0] && (strcmp(t_err_class(rep), c->cls) || !strstr(err_desc(rep), c->desc)))
		fail_msg("%s: want %s \"%s\", got %s", c->name, c->cls, c->desc,
			 json_object_to_json_string(rep));
	if (c->id) {
		assert_true(json_object_object_get_ex(rep, "id", &id));
		assert_string_equal(json_object_to_json_string_ext(id, JSON_C_TO_STRING_PLAIN),
				    c->id);
	} else if (json_object_object_get_ex(rep, "id", NULL)) {
		fail_msg("%s: an id was echoed: %s", c->name, json_object_to_json_string(rep));
	}
	json_object_put(rep);
	after = t_snapshot(cl);
	assert_string_equal(before, after);
	free(before);
	free(after);
	t_client_free(cl);
}

/* ---- a migrating slice, reset through another slice's UUID --------------------------- */

static char *pair_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };

/* VF 1's slice of A in pre-copy, waiting for a manual switchover; a reset-vf that names VF 2's
 * slice by UUID and VF 1 by number is refused, and so is one of VF 1 alone: VF 1's VRAM and
 * reset count stay as they were. Cancelled, VF 1 resets again. */
static void test_reset_migrating(void **state)
{
	struct tdaemon *a, *b;
	struct tclient *ea = NULL, *eb = NULL, *cl;
	char sock[160], pat[65536], got[65536];
	json_object *rep;
	char *before, *after;
	int fd;

	(void)state;
	assert_int_equal(t_mig_pair(pair_args, NULL, NULL, &a, &b, &ea, &eb), 0);
	t_define_start(a, "vgpu-512M", U_RUN);
	t_define_start(a, "vgpu-512M", U_TWO);
	fd = t_bar_open(a, 1);
	t_pattern((uint8_t *)pat, sizeof(pat), 7);
	assert_int_equal(pwrite(fd, pat, sizeof(pat), 0), (ssize_t)sizeof(pat));
	snprintf(sock, sizeof(sock), "%s/mig.sock", b->root);
	t_mig_listen(b, sock, U_RUN);
	t_mig_manual(a, ea, sock, U_RUN);

	cl = t_client(a, true);
	before = t_snapshot(cl);
	t_send_raw(cl, REQ("reset-vf", "{\"uuid\":\"" U_TWO "\",\"vf\":1,\"evict_ms\":0}") "\n",
		   strlen(REQ("reset-vf", "{\"uuid\":\"" U_TWO "\",\"vf\":1,\"evict_ms\":0}")) + 1);
	rep = strict_reply(cl);
	assert_non_null(rep);
	if (strcmp(t_err_class(rep), "InvalidArgument") || !strstr(err_desc(rep), "not both"))
		fail_msg("reset-vf by U_TWO and VF 1: %s", json_object_to_json_string(rep));
	json_object_put(rep);
	rep = t_exec(cl, "reset-vf", json_tokener_parse("{\"vf\":1,\"evict_ms\":0}"));
	if (strcmp(t_err_class(rep), "Conflict") || !strstr(err_desc(rep), "is migrating"))
		fail_msg("reset-vf of VF 1: %s", json_object_to_json_string(rep));
	json_object_put(rep);
	after = t_snapshot(cl);
	assert_string_equal(before, after);
	assert_int_equal(pread(fd, got, sizeof(got), 0), (ssize_t)sizeof(got));
	assert_memory_equal(got, pat, sizeof(pat));

	assert_int_equal(T_CTL(a, "migrate-cancel", "-u", U_RUN), 0);
	json_object_put(t_wait_migration(ea, "cancelled"));
	json_object_put(t_wait_migration(eb, "failed"));
	rep = t_exec(cl, "reset-vf", json_tokener_parse("{\"vf\":1,\"evict_ms\":0}"));
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	free(before);
	free(after);
	close(fd);
	t_client_free(cl);
	t_client_free(ea);
	t_client_free(eb);
}

int main(void)
{
	struct CMUnitTest t[96];
	size_t n = 0;
	int r;

	for (size_t i = 0; i < sizeof(req_cases) / sizeof(req_cases[0]); i++)
		t[n++] = (struct CMUnitTest){ req_cases[i].name, test_request, NULL, NULL,
					      (void *)&req_cases[i] };
	r = _cmocka_run_group_tests("vgpud_ctl_args", t, n, setup, t_teardown);
	{
		const struct CMUnitTest mig[] = {
			cmocka_unit_test_teardown(test_reset_migrating, t_teardown),
		};

		r += cmocka_run_group_tests_name("vgpud_ctl_args_migrating", mig, NULL, NULL);
	}
	return r;
}
