// SPDX-License-Identifier: MIT
/* Slices: define, undefine, start, stop, modify, VF reset, and the number of VFs.
 * Each verb validates everything first and only then changes state, so a failing request
 * leaves nothing behind; with dry-run it stops after validation and reports the plan. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/mapguard.h"
#include "gpu_model/gpu.h"
#include "iommu_model/iommu.h"
#include "pma/pma.h"
#include "pf_manager/migrate_internal.h"

struct pf_slice *pf_slice_find(struct pf_daemon *d, const char *uuid)
{
	for (unsigned int i = 0; i < d->nr_slices; i++)
		if (!strcmp(d->slices[i]->uuid, uuid))
			return d->slices[i];
	return NULL;
}

unsigned int pf_free_vf(const struct pf_daemon *d)
{
	for (unsigned int vf = 1; vf <= d->num_vfs; vf++)
		if (!d->vfs[vf])
			return vf;
	return 0;
}

void pf_slice_free(struct pf_slice *s)
{
	free(s);
}

static const char *arg_str(json_object *args, const char *key)
{
	json_object *v;

	/* A NUL inside the value would make a prefix of it pass for the whole. */
	if (!args || !json_object_object_get_ex(args, key, &v) || !pf_json_str_clean(v))
		return NULL;
	return json_object_get_string(v);
}

/* The slice named by args.uuid: -EINVAL if missing or malformed, -ENOENT if unknown. */
static int slice_from_args(struct pf_daemon *d, json_object *args, struct pf_slice **out,
			   struct pf_err *e)
{
	const char *u = arg_str(args, "uuid");
	char norm[PF_UUID_STR];
	json_object *v;

	if (!args || !json_object_object_get_ex(args, "uuid", &v))
		return cmn_fail(&e->f, -EINVAL, "missing \"uuid\" (a slice's UUID)");
	if (!u)
		return cmn_fail(&e->f, -EINVAL, "\"uuid\" must be a string (a slice's UUID), "
				"not %s", pf_json_kind(v));
	if (ctlc_uuid_parse(u, norm, NULL))
		return cmn_fail(&e->f, -EINVAL, "\"%.64s\" is not a UUID", u);
	*out = pf_slice_find(d, norm);
	if (!*out)
		return cmn_fail(&e->f, -ENOENT, "slice %s not found", norm);
	return 0;
}

static void add_result(json_object *ret, const struct pf_slice *s, const char *result, bool dry)
{
	if (s)
		json_object_object_add(ret, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(ret, "result", json_object_new_string(result));
	json_object_object_add(ret, "dry_run", json_object_new_boolean(dry));
}

static json_object *quota_json(const struct pf_quota *q)
{
	json_object *o = json_object_new_object();

	pf_json_add_u64(o, "vram_bytes", q->vram);
	json_object_object_add(o, "channels", json_object_new_int(q->channels));
	json_object_object_add(o, "doorbells", json_object_new_int(q->doorbells));
	json_object_object_add(o, "exec_quantum_us", json_object_new_int64(q->exec_quantum_us));
	json_object_object_add(o, "exec_quantum_ms",
			       json_object_new_int64(pf_quantum_ms(q->exec_quantum_us)));
	json_object_object_add(o, "preempt_timeout_us", json_object_new_int(q->preempt_timeout_us));
	json_object_object_add(o, "priority", json_object_new_string(pf_priority_name(q->priority)));
	json_object_object_add(o, "rm_clients", json_object_new_int64(q->rm_clients));
	json_object_object_add(o, "rm_objects", json_object_new_int64(q->rm_objects));
	return o;
}

json_object *pf_slice_json(const struct pf_daemon *d, const struct pf_slice *s)
{
	json_object *o = pf_slice_def_json(s);
	char path[PF_PATH_MAX + 16];

	json_object_object_add(o, "parent", json_object_new_string(d->cfg.pf_id));
	json_object_object_add(o, "state", json_object_new_string(
				s->migrated_to[0] ? "migrated-out (unconfirmed)" :
				s->vf ? "running" : "defined"));
	if (s->migrated_to[0])
		json_object_object_add(o, "held", json_object_new_boolean(s->vf));
	if (s->transient)
		json_object_object_add(o, "transient", json_object_new_boolean(true));
	json_object_object_add(o, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(o, "vram_reserved", json_object_new_boolean(s->vf &&
										 s->vram_reserved));
	if (s->vf && s->reserve_why[0])
		json_object_object_add(o, "vram_reserve_error",
				       json_object_new_string(s->reserve_why));
	if (!s->vf && s->stopped_why[0])
		json_object_object_add(o, "stopped_reason", json_object_new_string(s->stopped_why));
	if (s->vf) {
		json_object *p = quota_json(&s->prov);

		pf_json_add_u64(p, "vram_base", s->base);
		pf_json_add_u64(p, "bar_bytes", s->bar_size);
		json_object_object_add(o, "provisioned", p);
		snprintf(path, sizeof(path), "%s/vf%u.sock", d->cfg.runtime_dir, s->vf);
		json_object_object_add(o, "endpoint", json_object_new_string(path));
		json_object_object_add(o, "attached", json_object_new_boolean(pf_endpoint_attached(s)));
		pf_endpoint_json(s, o);
		json_object_object_add(o, "reset_count",
				       json_object_new_int((int)s->resets));
		pf_json_add_u64(o, "interrupts_forwarded", s->intrs);
		pf_json_add_u64(o, "fault_events", s->faults);
		pf_json_add_u64(o, "chan_error_events", s->chan_errors);
	}
	return o;
}

/* ---- define / undefine ---------------------------------------------------------------- */

static bool quota_equal(const struct pf_slice *a, const struct pf_slice *b)
{
	const struct pf_quota *x = &a->custom, *y = &b->custom;
	unsigned int m = a->custom_bits;

	if (a->custom_bits != b->custom_bits)
		return false;
	return (!(m & PF_Q_VRAM) || x->vram == y->vram) &&
	       (!(m & PF_Q_CHANNELS) || x->channels == y->channels) &&
	       (!(m & PF_Q_DOORBELLS) || x->doorbells == y->doorbells) &&
	       (!(m & PF_Q_EXEC) || x->exec_quantum_us == y->exec_quantum_us) &&
	       (!(m & PF_Q_PREEMPT) || x->preempt_timeout_us == y->preempt_timeout_us) &&
	       (!(m & PF_Q_PRIO) || x->priority == y->priority) &&
	       (!(m & PF_Q_RM_CLIENTS) || x->rm_clients == y->rm_clients) &&
	       (!(m & PF_Q_RM_OBJECTS) || x->rm_objects == y->rm_objects);
}

static void diff_add(json_object *diff, const char *field, json_object *cur, json_object *req)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "field", json_object_new_string(field));
	json_object_object_add(o, "current", cur);
	json_object_object_add(o, "requested", req);
	json_object_array_add(diff, o);
}

/* Differences between two definitions as [{field, current, requested}]. */
static json_object *slice_diff(const struct pf_slice *a, const struct pf_slice *b)
{
	json_object *diff = json_object_new_array();
	json_object *ja = pf_slice_def_json(a), *jb = pf_slice_def_json(b);

	json_object_object_foreach(ja, key, va) {
		json_object *vb = NULL;

		json_object_object_get_ex(jb, key, &vb);
		if (!vb || !json_object_equal(va, vb))
			diff_add(diff, key, json_object_get(va), vb ? json_object_get(vb) : NULL);
	}
	json_object_object_foreach(jb, key2, vb2) {
		if (!json_object_object_get_ex(ja, key2, NULL))
			diff_add(diff, key2, NULL, json_object_get(vb2));
	}
	json_object_put(ja);
	json_object_put(jb);
	return diff;
}

/* The primary group of @uid (kvm for libvirt-qemu), or -1 to leave the group alone. */
static gid_t pf_owner_gid(long uid)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (uid < 0 || getpwuid_r((uid_t)uid, &pw, buf, sizeof(buf), &res) || !res)
		return (gid_t)-1;
	return pw.pw_gid;
}

static bool slice_same_spec(const struct pf_slice *a, const struct pf_slice *b)
{
	return !strcmp(a->type, b->type) && a->autostart == b->autostart && quota_equal(a, b) &&
	       !strcmp(a->owner_vm, b->owner_vm) && a->owner_gen == b->owner_gen &&
	       a->owner_uid == b->owner_uid;
}

