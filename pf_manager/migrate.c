// SPDX-License-Identifier: MIT
/* save-slice and restore-slice: a quiesced slice (running, no guest attached) to a
 * migration stream (mig/mig.h) and back, through a descriptor the client passes with the
 * request (vgpuctl save / restore open the file with the user's own rights).
 *
 * Only populated memory moves: the VRAM object's data ranges (SEEK_DATA / SEEK_HOLE) less
 * the all-zero pages in them, so the file and the restored object stay as sparse as the
 * original. A restore reads the stream twice: once to check every frame and every limit of
 * this daemon (type, VRAM, VF, DMA size, UUID) before anything changes, then to load it,
 * refusing a file that changed in between (struct restore_read).
 * Its commit point is the journal naming the slice, written after the VRAM is loaded and
 * before the reply; the definition file follows (the journal's definition wins at load). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/log.h"
#include "pf_manager/migrate_internal.h"

#define MIG_PAGE	4096u
#define MIG_CHUNK	(1u << 20)	/* bytes read from the VRAM object at a time */

uint64_t pf_mig_region_base(const struct pf_slice *s, enum mig_region region)
{
	return region == MIG_R_VRAM ? 0 : s->bar_size - VF_BAR_CTRL_SIZE - s->dma_size;
}

static int write_all(void *ctx, const void *p, size_t len)
{
	int fd = *(int *)ctx;
	const uint8_t *b = p;

	while (len) {
		ssize_t n = write(fd, b, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

static ssize_t read_some(void *ctx, void *p, size_t len)
{
	int fd = *(int *)ctx;

	for (;;) {
		ssize_t n = read(fd, p, len);

		if (n >= 0 || errno != EINTR)
			return n < 0 ? -errno : n;
	}
}

/* @e's message with @prefix in front (the message is copied first: it is the source). */
static int fail_prefix(struct pf_err *e, int r, const char *prefix)
{
	char msg[CMN_FAIL_MSG_MAX];

	memcpy(msg, e->f.msg, sizeof(msg));
	return cmn_fail(&e->f, r, "%s%s", prefix, msg);
}

static bool page_zero(const uint8_t *p)
{
	static const uint8_t zero[MIG_PAGE];

	return !memcmp(p, zero, MIG_PAGE);
}

/* What a save sent. */
struct save_stats {
	uint64_t bytes[MIG_NR_REGIONS];
	uint64_t extents;
};

/* Send [@off, @end) of @region (a data range of the object), leaving out zero pages. */
static int save_range(struct mig_enc *enc, int fd, enum mig_region region, uint64_t rbase,
		      uint64_t off, uint64_t end, uint8_t *buf, struct pf_err *e)
{
	while (off < end) {
		size_t n = (size_t)cmn_min((uint64_t)MIG_CHUNK, end - off), i = 0;
		ssize_t got = pread(fd, buf, n, (off_t)(rbase + off));

		if (got != (ssize_t)n)
			return cmn_fail(&e->f, got < 0 ? -errno : -EIO, "cannot read the VRAM object "
				       "at %#" PRIx64 ": %s", rbase + off,
				       got < 0 ? cmn_strerror(-errno) : "short read");
		while (i < n) {
			size_t j = i;

			if (n - i >= MIG_PAGE && page_zero(buf + i)) {
				i += MIG_PAGE;
				continue;
			}
			while (j < n && !(n - j >= MIG_PAGE && page_zero(buf + j)))
				j += cmn_min((size_t)MIG_PAGE, n - j);
			if (mig_enc_extent(enc, region, off + i, buf + i, j - i, &e->f))
				return e->f.err;
			i = j;
		}
		off += n;
	}
	return 0;
}

/* Every data range of @region of @s, in order. */
static int save_region(struct mig_enc *enc, struct pf_slice *s, enum mig_region region,
		       uint64_t size, uint8_t *buf, struct pf_err *e)
{
	uint64_t rbase = pf_mig_region_base(s, region), off = 0;

	while (off < size) {
		off_t data = lseek(s->bar_fd, (off_t)(rbase + off), SEEK_DATA), hole;

		if (data < 0 && errno == ENXIO)
			break;		/* no data after @off in the whole object */
		if (data < 0)
			return cmn_fail(&e->f, -errno, "SEEK_DATA on the VRAM object: %s",
				       cmn_strerror(-errno));
		if ((uint64_t)data >= rbase + size)
			break;
		hole = lseek(s->bar_fd, data, SEEK_HOLE);
		if (hole < 0)
			return cmn_fail(&e->f, -errno, "SEEK_HOLE on the VRAM object: %s",
				       cmn_strerror(-errno));
		off = (uint64_t)data - rbase;
		if (save_range(enc, s->bar_fd, region, rbase, off,
			       cmn_min((uint64_t)hole - rbase, size), buf, e))
			return e->f.err;
		off = cmn_min((uint64_t)hole - rbase, size);
	}
	return 0;
}

/* The SLICE frame's definition: the slice's definition, whether it is transient, and where
 * it came from (for the destination's log); a live migration adds its pass. */
char *pf_mig_def(struct pf_daemon *d, const struct pf_slice *s, json_object *extra)
{
	json_object *o = json_object_new_object(), *def = pf_slice_def_json(s);
	char *txt;

	/* The hand-over record is the source's own: the slice arrives unmarked. */
	json_object_object_del(def, "migrated_out");
	json_object_object_add(o, "definition", def);
	json_object_object_add(o, "transient", json_object_new_boolean(s->transient));
	pf_json_add_u64(o, "vram_bytes", s->prov.vram);
	json_object_object_add(o, "parent", json_object_new_string(d->cfg.pf_id));
	json_object_object_add(o, "model", json_object_new_string(d->cfg.model));
	if (pf_endpoint_guest_abi(s))		/* the guest will not announce it again */
		pf_json_add_u64(o, "guest_abi", pf_endpoint_guest_abi(s));
	if (extra)
		json_object_object_add(o, "live", extra);
	txt = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return txt;
}

static int save_stream(struct pf_daemon *d, struct pf_slice *s, int fd, struct mig_totals *tot,
		       struct pf_err *e)
{
	struct mig_enc enc;
	char *def = pf_mig_def(d, s, NULL);
	uint8_t *buf = malloc(MIG_CHUNK);
	int r = -ENOMEM;

	if (!def || !buf) {
		cmn_fail(&e->f, r, "out of memory");
		goto out;
	}
	r = mig_enc_init(&enc, write_all, &fd, &e->f);
	if (!r)
		r = mig_enc_slice(&enc, s->prov.vram, s->dma_size, def, strlen(def), &e->f);
	if (!r)
		r = save_region(&enc, s, MIG_R_VRAM, s->prov.vram, buf, e);
	if (!r)
		r = save_region(&enc, s, MIG_R_DMA, s->dma_size, buf, e);
	if (!r)
		r = pf_mig_state_save(d, s, &enc, e);
	if (!r)
		r = mig_enc_end(&enc, &e->f);
	*tot = enc.tot;
out:
	free(buf);
	free(def);
	return r;
}

/* The descriptor of this request, open for @want (O_RDONLY / O_WRONLY), or an error. It
 * must be a regular file: the loop thread reads and writes it, and a pipe, socket or
 * device nobody drains would block it, every guest and the control socket with it. */
static int req_fd(struct pf_daemon *d, const char *cmd, int want, struct pf_err *e)
{
	struct stat st;
	int fl;

	if (d->req_fd < 0)
		return cmn_fail(&e->f, -EINVAL, "%s needs the stream's file as a descriptor sent with "
			       "the request (SCM_RIGHTS), as vgpuctl sends it", cmd);
	if (fstat(d->req_fd, &st))
		return cmn_fail(&e->f, -errno, "%s: the descriptor passed: %s", cmd,
			       cmn_strerror(-errno));
	if (!S_ISREG(st.st_mode))
		return cmn_fail(&e->f, -EINVAL, "%s: the descriptor passed is %s, not a regular "
			       "file", cmd, pf_file_kind(st.st_mode));
	fl = fcntl(d->req_fd, F_GETFL);
	if (fl < 0 || ((fl & O_ACCMODE) != O_RDWR && (fl & O_ACCMODE) != want))
		return cmn_fail(&e->f, -EBADF, "%s: the descriptor passed is not open for %s", cmd,
			       want == O_RDONLY ? "reading" : "writing");
	return d->req_fd;
}

static int save_check(struct pf_daemon *d, json_object *args, struct pf_slice **out,
		      struct pf_err *e)
{
	json_object *v;
	char norm[PF_UUID_STR];
	struct pf_slice *s;

	if (!args || !json_object_object_get_ex(args, "uuid", &v) ||
	    !json_object_is_type(v, json_type_string) ||
	    ctlc_uuid_parse(json_object_get_string(v), norm, NULL))
		return cmn_fail(&e->f, -EINVAL, "save-slice needs \"uuid\", a slice's UUID");
	s = pf_slice_find(d, norm);
	if (!s)
		return cmn_fail(&e->f, -ENOENT, "slice %s not found", norm);
	if (!s->vf)
		return cmn_fail(&e->f, -EBUSY, "slice %s is not running: a stopped slice's VRAM "
			       "was scrubbed, there is nothing to save (its definition is in the "
			       "state directory)", s->uuid);
	/* A guest may be attached: its state goes with the slice (pf_mig_state_save(), which
	 * refuses a guest that is not quiesced). */
	*out = s;
	return 0;
}

int pf_slice_save_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		      struct pf_err *e)
{
	struct mig_totals tot = { 0 };
	struct pf_slice *s = NULL;
	int r = save_check(d, args, &s, e), fd;

	if (r)
		return r;
	fd = dry ? -1 : req_fd(d, "save-slice", O_WRONLY, e);
	if (fd < 0 && !dry)
		return fd;
	json_object_object_add(ret, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(ret, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(ret, "result", json_object_new_string(dry ? "would save" : "saved"));
	if (dry)
		return 0;
	/* vfio's source path without pre-copy: the slice is quiesced (no guest), so STOP_COPY
	 * sends everything and STOPPED follows; then it runs on, unchanged. */
	r = mig_sm_set(&s->mig, MIG_S_STOP_COPY, &e->f);
	if (r)
		return r;
	r = save_stream(d, s, fd, &tot, e);
	if (r) {
		/* The source resumes: the slice was never touched. */
		mig_sm_set(&s->mig, MIG_S_RUNNING, NULL);
		return fail_prefix(e, r, "save failed (the slice runs on unchanged): ");
	}
	mig_sm_set(&s->mig, MIG_S_RUNNING, NULL);
	pf_json_add_u64(ret, "vram_bytes_saved", tot.bytes[MIG_R_VRAM]);
	pf_json_add_u64(ret, "dma_bytes_saved", tot.bytes[MIG_R_DMA]);
	json_object_object_add(ret, "extents", json_object_new_int64((int64_t)tot.extents));
	json_object_object_add(ret, "frames", json_object_new_int64((int64_t)tot.frames + 1));
	cmn_log_vf(VGPU_LOG_INFO, s->vf, s->uuid, "slice %s saved: %" PRIu64 " VRAM + %" PRIu64
		   " DMA bytes in %" PRIu64 " extents", s->uuid, tot.bytes[MIG_R_VRAM],
		   tot.bytes[MIG_R_DMA], tot.extents);
	return 0;
}

/* ---- restore ------------------------------------------------------------------------------ */


/* The SLICE frame's JSON into a slice. */
static int plan_slice(struct pf_daemon *d, const struct mig_frame *fr, struct pf_mig_plan *p,
		      struct pf_err *e)
{
	json_object *o = NULL, *def, *tr, *ga;
	int r;

	if (pf_json_parse_strict(fr->u.slice.def, fr->u.slice.def_len, &o) ||
	    !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, "definition", &def)) {
		json_object_put(o);
		return cmn_fail(&e->f, -EBADMSG, "frame 1 (slice): the definition is not a JSON "
			       "object with \"definition\"");
	}
	p->s = calloc(1, sizeof(*p->s));
	if (!p->s) {
		json_object_put(o);
		return cmn_fail(&e->f, -ENOMEM, "out of memory");
	}
	r = pf_slice_from_json(d, def, p->s, e);
	if (r)
		fail_prefix(e, r, "frame 1 (slice): the definition is refused here: ");
	/* Typed: a string "false" is no boolean false. */
	if (!r && json_object_object_get_ex(o, "transient", &tr)) {
		if (json_object_is_type(tr, json_type_boolean))
			p->s->transient = json_object_get_boolean(tr);
		else
			r = cmn_fail(&e->f, -EBADMSG, "frame 1 (slice): \"transient\" is not a "
				     "boolean");
	}
	if (!r && json_object_object_get_ex(o, "guest_abi", &ga)) {
		if (json_object_is_type(ga, json_type_int) && json_object_get_int64(ga) >= 0 &&
		    json_object_get_int64(ga) <= UINT32_MAX)
			p->s->mig_guest_abi = (uint32_t)json_object_get_int64(ga);
		else
			r = cmn_fail(&e->f, -EBADMSG, "frame 1 (slice): \"guest_abi\" is not a "
				     "32-bit unsigned integer");
	}
	json_object_put(o);
	return r;
}

/* This daemon's limits, before anything changes. */
static int plan_check(struct pf_daemon *d, struct pf_mig_plan *p, struct pf_err *e)
{
	struct pf_slice *s = p->s, *cur = pf_slice_find(d, s->uuid);
	int r;

	if (cur)
		return cmn_fail(&e->f, -EEXIST, "slice %s already exists here (%s); undefine it or "
			       "restore on another vgpud", s->uuid, cur->vf ? "running" : "defined");
	if (d->nr_slices >= PF_MAX_SLICES)
		return cmn_fail(&e->f, -ENOSPC, "too many slices defined (%u)", PF_MAX_SLICES);
	if (p->dma != d->cfg.dma_size)
		return cmn_fail(&e->f, -EINVAL, "slice %s has %" PRIu64 " MiB of DMA memory, this vgpud "
			       "gives %" PRIu64 " MiB (dma_size)", s->uuid, p->dma >> 20,
			       d->cfg.dma_size >> 20);
	r = pf_slice_quota(d, s, &s->prov, e);
	if (r)
		return r;
	if (s->prov.vram != p->vram)
		return cmn_fail(&e->f, -EINVAL, "slice %s: its type %s gives %" PRIu64 " MiB of VRAM "
			       "here, the stream holds %" PRIu64 " MiB", s->uuid, s->type,
			       s->prov.vram >> 20, p->vram >> 20);
	p->vf = pf_free_vf(d);
	if (!p->vf)
		return cmn_fail(&e->f, -ENOSPC, "slice %s: no free VF: %u of %u enabled VFs in use%s",
			       s->uuid, d->num_vfs, d->num_vfs, d->num_vfs ? "" : " (set-vfs first)");
	return pf_place(d, s->prov.vram, &p->base, e);
}

/* The stream as restore-slice reads it, twice. The client keeps the file and may change it
 * between the reads, so the second read is held to the first: the SLICE frame exactly (the
 * plan and the slice were made from it), and the bytes up to each frame that is not an
 * extent by their running CRC32C, compared before that frame is used. A changed extent is
 * found at the next such frame (END at the latest), before the commit; restore_extent()
 * keeps its write inside the slice meanwhile. The CRC finds a change, not a forgery: the
 * guarantees are the SLICE comparison and that bound. */
struct restore_read {
	int fd;
	uint32_t crc;			/* CRC32C of the bytes read so far in this read */
	char *def;			/* the first read's SLICE definition */
	size_t def_len;
	struct restore_mark {
		uint32_t seq, crc;	/* a frame that is not an extent; @crc through it */
	} *marks;
	size_t nr_marks, cap_marks;
	size_t next;			/* second read: the mark to compare next */
};

static ssize_t read_crc(void *ctx, void *p, size_t len)
{
	struct restore_read *rd = ctx;
	ssize_t n = read_some(&rd->fd, p, len);

	if (n > 0)
		rd->crc = mig_crc32c(rd->crc, p, (size_t)n);
	return n;
}

static void restore_read_free(struct restore_read *rd)
{
	free(rd->def);
	free(rd->marks);
}

/* First read: what the second must find again. */
static int first_read_mark(struct restore_read *rd, const struct mig_frame *fr, struct pf_err *e)
{
	if (fr->type == MIG_F_EXTENT)
		return 0;
	if (fr->type == MIG_F_SLICE) {
		rd->def = malloc(fr->u.slice.def_len);
		if (!rd->def)
			return cmn_fail(&e->f, -ENOMEM, "out of memory");
		memcpy(rd->def, fr->u.slice.def, fr->u.slice.def_len);
		rd->def_len = fr->u.slice.def_len;
	}
	if (rd->nr_marks == rd->cap_marks) {
		size_t cap = rd->cap_marks ? 2 * rd->cap_marks : 16;
		struct restore_mark *m = realloc(rd->marks, cap * sizeof(*m));

		if (!m)
			return cmn_fail(&e->f, -ENOMEM, "out of memory");
		rd->marks = m;
		rd->cap_marks = cap;
	}
	rd->marks[rd->nr_marks++] = (struct restore_mark){ fr->seq, rd->crc };
	return 0;
}

/* Second read: @fr as the first read found it, before it is used. */
static int second_read_same(struct restore_read *rd, const struct pf_mig_plan *p,
			    const struct mig_frame *fr, struct pf_err *e)
{
	const struct restore_mark *m = rd->next < rd->nr_marks ? &rd->marks[rd->next] : NULL;
	uint32_t from = rd->next ? rd->marks[rd->next - 1].seq + 1 : 0;

	if (fr->type == MIG_F_SLICE &&
	    (fr->u.slice.vram_bytes != p->vram || fr->u.slice.dma_bytes != p->dma))
		return cmn_fail(&e->f, -EBADMSG, "the file changed after restore-slice checked it: "
				"frame 1 (slice) declares %" PRIu64 " MiB of VRAM and %" PRIu64
				" MiB of DMA memory, %" PRIu64 " MiB and %" PRIu64 " MiB when "
				"checked", fr->u.slice.vram_bytes >> 20,
				fr->u.slice.dma_bytes >> 20, p->vram >> 20, p->dma >> 20);
	if (fr->type == MIG_F_SLICE &&
	    (fr->u.slice.def_len != rd->def_len || memcmp(fr->u.slice.def, rd->def, rd->def_len)))
		return cmn_fail(&e->f, -EBADMSG, "the file changed after restore-slice checked it: "
				"frame 1 (slice) holds another definition");
	if (fr->type == MIG_F_EXTENT)
		return 0;
	if (m && m->seq == fr->seq && m->crc == rd->crc) {
		rd->next++;
		return 0;
	}
	if (from == fr->seq)
		return cmn_fail(&e->f, -EBADMSG, "the file changed after restore-slice checked it: "
				"frame %u (%s) differs", fr->seq, mig_frame_name(fr->type));
	return cmn_fail(&e->f, -EBADMSG, "the file changed after restore-slice checked it: "
			"frames %u to %u (%s) differ", from, fr->seq, mig_frame_name(fr->type));
}

/* An extent into @s, never outside its region: the decoder bounds it by the sizes SLICE
 * declares, which only second_read_same() ties to the slice's. */
static int restore_extent(struct pf_slice *s, const struct mig_frame *fr, struct pf_err *e)
{
	uint32_t region = fr->u.extent.region;
	uint64_t off = fr->u.extent.off, size = region == MIG_R_VRAM ? s->prov.vram : s->dma_size;
	uint64_t at = pf_mig_region_base(s, region) + off;
	ssize_t n;

	if (off > size || fr->u.extent.len > size - off)
		return cmn_fail(&e->f, -EBADMSG, "frame %u (extent): [%#" PRIx64 ", +%#zx) lies "
				"outside the slice's %s (%" PRIu64 " MiB): not written", fr->seq,
				off, fr->u.extent.len, region == MIG_R_VRAM ? "VRAM" : "DMA memory",
				size >> 20);
	n = pwrite(s->bar_fd, fr->u.extent.data, fr->u.extent.len, (off_t)at);
	if (n != (ssize_t)fr->u.extent.len) {
		int err = n < 0 ? -errno : -EIO;

		return cmn_fail(&e->f, err, "frame %u (extent): cannot write the slice's %s at "
				"%#" PRIx64 " (BAR object byte %#" PRIx64 "): %s", fr->seq,
				region == MIG_R_VRAM ? "VRAM" : "DMA memory", off, at,
				n < 0 ? cmn_strerror(err) : "short write");
	}
	return 0;
}

/* First read: the IOMMU records so far against what the planned slice's guest could map
 * (pf_mig_state_map_limit()), so that a stream with more is refused before anything
 * changes. */
static int restore_maps_count(struct pf_mig_plan *p, const struct mig_frame *fr,
			      struct pf_err *e)
{
	struct pf_mig_maps lim;

	for (uint32_t i = 0; i < fr->u.list.count; i++) {
		struct mig_iommu_rec m;

		mig_iommu_rec_at(fr, i, &m);
		p->maps.count++;
		p->maps.bytes += m.length;
	}
	pf_mig_state_map_limit(p->s->prov.rm_objects, p->dma, &lim);
	return pf_mig_state_maps_check(&lim, &p->maps, fr->seq, e);
}

/* One read of the stream: the checks (and the plan) on the first, the VRAM object
 * filled on the second (@s running). An offline stream carries no control area (a
 * restore formats it fresh): a CONTROL frame, a live migration's, is refused. */
static int restore_pass(struct pf_daemon *d, struct restore_read *rd, struct pf_mig_plan *p,
			struct pf_slice *s, struct pf_err *e)
{
	struct mig_dec dec;
	struct mig_frame fr;
	int r;

	if (lseek(rd->fd, 0, SEEK_SET))
		return cmn_fail(&e->f, -ESPIPE, "restore-slice reads its stream twice (check, then "
			       "load): pass a regular file");
	rd->crc = 0;
	rd->next = 0;
	r = mig_dec_init(&dec, read_crc, rd, &e->f);
	if (r)
		return r;
	while ((r = mig_dec_next(&dec, &fr, &e->f)) > 0) {
		r = s ? second_read_same(rd, p, &fr, e) : first_read_mark(rd, &fr, e);
		if (r)
			break;
		if (fr.type == MIG_F_CONTROL)
			r = cmn_fail(&e->f, -EBADMSG, "frame %u (control): a restore formats "
				     "the VF's control area fresh; only a live migration carries "
				     "it", fr.seq);
		else if (fr.type == MIG_F_SLICE && !s)
			r = pf_mig_plan(d, &fr, p, e);
		else if (fr.type == MIG_F_EXTENT && s)
			r = restore_extent(s, &fr, e);
		else if (fr.type == MIG_F_END)
			p->tot = fr.u.end;
		else if (s)
			r = pf_mig_load_frame(d, p, s, &fr, e);
		else if (p->s && fr.type == MIG_F_IOMMU)
			r = restore_maps_count(p, &fr, e);
		else if (p->s)
			r = pf_mig_state_vf(d, &fr, &p->vf, e);
		if (r < 0)
			break;
	}
	mig_dec_fini(&dec);
	return r;
}

static void slice_forget(struct pf_daemon *d, struct pf_slice *s)
{
	for (unsigned int i = 0; i < d->nr_slices; i++) {
		if (d->slices[i] == s) {
			d->slices[i] = d->slices[--d->nr_slices];
			break;
		}
	}
	pf_slice_free(s);
}

int pf_mig_plan(struct pf_daemon *d, const struct mig_frame *fr, struct pf_mig_plan *p,
		struct pf_err *e)
{
	int r;

	p->vram = fr->u.slice.vram_bytes;
	p->dma = fr->u.slice.dma_bytes;
	r = plan_slice(d, fr, p, e);
	return r ? r : plan_check(d, p, e);
}

void pf_mig_plan_free(struct pf_mig_plan *p)
{
	free(p->s);
	p->s = NULL;
}

int pf_mig_bring_up(struct pf_daemon *d, struct pf_mig_plan *p, struct pf_slice **out,
		    struct pf_err *e)
{
	struct pf_slice *s = p->s;
	int r;

	d->slices[d->nr_slices++] = s;
	p->s = NULL;
	s->incoming = true;
	mig_sm_init(&s->mig, MIG_S_RESUMING);
	r = pf_slice_bring_up(d, s, p->vf, p->base, false, e);
	if (r) {
		slice_forget(d, s);
		return r;
	}
	/* Until the commit the guest's VMM may overwrite the control area with the source's
	 * (QEMU carries the BAR as RAM): its rings are nobody's to serve yet. */
	pf_svc_pause(s);
	s->mbox_held = true;
	pf_svc_resume(s);
	*out = s;
	return 0;
}

/* The commit's mailbox: the rings as the BAR holds them now, the guest's own when its VMM
 * brought them, the freshly formatted ones otherwise; served from here on. */
static void mig_adopt_mailbox(struct pf_slice *s)
{
	pf_svc_pause(s);
	if (pf_bar_adopt_rings(s)) {
		cmn_warn("slice %s: the guest's mailbox rings arrived unusable; it must reset the "
			 "VF", s->uuid);
		s->mbox_broken = true;
	}
	s->mbox_held = false;
	pf_svc_resume(s);
}

int pf_mig_load_frame(struct pf_daemon *d, struct pf_mig_plan *p, struct pf_slice *s,
		      const struct mig_frame *fr, struct pf_err *e)
{
	/* The counters go to the VF only with the commit: a failed load must not leave
	 * them for the VF's next slice. */
	if (fr->type == MIG_F_SCHED) {
		p->sched = fr->u.sched;
		p->has_sched = true;
		return 0;
	}
	return pf_mig_state_load(d, s, fr, e);
}

int pf_mig_commit(struct pf_daemon *d, struct pf_slice *s, const struct pf_mig_plan *p,
		  struct pf_err *e)
{
	int r;

	/* The commit point: the journal naming the slice, its definition inside and marked
	 * restored, so a loader that finds no definition file writes it from there. */
	s->def_pending = !s->transient;
	s->incoming = false;
	r = pf_state_save_journal(d);
	if (r) {
		/* Still the source's: the next journal write must not name it either. */
		s->incoming = true;
		s->def_pending = false;
		return cmn_fail(&e->f, r, "slice %s: cannot write the journal: %s", s->uuid,
				cmn_strerror(r));
	}
	/* Written, the next journal write drops the mark; else a stop writes it first. */
	pf_slice_def_follow(d, s, "restored");
	if (p->has_sched)
		pf_mig_state_sched(d, s, &p->sched);
	mig_adopt_mailbox(s);
	mig_sm_set(&s->mig, MIG_S_RUNNING, NULL);
	return 0;
}

void pf_mig_discard(struct pf_daemon *d, struct pf_slice *s)
{
	pf_slice_stop(d, s);
	slice_forget(d, s);
}

#ifdef VGPU_TEST_HOOKS
/* Test builds: VGPU_MIG_RESTORE_STOP_AT=load stops vgpud (SIGSTOP) once a restore's first
 * read is checked and its slice is up, before the second read, so that a test changes the
 * file in between; in the product it is nothing. */
static void restore_test_stop(const char *at)
{
	const char *v = getenv("VGPU_MIG_RESTORE_STOP_AT");

	if (v && !strcmp(v, at))
		raise(SIGSTOP);
}
#else
static inline void restore_test_stop(const char *at)
{
	(void)at;
}
#endif

/* Bring the planned slice up, load the stream into it and commit; on failure everything
 * is undone (the object unlinked, the slice forgotten). */
static int restore_apply(struct pf_daemon *d, struct restore_read *rd, struct pf_mig_plan *p,
			 struct pf_err *e)
{
	struct pf_slice *s;
	int r = pf_mig_bring_up(d, p, &s, e);

	if (r)
		return r;
	restore_test_stop("load");
	r = restore_pass(d, rd, p, s, e);
	if (!r)
		r = pf_mig_commit(d, s, p, e);
	if (r) {
		pf_mig_discard(d, s);
		return fail_prefix(e, r, "restore failed, nothing kept: ");
	}
	return 0;
}

int pf_slice_restore_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e)
{
	struct pf_mig_plan p = { 0 };
	struct restore_read rd = { .fd = req_fd(d, "restore-slice", O_RDONLY, e) };
	int r;

	(void)args;
	if (rd.fd < 0)
		return rd.fd;
	r = restore_pass(d, &rd, &p, NULL, e);
	if (!r && !p.s)
		r = cmn_fail(&e->f, -EBADMSG, "the stream holds no slice");
	if (r) {
		free(p.s);
		restore_read_free(&rd);
		return fail_prefix(e, r, "restore refused, nothing changed: ");
	}
	json_object_object_add(ret, "uuid", json_object_new_string(p.s->uuid));
	json_object_object_add(ret, "type", json_object_new_string(p.s->type));
	json_object_object_add(ret, "result", json_object_new_string(dry ? "would restore" :
								      "restored"));
	json_object_object_add(ret, "vf", json_object_new_int((int)p.vf));
	pf_json_add_u64(ret, "vram_base", p.base);
	pf_json_add_u64(ret, "vram_bytes_loaded", p.tot.bytes[MIG_R_VRAM]);
	pf_json_add_u64(ret, "dma_bytes_loaded", p.tot.bytes[MIG_R_DMA]);
	if (p.s->transient)
		json_object_object_add(ret, "transient", json_object_new_boolean(true));
	if (dry) {
		free(p.s);
		restore_read_free(&rd);
		return 0;
	}
	cmn_log_scope_set(p.vf, p.s->uuid);
	r = restore_apply(d, &rd, &p, e);
	restore_read_free(&rd);
	if (r)
		return r;
	cmn_log_vf(VGPU_LOG_INFO, p.vf, d->vfs[p.vf]->uuid, "slice %s restored on VF %u: %" PRIu64
		   " VRAM + %" PRIu64 " DMA bytes", d->vfs[p.vf]->uuid, p.vf,
		   p.tot.bytes[MIG_R_VRAM], p.tot.bytes[MIG_R_DMA]);
	pf_event(d, "SLICE_STARTED", pf_slice_json(d, d->vfs[p.vf]));
	return 0;
}
