// SPDX-License-Identifier: MIT
/* Submission figures of one attached VF, for the VM tier's benches: the same loop through
 * whichever transport the caller picked, so the kernel driver's transport and the polling
 * tier can be compared in one boot. Not a test: nothing here is asserted. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/clock.h"
#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/include/vgpu_vf_raw.h"
#include <vgpu/gpfifo.h>
#include "vf_guest/vft/vft.h"

/* Latencies of one configuration, microseconds. */
struct bench_lat {
	double call_p50, call_p99, done_p50, done_p99;
	double asleep_pct;	/* submissions that found every engine asleep: they kick */
	double call_asleep_p50;	/* the call's median among those (0: none) */
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The @p quantile of @n samples in ns, in us; sorts @v. */
static double quantile_us(uint64_t *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[(size_t)(p * (double)(n - 1))] / 1000.0;
}

/* Spin on @f (no sleep, no system call) for at most 10 s. */
static int spin_wait(const struct vgpu_fence *f)
{
	uint64_t deadline = cmn_deadline_ns(10ull * 1000 * 1000 * 1000);

	for (uint32_t turn = 1; !vgpu_fence_done(f); turn++)
		if (!(turn % 1024) && cmn_deadline_passed(deadline))
			return vgpu_channel_error(f->ch, NULL, NULL) ?: -ETIMEDOUT;
	return 0;
}

/* @iters submissions of one NOP each, one at a time: the vgpu_submit() call, and submit to
 * the fence seen done (the channel's semaphore release after the NOP), waited for with
 * vgpu_fence_wait() or, with @spin, by spinning on it. A tenth more first, not counted, so
 * the first faults and the engine's wake-up are not in the figures. */
static int submit_loop(struct vgpu_vf *vf, struct vgpu_channel *ch, size_t iters, bool spin,
		       struct bench_lat *r)
{
	/* Whether the engines sleep decides the latency more than the transport does (a kick
	 * wakes a host thread): counted, so the figures can be read. */
	const struct vgpu_doorbell_page *db = vgpu_vf_doorbell_page(vf);
	size_t asleep = 0;
	uint64_t *call = calloc(iters, sizeof(*call)), *done = calloc(iters, sizeof(*done));
	uint64_t *kick = calloc(iters, sizeof(*kick));
	size_t warm = iters / 10;
	uint32_t nop[1];
	struct vgpu_pb pb;
	int ret = call && done && kick ? 0 : -ENOMEM;

	vgpu_pb_init(&pb, nop, 1);
	vgpu_pb_nop(&pb);
	for (size_t i = 0; i < warm + iters && !ret; i++) {
		struct vgpu_fence f;
		bool slept = db && __atomic_load_n(&db->sleeping, __ATOMIC_SEQ_CST);
		uint64_t t0 = cmn_now_ns(), t1, t2;

		ret = vgpu_submit(ch, pb.dw, pb.len, &f);
		t1 = cmn_now_ns();
		if (!ret)
			ret = spin ? spin_wait(&f) : vgpu_fence_wait(&f, 0);
		t2 = cmn_now_ns();
		if (i >= warm) {
			if (slept)
				kick[asleep++] = t1 - t0;
			call[i - warm] = t1 - t0;
			done[i - warm] = t2 - t0;
		}
	}
	if (!ret) {
		r->call_p50 = quantile_us(call, iters, 0.5);
		r->call_p99 = quantile_us(call, iters, 0.99);
		r->done_p50 = quantile_us(done, iters, 0.5);
		r->done_p99 = quantile_us(done, iters, 0.99);
		r->asleep_pct = 100.0 * (double)asleep / (double)iters;
		r->call_asleep_p50 = asleep ? quantile_us(kick, asleep, 0.5) : 0;
	}
	free(call);
	free(done);
	free(kick);
	return ret;
}

/* One channel on a fresh VA space of @vf, the loop, the channel checked and freed, the VA
 * space freed (an unconfirmed free is an error: each run takes a fresh one). */
static int submit_on(struct vgpu_vf *vf, bool spin, size_t iters, struct bench_lat *r)
{
	/* Spinning waiters ask for no interrupt: nobody would take it. */
	const struct vgpu_channel_opts co = { .no_intr = spin };
	struct vgpu_vaspace *as = NULL;
	struct vgpu_channel *ch = NULL;
	int ret = vgpu_vaspace_create(vf, &as);
	int err;

	if (!ret)
		ret = vgpu_channel_create(vf, as, &co, &ch);
	if (!ret)
		ret = submit_loop(vf, ch, iters, spin, r);
	if (!ret)
		ret = vgpu_channel_error(ch, NULL, NULL);
	vgpu_channel_destroy(ch);
	err = vgpu_vaspace_destroy(as);
	return ret ? ret : err;
}

int vft_bench_submit(struct vgpu_vf_transport *t, const char *prefix, unsigned int iters,
		     FILE *out)
{
	/* Waits as a tenant gets them (vgpu_fence_wait: spin 20 us, then sleep on the GPU
	 * interrupt where the transport has one, else in 50 us naps), and spinning only: the
	 * second is the submission path alone, the first adds how the waiter learns of the
	 * completion. */
	struct vgpu_vf_opts vo = { .transport = t, .quiet = true };
	struct bench_lat d, s;
	struct vgpu_vf *vf;
	int ret;

	ret = iters ? vgpu_vf_open(&vo, &vf) : -EINVAL;
	if (ret) {
		/* The transport is the VF's only once the open succeeded. */
		t->ops->destroy(t);
		fprintf(stderr, "vft bench: %s: %s\n", iters ? "cannot open the VF" :
			"no submissions asked for", vgpu_vf_strerror(ret));
		return ret;
	}
	ret = submit_on(vf, true, iters, &s);
	if (!ret)
		ret = submit_on(vf, false, iters, &d);
	if (ret) {
		fprintf(stderr, "vft bench: %s (%s)\n", vgpu_vf_strerror(ret), vgpu_vf_last_error(vf));
	} else {
		fprintf(out, "{\"%s_submit_call_p50_us\": %.2f, \"%s_submit_call_p99_us\": %.2f, "
			"\"%s_submit_done_p50_us\": %.1f, \"%s_submit_done_p99_us\": %.1f, "
			"\"%s_submit_done_spin_p50_us\": %.1f, \"%s_submit_done_spin_p99_us\": %.1f, "
			"\"%s_submit_engine_asleep_pct\": %.0f, \"%s_submit_call_asleep_p50_us\": %.2f, "
			"\"%s_submit_spin_engine_asleep_pct\": %.0f, \"%s_submits\": %u}\n",
			prefix, d.call_p50, prefix, d.call_p99, prefix, d.done_p50, prefix, d.done_p99,
			prefix, s.done_p50, prefix, s.done_p99, prefix, d.asleep_pct, prefix, d.call_asleep_p50, prefix,
			s.asleep_pct, prefix, iters);
		fflush(out);
	}
	vgpu_vf_close(vf);
	return ret;
}
