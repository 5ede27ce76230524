/* Four local guests at once: starts a real vgpud (../../bin/vgpud next to this binary) in a
 * temporary runtime/state dir, defines and starts 4 slices with vgpuctl, runs vgpu-vf-test on
 * each VF's endpoint in parallel, and reports one TAP point per guest plus their sum. Then
 * reset recovery twice: a guest waits while the VF is reset with vgpuctl, and while vgpud is
 * killed (-9) and restarted; each must re-attach, re-handshake and report what it lost.
 * Everything is cleaned up (daemon killed, directories removed) whatever happens. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NR_GUESTS	4
#define NR_POINTS	(NR_GUESTS + 4)
#define GUEST_TIMEOUT_S	240

static char bindir[PATH_MAX], tmpdir[64], rundir[PATH_MAX], statedir[PATH_MAX];
static pid_t daemon_pid = -1;

/* @dir/@name into @out (paths here are short: a truncated one just fails to open). */
static void path_of(char *out, size_t len, const char *dir, const char *name)
{
	size_t d = strnlen(dir, len - 1);

	memcpy(out, dir, d);
	out[d] = 0;
	if (d + 1 < len) {
		out[d] = '/';
		out[d + 1] = 0;
		strncat(out, name, len - d - 2);
	}
}

static int find_bindir(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n < 0)
		return -errno;
	exe[n] = 0;
	snprintf(bindir, sizeof(bindir), "%s/../../bin", dirname(exe));
	return 0;
}

/* Run @argv with stdout/stderr to @log (or inherited if NULL); returns the pid. */
static pid_t spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();

	if (pid == 0) {
		/* Nothing outlives the harness, even if it is killed before its cleanup. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
				close(fd);
			}
		}
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static int wait_exit(pid_t pid, int timeout_s)
{
	time_t end = time(NULL) + timeout_s;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -1;
		if (time(NULL) >= end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -ETIMEDOUT;
		}
		usleep(20 * 1000);
	}
}

/* vgpuctl with the test's control socket; 0 on exit status 0. */
static int ctl(const char *verb, const char *uuid, const char *type)
{
	char prog[PATH_MAX], sock[PATH_MAX], log[PATH_MAX];
	char *argv[12];
	int n = 0;

	path_of(prog, sizeof(prog), bindir, "vgpuctl");
	path_of(sock, sizeof(sock), rundir, "control.sock");
	path_of(log, sizeof(log), tmpdir, "vgpuctl.log");
	argv[n++] = prog;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = (char *)verb;
	if (type) {
		argv[n++] = "-t";
		argv[n++] = (char *)type;
		argv[n++] = "--manual";
	}
	argv[n++] = "-u";
	argv[n++] = (char *)uuid;
	argv[n] = NULL;
	return wait_exit(spawn(argv, log), 30);
}

static int start_daemon(void)
{
	char prog[PATH_MAX], log[PATH_MAX], sock[PATH_MAX];
	char *argv[] = { prog, "--runtime-dir", rundir, "--state-dir", statedir, "--vram", "4G",
			 "--max-vfs", "4", "--num-vfs", "4", "--spare-vram", "256M",
			 "--log-level", "warn", NULL };
	struct stat st;

	path_of(prog, sizeof(prog), bindir, "vgpud");
	path_of(log, sizeof(log), tmpdir, "vgpud.log");
	path_of(sock, sizeof(sock), rundir, "control.sock");
	daemon_pid = spawn(argv, log);
	for (int i = 0; i < 500; i++) {
		if (stat(sock, &st) == 0)
			return 0;
		if (waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid) {
			daemon_pid = -1;
			return -ECHILD;
		}
		usleep(20 * 1000);
	}
	return -ETIMEDOUT;
}

static void cleanup(void)
{
	char cmd[PATH_MAX + 16];

	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		if (wait_exit(daemon_pid, 10) == -ETIMEDOUT)
			fprintf(stdout, "# vgpud did not stop on SIGTERM\n");
	}
	if (tmpdir[0] && !getenv("VGPU_KEEP_TMP")) {
		/* The slices' BAR2 objects outlive a clean vgpud stop on purpose (persistence);
		 * this instance's are named in its journal. */
		char shm[2 * PATH_MAX];

		snprintf(shm, sizeof(shm),
			 "p=$(sed -n 's/.*\"instance\":\"\\([^\"]*\\)\".*/\\1/p' '%s/journal.json' "
			 "2>/dev/null | head -1); [ -z \"$p\" ] || rm -f /dev/shm/\"$p\"-vf*", statedir);
		if (system(shm))
			fprintf(stdout, "# could not remove the slices' shm objects\n");
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd))
			fprintf(stdout, "# could not remove %s\n", tmpdir);
	}
}

struct guest_result {
	int status;			/* exit status, or -ETIMEDOUT */
	unsigned int pass, fail, skip;
	bool summary;			/* the closing line was found */
	char skip_why[160];		/* the first skipped case and its reason */
};

/* What a guest's run earns: passed only with every case passed; a run that skipped cases
 * (and failed none) is a skip, never a pass; anything else fails. */
