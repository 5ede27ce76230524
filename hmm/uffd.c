/* hmm/uffd.c - the userfaultfd backends: one descriptor per mm with MISSING registration
 * of the managed regions (and of the staging areas, since UFFDIO_MOVE only moves into a
 * range registered with the descriptor doing it), the handler thread that serves faults
 * (thread mode) and reads unmap/remap/fork events (both modes), and the SIGBUS handler
 * of the in-thread mode, which chains to whoever had SIGBUS before for faults not ours. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "hmm/hmm_internal.h"

/* Debian 12's headers predate UFFDIO_MOVE (Linux 6.8). */
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE		(1ull << 16)
#endif
#ifndef _UFFDIO_MOVE
#define _UFFDIO_MOVE			(0x05)
struct uffdio_move {
	__u64 dst, src, len;
#define UFFDIO_MOVE_MODE_DONTWAKE		((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES	((__u64)1 << 1)
	__u64 mode;
	__s64 move;
};
#define UFFDIO_MOVE	_IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif

#define HMM_UFFD_EVENTS	(UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMAP | \
			 UFFD_FEATURE_EVENT_FORK)

static int uffd_new(void)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	return fd < 0 ? -errno : fd;
}

/* UFFDIO_API with @want; 0 or -EOPNOTSUPP naming what is missing in @why. */
static int uffd_api(int fd, uint64_t want, uint64_t *have)
{
	struct uffdio_api api = { .api = UFFD_API, .features = want };

	if (ioctl(fd, UFFDIO_API, &api))
		return -errno;
	if (have)
		*have = api.features;
	return 0;
}

void hmm_uffd_probe(struct hmm_uffd_caps *caps)
{
	uint64_t feat = 0;
	int fd;

	memset(caps, 0, sizeof(*caps));
	fd = uffd_new();
	if (fd < 0) {
		FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
		int unpriv = -1;

		if (f) {
			if (fscanf(f, "%d", &unpriv) != 1)
				unpriv = -1;
			fclose(f);
		}
		snprintf(caps->why, sizeof(caps->why),
			 "userfaultfd: %s (uid %u, unprivileged_userfaultfd=%d)",
			 strerror(-fd), (unsigned int)geteuid(), unpriv);
		return;
	}
	/* features = 0 returns everything the kernel supports */
	if (uffd_api(fd, 0, &feat)) {
		snprintf(caps->why, sizeof(caps->why), "UFFDIO_API failed");
		close(fd);
		return;
	}
	close(fd);
	caps->available = true;
	caps->sigbus = feat & UFFD_FEATURE_SIGBUS;
	caps->move = feat & UFFD_FEATURE_MOVE;
	caps->events = (feat & HMM_UFFD_EVENTS) == HMM_UFFD_EVENTS;
	if (!caps->move)
		snprintf(caps->why, sizeof(caps->why), "kernel lacks UFFD_FEATURE_MOVE (Linux < 6.8)");
	else if (!caps->sigbus)
		snprintf(caps->why, sizeof(caps->why), "kernel lacks UFFD_FEATURE_SIGBUS");
}

