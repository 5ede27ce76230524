/* RM calls from the guest: each is one VF_MSG_RM mailbox message carrying an RM wire message,
 * answered with the host's status unchanged.
 *
 * include/vgpu/rm.h did not exist when this was written (doc/vf_guest.md). Until it does, the
 * driver speaks the provisional format of vf_rm_shim.h, and only to hosts that announce the
 * BAR2 extension (ABI minor >= 1); with any other host every call answers -EOPNOTSUPP with a
 * message saying why, and vgpu-vf-test reports the cases that need the RM as skipped. The
 * encoders below are the only place that changes when the wire format lands. */
#include <errno.h>
#include <string.h>

#include "vf_guest/vf_internal.h"
#include "vf_guest/vf_rm_shim.h"

bool vf_rm_available(const struct vgpu_vf *vf)
{
	return vf->hdr && VGPU_ABI_VERSION_MINOR(vf->hdr->abi_version) >= 1;
}

static int rm_call(struct vgpu_vf *vf, uint32_t op, uint32_t handle, const uint64_t *a,
		   unsigned int na, struct vf_shim_rm_rsp *rsp)
{
	struct vf_shim_rm_req q = { .magic = VF_SHIM_RM_MAGIC, .op = op, .handle = handle };
	size_t len = sizeof(*rsp);
	int ret;

	if (!vf_rm_available(vf))
		return vf_error(vf, -EOPNOTSUPP, "RM call %u: the host speaks no RM wire protocol "
				"this driver knows (include/vgpu/rm.h is missing)", op);
	memcpy(q.a, a, na * sizeof(*a));
	memset(rsp, 0, sizeof(*rsp));
	ret = vgpu_vf_mbox_call(vf, VF_MSG_RM, &q, sizeof(q), rsp, &len);
	if (ret)
		return ret;	/* the host's status, as it sent it */
	if (len < sizeof(*rsp) || rsp->magic != VF_SHIM_RM_MAGIC || rsp->op != op)
		return vf_error(vf, -EPROTO, "RM call %u: malformed reply (%zu bytes)", op, len);
	return 0;
}

int vf_rm_raw(struct vgpu_vf *vf, const void *req, size_t len, void *rsp, size_t *rsp_len)
{
	return vgpu_vf_mbox_call(vf, VF_MSG_RM, req, len, rsp, rsp_len);
}

int vf_rm_vidmem_alloc(struct vgpu_vf *vf, uint64_t size, uint64_t page_size,
		       uint32_t *handle, uint64_t *pa)
{
	const uint64_t a[] = { size, page_size };
	struct vf_shim_rm_rsp r;
	int ret = rm_call(vf, VF_SHIM_RM_VIDMEM_ALLOC, 0, a, 2, &r);

	if (ret)
		return ret;
	*handle = r.handle;
	*pa = r.o[0];
	return 0;
}

int vf_rm_free(struct vgpu_vf *vf, uint32_t handle)
{
	struct vf_shim_rm_rsp r;

	return rm_call(vf, VF_SHIM_RM_FREE, handle, NULL, 0, &r);
}

int vf_rm_vaspace_alloc(struct vgpu_vf *vf, uint64_t pdb, uint32_t *handle)
{
	struct vf_shim_rm_rsp r;
	int ret = rm_call(vf, VF_SHIM_RM_VASPACE_ALLOC, 0, &pdb, 1, &r);

	if (!ret)
		*handle = r.handle;
	return ret;
}

int vf_rm_channel_alloc(struct vgpu_vf *vf, const struct vf_rm_chan_args *c,
			uint32_t *handle, uint32_t *chid, uint32_t *token)
{
	const uint64_t a[] = { c->vaspace, c->pdb, c->runlist, c->gpfifo_va, c->entries,
			       c->userd_aper, c->userd_addr, c->replayable ? 1 : 0 };
	struct vf_shim_rm_rsp r;
	int ret = rm_call(vf, VF_SHIM_RM_CHANNEL_ALLOC, 0, a, 8, &r);

	if (ret)
		return ret;
	*handle = r.handle;
	*chid = (uint32_t)r.o[0];
	*token = (uint32_t)r.o[1];
	return 0;
}

int vf_rm_channel_submit(struct vgpu_vf *vf, uint32_t handle, uint32_t gp_put)
{
	const uint64_t a[] = { gp_put };
	struct vf_shim_rm_rsp r;

	return rm_call(vf, VF_SHIM_RM_CHANNEL_SUBMIT, handle, a, 1, &r);
}
