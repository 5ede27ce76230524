/* vft_vm - the in-VM isolation attacks of vgpu-vf-test (--attack): a guest that tries to
 * reach what is not its own through the ivshmem device and the RM, and must get nothing but
 * its own errors. Runs over the vfio transport (it needs the device fd and BAR0). */
#ifndef VGPU_VF_VFT_VM_H
#define VGPU_VF_VFT_VM_H

#include <stdbool.h>
#include <stdio.h>

struct vft_vm_opts {
	const char *bdf;	/* the VF's PCI device; NULL: the first with the VF magic */
	bool verbose;		/* driver messages on stderr */
};

/* Run the attacks, TAP on @out, ending in "N passed, N failed[, N skipped]" like the suite.
 * Returns the number of failures (no device or no attach counts as one). */
int vft_vm_attack(const struct vft_vm_opts *o, FILE *out);

#endif
