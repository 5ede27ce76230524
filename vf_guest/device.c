// SPDX-License-Identifier: MIT
/* Attach, handshake, detach and recovery of one VF.
 *
 * Attaching is: transport attach (BAR2 mapped), header checks (magic, ABI major, layout),
 * ring views, then a GET_INFO round trip through the mailbox that must agree with the header.
 * Recovery does the same again after a reset or a lost endpoint; every object made before is
 * kept as a tombstone (marked lost, its host handle forgotten) until its owner frees it, so a
 * program holding pointers never touches freed memory. Reattaching is the third way: the
 * slice moved to another vgpud with every object (a live migration), so nothing is lost; the
 * new endpoint's BAR2 takes the old one's place at the same address and the rings, pages and
 * vectors are swapped under the objects. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "vf_guest/vf_internal.h"

#define VF_READY_TIMEOUT_NS	(10ull * 1000 * 1000 * 1000)

static struct cmn_mutex vf_err_lock = CMN_MUTEX_INITIALIZER("vf_err_lock");

int vf_error(struct vgpu_vf *vf, int err, const char *fmt, ...)
{
	char buf[sizeof(vf->last_error)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	cmn_mutex_lock(&vf_err_lock);
	memcpy(vf->last_error, buf, sizeof(buf));
	cmn_mutex_unlock(&vf_err_lock);
	if (!vf->opts.quiet)
		fprintf(stderr, "vgpu-vf: %s (%s)\n", buf, vgpu_vf_strerror(err));
	return err;
}

const char *vgpu_vf_last_error(const struct vgpu_vf *vf)
{
	return vf->last_error;
}

const char *vgpu_vf_strerror(int err)
{
	static const char *const names[] = {
		[VGPU_EFOREIGN - VGPU_ERR_BASE] = "object belongs to another function",
		[VGPU_EQUOTA - VGPU_ERR_BASE] = "over the function's quota",
		[VGPU_EPROTO_SEQ - VGPU_ERR_BASE] = "sequence number mismatch",
		[VGPU_ECHECKSUM - VGPU_ERR_BASE] = "checksum mismatch",
		[VGPU_EABI - VGPU_ERR_BASE] = "incompatible vGPU ABI version",
		[VGPU_ECHANERR - VGPU_ERR_BASE] = "channel is in its error state",
	};
	int e = -err;

	if (err == 0)
		return "success";
	if (e >= VGPU_ERR_BASE && e < VGPU_ERR_END)
		return names[e - VGPU_ERR_BASE];
	if (e > 0 && e < VGPU_ERR_BASE)
		return strerror(e);
	return "unknown error";
}

void vgpu_vf_get_info(const struct vgpu_vf *vf, struct vgpu_vf_info *out)
{
	*out = vf->info;
}

/* GET_INFO must describe the slice the header describes. */
static int vf_handshake(struct vgpu_vf *vf)
{
	struct vf_msg_info_req rq = { .abi_version = VGPU_ABI_VERSION };
	struct vf_msg_info mi;
	size_t len = sizeof(mi);
	int ret;

	memset(&mi, 0, sizeof(mi));
	/* Our version goes with the request (ABI minor 3): vgpud migrates only a slice whose
	 * guest said it reads the header's host_peer. */
	ret = vgpu_vf_mbox_call(vf, VF_MSG_GET_INFO, &rq, sizeof(rq), &mi, &len);
	if (ret)
		return vf_error(vf, ret, "GET_INFO handshake failed");
	if (len < sizeof(mi))
		return vf_error(vf, -EPROTO, "GET_INFO reply is %zu bytes", len);
	if (!vgpu_abi_compatible(mi.abi_version))
		return vf_error(vf, -VGPU_EABI, "host speaks vGPU ABI %u.%u, this driver %u.%u: "
				"refusing to attach", VGPU_ABI_VERSION_MAJOR(mi.abi_version),
				VGPU_ABI_VERSION_MINOR(mi.abi_version), VGPU_ABI_MAJOR,
				VGPU_ABI_MINOR);
	if (mi.vf_id != vf->info.vf_id || mi.vram_size != vf->info.vram_size)
		return vf_error(vf, -EPROTO, "GET_INFO (VF %u, %llu bytes) disagrees with BAR2 "
				"(VF %u, %llu bytes)", mi.vf_id, (unsigned long long)mi.vram_size,
				vf->info.vf_id, (unsigned long long)vf->info.vram_size);
	vf->info.reset_count = mi.reset_count;
	vf->seen_reset_count = mi.reset_count;
	return 0;
}

