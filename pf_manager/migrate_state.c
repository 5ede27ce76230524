// SPDX-License-Identifier: MIT
/* The state of a slice with a guest that is not bytes of its memory, to and from a
 * migration stream's state frames (mig/mig.h, doc/migration.md "What moves"): scheduler
 * counters (SCHED), the guest's RM clients and objects with their handles (RM_TREE), the
 * VF's IOMMU mappings (IOMMU), each channel's runtime (CHANNELS) and its work-submit token
 * (DOORBELLS). Each piece comes from the module that owns it (gpu_model, rm, iommu_model).
 *
 * The guest must be quiesced: every channel idle or stopped by an error (nothing pending,
 * no engine on it), and for an offline save no mailbox request or reply in flight (the
 * control area is formatted fresh by a restore). A live migration's final pass carries
 * the control area itself (CONTROL, stream version 1.2): the interrupt page, the three
 * mailbox rings and the header, read with the service thread held after the request in
 * hand was answered, so a request or reply in flight moves with the rings and the RM
 * state holds exactly the requests answered. A slice without RM objects has no RM state
 * and sends none of those frames.
 *
 * Loading happens in stream order into a slice brought up on the same VF number (the
 * handles name it): the tree is re-made with channels disabled, the IOMMU frame checks the
 * mappings the tree re-made and adds the rest, each channel gets its GP_GET and GP_PUT
 * before it is enabled again, and the tokens are checked. Any failure is the restore's
 * failure; restore_apply() then undoes the slice as a whole. The scheduler counters are
 * not the load's: the caller keeps SCHED aside and applies it at the commit
 * (pf_mig_commit()), so a failed migration leaves none on the VF. The stream's IOMMU
 * mappings are held to what the guest could have made itself (pf_mig_state_map_limit()). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/rm.h>

#include "common/log.h"
#include <vgpu/vf_bar.h>
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "pf_manager/migrate_internal.h"
#include "rm/rm.h"

/* What a save collects before it writes anything. */
struct state_out {
	struct rm_obj_rec *objs;
	size_t nr_objs;
	struct mig_rm_obj *mobjs;
	struct mig_chan_rec chans[MIG_MAX_CHANS];
	struct mig_db_rec dbs[MIG_MAX_CHANS];
	size_t nr_chans;
	struct mig_iommu_rec *maps;
	size_t nr_maps;
	struct mig_sched_rec sched;
	uint8_t *ctrl;			/* live: the control area's pieces, CTRL_BYTES */
};

static void state_out_free(struct state_out *o)
{
	rm_obj_recs_free(o->objs, o->nr_objs);
	free(o->mobjs);
	free(o->maps);
	free(o->ctrl);
}

/* The guest talks to nobody meanwhile: nothing half-way through the mailbox. */
static int quiesced_mbox(const struct pf_slice *s, struct pf_err *e)
{
	uint32_t req = cmn_ring_count(&s->req), rsp = cmn_ring_count(&s->rsp);

	if (req || rsp)
		return cmn_fail(&e->f, -EBUSY, "slice %s: the guest has %u RM request(s) and %u "
			       "reply(ies) in flight on its mailbox: quiesce it first", s->uuid, req,
			       rsp);
	return 0;
}

/* The control area's pieces a migration carries: what vgpud and the guest write there.
 * Not the legacy stub (formatted), nor the doorbell page (the device's). */
static const struct { uint32_t off, len; } ctrl_win[] = {
	{ VF_BAR_INTR_OFF, sizeof(struct vf_intr_page) },
	{ VF_BAR_REQ_OFF, VF_BAR_RING_REGION },
	{ VF_BAR_RSP_OFF, VF_BAR_RING_REGION },
	{ VF_BAR_EVT_OFF, VF_BAR_RING_REGION },
	{ VF_BAR_HDR_CTRL_OFF, VF_BAR_HDR_SIZE },
};
#define CTRL_WINS	(sizeof(ctrl_win) / sizeof(ctrl_win[0]))
#define CTRL_BYTES	(sizeof(struct vf_intr_page) + 3 * VF_BAR_RING_REGION + VF_BAR_HDR_SIZE)
_Static_assert(MIG_CTRL_SIZE == VF_BAR_CTRL_SIZE, "the stream's control area is the BAR's");
_Static_assert(VF_BAR_RING_REGION <= MIG_CTRL_PIECE_MAX, "a ring is one CONTROL piece");

