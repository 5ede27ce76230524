// SPDX-License-Identifier: MIT
/* vgpuctl save / restore against real vgpuds: a pattern written into a slice's VRAM and DMA
 * memory through its BAR object is saved to a file, the slice is stopped and undefined,
 * and a second vgpud restores it with the same bytes, the holes still holes (SEEK_DATA),
 * durable across a kill -9. Refusals (a guest not quiesced, not running, existing file, the
 * UUID already here, no VRAM, no VF, a corrupted byte, a cut file, another version) name
 * the reason and change nothing, and so does a descriptor that is no regular file (a pipe
 * nobody reads: the daemon answers right after); a file changed between the restore's two
 * reads is refused, nothing written outside the slice and nothing kept. Hand-made files
 * with more IOMMU mappings than the slice's guest could make, or with a control area, are
 * refused at the check. A restore whose definition file cannot be written makes the
 * slice's stop write it first. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include <pthread.h>

#include "ctlclient/ctlclient.h"
#include "pf_test.h"
#include "mig/mig.h"

#define U1	"5a5a5a5a-1111-4111-8111-111111111111"
#define UX	"5a5a5a5a-2222-4222-8222-22222222222"

#define EXIT_FAIL	1
#define EXIT_NOTFOUND	3
#define EXIT_CONFLICT	4
#define EXIT_NOSPACE	5

#define MiB		(1ull << 20)
#define HOLE_OFF	(100 * MiB)	/* written with zeros: must not travel */
#define FAR_OFF		(300 * MiB)

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };

struct fixture {
	struct tdaemon *a, *b;
	char dir[64];
	char file[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	f->a = t_daemon_new();
	f->b = t_daemon_new();
	snprintf(f->dir, sizeof(f->dir), "%s", f->a->root);
	snprintf(f->file, sizeof(f->file), "%s/slice.vgpumig", f->dir);
	if (t_daemon_start_argv(f->a, daemon_args) || t_daemon_start_argv(f->b, daemon_args))
		return -1;
	return T_CTL(f->a, "set-vfs", "2") || T_CTL(f->b, "set-vfs", "4") ? -1 : 0;
}

static int teardown(void **state)
{
	free(*state);
	return t_teardown(state);
}

/* The pattern the test writes: 64 KiB at VRAM 0, 4 KiB far up, 4 KiB of DMA memory, and a
 * page of zeros (populated, but nothing to carry). */
static void write_pattern(int fd)
{
	uint8_t buf[64 << 10], zero[4096] = { 0 };

	t_pattern(buf, sizeof(buf), 1);
	assert_int_equal(pwrite(fd, buf, sizeof(buf), 0), sizeof(buf));
	t_pattern(buf, 4096, 2);
	assert_int_equal(pwrite(fd, buf, 4096, FAR_OFF), 4096);
	t_pattern(buf, 4096, 3);
	assert_int_equal(pwrite(fd, buf, 4096, (off_t)(t_bar_dma_off(fd) + 8192)), 4096);
	assert_int_equal(pwrite(fd, zero, sizeof(zero), HOLE_OFF), sizeof(zero));
}

static void check_pattern(int fd)
{
	uint8_t buf[64 << 10], want[64 << 10];

	t_pattern(want, sizeof(want), 1);
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), sizeof(buf));
	assert_memory_equal(buf, want, sizeof(buf));
	t_pattern(want, 4096, 2);
	assert_int_equal(pread(fd, buf, 4096, FAR_OFF), 4096);
	assert_memory_equal(buf, want, 4096);
	t_pattern(want, 4096, 3);
	assert_int_equal(pread(fd, buf, 4096, (off_t)(t_bar_dma_off(fd) + 8192)), 4096);
	assert_memory_equal(buf, want, 4096);
}

/* VF @vf's VRAM object on @d holds the pattern. */
static void check_bar(struct tdaemon *d, unsigned int vf)
{
	int fd = t_bar_open(d, vf);

	check_pattern(fd);
	close(fd);
}

/* Sparseness: between the pieces, nothing is populated (the zero page included). */
static void check_holes(int fd)
{
	assert_int_equal(lseek(fd, 64 << 10, SEEK_DATA), FAR_OFF);
	assert_int_equal(lseek(fd, FAR_OFF + 4096, SEEK_DATA), (off_t)(t_bar_dma_off(fd) + 8192));
}

