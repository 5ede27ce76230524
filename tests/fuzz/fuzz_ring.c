// SPDX-License-Identifier: MIT
/* fuzz_ring: the SPSC ring as a host reads a guest's ring (common/ring.h). The input is the
 * shared memory itself: header, head/tail and slots all come from the hostile peer. The
 * checks: attach refuses a bad header, a consumer never reads outside the ring, a producer
 * never writes outside it, whatever head and tail say. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cmn_ring r;
	uint8_t sink[4096];
	void *mem;
	int err;

	if (size > (1u << 20))
		return 0;
	/* Exactly @size bytes, so ASan sees any access past what the peer provided. */
	mem = malloc(size ? size : 1);
	if (!mem)
		return 0;
	memcpy(mem, data, size);
	if (cmn_ring_attach(&r, mem, size) == 0) {
		for (int i = 0; i < 64; i++) {
			const void *slot = cmn_ring_consume_slot(&r, &err);

			if (!slot)
				break;
			memcpy(sink, slot, r.elem_size < sizeof(sink) ? r.elem_size : sizeof(sink));
			cmn_ring_consume_commit(&r);
		}
		for (int i = 0; i < 64; i++)
			if (cmn_ring_push(&r, sink, r.elem_size < sizeof(sink) ? r.elem_size : 8))
				break;
	}
	free(mem);
	return 0;
}
