/* SPDX-License-Identifier: MIT */
/* vmm_glue - VMs with vGPU slices through libvirt.
 *
 * The pieces the vgpu-vm tool and the libvirt qemu hook are made of: the slice calls
 * (query a slice, start it, set or release its owner token) over a ctlclient connection to
 * vgpud's control socket; the domain XML for a slice (q35, an emulated Intel IOMMU,
 * ACPI, the slice's ivshmem-doorbell <shmem> on its endpoint socket, and a <metadata>
 * element binding the slice, vgpud's control socket and the owner token), also in the
 * mdev <hostdev> form for hosts with a kernel mdev driver; the parser of that metadata;
 * and validation through virt-xml-validate. Nothing here includes pf_manager: vgpud is
 * reached only through its socket, with ctlclient (which also has the UUID helpers).
 *
 * Every call returns 0 or a negative errno and, where it takes a struct cmn_fail, leaves one
 * message there that names the object. vmm_exit_code() maps an errno to vgpuctl's exit
 * codes (vgpuctl(8)). */
#ifndef VGPU_VMM_GLUE_H
#define VGPU_VMM_GLUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/fail.h"

struct ctlc;

#define VMM_UUID_LEN		37			/* 36 characters and the NUL */
#define VMM_PATH_MAX		108			/* a UNIX socket path with its NUL */
#define VMM_NS_URI		"urn:vgpu:vm:1"		/* our <metadata> element's namespace */
#define VMM_NS_PREFIX		"vgpu"
#define VMM_DEFAULT_URI		"qemu:///system"
#define VMM_DEFAULT_QEMU_USER	"libvirt-qemu"		/* Debian's qemu.conf default */
#define VMM_EMULATOR		"/usr/bin/qemu-system-x86_64"
#define VMM_SHMEM_VECTORS	3			/* VF_NR_VECTORS of vgpu/vf_bar.h */

/* Exit codes, as vgpuctl(8) uses them. */
enum vmm_exit {
	VMM_EXIT_OK		= 0,
	VMM_EXIT_FAIL		= 1,
	VMM_EXIT_USAGE		= 2,	/* usage error or invalid argument */
	VMM_EXIT_NOT_FOUND	= 3,	/* slice, domain, file */
	VMM_EXIT_CONFLICT	= 4,	/* not running, owned by another VM, in use */
	VMM_EXIT_RESOURCES	= 5,
	VMM_EXIT_UNREACHABLE	= 6,	/* vgpud or libvirtd */
	VMM_EXIT_PERM		= 7,
};

/* The exit code for a negative errno (0 -> 0): EINVAL 2, ENOENT 3, EBUSY/EEXIST 4,
 * ENOSPC 5, ECONNREFUSED/EHOSTUNREACH 6, EACCES/EPERM 7, anything else 1. */
int vmm_exit_code(int err);

/* ---- slices on vgpud, over a ctlclient connection (ctlclient/ctlclient.h) --------------- */

/* A slice as query-slices reports it. */
struct vmm_slice {
	char uuid[VMM_UUID_LEN];
	char type[64];
	bool running;
	bool attached;			/* a guest holds the endpoint */
	unsigned int vf;		/* 0 when not running */
	char endpoint[VMM_PATH_MAX];	/* <runtime>/vf<N>.sock when running */
	char endpoint_master[VMM_PATH_MAX];	/* <runtime>/vf<N>.master.sock: the guest is
						 * ivshmem peer 0 (ABI 2.3), "" from older vgpuds */
	bool guest_peer0;		/* the attached guest came through endpoint_master */
	char guest_abi[16];		/* what the attached guest announced ("2.3"), "" if nothing */
	uint64_t vram_bytes;		/* provisioned, when running */
	uint64_t bar_bytes;		/* BAR2 size (a power of two), when running */
	char owner_vm[VMM_UUID_LEN];	/* owner token's VM UUID, "" when unowned */
	uint64_t owner_gen;
	long owner_uid;			/* may attach besides root; -1 = root only */
};

