/* vft - the guest suite behind vgpu-vf-test, kept in the library so the test runner, the unit
 * tests and a VM image all run the same cases. */
#ifndef VGPU_VF_VFT_H
#define VGPU_VF_VFT_H

#include <stdbool.h>
#include <stdio.h>

struct vgpu_vf_transport;

struct vft_opts {
	const char *socket;	/* VF endpoint socket */
	struct vgpu_vf_transport *transport;	/* or this transport (then socket is a label) */
	const char *only;	/* run only cases whose name contains this (NULL: all) */
	bool big;		/* buffers up to 256 MiB */
	bool verbose;		/* driver messages on stderr */
	unsigned int reset_wait_s;	/* > 0: also run "reset recovery", which waits this long
					 * for someone (the harness) to reset the VF or restart
					 * vgpud after it printed "# ready for reset" */
	unsigned int case_timeout_s;	/* a case with no result after this long is reported
					 * "not ok ... hung" and the run bails out (exit 124);
					 * 0: $VGPU_VFT_CASE_TIMEOUT, else 120 s (600 with big) */
};

/* Run the suite, TAP on @out, ending in "N passed, N failed[, N skipped]". Returns the number
 * of failures (an attach failure counts as one). */
int vft_run(const struct vft_opts *o, FILE *out);
/* Print the case names. */
void vft_list(FILE *out);

#endif
