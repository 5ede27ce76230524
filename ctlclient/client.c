// SPDX-License-Identifier: MIT
/* The connection: connect, negotiate, one request and its reply at a time. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>

#include "ctlclient/ctlclient.h"

struct ctlc {
	int fd;
	char *buf;		/* received, not yet parsed */
	size_t len;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Parse and drop the first line of the buffer. */
static json_object *ctlc_take_line(struct ctlc *c, char *nl)
{
	size_t l = (size_t)(nl - c->buf);
	json_object *o;

	*nl = 0;
	o = json_tokener_parse(c->buf);
	memmove(c->buf, nl + 1, c->len - l - 1);
	c->len -= l + 1;
	return o;
}

/* Append what the socket has to the buffer. -ECONNRESET on EOF, -ETIMEDOUT, -EMSGSIZE
 * past CTLC_MAX_REPLY. */
static int ctlc_fill(struct ctlc *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	char tmp[65536];
	ssize_t n;
	char *b;
	int r;

	do
		r = poll(&p, 1, CTLC_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return -ETIMEDOUT;
	n = read(c->fd, tmp, sizeof(tmp));
	if (n <= 0)
		return -ECONNRESET;
	if (c->len + (size_t)n > CTLC_MAX_REPLY)
		return -EMSGSIZE;
	b = realloc(c->buf, c->len + (size_t)n + 1);
	if (!b)
		return -ENOMEM;
	c->buf = b;
	memcpy(c->buf + c->len, tmp, (size_t)n);
	c->len += (size_t)n;
	return 0;
}

/* The next JSON line, events included; NULL on EOF, timeout, garbage or an oversized line. */
static json_object *ctlc_read_line(struct ctlc *c)
{
	for (;;) {
		char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;

		if (nl)
			return ctlc_take_line(c, nl);
		if (ctlc_fill(c))
			return NULL;
	}
}

/* The reply to the request just sent: events in between are skipped. */
static json_object *ctlc_reply(struct ctlc *c)
{
	for (;;) {
		json_object *o = ctlc_read_line(c);

		if (!o || !json_object_is_type(o, json_type_object) ||
		    !json_object_object_get_ex(o, "event", NULL))
			return o;
		json_object_put(o);
	}
}

/* @o as one line: the whole line in one buffer, so a short send never splits a request
 * from its newline across a peer's read. @fd (if >= 0) goes with the line's first bytes
 * (SCM_RIGHTS), so vgpud gives it to this request. */
static int ctlc_send(struct ctlc *c, json_object *o, int fd)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	size_t len = strlen(s), off = 0;
	char *line = malloc(len + 1);
	int r = 0;

	if (!line)
		return -ENOMEM;
	memcpy(line, s, len);
	line[len++] = '\n';
	while (off < len) {
		union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } cb;
		struct iovec iov = { .iov_base = line + off, .iov_len = len - off };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (fd >= 0 && !off) {
			memset(&cb, 0, sizeof(cb));
			mh.msg_control = cb.b;
			mh.msg_controllen = sizeof(cb.b);
			CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
			CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
			CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &fd, sizeof(int));
		}
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);

		if (n <= 0) {
			r = -EPIPE;
			break;
		}
		off += (size_t)n;
	}
	free(line);
	return r;
}

