/* SPDX-License-Identifier: MIT */
/* pf_manager internals: the daemon state shared by the module's files. */
#ifndef VGPU_PF_INTERNAL_H
#define VGPU_PF_INTERNAL_H

#include <stdbool.h>
#include <poll.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/fail.h"
#include "common/ring.h"
#include "ctlclient/ctlclient.h"
#include "mig/mig.h"
#include "pf_manager/pf_manager.h"
struct iommu_domain;
struct iommu_memobj;
#include <vgpu/vf_bar.h>

struct gpu;
struct pma;
struct rm;
struct pf_rm_glue;

#define PF_MAX_SLICES		1024
#define PF_MAX_TYPES		16
#define PF_MAX_CLIENTS		32
#define PF_VRAM_ALIGN		(2ull << 20)
#define PF_MIN_TYPE_VRAM	(64ull << 20)
#define PF_RESET_BATCH		64	/* child allocations freed per batch on reset */

/* A failure as the control socket reports it: cmn_fail's errno and message naming the
 * object, and optional structured detail. Every pf_* call taking one gets a real one (never
 * NULL), so cmn_fail(&e->f, ...) is always safe. */
struct pf_err {
	struct cmn_fail f;
	json_object *data;		/* owned; may be NULL */
};

/* What a slice gets (or asked for): bytes, counts, us, priority. */
struct pf_quota {
	uint64_t vram;
	uint32_t channels;
	uint32_t doorbells;
	uint32_t exec_quantum_us;	/* best-effort slice; 0 = the device default */
	uint32_t preempt_timeout_us;
	enum pf_priority priority;
	uint32_t rm_clients;		/* RM clients the VF's guest may hold at once */
	uint32_t rm_objects;		/* RM objects of all those clients together */
};

/* Ranges of the scheduling quotas (0 = the device default). */
#define PF_EXEC_QUANTUM_US_MAX		100000000u	/* 100 s */
#define PF_PREEMPT_TIMEOUT_US_MAX	10000000u	/* 10 s */

/* A slice length in whole milliseconds, rounded up (what an ms field reports). */
static inline uint32_t pf_quantum_ms(uint32_t us)
{
	return (uint32_t)(((uint64_t)us + 999) / 1000);
}

/* Which quota fields a slice sets itself instead of taking them from its type. */
enum pf_quota_bits {
	PF_Q_VRAM = 1u << 0, PF_Q_CHANNELS = 1u << 1, PF_Q_DOORBELLS = 1u << 2,
	PF_Q_EXEC = 1u << 3, PF_Q_PREEMPT = 1u << 4, PF_Q_PRIO = 1u << 5,
	PF_Q_RM_CLIENTS = 1u << 6, PF_Q_RM_OBJECTS = 1u << 7,
};

/* A slice's RM limits: what a type derives (clients fixed, objects by VRAM) and the range
 * a slice may set itself. */
#define PF_RM_CLIENTS_DEFAULT	64u
#define PF_RM_CLIENTS_MAX	1023u		/* the RM's client handles per function */
#define PF_RM_OBJECTS_PER_GIB	4096u
#define PF_RM_OBJECTS_MIN	4096u
#define PF_RM_OBJECTS_MAX	(1u << 20)

/* A slice type (profile). vram 0 marks the "auto" type: the fair share at start. */
struct pf_type {
	char name[PF_NAME_MAX];
	struct pf_quota q;
	unsigned int max_instances;
};

struct pf_endpoint;
struct pf_svc;
struct pf_client;

/* A reset announced to its guest (ABI 2.5, vgpu/vf_bar.h): it runs when the guest
 * acknowledges seq, at deadline_ns, or when the guest goes, whichever comes first. */
struct pf_reset_wait {
	uint32_t seq;			/* the announced number; 0: no reset waits */
	uint32_t evict_ms;		/* what the guest was given */
	uint64_t announced_ns, deadline_ns;
	struct pf_client *client;	/* whose reset-vf gets the reply then; NULL: gone */
	json_object *id;		/* that request's id (owned), or NULL */
};

#define PF_MIGRATED_TO_MAX	128

