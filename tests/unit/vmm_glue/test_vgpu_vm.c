// SPDX-License-Identifier: MIT
/* The vgpu-vm tool against a real vgpud (started in a private dir by pf_test.h): every bad
 * argument or unusable slice gives a clear message and its exit code and changes nothing
 * (vgpud's slice list is compared before and after); dry-run and xml; and the libvirt hook
 * fed domain XML on stdin: it starts and takes a slice on "prepare begin", gives it back
 * on "release end", refuses a slice another VM owns, leaves a slice alone for a clone's
 * metadata, uses the metadata's socket only when it is a vgpud's, and leaves other
 * domains (of any size) alone. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "vgpu_vm_test.h"
#include "vmm_test.h"

#include "vmm_glue/vmm_glue.h"

#define NOSLICE	"00000000-1111-4222-8333-444444444444"
#define OTHERVM	"aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"

/* Slices of the shared daemon. */
enum { S_RUN, S_DEF, S_OWNED, S_ROOT, S_NR };
static const char *slice_uuid[S_NR] = {
	"6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",	/* running, owner uid libvirt-qemu */
	"6a3c9dd2-0002-4b6e-9f1e-6f0c2f2b9d70",	/* defined, not running */
	"6a3c9dd2-0003-4b6e-9f1e-6f0c2f2b9d70",	/* running, owned by OTHERVM */
	"6a3c9dd2-0004-4b6e-9f1e-6f0c2f2b9d70",	/* running, root only */
};

static struct tdaemon *dmn;
static char kernel[PATH_MAX];	/* any readable file QEMU's user can reach */

static struct vm_run res;
static char sock_dir[PATH_MAX];	/* links to the daemon's socket, beside its runtime dir */

/* vgpu-vm with @argv (after the program name), @in on stdin, $VGPUD_SOCKET @sock (NULL:
 * unset); the result in res. */
static void run_vm_at(const char *sock, char *const *argv, const char *in)
{
	int in_fd, out_fd, err_fd;
	pid_t pid = vm_spawn(sock, argv, &in_fd, &out_fd, &err_fd);

	/* A vgpu-vm that stops reading early must fail its case, not kill the suite. */
	signal(SIGPIPE, SIG_IGN);
	if (in && write(in_fd, in, strlen(in)) < 0)
		fprintf(stderr, "# stdin: %s\n", strerror(errno));
	close(in_fd);
	vm_finish(pid, out_fd, err_fd, &res);
}

static void run_vm(char *const *argv, const char *in)
{
	run_vm_at(dmn->sock, argv, in);
}

#define VM(...) run_vm((char *const[]){ __VA_ARGS__, NULL }, NULL)

/* vgpud's view of every slice, for "changes nothing". */
static char *slices_snapshot(void)
{
	assert_int_equal(T_CTL(dmn, "--json", "list"), 0);
	return strdup(t_out.out);
}

/* vgpud's slices are still as in @before (a slices_snapshot(), freed). */
static void assert_slices_unchanged(char *before)
{
	char *after = slices_snapshot();

	assert_string_equal(before, after);
	free(before);
	free(after);
}

/* Skip the case when vgpu-vm said it has no virt-xml-validate to check its XML with. */
static void skip_without_validator(void)
{
	if (res.rc == 2 && strstr(res.err, "virt-xml-validate is not installed"))
		skip();
}

static char *slice_owner(int s)
{
	static char vm[64];
	char *p;

	assert_int_equal(T_CTL(dmn, "--json", "list", "-u", (char *)slice_uuid[s]), 0);
	vm[0] = 0;
	p = strstr(t_out.out, "\"owner\"");
	if (p && (p = strstr(p, "\"vm\": \"")))
		snprintf(vm, sizeof(vm), "%.36s", p + 7);
	return vm;
}

