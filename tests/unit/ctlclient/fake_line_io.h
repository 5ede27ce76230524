// SPDX-License-Identifier: MIT
/* Line I/O for the scripted fake vgpuds of the control-protocol tests (test_ctlclient,
 * test_vgpuctl_replies): a whole reply out, one request line in. */
#ifndef VGPU_TESTS_FAKE_LINE_IO_H
#define VGPU_TESTS_FAKE_LINE_IO_H

#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

/* Send all of @s; a peer that went away ends it quietly (its test sees the rest). */
static inline void send_all(int fd, const char *s, size_t len)
{
	while (len) {
		ssize_t n = send(fd, s, len, MSG_NOSIGNAL);

		if (n <= 0)
			return;
		s += n;
		len -= (size_t)n;
	}
}

/* Read up to and including the next newline; false on EOF. */
static inline bool read_request(int fd)
{
	char ch;

	while (read(fd, &ch, 1) == 1)
		if (ch == '\n')
			return true;
	return false;
}

#endif
