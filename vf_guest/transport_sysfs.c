// SPDX-License-Identifier: MIT
/* The polling tier: the VF's PCI device through sysfs, for VMs without a vIOMMU (where vfio
 * cannot be used and the Debian kernel has no vfio no-IOMMU mode).
 *
 * BAR2 is resource2 mapped shared; the doorbell is ivshmem's BAR0 register, reached through
 * resource0. There are no interrupts here (ivshmem-doorbell is MSI-X only and only a driver
 * can enable MSI-X), so wait() sleeps a short slice and reports a possible wake-up: the
 * driver re-checks its rings and fences after every wait anyway. Rings to vgpud still work,
 * so vgpud serves the mailbox as soon as a request is pushed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vf_pci.h"
#include <vgpu/vf_bar.h>

#define SYSFS_POLL_SLICE_NS	(100u * 1000)	/* one wait; the driver spins before it waits */
#define PCI_COMMAND_OFF		4
#define PCI_COMMAND_MEMORY_BIT	0x2

struct sysfs_transport {
	struct vgpu_vf_transport t;
	char dir[PATH_MAX];		/* the device's sysfs directory */
	int bar2_fd, bar0_fd;
	uint8_t *bar2;
	uint64_t bar2_size;
	volatile uint32_t *bar0;
	size_t bar0_len;
	unsigned int nr_vec;
};

static struct sysfs_transport *to_sysfs(struct vgpu_vf_transport *t)
{
	return cmn_container_of(t, struct sysfs_transport, t);
}

static int open_attr(const struct sysfs_transport *st, const char *attr, int flags)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/%s", st->dir, attr) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, flags | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* Firmware normally enables memory decoding; a device nobody enabled reads all-ones. The
 * config file is absent in a fake tree, which is fine. */
static void enable_memory(const struct sysfs_transport *st)
{
	uint16_t cmd;
	int fd = open_attr(st, "config", O_RDWR);

	if (fd < 0)
		return;
	if (pread(fd, &cmd, sizeof(cmd), PCI_COMMAND_OFF) == sizeof(cmd) &&
	    !(cmd & PCI_COMMAND_MEMORY_BIT)) {
		cmd |= PCI_COMMAND_MEMORY_BIT;
		if (pwrite(fd, &cmd, sizeof(cmd), PCI_COMMAND_OFF) != sizeof(cmd))
			fprintf(stderr, "vgpu-vf sysfs: cannot enable memory decoding: %s\n",
				strerror(errno));
	}
	close(fd);
}

/* Map a resource file whole (@min: at least this many bytes must be there). */
static int map_resource(const struct sysfs_transport *st, const char *attr, uint64_t min,
			int *fd_out, void **p, uint64_t *size)
{
	struct stat s;
	int fd = open_attr(st, attr, O_RDWR | O_SYNC);

	if (fd < 0)
		return fd;
	if (fstat(fd, &s) < 0 || (uint64_t)s.st_size < min) {
		close(fd);
		return -ENODEV;
	}
	*size = (uint64_t)s.st_size;
	*p = mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*p == MAP_FAILED) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	*fd_out = fd;
	return 0;
}

static void sysfs_unmap(struct sysfs_transport *st)
{
	if (st->bar2)
		munmap(st->bar2, st->bar2_size);
	if (st->bar0)
		munmap((void *)st->bar0, st->bar0_len);
	if (st->bar2_fd >= 0)
		close(st->bar2_fd);
	if (st->bar0_fd >= 0)
		close(st->bar0_fd);
	st->bar2 = NULL;
	st->bar0 = NULL;
	st->bar2_fd = st->bar0_fd = -1;
	st->nr_vec = 0;
}

static int sysfs_attach(struct vgpu_vf_transport *t, void **bar, uint64_t *size)
{
	struct sysfs_transport *st = to_sysfs(t);
	const struct vf_bar_header *h;
	uint64_t len;
	void *p;
	int ret;

	if (st->bar2)
		return -EALREADY;
	enable_memory(st);
	ret = map_resource(st, "resource2", 2 * VF_BAR_HDR_SIZE, &st->bar2_fd, &p, &st->bar2_size);
	if (ret)
		goto fail;
	st->bar2 = p;
	ret = map_resource(st, "resource0", VF_PCI_REG_DOORBELL + 4, &st->bar0_fd, &p, &len);
	if (ret)
		goto fail;
	st->bar0 = p;
	st->bar0_len = len;
	ret = -EPROTO;
	if (st->bar2_size & (st->bar2_size - 1))
		goto fail;
	/* The vector count is the header's: vgpud hands QEMU that many per direction. */
	h = (const void *)(st->bar2 + vf_bar_header_off(st->bar2_size));
	if (h->magic != VF_BAR_MAGIC || h->nr_vectors == 0 || h->nr_vectors > 256)
		goto fail;
	st->nr_vec = h->nr_vectors;
	*bar = st->bar2;
	*size = st->bar2_size;
	return 0;
fail:
	sysfs_unmap(st);
	return ret;
}

