/* SPDX-License-Identifier: MIT */
/* tests/unit/t_proc.h - process helpers several suites share (header-only, static inline). */
#ifndef VGPU_TESTS_T_PROC_H
#define VGPU_TESTS_T_PROC_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

/* Make the next fork in this pid namespace get @pid (root only): 0, or -errno. */
static inline int t_next_pid_is(pid_t pid)
{
	char s[32];
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
	int n = snprintf(s, sizeof(s), "%d", (int)pid - 1);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, (size_t)n) != n)
		ret = -errno;
	close(fd);
	return ret;
}

#endif
