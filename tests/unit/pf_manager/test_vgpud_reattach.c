// SPDX-License-Identifier: MIT
/* A local guest moves with its slice between two real vgpuds: a libvgpu-vf guest in this
 * process attached to A's vf1.master.sock allocates VRAM, writes it from the CPU, runs FILL
 * and COPY work on two channels (also during pre-copy), and the slice migrates live to B.
 * vgpu_vf_reattach() then moves the attachment to B's endpoint in place: the BAR mapping
 * sits at the same address (now B's object), the data reads back through the pointers the
 * guest already held, the same channels and fences run more work on B (fences waited on B's
 * interrupt vector), an old RM handle works there (B frees an object A made: one fewer in
 * B's count), new memory is allocated, and the slice moves back to A the same way. A's endpoint of the
 * moved slice is gone. A reattach to a wrong endpoint - another slice, a vgpud without the
 * slice, the current endpoint itself, no path, managed memory on - fails naming what is
 * wrong and leaves the guest attached as before (it keeps working where it was). */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_mig_test.h"
#include "common/err.h"
#include "vf_guest/include/vgpu_vf_managed.h"

#define U1		"7c7c7c7c-1111-4111-8111-111111111111"
#define U2		"7c7c7c7c-2222-4222-8222-222222222222"
#define EXIT_NOTFOUND	3
#define PS		T_VF_PS
#define BUF		T_VF_BUF
#define WORDS		T_VF_WORDS
#define VA_NEW		(1ull << 33)

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "2", "--spare-vram", "256M", NULL };

struct fixture {
	struct tdaemon *a, *b;
	struct tclient *ea, *eb;	/* event listeners */
	char mig_a[128], mig_b[128];	/* migrate-incoming addresses */
	struct tvf g;			/* the guest */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (t_mig_pair(daemon_args, NULL, NULL, &f->a, &f->b, &f->ea, &f->eb))
		return -1;
	snprintf(f->mig_a, sizeof(f->mig_a), "%s/mig.sock", f->a->root);
	snprintf(f->mig_b, sizeof(f->mig_b), "%s/mig.sock", f->b->root);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	return t_mig_teardown(state, f->ea, f->eb);
}

/* @d's endpoint of VF @vf where the guest is peer 0 (what a migratable guest uses). */
static void ep_path(struct tdaemon *d, unsigned int vf, char *buf, size_t len)
{
	snprintf(buf, len, "%s/vf%u.master.sock", d->run, vf);
}

/* FILL [@va, +BUF) with @v on channel @k and wait for it (on the GPU interrupt). */
static void fill_va(struct fixture *f, unsigned int k, uint64_t va, uint32_t v)
{
	t_vf_submit_fill(&f->g, k, va, v);
	assert_int_equal(vgpu_fence_wait(&f->g.last[k], 0), 0);
}

/* Where this process maps @d's BAR object of VF 1 (0 if nowhere). */
static uintptr_t bar_mapped_at(struct tdaemon *d)
{
	return (uintptr_t)t_bar_mapped(d, 1, NULL);
}

/* Live-migrate U1 from @src to @dst (listening at @addr) with a manual switchover; the
 * guest works during pre-copy and is quiesced (every fence waited) before the switch. */
