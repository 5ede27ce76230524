// SPDX-License-Identifier: MIT
/* pma_demo: the allocator as an SR-IOV PF would use it. An 80 GiB device allocator carves
 * eight VF slices as child allocators, runs the mixed workload of doc/bench/pma_bench.md scaled to
 * each slice (a nominal live set between 50 % and 95 % of the slice, 40/35/20/5 % 64K-page
 * lists, 2 MiB, contiguous 32 MiB and 256 MiB of 2 MiB pages), prints one usage row per
 * slice and tears everything down, checking that the device is whole again.
 *
 *   pma_demo [ops per slice]	(default 100000) */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "common/err.h"
#include "pma/pma.h"

#define DEMO_DEVICE		(80 * VGPU_GiB)
#define DEMO_NR_VFS		8u
#define DEMO_PF_RESERVE		(8 * VGPU_GiB)	/* the PF keeps the first 8 GiB */
#define DEMO_SLICE		((DEMO_DEVICE - DEMO_PF_RESERVE) / DEMO_NR_VFS)
#define DEMO_DEFAULT_OPS	100000ul
#define DEMO_SEED		20240601ull

enum demo_cls { CLS_A64K, CLS_C2M, CLS_C32M, CLS_D256M, NR_CLS };

/* A request of the workload: @count pages of @page_size. */
struct demo_req {
	uint32_t count;
	uint64_t page_size;
	bool contig;
	enum demo_cls cls;
};

/* A nominal allocation; @pages is NULL if the pma refused it (its free is then skipped). */
struct demo_live {
	struct demo_req req;
	uint64_t *pages;
};

/* One VF slice and what its workload did. */
struct demo_slice {
	struct pma *pma;
	uint64_t base, size;
	uint64_t rng;
	struct demo_live *live;		/* swap-with-last array, as the generator keeps it */
	size_t nlive;
	uint64_t live_bytes;		/* nominal */
	uint64_t ops, allocs, frees;
	uint64_t fails, frag_fails;	/* frag: failed with enough bytes free */
	uint64_t fails_cls[NR_CLS];
	double secs;
};