static int conflict(struct pf_slice *cur, struct pf_slice *req, struct pf_err *e)
{
	json_object *diff = slice_diff(cur, req);
	char buf[256] = "";
	size_t n = json_object_array_length(diff);

	for (size_t i = 0; i < n && strlen(buf) < 200; i++) {
		json_object *f = NULL, *it = json_object_array_get_idx(diff, i);

		json_object_object_get_ex(it, "field", &f);
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", i ? ", " : "",
			 json_object_get_string(f));
	}
	cmn_fail(&e->f, -EEXIST, "slice %s is already defined with a different spec (differs in: %s)",
		cur->uuid, buf);
	if (e) {
		e->data = json_object_new_object();
		json_object_object_add(e->data, "diff", diff);
	} else {
		json_object_put(diff);
	}
	return -EEXIST;
}

int pf_slice_define(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		    struct pf_err *e)
{
	struct pf_slice *s = calloc(1, sizeof(*s)), *cur;
	char path[PF_PATH_MAX + 64];
	int r;

	if (!s)
		return cmn_fail(&e->f, -ENOMEM, "out of memory");
	r = pf_slice_from_json(d, args, s, e);
	if (r)
		goto free_s;
	cur = pf_slice_find(d, s->uuid);
	if (cur && cur->transient) {
		/* Its definition would outlive the stop that is meant to remove it. */
		r = cmn_fail(&e->f, -EEXIST, "slice %s is running as a transient slice (no "
			     "definition); stop it before defining it", cur->uuid);
		goto free_s;
	}
	if (cur) {
		r = slice_same_spec(cur, s) ? 0 : conflict(cur, s, e);
		if (!r)
			add_result(ret, cur, "unchanged", dry);
		goto free_s;
	}
	if (d->nr_slices >= PF_MAX_SLICES) {
		r = cmn_fail(&e->f, -ENOSPC, "too many slices defined (%u)", PF_MAX_SLICES);
		goto free_s;
	}
	add_result(ret, s, dry ? "would define" : "defined", dry);
	if (dry) {
		snprintf(path, sizeof(path), "%s/slices/%s.json", d->cfg.state_dir, s->uuid);
		json_object_object_add(ret, "file", json_object_new_string(path));
		json_object_object_add(ret, "definition", pf_slice_def_json(s));
		goto free_s;
	}
	r = pf_state_save_slice(d, s);
	if (r) {
		cmn_fail(&e->f, r, "slice %s: cannot write its definition: %s", s->uuid, cmn_strerror(r));
		goto free_s;
	}
	d->slices[d->nr_slices++] = s;
	cmn_info("slice %s defined (type %s, %s)", s->uuid, s->type, s->autostart ? "auto" : "manual");
	pf_event(d, "SLICE_DEFINED", pf_slice_def_json(s));
	return 0;
free_s:
	free(s);
	return r;
}

static void slice_remove(struct pf_daemon *d, struct pf_slice *s)
{
	for (unsigned int i = 0; i < d->nr_slices; i++) {
		if (d->slices[i] == s) {
			d->slices[i] = d->slices[--d->nr_slices];
			break;
		}
	}
	pf_slice_free(s);
}

/* An owner token, args.@key: {"vm": UUID, "generation": N >= 0 (0 if absent)}, into @vm
 * (normalised) and @gen; -EINVAL naming the member that is wrong and how otherwise. */
static int owner_token(json_object *o, const char *key, char *vm, uint64_t *gen,
		       struct pf_err *e)
{
	json_object *v;

	if (!json_object_is_type(o, json_type_object))
		return cmn_fail(&e->f, -EINVAL, "\"%s\" must be an object {\"vm\": UUID, "
				"\"generation\": N}, not %s", key, pf_json_kind(o));
	json_object_object_foreach(o, k, val) {
		(void)val;
		if (strcmp(k, "vm") && strcmp(k, "generation"))
			return cmn_fail(&e->f, -EINVAL, "unknown member \"%.64s\" in \"%s\" "
					"(it has \"vm\" and \"generation\")", k, key);
	}
	if (!json_object_object_get_ex(o, "vm", &v))
		return cmn_fail(&e->f, -EINVAL, "%s.vm is missing (the owning VM's UUID)", key);
	if (!pf_json_str_clean(v))
		return cmn_fail(&e->f, -EINVAL, "%s.vm must be a string (a VM's UUID), not %s", key,
				pf_json_kind(v));
	if (ctlc_uuid_parse(json_object_get_string(v), vm, NULL))
		return cmn_fail(&e->f, -EINVAL, "%s.vm \"%.64s\" is not a UUID", key,
				json_object_get_string(v));
	*gen = 0;
	if (!json_object_object_get_ex(o, "generation", &v))
		return 0;
	if (!json_object_is_type(v, json_type_int))
		return cmn_fail(&e->f, -EINVAL, "%s.generation must be a non-negative integer, "
				"not %s", key, pf_json_kind(v));
	if (json_object_get_int64(v) < 0)
		return cmn_fail(&e->f, -EINVAL, "%s.generation must be a non-negative integer, "
				"not %" PRId64, key, json_object_get_int64(v));
	*gen = (uint64_t)json_object_get_int64(v);
	return 0;
}

/* The caller's owner token (args.owner) must match the slice's when both exist. */
static int owner_check(const struct pf_slice *s, json_object *args, struct pf_err *e)
{
	char vm[PF_UUID_STR];
	json_object *o;
	uint64_t g;
	int r;

	if (!json_object_object_get_ex(args, "owner", &o))
		return 0;
	r = owner_token(o, "owner", vm, &g, e);
	if (r || !s->owner_vm[0])
		return r;
	if (strcasecmp(vm, s->owner_vm) || g != s->owner_gen)
		return cmn_fail(&e->f, -EBUSY,
			       "slice %s is owned by VM %s generation %" PRIu64
			       "; the request's owner token does not match", s->uuid, s->owner_vm,
			       s->owner_gen);
	return 0;
}

int pf_slice_held_fail(const struct pf_slice *s, const char *what, struct pf_err *e)
{
	char held[64] = "";

	if (s->vf)
		snprintf(held, sizeof(held), "held here with its VRAM on VF %u, nothing of it runs; ",
			 s->vf);
	return cmn_fail(&e->f, -EBUSY, "%s: slice %s migrated out to %s (unconfirmed) and may run "
			"there; %s`vgpuctl reclaim -u %s` runs it here, `vgpuctl undefine -u %s` "
			"drops it", what, s->uuid, s->migrated_to, held, s->uuid, s->uuid);
}

int pf_slice_def_write(struct pf_daemon *d, struct pf_slice *s)
{
	int r = s->transient ? 0 : pf_state_save_slice(d, s);

	s->def_pending = r != 0;
	return r;
}

int pf_slice_def_follow(struct pf_daemon *d, struct pf_slice *s, const char *what)
{
	int r = pf_slice_def_write(d, s);

	if (r)
		cmn_warn("slice %s: %s, but its definition file cannot be written: %s; the "
			 "journal holds the definition, and a stop writes the file first (or "
			 "fails)", s->uuid, what, cmn_strerror(r));
	return r;
}

/* Stop @s for good: commit first (the journal without it), since the scrub and the unlink
 * cannot be taken back. A definition file behind the journal is written before: once the
 * journal no longer names the slice, the file is all a restart finds of it. */
static int commit_stop(struct pf_daemon *d, struct pf_slice *s, struct pf_err *e)
{
	int r = s->def_pending ? pf_slice_def_write(d, s) : 0;

	if (r)
		return cmn_fail(&e->f, r, "slice %s: cannot write its definition file, which is "
				"behind the journal: %s; nothing was stopped (once the journal no "
				"longer names the slice, the file is what the next start of vgpud "
				"finds)", s->uuid, cmn_strerror(r));
	r = pf_state_save_journal_without(d, s);
	if (r)
		return cmn_fail(&e->f, r, "slice %s: cannot write the journal: %s", s->uuid,
				cmn_strerror(r));
	pf_slice_stop(d, s);
	return 0;
}

/* An undefine of a held slice lets go of its VF and VRAM first (a crash before its
 * definition goes leaves it defined, marked and stopped). */
static int held_drop(struct pf_daemon *d, struct pf_slice *s, struct pf_err *e)
{
	unsigned int vf = s->vf;
	int r = vf ? commit_stop(d, s, e) : 0;

	if (!r && vf)
		cmn_log_vf(VGPU_LOG_INFO, vf, s->uuid, "slice %s: held copy dropped (VF %u "
			   "released)", s->uuid, vf);
	return r;
}

