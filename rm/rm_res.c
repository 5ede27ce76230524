// SPDX-License-Identifier: MIT
/* Resources: the per-client tree, the class table (who may be whose parent, constructor,
 * destructor), controls, share/dup and the dependency-ordered free.
 *
 * Every call finds its client lock-free, locks it under the API read lock and then drops
 * the API lock: work on one client (which may wait for the GSP) holds only that client's
 * lock, and structural changes (VF disable) take the API lock for writing and then each
 * client's lock, so they wait for calls in progress and no call starts on a disabled one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/log.h"
#include "rm/rm_internal.h"

struct rm_res *rm_res_lookup(struct rm_client *c, uint32_t h)
{
	cmn_mutex_assert_held(&c->lock);
	return h == c->handle ? &c->root : rm_obj_find(c, h);
}

/* ---- entering a client ---- */
static int rm_enter(struct rm *rm, unsigned int fn, uint32_t h_client, struct rm_client **out)
{
	struct rm_client *c;
	int ret;

	if (!rm || fn >= rm->nr_fns)
		return -EINVAL;
	rm_rcu_enter();
	rm_api_read(rm, fn);
	ret = rm_client_get(rm, fn, h_client, &c);
	if (!ret) {
		rm_client_lock(c);
		if (c->dead || c->disabled) {
			ret = c->dead ? -ENOENT : -EBUSY;
			rm_client_unlock(c);
			rm_client_put(c);
		}
	}
	rm_api_unlock(rm, fn);
	if (!ret)
		*out = c;
	return ret;
}

static void rm_exit(struct rm_client *c)
{
	rm_client_unlock(c);
	rm_client_put(c);
}

/* ---- class table ---- */
static bool is_mem(uint32_t cls)
{
	return cls == VGPU_RM_CLASS_MEMORY_VIDMEM || cls == VGPU_RM_CLASS_MEMORY_SYSMEM;
}

static int parent_ok(uint32_t cls, const struct rm_res *parent)
{
	switch (cls) {
	case VGPU_RM_CLASS_DEVICE:
		return parent->h_class == VGPU_RM_CLASS_CLIENT;
	case VGPU_RM_CLASS_EVENT:
		return parent->h_class != VGPU_RM_CLASS_CLIENT;
	case VGPU_RM_CLASS_SUBDEVICE: case VGPU_RM_CLASS_VASPACE: case VGPU_RM_CLASS_USERMODE:
	case VGPU_RM_CLASS_MEMORY_VIDMEM: case VGPU_RM_CLASS_MEMORY_SYSMEM:
	case VGPU_RM_CLASS_CHANNEL_GPFIFO:
		return parent->h_class == VGPU_RM_CLASS_DEVICE;
	}
	return -1;
}

static size_t params_size(uint32_t cls)
{
	switch (cls) {
	case VGPU_RM_CLASS_VASPACE: return sizeof(struct vgpu_rm_vaspace_params);
	case VGPU_RM_CLASS_MEMORY_VIDMEM: return sizeof(struct vgpu_rm_vidmem_params);
	case VGPU_RM_CLASS_MEMORY_SYSMEM: return sizeof(struct vgpu_rm_sysmem_params);
	case VGPU_RM_CLASS_CHANNEL_GPFIFO: return sizeof(struct vgpu_rm_channel_params);
	case VGPU_RM_CLASS_USERMODE: return sizeof(struct vgpu_rm_usermode_params);
	case VGPU_RM_CLASS_EVENT: return sizeof(struct vgpu_rm_event_params);
	}
	return 0;
}

/* The GP ring of @p lies below the GMMU's VA limit; checked as a distance from the limit,
 * so a ring that would wrap past 2^64 is refused here, before a channel id is reserved. */
static bool chan_gpfifo_ok(const struct vgpu_rm_channel_params *p)
{
	return !(p->gpfifo_va & 7) && p->gpfifo_va < VGPU_GMMU_VA_LIMIT &&
	       p->gpfifo_entries * 8ull <= VGPU_GMMU_VA_LIMIT - p->gpfifo_va;
}

