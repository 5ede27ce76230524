// SPDX-License-Identifier: MIT
/* Sleep helper; the clock itself is inline in clock.h. */
#include <errno.h>

#include "common/clock.h"

void cmn_sleep_ns(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / VGPU_NSEC_PER_SEC),
		.tv_nsec = (long)(ns % VGPU_NSEC_PER_SEC),
	};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}