/* Fill @s from query-slices. -ENOENT "slice ... is not defined" when vgpud has no such slice. */
int vmm_slice_query(struct ctlc *c, const char *uuid, struct vmm_slice *s,
		    struct cmn_fail *e);

/* Start a defined slice (start-slice; a running one is "unchanged"). */
int vmm_slice_start(struct ctlc *c, const char *uuid, struct cmn_fail *e);

/* Stop a running slice (stop-slice) on behalf of VM @vm generation @gen: -EBUSY (nothing
 * changes) when another VM owns it. */
int vmm_slice_stop(struct ctlc *c, const char *uuid, const char *vm, uint64_t gen,
		   struct cmn_fail *e);

/* Make VM @vm (generation @gen) the slice's owner: modify-slice with the owner token.
 * vgpud refuses with -EBUSY when another VM owns it. */
int vmm_slice_set_owner(struct ctlc *c, const char *uuid, const char *vm, uint64_t gen,
			struct cmn_fail *e);

/* Clear the owner token if, and only if, VM @vm generation @gen holds it: 0 also when the
 * slice is unowned; -EBUSY when another VM owns it (nothing changes then). */
int vmm_slice_release(struct ctlc *c, const char *uuid, const char *vm, uint64_t gen,
		      struct cmn_fail *e);

/* ---- domain XML -------------------------------------------------------------------------- */

/* Our <metadata> element: which slice, on which vgpud, owned by which VM. */
struct vmm_meta {
	char slice[VMM_UUID_LEN];
	char socket[VMM_PATH_MAX];		/* vgpud's control socket */
	char vm[VMM_UUID_LEN];			/* owner token: the domain's UUID ... */
	uint64_t generation;			/* ... and its generation */
};

enum vmm_form {
	VMM_FORM_SHMEM,		/* ivshmem-doorbell <shmem> on the slice's endpoint: runs here */
	VMM_FORM_MDEV,		/* <hostdev type='mdev'>: for hosts with a kernel mdev driver */
};

enum vmm_accel {
	VMM_ACCEL_TCG,		/* domain type 'qemu': the default, and the only one that works here */
	VMM_ACCEL_KVM,
};

/* What to put in a domain. Strings are copied into the XML, escaped; paths must be
 * absolute. Either @kernel (with optional @initrd and @cmdline) or @disk. */
struct vmm_domain {
	const char *name;
	char uuid[VMM_UUID_LEN];
	unsigned int memory_mib;
	unsigned int vcpus;
	enum vmm_accel accel;
	enum vmm_form form;
	const char *kernel, *initrd, *cmdline;
	const char *disk;
	const char *disk_format;		/* "raw" or "qcow2"; NULL: raw */
	const char *emulator;			/* QEMU binary; NULL: VMM_EMULATOR */
	const char *console_log;		/* serial to this file; NULL: a pty */
	const char *endpoint;			/* the slice's vf<N>.sock, or vf<N>.master.sock
						 * when @migratable (shmem form) */
	bool migratable;			/* <shmem role='master'> and QEMU's master=on:
						 * vgpu-vm migrate can move it */
	struct vmm_meta meta;
};

/* The <qemu:commandline> namespace, and what a migratable domain passes QEMU there. */
#define VMM_MIG_QEMU_GLOBAL	"ivshmem-doorbell.master=on"
#define VMM_QEMU_NS		"http://libvirt.org/schemas/domain/qemu/1.0"

/* Check @d: a name libvirt and a shell both take ([A-Za-z0-9._-], 1..64, not starting
 * with '-' or '.'), UUIDs, memory 64..1048576 MiB, 1..64 vCPUs, absolute paths, kernel xor
 * disk, an endpoint for the shmem form. -EINVAL with the offending field named. */
int vmm_domain_check(const struct vmm_domain *d, struct cmn_fail *e);

/* The domain XML for @d in *xml (malloc'd, the caller frees). Checks @d first. */
int vmm_xml_build(const struct vmm_domain *d, char **xml, struct cmn_fail *e);