/* A declared slice and, while it runs, its VF. */
struct pf_slice {
	char uuid[PF_UUID_STR];
	uint8_t uuid_bytes[16];
	char type[PF_NAME_MAX];
	bool autostart;
	struct pf_quota custom;		/* fields named in custom_bits */
	unsigned int custom_bits;	/* enum pf_quota_bits */
	char owner_vm[PF_UUID_STR];	/* "" = no owner token */
	uint64_t owner_gen;
	long owner_uid;			/* may attach besides root; -1 = root only */
	bool transient;			/* no definition file: the journal is its record, stop removes it */
	char migrated_to[PF_MIGRATED_TO_MAX];	/* a live migration's hand-over record: the
					 * destination may run it (migrated out, unconfirmed), so
					 * it is not run here until reclaimed; "" = none */
	/* running state (vf != 0) */
	unsigned int vf;
	struct pf_quota prov;		/* as provisioned (aligned); set with pf_svc_set_prov()
					 * while a service thread runs */
	uint64_t base;			/* device VRAM offset */
	struct pma *child;		/* allocations inside the partition */
	int bar_fd;
	uint8_t *bar;
	int bar_guard;			/* the control area's mapguard slot (while bar is set) */
	int dma_guard;			/* DMA memory's mapguard slot (while dma_mo is set) */
	bool bar_broken;		/* a holder shrank the BAR object: the slice is stopped */
	bool vram_reserved;		/* its BAR object's VRAM, DMA memory and control area are
					 * allocated in /dev/shm ([pf] vram_prealloc) */
	/* why a slice of a vram_prealloc daemon runs unreserved (a reset's scrub gave the
	 * pages back and they could not be taken again); "" otherwise */
	char reserve_why[192];
	char stopped_why[288];		/* why the start of this vgpud brought it back stopped
					 * (its VRAM object was not adoptable); "" once started */
	uint64_t bar_size;
	uint64_t dma_size;		/* DMA memory, just below the control area */
	uint64_t dma_iova;		/* where the device sees it (VF's IOMMU domain); 0: nowhere */
	uint32_t nr_runlists;		/* the device's runlists (= engines) */
	int kick_fd;			/* the device's kick eventfd of the VF (not ours) */
	int intr_fd;			/* the device's interrupt eventfd of the VF (not ours) */
	uint64_t intrs, faults;		/* interrupts and fault events forwarded */
	uint64_t chan_errors;		/* channel-error events posted */
	uint64_t chan_err_seen;		/* channels in error already posted (bit = chid) */
	struct iommu_domain *dma_domain;	/* the VF's IOMMU domain (requester id = VF) */
	struct iommu_memobj *dma_mo;	/* BAR2's DMA memory, mapped there at dma_iova */
	struct vf_bar_header *hdr;
	struct cmn_ring req, rsp, evt;	/* host views of the mailbox rings */
	bool mbox_broken;		/* the guest corrupted its request ring: until reset */
	bool mbox_held;			/* incoming migration: the VMM may be writing the guest's
					 * rings; not served until the commit adopts them */
	struct pf_endpoint *ep;
	struct pf_svc *svc;		/* the VF's service thread (service.c), with the endpoint */
	uint64_t started_ns;
	bool reset_pending;		/* a reset committed to the journal, not yet done */
	struct pf_reset_wait rst;	/* an announced reset waiting for its guest (reset.c) */
	uint32_t reset_seq;		/* the last reset number announced (never 0 once used) */
	struct mig_sm mig;		/* migration state (migrate.c); RUNNING while it runs */
	uint32_t mig_guest_abi;		/* the ABI its guest announced on the source (a SLICE
					 * frame's guest_abi): the next guest to attach through
					 * vf<N>.master.sock, which moved and does not announce
					 * again, has announced it (endpoint.c), 0: none */
	uint32_t mig_guest_flags;	/* the VF_INFO_REQ_* flags it asked for there (a GUEST
					 * frame), taken with mig_guest_abi */
	bool def_pending;		/* its definition file is behind the journal (a restore
					 * before its file, a file write that failed after a
					 * commit): the journal marks it "restored", a stop
					 * writes the file first */
	bool incoming;			/* migrating in, not committed: the source owns it,
					 * no journal names it (pf_mig_commit() clears it) */
	/* counters (the mailbox ones copied from the service thread by pf_svc_sync()) */
	uint64_t rpc_ok, rpc_err, mbox_kicks, resets;
};

/* Whether @s is held: its hand-over record set while it keeps its VF and VRAM (a
 * migration that ended unconfirmed, doc/migration.md). */
static inline bool pf_slice_held(const struct pf_slice *s)
{
	return s->vf && s->migrated_to[0];
}

/* A control-socket connection. */
struct pf_client {
	int fd;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool admin;			/* root or in the admin group */
	bool negotiated;		/* sent qmp_capabilities */
	uint64_t accepted_ns;		/* cmn_now_ns() at accept: the negotiation deadline's start */
	bool late_input;		/* past the deadline with input unread: read once more */
	bool skipping;			/* discarding the rest of an oversized line */
	bool broken;			/* output overflowed: dropped at the next chance */
	bool has_fd_in;			/* a descriptor came with the input (SCM_RIGHTS) */
	int fd_in;			/* ... for the next request (save-slice, restore-slice) */
	char *in;			/* partial input line */
	size_t in_len;
	char *out;			/* unsent output */
	size_t out_len, out_cap;
};