/* Backing of the DMA allocator: MEMORY_SYSMEM from the RM, the one owner of DMA memory. A
 * chunk lives until it is empty again or our client goes (close, reset). */
static int vf_dma_grow(void *ctx, uint64_t size, uint64_t *off, uint32_t *handle)
{
	uint64_t iova;

	return vf_rm_sysmem_alloc(ctx, size, handle, &iova, off);
}

static void vf_dma_put(void *ctx, uint32_t handle)
{
	vf_rm_free(ctx, handle);	/* a failure (reset, host gone) frees it anyway */
}

/* The RM context, and with it the DMA allocator's backing. */
static void vf_rm_start(struct vgpu_vf *vf)
{
	if (vf_rm_setup(vf) == 0)
		vf_dma_set_backing(&vf->dma, vf_dma_grow, vf_dma_put, vf);
}

/* Map, check and handshake; on failure the transport is detached again. */
static int vf_attach(struct vgpu_vf *vf)
{
	void *bar;
	int ret;

	ret = vf->t->ops->attach(vf->t, &bar, &vf->bar_size);
	if (ret)
		return vf_error(vf, ret, "cannot attach through the %s transport", vf->t->ops->name);
	vf->bar = bar;
	ret = vf_bar_parse(vf);
	if (ret)
		goto detach;
	/* A host may offer only the mailbox and event vectors: no kick, no GPU interrupt. */
	if (vf->hdr->nr_vectors < VF_VEC_EVENT + 1 ||
	    vf->t->ops->nr_vectors(vf->t) < vf->hdr->nr_vectors) {
		ret = vf_error(vf, -EPROTO, "the endpoint handed over %u vectors, BAR2 says %u",
			       vf->t->ops->nr_vectors(vf->t), vf->hdr->nr_vectors);
		goto detach;
	}
	ret = vf_bar_rings(vf);
	if (ret)
		goto detach;
	ret = vf_dma_init(&vf->dma, vf->bar + vf->hdr->dma_off, vf->hdr->dma_size,
			  vf->dma_iova);
	if (ret)
		goto detach;
	atomic_store(&vf->reset_pending, false);
	ret = vf_handshake(vf);
	if (ret)
		goto fini_dma;
	vf_rm_start(vf);	/* without an RM the VF still attaches; rm_why says why */
	return 0;
fini_dma:
	vf_dma_fini(&vf->dma);
detach:
	vf->t->ops->detach(vf->t);
	vf->bar = NULL;
	vf->hdr = NULL;
	return ret;
}

int vgpu_vf_open(const struct vgpu_vf_opts *opts, struct vgpu_vf **out)
{
	struct vgpu_vf *vf;
	int ret;

	if (!opts || (!opts->transport && !opts->socket))
		return -EINVAL;
	vf = calloc(1, sizeof(*vf));
	if (!vf)
		return -ENOMEM;
	vf->opts = *opts;
	vf->sva_fd = -1;
	if (!vf->opts.spin_ns)
		vf->opts.spin_ns = VF_DEFAULT_SPIN_NS;
	if (!vf->opts.rm_timeout_ns)
		vf->opts.rm_timeout_ns = VF_DEFAULT_RM_TIMEOUT;
	cmn_mutex_init(&vf->mbox_lock);
	cmn_mutex_init(&vf->obj_lock);
	cmn_list_init(&vf->mems);
	cmn_list_init(&vf->vaspaces);
	cmn_list_init(&vf->channels);
	if (opts->transport) {
		vf->t = opts->transport;
	} else {
		ret = vgpu_vf_transport_local(opts->socket, &vf->t);
		if (ret)
			goto free_vf;
	}
	ret = vf_attach(vf);
	if (ret)
		goto destroy_transport;
	*out = vf;
	return 0;
destroy_transport:
	if (!opts->transport)
		vf->t->ops->destroy(vf->t);
free_vf:
	cmn_mutex_destroy(&vf->obj_lock);
	cmn_mutex_destroy(&vf->mbox_lock);
	free(vf);
	return ret;
}

