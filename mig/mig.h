/* SPDX-License-Identifier: MIT */
/* mig - a slice's migration stream and its migration state machine.
 *
 * The stream (doc/migration.md) is what one vgpud sends another, or writes to a file for
 * `vgpuctl save`: a sequence of frames, each with a 16-byte header (type, flags, payload
 * length, sequence number, CRC32C over header and payload), starting with HELLO (magic and
 * version) and SLICE (the definition and region sizes), then EXTENT frames (populated
 * ranges of VRAM and DMA memory only, ascending and disjoint per region), and ending with
 * END (totals). The decoder is written for untrusted input: every length, count, offset
 * and sequence number is checked, and a failure names the frame by index and type.
 *
 * The state machine is vfio migration v2's (RUNNING, PRE_COPY, STOP_COPY, STOPPED (vfio's
 * STOP), RESUMING, ERROR) as a table of legal arcs, with the path between any two states.
 *
 * Calls return 0 (or a count) or a negative errno with a message in the struct cmn_fail
 * they take (which may be NULL). Not thread-safe per object. */
#ifndef VGPU_MIG_H
#define VGPU_MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/fail.h"

#define MIG_VERSION_MAJOR	1	/* a reader refuses another major */
#define MIG_VERSION_MINOR	0	/* a reader accepts any minor of its major */
#define MIG_MAGIC		"VGPU-MIG"	/* 8 bytes, first in HELLO's payload */
#define MIG_FRAME_HDR		16u
#define MIG_EXTENT_MAX		(1u << 20)	/* data bytes in one EXTENT frame */
#define MIG_DEF_MAX		(64u << 10)	/* definition bytes in SLICE */
#define MIG_PAYLOAD_MAX		(MIG_EXTENT_MAX + 16u)

/* Frame types. Types 16.. are reserved for state a stopped slice does not have yet
 * (doc/migration.md): this version's decoder refuses them by name. */
enum mig_frame_type {
	MIG_F_HELLO = 1,
	MIG_F_SLICE = 2,
	MIG_F_EXTENT = 3,
	MIG_F_END = 4,
	MIG_F_CHANNELS = 16,
	MIG_F_RM_TREE = 17,
	MIG_F_IOMMU = 18,
	MIG_F_DOORBELLS = 19,
	MIG_F_SCHED = 20,
};

/* The regions an EXTENT frame fills. */
enum mig_region {
	MIG_R_VRAM = 0,
	MIG_R_DMA = 1,
	MIG_NR_REGIONS
};

/* Name of frame type @t ("extent"; "unknown" for others). */
const char *mig_frame_name(uint32_t t);
/* Name of region @r ("vram", "dma"). */
const char *mig_region_name(uint32_t r);
/* CRC32C (Castagnoli) of @len bytes at @p, continuing from @crc (0 to start). */
uint32_t mig_crc32c(uint32_t crc, const void *p, size_t len);

/* ---- encoder ----------------------------------------------------------------------------- */

/* Write all @len bytes at @p; 0 or -errno. */
typedef int (*mig_write_fn)(void *ctx, const void *p, size_t len);

/* An encoder's totals, which END carries. */
struct mig_totals {
	uint64_t frames;			/* frames before END */
	uint64_t extents;			/* EXTENT frames */
	uint64_t bytes[MIG_NR_REGIONS];		/* data bytes per region */
};

struct mig_enc {
	mig_write_fn write;
	void *ctx;
	uint32_t seq;
	bool slice_sent, ended;
	uint64_t size[MIG_NR_REGIONS];
	uint64_t next[MIG_NR_REGIONS];		/* extents ascend: the lowest next offset */
	struct mig_totals tot;
};

/* Start an encoder writing through @write(@ctx, ...); writes HELLO. */
int mig_enc_init(struct mig_enc *e, mig_write_fn write, void *ctx, struct cmn_fail *f);
/* SLICE: the region sizes and the definition (@def_len bytes of JSON text). Once. */
int mig_enc_slice(struct mig_enc *e, uint64_t vram_bytes, uint64_t dma_bytes, const char *def,
		  size_t def_len, struct cmn_fail *f);
