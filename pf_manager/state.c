// SPDX-License-Identifier: MIT
/* Persistence. Declared slices: one JSON file each, <state>/slices/<uuid>.json, in
 * mdevctl's shape. Running slices: the journal <state>/journal.json (VF, VRAM partition,
 * provisioned quota and BAR object identity of each; not the allocations inside the
 * partition), rewritten atomically after every change. A transient slice has no file: its
 * journal entry, definition included, is its only record, so it comes back running (and
 * still transient) after a restart. VRAM contents live in one shm object per VF named from
 * the state dir, so a restarted daemon (even after kill -9) maps the same bytes at the
 * same offsets.
 * Loading validates everything before applying anything. Every verb commits its record
 * (the definition file or the journal) before an effect it cannot take back and before
 * its reply: doc/pf_manager.md, "Durability". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bitops.h"
#include "gpu_model/gpu.h"
#include "common/log.h"
#include "pf_manager/pf_internal.h"

#define PF_JOURNAL_KIND		"vgpud-journal"
#define PF_JOURNAL_SCHEMA	1
#define PF_MAX_FILE		(1u << 20)

void pf_shm_name(const struct pf_daemon *d, unsigned int vf, char *buf, size_t len)
{
	snprintf(buf, len, "/%s-vf%u", d->shm_prefix, vf);
}

const char *pf_file_kind(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFIFO:
		return "a FIFO";
	case S_IFLNK:
		return "a symbolic link";
	case S_IFDIR:
		return "a directory";
	case S_IFSOCK:
		return "a socket";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	default:
		return "a file of unknown type";
	}
}

/* ---- slice definitions ------------------------------------------------------------------ */

static void attr_add(json_object *attrs, const char *key, json_object *v)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, key, v);
	json_object_array_add(attrs, o);
}

json_object *pf_slice_def_json(const struct pf_slice *s)
{
	json_object *o = json_object_new_object(), *attrs = json_object_new_array();
	char buf[32];

	json_object_object_add(o, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(o, "mdev_type", json_object_new_string(s->type));
	json_object_object_add(o, "start", json_object_new_string(s->autostart ? "auto" : "manual"));
	if (s->custom_bits & PF_Q_VRAM) {
		snprintf(buf, sizeof(buf), "%" PRIu64, s->custom.vram);
		attr_add(attrs, "vram_bytes", json_object_new_string(buf));
	}
	if (s->custom_bits & PF_Q_CHANNELS)
		attr_add(attrs, "channels", json_object_new_int((int)s->custom.channels));
	if (s->custom_bits & PF_Q_DOORBELLS)
		attr_add(attrs, "doorbells", json_object_new_int((int)s->custom.doorbells));
	if (s->custom_bits & PF_Q_EXEC)
		attr_add(attrs, "exec_quantum_us", json_object_new_int64(s->custom.exec_quantum_us));
	if (s->custom_bits & PF_Q_PREEMPT)
		attr_add(attrs, "preempt_timeout_us",
			 json_object_new_int((int)s->custom.preempt_timeout_us));
	if (s->custom_bits & PF_Q_PRIO)
		attr_add(attrs, "priority", json_object_new_string(pf_priority_name(s->custom.priority)));
	if (s->custom_bits & PF_Q_RM_CLIENTS)
		attr_add(attrs, "rm_clients", json_object_new_int64(s->custom.rm_clients));
	if (s->custom_bits & PF_Q_RM_OBJECTS)
		attr_add(attrs, "rm_objects", json_object_new_int64(s->custom.rm_objects));
	json_object_object_add(o, "attrs", attrs);
	if (s->owner_vm[0]) {
		json_object *own = json_object_new_object();

		json_object_object_add(own, "vm", json_object_new_string(s->owner_vm));
		json_object_object_add(own, "generation", json_object_new_uint64(s->owner_gen));
		json_object_object_add(o, "owner", own);
	}
	if (s->owner_uid >= 0)
		json_object_object_add(o, "owner_uid", json_object_new_int64(s->owner_uid));
	if (s->migrated_to[0])
		json_object_object_add(o, "migrated_out", json_object_new_string(s->migrated_to));
	return o;
}

/* An unsigned attribute given as a JSON integer or a decimal string, up to @max. */
static int attr_uint(json_object *v, uint64_t max, uint64_t *out)
{
	char *end;
	int64_t i;

	if (json_object_is_type(v, json_type_int)) {
		i = json_object_get_int64(v);
		if (i < 0 || (uint64_t)i > max)
			return -ERANGE;
		*out = (uint64_t)i;
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return -EINVAL;
	const char *s = json_object_get_string(v);

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	return *out > max ? -ERANGE : 0;
}

static int parse_attr(struct pf_daemon *d, struct pf_slice *s, const char *key, json_object *v,
		      struct pf_err *e)
{
	uint64_t x = 0;
	int r;

	if (!strcmp(key, "vram_bytes") || !strcmp(key, "vram")) {
		if (json_object_is_type(v, json_type_string))
			r = ctlc_size_parse(json_object_get_string(v), &x);
		else
			r = attr_uint(v, UINT64_MAX >> 1, &x);
		/* Bounded before the align-up, which would wrap a size near 2^64 to 0. */
		if (r || x < PF_VRAM_ALIGN || x > pf_usable_vram(d) ||
		    cmn_align_up(x, PF_VRAM_ALIGN) > pf_usable_vram(d))
			return cmn_fail(&e->f, -EINVAL, "bad VRAM size \"%s\": need 2 MiB .. %" PRIu64
				       " MiB (the usable VRAM)", json_object_get_string(v),
				       pf_usable_vram(d) >> 20);
		s->custom.vram = x;
		s->custom_bits |= PF_Q_VRAM;
	} else if (!strcmp(key, "channels")) {
		if (attr_uint(v, 64, &x) || !x)
			return cmn_fail(&e->f, -EINVAL, "bad channels \"%s\": need 1..64", json_object_get_string(v));
		s->custom.channels = (uint32_t)x;
		s->custom_bits |= PF_Q_CHANNELS;
	} else if (!strcmp(key, "doorbells")) {
		if (attr_uint(v, 1024, &x) || !x)
			return cmn_fail(&e->f, -EINVAL, "bad doorbells \"%s\": need 1..1024",
				       json_object_get_string(v));
		s->custom.doorbells = (uint32_t)x;
		s->custom_bits |= PF_Q_DOORBELLS;
	} else if (!strcmp(key, "exec_quantum_us") || !strcmp(key, "exec_quantum_ms")) {
		/* exec_quantum_ms: the same setting in whole milliseconds. */
		uint64_t unit = key[strlen(key) - 2] == 'm' ? 1000 : 1;

		if (attr_uint(v, PF_EXEC_QUANTUM_US_MAX / unit, &x))
			return cmn_fail(&e->f, -EINVAL, "bad %s \"%s\": need 0..%" PRIu64, key,
					json_object_get_string(v), PF_EXEC_QUANTUM_US_MAX / unit);
		s->custom.exec_quantum_us = (uint32_t)(x * unit);
		s->custom_bits |= PF_Q_EXEC;
	} else if (!strcmp(key, "preempt_timeout_us")) {
		if (attr_uint(v, PF_PREEMPT_TIMEOUT_US_MAX, &x))
			return cmn_fail(&e->f, -EINVAL, "bad preempt_timeout_us \"%s\": need 0..%u",
					json_object_get_string(v), PF_PREEMPT_TIMEOUT_US_MAX);
		s->custom.preempt_timeout_us = (uint32_t)x;
		s->custom_bits |= PF_Q_PREEMPT;
	} else if (!strcmp(key, "priority")) {
		enum pf_priority p;

		if (pf_priority_parse(json_object_get_string(v), &p) || p == PF_PRIO_HIGH)
			return cmn_fail(&e->f, -EINVAL, "bad priority \"%s\": low or normal (high is the "
				       "PF's)", json_object_get_string(v));
		s->custom.priority = p;
		s->custom_bits |= PF_Q_PRIO;
	} else if (!strcmp(key, "rm_clients")) {
		if (attr_uint(v, PF_RM_CLIENTS_MAX, &x) || !x)
			return cmn_fail(&e->f, -EINVAL, "bad rm_clients \"%s\": need 1..%u",
				       json_object_get_string(v), PF_RM_CLIENTS_MAX);
		s->custom.rm_clients = (uint32_t)x;
		s->custom_bits |= PF_Q_RM_CLIENTS;
	} else if (!strcmp(key, "rm_objects")) {
		if (attr_uint(v, PF_RM_OBJECTS_MAX, &x) || !x)
			return cmn_fail(&e->f, -EINVAL, "bad rm_objects \"%s\": need 1..%u",
				       json_object_get_string(v), PF_RM_OBJECTS_MAX);
		s->custom.rm_objects = (uint32_t)x;
		s->custom_bits |= PF_Q_RM_OBJECTS;
	} else {
		return cmn_fail(&e->f, -EINVAL, "unknown attribute \"%.64s\"", key);
	}
	return 0;
}

static int parse_attrs(struct pf_daemon *d, struct pf_slice *s, json_object *attrs,
		       struct pf_err *e)
{
	if (!json_object_is_type(attrs, json_type_array))
		return cmn_fail(&e->f, -EINVAL, "\"attrs\" must be an array of {name: value}");
	for (size_t i = 0; i < json_object_array_length(attrs); i++) {
		json_object *a = json_object_array_get_idx(attrs, i);

		if (!json_object_is_type(a, json_type_object))
			return cmn_fail(&e->f, -EINVAL, "attrs[%zu] is not an object", i);
		json_object_object_foreach(a, key, v) {
			int r = parse_attr(d, s, key, v, e);

			if (r)
				return r;
		}
	}
	return 0;
}

static int parse_owner(struct pf_slice *s, json_object *o, struct pf_err *e)
{
	json_object *vm, *gen;

	if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "vm", &vm) ||
	    ctlc_uuid_parse(json_object_get_string(vm), s->owner_vm, NULL))
		return cmn_fail(&e->f, -EINVAL, "\"owner\" must be {\"vm\": UUID, \"generation\": N}");
	if (json_object_object_get_ex(o, "generation", &gen)) {
		if (!json_object_is_type(gen, json_type_int) || json_object_get_int64(gen) < 0)
			return cmn_fail(&e->f, -EINVAL, "owner.generation must be a non-negative integer");
		s->owner_gen = (uint64_t)json_object_get_int64(gen);
	}
	return 0;
}

