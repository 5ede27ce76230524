/* SPDX-License-Identifier: MIT */
/* common/clock.h - monotonic time in nanoseconds, and deadlines built on it. */
#ifndef VGPU_COMMON_CLOCK_H
#define VGPU_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#define VGPU_NSEC_PER_USEC 1000ull
#define VGPU_NSEC_PER_MSEC 1000000ull
#define VGPU_NSEC_PER_SEC  1000000000ull

/* CLOCK_MONOTONIC in ns: never jumps with wall-clock changes. */
static inline uint64_t cmn_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * VGPU_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* Deadline @timeout_ns from now; UINT64_MAX (never) if it would overflow. */
static inline uint64_t cmn_deadline_ns(uint64_t timeout_ns)
{
	uint64_t now = cmn_now_ns();

	return timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
}

/* True once @deadline has passed. */
static inline int cmn_deadline_passed(uint64_t deadline)
{
	return cmn_now_ns() >= deadline;
}

/* Sleep @ns (restarting after signals). */
void cmn_sleep_ns(uint64_t ns);

/* CPU-relax hint for spin loops. */
static inline void cmn_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
