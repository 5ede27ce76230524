// SPDX-License-Identifier: MIT
/* RM calls from the guest: one VF_MSG_RM mailbox message per call, carrying an RM wire
 * message of include/vgpu/rm.h, answered by one reply whose status is passed up unchanged.
 *
 * At attach the driver makes its RM context: a client, a DEVICE under it, a SUBDEVICE for
 * controls. A host that cannot do that (no RM behind its mailbox yet) leaves the VF usable
 * for everything that needs no RM; vf->rm_why says why the rest is unavailable. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <vgpu/rm.h>

#include "vf_guest/vf_internal.h"

bool vf_rm_available(const struct vgpu_vf *vf)
{
	return vf->rm_ok;
}

/* Send @req (@len bytes, header filled here) and check the reply; out params (at most
 * @out_len bytes) to @out, the reply's handle to *@handle. Returns the RM's status. */
static int rm_xfer(struct vgpu_vf *vf, uint32_t op, void *req, size_t len, void *out,
		   size_t out_len, uint32_t *handle)
{
	struct vgpu_rm_msg *h = req;
	uint8_t buf[VF_MSG_MAX_PAYLOAD];
	struct vgpu_rm_reply *r = (struct vgpu_rm_reply *)buf;
	size_t rlen = sizeof(buf);
	int ret;

	*h = (struct vgpu_rm_msg){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
				   .abi_version = VGPU_ABI_VERSION, .op = op,
				   .length = (uint32_t)len,
				   .cookie = __atomic_add_fetch(&vf->rm_cookie, 1, __ATOMIC_RELAXED) };
	ret = vgpu_vf_mbox_call(vf, VF_MSG_RM, req, len, buf, &rlen);
	if (ret)
		return ret;
	if (rlen < sizeof(*r) || r->magic != (uint32_t)VGPU_RM_MSG_MAGIC || r->op != op ||
	    r->cookie != h->cookie || r->length != rlen || r->params_len != rlen - sizeof(*r))
		return vf_error(vf, -EPROTO, "RM op %u: malformed reply (%zu bytes)", op, rlen);
	if (r->status)
		return r->status;
	if (out_len > r->params_len)
		return vf_error(vf, -EPROTO, "RM op %u: reply carries %u bytes, expected %zu", op,
				r->params_len, out_len);
	if (out_len)
		memcpy(out, r + 1, out_len);
	if (handle)
		*handle = r->handle;
	return 0;
}

/* ALLOC of @cls under @parent with @params (in and out). */
static int rm_alloc(struct vgpu_vf *vf, uint32_t parent, uint32_t cls, void *params,
		    size_t plen, uint32_t *handle)
{
	struct {
		struct vgpu_rm_alloc a;
		uint8_t p[sizeof(struct vgpu_rm_channel_params)];
	} m;

	VGPU_ASSERT(plen <= sizeof(m.p));
	memset(&m, 0, sizeof(m));
	m.a = (struct vgpu_rm_alloc){ .h_client = vf->h_client, .h_parent = parent,
				      .h_class = cls, .params_len = (uint32_t)plen };
	if (plen)
		memcpy(m.p, params, plen);
	return rm_xfer(vf, VGPU_RM_OP_ALLOC, &m, sizeof(m.a) + plen, params, plen, handle);
}

/* CONTROL @cmd on @obj with @plen bytes of @params in; @out_len bytes come back into them. */
static int rm_control(struct vgpu_vf *vf, uint32_t obj, uint32_t cmd, void *params, size_t plen,
		      size_t out_len)
{
	struct {
		struct vgpu_rm_control c;
		uint8_t p[64];
	} m;

	VGPU_ASSERT(plen <= sizeof(m.p));
	memset(&m, 0, sizeof(m));
	m.c = (struct vgpu_rm_control){ .h_client = vf->h_client, .h_object = obj, .cmd = cmd,
					.params_len = (uint32_t)plen };
	if (plen)
		memcpy(m.p, params, plen);
	return rm_xfer(vf, VGPU_RM_OP_CONTROL, &m, sizeof(m.c) + plen, params, out_len, NULL);
}

int vf_rm_setup(struct vgpu_vf *vf)
{
	struct vgpu_rm_msg m;
	int ret;

	vf->rm_ok = false;
	vf->h_client = vf->h_device = vf->h_subdevice = 0;
	ret = rm_xfer(vf, VGPU_RM_OP_ALLOC_CLIENT, &m, sizeof(m), NULL, 0, &vf->h_client);
	if (!ret)
		ret = rm_alloc(vf, vf->h_client, VGPU_RM_CLASS_DEVICE, NULL, 0, &vf->h_device);
	if (!ret)
		ret = rm_alloc(vf, vf->h_device, VGPU_RM_CLASS_SUBDEVICE, NULL, 0, &vf->h_subdevice);
	if (ret) {
		snprintf(vf->rm_why, sizeof(vf->rm_why), "the host's RM refused the driver's "
			 "client/device (%s)", vgpu_vf_strerror(ret));
		return ret;
	}
	vf->rm_ok = true;
	return 0;
}