/* The parent a spec names must be the PF this daemon serves: a spec meant for another
 * PF is refused rather than taken here. */
static int parse_parent(struct pf_daemon *d, json_object *v, struct pf_err *e)
{
	const char *p = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;

	if (!p || strcmp(p, d->cfg.pf_id))
		return cmn_fail(&e->f, -ENOENT, "parent \"%.64s\" not found (this daemon "
				"serves %s)", p ? p : json_object_get_string(v), d->cfg.pf_id);
	return 0;
}

/* One key of a slice spec; @record: it comes from a state file or the journal, which alone
 * may hold vgpud's own hand-over record. */
static int parse_key(struct pf_daemon *d, struct pf_slice *s, const char *key, json_object *v,
		     bool record, struct pf_err *e)
{
	const char *str = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;

	if (str && !pf_json_str_clean(v))
		return cmn_fail(&e->f, -EINVAL, "\"%.64s\" holds a NUL byte or invalid UTF-8", key);

	if (!strcmp(key, "uuid")) {
		if (!str || ctlc_uuid_parse(str, s->uuid, s->uuid_bytes))
			return cmn_fail(&e->f, -EINVAL, "\"%.64s\" is not a UUID", json_object_get_string(v));
	} else if (!strcmp(key, "mdev_type") || !strcmp(key, "type")) {
		if (!str || !pf_type_find(d, str))
			return cmn_fail(&e->f, -EINVAL, "type \"%.64s\" is not supported (see types)",
				       json_object_get_string(v));
		snprintf(s->type, sizeof(s->type), "%s", str);
	} else if (!strcmp(key, "start")) {
		if (!str || (strcmp(str, "auto") && strcmp(str, "manual")))
			return cmn_fail(&e->f, -EINVAL, "\"start\" must be \"auto\" or \"manual\"");
		s->autostart = !strcmp(str, "auto");
	} else if (!strcmp(key, "attrs")) {
		return parse_attrs(d, s, v, e);
	} else if (!strcmp(key, "owner")) {
		return parse_owner(s, v, e);
	} else if (!strcmp(key, "owner_uid")) {
		if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < -1 ||
		    json_object_get_int64(v) > INT32_MAX)
			return cmn_fail(&e->f, -EINVAL, "\"owner_uid\" must be a uid");
		s->owner_uid = (long)json_object_get_int64(v);
	} else if (!strcmp(key, "migrated_out")) {
		/* The hand-over record of a live migration (migrate_live.c): where it went.
		 * Only vgpud writes it; a client clears it with reclaim-slice. */
		if (!record)
			return cmn_fail(&e->f, -EINVAL, "\"migrated_out\" is vgpud's record of a "
				       "live migration; a request cannot set it");
		if (!str || !str[0] || strlen(str) >= sizeof(s->migrated_to))
			return cmn_fail(&e->f, -EINVAL, "\"migrated_out\" must be the destination's "
				       "address (1..%zu bytes)", sizeof(s->migrated_to) - 1);
		snprintf(s->migrated_to, sizeof(s->migrated_to), "%s", str);
	} else if (!strcmp(key, "parent")) {
		return parse_parent(d, v, e);
	} else if (strcmp(key, "dry-run")) {
		return cmn_fail(&e->f, -EINVAL, "unknown key \"%.64s\"", key);
	}
	return 0;
}

static int slice_parse(struct pf_daemon *d, json_object *o, struct pf_slice *s, bool record,
		       struct pf_err *e)
{
	memset(s, 0, sizeof(*s));
	s->owner_uid = -1;
	s->bar_fd = -1;
	if (!o || !json_object_is_type(o, json_type_object))
		return cmn_fail(&e->f, -EINVAL, "a slice spec must be a JSON object");
	json_object_object_foreach(o, key, v) {
		int r = parse_key(d, s, key, v, record, e);

		if (r)
			return r;
	}
	if (!s->type[0])
		return cmn_fail(&e->f, -EINVAL, "missing \"type\"");
	if (!s->uuid[0]) {
		ctlc_uuid_generate(s->uuid);
		ctlc_uuid_parse(s->uuid, NULL, s->uuid_bytes);
	}
	return 0;
}

int pf_slice_from_json(struct pf_daemon *d, json_object *o, struct pf_slice *s, struct pf_err *e)
{
	return slice_parse(d, o, s, false, e);
}

int pf_slice_from_record(struct pf_daemon *d, json_object *o, struct pf_slice *s,
			 struct pf_err *e)
{
	return slice_parse(d, o, s, true, e);
}

static void slice_path(const struct pf_daemon *d, const char *uuid, char *buf, size_t len)
{
	snprintf(buf, len, "%s/slices/%s.json", d->cfg.state_dir, uuid);
}

/* @path was replaced or removed, but syncing its directory failed with @err: the change
 * is what a restart reads, so it stands in memory too, yet a crash may undo it. The
 * daemon takes no further change until it is restarted (pf_command refuses them). */
static void state_unsynced(struct pf_daemon *d, const char *path, int err)
{
	const char *slash = strrchr(path, '/');
	int len = slash ? (int)(slash - path) : (int)strlen(path);

	cmn_err("syncing the state directory %.*s failed: %s; the change to %s stands (a "
		"restart reads it) but may not survive a crash; no change is taken until vgpud "
		"is restarted", len, path, cmn_strerror(err), path);
	if (d->state_sync_err)
		return;		/* the first failure is the one reported */
	d->state_sync_err = err;
	snprintf(d->state_sync_why, sizeof(d->state_sync_why), "syncing the state directory "
		 "%.*s failed (%s): the change is in effect and in its file, but a crash may "
		 "undo it", len, path, cmn_strerror(err));
}

