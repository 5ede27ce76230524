// SPDX-License-Identifier: MIT
/* Resource server: lifecycle of every class, dependency-ordered free, sharing and access
 * rights, cross-VF handles, handle exhaustion without aliasing, the per-client object
 * table, quotas, VF reset / guest gone by handle range, and the lock-order validator.
 * Runs against the real vgpu-gsp. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <vgpu/gmmu.h>

#include "common/compiler.h"
#include "common/err.h"
#include "common/lock.h"
#include "common/log.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

static struct rm_fixture fx;

static int setup(void **state)
{
	(void)state;
	return rm_fixture_up(&fx, NULL);
}

static int setup_small(void **state)
{
	struct rm_config c = { .max_clients = 8, .max_objects = 16 };

	(void)state;
	return rm_fixture_up(&fx, &c);
}

static int teardown(void **state)
{
	(void)state;
	return rm_fixture_down_checked(&fx);
}

/* Every class: allocate, use, free; the function's object count returns to zero. */
static void test_lifecycle(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rm_vaspace_params vp = { .pdb = 0x10000 };
	struct vgpu_rm_sysmem_params sp = { .size = 128 << 10 };
	struct vgpu_rm_usermode_params up = { 0 };
	struct vgpu_rm_event_params ep = { .notify_index = 3 };
	struct vgpu_rm_channel_params cp;
	struct vgpu_rm_enable_params en = { .enable = 1 };
	struct vgpu_rm_token_params tok;
	struct vgpu_rm_info info;
	uint32_t hc, hd, hs, hv = 0, hm, hsys = 0, hu = 0, he = 0, hch;
	uint64_t addr, size;
	uint32_t aper;
	size_t len;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(VGPU_RM_CLIENT_FN(hc), 1);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc, hd, 1 << 20, &hm), 0);
	assert_int_equal(rm_map(fx.rm, 1, hc, hm, &addr, &size, &aper), 0);
	assert_true(addr + size <= T_SLICE);	/* VF-physical: inside its own slice */
	assert_int_equal(aper, VGPU_APER_VRAM);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hsys, VGPU_RM_CLASS_MEMORY_SYSMEM, &sp, sizeof(sp)), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hu, VGPU_RM_CLASS_USERMODE, &up, sizeof(up)), 0);
	assert_int_equal(up.doorbell_offset, 4096);
	assert_int_equal(rm_t_channel(fx.rm, 1, hc, hd, hv, &hch, &cp), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hch, &he, VGPU_RM_CLASS_EVENT, &ep, sizeof(ep)), 0);
	assert_true(sh->fns[1].chans[cp.chid].flags & GPU_CHAN_ALLOCATED);
	assert_int_equal(sh->fns[1].chans[cp.chid].pdb, 0x10000);
	len = sizeof(en);
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &len, sizeof(en)), 0);
	assert_true(sh->fns[1].runlist[0] & (1ull << cp.chid));
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN, &tok, &len, sizeof(tok)), 0);
	assert_int_equal(tok.token, cp.token);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, hc, hs, VGPU_RM_CTRL_GET_INFO, &info, &len, sizeof(info)), 0);
	assert_int_equal(info.fn, 1);
	assert_int_equal(info.vram_size, T_SLICE);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, hc, hs, VGPU_RM_CTRL_FAULT_REPLAY, NULL, &len, 0), 0);
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_FAULT_REPLAY, NULL, &len, 0), -EINVAL);
	assert_int_equal(rm_object_count(fx.rm, 1), 9);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	assert_false(sh->fns[1].chans[cp.chid].flags & GPU_CHAN_ALLOCATED);
	assert_int_equal(sh->fns[1].runlist[0], 0);
	assert_int_equal(rm_free(fx.rm, 1, hc, hd), -ENOENT);
}

/* CHANNEL_SUBMIT (the kernel-mediated baseline): GP_PUT lands in the channel's USERD and its
 * doorbell is rung; a GP_PUT past the ring, a non-zero reserved word or a non-channel handle
 * change nothing. */
static void test_channel_submit(void **state)
{
	struct vgpu_rm_vaspace_params vp = { .pdb = 0 };
	struct vgpu_rm_submit_params sp = { .gp_put = 5 };
	struct vgpu_rm_channel_params cp;
	uint32_t hc, hd, hs, hv = 0, hch, *userd, head;
	size_t len = sizeof(sp);

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)), 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, hc, hd, hv, &hch, &cp), 0);
	userd = gpu_vram_ptr(fx.gpu, 1 * T_SLICE + cp.userd_addr, 128);
	assert_non_null(userd);
	head = __atomic_load_n(&gpu_doorbell_page(fx.gpu, 1)->head, __ATOMIC_SEQ_CST);
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len, sizeof(sp)), 0);
	assert_int_equal(userd[0], 5);
	/* Rung: one token posted to the function's doorbell page. */
	assert_int_equal(__atomic_load_n(&gpu_doorbell_page(fx.gpu, 1)->head, __ATOMIC_SEQ_CST),
			 head + 1);
	sp.gp_put = cp.gpfifo_entries;
	len = sizeof(sp);
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len, sizeof(sp)), -EINVAL);
	sp = (struct vgpu_rm_submit_params){ .gp_put = 1, .reserved = 1 };
	len = sizeof(sp);
	assert_int_equal(rm_control(fx.rm, 1, hc, hch, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len, sizeof(sp)), -EINVAL);
	sp.reserved = 0;
	len = sizeof(sp);
	assert_int_equal(rm_control(fx.rm, 1, hc, hv, VGPU_RM_CTRL_CHANNEL_SUBMIT, &sp, &len, sizeof(sp)), -EINVAL);
	assert_int_equal(userd[0], 5);
	assert_int_equal(__atomic_load_n(&gpu_doorbell_page(fx.gpu, 1)->head, __ATOMIC_SEQ_CST),
			 head + 1);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* Freeing a VA space frees the channel that depends on it first, and a device its
 * whole subtree, iteratively; the parent itself last. */
