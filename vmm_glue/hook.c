// SPDX-License-Identifier: MIT
/* The libvirt qemu hook: libvirtd runs "qemu NAME OP SUBOP EXTRA" with the domain XML on
 * stdin. On "prepare begin" the slice named in our metadata must end up started and owned
 * by this domain, or the start fails here, early, with a message libvirt shows the user; on
 * "release end" the domain's owner token is released. The hook talks only to vgpud (and to
 * the QEMU it precedes): calling back into libvirt from a hook deadlocks libvirtd.
 *
 * A migratable domain's QEMU waits at start for a client on its migration monitor
 * (VMM_MIG_QMP_DIR, wait=on): on "prepare begin" the hook leaves a detached process behind
 * that is that client and sets QEMU's x-ignore-shared capability, which libvirt does not.
 * QEMU is blocked until then, so the capability is set before libvirt can even start an
 * incoming migration into it, and on whichever host libvirt starts the domain. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"

#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

/* The slice must be running, owned by @m's token (taken here if unowned) and free. */
static int hook_prepare(struct ctlc *c, const char *name, const struct vmm_meta *m,
			struct cmn_fail *e)
{
	struct vmm_slice s;
	int r = vmm_slice_query(c, m->slice, &s, e);

	if (r)
		return r;
	if (s.owner_vm[0] && (strcasecmp(s.owner_vm, m->vm) || s.owner_gen != m->generation))
		return cmn_fail(e, -EBUSY, "slice %s is owned by VM %s generation %" PRIu64 ", not "
				"by domain %s (%s generation %" PRIu64 ")", s.uuid, s.owner_vm,
				s.owner_gen, name, m->vm, m->generation);
	if (!s.running) {
		r = vmm_slice_start(c, m->slice, e);
		if (r)
			return r;
		r = vmm_slice_query(c, m->slice, &s, e);
		if (r)
			return r;
	}
	if (s.attached)
		return cmn_fail(e, -EBUSY, "slice %s is in use: a guest is attached to VF %u",
				s.uuid, s.vf);
	if (!s.owner_vm[0])
		return vmm_slice_set_owner(c, m->slice, m->vm, m->generation, e);
	return 0;
}

#define HOOK_MON_WAIT_S	60	/* libvirt gives QEMU less than this to start */

/* The detached monitor client: wait for QEMU's socket, then set the capability. */
static void hook_mig_monitor_child(const char *path)
{
	uint64_t deadline = cmn_now_ns() + HOOK_MON_WAIT_S * 1000000000ull;
	struct cmn_fail e = { 0 };
	struct stat sb;

	while (stat(path, &sb) || !S_ISSOCK(sb.st_mode)) {
		if (cmn_now_ns() > deadline)
			_exit(1);
		usleep(2000);
	}
	_exit(vmm_mig_qmp_ignore_shared(path, &e) ? 1 : 0);
}

/* Leave the monitor's client behind, detached from libvirtd (its own session, stdio on
 * /dev/null: libvirtd waits for the hook's output to end). 0 or -errno. */
static int hook_mig_monitor(const char *path, struct cmn_fail *e)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return cmn_fail(e, -errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);

		setsid();
		if (fork() != 0)
			_exit(0);
		for (int fd = 0; fd < 3; fd++)
			dup2(nul, fd);
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		hook_mig_monitor_child(path);
	}
	waitpid(pid, &st, 0);
	return 0;
}

int vmm_hook_run(const char *name, const char *op, const char *subop, const char *xml,
		 const char *socket_override, struct cmn_fail *e)
{
	bool prepare = !strcmp(op, "prepare") && !strcmp(subop, "begin");
	bool release = !strcmp(op, "release") && !strcmp(subop, "end");
	char dom_uuid[VMM_UUID_LEN];
	struct vmm_meta m;
	struct ctlc *c;
	int r;

	if (!prepare && !release)
		return 0;
	r = vmm_meta_parse(xml, &m, dom_uuid, e);
	if (r == -ENOENT)
		return 0;	/* not a vGPU domain: none of our business */
	if (r)
		return prepare ? r : 0;
	if (prepare && strcasecmp(dom_uuid, m.vm))
		return cmn_fail(e, -EINVAL, "domain %s (UUID %s) carries the owner token of VM %s: "
				"its vGPU metadata belongs to another domain (regenerate it with "
				"vgpu-vm xml)", name, dom_uuid, m.vm);
	r = ctlc_open(socket_override ? socket_override : m.socket, &c, e);
	if (r)
		return r;
	if (prepare)
		r = hook_prepare(c, name, &m, e);
	else
		r = vmm_slice_release(c, m.slice, m.vm, m.generation, e);
	ctlc_close(c);
	if (!r && prepare) {
		char mon[VMM_PATH_MAX + 64];

		if (!vmm_mig_qmp_path(xml, dom_uuid, mon, sizeof(mon)))
			r = hook_mig_monitor(mon, e);
	}
	return r;
}