/* Find our metadata in a domain XML. -ENOENT when the domain has none (not a vGPU
 * domain), -EINVAL when the XML or our element is malformed. When @dom_uuid is not NULL
 * it gets the domain's <uuid> ("" if absent). */
int vmm_meta_parse(const char *xml, struct vmm_meta *m, char *dom_uuid, struct cmn_fail *e);

/* Whether a process of @uid (root for the hook) may talk to the vgpud socket @path that a
 * domain's metadata names: anyone who can define a domain writes that path, and the hook
 * connects as root. Accepted: vgpud's control socket, named control.sock, a socket of root
 * (or @uid) in a vgpud runtime directory (one holding the vgpud.lock of a vgpud of root or
 * @uid: /run/vgpud, /run/vgpud-NAME, or any --runtime-dir), reached without a symbolic
 * link, '.' or '..', through directories of root (or @uid) that no one else may write
 * (sticky ones aside). 0, -ECONNREFUSED (no such file) or -EPERM, each naming the path and
 * why. */
int vmm_meta_socket_check(const char *path, uid_t uid, struct cmn_fail *e);

/* The vgpud socket for @m in *@sock: @override when given (--socket, $VGPUD_SOCKET: the
 * caller's own choice), else @m's, which vmm_meta_socket_check() must accept for this
 * process's user: 0, or its error. */
int vmm_meta_socket(const struct vmm_meta *m, const char *override, const char **sock,
		    struct cmn_fail *e);

/* The <metadata> child element for @m (malloc'd), as vmm_xml_build() writes it. */
char *vmm_meta_xml(const struct vmm_meta *m);

/* Validate @xml against libvirt's domain schema with virt-xml-validate. 0, -EINVAL with
 * the validator's first complaint, or -ENOENT when virt-xml-validate is not installed. */
int vmm_xml_validate(const char *xml, struct cmn_fail *e);

/* ---- libvirt qemu hook ------------------------------------------------------------------- */

/* The hook's work for libvirt's "qemu NAME OP SUBOP EXTRA" with the domain XML @xml:
 * "prepare begin" makes sure the slice in the metadata is started and owned by the domain
 * (failing the start with a message otherwise); "release end" releases the owner token;
 * anything else, and a domain without our metadata, is 0. Both act only for metadata whose
 * owner VM is the domain's own UUID (a clone carries another domain's): prepare fails
 * then, release does nothing (saying why at info). @socket_override (NULL: the metadata's,
 * if vmm_meta_socket() accepts it) names vgpud's socket. Never calls libvirt. */
int vmm_hook_run(const char *name, const char *op, const char *subop, const char *xml,
		 const char *socket_override, struct cmn_fail *e);

/* Whether the hook acts on libvirt's @op @subop at all: "prepare begin", "release end". */
bool vmm_hook_acts(const char *op, const char *subop);

/* ---- migration (vgpu-vm migrate, migrate.c) ----------------------------------------------- */

/* Whether slice @s, as its source vgpud reports it, can move with its VM: running, a guest
 * attached through vf<N>.master.sock that announced ABI 2.3 or later. 0, -EBUSY (not
 * running, no guest) or -EOPNOTSUPP (peer mode, an older guest or vgpud), naming why. */
int vmm_mig_slice_check(const struct vmm_slice *s, struct cmn_fail *e);

/* What changes between the source's domain XML and the destination's. */
struct vmm_mig_target {
	const char *endpoint_old, *endpoint_new;	/* the slice's vf<N>.master.sock */
	const char *socket_old, *socket_new;		/* vgpud's control socket (metadata) */
};
/* The destination's XML for domain @dom_uuid: @xml with the <shmem>'s server path and our
 * metadata's vgpud socket replaced, each of which must be there once, and QEMU's
 * master=on (a domain launched --migratable). *@out malloc'd. -EINVAL naming what is
 * missing. */
int vmm_mig_dest_xml(const char *xml, const char *dom_uuid, const struct vmm_mig_target *t,
		     char **out, struct cmn_fail *e);
