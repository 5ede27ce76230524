/* SPDX-License-Identifier: MIT */
/* common/share.h - CPU priority by share: the rule that puts the threads serving a tenant
 * that used more than its share behind the threads serving a light one.
 *
 * Work for many tenants (VFs) is served by threads that run it one request at a time: the
 * daemon's per-VF service threads, the GSP's lane threads. Each counts the requests it
 * serves per tenant in fixed windows of CMN_SHARE_WINDOW_NS; a plane counts them for all
 * tenants together (the requests, and the tenants that had any). A tenant served at most
 * CMN_SHARE_LIGHT per mille of a fair share (all requests over the tenants that had some)
 * in the last complete window, or alone, has its requests run at nice 0 in the next one;
 * any other at nice CMN_SHARE_NICE_BUSY. A light tenant's thread, woken by its request,
 * then runs ahead of the busy ones' on a loaded CPU; tenants that are all busy share the
 * CPU as before (nice is relative), and a flood is slowed, never stopped (nice weighs only
 * contended CPU time). */
#ifndef VGPU_COMMON_SHARE_H
#define VGPU_COMMON_SHARE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"

#define CMN_SHARE_WINDOW_NS	(50 * VGPU_NSEC_PER_MSEC)	/* the share's window */
#define CMN_SHARE_LIGHT		750	/* per mille of a fair share: light up to this */
#define CMN_SHARE_NICE_BUSY	19	/* the nice of a tenant that is not light */

/* One window's counts, all tenants (a plane keeps two: the current and the last). */
struct cmn_share_window {
	_Atomic uint64_t id;		/* the window these counts are of */
	_Atomic uint64_t total;		/* requests served, all tenants */
	_Atomic uint32_t active;	/* tenants served at least once */
};

/* The counts of every tenant served by one set of threads. Zeroed memory is ready. */
struct cmn_share_plane {
	struct cmn_share_window w[2];
	_Atomic int renice;		/* 1: may lower a nice again; -1: may not; 0: unknown */
};

/* One tenant's counts as one thread sees them (that thread alone writes them). */
struct cmn_share_user {
	uint64_t win;			/* the window @served is of */
	uint64_t served;		/* requests served in it */
	int nice;			/* what the last window gave it */
};

/* The nice for a tenant that was served @served of @total requests, served to @active
 * tenants, in the last window: 0 if that is at most CMN_SHARE_LIGHT of a fair share
 * (total / active) or fewer than two tenants were served, CMN_SHARE_NICE_BUSY otherwise. */
int cmn_share_nice(uint64_t served, uint64_t total, uint32_t active);

/* Count one request of @u in window @win (a time over CMN_SHARE_WINDOW_NS; never going
 * back) in @p; on @u's first request of a window, @u->nice is set by what it was served in
 * the one before. Returns @u->nice: the nice its requests run at in window @win. */
int cmn_share_count(struct cmn_share_plane *p, struct cmn_share_user *u, uint64_t win);

/* The share window of @now_ns. */
static inline uint64_t cmn_share_window(uint64_t now_ns)
{
	return now_ns / CMN_SHARE_WINDOW_NS;
}

/* Whether this process may lower a thread's nice again (what a nice-19 thread needs:
 * CAP_SYS_NICE or RLIMIT_NICE of 20); the first "no" is logged once, naming @who. */
bool cmn_share_may_renice(struct cmn_share_plane *p, const char *who);

/* Run the calling thread at @nice. 0 or -errno (a refused lowering warned once, others at
 * debug level, naming @who). */
int cmn_share_set_nice(int nice, const char *who);

/* The shortest scheduler slice a thread may ask for (Linux clamps to 0.1-100 ms). */
#define CMN_SHARE_SLICE_MIN_NS	(100 * VGPU_NSEC_PER_USEC)

/* Give the calling thread a scheduler slice of @slice_ns (0: the host's default), its nice
 * and policy kept (the host scheduler's custom slice, Linux 6.12 and later; older kernels
 * ignore it): woken, it preempts a thread running a longer slice at once instead of
 * waiting up to that slice's end. Its share of the CPU does not change. For a thread whose
 * wake-up latency is what a tenant waits for. 0 or -errno (logged at debug level, naming
 * @who). */
int cmn_share_set_slice(uint64_t slice_ns, const char *who);

#endif
