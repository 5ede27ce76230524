/* SPDX-License-Identifier: MIT */
/* mig - a slice's migration stream and its migration state machine.
 *
 * The stream (doc/migration.md) is what one vgpud sends another, or writes to a file for
 * `vgpuctl save`: a sequence of frames, each with a 16-byte header (type, flags, payload
 * length, sequence number, CRC32C over header and payload), starting with HELLO (magic and
 * version) and SLICE (the definition and region sizes), then EXTENT frames (populated
 * ranges of VRAM and DMA memory only, ascending and disjoint per region), then (version
 * 1.1) the state of a slice with a guest (SCHED, RM_TREE, IOMMU, CHANNELS, DOORBELLS:
 * records of fixed layout, a type may span several frames), (version 1.2) pieces of the
 * VF's control area (CONTROL: a live migration's final pass), (version 1.3) what the
 * guest announced (GUEST: its ABI and flags), and ending with END (totals). The decoder
 * is written for untrusted input: every length, count, offset and sequence number is
 * checked, and a failure names the frame by index and type.
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
#define MIG_VERSION_MINOR	3	/* a reader accepts any minor of its major; 1.1 adds
					 * the state frames 16..20, 1.2 CONTROL (21), 1.3
					 * GUEST (22) */
#define MIG_MAGIC		"VGPU-MIG"	/* 8 bytes, first in HELLO's payload */
#define MIG_FRAME_HDR		16u
#define MIG_EXTENT_MAX		(1u << 20)	/* data bytes in one EXTENT frame */
#define MIG_DEF_MAX		(64u << 10)	/* definition bytes in SLICE */
#define MIG_PAYLOAD_MAX		(MIG_EXTENT_MAX + 16u)
#define MIG_DEC_BUF		(MIG_FRAME_HDR + MIG_PAYLOAD_MAX)	/* a decoder's frame buffer */

/* Frame types. 16..20 (version 1.1) carry the state of a slice with a guest; a 1.0 reader
 * refuses them by name, and this reader refuses them in a stream that says 1.0. */
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
	MIG_F_CONTROL = 21,
	MIG_F_GUEST = 22,
};

/* The state frames' order in a stream (their types are not in order): the RM tree first,
 * which re-makes its own IOMMU mappings, so IOMMU checks them and adds the rest, and the
 * channels' runtime and tokens are loaded into channels that exist. */
#define MIG_STATE_ORDER	{ MIG_F_SCHED, MIG_F_RM_TREE, MIG_F_IOMMU, MIG_F_CHANNELS, MIG_F_DOORBELLS, \
			  MIG_F_CONTROL, MIG_F_GUEST }

/* CONTROL (version 1.2): u32 offset in the VF's control area, u32 0, then 1 B .. 128 KiB
 * of it; pieces ascend and do not overlap, inside the area's MIG_CTRL_SIZE bytes. After
 * the guest's state: its mailbox as the source left it. */
#define MIG_CTRL_SIZE		(512u << 10)
#define MIG_CTRL_PIECE_MAX	(128u << 10)

/* GUEST (version 1.3): u32 the ABI version the guest announced in GET_INFO, u32 the
 * VF_INFO_REQ_* flags it asked for (not 0: a guest that asked for nothing sends no GUEST
 * frame, so older readers still load its stream), u64 0. At most one, after CONTROL: the
 * destination holds the announcement for the guest, which does not announce again. */
#define MIG_GUEST_LEN		16u

/* ---- state records (version 1.1) --------------------------------------------------------
 * Each list frame's payload is u32 count, u32 0, then count records. */

#define MIG_MAX_CHANS		64	/* channel ids 0..63 per function */
#define MIG_MAX_RUNLISTS	4

/* CHANNELS: one channel's runtime (48 bytes on the wire). */
#define MIG_CHAN_ENABLED	(1u << 0)	/* enabled and on its runlist */
#define MIG_CHAN_REPLAYABLE	(1u << 1)
struct mig_chan_rec {
	uint32_t h_client, h_chan;	/* the guest's RM handles of the channel */
	uint32_t chid, runlist;		/* < MIG_MAX_CHANS, < MIG_MAX_RUNLISTS */
	uint32_t entries;		/* GPFIFO entries, a power of two 2..65536 */
	uint32_t flags;			/* MIG_CHAN_* */
	uint32_t gp_get, gp_put;	/* < entries */
	uint32_t state;			/* enum gpu_chan_state's values, 1..4 */
	uint32_t error;			/* enum vgpu_chan_error, < 256 */
	uint64_t methods;		/* methods executed */
};

/* DOORBELLS: the work-submit token a channel's doorbell takes (16 bytes). */
struct mig_db_rec {
	uint32_t h_client, h_chan, chid, token;
};