static int group_setup(void **state)
{
	(void)state;
	dmn = t_daemon_new();
	if (t_daemon_start(dmn, "--vram", "4G", "--max-vfs", "4", "--num-vfs", "4",
			   "--spare-vram", "256M", NULL))
		return -1;
	for (int s = 0; s < S_NR; s++) {
		char *uid = s == S_ROOT ? "0" : "libvirt-qemu";

		if (T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", (char *)slice_uuid[s],
			  "--owner-uid", getpwnam("libvirt-qemu") ? uid : "0"))
			return -1;
		if (s != S_DEF && T_CTL(dmn, "start", "-u", (char *)slice_uuid[s]))
			return -1;
	}
	if (T_CTL(dmn, "modify", "-u", (char *)slice_uuid[S_OWNED], "--owner", OTHERVM ":2"))
		return -1;
	snprintf(kernel, sizeof(kernel), "/bin/sh");
	return 0;
}

static int group_teardown(void **state)
{
	char path[PATH_MAX];

	if (sock_dir[0]) {
		for (int i = 0; i < 2; i++) {
			snprintf(path, sizeof(path), "%s/%s/control.sock", sock_dir,
				 i ? "sym" : "hard");
			unlink(path);
			*strrchr(path, '/') = 0;
			rmdir(path);
		}
		rmdir(sock_dir);
	}
	t_daemon_free(dmn);
	return t_teardown(state);
}

/* ---- bad arguments and unusable slices ---------------------------------------------------- */

#define A(...) { __VA_ARGS__, NULL }
static const struct bad_case {
	const char *name;
	const char *argv[24];
	int rc;
	const char *msg;		/* in stderr */
} bad_cases[] = {
	{ "no verb", A("--json"), 2, "no verb given" },
	{ "unknown verb", A("boot"), 2, "unknown verb \"boot\"" },
	{ "unknown option", A("launch", "--frobnicate"), 2, "unrecognized option" },
	{ "launch without a slice", A("launch", "--kernel", "/bin/sh"), 2, "needs --slice" },
	{ "slice not a UUID", A("launch", "--slice", "vm1", "--kernel", "/bin/sh"), 2,
	  "\"vm1\" is not a slice UUID" },
	{ "memory too small", A("launch", "--memory", "10"), 2, "bad --memory \"10\"" },
	{ "memory with a unit of its own", A("launch", "--memory", "1T"), 2, "bad --memory" },
	{ "no vCPU", A("launch", "--vcpus", "0"), 2, "bad --vcpus" },
	{ "unknown accelerator", A("launch", "--accel", "xen"), 2, "bad --accel \"xen\"" },
	{ "negative timeout", A("launch", "--wait", "--timeout", "-5"), 2, "bad --timeout" },
	{ "timeout without wait", A("launch", "--timeout", "5"), 2, "--timeout goes with --wait" },
	{ "launch the mdev form", A("launch", "--mdev"), 2, "cannot start the mdev form" },
	{ "xml --persistent", A("xml", "--persistent"), 2, "xml only prints" },
	{ "bad domain UUID", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
			       "--uuid", "x", "--kernel", "/bin/sh"), 2, "--uuid \"x\" is not a UUID" },
	{ "bad domain name", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
			       "--name", "a/b", "--kernel", "/bin/sh"), 2, "domain name \"a/b\"" },
	{ "neither kernel nor disk", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70"),
	  2, "either a kernel" },
	{ "kernel and disk", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
			       "--kernel", "/bin/sh", "--disk", "/bin/sh"), 2, "either a kernel" },
	{ "kernel missing", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
			      "--kernel", "/nonexistent/vmlinux"), 3, "No such file" },
	{ "console log directory missing", A("launch", "--slice",
					     "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70", "--kernel",
					     "/bin/sh", "--console-log", "/nonexistent/c.log"), 3,
	  "its directory" },
	{ "emulator missing", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
				"--kernel", "/bin/sh", "--emulator", "/nonexistent/qemu"), 3,
	  "emulator /nonexistent/qemu: No such file" },
	{ "emulator not executable", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
				       "--kernel", "/bin/sh", "--emulator", "/etc/passwd"), 7,
	  "emulator /etc/passwd is not executable" },
	{ "positional argument", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
				   "--kernel", "/bin/sh", "vm1"), 2, "no positional argument" },
	{ "unknown slice", A("launch", "--slice", NOSLICE, "--kernel", "/bin/sh"), 3,
	  "slice " NOSLICE " is not defined" },
	{ "slice not running", A("launch", "--slice", "6a3c9dd2-0002-4b6e-9f1e-6f0c2f2b9d70",
				 "--kernel", "/bin/sh"), 4, "defined but not running" },
	{ "slice owned by another VM", A("launch", "--slice",
					 "6a3c9dd2-0003-4b6e-9f1e-6f0c2f2b9d70", "--kernel", "/bin/sh"),
	  4, "is owned by VM " OTHERVM },
	{ "slice admits only root", A("launch", "--slice", "6a3c9dd2-0004-4b6e-9f1e-6f0c2f2b9d70",
				      "--kernel", "/bin/sh"), 7, "but libvirt runs QEMU as libvirt-qemu" },
	{ "vgpud unreachable", A("--socket", "/nonexistent/control.sock", "launch", "--slice",
				 "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70", "--kernel", "/bin/sh"), 6,
	  "vgpud is not reachable at /nonexistent/control.sock" },
	{ "libvirt unreachable", A("--connect", "qemu+unix:///system?socket=/nonexistent/sock",
				   "launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
				   "--kernel", "/bin/sh"), 6, "cannot connect to libvirt" },
	{ "cmdline with a disk", A("launch", "--slice", "6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70",
				   "--disk", "/bin/sh", "--cmdline", "x"), 2, "go with --kernel" },
	{ "stop without a domain", A("stop"), 2, "stop needs one domain" },
	{ "stop an unknown domain", A("--connect", "test:///default", "stop", "no-such-vm"), 3,
	  "no domain \"no-such-vm\"" },
	{ "list with an argument", A("--connect", "test:///default", "list", "x"), 2,
	  "list takes no argument" },
	{ "hook with two arguments", A("hook", "vm1", "prepare"), 2, "hook needs NAME OP SUBOP" },
};

