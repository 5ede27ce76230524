// SPDX-License-Identifier: MIT
/* Device lifetime, interrupts, channel status and telemetry. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/log.h"
#include "gpu_model/gpu_internal.h"

#define PRIV_BYTES cmn_align_up(sizeof(struct gpu_priv_shared), 4096)

static int config_check(const struct gpu_config *cfg)
{
	if (cfg->vram_size % GPU_VRAM_ALIGN || cfg->vram_size > (1ull << 40))
		return -EINVAL;
	if (cfg->nr_vfs > GPU_MAX_FNS - 1 || cfg->nr_engines > GPU_MAX_ENGINES)
		return -EINVAL;
	return 0;
}

static int priv_init(struct gpu *g)
{
	void *rw, *ro;
	int ret;

	g->priv_kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (g->priv_kick_fd < 0)
		return -errno;
	g->priv_fd = memfd_create("vgpu-priv", MFD_CLOEXEC);
	if (g->priv_fd < 0) {
		ret = -errno;
		close(g->priv_kick_fd);
		return ret;
	}
	if (ftruncate(g->priv_fd, (off_t)PRIV_BYTES))
		goto fail;
	rw = mmap(NULL, PRIV_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, g->priv_fd, 0);
	if (rw == MAP_FAILED)
		goto fail;
	/* The device model's own view is read-only: it must never write privileged state. */
	ro = mmap(NULL, PRIV_BYTES, PROT_READ, MAP_SHARED, g->priv_fd, 0);
	if (ro == MAP_FAILED) {
		munmap(rw, PRIV_BYTES);
		goto fail;
	}
	g->priv_writer = calloc(1, sizeof(*g->priv_writer));
	if (!g->priv_writer) {
		munmap(ro, PRIV_BYTES);
		munmap(rw, PRIV_BYTES);
		errno = ENOMEM;
		goto fail;
	}
	g->priv_writer->sh = rw;
	g->priv_writer->g = g;
	g->priv_writer->kick_fd = -1;
	cmn_mutex_init(&g->priv_writer->lock);
	g->priv = ro;
	gpu_priv_format(rw, g->nr_fns, g->nr_engines, g->vram_size);
	return 0;
fail:
	ret = -errno;
	close(g->priv_fd);
	close(g->priv_kick_fd);
	g->priv_fd = -1;
	return ret;
}

static void priv_fini(struct gpu *g)
{
	gpu_priv_drop_writer(g);
	munmap((void *)g->priv, PRIV_BYTES);
	close(g->priv_fd);
	close(g->priv_kick_fd);
}

#define STATUS_BYTES cmn_align_up(sizeof(struct gpu_status_shared), 4096)

/* The status region: a memfd so the GSP, another process, can map it read-only. */
static int status_init(struct gpu *g)
{
	void *m;

	g->status_fd = memfd_create("vgpu-status", MFD_CLOEXEC);
	if (g->status_fd < 0)
		return -errno;
	if (ftruncate(g->status_fd, (off_t)STATUS_BYTES))
		return -errno;
	m = mmap(NULL, STATUS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, g->status_fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	g->status = m;
	g->status->magic = GPU_STATUS_MAGIC;
	g->status->nr_fns = g->nr_fns;
	for (unsigned int fn = 0; fn < g->nr_fns; fn++)
		for (unsigned int c = 0; c < GPU_FN_MAX_CHANNELS; c++)
			g->fns[fn].chans[c].st = &g->status->fns[fn].chans[c];
	return 0;
}

static int fns_init(struct gpu *g)
{
	size_t bytes = (size_t)g->nr_fns * 4096;
	int ret = status_init(g);

	if (ret)
		return ret;

	g->db_fd = memfd_create("vgpu-doorbells", MFD_CLOEXEC);
	if (g->db_fd < 0)
		return -errno;
	if (ftruncate(g->db_fd, (off_t)bytes))
		return -errno;
	g->db_pages = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, g->db_fd, 0);
	if (g->db_pages == MAP_FAILED) {
		g->db_pages = NULL;
		return -errno;
	}
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		struct gpu_fn *f = &g->fns[fn];

		f->id = fn;
		f->db = (struct vgpu_doorbell_page *)(g->db_pages + (size_t)fn * 4096);
		f->db_guard = -1;
		f->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		f->intr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (f->kick_fd < 0 || f->intr_fd < 0)
			return -errno;
	}
	return 0;
}

