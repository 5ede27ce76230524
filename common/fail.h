/* SPDX-License-Identifier: MIT */
/* common/fail.h - one failure for the user: a negative errno and a message naming the object.
 *
 * Deep helpers fill a struct cmn_fail and return the errno, so the entry point (a control
 * command, a CLI verb, the libvirt hook) can report one message without re-deriving what
 * went wrong. cmn_fail() with a NULL @f only returns the errno, for callers that do not
 * want the text. */
#ifndef VGPU_COMMON_FAIL_H
#define VGPU_COMMON_FAIL_H

#define CMN_FAIL_MSG_MAX	768

/* What failed: @err (negative errno, 0 while nothing failed) and the message for the user. */
struct cmn_fail {
	int err;
	char msg[CMN_FAIL_MSG_MAX];
};

/* Record @err and a printf-style message in @f (which may be NULL); returns @err. A message
 * longer than CMN_FAIL_MSG_MAX - 1 bytes is cut there. */
int cmn_fail(struct cmn_fail *f, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
