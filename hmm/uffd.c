// SPDX-License-Identifier: MIT
/* hmm/uffd.c - the userfaultfd backends: one descriptor per mm with MISSING registration
 * of the managed regions (and of the staging areas, since UFFDIO_MOVE only moves into a
 * range registered with the descriptor doing it), the handler thread that serves faults
 * (thread mode) and reads unmap/remap/fork events (both modes), and the SIGBUS handler
 * of the in-thread mode, which chains to whoever had SIGBUS before for faults not ours. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
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

/* What this kernel gives: each capability is one bit; VGPU_HMM_CAPS can only take bits
 * away (see doc/hmm.md for which kernel gives what). */
#define CAP_UFFD	(1u << 0)	/* userfaultfd(2) works for this process */
#define CAP_EVENTS	(1u << 1)	/* UNMAP + REMAP + FORK events (4.11) */
#define CAP_SIGBUS	(1u << 2)	/* UFFD_FEATURE_SIGBUS (4.14) */
#define CAP_WP		(1u << 3)	/* UFFDIO_WRITEPROTECT of anonymous memory (5.7) */
#define CAP_MOVE	(1u << 4)	/* UFFDIO_MOVE (6.8) */
#define CAP_PROCMAP	(1u << 5)	/* PROCMAP_QUERY on /proc/self/maps (6.11) */
#define CAP_ALL		((1u << 6) - 1)
/* Debian 12 / RHEL 9 kernels: everything hmm/ uses below UFFDIO_MOVE. */
#define CAP_SET_OLD	(CAP_UFFD | CAP_EVENTS | CAP_SIGBUS | CAP_WP)

static const struct { const char *name; unsigned int bits; } cap_names[] = {
	{ "uffd", CAP_UFFD }, { "events", CAP_EVENTS }, { "sigbus", CAP_SIGBUS },
	{ "wp", CAP_WP }, { "move", CAP_MOVE }, { "procmap_query", CAP_PROCMAP },
	{ "all", CAP_ALL }, { "6.1", CAP_SET_OLD }, { "5.14", CAP_SET_OLD }, { "none", 0 },
};

/* Parse @spec (comma separated names or sets) into @mask; -EINVAL naming the bad word. */
static int caps_parse(const char *spec, unsigned int *mask, char *why, size_t whylen)
{
	const char *p = spec;

	*mask = 0;
	while (*p) {
		size_t n = strcspn(p, ",");
		bool found = false;

		for (size_t i = 0; i < sizeof(cap_names) / sizeof(cap_names[0]); i++) {
			if (strlen(cap_names[i].name) == n && !strncmp(p, cap_names[i].name, n)) {
				*mask |= cap_names[i].bits;
				found = true;
			}
		}
		if (!found && n) {
			snprintf(why, whylen, "VGPU_HMM_CAPS: unknown capability '%.*s'",
				 (int)(n > 32 ? 32 : n), p);
			return -EINVAL;
		}
		p += n + (p[n] == ',');
	}
	return 0;
}

/* PROCMAP_QUERY answers on this kernel (an ioctl of /proc/self/maps). */
static bool probe_procmap_query(void)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	bool ok;

	if (fd < 0)
		return false;
	ok = hmm_vma_query_works(fd);
	close(fd);
	return ok;
}

static unsigned int kernel_caps(char *why, size_t whylen)
{
	unsigned int caps = probe_procmap_query() ? CAP_PROCMAP : 0;
	uint64_t feat = 0;
	int fd = uffd_new();

	if (fd < 0) {
		FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
		int unpriv = -1;

		if (f) {
			if (fscanf(f, "%d", &unpriv) != 1)
				unpriv = -1;
			fclose(f);
		}
		snprintf(why, whylen, "userfaultfd: %s (uid %u, unprivileged_userfaultfd=%d)",
			 strerror(-fd), (unsigned int)geteuid(), unpriv);
		return caps;
	}
	/* features = 0 returns everything the kernel supports */
	if (uffd_api(fd, 0, &feat)) {
		snprintf(why, whylen, "UFFDIO_API failed");
		close(fd);
		return caps;
	}
	close(fd);
	caps |= CAP_UFFD;
	caps |= (feat & HMM_UFFD_EVENTS) == HMM_UFFD_EVENTS ? CAP_EVENTS : 0;
	caps |= feat & UFFD_FEATURE_SIGBUS ? CAP_SIGBUS : 0;
	caps |= feat & UFFD_FEATURE_PAGEFAULT_FLAG_WP ? CAP_WP : 0;
	caps |= feat & UFFD_FEATURE_MOVE ? CAP_MOVE : 0;
	return caps;
}