void vf_rm_teardown(struct vgpu_vf *vf)
{
	if (vf->rm_ok && vf->h_client)
		vf_rm_free(vf, vf->h_client);	/* frees the whole tree */
	vf->rm_ok = false;
}

static int rm_need(struct vgpu_vf *vf, const char *what)
{
	if (vf->rm_ok)
		return 0;
	return vf_error(vf, -EOPNOTSUPP, "%s: %s", what, vf->rm_why);
}

int vf_rm_vidmem_alloc(struct vgpu_vf *vf, uint64_t size, uint64_t page_size,
		       uint32_t *handle, uint64_t *pa)
{
	/* The RM hands out 64 KiB and 2 MiB pages; a 4 KiB request gets a 64 KiB one. */
	uint64_t ps = page_size < (64u << 10) ? 64u << 10 : page_size;
	struct vgpu_rm_vidmem_params p = { .size = (size + ps - 1) & ~(ps - 1), .page_size = ps,
					   .flags = VGPU_RM_MEM_CONTIGUOUS };
	int ret = rm_need(vf, "VRAM alloc");

	if (!ret)
		ret = rm_alloc(vf, vf->h_device, VGPU_RM_CLASS_MEMORY_VIDMEM, &p, sizeof(p), handle);
	if (!ret)
		*pa = p.addr;
	return ret;
}

int vf_rm_sysmem_alloc(struct vgpu_vf *vf, uint64_t size, uint32_t *handle, uint64_t *iova,
		       uint64_t *dma_offset)
{
	struct vgpu_rm_sysmem_params p = { .size = size };
	uint64_t dma_size = vf->hdr->dma_size;
	int ret = rm_need(vf, "system memory alloc");

	if (!ret)
		ret = rm_alloc(vf, vf->h_device, VGPU_RM_CLASS_MEMORY_SYSMEM, &p, sizeof(p), handle);
	if (ret)
		return ret;
	/* Host input: the driver will write through BAR2 + dma_off + dma_offset. */
	if (p.dma_offset % VF_DMA_PAGE || p.dma_offset > dma_size || size > dma_size - p.dma_offset) {
		vf_rm_free(vf, *handle);
		return vf_error(vf, -EPROTO, "the RM placed %llu bytes of system memory at %#llx, "
				"outside the %llu-byte DMA memory", (unsigned long long)size,
				(unsigned long long)p.dma_offset, (unsigned long long)dma_size);
	}
	*iova = p.iova;
	*dma_offset = p.dma_offset;
	return 0;
}

int vf_rm_free(struct vgpu_vf *vf, uint32_t handle)
{
	struct vgpu_rm_free f = { .h_client = vf->h_client, .h_object = handle };

	return rm_xfer(vf, VGPU_RM_OP_FREE, &f, sizeof(f), NULL, 0, NULL);
}

int vf_rm_free_as(struct vgpu_vf *vf, uint32_t client, uint32_t handle)
{
	struct vgpu_rm_free f = { .h_client = client, .h_object = handle };

	return rm_xfer(vf, VGPU_RM_OP_FREE, &f, sizeof(f), NULL, 0, NULL);
}

int vf_rm_vaspace_alloc(struct vgpu_vf *vf, uint64_t pdb, uint32_t *handle)
{
	struct vgpu_rm_vaspace_params p = { .pdb = pdb };
	int ret = rm_need(vf, "VA space alloc");

	return ret ? ret : rm_alloc(vf, vf->h_device, VGPU_RM_CLASS_VASPACE, &p, sizeof(p), handle);
}

int vf_rm_channel_alloc(struct vgpu_vf *vf, const struct vf_rm_chan_args *c,
			uint32_t *handle, uint32_t *chid, uint32_t *token)
{
	struct vgpu_rm_channel_params p = {
		.h_vaspace = c->vaspace, .runlist = c->runlist, .gpfifo_va = c->gpfifo_va,
		.gpfifo_entries = c->entries, .flags = c->replayable ? VGPU_RM_CHAN_REPLAYABLE : 0,
		.userd_aper = c->userd_aper, .userd_addr = c->userd_addr,
	};
	struct vgpu_rm_enable_params en = { .enable = 1 };
	int ret = rm_need(vf, "channel alloc");

	if (!ret)
		ret = rm_alloc(vf, vf->h_device, VGPU_RM_CLASS_CHANNEL_GPFIFO, &p, sizeof(p), handle);
	if (ret)
		return ret;
	ret = rm_control(vf, *handle, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, sizeof(en), 0);
	if (ret) {
		vf_rm_free(vf, *handle);
		return ret;
	}
	*chid = p.chid;
	*token = p.token;
	return 0;
}

int vf_rm_channel_submit(struct vgpu_vf *vf, uint32_t handle, uint32_t gp_put)
{
	struct { uint32_t gp_put, reserved; } p = { gp_put, 0 };

	return rm_control(vf, handle, VGPU_RM_CTRL_CHANNEL_SUBMIT, &p, sizeof(p), 0);
}

int vf_rm_raw(struct vgpu_vf *vf, const void *req, size_t len, void *rsp, size_t *rsp_len)
{
	return vgpu_vf_mbox_call(vf, VF_MSG_RM, req, len, rsp, rsp_len);
}