static char *snap(struct tdaemon *d)
{
	struct tclient *c = t_client(d, true);
	char *s = t_snapshot(c);

	t_client_free(c);
	return s;
}

/* Run a restore on @d expected to fail with @rc and @why, changing nothing. */
static void restore_refused(struct tdaemon *d, const char *file, int rc, const char *why)
{
	char *before = snap(d), *after;

	assert_int_equal(T_CTL(d, "restore", (char *)file), rc);
	if (!strstr(t_out.err, why))
		fail_msg("restore: expected \"%s\" in: %s", why, t_out.err);
	after = snap(d);
	assert_string_equal(before, after);
	free(before);
	free(after);
}

/* Define, start and fill U1 on A; save it to f->file. */
static void make_saved(struct fixture *f)
{
	int fd;

	t_define_start(f->a, "vgpu-512M", U1);
	fd = t_bar_open(f->a, 1);
	write_pattern(fd);
	close(fd);
	assert_int_equal(T_CTL(f->a, "--json", "save", "-u", U1, f->file), 0);
}

/* The round trip: save on A, stop and undefine there, restore on B, same bytes and holes;
 * the file itself holds only what is populated; B keeps it across kill -9. */
static void test_save_restore_round_trip(void **state)
{
	struct fixture *f = *state;
	json_object *o;
	struct stat sb;
	int fd, vf;

	make_saved(f);
	o = t_out_json();
	/* 64 KiB + 4 KiB of VRAM (the zero page left out), 4 KiB of DMA memory. */
	assert_int_equal(t_get_u64(o, "vram_bytes_saved"), (64 << 10) + 4096);
	assert_int_equal(t_get_u64(o, "dma_bytes_saved"), 4096);
	json_object_put(o);
	assert_int_equal(stat(f->file, &sb), 0);
	assert_true(sb.st_size < 128 << 10);
	assert_true((sb.st_mode & 0777) == 0600);
	/* The source runs on, unchanged. */
	check_bar(f->a, 1);
	assert_int_equal(T_CTL(f->a, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);

	/* A dry run plans and changes nothing. */
	assert_int_equal(T_CTL(f->b, "--dry-run", "restore", f->file), 0);
	assert_non_null(strstr(t_out.out, "would restore"));
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);

	assert_int_equal(T_CTL(f->b, "--json", "restore", f->file), 0);
	o = t_out_json();
	vf = (int)t_get_u64(o, "vf");
	assert_true(vf >= 1);
	assert_int_equal(t_get_u64(o, "vram_bytes_loaded"), (64 << 10) + 4096);
	json_object_put(o);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
	fd = t_bar_open(f->b, (unsigned int)vf);
	check_pattern(fd);
	check_holes(fd);
	close(fd);

	/* Committed before the reply: a kill -9 right after keeps it, running, with its bytes. */
	assert_int_equal(t_daemon_stop(f->b, SIGKILL), 128 + SIGKILL);
	assert_int_equal(t_daemon_start_argv(f->b, daemon_args), 0);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
	assert_non_null(strstr(t_out.out, "manual"));	/* defined: its definition file exists */
	check_bar(f->b, (unsigned int)vf);
	/* Restoring it again where it exists is refused. */
	restore_refused(f->b, f->file, EXIT_CONFLICT, "already exists here");
}

/* What save refuses: a guest with a mailbox message in flight, a stopped slice, an existing
 * file (left alone). */