int pf_slice_undefine(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		      struct pf_err *e)
{
	struct pf_slice *s;
	int r = slice_from_args(d, args, &s, e);

	if (r)
		return r;
	r = owner_check(s, args, e);
	if (r)
		return r;
	if (s->transient)
		return cmn_fail(&e->f, -EBUSY, "slice %s is transient (running on VF %u, no "
			       "definition): stop removes it", s->uuid, s->vf);
	if (s->vf && !pf_slice_held(s))
		return cmn_fail(&e->f, -EBUSY, "slice %s is running on VF %u; stop it first", s->uuid, s->vf);
	add_result(ret, s, dry ? "would undefine" : "undefined", dry);
	if (s->vf)
		pf_json_add_u64(ret, "releases_vram_bytes", s->prov.vram);
	if (dry)
		return 0;
	r = held_drop(d, s, e);
	if (r)
		return r;
	r = pf_state_remove_slice(d, s);
	if (r && r != -ENOENT)
		return cmn_fail(&e->f, r, "slice %s: cannot remove its definition: %s", s->uuid,
			       cmn_strerror(r));
	cmn_info("slice %s undefined", s->uuid);
	pf_event(d, "SLICE_UNDEFINED", pf_slice_def_json(s));
	slice_remove(d, s);
	return 0;
}

/* ---- start / stop ---------------------------------------------------------------------- */

static void sched_apply(struct pf_daemon *d, const struct pf_slice *s)
{
	/* Fixed share: a VF's share follows its share of the usable VRAM. */
	uint64_t weight = s->prov.vram * 1000 / pf_usable_vram(d);
	int r = pf_rm_fn_sched_set(d, s->vf, true, (uint64_t)s->prov.exec_quantum_us * 1000ull,
				   (uint64_t)s->prov.preempt_timeout_us * 1000ull, weight);

	if (r)
		cmn_warn("VF %u: scheduler settings refused: %s", s->vf, cmn_strerror(r));
}

/* A BAR object is its owner's alone (and root's): the owner's VMM gets it through the
 * endpoint's fd, never by name, so no group (kvm holds every QEMU of libvirt) opens it. */
#define PF_BAR_MODE	0600

/* Give @fd, VF @vf's BAR object @name, to owner uid @uid (-1: root) and its primary group,
 * mode PF_BAR_MODE: the owner and its group as libvirt's DAC model expects of what its
 * QEMU uses, the mode so that the group gets nothing of it. */
static void bar_object_give(int fd, unsigned int vf, const char *name, long uid)
{
	uid_t u = uid >= 0 ? (uid_t)uid : 0;
	gid_t g = uid >= 0 ? pf_owner_gid(uid) : 0;

	if (fchown(fd, u, g) || fchmod(fd, PF_BAR_MODE))
		cmn_warn("VF %u: cannot give %s to uid %ld: %s", vf, name, uid,
			 cmn_strerror(-errno));
}

/* Whether the object open at @fd (its status in *@sb) can be adopted for an owner uid
 * @uid (-1: root only) with a BAR of @size bytes, as the object @id the journal recorded
 * (NULL: an older journal, with no record); @why says what is wrong with it otherwise. It
 * is looked at, not changed: one grown past its BAR is cut back once the whole state has
 * been checked (pf_bar_object_settle()). */
static int bar_object_vet(int fd, long uid, uint64_t size, const struct pf_bar_ino *id,
			  struct stat *sb, char *why, size_t wlen)
{
	int r;

	if (fstat(fd, sb)) {
		r = -errno;
		return snprintf(why, wlen, "cannot be examined: %s", cmn_strerror(r)), r;
	}
	if (!S_ISREG(sb->st_mode))
		return snprintf(why, wlen, "is not a regular file but %s",
				pf_file_kind(sb->st_mode)), -EBADMSG;
	if (sb->st_uid != 0 && (uid < 0 || sb->st_uid != (uid_t)uid))
		return snprintf(why, wlen, "is owned by uid %u, neither root nor the slice's owner",
				(unsigned int)sb->st_uid), -EBADMSG;
	/* With fs.protected_hardlinks=0 a guest that owns its object can unlink it and link
	 * another slice's root-owned object under its name: that object then has two names,
	 * and only the inode the journal recorded tells whose it is. An extra link to the
	 * recorded object is harmless (a name grants nothing the mode does not). */
	if (id && (sb->st_ino != id->ino || sb->st_dev != id->dev))
		return snprintf(why, wlen, "is not the object this slice ran with (inode %ju, "
				"not %ju)", (uintmax_t)sb->st_ino, (uintmax_t)id->ino), -EBADMSG;
	/* No record: which of two names is the slice's own cannot be told from the file. */
	if (!id && sb->st_nlink != 1)
		return snprintf(why, wlen, "has %ju links, not 1 (another name may make it another "
				"slice's object)", (uintmax_t)sb->st_nlink), -EBADMSG;
	if ((uint64_t)sb->st_size < size)
		return snprintf(why, wlen, "has %lld bytes, less than its BAR's %" PRIu64,
				(long long)sb->st_size, size), -EBADMSG;
	return 0;
}

int pf_bar_object_settle(struct pf_daemon *d, unsigned int vf, int fd, uint64_t size,
			 char *why, size_t wlen)
{
	struct stat sb;
	char name[96];
	int r;

	pf_shm_name(d, vf, name, sizeof(name));
	if (fstat(fd, &sb)) {
		r = -errno;
		return snprintf(why, wlen, "cannot be examined: %s", cmn_strerror(r)), r;
	}
	/* Its guest may have cut it since it was vetted. */
	if ((uint64_t)sb.st_size < size)
		return snprintf(why, wlen, "has %lld bytes, less than its BAR's %" PRIu64,
				(long long)sb.st_size, size), -EBADMSG;
	if ((uint64_t)sb.st_size == size)
		return 0;
	/* Only bytes past the BAR go, which no mapping reaches. */
	if (ftruncate(fd, (off_t)size)) {
		r = -errno;
		return snprintf(why, wlen, "has %lld bytes and cannot be cut back to %" PRIu64
				": %s", (long long)sb.st_size, size, cmn_strerror(r)), r;
	}
	cmn_warn("VRAM object %s had grown to %lld bytes; cut back to its BAR's %" PRIu64, name,
		 (long long)sb.st_size, size);
	return 0;
}

/* ---- VRAM reservation ([pf] vram_prealloc) ------------------------------------------------ */

/* Allocate [@off, +@len) of @fd now; the size stays (the BAR's). tmpfs gives back what a
 * failed call allocated, so a failure leaves the object as it was; a call cut short by a
 * signal is made again. */
static int falloc_range(int fd, uint64_t off, uint64_t len)
{
	while (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len))
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Allocate what a BAR object of size @bar with @vram bytes of VRAM and @dma bytes of DMA
 * memory holds, so that no other holder of /dev/shm can take its pages away: the VRAM
 * aperture at 0, then the DMA memory and the control area at the end. The hole between
 * them (a power-of-two BAR is up to twice what it holds) stays sparse: nothing uses it. */
static int bar_reserve(int fd, uint64_t vram, uint64_t dma, uint64_t bar)
{
	uint64_t tail = dma + VF_BAR_CTRL_SIZE;
	int r = falloc_range(fd, 0, vram);

	return r ? r : falloc_range(fd, bar - tail, tail);
}

/* "512 MiB of VRAM in /dev/shm (516.5 MiB with its DMA memory and control area; 200 MiB
 * free there)": what a reservation of @vram and @dma bytes needed, and what @fd's file
 * system had left after it failed. */
static void reserve_what(char *buf, size_t len, int fd, uint64_t vram, uint64_t dma)
{
	char v[32], all[32], fr[32];
	struct statvfs sv;

	ctlc_size_format(vram, v, sizeof(v));
	ctlc_size_format(vram + dma + VF_BAR_CTRL_SIZE, all, sizeof(all));
	if (fstatvfs(fd, &sv))
		snprintf(fr, sizeof(fr), "?");
	else
		ctlc_size_format((uint64_t)sv.f_bavail * sv.f_frsize, fr, sizeof(fr));
	snprintf(buf, len, "%s of VRAM in /dev/shm (%s with its DMA memory and control area; "
		 "%s free there)", v, all, fr);
}

/* Take all of @s's object in /dev/shm ([pf] vram_prealloc), not only the VRAM: one adopted
 * unreserved may lack the rest, which costs nothing where it is allocated already. Called
 * after a reset's scrub, which punched the VRAM (the GSP, or gpu_model where the GSP holds no
 * slice memfd) and so gave its pages back, and when an object is adopted at vgpud's start.
 * One that cannot be had (@when says why it was not) runs unreserved, in the log and its
 * JSON, until its next reset or start: an adopted slice brought back stopped instead would
 * lose its guest's VRAM to the sweep of stray objects. */
