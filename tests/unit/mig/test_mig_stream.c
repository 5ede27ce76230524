// SPDX-License-Identifier: MIT
/* The migration stream codec: round trip, truncation at and inside every frame, every
 * single flipped byte, version mismatch, oversized and out-of-range fields. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <cmocka.h>

#include "mig/mig.h"
#include "mig/mig_internal.h"

/* A growing memory buffer the encoder writes and the decoder reads. */
struct mbuf {
	uint8_t *p;
	size_t len, cap, rd;
	size_t chunk;		/* the reader hands out at most this many bytes per call (0: all) */
};

static int mbuf_write(void *ctx, const void *p, size_t len)
{
	struct mbuf *b = ctx;

	if (b->len + len > b->cap) {
		b->cap = (b->len + len) * 2;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, p, len);
	b->len += len;
	return 0;
}

static ssize_t mbuf_read(void *ctx, void *p, size_t len)
{
	struct mbuf *b = ctx;
	size_t n = b->len - b->rd;

	if (n > len)
		n = len;
	if (b->chunk && n > b->chunk)
		n = b->chunk;
	memcpy(p, b->p + b->rd, n);
	b->rd += n;
	return (ssize_t)n;
}

static const char def[] = "{\"uuid\":\"5b0b4a3c-1111-4222-8333-944455556666\",\"mdev_type\":\"t\"}";

/* A stream with two VRAM extents (one over MIG_EXTENT_MAX, so split) and one DMA extent;
 * returns the frame count (END included). */