void vgpu_vf_close(struct vgpu_vf *vf)
{
	if (!vf)
		return;
	if (vf->managed.close)
		vf->managed.close(vf);
	while (!cmn_list_empty(&vf->channels))
		vf_channel_destroy(cmn_container_of(vf->channels.next, struct vgpu_channel, node),
				   true);
	while (!cmn_list_empty(&vf->vaspaces))
		vf_vaspace_destroy(cmn_container_of(vf->vaspaces.next, struct vgpu_vaspace, node),
				   true);
	while (!cmn_list_empty(&vf->mems)) {
		struct vgpu_mem *m = cmn_container_of(vf->mems.next, struct vgpu_mem, node);

		atomic_store(&m->maps, 0);	/* their address spaces are gone */
		vf_mem_free(m, true);
	}
	if (vf->bar && !atomic_load(&vf->reset_pending))
		vf_rm_teardown(vf);
	if (vf->bar)
		vf_dma_fini(&vf->dma);
	vf_sva_close(vf);	/* after the channels: no work of ours reaches the process now */
	vf->t->ops->destroy(vf->t);
	cmn_mutex_destroy(&vf->obj_lock);
	cmn_mutex_destroy(&vf->mbox_lock);
	free(vf);
}

bool vgpu_vf_reset_pending(struct vgpu_vf *vf)
{
	if (!vf->bar || !vf->t->ops->alive(vf->t))
		return true;
	vf_events_poll(vf);
	if (atomic_load_explicit((_Atomic uint32_t *)&vf->hdr->reset_count, memory_order_acquire) !=
	    vf->seen_reset_count)
		atomic_store(&vf->reset_pending, true);
	return atomic_load(&vf->reset_pending);
}

/* Turn every object into a tombstone and count it. */
static void vf_mark_lost(struct vgpu_vf *vf, struct vgpu_vf_lost *lost)
{
	struct cmn_list *n;

	vf->rm_ok = false;	/* the host freed our client with the reset */
	cmn_mutex_lock(&vf->obj_lock);
	for (n = vf->channels.next; n != &vf->channels; n = n->next) {
		struct vgpu_channel *ch = cmn_container_of(n, struct vgpu_channel, node);

		lost->channels += !ch->lost;
		ch->lost = true;
	}
	for (n = vf->vaspaces.next; n != &vf->vaspaces; n = n->next) {
		struct vgpu_vaspace *as = cmn_container_of(n, struct vgpu_vaspace, node);

		lost->vaspaces += !as->lost;
		as->lost = true;
	}
	for (n = vf->mems.next; n != &vf->mems; n = n->next) {
		struct vgpu_mem *m = cmn_container_of(n, struct vgpu_mem, node);

		lost->vram_objects += !m->lost && m->kind == VGPU_MEM_VRAM;
		m->lost = true;
	}
	cmn_mutex_unlock(&vf->obj_lock);
}

static int vf_wait_ready(struct vgpu_vf *vf)
{
	uint64_t deadline = cmn_deadline_ns(VF_READY_TIMEOUT_NS);

	while (atomic_load_explicit((_Atomic uint32_t *)&vf->hdr->state, memory_order_acquire) !=
	       VF_STATE_READY) {
		if (cmn_deadline_passed(deadline) || !vf->t->ops->alive(vf->t))
			return -EAGAIN;
		vf->t->ops->wait(vf->t, VF_VEC_EVENT, 1000 * 1000);
	}
	return 0;
}

/* Recover in place (same BAR2) or from scratch (the endpoint died); 0 or -errno. What was
 * lost is added to vf->lost as it is found, so a failed attempt loses nothing of the tally. */
