// SPDX-License-Identifier: MIT
/* vf_fill_copy - the smallest complete libvgpu-vf program: attach to a VF, allocate VRAM,
 * map it into a GPU address space, fill one half on the GPU, copy it to the other half,
 * wait for the fence and check the result on the CPU.
 *
 *   cc -std=gnu11 -Iinclude -I. vf_guest/examples/vf_fill_copy.c build/rel/lib/libvf_guest.a \
 *      -pthread -o vf_fill_copy
 *   ./vf_fill_copy /run/vgpud/vf1.sock
 */
#include <stdio.h>
#include <stdlib.h>

#include "vf_guest/include/vgpu_vf.h"

#define SIZE	(4u << 20)		/* 4 MiB: two 2 MiB halves */
#define VA	0x200000000ull		/* where the buffer appears to the GPU */

static int fail(struct vgpu_vf *vf, const char *what, int err)
{
	fprintf(stderr, "%s: %s%s%s\n", what, vgpu_vf_strerror(err), vf ? ": " : "",
		vf ? vgpu_vf_last_error(vf) : "");
	return 1;
}

int main(int argc, char **argv)
{
	struct vgpu_vf_opts opts = { .socket = argc > 1 ? argv[1] : "/run/vgpud/vf1.sock" };
	struct vgpu_channel *ch = NULL;
	struct vgpu_vaspace *as = NULL;
	struct vgpu_mem *buf = NULL;
	struct vgpu_vf_info info;
	struct vgpu_fence fence;
	struct vgpu_vf *vf;
	struct vgpu_pb pb;
	uint32_t methods[32], *cpu;
	int err, rc = 1;

	err = vgpu_vf_open(&opts, &vf);
	if (err)
		return fail(NULL, "attach", err);
	vgpu_vf_get_info(vf, &info);
	printf("VF %u: %llu MiB of VRAM\n", info.vf_id, (unsigned long long)(info.vram_size >> 20));

	/* Memory, an address space with the buffer in it, and a channel to run work. */
	if ((err = vgpu_mem_alloc(vf, VGPU_MEM_VRAM, SIZE, 2u << 20, &buf)) ||
	    (err = vgpu_vaspace_create(vf, &as)) ||
	    (err = vgpu_va_map(as, VA, buf, 0, SIZE, 2u << 20, 0)) ||
	    (err = vgpu_channel_create(vf, as, NULL, &ch))) {
		fail(vf, "setup", err);
		goto out;
	}

	/* One submission: FILL the first half, COPY it to the second. The channel adds the
	 * semaphore release that the fence waits for. */
	vgpu_pb_init(&pb, methods, 32);
	vgpu_pb_fill(&pb, VA, SIZE / 2, 0xc0ffee00);
	vgpu_pb_copy(&pb, VA, VA + SIZE / 2, SIZE / 2);
	if (pb.err || (err = vgpu_submit(ch, pb.dw, pb.len, &fence)) ||
	    (err = vgpu_fence_wait(&fence, 0))) {
		fail(vf, "submit", pb.err ? pb.err : err);
		goto out;
	}

	cpu = vgpu_mem_cpu(buf);
	for (uint32_t i = 0; i < SIZE / 4; i++) {
		if (cpu[i] != 0xc0ffee00) {
			fprintf(stderr, "word %u is %#x\n", i, cpu[i]);
			goto out;
		}
	}
	printf("GPU filled and copied %u MiB: verified\n", SIZE >> 20);
	rc = 0;
out:
	/* Teardown: an object whose free the host does not confirm goes with vgpu_vf_close(). */
	vgpu_channel_destroy(ch);
	if (as)
		vgpu_va_unmap(as, VA, SIZE);
	vgpu_vaspace_destroy(as);
	vgpu_mem_free(buf);
	vgpu_vf_close(vf);
	return rc;
}
