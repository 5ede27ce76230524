// SPDX-License-Identifier: MIT
/* The GSP lanes' CPU priority by share, by counts and window numbers (no clock): an RPC of
 * a function that was served more than its share of every lane's RPCs in the last window
 * runs at CMN_SHARE_NICE_BUSY, a light function's at nice 0, whichever lane serves it and
 * whoever else shares that lane; the rule is the service threads' (common/share.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

/* The suite links the firmware built with its test hooks (libgsp_fw-th.a): see its structs
 * as that build does. */
#define VGPU_TEST_HOOKS 1
#include "rm/gsp/fw/gsp_fw_internal.h"

#define LANES	8
#define VICTIM	63

/* A firmware state with LANES lanes and nothing else: all the share needs. */
static int setup(void **state)
{
	struct gsp_fw *s = calloc(1, sizeof(*s));

	if (!s)
		return -1;
	for (unsigned int i = 0; i < LANES; i++) {
		s->lanes[i].s = s;
		s->lanes[i].idx = i;
	}
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

/* Function @gfid's lane, as the CPU side picks it. */
static struct gsp_fw_lane *lane_of(struct gsp_fw *s, uint32_t gfid)
{
	return &s->lanes[gfid % LANES];
}

/* @n RPCs of @gfid in window @win; the nice of the last. */
static int serve(struct gsp_fw *s, uint32_t gfid, unsigned int n, uint64_t win)
{
	int nice = -1;

	for (unsigned int i = 0; i < n; i++)
		nice = gsp_fw_lane_share(lane_of(s, gfid), gfid, win);
	return nice;
}

/* The victim against 1, 7, 31 and 62 flooding functions: after one window of counts every
 * flood RPC runs at CMN_SHARE_NICE_BUSY and the victim's at 0, on its own lane or on one
 * it shares with flooders (lane 7 holds functions 7, 15, ... 55 and 63). */
static void test_victim_light_flood_busy(void **state)
{
	static const unsigned int ns[] = { 1, 7, 31, 62 };

	for (unsigned int k = 0; k < 4; k++) {
		struct gsp_fw *s = *state;
		uint64_t w = 10 * (k + 1);

		for (uint32_t f = 1; f <= ns[k]; f++)
			assert_int_equal(serve(s, f, 12, w), 0);	/* nothing known yet */
		assert_int_equal(serve(s, VICTIM, 4, w), 0);
		for (uint32_t f = 1; f <= ns[k]; f++)
			assert_int_equal(serve(s, f, 1, w + 1), CMN_SHARE_NICE_BUSY);
		assert_int_equal(serve(s, VICTIM, 1, w + 1), 0);
		/* The lane it shares serves a flooder next: that RPC is put back at 19. */
		if (ns[k] >= 7)
			assert_int_equal(serve(s, 7, 1, w + 1), CMN_SHARE_NICE_BUSY);
	}
}

/* Functions that all use the lanes alike are all busy (none is put behind another); alone,
 * a function is never lowered; one that stops for a window comes back at nice 0. */
static void test_alike_alone_back(void **state)
{
	struct gsp_fw *s = *state;

	for (uint32_t f = 1; f <= 16; f++)
		serve(s, f, 10, 1);
	for (uint32_t f = 1; f <= 16; f++)
		assert_int_equal(serve(s, f, 1, 2), CMN_SHARE_NICE_BUSY);
	/* Window 3: function 1 alone. */
	assert_int_equal(serve(s, 1, 500, 3), CMN_SHARE_NICE_BUSY);
	assert_int_equal(serve(s, 1, 1, 4), 0);
	/* Function 2 last served in window 2: back at 0 in window 5. */
	assert_int_equal(serve(s, 2, 1, 5), 0);
}

/* A function number past the device's is not counted and runs at 0: it changes nobody's
 * share. */
static void test_bad_gfid_not_counted(void **state)
{
	struct gsp_fw *s = *state;

	assert_int_equal(serve(s, 1, 3, 1), 0);
	assert_int_equal(serve(s, 2, 1, 1), 0);
	for (unsigned int i = 0; i < 1000; i++)
		assert_int_equal(gsp_fw_lane_share(&s->lanes[0], GPU_MAX_FNS + i, 1), 0);
	/* 1 of 4 in window 1 between two functions: light (2 * 1 * 1000 <= 4 * 750). */
	assert_int_equal(serve(s, 2, 1, 2), 0);
	assert_int_equal(serve(s, 1, 1, 2), CMN_SHARE_NICE_BUSY);
}

/* Where a lane sleeps: a lane running a flood's RPCs at 19 that served no light function
 * in the last second sleeps at 19 (its flood's wake-ups run ahead of nobody); one that
 * served a light function's RPC within the last 20 windows sleeps at 0, so that function's
 * next RPC wakes a thread at 0. */
static void test_sleep_nice(void **state)
{
	struct gsp_fw *s = *state;
	struct gsp_fw_lane *ln = lane_of(s, 1);

	/* Function 1 floods lane 1 alone next to a light function 63 on lane 7. */
	serve(s, 1, 1000, 1);
	serve(s, VICTIM, 2, 1);
	assert_int_equal(serve(s, 1, 1, 2), CMN_SHARE_NICE_BUSY);
	ln->nice = CMN_SHARE_NICE_BUSY;	/* what the lane thread would run at now */
	/* Lane 1's first RPC (window 1) was light: nothing was known yet. */
	assert_int_equal(gsp_fw_lane_sleep_nice(ln, 2), 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(ln, 20), 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(ln, 21), CMN_SHARE_NICE_BUSY);
	/* The victim's lane sleeps at 0 while it serves the victim. */
	lane_of(s, VICTIM)->nice = CMN_SHARE_NICE_BUSY;
	assert_int_equal(serve(s, VICTIM, 1, 2), 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(lane_of(s, VICTIM), 2), 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(lane_of(s, VICTIM), 21), 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(lane_of(s, VICTIM), 22), CMN_SHARE_NICE_BUSY);
	/* A light function's RPC on the flood's lane: it sleeps at 0 for a second again. */
	for (uint64_t w = 3; w < 30; w++)
		assert_int_equal(serve(s, 1, 100, w), w == 3 ? CMN_SHARE_NICE_BUSY : 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(ln, 30), 0);
	assert_int_equal(gsp_fw_lane_sleep_nice(lane_of(s, 9), 30), 0);	/* never served */
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test_setup_teardown(test_victim_light_flood_busy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alike_alone_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_gfid_not_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sleep_nice, setup, teardown),
	};

	return cmocka_run_group_tests_name("gsp_share", t, NULL, NULL);
}
