/* SPDX-License-Identifier: MIT */
/* gpu_model - the emulated physical GPU: VRAM partitioned per function, a GMMU that walks
 * the page tables functions write, engines that execute GPFIFO work rung through usermode
 * doorbells, a time-slicing scheduler, per-function interrupts and fault buffers.
 *
 * Two kinds of state:
 *  - privileged state (partition table, channel instance state, runlists, scheduler
 *    settings) lives in a memfd-backed region with the layout below. Only the GSP writes
 *    it, through gpu_priv_*(); the device model maps it read-only and takes a consistent
 *    snapshot whenever its generation changes. Tests call gpu_priv_*() in-process.
 *  - device state (VRAM contents, channel progress, faults, interrupts, telemetry) is
 *    owned by the model and read through gpu_*().
 * Functions: 0 is the PF, 1..nr_vfs the VFs. Channels are per function (virtual ids).
 * Every call is thread-safe unless it says otherwise. Under ThreadSanitizer, an owner whose
 * GSP runs in another process releases the struct gpu (__tsan_release) before each GSP
 * request and acquires it on each device event the GSP reports; the model does the other
 * halves (so guest memory written before a request is seen as ordered before the device's
 * use of it). */
#ifndef VGPU_GPU_MODEL_GPU_H
#define VGPU_GPU_MODEL_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>

#define GPU_MAX_FNS		64	/* PF + 63 VFs */
#define GPU_FN_MAX_CHANNELS	64	/* virtual channel ids 0..63 per function */
#define GPU_MAX_ENGINES		4	/* engines = worker threads = runlists per function */
#define GPU_VRAM_ALIGN		(2ull << 20)	/* partition and slice granularity */
#define GPU_DEFAULT_VRAM	(16ull << 30)

struct gpu;
struct gpu_priv;
struct iommu;

/* ==== privileged state: shared-memory layout ================================================
 * Every field is a 64-bit word so readers in another process can copy it with plain atomic
 * word loads. Each function's record is guarded by its own sequence counter (odd while
 * written); gen grows after every completed write. */
#define GPU_PRIV_MAGIC		0x56495250475056ull	/* "VPGPRIV" */
#define GPU_PRIV_VERSION	1ull

/* Channel flags. */
#define GPU_CHAN_ALLOCATED	(1ull << 0)
#define GPU_CHAN_ENABLED	(1ull << 1)
#define GPU_CHAN_REPLAYABLE	(1ull << 2)	/* MMU faults stall for replay instead of erroring */
/* At allocation: this re-creates, after a device reset's wipe, the allocation the wipe freed
 * (same geometry, the next gen). The channel keeps its execution state (GP_GET, the method
 * in progress and its partial result, an error) instead of starting over, so work in flight
 * runs exactly once. Ignored when the device never ran that allocation. */
#define GPU_CHAN_RESTORE	(1ull << 3)

struct gpu_priv_chan {
	uint64_t flags;		/* GPU_CHAN_* */
	uint64_t gen;		/* bumped at every allocation: resets the channel's progress */
	uint64_t runlist;	/* engine that runs it; < nr_engines */
	uint64_t pdb;		/* VF-physical VRAM address of the level-0 page table */
	uint64_t gpfifo_va;	/* GPU VA of the GP ring, 8-byte aligned */
	uint64_t gpfifo_entries;/* power of two, 2..65536 */
	uint64_t userd_aper;	/* VGPU_APER_VRAM or VGPU_APER_SYS */
	uint64_t userd_addr;	/* VF-physical VRAM address or IOVA, 64-byte aligned */
};

/* Scheduling policies (values follow NVIDIA's ctrl2080fifo.h numbering). */
enum gpu_sched_policy {
	GPU_SCHED_BEST_EFFORT = 2,	/* round robin over functions with work; idle ones skipped */
	GPU_SCHED_EQUAL_SHARE = 3,	/* equal share for every enabled function with channels,
					 * reserved even when it is idle */
	GPU_SCHED_FIXED_SHARE = 4,	/* weight/1000 of the engine per function, reserved; the
					 * unreserved rest is spent idle */
};
/* Slices are picked by virtual time (charged time / weight), so a slice the host stretched
 * or cut short is made up by the following picks. Best effort: slice = the function's
 * quantum, weight = quantum, functions without work skipped. Equal and fixed share: slice =
 * the device quantum; an idle function's slices are spent idle. Under every policy a slice
 * that has run 20 us is cut short when another function with work is owed time (its
 * virtual time plus one slice below the running function's). */

