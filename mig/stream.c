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

/* ---- CRC32C ------------------------------------------------------------------------------ */

static uint32_t crc_table[256];

/* The reflected Castagnoli table, built once (constructors run before any thread). */
__attribute__((constructor)) static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
		crc_table[i] = c;
	}
}

uint32_t mig_crc32c(uint32_t crc, const void *p, size_t len)
{
	const uint8_t *b = p;

	crc = ~crc;
#ifdef __SSE4_2__
	/* The instruction computes the same polynomial 8 bytes at a time. */
	while (len >= 8) {
		uint64_t v;

		memcpy(&v, b, 8);
		crc = (uint32_t)__builtin_ia32_crc32di(crc, v);
		b += 8;
		len -= 8;
	}
#endif
	while (len--)
		crc = (crc >> 8) ^ crc_table[(crc ^ *b++) & 0xff];
	return ~crc;
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

/* One frame: header, @fixed bytes, then @len bytes of @data (either may be empty). */
static int enc_frame(struct mig_enc *e, uint32_t type, const uint8_t *fixed, size_t flen,
		     const void *data, size_t len, struct cmn_fail *f)
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
	crc = mig_crc32c(crc, data, len);
	put32(h + 12, crc);
	r = e->write(e->ctx, h, sizeof(h));
	if (!r && flen)
		r = e->write(e->ctx, fixed, flen);
	if (!r && len)
		r = e->write(e->ctx, data, len);
	if (r)
		return cmn_fail(f, r, "migration stream: cannot write frame %u (%s): %s", e->seq,
				mig_frame_name(type), strerror(-r));
	e->seq++;
	if (type != MIG_F_END)
		e->tot.frames++;
	return 0;
}

