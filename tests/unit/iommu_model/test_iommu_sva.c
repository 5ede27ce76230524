// SPDX-License-Identifier: MIT
/* SVA domains follow a process, not its pid number: a domain bound to a child reaches the
 * child's memory while it lives; once it has exited every access is an SVA_GONE fault,
 * and a new process that gets the same pid (forced with ns_last_pid when this runs as root)
 * is never read or written. Domain options naming the process by pidfd are checked. A page
 * request answered after the binding went away copies nothing. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "tests/unit/iommu_model/iommu_test.h"
#include "tests/unit/t_proc.h"

#define RID	5
#define PASID	3
#define LEN	(2 * PG)

/* A child holding @buf filled with @b that waits for a byte on @go (or EOF), then exits 0
 * if @buf still holds @b only, 1 if not. Its pid; *@ready is read once it has filled. */
static pid_t child_holding(uint8_t *buf, uint8_t b, int go[2], int ready[2])
{
	pid_t pid;
	char c;

	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		bool same = true;

		memset(buf, b, LEN);
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		if (read(go[0], &c, 1) < 0)
			_exit(3);
		for (size_t i = 0; i < LEN; i++)
			same &= buf[i] == b;
		_exit(same ? 0 : 1);
	}
	close(go[0]);
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	return pid;
}

/* Tell the child to check and exit; its exit status. */
static int child_finish(pid_t pid, int go[2])
{
	int st;

	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A child holding @b at @buf with pid @want, when ns_last_pid allows (a few tries: another
 * process may fork in between); -1 (the reason printed) when it cannot be had. */
static pid_t child_at_pid(pid_t want, uint8_t *buf, uint8_t b, int go[2])
{
	int ready[2];

	for (int i = 0; i < 20; i++) {
		int ret = t_next_pid_is(want);
		pid_t pid;

		if (ret) {
			print_message("pid reuse not forced: ns_last_pid: %s\n", strerror(-ret));
			return -1;
		}
		pid = child_holding(buf, b, go, ready);
		if (pid == want)
			return pid;
		child_finish(pid, go);
	}
	print_message("pid reuse not forced: pid %d kept being taken\n", (int)want);
	return -1;
}

static void test_follows_process(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_domain *d0 = t_paging(mmu, 0), *sva;
	uint8_t *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t out[LEN];
	int go[2], ready[2], vgo[2];
	unsigned int reason = 0;
	pid_t bound, victim;

	(void)state;
	assert_true(buf != MAP_FAILED);
	memset(buf, 0x11, LEN);
	bound = child_holding(buf, 0xaa, go, ready);
	assert_int_equal(iommu_domain_alloc(mmu, &(struct iommu_domain_opts){
			.type = IOMMU_DOMAIN_SVA, .pid = bound }, &sva), 0);
	assert_int_equal(iommu_attach(mmu, RID, d0), 0);
	assert_int_equal(iommu_pasid_attach(mmu, RID, PASID, sva), 0);
	/* alive: its memory, not ours */
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, PASID, (uintptr_t)buf, out, LEN), 0);
	for (size_t i = 0; i < LEN; i++)
		assert_int_equal(out[i], 0xaa);
	assert_int_equal(child_finish(bound, go), 0);	/* exited and reaped */
	/* gone: reads fault and bring nothing, writes never start */
	memset(out, 0x33, LEN);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, PASID, (uintptr_t)buf, out, LEN),
			 -EFAULT);
	for (size_t i = 0; i < LEN; i++)
		assert_int_not_equal(out[i], 0xaa);
	assert_int_equal(iommu_dma_write_pasid(mmu, RID, PASID, (uintptr_t)buf, out, LEN),
			 -EFAULT);
	assert_int_equal(t_faults(mmu, RID, &reason), 2);
	assert_int_equal(reason, IOMMU_FAULT_SVA_GONE);
	/* the number again, another process: still nothing */
	victim = child_at_pid(bound, buf, 0x5e, vgo);
	if (victim > 0) {
		memset(out, 0x33, LEN);
		assert_int_equal(iommu_dma_read_pasid(mmu, RID, PASID, (uintptr_t)buf, out, LEN),
				 -EFAULT);
		for (size_t i = 0; i < LEN; i++)
			assert_int_not_equal(out[i], 0x5e);
		memset(out, 0x77, LEN);
		assert_int_equal(iommu_dma_write_pasid(mmu, RID, PASID, (uintptr_t)buf, out, LEN),
				 -EFAULT);
		assert_int_equal(t_faults(mmu, RID, &reason), 2);
		assert_int_equal(reason, IOMMU_FAULT_SVA_GONE);
		assert_int_equal(child_finish(victim, vgo), 0);	/* its memory unchanged */
	}
	assert_int_equal(iommu_pasid_detach(mmu, RID, PASID), 0);
	assert_int_equal(iommu_domain_free(sva), 0);
	munmap(buf, LEN);
	iommu_destroy(mmu);
}

