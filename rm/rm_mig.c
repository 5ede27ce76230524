// SPDX-License-Identifier: MIT
/* Migration export: a function's clients and objects as flat records in an order a
 * destination can re-create them in (rm_obj_import(), rm_res.c). Objects are numbered at
 * creation (rm_res.seq); a record follows its parent, its dependency (a channel's VA space,
 * which a BIND may have made newer than the channel) and the source of a dup, so the order
 * is creation order raised where a dependency is newer. The function's API lock is held for
 * writing throughout: no call of the function runs, nothing is freed or created. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/compiler.h"
#include "rm/rm_internal.h"

struct mig_item {
	struct rm_res *r;
	struct rm_res *src;		/* memory: the oldest object holding the same rm_mem */
	uint64_t key;			/* order: above everything it needs */
	struct rm_obj_rec rec;
};

struct mig_walk {
	struct mig_item *it;
	size_t n, cap;
};

/* Comparisons the calling thread's export made (sorts and lookups): what makes its cost
 * n log n, counted so that a test tells it from a scan per object without a clock. Per
 * thread: exports of different functions run at once. */
static __thread uint64_t mig_steps;

uint64_t rm_mig_last_steps(void)
{
	return mig_steps;
}

static int walk_add(struct mig_walk *w, struct rm_res *r)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		struct mig_item *n = realloc(w->it, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		w->it = n;
		w->cap = cap;
	}
	w->it[w->n++] = (struct mig_item){ .r = r, .key = r->seq * 64 };
	return 0;
}

/* Every object of locked client @c, its root first (explicit stack: no recursion). */
static int walk_client(struct mig_walk *w, struct rm_client *c)
{
	size_t first = w->n;
	int ret = walk_add(w, &c->root);

	rm_client_assert_held(c);
	for (size_t i = first; !ret && i < w->n; i++) {
		struct rm_res *r = w->it[i].r;

		for (struct cmn_list *l = r->children.next; !ret && l != &r->children; l = l->next)
			ret = walk_add(w, cmn_container_of(l, struct rm_res, sibling));
	}
	return ret;
}

static int item_by_res(const void *a, const void *b)
{
	const struct mig_item *x = a, *y = b;

	mig_steps++;
	return x->r < y->r ? -1 : x->r > y->r;
}

static int item_by_key(const void *a, const void *b)
{
	const struct mig_item *x = a, *y = b;

	mig_steps++;
	return x->key < y->key ? -1 : x->key > y->key;
}

static struct mig_item *find(struct mig_walk *w, const struct rm_res *r)
{
	struct mig_item k = { .r = (struct rm_res *)r };

	return r ? bsearch(&k, w->it, w->n, sizeof(k), item_by_res) : NULL;
}

static bool is_mem(const struct mig_item *a)
{
	return a->r->h_class == VGPU_RM_CLASS_MEMORY_VIDMEM ||
	       a->r->h_class == VGPU_RM_CLASS_MEMORY_SYSMEM;
}

/* Memory items grouped by the rm_mem they hold, oldest first within a group. */
static int mem_by_source(const void *a, const void *b)
{
	const struct rm_res *x = (*(const struct mig_item *const *)a)->r;
	const struct rm_res *y = (*(const struct mig_item *const *)b)->r;

	mig_steps++;
	if (x->h_class != y->h_class)
		return x->h_class < y->h_class ? -1 : 1;
	if (x->u.mem != y->u.mem)
		return (uintptr_t)x->u.mem < (uintptr_t)y->u.mem ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Give each memory item but the oldest of its rm_mem that oldest holder as its source: one
 * sort, so a guest's many dups of one object cost O(n log n), not a scan of every item per
 * dup. */
static int find_sources(struct mig_walk *w)
{
	struct mig_item **m = malloc(w->n * sizeof(*m));
	size_t nm = 0;

	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < w->n; i++)
		if (is_mem(&w->it[i]))
			m[nm++] = &w->it[i];
	qsort(m, nm, sizeof(*m), mem_by_source);
	for (size_t i = 1, first = 0; i < nm; i++) {
		const struct rm_res *a = m[first]->r, *b = m[i]->r;

		if (a->h_class == b->h_class && a->u.mem == b->u.mem)
			m[i]->src = m[first]->r;
		else
			first = i;
	}
	free(m);
	return 0;
}

/* Raise each key above what the object needs until nothing changes (chains are short:
 * depth, a channel's VA space, a dup's source). */
static int order(struct mig_walk *w)
{
	int ret;

	if (!w->n)
		return 0;
	qsort(w->it, w->n, sizeof(*w->it), item_by_res);
	ret = find_sources(w);
	if (ret)
		return ret;
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t i = 0; i < w->n; i++) {
			struct mig_item *a = &w->it[i];
			const struct rm_res *need[3] = { a->r->parent, a->r->depends_on, a->src };

			for (int k = 0; k < 3; k++) {
				struct mig_item *b = find(w, need[k]);

				if (b && b->key >= a->key) {
					a->key = b->key + 1;
					changed = true;
				}
			}
		}
	}
	qsort(w->it, w->n, sizeof(*w->it), item_by_key);
	return 0;
}

