// SPDX-License-Identifier: MIT
/* hmm/mprotect.c - the mprotect+SIGSEGV backend: a device-resident page keeps its system
 * page, made PROT_NONE; the thread that touches it takes SIGSEGV and runs the one
 * migrate-back hook (hmm_cpu_fault) in its own handler. The same handler gives back
 * device-exclusive pages (hmm/exclusive.c) with every backend. No userfaultfd is involved, so
 * this works on shared memfd and device (BAR) mappings, which is what a guest inside a VM
 * has. The data coming back is written through a second view (an alias mapping, or
 * /proc/self/mem for private pages, whose FOLL_FORCE write ignores PROT_NONE) before the
 * page is made accessible: no other thread can read the page before its data is there.
 * Everything on the fault path is async-signal-safe: atomics and system calls. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hmm/hmm_internal.h"

/* A fault on a page in system state that repeats this often on one address is not ours
 * (the application's own PROT_NONE, a bug), nor is one whose page the kernel refuses to
 * give back as often (vm.max_map_count reached for good): hand it on instead of looping,
 * as the kernel's fault ends in a signal when it cannot get the page. */
#define PROT_REFAULT_LIMIT	64

static struct sigaction old_sigsegv;
static struct cmn_mutex sigsegv_lock = CMN_MUTEX_INITIALIZER("hmm sigsegv_lock");
static __thread uintptr_t last_fault;
static __thread unsigned int same_faults;
static __thread bool last_failed;	/* serving the fault at @last_fault failed */

long (*_Atomic hmm_fail_hook)(enum hmm_fail_call call, uintptr_t addr, size_t len);

static int prot_change(uintptr_t start, size_t len, int prot)
{
	enum hmm_fail_call call = prot == PROT_NONE ? HMM_FAIL_PROT_NONE :
				  prot == PROT_READ ? HMM_FAIL_PROT_READ : HMM_FAIL_PROT_RW;
	long fail = hmm_fail_check(call, start, len);

	if (fail < 0)
		return (int)fail;
	return mprotect((void *)start, len, prot) ? -errno : 0;
}

int hmm_prot_set(uintptr_t start, size_t len, bool access)
{
	return prot_change(start, len, access ? PROT_READ | PROT_WRITE : PROT_NONE);
}

int hmm_prot_readonly(uintptr_t start, size_t len)
{
	return prot_change(start, len, PROT_READ);
}

size_t hmm_prot_pages(uintptr_t start, size_t n, int prot, uint64_t *failed)
{
	size_t nfailed = 0;

	memset(failed, 0, ((n + 63) / 64) * sizeof(*failed));
	if (!prot_change(start, n << HMM_PAGE_SHIFT, prot))
		return 0;
	/* a page already changed before the refusal changes again at no cost */
	for (size_t k = 0; k < n; k++) {
		if (prot_change(start + (k << HMM_PAGE_SHIFT), HMM_PAGE_SIZE, prot)) {
			failed[k / 64] |= 1ull << (k % 64);
			nfailed++;
		}
	}
	return nfailed;
}

int hmm_prot_write(struct hmm_mm *mm, struct hmm_region *r, uintptr_t dst, const void *src,
		   size_t len)
{
	size_t done = 0;

	if (r->alias) {
		memcpy(r->alias + (dst - r->start), src, len);
		return 0;
	}
	while (done < len) {
		ssize_t n = pwrite(mm->mem_fd, (const char *)src + done, len - done,
				   (off_t)(dst + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

/* Hand a SIGSEGV that is not ours to the previous disposition. */
static void sigsegv_chain(int sig, siginfo_t *si, void *uc)
{
	if (old_sigsegv.sa_flags & SA_SIGINFO) {
		old_sigsegv.sa_sigaction(sig, si, uc);
		return;
	}
	if (old_sigsegv.sa_handler == SIG_DFL || old_sigsegv.sa_handler == SIG_IGN) {
		/* the access is retried on return and dies with the default action */
		struct sigaction dfl = { .sa_handler = SIG_DFL };

		sigaction(sig, &dfl, NULL);
		return;
	}
	old_sigsegv.sa_handler(sig);
}

/* True if this thread keeps faulting on @addr without progress: on a system page (not
 * ours), or on one whose way back failed each time. */
static bool refault_loop(uintptr_t addr, uint64_t w)
{
	if ((hmm_ps_state(w) != HMM_PS_SYSTEM && !last_failed) || addr != last_fault) {
		last_fault = addr;
		same_faults = 0;
		last_failed = false;
		return false;
	}
	return ++same_faults >= PROT_REFAULT_LIMIT;
}

/* Serve a fault on page @addr of @r; false if it is not ours to serve. */
static bool sigsegv_serve(struct hmm_region *r, uintptr_t addr)
{
	uint64_t w = atomic_load(hmm_region_word(r, addr));

	if (refault_loop(addr, w))
		return false;
	switch (hmm_ps_state(w)) {
	case HMM_PS_EXCLUSIVE:
		last_failed = hmm_exclusive_revoke(r->mm, r, addr, false) != 0;
		return true;
	case HMM_PS_SYSTEM:
		return true;	/* given back between the fault and now: retry */
	case HMM_PS_TO_DEVICE:
	case HMM_PS_TO_SYSTEM:
		if (!r->prot)
			return true;	/* an exclusive page on its way back: retry */
		last_failed = hmm_cpu_fault(r->mm, r, addr, false, false) != 0;
		return true;
	default:
		/* a device page: ours with this backend; with userfaultfd it is missing, not
		 * protected, so the application protected it itself */
		if (!r->prot)
			return false;
		last_failed = hmm_cpu_fault(r->mm, r, addr, false, false) != 0;
		return true;
	}
}

static void hmm_sigsegv(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	uintptr_t addr = (uintptr_t)si->si_addr & ~(HMM_PAGE_SIZE - 1);
	struct hmm_region *r;

	atomic_fetch_add(&hmm_handlers_inflight, 1);
	r = si->si_code == SEGV_ACCERR ? hmm_region_find(addr) : NULL;
	if (r && sigsegv_serve(r, addr)) {
		/* resolved or not, returning retries the access */
		atomic_fetch_sub(&hmm_handlers_inflight, 1);
		errno = saved_errno;
		return;
	}
	atomic_fetch_sub(&hmm_handlers_inflight, 1);
	last_fault = 0;
	last_failed = false;
	errno = saved_errno;
	sigsegv_chain(sig, si, uc);
}

int hmm_prot_install(void)
{
	struct sigaction sa = { .sa_sigaction = hmm_sigsegv,
				.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER };
	struct sigaction cur;
	int ret = 0;

	cmn_mutex_lock(&sigsegv_lock);
	/* someone (ASan, a test harness) may have replaced ours since: chain to them */
	if (sigaction(SIGSEGV, NULL, &cur) == 0 &&
	    (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != hmm_sigsegv)) {
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGSEGV, &sa, &old_sigsegv))
			ret = -errno;
	}
	cmn_mutex_unlock(&sigsegv_lock);
	return ret;
}
