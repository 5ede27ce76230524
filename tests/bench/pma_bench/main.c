// SPDX-License-Identifier: MIT
/* pma_bench: the allocator benchmark of doc/bench/pma_bench.md on 80 GiB, the pma
 * next to a naive first-fit flat bitmap run in the same process.
 *
 *   pma_bench [--json] [--quick] [--verify] [--reps N] [--cpu N | --no-pin] [--pma-only]
 *             [--only fill|mixed|frag|stress]
 *
 * Exit status: 0, 1 if any verification or workload expectation failed (figures are still
 * printed), 2 if the generator does not reproduce the reference trace or setup fails. */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/compiler.h"
#include "pb.h"

#define PB_DEVICE_BYTES		(80ull << 30)
#define TIMER_SAMPLES		100000u

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pma_bench [--json] [--quick] [--verify] [--reps N] [--cpu N | --no-pin] [--pma-only]\n"
		"                 [--only fill|mixed|frag|stress]\n"
		"  --json    print one JSON object on stdout instead of the tables\n"
		"  --quick   smoke run: one repetition, the baseline on a prefix of the\n"
		"            mixed trace and of c3 (figures marked as such)\n"
		"  --verify  shadow-check the throughput runs too, and run the allocator's\n"
		"            own consistency check every 64 Ki ops\n"
		"  --reps N  timed throughput repetitions of the pma after one warm-up; median,\n"
		"            min and max reported (1..15, default 5)\n"
		"  --cpu N   pin to CPU N (default: the CPU it starts on)\n"
		"  --no-pin  do not pin\n"
		"  --pma-only  skip the naive baseline (for profiling; no ratios)\n"
		"  --only P  run only phase P (for profiling; the other figures stay empty)\n"
		"phases (doc/bench/pma_bench.md): (a) fill (b) mixed (c) fragmented; (d) stress:\n"
		"the mixed generator capped at 99 %% instead of 95 %%, failures classified\n");
}

static int parse_opts(int argc, char **argv, struct pb_opts *o)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "quick", no_argument, NULL, 'q' },
		{ "verify", no_argument, NULL, 'v' },
		{ "reps", required_argument, NULL, 'r' },
		{ "cpu", required_argument, NULL, 'c' },
		{ "pma-only", no_argument, NULL, 'p' },
		{ "no-pin", no_argument, NULL, 'n' },
		{ "only", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	*o = (struct pb_opts){ .reps = 5, .cpu = -1, .phases = PB_PHASE_ALL };
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'j': o->json = true; break;
		case 'q': o->quick = true; break;
		case 'v': o->verify = true; break;
		case 'r': o->reps = (unsigned int)atoi(optarg); break;
		case 'c': o->cpu = atoi(optarg); break;
		case 'p': o->pma_only = true; break;
		case 'n': o->no_pin = true; break;
		case 'o':
			o->phases = !strcmp(optarg, "fill") ? PB_PHASE_FILL :
				    !strcmp(optarg, "mixed") ? PB_PHASE_MIXED :
				    !strcmp(optarg, "frag") ? PB_PHASE_FRAG :
				    !strcmp(optarg, "stress") ? PB_PHASE_STRESS : 0;
			if (!o->phases)
				return -EINVAL;
			break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
	}
	if (optind != argc || o->reps < 1 || o->reps > 15) {
		fprintf(stderr, "pma_bench: bad arguments (--reps takes 1..15)\n");
		return -EINVAL;
	}
	if (o->quick)
		o->reps = 1;
	return 0;
}

/* Pin to @cpu, or to the CPU it runs on now (-1): a migration in the middle of a timed
 * segment costs its caches, and the scheduler's choices vary from run to run. */
static int pin_cpu(int cpu, bool no_pin)
{
	cpu_set_t set;

	if (no_pin)
		return 0;
	if (cpu < 0)
		cpu = sched_getcpu();
	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		fprintf(stderr, "pma_bench: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
		return -errno;
	}
	return 0;
}

/* Allocated and touched now, so page faults never land inside a timed segment. */
static void *prefaulted(struct pb_ctx *c, size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (p)
		memset(p, 0, bytes);
	c->harness_bytes += bytes;
	return p;
}

/* Whether the pma's mixed passes run between chunks of the baseline's (doc/bench/pma_bench.md):
 * not with --verify, whose shadow the two would share. */
static bool pair_wanted(const struct pb_ctx *c)
{
	return !c->opt.pma_only && !c->opt.verify && (c->opt.phases & PB_PHASE_MIXED);
}

