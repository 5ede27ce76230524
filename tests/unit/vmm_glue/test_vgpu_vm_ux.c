// SPDX-License-Identifier: MIT
/* vgpu-vm as a user reads it, against a real vgpud and libvirt's test driver loaded from
 * a node file: list shows the domain's state, the slice's VF and the slice's own state in
 * separate columns (a shut-off domain whose slice has a guest says "shut off" and
 * "attached"), and no slice state for a domain whose metadata names a socket that is no
 * vgpud's; stop --json escapes a domain name with quotes and backslashes, and stop of a
 * clone (another domain's metadata) leaves that domain's slice owned; --version;
 * launch --wait reports booting, attached, running the suite and the result as each
 * happens, read from its stderr while it still runs. */
/* pf_test.h copies paths it made itself into sun_path; gcc cannot see their length. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "vgpu_vm_test.h"

#include "vmm_glue/vmm_glue.h"

#define SLICE	"6a3c9dd2-0101-4b6e-9f1e-6f0c2f2b9d70"	/* VF 1: the listed domains' */
#define SLICE2	"6a3c9dd2-0102-4b6e-9f1e-6f0c2f2b9d70"	/* VF 2: launch --wait's */
#define DOM_OFF	"33333333-4444-4555-8666-777777777777"
#define DOM_Q	"33333333-4444-4555-8666-888888888888"
#define DOM_W	"33333333-4444-4555-8666-999999999999"
#define DOM_CLONE	"33333333-4444-4555-8666-aaaaaaaaaaaa"	/* a clone of vm-off */
#define DOM_ELSE	"33333333-4444-4555-8666-bbbbbbbbbbbb"
#define QNAME	"vm \"q\" \\ x"

static struct tdaemon *dmn;
static char node_uri[PATH_MAX + 16];	/* test:///<root>/node.xml */
static char else_sock[PATH_MAX];	/* a hard link to vgpud's socket, elsewhere */

static struct vm_run res;

/* vgpu-vm with @argv (its stdin ours); the result in res. */
static void run_vm(char *const *argv)
{
	int of, ef;
	pid_t pid = vm_spawn(dmn->sock, argv, NULL, &of, &ef);

	vm_finish(pid, of, ef, &res);
}

#define VM(...) run_vm((char *const[]){ __VA_ARGS__, NULL })

/* A test-driver domain carrying vgpu-vm's metadata for SLICE on vgpud socket @sock, owner
 * VM @owner; @shutoff: runstate 5. */
static void node_domain(FILE *f, const char *name, const char *uuid, const char *owner,
			const char *sock, bool shutoff)
{
	fprintf(f, "<domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>"
		"<name>%s</name><uuid>%s</uuid><memory>65536</memory><os><type>hvm</type></os>"
		"<metadata><vgpu:vm xmlns:vgpu='urn:vgpu:vm:1'><vgpu:slice uuid='" SLICE "' "
		"socket='%s'/><vgpu:owner vm='%s' generation='0'/></vgpu:vm></metadata>%s"
		"</domain>\n", name, uuid, sock, owner,
		shutoff ? "<test:runstate>5</test:runstate>" : "");
}

static int group_setup(void **state)
{
	char path[PATH_MAX];
	FILE *f;

	(void)state;
	dmn = t_daemon_new();
	if (t_daemon_start(dmn, "--vram", "2G", "--max-vfs", "2", "--num-vfs", "2", "--spare-vram",
			   "256M", NULL))
		return -1;
	if (T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", SLICE, "--owner-uid", "0") ||
	    T_CTL(dmn, "start", "-u", SLICE) ||
	    T_CTL(dmn, "define", "-t", "vgpu-512M", "-u", SLICE2, "--owner-uid", "0") ||
	    T_CTL(dmn, "start", "-u", SLICE2))
		return -1;
	/* The same socket in a directory no vgpud runs in: no vgpud.lock there. */
	snprintf(path, sizeof(path), "%s/elsewhere", dmn->root);
	snprintf(else_sock, sizeof(else_sock), "%s/control.sock", path);
	if (mkdir(path, 0755) || link(dmn->sock, else_sock))
		return -1;
	snprintf(path, sizeof(path), "%s/node.xml", dmn->root);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "<node>\n");
	node_domain(f, "vm-off", DOM_OFF, DOM_OFF, dmn->sock, true);
	node_domain(f, "vm &quot;q&quot; \\ x", DOM_Q, DOM_Q, dmn->sock, false);
	node_domain(f, "vm-clone", DOM_CLONE, DOM_OFF, dmn->sock, false);
	node_domain(f, "vm-elsewhere", DOM_ELSE, DOM_ELSE, else_sock, false);
	fprintf(f, "</node>\n");
	fclose(f);
	snprintf(node_uri, sizeof(node_uri), "test://%s", path);
	return 0;
}

