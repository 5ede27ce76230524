// SPDX-License-Identifier: MIT
/* vgpu-vm - launch, stop, list, describe and migrate libvirt VMs with vGPU slices, and the
 * libvirt qemu hook. One verb per run; human output by default, one JSON object with --json.
 * Exit codes as vgpuctl's (doc/vgpu-vm.1). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/clock.h"
#include "common/log.h"
#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

#define HOOK_MAX_XML	(4u << 20)
#define VM_MAX_ARGS	8
/* The package version; the build may pass its own. */
#include "common/version.h"
#define JSON_OUT	(JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | \
			 JSON_C_TO_STRING_NOSLASHESCAPE)

struct vm_opts {
	const char *verb;
	char *args[VM_MAX_ARGS];	/* positional arguments after the verb */
	int nargs;
	const char *slice, *name, *uuid, *uri, *socket, *qemu_user;
	const char *kernel, *initrd, *cmdline, *disk, *console_log, *emulator;
	const char *to, *dest_socket, *listen;	/* migrate */
	unsigned int memory_mib, vcpus, timeout_s, max_downtime_ms;
	uint64_t generation;
	enum vmm_accel accel;
	bool persistent, wait, dry, json, mdev, undefine, migratable;
	bool socket_given;		/* --socket or $VGPUD_SOCKET: overrides the metadata's */
	/* absolute forms of the paths, filled by resolve_paths() */
	char kernel_abs[PATH_MAX], initrd_abs[PATH_MAX], disk_abs[PATH_MAX], log_abs[PATH_MAX];
	char emulator_abs[PATH_MAX];
	char socket_abs[PATH_MAX];	/* the control socket's, for the metadata */
};

static int usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "vgpu-vm: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'vgpu-vm --help'.\n");
	return VMM_EXIT_USAGE;
}

/* Print @e's message and return its exit code. */
static int report(const struct cmn_fail *e)
{
	fprintf(stderr, "vgpu-vm: %s\n", e->msg);
	return vmm_exit_code(e->err);
}

static void help(void)
{
	printf("usage: vgpu-vm [options] VERB [args]\n\n"
	       "verbs:\n"
	       "  launch --slice UUID (--kernel F [--initrd F] [--cmdline S] | --disk IMG)\n"
	       "         [--name N] [--uuid U] [--memory MIB] [--vcpus N] [--accel tcg|kvm]\n"
	       "         [--console-log F] [--persistent] [--wait [--timeout S]] [--dry-run]\n"
	       "         [--migratable] [--emulator QEMU]\n"
	       "  xml    the same options: print the validated domain XML (--mdev: hostdev form)\n"
	       "  stop NAME|UUID [--undefine]\n"
	       "  migrate NAME|UUID --to URI --dest-socket PATH [--listen ADDR]\n"
	       "         [--max-downtime MS]\n"
	       "         live, with its slice, to another host's libvirt\n"
	       "  list   NAME, UUID, domain state, VF, slice, slice state\n"
	       "  hook NAME OP SUBOP [EXTRA]   libvirt's qemu hook, domain XML on stdin\n\n"
	       "options:\n"
	       "  -c, --connect URI    libvirt URI (default %s)\n"
	       "      --socket PATH    vgpud's control socket (default $VGPUD_SOCKET or %s)\n"
	       "      --qemu-user USER the user libvirt runs QEMU as (default %s)\n"
	       "      --generation N   owner token generation (default 0)\n"
	       "      --json           one JSON object on stdout\n"
	       "  -V, --version        print the version\n"
	       "exit: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict, 5 resources,\n"
	       "      6 vgpud or libvirtd unreachable, 7 permission denied\n",
	       VMM_DEFAULT_URI, CTLC_DEFAULT_SOCKET, VMM_DEFAULT_QEMU_USER);
}

/* ---- argument parsing ------------------------------------------------------------------ */

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	if (!s[0] || s[0] == '-' || s[0] == '+')
		return -EINVAL;
	*out = strtoul(s, &end, 10);
	return errno || *end || *out > max ? -EINVAL : 0;
}