static void test_bad(void **state)
{
	const struct bad_case *c = *state;
	char *before = slices_snapshot();

	if (!getpwnam("libvirt-qemu") && strstr(c->msg, "libvirt runs QEMU"))
		skip();
	run_vm((char *const *)c->argv, NULL);
	if (res.rc != c->rc || !strstr(res.err, c->msg))
		fail_msg("%s: exit %d (want %d), stderr: %s", c->name, res.rc, c->rc, res.err);
	assert_slices_unchanged(before);
	assert_int_equal(res.out[0], 0);	/* nothing on stdout */
}

/* ---- what works without libvirt ----------------------------------------------------------- */

static void test_xml_validated(void **state)
{
	(void)state;
	VM("xml", "--slice", (char *)slice_uuid[S_RUN], "--kernel", kernel, "--name", "vm-a",
	   "--cmdline", "console=ttyS0 vgpu_test=vfio");
	skip_without_validator();
	assert_int_equal(res.rc, 0);
	assert_non_null(strstr(res.out, "<name>vm-a</name>"));
	assert_non_null(strstr(res.out, "<model type='ivshmem-doorbell'/>"));
	assert_non_null(strstr(res.out, "/vf1.sock'/>"));
	assert_non_null(strstr(res.out, "<vgpu:slice uuid='6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70'"));
	assert_string_equal(slice_owner(S_RUN), "");
}

static void test_xml_mdev_of_stopped_slice(void **state)
{
	(void)state;
	VM("xml", "--mdev", "--json", "--slice", (char *)slice_uuid[S_DEF], "--kernel", kernel);
	skip_without_validator();
	assert_int_equal(res.rc, 0);
	assert_non_null(strstr(res.out, "\"form\": \"mdev\""));
	assert_non_null(strstr(res.out, "type='mdev'"));
	assert_null(strstr(res.out, "<shmem"));
}