static int chan_ctor(struct rm_client *c, struct rm_res *r, struct vgpu_rm_channel_params *p,
		     const struct rm_obj_rec *mig)
{
	struct rm *rm = c->rm;
	struct rm_res *vas = p->h_vaspace ? rm_res_lookup(c, p->h_vaspace) : NULL;
	struct vgpu_rpc_chan cfg;
	uint32_t chid;
	int ret;

	if (!vas || vas->h_class != VGPU_RM_CLASS_VASPACE)
		return p->h_vaspace && !vas ? -ENOENT : -EINVAL;
	if (p->runlist >= rm->nr_engines || p->gpfifo_entries < 2 || p->gpfifo_entries > 65536 ||
	    (p->gpfifo_entries & (p->gpfifo_entries - 1)) || p->userd_aper > VGPU_APER_SYS ||
	    (p->flags & ~VGPU_RM_CHAN_REPLAYABLE) || !chan_gpfifo_ok(p) || (p->userd_addr & 63) ||
	    p->reserved)	/* kept zero, so a later ABI can give it a meaning */
		return -EINVAL;
	chid = mig ? mig->x : 0;
	ret = mig ? rm_chan_reserve_id(rm, c->fn, chid) : rm_chan_reserve(rm, c->fn, p->runlist, &chid);
	if (ret)
		return ret;
	/* The watchdog's recovery locks the owner to keep the id from changing hands. */
	rm_dev_lock(rm);
	rm->fns[c->fn].chans[chid].owner = c->handle;
	rm_dev_unlock(rm);
	cfg = (struct vgpu_rpc_chan){ .fn = c->fn, .chid = chid,
		.flags = p->flags & VGPU_RM_CHAN_REPLAYABLE ? RM_CHAN_REPLAYABLE : 0,
		.runlist = p->runlist, .pdb = vas->u.vas.pdb, .gpfifo_va = p->gpfifo_va,
		.gpfifo_entries = p->gpfifo_entries, .userd_aper = p->userd_aper,
		.userd_addr = p->userd_addr };
	ret = rm_chan_program(rm, c->fn, &cfg);
	if (ret)
		return ret;
	r->u.chan.chid = p->chid = chid;
	r->u.chan.token = p->token = vgpu_token(p->runlist, chid);
	r->u.chan.entries = p->gpfifo_entries;
	r->u.chan.userd_aper = p->userd_aper;
	r->u.chan.userd_addr = p->userd_addr;
	r->depends_on = vas;
	cmn_list_add(&vas->dependants, &r->dep_link);
	return 0;
}

/* Construct @r from @params; @mig (migration) gives the resources it had on the source. */
static int class_ctor(struct rm_client *c, struct rm_res *r, void *params,
		      const struct rm_obj_rec *mig)
{
	struct rm *rm = c->rm;
	struct rm_fn *f = &rm->fns[c->fn];

	switch (r->h_class) {
	case VGPU_RM_CLASS_DEVICE:
		if (c->device)
			return -EBUSY;
		c->device = r;
		return 0;
	case VGPU_RM_CLASS_SUBDEVICE:
		return 0;
	case VGPU_RM_CLASS_VASPACE: {
		struct vgpu_rm_vaspace_params *p = params;
		if ((p->pdb & 4095) || p->pdb >= f->size || p->flags || p->reserved)
			return -EINVAL;
		r->u.vas.pdb = p->pdb;
		return 0;
	}
	case VGPU_RM_CLASS_MEMORY_VIDMEM:
		return mig ? rm_mem_vram_import(rm, c->fn, mig, &r->u.mem) :
		       rm_mem_vram_alloc(rm, c->fn, params, &r->u.mem);
	case VGPU_RM_CLASS_MEMORY_SYSMEM:
		return mig ? rm_mem_sys_import(rm, c->fn, mig, &r->u.mem) :
		       rm_mem_sys_alloc(rm, c->fn, params, &r->u.mem);
	case VGPU_RM_CLASS_CHANNEL_GPFIFO:
		return chan_ctor(c, r, params, mig);
	case VGPU_RM_CLASS_USERMODE:
		((struct vgpu_rm_usermode_params *)params)->doorbell_offset = (uint64_t)c->fn * 4096;
		return 0;
	case VGPU_RM_CLASS_EVENT: {
		struct vgpu_rm_event_params *p = params;

		if (p->reserved)	/* kept zero, so a later ABI can give it a meaning */
			return -EINVAL;
		r->u.evt.notify_index = p->notify_index;
		return 0;
	}
	}
	return -EOPNOTSUPP;
}