static int group_teardown(void **state)
{
	char dir[PATH_MAX];

	if (else_sock[0]) {
		unlink(else_sock);
		snprintf(dir, sizeof(dir), "%s", else_sock);
		*strrchr(dir, '/') = 0;
		rmdir(dir);
	}
	t_daemon_free(dmn);
	return t_teardown(state);
}

/* The whitespace-separated fields of the text row that starts with @name. */
static int row_fields(const char *name, char f[8][64])
{
	char *line = strstr(res.out, name), *save = NULL, *tok, buf[512];
	int n = 0;

	assert_non_null(line);
	line += strlen(name);
	snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(line, "\n"), line);
	for (tok = strtok_r(buf, " ", &save); tok && n < 8; tok = strtok_r(NULL, " ", &save))
		snprintf(f[n++], 64, "%s", tok);
	return n;
}

static void test_list_columns(void **state)
{
	char f[8][64], ep[PATH_MAX];
	struct tguest g;

	(void)state;
	VM("--connect", node_uri, "list");
	if (res.rc)
		fail_msg("exit %d: %s", res.rc, res.err);
	assert_non_null(strstr(res.out, "NAME"));
	assert_non_null(strstr(res.out, "SLICE-STATE"));
	/* vm-off: UUID, "shut", "off", VF, slice, slice state */
	assert_int_equal(row_fields("vm-off", f), 6);
	assert_string_equal(f[0], DOM_OFF);
	assert_string_equal(f[1], "shut");
	assert_string_equal(f[2], "off");
	assert_string_equal(f[3], "1");
	assert_string_equal(f[4], SLICE);
	assert_string_equal(f[5], "running");

	/* A guest on the slice: the slice is attached, the domain still shut off. */
	snprintf(ep, sizeof(ep), "%s/vf1.sock", dmn->run);
	assert_int_equal(t_guest_attach(ep, &g), 0);
	VM("--connect", node_uri, "list");
	assert_int_equal(res.rc, 0);
	assert_int_equal(row_fields("vm-off", f), 6);
	assert_string_equal(f[1], "shut");
	assert_string_equal(f[3], "1");
	assert_string_equal(f[5], "attached");
	VM("--json", "--connect", node_uri, "list");
	assert_int_equal(res.rc, 0);
	assert_non_null(strstr(res.out, "\"slice_state\": \"attached\""));
	assert_non_null(strstr(res.out, "\"state\": \"shut off\""));
	t_guest_detach(&g);
}

static void test_stop_json_escapes(void **state)
{
	json_object *j, *v;

	(void)state;
	VM("--json", "--connect", node_uri, "stop", QNAME);
	if (res.rc)
		fail_msg("exit %d: %s", res.rc, res.err);
	j = json_tokener_parse(res.out);
	if (!j)
		fail_msg("stop --json is not JSON: %s", res.out);
	assert_true(json_object_object_get_ex(j, "name", &v));
	assert_string_equal(json_object_get_string(v), QNAME);
	assert_true(json_object_object_get_ex(j, "uuid", &v));
	assert_string_equal(json_object_get_string(v), DOM_Q);
	json_object_put(j);
}

/* A domain whose metadata names a socket that is no vgpud's (the one socket, linked into a
 * directory no vgpud runs in): list does not connect, says why, and knows no slice state. */
