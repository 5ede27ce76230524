// SPDX-License-Identifier: MIT
/* Control commands: one handler per "execute" name; queries build their reply from the
 * live state, mutating commands go through slice.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/err.h"
#include "common/log.h"
#include "common/version.h"
#include "gpu_model/gpu.h"
#include "pma/pma.h"
#include "pf_manager/migrate_internal.h"

typedef int (*pf_cmd_fn)(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			 struct pf_err *e);

/* What a slice of @t would get if started now: for the auto type, the fair share of the
 * enabled VFs and the channels and doorbells derived from it. NULL without enabled VFs. */
static json_object *type_derived(struct pf_daemon *d, const struct pf_type *t,
				 struct pf_quota *q)
{
	struct pf_slice *probe = calloc(1, sizeof(*probe));
	struct pf_err why = { 0 };
	json_object *o = NULL;

	if (probe) {
		snprintf(probe->type, sizeof(probe->type), "%s", t->name);
		if (!pf_slice_quota(d, probe, q, &why)) {
			o = json_object_new_object();
			pf_json_add_u64(o, "vram_bytes", q->vram);
			json_object_object_add(o, "channels", json_object_new_int((int)q->channels));
			json_object_object_add(o, "doorbells", json_object_new_int((int)q->doorbells));
		}
	}
	json_object_put(why.data);
	free(probe);
	return o;
}

/* How many more slices of @t could start now, as mdevctl's available_instances: bounded
 * by the type's max instances, the free VFs and the free VRAM. 0 when not creatable. */
static unsigned int type_available(struct pf_daemon *d, const struct pf_type *t,
				   unsigned int running, const struct pf_quota *q)
{
	struct pma_stats st;
	unsigned int free_vfs = 0, n;

	for (unsigned int vf = 1; vf <= d->num_vfs && vf <= PF_MAX_VFS; vf++)
		free_vfs += !d->vfs[vf];
	n = t->max_instances > running ? t->max_instances - running : 0;
	n = cmn_min(n, free_vfs);
	pma_get_stats(d->pma, &st);
	if (q->vram && st.free_bytes / q->vram < n)
		n = (unsigned int)(st.free_bytes / q->vram);
	return n;
}

/* A type's "derived" quota (auto type) and "available_instances", as of now. */
static void type_add_now(struct pf_daemon *d, const struct pf_type *t, unsigned int running,
			 bool creatable, json_object *o)
{
	struct pf_quota q = t->q;
	json_object *dv = t->q.vram ? NULL : type_derived(d, t, &q);

	if (dv)
		json_object_object_add(o, "derived", dv);
	json_object_object_add(o, "available_instances", json_object_new_int(
		creatable ? (int)type_available(d, t, running, &q) : 0));
}

static int cmd_query_types(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			   struct pf_err *e)
{
	json_object *arr = json_object_new_array();

	(void)args; (void)dry; (void)e;
	for (unsigned int i = 0; i < d->nr_types; i++) {
		const struct pf_type *t = &d->types[i];
		struct pf_err why = { 0 };
		json_object *o = json_object_new_object();
		unsigned int running = 0;
		int r;

		for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
			running += d->vfs[vf] && !strcmp(d->vfs[vf]->type, t->name);
		json_object_object_add(o, "name", json_object_new_string(t->name));
		pf_json_add_u64(o, "vram_bytes", t->q.vram);
		json_object_object_add(o, "fair_share", json_object_new_boolean(!t->q.vram));
		json_object_object_add(o, "channels", json_object_new_int((int)t->q.channels));
		json_object_object_add(o, "doorbells", json_object_new_int((int)t->q.doorbells));
		json_object_object_add(o, "exec_quantum_us", json_object_new_int64(t->q.exec_quantum_us));
		json_object_object_add(o, "rm_clients", json_object_new_int64(t->q.rm_clients));
		json_object_object_add(o, "rm_objects", json_object_new_int64(t->q.rm_objects));
		json_object_object_add(o, "max_instances", json_object_new_int((int)t->max_instances));
		json_object_object_add(o, "running", json_object_new_int((int)running));
		json_object_object_add(o, "supported", json_object_new_boolean(true));
		r = pf_type_creatable(d, t, &why);
		json_object_object_add(o, "creatable", json_object_new_boolean(!r));
		type_add_now(d, t, running, !r, o);
		if (r)
			json_object_object_add(o, "reason", json_object_new_string(why.f.msg));
		json_object_put(why.data);
		json_object_array_add(arr, o);
	}
	json_object_object_add(ret, "schema", json_object_new_int(1));
	json_object_object_add(ret, "parent", json_object_new_string(d->cfg.pf_id));
	json_object_object_add(ret, "types", arr);
	return 0;
}

