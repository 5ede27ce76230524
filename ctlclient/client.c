// SPDX-License-Identifier: MIT
/* The connection: connect, negotiate, one request and its reply at a time. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/clock.h"
#include "ctlclient/ctlclient.h"

struct ctlc {
	int fd;
	char *buf;		/* received, not yet parsed */
	size_t len, cap;
	size_t scanned;		/* bytes of buf known to hold no newline */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* One deadline for the whole open, then one for each request: a peer that trickles
	 * a byte now and then must not hold the caller (libvirtd's domain start) forever. */
	unsigned int timeout_ms;
	uint64_t deadline;	/* on clock_ns()'s clock */
	uint64_t (*clock_ns)(void *arg);
	void *clock_arg;
};

static uint64_t ctlc_now(const struct ctlc *c)
{
	return c->clock_ns ? c->clock_ns(c->clock_arg) : cmn_now_ns();
}

/* Start the deadline of an open or a request. */
static void ctlc_arm(struct ctlc *c)
{
	uint64_t now = ctlc_now(c), t = (uint64_t)c->timeout_ms * VGPU_NSEC_PER_MSEC;

	c->deadline = t > UINT64_MAX - now ? UINT64_MAX : now + t;
}

/* Wait until the socket is ready for @events, within the deadline. 0 or -ETIMEDOUT. */
static int ctlc_wait(struct ctlc *c, short events)
{
	struct pollfd p = { .fd = c->fd, .events = events };
	uint64_t now, left;
	int r;

	do {
		now = ctlc_now(c);
		if (now >= c->deadline)
			return -ETIMEDOUT;
		left = (c->deadline - now + VGPU_NSEC_PER_MSEC - 1) / VGPU_NSEC_PER_MSEC;
		r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
	} while (r < 0 && errno == EINTR);
	/* A poll that ran out is checked against the clock again on the next call. */
	return r < 0 ? -errno : 0;
}

/* Parse and drop the first line of the buffer. */
static json_object *ctlc_take_line(struct ctlc *c, char *nl)
{
	size_t l = (size_t)(nl - c->buf);
	json_object *o;

	*nl = 0;
	o = json_tokener_parse(c->buf);
	memmove(c->buf, nl + 1, c->len - l - 1);
	c->len -= l + 1;
	c->scanned = 0;
	return o;
}

/* Append what the socket has to the buffer. -ECONNRESET on EOF, -ETIMEDOUT past the
 * deadline, -EMSGSIZE past CTLC_MAX_REPLY. */
