// SPDX-License-Identifier: MIT
/* SVA follows the bound PROCESS, never its pid number, against a real vgpud: a process binds
 * its address space, forks a child that keeps its VF, and exits; a victim then gets the
 * exited process's pid (forced with ns_last_pid). The child's GPU work reaches nothing of
 * the victim - reads fault, its memory stays as it was - and the binding is gone: the child
 * cannot bind again (the process that attached has exited) and UNBIND finds nothing.
 *
 * Runs in its own pid and mount namespaces (this program is their init, with its own
 * /proc, and starts vgpud there), so that only its own processes take pids and the forced
 * reuse is reliable; as root, or in a user namespace of its own when the kernel allows
 * one. Skipped, with the reason, when neither works or vgpud is not built. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/err.h"
#include "vf_guest/include/vgpu_vf.h"
#include <vgpu/gpfifo.h>
#include "tests/unit/vf_guest/vgpud_fixture.h"
#include "tests/unit/t_proc.h"

#define UUID		"7e570000-0000-4000-8000-00000000aa05"
#define M2		(2ull << 20)
#define PG		4096ull
#define LEN		(16 * PG)
#define WAIT_NS		(30ull * 1000 * 1000 * 1000)
#define VRAM_VA		(1ull << 42)

static char ns_skip[256];	/* why the namespaces could not be had; empty when they were */

/* What the child that kept the VF saw after the bound process exited. */
struct after {
	uint32_t read_code;		/* GPU copy victim memory -> VRAM: channel error code */
	uint32_t write_code;		/* GPU fill of the victim's memory */
	int32_t bind;			/* vgpu_sva_bind() */
	int32_t unbind;			/* vgpu_sva_unbind() */
};

/* The guest side, in the bound process and in its child (same VF, inherited) */
struct guest {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
};

/* Run @pb: 0, or the channel's error code (UINT32_MAX if the submit itself failed); the
 * channel is replaced after an error. */
static uint32_t g_run(struct guest *g, const struct vgpu_pb *pb)
{
	struct vgpu_channel_opts co = { 0 };
	struct vgpu_fence fe;
	uint32_t code = 0;
	uint64_t va = 0;
	int ret;

	if (pb->err || vgpu_submit(g->ch, pb->dw, pb->len, &fe))
		return UINT32_MAX;
	ret = vgpu_fence_wait(&fe, WAIT_NS);
	if (!ret)
		return 0;
	if (ret != -VGPU_ECHANERR || vgpu_channel_error(g->ch, &code, &va) != -VGPU_ECHANERR)
		return UINT32_MAX;
	vgpu_channel_destroy(g->ch);
	if (vgpu_channel_create(g->vf, g->as, &co, &g->ch))
		return UINT32_MAX;
	return code;
}

static uint32_t g_fill(struct guest *g, uint64_t va, uint64_t len, uint32_t v)
{
	uint32_t dw[32];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_fill(&pb, va, len, v);
	return g_run(g, &pb);
}

static uint32_t g_copy(struct guest *g, uint64_t src, uint64_t dst, uint64_t len)
{
	uint32_t dw[32];
	struct vgpu_pb pb;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_copy(&pb, src, dst, len);
	return g_run(g, &pb);
}

static bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

/* Open the VF, bind SVA, a channel, 2 MiB of VRAM and [mem, mem+LEN) mapped at GPU VA ==
 * CPU VA; the GPU fills @mem with 0x11 (the binding works). 0 or a step number. */
