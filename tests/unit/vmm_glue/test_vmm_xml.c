// SPDX-License-Identifier: MIT
/* vmm_glue's domain XML: golden output of every form, the checks of what goes in, schema
 * validation (virt-xml-validate accepts ours and rejects a broken one), the metadata round
 * trip (through our parser and through libvirt's test driver), which vgpud sockets named
 * there are trusted, and libvirt's QEMU command line for it (virsh domxml-to-native, when
 * a libvirtd answers). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm_glue/vmm_glue.h"
#include "vmm_test.h"

#define SLICE	"6a3c9dd2-0001-4b6e-9f1e-6f0c2f2b9d70"
#define DOM	"3f1c1f4e-8d2b-4c55-9a7e-0c1d2e3f4a5b"

/* A kernel-booted test VM as the libvirt tier launches it. */
static struct vmm_domain base_domain(void)
{
	struct vmm_domain d = {
		.name = "vm1", .uuid = DOM, .memory_mib = 256, .vcpus = 1,
		.accel = VMM_ACCEL_TCG, .form = VMM_FORM_SHMEM,
		.kernel = "/srv/guest/vmlinux", .initrd = "/srv/guest/initramfs.cpio.gz",
		.cmdline = "console=ttyS0 panic=-1 quiet intel_iommu=on vgpu_test=vfio",
		.console_log = "/tmp/vm1.console", .endpoint = "/run/vgpud/vf1.sock",
		.meta = { .slice = SLICE, .socket = "/run/vgpud/control.sock", .vm = DOM,
			  .generation = 0 },
	};
	return d;
}

/* How the XML of every shmem form ends: the ivshmem-doorbell device on the VF's socket,
 * the vIOMMU, no USB controller, no balloon. */
#define GOLDEN_SHMEM_END \
"    <shmem name='vgpu-" SLICE "'>\n" \
"      <model type='ivshmem-doorbell'/>\n" \
"      <server path='/run/vgpud/vf1.sock'/>\n" \
"      <msi vectors='3' ioeventfd='on'/>\n" \
"    </shmem>\n" \
"    <iommu model='intel'/>\n" \
"    <controller type='usb' model='none'/>\n" \
"    <memballoon model='none'/>\n" \
"  </devices>\n" \
"</domain>\n"

static const char golden_kernel[] =
"<domain type='qemu'>\n"
"  <name>vm1</name>\n"
"  <uuid>" DOM "</uuid>\n"
"  <metadata>\n"
"    <vgpu:vm xmlns:vgpu='urn:vgpu:vm:1'>\n"
"      <vgpu:slice uuid='" SLICE "' socket='/run/vgpud/control.sock'/>\n"
"      <vgpu:owner vm='" DOM "' generation='0'/>\n"
"    </vgpu:vm>\n"
"  </metadata>\n"
"  <memory unit='MiB'>256</memory>\n"
"  <vcpu>1</vcpu>\n"
"  <os>\n"
"    <type arch='x86_64' machine='q35'>hvm</type>\n"
"    <kernel>/srv/guest/vmlinux</kernel>\n"
"    <initrd>/srv/guest/initramfs.cpio.gz</initrd>\n"
"    <cmdline>console=ttyS0 panic=-1 quiet intel_iommu=on vgpu_test=vfio</cmdline>\n"
"  </os>\n"
"  <cpu mode='maximum' check='none'/>\n"
"  <features>\n"
"    <acpi/>\n"
"  </features>\n"
"  <on_poweroff>destroy</on_poweroff>\n"
"  <on_reboot>destroy</on_reboot>\n"
"  <on_crash>destroy</on_crash>\n"
"  <devices>\n"
"    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
"    <serial type='file'>\n"
"      <source path='/tmp/vm1.console'/>\n"
"      <target port='0'/>\n"
"    </serial>\n"
GOLDEN_SHMEM_END;

