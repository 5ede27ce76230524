// SPDX-License-Identifier: MIT
/* The test-only RPCs exist only in test builds: the release vgpu-gsp (the program the
 * product ships) answers BLOB, INJECT and WD_TICK like any function it does not know,
 * and keeps working, while vgpu-gsp-test, the one the suites start, serves them. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gsp_test.h"

static struct gsp_fixture fx;
static char release_path[PATH_MAX + 32];

/* The release program of this variant: ../../bin/vgpu-gsp from the test binary. */
static int find_release(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return -1;
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(release_path, sizeof(release_path), "%s/../../bin/vgpu-gsp", exe);
	return access(release_path, X_OK);
}

static int setup_release(void **state)
{
	struct gsp_config c = { .path = release_path };

	(void)state;
	fx = (struct gsp_fixture){ 0 };
	if (find_release()) {
		print_error("no release vgpu-gsp at %s\n", release_path);
		return -1;
	}
	return gsp_fixture_up(&fx, &c);
}

static int setup_test_build(void **state)
{
	(void)state;
	fx = (struct gsp_fixture){ 0 };	/* the default program: vgpu-gsp-test */
	return gsp_fixture_up(&fx, NULL);
}

static int teardown(void **state)
{
	(void)state;
	gsp_fixture_down(&fx);
	return 0;
}

static uint64_t gsp_rpcs(void)
{
	struct vgpu_rpc_info info;

	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_GET_INFO, NULL, 0, &info, sizeof(info),
				  NULL), 0);
	return info.rpcs;
}

/* The release GSP does not know the test-only numbers: -EOPNOTSUPP, nothing happens (a
 * CRASH injection leaves the same process running), and the RPCs still reach it. */
static void test_release_refuses(void **state)
{
	struct vgpu_rpc_blob b = { .len = 4096, .seed = 1 };
	struct vgpu_rpc_inject crash = { .mode = VGPU_INJ_CRASH };
	struct vgpu_rpc_inject hang = { .mode = VGPU_INJ_HANG };
	struct vgpu_rpc_wd_tick tick = { .fn = 1, .advance_ns = VGPU_NSEC_PER_SEC };
	uint8_t rep[4096];
	size_t got = 1;
	int pid = gsp_pid(fx.gsp);
	uint64_t before = gsp_rpcs();

	(void)state;
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_BLOB, &b, sizeof(b), rep, sizeof(rep), &got),
			 -EOPNOTSUPP);
	assert_int_equal(got, 0);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_INJECT, &crash, sizeof(crash), NULL, 0,
				  NULL), -EOPNOTSUPP);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_INJECT, &hang, sizeof(hang), NULL, 0, NULL),
			 -EOPNOTSUPP);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_WD_TICK, &tick, sizeof(tick), rep,
				  sizeof(rep), NULL), -EOPNOTSUPP);
	/* Served and counted: the first GET_INFO and the four refused RPCs. */
	assert_int_equal(gsp_rpcs(), before + 5);
	assert_int_equal(gsp_pid(fx.gsp), pid);
	assert_false(gsp_needs_reset(fx.gsp));
	assert_int_equal(gsp_call(fx.gsp, 2, VGPU_RPC_FN_NOP, NULL, 0, NULL, 0, NULL), 0);
}

/* The test build's GSP serves them: the suites' fault injection is real. */
static void test_test_build_serves(void **state)
{
	struct vgpu_rpc_blob b = { .len = 64, .seed = 5 };
	uint8_t rep[64];
	size_t got = 0;

	(void)state;
	assert_int_equal(gsp_call(fx.gsp, 1, VGPU_RPC_FN_BLOB, &b, sizeof(b), rep, sizeof(rep), &got),
			 0);
	assert_int_equal(got, sizeof(rep));
	for (size_t i = 0; i < sizeof(rep); i++)
		assert_int_equal(rep[i], (uint8_t)(5 + i * 131));
	assert_int_equal(gsp_inject(fx.gsp, 0, VGPU_INJ_CLEAR, 0, 0, 0), 0);
	/* WD_TICK checks its channel, then needs a watchdog: this GSP has no status region. */
	struct vgpu_rpc_wd_tick bad = { .fn = 99 }, tick = { .fn = 1 };
	struct vgpu_rpc_wd_state st;

	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_WD_TICK, &bad, sizeof(bad), &st, sizeof(st),
				  NULL), -EINVAL);
	assert_int_equal(gsp_call(fx.gsp, 0, VGPU_RPC_FN_WD_TICK, &tick, sizeof(tick), &st,
				  sizeof(st), NULL), -ENODEV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_release_refuses, setup_release, teardown),
		cmocka_unit_test_setup_teardown(test_test_build_serves, setup_test_build, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
