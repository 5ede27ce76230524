// SPDX-License-Identifier: MIT
/* fuzz_mig: the slice migration stream decoder (mig/mig.h), which reads what another vgpud
 * sent or what `vgpuctl restore` was given. Byte 0: bit 0 set fixes each frame's CRC up
 * before decoding (so the checks after the checksum are reached), bit 1 set reads in
 * 7-byte pieces (short reads). The checks: an extent lies inside the region SLICE declared
 * and above the previous one; a stream decoded to its end (state frames of version 1.1
 * included) re-encodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/compiler.h"
#include "mig/mig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct src {
	const uint8_t *p;
	size_t len, rd, piece;
};

static ssize_t src_read(void *ctx, void *p, size_t len)
{
	struct src *s = ctx;
	size_t n = cmn_min(len, s->len - s->rd);

	if (s->piece)
		n = cmn_min(n, s->piece);
	memcpy(p, s->p + s->rd, n);
	s->rd += n;
	return (ssize_t)n;
}

struct sink {
	uint8_t *p;
	size_t len, cap;
};

static int sink_write(void *ctx, const void *p, size_t len)
{
	struct sink *s = ctx;

	if (s->len + len > s->cap) {
		size_t cap = (s->len + len) * 2;
		uint8_t *n = realloc(s->p, cap);

		if (!n)
			return -12;
		s->p = n;
		s->cap = cap;
	}
	memcpy(s->p + s->len, p, len);
	s->len += len;
	return 0;
}

/* Recompute every whole frame's CRC in @b, as a peer that frames garbage correctly. */
static void fix_crcs(uint8_t *b, size_t len)
{
	size_t off = 0;

	while (off + MIG_FRAME_HDR <= len) {
		uint32_t plen = (uint32_t)b[off + 4] | (uint32_t)b[off + 5] << 8 |
				(uint32_t)b[off + 6] << 16 | (uint32_t)b[off + 7] << 24;
		uint32_t crc;

		if (plen > len - off - MIG_FRAME_HDR)
			break;
		crc = mig_crc32c(mig_crc32c(0, b + off, 12), b + off + MIG_FRAME_HDR, plen);
		for (int i = 0; i < 4; i++)
			b[off + 12 + i] = (uint8_t)(crc >> (8 * i));
		off += MIG_FRAME_HDR + plen;
	}
}

/* Re-encode a decoded list frame (the state frames but SCHED) into @e, one frame for one:
 * each holds fewer records than the encoder puts in a frame. */
static void reencode_list(struct mig_enc *e, const struct mig_frame *fr, bool *ok)
{
	uint32_t n = fr->u.list.count;
	size_t off = 0;

	switch (fr->type) {
	case MIG_F_CHANNELS: {
		struct mig_chan_rec *r = calloc(n + 1, sizeof(*r));

		for (uint32_t i = 0; r && i < n; i++)
			mig_chan_rec_at(fr, i, &r[i]);
		*ok &= r && !mig_enc_channels(e, r, n, NULL);
		free(r);
		break;
	}
	case MIG_F_DOORBELLS: {
		struct mig_db_rec *r = calloc(n + 1, sizeof(*r));

		for (uint32_t i = 0; r && i < n; i++)
			mig_db_rec_at(fr, i, &r[i]);
		*ok &= r && !mig_enc_doorbells(e, r, n, NULL);
		free(r);
		break;
	}
	case MIG_F_IOMMU: {
		struct mig_iommu_rec *r = calloc(n + 1, sizeof(*r));

		for (uint32_t i = 0; r && i < n; i++)
			mig_iommu_rec_at(fr, i, &r[i]);
		*ok &= r && !mig_enc_iommu(e, r, n, NULL);
		free(r);
		break;
	}
	case MIG_F_RM_TREE: {
		struct mig_rm_obj *o = calloc(n + 1, sizeof(*o));

		for (uint32_t i = 0; o && i < n; i++)
			VGPU_ASSERT(mig_rm_obj_next(fr, &off, &o[i]) == 1);
		*ok &= o && !mig_enc_rm_tree(e, o, n, NULL);
		free(o);
		break;
	}
	default:
		break;
	}
}

