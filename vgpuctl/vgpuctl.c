// SPDX-License-Identifier: MIT
/* vgpuctl - the admin CLI: one verb per run, one request to vgpud's control socket.
 * Human output by default, the daemon's versioned JSON with --json. See doc/vgpuctl.8.
 * The verb table says how many positional arguments each verb takes; main checks that
 * before it connects, so a wrong count never reaches the daemon. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ctlclient/ctlclient.h"
#include "vgpuctl/vgpuctl.h"
#include "vgpuctl/vgpuctl_internal.h"

#define VGPUCTL_MAX_ARGS	64
/* The package version; the build may pass its own. */
#include "common/version.h"

/* Groups of flags that only some verbs take (struct vgpuctl_verb's flags). */
enum {
	VF_QUOTA,			/* --vram, --channels ... --rm-objects */
	VF_TYPE,			/* -t */
	VF_START,			/* --auto, --manual */
	VF_OWNER_UID,			/* --owner-uid */
	VF_RELEASE,			/* --release-owner */
	VF_MIGRATE,			/* --to, --switchover, --max-rounds, --no-wait */
	VF_OWNER,			/* --owner: the verbs whose command checks the token */
	VF_NR_GROUPS
};

/* The command line, parsed. */
struct vgpuctl_opts {
	const char *socket;
	const char *parent;
	const char *uuid;
	const char *type;
	const char *svg;
	int start;			/* 1 auto, 0 manual, -1 unset */
	bool json, dry, color, verbose;
	bool dumpjson;			/* list: mdevctl's --dumpjson shape */
	const char *jsonfile;		/* define: the slice from an mdevctl JSON file */
	char *type_buf;			/* the type read from --jsonfile (type points here) */
	json_object *attrs;		/* quota flags, mdevctl attrs shape */
	const char *owner;		/* VMUUID[:GEN] */
	const char *release_owner;	/* VMUUID[:GEN] whose token modify clears */
	long owner_uid;
	bool have_owner_uid;
	const char *to;			/* migrate: the destination's address */
	const char *listen;		/* migrate-incoming, migrate-cancel: an address */
	const char *switchover;		/* migrate: auto, manual or vmm */
	long max_rounds;		/* migrate: 0 = the daemon's default */
	bool no_wait;			/* migrate: return once it started */
	const char *verb;
	char *args[VGPUCTL_MAX_ARGS];	/* positional arguments after the verb */
	int nargs;
	const char *given[VF_NR_GROUPS];	/* per VF_* group: the first flag of it given */
	char given_buf[40];		/* a long option's name as given[] shows it */
	int last_opt;			/* the option parse_args() is at */
};

/* A verb: its function, how many positional arguments it takes and what they are. */
struct vgpuctl_verb {
	const char *name;
	int (*fn)(struct ctlc *c, struct vgpuctl_opts *o);
	int min_args, max_args;
	const char *args;		/* the positional arguments, for messages ("N") */
	const char *help;
	unsigned int flags;		/* BIT(VF_*): the groups of flags it takes */
};

#define VF_BIT(g)	(1u << (g))

static int __attribute__((format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "vgpuctl: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'vgpuctl --help'.\n");
	return VGPUCTL_USAGE;
}

static int class_exit(const char *cls)
{
	static const struct { const char *cls; int code; } map[] = {
		{ "NotFound", VGPUCTL_NOTFOUND }, { "Conflict", VGPUCTL_CONFLICT },
		{ "InsufficientResources", VGPUCTL_NOSPACE }, { "PermissionDenied", VGPUCTL_DENIED },
		{ "InvalidArgument", VGPUCTL_USAGE },
	};

	for (unsigned int i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(cls, map[i].cls))
			return map[i].code;
	return VGPUCTL_FAIL;
}

static const char *jstr(json_object *o, const char *key)
{
	return vgpuctl_jstr(o, key);
}

