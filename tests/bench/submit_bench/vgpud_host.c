/* vgpud_host - submit_bench's whole-stack host: a real vgpud with one slice (vgpud_host.h).
 * Started the way the vf_guest tests start it (tests/unit/vf_guest/test_vf_guests.c): a
 * temporary directory with run/ and state/, vgpud with a 2 GiB device and one enabled VF,
 * vgpuctl define + start, the endpoint <run>/vf1.sock. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/bench/submit_bench/vgpud_host.h"

#define VH_UUID		"5b0b0000-0000-4000-8000-0000000000b1"
#define VH_PATH		4096

static char vh_bindir[VH_PATH], vh_tmp[64], vh_run[128], vh_state[128];
static pid_t vh_daemon = -1;

/* Run @argv with stdout and stderr appended to @log; the child dies with this process. */
static pid_t vh_spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);	/* nothing outlives the bench */
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

/* Exit status of @pid, or -ETIMEDOUT (then killed) after @timeout_s seconds. */
static int vh_wait(pid_t pid, int timeout_s)
{
	int st;

	if (pid < 0)
		return -errno;
	for (int i = 0; i < timeout_s * 50; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(20 * 1000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

/* vgpuctl @verb on the bench's slice (define with @type); its exit status. */
static int vh_ctl(const char *verb, const char *type)
{
	char prog[VH_PATH + 16], csock[VH_PATH], log[VH_PATH];
	char *argv[] = { prog, "--socket", csock, (char *)verb, "-u", VH_UUID, NULL, NULL, NULL,
			 NULL };

	snprintf(prog, sizeof(prog), "%s/vgpuctl", vh_bindir);
	snprintf(csock, sizeof(csock), "%s/control.sock", vh_run);
	snprintf(log, sizeof(log), "%s/vgpuctl.log", vh_tmp);
	if (type) {
		argv[4] = "-t";
		argv[5] = (char *)type;
		argv[6] = "--manual";
		argv[7] = "-u";
		argv[8] = VH_UUID;
	}
	return vh_wait(vh_spawn(argv, log), 30);
}

/* vgpud up and listening on its control socket (10 s at most). */
static int vh_daemon_start(void)
{
	char prog[VH_PATH + 16], log[VH_PATH], csock[VH_PATH];
	char *argv[] = { prog, "--runtime-dir", vh_run, "--state-dir", vh_state, "--vram", "2G",
			 "--max-vfs", "2", "--num-vfs", "1", "--spare-vram", "256M",
			 "--log-level", "warn", NULL };
	struct stat st;

	snprintf(prog, sizeof(prog), "%s/vgpud", vh_bindir);
	snprintf(log, sizeof(log), "%s/vgpud.log", vh_tmp);
	snprintf(csock, sizeof(csock), "%s/control.sock", vh_run);
	if (access(prog, X_OK))
		return -ENOENT;
	vh_daemon = vh_spawn(argv, log);
	if (vh_daemon < 0)
		return -errno;
	for (int i = 0; i < 500; i++) {
		if (!stat(csock, &st))
			return 0;
		if (waitpid(vh_daemon, NULL, WNOHANG) == vh_daemon) {
			vh_daemon = -1;
			return -ECHILD;
		}
		usleep(20 * 1000);
	}
	return -ETIMEDOUT;
}

/* The last lines of the temporary directory's @name to stderr (the directory goes away). */
static void vh_dump_log(const char *name)
{
	char cmd[2 * VH_PATH];

	snprintf(cmd, sizeof(cmd),
		 "f='%s/%s'; [ ! -s \"$f\" ] || { echo \"== $f\"; tail -n 20 \"$f\"; } >&2",
		 vh_tmp, name);
	if (system(cmd))
		fprintf(stderr, "submit_bench: could not show %s\n", name);
}

int vgpud_host_start(const char *bindir, const char *type, char *sock, size_t len, char *why,
		     size_t wlen)
{
	int ret;

	snprintf(vh_bindir, sizeof(vh_bindir), "%s", bindir);
	strcpy(vh_tmp, "/tmp/vgpu-submit-bench-XXXXXX");
	if (!mkdtemp(vh_tmp)) {
		ret = -errno;
		snprintf(why, wlen, "mkdtemp %s: %s", vh_tmp, strerror(errno));
		vh_tmp[0] = 0;
		return ret;
	}
	snprintf(vh_run, sizeof(vh_run), "%s/run", vh_tmp);
	snprintf(vh_state, sizeof(vh_state), "%s/state", vh_tmp);
	mkdir(vh_run, 0700);
	mkdir(vh_state, 0700);
	ret = vh_daemon_start();
	if (ret == -ENOENT) {
		snprintf(why, wlen, "no vgpud in %s (build it, or use --host inproc)", bindir);
		goto fail;
	}
	if (ret) {
		snprintf(why, wlen, "vgpud did not come up: %s (its log is above)",
			 ret == -ECHILD ? "it exited" : strerror(-ret));
		goto fail;
	}
	if (vh_ctl("define", type) || vh_ctl("start", NULL)) {
		ret = -EIO;
		snprintf(why, wlen, "vgpuctl could not define and start a %s slice (logs above)",
			 type);
		goto fail;
	}
	snprintf(sock, len, "%s/vf1.sock", vh_run);
	return 0;
fail:
	vh_dump_log("vgpud.log");
	vh_dump_log("vgpuctl.log");
	vgpud_host_stop();
	return ret;
}

void vgpud_host_stop(void)
{
	char cmd[3 * VH_PATH];

	if (vh_daemon > 0) {
		kill(vh_daemon, SIGTERM);
		if (vh_wait(vh_daemon, 10) == -ETIMEDOUT)
			fprintf(stderr, "submit_bench: vgpud did not stop on SIGTERM (killed)\n");
		vh_daemon = -1;
	}
	if (!vh_tmp[0] || getenv("VGPU_KEEP_TMP"))
		return;
	/* The slice's BAR2 object outlives a clean vgpud stop on purpose (persistence); this
	 * instance's objects are named in its journal. */
	snprintf(cmd, sizeof(cmd),
		 "p=$(sed -n 's/.*\"instance\":\"\\([^\"]*\\)\".*/\\1/p' '%s/journal.json' "
		 "2>/dev/null | head -1); [ -z \"$p\" ] || rm -f /dev/shm/\"$p\"-vf*; rm -rf '%s'",
		 vh_state, vh_tmp);
	if (system(cmd))
		fprintf(stderr, "submit_bench: could not remove %s\n", vh_tmp);
	vh_tmp[0] = 0;
}
