// SPDX-License-Identifier: MIT
/* A guest holds the very open file descriptions of its eventfd vectors that vgpud reads and
 * writes (SCM_RIGHTS passes the description, not a copy), so it can clear their O_NONBLOCK
 * and keep a counter empty or full. None of that may make a thread of vgpud wait for the
 * guest: with a real vgpud and a raw guest on VF 1,
 *  - a blocking mailbox kick vector, read by VF 1's service thread under its lock after a
 *    wake-up with nothing in it, then a detach (which takes that lock on the loop thread);
 *  - a full, blocking mailbox reply vector, written under the same lock, then a reset;
 *  - a full, blocking event vector, written by the loop thread when a reset posts its event;
 *  - the event vector towards vgpud (the loop reads it after its poll) and the kick vector
 *    (the device's own eventfd: the engines read it after their epoll), both made blocking
 *    and drained by the guest in a race with those reads;
 *  - every vector towards vgpud kept at the largest count: each is drained, no poll stays hot.
 * After each, vgpuctl answers, VF 2's guest is served, VF 1 resets and serves a guest again.
 * A thread of vgpud asleep in an eventfd wait is seen in /proc (wchan do_wait_intr*), which
 * only a wait on a guest can be here. Checks are on states and counts, never on time; a
 * vgpud whose loop hangs fails the next vgpuctl (its 30 s reply limit). */
#include <dirent.h>
#include <sched.h>

#include "pf_test.h"

#define U1		"11111111-1111-4111-8111-111111111111"
#define U2		"22222222-2222-4222-8222-222222222222"
#define FULL		0xfffffffffffffffeull	/* the largest count an eventfd holds */
#define RACE_WRITES	2000u			/* the guest's writes against its own drainer */

static struct tdaemon *dmn;

static int setup(void **state)
{
	(void)state;
	return t_setup_two_vfs(&dmn, U1, U2);
}

static void attach(unsigned int vf, struct tguest *g)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/vf%u.sock", dmn->run, vf);
	assert_int_equal(t_guest_attach(path, g), 0);
}

/* What the guest can do to any description it holds. */
static void make_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	assert_true(fl >= 0);
	assert_int_equal(fcntl(fd, F_SETFL, fl & ~O_NONBLOCK), 0);
}

static void fill(int fd)
{
	uint64_t full = FULL;

	assert_int_equal(write(fd, &full, sizeof(full)), (ssize_t)sizeof(full));
}

/* Whether a thread of @pid sleeps in an eventfd read or write. */
static bool eventfd_sleeper(pid_t pid)
{
	char path[64], wchan[64];
	struct dirent *e;
	bool found = false;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while (!found && (e = readdir(dir))) {
		char file[384];
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s/wchan", path, e->d_name);
		f = fopen(file, "r");
		if (!f)
			continue;	/* a thread that has just ended */
		found = fgets(wchan, sizeof(wchan), f) && !strncmp(wchan, "do_wait_intr", 12);
		fclose(f);
	}
	closedir(dir);
	return found;
}

/* The daemon serves: vgpuctl answers, VF 2's guest gets its ping answered, VF 1 resets (the
 * loop takes VF 1's service lock) and a new guest of VF 1 is served. */
static void assert_serving(void)
{
	struct tguest g;

	assert_int_equal(T_CTL(dmn, "list"), 0);
	attach(2, &g);
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "vf2", 3, NULL, 0, NULL), 0);
	t_guest_detach(&g);
	t_wait_attached(dmn, U1, false);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	attach(1, &g);
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "vf1", 3, NULL, 0, NULL), 0);
	t_guest_detach(&g);
}

/* The reply to the ping with @seq, taken from the ring without its vector. */
static void await_reply(struct tguest *g, uint32_t seq)
{
	uint8_t slot[VF_MBOX_SLOT_SIZE];
	const struct vf_msg *m = (const struct vf_msg *)slot;

	while (cmn_ring_pop(&g->rsp, slot) == -EAGAIN)
		usleep(1000);
	assert_int_equal(m->seq, seq);
	assert_int_equal(m->type, VF_MSG_PING);
	assert_int_equal(m->status, 0);
}

/* 1a, the read: VF 1's service thread reads the kick vector under its lock after every
 * wake-up; a reset wakes it with the vector empty and blocking. The detach then takes that
 * lock on the loop thread. */
static void test_blocking_kick_vector_then_detach(void **state)
{
	struct tguest g;

	(void)state;
	attach(1, &g);
	make_blocking(g.to_host[VF_VEC_MBOX]);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	t_guest_detach(&g);
	assert_serving();
}

/* 1a, the write: the reply vector full and blocking; the reply still reaches the ring, the
 * reset that takes the service lock completes, and the next reply reaches the ring too. */
