// SPDX-License-Identifier: MIT
/* vgpu-vm migrate's decisions that need no libvirt or vgpud: which slices can move (and
 * the reason named for each that cannot), the destination's domain XML (endpoint and vgpud
 * socket replaced, in libvirt's quoting, and refused when a piece is missing or the domain
 * was not launched --migratable), the destination vgpud's listen address and QEMU's stream
 * URI from a libvirt URI (refused, not cut, when too long), and the verb's usage errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "vmm_glue/vmm_glue.h"
#include "vmm_test.h"

#define SLICE	"6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70"
#define DOM	"3f1c1f4e-8d2b-4c55-9a7e-0c1d2e3f4a5b"

/* ---- which slices can move --------------------------------------------------------------- */

static const struct check_case {
	const char *name;
	bool running, attached, peer0;
	const char *master, *abi;
	int want;
	const char *says;		/* a piece of the message */
} check_cases[] = {
	{ "2.3 guest on the master socket", true, true, true, "/r/vf1.master.sock", "2.3", 0, "" },
	{ "a later minor", true, true, true, "/r/vf1.master.sock", "2.7", 0, "" },
	{ "not running", false, false, false, "", "", -EBUSY, "is not running" },
	{ "no guest", true, false, false, "/r/vf1.master.sock", "", -EBUSY, "no guest attached" },
	{ "vgpud before ABI 2.3", true, true, false, "", "", -EOPNOTSUPP, "older than ABI 2.3" },
	{ "guest in peer mode", true, true, false, "/r/vf1.master.sock", "2.3", -EOPNOTSUPP,
	  "--migratable" },
	{ "guest before 2.3 (announced nothing)", true, true, true, "/r/vf1.master.sock", "",
	  -EOPNOTSUPP, "2.2 or older" },
	{ "guest announced 2.1", true, true, true, "/r/vf1.master.sock", "2.1", -EOPNOTSUPP,
	  "speaks vGPU ABI 2.1" },
	{ "another major", true, true, true, "/r/vf1.master.sock", "3.0", -EOPNOTSUPP,
	  "speaks vGPU ABI 3.0" },
};

static void test_check(void **state)
{
	const struct check_case *c = *state;
	struct vmm_slice s = { .uuid = SLICE, .running = c->running, .attached = c->attached,
			       .guest_peer0 = c->peer0, .endpoint = "/r/vf1.sock" };
	struct cmn_fail e = { 0 };

	snprintf(s.endpoint_master, sizeof(s.endpoint_master), "%s", c->master);
	snprintf(s.guest_abi, sizeof(s.guest_abi), "%s", c->abi);
	assert_int_equal(vmm_mig_slice_check(&s, &e), c->want);
	if (c->want) {
		if (!strstr(e.msg, c->says) || !strstr(e.msg, SLICE))
			fail_msg("\"%s\" does not say \"%s\" and name the slice", e.msg, c->says);
	}
}

/* ---- the destination's XML ---------------------------------------------------------------- */

/* The parts of a migratable domain's XML as libvirt gives it back: its own elements in
 * single quotes, our metadata (libxml2's output) in double quotes. */
#define XML_HEAD "<domain type='qemu' xmlns:qemu='" VMM_QEMU_NS "'>\n  <metadata>\n" \
	"    <vgpu:vm xmlns:vgpu=\"urn:vgpu:vm:1\">\n"
#define XML_META(sock) "      <vgpu:slice uuid=\"" SLICE "\" socket=\"" sock "\"/>\n" \
	"    </vgpu:vm>\n  </metadata>\n"
#define XML_SHMEM(ep) "    <shmem name='vgpu-" SLICE "' role='master'>\n" \
	"      <model type='ivshmem-doorbell'/>\n      <server path='" ep "'/>\n    </shmem>\n"
#define XML_QEMU "  <qemu:commandline>\n    <qemu:arg value='-global'/>\n" \
	"    <qemu:arg value='" VMM_MIG_QEMU_GLOBAL "'/>\n  </qemu:commandline>\n"

static const char src_xml[] = XML_HEAD XML_META("/run/a/control.sock") "  <devices>\n"
	XML_SHMEM("/run/a/vf1.master.sock") "  </devices>\n" XML_QEMU "</domain>\n";
static const char dst_xml[] = XML_HEAD XML_META("/run/b/control.sock") "  <devices>\n"
	XML_SHMEM("/run/b/vf2.master.sock") "  </devices>\n" XML_QEMU "</domain>\n";

static const struct vmm_mig_target target = {
	.endpoint_old = "/run/a/vf1.master.sock", .endpoint_new = "/run/b/vf2.master.sock",
	.socket_old = "/run/a/control.sock", .socket_new = "/run/b/control.sock",
};