/* Naming the process by pidfd: the domain keeps its own copy; a pidfd that is not one, or
 * that is another pid's, or whose process is gone, is refused and allocates nothing. */
static void test_pidfd_opts(void **state)
{
	struct iommu *mmu = t_iommu();
	struct iommu_domain *d0 = t_paging(mmu, 0), *sva = NULL;
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_SVA, .flags = IOMMU_DOMAIN_SVA_PIDFD };
	uint8_t *mine = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t out[64];
	int self = (int)syscall(SYS_pidfd_open, getpid(), 0), p[2], go[2], ready[2];
	struct iommu_stats st0, st1;
	pid_t child;

	(void)state;
	assert_true(self >= 0);
	assert_true(mine != MAP_FAILED);
	assert_int_equal(pipe(p), 0);
	iommu_get_stats(mmu, &st0);
	o.pidfd = -1;
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), -EINVAL);
	o.pidfd = p[0];					/* not a pidfd */
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), -EINVAL);
	o.pidfd = self;
	o.pid = getppid();				/* not that pidfd's pid */
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), -ESRCH);
	assert_int_equal(iommu_domain_alloc(mmu, &(struct iommu_domain_opts){
			.type = IOMMU_DOMAIN_PAGING, .flags = IOMMU_DOMAIN_SVA_PIDFD }, &sva),
			 -EINVAL);
	/* a process that has exited, by pidfd (before and after it is reaped) and by pid */
	child = child_holding(mine, 1, go, ready);
	o.pid = 0;
	o.pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	assert_true(o.pidfd >= 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_int_equal(waitid(P_PIDFD, (id_t)o.pidfd, NULL, WEXITED | WNOWAIT), 0);
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), -ESRCH);	/* a zombie */
	close(go[1]);
	assert_int_equal(waitpid(child, NULL, 0), child);
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), -ESRCH);	/* reaped */
	close(o.pidfd);
	assert_int_equal(iommu_domain_alloc(mmu, &(struct iommu_domain_opts){
			.type = IOMMU_DOMAIN_SVA, .pid = child }, &sva), -ESRCH);
	assert_null(sva);
	iommu_get_stats(mmu, &st1);
	assert_int_equal(st1.allocs_live, st0.allocs_live);
	/* this process by pidfd, pid left 0; the caller's pidfd may go at once */
	o.pidfd = self;
	assert_int_equal(iommu_domain_alloc(mmu, &o, &sva), 0);
	close(self);
	memset(mine, 0x42, sizeof(out));
	assert_int_equal(iommu_attach(mmu, RID, d0), 0);
	assert_int_equal(iommu_pasid_attach(mmu, RID, PASID, sva), 0);
	assert_int_equal(iommu_dma_read_pasid(mmu, RID, PASID, (uintptr_t)mine, out, sizeof(out)),
			 0);
	assert_memory_equal(out, mine, sizeof(out));
	close(p[0]);
	close(p[1]);
	munmap(mine, LEN);
	iommu_destroy(mmu);
}

