// SPDX-License-Identifier: MIT
/* vgpu_submit()'s inline copy in USERD (vgpu/gpfifo.h, ABI 2.6), against a real vgpud:
 * a segment of at most VGPU_USERD_INL_DW dwords is copied next to GP_PUT under inl_ctl
 * naming its GP index, and a longer one withdraws the copy, so that when the 4-entry ring
 * comes round to an index an earlier short segment used, the engine runs the long
 * segment's methods and not the stale copy. Skipped with the reason when vgpud is not
 * built. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <vgpu/gmmu.h>
#include <vgpu/gpfifo.h>

#include "common/clock.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_internal.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define UUID	"7e570000-0000-4000-8000-00000000aa19"
#define PS	(64ull << 10)
#define VA0	(1ull << 40)
#define SUBS	24

static void test_short_and_long_round_the_ring(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_channel_opts co = { .gpfifo_entries = 4 };
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	struct vgpu_mem *mem;
	struct vgpu_fence f;
	struct vgpu_vf *vf;
	uint32_t dw[16], *p;
	struct vgpu_pb pb;
	unsigned int tries = 0;
	int ret;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_vaspace_create(vf, &as), 0);
	assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_VRAM, PS, PS, &mem), 0);
	assert_int_equal(vgpu_va_map(as, VA0, mem, 0, PS, PS, 0), 0);
	assert_int_equal(vgpu_channel_create(vf, as, &co, &ch), 0);
	p = vgpu_mem_cpu(mem);
	memset(p, 0, 4 * SUBS);
	for (uint32_t i = 0; i < SUBS; i++) {
		bool shrt = i % 5 == 0;

		/* FILL and the fence's release: 12 dwords, copied; a NOP more: 13, not. */
		vgpu_pb_init(&pb, dw, 16);
		vgpu_pb_fill(&pb, VA0 + 4 * i, 4, i + 1);
		if (!shrt)
			vgpu_pb_nop(&pb);
		/* A ring this short is full until the engine writes GP_GET back. */
		while ((ret = vgpu_submit(ch, pb.dw, pb.len, &f)) == -EAGAIN && tries++ < 100000)
			cmn_sleep_ns(100 * VGPU_NSEC_PER_USEC);
		assert_int_equal(ret, 0);
		assert_int_equal(__atomic_load_n(&ch->userd->inl_ctl, __ATOMIC_RELAXED),
				 shrt ? vgpu_userd_inl_ctl(i % 4, VGPU_USERD_INL_DW) : 0);
		assert_int_equal(vgpu_fence_wait(&f, 0), 0);
		assert_int_equal(p[i], i + 1);
	}
	vgpu_channel_destroy(ch);
	assert_int_equal(vgpu_va_unmap(as, VA0, PS), 0);
	assert_int_equal(vgpu_mem_free(mem), 0);
	vgpu_vaspace_destroy(as);
	vfx_vf_close(vf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_short_and_long_round_the_ring, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-inline", UUID, "vgpu-512M");
}
