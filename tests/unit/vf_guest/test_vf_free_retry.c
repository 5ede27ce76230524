// SPDX-License-Identifier: MIT
/* vgpu_mem_free(), vgpu_channel_destroy() and vgpu_vaspace_destroy() when the host's RM does
 * not confirm the FREE, against a real vgpud (one 512 MiB slice): the call returns the error
 * and the object stays, handle and memory included (a VA space: its mappings and page tables,
 * still usable), so that a second call frees it. The FREE is made to time out by not ringing
 * the mailbox doorbell for it and passing its bound at once; the request stays in the ring
 * and vgpud serves it later (its next sweep, or the retry's doorbell), after which the retry
 * finds no such object: the driver lets it go. Skipped with the reason when vgpud is not
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

#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_internal.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define UUID	"7e570000-0000-4000-8000-00000000aa21"
#define MEMSZ	(64ull << 10)
#define TRIES	100	/* FREEs tried until one times out */
#define VA	0x200000000ull	/* where the VA space case maps its memory */

static const struct vgpu_vf_transport_ops *real_ops;
static struct vgpu_vf_transport_ops mute_ops;

/* The transport's notify, except that a mailbox request is not announced. */
static int mute_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	return v == VF_VEC_MBOX ? 0 : real_ops->notify(t, v);
}

/* The next RM calls of @vf time out unless vgpud happens to sweep the ring at once. */
static void mute(struct vgpu_vf *vf, uint64_t *saved_timeout)
{
	real_ops = vf->t->ops;
	mute_ops = *real_ops;
	mute_ops.notify = mute_notify;
	vf->t->ops = &mute_ops;
	*saved_timeout = vf->opts.rm_timeout_ns;
	vf->opts.rm_timeout_ns = 1;
}

static void unmute(struct vgpu_vf *vf, uint64_t saved_timeout)
{
	vf->t->ops = real_ops;
	vf->opts.rm_timeout_ns = saved_timeout;
}

static bool on_list(struct cmn_list *head, struct cmn_list *node)
{
	for (struct cmn_list *n = head->next; n != head; n = n->next)
		if (n == node)
			return true;
	return false;
}

static unsigned int list_len(struct cmn_list *head)
{
	unsigned int n = 0;

	for (struct cmn_list *e = head->next; e != head; e = e->next)
		n++;
	return n;
}

/* Whether the DMA page at @off is allocated (single-threaded here: no lock). */
static bool dma_page_used(const struct vgpu_vf *vf, uint64_t off)
{
	uint64_t i = off / VF_DMA_PAGE;

	return vf->dma.bitmap[i / 64] >> (i % 64) & 1;
}

static void test_mem_free_retry(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_mem *m;
	struct vgpu_vf *vf;
	uint64_t saved;
	int ret = 0;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	/* Until a FREE times out (vgpud may serve one before the bound is checked). */
	for (int i = 0; i < TRIES && !ret; i++) {
		assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_VRAM, MEMSZ, 0, &m), 0);
		mute(vf, &saved);
		ret = vgpu_mem_free(m);
		unmute(vf, saved);
	}
	assert_int_equal(ret, -ETIMEDOUT);
	/* Still the driver's, handle and all. */
	assert_true(on_list(&vf->mems, &m->node));
	assert_int_equal(vgpu_mem_size(m), MEMSZ);
	assert_int_equal(vgpu_mem_free(m), 0);
	assert_false(on_list(&vf->mems, &m->node));
	vfx_vf_close(vf);
}

static void test_channel_destroy_retry(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_channel *ch;
	struct vgpu_vaspace *as;
	struct vgpu_vf *vf;
	uint64_t saved;
	int ret = 0;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_vaspace_create(vf, &as), 0);
	for (int i = 0; i < TRIES && !ret; i++) {
		assert_int_equal(vgpu_channel_create(vf, as, NULL, &ch), 0);
		mute(vf, &saved);
		ret = vgpu_channel_destroy(ch);
		unmute(vf, saved);
	}
	assert_int_equal(ret, -ETIMEDOUT);
	/* The channel and its GPFIFO/USERD memory stay until the FREE is confirmed. */
	assert_true(on_list(&vf->channels, &ch->node));
	if (ch->mem)
		assert_true(on_list(&vf->mems, &ch->mem->node));
	else
		assert_true(dma_page_used(vf, ch->dma_off));
	assert_int_equal(vgpu_channel_destroy(ch), 0);
	assert_false(on_list(&vf->channels, &ch->node));
	assert_int_equal(vgpu_vaspace_destroy(as), 0);
	vfx_vf_close(vf);
}

