// SPDX-License-Identifier: MIT
/* The PF manager's side of the shared RM: device creation (which starts the GSP process),
 * VF partitions, VF reset, guests' RM calls from the mailbox, and RM notifications and
 * device events (channel errors the GSP observed, forwarded to the VF). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/lock.h"
#include "common/log.h"
#include "gpu_model/gpu.h"
#include "rm/gsp/gsp.h"
#include "rm/hw/rm_hw.h"
#include "rm/rm.h"
#include "pf_manager/pf_internal.h"

/* Channel errors on their way from the RM's event worker to the daemon's loop, which alone
 * writes a VF's event ring (single producer). Per VF a small ring; when it is full the
 * oldest is dropped and counted: the event is only a wake-up hint, USERD.error is the
 * truth. */
#define GLUE_QUEUE	64

struct glue_chan_err {
	uint32_t chid, error;
};

/* The daemon's RM state (d->rm_glue): the device ops' context and the error rings. */
struct pf_rm_glue {
	struct rm_hw hw;		/* the RM's device ops over d->gpu and d->iommu */
	struct cmn_mutex lock;		/* protects everything below */
	struct glue_chan_err q[PF_MAX_VFS + 1][GLUE_QUEUE];
	unsigned int head[PF_MAX_VFS + 1], count[PF_MAX_VFS + 1];
	uint64_t dropped;
	/* Loop thread only: VFs whose gone guest's objects are still being freed. */
	bool teardown[PF_MAX_VFS + 1];
	unsigned int nr_teardown;
};

static void glue_push(struct pf_rm_glue *g, unsigned int vf, uint32_t chid, uint32_t error)
{
	cmn_mutex_lock(&g->lock);
	if (g->count[vf] == GLUE_QUEUE) {
		g->head[vf] = (g->head[vf] + 1) % GLUE_QUEUE;
		g->count[vf]--;
		g->dropped++;
	}
	g->q[vf][(g->head[vf] + g->count[vf]++) % GLUE_QUEUE] =
		(struct glue_chan_err){ .chid = chid, .error = error };
	cmn_mutex_unlock(&g->lock);
}

static bool glue_pop(struct pf_rm_glue *g, unsigned int vf, struct glue_chan_err *out)
{
	bool got;

	cmn_mutex_lock(&g->lock);
	got = g->count[vf] != 0;
	if (got) {
		*out = g->q[vf][g->head[vf]];
		g->head[vf] = (g->head[vf] + 1) % GLUE_QUEUE;
		g->count[vf]--;
	}
	cmn_mutex_unlock(&g->lock);
	return got;
}

/* A new partition's VF starts with nothing queued from its previous life. */
static void glue_clear(struct pf_rm_glue *g, unsigned int vf)
{
	cmn_mutex_lock(&g->lock);
	g->count[vf] = g->head[vf] = 0;
	cmn_mutex_unlock(&g->lock);
}

/* Runs on the RM's event worker: queue a VF's channel error and wake the daemon's loop
 * through the VF's interrupt eventfd, which it polls and answers with ep_forward_intr().
 * Faults need nothing here: the loop forwards the device's fault buffer itself. */
static void pf_rm_event(void *ctx, const struct rm_event *ev)
{
	struct pf_daemon *d = ctx;
	uint64_t one = 1;

	if (ev->kind != RM_EVENT_CHAN_ERROR || ev->fn == 0 || ev->fn > PF_MAX_VFS)
		return;
	glue_push(d->rm_glue, ev->fn, ev->chid, ev->code);
	if (write(gpu_intr_fd(d->gpu, ev->fn), &one, sizeof(one)) < 0)
		cmn_dbg("VF %u: waking the loop for a channel error: %s", ev->fn,
			 cmn_strerror(-errno));
}

void pf_rm_chan_events(struct pf_daemon *d, struct pf_slice *s)
{
	struct glue_chan_err e;

	while (glue_pop(d->rm_glue, s->vf, &e)) {
		s->chan_errors++;
		pf_endpoint_event2(s, VF_EVT_CHAN_ERROR, e.chid, e.error);
	}
}

