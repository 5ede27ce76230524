// SPDX-License-Identifier: MIT
/* Live migration between two real vgpuds: a running slice moves from A to B while "guest"
 * CPU writes and a libvgpu-vf guest's FILL and COPY work (engine writes) land in its VRAM
 * and DMA memory during pre-copy; B ends with every byte (compared page by page with what
 * A held at the switchover, holes kept) and the guest's RM objects, while A forgets the
 * slice. The failure cases leave the source running with its contents untouched: B
 * without a free VF or without the VRAM refuses before anything is copied; a cancel during
 * pre-copy, and in stop_copy with B no longer reading (before END: A resumes; after END
 * unanswered: A holds); B killed mid-stream; A killed (-9) during pre-copy and restarted;
 * one corrupted stream byte (the test build of vgpud flips it) that B refuses; a guest with
 * work in flight at the switchover; a guest attached in peer mode. A VMM's late copy of
 * the BAR (QEMU's) on the destination does not win over what a "vmm" switchover sends.
 * Hostile or odd peers: a forged source whose IOMMU mappings, control area or END B
 * refuses by name (keeping no SCHED counters on the VF), a relay that lowers B's RM
 * object limit so B refuses with VGPU_EQUOTA, a fake destination whose answer is no ack,
 * a busy VF that B refuses at the plan. B's own say: an owner uid that replaces A's, a type
 * whose sizes the slice must have (refused naming the field). A listen path that holds a
 * file or a symbolic link is refused and left as it was, a stale socket of vgpud's own
 * replaced; a TCP
 * migration's sockets on both ends carry keepalive and a user timeout (read through
 * pidfd_getfd()). Every wait is for a MIGRATION event, never a sleep. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include <dirent.h>
#include <endian.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "pf_mig_test.h"
#include "mig/mig.h"

#define U1	"6b6b6b6b-1111-4111-8111-111111111111"
#define U2	"6b6b6b6b-2222-4222-8222-222222222222"

#define EXIT_NOTFOUND	3

#define MiB		(1ull << 20)
#define FAR_OFF		(300 * MiB)	/* data on A, zeroed during pre-copy: a hole on B */
#define NEW_OFF		(200 * MiB)	/* first written during pre-copy */
#define CHUNK		MiB

static char *daemon_args[] = { "--vram", "2G", "--max-vfs", "4", "--spare-vram", "256M", NULL };

struct fixture {
	struct tdaemon *a, *b;
	struct tclient *ea, *eb;	/* event listeners */
	char sock[128];			/* B's migrate-incoming address */
};

/* A fixture: A and B started, two VFs each, with an event listener on each; a daemon
 * given a @wrap_a / @wrap_b (env settings) runs the test build under it. */
static int start_pair(void **state, char *const *wrap_a, char *const *wrap_b)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (t_mig_pair(daemon_args, wrap_a, wrap_b, &f->a, &f->b, &f->ea, &f->eb))
		return -1;
	snprintf(f->sock, sizeof(f->sock), "%s/mig.sock", f->b->root);
	return 0;
}

static int setup(void **state)
{
	return start_pair(state, NULL, NULL);
}

/* A setup whose A (B) runs the test build with the setting @env_a (@env_b) in its
 * environment, NULL for none. */
#define SETUP_ENV(name, env_a, env_b)							\
static int name(void **state)								\
{											\
	static char *wrap_a[] = { "env", env_a, NULL }, *wrap_b[] = { "env", env_b, NULL };	\
											\
	return start_pair(state, env_a ? wrap_a : NULL, env_b ? wrap_b : NULL);		\
}

/* A flips a stream byte. */
SETUP_ENV(setup_corrupt, "VGPU_MIG_CORRUPT_AT=30000", NULL)

/* B writes extents on its writer thread (an option of the test build only). */
SETUP_ENV(setup_writer, NULL, "VGPU_MIG_WRITER=1")

static int teardown(void **state)
{
	struct fixture *f = *state;

	return t_mig_teardown(state, f->ea, f->eb);
}

/* VRAM and DMA memory: the object less its control area. */
static uint64_t data_size(int fd)
{
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	return (uint64_t)sb.st_size - VF_BAR_CTRL_SIZE;
}

/* What A holds before the migration: 64 KiB at 0, 4 KiB far up, 4 KiB of DMA memory. */
static void fill_source(struct fixture *f)
{
	int fd;

	t_define_start(f->a, "vgpu-512M", U1);
	fd = t_bar_open(f->a, 1);
	t_put(fd, 0, 64 << 10, 1);
	t_put(fd, FAR_OFF, 4096, 2);
	t_put(fd, t_bar_dma_off(fd) + 8192, 4096, 3);
	close(fd);
}

/* The "guest" writes during pre-copy: pages changed, added, zeroed, in both regions. */
static void guest_writes(int fd)
{
	t_put(fd, 8192, 4096, 7);
	t_put(fd, NEW_OFF, 12288, 8);
	t_put(fd, FAR_OFF, 4096, 0);
	t_put(fd, t_bar_dma_off(fd) + 8192, 4096, 9);
	t_put(fd, t_bar_dma_off(fd) + 65536, 4096, 10);
}

/* A copy of every populated 1 MiB chunk of VRAM and DMA memory (NULL: all zero). */
struct image {
	uint64_t n;
	uint8_t **chunk;
};

static void image_take(int fd, struct image *im)
{
	static const uint8_t zero[CHUNK];
	uint8_t *buf = malloc(CHUNK);

	im->n = data_size(fd) / CHUNK;
	im->chunk = calloc(im->n, sizeof(*im->chunk));
	assert_non_null(buf);
	for (uint64_t i = 0; i < im->n; i++) {
		assert_int_equal(pread(fd, buf, CHUNK, (off_t)(i * CHUNK)), CHUNK);
		if (memcmp(buf, zero, CHUNK)) {
			im->chunk[i] = buf;
			buf = malloc(CHUNK);
			assert_non_null(buf);
		}
	}
	free(buf);
}

/* Every byte of @fd's VRAM and DMA memory equals @im. */
static void image_check(int fd, const struct image *im)
{
	static const uint8_t zero[CHUNK];
	uint8_t *buf = malloc(CHUNK);

	assert_int_equal(data_size(fd) / CHUNK, im->n);
	for (uint64_t i = 0; i < im->n; i++) {
		assert_int_equal(pread(fd, buf, CHUNK, (off_t)(i * CHUNK)), CHUNK);
		if (memcmp(buf, im->chunk[i] ? im->chunk[i] : zero, CHUNK))
			fail_msg("chunk %" PRIu64 " (offset %#" PRIx64 ") differs", i, i * CHUNK);
	}
	free(buf);
}

static void image_free(struct image *im)
{
	for (uint64_t i = 0; i < im->n; i++)
		free(im->chunk[i]);
	free(im->chunk);
}

/* @im := VF 1's VRAM and DMA memory on @d. */
static void image_of(struct tdaemon *d, struct image *im)
{
	int fd = t_bar_open(d, 1);

	image_take(fd, im);
	close(fd);
}

/* VF 1 on @d holds @im, byte for byte. */
static void image_on(struct tdaemon *d, const struct image *im)
{
	int fd = t_bar_open(d, 1);

	image_check(fd, im);
	close(fd);
}

/* The "guest" writes during pre-copy (guest_writes); then @im := what A holds. */
static void guest_writes_image(struct fixture *f, struct image *im)
{
	int fd = t_bar_open(f->a, 1);

	guest_writes(fd);
	image_take(fd, im);
	close(fd);
}

static const char *jget(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* B listens on loopback TCP, port chosen by vgpud: its address into f->sock. */
static void listen_b_tcp(struct fixture *f)
{
	const char *at;

	assert_int_equal(T_CTL(f->b, "migrate-incoming", "--listen", "tcp:127.0.0.1:0", "-u", U1), 0);
	at = strstr(t_out.out, "tcp:127.0.0.1:");
	assert_non_null(at);
	snprintf(f->sock, sizeof(f->sock), "%.*s", (int)strcspn(at, " \n"), at);
}

static void listen_b(struct fixture *f)
{
	t_mig_listen(f->b, f->sock, U1);
}

/* B listens; A sends U1 with a manual switchover and waits for it (pre-copy converged). */
static void migrate_manual(struct fixture *f)
{
	listen_b(f);
	t_mig_manual(f->a, f->ea, f->sock, U1);
}

/* A sends U1 to B with the VMM's switchover (as vgpu-vm asks for it; vgpuctl offers auto
 * and manual only) and waits until it waits for the VMM. */
static void migrate_vmm_waiting(struct fixture *f)
{
	struct tclient *c = t_client(f->a, true);
	json_object *args = t_args("uuid", U1), *rep;

	json_object_object_add(args, "to", json_object_new_string(f->sock));
	json_object_object_add(args, "switchover", json_object_new_string("vmm"));
	rep = t_exec(c, "migrate-outgoing", args);
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	t_client_free(c);
	json_object_put(t_wait_migration(f->ea, "waiting"));
}

/* A sends U1 to B with an automatic switchover; vgpuctl returns at once. */
static void migrate_no_wait(struct fixture *f)
{
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock, "--no-wait"), 0);
}

/* A sends U1 (as fill_source() leaves it, its bytes in @im) to B, automatic switchover;
 * the source's MIGRATION event that says it failed (the caller puts it). */
