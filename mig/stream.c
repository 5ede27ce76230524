// SPDX-License-Identifier: MIT
/* The migration stream: frame encoder and the decoder for untrusted input.
 *
 * Wire format (little-endian): a 16-byte header { u16 type, u16 flags (0), u32 payload
 * length, u32 sequence number (0, 1, ...), u32 CRC32C of the header's first 12 bytes and
 * the payload }, then the payload. Every check happens before a byte of the payload is
 * handed out, so a consumer never applies part of a corrupt frame. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/compiler.h"
#include "mig/mig.h"

#define HELLO_LEN	16u
#define SLICE_FIXED	16u
#define EXTENT_FIXED	16u
#define END_LEN		32u
/* Region sizes a stream may declare: far above any device, far below overflow. */
#define REGION_MAX	(1ull << 48)

static const char *const frame_names[] = {
	[MIG_F_HELLO] = "hello", [MIG_F_SLICE] = "slice", [MIG_F_EXTENT] = "extent",
	[MIG_F_END] = "end", [MIG_F_CHANNELS] = "channels", [MIG_F_RM_TREE] = "rm-tree",
	[MIG_F_IOMMU] = "iommu", [MIG_F_DOORBELLS] = "doorbells", [MIG_F_SCHED] = "sched",
	[MIG_F_CONTROL] = "control", [MIG_F_GUEST] = "guest",
};

const char *mig_frame_name(uint32_t t)
{
	if (t < VGPU_ARRAY_SIZE(frame_names) && frame_names[t])
		return frame_names[t];
	return "unknown";
}

const char *mig_region_name(uint32_t r)
{
	return r == MIG_R_VRAM ? "vram" : r == MIG_R_DMA ? "dma" : "unknown";
}

/* ---- little-endian fields ---------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- encoder ----------------------------------------------------------------------------- */

/* One frame: header, @fixed bytes, then @len bytes of @data (either may be empty); the
 * data's CRC32C is computed here unless @data_crc points to it. */
static int enc_frame_crc(struct mig_enc *e, uint32_t type, const uint8_t *fixed, size_t flen,
			 const void *data, size_t len, const uint32_t *data_crc,
			 struct cmn_fail *f)
{
	uint8_t h[MIG_FRAME_HDR];
	uint32_t crc;
	int r;

	if (e->ended)
		return cmn_fail(f, -EINVAL, "migration stream: a %s frame after END",
				mig_frame_name(type));
	put16(h, (uint16_t)type);
	put16(h + 2, 0);
	put32(h + 4, (uint32_t)(flen + len));
	put32(h + 8, e->seq);
	crc = mig_crc32c(0, h, 12);
	crc = mig_crc32c(crc, fixed, flen);
	crc = data_crc ? mig_crc32c_combine(crc, *data_crc, len) : mig_crc32c(crc, data, len);
	put32(h + 12, crc);
	if (e->writev) {
		struct iovec iov[3] = { { h, sizeof(h) } };
		int n = 1;

		if (flen)
			iov[n++] = (struct iovec){ (void *)fixed, flen };
		if (len)
			iov[n++] = (struct iovec){ (void *)data, len };
		r = e->writev(e->ctx, iov, n);
	} else {
		r = e->write(e->ctx, h, sizeof(h));
		if (!r && flen)
			r = e->write(e->ctx, fixed, flen);
		if (!r && len)
			r = e->write(e->ctx, data, len);
	}
	if (r)
		return cmn_fail(f, r, "migration stream: cannot write frame %u (%s): %s", e->seq,
				mig_frame_name(type), strerror(-r));
	e->seq++;
	if (type != MIG_F_END)
		e->tot.frames++;
	return 0;
}

static int enc_frame(struct mig_enc *e, uint32_t type, const uint8_t *fixed, size_t flen,
		     const void *data, size_t len, struct cmn_fail *f)
{
	return enc_frame_crc(e, type, fixed, flen, data, len, NULL, f);
}

int mig_enc_init(struct mig_enc *e, mig_write_fn write, void *ctx, struct cmn_fail *f)
{
	uint8_t p[HELLO_LEN];

	memset(e, 0, sizeof(*e));
	e->state_rank = -1;
	e->write = write;
	e->ctx = ctx;
	memcpy(p, MIG_MAGIC, 8);
	put16(p + 8, MIG_VERSION_MAJOR);
	put16(p + 10, MIG_VERSION_MINOR);
	put32(p + 12, 0);
	return enc_frame(e, MIG_F_HELLO, p, sizeof(p), NULL, 0, f);
}

int mig_enc_slice(struct mig_enc *e, uint64_t vram_bytes, uint64_t dma_bytes, const char *def,
		  size_t def_len, struct cmn_fail *f)
{
	uint8_t p[SLICE_FIXED];
	int r;

	if (e->slice_sent)
		return cmn_fail(f, -EINVAL, "migration stream: a second SLICE frame");
	if (!vram_bytes || vram_bytes > REGION_MAX || dma_bytes > REGION_MAX)
		return cmn_fail(f, -EINVAL, "migration stream: region sizes %" PRIu64 " / %" PRIu64
				" out of range", vram_bytes, dma_bytes);
	if (!def_len || def_len > MIG_DEF_MAX)
		return cmn_fail(f, -EINVAL, "migration stream: definition of %zu bytes (1..%u)",
				def_len, MIG_DEF_MAX);
	put64(p, vram_bytes);
	put64(p + 8, dma_bytes);
	r = enc_frame(e, MIG_F_SLICE, p, sizeof(p), def, def_len, f);
	if (r)
		return r;
	e->slice_sent = true;
	e->size[MIG_R_VRAM] = vram_bytes;
	e->size[MIG_R_DMA] = dma_bytes;
	return 0;
}