/* @len bytes of @region at @off, split into EXTENT frames; above the previous extent. */
int mig_enc_extent(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		   size_t len, struct cmn_fail *f);
/* END with the totals; nothing may follow. */
int mig_enc_end(struct mig_enc *e, struct cmn_fail *f);

/* ---- decoder ----------------------------------------------------------------------------- */

/* Read up to @len bytes into @p: the count (0 at the end of the stream) or -errno. */
typedef ssize_t (*mig_read_fn)(void *ctx, void *p, size_t len);

/* One decoded frame; the pointers are into the decoder's buffer, valid until the next call. */
struct mig_frame {
	uint32_t type;
	uint32_t seq;
	union {
		struct { uint16_t major, minor; } hello;
		struct { uint64_t vram_bytes, dma_bytes; const char *def; size_t def_len; } slice;
		struct { uint32_t region; uint64_t off; const uint8_t *data; size_t len; } extent;
		struct mig_totals end;
	} u;
};

struct mig_dec {
	mig_read_fn read;
	void *ctx;
	uint8_t *buf;				/* MIG_FRAME_HDR + MIG_PAYLOAD_MAX */
	uint64_t pos;				/* stream bytes consumed */
	uint32_t seq;
	bool slice_seen, ended, failed;
	uint64_t size[MIG_NR_REGIONS];
	uint64_t next[MIG_NR_REGIONS];
	struct mig_totals tot;
};

/* Start a decoder reading through @read(@ctx, ...). 0 or -ENOMEM. */
int mig_dec_init(struct mig_dec *d, mig_read_fn read, void *ctx, struct cmn_fail *f);
/* The next frame: 1 with @out filled (END included, after its totals were checked against
 * the frames seen), 0 on the call after END once nothing follows it, or -EBADMSG (corrupt, truncated, out of order, out of range: the message names the
 * frame's index and type and the byte offset), -EPROTO (another major version, a type
 * this version does not carry), or the read's errno. After an error every call fails. */
int mig_dec_next(struct mig_dec *d, struct mig_frame *out, struct cmn_fail *f);
/* Free the decoder's buffer. */
void mig_dec_fini(struct mig_dec *d);

/* ---- state machine (vfio migration v2) ----------------------------------------------------- */

enum mig_state {
	MIG_S_RUNNING,
	MIG_S_PRE_COPY,		/* running, the stream is sending what it can */
	MIG_S_STOP_COPY,	/* stopped, the stream sends the rest */
	MIG_S_STOPPED,		/* stopped, nothing moves */
	MIG_S_RESUMING,		/* destination: the stream is being loaded */
	MIG_S_ERROR,		/* a failed arc: only a reset leaves it */
	MIG_NR_STATES
};

/* Name of @s ("running", "pre_copy", ...). */
const char *mig_state_name(enum mig_state s);
/* Parse a name; -EINVAL if unknown. */
int mig_state_parse(const char *name, enum mig_state *out);
/* Whether @from -> @to is one legal arc. */
bool mig_state_arc_ok(enum mig_state from, enum mig_state to);
/* The next state on the shortest legal path from @from to @to (@to itself for one arc,
 * @from when equal), or -EINVAL with the reason when no path exists. */
int mig_state_next_hop(enum mig_state from, enum mig_state to, struct cmn_fail *f);

/* One slice's migration state and the arcs it took. */
struct mig_sm {
	enum mig_state state;
	uint64_t arcs;			/* arcs taken (a test's event count) */
};

/* Start in @s (RUNNING on a source, RESUMING on a destination). */
void mig_sm_init(struct mig_sm *m, enum mig_state s);
/* Move along the legal path to @to, one arc at a time; -EINVAL naming both states if there
 * is none (the state is unchanged). */
int mig_sm_set(struct mig_sm *m, enum mig_state to, struct cmn_fail *f);
/* An arc's work failed: the state becomes ERROR. */
void mig_sm_fail(struct mig_sm *m);
/* A reset (FLR): back to RUNNING from any state, ERROR included. */
void mig_sm_reset(struct mig_sm *m);

#endif