static int g_open_bound(struct guest *g, uint8_t *mem)
{
	struct vgpu_vf_opts vo = { .socket = vfx_group.sock, .quiet = true };
	struct vgpu_channel_opts co = { 0 };
	struct vgpu_mem *vram;

	if (vfx_vf_open(&vo, &g->vf))
		return 1;
	if (vgpu_sva_bind(g->vf) || vgpu_vaspace_create(g->vf, &g->as) ||
	    vgpu_channel_create(g->vf, g->as, &co, &g->ch))
		return 2;
	if (vgpu_mem_alloc(g->vf, VGPU_MEM_VRAM, M2, M2, &vram) ||
	    vgpu_va_map(g->as, VRAM_VA, vram, 0, M2, M2, 0) ||
	    vgpu_va_map_sva(g->as, (uintptr_t)mem, mem, LEN, PG, 0))
		return 3;
	if (g_fill(g, (uintptr_t)mem, LEN, 0x11111111u) || !all_bytes(mem, LEN, 0x11))
		return 4;
	return 0;
}

/* The child that keeps the VF: on @go, the attack on whatever process now has the bound
 * process's pid; the results to @res. */
static void keeper(struct guest *g, uint8_t *mem, int go, int res)
{
	struct after a;
	char c;

	if (read(go, &c, 1) != 1)
		_exit(20);
	a.read_code = g_copy(g, (uintptr_t)mem, VRAM_VA, LEN);
	a.write_code = g_fill(g, (uintptr_t)mem, LEN, 0x66666666u);
	a.bind = vgpu_sva_bind(g->vf);
	a.unbind = vgpu_sva_unbind(g->vf);
	_exit(write(res, &a, sizeof(a)) == sizeof(a) ? 0 : 21);
}

/* The process that binds, forks the keeper and exits; the keeper's pid to @out. */
static void bound_process(uint8_t *mem, int out, int go, int res)
{
	struct guest g;
	int step = g_open_bound(&g, mem);
	pid_t k;

	if (step)
		_exit(step);
	k = fork();
	if (k < 0)
		_exit(5);
	if (!k)
		keeper(&g, mem, go, res);
	/* Gone without a close: the keeper holds the VF's connections. */
	_exit(write(out, &k, sizeof(k)) == sizeof(k) ? 0 : 6);
}

/* The victim at pid @want: fills @mem with its secret 0x5e, says so on @ready, and on @go
 * exits 0 if the secret is intact, 1 if not. Its pid, or -1 after 20 tries. */
static pid_t victim_at(pid_t want, uint8_t *mem, int go[2])
{
	for (int i = 0; i < 20; i++) {
		int ready[2];
		pid_t v;
		char c;

		assert_int_equal(t_next_pid_is(want), 0);
		assert_int_equal(pipe(go), 0);
		assert_int_equal(pipe(ready), 0);
		v = fork();
		assert_true(v >= 0);
		if (!v) {
			memset(mem, 0x5e, LEN);
			if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
				_exit(2);
			_exit(all_bytes(mem, LEN, 0x5e) ? 0 : 1);
		}
		close(go[0]);
		close(ready[1]);
		assert_int_equal(read(ready[0], &c, 1), 1);
		close(ready[0]);
		if (v == want)
			return v;
		close(go[1]);			/* another process took it: again */
		assert_int_equal(waitpid(v, NULL, 0), v);
	}
	return -1;
}