/* MiB: "512", "512M", "512MiB", "2G", "2GiB". */
static int parse_memory(const char *s, unsigned int *mib)
{
	char *end;
	unsigned long v;

	errno = 0;
	if (!s[0] || s[0] == '-' || s[0] == '+')
		return -EINVAL;
	v = strtoul(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (!strcmp(end, "G") || !strcmp(end, "GiB"))
		v = v > (1ul << 20) ? 0 : v * 1024;
	else if (*end && strcmp(end, "M") && strcmp(end, "MiB"))
		return -EINVAL;
	if (v < 64 || v > 1048576)
		return -ERANGE;
	*mib = (unsigned int)v;
	return 0;
}

enum { O_SLICE = 256, O_NAME, O_UUID, O_KERNEL, O_INITRD, O_CMDLINE, O_DISK, O_MEMORY,
       O_VCPUS, O_ACCEL, O_LOG, O_PERSIST, O_WAIT, O_TIMEOUT, O_DRY, O_JSON, O_SOCKET,
       O_QEMU_USER, O_GEN, O_MDEV, O_UNDEFINE, O_MIGRATABLE, O_TO, O_DEST_SOCKET, O_LISTEN,
       O_MAX_DOWNTIME, O_EMULATOR };

static const struct option long_opts[] = {
	{ "slice", required_argument, NULL, O_SLICE }, { "name", required_argument, NULL, O_NAME },
	{ "uuid", required_argument, NULL, O_UUID }, { "kernel", required_argument, NULL, O_KERNEL },
	{ "initrd", required_argument, NULL, O_INITRD },
	{ "cmdline", required_argument, NULL, O_CMDLINE },
	{ "disk", required_argument, NULL, O_DISK }, { "memory", required_argument, NULL, O_MEMORY },
	{ "vcpus", required_argument, NULL, O_VCPUS }, { "accel", required_argument, NULL, O_ACCEL },
	{ "console-log", required_argument, NULL, O_LOG },
	{ "persistent", no_argument, NULL, O_PERSIST }, { "wait", no_argument, NULL, O_WAIT },
	{ "timeout", required_argument, NULL, O_TIMEOUT }, { "dry-run", no_argument, NULL, O_DRY },
	{ "json", no_argument, NULL, O_JSON }, { "connect", required_argument, NULL, 'c' },
	{ "socket", required_argument, NULL, O_SOCKET },
	{ "qemu-user", required_argument, NULL, O_QEMU_USER },
	{ "generation", required_argument, NULL, O_GEN }, { "mdev", no_argument, NULL, O_MDEV },
	{ "undefine", no_argument, NULL, O_UNDEFINE }, { "help", no_argument, NULL, 'h' },
	{ "migratable", no_argument, NULL, O_MIGRATABLE }, { "to", required_argument, NULL, O_TO },
	{ "dest-socket", required_argument, NULL, O_DEST_SOCKET },
	{ "listen", required_argument, NULL, O_LISTEN },
	{ "max-downtime", required_argument, NULL, O_MAX_DOWNTIME },
	{ "emulator", required_argument, NULL, O_EMULATOR },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static int parse_value(struct vm_opts *o, int c, const char *arg)
{
	unsigned long v;

	switch (c) {
	case O_MEMORY:
		return parse_memory(arg, &o->memory_mib) ?
			usage("bad --memory \"%s\" (MiB, 64..1048576; or with M/G)", arg) : 0;
	case O_VCPUS:
		if (parse_uint(arg, 64, &v) || !v)
			return usage("bad --vcpus \"%s\" (1..64)", arg);
		o->vcpus = (unsigned int)v;
		return 0;
	case O_TIMEOUT:
		if (parse_uint(arg, 86400, &v) || !v)
			return usage("bad --timeout \"%s\" (seconds, 1..86400)", arg);
		o->timeout_s = (unsigned int)v;
		return 0;
	case O_MAX_DOWNTIME:
		if (parse_uint(arg, 600000, &v) || !v)
			return usage("bad --max-downtime \"%s\" (milliseconds, 1..600000)", arg);
		o->max_downtime_ms = (unsigned int)v;
		return 0;
	case O_GEN:
		if (parse_uint(arg, UINT32_MAX, &v))
			return usage("bad --generation \"%s\"", arg);
		o->generation = v;
		return 0;
	case O_ACCEL:
		if (strcmp(arg, "tcg") && strcmp(arg, "kvm"))
			return usage("bad --accel \"%s\" (tcg or kvm)", arg);
		o->accel = strcmp(arg, "kvm") ? VMM_ACCEL_TCG : VMM_ACCEL_KVM;
		return 0;
	}
	return 0;
}

static int parse_opt(struct vm_opts *o, int c, const char *arg)
{
	switch (c) {
	case O_SLICE: o->slice = arg; break;
	case O_NAME: o->name = arg; break;
	case O_UUID: o->uuid = arg; break;
	case O_KERNEL: o->kernel = arg; break;
	case O_INITRD: o->initrd = arg; break;
	case O_CMDLINE: o->cmdline = arg; break;
	case O_DISK: o->disk = arg; break;
	case O_LOG: o->console_log = arg; break;
	case O_EMULATOR: o->emulator = arg; break;
	case O_PERSIST: o->persistent = true; break;
	case O_WAIT: o->wait = true; break;
	case O_DRY: o->dry = true; break;
	case O_JSON: o->json = true; break;
	case 'c': o->uri = arg; break;
	case O_SOCKET: o->socket = arg; o->socket_given = true; break;
	case O_QEMU_USER: o->qemu_user = arg; break;
	case O_MDEV: o->mdev = true; break;
	case O_UNDEFINE: o->undefine = true; break;
	case O_MIGRATABLE: o->migratable = true; break;
	case O_TO: o->to = arg; break;
	case O_DEST_SOCKET: o->dest_socket = arg; break;
	case O_LISTEN: o->listen = arg; break;
	default: return parse_value(o, c, arg);
	}
	return 0;
}

/* One option @c as getopt_long() returned it: -1 after --help or --version (nothing more
 * to do), VMM_EXIT_USAGE for one it refused, else parse_opt()'s verdict. */
static int cli_opt(struct vm_opts *o, int c)
{
	if (c == 'h' || c == 'V') {
		if (c == 'h')
			help();
		else
			printf("vgpu-vm %s\n", VGPU_VERSION);
		return -1;
	}
	return c == '?' ? VMM_EXIT_USAGE : parse_opt(o, c, optarg);
}

/* Everything after the hook verb is an argument (a leading "--" is skipped). */
static int hook_args(int argc, char **argv, struct vm_opts *o)
{
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	while (optind < argc) {
		if (o->nargs == VM_MAX_ARGS)
			return usage("too many arguments (\"%s\")", argv[optind]);
		o->args[o->nargs++] = argv[optind++];
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct vm_opts *o)
{
	int c, r;

	memset(o, 0, sizeof(*o));
	o->memory_mib = 256;
	o->vcpus = 1;
	o->uri = VMM_DEFAULT_URI;
	o->socket_given = getenv("VGPUD_SOCKET") != NULL;
	o->socket = o->socket_given ? getenv("VGPUD_SOCKET") : CTLC_DEFAULT_SOCKET;
	o->qemu_user = VMM_DEFAULT_QEMU_USER;
	optind = 1;
	opterr = 1;
	while ((c = getopt_long(argc, argv, "+c:hV", long_opts, NULL)) != -1) {
		r = cli_opt(o, c);
		if (r)
			return r;
	}
	if (optind >= argc)
		return usage("%s", "no verb given");
	o->verb = argv[optind++];
	/* libvirt's hook arguments are a domain name, which may be any text ("--help",
	 * "-cfoo"), and words of libvirt's: none of them is an option. */
	if (!strcmp(o->verb, "hook"))
		return hook_args(argc, argv, o);
	/* Options may also follow the verb, before, between or after its arguments. */
	while (optind < argc) {
		c = getopt_long(argc, argv, "+c:hV", long_opts, NULL);
		if (c == -1) {
			if (o->nargs == VM_MAX_ARGS)
				return usage("too many arguments (\"%s\")", argv[optind]);
			o->args[o->nargs++] = argv[optind++];
			continue;
		}
		r = cli_opt(o, c);
		if (r)
			return r;
	}
	return 0;
}

/* ---- launch and xml -------------------------------------------------------------------- */

/* @path made absolute into @out; an existing file unless @dir_only (then its directory). */
static int resolve(const char *what, const char *path, bool dir_only, char *out,
		   struct cmn_fail *e)
{
	char tmp[PATH_MAX], dir[PATH_MAX];

	if (strlen(path) >= PATH_MAX - 1)
		return cmn_fail(e, -ENAMETOOLONG, "%s path is too long", what);
	if (!dir_only) {
		if (!realpath(path, out))
			return cmn_fail(e, -errno, "%s %s: %s", what, path, strerror(errno));
		if (access(out, R_OK))
			return cmn_fail(e, -errno, "%s %s: %s", what, path, strerror(errno));
		return 0;
	}
	snprintf(tmp, sizeof(tmp), "%s", path);
	if (!realpath(dirname(tmp), dir))
		return cmn_fail(e, -errno, "%s %s: its directory: %s", what, path, strerror(errno));
	snprintf(tmp, sizeof(tmp), "%s", path);
	if (snprintf(out, PATH_MAX, "%s/%s", dir, basename(tmp)) >= PATH_MAX)
		return cmn_fail(e, -ENAMETOOLONG, "%s path is too long", what);
	return 0;
}

static int resolve_paths(struct vm_opts *o, struct cmn_fail *e)
{
	int r = 0;

	if (o->kernel)
		r = resolve("kernel", o->kernel, false, o->kernel_abs, e);
	if (!r && o->initrd)
		r = resolve("initrd", o->initrd, false, o->initrd_abs, e);
	if (!r && o->disk)
		r = resolve("disk", o->disk, false, o->disk_abs, e);
	if (!r && o->console_log)
		r = resolve("console log", o->console_log, true, o->log_abs, e);
	if (!r && o->emulator) {
		r = resolve("emulator", o->emulator, false, o->emulator_abs, e);
		if (!r && access(o->emulator_abs, X_OK))
			r = cmn_fail(e, -errno, "emulator %s is not executable: %s", o->emulator,
				     strerror(errno));
	}
	return r;
}

/* "qcow2" when the image starts with QCOW's magic, else "raw". */
static const char *disk_format(const char *path)
{
	unsigned char m[4] = { 0 };
	FILE *f = fopen(path, "rb");

	if (f) {
		if (fread(m, 1, 4, f) != 4)
			m[0] = 0;
		fclose(f);
	}
	return m[0] == 'Q' && m[1] == 'F' && m[2] == 'I' && m[3] == 0xfb ? "qcow2" : "raw";
}

/* Can @pw (QEMU's user, with its groups) search every directory above @path? The first
 * one it cannot is in @bad. libvirt's DAC driver labels the files it is given, never the
 * directories on their way. */
static bool qemu_can_reach(const char *path, const struct passwd *pw, char *bad, size_t len)
{
	gid_t groups[64];
	int ng = 64;
	char dir[PATH_MAX];
	struct stat sb;

	if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &ng) < 0)
		ng = 0;
	snprintf(dir, sizeof(dir), "%s", path);
	for (char *slash = strrchr(dir, '/'); slash && slash != dir; slash = strrchr(dir, '/')) {
		bool ok;

		*slash = 0;
		if (stat(dir, &sb))
			continue;
		ok = sb.st_mode & S_IXOTH;
		if (sb.st_uid == pw->pw_uid)
			ok = sb.st_mode & S_IXUSR;
		for (int i = 0; !ok && sb.st_uid != pw->pw_uid && i < ng; i++)
			ok = groups[i] == sb.st_gid && (sb.st_mode & S_IXGRP);
		if (!ok) {
			snprintf(bad, len, "%s", dir);
			return false;
		}
	}
	return true;
}

/* The files QEMU opens itself (as @pw) must be reachable. */
static int qemu_paths_check(const struct vm_opts *o, const struct vmm_slice *s,
			    const struct passwd *pw, struct cmn_fail *e)
{
	const char *paths[] = { s->endpoint, o->kernel ? o->kernel_abs : NULL,
				o->initrd ? o->initrd_abs : NULL, o->disk ? o->disk_abs : NULL,
				o->console_log ? o->log_abs : NULL,
				o->emulator ? o->emulator_abs : NULL };
	char bad[PATH_MAX];

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (paths[i] && paths[i][0] && !qemu_can_reach(paths[i], pw, bad, sizeof(bad)))
			return cmn_fail(e, -EACCES, "libvirt runs QEMU as %s, which cannot reach %s: "
					"directory %s is not searchable by it (chmod o+x %s)",
					pw->pw_name, paths[i], bad, bad);
	return 0;
}

/* Launch's checks on the slice, all before libvirt is touched. */
static int slice_usable(const struct vm_opts *o, const struct vmm_slice *s, const char *dom,
			struct cmn_fail *e)
{
	struct passwd *pw;

	if (!s->running)
		return cmn_fail(e, -EBUSY, "slice %s is defined but not running; start it first "
				"(vgpuctl start -u %s)", s->uuid, s->uuid);
	if (s->owner_vm[0] && (strcasecmp(s->owner_vm, dom) || s->owner_gen != o->generation))
		return cmn_fail(e, -EBUSY, "slice %s is owned by VM %s generation %" PRIu64
				"; stop that VM first (vgpu-vm stop %s)", s->uuid, s->owner_vm,
				s->owner_gen, s->owner_vm);
	if (s->attached)
		return cmn_fail(e, -EBUSY, "slice %s is in use: a guest is attached to VF %u",
				s->uuid, s->vf);
	/* The endpoint admits root and the slice's owner uid: QEMU must be one of them. */
	pw = strstr(o->uri, "system") ? getpwnam(o->qemu_user) : NULL;
	if (pw && pw->pw_uid != 0 && (long)pw->pw_uid != s->owner_uid) {
		char who[32] = "only root", how[320];

		if (s->owner_uid >= 0)
			snprintf(who, sizeof(who), "uid %ld", s->owner_uid);
		/* vgpud hands a running slice from one uid to another only through a stop: the
		 * previous uid may still map its BAR. */
		if (s->owner_uid > 0 && s->vf)
			snprintf(how, sizeof(how), "vgpuctl stop -u %s, vgpuctl modify -u %s "
				 "--owner-uid %s, vgpuctl start -u %s", s->uuid, s->uuid,
				 o->qemu_user, s->uuid);
		else
			snprintf(how, sizeof(how), "vgpuctl modify -u %s --owner-uid %s", s->uuid,
				 o->qemu_user);
		return cmn_fail(e, -EACCES, "slice %s admits %s to its endpoint, but libvirt runs "
				"QEMU as %s (uid %u): %s", s->uuid, who, o->qemu_user,
				(unsigned int)pw->pw_uid, how);
	}
	return pw && pw->pw_uid != 0 ? qemu_paths_check(o, s, pw, e) : 0;
}

static void domain_spec(struct vm_opts *o, const struct vmm_slice *s, struct vmm_domain *d,
			char *name_buf, size_t name_len)
{
	memset(d, 0, sizeof(*d));
	if (o->name) {
		d->name = o->name;
	} else {
		snprintf(name_buf, name_len, "vgpu-%.8s", s->uuid);
		d->name = name_buf;
	}
	if (o->uuid)
		snprintf(d->uuid, sizeof(d->uuid), "%.36s", o->uuid);
	else if (s->owner_vm[0] && o->generation == s->owner_gen)
		snprintf(d->uuid, sizeof(d->uuid), "%s", s->owner_vm);	/* its VM again */
	else
		ctlc_uuid_generate(d->uuid);
	d->memory_mib = o->memory_mib;
	d->vcpus = o->vcpus;
	d->accel = o->accel;
	d->form = o->mdev ? VMM_FORM_MDEV : VMM_FORM_SHMEM;
	d->kernel = o->kernel ? o->kernel_abs : NULL;
	d->initrd = o->initrd ? o->initrd_abs : NULL;
	d->cmdline = o->cmdline ? o->cmdline :
		(o->kernel ? "console=ttyS0 panic=-1 intel_iommu=on" : NULL);
	d->disk = o->disk ? o->disk_abs : NULL;
	d->disk_format = o->disk ? disk_format(o->disk_abs) : NULL;
	d->console_log = o->console_log ? o->log_abs : NULL;
	d->emulator = o->emulator ? o->emulator_abs : NULL;
	d->migratable = o->migratable;
	d->endpoint = o->migratable ? (s->endpoint_master[0] ? s->endpoint_master : NULL) :
		      (s->endpoint[0] ? s->endpoint : NULL);
	snprintf(d->meta.slice, sizeof(d->meta.slice), "%s", s->uuid);
	snprintf(d->meta.socket, sizeof(d->meta.socket), "%s", o->socket);
	snprintf(d->meta.vm, sizeof(d->meta.vm), "%s", d->uuid);
	d->meta.generation = o->generation;
}

/* Everything launch and xml share: arguments, the slice, the XML, its validation. */
static int prepare_xml(struct vm_opts *o, struct ctlc **c, struct vmm_slice *s,
		       struct vmm_domain *d, char *name_buf, size_t name_len, char **xml,
		       struct cmn_fail *e)
{
	int r;

	*xml = NULL;
	if (!o->slice)
		return cmn_fail(e, -EINVAL, "%s needs --slice UUID", o->verb);
	if (ctlc_uuid_parse(o->slice, NULL, NULL))
		return cmn_fail(e, -EINVAL, "\"%.64s\" is not a slice UUID", o->slice);
	if (o->uuid && ctlc_uuid_parse(o->uuid, NULL, NULL))
		return cmn_fail(e, -EINVAL, "--uuid \"%.64s\" is not a UUID", o->uuid);
	if (o->nargs)
		return cmn_fail(e, -EINVAL, "%s takes no positional argument (\"%.64s\")", o->verb,
				o->args[0]);
	/* The metadata carries the socket for the hook, which runs elsewhere: absolute. */
	if (o->socket[0] != '/' && realpath(o->socket, o->socket_abs))
		o->socket = o->socket_abs;
	r = resolve_paths(o, e);
	if (r)
		return r;
	r = ctlc_open(o->socket, c, e);
	if (!r)
		r = vmm_slice_query(*c, o->slice, s, e);
	if (r)
		return r;
	domain_spec(o, s, d, name_buf, name_len);
	if (o->migratable && o->mdev)
		return cmn_fail(e, -EINVAL, "--migratable is for the shmem form, not --mdev");
	if (o->migratable && s->running && !s->endpoint_master[0])
		return cmn_fail(e, -EOPNOTSUPP, "slice %s: its vgpud has no vf<N>.master.sock (older "
				"than ABI 2.3): it cannot make a migratable VM", s->uuid);
	if (!strcmp(o->verb, "launch") || !o->mdev) {
		r = slice_usable(o, s, d->uuid, e);
		if (r)
			return r;
	}
	r = vmm_xml_build(d, xml, e);
	if (!r)
		r = vmm_xml_validate(*xml, e);
	return r;
}

static void print_launch(const struct vm_opts *o, const struct vmm_domain *d,
			 const struct vmm_slice *s, const char *xml, const char *result,
			 int64_t ran_ms)
{
	json_object *j;

	if (!o->json) {
		printf("%s domain %s (%s) with slice %s on VF %u (%s, %s)\n", result, d->name,
		       d->uuid, s->uuid, s->vf, o->persistent ? "persistent" : "transient",
		       o->accel == VMM_ACCEL_KVM ? "kvm" : "tcg");
		if (ran_ms >= 0)
			printf("domain %s ended after %.1f s\n", d->name, (double)ran_ms / 1000);
		return;
	}
	j = json_object_new_object();
	json_object_object_add(j, "schema", json_object_new_int(1));
	json_object_object_add(j, "result", json_object_new_string(result));
	json_object_object_add(j, "dry_run", json_object_new_boolean(o->dry));
	json_object_object_add(j, "name", json_object_new_string(d->name));
	json_object_object_add(j, "uuid", json_object_new_string(d->uuid));
	json_object_object_add(j, "slice", json_object_new_string(s->uuid));
	json_object_object_add(j, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(j, "endpoint", json_object_new_string(s->endpoint));
	json_object_object_add(j, "persistent", json_object_new_boolean(o->persistent));
	json_object_object_add(j, "accel", json_object_new_string(o->accel == VMM_ACCEL_KVM ?
								   "kvm" : "tcg"));
	json_object_object_add(j, "validated", json_object_new_boolean(true));
	if (ran_ms >= 0)
		json_object_object_add(j, "ran_ms", json_object_new_int64(ran_ms));
	if (o->dry)
		json_object_object_add(j, "xml", json_object_new_string(xml));
	printf("%s\n", json_object_to_json_string_ext(j, JSON_OUT));
	json_object_put(j);
}

/* Owner token first (the hook, if installed, checks it on "prepare begin"), then the
 * domain; a domain libvirt refuses gives the token back. */
static int launch_start(struct vm_opts *o, struct ctlc *c, const struct vmm_domain *d,
			const char *xml, struct vmm_virt *v, struct cmn_fail *e)
{
	struct cmn_fail ignore;
	int r = vmm_slice_set_owner(c, d->meta.slice, d->uuid, o->generation, e);

	if (r)
		return r;
	r = vmm_virt_launch(v, xml, o->persistent, e);
	if (r)
		vmm_slice_release(c, d->meta.slice, d->uuid, o->generation, &ignore);
	return r;
}

/* What launch --wait has reported so far. Stages go to stderr as they happen, so that
 * --json's one object on stdout stays one object. */
struct wait_watch {
	uint64_t t0;			/* when launch began: stages say how long after */
	struct ctlc *c;
	const char *slice, *log;	/* log: the console log, or NULL */
	long log_off;			/* how far the console log has been read */
	char line[512];			/* a console line not yet ended */
	size_t line_len;
	bool attached, suite, result;
};

/* Each stage ends with the seconds since launch began ("(+2.31 s)"), so that a slow launch
 * shows where its time went without a debugger. */
static void stage(const struct wait_watch *w, const char *name, const char *fmt,
		  const char *arg)
{
	fprintf(stderr, "vgpu-vm: [%s] ", name);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, " (+%.2f s)\n", (double)(cmn_now_ns() - w->t0) / 1e9);
	fflush(stderr);
}

/* One console line: the guest image's init marks the suite's start and its result. */
static void watch_line(struct wait_watch *w, const char *line)
{
	if (!w->suite && !strncmp(line, "VGPU-VM-START", 13)) {
		w->suite = true;
		stage(w, "running the suite", "guest suite started (%s)", line + 13 + !!line[13]);
	} else if (!w->result && !strncmp(line, "VGPU-VM-RESULT: ", 16)) {
		w->result = true;
		stage(w, "result", "%s", line + 16);
	}
}

/* New console output since the last poll, split into lines. */
static void watch_log(struct wait_watch *w)
{
	char buf[4096];
	size_t got;
	FILE *f = fopen(w->log, "re");

	if (!f)
		return;		/* QEMU has not created it yet */
	if (fseek(f, w->log_off, SEEK_SET)) {
		fclose(f);
		return;
	}
	while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
		w->log_off += (long)got;
		for (size_t i = 0; i < got; i++) {
			if (buf[i] == '\n' || buf[i] == '\r') {
				w->line[w->line_len] = 0;
				watch_line(w, w->line);
				w->line_len = 0;
			} else if (w->line_len + 1 < sizeof(w->line)) {
				w->line[w->line_len++] = buf[i];
			}
		}
	}
	fclose(f);
}

