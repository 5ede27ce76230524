/* SPDX-License-Identifier: MIT */
/* vgpuctl - the admin CLI of vgpud: one verb per run, one request to the control socket
 * through ctlclient, human output or the daemon's versioned JSON (--json). It links only
 * ctlclient, common and json-c: everything it knows of vgpud is what the socket says.
 * Verbs, options and exit codes: doc/vgpuctl.8. */
#ifndef VGPU_VGPUCTL_H
#define VGPU_VGPUCTL_H

/* Run the CLI with @argc/@argv; returns its exit code (enum in vgpuctl_internal.h). */
int vgpuctl_main(int argc, char **argv);

#endif
