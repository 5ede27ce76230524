// SPDX-License-Identifier: MIT
/* The managed-memory case of the guest suite, usable wherever the suite runs (a local
 * process or inside a VM): a replayable channel copies between two halves of a managed
 * allocation the CPU filled; its faults are serviced by migrating the source into VRAM;
 * the CPU then reads the destination back out of VRAM; eviction empties the pool; then,
 * advised PREFER_CPU, half of it is filled by the GPU where it is, in system memory. On a
 * pass the reason buffer holds what was seen (the counters and how the second view of
 * DMA memory was made), for the suite to print: in a VM that is the evidence that the
 * GPU- and CPU-fault paths ran there. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <vgpu/gmmu.h>

#include "common/clock.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_managed.h"
#include "vf_guest/include/vgpu_vf_raw.h"
#include "vf_guest/vft/vft.h"

#define VFT_MANAGED_VA		(1ull << 40)
#define VFT_MANAGED_SIZE	(2ull << 20)

struct mcase {
	struct vgpu_vf *vf;
	struct vgpu_vaspace *as;
	struct vgpu_channel *ch;
	struct vgpu_managed *m;
	char *why;
	size_t len;
	uint64_t t0;		/* when the GPU work was submitted */
	uint64_t ms[2];		/* how long the copy [0] and the remote fill [1] took */
};

static int why(struct mcase *c, int ret, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, c->len, fmt, ap);
	va_end(ap);
	return ret;
}

#define VFT_REMOTE_FILL	0x5eed5eedu

/* Copy the first half of the allocation onto the second on the GPU (or, @fill, fill the
 * second half with VFT_REMOTE_FILL) and wait. */
static int gpu_halves(struct mcase *c, bool fill)
{
	uint64_t half = VFT_MANAGED_SIZE / 2, va = vgpu_managed_va(c->m);
	uint32_t dw[32];
	struct vgpu_pb pb;
	struct vgpu_fence f;
	int ret;

	vgpu_pb_init(&pb, dw, 32);
	if (fill)
		vgpu_pb_fill(&pb, va + half, half, VFT_REMOTE_FILL);
	else
		vgpu_pb_copy(&pb, va, va + half, half);
	c->t0 = cmn_now_ns();
	ret = vgpu_submit(c->ch, pb.dw, pb.len, &f);
	if (!ret)
		ret = vgpu_fence_wait(&f, 30ull * 1000 * 1000 * 1000);
	/* one GP entry: the RM watchdog stops it if it takes 5 s, faults and all */
	c->ms[fill] = (cmn_now_ns() - c->t0) / 1000000;
	return ret;
}

/* Milliseconds from @t, when the service last had a batch to replay for, to @now: -1 if
 * never since @c's work began, 0 if after @now (the service thread is still at it). */
static long long last_serviced_ms(const struct mcase *c, uint64_t t, uint64_t now)
{
	if (t < c->t0)
		return -1;
	return t < now ? (long long)((now - t) / 1000000) : 0;
}

/* Why @c's GPU work failed: the channel's error, the service's counters, the timing (a
 * channel still faulting when it was stopped was slow; one whose last fault was serviced
 * long before was never resumed) and the driver's last message (which names the first
 * fault it could not service, and why). */
static int gpu_failed(struct mcase *c, int ret, const char *what)
{
	uint64_t now = cmn_now_ns();
	struct vgpu_managed_stats st;
	uint32_t code = 0;
	uint64_t fva = 0;

	vgpu_managed_get_stats(c->vf, &st);
	vgpu_channel_error(c->ch, &code, &fva);
	return why(c, -1, "%s on a replayable channel: %s (channel error %u at VA %#llx; "
		   "%llu fault entries, %llu replays, %llu migrated, %llu unserviced; the work "
		   "ran %llu ms, a fault was last serviced %lld ms before its end; driver: %s)",
		   what, vgpu_vf_strerror(ret), code, (unsigned long long)fva,
		   (unsigned long long)st.fault_entries, (unsigned long long)st.replays,
		   (unsigned long long)st.migrated_to_device, (unsigned long long)st.unserviced,
		   (unsigned long long)((now - c->t0) / 1000000),
		   last_serviced_ms(c, st.last_serviced_ns, now),
		   vgpu_vf_last_error(c->vf));
}

