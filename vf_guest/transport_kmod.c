// SPDX-License-Identifier: MIT
/* The kernel-driver transport: the VF through /dev/vgpu-vfN of vgpu_vf.ko (guest-kmod/).
 *
 * The driver shows this process a BAR2 whose mailbox rings are the process's own (the
 * kernel forwards them through the real mailbox when the mailbox vector is rung), so the
 * library above runs unchanged: notify is an ioctl that serves the rings or kicks the
 * engines, wait an ioctl that sleeps until the kernel's interrupt handler wakes it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vgpu/gpfifo.h>

#include "common/compiler.h"
#include "common/err.h"
#include "vf_guest/include/vgpu_vf_kmod.h"
#include "vf_guest/vf_internal.h"
#include "vf_guest/vf_pci.h"
#include <vgpu/vf_bar.h>
#include <vgpu/vf_ioctl.h>

#define KMOD_DEV_DIR	"/dev"

struct kmod_transport {
	struct vgpu_vf_transport t;
	char path[PATH_MAX];
	int fd;
	void *bar;
	uint64_t bar_size;
	unsigned int nr_vec;
	bool gone;			/* the driver said the device went away */
};

static struct kmod_transport *to_kmod(struct vgpu_vf_transport *t)
{
	return cmn_container_of(t, struct kmod_transport, t);
}

static void kmod_detach(struct vgpu_vf_transport *t)
{
	struct kmod_transport *kt = to_kmod(t);

	if (kt->bar)
		munmap(kt->bar, kt->bar_size);
	kt->bar = NULL;
	if (kt->fd >= 0)
		close(kt->fd);
	kt->fd = -1;
}

static int kmod_attach(struct vgpu_vf_transport *t, void **bar, uint64_t *size)
{
	struct kmod_transport *kt = to_kmod(t);
	struct vgpu_vf_ioc_info info = { .size = sizeof(info) };
	void *p;

	kmod_detach(t);
	kt->fd = open(kt->path, O_RDWR | O_CLOEXEC);
	if (kt->fd < 0)
		return errno == ENOENT ? -ENODEV : -errno;
	if (ioctl(kt->fd, VGPU_VF_IOC_INFO, &info) < 0) {
		int err = -errno;

		kmod_detach(t);
		return err;
	}
	if (VGPU_ABI_VERSION_MAJOR(info.uapi_version) != VGPU_VF_UAPI_MAJOR) {
		fprintf(stderr, "vgpu-vf kmod: %s speaks uapi %u.%u, this library %u.%u\n",
			kt->path, VGPU_ABI_VERSION_MAJOR(info.uapi_version),
			VGPU_ABI_VERSION_MINOR(info.uapi_version), VGPU_VF_UAPI_MAJOR,
			VGPU_VF_UAPI_MINOR);
		kmod_detach(t);
		return -VGPU_EABI;
	}
	p = mmap(NULL, info.bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, kt->fd, 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		kmod_detach(t);
		return err;
	}
	kt->bar = p;
	kt->bar_size = info.bar_size;
	kt->nr_vec = info.nr_vectors;
	kt->gone = false;
	*bar = p;
	*size = info.bar_size;
	return 0;
}

/* The driver's errno as the transport's: a removed device is a host gone away. */
static int kmod_err(struct kmod_transport *kt)
{
	if (errno == ENODEV) {
		kt->gone = true;
		return -ENOLINK;
	}
	return -errno;
}

static int kmod_notify(struct vgpu_vf_transport *t, unsigned int v)
{
	struct kmod_transport *kt = to_kmod(t);
	struct vgpu_vf_ioc_notify n = { .size = sizeof(n), .vector = v };

	if (kt->fd < 0)
		return -ENOLINK;
	if (v >= kt->nr_vec)
		return -EINVAL;
	return ioctl(kt->fd, VGPU_VF_IOC_NOTIFY, &n) < 0 ? kmod_err(kt) : 0;
}