/* vmm_virt_wait's tick: the guest attaching to the slice, then the console's markers. */
static void watch_tick(void *ctx)
{
	struct wait_watch *w = ctx;
	struct vmm_slice s;

	if (!w->attached && !vmm_slice_query(w->c, w->slice, &s, NULL) && s.attached) {
		char vf[16];

		w->attached = true;
		snprintf(vf, sizeof(vf), "%u", s.vf);
		stage(w, "attached", "the guest attached to VF %s", vf);
	}
	if (w->log)
		watch_log(w);
}

static int cmd_launch(struct vm_opts *o)
{
	struct cmn_fail e = { 0 }, ignore;
	struct ctlc *c = NULL;
	struct vmm_virt *v = NULL;
	struct vmm_slice s;
	struct vmm_domain d;
	struct wait_watch w = { .t0 = cmn_now_ns() };
	char name[64], *xml = NULL;
	uint64_t t0;
	int64_t ran_ms = -1;
	int r;

	if (o->mdev)
		return usage("%s", "launch cannot start the mdev form here (see vgpu-vm xml --mdev)");
	if (!o->wait && o->timeout_s)
		return usage("%s", "--timeout goes with --wait");
	r = prepare_xml(o, &c, &s, &d, name, sizeof(name), &xml, &e);
	if (r || o->dry)
		goto out;
	r = vmm_virt_open(o->uri, &v, &e);
	if (!r)
		r = launch_start(o, c, &d, xml, v, &e);
	if (r || !o->wait)
		goto out;
	t0 = cmn_now_ns();
	w.c = c;
	w.slice = d.meta.slice;
	w.log = o->console_log ? o->log_abs : NULL;
	stage(&w, "booting", "domain %s started; waiting for it to end", d.name);
	r = vmm_virt_wait(v, d.uuid, o->timeout_s, watch_tick, &w, &e);
	watch_tick(&w);		/* the console's last lines */
	if (!w.result)
		stage(&w, "result", r ? "%s" : "domain %s ended; its console gave no suite result",
		      r ? e.msg : d.name);
	ran_ms = (int64_t)((cmn_now_ns() - t0) / 1000000);
	/* A transient domain is gone: its slice is free for the next VM (the hook, when
	 * installed, has done this already; the token check makes it harmless twice). */
	if (!o->persistent)
		vmm_slice_release(c, d.meta.slice, d.uuid, o->generation, &ignore);
out:
	if (!r || (o->wait && ran_ms >= 0))
		print_launch(o, &d, &s, xml, o->dry ? "would launch" : "launched", ran_ms);
	free(xml);
	vmm_virt_close(v);
	ctlc_close(c);
	return r ? report(&e) : 0;
}