struct pf_daemon {
	struct pf_config cfg;
	char shm_prefix[64];		/* per-instance prefix of the VRAM objects */
	struct gpu *gpu;
	struct pma *pma;		/* device VRAM */
	struct rm *rm;			/* the shared RM (and through it the GSP) */
	struct pf_rm_glue *rm_glue;	/* rm_glue.c's state: device ops, channel-error rings */
	struct iommu *iommu;		/* the device's IOMMU: VFs reach system memory through it */
	uint64_t device_resets;		/* GSP restarts seen (atomic: set by an RM thread) */
	uint64_t device_resets_seen;	/* ... of which reported as events */
	uint64_t pma_free_at_start;
	unsigned int num_vfs;
	struct pf_type types[PF_MAX_TYPES];
	unsigned int nr_types;
	struct pf_slice *slices[PF_MAX_SLICES];
	unsigned int nr_slices;
	struct pf_slice *vfs[PF_MAX_VFS + 1];	/* running slice per VF number */
	gid_t admin_gid;
	bool have_admin_gid;
	int ctl_fd;
	struct pf_client *clients[PF_MAX_CLIENTS];
	uint64_t ctl_refused;		/* control connections refused for lack of a slot */
	uint64_t teardown_batches;	/* RM free batches run for gone guests */
	int sig_fd;
	int bus_fd;			/* eventfd: a guarded BAR mapping faulted (mapguard.h) */
	int lock_fd[2];			/* vgpud.lock of the state and runtime dirs, or -1 */
	volatile int stopping;
	uint64_t started_ns;
	uint64_t events_sent;
	int req_fd;			/* the descriptor passed with the request being run, or -1 */
	struct pf_client *req_client;	/* the client whose request is being run */
	json_object *req_id;		/* ... and its id (borrowed), or NULL */
	bool req_deferred;		/* the command answers later (pf_command_reply_later) */
	uint64_t resets_acked, resets_timed_out;	/* announced resets, by how they ended */
	/* The state on disk may not be what a restart should find: a directory's fsync failed
	 * after a state file was replaced (a crash may undo the change), or a state file could
	 * not be written after an effect that cannot be undone (it holds the state before
	 * it). From then on no change is taken until a restart (pf_command). 0: sound. */
	int state_sync_err;
	char state_sync_why[PF_PATH_MAX + 384];	/* what failed and what a restart finds */
	/* The BAR object of each VF while a slice holds it (made by a start, or adopted:
	 * pf_bar_object_adopt()), which the journal records as the slice's; 0: none. One
	 * object is adopted for one VF only. */
	struct pf_bar_ino {
		dev_t dev;
		ino_t ino;
	} bar_ino[PF_MAX_VFS + 1];
};

/* ---- util.c ---- */
/* Write @data to @path atomically: temp file, fsync, rename, fsync the directory. 0 once
 * @path holds @data, with *@dir_err 0, or the -errno of the directory's fsync: the rename
 * is then seen by every reader (a restart too) but may not survive a crash. -errno (and
 * *@dir_err 0) if @path is as it was. */
int pf_write_file_atomic(const char *path, const char *data, size_t len, int *dir_err);
/* A durability point (@what: "write", "fsync", "rename", "unlink"...): in a test build
 * (VGPU_TEST_HOOKS, vgpud-test) with VGPU_CRASH_AT=N in the environment the Nth one exits
 * with PF_CRASH_EXIT before doing it; in the product it is nothing. */
#define PF_CRASH_EXIT	86
#ifdef VGPU_TEST_HOOKS
void pf_dur_point(const char *what);
/* Test builds: stop the process (SIGSTOP) before running control command @name when
 * VGPU_STOP_AT_CMD names it, so a test holds the loop mid-iteration for as long as it
 * needs; in the product it is nothing. */
void pf_test_stop_at_cmd(const char *name);
/* Test builds: the fault pf_test_dir_fsync_err (pf_test_write_err) holds, taken (reset
 * to 0) by the next directory fsync (state file write); in the product it is 0. */
int pf_test_dir_fsync_fault(void);
int pf_test_write_fault(void);
#else
static inline void pf_dur_point(const char *what)
{
	(void)what;
}
static inline void pf_test_stop_at_cmd(const char *name)
{
	(void)name;
}
static inline int pf_test_dir_fsync_fault(void)
{
	return 0;
}
static inline int pf_test_write_fault(void)
{
	return 0;
}
#endif
/* Defined only in test builds (the -th library the unit tests link): a test sets one to
 * -errno and the next directory fsync (pf_fsync_dir_of()), or the next state file write
 * (pf_write_file_atomic(), before it touches anything), fails with it, once. */
extern int pf_test_dir_fsync_err, pf_test_write_err;
/* Defined only in test builds (state.c): the largest state file the writers write
 * (PF_MAX_FILE); a test lowers it to reach the refusal with the small files vgpud makes. */
extern size_t pf_test_state_max;
/* fsync the directory holding @path, so a rename or unlink in it is durable. */
int pf_fsync_dir_of(const char *path);
/* Parse exactly one JSON value filling @buf (trailing whitespace only, no NUL byte), whose
 * objects repeat no key. */
int pf_json_parse_strict(const char *buf, size_t len, json_object **out);
/* pf_json_parse_strict(), and on -EBADMSG @why (@why_len bytes) says what is wrong: "not one
 * valid JSON value" or the key that repeats and where, as pf_json_dup_check() says it. */
int pf_json_parse_checked(const char *buf, size_t len, json_object **out, char *why,
			  size_t why_len);
/* -EBADMSG if an object in @buf, the text json-c parsed into @root, has a key twice (keys
 * compared as json-c decodes them): json-c keeps the last value where another reader may
 * take the first. @why (may be NULL) then says 'key "uuid" appears twice in "arguments"'.
 * Linear in @len; -ENOMEM if a key with escapes cannot be decoded for want of memory. */