static struct hmm_uffd_caps caps_cached;
static pthread_once_t caps_once = PTHREAD_ONCE_INIT;

static void caps_init(void)
{
	struct hmm_uffd_caps *c = &caps_cached;
	const char *spec = getenv("VGPU_HMM_CAPS");
	unsigned int have = kernel_caps(c->why, sizeof(c->why)), mask = CAP_ALL;
	char why[sizeof(c->why)] = "";

	if (spec && !spec[0])
		spec = NULL;	/* set empty, as a shell's VAR= leaves it: no narrowing */

	if (spec && caps_parse(spec, &mask, c->why, sizeof(c->why))) {
		c->invalid = true;
		cmn_err("hmm: %s", c->why);
		return;
	}
	c->overridden = spec && (have & ~mask);
	have &= mask;
	if (!(have & CAP_UFFD))
		have &= CAP_PROCMAP;
	c->available = have & CAP_UFFD;
	c->events = have & CAP_EVENTS;
	c->sigbus = have & CAP_SIGBUS;
	c->wp = have & CAP_WP;
	c->move = have & CAP_MOVE;
	c->procmap_query = have & CAP_PROCMAP;
	if (c->why[0] && !c->overridden)
		return;		/* the kernel's own reason: no userfaultfd */
	if (!c->available)
		snprintf(why, sizeof(why), "no userfaultfd");
	else if (!c->events)
		snprintf(why, sizeof(why), "no userfaultfd UNMAP/REMAP/FORK events");
	else if (!c->move && !c->wp)
		snprintf(why, sizeof(why), "neither UFFDIO_MOVE nor write-protect");
	else if (!c->sigbus)
		snprintf(why, sizeof(why), "no UFFD_FEATURE_SIGBUS");
	if (c->overridden)
		snprintf(c->why, sizeof(c->why), "VGPU_HMM_CAPS=%.24s: %.50s", spec,
			 why[0] ? why : "fewer capabilities than the kernel's");
	else
		snprintf(c->why, sizeof(c->why), "%s", why);
}

void hmm_uffd_probe(struct hmm_uffd_caps *caps)
{
	pthread_once(&caps_once, caps_init);
	*caps = caps_cached;
}

int hmm_uffd_register(int uffd, uintptr_t start, size_t len, bool wp)
{
	struct uffdio_register reg = {
		.range = { .start = start, .len = len },
		.mode = UFFDIO_REGISTER_MODE_MISSING | (wp ? UFFDIO_REGISTER_MODE_WP : 0),
	};

	return ioctl(uffd, UFFDIO_REGISTER, &reg) ? -errno : 0;
}

int hmm_uffd_unregister(int uffd, uintptr_t start, size_t len)
{
	struct uffdio_range r = { .start = start, .len = len };

	return ioctl(uffd, UFFDIO_UNREGISTER, &r) ? -errno : 0;
}

/* The handler thread's own state: messages it read while in the middle of another. */
#define UFFD_LATER	64
struct uffd_monitor {
	struct hmm_mm *mm;
	unsigned int nr_later;
	struct uffd_msg later[UFFD_LATER];
};
static __thread struct uffd_monitor *uffd_self;	/* set in the handler thread only */

/* An ioctl failed with EAGAIN: an unmap/remap/fork event waits to be read (the kernel
 * refuses to change pages while mappings change), and only the handler thread reads
 * events. Elsewhere, wait for it. In the handler thread waiting would be for itself:
 * read what is there instead, handled after the message at hand, events first. The same
 * when the handler thread waits for a page another thread's migration has in flight: that
 * migration may itself wait for an event queued behind the one at hand. */