static int cmd_query_slices(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			    struct pf_err *e)
{
	json_object *arr = json_object_new_array(), *v;
	const char *only = NULL;
	char norm[PF_UUID_STR];

	(void)dry;
	if (args && json_object_object_get_ex(args, "uuid", &v)) {
		if (!pf_json_str_clean(v)) {
			json_object_put(arr);
			return cmn_fail(&e->f, -EINVAL, "\"uuid\" must be a string (a slice's "
					"UUID), not %s", pf_json_kind(v));
		}
		if (ctlc_uuid_parse(json_object_get_string(v), norm, NULL)) {
			json_object_put(arr);
			return cmn_fail(&e->f, -EINVAL, "\"%.64s\" is not a UUID", json_object_get_string(v));
		}
		only = norm;
		if (!pf_slice_find(d, norm)) {
			json_object_put(arr);
			return cmn_fail(&e->f, -ENOENT, "slice %s not found", norm);
		}
	}
	for (unsigned int i = 0; i < d->nr_slices; i++)
		if (!only || !strcmp(only, d->slices[i]->uuid))
			json_object_array_add(arr, pf_slice_json(d, d->slices[i]));
	json_object_object_add(ret, "schema", json_object_new_int(1));
	json_object_object_add(ret, "parent", json_object_new_string(d->cfg.pf_id));
	json_object_object_add(ret, "slices", arr);
	return 0;
}

static const char *policy_name(int p)
{
	return p == GPU_SCHED_EQUAL_SHARE ? "equal-share" :
	       p == GPU_SCHED_FIXED_SHARE ? "fixed-share" : "best-effort";
}

static int cmd_query_status(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			    struct pf_err *e)
{
	struct pma_stats st;
	unsigned int running = 0, transient = 0;
	uint64_t reserved = 0;
	uint32_t ch, db;

	(void)args; (void)dry; (void)e;
	pma_get_stats(d->pma, &st);
	pf_used_counts(d, &ch, &db);
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		const struct pf_slice *s = d->vfs[vf];

		running += s != NULL;
		/* What /dev/shm holds for the slices that are reserved (vram_prealloc). */
		if (s && s->vram_reserved)
			reserved += s->prov.vram + s->dma_size + VF_BAR_CTRL_SIZE;
	}
	for (unsigned int i = 0; i < d->nr_slices; i++)
		transient += d->slices[i]->transient;
	json_object_object_add(ret, "schema", json_object_new_int(1));
	json_object_object_add(ret, "parent", json_object_new_string(d->cfg.pf_id));
	json_object_object_add(ret, "model", json_object_new_string(d->cfg.model));
	pf_json_add_u64(ret, "vram_bytes", d->cfg.vram_size);
	pf_json_add_u64(ret, "spare_vram_bytes", d->cfg.spare_vram);
	pf_json_add_u64(ret, "usable_vram_bytes", pf_usable_vram(d));
	pf_json_add_u64(ret, "free_vram_bytes", st.free_bytes);
	pf_json_add_u64(ret, "largest_free_bytes", st.largest_free_bytes);
	pf_json_add_u64(ret, "free_vram_bytes_at_start", d->pma_free_at_start);
	json_object_object_add(ret, "max_vfs", json_object_new_int((int)d->cfg.max_vfs));
	json_object_object_add(ret, "num_vfs", json_object_new_int((int)d->num_vfs));
	json_object_object_add(ret, "vfs_in_use", json_object_new_int((int)running));
	json_object_object_add(ret, "slices_defined",
			       json_object_new_int((int)(d->nr_slices - transient)));
	json_object_object_add(ret, "slices_transient", json_object_new_int((int)transient));
	json_object_object_add(ret, "channels_total", json_object_new_int((int)d->cfg.channels));
	json_object_object_add(ret, "channels_used", json_object_new_int((int)ch));
	json_object_object_add(ret, "doorbells_total", json_object_new_int((int)d->cfg.doorbells));
	json_object_object_add(ret, "doorbells_used", json_object_new_int((int)db));
	pf_json_add_u64(ret, "control_refused", d->ctl_refused);
	pf_json_add_u64(ret, "rm_teardown_batches", d->teardown_batches);
	pf_json_add_u64(ret, "resets_acknowledged", d->resets_acked);
	pf_json_add_u64(ret, "resets_timed_out", d->resets_timed_out);
	json_object_object_add(ret, "reset_evict_ms", json_object_new_int((int)d->cfg.reset_evict_ms));
	json_object_object_add(ret, "vram_prealloc", json_object_new_boolean(d->cfg.vram_prealloc));
	pf_json_add_u64(ret, "shm_reserved_bytes", reserved);
	json_object_object_add(ret, "sched_policy",
			       json_object_new_string(policy_name(d->cfg.sched_policy)));
	json_object_object_add(ret, "sched_quantum_us", json_object_new_int64(d->cfg.sched_quantum_us));
	json_object_object_add(ret, "runtime_dir", json_object_new_string(d->cfg.runtime_dir));
	json_object_object_add(ret, "state_dir", json_object_new_string(d->cfg.state_dir));
	pf_json_add_u64(ret, "device_resets", d->device_resets_seen);
	json_object_object_add(ret, "uptime_ms",
			       json_object_new_int64((int64_t)((cmn_now_ns() - d->started_ns) / 1000000)));
	return 0;
}