static unsigned int make_stream(struct mbuf *b, uint8_t *vram, size_t vram_len)
{
	struct mig_enc e;
	uint8_t dma[100];

	for (size_t i = 0; i < vram_len; i++)
		vram[i] = (uint8_t)(i * 7 + 3);
	memset(dma, 0x5a, sizeof(dma));
	assert_int_equal(mig_enc_init(&e, mbuf_write, b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, vram_len, 1 << 20, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 0, vram, 4096, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 8192, vram + 8192, vram_len - 8192, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_DMA, 4096, dma, sizeof(dma), NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	return e.seq;
}

/* Decode @b fully; 0 and the frame count, or the first error with its message in @f. */
static int decode_all(struct mbuf *b, unsigned int *frames, uint8_t *vram, size_t vram_len,
		      struct cmn_fail *f)
{
	struct mig_dec d;
	struct mig_frame fr;
	int r;

	b->rd = 0;
	*frames = 0;
	assert_int_equal(mig_dec_init(&d, mbuf_read, b, f), 0);
	while ((r = mig_dec_next(&d, &fr, f)) > 0) {
		(*frames)++;
		if (fr.type == MIG_F_EXTENT && fr.u.extent.region == MIG_R_VRAM && vram) {
			assert_true(fr.u.extent.off + fr.u.extent.len <= vram_len);
			memcpy(vram + fr.u.extent.off, fr.u.extent.data, fr.u.extent.len);
		}
	}
	/* A failed decoder keeps failing. */
	if (r < 0)
		assert_true(mig_dec_next(&d, &fr, NULL) < 0);
	mig_dec_fini(&d);
	return r;
}

#define VRAM_LEN ((size_t)3 << 20)

static void test_round_trip(void **state)
{
	struct mbuf b = { 0 };
	uint8_t *src = malloc(VRAM_LEN), *dst = calloc(1, VRAM_LEN);
	struct mig_dec d;
	struct mig_frame fr;
	unsigned int n, frames;

	(void)state;
	n = make_stream(&b, src, VRAM_LEN);
	/* hello, slice, 1 + 3 vram extents (the second split at 1 MiB), 1 dma, end */
	assert_int_equal(n, 8);
	for (size_t chunk = 0; chunk < 3; chunk++) {
		b.chunk = chunk ? 1 + chunk * 5 : 0;	/* short reads must not matter */
		memset(dst, 0, VRAM_LEN);
		assert_int_equal(decode_all(&b, &frames, dst, VRAM_LEN, NULL), 0);
		assert_int_equal(frames, n);
		assert_memory_equal(dst, src, 4096);
		assert_memory_equal(dst + 8192, src + 8192, VRAM_LEN - 8192);
		for (size_t i = 4096; i < 8192; i++)
			assert_int_equal(dst[i], 0);	/* the hole stays a hole */
	}
	b.chunk = 0;
	b.rd = 0;
	assert_int_equal(mig_dec_init(&d, mbuf_read, &b, NULL), 0);
	assert_int_equal(mig_dec_next(&d, &fr, NULL), 1);
	assert_int_equal(fr.type, MIG_F_HELLO);
	assert_int_equal(fr.u.hello.major, MIG_VERSION_MAJOR);
	assert_int_equal(mig_dec_next(&d, &fr, NULL), 1);
	assert_int_equal(fr.type, MIG_F_SLICE);
	assert_int_equal(fr.u.slice.vram_bytes, VRAM_LEN);
	assert_int_equal(fr.u.slice.dma_bytes, 1 << 20);
	assert_int_equal(fr.u.slice.def_len, strlen(def));
	assert_memory_equal(fr.u.slice.def, def, strlen(def));
	assert_int_equal(fr.u.slice.def[fr.u.slice.def_len], 0);
	while (mig_dec_next(&d, &fr, NULL) > 0 && fr.type != MIG_F_END)
		;
	assert_int_equal(fr.type, MIG_F_END);
	assert_int_equal(fr.u.end.extents, 5);
	assert_int_equal(fr.u.end.bytes[MIG_R_VRAM], VRAM_LEN - 4096);
	assert_int_equal(fr.u.end.bytes[MIG_R_DMA], 100);
	assert_int_equal(mig_dec_next(&d, &fr, NULL), 0);
	mig_dec_fini(&d);
	free(b.p);
	free(src);
	free(dst);
}

/* Each extent's buffer taken from the decoder (another handed in) keeps its frame intact
 * while every later frame is read, and the stream decodes as without the swaps. */
static void test_swap_buf(void **state)
{
	struct mbuf b = { 0 };
	uint8_t *src = malloc(VRAM_LEN), *dst = calloc(1, VRAM_LEN), *kept[8];
	struct mig_frame fr, held[8];
	struct mig_dec d;
	unsigned int n, nk = 0, frames = 0;

	(void)state;
	n = make_stream(&b, src, VRAM_LEN);
	assert_int_equal(mig_dec_init(&d, mbuf_read, &b, NULL), 0);
	/* A buffer an earlier frame filled: the definition still ends where it ends. */
	kept[0] = malloc(MIG_DEC_BUF);
	memset(kept[0], '/', MIG_DEC_BUF);
	free(mig_dec_swap_buf(&d, kept[0]));
	while (mig_dec_next(&d, &fr, NULL) > 0) {
		frames++;
		if (fr.type == MIG_F_SLICE)
			assert_string_equal(fr.u.slice.def, def);
		if (fr.type != MIG_F_EXTENT || fr.u.extent.region != MIG_R_VRAM)
			continue;
		assert_true(nk < 8);
		held[nk] = fr;
		kept[nk++] = mig_dec_swap_buf(&d, malloc(MIG_DEC_BUF));
	}
	assert_int_equal(frames, n);
	assert_int_equal(nk, 4);
	for (unsigned int i = 0; i < nk; i++) {
		assert_true(held[i].u.extent.data >= kept[i] &&
			    held[i].u.extent.data + held[i].u.extent.len <= kept[i] + MIG_DEC_BUF);
		memcpy(dst + held[i].u.extent.off, held[i].u.extent.data, held[i].u.extent.len);
		free(kept[i]);
	}
	assert_memory_equal(dst, src, 4096);
	assert_memory_equal(dst + 8192, src + 8192, VRAM_LEN - 8192);
	mig_dec_fini(&d);
	free(b.p);
	free(src);
	free(dst);
}

/* Cut the stream at every frame boundary and at several points inside each frame. */
static void test_truncation(void **state)
{
	struct mbuf b = { 0 };
	uint8_t *src = malloc(VRAM_LEN);
	size_t full, off = 0, bounds[16];
	unsigned int nb = 0, frames;
	struct cmn_fail f;

	(void)state;
	make_stream(&b, src, VRAM_LEN);
	full = b.len;
	while (off < full) {		/* walk the frame headers for the boundaries */
		uint32_t len = (uint32_t)b.p[off + 4] | (uint32_t)b.p[off + 5] << 8 |
			       (uint32_t)b.p[off + 6] << 16 | (uint32_t)b.p[off + 7] << 24;

		bounds[nb++] = off;
		off += MIG_FRAME_HDR + len;
	}
	assert_int_equal(off, full);
	for (unsigned int i = 0; i < nb; i++) {
		size_t next = i + 1 < nb ? bounds[i + 1] : full;
		size_t cuts[] = { bounds[i], bounds[i] + 1, bounds[i] + MIG_FRAME_HDR - 1,
				  bounds[i] + MIG_FRAME_HDR, (bounds[i] + next) / 2, next - 1 };

		for (unsigned int c = 0; c < 6; c++) {
			if (cuts[c] >= full)
				continue;
			b.len = cuts[c];
			memset(&f, 0, sizeof(f));
			assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
			assert_non_null(strstr(f.msg, "truncated"));
			if (cuts[c] > bounds[i] || i)
				assert_true(strstr(f.msg, "frame") != NULL);
		}
	}
	b.len = full;
	assert_int_equal(decode_all(&b, &frames, NULL, 0, NULL), 0);
	free(b.p);
	free(src);
}

/* Every single byte flipped anywhere is refused, and the message names a frame. */
static void test_flipped_byte(void **state)
{
	struct mbuf b = { 0 };
	uint8_t *src = malloc(64 << 10);
	unsigned int frames;
	struct cmn_fail f;
	struct mig_enc e;

	(void)state;
	/* A small stream, so every byte of it can be tried. */
	memset(src, 0x11, 64 << 10);
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, 64 << 10, 4096, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 0, src, 300, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_DMA, 0, src, 20, NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	for (size_t i = 0; i < b.len; i++) {
		for (unsigned int bit = 0; bit < 8; bit += 3) {
			b.p[i] ^= (uint8_t)(1u << bit);
			memset(&f, 0, sizeof(f));
			assert_true(decode_all(&b, &frames, NULL, 0, &f) < 0);
			assert_non_null(strstr(f.msg, "frame"));
			b.p[i] ^= (uint8_t)(1u << bit);
		}
	}
	assert_int_equal(decode_all(&b, &frames, NULL, 0, NULL), 0);
	free(b.p);
	free(src);
}

/* Write one frame by hand (a valid CRC over whatever it holds). */
static void raw_frame(struct mbuf *b, uint16_t type, uint32_t seq, const void *p, uint32_t len,
		      uint32_t claimed_len)
{
	uint8_t h[MIG_FRAME_HDR];
	uint32_t crc;

	memset(h, 0, sizeof(h));
	h[0] = (uint8_t)type;
	h[1] = (uint8_t)(type >> 8);
	for (int i = 0; i < 4; i++) {
		h[4 + i] = (uint8_t)(claimed_len >> (8 * i));
		h[8 + i] = (uint8_t)(seq >> (8 * i));
	}
	crc = mig_crc32c(mig_crc32c(0, h, 12), p, len);
	for (int i = 0; i < 4; i++)
		h[12 + i] = (uint8_t)(crc >> (8 * i));
	mbuf_write(b, h, sizeof(h));
	mbuf_write(b, p, len);
}

static void hello_payload(uint8_t p[16], uint16_t major, uint16_t minor)
{
	memset(p, 0, 16);
	memcpy(p, MIG_MAGIC, 8);
	p[8] = (uint8_t)major;
	p[10] = (uint8_t)minor;
}

static void test_version(void **state)
{
	struct mbuf b = { 0 };
	uint8_t p[16];
	unsigned int frames;
	struct cmn_fail f = { 0 };
	struct mig_dec d;
	struct mig_frame fr;

	(void)state;
	hello_payload(p, MIG_VERSION_MAJOR + 1, 0);
	raw_frame(&b, MIG_F_HELLO, 0, p, 16, 16);
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EPROTO);
	assert_non_null(strstr(f.msg, "version 2.0"));
	/* A newer minor of the same major is read. */
	b.len = 0;
	hello_payload(p, MIG_VERSION_MAJOR, MIG_VERSION_MINOR + 3);
	raw_frame(&b, MIG_F_HELLO, 0, p, 16, 16);
	b.rd = 0;
	assert_int_equal(mig_dec_init(&d, mbuf_read, &b, NULL), 0);
	assert_int_equal(mig_dec_next(&d, &fr, NULL), 1);
	assert_int_equal(fr.u.hello.minor, MIG_VERSION_MINOR + 3);
	mig_dec_fini(&d);
	/* Not a stream at all. */
	b.len = 0;
	mbuf_write(&b, "{\"uuid\": \"x\"}\n....", 18);
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 0"));
	b.len = 0;
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "empty"));
	free(b.p);
}