static int vf_recover(struct vgpu_vf *vf, bool alive)
{
	int ret;

	vf_mark_lost(vf, &vf->lost);
	cmn_mutex_lock(&vf->mbox_lock);
	if (vf->bar) {
		uint32_t rc = atomic_load_explicit((_Atomic uint32_t *)&vf->hdr->reset_count,
						   memory_order_acquire);

		vf->lost.resets += rc - vf->seen_reset_count;
		vf->seen_reset_count = rc;
		vf_dma_fini(&vf->dma);
	}
	if (alive && vf_wait_ready(vf) == 0) {
		/* Same BAR2: re-read the header (re-formatted rings) and handshake again. */
		ret = vf_bar_parse(vf);
		if (!ret)
			ret = vf_bar_rings(vf);
		if (!ret)
			ret = vf_dma_init(&vf->dma, vf->bar + vf->hdr->dma_off, vf->hdr->dma_size,
					  vf->dma_iova);
		cmn_mutex_unlock(&vf->mbox_lock);
		if (ret)
			return ret;
		atomic_store(&vf->reset_pending, false);
		ret = vf_handshake(vf);
		if (!ret)
			vf_rm_start(vf);	/* the reset freed our client */
		return ret;
	}
	/* The endpoint went away (vgpud restarted): attach from scratch. */
	if (vf->bar) {
		vf->t->ops->detach(vf->t);
		vf->lost.resets += 1;	/* the daemon's restart counts as one */
	}
	vf->bar = NULL;
	vf->hdr = NULL;
	cmn_mutex_unlock(&vf->mbox_lock);
	return vf_attach(vf);
}

int vgpu_vf_recover(struct vgpu_vf *vf, struct vgpu_vf_lost *lost)
{
	bool alive = vf->bar && vf->t->ops->alive(vf->t);
	int ret;

	memset(lost, 0, sizeof(*lost));
	if (alive && !vgpu_vf_reset_pending(vf))
		return 0;
	/* A reset unbound SVA and a restarted vgpud never knew the connection: the next
	 * vgpu_sva_bind() starts on a fresh one. */
	vf_sva_close(vf);
	ret = vf_recover(vf, alive);
	if (ret)
		return ret;
	*lost = vf->lost;
	memset(&vf->lost, 0, sizeof(vf->lost));
	return 0;
}

/* Slice UUID @u as text (36 characters and a NUL in @buf). */
static const char *vf_uuid_str(const uint8_t *u, char *buf)
{
	static const uint8_t dash[] = { 4, 6, 8, 10 };
	char *p = buf;

	for (unsigned int i = 0, d = 0; i < 16; i++) {
		if (d < sizeof(dash) && i == dash[d]) {
			*p++ = '-';
			d++;
		}
		p += sprintf(p, "%02x", u[i]);
	}
	return buf;
}

/* The BAR2 that @path handed over (@bar, @size bytes, @nvec vectors) must be this very
 * slice, laid out as the one every pointer of the driver was made for, and ready. */
static int vf_reattach_check(struct vgpu_vf *vf, const char *path, const uint8_t *bar,
			     uint64_t size, unsigned int nvec)
{
	const struct vf_bar_header *h = (const void *)(bar + vf_bar_header_off(size));
	char want[40], got[40];
	uint64_t dma_off = (uint64_t)(vf->dma.cpu - vf->bar);
	uint32_t state;

	if (h->magic != VF_BAR_MAGIC || h->header_size != VF_BAR_HDR_SIZE)
		return vf_error(vf, -EPROTO, "reattach: %s hands over no VF header", path);
	if (!vgpu_abi_compatible(h->abi_version))
		return vf_error(vf, -VGPU_EABI, "reattach: %s speaks vGPU ABI %u.%u, this driver "
				"%u.%u", path, VGPU_ABI_VERSION_MAJOR(h->abi_version),
				VGPU_ABI_VERSION_MINOR(h->abi_version), VGPU_ABI_MAJOR,
				VGPU_ABI_MINOR);
	if (memcmp(h->slice_uuid, vf->slice_uuid, sizeof(vf->slice_uuid)))
		return vf_error(vf, -ENODEV, "reattach: %s serves slice %s, this VF is slice %s",
				path, vf_uuid_str(h->slice_uuid, got),
				vf_uuid_str(vf->slice_uuid, want));
	if (h->vf_id != vf->info.vf_id)
		return vf_error(vf, -ENODEV, "reattach: %s serves the slice as VF %u; this driver's "
				"RM handles name VF %u", path, h->vf_id, vf->info.vf_id);
	if (size != vf->bar_size || h->bar_size != size || h->vram_off != vf->vram_off ||
	    h->vram_size != vf->info.vram_size || h->dma_off != dma_off ||
	    h->dma_size != vf->info.dma_size || h->dma_iova != vf->dma_iova)
		return vf_error(vf, -EPROTO, "reattach: %s lays the slice out differently (BAR2 "
				"%llu bytes, DMA memory at %#llx, IOVA %#llx; here %llu, %#llx, "
				"%#llx)", path, (unsigned long long)size,
				(unsigned long long)h->dma_off, (unsigned long long)h->dma_iova,
				(unsigned long long)vf->bar_size, (unsigned long long)dma_off,
				(unsigned long long)vf->dma_iova);
	if (h->nr_vectors < VF_VEC_EVENT + 1 || nvec < h->nr_vectors)
		return vf_error(vf, -EPROTO, "reattach: %s handed over %u vectors, its BAR2 says %u",
				path, nvec, h->nr_vectors);
	state = atomic_load_explicit((_Atomic uint32_t *)&h->state, memory_order_acquire);
	if (state != VF_STATE_READY)
		return vf_error(vf, -EAGAIN, "reattach: the slice at %s is not ready (state %u)",
				path, state);
	return 0;
}

