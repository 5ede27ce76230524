/* Error code names and text; see err.h. */
#include <string.h>

#include "common/err.h"

static const char *const vgpu_err_text[VGPU_ERR_END - VGPU_ERR_BASE] = {
	[VGPU_EFOREIGN - VGPU_ERR_BASE]	  = "Object belongs to another function",
	[VGPU_EQUOTA - VGPU_ERR_BASE]	  = "Function quota exceeded",
	[VGPU_EPROTO_SEQ - VGPU_ERR_BASE] = "Sequence number mismatch",
	[VGPU_ECHECKSUM - VGPU_ERR_BASE]  = "Checksum mismatch",
	[VGPU_EABI - VGPU_ERR_BASE]	  = "Incompatible ABI version",
	[VGPU_ECHANERR - VGPU_ERR_BASE]	  = "Channel is in error state",
};

static const char *const vgpu_err_name[VGPU_ERR_END - VGPU_ERR_BASE] = {
	[VGPU_EFOREIGN - VGPU_ERR_BASE]	  = "VGPU_EFOREIGN",
	[VGPU_EQUOTA - VGPU_ERR_BASE]	  = "VGPU_EQUOTA",
	[VGPU_EPROTO_SEQ - VGPU_ERR_BASE] = "VGPU_EPROTO_SEQ",
	[VGPU_ECHECKSUM - VGPU_ERR_BASE]  = "VGPU_ECHECKSUM",
	[VGPU_EABI - VGPU_ERR_BASE]	  = "VGPU_EABI",
	[VGPU_ECHANERR - VGPU_ERR_BASE]	  = "VGPU_ECHANERR",
};

const char *vgpu_strerror(int err)
{
	int e = err < 0 ? -err : err;
	const char *s;

	if (e == 0)
		return "Success";
	if (e >= VGPU_ERR_BASE && e < VGPU_ERR_END)
		return vgpu_err_text[e - VGPU_ERR_BASE];
	/* strerrordesc_np() returns static text: no buffer, no locale, thread-safe. */
	s = strerrordesc_np(e);
	return s ? s : "Unknown error";
}

const char *vgpu_errname(int err)
{
	int e = err < 0 ? -err : err;
	const char *s;

	if (e == 0)
		return "OK";
	if (e >= VGPU_ERR_BASE && e < VGPU_ERR_END)
		return vgpu_err_name[e - VGPU_ERR_BASE];
	s = strerrorname_np(e);
	return s ? s : "EUNKNOWN";
}