static void put64le(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Lengths, offsets and orders a hostile stream may claim, each with a valid CRC. */
static void test_bad_fields(void **state)
{
	struct mbuf b = { 0 };
	uint8_t hello[16], sl[16 + 8], ext[16 + 4], big[64];
	unsigned int frames;
	struct cmn_fail f;
	size_t base;

	(void)state;
	hello_payload(hello, MIG_VERSION_MAJOR, MIG_VERSION_MINOR);
	raw_frame(&b, MIG_F_HELLO, 0, hello, 16, 16);
	base = b.len;
	/* A length over the limit: refused before any payload is read. */
	raw_frame(&b, MIG_F_SLICE, 1, big, 0, 0xfffffff0u);
	memset(&f, 0, sizeof(f));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 1 (slice)"));
	assert_non_null(strstr(f.msg, "over the limit"));
	/* An extent before SLICE. */
	b.len = base;
	memset(ext, 0, sizeof(ext));
	raw_frame(&b, MIG_F_EXTENT, 1, ext, sizeof(ext), sizeof(ext));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "expected the SLICE"));
	/* Region sizes over the limit, and zero VRAM. */
	b.len = base;
	put64le(sl, 1ull << 60);
	put64le(sl + 8, 0);
	memcpy(sl + 16, "{}      ", 8);
	raw_frame(&b, MIG_F_SLICE, 1, sl, sizeof(sl), sizeof(sl));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 1 (slice) at byte 32: region sizes"));
	assert_non_null(strstr(f.msg, "out of range"));
	b.len = base;
	put64le(sl, 0);
	raw_frame(&b, MIG_F_SLICE, 1, sl, sizeof(sl), sizeof(sl));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	/* A slice of 1 MiB VRAM, then extents past it, wrapping, descending, unknown region. */
	b.len = base;
	put64le(sl, 1 << 20);
	put64le(sl + 8, 4096);
	raw_frame(&b, MIG_F_SLICE, 1, sl, sizeof(sl), sizeof(sl));
	base = b.len;
	static const struct {
		uint32_t region, reserved; uint64_t off; const char *what;
	} bad[] = {
		{ 0, 0, (1 << 20) - 2, "past the region" },
		{ 0, 0, UINT64_MAX - 1, "past the region" },
		{ 1, 0, 4093, "past the region" },
		{ 7, 0, 0, "region 7 unknown" },
		{ 0, 9, 0, "reserved word 0x9 not 0" },
	};
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		b.len = base;
		memset(ext, 0, sizeof(ext));
		ext[0] = (uint8_t)bad[i].region;
		ext[4] = (uint8_t)bad[i].reserved;
		put64le(ext + 8, bad[i].off);
		raw_frame(&b, MIG_F_EXTENT, 2, ext, sizeof(ext), sizeof(ext));
		memset(&f, 0, sizeof(f));
		assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
		assert_non_null(strstr(f.msg, bad[i].what));
		/* Named by index, type and the byte it starts at: HELLO 32, SLICE 40. */
		assert_non_null(strstr(f.msg, "frame 2 (extent) at byte 72: "));
	}
	b.len = base;
	memset(ext, 0, sizeof(ext));
	put64le(ext + 8, 100);
	raw_frame(&b, MIG_F_EXTENT, 2, ext, sizeof(ext), sizeof(ext));
	put64le(ext + 8, 50);
	raw_frame(&b, MIG_F_EXTENT, 3, ext, sizeof(ext), sizeof(ext));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "below the previous"));
	/* A state frame whose records do not fit its length (version 1.1 carries the type). */
	b.len = base;
	raw_frame(&b, MIG_F_RM_TREE, 2, ext, sizeof(ext), sizeof(ext));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (rm-tree)"));
	/* A skipped sequence number, END with wrong totals, bytes after END. */
	b.len = base;
	raw_frame(&b, MIG_F_EXTENT, 5, ext, sizeof(ext), sizeof(ext));
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "sequence"));
	b.len = base;
	memset(big, 0, 32);
	put64le(big, 2);
	put64le(big + 8, 1);
	raw_frame(&b, MIG_F_END, 2, big, 32, 32);
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "totals"));
	b.len = base;
	put64le(big + 8, 0);
	raw_frame(&b, MIG_F_END, 2, big, 32, 32);
	assert_int_equal(decode_all(&b, &frames, NULL, 0, NULL), 0);
	mbuf_write(&b, "x", 1);
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "after the END"));
	free(b.p);
}

