/* SPDX-License-Identifier: MIT */
/* vgpu_vf_kmod.h - libvgpu-vf on top of the guest kernel driver vgpu_vf.ko (guest-kmod/):
 * the transport that reaches a VF through its character device /dev/vgpu-vfN instead of
 * owning the PCI device. Several processes may attach to one VF this way at once; the
 * kernel keeps their mailboxes, RM clients and memory apart (uapi: vgpu/vf_ioctl.h). */
#ifndef VGPU_VF_KMOD_H
#define VGPU_VF_KMOD_H

#include "vf_guest/include/vgpu_vf.h"

/* The VF behind @dev ("/dev/vgpu-vf1"), or the first /dev/vgpu-vf* if @dev is NULL. attach
 * opens it, checks the driver's uapi major and maps BAR2 (only the pages this process may
 * see are ever shown: the kernel inserts them on first touch); the mailbox vector serves
 * this process's own rings, waits sleep until the kernel's interrupt handler wakes them.
 * -ENODEV if there is no such device (the module is not loaded or bound nothing). */
int vgpu_vf_transport_kmod(const char *dev, struct vgpu_vf_transport **out);

#endif
