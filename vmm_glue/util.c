// SPDX-License-Identifier: MIT
/* Exit codes shared by the tool and the hook. */
#include <errno.h>

#include "vmm_glue/vmm_glue.h"

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
