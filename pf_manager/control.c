// SPDX-License-Identifier: MIT
/* The control socket: newline-delimited JSON in QMP's shape. A client gets a greeting,
 * must negotiate with qmp_capabilities, then sends {"execute", "arguments", "id"} and gets
 * {"return"} or {"error": {"class", "desc"}} with the id echoed; events arrive as
 * {"event", "data", "timestamp"}. Peer credentials taken at connect() (SO_PEERCRED,
 * SO_PEERGROUPS) decide who may mutate. */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/version.h"
#include "pf_manager/pf_internal.h"
#include <vgpu/version.h>

#define PF_OUT_MAX	(8u << 20)	/* a client that reads nothing is dropped past this */

int pf_control_open(struct pf_daemon *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[PF_PATH_MAX + 16];
	int fd, r;

	r = pf_mkdir_p(d->cfg.runtime_dir, 0755);
	if (r)
		return r;
	snprintf(path, sizeof(path), "%s/control.sock", d->cfg.runtime_dir);
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16)) {
		r = -errno;
		close(fd);
		return r;
	}
	if (d->have_admin_gid && chown(path, 0, d->admin_gid))
		cmn_warn("cannot give %s to group %s", path, d->cfg.admin_group);
	chmod(path, d->cfg.socket_mode);
	d->ctl_fd = fd;
	return 0;
}

static void client_free(struct pf_client *c)
{
	if (c->has_fd_in)
		close(c->fd_in);
	close(c->fd);
	free(c->in);
	free(c->out);
	free(c);
}

static void client_drop(struct pf_daemon *d, unsigned int idx)
{
	pf_reset_client_gone(d, d->clients[idx]);
	client_free(d->clients[idx]);
	d->clients[idx] = NULL;
}


void pf_control_close(struct pf_daemon *d)
{
	char path[PF_PATH_MAX + 16];

	for (unsigned int i = 0; i < PF_MAX_CLIENTS; i++) {
		if (d->clients[i])
			client_drop(d, i);
	}
	if (d->ctl_fd >= 0) {
		close(d->ctl_fd);
		snprintf(path, sizeof(path), "%s/control.sock", d->cfg.runtime_dir);
		unlink(path);
	}
	d->ctl_fd = -1;
}

/* Whether the peer of @fd had @gid among its supplementary groups when it connected.
 * SO_PEERGROUPS (Linux 4.13) is taken at connect() like SO_PEERCRED's uid and gid, so
 * no process that later gets the peer's pid number can lend it its groups, as reading
 * /proc/<pid> would. Without it (an older kernel) only root and the primary group are
 * admins: it fails closed. */
static bool peer_in_group(int fd, gid_t gid)
{
	gid_t small[64], *groups = small;
	socklen_t len = sizeof(small);
	bool found = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
		/* ERANGE: more than 64 groups; the kernel put the size needed in @len. */
		if (errno != ERANGE || !(groups = malloc(len)))
			return false;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
			len = 0;
	}
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		found |= groups[i] == gid;
	if (groups != small)
		free(groups);
	return found;
}

static int client_queue(struct pf_client *c, const char *s, size_t n)
{
	if (c->out_len + n > PF_OUT_MAX)
		return -ENOBUFS;
	if (c->out_len + n > c->out_cap) {
		size_t cap = (c->out_len + n) * 2;
		char *p = realloc(c->out, cap);

		if (!p)
			return -ENOMEM;
		c->out = p;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, s, n);
	c->out_len += n;
	return 0;
}

static void client_send(struct pf_client *c, json_object *o)
{
	const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							 JSON_C_TO_STRING_NOSLASHESCAPE);

	/* A client that reads nothing would make us buffer without end, and skipping a
	 * message would desynchronise it: it is disconnected instead. */
	if (!c->broken && (client_queue(c, txt, strlen(txt)) || client_queue(c, "\n", 1))) {
		cmn_warn("control: client pid %d is not reading its replies; disconnecting it",
			  (int)c->pid);
		c->broken = true;
	}
}

static void client_flush(struct pf_client *c)
{
	while (c->out_len) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n <= 0)
			return;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
}

void pf_event(struct pf_daemon *d, const char *name, json_object *data)
{
	json_object *ev = json_object_new_object();

	json_object_object_add(ev, "event", json_object_new_string(name));
	json_object_object_add(ev, "data", data);
	json_object_object_add(ev, "timestamp", pf_json_timestamp());
	for (unsigned int i = 0; i < PF_MAX_CLIENTS; i++) {
		struct pf_client *c = d->clients[i];

		if (c && c->negotiated) {
			client_send(c, ev);
			client_flush(c);	/* a broken one is dropped by pf_control_sweep() */
		}
	}
	d->events_sent++;
	json_object_put(ev);
}

