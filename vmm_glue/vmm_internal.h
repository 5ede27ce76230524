/* SPDX-License-Identifier: MIT */
/* vmm_glue internals shared by its files: a growable string, the libvirt side of the tool. */
#ifndef VGPU_VMM_INTERNAL_H
#define VGPU_VMM_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm_glue/vmm_glue.h"

struct json_object;

/* A malloc'd string that grows; @oom set once an allocation failed (later appends no-op). */
struct vmm_buf {
	char *s;
	size_t len, cap;
	bool oom;
};

void vmm_buf_printf(struct vmm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append @s with the five XML special characters escaped. */
void vmm_buf_xml(struct vmm_buf *b, const char *s);

/* Fill @s from one element of query-slices' "slices". */
void vmm_slice_from_json(struct json_object *o, struct vmm_slice *s);

/* ---- virt.c: the libvirt calls of the tool ---- */
struct vmm_virt;

/* A domain as vm list shows it. */
struct vmm_vm_info {
	char name[128];
	char uuid[VMM_UUID_LEN];
	const char *state;		/* "running", "shut off", ... */
	bool persistent;
	bool has_meta;
	struct vmm_meta meta;
};

int vmm_virt_open(const char *uri, struct vmm_virt **out, struct cmn_fail *e);
void vmm_virt_close(struct vmm_virt *v);
/* Start @xml transient (virDomainCreateXML) or define it and start it (@persistent), with
 * libvirt's own schema validation. */
int vmm_virt_launch(struct vmm_virt *v, const char *xml, bool persistent, struct cmn_fail *e);
/* Wait until the domain @uuid is gone or shut off; destroy it after @timeout_s (0: never).
 * @tick (may be NULL) runs once per poll, so the caller can report progress meanwhile.
 * 0 when it ended by itself, -ETIMEDOUT when it had to be destroyed. */
int vmm_virt_wait(struct vmm_virt *v, const char *uuid, unsigned int timeout_s,
		  void (*tick)(void *ctx), void *ctx, struct cmn_fail *e);
/* Look a domain up by name or UUID and fill @info (with its metadata if it has ours). */
int vmm_virt_lookup(struct vmm_virt *v, const char *name_or_uuid, struct vmm_vm_info *info,
		    struct cmn_fail *e);
/* Destroy it if running and undefine it if @undefine and persistent. */
int vmm_virt_stop(struct vmm_virt *v, const char *uuid, bool undefine, struct cmn_fail *e);
/* Every domain (active and defined); *out malloc'd, the caller frees. */
int vmm_virt_list(struct vmm_virt *v, struct vmm_vm_info **out, size_t *n, struct cmn_fail *e);

/* Migration (migrate.c). The domain's XML in *@xml (malloc'd), libvirt's migratable form if
 * @migratable. */
int vmm_virt_xml(struct vmm_virt *v, const char *uuid, bool migratable, char **xml,
		 struct cmn_fail *e);
/* Migrate the domain to @dest_uri (peer to peer) as @dest_xml, @live or with its vCPUs
 * paused from the start, QEMU's stream to @mig_uri (NULL: where the destination libvirtd
 * says), the destination left paused; @max_downtime_ms (0: libvirt's default) first.
 * Blocks until libvirt is done. */
int vmm_virt_migrate(struct vmm_virt *v, const char *uuid, const char *dest_uri,
		     const char *mig_uri, const char *dest_xml, bool live,
		     unsigned int max_downtime_ms, struct cmn_fail *e);
/* The QEMU version libvirt reports for its host (major * 1000000 + minor * 1000 + micro). */
int vmm_virt_qemu_version(struct vmm_virt *v, unsigned long *version, struct cmn_fail *e);
/* What libvirt says of the domain's job in progress. */
struct vmm_virt_job {
	bool active;
	uint64_t processed, remaining;	/* bytes of guest RAM */
	uint64_t iteration;		/* QEMU's RAM passes */
	uint64_t downtime_ms;		/* QEMU's stop (completed jobs) */
};
/* The job in progress, or with @completed the last one that completed (a migrated
 * domain's destination keeps the incoming one's). 0, -ENOENT (no domain) or -EIO. */
int vmm_virt_job(struct vmm_virt *v, const char *uuid, bool completed, struct vmm_virt_job *j);
/* Resume a paused domain. */
int vmm_virt_resume(struct vmm_virt *v, const char *uuid, struct cmn_fail *e);

#endif
