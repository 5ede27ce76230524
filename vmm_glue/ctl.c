/* A client of vgpud's control socket: connect, negotiate, one request at a time.
 * The protocol (QMP-shaped, newline-delimited JSON) is described in doc/pf_manager.md;
 * this file speaks it from scratch so the tool does not link pf_manager. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>

#include "vmm_glue/vmm_internal.h"

#define CTL_TIMEOUT_MS	30000
#define CTL_MAX_LINE	(16u << 20)

struct vmm_ctl {
	int fd;
	char *buf;		/* received, not yet parsed */
	size_t len;
	char path[VMM_PATH_MAX];
};

/* Next JSON line (events included); NULL on EOF, timeout, garbage or an oversized line. */
static json_object *ctl_read_line(struct vmm_ctl *c)
{
	for (;;) {
		char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		char tmp[16384];
		ssize_t n;
		char *b;

		if (nl) {
			size_t l = (size_t)(nl - c->buf);
			json_object *o;

			*nl = 0;
			o = json_tokener_parse(c->buf);
			memmove(c->buf, nl + 1, c->len - l - 1);
			c->len -= l + 1;
			return o;
		}
		if (poll(&p, 1, CTL_TIMEOUT_MS) <= 0)
			return NULL;
		n = read(c->fd, tmp, sizeof(tmp));
		if (n <= 0 || c->len + (size_t)n > CTL_MAX_LINE)
			return NULL;
		b = realloc(c->buf, c->len + (size_t)n + 1);
		if (!b)
			return NULL;
		c->buf = b;
		memcpy(c->buf + c->len, tmp, (size_t)n);
		c->len += (size_t)n;
	}
}

/* The reply to the request just sent: events in between are skipped. */
static json_object *ctl_reply(struct vmm_ctl *c)
{
	for (;;) {
		json_object *o = ctl_read_line(c);

		if (!o || !json_object_object_get_ex(o, "event", NULL))
			return o;
		json_object_put(o);
	}
}

static int ctl_send(struct vmm_ctl *c, json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	size_t len = strlen(s);
	char *line = malloc(len + 2);
	size_t off = 0;
	int r = 0;

	if (!line)
		return -ENOMEM;
	memcpy(line, s, len);
	line[len++] = '\n';
	while (off < len) {
		ssize_t n = send(c->fd, line + off, len - off, MSG_NOSIGNAL);

		if (n <= 0) {
			r = -EPIPE;
			break;
		}
		off += (size_t)n;
	}
	free(line);
	return r;
}

static int ctl_connect(struct vmm_ctl *c, const char *path, struct vmm_err *e)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return vmm_fail(e, -ENAMETOOLONG, "vgpud socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return vmm_fail(e, -errno, "socket: %s", strerror(errno));
	if (!connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return 0;
	r = -errno;
	if (r == -EACCES || r == -EPERM)
		return vmm_fail(e, -EACCES, "cannot open vgpud's socket %s: %s (root or vgpud's "
				"admin group only)", path, strerror(-r));
	/* A missing socket or one nobody listens on both mean "vgpud is not running". */
	return vmm_fail(e, -ECONNREFUSED, "vgpud is not reachable at %s: %s (is it running? "
			"--socket or $VGPUD_SOCKET name another)", path, strerror(-r));
}

static int ctl_negotiate(struct vmm_ctl *c, struct vmm_err *e)
{
	json_object *g = ctl_read_line(c), *req, *rep;
	int r = 0;

	if (!g || !json_object_object_get_ex(g, "VGPUD", NULL))
		r = vmm_fail(e, -EPROTO, "%s did not greet as vgpud", c->path);
	json_object_put(g);
	if (r)
		return r;
	req = json_object_new_object();
	json_object_object_add(req, "execute", json_object_new_string("qmp_capabilities"));
	r = ctl_send(c, req);
	json_object_put(req);
	if (r)
		return vmm_fail(e, -ECONNREFUSED, "vgpud at %s closed the connection", c->path);
	rep = ctl_reply(c);
	if (!rep || !json_object_object_get_ex(rep, "return", NULL))
		r = vmm_fail(e, -EPROTO, "vgpud at %s refused the negotiation", c->path);
	json_object_put(rep);
	return r;
}

int vmm_ctl_open(const char *path, struct vmm_ctl **out, struct vmm_err *e)
{
	struct vmm_ctl *c = calloc(1, sizeof(*c));
	int r;

	*out = NULL;
	if (!c)
		return vmm_fail(e, -ENOMEM, "out of memory");
	c->fd = -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	r = ctl_connect(c, path, e);
	if (!r)
		r = ctl_negotiate(c, e);
	if (r) {
		vmm_ctl_close(c);
		return r;
	}
	*out = c;
	return 0;
}

void vmm_ctl_close(struct vmm_ctl *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c);
}

/* The errno an error reply stands for: its "errno" member, else its class. */
static int reply_errno(json_object *err)
{
	static const struct { const char *name; int err; } names[] = {
		{ "EINVAL", EINVAL }, { "ENOENT", ENOENT }, { "EBUSY", EBUSY },
		{ "EEXIST", EEXIST }, { "ENOSPC", ENOSPC }, { "ENOMEM", ENOMEM },
		{ "EACCES", EACCES }, { "EPERM", EPERM }, { "ERANGE", ERANGE },
		{ "ENODEV", ENODEV }, { "EPROTO", EPROTO }, { "EIO", EIO },
	};
	static const struct { const char *cls; int err; } classes[] = {
		{ "InvalidArgument", EINVAL }, { "NotFound", ENOENT }, { "Conflict", EBUSY },
		{ "InsufficientResources", ENOSPC }, { "PermissionDenied", EACCES },
		{ "CommandNotFound", EOPNOTSUPP },
	};
	json_object *v;

	if (json_object_object_get_ex(err, "errno", &v)) {
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(json_object_get_string(v), names[i].name))
				return -names[i].err;
	}
	if (json_object_object_get_ex(err, "class", &v)) {
		for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
			if (!strcmp(json_object_get_string(v), classes[i].cls))
				return -classes[i].err;
	}
	return -EIO;
}

