// SPDX-License-Identifier: MIT
/* Slices as vgpu-vm and the hook see them: query-slices, start-slice and the owner token,
 * over ctlclient's connection to vgpud's control socket. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "ctlclient/ctlclient.h"
#include "vmm_glue/vmm_internal.h"

static const char *jstr(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ?
		json_object_get_string(v) : "";
}

static uint64_t ju64(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

void vmm_slice_from_json(json_object *o, struct vmm_slice *s)
{
	json_object *v, *own, *prov;

	memset(s, 0, sizeof(*s));
	s->owner_uid = -1;
	snprintf(s->uuid, sizeof(s->uuid), "%s", jstr(o, "uuid"));
	snprintf(s->type, sizeof(s->type), "%s", jstr(o, "mdev_type"));
	s->running = !strcmp(jstr(o, "state"), "running");
	s->vf = (unsigned int)ju64(o, "vf");
	snprintf(s->endpoint, sizeof(s->endpoint), "%s", jstr(o, "endpoint"));
	snprintf(s->endpoint_master, sizeof(s->endpoint_master), "%s", jstr(o, "endpoint_master"));
	s->guest_peer0 = !strcmp(jstr(o, "guest_peer"), "peer0");
	snprintf(s->guest_abi, sizeof(s->guest_abi), "%s", jstr(o, "guest_abi"));
	if (json_object_object_get_ex(o, "attached", &v))
		s->attached = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "provisioned", &prov)) {
		s->vram_bytes = ju64(prov, "vram_bytes");
		s->bar_bytes = ju64(prov, "bar_bytes");
	}
	if (json_object_object_get_ex(o, "owner", &own)) {
		snprintf(s->owner_vm, sizeof(s->owner_vm), "%s", jstr(own, "vm"));
		s->owner_gen = ju64(own, "generation");
	}
	if (json_object_object_get_ex(o, "owner_uid", &v))
		s->owner_uid = (long)json_object_get_int64(v);
}

static json_object *uuid_args(const char *uuid)
{
	json_object *a = json_object_new_object();

	json_object_object_add(a, "uuid", json_object_new_string(uuid));
	return a;
}

int vmm_slice_query(struct ctlc *c, const char *uuid, struct vmm_slice *s,
		    struct cmn_fail *e)
{
	json_object *ret, *list;
	int r;

	if (ctlc_uuid_parse(uuid, NULL, NULL))
		return cmn_fail(e, -EINVAL, "\"%.64s\" is not a slice UUID", uuid);
	r = ctlc_exec(c, "query-slices", uuid_args(uuid), &ret, e);
	if (r == -ENOENT)
		return cmn_fail(e, r, "slice %s is not defined on vgpud (%s)", uuid, ctlc_path(c));
	if (r)
		return r;
	if (!json_object_object_get_ex(ret, "slices", &list) ||
	    !json_object_is_type(list, json_type_array) || json_object_array_length(list) < 1) {
		json_object_put(ret);
		return cmn_fail(e, -ENOENT, "slice %s is not defined on vgpud (%s)", uuid, ctlc_path(c));
	}
	vmm_slice_from_json(json_object_array_get_idx(list, 0), s);
	json_object_put(ret);
	if (strcasecmp(s->uuid, uuid))
		return cmn_fail(e, -EPROTO, "vgpud answered for slice %s, not %s", s->uuid, uuid);
	return 0;
}

int vmm_slice_start(struct ctlc *c, const char *uuid, struct cmn_fail *e)
{
	return ctlc_exec(c, "start-slice", uuid_args(uuid), NULL, e);
}

static json_object *owner_json(const char *vm, uint64_t gen)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "vm", json_object_new_string(vm));
	json_object_object_add(o, "generation", json_object_new_uint64(gen));
	return o;
}

int vmm_slice_stop(struct ctlc *c, const char *uuid, const char *vm, uint64_t gen,
		   struct cmn_fail *e)
{
	json_object *a = uuid_args(uuid);

	/* vgpud stops it only if the token matches or the slice is unowned. */
	json_object_object_add(a, "owner", owner_json(vm, gen));
	return ctlc_exec(c, "stop-slice", a, NULL, e);
}

int vmm_slice_set_owner(struct ctlc *c, const char *uuid, const char *vm, uint64_t gen,
			struct cmn_fail *e)
{
	json_object *a = uuid_args(uuid);

	json_object_object_add(a, "owner", owner_json(vm, gen));
	return ctlc_exec(c, "modify-slice", a, NULL, e);
}

int vmm_slice_release(struct ctlc *c, const char *uuid, const char *vm, uint64_t gen,
		      struct cmn_fail *e)
{
	json_object *a = uuid_args(uuid);

	/* vgpud checks the token in "release-owner" and clears the owner only if it matches,
	 * so two releasers cannot take a slice from its next VM. */
	json_object_object_add(a, "release-owner", owner_json(vm, gen));
	return ctlc_exec(c, "modify-slice", a, NULL, e);
}