static json_object *vf_stats(struct pf_daemon *d, struct pf_slice *s)
{
	json_object *o = json_object_new_object(), *sc = json_object_new_object();
	json_object *db = json_object_new_object(), *rpc = json_object_new_object();
	struct gpu_sched_stats ss;
	struct gpu_db_stats ds;

	gpu_sched_stats(d->gpu, s->vf, &ss);
	gpu_db_stats(d->gpu, s->vf, &ds);
	json_object_object_add(o, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(o, "uuid", json_object_new_string(s->uuid));
	pf_json_add_u64(sc, "run_ns", ss.run_ns);
	pf_json_add_u64(sc, "preempt_ns", ss.preempt_ns);
	pf_json_add_u64(sc, "idle_ns", ss.idle_ns);
	pf_json_add_u64(sc, "target_slice_ns", ss.target_slice_ns);
	pf_json_add_u64(sc, "slices", ss.slices);
	pf_json_add_u64(sc, "preempt_timeouts", ss.preempt_timeouts);
	pf_json_add_u64(sc, "stall_ns", ss.stall_ns);
	pf_json_add_u64(sc, "lingered", ss.lingered);
	pf_json_add_u64(sc, "linger_waits", ss.linger_waits);
	json_object_object_add(o, "sched", sc);
	pf_json_add_u64(db, "rung", ds.rung);
	pf_json_add_u64(db, "accepted", ds.accepted);
	pf_json_add_u64(db, "invalid", ds.invalid);
	pf_json_add_u64(db, "disabled", ds.disabled);
	pf_json_add_u64(db, "spurious", ds.spurious);
	pf_json_add_u64(db, "overruns", ds.overruns);
	json_object_object_add(o, "doorbell", db);
	pf_json_add_u64(rpc, "ok", s->rpc_ok);
	pf_json_add_u64(rpc, "errors", s->rpc_err);
	pf_json_add_u64(rpc, "kicks", s->mbox_kicks);
	pf_json_add_u64(rpc, "rm_objects", pf_rm_objects(d, s->vf));
	json_object_object_add(o, "rpc", rpc);
	pf_json_add_u64(o, "resets", s->resets);
	pf_json_add_u64(o, "vram_bytes", s->prov.vram);
	pf_json_add_u64(o, "vram_used_bytes", s->child ? s->prov.vram - pma_free_bytes(s->child) : 0);
	json_object_object_add(o, "attached", json_object_new_boolean(pf_endpoint_attached(s)));
	return o;
}

static int cmd_query_stats(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			   struct pf_err *e)
{
	json_object *arr = json_object_new_array(), *v;
	int only = 0;

	(void)dry;
	if (args && json_object_object_get_ex(args, "vf", &v)) {
		only = json_object_get_int(v);
		if (!json_object_is_type(v, json_type_int)) {
			json_object_put(arr);
			return cmn_fail(&e->f, -EINVAL, "\"vf\" must be an integer 1..%d, not %s",
					PF_MAX_VFS, pf_json_kind(v));
		}
		if (only < 1 || only > PF_MAX_VFS || !d->vfs[only]) {
			json_object_put(arr);
			return cmn_fail(&e->f, -ENOENT, "VF %.24s has no running slice",
				       json_object_get_string(v));
		}
	}
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		if (d->vfs[vf] && (!only || (unsigned int)only == vf))
			json_object_array_add(arr, vf_stats(d, d->vfs[vf]));
	json_object_object_add(ret, "schema", json_object_new_int(1));
	json_object_object_add(ret, "vfs", arr);
	return 0;
}

static json_object *segment(const char *kind, uint64_t base, uint64_t size)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "kind", json_object_new_string(kind));
	pf_json_add_u64(o, "base", base);
	pf_json_add_u64(o, "size", size);
	return o;
}