static void test_full_reply_vector(void **state)
{
	struct tguest g;

	(void)state;
	attach(1, &g);
	make_blocking(g.to_guest[VF_VEC_MBOX]);
	fill(g.to_guest[VF_VEC_MBOX]);
	t_guest_post(&g, VF_MSG_PING, "a", 1);
	await_reply(&g, g.seq);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	assert_int_equal(cmn_ring_attach(&g.req, g.bar + g.hdr->req_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_attach(&g.rsp, g.bar + g.hdr->rsp_off, VF_BAR_RING_REGION), 0);
	t_guest_post(&g, VF_MSG_PING, "b", 1);
	await_reply(&g, g.seq);
	t_guest_detach(&g);
	assert_serving();
}

/* 1b, the write: the event vector full and blocking when a reset posts VF_EVT_RESET from
 * the loop thread. The event is in the ring; later resets do not wait either. */
static void test_full_event_vector(void **state)
{
	struct vf_event ev;
	struct tguest g;

	(void)state;
	attach(1, &g);
	make_blocking(g.to_guest[VF_VEC_EVENT]);
	fill(g.to_guest[VF_VEC_EVENT]);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	assert_int_equal(cmn_ring_attach(&g.evt, g.bar + g.hdr->evt_off, VF_BAR_RING_REGION), 0);
	assert_int_equal(cmn_ring_pop(&g.evt, &ev), 0);
	assert_int_equal(ev.type, VF_EVT_RESET);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	t_guest_detach(&g);
	assert_serving();
	/* A new attachment's event vector is signalled again. */
	attach(1, &g);
	assert_int_equal(T_CTL(dmn, "reset", "1"), 0);
	assert_int_equal(t_guest_wait(&g, VF_VEC_EVENT), 0);
	t_guest_detach(&g);
}

/* The guest makes @fd blocking and drains it in a process of its own while it writes it:
 * vgpud's read after its poll finds the counter drained. Whether a vgpud thread sleeps in
 * an eventfd wait meanwhile or once the guest stops writing. */
static bool race_own_drainer(int fd)
{
	uint64_t one = 1, v;
	bool stuck = false;
	pid_t drainer;

	make_blocking(fd);
	drainer = fork();
	assert_true(drainer >= 0);
	if (!drainer) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		/* Woken with vgpud's poll, it races vgpud's read (one asleep in a read of
		 * its own would take every count before vgpud's poll even returned). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;)
			if (poll(&p, 1, -1) == 1 && read(fd, &v, sizeof(v)) < 0 && errno != EINTR)
				_exit(1);
	}
	for (unsigned int i = 0; i < RACE_WRITES && !stuck; i++) {
		assert_int_equal(write(fd, &one, sizeof(one)), (ssize_t)sizeof(one));
		usleep(200);	/* the CPUs to the two readers: a stimulus, not a measure */
		stuck = eventfd_sleeper(dmn->pid);
	}
	kill(drainer, SIGKILL);
	waitpid(drainer, NULL, 0);
	return stuck || eventfd_sleeper(dmn->pid);
}

/* 1b, the read: the event vector towards vgpud, which the loop thread reads. */
static void test_drained_event_vector(void **state)
{
	struct tguest g;

	(void)state;
	attach(1, &g);
	if (race_own_drainer(g.to_host[VF_VEC_EVENT]))
		fail_msg("a thread of vgpud waits in a read of the guest's event vector");
	t_guest_detach(&g);
	assert_serving();
}

/* 1c: the kick vector, the device's own eventfd, which every engine thread reads. */
static void test_drained_kick_vector(void **state)
{
	struct tguest g;

	(void)state;
	attach(1, &g);
	if (race_own_drainer(g.to_host[VF_VEC_GPU]))
		fail_msg("a thread of vgpud (an engine) waits in a read of its kick vector");
	t_guest_detach(&g);
	assert_serving();
}

/* Whether @fd's counter is 0 now. */
static bool drained(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	assert_true(poll(&p, 1, 0) >= 0);
	return !(p.revents & POLLIN);
}

/* Every vector towards vgpud at the largest count, blocking: vgpud drains each (the
 * service thread, the loop, the engines), so none of their level-triggered polls stays
 * readable, and the mailbox serves on. */
static void test_full_host_vectors(void **state)
{
	struct tguest g;

	(void)state;
	attach(1, &g);
	for (unsigned int v = 0; v < VF_NR_VECTORS; v++) {
		make_blocking(g.to_host[v]);
		fill(g.to_host[v]);
	}
	for (unsigned int v = 0; v < VF_NR_VECTORS; v++)
		while (!drained(g.to_host[v]))
			usleep(1000);
	assert_int_equal(t_guest_call(&g, VF_MSG_PING, "on", 2, NULL, 0, NULL), 0);
	t_guest_detach(&g);
	assert_serving();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_blocking_kick_vector_then_detach, setup,
						t_teardown),
		cmocka_unit_test_setup_teardown(test_full_reply_vector, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_full_event_vector, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_drained_event_vector, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_drained_kick_vector, setup, t_teardown),
		cmocka_unit_test_setup_teardown(test_full_host_vectors, setup, t_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
