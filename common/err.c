// SPDX-License-Identifier: MIT
/* Error code names and text; see err.h. */
#include <string.h>

#include "common/err.h"

static const struct {
	const char *name, *text;
} cmn_errs[VGPU_ERR_END - VGPU_ERR_BASE] = {
	[VGPU_EFOREIGN - VGPU_ERR_BASE]	  = { "VGPU_EFOREIGN", "Object belongs to another function" },
	[VGPU_EQUOTA - VGPU_ERR_BASE]	  = { "VGPU_EQUOTA", "Function quota exceeded" },
	[VGPU_EPROTO_SEQ - VGPU_ERR_BASE] = { "VGPU_EPROTO_SEQ", "Sequence number mismatch" },
	[VGPU_ECHECKSUM - VGPU_ERR_BASE]  = { "VGPU_ECHECKSUM", "Checksum mismatch" },
	[VGPU_EABI - VGPU_ERR_BASE]	  = { "VGPU_EABI", "Incompatible ABI version" },
	[VGPU_ECHANERR - VGPU_ERR_BASE]	  = { "VGPU_ECHANERR", "Channel is in error state" },
};

const char *cmn_strerror(int err)
{
	int e = err < 0 ? -err : err;
	const char *s;

	if (e == 0)
		return "Success";
	if (e >= VGPU_ERR_BASE && e < VGPU_ERR_END)
		return cmn_errs[e - VGPU_ERR_BASE].text;
	/* strerrordesc_np() returns static text: no buffer, no locale, thread-safe. */
	s = strerrordesc_np(e);
	return s ? s : "Unknown error";
}

const char *cmn_errname(int err)
{
	int e = err < 0 ? -err : err;
	const char *s;

	if (e == 0)
		return "OK";
	if (e >= VGPU_ERR_BASE && e < VGPU_ERR_END)
		return cmn_errs[e - VGPU_ERR_BASE].name;
	s = strerrorname_np(e);
	return s ? s : "EUNKNOWN";
}
