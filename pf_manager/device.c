// SPDX-License-Identifier: MIT
/* The device: emulated GPU, device VRAM allocator with the PF spare, slice types and
 * placement of VF partitions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "common/log.h"
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "pma/pma.h"
#include "pf_manager/pf_internal.h"

#define PF_TYPE_MAX_CHANNELS	GPU_FN_MAX_CHANNELS
#define PF_TYPE_MAX_DOORBELLS	256u

uint64_t pf_usable_vram(const struct pf_daemon *d)
{
	return d->cfg.vram_size - d->cfg.spare_vram;
}

static int pf_pma_init(struct pf_daemon *d)
{
	struct pma_region_desc desc = { .base = 0, .size = d->cfg.vram_size, .performance = 1 };
	struct pma_alloc_opts opts = { .flags = PMA_PINNED };
	int ret;

	d->pma = pma_create(NULL);
	if (!d->pma)
		return -ENOMEM;
	ret = pma_region_add(d->pma, &desc, NULL, 0);
	if (ret < 0)
		goto destroy;
	/* The PF spare sits at the bottom of VRAM: the PF's own allocations never move and
	 * every VF partition is carved above it. */
	if (d->cfg.spare_vram) {
		ret = pma_alloc_fixed(d->pma, 0, d->cfg.spare_vram, &opts);
		if (ret)
			goto destroy;
	}
	d->pma_free_at_start = pma_free_bytes(d->pma);
	return 0;
destroy:
	pma_destroy(d->pma);
	d->pma = NULL;
	return ret;
}

int pf_device_init(struct pf_daemon *d)
{
	struct gpu_config gc = {
		.vram_size = d->cfg.vram_size,
		.nr_vfs = d->cfg.max_vfs,
		.nr_engines = d->cfg.engines,
	};
	int ret;

	/* The device's system aperture: each VF's DMA memory is mapped in its own domain. */
	ret = iommu_create(NULL, &d->iommu);
	if (ret) {
		cmn_err("vgpud: cannot create the IOMMU: %s", cmn_strerror(ret));
		return ret;
	}
	gc.iommu = d->iommu;
	ret = gpu_create(&gc, &d->gpu);
	if (ret) {
		cmn_err("vgpud: cannot create the GPU (%s VRAM, %u VFs): %s", d->cfg.model,
			 d->cfg.max_vfs, cmn_strerror(ret));
		goto destroy_iommu;
	}
	ret = pf_pma_init(d);
	if (ret)
		goto destroy_gpu;
	ret = pf_rm_init(d);
	if (ret)
		goto destroy_pma;
	/* Privileged state is the GSP's to write: the policy goes through the RM, which
	 * also replays it after a device reset. */
	ret = pf_rm_sched_set(d, d->cfg.sched_policy, (uint64_t)d->cfg.sched_quantum_us * 1000ull);
	if (ret) {
		cmn_err("scheduler policy refused: %s", cmn_strerror(ret));
		goto fini_rm;
	}
	pf_types_build(d);
	return 0;
fini_rm:
	pf_rm_fini(d);
destroy_pma:
	pma_destroy(d->pma);
	d->pma = NULL;
destroy_gpu:
	gpu_destroy(d->gpu);
	d->gpu = NULL;
destroy_iommu:
	iommu_destroy(d->iommu);
	d->iommu = NULL;
	return ret;
}

void pf_device_fini(struct pf_daemon *d)
{
	/* The RM first: it frees its clients and takes every partition (and its child
	 * allocator) back; none of that touches VRAM contents, which the next daemon adopts. */
	if (d->rm)
		pf_rm_fini(d);
	for (unsigned int i = 0; i < d->nr_slices; i++)
		d->slices[i]->child = NULL;
	if (d->pma)
		pma_destroy(d->pma);
	d->pma = NULL;
	gpu_destroy(d->gpu);
	d->gpu = NULL;
	/* Last: the engines are stopped, nothing translates through it any more. */
	if (d->iommu)
		iommu_destroy(d->iommu);
	d->iommu = NULL;
}

static void type_counts(const struct pf_daemon *d, unsigned int inst, struct pf_quota *q)
{
	unsigned int ch = (d->cfg.channels - d->cfg.spare_channels) / (inst ? inst : 1);
	unsigned int db = (d->cfg.doorbells - d->cfg.spare_doorbells) / (inst ? inst : 1);

	q->channels = cmn_max(1u, cmn_min(ch, PF_TYPE_MAX_CHANNELS));
	q->doorbells = cmn_max(1u, cmn_min(db, PF_TYPE_MAX_DOORBELLS));
	q->priority = PF_PRIO_NORMAL;
	pf_rm_limits_default(q);
}

