// SPDX-License-Identifier: MIT
/* The in-VM transport: the VF's ivshmem-doorbell PCI device driven from user space through
 * vfio-pci (the uapi of linux/vfio.h), on a VM with a vIOMMU (q35 + intel-iommu, guest
 * booted with intel_iommu=on; the Debian kernel has no vfio no-IOMMU mode).
 *
 * attach: bind the device to vfio-pci through sysfs (driver_override + drivers_probe),
 * container + group + device fd, region info for BAR0, BAR2 and config space, map BAR2 (and
 * BAR0 when vfio allows it; otherwise the doorbell is a pwrite on the device fd), set
 * bus-master (MSI-X writes are DMA: without it no interrupt arrives), and one eventfd per
 * MSI-X vector through VFIO_DEVICE_SET_IRQS. notify writes BAR0's Doorbell register with
 * peer 0 (vgpud); wait polls the vector's eventfd. The device stays bound to vfio-pci after
 * detach so that a re-attach (recovery after a reset) finds it there. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/vfio.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/compiler.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_pci.h"
#include <vgpu/vf_bar.h>

#define VFIO_MAX_VECTORS	16
#define PCI_COMMAND_OFF		4
#define PCI_COMMAND_MEM_MASTER	0x6	/* memory space + bus master */

struct vfio_transport {
	struct vgpu_vf_transport t;
	char bdf[VF_PCI_BDF_MAX];
	int container, group, device;
	struct vfio_region_info bar0_info, bar2_info, cfg_info;
	uint8_t *bar2;
	volatile uint32_t *bar0;	/* NULL: BAR0 is not mappable, pwrite instead */
	unsigned int nr_vec;
	int irq_fd[VFIO_MAX_VECTORS];
};

static struct vfio_transport *to_vfio(struct vgpu_vf_transport *t)
{
	return cmn_container_of(t, struct vfio_transport, t);
}

static int vfio_fail(const struct vfio_transport *vt, int err, const char *what)
{
	fprintf(stderr, "vgpu-vf vfio %s: %s: %s\n", vt->bdf, what, strerror(-err));
	return err;
}

/* Write @val to the sysfs file @path (a bind/probe request). */
static int sysfs_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* The driver bound to the device, "" if none. */
static void bound_driver(const struct vfio_transport *vt, char *name, size_t len)
{
	char path[PATH_MAX], link[PATH_MAX];
	ssize_t n;

	snprintf(path, sizeof(path), VF_PCI_SYSFS "/%s/driver", vt->bdf);
	n = readlink(path, link, sizeof(link) - 1);
	name[0] = 0;
	if (n > 0) {
		const char *base;

		link[n] = 0;
		base = strrchr(link, '/') ? strrchr(link, '/') + 1 : link;
		if (strlen(base) < len)
			strcpy(name, base);
	}
}

static int bind_vfio(struct vfio_transport *vt)
{
	char path[PATH_MAX], drv[64];
	int ret;

	bound_driver(vt, drv, sizeof(drv));
	if (!strcmp(drv, "vfio-pci"))
		return 0;
	if (drv[0]) {
		snprintf(path, sizeof(path), VF_PCI_SYSFS "/%s/driver/unbind", vt->bdf);
		ret = sysfs_write(path, vt->bdf);
		if (ret)
			return vfio_fail(vt, ret, "cannot unbind its driver");
	}
	snprintf(path, sizeof(path), VF_PCI_SYSFS "/%s/driver_override", vt->bdf);
	ret = sysfs_write(path, "vfio-pci");
	if (ret)
		return vfio_fail(vt, ret, "cannot set driver_override");
	ret = sysfs_write("/sys/bus/pci/drivers_probe", vt->bdf);
	bound_driver(vt, drv, sizeof(drv));
	if (strcmp(drv, "vfio-pci"))
		return vfio_fail(vt, ret ? ret : -ENODEV, "vfio-pci did not bind (modules loaded?)");
	return 0;
}