static json_object *greeting(void)
{
	json_object *g = json_object_new_object(), *v = json_object_new_object();
	json_object *inner = json_object_new_object(), *abi = json_object_new_object();

	json_object_object_add(abi, "major", json_object_new_int(VGPU_ABI_MAJOR));
	json_object_object_add(abi, "minor", json_object_new_int(VGPU_ABI_MINOR));
	json_object_object_add(v, "abi", abi);
	json_object_object_add(v, "package", json_object_new_string("vgpud " VGPU_VERSION));
	json_object_object_add(v, "protocol", json_object_new_int(CTLC_PROTOCOL));
	json_object_object_add(inner, "version", v);
	json_object_object_add(inner, "capabilities", json_object_new_array());
	json_object_object_add(g, "VGPUD", inner);
	return g;
}

static json_object *error_reply(const char *cls, const char *desc, json_object *id)
{
	json_object *r = json_object_new_object(), *e = json_object_new_object();

	json_object_object_add(e, "class", json_object_new_string(cls));
	json_object_object_add(e, "desc", json_object_new_string(desc));
	json_object_object_add(r, "error", e);
	if (id)
		json_object_object_add(r, "id", json_object_get(id));
	return r;
}

/* Send one error line to a connection we are about to close: best effort, never blocks. */
static void refuse_fd(int fd, const char *desc)
{
	json_object *r = error_reply("GenericError", desc, NULL);
	const char *txt = json_object_to_json_string_ext(r, JSON_C_TO_STRING_PLAIN);

	if (send(fd, txt, strlen(txt), MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
		(void)send(fd, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	json_object_put(r);
}

/* Whether a connection of @uid (@admin: root or the admin group) may take a slot now. The
 * last cfg.admin_slots slots are only for admins, and no uid but root holds more than
 * cfg.per_uid connections, so idle connections of other users cannot lock root out. A
 * refusal's reason goes to @why. */
static bool slot_allowed(const struct pf_daemon *d, uid_t uid, bool admin, char *why, size_t len)
{
	unsigned int used = 0, mine = 0;
	unsigned int open_slots = PF_MAX_CLIENTS - d->cfg.admin_slots;

	for (unsigned int i = 0; i < PF_MAX_CLIENTS; i++) {
		if (!d->clients[i])
			continue;
		used++;
		mine += d->clients[i]->uid == uid;
	}
	if (used >= PF_MAX_CLIENTS) {
		snprintf(why, len, "too many clients: all %u control connections are in use",
			 PF_MAX_CLIENTS);
		return false;
	}
	if (uid != 0 && mine >= d->cfg.per_uid) {
		snprintf(why, len, "too many clients: uid %u already holds %u control connections "
			 "(limit %u per user)", (unsigned int)uid, mine, d->cfg.per_uid);
		return false;
	}
	if (!admin && used >= open_slots) {
		snprintf(why, len, "too many clients: the %u unreserved control connections are in "
			 "use (%u more are kept for root and the admin group)", open_slots,
			 d->cfg.admin_slots);
		return false;
	}
	return true;
}

void pf_control_accept(struct pf_daemon *d)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct pf_client *c = NULL;
	unsigned int slot = PF_MAX_CLIENTS;
	char why[160] = "";
	json_object *g;
	bool admin;
	int fd = accept4(d->ctl_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len)) {
		cmn_warn("control: connection refused (no credentials)");
		close(fd);
		return;
	}
	admin = cr.uid == 0 || (d->have_admin_gid &&
				(cr.gid == d->admin_gid || peer_in_group(fd, d->admin_gid)));
	for (unsigned int i = 0; i < PF_MAX_CLIENTS && slot == PF_MAX_CLIENTS; i++)
		if (!d->clients[i])
			slot = i;
	if (!slot_allowed(d, cr.uid, admin, why, sizeof(why)) || !(c = calloc(1, sizeof(*c)))) {
		if (!why[0])
			snprintf(why, sizeof(why), "out of memory");
		/* Logged at 1, 2, 4, 8 ... refusals: a connect loop cannot flood the log. */
		d->ctl_refused++;
		if (!(d->ctl_refused & (d->ctl_refused - 1)))
			cmn_warn("control: connection of pid %d (uid %u) refused (%llu so far): %s",
				  (int)cr.pid, (unsigned int)cr.uid,
				  (unsigned long long)d->ctl_refused, why);
		refuse_fd(fd, why);
		close(fd);
		return;
	}
	c->fd = fd;
	c->uid = cr.uid;
	c->gid = cr.gid;
	c->pid = cr.pid;
	c->admin = admin;
	c->accepted_ns = cmn_now_ns();
	d->clients[slot] = c;
	g = greeting();
	client_send(c, g);
	json_object_put(g);
	client_flush(c);
}

static void client_line(struct pf_daemon *d, struct pf_client *c, const char *line, size_t len)
{
	char why[160], desc[176];
	struct json_tokener *tok;
	json_object *req, *rep;

	while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (!len)
		return;
	tok = json_tokener_new();
	req = json_tokener_parse_ex(tok, line, (int)len);
	/* One complete value and nothing after it; anything else is malformed. */
	if (req && json_tokener_get_parse_end(tok) != len) {
		json_object_put(req);
		req = NULL;
	}
	json_tokener_free(tok);
	if (!req) {
		rep = error_reply("GenericError", "malformed JSON", NULL);
	} else if (pf_json_dup_check(line, len, req, why, sizeof(why))) {
		/* Not run: which of a repeated key's values counts depends on the reader. */
		snprintf(desc, sizeof(desc), "request: %s", why);
		rep = error_reply("GenericError", desc, NULL);
		json_object_put(req);
	} else {
		rep = pf_command(d, c, req);
		json_object_put(req);
	}
	/* A descriptor no command took (refused, or sent with a query) is not kept for later. */
	if (c->has_fd_in) {
		close(c->fd_in);
		c->has_fd_in = false;
	}
	if (!rep)
		return;		/* the command answers later (pf_control_send) */
	client_send(c, rep);
	json_object_put(rep);
}

void pf_control_send(struct pf_daemon *d, struct pf_client *c, json_object *rep)
{
	(void)d;
	client_send(c, rep);
	json_object_put(rep);
	client_flush(c);	/* a broken one is dropped by pf_control_sweep() */
}

/* Take complete lines out of the input buffer; an over-long line gets one error and is
 * skipped up to its newline without being buffered. */
static void client_parse(struct pf_daemon *d, struct pf_client *c)
{
	size_t start = 0;

	for (size_t i = 0; i < c->in_len; i++) {
		if (c->in[i] != '\n')
			continue;
		if (!c->skipping)
			client_line(d, c, c->in + start, i - start);
		c->skipping = false;
		start = i + 1;
	}
	memmove(c->in, c->in + start, c->in_len - start);
	c->in_len -= start;
	if (c->in_len > d->cfg.max_line) {
		char msg[96];
		json_object *rep;

		if (!c->skipping) {
			snprintf(msg, sizeof(msg), "request too large (limit %u bytes)", d->cfg.max_line);
			rep = error_reply("GenericError", msg, NULL);
			client_send(c, rep);
			json_object_put(rep);
		}
		c->skipping = true;
		c->in_len = 0;
	}
}

/* recv() that also takes a descriptor sent with the bytes (SCM_RIGHTS): it belongs to the
 * next request (save-slice and restore-slice read or write it). Only the latest one is
 * kept, and extra ones in the same message are closed, so a client cannot pile them up. */
static ssize_t client_recv(struct pf_client *c, char *buf, size_t len)
{
	union { struct cmsghdr h; char b[CMSG_SPACE(4 * sizeof(int))]; } cb;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
			     .msg_controllen = sizeof(cb.b) };
	ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n < 0)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		size_t nfd;
		int fds[4];

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		memcpy(fds, CMSG_DATA(cm), nfd * sizeof(int));
		for (size_t i = 0; i < nfd; i++) {
			if (c->has_fd_in)
				close(c->fd_in);
			c->fd_in = fds[i];
			c->has_fd_in = true;
		}
	}
	return n;
}