/* ---- state frames (version 1.1) ---- */

static const uint64_t runs[] = { 0x10000, 3, 0x80000, 1 };

static const struct mig_rm_obj objs[] = {
	{ .h_client = 0xe0100000, .handle = 0xe0100000 },
	{ .h_client = 0xe0100000, .h_parent = 0xe0100000, .handle = 0xcaf00000, .h_class = 0x80 },
	{ .h_client = 0xe0100000, .h_parent = 0xcaf00000, .handle = 0xcaf00001, .h_class = 0x40,
	  .a = 0x40000, .b = 0x10000, .nr_runs = 2, .runs = runs },
	{ .h_client = 0xe0100000, .h_parent = 0xcaf00000, .handle = 0xcaf00002, .h_class = 0x6f,
	  .dep_client = 0xe0100000, .dep_handle = 0xcaf00001, .a = 0x1000, .x = 5, .w = 9 },
};

static const struct mig_chan_rec chans[] = {
	{ 0xe0100000, 0xcaf00002, 5, 1, 512, MIG_CHAN_ENABLED, 37, 37, 1, 0, 99 },
	{ 0xe0100000, 0xcaf00003, 6, 0, 64, 0, 3, 4, 4, 12, 1 },
};
static const struct mig_db_rec dbs[] = { { 0xe0100000, 0xcaf00002, 5, 0x10005 } };
static const struct mig_iommu_rec maps[] = { { 1ull << 33, 0x10000, 0, 3 },
					     { (1ull << 33) + 0x20000, 0x1000, 0x10000, 1 } };
static const struct mig_sched_rec sched = { 1, 2, 3, 4, 5, 6, 7 };