static void test_dest_xml(void **state)
{
	struct cmn_fail e = { 0 };
	char *out;

	(void)state;
	assert_int_equal(vmm_mig_dest_xml(src_xml, DOM, &target, &out, &e), 0);
	assert_string_equal(out, dst_xml);
	free(out);
}

static const struct bad_xml_case {
	const char *name, *xml;
	const char *says;
} bad_xml_cases[] = {
	{ "no master=on for QEMU (not --migratable)", XML_HEAD XML_META("/run/a/control.sock")
	  XML_SHMEM("/run/a/vf1.master.sock") "</domain>\n", "--migratable" },
	{ "another endpoint", XML_HEAD XML_META("/run/a/control.sock")
	  XML_SHMEM("/run/a/vf9.master.sock") XML_QEMU "</domain>\n", "<server path=" },
	{ "the endpoint twice", XML_HEAD XML_META("/run/a/control.sock")
	  XML_SHMEM("/run/a/vf1.master.sock") XML_SHMEM("/run/a/vf1.master.sock") XML_QEMU
	  "</domain>\n", "<server path=" },
	{ "another vgpud in the metadata", XML_HEAD XML_META("/run/c/control.sock")
	  XML_SHMEM("/run/a/vf1.master.sock") XML_QEMU "</domain>\n", "vgpud socket" },
};

static void test_dest_xml_bad(void **state)
{
	const struct bad_xml_case *c = *state;
	struct cmn_fail e = { 0 };
	char *out = (char *)1;

	assert_int_equal(vmm_mig_dest_xml(c->xml, DOM, &target, &out, &e), -EINVAL);
	assert_null(out);
	if (!strstr(e.msg, c->says))
		fail_msg("\"%s\" does not say \"%s\"", e.msg, c->says);
}

/* ---- where the destination vgpud listens, where QEMU's stream goes ------------------------- */

#define H10	"hhhhhhhhh."
#define H50	H10 H10 H10 H10 H10
#define H200	H50 H50 H50 H50
/* 253 bytes: the longest DNS name. */
#define H253	H200 H50 "org"

static const struct listen_case {
	const char *name, *uri;
	const char *listen, *stream;	/* NULL: refused with @err */
	int err;
} listen_cases[] = {
	{ "host", "qemu+tcp://10.77.0.2/system", "tcp:10.77.0.2:0", "tcp://10.77.0.2", 0 },
	{ "user and port", "qemu+tcp://root@hostb:16509/system", "tcp:hostb:0", "tcp://hostb", 0 },
	{ "IPv6", "qemu+tcp://[fd00::2]:16509/system", "tcp:[fd00::2]:0", "tcp://[fd00::2]", 0 },
	{ "query", "qemu+ssh://b.example?keyfile=/k", "tcp:b.example:0", "tcp://b.example", 0 },
	{ "a 200-character host", "qemu+tcp://" H200 "/system", "tcp:" H200 ":0",
	  "tcp://" H200, 0 },
	{ "a 253-character host", "qemu+tcp://" H253 ":16509/system", "tcp:" H253 ":0",
	  "tcp://" H253, 0 },
	{ "a host longer than any DNS name", "qemu+tcp://" H253 H50 "/system", NULL, NULL,
	  -ENAMETOOLONG },
	{ "local URI", "qemu:///system", NULL, NULL, -EINVAL },
	{ "qemu+unix", "qemu+unix:///system?socket=/run/libvirt-b/libvirt-sock", NULL, NULL,
	  -EINVAL },
	{ "no scheme", "hostb", NULL, NULL, -EINVAL },
};

/* @fn's answer for @c: in VMM_MIG_ADDR_MAX bytes, and in one byte too few (refused, not
 * cut). */
static void check_addr(const struct listen_case *c, const char *want,
		       int (*fn)(const char *uri, char *out, size_t len))
{
	char out[VMM_MIG_ADDR_MAX];

	if (!want) {
		assert_int_equal(fn(c->uri, out, sizeof(out)), c->err);
		return;
	}
	assert_int_equal(fn(c->uri, out, sizeof(out)), 0);
	assert_string_equal(out, want);
	assert_int_equal(fn(c->uri, out, strlen(want)), -ENAMETOOLONG);
	assert_int_equal(fn(c->uri, out, strlen(want) + 1), 0);
	assert_string_equal(out, want);
}

static void test_listen(void **state)
{
	const struct listen_case *c = *state;

	check_addr(c, c->listen, vmm_mig_listen_for);
	check_addr(c, c->stream, vmm_mig_stream_uri);
}

