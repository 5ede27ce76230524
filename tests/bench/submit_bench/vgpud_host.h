/* SPDX-License-Identifier: MIT */
/* vgpud_host - a real vgpud for submit_bench: the daemon (which starts vgpu-gsp itself) in a
 * private temporary runtime/state directory, one slice defined and started with vgpuctl, so
 * the bench's guest opens the VF through its endpoint socket with the local transport, as
 * any tenant process does. Everything is removed again by vgpud_host_stop(). */
#ifndef VGPU_BENCH_VGPUD_HOST_H
#define VGPU_BENCH_VGPUD_HOST_H

#include <stddef.h>

/* Start vgpud from @bindir (vgpud, vgpuctl and vgpu-gsp there) with one slice of type
 * @type; its endpoint socket path goes to @sock (@len bytes). 0, or -errno with the reason
 * (and where the daemon's log is) in @why (@wlen bytes); nothing is left running then. */
int vgpud_host_start(const char *bindir, const char *type, char *sock, size_t len, char *why,
		     size_t wlen);
/* Stop the daemon (SIGTERM, then SIGKILL after 10 s), remove the slice's shared-memory
 * objects and the temporary directory. A no-op when nothing was started. */
void vgpud_host_stop(void);

#endif
