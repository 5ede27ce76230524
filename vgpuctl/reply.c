// SPDX-License-Identifier: MIT
/* vgpuctl: reading vgpud's replies. A reply is input like any other: a member of another
 * type than the verb expects (a JSON null where a string belongs, an object where an array
 * does) reads as absent, so nothing reaches strcmp() as NULL or json-c's array calls, which
 * assert on anything but an array; the first such member is remembered with the command it
 * answered, and the verb then ends with exit 1 and a message that names it. */
#include <stdarg.h>
#include <stdio.h>

#include "vgpuctl/vgpuctl_internal.h"

static struct {
	const char *cmd;		/* the request being answered */
	bool bad;
	char msg[256];
} reply;

void vgpuctl_reply_begin(const char *cmd)
{
	reply.cmd = cmd;
}

void vgpuctl_reply_reset(void)
{
	reply.cmd = NULL;
	reply.bad = false;
	reply.msg[0] = 0;
}

void vgpuctl_reply_bad(const char *fmt, ...)
{
	int n;
	va_list ap;

	if (reply.bad)
		return;
	reply.bad = true;
	n = snprintf(reply.msg, sizeof(reply.msg), "malformed reply from vgpud%s%s: ",
		     reply.cmd ? " to " : "", reply.cmd ? reply.cmd : "");
	if (n < 0 || (size_t)n >= sizeof(reply.msg))
		return;
	va_start(ap, fmt);
	vsnprintf(reply.msg + n, sizeof(reply.msg) - (size_t)n, fmt, ap);
	va_end(ap);
}

const char *vgpuctl_reply_problem(void)
{
	return reply.bad ? reply.msg : NULL;
}

/* What @v is, for a message: "null", "an object", "a string" ... */
static const char *type_words(json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null: return "null";
	case json_type_boolean: return "a boolean";
	case json_type_double: return "a number";
	case json_type_int: return "a number";
	case json_type_object: return "an object";
	case json_type_array: return "an array";
	case json_type_string: return "a string";
	}
	return "of an unknown type";
}

const char *vgpuctl_jstr(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v))
		return "";
	if (!json_object_is_type(v, json_type_string)) {
		vgpuctl_reply_bad("\"%s\" is %s, not a string", key, type_words(v));
		return "";
	}
	return json_object_get_string(v);
}

json_object *vgpuctl_jarr(json_object *o, const char *key, bool need)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v)) {
		if (need)
			vgpuctl_reply_bad("no \"%s\"", key);
		return NULL;
	}
	if (!json_object_is_type(v, json_type_array)) {
		vgpuctl_reply_bad("\"%s\" is %s, not an array", key, type_words(v));
		return NULL;
	}
	return v;
}

size_t vgpuctl_jlen(json_object *arr)
{
	return json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
}

json_object *vgpuctl_jat(json_object *arr, size_t i, const char *key)
{
	json_object *v;

	if (i >= vgpuctl_jlen(arr))
		return NULL;
	v = json_object_array_get_idx(arr, i);
	if (!json_object_is_type(v, json_type_object)) {
		vgpuctl_reply_bad("\"%s\"[%zu] is %s, not an object", key, i, type_words(v));
		return NULL;
	}
	return v;
}