/* ---- live or paused: QEMU before 9.0 under TCG loses writes in a live copy ----------------- */

static const struct live_case {
	const char *name;
	const char *xml;
	unsigned long qemu_version;
	bool live;
} live_cases[] = {
	{ "TCG on QEMU 7.2.22", "<domain type='qemu' id='3' xmlns:qemu='" VMM_QEMU_NS "'>",
	  7002022, false },
	{ "TCG, double quotes", "<domain type=\"qemu\">", 8002001, false },
	{ "TCG on QEMU 9.0.0", "<domain type='qemu'>", 9000000, true },
	{ "TCG on QEMU 10.1.2", "<domain type='qemu'>", 10001002, true },
	{ "KVM on QEMU 7.2.22", "<domain type='kvm' id='3'>", 7002022, true },
	{ "type 'qemuX'", "<domain type='qemuX'>", 7002022, true },
	{ "type past the tag", "<domain id='1'><os type='qemu'/>", 7002022, true },
	{ "no domain", "<network/>", 7002022, true },
};

static void test_vm_live(void **state)
{
	const struct live_case *c = *state;
	char why[200] = "";

	if (vmm_mig_vm_live(c->xml, c->qemu_version, why, sizeof(why)) != c->live)
		fail_msg("%s: want %s", c->name, c->live ? "live" : "paused");
	if (c->live)
		assert_string_equal(why, "");
	else if (!strstr(why, c->qemu_version == 7002022 ? "QEMU 7.2.22 under TCG" :
			 "QEMU 8.2.1 under TCG") || !strstr(why, "vCPUs paused"))
		fail_msg("%s: \"%s\" does not say why", c->name, why);
}

/* ---- the verb's usage ------------------------------------------------------------------------ */

static const struct usage_case {
	const char *name;
	const char *argv[10];
	const char *says;
} usage_cases[] = {
	{ "no domain", { "migrate", "--to", "qemu+tcp://b/system", "--dest-socket", "/s" },
	  "one domain" },
	{ "no --to", { "migrate", "vm1", "--dest-socket", "/s" }, "--to URI" },
	{ "no --dest-socket", { "migrate", "vm1", "--to", "qemu+tcp://b/system" },
	  "--dest-socket PATH" },
	{ "--max-downtime 0", { "migrate", "vm1", "--to", "qemu+tcp://b/system", "--dest-socket",
				"/s", "--max-downtime", "0" }, "bad --max-downtime" },
	{ "--max-downtime not a number", { "migrate", "vm1", "--to", "u", "--dest-socket", "/s",
					   "--max-downtime", "1s" }, "bad --max-downtime" },
	{ "--migratable", { "migrate", "vm1", "--to", "u", "--dest-socket", "/s",
			    "--migratable" }, "takes none of" },
};

static void test_usage(void **state)
{
	const struct usage_case *c = *state;
	char *argv[12] = { "vgpu-vm" }, err[512] = "";
	int fds[2], status, argc = 1;
	ssize_t n;
	pid_t pid;

	for (int i = 0; c->argv[i]; i++)
		argv[argc++] = (char *)c->argv[i];
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 2);
		close(fds[0]);
		_exit(vmm_vm_main(argc, argv));
	}
	close(fds[1]);
	/* Up to EOF: the usage lines are several writes, and a closed pipe would kill it. */
	for (size_t got = 0; (n = read(fds[0], err + got, sizeof(err) - 1 - got)) > 0;)
		got += (size_t)n, err[got] = 0;
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), VMM_EXIT_USAGE);
	if (!strstr(err, c->says))
		fail_msg("\"%s\" does not say \"%s\"", err, c->says);
}

int main(void)
{
	struct CMUnitTest t[VGPU_ARRAY_SIZE(check_cases) + VGPU_ARRAY_SIZE(bad_xml_cases) +
			    VGPU_ARRAY_SIZE(listen_cases) + VGPU_ARRAY_SIZE(usage_cases) +
			    VGPU_ARRAY_SIZE(live_cases) + 1];
	size_t n = 0;

	VMM_T_ROWS(t, n, test_check, check_cases);
	t[n++] = (struct CMUnitTest)cmocka_unit_test(test_dest_xml);
	VMM_T_ROWS(t, n, test_dest_xml_bad, bad_xml_cases);
	VMM_T_ROWS(t, n, test_listen, listen_cases);
	VMM_T_ROWS(t, n, test_vm_live, live_cases);
	VMM_T_ROWS(t, n, test_usage, usage_cases);
	return _cmocka_run_group_tests("vmm_migrate", t, n, NULL, NULL);
}