static void vram_rereserve(struct pf_daemon *d, struct pf_slice *s, const char *when)
{
	char what[192];
	int r;

	if (!d->cfg.vram_prealloc)
		return;
	r = bar_reserve(s->bar_fd, s->prov.vram, s->dma_size, s->bar_size);
	if (!r) {
		if (!s->vram_reserved)
			cmn_log_vf(VGPU_LOG_INFO, s->vf, s->uuid, "VF %u: slice %s: its VRAM is "
				   "reserved again", s->vf, s->uuid);
		s->vram_reserved = true;
		s->reserve_why[0] = 0;
		return;
	}
	reserve_what(what, sizeof(what), s->bar_fd, s->prov.vram, s->dma_size);
	snprintf(s->reserve_why, sizeof(s->reserve_why), "%s, %.120s cannot be had: %s", when,
		 what, cmn_strerror(r));
	s->vram_reserved = false;
	cmn_log_vf(VGPU_LOG_WARN, s->vf, s->uuid, "VF %u: slice %s runs unreserved until its next "
		   "reset or start: %s", s->vf, s->uuid, s->reserve_why);
}

/* Whether the object @sb is the one adopted for another VF than @vf: one object never
 * backs two slices, whatever the journal recorded (an older journal records nothing, and a
 * name can be moved from one VF's to another's between two adoptions). */
static int adopted_twice(struct pf_daemon *d, unsigned int vf, const struct stat *sb,
			 char *why, size_t wlen)
{
	for (unsigned int v = 1; v <= PF_MAX_VFS; v++)
		if (v != vf && d->bar_ino[v].ino == sb->st_ino && d->bar_ino[v].dev == sb->st_dev)
			return snprintf(why, wlen, "is the object adopted for VF %u too", v),
			       -EBADMSG;
	return 0;
}

int pf_bar_object_adopt(struct pf_daemon *d, unsigned int vf, long uid, uint64_t size,
			const struct pf_bar_ino *id, int *out, char *why, size_t wlen)
{
	struct stat sb;
	char name[96];
	int fd, r;

	*out = -1;
	pf_shm_name(d, vf, name, sizeof(name));
	/* Its guest (or any local user, in its place) may have put a FIFO there, whose open
	 * waits for a writer, or taken a lease, whose open waits 45 s for the break: neither
	 * may hold up the daemon. */
	fd = shm_open(name, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		if (r == -ENOENT)
			snprintf(why, wlen, "is missing");
		else if (r == -EWOULDBLOCK)
			snprintf(why, wlen, "is held by a lease");
		else
			snprintf(why, wlen, "cannot be opened: %s", cmn_strerror(r));
		return r;
	}
	r = bar_object_vet(fd, uid, size, id, &sb, why, wlen);
	if (!r)
		r = adopted_twice(d, vf, &sb, why, wlen);
	/* Non-blocking was for the open only: the guest gets this file description. */
	if (!r && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		r = -errno;
		snprintf(why, wlen, "cannot be made blocking: %s", cmn_strerror(r));
	}
	if (r) {
		close(fd);
		return r;
	}
	d->bar_ino[vf].dev = sb.st_dev;
	d->bar_ino[vf].ino = sb.st_ino;
	*out = fd;
	return 0;
}

/* VF @vf's BAR object for @s: with @adopt the one the loader opened and vetted
 * (pf_bar_object_adopt(), already in s->bar_fd, so that what it checked is what is
 * mapped), else a new one. */
static int bar_object_open(struct pf_daemon *d, struct pf_slice *s, unsigned int vf, bool adopt,
			   struct pf_err *e)
{
	char name[96], what[192];
	struct stat sb;
	int fd, r;

	pf_shm_name(d, vf, name, sizeof(name));
	if (adopt) {
		if (s->bar_fd < 0)
			return cmn_fail(&e->f, -EBADF, "VF %u: no VRAM object %s to adopt", vf,
					name);
		/* Owner and mode as a start gives them: an object of an older vgpud (mode
		 * 0660), or one a crash left root's after the journal gave the slice an owner. */
		bar_object_give(s->bar_fd, vf, name, s->owner_uid);
		return 0;
	}
	/* A leftover of this instance that the journal did not name: stale, drop it. */
	shm_unlink(name);
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, PF_BAR_MODE);
	if (fd < 0)
		return cmn_fail(&e->f, -errno, "VF %u: cannot create %s: %s", vf, name,
			       cmn_strerror(-errno));
	if (s->owner_uid >= 0)
		bar_object_give(fd, vf, name, s->owner_uid);
	if (ftruncate(fd, (off_t)s->bar_size)) {
		r = -errno;
		close(fd);
		shm_unlink(name);
		return cmn_fail(&e->f, r, "VF %u: cannot size %s: %s", vf, name, cmn_strerror(r));
	}
	r = d->cfg.vram_prealloc ? bar_reserve(fd, s->prov.vram, s->dma_size, s->bar_size) : 0;
	if (r) {
		reserve_what(what, sizeof(what), fd, s->prov.vram, s->dma_size);
		close(fd);
		shm_unlink(name);
		cmn_fail(&e->f, r, "slice %s: cannot reserve %s for VF %u: %s", s->uuid, what, vf,
			 cmn_strerror(r));
		e->data = json_object_new_object();
		json_object_object_add(e->data, "resource", json_object_new_string("shm"));
		pf_json_add_u64(e->data, "needed_bytes", s->prov.vram + s->dma_size +
				VF_BAR_CTRL_SIZE);
		return r;
	}
	/* Its identity, which the journal records: a restart adopts this object only. */
	if (fstat(fd, &sb)) {
		r = -errno;
		close(fd);
		shm_unlink(name);
		return cmn_fail(&e->f, r, "VF %u: cannot examine %s: %s", vf, name,
				cmn_strerror(r));
	}
	d->bar_ino[vf].dev = sb.st_dev;
	d->bar_ino[vf].ino = sb.st_ino;
	s->bar_fd = fd;
	return 0;
}

/* IOVAs below this stay unmapped in every VF's domain (0 and small integers fault). */
#define PF_DMA_IOVA	(1ull << 32)

/* The VF's IOMMU domain, with BAR2's DMA memory mapped read/write at PF_DMA_IOVA; the RM
 * carves MEMORY_SYSMEM from the same memory at IOVAs above it. */
static int dma_domain_open(struct pf_daemon *d, struct pf_slice *s, unsigned int vf)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_iova_range auto_r = { .start = PF_DMA_IOVA + s->dma_size,
					   .last = (1ull << IOMMU_IOVA_BITS) - 1 };
	uint64_t iova = PF_DMA_IOVA;
	int r;

	r = iommu_memobj_register_fd(d->iommu, s->bar_fd, s->bar_size - VF_BAR_CTRL_SIZE - s->dma_size,
				     s->dma_size, &s->dma_mo);
	if (r)
		return r;
	s->dma_guard = cmn_mapguard_add(iommu_memobj_base(s->dma_mo), s->dma_size, s->bar_fd,
					s->bar_size, vf);
	if (s->dma_guard < 0) {
		r = s->dma_guard;
		goto unregister;
	}
	r = iommu_domain_alloc(d->iommu, &o, &s->dma_domain);
	if (r)
		goto unguard;
	r = iommu_allow_iovas(s->dma_domain, &auto_r, 1);
	if (!r)
		r = iommu_map(s->dma_domain, s->dma_mo, 0, s->dma_size, IOMMU_READ | IOMMU_WRITE,
			      IOMMU_MAP_FIXED_IOVA, &iova);
	if (!r)
		r = iommu_attach(d->iommu, vf, s->dma_domain);
	if (r)
		goto free_domain;
	s->dma_iova = PF_DMA_IOVA;
	return 0;
free_domain:
	iommu_domain_free(s->dma_domain);
	s->dma_domain = NULL;
unguard:
	cmn_mapguard_del(s->dma_guard);
unregister:
	iommu_memobj_unregister(s->dma_mo);
	s->dma_mo = NULL;
	return r;
}

static void dma_domain_close(struct pf_daemon *d, struct pf_slice *s)
{
	if (s->dma_domain) {
		iommu_detach(d->iommu, s->vf);
		iommu_unmap(s->dma_domain, 0, UINT64_MAX, NULL);
		if (iommu_domain_free(s->dma_domain))
			cmn_warn("VF %u: IOMMU domain still busy", s->vf);
	}
	if (s->dma_mo)
		cmn_mapguard_del(s->dma_guard);
	if (s->dma_mo && iommu_memobj_unregister(s->dma_mo))
		cmn_warn("VF %u: DMA memory object still mapped", s->vf);
	s->dma_domain = NULL;
	s->dma_mo = NULL;
	s->dma_iova = 0;
}

