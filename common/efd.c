// SPDX-License-Identifier: MIT
/* eventfd calls bounded whatever the other holder does (common/efd.h).
 *
 * A thread and the watchdog share the thread's slot. Its `since` is 0 outside a guarded
 * call, the call's start (CLOCK_MONOTONIC ns, odd) inside one, EFD_SENDING while the
 * watchdog signals the thread, and EFD_CUT after that. The thread stores its start, makes
 * the call, then swaps the start for 0 (CAS). The watchdog swaps a start older than the
 * bound, and at each later tick EFD_CUT, for EFD_SENDING (CAS), sends CMN_EFD_SIG and
 * stores EFD_CUT. The thread's CAS fails once the watchdog's has won: it then waits out
 * EFD_SENDING, swaps EFD_CUT for 0, after which no signal is sent, and makes one system
 * call, on whose return every signal sent, pending on the thread, has been taken. So no
 * signal outlives the call it was sent for, and no other system call of the thread fails
 * with EINTR because of one. The watchdog reads the clock before a slot, so a start it
 * finds old is never a later call's.
 *
 * The signal is installed without SA_RESTART: an eventfd write (or read) asleep when it
 * arrives returns EINTR. One taken in the instant before the call entered the kernel
 * interrupts nothing, hence a signal at every tick until the thread leaves. A call lasts
 * at most the bound plus a tick or two and the scheduling of the two threads, whatever the
 * other holder does to the counter or to the description's flags, provided CMN_EFD_SIG
 * stays unblocked in the thread (its first guarded call unblocks it) and this module's
 * handler stays installed.
 *
 * The watchdog sleeps on a futex after EFD_IDLE_TICKS ticks without a guarded call; a
 * thread that marks a call wakes it. That is Dekker's pattern on seq_cst atomics: the
 * thread stores its mark and then reads `efd_asleep`, the watchdog stores `efd_asleep` and
 * then reads every mark, so at least one sees the other. Under a stream of calls (a VF's
 * mailbox replies) the watchdog stays awake and no call pays for a wake. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/efd.h"
#include "common/list.h"

#define EFD_CUT		UINT64_MAX	/* since: signalled, still inside the call */
#define EFD_SENDING	(UINT64_MAX - 1)	/* since: the watchdog is signalling the thread */
#define EFD_IDLE_TICKS	50u		/* a second without guarded calls: the watchdog sleeps */

struct efd_slot {
	_Atomic uint64_t since;		/* see the file comment */
	volatile sig_atomic_t in_call;	/* from before the mark until every signal is taken */
	_Atomic uint64_t calls;		/* guarded calls made (the watchdog's idle count) */
	pthread_t thread;
	bool registered;		/* the owning thread's own */
	struct cmn_list link;		/* on efd_slots, under efd_lock */
};

static _Thread_local struct efd_slot efd_self;
/* A leaf lock, also taken in fork handlers: a plain mutex, kept out of lockdep, whose own
 * state another thread may be updating at the fork. */
static pthread_mutex_t efd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cmn_list efd_slots = { &efd_slots, &efd_slots };
static atomic_bool efd_running;		/* the watchdog runs (changed under efd_lock) */
static pthread_t efd_thread;		/* the watchdog, under efd_lock */
static atomic_bool efd_stopping;	/* the process exits: no watchdog from now on */
static pthread_once_t efd_once = PTHREAD_ONCE_INIT;
static int efd_once_err;
static pthread_key_t efd_key;		/* its destructor takes an exiting thread's slot out */
static _Atomic uint32_t efd_asleep;	/* futex word: 1 while the watchdog sleeps */
static _Atomic uint64_t efd_cuts, efd_strays;
static atomic_bool efd_no_nowait;	/* the kernel refuses RWF_NOWAIT on eventfd reads */
static atomic_bool efd_force_guarded;
static _Atomic uint64_t efd_test_pause_ns;

/* ---- the interrupted thread ----------------------------------------------------------- */

/* CMN_EFD_SIG: its arrival is all that matters (the call it cut returns EINTR). */
static void efd_on_signal(int sig)
{
	(void)sig;
	if (!efd_self.in_call)
		atomic_fetch_add(&efd_strays, 1);
}

/* Leave a guarded call that started at @t. */
static void efd_leave(struct efd_slot *s, uint64_t t)
{
	uint64_t cur = t;
	sigset_t set;

	if (cmn_likely(atomic_compare_exchange_strong(&s->since, &cur, 0)))
		return;		/* never signalled */
	for (cur = EFD_CUT; !atomic_compare_exchange_strong(&s->since, &cur, 0); cur = EFD_CUT)
		sched_yield();	/* EFD_SENDING: the watchdog is in pthread_kill() */
	/* No signal comes any more; those sent are pending here, and a system call's return
	 * takes them. */
	sigpending(&set);
}

