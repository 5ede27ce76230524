/* SPDX-License-Identifier: MIT */
/* vgpud_fixture - a real vgpud for a test or a bench, the one way the vf_guest tests and
 * submit_bench start it: a temporary directory <prefix>-XXXXXX with run/ and state/, vgpud
 * from this program's ../../bin (VGPU_TEST_BINDIR overrides, e.g. a TSan test with rel
 * daemons) on that runtime/state dir, slices defined and started with vgpuctl, endpoints
 * <run>/vf<N>.sock. Header-only (static inline) so each user links nothing new; children die
 * with the process (PDEATHSIG), vfx_stop() and vfx_clean() remove the rest. */
#ifndef VGPU_TESTS_VGPUD_FIXTURE_H
#define VGPU_TESTS_VGPUD_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct vfx {
	/* what the user chooses before vfx_start() or vfx_daemon_start() */
	const char *vram;		/* --vram, e.g. "2G" */
	const char *max_vfs, *num_vfs;	/* --max-vfs, --num-vfs */
	const char *dma_size;		/* [pf] dma_size in a config file; NULL: no config */
	/* filled in */
	char bindir[PATH_MAX];
	char tmpdir[64], rundir[128], statedir[128];
	pid_t daemon;			/* 0 or -1: not running */
};

/* A 2 GiB device with one of two VFs enabled; [pf] dma_size @dma (NULL: vgpud's default). */
#define VFX_ONE_VF(dma) \
	((struct vfx){ .vram = "2G", .max_vfs = "2", .num_vfs = "1", .dma_size = (dma) })

/* Run @argv with stdout and stderr appended to @log; the child dies with this process. */
static inline pid_t vfx_spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);	/* nothing outlives the test */
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Exit status of @pid (128 + signal if killed), -ETIMEDOUT (then killed) after @timeout_s
 * seconds, -ECHILD if there is no such child (a failed fork must not reach kill(-1)). */
static inline int vfx_wait(pid_t pid, int timeout_s)
{
	int st;

	if (pid <= 0)
		return -ECHILD;
	for (int i = 0; i < timeout_s * 50; i++) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -ECHILD;
		usleep(20 * 1000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

/* bindir: ../../bin beside this program, or $VGPU_TEST_BINDIR. 0 or -errno. */
static inline int vfx_find_bindir(struct vfx *fx)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n < 0)
		return -errno;
	exe[n] = 0;
	snprintf(fx->bindir, sizeof(fx->bindir), "%s/../../bin", dirname(exe));
	if (getenv("VGPU_TEST_BINDIR"))
		snprintf(fx->bindir, sizeof(fx->bindir), "%s", getenv("VGPU_TEST_BINDIR"));
	return 0;
}

/* Whether bindir has an executable vgpud; its path goes to @prog either way. */
static inline bool vfx_built(const struct vfx *fx, char *prog, size_t len)
{
	if (snprintf(prog, len, "%s/vgpud", fx->bindir) >= (int)len)
		return false;		/* cut short: not a path to run */
	return !access(prog, X_OK);
}

/* The temporary directory @prefix-XXXXXX with run/ and state/. 0 or -errno (tmpdir empty). */
static inline int vfx_mkdirs(struct vfx *fx, const char *prefix)
{
	snprintf(fx->tmpdir, sizeof(fx->tmpdir), "%s-XXXXXX", prefix);
	if (!mkdtemp(fx->tmpdir)) {
		int ret = -errno;

		fx->tmpdir[0] = 0;
		return ret;
	}
	snprintf(fx->rundir, sizeof(fx->rundir), "%s/run", fx->tmpdir);
	snprintf(fx->statedir, sizeof(fx->statedir), "%s/state", fx->tmpdir);
	mkdir(fx->rundir, 0700);
	mkdir(fx->statedir, 0700);
	return 0;
}

/* Endpoint socket of VF @n (from 1) into @out. */
static inline void vfx_endpoint(const struct vfx *fx, int n, char *out, size_t len)
{
	snprintf(out, len, "%s/vf%d.sock", fx->rundir, n);
}

/* The config file vgpud reads ([pf] dma_size); 0 or -errno. */
static inline int vfx_write_conf(const struct vfx *fx, const char *conf)
{
	FILE *f = fopen(conf, "w");

	if (!f)
		return -errno;
	fprintf(f, "[pf]\ndma_size = %s\n", fx->dma_size);
	return fclose(f) ? -errno : 0;
}

/* vgpud up and listening on its control socket (10 s at most). 0, -ECHILD if it exited,
 * -ETIMEDOUT or -errno. Its log is <tmp>/vgpud.log; $VGPU_TEST_LOG sets its level. */