void hmm_uffd_relax(unsigned int *spins)
{
	struct uffd_monitor *m = uffd_self;
	ssize_t n;

	if (!m || m->nr_later == UFFD_LATER) {
		hmm_relax(spins);
		return;
	}
	n = read(m->mm->uffd, &m->later[m->nr_later],
		 (UFFD_LATER - m->nr_later) * sizeof(m->later[0]));
	if (n > 0)
		m->nr_later += (unsigned int)((size_t)n / sizeof(m->later[0]));
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
			unsigned int spins = 0;

			mv.move = 0;
			hmm_uffd_relax(&spins);
			continue;
		}
		return mv.move > 0 ? mv.move : -errno;
	}
}

long hmm_uffd_copy(int uffd, uintptr_t dst, const void *src, size_t len, bool wake)
{
	size_t done = 0;

	while (done < len) {
		struct uffdio_copy cp = {
			.dst = dst + done, .src = (uintptr_t)src + done, .len = len - done,
			.mode = wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE,
		};
		long cut = hmm_fail_check(HMM_FAIL_UFFD_COPY, cp.dst, cp.len);
		int err;

		if (cut < 0)
			return done ? (long)done : cut;
		if (cut > 0 && (uint64_t)cut < cp.len)
			cp.len = (uint64_t)cut;
		if (!ioctl(uffd, UFFDIO_COPY, &cp)) {
			done += cp.len;
			continue;
		}
		err = errno;
		/* Stopped partway (the kernel says EAGAIN whatever stopped it): go on from
		 * there, which reports the reason if it persists. */
		if (cp.copy > 0) {
			done += (size_t)cp.copy;
			continue;
		}
		if (err == EAGAIN) {	/* an unmap/remap event is being delivered */
			unsigned int spins = 0;

			hmm_uffd_relax(&spins);
			continue;
		}
		/* a page there already: no path maps a page coming back but the application
		 * itself (it wins) */
		if (err == EEXIST) {
			done += HMM_PAGE_SIZE;
			continue;
		}
		return done ? (long)done : -err;
	}
	return (long)len;
}

int hmm_uffd_zeropage(int uffd, uintptr_t dst, size_t len, bool wake)
{
	struct uffdio_zeropage z = {
		.range = { .start = dst, .len = len },
		.mode = wake ? 0 : UFFDIO_ZEROPAGE_MODE_DONTWAKE,
	};

	if (!ioctl(uffd, UFFDIO_ZEROPAGE, &z))
		return 0;
	if (errno == EAGAIN && z.zeropage <= 0) {
		/* The pending event may move a device page here (a REMAP): a zero page
		 * filled before it is handled would take its place. The caller lets the
		 * access retry, which finds the event handled. */
		unsigned int spins = 0;

		hmm_uffd_relax(&spins);
		return -EBUSY;
	}
	return -errno;
}

