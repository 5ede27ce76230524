/* SPDX-License-Identifier: MIT */
/* common/err.h - error codes: 0 or a negative errno throughout the project.
 *
 * Plain errno values say what kind of failure it was; the few failures that have no errno
 * of their own get codes above VGPU_ERR_BASE so callers and the CLI can tell them apart. */
#ifndef VGPU_COMMON_ERR_H
#define VGPU_COMMON_ERR_H

#include <errno.h>

#define VGPU_ERR_BASE	4096
enum cmn_err {
	VGPU_EFOREIGN = VGPU_ERR_BASE,	/* object belongs to another function */
	VGPU_EQUOTA,			/* over the function's quota (space may exist) */
	VGPU_EPROTO_SEQ,		/* transport or RPC sequence number mismatch */
	VGPU_ECHECKSUM,			/* message checksum mismatch */
	VGPU_EABI,			/* peer speaks an incompatible ABI version */
	VGPU_ECHANERR,			/* channel is in its error state */
	VGPU_ERR_END,
};

/* Text for @err (negative errno or -VGPU_E*); never NULL, thread-safe. */
const char *cmn_strerror(int err);

/* Symbolic name of @err ("ENOMEM", "VGPU_EQUOTA"); never NULL. */
const char *cmn_errname(int err);

#endif
