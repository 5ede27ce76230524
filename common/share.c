// SPDX-License-Identifier: MIT
/* CPU priority by share (see share.h). */
#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/share.h"

int cmn_share_nice(uint64_t served, uint64_t total, uint32_t active)
{
	/* served / total <= LIGHT/1000 of 1/active, in integers */
	if (active < 2 || served * active * 1000 <= total * CMN_SHARE_LIGHT)
		return 0;
	return CMN_SHARE_NICE_BUSY;
}

/* The plane's slot for window @id, taken over from an older window if need be. */
static struct cmn_share_window *share_slot(struct cmn_share_plane *p, uint64_t id)
{
	struct cmn_share_window *w = &p->w[id & 1];
	uint64_t old = atomic_load(&w->id);

	/* The thread that moves the slot on clears it; a request of the old window counted
	 * in between lands in the new one, which a share's estimate can bear. */
	if (old != id && atomic_compare_exchange_strong(&w->id, &old, id)) {
		atomic_store(&w->total, 0);
		atomic_store(&w->active, 0);
	}
	return w;
}

int cmn_share_count(struct cmn_share_plane *p, struct cmn_share_user *u, uint64_t win)
{
	struct cmn_share_window *w = share_slot(p, win);

	if (win != u->win || !u->served) {
		struct cmn_share_window *last = &p->w[(win - 1) & 1];

		/* Served in the last window: weigh it against everyone's, else it is light. */
		u->nice = 0;
		if (u->served && u->win == win - 1 && atomic_load(&last->id) == win - 1)
			u->nice = cmn_share_nice(u->served, atomic_load(&last->total),
						 atomic_load(&last->active));
		u->win = win;
		u->served = 0;
		atomic_fetch_add(&w->active, 1);
	}
	u->served++;
	atomic_fetch_add(&w->total, 1);
	return u->nice;
}

/* Whether the calling thread's effective set holds CAP_SYS_NICE. Tested, not inferred from
 * the uid: root under a unit whose CapabilityBoundingSet= lacks it may raise a nice but never
 * lower it again. */
static bool share_cap_sys_nice(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct c[_LINUX_CAPABILITY_U32S_3];

	memset(c, 0, sizeof(c));
	if (syscall(SYS_capget, &h, c))
		return false;
	return c[CAP_TO_INDEX(CAP_SYS_NICE)].effective & CAP_TO_MASK(CAP_SYS_NICE);
}

bool cmn_share_may_renice(struct cmn_share_plane *p, const char *who)
{
	int r = atomic_load_explicit(&p->renice, memory_order_relaxed);
	struct rlimit rl;

	if (r)
		return r > 0;
	r = share_cap_sys_nice() || (!getrlimit(RLIMIT_NICE, &rl) && rl.rlim_cur >= 20) ? 1 : -1;
	if (r < 0)
		cmn_info("%s: no CAP_SYS_NICE or RLIMIT_NICE: all run at nice 0 (no CPU priority "
			 "by share)", who);
	atomic_store_explicit(&p->renice, r, memory_order_relaxed);
	return r > 0;
}

/* A refused lowering (EACCES) was logged: once per process is enough to say why. */
static atomic_bool share_lower_warned;

int cmn_share_set_nice(int nice, const char *who)
{
	/* PRIO_PROCESS with 0 is the calling thread on Linux. */
	int r = setpriority(PRIO_PROCESS, 0, nice) ? -errno : 0;

	/* Only a lowering is refused with EACCES: that thread now stays behind the others
	 * until its nice can be lowered, so say it where it is seen. */
	if (r == -EACCES && !atomic_exchange(&share_lower_warned, true))
		cmn_warn("%s: nice %d: %s (lowering a nice needs CAP_SYS_NICE or RLIMIT_NICE "
			 "of 20; logged once)", who, nice, cmn_strerror(r));
	else if (r)
		cmn_dbg("%s: nice %d: %s", who, nice, cmn_strerror(r));
	return r;
}

/* The kernel's struct sched_attr, first version (glibc has no wrapper, and the kernel's
 * header clashes with glibc's struct sched_param). */
struct share_sched_attr {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
};

int cmn_share_set_slice(uint64_t slice_ns, const char *who)
{
	struct share_sched_attr a;
	int r;

	/* Read first: sched_setattr sets the nice and policy too, and must keep both. */
	memset(&a, 0, sizeof(a));
	r = syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) ? -errno : 0;
	if (!r) {
		a.size = sizeof(a);
		a.sched_flags = 0;
		a.sched_runtime = slice_ns;
		r = syscall(SYS_sched_setattr, 0, &a, 0) ? -errno : 0;
	}
	if (r)
		cmn_dbg("%s: scheduler slice %llu ns: %s", who, (unsigned long long)slice_ns,
			cmn_strerror(r));
	return r;
}