/* mig_enc_extent() and mig_enc_extent_crc(): @data_crc (NULL: computed here) is of all
 * @len bytes, which are then one frame. */
static int enc_extent(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		      size_t len, const uint32_t *data_crc, struct cmn_fail *f)
{
	const uint8_t *b = data;

	if (!e->slice_sent)
		return cmn_fail(f, -EINVAL, "migration stream: an extent before SLICE");
	if (e->state_rank >= 0)
		return cmn_fail(f, -EINVAL, "migration stream: an extent after a state frame");
	if ((unsigned int)region >= MIG_NR_REGIONS)
		return cmn_fail(f, -EINVAL, "migration stream: region %u", (unsigned int)region);
	if (off < e->next[region] || off > e->size[region] || len > e->size[region] - off)
		return cmn_fail(f, -EINVAL, "migration stream: %s extent [%#" PRIx64 ", +%#zx) out "
				"of order or past %#" PRIx64, mig_region_name(region), off, len,
				e->size[region]);
	if (data_crc && (!len || len > MIG_EXTENT_MAX))
		return cmn_fail(f, -EINVAL, "migration stream: an extent of %zu bytes with its CRC "
				"(1..%u)", len, MIG_EXTENT_MAX);
	while (len) {
		size_t n = cmn_min(len, (size_t)MIG_EXTENT_MAX);
		uint8_t p[EXTENT_FIXED];
		int r;

		put32(p, region);
		put32(p + 4, 0);
		put64(p + 8, off);
		r = enc_frame_crc(e, MIG_F_EXTENT, p, sizeof(p), b, n, data_crc, f);
		if (r)
			return r;
		e->tot.extents++;
		e->tot.bytes[region] += n;
		off += n;
		b += n;
		len -= n;
		e->next[region] = off;
	}
	return 0;
}

int mig_enc_extent(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		   size_t len, struct cmn_fail *f)
{
	return enc_extent(e, region, off, data, len, NULL, f);
}

int mig_enc_extent_crc(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		       size_t len, uint32_t data_crc, struct cmn_fail *f)
{
	return enc_extent(e, region, off, data, len, &data_crc, f);
}

int mig_enc_end(struct mig_enc *e, struct cmn_fail *f)
{
	uint8_t p[END_LEN];
	int r;

	if (!e->slice_sent)
		return cmn_fail(f, -EINVAL, "migration stream: END before SLICE");
	put64(p, e->tot.frames);
	put64(p + 8, e->tot.extents);
	put64(p + 16, e->tot.bytes[MIG_R_VRAM]);
	put64(p + 24, e->tot.bytes[MIG_R_DMA]);
	r = enc_frame(e, MIG_F_END, p, sizeof(p), NULL, 0, f);
	if (!r)
		e->ended = true;
	return r;
}

/* ---- state frames (version 1.1) ----------------------------------------------------------- */

#define LIST_FIXED	8u
#define CHAN_REC	48u
#define DB_REC		16u
#define IOMMU_REC	32u
#define SCHED_LEN	64u
#define RUN_LEN		16u

static const uint32_t state_order[] = MIG_STATE_ORDER;

/* Position of state frame type @t in MIG_STATE_ORDER, or -1. */
static int state_rank(uint32_t t)
{
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(state_order); i++)
		if (state_order[i] == t)
			return (int)i;
	return -1;
}

/* May a state frame of @type follow now? */
static int enc_state_ok(struct mig_enc *e, uint32_t type, struct cmn_fail *f)
{
	int rank = state_rank(type);

	if (!e->slice_sent)
		return cmn_fail(f, -EINVAL, "migration stream: a %s frame before SLICE",
				mig_frame_name(type));
	if (rank < e->state_rank)
		return cmn_fail(f, -EINVAL, "migration stream: a %s frame after a later state frame",
				mig_frame_name(type));
	e->state_rank = rank;
	return 0;
}

static void put_chan(uint8_t *p, const struct mig_chan_rec *r)
{
	const uint32_t w[10] = { r->h_client, r->h_chan, r->chid, r->runlist, r->entries,
				 r->flags, r->gp_get, r->gp_put, r->state, r->error };

	for (int i = 0; i < 10; i++)
		put32(p + 4 * i, w[i]);
	put64(p + 40, r->methods);
}

static void put_db(uint8_t *p, const struct mig_db_rec *r)
{
	put32(p, r->h_client);
	put32(p + 4, r->h_chan);
	put32(p + 8, r->chid);
	put32(p + 12, r->token);
}

static void put_iommu(uint8_t *p, const struct mig_iommu_rec *r)
{
	put64(p, r->iova);
	put64(p + 8, r->length);
	put64(p + 16, r->offset);
	put32(p + 24, r->prot);
	put32(p + 28, 0);
}