/* Runs on the RM's GSP watchdog or event thread: only flag it for the daemon's loop. */
static void pf_rm_notify(void *ctx, unsigned int fn, enum rm_notify what)
{
	struct pf_daemon *d = ctx;

	if (what == RM_NOTIFY_DEVICE_RESET) {
		cmn_warn("rm: device reset (GSP restarted); VF %u state replayed", fn);
		atomic_fetch_add((_Atomic uint64_t *)&d->device_resets, 1);
	}
}

/* Where `make install` puts vgpu-gsp (its libexecdir/vgpu); the build passes the
 * configured one. */
#ifndef VGPU_GSP_DIR
#define VGPU_GSP_DIR "/usr/local/libexec/vgpu"
#endif

/* $VGPU_GSP, else a vgpu-gsp beside vgpud (the build tree: never an older installed one),
 * else the installed one in VGPU_GSP_DIR. */
static const char *pf_gsp_path(void)
{
	const char *p = gsp_default_path();

	if (!p && access(VGPU_GSP_DIR "/vgpu-gsp", X_OK) == 0)
		p = VGPU_GSP_DIR "/vgpu-gsp";
	return p;
}

#ifdef VGPU_TEST_HOOKS
/* VGPU_GSP_DEADLINE_MS=N: every RPC class waits N ms for the GSP. A test that holds the GSP
 * stopped keeps a call in flight for as long as it decides, not until the class's deadline.
 * Test builds only (vgpud-test): the product keeps the GSP client's deadlines. */
static void pf_test_gsp_deadline(struct gsp_config *gc)
{
	const char *v = getenv("VGPU_GSP_DEADLINE_MS");
	unsigned long long ms = v ? strtoull(v, NULL, 10) : 0;

	for (int c = 0; ms && c < GSP_CLASS_NR; c++)
		gc->deadline_ns[c] = ms * VGPU_NSEC_PER_MSEC;
}
#endif