int pf_json_dup_check(const char *buf, size_t len, json_object *root, char *why,
		      size_t why_len);
/* Whether @s[0..len) is well-formed UTF-8; pf_utf8_scrub() turns each bad byte into '?'. */
bool pf_utf8_valid(const char *s, size_t len);
void pf_utf8_scrub(char *s);
/* A JSON string with no embedded NUL and valid UTF-8 (names, verbs, uuids). */
bool pf_json_str_clean(json_object *v);
/* What @v is, for a message that names what a value should have been: "null", "an
 * integer", "a string holding a NUL byte or invalid UTF-8" ... (NULL reads as null). */
const char *pf_json_kind(json_object *v);
/* mkdir -p with @mode. */
int pf_mkdir_p(const char *path, mode_t mode);
/* FNV-1a 64 of @s. */
uint64_t pf_hash64(const char *s);
/* Current time as a JSON QMP timestamp object. */
json_object *pf_json_timestamp(void);
/* A size both as bytes and as text. */
void pf_json_add_u64(json_object *o, const char *key, uint64_t v);

/* ---- device.c ---- */
/* Create the device and allocators for @d->cfg. */
int pf_device_init(struct pf_daemon *d);
/* Release them (running slices' VRAM objects are kept). */
void pf_device_fini(struct pf_daemon *d);
/* Usable VRAM (total minus PF spare). */
uint64_t pf_usable_vram(const struct pf_daemon *d);
/* Recompute the type table. */
void pf_types_build(struct pf_daemon *d);
/* Type by name, or NULL. */
const struct pf_type *pf_type_find(const struct pf_daemon *d, const char *name);
/* Whether one more instance of @t could be started now: 0, or -errno with the reason. */
int pf_type_creatable(struct pf_daemon *d, const struct pf_type *t, struct pf_err *e);
/* The quota @s would get at start (type, fair share, custom fields; aligned); -ENOSPC if
 * the channel and doorbell budget cannot take it (a running slice of @s's uuid has its
 * own counts back for it). */
int pf_slice_quota(struct pf_daemon *d, const struct pf_slice *s, struct pf_quota *q,
		   struct pf_err *e);
/* Find a place for @vram bytes of contiguous VRAM; 0 with *base, or -ENOSPC with the
 * message naming free and largest extent. Changes nothing. */
int pf_place(struct pf_daemon *d, uint64_t vram, uint64_t *base, struct pf_err *e);
/* Set @q's RM limits from its VRAM: PF_RM_CLIENTS_DEFAULT clients and
 * PF_RM_OBJECTS_PER_GIB objects per GiB, at least PF_RM_OBJECTS_MIN, at most 65536. */
void pf_rm_limits_default(struct pf_quota *q);
/* Channels / doorbells in use by running slices. */
void pf_used_counts(const struct pf_daemon *d, uint32_t *channels, uint32_t *doorbells);

/* ---- slice.c ---- */
struct pf_slice *pf_slice_find(struct pf_daemon *d, const char *uuid);
/* Lowest enabled VF without a slice, or 0. */
unsigned int pf_free_vf(const struct pf_daemon *d);
/* Define from a JSON spec (arguments of define-slice). */
int pf_slice_define(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		    struct pf_err *e);
int pf_slice_undefine(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		      struct pf_err *e);
int pf_slice_start_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		       struct pf_err *e);
int pf_slice_stop_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		      struct pf_err *e);
int pf_slice_modify(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		    struct pf_err *e);
int pf_set_vfs(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
	       struct pf_err *e);
/* Start @s on a free VF (from a restore: at @base on @vf with an existing object). */
int pf_slice_start(struct pf_daemon *d, struct pf_slice *s, struct pf_err *e);
/* Stop: reset the VF, release partition and objects. */
void pf_slice_stop(struct pf_daemon *d, struct pf_slice *s);
/* Refuse @what on @s, which has a hand-over record: where it may run, how to end it. */
int pf_slice_held_fail(const struct pf_slice *s, const char *what, struct pf_err *e);
/* A guarded BAR mapping faulted (d->bus_fd): mark the slices whose objects were cut and
 * take their engine time away. */
void pf_slice_bar_faults(struct pf_daemon *d);
/* Stop the marked slices that no migration holds (the loop, each iteration). */
void pf_slice_stop_broken(struct pf_daemon *d);
/* Keep @s's VF and VRAM but run nothing of it (a held hand-over): no engine time, no
 * mailbox request taken, migration state STOPPED. */
void pf_slice_hold(struct pf_daemon *d, struct pf_slice *s);
/* Run a held @s again (its record dropped); a guest that left meanwhile lets go of its RM
 * state now. */
void pf_slice_unhold(struct pf_daemon *d, struct pf_slice *s);
/* FLR of a running slice's VF, at once (the announcement is reset.c's). */
int pf_vf_reset(struct pf_daemon *d, struct pf_slice *s);
/* Drop the daemon's view of a running slice without touching its persistent objects. */
void pf_slice_detach(struct pf_daemon *d, struct pf_slice *s);
/* Bring up the BAR2 object for @s on @vf at @base; @adopt: the existing object, which the
 * caller opened and vetted with pf_bar_object_adopt() and put in s->bar_fd (closed here on
 * failure), reserved here with vram_prealloc: one that cannot be runs unreserved, saying
 * why. */