void pf_rm_limits_default(struct pf_quota *q)
{
	uint64_t objs = (q->vram >> 30) * PF_RM_OBJECTS_PER_GIB;

	/* Bounded so that one guest can make vgpud hold only so much, and tear down only
	 * so much when it goes. */
	q->rm_clients = PF_RM_CLIENTS_DEFAULT;
	q->rm_objects = (uint32_t)cmn_min(cmn_max(objs, (uint64_t)PF_RM_OBJECTS_MIN), 65536ull);
}

static void size_suffix(uint64_t v, char *buf, size_t len)
{
	if (v >= VGPU_GiB)
		snprintf(buf, len, "%lluG", (unsigned long long)(v >> 30));
	else
		snprintf(buf, len, "%lluM", (unsigned long long)(v >> 20));
}

void pf_types_build(struct pf_daemon *d)
{
	uint64_t usable = pf_usable_vram(d);
	unsigned int n = 0;
	char sz[12], model[21];

	snprintf(model, sizeof(model), "%.20s", d->cfg.model);

	/* Power-of-two profiles from the largest that fits down to 64 MiB or the size at
	 * which max_vfs instances fit, like NVIDIA's -1Q/-2Q/-4Q families. */
	for (uint64_t v = 1ull << cmn_fls(usable); v >= PF_MIN_TYPE_VRAM && n < PF_MAX_TYPES - 1;
	     v >>= 1) {
		struct pf_type *t = &d->types[n++];
		uint64_t inst = usable / v;

		memset(t, 0, sizeof(*t));
		size_suffix(v, sz, sizeof(sz));
		snprintf(t->name, sizeof(t->name), "%s-%.9s", model, sz);
		t->max_instances = (unsigned int)cmn_min(inst, (uint64_t)d->cfg.max_vfs);
		t->q.vram = v;
		type_counts(d, t->max_instances, &t->q);
		if (inst >= d->cfg.max_vfs)
			break;
	}
	memset(&d->types[n], 0, sizeof(d->types[n]));
	snprintf(d->types[n].name, sizeof(d->types[n].name), "%s-auto", model);
	d->types[n].max_instances = d->cfg.max_vfs;
	d->types[n].q.priority = PF_PRIO_NORMAL;
	d->nr_types = n + 1;
}

const struct pf_type *pf_type_find(const struct pf_daemon *d, const char *name)
{
	for (unsigned int i = 0; i < d->nr_types; i++)
		if (!strcmp(d->types[i].name, name))
			return &d->types[i];
	return NULL;
}

void pf_used_counts(const struct pf_daemon *d, uint32_t *channels, uint32_t *doorbells)
{
	*channels = *doorbells = 0;
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		if (d->vfs[vf]) {
			*channels += d->vfs[vf]->prov.channels;
			*doorbells += d->vfs[vf]->prov.doorbells;
		}
	}
}

int pf_place(struct pf_daemon *d, uint64_t vram, uint64_t *base, struct pf_err *e)
{
	struct pma_alloc_opts opts = { .flags = PMA_CONTIGUOUS | PMA_PINNED | PMA_DONT_EVICT };
	size_t count = vram / PF_VRAM_ALIGN;
	char a[32], b[32], c[32];
	uint64_t *pages;
	int ret;

	pages = malloc(count * sizeof(*pages));
	if (!pages)
		return cmn_fail(&e->f, -ENOMEM, "out of memory placing %llu bytes",
			       (unsigned long long)vram);
	/* Allocate and give back: the allocator's own contiguous search is the placement
	 * policy, and the daemon is single-threaded so nothing takes the range between. */
	ret = pma_alloc_pages(d->pma, count, PMA_PAGE_2M, &opts, pages);
	if (!ret) {
		*base = pages[0];
		pma_free_range(d->pma, pages[0], vram, PMA_FREE_SKIP_SCRUB);
	} else {
		ret = cmn_fail(&e->f, -ENOSPC, "needs %s contiguous VRAM; %s free, largest free extent %s",
			      ctlc_size_format(vram, a, sizeof(a)),
			      ctlc_size_format(pma_free_bytes(d->pma), b, sizeof(b)),
			      ctlc_size_format(pma_largest_free(d->pma), c, sizeof(c)));
		if (e) {
			e->data = json_object_new_object();
			json_object_object_add(e->data, "resource", json_object_new_string("vram"));
			pf_json_add_u64(e->data, "needed_bytes", vram);
			pf_json_add_u64(e->data, "free_bytes", pma_free_bytes(d->pma));
			pf_json_add_u64(e->data, "largest_free_bytes", pma_largest_free(d->pma));
		}
	}
	free(pages);
	return ret;
}