void pf_state_behind(struct pf_daemon *d, int err, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	cmn_err("writing the state in %s failed (%s): %s; no change is taken until vgpud is "
		"restarted", d->cfg.state_dir, cmn_strerror(err), what);
	if (d->state_sync_err)
		return;
	d->state_sync_err = err;
	snprintf(d->state_sync_why, sizeof(d->state_sync_why), "writing the state in %s "
		 "failed (%s): %s", d->cfg.state_dir, cmn_strerror(err), what);
}

#ifdef VGPU_TEST_HOOKS
/* Test builds: the largest state file the writers write; a test lowers it (pf_internal.h)
 * to reach the refusal with the files vgpud makes, which stay far below PF_MAX_FILE. */
size_t pf_test_state_max = PF_MAX_FILE;
#define STATE_MAX_FILE	pf_test_state_max
#else
#define STATE_MAX_FILE	PF_MAX_FILE
#endif

static int write_json(struct pf_daemon *d, const char *path, json_object *o)
{
	const char *txt = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
							 JSON_C_TO_STRING_NOSLASHESCAPE);
	char *buf;
	int r, dir_err;

	/* A file the loader would refuse (read_json()) is not written: the next start would
	 * exit 3 on it, every slice down. */
	if (strlen(txt) + 1 > STATE_MAX_FILE) {
		cmn_err("state: %s would hold %zu bytes, more than the %zu a start reads; not "
			"written", path, strlen(txt) + 1, (size_t)STATE_MAX_FILE);
		return -EFBIG;
	}
	if (asprintf(&buf, "%s\n", txt) < 0)
		return -ENOMEM;
	r = pf_write_file_atomic(path, buf, strlen(buf), &dir_err);
	free(buf);
	if (dir_err)
		state_unsynced(d, path, dir_err);
	return r;
}

int pf_state_save_slice(struct pf_daemon *d, const struct pf_slice *s)
{
	char path[PF_PATH_MAX + 64];
	json_object *o = pf_slice_def_json(s);
	int r;

	slice_path(d, s->uuid, path, sizeof(path));
	r = write_json(d, path, o);
	json_object_put(o);
	return r;
}

int pf_state_remove_slice(struct pf_daemon *d, const struct pf_slice *s)
{
	char path[PF_PATH_MAX + 64];
	int r;

	slice_path(d, s->uuid, path, sizeof(path));
	pf_dur_point("unlink");
	if (unlink(path))
		return -errno;
	pf_dur_point("fsync dir");
	r = pf_fsync_dir_of(path);
	if (r)
		state_unsynced(d, path, r);	/* gone all the same: a restart misses it */
	return 0;
}

/* ---- journal ------------------------------------------------------------------------------ */

static json_object *journal_entry(const struct pf_daemon *d, const struct pf_slice *s)
{
	const struct pf_bar_ino *id = &d->bar_ino[s->vf];
	json_object *o = json_object_new_object();

	json_object_object_add(o, "uuid", json_object_new_string(s->uuid));
	json_object_object_add(o, "vf", json_object_new_int((int)s->vf));
	pf_json_add_u64(o, "vram_base", s->base);
	pf_json_add_u64(o, "vram_bytes", s->prov.vram);
	json_object_object_add(o, "channels", json_object_new_int((int)s->prov.channels));
	json_object_object_add(o, "doorbells", json_object_new_int((int)s->prov.doorbells));
	json_object_object_add(o, "exec_quantum_us", json_object_new_int64(s->prov.exec_quantum_us));
	json_object_object_add(o, "preempt_timeout_us",
			       json_object_new_int((int)s->prov.preempt_timeout_us));
	json_object_object_add(o, "priority", json_object_new_int((int)s->prov.priority));
	json_object_object_add(o, "rm_clients", json_object_new_int64(s->prov.rm_clients));
	json_object_object_add(o, "rm_objects", json_object_new_int64(s->prov.rm_objects));
	/* A reset is committed before its scrub: the count includes it, and a loader that
	 * finds it pending performs it. */
	pf_json_add_u64(o, "resets", s->resets + s->reset_pending);
	if (s->reset_pending)
		json_object_object_add(o, "reset_pending", json_object_new_boolean(true));
	/* The definition too: a running slice's modify commits here, then rewrites the file.
	 * A transient slice has no file: this is its only record. */
	json_object_object_add(o, "definition", pf_slice_def_json(s));
	if (s->transient)
		json_object_object_add(o, "transient", json_object_new_boolean(true));
	/* A restore commits here before it writes the definition file. */
	if (s->def_pending)
		json_object_object_add(o, "restored", json_object_new_boolean(true));
	/* The object the slice runs on: a restart adopts that one only, whatever name it
	 * finds it under or another object it finds under the slice's name (check_object()). */
	if (id->ino) {
		pf_json_add_u64(o, "bar_dev", (uint64_t)id->dev);
		pf_json_add_u64(o, "bar_ino", (uint64_t)id->ino);
	}
	/* No allocations inside the partition: a start does not re-create them (the RM
	 * objects that owned them die with the process, apply_entry()), and a guest making
	 * many would grow the journal past what a start reads. */
	return o;
}

int pf_state_save_journal(struct pf_daemon *d)
{
	return pf_state_save_journal_without(d, NULL);
}

int pf_state_save_journal_without(struct pf_daemon *d, const struct pf_slice *skip)
{
	json_object *o = json_object_new_object(), *arr = json_object_new_array();
	char path[PF_PATH_MAX + 32];
	int r;

	json_object_object_add(o, "kind", json_object_new_string(PF_JOURNAL_KIND));
	json_object_object_add(o, "schema", json_object_new_int(PF_JOURNAL_SCHEMA));
	json_object_object_add(o, "instance", json_object_new_string(d->shm_prefix));
	json_object_object_add(o, "parent", json_object_new_string(d->cfg.pf_id));
	pf_json_add_u64(o, "vram_size", d->cfg.vram_size);
	pf_json_add_u64(o, "spare_vram", d->cfg.spare_vram);
	pf_json_add_u64(o, "dma_size", d->cfg.dma_size);
	json_object_object_add(o, "num_vfs", json_object_new_int((int)d->num_vfs));
	/* An incoming slice not committed yet is the source's: a restart here must not run it
	 * (the source resumes it), nor refuse a state that names it without a definition. */
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++)
		if (d->vfs[vf] && d->vfs[vf] != skip && !d->vfs[vf]->incoming)
			json_object_array_add(arr, journal_entry(d, d->vfs[vf]));
	json_object_object_add(o, "slices", arr);
	snprintf(path, sizeof(path), "%s/journal.json", d->cfg.state_dir);
	r = write_json(d, path, o);
	json_object_put(o);
	if (r)
		cmn_err("cannot write %s: %s", path, cmn_strerror(r));
	return r;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* @path, which is not a regular file, refused: -EBADMSG with @why naming what it is
 * (@sb, or an lstat() of it when the open met a symbolic link, @fd < 0). */
static int not_regular(const char *path, int fd, const struct stat *sb, char *why,
		       size_t why_len)
{
	struct stat lsb;
	mode_t mode = sb ? sb->st_mode : S_IFLNK;

	if (fd < 0 && !lstat(path, &lsb))
		mode = lsb.st_mode;
	snprintf(why, why_len, "it is %s, not a regular file", pf_file_kind(mode));
	if (fd >= 0)
		close(fd);
	return -EBADMSG;
}

/* Read and parse a JSON file; -ENOENT if absent, -ENODATA if empty, -EBADMSG if not a
 * regular file, not exactly one JSON value or if a key repeats, and then @why says which.
 * Opened without following a link or waiting (a FIFO in its place): what stands at the
 * name is what is read. */
