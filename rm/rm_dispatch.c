// SPDX-License-Identifier: MIT
/* The guest-facing entry: one wire message (include/vgpu/rm.h) from a VF in, one reply out.
 * Everything in the request is checked before anything runs: magic, ABI version, op,
 * lengths (the header's against what arrived, the params' against the header's), and the
 * op's own fields are then validated by the call it maps to. The guest cannot pick its
 * function: that is @fn, the VF the message came from. */
#include <errno.h>
#include <string.h>

#include "common/err.h"
#include "rm/rm_internal.h"

/* Params buffer: in and out parameters of one call. */
struct dispatch_ctx {
	const uint8_t *req;
	size_t len;
	uint8_t params[VGPU_RM_MAX_PARAMS];
	size_t out_len;
	uint32_t handle;
};

static int do_alloc(struct rm *rm, unsigned int fn, struct dispatch_ctx *d)
{
	const struct vgpu_rm_alloc *a = (const void *)d->req;

	if (d->len < sizeof(*a) || a->params_len > VGPU_RM_MAX_PARAMS ||
	    d->len != sizeof(*a) + a->params_len || a->reserved)
		return -EBADMSG;
	if (a->params_len)
		memcpy(d->params, a + 1, a->params_len);
	d->handle = a->h_object;
	d->out_len = a->params_len;
	return rm_alloc(rm, fn, a->h_client, a->h_parent, &d->handle, a->h_class,
			d->params, a->params_len);
}

static int do_control(struct rm *rm, unsigned int fn, struct dispatch_ctx *d)
{
	const struct vgpu_rm_control *c = (const void *)d->req;

	if (d->len < sizeof(*c) || c->params_len > VGPU_RM_MAX_PARAMS ||
	    d->len != sizeof(*c) + c->params_len)
		return -EBADMSG;
	if (c->params_len)
		memcpy(d->params, c + 1, c->params_len);
	d->out_len = c->params_len;
	return rm_control(rm, fn, c->h_client, c->h_object, c->cmd, d->params, &d->out_len,
			  sizeof(d->params));
}

static int do_map(struct rm *rm, unsigned int fn, struct dispatch_ctx *d)
{
	const struct vgpu_rm_free *m = (const void *)d->req;
	struct vgpu_rm_map_info info = { 0 };
	int ret;

	if (d->len != sizeof(*m))
		return -EBADMSG;
	ret = rm_map(rm, fn, m->h_client, m->h_object, &info.addr, &info.size, &info.aperture);
	if (!ret) {
		memcpy(d->params, &info, sizeof(info));
		d->out_len = sizeof(info);
	}
	return ret;
}

static int dispatch_op(struct rm *rm, unsigned int fn, const struct vgpu_rm_msg *h,
		       struct dispatch_ctx *d)
{
	const struct vgpu_rm_free *f = (const void *)d->req;
	const struct vgpu_rm_dup *du = (const void *)d->req;
	const struct vgpu_rm_share *sh = (const void *)d->req;

	switch (h->op) {
	case VGPU_RM_OP_ALLOC_CLIENT:
		return d->len == sizeof(*h) ? rm_client_alloc(rm, fn, &d->handle) : -EBADMSG;
	case VGPU_RM_OP_ALLOC:
		return do_alloc(rm, fn, d);
	case VGPU_RM_OP_FREE:
		return d->len == sizeof(*f) ? rm_free(rm, fn, f->h_client, f->h_object) : -EBADMSG;
	case VGPU_RM_OP_CONTROL:
		return do_control(rm, fn, d);
	case VGPU_RM_OP_DUP:
		if (d->len != sizeof(*du) || du->reserved)
			return -EBADMSG;
		d->handle = du->h_object;
		return rm_dup(rm, fn, du->h_client, du->h_parent, &d->handle, du->h_client_src,
			      du->h_object_src);
	case VGPU_RM_OP_SHARE:
		return d->len == sizeof(*sh) ?
			rm_share(rm, fn, sh->h_client, sh->h_object, sh->h_client_target, sh->access) :
			-EBADMSG;
	case VGPU_RM_OP_MAP:
		return do_map(rm, fn, d);
	}
	return -EOPNOTSUPP;
}

int rm_dispatch(struct rm *rm, unsigned int fn, const void *req, size_t len, void *reply,
		size_t *reply_len)
{
	struct dispatch_ctx d = { .req = req, .len = len };
	struct vgpu_rm_msg h = { 0 };
	struct vgpu_rm_reply *rp = reply;
	int ret;

	if (!rm || !reply || !reply_len || *reply_len < sizeof(*rp) + VGPU_RM_MAX_PARAMS)
		return -EINVAL;
	if (!req || len < sizeof(h) || len > VGPU_RM_MAX_MSG) {
		ret = -EBADMSG;
	} else {
		memcpy(&h, req, sizeof(h));
		if (h.magic != (uint32_t)VGPU_RM_MSG_MAGIC || h.length != len)
			ret = -EBADMSG;
		else if (!vgpu_abi_compatible(h.abi_version))
			ret = -VGPU_EABI;
		else if (fn >= rm->nr_fns)
			ret = -EINVAL;
		else
			ret = dispatch_op(rm, fn, &h, &d);
	}
	if (ret)
		d.out_len = 0;
	*rp = (struct vgpu_rm_reply){ .magic = (uint32_t)VGPU_RM_MSG_MAGIC,
		.abi_version = VGPU_ABI_VERSION, .op = h.op,
		.length = (uint32_t)(sizeof(*rp) + d.out_len), .cookie = h.cookie, .status = ret,
		.handle = ret ? 0 : d.handle, .params_len = (uint32_t)d.out_len };
	if (d.out_len)
		memcpy(rp + 1, d.params, d.out_len);
	*reply_len = sizeof(*rp) + d.out_len;
	return 0;
}
