/* SPDX-License-Identifier: MIT */
/* vgpuctl internals: exit codes and the VRAM map drawing. */
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

/* Draw the VRAM map reply @map on @out (ANSI colours if @color) and, if @svg_path is not
 * NULL, as an SVG file. 0 or -errno. */
int vgpuctl_vram_map_draw(json_object *map, FILE *out, bool color, const char *svg_path);

#endif
