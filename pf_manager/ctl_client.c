/* vgpuctl's side of the control socket: connect, negotiate, one request, one reply. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pf_manager/ctl_internal.h"

#define CTL_TIMEOUT_MS	30000
#define CTL_MAX_REPLY	(64u << 20)

int ctl_connect(struct ctl *c, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	c->fd = -1;
	c->buf = NULL;
	c->len = 0;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int r = -errno;

		close(c->fd);
		c->fd = -1;
		return r;
	}
	return 0;
}

void ctl_close(struct ctl *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	c->fd = -1;
	c->buf = NULL;
}

/* Next line from the socket as JSON (events included); NULL on EOF, timeout or garbage. */
static json_object *ctl_read_line(struct ctl *c)
{
	for (;;) {
		char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		char tmp[65536];
		ssize_t n;

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
		if (n <= 0 || c->len + (size_t)n > CTL_MAX_REPLY)
			return NULL;
		char *b = realloc(c->buf, c->len + (size_t)n + 1);

		if (!b)
			return NULL;
		c->buf = b;
		memcpy(c->buf + c->len, tmp, (size_t)n);
		c->len += (size_t)n;
	}
}

static int ctl_send(struct ctl *c, json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	size_t len = strlen(s), off = 0;

	while (off <= len) {
		ssize_t n = off < len ? send(c->fd, s + off, len - off, MSG_NOSIGNAL)
				      : send(c->fd, "\n", 1, MSG_NOSIGNAL);

		if (n <= 0)
			return -EPIPE;
		off += off < len ? (size_t)n : 1;
	}
	return 0;
}

/* A reply (not an event) to the request just sent. */
static json_object *ctl_reply(struct ctl *c)
{
	for (;;) {
		json_object *o = ctl_read_line(c);

		if (!o || !json_object_object_get_ex(o, "event", NULL))
			return o;
		json_object_put(o);
	}
}

int ctl_handshake(struct ctl *c)
{
	json_object *g = ctl_read_line(c), *req, *rep;
	int r = 0;

	if (!g || !json_object_object_get_ex(g, "VGPUD", NULL))
		r = -EPROTO;
	json_object_put(g);
	if (r)
		return r;
	req = json_object_new_object();
	json_object_object_add(req, "execute", json_object_new_string("qmp_capabilities"));
	r = ctl_send(c, req);
	json_object_put(req);
	if (r)
		return r;
	rep = ctl_reply(c);
	if (!rep || !json_object_object_get_ex(rep, "return", NULL))
		r = -EPROTO;
	json_object_put(rep);
	return r;
}

json_object *ctl_execute(struct ctl *c, const char *cmd, json_object *args)
{
	json_object *req = json_object_new_object();
	int r;

	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", args);
	r = ctl_send(c, req);
	json_object_put(req);
	return r ? NULL : ctl_reply(c);
}