/* A disk VM on KVM, console on a pty, owner generation 7. */
static const char golden_disk_kvm[] =
"<domain type='kvm'>\n"
"  <name>desk-01</name>\n"
"  <uuid>" DOM "</uuid>\n"
"  <metadata>\n"
"    <vgpu:vm xmlns:vgpu='urn:vgpu:vm:1'>\n"
"      <vgpu:slice uuid='" SLICE "' socket='/run/vgpud/control.sock'/>\n"
"      <vgpu:owner vm='" DOM "' generation='7'/>\n"
"    </vgpu:vm>\n"
"  </metadata>\n"
"  <memory unit='MiB'>2048</memory>\n"
"  <vcpu>2</vcpu>\n"
"  <os>\n"
"    <type arch='x86_64' machine='q35'>hvm</type>\n"
"    <boot dev='hd'/>\n"
"  </os>\n"
"  <features>\n"
"    <acpi/>\n"
"  </features>\n"
"  <on_poweroff>destroy</on_poweroff>\n"
"  <on_reboot>restart</on_reboot>\n"
"  <on_crash>destroy</on_crash>\n"
"  <devices>\n"
"    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
"    <disk type='file' device='disk'>\n"
"      <driver name='qemu' type='qcow2'/>\n"
"      <source file='/var/lib/libvirt/images/desk&amp;01.qcow2'/>\n"
"      <target dev='vda' bus='virtio'/>\n"
"    </disk>\n"
"    <serial type='pty'>\n"
"      <target port='0'/>\n"
"    </serial>\n"
"    <console type='pty'>\n"
"      <target type='serial' port='0'/>\n"
"    </console>\n"
GOLDEN_SHMEM_END;

static struct vmm_domain disk_kvm_domain(void)
{
	struct vmm_domain d = base_domain();

	d.name = "desk-01";
	d.memory_mib = 2048;
	d.vcpus = 2;
	d.accel = VMM_ACCEL_KVM;
	d.kernel = d.initrd = d.cmdline = NULL;
	d.disk = "/var/lib/libvirt/images/desk&01.qcow2";
	d.disk_format = "qcow2";
	d.console_log = NULL;
	d.meta.generation = 7;
	return d;
}

static struct vmm_domain mdev_domain(void)
{
	struct vmm_domain d = base_domain();

	d.form = VMM_FORM_MDEV;
	d.endpoint = NULL;
	return d;
}

static const char golden_mdev_dev[] =
"    <hostdev mode='subsystem' type='mdev' model='vfio-pci' display='off'>\n"
"      <source>\n"
"        <address uuid='" SLICE "'/>\n"
"      </source>\n"
"    </hostdev>\n";

/* @d's XML (malloc'd) in *@xml: it must build. */
static void build(struct vmm_domain d, char **xml)
{
	struct cmn_fail e = { 0 };

	assert_int_equal(vmm_xml_build(&d, xml, &e), 0);
}

/* ---- golden ----------------------------------------------------------------------------- */

/* @d's XML is @want to the byte. */
static void expect_golden(struct vmm_domain d, const char *want)
{
	char *xml;

	build(d, &xml);
	assert_string_equal(xml, want);
	free(xml);
}

static void test_golden_kernel(void **state)
{
	(void)state;
	expect_golden(base_domain(), golden_kernel);
}

static void test_golden_disk_kvm(void **state)
{
	(void)state;
	expect_golden(disk_kvm_domain(), golden_disk_kvm);
}

static void test_golden_mdev(void **state)
{
	char *xml;

	(void)state;
	build(mdev_domain(), &xml);
	assert_non_null(strstr(xml, golden_mdev_dev));
	assert_null(strstr(xml, "<shmem"));
	assert_non_null(strstr(xml, "<iommu model='intel'/>"));
	free(xml);
}

/* ---- checks ----------------------------------------------------------------------------- */

static const struct check_case {
	const char *name;
	void *unused;
	const char *want;		/* in the message; check_mutate() has the change */
} check_cases[] = {
	{ "empty name", NULL, "domain name" },
	{ "name with slash", NULL, "domain name" },
	{ "name starting with dash", NULL, "domain name" },
	{ "name of 65 chars", NULL, "domain name" },
	{ "bad domain uuid", NULL, "domain UUID" },
	{ "bad slice uuid", NULL, "slice UUID" },
	{ "owner is another VM", NULL, "owner token" },
	{ "memory 32 MiB", NULL, "memory" },
	{ "0 vcpus", NULL, "vCPUs" },
	{ "65 vcpus", NULL, "vCPUs" },
	{ "relative kernel", NULL, "absolute" },
	{ "kernel and disk", NULL, "either a kernel" },
	{ "neither kernel nor disk", NULL, "either a kernel" },
	{ "initrd with disk", NULL, "go with --kernel" },
	{ "comma in a path", NULL, "commas" },
	{ "newline in the console path", NULL, "control characters" },
	{ "bad disk format", NULL, "neither raw nor qcow2" },
	{ "shmem without endpoint", NULL, "endpoint" },
	{ "relative vgpud socket", NULL, "vgpud socket" },
	{ "cmdline over 2 KiB", NULL, "longer than 2048" },
	{ "relative emulator", NULL, "emulator \"qemu\" must be an absolute path" },
};

