/* SPDX-License-Identifier: MIT */
/* common/efd.h - eventfd reads and writes that return whatever the other holder does.
 *
 * An eventfd handed to another process (a guest's ivshmem vector, the device's kick
 * eventfd a guest gets a copy of) shares one open file description with us: the other side
 * can clear O_NONBLOCK on it, then keep the counter at 0 (a read of ours sleeps until it
 * writes) or at 0xfffffffffffffffe (a write of ours sleeps until it reads). Every read and
 * write of such an eventfd goes through these functions.
 *
 * A read never sleeps: preadv2(RWF_NOWAIT), which eventfd honours since Linux 5.12. A
 * write cannot be asked not to sleep (eventfd's write refuses RWF_NOWAIT), so it is guarded:
 * the thread marks itself in a guarded call, and a watchdog thread, awake while any thread
 * used a guarded call in the last second, interrupts a call marked longer than
 * CMN_EFD_BOUND_MS with CMN_EFD_SIG (installed without SA_RESTART), and again at every tick
 * until the call returns: the write fails with EINTR and its notification is lost, which
 * only a holder that filled the counter itself can cause. On kernels without RWF_NOWAIT a
 * read is guarded the same way. The signal only reaches a thread inside a guarded call:
 * the thread does not leave it before every signal sent to it has arrived (efd.c). The
 * signal stays this module's, unblocked in every thread that makes guarded calls: a
 * thread's first call unblocks it there. The process's first call starts the watchdog (a
 * forked child's its own); exit() joins it. Costs on the fast path: a clock read (vDSO), a
 * few atomic operations and the write itself. */
#ifndef VGPU_COMMON_EFD_H
#define VGPU_COMMON_EFD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#define CMN_EFD_BOUND_MS	50u		/* a guarded call is cut after this long */
#define CMN_EFD_TICK_MS		20u		/* the watchdog's period while awake */
#define CMN_EFD_SIG		(SIGRTMIN + 3)	/* this module's: cuts a guarded call */

/* What the watchdog did since the process started. */
struct cmn_efd_stats {
	uint64_t cuts;		/* guarded calls interrupted */
	uint64_t strays;	/* signals that found their thread outside a guarded call: 0 */
};

/* Read and reset @fd's counter into *@val without sleeping: 0, -EAGAIN (it was 0), or -errno. */
int cmn_efd_read(int fd, uint64_t *val);
/* Add @val to @fd's counter within about CMN_EFD_BOUND_MS: 0, -EAGAIN (full, non-blocking),
 * -EINTR (full and blocking: the watchdog cut the write, @val is not added) or -errno
 * (-ESHUTDOWN: called during exit(), after the watchdog stopped; nothing written). */
int cmn_efd_write(int fd, uint64_t val);
/* The watchdog's counts so far. */
void cmn_efd_stats(struct cmn_efd_stats *st);
/* For tests: read as on a kernel without RWF_NOWAIT for eventfd (@on) or as this one. */
void cmn_efd_force_guarded_reads(bool on);
/* For tests: pause @ns (0: not) in every guarded call before its system call, as a thread
 * preempted there would. */
void cmn_efd_test_pause(uint64_t ns);

#endif
