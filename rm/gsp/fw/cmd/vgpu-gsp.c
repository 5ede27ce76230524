// SPDX-License-Identifier: MIT
/* vgpu-gsp: the emulated GSP firmware as its own process. Started by the device owner
 * (gsp_start()) with the queue memfd and the privileged-state memfd inherited:
 *   vgpu-gsp --queues FD [--priv FD] [--kick FD] [--status FD] [--fdsock FD] [--ppid PID]
 * It exits when its parent dies. Built twice: vgpu-gsp, and vgpu-gsp-test with the test
 * hooks (rm/gsp/gsp_test_rpc.h) for the test suites and benchmarks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm/gsp/fw/gsp_fw.h"

static int parse_fd(const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < -1 || v > 1 << 20)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	int qfd = -1, priv = -1, kick = -1, status = -1, sock = -1, ppid = 0;

	for (int i = 1; i < argc; i++) {
		int *dst = !strcmp(argv[i], "--queues") ? &qfd : !strcmp(argv[i], "--priv") ? &priv :
			   !strcmp(argv[i], "--kick") ? &kick : !strcmp(argv[i], "--status") ? &status :
			   !strcmp(argv[i], "--fdsock") ? &sock :
			   !strcmp(argv[i], "--ppid") ? &ppid : NULL;

		if (!dst || i + 1 >= argc || parse_fd(argv[++i], dst)) {
			fprintf(stderr, "usage: vgpu-gsp --queues FD [--priv FD] [--kick FD] [--status FD] [--fdsock FD] [--ppid PID]\n");
			return 2;
		}
	}
	if (qfd < 0) {
		fprintf(stderr, "vgpu-gsp: --queues is required\n");
		return 2;
	}
	return gsp_fw_run(qfd, priv, kick, status, sock, ppid);
}
