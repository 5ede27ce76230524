// SPDX-License-Identifier: MIT
/* A slice with a guest moves between two real vgpuds with the guest's state: a local guest
 * (libvgpu-vf) on vgpud A makes a VA space, VRAM buffers and two channels and runs FILL and
 * COPY work, is quiesced (every fence waited), and the slice is saved with the guest still
 * attached. vgpud B restores it; B's own save of the restored slice then carries the same
 * RM tree (handles, classes, VRAM pages, IOVAs), the same channel runtime (GP_GET, GP_PUT,
 * error state), tokens, IOMMU mappings and bytes (fences included) as A's stream. Then the
 * guest's own mapping of its BAR is pointed at B's copy (what a VMM's migration does to the
 * guest's memory) and the same channels, handles and fences run more work on B: it
 * continues after the last entry A ran (nothing is executed twice: a marker written after
 * the first fill survives) and the results are checked on the CPU. Saving a guest with
 * work in flight is refused; a restore takes the VF the handles name. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "pf_mig_test.h"
#include "common/err.h"
#include "mig/mig.h"
#include <vgpu/rm.h>

#define U0		"5a5a5a5a-3333-4333-8333-000000000000"
#define U1		"5a5a5a5a-3333-4333-8333-333333333333"
#define U2		"5a5a5a5a-3333-4333-8333-222222222222"
#define BUF		T_VF_BUF
#define WORDS		T_VF_WORDS

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "2", "--spare-vram", "256M", NULL };

struct fixture {
	struct tdaemon *a, *b;
	char file_a[128], file_b[128];
	struct tvf g;			/* the guest */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (t_daemon_pair(daemon_args, &f->a, &f->b))
		return -1;
	snprintf(f->file_a, sizeof(f->file_a), "%s/a.vgpumig", f->a->root);
	snprintf(f->file_b, sizeof(f->file_b), "%s/b.vgpumig", f->b->root);
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return t_teardown(state);
}

/* ---- the guest's work ---- */

/* FILL buffer @i with @v on channel @k; the fence in f->g.last[k]. */
static void fill(struct fixture *f, unsigned int k, unsigned int i, uint32_t v)
{
	t_vf_submit_fill(&f->g, k, T_VF_VA + i * BUF, v);
}

/* Attach to A's VF @vf and build the objects: a VA space, two buffers, two channels. */
static void guest_up_on(struct fixture *f, unsigned int vf)
{
	char ep[200];

	snprintf(ep, sizeof(ep), "%s/vf%u.sock", f->a->run, vf);
	t_vf_up(&f->g, ep);
}

static void guest_up(struct fixture *f)
{
	guest_up_on(f, 1);
}

/* Wait for @fence by its semaphore alone (the interrupt the library sleeps on is A's), as
 * long as it takes: a fence that never signals hangs the test until the suite's timeout. */
static void fence_poll(const struct vgpu_fence *fence)
{
	while (!vgpu_fence_done(fence))
		usleep(500);
}

/* ---- the streams ---- */

struct frames {
	uint8_t *state;			/* the state frames' payloads, concatenated in order */
	size_t state_len;
	uint32_t types[64];		/* their types */
	unsigned int nr;
	uint32_t extents;
	uint64_t extent_sum;		/* a checksum of every extent's offset and data */
	struct mig_chan_rec chans[4];
	unsigned int nr_chans;
	struct mig_sched_rec sched;
	unsigned int nr_rm_objs;
	bool has_client, has_vidmem, has_vaspace;
};

static ssize_t fd_read(void *ctx, void *p, size_t len)
{
	return read(*(int *)ctx, p, len);
}

static void keep_state(struct frames *s, const struct mig_frame *fr, const uint8_t *p, size_t len)
{
	s->state = realloc(s->state, s->state_len + len);
	assert_non_null(s->state);
	memcpy(s->state + s->state_len, p, len);
	s->state_len += len;
	assert_true(s->nr < 64);
	s->types[s->nr++] = fr->type;
}

static void note_rm(struct frames *s, const struct mig_frame *fr)
{
	struct mig_rm_obj o;
	size_t off = 0;

	while (mig_rm_obj_next(fr, &off, &o)) {
		s->nr_rm_objs++;
		s->has_client |= !o.h_class && o.handle == o.h_client;
		s->has_vidmem |= o.h_class == VGPU_RM_CLASS_MEMORY_VIDMEM && o.nr_runs;
		s->has_vaspace |= o.h_class == VGPU_RM_CLASS_VASPACE;
	}
}

