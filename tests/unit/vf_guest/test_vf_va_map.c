// SPDX-License-Identifier: MIT
/* vgpu_va_map() refuses bad ranges through the public guest API, against a real vgpud (one
 * 512 MiB slice): a zero size, a range past the GPU VA space or wrapping around it, bad
 * alignment, an unknown page size or flag, and any range that is not inside the memory
 * object. Each refusal is -EINVAL and leaves the address space as it was: no page mapped,
 * no page table allocated, nothing recorded against the memory object. A map over a managed
 * allocation's range is -EEXIST. Skipped with the reason when vgpud is not built. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include <vgpu/gmmu.h>
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define UUID	"7e570000-0000-4000-8000-00000000aa08"
#define PS	(64ull << 10)		/* the memory object's page size */
#define MEMSZ	(16 * PS)		/* its size */
#define VA0	(1ull << 40)		/* where the good mapping goes */
#define MANAGED_SZ (2ull << 20)		/* a managed allocation's size */

static const struct bad_map {
	const char *name;
	uint64_t va, off, size, ps;
	unsigned int flags;
	bool no_mem;			/* pass a NULL memory object */
} bad_maps[] = {
	{ "size 0", VA0, 0, 0, PS, 0, false },
	{ "size past the VA space", VGPU_GMMU_VA_LIMIT - PS, 0, 2 * PS, PS, 0, false },
	{ "va at the VA space's end", VGPU_GMMU_VA_LIMIT, 0, PS, PS, 0, false },
	{ "va + size wraps around", 0 - PS, 0, 2 * PS, PS, 0, false },
	{ "va not page aligned", VA0 + 4096, 0, PS, PS, 0, false },
	{ "offset not page aligned", VA0, 4096, PS, PS, 0, false },
	{ "size not a page multiple", VA0, 0, PS + 4096, PS, 0, false },
	{ "page size 8 KiB", VA0, 0, PS, 8192, 0, false },
	{ "page size 0", VA0, 0, PS, 0, 0, false },
	{ "unknown flag", VA0, 0, PS, PS, 1u << 7, false },
	{ "bigger than the memory", VA0, 0, MEMSZ + PS, PS, 0, false },
	{ "past the memory's end", VA0, PS, MEMSZ, PS, 0, false },
	{ "offset at the memory's end", VA0, MEMSZ, PS, PS, 0, false },
	{ "offset past the memory", VA0, MEMSZ + PS, PS, PS, 0, false },
	{ "offset + size wraps around", VA0, 0 - PS, 2 * PS, PS, 0, false },
	{ "whole VA space", 0, 0, VGPU_GMMU_VA_LIMIT, PS, 0, false },
	{ "no memory object", VA0, 0, PS, PS, 0, true },
};

/* Nothing of @c is mapped: the pages at its start, at VA0 and just past the memory's
 * size from VA0 all look up as unmapped, and unmapping the range finds nothing. */
static void expect_nothing_mapped(struct vgpu_vaspace *as, const struct bad_map *c)
{
	uint64_t probe[] = { c->va, VA0, VA0 + MEMSZ, c->va + PS };
	uint64_t addr, ps;
	enum vgpu_mem_kind kind;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(probe); i++) {
		if (probe[i] >= VGPU_GMMU_VA_LIMIT)
			continue;
		if (vgpu_va_lookup(as, probe[i], &kind, &addr, &ps) != -ENOENT)
			fail_msg("%s: 0x%llx is mapped", c->name, (unsigned long long)probe[i]);
	}
	if (vgpu_va_unmap(as, c->va, c->size) != -ENOENT)
		fail_msg("%s: the refused range was recorded", c->name);
}

static void test_bad_ranges(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_mem *mem;
	uint64_t tables, addr, ps;
	enum vgpu_mem_kind kind;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_vaspace_create(vf, &as), 0);
	assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_VRAM, MEMSZ, PS, &mem), 0);
	assert_int_equal(vgpu_mem_size(mem), MEMSZ);
	tables = vgpu_vaspace_table_bytes(as);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad_maps); i++) {
		const struct bad_map *c = &bad_maps[i];
		int ret = vgpu_va_map(as, c->va, c->no_mem ? NULL : mem, c->off, c->size, c->ps,
				      c->flags);

		if (ret != -EINVAL)
			fail_msg("%s: vgpu_va_map() = %d, want -EINVAL", c->name, ret);
		expect_nothing_mapped(as, c);
		if (vgpu_vaspace_table_bytes(as) != tables)
			fail_msg("%s: page tables grew", c->name);
	}
	/* The memory object holds no mapping (it frees at once) after a good map and unmap,
	 * which shows the refusals left the range free. */
	assert_int_equal(vgpu_va_map(as, VA0, mem, 0, MEMSZ, PS, 0), 0);
	assert_int_equal(vgpu_va_lookup(as, VA0 + MEMSZ - 1, &kind, &addr, &ps), 0);
	assert_int_equal(kind, VGPU_MEM_VRAM);
	assert_int_equal(addr, vgpu_mem_addr(mem) + MEMSZ - 1);
	assert_int_equal(ps, PS);
	assert_int_equal(vgpu_mem_free(mem), -EBUSY);
	assert_int_equal(vgpu_va_unmap(as, VA0, MEMSZ), 0);
	assert_int_equal(vgpu_mem_free(mem), 0);
	vgpu_vaspace_destroy(as);
	vfx_vf_close(vf);
}

/* A managed allocation keeps its range mapped with invalid PTEs until the GPU faults pages
 * in: a map over that range is -EEXIST like a map over any mapped page, and afterwards
 * both are freed and the page tables are back to what they were. */
static void test_map_over_managed(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_managed *m, *m2;
	struct vgpu_vaspace *as;
	struct vgpu_mem *mem;
	struct vgpu_vf *vf;
	uint64_t tables;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_vaspace_create(vf, &as), 0);
	assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_VRAM, MEMSZ, PS, &mem), 0);
	tables = vgpu_vaspace_table_bytes(as);
	assert_int_equal(vgpu_mem_alloc_managed(as, VA0, MANAGED_SZ, &m), 0);
	assert_int_equal(vgpu_va_map(as, VA0 + 4096, mem, 0, 4096, 4096, 0), -EEXIST);
	assert_int_equal(vgpu_va_map_raw(as, VA0 + MANAGED_SZ - 4096, VGPU_MEM_VRAM,
					 vgpu_mem_addr(mem), 4096, 4096, 0), -EEXIST);
	assert_int_equal(vgpu_mem_alloc_managed(as, VA0 - MANAGED_SZ, 2 * MANAGED_SZ, &m2),
			 -EEXIST);
	/* Next to it is free. */
	assert_int_equal(vgpu_va_map(as, VA0 + MANAGED_SZ, mem, 0, PS, PS, 0), 0);
	assert_int_equal(vgpu_va_unmap(as, VA0 + MANAGED_SZ, PS), 0);
	assert_int_equal(vgpu_mem_free(mem), 0);
	assert_int_equal(vgpu_mem_free_managed(m), 0);
	assert_int_equal(vgpu_vaspace_table_bytes(as), tables);
	vgpu_vaspace_destroy(as);
	vfx_vf_close(vf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_bad_ranges, vfx_case_teardown),
		cmocka_unit_test_teardown(test_map_over_managed, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-vamap", UUID, "vgpu-512M");
}