/* Channel record @o's runtime and token. */
static int save_chan(struct pf_daemon *d, struct pf_slice *s, const struct rm_obj_rec *o,
		     struct state_out *out, struct pf_err *e)
{
	struct vgpu_rm_token_params tok = { 0 };
	struct gpu_chan_mig m;
	size_t len = 0, i = out->nr_chans;
	int r = gpu_chan_mig_save(d->gpu, s->vf, o->x, &m);

	if (r)
		return cmn_fail(&e->f, r, "slice %s: channel %u (handle %#x): %s", s->uuid, o->x,
			       o->handle, r == -EBUSY ? "work in flight: quiesce the guest first" :
			       cmn_strerror(r));
	r = rm_control(d->rm, s->vf, o->h_client, o->handle, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN,
		       &tok, &len, sizeof(tok));
	if (r)
		return cmn_fail(&e->f, r, "slice %s: channel %u: its token: %s", s->uuid, o->x,
			       cmn_strerror(r));
	out->chans[i] = (struct mig_chan_rec){ .h_client = o->h_client, .h_chan = o->handle,
		.chid = o->x, .runlist = o->y, .entries = o->z,
		.flags = (o->w & RM_OBJ_CHAN_ENABLED ? MIG_CHAN_ENABLED : 0) |
			 (o->w & RM_OBJ_CHAN_REPLAYABLE ? MIG_CHAN_REPLAYABLE : 0),
		.gp_get = m.gp_get, .gp_put = m.gp_put, .state = (uint32_t)m.state,
		.error = (uint32_t)m.error, .methods = m.methods };
	out->dbs[i] = (struct mig_db_rec){ o->h_client, o->handle, o->x, tok.token };
	out->nr_chans++;
	return 0;
}

/* The VF's IOMMU mappings, offsets into its DMA memory. */
static int save_maps(struct pf_slice *s, struct state_out *out, struct pf_err *e)
{
	struct iommu_mapping *m = NULL;
	size_t n = 0;
	int r = iommu_mappings(s->dma_domain, NULL, &n);

	if (r && r != -EMSGSIZE)
		return cmn_fail(&e->f, r, "slice %s: its IOMMU mappings: %s", s->uuid, cmn_strerror(r));
	m = calloc(n + 1, sizeof(*m));
	out->maps = calloc(n + 1, sizeof(*out->maps));
	r = m && out->maps ? iommu_mappings(s->dma_domain, m, &n) : -ENOMEM;
	if (r)
		cmn_fail(&e->f, r, "slice %s: its IOMMU mappings: %s", s->uuid, cmn_strerror(r));
	for (size_t i = 0; !r && i < n; i++) {
		if (m[i].memobj != s->dma_mo)
			r = cmn_fail(&e->f, -EOPNOTSUPP, "slice %s: IOMMU mapping at %#" PRIx64 " is "
				     "not of the slice's DMA memory: it cannot move", s->uuid, m[i].iova);
		else
			out->maps[out->nr_maps++] = (struct mig_iommu_rec){ m[i].iova, m[i].length,
				m[i].offset, m[i].prot };
	}
	free(m);
	return r;
}

