// SPDX-License-Identifier: MIT
/* The pma behind the benchmark's backend interface, mapped as the brief says: 64 KiB and
 * 2 MiB pages, pinned, CONTIGUOUS for C2M / C32M; contiguous runs are freed with one
 * pma_free_range(), page lists with pma_free_pages(). Metadata is the heap growth since
 * pma_create(), as glibc's mallinfo2() sees it (the pma does not report its own). */
#include <malloc.h>
#include <stdlib.h>

#include "pb.h"
#include "pma/pma.h"

struct pb_pma {
	struct pma *pma;
	int64_t heap_base;
};

int64_t pb_heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	/* uordblks: in-use arena chunks (headers included); hblkhd: mmapped chunks. */
	return (int64_t)(mi.uordblks + mi.hblkhd);
}

static void *pma_be_create(uint64_t nr_frames)
{
	struct pma_region_desc rd = { .base = 0, .size = nr_frames * PB_FRAME_SIZE };
	struct pb_pma *b = malloc(sizeof(*b));

	if (!b)
		return NULL;
	/* Measured after our own wrapper so only the pma's bytes count. */
	b->heap_base = pb_heap_bytes();
	b->pma = pma_create(NULL);
	if (!b->pma)
		goto free_b;
	if (pma_region_add(b->pma, &rd, NULL, 0) < 0)
		goto destroy_pma;
	return b;
destroy_pma:
	pma_destroy(b->pma);
free_b:
	free(b);
	return NULL;
}

static void pma_be_destroy(void *be)
{
	struct pb_pma *b = be;

	pma_destroy(b->pma);
	free(b);
}

static int pma_be_alloc(void *be, const struct pb_req *r, uint64_t *pages)
{
	struct pb_pma *b = be;
	struct pma_alloc_opts o = { .flags = PMA_PINNED | (r->contig ? PMA_CONTIGUOUS : 0) };

	return pma_alloc_pages(b->pma, r->count, r->page_size, &o, pages);
}

static int pma_be_free(void *be, const struct pb_req *r, const uint64_t *pages)
{
	struct pb_pma *b = be;

	if (r->contig)
		return pma_free_range(b->pma, pages[0], r->count * r->page_size, 0);
	return pma_free_pages(b->pma, pages, r->count, r->page_size, 0);
}

static int64_t pma_be_metadata(void *be)
{
	const struct pb_pma *b = be;

	return pb_heap_bytes() - b->heap_base;
}

static uint64_t pma_be_free_bytes(void *be)
{
	const struct pb_pma *b = be;

	return pma_free_bytes(b->pma);
}

static int pma_be_check(void *be)
{
	struct pb_pma *b = be;

	return pma_check(b->pma);
}

const struct pb_backend pb_backend_pma = {
	.name = "pma",
	.create = pma_be_create,
	.destroy = pma_be_destroy,
	.alloc = pma_be_alloc,
	.free = pma_be_free,
	.metadata = pma_be_metadata,
	.free_bytes = pma_be_free_bytes,
	.check = pma_be_check,
};