static uint64_t jnum(json_object *o, const char *key)
{
	json_object *v;

	return o && json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

static json_object *jobj(json_object *o, const char *key)
{
	json_object *v = NULL;

	if (o)
		json_object_object_get_ex(o, key, &v);
	return v;
}

static void print_json(json_object *o)
{
	puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
					    JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* Report an error reply; print a conflict's differences. Returns the exit code. */
static int report_error(struct vgpuctl_opts *o, json_object *rep)
{
	json_object *e = jobj(rep, "error"), *diff;

	if (o->json)
		print_json(rep);
	if (!json_object_is_type(e, json_type_object)) {
		vgpuctl_reply_bad("neither a \"return\" nor an \"error\" object");
		return VGPUCTL_FAIL;
	}
	diff = vgpuctl_jarr(jobj(e, "data"), "diff", false);
	fprintf(stderr, "vgpuctl: %s\n", jstr(e, "desc"));
	for (size_t i = 0; i < vgpuctl_jlen(diff); i++) {
		json_object *d = vgpuctl_jat(diff, i, "diff");

		fprintf(stderr, "  %s: current %s, requested %s\n", jstr(d, "field"),
			json_object_to_json_string(jobj(d, "current")),
			json_object_to_json_string(jobj(d, "requested")));
	}
	return class_exit(jstr(e, "class"));
}

/* Run @cmd with descriptor @fd (or -1) passed along; on success *@ret is the "return"
 * object (owned by *@rep). */
static int run_fd(struct ctlc *c, struct vgpuctl_opts *o, const char *cmd, json_object *args,
		  int fd, json_object **rep, json_object **ret)
{
	if (args && o->dry)
		json_object_object_add(args, "dry-run", json_object_new_boolean(true));
	struct cmn_fail f = { 0 };

	if (ctlc_request_fd(c, cmd, args, fd, rep, &f)) {
		fprintf(stderr, "vgpuctl: %s\n", f.msg);
		return VGPUCTL_UNREACHABLE;
	}
	vgpuctl_reply_begin(cmd);
	*ret = NULL;
	if (json_object_object_get_ex(*rep, "return", ret) &&
	    !json_object_is_type(*ret, json_type_object)) {
		vgpuctl_reply_bad("\"return\" is not an object");
		*ret = NULL;
	}
	if (!*ret) {
		int code = report_error(o, *rep);

		json_object_put(*rep);
		*rep = NULL;
		return code;
	}
	return 0;
}

/* Run @cmd; on success *@ret is the "return" object (owned by *@rep). */
static int run(struct ctlc *c, struct vgpuctl_opts *o, const char *cmd, json_object *args,
	       json_object **rep, json_object **ret)
{
	return run_fd(c, o, cmd, args, -1, rep, ret);
}

/* Whether @owner is VMUUID[:GEN], GEN decimal digits that fit an int64: a malformed token
 * is refused rather than read as generation 0, which an owned slice may hold. */
static bool owner_valid(const char *owner)
{
	const char *colon = strchr(owner, ':');
	char vm[64];
	char *end;

	snprintf(vm, sizeof(vm), "%.*s", colon ? (int)(colon - owner) : 63, owner);
	if (ctlc_uuid_parse(vm, NULL, NULL) || (!colon && strlen(owner) >= sizeof(vm)))
		return false;
	if (!colon)
		return true;
	if (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return false;
	errno = 0;
	strtoll(colon + 1, &end, 10);
	return !errno;
}

/* --owner VMUUID[:GEN] as the protocol's owner object (owner_valid() checked it). */
static json_object *owner_json(const char *owner)
{
	json_object *own = json_object_new_object();
	const char *colon = strchr(owner, ':');
	char vm[64];

	snprintf(vm, sizeof(vm), "%.*s", colon ? (int)(colon - owner) : 63, owner);
	json_object_object_add(own, "vm", json_object_new_string(vm));
	json_object_object_add(own, "generation",
			       json_object_new_int64(colon ? strtoll(colon + 1, NULL, 10) : 0));
	return own;
}

/* {"uuid"} plus the owner token if one was given (only the verbs that take --owner: stop,
 * start, modify, undefine; check_flags() refuses it elsewhere). */
static json_object *uuid_args(struct vgpuctl_opts *o)
{
	json_object *a = json_object_new_object();

	json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	if (o->owner)
		json_object_object_add(a, "owner", owner_json(o->owner));
	return a;
}

static int need_uuid(struct vgpuctl_opts *o)
{
	if (!o->uuid)
		return usage_error("%s needs -u/--uuid", o->verb);
	if (ctlc_uuid_parse(o->uuid, NULL, NULL))
		return usage_error("\"%s\" is not a UUID", o->uuid);
	return 0;
}

static int parent_check(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret;
	int r;

	if (!o->parent)
		return 0;
	r = run(c, o, "query-status", NULL, &rep, &ret);
	if (r)
		return r;
	if (strcmp(jstr(ret, "parent"), o->parent)) {
		fprintf(stderr, "vgpuctl: parent \"%s\" not found (this daemon serves %s)\n", o->parent,
			jstr(ret, "parent"));
		r = VGPUCTL_NOTFOUND;
	}
	json_object_put(rep);
	return r;
}

/* Print a mutating verb's result: "unchanged", a dry-run plan, or what happened. */
static void print_result(struct vgpuctl_opts *o, json_object *ret)
{
	const char *res = jstr(ret, "result");
	json_object *plan = jobj(ret, "plan");
	char a[32];

	if (o->json) {
		print_json(ret);
		return;
	}
	printf("%s%s%s%s%s\n", o->dry ? "dry run: " : "", jstr(ret, "uuid"),
	       jobj(ret, "uuid") ? " " : "", res,
	       json_object_get_boolean(jobj(ret, "transient")) ? " (transient)" : "");
	if (plan)
		printf("  plan: VF %d, %s VRAM at %#" PRIx64 ", BAR2 %s, %d channels, %d doorbells, "
		       "object %s\n", (int)jnum(plan, "vf"),
		       ctlc_size_format(jnum(plan, "vram_bytes"), a, sizeof(a)), jnum(plan, "vram_base"),
		       ctlc_size_format(jnum(plan, "bar_bytes"), a + 16, 16), (int)jnum(plan, "channels"),
		       (int)jnum(plan, "doorbells"), jstr(plan, "vram_object"));
	if (jobj(ret, "provisioned")) {
		json_object *p = jobj(ret, "provisioned");

		printf("  VF %d: %s VRAM, %d channels, %d doorbells, exec quantum %d us, preempt "
		       "timeout %d us, priority %s\n", (int)jnum(ret, "vf"),
		       ctlc_size_format(jnum(p, "vram_bytes"), a, sizeof(a)), (int)jnum(p, "channels"),
		       (int)jnum(p, "doorbells"), (int)jnum(p, "exec_quantum_us"),
		       (int)jnum(p, "preempt_timeout_us"), jstr(p, "priority"));
	}
	if (jobj(ret, "num_vfs"))
		printf("  %d VFs%s%s\n", (int)jnum(ret, "num_vfs"), jobj(ret, "fair_vram_bytes") ?
		       ", fair share " : "", jobj(ret, "fair_vram_bytes") ?
		       ctlc_size_format(jnum(ret, "fair_vram_bytes"), a, sizeof(a)) : "");
	if (jobj(ret, "file"))
		printf("  would write %s\n", jstr(ret, "file"));
	if (jobj(ret, "diff")) {
		json_object *diff = vgpuctl_jarr(ret, "diff", false);

		for (size_t i = 0; i < vgpuctl_jlen(diff); i++) {
			json_object *d = vgpuctl_jat(diff, i, "diff");

			printf("  %s: %s -> %s\n", jstr(d, "field"),
			       json_object_to_json_string(jobj(d, "current")),
			       json_object_to_json_string(jobj(d, "requested")));
		}
	}
	if (jobj(ret, "duration_us"))
		printf("  reset took %" PRIu64 " us\n", jnum(ret, "duration_us"));
	/* An announced reset (the guest acknowledges resets): how the wait for it ended. */
	if (jobj(ret, "guest"))
		printf("  announced to the guest: %s after %" PRIu64 " us\n", jstr(ret, "guest"),
		       jnum(ret, "waited_us"));
	else if (jobj(ret, "announced") && json_object_get_boolean(jobj(ret, "announced")))
		printf("  would be announced to the guest first\n");
}

static int simple(struct ctlc *c, struct vgpuctl_opts *o, const char *cmd, json_object *args)
{
	json_object *rep, *ret;
	int r = run(c, o, cmd, args, &rep, &ret);

	if (r)
		return r;
	print_result(o, ret);
	json_object_put(rep);
	return 0;
}

/* ---- verbs ----------------------------------------------------------------------------- */

/* A type's VRAM, channels and doorbells. The auto type's are derived when a slice starts
 * (the fair share of the enabled VFs): say so, with what they would be now. */
static void print_type_counts(json_object *t)
{
	json_object *dv = jobj(t, "derived");
	char a[32];

	if (!json_object_get_boolean(jobj(t, "fair_share"))) {
		printf("    VRAM: %s\n    Channels: %d\n    Doorbells: %d\n",
		       ctlc_size_format(jnum(t, "vram_bytes"), a, sizeof(a)),
		       (int)jnum(t, "channels"), (int)jnum(t, "doorbells"));
		return;
	}
	if (!dv) {
		printf("    VRAM: auto (fair share of the enabled VFs; none enabled)\n"
		       "    Channels: auto (from the fair share)\n"
		       "    Doorbells: auto (from the fair share)\n");
		return;
	}
	printf("    VRAM: auto (fair share of the enabled VFs: %s now)\n"
	       "    Channels: auto (from the fair share: %d now)\n"
	       "    Doorbells: auto (from the fair share: %d now)\n",
	       ctlc_size_format(jnum(dv, "vram_bytes"), a, sizeof(a)), (int)jnum(dv, "channels"),
	       (int)jnum(dv, "doorbells"));
}

static int cmd_types(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret, *types;
	int r = parent_check(c, o);

	if (!r)
		r = run(c, o, "query-types", NULL, &rep, &ret);
	if (r)
		return r;
	if (o->json)
		print_json(ret);
	else {
		types = vgpuctl_jarr(ret, "types", true);
		printf("%s\n", jstr(ret, "parent"));
		for (size_t i = 0; i < vgpuctl_jlen(types); i++) {
			json_object *t = vgpuctl_jat(types, i, "types");
			bool ok = json_object_get_boolean(jobj(t, "creatable"));

			if (!t)
				continue;
			printf("  %s\n", jstr(t, "name"));
			print_type_counts(t);
			printf("    Max instances: %d\n    Available instances: %d\n    Running: %d\n"
			       "    Creatable: %s%s%s\n", (int)jnum(t, "max_instances"),
			       (int)jnum(t, "available_instances"), (int)jnum(t, "running"),
			       ok ? "yes" : "no", ok ? "" : " - ", ok ? "" : jstr(t, "reason"));
		}
	}
	json_object_put(rep);
	return 0;
}

/* mdevctl list --dumpjson's shape: {"PARENT": [{"UUID": {"mdev_type", "start", "attrs"}}]},
 * which mdevctl define --jsonfile (and vgpuctl's) reads back. */
static void print_dumpjson(json_object *ret)
{
	json_object *top = json_object_new_object(), *arr = vgpuctl_jarr(ret, "slices", true);

	for (size_t i = 0; i < vgpuctl_jlen(arr); i++) {
		json_object *s = vgpuctl_jat(arr, i, "slices"), *dev, *one, *list;
		json_object *attrs = vgpuctl_jarr(s, "attrs", false);

		if (!s)
			continue;
		dev = json_object_new_object();
		one = json_object_new_object();
		list = jobj(top, jstr(s, "parent"));
		json_object_object_add(dev, "mdev_type", json_object_new_string(jstr(s, "mdev_type")));
		json_object_object_add(dev, "start", json_object_new_string(jstr(s, "start")));
		json_object_object_add(dev, "attrs", attrs ? json_object_get(attrs) :
				       json_object_new_array());
		json_object_object_add(one, jstr(s, "uuid"), dev);
		if (!list) {
			list = json_object_new_array();
			json_object_object_add(top, jstr(s, "parent"), list);
		}
		json_object_array_add(list, one);
	}
	print_json(top);
	json_object_put(top);
}

static int cmd_list(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret, *arr, *args = NULL;
	char a[32];
	int r;

	if (o->uuid) {
		r = need_uuid(o);
		if (r)
			return r;
		args = uuid_args(o);
	}
	r = parent_check(c, o);
	if (!r)
		r = run(c, o, "query-slices", args, &rep, &ret);
	else
		json_object_put(args);
	if (r)
		return r;
	if (o->json || o->dumpjson) {
		if (o->dumpjson)
			print_dumpjson(ret);
		else
			print_json(ret);
		json_object_put(rep);
		return 0;
	}
	arr = vgpuctl_jarr(ret, "slices", true);
	for (size_t i = 0; i < vgpuctl_jlen(arr); i++) {
		json_object *s = vgpuctl_jat(arr, i, "slices"), *p = jobj(s, "provisioned");

		if (!s)
			continue;
		printf("%s %s %s %s %s", jstr(s, "uuid"), jstr(s, "parent"), jstr(s, "mdev_type"),
		       json_object_get_boolean(jobj(s, "transient")) ? "transient" : jstr(s, "start"),
		       jstr(s, "state"));
		if (p)
			printf(" vf%d %s%s", (int)jnum(s, "vf"),
			       ctlc_size_format(jnum(p, "vram_bytes"), a, sizeof(a)),
			       json_object_get_boolean(jobj(s, "attached")) ? " attached" : "");
		putchar('\n');
		if (o->verbose && p)
			printf("  base %#" PRIx64 ", %d channels, %d doorbells, endpoint %s\n",
			       jnum(p, "vram_base"), (int)jnum(p, "channels"), (int)jnum(p, "doorbells"),
			       jstr(s, "endpoint"));
	}
	json_object_put(rep);
	return 0;
}

/* define --jsonfile FILE: mdevctl's device JSON ({"mdev_type", "start", "attrs"}, as one
 * element of --dumpjson's lists or bare) fills in the type, start and attributes. The
 * file is checked whole before anything is sent. */
static int load_jsonfile(struct vgpuctl_opts *o)
{
	json_object *f = json_object_from_file(o->jsonfile), *v;
	int r = 0;

	if (!f)
		return usage_error("--jsonfile %s: cannot read it as JSON (%s)", o->jsonfile,
				   json_util_get_last_err() ? json_util_get_last_err() : "?");
	if (o->type || o->start >= 0 || json_object_array_length(o->attrs))
		r = usage_error("--jsonfile %s: give the type, start and attributes in the file "
				"or as options, not both", o->jsonfile);
	else if (!json_object_is_type(f, json_type_object) ||
		 !json_object_object_get_ex(f, "mdev_type", &v) ||
		 !json_object_is_type(v, json_type_string))
		r = usage_error("--jsonfile %s: needs an object with a string \"mdev_type\"",
				o->jsonfile);
	else if (json_object_object_get_ex(f, "start", &v) &&
		 (!json_object_is_type(v, json_type_string) ||
		  (strcmp(json_object_get_string(v), "auto") &&
		   strcmp(json_object_get_string(v), "manual"))))
		r = usage_error("--jsonfile %s: \"start\" must be \"auto\" or \"manual\"",
				o->jsonfile);
	else if (json_object_object_get_ex(f, "attrs", &v) &&
		 !json_object_is_type(v, json_type_array))
		r = usage_error("--jsonfile %s: \"attrs\" must be an array of {name: value}",
				o->jsonfile);
	if (!r) {
		json_object_object_get_ex(f, "mdev_type", &v);
		o->type_buf = strdup(json_object_get_string(v));
		o->type = o->type_buf;
		o->start = json_object_object_get_ex(f, "start", &v) &&
			   !strcmp(json_object_get_string(v), "auto");
		if (json_object_object_get_ex(f, "attrs", &v)) {
			json_object_put(o->attrs);
			o->attrs = json_object_get(v);
		}
	}
	json_object_put(f);
	return r;
}

static int cmd_define(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a;
	int r;

	if (o->jsonfile && (r = load_jsonfile(o)))
		return r;
	a = json_object_new_object();
	if (!o->type) {
		json_object_put(a);
		return usage_error("%s needs -t/--type", o->verb);
	}
	if (o->uuid && (r = need_uuid(o))) {
		json_object_put(a);
		return r;
	}
	if (o->uuid)
		json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	json_object_object_add(a, "type", json_object_new_string(o->type));
	json_object_object_add(a, "start", json_object_new_string(o->start == 1 ? "auto" : "manual"));
	json_object_object_add(a, "attrs", json_object_get(o->attrs));
	if (o->owner)
		json_object_object_add(a, "owner", owner_json(o->owner));
	if (o->have_owner_uid)
		json_object_object_add(a, "owner_uid", json_object_new_int64(o->owner_uid));
	r = parent_check(c, o);
	if (r) {
		json_object_put(a);
		return r;
	}
	return simple(c, o, "define-slice", a);
}

static int uuid_verb(struct ctlc *c, struct vgpuctl_opts *o, const char *cmd)
{
	int r = need_uuid(o);

	if (!r)
		r = parent_check(c, o);
	return r ? r : simple(c, o, cmd, uuid_args(o));
}

static int cmd_undefine(struct ctlc *c, struct vgpuctl_opts *o) { return uuid_verb(c, o, "undefine-slice"); }

/* start -p PARENT -t TYPE [-u UUID] [quota flags]: mdevctl's transient start. The daemon
 * checks the parent, so a wrong one changes nothing and says which parent it serves. */
static int start_transient(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a;
	int r;

	if (!o->parent)
		return usage_error("start -t %s needs -p/--parent (a transient start names both)",
				   o->type);
	if (o->start >= 0)
		return usage_error("start -t: a transient slice has no start mode (--auto/--manual "
				   "are for define)");
	if (o->uuid && (r = need_uuid(o)))
		return r;
	a = json_object_new_object();
	json_object_object_add(a, "parent", json_object_new_string(o->parent));
	json_object_object_add(a, "type", json_object_new_string(o->type));
	if (o->uuid)
		json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	if (json_object_array_length(o->attrs))
		json_object_object_add(a, "attrs", json_object_get(o->attrs));
	if (o->owner)
		json_object_object_add(a, "owner", owner_json(o->owner));
	if (o->have_owner_uid)
		json_object_object_add(a, "owner_uid", json_object_new_int64(o->owner_uid));
	return simple(c, o, "start-slice", a);
}

static int cmd_start(struct ctlc *c, struct vgpuctl_opts *o)
{
	return o->type ? start_transient(c, o) : uuid_verb(c, o, "start-slice");
}
static int cmd_stop(struct ctlc *c, struct vgpuctl_opts *o) { return uuid_verb(c, o, "stop-slice"); }
static int cmd_reclaim(struct ctlc *c, struct vgpuctl_opts *o) { return uuid_verb(c, o, "reclaim-slice"); }

static int cmd_modify(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a;
	int r = need_uuid(o);

	if (r)
		return r;
	a = uuid_args(o);
	if (o->type)
		json_object_object_add(a, "type", json_object_new_string(o->type));
	if (o->start >= 0)
		json_object_object_add(a, "start", json_object_new_string(o->start ? "auto" : "manual"));
	if (json_object_array_length(o->attrs))
		json_object_object_add(a, "attrs", json_object_get(o->attrs));
	if (o->have_owner_uid)
		json_object_object_add(a, "owner_uid", json_object_new_int64(o->owner_uid));
	if (o->release_owner)
		json_object_object_add(a, "release-owner", owner_json(o->release_owner));
	return simple(c, o, "modify-slice", a);
}

static int parse_count(const char *s, long min, long max, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return !*s || *end || errno || *out < min || *out > max ? -EINVAL : 0;
}

static int cmd_set_vfs(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a;
	long n;

	if (parse_count(o->args[0], 0, 1000, &n))
		return usage_error("%s: \"%s\" is not a number of VFs (0..1000)", o->verb,
				   o->args[0]);
	a = json_object_new_object();
	json_object_object_add(a, "num_vfs", json_object_new_int((int)n));
	return simple(c, o, "set-vfs", a);
}

static int cmd_reset(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a;
	long vf;

	if (o->uuid && o->nargs)
		return usage_error("%s takes -u UUID or a VF number, not both", o->verb);
	if (o->uuid)
		return uuid_verb(c, o, "reset-vf");
	if (!o->nargs)
		return usage_error("%s needs -u UUID or a VF number (1..63)", o->verb);
	if (parse_count(o->args[0], 1, 63, &vf))
		return usage_error("%s: \"%s\" is not a VF number (1..63)", o->verb, o->args[0]);
	a = json_object_new_object();
	json_object_object_add(a, "vf", json_object_new_int((int)vf));
	return simple(c, o, "reset-vf", a);
}

static int cmd_status(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret;
	char a[32], b[32], d[32], e[32];
	int r = run(c, o, "query-status", NULL, &rep, &ret);

	if (r)
		return r;
	if (o->json)
		print_json(ret);
	else
		printf("Parent: %s\nModel: %s\nVRAM: %s (PF spare %s, free %s, largest free extent %s)\n"
		       "VFs: %d enabled of %d, %d in use\nSlices: %d defined, %d transient\nChannels: %d of %d used\n"
		       "Doorbells: %d of %d used\nScheduler: %s\nRuntime dir: %s\nState dir: %s\n",
		       jstr(ret, "parent"), jstr(ret, "model"),
		       ctlc_size_format(jnum(ret, "vram_bytes"), a, sizeof(a)),
		       ctlc_size_format(jnum(ret, "spare_vram_bytes"), b, sizeof(b)),
		       ctlc_size_format(jnum(ret, "free_vram_bytes"), d, sizeof(d)),
		       ctlc_size_format(jnum(ret, "largest_free_bytes"), e, sizeof(e)),
		       (int)jnum(ret, "num_vfs"), (int)jnum(ret, "max_vfs"), (int)jnum(ret, "vfs_in_use"),
		       (int)jnum(ret, "slices_defined"), (int)jnum(ret, "slices_transient"),
		       (int)jnum(ret, "channels_used"),
		       (int)jnum(ret, "channels_total"), (int)jnum(ret, "doorbells_used"),
		       (int)jnum(ret, "doorbells_total"), jstr(ret, "sched_policy"),
		       jstr(ret, "runtime_dir"), jstr(ret, "state_dir"));
	json_object_put(rep);
	return 0;
}

static int cmd_stats(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret, *arr, *a = NULL;
	char u[32];
	long vf;
	int r;

	if (o->nargs == 1) {
		if (parse_count(o->args[0], 1, 63, &vf))
			return usage_error("\"%s\" is not a VF number (1..63)", o->args[0]);
		a = json_object_new_object();
		json_object_object_add(a, "vf", json_object_new_int((int)vf));
	}
	r = run(c, o, "query-stats", a, &rep, &ret);
	if (r)
		return r;
	if (o->json) {
		print_json(ret);
		json_object_put(rep);
		return 0;
	}
	printf("%-3s %-36s %10s %8s %8s %8s %8s %7s %7s %6s %10s\n", "VF", "UUID", "RUN_MS", "SLICES",
	       "PREEMPT", "DB_RUNG", "DB_BAD", "RPC_OK", "RPC_ERR", "RESETS", "VRAM_USED");
	arr = vgpuctl_jarr(ret, "vfs", true);
	for (size_t i = 0; i < vgpuctl_jlen(arr); i++) {
		json_object *s = vgpuctl_jat(arr, i, "vfs"), *sc = jobj(s, "sched");
		json_object *db = jobj(s, "doorbell"), *rpc = jobj(s, "rpc");

		if (!s)
			continue;
		printf("%-3d %-36s %10.1f %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %7" PRIu64
		       " %7" PRIu64 " %6" PRIu64 " %10s\n", (int)jnum(s, "vf"), jstr(s, "uuid"),
		       (double)jnum(sc, "run_ns") / 1e6, jnum(sc, "slices"), jnum(sc, "preempt_timeouts"),
		       jnum(db, "rung"), jnum(db, "invalid") + jnum(db, "disabled"), jnum(rpc, "ok"),
		       jnum(rpc, "errors"), jnum(s, "resets"),
		       ctlc_size_format(jnum(s, "vram_used_bytes"), u, sizeof(u)));
	}
	json_object_put(rep);
	return 0;
}

static int cmd_vram_map(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret;
	int r = run(c, o, "query-vram-map", NULL, &rep, &ret);

	if (r)
		return r;
	if (o->json)
		print_json(ret);
	r = vgpuctl_vram_map_draw(ret, o->json ? stderr : stdout, o->color, o->svg);
	if (r && !vgpuctl_reply_problem())
		fprintf(stderr, "vgpuctl: cannot draw the map%s%s: %s%s\n", o->svg ? " to " : "",
			o->svg ? o->svg : "", strerror(-r),
			r == -EEXIST ? " (vram-map never overwrites a file, nor follows a link)" :
			"");
	else if (!r && o->svg && !o->json && !vgpuctl_reply_problem())
		printf("SVG written to %s\n", o->svg);
	json_object_put(rep);
	return r == -EEXIST ? VGPUCTL_CONFLICT : r ? VGPUCTL_FAIL : 0;
}

/* fsync the directory holding @path, so that a name made in it survives a crash: 0 or an
 * errno. */
static int sync_dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int fd, err = 0;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if (snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path) >= (int)sizeof(dir))
		return ENAMETOOLONG;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (fsync(fd))
		err = errno;
	close(fd);
	return err;
}

/* Make what vgpud wrote to @fd, the new file @path, durable, and its name: 0, or an errno
 * with *@what the step that failed. @fd is closed either way. */
static int save_sync(int fd, const char *path, const char **what)
{
	int err = fsync(fd) ? errno : 0;

	if (close(fd) && !err)
		err = errno;
	*what = "write";
	if (!err) {
		*what = "sync the directory of";
		err = sync_dir_of(path);
	}
	return err;
}

/* save -u UUID FILE: vgpud writes the slice's migration stream into FILE, which vgpuctl
 * creates with the caller's rights (never over an existing file) and passes as a
 * descriptor; "saved" once the file and its name are durable (fsync of both); a failed
 * save leaves no file. */
static int cmd_save(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret;
	char a[32], b[32];
	const char *what;
	int r = need_uuid(o), fd = -1, err;

	if (!r)
		r = parent_check(c, o);
	if (r)
		return r;
	if (!o->dry) {
		fd = open(o->args[0], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			fprintf(stderr, "vgpuctl: cannot create %s: %s%s\n", o->args[0], strerror(errno),
				errno == EEXIST ? " (save never overwrites a file)" : "");
			return errno == EEXIST ? VGPUCTL_CONFLICT : VGPUCTL_FAIL;
		}
	}
	r = run_fd(c, o, "save-slice", uuid_args(o), fd, &rep, &ret);
	if (fd >= 0 && r) {
		close(fd);
	} else if (fd >= 0 && (err = save_sync(fd, o->args[0], &what))) {
		fprintf(stderr, "vgpuctl: cannot %s %s: %s\n", what, o->args[0], strerror(err));
		json_object_put(rep);
		r = VGPUCTL_FAIL;
	}
	if (r) {
		if (fd >= 0)
			unlink(o->args[0]);
		return r;
	}
	if (o->json)
		print_json(ret);
	else if (o->dry)
		printf("%s: would save (VF %d) to %s\n", jstr(ret, "uuid"), (int)jnum(ret, "vf"),
		       o->args[0]);
	else
		printf("%s: saved to %s: %s of VRAM and %s of DMA memory populated, %" PRIu64
		       " extents\n", jstr(ret, "uuid"), o->args[0],
		       ctlc_size_format(jnum(ret, "vram_bytes_saved"), a, sizeof(a)),
		       ctlc_size_format(jnum(ret, "dma_bytes_saved"), b, sizeof(b)),
		       jnum(ret, "extents"));
	json_object_put(rep);
	return 0;
}

/* restore FILE: vgpud checks the whole stream and its own limits, then defines the slice
 * and starts it with the saved contents, or refuses and changes nothing. */
static int cmd_restore(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *rep, *ret;
	char a[32], b[32];
	int r = parent_check(c, o), fd;

	if (r)
		return r;
	fd = open(o->args[0], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "vgpuctl: cannot open %s: %s\n", o->args[0], strerror(errno));
		return errno == ENOENT ? VGPUCTL_NOTFOUND : VGPUCTL_FAIL;
	}
	r = run_fd(c, o, "restore-slice", json_object_new_object(), fd, &rep, &ret);
	close(fd);
	if (r)
		return r;
	if (o->json)
		print_json(ret);
	else
		printf("%s: %s on VF %d (type %s%s): %s of VRAM and %s of DMA memory loaded\n",
		       jstr(ret, "uuid"), jstr(ret, "result"), (int)jnum(ret, "vf"), jstr(ret, "type"),
		       json_object_get_boolean(jobj(ret, "transient")) ? ", transient" : "",
		       ctlc_size_format(jnum(ret, "vram_bytes_loaded"), a, sizeof(a)),
		       ctlc_size_format(jnum(ret, "dma_bytes_loaded"), b, sizeof(b)));
	json_object_put(rep);
	return 0;
}

