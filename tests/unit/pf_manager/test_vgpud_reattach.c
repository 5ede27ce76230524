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
#include "pf_test.h"
#include "common/err.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include <vgpu/gmmu.h>

#define U1		"7c7c7c7c-1111-4111-8111-111111111111"
#define U2		"7c7c7c7c-2222-4222-8222-222222222222"
#define EXIT_NOTFOUND	3
#define PS		VGPU_GMMU_PAGE_64K
#define BUF		(256u << 10)
#define WORDS		(BUF / 4)
#define VA0		(1ull << 32)
#define VA_NEW		(1ull << 33)

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "2", "--spare-vram", "256M", NULL };

struct fixture {
	struct tdaemon *a, *b;
	struct tclient *ea, *eb;	/* event listeners */
	char mig_a[128], mig_b[128];	/* migrate-incoming addresses */
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_mem *m[2];
	uint32_t *cpu[2];
	struct vgpu_channel *ch[2];
	struct vgpu_fence last[2];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (t_daemon_pair(daemon_args, &f->a, &f->b))
		return -1;
	snprintf(f->mig_a, sizeof(f->mig_a), "%s/mig.sock", f->a->root);
	snprintf(f->mig_b, sizeof(f->mig_b), "%s/mig.sock", f->b->root);
	f->ea = t_client(f->a, true);
	f->eb = t_client(f->b, true);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	t_client_free(f->ea);
	t_client_free(f->eb);
	free(f);
	return t_teardown(state);
}

/* @d's endpoint of VF @vf where the guest is peer 0 (what a migratable guest uses). */
static void ep_path(struct tdaemon *d, unsigned int vf, char *buf, size_t len)
{
	snprintf(buf, len, "%s/vf%u.master.sock", d->run, vf);
}

static void def_start(struct tdaemon *d, char *uuid)
{
	assert_int_equal(T_CTL(d, "define", "-t", "vgpu-512M", "-u", uuid), 0);
	assert_int_equal(T_CTL(d, "start", "-u", uuid), 0);
}

/* ---- the guest ---- */

static void guest_up(struct fixture *f)
{
	char ep[200];
	struct vgpu_vf_opts o = { .socket = ep, .quiet = true };
	struct vgpu_channel_opts co = { .gpfifo_entries = 64, .pushbuf_bytes = 64 << 10 };

	ep_path(f->a, 1, ep, sizeof(ep));
	assert_int_equal(vgpu_vf_open(&o, &f->vf), 0);
	assert_int_equal(vgpu_vaspace_create(f->vf, &f->as), 0);
	for (unsigned int i = 0; i < 2; i++) {
		assert_int_equal(vgpu_mem_alloc(f->vf, VGPU_MEM_VRAM, BUF, PS, &f->m[i]), 0);
		assert_int_equal(vgpu_va_map(f->as, VA0 + i * BUF, f->m[i], 0, BUF, PS, 0), 0);
		f->cpu[i] = vgpu_mem_cpu(f->m[i]);
		assert_non_null(f->cpu[i]);
	}
	for (unsigned int k = 0; k < 2; k++)
		assert_int_equal(vgpu_channel_create(f->vf, f->as, &co, &f->ch[k]), 0);
}

static void guest_down(struct fixture *f)
{
	for (unsigned int k = 0; k < 2; k++)
		vgpu_channel_destroy(f->ch[k]);
	vgpu_vf_close(f->vf);
}

static void all_equal(const uint32_t *p, size_t n, uint32_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			fail_msg("word %zu is %#x, expected %#x", i, p[i], v);
}

/* FILL [@va, +BUF) with @v on channel @k and wait for it (on the GPU interrupt). */
static void fill_va(struct fixture *f, unsigned int k, uint64_t va, uint32_t v)
{
	uint32_t dw[64];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_fill(&pb, va, BUF, v);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(f->ch[k], pb.dw, pb.len, &f->last[k]), 0);
	assert_int_equal(vgpu_fence_wait(&f->last[k], 0), 0);
}

/* FILL buffer @i with @v on channel @k; checked on the CPU. */
static void fill(struct fixture *f, unsigned int k, unsigned int i, uint32_t v)
{
	fill_va(f, k, VA0 + i * BUF, v);
	all_equal(f->cpu[i], WORDS, v);
}