/* "tcp:HOST:0" for the host libvirt URI @uri names (user and port left out, an IPv6
 * address in brackets): where the destination vgpud listens. 0, -EINVAL (no host:
 * "qemu:///system", "qemu+unix:///system") or -ENAMETOOLONG (it does not fit @len). */
int vmm_mig_listen_for(const char *uri, char *out, size_t len);
/* "tcp://HOST" for the same host: where QEMU's stream goes. The same returns. */
int vmm_mig_stream_uri(const char *uri, char *out, size_t len);
/* Room for either, and for a vgpud's "tcp:HOST:PORT" (a host name of up to 255 bytes). */
#define VMM_MIG_ADDR_MAX	272

/* The first QEMU whose TCG keeps every guest write in a live migration's dirty bitmap
 * (libvirt's version form): earlier ones lose writes made through the TCG TLB after a
 * bitmap sync, fixed upstream by "physmem: Fix migration dirty bitmap coherency with TCG
 * memory access" (9.0). */
#define VMM_QEMU_TCG_LIVE_OK	9000000ul
/* Whether domain @xml can move with its vCPUs running on QEMU @qemu_version (major *
 * 1000000 + minor * 1000 + micro): yes unless it runs under TCG (type 'qemu') on a QEMU
 * before VMM_QEMU_TCG_LIVE_OK; then why not in @why. */
bool vmm_mig_vm_live(const char *xml, unsigned long qemu_version, char *why, size_t len);

/* One progress report: @phase "slice" (the vgpuds' pre-copy: round, bytes sent, dirty
 * bytes of the last pass, bytes expected next, estimate) or "vm" (libvirt's RAM copy:
 * QEMU's pass, bytes sent, bytes left), or a one-off @note on how the VM moves. */
struct vmm_mig_progress {
	const char *phase;
	const char *note;
	unsigned int round;
	uint64_t bytes, dirty_bytes, remaining_bytes, estimate_ms;
	uint64_t elapsed_ms;		/* since the migration began */
};

struct vmm_mig_opts {
	const char *domain;		/* name or UUID on @src_uri */
	const char *src_uri, *dest_uri;	/* libvirt: here, and --to */
	const char *src_socket;		/* source vgpud (NULL: the domain's metadata) */
	const char *dest_socket;	/* destination vgpud's control socket, reachable here */
	const char *listen;		/* the destination vgpud's stream address (NULL: tcp on
					 * the host of @dest_uri, any port) */
	unsigned int max_downtime_ms;	/* QEMU's limit for the VM's stop; 0: libvirt's */
	void (*progress)(void *ctx, const struct vmm_mig_progress *p);
	void *ctx;
};

/* What a migration did. vm_downtime_ms: the VM's stop as the destination's libvirt
 * reports it (from the source's pause: QEMU's last pass, bounded by max_downtime_ms, or
 * the whole copy of a move that was not live, !vm_live: vmm_mig_vm_live()) plus the time
 * from libvirt's end of the VM's move (source stopped, destination paused) to the
 * destination's resume, the slice's switchover inside it. */
struct vmm_mig_report {
	char name[128], uuid[VMM_UUID_LEN], slice[VMM_UUID_LEN];
	uint64_t total_ms, vm_downtime_ms, slice_downtime_ms;
	uint64_t slice_bytes, vm_bytes;
	unsigned int rounds, vm_iterations;
	bool vm_live;			/* QEMU copied the RAM with the vCPUs running */
};

/* Move the running domain and its slice (the order in migrate.c). 0, or -errno with the
 * reason in @e; up to the VM's move a failure leaves both running on the source. */
int vmm_migrate(const struct vmm_mig_opts *o, struct vmm_mig_report *rep, struct cmn_fail *e);

/* The vgpu-vm tool (vmm_glue/cmd/vgpu-vm.c, man page doc/vgpu-vm.1). */
int vmm_vm_main(int argc, char **argv);

#endif