int vmm_ctl_exec(struct vmm_ctl *c, const char *cmd, json_object *args, json_object **ret,
		 struct vmm_err *e)
{
	json_object *req = json_object_new_object(), *rep, *v, *desc;
	int r;

	if (ret)
		*ret = NULL;
	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", args);
	r = ctl_send(c, req);
	json_object_put(req);
	if (r)
		return vmm_fail(e, -ECONNREFUSED, "vgpud at %s closed the connection", c->path);
	rep = ctl_reply(c);
	if (!rep)
		return vmm_fail(e, -ECONNREFUSED, "vgpud at %s did not answer %s", c->path, cmd);
	if (json_object_object_get_ex(rep, "return", &v)) {
		if (ret)
			*ret = json_object_get(v);
		json_object_put(rep);
		return 0;
	}
	if (!json_object_object_get_ex(rep, "error", &v)) {
		json_object_put(rep);
		return vmm_fail(e, -EPROTO, "vgpud sent neither a return nor an error to %s", cmd);
	}
	r = reply_errno(v);
	vmm_fail(e, r, "%s", json_object_object_get_ex(v, "desc", &desc) ?
		 json_object_get_string(desc) : "vgpud refused the request");
	json_object_put(rep);
	return r;
}

/* ---- slices -------------------------------------------------------------------------------- */

static const char *jstr(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ?
		json_object_get_string(v) : "";
}

static uint64_t ju64(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

void vmm_slice_from_json(json_object *o, struct vmm_slice *s)
{
	json_object *v, *own, *prov;

	memset(s, 0, sizeof(*s));
	s->owner_uid = -1;
	snprintf(s->uuid, sizeof(s->uuid), "%s", jstr(o, "uuid"));
	snprintf(s->type, sizeof(s->type), "%s", jstr(o, "mdev_type"));
	s->running = !strcmp(jstr(o, "state"), "running");
	s->vf = (unsigned int)ju64(o, "vf");
	snprintf(s->endpoint, sizeof(s->endpoint), "%s", jstr(o, "endpoint"));
	if (json_object_object_get_ex(o, "attached", &v))
		s->attached = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "provisioned", &prov)) {
		s->vram_bytes = ju64(prov, "vram_bytes");
		s->bar_bytes = ju64(prov, "bar_bytes");
	}
	if (json_object_object_get_ex(o, "owner", &own)) {
		snprintf(s->owner_vm, sizeof(s->owner_vm), "%s", jstr(own, "vm"));
		s->owner_gen = ju64(own, "generation");
	}
	if (json_object_object_get_ex(o, "owner_uid", &v))
		s->owner_uid = (long)json_object_get_int64(v);
}

static json_object *uuid_args(const char *uuid)
{
	json_object *a = json_object_new_object();

	json_object_object_add(a, "uuid", json_object_new_string(uuid));
	return a;
}

int vmm_slice_query(struct vmm_ctl *c, const char *uuid, struct vmm_slice *s,
		    struct vmm_err *e)
{
	json_object *ret, *list;
	int r;

	if (!vmm_uuid_valid(uuid))
		return vmm_fail(e, -EINVAL, "\"%.64s\" is not a slice UUID", uuid);
	r = vmm_ctl_exec(c, "query-slices", uuid_args(uuid), &ret, e);
	if (r == -ENOENT)
		return vmm_fail(e, r, "slice %s is not defined on vgpud (%s)", uuid, c->path);
	if (r)
		return r;
	if (!json_object_object_get_ex(ret, "slices", &list) ||
	    !json_object_is_type(list, json_type_array) || json_object_array_length(list) < 1) {
		json_object_put(ret);
		return vmm_fail(e, -ENOENT, "slice %s is not defined on vgpud (%s)", uuid, c->path);
	}
	vmm_slice_from_json(json_object_array_get_idx(list, 0), s);
	json_object_put(ret);
	if (strcasecmp(s->uuid, uuid))
		return vmm_fail(e, -EPROTO, "vgpud answered for slice %s, not %s", s->uuid, uuid);
	return 0;
}

int vmm_slice_start(struct vmm_ctl *c, const char *uuid, struct vmm_err *e)
{
	return vmm_ctl_exec(c, "start-slice", uuid_args(uuid), NULL, e);
}

static json_object *owner_json(const char *vm, uint64_t gen)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "vm", json_object_new_string(vm));
	json_object_object_add(o, "generation", json_object_new_uint64(gen));
	return o;
}

int vmm_slice_set_owner(struct vmm_ctl *c, const char *uuid, const char *vm, uint64_t gen,
			struct vmm_err *e)
{
	json_object *a = uuid_args(uuid);

	json_object_object_add(a, "owner", owner_json(vm, gen));
	return vmm_ctl_exec(c, "modify-slice", a, NULL, e);
}

int vmm_slice_release(struct vmm_ctl *c, const char *uuid, const char *vm, uint64_t gen,
		      struct vmm_err *e)
{
	json_object *a = uuid_args(uuid);

	/* vgpud checks the token in "release-owner" and clears the owner only if it matches,
	 * so two releasers cannot take a slice from its next VM. */
	json_object_object_add(a, "release-owner", owner_json(vm, gen));
	return vmm_ctl_exec(c, "modify-slice", a, NULL, e);
}