static inline int vfx_daemon_start(struct vfx *fx)
{
	char prog[PATH_MAX + 16], conf[PATH_MAX], log[PATH_MAX], csock[PATH_MAX];
	const char *level = getenv("VGPU_TEST_LOG") ? getenv("VGPU_TEST_LOG") : "warn";
	char *argv[] = { prog, "--runtime-dir", fx->rundir, "--state-dir", fx->statedir,
			 "--vram", (char *)fx->vram, "--max-vfs", (char *)fx->max_vfs,
			 "--num-vfs", (char *)fx->num_vfs, "--spare-vram", "256M",
			 "--log-level", (char *)level, "--config", conf, NULL };
	struct stat st;
	int ret;

	snprintf(prog, sizeof(prog), "%s/vgpud", fx->bindir);
	snprintf(conf, sizeof(conf), "%s/vgpud.conf", fx->tmpdir);
	snprintf(log, sizeof(log), "%s/vgpud.log", fx->tmpdir);
	snprintf(csock, sizeof(csock), "%s/control.sock", fx->rundir);
	if (fx->dma_size) {
		ret = vfx_write_conf(fx, conf);
		if (ret)
			return ret;
	} else {
		argv[15] = NULL;		/* drops "--config", conf: the last two */
	}
	fx->daemon = vfx_spawn(argv, log);
	if (fx->daemon < 0)
		return -errno;
	for (int i = 0; i < 500; i++) {
		if (!stat(csock, &st))
			return 0;
		if (waitpid(fx->daemon, NULL, WNOHANG) == fx->daemon) {
			fx->daemon = -1;
			return -ECHILD;
		}
		usleep(20 * 1000);
	}
	return -ETIMEDOUT;
}

/* vgpud killed (-9) and started again on the same directories, as after a crash. */
static inline int vfx_daemon_restart(struct vfx *fx)
{
	char csock[PATH_MAX];

	if (fx->daemon > 0) {
		kill(fx->daemon, SIGKILL);
		waitpid(fx->daemon, NULL, 0);
	}
	fx->daemon = -1;
	snprintf(csock, sizeof(csock), "%s/control.sock", fx->rundir);
	unlink(csock);			/* so vfx_daemon_start() waits for the new one */
	return vfx_daemon_start(fx);
}

/* vgpuctl @verb on slice @uuid (define with @type, manual start); its exit status. Its log
 * is <tmp>/vgpuctl.log. */
static inline int vfx_ctl(const struct vfx *fx, const char *verb, const char *uuid,
			  const char *type)
{
	char prog[PATH_MAX + 16], csock[PATH_MAX], log[PATH_MAX];
	char *argv[] = { prog, "--socket", csock, (char *)verb, "-u", (char *)uuid, NULL, NULL,
			 NULL, NULL };

	snprintf(prog, sizeof(prog), "%s/vgpuctl", fx->bindir);
	snprintf(csock, sizeof(csock), "%s/control.sock", fx->rundir);
	snprintf(log, sizeof(log), "%s/vgpuctl.log", fx->tmpdir);
	if (type) {
		argv[4] = "-t";
		argv[5] = (char *)type;
		argv[6] = "--manual";
		argv[7] = "-u";
		argv[8] = (char *)uuid;
	}
	return vfx_wait(vfx_spawn(argv, log), 30);
}

/* Slice @uuid of @type defined and started; 0 or nonzero (see vgpuctl.log). */
static inline int vfx_slice_up(const struct vfx *fx, const char *uuid, const char *type)
{
	return vfx_ctl(fx, "define", uuid, type) || vfx_ctl(fx, "start", uuid, NULL);
}

/* The usual start, bindir already set: vgpud built, the directory, vgpud, slice @uuid of
 * @type. 0, or -errno with the reason in @why: -ENOENT when vgpud is not built (nothing
 * made), -EIO when the slice failed; the caller stops what was started. */
static inline int vfx_start(struct vfx *fx, const char *prefix, const char *uuid,
			    const char *type, char *why, size_t wlen)
{
	char prog[PATH_MAX + 16];
	int ret;

	if (!vfx_built(fx, prog, sizeof(prog))) {
		snprintf(why, wlen, "vgpud is not built (%s)", prog);
		return -ENOENT;
	}
	ret = vfx_mkdirs(fx, prefix);
	if (ret) {
		snprintf(why, wlen, "mkdtemp %s-XXXXXX: %s", prefix, strerror(-ret));
		return ret;
	}
	ret = vfx_daemon_start(fx);
	if (ret) {
		snprintf(why, wlen, "vgpud did not come up: %s (log: %s/vgpud.log)",
			 ret == -ECHILD ? "it exited" : strerror(-ret), fx->tmpdir);
		return ret;
	}
	if (vfx_slice_up(fx, uuid, type)) {
		snprintf(why, wlen, "vgpuctl could not define and start a %s slice (log: %s/%s)",
			 type, fx->tmpdir, "vgpuctl.log");
		return -EIO;
	}
	return 0;
}

/* Stop vgpud: SIGTERM, SIGKILL after 10 s. 0, or -ETIMEDOUT when it had to be killed. */
static inline int vfx_stop(struct vfx *fx)
{
	int ret = 0;

	if (fx->daemon > 0) {
		kill(fx->daemon, SIGTERM);
		if (vfx_wait(fx->daemon, 10) == -ETIMEDOUT)
			ret = -ETIMEDOUT;
	}
	fx->daemon = -1;
	return ret;
}

