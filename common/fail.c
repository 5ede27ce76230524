// SPDX-License-Identifier: MIT
/* The failure record of fail.h. */
#include <stdarg.h>
#include <stdio.h>

#include "common/fail.h"

int cmn_fail(struct cmn_fail *f, int err, const char *fmt, ...)
{
	va_list ap;

	if (!f)
		return err;
	f->err = err;
	va_start(ap, fmt);
	vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
	va_end(ap);
	return err;
}