static void migrate(struct fixture *f, struct tdaemon *src, struct tclient *esrc,
		    struct tdaemon *dst, struct tclient *edst, char *addr, uint32_t v)
{
	t_mig_listen(dst, addr, U1);
	t_mig_manual(src, esrc, addr, U1);
	t_vf_fill(&f->g, 1, 1, v);
	t_vf_fill(&f->g, 0, 0, v + 1);
	t_vf_copy01(&f->g, 1);
	f->g.cpu[0][7] = v + 2;		/* a guest CPU write the stream must carry */
	t_mig_switchover(src, esrc, edst, U1);
	assert_int_equal(T_CTL(src, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(dst, "list", "-u", U1), 0);
}

/* A reattach to @path fails with @err naming @what; the guest is as it was. */
static void reattach_refused(struct fixture *f, const char *path, int err, const char *what)
{
	assert_int_equal(vgpu_vf_reattach(f->g.vf, path), err);
	if (!strstr(vgpu_vf_last_error(f->g.vf), what))
		fail_msg("reattach to %s: \"%s\" does not say \"%s\"", path,
			 vgpu_vf_last_error(f->g.vf), what);
}

/* ---- the tests ---- */

static void test_reattach_moves_with_slice(void **state)
{
	struct fixture *f = *state;
	char ep_a1[200], ep_a2[200], ep_b1[200];
	uint32_t *cpu0 = NULL, *cpu1 = NULL;
	struct vgpu_mem *nm, *old;
	struct vgpu_vf_info info;
	uint64_t sem[2], objs;
	uintptr_t at;

	ep_path(f->a, 1, ep_a1, sizeof(ep_a1));
	ep_path(f->a, 2, ep_a2, sizeof(ep_a2));
	ep_path(f->b, 1, ep_b1, sizeof(ep_b1));
	t_define_start(f->a, "vgpu-512M", U1);
	t_define_start(f->a, "vgpu-512M", U2);	/* another slice, VF 2: a wrong endpoint */
	t_vf_up(&f->g, ep_a1);
	assert_int_equal(vgpu_mem_alloc(f->g.vf, VGPU_MEM_VRAM, BUF, PS, &old), 0);
	t_vf_fill(&f->g, 0, 0, 0x11111111);
	t_vf_copy01(&f->g, 1);
	cpu0 = f->g.cpu[0];
	cpu1 = f->g.cpu[1];
	at = bar_mapped_at(f->a);
	assert_true(at != 0);

	/* Wrong endpoints while attached: refused, and the guest runs on where it is. */
	reattach_refused(f, ep_a2, -ENODEV, "serves slice " U2);
	reattach_refused(f, ep_b1, -ENOENT, ep_b1);		/* B has no such slice yet */
	reattach_refused(f, ep_a1, -EBUSY, "already attached");
	reattach_refused(f, "", -EINVAL, "no endpoint socket path");
	assert_int_equal(vgpu_managed_init(f->g.vf, NULL), 0);
	reattach_refused(f, ep_a2, -EBUSY, "managed memory is on");
	vgpu_managed_fini(f->g.vf);
	t_vf_fill(&f->g, 0, 0, 0x12121212);
	assert_false(vgpu_vf_reset_pending(f->g.vf));

	migrate(f, f->a, f->ea, f->b, f->eb, f->mig_b, 0x20000000);
	for (unsigned int k = 0; k < 2; k++)
		sem[k] = f->g.last[k].value;
	/* The source let go: its endpoint is gone, and the guest sees it gone. */
	assert_int_equal(access(ep_a1, F_OK), -1);
	assert_int_equal(errno, ENOENT);
	assert_true(vgpu_vf_reset_pending(f->g.vf));
	/* Still wrong endpoints: refused, nothing of the guest changes. */
	reattach_refused(f, ep_a2, -ENODEV, "serves slice " U2);
	reattach_refused(f, ep_a1, -ENOENT, ep_a1);

	objs = t_rm_objects(f->b, 1);
	assert_int_equal(vgpu_vf_reattach(f->g.vf, ep_b1), 0);
	assert_false(vgpu_vf_reset_pending(f->g.vf));
	vgpu_vf_get_info(f->g.vf, &info);
	assert_int_equal(info.vf_id, 1);
	assert_int_equal(info.reset_count, 0);
	/* The same address now maps B's object: the pointers the guest held read B's copy. */
	assert_int_equal(bar_mapped_at(f->b), at);
	assert_int_equal(bar_mapped_at(f->a), 0);
	assert_ptr_equal(vgpu_mem_cpu(f->g.m[0]), cpu0);
	assert_ptr_equal(vgpu_mem_cpu(f->g.m[1]), cpu1);
	assert_int_equal(cpu0[7], 0x20000002);
	cpu0[7] = 0x20000001;
	t_all_equal(cpu0, WORDS, 0x20000001);
	assert_memory_equal(cpu0, cpu1, BUF);
	assert_int_equal(vgpu_vf_ping(f->g.vf, "moved", 5), 0);
	assert_int_equal(t_rm_objects(f->b, 1), objs);	/* the handshake made nothing new */

	/* The same channels continue after the last entry run on A; fences on B's vectors. */
	t_vf_fill(&f->g, 0, 0, 0x33333333);
	assert_int_equal(f->g.last[0].value, sem[0] + 1);
	t_vf_copy01(&f->g, 1);
	assert_int_equal(f->g.last[1].value, sem[1] + 1);
	t_all_equal(cpu1, WORDS, 0x33333333);
	for (unsigned int k = 0; k < 2; k++)
		assert_int_equal(vgpu_channel_error(f->g.ch[k], NULL, NULL), 0);
	/* New memory through B's RM, mapped into the old VA space and filled by the GPU. */
	assert_int_equal(vgpu_mem_alloc(f->g.vf, VGPU_MEM_VRAM, BUF, PS, &nm), 0);
	assert_int_equal(vgpu_va_map(f->g.as, VA_NEW, nm, 0, BUF, PS, 0), 0);
	fill_va(f, 1, VA_NEW, 0x44444444);
	t_all_equal(vgpu_mem_cpu(nm), WORDS, 0x44444444);
	assert_int_equal(t_rm_objects(f->b, 1), objs + 1);
	/* An old handle works on B: B's RM frees the object A's RM made. */
	assert_int_equal(vgpu_mem_free(old), 0);
	assert_int_equal(t_rm_objects(f->b, 1), objs);

	/* And back to A the same way (the driver announced its ABI to B at the reattach). */
	migrate(f, f->b, f->eb, f->a, f->ea, f->mig_a, 0x50000000);
	assert_int_equal(vgpu_vf_reattach(f->g.vf, ep_a1), 0);
	assert_int_equal(bar_mapped_at(f->a), at);
	assert_int_equal(cpu0[7], 0x50000002);
	cpu0[7] = 0x50000001;
	t_all_equal(cpu0, WORDS, 0x50000001);
	t_all_equal(cpu1, WORDS, 0x50000001);
	t_all_equal(vgpu_mem_cpu(nm), WORDS, 0x44444444);
	t_vf_fill(&f->g, 1, 0, 0x66666666);
	assert_int_equal(vgpu_va_unmap(f->g.as, VA_NEW, BUF), 0);
	assert_int_equal(vgpu_mem_free(nm), 0);
	t_vf_down(&f->g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reattach_moves_with_slice, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
