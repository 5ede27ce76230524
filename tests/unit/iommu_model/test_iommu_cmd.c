// SPDX-License-Identifier: MIT
/* IOMMU-01: the command interface's contract - sizes (short EINVAL, longer with zero
 * tail accepted, non-zero tail E2BIG), unknown op ENOTTY, NULL EFAULT, id 0 / unknown
 * ENOENT, busy EBUSY - and that requests do what the C API does. */
#include <errno.h>

#include "iommu_test.h"

struct env {
	struct iommu *mmu;
	struct iommu_memobj *mo;
	uint32_t did;
};

static void env_setup(struct env *e)
{
	struct iommu_cmd_domain_alloc a = { .size = sizeof(a), .type = IOMMU_DOMAIN_PAGING };

	e->mmu = t_iommu();
	e->mo = t_memobj(e->mmu, 16 * PG, 0x20);
	assert_int_equal(iommu_cmd(e->mmu, IOMMU_CMD_DOMAIN_ALLOC, &a), 0);
	assert_int_not_equal(a.out_domain_id, 0);
	e->did = a.out_domain_id;
}

/* A valid request for @op in @buf (sized exactly); returns its size. */
static uint32_t valid_req(struct env *e, unsigned int op, uint8_t *buf)
{
	switch (op) {
	case IOMMU_CMD_DESTROY:
		*(struct iommu_cmd_destroy *)buf = (struct iommu_cmd_destroy){
			sizeof(struct iommu_cmd_destroy), IOMMU_OBJ_DOMAIN, e->did, 0 };
		return sizeof(struct iommu_cmd_destroy);
	case IOMMU_CMD_DOMAIN_ALLOC:
		*(struct iommu_cmd_domain_alloc *)buf = (struct iommu_cmd_domain_alloc){
			.size = sizeof(struct iommu_cmd_domain_alloc), .type = IOMMU_DOMAIN_PAGING };
		return sizeof(struct iommu_cmd_domain_alloc);
	case IOMMU_CMD_ATTACH:
	case IOMMU_CMD_DETACH:
		*(struct iommu_cmd_attach *)buf = (struct iommu_cmd_attach){
			sizeof(struct iommu_cmd_attach), 3, 0, e->did };
		return sizeof(struct iommu_cmd_attach);
	case IOMMU_CMD_MAP:
		*(struct iommu_cmd_map *)buf = (struct iommu_cmd_map){
			.size = sizeof(struct iommu_cmd_map), .domain_id = e->did,
			.memobj_id = iommu_memobj_id(e->mo), .length = PG, .prot = IOMMU_READ };
		return sizeof(struct iommu_cmd_map);
	case IOMMU_CMD_UNMAP:
		*(struct iommu_cmd_unmap *)buf = (struct iommu_cmd_unmap){
			sizeof(struct iommu_cmd_unmap), e->did, 0, UINT64_MAX };
		return sizeof(struct iommu_cmd_unmap);
	case IOMMU_CMD_IOVA_RANGES:
		*(struct iommu_cmd_iova_ranges *)buf = (struct iommu_cmd_iova_ranges){
			sizeof(struct iommu_cmd_iova_ranges), e->did, 0, 0, 0 };
		return sizeof(struct iommu_cmd_iova_ranges);
	}
	fail();
	return 0;
}

static const struct len_case {
	const char *name;
	unsigned int op;
	int want_exact;		/* result of the valid request at its exact size */
} len_cases[] = {
	{ "IOMMU-01 DESTROY", IOMMU_CMD_DESTROY, 0 },
	{ "IOMMU-01 DOMAIN_ALLOC", IOMMU_CMD_DOMAIN_ALLOC, 0 },
	{ "IOMMU-01 ATTACH", IOMMU_CMD_ATTACH, 0 },
	{ "IOMMU-01 DETACH", IOMMU_CMD_DETACH, 0 },
	{ "IOMMU-01 MAP", IOMMU_CMD_MAP, 0 },
	{ "IOMMU-01 UNMAP", IOMMU_CMD_UNMAP, 0 },
	{ "IOMMU-01 IOVA_RANGES", IOMMU_CMD_IOVA_RANGES, -EMSGSIZE },
};

/* cmd_length: size - 1 is EINVAL, size + 8 with a non-zero tail E2BIG, with a zero tail
 * the same as the exact size. Each variant runs on a fresh unit. */
static void test_length(void **state)
{
	const struct len_case *c = *state;

	for (int variant = 0; variant < 4; variant++) {
		struct env e;
		uint8_t buf[128] = { 0 };
		uint32_t size;
		int want;

		env_setup(&e);
		size = valid_req(&e, c->op, buf);
		switch (variant) {
		case 0:
			want = c->want_exact;
			break;
		case 1:
			size -= 1;
			want = -EINVAL;
			break;
		case 2:
			size += 8;
			buf[size - 1] = 1;
			want = -E2BIG;
			break;
		default:
			size += 8;
			want = c->want_exact;
			break;
		}
		memcpy(buf, &size, sizeof(size));
		assert_int_equal(iommu_cmd(e.mmu, c->op, buf), want);
		/* The size field is never rewritten, and the tail is left alone. */
		assert_memory_equal(buf, &size, sizeof(size));
		iommu_destroy(e.mmu);
	}
}