static void fns_fini(struct gpu *g)
{
	for (unsigned int fn = 0; fn < g->nr_fns; fn++) {
		if (g->fns[fn].kick_fd > 0)
			close(g->fns[fn].kick_fd);
		if (g->fns[fn].intr_fd > 0)
			close(g->fns[fn].intr_fd);
	}
	if (g->status)
		munmap(g->status, STATUS_BYTES);
	if (g->status_fd > 0)
		close(g->status_fd);
	if (g->db_pages)
		munmap(g->db_pages, (size_t)g->nr_fns * 4096);
	if (g->db_fd > 0)
		close(g->db_fd);
}

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int engine_init(struct gpu *g, struct gpu_engine *e, unsigned int id)
{
	int ret;

	e->g = g;
	e->id = id;
	e->cur_fn = -1;
	e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (e->wake_fd < 0 || e->epfd < 0)
		return -errno;
	ret = epoll_add(e->epfd, e->wake_fd);
	if (!ret)
		ret = epoll_add(e->epfd, g->priv_kick_fd);
	for (unsigned int fn = 0; !ret && fn < g->nr_fns; fn++)
		ret = epoll_add(e->epfd, g->fns[fn].kick_fd);
	return ret;
}

static void engines_stop(struct gpu *g, unsigned int started)
{
	uint64_t one = 1;

	atomic_store(&g->stop, true);
	for (unsigned int i = 0; i < started; i++)
		if (write(g->engines[i].wake_fd, &one, sizeof(one)) < 0)
			cmn_warn("gpu: cannot wake engine %u", i);
	for (unsigned int i = 0; i < started; i++)
		pthread_join(g->engines[i].thread, NULL);
	for (unsigned int i = 0; i < g->nr_engines; i++) {
		if (g->engines[i].wake_fd > 0)
			close(g->engines[i].wake_fd);
		if (g->engines[i].epfd > 0)
			close(g->engines[i].epfd);
	}
}

static int engines_start(struct gpu *g)
{
	unsigned int i;
	int ret = 0;

	for (i = 0; i < g->nr_engines && !ret; i++)
		ret = engine_init(g, &g->engines[i], i);
	if (ret)
		goto stop;
	for (i = 0; i < g->nr_engines; i++) {
		ret = -pthread_create(&g->engines[i].thread, NULL, gpu_engine_main, &g->engines[i]);
		if (ret)
			goto stop;
	}
	return 0;
stop:
	engines_stop(g, i);
	return ret;
}

int gpu_create(const struct gpu_config *cfg, struct gpu **out)
{
	struct gpu *g;
	int ret = config_check(cfg);

	if (ret) {
		cmn_err("gpu: bad configuration (VRAM %llu bytes, %u VFs, %u engines)",
			 (unsigned long long)cfg->vram_size, cfg->nr_vfs, cfg->nr_engines);
		return ret;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cfg = *cfg;
	if (!g->cfg.copy_stream_min)
		g->cfg.copy_stream_min = gpu_copy_stream_default();
	g->nr_fns = 1 + cfg->nr_vfs;
	g->nr_engines = cfg->nr_engines ? cfg->nr_engines : 1;
	cmn_mutex_init(&g->lock);
	cmn_mutex_init(&g->db_lock);
	ret = gpu_vram_init(g, cfg->vram_size ? cfg->vram_size : GPU_DEFAULT_VRAM);
	if (ret)
		goto free_g;
	ret = priv_init(g);
	if (ret)
		goto vram_fini;
	ret = fns_init(g);
	if (ret)
		goto fns_fini;
	cmn_mutex_lock(&g->lock);
	gpu_priv_sync_locked(g);
	cmn_mutex_unlock(&g->lock);
	ret = engines_start(g);
	if (ret)
		goto fns_fini;
	*out = g;
	return 0;
fns_fini:
	fns_fini(g);
	priv_fini(g);
vram_fini:
	gpu_vram_fini(g);
free_g:
	cmn_mutex_destroy(&g->db_lock);
	cmn_mutex_destroy(&g->lock);
	free(g);
	cmn_err("gpu: cannot create the device: %s", cmn_strerror(ret));
	return ret;
}

void gpu_destroy(struct gpu *g)
{
	if (!g)
		return;
	engines_stop(g, g->nr_engines);
	fns_fini(g);
	priv_fini(g);
	gpu_vram_fini(g);
	cmn_mutex_destroy(&g->db_lock);
	cmn_mutex_destroy(&g->lock);
	free(g);
}

unsigned int gpu_nr_fns(const struct gpu *g)
{
	return g->nr_fns;
}

unsigned int gpu_nr_engines(const struct gpu *g)
{
	return g->nr_engines;
}

int gpu_priv_fd(const struct gpu *g)
{
	return g->priv_fd;
}

int gpu_priv_kick_fd(const struct gpu *g)
{
	return g->priv_kick_fd;
}

struct gpu_priv *gpu_priv_get(struct gpu *g)
{
	return g->priv_writer;
}

/* Only the GSP may write once it runs: the owner keeps the fd (to start a new GSP) and
 * its read-only view, and nothing in this process can store to the region any more. */
void gpu_priv_drop_writer(struct gpu *g)
{
	struct gpu_priv *w = g->priv_writer;

	if (!w)
		return;
	g->priv_writer = NULL;
	munmap(w->sh, PRIV_BYTES);
	cmn_mutex_destroy(&w->lock);
	free(w);
}

const struct gpu_priv_shared *gpu_priv_view(const struct gpu *g)
{
	return g->priv;
}

/* ---- interrupts ---- */

void gpu_intr_raise(struct gpu *g, struct gpu_fn *f, uint32_t bits)
{
	uint32_t old = atomic_fetch_or(&f->intr, bits);
	uint64_t one = 1;

	(void)g;
	/* Signal only new bits: the handler reads the status, so one wakeup covers many. */
	if ((old & bits) != bits && write(f->intr_fd, &one, sizeof(one)) < 0)
		cmn_dbg("gpu: interrupt eventfd of function %u: %d", f->id, errno);
}

int gpu_status_fd(const struct gpu *g)
{
	return g->status_fd;
}

const struct gpu_status_shared *gpu_status_get(const struct gpu *g)
{
	return g->status;
}

int gpu_chan_error(struct gpu *g, unsigned int fn, unsigned int chid, enum vgpu_chan_error err)
{
	struct gpu_fn *f;
	struct gpu_chan *c;
	int ret = 0;

	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS || err <= VGPU_CHAN_OK ||
	    err >= VGPU_CHAN_ERR_NR)
		return -EINVAL;
	f = &g->fns[fn];
	c = &f->chans[chid];
	cmn_mutex_lock(&g->lock);
	gpu_priv_sync_locked(g);
	if (atomic_load(&c->state) == GPU_CHAN_STATE_FREE)
		ret = -ENOENT;
	else if (c->running)	/* its engine owns the runtime: the caller did not quiesce */
		ret = -EBUSY;
	else if (atomic_load(&c->state) == GPU_CHAN_STATE_ERROR)
		ret = -EALREADY;
	else
		gpu_chan_set_error(g, f, c, f->cfg.part_base, f->cfg.part_size, err, 0xffffffffu);
	cmn_mutex_unlock(&g->lock);
	return ret;
}