static int kmod_wait(struct vgpu_vf_transport *t, unsigned int v, uint64_t timeout_ns)
{
	struct kmod_transport *kt = to_kmod(t);
	struct vgpu_vf_ioc_wait w = { .size = sizeof(w), .vector = v };

	if (kt->fd < 0)
		return -ENOLINK;
	if (v >= kt->nr_vec)
		return -EINVAL;
	/* The driver caps one wait at 60 s; callers loop on their own deadlines anyway. */
	w.timeout_ns = timeout_ns > 60ull * 1000 * 1000 * 1000 ? 60ull * 1000 * 1000 * 1000 :
		       timeout_ns;
	if (ioctl(kt->fd, VGPU_VF_IOC_WAIT, &w) == 0)
		return 0;
	if (errno == EINTR)
		return -ETIMEDOUT;	/* a signal: the caller re-checks and waits again */
	return kmod_err(kt);
}

static unsigned int kmod_nr_vectors(struct vgpu_vf_transport *t)
{
	return to_kmod(t)->nr_vec;
}

static bool kmod_alive(struct vgpu_vf_transport *t)
{
	return to_kmod(t)->fd >= 0 && !to_kmod(t)->gone;
}

static void kmod_destroy(struct vgpu_vf_transport *t)
{
	kmod_detach(t);
	free(to_kmod(t));
}

static const struct vgpu_vf_transport_ops kmod_ops = {
	.name = "kmod",
	.attach = kmod_attach,
	.detach = kmod_detach,
	.notify = kmod_notify,
	.wait = kmod_wait,
	.nr_vectors = kmod_nr_vectors,
	.alive = kmod_alive,
	.destroy = kmod_destroy,
};

/* The first /dev/vgpu-vf<N> by VF number. */
static int kmod_find(char *path, size_t len)
{
	const size_t plen = strlen(VGPU_VF_DEV_PREFIX);
	long best = -1;
	struct dirent *d;
	DIR *dir = opendir(KMOD_DEV_DIR);

	if (!dir)
		return -ENODEV;
	while ((d = readdir(dir))) {
		char *end;
		long n;

		if (strncmp(d->d_name, VGPU_VF_DEV_PREFIX, plen))
			continue;
		n = strtol(d->d_name + plen, &end, 10);
		if (*end || end == d->d_name + plen || n < 0 || (best >= 0 && n >= best))
			continue;
		best = n;
	}
	closedir(dir);
	if (best < 0)
		return -ENODEV;
	snprintf(path, len, KMOD_DEV_DIR "/" VGPU_VF_DEV_PREFIX "%ld", best);
	return 0;
}

int vgpu_vf_transport_kmod(const char *dev, struct vgpu_vf_transport **out)
{
	struct kmod_transport *kt;
	int ret;

	kt = calloc(1, sizeof(*kt));
	if (!kt)
		return -ENOMEM;
	if (dev) {
		if (strlen(dev) >= sizeof(kt->path)) {
			free(kt);
			return -ENAMETOOLONG;
		}
		strcpy(kt->path, dev);
		if (access(dev, F_OK)) {
			free(kt);
			return -ENODEV;
		}
	} else {
		ret = kmod_find(kt->path, sizeof(kt->path));
		if (ret) {
			free(kt);
			return ret;
		}
	}
	kt->t.ops = &kmod_ops;
	kt->fd = -1;
	*out = &kt->t;
	return 0;
}

bool vf_kmod_is(const struct vgpu_vf_transport *t)
{
	return t && t->ops == &kmod_ops;
}

/* The file offset is the BAR2 offset: a second mmap of the same file is the same pages,
 * inserted by the driver on first touch as in the first mapping. */
int vf_kmod_bar2_view(struct vgpu_vf_transport *t, uint64_t off, uint64_t len, void *at,
		      void **out)
{
	struct kmod_transport *kt;
	void *p;

	if (!vf_kmod_is(t) || to_kmod(t)->fd < 0)
		return -EINVAL;
	kt = to_kmod(t);
	if (!len || off % (uint64_t)sysconf(_SC_PAGESIZE) || off > kt->bar_size ||
	    len > kt->bar_size - off)
		return -EINVAL;
	p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), kt->fd,
		 (off_t)off);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

