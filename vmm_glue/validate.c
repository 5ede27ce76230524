// SPDX-License-Identifier: MIT
/* Validation of a domain XML against libvirt's schema with virt-xml-validate, before
 * anything is started. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm_glue/vmm_internal.h"

#define VALIDATOR	"virt-xml-validate"

static int write_all(int fd, const char *s, size_t len)
{
	while (len) {
		ssize_t n = write(fd, s, len);

		if (n <= 0)
			return -errno;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Run the validator on @path; its output (both streams) into @out. Exit status or -errno. */
static int run_validator(const char *path, char *out, size_t len)
{
	int p[2], st;
	size_t got = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (!pid) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execlp(VALIDATOR, VALIDATOR, path, "domain", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		ssize_t n = read(p[0], out + got, len - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == len - 1) {
			char sink[512];

			while (read(p[0], sink, sizeof(sink)) > 0)
				;
			break;
		}
	}
	out[got] = 0;
	close(p[0]);
	if (waitpid(pid, &st, 0) != pid)
		return -ECHILD;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The validator's first line that says what is wrong (its last line only says "fails"). */
static void first_complaint(char *out)
{
	char *nl = strchr(out, '\n');

	if (nl && nl[1] && strstr(out, "Relax-NG validity error") == NULL &&
	    strstr(nl + 1, "error"))
		memmove(out, nl + 1, strlen(nl + 1) + 1);
	nl = strchr(out, '\n');
	if (nl)
		*nl = 0;
}

int vmm_xml_validate(const char *xml, struct cmn_fail *e)
{
	char path[] = "/tmp/vgpu-vm-XXXXXX.xml", out[1024];
	int fd = mkstemps(path, 4), r;

	if (fd < 0)
		return cmn_fail(e, -errno, "cannot create a temporary file: %s", strerror(errno));
	r = write_all(fd, xml, strlen(xml));
	close(fd);
	if (!r)
		r = run_validator(path, out, sizeof(out));
	unlink(path);
	if (r < 0)
		return cmn_fail(e, r, "cannot run %s: %s", VALIDATOR, strerror(-r));
	if (r == 127)
		return cmn_fail(e, -ENOENT, "%s is not installed (Debian: libvirt-clients)",
				VALIDATOR);
	if (r) {
		first_complaint(out);
		return cmn_fail(e, -EINVAL, "the domain XML does not validate against libvirt's "
				"schema: %s", out);
	}
	return 0;
}