struct gpu_priv_sched_fn {
	uint64_t enabled;		/* takes part in time-slicing */
	uint64_t quantum_ns;		/* best effort: this function's slice; 0 = 2 ms */
	uint64_t preempt_timeout_ns;	/* 0 = 100 ms */
	uint64_t weight;		/* fixed share: per-mille of the period */
};

struct gpu_priv_fn {
	uint64_t seq;			/* odd while the GSP writes this record */
	uint64_t part_base;		/* device VRAM offset of the slice */
	uint64_t part_size;		/* quota: VF-physical VRAM is [0, part_size); 0 = none */
	struct gpu_priv_sched_fn sched;
	uint64_t runlist[GPU_MAX_ENGINES];	/* bitmap of resident channels per engine */
	struct gpu_priv_chan chans[GPU_FN_MAX_CHANNELS];
};

struct gpu_priv_shared {
	uint64_t magic;			/* GPU_PRIV_MAGIC */
	uint64_t version;		/* GPU_PRIV_VERSION */
	uint64_t nr_fns;
	uint64_t nr_engines;
	uint64_t vram_size;
	uint64_t gen;			/* bumped after every write */
	uint64_t sched_seq;		/* guards the three words below */
	uint64_t sched_policy;		/* enum gpu_sched_policy */
	uint64_t sched_quantum_ns;	/* equal / fixed share slice; 0 = 2 ms */
	uint64_t sched_period_ns;	/* reserved (kept for the GSP's interface); 0 */
	uint64_t reserved[6];
	struct gpu_priv_fn fns[GPU_MAX_FNS];
};

/* ==== device status: what the GSP reads ======================================================
 * A memfd written by the device model and mapped read-only by the GSP (another process),
 * which services the device's errors as GSP-RM does on real hardware: per function the
 * MMU-fault count and the last fault, per channel its error count, last error and GP
 * progress. Every field is a 64-bit word written with atomic stores; a count is bumped with
 * release after the fields it describes, so a reader that loads it with acquire sees them. */
#define GPU_STATUS_MAGIC	0x5354415447505600ull	/* "\0VPGTATS" */

struct gpu_status_chan {
	uint64_t errors;	/* errors raised on the channel so far (never goes back) */
	uint64_t error;		/* enum vgpu_chan_error of the last one; 0 again at reallocation */
	uint64_t gp_get;	/* GP entries consumed, as written back to USERD */
	uint64_t gp_put;	/* GP_PUT the device last accepted; gp_get != gp_put: work pending */
	uint64_t faults;	/* faults recorded on the channel: a stalled channel whose faults
				 * keep being serviced and replayed is making progress */
};

struct gpu_status_fn {
	uint64_t faults;		/* MMU faults recorded (also those that overflowed) */
	uint64_t fault_chid, fault_reason, fault_va;	/* the last one */
	struct gpu_status_chan chans[GPU_FN_MAX_CHANNELS];
};

struct gpu_status_shared {
	uint64_t magic;			/* GPU_STATUS_MAGIC */
	uint64_t nr_fns;
	uint64_t events;		/* bumped after every channel error and fault */
	uint64_t reserved[5];
	struct gpu_status_fn fns[GPU_MAX_FNS];
};

/* ==== device =================================================================================*/
struct gpu_config {
	uint64_t vram_size;		/* bytes, multiple of 2 MiB; 0 = GPU_DEFAULT_VRAM */
	unsigned int nr_vfs;		/* 0..63 */
	unsigned int nr_engines;	/* worker threads, 1..GPU_MAX_ENGINES; 0 = 1 */
	uint64_t spin_ns;		/* idle engines spin this long before sleeping; 0 = 50 us */
	uint64_t scan_period_ns;	/* GP_PUT vs GP_GET scan of resident channels; 0 = 1 ms */
	/* Idle engines re-read the privileged region this often, for a GSP in another process
	 * that writes it without a kick; 0 = 1 ms. */
	uint64_t priv_poll_ns;
	/* A channel that caught up after work waits this long for its next submission
	 * before its turn ends (not with clock_ns); 0 = 2 us, GPU_LINGER_NONE = not at all. */
	uint64_t linger_ns;
	/* A COPY at least this long writes past the CPU caches (non-temporal stores), as
	 * memcpy does for such sizes; 0 = 3/4 of the last-level cache, UINT64_MAX = never. */
	uint64_t copy_stream_min;
	struct iommu *iommu;		/* system aperture (requester id = function number);
					 * NULL: every system-memory access faults */
	/* The engines' clock in ns, for tests that must not depend on host load (shares,
	 * slices); also the time VGPU_M_TIMESTAMP stores. Called on engine threads only.
	 * NULL: CLOCK_MONOTONIC. */
	uint64_t (*clock_ns)(void *arg);
	/* With clock_ns: the engine thread's CPU time on that clock (time it ran, not time the
	 * host took from it), so a test can preempt the engine. NULL: no CPU time, only long
	 * gaps between clock reads count as taken. Called with @clock_arg on engine threads. */
	uint64_t (*cpu_ns)(void *arg);
	void *clock_arg;
};

