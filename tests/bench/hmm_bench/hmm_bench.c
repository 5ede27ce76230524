// SPDX-License-Identifier: MIT
/* hmm_bench - PERF-01..05 of doc/scenarios.md next to their baselines
 * measured in the same run: glibc memcpy (the copy ceiling) and the raw userfaultfd fault
 * mechanisms with no library around them.
 *
 *   hmm_bench [--json] [--quick] [--only migrate|faults|pri]
 *
 * --only runs one part alone, repeated (for perf record / perf stat): 2 MiB migration both
 * ways next to memcpy (also per second of the process's CPU time, which other load on the
 * machine hardly moves), device-fault service (also per CPU second), or page requests.
 *
 * Each figure is the median of 5 runs (each run: its own median for latencies, its own
 * total for throughputs). --json prints one object. The keys ending in _61 are measured
 * with the capabilities of Linux 6.1 (no UFFDIO_MOVE: write-protect isolation, UFFDIO_COPY
 * back), by the same binary started again with VGPU_HMM_CAPS=6.1 within the same run. */
#include <emmintrin.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/bitops.h"
#include "common/clock.h"
#include "common/compiler.h"
#include "hmm/hmm.h"
#include "iommu_model/iommu.h"
#include "tests/bench/bench_cpu.h"

#define PG	HMM_PAGE_SIZE
#define M2	HMM_BLOCK_SIZE
#define RUNS	5

static unsigned int fault_samples = 2000;
static size_t migrate_bytes = 128 * VGPU_MiB;
static size_t memcpy_pool = 256 * VGPU_MiB;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double now_us(void)
{
	return (double)cmn_now_ns() / 1000.0;
}