static void test_dependency_free(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rm_vaspace_params vp = { .pdb = 0 };
	struct vgpu_rm_channel_params cp;
	uint32_t hc, hd, hs, hv = 0, hch, hm;
	size_t len = 0;
	struct vgpu_rm_token_params tok;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 2, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 2, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)), 0);
	assert_int_equal(rm_t_channel(fx.rm, 2, hc, hd, hv, &hch, &cp), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 2, hc, hd, 2 << 20, &hm), 0);
	/* rebind to a second VA space: the dependency moves with it */
	{
		struct vgpu_rm_vaspace_params vp2 = { .pdb = 0x40000 };
		struct vgpu_rm_bind_params b = { 0 };
		struct vgpu_rm_enable_params en = { .enable = 1 };
		uint32_t hv2 = 0;
		size_t l;

		assert_int_equal(rm_alloc(fx.rm, 2, hc, hd, &hv2, VGPU_RM_CLASS_VASPACE, &vp2, sizeof(vp2)), 0);
		b.h_vaspace = hv2;
		l = sizeof(b);
		assert_int_equal(rm_control(fx.rm, 2, hc, hch, VGPU_RM_CTRL_CHANNEL_BIND_VASPACE, &b, &l, sizeof(b)), 0);
		assert_int_equal(sh->fns[2].chans[cp.chid].pdb, 0x40000);
		l = sizeof(en);
		assert_int_equal(rm_control(fx.rm, 2, hc, hch, VGPU_RM_CTRL_CHANNEL_ENABLE, &en, &l, sizeof(en)), 0);
		b.h_vaspace = hv;
		l = sizeof(b);
		assert_int_equal(rm_control(fx.rm, 2, hc, hch, VGPU_RM_CTRL_CHANNEL_BIND_VASPACE, &b, &l, sizeof(b)), -EBUSY);
		assert_int_equal(rm_free(fx.rm, 2, hc, hv), 0);	/* the old one: channel stays */
		l = 0;
		assert_int_equal(rm_control(fx.rm, 2, hc, hch, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN, &tok, &l, sizeof(tok)), 0);
		hv = hv2;
	}
	assert_int_equal(rm_free(fx.rm, 2, hc, hv), 0);
	assert_int_equal(rm_control(fx.rm, 2, hc, hch, VGPU_RM_CTRL_GET_WORK_SUBMIT_TOKEN, &tok, &len,
				    sizeof(tok)), -ENOENT);
	assert_false(sh->fns[2].chans[cp.chid].flags & GPU_CHAN_ALLOCATED);
	assert_int_equal(rm_object_count(fx.rm, 2), 4);	/* client, device, subdevice, memory */
	assert_int_equal(rm_free(fx.rm, 2, hc, hd), 0);
	assert_int_equal(rm_object_count(fx.rm, 2), 1);
	assert_int_equal(rm_free(fx.rm, 2, hc, hm), -ENOENT);
	assert_int_equal(rm_free(fx.rm, 2, hc, hc), 0);
}

/* VRAM bytes function @fn has charged (GET_QUOTA through subdevice @hs of client @hc). */
static uint64_t vram_used(unsigned int fn, uint32_t hc, uint32_t hs)
{
	struct vgpu_rm_quota_info qi;
	size_t len = 0;

	assert_int_equal(rm_control(fx.rm, fn, hc, hs, VGPU_RM_CTRL_GET_QUOTA, &qi, &len, sizeof(qi)), 0);
	return qi.vram_used;
}

/* Alignment is of the VF-physical address the allocation returns, whatever the slice's
 * device offset: VF 1 sits at 16 MiB, VF 3 at 50 MiB (2 MiB but not 4 MiB aligned). A
 * blocker taken first keeps VF-physical 0 from satisfying every alignment. */
static const struct align_case {
	const char *name;
	unsigned int fn;
	uint64_t blocker;		/* bytes taken first at VF-physical 0 (64 KiB pages) */
	uint64_t size, page, align;
	bool contig;
	uint64_t want;			/* expected VF-physical address */
} align_cases[] = {
	{ "align 64 KiB", 1, 64 << 10, 64 << 10, 64 << 10, 64 << 10, false, 64 << 10 },
	{ "align 1 MiB, 64 KiB pages", 1, 64 << 10, 192 << 10, 64 << 10, 1 << 20, true, 1 << 20 },
	{ "align 1 MiB, scattered", 1, 64 << 10, 192 << 10, 64 << 10, 1 << 20, false, 1 << 20 },
	{ "align 4 MiB, 2 MiB pages", 1, 2 << 20, 4 << 20, 2 << 20, 4 << 20, true, 4 << 20 },
	{ "align 8 MiB", 1, 64 << 10, 2 << 20, 64 << 10, 8 << 20, true, 8 << 20 },
	{ "align 32 MiB (above the slice)", 1, 0, 2 << 20, 2 << 20, 32 << 20, true, 0 },
	{ "align 4 MiB, base 2 MiB odd", 3, 2 << 20, 4 << 20, 2 << 20, 4 << 20, true, 4 << 20 },
	{ "align 4 MiB scattered, base odd", 3, 64 << 10, 4 << 20, 64 << 10, 4 << 20, false, 4 << 20 },
	{ "align 8 MiB, base odd, no room", 3, 64 << 10, 8 << 20, 2 << 20, 8 << 20, true, ~0ull },
};