static void class_dtor(struct rm_client *c, struct rm_res *r)
{
	switch (r->h_class) {
	case VGPU_RM_CLASS_DEVICE:
		c->device = NULL;
		break;
	case VGPU_RM_CLASS_MEMORY_VIDMEM: case VGPU_RM_CLASS_MEMORY_SYSMEM:
		rm_mem_put(c->rm, r->u.mem);
		break;
	case VGPU_RM_CLASS_CHANNEL_GPFIFO:
		rm_chan_release(c->rm, c->fn, r->u.chan.chid);
		break;
	}
}

static struct rm_res *res_new(struct rm_client *c, struct rm_res *parent, uint32_t h, uint32_t cls)
{
	struct rm_res *r = rm_zalloc(sizeof(*r));

	if (!r)
		return NULL;
	r->handle = h;
	r->h_class = cls;
	r->client = c;
	r->parent = parent;
	r->depth = parent->depth + 1;
	cmn_list_init(&r->children);
	cmn_list_init(&r->sibling);
	cmn_list_init(&r->dependants);
	cmn_list_init(&r->dep_link);
	return r;
}

static void res_insert(struct rm_client *c, struct rm_res *r)
{
	r->seq = atomic_fetch_add(&c->rm->fns[c->fn].obj_seq, 1);
	cmn_list_add(&r->parent->children, &r->sibling);
	rm_obj_insert(c, r);
	c->nr_objects++;
	atomic_fetch_add(&c->rm->fns[c->fn].nr_objects, 1);
}

static void res_destroy(struct rm_client *c, struct rm_res *r)
{
	class_dtor(c, r);
	cmn_list_del(&r->sibling);
	if (r->depends_on)
		cmn_list_del(&r->dep_link);
	rm_handle_drop(c, r->handle);
	rm_obj_uncharge(c);
	c->nr_objects--;
	atomic_fetch_sub(&c->rm->fns[c->fn].nr_objects, 1);
	/* Freed at once by the thread that frees it: only this client's calls, under its lock,
	 * ever reach the object, so no reader can be left to wait a grace period for. */
	free(r);
}

/* A child or dependant of @r not yet on the pending-free list. */
static struct rm_res *next_unvisited(struct rm_res *r)
{
	for (struct cmn_list *l = r->children.next; l != &r->children; l = l->next) {
		struct rm_res *ch = cmn_container_of(l, struct rm_res, sibling);
		if (!ch->visit)
			return ch;
	}
	for (struct cmn_list *l = r->dependants.next; l != &r->dependants; l = l->next) {
		struct rm_res *d = cmn_container_of(l, struct rm_res, dep_link);
		if (!d->visit)
			return d;
	}
	return NULL;
}

unsigned int rm_res_free_tree(struct rm_client *c, struct rm_res *r, unsigned int budget, bool *done)
{
	struct rm_res **stack = NULL;
	size_t n = 0, cap = 0;
	unsigned int freed = 0;

	cmn_mutex_assert_held(&c->lock);
	*done = false;
	/* Post-order walk with an explicit stack (no recursion): an object is freed only
	 * after its children and the objects that depend on it, the target last. */
	r->visit = true;
	for (;;) {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			struct rm_res **ns = realloc(stack, cap * sizeof(*ns));
			VGPU_ASSERT(ns);	/* out of memory mid-free: nothing sane to do */
			stack = ns;
		}
		if (!n)
			stack[n++] = r;
		struct rm_res *top = stack[n - 1], *next = next_unvisited(top);
		if (next) {
			next->visit = true;
			stack[n++] = next;
			continue;
		}
		if (budget && freed >= budget) {
			for (size_t i = 0; i < n; i++)
				stack[i]->visit = false;
			break;
		}
		n--;
		if (top == &c->root) {
			top->visit = false;
			*done = true;
			break;
		}
		*done = top == r;
		res_destroy(c, top);
		freed++;
		if (*done)
			break;
	}
	free(stack);
	return freed;
}