/* @m at VA through @as: the lookup finds it. */
static void assert_mapped(struct vgpu_vaspace *as, struct vgpu_mem *m)
{
	enum vgpu_mem_kind kind;
	uint64_t addr, ps;

	assert_int_equal(vgpu_va_lookup(as, VA, &kind, &addr, &ps), 0);
	assert_int_equal(kind, VGPU_MEM_VRAM);
	assert_int_equal(addr, vgpu_mem_addr(m));
	assert_int_equal(ps, VGPU_GMMU_PAGE_64K);
}

static void test_vaspace_destroy_retry(void **state)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_vaspace *as;
	struct vgpu_mem *m;
	struct vgpu_vf *vf;
	uint64_t saved, pdb = 0, tables = 0;
	uint32_t handle = 0, chunks;
	unsigned int mems;
	int ret = 0;

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(vfx_vf_open(&vo, &vf), 0);
	assert_int_equal(vgpu_mem_alloc(vf, VGPU_MEM_VRAM, MEMSZ, VGPU_GMMU_PAGE_64K, &m), 0);
	for (int i = 0; i < TRIES && !ret; i++) {
		assert_int_equal(vgpu_vaspace_create(vf, &as), 0);
		assert_int_equal(vgpu_va_map(as, VA, m, 0, MEMSZ, VGPU_GMMU_PAGE_64K, 0), 0);
		handle = as->handle;
		pdb = vgpu_vaspace_pdb(as);
		tables = vgpu_vaspace_table_bytes(as);
		mute(vf, &saved);
		ret = vgpu_vaspace_destroy(as);
		unmute(vf, saved);
	}
	assert_int_equal(ret, -ETIMEDOUT);
	/* Still the driver's: handle, page tables (and their VRAM chunks), the mapping. */
	assert_true(on_list(&vf->vaspaces, &as->node));
	assert_int_not_equal(handle, 0);
	assert_int_equal(as->handle, handle);
	assert_int_equal(vgpu_vaspace_pdb(as), pdb);
	assert_int_equal(vgpu_vaspace_table_bytes(as), tables);
	assert_true(as->nr_chunks > 0);
	for (uint32_t i = 0; i < as->nr_chunks; i++)
		assert_true(on_list(&vf->mems, &as->chunks[i].mem->node));
	assert_int_equal(atomic_load(&m->maps), 1);
	assert_int_equal(vgpu_mem_free(m), -EBUSY);
	assert_mapped(as, m);
	/* And usable: the mapping goes and comes back. */
	assert_int_equal(vgpu_va_unmap(as, VA, MEMSZ), 0);
	assert_int_equal(vgpu_va_lookup(as, VA, NULL, NULL, NULL), -ENOENT);
	assert_int_equal(atomic_load(&m->maps), 0);
	assert_int_equal(vgpu_va_map(as, VA, m, 0, MEMSZ, VGPU_GMMU_PAGE_64K, 0), 0);
	assert_mapped(as, m);
	/* The second call frees it, page-table chunks and mapping included. */
	chunks = as->nr_chunks;
	mems = list_len(&vf->mems);
	assert_int_equal(vgpu_vaspace_destroy(as), 0);
	assert_false(on_list(&vf->vaspaces, &as->node));
	assert_int_equal(list_len(&vf->mems), mems - chunks);
	assert_int_equal(atomic_load(&m->maps), 0);
	assert_int_equal(vgpu_mem_free(m), 0);
	vfx_vf_close(vf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_mem_free_retry, vfx_case_teardown),
		cmocka_unit_test_teardown(test_channel_destroy_retry, vfx_case_teardown),
		cmocka_unit_test_teardown(test_vaspace_destroy_retry, vfx_case_teardown),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-freeretry", UUID,
			     "vgpu-512M");
}