#define GPU_LINGER_NONE	UINT64_MAX

/* Create a GPU: reserves the VRAM range, creates the privileged region and doorbell pages
 * and starts the engine threads. 0, -EINVAL (bad config) or -ENOMEM / -errno. */
int gpu_create(const struct gpu_config *cfg, struct gpu **out);
/* Stop the engines and release everything; NULL is a no-op. */
void gpu_destroy(struct gpu *g);

/* Number of functions (1 + nr_vfs) and engines. */
unsigned int gpu_nr_fns(const struct gpu *g);
unsigned int gpu_nr_engines(const struct gpu *g);

/* ---- VRAM ---- */
/* Device VRAM size in bytes. */
uint64_t gpu_vram_size(const struct gpu *g);
/* Host address of device VRAM offset @off (for the host RM and tests); NULL if out of range. */
void *gpu_vram_ptr(struct gpu *g, uint64_t off, uint64_t len);
/* Host address of function @fn's VF-physical [pa, pa+len) via the current partition
 * table; NULL if any byte lies outside the slice. */
void *gpu_fn_vram_ptr(struct gpu *g, unsigned int fn, uint64_t pa, uint64_t len);
/* Back device VRAM [off, off+size) with its own memfd (@fd, or a new one if -1) mapped at
 * that offset, so it can be handed to a guest. 2 MiB aligned; -EEXIST if @fn already has
 * a slice, -EBUSY if the range overlaps another slice. The model keeps its own fd. */
int gpu_vram_slice_map(struct gpu *g, unsigned int fn, uint64_t off, uint64_t size, int fd);
/* Scrub and drop @fn's slice memfd; the range returns to the device memfd. */
int gpu_vram_slice_unmap(struct gpu *g, unsigned int fn);
/* The memfd backing @fn's slice (owned by the model: dup it to keep), or -ENOENT. */
int gpu_vram_slice_fd(struct gpu *g, unsigned int fn);
/* Zero device VRAM [off, off+size) by punching holes (page aligned): frees host RAM. */
int gpu_vram_scrub(struct gpu *g, uint64_t off, uint64_t size);
/* Dirty tracking of engine writes to VRAM, for live migration: while at least one caller
 * tracks, every engine write (copy, fill, semaphore, USERD, reduce, axpy) sets a bit per
 * 4 KiB page of device VRAM it touched. CPU writes through a VF's BAR are not seen. */
#define GPU_DIRTY_PAGE		4096u
/* Start (@on) or stop tracking; calls nest. Pages written before the first start are not marked. */
void gpu_dirty_track(struct gpu *g, bool on);
/* Take and clear the dirty bits of device VRAM [@off, @off + @size) (4 KiB aligned) into
 * @bits, one bit per page from @off (bits must hold size / 4 KiB bits, zeroed by the
 * caller or OR-ed into); returns the pages that were dirty. */
uint64_t gpu_dirty_collect(struct gpu *g, uint64_t off, uint64_t size, uint64_t *bits);
/* Host RAM in bytes currently backing VRAM (device memfd plus slices). */
uint64_t gpu_vram_resident(struct gpu *g);

/* ---- privileged state (the GSP's interface) ---- */
/* memfd of the privileged region (owned by the model; map with mmap). */
int gpu_priv_fd(const struct gpu *g);
/* The writer handle for in-process use (tests, an in-process GSP); NULL once dropped. */
struct gpu_priv *gpu_priv_get(struct gpu *g);
/* Unmap the in-process writer for good (the device owner, once its GSP runs): from then on
 * the process maps the region only read-only; a GSP maps it from gpu_priv_fd() itself.
 * Idempotent; no gpu_priv_get() handle may be in use. */