/* The device's IOMMU group number; none means the VM has no vIOMMU. */
static int iommu_group(const struct vfio_transport *vt)
{
	char path[PATH_MAX], link[PATH_MAX];
	ssize_t n;

	snprintf(path, sizeof(path), VF_PCI_SYSFS "/%s/iommu_group", vt->bdf);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return vfio_fail(vt, -ENODEV, "no IOMMU group (needs q35 + intel-iommu and "
				 "intel_iommu=on; use the sysfs tier otherwise)");
	link[n] = 0;
	return atoi(strrchr(link, '/') ? strrchr(link, '/') + 1 : link);
}

static int open_device(struct vfio_transport *vt)
{
	struct vfio_group_status gs = { .argsz = sizeof(gs) };
	char path[64];
	int grp = iommu_group(vt);

	if (grp < 0)
		return grp;
	vt->container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
	if (vt->container < 0)
		return vfio_fail(vt, -errno, "open /dev/vfio/vfio");
	if (ioctl(vt->container, VFIO_GET_API_VERSION) != VFIO_API_VERSION ||
	    ioctl(vt->container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) <= 0)
		return vfio_fail(vt, -ENOTSUP, "no vfio type1v2 IOMMU");
	snprintf(path, sizeof(path), "/dev/vfio/%d", grp);
	vt->group = open(path, O_RDWR | O_CLOEXEC);
	if (vt->group < 0)
		return vfio_fail(vt, -errno, path);
	if (ioctl(vt->group, VFIO_GROUP_GET_STATUS, &gs) < 0 ||
	    !(gs.flags & VFIO_GROUP_FLAGS_VIABLE))
		return vfio_fail(vt, -EBUSY, "IOMMU group not viable (another device in it "
				 "is bound to a host driver)");
	if (ioctl(vt->group, VFIO_GROUP_SET_CONTAINER, &vt->container) < 0 ||
	    ioctl(vt->container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU) < 0)
		return vfio_fail(vt, -errno, "cannot set up the IOMMU container");
	vt->device = ioctl(vt->group, VFIO_GROUP_GET_DEVICE_FD, vt->bdf);
	if (vt->device < 0)
		return vfio_fail(vt, -errno, "VFIO_GROUP_GET_DEVICE_FD");
	return 0;
}

static int region_info(struct vfio_transport *vt, unsigned int index,
		       struct vfio_region_info *ri)
{
	memset(ri, 0, sizeof(*ri));
	ri->argsz = sizeof(*ri);
	ri->index = index;
	if (ioctl(vt->device, VFIO_DEVICE_GET_REGION_INFO, ri) < 0)
		return vfio_fail(vt, -errno, "VFIO_DEVICE_GET_REGION_INFO");
	return 0;
}

static int map_bars(struct vfio_transport *vt)
{
	const struct vfio_region_info *b2 = &vt->bar2_info, *b0 = &vt->bar0_info;
	void *p;
	int ret;

	ret = region_info(vt, VFIO_PCI_BAR0_REGION_INDEX, &vt->bar0_info);
	if (!ret)
		ret = region_info(vt, VFIO_PCI_BAR2_REGION_INDEX, &vt->bar2_info);
	if (!ret)
		ret = region_info(vt, VFIO_PCI_CONFIG_REGION_INDEX, &vt->cfg_info);
	if (ret)
		return ret;
	if (b0->size < VF_PCI_REG_DOORBELL + 4 || b2->size < 2 * VF_BAR_HDR_SIZE ||
	    (b2->size & (b2->size - 1)) || !(b2->flags & VFIO_REGION_INFO_FLAG_MMAP))
		return vfio_fail(vt, -EPROTO, "BAR0/BAR2 are not an ivshmem VF's");
	p = mmap(NULL, b2->size, PROT_READ | PROT_WRITE, MAP_SHARED, vt->device, (off_t)b2->offset);
	if (p == MAP_FAILED)
		return vfio_fail(vt, -errno, "mmap BAR2");
	vt->bar2 = p;
	/* A 256-byte BAR0 is mappable only if the kernel can give it a page of its own. */
	if (b0->flags & VFIO_REGION_INFO_FLAG_MMAP) {
		p = mmap(NULL, b0->size, PROT_READ | PROT_WRITE, MAP_SHARED, vt->device,
			 (off_t)b0->offset);
		if (p != MAP_FAILED)
			vt->bar0 = p;
	}
	return 0;
}

