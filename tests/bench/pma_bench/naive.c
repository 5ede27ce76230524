// SPDX-License-Identifier: MIT
/* The naive baseline of doc/bench/pma_bench.md: one bit per frame, first fit from frame 0,
 * testing bits one at a time. Deliberately simple: it is the floor every real allocator
 * is compared with, so it must not grow clever (no word skips, no cursor, no counters). */
#include <errno.h>
#include <stdlib.h>

#include "common/bitops.h"
#include "common/compiler.h"
#include "pb.h"

struct naive {
	uint64_t *map;		/* bit set = frame allocated */
	uint64_t nr_frames;
	int64_t heap_base;	/* heap bytes before create, for the metadata figure */
};

static void *naive_create(uint64_t nr_frames)
{
	int64_t base = pb_heap_bytes();
	struct naive *n = malloc(sizeof(*n));

	if (!n)
		return NULL;
	n->map = calloc(VGPU_BITMAP_WORDS(nr_frames), sizeof(uint64_t));
	if (!n->map) {
		free(n);
		return NULL;
	}
	n->nr_frames = nr_frames;
	n->heap_base = base;
	return n;
}

static void naive_destroy(void *be)
{
	struct naive *n = be;

	free(n->map);
	free(n);
}

/* First set bit in [f, f + len), or len if none; bit by bit on purpose. */
static uint64_t naive_first_used(const struct naive *n, uint64_t f, uint64_t len)
{
	uint64_t i;

	for (i = 0; i < len; i++)
		if (cmn_test_bit(n->map, f + i))
			break;
	return i;
}

static void naive_mark(struct naive *n, uint64_t f, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		cmn_set_bit(n->map, f + i);
}

/* @len frames at an @align-frame boundary; on a used bit jump to the next aligned
 * candidate after it (align is a power of two). */
static int naive_alloc_contig(struct naive *n, uint64_t len, uint64_t align, uint64_t *first)
{
	uint64_t c = 0;

	while (c + len <= n->nr_frames) {
		uint64_t i = naive_first_used(n, c, len);

		if (i == len) {
			naive_mark(n, c, len);
			*first = c;
			return 0;
		}
		c = ((c + i) | (align - 1)) + 1;
	}
	return -ENOMEM;
}

/* The first @count free aligned pages of @pf frames, marked only once all are found. */
static int naive_alloc_discontig(struct naive *n, uint32_t count, uint64_t pf, uint64_t *pages)
{
	uint32_t got = 0;
	uint64_t c = 0;

	while (got < count && c + pf <= n->nr_frames) {
		uint64_t i = naive_first_used(n, c, pf);

		if (i == pf) {
			pages[got++] = c;
			c += pf;
		} else {
			c = ((c + i) | (pf - 1)) + 1;
		}
	}
	if (got < count)
		return -ENOMEM;
	for (uint32_t j = 0; j < count; j++) {
		naive_mark(n, pages[j], pf);
		pages[j] *= PB_FRAME_SIZE;
	}
	return 0;
}

static int naive_alloc(void *be, const struct pb_req *r, uint64_t *pages)
{
	struct naive *n = be;
	uint64_t pf = r->page_size / PB_FRAME_SIZE, first;
	int ret;

	if (!r->contig)
		return naive_alloc_discontig(n, r->count, pf, pages);
	ret = naive_alloc_contig(n, r->count * pf, pf, &first);
	if (ret)
		return ret;
	for (uint32_t j = 0; j < r->count; j++)
		pages[j] = (first + j * pf) * PB_FRAME_SIZE;
	return 0;
}

static int naive_free(void *be, const struct pb_req *r, const uint64_t *pages)
{
	struct naive *n = be;
	uint64_t pf = r->page_size / PB_FRAME_SIZE;

	for (uint32_t j = 0; j < r->count; j++)
		for (uint64_t i = 0; i < pf; i++)
			cmn_clear_bit(n->map, pages[j] / PB_FRAME_SIZE + i);
	return 0;
}

static int64_t naive_metadata(void *be)
{
	const struct naive *n = be;

	return pb_heap_bytes() - n->heap_base;
}

static uint64_t naive_free_bytes(void *be)
{
	const struct naive *n = be;
	uint64_t used = 0;

	for (uint64_t w = 0; w < VGPU_BITMAP_WORDS(n->nr_frames); w++)
		used += cmn_popcount(n->map[w]);
	return (n->nr_frames - used) * PB_FRAME_SIZE;
}

void pb_naive_take_frame(void *be, uint64_t frame)
{
	struct naive *n = be;

	VGPU_ASSERT(frame < n->nr_frames && !cmn_test_bit(n->map, frame));
	cmn_set_bit(n->map, frame);
}

const struct pb_backend pb_backend_naive = {
	.name = "naive",
	.create = naive_create,
	.destroy = naive_destroy,
	.alloc = naive_alloc,
	.free = naive_free,
	.metadata = naive_metadata,
	.free_bytes = naive_free_bytes,
};
