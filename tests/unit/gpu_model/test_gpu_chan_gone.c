// SPDX-License-Identifier: MIT
/* A channel freed in the middle of a method that would run far longer than the quiesce
 * timeout, in a slice longer still (what a VF reset meets): the turn stops at the free,
 * gpu_chan_quiesce() returns, and once the range is scrubbed nothing of the method lands
 * there; one fenced off instead (what a failed VF reset leaves) stops the same way and runs
 * no more. A partition moved to another range takes the function's cached translations
 * with it. Every wait is for an event (a semaphore the engine writes, GP_GET); the quiesce
 * timeout only guards a hang, and the slice outlasts it, so a turn that runs on fails it. */
#include "gpu_test.h"

/* A FILL this long never ends in a test: 32 TiB of VA, every 2 MiB of it the same page. */
#define ALIAS_VA	(1ull << VGPU_GMMU_L0_SHIFT)	/* level-0 entry 1: 512 GiB */
#define ALIAS_L0	64u				/* level-0 entries of it: 32 TiB */
#define PATTERN		0x5a5a5a5au

/* Map [ALIAS_VA, ALIAS_VA + ALIAS_L0 * 512 GiB) of @fn onto its one 2 MiB page at @pa:
 * one level-2 table of 2 MiB leaves, one level-1 table naming it 512 times, named by
 * ALIAS_L0 level-0 entries. Returns the length. */
static uint64_t alias_map(struct tgpu *t, unsigned int fn, uint64_t pa)
{
	uint64_t l1 = tgpu_table(t, fn), l2 = tgpu_table(t, fn);
	unsigned int i0 = (ALIAS_VA >> VGPU_GMMU_L0_SHIFT) & 511;

	for (unsigned int i = 0; i < 512; i++) {
		*tgpu_entry(t, fn, l2, i) = vgpu_gmmu_pte2m(pa, 0);
		*tgpu_entry(t, fn, l1, i) = vgpu_gmmu_pde(l2);
	}
	for (unsigned int i = 0; i < ALIAS_L0; i++)
		*tgpu_entry(t, fn, t->pdb[fn], i0 + i) = vgpu_gmmu_pde(l1);
	return (uint64_t)ALIAS_L0 << VGPU_GMMU_L0_SHIFT;
}

/* Pages of device VRAM [@off, @off + @len) with a non-zero byte. */
static uint64_t dirty_pages(struct tgpu *t, uint64_t off, uint64_t len)
{
	static const uint8_t zero[4096];
	const uint8_t *p = gpu_vram_ptr(t->g, off, len);
	uint64_t n = 0;

	assert_non_null(p);
	for (uint64_t pg = 0; pg < len; pg += 4096)
		n += memcmp(p + pg, zero, sizeof(zero)) != 0;
	return n;
}

/* Function 1 gets a 100 s slice, and @a a semaphore release at @sem (@started there) then
 * a FILL of @len bytes at ALIAS_VA, in one segment: returns once the semaphore is out, so
 * the turn that runs the FILL (minutes of it) is under way. */
static void fill_underway(struct tgpu *t, struct tchan *a, uint64_t sem, uint32_t *started,
			  uint64_t len)
{
	struct gpu_priv_sched_fn long_slice = { .enabled = 1, .quantum_ns = 100 * VGPU_NSEC_PER_SEC,
						.preempt_timeout_ns = 100 * VGPU_NSEC_PER_SEC };
	uint64_t dl;

	assert_int_equal(gpu_priv_sched_fn_set(t->p, 1, &long_slice), 0);
	TM(a, VGPU_M_SEM_RELEASE, lo32(sem), hi32(sem), 1, 0, 0);
	TM(a, VGPU_M_FILL, lo32(ALIAS_VA), hi32(ALIAS_VA), lo32(len), hi32(len), PATTERN);
	tchan_gp(a);
	tchan_kick(t, a);
	dl = cmn_deadline_ns(T_TIMEOUT);
	while (!__atomic_load_n(started, __ATOMIC_ACQUIRE) && !cmn_deadline_passed(dl))
		cmn_sleep_ns(20 * VGPU_NSEC_PER_USEC);
	assert_int_equal(__atomic_load_n(started, __ATOMIC_ACQUIRE), 1);
}

/* What the GSP does for a VF reset (srv_vf_reset()) while VF 1's channel is in a FILL that
 * has minutes left, in a 100 s slice: runlist emptied, channel freed. The quiesce returns,
 * the slice is scrubbed and stays clean: VF 2's work runs on the same engine after it (so
 * the engine has gone on from VF 1's turn), and VF 1's slice is still all zero. */
