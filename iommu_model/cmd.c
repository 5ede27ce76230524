// SPDX-License-Identifier: MIT
/* The command interface: extensible size-first request structs dispatched to the C API
 * with the iommufd errno contract (see iommu.h). */
#include <errno.h>
#include <string.h>

#include "iommu_model/iommu_internal.h"

struct cmd_desc {
	uint32_t min_size;	/* size of the first version */
	uint32_t size;		/* size this unit knows */
	int (*run)(struct iommu *mmu, void *req);
};

static struct iommu_domain *cmd_domain(struct iommu *mmu, uint32_t id)
{
	return id ? iommu_domain_lookup(mmu, id) : NULL;
}

static struct iommu_memobj *cmd_memobj(struct iommu *mmu, uint32_t id)
{
	return id && id < IOMMU_MAX_MEMOBJS ? atomic_load(&mmu->memobjs[id]) : NULL;
}

static int cmd_destroy(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_destroy *c = arg;

	if (c->reserved)
		return -EINVAL;
	/* By id under the lock: a pointer looked up first could be freed by a racing
	 * destroy before we use it. */
	switch (c->obj) {
	case IOMMU_OBJ_DOMAIN:
		return iommu_domain_free_id(mmu, c->id);
	case IOMMU_OBJ_MEMOBJ:
		return iommu_memobj_unregister_id(mmu, c->id);
	}
	return -EINVAL;
}

static int cmd_domain_alloc(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_domain_alloc *c = arg;
	struct iommu_domain_opts o = { .type = c->type, .flags = c->flags,
				       .iova_bits = c->iova_bits, .s1_root = c->s1_root };
	struct iommu_domain *d;
	int ret;

	if (c->type == IOMMU_DOMAIN_NESTED) {
		o.parent = cmd_domain(mmu, c->parent_id);
		if (!o.parent)
			return -ENOENT;
	} else if (c->parent_id || c->s1_root) {
		return -EINVAL;
	}
	if (c->type == IOMMU_DOMAIN_SVA)
		return -EOPNOTSUPP;	/* binds the caller's process: C API only */
	ret = iommu_domain_alloc(mmu, &o, &d);
	if (!ret)
		c->out_domain_id = d->id;
	return ret;
}

static int cmd_attach(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_attach *c = arg;
	struct iommu_domain *d = cmd_domain(mmu, c->domain_id);

	if (!d)
		return -ENOENT;
	if (c->pasid == IOMMU_NO_PASID)
		return iommu_attach(mmu, c->rid, d);
	return iommu_pasid_attach(mmu, c->rid, c->pasid, d);
}

static int cmd_detach(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_attach *c = arg;

	if (c->pasid == IOMMU_NO_PASID)
		return iommu_detach(mmu, c->rid);
	return iommu_pasid_detach(mmu, c->rid, c->pasid);
}

static int cmd_map(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_map *c = arg;
	struct iommu_domain *d = cmd_domain(mmu, c->domain_id);
	struct iommu_memobj *mo = cmd_memobj(mmu, c->memobj_id);
	uint64_t iova = c->iova;
	int ret;

	if (c->reserved)
		return -EINVAL;
	if (!d || !mo)
		return -ENOENT;
	ret = iommu_map(d, mo, c->offset, c->length, c->prot, c->flags, &iova);
	if (!ret)
		c->iova = iova;
	return ret;
}

static int cmd_unmap(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_unmap *c = arg;
	struct iommu_domain *d = cmd_domain(mmu, c->domain_id);
	uint64_t bytes;
	int ret;

	if (!d)
		return -ENOENT;
	ret = iommu_unmap(d, c->iova, c->length, &bytes);
	if (!ret)
		c->length = bytes;
	return ret;
}

static int cmd_iova_ranges(struct iommu *mmu, void *arg)
{
	struct iommu_cmd_iova_ranges *c = arg;
	struct iommu_domain *d = cmd_domain(mmu, c->domain_id);

	if (c->reserved)
		return -EINVAL;
	if (!d)
		return -ENOENT;
	if (c->num_ranges && !c->ranges)
		return -EFAULT;
	return iommu_iova_ranges(d, (struct iommu_iova_range *)(uintptr_t)c->ranges,
				 &c->num_ranges);
}

#define CMD(op, type, last_field, fn)                                                      \
	[op - IOMMU_CMD_DESTROY] = { offsetof(type, last_field) +                          \
					     sizeof(((type *)0)->last_field),              \
				     sizeof(type), fn }

static const struct cmd_desc cmd_table[] = {
	CMD(IOMMU_CMD_DESTROY, struct iommu_cmd_destroy, reserved, cmd_destroy),
	CMD(IOMMU_CMD_DOMAIN_ALLOC, struct iommu_cmd_domain_alloc, out_domain_id,
	    cmd_domain_alloc),
	CMD(IOMMU_CMD_ATTACH, struct iommu_cmd_attach, domain_id, cmd_attach),
	CMD(IOMMU_CMD_DETACH, struct iommu_cmd_attach, domain_id, cmd_detach),
	CMD(IOMMU_CMD_MAP, struct iommu_cmd_map, reserved, cmd_map),
	CMD(IOMMU_CMD_UNMAP, struct iommu_cmd_unmap, length, cmd_unmap),
	CMD(IOMMU_CMD_IOVA_RANGES, struct iommu_cmd_iova_ranges, ranges, cmd_iova_ranges),
};

int iommu_cmd(struct iommu *mmu, unsigned int op, void *arg)
{
	union {
		struct iommu_cmd_destroy destroy;
		struct iommu_cmd_domain_alloc alloc;
		struct iommu_cmd_attach attach;
		struct iommu_cmd_map map;
		struct iommu_cmd_unmap unmap;
		struct iommu_cmd_iova_ranges ranges;
	} req;
	const struct cmd_desc *c;
	uint32_t size;
	int ret;

	if (!mmu)
		return -EINVAL;
	if (op < IOMMU_CMD_DESTROY || op - IOMMU_CMD_DESTROY >= VGPU_ARRAY_SIZE(cmd_table))
		return -ENOTTY;
	if (!arg)
		return -EFAULT;
	c = &cmd_table[op - IOMMU_CMD_DESTROY];
	memcpy(&size, arg, sizeof(size));
	if (size < c->min_size)
		return -EINVAL;
	/* A newer caller's longer struct: fine if what we do not know is zero. */
	for (uint32_t i = c->size; i < size; i++)
		if (((const uint8_t *)arg)[i])
			return -E2BIG;
	memset(&req, 0, sizeof(req));
	memcpy(&req, arg, cmn_min(size, c->size));
	ret = c->run(mmu, &req);
	memcpy(arg, &req, cmn_min(size, c->size));
	memcpy(arg, &size, sizeof(size));
	return ret;
}