static int ctlc_fill(struct ctlc *c)
{
	char tmp[65536];
	ssize_t n;
	char *b;
	int r = ctlc_wait(c, POLLIN);

	if (r)
		return r;
	n = recv(c->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -ECONNRESET;
	if (c->len + (size_t)n > CTLC_MAX_REPLY)
		return -EMSGSIZE;
	/* Doubling: a 64 MiB reply is copied a few times, not once per read, so it arrives
	 * well within the deadline. */
	if (c->len + (size_t)n + 1 > c->cap) {
		size_t cap = c->cap ? c->cap : sizeof(tmp);

		while (cap < c->len + (size_t)n + 1)
			cap *= 2;
		b = realloc(c->buf, cap);
		if (!b)
			return -ENOMEM;
		c->buf = b;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, tmp, (size_t)n);
	c->len += (size_t)n;
	return 0;
}

/* The next JSON line, events included, in *@o (NULL: the line is not JSON). 0, or
 * ctlc_fill()'s error. */
static int ctlc_read_line(struct ctlc *c, json_object **o)
{
	*o = NULL;
	for (;;) {
		char *nl = c->len > c->scanned ?
			   memchr(c->buf + c->scanned, '\n', c->len - c->scanned) : NULL;
		int r;

		if (nl) {
			*o = ctlc_take_line(c, nl);
			return 0;
		}
		c->scanned = c->len;
		r = ctlc_fill(c);
		if (r)
			return r;
	}
}

/* The reply to the request just sent in *@o, events in between skipped: 0 (*@o NULL for a
 * line that is not JSON) or ctlc_fill()'s error. */
static int ctlc_reply(struct ctlc *c, json_object **o)
{
	for (;;) {
		int r = ctlc_read_line(c, o);

		if (r || !*o || !json_object_is_type(*o, json_type_object) ||
		    !json_object_object_get_ex(*o, "event", NULL))
			return r;
		json_object_put(*o);
	}
}

/* The failure for I/O error @r while @doing ("waiting for its greeting", "sending X"):
 * -ECONNREFUSED, the connection being unusable, with a message naming the socket. */
static int ctlc_io_fail(const struct ctlc *c, int r, const char *doing, struct cmn_fail *f)
{
	switch (r) {
	case -ETIMEDOUT:
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s: timed out after %u ms %s "
				"(the limit of the whole exchange)", c->path, c->timeout_ms, doing);
	case -EMSGSIZE:
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s sent a line over %u MiB (%s)",
				c->path, CTLC_MAX_REPLY >> 20, doing);
	case -ENOMEM:
		return cmn_fail(f, -ENOMEM, "out of memory %s (vgpud at %s)", doing, c->path);
	case -EPIPE:
	case -ECONNRESET:
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s closed the connection (%s)",
				c->path, doing);
	}
	return cmn_fail(f, -ECONNREFUSED, "vgpud at %s: %s (%s)", c->path, strerror(-r), doing);
}

/* @o as one line: the whole line in one buffer, so a short send never splits a request
 * from its newline across a peer's read. @fd (if >= 0) goes with the line's first bytes
 * (SCM_RIGHTS), so vgpud gives it to this request. 0, -EPIPE, -ETIMEDOUT or -ENOMEM. */
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
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			/* A peer that reads nothing fills the socket: wait, within the deadline. */
			r = ctlc_wait(c, POLLOUT);
			if (r)
				break;
			continue;
		}
		if (n <= 0) {
			r = -EPIPE;
			break;
		}
		off += (size_t)n;
	}
	free(line);
	return r;
}

