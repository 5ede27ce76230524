// SPDX-License-Identifier: MIT
/* The libvirt side of vgpu-vm: connect, start (transient or persistent), wait, look up,
 * stop, list. libvirt's own error printing is silenced; every failure is returned with
 * libvirt's message in the cmn_fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "common/clock.h"
#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

struct vmm_virt {
	virConnectPtr conn;
	char uri[256];
};

static void quiet(void *opaque, virErrorPtr err)
{
	(void)opaque;
	(void)err;
}

/* The errno for libvirt's last error, and its message into @e. */
static int virt_fail(struct cmn_fail *e, const char *what)
{
	virErrorPtr v = virGetLastError();
	int code = v ? v->code : VIR_ERR_INTERNAL_ERROR, r;

	switch (code) {
	case VIR_ERR_NO_DOMAIN:
		r = -ENOENT;
		break;
	case VIR_ERR_DOM_EXIST: case VIR_ERR_OPERATION_INVALID:
		r = -EEXIST;
		break;
	case VIR_ERR_XML_ERROR: case VIR_ERR_XML_DETAIL: case VIR_ERR_CONFIG_UNSUPPORTED:
	case VIR_ERR_INVALID_ARG:
		r = -EINVAL;
		break;
	case VIR_ERR_AUTH_FAILED: case VIR_ERR_ACCESS_DENIED: case VIR_ERR_AUTH_CANCELLED:
		r = -EACCES;
		break;
	case VIR_ERR_NO_CONNECT: case VIR_ERR_SYSTEM_ERROR:
		r = strstr(what, "connect") ? -ECONNREFUSED : -EIO;
		break;
	default:
		r = -EIO;
		break;
	}
	return cmn_fail(e, r, "%s: %s", what, virGetLastErrorMessage());
}

int vmm_virt_open(const char *uri, struct vmm_virt **out, struct cmn_fail *e)
{
	struct vmm_virt *v = calloc(1, sizeof(*v));
	char what[320];

	*out = NULL;
	if (!v)
		return cmn_fail(e, -ENOMEM, "out of memory");
	virSetErrorFunc(NULL, quiet);
	snprintf(v->uri, sizeof(v->uri), "%s", uri);
	v->conn = virConnectOpen(uri);
	if (!v->conn) {
		snprintf(what, sizeof(what), "cannot connect to libvirt at %s (is libvirtd "
			 "running? without systemd: virtlogd -d && libvirtd -d)", uri);
		virt_fail(e, what);
		e->err = -ECONNREFUSED;
		free(v);
		return -ECONNREFUSED;
	}
	*out = v;
	return 0;
}

void vmm_virt_close(struct vmm_virt *v)
{
	if (!v)
		return;
	if (v->conn)
		virConnectClose(v->conn);
	free(v);
}

/* Whether the call that just failed did so because libvirtd could not load its domain
 * schema, not because of the XML: libxml2 before 2.11 (Debian 12 has 2.9) registers the
 * RELAX NG datatype library unsafely, and the first two validations a fresh libvirtd runs
 * side by side can fail with "Unable to parse RNG ... is not exported by type library".
 * Nothing was defined or started; the same call again finds the schema loaded. */
static bool virt_schema_race(void)
{
	virErrorPtr err = virGetLastError();

	return err && err->message && strstr(err->message, "Unable to parse RNG");
}

#define VIRT_SCHEMA_TRIES	3

int vmm_virt_launch(struct vmm_virt *v, const char *xml, bool persistent, struct cmn_fail *e)
{
	virDomainPtr dom = NULL;
	int r = 0;

	for (int i = 0; !dom && i < VIRT_SCHEMA_TRIES && (!i || virt_schema_race()); i++)
		dom = persistent ? virDomainDefineXMLFlags(v->conn, xml, VIR_DOMAIN_DEFINE_VALIDATE)
				 : virDomainCreateXML(v->conn, xml, VIR_DOMAIN_START_VALIDATE);
	if (!persistent) {
		if (!dom)
			return virt_fail(e, "libvirt did not start the domain");
		virDomainFree(dom);
		return 0;
	}
	if (!dom)
		return virt_fail(e, "libvirt did not define the domain");
	if (virDomainCreate(dom)) {
		r = virt_fail(e, "libvirt did not start the domain");
		/* Define and start are one step for the user: a start that fails leaves no
		 * definition behind. */
		virDomainUndefine(dom);
	}
	virDomainFree(dom);
	return r;
}

/* Gone (a transient domain after shutoff) or shut off. */
static bool virt_ended(struct vmm_virt *v, const char *uuid)
{
	virDomainPtr dom = virDomainLookupByUUIDString(v->conn, uuid);
	int state = VIR_DOMAIN_NOSTATE, reason;
	bool ended;

	if (!dom)
		return true;
	ended = virDomainGetState(dom, &state, &reason, 0) < 0 || state == VIR_DOMAIN_SHUTOFF;
	virDomainFree(dom);
	return ended;
}