/* A 1.1 stream with every state frame after one extent. */
static void make_state_stream(struct mbuf *b)
{
	struct mig_enc e;
	uint8_t x[64] = { 1 };

	assert_int_equal(mig_enc_init(&e, mbuf_write, b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, 1 << 20, 1 << 20, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 0, x, sizeof(x), NULL), 0);
	assert_int_equal(mig_enc_sched(&e, &sched, NULL), 0);
	assert_int_equal(mig_enc_rm_tree(&e, objs, 4, NULL), 0);
	assert_int_equal(mig_enc_iommu(&e, maps, 2, NULL), 0);
	assert_int_equal(mig_enc_channels(&e, chans, 2, NULL), 0);
	assert_int_equal(mig_enc_doorbells(&e, dbs, 1, NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
}

static void check_rm_frame(const struct mig_frame *fr)
{
	struct mig_rm_obj o;
	size_t off = 0;
	unsigned int n = 0;

	assert_int_equal(fr->u.list.count, 4);
	while (mig_rm_obj_next(fr, &off, &o)) {
		const struct mig_rm_obj *w = &objs[n++];

		assert_int_equal(o.h_client, w->h_client);
		assert_int_equal(o.h_parent, w->h_parent);
		assert_int_equal(o.handle, w->handle);
		assert_int_equal(o.h_class, w->h_class);
		assert_int_equal(o.dep_handle, w->dep_handle);
		assert_int_equal(o.a, w->a);
		assert_int_equal(o.x, w->x);
		assert_int_equal(o.w, w->w);
		assert_int_equal(o.nr_runs, w->nr_runs);
		for (uint32_t k = 0; k < o.nr_runs; k++) {
			uint64_t st, c;

			mig_rm_run(&o, k, &st, &c);
			assert_int_equal(st, runs[2 * k]);
			assert_int_equal(c, runs[2 * k + 1]);
		}
	}
	assert_int_equal(n, 4);
}

/* What was encoded decodes to the same records, in order. */
static void test_state_round_trip(void **state)
{
	struct mbuf b = { 0 };
	struct mig_dec d;
	struct mig_frame fr;
	uint32_t types[16];
	unsigned int n = 0;

	(void)state;
	make_state_stream(&b);
	assert_int_equal(mig_dec_init(&d, mbuf_read, &b, NULL), 0);
	while (mig_dec_next(&d, &fr, NULL) > 0) {
		types[n++] = fr.type;
		if (fr.type == MIG_F_HELLO)
			assert_int_equal(fr.u.hello.minor, MIG_VERSION_MINOR);
		if (fr.type == MIG_F_SCHED)
			assert_memory_equal(&fr.u.sched, &sched, sizeof(sched));
		if (fr.type == MIG_F_RM_TREE)
			check_rm_frame(&fr);
		for (uint32_t i = 0; fr.type == MIG_F_CHANNELS && i < fr.u.list.count; i++) {
			struct mig_chan_rec c;

			mig_chan_rec_at(&fr, i, &c);
			assert_memory_equal(&c, &chans[i], sizeof(c));
		}
		for (uint32_t i = 0; fr.type == MIG_F_IOMMU && i < fr.u.list.count; i++) {
			struct mig_iommu_rec m;

			mig_iommu_rec_at(&fr, i, &m);
			assert_int_equal(m.iova, maps[i].iova);
			assert_int_equal(m.offset, maps[i].offset);
			assert_int_equal(m.prot, maps[i].prot);
		}
		if (fr.type == MIG_F_DOORBELLS) {
			struct mig_db_rec db;

			assert_int_equal(fr.u.list.count, 1);
			mig_db_rec_at(&fr, 0, &db);
			assert_memory_equal(&db, &dbs[0], sizeof(db));
		}
	}
	mig_dec_fini(&d);
	assert_int_equal(n, 9);
	assert_int_equal(types[3], MIG_F_SCHED);
	assert_int_equal(types[4], MIG_F_RM_TREE);
	assert_int_equal(types[5], MIG_F_IOMMU);
	assert_int_equal(types[7], MIG_F_DOORBELLS);
	assert_int_equal(types[8], MIG_F_END);
	free(b.p);
}

/* Every cut and every flipped byte of a state stream is refused naming a frame. */
static void test_state_damage(void **state)
{
	struct mbuf b = { 0 };
	unsigned int frames;
	struct cmn_fail f;
	size_t full;

	(void)state;
	make_state_stream(&b);
	full = b.len;
	for (size_t cut = 0; cut < full; cut += 7) {
		b.len = cut;
		memset(&f, 0, sizeof(f));
		assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
		assert_non_null(strstr(f.msg, "truncated"));
	}
	b.len = full;
	for (size_t i = 0; i < full; i++) {
		b.p[i] ^= 0x10;
		memset(&f, 0, sizeof(f));
		assert_true(decode_all(&b, &frames, NULL, 0, &f) < 0);
		assert_non_null(strstr(f.msg, "frame"));
		b.p[i] ^= 0x10;
	}
	assert_int_equal(decode_all(&b, &frames, NULL, 0, NULL), 0);
	free(b.p);
}

/* Hand-made 1.1 streams up to SLICE, then @type with @p (CRC valid); the decode result. */
static int state_case(uint16_t minor, const uint16_t *types, const uint8_t *const *p,
		      const uint32_t *len, unsigned int n, struct cmn_fail *f)
{
	struct mbuf b = { 0 };
	uint8_t hello[16], sl[16 + 2];
	unsigned int frames;
	int r;

	hello_payload(hello, MIG_VERSION_MAJOR, minor);
	raw_frame(&b, MIG_F_HELLO, 0, hello, 16, 16);
	put64le(sl, 1 << 20);
	put64le(sl + 8, 1 << 20);
	memcpy(sl + 16, "{}", 2);
	raw_frame(&b, MIG_F_SLICE, 1, sl, sizeof(sl), sizeof(sl));
	for (unsigned int i = 0; i < n; i++)
		raw_frame(&b, types[i], 2 + i, p[i], len[i], len[i]);
	memset(f, 0, sizeof(*f));
	r = decode_all(&b, &frames, NULL, 0, f);
	free(b.p);
	return r;
}

/* A list payload: count, 0, then @rl bytes of @rec. */
static uint32_t list_payload(uint8_t *out, uint32_t count, const void *rec, uint32_t rl)
{
	memset(out, 0, 8);
	out[0] = (uint8_t)count;
	if (rl)
		memcpy(out + 8, rec, rl);
	return 8 + rl;
}

/* Version, order, counts and ranges of state frames. */
static void test_state_bad(void **state)
{
	uint8_t a[256], c[256], sch[64] = { 0 };
	const uint8_t *pp[3] = { a, c, sch };
	uint32_t len[3];
	uint8_t chan[48] = { 0 };
	struct cmn_fail f;

	(void)state;
	/* A good CHANNELS record: chid 5, runlist 1, 512 entries, state 1, handles set. */
	chan[0] = 1, chan[4] = 2, chan[8] = 5, chan[12] = 1, chan[17] = 2, chan[32] = 1;
	len[0] = list_payload(a, 1, chan, 48);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CHANNELS }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "truncated"));	/* good frame, no END */
	/* A 1.0 stream carries no state: refused by name. */
	assert_int_equal(state_case(0, (uint16_t[]){ MIG_F_CHANNELS }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (channels) at byte 66: a version 1.0 stream"));
	/* Count and length disagree. */
	len[0] = list_payload(a, 2, chan, 48);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CHANNELS }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "do not fill"));
	/* The same channel twice, across two frames. */
	len[0] = len[1] = list_payload(a, 1, chan, 48);
	memcpy(c, a, len[0]);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CHANNELS, MIG_F_CHANNELS }, pp, len, 2,
				    &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "channel id repeated"));
	/* GP_GET past the ring, chid 64, unknown flags. */
	chan[24] = 0, chan[25] = 2;
	len[0] = list_payload(a, 1, chan, 48);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CHANNELS }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "GP_GET"));
	chan[24] = chan[25] = 0, chan[8] = 64;
	len[0] = list_payload(a, 1, chan, 48);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CHANNELS }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "channel id out of range"));
	/* Out of order: CHANNELS then RM_TREE; a second SCHED. */
	chan[8] = 5;
	len[0] = list_payload(a, 1, chan, 48);
	len[1] = list_payload(c, 0, NULL, 0);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CHANNELS, MIG_F_RM_TREE }, pp, len, 2,
				    &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 3 (rm-tree) at byte 138: out of order"));
	len[0] = len[1] = 64;
	pp[0] = pp[1] = sch;
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_SCHED, MIG_F_SCHED }, pp, len, 2, &f),
			 -EBADMSG);
	assert_non_null(strstr(f.msg, "a second SCHED"));
	/* An extent after a state frame. */
	uint8_t ext[20] = { 0 };
	pp[1] = ext;
	len[1] = sizeof(ext);
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_SCHED, MIG_F_EXTENT }, pp, len, 2, &f),
			 -EBADMSG);
	assert_non_null(strstr(f.msg, "after the state frames"));
	/* An RM object whose runs run past the frame; a VRAM run outside the slice. */
	uint8_t obj[80 + 16] = { 0 };
	obj[0] = 1, obj[4] = 1, obj[8] = 2, obj[12] = 0x40, obj[72] = 2;
	pp[0] = a;
	len[0] = list_payload(a, 1, obj, sizeof(obj));
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_RM_TREE }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "runs past"));
	obj[72] = 1, obj[80 + 8] = 1, obj[80 + 3] = 0x10;	/* start 256 MiB, 1 page */
	len[0] = list_payload(a, 1, obj, sizeof(obj));
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_RM_TREE }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "outside the slice"));
	/* Runs that start inside the 1 MiB slice: one that ends past it, an unaligned one;
	 * one that ends exactly at its end is taken (the stream then ends without END). */
	memset(obj + 80, 0, 16);
	obj[80 + 1] = 0xf0, obj[80 + 2] = 0x0f, obj[80 + 8] = 2;	/* 1 MiB - 4 KiB, 2 pages */
	len[0] = list_payload(a, 1, obj, sizeof(obj));
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_RM_TREE }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "outside the slice"));
	obj[80 + 8] = 1, obj[80] = 8;					/* + 8 bytes */
	len[0] = list_payload(a, 1, obj, sizeof(obj));
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_RM_TREE }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "unaligned"));
	obj[80] = 0;
	len[0] = list_payload(a, 1, obj, sizeof(obj));
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_RM_TREE }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "ends after frame 2"));	/* the run was taken */
	/* An IOMMU mapping that is unaligned. */
	uint8_t map[32] = { 0 };
	map[1] = 0x10, map[8] = 1, map[24] = 3;
	len[0] = list_payload(a, 1, map, sizeof(map));
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_IOMMU }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (iommu)"));
}