/* ---- public calls ---- */
/* An object of @h_class under @h_parent of locked client @c, as handle *@h (0: any). */
static int alloc_locked(struct rm_client *c, uint32_t h_parent, uint32_t *h, uint32_t h_class,
			void *params, const struct rm_obj_rec *mig, struct rm_res **out)
{
	struct rm_res *parent, *r;
	int ret, ok;

	rm_client_assert_held(c);
	parent = rm_res_lookup(c, h_parent);
	ok = parent ? parent_ok(h_class, parent) : 0;
	ret = !parent ? -ENOENT : ok < 0 ? -EOPNOTSUPP : !ok ? -EINVAL :
	      parent->depth + 1 > RM_MAX_DEPTH ? -EINVAL : 0;
	if (ret)
		return ret;
	ret = rm_obj_charge(c);
	if (ret)
		return ret;
	ret = rm_handle_take(c, h);
	if (ret)
		goto uncharge;
	r = res_new(c, parent, *h, h_class);
	if (!r) {
		ret = -ENOMEM;
		goto drop_handle;
	}
	ret = class_ctor(c, r, params, mig);
	if (ret)
		goto free_res;
	res_insert(c, r);
	if (out)
		*out = r;
	return 0;
free_res:
	free(r);
drop_handle:
	rm_handle_drop(c, *h);
uncharge:
	rm_obj_uncharge(c);
	return ret;
}

int rm_alloc(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_parent,
	     uint32_t *h_object, uint32_t h_class, void *params, size_t len)
{
	struct rm_client *c;
	uint32_t h;
	int ret;

	if (!h_object || len != params_size(h_class) || (len && !params))
		return -EINVAL;
	h = *h_object;
	ret = rm_enter(rm, fn, h_client, &c);
	if (ret)
		return ret;
	ret = alloc_locked(c, h_parent, &h, h_class, params, NULL, NULL);
	if (!ret)
		*h_object = h;
	rm_exit(c);
	return ret;
}

int rm_free(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object)
{
	struct rm_client *c;
	struct rm_res *r;
	bool done;
	int ret;

	if (h_object == h_client)
		return rm_client_free(rm, fn, h_client);
	ret = rm_enter(rm, fn, h_client, &c);
	if (ret)
		return ret;
	r = rm_res_lookup(c, h_object);
	if (r)
		rm_res_free_tree(c, r, 0, &done);
	rm_exit(c);
	return r ? 0 : -ENOENT;
}

/* ---- controls ---- */
/* One control's call: the object is of a class the control accepts and its parameters have
 * the sizes of its table row; *@len is already the row's out size (CTRL_VAR: the input's). */
typedef int (*ctrl_fn)(struct rm_client *c, struct rm_res *r, void *params, size_t *len,
		       size_t cap);

#define CTRL_VAR	SIZE_MAX	/* in: any size; out: the handler sets *len */

struct ctrl_desc {
	uint32_t cmd;
	uint32_t cls[2];		/* classes it runs on (0: none) */
	size_t in, out;			/* parameter bytes in and out, or CTRL_VAR */
	ctrl_fn fn;
};

static int ctrl_info(struct rm_client *c, struct rm_res *r, void *params, size_t *len, size_t cap)
{
	struct rm *rm = c->rm;

	(void)r, (void)len, (void)cap;
	*(struct vgpu_rm_info *)params = (struct vgpu_rm_info){ .fn = c->fn,
		.nr_engines = rm->nr_engines, .vram_size = rm->fns[c->fn].size,
		.gsp_resets = atomic_load(&rm->gsp_resets) };
	return 0;
}

static int ctrl_quota(struct rm_client *c, struct rm_res *r, void *params, size_t *len, size_t cap)
{
	struct rm *rm = c->rm;
	struct rm_fn *f = &rm->fns[c->fn];

	(void)r, (void)len, (void)cap;
	rm_acct_lock(rm, c->fn);
	*(struct vgpu_rm_quota_info *)params = (struct vgpu_rm_quota_info){
		.vram_limit = f->quota.vram, .vram_used = f->vram_used,
		.sysmem_limit = f->quota.sysmem, .sysmem_used = f->sysmem_used,
		.chan_limit = f->quota.channels, .chan_used = f->chans_used,
		.client_limit = f->quota.clients, .client_used = f->nr_clients };
	rm_acct_unlock(rm, c->fn);
	return 0;
}