static void test_launch_dry_run(void **state)
{
	char *before = slices_snapshot();

	(void)state;
	VM("--json", "launch", "--dry-run", "--slice", (char *)slice_uuid[S_RUN], "--kernel",
	   kernel, "--connect", "qemu+unix:///system?socket=/nonexistent/sock");
	skip_without_validator();
	assert_int_equal(res.rc, 0);
	assert_non_null(strstr(res.out, "\"result\": \"would launch\""));
	assert_non_null(strstr(res.out, "\"dry_run\": true"));
	assert_non_null(strstr(res.out, "\"vf\": 1"));
	assert_slices_unchanged(before);	/* libvirt not touched, no owner set */
}

/* libvirt's test driver (in the tool's process, no QEMU) runs the whole launch: the owner
 * token is the domain's afterwards, transient or persistent. */
static const struct launch_case {
	const char *name;
	bool persistent;
} launch_cases[] = {
	{ "launch on libvirt's test driver: the slice is the domain's", false },
	{ "persistent launch on libvirt's test driver", true },
};

#define DOMB	"22222222-3333-4444-8555-666666666666"

static void test_launch_test_driver(void **state)
{
	const struct launch_case *c = *state;

	run_vm((char *const[]){ "--json", "--connect", "test:///default", "launch", "--slice",
				(char *)slice_uuid[S_RUN], "--kernel", kernel, "--uuid", DOMB,
				"--name", "vm-b", c->persistent ? "--persistent" : "--json",
				NULL }, NULL);
	skip_without_validator();
	if (res.rc)
		fail_msg("exit %d: %s", res.rc, res.err);
	assert_non_null(strstr(res.out, "\"result\": \"launched\""));
	assert_non_null(strstr(res.out, c->persistent ? "\"persistent\": true" :
			       "\"persistent\": false"));
	assert_string_equal(slice_owner(S_RUN), DOMB);
	assert_int_equal(T_CTL(dmn, "modify", "-u", (char *)slice_uuid[S_RUN], "--release-owner",
			       DOMB), 0);
	assert_string_equal(slice_owner(S_RUN), "");
}

/* A domain libvirt refuses (the test driver already has one named "test") gives the owner
 * token back. */
static void test_launch_refused(void **state)
{
	(void)state;
	VM("--connect", "test:///default", "launch", "--slice", (char *)slice_uuid[S_RUN],
	   "--kernel", kernel, "--name", "test");
	skip_without_validator();
	assert_int_equal(res.rc, 1);	/* libvirt refused: a failure, not ours to classify */
	assert_non_null(strstr(res.err, "libvirt did not start the domain"));
	assert_non_null(strstr(res.err, "already exists"));
	assert_string_equal(slice_owner(S_RUN), "");
}

/* ---- the hook ----------------------------------------------------------------------------- */

/* Domain @dom's XML with metadata for @slice on vgpud socket @sock, owner @owner_vm:@gen. */
static char *hook_xml_at(const char *slice, const char *dom, const char *owner_vm,
			 unsigned int gen, const char *sock)
{
	static char xml[2048];

	snprintf(xml, sizeof(xml),
		 "<domain type='qemu'><name>hooked</name><uuid>%s</uuid><metadata>"
		 "<vgpu:vm xmlns:vgpu='urn:vgpu:vm:1'><vgpu:slice uuid='%s' socket='%s'/>"
		 "<vgpu:owner vm='%s' generation='%u'/></vgpu:vm></metadata></domain>",
		 dom, slice, sock, owner_vm, gen);
	return xml;
}

static char *hook_xml(const char *slice, const char *dom, const char *owner_vm)
{
	return hook_xml_at(slice, dom, owner_vm, 1, dmn->sock);
}

#define DOMA	"11111111-2222-4333-8444-555555555555"

static void hook(const char *op, const char *subop, const char *xml)
{
	run_vm((char *const[]){ "hook", "hooked", (char *)op, (char *)subop, "-", NULL }, xml);
}

