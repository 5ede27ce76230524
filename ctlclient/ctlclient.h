/* SPDX-License-Identifier: MIT */
/* ctlclient - the client side of vgpud's control socket, and the value formats both ends of
 * it share. vgpuctl and vgpu-vm speak to vgpud only through this library.
 *
 * The protocol (doc/pf_manager.md) is QMP-shaped: newline-delimited JSON, a greeting
 * {"VGPUD": ...}, the client's "qmp_capabilities", then one request {"execute", "arguments"}
 * at a time, answered by {"return": ...} or {"error": {"class", "desc", "errno", "data"}};
 * {"event": ...} lines may arrive in between and are skipped here. A reply line longer than
 * CTLC_MAX_REPLY ends the connection as unreachable, and so does a deadline: an open
 * (connect, greeting, negotiation) and each request (send and reply, events included) has
 * CTLC_TIMEOUT_MS in all, however the peer spaces its bytes (ctlc_opts sets another).
 *
 * Calls return 0 or a negative errno and leave one message naming the object in the
 * struct cmn_fail they take (which may be NULL). One connection is used by one thread. */
#ifndef VGPU_CTLCLIENT_H
#define VGPU_CTLCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fail.h"

struct json_object;
struct ctlc;

#define CTLC_MAX_REPLY		(64u << 20)	/* longest reply line: a full vram-map fits */
#define CTLC_TIMEOUT_MS		30000		/* longest open, longest request */
#define CTLC_UUID_STR		37		/* 36 characters and the NUL */
#define CTLC_DEFAULT_SOCKET	"/run/vgpud/control.sock"
/* The control protocol's major version: vgpud's greeting says it as version.protocol,
 * and a client refuses a greeting that names another (what it would send may mean
 * something else there). */
#define CTLC_PROTOCOL		1

/* ---- the connection ------------------------------------------------------------------- */

/* Connect to vgpud's control socket @path and negotiate capabilities. -EACCES (the socket's
 * permissions), -ECONNREFUSED (no socket or nobody listening: vgpud is not running; or the
 * deadline passed, the message naming the socket and what it waited for), -EPROTO (the
 * peer is not vgpud or refused the negotiation), -EBUSY (vgpud had no connection slot for
 * this user: "too many clients", its reason in @f), -ENAMETOOLONG, -ENOMEM. */
int ctlc_open(const char *path, struct ctlc **out, struct cmn_fail *f);

/* How a connection waits; all zero (or a NULL pointer) is what ctlc_open() does. */
struct ctlc_opts {
	unsigned int timeout_ms;	/* the most the open, and then each request, may take
					 * in all; 0: CTLC_TIMEOUT_MS */
	uint64_t (*clock_ns)(void *arg);	/* the deadlines' clock in ns, read before each
						 * wait (tests); NULL: CLOCK_MONOTONIC */
	void *clock_arg;
};

/* ctlc_open() with @o's deadline and clock (@o may be NULL). */
int ctlc_open_opts(const char *path, const struct ctlc_opts *o, struct ctlc **out,
		   struct cmn_fail *f);

/* Close the connection; NULL is fine. */
void ctlc_close(struct ctlc *c);

/* The socket path @c was opened on. */
const char *ctlc_path(const struct ctlc *c);

/* Send @cmd with @args (ownership taken; NULL for none) and wait for its reply, events
 * skipped, all within the connection's deadline (CTLC_TIMEOUT_MS unless ctlc_opts set
 * another), which starts again with each request. 0 with *@reply the whole reply object
 * (a "return" or an "error"; the caller puts it), or -ECONNREFUSED when vgpud closed the
 * connection, the deadline passed (the message says while doing what) or it sent an
 * oversized or malformed line (the connection is unusable then). */
int ctlc_request(struct ctlc *c, const char *cmd, struct json_object *args,
		 struct json_object **reply, struct cmn_fail *f);

/* ctlc_request() that also passes descriptor @fd (SCM_RIGHTS) with the request: the file
 * save-slice writes or restore-slice reads, opened with the caller's own rights. */
int ctlc_request_fd(struct ctlc *c, const char *cmd, struct json_object *args, int fd,
		    struct json_object **reply, struct cmn_fail *f);

/* ctlc_request() for callers that want only the result: 0 with *@ret (if not NULL) the
 * "return" object, a reference the caller puts; an error reply becomes the errno of
 * ctlc_reply_errno() with its "desc" as the message. */
int ctlc_exec(struct ctlc *c, const char *cmd, struct json_object *args,
	      struct json_object **ret, struct cmn_fail *f);

/* The negative errno an {"error": ...} object stands for: its "errno" member ("ENOENT"),
 * else its class (NotFound -ENOENT, Conflict -EBUSY, InsufficientResources -ENOSPC,
 * PermissionDenied -EACCES, InvalidArgument -EINVAL, CommandNotFound -EOPNOTSUPP), else -EIO. */
int ctlc_reply_errno(struct json_object *error);

/* ---- values as the protocol and its users write them ------------------------------------ */

/* Parse a size: bytes, or a number with K/M/G/T/P (IEC; "G", "GB" and "GiB" all mean 2^30).
 * Empty, negative, fractional, trailing garbage: -EINVAL; overflow: -ERANGE. */
int ctlc_size_parse(const char *s, uint64_t *out);

/* Format @bytes as IEC text ("4 GiB", "1.5 GiB", "100 B") into @buf; returns @buf. */
const char *ctlc_size_format(uint64_t bytes, char *buf, size_t len);

/* Check a UUID "8-4-4-4-12" (hex, either case); -EINVAL if malformed. @out (lower case) and
 * @bytes may be NULL. */
int ctlc_uuid_parse(const char *s, char out[CTLC_UUID_STR], uint8_t bytes[16]);

/* A new random (version 4) UUID, lower case. */
void ctlc_uuid_generate(char out[CTLC_UUID_STR]);

#endif