static json_object *migrate_fails(struct fixture *f, struct image *im)
{
	fill_source(f);
	image_of(f->a, im);
	listen_b(f);
	migrate_no_wait(f);
	return t_wait_migration(f->ea, "failed");
}

/* @d runs U1. */
static void runs_u1(struct tdaemon *d)
{
	assert_int_equal(T_CTL(d, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "running"));
}

/* @d killed (-9) and started again. */
static void restart(struct tdaemon *d)
{
	assert_int_equal(t_daemon_stop(d, SIGKILL), 128 + SIGKILL);
	assert_int_equal(t_daemon_start_argv(d, daemon_args), 0);
}

/* The event listener @*c closed (its daemon is about to go). */
static void unlisten(struct tclient **c)
{
	t_client_free(*c);
	*c = NULL;
}

/* A still runs U1 with @im's bytes, in migration state "running"; B has no U1. */
static void source_kept(struct fixture *f, const struct image *im)
{
	runs_u1(f->a);
	image_on(f->a, im);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
	/* Nothing is left in a migration: the slice takes changes again. */
	assert_int_equal(T_CTL(f->a, "modify", "-u", U1, "--channels", "8"), 0);
}

/* The whole flow with a manual switchover: converge, guest writes while waiting, switch;
 * B has every byte, the holes stay holes, A has forgotten the slice. */
/* A live migration with a manual switchover; B's record says whether it wrote on its
 * writer thread, which must be so when @writer. */
static void round_trip(void **state, bool writer)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev, *v;
	int fd;

	fill_source(f);
	migrate_manual(f);
	/* A migrating slice takes no other change. */
	assert_int_equal(T_CTL(f->a, "stop", "-u", U1), 4);
	assert_non_null(strstr(t_out.err, "migrating"));
	assert_int_equal(T_CTL(f->a, "set-vfs", "0"), 4);
	assert_non_null(strstr(t_out.err, "live migration is in progress"));
	assert_int_equal(T_CTL(f->b, "set-vfs", "0"), 4);	/* the destination too */
	assert_int_equal(T_CTL(f->a, "migrate-status", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "waiting"));

	guest_writes_image(f, &im);
	assert_int_equal(T_CTL(f->a, "migrate-switchover", "-u", U1), 0);
	ev = t_wait_migration(f->ea, "completed");
	assert_true(t_get_u64(ev, "bytes") < 256 << 10);	/* populated pages only */
	json_object_put(ev);
	ev = t_wait_migration(f->eb, "completed");
	assert_true(json_object_object_get_ex(ev, "writer_thread", &v));
	if (writer)
		assert_true(json_object_get_boolean(v));
	json_object_put(ev);

	runs_u1(f->b);
	fd = t_bar_open(f->b, 1);
	image_check(fd, &im);
	assert_int_equal(lseek(fd, 64 << 10, SEEK_DATA), NEW_OFF);
	assert_int_equal(lseek(fd, NEW_OFF + 12288, SEEK_DATA),
			 (off_t)(t_bar_dma_off(fd) + 8192));
	close(fd);
	image_free(&im);
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), EXIT_NOTFOUND);
	/* The record stays on both sides. */
	assert_int_equal(T_CTL(f->a, "--json", "migrate-status", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "\"completed\""));
	assert_non_null(strstr(t_out.out, "\"downtime_ms\""));
	/* Committed on B: a kill -9 keeps it. */
	restart(f->b);
	runs_u1(f->b);
}

static void test_live_round_trip(void **state)
{
	round_trip(state, false);
}

/* The same with B's writer thread forced on, whatever this machine's CPUs. */
static void test_live_round_trip_writer(void **state)
{
	round_trip(state, true);
}

/* ---- a guest attached (libvgpu-vf, in this process) ---- */

/* Attached to A's endpoint @sock (a name in its runtime dir). */
static void guest_up_at(struct fixture *f, struct tvf *g, const char *sock)
{
	char ep[200];

	snprintf(ep, sizeof(ep), "%s/%s", f->a->run, sock);
	t_vf_up(g, ep);
}

/* As peer 0 (vf1.master.sock), the attachment a migratable VM has. */
static void guest_up(struct fixture *f, struct tvf *g)
{
	guest_up_at(f, g, "vf1.master.sock");
}

/* A guest attached on A works during pre-copy (its engine writes and its RM objects);
 * quiesced before the switchover, the slice moves with its RM tree to the same VF on B. */
static void test_live_guest(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };
	struct image im;
	uint64_t objs;

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x11111111);
	migrate_manual(f);
	/* Engine writes during pre-copy: FILL, COPY, semaphore releases (the fences). */
	t_vf_fill(&g, 1, 1, 0x22222222);
	t_vf_fill(&g, 0, 0, 0x33333333);
	t_vf_copy01(&g, 1);
	objs = t_rm_objects(f->a, 1);
	assert_true(objs > 0);
	image_of(f->a, &im);
	t_mig_switchover(f->a, f->ea, f->eb, U1);
	runs_u1(f->b);
	assert_int_equal(t_rm_objects(f->b, 1), objs);
	image_on(f->b, &im);
	image_free(&im);
	t_vf_down(&g);
}

/* The control area of @d's VF 1 (the last VF_BAR_CTRL_SIZE bytes of its BAR object),
 * mapped read/write, as the guest's CPU sees it; its rings attached. */
struct ctrl_view {
	uint8_t *p;
	struct cmn_ring req, rsp;
	struct vf_bar_header *hdr;
};

static void ctrl_map(struct tdaemon *d, struct ctrl_view *c)
{
	int fd = t_bar_open(d, 1);
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	c->p = mmap(NULL, VF_BAR_CTRL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		    sb.st_size - VF_BAR_CTRL_SIZE);
	close(fd);
	assert_true(c->p != MAP_FAILED);
	c->hdr = (struct vf_bar_header *)(c->p + VF_BAR_HDR_CTRL_OFF);
	assert_int_equal(cmn_ring_attach(&c->req, c->p + VF_BAR_REQ_OFF, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&c->rsp, c->p + VF_BAR_RSP_OFF, VF_BAR_RING_REGION), 0);
}

/* A reply vgpud wrote after the guest's last look at its mailbox moves with the control
 * area: the guest's CPU (this test, through the BAR) puts a PING on A's request ring, A's
 * service thread answers it (the ring's count says when), nobody takes the reply, and B
 * holds it, intact, in the same place after the switchover; the request ring is empty
 * and the header is A's with B's VF in it. */
static void test_live_reply_in_flight(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };
	struct ctrl_view ca, cb;
	uint8_t slot[VF_MBOX_SLOT_SIZE], got[VF_MBOX_SLOT_SIZE];
	struct vf_msg *m = (struct vf_msg *)slot, *r = (struct vf_msg *)got;
	uint32_t resets;

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x66666666);
	ctrl_map(f->a, &ca);
	resets = __atomic_load_n(&ca.hdr->reset_count, __ATOMIC_ACQUIRE);
	migrate_manual(f);
	memset(slot, 0, sizeof(slot));
	m->type = VF_MSG_PING;
	m->seq = 0x5eed;
	m->length = 64;
	t_pattern((uint8_t *)(m + 1), 64, 11);
	assert_int_equal(cmn_ring_push(&ca.req, slot, sizeof(slot)), 0);
	/* No kick: the service thread's sweep finds it, however late a loaded host runs it
	 * (a sweep that never comes hangs the test until the suite's timeout). */
	while (!cmn_ring_count(&ca.rsp))
		usleep(1000);
	assert_int_equal(cmn_ring_count(&ca.rsp), 1);
	assert_int_equal(cmn_ring_count(&ca.req), 0);
	t_mig_switchover(f->a, f->ea, f->eb, U1);
	munmap(ca.p, VF_BAR_CTRL_SIZE);

	ctrl_map(f->b, &cb);
	assert_int_equal(cb.hdr->magic, VF_BAR_MAGIC);
	assert_int_equal(cb.hdr->vf_id, 1);
	assert_int_equal(cb.hdr->reset_count, resets);
	assert_int_equal(cb.hdr->state, VF_STATE_READY);
	assert_int_equal(cmn_ring_count(&cb.req), 0);
	assert_int_equal(cmn_ring_count(&cb.rsp), 1);
	assert_int_equal(cmn_ring_pop(&cb.rsp, got), 0);
	assert_int_equal(r->type, VF_MSG_PING);
	assert_int_equal(r->seq, 0x5eed);
	assert_int_equal(r->status, 0);
	assert_int_equal(r->length, 64);
	assert_memory_equal(r + 1, m + 1, 64);
	munmap(cb.p, VF_BAR_CTRL_SIZE);
	t_vf_down(&g);
}

/* A guest with work in flight at the switchover is not carried: the switchover fails
 * naming it, and the source resumes: the engines run the pending work there.
 * The GSP's watchdog stops a channel that waits 5 s while its engines may run it, so the
 * blocked channel never waits on a step whose length load decides (a vgpuctl process, the
 * destination's event): the switchover goes over a control connection opened before, and
 * the semaphore is released as soon as the source's "failed" event says it resumed. */