/* MSI-X writes are memory writes by the device: without bus-master they never arrive. */
static int set_master(struct vfio_transport *vt)
{
	uint16_t cmd;
	off_t off = (off_t)vt->cfg_info.offset + PCI_COMMAND_OFF;

	if (pread(vt->device, &cmd, sizeof(cmd), off) != sizeof(cmd))
		return vfio_fail(vt, -EIO, "read PCI_COMMAND");
	cmd |= PCI_COMMAND_MEM_MASTER;
	if (pwrite(vt->device, &cmd, sizeof(cmd), off) != sizeof(cmd))
		return vfio_fail(vt, -EIO, "write PCI_COMMAND");
	return 0;
}

/* One eventfd per vector: as many as both the header and the MSI-X table have. */
static int setup_irqs(struct vfio_transport *vt)
{
	const struct vf_bar_header *h = (const void *)(vt->bar2 +
						       vf_bar_header_off(vt->bar2_info.size));
	struct vfio_irq_info ii = { .argsz = sizeof(ii), .index = VFIO_PCI_MSIX_IRQ_INDEX };
	char buf[sizeof(struct vfio_irq_set) + VFIO_MAX_VECTORS * sizeof(int32_t)];
	struct vfio_irq_set *set = (struct vfio_irq_set *)buf;
	unsigned int n;

	if (h->magic != VF_BAR_MAGIC)
		return vfio_fail(vt, -EPROTO, "no VF header in BAR2");
	if (ioctl(vt->device, VFIO_DEVICE_GET_IRQ_INFO, &ii) < 0 || ii.count == 0)
		return vfio_fail(vt, -ENOTSUP, "no MSI-X (the ivshmem device needs vectors=N)");
	n = cmn_min(cmn_min(ii.count, h->nr_vectors), (unsigned int)VFIO_MAX_VECTORS);
	for (unsigned int i = 0; i < n; i++) {
		vt->irq_fd[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (vt->irq_fd[i] < 0)
			return vfio_fail(vt, -errno, "eventfd");
	}
	set->argsz = (uint32_t)(sizeof(*set) + n * sizeof(int32_t));
	set->flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
	set->index = VFIO_PCI_MSIX_IRQ_INDEX;
	set->start = 0;
	set->count = n;
	memcpy(set->data, vt->irq_fd, n * sizeof(int32_t));
	if (ioctl(vt->device, VFIO_DEVICE_SET_IRQS, set) < 0)
		return vfio_fail(vt, -errno, "VFIO_DEVICE_SET_IRQS (MSI-X)");
	vt->nr_vec = n;
	return 0;
}

static void vfio_close_all(struct vfio_transport *vt)
{
	if (vt->device >= 0 && vt->nr_vec) {
		struct vfio_irq_set off = { .argsz = sizeof(off), .index = VFIO_PCI_MSIX_IRQ_INDEX,
					    .flags = VFIO_IRQ_SET_DATA_NONE |
						     VFIO_IRQ_SET_ACTION_TRIGGER };

		ioctl(vt->device, VFIO_DEVICE_SET_IRQS, &off);
	}
	for (unsigned int i = 0; i < VFIO_MAX_VECTORS; i++) {
		if (vt->irq_fd[i] >= 0)
			close(vt->irq_fd[i]);
		vt->irq_fd[i] = -1;
	}
	if (vt->bar2)
		munmap(vt->bar2, vt->bar2_info.size);
	if (vt->bar0)
		munmap((void *)vt->bar0, vt->bar0_info.size);
	vt->bar2 = NULL;
	vt->bar0 = NULL;
	if (vt->device >= 0)
		close(vt->device);
	if (vt->group >= 0)
		close(vt->group);
	if (vt->container >= 0)
		close(vt->container);
	vt->device = vt->group = vt->container = -1;
	vt->nr_vec = 0;
}

static int vfio_attach(struct vgpu_vf_transport *t, void **bar, uint64_t *size)
{
	struct vfio_transport *vt = to_vfio(t);
	int ret;

	if (vt->device >= 0)
		return -EALREADY;
	ret = bind_vfio(vt);
	if (!ret)
		ret = open_device(vt);
	if (!ret)
		ret = map_bars(vt);
	if (!ret)
		ret = set_master(vt);
	if (!ret)
		ret = setup_irqs(vt);
	if (ret) {
		vfio_close_all(vt);
		return ret;
	}
	*bar = vt->bar2;
	*size = vt->bar2_info.size;
	return 0;
}

static void vfio_detach(struct vgpu_vf_transport *t)
{
	vfio_close_all(to_vfio(t));
}

static int bar0_write(struct vfio_transport *vt, uint32_t off, uint32_t val)
{
	if (off > vt->bar0_info.size - 4 || off % 4)
		return -EINVAL;
	if (vt->bar0) {
		vt->bar0[off / 4] = val;
		return 0;
	}
	if (pwrite(vt->device, &val, 4, (off_t)(vt->bar0_info.offset + off)) != 4)
		return -EIO;
	return 0;
}

static int vfio_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	struct vfio_transport *vt = to_vfio(t);

	if (vt->device < 0)
		return -ENOLINK;
	if (v >= vt->nr_vec)
		return -EINVAL;
	/* The ring entry pushed before must be visible before vgpud is rung. */
	atomic_thread_fence(memory_order_seq_cst);
	return bar0_write(vt, VF_PCI_REG_DOORBELL, vf_pci_doorbell(vf_pci_host_peer(vt->bar2 +
			  vf_bar_header_off(vt->bar2_info.size)), v)) ? -ENOLINK : 0;
}