static int read_json(const char *path, json_object **out, char *why, size_t why_len)
{
	char *buf;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK), r;
	struct stat sb;

	if (fd < 0 && errno == ELOOP)
		return not_regular(path, fd, NULL, why, why_len);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb)) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(sb.st_mode))
		return not_regular(path, fd, &sb, why, why_len);
	if (sb.st_size > PF_MAX_FILE) {
		close(fd);
		return -EFBIG;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	n = read(fd, buf, (size_t)sb.st_size);
	close(fd);
	if (n != sb.st_size) {
		free(buf);
		return -EIO;
	}
	buf[n] = 0;
	r = n ? pf_json_parse_checked(buf, (size_t)n, out, why, why_len) : -ENODATA;
	free(buf);
	return r;
}

/* What a file that cannot be taken returns: -EBADMSG, a refused state (vgpud exits 3 and
 * is not restarted), when it is what the file holds; the system's error when reading it
 * failed, which may pass. */
static int refused(int r)
{
	return r == -EBADMSG || r == -ENODATA || r == -EFBIG ? -EBADMSG : r;
}

static int load_slice_file(struct pf_daemon *d, const char *dir, const char *name)
{
	char path[PF_PATH_MAX + 300], want[PF_UUID_STR + 8], why[160];
	struct pf_err e = { 0 };
	struct pf_slice *s;
	json_object *o;
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	r = read_json(path, &o, why, sizeof(why));
	if (r) {
		cmn_err("state: %s: %s; refusing the state (fix the file; removing it drops the "
			"definition of slice %.*s)", path, r == -EBADMSG ? why : r == -ENODATA ?
			"empty" : cmn_strerror(r), (int)(strlen(name) - 5), name);
		return refused(r);
	}
	s = calloc(1, sizeof(*s));
	r = s ? pf_slice_from_record(d, o, s, &e) : -ENOMEM;
	json_object_put(o);
	json_object_put(e.data);
	if (!r) {
		snprintf(want, sizeof(want), "%s.json", s->uuid);
		if (strcmp(want, name)) {
			e.f.err = r = -EINVAL;
			snprintf(e.f.msg, sizeof(e.f.msg), "its uuid %s does not match the file name", s->uuid);
		}
	}
	if (!r && pf_slice_find(d, s->uuid))
		r = -EEXIST;
	if (!r && d->nr_slices >= PF_MAX_SLICES)
		r = -ENOSPC;
	if (r == -ENOMEM) {
		cmn_err("state: %s: out of memory; refusing the state", path);
		free(s);
		return r;
	}
	if (r) {
		/* A definition file carries no format version: what this vgpud does not know
		 * may be what a newer one wrote. */
		cmn_err("state: %s: %s; refusing the state (the file may come from a newer vgpud; "
			"removing it drops the definition of slice %.*s)", path,
			e.f.msg[0] ? e.f.msg : cmn_strerror(r), (int)(strlen(name) - 5), name);
		free(s);
		return -EBADMSG;
	}
	d->slices[d->nr_slices++] = s;
	return 0;
}

static int load_slices(struct pf_daemon *d)
{
	char dir[PF_PATH_MAX + 16];
	struct dirent *de;
	DIR *dp;
	int r = 0;

	snprintf(dir, sizeof(dir), "%s/slices", d->cfg.state_dir);
	dp = opendir(dir);
	if (!dp) {
		r = -errno;
		if (r == -ENOENT)
			return 0;
		cmn_err("state: cannot read %s: %s; refusing the state", dir, cmn_strerror(r));
		return r;
	}
	while (!r && (de = readdir(dp))) {
		size_t n = strlen(de->d_name);

		if (n < 6 || strcmp(de->d_name + n - 5, ".json"))
			continue;
		r = load_slice_file(d, dir, de->d_name);
	}
	closedir(dp);
	return r;
}

/* Member @key of @o, a non-negative JSON integer; else 0, and @key goes to *@bad unless an
 * earlier key is there already, so the message names the first wrong one. */
static uint64_t jget_u64(json_object *o, const char *key, const char **bad)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int) ||
	    json_object_get_int64(v) < 0) {
		if (!*bad)
			*bad = key;
		return 0;
	}
	return json_object_get_uint64(v);
}

/* The keys the journal may hold, top-level and per entry: every key the writer emits
 * (pf_state_save_journal_without(), journal_entry()) and those of older journals
 * (exec_quantum_ms). Any other may carry what a newer vgpud wrote, and a clean stop would
 * write the journal again without it: the state is refused instead. */
static const char *const journal_keys[] = {
	"kind", "schema", "instance", "parent", "vram_size", "spare_vram", "dma_size", "num_vfs",
	"slices", NULL
};
static const char *const journal_entry_keys[] = {
	"uuid", "vf", "vram_base", "vram_bytes", "channels", "doorbells", "exec_quantum_us",
	"exec_quantum_ms", "preempt_timeout_us", "priority", "rm_clients", "rm_objects", "resets",
	"reset_pending", "definition", "transient", "restored", "bar_dev", "bar_ino",
	"allocations", NULL
};

/* The first key of object @o that is not in @known, or NULL if every key is. */
static const char *journal_unknown_key(json_object *o, const char *const *known)
{
	json_object_object_foreach(o, key, v) {
		size_t i = 0;

		(void)v;
		while (known[i] && strcmp(known[i], key))
			i++;
		if (!known[i])
			return key;
	}
	return NULL;
}

/* One journal entry checked against the definitions, the device and the entries before it. */
struct jent {
	struct pf_slice *s;
	unsigned int vf;
	uint64_t base;
	struct pf_quota q;
	uint64_t resets;
	bool reset_pending;
	bool rewrite_def;	/* the definition file is behind the journal's */
	bool gone;		/* its VRAM object is missing or unusable: it comes back stopped */
	int bar_fd;		/* its VRAM object, opened and vetted; -1 if none or handed on */
	bool write_def;		/* restored, its definition file not written yet */
	bool bar_known;		/* bar_id holds the object the slice ran with (an older
				 * journal has no record) */
	struct pf_bar_ino bar_id;
	json_object *allocs;	/* an older vgpud's "allocations", or NULL */
	struct pf_slice def;	/* the definition the journal committed */
};

/* The ranges a provisioned quota can take: a slice's own attributes or its type's. */
#define PF_J_MAX_CHANNELS	(64u > GPU_FN_MAX_CHANNELS ? 64u : GPU_FN_MAX_CHANNELS)
#define PF_J_MAX_DOORBELLS	1024u

/* The RM limits of an entry; absent in older journals: the defaults for its VRAM. One
 * that is there but not a number is wrong, not absent. */
static void rm_limits_load(json_object *o, struct pf_quota *q, const char **bad)
{
	pf_rm_limits_default(q);
	if (json_object_object_get_ex(o, "rm_clients", NULL))
		q->rm_clients = (uint32_t)cmn_min(jget_u64(o, "rm_clients", bad), UINT32_MAX);
	if (json_object_object_get_ex(o, "rm_objects", NULL))
		q->rm_objects = (uint32_t)cmn_min(jget_u64(o, "rm_objects", bad), UINT32_MAX);
}

/* A journal entry's slice length in us; an entry written in whole milliseconds
 * (exec_quantum_ms) means the same. */
static uint64_t journal_quantum_us(json_object *o, const char **bad)
{
	if (json_object_object_get_ex(o, "exec_quantum_us", NULL))
		return jget_u64(o, "exec_quantum_us", bad);
	return cmn_min(jget_u64(o, "exec_quantum_ms", bad), (uint64_t)UINT32_MAX) * 1000;
}