static int ctx_init(struct pb_ctx *c)
{
	char why[200];
	size_t slots;
	int ret;

	c->nr_frames = PB_DEVICE_BYTES / PB_FRAME_SIZE;
	ret = pb_trace_generate(&c->trace, PB_SEED, c->nr_frames, PB_MIXED_MAIN_OPS,
				PB_MIXED_HI_PCT);
	if (ret) {
		fprintf(stderr, "pma_bench: trace generation: %s\n", strerror(-ret));
		return ret;
	}
	ret = pb_trace_check(&c->trace, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "pma_bench: FAIL: the generator does not reproduce the reference "
			"trace: %s\n", why);
		return ret;
	}
	ret = pb_trace_generate(&c->stress, PB_SEED, c->nr_frames,
				c->opt.quick ? PB_STRESS_QUICK_OPS : PB_STRESS_MAIN_OPS,
				PB_STRESS_HI_PCT);
	if (ret)
		return ret;
	slots = cmn_max(c->trace.nr_slots, c->stress.nr_slots);
	c->slot_pages = prefaulted(c, slots * PB_MAX_PAGES * sizeof(uint64_t));
	c->slot_ok = prefaulted(c, slots);
	if (pair_wanted(c)) {
		c->pair_slot_pages = prefaulted(c, c->trace.nr_slots * PB_MAX_PAGES *
						   sizeof(uint64_t));
		c->pair_slot_ok = prefaulted(c, c->trace.nr_slots);
		if (!c->pair_slot_pages || !c->pair_slot_ok)
			return -ENOMEM;
	}
	c->frame_pages = prefaulted(c, c->nr_frames * sizeof(uint64_t));
	c->odd = prefaulted(c, c->nr_frames / 2 * sizeof(uint64_t));
	c->d2m_pages = prefaulted(c, c->nr_frames / 2 * sizeof(uint64_t));
	/* The largest phase: c0 + c1 + c2 + c3 latencies. */
	ret = pb_lat_arena_init(c->nr_frames * 2 + 4096);
	c->harness_bytes += (c->nr_frames * 2 + 4096) * sizeof(uint32_t) +
			    (c->trace.nr_ops + c->stress.nr_ops) * sizeof(struct pb_op);
	if (ret || !c->slot_pages || !c->slot_ok || !c->frame_pages || !c->odd ||
	    !c->d2m_pages)
		return -ENOMEM;
	return pb_shadow_init(&c->shadow, c->nr_frames);
}

static void ctx_release(struct pb_ctx *c)
{
	pb_shadow_release(&c->shadow);
	pb_lat_arena_release();
	free(c->d2m_pages);
	free(c->odd);
	free(c->frame_pages);
	free(c->pair_slot_ok);
	free(c->pair_slot_pages);
	free(c->slot_ok);
	free(c->slot_pages);
	pb_trace_release(&c->stress);
	pb_trace_release(&c->trace);
}

/* What the clock pair of latency mode costs by itself. */
static void timer_calibrate(struct pb_ctx *c)
{
	struct pb_lat l;
	struct pb_latstat st;

	pb_lat_arena_reset();
	pb_lat_carve(&l, TIMER_SAMPLES);
	for (unsigned int i = 0; i < TIMER_SAMPLES; i++) {
		uint64_t t0 = cmn_now_ns();

		pb_lat_add(&l, cmn_now_ns() - t0);
	}
	st = pb_lat_summary(&l);
	c->timer_p50 = st.p50;
	c->timer_p99 = st.p99;
}

static void run_backend(struct pb_ctx *c, struct pb_result *res, const struct pb_backend *be)
{
	uint64_t t0 = cmn_now_ns();

	memset(res, 0, sizeof(*res));
	res->be = be;
	res->meta_mixed_peak = res->meta_frag_peak = res->meta_fill = INT64_MIN;
	static const struct {
		unsigned int bit;
		const char *name;
		void (*run)(struct pb_ctx *c, struct pb_result *res);
	} phases[] = {
		{ PB_PHASE_FILL, "fill", pb_run_fill },
		{ PB_PHASE_MIXED, "mixed", pb_run_mixed },
		{ PB_PHASE_FRAG, "fragmented", pb_run_frag },
		{ PB_PHASE_STRESS, "stress", pb_run_stress },
	};

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(phases); i++) {
		if (!(c->opt.phases & phases[i].bit))
			continue;
		phases[i].run(c, res);
		if (!c->opt.json)
			fprintf(stderr, "pma_bench: %s %s done (%.1f s)\n", be->name,
				phases[i].name, pb_secs(t0, cmn_now_ns()));
	}
}

int main(int argc, char **argv)
{
	static struct pb_result pma, naive;
	struct pb_ctx c = { 0 };
	int ret;

	if (parse_opts(argc, argv, &c.opt)) {
		usage(stderr);
		return 2;
	}
	if (pin_cpu(c.opt.cpu, c.opt.no_pin))
		return 2;
	c.pinned_cpu = c.opt.no_pin ? -1 : c.opt.cpu >= 0 ? c.opt.cpu : sched_getcpu();
	ret = ctx_init(&c);
	if (ret) {
		ctx_release(&c);
		return 2;
	}
	timer_calibrate(&c);
	pb_measure_harness(&c);
	run_backend(&c, &pma, &pb_backend_pma);
	if (c.opt.pma_only)
		naive.be = &pb_backend_naive;	/* all figures zero: printed as "-" */
	else {
		c.pair = pair_wanted(&c) ? &pma : NULL;
		run_backend(&c, &naive, &pb_backend_naive);
		c.pair = NULL;
	}
	if (c.opt.json)
		pb_report_json(&c, &pma, &naive);
	else
		pb_report_human(&c, &pma, &naive);
	ctx_release(&c);
	return pma.problems || naive.problems ? 1 : 0;
}