static void test_live_busy_guest(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };
	uint32_t dw[64];
	struct vgpu_pb pb;
	struct tclient *c;
	json_object *ev, *rep;

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 1, 1, 0);
	migrate_manual(f);
	c = t_client(f->a, true);
	/* Blocked on a semaphore the CPU releases only after the switchover failed. */
	vgpu_pb_init(&pb, dw, 64);
	vgpu_pb_sem_acquire(&pb, T_VF_VA + T_VF_BUF, 5, 0, 60000000);
	assert_int_equal(pb.err, 0);
	assert_int_equal(vgpu_submit(g.ch[0], pb.dw, pb.len, &g.last[0]), 0);
	rep = t_exec(c, "migrate-switchover", t_args("uuid", U1));
	assert_non_null(t_ret(rep));
	json_object_put(rep);
	ev = t_wait_migration(f->ea, "failed");
	/* The source runs: its engines take the pending work once the semaphore is released. */
	__atomic_store_n(&g.cpu[1][0], 5, __ATOMIC_RELEASE);
	t_client_free(c);
	assert_non_null(strstr(jget(ev, "error"), "work in flight"));
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(vgpu_fence_wait(&g.last[0], 0), 0);
	t_vf_fill(&g, 0, 0, 0x44444444);
	assert_int_equal(vgpu_channel_error(g.ch[0], NULL, NULL), 0);
	t_vf_down(&g);
}

/* A guest attached in ivshmem peer mode (vf1.sock), which QEMU cannot migrate, makes the
 * slice refuse to migrate, naming why; nothing changes. */
static void test_live_peer_mode_refused(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };

	fill_source(f);
	guest_up_at(f, &g, "vf1.sock");
	listen_b(f);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 1);
	assert_non_null(strstr(t_out.err, "peer mode"));
	assert_int_equal(T_CTL(f->a, "migrate-status"), 0);
	assert_non_null(strstr(t_out.out, "no migrations"));
	t_vf_fill(&g, 0, 0, 0x55555555);	/* it runs on */
	t_vf_down(&g);
}

/* U1's round on @d: the last pass it sent (source) or received (destination). */
static unsigned int round_of(struct tdaemon *d)
{
	json_object *o, *arr;
	unsigned int r;

	assert_int_equal(T_CTL(d, "--json", "migrate-status", "-u", U1), 0);
	o = t_out_json();
	assert_true(json_object_object_get_ex(o, "migrations", &arr));
	r = (unsigned int)t_get_u64(json_object_array_get_idx(arr, 0), "round");
	json_object_put(o);
	return r;
}

/* The next MIGRATION event on @c of a pass numbered @n or later. */
static void wait_pass(struct tclient *c, unsigned int n)
{
	for (;;) {
		json_object *ev = t_wait_migration(c, "pre_copy");
		unsigned int r = (unsigned int)t_get_u64(ev, "round");

		json_object_put(ev);
		if (r >= n)
			return;
	}
}

/* A VMM that copies the BAR as RAM (QEMU) writes each page at the destination as it read
 * it at the source, whenever its stream gets there. Here the VMM reads a VRAM page and a
 * DMA page, the pages then change (as an engine's write after QEMU's read would), a round
 * sends them while A waits (B's events say when), and the VMM's older copies land on B
 * after that. A "vmm" switchover sends every page sent while waiting again, so B ends
 * with A's bytes anyway. */
static void test_live_vmm_copy(void **state)
{
	struct fixture *f = *state;
	uint8_t vram_copy[4096], dma_copy[4096];
	struct image im;
	unsigned int r;
	int fa, fb;

	fill_source(f);
	listen_b(f);
	migrate_vmm_waiting(f);
	fa = t_bar_open(f->a, 1);
	fb = t_bar_open(f->b, 1);
	assert_int_equal(pread(fa, vram_copy, 4096, 4096), 4096);
	assert_int_equal(pread(fa, dma_copy, 4096, (off_t)(t_bar_dma_off(fa) + 8192)), 4096);
	t_put(fa, 4096, 4096, 21);
	t_put(fa, t_bar_dma_off(fa) + 8192, 4096, 22);
	/* Pass r + 1 may have read the pages before they changed; pass r + 2 began after. */
	r = round_of(f->a);
	wait_pass(f->eb, r + 2);
	assert_int_equal(pwrite(fb, vram_copy, 4096, 4096), 4096);
	assert_int_equal(pwrite(fb, dma_copy, 4096, (off_t)(t_bar_dma_off(fb) + 8192)), 4096);
	image_take(fa, &im);
	close(fa);
	t_mig_switchover(f->a, f->ea, f->eb, U1);
	image_check(fb, &im);
	close(fb);
	image_free(&im);
}

/* An automatic switchover runs to the end on its own; vgpuctl migrate follows it. */
static void test_live_auto(void **state)
{
	struct fixture *f = *state;
	struct image im;

	fill_source(f);
	image_of(f->a, &im);
	listen_b(f);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 0);
	assert_non_null(strstr(t_out.out, "completed"));
	json_object_put(t_wait_migration(f->eb, "completed"));
	image_on(f->b, &im);
	image_free(&im);
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), EXIT_NOTFOUND);
}

/* B has no free VF, then no VRAM for the type: refused before anything is copied, and
 * the source never stopped. */
static void test_live_refused(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	fill_source(f);
	image_of(f->a, &im);
	assert_int_equal(T_CTL(f->b, "set-vfs", "0"), 0);
	listen_b(f);
	migrate_no_wait(f);
	ev = t_wait_migration(f->ea, "failed");
	assert_non_null(strstr(jget(ev, "error"), "no free VF"));
	assert_int_equal(t_get_u64(ev, "bytes"), 0);
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	source_kept(f, &im);

	/* VFs, but the VRAM is taken by another slice. */
	assert_int_equal(T_CTL(f->b, "set-vfs", "2"), 0);
	assert_int_equal(T_CTL(f->b, "define", "-t", "vgpu-512M", "--vram", "1536M", "-u", U2), 0);
	assert_int_equal(T_CTL(f->b, "start", "-u", U2), 0);
	listen_b(f);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 1);
	assert_non_null(strstr(t_out.out, "refused"));
	json_object_put(t_wait_migration(f->eb, "failed"));
	source_kept(f, &im);
	image_free(&im);
}

/* A cancel during pre-copy: the source runs on with what its guest wrote, B keeps nothing. */
static void test_live_cancel(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	fill_source(f);
	migrate_manual(f);
	guest_writes_image(f, &im);
	assert_int_equal(T_CTL(f->a, "migrate-cancel", "-u", U1), 0);
	json_object_put(t_wait_migration(f->ea, "cancelled"));
	json_object_put(t_wait_migration(f->eb, "failed"));
	source_kept(f, &im);
	/* A cancel of nothing names what is missing. */
	assert_int_equal(T_CTL(f->a, "migrate-cancel", "-u", U1), EXIT_NOTFOUND);
	/* A destination still listening can be cancelled by its address. */
	listen_b(f);
	assert_int_equal(T_CTL(f->b, "migrate-cancel", "--listen", f->sock), 0);
	json_object_put(t_wait_migration(f->eb, "cancelled"));

	/* A cancel on the destination during pre-copy: it discards, the source resumes. */
	migrate_manual(f);
	assert_int_equal(T_CTL(f->b, "migrate-cancel", "-u", U1), 0);
	json_object_put(t_wait_migration(f->eb, "cancelled"));
	ev = t_wait_migration(f->ea, "cancelled");
	assert_string_equal(jget(ev, "error"), "cancelled on the destination");
	json_object_put(ev);
	source_kept(f, &im);
	image_free(&im);
}

/* B is killed while the source waits for its switchover: the source resumes. */
static void test_live_dest_killed(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	fill_source(f);
	migrate_manual(f);
	image_of(f->a, &im);
	unlisten(&f->eb);
	assert_int_equal(t_daemon_stop(f->b, SIGKILL), 128 + SIGKILL);
	/* Seen while waiting (no answer) or while a round was sending (a broken pipe). */
	ev = t_wait_migration(f->ea, "failed");
	assert_true(strstr(jget(ev, "error"), "closed the connection") ||
		    strstr(jget(ev, "error"), "connection to the destination broke"));
	json_object_put(ev);
	assert_int_equal(t_daemon_start_argv(f->b, daemon_args), 0);
	source_kept(f, &im);
	image_free(&im);
}

/* The source vgpud is killed (-9) during pre-copy: B sees the connection close and keeps
 * nothing; A, restarted, runs the slice with its VRAM intact (a migration changes nothing
 * persistent on the source before the destination committed). */
static void test_live_source_killed(void **state)
{
	struct fixture *f = *state;
	struct image im;

	fill_source(f);
	migrate_manual(f);
	image_of(f->a, &im);
	unlisten(&f->ea);
	assert_int_equal(t_daemon_stop(f->a, SIGKILL), 128 + SIGKILL);
	json_object_put(t_wait_migration(f->eb, "failed"));
	assert_int_equal(t_daemon_start_argv(f->a, daemon_args), 0);
	source_kept(f, &im);
	image_free(&im);
}

/* One byte of the stream corrupted on the way (the test build of A flips it), over TCP: B
 * refuses naming the frame, the source (still sending) reads why and resumes. */
static void test_live_corrupt(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	fill_source(f);
	image_of(f->a, &im);
	listen_b_tcp(f);
	migrate_no_wait(f);
	ev = t_wait_migration(f->ea, "failed");
	assert_non_null(strstr(jget(ev, "error"), "checksum mismatch"));
	json_object_put(ev);
	ev = t_wait_migration(f->eb, "failed");
	assert_non_null(strstr(jget(ev, "error"), "checksum mismatch"));
	json_object_put(ev);
	source_kept(f, &im);
	image_free(&im);
}