/* ---- live migration (doc/migration.md) ------------------------------------------------------- */

/* One migration record as a line: role, status, round, bytes, dirty bytes, estimate. */
static void migration_line(json_object *m)
{
	char a[32], b[32], c[32], d[32];

	printf("%s %s: %s, round %d, %s sent, %s in the last pass, %s left (~%" PRIu64 " ms)",
	       jstr(m, "uuid")[0] ? jstr(m, "uuid") : "(not yet known)", jstr(m, "role"),
	       jstr(m, "status"), (int)jnum(m, "round"),
	       ctlc_size_format(jnum(m, "bytes"), a, sizeof(a)),
	       ctlc_size_format(jnum(m, "dirty_bytes"), b, sizeof(b)),
	       ctlc_size_format(jnum(m, "remaining_bytes"), c, sizeof(c)), jnum(m, "estimate_ms"));
	if (jnum(m, "dirty_bytes_per_s"))
		printf(", dirtied at %s/s", ctlc_size_format(jnum(m, "dirty_bytes_per_s"), d, sizeof(d)));
	if (jobj(m, "downtime_ms"))
		printf(", downtime %.1f ms", json_object_get_double(jobj(m, "downtime_ms")));
	printf(", %.0f ms in all", json_object_get_double(jobj(m, "total_ms")));
	if (jobj(m, "error"))
		printf(": %s", jstr(m, "error"));
	putchar('\n');
}