static void test_vram_alignment(void **state)
{
	const struct align_case *c = *state;
	struct rm_partition part = { .base = 50ull << 20, .size = 14ull << 20 };
	struct vgpu_rm_vidmem_params p = { .size = c->size, .page_size = c->page,
					   .alignment = c->align,
					   .flags = c->contig ? VGPU_RM_MEM_CONTIGUOUS : 0 };
	uint32_t hc, hd, hs, hb = 0, hm = 0;
	uint64_t size, addr;
	uint32_t aper;

	if (c->fn == 3)
		assert_int_equal(rm_vf_partition_set(fx.rm, 3, &part), 0);
	assert_int_equal(rm_t_client(fx.rm, c->fn, &hc, &hd, &hs), 0);
	if (c->blocker) {
		assert_int_equal(rm_t_vidmem(fx.rm, c->fn, hc, hd, c->blocker, &hb), 0);
		assert_int_equal(rm_map(fx.rm, c->fn, hc, hb, &addr, &size, &aper), 0);
		assert_int_equal(addr, 0);
	}
	if (c->want == ~0ull) {
		assert_int_equal(rm_alloc(fx.rm, c->fn, hc, hd, &hm, VGPU_RM_CLASS_MEMORY_VIDMEM,
					  &p, sizeof(p)), -ENOMEM);
		assert_int_equal(vram_used(c->fn, hc, hs), c->blocker);
	} else {
		assert_int_equal(rm_alloc(fx.rm, c->fn, hc, hd, &hm, VGPU_RM_CLASS_MEMORY_VIDMEM,
					  &p, sizeof(p)), 0);
		assert_int_equal(p.addr, c->want);
		assert_int_equal(p.addr % c->align, 0);
		assert_int_equal(vram_used(c->fn, hc, hs), c->blocker + c->size);
		assert_int_equal(rm_free(fx.rm, c->fn, hc, hm), 0);
	}
	if (hb)
		assert_int_equal(rm_free(fx.rm, c->fn, hc, hb), 0);
	/* everything went back to the PMA: the whole slice fits in one piece again */
	p = (struct vgpu_rm_vidmem_params){ .size = c->fn == 3 ? part.size : T_SLICE,
					    .page_size = 2 << 20, .flags = VGPU_RM_MEM_CONTIGUOUS };
	hm = 0;
	assert_int_equal(rm_alloc(fx.rm, c->fn, hc, hd, &hm, VGPU_RM_CLASS_MEMORY_VIDMEM, &p, sizeof(p)), 0);
	assert_int_equal(p.addr, 0);
	assert_int_equal(rm_client_free(fx.rm, c->fn, hc), 0);
	if (c->fn == 3)
		assert_int_equal(rm_vf_partition_clear(fx.rm, 3), 0);
}

/* Wrong parents, sizes and params are refused and change nothing. */
static const struct bad_alloc {
	const char *name;
	uint32_t cls;
	int parent;		/* 0 client, 1 device, 2 subdevice */
	uint64_t size, page;
	int want;
	uint64_t align;
	const char *why;	/* the debug log names the problem */
} bad_allocs[] = {
	{ "memory under the client", VGPU_RM_CLASS_MEMORY_VIDMEM, 0, 1 << 20, 64 << 10, -EINVAL, 0, NULL },
	{ "device under a device", VGPU_RM_CLASS_DEVICE, 1, 0, 0, -EINVAL, 0, NULL },
	{ "unknown class", 0x1234, 1, 0, 0, -EOPNOTSUPP, 0, NULL },
	{ "size not a page multiple", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 100, 64 << 10, -EINVAL, 0,
	  "size is not a multiple of the page size" },
	{ "page size 4 KiB", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 1 << 20, 4096, -EINVAL, 0,
	  "page size is neither" },
	{ "larger than the slice", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 32 << 20, 64 << 10, -ENOMEM, 0,
	  NULL },
	{ "alignment not a power of two", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 1 << 20, 64 << 10,
	  -EINVAL, 3 << 16, "alignment is not a power of two" },
	{ "alignment below the page size", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 2 << 20, 2 << 20,
	  -EINVAL, 1 << 20, "alignment is below the page size" },
	{ "alignment above 1 TiB", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 1 << 20, 64 << 10,
	  -EINVAL, 1ull << 41, "alignment is above 1 TiB" },
	{ "alignment with a bad page size", VGPU_RM_CLASS_MEMORY_VIDMEM, 1, 1 << 20, 4096,
	  -EINVAL, 1 << 20, "page size" },
};

static char last_log[256];
static void log_sink(enum cmn_log_level level, const char *msg, void *ctx)
{
	(void)level;
	(void)ctx;
	snprintf(last_log, sizeof(last_log), "%s", msg);
}

static void test_bad_alloc(void **state)
{
	const struct bad_alloc *c = *state;
	struct vgpu_rm_vidmem_params p = { .size = c->size, .page_size = c->page,
					   .alignment = c->align };
	enum cmn_log_level lvl = cmn_log_get_level();
	uint32_t hc, hd, hs, h = 0, parents[3];

	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	parents[0] = hc;
	parents[1] = hd;
	parents[2] = hs;
	last_log[0] = '\0';
	cmn_log_set_level(VGPU_LOG_DEBUG);
	cmn_log_set_sink(log_sink, NULL);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, parents[c->parent], &h, c->cls,
				  c->cls == VGPU_RM_CLASS_MEMORY_VIDMEM ? &p : NULL,
				  c->cls == VGPU_RM_CLASS_MEMORY_VIDMEM ? sizeof(p) : 0), c->want);
	cmn_log_set_sink(NULL, NULL);
	cmn_log_set_level(lvl);
	if (c->why && !strstr(last_log, c->why))
		fail_msg("log \"%s\" does not say \"%s\"", last_log, c->why);
	assert_int_equal(rm_object_count(fx.rm, 1), 3);
	assert_int_equal(h, 0);
	assert_int_equal(p.addr, 0);
	assert_int_equal(vram_used(1, hc, hs), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* A VRAM request the slice could never hold is refused before the RM allocates its page
 * list (for 1 TiB of 64 KiB pages 2^24 entries, 128 MiB): over quota where the function
 * has one, out of space where it has none. The process's peak RSS, reset just before the
 * call, counts what the call touched. */
static const struct huge_case {
	const char *name;
	uint64_t quota;			/* VF 1's VRAM quota; 0: none */
	int want;
} huge_cases[] = {
	{ "1 TiB over a quota", T_SLICE, -VGPU_EQUOTA },
	{ "1 TiB without a quota", 0, -ENOMEM },
};

/* Set the process's peak RSS to its RSS now; false where the kernel cannot. */
static bool peak_rss_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	bool ok = f && fputs("5", f) >= 0;

	if (f && fclose(f))
		ok = false;
	return ok;
}