/* The RM records as the stream's (the same fields; runs stay the RM's). */
static int save_objs(struct state_out *out)
{
	out->mobjs = calloc(out->nr_objs + 1, sizeof(*out->mobjs));
	if (!out->mobjs)
		return -ENOMEM;
	for (size_t i = 0; i < out->nr_objs; i++) {
		const struct rm_obj_rec *o = &out->objs[i];

		out->mobjs[i] = (struct mig_rm_obj){ o->h_client, o->h_parent, o->handle, o->h_class,
			o->share_target, o->share_access, o->dep_client, o->dep_handle, o->a, o->b,
			o->c, o->x, o->y, o->z, o->w, o->nr_runs, o->runs, NULL };
	}
	return 0;
}

/* Everything the frames carry, checked before a byte is written; @live: with the control
 * area (its rings may hold what is in flight). */
static int state_collect(struct pf_daemon *d, struct pf_slice *s, bool live,
			 struct state_out *out, struct pf_err *e)
{
	struct gpu_sched_stats st;
	int r = live ? 0 : quiesced_mbox(s, e);

	if (r)
		return r;
	r = rm_vf_export(d->rm, s->vf, &out->objs, &out->nr_objs);
	if (r)
		return cmn_fail(&e->f, r, "slice %s: cannot export its RM objects: %s", s->uuid,
			       cmn_strerror(r));
	for (size_t i = 0; !r && i < out->nr_objs; i++)
		if (out->objs[i].h_class == VGPU_RM_CLASS_CHANNEL_GPFIFO)
			r = save_chan(d, s, &out->objs[i], out, e);
	if (!r && out->nr_objs)
		r = save_maps(s, out, e);
	if (!r && save_objs(out))
		r = cmn_fail(&e->f, -ENOMEM, "out of memory");
	gpu_sched_stats(d->gpu, s->vf, &st);
	out->sched = (struct mig_sched_rec){ st.run_ns, st.preempt_ns, st.idle_ns, st.slices,
		st.preempt_timeouts, st.stall_ns, st.preempted };
	if (!r && live) {
		uint8_t *p = out->ctrl = malloc(CTRL_BYTES);

		if (!p)
			return cmn_fail(&e->f, -ENOMEM, "out of memory");
		for (size_t i = 0; i < CTRL_WINS; p += ctrl_win[i++].len)
			memcpy(p, s->bar + ctrl_win[i].off, ctrl_win[i].len);
	}
	return r;
}

/* The control area's pieces as CONTROL frames. */
static int enc_ctrl(struct mig_enc *enc, const uint8_t *p, struct pf_err *e)
{
	int r = 0;

	for (size_t i = 0; !r && i < CTRL_WINS; p += ctrl_win[i++].len)
		r = mig_enc_control(enc, ctrl_win[i].off, p, ctrl_win[i].len, &e->f);
	return r;
}

/* How long the final pass waits for the request in hand: one RM call, GSP round trip
 * included, well inside the guest's own RM timeout. */
#define STATE_IDLE_WAIT_MS	5000u

static int state_save(struct pf_daemon *d, struct pf_slice *s, struct mig_enc *enc, bool live,
		      struct pf_err *e)
{
	struct state_out out = { 0 };
	int r = 0;

	/* The service thread keeps out of the mailbox and the RM while the state is read;
	 * live, only after the request it holds is answered (its reply goes with the rings
	 * and its effect with the RM state, never one without the other). */
	if (!live)
		pf_svc_pause(s);
	else if (pf_svc_pause_idle(s, STATE_IDLE_WAIT_MS))
		r = cmn_fail(&e->f, -EBUSY, "slice %s: a mailbox request still in hand after %u "
			     "ms", s->uuid, STATE_IDLE_WAIT_MS);
	if (!r)
		r = state_collect(d, s, live, &out, e);
	pf_svc_resume(s);
	if (!r && out.nr_objs) {
		r = mig_enc_sched(enc, &out.sched, &e->f);
		if (!r)
			r = mig_enc_rm_tree(enc, out.mobjs, out.nr_objs, &e->f);
		if (!r)
			r = mig_enc_iommu(enc, out.maps, out.nr_maps, &e->f);
		if (!r)
			r = mig_enc_channels(enc, out.chans, out.nr_chans, &e->f);
		if (!r)
			r = mig_enc_doorbells(enc, out.dbs, out.nr_chans, &e->f);
	}
	if (!r && live)
		r = enc_ctrl(enc, out.ctrl, e);
	/* What the guest asked for, which it does not announce again on the destination. */
	if (!r && pf_endpoint_guest_flags(s))
		r = mig_enc_guest(enc, pf_endpoint_guest_abi(s), pf_endpoint_guest_flags(s), &e->f);
	state_out_free(&out);
	return r;
}