static int check_quota(const struct jent *je, const char *uuid, char *why, size_t wlen)
{
	const struct pf_quota *q = &je->q;

	if (!q->channels || q->channels > PF_J_MAX_CHANNELS)
		return snprintf(why, wlen, "slice %s: channels %u outside 1..%u", uuid, q->channels,
				PF_J_MAX_CHANNELS), -EBADMSG;
	if (!q->doorbells || q->doorbells > PF_J_MAX_DOORBELLS)
		return snprintf(why, wlen, "slice %s: doorbells %u outside 1..%u", uuid, q->doorbells,
				PF_J_MAX_DOORBELLS), -EBADMSG;
	if (q->exec_quantum_us > PF_EXEC_QUANTUM_US_MAX ||
	    q->preempt_timeout_us > PF_PREEMPT_TIMEOUT_US_MAX)
		return snprintf(why, wlen, "slice %s: exec_quantum_us or preempt_timeout_us out of "
				"range", uuid), -EBADMSG;
	if (q->rm_clients > PF_RM_CLIENTS_MAX || q->rm_objects > PF_RM_OBJECTS_MAX)
		return snprintf(why, wlen, "slice %s: rm_clients or rm_objects out of range", uuid),
		       -EBADMSG;
	if (q->priority > PF_PRIO_NORMAL)
		return snprintf(why, wlen, "slice %s: priority %u is not low or normal (high is the "
				"PF's)", uuid, (unsigned int)q->priority), -EBADMSG;
	return 0;
}

/* The committed definition inside an entry: the slice file may be one step behind it. */
static int check_def(struct pf_daemon *d, json_object *o, struct jent *je, const char *uuid,
		     char *why, size_t wlen)
{
	struct pf_err e = { 0 };
	json_object *def;
	int r;

	if (!json_object_object_get_ex(o, "definition", &def)) {
		je->def = *je->s;
		return 0;
	}
	r = pf_slice_from_record(d, def, &je->def, &e);
	json_object_put(e.data);
	if (!r && strcmp(je->def.uuid, je->s->uuid))
		r = cmn_fail(&e.f, -EINVAL, "its uuid is %s", je->def.uuid);
	if (r)
		return snprintf(why, wlen, "slice %s: bad definition: %.180s", uuid, e.f.msg), -EBADMSG;
	return 0;
}

/* The slice of an entry that is its only record, made from the entry's definition; it
 * joins the daemon's list now. If a later check fails the loader drops every slice, so
 * nothing of it is applied. @what names the kind of entry in messages. */
static int entry_slice(struct pf_daemon *d, json_object *o, struct jent *je, const char *uuid,
		       bool transient, const char *what, char *why, size_t wlen)
{
	struct pf_err e = { 0 };
	struct pf_slice *s;
	json_object *def;
	int r;

	if (!json_object_object_get_ex(o, "definition", &def))
		return snprintf(why, wlen, "slice %s: %s without its definition", uuid, what),
		       -EBADMSG;
	if (d->nr_slices >= PF_MAX_SLICES)
		return snprintf(why, wlen, "slice %s: too many slices (%u)", uuid, PF_MAX_SLICES),
		       -EBADMSG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return snprintf(why, wlen, "out of memory"), -ENOMEM;
	r = pf_slice_from_record(d, def, s, &e);
	json_object_put(e.data);
	if (!r && strcmp(s->uuid, uuid))
		r = cmn_fail(&e.f, -EINVAL, "its uuid is %s", s->uuid);
	if (r) {
		free(s);
		return snprintf(why, wlen, "slice %s: bad definition: %.180s", uuid, e.f.msg), -EBADMSG;
	}
	s->transient = transient;
	d->slices[d->nr_slices++] = s;
	je->s = s;
	return 0;
}

/* Whether entry @o has boolean @key set; -EBADMSG if it is there but not a boolean. */
static int entry_flag(json_object *o, const char *key, const char *uuid, bool *out, char *why,
		      size_t wlen)
{
	json_object *t;

	*out = false;
	if (!json_object_object_get_ex(o, key, &t))
		return 0;
	if (!json_object_is_type(t, json_type_boolean))
		return snprintf(why, wlen, "slice %s: \"%s\" is not a boolean", uuid, key), -EBADMSG;
	*out = json_object_get_boolean(t);
	return 0;
}

/* Whether transient entry @o and the definition file's slice @s carry the same hand-over
 * record: the source wrote the file when the migration left it unconfirmed (req_hold(),
 * handed_over()), and crashed before the journal dropped the transient mark. */
static bool handed_over_entry(json_object *o, const struct pf_slice *s)
{
	json_object *def, *to;

	return !s->transient && s->migrated_to[0] &&
	       json_object_object_get_ex(o, "definition", &def) &&
	       json_object_object_get_ex(def, "migrated_out", &to) &&
	       json_object_is_type(to, json_type_string) &&
	       !strcmp(json_object_get_string(to), s->migrated_to);
}

/* A transient entry ("transient": true) is the slice's only record. A restored entry
 * ("restored": true) is committed before the definition file is written: without the
 * file it is the record too, and the file is written when it is applied. */
static int transient_entry(struct pf_daemon *d, json_object *o, struct jent *je,
			   const char *uuid, char *why, size_t wlen)
{
	bool transient, restored;
	int r = entry_flag(o, "transient", uuid, &transient, why, wlen);

	if (!r)
		r = entry_flag(o, "restored", uuid, &restored, why, wlen);
	if (r)
		return r;
	/* Handed over, the slice is defined by its file: the entry is one write behind. */
	if (transient && je->s && handed_over_entry(o, je->s))
		return 0;
	if (transient && je->s)
		return snprintf(why, wlen, "slice %s: transient, but a definition file or an earlier "
				"entry has it too", uuid), -EBADMSG;
	if (transient)
		return entry_slice(d, o, je, uuid, true, "transient", why, wlen);
	if (restored && !je->s) {
		je->write_def = true;
		return entry_slice(d, o, je, uuid, false, "restored", why, wlen);
	}
	return 0;
}

/* An entry's numbers and flags, each of its type: a wrong one names its key. */
static int entry_fields(json_object *o, struct jent *je, const char *uuid, char *why,
			size_t wlen)
{
	const char *bad = NULL;
	uint64_t vf = jget_u64(o, "vf", &bad), ch = jget_u64(o, "channels", &bad);
	uint64_t db = jget_u64(o, "doorbells", &bad), eq = journal_quantum_us(o, &bad);
	uint64_t pt = jget_u64(o, "preempt_timeout_us", &bad), pr = jget_u64(o, "priority", &bad);

	je->base = jget_u64(o, "vram_base", &bad);
	je->q.vram = jget_u64(o, "vram_bytes", &bad);
	je->resets = jget_u64(o, "resets", &bad);
	/* Clamped so that an out-of-range value stays out of range after the narrowing. */
	je->vf = (unsigned int)cmn_min(vf, (uint64_t)UINT_MAX);
	je->q.channels = (uint32_t)cmn_min(ch, (uint64_t)UINT32_MAX);
	je->q.doorbells = (uint32_t)cmn_min(db, (uint64_t)UINT32_MAX);
	je->q.exec_quantum_us = (uint32_t)cmn_min(eq, (uint64_t)UINT32_MAX);
	je->q.preempt_timeout_us = (uint32_t)cmn_min(pt, (uint64_t)UINT32_MAX);
	je->q.priority = (enum pf_priority)cmn_min(pr, (uint64_t)PF_PRIO_HIGH + 1);
	rm_limits_load(o, &je->q, &bad);
	/* The BAR object's identity; an older vgpud recorded none. */
	je->bar_known = json_object_object_get_ex(o, "bar_dev", NULL) ||
			json_object_object_get_ex(o, "bar_ino", NULL);
	if (je->bar_known) {
		je->bar_id.dev = (dev_t)jget_u64(o, "bar_dev", &bad);
		je->bar_id.ino = (ino_t)jget_u64(o, "bar_ino", &bad);
	}
	if (bad)
		return snprintf(why, wlen, "slice %s: \"%s\" is missing or not a non-negative "
				"integer", uuid, bad), -EBADMSG;
	/* Written by older vgpuds only: checked when there, never needed. */
	if (json_object_object_get_ex(o, "allocations", &je->allocs) &&
	    !json_object_is_type(je->allocs, json_type_array))
		return snprintf(why, wlen, "slice %s: \"allocations\" is not an array", uuid),
		       -EBADMSG;
	return entry_flag(o, "reset_pending", uuid, &je->reset_pending, why, wlen);
}