static int cmd_xml(struct vm_opts *o)
{
	struct cmn_fail e = { 0 };
	struct ctlc *c = NULL;
	struct vmm_slice s;
	struct vmm_domain d;
	char name[64], *xml = NULL;
	int r;

	if (o->persistent || o->wait || o->timeout_s || o->dry)
		return usage("%s", "xml only prints: --persistent, --wait, --timeout and --dry-run "
			     "go with launch");
	r = prepare_xml(o, &c, &s, &d, name, sizeof(name), &xml, &e);
	if (!r && o->json) {
		json_object *j = json_object_new_object();

		json_object_object_add(j, "schema", json_object_new_int(1));
		json_object_object_add(j, "form", json_object_new_string(o->mdev ? "mdev" : "shmem"));
		json_object_object_add(j, "validated", json_object_new_boolean(true));
		json_object_object_add(j, "xml", json_object_new_string(xml));
		printf("%s\n", json_object_to_json_string_ext(j, JSON_OUT));
		json_object_put(j);
	} else if (!r) {
		fputs(xml, stdout);
	}
	free(xml);
	ctlc_close(c);
	return r ? report(&e) : 0;
}

/* ---- migrate -------------------------------------------------------------------------------- */

static double mib(uint64_t b)
{
	return (double)b / (1 << 20);
}