/* The process's peak RSS (VmHWM) in KiB. */
static uint64_t peak_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	unsigned long long v = 0;
	char line[128];

	assert_non_null(f);
	while (fgets(line, sizeof(line), f) && sscanf(line, "VmHWM: %llu kB", &v) != 1)
		;
	fclose(f);
	assert_true(v > 0);
	return v;
}

static void test_vram_huge(void **state)
{
	const struct huge_case *c = *state;
	struct rm_quota q = { .vram = c->quota };
	struct vgpu_rm_vidmem_params p = { .size = 1ull << 40, .page_size = 64 << 10 };
	uint32_t hc, hd, hs, h = 0;
	uint64_t peak0, grew;
	int ret;

	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	if (!peak_rss_reset()) {
		assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
		skip();
	}
	peak0 = peak_rss_kib();
	ret = rm_alloc(fx.rm, 1, hc, hd, &h, VGPU_RM_CLASS_MEMORY_VIDMEM, &p, sizeof(p));
	grew = peak_rss_kib() - peak0;
	print_message("peak RSS grew by %llu KiB\n", (unsigned long long)grew);
	assert_int_equal(ret, c->want);
	assert_int_equal(h, 0);
	assert_true(grew < (16 << 10));		/* far below the 128 MiB page list */
	assert_int_equal(vram_used(1, hc, hs), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* An EVENT's reserved word must be zero, as every class's: refused, nothing is made. */
static void test_event_reserved(void **state)
{
	struct vgpu_rm_event_params ep = { .notify_index = 1, .reserved = 1 };
	uint32_t hc, hd, hs, h = 0;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hs, &h, VGPU_RM_CLASS_EVENT, &ep, sizeof(ep)),
			 -EINVAL);
	assert_int_equal(h, 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 3);
	ep.reserved = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hs, &h, VGPU_RM_CLASS_EVENT, &ep, sizeof(ep)), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 4);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* A VASPACE's and a CHANNEL_GPFIFO's reserved words must be zero too: refused before a
 * channel is reserved or the GSP asked, nothing is made; the same with zero is made. */
static void test_vas_chan_reserved(void **state)
{
	struct vgpu_rm_vaspace_params vp = { .pdb = 0, .reserved = 1 };
	struct vgpu_rm_channel_params cp;
	struct vgpu_rm_quota_info qi;
	struct gsp_stats st0, st1;
	uint32_t hc, hd, hs, hv = 0, h = 0;
	size_t len = 0;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)),
			 -EINVAL);
	assert_int_equal(hv, 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 3);
	vp.reserved = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)),
			 0);
	cp = (struct vgpu_rm_channel_params){ .h_vaspace = hv, .gpfifo_va = 0x100000,
					      .gpfifo_entries = 64, .userd_addr = 0x2000,
					      .reserved = 0x80000000u };
	gsp_get_stats(rm_gsp(fx.rm), &st0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &h, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp,
				  sizeof(cp)), -EINVAL);
	gsp_get_stats(rm_gsp(fx.rm), &st1);
	assert_int_equal(h, 0);
	assert_int_equal(st1.rpcs, st0.rpcs);
	assert_int_equal(rm_control(fx.rm, 1, hc, hs, VGPU_RM_CTRL_GET_QUOTA, &qi, &len,
				    sizeof(qi)), 0);
	assert_int_equal(qi.chan_used, 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 4);
	cp.reserved = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &h, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp,
				  sizeof(cp)), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 5);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* A GP ring must end at or below the GMMU's VA limit, a ring whose end wraps past 2^64
 * included; the RM refuses one before it reserves a channel or asks the GSP. */
static const struct gpfifo_case {
	const char *name;
	uint64_t va;
	int want;
} gpfifo_cases[] = {
	{ "GPFIFO ends at the VA limit", VGPU_GMMU_VA_LIMIT - 64 * 8, 0 },
	{ "GPFIFO crosses the VA limit", VGPU_GMMU_VA_LIMIT - 8, -EINVAL },
	{ "GPFIFO at the VA limit", VGPU_GMMU_VA_LIMIT, -EINVAL },
	{ "GPFIFO wraps past 2^64", 0xfffffffffffffff8ull, -EINVAL },
};