static bool migration_done(json_object *m)
{
	const char *st = jstr(m, "status");

	return !strcmp(st, "completed") || !strcmp(st, "failed") || !strcmp(st, "cancelled");
}

/* The record of @uuid's migration (owned by *@rep), or an exit code. A reply without the
 * record, or with one that is not an object, is malformed (vgpud answers NotFound for a
 * slice it has no migration of): the caller's loop must not wait on it. */
static int migration_get(struct ctlc *c, struct vgpuctl_opts *o, json_object **rep,
			 json_object **m)
{
	json_object *a = json_object_new_object(), *ret, *arr;
	int r;

	json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	r = run(c, o, "migrate-status", a, rep, &ret);
	if (r)
		return r;
	arr = vgpuctl_jarr(ret, "migrations", true);
	if (arr && !vgpuctl_jlen(arr))
		vgpuctl_reply_bad("\"migrations\" is empty");
	*m = vgpuctl_jat(arr, 0, "migrations");
	if (!*m || vgpuctl_reply_problem()) {
		json_object_put(*rep);
		*rep = NULL;
		return VGPUCTL_FAIL;
	}
	return 0;
}

/* migrate -u UUID --to ADDR: start it, then follow it until it ends (or waits for a
 * manual switchover), printing each change. */
static int cmd_migrate(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a, *rep, *ret, *m = NULL;
	char last[512] = "";
	int r = need_uuid(o);

	if (r)
		return r;
	if (!o->to)
		return usage_error("%s", "migrate needs --to ADDR (the destination's migrate-incoming "
				   "address: a UNIX socket path or tcp:HOST:PORT)");
	a = uuid_args(o);
	json_object_object_add(a, "to", json_object_new_string(o->to));
	if (o->switchover)
		json_object_object_add(a, "switchover", json_object_new_string(o->switchover));
	if (o->max_rounds)
		json_object_object_add(a, "max-rounds", json_object_new_int((int)o->max_rounds));
	r = run(c, o, "migrate-outgoing", a, &rep, &ret);
	if (r)
		return r;
	if (o->dry || o->no_wait) {
		print_result(o, ret);
		json_object_put(rep);
		return 0;
	}
	json_object_put(rep);
	for (;;) {
		char now[512];

		r = migration_get(c, o, &rep, &m);
		if (r)
			return r;
		snprintf(now, sizeof(now), "%s %d", jstr(m, "status"), (int)jnum(m, "round"));
		if (!o->json && strcmp(now, last))
			migration_line(m);
		snprintf(last, sizeof(last), "%s", now);
		/* A record it cannot read never ends: stop following it (main says why). */
		if (migration_done(m) || !strcmp(jstr(m, "status"), "waiting") ||
		    vgpuctl_reply_problem())
			break;
		json_object_put(rep);
		usleep(100000);		/* a human's progress display, not a test's wait */
	}
	if (o->json)
		print_json(m);
	r = !strcmp(jstr(m, "status"), "completed") || !strcmp(jstr(m, "status"), "waiting") ?
	    0 : VGPUCTL_FAIL;
	json_object_put(rep);
	return r;
}

