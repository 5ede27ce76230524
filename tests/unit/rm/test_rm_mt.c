// SPDX-License-Identifier: MIT
/* Concurrency: client threads on two VFs allocate, control (some through the GSP), dup and
 * free while the main thread resets one VF and crashes the GSP. Every call either works or
 * gives the error its situation names; afterwards both VFs are usable and hold nothing. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/compiler.h"
#include "common/err.h"
#include "rm/gsp/gsp_test_rpc.h"
#include "rm_test.h"

static struct rm_fixture fx;

struct worker {
	unsigned int fn;
	_Atomic bool *stop;
	_Atomic uint64_t ops;		/* calls made, whatever their result */
	uint64_t unexpected;
	int last_bad;
};

/* Errors a call may meet while its VF is reset or the GSP restarts under it. */
static bool expected(int ret)
{
	return !ret || ret == -EBUSY || ret == -ENOENT || ret == -ENOTRECOVERABLE || ret == -EIO ||
	       ret == -ETIMEDOUT || ret == -EAGAIN;
}

static void note(struct worker *w, int ret)
{
	w->ops++;
	if (!expected(ret)) {
		w->unexpected++;
		w->last_bad = ret;
	}
}

static void *worker_main(void *p)
{
	struct worker *w = p;
	uint32_t hc = 0, hd = 0, hs = 0;

	while (!atomic_load(w->stop)) {
		struct vgpu_rm_quota_info q;
		uint8_t echo[64] = { 1 };
		uint32_t hm = 0, d = 0;
		size_t len;
		int ret;

		if (!hc) {
			ret = rm_t_client(fx.rm, w->fn, &hc, &hd, &hs);
			note(w, ret);
			if (ret) {
				if (hc)
					rm_client_free(fx.rm, w->fn, hc);
				hc = 0;
				continue;
			}
		}
		ret = rm_t_vidmem(fx.rm, w->fn, hc, hd, 64 << 10, &hm);
		note(w, ret);
		if (ret == -EBUSY || ret == -ENOENT) {	/* our client was reset away */
			rm_client_free(fx.rm, w->fn, hc);
			hc = 0;
			continue;
		}
		len = 0;
		note(w, rm_control(fx.rm, w->fn, hc, hs, VGPU_RM_CTRL_GET_QUOTA, &q, &len, sizeof(q)));
		len = sizeof(echo);
		note(w, rm_control(fx.rm, w->fn, hc, hs, VGPU_RM_CTRL_GSP_ECHO, echo, &len, sizeof(echo)));
		if (!ret) {
			note(w, rm_dup(fx.rm, w->fn, hc, hd, &d, hc, hm));
			note(w, rm_free(fx.rm, w->fn, hc, hm));
			if (d)
				note(w, rm_free(fx.rm, w->fn, hc, d));
		}
	}
	if (hc)
		rm_client_free(fx.rm, w->fn, hc);
	return NULL;
}

/* Wait until each of the @n workers has made @more calls since this was called: every
 * phase of the case runs with all of them busy, however slow the machine. */
static void workers_advance(struct worker *w, unsigned int n, uint64_t more)
{
	uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD), from[4];

	assert_true(n <= VGPU_ARRAY_SIZE(from));
	for (unsigned int i = 0; i < n; i++)
		from[i] = atomic_load(&w[i].ops);
	for (unsigned int i = 0; i < n; i++) {
		while (atomic_load(&w[i].ops) - from[i] < more) {
			assert_false(cmn_deadline_passed(dl));
			cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
		}
	}
}

static void test_concurrent_reset_and_crash(void **state)
{
	struct vgpu_rpc_inject crash = { .mode = VGPU_INJ_CRASH };
	struct gsp_stats st;
	uint64_t resets;
	struct worker w[4];
	pthread_t th[4];
	int inj;
	_Atomic bool stop = false;
	uint32_t hc, hd, hs, hm;

	(void)state;
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .fn = 1 + i % 2, .stop = &stop };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	workers_advance(w, 4, 20);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	workers_advance(w, 4, 20);
	gsp_get_stats(rm_gsp(fx.rm), &st);
	resets = st.resets;
	/* The GSP exits on it, so the call gets no reply: -EIO once the watchdog has reaped
	 * the GSP, -ETIMEDOUT if a loaded host ran the watchdog only after the call's
	 * deadline. The restart below is what proves the crash. */
	inj = gsp_call(rm_gsp(fx.rm), 0, VGPU_RPC_FN_INJECT, &crash, sizeof(crash), NULL, 0, NULL);
	assert_true(inj == -EIO || inj == -ETIMEDOUT);
	workers_advance(w, 4, 20);
	/* The reset below needs the GSP back: wait for its restart, however long it takes
	 * (the workers keep going; one that never comes hangs the case until the suite's
	 * timeout). The count moves once the new GSP runs. */
	do {
		cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
		gsp_get_stats(rm_gsp(fx.rm), &st);
	} while (st.resets == resets);
	assert_true(st.resets > resets);
	assert_int_equal(rm_vf_reset(fx.rm, 1), 0);
	workers_advance(w, 4, 20);
	atomic_store(&stop, true);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_true(w[i].ops > 0);
		if (w[i].unexpected)
			fail_msg("worker %d: %llu unexpected results, last %s", i,
				 (unsigned long long)w[i].unexpected, cmn_errname(w[i].last_bad));
	}
	assert_int_equal(rm_object_count(fx.rm, 1), 0);
	assert_int_equal(rm_object_count(fx.rm, 2), 0);
	/* both VFs work afterwards */
	for (unsigned int fn = 1; fn <= 2; fn++) {
		uint64_t dl = cmn_deadline_ns(RM_T_HANG_GUARD);
		int ret;

		while ((ret = rm_t_client(fx.rm, fn, &hc, &hd, &hs)) && !cmn_deadline_passed(dl)) {
			rm_client_free(fx.rm, fn, hc);
			cmn_sleep_ns(VGPU_NSEC_PER_MSEC);
		}
		assert_int_equal(ret, 0);
		assert_int_equal(rm_t_vidmem(fx.rm, fn, hc, hd, 8 << 20, &hm), 0);
		assert_int_equal(rm_client_free(fx.rm, fn, hc), 0);
	}
}

static int setup(void **state)
{
	(void)state;
	return rm_fixture_up(&fx, NULL);
}

static int teardown(void **state)
{
	unsigned int inflight = rm_t_inflight(&fx);

	(void)state;
	rm_fixture_down(&fx);
	return inflight ? -1 : 0;	/* every RPC of the crash and resets ended */
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test_setup_teardown(test_concurrent_reset_and_crash, setup, teardown),
	};

	return cmocka_run_group_tests_name("rm_mt", t, NULL, NULL);
}
