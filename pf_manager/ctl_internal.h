/* vgpuctl internals: the control-socket client and the output helpers. */
#ifndef VGPU_PF_CTL_INTERNAL_H
#define VGPU_PF_CTL_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>

#include <json-c/json.h>

/* Exit codes (documented in vgpuctl(8)). */
enum ctl_exit {
	CTL_OK = 0, CTL_FAIL = 1, CTL_USAGE = 2, CTL_NOTFOUND = 3, CTL_CONFLICT = 4,
	CTL_NOSPACE = 5, CTL_UNREACHABLE = 6, CTL_DENIED = 7,
};

struct ctl {
	int fd;
	char *buf;		/* bytes read past the last line */
	size_t len;
};

/* Connect to the control socket at @path. 0 or -errno. */
int ctl_connect(struct ctl *c, const char *path);
/* Read the greeting and negotiate capabilities. */
int ctl_handshake(struct ctl *c);
/* Send @cmd with @args (ownership taken, may be NULL); the reply or NULL if the daemon
 * went away. */
json_object *ctl_execute(struct ctl *c, const char *cmd, json_object *args);
void ctl_close(struct ctl *c);

/* Draw the VRAM map reply @map on @out (ANSI colours if @color) and, if @svg_path is not
 * NULL, as an SVG file. 0 or -errno. */
int ctl_vram_map_draw(json_object *map, FILE *out, bool color, const char *svg_path);

#endif