static void test_gpfifo_range(void **state)
{
	const struct gpfifo_case *c = *state;
	struct vgpu_rm_vaspace_params vp = { 0 };
	struct vgpu_rm_channel_params cp;
	struct vgpu_rm_quota_info qi;
	struct gsp_stats st0, st1;
	uint32_t hc, hd, hs, hv = 0, h = 0;
	size_t len = 0;

	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)),
			 0);
	cp = (struct vgpu_rm_channel_params){ .h_vaspace = hv, .gpfifo_va = c->va,
					      .gpfifo_entries = 64, .userd_addr = 0x2000 };
	gsp_get_stats(rm_gsp(fx.rm), &st0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &h, VGPU_RM_CLASS_CHANNEL_GPFIFO, &cp,
				  sizeof(cp)), c->want);
	gsp_get_stats(rm_gsp(fx.rm), &st1);
	assert_int_equal(rm_control(fx.rm, 1, hc, hs, VGPU_RM_CTRL_GET_QUOTA, &qi, &len,
				    sizeof(qi)), 0);
	if (c->want) {		/* no channel reserved, no RPC sent */
		assert_int_equal(h, 0);
		assert_int_equal(qi.chan_used, 0);
		assert_int_equal(st1.rpcs, st0.rpcs);
	} else {
		assert_int_equal(qi.chan_used, 1);
	}
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* Another function's handles give their own error; sharing gates dup. */
static void test_share_and_foreign(void **state)
{
	uint32_t a, ad, as, b, bd, bs, v, v2, vs, m = 0, d = 0;
	uint64_t addr, size;
	uint32_t aper;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &a, &ad, &as), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &b, &bd, &bs), 0);
	assert_int_equal(rm_t_client(fx.rm, 2, &v, &v2, &vs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, a, ad, 1 << 20, &m), 0);
	/* foreign: VF 2 naming VF 1's client, in every call */
	assert_int_equal(rm_free(fx.rm, 2, a, m), -VGPU_EFOREIGN);
	assert_int_equal(rm_map(fx.rm, 2, a, m, &addr, &size, &aper), -VGPU_EFOREIGN);
	assert_int_equal(rm_dup(fx.rm, 2, v, v2, &d, a, m), -VGPU_EFOREIGN);
	assert_int_equal(rm_share(fx.rm, 1, a, m, v, VGPU_RM_ACCESS_DUP), -VGPU_EFOREIGN);
	/* not shared yet */
	assert_int_equal(rm_dup(fx.rm, 1, b, bd, &d, a, m), -EACCES);
	/* shared with another client only */
	assert_int_equal(rm_share(fx.rm, 1, a, m, a, VGPU_RM_ACCESS_DUP), 0);
	assert_int_equal(rm_dup(fx.rm, 1, b, bd, &d, a, m), -EACCES);
	/* shared with b */
	assert_int_equal(rm_share(fx.rm, 1, a, m, b, VGPU_RM_ACCESS_DUP), 0);
	assert_int_equal(rm_dup(fx.rm, 1, b, bd, &d, a, m), 0);
	assert_int_equal(rm_map(fx.rm, 1, b, d, &addr, &size, &aper), 0);
	assert_int_equal(size, 1 << 20);
	/* the memory lives while any dup does */
	assert_int_equal(rm_client_free(fx.rm, 1, a), 0);
	assert_int_equal(rm_map(fx.rm, 1, b, d, &addr, &size, &aper), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, b), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, v), 0);
}

/* 18: ranges full give -ENOSPC; handles come back only after their free, never aliased. */
static void test_handle_exhaustion(void **state)
{
	uint32_t hc[9], hd, h[16], extra = 0, again = 0;
	int n = 0;

	(void)state;
	for (n = 0; n < 8; n++)
		assert_int_equal(rm_client_alloc(fx.rm, 1, &hc[n]), 0);
	assert_int_equal(rm_client_alloc(fx.rm, 1, &hc[8]), -ENOSPC);
	for (int i = 0; i < 8; i++)
		for (int k = i + 1; k < 8; k++)
			assert_int_not_equal(hc[i], hc[k]);
	assert_int_equal(rm_client_free(fx.rm, 1, hc[3]), 0);
	assert_int_equal(rm_client_alloc(fx.rm, 1, &hc[8]), 0);
	assert_int_equal(hc[8], hc[3]);	/* the only free one: reused after its free */
	hd = 0;
	assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hc[0], &hd, VGPU_RM_CLASS_DEVICE, NULL, 0), 0);
	for (n = 0; n < 15; n++) {
		h[n] = 0;
		assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hd, &h[n], VGPU_RM_CLASS_SUBDEVICE, NULL, 0), 0);
	}
	assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hd, &extra, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), -ENOSPC);
	/* a caller-chosen handle in use, and one outside the range */
	extra = h[2];
	assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hd, &extra, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), -EEXIST);
	extra = VGPU_RM_HANDLE_BASE + 16;
	assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hd, &extra, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), -EINVAL);
	assert_int_equal(rm_free(fx.rm, 1, hc[0], h[7]), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc[0], hd, &again, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), 0);
	assert_int_equal(again, h[7]);
	for (n = 0; n < 8; n++)
		assert_int_equal(rm_client_free(fx.rm, 1, n == 3 ? hc[8] : hc[n]), 0);
}

/* Each client's object table: handles across its 64-handle leaves, one object at a time
 * (a leaf emptied and the next one filled on every step), leaf boundaries, the last handle,
 * the same handle numbers in two clients naming each its own object, and a client freed
 * with objects in several leaves. */