enum guest_verdict { GUEST_PASS, GUEST_SKIP, GUEST_FAIL };

static enum guest_verdict guest_verdict(const struct guest_result *r)
{
	if (r->status != 0 || !r->summary || r->fail || (!r->pass && !r->skip))
		return GUEST_FAIL;
	return r->skip ? GUEST_SKIP : GUEST_PASS;
}

/* Keep "<case> (<reason>)" of the first "ok N - <case> # SKIP <reason>" line. */
static void note_skip(const char *line, struct guest_result *r)
{
	const char *name = strstr(line, " - "), *mark = strstr(line, " # SKIP");
	int len;

	if (r->skip_why[0] || strncmp(line, "ok ", 3) || !name || !mark || mark < name)
		return;
	name += 3;
	len = (int)(mark - name);
	snprintf(r->skip_why, sizeof(r->skip_why), "%.*s (%.*s)", len, name,
		 (int)strcspn(mark + 8, "\n"), mark + 8);
}

static void parse_log(const char *log, struct guest_result *r)
{
	char line[512];
	FILE *f = fopen(log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned int p, fl, s = 0;

		if (sscanf(line, "%u passed, %u failed, %u skipped", &p, &fl, &s) >= 2) {
			r->pass = p;
			r->fail = fl;
			r->skip = s;
			r->summary = true;
		}
		note_skip(line, r);
		if (!strncmp(line, "not ok", 6) || (line[0] == '#' && strstr(line, "failed")))
			fprintf(stdout, "#   %s", line);
	}
	fclose(f);
}

static void skip_all(const char *why)
{
	printf("1..%d\n", NR_POINTS);
	for (int i = 1; i <= NR_POINTS; i++)
		printf("ok %d - point %d # SKIP %s\n", i, i, why);
}

/* Wait until @log has the guest's "ready for reset" line. */
static bool wait_ready(const char *log, pid_t pid)
{
	char line[256];

	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(log, "r");
		bool ready = false;

		while (f && fgets(line, sizeof(line), f))
			ready |= strstr(line, "# ready for reset") != NULL;
		if (f)
			fclose(f);
		if (ready)
			return true;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return false;
		usleep(10 * 1000);
	}
	return false;
}

/* Reset point @n on VF @vf: a guest waits, @how resets it ("flr" or "restart"). */
/* Smallest value of "@key": N over every slice in @json (-1 if fewer than @want slices). */
static long min_count(const char *json, const char *key, int want)
{
	char pat[64];
	const char *p = json;
	long min = -1;
	int n = 0;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	while ((p = strstr(p, pat))) {
		long v = strtol(p + strlen(pat), NULL, 10);

		min = n++ ? (v < min ? v : min) : v;
		p += strlen(pat);
	}
	return n >= want ? min : -1;
}

/* The attack cases made faults and channel errors in every guest: vgpud posted them as
 * events (and forwarded the interrupts), as vgpuctl's counters show. */