/* ---- the watchdog ----------------------------------------------------------------------- */

/* Signal @s's thread, inside a call that started at @t or that was signalled before
 * (EFD_CUT), unless it has left it. */
static void efd_cut(struct efd_slot *s, uint64_t t)
{
	if (!atomic_compare_exchange_strong(&s->since, &t, EFD_SENDING))
		return;
	if (t != EFD_CUT)
		atomic_fetch_add(&efd_cuts, 1);
	/* The thread does not leave its call while EFD_SENDING: it is alive. */
	pthread_kill(s->thread, CMN_EFD_SIG);
	atomic_store(&s->since, EFD_CUT);
}

/* Signal every call marked longer than the bound at @now, and again every call signalled
 * before that is still going on. Whether any call is marked; *@calls: the guarded calls
 * the registered threads have made. */
static bool efd_scan(uint64_t now, uint64_t *calls)
{
	const uint64_t bound = CMN_EFD_BOUND_MS * VGPU_NSEC_PER_MSEC;
	bool busy = false;

	*calls = 0;
	pthread_mutex_lock(&efd_lock);
	for (struct cmn_list *l = efd_slots.next; l != &efd_slots; l = l->next) {
		struct efd_slot *s = cmn_container_of(l, struct efd_slot, link);
		uint64_t t = atomic_load(&s->since);

		*calls += atomic_load_explicit(&s->calls, memory_order_relaxed);
		busy |= t != 0;
		if (t == EFD_CUT || (t && t < EFD_SENDING && now > t && now - t >= bound))
			efd_cut(s, t);
	}
	pthread_mutex_unlock(&efd_lock);
	return busy;
}