static void bar_object_close(struct pf_daemon *d, struct pf_slice *s, bool unlink_it)
{
	char name[96];

	dma_domain_close(d, s);
	/* Give the device its own doorbell page back before the BAR object goes. */
	if (s->bar && gpu_doorbell_page_back(d->gpu, s->vf, -1, 0))
		cmn_warn("VF %u: doorbell page not restored", s->vf);
	if (s->bar) {
		cmn_mapguard_del(s->bar_guard);
		munmap(s->bar, VF_BAR_CTRL_SIZE);
	}
	s->bar = NULL;
	s->hdr = NULL;
	if (s->bar_fd >= 0)
		close(s->bar_fd);
	s->bar_fd = -1;
	if (s->vf && s->vf <= PF_MAX_VFS)
		d->bar_ino[s->vf] = (struct pf_bar_ino){ 0 };
	if (unlink_it) {
		pf_shm_name(d, s->vf, name, sizeof(name));
		pf_dur_point("unlink");
		shm_unlink(name);
	}
}

int pf_slice_bring_up(struct pf_daemon *d, struct pf_slice *s, unsigned int vf, uint64_t base,
		      bool adopt, struct pf_err *e)
{
	int r;

	s->bar_size = vf_bar_size(s->prov.vram, d->cfg.dma_size);
	s->dma_size = d->cfg.dma_size;
	if (!adopt)
		s->bar_fd = -1;
	r = bar_object_open(d, s, vf, adopt, e);
	if (r)
		return r;
	/* The daemon maps only the control area: the VRAM part is the device's business
	 * and the DMA part the guest's. */
	s->bar = mmap(NULL, VF_BAR_CTRL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, s->bar_fd,
		      (off_t)(s->bar_size - VF_BAR_CTRL_SIZE));
	if (s->bar == MAP_FAILED) {
		s->bar = NULL;
		r = cmn_fail(&e->f, -errno, "VF %u: cannot map its BAR: %s", vf, cmn_strerror(-errno));
		goto close_bar;
	}
	/* The guest holds the object and may shrink it: vgpud's accesses must not die of it. */
	s->bar_guard = cmn_mapguard_add(s->bar, VF_BAR_CTRL_SIZE, s->bar_fd, s->bar_size, vf);
	if (s->bar_guard < 0) {
		r = cmn_fail(&e->f, s->bar_guard, "VF %u: cannot guard its BAR mapping: %s", vf,
			     cmn_strerror(s->bar_guard));
		munmap(s->bar, VF_BAR_CTRL_SIZE);
		s->bar = NULL;
		goto close_bar;
	}
	s->hdr = (struct vf_bar_header *)(s->bar + VF_BAR_HDR_CTRL_OFF);	/* BAR2's last page */
	s->nr_runlists = gpu_nr_engines(d->gpu);
	s->kick_fd = gpu_doorbell_kick_fd(d->gpu, vf);
	s->intr_fd = gpu_intr_fd(d->gpu, vf);
	/* The device's doorbell page of this VF becomes a page of the BAR: the guest's token
	 * writes reach the engines with no hop. */
	r = gpu_doorbell_page_back(d->gpu, vf, s->bar_fd, s->bar_size - VF_BAR_CTRL_SIZE + VF_BAR_DB_OFF);
	if (r) {
		cmn_fail(&e->f, r, "VF %u: cannot place its doorbell page: %s", vf, cmn_strerror(r));
		goto close_bar;
	}
	r = dma_domain_open(d, s, vf);
	if (r) {
		cmn_fail(&e->f, r, "VF %u: cannot map its DMA memory in its IOMMU domain: %s", vf,
			cmn_strerror(r));
		goto close_bar;
	}
	/* Back the device's VRAM range with the object first, so the GSP programs a
	 * partition over memory the guest already shares. */
	r = gpu_vram_slice_map(d->gpu, vf, base, s->prov.vram, s->bar_fd);
	if (r) {
		cmn_fail(&e->f, r, "VF %u: cannot map VRAM into the device: %s", vf, cmn_strerror(r));
		goto close_bar;
	}
	r = pf_rm_partition_set(d, s, vf, base);
	if (r) {
		cmn_fail(&e->f, r, "VF %u: partition [%#" PRIx64 ", +%#" PRIx64 ") refused: %s", vf, base,
			s->prov.vram, cmn_strerror(r));
		goto unmap_vram;
	}
	s->child = pf_rm_vf_pma(d, vf);
	s->vf = vf;
	s->base = base;
	d->vfs[vf] = s;
	if (!adopt || pf_bar_attach(s))
		pf_bar_format(s);
	sched_apply(d, s);
	r = pf_endpoint_open(d, s);
	if (r) {
		cmn_fail(&e->f, r, "VF %u: cannot open its endpoint: %s", vf, cmn_strerror(r));
		goto clear_partition;
	}
	s->started_ns = cmn_now_ns();
	/* A new object was reserved above, an adopted one is now. */
	s->vram_reserved = d->cfg.vram_prealloc;
	s->reserve_why[0] = 0;
	s->stopped_why[0] = 0;
	if (adopt)
		vram_rereserve(d, s, "adopted at vgpud's start");
	return 0;
clear_partition:
	d->vfs[vf] = NULL;
	s->vf = 0;
	s->child = NULL;
	/* An adopted object holds the guest's VRAM, which the state still names: the RM reset's
	 * scrub would zero it through the partition, so only the partition goes. */
	if (!adopt)
		pf_rm_partition_clear(d, vf);
	else if (pf_rm_partition_drop(d, vf))
		cmn_warn("VF %u: its partition stays programmed", vf);
unmap_vram:
	/* Unmapping scrubs: only right for an object we created. */
	if (!adopt)
		gpu_vram_slice_unmap(d->gpu, vf);
close_bar:
	s->vf = vf;
	bar_object_close(d, s, !adopt);
	s->vf = 0;
	return r;
}

int pf_slice_start(struct pf_daemon *d, struct pf_slice *s, struct pf_err *e)
{
	unsigned int vf = pf_free_vf(d);
	uint64_t base;
	int r;

	if (s->migrated_to[0])
		return pf_slice_held_fail(s, "start-slice", e);
	if (!vf)
		return cmn_fail(&e->f, -ENOSPC, "slice %s: no free VF: %u of %u enabled VFs in use%s",
			       s->uuid, d->num_vfs, d->num_vfs, d->num_vfs ? "" : " (set-vfs first)");
	r = pf_slice_quota(d, s, &s->prov, e);
	if (r)
		return r;
	r = pf_place(d, s->prov.vram, &base, e);
	if (r)
		return r;
	r = pf_slice_bring_up(d, s, vf, base, false, e);
	if (r)
		return r;
	/* The commit point: until the journal names it, the new object is a leftover that the
	 * next load drops. */
	r = pf_state_save_journal(d);
	if (r) {
		pf_slice_stop(d, s);
		return cmn_fail(&e->f, r, "slice %s: cannot write the journal: %s", s->uuid,
			       cmn_strerror(r));
	}
	cmn_log_vf(VGPU_LOG_INFO, vf, s->uuid, "%sslice %s started on VF %u: %" PRIu64 " MiB VRAM at %#"
		   PRIx64, s->transient ? "transient " : "", s->uuid, vf, s->prov.vram >> 20, base);
	pf_event(d, "SLICE_STARTED", pf_slice_json(d, s));
	return 0;
}

static json_object *plan_json(struct pf_daemon *d, unsigned int vf, const struct pf_quota *q,
			      uint64_t base)
{
	json_object *p = quota_json(q);
	char name[96];

	json_object_object_add(p, "vf", json_object_new_int((int)vf));
	pf_json_add_u64(p, "vram_base", base);
	pf_json_add_u64(p, "bar_bytes", vf_bar_size(q->vram, d->cfg.dma_size));
	pf_shm_name(d, vf, name, sizeof(name));
	json_object_object_add(p, "vram_object", json_object_new_string(name));
	return p;
}

/* A dry-run start of @s: the VF, quota and place it would get; changes nothing. */
static int start_plan(struct pf_daemon *d, struct pf_slice *s, json_object *ret, struct pf_err *e)
{
	unsigned int vf = pf_free_vf(d);
	struct pf_quota q;
	uint64_t base;
	int r;

	if (!vf)
		return cmn_fail(&e->f, -ENOSPC, "slice %s: no free VF: %u of %u enabled VFs in use",
			       s->uuid, d->num_vfs, d->num_vfs);
	r = pf_slice_quota(d, s, &q, e);
	if (!r)
		r = pf_place(d, q.vram, &base, e);
	if (r)
		return r;
	add_result(ret, s, "would start", true);
	json_object_object_add(ret, "plan", plan_json(d, vf, &q, base));
	return 0;
}