/* splitmix64. */
static uint64_t demo_rng(struct demo_slice *s)
{
	uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t demo_rnd(struct demo_slice *s, uint64_t n)
{
	return demo_rng(s) % n;
}

/* draw() of the reference workload. */
static struct demo_req demo_draw(struct demo_slice *s)
{
	uint64_t u = demo_rnd(s, 100);

	if (u < 40)
		return (struct demo_req){ (uint32_t)(1 + demo_rnd(s, 16)), PMA_PAGE_64K, false,
					  CLS_A64K };
	if (u < 75)
		return (struct demo_req){ 1, PMA_PAGE_2M, true, CLS_C2M };
	if (u < 95)
		return (struct demo_req){ 16, PMA_PAGE_2M, true, CLS_C32M };
	return (struct demo_req){ 128, PMA_PAGE_2M, false, CLS_D256M };
}

static uint64_t req_bytes(const struct demo_req *r)
{
	return r->count * r->page_size;
}

/* A failure with at least as many bytes free as asked is a fragmentation failure (the
 * free memory is there, not in the shape asked for); otherwise the slice is full. */
static bool demo_frag_failure(struct demo_slice *s, const struct demo_req *r)
{
	return pma_free_bytes(s->pma) >= req_bytes(r);
}

static int demo_alloc(struct demo_slice *s, struct demo_req r)
{
	struct pma_alloc_opts o = { .flags = PMA_PINNED | (r.contig ? PMA_CONTIGUOUS : 0) };
	struct demo_live *l = &s->live[s->nlive];
	int ret;

	l->req = r;
	l->pages = malloc(r.count * sizeof(uint64_t));
	if (!l->pages)
		return -ENOMEM;
	ret = pma_alloc_pages(s->pma, r.count, r.page_size, &o, l->pages);
	if (ret == -ENOMEM) {
		s->fails++;
		s->fails_cls[r.cls]++;
		s->frag_fails += demo_frag_failure(s, &r);
		free(l->pages);
		l->pages = NULL;
	} else if (ret) {
		fprintf(stderr, "pma_demo: alloc of %u x %llu: %s\n", r.count,
			(unsigned long long)r.page_size, cmn_strerror(ret));
		free(l->pages);
		return ret;
	}
	s->nlive++;
	s->allocs++;
	s->ops++;
	s->live_bytes += req_bytes(&r);
	return 0;
}

static int demo_free(struct demo_slice *s, size_t i)
{
	struct demo_live *l = &s->live[i];
	int ret = 0;

	if (l->pages) {
		ret = l->req.contig ? pma_free_range(s->pma, l->pages[0], req_bytes(&l->req), 0)
				    : pma_free_pages(s->pma, l->pages, l->req.count,
						     l->req.page_size, 0);
		if (ret)
			fprintf(stderr, "pma_demo: free at 0x%llx: %s\n",
				(unsigned long long)l->pages[0], cmn_strerror(ret));
		free(l->pages);
	}
	s->live_bytes -= req_bytes(&l->req);
	*l = s->live[--s->nlive];
	s->frees++;
	s->ops++;
	return ret;
}

/* One main-loop step of the reference generator, executed at once. */
static int demo_step(struct demo_slice *s, uint64_t lo, uint64_t hi, uint64_t budget)
{
	uint64_t start = s->ops;
	struct demo_req r;
	int ret = 0;

	if (demo_rnd(s, 100) < 60) {
		r = demo_draw(s);
		while (!ret && s->live_bytes + req_bytes(&r) > hi && s->ops - start < budget)
			ret = demo_free(s, demo_rnd(s, s->nlive));
		if (!ret && s->ops - start < budget)
			ret = demo_alloc(s, r);
		return ret;
	}
	size_t i = demo_rnd(s, s->nlive);

	if (s->live_bytes - req_bytes(&s->live[i].req) >= lo)
		return demo_free(s, i);
	return demo_alloc(s, demo_draw(s));
}

static int demo_workload(struct demo_slice *s, uint64_t main_ops)
{
	uint64_t lo = s->size / 2, hi = s->size / 100 * 95, t0 = cmn_now_ns(), done;
	int ret = 0;

	/* Every allocation is at least 64 KiB: the live array never needs more entries. */
	s->live = calloc(s->size / PMA_PAGE_64K, sizeof(*s->live));
	if (!s->live)
		return -ENOMEM;
	while (!ret && s->live_bytes < lo)
		ret = demo_alloc(s, demo_draw(s));
	done = s->ops;
	while (!ret && s->ops - done < main_ops)
		ret = demo_step(s, lo, hi, main_ops - (s->ops - done));
	s->secs = (double)(cmn_now_ns() - t0) / 1e9;
	return ret;
}

static void demo_release_live(struct demo_slice *s)
{
	while (s->nlive)
		demo_free(s, s->nlive - 1);
	free(s->live);
	s->live = NULL;
}

static void print_row(const char *name, const struct pma *pma, const struct demo_slice *s)
{
	struct pma_stats st;

	pma_get_stats(pma, &st);
	printf("%-6s %8.2f %8.2f %8.2f %8.2f %8llu %8.2f", name, (double)st.total_bytes / VGPU_GiB,
	       (double)(st.total_bytes - st.free_bytes) / VGPU_GiB,
	       (double)(st.total_bytes - st.free_bytes) * 100 / (double)st.total_bytes,
	       (double)st.free_bytes / VGPU_GiB, (unsigned long long)st.free_2m_pages,
	       (double)st.largest_free_bytes / VGPU_GiB);
	if (s)
		printf(" %8llu %8llu %6llu %5llu %9.1f\n", (unsigned long long)s->ops,
		       (unsigned long long)s->allocs, (unsigned long long)s->fails,
		       (unsigned long long)s->frag_fails, (double)s->ops / s->secs / 1e3);
	else
		printf("\n");
}

/* What the failure columns mean, and which requests failed. */
static void print_legend(const struct demo_slice *vf)
{
	uint64_t c[NR_CLS] = { 0 };

	for (unsigned int i = 0; i < DEMO_NR_VFS; i++)
		for (int k = 0; k < NR_CLS; k++)
			c[k] += vf[i].fails_cls[k];
	printf("\nfails: requests the slice refused (-ENOMEM; the workload goes on, as the "
	       "benchmark's replay does);\nfrag: of those, refused although at least the "
	       "requested bytes were free (no run or whole 2 MiB pages of that shape).\n"
	       "refused requests by class, all slices: A64K %llu, C2M %llu, C32M %llu, "
	       "D256M %llu\n", (unsigned long long)c[CLS_A64K], (unsigned long long)c[CLS_C2M],
	       (unsigned long long)c[CLS_C32M], (unsigned long long)c[CLS_D256M]);
}

static void print_table(struct pma *dev, const struct demo_slice *vf)
{
	printf("%-6s %8s %8s %8s %8s %8s %8s %8s %8s %6s %5s %9s\n", "", "size", "used",
	       "used", "free", "free 2M", "largest", "ops", "allocs", "fails", "frag",
	       "k ops/s");
	printf("%-6s %8s %8s %8s %8s %8s %8s\n", "", "GiB", "GiB", "%", "GiB", "pages",
	       "GiB");
	for (unsigned int i = 0; i < DEMO_NR_VFS; i++) {
		char name[8];

		snprintf(name, sizeof(name), "VF%u", i + 1);
		print_row(name, vf[i].pma, &vf[i]);
	}
	print_row("device", dev, NULL);
	print_legend(vf);
}

/* The device allocator: one 80 GiB region. */
static struct pma *demo_device(void)
{
	struct pma_region_desc rd = { .base = 0, .size = DEMO_DEVICE, .performance = 1 };
	struct pma *dev = pma_create(NULL);
	int ret;

	if (!dev)
		return NULL;
	ret = pma_region_add(dev, &rd, NULL, 0);
	if (ret < 0) {
		fprintf(stderr, "pma_demo: region: %s\n", cmn_strerror(ret));
		pma_destroy(dev);
		return NULL;
	}
	return dev;
}

static int demo_carve(struct pma *dev, struct demo_slice *vf)
{
	int ret = 0;

	for (unsigned int i = 0; i < DEMO_NR_VFS; i++) {
		vf[i].base = DEMO_PF_RESERVE + i * DEMO_SLICE;
		vf[i].size = DEMO_SLICE;
		vf[i].rng = DEMO_SEED + i;
		vf[i].pma = pma_child_create(dev, vf[i].base, vf[i].size, NULL, &ret);
		if (!vf[i].pma) {
			fprintf(stderr, "pma_demo: VF%u slice at %llu GiB: %s\n", i + 1,
				(unsigned long long)(vf[i].base / VGPU_GiB), cmn_strerror(ret));
			return ret ? ret : -ENOMEM;
		}
	}
	return 0;
}

/* Give everything back and check the device is whole again. */
static int demo_teardown(struct pma *dev, struct demo_slice *vf)
{
	int ret = 0;

	for (unsigned int i = 0; i < DEMO_NR_VFS; i++) {
		if (!vf[i].pma)
			continue;
		demo_release_live(&vf[i]);
		if (pma_free_bytes(vf[i].pma) != vf[i].size) {
			fprintf(stderr, "pma_demo: VF%u not empty after freeing everything\n", i + 1);
			ret = -EIO;
		}
		pma_child_destroy(vf[i].pma);
	}
	if (!ret && (pma_free_bytes(dev) != DEMO_DEVICE || pma_check(dev))) {
		fprintf(stderr, "pma_demo: the device is not whole after teardown\n");
		ret = -EIO;
	}
	return ret;
}

int main(int argc, char **argv)
{
	static struct demo_slice vf[DEMO_NR_VFS];
	uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 0) : DEMO_DEFAULT_OPS;
	struct pma *dev;
	int ret;

	if (argc > 2 || !ops) {
		fprintf(stderr, "usage: pma_demo [ops per slice]\n");
		return 2;
	}
	dev = demo_device();
	if (!dev)
		return 1;
	ret = demo_carve(dev, vf);
	printf("pma_demo: %llu GiB device, PF keeps %llu GiB, %u VF slices of %llu GiB; mixed "
	       "workload per slice: prefill to 50 %%, then %llu ops capped at 95 %% (the ops "
	       "column counts the prefill too)\n\n",
	       (unsigned long long)(DEMO_DEVICE / VGPU_GiB),
	       (unsigned long long)(DEMO_PF_RESERVE / VGPU_GiB), DEMO_NR_VFS,
	       (unsigned long long)(DEMO_SLICE / VGPU_GiB), (unsigned long long)ops);
	for (unsigned int i = 0; !ret && i < DEMO_NR_VFS; i++)
		ret = demo_workload(&vf[i], ops);
	for (unsigned int i = 0; !ret && i < DEMO_NR_VFS; i++)
		ret = pma_check(vf[i].pma);
	if (!ret)
		print_table(dev, vf);
	ret = demo_teardown(dev, vf) ?: ret;
	pma_destroy(dev);
	printf("\n%s\n", ret ? "pma_demo: FAILED" : "teardown: every slice emptied and given "
	       "back, device whole again (pma_check clean)");
	return ret ? 1 : 0;
}