/* An int option of socket @fd. */
static int sockopt(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
	return v;
}

/* @fd is a connected TCP socket (not a listening one). */
static bool sock_is_tcp(int fd)
{
	int dom = -1, type = -1;
	socklen_t len = sizeof(dom);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) ||
	    (dom != AF_INET && dom != AF_INET6))
		return false;
	len = sizeof(type);
	return !getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) && type == SOCK_STREAM &&
	       !sockopt(fd, SOL_SOCKET, SO_ACCEPTCONN);
}

/* @d's connected TCP sockets, each taken through pidfd_getfd(): one, with the keepalive
 * and user timeout doc/migration.md names (30 s to give up on a silent peer). */
static void tcp_opts_on(struct tdaemon *d)
{
	int pidfd = (int)syscall(SYS_pidfd_open, d->pid, 0), n = 0;
	char dir[64];
	struct dirent *de;
	DIR *dp;

	assert_true(pidfd >= 0);
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)d->pid);
	dp = opendir(dir);
	assert_non_null(dp);
	while ((de = readdir(dp))) {
		int fd = de->d_name[0] == '.' ? -1 :
			 (int)syscall(SYS_pidfd_getfd, pidfd, atoi(de->d_name), 0);

		if (fd < 0)
			continue;
		if (sock_is_tcp(fd)) {
			assert_int_equal(sockopt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
			assert_int_equal(sockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE), 10);
			assert_int_equal(sockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL), 5);
			assert_int_equal(sockopt(fd, IPPROTO_TCP, TCP_KEEPCNT), 4);
			assert_int_equal(sockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 30000);
			assert_int_equal(sockopt(fd, IPPROTO_TCP, TCP_NODELAY), 1);
			n++;
		}
		close(fd);
	}
	closedir(dp);
	close(pidfd);
	assert_int_equal(n, 1);
}

/* A TCP migration waiting for its switchover: both ends' sockets give up on a peer that
 * stops answering (its host gone) within 30 s, not the kernel's hours. */
static void test_live_tcp_keepalive(void **state)
{
	struct fixture *f = *state;

	fill_source(f);
	listen_b_tcp(f);
	t_mig_manual(f->a, f->ea, f->sock, U1);
	tcp_opts_on(f->a);
	tcp_opts_on(f->b);
	assert_int_equal(T_CTL(f->a, "migrate-cancel", "-u", U1), 0);
	json_object_put(t_wait_migration(f->ea, "cancelled"));
	json_object_put(t_wait_migration(f->eb, "failed"));
}

/* Bad requests are refused naming what is wrong, changing nothing. */
static void test_live_bad_requests(void **state)
{
	struct fixture *f = *state;

	fill_source(f);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", "relative.sock"), 2);
	assert_non_null(strstr(t_out.err, "absolute UNIX socket path"));
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1), 2);
	assert_non_null(strstr(t_out.err, "--to"));
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 1);
	assert_non_null(strstr(t_out.err, "cannot connect"));
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U2, "--to", f->sock), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(f->a, "migrate-switchover", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(f->a, "migrate-incoming", "--listen", f->sock, "-u", U1), 4);
	assert_non_null(strstr(t_out.err, "already exists"));
	assert_int_equal(T_CTL(f->a, "migrate-status"), 0);
	assert_non_null(strstr(t_out.out, "no migrations"));
}

/* A file at @path holding @text, written by the test. */
static void put_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* @path is still a regular file holding @text. */
static void file_is(const char *path, const char *text)
{
	char buf[64] = { 0 };
	struct stat sb;
	int fd;

	assert_int_equal(lstat(path, &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(text));
	close(fd);
	assert_string_equal(buf, text);
}

/* migrate-incoming on @path is refused as invalid, the error naming @path and @what. */
static void listen_refused(struct fixture *f, const char *path, const char *what)
{
	assert_int_equal(T_CTL(f->b, "migrate-incoming", "--listen", (char *)path, "-u", U1), 2);
	if (!strstr(t_out.err, path) || !strstr(t_out.err, what))
		fail_msg("listen on %s: expected \"%s\" in: %s", path, what, t_out.err);
}

/* The listen address is a client's path and vgpud runs as root: a regular file there, or a
 * symbolic link to one, is refused by name and left as it was; a stale socket of vgpud's
 * own user is replaced by a listening socket of mode 0600; a file that took the listening
 * socket's path since is left when the listen ends. */
static void test_live_listen_path(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char link[160];
	struct stat sb;
	int fd;

	put_file(f->sock, "keep");
	listen_refused(f, f->sock, "is a regular file, not a socket");
	file_is(f->sock, "keep");
	snprintf(link, sizeof(link), "%s/link.sock", f->b->root);
	assert_int_equal(symlink(f->sock, link), 0);
	listen_refused(f, link, "is a symbolic link, not a socket");
	assert_int_equal(lstat(link, &sb), 0);
	assert_true(S_ISLNK(sb.st_mode));
	file_is(f->sock, "keep");
	assert_int_equal(T_CTL(f->b, "migrate-status"), 0);
	assert_non_null(strstr(t_out.out, "no migrations"));

	/* A stale socket: bound, closed, never unlinked. */
	assert_int_equal(unlink(f->sock), 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	t_mig_listen(f->b, f->sock, U1);
	assert_int_equal(lstat(f->sock, &sb), 0);
	assert_true(S_ISSOCK(sb.st_mode));
	assert_int_equal(sb.st_mode & 0777, 0600);

	/* Its socket replaced by a file while B listens: the cancel leaves the file. */
	assert_int_equal(unlink(f->sock), 0);
	put_file(f->sock, "mine");
	assert_int_equal(T_CTL(f->b, "migrate-cancel", "--listen", f->sock), 0);
	json_object_put(t_wait_migration(f->eb, "cancelled"));
	file_is(f->sock, "mine");
}

/* ---- the hand-over record: the source dies after the destination may have committed ---- */

#define CRASH_EXIT	86	/* a test build's exit at a named point (PF_CRASH_EXIT) */

/* Pairs whose source (or destination), the test build, ends itself at the hand-over
 * point its wrap names. */
SETUP_ENV(setup_exit_committed, "VGPU_MIG_SRC_EXIT_AT=committed", NULL)

SETUP_ENV(setup_exit_handover, "VGPU_MIG_SRC_EXIT_AT=handover", NULL)

SETUP_ENV(setup_dst_exit_committed, NULL, "VGPU_MIG_DST_EXIT_AT=committed")

/* @d (the test build) ends itself at its hand-over point: wait for that exit. */
static void exited_at_point(struct tdaemon *d)
{
	int st = 0;

	assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
	d->pid = 0;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), CRASH_EXIT);
	d->wrap = NULL;
}

/* A holds U1 after an unconfirmed hand-over: VF 1 and its VRAM kept, nothing of it run,
 * every verb but those that end the hold refused, naming the way out. */
static void held_here(struct fixture *f)
{
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "migrated-out (unconfirmed)"));
	assert_null(strstr(t_out.out, "running"));
	assert_int_equal(T_CTL(f->a, "--json", "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "\"vf\": 1"));
	assert_non_null(strstr(t_out.out, "\"held\": true"));
	assert_non_null(strstr(t_out.out, f->sock));
	assert_int_equal(T_CTL(f->a, "start", "-u", U1), 4);
	assert_non_null(strstr(t_out.err, "migrated out"));
	assert_non_null(strstr(t_out.err, "held here with its VRAM on VF 1"));
	assert_non_null(strstr(t_out.err, "vgpuctl reclaim"));
	assert_int_equal(T_CTL(f->a, "modify", "-u", U1, "--channels", "8"), 4);
	assert_int_equal(T_CTL(f->a, "reset", "-u", U1), 4);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 4);
	assert_non_null(strstr(t_out.err, "migrate-outgoing: slice " U1 " migrated out"));
}

/* A killed (-9) and started again: the mark is in its state, not only in its memory. */
static void restart_a(struct fixture *f)
{
	unlisten(&f->ea);
	restart(f->a);
}

/* A ended itself at its hand-over point; started again (without the point), and once
 * more, it holds U1 with @im's bytes. */
static void source_held(struct fixture *f, const struct image *im)
{
	unlisten(&f->ea);
	exited_at_point(f->a);
	assert_int_equal(t_daemon_start_argv(f->a, daemon_args), 0);
	held_here(f);
	image_on(f->a, im);
	restart_a(f);
	held_here(f);
	image_on(f->a, im);
}

/* Killed after B committed, before A stopped and undefined the slice: A's record keeps it
 * from running U1 again, B runs it; undefine drops A's copy and lets go of VF 1. */
static void test_live_source_exits_committed(void **state)
{
	struct fixture *f = *state;
	struct image im;

	fill_source(f);
	image_of(f->a, &im);
	listen_b(f);
	migrate_no_wait(f);
	json_object_put(t_wait_migration(f->eb, "completed"));
	source_held(f, &im);
	runs_u1(f->b);
	image_on(f->b, &im);
	image_free(&im);
	/* Reclaim is for the other outcome; here the admin drops A's copy. */
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1, "--dry-run"), 0);
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "migrated-out"));
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), EXIT_NOTFOUND);
	t_define_start(f->a, "vgpu-512M", U2);
	assert_int_equal(T_CTL(f->a, "--json", "list", "-u", U2), 0);
	assert_non_null(strstr(t_out.out, "\"vf\": 1"));
}

