// SPDX-License-Identifier: MIT
/* vgpud_host - submit_bench's whole-stack host: a real vgpud with one slice (vgpud_host.h),
 * started by the vf_guest tests' fixture (tests/unit/vf_guest/vgpud_fixture.h): a temporary
 * directory with run/ and state/, vgpud with a 2 GiB device and one enabled VF, vgpuctl
 * define + start, the endpoint <run>/vf1.sock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/bench/submit_bench/vgpud_host.h"
#include "../../unit/vf_guest/vgpud_fixture.h"

#define VH_UUID		"5b0b0000-0000-4000-8000-0000000000b1"

static struct vfx vh;

/* The last lines of the temporary directory's @name to stderr (the directory goes away). */
static void vh_dump_log(const char *name)
{
	char cmd[2 * PATH_MAX];

	snprintf(cmd, sizeof(cmd),
		 "f='%s/%s'; [ ! -s \"$f\" ] || { echo \"== $f\"; tail -n 20 \"$f\"; } >&2",
		 vh.tmpdir, name);
	if (system(cmd))
		fprintf(stderr, "submit_bench: could not show %s\n", name);
}

int vgpud_host_start(const char *bindir, const char *type, char *sock, size_t len, char *why,
		     size_t wlen)
{
	char prog[PATH_MAX + 16];
	int ret;

	vh = VFX_ONE_VF(NULL);
	snprintf(vh.bindir, sizeof(vh.bindir), "%s", bindir);
	if (!vfx_built(&vh, prog, sizeof(prog))) {
		snprintf(why, wlen, "no vgpud in %s (build it, or give --bindir or --socket)", bindir);
		return -ENOENT;
	}
	ret = vfx_start(&vh, "/tmp/vgpu-submit-bench", VH_UUID, type, why, wlen);
	if (ret) {
		if (vh.tmpdir[0]) {
			vh_dump_log("vgpud.log");
			vh_dump_log("vgpuctl.log");
		}
		vgpud_host_stop();
		return ret;
	}
	vfx_endpoint(&vh, 1, sock, len);
	return 0;
}

void vgpud_host_stop(void)
{
	if (vfx_stop(&vh) == -ETIMEDOUT)
		fprintf(stderr, "submit_bench: vgpud did not stop on SIGTERM (killed)\n");
	if (vfx_clean(&vh))
		fprintf(stderr, "submit_bench: could not remove %s\n", vh.tmpdir);
	vh.tmpdir[0] = 0;
}
