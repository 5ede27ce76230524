// SPDX-License-Identifier: MIT
/* Migration of a function's RM tree: rm_vf_export() lists clients and objects in an order
 * rm_obj_import() can re-make them in (parents, a channel's VA space even when a BIND made
 * it newer than the channel, a dup's source first), and importing that list into the
 * emptied function re-makes the same tree: the same handles, VRAM pages, DMA offsets and
 * IOVAs, channel ids and tokens, shares, with channels left disabled, so a second export
 * equals the first. Conflicting or out-of-order records are refused and leave nothing.
 * Runs against the real vgpu-gsp. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/err.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm/rm_internal.h"	/* the export's comparison count */
#include "rm_test.h"

static struct rm_fixture fx;

/* IOVAs from 4 GiB up, as vgpud gives its VFs (IOVA 0 means "pick one" to the map op). */
static int setup(void **state)
{
	struct iommu_iova_range above = { 1ull << 32, (1ull << 40) - 1 };

	(void)state;
	return rm_fixture_up(&fx, NULL) || iommu_allow_iovas(fx.dom[1], &above, 1);
}

static int teardown(void **state)
{
	(void)state;
	return rm_fixture_down_checked(&fx);
}

/* What the test made, to check the re-made tree against. */
struct tree {
	uint32_t hc, hd, hs, hc2, hd2;
	uint32_t hv1, hv2, hm, hsys, hdup, hch, hev, hu;
	uint32_t token, chid;
	uint64_t vram_addr, iova;
};

/* Two clients: VA spaces, scattered VRAM, DMA memory shared with and dup'ed by the second
 * client, usermode, a channel bound to the newer VA space and enabled, an event on it. */
static void build(struct tree *t)
{
	struct vgpu_rm_vaspace_params vp = { .pdb = 0x10000 }, vp2 = { .pdb = 0x20000 };
	struct vgpu_rm_sysmem_params sp = { .size = 128 << 10 };
	struct vgpu_rm_usermode_params up = { 0 };
	struct vgpu_rm_event_params ep = { .notify_index = 3 };
	struct vgpu_rm_bind_params bp = { 0 };
	struct vgpu_rm_enable_params en = { .enable = 1 };
	struct vgpu_rm_token_params tok;
	struct vgpu_rm_channel_params cp;
	uint32_t hpad, aper;
	uint64_t size;
	size_t len = 0;

	memset(t, 0, sizeof(*t));
	assert_int_equal(rm_t_client(fx.rm, 1, &t->hc, &t->hd, &t->hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, t->hc, t->hd, &t->hv1, VGPU_RM_CLASS_VASPACE, &vp,
				  sizeof(vp)), 0);
	/* A freed allocation in the middle leaves the next one's pages scattered. */
	assert_int_equal(rm_t_vidmem(fx.rm, 1, t->hc, t->hd, 64 << 10, &hpad), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, t->hc, t->hd, 1 << 20, &t->hm), 0);
	assert_int_equal(rm_free(fx.rm, 1, t->hc, hpad), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, t->hc, t->hd, &t->hsys, VGPU_RM_CLASS_MEMORY_SYSMEM,
				  &sp, sizeof(sp)), 0);
	assert_int_equal(rm_map(fx.rm, 1, t->hc, t->hsys, &t->iova, &size, &aper), 0);
	assert_int_equal(rm_map(fx.rm, 1, t->hc, t->hm, &t->vram_addr, &size, &aper), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, t->hc, t->hd, &t->hu, VGPU_RM_CLASS_USERMODE, &up,
				  sizeof(up)), 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, t->hc, t->hd, t->hv1, &t->hch, &cp), 0);
	t->chid = cp.chid;
	t->token = cp.token;
	assert_int_equal(rm_alloc(fx.rm, 1, t->hc, t->hch, &t->hev, VGPU_RM_CLASS_EVENT, &ep,
				  sizeof(ep)), 0);
	/* A VA space newer than the channel, then the channel bound to it. */
	assert_int_equal(rm_alloc(fx.rm, 1, t->hc, t->hd, &t->hv2, VGPU_RM_CLASS_VASPACE, &vp2,
				  sizeof(vp2)), 0);
	bp.h_vaspace = t->hv2;
	len = sizeof(bp);
	assert_int_equal(rm_control(fx.rm, 1, t->hc, t->hch, VGPU_RM_CTRL_CHANNEL_BIND_VASPACE,
				    &bp, &len, sizeof(bp)), 0);
	len = sizeof(en);
	assert_int_equal(rm_control(fx.rm, 1, t->hc, t->hch, VGPU_RM_CTRL_CHANNEL_ENABLE, &en,
				    &len, sizeof(en)), 0);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, t->hc, t->hch, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN,
				    &tok, &len, sizeof(tok)), 0);
	assert_int_equal(tok.token, t->token);
	/* The second client dups the shared DMA memory. */
	assert_int_equal(rm_share(fx.rm, 1, t->hc, t->hsys, 0, VGPU_RM_ACCESS_DUP), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &t->hc2, &t->hd2, &hpad), 0);
	assert_int_equal(rm_dup(fx.rm, 1, t->hc2, t->hd2, &t->hdup, t->hc, t->hsys), 0);
}