/* Remove the slices' /dev/shm BAR2 objects and the temporary directory, unless
 * $VGPU_KEEP_TMP; 0, or -EIO if that failed. */
static inline int vfx_clean(struct vfx *fx)
{
	char cmd[2 * PATH_MAX];
	int ret;

	if (!fx->tmpdir[0] || getenv("VGPU_KEEP_TMP"))
		return 0;
	/* The BAR2 objects outlive a clean vgpud stop on purpose (persistence); this instance's
	 * are named in its journal. */
	snprintf(cmd, sizeof(cmd),
		 "p=$(sed -n 's/.*\"instance\":\"\\([^\"]*\\)\".*/\\1/p' '%s/journal.json' "
		 "2>/dev/null | head -1); [ -z \"$p\" ] || rm -f /dev/shm/\"$p\"-vf*; rm -rf '%s'",
		 fx->statedir, fx->tmpdir);
	ret = system(cmd) ? -EIO : 0;
	if (!ret)
		fx->tmpdir[0] = 0;	/* done: a second call is a no-op */
	return ret;
}

#if defined(cmocka_unit_test) && defined(VGPU_VF_H)
/* ---- cmocka tests of one slice: the group's daemon, the cases' VF ---------------------- */

struct vfx_group {
	struct vfx fx;
	const char *prefix, *uuid, *type;	/* temporary directory prefix; the slice */
	char sock[PATH_MAX + 16];		/* VF 1's endpoint */
	char skip_why[PATH_MAX + 64];		/* why every case skips; empty when all is up */
	struct vgpu_vf *open_vf;		/* closed by vfx_case_teardown() if a case failed */
};

static struct vfx_group vfx_group;		/* the one of this test program */

/* The group's daemon (@cfg, in @prefix-XXXXXX) and its slice @uuid of @type. */
static inline void vfx_group_init(struct vfx cfg, const char *prefix, const char *uuid,
				  const char *type)
{
	vfx_group = (struct vfx_group){ .fx = cfg, .prefix = prefix, .uuid = uuid, .type = type };
}

/* Group setup: 0 when the daemon and slice are up, or when vgpud is not built (then every
 * case skips with skip_why); -1 otherwise (the group fails). */
static inline int vfx_group_setup(void **state)
{
	struct vfx_group *g = &vfx_group;
	int ret;

	(void)state;
	if (vfx_find_bindir(&g->fx)) {
		snprintf(g->skip_why, sizeof(g->skip_why), "cannot find this program's directory");
		return -1;
	}
	ret = vfx_start(&g->fx, g->prefix, g->uuid, g->type, g->skip_why, sizeof(g->skip_why));
	vfx_endpoint(&g->fx, 1, g->sock, sizeof(g->sock));
	return ret && ret != -ENOENT ? -1 : 0;
}

/* Group teardown: vfx_stop() and vfx_clean(), saying so if the cleaning failed. */
static inline int vfx_group_teardown(void **state)
{
	(void)state;
	vfx_stop(&vfx_group.fx);
	if (vfx_clean(&vfx_group.fx))
		print_message("could not clean %s\n", vfx_group.fx.tmpdir);
	return 0;
}

/* main()'s end: @tests (an array) as one group against the daemon vfx_group_init() names. */
#define vfx_run_group(tests, cfg, prefix, uuid, type)					\
	(vfx_group_init(cfg, prefix, uuid, type),					\
	 cmocka_run_group_tests(tests, vfx_group_setup, vfx_group_teardown))

/* A case's start: skipped, with the reason, when the group has no daemon. */
static inline void vfx_skip_if_down(void)
{
	if (vfx_group.skip_why[0]) {
		print_message("skip: %s\n", vfx_group.skip_why);
		skip();
	}
}

/* vgpu_vf_open(), waiting up to 5 s while the previous case's detach is still on its way
 * through vgpud (-EBUSY); the VF is remembered for vfx_case_teardown(). */
static inline int vfx_vf_open(const struct vgpu_vf_opts *vo, struct vgpu_vf **vf)
{
	int ret = -EBUSY;

	for (int i = 0; i < 500 && (ret = vgpu_vf_open(vo, vf)) == -EBUSY; i++)
		usleep(10 * 1000);
	if (!ret)
		vfx_group.open_vf = *vf;
	return ret;
}

/* vgpu_vf_close() of a VF vfx_vf_open() opened. */
static inline void vfx_vf_close(struct vgpu_vf *vf)
{
	vgpu_vf_close(vf);
	vfx_group.open_vf = NULL;
}

/* Case teardown: closes the VF a failed case left open (its detach frees the slice for the
 * next case). */
static inline int vfx_case_teardown(void **state)
{
	(void)state;
	vfx_vf_close(vfx_group.open_vf);
	return 0;
}
#endif

#endif