/* CONTROL (1.2): pieces of the control area round-trip after the other state frames; a
 * 1.1 stream, a piece out of order or past the area, or one before a state frame it
 * follows is refused by name. */
static void test_control(void **state)
{
	static uint8_t page[4096], ring[MIG_CTRL_PIECE_MAX];
	uint8_t a[64], b2[64];
	const uint8_t *pp[2] = { a, b2 };
	uint32_t len[2];
	struct mbuf b = { 0 };
	struct mig_enc e;
	struct mig_dec d;
	struct mig_frame fr;
	struct cmn_fail f;
	unsigned int pieces = 0;
	int r;

	(void)state;
	for (size_t i = 0; i < sizeof(ring); i++)
		ring[i] = (uint8_t)(i * 13 + 1);
	memset(page, 0xa5, sizeof(page));
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, 1 << 20, 0, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_sched(&e, &sched, NULL), 0);
	assert_int_equal(mig_enc_control(&e, 8192, page, sizeof(page), NULL), 0);
	assert_int_equal(mig_enc_control(&e, 64 << 10, ring, sizeof(ring), NULL), 0);
	/* The encoder refuses a piece below the last, past the area, too long, or empty,
	 * and a state frame that comes before CONTROL in the order. */
	assert_int_equal(mig_enc_control(&e, 0, page, 16, NULL), -EINVAL);
	assert_int_equal(mig_enc_control(&e, MIG_CTRL_SIZE - 8, page, 16, NULL), -EINVAL);
	assert_int_equal(mig_enc_control(&e, 256 << 10, ring, MIG_CTRL_PIECE_MAX + 1, NULL),
			 -EINVAL);
	assert_int_equal(mig_enc_control(&e, 256 << 10, ring, 0, NULL), -EINVAL);
	assert_int_equal(mig_enc_doorbells(&e, NULL, 0, NULL), -EINVAL);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(mig_dec_init(&d, mbuf_read, &b, NULL), 0);
	while ((r = mig_dec_next(&d, &fr, NULL)) > 0) {
		if (fr.type == MIG_F_HELLO)
			assert_int_equal(fr.u.hello.minor, MIG_VERSION_MINOR);
		if (fr.type != MIG_F_CONTROL)
			continue;
		if (!pieces++) {
			assert_int_equal(fr.u.ctrl.off, 8192);
			assert_int_equal(fr.u.ctrl.len, sizeof(page));
			assert_memory_equal(fr.u.ctrl.data, page, sizeof(page));
		} else {
			assert_int_equal(fr.u.ctrl.off, 64 << 10);
			assert_int_equal(fr.u.ctrl.len, sizeof(ring));
			assert_memory_equal(fr.u.ctrl.data, ring, sizeof(ring));
		}
	}
	assert_int_equal(r, 0);
	assert_int_equal(pieces, 2);
	mig_dec_fini(&d);
	free(b.p);

	/* Hand-made frames: off 8192 with 16 bytes, then another piece. */
	memset(a, 0, sizeof(a));
	a[1] = 0x20;			/* offset 0x2000 */
	len[0] = 8 + 16;
	memset(b2, 0, sizeof(b2));
	len[1] = 8 + 16;
	/* A 1.1 stream does not carry it. */
	assert_int_equal(state_case(1, (uint16_t[]){ MIG_F_CONTROL }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (control) at byte 66: a version 1.1 stream"));
	/* A piece below the previous one's end. */
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_CONTROL, MIG_F_CONTROL }, pp, len, 2,
				    &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 3 (control) at byte 106: piece [0, +0x10) below"));
	/* Past the area. */
	b2[0] = 0xf8, b2[1] = 0xff, b2[2] = 0x07;	/* 0x7fff8 + 16 > 512 KiB */
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_CONTROL, MIG_F_CONTROL }, pp, len, 2,
				    &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "past the 0x80000-byte control area"));
	/* No data, or the reserved word set. */
	len[0] = 8;
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_CONTROL }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (control) at byte 66: 0 data bytes"));
	len[0] = 8 + 16;
	a[4] = 1;
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_CONTROL }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "reserved word"));
	/* A state frame that comes before it in the order, after it. */
	a[4] = 0;
	len[1] = list_payload(b2, 0, NULL, 0);
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_CONTROL, MIG_F_DOORBELLS }, pp, len, 2,
				    &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 3 (doorbells) at byte 106: out of order (after "
			       "the control"));
	/* A good piece alone decodes (the stream then lacks END). */
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_CONTROL }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "truncated"));
}

/* GUEST (1.3): the guest's announced ABI and flags round-trip as the last state frame; the
 * encoder and the decoder refuse no flags, a second one, one before a state frame it
 * follows, a stream before 1.3, a wrong length and a reserved word set, by name. */
