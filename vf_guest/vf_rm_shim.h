/* vf_rm_shim.h - a PROVISIONAL RM wire format, used only until include/vgpu/rm.h exists.
 *
 * include/vgpu/rm.h (the rm engineer's) was not there when the driver was written. So that
 * the driver's RM-dependent paths (VRAM, address spaces, channels) can run end to end, it
 * speaks this minimal format to hosts that announce the BAR2 extension of vf_abi_shim.h
 * (ABI minor >= 1), i.e. the in-process host of tests/bench/submit_bench; a minor-0 host
 * (today's vgpud) is never sent it. Replacing it with rm.h touches rm_client.c only. */
#ifndef VGPU_VF_RM_SHIM_H
#define VGPU_VF_RM_SHIM_H

#include <stdint.h>

#define VF_SHIM_RM_MAGIC	0x4d52564du	/* "MVRM" */

enum vf_shim_rm_op {
	VF_SHIM_RM_VIDMEM_ALLOC	= 1,	/* a0 size, a1 page size -> handle, o0 VF-physical addr */
	VF_SHIM_RM_FREE		= 2,	/* handle */
	VF_SHIM_RM_VASPACE_ALLOC = 3,	/* a0 pdb -> handle */
	VF_SHIM_RM_CHANNEL_ALLOC = 4,	/* a0 vaspace, a1 pdb, a2 runlist, a3 gpfifo va, a4 entries,
					 * a5 userd aperture, a6 userd addr, a7 flags(1 replayable)
					 * -> handle, o0 chid, o1 work-submit token */
	VF_SHIM_RM_CHANNEL_SUBMIT = 5,	/* handle, a0 gp_put: store GP_PUT and ring for the guest */
};

/* Request payload of VF_MSG_RM; the mailbox reply's status is the RM's status. */
struct vf_shim_rm_req {
	uint32_t magic;
	uint32_t op;
	uint32_t handle;
	uint32_t reserved;
	uint64_t a[8];
};

/* Reply payload. */
struct vf_shim_rm_rsp {
	uint32_t magic;
	uint32_t op;
	uint32_t handle;
	uint32_t reserved;
	uint64_t o[4];
};

#endif
