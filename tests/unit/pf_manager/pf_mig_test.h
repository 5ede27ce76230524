/* SPDX-License-Identifier: MIT */
/* Helpers for the tests that move a slice between two real vgpuds (pf_test.h's daemons):
 * a libvgpu-vf guest in the test process with a VA space, two VRAM buffers and two
 * channels that runs FILL and COPY work, where this process maps a BAR object, and the
 * steps of a live migration with a manual switchover, each waited for by its event. */
#ifndef VGPU_TEST_PF_MIG_TEST_H
#define VGPU_TEST_PF_MIG_TEST_H

#include "pf_test.h"
#include "vf_guest/include/vgpu_vf.h"
#include <vgpu/gmmu.h>

#define T_VF_BUF	(256u << 10)		/* each buffer */
#define T_VF_WORDS	(T_VF_BUF / 4)
#define T_VF_VA		(1ull << 32)		/* buffer @i at T_VF_VA + i * T_VF_BUF */
#define T_VF_PS		VGPU_GMMU_PAGE_64K

/* The guest: its objects and, per channel, the fence of its last submission. */
struct tvf {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_mem *m[2];
	uint32_t *cpu[2];		/* the buffers as the guest's CPU sees them */
	struct vgpu_channel *ch[2];
	struct vgpu_fence last[2];
};

static __attribute__((unused)) void t_all_equal(const uint32_t *p, size_t n, uint32_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			fail_msg("word %zu is %#x, expected %#x", i, p[i], v);
}

/* Attach to the endpoint socket @ep and build the objects: a VA space, two buffers mapped
 * at T_VF_VA, two channels. */
static __attribute__((unused)) void t_vf_up(struct tvf *g, const char *ep)
{
	struct vgpu_vf_opts o = { .socket = ep, .quiet = true };
	struct vgpu_channel_opts co = { .gpfifo_entries = 64, .pushbuf_bytes = 64 << 10 };

	assert_int_equal(vgpu_vf_open(&o, &g->vf), 0);
	assert_int_equal(vgpu_vaspace_create(g->vf, &g->as), 0);
	for (unsigned int i = 0; i < 2; i++) {
		assert_int_equal(vgpu_mem_alloc(g->vf, VGPU_MEM_VRAM, T_VF_BUF, T_VF_PS, &g->m[i]),
				 0);
		assert_int_equal(vgpu_va_map(g->as, T_VF_VA + i * T_VF_BUF, g->m[i], 0, T_VF_BUF,
					     T_VF_PS, 0), 0);
		g->cpu[i] = vgpu_mem_cpu(g->m[i]);
		assert_non_null(g->cpu[i]);
	}
	for (unsigned int k = 0; k < 2; k++)
		assert_int_equal(vgpu_channel_create(g->vf, g->as, &co, &g->ch[k]), 0);
}

static __attribute__((unused)) void t_vf_down(struct tvf *g)
{
	for (unsigned int k = 0; k < 2; k++)
		vgpu_channel_destroy(g->ch[k]);
	vgpu_vf_close(g->vf);
}

/* Submit a FILL of [@va, +T_VF_BUF) with @v on channel @k; its fence in g->last[k]. */
static __attribute__((unused)) void t_vf_submit_fill(struct tvf *g, unsigned int k, uint64_t va,
						     uint32_t v)
{
	uint32_t dw[64];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_fill(&pb, va, T_VF_BUF, v);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(g->ch[k], pb.dw, pb.len, &g->last[k]), 0);
}

/* Submit a COPY of buffer 0 to buffer 1 on channel @k; its fence in g->last[k]. */
static __attribute__((unused)) void t_vf_submit_copy01(struct tvf *g, unsigned int k)
{
	uint32_t dw[64];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_copy(&pb, T_VF_VA, T_VF_VA + T_VF_BUF, T_VF_BUF);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(g->ch[k], pb.dw, pb.len, &g->last[k]), 0);
}

/* FILL buffer @i with @v on channel @k, wait for it (on the GPU interrupt), check it on
 * the CPU. */