static int ctrl_echo(struct rm_client *c, struct rm_res *r, void *params, size_t *len, size_t cap)
{
	(void)r;
	return gsp_call(c->rm->gsp, c->fn, VGPU_RPC_FN_ECHO, params, *len, params, cap, len);
}

/* The GSP records the replay (its event for the owner's log); the device's engines resume
 * the stalled channels, and that is no privileged state, so it is a device op. */
static int ctrl_fault_replay(struct rm_client *c, struct rm_res *r, void *params, size_t *len,
			     size_t cap)
{
	struct vgpu_rpc_fnarg fa = { .fn = c->fn };
	int ret;

	(void)r, (void)params, (void)len, (void)cap;
	ret = gsp_call(c->rm->gsp, c->fn, VGPU_RPC_FN_FAULT_REPLAY, &fa, sizeof(fa), NULL, 0, NULL);
	if (!ret)
		rm_op(c->rm, fault_replay, c->fn);
	return ret;
}

static int ctrl_token(struct rm_client *c, struct rm_res *r, void *params, size_t *len, size_t cap)
{
	(void)c, (void)len, (void)cap;
	*(struct vgpu_rm_token_params *)params =
		(struct vgpu_rm_token_params){ .token = r->u.chan.token };
	return 0;
}

static int ctrl_enable(struct rm_client *c, struct rm_res *r, void *params, size_t *len,
		       size_t cap)
{
	(void)len, (void)cap;
	return rm_chan_enable(c->rm, c->fn, r->u.chan.chid,
			      ((struct vgpu_rm_enable_params *)params)->enable != 0);
}

static int ctrl_bind(struct rm_client *c, struct rm_res *r, void *params, size_t *len, size_t cap)
{
	const struct vgpu_rm_bind_params *b = params;
	struct rm_res *vas;
	int ret;

	(void)len, (void)cap;
	if (b->reserved)
		return -EINVAL;
	vas = rm_res_lookup(c, b->h_vaspace);
	if (!vas)
		return -ENOENT;
	if (vas->h_class != VGPU_RM_CLASS_VASPACE)
		return -EINVAL;
	ret = rm_chan_bind_vaspace(c->rm, c->fn, r->u.chan.chid, vas->u.vas.pdb);
	if (ret)
		return ret;
	/* The channel now depends on the new VA space: freeing it frees the channel. */
	cmn_list_del(&r->dep_link);
	r->depends_on = vas;
	cmn_list_add(&vas->dependants, &r->dep_link);
	return 0;
}

/* Store GP_PUT in the channel's USERD and ring its doorbell, as the guest would itself. */
static int ctrl_submit(struct rm_client *c, struct rm_res *r, void *params, size_t *len,
		       size_t cap)
{
	const struct vgpu_rm_submit_params *sp = params;
	const struct rm_fn *f = &c->rm->fns[c->fn];
	uint64_t addr = r->u.chan.userd_addr + VGPU_USERD_GP_PUT;

	(void)len, (void)cap;
	if (sp->reserved || sp->gp_put >= r->u.chan.entries)
		return -EINVAL;
	if (r->u.chan.userd_aper == VGPU_APER_VRAM) {
		/* VF-physical: only inside the function's own slice. */
		if (addr + sizeof(sp->gp_put) > f->size)
			return -EFAULT;
		addr += f->base;
	}
	return rm_op(c->rm, chan_submit, c->fn, r->u.chan.userd_aper, addr, sp->gp_put,
		     r->u.chan.token);
}

static int ctrl_reset(struct rm_client *c, struct rm_res *r, void *params, size_t *len, size_t cap)
{
	int ret = rm_chan_enable(c->rm, c->fn, r->u.chan.chid, false);

	(void)params, (void)len, (void)cap;
	return ret ? ret : rm_chan_enable(c->rm, c->fn, r->u.chan.chid, true);
}