static json_object *slice_segment(struct pf_slice *s)
{
	json_object *o = segment("slice", s->base, s->prov.vram), *al = json_object_new_array();
	struct pma_range r[256];
	size_t nr = 0;

	json_object_object_add(o, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(o, "vf", json_object_new_int((int)s->vf));
	json_object_object_add(o, "type", json_object_new_string(s->type));
	pf_json_add_u64(o, "used_bytes", s->child ? s->prov.vram - pma_free_bytes(s->child) : 0);
	/* The first 256 runs are plenty for a picture; used_bytes has the exact figure. */
	if (s->child && !pma_export(s->child, r, VGPU_ARRAY_SIZE(r), &nr)) {
		for (size_t i = 0; i < cmn_min(nr, (size_t)VGPU_ARRAY_SIZE(r)); i++) {
			json_object *a = json_object_new_array();

			json_object_array_add(a, json_object_new_uint64(r[i].base));
			json_object_array_add(a, json_object_new_uint64(r[i].size));
			json_object_array_add(al, a);
		}
	}
	json_object_object_add(o, "allocations", al);
	return o;
}

static int cmd_query_vram_map(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			      struct pf_err *e)
{
	json_object *segs = json_object_new_array();
	struct pf_slice *order[PF_MAX_VFS];
	unsigned int n = 0;
	uint64_t at = d->cfg.spare_vram;

	(void)args; (void)dry; (void)e;
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		if (d->vfs[vf])
			order[n++] = d->vfs[vf];
	for (unsigned int i = 1; i < n; i++)		/* by base: at most 63 entries */
		for (unsigned int k = i; k > 0 && order[k - 1]->base > order[k]->base; k--) {
			struct pf_slice *t = order[k];

			order[k] = order[k - 1];
			order[k - 1] = t;
		}
	if (d->cfg.spare_vram)
		json_object_array_add(segs, segment("pf-spare", 0, d->cfg.spare_vram));
	for (unsigned int i = 0; i < n; i++) {
		if (order[i]->base > at)
			json_object_array_add(segs, segment("free", at, order[i]->base - at));
		json_object_array_add(segs, slice_segment(order[i]));
		at = order[i]->base + order[i]->prov.vram;
	}
	if (at < d->cfg.vram_size)
		json_object_array_add(segs, segment("free", at, d->cfg.vram_size - at));
	json_object_object_add(ret, "schema", json_object_new_int(1));
	pf_json_add_u64(ret, "vram_bytes", d->cfg.vram_size);
	json_object_object_add(ret, "segments", segs);
	return 0;
}

static int cmd_query_version(struct pf_daemon *d, json_object *args, bool dry, json_object *ret,
			     struct pf_err *e)
{
	(void)d; (void)args; (void)dry; (void)e;
	json_object_object_add(ret, "package", json_object_new_string("vgpud " VGPU_VERSION));
	json_object_object_add(ret, "abi_major", json_object_new_int(VGPU_ABI_MAJOR));
	json_object_object_add(ret, "abi_minor", json_object_new_int(VGPU_ABI_MINOR));
	json_object_object_add(ret, "protocol", json_object_new_int(CTLC_PROTOCOL));
	return 0;
}

/* The argument keys of each command; every command also takes "dry-run" (a query changes
 * nothing either way), and refuses any other key by name (args_check()). */
static const char *const k_none[] = { NULL };
static const char *const k_uuid[] = { "uuid", NULL };
static const char *const k_vf[] = { "vf", NULL };
static const char *const k_owned[] = { "uuid", "owner", NULL };
static const char *const k_define[] = { "uuid", "type", "mdev_type", "start", "attrs", "owner",
					"owner_uid", "parent", NULL };
/* A defined slice's start takes "uuid" and "owner"; a transient one (with "type") a spec. */
static const char *const k_start[] = { "uuid", "owner", "type", "parent", "attrs", "owner_uid",
				       NULL };
static const char *const k_modify[] = { "uuid", "owner", "release-owner", "type", "mdev_type",
					"start", "attrs", "owner_uid", "parent", NULL };
static const char *const k_set_vfs[] = { "num_vfs", NULL };
static const char *const k_reset[] = { "uuid", "vf", "evict_ms", NULL };
static const char *const k_incoming[] = { "listen", "uuid", "type", "owner_uid", NULL };
static const char *const k_outgoing[] = { "uuid", "to", "switchover", "max-rounds",
					  "switchover-bytes", NULL };
static const char *const k_cancel[] = { "uuid", "listen", NULL };

static const struct pf_cmd {
	const char *name;
	pf_cmd_fn fn;
	bool mutating;
	const char *const *keys;	/* its argument keys, NULL-terminated */
} pf_cmds[] = {
	{ "query-version",	cmd_query_version,	false,	k_none },
	{ "query-types",	cmd_query_types,	false,	k_none },
	{ "query-slices",	cmd_query_slices,	false,	k_uuid },
	{ "query-status",	cmd_query_status,	false,	k_none },
	{ "query-stats",	cmd_query_stats,	false,	k_vf },
	{ "query-vram-map",	cmd_query_vram_map,	false,	k_none },
	{ "define-slice",	pf_slice_define,	true,	k_define },
	{ "undefine-slice",	pf_slice_undefine,	true,	k_owned },
	{ "start-slice",	pf_slice_start_cmd,	true,	k_start },
	{ "stop-slice",		pf_slice_stop_cmd,	true,	k_owned },
	{ "modify-slice",	pf_slice_modify,	true,	k_modify },
	{ "set-vfs",		pf_set_vfs,		true,	k_set_vfs },
	{ "reset-vf",		pf_vf_reset_cmd,	true,	k_reset },
	{ "save-slice",		pf_slice_save_cmd,	true,	k_uuid },
	{ "restore-slice",	pf_slice_restore_cmd,	true,	k_none },
	{ "migrate-incoming",	pf_live_incoming_cmd,	true,	k_incoming },
	{ "migrate-outgoing",	pf_live_outgoing_cmd,	true,	k_outgoing },
	{ "migrate-switchover",	pf_live_switchover_cmd,	true,	k_uuid },
	{ "migrate-cancel",	pf_live_cancel_cmd,	true,	k_cancel },
	{ "migrate-status",	pf_live_status_cmd,	false,	k_uuid },
	{ "reclaim-slice",	pf_live_reclaim_cmd,	true,	k_uuid },
};

#define PF_TOKEN_SHAPE	"an object {\"vm\": UUID, \"generation\": N}"

/* Keys whose JSON type is the same in every command that takes them, checked before the
 * command runs: a handler that reads a value of another type as absent would run without
 * it (a "switchover" of 5 read as the default), or name the wrong fault. */
static const struct arg_type {
	const char *key;
	json_type type;
	const char *what;	/* what it must be, for the message */
} arg_types[] = {
	{ "uuid",		json_type_string,	"a string (a slice's UUID)" },
	{ "vf",			json_type_int,		"an integer" },
	{ "owner",		json_type_object,	PF_TOKEN_SHAPE },
	{ "release-owner",	json_type_object,	PF_TOKEN_SHAPE },
	{ "listen",		json_type_string,	"a string" },
	{ "to",			json_type_string,	"a string" },
	{ "switchover",		json_type_string,	"a string" },
};

/* Keys no request may hold, with why: more use to its sender than "unknown". */
static const struct arg_refused {
	const char *key;
	const char *why;
} arg_refused[] = {
	{ "migrated_out", "is vgpud's record of a live migration; a request cannot set it "
	  "(reclaim-slice drops it)" },
};

static bool cmd_takes(const struct pf_cmd *cmd, const char *key)
{
	for (const char *const *k = cmd->keys; *k; k++)
		if (!strcmp(*k, key))
			return true;
	return !strcmp(key, "dry-run");
}

/* @key of a request for @cmd that is not one of its keys: refused naming it and the keys
 * the command takes. */
static int arg_unknown(const struct pf_cmd *cmd, const char *key, struct pf_err *e)
{
	char list[160] = "";
	size_t n = 0;

	for (unsigned int i = 0; i < VGPU_ARRAY_SIZE(arg_refused); i++)
		if (!strcmp(key, arg_refused[i].key))
			return cmn_fail(&e->f, -EINVAL, "\"%s\" %s", key, arg_refused[i].why);
	for (const char *const *k = cmd->keys; *k && n < sizeof(list); k++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "", *k);
	return cmn_fail(&e->f, -EINVAL, "unknown argument \"%.64s\" for %s (it takes %s%s)", key,
			cmd->name, n ? "" : "none", list);
}

static int arg_type_check(const char *key, json_object *v, struct pf_err *e)
{
	for (unsigned int i = 0; i < VGPU_ARRAY_SIZE(arg_types); i++) {
		const struct arg_type *t = &arg_types[i];

		if (strcmp(key, t->key) || (json_object_is_type(v, t->type) &&
					    (t->type != json_type_string || pf_json_str_clean(v))))
			continue;
		return cmn_fail(&e->f, -EINVAL, "\"%s\" must be %s, not %s", key, t->what,
				pf_json_kind(v));
	}
	return 0;
}

/* The arguments of a request for @cmd, before anything looks at them: only its keys, each
 * of its type; a slice named one way only ("uuid" or "vf"), so that every check and the
 * command itself find the same slice. */
static int args_check(const struct pf_cmd *cmd, json_object *args, struct pf_err *e)
{
	if (!args)
		return 0;
	json_object_object_foreach(args, key, val) {
		int r = cmd_takes(cmd, key) ? arg_type_check(key, val, e)
					    : arg_unknown(cmd, key, e);

		if (r)
			return r;
	}
	if (json_object_object_get_ex(args, "uuid", NULL) &&
	    json_object_object_get_ex(args, "vf", NULL))
		return cmn_fail(&e->f, -EINVAL, "%s takes \"uuid\" or \"vf\", not both", cmd->name);
	return 0;
}

static const char *err_class(int code)
{
	switch (code) {
	case -ENOENT:
		return "NotFound";
	case -EEXIST:
	case -EBUSY:
		return "Conflict";
	case -ENOSPC:
	case -ENOMEM:
		return "InsufficientResources";
	case -EPERM:
	case -EACCES:
		return "PermissionDenied";
	case -EINVAL:
	case -ERANGE:
		return "InvalidArgument";
	default:
		return "GenericError";
	}
}

static json_object *reply_error(json_object *id, const char *cls, struct pf_err *e)
{
	json_object *r = json_object_new_object(), *o = json_object_new_object();

	json_object_object_add(o, "class", json_object_new_string(cls));
	pf_utf8_scrub(e->f.msg);	/* a reply is JSON: no raw bytes of a bad request */
	json_object_object_add(o, "desc", json_object_new_string(e->f.msg));
	json_object_object_add(o, "errno", json_object_new_string(cmn_errname(e->f.err)));
	if (e->data)
		json_object_object_add(o, "data", e->data);
	e->data = NULL;
	json_object_object_add(r, "error", o);
	if (id)
		json_object_object_add(r, "id", json_object_get(id));
	return r;
}

/* The slice a request names by "uuid" or "vf" (never both: args_check()), or NULL. */
static struct pf_slice *arg_slice_of(struct pf_daemon *d, json_object *args)
{
	char norm[PF_UUID_STR];
	struct pf_slice *s = NULL;
	json_object *v;

	if (json_object_object_get_ex(args, "uuid", &v) && json_object_is_type(v, json_type_string) &&
	    !ctlc_uuid_parse(json_object_get_string(v), norm, NULL))
		s = pf_slice_find(d, norm);
	if (!s && json_object_object_get_ex(args, "vf", &v) && json_object_is_type(v, json_type_int) &&
	    json_object_get_int(v) > 0 && json_object_get_int(v) <= PF_MAX_VFS)
		s = d->vfs[json_object_get_int(v)];
	return s;
}

/* The log fields of a command about one slice or VF ("uuid" or "vf" in its arguments):
 * the journal gets them as VGPU_UUID / VGPU_VF on every line the command logs. A start
 * names its VF itself once it has one. */
static void log_scope_from(struct pf_daemon *d, json_object *args)
{
	const struct pf_slice *s = arg_slice_of(d, args);
	json_object *v;

	if (s)
		cmn_log_scope_set(s->vf, s->uuid);
	else if (json_object_object_get_ex(args, "vf", &v) &&
		 json_object_is_type(v, json_type_int) && json_object_get_int(v) > 0 &&
		 json_object_get_int(v) <= PF_MAX_VFS)
		cmn_log_scope_set((unsigned int)json_object_get_int(v), NULL);
}

/* What a held slice (pf_slice_held()) takes: its end (reclaim, undefine, stop). Anything
 * that would run, change or read it out (reset, modify, save, migrate) waits for that. */
static bool held_allows(const char *name)
{
	static const char *const ok[] = { "reclaim-slice", "undefine-slice", "stop-slice",
					  "define-slice", "migrate-cancel" };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(name, ok[i]))
			return true;
	return false;
}

