// SPDX-License-Identifier: MIT
/* Channel errors: every malformed submission of the reference's case 14 and the other
 * error sources put only the offending channel in its error state, with the reason in
 * USERD and an interrupt; the function's other channel and another function keep going. */
#include <poll.h>

#include "gpu_test.h"

struct ectx {
	struct tgpu *t;
	struct tchan bad;		/* fn 1, channel 0, runlist 0 */
	struct tchan same_fn;		/* fn 1, channel 1, runlist 0 */
	struct tchan other_fn;		/* fn 2, channel 0, runlist 1 */
	uint64_t buf_va;		/* fn 1 scratch */
	uint64_t buf2_va;		/* fn 2 scratch */
};

static void bad_gp_len0_addr(struct ectx *x)	{ tchan_gp_raw(&x->bad, x->bad.pb_va); }
static void bad_gp_rsvd(struct ectx *x)		{ tchan_gp_raw(&x->bad, vgpu_gp_entry(x->bad.pb_va, 1) | 1ull << 63); }
static void bad_gp_unaligned(struct ectx *x)	{ tchan_gp_raw(&x->bad, vgpu_gp_entry(x->bad.pb_va, 1) | 2); }
static void bad_gp_illegal(struct ectx *x)	{ tchan_gp_raw(&x->bad, VGPU_GP_OPCODE_ILLEGAL); }
static void bad_gp_opcode(struct ectx *x)	{ tchan_gp_raw(&x->bad, 0x37); }

static void bad_pb_unmapped(struct ectx *x)
{
	tchan_gp_raw(&x->bad, vgpu_gp_entry(0x7000000000ull, 4));
}

static void bad_pb_past_slice(struct ectx *x)
{
	uint64_t va = 0x7100000000ull;

	/* Mapped, but to VF-physical memory past the quota (function 2's slice). */
	tgpu_map(x->t, 1, va, x->t->slice, 4096, VGPU_GMMU_PAGE_4K, 0);
	tchan_gp_raw(&x->bad, vgpu_gp_entry(va, 4));
}

/* A method's header on the last dword of a mapped page, its arguments on an unmapped one. */
static void bad_pb_args_unmapped(struct ectx *x)
{
	uint64_t va = 0x7400000000ull, pa = tgpu_alloc(x->t, 1, 4096);
	uint32_t *pb = tgpu_ptr(x->t, 1, pa, 4096);

	tgpu_map(x->t, 1, va, pa, 4096, VGPU_GMMU_PAGE_4K, 0);
	pb[1023] = VGPU_MTHD(VGPU_M_SEM_RELEASE, 5);
	tchan_gp_raw(&x->bad, vgpu_gp_entry(va + 4092, 6));
}

static void bad_method_unknown(struct ectx *x)
{
	TM(&x->bad, 0x77, 1, 2);
	tchan_gp(&x->bad);
}

static void bad_method_past_segment(struct ectx *x)
{
	TM(&x->bad, VGPU_M_TIMESTAMP, lo32(x->buf_va), hi32(x->buf_va));
	x->bad.pb_off--;			/* the segment ends one dword early */
	tchan_gp(&x->bad);
}

static void bad_method_nargs(struct ectx *x)
{
	TM(&x->bad, VGPU_M_SEM_RELEASE, lo32(x->buf_va), hi32(x->buf_va), 1);
	tchan_gp(&x->bad);
}

static void bad_sem_unaligned(struct ectx *x)
{
	uint64_t va = x->buf_va + 2;

	TM(&x->bad, VGPU_M_SEM_RELEASE, lo32(va), hi32(va), 1, 0, 0);
	tchan_gp(&x->bad);
}

static void bad_copy_unmapped(struct ectx *x)
{
	TM(&x->bad, VGPU_M_COPY, lo32(x->buf_va), hi32(x->buf_va), 0, 0x70, 4096, 0);
	tchan_gp(&x->bad);
}

static void bad_write_ro(struct ectx *x)
{
	uint64_t va = 0x7200000000ull, pa = tgpu_alloc(x->t, 1, 4096);

	tgpu_map(x->t, 1, va, pa, 4096, VGPU_GMMU_PAGE_4K, VGPU_GMMU_RO);
	TM(&x->bad, VGPU_M_FILL, lo32(va), hi32(va), 64, 0, 1);
	tchan_gp(&x->bad);
}

static void bad_sem_timeout(struct ectx *x)
{
	TM(&x->bad, VGPU_M_SEM_ACQUIRE, lo32(x->buf_va + 512), hi32(x->buf_va), 1, 0, 0, 2000);
	tchan_gp(&x->bad);
}