static int cmd_migrate_incoming(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a, *rep, *ret;
	int r = o->uuid ? need_uuid(o) : 0;

	if (r)
		return r;
	if (!o->listen)
		return usage_error("%s", "migrate-incoming needs --listen ADDR (a UNIX socket path "
				   "or tcp:HOST:PORT)");
	a = json_object_new_object();
	json_object_object_add(a, "listen", json_object_new_string(o->listen));
	if (o->uuid)
		json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	if (o->type)
		json_object_object_add(a, "type", json_object_new_string(o->type));
	if (o->have_owner_uid)
		json_object_object_add(a, "owner_uid", json_object_new_int64(o->owner_uid));
	r = run(c, o, "migrate-incoming", a, &rep, &ret);
	if (r)
		return r;
	if (o->json)
		print_json(ret);
	else if (o->dry)
		printf("dry run: would listen on %s\n", o->listen);
	else
		printf("listening on %s for %s\n", jstr(ret, "listen"), o->uuid ? o->uuid : "a slice");
	json_object_put(rep);
	return 0;
}

/* A verb that takes -u UUID (or --listen for cancel) and prints the result. */
static int migrate_simple(struct ctlc *c, struct vgpuctl_opts *o, const char *cmd)
{
	json_object *a = json_object_new_object(), *rep, *ret;
	int r = o->uuid || !o->listen ? need_uuid(o) : 0;

	if (r) {
		json_object_put(a);
		return r;
	}
	if (o->uuid)
		json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	else
		json_object_object_add(a, "listen", json_object_new_string(o->listen));
	r = run(c, o, cmd, a, &rep, &ret);
	if (r)
		return r;
	if (o->json)
		print_json(ret);
	else
		printf("%s%s: %s\n", o->dry ? "dry run: " : "", jstr(ret, "uuid")[0] ?
		       jstr(ret, "uuid") : o->listen, jobj(ret, "result") ? jstr(ret, "result") :
		       "switchover started");
	json_object_put(rep);
	return 0;
}