void gpu_priv_drop_writer(struct gpu *g);
/* The device's read-only view of the privileged region (mapped PROT_READ). */
const struct gpu_priv_shared *gpu_priv_view(const struct gpu *g);
/* Map the privileged region @fd for writing (in the GSP process). 0 or -errno. */
int gpu_priv_open(int fd, struct gpu_priv **out);
/* Have @p write 1 to @fd (the device's gpu_priv_kick_fd(), passed to the GSP process)
 * after every write, so sleeping engines see it at once rather than at their 1 ms poll.
 * -1 turns it off. */
void gpu_priv_set_kick_fd(struct gpu_priv *p, int fd);
/* The device's eventfd for gpu_priv_set_kick_fd() (owned by the model). */
int gpu_priv_kick_fd(const struct gpu *g);
/* Unmap a handle from gpu_priv_open(). */
void gpu_priv_close(struct gpu_priv *p);
/* Read-only view of the layout (reads must tolerate concurrent writes: use the seq). */
const struct gpu_priv_shared *gpu_priv_shared(const struct gpu_priv *p);
/* Give @fn VF-physical [0, size) at device VRAM @base. 2 MiB aligned, inside VRAM, not
 * overlapping another function: else -EINVAL / -EBUSY. size 0 clears the partition. */
int gpu_priv_partition_set(struct gpu_priv *p, unsigned int fn, uint64_t base, uint64_t size);
/* Allocate channel @chid of @fn with @cfg (flags may hold GPU_CHAN_REPLAYABLE and
 * GPU_CHAN_RESTORE; gen and
 * ALLOCATED are set here). Disabled and non-resident until enabled / put in a runlist.
 * -EINVAL on bad geometry, -EEXIST if allocated. */
int gpu_priv_chan_alloc(struct gpu_priv *p, unsigned int fn, unsigned int chid,
			const struct gpu_priv_chan *cfg);
/* Enable or disable an allocated channel. -ENOENT if not allocated. */
int gpu_priv_chan_enable(struct gpu_priv *p, unsigned int fn, unsigned int chid, bool on);
/* Free a channel and drop it from its runlist. -ENOENT if not allocated. */
int gpu_priv_chan_free(struct gpu_priv *p, unsigned int fn, unsigned int chid);
/* Set the resident channels of @fn's runlist @rl (a bitmap of chids, each allocated on
 * that runlist, else -EINVAL). */
int gpu_priv_runlist_set(struct gpu_priv *p, unsigned int fn, unsigned int rl, uint64_t chans);
/* Device-wide policy and its slice (0 = default); @period_ns is recorded but unused.
 * -EINVAL on unknown policy. */
int gpu_priv_sched_set(struct gpu_priv *p, enum gpu_sched_policy policy,
		       uint64_t quantum_ns, uint64_t period_ns);
/* Per-function scheduling settings. -EINVAL if weights would exceed 1000 in total. */
int gpu_priv_sched_fn_set(struct gpu_priv *p, unsigned int fn,
			  const struct gpu_priv_sched_fn *s);

/* ---- doorbells ---- */
/* The function's doorbell page (the guest maps the same page of gpu_doorbell_fd()). */
struct vgpu_doorbell_page *gpu_doorbell_page(struct gpu *g, unsigned int fn);
/* memfd holding the doorbell pages, page @fn at offset fn * 4096. */
int gpu_doorbell_fd(const struct gpu *g);
/* The function's kick eventfd, written by a submitter that saw the engines asleep. */
int gpu_doorbell_kick_fd(const struct gpu *g, unsigned int fn);
/* Back @fn's doorbell page with the 4 KiB at (@fd, @off) (page aligned), e.g. a page of the
 * VF's BAR2, so a guest that maps only that object rings the device with no hop; the page is
 * initialised (empty ring, current sleeping count). @fd < 0 restores the default page of
 * gpu_doorbell_fd(). Tokens still queued in the old page are left to the periodic scan.
 * 0, -EINVAL (bad fn/offset) or -errno from mmap (the old backing is then kept). */
int gpu_doorbell_page_back(struct gpu *g, unsigned int fn, int fd, uint64_t off);
/* Post @token to @fn's doorbell and kick if needed: the in-process submitter's path. */
void gpu_doorbell_ring(struct gpu *g, unsigned int fn, uint32_t token);