static void test_freed_mid_method(void **state)
{
	struct tgpu *t = tgpu_new(2, 1, 16);
	uint64_t pa = tgpu_alloc(t, 1, VGPU_GMMU_PAGE_2M), len = alias_map(t, 1, pa);
	uint64_t sem = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	uint64_t dst2 = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_4K);
	uint32_t *started = tgpu_va(t, 1, sem, 4);
	struct gpu_chan_status st;
	struct tchan a, b;

	(void)state;
	tchan_init(t, &a, 1, 0, 0, 16);
	tchan_init(t, &b, 2, 0, 0, 16);
	fill_underway(t, &a, sem, started, len);

	assert_int_equal(gpu_priv_runlist_set(t->p, 1, 0, 0), 0);
	assert_int_equal(gpu_priv_chan_free(t->p, 1, 0), 0);
	assert_int_equal(gpu_chan_quiesce(t->g, 1, 0, T_TIMEOUT), 0);
	assert_int_equal(gpu_vram_scrub(t->g, t->slice, t->slice), 0);
	assert_int_equal(gpu_chan_status(t->g, 1, 0, &st), 0);
	assert_int_equal(st.state, GPU_CHAN_STATE_FREE);
	assert_int_equal(st.methods, 1);	/* the semaphore; the FILL never ended */

	TM(&b, VGPU_M_FILL, lo32(dst2), hi32(dst2), 4096, 0, 1);
	tchan_gp(&b);
	tchan_kick(t, &b);
	assert_int_equal(tchan_wait(&b), 0);
	assert_int_equal(dirty_pages(t, t->slice, t->slice), 0);
	tgpu_free(t);
}

/* Ring @c again and wait for the device to judge the token; whether it accepted it. */
static bool kick_judged(struct tgpu *t, struct tchan *c)
{
	struct gpu_db_stats s = tgpu_db_stats(t, c->fn);

	tchan_kick(t, c);
	assert_int_equal(tgpu_wait_db(t, c->fn, TGPU_DB(rung), s.rung + 1), s.rung + 1);
	return tgpu_db_stats(t, c->fn).accepted != s.accepted;
}

/* The owner fences off what a failed VF reset left in the GSP (gpu_chan_fence()): VF 1's
 * channel in a FILL with minutes left, in a 100 s slice, and an idle one, both still
 * allocated, enabled and resident. The FILL's turn stops (the quiesce returns) and its page
 * stays clean while VF 2's work runs on the engine; the idle channel's doorbell is invalid,
 * also after its allocation is restored (the same gen, as a device reset's replay from old
 * records makes it). Freed and allocated anew (the next gen), it runs. */
static void test_fenced(void **state)
{
	struct tgpu *t = tgpu_new(2, 1, 16);
	uint64_t pa = tgpu_alloc(t, 1, VGPU_GMMU_PAGE_2M), len = alias_map(t, 1, pa);
	uint64_t sem = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	uint64_t dst2 = tgpu_vmem(t, 2, 4096, VGPU_GMMU_PAGE_4K);
	uint32_t *sems = tgpu_va(t, 1, sem, 8);
	struct gpu_priv_chan cfg;
	struct tchan a, c, b;

	(void)state;
	tchan_init(t, &a, 1, 0, 0, 16);
	tchan_init(t, &c, 1, 1, 0, 16);
	tchan_init(t, &b, 2, 0, 0, 16);
	fill_underway(t, &a, sem, &sems[0], len);

	assert_int_equal(gpu_chan_fence(t->g, 1, 0), 0);
	assert_int_equal(gpu_chan_fence(t->g, 1, 1), 0);
	assert_int_equal(gpu_chan_fence(t->g, 1, GPU_FN_MAX_CHANNELS), -EINVAL);
	assert_int_equal(gpu_chan_quiesce(t->g, 1, 0, T_TIMEOUT), 0);
	memset(gpu_vram_ptr(t->g, t->slice + pa, VGPU_GMMU_PAGE_2M), 0, VGPU_GMMU_PAGE_2M);
	TM(&b, VGPU_M_FILL, lo32(dst2), hi32(dst2), 4096, 0, 1);
	tchan_gp(&b);
	tchan_kick(t, &b);
	assert_int_equal(tchan_wait(&b), 0);
	assert_int_equal(dirty_pages(t, t->slice + pa, VGPU_GMMU_PAGE_2M), 0);

	TM(&c, VGPU_M_SEM_RELEASE, lo32(sem + 4), hi32(sem + 4), 2, 0, 0);
	tchan_gp(&c);
	assert_false(kick_judged(t, &c));
	cfg = gpu_priv_shared(t->p)->fns[1].chans[1];
	cfg.flags = GPU_CHAN_RESTORE;
	assert_int_equal(gpu_priv_chan_free(t->p, 1, 1), 0);
	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, 1, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(t->p, 1, 1, true), 0);
	assert_int_equal(gpu_priv_runlist_set(t->p, 1, 0, VGPU_BIT(0) | VGPU_BIT(1)), 0);
	assert_false(kick_judged(t, &c));
	assert_int_equal(__atomic_load_n(&sems[1], __ATOMIC_ACQUIRE), 0);

	cfg.flags = 0;
	assert_int_equal(gpu_priv_chan_free(t->p, 1, 1), 0);
	assert_int_equal(gpu_priv_chan_alloc(t->p, 1, 1, &cfg), 0);
	assert_int_equal(gpu_priv_chan_enable(t->p, 1, 1, true), 0);
	assert_int_equal(gpu_priv_runlist_set(t->p, 1, 0, VGPU_BIT(0) | VGPU_BIT(1)), 0);
	assert_true(kick_judged(t, &c));
	assert_int_equal(tchan_wait(&c), 0);
	assert_int_equal(__atomic_load_n(&sems[1], __ATOMIC_ACQUIRE), 2);
	tgpu_free(t);
}