int mig_enc_init(struct mig_enc *e, mig_write_fn write, void *ctx, struct cmn_fail *f)
{
	uint8_t p[HELLO_LEN];

	memset(e, 0, sizeof(*e));
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

int mig_enc_extent(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		   size_t len, struct cmn_fail *f)
{
	const uint8_t *b = data;

	if (!e->slice_sent)
		return cmn_fail(f, -EINVAL, "migration stream: an extent before SLICE");
	if ((unsigned int)region >= MIG_NR_REGIONS)
		return cmn_fail(f, -EINVAL, "migration stream: region %u", (unsigned int)region);
	if (off < e->next[region] || off > e->size[region] || len > e->size[region] - off)
		return cmn_fail(f, -EINVAL, "migration stream: %s extent [%#" PRIx64 ", +%#zx) out "
				"of order or past %#" PRIx64, mig_region_name(region), off, len,
				e->size[region]);
	while (len) {
		size_t n = cmn_min(len, (size_t)MIG_EXTENT_MAX);
		uint8_t p[EXTENT_FIXED];
		int r;

		put32(p, region);
		put32(p + 4, 0);
		put64(p + 8, off);
		r = enc_frame(e, MIG_F_EXTENT, p, sizeof(p), b, n, f);
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

/* ---- decoder ----------------------------------------------------------------------------- */

int mig_dec_init(struct mig_dec *d, mig_read_fn read, void *ctx, struct cmn_fail *f)
{
	memset(d, 0, sizeof(*d));
	d->read = read;
	d->ctx = ctx;
	d->buf = malloc(MIG_FRAME_HDR + MIG_PAYLOAD_MAX);
	if (!d->buf)
		return cmn_fail(f, -ENOMEM, "out of memory");
	return 0;
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

static int dec_hello(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	if (len != HELLO_LEN || memcmp(p, MIG_MAGIC, 8))
		return dec_fail(d, f, -EBADMSG, "frame 0 (hello): not a vgpu migration stream (bad "
				"magic or length %u)", len);
	out->u.hello.major = get16(p + 8);
	out->u.hello.minor = get16(p + 10);
	if (out->u.hello.major != MIG_VERSION_MAJOR)
		return dec_fail(d, f, -EPROTO, "frame 0 (hello): stream version %u.%u; this vgpud "
				"reads version %u.x only", out->u.hello.major, out->u.hello.minor,
				MIG_VERSION_MAJOR);
	if (get32(p + 12))
		return dec_fail(d, f, -EPROTO, "frame 0 (hello): flags %#x not understood by "
				"version %u.%u", get32(p + 12), MIG_VERSION_MAJOR, MIG_VERSION_MINOR);
	return 1;
}

static int dec_slice(struct mig_dec *d, const uint8_t *p, uint32_t len, struct mig_frame *out,
		     struct cmn_fail *f)
{
	uint64_t v, m;

	if (d->slice_seen)
		return dec_fail(d, f, -EBADMSG, "frame %u (slice): a second SLICE frame", d->seq);
	if (len <= SLICE_FIXED || len - SLICE_FIXED > MIG_DEF_MAX)
		return dec_fail(d, f, -EBADMSG, "frame %u (slice): definition of %u bytes (1..%u)",
				d->seq, len < SLICE_FIXED ? 0 : len - SLICE_FIXED, MIG_DEF_MAX);
	v = get64(p);
	m = get64(p + 8);
	if (!v || v > REGION_MAX || m > REGION_MAX)
		return dec_fail(d, f, -EBADMSG, "frame %u (slice): region sizes vram %" PRIu64
				" dma %" PRIu64 " out of range", d->seq, v, m);
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
		return dec_fail(d, f, -EBADMSG, "frame %u (extent): %u data bytes (1..%u)", d->seq,
				len < EXTENT_FIXED ? 0 : len - EXTENT_FIXED, MIG_EXTENT_MAX);
	rg = get32(p);
	off = get64(p + 8);
	n = len - EXTENT_FIXED;
	if (rg >= MIG_NR_REGIONS || get32(p + 4))
		return dec_fail(d, f, -EBADMSG, "frame %u (extent): region %u unknown", d->seq, rg);
	if (off < d->next[rg])
		return dec_fail(d, f, -EBADMSG, "frame %u (extent): %s offset %#" PRIx64 " below the "
				"previous extent's end %#" PRIx64, d->seq, mig_region_name(rg), off,
				d->next[rg]);
	if (off > d->size[rg] || n > d->size[rg] - off)
		return dec_fail(d, f, -EBADMSG, "frame %u (extent): %s [%#" PRIx64 ", +%#" PRIx64
				") past the region's %#" PRIx64 " bytes", d->seq, mig_region_name(rg),
				off, n, d->size[rg]);
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
		return dec_fail(d, f, -EBADMSG, "frame %u (end): length %u (expected %u)", d->seq,
				len, END_LEN);
	t->frames = get64(p);
	t->extents = get64(p + 8);
	t->bytes[MIG_R_VRAM] = get64(p + 16);
	t->bytes[MIG_R_DMA] = get64(p + 24);
	if (t->frames != d->seq || t->extents != d->tot.extents ||
	    t->bytes[MIG_R_VRAM] != d->tot.bytes[MIG_R_VRAM] ||
	    t->bytes[MIG_R_DMA] != d->tot.bytes[MIG_R_DMA])
		return dec_fail(d, f, -EBADMSG, "frame %u (end): totals (%" PRIu64 " frames, %" PRIu64
				" extents, %" PRIu64 "+%" PRIu64 " bytes) differ from the stream's "
				"(%u, %" PRIu64 ", %" PRIu64 "+%" PRIu64 ")", d->seq, t->frames,
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

/* The frame's order: HELLO first, SLICE second, then extents, END last. */
static int dec_order(struct mig_dec *d, uint32_t type, struct cmn_fail *f)
{
	const char *nm = mig_frame_name(type);

	if (d->seq == 0 && type != MIG_F_HELLO)
		return dec_fail(d, f, -EBADMSG, "frame 0 (%s): not a vgpu migration stream (no "
				"HELLO frame first)", nm);
	if (d->seq && type == MIG_F_HELLO)
		return dec_fail(d, f, -EBADMSG, "frame %u (hello): a second HELLO", d->seq);
	if (d->seq && !d->slice_seen && type != MIG_F_SLICE)
		return dec_fail(d, f, -EBADMSG, "frame %u (%s): expected the SLICE frame", d->seq, nm);
	if (type >= MIG_F_CHANNELS && type <= MIG_F_SCHED)
		return dec_fail(d, f, -EPROTO, "frame %u (%s): this state is not carried by stream "
				"version %u.%u", d->seq, nm, MIG_VERSION_MAJOR, MIG_VERSION_MINOR);
	if (type < MIG_F_HELLO || type > MIG_F_END)
		return dec_fail(d, f, -EBADMSG, "frame %u: unknown type %u", d->seq, type);
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
		return dec_fail(d, f, -EBADMSG, "frame %u: truncated inside its header at byte %"
				PRIu64, d->seq, d->pos);
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
		break;
	case MIG_F_EXTENT:
		r = dec_extent(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	default:
		r = dec_end(d, h + MIG_FRAME_HDR, len, out, f);
		break;
	}
	if (r == 1)
		d->seq++;
	return r;
}