/* The allocations inside the partition an older vgpud's entry lists, each [base, size,
 * state] of integers within it. They are checked, not re-created (apply_entry() says why),
 * but checked here, before anything is applied. An entry may have none. */
static int check_allocs(const struct jent *je, const char *uuid, char *why, size_t wlen)
{
	size_t n = je->allocs ? json_object_array_length(je->allocs) : 0;

	for (size_t i = 0; i < n; i++) {
		json_object *a = json_object_array_get_idx(je->allocs, i);
		const char *bad = NULL;
		uint64_t v[3];

		if (!json_object_is_type(a, json_type_array) || json_object_array_length(a) != 3)
			return snprintf(why, wlen, "slice %s: allocations[%zu] is not [base, size, "
					"state]", uuid, i), -EBADMSG;
		for (size_t k = 0; k < 3; k++) {
			json_object *x = json_object_array_get_idx(a, k);

			if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0)
				bad = "not a non-negative integer";
			v[k] = json_object_get_uint64(x);
		}
		if (!bad && v[2] > UINT32_MAX)
			bad = "a state out of range";
		if (!bad && (v[0] < je->base || v[1] > je->q.vram ||
			     v[0] - je->base > je->q.vram - v[1]))
			bad = "outside the slice's partition";
		if (bad)
			return snprintf(why, wlen, "slice %s: allocations[%zu] holds %s", uuid, i,
					bad), -EBADMSG;
	}
	return 0;
}

static int check_entry(struct pf_daemon *d, json_object *o, struct jent *je, unsigned int num_vfs,
		       const struct jent *prev, size_t nprev, char *why, size_t wlen)
{
	json_object *u;
	char norm[PF_UUID_STR];
	const char *unknown;
	int r;

	memset(je, 0, sizeof(*je));
	je->bar_fd = -1;
	if (!json_object_object_get_ex(o, "uuid", &u) ||
	    !json_object_is_type(u, json_type_string) ||
	    ctlc_uuid_parse(json_object_get_string(u), norm, NULL))
		return snprintf(why, wlen, "an entry has no valid uuid"), -EBADMSG;
	/* Before any slice is made of it; @nprev entries precede it: it is slices[nprev]. */
	unknown = journal_unknown_key(o, journal_entry_keys);
	if (unknown)
		return snprintf(why, wlen, "slices[%zu] (slice %s): unknown key \"%.64s\" (the file "
				"may come from a newer vgpud)", nprev, norm, unknown), -EBADMSG;
	je->s = pf_slice_find(d, norm);
	r = transient_entry(d, o, je, norm, why, wlen);
	if (r)
		return r;
	if (!je->s)
		return snprintf(why, wlen, "slice %s has no definition", norm), -EBADMSG;
	r = entry_fields(o, je, norm, why, wlen);
	if (r)
		return r;
	if (je->reset_pending && !je->resets)
		return snprintf(why, wlen, "slice %s: a pending reset with no reset count", norm),
		       -EBADMSG;
	if (!je->vf || je->vf > num_vfs)
		return snprintf(why, wlen, "slice %s: VF %u is not enabled", norm, je->vf), -EBADMSG;
	r = check_quota(je, norm, why, wlen);
	if (!r)
		r = check_def(d, o, je, norm, why, wlen);
	if (r)
		return r;
	if (!je->q.vram || je->base % PF_VRAM_ALIGN || je->q.vram % PF_VRAM_ALIGN ||
	    je->base < d->cfg.spare_vram || je->base > d->cfg.vram_size ||
	    je->q.vram > d->cfg.vram_size - je->base)
		return snprintf(why, wlen, "slice %s: partition outside usable VRAM", norm), -EBADMSG;
	for (size_t i = 0; i < nprev; i++) {
		if (prev[i].vf == je->vf || prev[i].s == je->s ||
		    (je->base < prev[i].base + prev[i].q.vram && prev[i].base < je->base + je->q.vram))
			return snprintf(why, wlen, "slice %s: VF or VRAM used twice", norm), -EBADMSG;
	}
	return check_allocs(je, norm, why, wlen);
}

/* Errors of the system rather than of the object: the object may be fine, and a slice
 * stopped for them would lose its VRAM to the stray object sweep. */
static bool system_error(int r)
{
	return r == -ENOMEM || r == -EMFILE || r == -ENFILE;
}

/* Entry @je's VRAM object @name cannot be used (@bad says why): the slice comes back
 * stopped, a transient one is dropped. */
static void object_unusable(struct jent *je, const char *name, const char *bad)
{
	cmn_warn("state: VRAM object %s of slice %s %s; %s", name, je->s->uuid, bad,
		 je->s->transient ? "the transient slice is dropped" :
		 "the slice comes back stopped");
	snprintf(je->s->stopped_why, sizeof(je->s->stopped_why), "VRAM object %s %s", name, bad);
	je->gone = true;
}

/* The entry's VRAM object, opened (kept in je->bar_fd for apply_entry()) and vetted with
 * the owner uid and the object identity the journal committed; not changed. Whatever is
 * wrong with it is that slice's alone, and its guest (or a local user who put a file in
 * its place) may have done it: the slice comes back stopped, the rest of the state loads.
 * A missing one was removed by an outside hand: a stop commits before it unlinks. */
static int check_object(struct pf_daemon *d, struct jent *je, char *why, size_t wlen)
{
	uint64_t size = vf_bar_size(je->q.vram, d->cfg.dma_size);
	char name[96], bad[160];
	int r;

	pf_shm_name(d, je->vf, name, sizeof(name));
	r = pf_bar_object_adopt(d, je->vf, je->def.owner_uid, size,
				je->bar_known ? &je->bar_id : NULL, &je->bar_fd, bad, sizeof(bad));
	if (!r)
		return 0;
	if (system_error(r))
		return snprintf(why, wlen, "VRAM object %.48s of slice %s %.140s", name,
				je->s->uuid, bad), r;
	object_unusable(je, name, bad);
	return 0;
}

/* The entry's vetted object made to fit its BAR (a grown one cut back): the first change
 * to an object, made once the whole state was checked, so that a refused state changed
 * none. A failure stops the slice as check_object() does; the system's refuses the state
 * (-errno, the object closed). */
static int settle_object(struct pf_daemon *d, struct jent *je)
{
	uint64_t size = vf_bar_size(je->q.vram, d->cfg.dma_size);
	char name[96], bad[160];
	int r;

	if (je->gone)
		return 0;
	r = pf_bar_object_settle(d, je->vf, je->bar_fd, size, bad, sizeof(bad));
	if (!r)
		return 0;
	pf_shm_name(d, je->vf, name, sizeof(name));
	close(je->bar_fd);
	je->bar_fd = -1;
	d->bar_ino[je->vf] = (struct pf_bar_ino){ 0 };
	if (system_error(r)) {
		cmn_err("state: VRAM object %s of slice %s %s", name, je->s->uuid, bad);
		return r;
	}
	object_unusable(je, name, bad);
	return 0;
}

/* The VRAM objects of entries not brought up (a refused state, an entry after the one
 * that failed). */
static void close_objects(struct jent *je, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (je[i].bar_fd >= 0)
			close(je[i].bar_fd);
		je[i].bar_fd = -1;
	}
}

/* The journal's definition wins over the file: a modify of a running slice commits in the
 * journal first and rewrites the file after, so the file may be one step behind. Memory
 * only; finish_entry() rewrites the file once every entry is up. */