static int cmd_migrate_switchover(struct ctlc *c, struct vgpuctl_opts *o)
{
	return migrate_simple(c, o, "migrate-switchover");
}

static int cmd_migrate_cancel(struct ctlc *c, struct vgpuctl_opts *o)
{
	return migrate_simple(c, o, "migrate-cancel");
}

static int cmd_migrate_status(struct ctlc *c, struct vgpuctl_opts *o)
{
	json_object *a = NULL, *rep, *ret, *arr;
	int r = o->uuid ? need_uuid(o) : 0;

	if (r)
		return r;
	if (o->uuid) {
		a = json_object_new_object();
		json_object_object_add(a, "uuid", json_object_new_string(o->uuid));
	}
	r = run(c, o, "migrate-status", a, &rep, &ret);
	if (r)
		return r;
	arr = o->json ? NULL : vgpuctl_jarr(ret, "migrations", true);
	if (o->json)
		print_json(ret);
	else if (!vgpuctl_jlen(arr) && !vgpuctl_reply_problem())
		printf("no migrations\n");
	for (size_t i = 0; i < vgpuctl_jlen(arr); i++) {
		json_object *m = vgpuctl_jat(arr, i, "migrations");

		if (m)
			migration_line(m);
	}
	json_object_put(rep);
	return 0;
}

static const struct vgpuctl_verb verbs[] = {
	{ "types",	cmd_types,	0, 0, "", "slice types: supported, and creatable now (or why not)", 0 },
	{ "list",	cmd_list,	0, 0, "", "slices: defined and running [-u UUID] [-v] [--dumpjson]", 0 },
	{ "define",	cmd_define,	0, 0, "", "-t TYPE | --jsonfile FILE [-u UUID] [--auto|--manual] [quota flags] [--owner VM[:GEN]]",
	  VF_BIT(VF_QUOTA) | VF_BIT(VF_TYPE) | VF_BIT(VF_START) | VF_BIT(VF_OWNER_UID) |
	  VF_BIT(VF_OWNER) },
	{ "undefine",	cmd_undefine,	0, 0, "", "-u UUID [--owner VM[:GEN]]", VF_BIT(VF_OWNER) },
	{ "start",	cmd_start,	0, 0, "", "-u UUID: give the slice a VF, its VRAM partition and endpoint;"
	  " -p PARENT -t TYPE [-u UUID] [quota flags]: a transient slice (no definition, gone when stopped)",
	  /* quota flags and --owner-uid only with -t (start_transient() says so) */
	  VF_BIT(VF_QUOTA) | VF_BIT(VF_TYPE) | VF_BIT(VF_START) | VF_BIT(VF_OWNER_UID) |
	  VF_BIT(VF_OWNER) },
	{ "stop",	cmd_stop,	0, 0, "", "-u UUID [--owner VM[:GEN]]: reset the VF and release the partition (a transient slice is removed)",
	  VF_BIT(VF_OWNER) },
	{ "modify",	cmd_modify,	0, 0, "", "-u UUID [-t TYPE] [--auto|--manual] [quota flags] [--owner-uid U] [--release-owner VM[:GEN]]",
	  VF_BIT(VF_QUOTA) | VF_BIT(VF_TYPE) | VF_BIT(VF_START) | VF_BIT(VF_OWNER_UID) |
	  VF_BIT(VF_RELEASE) | VF_BIT(VF_OWNER) },
	{ "set-vfs",	cmd_set_vfs,	1, 1, "N", "N: enable N VFs (sriov_numvfs semantics)", 0 },
	{ "status",	cmd_status,	0, 0, "", "the device: VRAM, VFs, budgets", 0 },
	{ "reset",	cmd_reset,	0, 1, "VF", "VF | -u UUID: function-level reset of one VF", 0 },
	{ "stats",	cmd_stats,	0, 1, "VF", "[VF]: scheduler, doorbell and RPC counters per VF", 0 },
	{ "vram-map",	cmd_vram_map,	0, 0, "", "[--svg FILE] [--no-color]: the VRAM layout", 0 },
	{ "save",	cmd_save,	1, 1, "FILE", "-u UUID FILE: a running slice (its definition, VRAM and DMA memory, a quiesced guest's state) to a new FILE", 0 },
	{ "restore",	cmd_restore,	1, 1, "FILE", "FILE: define and start the slice saved in FILE, with its contents (or refuse, changing nothing)", 0 },
	{ "migrate",	cmd_migrate,	0, 0, "", "-u UUID --to ADDR [--switchover auto|manual|vmm] [--max-rounds N] [--no-wait]: live-migrate a running slice to the vgpud listening at ADDR",
	  VF_BIT(VF_MIGRATE) },
	{ "migrate-incoming", cmd_migrate_incoming, 0, 0, "",
	  "--listen ADDR [-u UUID] [-t TYPE] [--owner-uid U]: wait for one incoming live "
	  "migration on ADDR (a UNIX socket path or tcp:HOST:PORT); -t: only a slice with TYPE's "
	  "sizes; --owner-uid: its owner here", VF_BIT(VF_TYPE) | VF_BIT(VF_OWNER_UID) },
	{ "migrate-switchover", cmd_migrate_switchover, 0, 0, "", "-u UUID: a source waiting in a manual switchover stops the slice and sends the rest", 0 },
	{ "migrate-status", cmd_migrate_status, 0, 0, "", "[-u UUID]: live migrations here (state, round, bytes, dirty bytes, estimate)", 0 },
	{ "migrate-cancel", cmd_migrate_cancel, 0, 0, "", "-u UUID | --listen ADDR: cancel a "
	  "live migration (a source runs on, untouched, unless its final END went out: held)", 0 },
	{ "reclaim",	cmd_reclaim,	0, 0, "", "-u UUID: drop the hand-over record of a slice that migrated out unconfirmed, so it can start here again (undefine drops the slice)", 0 },
};
#define VGPUCTL_NR_VERBS	(sizeof(verbs) / sizeof(verbs[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: vgpuctl [options] VERB [args]\n       vgpuctl help VERB\n\nverbs:\n");
	for (unsigned int i = 0; i < VGPUCTL_NR_VERBS; i++)
		fprintf(f, "  %-9s %s\n", verbs[i].name, verbs[i].help);
	fprintf(f, "\noptions:\n"
		"  -p, --parent PF        the PF the daemon serves (checked)\n"
		"  -t, --type TYPE        slice type\n"
		"  -u, --uuid UUID        slice UUID\n"
		"  -a, --auto / -m, --manual   start with the daemon, or only when asked\n"
		"      --vram SIZE  --channels N  --doorbells N  --exec-quantum-us N (or -ms)\n"
		"      --preempt-timeout-us N  --priority low|normal\n"
		"      --rm-clients N  --rm-objects N   custom quotas (RM limits: clients, objects)\n"
		"      --owner VMUUID[:GEN]  --owner-uid USER|UID  owner token, user that may attach\n"
		"      --json             versioned JSON output (sizes in bytes)\n"
		"      --dumpjson         list: mdevctl's JSON ({PARENT: [{UUID: {mdev_type, ...}}]})\n"
		"      --jsonfile FILE    define: type, start and attrs from mdevctl's JSON\n"
		"      --dry-run          print the plan, change nothing, same exit code\n"
		"      --socket PATH      control socket (default $VGPUD_SOCKET or "
		"/run/vgpud/control.sock)\n"
		"      --to ADDR  --listen ADDR   migrate: the destination; migrate-incoming: where\n"
		"                         to listen (a UNIX socket path or tcp:HOST:PORT)\n"
		"      --switchover auto|manual|vmm  --max-rounds N  --no-wait   migrate's options\n"
		"      --svg FILE         vram-map: also write an SVG picture\n"
		"      --no-color         vram-map: no ANSI colours\n"
		"  -d, --defined          list: accepted for mdevctl habits (all are listed)\n"
		"  -v, --verbose          more detail\n"
		"  -V, --version          print the version\n"
		"\nexit: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict/busy, 5 insufficient\n"
		"resources, 6 daemon unreachable, 7 permission denied\n");
}