static void sysfs_detach(struct vgpu_vf_transport *t)
{
	sysfs_unmap(to_sysfs(t));
}

static int sysfs_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	struct sysfs_transport *st = to_sysfs(t);

	if (!st->bar0)
		return -ENOLINK;
	if (v >= st->nr_vec)
		return -EINVAL;
	/* The ring pushed before this must be visible first: a full barrier, then the store
	 * (an uncached MMIO write on real sysfs). */
	atomic_thread_fence(memory_order_seq_cst);
	st->bar0[VF_PCI_REG_DOORBELL / 4] =
		vf_pci_doorbell(vf_pci_host_peer(st->bar2 + vf_bar_header_off(st->bar2_size)), v);
	return 0;
}

static int sysfs_wait(struct vgpu_vf_transport *t, unsigned int v, uint64_t timeout_ns)
{
	struct sysfs_transport *st = to_sysfs(t);
	uint64_t ns = cmn_min(timeout_ns, (uint64_t)SYSFS_POLL_SLICE_NS);
	struct timespec ts = { 0, (long)ns };

	if (!st->bar2)
		return -ENOLINK;
	if (v >= st->nr_vec)
		return -EINVAL;
	nanosleep(&ts, NULL);
	return 0;	/* maybe woken: no interrupt tells us, the caller looks again */
}

static unsigned int sysfs_nr_vectors(struct vgpu_vf_transport *t)
{
	return to_sysfs(t)->nr_vec;
}

static bool sysfs_alive(struct vgpu_vf_transport *t)
{
	struct sysfs_transport *st = to_sysfs(t);
	char path[PATH_MAX];

	/* An unplugged device's directory goes away. */
	return st->bar2 && snprintf(path, sizeof(path), "%s/resource2", st->dir) < (int)sizeof(path) &&
	       access(path, F_OK) == 0;
}

static void sysfs_destroy(struct vgpu_vf_transport *t)
{
	struct sysfs_transport *st = to_sysfs(t);

	sysfs_unmap(st);
	free(st);
}

static const struct vgpu_vf_transport_ops sysfs_ops = {
	.name = "sysfs",
	.attach = sysfs_attach,
	.detach = sysfs_detach,
	.notify = sysfs_notify,
	.wait = sysfs_wait,
	.nr_vectors = sysfs_nr_vectors,
	.alive = sysfs_alive,
	.destroy = sysfs_destroy,
};

int vf_sysfs_transport_at(const char *root, const char *bdf, struct vgpu_vf_transport **out)
{
	char name[VF_PCI_BDF_MAX];
	struct sysfs_transport *st;
	int ret;

	ret = vf_pci_find(root, bdf, name, sizeof(name));
	if (ret)
		return ret;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	if (snprintf(st->dir, sizeof(st->dir), "%s/%s", root, name) >= (int)sizeof(st->dir)) {
		free(st);
		return -ENAMETOOLONG;
	}
	st->t.ops = &sysfs_ops;
	st->bar2_fd = st->bar0_fd = -1;
	*out = &st->t;
	return 0;
}

int vgpu_vf_transport_sysfs(const char *bdf, struct vgpu_vf_transport **out)
{
	return vf_sysfs_transport_at(VF_PCI_SYSFS, bdf, out);
}

bool vf_sysfs_is(const struct vgpu_vf_transport *t)
{
	return t && t->ops == &sysfs_ops;
}

/* resource2 is mapped with io_remap_pfn_range (a PFNMAP VMA, which mremap refuses to
 * duplicate): a second view is a second mmap of the file we still hold open. */
int vf_sysfs_bar2_view(struct vgpu_vf_transport *t, uint64_t off, uint64_t len, void *at,
		       void **out)
{
	struct sysfs_transport *st;
	void *p;

	if (!vf_sysfs_is(t) || to_sysfs(t)->bar2_fd < 0)
		return -EINVAL;
	st = to_sysfs(t);
	if (!len || off % (uint64_t)sysconf(_SC_PAGESIZE) || off > st->bar2_size ||
	    len > st->bar2_size - off)
		return -EINVAL;
	p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), st->bar2_fd, (off_t)off);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}