void pf_client_io(struct pf_daemon *d, unsigned int idx, short revents)
{
	struct pf_client *c = d->clients[idx];
	char buf[16384];
	ssize_t n;

	if (revents & POLLIN) {
		n = client_recv(c, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			client_drop(d, idx);
			return;
		}
		if (n > 0) {
			char *p = realloc(c->in, c->in_len + (size_t)n);

			if (!p) {
				client_drop(d, idx);
				return;
			}
			c->in = p;
			memcpy(c->in + c->in_len, buf, (size_t)n);
			c->in_len += (size_t)n;
			client_parse(d, c);
		}
	} else if (revents & (POLLHUP | POLLERR)) {
		client_drop(d, idx);
		return;
	}
	client_flush(c);
	if (c->broken)
		client_drop(d, idx);
}

/* Past its deadline, whether @c's input came in time but is not read yet: a loop
 * iteration that outlasted the deadline (a long command, a slow fsync) has not looked
 * at the socket since. Granted once: a client that keeps sending lines other than
 * qmp_capabilities is closed at the next sweep all the same. */
static bool input_waits(struct pf_client *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };

	if (c->late_input || poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))
		return false;
	c->late_input = true;
	return true;
}

void pf_control_sweep(struct pf_daemon *d, uint64_t now_ns)
{
	uint64_t limit = (uint64_t)d->cfg.negotiate_ms * VGPU_NSEC_PER_MSEC;
	char why[96];

	for (unsigned int i = 0; i < PF_MAX_CLIENTS; i++) {
		struct pf_client *c = d->clients[i];

		if (!c)
			continue;
		/* A connection that never negotiates holds a slot for nothing: it is told why
		 * and closed, so idle connections cannot fill the table. */
		if (!c->negotiated && !c->broken && now_ns - c->accepted_ns >= limit &&
		    !input_waits(c)) {
			json_object *rep;

			snprintf(why, sizeof(why), "negotiation timeout: no qmp_capabilities within "
				 "%u ms", d->cfg.negotiate_ms);
			rep = error_reply("GenericError", why, NULL);
			client_send(c, rep);
			json_object_put(rep);
			client_flush(c);
			cmn_info("control: pid %d (uid %u) closed: %s", (int)c->pid,
				  (unsigned int)c->uid, why);
			c->broken = true;
		}
		if (c->broken)
			client_drop(d, i);
	}
}