static void test_object_table(void **state)
{
	static const uint32_t edge[] = { 63, 64, 127, 128, 4095 };
	struct vgpu_rm_info info;
	uint32_t a, ad, as, b, bd, bs, m, prev = 0, h, hb;
	uint64_t addr, size, addr_b;
	uint32_t aper;
	size_t len;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 1, &a, &ad, &as), 0);
	assert_int_equal(rm_t_client(fx.rm, 2, &b, &bd, &bs), 0);
	for (int i = 0; i < 300; i++) {
		assert_int_equal(rm_t_vidmem(fx.rm, 1, a, ad, 64 << 10, &m), 0);
		if (prev)
			assert_int_equal(m, prev + 1);	/* the cursor walks on */
		assert_int_equal(rm_map(fx.rm, 1, a, m, &addr, &size, &aper), 0);
		assert_int_equal(size, 64 << 10);
		assert_int_equal(rm_free(fx.rm, 1, a, m), 0);
		assert_int_equal(rm_map(fx.rm, 1, a, m, &addr, &size, &aper), -ENOENT);
		assert_int_equal(rm_free(fx.rm, 1, a, m), -ENOENT);
		prev = m;
	}
	assert_int_equal(rm_object_count(fx.rm, 1), 3);
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(edge); i++) {
		h = VGPU_RM_HANDLE_BASE + edge[i];
		assert_int_equal(rm_alloc(fx.rm, 1, a, ad, &h, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), 0);
		assert_int_equal(h, VGPU_RM_HANDLE_BASE + edge[i]);
	}
	h = VGPU_RM_HANDLE_BASE + 4096;
	assert_int_equal(rm_alloc(fx.rm, 1, a, ad, &h, VGPU_RM_CLASS_SUBDEVICE, NULL, 0), -EINVAL);
	/* the neighbours across a boundary stay when one goes */
	assert_int_equal(rm_free(fx.rm, 1, a, VGPU_RM_HANDLE_BASE + 64), 0);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, a, VGPU_RM_HANDLE_BASE + 63, VGPU_RM_CTRL_GET_INFO,
				    &info, &len, sizeof(info)), 0);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, a, VGPU_RM_HANDLE_BASE + 64, VGPU_RM_CTRL_GET_INFO,
				    &info, &len, sizeof(info)), -ENOENT);
	len = 0;
	assert_int_equal(rm_control(fx.rm, 1, a, VGPU_RM_HANDLE_BASE + 127, VGPU_RM_CTRL_GET_INFO,
				    &info, &len, sizeof(info)), 0);
	/* the same handle number in another client (of another VF) is that client's object */
	assert_int_equal(rm_t_vidmem(fx.rm, 1, a, ad, 128 << 10, &m), 0);
	hb = m;
	assert_int_equal(rm_alloc(fx.rm, 2, b, bd, &hb, VGPU_RM_CLASS_MEMORY_VIDMEM,
				  &(struct vgpu_rm_vidmem_params){ .size = 64 << 10 },
				  sizeof(struct vgpu_rm_vidmem_params)), 0);
	assert_int_equal(hb, m);
	assert_int_equal(rm_map(fx.rm, 1, a, m, &addr, &size, &aper), 0);
	assert_int_equal(size, 128 << 10);
	assert_int_equal(rm_map(fx.rm, 2, b, m, &addr_b, &size, &aper), 0);
	assert_int_equal(size, 64 << 10);
	assert_int_equal(rm_free(fx.rm, 2, b, m), 0);
	assert_int_equal(rm_map(fx.rm, 1, a, m, &addr, &size, &aper), 0);
	/* a client freed with objects in five leaves (0, 1, 2, 4, 63) takes them all */
	assert_int_equal(rm_object_count(fx.rm, 1), 3 + VGPU_ARRAY_SIZE(edge) - 1 + 1);
	assert_int_equal(rm_client_free(fx.rm, 1, a), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, b), 0);
}

/* Quota errors are not out-of-space errors. */
static void test_quotas(void **state)
{
	struct rm_quota q = { .vram = 4 << 20, .channels = 1, .clients = 2 };
	struct vgpu_rm_vaspace_params vp = { 0 };
	struct vgpu_rm_quota_info qi;
	uint32_t hc, hd, hs, h1, h2, hv = 0, c1, c2, x;
	size_t len = 0;

	(void)state;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc, hd, 3 << 20, &h1), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc, hd, 2 << 20, &h2), -VGPU_EQUOTA);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc, hd, 1 << 20, &h2), 0);
	assert_int_equal(rm_alloc(fx.rm, 1, hc, hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)), 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, hc, hd, hv, &c1, NULL), 0);
	assert_int_equal(rm_t_channel(fx.rm, 1, hc, hd, hv, &c2, NULL), -VGPU_EQUOTA);
	assert_int_equal(rm_client_alloc(fx.rm, 1, &x), 0);
	assert_int_equal(rm_client_alloc(fx.rm, 1, &c2), -VGPU_EQUOTA);
	assert_int_equal(rm_control(fx.rm, 1, hc, hs, VGPU_RM_CTRL_GET_QUOTA, &qi, &len,
				    sizeof(qi)), 0);
	assert_int_equal(qi.vram_used, 4 << 20);
	assert_int_equal(qi.chan_used, 1);
	q.vram = 1 << 20;
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), -EBUSY);
	assert_int_equal(rm_client_free(fx.rm, 1, x), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
	q = (struct rm_quota){ 0 };
	assert_int_equal(rm_quota_set(fx.rm, 1, &q), 0);
	/* without a quota the slice itself is the limit: out of space, not over quota */
	assert_int_equal(rm_t_client(fx.rm, 1, &hc, &hd, &hs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc, hd, 32 << 20, &h1), -ENOMEM);
	assert_int_equal(rm_client_free(fx.rm, 1, hc), 0);
}

/* 10/11: VF reset (guest gone): every client of the VF by range, in batches; other VFs
 * untouched; channels revoked in the hardware; the count back at zero. */