enum { O_JSON = 256, O_DRY, O_SOCKET, O_SVG, O_NOCOLOR, O_VRAM, O_CHANNELS, O_DOORBELLS,
       O_EXEC, O_EXEC_US, O_PREEMPT, O_PRIO, O_OWNER, O_OWNER_UID, O_RELEASE_OWNER, O_RM_CLIENTS,
       O_RM_OBJECTS, O_DUMPJSON, O_JSONFILE, O_TO, O_LISTEN, O_SWITCHOVER, O_MAX_ROUNDS,
       O_NO_WAIT };

static const struct option long_opts[] = {
	{ "parent", required_argument, NULL, 'p' }, { "type", required_argument, NULL, 't' },
	{ "uuid", required_argument, NULL, 'u' }, { "auto", no_argument, NULL, 'a' },
	{ "manual", no_argument, NULL, 'm' }, { "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' }, { "json", no_argument, NULL, O_JSON },
	{ "defined", no_argument, NULL, 'd' }, { "version", no_argument, NULL, 'V' },
	{ "dumpjson", no_argument, NULL, O_DUMPJSON },
	{ "jsonfile", required_argument, NULL, O_JSONFILE }, { "dry-run", no_argument, NULL, O_DRY },
	{ "socket", required_argument, NULL, O_SOCKET }, { "svg", required_argument, NULL, O_SVG },
	{ "no-color", no_argument, NULL, O_NOCOLOR }, { "vram", required_argument, NULL, O_VRAM },
	{ "channels", required_argument, NULL, O_CHANNELS },
	{ "doorbells", required_argument, NULL, O_DOORBELLS },
	{ "exec-quantum-ms", required_argument, NULL, O_EXEC },
	{ "exec-quantum-us", required_argument, NULL, O_EXEC_US },
	{ "preempt-timeout-us", required_argument, NULL, O_PREEMPT },
	{ "priority", required_argument, NULL, O_PRIO }, { "owner", required_argument, NULL, O_OWNER },
	{ "owner-uid", required_argument, NULL, O_OWNER_UID },
	{ "release-owner", required_argument, NULL, O_RELEASE_OWNER },
	{ "rm-clients", required_argument, NULL, O_RM_CLIENTS },
	{ "rm-objects", required_argument, NULL, O_RM_OBJECTS },
	{ "to", required_argument, NULL, O_TO }, { "listen", required_argument, NULL, O_LISTEN },
	{ "switchover", required_argument, NULL, O_SWITCHOVER },
	{ "max-rounds", required_argument, NULL, O_MAX_ROUNDS },
	{ "no-wait", no_argument, NULL, O_NO_WAIT }, { NULL, 0, NULL, 0 },
};

/* --owner-uid takes a user name (libvirt-qemu) or a number. */
static int parse_owner_uid(const char *arg, long *uid)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (!parse_count(arg, 0, 2147483647L, uid))
		return 0;
	if (getpwnam_r(arg, &pw, buf, sizeof(buf), &res) || !res)
		return -EINVAL;
	*uid = (long)pw.pw_uid;
	return 0;
}

static int add_attr(struct vgpuctl_opts *o, const char *key, json_object *v)
{
	json_object *a = json_object_new_object();

	json_object_object_add(a, key, v);
	json_object_array_add(o->attrs, a);
	return 0;
}

static int quota_flag(struct vgpuctl_opts *o, int opt, const char *arg)
{
	/* The daemon checks the same ranges; checked here too so the message names the flag. */
	static const struct { int opt; const char *key, *flag; long min, max; } nums[] = {
		{ O_CHANNELS, "channels", "--channels", 1, 64 },
		{ O_DOORBELLS, "doorbells", "--doorbells", 1, 1024 },
		{ O_EXEC, "exec_quantum_ms", "--exec-quantum-ms", 0, 100000 },
		{ O_EXEC_US, "exec_quantum_us", "--exec-quantum-us", 0, 100000000 },
		{ O_PREEMPT, "preempt_timeout_us", "--preempt-timeout-us", 0, 10000000 },
		{ O_RM_CLIENTS, "rm_clients", "--rm-clients", 1, 1023 },
		{ O_RM_OBJECTS, "rm_objects", "--rm-objects", 1, 1 << 20 },
	};
	static const char *const prios[] = { "low", "normal" };	/* "high" is the PF's */
	uint64_t size;
	long n;
	char buf[32];

	if (opt == O_VRAM) {
		if (ctlc_size_parse(arg, &size) || size < (2u << 20))
			return usage_error("bad size \"%s\" (bytes or K/M/G/T, at least 2M)", arg);
		snprintf(buf, sizeof(buf), "%" PRIu64, size);
		return add_attr(o, "vram_bytes", json_object_new_string(buf));
	}
	for (unsigned int i = 0; opt == O_PRIO && i < sizeof(prios) / sizeof(prios[0]); i++)
		if (!strcasecmp(arg, prios[i]))
			return add_attr(o, "priority", json_object_new_string(prios[i]));
	if (opt == O_PRIO)
		return usage_error("bad priority \"%s\" (low, normal)", arg);
	for (unsigned int i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		if (nums[i].opt != opt)
			continue;
		if (parse_count(arg, nums[i].min, nums[i].max, &n))
			return usage_error("bad %s \"%s\": need a number in %ld..%ld", nums[i].flag,
					   arg, nums[i].min, nums[i].max);
		return add_attr(o, nums[i].key, json_object_new_int((int)n));
	}
	return VGPUCTL_USAGE;
}

/* Remember the first flag of group @g given (@name; NULL: the option getopt just read). */
static void flag_given(struct vgpuctl_opts *o, unsigned int g, const char *name)
{
	if (o->given[g])
		return;
	if (!name) {
		for (const struct option *l = long_opts; l->name && !name; l++)
			if (l->val == o->last_opt)
				name = l->name;
		snprintf(o->given_buf, sizeof(o->given_buf), "--%s", name ? name : "?");
		name = o->given_buf;
	}
	o->given[g] = name;
}