static void test_save_refusals(void **state)
{
	struct fixture *f = *state;
	struct tguest g;
	char ep[200];
	struct stat sb;
	int fd;

	assert_int_equal(T_CTL(f->a, "define", "-t", "vgpu-512M", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "save", "-u", U1, f->file), EXIT_CONFLICT);
	assert_non_null(strstr(t_out.err, "is not running"));
	assert_int_equal(access(f->file, F_OK), -1);	/* a failed save leaves no file */
	assert_int_equal(T_CTL(f->a, "start", "-u", U1), 0);
	snprintf(ep, sizeof(ep), "%s/vf1.sock", f->a->run);
	assert_int_equal(t_guest_attach(ep, &g), 0);
	/* A guest is carried only quiesced: a reply it has not read yet is in flight. */
	uint8_t slot[VF_MBOX_SLOT_SIZE] = { 0 };
	assert_int_equal(cmn_ring_push(&g.rsp, slot, sizeof(slot)), 0);
	assert_int_equal(T_CTL(f->a, "save", "-u", U1, f->file), EXIT_CONFLICT);
	assert_non_null(strstr(t_out.err, "in flight on its mailbox"));
	assert_int_equal(access(f->file, F_OK), -1);
	t_guest_detach(&g);
	fd = open(f->file, O_WRONLY | O_CREAT | O_EXCL, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "keep", 4), 4);
	close(fd);
	assert_int_equal(T_CTL(f->a, "save", "-u", U1, f->file), EXIT_CONFLICT);
	assert_non_null(strstr(t_out.err, "never overwrites"));
	assert_int_equal(stat(f->file, &sb), 0);
	assert_int_equal(sb.st_size, 4);
	assert_int_equal(T_CTL(f->a, "save", "-u", UX, f->file), 2);
	assert_int_equal(T_CTL(f->a, "save", "-u", U1), 2);
}

/* save-slice on @c with descriptor @fd: the reply (the caller puts it). */
static json_object *save_fd(struct ctlc *c, int fd)
{
	json_object *args = json_object_new_object(), *rep = NULL;

	json_object_object_add(args, "uuid", json_object_new_string(U1));
	assert_int_equal(ctlc_request_fd(c, "save-slice", args, fd, &rep, NULL), 0);
	return rep;
}

/* The loop thread writes a save's stream: a descriptor that is not a regular file (a pipe
 * nobody reads, here) is refused before a byte is written, and the daemon answers at once;
 * a regular file passed the same way is saved. */
