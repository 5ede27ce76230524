// SPDX-License-Identifier: MIT
/* Freeing a managed allocation while a lock-free reader of the allocation table may hold
 * it, against a real vgpud (one 512 MiB slice): the mirror's callbacks (PTE invalidations,
 * from the SIGSEGV handler too, and the PTE writes of a prefetch) find allocations in the
 * table without a lock, inside a read section. vgpu_mem_free_managed() empties the slot
 * and then waits for every section that may have seen it before it frees anything. Here
 * the test is that reader: it holds a section open with the allocation in hand, frees it
 * from another thread, waits until that free has emptied the slot and begun its wait (or,
 * without the wait, has returned), and finds the allocation intact and the free still
 * waiting. Skipped with the reason when vgpud is not built; also run under TSan. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/managed_internal.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define UUID	"7e570000-0000-4000-8000-00000000aa22"
#define MVA	(1ull << 40)
#define MSIZE	(2ull << 20)

struct freer {
	struct vgpu_managed *m;
	int ret;
	atomic_bool done;
};

static void *free_thread(void *arg)
{
	struct freer *f = arg;

	f->ret = vgpu_mem_free_managed(f->m);
	atomic_store(&f->done, true);
	return NULL;
}

static void test_free_waits_for_readers(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_managed_opts mo = { .no_thread = true };
	struct freer f = { 0 };
	struct vgpu_vaspace *as;
	struct vgpu_managed *m;
	struct vf_managed *st;
	unsigned int rd, epoch;
	struct vgpu_vf *vf;
	pthread_t th;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_managed_init(vf, &mo), 0);
	assert_int_equal(vgpu_vaspace_create(vf, &as), 0);
	assert_int_equal(vgpu_mem_alloc_managed(as, MVA, MSIZE, &f.m), 0);
	st = f.m->st;
	/* What mirror_invalidate() does: a section, then the allocation from its slot. */
	rd = managed_read_begin(st);
	m = atomic_load(&st->allocs[f.m->slot]);
	assert_ptr_equal(m, f.m);
	epoch = atomic_load(&st->rd_epoch);
	assert_int_equal(pthread_create(&th, NULL, free_thread, &f), 0);
	while (!atomic_load(&f.done) && atomic_load(&st->rd_epoch) == epoch)
		sched_yield();
	assert_false(atomic_load(&f.done));
	assert_null(atomic_load(&st->allocs[m->slot]));
	/* Still intact while the section lasts. */
	assert_ptr_equal(m->st, st);
	assert_int_equal(m->va, MVA);
	assert_int_equal(m->size, MSIZE);
	managed_read_end(st, rd);
	pthread_join(th, NULL);
	assert_int_equal(f.ret, 0);
	vgpu_vaspace_destroy(as);
	vfx_vf_close(vf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_free_waits_for_readers, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-mfree", UUID, "vgpu-512M");
}
