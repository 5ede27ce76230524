// SPDX-License-Identifier: MIT
/* The libvirt qemu hook: libvirtd runs "qemu NAME OP SUBOP EXTRA" with the domain XML on
 * stdin. On "prepare begin" the slice named in our metadata must end up started and owned
 * by this domain, or the start fails here, early, with a message libvirt shows the user; on
 * "release end" the domain's owner token is released. Only a domain whose UUID is the
 * metadata's owner VM acts: a clone (virt-clone, dumpxml | define) carries the metadata of
 * the VM it was made from, and libvirt runs "release end" for its failed start too, which
 * must not take the slice from that VM while it runs. The hook runs as root and reaches
 * vgpud through the socket vmm_meta_socket() accepts; it talks only to vgpud: calling back
 * into libvirt from a hook deadlocks libvirtd. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

/* Running slice @s must be free; take it with @m's token unless it is owned already. */
static int hook_take(struct ctlc *c, const struct vmm_meta *m, const struct vmm_slice *s,
		     struct cmn_fail *e)
{
	if (s->attached)
		return cmn_fail(e, -EBUSY, "slice %s is in use: a guest is attached to VF %u",
				s->uuid, s->vf);
	if (!s->owner_vm[0])
		return vmm_slice_set_owner(c, m->slice, m->vm, m->generation, e);
	return 0;
}

/* The slice must be running, owned by @m's token (taken here if unowned) and free. A slice
 * this started is stopped again if the rest fails: libvirt does not start the domain then,
 * and a running slice without an owner or a VM is what the hook must not leave behind. Not
 * when another VM took it meanwhile (vgpud checks the token) or a guest is attached. */
static int hook_prepare(struct ctlc *c, const char *name, const struct vmm_meta *m,
			struct cmn_fail *e)
{
	struct cmn_fail ignore;
	struct vmm_slice s;
	int r = vmm_slice_query(c, m->slice, &s, e);

	if (r)
		return r;
	if (s.owner_vm[0] && (strcasecmp(s.owner_vm, m->vm) || s.owner_gen != m->generation))
		return cmn_fail(e, -EBUSY, "slice %s is owned by VM %s generation %" PRIu64 ", not "
				"by domain %s (%s generation %" PRIu64 ")", s.uuid, s.owner_vm,
				s.owner_gen, name, m->vm, m->generation);
	if (s.running)
		return hook_take(c, m, &s, e);
	r = vmm_slice_start(c, m->slice, e);
	if (r)
		return r;
	r = vmm_slice_query(c, m->slice, &s, e);
	if (!r)
		r = hook_take(c, m, &s, e);
	if (r && !s.attached)
		vmm_slice_stop(c, m->slice, m->vm, m->generation, &ignore);
	return r;
}

bool vmm_hook_acts(const char *op, const char *subop)
{
	return (!strcmp(op, "prepare") && !strcmp(subop, "begin")) ||
	       (!strcmp(op, "release") && !strcmp(subop, "end"));
}

int vmm_hook_run(const char *name, const char *op, const char *subop, const char *xml,
		 const char *socket_override, struct cmn_fail *e)
{
	bool prepare = !strcmp(op, "prepare") && !strcmp(subop, "begin");
	bool release = vmm_hook_acts(op, subop) && !prepare;
	char dom_uuid[VMM_UUID_LEN];
	struct vmm_meta m;
	const char *sock;
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
	if (release && strcasecmp(dom_uuid, m.vm)) {
		cmn_info("vgpu hook: domain %s (UUID %s) carries the owner token of VM %s: slice "
			 "%s is not released (the token is that VM's)", name, dom_uuid, m.vm,
			 m.slice);
		return 0;
	}
	r = vmm_meta_socket(&m, socket_override, &sock, e);
	if (!r)
		r = ctlc_open(sock, &c, e);
	if (r)
		return r;
	if (prepare)
		r = hook_prepare(c, name, &m, e);
	else
		r = vmm_slice_release(c, m.slice, m.vm, m.generation, e);
	ctlc_close(c);
	return r;
}
