// SPDX-License-Identifier: MIT
/* A backend that does nothing: replaying the mixed trace through it measures what the
 * harness itself (op decode, indirect call, slot bookkeeping) costs per op, the floor
 * under every ops/s figure. Never verified: its "pages" are whatever the buffer held. */
#include "pb.h"

static char null_instance;

static void *null_create(uint64_t nr_frames)
{
	(void)nr_frames;
	return &null_instance;
}

static void null_destroy(void *be)
{
	(void)be;
}

static int null_alloc(void *be, const struct pb_req *r, uint64_t *pages)
{
	(void)be;
	(void)r;
	(void)pages;
	return 0;
}

static int null_free(void *be, const struct pb_req *r, const uint64_t *pages)
{
	(void)be;
	(void)r;
	(void)pages;
	return 0;
}

static int64_t null_metadata(void *be)
{
	(void)be;
	return 0;
}

static uint64_t null_free_bytes(void *be)
{
	(void)be;
	return 0;
}

const struct pb_backend pb_backend_null = {
	.name = "null",
	.create = null_create,
	.destroy = null_destroy,
	.alloc = null_alloc,
	.free = null_free,
	.metadata = null_metadata,
	.free_bytes = null_free_bytes,
};