/* prepare begin on a stopped slice starts it and takes it; release end gives it back. */
static void test_hook_prepare_release(void **state)
{
	char *xml = hook_xml(slice_uuid[S_DEF], DOMA, DOMA);

	(void)state;
	hook("prepare", "begin", xml);
	if (res.rc)
		fail_msg("prepare: exit %d: %s", res.rc, res.err);
	assert_int_equal(T_CTL(dmn, "--json", "list", "-u", (char *)slice_uuid[S_DEF]), 0);
	assert_non_null(strstr(t_out.out, "\"state\": \"running\""));
	assert_string_equal(slice_owner(S_DEF), DOMA);
	hook("prepare", "begin", xml);			/* libvirt retries: idempotent */
	assert_int_equal(res.rc, 0);
	hook("release", "end", xml);
	assert_int_equal(res.rc, 0);
	assert_string_equal(slice_owner(S_DEF), "");
	assert_int_equal(T_CTL(dmn, "stop", "-u", (char *)slice_uuid[S_DEF]), 0);
}

static const struct hook_case {
	const char *name, *op, *subop;
	int slice;			/* -1: NOSLICE */
	const char *dom, *owner;	/* the domain's UUID, the metadata's owner VM */
	unsigned int gen;		/* the metadata's owner generation */
	int rc;
	const char *msg;		/* in stderr (info messages included) */
} hook_cases[] = {
	{ "prepare: slice owned by another VM", "prepare", "begin", S_OWNED, DOMA, DOMA, 1, 4,
	  "is owned by VM " OTHERVM " generation 2, not by domain hooked" },
	{ "prepare: unknown slice", "prepare", "begin", -1, DOMA, DOMA, 1, 3, "is not defined" },
	{ "prepare: metadata of another domain", "prepare", "begin", S_RUN, DOMA, OTHERVM, 1, 2,
	  "carries the owner token of VM " OTHERVM },
	{ "release: another VM's slice stays its", "release", "end", S_OWNED, DOMA, DOMA, 1, 4,
	  "not released" },
	/* A clone of OTHERVM (its metadata, token and all) whose start failed: libvirt still
	 * runs release end, which must leave OTHERVM's slice to OTHERVM. */
	{ "release: a clone's metadata leaves its VM's slice owned", "release", "end", S_OWNED,
	  DOMA, OTHERVM, 2, 0, "carries the owner token of VM " OTHERVM ": slice "
	  "6a3c9dd2-0003-4b6e-9f1e-6f0c2f2b9d70 is not released" },
	{ "start begin: not the hook's business", "start", "begin", S_OWNED, DOMA, DOMA, 1, 0,
	  "" },
	{ "migrate begin: not the hook's business", "migrate", "begin", -1, DOMA, DOMA, 1, 0,
	  "" },
};

static void test_hook_case(void **state)
{
	const struct hook_case *c = *state;
	char *before = slices_snapshot(), owner[64];

	snprintf(owner, sizeof(owner), "%s", slice_owner(S_OWNED));
	setenv("VGPU_LOG", "info", 1);		/* the hook's reasons for doing nothing */
	hook(c->op, c->subop, hook_xml_at(c->slice < 0 ? NOSLICE : slice_uuid[c->slice], c->dom,
					  c->owner, c->gen, dmn->sock));
	unsetenv("VGPU_LOG");
	if (res.rc != c->rc || !strstr(res.err, c->msg))
		fail_msg("%s: exit %d (want %d), stderr: %s", c->name, res.rc, c->rc, res.err);
	if (res.rc)
		assert_non_null(strstr(res.err, "vgpu hook: domain hooked: "));
	assert_string_equal(slice_owner(S_OWNED), owner);
	assert_slices_unchanged(before);
}

/* ---- the hook's vgpud socket ---------------------------------------------------------- */

enum sock_kind { SOCK_DAEMON, SOCK_HARDLINK, SOCK_SYMLINK, SOCK_DOTDOT };

/* The metadata's socket for @k: the daemon's own, or a path to it that the hook must not
 * trust (in a directory no vgpud runs in, through a symbolic link, not canonical). */