#define SUBDEV	{ VGPU_RM_CLASS_SUBDEVICE, 0 }
#define CHAN	{ VGPU_RM_CLASS_CHANNEL_GPFIFO, 0 }
static const struct ctrl_desc ctrls[] = {
	{ VGPU_RM_CTRL_GET_INFO, { VGPU_RM_CLASS_SUBDEVICE, VGPU_RM_CLASS_DEVICE },
	  CTRL_VAR, sizeof(struct vgpu_rm_info), ctrl_info },
	{ VGPU_RM_CTRL_GET_QUOTA, SUBDEV, CTRL_VAR, sizeof(struct vgpu_rm_quota_info), ctrl_quota },
	{ VGPU_RM_CTRL_GSP_ECHO, SUBDEV, CTRL_VAR, CTRL_VAR, ctrl_echo },
	{ VGPU_RM_CTRL_FAULT_REPLAY, SUBDEV, 0, 0, ctrl_fault_replay },
	{ VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN, CHAN, CTRL_VAR, sizeof(struct vgpu_rm_token_params),
	  ctrl_token },
	{ VGPU_RM_CTRL_CHANNEL_ENABLE, CHAN, sizeof(struct vgpu_rm_enable_params), 0, ctrl_enable },
	{ VGPU_RM_CTRL_CHANNEL_BIND_VASPACE, CHAN, sizeof(struct vgpu_rm_bind_params), 0, ctrl_bind },
	{ VGPU_RM_CTRL_CHANNEL_SUBMIT, CHAN, sizeof(struct vgpu_rm_submit_params), 0, ctrl_submit },
	{ VGPU_RM_CTRL_CHANNEL_RESET, CHAN, 0, 0, ctrl_reset },
};
#undef SUBDEV
#undef CHAN

/* The one validator: the object's class, the input size and room for the output, all
 * -EINVAL; an unknown command is -EOPNOTSUPP. */
static int ctrl_check(const struct ctrl_desc *d, const struct rm_res *r, size_t in, size_t cap)
{
	if (r->h_class != d->cls[0] && (!d->cls[1] || r->h_class != d->cls[1]))
		return -EINVAL;
	if (d->in != CTRL_VAR && in != d->in)
		return -EINVAL;
	if (d->out != CTRL_VAR && cap < d->out)
		return -EINVAL;
	return 0;
}

static int control_locked(struct rm_client *c, struct rm_res *r, uint32_t cmd, void *params,
			  size_t *len, size_t cap)
{
	const struct ctrl_desc *d = NULL;
	int ret;

	rm_client_assert_held(c);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(ctrls) && !d; i++)
		if (ctrls[i].cmd == cmd)
			d = &ctrls[i];
	if (!d)
		return -EOPNOTSUPP;
	ret = ctrl_check(d, r, *len, cap);
	if (ret)
		return ret;
	if (d->out != CTRL_VAR)
		*len = d->out;
	return d->fn(c, r, params, len, cap);
}

int rm_control(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object,
	       uint32_t cmd, void *params, size_t *len, size_t cap)
{
	struct rm_client *c;
	struct rm_res *r;
	int ret;

	if (!len || *len > cap || (cap && !params) || cap > VGPU_RPC_MAX_PAYLOAD)
		return -EINVAL;
	ret = rm_enter(rm, fn, h_client, &c);
	if (ret)
		return ret;
	r = rm_res_lookup(c, h_object);
	ret = r ? control_locked(c, r, cmd, params, len, cap) : -ENOENT;
	rm_exit(c);
	return ret;
}

int rm_share(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object,
	     uint32_t h_target, uint32_t access)
{
	struct rm_client *c;
	struct rm_res *r;
	int ret;

	if (access & ~VGPU_RM_ACCESS_DUP)
		return -EINVAL;
	if (h_target && VGPU_RM_IS_CLIENT(h_target) && VGPU_RM_CLIENT_FN(h_target) != fn)
		return -VGPU_EFOREIGN;
	ret = rm_enter(rm, fn, h_client, &c);
	if (ret)
		return ret;
	r = rm_res_lookup(c, h_object);
	ret = !r ? -ENOENT : !is_mem(r->h_class) ? -EINVAL : 0;
	if (!ret) {
		r->share_target = h_target;
		r->share_access = access;
	}
	rm_exit(c);
	return ret;
}