static char long_cmdline[2100];

/* Row @i of check_cases applied to a good domain. */
static void check_mutate(size_t i, struct vmm_domain *d)
{
	switch (i) {
	case 0: d->name = ""; break;
	case 1: d->name = "a/b"; break;
	case 2: d->name = "-vm"; break;
	case 3: d->name = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"; break;
	case 4: snprintf(d->uuid, sizeof(d->uuid), "not-a-uuid"); break;
	case 5: snprintf(d->meta.slice, sizeof(d->meta.slice), "%s", "6a3c9dd2-0001-4b6e");
		break;
	case 6: snprintf(d->meta.vm, sizeof(d->meta.vm), SLICE); break;
	case 7: d->memory_mib = 32; break;
	case 8: d->vcpus = 0; break;
	case 9: d->vcpus = 65; break;
	case 10: d->kernel = "vmlinux"; break;
	case 11: d->disk = "/img.raw"; break;
	case 12: d->kernel = NULL; d->initrd = NULL; d->cmdline = NULL; break;
	case 13: d->kernel = NULL; d->disk = "/img.raw"; break;
	case 14: d->initrd = "/a,b"; break;
	case 15: d->console_log = "/tmp/a\nb"; break;
	case 16: d->kernel = NULL; d->initrd = NULL; d->cmdline = NULL; d->disk = "/i";
		 d->disk_format = "vmdk"; break;
	case 17: d->endpoint = NULL; break;
	case 18: snprintf(d->meta.socket, sizeof(d->meta.socket), "run/control.sock"); break;
	case 19: memset(long_cmdline, 'x', sizeof(long_cmdline) - 1); d->cmdline = long_cmdline;
		 break;
	case 20: d->emulator = "qemu"; break;
	}
}

static void test_check(void **state)
{
	const struct check_case *c = *state;
	struct vmm_domain d = base_domain();
	struct cmn_fail e = { 0 };
	char *xml = (char *)1;

	check_mutate((size_t)(c - check_cases), &d);
	assert_int_equal(vmm_xml_build(&d, &xml, &e), -EINVAL);
	assert_null(xml);
	assert_int_equal(e.err, -EINVAL);
	if (!strstr(e.msg, c->want))
		fail_msg("%s: message \"%s\" does not say \"%s\"", c->name, e.msg, c->want);
}

static void test_escaping(void **state)
{
	struct vmm_domain d = base_domain();
	struct cmn_fail e = { 0 };
	struct vmm_meta m;
	char *xml;

	(void)state;
	d.cmdline = "vgpu_args=<a>&'b\" x";
	snprintf(d.meta.socket, sizeof(d.meta.socket), "/run/v'g&p\"u/<c>.sock");
	build(d, &xml);
	assert_non_null(strstr(xml, "<cmdline>vgpu_args=&lt;a&gt;&amp;&apos;b&quot; x</cmdline>"));
	assert_int_equal(vmm_meta_parse(xml, &m, NULL, &e), 0);
	assert_string_equal(m.socket, "/run/v'g&p\"u/<c>.sock");
	free(xml);
}

/* --emulator: libvirt runs that binary instead of the default, its path escaped. */
static void test_emulator(void **state)
{
	struct vmm_domain d = base_domain();
	char *xml;

	(void)state;
	build(d, &xml);
	assert_non_null(strstr(xml, "<emulator>" VMM_EMULATOR "</emulator>"));
	free(xml);
	d.emulator = "/opt/q&a/qemu-system-x86_64";
	build(d, &xml);
	assert_non_null(strstr(xml, "<emulator>/opt/q&amp;a/qemu-system-x86_64</emulator>"));
	assert_null(strstr(xml, VMM_EMULATOR));
	free(xml);
}