int pf_slice_bring_up(struct pf_daemon *d, struct pf_slice *s, unsigned int vf, uint64_t base,
		      bool adopt, struct pf_err *e);
/* Open VF @vf's existing BAR object by name for a slice of owner uid @uid (-1: root only)
 * and BAR size @size, the object @id the journal recorded for it (NULL: none recorded),
 * without waiting on what a tenant put there and without changing it: 0 with the object
 * in *@out (pf_bar_object_settle() cuts one grown past @size back; the bring-up reserves
 * it with vram_prealloc and gives it to the owner, mode 0600), or -errno with *@out -1 and
 * @why completing "VRAM object NAME ...": missing (-ENOENT), a lease on it (-EWOULDBLOCK),
 * not a regular file, owned by another uid, another object than @id (with no @id: one with
 * more than one link), the object adopted for another VF or too small (-EBADMSG). */
int pf_bar_object_adopt(struct pf_daemon *d, unsigned int vf, long uid, uint64_t size,
			const struct pf_bar_ino *id, int *out, char *why, size_t wlen);
/* Make VF @vf's adopted object @fd fit a BAR of @size bytes before its bring-up, once the
 * whole state has been checked: one its guest grew is cut back (only bytes no mapping
 * reaches are lost, with a warning). 0, or -errno with @why completing "VRAM object NAME
 * ...": -EBADMSG if it is smaller now, the system's error if it cannot be examined or cut. */
int pf_bar_object_settle(struct pf_daemon *d, unsigned int vf, int fd, uint64_t size,
			 char *why, size_t wlen);
/* Write @s's definition file (none for a transient slice): 0, or -errno with the file
 * marked behind the journal (s->def_pending), which the stop then writes first. */
int pf_slice_def_write(struct pf_daemon *d, struct pf_slice *s);
/* pf_slice_def_write() after a journal commit of @s's definition (@what: "modified"...):
 * a failure leaves the commit standing and is logged. */
int pf_slice_def_follow(struct pf_daemon *d, struct pf_slice *s, const char *what);
/* JSON description of @s (list, state file). */
json_object *pf_slice_json(const struct pf_daemon *d, const struct pf_slice *s);
/* Autostart every auto slice that is not running (logs what cannot start). */
void pf_autostart(struct pf_daemon *d);
void pf_slice_free(struct pf_slice *s);

/* ---- state.c ---- */
/* Persist @s's definition (<state>/slices/<uuid>.json) or remove it. */
int pf_state_save_slice(struct pf_daemon *d, const struct pf_slice *s);
int pf_state_remove_slice(struct pf_daemon *d, const struct pf_slice *s);
/* Rewrite the journal (running slices: their partitions, quotas, definitions and the
 * identity of their BAR objects); _without leaves @skip out (a stop commits before it
 * scrubs). */
int pf_state_save_journal(struct pf_daemon *d);
int pf_state_save_journal_without(struct pf_daemon *d, const struct pf_slice *skip);
/* Load definitions and the journal; all or nothing. */
int pf_state_load(struct pf_daemon *d);
/* Each of the writes above returns 0 once the file holds the new state, even when the
 * directory's fsync then failed: the change stands (a restart reads it), the failure is
 * logged, and d->state_sync_err and state_sync_why say the daemon is read-only. */
/* A state file (the journal) could not be written (@err) after an effect that cannot be
 * undone: log it and make the daemon read-only; @fmt says what the state still holds and
 * what a start from it does. The first such failure is the one kept. */