/* Progress lines go to stderr as they come (stdout stays one object with --json); a line
 * only when something moved, so a slow copy does not scroll. */
static void mig_progress(void *ctx, const struct vmm_mig_progress *p)
{
	struct vmm_mig_progress *last = ctx;

	if (!p->note && !strcmp(p->phase, last->phase ? last->phase : "") &&
	    p->round == last->round && p->bytes == last->bytes)
		return;
	*last = *p;
	last->note = NULL;	/* the caller's text: not kept past this call */
	if (p->note)
		fprintf(stderr, "%s: %s (+%.2f s)\n", p->phase, p->note,
			(double)p->elapsed_ms / 1000);
	else if (!strcmp(p->phase, "slice"))
		fprintf(stderr, "slice: round %u, %.1f MiB sent, %.1f MiB dirty, %.1f MiB to go, "
			"~%" PRIu64 " ms (+%.2f s)\n", p->round, mib(p->bytes), mib(p->dirty_bytes),
			mib(p->remaining_bytes), p->estimate_ms, (double)p->elapsed_ms / 1000);
	else
		fprintf(stderr, "vm: pass %u, %.1f MiB sent, %.1f MiB to go (+%.2f s)\n", p->round,
			mib(p->bytes), mib(p->remaining_bytes), (double)p->elapsed_ms / 1000);
}

