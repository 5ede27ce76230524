/* SPDX-License-Identifier: MIT */
/* vgpu_vf_kmod.h - libvgpu-vf on top of the guest kernel driver vgpu_vf.ko (guest-kmod/):
 * the transport that reaches a VF through its character device /dev/vgpu-vfN instead of
 * owning the PCI device. Several processes may attach to one VF this way at once; the
 * kernel keeps their mailboxes, RM clients and memory apart (uapi: vgpu/vf_ioctl.h). */
#ifndef VGPU_VF_KMOD_H
#define VGPU_VF_KMOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vf_guest/include/vgpu_vf.h"

/* The VF behind @dev ("/dev/vgpu-vf1"), or the first /dev/vgpu-vf* if @dev is NULL. attach
 * opens it, checks the driver's uapi major and maps BAR2 (only the pages this process may
 * see are ever shown: the kernel inserts them on first touch); the mailbox vector serves
 * this process's own rings, waits sleep until the kernel's interrupt handler wakes them.
 * -ENODEV if there is no such device (the module is not loaded or bound nothing). */
int vgpu_vf_transport_kmod(const char *dev, struct vgpu_vf_transport **out);

/* SVM through the kernel driver (VGPU_VF_IOC_SVM): move [cpu, cpu + len) of this process's
 * anonymous private memory (page aligned) into the VF's VRAM (@to_vram) or back; the
 * process keeps using the same addresses. *@moved: pages moved (pinned pages, or no VRAM left
 * in the driver's pool, stay). -EOPNOTSUPP if @vf is not attached through the driver or the
 * memory is shared or file-backed, else the driver's -errno. */
int vgpu_kmod_svm_migrate(struct vgpu_vf *vf, void *cpu, size_t len, bool to_vram,
			  uint64_t *moved);
/* Where the kernel's HMM mirror sees each of the @n pages at @cpu (page aligned, n <= 512):
 * @vram[i] is the page's VF-physical VRAM address (map it with vgpu_va_map_raw(...,
 * VGPU_MEM_VRAM, ...)) or 0 if it is not in this VF's VRAM. 0 or -errno as above. */
int vgpu_kmod_svm_where(struct vgpu_vf *vf, const void *cpu, size_t n, uint64_t *vram);

/* ---- the kernel's SVM address space (uapi 1.1) ----
 * The driver owns a GPU address space that mirrors this process: GPU address = CPU address,
 * so GPU work names malloc'd or mmap'd memory by its pointer with no map call. The GPU's
 * first access to a page faults; the kernel faults it in, moves it into the VF's VRAM (the
 * process keeps using it in place), maps it and replays. munmap, fork's copy on write and
 * migration clear the GPU mapping first. An access the process could not make itself
 * (unmapped, read-only for a write, PROT_NONE) cancels the channel that made it:
 * vgpu_channel_error() then says -VGPU_ECHANERR with VGPU_CHAN_ERR_MMU_FAULT. Shared and
 * file-backed memory cannot move into VRAM and is such an access too. */

/* Counters of this process's address space (VGPU_VF_IOC_AS_INFO). */
struct vgpu_kmod_as_stats {
	uint32_t channels;
	uint64_t faults;		/* GPU fault entries the kernel took */
	uint64_t mapped;		/* GPU PTEs it wrote */
	uint64_t migrated;		/* pages it moved into VRAM for them */
	uint64_t invalidated;		/* GPU PTEs invalidations cleared */
	uint64_t replays;
	uint64_t cancelled;		/* channels cancelled */
	uint64_t evicted;		/* pages a full VRAM pool gave back for it */
	bool lost;			/* a VF reset freed it */
};

/* Make the address space, mirroring all of this process (one per attachment; it lives
 * until vgpu_vf_close()). -EOPNOTSUPP if @vf is not attached through the driver, -EEXIST if
 * it has one, else the driver's -errno. */
int vgpu_kmod_as_create(struct vgpu_vf *vf);
/* A replayable channel on it (runlist @runlist), used like any channel: vgpu_submit(),
 * vgpu_fence_wait(), vgpu_channel_error(); its methods take process pointers as GPU
 * addresses. The kernel keeps at most 8 per address space, each until vgpu_vf_close().
 * -ENOENT without an address space, -ENOSPC with 8, else as above. */
int vgpu_kmod_channel_create(struct vgpu_vf *vf, uint32_t runlist, struct vgpu_channel **out);
/* Forget a channel of vgpu_kmod_channel_create() (the kernel stops it at close). */
void vgpu_kmod_channel_destroy(struct vgpu_channel *ch);
/* The address space's counters. As vgpu_kmod_as_create(). */
int vgpu_kmod_as_stats(struct vgpu_vf *vf, struct vgpu_kmod_as_stats *out);
/* ---- per-file quotas and strict_as (uapi 1.2) ----
 * The driver counts what this attachment (one open file) holds against limits its module
 * parameters set when the file was opened; an RM call past one fails with -EDQUOT. A file
 * opened under strict_as may not make a VASPACE or channel of its own (-EPERM from
 * vgpu_vaspace_create(), vgpu_channel_create()): its GPU work runs on the kernel's address
 * space, with its own VRAM mapped there by vgpu_kmod_as_map(). */

/* This attachment's limits and use (VGPU_VF_IOC_INFO). A limit of chan_limit 0: only the
 * VF's own quota applies. */
struct vgpu_kmod_quota {
	uint64_t vram_limit, vram_used;	/* bytes */
	uint64_t dma_limit, dma_used;	/* bytes */
	uint32_t chan_limit, chan_used;
	uint32_t client_limit;
	bool strict;			/* opened under strict_as */
};
/* Read them. -EOPNOTSUPP if @vf is not attached through the driver, else the driver's -errno
 * (-EINVAL from a driver older than uapi 1.2). */
int vgpu_kmod_quota(struct vgpu_vf *vf, struct vgpu_kmod_quota *out);

/* Map all of @mem, a VRAM object of @vf's (vgpu_mem_alloc(VGPU_MEM_VRAM)), into the kernel's
 * address space at @gpu_va (page aligned, below 2^48, outside the mirrored process range and
 * the kernel's channel window: e.g. 2^47 + 1 GiB), read-only for the GPU if @read_only.
 * GPU work on the kernel's channels then names it by @gpu_va. -EINVAL for DMA memory
 * buffers (sub-allocated: not an RM object of their own) and bad ranges, -EEXIST over
 * another mapping, else as vgpu_kmod_as_create(). Freeing @mem unmaps it. */
int vgpu_kmod_as_map(struct vgpu_vf *vf, struct vgpu_mem *mem, uint64_t gpu_va, bool read_only);
/* Remove the mapping at @gpu_va. -ENOENT if there is none. */
int vgpu_kmod_as_unmap(struct vgpu_vf *vf, uint64_t gpu_va);

/* The device node @vf is attached through ("/dev/vgpu-vf1"), or NULL. */
const char *vgpu_kmod_device(const struct vgpu_vf *vf);

#endif