int pf_mig_state_save(struct pf_daemon *d, struct pf_slice *s, struct mig_enc *enc,
		      struct pf_err *e)
{
	return state_save(d, s, enc, false, e);
}

int pf_mig_state_save_live(struct pf_daemon *d, struct pf_slice *s, struct mig_enc *enc,
			   struct pf_err *e)
{
	return state_save(d, s, enc, true, e);
}

/* ---- load ----------------------------------------------------------------------------------- */

int pf_mig_state_vf(struct pf_daemon *d, const struct mig_frame *fr, unsigned int *vf,
		    struct pf_err *e)
{
	struct mig_rm_obj o;
	size_t off = 0;
	unsigned int want;

	if (fr->type != MIG_F_RM_TREE || !mig_rm_obj_next(fr, &off, &o))
		return 0;
	want = VGPU_RM_IS_CLIENT(o.h_client) ? VGPU_RM_CLIENT_FN(o.h_client) : 0;
	if (want == *vf)
		return 0;
	if (!want || want > d->num_vfs || d->vfs[want])
		return cmn_fail(&e->f, -EBUSY, "frame %u (rm-tree): the guest's handles name VF %u, "
			       "which is %s here (its state moves only to the same VF)", fr->seq,
			       want, want && want <= d->num_vfs ? "in use" : "not enabled");
	*vf = want;
	return 0;
}

/* Frame @fr's RM objects, re-made in order under their handles. */
static int load_rm_tree(struct pf_daemon *d, struct pf_slice *s, const struct mig_frame *fr,
			struct pf_err *e)
{
	struct mig_rm_obj o;
	size_t off = 0;
	int r = 0;

	while (!r && mig_rm_obj_next(fr, &off, &o)) {
		struct rm_obj_rec rec = { o.h_client, o.h_parent, o.handle, o.h_class,
			o.share_target, o.share_access, o.dep_client, o.dep_handle, o.a, o.b, o.c,
			o.x, o.y, o.z, o.w & ~RM_OBJ_CHAN_ENABLED, o.nr_runs, NULL };

		if (VGPU_RM_IS_CLIENT(o.h_client) && VGPU_RM_CLIENT_FN(o.h_client) != s->vf)
			return cmn_fail(&e->f, -EXDEV, "frame %u (rm-tree): the guest's handles name "
				       "VF %u, the slice runs on VF %u here (a restore with guest state "
				       "needs the same VF free)", fr->seq, VGPU_RM_CLIENT_FN(o.h_client),
				       s->vf);
		rec.runs = calloc(2 * (size_t)o.nr_runs + 1, sizeof(uint64_t));
		if (!rec.runs)
			return cmn_fail(&e->f, -ENOMEM, "out of memory");
		for (uint32_t k = 0; k < o.nr_runs; k++)
			mig_rm_run(&o, k, &rec.runs[2 * k], &rec.runs[2 * k + 1]);
		r = rm_obj_import(d->rm, s->vf, &rec);
		free(rec.runs);
		if (r)
			cmn_fail(&e->f, r, "frame %u (rm-tree): object %#x of client %#x (class %#x) "
				 "cannot be re-made here: %s", fr->seq, o.handle, o.h_client,
				 o.h_class, cmn_strerror(r));
	}
	return r;
}

