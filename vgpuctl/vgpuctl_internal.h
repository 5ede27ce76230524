/* SPDX-License-Identifier: MIT */
/* vgpuctl internals: exit codes, reading the daemon's replies, the VRAM map drawing. */
#ifndef VGPU_VGPUCTL_INTERNAL_H
#define VGPU_VGPUCTL_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>

#include <json-c/json.h>

/* Exit codes (documented in vgpuctl(8)). */
enum vgpuctl_exit {
	VGPUCTL_OK = 0, VGPUCTL_FAIL = 1, VGPUCTL_USAGE = 2, VGPUCTL_NOTFOUND = 3,
	VGPUCTL_CONFLICT = 4, VGPUCTL_NOSPACE = 5, VGPUCTL_UNREACHABLE = 6, VGPUCTL_DENIED = 7,
};

/* Members of vgpud's replies, checked for their type (reply.c). An absent member reads as
 * "", NULL or 0; a member of another type reads the same and is remembered as the reply's
 * problem (the first one only), which ends the verb with exit 1. */

/* The request whose reply is read next (named in the problem's message). */
void vgpuctl_reply_begin(const char *cmd);
/* Forget the problem and the request (each run of vgpuctl_main starts clean). */
void vgpuctl_reply_reset(void);
/* Remember a problem with the reply (printf-style), unless one is already remembered. */
void vgpuctl_reply_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The remembered problem as a message, or NULL. */
const char *vgpuctl_reply_problem(void);
/* Member @key of @o if it is a string, else "" (and a problem unless it is absent). */
const char *vgpuctl_jstr(json_object *o, const char *key);
/* Member @key of @o if it is an array, else NULL (and a problem unless it is absent and
 * not @need). */
json_object *vgpuctl_jarr(json_object *o, const char *key, bool need);
/* The length of @arr, 0 unless it is an array. */
size_t vgpuctl_jlen(json_object *arr);
/* Element @i of array @arr (member @key, for the message) if it is an object, else NULL
 * (and a problem unless @i is past the end). */
json_object *vgpuctl_jat(json_object *arr, size_t i, const char *key);

/* Draw the VRAM map reply @map on @out (ANSI colours if @color) and, if @svg_path is not
 * NULL, as a new SVG file there. 0 or -errno: -EEXIST if @svg_path exists (a link too). */
int vgpuctl_vram_map_draw(json_object *map, FILE *out, bool color, const char *svg_path);

#endif