static bool events_point(int n)
{
	char prog[PATH_MAX], sock[PATH_MAX], log[PATH_MAX], buf[65536];
	char *argv[] = { prog, "--socket", sock, "--json", "list", NULL };
	long faults, errors, intrs;
	size_t len = 0;
	FILE *f;

	path_of(prog, sizeof(prog), bindir, "vgpuctl");
	path_of(sock, sizeof(sock), rundir, "control.sock");
	path_of(log, sizeof(log), tmpdir, "list.json");
	buf[0] = 0;
	if (!wait_exit(spawn(argv, log), 30) && (f = fopen(log, "r"))) {
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[len] = 0;
	faults = min_count(buf, "fault_events", NR_GUESTS);
	errors = min_count(buf, "chan_error_events", NR_GUESTS);
	intrs = min_count(buf, "interrupts_forwarded", NR_GUESTS);
	printf("%s %d - fault and channel-error events posted to every guest "
	       "(least per VF: %ld faults, %ld channel errors, %ld interrupts)\n",
	       faults > 0 && errors > 0 && intrs > 0 ? "ok" : "not ok", n, faults, errors, intrs);
	return faults > 0 && errors > 0 && intrs > 0;
}

static void reset_point(int n, int vf, const char *how, const char *uuid)
{
	char prog[PATH_MAX], sock[PATH_MAX], log[PATH_MAX], name[32];
	char *argv[] = { prog, "--socket", sock, "--only", "reset recovery", "--reset-wait", "20",
			 NULL };
	struct guest_result r = { 0 };
	bool ok, ready;
	pid_t pid;

	path_of(prog, sizeof(prog), bindir, "vgpu-vf-test");
	snprintf(name, sizeof(name), "vf%d.sock", vf);
	path_of(sock, sizeof(sock), rundir, name);
	snprintf(name, sizeof(name), "reset-%s.log", how);
	path_of(log, sizeof(log), tmpdir, name);
	pid = spawn(argv, log);
	ready = wait_ready(log, pid);
	if (ready && !strcmp(how, "flr")) {
		if (ctl("reset", uuid, NULL))
			printf("# vgpuctl reset failed (see vgpuctl.log)\n");
	} else if (ready) {
		char ctlsock[PATH_MAX];

		kill(daemon_pid, SIGKILL);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = -1;
		path_of(ctlsock, sizeof(ctlsock), rundir, "control.sock");
		unlink(ctlsock);	/* so start_daemon() waits for the new one */
		if (start_daemon())
			printf("# vgpud did not come back\n");
	}
	r.status = wait_exit(pid, 60);
	parse_log(log, &r);
	ok = ready && r.status == 0 && r.summary && r.pass == 1 && r.fail == 0;
	printf("%s %d - vf%d recovers after %s: %u passed, %u failed (exit %d)\n", ok ? "ok" : "not ok",
	       n, vf, !strcmp(how, "flr") ? "a VF reset (vgpuctl reset)" : "vgpud kill -9 + restart",
	       r.pass, r.fail, r.status);
}

int main(void)
{
	char prog[PATH_MAX], sock[NR_GUESTS][PATH_MAX], log[NR_GUESTS][PATH_MAX], uuid[64];
	struct guest_result res[NR_GUESTS] = { 0 };
	pid_t pid[NR_GUESTS];
	unsigned int sum_p = 0, sum_f = 0, sum_s = 0;
	int failed = 0, skipped = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);	/* a closed reader must not skip the cleanup */
	if (find_bindir()) {
		skip_all("cannot find this program's directory");
		return 0;
	}
	path_of(prog, sizeof(prog), bindir, "vgpud");
	if (access(prog, X_OK)) {
		skip_all("vgpud is not built");
		return 0;
	}
	strcpy(tmpdir, "/tmp/vgpu-vfguests-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		printf("1..1\nnot ok 1 - mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	path_of(rundir, sizeof(rundir), tmpdir, "run");
	path_of(statedir, sizeof(statedir), tmpdir, "state");
	mkdir(rundir, 0700);
	mkdir(statedir, 0700);
	atexit(cleanup);
	printf("1..%d\n", NR_POINTS);
	if (start_daemon()) {
		printf("# vgpud did not come up (log in %s/vgpud.log)\n", tmpdir);
		for (int i = 1; i <= NR_POINTS; i++)
			printf("not ok %d - point %d\n", i, i);
		return 1;
	}
	for (int i = 0; i < NR_GUESTS; i++) {
		snprintf(uuid, sizeof(uuid), "7e570000-0000-4000-8000-0000000000%02d", i + 1);
		if (ctl("define", uuid, "vgpu-512M") || ctl("start", uuid, NULL))
			printf("# could not define/start slice %d (see vgpuctl.log)\n", i + 1);
	}
	path_of(prog, sizeof(prog), bindir, "vgpu-vf-test");
	for (int i = 0; i < NR_GUESTS; i++) {
		char name[32];
		char *argv[] = { prog, "--socket", sock[i], NULL };

		snprintf(name, sizeof(name), "vf%d.sock", i + 1);
		path_of(sock[i], sizeof(sock[i]), rundir, name);
		snprintf(name, sizeof(name), "guest%d.log", i + 1);
		path_of(log[i], sizeof(log[i]), tmpdir, name);
		pid[i] = spawn(argv, log[i]);
	}
	for (int i = 0; i < NR_GUESTS; i++) {
		res[i].status = wait_exit(pid[i], GUEST_TIMEOUT_S);
		parse_log(log[i], &res[i]);
	}
	for (int i = 0; i < NR_GUESTS; i++) {
		struct guest_result *r = &res[i];
		enum guest_verdict v = guest_verdict(r);

		printf("%s %d - guest %d on vf%d.sock: %u passed, %u failed, %u skipped (exit %d)",
		       v == GUEST_FAIL ? "not ok" : "ok", i + 1, i + 1, i + 1, r->pass, r->fail,
		       r->skip, r->status);
		if (v == GUEST_SKIP)
			printf(" # SKIP %u case(s) skipped in the guest, first: %s", r->skip,
			       r->skip_why[0] ? r->skip_why : "no reason given");
		printf("\n");
		failed += v == GUEST_FAIL;
		skipped += v == GUEST_SKIP;
		sum_p += r->pass;
		sum_f += r->fail;
		sum_s += r->skip;
	}
	/* The sum passes only if every guest passed: a skipped guest makes it a skip too. */
	printf("%s %d - 4 guests at once: %u passed, %u failed, %u skipped in total%s\n",
	       failed ? "not ok" : "ok", NR_GUESTS + 1, sum_p, sum_f, sum_s,
	       !failed && skipped ? " # SKIP guests skipped cases (see their points)" : "");
	failed += !events_point(NR_GUESTS + 2);
	snprintf(uuid, sizeof(uuid), "7e570000-0000-4000-8000-0000000000%02d", 1);
	reset_point(NR_GUESTS + 3, 1, "flr", uuid);
	reset_point(NR_GUESTS + 4, 2, "restart", NULL);
	return failed ? 1 : 0;
}