static int vfio_wait(struct vgpu_vf_transport *t, unsigned int v, uint64_t timeout_ns)
{
	struct vfio_transport *vt = to_vfio(t);
	struct pollfd p;
	uint64_t cnt;
	int ms, n;

	if (vt->device < 0)
		return -ENOLINK;
	if (v >= vt->nr_vec)
		return -EINVAL;
	p = (struct pollfd){ .fd = vt->irq_fd[v], .events = POLLIN };
	/* poll() counts in ms: round up so a short wait still sleeps instead of spinning. */
	ms = timeout_ns >= (uint64_t)INT32_MAX * 1000000ull ? INT32_MAX :
	     (int)((timeout_ns + 999999) / 1000000);
	n = poll(&p, 1, ms);
	if (n < 0)
		return errno == EINTR ? -ETIMEDOUT : -errno;
	if (n == 0)
		return -ETIMEDOUT;
	if (read(vt->irq_fd[v], &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

static unsigned int vfio_nr_vectors(struct vgpu_vf_transport *t)
{
	return to_vfio(t)->nr_vec;
}

/* A VM cannot see vgpud go away (QEMU keeps the device); an attached device is alive. */
static bool vfio_alive(struct vgpu_vf_transport *t)
{
	return to_vfio(t)->device >= 0;
}

static void vfio_destroy(struct vgpu_vf_transport *t)
{
	struct vfio_transport *vt = to_vfio(t);

	vfio_close_all(vt);
	free(vt);
}

static const struct vgpu_vf_transport_ops vfio_ops = {
	.name = "vfio",
	.attach = vfio_attach,
	.detach = vfio_detach,
	.notify = vfio_notify,
	.wait = vfio_wait,
	.nr_vectors = vfio_nr_vectors,
	.alive = vfio_alive,
	.destroy = vfio_destroy,
};

int vgpu_vf_transport_vfio(const char *bdf, struct vgpu_vf_transport **out)
{
	struct vfio_transport *vt;
	int ret;

	vt = calloc(1, sizeof(*vt));
	if (!vt)
		return -ENOMEM;
	ret = vf_pci_find(VF_PCI_SYSFS, bdf, vt->bdf, sizeof(vt->bdf));
	if (ret) {
		free(vt);
		return ret;
	}
	vt->t.ops = &vfio_ops;
	vt->container = vt->group = vt->device = -1;
	for (unsigned int i = 0; i < VFIO_MAX_VECTORS; i++)
		vt->irq_fd[i] = -1;
	*out = &vt->t;
	return 0;
}

/* ---- extras for the attack mode ---- */

bool vf_vfio_is(const struct vgpu_vf_transport *t)
{
	return t && t->ops == &vfio_ops;
}

static struct vfio_transport *attached_vfio(struct vgpu_vf_transport *t)
{
	return vf_vfio_is(t) && to_vfio(t)->device >= 0 ? to_vfio(t) : NULL;
}

int vf_vfio_bar0_write(struct vgpu_vf_transport *t, uint32_t off, uint32_t val)
{
	struct vfio_transport *vt = attached_vfio(t);

	return vt ? bar0_write(vt, off, val) : -EINVAL;
}

int vf_vfio_bar0_read(struct vgpu_vf_transport *t, uint32_t off, uint32_t *val)
{
	struct vfio_transport *vt = attached_vfio(t);

	if (!vt || off > vt->bar0_info.size - 4 || off % 4)
		return -EINVAL;
	if (vt->bar0) {
		*val = vt->bar0[off / 4];
		return 0;
	}
	return pread(vt->device, val, 4, (off_t)(vt->bar0_info.offset + off)) == 4 ? 0 : -EIO;
}

int vf_vfio_take(struct vgpu_vf_transport *t, unsigned int v, uint64_t *count)
{
	struct vfio_transport *vt = attached_vfio(t);

	if (!vt || v >= vt->nr_vec)
		return -EINVAL;
	*count = 0;
	if (read(vt->irq_fd[v], count, sizeof(*count)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

long vf_vfio_bar2_pread(struct vgpu_vf_transport *t, uint64_t off, void *buf, size_t len)
{
	struct vfio_transport *vt = attached_vfio(t);
	ssize_t n;

	if (!vt)
		return -EINVAL;
	n = pread(vt->device, buf, len, (off_t)(vt->bar2_info.offset + off));
	return n < 0 ? -errno : (long)n;
}

long vf_vfio_bar2_pwrite(struct vgpu_vf_transport *t, uint64_t off, const void *buf, size_t len)
{
	struct vfio_transport *vt = attached_vfio(t);
	ssize_t n;

	if (!vt)
		return -EINVAL;
	n = pwrite(vt->device, buf, len, (off_t)(vt->bar2_info.offset + off));
	return n < 0 ? -errno : (long)n;
}

int vf_vfio_region_mmap(struct vgpu_vf_transport *t, unsigned int index, uint64_t off,
			uint64_t len)
{
	struct vfio_transport *vt = attached_vfio(t);
	struct vfio_region_info ri;
	void *p;

	if (!vt)
		return -EINVAL;
	memset(&ri, 0, sizeof(ri));
	ri.argsz = sizeof(ri);
	ri.index = index;
	/* A region vfio does not have still has an offset: index << 40 in vfio-pci. */
	if (ioctl(vt->device, VFIO_DEVICE_GET_REGION_INFO, &ri) < 0)
		ri.offset = (uint64_t)index << 40;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, vt->device, (off_t)(ri.offset + off));
	if (p == MAP_FAILED)
		return -errno;
	munmap(p, len);
	return 0;
}

/* BAR2 is a PFNMAP mapping of the device fd (mremap cannot duplicate it): a second view is
 * a second mmap of the region. */
int vf_vfio_bar2_view(struct vgpu_vf_transport *t, uint64_t off, uint64_t len, void *at,
		       void **out)
{
	struct vfio_transport *vt = attached_vfio(t);
	void *p;

	if (!vt || !len || off % (uint64_t)sysconf(_SC_PAGESIZE) || off > vt->bar2_info.size ||
	    len > vt->bar2_info.size - off)
		return -EINVAL;
	p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), vt->device,
		 (off_t)(vt->bar2_info.offset + off));
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

uint64_t vf_vfio_bar2_size(struct vgpu_vf_transport *t)
{
	struct vfio_transport *vt = attached_vfio(t);

	return vt ? vt->bar2_info.size : 0;
}
