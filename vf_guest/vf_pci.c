// SPDX-License-Identifier: MIT
/* Finding the VF's PCI device in sysfs: ivshmem's IDs first (cheap), then the magic of the
 * BAR2 header in resource2, so another ivshmem device in the same VM is left alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vf_guest/vf_pci.h"
#include <vgpu/vf_bar.h>

/* Read a sysfs hex attribute like "0x1af4\n". */
static int read_hex(const char *devdir, const char *attr, unsigned long *val)
{
	char path[PATH_MAX], buf[32], *end;
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "%s/%s", devdir, attr) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EINVAL;
	buf[n] = 0;
	errno = 0;
	*val = strtoul(buf, &end, 16);
	if (errno || end == buf || (*end && *end != '\n'))
		return -EINVAL;
	return 0;
}

/* Map the header page of resource2 and compare the magic. */
static int probe_magic(const char *devdir, uint64_t *bar_size)
{
	char path[PATH_MAX];
	const volatile uint64_t *magic;
	struct stat st;
	uint64_t size;
	void *p;
	int fd, ret = 0;

	if (snprintf(path, sizeof(path), "%s/resource2", devdir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENODEV : -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto close_fd;
	}
	size = (uint64_t)st.st_size;
	if (size < 2 * VF_BAR_HDR_SIZE || (size & (size - 1))) {
		ret = -ENODEV;
		goto close_fd;
	}
	p = mmap(NULL, VF_BAR_HDR_SIZE, PROT_READ, MAP_SHARED, fd,
		 (off_t)vf_bar_header_off(size));
	if (p == MAP_FAILED) {
		ret = -errno;
		goto close_fd;
	}
	magic = p;
	if (*magic != VF_BAR_MAGIC)
		ret = -ENODEV;
	munmap(p, VF_BAR_HDR_SIZE);
	if (!ret && bar_size)
		*bar_size = size;
close_fd:
	close(fd);
	return ret;
}

int vf_pci_probe(const char *devdir, uint64_t *bar_size)
{
	unsigned long vendor, device;

	if (read_hex(devdir, "vendor", &vendor) || read_hex(devdir, "device", &device))
		return -ENODEV;
	if (vendor != VF_PCI_VENDOR || device != VF_PCI_DEVICE)
		return -ENODEV;
	return probe_magic(devdir, bar_size);
}

/* A BDF is a single path component: no way out of @root. */
static bool bdf_ok(const char *bdf)
{
	return *bdf && *bdf != '.' && !strchr(bdf, '/') && strlen(bdf) < VF_PCI_BDF_MAX;
}

int vf_pci_find(const char *root, const char *bdf, char *out, size_t len)
{
	char dir[PATH_MAX];
	struct dirent **names;
	int n, ret = -ENODEV;

	if (bdf) {
		if (!bdf_ok(bdf))
			return -EINVAL;
		if (snprintf(dir, sizeof(dir), "%s/%s", root, bdf) >= (int)sizeof(dir))
			return -ENAMETOOLONG;
		ret = vf_pci_probe(dir, NULL);
		if (ret)
			return ret;
		if (strlen(bdf) >= len)
			return -ENAMETOOLONG;
		strcpy(out, bdf);
		return 0;
	}
	n = scandir(root, &names, NULL, alphasort);
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;

		if (ret == -ENODEV && bdf_ok(name) &&
		    snprintf(dir, sizeof(dir), "%s/%s", root, name) < (int)sizeof(dir) &&
		    vf_pci_probe(dir, NULL) == 0) {
			ret = strlen(name) < len ? 0 : -ENAMETOOLONG;
			if (!ret)
				strcpy(out, name);
		}
		free(names[i]);
	}
	free(names);
	return ret;
}