static void print_migrate(const struct vm_opts *o, const struct vmm_mig_report *r)
{
	json_object *j;

	if (!o->json) {
		printf("migrated domain %s (%s) with slice %s to %s in %.2f s: VM downtime %" PRIu64
		       " ms (slice %" PRIu64 " ms), slice %.1f MiB in %u rounds, VM RAM %.1f MiB in "
		       "%u passes%s\n", r->name, r->uuid, r->slice, o->to,
		       (double)r->total_ms / 1000, r->vm_downtime_ms, r->slice_downtime_ms,
		       mib(r->slice_bytes), r->rounds, mib(r->vm_bytes), r->vm_iterations,
		       r->vm_live ? "" : " (vCPUs paused)");
		return;
	}
	j = json_object_new_object();
	json_object_object_add(j, "schema", json_object_new_int(1));
	json_object_object_add(j, "result", json_object_new_string("migrated"));
	json_object_object_add(j, "name", json_object_new_string(r->name));
	json_object_object_add(j, "uuid", json_object_new_string(r->uuid));
	json_object_object_add(j, "slice", json_object_new_string(r->slice));
	json_object_object_add(j, "to", json_object_new_string(o->to));
	json_object_object_add(j, "total_ms", json_object_new_uint64(r->total_ms));
	json_object_object_add(j, "vm_downtime_ms", json_object_new_uint64(r->vm_downtime_ms));
	json_object_object_add(j, "slice_downtime_ms", json_object_new_uint64(r->slice_downtime_ms));
	json_object_object_add(j, "slice_bytes", json_object_new_uint64(r->slice_bytes));
	json_object_object_add(j, "rounds", json_object_new_int((int)r->rounds));
	json_object_object_add(j, "vm_bytes", json_object_new_uint64(r->vm_bytes));
	json_object_object_add(j, "vm_passes", json_object_new_int((int)r->vm_iterations));
	json_object_object_add(j, "vm_live", json_object_new_boolean(r->vm_live));
	printf("%s\n", json_object_to_json_string_ext(j, JSON_OUT));
	json_object_put(j);
}