/* COPY buffer 0 to buffer 1 on channel @k; checked on the CPU. */
static void copy01(struct fixture *f, unsigned int k)
{
	uint32_t dw[64];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_copy(&pb, VA0, VA0 + BUF, BUF);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(f->ch[k], pb.dw, pb.len, &f->last[k]), 0);
	assert_int_equal(vgpu_fence_wait(&f->last[k], 0), 0);
	assert_memory_equal(f->cpu[0], f->cpu[1], BUF);
}

/* ---- the host side ---- */

/* RM objects of VF @vf on @d (stats). */
static uint64_t rm_objects(struct tdaemon *d, unsigned int vf)
{
	json_object *o, *vfs, *rpc;
	char arg[8];
	uint64_t n;

	snprintf(arg, sizeof(arg), "%u", vf);
	assert_int_equal(T_CTL(d, "--json", "stats", arg), 0);
	o = t_out_json();
	vfs = json_object_is_type(o, json_type_array) ? o : NULL;
	if (!vfs)
		json_object_object_get_ex(o, "vfs", &vfs);
	assert_non_null(vfs);
	assert_true(json_object_object_get_ex(json_object_array_get_idx(vfs, 0), "rpc", &rpc));
	n = t_get_u64(rpc, "rm_objects");
	json_object_put(o);
	return n;
}

/* Where this process maps @d's BAR object of VF 1 (0 if nowhere). */
static uintptr_t bar_mapped_at(struct tdaemon *d)
{
	char prefix[64], path[128], line[512];
	FILE *m = fopen("/proc/self/maps", "r");
	uintptr_t at = 0;

	t_shm_prefix(d, prefix, sizeof(prefix));
	snprintf(path, sizeof(path), "/dev/shm/%s1", prefix);
	assert_non_null(m);
	while (!at && fgets(line, sizeof(line), m)) {
		unsigned long lo;
		char *p = strstr(line, path);

		if (p && (p[strlen(path)] == '\n' || p[strlen(path)] == ' ') &&
		    sscanf(line, "%lx-", &lo) == 1)
			at = lo;
	}
	fclose(m);
	return at;
}

/* Live-migrate U1 from @src to @dst (listening at @addr) with a manual switchover; the
 * guest works during pre-copy and is quiesced (every fence waited) before the switch. */
