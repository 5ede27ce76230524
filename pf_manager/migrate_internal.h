/* SPDX-License-Identifier: MIT */
/* pf_manager's migration internals: what migrate.c (the stream of a slice, save and
 * restore) shares with migrate_live.c (live migration between two vgpuds), and the live
 * migration's hooks into the daemon's loop and command table. */
#ifndef VGPU_PF_MIGRATE_INTERNAL_H
#define VGPU_PF_MIGRATE_INTERNAL_H

#include "pf_manager/pf_internal.h"

/* ---- migrate.c ---- */

/* The BAR object's offset of @region of @s. */
uint64_t pf_mig_region_base(const struct pf_slice *s, enum mig_region region);
/* The SLICE frame's definition text of @s (malloc'ed; NULL without memory); @extra, if
 * not NULL, is added as member "live" (taken over). */
char *pf_mig_def(struct pf_daemon *d, const struct pf_slice *s, json_object *extra);

/* IOMMU mappings: how many, and their bytes together. */
struct pf_mig_maps {
	uint64_t count, bytes;
};

/* A destination's plan: what the SLICE frame says, checked against this daemon, and what
 * the load keeps aside until the commit. */
struct pf_mig_plan {
	struct pf_slice *s;		/* the slice to add (not yet in the table) */
	uint64_t vram, dma;
	unsigned int vf;
	uint64_t base;
	struct mig_totals tot;
	struct mig_sched_rec sched;	/* SCHED, applied at the commit (has_sched) */
	bool has_sched;
	struct pf_mig_maps maps;	/* a restore's check: the IOMMU records seen */
};

/* Parse the SLICE frame @fr and check this daemon's limits (no such UUID, type, VRAM,
 * DMA size, a free VF, contiguous VRAM); changes nothing. On failure @p->s may be set:
 * free it with pf_mig_plan_free(). */
int pf_mig_plan(struct pf_daemon *d, const struct mig_frame *fr, struct pf_mig_plan *p,
		struct pf_err *e);
void pf_mig_plan_free(struct pf_mig_plan *p);
/* Bring the planned slice up in RESUMING on its VF with an empty VRAM object; the slice
 * is in the table (returned), or nothing changed. */
int pf_mig_bring_up(struct pf_daemon *d, struct pf_mig_plan *p, struct pf_slice **out,
		    struct pf_err *e);
/* Load state frame @fr of @p's stream into @s: SCHED is kept in @p for the commit, any
 * other goes to pf_mig_state_load(). */
int pf_mig_load_frame(struct pf_daemon *d, struct pf_mig_plan *p, struct pf_slice *s,
		      const struct mig_frame *fr, struct pf_err *e);
/* Commit a loaded slice (the journal, then its definition file), give it the scheduler
 * counters @p kept, and take it RUNNING. */
int pf_mig_commit(struct pf_daemon *d, struct pf_slice *s, const struct pf_mig_plan *p,
		  struct pf_err *e);
/* Undo pf_mig_bring_up(): stop the slice (its object unlinked) and forget it. */
void pf_mig_discard(struct pf_daemon *d, struct pf_slice *s);

/* ---- migrate_state.c ---- */

/* The most IOMMU mappings a slice's domain takes from a stream: what its guest could make,
 * the DMA window and one mapping per RM object (@rm_objects), of twice its @dma_size
 * bytes of DMA memory at most. */
void pf_mig_state_map_limit(uint32_t rm_objects, uint64_t dma_size, struct pf_mig_maps *lim);
/* 0 if @have is within @lim, else -E2BIG naming IOMMU frame @seq and the limit. */
int pf_mig_state_maps_check(const struct pf_mig_maps *lim, const struct pf_mig_maps *have,
			    uint32_t seq, struct pf_err *e);
/* Give @s's VF the scheduler counters of SCHED record @c (a commit). */
void pf_mig_state_sched(struct pf_daemon *d, struct pf_slice *s, const struct mig_sched_rec *c);

/* ---- migrate_live.c (doc/migration.md "Live migration") ---- */

/* migrate-incoming {listen, uuid, type, owner_uid}: wait for one slice on "listen"; the
 * destination may hold it to a type's sizes and give it an owner uid of its own. */
int pf_live_incoming_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e);
int pf_live_outgoing_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e);
int pf_live_switchover_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			   struct pf_err *e);
int pf_live_status_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		       struct pf_err *e);
/* migrate-cancel {uuid | listen}: a source resumes unless its final END went out (then it
 * holds the slice); a destination discards. Taken in stop_copy too. */
int pf_live_cancel_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		       struct pf_err *e);
/* reclaim-slice {uuid}: drop the hand-over record of a slice that migrated out
 * unconfirmed, so that it can be started here again. */
int pf_live_reclaim_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			struct pf_err *e);
/* Whether @s is in a live migration (a mutating command about it is refused meanwhile). */
bool pf_live_busy(struct pf_daemon *d, const struct pf_slice *s);
/* A guest of @s detached (loop thread): true if @s is migrating out, whose guest's RM
 * state must stay for the switchover (its VMM leaves once the VM moved); a migration that
 * fails lets go of it then. */
bool pf_live_keep_guest(struct pf_daemon *d, const struct pf_slice *s);
/* Whether any live migration is in progress here (set-vfs waits for none). */
bool pf_live_active(struct pf_daemon *d);
/* The loop's descriptor that wakes it for a migration worker's request, or -1. */
int pf_live_pollfd(struct pf_daemon *d);
/* Run the workers' pending requests and reap finished workers (loop thread). */
void pf_live_handle(struct pf_daemon *d);
/* At shutdown: cancel every migration and join its worker (sources resume). */
void pf_live_fini(struct pf_daemon *d);

#endif