static int cmd_migrate(struct vm_opts *o)
{
	struct vmm_mig_progress last = { 0 };
	struct vmm_mig_opts mo = { .src_uri = o->uri, .progress = mig_progress, .ctx = &last };
	struct vmm_mig_report rep;
	struct cmn_fail e = { 0 };

	if (o->nargs != 1)
		return usage("%s", "migrate needs one domain name or UUID");
	if (!o->to)
		return usage("%s", "migrate needs --to URI (the destination's libvirt, e.g. "
			     "qemu+tcp://HOST/system)");
	if (!o->dest_socket)
		return usage("%s", "migrate needs --dest-socket PATH (the destination vgpud's "
			     "control socket, reachable from here)");
	if (o->dry || o->wait || o->persistent || o->migratable)
		return usage("%s", "migrate takes none of --dry-run, --wait, --persistent, "
			     "--migratable");
	mo.domain = o->args[0];
	mo.dest_uri = o->to;
	mo.src_socket = o->socket_given ? o->socket : NULL;
	mo.dest_socket = o->dest_socket;
	mo.listen = o->listen;
	mo.max_downtime_ms = o->max_downtime_ms;
	if (vmm_migrate(&mo, &rep, &e))
		return report(&e);
	print_migrate(o, &rep);
	return 0;
}

/* ---- stop, list ------------------------------------------------------------------------- */

/* stop's JSON: json-c escapes the domain name (libvirt allows quotes and backslashes). */
static void print_stop(const struct vm_opts *o, const struct vmm_vm_info *info)
{
	json_object *j = json_object_new_object();

	json_object_object_add(j, "schema", json_object_new_int(1));
	json_object_object_add(j, "result", json_object_new_string(o->dry ? "would stop" :
								    "stopped"));
	json_object_object_add(j, "name", json_object_new_string(info->name));
	json_object_object_add(j, "uuid", json_object_new_string(info->uuid));
	json_object_object_add(j, "dry_run", json_object_new_boolean(o->dry));
	json_object_object_add(j, "undefined", json_object_new_boolean(o->undefine &&
					info->persistent && !o->dry));
	printf("%s\n", json_object_to_json_string_ext(j, JSON_OUT));
	json_object_put(j);
}

/* The hook releases the slice on "release end"; without it, this does: the token of the
 * domain's own metadata only (a clone's names the VM it was made from, which may run), on
 * a vgpud socket vmm_meta_socket() accepts. */
static void stop_release(const struct vm_opts *o, const struct vmm_vm_info *info)
{
	struct cmn_fail e = { 0 }, ignore;
	const char *sock;
	struct ctlc *c;

	if (strcasecmp(info->meta.vm, info->uuid)) {
		cmn_info("vgpu-vm: domain %s (UUID %s) carries the owner token of VM %s: slice %s "
			 "is not released (the token is that VM's)", info->name, info->uuid,
			 info->meta.vm, info->meta.slice);
		return;
	}
	if (vmm_meta_socket(&info->meta, o->socket_given ? o->socket : NULL, &sock, &e)) {
		fprintf(stderr, "vgpu-vm: domain %s: slice %s not released: %s\n", info->name,
			info->meta.slice, e.msg);
		return;
	}
	if (!ctlc_open(sock, &c, &ignore)) {
		vmm_slice_release(c, info->meta.slice, info->meta.vm, info->meta.generation,
				  &ignore);
		ctlc_close(c);
	}
}

static int cmd_stop(struct vm_opts *o)
{
	struct cmn_fail e = { 0 };
	struct vmm_virt *v = NULL;
	struct vmm_vm_info info;
	int r;

	if (o->nargs != 1)
		return usage("%s", "stop needs one domain name or UUID");
	r = vmm_virt_open(o->uri, &v, &e);
	if (!r)
		r = vmm_virt_lookup(v, o->args[0], &info, &e);
	if (!r && o->dry)
		goto out;
	if (!r)
		r = vmm_virt_stop(v, info.uuid, o->undefine, &e);
	if (!r && info.has_meta)
		stop_release(o, &info);
out:
	if (!r && o->json)
		print_stop(o, &info);
	else if (!r)
		printf("%s domain %s (%s)%s\n", o->dry ? "would stop" : "stopped", info.name,
		       info.uuid, o->undefine && info.persistent && !o->dry ? ", undefined" : "");
	vmm_virt_close(v);
	return r ? report(&e) : 0;
}

/* The slice's own state, apart from the domain's: defined, running (no guest on its VF),
 * attached (a guest holds its endpoint), or unknown (vgpud unreachable or no such slice). */
static const char *slice_state(const struct vmm_slice *s, bool known)
{
	if (!known)
		return "unknown";
	return !s->running ? "defined" : s->attached ? "attached" : "running";
}

/* The slice of a listed domain, as its vgpud sees it now. */
static json_object *list_entry(const struct vmm_vm_info *i, struct vmm_slice *s, bool *known)
{
	json_object *j = json_object_new_object(), *own = json_object_new_object();
	struct cmn_fail e = { 0 };
	const char *sock;
	struct ctlc *c;

	/* The socket is whatever the domain's definer wrote: only a vgpud's is used. */
	*known = !vmm_meta_socket(&i->meta, NULL, &sock, &e);
	if (!*known && e.err != -ECONNREFUSED)
		fprintf(stderr, "vgpu-vm: domain %s: %s\n", i->name, e.msg);
	if (*known)
		*known = !ctlc_open(sock, &c, NULL);
	if (*known) {
		*known = !vmm_slice_query(c, i->meta.slice, s, NULL);
		ctlc_close(c);
	}
	json_object_object_add(j, "name", json_object_new_string(i->name));
	json_object_object_add(j, "uuid", json_object_new_string(i->uuid));
	json_object_object_add(j, "state", json_object_new_string(i->state));
	json_object_object_add(j, "persistent", json_object_new_boolean(i->persistent));
	json_object_object_add(j, "slice", json_object_new_string(i->meta.slice));
	json_object_object_add(j, "socket", json_object_new_string(i->meta.socket));
	json_object_object_add(own, "vm", json_object_new_string(i->meta.vm));
	json_object_object_add(own, "generation", json_object_new_uint64(i->meta.generation));
	json_object_object_add(j, "owner", own);
	json_object_object_add(j, "slice_state", json_object_new_string(slice_state(s, *known)));
	json_object_object_add(j, "vf", json_object_new_int(*known ? (int)s->vf : 0));
	json_object_object_add(j, "attached", json_object_new_boolean(*known && s->attached));
	json_object_object_add(j, "owned", json_object_new_boolean(*known &&
					!strcasecmp(s->owner_vm, i->meta.vm)));
	return j;
}