/* One object: the fixed part, then its runs. */
static size_t put_rm_obj(uint8_t *p, const struct mig_rm_obj *o)
{
	const uint32_t w[8] = { o->h_client, o->h_parent, o->handle, o->h_class,
				o->share_target, o->share_access, o->dep_client, o->dep_handle };

	for (int i = 0; i < 8; i++)
		put32(p + 4 * i, w[i]);
	put64(p + 32, o->a);
	put64(p + 40, o->b);
	put64(p + 48, o->c);
	put32(p + 56, o->x);
	put32(p + 60, o->y);
	put32(p + 64, o->z);
	put32(p + 68, o->w);
	put32(p + 72, o->nr_runs);
	put32(p + 76, 0);
	for (uint32_t i = 0; i < o->nr_runs; i++) {
		uint64_t st, n;

		mig_rm_run(o, i, &st, &n);
		put64(p + MIG_RM_OBJ_FIXED + RUN_LEN * i, st);
		put64(p + MIG_RM_OBJ_FIXED + RUN_LEN * i + 8, n);
	}
	return MIG_RM_OBJ_FIXED + (size_t)o->nr_runs * RUN_LEN;
}

/* A list frame: @count records, @len bytes, already in @buf after its 8-byte head. */
static int enc_list(struct mig_enc *e, uint32_t type, uint8_t *buf, uint32_t count, size_t len,
		    struct cmn_fail *f)
{
	put32(buf, count);
	put32(buf + 4, 0);
	return enc_frame(e, type, buf, LIST_FIXED + len, NULL, 0, f);
}

/* @n records (host structs @stride bytes apart) of @rs bytes each on the wire, as many per
 * frame as fit (at least one frame, even empty). */
static int enc_fixed_list(struct mig_enc *e, uint32_t type, const void *recs, size_t n,
			  size_t stride, size_t rs, void (*put)(uint8_t *, const void *),
			  struct cmn_fail *f)
{
	size_t per = (MIG_PAYLOAD_MAX - LIST_FIXED) / rs, i = 0;
	uint8_t *buf;
	int r = enc_state_ok(e, type, f);

	if (r)
		return r;
	buf = malloc(LIST_FIXED + cmn_min(n, per) * rs);
	if (!buf)
		return cmn_fail(f, -ENOMEM, "out of memory");
	do {
		size_t k = cmn_min(n - i, per);

		for (size_t j = 0; j < k; j++)
			put(buf + LIST_FIXED + j * rs, (const uint8_t *)recs + (i + j) * stride);
		r = enc_list(e, type, buf, (uint32_t)k, k * rs, f);
		i += k;
	} while (!r && i < n);
	free(buf);
	return r;
}

static void put_chan_v(uint8_t *p, const void *r) { put_chan(p, r); }
static void put_db_v(uint8_t *p, const void *r) { put_db(p, r); }
static void put_iommu_v(uint8_t *p, const void *r) { put_iommu(p, r); }

int mig_enc_channels(struct mig_enc *e, const struct mig_chan_rec *r, size_t n,
		     struct cmn_fail *f)
{
	return enc_fixed_list(e, MIG_F_CHANNELS, r, n, sizeof(*r), CHAN_REC, put_chan_v, f);
}

int mig_enc_doorbells(struct mig_enc *e, const struct mig_db_rec *r, size_t n,
		      struct cmn_fail *f)
{
	return enc_fixed_list(e, MIG_F_DOORBELLS, r, n, sizeof(*r), DB_REC, put_db_v, f);
}

int mig_enc_iommu(struct mig_enc *e, const struct mig_iommu_rec *r, size_t n,
		  struct cmn_fail *f)
{
	return enc_fixed_list(e, MIG_F_IOMMU, r, n, sizeof(*r), IOMMU_REC, put_iommu_v, f);
}

int mig_enc_sched(struct mig_enc *e, const struct mig_sched_rec *r, struct cmn_fail *f)
{
	const uint64_t w[8] = { r->run_ns, r->preempt_ns, r->idle_ns, r->slices,
				r->preempt_timeouts, r->stall_ns, r->preempted, 0 };
	uint8_t p[SCHED_LEN];
	int rc = enc_state_ok(e, MIG_F_SCHED, f);

	if (rc)
		return rc;
	for (int i = 0; i < 8; i++)
		put64(p + 8 * i, w[i]);
	return enc_frame(e, MIG_F_SCHED, p, sizeof(p), NULL, 0, f);
}

int mig_enc_control(struct mig_enc *e, uint32_t off, const void *data, size_t len,
		    struct cmn_fail *f)
{
	uint8_t p[LIST_FIXED];
	int r;

	if (!len || len > MIG_CTRL_PIECE_MAX || off < e->ctrl_next || off > MIG_CTRL_SIZE ||
	    len > MIG_CTRL_SIZE - off)
		return cmn_fail(f, -EINVAL, "migration stream: control piece [%#x, +%#zx) out of "
				"order or past the %#x-byte control area", off, len, MIG_CTRL_SIZE);
	r = enc_state_ok(e, MIG_F_CONTROL, f);
	if (r)
		return r;
	put32(p, off);
	put32(p + 4, 0);
	r = enc_frame(e, MIG_F_CONTROL, p, sizeof(p), data, len, f);
	if (!r)
		e->ctrl_next = off + (uint32_t)len;
	return r;
}

int mig_enc_guest(struct mig_enc *e, uint32_t abi, uint32_t flags, struct cmn_fail *f)
{
	uint8_t p[MIG_GUEST_LEN] = { 0 };
	int r;

	/* No flags, no frame: a reader before 1.3 refuses it, and it would tell nothing. */
	if (!flags)
		return cmn_fail(f, -EINVAL, "migration stream: a GUEST frame without flags");
	if (e->state_rank == state_rank(MIG_F_GUEST))
		return cmn_fail(f, -EINVAL, "migration stream: a second GUEST frame");
	r = enc_state_ok(e, MIG_F_GUEST, f);
	if (r)
		return r;
	put32(p, abi);
	put32(p + 4, flags);
	return enc_frame(e, MIG_F_GUEST, p, sizeof(p), NULL, 0, f);
}