/* ---- validation ------------------------------------------------------------------------- */

static bool have_validator(void)
{
	return system("command -v virt-xml-validate >/dev/null 2>&1") == 0;
}

static void validate_built(struct vmm_domain d)
{
	struct cmn_fail e = { 0 };
	char *xml;

	if (!have_validator())
		skip();
	build(d, &xml);
	if (vmm_xml_validate(xml, &e))
		fail_msg("%s", e.msg);
	free(xml);
}

static void test_validate_kernel(void **state) { (void)state; validate_built(base_domain()); }
static void test_validate_disk_kvm(void **state) { (void)state; validate_built(disk_kvm_domain()); }
static void test_validate_mdev(void **state) { (void)state; validate_built(mdev_domain()); }

static const struct broken_case {
	const char *name, *from, *to;
} broken_cases[] = {
	{ "bogus shmem model", "ivshmem-doorbell", "ivshmem-bogus" },
	{ "unknown device", "<memballoon model='none'/>", "<gpu model='vgpu'/>" },
	{ "memory not a number", ">256</memory>", ">lots</memory>" },
	{ "not well-formed", "</devices>", "</device>" },
};

static void test_validate_broken(void **state)
{
	const struct broken_case *c = *state;
	struct cmn_fail e = { 0 };
	char *xml, *bad, *at;

	if (!have_validator())
		skip();
	build(base_domain(), &xml);
	at = strstr(xml, c->from);
	assert_non_null(at);
	bad = malloc(strlen(xml) + strlen(c->to) + 1);
	assert_non_null(bad);
	sprintf(bad, "%.*s%s%s", (int)(at - xml), xml, c->to, at + strlen(c->from));
	assert_int_equal(vmm_xml_validate(bad, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "does not validate"));
	free(bad);
	free(xml);
}

/* ---- metadata --------------------------------------------------------------------------- */

static void test_meta_round_trip(void **state)
{
	struct cmn_fail e = { 0 };
	struct vmm_meta m;
	char *xml, uuid[VMM_UUID_LEN];

	(void)state;
	build(disk_kvm_domain(), &xml);
	assert_int_equal(vmm_meta_parse(xml, &m, uuid, &e), 0);
	assert_string_equal(m.slice, SLICE);
	assert_string_equal(m.socket, "/run/vgpud/control.sock");
	assert_string_equal(m.vm, DOM);
	assert_int_equal(m.generation, 7);
	assert_string_equal(uuid, DOM);
	free(xml);
}

static void quiet(void *opaque, virErrorPtr err)
{
	(void)opaque;
	(void)err;
}

/* libvirt keeps our element through define and dumpxml (its test driver, no daemon). */
static void test_meta_through_libvirt(void **state)
{
	struct cmn_fail e = { 0 };
	struct vmm_meta m;
	virConnectPtr conn;
	virDomainPtr dom;
	char *xml, *back, *elem;

	(void)state;
	virSetErrorFunc(NULL, quiet);
	conn = virConnectOpen("test:///default");
	if (!conn)
		skip();
	build(base_domain(), &xml);
	dom = virDomainDefineXML(conn, xml);
	if (!dom)
		fail_msg("libvirt's test driver refused our XML: %s", virGetLastErrorMessage());
	back = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE);
	assert_non_null(back);
	assert_int_equal(vmm_meta_parse(back, &m, NULL, &e), 0);
	assert_string_equal(m.slice, SLICE);
	assert_string_equal(m.vm, DOM);
	elem = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, VMM_NS_URI, 0);
	assert_non_null(elem);
	assert_non_null(strstr(elem, SLICE));
	free(elem);
	free(back);
	virDomainUndefine(dom);
	virDomainFree(dom);
	virConnectClose(conn);
	free(xml);
}