void pf_mig_state_map_limit(uint32_t rm_objects, uint64_t dma_size, struct pf_mig_maps *lim)
{
	/* A guest maps DMA memory only through an RM object of its own (one mapping each,
	 * never two over the same DMA pages) besides the window bring-up makes. */
	lim->count = (uint64_t)(rm_objects ? rm_objects : PF_RM_OBJECTS_MAX) + 1;
	lim->bytes = 2 * dma_size;
}

int pf_mig_state_maps_check(const struct pf_mig_maps *lim, const struct pf_mig_maps *have,
			    uint32_t seq, struct pf_err *e)
{
	if (have->count > lim->count)
		return cmn_fail(&e->f, -E2BIG, "frame %u (iommu): %" PRIu64 " mappings, more "
			       "than the slice's limit %" PRIu64 " (its DMA window and one per RM "
			       "object, rm_objects %" PRIu64 ")", seq, have->count, lim->count,
			       lim->count - 1);
	if (have->bytes > lim->bytes)
		return cmn_fail(&e->f, -E2BIG, "frame %u (iommu): mappings of %" PRIu64 " bytes, "
			       "more than the slice's limit %" PRIu64 " (its DMA memory twice: the "
			       "window and its RM objects)", seq, have->bytes, lim->bytes);
	return 0;
}

/* One mapping: the one the tree re-made (or the DMA window), or mapped now at its IOVA. */
static int load_map(struct pf_slice *s, const struct mig_iommu_rec *m, uint32_t seq,
		    struct pf_err *e)
{
	struct iommu_mapping cur;
	uint64_t iova = m->iova;
	int r = iommu_query(s->dma_domain, m->iova, &cur);

	if (!r && cur.iova == m->iova && cur.length == m->length && cur.memobj == s->dma_mo &&
	    cur.offset == m->offset && cur.prot == m->prot)
		return 0;
	if (r == -ENOENT)
		r = iommu_map(s->dma_domain, s->dma_mo, m->offset, m->length, m->prot,
			      IOMMU_MAP_FIXED_IOVA, &iova);
	else if (!r)
		r = -EEXIST;
	if (r)
		return cmn_fail(&e->f, r, "frame %u (iommu): mapping [%#" PRIx64 ", +%#" PRIx64 ") "
			       "of DMA offset %#" PRIx64 ": %s", seq, m->iova, m->length, m->offset,
			       r == -EEXIST ? "another mapping is there" : cmn_strerror(r));
	return 0;
}

/* The domain's mappings with the new ones of frame @fr, held to the slice's limit before
 * any of them is made. */
static int load_maps_count(struct pf_slice *s, const struct mig_frame *fr, struct pf_err *e)
{
	struct pf_mig_maps have = { 0 }, lim;
	struct iommu_mapping *cur;
	size_t n = 0;
	int r = iommu_mappings(s->dma_domain, NULL, &n);

	if (r && r != -EMSGSIZE)
		return cmn_fail(&e->f, r, "frame %u (iommu): the slice's IOMMU mappings: %s",
			       fr->seq, cmn_strerror(r));
	cur = calloc(n + 1, sizeof(*cur));
	if (!cur)
		return cmn_fail(&e->f, -ENOMEM, "out of memory");
	r = iommu_mappings(s->dma_domain, cur, &n);
	for (size_t i = 0; !r && i < n; i++) {
		have.count++;
		have.bytes += cur[i].length;
	}
	free(cur);
	if (r)
		return cmn_fail(&e->f, r, "frame %u (iommu): the slice's IOMMU mappings: %s",
			       fr->seq, cmn_strerror(r));
	for (uint32_t i = 0; i < fr->u.list.count; i++) {
		struct iommu_mapping m;
		struct mig_iommu_rec rec;

		mig_iommu_rec_at(fr, i, &rec);
		if (iommu_query(s->dma_domain, rec.iova, &m) == -ENOENT) {
			have.count++;
			have.bytes += rec.length;
		}
	}
	pf_mig_state_map_limit(s->prov.rm_objects, s->dma_size, &lim);
	return pf_mig_state_maps_check(&lim, &have, fr->seq, e);
}

