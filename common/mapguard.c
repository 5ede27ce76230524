// SPDX-License-Identifier: MIT
/* Guarded shared file mappings (common/mapguard.h).
 *
 * The handler runs on the thread whose access faulted, at any point of its code: it only
 * reads the slot table (each slot published with release stores, a freed one cleared
 * first) and makes async-signal-safe calls (fstat, ftruncate, mmap, write). Growing the
 * file back makes the access that faulted succeed when it is retried on return; a guest
 * that keeps shrinking the file could make that retry fault again and again, so after
 * CMN_MAPGUARD_REPAIRS repairs a faulting page is replaced by a private zero page, which
 * no truncation reaches. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mapguard.h"

struct mg_slot {
	_Atomic uintptr_t start;	/* 0: free */
	_Atomic size_t len;
	int fd;				/* our duplicate */
	uint64_t file_size;
	unsigned int tag;
	_Atomic unsigned int repairs;
};

static struct mg_slot mg_slots[CMN_MAPGUARD_SLOTS];
static _Atomic uint64_t mg_hits[CMN_MAPGUARD_TAGS];
static _Atomic int mg_notify = -1;
static struct sigaction mg_old;
static _Atomic uint8_t mg_busy[CMN_MAPGUARD_SLOTS];	/* claimed with a CAS */
static uintptr_t mg_page = 4096;			/* set at init: sysconf() is not signal-safe */

static struct mg_slot *mg_find(uintptr_t a)
{
	for (unsigned int i = 0; i < CMN_MAPGUARD_SLOTS; i++) {
		struct mg_slot *s = &mg_slots[i];
		uintptr_t start = atomic_load_explicit(&s->start, memory_order_acquire);

		if (start && a >= start && a - start < atomic_load_explicit(&s->len,
									   memory_order_acquire))
			return s;
	}
	return NULL;
}

/* Repair the fault at @a in @s: grow the file back, or past the budget map a zero page. */
static void mg_repair(struct mg_slot *s, uintptr_t a)
{
	struct stat st;
	int efd;

	if (atomic_fetch_add(&s->repairs, 1) < CMN_MAPGUARD_REPAIRS &&
	    !fstat(s->fd, &st) && (uint64_t)st.st_size < s->file_size &&
	    !ftruncate(s->fd, (off_t)s->file_size)) {
		/* the retried access reads the hole as zeros */
	} else {
		mmap((void *)(a & ~(mg_page - 1)), mg_page, PROT_READ | PROT_WRITE,
		     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	atomic_fetch_add(&mg_hits[s->tag], 1);
	efd = atomic_load(&mg_notify);
	if (efd >= 0) {
		uint64_t one = 1;
		ssize_t n = write(efd, &one, sizeof(one));

		(void)n;
	}
}

/* Another SIGBUS: what was there before us decides (by default the process ends). */
static void mg_chain(int sig, siginfo_t *si, void *uc)
{
	if (mg_old.sa_flags & SA_SIGINFO && mg_old.sa_sigaction) {
		mg_old.sa_sigaction(sig, si, uc);
		return;
	}
	if (mg_old.sa_handler != SIG_DFL && mg_old.sa_handler != SIG_IGN) {
		mg_old.sa_handler(sig);
		return;
	}
	/* Returning re-runs the access, which faults again with the default action. */
	signal(SIGBUS, SIG_DFL);
}

static void mg_handler(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	struct mg_slot *s = si->si_code == BUS_ADRERR ? mg_find((uintptr_t)si->si_addr) : NULL;

	if (s)
		mg_repair(s, (uintptr_t)si->si_addr);
	else
		mg_chain(sig, si, uc);
	errno = saved;
}

int cmn_mapguard_init(int notify_fd)
{
	struct sigaction sa, cur;

	atomic_store(&mg_notify, notify_fd);
	if (sigaction(SIGBUS, NULL, &cur))
		return -errno;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == mg_handler)
		return 0;
	mg_page = (uintptr_t)sysconf(_SC_PAGESIZE);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = mg_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGBUS, &sa, &mg_old) ? -errno : 0;
}

int cmn_mapguard_add(void *addr, size_t len, int fd, uint64_t file_size, unsigned int tag)
{
	int dfd;

	if (!addr || !len || fd < 0 || tag >= CMN_MAPGUARD_TAGS)
		return -EINVAL;
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	for (unsigned int i = 0; i < CMN_MAPGUARD_SLOTS; i++) {
		struct mg_slot *s = &mg_slots[i];
		uint8_t no = 0;

		if (!atomic_compare_exchange_strong(&mg_busy[i], &no, 1))
			continue;
		s->fd = dfd;
		s->file_size = file_size;
		s->tag = tag;
		atomic_store(&s->repairs, 0);
		atomic_store_explicit(&s->len, len, memory_order_release);
		atomic_store_explicit(&s->start, (uintptr_t)addr, memory_order_release);
		return (int)i;
	}
	close(dfd);
	return -ENOSPC;
}

void cmn_mapguard_del(int id)
{
	struct mg_slot *s;

	if (id < 0 || (unsigned int)id >= CMN_MAPGUARD_SLOTS)
		return;
	s = &mg_slots[id];
	atomic_store_explicit(&s->start, 0, memory_order_release);
	atomic_store_explicit(&s->len, 0, memory_order_release);
	close(s->fd);
	s->fd = -1;
	atomic_store(&mg_busy[id], 0);
}

uint64_t cmn_mapguard_take(unsigned int tag)
{
	return tag < CMN_MAPGUARD_TAGS ? atomic_exchange(&mg_hits[tag], 0) : 0;
}