void pf_state_behind(struct pf_daemon *d, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Name of @vf's VRAM object for this instance. */
void pf_shm_name(const struct pf_daemon *d, unsigned int vf, char *buf, size_t len);
/* What a file of mode @mode is, for messages: "a regular file", "a FIFO", ... */
const char *pf_file_kind(mode_t mode);
/* Parse a client's slice spec (define-slice's shape) into @s; a "parent" must name this
 * daemon's PF and "migrated_out" is refused. 0 or -errno with @e's message. */
int pf_slice_from_json(struct pf_daemon *d, json_object *o, struct pf_slice *s,
		       struct pf_err *e);
/* The same for a definition vgpud wrote (a slice file, the journal, a spec it built from
 * one), which may carry the hand-over record "migrated_out". */
int pf_slice_from_record(struct pf_daemon *d, json_object *o, struct pf_slice *s,
			 struct pf_err *e);
/* The on-disk definition of @s. */
json_object *pf_slice_def_json(const struct pf_slice *s);

/* ---- endpoint.c ---- */
/* Listen on vf<N>.sock and vf<N>.master.sock for @s. */
int pf_endpoint_open(struct pf_daemon *d, struct pf_slice *s);
void pf_endpoint_close(struct pf_daemon *d, struct pf_slice *s);
/* The endpoint of @s with no socket file and no service thread: connections come only
 * through pf_endpoint_admit() (the endpoint fuzz harness). 0 or -ENOMEM. */
int pf_endpoint_open_unlistened(struct pf_slice *s);
/* Connection @c (taken over) as accepted from @uid, process @pid (@pidfd, taken over): a
 * new guest (greeted), the attached process's SVA connection (HELLO), or a refusal. */
void pf_endpoint_admit(struct pf_daemon *d, struct pf_slice *s, int c, uid_t uid, pid_t pid,
		       int pidfd);
/* Whether a guest is attached. */
bool pf_endpoint_attached(const struct pf_slice *s);
/* Whether a guest's leaving still waits for the mailbox request it left in hand (an RM
 * call, perhaps in the GSP): no guest attaches meanwhile. */
bool pf_endpoint_detaching(const struct pf_slice *s);
/* The guest whose RM state and queued requests were kept (it was migrating out, or its
 * slice held) is gone: drop its requests and free its RM state, once the request in hand
 * (if any) is done, which the loop does not wait for (pf_endpoint_detaching() until then).
 * Nothing while a guest is attached; the mailbox must not be held. */
void pf_endpoint_guest_left(struct pf_daemon *d, struct pf_slice *s);
/* poll() set contribution and dispatch: at most PF_EP_MAX_POLLFDS entries per slice
 * (two listening sockets, interrupt, guest, SVA connection, the bound process's pidfd,
 * the vectors but the kick one; while detaching, with no guest, the service thread's idle
 * eventfd). */
#define PF_EP_MAX_POLLFDS	(5 + VF_NR_VECTORS)
int pf_endpoint_pollfds(struct pf_slice *s, struct pollfd *p, int max);
void pf_endpoint_handle(struct pf_daemon *d, struct pf_slice *s, const struct pollfd *p, int n);
/* Drop the guest's SVA binding (vgpu/sva.h), if any: after it the device reaches nothing of
 * the process. @why goes to the log. The SVA connection stays open (the guest may bind
 * again, while the attached process lives). The binding is to the attached PROCESS (a
 * pidfd taken when its connection was accepted), never to its pid number: it is dropped
 * when that process exits, whoever keeps its sockets. */
void pf_endpoint_sva_unbind(struct pf_slice *s, const char *why);
/* The guest's GET_INFO payload @payload (@len bytes): the ABI it announces (minor 3), kept
 * until it detaches. Called on the VF's service thread. */
void pf_endpoint_guest_hello(struct pf_slice *s, const void *payload, uint32_t len);
/* What the attached guest announced (VGPU_ABI_VERSION form), 0 if nothing. */
uint32_t pf_endpoint_guest_abi(const struct pf_slice *s);
/* Whether @s's guest can move with a migration: 0 (also with no guest), or -EOPNOTSUPP
 * with the reason in @why (attached in peer mode, a driver before ABI 2.3). */
int pf_endpoint_mig_check(const struct pf_slice *s, char *why, size_t wlen);
/* query-slices' endpoint fields of a running @s: endpoint_master, detaching (true while
 * pf_endpoint_detaching()), and with a guest guest_peer ("peer0" or "peer_mode") and
 * guest_abi ("2.3", null: not announced). */
void pf_endpoint_json(const struct pf_slice *s, json_object *o);
/* Format the header and rings of @s's BAR2 (fresh or after a reset). */
void pf_bar_format(struct pf_slice *s);
/* Attach host ring views to an existing BAR2 (restore). -EPROTO if broken. */
int pf_bar_attach(struct pf_slice *s);
/* Take the mailbox rings as the BAR holds them now (an incoming migration's commit: the
 * VMM brought the guest's rings along); with the service paused. 0 or -EPROTO. */
int pf_bar_adopt_rings(struct pf_slice *s);
/* A migration's CONTROL frames were written into the control area (the mailbox held):
 * take its header (this VF's fields set again, the reset count adopted) and its rings.
 * 0 or -EPROTO. */
int pf_bar_adopt_ctrl(struct pf_slice *s);
/* Post an event to the guest. */
void pf_endpoint_event(struct pf_slice *s, uint32_t type, uint64_t arg0);
/* The same with arg1. */
void pf_endpoint_event2(struct pf_slice *s, uint32_t type, uint64_t arg0, uint64_t arg1);

/* What the attached guest asked for in GET_INFO (VF_INFO_REQ_*), 0 if nothing. */
uint32_t pf_endpoint_guest_flags(const struct pf_slice *s);
/* A migration's GUEST frame: what @s's guest announced on the source (ABI @abi, flags
 * @flags). The migrated guest's VMM attached through vf<N>.master.sock has announced it
 * now; with none attached, the next one to attach there will have (loop thread). */
void pf_endpoint_mig_guest(struct pf_slice *s, uint32_t abi, uint32_t flags);

/* ---- reset.c: reset-vf, announced to a guest that acknowledges (doc/pf_manager.md) ---- */
/* How an announced reset stands at @now_ns. */
enum pf_reset_verdict {
	PF_RESET_WAIT,			/* keep waiting */
	PF_RESET_ACKED,			/* the guest acknowledged this reset's number */
	PF_RESET_TIMED_OUT,		/* the deadline passed without it */
	PF_RESET_GUEST_GONE,		/* nobody left to wait for */
};
/* The decision alone: @ack is what the guest wrote, @attached whether it still is. */
enum pf_reset_verdict pf_reset_verdict(const struct pf_reset_wait *w, uint32_t ack,
				       bool attached, uint64_t now_ns);
/* Whether a reset of @s is announced first: its guest asked (VF_INFO_REQ_RESET_ACK with
 * ABI minor 5 or later) and @evict_ms is not 0. */
bool pf_reset_announces(const struct pf_slice *s, uint32_t evict_ms);
/* The reset-vf command (slice.c finds the slice, then calls pf_reset_request). */
int pf_vf_reset_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		    struct pf_err *e);
/* Reset running @s: at once, or announced with the request's reply deferred until the
 * reset ran ("evict_ms" in @args, else the daemon's reset_evict_ms). */