struct gpu_db_stats {
	uint64_t rung;		/* tokens consumed */
	uint64_t accepted;	/* tokens that named a usable channel */
	uint64_t invalid;	/* bad runlist or chid, free or fenced channel, another runlist */
	uint64_t disabled;	/* channel allocated but disabled */
	uint64_t non_resident;	/* accepted while not resident: left pending */
	uint64_t spurious;	/* GP_PUT unchanged */
	uint64_t bad_put;	/* GP_PUT beyond the ring */
	uint64_t backwards;	/* GP_PUT moved backwards */
	uint64_t scan_found;	/* work found by the periodic scan, not by a doorbell */
	uint64_t overruns;	/* tokens lost to a lapped doorbell ring */
	uint64_t overrun_scans;	/* overruns that brought the engines' GP_PUT scans forward
				 * (at most one per scan period) */
	uint64_t last_seen_ns;	/* when the device last consumed a token (cmn_now_ns) */
};
/* Doorbell counters of @fn. */
void gpu_db_stats(struct gpu *g, unsigned int fn, struct gpu_db_stats *out);
/* Zero @fn's doorbell counters (a new tenant of the function). */
void gpu_db_stats_reset(struct gpu *g, unsigned int fn);

/* ---- channels ---- */
enum gpu_chan_state {
	GPU_CHAN_STATE_FREE,
	GPU_CHAN_STATE_IDLE,		/* allocated, nothing pending */
	GPU_CHAN_STATE_BUSY,		/* has work (pending, running or waiting on a semaphore) */
	GPU_CHAN_STATE_FAULTED,		/* stalled on a replayable fault */
	GPU_CHAN_STATE_ERROR,
};
struct gpu_chan_status {
	enum gpu_chan_state state;
	enum vgpu_chan_error error;
	uint32_t gp_get;
	uint64_t methods;		/* methods executed */
};
/* Status of @fn's channel @chid. -EINVAL on bad ids. */
int gpu_chan_status(struct gpu *g, unsigned int fn, unsigned int chid, struct gpu_chan_status *out);

/* Robust-channel recovery (the RM's watchdog): stop @fn's channel @chid with error @err as
 * the device does on its own errors (USERD error notifier, VGPU_INTR_CHAN_ERROR, status
 * region). Call with the channel disabled and quiesced (gpu_chan_quiesce()). 0, -EINVAL
 * (bad ids or @err), -ENOENT (free channel), -EBUSY (an engine runs it), -EALREADY (in
 * error already). */
int gpu_chan_error(struct gpu *g, unsigned int fn, unsigned int chid, enum vgpu_chan_error err);

/* ---- device status (the GSP's view, layout above) ---- */
/* memfd of the status region (owned by the model; map it read-only). */
int gpu_status_fd(const struct gpu *g);
/* The model's own mapping, for in-process readers and tests. */
const struct gpu_status_shared *gpu_status_get(const struct gpu *g);

/* ---- MMU ---- */
/* Drop @fn's TLB entries overlapping [va, va+size) in every engine (size 0: all). */
void gpu_tlb_invalidate(struct gpu *g, unsigned int fn, uint64_t va, uint64_t size);
/* Translate @va for @fn with page directory @pdb as an engine would (no TLB); for tests and
 * debugging. On success *aper is VGPU_GMMU_APER_*, *addr the device VRAM offset, IOVA or SVA address,
 * *page_size the leaf size. Returns 0 or a positive enum vgpu_fault_reason. */
int gpu_mmu_translate(struct gpu *g, unsigned int fn, uint64_t pdb, uint64_t va, int access,
		      uint64_t *aper, uint64_t *addr, uint64_t *page_size);
/* Wait until no engine executes @fn's channel @chid (call after freeing or disabling it in
 * the privileged region): afterwards no engine touches its GPFIFO, USERD or pushbuffers, so
 * their memory may be reused. A freed channel's turn stops at its next method or chunk,
 * whatever is left of its slice. 0, -EINVAL (bad ids) or -ETIMEDOUT after @timeout_ns. */
int gpu_chan_quiesce(struct gpu *g, unsigned int fn, unsigned int chid, uint64_t timeout_ns);
/* Fence off @fn's channel @chid as the privileged region has it (its gen, allocated or
 * freed), for the owner when the GSP failed to free a channel it may still hold: no engine
 * picks that allocation again, its doorbells count as invalid and a turn of it in progress
 * stops at its next method or chunk (wait for that with gpu_chan_quiesce()). A restore of it
 * (GPU_CHAN_RESTORE, same gen) stays fenced; the next allocation of the id, made once the
 * GSP freed it (a device reset's wipe, a VF reset that went through), is not. 0 or -EINVAL. */
