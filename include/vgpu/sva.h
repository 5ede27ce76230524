/* SPDX-License-Identifier: MIT */
/* vgpu/sva.h - ABI 2.1: shared virtual addressing for LOCAL guest processes.
 *
 * A local guest process may ask vgpud to bind its own address space to its VF, the way a
 * PASID/SVA-capable device is bound to a process (Linux iommu_sva_bind_device): vgpud
 * creates an IOMMU SVA domain for the process and attaches it at the function's SVA PASID
 * (VGPU_SVA_PASID). GMMU PTEs with aperture 2 (VGPU_GMMU_APER_SVA, vgpu/gmmu.h) then carry
 * virtual addresses of that process: the device reads and writes ordinary malloc/mmap
 * memory, with the process's own page tables (COW after fork, mprotect, munmap) deciding
 * what is reachable. What is not becomes an MMU fault (VGPU_FAULT_IOMMU).
 *
 * WHO MAY BIND. Only the process attached to the VF's endpoint (vgpu/vf_bar.h), proven by
 * the kernel: the bind request travels on a SECOND connection to the same endpoint socket,
 * and vgpud accepts it only if its SO_PEERCRED pid is the attached guest's. QEMU never
 * opens one, and a VM guest cannot make it, so a VM guest never reaches QEMU's memory; a
 * guest can only ever bind its own process. The domain is for that pid, nothing else.
 *
 * PROTOCOL. The guest connects to <runtime-dir>/vf<N>.sock while attached. vgpud answers
 * with one 8-byte little-endian int64: VGPU_SVA_HELLO (an SVA connection), or
 * VF_EP_REFUSED and a close (not the attached process, or an SVA connection is already
 * open). Then, any number of times: the guest writes one struct vgpu_sva_req, vgpud writes
 * one struct vgpu_sva_reply. The binding lives until UNBIND, until the SVA connection
 * closes (so it dies with the process), until the guest detaches, or until a VF reset
 * (the guest then binds again). Malformed requests get a non-zero status and @why names
 * the field; nothing changes.
 *
 * PAGE REQUESTS (ABI 2.4). A device access the kernel refuses to the bound process's memory
 * is a fault, unless the process can make the page present: a page its own memory manager
 * keeps elsewhere (a managed page on the device, PROT_NONE or missing until its fault
 * handler brings it back). After VGPU_SVA_OP_PRI on a bound connection vgpud forwards such
 * accesses as page requests: at any time it may write a struct vgpu_sva_page_req (told
 * apart from a reply by its magic) and waits for the guest's struct vgpu_sva_page_resp with
 * the same id, then retries the access. A request not answered within vgpud's page
 * response timeout (1 s) ends the access in the IOMMU fault, as does an answer with a
 * non-zero status; at most VGPU_SVA_PRI_MAX_OUTSTANDING requests of a VF are outstanding
 * (further accesses wait for one to be answered, up to the same timeout; a request that
 * timed out keeps its place until it is answered late or PRI ends). Answers to ids not
 * outstanding are dropped (counted, no reply). PRI ends with the binding. */
#ifndef VGPU_ABI_SVA_H
#define VGPU_ABI_SVA_H

#include <stdint.h>

#include <vgpu/version.h>

#define VGPU_SVA_HELLO		0x5356410201ll	/* "SVA" 2.1: sent instead of the version */
#define VGPU_SVA_MAGIC		0x41565356u	/* "VSVA" */
#define VGPU_SVA_PASID		1u		/* the function's PASID for its bound process */

enum vgpu_sva_op {
	VGPU_SVA_OP_BIND = 1,		/* bind the caller's address space (again: -EBUSY) */
	VGPU_SVA_OP_UNBIND = 2,		/* drop it (not bound: -ENOENT) */
	VGPU_SVA_OP_PRI = 3,		/* 2.4: forward page requests here (not bound: -ENOENT,
					 * again: -EBUSY) */
};

struct vgpu_sva_req {
	uint32_t magic;			/* VGPU_SVA_MAGIC */
	uint32_t abi_version;		/* VGPU_ABI_VERSION; major must match */
	uint32_t op;			/* enum vgpu_sva_op */
	uint32_t flags;			/* must be 0 */
	uint64_t reserved;		/* must be 0 */
};

struct vgpu_sva_reply {
	uint32_t magic;			/* VGPU_SVA_MAGIC */
	int32_t status;			/* 0 or -errno */
	uint32_t pasid;			/* BIND: the PASID the process is bound at */
	uint32_t reserved;
	char why[112];			/* status != 0: what was wrong, NUL-terminated */
};

#define VGPU_SVA_PRQ_MAGIC		0x51525056u	/* "VPRQ" */
#define VGPU_SVA_PRI_MAX_OUTSTANDING	16u	/* per VF */
#define VGPU_SVA_ACCESS_READ		1u
#define VGPU_SVA_ACCESS_WRITE		2u

/* vgpud -> guest: make the page at @addr present for @access. */
struct vgpu_sva_page_req {
	uint32_t magic;			/* VGPU_SVA_PRQ_MAGIC */
	uint32_t id;			/* echo it in the response */
	uint64_t addr;			/* page-aligned address in the bound process */
	uint32_t access;		/* VGPU_SVA_ACCESS_* */
	uint32_t reserved;
};

/* guest -> vgpud: the answer to one page request. Same size as a request. */
struct vgpu_sva_page_resp {
	uint32_t magic;			/* VGPU_SVA_PRQ_MAGIC */
	uint32_t id;			/* the request's */
	int32_t status;			/* 0: present now, retry; -errno: fault the access */
	uint32_t reserved;		/* must be 0 */
	uint64_t reserved2;		/* must be 0 */
};

_Static_assert(sizeof(struct vgpu_sva_req) == 24, "SVA request is ABI");
_Static_assert(sizeof(struct vgpu_sva_page_req) == 24, "SVA page request is ABI");
_Static_assert(sizeof(struct vgpu_sva_page_resp) == 24, "SVA page response is ABI");
_Static_assert(sizeof(struct vgpu_sva_reply) == 128, "SVA reply is ABI");

#endif