/* The page-request service of test_unbound_in_wait(): makes the page present, then, before
 * answering Success, takes the PASID's binding away: detached and freed, or replaced by a
 * domain bound to another process (@child) that holds 0xc3 at the same address. */
struct unbind_ctx {
	struct iommu *mmu;
	struct iommu_domain *sva;
	uint8_t *page;
	pid_t child;
	int calls;
};

static void unbind_handler(void *arg, const struct iommu_page_request *req)
{
	struct unbind_ctx *c = arg;

	c->calls++;
	assert_int_equal(mprotect(c->page, PG, PROT_READ | PROT_WRITE), 0);
	memset(c->page, 0x5a, PG);
	assert_int_equal(iommu_pasid_detach(c->mmu, RID, PASID), 0);
	assert_int_equal(iommu_domain_free(c->sva), 0);
	c->sva = NULL;
	if (c->child > 0) {
		assert_int_equal(iommu_domain_alloc(c->mmu, &(struct iommu_domain_opts){
				.type = IOMMU_DOMAIN_SVA, .pid = c->child }, &c->sva), 0);
		assert_int_equal(iommu_pasid_attach(c->mmu, RID, PASID, c->sva), 0);
	}
	assert_int_equal(iommu_page_response(c->mmu, req->rid, req->prg_index,
					     IOMMU_PRG_SUCCESS), 0);
}

/* A page request answered after the PASID's binding went away (the access waits for the
 * answer outside its access section, so unbinding does not wait for it): the access
 * faults and copies nothing, neither through the freed domain nor through the one bound
 * since, to another process. */
static void test_unbound_in_wait(void **state)
{
	static const unsigned int want[2] = { IOMMU_FAULT_NO_DOMAIN, IOMMU_FAULT_SVA_GONE };

	(void)state;
	for (int rebind = 0; rebind < 2; rebind++) {
		struct iommu *mmu = t_iommu();
		struct iommu_domain *d0 = t_paging(mmu, 0);
		uint8_t *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				    -1, 0);
		struct unbind_ctx c = { .mmu = mmu, .page = buf, .child = -1 };
		uint8_t out[64];
		unsigned int reason = 0;
		int go[2], ready[2];

		assert_true(buf != MAP_FAILED);
		if (rebind)
			c.child = child_holding(buf, 0xc3, go, ready);
		assert_int_equal(mprotect(buf, PG, PROT_NONE), 0);	/* ours only */
		assert_int_equal(iommu_domain_alloc(mmu, &(struct iommu_domain_opts){
				.type = IOMMU_DOMAIN_SVA }, &c.sva), 0);
		assert_int_equal(iommu_attach(mmu, RID, d0), 0);
		assert_int_equal(iommu_pasid_attach(mmu, RID, PASID, c.sva), 0);
		assert_int_equal(iommu_pri_enable(mmu, RID, 4, unbind_handler, &c), 0);
		memset(out, 0x11, sizeof(out));
		assert_int_equal(iommu_dma_read_pasid(mmu, RID, PASID, (uintptr_t)buf, out,
						      sizeof(out)), -EFAULT);
		assert_int_equal(c.calls, 1);
		for (size_t i = 0; i < sizeof(out); i++)
			assert_int_equal(out[i], 0x11);
		assert_int_equal(t_faults(mmu, RID, &reason), 1);
		assert_int_equal(reason, want[rebind]);
		if (rebind) {
			assert_int_equal(iommu_dma_write_pasid(mmu, RID, PASID, (uintptr_t)buf,
							       out, sizeof(out)), 0);
			/* reached: it saw 0x11 */
			assert_int_equal(child_finish(c.child, go), 1);
			assert_int_equal(iommu_pasid_detach(mmu, RID, PASID), 0);
			assert_int_equal(iommu_domain_free(c.sva), 0);
		}
		munmap(buf, LEN);
		iommu_destroy(mmu);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_follows_process),
		cmocka_unit_test(test_pidfd_opts),
		cmocka_unit_test(test_unbound_in_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