int gpu_chan_fence(struct gpu *g, unsigned int fn, unsigned int chid);
/* Wait until no engine executes any channel of @fn, whose scheduler entry the caller
 * disabled (gpu_priv_sched_fn_set()): an engine gives up a disabled function's slice at its
 * next pick, so afterwards none runs it until it is enabled again, and what its engines
 * wrote is in memory. 0, -EINVAL (bad @fn), -EBUSY (the entry is enabled) or -ETIMEDOUT. */
int gpu_fn_quiesce(struct gpu *g, unsigned int fn, uint64_t timeout_ns);
/* Entries of a function's fault buffer: an overflow drops the fault's entry and raises
 * VGPU_INTR_FAULT_OVERFLOW. */
#define GPU_FAULT_BUF_ENTRIES	256u
/* Take the oldest fault entry of @fn. 0, or -EAGAIN if the buffer is empty. */
int gpu_fault_pop(struct gpu *g, unsigned int fn, struct vgpu_fault_entry *out);
/* Invalidate @fn's TLBs and resume its channels stalled on replayable faults. */
void gpu_fault_replay(struct gpu *g, unsigned int fn);
/* Put a stalled channel into its error state instead (-EINVAL if it is not stalled). */
int gpu_fault_cancel(struct gpu *g, unsigned int fn, unsigned int chid);

/* ---- interrupts ---- */
/* eventfd signalled when @fn's interrupt status gains a bit. */
int gpu_intr_fd(const struct gpu *g, unsigned int fn);
/* Read and clear @fn's interrupt status bits in @mask (VGPU_INTR_*). */
uint32_t gpu_intr_ack(struct gpu *g, unsigned int fn, uint32_t mask);

/* ---- scheduler telemetry: the fields of NVIDIA's SW-runlist log, per function ---- */
struct gpu_sched_stats {
	uint64_t run_ns;		/* time the function ran on an engine */
	uint64_t preempt_ns;		/* time from slice expiry to switch-out */
	uint64_t idle_ns;		/* time in its own reserved slice with nothing to run */
	uint64_t target_slice_ns;	/* slice it is given now */
	uint64_t slices;		/* slices granted */
	uint64_t preempt_timeouts;	/* channels errored for not yielding */
	uint64_t stall_ns;		/* host took the engine thread away: not charged */
	uint64_t preempted;		/* slices cut short for a function owed time */
	uint64_t lingered;		/* submissions a caught-up channel's turn went on with */
	uint64_t linger_waits;		/* waits for one begun (counted as each begins) */
};
/* Telemetry of @fn summed over engines. */
void gpu_sched_stats(struct gpu *g, unsigned int fn, struct gpu_sched_stats *out);

/* ---- migration: what a quiesced function's device state carries to another device ---- */
/* A channel's runtime, as the engines know it. */
struct gpu_chan_mig {
	uint32_t gp_get, gp_put;	/* GP entries consumed; the last GP_PUT accepted */
	enum gpu_chan_state state;	/* IDLE or ERROR (a quiesced channel) */
	enum vgpu_chan_error error;
	uint64_t methods;
};
/* The runtime of @fn's channel @chid, which must be quiesced: allocated, no engine on it,
 * nothing pending (IDLE) or stopped (ERROR). 0, -EINVAL (bad ids), -ENOENT (free), -EBUSY
 * (running, work pending, stalled on a fault). */
int gpu_chan_mig_save(struct gpu *g, unsigned int fn, unsigned int chid, struct gpu_chan_mig *out);
/* Give @fn's channel @chid, allocated and not yet enabled, the runtime @in (so its next
 * doorbell continues at @in->gp_get instead of entry 0). 0, -EINVAL (bad ids or values),
 * -ENOENT (not allocated), -EBUSY (enabled, resident or running). */
int gpu_chan_mig_load(struct gpu *g, unsigned int fn, unsigned int chid,
		      const struct gpu_chan_mig *in);
/* Set @fn's scheduler counters to @in (all on engine 0, the other engines' at 0;
 * target_slice_ns is not a counter and is kept): the counters continue from a source's. */
void gpu_sched_stats_set(struct gpu *g, unsigned int fn, const struct gpu_sched_stats *in);

#endif