static void started_result(json_object *ret, const struct pf_slice *s)
{
	add_result(ret, s, "started", false);
	json_object_object_add(ret, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(ret, "provisioned", quota_json(&s->prov));
	if (s->transient)
		json_object_object_add(ret, "transient", json_object_new_boolean(true));
}

/* The spec of a transient start: the parent this daemon serves, a type, no start mode,
 * and a UUID no slice has yet. */
static int transient_spec(struct pf_daemon *d, json_object *args, struct pf_slice *s,
			  struct pf_err *e)
{
	const char *p = arg_str(args, "parent");
	struct pf_slice *cur;
	int r;

	if (!json_object_object_get_ex(args, "parent", NULL))
		return cmn_fail(&e->f, -EINVAL, "a transient start names its \"parent\" with its "
			       "\"type\"");
	if (!p || strcmp(p, d->cfg.pf_id))
		return cmn_fail(&e->f, -ENOENT, "parent \"%.64s\" not found (this daemon serves %s)",
			       p ? p : "(not a clean string)", d->cfg.pf_id);
	if (json_object_object_get_ex(args, "start", NULL))
		return cmn_fail(&e->f, -EINVAL, "a transient slice has no \"start\" mode (define the "
			       "slice to have one)");
	r = pf_slice_from_json(d, args, s, e);
	if (r)
		return r;
	cur = pf_slice_find(d, s->uuid);
	if (cur && cur->vf)
		return cmn_fail(&e->f, -EEXIST, "slice %s already exists (%srunning on VF %u); a "
			       "transient start creates a new one", cur->uuid,
			       cur->transient ? "transient, " : "", cur->vf);
	if (cur)
		return cmn_fail(&e->f, -EEXIST, "slice %s already exists (defined); start it by its "
			       "uuid alone", cur->uuid);
	if (d->nr_slices >= PF_MAX_SLICES)
		return cmn_fail(&e->f, -ENOSPC, "too many slices (%u)", PF_MAX_SLICES);
	s->transient = true;
	return 0;
}

/* start-slice with a "type": mdevctl's transient device. The slice is created and started
 * in one step and never gets a definition file: the journal entry, which carries its
 * definition, is its only record (so a restart of vgpud brings it back running), and its
 * stop removes it. */
static int start_transient(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			   struct pf_err *e)
{
	struct pf_slice *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return cmn_fail(&e->f, -ENOMEM, "out of memory");
	r = transient_spec(d, args, s, e);
	if (r || dry) {
		if (!r)
			r = start_plan(d, s, ret, e);
		if (!r)
			json_object_object_add(ret, "transient", json_object_new_boolean(true));
		free(s);
		return r;
	}
	d->slices[d->nr_slices++] = s;
	r = pf_slice_start(d, s, e);
	if (r) {
		slice_remove(d, s);
		return r;
	}
	started_result(ret, s);
	return 0;
}

/* A defined slice starts as its definition says: a key of a transient start's spec would
 * be ignored, so it is refused. */
static int start_keys_check(json_object *args, struct pf_err *e)
{
	if (!args)
		return 0;
	json_object_object_foreach(args, key, val) {
		(void)val;
		if (strcmp(key, "uuid") && strcmp(key, "owner") && strcmp(key, "dry-run"))
			return cmn_fail(&e->f, -EINVAL, "\"%.64s\" is for a transient start-slice "
					"(with \"type\" and \"parent\"); a defined slice starts as "
					"its definition says (modify-slice changes it)", key);
	}
	return 0;
}

int pf_slice_start_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		       struct pf_err *e)
{
	struct pf_slice *s;
	int r;

	if (args && json_object_object_get_ex(args, "type", NULL))
		return start_transient(d, args, dry, ret, e);
	r = start_keys_check(args, e);
	if (!r)
		r = slice_from_args(d, args, &s, e);
	if (r)
		return r;
	r = owner_check(s, args, e);
	if (r)
		return r;
	if (s->vf) {
		add_result(ret, s, "unchanged", dry);
		json_object_object_add(ret, "vf", json_object_new_int((int)s->vf));
		return 0;
	}
	if (dry)
		return start_plan(d, s, ret, e);
	r = pf_slice_start(d, s, e);
	if (r)
		return r;
	started_result(ret, s);
	return 0;
}

int pf_vf_reset(struct pf_daemon *d, struct pf_slice *s)
{
	int r;

	atomic_store((_Atomic uint32_t *)&s->hdr->state, VF_STATE_RESETTING);
	/* The RM disables the VF's clients (no new calls), resets its channels through the
	 * GSP, frees its objects in bounded batches and scrubs its VRAM. */
	r = pf_rm_vf_reset(d, s->vf);
	vram_rereserve(d, s, "the reset's scrub gave its pages back");
	gpu_tlb_invalidate(d->gpu, s->vf, 0, 0);
	s->resets++;
	pf_bar_format(s);
	pf_endpoint_event(s, VF_EVT_RESET, s->resets);
	return r;
}

int pf_vf_reset_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		    struct pf_err *e)
{
	struct pf_slice *s = NULL;
	json_object *v;
	int r;

	/* One of the two; pf_command() refuses both before its checks look for the slice, so
	 * that they and this command find the same one. */
	if (!json_object_object_get_ex(args, "vf", NULL) &&
	    !json_object_object_get_ex(args, "uuid", NULL))
		return cmn_fail(&e->f, -EINVAL, "reset-vf needs \"uuid\" (a slice's UUID) or "
				"\"vf\" (1..%d)", PF_MAX_VFS);
	if (json_object_object_get_ex(args, "vf", &v)) {
		int vf = json_object_get_int(v);

		if (!json_object_is_type(v, json_type_int) || vf < 1 || vf > PF_MAX_VFS)
			return cmn_fail(&e->f, -EINVAL, "\"vf\" must be 1..%d", PF_MAX_VFS);
		s = d->vfs[vf];
		if (!s)
			return cmn_fail(&e->f, -ENOENT, "VF %d has no running slice", vf);
	} else {
		r = slice_from_args(d, args, &s, e);
		if (r)
			return r;
		if (!s->vf)
			return cmn_fail(&e->f, -ENOENT, "slice %s is not running", s->uuid);
	}
	add_result(ret, s, dry ? "would reset" : "reset", dry);
	json_object_object_add(ret, "vf", json_object_new_int((int)s->vf));
	return pf_reset_request(d, s, args, dry, ret, e);
}

void pf_slice_stop(struct pf_daemon *d, struct pf_slice *s)
{
	unsigned int vf = s->vf;

	pf_reset_cancel(d, s, "the slice was stopped");
	atomic_store((_Atomic uint32_t *)&s->hdr->state, VF_STATE_STOPPED);
	pf_endpoint_event(s, VF_EVT_STOP, 0);
	pf_endpoint_close(d, s);
	pf_rm_fn_sched_set(d, vf, false, 0, 0, 0);
	pf_rm_partition_clear(d, vf);
	s->child = NULL;
	/* Unmapping scrubs the object before its range can reach another tenant. */
	gpu_vram_slice_unmap(d->gpu, vf);
	bar_object_close(d, s, true);
	d->vfs[vf] = NULL;
	s->vf = 0;
	s->base = 0;
	/* A held, migrated or broken slice starts again as any other: mailbox served,
	 * RUNNING. */
	s->mbox_held = false;
	s->bar_broken = false;
	s->vram_reserved = false;
	s->reserve_why[0] = 0;
	mig_sm_reset(&s->mig);
}

void pf_slice_hold(struct pf_daemon *d, struct pf_slice *s)
{
	if (pf_rm_fn_sched_set(d, s->vf, false, 0, 0, 0))
		cmn_warn("VF %u: its engine time cannot be taken away", s->vf);
	pf_svc_pause(s);
	s->mbox_held = true;
	pf_svc_resume(s);
	mig_sm_set(&s->mig, MIG_S_STOPPED, NULL);
}

void pf_slice_unhold(struct pf_daemon *d, struct pf_slice *s)
{
	mig_sm_set(&s->mig, MIG_S_RUNNING, NULL);
	pf_svc_pause(s);
	s->mbox_held = false;
	pf_svc_resume(s);
	/* What a guest that left meanwhile asked and made waited for it (pf_live_keep_guest()). */
	pf_endpoint_guest_left(d, s);
	sched_apply(d, s);
}

