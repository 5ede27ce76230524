// SPDX-License-Identifier: MIT
/* Clients: handles with the function in their prefix, lock-free lookup through an RCU hash
 * table, object-handle generation and the object table per client. A client handle is
 * reused only after it was freed, and the generator walks on from where it stopped, so a
 * fresh handle is the one freed longest ago, never one still in use. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bitops.h"
#include "common/err.h"
#include "common/log.h"
#include "rm/rm_internal.h"

static unsigned long rm_hash(uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (unsigned long)key;
}

static int client_match(struct cds_lfht_node *node, const void *key)
{
	RM_TSAN_ACQUIRE(node);	/* released before cds_lfht_add() */
	return cmn_container_of(node, struct rm_client, node)->handle == *(const uint32_t *)key;
}

/* Find a clear bit in @map of @nbits from @start on, wrapping once; -1 if none. */
static long bit_find_from(const uint64_t *map, uint32_t nbits, uint32_t start)
{
	for (uint32_t n = 0; n < nbits; n++) {
		uint32_t i = (start + n) % nbits;

		if (!(map[i / 64] & (1ull << (i % 64))))
			return i;
	}
	return -1;
}

int rm_obj_charge(struct rm_client *c)
{
	struct rm *rm = c->rm;
	struct rm_fn *f = &rm->fns[c->fn];
	uint32_t lim;
	bool log = false;
	int ret = 0;

	rm_acct_lock(rm, c->fn);
	lim = f->quota.objects;
	if (lim && f->objs_used >= lim) {
		ret = -VGPU_EQUOTA;
		log = !f->obj_limit_logged;
		f->obj_limit_logged = true;
	} else {
		f->objs_used++;
	}
	rm_acct_unlock(rm, c->fn);
	/* Once per episode at the limit: a guest hammering it cannot flood the log. */
	if (log)
		cmn_warn("VF %u: RM object limit %u reached", c->fn, lim);
	return ret;
}

void rm_obj_uncharge(struct rm_client *c)
{
	struct rm *rm = c->rm;
	struct rm_fn *f = &rm->fns[c->fn];

	rm_acct_lock(rm, c->fn);
	VGPU_ASSERT(f->objs_used > 0);
	f->objs_used--;
	if (!f->quota.objects || f->objs_used < f->quota.objects)
		f->obj_limit_logged = false;
	rm_acct_unlock(rm, c->fn);
}

int rm_handle_take(struct rm_client *c, uint32_t *h)
{
	uint32_t max = c->rm->cfg.max_objects, idx;
	struct rm_obj_leaf **leaf;
	long got;

	if (*h) {
		if (*h < VGPU_RM_HANDLE_BASE || *h - VGPU_RM_HANDLE_BASE >= max)
			return -EINVAL;
		idx = *h - VGPU_RM_HANDLE_BASE;
		if (c->hmap[idx / 64] & (1ull << (idx % 64)))
			return -EEXIST;
	} else {
		got = bit_find_from(c->hmap, max, c->cursor);
		if (got < 0)
			return -ENOSPC;
		idx = (uint32_t)got;
	}
	leaf = &c->objs[idx / RM_OBJ_LEAF];
	if (!*leaf) {
		*leaf = c->spare ? c->spare : rm_zalloc(sizeof(**leaf));
		c->spare = NULL;
		if (!*leaf)
			return -ENOMEM;
	}
	(*leaf)->taken++;
	if (!*h) {
		c->cursor = (idx + 1) % max;
		*h = VGPU_RM_HANDLE_BASE + idx;
	}
	c->hmap[idx / 64] |= 1ull << (idx % 64);
	return 0;
}

void rm_handle_drop(struct rm_client *c, uint32_t h)
{
	uint32_t idx = h - VGPU_RM_HANDLE_BASE;
	struct rm_obj_leaf **leaf = &c->objs[idx / RM_OBJ_LEAF];

	c->hmap[idx / 64] &= ~(1ull << (idx % 64));
	(*leaf)->obj[idx % RM_OBJ_LEAF] = NULL;
	/* A client pays only for the ranges it holds handles in (and one spare): the cursor
	 * walks the whole handle space over time, which would otherwise leave a leaf behind
	 * everywhere. An empty leaf is all NULL again, as the spare must be. */
	if (!--(*leaf)->taken) {
		if (c->spare)
			free(*leaf);
		else
			c->spare = *leaf;
		*leaf = NULL;
	}
}