/* Killed with the record durable but the final END not sent: B never commits, A does not
 * run the slice by itself either; reclaim runs it on with every byte. */
static void test_live_source_exits_handover(void **state)
{
	struct fixture *f = *state;
	struct image im;

	fill_source(f);
	image_of(f->a, &im);
	listen_b(f);
	migrate_no_wait(f);
	json_object_put(t_wait_migration(f->eb, "failed"));
	source_held(f, &im);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
	assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1, "--dry-run"), 0);
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "migrated-out"));
	assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), 2);	/* no record any more */
	assert_non_null(strstr(t_out.err, "no hand-over record"));
	runs_u1(f->a);
	image_on(f->a, &im);
	/* Reclaimed for good: a restart keeps it running, unmarked, every byte kept. */
	restart(f->a);
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
	image_on(f->a, &im);
	image_free(&im);
}

/* The destination commits and dies before its ack: the source saw END go out and no
 * answer, so it holds the slice (its VRAM kept) and its record instead of resuming it;
 * the destination, restarted, runs the slice it committed, with every byte. */
static void test_live_dest_exits_committed(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	ev = migrate_fails(f, &im);
	assert_non_null(strstr(jget(ev, "error"), "may have committed"));
	json_object_put(ev);
	unlisten(&f->eb);
	exited_at_point(f->b);
	held_here(f);
	image_on(f->a, &im);
	restart_a(f);
	held_here(f);
	image_on(f->a, &im);
	assert_int_equal(t_daemon_start_argv(f->b, daemon_args), 0);
	runs_u1(f->b);
	image_on(f->b, &im);
	image_free(&im);
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
}

/* Held (the destination died at its commit), A refuses a guest; reclaimed, it runs U1 on
 * with every byte, a guest works on it (mailbox served, engines run) and it may migrate
 * again. Stopped instead, it drops its VRAM and keeps its record: reclaim then leaves it
 * defined, to start. */
static void held_then(void **state, bool stop)
{
	struct fixture *f = *state;
	char ep[200];
	struct vgpu_vf_opts o = { .socket = ep, .quiet = true };
	struct vgpu_vf *vf;
	struct tvf g = { 0 };
	struct image im;
	json_object *ev;

	ev = migrate_fails(f, &im);
	json_object_put(ev);
	unlisten(&f->eb);
	exited_at_point(f->b);
	held_here(f);
	snprintf(ep, sizeof(ep), "%s/vf1.master.sock", f->a->run);
	assert_int_not_equal(vgpu_vf_open(&o, &vf), 0);
	if (stop) {
		assert_int_equal(T_CTL(f->a, "stop", "-u", U1), 0);
		assert_int_equal(T_CTL(f->a, "--json", "list", "-u", U1), 0);
		assert_non_null(strstr(t_out.out, "\"held\": false"));
		assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), 0);
		assert_int_equal(T_CTL(f->a, "list", "-u", U1), 0);
		assert_null(strstr(t_out.out, "running"));
		assert_int_equal(T_CTL(f->a, "start", "-u", U1), 0);
	} else {
		assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), 0);
		image_on(f->a, &im);
	}
	image_free(&im);
	runs_u1(f->a);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x5a5a5a5a);
	t_vf_down(&g);
	assert_int_equal(T_CTL(f->a, "--dry-run", "migrate", "-u", U1, "--to", f->sock), 0);
}

static void test_live_held_reclaimed(void **state)
{
	held_then(state, false);
}

static void test_live_held_stopped(void **state)
{
	held_then(state, true);
}

/* Pairs whose source (or destination) sees the state directory's fsync fail at the
 * hand-over record (or the commit). */
SETUP_ENV(setup_src_sync_fail, "VGPU_MIG_SRC_SYNC_FAIL_AT=handover", NULL)

SETUP_ENV(setup_dst_sync_fail, NULL, "VGPU_MIG_DST_SYNC_FAIL_AT=commit")

/* B's commit cannot write its journal; and A's drop of its hand-over record too. */
SETUP_ENV(setup_dst_write_fail, NULL, "VGPU_MIG_DST_WRITE_FAIL_AT=commit")

SETUP_ENV(setup_both_write_fail, "VGPU_MIG_SRC_WRITE_FAIL_AT=unmark",
	  "VGPU_MIG_DST_WRITE_FAIL_AT=commit")

/* @d refuses a change, naming why (@why): its state on disk is unsound. */
static void read_only(struct tdaemon *d, const char *why)
{
	assert_int_not_equal(T_CTL(d, "modify", "-u", U1, "--channels", "8"), 0);
	assert_non_null(strstr(t_out.err, "no changes until it is restarted"));
	assert_non_null(strstr(t_out.err, why));
}

/* B cannot write its journal at the commit: it refuses, and A, told so, resumes U1 with
 * every byte and without its hand-over record, in memory as after a restart. */
static void test_live_commit_write_fails(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	ev = migrate_fails(f, &im);
	assert_non_null(strstr(jget(ev, "error"), "cannot write the journal"));
	assert_null(strstr(jget(ev, "error"), "may have committed"));
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), 0);
	assert_null(strstr(t_out.out, "migrated-out"));
	source_kept(f, &im);
	restart_a(f);
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
	image_free(&im);
}

/* ... and A cannot write the drop of its hand-over record either: U1 runs on there (B did
 * not commit), A's journal still holds the record and A takes no change until restarted.
 * Killed (-9), A comes back holding U1 marked (its VRAM kept), which reclaim ends;
 * stopped (@clean), it writes its journal first and comes back running U1 unmarked. Every
 * byte is kept either way. */
static void unmark_write_fails(void **state, bool clean)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	ev = migrate_fails(f, &im);
	assert_non_null(strstr(jget(ev, "error"), "cannot write the journal"));
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	runs_u1(f->a);
	image_on(f->a, &im);
	read_only(f->a, "still hold its hand-over record");
	unlisten(&f->ea);
	if (clean) {
		assert_int_equal(t_daemon_stop(f->a, SIGTERM), 0);
		assert_int_equal(t_daemon_start_argv(f->a, daemon_args), 0);
		runs_u1(f->a);
		assert_null(strstr(t_out.out, "migrated-out"));
	} else {
		restart(f->a);
		held_here(f);
		assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), 0);
		runs_u1(f->a);
	}
	image_on(f->a, &im);
	image_free(&im);
}

static void test_live_unmark_write_fails_crash(void **state)
{
	unmark_write_fails(state, false);
}

static void test_live_unmark_write_fails_clean(void **state)
{
	unmark_write_fails(state, true);
}

/* A's hand-over record may vanish in a crash (its directory's fsync fails): the
 * switchover does not begin. The migration fails naming why, A runs U1 on with every byte
 * and no record, B keeps nothing, and A takes no change until restarted, after which U1
 * runs there unmarked. */
static void test_live_handover_not_durable(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	ev = migrate_fails(f, &im);
	assert_non_null(strstr(jget(ev, "error"), "hand-over record"));
	assert_non_null(strstr(jget(ev, "error"), "not durable"));
	assert_null(strstr(jget(ev, "error"), "may have committed"));
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
	image_on(f->a, &im);
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
	read_only(f->a, "syncing the state directory");
	restart_a(f);
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
	image_on(f->a, &im);
	assert_int_equal(T_CTL(f->a, "modify", "-u", U1, "--channels", "8"), 0);
	image_free(&im);
}

/* B commits, but its journal's directory fails to sync: U1 runs there and may vanish in a
 * crash, so B does not answer, and A (END sent, no answer) holds U1 with its VRAM and its
 * record, as when B dies before its answer. B takes no change until restarted; then it
 * runs U1 with every byte, and the admin drops A's copy. */
static void test_live_commit_not_durable(void **state)
{
	struct fixture *f = *state;
	struct image im;
	json_object *ev;

	ev = migrate_fails(f, &im);
	assert_non_null(strstr(jget(ev, "error"), "may have committed"));
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "completed"));
	held_here(f);
	image_on(f->a, &im);
	runs_u1(f->b);
	image_on(f->b, &im);
	read_only(f->b, "syncing the state directory");
	unlisten(&f->eb);
	restart(f->b);
	runs_u1(f->b);
	image_on(f->b, &im);
	assert_int_equal(T_CTL(f->b, "modify", "-u", U1, "--channels", "8"), 0);
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
	image_free(&im);
}

/* ---- hostile peers: a forged source, a relay that changes what A sends ---- */