static void test_list_foreign_socket(void **state)
{
	char f[8][64], want[PATH_MAX + 64];

	(void)state;
	VM("--connect", node_uri, "list");
	if (res.rc)
		fail_msg("exit %d: %s", res.rc, res.err);
	assert_int_equal(row_fields("vm-elsewhere", f), 5);
	assert_string_equal(f[0], DOM_ELSE);
	assert_string_equal(f[2], "-");
	assert_string_equal(f[4], "unknown");
	snprintf(want, sizeof(want), "vgpu-vm: domain vm-elsewhere: vgpud socket %s refused: ",
		 else_sock);
	if (!strstr(res.err, want))
		fail_msg("stderr does not say \"%s\": %s", want, res.err);
}

/* vm-clone carries vm-off's metadata, token and all: stopping it leaves vm-off's slice to
 * vm-off. */
static void test_stop_clone(void **state)
{
	(void)state;
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE, "--owner", DOM_OFF ":0"), 0);
	VM("--connect", node_uri, "stop", "vm-clone");
	if (res.rc)
		fail_msg("exit %d: %s", res.rc, res.err);
	assert_non_null(strstr(res.out, "stopped domain vm-clone (" DOM_CLONE ")"));
	assert_int_equal(T_CTL(dmn, "--json", "list", "-u", SLICE), 0);
	assert_non_null(strstr(t_out.out, "\"vm\": \"" DOM_OFF "\""));
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE, "--release-owner", DOM_OFF), 0);
}

static void test_version(void **state)
{
	(void)state;
	VM("--version");
	assert_int_equal(res.rc, 0);
	assert_true(!strncmp(res.out, "vgpu-vm ", 8));
	assert_true(strlen(res.out) > 9);
}

/* Read @fp's lines until one contains @what; fails the test at EOF. */
static void expect_line(FILE *fp, const char *what)
{
	char line[1024];

	while (fgets(line, sizeof(line), fp))
		if (strstr(line, what))
			return;
	fail_msg("stderr ended without \"%s\"", what);
}

static void append(const char *path, const char *s)
{
	FILE *f = fopen(path, "a");

	assert_non_null(f);
	fputs(s, f);
	fclose(f);
}

/* Each stage is read from stderr before the test makes the next one happen: a --wait that
 * reported only at the end would never show "booting" while the domain still runs. */
static void test_wait_stages(void **state)
{
	char log[PATH_MAX], ep[PATH_MAX];
	struct tguest g;
	int of, ef, st;
	FILE *err;
	pid_t pid;

	(void)state;
	snprintf(log, sizeof(log), "%s/console.log", dmn->root);
	snprintf(ep, sizeof(ep), "%s/vf2.sock", dmn->run);
	pid = vm_spawn(dmn->sock, (char *const[]){ "--connect", "test:///default", "launch",
				"--slice", SLICE2, "--kernel", "/bin/sh", "--uuid", DOM_W,
				"--name", "vm-w", "--console-log", log, "--wait",
				"--timeout", "120", NULL }, NULL, &of, &ef);
	err = fdopen(ef, "r");
	assert_non_null(err);
	expect_line(err, "[booting] domain vm-w started");
	assert_int_equal(waitpid(pid, &st, WNOHANG), 0);	/* still waiting */
	assert_int_equal(t_guest_attach(ep, &g), 0);
	expect_line(err, "[attached] the guest attached to VF 2");
	append(log, "early boot\nVGPU-VM-START vfio\nok 1 - one\n");
	expect_line(err, "[running the suite] guest suite started (vfio)");
	append(log, "VGPU-VM-RESULT: 1 passed, 0 failed\n");
	expect_line(err, "[result] 1 passed, 0 failed");
	assert_int_equal(waitpid(pid, &st, WNOHANG), 0);	/* the domain still runs */
	kill(pid, SIGTERM);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	fclose(err);
	close(of);
	t_guest_detach(&g);
	assert_int_equal(T_CTL(dmn, "modify", "-u", SLICE2, "--release-owner", DOM_W), 0);
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_list_columns),
		cmocka_unit_test(test_list_foreign_socket),
		cmocka_unit_test(test_stop_json_escapes),
		cmocka_unit_test(test_stop_clone),
		cmocka_unit_test(test_wait_stages),
	};

	return cmocka_run_group_tests_name("vgpu_vm_ux", tests, group_setup, group_teardown);
}