/* Advised PREFER_CPU, the second half stays in system memory: the GPU's faults map it
 * there (remote), nothing migrates, and the CPU reads the GPU's writes without a fault. */
static int remote_run(struct mcase *c)
{
	uint32_t *p = vgpu_managed_cpu(c->m);
	size_t words = VFT_MANAGED_SIZE / 8;
	struct vgpu_managed_stats a, b;
	int ret;

	vgpu_managed_get_stats(c->vf, &a);
	ret = vgpu_mem_advise(c->m, VFT_MANAGED_SIZE / 2, VFT_MANAGED_SIZE / 2,
			      VGPU_ADVISE_PREFER_CPU);
	if (ret)
		return why(c, -1, "advise PREFER_CPU: %s", vgpu_vf_strerror(ret));
	ret = gpu_halves(c, true);
	if (ret)
		return gpu_failed(c, ret, "a fill of PREFER_CPU pages");
	vgpu_managed_get_stats(c->vf, &b);
	if (b.mapped_remote == a.mapped_remote || b.migrated_to_device != a.migrated_to_device)
		return why(c, -1, "PREFER_CPU pages: %llu mapped remote, %llu migrated",
			   (unsigned long long)(b.mapped_remote - a.mapped_remote),
			   (unsigned long long)(b.migrated_to_device - a.migrated_to_device));
	for (size_t i = 0; i < words; i++)
		if (p[words + i] != VFT_REMOTE_FILL)
			return why(c, -1, "remote word %zu is %#x after the fill", i, p[words + i]);
	return 0;
}

static int managed_run(struct mcase *c)
{
	uint32_t *p = vgpu_managed_cpu(c->m);
	size_t words = VFT_MANAGED_SIZE / 8;
	struct vgpu_managed_stats st;
	int ret;

	for (size_t i = 0; i < words; i++)
		p[i] = (uint32_t)i * 2654435761u;
	ret = gpu_halves(c, false);
	if (ret)
		return gpu_failed(c, ret, "a copy");
	vgpu_managed_get_stats(c->vf, &st);
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
	ret = remote_run(c);
	if (ret)
		return ret;
	vgpu_managed_get_stats(c->vf, &st);
	return why(c, 0, "%llu KiB checked; GPU faults: %llu entries, %llu batches, %llu replays, "
		   "%llu pages to VRAM, %llu mapped remote, %llu unserviced; CPU faults: %llu, %llu "
		   "pages back; views: %s; GPU work: copy %llu ms, fill %llu ms",
		   (unsigned long long)(VFT_MANAGED_SIZE >> 10),
		   (unsigned long long)st.fault_entries, (unsigned long long)st.batches,
		   (unsigned long long)st.replays, (unsigned long long)st.migrated_to_device,
		   (unsigned long long)st.mapped_remote, (unsigned long long)st.unserviced,
		   (unsigned long long)st.cpu_faults,
		   (unsigned long long)st.migrated_to_cpu, vgpu_managed_view(c->m),
		   (unsigned long long)c->ms[0], (unsigned long long)c->ms[1]);
}

int vft_managed_case(struct vgpu_vf *vf, char *whybuf, size_t len)
{
	struct vgpu_channel_opts co = { .replayable = true };
	struct mcase c = { .vf = vf, .why = whybuf, .len = len };
	int ret, err;

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
	/* no DMA memory left, or a transport that cannot map it twice: skipped, with why */
	if (ret == -EOPNOTSUPP)
		ret = why(&c, 1, "%s: %s", c.ch ? "managed allocation" : "replayable channel",
			  *vgpu_vf_last_error(vf) ? vgpu_vf_last_error(vf) : vgpu_vf_strerror(ret));
	else if (ret)
		ret = why(&c, ret == -ENOMEM ? 1 : -1, "managed allocation: %s",
			  vgpu_vf_strerror(ret));
	else
		ret = managed_run(&c);
	vgpu_mem_free_managed(c.m);
	vgpu_channel_destroy(c.ch);
	err = vgpu_vaspace_destroy(c.as);
	/* The VF outlives the case (and a loop makes a VA space per round): a VA space the
	 * host does not free is a failure. */
	if (err && ret >= 0)
		ret = why(&c, -1, "VA space free: %s", vgpu_vf_strerror(err));
	vgpu_managed_fini(vf);
	return ret;
}
