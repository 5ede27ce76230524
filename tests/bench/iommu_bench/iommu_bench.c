// SPDX-License-Identifier: MIT
/* iommu_bench - translation cost on an IOTLB hit and on a miss (page walk), map/unmap
 * throughput in strict and lazy mode, and a 1 GiB streaming DMA through 4 KiB vs 2 MiB
 * mappings showing the IOTLB-miss wall. Baselines measured in the same run: a plain walk
 * with no IOTLB (for translation) and a plain memcpy (for streaming).
 *
 *   iommu_bench [--json | --random (only the random-page hit and walk, as JSON)] */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "iommu_model/iommu.h"
#include "tests/bench/bench_cpu.h"

#define PG		IOMMU_PAGE_SIZE
#define RUNS		5
#define HIT_PAGES	256		/* fit in the default 1024-entry IOTLB */
#define WALK_PAGES	16384		/* 64 MiB of 4 KiB leaves: tables spill out of L1/L2 */
#define MAPS		20000
#define STREAM_BYTES	(1ull << 30)
#define BACKING		(64ull << 20)	/* the 1 GiB of IOVA is 16 windows onto this */
#define CHUNK		(64 << 10)
/* Random-page translation: a 1 GiB domain mapped 4 KiB at a time (512 leaf tables, 2 MiB of
 * them: more than L1 and L2 hold), and one sequence of random pages replayed through the
 * IOTLB and as plain walks. The pages are RAND_SET pages drawn from the whole GiB, a DMA
 * working set the default 1024-entry IOTLB holds; the order is random too. */
#define RAND_DOMAIN	(1ull << 30)
#define RAND_SET	512
#define RAND_SEQ	(1u << 20)
/* Hit and walk alternate chunk by chunk (tens of µs each), so that a preemption by
 * other work spoils a few samples of either side, which the medians leave out, rather
 * than a whole run of one side. */
#define RAND_CHUNK	(1u << 13)
#define RAND_ROUNDS	4
#define RAND_SAMPLES	(RAND_ROUNDS * (RAND_SEQ / RAND_CHUNK))

static void die(const char *what, int err)
{
	fprintf(stderr, "iommu_bench: %s: %s\n", what, strerror(-err));
	exit(1);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return (double)v[n / 2];
}

static struct iommu_memobj *memobj(struct iommu *mmu, uint64_t size)
{
	struct iommu_memobj *mo;
	int fd = memfd_create("iommu-bench", MFD_CLOEXEC), ret;

	if (fd < 0 || ftruncate(fd, (off_t)size))
		die("memfd", -errno);
	ret = iommu_memobj_register_fd(mmu, fd, 0, size, &mo);
	if (ret)
		die("memobj", ret);
	close(fd);
	/* Touch it so the stream measures copies, not page faults. */
	memset(iommu_memobj_base(mo), 1, size);
	return mo;
}

static struct iommu_domain *domain(struct iommu *mmu, unsigned int flags)
{
	struct iommu_domain_opts o = { .type = IOMMU_DOMAIN_PAGING, .flags = flags };
	struct iommu_domain *d;
	int ret = iommu_domain_alloc(mmu, &o, &d);

	if (ret)
		die("domain", ret);
	return d;
}

static void map_fixed(struct iommu_domain *d, struct iommu_memobj *mo, uint64_t off,
		      uint64_t len, uint64_t iova)
{
	int ret = iommu_map(d, mo, off, len, IOMMU_READ | IOMMU_WRITE, IOMMU_MAP_FIXED_IOVA, &iova);

	if (ret)
		die("map", ret);
}

/* ns per translation over @pages (a power of two) 4 KiB pages from @iova. */
static double xlate_ns(struct iommu_domain *d, uint64_t iova, unsigned int pages,
		       unsigned int access, uint64_t iters)
{
	struct iommu_xlate x;
	uint64_t sink = 0, t0, t;
	/* Stride through the pages in an order the prefetcher cannot follow. */
	const unsigned int step = 97;

	t0 = cmn_now_ns();
	/* A mask, not '%': a division would cost as much as what is measured. */
	for (uint64_t i = 0, p = 0; i < iters; i++, p = (p + step) & (pages - 1)) {
		if (iommu_translate(d, iova + p * PG + 8, 8, access, &x))
			die("translate", -EFAULT);
		sink += (uintptr_t)x.host;
	}
	t = cmn_now_ns() - t0;
	if (sink == 42)
		puts("");
	return (double)t / (double)iters;
}