void pf_slice_bar_faults(struct pf_daemon *d)
{
	uint64_t n;

	if (read(d->bus_fd, &n, sizeof(n)) != sizeof(n))
		return;
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		uint64_t hits = cmn_mapguard_take(vf);
		struct pf_slice *s = d->vfs[vf];

		if (!hits || !s)
			continue;
		if (!s->bar_broken)
			cmn_log_vf(VGPU_LOG_ERR, vf, s->uuid, "VF %u: slice %s: a page of its BAR "
				   "object could not be reached (a process that holds the object, its "
				   "guest, shrank it, or its file system is full): %" PRIu64 " of "
				   "vgpud's accesses faulted; the slice is stopped", vf, s->uuid, hits);
		s->bar_broken = true;
		/* Until the stop: no engine works on memory that is no longer the guest's. */
		pf_rm_fn_sched_set(d, vf, false, 0, 0, 0);
	}
}

void pf_slice_stop_broken(struct pf_daemon *d)
{
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		struct pf_slice *s = d->vfs[vf];
		json_object *args, *ret;
		struct pf_err e = { 0 };

		if (!s || !s->bar_broken || pf_live_busy(d, s))
			continue;
		args = json_object_new_object();
		ret = json_object_new_object();
		json_object_object_add(args, "uuid", json_object_new_string(s->uuid));
		if (pf_slice_stop_cmd(d, args, false, ret, &e)) {
			/* Once: the engines stay off, and an admin's stop tries again. */
			cmn_log_vf(VGPU_LOG_ERR, vf, s->uuid, "VF %u: slice %s cannot be stopped: %s",
				   vf, s->uuid, e.f.msg);
			s->bar_broken = false;
		}
		json_object_put(e.data);
		json_object_put(args);
		json_object_put(ret);
	}
}

void pf_slice_detach(struct pf_daemon *d, struct pf_slice *s)
{
	pf_reset_cancel(d, s, NULL);
	pf_endpoint_close(d, s);
	bar_object_close(d, s, false);
	d->vfs[s->vf] = NULL;
}

int pf_slice_stop_cmd(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		      struct pf_err *e)
{
	struct pf_slice *s;
	unsigned int vf;
	int r = slice_from_args(d, args, &s, e);

	if (r)
		return r;
	r = owner_check(s, args, e);
	if (r)
		return r;
	if (!s->vf) {
		add_result(ret, s, "unchanged", dry);
		return 0;
	}
	vf = s->vf;
	add_result(ret, s, dry ? "would stop" : "stopped", dry);
	json_object_object_add(ret, "vf", json_object_new_int((int)vf));
	if (s->transient)
		json_object_object_add(ret, "transient", json_object_new_boolean(true));
	if (dry) {
		pf_json_add_u64(ret, "releases_vram_bytes", s->prov.vram);
		pf_json_add_u64(ret, "vram_base", s->base);
		return 0;
	}
	r = commit_stop(d, s, e);
	if (r)
		return r;
	cmn_log_vf(VGPU_LOG_INFO, vf, s->uuid, "slice %s stopped (VF %u released%s)", s->uuid, vf,
		   s->transient ? "; transient: removed" : "");
	pf_event(d, "SLICE_STOPPED", pf_slice_json(d, s));
	/* The journal without it was its last record: nothing of it is left to keep. */
	if (s->transient)
		slice_remove(d, s);
	return 0;
}

void pf_autostart(struct pf_daemon *d)
{
	for (unsigned int i = 0; i < d->nr_slices; i++) {
		struct pf_slice *s = d->slices[i];
		struct pf_err e = { 0 };

		if (!s->autostart || s->vf)
			continue;
		if (pf_slice_start(d, s, &e))
			cmn_warn("autostart of slice %s: %s", s->uuid, e.f.msg);
		json_object_put(e.data);
	}
}

/* ---- modify ---------------------------------------------------------------------------- */

/* The new spec @n: @s's definition with the request's fields laid over it (attrs are
 * appended, so a later value of the same attribute wins). */
static int modify_spec(struct pf_daemon *d, struct pf_slice *s, json_object *args,
		       struct pf_slice *n, struct pf_err *e)
{
	json_object *spec = pf_slice_def_json(s), *attrs = NULL;
	int r;

	json_object_object_get_ex(spec, "attrs", &attrs);
	json_object_object_foreach(args, key, val) {
		if (!strcmp(key, "dry-run") || !strcmp(key, "release-owner"))
			continue;
		if (!strcmp(key, "migrated_out")) {
			json_object_put(spec);
			return cmn_fail(&e->f, -EINVAL, "\"migrated_out\" is vgpud's record of a "
				       "live migration; a request cannot set it");
		}
		if (strcmp(key, "attrs")) {
			json_object_object_add(spec, key, json_object_get(val));
			continue;
		}
		if (!json_object_is_type(val, json_type_array)) {
			json_object_put(spec);
			return cmn_fail(&e->f, -EINVAL, "\"attrs\" must be an array of {name: value}");
		}
		for (size_t i = 0; i < json_object_array_length(val); i++)
			json_object_array_add(attrs, json_object_get(json_object_array_get_idx(val, i)));
	}
	/* A record: the spec is @s's own definition, hand-over record included. */
	r = pf_slice_from_record(d, spec, n, e);
	json_object_put(spec);
	return r;
}

/* "release-owner": {vm, generation}: clear the owner token in @n if, and only if, it is
 * that token; releasing an unowned slice is a no-op. Two releasers (libvirt's hook and
 * vgpu-vm) so cannot take the slice away from the VM that owns it next. */
static int modify_release_owner(const struct pf_slice *s, json_object *args,
				struct pf_slice *n, struct pf_err *e)
{
	char vm[PF_UUID_STR];
	json_object *o;
	uint64_t g;
	int r;

	if (!json_object_object_get_ex(args, "release-owner", &o))
		return 0;
	r = owner_token(o, "release-owner", vm, &g, e);
	if (r)
		return r;
	if (json_object_object_get_ex(args, "owner", NULL))
		return cmn_fail(&e->f, -EINVAL, "give either \"owner\" or \"release-owner\"");
	if (!s->owner_vm[0])
		return 0;
	if (strcasecmp(vm, s->owner_vm) || g != s->owner_gen)
		return cmn_fail(&e->f, -EBUSY, "slice %s is owned by VM %s generation %" PRIu64
			       ", not by VM %s generation %" PRIu64 "; not released", s->uuid,
			       s->owner_vm, s->owner_gen, vm, g);
	n->owner_vm[0] = 0;
	n->owner_gen = 0;
	return 0;
}

/* Only the owner token or owner uid differ: who may use the slice, not what it is. */
static bool modify_owner_only(const struct pf_slice *s, const struct pf_slice *n)
{
	return !strcmp(n->type, s->type) && n->autostart == s->autostart && quota_equal(s, n);
}

/* A running slice's owner uid may hold its BAR object (an fd, a mapping) and so its VRAM
 * and DMA memory: a chown takes none of that away, so the slice changes hands from such a
 * uid only stopped (the stop unlinks the object, the next start makes a new one). From
 * root (-1 or 0) it may: root holds everything anyway. */
static int owner_uid_check(const struct pf_slice *s, const struct pf_slice *n,
			   struct pf_err *e)
{
	if (n->owner_uid == s->owner_uid || s->owner_uid <= 0)
		return 0;
	return cmn_fail(&e->f, -EBUSY, "slice %s is running on VF %u; stop the slice first: the "
			"previous owner uid %ld may still map its BAR", s->uuid, s->vf,
			s->owner_uid);
}

/* A running slice takes new quotas only while idle, and never a new type or VRAM; its
 * owner token may change any time (a VMM takes it before its guest attaches and gives it
 * back when the guest is gone, whether or not vgpud has seen the detach yet), its owner
 * uid as owner_uid_check() says. */
static int modify_running_check(struct pf_daemon *d, struct pf_slice *s, struct pf_slice *n,
				struct pf_err *e)
{
	struct pf_err why = { 0 };
	struct pf_quota q;
	int r;

	r = owner_uid_check(s, n, e);
	if (r)
		return r;
	if (modify_owner_only(s, n))
		return 0;
	if (pf_endpoint_attached(s))
		return cmn_fail(&e->f, -EBUSY, "slice %s is in use (a guest is attached to VF %u); quotas "
			       "change only while it is idle", s->uuid, s->vf);
	r = pf_slice_quota(d, n, &q, &why);
	if (strcmp(n->type, s->type) || (!r && q.vram != s->prov.vram) ||
	    (n->custom_bits & PF_Q_VRAM) != (s->custom_bits & PF_Q_VRAM) ||
	    ((n->custom_bits & PF_Q_VRAM) && n->custom.vram != s->custom.vram))
		return cmn_fail(&e->f, -EBUSY, "slice %s is running on VF %u; stop it to change its type "
			       "or VRAM", s->uuid, s->vf);
	/* The device-wide channel and doorbell budget holds for running slices too. */
	if (r)
		return cmn_fail(&e->f, r, "slice %s: the new quota does not fit: %s", s->uuid,
				why.f.msg);
	return 0;
}

