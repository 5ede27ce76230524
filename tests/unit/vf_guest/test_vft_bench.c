// SPDX-License-Identifier: MIT
/* vft_bench_submit (vgpu-vf-test --bench-submit) against a real vgpud with one slice: it
 * submits and completes what it was asked for and prints one JSON line with its keys under
 * the prefix given; asked for nothing, it refuses, frees the transport and prints nothing.
 * The figures themselves are not checked (no wall-clock assertions). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vft/vft.h"
#include "tests/unit/vf_guest/vgpud_fixture.h"

#define UUID	"7e570000-0000-4000-8000-00000000aa0b"

/* What vft_bench_submit(@iters) printed (one line at most kept), its return value. */
static int bench(unsigned int iters, char *line, size_t len)
{
	struct vgpu_vf_transport *t;
	FILE *out = tmpfile();
	int ret;

	assert_non_null(out);
	assert_int_equal(vgpu_vf_transport_local(vfx_group.sock, &t), 0);
	ret = vft_bench_submit(t, "unit", iters, out);
	rewind(out);
	line[0] = '\0';
	if (!fgets(line, (int)len, out))
		line[0] = '\0';
	fclose(out);
	return ret;
}

static void test_json_line(void **state)
{
	static const char *const keys[] = {
		"\"unit_submit_call_p50_us\": ", "\"unit_submit_call_p99_us\": ",
		"\"unit_submit_done_p50_us\": ", "\"unit_submit_done_p99_us\": ",
		"\"unit_submit_done_spin_p50_us\": ", "\"unit_submit_done_spin_p99_us\": ",
		"\"unit_submit_engine_asleep_pct\": ", "\"unit_submit_call_asleep_p50_us\": ",
		"\"unit_submit_spin_engine_asleep_pct\": ", "\"unit_submits\": 40}",
	};
	char line[1024];

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(bench(40, line, sizeof(line)), 0);
	assert_int_equal(line[0], '{');
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strstr(line, keys[i]))
			fail_msg("no %s in %s", keys[i], line);
	/* The VF is usable afterwards: the bench closed what it made. */
	assert_int_equal(bench(1, line, sizeof(line)), 0);
}

static void test_nothing_asked(void **state)
{
	char line[1024];

	(void)state;
	vfx_skip_if_down();
	assert_int_equal(bench(0, line, sizeof(line)), -EINVAL);
	assert_string_equal(line, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_line),
		cmocka_unit_test(test_nothing_asked),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-vftbench", UUID, "vgpu-512M");
}