static const struct meta_case {
	const char *name;
	const char *xml;
	int want;
} meta_cases[] = {
	{ "no metadata", "<domain type='qemu'><name>a</name></domain>", -ENOENT },
	{ "someone else's metadata",
	  "<domain><metadata><x:vm xmlns:x='urn:other'/></metadata></domain>", -ENOENT },
	{ "our prefix, other namespace",
	  "<domain><metadata><vgpu:vm xmlns:vgpu='urn:other'><vgpu:slice uuid='" SLICE "'/>"
	  "</vgpu:vm></metadata></domain>", -ENOENT },
	{ "not XML", "<domain><metadata>", -EINVAL },
	{ "not a domain", "<network/>", -EINVAL },
	{ "slice uuid missing",
	  "<domain><metadata><v:vm xmlns:v='urn:vgpu:vm:1'><v:slice socket='/s'/>"
	  "<v:owner vm='" DOM "'/></v:vm></metadata></domain>", -EINVAL },
	{ "relative socket",
	  "<domain><metadata><v:vm xmlns:v='urn:vgpu:vm:1'><v:slice uuid='" SLICE "' socket='s'/>"
	  "<v:owner vm='" DOM "'/></v:vm></metadata></domain>", -EINVAL },
	{ "owner missing",
	  "<domain><metadata><v:vm xmlns:v='urn:vgpu:vm:1'><v:slice uuid='" SLICE "' socket='/s'/>"
	  "</v:vm></metadata></domain>", -EINVAL },
	{ "negative generation",
	  "<domain><metadata><v:vm xmlns:v='urn:vgpu:vm:1'><v:slice uuid='" SLICE "' socket='/s'/>"
	  "<v:owner vm='" DOM "' generation='-1'/></v:vm></metadata></domain>", -EINVAL },
	{ "other prefix, our namespace",
	  "<domain><metadata><v:vm xmlns:v='urn:vgpu:vm:1'><v:slice uuid='" SLICE "' socket='/s'/>"
	  "<v:owner vm='" DOM "' generation='3'/></v:vm></metadata></domain>", 0 },
	{ "entity is not expanded",
	  "<!DOCTYPE domain [<!ENTITY x SYSTEM 'file:///etc/passwd'>]><domain><metadata>"
	  "<v:vm xmlns:v='urn:vgpu:vm:1'><v:slice uuid='" SLICE "' socket='/&x;'/>"
	  "<v:owner vm='" DOM "'/></v:vm></metadata></domain>", -EINVAL },
};

static void test_meta_parse(void **state)
{
	const struct meta_case *c = *state;
	struct cmn_fail e = { 0 };
	struct vmm_meta m;

	assert_int_equal(vmm_meta_parse(c->xml, &m, NULL, &e), c->want);
	if (c->want)
		assert_true(e.msg[0] != 0);
	else
		assert_int_equal(m.generation, 3);
}

/* ---- the metadata's socket --------------------------------------------------------------- */

static char sock_root[64];	/* mkdtemp: the tree sock_tree() builds */

/* A socket file at @rel under sock_root (its listener closed: only the file matters). */
static int tree_sock(const char *rel)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0), r;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", sock_root, rel);
	r = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r;
}

static int tree_file(const char *rel)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", sock_root, rel);
	f = fopen(p, "w");
	return f ? fclose(f) : -1;
}

static int tree_op(int (*fn)(const char *, mode_t), const char *rel, mode_t mode)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", sock_root, rel);
	return fn(p, mode);
}

static int tree_chown(const char *rel)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", sock_root, rel);
	return lchown(p, 65534, 65534);
}

static int tree_link(const char *target, const char *rel)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", sock_root, rel);
	return symlink(target, p);
}

/* vgpud runtime directories and imitations of one. */
static int sock_tree(void **state)
{
	static const char *const dirs[] = { "ok", "nolock", "file", "ww", "ok2", "other",
					    "otherdir", "otherlock" };
	int r = 0;

	(void)state;
	snprintf(sock_root, sizeof(sock_root), "/tmp/vmm-sock-XXXXXX");
	if (!mkdtemp(sock_root))
		return -1;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		r |= tree_op(mkdir, dirs[i], 0755);
	r |= tree_sock("ok/control.sock") | tree_file("ok/vgpud.lock") | tree_sock("ok/vf1.sock");
	r |= tree_sock("nolock/control.sock");
	r |= tree_file("file/control.sock") | tree_file("file/vgpud.lock");
	r |= tree_sock("ww/control.sock") | tree_file("ww/vgpud.lock") | tree_op(chmod, "ww", 0777);
	r |= tree_link("ok", "link");
	r |= tree_file("ok2/vgpud.lock") | tree_link("../ok/control.sock", "ok2/control.sock");
	r |= tree_sock("other/control.sock") | tree_file("other/vgpud.lock");
	r |= tree_sock("otherdir/control.sock") | tree_file("otherdir/vgpud.lock");
	r |= tree_sock("otherlock/control.sock") | tree_file("otherlock/vgpud.lock");
	if (!r && !geteuid())
		r = tree_chown("other/control.sock") | tree_chown("otherdir") |
		    tree_chown("otherlock/vgpud.lock");
	return r ? -1 : 0;
}