/* A channel's runtime, then its enable state. */
static int load_chan(struct pf_daemon *d, struct pf_slice *s, const struct mig_chan_rec *c,
		     uint32_t seq, struct pf_err *e)
{
	struct gpu_chan_mig m = { c->gp_get, c->gp_put, (enum gpu_chan_state)c->state,
				  (enum vgpu_chan_error)c->error, c->methods };
	struct vgpu_rm_enable_params en = { .enable = 1 };
	size_t len = sizeof(en);
	int r = gpu_chan_mig_load(d->gpu, s->vf, c->chid, &m);

	if (!r && (c->flags & MIG_CHAN_ENABLED))
		r = rm_control(d->rm, s->vf, c->h_client, c->h_chan, VGPU_RM_CTRL_CHANNEL_ENABLE,
			       &en, &len, sizeof(en));
	if (r)
		return cmn_fail(&e->f, r, "frame %u (channels): channel %u (handle %#x): %s", seq,
			       c->chid, c->h_chan, cmn_strerror(r));
	return 0;
}

/* A channel's token must be what the guest was told: its doorbells name it. */
static int load_db(struct pf_daemon *d, struct pf_slice *s, const struct mig_db_rec *b,
		   uint32_t seq, struct pf_err *e)
{
	struct vgpu_rm_token_params tok = { 0 };
	size_t len = 0;
	int r = rm_control(d->rm, s->vf, b->h_client, b->h_chan, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN,
			   &tok, &len, sizeof(tok));

	if (!r && tok.token != b->token)
		r = -ESTALE;
	if (r)
		return cmn_fail(&e->f, r, "frame %u (doorbells): channel %u (handle %#x): token %#x "
			       "on the source, %s here", seq, b->chid, b->h_chan, b->token,
			       r == -ESTALE ? "another" : cmn_strerror(r));
	return 0;
}

/* Why the control area the CONTROL frames left does not fit @s (pf_bar_adopt_ctrl()
 * refused it, with the service paused): its first check that fails, in its order. */
static void ctrl_why(const struct pf_slice *s, char *why, size_t len)
{
	static const struct { uint32_t off, elem; const char *name; } rings[] = {
		{ VF_BAR_REQ_OFF, VF_MBOX_SLOT_SIZE, "request" },
		{ VF_BAR_RSP_OFF, VF_MBOX_SLOT_SIZE, "reply" },
		{ VF_BAR_EVT_OFF, VF_EVT_SLOT_SIZE, "event" },
	};
	const struct vf_bar_header *h = s->hdr;

	if (h->magic != VF_BAR_MAGIC) {
		snprintf(why, len, "its header's magic is %#" PRIx64 ", not %#" PRIx64,
			 (uint64_t)h->magic, (uint64_t)VF_BAR_MAGIC);
		return;
	}
	if (!vgpu_abi_compatible(h->abi_version)) {
		snprintf(why, len, "its header says ABI %#x, which this vgpud does not speak",
			 h->abi_version);
		return;
	}
	if (h->bar_size != s->bar_size || h->vram_size != s->prov.vram) {
		snprintf(why, len, "its header says a BAR of %#" PRIx64 " bytes with %#" PRIx64
			 " of VRAM, this slice has %#" PRIx64 " and %#" PRIx64,
			 (uint64_t)h->bar_size, (uint64_t)h->vram_size, s->bar_size, s->prov.vram);
		return;
	}
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(rings); i++) {
		struct cmn_ring r;

		const char *nm = rings[i].name;

		if (cmn_ring_attach(&r, s->bar + rings[i].off, VF_BAR_RING_REGION)) {
			snprintf(why, len, "its %s ring's header is not a ring of the %u-byte "
				 "region (magic, element count or size)", nm, VF_BAR_RING_REGION);
			return;
		}
		if (r.elem_size != rings[i].elem) {
			snprintf(why, len, "its %s ring's elements are %u bytes, not %u", nm,
				 r.elem_size, rings[i].elem);
			return;
		}
	}
	snprintf(why, len, "its header or rings");
}

