// SPDX-License-Identifier: MIT
/* The status region the GSP reads: channel errors, faults and GP progress land there (and
 * in a read-only mapping of its memfd, as another process sees it); gpu_chan_error() stops
 * a quiesced channel the way the device's own errors do and refuses everything else. */
#include <sys/mman.h>

#include "gpu_test.h"

struct sctx {
	const void *c;			/* the table row, if any */
	struct tgpu *t;
	struct tchan ch;		/* fn 1, channel 3, runlist 0 */
	uint64_t buf_va;		/* fn 1 scratch */
};

static int setup(void **state)
{
	struct sctx *x = calloc(1, sizeof(*x));

	x->c = *state;
	x->t = tgpu_new(2, 1, 8);
	tchan_init(x->t, &x->ch, 1, 3, 0, 64);
	x->buf_va = tgpu_vmem(x->t, 1, 4096, VGPU_GMMU_PAGE_4K);
	*state = x;
	return 0;
}

static int teardown(void **state)
{
	struct sctx *x = *state;

	tgpu_free(x->t);
	free(x);
	return 0;
}

static uint64_t ld(const uint64_t *w)
{
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

/* Wait until *@w reaches @want (the GSP polls the same way). */
static int wait_word(const uint64_t *w, uint64_t want)
{
	uint64_t dl = cmn_deadline_ns(T_TIMEOUT);

	while (ld(w) != want) {
		if (cmn_deadline_passed(dl))
			return -ETIMEDOUT;
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	}
	return 0;
}

/* Work that completes: GP_GET and GP_PUT meet in the status region; no error counted. */
static void test_progress(void **state)
{
	struct sctx *x = *state;
	const struct gpu_status_chan *st = &gpu_status_get(x->t->g)->fns[1].chans[3];

	TM(&x->ch, VGPU_M_SEM_RELEASE, lo32(x->buf_va), hi32(x->buf_va), 7, 0, 0);
	tchan_gp(&x->ch);
	TM(&x->ch, VGPU_M_SEM_RELEASE, lo32(x->buf_va), hi32(x->buf_va), 8, 0, 0);
	tchan_gp(&x->ch);
	tchan_kick(x->t, &x->ch);
	assert_int_equal(tchan_wait(&x->ch), 0);
	assert_int_equal(wait_word(&st->gp_get, 2), 0);
	assert_int_equal(ld(&st->gp_put), 2);
	assert_int_equal(ld(&st->errors), 0);
	assert_int_equal(ld(&st->error), VGPU_CHAN_OK);
}

/* A malformed GP entry: the channel's error count, code and GP_GET, and the region's event
 * count, as the GSP reads them through its own read-only mapping of the memfd. */
static void test_chan_error(void **state)
{
	struct sctx *x = *state;
	const struct gpu_status_shared *own = gpu_status_get(x->t->g);
	size_t bytes = cmn_align_up(sizeof(struct gpu_status_shared), 4096);
	const struct gpu_status_shared *ro = mmap(NULL, bytes, PROT_READ, MAP_SHARED,
						  gpu_status_fd(x->t->g), 0);
	uint64_t events = ld(&own->events);

	assert_true(ro != MAP_FAILED);
	assert_int_equal(ro->magic, GPU_STATUS_MAGIC);
	assert_int_equal(ro->nr_fns, 3);
	tchan_gp_raw(&x->ch, VGPU_GP_OPCODE_ILLEGAL);
	tchan_kick(x->t, &x->ch);
	assert_int_equal(tchan_wait(&x->ch), VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(wait_word(&ro->fns[1].chans[3].errors, 1), 0);
	assert_int_equal(ld(&ro->fns[1].chans[3].error), VGPU_CHAN_ERR_GP_ILLEGAL);
	assert_int_equal(ld(&ro->fns[1].chans[3].gp_get), 0);
	assert_true(ld(&ro->events) > events);
	/* Only that channel: the others of the function and other functions stay clean. */
	assert_int_equal(ld(&ro->fns[1].chans[2].errors), 0);
	assert_int_equal(ld(&ro->fns[2].chans[3].errors), 0);
	/* Reallocation starts the channel over: error and progress words go back to 0, the
	 * count stays (the GSP compares counts, so nothing is posted twice). */
	struct gpu_priv_chan cfg = gpu_priv_shared(x->t->p)->fns[1].chans[3];

	assert_int_equal(gpu_priv_chan_free(x->t->p, 1, 3), 0);
	/* As a driver does for a new channel: its ring starts empty. Left at 1, the scan
	 * (once the engine has taken the allocation) runs the ILLEGAL entry again. */
	x->ch.put = 0;
	__atomic_store_n(&x->ch.userd->gp_put, 0, __ATOMIC_RELEASE);
	cfg.flags &= ~(GPU_CHAN_ENABLED | GPU_CHAN_ALLOCATED);
	assert_int_equal(gpu_priv_chan_alloc(x->t->p, 1, 3, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(x->t->p, 1, 3, true), 0);
	assert_int_equal(gpu_priv_runlist_set(x->t->p, 1, 0, VGPU_BIT(3)), 0);
	assert_int_equal(tchan_wait_state(x->t, &x->ch, GPU_CHAN_STATE_IDLE), 0);
	assert_int_equal(ld(&ro->fns[1].chans[3].error), VGPU_CHAN_OK);
	assert_int_equal(ld(&ro->fns[1].chans[3].errors), 1);
	munmap((void *)ro, bytes);
}

/* An unmapped pushbuffer: one fault counted for the function, with its channel and VA. */
static void test_fault(void **state)
{
	struct sctx *x = *state;
	const struct gpu_status_fn *sf = &gpu_status_get(x->t->g)->fns[1];

	tchan_gp_raw(&x->ch, vgpu_gp_entry(0x7000000000ull, 4));
	tchan_kick(x->t, &x->ch);
	assert_int_equal(tchan_wait(&x->ch), VGPU_CHAN_ERR_PB_FAULT);
	assert_int_equal(wait_word(&sf->faults, 1), 0);
	assert_int_equal(ld(&sf->fault_chid), 3);
	assert_int_equal(ld(&sf->fault_va) & ~0xfffull, 0x7000000000ull);
	assert_true(ld(&sf->fault_reason) != 0);
	assert_int_equal(ld(&gpu_status_get(x->t->g)->fns[2].faults), 0);
}

static const struct err_case {
	const char *name;
	unsigned int fn, chid;
	int err;
	int want;
} err_cases[] = {
	{ "bad function",	9, 3, VGPU_CHAN_ERR_SEM_TIMEOUT, -EINVAL },
	{ "bad channel",	1, 64, VGPU_CHAN_ERR_SEM_TIMEOUT, -EINVAL },
	{ "error 0",		1, 3, VGPU_CHAN_OK, -EINVAL },
	{ "error past the enum",	1, 3, VGPU_CHAN_ERR_NR, -EINVAL },
	{ "free channel",	1, 5, VGPU_CHAN_ERR_SEM_TIMEOUT, -ENOENT },
};

/* Bad arguments change nothing: no error count anywhere. */
static void test_chan_error_args(void **state)
{
	struct sctx *x = *state;
	const struct err_case *c = x->c;

	assert_int_equal(gpu_chan_error(x->t->g, c->fn, c->chid, c->err), c->want);
	assert_int_equal(ld(&gpu_status_get(x->t->g)->events), 0);
	assert_int_equal(tchan_err(&x->ch), 0);
}

/* The watchdog's recovery: a channel stuck in a long SEM_ACQUIRE is disabled, quiesced and
 * stopped with an error; USERD tells the guest, the status region the GSP; a second stop
 * is -EALREADY; the function's other channel still runs work. */
static void test_chan_error_hung(void **state)
{
	struct sctx *x = *state;
	const struct gpu_status_chan *st = &gpu_status_get(x->t->g)->fns[1].chans[3];
	struct gpu_chan_status cs;
	struct tchan other;

	TM(&x->ch, VGPU_M_SEM_ACQUIRE, lo32(x->buf_va), hi32(x->buf_va), 1, 0, 0, 60000000);
	tchan_gp(&x->ch);
	tchan_kick(x->t, &x->ch);
	assert_int_equal(wait_word(&st->gp_put, 1), 0);
	assert_int_equal(ld(&st->gp_get), 0);
	assert_int_equal(gpu_priv_runlist_set(x->t->p, 1, 0, 0), 0);
	assert_int_equal(gpu_priv_chan_enable(x->t->p, 1, 3, false), 0);
	assert_int_equal(gpu_chan_quiesce(x->t->g, 1, 3, VGPU_NSEC_PER_SEC), 0);
	assert_int_equal(gpu_chan_error(x->t->g, 1, 3, VGPU_CHAN_ERR_PREEMPT_TIMEOUT), 0);
	assert_int_equal(tchan_err(&x->ch), VGPU_CHAN_ERR_PREEMPT_TIMEOUT);
	assert_int_equal(ld(&st->errors), 1);
	assert_int_equal(ld(&st->error), VGPU_CHAN_ERR_PREEMPT_TIMEOUT);
	assert_int_equal(gpu_chan_status(x->t->g, 1, 3, &cs), 0);
	assert_int_equal(cs.state, GPU_CHAN_STATE_ERROR);
	assert_true(gpu_intr_ack(x->t->g, 1, VGPU_INTR_CHAN_ERROR) & VGPU_INTR_CHAN_ERROR);
	assert_int_equal(gpu_chan_error(x->t->g, 1, 3, VGPU_CHAN_ERR_PREEMPT_TIMEOUT), -EALREADY);
	assert_int_equal(ld(&st->errors), 1);
	tchan_init(x->t, &other, 1, 4, 0, 16);
	TM(&other, VGPU_M_SEM_RELEASE, lo32(x->buf_va + 64), hi32(x->buf_va), 5, 0, 0);
	tchan_gp(&other);
	tchan_kick(x->t, &other);
	assert_int_equal(tchan_wait(&other), 0);
}

int main(void)
{
	_Static_assert(VGPU_ARRAY_SIZE(err_cases) == 5, "one ERR_CASE per row");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chan_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fault, setup, teardown),
#define ERR_CASE(i) { err_cases[i].name, test_chan_error_args, setup, teardown, (void *)&err_cases[i] }
		ERR_CASE(0), ERR_CASE(1), ERR_CASE(2), ERR_CASE(3), ERR_CASE(4),
		cmocka_unit_test_setup_teardown(test_chan_error_hung, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