int hmm_uffd_register(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_register reg = {
		.range = { .start = start, .len = len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};

	return ioctl(uffd, UFFDIO_REGISTER, &reg) ? -errno : 0;
}

int hmm_uffd_unregister(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_range r = { .start = start, .len = len };

	return ioctl(uffd, UFFDIO_UNREGISTER, &r) ? -errno : 0;
}

long hmm_uffd_move(int uffd, uintptr_t dst, uintptr_t src, size_t len, bool allow_holes)
{
	struct uffdio_move mv = {
		.dst = dst, .src = src, .len = len,
		.mode = UFFDIO_MOVE_MODE_DONTWAKE |
			(allow_holes ? UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES : 0),
	};

	for (;;) {
		if (!ioctl(uffd, UFFDIO_MOVE, &mv))
			return mv.move;
		/* EAGAIN: an unmap/remap event is being delivered, or a partial move */
		if (errno == EAGAIN && mv.move <= 0) {
			mv.move = 0;
			unsigned int spins = 0;

			hmm_relax(&spins);
			continue;
		}
		return mv.move > 0 ? mv.move : -errno;
	}
}

long hmm_uffd_copy(int uffd, uintptr_t dst, const void *src, size_t len, bool wake)
{
	struct uffdio_copy cp = {
		.dst = dst, .src = (uintptr_t)src, .len = len,
		.mode = wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE,
	};

	for (;;) {
		if (!ioctl(uffd, UFFDIO_COPY, &cp))
			return cp.copy;
		if (errno == EAGAIN && cp.copy <= 0) {
			unsigned int spins = 0;

			cp.copy = 0;
			hmm_relax(&spins);
			continue;
		}
		return cp.copy > 0 ? cp.copy : -errno;
	}
}

int hmm_uffd_zeropage(int uffd, uintptr_t dst, size_t len, bool wake)
{
	struct uffdio_zeropage z = {
		.range = { .start = dst, .len = len },
		.mode = wake ? 0 : UFFDIO_ZEROPAGE_MODE_DONTWAKE,
	};

	for (;;) {
		if (!ioctl(uffd, UFFDIO_ZEROPAGE, &z))
			return 0;
		if (errno == EAGAIN && z.zeropage <= 0) {
			unsigned int spins = 0;

			z.zeropage = 0;
			hmm_relax(&spins);
			continue;
		}
		return -errno;
	}
}

void hmm_uffd_wake(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_range r = { .start = start, .len = len };

	ioctl(uffd, UFFDIO_WAKE, &r);
}

/* ---- SIGBUS (in-thread) mode ------------------------------------------------------- */

static struct sigaction old_sigbus;
static struct cmn_mutex sigbus_lock = CMN_MUTEX_INITIALIZER("hmm sigbus_lock");

/* Hand a SIGBUS that is not ours to the previous disposition (ASan's, a program's). */
static void sigbus_chain(int sig, siginfo_t *si, void *uc)
{
	if (old_sigbus.sa_flags & SA_SIGINFO) {
		old_sigbus.sa_sigaction(sig, si, uc);
		return;
	}
	if (old_sigbus.sa_handler == SIG_DFL || old_sigbus.sa_handler == SIG_IGN) {
		/* the access is retried on return and dies with the default action */
		struct sigaction dfl = { .sa_handler = SIG_DFL };

		sigaction(sig, &dfl, NULL);
		return;
	}
	old_sigbus.sa_handler(sig);
}

static void hmm_sigbus(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	uintptr_t addr = (uintptr_t)si->si_addr;
	struct hmm_region *r;

	atomic_fetch_add(&hmm_handlers_inflight, 1);
	r = si->si_code == BUS_ADRERR ? hmm_region_find(addr) : NULL;
	if (r && r->mm->opts.backend == HMM_BACKEND_UFFD_SIGBUS) {
		/* Resolved or not, returning retries the access: an unresolved one comes
		 * back here, a resolved one proceeds. */
		hmm_cpu_fault(r->mm, r, addr & ~(HMM_PAGE_SIZE - 1), false, false);
		atomic_fetch_sub(&hmm_handlers_inflight, 1);
		errno = saved_errno;
		return;
	}
	atomic_fetch_sub(&hmm_handlers_inflight, 1);
	/* an address an mremap just moved: its region appears once the event is handled */
	if (!r && si->si_code == BUS_ADRERR && hmm_events_pending()) {
		errno = saved_errno;
		return;		/* retry the access */
	}
	errno = saved_errno;
	sigbus_chain(sig, si, uc);
}

static int sigbus_install(void)
{
	struct sigaction sa = { .sa_sigaction = hmm_sigbus,
				.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER };
	int ret = 0;

	struct sigaction cur;

	cmn_mutex_lock(&sigbus_lock);
	/* someone (a test harness, a runtime) may have replaced ours since: chain to them */
	if (sigaction(SIGBUS, NULL, &cur) == 0 &&
	    (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != hmm_sigbus)) {
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &old_sigbus))
			ret = -errno;
	}
	cmn_mutex_unlock(&sigbus_lock);
	return ret;
}

/* ---- the handler thread --------------------------------------------------------------- */

void hmm_uffd_event_unmap(struct hmm_mm *mm, uintptr_t start, uintptr_t end);
void hmm_uffd_event_remap(struct hmm_mm *mm, uintptr_t from, uintptr_t to, size_t len);
void hmm_uffd_event_fork(struct hmm_mm *mm);