static size_t index_of(const struct rm_obj_rec *r, size_t n, uint32_t hc, uint32_t h)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].h_client == hc && r[i].handle == h)
			return i;
	fail_msg("handle %#x of client %#x not exported", h, hc);
	return n;
}

struct rec_key {
	uint64_t key;			/* client << 32 | handle */
	size_t at;
};

static int rec_key_cmp(const void *a, const void *b)
{
	const struct rec_key *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

/* The position of (@hc, @h) in @idx (sorted, @n entries); fails the test if missing. */
static size_t rec_at(const struct rec_key *idx, size_t n, uint32_t hc, uint32_t h)
{
	struct rec_key k = { .key = (uint64_t)hc << 32 | h };
	const struct rec_key *f = bsearch(&k, idx, n, sizeof(k), rec_key_cmp);

	if (!f)
		fail_msg("handle %#x of client %#x not exported", h, hc);
	return f ? f->at : n;
}

/* Every record follows what it needs (an index, as a list may hold 65536 dups). */
static void check_order(const struct rm_obj_rec *r, size_t n)
{
	struct rec_key *idx = malloc((n + 1) * sizeof(*idx));

	assert_non_null(idx);
	for (size_t i = 0; i < n; i++)
		idx[i] = (struct rec_key){ (uint64_t)r[i].h_client << 32 | r[i].handle, i };
	qsort(idx, n, sizeof(*idx), rec_key_cmp);
	for (size_t i = 0; i < n; i++) {
		if (r[i].h_class)
			assert_true(rec_at(idx, n, r[i].h_client, r[i].h_parent) < i);
		if (r[i].dep_handle)
			assert_true(rec_at(idx, n, r[i].dep_client, r[i].dep_handle) < i);
	}
	free(idx);
}

static void check_same(const struct rm_obj_rec *a, size_t na, const struct rm_obj_rec *b,
		       size_t nb)
{
	assert_int_equal(na, nb);
	for (size_t i = 0; i < na; i++) {
		struct rm_obj_rec x = a[i], y = b[i];

		assert_int_equal(x.nr_runs, y.nr_runs);
		if (x.nr_runs)
			assert_memory_equal(x.runs, y.runs, 2 * x.nr_runs * sizeof(uint64_t));
		x.runs = y.runs = NULL;
		assert_memory_equal(&x, &y, sizeof(x));
	}
}

static void import_all(const struct rm_obj_rec *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int ret = rm_obj_import(fx.rm, 1, &r[i]);

		if (ret)
			fail_msg("record %zu (handle %#x class %#x) refused: %d", i, r[i].handle,
				 r[i].h_class, ret);
	}
}

/* Export, empty the function, import: the same tree, a second export equal to the first. */
static void test_round_trip(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct rm_obj_rec *r, *r2;
	struct vgpu_rm_token_params tok;
	struct vgpu_rm_enable_params en = { .enable = 1 };
	uint64_t objs, addr, size;
	uint32_t aper;
	size_t n, n2, len = 0, ich;
	struct tree t;

	(void)state;
	build(&t);
	objs = rm_object_count(fx.rm, 1);
	assert_int_equal(rm_vf_export(fx.rm, 1, &r, &n), 0);
	assert_int_equal(n, objs);
	check_order(r, n);
	ich = index_of(r, n, t.hc, t.hch);
	assert_true(index_of(r, n, t.hc, t.hv2) < ich);		/* the newer VA space first */
	assert_int_equal(r[ich].dep_handle, t.hv2);
	assert_int_equal(r[ich].x, t.chid);
	assert_true(r[ich].w & RM_OBJ_CHAN_ENABLED);
	assert_int_equal(r[index_of(r, n, t.hc2, t.hdup)].dep_handle, t.hsys);
	assert_true(r[index_of(r, n, t.hc, t.hm)].nr_runs >= 1);
	/* The function emptied (what a fresh destination is), then re-made from the list. */
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	import_all(r, n);
	assert_int_equal(rm_object_count(fx.rm, 1), objs);
	/* Same addresses, the channel disabled until enabled, its token unchanged. */
	assert_int_equal(rm_map(fx.rm, 1, t.hc, t.hsys, &addr, &size, &aper), 0);
	assert_int_equal(addr, t.iova);
	assert_int_equal(rm_map(fx.rm, 1, t.hc2, t.hdup, &addr, &size, &aper), 0);
	assert_int_equal(addr, t.iova);
	assert_int_equal(rm_map(fx.rm, 1, t.hc, t.hm, &addr, &size, &aper), 0);
	assert_int_equal(addr, t.vram_addr);
	assert_false(sh->fns[1].chans[t.chid].flags & GPU_CHAN_ENABLED);
	assert_int_equal(rm_control(fx.rm, 1, t.hc, t.hch, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN,
				    &tok, &len, sizeof(tok)), 0);
	assert_int_equal(tok.token, t.token);
	len = sizeof(en);
	assert_int_equal(rm_control(fx.rm, 1, t.hc, t.hch, VGPU_RM_CTRL_CHANNEL_ENABLE, &en,
				    &len, sizeof(en)), 0);
	assert_int_equal(rm_vf_export(fx.rm, 1, &r2, &n2), 0);
	check_same(r, n, r2, n2);
	rm_obj_recs_free(r, n);
	rm_obj_recs_free(r2, n2);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
}