static void test_vf_reset(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct vgpu_rm_vaspace_params vp = { 0 };
	struct vgpu_rm_channel_params cp;
	uint32_t hc[5], hd, hs, hv, hm, hch, other, od, os;
	uint64_t before2;

	(void)state;
	assert_int_equal(rm_t_client(fx.rm, 2, &other, &od, &os), 0);
	before2 = rm_object_count(fx.rm, 2);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(rm_t_client(fx.rm, 1, &hc[i], &hd, &hs), 0);
		for (int k = 0; k < 8; k++)
			assert_int_equal(rm_t_vidmem(fx.rm, 1, hc[i], hd, 64 << 10, &hm), 0);
		hv = 0;
		assert_int_equal(rm_alloc(fx.rm, 1, hc[i], hd, &hv, VGPU_RM_CLASS_VASPACE, &vp, sizeof(vp)), 0);
		assert_int_equal(rm_t_channel(fx.rm, 1, hc[i], hd, hv, &hch, &cp), 0);
	}
	assert_int_equal(rm_vf_disable(fx.rm, 1), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc[0], hd, 64 << 10, &hm), -EBUSY);
	for (int ch = 0; ch < 64; ch++)
		assert_false(sh->fns[1].chans[ch].flags & GPU_CHAN_ALLOCATED);
	assert_int_equal(rm_vf_free_disabled(fx.rm, 1, 10), -EINPROGRESS);
	assert_true(rm_object_count(fx.rm, 1) > 0);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	assert_int_equal(rm_object_count(fx.rm, 2), before2);
	assert_int_equal(rm_free(fx.rm, 1, hc[0], hc[0]), -ENOENT);
	/* the VF is usable again */
	assert_int_equal(rm_t_client(fx.rm, 1, &hc[0], &hd, &hs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, hc[0], hd, 8 << 20, &hm), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, hc[0]), 0);
	assert_int_equal(rm_client_free(fx.rm, 2, other), 0);
	assert_int_equal(rm_vf_partition_clear(fx.rm, 2), 0);
	assert_int_equal(rm_vf_partition_clear(fx.rm, 2), -ENOENT);
}

/* A VF whose slice has its own memfd is scrubbed by the GSP at reset; the others through
 * the device model. Either way the VF's VRAM reads zero afterwards. */
static void test_vf_reset_scrub(void **state)
{
	struct rm_partition p = { .base = 3 * T_SLICE, .size = T_SLICE };
	struct vgpu_rpc_info info;
	uint32_t hc, hd, hs, hm;
	uint8_t *v3, *v1;

	(void)state;
	assert_int_equal(gpu_vram_slice_map(fx.gpu, 3, p.base, p.size, -1), 0);
	assert_int_equal(rm_vf_partition_set(fx.rm, 3, &p), 0);
	assert_int_equal(rm_t_client(fx.rm, 3, &hc, &hd, &hs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 3, hc, hd, 1 << 20, &hm), 0);
	v3 = gpu_vram_ptr(fx.gpu, p.base, p.size);
	v1 = gpu_vram_ptr(fx.gpu, T_SLICE, T_SLICE);
	memset(v3, 0x5a, p.size);
	memset(v1, 0x5a, T_SLICE);
	assert_int_equal(rm_vf_reset(fx.rm, 3), 0);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	assert_int_equal(v3[0], 0);
	assert_int_equal(v3[p.size - 1], 0);
	assert_int_equal(v1[0], 0);
	assert_int_equal(v1[T_SLICE - 1], 0);
	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info), NULL), 0);
	assert_int_equal(info.scrubs, 1);	/* VF 3's; VF 1 has no slice memfd */
	assert_int_equal(rm_object_count(fx.rm, 3), 0);
	assert_non_null(rm_vf_pma(fx.rm, 3));
	assert_int_equal(rm_vf_partition_clear(fx.rm, 3), 0);
	assert_null(rm_vf_pma(fx.rm, 3));
	assert_ptr_equal(rm_vf_pma(fx.rm, 0), fx.pma);
	assert_int_equal(gpu_vram_slice_unmap(fx.gpu, 3), 0);
}

/* The owner's mappings of the privileged region, from /proc/self/maps: how many there
 * are, how many are writable, and the permissions of the one holding @addr. */
static int priv_maps(const void *addr, int *writable, char perms[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	*writable = 0;
	perms[0] = '\0';
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char pm[5];

		if (!strstr(line, "memfd:vgpu-priv") ||
		    sscanf(line, "%lx-%lx %4s", &lo, &hi, pm) != 3)
			continue;
		n++;
		*writable += pm[1] == 'w';
		if ((uintptr_t)addr >= lo && (uintptr_t)addr < hi)
			memcpy(perms, pm, 5);
	}
	fclose(f);
	return n;
}

static void on_segv(int sig)
{
	(void)sig;
	_exit(42);
}

/* A child stores through the owner's view: 42 if it faulted, 0 if the store went through. */
static int child_store(const struct gpu_priv_shared *sh)
{
	struct sigaction sa = { .sa_handler = on_segv };
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		*(volatile uint64_t *)&sh->reserved[0] = 1;
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Only the GSP programs the hardware: once the RM runs, this process has no writable
 * mapping of the privileged region (a store through its view faults), and the GSP, also
 * a restarted one, still programs it. */
static void test_priv_read_only(void **state)
{
	const struct gpu_priv_shared *sh = gpu_priv_view(fx.gpu);
	struct rm_partition p = { .base = 3 * T_SLICE, .size = T_SLICE };
	struct vgpu_rpc_inject in = { .mode = VGPU_INJ_CRASH };
	uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD);
	int writable, pid = gsp_pid(rm_gsp(fx.rm));
	char perms[5];

	(void)state;
	assert_null(gpu_priv_get(fx.gpu));
	assert_int_equal(priv_maps(sh, &writable, perms), 1);
	assert_int_equal(writable, 0);
	assert_string_equal(perms, "r--s");
	assert_int_equal(child_store(sh), 42);
	assert_int_equal(sh->reserved[0], 0);
	/* programmed by the GSP after the writer was dropped (the fixture's partitions) */
	assert_int_equal(sh->fns[1].part_base, T_SLICE);
	assert_int_equal(sh->fns[2].part_size, T_SLICE);
	assert_int_equal(rm_vf_partition_set(fx.rm, 3, &p), 0);
	assert_int_equal(sh->fns[3].part_base, 3 * T_SLICE);
	/* a restarted GSP maps the region from the memfd itself and replays into it */
	assert_int_equal(gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, &in, sizeof(in), NULL, 0, NULL), -EIO);
	while ((gsp_needs_reset(rm_gsp(fx.rm)) || gsp_pid(rm_gsp(fx.rm)) == pid) &&
	       !cmn_deadline_passed(dl))
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
	assert_false(gsp_needs_reset(rm_gsp(fx.rm)));
	assert_int_equal(sh->fns[3].part_size, T_SLICE);
	assert_int_equal(rm_vf_partition_clear(fx.rm, 3), 0);
	assert_int_equal(sh->fns[3].part_size, 0);
	assert_int_equal(priv_maps(sh, &writable, perms), 1);
	assert_int_equal(writable, 0);
}

