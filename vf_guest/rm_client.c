/* RM calls from the guest: each is one VF_MSG_RM mailbox message carrying an RM wire message
 * (include/vgpu/rm.h), answered with the host's status unchanged.
 *
 * include/vgpu/rm.h did not exist when this was written (see doc/vf_guest.md); until it does,
 * every call answers -EOPNOTSUPP with a message saying so, and the rest of the driver (and
 * vgpu-vf-test) reports the features that need the RM as unavailable instead of failing. The
 * encoders below are the only place that changes when the wire format lands. */
#include <errno.h>
#include <string.h>

#include "vf_guest/vf_internal.h"

#if __has_include(<vgpu/rm.h>)
#define VF_HAVE_RM_H 1
#else
#define VF_HAVE_RM_H 0
#endif

bool vf_rm_available(void)
{
	return false;
}

static int rm_missing(struct vgpu_vf *vf, const char *what)
{
	return vf_error(vf, -EOPNOTSUPP, "%s: this driver was built without the RM wire "
			"protocol (include/vgpu/rm.h%s)", what,
			VF_HAVE_RM_H ? " is present but not wired in yet" : " is missing");
}

int vf_rm_raw(struct vgpu_vf *vf, const void *req, size_t len, void *rsp, size_t *rsp_len)
{
	return vgpu_vf_mbox_call(vf, VF_MSG_RM, req, len, rsp, rsp_len);
}

int vf_rm_vidmem_alloc(struct vgpu_vf *vf, uint64_t size, uint64_t page_size,
		       uint32_t *handle, uint64_t *pa)
{
	(void)size, (void)page_size, (void)handle, (void)pa;
	return rm_missing(vf, "VRAM alloc");
}

int vf_rm_free(struct vgpu_vf *vf, uint32_t handle)
{
	(void)handle;
	return rm_missing(vf, "RM free");
}

int vf_rm_vaspace_alloc(struct vgpu_vf *vf, uint64_t pdb, uint32_t *handle)
{
	(void)pdb, (void)handle;
	return rm_missing(vf, "VA space alloc");
}

int vf_rm_channel_alloc(struct vgpu_vf *vf, const struct vf_rm_chan_args *a,
			uint32_t *handle, uint32_t *chid, uint32_t *token)
{
	(void)a, (void)handle, (void)chid, (void)token;
	return rm_missing(vf, "channel alloc");
}

int vf_rm_channel_submit(struct vgpu_vf *vf, uint32_t handle, uint32_t gp_put)
{
	(void)handle, (void)gp_put;
	return rm_missing(vf, "RPC submit");
}
