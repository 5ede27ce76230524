// SPDX-License-Identifier: MIT
/* The domain XML for a VM with a vGPU slice, and the checks of what goes into it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

/* ---- a growable string ---------------------------------------------------------------- */

static bool buf_reserve(struct vmm_buf *b, size_t more)
{
	char *n;
	size_t cap;

	if (b->oom)
		return false;
	if (b->len + more + 1 <= b->cap)
		return true;
	cap = b->cap ? b->cap : 1024;
	while (cap < b->len + more + 1)
		cap *= 2;
	n = realloc(b->s, cap);
	if (!n) {
		b->oom = true;
		return false;
	}
	b->s = n;
	b->cap = cap;
	return true;
}

void vmm_buf_printf(struct vmm_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !buf_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void vmm_buf_xml(struct vmm_buf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': vmm_buf_printf(b, "&amp;"); break;
		case '<': vmm_buf_printf(b, "&lt;"); break;
		case '>': vmm_buf_printf(b, "&gt;"); break;
		case '\'': vmm_buf_printf(b, "&apos;"); break;
		case '"': vmm_buf_printf(b, "&quot;"); break;
		/* Raw, a parser would turn these into spaces in an attribute value. */
		case '\t': vmm_buf_printf(b, "&#9;"); break;
		case '\n': vmm_buf_printf(b, "&#10;"); break;
		case '\r': vmm_buf_printf(b, "&#13;"); break;
		default: vmm_buf_printf(b, "%c", *s); break;
		}
	}
}

/* ---- checks ------------------------------------------------------------------------------- */

static bool name_valid(const char *n)
{
	size_t len = n ? strlen(n) : 0;

	if (!len || len > 64 || n[0] == '-' || n[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= 'A' && n[i] <= 'Z') ||
		      (n[i] >= '0' && n[i] <= '9') || n[i] == '.' || n[i] == '_' || n[i] == '-'))
			return false;
	return true;
}

/* Absolute, printable, and without characters that QEMU's option parser gives meaning. */
static int path_check(const char *what, const char *p, struct cmn_fail *e)
{
	if (p[0] != '/')
		return cmn_fail(e, -EINVAL, "%s \"%.200s\" must be an absolute path", what, p);
	if (strlen(p) >= 4096)
		return cmn_fail(e, -EINVAL, "%s path is too long", what);
	for (const char *c = p; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == ',')
			return cmn_fail(e, -EINVAL, "%s \"%.200s\": control characters and commas "
					"are not allowed", what, p);
	return 0;
}

static int source_check(const struct vmm_domain *d, struct cmn_fail *e)
{
	int r = 0;

	if (!d->kernel == !d->disk)
		return cmn_fail(e, -EINVAL, "give either a kernel (--kernel, with --initrd and "
				"--cmdline) or a disk image (--disk)");
	if (d->disk && (d->initrd || d->cmdline))
		return cmn_fail(e, -EINVAL, "--initrd and --cmdline go with --kernel, not --disk");
	if (d->kernel)
		r = path_check("kernel", d->kernel, e);
	if (!r && d->initrd)
		r = path_check("initrd", d->initrd, e);
	if (!r && d->disk)
		r = path_check("disk", d->disk, e);
	if (!r && d->disk_format && strcmp(d->disk_format, "raw") && strcmp(d->disk_format, "qcow2"))
		r = cmn_fail(e, -EINVAL, "disk format \"%.32s\" is neither raw nor qcow2",
			     d->disk_format);
	if (!r && d->cmdline && strlen(d->cmdline) > 2048)
		r = cmn_fail(e, -EINVAL, "the kernel command line is longer than 2048 bytes");
	if (!r && d->console_log)
		r = path_check("console log", d->console_log, e);
	if (!r && d->emulator)
		r = path_check("emulator", d->emulator, e);
	return r;
}