static void test_guest(void **state)
{
	static uint8_t page[4096];
	uint8_t a[MIG_GUEST_LEN], b2[64];
	const uint8_t *pp[2] = { a, b2 };
	uint32_t len[2] = { MIG_GUEST_LEN, MIG_GUEST_LEN };
	struct mbuf b = { 0 };
	struct mig_enc e;
	struct mig_dec d;
	struct mig_frame fr;
	struct cmn_fail f;
	unsigned int seen = 0;
	int r;

	(void)state;
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, 1 << 20, 0, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_guest(&e, 0x20005, 0, NULL), -EINVAL);	/* no flags */
	assert_int_equal(mig_enc_control(&e, 0, page, sizeof(page), NULL), 0);
	assert_int_equal(mig_enc_guest(&e, 0x20005, 1, NULL), 0);
	assert_int_equal(mig_enc_guest(&e, 0x20005, 1, NULL), -EINVAL);	/* a second */
	assert_int_equal(mig_enc_control(&e, 8192, page, 16, NULL), -EINVAL);	/* after it */
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(mig_dec_init(&d, mbuf_read, &b, NULL), 0);
	while ((r = mig_dec_next(&d, &fr, NULL)) > 0) {
		if (fr.type != MIG_F_GUEST)
			continue;
		seen++;
		assert_int_equal(fr.u.guest.abi, 0x20005);
		assert_int_equal(fr.u.guest.flags, 1);
	}
	assert_int_equal(r, 0);
	assert_int_equal(seen, 1);
	mig_dec_fini(&d);
	free(b.p);

	/* Hand-made frames. */
	memset(a, 0, sizeof(a));
	a[0] = 5, a[2] = 2;		/* ABI 2.5 */
	a[4] = 1;			/* flags 1 */
	memcpy(b2, a, sizeof(a));
	/* A 1.2 stream does not carry it. */
	assert_int_equal(state_case(2, (uint16_t[]){ MIG_F_GUEST }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (guest) at byte 66: a version 1.2 stream"));
	/* A second one. */
	assert_int_equal(state_case(3, (uint16_t[]){ MIG_F_GUEST, MIG_F_GUEST }, pp, len, 2, &f),
			 -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 3 (guest) at byte 98: a second GUEST frame"));
	/* A state frame that comes before it in the order, after it. */
	len[1] = 8 + 16;
	memset(b2, 0, sizeof(b2));
	assert_int_equal(state_case(3, (uint16_t[]){ MIG_F_GUEST, MIG_F_CONTROL }, pp, len, 2, &f),
			 -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 3 (control) at byte 98: out of order (after the "
			       "guest"));
	/* No flags, a wrong length, the reserved word set. */
	a[4] = 0;
	assert_int_equal(state_case(3, (uint16_t[]){ MIG_F_GUEST }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (guest) at byte 66: no flags"));
	a[4] = 1;
	len[0] = 8;
	assert_int_equal(state_case(3, (uint16_t[]){ MIG_F_GUEST }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (guest) at byte 66: length 8 (expected 16)"));
	len[0] = MIG_GUEST_LEN;
	a[12] = 1;
	assert_int_equal(state_case(3, (uint16_t[]){ MIG_F_GUEST }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "reserved word"));
	/* A good one alone decodes (the stream then lacks END). */
	a[12] = 0;
	assert_int_equal(state_case(3, (uint16_t[]){ MIG_F_GUEST }, pp, len, 1, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "truncated"));
}

/* The encoder refuses what the decoder would. */
static void test_encoder_checks(void **state)
{
	struct mbuf b = { 0 };
	struct mig_enc e;
	uint8_t x[8] = { 0 };

	(void)state;
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 0, x, 8, NULL), -EINVAL);
	assert_int_equal(mig_enc_end(&e, NULL), -EINVAL);
	assert_int_equal(mig_enc_slice(&e, 4096, 0, def, 0, NULL), -EINVAL);
	assert_int_equal(mig_enc_slice(&e, 4096, 0, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_slice(&e, 4096, 0, def, strlen(def), NULL), -EINVAL);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 4090, x, 8, NULL), -EINVAL);
	assert_int_equal(mig_enc_extent(&e, MIG_R_DMA, 0, x, 8, NULL), -EINVAL);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 8, x, 8, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 0, x, 8, NULL), -EINVAL);
	assert_int_equal(mig_enc_sched(&e, &sched, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 100, x, 8, NULL), -EINVAL);
	assert_int_equal(mig_enc_channels(&e, chans, 2, NULL), 0);
	assert_int_equal(mig_enc_rm_tree(&e, objs, 4, NULL), -EINVAL);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), -EINVAL);
	free(b.p);
}