static double rate(uint64_t n, uint64_t ns)
{
	return (double)n * 1e9 / (double)ns;
}

struct results {
	double hit_ns, burst_ns, walk_ns, hit_misses_per_op;
	double rand_hit_ns, rand_walk_ns, rand_misses_per_op;
	double rand_hit_min, rand_hit_max, rand_walk_min, rand_walk_max;
	double mt_1_mops, mt_2_mops;	/* translations/s, 1 and 2 threads (hits) */
	double map4k_strict, unmap4k_strict, map4k_lazy, unmap4k_lazy, map2m, unmap2m;
	uint64_t misses_4k, misses_2m;
	double gbps_4k, gbps_2m, gbps_memcpy;
};

struct mt_arg {
	struct iommu_domain *d;
	uint64_t iova;
};

static void *mt_worker(void *p)
{
	struct mt_arg *a = p;

	xlate_ns(a->d, a->iova, HIT_PAGES, IOMMU_READ, 4000000);
	return NULL;
}

/* Aggregate translations/s with @n threads, each on its own 256 pages of one domain. */
static double bench_mt(struct iommu_domain *d, int n)
{
	pthread_t th[2];
	struct mt_arg a[2];
	uint64_t t0 = cmn_now_ns();

	for (int i = 0; i < n; i++) {
		a[i] = (struct mt_arg){ d, (1ull << 40) + (uint64_t)i * HIT_PAGES * PG };
		if (pthread_create(&th[i], NULL, mt_worker, &a[i]))
			die("pthread_create", -EAGAIN);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return rate(4000000ull * (uint64_t)n, cmn_now_ns() - t0) / 1e6;
}

static void bench_xlate(struct results *r)
{
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	struct iommu_stats st;
	uint64_t hit[RUNS], burst[RUNS], walk[RUNS];

	if (iommu_create(NULL, &mmu))
		die("create", -ENOMEM);
	mo = memobj(mmu, WALK_PAGES * PG);
	d = domain(mmu, 0);
	/* One map per page: scattered 4 KiB leaves, nothing merges into a big one. */
	for (unsigned int p = 0; p < WALK_PAGES; p++)
		map_fixed(d, mo, ((p * 7919u) % WALK_PAGES) * PG, PG, (1ull << 40) + p * PG);
	xlate_ns(d, 1ull << 40, HIT_PAGES, IOMMU_READ, 100000);	/* warm */
	iommu_reset_counters(mmu);
	for (int i = 0; i < RUNS; i++) {
		hit[i] = (uint64_t)(1000 * xlate_ns(d, 1ull << 40, HIT_PAGES, IOMMU_READ, 2000000));
		/* A DMA burst within one page: the per-thread front of the IOTLB. */
		burst[i] = (uint64_t)(1000 * xlate_ns(d, 1ull << 40, 1, IOMMU_READ, 2000000));
		walk[i] = (uint64_t)(1000 * xlate_ns(d, 1ull << 40, WALK_PAGES,
						     IOMMU_READ | IOMMU_NOCACHE, 1000000));
	}
	iommu_get_stats(mmu, &st);
	r->hit_misses_per_op = (double)st.iotlb_misses / (RUNS * 4000000.0);
	r->burst_ns = median(burst, RUNS) / 1000;
	r->mt_1_mops = bench_mt(d, 1);
	r->mt_2_mops = bench_mt(d, 2);
	r->hit_ns = median(hit, RUNS) / 1000;
	r->walk_ns = median(walk, RUNS) / 1000;
	iommu_destroy(mmu);
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ns per translation replaying @seq (@n IOVAs). */
static double xlate_seq_ns(struct iommu_domain *d, const uint64_t *seq, size_t n,
			   unsigned int access)
{
	struct iommu_xlate x;
	uint64_t sink = 0, t0 = cmn_now_ns();

	for (size_t i = 0; i < n; i++) {
		if (iommu_translate(d, seq[i], 8, access, &x))
			die("translate", -EFAULT);
		sink += (uintptr_t)x.host;
	}
	if (sink == 42)
		puts("");
	return (double)(cmn_now_ns() - t0) / (double)n;
}

/* The two sides by name, for a profiler: one chunk of @seq each. */
static __attribute__((noinline)) double seq_hit_ns(struct iommu_domain *d, const uint64_t *seq)
{
	return xlate_seq_ns(d, seq, RAND_CHUNK, IOMMU_READ);
}

static __attribute__((noinline)) double seq_walk_ns(struct iommu_domain *d, const uint64_t *seq)
{
	return xlate_seq_ns(d, seq, RAND_CHUNK, IOMMU_READ | IOMMU_NOCACHE);
}

/* IOTLB hit and full walk on one random access pattern over a 1 GiB 4 KiB-mapped domain;
 * the two alternate chunk by chunk, so outside load falls on both alike. */
static void bench_random(struct results *r)
{
	uint64_t *seq = malloc(RAND_SEQ * sizeof(*seq)), set[RAND_SET], x = 20240601;
	uint64_t hit[RAND_SAMPLES], walk[RAND_SAMPLES];
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	struct iommu_stats st;
	struct iommu *mmu;

	if (!seq || iommu_create(NULL, &mmu))
		die("create", -ENOMEM);
	mo = memobj(mmu, BACKING);
	d = domain(mmu, 0);
	/* Page by page, so no 2 MiB leaf can form; 16 windows onto the 64 MiB backing. */
	for (uint64_t off = 0; off < RAND_DOMAIN; off += PG)
		map_fixed(d, mo, off % BACKING, PG, (1ull << 40) + off);
	for (unsigned int i = 0; i < RAND_SET; i++)
		set[i] = (1ull << 40) + splitmix(&x) % (RAND_DOMAIN / PG) * PG + 8;
	for (size_t i = 0; i < RAND_SEQ; i++)
		seq[i] = set[splitmix(&x) % RAND_SET];
	xlate_seq_ns(d, seq, RAND_SEQ, IOMMU_READ);	/* warm: fills the IOTLB */
	xlate_seq_ns(d, seq, RAND_SEQ, IOMMU_READ | IOMMU_NOCACHE);
	iommu_reset_counters(mmu);
	for (unsigned int i = 0; i < RAND_SAMPLES; i++) {
		const uint64_t *chunk = seq + (size_t)(i % (RAND_SEQ / RAND_CHUNK)) * RAND_CHUNK;

		hit[i] = (uint64_t)(1000 * seq_hit_ns(d, chunk));
		walk[i] = (uint64_t)(1000 * seq_walk_ns(d, chunk));
	}
	iommu_get_stats(mmu, &st);
	r->rand_misses_per_op = (double)st.iotlb_misses / (RAND_ROUNDS * (double)RAND_SEQ);
	/* median() sorts: [0] is the minimum, [RAND_SAMPLES - 1] the maximum. */
	r->rand_hit_ns = median(hit, RAND_SAMPLES) / 1000;
	r->rand_walk_ns = median(walk, RAND_SAMPLES) / 1000;
	r->rand_hit_min = hit[0] / 1000.0;
	r->rand_hit_max = hit[RAND_SAMPLES - 1] / 1000.0;
	r->rand_walk_min = walk[0] / 1000.0;
	r->rand_walk_max = walk[RAND_SAMPLES - 1] / 1000.0;
	iommu_destroy(mmu);
	free(seq);
}

/* map then unmap @n mappings of @len: ops/s each way. */
static void bench_map(unsigned int flags, uint64_t len, unsigned int n, double *map_ops,
		      double *unmap_ops)
{
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	uint64_t *iova = malloc(n * sizeof(*iova)), t0, tm, tu;

	if (!iova || iommu_create(NULL, &mmu))
		die("create", -ENOMEM);
	mo = memobj(mmu, 4 << 20);
	d = domain(mmu, flags);
	t0 = cmn_now_ns();
	for (unsigned int i = 0; i < n; i++)
		if (iommu_map(d, mo, len == PG ? (i % 1024) * PG : 0, len, IOMMU_READ, 0, &iova[i]))
			die("map", -ENOMEM);
	tm = cmn_now_ns() - t0;
	t0 = cmn_now_ns();
	for (unsigned int i = 0; i < n; i++)
		if (iommu_unmap(d, iova[i], len, NULL))
			die("unmap", -EINVAL);
	iommu_domain_flush_queue(d);
	tu = cmn_now_ns() - t0;
	*map_ops = rate(n, tm);
	*unmap_ops = rate(n, tu);
	free(iova);
	iommu_destroy(mmu);
}

/* Stream STREAM_BYTES by DMA through mappings of @leaf; returns GB/s, misses in *misses. */
static double bench_stream(uint64_t leaf, uint64_t *misses)
{
	struct iommu *mmu;
	struct iommu_memobj *mo;
	struct iommu_domain *d;
	struct iommu_stats st;
	uint8_t *buf = aligned_alloc(4096, CHUNK);
	uint64_t t0, t;

	if (!buf || iommu_create(NULL, &mmu))
		die("create", -ENOMEM);
	mo = memobj(mmu, BACKING);
	d = domain(mmu, 0);
	/* 1 GiB of IOVA in windows of @leaf-sized maps onto the 64 MiB backing. */
	for (uint64_t off = 0; off < STREAM_BYTES; off += BACKING) {
		if (leaf == PG) {
			/* Page by page so no 2 MiB leaf can form. */
			for (uint64_t p = 0; p < BACKING; p += PG)
				map_fixed(d, mo, p, PG, (1ull << 40) + off + p);
		} else {
			map_fixed(d, mo, 0, BACKING, (1ull << 40) + off);
		}
	}
	if (iommu_attach(mmu, 1, d))
		die("attach", -EBUSY);
	iommu_reset_counters(mmu);
	t0 = cmn_now_ns();
	for (uint64_t off = 0; off < STREAM_BYTES; off += CHUNK)
		if (iommu_dma_read(mmu, 1, (1ull << 40) + off, buf, CHUNK))
			die("dma", -EFAULT);
	t = cmn_now_ns() - t0;
	iommu_get_stats(mmu, &st);
	*misses = st.iotlb_misses;
	free(buf);
	iommu_detach(mmu, 1);
	iommu_destroy(mmu);
	return (double)STREAM_BYTES / (double)t;
}

static double bench_memcpy(void)
{
	uint8_t *src = mmap(NULL, BACKING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *buf = aligned_alloc(4096, CHUNK);
	uint64_t t0, t;

	if (src == MAP_FAILED || !buf)
		die("mmap", -ENOMEM);
	memset(src, 1, BACKING);
	t0 = cmn_now_ns();
	for (uint64_t off = 0; off < STREAM_BYTES; off += CHUNK) {
		memcpy(buf, src + off % BACKING, CHUNK);
		__asm__ __volatile__("" : : "r"(buf) : "memory");
	}
	t = cmn_now_ns() - t0;
	munmap(src, BACKING);
	free(buf);
	return (double)STREAM_BYTES / (double)t;
}

int main(int argc, char **argv)
{
	bool json = argc > 1 && !strcmp(argv[1], "--json");
	struct results r = { 0 };
	char cpu[320];

	if (argc > 1 && !strcmp(argv[1], "--random")) {
		bench_random(&r);	/* only the random-page pair */
		printf("{%s, \"iotlb_hit_ns\": %.2f, \"walk_random_ns\": %.2f, "
		       "\"hit_vs_walk_ratio\": %.3f, \"random_misses_per_op\": %.4f}\n",
		       bench_cpu_json(cpu, sizeof(cpu)), r.rand_hit_ns, r.rand_walk_ns,
		       r.rand_hit_ns / r.rand_walk_ns, r.rand_misses_per_op);
		return 0;
	}
	bench_xlate(&r);
	bench_random(&r);
	bench_map(0, PG, MAPS, &r.map4k_strict, &r.unmap4k_strict);
	bench_map(IOMMU_DOMAIN_LAZY, PG, MAPS, &r.map4k_lazy, &r.unmap4k_lazy);
	bench_map(0, 2 << 20, 2000, &r.map2m, &r.unmap2m);
	r.gbps_memcpy = bench_memcpy();
	r.gbps_4k = bench_stream(PG, &r.misses_4k);
	r.gbps_2m = bench_stream(2 << 20, &r.misses_2m);

	if (json) {
		printf("{%s, \"iotlb_hit_ns\": %.2f, \"walk_random_ns\": %.2f, "
		       "\"hit_vs_walk_ratio\": %.3f, \"iotlb_hit_min_ns\": %.2f, "
		       "\"iotlb_hit_max_ns\": %.2f, \"walk_random_min_ns\": %.2f, "
		       "\"walk_random_max_ns\": %.2f, \"random_misses_per_op\": %.4f, "
		       "\"iotlb_hit_256_ns\": %.2f, \"walk_ns\": %.2f, \"stream_misses_4k\": %llu, "
		       "\"stream_misses_2m\": %llu, \"iotlb_hit_burst_ns\": %.2f, "
		       "\"map_4k_strict_per_s\": %.0f, \"unmap_4k_strict_per_s\": %.0f, "
		       "\"map_4k_lazy_per_s\": %.0f, \"unmap_4k_lazy_per_s\": %.0f, "
		       "\"map_2m_per_s\": %.0f, \"unmap_2m_per_s\": %.0f, "
		       "\"stream_4k_gbps\": %.2f, \"stream_2m_gbps\": %.2f, \"memcpy_gbps\": %.2f, "
		       "\"xlate_1t_mops\": %.1f, \"xlate_2t_mops\": %.1f}\n",
		       bench_cpu_json(cpu, sizeof(cpu)), r.rand_hit_ns, r.rand_walk_ns,
		       r.rand_hit_ns / r.rand_walk_ns, r.rand_hit_min, r.rand_hit_max, r.rand_walk_min,
		       r.rand_walk_max, r.rand_misses_per_op,
		       r.hit_ns, r.walk_ns, (unsigned long long)r.misses_4k,
		       (unsigned long long)r.misses_2m, r.burst_ns, r.map4k_strict,
		       r.unmap4k_strict, r.map4k_lazy, r.unmap4k_lazy, r.map2m, r.unmap2m,
		       r.gbps_4k, r.gbps_2m, r.gbps_memcpy, r.mt_1_mops, r.mt_2_mops);
		return 0;
	}
	printf("iommu_bench (median of %d runs where repeated) on %s, %ld CPUs\n\n", RUNS,
	       bench_cpu_describe(cpu, sizeof(cpu)), bench_cpu_cores());
	printf("%-44s %12s %12s\n", "random pages, 1 GiB domain of 4 KiB maps", "ns/op", "vs walk");
	printf("%-44s %12.2f %12.3f   [%.2f-%.2f]\n", "baseline: plain walk, no IOTLB",
	       r.rand_walk_ns, 1.0, r.rand_walk_min, r.rand_walk_max);
	printf("%-44s %12.2f %12.3f   [%.2f-%.2f] (target <= 10 ns, <= 0.5x walk; misses/op %.4f)\n",
	       "IOTLB hit, same pages in the same order", r.rand_hit_ns, r.rand_hit_ns / r.rand_walk_ns,
	       r.rand_hit_min, r.rand_hit_max, r.rand_misses_per_op);
	printf("\n%-44s %12s %12s\n", "strided pages, 64 MiB domain", "ns/op", "vs walk");
	printf("%-44s %12.2f %12.3f\n", "baseline: plain walk, no IOTLB (4 levels)", r.walk_ns, 1.0);
	printf("%-44s %12.2f %12.3f   (misses/op %.4f)\n",
	       "IOTLB hit, 256-page working set", r.hit_ns, r.hit_ns / r.walk_ns,
	       r.hit_misses_per_op);
	printf("%-44s %12.2f %12.3f\n", "IOTLB hit, burst in one page (per-thread)", r.burst_ns,
	       r.burst_ns / r.walk_ns);
	printf("%-44s %12.1f %12.1f   (M translations/s, 1 thread / 2 threads)\n",
	       "IOTLB hits, threads on one domain", r.mt_1_mops, r.mt_2_mops);
	printf("\n%-44s %12s %12s\n", "map / unmap", "map ops/s", "unmap ops/s");
	printf("%-44s %12.0f %12.0f\n", "4 KiB, strict (unmap waits for flush)", r.map4k_strict,
	       r.unmap4k_strict);
	printf("%-44s %12.0f %12.0f\n", "4 KiB, lazy (flush queue)", r.map4k_lazy, r.unmap4k_lazy);
	printf("%-44s %12.0f %12.0f\n", "2 MiB leaf, strict", r.map2m, r.unmap2m);
	printf("\n%-44s %12s %12s %12s\n", "1 GiB streaming DMA (64 KiB reads)", "IOTLB misses",
	       "GB/s", "vs memcpy");
	printf("%-44s %12s %12.2f %12.3f\n", "baseline: memcpy, no IOMMU", "-", r.gbps_memcpy, 1.0);
	printf("%-44s %12llu %12.2f %12.3f\n", "4 KiB mappings", (unsigned long long)r.misses_4k,
	       r.gbps_4k, r.gbps_4k / r.gbps_memcpy);
	printf("%-44s %12llu %12.2f %12.3f\n", "2 MiB mappings", (unsigned long long)r.misses_2m,
	       r.gbps_2m, r.gbps_2m / r.gbps_memcpy);
	printf("%-44s %12.0fx\n", "misses cut by 2 MiB mappings",
	       r.misses_2m ? (double)r.misses_4k / (double)r.misses_2m : 0.0);
	return 0;
}