int vmm_domain_check(const struct vmm_domain *d, struct cmn_fail *e)
{
	if (!name_valid(d->name))
		return cmn_fail(e, -EINVAL, "domain name \"%.80s\" is not valid: 1..64 of "
				"A-Z a-z 0-9 . _ -, not starting with - or .", d->name ? d->name : "");
	if (ctlc_uuid_parse(d->uuid, NULL, NULL))
		return cmn_fail(e, -EINVAL, "domain UUID \"%.64s\" is not a UUID", d->uuid);
	if (ctlc_uuid_parse(d->meta.slice, NULL, NULL))
		return cmn_fail(e, -EINVAL, "slice UUID \"%.64s\" is not a UUID", d->meta.slice);
	if (strcasecmp(d->meta.vm, d->uuid))
		return cmn_fail(e, -EINVAL, "the owner token's VM (%.64s) must be the domain's "
				"UUID %s", d->meta.vm, d->uuid);
	if (d->memory_mib < 64 || d->memory_mib > 1048576)
		return cmn_fail(e, -EINVAL, "memory %u MiB is out of range (64..1048576)",
				d->memory_mib);
	if (d->vcpus < 1 || d->vcpus > 64)
		return cmn_fail(e, -EINVAL, "%u vCPUs is out of range (1..64)", d->vcpus);
	if (d->meta.socket[0] != '/')
		return cmn_fail(e, -EINVAL, "vgpud socket \"%.100s\" must be an absolute path",
				d->meta.socket);
	if (d->form == VMM_FORM_SHMEM && (!d->endpoint || path_check("endpoint", d->endpoint, e)))
		return cmn_fail(e, -EINVAL, "the slice has no endpoint socket (is it running?)");
	return source_check(d, e);
}

/* ---- the XML ------------------------------------------------------------------------------ */