static int exit_status(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_pid_reuse(void **state)
{
	uint8_t *mem;
	int kout[2], kgo[2], kres[2], vgo[2], ret;
	pid_t bound, keep, victim;
	struct after a;

	(void)state;
	if (ns_skip[0]) {
		print_message("skip: %s\n", ns_skip);
		skip();
	}
	vfx_skip_if_down();
	ret = t_next_pid_is(2);
	if (ret) {
		print_message("skip: cannot write ns_last_pid: %s\n", strerror(-ret));
		skip();
	}
	/* mapped before the forks: the same address in all three processes */
	mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(mem != MAP_FAILED);
	memset(mem, 0, LEN);
	assert_int_equal(pipe(kout), 0);
	assert_int_equal(pipe(kgo), 0);
	assert_int_equal(pipe(kres), 0);
	bound = fork();
	assert_true(bound >= 0);
	if (!bound)
		bound_process(mem, kout[1], kgo[0], kres[1]);
	close(kgo[0]);
	close(kres[1]);
	close(kout[1]);
	assert_int_equal(exit_status(bound), 0);	/* bound, forked, exited, reaped */
	assert_int_equal(read(kout[0], &keep, sizeof(keep)), sizeof(keep));
	victim = victim_at(bound, mem, vgo);
	if (victim < 0)
		fail_msg("pid %d could not be given to the victim in 20 tries", (int)bound);
	/* the keeper's GPU work, now that the bound pid is the victim's */
	assert_int_equal(write(kgo[1], "g", 1), 1);
	assert_int_equal(read(kres[0], &a, sizeof(a)), sizeof(a));
	assert_int_equal(exit_status(keep), 0);		/* reparented to us, the init */
	assert_int_equal(write(vgo[1], "g", 1), 1);
	print_message("pid %d: victim; keeper read %u, write %u, bind %d, unbind %d\n",
		      (int)victim, a.read_code, a.write_code, a.bind, a.unbind);
	assert_int_equal(exit_status(victim), 0);	/* its secret is unchanged */
	assert_int_equal(a.read_code, VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(a.write_code, VGPU_CHAN_ERR_IOMMU_FAULT);
	assert_int_equal(a.bind, -ESRCH);		/* the attached process has exited */
	assert_int_equal(a.unbind, -ENOENT);		/* the binding was dropped */
	munmap(mem, LEN);
}

/* uid/gid 0 inside a new user namespace are the caller's @uid/@gid outside. */
static int map_ids(uid_t uid, gid_t gid)
{
	char s[64];
	int fd, n, bad = 0;
	const char *files[] = { "/proc/self/setgroups", "/proc/self/uid_map", "/proc/self/gid_map" };

	for (int i = 0; i < 3; i++) {
		n = i == 0 ? snprintf(s, sizeof(s), "deny") :
			     snprintf(s, sizeof(s), "0 %u 1", i == 1 ? (unsigned int)uid :
						  (unsigned int)gid);
		fd = open(files[i], O_WRONLY | O_CLOEXEC);
		bad |= fd < 0 || write(fd, s, (size_t)n) != n;
		if (fd >= 0)
			close(fd);
	}
	return bad ? -EPERM : 0;
}

/* New pid and mount namespaces (and a user namespace unless root): 0, or -errno with the
 * reason in ns_skip. */
static int enter_namespaces(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	int flags = CLONE_NEWPID | CLONE_NEWNS | (uid ? CLONE_NEWUSER : 0);

	if (unshare(flags)) {
		snprintf(ns_skip, sizeof(ns_skip), "unshare (pid, mount%s namespaces): %s",
			 uid ? ", user" : "", strerror(errno));
		return -errno;
	}
	if (uid && map_ids(uid, gid)) {
		snprintf(ns_skip, sizeof(ns_skip), "cannot map ids in the user namespace");
		return -EPERM;
	}
	return 0;
}

/* In the new pid namespace, as its init: a /proc of this namespace (vgpud reads
 * /proc/PID/... by the pids it sees). */
static void init_proc(void)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
		snprintf(ns_skip, sizeof(ns_skip), "mount /proc in the new namespaces: %s",
			 strerror(errno));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_pid_reuse, vfx_case_teardown),
	};
	pid_t init;
	int st;

	if (!enter_namespaces()) {
		init = fork();
		if (init < 0)
			return 1;
		if (init) {
			/* Everything else runs in the namespace; its end ends them all. _exit: a
			 * leak check at exit would fork its tracer into the namespace, where this
			 * process is invisible, and fail. */
			if (waitpid(init, &st, 0) != init)
				_exit(1);
			_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		}
		init_proc();
	}
	return vfx_run_group(tests, VFX_ONE_VF("32M"), "/dev/shm/vgpu-sva-pid", UUID, "vgpu-512M");
}