static const char *sock_path(enum sock_kind k)
{
	static char path[PATH_MAX];

	switch (k) {
	case SOCK_DAEMON:
		return dmn->sock;
	case SOCK_DOTDOT:
		snprintf(path, sizeof(path), "%s/../run/control.sock", dmn->run);
		return path;
	case SOCK_HARDLINK:
	case SOCK_SYMLINK:
		break;
	}
	if (!sock_dir[0]) {
		/* On the socket's file system: a hard link cannot leave it. */
		snprintf(sock_dir, sizeof(sock_dir), "%s/links", dmn->root);
		assert_int_equal(mkdir(sock_dir, 0755), 0);
	}
	snprintf(path, sizeof(path), "%s/%s", sock_dir, k == SOCK_HARDLINK ? "hard" : "sym");
	mkdir(path, 0755);
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "/control.sock");
	unlink(path);
	if (k == SOCK_HARDLINK)
		assert_int_equal(link(dmn->sock, path), 0);
	else
		assert_int_equal(symlink(dmn->sock, path), 0);
	return path;
}

static const struct sock_case {
	const char *name;
	enum sock_kind kind;
	int rc;			/* prepare begin of a stopped slice, no $VGPUD_SOCKET */
	const char *msg;
} sock_cases[] = {
	{ "hook: a metadata socket outside a vgpud runtime directory is refused", SOCK_HARDLINK,
	  7, "is not a vgpud runtime directory (no vgpud.lock of root" },
	{ "hook: a metadata socket through a symbolic link is refused", SOCK_SYMLINK, 7,
	  "the path goes through a symbolic link or is not canonical" },
	{ "hook: a metadata socket with '..' is refused", SOCK_DOTDOT, 7,
	  "the path goes through a symbolic link or is not canonical" },
	{ "hook: the metadata's socket of a vgpud is used", SOCK_DAEMON, 0, "" },
};

static void test_hook_socket(void **state)
{
	const struct sock_case *c = *state;
	char *before = slices_snapshot(), want[PATH_MAX + 32];
	const char *sock = sock_path(c->kind);
	char *const argv[] = { "hook", "hooked", "prepare", "begin", "-", NULL };

	run_vm_at(NULL, argv, hook_xml_at(slice_uuid[S_DEF], DOMA, DOMA, 1, sock));
	if (res.rc != c->rc || !strstr(res.err, c->msg))
		fail_msg("%s: exit %d (want %d), stderr: %s", c->name, res.rc, c->rc, res.err);
	if (c->rc) {
		snprintf(want, sizeof(want), "vgpu hook: domain hooked: vgpud socket %s refused: ",
			 sock);
		assert_non_null(strstr(res.err, want));
		assert_slices_unchanged(before);
		return;
	}
	free(before);
	assert_string_equal(slice_owner(S_DEF), DOMA);
	run_vm_at(NULL, (char *const[]){ "hook", "hooked", "release", "end", "-", NULL },
		  hook_xml_at(slice_uuid[S_DEF], DOMA, DOMA, 1, sock));
	assert_int_equal(res.rc, 0);
	assert_string_equal(slice_owner(S_DEF), "");
	assert_int_equal(T_CTL(dmn, "stop", "-u", (char *)slice_uuid[S_DEF]), 0);
}

/* ---- XML over the hook's limit -------------------------------------------------------- */

static const struct big_case {
	const char *name, *op, *subop;
	bool meta;			/* our metadata, after the limit */
	int rc;
	const char *msg;
} big_cases[] = {
	{ "hook: a domain XML of 5 MiB without vGPU metadata passes", "prepare", "begin", false,
	  0, "" },
	{ "hook: a domain XML of 5 MiB with vGPU metadata is refused, naming the limit",
	  "prepare", "begin", true, 1, "the domain XML is over the hook's limit (it must be "
	  "under 4 MiB) and has vGPU metadata (urn:vgpu:vm:1): refused" },
	{ "hook: start begin of a domain XML of 5 MiB with vGPU metadata passes", "start",
	  "begin", true, 0, "" },
};

