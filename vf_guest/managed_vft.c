/* The managed-memory case of the guest suite, usable wherever the suite runs (a local
 * process or inside a VM): a replayable channel copies between two halves of a managed
 * allocation the CPU filled; its faults are serviced by migrating the source into VRAM;
 * the CPU then reads the destination back out of VRAM; eviction empties the pool. On a
 * pass the reason buffer holds what was seen (the counters and how the second view of
 * DMA memory was made), for the suite to print: in a VM that is the evidence that the
 * GPU- and CPU-fault paths ran there. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <vgpu/gmmu.h>

#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/managed_internal.h"

#define VFT_MANAGED_VA		(1ull << 40)
#define VFT_MANAGED_SIZE	(2ull << 20)

struct mcase {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	struct vgpu_managed *m;
	char *why;
	size_t len;
};

static int why(struct mcase *c, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, c->len, fmt, ap);
	va_end(ap);
	return ret;
}

/* Copy the first half of the allocation onto the second on the GPU and wait. */
static int gpu_copy_halves(struct mcase *c)
{
	uint64_t half = VFT_MANAGED_SIZE / 2, va = vgpu_managed_va(c->m);
	uint32_t dw[32];
	struct vgpu_pb pb;
	struct vgpu_fence f;
	int ret;

	vgpu_pb_init(&pb, dw, 32);
	vgpu_pb_copy(&pb, va, va + half, half);
	ret = vgpu_submit(c->ch, pb.dw, pb.len, &f);
	return ret ? ret : vgpu_fence_wait(&f, 30ull * 1000 * 1000 * 1000);
}

static int managed_run(struct mcase *c)
{
	uint32_t *p = vgpu_managed_cpu(c->m);
	size_t words = VFT_MANAGED_SIZE / 8;
	struct vgpu_managed_stats st;
	int ret;

	for (size_t i = 0; i < words; i++)
		p[i] = (uint32_t)i * 2654435761u;
	ret = gpu_copy_halves(c);
	vgpu_managed_get_stats(c->vf, &st);
	if (ret) {
		uint32_t code = 0;
		uint64_t fva = 0;

		vgpu_channel_error(c->ch, &code, &fva);
		return why(c, -1, "copy on a replayable channel: %s (channel error %u at VA %#llx; "
			   "%llu fault entries, %llu replays, %llu migrated, %llu unserviced)",
			   vgpu_vf_strerror(ret), code, (unsigned long long)fva,
			   (unsigned long long)st.fault_entries, (unsigned long long)st.replays,
			   (unsigned long long)st.migrated_to_device,
			   (unsigned long long)st.unserviced);
	}
	if (!st.fault_entries || !st.replays || !st.migrated_to_device)
		return why(c, -1, "no fault serviced (%llu entries, %llu replays, %llu migrated)",
			   (unsigned long long)st.fault_entries, (unsigned long long)st.replays,
			   (unsigned long long)st.migrated_to_device);
	for (size_t i = 0; i < words; i++)
		if (p[words + i] != (uint32_t)i * 2654435761u || p[i] != (uint32_t)i * 2654435761u)
			return why(c, -1, "word %zu differs after the copy", i);
	vgpu_managed_get_stats(c->vf, &st);
	if (!st.cpu_faults)
		return why(c, -1, "the CPU read device-resident pages without a fault");
	if (vgpu_managed_evict_all(c->vf) < 0 || vgpu_managed_resident(c->m, 0, VFT_MANAGED_SIZE))
		return why(c, -1, "eviction left pages in VRAM");
	vgpu_managed_get_stats(c->vf, &st);
	return why(c, 0, "%llu KiB checked; GPU faults: %llu entries, %llu batches, %llu replays, "
		   "%llu pages to VRAM; CPU faults: %llu, %llu pages back; write view: %s",
		   (unsigned long long)(VFT_MANAGED_SIZE >> 10),
		   (unsigned long long)st.fault_entries, (unsigned long long)st.batches,
		   (unsigned long long)st.replays, (unsigned long long)st.migrated_to_device,
		   (unsigned long long)st.cpu_faults, (unsigned long long)st.migrated_to_cpu,
		   c->m->view);
}

int vft_managed_case(struct vgpu_vf *vf, char *whybuf, size_t len)
{
	struct vgpu_channel_opts co = { .replayable = true };
	struct mcase c = { .vf = vf, .why = whybuf, .len = len };
	int ret;

	ret = vgpu_managed_init(vf, NULL);
	if (ret == -ENOSYS || ret == -EOPNOTSUPP)
		return why(&c, 1, "managed memory unavailable: %s", vgpu_vf_strerror(ret));
	if (ret && ret != -EEXIST)
		return why(&c, -1, "managed init: %s", vgpu_vf_strerror(ret));
	ret = vgpu_vaspace_create(vf, &c.as);
	if (ret)
		return why(&c, -1, "vaspace: %s", vgpu_vf_strerror(ret));
	ret = vgpu_channel_create(vf, c.as, &co, &c.ch);
	if (!ret)
		ret = vgpu_mem_alloc_managed(c.as, VFT_MANAGED_VA, VFT_MANAGED_SIZE, &c.m);
	if (ret)
		ret = why(&c, ret == -ENOMEM ? 1 : -1, "managed allocation: %s",
			  vgpu_vf_strerror(ret));
	else
		ret = managed_run(&c);
	vgpu_mem_free_managed(c.m);
	vgpu_channel_destroy(c.ch);
	vgpu_vaspace_destroy(c.as);
	vgpu_managed_fini(vf);
	return ret;
}