static void test_cmd_fail(void **state)
{
	struct env e;
	struct iommu_cmd_destroy d = { sizeof(d), IOMMU_OBJ_DOMAIN, 0, 0 };
	struct iommu_cmd_attach at = { sizeof(at), 1, 0, 0 };
	struct iommu_cmd_map m;
	uint8_t buf[64];

	(void)state;
	env_setup(&e);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DESTROY, &d), -ENOENT);	/* id 0 */
	d.id = 12345;
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DESTROY, &d), -ENOENT);
	d.obj = 9;
	d.id = e.did;
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DESTROY, &d), -EINVAL);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DESTROY, NULL), -EFAULT);
	assert_int_equal(iommu_cmd(e.mmu, 0x7f, buf), -ENOTTY);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_IOVA_RANGES + 1, buf), -ENOTTY);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_ATTACH, &at), -ENOENT);	/* domain 0 */
	/* Busy objects: an attached domain, a mapped memobj. */
	at.domain_id = e.did;
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_ATTACH, &at), 0);
	d = (struct iommu_cmd_destroy){ sizeof(d), IOMMU_OBJ_DOMAIN, e.did, 0 };
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DESTROY, &d), -EBUSY);
	valid_req(&e, IOMMU_CMD_MAP, buf);
	memcpy(&m, buf, sizeof(m));
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_MAP, &m), 0);
	d = (struct iommu_cmd_destroy){ sizeof(d), IOMMU_OBJ_MEMOBJ, iommu_memobj_id(e.mo), 0 };
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DESTROY, &d), -EBUSY);
	/* Reserved fields must be zero. */
	m.reserved = 1;
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_MAP, &m), -EINVAL);
	iommu_destroy(e.mmu);
}

/* Requests do what the C API does: map returns the IOVA, DMA sees it, unmap reports
 * the bytes, ranges report EMSGSIZE with the count. */
static void test_cmd_roundtrip(void **state)
{
	struct env e;
	struct iommu_cmd_attach at;
	struct iommu_cmd_map m = { .size = sizeof(m), .flags = IOMMU_MAP_FIXED_IOVA,
				   .memobj_id = 0, .offset = 2 * PG, .length = 2 * PG,
				   .iova = 1 << 20, .prot = IOMMU_READ };
	struct iommu_cmd_unmap u = { sizeof(u), 0, 1 << 20, 2 * PG };
	struct iommu_iova_range r[2];
	struct iommu_cmd_iova_ranges q = { sizeof(q), 0, 0, 0, (uintptr_t)r };
	uint8_t b;

	(void)state;
	env_setup(&e);
	at = (struct iommu_cmd_attach){ sizeof(at), 5, 0, e.did };
	m.domain_id = u.domain_id = q.domain_id = e.did;
	m.memobj_id = iommu_memobj_id(e.mo);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_ATTACH, &at), 0);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_MAP, &m), 0);
	assert_int_equal(m.iova, 1 << 20);
	assert_int_equal(iommu_dma_read(e.mmu, 5, (1 << 20) + PG, &b, 1), 0);
	assert_int_equal(b, 0x20 + 3);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_IOVA_RANGES, &q), -EMSGSIZE);
	assert_int_equal(q.num_ranges, 1);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_IOVA_RANGES, &q), 0);
	assert_int_equal(r[0].last, (1ull << 48) - 1);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_UNMAP, &u), 0);
	assert_int_equal(u.length, 2 * PG);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_UNMAP, &u), -ENOENT);
	assert_int_equal(iommu_dma_read(e.mmu, 5, (1 << 20) + PG, &b, 1), -EFAULT);
	assert_int_equal(iommu_cmd(e.mmu, IOMMU_CMD_DETACH, &at), 0);
	iommu_destroy(e.mmu);
}

int main(void)
{
	struct CMUnitTest tests[16];
	size_t n = 0;

	T_CASES(tests, n, len_cases, test_length);
	tests[n++] = (struct CMUnitTest){ "IOMMU-01 cmd_fail: ENOENT, EFAULT, ENOTTY, EBUSY",
					  test_cmd_fail, NULL, NULL, NULL };
	tests[n++] = (struct CMUnitTest){ "IOMMU-01 requests behave like the C API",
					  test_cmd_roundtrip, NULL, NULL, NULL };
	return _cmocka_run_group_tests("iommu_cmd", tests, n, NULL, NULL);
}