static int sock_tree_free(void **state)
{
	char cmd[128];

	(void)state;
	if (!sock_root[0])
		return 0;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sock_root);
	return system(cmd) ? -1 : 0;
}

static const struct sock_case {
	const char *name;
	const char *rel;		/* under sock_root; NULL: @abs */
	const char *abs;
	int want;
	const char *msg;		/* in the message, which starts "vgpud socket PATH
					 * refused: " (-EPERM) */
	bool root_only;			/* needs files of another user: chown */
} sock_cases[] = {
	{ "socket: vgpud's control socket in its runtime directory", "ok/control.sock", NULL, 0,
	  NULL, false },
	{ "socket: missing", "gone/control.sock", NULL, -ECONNREFUSED, NULL, false },
	{ "socket: relative", NULL, "control.sock", -EPERM, "not an absolute path", false },
	{ "socket: an endpoint, not the control socket", "ok/vf1.sock", NULL, -EPERM,
	  "vgpud's control socket is named control.sock", false },
	{ "socket: no vgpud.lock beside it", "nolock/control.sock", NULL, -EPERM,
	  "is not a vgpud runtime directory (no vgpud.lock of ", false },
	{ "socket: a regular file", "file/control.sock", NULL, -EPERM, "not a socket", false },
	{ "socket: its directory writable by anyone", "ww/control.sock", NULL, -EPERM,
	  "is writable by others (mode 0777)", false },
	{ "socket: through a symbolic link to its directory", "link/control.sock", NULL, -EPERM,
	  "the path goes through a symbolic link or is not canonical", false },
	{ "socket: itself a symbolic link", "ok2/control.sock", NULL, -EPERM,
	  "the path goes through a symbolic link or is not canonical", false },
	{ "socket: a path with ..", "ok/../ok/control.sock", NULL, -EPERM,
	  "the path goes through a symbolic link or is not canonical", false },
	{ "socket: another user's", "other/control.sock", NULL, -EPERM,
	  "it belongs to uid 65534, not to root", true },
	{ "socket: in another user's directory", "otherdir/control.sock", NULL, -EPERM,
	  "otherdir belongs to uid 65534, not to root", true },
	{ "socket: beside another user's vgpud.lock", "otherlock/control.sock", NULL, -EPERM,
	  "is not a vgpud runtime directory (no vgpud.lock of root there)", true },
};

static void test_meta_socket(void **state)
{
	const struct sock_case *c = *state;
	struct cmn_fail e = { 0 };
	char path[PATH_MAX], want[PATH_MAX + 256];

	if (c->root_only && geteuid())
		skip();
	if (c->rel)
		snprintf(path, sizeof(path), "%s/%s", sock_root, c->rel);
	else
		snprintf(path, sizeof(path), "%s", c->abs);
	assert_int_equal(vmm_meta_socket_check(path, geteuid(), &e), c->want);
	if (!c->want)
		return;
	assert_int_equal(e.err, c->want);
	snprintf(want, sizeof(want), c->want == -EPERM ? "vgpud socket %s refused: " :
		 "vgpud is not reachable at %s", path);
	if (strncmp(e.msg, want, strlen(want)) || (c->msg && !strstr(e.msg, c->msg)))
		fail_msg("%s: message \"%s\" is not \"%s...%s\"", c->name, e.msg, want,
			 c->msg ? c->msg : "");
}

/* ---- libvirt's QEMU command line --------------------------------------------------------- */

static char *run_capture(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	static char out[65536];
	size_t n;

	if (!p)
		return NULL;
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	return pclose(p) == 0 ? out : NULL;
}

/* Whether a libvirtd answers on qemu:///system. */
static bool have_libvirtd(void)
{
	return system("virsh -c qemu:///system version >/dev/null 2>&1") == 0;
}