int gpu_intr_fd(const struct gpu *g, unsigned int fn)
{
	return fn < g->nr_fns ? g->fns[fn].intr_fd : -EINVAL;
}

uint32_t gpu_intr_ack(struct gpu *g, unsigned int fn, uint32_t mask)
{
	if (fn >= g->nr_fns)
		return 0;
	return atomic_fetch_and(&g->fns[fn].intr, ~mask) & mask;
}

/* ---- status and telemetry ---- */

int gpu_chan_status(struct gpu *g, unsigned int fn, unsigned int chid, struct gpu_chan_status *out)
{
	struct gpu_chan *c;

	if (fn >= g->nr_fns || chid >= GPU_FN_MAX_CHANNELS)
		return -EINVAL;
	c = &g->fns[fn].chans[chid];
	cmn_mutex_lock(&g->lock);
	gpu_priv_sync_locked(g);
	/* Freed while an engine runs its turn: the turn's end may still write its own state
	 * over FREE until the engine takes the lock again (engine_run_locked puts it right). */
	if (!(g->fns[fn].cfg.chans[chid].flags & GPU_CHAN_ALLOCATED))
		out->state = GPU_CHAN_STATE_FREE;
	else
		out->state = atomic_load(&c->state);
	out->error = atomic_load(&c->error);
	out->gp_get = atomic_load(&c->pub_gp_get);
	out->methods = atomic_load(&c->methods);
	cmn_mutex_unlock(&g->lock);
	return 0;
}

void gpu_sched_stats(struct gpu *g, unsigned int fn, struct gpu_sched_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (fn >= g->nr_fns)
		return;
	cmn_mutex_lock(&g->lock);
	for (unsigned int e = 0; e < g->nr_engines; e++) {
		const struct gpu_sched_stats *t = &g->fns[fn].tel[e];

		out->run_ns += t->run_ns;
		out->preempt_ns += t->preempt_ns;
		out->idle_ns += t->idle_ns;
		out->slices += t->slices;
		out->preempt_timeouts += t->preempt_timeouts;
		out->stall_ns += t->stall_ns;
		out->preempted += t->preempted;
		out->lingered += t->lingered;
		out->target_slice_ns = cmn_max(out->target_slice_ns, t->target_slice_ns);
	}
	out->linger_waits = atomic_load_explicit(&g->fns[fn].linger_waits, memory_order_relaxed);
	cmn_mutex_unlock(&g->lock);
}