/* A handle, chid or IOVA already there, a missing parent, another VF: refused, nothing left. */
static void test_refusals(void **state)
{
	struct rm_obj_rec *r;
	size_t n, ich, isys;
	uint64_t objs;
	struct tree t;

	(void)state;
	build(&t);
	assert_int_equal(rm_vf_export(fx.rm, 1, &r, &n), 0);
	objs = rm_object_count(fx.rm, 1);
	/* Everything exists: each record clashes. */
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[0]), -EEXIST);
	ich = index_of(r, n, t.hc, t.hch);
	isys = index_of(r, n, t.hc, t.hsys);
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[ich]), -EEXIST);
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[isys]), -EEXIST);
	/* Under another handle: the chid, the pages, the DMA chunks are taken. */
	r[ich].handle = VGPU_RM_HANDLE_BASE + 1000;
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[ich]), -EEXIST);
	r[isys].handle = VGPU_RM_HANDLE_BASE + 1001;
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[isys]), -EEXIST);
	assert_int_equal(rm_object_count(fx.rm, 1), objs);
	/* Into another VF: the handles name VF 1. */
	assert_int_equal(rm_obj_import(fx.rm, 2, &r[0]), -EINVAL);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	/* A channel before its VA space, a dup before its source. */
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[0]), 0);
	assert_int_equal(rm_obj_import(fx.rm, 1, &r[ich]), -ENOENT);
	assert_int_equal(rm_object_count(fx.rm, 1), 1);
	rm_obj_recs_free(r, n);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
}

/* 65536 dups of one 64 KiB object (what a 16 GiB slice's object quota allows), spread over
 * clients of 4000 objects each: the export lists the source once, before every dup, each
 * dup naming it, in creation order; emptied and imported back, the function exports the
 * same list. The export's comparisons stay under MIG_STEPS_C * n * log2(n) for its n
 * objects (about 3.2 of them with glibc's qsort): a scan of every item per dup's source
 * would take about n^2 / 2, over 100 times that bound here. */
#define MANY_DUPS 65536u
#define MIG_STEPS_C 16u
static void test_many_dups(void **state)
{
	uint32_t hc0, hd0, hs0, hmem, hc = 0, hd = 0, hs;
	struct rm_obj_rec *r, *r2;
	size_t n, n2, isrc, last = 0;
	unsigned int made = 0, dups = 0;
	uint64_t objs, steps, log2n;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc0, &hd0, &hs0), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc0, hd0, 64 << 10, &hmem), 0);
	assert_int_equal(rm_share(fx.rm, 1, hc0, hmem, 0, VGPU_RM_ACCESS_DUP), 0);
	for (; made < MANY_DUPS; made++) {
		uint32_t h = 0;

		if (made % 4000 == 0)
			assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
		assert_int_equal(rm_dup(fx.rm, 1, hc, hd, &h, hc0, hmem), 0);
	}
	objs = rm_object_count(fx.rm, 1);
	assert_int_equal(rm_vf_export(fx.rm, 1, &r, &n), 0);
	assert_int_equal(n, objs);
	steps = rm_mig_last_steps();
	log2n = 64 - (uint64_t)__builtin_clzll(n);		/* rounded up */
	print_message("export of %zu objects: %llu comparisons, %.1f n log2 n\n", n,
		      (unsigned long long)steps, (double)steps / (double)(n * log2n));
	assert_true(steps >= n);		/* it sorts them all: the count is live */
	assert_true(steps < MIG_STEPS_C * n * log2n);
	check_order(r, n);
	isrc = index_of(r, n, hc0, hmem);
	assert_int_equal(r[isrc].dep_handle, 0);
	assert_int_equal(r[isrc].nr_runs, 1);
	for (size_t i = 0; i < n; i++) {
		if (r[i].h_class != VGPU_RM_CLASS_MEMORY_VIDMEM || i == isrc)
			continue;
		/* Each dup names the source and follows the one made before it (clients and
		 * handles are handed out in increasing order here). */
		assert_true(i > isrc);
		assert_int_equal(r[i].dep_client, hc0);
		assert_int_equal(r[i].dep_handle, hmem);
		assert_int_equal(r[i].nr_runs, 0);
		if (dups)
			assert_true(((uint64_t)r[i].h_client << 32 | r[i].handle) >
				    ((uint64_t)r[last].h_client << 32 | r[last].handle));
		last = i;
		dups++;
	}
	assert_int_equal(dups, MANY_DUPS);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	import_all(r, n);
	assert_int_equal(rm_object_count(fx.rm, 1), objs);
	assert_int_equal(rm_vf_export(fx.rm, 1, &r2, &n2), 0);
	check_same(r, n, r2, n2);
	rm_obj_recs_free(r, n);
	rm_obj_recs_free(r2, n2);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_dups, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