/* Function 1's partition moves from its range to function 3's (cleared first), the
 * contents copied there but for one word. The next work reads and writes the new range
 * only: the translations its engine cached from the old one went with the move (without
 * that, the reduction read 111 and wrote its sum into the old range). */
static void test_partition_move_drops_tlb(void **state)
{
	struct tgpu *t = tgpu_new(3, 1, 16);
	uint64_t pa = tgpu_alloc(t, 1, 4096), res = tgpu_vmem(t, 1, 4096, VGPU_GMMU_PAGE_4K);
	uint64_t va = 0x200000000ull, from = t->slice, to = 3 * t->slice, delta = to - from;
	volatile uint64_t *r;
	struct tchan c;

	(void)state;
	tgpu_map(t, 1, va, pa, 4096, VGPU_GMMU_PAGE_4K, 0);
	*(uint32_t *)tgpu_ptr(t, 1, pa, 4) = 111;
	tchan_init(t, &c, 1, 0, 0, 16);
	TM(&c, VGPU_M_REDUCE_ADD_U32, lo32(va), hi32(va), 1, lo32(res), hi32(res));
	tchan_gp(&c);
	tchan_kick(t, &c);
	assert_int_equal(tchan_wait(&c), 0);
	r = tgpu_va(t, 1, res, 16);
	assert_int_equal(r[0], 111);

	/* The next reduction is in the ring (not yet published) before the copy. */
	TM(&c, VGPU_M_REDUCE_ADD_U32, lo32(va), hi32(va), 1, lo32(res + 8), hi32(res + 8));
	tchan_gp(&c);
	assert_int_equal(gpu_priv_partition_set(t->p, 3, 0, 0), 0);
	memcpy(gpu_vram_ptr(t->g, to, t->slice), gpu_vram_ptr(t->g, from, t->slice), t->slice);
	*(uint32_t *)gpu_vram_ptr(t->g, to + pa, 4) = 222;
	assert_int_equal(gpu_priv_partition_set(t->p, 1, 0, 0), 0);
	assert_int_equal(gpu_priv_partition_set(t->p, 1, to, t->slice), 0);
	/* The guest's views of its USERD and ring are in the new range now. */
	c.userd = (struct vgpu_userd *)((uint8_t *)c.userd + delta);
	c.gp = (uint64_t *)((uint8_t *)c.gp + delta);
	c.pb = (uint32_t *)((uint8_t *)c.pb + delta);
	tchan_kick(t, &c);
	assert_int_equal(tchan_wait(&c), 0);
	r = tgpu_va(t, 1, res, 16);
	assert_int_equal(r[1], 222);
	r = gpu_vram_ptr(t->g, from + (res - T_VA_BASE), 16);
	assert_int_equal(r[1], 0);	/* nothing written to the old range */
	tgpu_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_freed_mid_method),
		cmocka_unit_test(test_partition_move_drops_tlb),
		cmocka_unit_test(test_fenced),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