/* The driver's file behind @vf, or -EOPNOTSUPP. */
static int kmod_fd(struct vgpu_vf *vf)
{
	if (!vf || !vf_kmod_is(vf->t) || to_kmod(vf->t)->fd < 0)
		return -EOPNOTSUPP;
	return to_kmod(vf->t)->fd;
}

int vgpu_kmod_svm_migrate(struct vgpu_vf *vf, void *cpu, size_t len, bool to_vram,
			  uint64_t *moved)
{
	struct vgpu_vf_ioc_svm a = { .size = sizeof(a),
				     .to = to_vram ? VGPU_VF_SVM_TO_VRAM : VGPU_VF_SVM_TO_SYSTEM,
				     .addr = (uintptr_t)cpu, .len = len };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	if (ioctl(fd, VGPU_VF_IOC_SVM, &a) < 0)
		return vf_error(vf, -errno, "SVM migration of %zu bytes at %p: %s", len, cpu,
				strerror(errno));
	*moved = a.migrated;
	return 0;
}

int vgpu_kmod_svm_where(struct vgpu_vf *vf, const void *cpu, size_t n, uint64_t *vram)
{
	struct vgpu_vf_ioc_svm_query q = { .size = sizeof(q), .addr = (uintptr_t)cpu,
					   .len = (uint64_t)n * 4096, .out_ptr = (uintptr_t)vram };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	if (ioctl(fd, VGPU_VF_IOC_SVM_QUERY, &q) < 0)
		return vf_error(vf, -errno, "SVM mirror of %zu pages at %p: %s", n, cpu,
				strerror(errno));
	for (size_t i = 0; i < n; i++)
		vram[i] = vram[i] & VGPU_VF_SVM_PAGE_VRAM ? VGPU_VF_SVM_PAGE_ADDR(vram[i]) : 0;
	return 0;
}

/* ---- the kernel's SVM address space ---- */

#define KMOD_CHAN_MEM		(64u << 10)	/* USERD page | GPFIFO | pushbuffer room */
#define KMOD_CHAN_ENTRIES	64u
#define KMOD_CHAN_SEM_OFF	256u		/* the fence semaphore, after USERD */

int vgpu_kmod_as_create(struct vgpu_vf *vf)
{
	struct vgpu_vf_ioc_as_create a = { .size = sizeof(a) };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	if (ioctl(fd, VGPU_VF_IOC_AS_CREATE, &a) < 0)
		return vf_error(vf, -errno, "the kernel's SVM address space: %s", strerror(errno));
	return 0;
}

/* The channel is the kernel's (its memory, its RM client): this library only drives it,
 * so the struct is filled here as channel.c would lay out one of its own, and the
 * submission and fence code of channel.c runs on it unchanged. It is on no list of @vf's:
 * recovery and close have nothing of it to free. */
int vgpu_kmod_channel_create(struct vgpu_vf *vf, uint32_t runlist, struct vgpu_channel **out)
{
	struct vgpu_vf_ioc_as_channel a = { .size = sizeof(a), .runlist = runlist,
					    .gpfifo_entries = KMOD_CHAN_ENTRIES,
					    .mem_size = KMOD_CHAN_MEM };
	struct vgpu_channel *ch;
	int fd = kmod_fd(vf);
	uint8_t *mem;

	if (fd < 0)
		return fd;
	ch = calloc(1, sizeof(*ch));
	if (ch)
		ch->recs = calloc(KMOD_CHAN_ENTRIES, sizeof(*ch->recs));
	if (!ch || !ch->recs) {
		free(ch);
		return -ENOMEM;
	}
	if (ioctl(fd, VGPU_VF_IOC_AS_CHANNEL, &a) < 0) {
		int err = -errno;

		free(ch->recs);
		free(ch);
		return vf_error(vf, err, "a channel on the kernel's address space: %s",
				strerror(-err));
	}
	mem = vf->bar + a.mmap_offset;
	ch->vf = vf;
	ch->chid = a.chid;
	ch->token = a.token;
	ch->runlist = runlist;
	ch->entries = a.gpfifo_entries;
	ch->gpfifo = (uint64_t *)(mem + a.gpfifo_off);
	ch->gpfifo_va = a.gpu_va + a.gpfifo_off;
	ch->pb = mem + a.pb_off;
	ch->pb_va = a.gpu_va + a.pb_off;
	ch->pb_size = (uint32_t)(a.mem_size - a.pb_off);
	ch->userd = (struct vgpu_userd *)(mem + a.userd_off);
	ch->sem = (uint64_t *)(mem + a.userd_off + KMOD_CHAN_SEM_OFF);
	ch->sem_va = a.gpu_va + a.userd_off + KMOD_CHAN_SEM_OFF;
	ch->sem_flags = VGPU_SEM_64 | VGPU_SEM_INTR;
	ch->userd_aper = VGPU_APER_VRAM;
	*out = ch;
	return 0;
}