/* How often --wait looks at the domain (one libvirt call, one vgpud query until the guest
 * attaches, the console's new bytes): its end, and the stage lines, are seen at most this
 * late. Cheap enough that a 2-core host running the guest does not feel it. */
#define VMM_WAIT_POLL_US	50000

int vmm_virt_wait(struct vmm_virt *v, const char *uuid, unsigned int timeout_s,
		  void (*tick)(void *ctx), void *ctx, struct cmn_fail *e)
{
	uint64_t deadline = cmn_now_ns() + (uint64_t)timeout_s * 1000000000ull;

	while (!virt_ended(v, uuid)) {
		if (tick)
			tick(ctx);
		if (timeout_s && cmn_now_ns() >= deadline) {
			vmm_virt_stop(v, uuid, false, NULL);
			return cmn_fail(e, -ETIMEDOUT, "domain %s still ran after %u s; destroyed it",
					uuid, timeout_s);
		}
		usleep(VMM_WAIT_POLL_US);
	}
	return 0;
}

static const char *state_name(int s)
{
	switch (s) {
	case VIR_DOMAIN_RUNNING: return "running";
	case VIR_DOMAIN_BLOCKED: return "blocked";
	case VIR_DOMAIN_PAUSED: return "paused";
	case VIR_DOMAIN_SHUTDOWN: return "shutting down";
	case VIR_DOMAIN_SHUTOFF: return "shut off";
	case VIR_DOMAIN_CRASHED: return "crashed";
	case VIR_DOMAIN_PMSUSPENDED: return "suspended";
	default: return "unknown";
	}
}

static void info_fill(virDomainPtr dom, struct vmm_vm_info *info)
{
	int state = VIR_DOMAIN_NOSTATE, reason;
	char *xml;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", virDomainGetName(dom));
	virDomainGetUUIDString(dom, info->uuid);
	virDomainGetState(dom, &state, &reason, 0);
	info->state = state_name(state);
	info->persistent = virDomainIsPersistent(dom) == 1;
	xml = virDomainGetXMLDesc(dom, 0);
	info->has_meta = xml && !vmm_meta_parse(xml, &info->meta, NULL, NULL);
	free(xml);
}

static virDomainPtr virt_find(struct vmm_virt *v, const char *name_or_uuid)
{
	virDomainPtr dom = NULL;

	if (!ctlc_uuid_parse(name_or_uuid, NULL, NULL))
		dom = virDomainLookupByUUIDString(v->conn, name_or_uuid);
	return dom ? dom : virDomainLookupByName(v->conn, name_or_uuid);
}

int vmm_virt_lookup(struct vmm_virt *v, const char *name_or_uuid, struct vmm_vm_info *info,
		    struct cmn_fail *e)
{
	virDomainPtr dom = virt_find(v, name_or_uuid);

	if (!dom)
		return cmn_fail(e, -ENOENT, "no domain \"%.100s\" on %s", name_or_uuid, v->uri);
	info_fill(dom, info);
	virDomainFree(dom);
	return 0;
}

int vmm_virt_stop(struct vmm_virt *v, const char *uuid, bool undefine, struct cmn_fail *e)
{
	virDomainPtr dom = virDomainLookupByUUIDString(v->conn, uuid);
	int r = 0;

	if (!dom)
		return 0;	/* a transient domain that has already ended */
	if (virDomainIsActive(dom) == 1 && virDomainDestroy(dom) &&
	    virDomainIsActive(dom) == 1)
		r = virt_fail(e, "libvirt did not destroy the domain");
	if (!r && undefine && virDomainIsPersistent(dom) == 1 &&
	    virDomainUndefineFlags(dom, VIR_DOMAIN_UNDEFINE_NVRAM))
		r = virt_fail(e, "libvirt did not undefine the domain");
	virDomainFree(dom);
	return r;
}

int vmm_virt_list(struct vmm_virt *v, struct vmm_vm_info **out, size_t *n, struct cmn_fail *e)
{
	virDomainPtr *doms = NULL;
	int cnt = virConnectListAllDomains(v->conn, &doms, 0);

	*out = NULL;
	*n = 0;
	if (cnt < 0)
		return virt_fail(e, "libvirt did not list the domains");
	*out = calloc((size_t)cnt + 1, sizeof(**out));
	if (!*out) {
		for (int i = 0; i < cnt; i++)
			virDomainFree(doms[i]);
		free(doms);
		return cmn_fail(e, -ENOMEM, "out of memory");
	}
	for (int i = 0; i < cnt; i++) {
		info_fill(doms[i], &(*out)[i]);
		virDomainFree(doms[i]);
	}
	free(doms);
	*n = (size_t)cnt;
	return 0;
}

/* ---- migration ------------------------------------------------------------------------------ */