int mig_enc_rm_tree(struct mig_enc *e, const struct mig_rm_obj *o, size_t n,
		    struct cmn_fail *f)
{
	size_t cap = MIG_PAYLOAD_MAX - LIST_FIXED, len = 0, i = 0;
	uint32_t count = 0;
	uint8_t *buf;
	int r = enc_state_ok(e, MIG_F_RM_TREE, f);

	if (r)
		return r;
	buf = malloc(MIG_PAYLOAD_MAX);
	if (!buf)
		return cmn_fail(f, -ENOMEM, "out of memory");
	for (; !r && i < n; i++) {
		size_t need = MIG_RM_OBJ_FIXED + (size_t)o[i].nr_runs * RUN_LEN;

		if (need > cap) {
			r = cmn_fail(f, -E2BIG, "migration stream: RM object %#x has %u VRAM runs, "
				     "more than a frame holds", o[i].handle, o[i].nr_runs);
			break;
		}
		if (len + need > cap) {
			r = enc_list(e, MIG_F_RM_TREE, buf, count, len, f);
			len = count = 0;
		}
		len += put_rm_obj(buf + LIST_FIXED + len, &o[i]);
		count++;
	}
	if (!r)
		r = enc_list(e, MIG_F_RM_TREE, buf, count, len, f);
	free(buf);
	return r;
}

/* ---- decoder ----------------------------------------------------------------------------- */

int mig_dec_init(struct mig_dec *d, mig_read_fn read, void *ctx, struct cmn_fail *f)
{
	memset(d, 0, sizeof(*d));
	d->state_rank = -1;
	d->read = read;
	d->ctx = ctx;
	d->buf = malloc(MIG_DEC_BUF);
	if (!d->buf)
		return cmn_fail(f, -ENOMEM, "out of memory");
	return 0;
}

uint8_t *mig_dec_swap_buf(struct mig_dec *d, uint8_t *buf)
{
	uint8_t *last = d->buf;

	d->buf = buf;
	return last;
}

void mig_dec_fini(struct mig_dec *d)
{
	free(d->buf);
	d->buf = NULL;
}

/* Read exactly @len bytes; the count read (short only at the end of the stream) or -errno. */
static ssize_t read_full(struct mig_dec *d, uint8_t *p, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = d->read(d->ctx, p + got, len - got);

		if (n < 0)
			return n;
		if (n == 0)
			break;
		if ((size_t)n > len - got)
			return -EIO;
		got += (size_t)n;
	}
	d->pos += got;
	return (ssize_t)got;
}

/* A decode error: the decoder refuses everything after it. */
#define dec_fail(d, f, err, ...) ((d)->failed = true, cmn_fail(f, err, __VA_ARGS__))
/* A frame (of type @type) the decoder refuses: the message names it by index, type and
 * the stream byte where it starts, as doc/migration.md promises. */