void rm_obj_insert(struct rm_client *c, struct rm_res *r)
{
	uint32_t idx = r->handle - VGPU_RM_HANDLE_BASE;

	c->objs[idx / RM_OBJ_LEAF]->obj[idx % RM_OBJ_LEAF] = r;
}

struct rm_res *rm_obj_find(struct rm_client *c, uint32_t h)
{
	uint32_t idx = h - VGPU_RM_HANDLE_BASE;
	const struct rm_obj_leaf *leaf;

	if (h < VGPU_RM_HANDLE_BASE || idx >= c->rm->cfg.max_objects)
		return NULL;
	leaf = c->objs[idx / RM_OBJ_LEAF];
	return leaf ? leaf->obj[idx % RM_OBJ_LEAF] : NULL;
}

int rm_client_get(struct rm *rm, unsigned int fn, uint32_t h, struct rm_client **out)
{
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	struct rm_client *c = NULL;

	if (!VGPU_RM_IS_CLIENT(h))
		return -ENOENT;
	if (VGPU_RM_CLIENT_FN(h) != fn)
		return -VGPU_EFOREIGN;	/* O(1): the prefix names the owner */
	rm_rcu_read_lock();
	cds_lfht_lookup(rm->clients, rm_hash(h), client_match, &h, &it);
	node = cds_lfht_iter_get_node(&it);
	if (node) {
		struct rm_client *cand = cmn_container_of(node, struct rm_client, node);
		int r = atomic_load(&cand->refs);

		/* Only a client still holding its own reference can be revived. */
		while (r > 0 && !atomic_compare_exchange_weak(&cand->refs, &r, r + 1))
			;
		if (r > 0)
			c = cand;
	}
	rm_rcu_read_unlock();
	if (!c)
		return -ENOENT;
	*out = c;
	return 0;
}

static void client_free_rcu(struct rcu_head *head)
{
	struct rm_client *c = cmn_container_of(head, struct rm_client, rcu);

	rm_rcu_cb_enter(head);
	cmn_mutex_destroy(&c->lock);
	free(c->spare);
	free(c->objs);	/* its other leaves went with the last handles */
	free(c->hmap);
	free(c);
}

void rm_client_put(struct rm_client *c)
{
	if (atomic_fetch_sub(&c->refs, 1) == 1)
		rm_call_rcu(&c->rcu, client_free_rcu);
}

/* A free client index (*@idx 0), or *@idx itself if free (-EEXIST if not). */
static int client_index_take(struct rm *rm, struct rm_fn *f, uint32_t *idx)
{
	uint32_t max = rm->cfg.max_clients;
	long got;

	if (f->quota.clients && f->nr_clients >= f->quota.clients) {
		if (!f->client_limit_logged)
			cmn_warn("VF %u: RM client limit %u reached", (unsigned int)(f - rm->fns),
				  f->quota.clients);
		f->client_limit_logged = true;
		return -VGPU_EQUOTA;
	}
	f->client_limit_logged = false;
	if (*idx) {
		got = (long)*idx - 1;
		if (got >= (long)max)
			return -EINVAL;
		if (f->client_map[got / 64] & (1ull << (got % 64)))
			return -EEXIST;
	} else {
		got = bit_find_from(f->client_map, max, f->client_cursor);
		if (got < 0)
			return -ENOSPC;
		f->client_cursor = ((uint32_t)got + 1) % max;
	}
	f->client_map[got / 64] |= 1ull << (got % 64);
	rm_acct_lock(rm, (unsigned int)(f - rm->fns));
	f->nr_clients++;
	rm_acct_unlock(rm, (unsigned int)(f - rm->fns));
	*idx = (uint32_t)got + 1;	/* index 0 is never a client: handle != range base */
	return 0;
}

static struct rm_client *client_new(struct rm *rm, unsigned int fn, uint32_t h)
{
	struct rm_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->hmap = calloc((rm->cfg.max_objects + 63) / 64, sizeof(uint64_t));
	c->objs = calloc((rm->cfg.max_objects + RM_OBJ_LEAF - 1) / RM_OBJ_LEAF, sizeof(*c->objs));
	if (!c->hmap || !c->objs) {
		free(c->hmap);
		free(c->objs);
		free(c);
		return NULL;
	}
	c->handle = h;
	c->fn = fn;
	c->rm = rm;
	cmn_mutex_init(&c->lock);
	atomic_init(&c->refs, 1);
	c->root.handle = h;
	c->root.seq = atomic_fetch_add(&rm->fns[fn].obj_seq, 1);
	c->root.h_class = VGPU_RM_CLASS_CLIENT;
	c->root.client = c;
	cmn_list_init(&c->root.children);
	cmn_list_init(&c->root.sibling);
	cmn_list_init(&c->root.dependants);
	cmn_list_init(&c->root.dep_link);
	cds_lfht_node_init(&c->node);
	return c;
}