int pf_reset_request(struct pf_daemon *d, struct pf_slice *s, json_object *args, bool dry,
		     json_object *ret, struct pf_err *e);
/* Run every announced reset that is due at @now_ns (the loop, each iteration). */
void pf_reset_tick(struct pf_daemon *d, uint64_t now_ns);
/* The poll timeout that wakes the loop at the nearest deadline, at most @max_ms. */
int pf_reset_poll_ms(const struct pf_daemon *d, uint64_t now_ns, int max_ms);
/* @s stops with a reset announced: the waiting request fails with @why; NULL: the
 * daemon lets go of @s (the journal keeps the reset, nobody is answered). */
void pf_reset_cancel(struct pf_daemon *d, struct pf_slice *s, const char *why);
/* Control client @c is going: nothing will be answered to it. */
void pf_reset_client_gone(struct pf_daemon *d, const struct pf_client *c);

/* ---- service.c: one service thread per VF serves its mailbox (doc/pf_manager.md) ---- */
/* Answer one mailbox request @req of @s into @rsp (a whole slot), as the VF's service
 * thread does; true if it failed (for the counters). It reads s->prov unlocked: for a
 * caller that is the only thread of @s (the mailbox fuzz harness). */
bool pf_svc_handle(struct pf_daemon *d, struct pf_slice *s, const struct vf_msg *req,
		   struct vf_msg *rsp, uint32_t resets);
/* Start @s's service thread (with its endpoint). 0 or -errno. */
int pf_svc_start(struct pf_daemon *d, struct pf_slice *s);
/* Stop and join it (waits for the request in hand), counters synced. No-op without one. */
void pf_svc_stop(struct pf_slice *s);
/* A guest attached: its mailbox vectors (ours to read, ours to write). */
void pf_svc_attach(struct pf_slice *s, int kick_fd, int reply_fd);
/* The guest left: the thread lets go of the vectors before the caller closes them. */
void pf_svc_detach(struct pf_slice *s);
/* Around formatting the mailbox rings (a reset): the thread is kept out; requests taken
 * before are answered nowhere. */
void pf_svc_pause(struct pf_slice *s);
void pf_svc_resume(struct pf_slice *s);
/* pf_svc_pause() once the request in hand (if any) is answered into the ring, waiting at
 * most @timeout_ms: 0, or -EBUSY with one still in hand. Held either way (resume after). */
int pf_svc_pause_idle(struct pf_slice *s, unsigned int timeout_ms);
/* pf_svc_pause() if no request is in hand: 0, held (resume after). Never waits: with one
 * in hand, -EBUSY and not held; the thread then signals pf_svc_idle_fd() once that request
 * is done, and the caller asks again (loop thread, the guest's vectors taken away first,
 * so that the thread takes no further request). */
int pf_svc_pause_or_notify(struct pf_slice *s);
/* The eventfd pf_svc_pause_or_notify() has signalled (poll it; that call drains it), or
 * -1 without a service thread. Open as long as the thread runs. */
int pf_svc_idle_fd(const struct pf_slice *s);
/* Copy the thread's mailbox counters into @s (loop thread, before it reads them). */
void pf_svc_sync(struct pf_slice *s);
/* Set @s's provisioned quota (loop thread, not paused): under the service lock, where the
 * thread reads it, when @s has a service thread. */
void pf_svc_set_prov(struct pf_slice *s, const struct pf_quota *prov);

/* ---- rm_glue.c ---- */
int pf_rm_init(struct pf_daemon *d);
void pf_rm_fini(struct pf_daemon *d);
/* Program @vf's partition at @base with @s's provisioned quota. */
int pf_rm_partition_set(struct pf_daemon *d, struct pf_slice *s, unsigned int vf, uint64_t base);
/* Reset @vf's RM state and take its partition back. */
int pf_rm_partition_clear(struct pf_daemon *d, unsigned int vf);
/* Take @vf's partition back without the reset's scrub: its VRAM is an adopted object the
 * state still owns. -EBUSY while it has clients. */
int pf_rm_partition_drop(struct pf_daemon *d, unsigned int vf);
/* The RM's child allocator of @vf's partition, or NULL. */
struct pma *pf_rm_vf_pma(struct pf_daemon *d, unsigned int vf);
/* FLR: clients disabled, channels reset, objects freed in batches, VRAM scrubbed. */
int pf_rm_vf_reset(struct pf_daemon *d, unsigned int vf);
/* The guest detached: disable its RM clients now and free them in batches from the loop
 * (pf_rm_teardown_step()); VRAM is kept. */