int vmm_virt_xml(struct vmm_virt *v, const char *uuid, bool migratable, char **xml,
		 struct cmn_fail *e)
{
	virDomainPtr dom = virDomainLookupByUUIDString(v->conn, uuid);

	*xml = NULL;
	if (!dom)
		return cmn_fail(e, -ENOENT, "no domain %s on %s", uuid, v->uri);
	*xml = virDomainGetXMLDesc(dom, migratable ? VIR_DOMAIN_XML_MIGRATABLE : 0);
	virDomainFree(dom);
	return *xml ? 0 : virt_fail(e, "libvirt gave no domain XML");
}

int vmm_virt_migrate(struct vmm_virt *v, const char *uuid, const char *dest_uri,
		     const char *mig_uri, const char *dest_xml, bool live,
		     unsigned int max_downtime_ms, struct cmn_fail *e)
{
	virDomainPtr dom = virDomainLookupByUUIDString(v->conn, uuid);
	virTypedParameterPtr par = NULL;
	int npar = 0, maxpar = 0, r = 0;
	/* The source libvirtd talking to the destination's itself, and the destination left
	 * paused: vgpu-vm switches the slice over while neither side's vCPUs run (what QEMU's
	 * pause-before-switchover would give, which libvirt does not expose). */
	unsigned int flags = (live ? VIR_MIGRATE_LIVE : 0) | VIR_MIGRATE_PEER2PEER |
			     VIR_MIGRATE_PAUSED;

	if (!dom)
		return cmn_fail(e, -ENOENT, "no domain %s on %s", uuid, v->uri);
	if (max_downtime_ms && virDomainMigrateSetMaxDowntime(dom, max_downtime_ms, 0)) {
		r = virt_fail(e, "libvirt did not take the maximum downtime");
		goto out;
	}
	if (virTypedParamsAddString(&par, &npar, &maxpar, VIR_MIGRATE_PARAM_DEST_XML, dest_xml) ||
	    (mig_uri && virTypedParamsAddString(&par, &npar, &maxpar, VIR_MIGRATE_PARAM_URI,
						mig_uri))) {
		r = cmn_fail(e, -ENOMEM, "out of memory");
		goto out;
	}
	if (virDomainMigrateToURI3(dom, dest_uri, par, (unsigned int)npar, flags))
		r = virt_fail(e, "libvirt did not migrate the domain");
out:
	virTypedParamsFree(par, npar);
	virDomainFree(dom);
	return r;
}

int vmm_virt_qemu_version(struct vmm_virt *v, unsigned long *version, struct cmn_fail *e)
{
	if (virConnectGetVersion(v->conn, version) || !*version)
		return virt_fail(e, "libvirt does not say which QEMU it runs");
	return 0;
}

int vmm_virt_job(struct vmm_virt *v, const char *uuid, bool completed, struct vmm_virt_job *j)
{
	virDomainPtr dom = virDomainLookupByUUIDString(v->conn, uuid);
	virTypedParameterPtr par = NULL;
	int npar = 0, type = 0;
	unsigned long long u;

	memset(j, 0, sizeof(*j));
	if (!dom)
		return -ENOENT;
	if (virDomainGetJobStats(dom, &type, &par, &npar,
				 completed ? VIR_DOMAIN_JOB_STATS_COMPLETED : 0)) {
		virDomainFree(dom);
		return -EIO;
	}
	j->active = type != VIR_DOMAIN_JOB_NONE;
	if (virTypedParamsGetULLong(par, npar, VIR_DOMAIN_JOB_MEMORY_PROCESSED, &u) == 1 ||
	    virTypedParamsGetULLong(par, npar, VIR_DOMAIN_JOB_DATA_PROCESSED, &u) == 1)
		j->processed = u;
	if (virTypedParamsGetULLong(par, npar, VIR_DOMAIN_JOB_MEMORY_REMAINING, &u) == 1 ||
	    virTypedParamsGetULLong(par, npar, VIR_DOMAIN_JOB_DATA_REMAINING, &u) == 1)
		j->remaining = u;
	if (virTypedParamsGetULLong(par, npar, VIR_DOMAIN_JOB_DOWNTIME, &u) == 1)
		j->downtime_ms = u;
	if (virTypedParamsGetULLong(par, npar, VIR_DOMAIN_JOB_MEMORY_ITERATION, &u) == 1)
		j->iteration = u;
	virTypedParamsFree(par, npar);
	virDomainFree(dom);
	return 0;
}

int vmm_virt_resume(struct vmm_virt *v, const char *uuid, struct cmn_fail *e)
{
	virDomainPtr dom = virDomainLookupByUUIDString(v->conn, uuid);
	int r = 0;

	if (!dom)
		return cmn_fail(e, -ENOENT, "no domain %s on %s", uuid, v->uri);
	if (virDomainResume(dom))
		r = virt_fail(e, "libvirt did not resume the domain");
	virDomainFree(dom);
	return r;
}