/* VRAM pages as runs of VF-physical addresses. */
static int vram_runs(const struct rm_mem *m, uint64_t base, struct rm_obj_rec *o)
{
	o->runs = calloc(2 * m->nr_pages, sizeof(uint64_t));
	if (!o->runs)
		return -ENOMEM;
	for (size_t i = 0; i < m->nr_pages; i++) {
		uint64_t *last = o->nr_runs ? &o->runs[2 * (o->nr_runs - 1)] : NULL;

		if (last && last[0] + last[1] * m->page_size == m->pages[i] - base) {
			last[1]++;
			continue;
		}
		o->runs[2 * o->nr_runs] = m->pages[i] - base;
		o->runs[2 * o->nr_runs + 1] = 1;
		o->nr_runs++;
	}
	return 0;
}

/* The record of item @a (its client locked, or held still by the API write lock). */
static int fill(struct rm *rm, struct mig_item *a)
{
	struct rm_res *r = a->r;
	struct rm_obj_rec *o = &a->rec;
	const struct rm_fn *f = &rm->fns[r->client->fn];

	*o = (struct rm_obj_rec){ .h_client = r->client->handle, .handle = r->handle,
		.h_class = r == &r->client->root ? 0 : r->h_class,
		.h_parent = r->parent ? r->parent->handle : 0,
		.share_target = r->share_target, .share_access = r->share_access };
	if (a->src) {
		o->dep_client = a->src->client->handle;
		o->dep_handle = a->src->handle;
		return 0;
	}
	switch (o->h_class) {
	case VGPU_RM_CLASS_VASPACE:
		o->a = r->u.vas.pdb;
		return 0;
	case VGPU_RM_CLASS_MEMORY_VIDMEM:
		o->a = r->u.mem->size;
		o->b = r->u.mem->page_size;
		return vram_runs(r->u.mem, f->base, o);
	case VGPU_RM_CLASS_MEMORY_SYSMEM:
		o->a = r->u.mem->size;
		o->b = r->u.mem->addr;
		o->c = r->u.mem->sys_off;
		return 0;
	case VGPU_RM_CLASS_EVENT:
		o->x = r->u.evt.notify_index;
		return 0;
	case VGPU_RM_CLASS_CHANNEL_GPFIFO: {
		const struct rm_chan_rec *ch = &f->chans[r->u.chan.chid];

		rm_dev_lock(rm);
		o->a = ch->cfg.gpfifo_va;
		o->b = r->u.chan.userd_addr;
		o->x = r->u.chan.chid;
		o->y = (uint32_t)ch->cfg.runlist;
		o->z = r->u.chan.entries;
		o->w = r->u.chan.userd_aper | (ch->cfg.flags & RM_CHAN_REPLAYABLE ?
			RM_OBJ_CHAN_REPLAYABLE : 0) | (ch->enabled ? RM_OBJ_CHAN_ENABLED : 0);
		rm_dev_unlock(rm);
		if (r->depends_on) {
			o->dep_client = r->client->handle;
			o->dep_handle = r->depends_on->handle;
		}
		return 0;
	}
	}
	return 0;
}

/* Lock each of @n clients in turn and add its objects. */
static int walk_clients(struct mig_walk *w, struct rm_client **list, size_t n)
{
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		rm_client_lock(list[i]);
		if (!ret && !list[i]->dead)
			ret = walk_client(w, list[i]);
		rm_client_unlock(list[i]);
	}
	return ret;
}

int rm_vf_export(struct rm *rm, unsigned int fn, struct rm_obj_rec **out, size_t *n)
{
	struct mig_walk w = { 0 };
	struct rm_client **list;
	struct rm_fn *f;
	size_t nc = 0;
	int ret = 0;

	if (!rm || fn >= rm->nr_fns || !out || !n)
		return -EINVAL;
	f = &rm->fns[fn];
	mig_steps = 0;
	rm_rcu_enter();
	rm_api_write(rm, fn);
	rm_dev_lock(rm);
	list = calloc(f->nr_clients + 1, sizeof(*list));
	for (struct cmn_list *l = f->clients.next; list && l != &f->clients; l = l->next)
		list[nc++] = cmn_container_of(l, struct rm_client, fn_link);
	rm_dev_unlock(rm);
	ret = list ? walk_clients(&w, list, nc) : -ENOMEM;
	if (!ret)
		ret = order(&w);
	if (!ret) {
		for (size_t i = 0; !ret && i < w.n; i++)
			ret = fill(rm, &w.it[i]);
	}
	rm_api_unlock(rm, fn);
	free(list);
	*out = ret ? NULL : calloc(w.n + 1, sizeof(**out));
	if (!ret && !*out)
		ret = -ENOMEM;
	for (size_t i = 0; i < w.n; i++) {
		if (ret)
			free(w.it[i].rec.runs);
		else
			(*out)[i] = w.it[i].rec;
	}
	*n = ret ? 0 : w.n;
	free(w.it);
	return ret;
}

void rm_obj_recs_free(struct rm_obj_rec *r, size_t n)
{
	for (size_t i = 0; r && i < n; i++)
		free(r[i].runs);
	free(r);
}
