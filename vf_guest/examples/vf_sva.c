// SPDX-License-Identifier: MIT
/* vf_sva - shared virtual addressing from a local guest (ABI 2.1): the GPU reads and writes
 * this process's ordinary malloc'd memory at the same addresses the CPU uses. Bind the
 * process, map the pages holding two malloc'd buffers at GPU VA == CPU VA, then one
 * submission: COPY the first buffer to the second and FILL the first; check both on the CPU.
 *
 *   cc -std=gnu11 -Iinclude -I. vf_guest/examples/vf_sva.c build/rel/lib/libvf_guest.a \
 *      -pthread -o vf_sva
 *   ./vf_sva /run/vgpud/vf1.sock
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "vf_guest/include/vgpu_vf.h"

#define SIZE	(3u << 20)		/* any size, any malloc alignment */
#define PAGE	4096ull

static int fail(struct vgpu_vf *vf, const char *what, int err)
{
	fprintf(stderr, "%s: %s%s%s\n", what, vgpu_vf_strerror(err), vf ? ": " : "",
		vf ? vgpu_vf_last_error(vf) : "");
	return 1;
}

/* Map the whole pages holding [p, p + n) at GPU VA == CPU VA. */
static int map_same(struct vgpu_vaspace *as, const void *p, size_t n)
{
	uint64_t lo = (uintptr_t)p & ~(PAGE - 1);
	uint64_t hi = ((uintptr_t)p + n + PAGE - 1) & ~(PAGE - 1);

	return vgpu_va_map_sva(as, lo, (const void *)(uintptr_t)lo, hi - lo, PAGE, 0);
}

int main(int argc, char **argv)
{
	struct vgpu_vf_opts opts = { .socket = argc > 1 ? argv[1] : "/run/vgpud/vf1.sock" };
	uint32_t *a = malloc(SIZE), *b = malloc(SIZE), methods[32];
	struct vgpu_channel *ch = NULL;
	struct vgpu_vaspace *as = NULL;
	struct vgpu_fence fence;
	struct vgpu_vf *vf;
	struct vgpu_pb pb;
	int err, rc = 1;

	if (!a || !b)
		return fail(NULL, "malloc", -12);
	for (uint32_t i = 0; i < SIZE / 4; i++)
		a[i] = i * 2654435761u;
	err = vgpu_vf_open(&opts, &vf);
	if (err)
		return fail(NULL, "attach", err);
	if ((err = vgpu_sva_bind(vf)) || (err = vgpu_vaspace_create(vf, &as)) ||
	    (err = map_same(as, a, SIZE)) || (err = map_same(as, b, SIZE)) ||
	    (err = vgpu_channel_create(vf, as, NULL, &ch))) {
		fail(vf, "setup", err);
		goto out;
	}
	vgpu_pb_init(&pb, methods, 32);
	vgpu_pb_copy(&pb, (uintptr_t)a, (uintptr_t)b, SIZE);
	vgpu_pb_fill(&pb, (uintptr_t)a, SIZE, 0x5eed5eed);
	if (pb.err || (err = vgpu_submit(ch, pb.dw, pb.len, &fence)) ||
	    (err = vgpu_fence_wait(&fence, 0))) {
		fail(vf, "submit", pb.err ? pb.err : err);
		goto out;
	}
	for (uint32_t i = 0; i < SIZE / 4; i++) {
		if (b[i] != i * 2654435761u || a[i] != 0x5eed5eed) {
			fprintf(stderr, "word %u: b %#x, a %#x\n", i, b[i], a[i]);
			goto out;
		}
	}
	printf("GPU copied and filled %u MiB of malloc'd memory in place: verified\n", SIZE >> 20);
	rc = 0;
out:
	/* Teardown: an object whose free the host does not confirm goes with vgpu_vf_close(). */
	vgpu_channel_destroy(ch);
	vgpu_vaspace_destroy(as);
	vgpu_vf_close(vf);
	free(a);
	free(b);
	return rc;
}
