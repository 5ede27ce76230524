/* SPDX-License-Identifier: MIT */
/* vft - the guest test runner behind vgpu-vf-test: the guest suite (a table of cases run
 * against one attached VF), the in-VM isolation attacks, and the managed-memory case. Its
 * own library beside libvgpu-vf (the tenant's driver, which holds no test code), so the
 * command, the unit tests and a VM image all run the same cases. Every entry prints TAP on
 * the FILE it is given, ending in one "N passed, N failed[, N skipped]" line. */
#ifndef VGPU_VF_VFT_H
#define VGPU_VF_VFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct vgpu_vf;
struct vgpu_vf_transport;

/* ---- the guest suite (vft.c) ---- */
struct vft_opts {
	const char *socket;	/* VF endpoint socket */
	struct vgpu_vf_transport *transport;	/* or this transport (then socket is a label) */
	const char *only;	/* run only cases whose name contains this, or one of its
				 * '|'-separated parts (NULL: all) */
	bool big;		/* buffers up to 256 MiB */
	bool verbose;		/* driver messages on stderr */
	unsigned int reset_wait_s;	/* > 0: also run "reset recovery", which waits this long
					 * for someone (the harness) to reset the VF or restart
					 * vgpud after it printed "# ready for reset" */
	unsigned int loop_s;		/* > 0: run the selected cases in rounds, in one
					 * attachment, until this many seconds have passed;
					 * "# loop: round N" before the first, the last and a
					 * round a second after the last such line */
	unsigned int case_timeout_s;	/* a case with no result after this long is reported
					 * "not ok ... hung" and the run bails out (exit 124);
					 * 0: $VGPU_VFT_CASE_TIMEOUT, else 120 s (600 with big) */
};

/* Run the suite on @out. Returns the number of failures (an attach failure counts as one). */
int vft_run(const struct vft_opts *o, FILE *out);
/* Print the case names, one a line. */
void vft_list(FILE *out);

/* ---- the in-VM isolation attacks (attack.c) ---- */
/* A guest that tries to reach what is not its own through the ivshmem device and the RM,
 * and must get nothing but its own errors. Runs over the vfio transport (it needs the device
 * fd and BAR0). */
struct vft_vm_opts {
	const char *bdf;	/* the VF's PCI device; NULL: the first with the VF magic */
	bool verbose;		/* driver messages on stderr */
};

/* Run the attacks on @out. Returns the number of failures (no device or no attach counts
 * as one). */
int vft_vm_attack(const struct vft_vm_opts *o, FILE *out);

/* ---- the managed-memory case (managed.c) ---- */
/* Run it on an open VF with RM: 0 passed, 1 skipped, -1 failed; @why (@len bytes) says what
 * failed or why it was skipped, or on a pass what was seen. */
int vft_managed_case(struct vgpu_vf *vf, char *why, size_t len);

/* ---- the kernel address-space case (kmod_as.c; the kmod transport only) ---- */
/* Run it on a VF attached through vgpu_vf.ko: 0 passed, -errno failed; @why (@len bytes)
 * says what failed, or on a pass the kernel's fault-service counters. */
int vft_kmod_as_case(struct vgpu_vf *vf, char *why, size_t len);

/* ---- figures (bench.c) ---- */
/* Open a VF on @t (owned by the VF then; freed whatever happens) and print one JSON line on
 * @out: @iters one-NOP submissions each, one at a time, the vgpu_submit() call and submit to
 * fence done, waited for with vgpu_fence_wait() and by spinning; keys "<prefix>_submit_*".
 * 0, or -errno with a message on stderr. */
int vft_bench_submit(struct vgpu_vf_transport *t, const char *prefix, unsigned int iters,
		     FILE *out);

#endif
