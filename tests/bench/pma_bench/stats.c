// SPDX-License-Identifier: MIT
/* Latency arrays and their nearest-rank summaries. The arrays come out of one arena
 * allocated and pre-faulted before any timing, so the measured allocator is the only
 * thing that touches the heap while a phase runs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/compiler.h"
#include "pb.h"

static struct {
	uint32_t *v;
	size_t cap, used;
} arena;

int pb_lat_arena_init(size_t cap)
{
	arena.v = malloc(cap * sizeof(*arena.v));
	if (!arena.v)
		return -ENOMEM;
	memset(arena.v, 0, cap * sizeof(*arena.v));
	arena.cap = cap;
	arena.used = 0;
	return 0;
}

void pb_lat_arena_release(void)
{
	free(arena.v);
	arena.v = NULL;
}

void pb_lat_arena_reset(void)
{
	arena.used = 0;
}

void pb_lat_carve(struct pb_lat *l, size_t cap)
{
	VGPU_ASSERT(arena.used + cap <= arena.cap);
	l->v = arena.v + arena.used;
	l->cap = cap;
	l->n = 0;
	l->sum = 0;
	arena.used += cap;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least p of the samples at or below it. */
static uint64_t rank(const struct pb_lat *l, double p)
{
	double want = p * (double)l->n;
	size_t r = (size_t)want;

	if ((double)r < want)
		r++;		/* ceil without libm */
	if (r < 1)
		r = 1;
	return l->v[(r > l->n ? l->n : r) - 1];
}

struct pb_latstat pb_lat_summary(struct pb_lat *l)
{
	struct pb_latstat st = { .n = l->n };

	if (!l->n)
		return st;
	qsort(l->v, l->n, sizeof(*l->v), cmp_u32);
	st.p50 = rank(l, 0.50);
	st.p99 = rank(l, 0.99);
	st.p999 = rank(l, 0.999);
	st.max = l->v[l->n - 1];
	st.ops_per_s = l->sum ? (double)l->n * 1e9 / (double)l->sum : 0;
	return st;
}

uint64_t pb_peak_rss(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (uint64_t)ru.ru_maxrss * 1024;	/* Linux reports KiB */
}