static __attribute__((unused)) void t_vf_fill(struct tvf *g, unsigned int k, unsigned int i,
					      uint32_t v)
{
	t_vf_submit_fill(g, k, T_VF_VA + i * T_VF_BUF, v);
	assert_int_equal(vgpu_fence_wait(&g->last[k], 0), 0);
	t_all_equal(g->cpu[i], T_VF_WORDS, v);
}

/* COPY buffer 0 to buffer 1 on channel @k, wait for it, check it on the CPU. */
static __attribute__((unused)) void t_vf_copy01(struct tvf *g, unsigned int k)
{
	t_vf_submit_copy01(g, k);
	assert_int_equal(vgpu_fence_wait(&g->last[k], 0), 0);
	assert_memory_equal(g->cpu[0], g->cpu[1], T_VF_BUF);
}

/* Where this process maps @d's BAR object of VF @vf (a mapping of the object after it was
 * unlinked counts too), its size in @size if not NULL; NULL if nowhere. */
static __attribute__((unused)) uint8_t *t_bar_mapped(struct tdaemon *d, unsigned int vf,
						     size_t *size)
{
	char path[128], line[512];
	FILE *m = fopen("/proc/self/maps", "r");
	uint8_t *at = NULL;

	t_bar_path(d, vf, path, sizeof(path));
	assert_non_null(m);
	while (!at && fgets(line, sizeof(line), m)) {
		unsigned long lo, hi;
		char *p = strstr(line, path);

		if (p && (p[strlen(path)] == '\n' || p[strlen(path)] == ' ') &&
		    sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
			at = (uint8_t *)lo;
			if (size)
				*size = hi - lo;
		}
	}
	fclose(m);
	return at;
}

/* ---- a live migration, step by step ---- */

/* A and B started as t_daemon_pair_wrap() starts them, with an event listener on each
 * (@ea, @eb) for the MIGRATION events: 0, or -1 if a daemon did not start. */
static __attribute__((unused)) int t_mig_pair(char *const *args, char *const *wrap_a,
					      char *const *wrap_b, struct tdaemon **a,
					      struct tdaemon **b, struct tclient **ea,
					      struct tclient **eb)
{
	if (t_daemon_pair_wrap(args, wrap_a, wrap_b, a, b))
		return -1;
	*ea = t_client(*a, true);
	*eb = t_client(*b, true);
	return 0;
}

/* cmocka teardown of the fixture in @state, whose event listeners are @ea and @eb. */
static __attribute__((unused)) int t_mig_teardown(void **state, struct tclient *ea,
						  struct tclient *eb)
{
	t_client_free(ea);
	t_client_free(eb);
	free(*state);
	return t_teardown(state);
}

/* @dst listens for slice @uuid at the UNIX socket @addr. */
static __attribute__((unused)) void t_mig_listen(struct tdaemon *dst, char *addr, char *uuid)
{
	assert_int_equal(T_CTL(dst, "migrate-incoming", "--listen", addr, "-u", uuid), 0);
	assert_non_null(strstr(t_out.out, addr));
}

/* @src sends @uuid to @addr with a manual switchover; returns once @esrc (an event
 * listener on @src) saw pre-copy converge and wait for it. */
static __attribute__((unused)) void t_mig_manual(struct tdaemon *src, struct tclient *esrc,
						 char *addr, char *uuid)
{
	assert_int_equal(T_CTL(src, "migrate", "-u", uuid, "--to", addr, "--switchover",
			       "manual", "--no-wait"), 0);
	json_object_put(t_wait_migration(esrc, "waiting"));
}

/* The switchover of @uuid on @src, and its completion on both sides (@esrc, @edst). */
static __attribute__((unused)) void t_mig_switchover(struct tdaemon *src, struct tclient *esrc,
						     struct tclient *edst, char *uuid)
{
	assert_int_equal(T_CTL(src, "migrate-switchover", "-u", uuid), 0);
	json_object_put(t_wait_migration(esrc, "completed"));
	json_object_put(t_wait_migration(edst, "completed"));
}

#endif