/* A slice in a live migration takes no other change (stop, undefine, modify, reset, save)
 * until it completes or is cancelled: the worker reads and the destination writes it. A
 * held one takes only what ends the hold. */
static int migrating_check(struct pf_daemon *d, const char *name, json_object *args,
			   struct pf_err *e)
{
	const struct pf_slice *s;

	if (!strcmp(name, "set-vfs") && pf_live_active(d))
		return cmn_fail(&e->f, -EBUSY, "set-vfs: a live migration is in progress here "
				"(migrate-status): wait for it or migrate-cancel it first");
	s = arg_slice_of(d, args);
	if (s && pf_slice_held(s) && !held_allows(name))
		return pf_slice_held_fail(s, name, e);
	if (!s || !strncmp(name, "migrate-", 8) || !pf_live_busy(d, s))
		return 0;
	return cmn_fail(&e->f, -EBUSY, "%s: slice %s is migrating: wait for it or "
			"migrate-cancel it first", name, s->uuid);
}

/* Since the state on disk became unsound, the daemon takes no change: the next one could
 * be lost with the previous one, unseen, or build on a state a restart does not find. */
static int read_only_check(struct pf_daemon *d, const char *name, struct pf_err *e)
{
	if (!d->state_sync_err)
		return 0;
	return cmn_fail(&e->f, -EROFS, "%s: refused: vgpud takes no changes until it is "
			"restarted, since %s", name, d->state_sync_why);
}

