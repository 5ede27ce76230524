// SPDX-License-Identifier: MIT
/* SVA domains: which process a domain reaches. A pid number is not a process - once the
 * process exits and is reaped, the kernel hands the number to the next fork - so the domain
 * holds a pidfd, and the DMA helpers ask it before and after every copy (xlate.c). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "iommu_model/iommu_internal.h"

/* The pid a pidfd refers to, in the pid namespace of /proc ("Pid:" of its fdinfo):
 * -EINVAL if @fd is not a pidfd, -ESRCH if its process is already reaped (Pid: -1 or 0). */
static pid_t pidfd_pid(int fd)
{
	char path[64], line[128];
	long pid = 0;
	bool seen = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return -EINVAL;
	while (!seen && fgets(line, sizeof(line), f))
		seen = sscanf(line, "Pid: %ld", &pid) == 1;
	fclose(f);
	if (!seen)
		return -EINVAL;
	return pid > 0 ? (pid_t)pid : -ESRCH;
}

bool iommu_sva_alive(const struct iommu_domain *d)
{
	struct pollfd p = { .fd = d->pidfd, .events = POLLIN };
	int r;

	/* A pidfd polls readable once its process has exited (zombie or reaped); an error
	 * counts as gone: when in doubt the device reaches nothing. A signal cutting the poll
	 * is no error: asked again. */
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	return r == 0;
}

int iommu_sva_init(struct iommu_domain *d, const struct iommu_domain_opts *o)
{
	pid_t pid = o->pid ? o->pid : getpid();

	if (o->flags & IOMMU_DOMAIN_SVA_PIDFD) {
		pid_t of = pidfd_pid(o->pidfd);

		if (of < 0)
			return of;
		if (o->pid && of != o->pid)
			return -ESRCH;	/* that number is someone else's now */
		pid = of;
		d->pidfd = fcntl(o->pidfd, F_DUPFD_CLOEXEC, 0);
	} else {
		/* The process that has the number now; from here on, that process only. */
		d->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	}
	if (d->pidfd < 0)
		return -errno;
	d->pid = pid;
	if (!iommu_sva_alive(d)) {
		close(d->pidfd);
		d->pidfd = -1;
		return -ESRCH;
	}
	return 0;
}

void iommu_sva_fini(struct iommu_domain *d)
{
	if (d->pidfd >= 0)
		close(d->pidfd);
	d->pidfd = -1;
}