static void bad_userd(struct ectx *x)
{
	struct gpu_priv_chan cfg = gpu_priv_shared(x->t->p)->fns[1].chans[0];

	/* Reallocate channel 0 with USERD past the slice; GP_PUT cannot even be read. */
	assert_int_equal(gpu_priv_chan_free(x->t->p, 1, 0), 0);
	cfg.flags = 0;
	cfg.userd_addr = x->t->slice + 4096;
	assert_int_equal(gpu_priv_chan_alloc(x->t->p, 1, 0, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(x->t->p, 1, 0, true), 0);
	assert_int_equal(gpu_priv_runlist_set(x->t->p, 1, 0, VGPU_BIT(0) | VGPU_BIT(1)), 0);
}

static void bad_gpfifo_unmapped(struct ectx *x)
{
	struct gpu_priv_chan cfg = gpu_priv_shared(x->t->p)->fns[1].chans[0];

	assert_int_equal(gpu_priv_chan_free(x->t->p, 1, 0), 0);
	cfg.flags = 0;
	cfg.gpfifo_va = 0x7300000000ull;
	assert_int_equal(gpu_priv_chan_alloc(x->t->p, 1, 0, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(x->t->p, 1, 0, true), 0);
	assert_int_equal(gpu_priv_runlist_set(x->t->p, 1, 0, VGPU_BIT(0) | VGPU_BIT(1)), 0);
	tchan_gp_raw(&x->bad, 0);
}

static const struct err_case {
	const char *name;
	void (*make_bad)(struct ectx *x);
	enum vgpu_chan_error want;
} err_cases[] = {
	{ "GP length 0 with an address",	bad_gp_len0_addr, VGPU_CHAN_ERR_GP_MALFORMED },
	{ "GP reserved bit",			bad_gp_rsvd, VGPU_CHAN_ERR_GP_MALFORMED },
	{ "GP unaligned pushbuffer",		bad_gp_unaligned, VGPU_CHAN_ERR_GP_MALFORMED },
	{ "GP ILLEGAL opcode",			bad_gp_illegal, VGPU_CHAN_ERR_GP_ILLEGAL },
	{ "GP unknown control opcode",		bad_gp_opcode, VGPU_CHAN_ERR_GP_ILLEGAL },
	{ "pushbuffer unmapped",		bad_pb_unmapped, VGPU_CHAN_ERR_PB_FAULT },
	{ "pushbuffer past the slice",		bad_pb_past_slice, VGPU_CHAN_ERR_PB_FAULT },
	{ "method arguments on an unmapped page", bad_pb_args_unmapped, VGPU_CHAN_ERR_PB_FAULT },
	{ "unknown method",			bad_method_unknown, VGPU_CHAN_ERR_METHOD_ILLEGAL },
	{ "method past its segment",		bad_method_past_segment, VGPU_CHAN_ERR_METHOD_ILLEGAL },
	{ "wrong argument count",		bad_method_nargs, VGPU_CHAN_ERR_METHOD_ARGS },
	{ "unaligned semaphore",		bad_sem_unaligned, VGPU_CHAN_ERR_METHOD_ARGS },
	{ "copy to unmapped VA",		bad_copy_unmapped, VGPU_CHAN_ERR_MMU_FAULT },
	{ "write to a read-only page",		bad_write_ro, VGPU_CHAN_ERR_MMU_FAULT },
	{ "semaphore timeout",			bad_sem_timeout, VGPU_CHAN_ERR_SEM_TIMEOUT },
	{ "USERD outside the slice",		bad_userd, VGPU_CHAN_ERR_USERD_FAULT },
	{ "GPFIFO unmapped",			bad_gpfifo_unmapped, VGPU_CHAN_ERR_GPFIFO_FAULT },
};

/* Queue @n semaphore releases counting up at @sem_va on @c and ring. */
static void good_work(struct tgpu *t, struct tchan *c, uint64_t sem_va, uint32_t from, uint32_t n)
{
	for (uint32_t i = from; i < from + n; i++) {
		TM(c, VGPU_M_SEM_RELEASE, lo32(sem_va), hi32(sem_va), i, 0, 0);
		tchan_gp(c);
	}
	tchan_kick(t, c);
}

static void test_error(void **state)
{
	const struct err_case *ec = *state;
	struct ectx x;
	struct gpu_chan_status s;
	uint32_t *sem1, *sem2;
	int bad_err;

	x.t = tgpu_new(2, 2, 32);
	tchan_init(x.t, &x.bad, 1, 0, 0, 64);
	tchan_init(x.t, &x.same_fn, 1, 1, 0, 64);
	tchan_init(x.t, &x.other_fn, 2, 0, 1, 64);
	x.buf_va = tgpu_vmem(x.t, 1, 4096, VGPU_GMMU_PAGE_4K);
	x.buf2_va = tgpu_vmem(x.t, 2, 4096, VGPU_GMMU_PAGE_4K);
	sem1 = tgpu_va(x.t, 1, x.buf_va, 4096);
	sem2 = tgpu_va(x.t, 2, x.buf2_va, 4096);
	gpu_intr_ack(x.t->g, 1, ~0u);
	gpu_intr_ack(x.t->g, 2, ~0u);

	/* Good work before, in between and after the bad submission. */
	good_work(x.t, &x.same_fn, x.buf_va + 64, 1, 10);
	good_work(x.t, &x.other_fn, x.buf2_va + 64, 1, 10);
	ec->make_bad(&x);
	if (ec->make_bad != bad_userd)
		TM(&x.bad, VGPU_M_SEM_RELEASE, lo32(x.buf_va + 128), hi32(x.buf_va), 99, 0, 0);
	tchan_gp(&x.bad);
	tchan_kick(x.t, &x.bad);
	good_work(x.t, &x.same_fn, x.buf_va + 64, 11, 10);
	good_work(x.t, &x.other_fn, x.buf2_va + 64, 11, 10);

	if (ec->make_bad == bad_userd) {
		/* USERD is unreachable, so the notifier is too: the status says it. */
		assert_int_equal(tchan_wait_state(x.t, &x.bad, GPU_CHAN_STATE_ERROR), 0);
	} else {
		bad_err = tchan_wait(&x.bad);
		assert_int_equal(bad_err, ec->want);
	}
	assert_int_equal(gpu_chan_status(x.t->g, 1, 0, &s), 0);
	assert_int_equal(s.state, GPU_CHAN_STATE_ERROR);
	assert_int_equal(s.error, ec->want);
	assert_int_equal(tchan_wait(&x.same_fn), 0);
	assert_int_equal(tchan_wait(&x.other_fn), 0);
	assert_int_equal(sem1[16], 20);
	assert_int_equal(sem2[16], 20);
	assert_int_equal(sem1[32], 0);			/* nothing after the error ran */
	assert_true(tgpu_wait_intr(x.t, 1, VGPU_INTR_CHAN_ERROR) & VGPU_INTR_CHAN_ERROR);
	assert_int_equal(gpu_intr_ack(x.t->g, 2, VGPU_INTR_CHAN_ERROR), 0);

	/* More doorbells on the dead channel do nothing; the others still work. */
	tchan_kick(x.t, &x.bad);
	good_work(x.t, &x.same_fn, x.buf_va + 64, 21, 5);
	good_work(x.t, &x.other_fn, x.buf2_va + 64, 21, 5);
	assert_int_equal(tchan_wait(&x.same_fn), 0);
	assert_int_equal(tchan_wait(&x.other_fn), 0);
	assert_int_equal(sem1[16], 25);
	assert_int_equal(sem2[16], 25);
	assert_int_equal(sem1[32], 0);
	assert_int_equal(gpu_chan_status(x.t->g, 1, 0, &s), 0);
	assert_int_equal(s.state, GPU_CHAN_STATE_ERROR);
	tgpu_free(x.t);
}

/* The error notifier also records where it happened; a reallocation clears the channel. */
static void test_notifier_and_realloc(void **state)
{
	struct tgpu *t = tgpu_new(1, 1, 32);
	struct tchan c;
	struct pollfd pfd = { .fd = gpu_intr_fd(t->g, 1), .events = POLLIN };
	struct gpu_priv_chan cfg;
	uint64_t sem = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);

	(void)state;
	tchan_init(t, &c, 1, 4, 0, 16);
	TM(&c, VGPU_M_NOP);
	tchan_gp(&c);
	TM(&c, VGPU_M_NOP);
	tchan_gp(&c);
	tchan_gp_raw(&c, VGPU_GP_OPCODE_ILLEGAL);
	tchan_kick(t, &c);
	assert_int_equal(tchan_wait(&c), VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(c.userd->error_gp_get, 2);
	assert_true(c.userd->error_time_ns > 0);
	assert_int_equal(poll(&pfd, 1, 1000), 1);
	/* The GSP frees and reallocates it: a clean channel again. USERD is reset between the
	 * two, once no engine runs the channel (as the RM's free waits): reset after the
	 * reallocation, the periodic scan may first read the old GP_PUT and run the old
	 * entries, ILLEGAL one included, on the new channel. */
	cfg = gpu_priv_shared(t->p)->fns[1].chans[4];
	assert_int_equal(gpu_priv_chan_free(t->p, 1, 4), 0);
	assert_int_equal(gpu_chan_quiesce(t->g, 1, 4, T_TIMEOUT), 0);
	memset(c.userd, 0, sizeof(*c.userd));
	c.put = 0;
	cfg.flags = 0;
	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, 4, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(t->p, 1, 4, true), 0);
	assert_int_equal(gpu_priv_runlist_set(t->p, 1, 0, VGPU_BIT(4)), 0);
	TM(&c, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), 5, 0, 0);
	tchan_gp(&c);
	tchan_kick(t, &c);
	assert_int_equal(tchan_wait(&c), 0);
	assert_int_equal(*(uint32_t *)tgpu_va(t, 1, sem, 4), 5);
	tgpu_free(t);
}

int main(void)
{
	struct CMUnitTest tests[VGPU_ARRAY_SIZE(err_cases) + 1];
	size_t n = 0;

	for (size_t i = 0; i < VGPU_ARRAY_SIZE(err_cases); i++)
		tests[n++] = (struct CMUnitTest){ .name = err_cases[i].name, .test_func = test_error,
						  .initial_state = (void *)&err_cases[i] };
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_notifier_and_realloc);
	return _cmocka_run_group_tests("gpu_errors", tests, n, NULL, NULL);
}