/* A change in effect whose state is not durable (d->state_sync_why says how): the reply
 * says so and why. @name: the command, or NULL (a deferred reply, which does not know
 * it). */
static json_object *reply_unsynced(struct pf_daemon *d, json_object *id, const char *name)
{
	struct pf_err e = { 0 };

	cmn_fail(&e.f, d->state_sync_err, "%s%sdone, but not durable: %s; vgpud takes no "
		 "further changes until it is restarted", name ? name : "", name ? ": " : "",
		 d->state_sync_why);
	return reply_error(id, err_class(e.f.err), &e);
}

static const struct pf_cmd *cmd_find(const char *name)
{
	for (unsigned int i = 0; i < VGPU_ARRAY_SIZE(pf_cmds); i++)
		if (!strcmp(pf_cmds[i].name, name))
			return &pf_cmds[i];
	return NULL;
}

/* Validate the envelope; NULL if fine, else the error class with @e filled. */
static const char *envelope_check(struct pf_client *c, json_object *req, const char **name,
				  json_object **args, bool *dry, struct pf_err *e)
{
	json_object *x, *dv;

	*args = NULL;
	*dry = false;
	if (!json_object_is_type(req, json_type_object))
		return cmn_fail(&e->f, -EINVAL, "a request must be a JSON object"), "GenericError";
	json_object_object_foreach(req, key, val) {
		(void)val;
		if (strcmp(key, "execute") && strcmp(key, "arguments") && strcmp(key, "id"))
			return cmn_fail(&e->f, -EINVAL, "unknown member \"%.64s\"", key), "GenericError";
	}
	if (!json_object_object_get_ex(req, "execute", &x) || !json_object_is_type(x, json_type_string))
		return cmn_fail(&e->f, -EINVAL, "missing \"execute\""), "GenericError";
	if (!pf_json_str_clean(x))
		return cmn_fail(&e->f, -EINVAL, "\"execute\" holds a NUL byte or invalid UTF-8"),
		       "GenericError";
	*name = json_object_get_string(x);
	if (json_object_object_get_ex(req, "arguments", args) &&
	    !json_object_is_type(*args, json_type_object))
		return cmn_fail(&e->f, -EINVAL, "\"arguments\" must be an object"), "GenericError";
	if (*args && json_object_object_get_ex(*args, "dry-run", &dv)) {
		if (!json_object_is_type(dv, json_type_boolean))
			return cmn_fail(&e->f, -EINVAL, "\"dry-run\" must be a boolean"), "GenericError";
		*dry = json_object_get_boolean(dv);
	}
	if (!c->negotiated && strcmp(*name, "qmp_capabilities"))
		return cmn_fail(&e->f, -EPERM, "expecting capabilities negotiation with "
			       "'qmp_capabilities'"), "CommandNotFound";
	return NULL;
}