int hmm_uffd_wp(int uffd, uintptr_t start, size_t len, bool protect, bool wake)
{
	struct uffdio_writeprotect wp = {
		.range = { .start = start, .len = len },
		.mode = (protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0) |
			(wake || protect ? 0 : UFFDIO_WRITEPROTECT_MODE_DONTWAKE),
	};

	for (;;) {
		if (!ioctl(uffd, UFFDIO_WRITEPROTECT, &wp))
			return 0;
		/* EAGAIN: an unmap/remap event is being delivered */
		if (errno == EAGAIN) {
			unsigned int spins = 0;

			hmm_uffd_relax(&spins);
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

/* A SIGBUS fault waits (by retrying) while @mm has events queued or being handled: it may
 * depend on one (a REMAP moving device pages to its address, or creating its region).
 * Still in flight, so that @mm stays: one pause, then the access comes back here. */
static void sigbus_event_wait(struct hmm_mm *mm)
{
	unsigned int spins = 64;	/* hmm_relax(): yield at once */

	atomic_fetch_add_explicit(&mm->c_event_waits, 1, memory_order_relaxed);
	hmm_relax(&spins);
}

static void hmm_sigbus(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	uintptr_t addr = (uintptr_t)si->si_addr;
	struct hmm_region *r;
	struct hmm_mm *mm = NULL;
	bool ours = false;

	atomic_fetch_add(&hmm_handlers_inflight, 1);
	r = si->si_code == BUS_ADRERR ? hmm_region_find(addr) : NULL;
	if (r && r->mm->opts.backend == HMM_BACKEND_UFFD_SIGBUS) {
		/* Resolved or not, returning retries the access: an unresolved one comes
		 * back here, a resolved one proceeds. While events are queued or being
		 * handled the page's state may be about to change: a fault now would
		 * zero-fill a page a REMAP is about to mark as on the device. */
		if (hmm_mm_events_pending(r->mm))
			sigbus_event_wait(r->mm);
		else
			hmm_cpu_fault(r->mm, r, addr & ~(HMM_PAGE_SIZE - 1), false, false);
		atomic_fetch_sub(&hmm_handlers_inflight, 1);
		errno = saved_errno;
		return;
	}
	/* an address an mremap just moved: its region appears once the event is handled;
	 * with no event to wait for, a registered page outside every region */
	if (!r && si->si_code == BUS_ADRERR) {
		mm = hmm_events_pending();
		if (mm)
			sigbus_event_wait(mm);
		else
			ours = hmm_sigbus_fill_unmanaged(addr & ~(HMM_PAGE_SIZE - 1));
	}
	atomic_fetch_sub(&hmm_handlers_inflight, 1);
	errno = saved_errno;
	if (!mm && !ours)
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

/* @n messages read together: the events first. The kernel hands out page faults before
 * events, but a fault read with an event may depend on it: a fault at the address a REMAP
 * moved device pages to must find them there, not fill a zero page. */
static void uffd_dispatch_batch(struct hmm_mm *mm, const struct uffd_msg *msgs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
			uffd_dispatch(mm, &msgs[i]);
	for (size_t i = 0; i < n; i++)
		if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
			uffd_dispatch(mm, &msgs[i]);
}

static void *uffd_thread(void *arg)
{
	struct hmm_mm *mm = arg;
	struct pollfd pfd[2] = { { .fd = mm->uffd, .events = POLLIN },
				 { .fd = mm->stop_fd, .events = POLLIN } };
	struct uffd_monitor self = { .mm = mm };
	struct uffd_msg msgs[UFFD_LATER];

	uffd_self = &self;

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			cmn_err("hmm: uffd poll: %s", strerror(errno));
			break;
		}
		if (pfd[1].revents)
			break;
		hmm_race_window(HMM_RACE_MONITOR_WAKE, 0);
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
		uffd_dispatch_batch(mm, msgs, (size_t)n / sizeof(msgs[0]));
		while (self.nr_later) {
			size_t k = self.nr_later;

			memcpy(msgs, self.later, k * sizeof(msgs[0]));
			self.nr_later = 0;
			uffd_dispatch_batch(mm, msgs, k);
		}
		atomic_store(&mm->monitor_busy, false);
	}
	return NULL;
}

int hmm_uffd_open(struct hmm_mm *mm)
{
	struct hmm_uffd_caps caps;
	uint64_t want = HMM_UFFD_EVENTS;
	uint64_t have = 0;
	int ret;

	hmm_uffd_probe(&caps);
	if (!caps.available)
		return -ENOSYS;
	if (!caps.events || (!caps.move && !caps.wp) ||
	    (mm->opts.backend == HMM_BACKEND_UFFD_SIGBUS && !caps.sigbus))
		return -EOPNOTSUPP;
	/* isolation for a migration: UFFDIO_MOVE where there is one, else write-protect */
	want |= caps.move ? UFFD_FEATURE_MOVE : UFFD_FEATURE_PAGEFAULT_FLAG_WP;
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
	mm->has_move = caps.move;
	mm->has_wp = !caps.move;
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