char *vmm_meta_xml(const struct vmm_meta *m)
{
	struct vmm_buf b = { 0 };

	vmm_buf_printf(&b, "<%s:vm xmlns:%s='%s'>\n", VMM_NS_PREFIX, VMM_NS_PREFIX, VMM_NS_URI);
	vmm_buf_printf(&b, "      <%s:slice uuid='%s' socket='", VMM_NS_PREFIX, m->slice);
	vmm_buf_xml(&b, m->socket);
	vmm_buf_printf(&b, "'/>\n      <%s:owner vm='%s' generation='%" PRIu64 "'/>\n",
		       VMM_NS_PREFIX, m->vm, m->generation);
	vmm_buf_printf(&b, "    </%s:vm>", VMM_NS_PREFIX);
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

static void xml_elem(struct vmm_buf *b, const char *indent, const char *tag, const char *text)
{
	vmm_buf_printf(b, "%s<%s>", indent, tag);
	vmm_buf_xml(b, text);
	vmm_buf_printf(b, "</%s>\n", tag);
}

static void xml_os(struct vmm_buf *b, const struct vmm_domain *d)
{
	vmm_buf_printf(b, "  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n");
	if (d->kernel) {
		xml_elem(b, "    ", "kernel", d->kernel);
		if (d->initrd)
			xml_elem(b, "    ", "initrd", d->initrd);
		if (d->cmdline)
			xml_elem(b, "    ", "cmdline", d->cmdline);
	} else {
		vmm_buf_printf(b, "    <boot dev='hd'/>\n");
	}
	vmm_buf_printf(b, "  </os>\n");
}

/* The slice as QEMU's ivshmem-doorbell on vgpud's endpoint: BAR2's size is the size of the
 * memfd vgpud sends, so there is no <size>; one MSI-X vector per VF vector. A migratable
 * domain's device is the ivshmem master (QEMU refuses to migrate peer mode, and libvirt any
 * other role), which QEMU allows only as peer 0: vf<N>.master.sock's layout. */
static void xml_shmem(struct vmm_buf *b, const struct vmm_domain *d)
{
	vmm_buf_printf(b, "    <shmem name='vgpu-%s'%s>\n", d->meta.slice,
		       d->migratable ? " role='master'" : "");
	vmm_buf_printf(b, "      <model type='ivshmem-doorbell'/>\n      <server path='");
	vmm_buf_xml(b, d->endpoint);
	vmm_buf_printf(b, "'/>\n      <msi vectors='%u' ioeventfd='on'/>\n    </shmem>\n",
		       VMM_SHMEM_VECTORS);
}

static void xml_mdev(struct vmm_buf *b, const struct vmm_domain *d)
{
	vmm_buf_printf(b, "    <hostdev mode='subsystem' type='mdev' model='vfio-pci' "
		       "display='off'>\n      <source>\n        <address uuid='%s'/>\n"
		       "      </source>\n    </hostdev>\n", d->meta.slice);
}

static void xml_devices(struct vmm_buf *b, const struct vmm_domain *d)
{
	vmm_buf_printf(b, "  <devices>\n");
	xml_elem(b, "    ", "emulator", d->emulator ? d->emulator : VMM_EMULATOR);
	if (d->disk) {
		vmm_buf_printf(b, "    <disk type='file' device='disk'>\n      <driver name='qemu' "
			       "type='%s'/>\n      <source file='",
			       d->disk_format ? d->disk_format : "raw");
		vmm_buf_xml(b, d->disk);
		vmm_buf_printf(b, "'/>\n      <target dev='vda' bus='virtio'/>\n    </disk>\n");
	}
	if (d->console_log) {
		vmm_buf_printf(b, "    <serial type='file'>\n      <source path='");
		vmm_buf_xml(b, d->console_log);
		/* A migrated domain's QEMU opens the file anew on the destination: it must add
		 * to what the guest printed before, not truncate it. */
		vmm_buf_printf(b, "'%s/>\n      <target port='0'/>\n    </serial>\n",
			       d->migratable ? " append='on'" : "");
	} else {
		vmm_buf_printf(b, "    <serial type='pty'>\n      <target port='0'/>\n    </serial>\n"
			       "    <console type='pty'>\n      <target type='serial' port='0'/>\n"
			       "    </console>\n");
	}
	if (d->form == VMM_FORM_SHMEM)
		xml_shmem(b, d);
	else
		xml_mdev(b, d);
	/* vfio-pci in the guest needs an IOMMU group for the VF, hence the emulated VT-d (with
	 * interrupt remapping, QEMU's default on q35: vfio's type1 IOMMU refuses to work
	 * without it unless told allow_unsafe_interrupts). */
	vmm_buf_printf(b, "    <iommu model='intel'/>\n    <controller type='usb' model='none'/>\n"
		       "    <memballoon model='none'/>\n  </devices>\n");
}

/* A migratable domain's QEMU option that libvirt does not write: ivshmem's master=on
 * (libvirt 9 checks role='master' before it migrates but does not pass it to QEMU, which
 * then blocks the migration as peer mode). */
static void xml_mig_qemu_args(struct vmm_buf *b)
{
	vmm_buf_printf(b, "  <qemu:commandline>\n    <qemu:arg value='-global'/>\n"
		       "    <qemu:arg value='" VMM_MIG_QEMU_GLOBAL "'/>\n  </qemu:commandline>\n");
}

int vmm_xml_build(const struct vmm_domain *d, char **xml, struct cmn_fail *e)
{
	struct vmm_buf b = { 0 };
	char *meta;
	int r;

	*xml = NULL;
	r = vmm_domain_check(d, e);
	if (r)
		return r;
	meta = vmm_meta_xml(&d->meta);
	vmm_buf_printf(&b, "<domain type='%s'%s>\n", d->accel == VMM_ACCEL_KVM ? "kvm" : "qemu",
		       d->migratable ? " xmlns:qemu='" VMM_QEMU_NS "'" : "");
	xml_elem(&b, "  ", "name", d->name);
	vmm_buf_printf(&b, "  <uuid>%s</uuid>\n  <metadata>\n    %s\n  </metadata>\n", d->uuid,
		       meta ? meta : "");
	vmm_buf_printf(&b, "  <memory unit='MiB'>%u</memory>\n  <vcpu>%u</vcpu>\n", d->memory_mib,
		       d->vcpus);
	xml_os(&b, d);
	/* TCG's default CPU model lacks SSE4.2 and POPCNT, which the project's x86-64-v2
	 * binaries (the guest's vgpu-vf-test too) use: give the guest everything TCG has. */
	if (d->accel == VMM_ACCEL_TCG)
		vmm_buf_printf(&b, "  <cpu mode='maximum' check='none'/>\n");
	/* Without ACPI libvirt passes -no-acpi and the guest's poweroff never ends the domain. */
	vmm_buf_printf(&b, "  <features>\n    <acpi/>\n  </features>\n");
	/* A test kernel boots with panic=-1: its crash is a reboot, which must end the domain;
	 * a disk VM reboots as usual. */
	vmm_buf_printf(&b, "  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>%s</on_reboot>\n"
		       "  <on_crash>destroy</on_crash>\n", d->kernel ? "destroy" : "restart");
	xml_devices(&b, d);
	if (d->migratable && d->form == VMM_FORM_SHMEM)
		xml_mig_qemu_args(&b);
	vmm_buf_printf(&b, "</domain>\n");
	free(meta);
	if (b.oom || !meta) {
		free(b.s);
		return cmn_fail(e, -ENOMEM, "out of memory");
	}
	*xml = b.s;
	return 0;
}
