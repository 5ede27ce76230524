// SPDX-License-Identifier: MIT
/* vgpu-vm migrate: a running VM and its slice to another host, libvirt moving the VM and
 * the two vgpuds moving the slice (their migrate-* control verbs, doc/migration.md).
 *
 * The order, each step checked before the next:
 *   1. the slice can move: its guest is attached through vf<N>.master.sock (ivshmem peer
 *      0, the only mode QEMU migrates) and announced ABI 2.3 (it reads vgpud's peer id
 *      from the header); anything else is refused before either side changes;
 *   2. the destination vgpud listens (migrate-incoming), the source sends the slice while
 *      the guest runs (migrate-outgoing, a "vmm" switchover: manual) until it has converged;
 *   3. libvirt migrates the VM live (with its vCPUs paused where QEMU's TCG cannot:
 *      vmm_mig_vm_live()), peer to peer, into a destination that stays paused, with a
 *      destination XML naming the destination's endpoint and vgpud. QEMU copies
 *      the slice's BAR as RAM: x-ignore-shared, which would leave it to the vgpuds, needs
 *      an ignored block at the same guest-physical address on both ends, and a PCI BAR is
 *      not mapped yet on the destination when QEMU loads RAM ("Mismatched GPAs"). The
 *      source's "vmm" switchover sends again, after QEMU's last pass (step 4), every page
 *      it sent while QEMU copied and every page that changed since, so its bytes win;
 *   4. with the source's vCPUs stopped and the destination's not yet running, the slice
 *      switches over (migrate-switchover: its last pass), then the destination resumes.
 * Until step 4 a failure cancels the slice's migration on both vgpuds and the VM keeps
 * running on the source. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/clock.h"
#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"
#include <vgpu/version.h>

#define MIG_POLL_US		100000		/* status polls while the copies run */
#define MIG_CONVERGE_S		600		/* the slice's pre-copy must converge by then */
#define MIG_SWITCH_S		120		/* and its last pass end by then */

/* ---- what can move, and the destination's XML ------------------------------------------- */

int vmm_mig_slice_check(const struct vmm_slice *s, struct cmn_fail *e)
{
	if (!s->running)
		return cmn_fail(e, -EBUSY, "slice %s is not running: there is nothing to migrate "
				"live", s->uuid);
	if (!s->attached)
		return cmn_fail(e, -EBUSY, "slice %s has no guest attached: is its VM running?",
				s->uuid);
	if (!s->endpoint_master[0])
		return cmn_fail(e, -EOPNOTSUPP, "slice %s: its vgpud has no vf<N>.master.sock "
				"(older than ABI 2.3): it cannot migrate a guest", s->uuid);
	if (!s->guest_peer0)
		return cmn_fail(e, -EOPNOTSUPP, "slice %s: its guest is attached through %s (ivshmem "
				"peer mode), which QEMU cannot migrate; relaunch the VM with "
				"vgpu-vm launch --migratable", s->uuid, s->endpoint);
	if (!s->guest_abi[0])
		return cmn_fail(e, -EOPNOTSUPP, "slice %s: its guest driver speaks vGPU ABI 2.2 or "
				"older (it did not announce its version); migration needs 2.%u",
				s->uuid, VGPU_ABI_MINOR_MIGRATE);
	if (strncmp(s->guest_abi, "2.", 2) || atoi(s->guest_abi + 2) < VGPU_ABI_MINOR_MIGRATE)
		return cmn_fail(e, -EOPNOTSUPP, "slice %s: its guest driver speaks vGPU ABI %s; "
				"migration needs 2.%u or later", s->uuid, s->guest_abi,
				VGPU_ABI_MINOR_MIGRATE);
	return 0;
}

/* Replace the one occurrence of @old, as an attribute value in either quote, by @new in
 * *@xml. 0, or -EINVAL when it is missing or not alone. */
