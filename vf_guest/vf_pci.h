/* SPDX-License-Identifier: MIT */
/* vf_pci - the VF as a PCI device inside a VM: QEMU's ivshmem-doorbell (1af4:1110, always;
 * QEMU has no property to change the IDs) whose BAR2 carries our header magic. Shared by the
 * two in-VM transports (transport_vfio.c, transport_sysfs.c) and, as a public header of
 * libvgpu-vf beside vgpu_vf_raw.h, the test runner's attack mode (vft/attack.c), which drives
 * the device below the driver. A tenant driver never needs it.
 *
 * BAR0 is ivshmem's register file (32-bit accesses): IVPosition at 0x08 is the VF's own peer
 * id (the VF number, or 0 behind vf<N>.master.sock), writing (peer << 16) | vector to
 * Doorbell at 0x0c rings that peer's vector; vgpud is the header's host_peer (0 in peer mode)
 * and QEMU drops a ring of a peer or vector it does not know. BAR2 is the VF's BAR2 of
 * vgpu/vf_bar.h. */
#ifndef VGPU_VF_PCI_H
#define VGPU_VF_PCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <vgpu/vf_bar.h>

struct vgpu_vf_transport;

#define VF_PCI_VENDOR		0x1af4
#define VF_PCI_DEVICE		0x1110
#define VF_PCI_SYSFS		"/sys/bus/pci/devices"
#define VF_PCI_REG_IVPOSITION	0x08
#define VF_PCI_REG_DOORBELL	0x0c
#define VF_PCI_BAR0_SIZE	256
#define VF_PCI_BDF_MAX		64
#define VF_PCI_REGION_BAR2	2	/* vfio-pci region index of BAR2 */

/* vgpud's peer id as the BAR2 header @h says (0 from a host before ABI minor 3, where it
 * was always 0). Read at each ring: a reset re-formats the header. */
static inline uint32_t vf_pci_host_peer(const volatile void *h)
{
	return ((const volatile struct vf_bar_header *)h)->host_peer;
}

/* The Doorbell register value that rings @vector of @peer (QEMU uses the low 8 bits). */
static inline uint32_t vf_pci_doorbell(uint32_t peer, uint32_t vector)
{
	return peer << 16 | (vector & 0xffu);
}

/* Whether the sysfs device directory @devdir is ivshmem (vendor/device files) with the VF
 * magic in the BAR2 header of its resource2 (mapped read-only, one page). 0 with
 * *@bar_size (may be NULL), -ENODEV if not ours, or -errno. */
int vf_pci_probe(const char *devdir, uint64_t *bar_size);
/* Find the VF under @root (a /sys/bus/pci/devices-like directory): @bdf if given (it must
 * probe), else the first entry in name order that probes. The name goes to @out (@len
 * bytes). 0, -ENODEV (none; a named one that is not ours), -ENAMETOOLONG or -errno. */
int vf_pci_find(const char *root, const char *bdf, char *out, size_t len);

/* The polling tier with an explicit sysfs root (tests use a fake tree; a regular file as
 * resource2 is mapped the same way as the BAR). */
int vf_sysfs_transport_at(const char *root, const char *bdf, struct vgpu_vf_transport **out);

/* What the in-VM attack mode (vft/attack.c) needs of the vfio transport beyond the five
 * operations. Each returns -EINVAL if @t is not an attached vfio transport. */
bool vf_vfio_is(const struct vgpu_vf_transport *t);
/* Write @val to BAR0 register @off (any value: the attacks ring what they like). */
int vf_vfio_bar0_write(struct vgpu_vf_transport *t, uint32_t off, uint32_t val);
/* Read BAR0 register @off into *@val. */
int vf_vfio_bar0_read(struct vgpu_vf_transport *t, uint32_t off, uint32_t *val);
/* Consume what vector @v received since the last wait or call: the count, 0 if nothing. */
int vf_vfio_take(struct vgpu_vf_transport *t, unsigned int v, uint64_t *count);
/* Access BAR2 (region 2) through the device fd as a program would. Each returns what the
 * kernel said. pread @len bytes at region offset @off: bytes moved or -errno. */
long vf_vfio_bar2_pread(struct vgpu_vf_transport *t, uint64_t off, void *buf, size_t len);
/* pwrite @len bytes at region offset @off: bytes moved or -errno. */
long vf_vfio_bar2_pwrite(struct vgpu_vf_transport *t, uint64_t off, const void *buf, size_t len);
/* mmap @len bytes at @off of region @index: 0 if it mapped (then unmapped at once), -errno. */
int vf_vfio_region_mmap(struct vgpu_vf_transport *t, unsigned int index, uint64_t off,
			uint64_t len);
/* BAR2's size as vfio reports it. */
uint64_t vf_vfio_bar2_size(struct vgpu_vf_transport *t);

/* Another MAP_SHARED, writable mapping of BAR2 bytes [off, off+len) (@off page aligned),
 * at @at (MAP_FIXED: an address range the caller owns) or anywhere (NULL), for managed
 * memory's views: mremap cannot duplicate these PFNMAP mappings. 0 with *@out set,
 * -EINVAL (not this transport, not attached, range outside BAR2) or mmap's -errno. The
 * caller munmaps it. */
int vf_vfio_bar2_view(struct vgpu_vf_transport *t, uint64_t off, uint64_t len, void *at,
		      void **out);
/* True if @t is the sysfs (polling) transport. */
bool vf_sysfs_is(const struct vgpu_vf_transport *t);
/* The same second view of BAR2, through the sysfs transport's resource2. */
int vf_sysfs_bar2_view(struct vgpu_vf_transport *t, uint64_t off, uint64_t len, void *at,
		       void **out);
/* True if @t is the kernel-driver transport (transport_kmod.c). */
bool vf_kmod_is(const struct vgpu_vf_transport *t);
/* The same second view of BAR2, through the kernel driver's device file. */
int vf_kmod_bar2_view(struct vgpu_vf_transport *t, uint64_t off, uint64_t len, void *at,
		      void **out);

#endif
