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

#endif