#define dec_bad(d, f, err, type, fmt, ...)						\
	dec_fail(d, f, err, "frame %u (%s) at byte %" PRIu64 ": " fmt, (d)->seq,		\
		 mig_frame_name(type), (d)->frame_at, ##__VA_ARGS__)

static int dec_hello(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	if (len != HELLO_LEN || memcmp(p, MIG_MAGIC, 8))
		return dec_bad(d, f, -EBADMSG, MIG_F_HELLO, "not a vgpu migration stream (bad "
			       "magic or length %u)", len);
	out->u.hello.major = get16(p + 8);
	out->u.hello.minor = get16(p + 10);
	d->minor = out->u.hello.minor;
	if (out->u.hello.major != MIG_VERSION_MAJOR)
		return dec_bad(d, f, -EPROTO, MIG_F_HELLO, "stream version %u.%u; this vgpud "
			       "reads version %u.x only", out->u.hello.major, out->u.hello.minor,
			       MIG_VERSION_MAJOR);
	if (get32(p + 12))
		return dec_bad(d, f, -EPROTO, MIG_F_HELLO, "flags %#x not understood by "
			       "version %u.%u", get32(p + 12), MIG_VERSION_MAJOR,
			       MIG_VERSION_MINOR);
	return 1;
}

static int dec_slice(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	uint64_t v, m;

	if (d->slice_seen)
		return dec_bad(d, f, -EBADMSG, MIG_F_SLICE, "a second SLICE frame");
	if (len <= SLICE_FIXED || len - SLICE_FIXED > MIG_DEF_MAX)
		return dec_bad(d, f, -EBADMSG, MIG_F_SLICE, "definition of %u bytes (1..%u)",
			       len < SLICE_FIXED ? 0 : len - SLICE_FIXED, MIG_DEF_MAX);
	v = get64(p);
	m = get64(p + 8);
	if (!v || v > REGION_MAX || m > REGION_MAX)
		return dec_bad(d, f, -EBADMSG, MIG_F_SLICE, "region sizes vram %" PRIu64 " dma %"
			       PRIu64 " out of range", v, m);
	d->slice_seen = true;
	d->size[MIG_R_VRAM] = v;
	d->size[MIG_R_DMA] = m;
	out->u.slice.vram_bytes = v;
	out->u.slice.dma_bytes = m;
	out->u.slice.def = (const char *)p + SLICE_FIXED;
	out->u.slice.def_len = len - SLICE_FIXED;
	return 1;
}

static int dec_extent(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		      struct cmn_fail *f)
{
	uint32_t rg;
	uint64_t off, n;

	if (len <= EXTENT_FIXED || len - EXTENT_FIXED > MIG_EXTENT_MAX)
		return dec_bad(d, f, -EBADMSG, MIG_F_EXTENT, "%u data bytes (1..%u)",
			       len < EXTENT_FIXED ? 0 : len - EXTENT_FIXED, MIG_EXTENT_MAX);
	rg = get32(p);
	off = get64(p + 8);
	n = len - EXTENT_FIXED;
	if (rg >= MIG_NR_REGIONS)
		return dec_bad(d, f, -EBADMSG, MIG_F_EXTENT, "region %u unknown (0 VRAM, 1 DMA)",
			       rg);
	if (get32(p + 4))
		return dec_bad(d, f, -EBADMSG, MIG_F_EXTENT, "reserved word %#x not 0",
			       get32(p + 4));
	if (off < d->next[rg])
		return dec_bad(d, f, -EBADMSG, MIG_F_EXTENT, "%s offset %#" PRIx64 " below the "
			       "previous extent's end %#" PRIx64, mig_region_name(rg), off,
			       d->next[rg]);
	if (off > d->size[rg] || n > d->size[rg] - off)
		return dec_bad(d, f, -EBADMSG, MIG_F_EXTENT, "%s [%#" PRIx64 ", +%#" PRIx64
			       ") past the region's %#" PRIx64 " bytes", mig_region_name(rg), off,
			       n, d->size[rg]);
	d->next[rg] = off + n;
	d->tot.extents++;
	d->tot.bytes[rg] += n;
	out->u.extent.region = rg;
	out->u.extent.off = off;
	out->u.extent.data = p + EXTENT_FIXED;
	out->u.extent.len = (size_t)n;
	return 1;
}

static int dec_end(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		   struct cmn_fail *f)
{
	struct mig_totals *t = &out->u.end;

	if (len != END_LEN)
		return dec_bad(d, f, -EBADMSG, MIG_F_END, "length %u (expected %u)", len,
			       END_LEN);
	t->frames = get64(p);
	t->extents = get64(p + 8);
	t->bytes[MIG_R_VRAM] = get64(p + 16);
	t->bytes[MIG_R_DMA] = get64(p + 24);
	if (t->frames != d->seq || t->extents != d->tot.extents ||
	    t->bytes[MIG_R_VRAM] != d->tot.bytes[MIG_R_VRAM] ||
	    t->bytes[MIG_R_DMA] != d->tot.bytes[MIG_R_DMA])
		return dec_bad(d, f, -EBADMSG, MIG_F_END, "totals (%" PRIu64 " frames, %" PRIu64
			       " extents, %" PRIu64 "+%" PRIu64 " bytes) differ from the stream's "
			       "(%u, %" PRIu64 ", %" PRIu64 "+%" PRIu64 ")", t->frames,
			       t->extents, t->bytes[0], t->bytes[1], d->seq, d->tot.extents,
			       d->tot.bytes[0], d->tot.bytes[1]);
	d->ended = true;
	return 1;
}

/* After END: the stream must end too. */
static int dec_after_end(struct mig_dec *d, struct cmn_fail *f)
{
	uint64_t at = d->pos;
	ssize_t n = read_full(d, d->buf, 1);

	if (n < 0)
		return dec_fail(d, f, (int)n, "migration stream: read after END: %s",
				strerror((int)-n));
	if (n)
		return dec_fail(d, f, -EBADMSG, "migration stream: bytes after the END frame (at "
				"byte %" PRIu64 ")", at);
	return 0;
}

/* A state frame: only in a 1.1 stream, after SLICE and the extents, in MIG_STATE_ORDER. */
static int dec_state_order(struct mig_dec *d, uint32_t type, struct cmn_fail *f)
{
	int rank = state_rank(type);

	if (d->minor < 1 || (type == MIG_F_CONTROL && d->minor < 2) ||
	    (type == MIG_F_GUEST && d->minor < 3))
		return dec_bad(d, f, -EBADMSG, type, "a version %u.%u stream does not carry this "
			       "state", MIG_VERSION_MAJOR, d->minor);
	if (rank < d->state_rank)
		return dec_bad(d, f, -EBADMSG, type, "out of order (after the %s frame)",
			       mig_frame_name(state_order[d->state_rank]));
	if ((type == MIG_F_SCHED || type == MIG_F_GUEST) && d->state_rank == rank)
		return dec_bad(d, f, -EBADMSG, type, "a second %s frame",
			       type == MIG_F_SCHED ? "SCHED" : "GUEST");
	d->state_rank = rank;
	return 0;
}

/* A list frame's head: @count records of @rs bytes fill the payload exactly. */
static int dec_list_head(struct mig_dec *d, const uint8_t *p, uint32_t len, uint32_t type,
			 size_t rs, struct mig_frame *out, struct cmn_fail *f)
{
	uint64_t n;

	if (len < LIST_FIXED)
		return dec_bad(d, f, -EBADMSG, type, "length %u below its %u-byte head", len,
			       LIST_FIXED);
	n = get32(p);
	if (get32(p + 4))
		return dec_bad(d, f, -EBADMSG, type, "reserved word %#x not 0", get32(p + 4));
	if (rs && n * rs != len - LIST_FIXED)
		return dec_bad(d, f, -EBADMSG, type, "%" PRIu64 " records of %zu bytes do not "
			       "fill its %u payload bytes", n, rs, len - LIST_FIXED);
	out->u.list.count = (uint32_t)n;
	out->u.list.p = p + LIST_FIXED;
	out->u.list.len = len - LIST_FIXED;
	return 0;
}

static bool pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

/* Why channel record @r is out of range, or NULL. */
static const char *chan_bad(const struct mig_dec *d, const struct mig_chan_rec *r)
{
	if (r->chid >= MIG_MAX_CHANS)
		return "channel id";
	if (d->chans_seen & (1ull << r->chid))
		return "channel id repeated";
	if (r->runlist >= MIG_MAX_RUNLISTS)
		return "runlist";
	if (!pow2(r->entries) || r->entries < 2 || r->entries > 65536)
		return "GPFIFO entries";
	if (r->gp_get >= r->entries || r->gp_put >= r->entries)
		return "GP_GET or GP_PUT";
	if (r->flags & ~(MIG_CHAN_ENABLED | MIG_CHAN_REPLAYABLE))
		return "flags";
	if (r->state < 1 || r->state > 4 || r->error > 255)
		return "state or error";
	if (!r->h_client || !r->h_chan)
		return "handle";
	return NULL;
}

static int dec_channels(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
			struct cmn_fail *f)
{
	int r = dec_list_head(d, p, len, MIG_F_CHANNELS, CHAN_REC, out, f);

	for (uint32_t i = 0; !r && i < out->u.list.count; i++) {
		struct mig_chan_rec c;
		const char *bad;

		mig_chan_rec_at(out, i, &c);
		bad = chan_bad(d, &c);
		if (bad)
			return dec_bad(d, f, -EBADMSG, MIG_F_CHANNELS, "record %u (channel %u): "
				       "%s out of range", i, c.chid, bad);
		d->chans_seen |= 1ull << c.chid;
	}
	return r ? r : 1;
}

static int dec_doorbells(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
			 struct cmn_fail *f)
{
	int r = dec_list_head(d, p, len, MIG_F_DOORBELLS, DB_REC, out, f);

	for (uint32_t i = 0; !r && i < out->u.list.count; i++) {
		struct mig_db_rec b;

		mig_db_rec_at(out, i, &b);
		if (b.chid >= MIG_MAX_CHANS || !b.h_client || !b.h_chan)
			return dec_bad(d, f, -EBADMSG, MIG_F_DOORBELLS, "record %u: channel %u "
				       "or handle out of range", i, b.chid);
	}
	return r ? r : 1;
}

static int dec_iommu(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	int r = dec_list_head(d, p, len, MIG_F_IOMMU, IOMMU_REC, out, f);

	for (uint32_t i = 0; !r && i < out->u.list.count; i++) {
		struct mig_iommu_rec m;

		mig_iommu_rec_at(out, i, &m);
		if (!m.length || ((m.iova | m.length | m.offset) & 4095) || m.iova < d->iova_next ||
		    m.iova + m.length < m.iova || m.offset + m.length < m.offset ||
		    m.offset + m.length > d->size[MIG_R_DMA] || !m.prot || m.prot > 3 ||
		    get32(out->u.list.p + (size_t)i * IOMMU_REC + 28))
			return dec_bad(d, f, -EBADMSG, MIG_F_IOMMU, "record %u: mapping [%#"
				       PRIx64 ", +%#" PRIx64 ") at DMA offset %#" PRIx64 " prot %u "
				       "unaligned, out of order, past the DMA memory or bad", i,
				       m.iova, m.length, m.offset, m.prot);
		d->iova_next = m.iova + m.length;
	}
	return r ? r : 1;
}

/* Why RM object @o (its fixed part read) is malformed, or NULL. */
static const char *rm_obj_bad(const struct mig_rm_obj *o, const uint8_t *fixed)
{
	if (!o->h_client || !o->handle)
		return "a zero handle";
	if (!o->h_class != !o->h_parent || (!o->h_class && o->handle != o->h_client))
		return "a client record whose handle is not its client's, or an object without parent";
	if (get32(fixed + 76))
		return "reserved word not 0";
	return NULL;
}

static int dec_rm_tree(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		       struct cmn_fail *f)
{
	int r = dec_list_head(d, p, len, MIG_F_RM_TREE, 0, out, f);
	size_t off = 0;
	uint32_t i = 0;

	for (; !r && i < out->u.list.count; i++) {
		const uint8_t *q = out->u.list.p + off;
		struct mig_rm_obj o;
		size_t left = out->u.list.len - off, need;
		const char *bad;

		if (left < MIG_RM_OBJ_FIXED)
			return dec_bad(d, f, -EBADMSG, MIG_F_RM_TREE, "record %u of %u truncated "
				       "at record byte %zu", i, out->u.list.count, off);
		need = MIG_RM_OBJ_FIXED + (size_t)get32(q + 72) * RUN_LEN;
		if (need > left)
			return dec_bad(d, f, -EBADMSG, MIG_F_RM_TREE, "record %u: %u runs past "
				       "the frame's end", i, get32(q + 72));
		mig_rm_obj_next(out, &off, &o);
		bad = rm_obj_bad(&o, q);
		for (uint32_t k = 0; !bad && k < o.nr_runs; k++) {
			uint64_t st, n;

			mig_rm_run(&o, k, &st, &n);
			if (st & 4095)
				bad = "a VRAM run unaligned";
			else if (!n || st >= d->size[MIG_R_VRAM] ||
				 n > (d->size[MIG_R_VRAM] - st) >> 12)
				bad = "a VRAM run empty or outside the slice";
		}
		if (bad)
			return dec_bad(d, f, -EBADMSG, MIG_F_RM_TREE, "record %u (handle %#x): %s",
				       i, o.handle, bad);
	}
	if (!r && off != out->u.list.len)
		return dec_bad(d, f, -EBADMSG, MIG_F_RM_TREE, "%zu bytes after its %u records",
			       out->u.list.len - off, out->u.list.count);
	return r ? r : 1;
}

static int dec_sched(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	struct mig_sched_rec *s = &out->u.sched;

	if (len != SCHED_LEN || get64(p + 56))
		return dec_bad(d, f, -EBADMSG, MIG_F_SCHED, "length %u (expected %u) or "
			       "reserved word not 0", len, SCHED_LEN);
	*s = (struct mig_sched_rec){ get64(p), get64(p + 8), get64(p + 16), get64(p + 24),
				     get64(p + 32), get64(p + 40), get64(p + 48) };
	return 1;
}

static int dec_control(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		       struct cmn_fail *f)
{
	uint32_t off, n;

	if (len <= LIST_FIXED || len - LIST_FIXED > MIG_CTRL_PIECE_MAX || get32(p + 4))
		return dec_bad(d, f, -EBADMSG, MIG_F_CONTROL, "%u data bytes (1..%u) or "
			       "reserved word not 0", len < LIST_FIXED ? 0 : len - LIST_FIXED,
			       MIG_CTRL_PIECE_MAX);
	off = get32(p);
	n = len - LIST_FIXED;
	if (off < d->ctrl_next || off > MIG_CTRL_SIZE || n > MIG_CTRL_SIZE - off)
		return dec_bad(d, f, -EBADMSG, MIG_F_CONTROL, "piece [%#x, +%#x) below the "
			       "previous one's end %#x or past the %#x-byte control area", off, n,
			       d->ctrl_next, MIG_CTRL_SIZE);
	d->ctrl_next = off + n;
	out->u.ctrl.off = off;
	out->u.ctrl.data = p + LIST_FIXED;
	out->u.ctrl.len = n;
	return 1;
}

static int dec_guest(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	if (len != MIG_GUEST_LEN || get64(p + 8))
		return dec_bad(d, f, -EBADMSG, MIG_F_GUEST, "length %u (expected %u) or "
			       "reserved word not 0", len, MIG_GUEST_LEN);
	out->u.guest.abi = get32(p);
	out->u.guest.flags = get32(p + 4);
	if (!out->u.guest.flags)
		return dec_bad(d, f, -EBADMSG, MIG_F_GUEST, "no flags (a guest that asked for "
			       "nothing has no GUEST frame)");
	return 1;
}

void mig_chan_rec_at(const struct mig_frame *fr, uint32_t i, struct mig_chan_rec *out)
{
	const uint8_t *p = fr->u.list.p + (size_t)i * CHAN_REC;

	*out = (struct mig_chan_rec){ get32(p), get32(p + 4), get32(p + 8), get32(p + 12),
		get32(p + 16), get32(p + 20), get32(p + 24), get32(p + 28), get32(p + 32),
		get32(p + 36), get64(p + 40) };
}

void mig_db_rec_at(const struct mig_frame *fr, uint32_t i, struct mig_db_rec *out)
{
	const uint8_t *p = fr->u.list.p + (size_t)i * DB_REC;

	*out = (struct mig_db_rec){ get32(p), get32(p + 4), get32(p + 8), get32(p + 12) };
}

void mig_iommu_rec_at(const struct mig_frame *fr, uint32_t i, struct mig_iommu_rec *out)
{
	const uint8_t *p = fr->u.list.p + (size_t)i * IOMMU_REC;

	*out = (struct mig_iommu_rec){ get64(p), get64(p + 8), get64(p + 16), get32(p + 24) };
}

int mig_rm_obj_next(const struct mig_frame *fr, size_t *off, struct mig_rm_obj *out)
{
	const uint8_t *q = fr->u.list.p + *off;

	if (*off >= fr->u.list.len)
		return 0;
	*out = (struct mig_rm_obj){ .h_client = get32(q), .h_parent = get32(q + 4),
		.handle = get32(q + 8), .h_class = get32(q + 12), .share_target = get32(q + 16),
		.share_access = get32(q + 20), .dep_client = get32(q + 24),
		.dep_handle = get32(q + 28), .a = get64(q + 32), .b = get64(q + 40),
		.c = get64(q + 48), .x = get32(q + 56), .y = get32(q + 60), .z = get32(q + 64),
		.w = get32(q + 68), .nr_runs = get32(q + 72), .runs_wire = q + MIG_RM_OBJ_FIXED };
	*off += MIG_RM_OBJ_FIXED + (size_t)out->nr_runs * RUN_LEN;
	return 1;
}

void mig_rm_run(const struct mig_rm_obj *o, uint32_t i, uint64_t *start, uint64_t *count)
{
	if (o->runs_wire) {
		*start = get64(o->runs_wire + (size_t)i * RUN_LEN);
		*count = get64(o->runs_wire + (size_t)i * RUN_LEN + 8);
	} else {
		*start = o->runs[2 * i];
		*count = o->runs[2 * i + 1];
	}
}

/* The frame's order: HELLO first, SLICE second, then extents, END last. */
static int dec_order(struct mig_dec *d, uint32_t type, struct cmn_fail *f)
{
	if (d->seq == 0 && type != MIG_F_HELLO)
		return dec_bad(d, f, -EBADMSG, type, "not a vgpu migration stream (no HELLO frame "
			       "first)");
	if (d->seq && type == MIG_F_HELLO)
		return dec_bad(d, f, -EBADMSG, type, "a second HELLO");
	if (d->seq && !d->slice_seen && type != MIG_F_SLICE)
		return dec_bad(d, f, -EBADMSG, type, "expected the SLICE frame");
	if (state_rank(type) >= 0)
		return dec_state_order(d, type, f);
	if (type < MIG_F_HELLO || type > MIG_F_END)
		return dec_fail(d, f, -EBADMSG, "frame %u at byte %" PRIu64 ": unknown type %u",
				d->seq, d->frame_at, type);
	if (type == MIG_F_EXTENT && d->state_rank >= 0)
		return dec_bad(d, f, -EBADMSG, type, "an extent after the state frames");
	return 0;
}

int mig_dec_next(struct mig_dec *d, struct mig_frame *out, struct cmn_fail *f)
{
	uint8_t *h = d->buf;
	uint64_t at = d->pos;
	uint32_t type, len, seq, crc;
	ssize_t n;
	int r;

	if (d->failed)
		return cmn_fail(f, -EBADMSG, "migration stream: the decoder already failed");
	if (d->ended)
		return dec_after_end(d, f);
	d->frame_at = at;
	n = read_full(d, h, MIG_FRAME_HDR);
	if (n < 0)
		return dec_fail(d, f, (int)n, "migration stream: read of frame %u: %s", d->seq,
				strerror((int)-n));
	if (n == 0 && !d->seq)
		return dec_fail(d, f, -EBADMSG, "migration stream truncated: it is empty");
	if (n == 0)
		return dec_fail(d, f, -EBADMSG, "migration stream truncated: it ends after frame %u "
				"at byte %" PRIu64 " with no END frame", d->seq - 1, at);
	if (n < MIG_FRAME_HDR)
		return dec_fail(d, f, -EBADMSG, "frame %u at byte %" PRIu64 ": truncated inside "
				"its header (%zd of %u bytes)", d->seq, at, n, MIG_FRAME_HDR);
	type = get16(h);
	len = get32(h + 4);
	seq = get32(h + 8);
	crc = get32(h + 12);
	/* Anything else first is not a damaged stream but some other file: say so. */
	if (!d->seq && (type != MIG_F_HELLO || len != HELLO_LEN))
		return dec_fail(d, f, -EBADMSG, "frame 0 at byte 0: not a vgpu migration stream "
				"(no HELLO frame first)");
	if (len > MIG_PAYLOAD_MAX)
		return dec_fail(d, f, -EBADMSG, "frame %u (%s) at byte %" PRIu64 ": payload length %u "
				"over the limit %u", d->seq, mig_frame_name(type), at, len,
				MIG_PAYLOAD_MAX);
	n = read_full(d, h + MIG_FRAME_HDR, len);
	if (n < 0)
		return dec_fail(d, f, (int)n, "migration stream: read of frame %u: %s", d->seq,
				strerror((int)-n));
	if ((uint32_t)n < len)
		return dec_fail(d, f, -EBADMSG, "frame %u (%s) at byte %" PRIu64 ": truncated after %zd "
				"of %u payload bytes", d->seq, mig_frame_name(type), at, n, len);
	if (mig_crc32c(mig_crc32c(0, h, 12), h + MIG_FRAME_HDR, len) != crc)
		return dec_fail(d, f, -EBADMSG, "frame %u (%s) at byte %" PRIu64 ": checksum mismatch "
				"(corrupted)", d->seq, mig_frame_name(type), at);
	if (get16(h + 2) || seq != d->seq)
		return dec_fail(d, f, -EBADMSG, "frame %u (%s) at byte %" PRIu64 ": sequence %u or "
				"flags %#x wrong", d->seq, mig_frame_name(type), at, seq, get16(h + 2));
	r = dec_order(d, type, f);
	if (r)
		return r;
	memset(out, 0, sizeof(*out));
	out->type = type;
	out->seq = seq;
	switch (type) {
	case MIG_F_HELLO:
		r = dec_hello(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_SLICE:
		r = dec_slice(d, h + MIG_FRAME_HDR, len, out, f);
		/* The definition is text: ended by a NUL in the buffer (it has room past a
		 * definition's 64 KiB), so what an earlier frame left after it is never read
		 * as more of it. */
		if (r == 1)
			h[MIG_FRAME_HDR + len] = 0;
		break;
	case MIG_F_EXTENT:
		r = dec_extent(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_CHANNELS:
		r = dec_channels(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_RM_TREE:
		r = dec_rm_tree(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_IOMMU:
		r = dec_iommu(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_DOORBELLS:
		r = dec_doorbells(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_SCHED:
		r = dec_sched(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_CONTROL:
		r = dec_control(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	case MIG_F_GUEST:
		r = dec_guest(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	default:
		r = dec_end(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	}
	if (r == 1)
		d->seq++;
	return r;
}