static void uffd_pagefault(struct hmm_mm *mm, const struct uffd_msg *msg)
{
	uintptr_t addr = msg->arg.pagefault.address & ~(HMM_PAGE_SIZE - 1);
	struct hmm_region *r;

	atomic_fetch_add(&hmm_handlers_inflight, 1);
	r = hmm_region_find(addr);
	if (r && r->mm == mm) {
		hmm_cpu_fault(mm, r, addr, true, true);
	} else {
		/* a staging page or a range whose region is gone: plain zero fill */
		int ret = hmm_uffd_zeropage(mm->uffd, addr, HMM_PAGE_SIZE, true);

		if (ret)
			hmm_uffd_wake(mm->uffd, addr, HMM_PAGE_SIZE);
	}
	atomic_fetch_sub(&hmm_handlers_inflight, 1);
}

static void uffd_dispatch(struct hmm_mm *mm, const struct uffd_msg *msg)
{
	switch (msg->event) {
	case UFFD_EVENT_PAGEFAULT:
		uffd_pagefault(mm, msg);
		break;
	case UFFD_EVENT_UNMAP:
		hmm_uffd_event_unmap(mm, msg->arg.remove.start, msg->arg.remove.end);
		break;
	case UFFD_EVENT_REMAP:
		hmm_uffd_event_remap(mm, msg->arg.remap.from, msg->arg.remap.to,
				     msg->arg.remap.len);
		break;
	case UFFD_EVENT_FORK:
		/* The child's descriptor: closing it drops the child's registrations, so the
		 * child runs on plain memory (all device pages came back before the fork). */
		close((int)msg->arg.fork.ufd);
		hmm_uffd_event_fork(mm);
		break;
	default:
		break;
	}
}

static void *uffd_thread(void *arg)
{
	struct hmm_mm *mm = arg;
	struct pollfd pfd[2] = { { .fd = mm->uffd, .events = POLLIN },
				 { .fd = mm->stop_fd, .events = POLLIN } };
	struct uffd_msg msgs[16];

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			cmn_err("hmm: uffd poll: %s", strerror(errno));
			break;
		}
		if (pfd[1].revents)
			break;
		/* Busy from before the read: the thread that caused an event resumes once it
		 * is read, and must find it handled or being handled (hmm_mm_sync_events). */
		atomic_store(&mm->monitor_busy, true);
		ssize_t n = read(mm->uffd, msgs, sizeof(msgs));

		if (n < 0) {
			atomic_store(&mm->monitor_busy, false);
			if (errno == EAGAIN || errno == EINTR)
				continue;
			cmn_err("hmm: uffd read: %s", strerror(errno));
			break;
		}
		for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++)
			uffd_dispatch(mm, &msgs[i]);
		atomic_store(&mm->monitor_busy, false);
	}
	return NULL;
}

int hmm_uffd_open(struct hmm_mm *mm)
{
	uint64_t want = HMM_UFFD_EVENTS | UFFD_FEATURE_MOVE;
	uint64_t have = 0;
	int ret;

	if (mm->opts.backend == HMM_BACKEND_UFFD_SIGBUS)
		want |= UFFD_FEATURE_SIGBUS;
	ret = uffd_new();
	if (ret < 0)
		return ret == -EPERM ? -ENOSYS : ret;
	mm->uffd = ret;
	ret = uffd_api(mm->uffd, want, &have);
	if (ret) {
		ret = ret == -EINVAL ? -EOPNOTSUPP : ret;
		goto close_uffd;
	}
	mm->has_move = true;
	if (mm->opts.backend == HMM_BACKEND_UFFD_SIGBUS) {
		ret = sigbus_install();
		if (ret)
			goto close_uffd;
	}
	mm->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (mm->stop_fd < 0) {
		ret = -errno;
		goto close_uffd;
	}
	/* Events need a reader in both modes: the thread causing one waits until it is read. */
	ret = -pthread_create(&mm->thread, NULL, uffd_thread, mm);
	if (ret)
		goto close_stop;
	mm->thread_started = true;
	return 0;
close_stop:
	close(mm->stop_fd);
close_uffd:
	close(mm->uffd);
	mm->uffd = -1;
	return ret;
}

void hmm_uffd_close(struct hmm_mm *mm)
{
	if (mm->thread_started) {
		uint64_t one = 1;

		if (write(mm->stop_fd, &one, sizeof(one)) != sizeof(one))
			cmn_err("hmm: cannot stop the uffd thread");
		pthread_join(mm->thread, NULL);
		mm->thread_started = false;
	}
	if (mm->stop_fd >= 0)
		close(mm->stop_fd);
	if (mm->uffd >= 0)
		close(mm->uffd);
	mm->uffd = mm->stop_fd = -1;
}