static unsigned int type_running(const struct pf_daemon *d, const char *name)
{
	unsigned int n = 0;

	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		if (d->vfs[vf] && !strcmp(d->vfs[vf]->type, name))
			n++;
	return n;
}

/* Channel and doorbell budget check for @q. A running slice of uuid @self (or none: NULL)
 * would trade its counts for @q's, so its own are not counted as used. */
static int counts_fit(const struct pf_daemon *d, const struct pf_quota *q, const char *self,
		      struct pf_err *e)
{
	uint32_t ch, db;
	unsigned int ch_free, db_free;

	pf_used_counts(d, &ch, &db);
	for (unsigned int vf = 1; self && vf <= PF_MAX_VFS; vf++) {
		if (d->vfs[vf] && !strcmp(d->vfs[vf]->uuid, self)) {
			ch -= d->vfs[vf]->prov.channels;
			db -= d->vfs[vf]->prov.doorbells;
		}
	}
	ch_free = d->cfg.channels - d->cfg.spare_channels - ch;
	db_free = d->cfg.doorbells - d->cfg.spare_doorbells - db;
	if (q->channels > ch_free)
		return cmn_fail(&e->f, -ENOSPC, "needs %u channels; %u free", q->channels, ch_free);
	if (q->doorbells > db_free)
		return cmn_fail(&e->f, -ENOSPC, "needs %u doorbells; %u free", q->doorbells, db_free);
	return 0;
}

int pf_type_creatable(struct pf_daemon *d, const struct pf_type *t, struct pf_err *e)
{
	struct pf_quota q = t->q;
	uint64_t base;

	if (!d->num_vfs)
		return cmn_fail(&e->f, -ENOSPC, "no VFs enabled (set-vfs first)");
	if (!pf_free_vf(d))
		return cmn_fail(&e->f, -ENOSPC, "no free VF: %u of %u enabled VFs in use", d->num_vfs,
			       d->num_vfs);
	if (type_running(d, t->name) >= t->max_instances)
		return cmn_fail(&e->f, -ENOSPC, "max instances (%u) reached", t->max_instances);
	if (!q.vram) {
		q.vram = pf_fair_vram(pf_usable_vram(d), d->num_vfs);
		type_counts(d, d->num_vfs, &q);
	}
	if (counts_fit(d, &q, NULL, e))
		return -ENOSPC;
	return pf_place(d, q.vram, &base, e);
}

int pf_slice_quota(struct pf_daemon *d, const struct pf_slice *s, struct pf_quota *q,
		   struct pf_err *e)
{
	const struct pf_type *t = pf_type_find(d, s->type);

	if (!t)
		return cmn_fail(&e->f, -ENOENT, "slice %s: type \"%s\" is not supported", s->uuid, s->type);
	*q = t->q;
	if (!q->vram) {
		if (!d->num_vfs)
			return cmn_fail(&e->f, -ENOSPC, "slice %s: type %s needs enabled VFs (set-vfs)",
				       s->uuid, s->type);
		q->vram = pf_fair_vram(pf_usable_vram(d), d->num_vfs);
		type_counts(d, d->num_vfs, q);
	}
	if (s->custom_bits & PF_Q_VRAM)
		q->vram = cmn_align_up(s->custom.vram, PF_VRAM_ALIGN);
	if (s->custom_bits & PF_Q_CHANNELS)
		q->channels = s->custom.channels;
	if (s->custom_bits & PF_Q_DOORBELLS)
		q->doorbells = s->custom.doorbells;
	if (s->custom_bits & PF_Q_EXEC)
		q->exec_quantum_us = s->custom.exec_quantum_us;
	if (s->custom_bits & PF_Q_PREEMPT)
		q->preempt_timeout_us = s->custom.preempt_timeout_us;
	if (s->custom_bits & PF_Q_PRIO)
		q->priority = s->custom.priority;
	if (s->custom_bits & PF_Q_VRAM)
		pf_rm_limits_default(q);	/* follow the slice's own VRAM */
	if (s->custom_bits & PF_Q_RM_CLIENTS)
		q->rm_clients = s->custom.rm_clients;
	if (s->custom_bits & PF_Q_RM_OBJECTS)
		q->rm_objects = s->custom.rm_objects;
	if (!q->vram)
		return cmn_fail(&e->f, -ENOSPC, "slice %s: the fair share of %u VFs is below 2 MiB",
			       s->uuid, d->num_vfs);
	return counts_fit(d, q, s->uuid, e);
}
