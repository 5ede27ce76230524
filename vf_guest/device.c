// SPDX-License-Identifier: MIT
/* Attach, handshake, detach and recovery of one VF.
 *
 * Attaching is: transport attach (BAR2 mapped), header checks (magic, ABI major, layout),
 * ring views, then a GET_INFO round trip through the mailbox that must agree with the header.
 * Recovery does the same again after a reset or a lost endpoint; every object made before is
 * kept as a tombstone (marked lost, its host handle forgotten) until its owner frees it, so a
 * program holding pointers never touches freed memory. */
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
		vgpu_channel_destroy(cmn_container_of(vf->channels.next, struct vgpu_channel, node));
	while (!cmn_list_empty(&vf->vaspaces))
		vgpu_vaspace_destroy(cmn_container_of(vf->vaspaces.next, struct vgpu_vaspace, node));
	while (!cmn_list_empty(&vf->mems)) {
		struct vgpu_mem *m = cmn_container_of(vf->mems.next, struct vgpu_mem, node);

		atomic_store(&m->maps, 0);	/* their address spaces are gone */
		vgpu_mem_free(m);
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