/* Re-encode a decoded frame into @e. */
static void reencode(struct mig_enc *e, const struct mig_frame *fr, bool *ok)
{
	switch (fr->type) {
	case MIG_F_SLICE:
		*ok &= !mig_enc_slice(e, fr->u.slice.vram_bytes, fr->u.slice.dma_bytes,
				      fr->u.slice.def, fr->u.slice.def_len, NULL);
		break;
	case MIG_F_EXTENT:
		*ok &= !mig_enc_extent(e, fr->u.extent.region, fr->u.extent.off, fr->u.extent.data,
				       fr->u.extent.len, NULL);
		break;
	case MIG_F_END:
		*ok &= !mig_enc_end(e, NULL);
		break;
	case MIG_F_SCHED:
		*ok &= !mig_enc_sched(e, &fr->u.sched, NULL);
		break;
	case MIG_F_CONTROL:
		*ok &= !mig_enc_control(e, fr->u.ctrl.off, fr->u.ctrl.data, fr->u.ctrl.len, NULL);
		break;
	case MIG_F_GUEST:
		*ok &= !mig_enc_guest(e, fr->u.guest.abi, fr->u.guest.flags, NULL);
		break;
	default:
		reencode_list(e, fr, ok);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct src s = { 0 };
	struct sink out = { 0 };
	struct mig_dec d;
	struct mig_enc e;
	struct mig_frame fr;
	uint64_t size_of[MIG_NR_REGIONS] = { 0 }, next[MIG_NR_REGIONS] = { 0 };
	bool hello_plain = false, ok = true;
	uint8_t *buf;
	int r;

	if (size < 1 || size > (4u << 20))
		return 0;
	buf = malloc(size);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	if (data[0] & 1)
		fix_crcs(buf, size - 1);
	s.p = buf;
	s.len = size - 1;
	s.piece = data[0] & 2 ? 7 : 0;
	if (mig_dec_init(&d, src_read, &s, NULL)) {
		free(buf);
		return 0;
	}
	while ((r = mig_dec_next(&d, &fr, NULL)) > 0) {
		if (fr.type == MIG_F_HELLO) {
			/* Only the version this encoder writes can re-encode byte for byte. */
			hello_plain = fr.u.hello.minor == MIG_VERSION_MINOR;
			if (hello_plain)
				ok &= !mig_enc_init(&e, sink_write, &out, NULL);
			continue;
		}
		if (fr.type == MIG_F_SLICE) {
			size_of[MIG_R_VRAM] = fr.u.slice.vram_bytes;
			size_of[MIG_R_DMA] = fr.u.slice.dma_bytes;
			VGPU_ASSERT(fr.u.slice.def_len >= 1 && fr.u.slice.def_len <= MIG_DEF_MAX);
		}
		if (fr.type == MIG_F_EXTENT) {
			uint32_t rg = fr.u.extent.region;

			VGPU_ASSERT(rg < MIG_NR_REGIONS);
			VGPU_ASSERT(fr.u.extent.len >= 1 && fr.u.extent.len <= MIG_EXTENT_MAX);
			VGPU_ASSERT(fr.u.extent.off >= next[rg]);
			VGPU_ASSERT(fr.u.extent.off <= size_of[rg] &&
				    fr.u.extent.len <= size_of[rg] - fr.u.extent.off);
			next[rg] = fr.u.extent.off + fr.u.extent.len;
		}
		if (hello_plain)
			reencode(&e, &fr, &ok);
	}
	/* A whole valid stream is exactly what the encoder writes for its frames. */
	if (r == 0 && hello_plain) {
		VGPU_ASSERT(ok);
		VGPU_ASSERT(out.len == s.len && !memcmp(out.p, buf, out.len));
	}
	mig_dec_fini(&d);
	free(out.p);
	free(buf);
	return 0;
}
