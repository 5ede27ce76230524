/* Errors, exit codes and UUIDs shared by the tool, the hook and the library. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "vmm_glue/vmm_glue.h"

int vmm_fail(struct vmm_err *e, int err, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return err;
	e->err = err;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return err;
}

int vmm_exit_code(int err)
{
	switch (err) {
	case 0:
		return VMM_EXIT_OK;
	case -EINVAL: case -ERANGE: case -ENAMETOOLONG:
		return VMM_EXIT_USAGE;
	case -ENOENT: case -ENODEV:
		return VMM_EXIT_NOT_FOUND;
	case -EBUSY: case -EEXIST: case -EALREADY:
		return VMM_EXIT_CONFLICT;
	case -ENOSPC: case -ENOMEM:
		return VMM_EXIT_RESOURCES;
	case -ECONNREFUSED: case -EHOSTUNREACH: case -ENOTCONN:
		return VMM_EXIT_UNREACHABLE;
	case -EACCES: case -EPERM:
		return VMM_EXIT_PERM;
	default:
		return VMM_EXIT_FAIL;
	}
}

bool vmm_uuid_valid(const char *s)
{
	static const int dash[] = { 8, 13, 18, 23 };
	unsigned int d = 0;

	if (!s || strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++) {
		if (d < 4 && i == dash[d]) {
			if (s[i] != '-')
				return false;
			d++;
		} else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
			     (s[i] >= 'A' && s[i] <= 'F'))) {
			return false;
		}
	}
	return true;
}

void vmm_uuid_generate(char out[VMM_UUID_LEN])
{
	uint8_t b[16];

	/* getrandom of 16 bytes does not fail short once the pool is up; fall back to the
	 * clock and pid only so that a UUID is never left uninitialised. */
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		for (unsigned int i = 0; i < sizeof(b); i++)
			b[i] = (uint8_t)((getpid() >> (i % 4)) ^ (i * 37) ^ (uintptr_t)&b);
	}
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, VMM_UUID_LEN,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
		 b[12], b[13], b[14], b[15]);
}