/* 16: the validator catches each kind of misordering. */
static char lockdep_msg[128];
static void on_violation(const char *what)
{
	snprintf(lockdep_msg, sizeof(lockdep_msg), "%s", what);
}

static const struct order_case {
	const char *name;
	enum rm_lock_rank first;
	uint32_t k1;
	enum rm_lock_rank second;
	uint32_t k2;
	bool bad;
} order_cases[] = {
	{ "API, client, device", RM_RANK_API, 0, RM_RANK_CLIENT, 5, false },
	{ "client then API", RM_RANK_CLIENT, 5, RM_RANK_API, 0, true },
	{ "device then client", RM_RANK_DEVICE, 0, RM_RANK_CLIENT, 5, true },
	{ "clients ascending", RM_RANK_CLIENT, 5, RM_RANK_CLIENT, 9, false },
	{ "clients descending", RM_RANK_CLIENT, 9, RM_RANK_CLIENT, 5, true },
	{ "device twice", RM_RANK_DEVICE, 0, RM_RANK_DEVICE, 0, true },
};

static void test_lock_order(void **state)
{
	const struct order_case *c = *state;

	lockdep_msg[0] = '\0';
	cmn_lockdep_set_handler(on_violation);
	rm_lockdep_acquire(c->first, c->k1);
	rm_lockdep_acquire(c->second, c->k2);
	rm_lockdep_release(c->second, c->k2);
	rm_lockdep_release(c->first, c->k1);
	cmn_lockdep_set_handler(NULL);
	assert_int_equal(lockdep_msg[0] != '\0', c->bad);
}

/* The validator also watches the real paths: a dup takes two client locks in order. */
static void test_lock_order_real(void **state)
{
	uint32_t a, ad, as, b, bd, bs, m, d = 0;

	(void)state;
	lockdep_msg[0] = '\0';
	cmn_lockdep_set_handler(on_violation);
	assert_int_equal(rm_t_client(fx.rm, 1, &a, &ad, &as), 0);
	assert_int_equal(rm_t_client(fx.rm, 1, &b, &bd, &bs), 0);
	assert_int_equal(rm_t_vidmem(fx.rm, 1, b, bd, 1 << 20, &m), 0);
	assert_int_equal(rm_share(fx.rm, 1, b, m, 0, VGPU_RM_ACCESS_DUP), 0);
	assert_int_equal(rm_dup(fx.rm, 1, a, ad, &d, b, m), 0);	/* higher src handle */
	assert_int_equal(rm_client_free(fx.rm, 1, b), 0);
	assert_int_equal(rm_client_free(fx.rm, 1, a), 0);
	cmn_lockdep_set_handler(NULL);
	assert_string_equal(lockdep_msg, "");
}

int main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dependency_free, setup, teardown),
		cmocka_unit_test_setup_teardown(test_channel_submit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_share_and_foreign, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handle_exhaustion, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_object_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_quotas, setup, teardown),
		cmocka_unit_test_setup_teardown(test_vf_reset, setup, teardown),
		cmocka_unit_test_setup_teardown(test_vf_reset_scrub, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lock_order_real, setup, teardown),
		cmocka_unit_test_setup_teardown(test_priv_read_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_reserved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_vas_chan_reserved, setup, teardown),
	};
	/* Sized and counted from the tables, so no case is overwritten or left out. */
	struct CMUnitTest t[VGPU_ARRAY_SIZE(fixed) + VGPU_ARRAY_SIZE(bad_allocs) +
			    VGPU_ARRAY_SIZE(huge_cases) + VGPU_ARRAY_SIZE(gpfifo_cases) +
			    VGPU_ARRAY_SIZE(align_cases) + VGPU_ARRAY_SIZE(order_cases)];
	size_t n = VGPU_ARRAY_SIZE(fixed);

	memcpy(t, fixed, sizeof(fixed));
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(bad_allocs); i++)
		t[n++] = (struct CMUnitTest){ bad_allocs[i].name, test_bad_alloc, setup, teardown,
					      (void *)&bad_allocs[i] };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(huge_cases); i++)
		t[n++] = (struct CMUnitTest){ huge_cases[i].name, test_vram_huge, setup, teardown,
					      (void *)&huge_cases[i] };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(gpfifo_cases); i++)
		t[n++] = (struct CMUnitTest){ gpfifo_cases[i].name, test_gpfifo_range, setup,
					      teardown, (void *)&gpfifo_cases[i] };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(align_cases); i++)
		t[n++] = (struct CMUnitTest){ align_cases[i].name, test_vram_alignment, setup,
					      teardown, (void *)&align_cases[i] };
	for (size_t i = 0; i < VGPU_ARRAY_SIZE(order_cases); i++)
		t[n++] = (struct CMUnitTest){ order_cases[i].name, test_lock_order, NULL, NULL,
					      (void *)&order_cases[i] };
	return _cmocka_run_group_tests("rm_resources", t, n, NULL, NULL);
}