static int fd_write(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len) {
		ssize_t n = send(fd, b, len, MSG_NOSIGNAL);

		if (n <= 0)
			return -EPIPE;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

static bool fd_read(int fd, void *p, size_t len)
{
	uint8_t *b = p;

	while (len) {
		ssize_t n = read(fd, b, len);

		if (n <= 0)
			return false;
		b += n;
		len -= (size_t)n;
	}
	return true;
}

static int enc_write(void *ctx, const void *p, size_t len)
{
	return fd_write(*(int *)ctx, p, len);
}

/* A destination's ack record on @fd (doc/migration.md "Live passes"): its status, the
 * message into @msg (600 bytes). */
static uint32_t ack_read(int fd, char *msg)
{
	uint32_t h[3];

	assert_true(fd_read(fd, h, sizeof(h)));
	assert_int_equal(le32toh(h[0]), 0x41474d56u);
	assert_true(le32toh(h[2]) < 600);
	assert_true(fd_read(fd, msg, le32toh(h[2])));
	msg[le32toh(h[2])] = 0;
	return le32toh(h[1]);
}

/* A forged source: connected to B, which listens for U1. */
struct forge {
	int fd;
	struct mig_enc enc;
};

/* HELLO and the SLICE of a final pass 0: U1 as a vgpu-512M slice of VF 1 whose RM object
 * limit is 16; B's plan is accepted. */
static void forge_start(struct fixture *f, struct forge *g)
{
	static const char def[] = "{\"definition\":{\"uuid\":\"" U1 "\",\"mdev_type\":"
		"\"vgpu-512M\",\"attrs\":[{\"rm_objects\":16}]},\"transient\":false,"
		"\"live\":{\"pass\":0,\"final\":true,\"vf\":1}}";
	char msg[600];

	listen_b(f);
	g->fd = t_connect(f->sock);
	assert_true(g->fd >= 0);
	assert_int_equal(mig_enc_init(&g->enc, enc_write, &g->fd, NULL), 0);
	assert_int_equal(mig_enc_slice(&g->enc, 512 * MiB, 4 * MiB, def, strlen(def), NULL), 0);
	assert_int_equal(ack_read(g->fd, msg), 0);
}

/* IOMMU records: @n mappings of @len bytes of DMA offset 0, one per 8 MiB from 8 GiB. */
static void forge_maps(struct forge *g, size_t n, uint64_t len)
{
	struct mig_iommu_rec *r = calloc(n, sizeof(*r));

	assert_non_null(r);
	for (size_t i = 0; i < n; i++)
		r[i] = (struct mig_iommu_rec){ (8ull << 30) + i * 8 * MiB, len, 0, 3 };
	assert_int_equal(mig_enc_iommu(&g->enc, r, n, NULL), 0);
	free(r);
}

/* END, then B's answer: its status, the message in @msg; the connection closed. */
static uint32_t forge_end(struct forge *g, char *msg)
{
	uint32_t st;

	assert_int_equal(mig_enc_end(&g->enc, NULL), 0);
	st = ack_read(g->fd, msg);
	close(g->fd);
	return st;
}

/* END, then B refuses with status @want and a message holding @why, and keeps nothing. */
static void forge_refused(struct fixture *f, struct forge *g, uint32_t want, const char *why)
{
	char msg[600];

	assert_int_equal(forge_end(g, msg), want);
	if (!strstr(msg, why))
		fail_msg("refusal: %s", msg);
	json_object_put(t_wait_migration(f->eb, "failed"));
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
}

/* A stream's IOMMU mappings are held to what the slice's guest could make itself: its DMA
 * window and one per RM object (16 here), of twice its DMA memory at most. One mapping
 * more, or more bytes, is refused before any is made and the slice discarded; at the
 * limit the slice commits. */
static void test_live_iommu_bounded(void **state)
{
	struct fixture *f = *state;
	struct forge g;
	char msg[600];

	forge_start(f, &g);
	forge_maps(&g, 17, 4096);
	forge_refused(f, &g, E2BIG, "frame 2 (iommu): 18 mappings, more than the slice's limit 17");

	forge_start(f, &g);
	forge_maps(&g, 2, 4 * MiB);
	forge_refused(f, &g, E2BIG, "frame 2 (iommu): mappings of 12582912 bytes, more than the "
		      "slice's limit 8388608");

	forge_start(f, &g);
	forge_maps(&g, 16, 4096);
	assert_int_equal(forge_end(&g, msg), 0);
	json_object_put(t_wait_migration(f->eb, "completed"));
	runs_u1(f->b);
}

/* A control area whose header fits but whose request ring does not (zeroed) is refused
 * naming the ring, not the header. */
static void test_live_control_refused(void **state)
{
	struct fixture *f = *state;
	static uint8_t ring[VF_BAR_RING_REGION];
	uint8_t hdr[VF_BAR_HDR_SIZE];
	struct forge g;
	struct stat sb;
	int fd;

	forge_start(f, &g);
	/* B's own header, as it formatted it for the incoming slice. */
	fd = t_bar_open(f->b, 1);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(pread(fd, hdr, sizeof(hdr),
			       sb.st_size - VF_BAR_CTRL_SIZE + VF_BAR_HDR_CTRL_OFF), sizeof(hdr));
	close(fd);
	assert_int_equal(mig_enc_control(&g.enc, VF_BAR_REQ_OFF, ring, sizeof(ring), NULL), 0);
	assert_int_equal(mig_enc_control(&g.enc, VF_BAR_HDR_CTRL_OFF, hdr, sizeof(hdr), NULL), 0);
	forge_refused(f, &g, EPROTO, "frame 3 (control): the source's control area does not fit "
		      "this slice: its request ring's header is not a ring");
}

/* SCHED reaches the VF only with the commit: a migration that fails after it leaves the
 * next slice on that VF no counters, and one that commits gives them to its slice. */
static void test_live_sched_at_commit(void **state)
{
	struct fixture *f = *state;
	const struct mig_sched_rec sr = { 123456789012345ull, 1, 2, 3, 4444, 5, 6 };
	struct forge g;
	char msg[600];

	forge_start(f, &g);
	assert_int_equal(mig_enc_sched(&g.enc, &sr, NULL), 0);
	g.enc.tot.frames += 5;		/* END's totals wrong: refused after SCHED was read */
	assert_int_equal(forge_end(&g, msg), EBADMSG);
	assert_non_null(strstr(msg, "totals"));
	json_object_put(t_wait_migration(f->eb, "failed"));
	t_define_start(f->b, "vgpu-512M", U2);
	assert_int_equal(t_vf_stat(f->b, 1, "sched", "preempt_timeouts"), 0);
	assert_true(t_vf_stat(f->b, 1, "sched", "run_ns") < sr.run_ns);
	assert_int_equal(T_CTL(f->b, "stop", "-u", U2), 0);
	assert_int_equal(T_CTL(f->b, "undefine", "-u", U2), 0);

	forge_start(f, &g);
	assert_int_equal(mig_enc_sched(&g.enc, &sr, NULL), 0);
	assert_int_equal(forge_end(&g, msg), 0);
	json_object_put(t_wait_migration(f->eb, "completed"));
	assert_int_equal(t_vf_stat(f->b, 1, "sched", "preempt_timeouts"), sr.preempt_timeouts);
	assert_true(t_vf_stat(f->b, 1, "sched", "run_ns") >= sr.run_ns);
}

/* A slice brought up on a VF starts with its scheduler and doorbell counters at zero,
 * whatever the slice before it there ran. */
static void test_live_sched_fresh_vf(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x12121212);
	/* Counted when the engine picked the VF, before the work it fenced. A turn's run
	 * time is booked when it ends: the channels' free waits for that. */
	assert_true(t_vf_stat(f->a, 1, "sched", "slices") > 0);
	assert_true(t_vf_stat(f->a, 1, "doorbell", "rung") > 0);
	t_vf_down(&g);
	assert_int_equal(T_CTL(f->a, "stop", "-u", U1), 0);
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
	t_define_start(f->a, "vgpu-512M", U2);
	assert_int_equal(t_vf_stat(f->a, 1, "sched", "run_ns"), 0);
	assert_int_equal(t_vf_stat(f->a, 1, "sched", "slices"), 0);
	assert_int_equal(t_vf_stat(f->a, 1, "doorbell", "rung"), 0);
	assert_int_equal(t_vf_stat(f->a, 1, "doorbell", "accepted"), 0);
}

/* A relay from A to B that gives pass 0's definition an RM object limit of @rm_objects
 * (less than A's guest holds, as if B's type gave less): frames go on whole, the SLICE
 * frame's length and CRC made again; B's answers go back as they come. */
struct relay {
	int lfd, a, b;
	int rm_objects;
	pthread_t up, down;
};

/* Pass 0's definition in the SLICE frame @fr (header included, payload @len) with the
 * limit added to its attributes: the new payload length. */
static uint32_t relay_def(const struct relay *r, uint8_t *fr, uint32_t len)
{
	json_object *o = json_tokener_parse((const char *)fr + 32), *def, *attrs, *a;
	const char *txt;
	uint32_t crc, n;

	if (!json_object_object_get_ex(o, "definition", &def) ||
	    !json_object_object_get_ex(def, "attrs", &attrs)) {
		json_object_put(o);
		return len;
	}
	a = json_object_new_object();
	json_object_object_add(a, "rm_objects", json_object_new_int(r->rm_objects));
	json_object_array_add(attrs, a);
	txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	n = (uint32_t)(16 + strlen(txt));
	memcpy(fr + 32, txt, strlen(txt));
	json_object_put(o);
	fr[4] = (uint8_t)n, fr[5] = (uint8_t)(n >> 8), fr[6] = (uint8_t)(n >> 16), fr[7] = 0;
	crc = mig_crc32c(mig_crc32c(0, fr, 12), fr + 16, n);
	for (int i = 0; i < 4; i++)
		fr[12 + i] = (uint8_t)(crc >> (8 * i));
	return n;
}