int pf_rm_init(struct pf_daemon *d)
{
	struct gsp_config gc = { .path = pf_gsp_path() };
	struct rm_config rc = {
		.ops = &rm_hw_ops,
		.pma = d->pma,
		.notify = pf_rm_notify,
		.event = pf_rm_event,
		.notify_ctx = d,
		.gsp = &gc,
	};
	struct pf_rm_glue *g;
	int r;

#ifdef VGPU_TEST_HOOKS
	pf_test_gsp_deadline(&gc);
#endif
	if (!gc.path) {
		cmn_err("cannot find vgpu-gsp (in " VGPU_GSP_DIR ", next to vgpud, or named by "
			"$VGPU_GSP)");
		return -ENOENT;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->hw = (struct rm_hw){ .gpu = d->gpu, .iommu = d->iommu };
	cmn_mutex_init(&g->lock);
	/* Before the RM: its event worker may report an error as soon as it runs. */
	d->rm_glue = g;
	rc.ops_ctx = &g->hw;
	r = rm_device_create(&rc, &d->rm);
	if (r) {
		cmn_err("cannot start the RM and its GSP (%s): %s", gc.path, cmn_strerror(r));
		d->rm_glue = NULL;
		cmn_mutex_destroy(&g->lock);
		free(g);
	}
	return r;
}

void pf_rm_fini(struct pf_daemon *d)
{
	rm_device_destroy(d->rm);
	d->rm = NULL;
	if (d->rm_glue) {
		cmn_mutex_destroy(&d->rm_glue->lock);
		free(d->rm_glue);
		d->rm_glue = NULL;
	}
}

int pf_rm_partition_set(struct pf_daemon *d, struct pf_slice *s, unsigned int vf, uint64_t base)
{
	struct rm_partition p = {
		.base = base,
		.size = s->prov.vram,
		.quota = { .vram = s->prov.vram, .channels = s->prov.channels,
			   .clients = s->prov.rm_clients, .objects = s->prov.rm_objects },
		.dma_domain = s->dma_domain,
		.dma = s->dma_mo,
	};
	static const struct gpu_sched_stats zero;

	glue_clear(d->rm_glue, vf);
	/* The VF's scheduler and doorbell counters are its slice's: the one before (a failed
	 * migration's included) leaves none to this one. */
	gpu_sched_stats_set(d->gpu, vf, &zero);
	gpu_db_stats_reset(d->gpu, vf);
	return rm_vf_partition_set(d->rm, vf, &p);
}

int pf_rm_partition_clear(struct pf_daemon *d, unsigned int vf)
{
	int r = rm_vf_reset(d->rm, vf);

	if (r)
		cmn_warn("VF %u: RM reset before release: %s", vf, cmn_strerror(r));
	return rm_vf_partition_clear(d->rm, vf);
}

int pf_rm_partition_drop(struct pf_daemon *d, unsigned int vf)
{
	return rm_vf_partition_clear(d->rm, vf);
}

/* The child allocator the RM created over the VF's partition (for the VRAM map and
 * statistics); stable while the partition exists, and only this thread changes partitions. */
struct pma *pf_rm_vf_pma(struct pf_daemon *d, unsigned int vf)
{
	return rm_vf_pma(d->rm, vf);
}

int pf_rm_vf_reset(struct pf_daemon *d, unsigned int vf)
{
	/* A reset takes away everything the function could reach, the process too: the
	 * guest binds again when it rebuilds its state. */
	if (vf <= PF_MAX_VFS && d->vfs[vf])
		pf_endpoint_sva_unbind(d->vfs[vf], "VF reset");
	return rm_vf_reset(d->rm, vf);
}

void pf_rm_guest_gone(struct pf_daemon *d, unsigned int vf)
{
	struct pf_rm_glue *g = d->rm_glue;
	int r = rm_vf_disable(d->rm, vf);

	/* The guest's clients go with it; its VRAM stays (a reconnecting guest of the same
	 * owner finds it), so no scrub here: that is what a reset is for. Its objects are
	 * freed by pf_rm_teardown_step(), one batch per loop iteration, so other VFs'
	 * mailboxes and the control socket are served in between. */
	if (r)
		cmn_warn("VF %u: disabling its RM clients: %s", vf, cmn_strerror(r));
	if (vf <= PF_MAX_VFS && !g->teardown[vf]) {
		g->teardown[vf] = true;
		g->nr_teardown++;
	}
}

bool pf_rm_teardown_step(struct pf_daemon *d)
{
	struct pf_rm_glue *g = d->rm_glue;

	for (unsigned int vf = 1; vf <= PF_MAX_VFS && g->nr_teardown; vf++) {
		if (!g->teardown[vf])
			continue;
		d->teardown_batches++;
		if (rm_vf_free_disabled(d->rm, vf, PF_RESET_BATCH) != -EINPROGRESS) {
			g->teardown[vf] = false;
			g->nr_teardown--;
		}
	}
	return g->nr_teardown != 0;
}

int pf_rm_call(struct pf_daemon *d, unsigned int vf, const void *req, size_t len, void *reply,
	       size_t *reply_len)
{
	return rm_dispatch(d->rm, vf, req, len, reply, reply_len);
}

uint64_t pf_rm_objects(struct pf_daemon *d, unsigned int vf)
{
	return rm_object_count(d->rm, vf);
}

int pf_rm_sched_set(struct pf_daemon *d, int policy, uint64_t quantum_ns)
{
	return rm_sched_set(d->rm, (uint32_t)policy, quantum_ns);
}

int pf_rm_fn_sched_set(struct pf_daemon *d, unsigned int vf, bool enabled, uint64_t quantum_ns,
		       uint64_t preempt_timeout_ns, uint64_t weight)
{
	return rm_fn_sched_set(d->rm, vf, enabled, quantum_ns, preempt_timeout_ns, weight);
}

int pf_rm_quota_set(struct pf_daemon *d, unsigned int vf, const struct pf_quota *prov)
{
	struct rm_quota q = { .vram = prov->vram, .channels = prov->channels,
			      .clients = prov->rm_clients, .objects = prov->rm_objects };

	return rm_quota_set(d->rm, vf, &q);
}