/* The longest string "id" echoed: an id is the client's tag for its reply, not a payload. */
#define PF_ID_MAX	128
/* The largest integer "id" in magnitude, 2^53: what every JSON reader holds exactly. */
#define PF_ID_INT_MAX	(1ll << 53)

/* Whether a request's "id" may be echoed in its reply: a clean string of at most
 * PF_ID_MAX bytes or an integer of at most PF_ID_INT_MAX in magnitude. Any other (invalid
 * UTF-8, 1e999, an integer json-c saturated) would make the reply invalid JSON or tag it
 * with something other than what was sent. */
static int id_check(json_object *id, struct pf_err *e)
{
	int64_t i = json_object_get_int64(id);

	if (json_object_is_type(id, json_type_string) && !pf_json_str_clean(id))
		return cmn_fail(&e->f, -EINVAL, "\"id\" holds a NUL byte or invalid UTF-8");
	if (json_object_is_type(id, json_type_string) &&
	    json_object_get_string_len(id) > PF_ID_MAX)
		return cmn_fail(&e->f, -EINVAL, "\"id\" has %d bytes; a string id has at most "
				"%d bytes", json_object_get_string_len(id), PF_ID_MAX);
	if (json_object_is_type(id, json_type_int) && (i < -PF_ID_INT_MAX || i > PF_ID_INT_MAX))
		return cmn_fail(&e->f, -EINVAL, "\"id\" is an integer past 2^53 in magnitude, "
				"which not every reader holds exactly");
	if (json_object_is_type(id, json_type_string) || json_object_is_type(id, json_type_int))
		return 0;
	return cmn_fail(&e->f, -EINVAL, "\"id\" must be a string (valid UTF-8, at most %d bytes) "
			"or an integer, not %s", PF_ID_MAX, pf_json_kind(id));
}

/* qmp_capabilities' arguments: "enable" lists capabilities to turn on, and vgpud offers
 * none (its greeting's "capabilities" is empty), so any name there is refused rather than
 * taken as on. */