static void test_hook_big(void **state)
{
	const struct big_case *c = *state;
	size_t pad = 5u << 20, len = pad + 4096;
	char *before = slices_snapshot(), *xml = malloc(len);
	int n;

	assert_non_null(xml);
	n = snprintf(xml, len, "<domain type='qemu'><name>hooked</name><uuid>" DOMA "</uuid>"
		     "<description>");
	memset(xml + n, 'x', pad);
	snprintf(xml + n + pad, len - n - pad, "</description>%s</domain>", !c->meta ? "" :
		 "<metadata><vgpu:vm xmlns:vgpu='urn:vgpu:vm:1'><vgpu:slice uuid='"
		 "6a3c9dd2-0002-4b6e-9f1e-6f0c2f2b9d70' socket='/run/vgpud/control.sock'/>"
		 "<vgpu:owner vm='" DOMA "'/></vgpu:vm></metadata>");
	hook(c->op, c->subop, xml);
	free(xml);
	if (res.rc != c->rc || !strstr(res.err, c->msg))
		fail_msg("%s: exit %d (want %d), stderr: %s", c->name, res.rc, c->rc, res.err);
	if (res.rc)
		assert_non_null(strstr(res.err, "vgpu hook: domain hooked: "));
	assert_slices_unchanged(before);
}

/* libvirt passes the domain name first, and a name may look like an option: everything
 * after "hook" (a leading "--" aside, which the hook script passes) is an argument, so the
 * hook still refuses another VM's slice instead of printing help and passing. */
static const struct hook_name_case {
	const char *name, *dom;
	bool dashes;			/* the script's form: hook -- NAME ... */
} hook_name_cases[] = {
	{ "hook: a domain named --help", "--help", false },
	{ "hook: a domain named -V", "-V", false },
	{ "hook: a domain named --json", "--json", false },
	{ "hook: a domain named -cfoo", "-cfoo", false },
	{ "hook -- (the script's form): a domain named --dry-run", "--dry-run", true },
	{ "hook -- (the script's form): a domain named -h", "-h", true },
};

static void test_hook_name_like_option(void **state)
{
	const struct hook_name_case *c = *state;
	char *before = slices_snapshot(), want[128];
	char *const plain[] = { "hook", (char *)c->dom, "prepare", "begin", "-", NULL };
	char *const dashed[] = { "hook", "--", (char *)c->dom, "prepare", "begin", "-", NULL };

	run_vm(c->dashes ? dashed : plain, hook_xml(slice_uuid[S_OWNED], DOMA, DOMA));
	snprintf(want, sizeof(want), "vgpu hook: domain %s: ", c->dom);
	if (res.rc != 4 || !strstr(res.err, want) || !strstr(res.err, "is owned by VM " OTHERVM))
		fail_msg("domain \"%s\": exit %d (want 4), stderr: %s", c->dom, res.rc, res.err);
	assert_slices_unchanged(before);
}

static void test_hook_foreign_domain(void **state)
{
	char *before = slices_snapshot();

	(void)state;
	hook("prepare", "begin", "<domain type='kvm'><name>other</name><devices/></domain>");
	assert_int_equal(res.rc, 0);
	hook("prepare", "begin", "");	/* not even XML: libvirt's business, not ours */
	assert_int_equal(res.rc, 2);
	assert_non_null(strstr(res.err, "not well-formed"));
	assert_slices_unchanged(before);
}

int main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test(test_xml_validated),
		cmocka_unit_test(test_xml_mdev_of_stopped_slice),
		cmocka_unit_test(test_launch_dry_run),
		cmocka_unit_test(test_launch_refused),
		cmocka_unit_test(test_hook_prepare_release),
		cmocka_unit_test(test_hook_foreign_domain),
	};
	static struct CMUnitTest tests[96];
	size_t n = 0;

	vmm_t_add(tests, &n, fixed, sizeof(fixed) / sizeof(fixed[0]));
	VMM_T_ROWS(tests, n, test_bad, bad_cases);
	VMM_T_ROWS(tests, n, test_hook_case, hook_cases);
	VMM_T_ROWS(tests, n, test_hook_name_like_option, hook_name_cases);
	VMM_T_ROWS(tests, n, test_hook_socket, sock_cases);
	VMM_T_ROWS(tests, n, test_hook_big, big_cases);
	VMM_T_ROWS(tests, n, test_launch_test_driver, launch_cases);
	return _cmocka_run_group_tests("vgpu_vm", tests, n, group_setup, group_teardown);
}