/* libvirt's QEMU command line for @xml (virsh domxml-to-native); NULL when virsh failed. */
static char *to_native(const char *xml)
{
	char path[] = "/tmp/vmm-xml-XXXXXX", cmd[256], *argv;
	int fd = mkstemp(path);
	FILE *f;

	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fputs(xml, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "virsh -c qemu:///system domxml-to-native qemu-argv %s 2>&1",
		 path);
	argv = run_capture(cmd);
	unlink(path);
	return argv;
}

static void test_domxml_to_native(void **state)
{
	char *xml, *argv;

	(void)state;
	if (!have_libvirtd()) {
		printf("# SKIP reason: no libvirtd answers on qemu:///system\n");
		skip();
	}
	build(base_domain(), &xml);
	argv = to_native(xml);
	free(xml);
	assert_non_null(argv);
	assert_non_null(strstr(argv, "-accel tcg"));
	assert_non_null(strstr(argv, "q35"));
	assert_non_null(strstr(argv, "-cpu max"));
	assert_non_null(strstr(argv, "\"driver\":\"intel-iommu\""));
	assert_non_null(strstr(argv, "\"driver\":\"ivshmem-doorbell\""));
	assert_non_null(strstr(argv, "\"vectors\":3"));
	assert_non_null(strstr(argv, "socket,id=charshmem0,path=/run/vgpud/vf1.sock"));
	assert_non_null(strstr(argv, "-kernel /srv/guest/vmlinux"));
	assert_null(strstr(argv, "-no-acpi"));
}

/* --migratable: the ivshmem master on vf<N>.master.sock (role='master' for libvirt,
 * master=on for QEMU, which libvirt 9 does not pass on), valid for libvirt's schema, and
 * QEMU's command line as libvirt makes it (when one answers). */
static void test_migratable(void **state)
{
	struct vmm_domain d = base_domain();
	struct cmn_fail e = { 0 };
	char *xml, *argv;

	(void)state;
	d.migratable = true;
	d.endpoint = "/run/vgpud/vf1.master.sock";
	build(d, &xml);
	assert_non_null(strstr(xml, "<domain type='qemu' xmlns:qemu='" VMM_QEMU_NS "'>\n"));
	assert_non_null(strstr(xml, "<shmem name='vgpu-" SLICE "' role='master'>\n"));
	assert_non_null(strstr(xml, "<server path='/run/vgpud/vf1.master.sock'/>"));
	assert_non_null(strstr(xml, "<source path='/tmp/vm1.console' append='on'/>"));
	assert_non_null(strstr(xml, "<qemu:arg value='-global'/>\n"
			       "    <qemu:arg value='ivshmem-doorbell.master=on'/>"));
	if (have_validator() && vmm_xml_validate(xml, &e))
		fail_msg("%s", e.msg);
	if (!have_libvirtd()) {
		free(xml);
		return;
	}
	argv = to_native(xml);
	free(xml);
	assert_non_null(argv);
	assert_non_null(strstr(argv, "-global ivshmem-doorbell.master=on"));
	assert_non_null(strstr(argv, "path=/run/vgpud/vf1.master.sock"));
}

int main(void)
{
	static const struct CMUnitTest fixed[] = {
		cmocka_unit_test(test_golden_kernel),
		cmocka_unit_test(test_golden_disk_kvm),
		cmocka_unit_test(test_golden_mdev),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_emulator),
		cmocka_unit_test(test_validate_kernel),
		cmocka_unit_test(test_validate_disk_kvm),
		cmocka_unit_test(test_validate_mdev),
		cmocka_unit_test(test_meta_round_trip),
		cmocka_unit_test(test_meta_through_libvirt),
		cmocka_unit_test(test_domxml_to_native),
		cmocka_unit_test(test_migratable),
	};
	static struct CMUnitTest tests[96];
	size_t n = 0;

	vmm_t_add(tests, &n, fixed, sizeof(fixed) / sizeof(fixed[0]));
	VMM_T_ROWS(tests, n, test_check, check_cases);
	VMM_T_ROWS(tests, n, test_validate_broken, broken_cases);
	VMM_T_ROWS(tests, n, test_meta_parse, meta_cases);
	VMM_T_ROWS(tests, n, test_meta_socket, sock_cases);
	return _cmocka_run_group_tests("vmm_xml", tests, n, sock_tree, sock_tree_free);
}