static void *relay_up(void *arg)
{
	struct relay *r = arg;
	uint8_t *fr = malloc(MIG_DEC_BUF + (64 << 10));
	bool first = true;

	while (fr && fd_read(r->a, fr, MIG_FRAME_HDR)) {
		uint32_t len = (uint32_t)fr[4] | (uint32_t)fr[5] << 8 | (uint32_t)fr[6] << 16 |
			       (uint32_t)fr[7] << 24;

		if (len > MIG_PAYLOAD_MAX || !fd_read(r->a, fr + MIG_FRAME_HDR, len))
			break;
		if (first && fr[0] == MIG_F_SLICE && !fr[1]) {
			fr[MIG_FRAME_HDR + len] = 0;
			len = relay_def(r, fr, len);
			first = false;
		}
		if (fd_write(r->b, fr, MIG_FRAME_HDR + len))
			break;
	}
	free(fr);
	shutdown(r->b, SHUT_WR);
	return NULL;
}

static void *relay_down(void *arg)
{
	struct relay *r = arg;
	uint8_t buf[4096];
	ssize_t n;

	while ((n = read(r->b, buf, sizeof(buf))) > 0)
		if (fd_write(r->a, buf, (size_t)n))
			break;
	shutdown(r->a, SHUT_WR);
	return NULL;
}

/* The relay listens at @path (A's --to). */
static void relay_listen(struct relay *r, const char *path, int rm_objects)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	r->rm_objects = rm_objects;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	r->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(r->lfd >= 0);
	assert_int_equal(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(r->lfd, 1), 0);
}

/* A connected: connect to B at @to and relay both ways. */
static void relay_run(struct relay *r, const char *to)
{
	r->a = accept(r->lfd, NULL, NULL);
	assert_true(r->a >= 0);
	r->b = t_connect(to);
	assert_true(r->b >= 0);
	assert_int_equal(pthread_create(&r->up, NULL, relay_up, r), 0);
	assert_int_equal(pthread_create(&r->down, NULL, relay_down, r), 0);
}

static void relay_stop(struct relay *r)
{
	pthread_join(r->up, NULL);
	pthread_join(r->down, NULL);
	close(r->a);
	close(r->b);
	close(r->lfd);
}

/* B refuses the final pass with one of vgpu's own codes (VGPU_EQUOTA: its RM object limit
 * is below what A's guest holds): the refusal reaches A as a refusal with its reason, so
 * A drops its record and resumes the slice (not held), and its guest works on there. */
static void test_live_refused_vgpu_code(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };
	struct relay r;
	char relay_sock[160];
	json_object *ev;

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x77777777);
	listen_b(f);
	snprintf(relay_sock, sizeof(relay_sock), "%s/relay.sock", f->a->root);
	relay_listen(&r, relay_sock, 2);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", relay_sock, "--no-wait"), 0);
	relay_run(&r, f->sock);
	ev = t_wait_migration(f->ea, "failed");
	relay_stop(&r);
	if (!strstr(jget(ev, "error"), "the destination refused: frame") ||
	    !strstr(jget(ev, "error"), "(rm-tree)") || !strstr(jget(ev, "error"), "VGPU_EQUOTA") ||
	    strstr(jget(ev, "error"), "may have committed"))
		fail_msg("A's error: %s", jget(ev, "error"));
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
	t_vf_fill(&g, 1, 1, 0x78787878);
	t_vf_down(&g);
}

static ssize_t fd_read_some(void *ctx, void *p, size_t len)
{
	ssize_t n = read(*(int *)ctx, p, len);

	return n < 0 ? -errno : n;
}

/* A fake destination: it takes every pass A sends over @fd (the plan accepted) up to the
 * final END, and answers nothing. */
static void fake_dest_take(int fd)
{
	bool final = false;

	for (unsigned int pass = 0; !final; pass++) {
		struct mig_dec dec;
		struct mig_frame fr;
		int r;

		assert_int_equal(mig_dec_init(&dec, fd_read_some, &fd, NULL), 0);
		while ((r = mig_dec_next(&dec, &fr, NULL)) > 0 && fr.type != MIG_F_END) {
			uint32_t ok[3] = { htole32(0x41474d56u), 0, 0 };

			if (fr.type != MIG_F_SLICE)
				continue;
			final = strstr(fr.u.slice.def, "\"final\":true") != NULL;
			if (!pass)
				assert_int_equal(fd_write(fd, ok, sizeof(ok)), 0);
		}
		assert_int_equal(r, 1);
		mig_dec_fini(&dec);
	}
}

/* ... and answers the final END with the ack header @h and no message. */
static void fake_dest_answer(int fd, const uint32_t h[3])
{
	fake_dest_take(fd);
	assert_int_equal(fd_write(fd, h, 12), 0);
}

/* An answer to END that is not an ack record is refused naming the field that is wrong;
 * A, which cannot know whether the destination committed, holds the slice. */
static void test_live_bad_ack(void **state)
{
	struct fixture *f = *state;
	const uint32_t h[3] = { htole32(0x41474d56u), htole32(4097), 0 };
	struct relay r;
	char sock[160];
	json_object *ev;
	int fd;

	fill_source(f);
	snprintf(sock, sizeof(sock), "%s/fake.sock", f->a->root);
	relay_listen(&r, sock, 0);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", sock, "--no-wait"), 0);
	fd = accept(r.lfd, NULL, NULL);
	assert_true(fd >= 0);
	fake_dest_answer(fd, h);
	ev = t_wait_migration(f->ea, "failed");
	if (!strstr(jget(ev, "error"), "not a vgpu migration ack: status 4097, not 0 or an "
		    "errno below 4096") || !strstr(jget(ev, "error"), "may have committed"))
		fail_msg("A's error: %s", jget(ev, "error"));
	json_object_put(ev);
	close(fd);
	close(r.lfd);
	assert_int_equal(T_CTL(f->a, "list", "-u", U1), 0);
	assert_non_null(strstr(t_out.out, "migrated-out (unconfirmed)"));
	assert_int_equal(T_CTL(f->a, "undefine", "-u", U1), 0);
}

/* ---- the destination's say: owner uid and type ---- */

/* U1 on @d has owner uid @uid: in query-slices, in its definition file, and (running) its
 * BAR object belongs to that uid. */