int rm_client_alloc(struct rm *rm, unsigned int fn, uint32_t *h_client)
{
	if (h_client)
		*h_client = 0;
	return rm_client_alloc_at(rm, fn, h_client);
}

int rm_client_alloc_at(struct rm *rm, unsigned int fn, uint32_t *h_client)
{
	struct rm_fn *f;
	struct rm_client *c;
	uint32_t idx = 0;
	int ret;

	if (!rm || fn >= rm->nr_fns || !h_client)
		return -EINVAL;
	if (*h_client) {
		if (!VGPU_RM_IS_CLIENT(*h_client) || VGPU_RM_CLIENT_FN(*h_client) != fn ||
		    !VGPU_RM_CLIENT_IDX(*h_client))
			return -EINVAL;
		idx = VGPU_RM_CLIENT_IDX(*h_client);
	}
	rm_rcu_enter();
	rm_api_read(rm, fn);
	f = &rm->fns[fn];
	rm_dev_lock(rm);
	ret = f->active ? client_index_take(rm, f, &idx) : -ENODEV;
	rm_dev_unlock(rm);
	if (ret)
		goto out;
	c = client_new(rm, fn, VGPU_RM_CLIENT_HANDLE(fn, idx));
	if (!c) {
		rm_dev_lock(rm);
		f->client_map[(idx - 1) / 64] &= ~(1ull << ((idx - 1) % 64));
		rm_acct_lock(rm, fn);
		f->nr_clients--;
		rm_acct_unlock(rm, fn);
		rm_dev_unlock(rm);
		ret = -ENOMEM;
		goto out;
	}
	RM_TSAN_RELEASE(&c->node);
	rm_rcu_read_lock();
	cds_lfht_add(rm->clients, rm_hash(c->handle), &c->node);
	rm_rcu_read_unlock();
	rm_dev_lock(rm);
	cmn_list_add(&f->clients, &c->fn_link);
	rm_dev_unlock(rm);
	atomic_fetch_add(&f->nr_objects, 1);
	*h_client = c->handle;
out:
	rm_api_unlock(rm, fn);
	if (ret)
		cmn_dbg("rm: client alloc for fn %u: %s", fn, cmn_strerror(ret));
	return ret;
}

/* The client's own end: out of the table and the function's list; lock held, dropped. */
void rm_client_destroy_locked(struct rm_client *c)
{
	struct rm *rm = c->rm;
	struct rm_fn *f = &rm->fns[c->fn];
	uint32_t idx = VGPU_RM_CLIENT_IDX(c->handle) - 1;

	rm_client_assert_held(c);
	c->dead = true;
	rm_rcu_read_lock();
	cds_lfht_del(rm->clients, &c->node);
	rm_rcu_read_unlock();
	rm_dev_lock(rm);
	cmn_list_del(&c->fn_link);
	f->client_map[idx / 64] &= ~(1ull << (idx % 64));
	rm_acct_lock(rm, c->fn);
	f->nr_clients--;
	rm_acct_unlock(rm, c->fn);
	rm_dev_unlock(rm);
	atomic_fetch_sub(&f->nr_objects, 1);
	rm_client_unlock(c);
	rm_client_put(c);	/* the table's reference */
}

int rm_client_free(struct rm *rm, unsigned int fn, uint32_t h_client)
{
	struct rm_client *c;
	bool done;
	int ret;

	if (!rm || fn >= rm->nr_fns)
		return -EINVAL;
	rm_rcu_enter();
	rm_api_read(rm, fn);
	ret = rm_client_get(rm, fn, h_client, &c);
	if (ret)
		goto out;
	rm_client_lock(c);
	if (c->dead) {
		rm_client_unlock(c);
		ret = -ENOENT;
	} else {
		rm_res_free_tree(c, &c->root, 0, &done);
		rm_client_destroy_locked(c);	/* unlocks */
	}
	rm_client_put(c);
out:
	rm_api_unlock(rm, fn);
	return ret;
}