/* Decode @path fully; what it holds besides HELLO, SLICE and END. */
static void read_stream(const char *path, struct frames *s)
{
	int fd = open(path, O_RDONLY);
	struct mig_dec d;
	struct mig_frame fr;
	struct cmn_fail err = { 0 };
	int r;

	memset(s, 0, sizeof(*s));
	assert_true(fd >= 0);
	assert_int_equal(mig_dec_init(&d, fd_read, &fd, NULL), 0);
	while ((r = mig_dec_next(&d, &fr, &err)) > 0) {
		if (fr.type == MIG_F_EXTENT) {
			s->extents++;
			s->extent_sum = mig_crc32c((uint32_t)s->extent_sum, &fr.u.extent.off, 8) +
					(uint64_t)mig_crc32c(0, fr.u.extent.data, fr.u.extent.len);
		} else if (fr.type == MIG_F_SCHED) {
			s->sched = fr.u.sched;
			s->types[s->nr++] = fr.type;
		} else if (fr.type >= MIG_F_CHANNELS && fr.type <= MIG_F_DOORBELLS) {
			keep_state(s, &fr, fr.u.list.p, fr.u.list.len);
			if (fr.type == MIG_F_RM_TREE)
				note_rm(s, &fr);
			for (uint32_t i = 0; fr.type == MIG_F_CHANNELS && i < fr.u.list.count; i++)
				mig_chan_rec_at(&fr, i, &s->chans[s->nr_chans++]);
		}
	}
	if (r)
		fail_msg("%s: %s", path, err.msg);
	mig_dec_fini(&d);
	close(fd);
}

/* ---- moving the guest's view of its memory ---- */

/* Where this process maps @d's BAR object of VF 1 (the library's mapping), its path and
 * its size. */
static uint8_t *bar_mapping(struct tdaemon *d, char *path, size_t plen, size_t *size)
{
	uint8_t *at = t_bar_mapped(d, 1, size);

	t_bar_path(d, 1, path, plen);
	assert_non_null(at);
	return at;
}

/* Map @path's object over [@at, +@size) in place: the guest's pointers now reach it. */
static void remap(uint8_t *at, size_t size, const char *path)
{
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_true(mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
		    (void *)at);
	close(fd);
}

/* ---- the test ---- */

static void test_guest_state_moves(void **state)
{
	struct fixture *f = *state;
	struct frames sa, sb;
	char path_a[128], path_b[128];
	uint8_t *bar;
	size_t bar_size = 0;
	struct stat sb_b;
	uint64_t sem_before[2];

	t_define_start(f->a, "vgpu-512M", U1);
	guest_up(f);
	/* Work on A: a fill on each channel, then a copy; all waited (quiesced). */
	fill(f, 0, 0, 0x11111111);
	fill(f, 1, 1, 0x22222222);
	assert_int_equal(vgpu_fence_wait(&f->g.last[0], 0), 0);
	assert_int_equal(vgpu_fence_wait(&f->g.last[1], 0), 0);
	t_vf_submit_copy01(&f->g, 1);
	assert_int_equal(vgpu_fence_wait(&f->g.last[1], 0), 0);
	t_all_equal(f->g.cpu[1], WORDS, 0x11111111);
	/* A marker after the work: an entry executed twice would overwrite it. */
	f->g.cpu[0][7] = 0xfeedf00d;
	for (unsigned int k = 0; k < 2; k++)
		sem_before[k] = f->g.last[k].value;

	/* Saved with the guest attached; B restores it (on VF 1, as on A), then saves its copy. */
	if (T_CTL(f->a, "save", "-u", U1, f->file_a))
		fail_msg("save on A: %s", t_out.err);
	if (T_CTL(f->b, "restore", f->file_a))
		fail_msg("restore on B: %s", t_out.err);
	assert_int_equal(T_CTL(f->b, "save", "-u", U1, f->file_b), 0);
	read_stream(f->file_a, &sa);
	read_stream(f->file_b, &sb);
	/* A's stream carries the guest: a client, a VA space, VRAM, both channels. */
	assert_true(sa.has_client && sa.has_vaspace && sa.has_vidmem);
	assert_true(sa.nr_rm_objs >= 8);
	assert_int_equal(sa.nr_chans, 2);
	for (unsigned int k = 0; k < 2; k++) {
		const struct mig_chan_rec *c = &sa.chans[k];

		assert_int_equal(c->chid, vgpu_channel_id(f->g.ch[k]));
		assert_int_equal(c->gp_get, c->gp_put);		/* quiesced */
		assert_int_equal(c->gp_get, k ? 2 : 1);		/* entries A ran */
		assert_int_equal(c->state, 1);			/* idle, no error */
		assert_true(c->flags & MIG_CHAN_ENABLED);
	}
	/* B holds exactly what A sent: the same frames, records and bytes. */
	assert_int_equal(sb.nr, sa.nr);
	assert_memory_equal(sb.types, sa.types, sa.nr * sizeof(sa.types[0]));
	assert_int_equal(sb.state_len, sa.state_len);
	assert_memory_equal(sb.state, sa.state, sa.state_len);
	assert_int_equal(sb.extents, sa.extents);
	assert_int_equal(sb.extent_sum, sa.extent_sum);
	assert_int_equal(sb.sched.run_ns, sa.sched.run_ns);	/* nothing ran on B */
	assert_true(sb.sched.slices >= sa.sched.slices);
	assert_true(sa.sched.run_ns > 0);

	/* The guest's view of its memory moves to B (no re-probe, same handles and pointers). */
	bar = bar_mapping(f->a, path_a, sizeof(path_a), &bar_size);
	t_bar_path(f->b, 1, path_b, sizeof(path_b));
	assert_int_equal(stat(path_b, &sb_b), 0);
	assert_true(bar_size <= (size_t)sb_b.st_size);
	remap(bar, bar_size, path_b);
	t_all_equal(f->g.cpu[1], WORDS, 0x11111111);
	/* More work on the same channels on B: it continues after A's last entry. */
	fill(f, 0, 1, 0x33333333);
	assert_int_equal(f->g.last[0].value, sem_before[0] + 1);
	fence_poll(&f->g.last[0]);
	t_all_equal(f->g.cpu[1], WORDS, 0x33333333);
	t_vf_submit_copy01(&f->g, 1);
	fence_poll(&f->g.last[1]);
	assert_int_equal(f->g.last[1].value, sem_before[1] + 1);
	assert_memory_equal(f->g.cpu[1], f->g.cpu[0], BUF);
	assert_int_equal(f->g.cpu[0][7], 0xfeedf00d);		/* A's fill did not run again */
	assert_int_equal(f->g.cpu[0][0], 0x11111111);
	for (unsigned int k = 0; k < 2; k++)
		assert_int_equal(vgpu_channel_error(f->g.ch[k], NULL, NULL), 0);
	/* The guest goes back to A's memory (untouched there) and leaves cleanly. */
	remap(bar, bar_size, path_a);
	t_all_equal(f->g.cpu[1], WORDS, 0x11111111);
	t_vf_down(&f->g);
	free(sa.state);
	free(sb.state);
}