/* Connect to @path on the side: an attached local transport in *@out, checked to serve
 * this slice. Nothing of @vf changes. */
static int vf_reattach_connect(struct vgpu_vf *vf, const char *path,
			       struct vgpu_vf_transport **out)
{
	struct vgpu_vf_transport *nt;
	uint64_t size;
	void *bar;
	int ret;

	ret = vgpu_vf_transport_local(path, &nt);
	if (ret)
		return vf_error(vf, ret, "reattach: bad endpoint path");
	ret = nt->ops->attach(nt, &bar, &size);
	if (ret) {
		nt->ops->destroy(nt);
		return vf_error(vf, ret, "reattach: cannot attach to %s", path);
	}
	ret = vf_reattach_check(vf, path, bar, size, nt->ops->nr_vectors(nt));
	if (ret) {
		nt->ops->destroy(nt);
		return ret;
	}
	*out = nt;
	return 0;
}

int vgpu_vf_reattach(struct vgpu_vf *vf, const char *socket)
{
	struct vgpu_vf_transport *nt = NULL;
	int ret;

	if (!socket || !*socket || strlen(socket) >= sizeof(vf->ep_path))
		return vf_error(vf, -EINVAL, "reattach: no endpoint socket path, or one too long");
	if (!vf_local_is(vf->t))
		return vf_error(vf, -EOPNOTSUPP, "reattach: the %s transport does not move (a VM's "
				"VMM carries its BAR)", vf->t->ops->name);
	if (!vf->bar)
		return vf_error(vf, -ENOTCONN, "reattach: the VF is detached (a failed recovery): "
				"open it anew");
	/* Its service thread sleeps on the endpoint's vectors, which are about to change. */
	if (vf->managed.ctx)
		return vf_error(vf, -EBUSY, "reattach: managed memory is on and does not move: "
				"vgpu_managed_fini() first");
	/* vgpud would take a second connection of ours to the same endpoint for an SVA one. */
	if (!strcmp(vf_local_path(vf->t), socket) && vf->t->ops->alive(vf->t))
		return vf_error(vf, -EBUSY, "reattach: already attached to %s", socket);
	ret = vf_reattach_connect(vf, socket, &nt);
	if (ret)
		return ret;
	/* The binding was the old vgpud's: the process binds again on the new one. */
	vf_sva_close(vf);
	cmn_mutex_lock(&vf->mbox_lock);
	ret = vf_local_take_over(vf->t, nt);
	if (ret) {
		cmn_mutex_unlock(&vf->mbox_lock);
		nt->ops->destroy(nt);
		return vf_error(vf, ret, "reattach: cannot put %s's BAR2 in place", socket);
	}
	/* Same address, new header: the page pointers and ring views are re-made from it; the
	 * DMA allocator, page tables and channels point into memory that moved with the slice. */
	ret = vf_bar_parse(vf);
	if (!ret)
		ret = vf_bar_rings(vf);
	cmn_mutex_unlock(&vf->mbox_lock);
	strcpy(vf->ep_path, socket);
	if (!vf->opts.transport)
		vf->opts.socket = vf->ep_path;	/* where a later SVA connection goes */
	if (ret)
		return ret;
	atomic_store(&vf->reset_pending, false);
	/* Announces this driver's ABI to the new vgpud too, so the slice can move on again. */
	return vf_handshake(vf);
}