/* connect() waits for room in a full listen queue: bounded by the deadline too. */
static int ctlc_connect(struct ctlc *c, const char *path, struct cmn_fail *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t now = ctlc_now(c), left = now < c->deadline ? c->deadline - now : 1;
	struct timeval tv = { .tv_sec = (time_t)(left / VGPU_NSEC_PER_SEC),
			      .tv_usec = (suseconds_t)(left % VGPU_NSEC_PER_SEC / 1000) };
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return cmn_fail(f, -ENAMETOOLONG, "vgpud socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return cmn_fail(f, -errno, "socket: %s", strerror(errno));
	if (!tv.tv_sec && !tv.tv_usec)
		tv.tv_usec = 1;		/* 0 would mean no limit at all */
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (!connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return 0;
	r = -errno;
	if (r == -EAGAIN)
		return ctlc_io_fail(c, -ETIMEDOUT, "connecting (its listen queue is full)", f);
	if (r == -EACCES || r == -EPERM)
		return cmn_fail(f, -EACCES, "cannot open vgpud's socket %s: %s (root or vgpud's "
				"admin group only)", path, strerror(-r));
	/* A missing socket or one nobody listens on both mean "vgpud is not running". */
	return cmn_fail(f, -ECONNREFUSED, "vgpud is not reachable at %s: %s (is it running? "
			"--socket or $VGPUD_SOCKET name another)", path, strerror(-r));
}

/* The greeting's control protocol (version.protocol) against CTLC_PROTOCOL: a vgpud of
 * another protocol may read this client's requests otherwise, so the open stops here. */
static int ctlc_protocol_check(const struct ctlc *c, json_object *g, struct cmn_fail *f)
{
	json_object *top, *ver, *v;

	/* A member missing on the way (or a parent that is no object) leaves NULL. */
	json_object_object_get_ex(g, "VGPUD", &top);
	json_object_object_get_ex(top, "version", &ver);
	json_object_object_get_ex(ver, "protocol", &v);
	if (!json_object_is_type(v, json_type_int))
		return cmn_fail(f, -EPROTO, "vgpud at %s names no control protocol (an integer "
				"version.protocol); this client speaks protocol %d", c->path,
				CTLC_PROTOCOL);
	if (json_object_get_int64(v) != CTLC_PROTOCOL)
		return cmn_fail(f, -EPROTO, "vgpud at %s speaks control protocol %s; this client "
				"speaks protocol %d (use the vgpuctl and vgpu-vm of that vgpud's "
				"release)", c->path, json_object_to_json_string(v), CTLC_PROTOCOL);
	return 0;
}

/* The greeting: a vgpud's of the protocol this client speaks, or its refusal for want of
 * a connection slot. */
static int ctlc_greeting(struct ctlc *c, struct cmn_fail *f)
{
	json_object *g, *err, *desc;
	int r = ctlc_read_line(c, &g);

	if (r == -ETIMEDOUT || r == -ENOMEM)
		return ctlc_io_fail(c, r, "waiting for its greeting", f);
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
	else
		r = ctlc_protocol_check(c, g, f);
	json_object_put(g);
	return r;
}

static int ctlc_negotiate(struct ctlc *c, struct cmn_fail *f)
{
	json_object *req, *rep;
	int r = ctlc_greeting(c, f);

	if (r)
		return r;
	req = json_object_new_object();
	json_object_object_add(req, "execute", json_object_new_string("qmp_capabilities"));
	r = ctlc_send(c, req, -1);
	json_object_put(req);
	if (r)
		return ctlc_io_fail(c, r, "sending qmp_capabilities", f);
	r = ctlc_reply(c, &rep);
	if (r == -ETIMEDOUT || r == -ENOMEM)
		r = ctlc_io_fail(c, r, "waiting for the reply to qmp_capabilities", f);
	else if (r || !rep || !json_object_object_get_ex(rep, "return", NULL))
		r = cmn_fail(f, -EPROTO, "vgpud at %s refused the negotiation", c->path);
	json_object_put(rep);
	return r;
}

int ctlc_open_opts(const char *path, const struct ctlc_opts *o, struct ctlc **out,
		   struct cmn_fail *f)
{
	struct ctlc *c = calloc(1, sizeof(*c));
	int r;

	*out = NULL;
	if (!c)
		return cmn_fail(f, -ENOMEM, "out of memory");
	c->fd = -1;
	c->timeout_ms = o && o->timeout_ms ? o->timeout_ms : CTLC_TIMEOUT_MS;
	c->clock_ns = o ? o->clock_ns : NULL;
	c->clock_arg = o ? o->clock_arg : NULL;
	snprintf(c->path, sizeof(c->path), "%s", path);
	ctlc_arm(c);
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

int ctlc_open(const char *path, struct ctlc **out, struct cmn_fail *f)
{
	return ctlc_open_opts(path, NULL, out, f);
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
	char doing[96];
	int r;

	*reply = NULL;
	ctlc_arm(c);
	json_object_object_add(req, "execute", json_object_new_string(cmd));
	if (args)
		json_object_object_add(req, "arguments", args);
	r = ctlc_send(c, req, fd);
	json_object_put(req);
	if (r) {
		snprintf(doing, sizeof(doing), "sending %s", cmd);
		return ctlc_io_fail(c, r, doing, f);
	}
	r = ctlc_reply(c, reply);
	if (r) {
		snprintf(doing, sizeof(doing), "waiting for the reply to %s", cmd);
		return ctlc_io_fail(c, r, doing, f);
	}
	if (!*reply)
		return cmn_fail(f, -ECONNREFUSED, "vgpud at %s answered %s with a line that is "
				"not JSON", c->path, cmd);
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