static void test_save_not_regular(void **state)
{
	struct fixture *f = *state;
	json_object *rep, *err, *v;
	struct ctlc *c;
	int p[2], fd;

	t_define_start(f->a, "vgpu-512M", U1);
	fd = t_bar_open(f->a, 1);
	write_pattern(fd);
	close(fd);
	assert_int_equal(ctlc_open(f->a->sock, &c, NULL), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	rep = save_fd(c, p[1]);
	assert_true(json_object_object_get_ex(rep, "error", &err));
	assert_true(json_object_object_get_ex(err, "class", &v));
	assert_string_equal(json_object_get_string(v), "InvalidArgument");
	assert_true(json_object_object_get_ex(err, "desc", &v));
	if (!strstr(json_object_get_string(v), "a FIFO, not a regular file"))
		fail_msg("save to a pipe: %s", json_object_get_string(v));
	json_object_put(rep);
	assert_int_equal(ctlc_exec(c, "query-version", NULL, NULL, NULL), 0);
	close(p[1]);
	/* Nothing was written: the read end sees EOF at once. */
	assert_int_equal(read(p[0], &(char){ 0 }, 1), 0);
	close(p[0]);

	fd = open(f->file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	rep = save_fd(c, fd);
	close(fd);
	assert_true(json_object_object_get_ex(rep, "return", &v));
	assert_int_equal(t_get_u64(v, "vram_bytes_saved"), (64 << 10) + 4096);
	json_object_put(rep);
	ctlc_close(c);
	assert_int_equal(T_CTL(f->a, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
	assert_int_equal(T_CTL(f->b, "restore", f->file), 0);
	check_bar(f->b, 1);
}

/* A copy of @src with @fn applied, at @dst. */
static void copy_with(const char *src, const char *dst, void (*fn)(uint8_t *p, size_t *len))
{
	static uint8_t buf[1 << 20];
	size_t len;
	int fd = open(src, O_RDONLY);

	assert_true(fd >= 0);
	len = (size_t)read(fd, buf, sizeof(buf));
	close(fd);
	fn(buf, &len);
	fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* A byte in the middle of the first VRAM extent's data (frame 2). */
static void flip_extent_byte(uint8_t *p, size_t *len)
{
	uint32_t slice_len = (uint32_t)p[16 + 16 + 4] | (uint32_t)p[16 + 16 + 5] << 8;
	size_t ext = 2 * 16 + 16 + slice_len;	/* hello frame, slice header and payload */

	(void)len;
	p[ext + 16 + 16 + 1000] ^= 0x40;
}

static void cut_half(uint8_t *p, size_t *len)
{
	(void)p;
	*len /= 2;
}

/* HELLO says version 2.0, with its CRC made right: refused by version, not by checksum. */
static void bump_version(uint8_t *p, size_t *len)
{
	uint32_t crc;

	(void)len;
	p[16 + 8] = MIG_VERSION_MAJOR + 1;
	p[16 + 10] = 0;			/* minor */
	crc = mig_crc32c(mig_crc32c(0, p, 12), p + 16, 16);
	memcpy(p + 12, &crc, 4);	/* little-endian host */
}

/* Restore refusals, each changing nothing: a corrupted byte names its frame, a cut file,
 * another version, not enough VRAM, no free VF, not a stream at all. */
static void test_restore_refusals(void **state)
{
	static const char text[] = "{\"uuid\": \"" U1 "\", \"mdev_type\": \"vgpu-512M\"}\n";
	struct fixture *f = *state;
	char bad[160];
	int fd;

	make_saved(f);
	snprintf(bad, sizeof(bad), "%s/bad.vgpumig", f->dir);
	copy_with(f->file, bad, flip_extent_byte);
	restore_refused(f->b, bad, EXIT_FAIL, "frame 2 (extent)");
	assert_non_null(strstr(t_out.err, "checksum"));
	assert_non_null(strstr(t_out.err, "nothing changed"));
	copy_with(f->file, bad, cut_half);
	restore_refused(f->b, bad, EXIT_FAIL, "truncated");
	copy_with(f->file, bad, bump_version);
	restore_refused(f->b, bad, EXIT_FAIL, "stream version 2.0");
	fd = open(bad, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, sizeof(text)), sizeof(text));
	close(fd);
	restore_refused(f->b, bad, EXIT_FAIL, "not a vgpu migration stream");
	restore_refused(f->b, "/nonexistent/x", EXIT_NOTFOUND, "cannot open");

	/* No VRAM: three slices of 512M leave 256M of B's 1.75G. */
	for (int i = 0; i < 3; i++) {
		char u[40];

		snprintf(u, sizeof(u), "5a5a5a5a-3333-4333-8333-00000000000%d", i);
		assert_int_equal(T_CTL(f->b, "start", "-p", "0000:00:00.0", "-t", "vgpu-512M", "-u", u), 0);
	}
	restore_refused(f->b, f->file, EXIT_NOSPACE, "VRAM");
	/* No VF: one VF left, now taken. */
	assert_int_equal(T_CTL(f->b, "stop", "-u", "5a5a5a5a-3333-4333-8333-000000000000"), 0);
	assert_int_equal(T_CTL(f->b, "start", "-p", "0000:00:00.0", "-t", "vgpu-256M", "-u",
			       "5a5a5a5a-3333-4333-8333-000000000009"), 0);
	assert_int_equal(T_CTL(f->b, "start", "-p", "0000:00:00.0", "-t", "vgpu-256M", "-u",
			       "5a5a5a5a-3333-4333-8333-000000000008"), 0);
	restore_refused(f->b, f->file, EXIT_NOSPACE, "no free VF");
}

/* ---- a file changed between the restore's two reads ---------------------------------------- */

static ssize_t fd_read(void *ctx, void *p, size_t len)
{
	return read(*(int *)ctx, p, len);
}

static int fd_write(void *ctx, const void *p, size_t len)
{
	return write(*(int *)ctx, p, len) == (ssize_t)len ? 0 : -EIO;
}

/* What a change does to the stream: SLICE's VRAM size, and the VRAM extent at FAR_OFF
 * moved to @far_to or its first byte flipped; the CRCs stay right. */
struct change {
	uint64_t vram;			/* 0: as it was */
	uint64_t far_to;		/* 0: where it was */
	bool flip;
};

/* Rewrite @dst in place (the same file, which vgpud holds open) as @src with @c applied. */
static void rewrite_with(const char *src, const char *dst, const struct change *c)
{
	static uint8_t data[MIG_EXTENT_MAX];
	struct mig_dec dec;
	struct mig_enc enc;
	struct mig_frame fr;
	int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(in >= 0 && out >= 0);
	assert_int_equal(mig_dec_init(&dec, fd_read, &in, NULL), 0);
	assert_int_equal(mig_enc_init(&enc, fd_write, &out, NULL), 0);
	while (mig_dec_next(&dec, &fr, NULL) > 0) {
		switch (fr.type) {
		case MIG_F_HELLO:
			break;
		case MIG_F_SLICE: {
			uint64_t vram = c->vram ? c->vram : fr.u.slice.vram_bytes;

			assert_int_equal(mig_enc_slice(&enc, vram, fr.u.slice.dma_bytes,
						       fr.u.slice.def, fr.u.slice.def_len, NULL),
					 0);
			break;
		}
		case MIG_F_EXTENT: {
			uint64_t off = fr.u.extent.off;

			memcpy(data, fr.u.extent.data, fr.u.extent.len);
			if (fr.u.extent.region == MIG_R_VRAM && off == FAR_OFF) {
				off = c->far_to ? c->far_to : off;
				data[0] ^= c->flip ? 0xff : 0;
			}
			assert_int_equal(mig_enc_extent(&enc, fr.u.extent.region, off, data,
							fr.u.extent.len, NULL), 0);
			break;
		}
		case MIG_F_END:
			assert_int_equal(mig_enc_end(&enc, NULL), 0);
			break;
		default:	/* a saved slice without a guest has no state frames */
			fail_msg("frame %u: unexpected type %u", fr.seq, fr.type);
		}
	}
	assert_true(enc.ended);
	mig_dec_fini(&dec);
	close(in);
	close(out);
}

static void copy_file(const char *src, const char *dst)
{
	const struct change none = { 0 };

	rewrite_with(src, dst, &none);
}

struct bg_ctl {
	struct tdaemon *d;
	const char *file;
	struct tout out;
};

static void *bg_restore(void *arg)
{
	struct bg_ctl *b = arg;

	t_ctl_argv(b->d, &b->out, 0, (char *const[]){ "restore", (char *)b->file, NULL });
	return NULL;
}

/* restore-slice reads its file twice: the first read checks every frame and makes the
 * plan, the second loads. A client keeps the file and changes it between the two (here
 * while the test build stops vgpud there: VGPU_MIG_RESTORE_STOP_AT=load): SLICE then
 * says 1 TiB of VRAM and an extent lies 64 MiB past the slice's BAR object; or an extent's
 * byte differs. The restore is refused naming the change, nothing is written outside the
 * slice, nothing is kept, and vgpud restarts with its state whole. */
static void test_restore_file_changed(void **state)
{
	static char *args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M",
				"--num-vfs", "2", NULL };
	static char env[] = "VGPU_MIG_RESTORE_STOP_AT=load";
	struct fixture *f = *state;
	char *wrap[] = { "env", env, NULL }, chg[160], obj[128];
	struct tdaemon *c = t_daemon_new();
	static struct bg_ctl bg;
	struct change cases[2] = { { .vram = 1ull << 40 }, { .flip = true } };
	const char *says[2] = { "frame 1 (slice) declares 1048576 MiB of VRAM",
				"frames 2 to 5 (end) differ" };
	int vf;

	make_saved(f);
	snprintf(chg, sizeof(chg), "%s/changed.vgpumig", f->dir);
	c->prog = "vgpud-test";
	c->wrap = wrap;
	assert_int_equal(t_daemon_start_argv(c, args), 0);
	t_bar_path(c, 1, obj, sizeof(obj));
	for (unsigned int i = 0; i < 2; i++) {
		char *before = snap(c), *after;
		pthread_t th;
		struct stat sb;
		uint8_t byte;
		int st, bar;

		copy_file(f->file, chg);
		bg = (struct bg_ctl){ .d = c, .file = chg };
		assert_int_equal(pthread_create(&th, NULL, bg_restore, &bg), 0);
		/* Stopped after the first read, the slice up on VF 1 with its empty object. */
		assert_int_equal(waitpid(c->pid, &st, WUNTRACED), c->pid);
		assert_true(WIFSTOPPED(st));
		bar = open(obj, O_RDONLY);
		assert_true(bar >= 0);
		assert_int_equal(fstat(bar, &sb), 0);
		if (cases[i].vram)
			cases[i].far_to = (uint64_t)sb.st_size + 64 * MiB;
		rewrite_with(f->file, chg, &cases[i]);
		assert_int_equal(kill(c->pid, SIGCONT), 0);
		assert_int_equal(pthread_join(th, NULL), 0);
		if (bg.out.rc != EXIT_FAIL || !strstr(bg.out.err, says[i]) ||
		    !strstr(bg.out.err, "nothing kept"))
			fail_msg("case %u: restore exit %d, expected %d naming \"%s\": %s%s", i,
				 bg.out.rc, EXIT_FAIL, says[i], bg.out.out, bg.out.err);
		/* Nothing written outside: the object (unlinked now) has its size; a refusal at
		 * SLICE wrote nothing at all (the first data is the control area bring-up
		 * formatted). */
		{
			struct stat now;

			assert_int_equal(fstat(bar, &now), 0);
			assert_int_equal(now.st_size, sb.st_size);
		}
		assert_int_equal(pread(bar, &byte, 1, sb.st_size + (off_t)(64 * MiB)), 0);
		if (cases[i].vram)
			assert_int_equal(lseek(bar, 0, SEEK_DATA), sb.st_size - VF_BAR_CTRL_SIZE);
		close(bar);
		/* Nothing kept. */
		assert_int_equal(access(obj, F_OK), -1);
		assert_int_equal(T_CTL(c, "list", "-u", U1), EXIT_NOTFOUND);
		after = snap(c);
		assert_string_equal(before, after);
		free(before);
		free(after);
	}
	/* A restart finds its state whole, and the file as saved restores. */
	assert_int_equal(t_daemon_stop(c, SIGTERM), 0);
	c->wrap = NULL;
	assert_int_equal(t_daemon_start_argv(c, args), 0);
	assert_int_equal(T_CTL(c, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(c, "--json", "restore", f->file), 0);
	{
		json_object *o = t_out_json();

		vf = (int)t_get_u64(o, "vf");
		json_object_put(o);
	}
	check_bar(c, (unsigned int)vf);
}

/* Durability: the test build of vgpud exits at its Nth durability point (VGPU_CRASH_AT=N);
 * a restore cut at any point comes back either wholly absent (no slice, no definition, no
 * VRAM object) or wholly there, running with its bytes, and an acknowledged one always
 * wholly there. */
static void test_restore_crash_points(void **state)
{
	static char *args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M",
				"--num-vfs", "2", NULL };
	struct fixture *f = *state;
	char n_env[32], *wrap[] = { "env", n_env, NULL }, obj[128], def[256];
	bool done = false;
	unsigned int n;

	make_saved(f);
	for (n = 1; !done && n < 100; n++) {
		struct tdaemon *d = t_daemon_new();
		bool acked = false, there;
		int rc, st;

		d->prog = "vgpud-test";
		d->wrap = wrap;
		snprintf(n_env, sizeof(n_env), "VGPU_CRASH_AT=%u", n);
		rc = t_daemon_start_argv(d, args);
		if (rc == 0) {
			acked = T_CTL(d, "restore", f->file) == 0;
			if (acked) {
				done = true;
				t_daemon_stop(d, SIGKILL);
			} else {
				assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
				d->pid = 0;
				assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 86);
			}
		} else {
			assert_int_equal(rc, 1000 + 86);	/* crashed while starting */
		}
		d->wrap = NULL;
		assert_int_equal(t_daemon_start_argv(d, args), 0);
		there = T_CTL(d, "list", "-u", U1) == 0;
		if (acked && !there)
			fail_msg("crash point %u: an acknowledged restore is gone", n);
		snprintf(def, sizeof(def), "%s/slices/%s.json", d->state, U1);
		t_bar_path(d, 1, obj, sizeof(obj));
		if (there) {
			assert_non_null(strstr(t_out.out, "running"));
			check_bar(d, 1);
			assert_int_equal(access(def, F_OK), 0);
		} else {
			assert_int_equal(access(def, F_OK), -1);
			assert_int_equal(access(obj, F_OK), -1);
		}
		t_daemon_free(d);
	}
	assert_true(done);
}

/* A restore whose definition file cannot be written after its commit (a directory takes
 * the name of the file's temporary one) is acknowledged, the journal holding the
 * definition; a stop, after which the journal no longer names the slice, writes the file
 * first: refused while it cannot, naming the file, the slice running on; once it can, the
 * slice stays defined across a restart. */
static void test_restore_def_write_fails(void **state)
{
	struct fixture *f = *state;
	char def[256], tmp[260];

	make_saved(f);
	assert_int_equal(T_CTL(f->a, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
	snprintf(def, sizeof(def), "%s/slices/%s.json", f->b->state, U1);
	snprintf(tmp, sizeof(tmp), "%s.tmp", def);
	assert_int_equal(mkdir(tmp, 0700), 0);
	assert_int_equal(T_CTL(f->b, "restore", f->file), 0);
	assert_int_equal(access(def, F_OK), -1);
	assert_int_not_equal(T_CTL(f->b, "stop", "-u", U1), 0);
	if (!strstr(t_out.err, "definition file") || !strstr(t_out.err, "nothing was stopped"))
		fail_msg("stop: %s", t_out.err);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
	assert_int_equal(rmdir(tmp), 0);
	assert_int_equal(T_CTL(f->b, "stop", "-u", U1), 0);
	assert_int_equal(access(def, F_OK), 0);
	assert_int_equal(t_daemon_stop(f->b, SIGTERM), 0);
	assert_int_equal(t_daemon_start_argv(f->b, daemon_args), 0);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "defined"));
}

static int file_write(void *ctx, const void *p, size_t len)
{
	return write(*(int *)ctx, p, len) == (ssize_t)len ? 0 : -EIO;
}

/* A hand-made stream in @path: U1 as a vgpu-512M slice whose RM object limit is 16 and no
 * memory, then @n IOMMU mappings of 4 KiB (one per 8 MiB from 8 GiB) or, with @ctrl, a
 * CONTROL piece (the interrupt page), then END. */
static void forged_file(const char *path, size_t n, bool ctrl)
{
	static const char def[] = "{\"definition\":{\"uuid\":\"" U1 "\",\"mdev_type\":"
		"\"vgpu-512M\",\"attrs\":[{\"rm_objects\":16}]},\"transient\":false}";
	static uint8_t page[4096];
	struct mig_iommu_rec *r = calloc(n + 1, sizeof(*r));
	struct mig_enc enc;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_non_null(r);
	assert_int_equal(mig_enc_init(&enc, file_write, &fd, NULL), 0);
	assert_int_equal(mig_enc_slice(&enc, 512 * MiB, 4 * MiB, def, strlen(def), NULL), 0);
	for (size_t i = 0; i < n; i++)
		r[i] = (struct mig_iommu_rec){ (8ull << 30) + i * 8 * MiB, 4096, 0, 3 };
	if (n)
		assert_int_equal(mig_enc_iommu(&enc, r, n, NULL), 0);
	if (ctrl)
		assert_int_equal(mig_enc_control(&enc, VF_BAR_INTR_OFF, page, sizeof(page), NULL),
				 0);
	assert_int_equal(mig_enc_end(&enc, NULL), 0);
	close(fd);
	free(r);
}

/* A file whose IOMMU mappings are more than the slice's guest could make (its DMA window
 * and one per RM object) is refused at the check, naming the frame and the limit; at the
 * limit it is restored. A file with a control area (a live migration's) is refused
 * naming the frame. */
static void test_restore_forged_state(void **state)
{
	struct fixture *f = *state;

	forged_file(f->file, 18, false);
	restore_refused(f->b, f->file, EXIT_FAIL, "restore refused, nothing changed: frame 2 "
			"(iommu): 18 mappings, more than the slice's limit 17");
	forged_file(f->file, 0, true);
	restore_refused(f->b, f->file, EXIT_FAIL, "frame 2 (control): a restore formats the VF's "
			"control area fresh");
	forged_file(f->file, 16, false);
	assert_int_equal(T_CTL(f->b, "restore", f->file), 0);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_save_restore_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_save_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_save_not_regular, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_forged_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_file_changed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_crash_points, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_def_write_fails, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