/* A guest with work it has not waited for is not carried: save refuses, naming it. */
static void test_busy_guest_refused(void **state)
{
	struct fixture *f = *state;
	uint32_t dw[64];
	struct vgpu_pb pb;

	t_define_start(f->a, "vgpu-512M", U1);
	guest_up(f);
	/* A channel blocked on a semaphore the CPU releases only after the save has work
	 * pending (a 60 s acquire: far longer than a save). */
	fill(f, 1, 1, 0);
	assert_int_equal(vgpu_fence_wait(&f->g.last[1], 0), 0);
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_sem_acquire(&pb, T_VF_VA + BUF, 5, 0, 60000000);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(f->g.ch[0], pb.dw, pb.len, &f->g.last[0]), 0);
	assert_int_equal(T_CTL(f->a, "save", "-u", U1, f->file_a), 4);
	assert_non_null(strstr(t_out.err, "work in flight"));
	assert_int_equal(access(f->file_a, F_OK), -1);
	__atomic_store_n(&f->g.cpu[1][0], 5, __ATOMIC_RELEASE);
	assert_int_equal(vgpu_fence_wait(&f->g.last[0], 0), 0);
	/* Quiesced again, it is carried. */
	assert_int_equal(T_CTL(f->a, "save", "-u", U1, f->file_a), 0);
	t_vf_down(&f->g);
}

/* The handles name the source's VF: a restore takes that VF, not the first free one, and
 * is refused (nothing changed) while it is in use. */
static void test_same_vf(void **state)
{
	struct fixture *f = *state;
	json_object *o;

	t_define_start(f->a, "vgpu-512M", U0);
	t_define_start(f->a, "vgpu-512M", U1);
	guest_up_on(f, 2);
	assert_int_equal(T_CTL(f->a, "save", "-u", U1, f->file_a), 0);
	t_vf_down(&f->g);
	/* B: VF 1 free, VF 2 in use. */
	t_define_start(f->b, "vgpu-512M", U0);
	t_define_start(f->b, "vgpu-512M", U2);
	assert_int_equal(T_CTL(f->b, "stop", "-u", U0), 0);
	assert_int_equal(T_CTL(f->b, "restore", f->file_a), 4);
	assert_non_null(strstr(t_out.err, "handles name VF 2, which is in use"));
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), 3);
	/* VF 2 free again: the restore takes it though VF 1 comes first. */
	assert_int_equal(T_CTL(f->b, "stop", "-u", U2), 0);
	assert_int_equal(T_CTL(f->b, "--json", "restore", f->file_a), 0);
	o = t_out_json();
	assert_int_equal(t_get_u64(o, "vf"), 2);
	json_object_put(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_guest_state_moves, setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy_guest_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_same_vf, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