/* One text row of list, under a header printed before the first. */
static void list_row(const struct vmm_vm_info *i, const struct vmm_slice *s, bool known,
		     bool *header)
{
	char vf[8] = "-";

	if (!*header)
		printf("%-20s %-36s %-13s %-3s %-36s %s\n", "NAME", "UUID", "DOMAIN", "VF",
		       "SLICE", "SLICE-STATE");
	*header = true;
	if (known && s->running)
		snprintf(vf, sizeof(vf), "%u", s->vf);
	printf("%-20s %-36s %-13s %-3s %-36s %s\n", i->name, i->uuid, i->state, vf,
	       i->meta.slice, slice_state(s, known));
}

static int cmd_list(struct vm_opts *o)
{
	struct cmn_fail e = { 0 };
	struct vmm_virt *v = NULL;
	struct vmm_vm_info *vms = NULL;
	json_object *arr, *top;
	size_t n = 0;
	bool header = false;
	int r;

	if (o->nargs)
		return usage("list takes no argument (\"%s\")", o->args[0]);
	arr = json_object_new_array();
	r = vmm_virt_open(o->uri, &v, &e);
	if (!r)
		r = vmm_virt_list(v, &vms, &n, &e);
	for (size_t i = 0; !r && i < n; i++) {
		struct vmm_slice s;
		bool known;
		json_object *j;

		if (!vms[i].has_meta)
			continue;
		j = list_entry(&vms[i], &s, &known);
		json_object_array_add(arr, j);
		if (!o->json)
			list_row(&vms[i], &s, known, &header);
	}
	if (!r && o->json) {
		top = json_object_new_object();
		json_object_object_add(top, "schema", json_object_new_int(1));
		json_object_object_add(top, "domains", json_object_get(arr));
		printf("%s\n", json_object_to_json_string_ext(top, JSON_OUT));
		json_object_put(top);
	}
	json_object_put(arr);
	free(vms);
	vmm_virt_close(v);
	return r ? report(&e) : 0;
}

/* ---- hook -------------------------------------------------------------------------------- */

/* The domain XML on stdin, all of it read (libvirtd writes it all). Past HOOK_MAX_XML it
 * is not kept: *@over is set, and *@ours says whether it names our metadata's namespace. */
static char *read_stdin(bool *over, bool *ours)
{
	size_t len = 0, cap = 65536, keep = sizeof(VMM_NS_URI) - 2;
	char *buf = malloc(cap + 1), *n;
	ssize_t got;

	*over = *ours = false;
	while (buf && (got = read(0, buf + len, cap - len)) > 0) {
		len += (size_t)got;
		if (len < cap)
			continue;
		if (cap < HOOK_MAX_XML) {
			cap *= 2;
			n = realloc(buf, cap + 1);
			if (!n)
				free(buf);
			buf = n;
			continue;
		}
		/* Over the limit: look for the namespace, the tail kept for one that straddles
		 * two reads. */
		*over = true;
		*ours = *ours || memmem(buf, len, VMM_NS_URI, keep + 1);
		memmove(buf, buf + len - keep, keep);
		len = keep;
	}
	if (!buf)
		return NULL;
	buf[len] = 0;
	*ours = *ours || (*over && memmem(buf, len, VMM_NS_URI, keep + 1));
	return buf;
}

static int cmd_hook(struct vm_opts *o)
{
	struct cmn_fail e = { 0 };
	const char *sock = o->socket_given ? o->socket : NULL;
	bool over, ours;
	char *xml;
	int r;

	if (o->nargs < 3 || o->nargs > 4)
		return usage("%s", "hook needs NAME OP SUBOP [EXTRA] (libvirt's qemu hook arguments)");
	xml = read_stdin(&over, &ours);
	if (!xml) {
		fprintf(stderr, "vgpu hook: domain %s: out of memory reading the domain XML\n",
			o->args[0]);
		return VMM_EXIT_FAIL;
	}
	if (over) {
		free(xml);
		/* A domain without our metadata is none of the hook's business, however big. */
		if (!ours || !vmm_hook_acts(o->args[1], o->args[2]))
			return 0;
		fprintf(stderr, "vgpu hook: domain %s: the domain XML is over the hook's limit "
			"(it must be under %u MiB) and has vGPU metadata (%s): refused\n",
			o->args[0], HOOK_MAX_XML >> 20, VMM_NS_URI);
		return VMM_EXIT_FAIL;
	}
	r = vmm_hook_run(o->args[0], o->args[1], o->args[2], xml, sock, &e);
	free(xml);
	if (r) {
		fprintf(stderr, "vgpu hook: domain %s: %s\n", o->args[0], e.msg);
		return vmm_exit_code(r);
	}
	return 0;
}

int vmm_vm_main(int argc, char **argv)
{
	static const struct { const char *name; int (*fn)(struct vm_opts *o); } verbs[] = {
		{ "launch", cmd_launch }, { "xml", cmd_xml }, { "stop", cmd_stop },
		{ "list", cmd_list }, { "hook", cmd_hook }, { "migrate", cmd_migrate },
	};
	struct vm_opts o;
	int r = parse_args(argc, argv, &o);

	if (r)
		return r < 0 ? 0 : r;
	if (!strcmp(o.verb, "help")) {
		help();
		return 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (!strcmp(o.verb, verbs[i].name))
			return verbs[i].fn(&o);
	return usage("unknown verb \"%s\"", o.verb);
}
