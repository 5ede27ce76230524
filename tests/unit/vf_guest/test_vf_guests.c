// SPDX-License-Identifier: MIT
/* Four local guests at once: starts a real vgpud (../../bin/vgpud next to this binary) in a
 * temporary runtime/state dir, defines and starts 4 slices with vgpuctl, runs vgpu-vf-test on
 * each VF's endpoint in parallel, and reports one TAP point per guest plus their sum. Then
 * reset recovery twice: a guest waits while the VF is reset with vgpuctl, and while vgpud is
 * killed (-9) and restarted; each must re-attach, re-handshake and report what it lost.
 * Everything is cleaned up (daemon killed, directories removed) whatever happens. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/vf_guest/vgpud_fixture.h"

#define NR_GUESTS	4
#define NR_POINTS	(NR_GUESTS + 4)
#define GUEST_TIMEOUT_S	240

/* 4 GiB, 4 VFs enabled, one 512 MiB slice each */
static struct vfx vfx = { .vram = "4G", .max_vfs = "4", .num_vfs = "4" };

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

/* atexit: vgpud stopped, its shm objects and the directory removed whatever happened. */
static void cleanup(void)
{
	if (vfx_stop(&vfx) == -ETIMEDOUT)
		fprintf(stdout, "# vgpud did not stop on SIGTERM\n");
	if (vfx_clean(&vfx))
		fprintf(stdout, "# could not remove the slices' shm objects or %s\n", vfx.tmpdir);
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

	path_of(prog, sizeof(prog), vfx.bindir, "vgpuctl");
	path_of(sock, sizeof(sock), vfx.rundir, "control.sock");
	path_of(log, sizeof(log), vfx.tmpdir, "list.json");
	buf[0] = 0;
	if (!vfx_wait(vfx_spawn(argv, log), 30) && (f = fopen(log, "r"))) {
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

	path_of(prog, sizeof(prog), vfx.bindir, "vgpu-vf-test");
	snprintf(name, sizeof(name), "vf%d.sock", vf);
	path_of(sock, sizeof(sock), vfx.rundir, name);
	snprintf(name, sizeof(name), "reset-%s.log", how);
	path_of(log, sizeof(log), vfx.tmpdir, name);
	pid = vfx_spawn(argv, log);
	ready = wait_ready(log, pid);
	if (ready && !strcmp(how, "flr")) {
		if (vfx_ctl(&vfx, "reset", uuid, NULL))
			printf("# vgpuctl reset failed (see vgpuctl.log)\n");
	} else if (ready && vfx_daemon_restart(&vfx)) {
		printf("# vgpud did not come back\n");
	}
	r.status = vfx_wait(pid, 60);
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
	int failed = 0, skipped = 0, ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);	/* a closed reader must not skip the cleanup */
	if (vfx_find_bindir(&vfx)) {
		skip_all("cannot find this program's directory");
		return 0;
	}
	if (!vfx_built(&vfx, prog, sizeof(prog))) {
		skip_all("vgpud is not built");
		return 0;
	}
	ret = vfx_mkdirs(&vfx, "/dev/shm/vgpu-vfguests");
	if (ret) {
		printf("1..1\nnot ok 1 - mkdtemp: %s\n", strerror(-ret));
		return 1;
	}
	atexit(cleanup);
	printf("1..%d\n", NR_POINTS);
	if (vfx_daemon_start(&vfx)) {
		printf("# vgpud did not come up (log in %s/vgpud.log)\n", vfx.tmpdir);
		for (int i = 1; i <= NR_POINTS; i++)
			printf("not ok %d - point %d\n", i, i);
		return 1;
	}
	for (int i = 0; i < NR_GUESTS; i++) {
		snprintf(uuid, sizeof(uuid), "7e570000-0000-4000-8000-0000000000%02d", i + 1);
		if (vfx_slice_up(&vfx, uuid, "vgpu-512M"))
			printf("# could not define/start slice %d (see vgpuctl.log)\n", i + 1);
	}
	path_of(prog, sizeof(prog), vfx.bindir, "vgpu-vf-test");
	for (int i = 0; i < NR_GUESTS; i++) {
		char name[32];
		char *argv[] = { prog, "--socket", sock[i], NULL };

		vfx_endpoint(&vfx, i + 1, sock[i], sizeof(sock[i]));
		snprintf(name, sizeof(name), "guest%d.log", i + 1);
		path_of(log[i], sizeof(log[i]), vfx.tmpdir, name);
		pid[i] = vfx_spawn(argv, log[i]);
	}
	for (int i = 0; i < NR_GUESTS; i++) {
		res[i].status = vfx_wait(pid[i], GUEST_TIMEOUT_S);
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