static int xml_swap_attr(char **xml, const char *attr, const char *old, const char *new)
{
	struct vmm_buf pat = { 0 }, out = { 0 };
	const char *q = "'";
	char *at, *next;

	for (int i = 0; i < 2; i++, q = "\"") {
		free(pat.s);
		memset(&pat, 0, sizeof(pat));
		vmm_buf_printf(&pat, "%s=%s", attr, q);
		vmm_buf_xml(&pat, old);
		vmm_buf_printf(&pat, "%s", q);
		if (pat.oom)
			break;
		at = strstr(*xml, pat.s);
		if (!at)
			continue;
		next = strstr(at + 1, pat.s);
		if (next)
			break;
		vmm_buf_printf(&out, "%.*s%s=%s", (int)(at - *xml), *xml, attr, q);
		vmm_buf_xml(&out, new);
		vmm_buf_printf(&out, "%s%s", q, at + pat.len);
		free(pat.s);
		if (out.oom) {
			free(out.s);
			return -ENOMEM;
		}
		free(*xml);
		*xml = out.s;
		return 0;
	}
	free(pat.s);
	return -EINVAL;
}

int vmm_mig_dest_xml(const char *xml, const char *dom_uuid, const struct vmm_mig_target *t,
		     char **out, struct cmn_fail *e)
{
	int r;

	*out = NULL;
	if (!strstr(xml, VMM_MIG_QEMU_GLOBAL))
		return cmn_fail(e, -EINVAL, "domain %s does not give QEMU %s: it was not launched "
				"with vgpu-vm launch --migratable", dom_uuid, VMM_MIG_QEMU_GLOBAL);
	*out = strdup(xml);
	if (!*out)
		return cmn_fail(e, -ENOMEM, "out of memory");
	r = xml_swap_attr(out, "path", t->endpoint_old, t->endpoint_new);
	if (r) {
		cmn_fail(e, r, "the domain XML has no single <server path='%s'/> (the slice's "
			 "endpoint on the source)", t->endpoint_old);
		goto fail;
	}
	r = xml_swap_attr(out, "socket", t->socket_old, t->socket_new);
	if (r) {
		cmn_fail(e, r, "the domain XML's vgpu metadata does not name vgpud socket %s",
			 t->socket_old);
		goto fail;
	}
	return 0;
fail:
	free(*out);
	*out = NULL;
	return r;
}

/* The host of libvirt URI @uri ("qemu+tcp://HOST/system", "qemu+tcp://user@HOST:16509/system",
 * "qemu+tcp://[v6]:16509/system"): *@h and its length *@n, an IPv6 address with its
 * brackets. -EINVAL when the URI names none ("qemu:///system", "qemu+unix:///system"). */
static int uri_host(const char *uri, const char **h, size_t *n)
{
	const char *p = strstr(uri, "://"), *end, *at;

	if (!p)
		return -EINVAL;
	p += 3;
	end = p + strcspn(p, "/?");
	at = memchr(p, '@', (size_t)(end - p));
	if (at)
		p = at + 1;
	if (*p == '[') {		/* [v6]:port */
		const char *c = memchr(p, ']', (size_t)(end - p));

		if (!c)
			return -EINVAL;
		end = c + 1;
	} else if (memchr(p, ':', (size_t)(end - p))) {
		end = memchr(p, ':', (size_t)(end - p));
	}
	if (end == p)
		return -EINVAL;
	*h = p;
	*n = (size_t)(end - p);
	return 0;
}