static int ctlc_connect(struct ctlc *c, const char *path, struct cmn_fail *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return cmn_fail(f, -ENAMETOOLONG, "vgpud socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return cmn_fail(f, -errno, "socket: %s", strerror(errno));
	if (!connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return 0;
	r = -errno;
	if (r == -EACCES || r == -EPERM)
		return cmn_fail(f, -EACCES, "cannot open vgpud's socket %s: %s (root or vgpud's "
				"admin group only)", path, strerror(-r));
	/* A missing socket or one nobody listens on both mean "vgpud is not running". */
	return cmn_fail(f, -ECONNREFUSED, "vgpud is not reachable at %s: %s (is it running? "
			"--socket or $VGPUD_SOCKET name another)", path, strerror(-r));
}

static int ctlc_negotiate(struct ctlc *c, struct cmn_fail *f)
{
	json_object *g = ctlc_read_line(c), *req, *rep, *err, *desc;
	int r = 0;

	/* vgpud refuses a connection it has no slot for with one GenericError line. */
	if (g && json_object_is_type(g, json_type_object) &&
	    json_object_object_get_ex(g, "error", &err) &&
	    json_object_object_get_ex(err, "desc", &desc))
		r = cmn_fail(f, -EBUSY, "vgpud at %s refused the connection: %s", c->path,
			     json_object_get_string(desc));
	else if (!g || !json_object_is_type(g, json_type_object) ||
		 !json_object_object_get_ex(g, "VGPUD", NULL))
		r = cmn_fail(f, -EPROTO, "%s is not a vgpud control socket: no vgpud greeting",
			     c->path);
	json_object_put(g);
	if (r)
		return r;
	req = json_object_new_object();
	json_object_object_add(req, "execute", json_object_new_string("qmp_capabilities"));
	r = ctlc_send(c, req, -1);
	json_object_put(req);
	if (r)
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s closed the connection", c->path);
	rep = ctlc_reply(c);
	if (!rep || !json_object_object_get_ex(rep, "return", NULL))
		r = cmn_fail(f, -EPROTO, "vgpud at %s refused the negotiation", c->path);
	json_object_put(rep);
	return r;
}

int ctlc_open(const char *path, struct ctlc **out, struct cmn_fail *f)
{
	struct ctlc *c = calloc(1, sizeof(*c));
	int r;

	*out = NULL;
	if (!c)
		return cmn_fail(f, -ENOMEM, "out of memory");
	c->fd = -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	r = ctlc_connect(c, path, f);
	if (!r)
		r = ctlc_negotiate(c, f);
	if (r) {
		ctlc_close(c);
		return r;
	}
	*out = c;
	return 0;
}

void ctlc_close(struct ctlc *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c);
}

const char *ctlc_path(const struct ctlc *c)
{
	return c->path;
}

int ctlc_request(struct ctlc *c, const char *cmd, json_object *args, json_object **reply,
		 struct cmn_fail *f)
{
	return ctlc_request_fd(c, cmd, args, -1, reply, f);
}

int ctlc_request_fd(struct ctlc *c, const char *cmd, json_object *args, int fd,
		    json_object **reply, struct cmn_fail *f)
{
	json_object *req = json_object_new_object();
	int r;

	*reply = NULL;
	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", args);
	r = ctlc_send(c, req, fd);
	json_object_put(req);
	if (r)
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s closed the connection", c->path);
	*reply = ctlc_reply(c);
	if (!*reply)
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s did not answer %s (closed, timed "
				"out, or a reply over %u MiB)", c->path, cmd, CTLC_MAX_REPLY >> 20);
	return 0;
}

int ctlc_reply_errno(json_object *err)
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

	/* Strings only: a peer's null or number has no string to compare (NULL). */
	if (json_object_object_get_ex(err, "errno", &v) &&
	    json_object_is_type(v, json_type_string)) {
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(json_object_get_string(v), names[i].name))
				return -names[i].err;
	}
	if (json_object_object_get_ex(err, "class", &v) &&
	    json_object_is_type(v, json_type_string)) {
		for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
			if (!strcmp(json_object_get_string(v), classes[i].cls))
				return -classes[i].err;
	}
	return -EIO;
}

int ctlc_exec(struct ctlc *c, const char *cmd, json_object *args, json_object **ret,
	      struct cmn_fail *f)
{
	json_object *rep, *v, *desc;
	int r;

	if (ret)
		*ret = NULL;
	r = ctlc_request(c, cmd, args, &rep, f);
	if (r)
		return r;
	if (json_object_object_get_ex(rep, "return", &v)) {
		if (ret)
			*ret = json_object_get(v);
		json_object_put(rep);
		return 0;
	}
	if (!json_object_object_get_ex(rep, "error", &v)) {
		json_object_put(rep);
		return cmn_fail(f, -EPROTO, "vgpud sent neither a return nor an error to %s", cmd);
	}
	r = ctlc_reply_errno(v);
	cmn_fail(f, r, "%s", json_object_object_get_ex(v, "desc", &desc) ?
		 json_object_get_string(desc) : "vgpud refused the request");
	json_object_put(rep);
	return r;
}