void vgpu_kmod_channel_destroy(struct vgpu_channel *ch)
{
	if (!ch)
		return;
	free(ch->recs);
	free(ch);
}

int vgpu_kmod_as_stats(struct vgpu_vf *vf, struct vgpu_kmod_as_stats *out)
{
	struct vgpu_vf_ioc_as_info a = { .size = sizeof(a) };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	if (ioctl(fd, VGPU_VF_IOC_AS_INFO, &a) < 0)
		return -errno;
	*out = (struct vgpu_kmod_as_stats){
		.channels = a.channels, .faults = a.faults, .mapped = a.mapped,
		.migrated = a.migrated, .invalidated = a.invalidated, .replays = a.replays,
		.cancelled = a.cancelled, .evicted = a.evicted, .lost = a.lost,
	};
	return 0;
}

int vgpu_kmod_quota(struct vgpu_vf *vf, struct vgpu_kmod_quota *out)
{
	struct vgpu_vf_ioc_info a = { .size = sizeof(a) };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	if (ioctl(fd, VGPU_VF_IOC_INFO, &a) < 0)
		return -errno;
	*out = (struct vgpu_kmod_quota){
		.vram_limit = a.vram_limit, .vram_used = a.vram_used, .dma_limit = a.dma_limit,
		.dma_used = a.dma_used, .chan_limit = a.chan_limit, .chan_used = a.chan_used,
		.client_limit = a.client_limit, .strict = a.strict,
	};
	return 0;
}

int vgpu_kmod_as_map(struct vgpu_vf *vf, struct vgpu_mem *mem, uint64_t gpu_va, bool read_only)
{
	struct vgpu_vf_ioc_as_map a = { .size = sizeof(a), .gpu_va = gpu_va,
					.flags = read_only ? VGPU_VF_AS_MAP_READONLY : 0 };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	if (!mem || mem->vf != vf || mem->kind != VGPU_MEM_VRAM || !mem->handle || mem->lost)
		return vf_error(vf, -EINVAL, "AS_MAP: not a VRAM object of this VF");
	a.client = vf->h_client;
	a.handle = mem->handle;
	if (ioctl(fd, VGPU_VF_IOC_AS_MAP, &a) < 0)
		return vf_error(vf, -errno, "AS_MAP of %llu bytes at GPU %#llx: %s",
				(unsigned long long)mem->size, (unsigned long long)gpu_va,
				strerror(errno));
	return 0;
}

int vgpu_kmod_as_unmap(struct vgpu_vf *vf, uint64_t gpu_va)
{
	struct vgpu_vf_ioc_as_unmap a = { .size = sizeof(a), .gpu_va = gpu_va };
	int fd = kmod_fd(vf);

	if (fd < 0)
		return fd;
	return ioctl(fd, VGPU_VF_IOC_AS_UNMAP, &a) < 0 ? -errno : 0;
}

const char *vgpu_kmod_device(const struct vgpu_vf *vf)
{
	return vf && vf_kmod_is(vf->t) ? to_kmod(vf->t)->path : NULL;
}