/* IOMMU: one mapping of the slice's domain (32 bytes): 4 KiB aligned, ascending, disjoint. */
struct mig_iommu_rec {
	uint64_t iova, length, offset;	/* offset in the slice's DMA memory */
	uint32_t prot;			/* 1 read, 2 write, 3 both */
};

/* SCHED: the function's scheduler accounting (64 bytes; at most one frame). */
struct mig_sched_rec {
	uint64_t run_ns, preempt_ns, idle_ns, slices, preempt_timeouts, stall_ns, preempted;
};

/* RM_TREE: one object of the guest's RM tree, in creation order (parents, VA spaces and
 * dup sources before what needs them). 80 bytes, then nr_runs runs of 16 bytes. */
#define MIG_RM_OBJ_FIXED	80u
struct mig_rm_obj {
	uint32_t h_client, h_parent, handle, h_class;	/* a client: h_parent 0, handle ==
							 * h_client, class 0 */
	uint32_t share_target, share_access;
	uint32_t dep_client, dep_handle;	/* channel: its VA space; dup: the source */
	uint64_t a, b, c;		/* class fields (doc/migration.md) */
	uint32_t x, y, z, w;
	uint32_t nr_runs;		/* VRAM pages as (VF-physical start, page count) runs */
	const uint64_t *runs;		/* encoder: 2 * nr_runs host-order words */
	const uint8_t *runs_wire;	/* decoder: the runs as they lie in the frame */
};

/* Run @i of @o: its first VF-physical address and page count. */
void mig_rm_run(const struct mig_rm_obj *o, uint32_t i, uint64_t *start, uint64_t *count);

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
/* CRC32C of A||B from @crc_a (of A), @crc_b (of B) and B's length: a few table look-ups
 * per 4 KiB of B (1 KiB and 4 KiB are the cheap cases), without reading B. */
uint32_t mig_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

/* ---- encoder ----------------------------------------------------------------------------- */

/* Write all @len bytes at @p; 0 or -errno. */
typedef int (*mig_write_fn)(void *ctx, const void *p, size_t len);
/* Write all of @n pieces (a frame's header, fixed part and data) in order; 0 or -errno. */
struct iovec;
typedef int (*mig_writev_fn)(void *ctx, const struct iovec *iov, int n);

/* An encoder's totals, which END carries. */
struct mig_totals {
	uint64_t frames;			/* frames before END */
	uint64_t extents;			/* EXTENT frames */
	uint64_t bytes[MIG_NR_REGIONS];		/* data bytes per region */
};

struct mig_enc {
	mig_write_fn write;
	mig_writev_fn writev;			/* if set, a frame goes in one call of it */
	void *ctx;
	uint32_t seq;
	bool slice_sent, ended;
	uint64_t size[MIG_NR_REGIONS];
	uint64_t next[MIG_NR_REGIONS];		/* extents ascend: the lowest next offset */
	int state_rank;				/* rank of the last state frame (-1: none) */
	uint32_t ctrl_next;			/* CONTROL pieces ascend: the lowest next offset */
	struct mig_totals tot;
};

/* Start an encoder writing through @write(@ctx, ...); writes HELLO. The caller may set
 * e->writev afterwards (a socket: one system call per frame instead of three). */
int mig_enc_init(struct mig_enc *e, mig_write_fn write, void *ctx, struct cmn_fail *f);
/* SLICE: the region sizes and the definition (@def_len bytes of JSON text). Once. */
int mig_enc_slice(struct mig_enc *e, uint64_t vram_bytes, uint64_t dma_bytes, const char *def,
		  size_t def_len, struct cmn_fail *f);
/* @len bytes of @region at @off, split into EXTENT frames; above the previous extent. */
int mig_enc_extent(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		   size_t len, struct cmn_fail *f);
/* The same for one frame's data (@len at most MIG_EXTENT_MAX) whose CRC32C the caller
 * computed already, as it read the data (@data_crc = mig_crc32c(0, @data, @len)): the
 * frame's CRC is joined from it instead of reading the data again. A wrong @data_crc makes
 * a frame the decoder refuses as corrupted. */
int mig_enc_extent_crc(struct mig_enc *e, enum mig_region region, uint64_t off, const void *data,
		       size_t len, uint32_t data_crc, struct cmn_fail *f);
/* State frames (after the last extent, in MIG_STATE_ORDER, each type once, split into
 * frames as needed): @n records of each. */
int mig_enc_sched(struct mig_enc *e, const struct mig_sched_rec *r, struct cmn_fail *f);
int mig_enc_iommu(struct mig_enc *e, const struct mig_iommu_rec *r, size_t n,
		  struct cmn_fail *f);