/* A running slice's endpoint sockets and BAR object change hands with its owner uid (only
 * from root: owner_uid_check()), so a new owner uid takes effect without a restart of the
 * slice. */
static void slice_give_to(struct pf_daemon *d, struct pf_slice *s, long uid)
{
	static const char *const socks[] = { "sock", "master.sock" };
	char path[PATH_MAX], name[96];
	uid_t u = uid >= 0 ? (uid_t)uid : 0;
	gid_t g = uid >= 0 ? pf_owner_gid(uid) : 0;

	for (size_t i = 0; i < sizeof(socks) / sizeof(socks[0]); i++) {
		snprintf(path, sizeof(path), "%s/vf%u.%s", d->cfg.runtime_dir, s->vf, socks[i]);
		if (lchown(path, u, g))
			cmn_warn("VF %u: cannot give %s to uid %ld: %s", s->vf, path, uid,
				 cmn_strerror(-errno));
	}
	pf_shm_name(d, s->vf, name, sizeof(name));
	if (s->bar_fd >= 0)
		bar_object_give(s->bar_fd, s->vf, name, uid);
}

/* Give @s the definition of @src: type, start mode, custom quota and owner. */
static void spec_copy(struct pf_slice *s, const struct pf_slice *src)
{
	memcpy(s->type, src->type, sizeof(s->type));
	s->autostart = src->autostart;
	s->custom = src->custom;
	s->custom_bits = src->custom_bits;
	memcpy(s->owner_vm, src->owner_vm, sizeof(s->owner_vm));
	s->owner_gen = src->owner_gen;
	s->owner_uid = src->owner_uid;
}

/* A running slice's commit point is the journal, which carries its definition and its
 * provisioned quota together; the definition file follows (a loader repairs it if a crash
 * came between). On failure @s and the RM's limits are as before. Only the definition and
 * the quota are saved and put back: the rest of @s belongs to its service thread and its
 * endpoint meanwhile, and the quota is published under the service lock. */
static int modify_commit_running(struct pf_daemon *d, struct pf_slice *s, struct pf_slice *n,
				 const struct pf_quota *prov, struct pf_err *e)
{
	struct pf_slice old = { 0 };
	int r;

	spec_copy(&old, s);
	old.prov = s->prov;
	spec_copy(s, n);
	pf_svc_set_prov(s, prov);
	r = pf_state_save_journal(d);
	if (r) {
		spec_copy(s, &old);
		pf_svc_set_prov(s, &old.prov);
		pf_rm_quota_set(d, s->vf, &s->prov);
		return cmn_fail(&e->f, r, "slice %s: cannot write the journal: %s", s->uuid,
			       cmn_strerror(r));
	}
	pf_slice_def_follow(d, s, "modified");	/* the journal's commit stands */
	s->owner_uid = old.owner_uid;	/* slice_give_to() below compares */
	return 0;
}

/* Apply a checked spec: the RM's limits first (it refuses limits below use), then the
 * commit (the definition file, or the journal for a running slice), then the live
 * settings. */
static int modify_commit(struct pf_daemon *d, struct pf_slice *s, struct pf_slice *n,
			 struct pf_err *e)
{
	struct pf_quota prov;
	int r;

	if (s->vf) {
		/* Checked by modify_running_check() unless only the owner changes; an owner's
		 * change keeps the counts, which the budget takes back for the slice. */
		r = pf_slice_quota(d, n, &prov, e);
		if (r)
			return r;
		prov.vram = s->prov.vram;
		r = pf_rm_quota_set(d, s->vf, &prov);
		if (r)
			return cmn_fail(&e->f, r, "slice %s: the RM refused the new quota: %s", s->uuid,
				       cmn_strerror(r));
	}
	r = s->vf ? modify_commit_running(d, s, n, &prov, e) : pf_state_save_slice(d, n);
	if (r && !s->vf)
		cmn_fail(&e->f, r, "slice %s: cannot write its definition: %s", s->uuid,
			 cmn_strerror(r));
	if (r)
		return r;
	if (!s->vf)
		s->def_pending = false;		/* the file is the definition now */
	if (s->vf && s->owner_uid != n->owner_uid)
		slice_give_to(d, s, n->owner_uid);
	spec_copy(s, n);
	if (s->vf) {
		s->hdr->channels = s->prov.channels;
		s->hdr->doorbells = s->prov.doorbells;
		s->hdr->exec_quantum_ms = pf_quantum_ms(s->prov.exec_quantum_us);
		s->hdr->preempt_timeout_us = s->prov.preempt_timeout_us;
		sched_apply(d, s);
	}
	return 0;
}

int pf_slice_modify(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
		    struct pf_err *e)
{
	struct pf_slice *s, *n;
	int r = slice_from_args(d, args, &s, e);

	if (!r)
		r = owner_check(s, args, e);
	if (r)
		return r;
	n = calloc(1, sizeof(*n));
	if (!n)
		return cmn_fail(&e->f, -ENOMEM, "out of memory");
	r = modify_spec(d, s, args, n, e);
	if (!r)
		r = modify_release_owner(s, args, n, e);
	if (!r && s->transient && n->autostart)
		r = cmn_fail(&e->f, -EINVAL, "slice %s is transient: it has no start mode (stop it and "
			     "define it to have one)", s->uuid);
	if (!r && slice_same_spec(s, n)) {
		add_result(ret, s, "unchanged", dry);
		goto free_n;
	}
	if (!r && s->vf)
		r = modify_running_check(d, s, n, e);
	if (r)
		goto free_n;
	add_result(ret, s, dry ? "would modify" : "modified", dry);
	json_object_object_add(ret, "diff", slice_diff(s, n));
	if (!dry)
		r = modify_commit(d, s, n, e);
	if (!r && !dry)
		pf_event(d, "SLICE_MODIFIED", pf_slice_json(d, s));
free_n:
	free(n);
	return r;
}

/* ---- number of VFs --------------------------------------------------------------------- */

int pf_set_vfs(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
	       struct pf_err *e)
{
	json_object *v;
	int64_t n;
	unsigned int running = 0;

	if (!json_object_object_get_ex(args, "num_vfs", &v))
		return cmn_fail(&e->f, -EINVAL, "set-vfs needs \"num_vfs\", an integer 0..%u",
				d->cfg.max_vfs);
	if (!json_object_is_type(v, json_type_int))
		return cmn_fail(&e->f, -EINVAL, "\"num_vfs\" must be an integer 0..%u, not %s",
				d->cfg.max_vfs, pf_json_kind(v));
	n = json_object_get_int64(v);
	if (n < 0 || n > d->cfg.max_vfs)
		return cmn_fail(&e->f, -ERANGE, "%" PRId64 " VFs requested; the maximum is %u", n,
			       d->cfg.max_vfs);
	json_object_object_add(ret, "num_vfs", json_object_new_int((int)n));
	json_object_object_add(ret, "dry_run", json_object_new_boolean(dry));
	if ((unsigned int)n == d->num_vfs) {
		json_object_object_add(ret, "result", json_object_new_string("unchanged"));
		return 0;
	}
	if (n && d->num_vfs)
		return cmn_fail(&e->f, -EBUSY, "%u VFs already enabled. Disable before enabling %" PRId64
			       " VFs", d->num_vfs, n);
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		running += d->vfs[vf] != NULL;
	if (!n && running)
		return cmn_fail(&e->f, -EBUSY, "%u slices are running on VFs; stop them first", running);
	json_object_object_add(ret, "result", json_object_new_string(dry ? "would set" : "set"));
	if (n)
		pf_json_add_u64(ret, "fair_vram_bytes", pf_fair_vram(pf_usable_vram(d), (unsigned int)n));
	if (dry)
		return 0;
	running = d->num_vfs;
	d->num_vfs = (unsigned int)n;
	if (pf_state_save_journal(d)) {
		d->num_vfs = running;
		return cmn_fail(&e->f, -EIO, "cannot write the journal; VFs unchanged");
	}
	cmn_info("%u VFs enabled", d->num_vfs);
	v = json_object_new_object();
	json_object_object_add(v, "num_vfs", json_object_new_int((int)n));
	pf_event(d, "VFS_CHANGED", v);
	pf_autostart(d);
	return 0;
}