/* @pre, @uri's host and @post into @out: -ENAMETOOLONG rather than a cut host. */
static int host_between(const char *uri, const char *pre, const char *post, char *out,
			size_t len)
{
	const char *h;
	size_t n;
	int r = uri_host(uri, &h, &n);

	if (r)
		return r;
	if ((size_t)snprintf(out, len, "%s%.*s%s", pre, (int)n, h, post) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* The destination vgpud listens where libvirt reaches. */
int vmm_mig_listen_for(const char *uri, char *out, size_t len)
{
	return host_between(uri, "tcp:", ":0", out, len);
}

/* QEMU's stream goes where libvirt reached the destination: the destination's own idea of
 * its host name may resolve to something else (or to this host). */
int vmm_mig_stream_uri(const char *uri, char *out, size_t len)
{
	return host_between(uri, "tcp://", "", out, len);
}

/* ---- the two vgpuds ------------------------------------------------------------------------ */

/* The migration record of @uuid in migrate-status (owned by the caller), or NULL. */
static json_object *mig_record(struct ctlc *c, const char *uuid, struct cmn_fail *e)
{
	json_object *ret, *arr, *rec = NULL, *v;
	json_object *a = json_object_new_object();

	json_object_object_add(a, "uuid", json_object_new_string(uuid));
	if (ctlc_exec(c, "migrate-status", a, &ret, e))
		return NULL;
	if (json_object_object_get_ex(ret, "migrations", &arr) &&
	    json_object_is_type(arr, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			json_object *r = json_object_array_get_idx(arr, i);

			if (json_object_object_get_ex(r, "uuid", &v) &&
			    !strcasecmp(json_object_get_string(v), uuid))
				rec = json_object_get(r);
		}
	}
	json_object_put(ret);
	if (!rec)
		cmn_fail(e, -ENOENT, "vgpud (%s) has no migration of slice %s", ctlc_path(c), uuid);
	return rec;
}

static const char *rec_str(json_object *r, const char *k)
{
	json_object *v;

	return r && json_object_object_get_ex(r, k, &v) && json_object_is_type(v, json_type_string) ?
		json_object_get_string(v) : "";
}

static uint64_t rec_u64(json_object *r, const char *k)
{
	json_object *v;

	return r && json_object_object_get_ex(r, k, &v) ? json_object_get_uint64(v) : 0;
}

static int mig_exec(struct ctlc *c, const char *cmd, const char *uuid, const char *k1,
		    const char *v1, const char *k2, const char *v2, json_object **ret,
		    struct cmn_fail *e)
{
	json_object *a = json_object_new_object();

	if (uuid)
		json_object_object_add(a, "uuid", json_object_new_string(uuid));
	if (k1)
		json_object_object_add(a, k1, json_object_new_string(v1));
	if (k2)
		json_object_object_add(a, k2, json_object_new_string(v2));
	return ctlc_exec(c, cmd, a, ret, e);
}

/* ---- the whole move ----------------------------------------------------------------------- */

struct mig_run {
	const struct vmm_mig_opts *o;
	struct vmm_mig_report *rep;
	struct vmm_virt *src, *dst;
	struct ctlc *sc, *dc;		/* source and destination vgpud */
	struct vmm_vm_info info;
	struct vmm_slice s;
	char *xml, *dest_xml;
	char listen[VMM_MIG_ADDR_MAX];
	char mig_uri[VMM_MIG_ADDR_MAX];	/* QEMU's stream: tcp://HOST of --to, "": libvirt's */
	uint64_t t0;
	bool incoming, outgoing;	/* what to cancel if it fails */
	/* the libvirt thread */
	pthread_t thr;
	int mig_ret;
	struct cmn_fail mig_err;
	volatile int mig_done;
};

static void progress(struct mig_run *m, struct vmm_mig_progress *p)
{
	p->elapsed_ms = (cmn_now_ns() - m->t0) / 1000000;
	if (m->o->progress)
		m->o->progress(m->o->ctx, p);
}

/* Step 1: the domain, the slice, both vgpuds. */
static int mig_preflight(struct mig_run *m, struct cmn_fail *e)
{
	const struct vmm_mig_opts *o = m->o;
	const char *ssock;
	int r = vmm_virt_open(o->src_uri, &m->src, e);

	if (!r)
		r = vmm_virt_lookup(m->src, o->domain, &m->info, e);
	if (r)
		return r;
	if (!m->info.has_meta)
		return cmn_fail(e, -EINVAL, "domain %s has no vGPU slice (no vgpu-vm metadata)",
				m->info.name);
	if (strcmp(m->info.state, "running"))
		return cmn_fail(e, -EBUSY, "domain %s is %s: only a running domain migrates live",
				m->info.name, m->info.state);
	r = vmm_meta_socket(&m->info.meta, o->src_socket, &ssock, e);
	if (r)
		return r;
	if (!strcmp(ssock, o->dest_socket))
		return cmn_fail(e, -EINVAL, "--dest-socket %s is the source's vgpud: name the "
				"destination host's vgpud control socket", o->dest_socket);
	r = ctlc_open(ssock, &m->sc, e);
	if (!r)
		r = vmm_slice_query(m->sc, m->info.meta.slice, &m->s, e);
	if (!r)
		r = vmm_mig_slice_check(&m->s, e);
	if (!r)
		r = ctlc_open(o->dest_socket, &m->dc, e);
	if (!r)
		r = vmm_virt_xml(m->src, m->info.uuid, true, &m->xml, e);
	if (!r && !strstr(m->xml, VMM_MIG_QEMU_GLOBAL))
		r = cmn_fail(e, -EOPNOTSUPP, "domain %s does not give QEMU %s: it was not "
			     "launched with vgpu-vm launch --migratable", m->info.name,
			     VMM_MIG_QEMU_GLOBAL);
	if (r)
		return r;
	/* A URI without a host (qemu+unix://) leaves QEMU's stream to the destination
	 * libvirtd: mig_uri "" goes to libvirt as NULL. */
	r = vmm_mig_stream_uri(o->dest_uri, m->mig_uri, sizeof(m->mig_uri));
	if (r == -ENAMETOOLONG)
		return cmn_fail(e, r, "--to %s: its host is too long for QEMU's stream URI (%zu "
				"bytes at most)", o->dest_uri, sizeof(m->mig_uri) - 1);
	if (r)
		m->mig_uri[0] = 0;
	return 0;
}

/* Step 2: the slice's pre-copy, until the source waits for its switchover. */
static int mig_slice_precopy(struct mig_run *m, struct cmn_fail *e)
{
	const struct vmm_mig_opts *o = m->o;
	uint64_t deadline = cmn_now_ns() + MIG_CONVERGE_S * 1000000000ull;
	json_object *ret = NULL, *v;
	int r;

	if (o->listen) {
		if ((size_t)snprintf(m->listen, sizeof(m->listen), "%s", o->listen) >=
		    sizeof(m->listen))
			return cmn_fail(e, -ENAMETOOLONG, "--listen %.64s...: longer than %zu "
					"bytes", o->listen, sizeof(m->listen) - 1);
	} else {
		r = vmm_mig_listen_for(o->dest_uri, m->listen, sizeof(m->listen));
		if (r == -ENAMETOOLONG)
			return cmn_fail(e, r, "--to %s: its host is too long for a listen address "
					"(%zu bytes at most): give --listen ADDR", o->dest_uri,
					sizeof(m->listen) - 1);
		if (r)
			return cmn_fail(e, r, "--to %s names no host: give --listen ADDR",
					o->dest_uri);
	}
	r = mig_exec(m->dc, "migrate-incoming", m->s.uuid, "listen", m->listen, NULL, NULL, &ret, e);
	if (r)
		return r;
	m->incoming = true;
	/* The source connects to the address bound: a cut one would be another. */
	if (json_object_object_get_ex(ret, "listen", &v) &&
	    (size_t)snprintf(m->listen, sizeof(m->listen), "%s", json_object_get_string(v)) >=
	    sizeof(m->listen))
		r = cmn_fail(e, -ENAMETOOLONG, "the destination vgpud listens on %.64s...: longer "
			     "than %zu bytes", json_object_get_string(v), sizeof(m->listen) - 1);
	json_object_put(ret);
	if (r)
		return r;
	r = mig_exec(m->sc, "migrate-outgoing", m->s.uuid, "to", m->listen, "switchover",
		     "vmm", NULL, e);
	if (r)
		return r;
	m->outgoing = true;
	for (;;) {
		json_object *rec = mig_record(m->sc, m->s.uuid, e);
		struct vmm_mig_progress p = { .phase = "slice" };
		const char *st;

		if (!rec)
			return e->err;
		st = rec_str(rec, "status");
		p.round = (unsigned int)rec_u64(rec, "round");
		p.bytes = rec_u64(rec, "bytes");
		p.dirty_bytes = rec_u64(rec, "dirty_bytes");
		p.remaining_bytes = rec_u64(rec, "remaining_bytes");
		p.estimate_ms = rec_u64(rec, "estimate_ms");
		progress(m, &p);
		if (!strcmp(st, "failed") || !strcmp(st, "cancelled")) {
			r = cmn_fail(e, -EIO, "the slice's migration %s: %s", st,
				     rec_str(rec, "error"));
			json_object_put(rec);
			return r;
		}
		json_object_put(rec);
		if (!strcmp(st, "waiting"))
			return 0;
		if (cmn_now_ns() > deadline)
			return cmn_fail(e, -ETIMEDOUT, "the slice's pre-copy did not converge in %u s",
					MIG_CONVERGE_S);
		usleep(MIG_POLL_US);
	}
}

/* The destination's slice, loaded so far, with its endpoint: where its QEMU attaches. */
static int mig_dest_endpoint(struct mig_run *m, struct vmm_slice *ds, struct cmn_fail *e)
{
	int r = vmm_slice_query(m->dc, m->s.uuid, ds, e);

	if (r)
		return r;
	if (!ds->endpoint_master[0])
		return cmn_fail(e, -EOPNOTSUPP, "the destination vgpud (%s) gives slice %s no "
				"vf<N>.master.sock for its QEMU", m->o->dest_socket, m->s.uuid);
	return 0;
}

/* The value of <domain type=...> in @xml: "qemu" (TCG), "kvm", ...; "" if none. */
static void xml_domain_type(const char *xml, char *out, size_t len)
{
	const char *d = strstr(xml, "<domain"), *end = d ? strchr(d, '>') : NULL;
	const char *t = d ? strstr(d, " type=") : NULL;
	size_t n;

	out[0] = 0;
	if (!t || !end || t > end || (t[6] != '\'' && t[6] != '"'))
		return;
	n = strcspn(t + 7, t[6] == '\'' ? "'" : "\"");
	if (t + 7 + n < end && n < len)
		snprintf(out, len, "%.*s", (int)n, t + 7);
}

bool vmm_mig_vm_live(const char *xml, unsigned long qemu_version, char *why, size_t len)
{
	char type[16];

	xml_domain_type(xml, type, sizeof(type));
	if (strcmp(type, "qemu") || qemu_version >= VMM_QEMU_TCG_LIVE_OK)
		return true;
	snprintf(why, len, "QEMU %lu.%lu.%lu under TCG loses guest writes made while it copies "
		 "RAM live (fixed in QEMU 9.0): the VM's RAM moves with its vCPUs paused",
		 qemu_version / 1000000, qemu_version / 1000 % 1000, qemu_version % 1000);
	return false;
}

static void *mig_thread(void *arg)
{
	struct mig_run *m = arg;

	m->mig_ret = vmm_virt_migrate(m->src, m->info.uuid, m->o->dest_uri,
				      m->mig_uri[0] ? m->mig_uri : NULL, m->dest_xml,
				      m->rep->vm_live, m->o->max_downtime_ms, &m->mig_err);
	__atomic_store_n(&m->mig_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Step 3: libvirt moves the VM, the slice's BAR with it as RAM (see the top). */
static int mig_vm(struct mig_run *m, struct cmn_fail *e)
{
	struct vmm_mig_target t = { .endpoint_old = m->s.endpoint_master,
				    .socket_old = m->info.meta.socket,
				    .socket_new = m->o->dest_socket };
	struct vmm_slice ds;
	unsigned long qemu_version;
	char why[200];
	int r = mig_dest_endpoint(m, &ds, e);

	if (!r)
		r = vmm_virt_qemu_version(m->src, &qemu_version, e);
	if (r)
		return r;
	m->rep->vm_live = vmm_mig_vm_live(m->xml, qemu_version, why, sizeof(why));
	if (!m->rep->vm_live) {
		struct vmm_mig_progress p = { .phase = "vm", .note = why };

		progress(m, &p);
	}
	t.endpoint_new = ds.endpoint_master;
	r = vmm_mig_dest_xml(m->xml, m->info.uuid, &t, &m->dest_xml, e);
	if (r)
		return r;
	if (pthread_create(&m->thr, NULL, mig_thread, m))
		return cmn_fail(e, -EAGAIN, "cannot start the migration thread");
	while (!__atomic_load_n(&m->mig_done, __ATOMIC_ACQUIRE)) {
		struct vmm_virt_job j;

		if (!vmm_virt_job(m->src, m->info.uuid, false, &j) && j.active) {
			struct vmm_mig_progress p = { .phase = "vm", .round = (unsigned int)j.iteration,
						      .bytes = j.processed,
						      .remaining_bytes = j.remaining };

			progress(m, &p);
			m->rep->vm_bytes = j.processed;
			m->rep->vm_iterations = (unsigned int)j.iteration;
		}
		usleep(MIG_POLL_US);
	}
	pthread_join(m->thr, NULL);
	if (m->mig_ret) {
		*e = m->mig_err;
		return m->mig_ret;
	}
	return 0;
}

/* Step 4: the slice's last pass while no vCPU runs, then the destination resumes. */
static int mig_switchover(struct mig_run *m, struct cmn_fail *e)
{
	uint64_t t_stop = cmn_now_ns(), deadline = t_stop + MIG_SWITCH_S * 1000000000ull;
	struct vmm_virt_job j;
	json_object *rec;
	int r = mig_exec(m->sc, "migrate-switchover", m->s.uuid, NULL, NULL, NULL, NULL, NULL, e);

	for (; !r; usleep(MIG_POLL_US / 10)) {
		const char *st;

		rec = mig_record(m->sc, m->s.uuid, e);
		if (!rec)
			return e->err;
		st = rec_str(rec, "status");
		if (!strcmp(st, "completed")) {
			m->rep->slice_bytes = rec_u64(rec, "bytes");
			m->rep->rounds = (unsigned int)rec_u64(rec, "round") + 1;
			m->rep->slice_downtime_ms = rec_u64(rec, "downtime_ms");
			json_object_put(rec);
			break;
		}
		if (!strcmp(st, "failed") || !strcmp(st, "cancelled"))
			r = cmn_fail(e, -EIO, "the slice's switchover %s: %s", st,
				     rec_str(rec, "error"));
		else if (cmn_now_ns() > deadline)
			r = cmn_fail(e, -ETIMEDOUT, "the slice's switchover did not end in %u s",
				     MIG_SWITCH_S);
		json_object_put(rec);
	}
	if (r)
		return r;
	r = vmm_virt_open(m->o->dest_uri, &m->dst, e);
	if (!r)
		r = vmm_virt_resume(m->dst, m->info.uuid, e);
	m->rep->vm_downtime_ms = (cmn_now_ns() - t_stop) / 1000000;
	/* The destination keeps the incoming migration's figures: the VM's stop before
	 * t_stop (libvirt's, from the source's pause: all of a paused move) and the RAM it
	 * moved. */
	if (!r && !vmm_virt_job(m->dst, m->info.uuid, true, &j)) {
		m->rep->vm_downtime_ms += j.downtime_ms;
		if (j.processed)
			m->rep->vm_bytes = j.processed;
		if (j.iteration)
			m->rep->vm_iterations = (unsigned int)j.iteration;
	}
	return r;
}

/* Undo what a failed move started, so that the slice runs on the source untouched. */
static void mig_cancel(struct mig_run *m)
{
	struct cmn_fail ignore;

	if (m->outgoing)
		mig_exec(m->sc, "migrate-cancel", m->s.uuid, NULL, NULL, NULL, NULL, NULL, &ignore);
	/* The destination's migration has the slice's UUID once the stream began, and was
	 * opened for that UUID only: cancel it by the UUID, then by the address (not yet
	 * connected). */
	if (m->incoming &&
	    mig_exec(m->dc, "migrate-cancel", m->s.uuid, NULL, NULL, NULL, NULL, NULL, &ignore))
		mig_exec(m->dc, "migrate-cancel", NULL, "listen", m->listen, NULL, NULL, NULL,
			 &ignore);
}

int vmm_migrate(const struct vmm_mig_opts *o, struct vmm_mig_report *rep, struct cmn_fail *e)
{
	struct mig_run m = { .o = o, .rep = rep, .t0 = cmn_now_ns() };
	int r;

	memset(rep, 0, sizeof(*rep));
	r = mig_preflight(&m, e);
	if (!r) {
		snprintf(rep->name, sizeof(rep->name), "%s", m.info.name);
		snprintf(rep->uuid, sizeof(rep->uuid), "%s", m.info.uuid);
		snprintf(rep->slice, sizeof(rep->slice), "%s", m.s.uuid);
		r = mig_slice_precopy(&m, e);
	}
	if (!r)
		r = mig_vm(&m, e);
	if (r) {
		mig_cancel(&m);
	} else {
		r = mig_switchover(&m, e);
		if (r) {
			char why[sizeof(e->msg)];

			snprintf(why, sizeof(why), "%s", e->msg);
			cmn_fail(e, r, "%s; the VM was moved and is paused on %s", why, o->dest_uri);
		}
	}
	rep->total_ms = (cmn_now_ns() - m.t0) / 1000000;
	free(m.xml);
	free(m.dest_xml);
	ctlc_close(m.sc);
	ctlc_close(m.dc);
	vmm_virt_close(m.src);
	vmm_virt_close(m.dst);
	return r;
}