void pf_rm_guest_gone(struct pf_daemon *d, unsigned int vf);
/* Free one batch (PF_RESET_BATCH objects) of every VF whose guest is gone; true while
 * some remain (the loop then polls without sleeping). */
bool pf_rm_teardown_step(struct pf_daemon *d);
/* A guest's RM call (wire message of vgpu/rm.h) as function @vf. */
int pf_rm_call(struct pf_daemon *d, unsigned int vf, const void *req, size_t len, void *reply,
	       size_t *reply_len);
/* Device scheduling policy (enum gpu_sched_policy) and slice, through the GSP. */
int pf_rm_sched_set(struct pf_daemon *d, int policy, uint64_t quantum_ns);
/* @vf's scheduling settings, through the GSP. */
int pf_rm_fn_sched_set(struct pf_daemon *d, unsigned int vf, bool enabled, uint64_t quantum_ns,
		       uint64_t preempt_timeout_ns, uint64_t weight);
/* Provisioned quota @prov as the RM's limits for @vf. */
int pf_rm_quota_set(struct pf_daemon *d, unsigned int vf, const struct pf_quota *prov);
/* RM clients plus objects of @vf. */
uint64_t pf_rm_objects(struct pf_daemon *d, unsigned int vf);
/* Post the channel errors the GSP reported for @s's VF as VF_EVT_CHAN_ERROR (loop thread). */
void pf_rm_chan_events(struct pf_daemon *d, struct pf_slice *s);

/* ---- control.c ---- */
int pf_control_open(struct pf_daemon *d);
void pf_control_close(struct pf_daemon *d);
/* Broadcast an event to negotiated clients. */
void pf_event(struct pf_daemon *d, const char *name, json_object *data);
void pf_control_accept(struct pf_daemon *d);
/* Disconnect clients whose output overflowed (outside any client's processing) and those
 * that have not negotiated within cfg.negotiate_ms of @now_ns (told why first). */
void pf_control_sweep(struct pf_daemon *d, uint64_t now_ns);
void pf_client_io(struct pf_daemon *d, unsigned int idx, short revents);
/* Queue @rep (taken) to @c and try to send it: a deferred command's reply. */
void pf_control_send(struct pf_daemon *d, struct pf_client *c, json_object *rep);

/* ---- migrate.c: save-slice and restore-slice (doc/migration.md) ---- */
int pf_slice_save_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		      struct pf_err *e);
int pf_slice_restore_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e);

/* ---- migrate_state.c: a guest's state that is not memory (doc/migration.md) ---- */
/* Write @s's state frames (SCHED, RM_TREE, IOMMU, CHANNELS, DOORBELLS) to @enc, after its
 * extents; none for a slice without RM objects. -EBUSY naming what is in flight unless
 * the guest is quiesced; nothing is written then. */
int pf_mig_state_save(struct pf_daemon *d, struct pf_slice *s, struct mig_enc *enc,
		      struct pf_err *e);
/* The same for a live migration's final pass, then the VF's control area (CONTROL: the
 * interrupt page, the mailbox rings, the header) as it is with the mailbox served to the
 * end: requests and replies in flight move with it. */
int pf_mig_state_save_live(struct pf_daemon *d, struct pf_slice *s, struct mig_enc *enc,
			   struct pf_err *e);
/* A restore's plan: the VF (*@vf, planned as the first free one) must be the one the
 * guest's handles in RM_TREE frame @fr name; it becomes that VF if free, else -EBUSY
 * naming it. Other frames leave *@vf alone. */
int pf_mig_state_vf(struct pf_daemon *d, const struct mig_frame *fr, unsigned int *vf,
		    struct pf_err *e);
/* Load state frame @fr into @s (brought up on the VF the stream's handles name, before it
 * runs); SCHED is left to the caller, for the commit (pf_mig_state_sched()), other frames
 * are ignored. 0, or the error naming the frame and what failed. */
int pf_mig_state_load(struct pf_daemon *d, struct pf_slice *s, const struct mig_frame *fr,
		      struct pf_err *e);

/* ---- commands.c ---- */
/* Run one parsed request; returns the reply object (owned by the caller), or NULL when
 * the command answers later (it called pf_command_defer). */
json_object *pf_command(struct pf_daemon *d, struct pf_client *c, json_object *req);
/* From a running command: its reply comes later. Sets *@client and *@id (a reference)
 * for pf_command_reply_later(). */
void pf_command_defer(struct pf_daemon *d, struct pf_client **client, json_object **id);
/* The reply to a deferred request @id (taken) as pf_command would have built it: @ret
 * (taken) when @r is 0, else @e's error; the "not durable" error instead of @ret once the
 * state on disk is unsound (d->state_sync_err); sent to @c unless @c is NULL. */
void pf_command_reply_later(struct pf_daemon *d, struct pf_client *c, json_object *id, int r,
			    json_object *ret, struct pf_err *e);

#endif