static void owner_is(struct tdaemon *d, long uid)
{
	char want[48], path[256], buf[4096] = { 0 }, *to = buf;
	struct stat sb;
	int fd;

	snprintf(want, sizeof(want), "\"owner_uid\": %ld", uid);
	assert_int_equal(T_CTL(d, "--json", "list", "-u", U1), 0);
	if (!strstr(t_out.out, want))
		fail_msg("no %s in: %s", want, t_out.out);
	snprintf(path, sizeof(path), "%s/slices/%s.json", d->state, U1);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	for (const char *from = buf; *from; from++)	/* as compact JSON */
		if (*from != ' ' && *from != '\n' && *from != '\t')
			*to++ = *from;
	*to = 0;
	snprintf(want, sizeof(want), "\"owner_uid\":%ld", uid);
	if (!strstr(buf, want))
		fail_msg("no %s in %s: %s", want, path, buf);
	t_bar_path(d, 1, path, sizeof(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_uid, (uid_t)uid);
}

/* B takes U1 only with the sizes of the type it names, and gives it an owner uid of its
 * own in place of A's: the slice runs on B as B's uid's, with every byte, and keeps that
 * owner across a kill -9 of B. */
static void test_live_incoming_owner_type(void **state)
{
	struct fixture *f = *state;
	struct image im;
	int fd;

	assert_int_equal(T_CTL(f->a, "define", "-t", "vgpu-512M", "-u", U1, "--owner-uid",
			       "4242"), 0);
	assert_int_equal(T_CTL(f->a, "start", "-u", U1), 0);
	fd = t_bar_open(f->a, 1);
	t_put(fd, 0, 64 << 10, 1);
	close(fd);
	image_of(f->a, &im);
	assert_int_equal(T_CTL(f->b, "migrate-incoming", "--listen", f->sock, "-u", U1, "-t",
			       "vgpu-512M", "--owner-uid", "4343"), 0);
	assert_int_equal(T_CTL(f->a, "migrate", "-u", U1, "--to", f->sock), 0);
	json_object_put(t_wait_migration(f->eb, "completed"));
	runs_u1(f->b);
	owner_is(f->b, 4343);
	image_on(f->b, &im);
	image_free(&im);
	unlisten(&f->eb);
	restart(f->b);
	runs_u1(f->b);
	owner_is(f->b, 4343);
}

/* B names a type whose sizes U1 does not have: refused at the plan naming the field and
 * both values, before anything is copied, while A's guest runs on; B keeps nothing. The
 * same with the VRAM equal but the channels not (A's slice has 8 of its own). */
static void test_live_incoming_type_refused(void **state)
{
	static const struct { const char *type, *why; } rows[] = {
		{ "vgpu-1G", "\"type\" vgpu-1G gives vram_bytes 1073741824 here, the stream's "
		  "slice (type vgpu-512M) has 536870912" },
		{ "vgpu-512M", "\"type\" vgpu-512M gives channels " },
	};
	struct fixture *f = *state;
	struct tvf g = { 0 };
	json_object *ev;

	fill_source(f);
	for (unsigned int i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		if (i)
			assert_int_equal(T_CTL(f->a, "modify", "-u", U1, "--channels", "8"), 0);
		guest_up(f, &g);
		t_vf_fill(&g, 0, 0, 0x41414141 + i);
		assert_int_equal(T_CTL(f->b, "migrate-incoming", "--listen", f->sock, "-t",
				       (char *)rows[i].type), 0);
		migrate_no_wait(f);
		ev = t_wait_migration(f->ea, "failed");
		if (!strstr(jget(ev, "error"), "the destination refused") ||
		    !strstr(jget(ev, "error"), rows[i].why))
			fail_msg("%s: A's error: %s", rows[i].type, jget(ev, "error"));
		assert_int_equal(t_get_u64(ev, "bytes"), 0);
		json_object_put(ev);
		ev = t_wait_migration(f->eb, "failed");
		assert_non_null(strstr(jget(ev, "error"), rows[i].why));
		json_object_put(ev);
		assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
		runs_u1(f->a);
		assert_null(strstr(t_out.out, "migrated-out"));
		t_vf_fill(&g, 1, 1, 0x42424242 + i);	/* the guest never stopped */
		t_vf_down(&g);
	}
}

/* migrate-incoming's "type" and "owner_uid" of the wrong kind are refused by name, and
 * nothing listens. */
static void test_live_incoming_bad_args(void **state)
{
	static const struct { const char *name, *args, *msg; } rows[] = {
		{ "owner_uid a string", "\"owner_uid\":\"4343\"",
		  "\"owner_uid\" must be an integer (a uid, or -1: root only), not a string" },
		{ "owner_uid 1.5", "\"owner_uid\":1.5", "\"owner_uid\" must be an integer" },
		{ "owner_uid -2", "\"owner_uid\":-2", "\"owner_uid\" must be a uid (0..2147483647, "
		  "or -1: root only), not -2" },
		{ "owner_uid 2^31", "\"owner_uid\":2147483648", "not 2147483648" },
		{ "type an integer", "\"type\":512", "\"type\" must be a string (a slice type), "
		  "not an integer" },
		{ "type unknown", "\"type\":\"vgpu-3M\"", "type \"vgpu-3M\" is not supported" },
		{ "owner, not owner_uid", "\"owner\":5", "unknown argument \"owner\" for "
		  "migrate-incoming" },
	};
	struct fixture *f = *state;
	struct tclient *c = t_client(f->b, true);

	for (unsigned int i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char line[512];
		json_object *rep, *err, *desc;

		snprintf(line, sizeof(line), "{\"execute\":\"migrate-incoming\",\"arguments\":"
			 "{\"listen\":\"%s\",%s}}\n", f->sock, rows[i].args);
		t_send_raw(c, line, strlen(line));
		rep = t_reply(c);
		assert_string_equal(t_err_class(rep), "InvalidArgument");
		assert_true(json_object_object_get_ex(rep, "error", &err));
		assert_true(json_object_object_get_ex(err, "desc", &desc));
		if (!strstr(json_object_get_string(desc), rows[i].msg))
			fail_msg("%s: %s", rows[i].name, json_object_get_string(desc));
		json_object_put(rep);
	}
	t_client_free(c);
	assert_int_equal(T_CTL(f->b, "migrate-incoming", "--listen", f->sock, "--owner-uid",
			       "no-such-user-here"), 2);
	assert_int_equal(T_CTL(f->b, "migrate-status"), 0);
	assert_non_null(strstr(t_out.out, "no migrations"));
}

/* ---- migrate-cancel in stop_copy ---- */

/* B stops reading (SIGSTOP) with A in its switchover and more to send than the socket
 * holds: A cannot get its final END out. A cancel there ends the wait: A resumes, its
 * guest works on with every byte, its hand-over record dropped; B, let go on, finds the
 * stream cut and keeps nothing. A "vmm" switchover makes the stop send again the 24 MiB
 * its rounds sent while waiting (B read them), more than the socket's 8 MiB. */
static void test_live_cancel_stop_copy(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };
	struct image im;
	json_object *ev;
	int fd, rc;

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x51515151);
	listen_b(f);
	migrate_vmm_waiting(f);
	fd = t_bar_open(f->a, 1);
	t_put(fd, 400 * MiB, 24 * MiB, 5);
	image_take(fd, &im);
	close(fd);
	/* A round that began after the writes reached B: A marked them to send again. */
	wait_pass(f->eb, round_of(f->a) + 2);
	assert_int_equal(kill(f->b->pid, SIGSTOP), 0);
	assert_int_equal(T_CTL(f->a, "migrate-switchover", "-u", U1), 0);
	json_object_put(t_wait_migration(f->ea, "stop_copy"));
	rc = T_CTL(f->a, "migrate-cancel", "-u", U1);
	assert_int_equal(kill(f->b->pid, SIGCONT), 0);
	assert_int_equal(rc, 0);
	ev = t_wait_migration(f->ea, "cancelled");
	assert_string_equal(jget(ev, "error"), "cancelled");
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	assert_int_equal(T_CTL(f->b, "list", "-u", U1), EXIT_NOTFOUND);
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
	image_on(f->a, &im);
	image_free(&im);
	t_vf_fill(&g, 1, 1, 0x52525252);
	t_vf_copy01(&g, 0);
	t_vf_down(&g);
	/* Nothing of the migration is left, here or in A's state. */
	restart_a(f);
	runs_u1(f->a);
	assert_null(strstr(t_out.out, "migrated-out"));
}

/* A destination that read the final END and does not answer (here a fake one that stays
 * silent on its UNIX socket): a cancel then cannot know whether it committed, so A holds
 * U1 with its VRAM and its record, as when the connection breaks after END, and keeps it
 * held across a restart. */
static void test_live_cancel_after_end(void **state)
{
	struct fixture *f = *state;
	struct relay r;
	struct image im;
	json_object *ev;
	int fd, rc;

	fill_source(f);
	image_of(f->a, &im);
	snprintf(f->sock, sizeof(f->sock), "%s/fake.sock", f->a->root);
	relay_listen(&r, f->sock, 0);
	migrate_no_wait(f);
	fd = accept(r.lfd, NULL, NULL);
	assert_true(fd >= 0);
	fake_dest_take(fd);
	rc = T_CTL(f->a, "migrate-cancel", "-u", U1);
	assert_int_equal(rc, 0);
	ev = t_wait_migration(f->ea, "cancelled");
	if (!strstr(jget(ev, "error"), "may have committed"))
		fail_msg("A's error: %s", jget(ev, "error"));
	json_object_put(ev);
	close(fd);
	close(r.lfd);
	held_here(f);
	image_on(f->a, &im);
	restart_a(f);
	held_here(f);
	image_on(f->a, &im);
	image_free(&im);
	assert_int_equal(T_CTL(f->a, "reclaim", "-u", U1), 0);
	runs_u1(f->a);
}

/* A slice whose guest announced itself carries its state, which loads only on the VF its
 * handles name: with that VF busy on B the plan refuses, before anything is copied and
 * before A stops its guest. */
static void test_live_vf_busy_refused(void **state)
{
	struct fixture *f = *state;
	struct tvf g = { 0 };
	json_object *ev;

	fill_source(f);
	guest_up(f, &g);
	t_vf_fill(&g, 0, 0, 0x31313131);
	t_define_start(f->b, "vgpu-512M", U2);	/* VF 1 on B */
	listen_b(f);
	migrate_no_wait(f);
	ev = t_wait_migration(f->ea, "failed");
	if (!strstr(jget(ev, "error"), "name VF 1, which is in use here"))
		fail_msg("A's error: %s", jget(ev, "error"));
	assert_int_equal(t_get_u64(ev, "bytes"), 0);
	json_object_put(ev);
	json_object_put(t_wait_migration(f->eb, "failed"));
	runs_u1(f->a);
	t_vf_fill(&g, 1, 1, 0x32323232);
	t_vf_down(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_live_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_round_trip_writer, setup_writer, teardown),
		cmocka_unit_test_setup_teardown(test_live_auto, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_vmm_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_guest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_reply_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_busy_guest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_peer_mode_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_vf_busy_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_refused_vgpu_code, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_bad_ack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_iommu_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_control_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_sched_at_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_sched_fresh_vf, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_cancel, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_cancel_stop_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_cancel_after_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_incoming_owner_type, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_incoming_type_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_incoming_bad_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_dest_killed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_source_killed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_corrupt, setup_corrupt, teardown),
		cmocka_unit_test_setup_teardown(test_live_tcp_keepalive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_bad_requests, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_listen_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_source_exits_committed,
						setup_exit_committed, teardown),
		cmocka_unit_test_setup_teardown(test_live_source_exits_handover,
						setup_exit_handover, teardown),
		cmocka_unit_test_setup_teardown(test_live_handover_not_durable, setup_src_sync_fail,
						teardown),
		cmocka_unit_test_setup_teardown(test_live_commit_not_durable, setup_dst_sync_fail,
						teardown),
		cmocka_unit_test_setup_teardown(test_live_commit_write_fails, setup_dst_write_fail,
						teardown),
		cmocka_unit_test_setup_teardown(test_live_unmark_write_fails_crash,
						setup_both_write_fail, teardown),
		cmocka_unit_test_setup_teardown(test_live_unmark_write_fails_clean,
						setup_both_write_fail, teardown),
		cmocka_unit_test_setup_teardown(test_live_dest_exits_committed,
						setup_dst_exit_committed, teardown),
		cmocka_unit_test_setup_teardown(test_live_held_reclaimed,
						setup_dst_exit_committed, teardown),
		cmocka_unit_test_setup_teardown(test_live_held_stopped,
						setup_dst_exit_committed, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