static void adopt_def(struct jent *je)
{
	struct pf_slice *s = je->s;
	json_object *a = pf_slice_def_json(s), *b = pf_slice_def_json(&je->def);
	bool same = json_object_equal(a, b);

	json_object_put(a);
	json_object_put(b);
	if (same)
		return;
	memcpy(s->type, je->def.type, sizeof(s->type));
	s->autostart = je->def.autostart;
	s->custom = je->def.custom;
	s->custom_bits = je->def.custom_bits;
	memcpy(s->owner_vm, je->def.owner_vm, sizeof(s->owner_vm));
	s->owner_gen = je->def.owner_gen;
	s->owner_uid = je->def.owner_uid;
	memcpy(s->migrated_to, je->def.migrated_to, sizeof(s->migrated_to));
	je->rewrite_def = true;
}

/* A transient slice whose VRAM object is gone cannot come back stopped: it has no
 * definition to come back as. */
static void drop_transient(struct pf_daemon *d, struct jent *je)
{
	for (unsigned int i = 0; i < d->nr_slices; i++) {
		if (d->slices[i] == je->s) {
			d->slices[i] = d->slices[--d->nr_slices];
			break;
		}
	}
	pf_slice_free(je->s);
	je->s = NULL;
}

/* A live migration's source died after its hand-over record: the destination may have
 * committed and run the slice, so it does not run here. It is held (its VF and VRAM kept,
 * nothing of it run) with the record in its definition file (a transient one gets a file
 * now) until an admin reclaims or undefines it; one whose VRAM object is gone stays
 * defined and stopped. */
static void handed_over(struct pf_daemon *d, struct jent *je)
{
	struct pf_slice *s = je->s;

	s->transient = false;
	/* One that cannot be written is behind: the journal keeps the definition (a transient
	 * slice's only record) marked restored. */
	if (pf_slice_def_write(d, s))
		cmn_warn("state: slice %s: its definition file cannot be written; the journal "
			 "keeps its definition", s->uuid);
	cmn_warn("state: slice %s: migrated out to %s (unconfirmed): not run here; it may run "
		 "there. %s; `vgpuctl reclaim -u %s` runs it here again, `vgpuctl undefine -u %s` "
		 "drops it", s->uuid, s->migrated_to, s->vf ? "Held with its VRAM" :
		 "Stopped, its VRAM gone", s->uuid, s->uuid);
}

/* First pass over the checked entries: memory and the device only, so that a failure
 * (memory, mmap) can still be undone; of the objects, only bytes a grown one holds past its
 * BAR are cut (settle_object()), which no mapping reaches. No file is written, no reset
 * run. */
static int apply_entry(struct pf_daemon *d, struct jent *je)
{
	struct pf_err e = { 0 };
	int ret = settle_object(d, je);

	if (ret)
		return ret;
	if (je->gone && je->s->transient && !je->s->migrated_to[0]) {
		drop_transient(d, je);
		return 0;
	}
	if (!je->s->transient)
		adopt_def(je);
	if (je->gone)
		return 0;
	je->s->prov = je->q;
	je->s->bar_fd = je->bar_fd;	/* the bring-up owns it from here */
	je->bar_fd = -1;
	/* The allocations are checked but not re-created: the RM objects that owned them
	 * died with the old process, and the guest rebuilds its objects when it reconnects. */
	ret = pf_slice_bring_up(d, je->s, je->vf, je->base, true, &e);
	if (ret) {
		cmn_err("state: slice %s: %s", je->s->uuid,
			e.f.msg[0] ? e.f.msg : cmn_strerror(ret));
	} else {
		/* The journal's count, not the header's: the guest can write the header. */
		je->s->resets = je->resets;
		je->s->hdr->reset_count = (uint32_t)je->resets;
		if (je->s->migrated_to[0])
			pf_slice_hold(d, je->s);
	}
	json_object_put(e.data);
	return ret;
}

/* Second pass, once every entry is up: the definition files the journal is ahead of, the
 * hand-over records, and the resets committed but maybe not done. */
static void finish_entry(struct pf_daemon *d, struct jent *je)
{
	struct pf_slice *s = je->s;

	if (!s)
		return;		/* a dropped transient slice */
	/* A file that cannot be written stays behind (s->def_pending): the journal keeps the
	 * entry marked restored, with the definition a stop writes first (a loader that finds
	 * a file ignores the mark). */
	if (je->rewrite_def)
		cmn_warn("state: slice %s: definition file behind the journal; %s", s->uuid,
			 pf_slice_def_write(d, s) ? "not rewritten, the journal keeps the "
			 "definition" : "rewritten");
	if (je->write_def && pf_slice_def_write(d, s))
		cmn_warn("state: slice %s: restored, but its definition file cannot be written; "
			 "the journal keeps its definition", s->uuid);
	if (s->migrated_to[0]) {
		handed_over(d, je);
		return;
	}
	if (je->gone || !je->reset_pending)
		return;
	/* Committed but maybe not done: do it (again); the scrub is idempotent. */
	cmn_warn("state: slice %s: finishing the reset of VF %u", s->uuid, je->vf);
	s->resets = je->resets - 1;
	if (pf_vf_reset(d, s))
		cmn_warn("state: slice %s: the reset failed", s->uuid);
}

/* The journal's "schema" against the one this vgpud reads: a higher one is a newer
 * vgpud's, whose entries may mean what this one cannot tell; refused all the same, but
 * named, so that the way out (that vgpud, or moving the file) is plain. */
static int journal_schema_check(json_object *j, char *why, size_t wlen)
{
	json_object *v;
	int64_t n;

	if (!json_object_object_get_ex(j, "schema", &v) || !json_object_is_type(v, json_type_int))
		return snprintf(why, wlen, "journal schema %.64s is unknown (this vgpud reads "
				"schema %d)", v ? json_object_to_json_string(v) : "(none)",
				PF_JOURNAL_SCHEMA), -EBADMSG;
	n = json_object_get_int64(v);
	if (n > PF_JOURNAL_SCHEMA)
		return snprintf(why, wlen, "journal schema %" PRId64 ", written by a newer vgpud "
				"(this one reads schema %d)", n, PF_JOURNAL_SCHEMA), -EBADMSG;
	if (n != PF_JOURNAL_SCHEMA)
		return snprintf(why, wlen, "journal schema %" PRId64 " is unknown (this vgpud "
				"reads schema %d)", n, PF_JOURNAL_SCHEMA), -EBADMSG;
	return 0;
}

static int journal_header_check(struct pf_daemon *d, json_object *j, char *why, size_t wlen)
{
	const char *bad = NULL, *unknown;
	uint64_t vram, spare, dma, num_vfs;
	json_object *v;
	int r;

	/* A JSON null has no string: json_object_get_string() gives NULL for it. */
	if (!json_object_object_get_ex(j, "kind", &v) || !json_object_is_type(v, json_type_string) ||
	    strcmp(json_object_get_string(v), PF_JOURNAL_KIND))
		return snprintf(why, wlen, "not a vgpud journal (its \"kind\" is %.64s, not "
				"\"%s\")", v ? json_object_to_json_string(v) : "(none)",
				PF_JOURNAL_KIND), -EBADMSG;
	r = journal_schema_check(j, why, wlen);
	if (r)
		return r;
	unknown = journal_unknown_key(j, journal_keys);
	if (unknown)
		return snprintf(why, wlen, "unknown key \"%.64s\" (the file may come from a newer "
				"vgpud)", unknown), -EBADMSG;
	if (!json_object_object_get_ex(j, "instance", &v) ||
	    !json_object_is_type(v, json_type_string) ||
	    strcmp(json_object_get_string(v), d->shm_prefix))
		return snprintf(why, wlen, "written by another instance (%s)",
				json_object_get_string(v) ? json_object_get_string(v) : "none"),
		       -EBADMSG;
	vram = jget_u64(j, "vram_size", &bad);
	spare = jget_u64(j, "spare_vram", &bad);
	dma = jget_u64(j, "dma_size", &bad);
	num_vfs = jget_u64(j, "num_vfs", &bad);
	if (bad)
		return snprintf(why, wlen, "\"%s\" is missing or not a non-negative integer", bad),
		       -EBADMSG;
	if (vram != d->cfg.vram_size || spare != d->cfg.spare_vram || dma != d->cfg.dma_size)
		return snprintf(why, wlen, "written for another VRAM size, PF spare or DMA size"), -EBADMSG;
	if (num_vfs > d->cfg.max_vfs)
		return snprintf(why, wlen, "num_vfs above max_vfs"), -EBADMSG;
	return 0;
}

