// SPDX-License-Identifier: MIT
/* The guest suite (vft: every case vgpu-vf-test runs, GPU cases included: address spaces,
 * channels, COPY/FILL/compute against a CPU reference, semaphores, 64 channels, isolation
 * attacks, managed memory) in this process against a real vgpud with one slice, so the
 * driver's GPU path meets the whole stack in every variant (ASan, TSan) and not only in the
 * rel binaries test_vf_guests runs. Prints the suite's summary line, all its TAP on a failure. */
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

#define UUID	"7e570000-0000-4000-8000-00000000aa03"

static void test_suite(void **state)
{
	struct vft_opts o = { .socket = vfx_group.sock };
	char line[512];
	FILE *out;
	int failed;

	(void)state;
	vfx_skip_if_down();
	out = tmpfile();
	assert_non_null(out);
	failed = vft_run(&o, out);
	rewind(out);
	while (fgets(line, sizeof(line), out))	/* all of it on a failure, else the summary */
		if (failed || strstr(line, " passed, "))
			print_message("%s", line);
	fclose(out);
	assert_int_equal(failed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_suite),
	};

	return vfx_run_group(tests, VFX_ONE_VF(NULL), "/dev/shm/vgpu-selftest", UUID, "vgpu-512M");
}