/* Lock two clients in handle order (the validator checks it). */
static int enter_two(struct rm *rm, unsigned int fn, uint32_t ha, uint32_t hb,
		     struct rm_client **a, struct rm_client **b)
{
	struct rm_client *lo, *hi;
	int ret;

	rm_rcu_enter();
	rm_api_read(rm, fn);
	ret = rm_client_get(rm, fn, ha, a);
	if (ret)
		goto out;
	ret = rm_client_get(rm, fn, hb, b);
	if (ret) {
		rm_client_put(*a);
		goto out;
	}
	lo = ha < hb ? *a : *b;
	hi = ha < hb ? *b : *a;
	rm_client_lock(lo);
	rm_client_lock(hi);
	if ((*a)->dead || (*b)->dead || (*a)->disabled || (*b)->disabled) {
		ret = (*a)->dead || (*b)->dead ? -ENOENT : -EBUSY;
		rm_client_unlock(hi);
		rm_client_unlock(lo);
		rm_client_put(*a);
		rm_client_put(*b);
	}
out:
	rm_api_unlock(rm, fn);
	return ret;
}

/* Dup (@src, @h_src) under @h_parent of @dst; @mig (migration) re-makes a dup the source
 * had, whatever the share rights are now. */
static int dup_locked(struct rm_client *dst, struct rm_client *src, uint32_t h_parent,
		      uint32_t *h_object, uint32_t h_src, bool mig)
{
	struct rm_res *s, *parent, *r;
	uint32_t h = *h_object;
	int ret;

	rm_client_assert_held(dst);
	rm_client_assert_held(src);
	s = rm_res_lookup(src, h_src);
	parent = rm_res_lookup(dst, h_parent);
	if (!s || !parent)
		return -ENOENT;
	if (!is_mem(s->h_class) || parent->h_class != VGPU_RM_CLASS_DEVICE)
		return -EINVAL;
	if (src != dst && !mig && (!(s->share_access & VGPU_RM_ACCESS_DUP) ||
			   (s->share_target && s->share_target != dst->handle)))
		return -EACCES;
	ret = rm_obj_charge(dst);
	if (ret)
		return ret;
	ret = rm_handle_take(dst, &h);
	if (ret) {
		rm_obj_uncharge(dst);
		return ret;
	}
	r = res_new(dst, parent, h, s->h_class);
	if (!r) {
		rm_handle_drop(dst, h);
		rm_obj_uncharge(dst);
		return -ENOMEM;
	}
	r->u.mem = s->u.mem;
	rm_mem_get(dst->rm, r->u.mem);
	res_insert(dst, r);
	*h_object = h;
	return 0;
}

/* rm_dup(); @mig: a migration's re-made dup (no share check). */
static int dup_call(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_parent,
		    uint32_t *h_object, uint32_t h_src_client, uint32_t h_src, bool mig)
{
	struct rm_client *dst, *src;
	int ret;

	if (!rm || fn >= rm->nr_fns || !h_object)
		return -EINVAL;
	if (h_src_client == h_client) {
		ret = rm_enter(rm, fn, h_client, &dst);
		if (ret)
			return ret;
		ret = dup_locked(dst, dst, h_parent, h_object, h_src, mig);
		rm_exit(dst);
		return ret;
	}
	ret = enter_two(rm, fn, h_client, h_src_client, &dst, &src);
	if (ret)
		return ret;
	ret = dup_locked(dst, src, h_parent, h_object, h_src, mig);
	rm_client_unlock(h_client < h_src_client ? src : dst);
	rm_client_unlock(h_client < h_src_client ? dst : src);
	rm_client_put(dst);
	rm_client_put(src);
	return ret;
}

int rm_dup(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_parent,
	   uint32_t *h_object, uint32_t h_src_client, uint32_t h_src)
{
	return dup_call(rm, fn, h_client, h_parent, h_object, h_src_client, h_src, false);
}