static int parse_args(int argc, char **argv, struct vgpuctl_opts *o)
{
	int c, r;

	while ((c = getopt_long(argc, argv, "+p:t:u:amvhdV", long_opts, NULL)) != -1 ||
	       optind < argc) {
		if (c == -1) {			/* the verb or an argument; options may follow */
			if (!o->verb)
				o->verb = argv[optind++];
			else if (o->nargs < VGPUCTL_MAX_ARGS)
				o->args[o->nargs++] = argv[optind++];
			else
				return usage_error("%s", "too many arguments");
			continue;
		}
		o->last_opt = c;
		switch (c) {
		case 'p': o->parent = optarg; break;
		case 't': o->type = optarg; flag_given(o, VF_TYPE, "-t"); break;
		case 'u': o->uuid = optarg; break;
		case 'a': o->start = 1; flag_given(o, VF_START, "--auto"); break;
		case 'm': o->start = 0; flag_given(o, VF_START, "--manual"); break;
		case 'v': o->verbose = true; break;
		case 'h': usage(stdout); exit(0);
		case 'V': puts("vgpuctl " VGPU_VERSION); exit(0);
		case 'd': break;	/* mdevctl's list -d: every slice is listed with its state */
		case O_JSON: o->json = true; break;
		case O_DUMPJSON: o->dumpjson = true; break;
		case O_JSONFILE: o->jsonfile = optarg; break;
		case O_DRY: o->dry = true; break;
		case O_SOCKET: o->socket = optarg; break;
		case O_SVG: o->svg = optarg; break;
		case O_NOCOLOR: o->color = false; break;
		case O_OWNER:
		case O_RELEASE_OWNER:
			if (!owner_valid(optarg))
				return usage_error("bad --%s \"%s\": need VMUUID[:GENERATION], the "
						   "generation in decimal digits", c == O_OWNER ?
						   "owner" : "release-owner", optarg);
			*(c == O_OWNER ? &o->owner : &o->release_owner) = optarg;
			flag_given(o, c == O_OWNER ? VF_OWNER : VF_RELEASE,
				   c == O_OWNER ? "--owner" : "--release-owner");
			break;
		case O_TO: o->to = optarg; flag_given(o, VF_MIGRATE, "--to"); break;
		case O_LISTEN: o->listen = optarg; break;
		case O_NO_WAIT: o->no_wait = true; flag_given(o, VF_MIGRATE, "--no-wait"); break;
		case O_SWITCHOVER:
			if (strcmp(optarg, "auto") && strcmp(optarg, "manual") &&
			    strcmp(optarg, "vmm"))
				return usage_error("bad --switchover \"%s\" (auto, manual, vmm)",
						   optarg);
			o->switchover = optarg;
			flag_given(o, VF_MIGRATE, "--switchover");
			break;
		case O_MAX_ROUNDS:
			if (parse_count(optarg, 1, 64, &o->max_rounds))
				return usage_error("bad --max-rounds \"%s\": need a number in 1..64",
						   optarg);
			flag_given(o, VF_MIGRATE, "--max-rounds");
			break;
		case O_OWNER_UID:
			o->have_owner_uid = true;
			flag_given(o, VF_OWNER_UID, "--owner-uid");
			if (parse_owner_uid(optarg, &o->owner_uid))
				return usage_error("bad --owner-uid \"%s\" (a user name or a uid)",
						   optarg);
			break;
		case '?': return VGPUCTL_USAGE;
		default:
			r = quota_flag(o, c, optarg);
			if (r)
				return r;
			flag_given(o, VF_QUOTA, NULL);
		}
	}
	return o->verb ? 0 : usage_error("%s", "no verb given");
}

static int connect_daemon(const char *path, struct ctlc **c)
{
	struct cmn_fail f = { 0 };
	int r = ctlc_open(path, c, &f);

	if (!r)
		return 0;
	fprintf(stderr, "vgpuctl: %s\n", f.msg);
	/* -EBUSY: vgpud is there but had no connection slot for us ("too many clients"). */
	return r == -EACCES ? VGPUCTL_DENIED : r == -EBUSY ? VGPUCTL_CONFLICT : VGPUCTL_UNREACHABLE;
}

/* The verb named @name, or NULL. */
static const struct vgpuctl_verb *verb_find(const char *name)
{
	for (unsigned int i = 0; i < VGPUCTL_NR_VERBS; i++)
		if (!strcmp(verbs[i].name, name))
			return &verbs[i];
	return NULL;
}

/* The positional arguments against the verb's table entry: a usage error names the verb,
 * what it takes and what it got. */
static int check_nargs(const struct vgpuctl_verb *v, const struct vgpuctl_opts *o)
{
	if (o->nargs >= v->min_args && o->nargs <= v->max_args)
		return 0;
	if (!v->max_args)
		return usage_error("%s takes no arguments, got %d (\"%s\" first)", v->name,
				   o->nargs, o->args[0]);
	if (v->min_args == v->max_args)
		return usage_error("%s takes %d argument%s (%s), got %d", v->name, v->min_args,
				   v->min_args == 1 ? "" : "s", v->args, o->nargs);
	if (!v->min_args)
		return usage_error("%s takes at most %d argument%s (%s), got %d", v->name,
				   v->max_args, v->max_args == 1 ? "" : "s", v->args, o->nargs);
	return usage_error("%s takes %d to %d arguments (%s), got %d", v->name, v->min_args,
			   v->max_args, v->args, o->nargs);
}

/* vgpuctl help [VERB]: the verb table's line for one verb, or the whole usage. */
static int help_verb(const struct vgpuctl_opts *o)
{
	const struct vgpuctl_verb *v;

	if (!o->nargs) {
		usage(stdout);
		return 0;
	}
	if (o->nargs > 1)
		return usage_error("help takes at most one verb, got %d", o->nargs);
	v = verb_find(o->args[0]);
	if (!v)
		return usage_error("help: unknown verb \"%s\"", o->args[0]);
	printf("usage: vgpuctl %s %s\n", v->name, v->help);
	printf("options valid everywhere: --socket PATH, --json, --dry-run, -p PARENT "
	       "(see vgpuctl --help)\n");
	return 0;
}

/* Flags the verb does not use are refused, as its arguments are, rather than ignored: a
 * start given --vram would start with the type's VRAM and say nothing. */
static int check_flags(const struct vgpuctl_verb *v, const struct vgpuctl_opts *o)
{
	for (unsigned int g = 0; g < sizeof(o->given) / sizeof(o->given[0]); g++)
		if (o->given[g] && !(v->flags & VF_BIT(g)))
			return usage_error("%s does not take %s", v->name, o->given[g]);
	/* A start of a defined slice takes the definition's quota and owner uid. */
	if (!strcmp(v->name, "start") && !o->type) {
		if (o->given[VF_QUOTA])
			return usage_error("start -u UUID does not take %s (only a transient "
					   "start, -t TYPE, does)", o->given[VF_QUOTA]);
		if (o->given[VF_OWNER_UID])
			return usage_error("start -u UUID does not take --owner-uid (only a "
					   "transient start, -t TYPE, does)");
	}
	return 0;
}

int vgpuctl_main(int argc, char **argv)
{
	struct vgpuctl_opts o = { .start = -1, .color = isatty(STDOUT_FILENO) };
	const struct vgpuctl_verb *v = NULL;
	struct ctlc *c = NULL;
	int r;

	vgpuctl_reply_reset();
	o.attrs = json_object_new_array();
	o.socket = getenv("VGPUD_SOCKET") ? getenv("VGPUD_SOCKET") : CTLC_DEFAULT_SOCKET;
	r = parse_args(argc, argv, &o);
	if (!r && !strcmp(o.verb, "help")) {
		r = help_verb(&o);
		json_object_put(o.attrs);
		return r;
	}
	if (!r) {
		v = verb_find(o.verb);
		if (!v)
			r = usage_error("unknown verb \"%s\"", o.verb);
	}
	if (!r)
		r = check_nargs(v, &o);
	if (!r)
		r = check_flags(v, &o);
	if (!r)
		r = connect_daemon(o.socket, &c);
	if (!r)
		r = v->fn(c, &o);
	if (vgpuctl_reply_problem()) {
		fprintf(stderr, "vgpuctl: %s\n", vgpuctl_reply_problem());
		r = VGPUCTL_FAIL;
	}
	ctlc_close(c);
	json_object_put(o.attrs);
	free(o.type_buf);
	return r;
}