static void migrate(struct fixture *f, struct tdaemon *src, struct tclient *esrc,
		    struct tdaemon *dst, struct tclient *edst, char *addr, uint32_t v)
{
	assert_int_equal(T_CTL(dst, "migrate-incoming", "--listen", addr, "-u", U1), 0);
	assert_int_equal(T_CTL(src, "migrate", "-u", U1, "--to", addr, "--switchover", "manual",
			       "--no-wait"), 0);
	json_object_put(t_wait_migration(esrc, "waiting"));
	fill(f, 1, 1, v);
	fill(f, 0, 0, v + 1);
	copy01(f, 1);
	f->cpu[0][7] = v + 2;		/* a guest CPU write the stream must carry */
	assert_int_equal(T_CTL(src, "migrate-switchover", "-u", U1), 0);
	json_object_put(t_wait_migration(esrc, "completed"));
	json_object_put(t_wait_migration(edst, "completed"));
	assert_int_equal(T_CTL(src, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(dst, "list", "-u", U1), 0);
}

/* A reattach to @path fails with @err naming @what; the guest is as it was. */
static void reattach_refused(struct fixture *f, const char *path, int err, const char *what)
{
	assert_int_equal(vgpu_vf_reattach(f->vf, path), err);
	if (!strstr(vgpu_vf_last_error(f->vf), what))
		fail_msg("reattach to %s: \"%s\" does not say \"%s\"", path,
			 vgpu_vf_last_error(f->vf), what);
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
	def_start(f->a, U1);
	def_start(f->a, U2);	/* another slice, VF 2: a wrong endpoint */
	guest_up(f);
	assert_int_equal(vgpu_mem_alloc(f->vf, VGPU_MEM_VRAM, BUF, PS, &old), 0);
	fill(f, 0, 0, 0x11111111);
	copy01(f, 1);
	cpu0 = f->cpu[0];
	cpu1 = f->cpu[1];
	at = bar_mapped_at(f->a);
	assert_true(at != 0);

	/* Wrong endpoints while attached: refused, and the guest runs on where it is. */
	reattach_refused(f, ep_a2, -ENODEV, "serves slice " U2);
	reattach_refused(f, ep_b1, -ENOENT, ep_b1);		/* B has no such slice yet */
	reattach_refused(f, ep_a1, -EBUSY, "already attached");
	reattach_refused(f, "", -EINVAL, "no endpoint socket path");
	assert_int_equal(vgpu_managed_init(f->vf, NULL), 0);
	reattach_refused(f, ep_a2, -EBUSY, "managed memory is on");
	vgpu_managed_fini(f->vf);
	fill(f, 0, 0, 0x12121212);
	assert_false(vgpu_vf_reset_pending(f->vf));

	migrate(f, f->a, f->ea, f->b, f->eb, f->mig_b, 0x20000000);
	for (unsigned int k = 0; k < 2; k++)
		sem[k] = f->last[k].value;
	/* The source let go: its endpoint is gone, and the guest sees it gone. */
	assert_int_equal(access(ep_a1, F_OK), -1);
	assert_int_equal(errno, ENOENT);
	assert_true(vgpu_vf_reset_pending(f->vf));
	/* Still wrong endpoints: refused, nothing of the guest changes. */
	reattach_refused(f, ep_a2, -ENODEV, "serves slice " U2);
	reattach_refused(f, ep_a1, -ENOENT, ep_a1);

	objs = rm_objects(f->b, 1);
	assert_int_equal(vgpu_vf_reattach(f->vf, ep_b1), 0);
	assert_false(vgpu_vf_reset_pending(f->vf));
	vgpu_vf_get_info(f->vf, &info);
	assert_int_equal(info.vf_id, 1);
	assert_int_equal(info.reset_count, 0);
	/* The same address now maps B's object: the pointers the guest held read B's copy. */
	assert_int_equal(bar_mapped_at(f->b), at);
	assert_int_equal(bar_mapped_at(f->a), 0);
	assert_ptr_equal(vgpu_mem_cpu(f->m[0]), cpu0);
	assert_ptr_equal(vgpu_mem_cpu(f->m[1]), cpu1);
	assert_int_equal(cpu0[7], 0x20000002);
	cpu0[7] = 0x20000001;
	all_equal(cpu0, WORDS, 0x20000001);
	assert_memory_equal(cpu0, cpu1, BUF);
	assert_int_equal(vgpu_vf_ping(f->vf, "moved", 5), 0);
	assert_int_equal(rm_objects(f->b, 1), objs);	/* the handshake made nothing new */

	/* The same channels continue after the last entry run on A; fences on B's vectors. */
	fill(f, 0, 0, 0x33333333);
	assert_int_equal(f->last[0].value, sem[0] + 1);
	copy01(f, 1);
	assert_int_equal(f->last[1].value, sem[1] + 1);
	all_equal(cpu1, WORDS, 0x33333333);
	for (unsigned int k = 0; k < 2; k++)
		assert_int_equal(vgpu_channel_error(f->ch[k], NULL, NULL), 0);
	/* New memory through B's RM, mapped into the old VA space and filled by the GPU. */
	assert_int_equal(vgpu_mem_alloc(f->vf, VGPU_MEM_VRAM, BUF, PS, &nm), 0);
	assert_int_equal(vgpu_va_map(f->as, VA_NEW, nm, 0, BUF, PS, 0), 0);
	fill_va(f, 1, VA_NEW, 0x44444444);
	all_equal(vgpu_mem_cpu(nm), WORDS, 0x44444444);
	assert_int_equal(rm_objects(f->b, 1), objs + 1);
	/* An old handle works on B: B's RM frees the object A's RM made. */
	assert_int_equal(vgpu_mem_free(old), 0);
	assert_int_equal(rm_objects(f->b, 1), objs);

	/* And back to A the same way (the driver announced its ABI to B at the reattach). */
	migrate(f, f->b, f->eb, f->a, f->ea, f->mig_a, 0x50000000);
	assert_int_equal(vgpu_vf_reattach(f->vf, ep_a1), 0);
	assert_int_equal(bar_mapped_at(f->a), at);
	assert_int_equal(cpu0[7], 0x50000002);
	cpu0[7] = 0x50000001;
	all_equal(cpu0, WORDS, 0x50000001);
	all_equal(cpu1, WORDS, 0x50000001);
	all_equal(vgpu_mem_cpu(nm), WORDS, 0x44444444);
	fill(f, 1, 0, 0x66666666);
	assert_int_equal(vgpu_va_unmap(f->as, VA_NEW, BUF), 0);
	assert_int_equal(vgpu_mem_free(nm), 0);
	guest_down(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reattach_moves_with_slice, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