/* Sleep until a thread marks a call or the process exits (at once if either happened). */
static void efd_sleep(void)
{
	uint64_t calls;

	atomic_store(&efd_asleep, 1);
	if (!atomic_load(&efd_stopping) && !efd_scan(cmn_now_ns(), &calls))
		syscall(SYS_futex, &efd_asleep, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
	atomic_store(&efd_asleep, 0);
}

/* Wake the watchdog if it sleeps (after a store it must see: a mark, efd_stopping). */
static void efd_wake(void)
{
	if (atomic_load(&efd_asleep) && atomic_exchange(&efd_asleep, 0))
		syscall(SYS_futex, &efd_asleep, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *efd_watch(void *arg)
{
	uint64_t calls, seen = 0;
	unsigned int idle = 0;

	(void)arg;
	pthread_setname_np(pthread_self(), "efd-watchdog");
	while (!atomic_load(&efd_stopping)) {
		bool busy = efd_scan(cmn_now_ns(), &calls);

		idle = busy || calls != seen ? 0 : idle + 1;
		seen = calls;
		if (idle >= EFD_IDLE_TICKS) {
			efd_sleep();
			idle = 0;
			continue;
		}
		cmn_sleep_ns(CMN_EFD_TICK_MS * VGPU_NSEC_PER_MSEC);
	}
	return NULL;
}

/* ---- setup ---------------------------------------------------------------------------- */

/* An exiting thread's slot leaves the list before its thread-local storage goes. */
static void efd_unregister(void *p)
{
	struct efd_slot *s = p;

	pthread_mutex_lock(&efd_lock);
	cmn_list_del(&s->link);
	pthread_mutex_unlock(&efd_lock);
	s->registered = false;
}

static void efd_fork_prepare(void)
{
	pthread_mutex_lock(&efd_lock);
}

static void efd_fork_parent(void)
{
	pthread_mutex_unlock(&efd_lock);
}

/* The child has the forking thread only: no watchdog (its first call starts one) and no
 * slot of another thread. */
static void efd_fork_child(void)
{
	cmn_list_init(&efd_slots);
	if (efd_self.registered)
		cmn_list_add(&efd_slots, &efd_self.link);
	atomic_store(&efd_running, false);
	atomic_store(&efd_asleep, 0);
	pthread_mutex_unlock(&efd_lock);
}

/* At exit: stop and join the watchdog, so that nothing of it is left (valgrind). A guarded
 * call after this fails with -ESHUTDOWN rather than run unwatched. */
static void efd_exit(void)
{
	bool running;

	pthread_mutex_lock(&efd_lock);
	atomic_store(&efd_stopping, true);
	running = atomic_load(&efd_running);
	atomic_store(&efd_running, false);
	pthread_mutex_unlock(&efd_lock);
	if (!running)
		return;
	efd_wake();
	pthread_join(efd_thread, NULL);
}

static void efd_init_once(void)
{
	/* No SA_RESTART: the call the signal cuts must fail with EINTR, not start again. */
	struct sigaction sa = { .sa_handler = efd_on_signal };
	int r;

	sigemptyset(&sa.sa_mask);
	if (sigaction(CMN_EFD_SIG, &sa, NULL)) {
		efd_once_err = -errno;
		return;
	}
	r = pthread_key_create(&efd_key, efd_unregister);
	if (!r)
		r = pthread_atfork(efd_fork_prepare, efd_fork_parent, efd_fork_child);
	if (!r && atexit(efd_exit))
		r = ENOMEM;
	efd_once_err = -r;
}

/* Start the watchdog unless it runs: 0 or -errno. */
static int efd_start(void)
{
	sigset_t all, old;
	int r = 0;

	pthread_once(&efd_once, efd_init_once);
	if (efd_once_err)
		return efd_once_err;
	pthread_mutex_lock(&efd_lock);
	if (atomic_load(&efd_stopping)) {
		r = -ESHUTDOWN;
	} else if (!atomic_load(&efd_running)) {
		/* None of the process's signals for it: they are the other threads' to take. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		r = -pthread_create(&efd_thread, NULL, efd_watch, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		atomic_store(&efd_running, !r);
	}
	pthread_mutex_unlock(&efd_lock);
	return r;
}

/* The calling thread's slot, registered and watched; NULL (*@err set) if no watchdog runs. */
static struct efd_slot *efd_slot(int *err)
{
	struct efd_slot *s = &efd_self;
	sigset_t set;

	if (cmn_likely(s->registered && atomic_load_explicit(&efd_running, memory_order_relaxed)))
		return s;
	*err = efd_start();
	if (*err)
		return NULL;
	if (s->registered)
		return s;
	/* The signal must reach this thread whatever mask it inherited. */
	sigemptyset(&set);
	sigaddset(&set, CMN_EFD_SIG);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	s->thread = pthread_self();
	pthread_mutex_lock(&efd_lock);
	cmn_list_add(&efd_slots, &s->link);
	pthread_mutex_unlock(&efd_lock);
	pthread_setspecific(efd_key, s);
	s->registered = true;
	return s;
}

/* ---- guarded calls ------------------------------------------------------------------------ */

/* Mark a call starting at @t, waking the watchdog if it sleeps. */
static void efd_arm(struct efd_slot *s, uint64_t t)
{
	atomic_store_explicit(&s->calls, atomic_load_explicit(&s->calls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_store(&s->since, t);
	efd_wake();
}

/* For tests: a thread preempted between its mark and its system call, for as long as
 * cmn_efd_test_pause() says; a signal meanwhile ends the pause and interrupts nothing. */
static void efd_pause(void)
{
	uint64_t ns = atomic_load(&efd_test_pause_ns);
	struct timespec ts = { .tv_sec = (time_t)(ns / VGPU_NSEC_PER_SEC),
			       .tv_nsec = (long)(ns % VGPU_NSEC_PER_SEC) };

	nanosleep(&ts, NULL);
}

/* An 8-byte write (@wr) or read of @fd, interrupted after the bound. */
static int efd_guarded(int fd, uint64_t *val, bool wr)
{
	int r = 0;
	struct efd_slot *s = efd_slot(&r);
	uint64_t t;
	ssize_t n;

	if (!s)
		return r;	/* not made at all rather than made unbounded */
	t = cmn_now_ns() | 1;
	s->in_call = 1;
	efd_arm(s, t);
	if (cmn_unlikely(atomic_load_explicit(&efd_test_pause_ns, memory_order_relaxed)))
		efd_pause();
	n = wr ? write(fd, val, sizeof(*val)) : read(fd, val, sizeof(*val));
	r = n == (ssize_t)sizeof(*val) ? 0 : n < 0 ? -errno : -EIO;
	efd_leave(s, t);
	s->in_call = 0;
	return r;
}

int cmn_efd_read(int fd, uint64_t *val)
{
	struct iovec iov = { .iov_base = val, .iov_len = sizeof(*val) };
	ssize_t n;

	if (atomic_load_explicit(&efd_force_guarded, memory_order_relaxed) ||
	    atomic_load_explicit(&efd_no_nowait, memory_order_relaxed))
		return efd_guarded(fd, val, false);
	n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
	if (n == (ssize_t)sizeof(*val))
		return 0;
	if (n >= 0)
		return -EIO;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return -errno;
	/* Before Linux 5.12 eventfd refuses RWF_NOWAIT: its reads are guarded instead. */
	atomic_store_explicit(&efd_no_nowait, true, memory_order_relaxed);
	return efd_guarded(fd, val, false);
}

int cmn_efd_write(int fd, uint64_t val)
{
	return efd_guarded(fd, &val, true);
}

void cmn_efd_stats(struct cmn_efd_stats *st)
{
	st->cuts = atomic_load(&efd_cuts);
	st->strays = atomic_load(&efd_strays);
}

void cmn_efd_force_guarded_reads(bool on)
{
	atomic_store(&efd_force_guarded, on);
}

void cmn_efd_test_pause(uint64_t ns)
{
	atomic_store(&efd_test_pause_ns, ns);
}