/* A CONTROL piece into the control area (the mailbox is held until the commit); the
 * header, last, is adopted at once: the rings as it names them, this VF's fields. */
static int load_ctrl(struct pf_slice *s, const struct mig_frame *fr, struct pf_err *e)
{
	uint32_t off = fr->u.ctrl.off, len = (uint32_t)fr->u.ctrl.len;
	size_t i;
	int r = 0;

	for (i = 0; i < CTRL_WINS; i++)
		if (off >= ctrl_win[i].off && off - ctrl_win[i].off <= ctrl_win[i].len &&
		    len <= ctrl_win[i].len - (off - ctrl_win[i].off))
			break;
	if (i == CTRL_WINS)
		return cmn_fail(&e->f, -EBADMSG, "frame %u (control): [%#x, +%#x) is not a piece "
			       "of the control area a migration carries", fr->seq, off, len);
	pf_svc_pause(s);
	memcpy(s->bar + off, fr->u.ctrl.data, len);
	if (off + len == VF_BAR_HDR_CTRL_OFF + VF_BAR_HDR_SIZE && pf_bar_adopt_ctrl(s)) {
		char why[200];

		ctrl_why(s, why, sizeof(why));
		r = cmn_fail(&e->f, -EPROTO, "frame %u (control): the source's control area does "
			     "not fit this slice: %s", fr->seq, why);
	}
	pf_svc_resume(s);
	return r;
}

int pf_mig_state_load(struct pf_daemon *d, struct pf_slice *s, const struct mig_frame *fr,
		      struct pf_err *e)
{
	int r = 0;

	switch (fr->type) {
	case MIG_F_SCHED:
		return 0;	/* the caller's until the commit: pf_mig_state_sched() */
	case MIG_F_RM_TREE:
		return load_rm_tree(d, s, fr, e);
	case MIG_F_IOMMU:
		r = load_maps_count(s, fr, e);
		for (uint32_t i = 0; !r && i < fr->u.list.count; i++) {
			struct mig_iommu_rec m;

			mig_iommu_rec_at(fr, i, &m);
			r = load_map(s, &m, fr->seq, e);
		}
		return r;
	case MIG_F_CHANNELS:
		for (uint32_t i = 0; !r && i < fr->u.list.count; i++) {
			struct mig_chan_rec c;

			mig_chan_rec_at(fr, i, &c);
			r = load_chan(d, s, &c, fr->seq, e);
		}
		return r;
	case MIG_F_DOORBELLS:
		for (uint32_t i = 0; !r && i < fr->u.list.count; i++) {
			struct mig_db_rec b;

			mig_db_rec_at(fr, i, &b);
			r = load_db(d, s, &b, fr->seq, e);
		}
		return r;
	case MIG_F_CONTROL:
		return load_ctrl(s, fr, e);
	case MIG_F_GUEST:
		pf_endpoint_mig_guest(s, fr->u.guest.abi, fr->u.guest.flags);
		return 0;
	}
	return 0;
}

void pf_mig_state_sched(struct pf_daemon *d, struct pf_slice *s, const struct mig_sched_rec *c)
{
	struct gpu_sched_stats st = { .run_ns = c->run_ns, .preempt_ns = c->preempt_ns,
		.idle_ns = c->idle_ns, .slices = c->slices, .preempt_timeouts = c->preempt_timeouts,
		.stall_ns = c->stall_ns, .preempted = c->preempted };

	gpu_sched_stats_set(d->gpu, s->vf, &st);
}