/* CPU time of the calling thread: what a copy costs whatever else the machine runs. */
static double cpu_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* CPU time of the whole process: a migration's, whichever of its threads did the work
 * (the way back without UFFDIO_MOVE shares its copy with hmm's copier thread). */
static double proc_cpu_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* --only migrate: the same figures from process CPU time (GB per CPU second). */
static double memcpy_cpu_gbps, to_dev_cpu_gbps, to_sys_cpu_gbps;
/* ... and the way back per second of its busier thread's CPU time (the migrating one or
 * hmm's copier): what it takes where each has a CPU of its own, whatever the load. */
static double to_sys_path_gbps;
/* Share of the pages of the ways back that hmm's copier thread copied (6.1 set). */
static double copier_share;
/* --only faults: faults per second of the servicing thread's CPU time. */
static double faults_cpu_per_s;

static void *map_aligned(size_t len, bool thp)
{
	char *p = mmap(NULL, len + M2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	a = (char *)cmn_align_up((uintptr_t)p, M2);
	if (a > p)
		munmap(p, a - p);
	munmap(a + len, (p + len + M2) - (a + len));
	madvise(a, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	return a;
}

static void pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void unpin(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int i = 0; i < CPU_SETSIZE && i < 64; i++)
		CPU_SET(i, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- memcpy baseline: 2 MiB chunks walked through pools much larger than the LLC ---- */

struct memcpy_pool {
	char *src, *dst;
};

static void memcpy_pool_init(struct memcpy_pool *p)
{
	p->src = map_aligned(memcpy_pool, true);
	p->dst = map_aligned(memcpy_pool, true);
	memset(p->src, 1, memcpy_pool);
	memset(p->dst, 2, memcpy_pool);
}

static void memcpy_pool_fini(struct memcpy_pool *p)
{
	munmap(p->src, memcpy_pool);
	munmap(p->dst, memcpy_pool);
}

/* One walk through the pool: GB/s, and per second of the process's CPU time in *@cpu. */
static double memcpy_pass(const struct memcpy_pool *p, double *cpu)
{
	double t0 = now_us(), c0 = proc_cpu_us();

	for (size_t off = 0; off < memcpy_pool; off += M2)
		memcpy(p->dst + off, p->src + off, M2);
	*cpu = (double)memcpy_pool / ((proc_cpu_us() - c0) * 1000.0);
	return (double)memcpy_pool / ((now_us() - t0) * 1000.0);
}

/* The same walk with SSE2 streaming stores: the copy hmm uses into device memory, which
 * glibc's memcpy does not use for 2 MiB when the last-level cache is large. */
static void copy_stream(void *dst, const void *src, size_t len)
{
	__m128i *d = dst;
	const __m128i *sv = src;

	for (size_t i = 0; i < len / 16; i += 4) {
		__m128i a = _mm_load_si128(sv + i), b = _mm_load_si128(sv + i + 1);
		__m128i c = _mm_load_si128(sv + i + 2), e = _mm_load_si128(sv + i + 3);

		_mm_stream_si128(d + i, a);
		_mm_stream_si128(d + i + 1, b);
		_mm_stream_si128(d + i + 2, c);
		_mm_stream_si128(d + i + 3, e);
	}
	_mm_sfence();
}

static double bench_memcpy_stream(void)
{
	char *src = map_aligned(memcpy_pool, true), *dst = map_aligned(memcpy_pool, true);
	double runs[RUNS];

	memset(src, 1, memcpy_pool);
	memset(dst, 2, memcpy_pool);
	for (int r = 0; r < RUNS; r++) {
		double t0 = now_us();

		for (size_t off = 0; off < memcpy_pool; off += M2)
			copy_stream(dst + off, src + off, M2);
		runs[r] = (double)memcpy_pool / ((now_us() - t0) * 1000.0);
	}
	munmap(src, memcpy_pool);
	munmap(dst, memcpy_pool);
	return median(runs, RUNS);
}

/* ---- raw mechanisms: a bare userfaultfd, nothing of hmm/ --------------------------------- */

static int raw_uffd = -1;
static char *raw_src;

static void raw_sigbus(int sig, siginfo_t *si, void *uc)
{
	struct uffdio_copy cp = {
		.dst = (uintptr_t)si->si_addr & ~(PG - 1), .src = (uintptr_t)raw_src, .len = PG,
		.mode = UFFDIO_COPY_MODE_DONTWAKE,
	};

	(void)sig;
	(void)uc;
	ioctl(raw_uffd, UFFDIO_COPY, &cp);
}

static int raw_open(bool sigbus, char *area, size_t len)
{
	struct uffdio_api api = { .api = UFFD_API, .features = sigbus ? UFFD_FEATURE_SIGBUS : 0 };
	struct uffdio_register reg = { .range = { (uintptr_t)area, len },
				       .mode = UFFDIO_REGISTER_MODE_MISSING };
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd < 0 || ioctl(fd, UFFDIO_API, &api) || ioctl(fd, UFFDIO_REGISTER, &reg)) {
		perror("userfaultfd");
		exit(1);
	}
	return fd;
}

static atomic_bool raw_stop;

static void *raw_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&raw_stop)) {
		struct pollfd pfd = { .fd = raw_uffd, .events = POLLIN };
		struct uffd_msg msg;

		if (poll(&pfd, 1, 50) <= 0)
			continue;
		if (read(raw_uffd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		struct uffdio_copy cp = { .dst = msg.arg.pagefault.address & ~(PG - 1),
					  .src = (uintptr_t)raw_src, .len = PG };

		ioctl(raw_uffd, UFFDIO_COPY, &cp);
	}
	return NULL;
}

/* Median 4 KiB fault + copy of the raw mechanism, µs. */
static double bench_raw(bool sigbus)
{
	size_t len = (size_t)fault_samples * PG;
	double runs[RUNS], *s = malloc(fault_samples * sizeof(double));
	struct sigaction sa = { .sa_sigaction = raw_sigbus, .sa_flags = SA_SIGINFO }, old;
	pthread_t t;

	raw_src = map_aligned(M2, false);
	memset(raw_src, 3, PG);
	if (sigbus)
		sigaction(SIGBUS, &sa, &old);
	for (int r = 0; r < RUNS; r++) {
		volatile char *area = map_aligned(len, false);

		raw_uffd = raw_open(sigbus, (char *)area, len);
		atomic_store(&raw_stop, false);
		if (!sigbus)
			pthread_create(&t, NULL, raw_thread, NULL);
		for (unsigned int i = 0; i < fault_samples; i++) {
			double t0 = now_us();

			area[i * PG] = 1;
			s[i] = now_us() - t0;
		}
		runs[r] = median(s, fault_samples);
		if (!sigbus) {
			atomic_store(&raw_stop, true);
			pthread_join(t, NULL);
		}
		close(raw_uffd);
		munmap((void *)area, len);
	}
	if (sigbus)
		sigaction(SIGBUS, &old, NULL);
	munmap(raw_src, M2);
	free(s);
	return median(runs, RUNS);
}

/* The raw mprotect mechanism: SIGSEGV, unprotect the page, copy 4 KiB into it. */
static void raw_sigsegv(int sig, siginfo_t *si, void *uc)
{
	char *a = (char *)((uintptr_t)si->si_addr & ~(PG - 1));

	(void)sig;
	(void)uc;
	mprotect(a, PG, PROT_READ | PROT_WRITE);
	memcpy(a, raw_src, PG);
}

/* Median 4 KiB fault + unprotect + copy, µs (every other page, so that a fault never
 * merges with the previous page's VMA: the library pays the same splits). */
static double bench_raw_mprotect(void)
{
	size_t len = (size_t)fault_samples * 2 * PG;
	double runs[RUNS], *s = malloc(fault_samples * sizeof(double));
	struct sigaction sa = { .sa_sigaction = raw_sigsegv, .sa_flags = SA_SIGINFO }, old;

	raw_src = map_aligned(M2, false);
	memset(raw_src, 3, PG);
	sigaction(SIGSEGV, &sa, &old);
	for (int r = 0; r < RUNS; r++) {
		volatile char *area = map_aligned(len, false);

		memset((void *)area, 1, len);
		mprotect((void *)area, len, PROT_NONE);
		for (unsigned int i = 0; i < fault_samples; i++) {
			double t0 = now_us();

			area[i * 2 * PG] = 1;
			s[i] = now_us() - t0;
		}
		runs[r] = median(s, fault_samples);
		munmap((void *)area, len);
	}
	sigaction(SIGSEGV, &old, NULL);
	munmap(raw_src, M2);
	free(s);
	return median(runs, RUNS);
}

/* ---- PERF-01/02/03: CPU fault-back through hmm ----------------------------------------- */

struct fault_result {
	double us;		/* median per fault */
	double gbps;		/* granule / us */
};

static struct hmm_mm *mm_new(enum hmm_backend be, uint64_t granule)
{
	struct hmm_mm_opts o = { .backend = be, .granule = granule };
	struct hmm_mm *mm;
	int ret = hmm_mm_create(&o, &mm);

	if (ret) {
		fprintf(stderr, "hmm_mm_create: %s\n", strerror(-ret));
		exit(1);
	}
	return mm;
}

static struct hmm_devmem *devmem_new(uint64_t size)
{
	struct hmm_devmem_desc d = { .owner = &d, .size = size };
	struct hmm_devmem *dm;

	if (hmm_devmem_create(&d, &dm)) {
		fprintf(stderr, "hmm_devmem_create failed\n");
		exit(1);
	}
	return dm;
}

/* A 2 MiB aligned managed area: private anonymous, or (@shared, mprotect backend) a
 * memfd mapped twice, the second view being the library's write view. */
static volatile char *fault_area(struct hmm_mm *mm, size_t len, bool thp, bool shared,
				 char **alias)
{
	char *p = map_aligned(len, thp);
	int fd;

	*alias = NULL;
	if (!shared) {
		memset(p, 5, len);
		hmm_region_add(mm, p, len);
		return p;
	}
	fd = memfd_create("hmm_bench", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len) ||
	    mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
	    (*alias = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		perror("memfd");
		exit(1);
	}
	close(fd);
	memset(p, 5, len);
	if (hmm_region_add_alias(mm, p, len, *alias)) {
		fprintf(stderr, "hmm_region_add_alias failed\n");
		exit(1);
	}
	return p;
}

/* Migrate @samples granules away, then time one store per granule (the first store
 * faults the whole granule back; the other pages of it are touched untimed). */
static struct fault_result bench_fault_back_in(enum hmm_backend be, uint64_t granule,
					       unsigned int samples, int handler_cpu, bool shared)
{
	size_t len = (size_t)samples * granule;
	double runs[RUNS], *s = malloc(samples * sizeof(double));
	struct fault_result res;

	if (handler_cpu >= 0)
		pin_to(handler_cpu);		/* the handler thread inherits this */
	struct hmm_mm *mm = mm_new(be, granule);
	struct hmm_devmem *dm = devmem_new(cmn_align_up(len, M2));

	if (handler_cpu >= 0)
		pin_to(0);
	for (int r = 0; r < RUNS; r++) {
		char *alias;
		volatile char *p = fault_area(mm, len, granule == M2, shared, &alias);
		struct hmm_migrate_result mr;

		hmm_migrate_to_device(mm, dm, (void *)p, len, &mr);
		if (mr.migrated != len / PG) {
			fprintf(stderr, "fault bench: migrated %zu of %zu\n", mr.migrated, (size_t)(len / PG));
			exit(1);
		}
		for (unsigned int i = 0; i < samples; i++) {
			volatile char *g = p + (size_t)i * granule;
			double t0 = now_us();

			g[0] = 1;
			s[i] = now_us() - t0;
			for (uint64_t off = PG; off < granule; off += PG)
				g[off] = 1;
		}
		runs[r] = median(s, samples);
		hmm_region_remove(mm, (void *)p);
		munmap((void *)p, len);
		if (alias)
			munmap(alias, len);
	}
	unpin();
	hmm_devmem_destroy(dm);
	hmm_mm_destroy(mm);
	free(s);
	res.us = median(runs, RUNS);
	res.gbps = (double)granule / (res.us * 1000.0);
	return res;
}

static struct fault_result bench_fault_back(enum hmm_backend be, uint64_t granule,
					    unsigned int samples, int handler_cpu)
{
	return bench_fault_back_in(be, granule, samples, handler_cpu, false);
}

/* ---- PERF-04: bulk migration in 2 MiB chunks ------------------------------------------- */

struct mig_job {
	struct hmm_mm *mm;
	struct hmm_devmem *dm;
	char *buf;
	size_t len;
	double to_dev_us, to_sys_us, to_dev_cpu_us, to_sys_cpu_us;
	double to_sys_thread_us;	/* CPU time of the migrating thread alone */
};

static void *mig_job_run(void *arg)
{
	struct mig_job *j = arg;
	struct hmm_migrate_result r;
	double t0 = now_us(), c0 = proc_cpu_us();

	hmm_migrate_to_device(j->mm, j->dm, j->buf, j->len, &r);
	j->to_dev_us = now_us() - t0;
	j->to_dev_cpu_us = proc_cpu_us() - c0;
	if (r.migrated != j->len / PG)
		fprintf(stderr, "migrate: %zu of %zu pages\n", r.migrated, (size_t)(j->len / PG));
	double tc0 = cpu_us();

	t0 = now_us();
	c0 = proc_cpu_us();
	hmm_migrate_to_system(j->mm, j->dm, j->buf, j->len, &r);
	j->to_sys_us = now_us() - t0;
	j->to_sys_cpu_us = proc_cpu_us() - c0;
	j->to_sys_thread_us = cpu_us() - tc0;
	return NULL;
}

/* Until hmm's spare filler has done what the last migration back asked of it: the
 * memcpy baseline runs on a machine with nothing else to do. */
static void spare_filler_wait(struct hmm_mm *mm)
{
	struct hmm_mm_stats st;

	for (hmm_mm_get_stats(mm, &st); st.spare_fills_pending; hmm_mm_get_stats(mm, &st))
		sched_yield();
}

/* GB/s per direction; @threads jobs on separate buffers, aggregate throughput. With @mc,
 * a memcpy walk runs before every round and *@mc is their median: the baseline of the
 * ratios, measured in the same seconds as the migrations (the machine's speed moves). */
static void bench_migrate(unsigned int threads, double *to_dev, double *to_sys, double *mc)
{
	struct memcpy_pool pool = { 0 };
	double mr[RUNS], mcpu[RUNS];
	struct hmm_mm *mm = mm_new(HMM_BACKEND_UFFD_THREAD, PG);
	struct hmm_devmem *dm = devmem_new(migrate_bytes);
	size_t len = migrate_bytes / threads;
	struct mig_job jobs[2];
	double rd[RUNS], rs[RUNS], cd[RUNS], cs[RUNS], cp[RUNS];

	for (unsigned int t = 0; t < threads; t++) {
		jobs[t] = (struct mig_job){ .mm = mm, .dm = dm, .len = len,
					    .buf = map_aligned(len, true) };
		memset(jobs[t].buf, 7, len);
		hmm_region_add(mm, jobs[t].buf, len);
	}
	if (mc)
		memcpy_pool_init(&pool);
	mig_job_run(&jobs[0]);	/* warm-up: staging areas populated, pool faulted in */
	for (int r = 0; r < RUNS; r++) {
		pthread_t th[2];
		double dev = 0, sys = 0;

		if (mc) {
			spare_filler_wait(mm);
			mr[r] = memcpy_pass(&pool, &mcpu[r]);
		}
		for (unsigned int t = 0; t < threads; t++)
			pthread_create(&th[t], NULL, mig_job_run, &jobs[t]);
		for (unsigned int t = 0; t < threads; t++) {
			pthread_join(th[t], NULL);
			dev = cmn_max(dev, jobs[t].to_dev_us);
			sys = cmn_max(sys, jobs[t].to_sys_us);
		}
		rd[r] = (double)migrate_bytes / (dev * 1000.0);
		rs[r] = (double)migrate_bytes / (sys * 1000.0);
		cd[r] = (double)len / (jobs[0].to_dev_cpu_us * 1000.0);
		cs[r] = (double)len / (jobs[0].to_sys_cpu_us * 1000.0);
		/* one job: the rest of the process's CPU time is the copier's (the fault
		 * handler thread has nothing to do) */
		cp[r] = (double)len / (cmn_max(jobs[0].to_sys_thread_us,
					       jobs[0].to_sys_cpu_us - jobs[0].to_sys_thread_us) *
				       1000.0);
	}
	struct hmm_mm_stats st;

	hmm_mm_get_stats(mm, &st);
	copier_share = st.migrated_to_system ?
		       (double)st.copier_pages / (double)st.migrated_to_system : 0;
	for (unsigned int t = 0; t < threads; t++) {
		if (((volatile char *)jobs[t].buf)[len - 1] != 7)
			fprintf(stderr, "migrate: data lost\n");
		hmm_region_remove(mm, jobs[t].buf);
		munmap(jobs[t].buf, len);
	}
	hmm_devmem_destroy(dm);
	hmm_mm_destroy(mm);
	if (mc) {
		memcpy_pool_fini(&pool);
		*mc = median(mr, RUNS);
		memcpy_cpu_gbps = median(mcpu, RUNS);
	}
	*to_dev = median(rd, RUNS);
	*to_sys = median(rs, RUNS);
	to_dev_cpu_gbps = median(cd, RUNS);
	to_sys_cpu_gbps = median(cs, RUNS);
	to_sys_path_gbps = median(cp, RUNS);
}

/* ---- page request -> replay: a device access to a managed page kept in device memory ---- */

#define PRI_RID		1
#define PRI_PASID	1
#define PRI_PAGES	256

/* pri_fault_us: one 4 KiB device read through an SVA PASID bound to this process, of a
 * managed page in device memory (the SIGBUS backend: the copy faults): the failed copy,
 * the page request, hmm serving it (the page migrates back), the response and the
 * retried copy. Median per run of PRI_PAGES reads, median of RUNS runs. */
static double bench_pri_fault(void)
{
	struct iommu_domain_opts po = { .type = IOMMU_DOMAIN_PAGING };
	struct iommu_domain_opts so = { .type = IOMMU_DOMAIN_SVA };
	struct hmm_mm *mm = mm_new(HMM_BACKEND_UFFD_SIGBUS, PG);
	struct hmm_devmem *dm = devmem_new(M2);
	char *buf = map_aligned(M2, false), out[PG];
	struct iommu_domain *d0, *sva;
	struct hmm_migrate_result res;
	struct hmm_pri pri;
	struct iommu *mmu;
	double r[RUNS], t[PRI_PAGES];

	if (iommu_create(NULL, &mmu) || iommu_domain_alloc(mmu, &po, &d0) ||
	    iommu_domain_alloc(mmu, &so, &sva) || iommu_attach(mmu, PRI_RID, d0) ||
	    iommu_pasid_attach(mmu, PRI_RID, PRI_PASID, sva) ||
	    hmm_pri_attach(&pri, mm, mmu, PRI_RID, PRI_PASID, 16)) {
		fprintf(stderr, "pri: IOMMU set-up failed\n");
		exit(1);
	}
	memset(buf, 9, PRI_PAGES * PG);
	hmm_region_add(mm, buf, PRI_PAGES * PG);
	for (int k = 0; k < RUNS; k++) {
		hmm_migrate_to_device(mm, dm, buf, PRI_PAGES * PG, &res);
		for (size_t i = 0; i < PRI_PAGES; i++) {
			uint64_t t0 = cmn_now_ns();

			if (iommu_dma_read_pasid(mmu, PRI_RID, PRI_PASID, (uintptr_t)buf + i * PG,
						 out, PG) || out[0] != 9) {
				fprintf(stderr, "pri: device read of page %zu failed\n", i);
				exit(1);
			}
			t[i] = (double)(cmn_now_ns() - t0) / 1000.0;
		}
		r[k] = median(t, PRI_PAGES);
	}
	hmm_pri_detach(&pri);
	iommu_destroy(mmu);
	hmm_region_remove(mm, buf);
	munmap(buf, M2);
	hmm_devmem_destroy(dm);
	hmm_mm_destroy(mm);
	return median(r, RUNS);
}

/* ---- PERF-05: device fault service on populated system pages ----------------------------- */

static uint64_t *ptes;
static uintptr_t pte_base;

static int bench_map(struct hmm_mirror *m, uintptr_t start, uintptr_t end, const uint64_t *pfns)
{
	(void)m;
	for (uintptr_t a = start; a < end; a += PG) {
		if (pfns[(a - start) / PG] & HMM_PFN_VALID)
			ptes[(a - pte_base) / PG] = pfns[(a - start) / PG];
	}
	return 0;
}

static void bench_invalidate(struct hmm_mirror *m, const struct hmm_notify_range *r)
{
	(void)m;
	(void)r;
}

static const struct hmm_mirror_ops bench_ops = { .invalidate = bench_invalidate,
						 .map = bench_map };

/* Faults per second with batches of @batch random pages; *single_us = one-fault batch. */
static double bench_device_faults(unsigned int batch, double *single_us)
{
	const size_t len = 64 * VGPU_MiB;
	struct hmm_mirror_opts o = { .prefetch = { .enable = false },
				     .thrash = HMM_THRASH_DEFAULTS };
	struct hmm_mm *mm = mm_new(HMM_BACKEND_UFFD_THREAD, PG);
	struct hmm_mirror m;
	char *buf = map_aligned(len, true);
	struct hmm_dev_fault *f = malloc(batch * sizeof(*f));
	int *st = malloc(batch * sizeof(int));
	double runs[RUNS], lat[RUNS], cpu_runs[RUNS];
	unsigned int seed = 7;
	const unsigned int nbatches = 200;

	memset(buf, 1, len);
	ptes = calloc(len / PG, sizeof(*ptes));
	pte_base = (uintptr_t)buf;
	if (hmm_mirror_init(&m, mm, NULL, &bench_ops, &o)) {
		fprintf(stderr, "hmm_mirror_init failed\n");
		exit(1);
	}
	for (int r = 0; r < RUNS; r++) {
		double t0 = now_us(), c0 = cpu_us(), s[64];

		for (unsigned int b = 0; b < nbatches; b++) {
			for (unsigned int i = 0; i < batch; i++)
				f[i] = (struct hmm_dev_fault){
					(uintptr_t)buf + (size_t)(rand_r(&seed) % (len / PG)) * PG,
					false };
			hmm_mirror_service_faults(&m, f, batch, st);
		}
		cpu_runs[r] = (double)nbatches * batch / ((cpu_us() - c0) / 1e6);
		runs[r] = (double)nbatches * batch / ((now_us() - t0) / 1e6);
		for (int i = 0; i < 64; i++) {
			f[0] = (struct hmm_dev_fault){
				(uintptr_t)buf + (size_t)(rand_r(&seed) % (len / PG)) * PG, false };
			double t1 = now_us();

			hmm_mirror_service_faults(&m, f, 1, st);
			s[i] = now_us() - t1;
		}
		lat[r] = median(s, 64);
	}
	if (m.stats.errors)
		fprintf(stderr, "device faults: %lu errors\n", (unsigned long)m.stats.errors);
	hmm_mirror_fini(&m);
	hmm_mm_destroy(mm);
	munmap(buf, len);
	free(ptes);
	free(f);
	free(st);
	*single_us = median(lat, RUNS);
	faults_cpu_per_s = median(cpu_runs, RUNS);
	return median(runs, RUNS);
}

/* The figures of the 6.1 capability set (fault-back per userfaultfd backend with its raw
 * mechanism, 2 MiB migration both ways), as one line on stdout for the parent. */
static int part61(void)
{
	struct hmm_uffd_caps caps;

	hmm_uffd_probe(&caps);
	if (caps.move || !caps.wp) {
		fprintf(stderr, "hmm_bench: the 6.1 part runs without UFFDIO_MOVE (%s)\n", caps.why);
		return 1;
	}
	double raw_sigbus = bench_raw(true), raw_thread = bench_raw(false);
	struct fault_result f1 = bench_fault_back(HMM_BACKEND_UFFD_SIGBUS, PG, fault_samples, -1);
	struct fault_result f2 = bench_fault_back(HMM_BACKEND_UFFD_THREAD, PG, fault_samples, 0);
	double to_dev, to_sys, mc;

	bench_migrate(1, &to_dev, &to_sys, &mc);
	double pri = bench_pri_fault();

	printf("%.3f %.3f %.3f %.3f %.3f %.3f %.3f %.3f %.3f\n", f1.us, raw_sigbus, f2.us,
	       raw_thread, to_dev, to_sys, pri, mc, copier_share);
	return 0;
}

struct figures61 {
	double fault_us, raw_sigbus_us, fault_thread_us, raw_thread_us, to_dev, to_sys, pri_us;
	double memcpy_gbps;	/* measured in that process, between its migrations */
	double copier_share;	/* of the way back, copied by hmm's copier thread */
};

/* Run this binary again with VGPU_HMM_CAPS=6.1 for the _61 figures. 0 or -1. */
static int run_part61(bool quick, struct figures61 *f)
{
	char exe[512], cmd[600];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *p;
	int got;

	if (n <= 0)
		return -1;
	exe[n] = 0;
	snprintf(cmd, sizeof(cmd), "VGPU_HMM_CAPS=6.1 '%s' --part61%s", exe,
		 quick ? " --quick" : "");
	p = popen(cmd, "r");
	if (!p)
		return -1;
	got = fscanf(p, "%lf %lf %lf %lf %lf %lf %lf %lf %lf", &f->fault_us, &f->raw_sigbus_us,
		     &f->fault_thread_us, &f->raw_thread_us, &f->to_dev, &f->to_sys, &f->pri_us,
		     &f->memcpy_gbps, &f->copier_share);
	return pclose(p) == 0 && got == 9 ? 0 : -1;
}

/* One part alone, 10 times over, for a profiler. */
static int only_part(const char *what)
{
	for (int i = 0; i < 10; i++) {
		double a, b;

		if (!strcmp(what, "migrate")) {
			double mc;

			bench_migrate(1, &a, &b, &mc);
			printf("memcpy %.2f GB/s, to VRAM %.2f GB/s (%.0f %%), to system %.2f GB/s (%.0f %%); "
			       "per CPU second: memcpy %.2f, to VRAM %.2f (%.0f %%), to system %.2f (%.0f %%); "
			       "copier thread %.0f %% of the way back, per CPU second of the busier "
			       "thread %.2f (%.0f %%)\n",
			       mc, a, 100 * a / mc, b, 100 * b / mc, memcpy_cpu_gbps, to_dev_cpu_gbps,
			       100 * to_dev_cpu_gbps / memcpy_cpu_gbps, to_sys_cpu_gbps,
			       100 * to_sys_cpu_gbps / memcpy_cpu_gbps, 100 * copier_share,
			       to_sys_path_gbps, 100 * to_sys_path_gbps / memcpy_cpu_gbps);
		} else if (!strcmp(what, "pri")) {
			printf("page request -> replay %.2f us\n", bench_pri_fault());
		} else if (!strcmp(what, "faults")) {
			b = bench_device_faults(256, &a);
			printf("device faults %.0f k/s, %.0f k per CPU second\n", b / 1000,
			       faults_cpu_per_s / 1000);
		} else {
			fprintf(stderr, "hmm_bench: --only takes migrate, faults or pri, not '%s'\n",
				what);
			return 2;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	bool json = false, quick = false, only61 = false;
	const char *only = NULL;
	struct hmm_uffd_caps caps;
	struct figures61 f61;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--part61")) {
			only61 = true;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
			only = argv[++i];
		} else if (!strcmp(argv[i], "--quick")) {
			fault_samples = 200;
			migrate_bytes = 32 * VGPU_MiB;
			memcpy_pool = 64 * VGPU_MiB;
			quick = true;
		} else {
			fprintf(stderr, "usage: %s [--json] [--quick] [--only migrate|faults|pri]\n",
				argv[0]);
			return 2;
		}
	}
	if (only61)
		return part61();
	if (only)
		return only_part(only);
	hmm_uffd_probe(&caps);
	if (!caps.available || !caps.move || !caps.sigbus) {
		fprintf(stderr, "hmm_bench: %s\n", caps.why);
		return 1;
	}
	if (run_part61(quick, &f61)) {
		fprintf(stderr, "hmm_bench: the run with VGPU_HMM_CAPS=6.1 failed\n");
		return 1;
	}

	double load[1] = { -1 };
	double memcpy_gbps, stream_gbps = bench_memcpy_stream();
	double raw_sigbus = bench_raw(true), raw_thread = bench_raw(false);
	struct fault_result f1 = bench_fault_back(HMM_BACKEND_UFFD_SIGBUS, PG, fault_samples, -1);
	struct fault_result f2s = bench_fault_back(HMM_BACKEND_UFFD_THREAD, PG, fault_samples, 0);
	struct fault_result f2x = bench_fault_back(HMM_BACKEND_UFFD_THREAD, PG, fault_samples, 1);
	struct fault_result f3 = bench_fault_back(HMM_BACKEND_UFFD_SIGBUS, 64 * VGPU_KiB,
						  fault_samples / 4, -1);
	struct fault_result f3m = bench_fault_back(HMM_BACKEND_UFFD_SIGBUS, M2, 16, -1);
	double raw_mprot = bench_raw_mprotect();
	struct fault_result fp = bench_fault_back(HMM_BACKEND_MPROTECT, PG, fault_samples, -1);
	struct fault_result fps_ = bench_fault_back_in(HMM_BACKEND_MPROTECT, PG, fault_samples,
						       -1, true);
	struct fault_result fp64 = bench_fault_back(HMM_BACKEND_MPROTECT, 64 * VGPU_KiB,
						    fault_samples / 4, -1);
	struct fault_result fp2m = bench_fault_back_in(HMM_BACKEND_MPROTECT, M2, 16, -1, true);
	double to_dev, to_sys, to_dev2, to_sys2, single_us, single_b1;

	if (getloadavg(load, 1) != 1)
		load[0] = -1;
	bench_migrate(1, &to_dev, &to_sys, &memcpy_gbps);
	bench_migrate(2, &to_dev2, &to_sys2, NULL);
	double fps = bench_device_faults(256, &single_us);
	double fps1 = bench_device_faults(1, &single_b1);
	double pri_us = bench_pri_fault();

	if (json) {
		bench_cpu_json_begin();
		printf("\"cpu_fault_4k_us\": %.2f, \"migrate_2m_to_vram_gbps\": %.2f, "
		       "\"migrate_2m_to_sys_gbps\": %.2f, \"memcpy_gbps\": %.2f, "
		       "\"device_faults_per_s\": %.0f, \"cpu_fault_4k_thread_us\": %.2f, "
		       "\"cpu_fault_4k_thread_xcpu_us\": %.2f, \"cpu_fault_64k_gbps\": %.2f, "
		       "\"raw_sigbus_4k_us\": %.2f, \"raw_thread_4k_us\": %.2f, "
		       "\"migrate_2m_2threads_to_vram_gbps\": %.2f, "
		       "\"migrate_2m_2threads_to_sys_gbps\": %.2f, \"device_fault_1_us\": %.2f, "
		       "\"cpu_fault_4k_mprotect_us\": %.2f, "
		       "\"cpu_fault_4k_mprotect_shared_us\": %.2f, "
		       "\"cpu_fault_64k_mprotect_gbps\": %.2f, "
		       "\"cpu_fault_2m_mprotect_shared_gbps\": %.2f, \"raw_mprotect_4k_us\": %.2f, "
		       "\"cpu_fault_4k_us_61\": %.2f, \"raw_sigbus_4k_us_61\": %.2f, "
		       "\"cpu_fault_4k_thread_us_61\": %.2f, \"raw_thread_4k_us_61\": %.2f, "
		       "\"migrate_2m_to_vram_gbps_61\": %.2f, \"migrate_2m_to_sys_gbps_61\": %.2f, "
		       "\"pri_fault_us\": %.2f, \"pri_fault_us_61\": %.2f, "
		       "\"memcpy_gbps_61\": %.2f, \"memcpy_stream_gbps\": %.2f, "
		       "\"migrate_2m_to_vram_ratio\": %.2f, \"migrate_2m_to_sys_ratio\": %.2f, "
		       "\"migrate_2m_to_vram_ratio_61\": %.2f, \"migrate_2m_to_sys_ratio_61\": %.2f, "
		       "\"migrate_2m_to_sys_copier_share_61\": %.2f, \"load_avg\": %.2f}\n",
		       f1.us, to_dev, to_sys, memcpy_gbps, fps, f2s.us, f2x.us, f3.gbps,
		       raw_sigbus, raw_thread, to_dev2, to_sys2, single_b1, fp.us, fps_.us,
		       fp64.gbps, fp2m.gbps, raw_mprot, f61.fault_us, f61.raw_sigbus_us,
		       f61.fault_thread_us, f61.raw_thread_us, f61.to_dev, f61.to_sys, pri_us,
		       f61.pri_us, f61.memcpy_gbps, stream_gbps, to_dev / memcpy_gbps,
		       to_sys / memcpy_gbps, f61.to_dev / f61.memcpy_gbps,
		       f61.to_sys / f61.memcpy_gbps, f61.copier_share, load[0]);
		return 0;
	}
	printf("hmm_bench: median of %d runs\n\n", RUNS);
	printf("%-52s %12s %12s %8s\n", "figure", "value", "baseline", "ratio");
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "PERF-01 CPU fault-back 4K, SIGBUS (vs raw SIGBUS)",
	       f1.us, raw_sigbus, f1.us / raw_sigbus);
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "PERF-02 CPU fault-back 4K, thread, same vCPU",
	       f2s.us, raw_thread, f2s.us / raw_thread);
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "PERF-02 CPU fault-back 4K, thread, other vCPU",
	       f2x.us, raw_thread, f2x.us / raw_thread);
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "PERF-01 CPU fault-back 4K, mprotect, private",
	       fp.us, raw_mprot, fp.us / raw_mprot);
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "        CPU fault-back 4K, mprotect, memfd+alias",
	       fps_.us, raw_mprot, fps_.us / raw_mprot);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "        fault-back 64K, mprotect, private",
	       fp64.gbps, memcpy_gbps, fp64.gbps / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "        fault-back 2M, mprotect, memfd+alias",
	       fp2m.gbps, memcpy_gbps, fp2m.gbps / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "PERF-03 fault-back 64K granule (vs memcpy)",
	       f3.gbps, memcpy_gbps, f3.gbps / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "        fault-back 2M granule (vs memcpy)",
	       f3m.gbps, memcpy_gbps, f3m.gbps / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "PERF-04 migrate 2M chunks to VRAM, 1 thread",
	       to_dev, memcpy_gbps, to_dev / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "PERF-04 migrate 2M chunks to system, 1 thread",
	       to_sys, memcpy_gbps, to_sys / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "PERF-04 migrate to VRAM, 2 threads (aggregate)",
	       to_dev2, memcpy_gbps, to_dev2 / memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "PERF-04 migrate to system, 2 threads (aggr.)",
	       to_sys2, memcpy_gbps, to_sys2 / memcpy_gbps);
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "6.1 set: CPU fault-back 4K, SIGBUS (vs raw)",
	       f61.fault_us, f61.raw_sigbus_us, f61.fault_us / f61.raw_sigbus_us);
	printf("%-52s %9.2f us %9.2f us %8.2f\n", "6.1 set: CPU fault-back 4K, thread (vs raw)",
	       f61.fault_thread_us, f61.raw_thread_us, f61.fault_thread_us / f61.raw_thread_us);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "6.1 set: migrate 2M chunks to VRAM, 1 thread",
	       f61.to_dev, f61.memcpy_gbps, f61.to_dev / f61.memcpy_gbps);
	printf("%-52s %7.2f GB/s %7.2f GB/s %8.2f\n", "6.1 set: migrate 2M chunks to system, 1 thread",
	       f61.to_sys, f61.memcpy_gbps, f61.to_sys / f61.memcpy_gbps);
	printf("%-52s %9.0f %% %10s %8s\n", "        ... copied by hmm's copier thread",
	       100 * f61.copier_share, "-", "-");
	printf("%-52s %8.0f k/s %10s %8s\n", "PERF-05 device faults, batches of 256", fps / 1000,
	       "-", "-");
	printf("%-52s %8.0f k/s %10s %8s\n", "        device faults, batches of 1", fps1 / 1000,
	       "-", "-");
	printf("%-52s %9.2f us %10s %8s\n", "PERF-05 device fault service, batch of 1", single_b1,
	       "-", "-");
	printf("%-52s %9.2f us %9.2f us %8s\n", "        page request -> replay 4K (6.1 set)",
	       pri_us, f61.pri_us, "-");
	printf("\nbaselines: memcpy 2 MiB cold %.2f GB/s (%.2f in the 6.1 process, its rows' "
	       "baseline),\n           with streaming stores %.2f GB/s; raw uffd SIGBUS+COPY 4K "
	       "%.2f us;\n           raw uffd thread+COPY 4K %.2f us; raw SIGSEGV+mprotect+memcpy "
	       "4K %.2f us\nload average %.2f\n",
	       memcpy_gbps, f61.memcpy_gbps, stream_gbps, raw_sigbus, raw_thread, raw_mprot,
	       load[0]);
	(void)single_us;
	return 0;
}