int rm_map(struct rm *rm, unsigned int fn, uint32_t h_client, uint32_t h_object, uint64_t *addr,
	   uint64_t *size, uint32_t *aperture)
{
	struct rm_client *c;
	struct rm_res *r;
	int ret;

	if (!addr || !size || !aperture)
		return -EINVAL;
	ret = rm_enter(rm, fn, h_client, &c);
	if (ret)
		return ret;
	r = rm_res_lookup(c, h_object);
	ret = !r ? -ENOENT : !is_mem(r->h_class) ? -EINVAL : 0;
	if (!ret) {
		struct rm_mem *m = r->u.mem;
		*aperture = m->aper;
		*addr = m->aper == VGPU_APER_VRAM ? m->addr - rm->fns[fn].base : m->addr;
		*size = m->size;
	}
	rm_exit(c);
	return ret;
}

/* ---- migration: re-making an exported object ---- */

/* The class's parameters from record @o (what the guest asked for at its allocation). */
static int import_params(const struct rm_obj_rec *o, void *params)
{
	switch (o->h_class) {
	case VGPU_RM_CLASS_VASPACE:
		*(struct vgpu_rm_vaspace_params *)params = (struct vgpu_rm_vaspace_params){ .pdb = o->a };
		return 0;
	case VGPU_RM_CLASS_CHANNEL_GPFIFO:
		if ((o->w & ~(RM_OBJ_CHAN_APER | RM_OBJ_CHAN_REPLAYABLE | RM_OBJ_CHAN_ENABLED)) ||
		    o->dep_client != o->h_client || o->x >= RM_MAX_CHANNELS)
			return -EINVAL;
		*(struct vgpu_rm_channel_params *)params = (struct vgpu_rm_channel_params){
			.h_vaspace = o->dep_handle, .runlist = o->y, .gpfifo_va = o->a,
			.gpfifo_entries = o->z, .userd_aper = o->w & RM_OBJ_CHAN_APER,
			.userd_addr = o->b,
			.flags = o->w & RM_OBJ_CHAN_REPLAYABLE ? VGPU_RM_CHAN_REPLAYABLE : 0 };
		return 0;
	case VGPU_RM_CLASS_EVENT:
		*(struct vgpu_rm_event_params *)params = (struct vgpu_rm_event_params){
			.notify_index = o->x };
		return 0;
	case VGPU_RM_CLASS_MEMORY_VIDMEM: case VGPU_RM_CLASS_MEMORY_SYSMEM:
		return o->dep_handle ? -EINVAL : 0;
	case VGPU_RM_CLASS_DEVICE: case VGPU_RM_CLASS_SUBDEVICE: case VGPU_RM_CLASS_USERMODE:
		return 0;
	}
	return -EINVAL;
}

/* An object record (not a dup) under its parent with its handle and resources. */
static int import_obj(struct rm *rm, unsigned int fn, const struct rm_obj_rec *o)
{
	union {
		struct vgpu_rm_vaspace_params vas;
		struct vgpu_rm_channel_params ch;
		struct vgpu_rm_event_params ev;
		struct vgpu_rm_usermode_params um;
	} params = { 0 };
	struct rm_client *c;
	struct rm_res *r;
	uint32_t h = o->handle;
	int ret = import_params(o, &params);

	if (ret)
		return ret;
	if ((o->nr_runs != 0) != (o->h_class == VGPU_RM_CLASS_MEMORY_VIDMEM))
		return -EINVAL;
	ret = rm_enter(rm, fn, o->h_client, &c);
	if (ret)
		return ret;
	ret = alloc_locked(c, o->h_parent, &h, o->h_class, &params, o, &r);
	if (!ret && is_mem(o->h_class)) {
		r->share_target = o->share_target;
		r->share_access = o->share_access & VGPU_RM_ACCESS_DUP;
	}
	rm_exit(c);
	return ret;
}

int rm_obj_import(struct rm *rm, unsigned int fn, const struct rm_obj_rec *o)
{
	uint32_t h = o ? o->handle : 0;

	if (!rm || fn >= rm->nr_fns || !o || !o->handle)
		return -EINVAL;
	if (!o->h_class) {
		if (o->handle != o->h_client || o->h_parent || o->nr_runs)
			return -EINVAL;
		return rm_client_alloc_at(rm, fn, &h);
	}
	if (is_mem(o->h_class) && o->dep_handle) {
		if (o->nr_runs)
			return -EINVAL;
		return dup_call(rm, fn, o->h_client, o->h_parent, &h, o->dep_client, o->dep_handle,
				true);
	}
	return import_obj(rm, fn, o);
}