int mig_enc_rm_tree(struct mig_enc *e, const struct mig_rm_obj *o, size_t n,
		    struct cmn_fail *f);
int mig_enc_channels(struct mig_enc *e, const struct mig_chan_rec *r, size_t n,
		     struct cmn_fail *f);
int mig_enc_doorbells(struct mig_enc *e, const struct mig_db_rec *r, size_t n,
		      struct cmn_fail *f);
/* CONTROL: @len bytes (1..MIG_CTRL_PIECE_MAX) of the control area at @off, above the
 * previous piece; after the other state frames. */
int mig_enc_control(struct mig_enc *e, uint32_t off, const void *data, size_t len,
		    struct cmn_fail *f);
/* GUEST: what the guest announced, ABI @abi and flags @flags (not 0); after the other
 * state frames, once. */
int mig_enc_guest(struct mig_enc *e, uint32_t abi, uint32_t flags, struct cmn_fail *f);
/* END with the totals; nothing may follow. */
int mig_enc_end(struct mig_enc *e, struct cmn_fail *f);

/* ---- decoder ----------------------------------------------------------------------------- */

/* Read up to @len bytes into @p: the count (0 at the end of the stream) or -errno. */
typedef ssize_t (*mig_read_fn)(void *ctx, void *p, size_t len);

/* One decoded frame; the pointers are into the decoder's buffer, valid until the next call.
 * SLICE's definition (def_len bytes) is followed by a NUL. */
struct mig_frame {
	uint32_t type;
	uint32_t seq;
	union {
		struct { uint16_t major, minor; } hello;
		struct { uint64_t vram_bytes, dma_bytes; const char *def; size_t def_len; } slice;
		struct { uint32_t region; uint64_t off; const uint8_t *data; size_t len; } extent;
		struct mig_totals end;
		struct { uint32_t count; const uint8_t *p; size_t len; } list;	/* 16..19 */
		struct mig_sched_rec sched;
		struct { uint32_t off; const uint8_t *data; size_t len; } ctrl;	/* CONTROL */
		struct { uint32_t abi, flags; } guest;				/* GUEST */
	} u;
};

/* Record @i (< u.list.count) of a checked CHANNELS, DOORBELLS or IOMMU frame. */
void mig_chan_rec_at(const struct mig_frame *fr, uint32_t i, struct mig_chan_rec *out);
void mig_db_rec_at(const struct mig_frame *fr, uint32_t i, struct mig_db_rec *out);
void mig_iommu_rec_at(const struct mig_frame *fr, uint32_t i, struct mig_iommu_rec *out);
/* The next object of a checked RM_TREE frame from byte *@off of its records (0 first):
 * 1 with @out filled, 0 after the last. */
int mig_rm_obj_next(const struct mig_frame *fr, size_t *off, struct mig_rm_obj *out);

struct mig_dec {
	mig_read_fn read;
	void *ctx;
	uint8_t *buf;				/* MIG_DEC_BUF bytes */
	uint64_t pos;				/* stream bytes consumed */
	uint64_t frame_at;			/* the byte where the frame being read starts */
	uint32_t seq;
	bool slice_seen, ended, failed;
	uint64_t size[MIG_NR_REGIONS];
	uint64_t next[MIG_NR_REGIONS];
	uint16_t minor;				/* HELLO's */
	int state_rank;				/* rank of the last state frame (-1: none) */
	uint64_t chans_seen;			/* chids of CHANNELS records so far */
	uint64_t iova_next;			/* IOMMU records ascend */
	uint32_t ctrl_next;			/* CONTROL pieces ascend */
	struct mig_totals tot;
};

/* Start a decoder reading through @read(@ctx, ...). 0 or -ENOMEM. */
int mig_dec_init(struct mig_dec *d, mig_read_fn read, void *ctx, struct cmn_fail *f);
/* The next frame: 1 with @out filled (END included, after its totals were checked against
 * the frames seen), 0 on the call after END once nothing follows it, or -EBADMSG (corrupt, truncated, out of order, out of range: the message names the
 * frame's index and type and the byte offset), -EPROTO (another major version, a type
 * this version does not carry), or the read's errno. After an error every call fails. */
int mig_dec_next(struct mig_dec *d, struct mig_frame *out, struct cmn_fail *f);
/* Hand the decoder @buf (MIG_DEC_BUF bytes from malloc()) to read the next frames into and
 * take back the buffer that holds the frame mig_dec_next() returned last: that frame's
 * pointers then stay valid until the caller frees it, so a loader can write one frame
 * while the next is read and checked. */
uint8_t *mig_dec_swap_buf(struct mig_dec *d, uint8_t *buf);
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