static void test_crc32c(void **state)
{
	(void)state;
	/* The standard check value of CRC-32C. */
	assert_int_equal(mig_crc32c(0, "123456789", 9), 0xe3069283u);
	assert_int_equal(mig_crc32c(mig_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

/* The bit-at-a-time definition, the reference both implementations must equal. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
	}
	return ~crc;
}

/* The tables and the crc32 instruction (its three-way blocks and their joins included)
 * give the reference's CRC at every alignment and for lengths around each block size. */
static void test_crc32c_paths(void **state)
{
	static const size_t lens[] = { 0, 1, 7, 8, 9, 255, 256, 767, 768, 769, 1000, 4096,
				       24575, 24576, 24577, 24576 + 768, 65536 + 13, 1 << 20 };
	const size_t max = (1 << 20) + 64;
	uint8_t *buf = malloc(max);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	bool hw = false;

	(void)state;
	assert_non_null(buf);
	for (size_t i = 0; i < max; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t align = 0; align < 16; align++) {
			uint32_t seed = (uint32_t)(li * 16 + align) * 0x01000193u, want, got;

			want = crc_bitwise(seed, buf + align, lens[li]);
			assert_int_equal(mig_crc32c_sw(seed, buf + align, lens[li]), want);
			assert_int_equal(mig_crc32c(seed, buf + align, lens[li]), want);
			hw = mig_crc32c_hw(seed, buf + align, lens[li], &got);
			if (hw)
				assert_int_equal(got, want);
		}
	/* Random lengths and offsets, the hardware path against the tables. */
	for (int i = 0; i < 200; i++) {
		size_t off, len;
		uint32_t got;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		off = x % 64;
		len = (size_t)(x >> 8) % (max - 64);
		if (mig_crc32c_hw((uint32_t)i, buf + off, len, &got))
			assert_int_equal(got, mig_crc32c_sw((uint32_t)i, buf + off, len));
	}
	print_message("crc32c: %s%s\n", mig_crc32c_impl(), hw ? "" : " (no crc32 instruction: "
		      "the hardware path is not checked here)");
	free(buf);
}

static unsigned int writev_calls;

static int mbuf_writev(void *ctx, const struct iovec *iov, int n)
{
	writev_calls++;
	for (int i = 0; i < n; i++) {
		assert_true(iov[i].iov_len > 0);
		mbuf_write(ctx, iov[i].iov_base, iov[i].iov_len);
	}
	return 0;
}

/* An encoder given a writev hands each frame after HELLO over in one call, and the bytes
 * are the same as through write. */
static void test_writev(void **state)
{
	struct mbuf a = { 0 }, b = { 0 };
	uint8_t *vram = malloc(VRAM_LEN), dma[100];
	struct mig_enc e;
	unsigned int n;

	(void)state;
	n = make_stream(&a, vram, VRAM_LEN);
	memset(dma, 0x5a, sizeof(dma));
	writev_calls = 0;
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	e.writev = mbuf_writev;
	assert_int_equal(mig_enc_slice(&e, VRAM_LEN, 1 << 20, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 0, vram, 4096, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 8192, vram + 8192, VRAM_LEN - 8192, NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_DMA, 4096, dma, sizeof(dma), NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(e.seq, n);
	assert_int_equal(writev_calls, n - 1);
	assert_int_equal(b.len, a.len);
	assert_memory_equal(b.p, a.p, a.len);
	free(a.p);
	free(b.p);
	free(vram);
}

/* Joining two CRCs equals the CRC of the joined bytes, for the lengths it has tables for
 * and the others. */
static void test_crc32c_combine(void **state)
{
	static const size_t lens[] = { 0, 1, 7, 1023, 1024, 3000, 4096, 5000, 8192 + 1024 + 5,
				       1 << 20 };
	uint8_t *buf = malloc((1 << 20) + 64);

	(void)state;
	for (size_t i = 0; i < (1 << 20) + 64; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint32_t a = mig_crc32c(0, buf, 37), b = mig_crc32c(0, buf + 37, lens[i]);

		assert_int_equal(mig_crc32c_combine(a, b, lens[i]), mig_crc32c(0, buf, 37 + lens[i]));
	}
	free(buf);
}

/* An extent whose data CRC the caller gives makes the same bytes as one the encoder
 * checksums itself; a wrong CRC makes a frame the decoder refuses as corrupted; the
 * encoder refuses an empty one or one over a frame. */
static void test_extent_crc(void **state)
{
	struct mbuf a = { 0 }, b = { 0 };
	uint8_t *vram = malloc(VRAM_LEN);
	struct mig_enc e;
	struct cmn_fail f = { 0 };
	unsigned int frames;

	(void)state;
	for (size_t i = 0; i < VRAM_LEN; i++)
		vram[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(mig_enc_init(&e, mbuf_write, &a, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, VRAM_LEN, 0, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent(&e, MIG_R_VRAM, 4096, vram + 4096, 12288, NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, VRAM_LEN, 0, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent_crc(&e, MIG_R_VRAM, 4096, vram + 4096, 12288,
					    mig_crc32c(0, vram + 4096, 12288), NULL), 0);
	assert_int_equal(mig_enc_extent_crc(&e, MIG_R_VRAM, 1 << 20, vram, 0, 0, NULL), -EINVAL);
	assert_int_equal(mig_enc_extent_crc(&e, MIG_R_VRAM, 1 << 20, vram, MIG_EXTENT_MAX + 1, 0,
					    NULL), -EINVAL);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(b.len, a.len);
	assert_memory_equal(b.p, a.p, a.len);
	free(b.p);
	b = (struct mbuf){ 0 };
	assert_int_equal(mig_enc_init(&e, mbuf_write, &b, NULL), 0);
	assert_int_equal(mig_enc_slice(&e, VRAM_LEN, 0, def, strlen(def), NULL), 0);
	assert_int_equal(mig_enc_extent_crc(&e, MIG_R_VRAM, 4096, vram + 4096, 12288,
					    mig_crc32c(0, vram + 4096, 12288) ^ 1, NULL), 0);
	assert_int_equal(mig_enc_end(&e, NULL), 0);
	assert_int_equal(decode_all(&b, &frames, NULL, 0, &f), -EBADMSG);
	assert_non_null(strstr(f.msg, "frame 2 (extent)"));
	assert_non_null(strstr(f.msg, "checksum mismatch"));
	free(a.p);
	free(b.p);
	free(vram);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c),
		cmocka_unit_test(test_crc32c_paths),
		cmocka_unit_test(test_crc32c_combine),
		cmocka_unit_test(test_extent_crc),
		cmocka_unit_test(test_writev),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_swap_buf),
		cmocka_unit_test(test_truncation),
		cmocka_unit_test(test_flipped_byte),
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_bad_fields),
		cmocka_unit_test(test_encoder_checks),
		cmocka_unit_test(test_state_round_trip),
		cmocka_unit_test(test_state_damage),
		cmocka_unit_test(test_state_bad),
		cmocka_unit_test(test_control),
		cmocka_unit_test(test_guest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