/* Where shm_open() keeps its objects (glibc's): the sweep looks at them without opening. */
#define PF_SHM_DIR	"/dev/shm"

/* Whether @sb may be a VRAM object vgpud made: a regular file of root's or of an owner uid
 * of a slice it knows. Anything else is someone else's file under one of its names. */
static bool own_object(const struct pf_daemon *d, const struct stat *sb)
{
	if (!S_ISREG(sb->st_mode))
		return false;
	if (sb->st_uid == 0)
		return true;
	for (unsigned int i = 0; i < d->nr_slices; i++)
		if (d->slices[i]->owner_uid >= 0 && sb->st_uid == (uid_t)d->slices[i]->owner_uid)
			return true;
	return false;
}

/* This instance's VRAM objects that no running slice names, as "name name ..." in @list;
 * with @drop they are unlinked (a start or stop that a crash cut short left them). They
 * are looked at, never opened: a FIFO in their place would hold the open until a writer
 * came, a lease until it is broken. What vgpud did not make is left where it is. */
static unsigned int stray_objects(struct pf_daemon *d, bool drop, char *list, size_t len)
{
	char name[96], path[sizeof(PF_SHM_DIR) + 96];
	unsigned int n = 0;
	struct stat sb;
	size_t off = 0;

	list[0] = 0;
	for (unsigned int vf = 1; vf <= PF_MAX_VFS; vf++) {
		if (d->vfs[vf])
			continue;
		pf_shm_name(d, vf, name, sizeof(name));
		snprintf(path, sizeof(path), PF_SHM_DIR "%s", name);
		if (fstatat(AT_FDCWD, path, &sb, AT_SYMLINK_NOFOLLOW))
			continue;
		if (!own_object(d, &sb)) {
			cmn_warn("state: %s is not a VRAM object of vgpud's (%s of uid %u); left "
				 "alone", path, pf_file_kind(sb.st_mode), (unsigned int)sb.st_uid);
			continue;
		}
		n++;
		if (off < len)
			off += (size_t)snprintf(list + off, len - off, "%s%s", off ? " " : "", name);
		if (drop) {
			pf_dur_point("unlink");
			shm_unlink(name);
		}
	}
	return n;
}

/* No journal, or an empty one: nothing runs. A missing one (removed by hand, or never
 * written) is taken, with a warning naming the VRAM objects that say otherwise. vgpud never
 * writes an empty one: with VRAM objects of this instance there, it is damage that hides
 * running slices (a transient one's only record), and starting would write over it and
 * sweep their objects; the state is refused (-EBADMSG) with nothing changed. */
static int journal_lost(struct pf_daemon *d, const char *path, int why)
{
	char list[1024];
	unsigned int n = stray_objects(d, false, list, sizeof(list));

	if (n && why == -ENODATA) {
		cmn_err("state: %s is empty, but %u VRAM objects of this instance exist (%s): "
			"slices may have run on them; refusing the state (restore the journal, or "
			"remove %s to start without them: their slices come back stopped and a "
			"start replaces each object)", path, n, list, path);
		return -EBADMSG;
	}
	if (n)
		cmn_warn("state: %s is missing but %u VRAM objects of this instance exist (%s): "
			 "their slices come back stopped and a start replaces each object", path, n,
			 list);
	else if (why == -ENODATA)
		cmn_warn("state: %s is empty: no slice is running", path);
	return 0;
}

/* The entries that came back running: not those whose object was gone, nor those handed
 * over to a live migration's destination. */
static size_t running_entries(const struct jent *je, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += je[i].s && je[i].s->vf;
	return k;
}

static int load_journal(struct pf_daemon *d)
{
	char path[PF_PATH_MAX + 32], why[256] = "";
	struct jent je[PF_MAX_VFS];
	json_object *j, *arr;
	size_t n = 0;
	const char *bad = NULL;
	unsigned int num_vfs;
	int r;

	snprintf(path, sizeof(path), "%s/journal.json", d->cfg.state_dir);
	r = read_json(path, &j, why, sizeof(why));
	if (r == -ENOENT || r == -ENODATA)
		return journal_lost(d, path, r);
	if (r) {
		cmn_err("state: %s: %s; refusing the state", path,
			 r == -EBADMSG ? why : cmn_strerror(r));
		return refused(r);
	}
	r = journal_header_check(d, j, why, sizeof(why));
	num_vfs = (unsigned int)jget_u64(j, "num_vfs", &bad);
	if (!r && (!json_object_object_get_ex(j, "slices", &arr) ||
		   !json_object_is_type(arr, json_type_array) ||
		   json_object_array_length(arr) > PF_MAX_VFS)) {
		snprintf(why, sizeof(why), "no valid \"slices\" array");
		r = -EBADMSG;
	}
	for (size_t i = 0; !r && i < json_object_array_length(arr); i++, n++)
		r = check_entry(d, json_object_array_get_idx(arr, i), &je[n], num_vfs, je, n, why,
				sizeof(why));
	/* The objects once every entry passed. Vetting changes none: a grown one is cut back
	 * when it is applied (settle_object()), a reservation made at its bring-up. */
	for (size_t i = 0; !r && i < n; i++)
		r = check_object(d, &je[i], why, sizeof(why));
	if (r) {
		cmn_err("state: %s: %s; refusing the state (nothing was applied)", path, why);
		close_objects(je, n);
		goto put;
	}
	/* Everything checked: apply. A failure now is the system's (memory, mmap), and
	 * what was brought up is dropped again without touching the objects. */
	d->num_vfs = num_vfs;
	for (size_t i = 0; i < n; i++) {
		r = apply_entry(d, &je[i]);
		if (r) {
			cmn_err("state: %s: entry %zu cannot be brought up; refusing the state "
				"(nothing was written)", path, i);
			for (size_t k = 0; k <= i; k++)
				if (je[k].s && je[k].s->vf)
					pf_slice_detach(d, je[k].s);
			close_objects(je + i + 1, n - i - 1);
			d->num_vfs = 0;
			break;
		}
	}
	for (size_t i = 0; !r && i < n; i++)
		finish_entry(d, &je[i]);
	if (!r) {
		char list[1024];

		if (stray_objects(d, true, list, sizeof(list)))
			cmn_info("state: dropped VRAM objects no slice runs on: %s", list);
		cmn_info("state: restored %zu running slices, %u VFs", running_entries(je, n),
			 num_vfs);
	}
put:
	json_object_put(j);
	return r;
}

int pf_state_load(struct pf_daemon *d)
{
	char dir[PF_PATH_MAX + 16], real[PATH_MAX];
	int r;

	snprintf(dir, sizeof(dir), "%s/slices", d->cfg.state_dir);
	r = pf_mkdir_p(dir, 0750);
	if (r) {
		cmn_err("state: cannot create %s: %s", dir, cmn_strerror(r));
		return r;
	}
	if (!realpath(d->cfg.state_dir, real)) {
		r = -errno;
		cmn_err("state: cannot resolve %s: %s", d->cfg.state_dir, cmn_strerror(r));
		return r;
	}
	/* One prefix per state dir: two daemons with separate state never share objects. */
	snprintf(d->shm_prefix, sizeof(d->shm_prefix), "vgpud-%016" PRIx64, pf_hash64(real));
	r = load_slices(d);
	if (!r)
		r = load_journal(d);
	if (r) {
		for (unsigned int i = 0; i < d->nr_slices; i++)
			pf_slice_free(d->slices[i]);
		d->nr_slices = 0;
	}
	return r;
}