static int caps_check(json_object *args, struct pf_err *e)
{
	json_object *en, *cap;

	if (!args)
		return 0;
	json_object_object_foreach(args, key, val) {
		(void)val;
		if (strcmp(key, "enable") && strcmp(key, "dry-run"))
			return cmn_fail(&e->f, -EINVAL, "unknown argument \"%.64s\" for "
					"qmp_capabilities (it takes enable)", key);
	}
	if (!json_object_object_get_ex(args, "enable", &en))
		return 0;
	if (!json_object_is_type(en, json_type_array))
		return cmn_fail(&e->f, -EINVAL, "\"enable\" must be an array of capability names, "
				"not %s", pf_json_kind(en));
	if (!json_object_array_length(en))
		return 0;
	/* With none offered, the first name is the one refused. */
	cap = json_object_array_get_idx(en, 0);
	if (!pf_json_str_clean(cap))
		return cmn_fail(&e->f, -EINVAL, "\"enable\"[0] must be a capability name, not %s",
				pf_json_kind(cap));
	return cmn_fail(&e->f, -EINVAL, "capability \"%.64s\" is not offered (vgpud offers none)",
			json_object_get_string(cap));
}

json_object *pf_command(struct pf_daemon *d, struct pf_client *c, json_object *req)
{
	struct pf_err e = { 0 };
	const struct pf_cmd *cmd;
	const char *name = NULL, *cls;
	json_object *args, *id = NULL, *ret, *rep;
	bool dry, synced;
	int r;

	/* Checked first: an error reply echoes the id too. A null id reads as NULL here. */
	if (json_object_is_type(req, json_type_object) &&
	    json_object_object_get_ex(req, "id", &id) && id_check(id, &e))
		return reply_error(NULL, "GenericError", &e);
	cls = envelope_check(c, req, &name, &args, &dry, &e);
	if (cls)
		return reply_error(id, cls, &e);
	if (!strcmp(name, "qmp_capabilities")) {
		if (caps_check(args, &e))
			return reply_error(id, err_class(e.f.err), &e);
		c->negotiated = true;
		rep = json_object_new_object();
		json_object_object_add(rep, "return", json_object_new_object());
		goto add_id;
	}
	cmd = cmd_find(name);
	if (!cmd) {
		cmn_fail(&e.f, -ENOENT, "the command %.64s has not been found", name);
		return reply_error(id, "CommandNotFound", &e);
	}
	if (cmd->mutating && !c->admin) {
		cmn_fail(&e.f, -EPERM, "%s: permission denied: uid %d is neither root nor in the admin "
			"group", name, (int)c->uid);
		return reply_error(id, "PermissionDenied", &e);
	}
	if (args_check(cmd, args, &e) ||
	    (cmd->mutating && (read_only_check(d, name, &e) || migrating_check(d, name, args, &e))))
		return reply_error(id, err_class(e.f.err), &e);
	synced = !d->state_sync_err;
	ret = json_object_new_object();
	log_scope_from(d, args);
	/* A descriptor the client sent is this request's (or nobody's: closed after it). */
	d->req_fd = c->has_fd_in ? c->fd_in : -1;
	c->has_fd_in = false;
	d->req_client = c;
	d->req_id = id;
	d->req_deferred = false;
	pf_test_stop_at_cmd(name);
	r = cmd->fn(d, args, dry, ret, &e);
	d->req_client = NULL;
	d->req_id = NULL;
	if (d->req_fd >= 0)
		close(d->req_fd);
	d->req_fd = -1;
	cmn_log_scope_clear();
	if (!r && d->req_deferred) {
		d->req_deferred = false;
		json_object_put(ret);
		return NULL;
	}
	if (r) {
		json_object_put(ret);
		if (!e.f.msg[0])
			cmn_fail(&e.f, r, "%s: %s", name, cmn_strerror(r));
		if (cmd->mutating)
			cmn_info("control: %s refused: %s", name, e.f.msg);
		return reply_error(id, err_class(r), &e);
	}
	if (synced && d->state_sync_err) {
		json_object_put(ret);
		json_object_put(e.data);
		return reply_unsynced(d, id, name);
	}
	rep = json_object_new_object();
	json_object_object_add(rep, "return", ret);
add_id:
	if (id)
		json_object_object_add(rep, "id", json_object_get(id));
	return rep;
}

void pf_command_defer(struct pf_daemon *d, struct pf_client **client, json_object **id)
{
	d->req_deferred = true;
	*client = d->req_client;
	*id = d->req_id ? json_object_get(d->req_id) : NULL;
}

void pf_command_reply_later(struct pf_daemon *d, struct pf_client *c, json_object *id, int r,
			    json_object *ret, struct pf_err *e)
{
	json_object *rep;

	if (r) {
		json_object_put(ret);
		rep = reply_error(id, err_class(r), e);
	} else if (d->state_sync_err) {
		/* Taken while the state was sound (changes are refused since), so the failure
		 * came while it ran: maybe its own commit. */
		json_object_put(ret);
		rep = reply_unsynced(d, id, NULL);
	} else {
		rep = json_object_new_object();
		json_object_object_add(rep, "return", ret);
		if (id)
			json_object_object_add(rep, "id", json_object_get(id));
	}
	json_object_put(id);
	if (c)
		pf_control_send(d, c, rep);
	else
		json_object_put(rep);
}
