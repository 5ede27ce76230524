/* vgpu-vf-test - the guest suite: proves that a vGPU slice works, from inside the tenant.
 *
 *   vgpu-vf-test --socket <runtime>/vf<N>.sock [--only NAME] [--list] [--big] [--reset-wait S]
 *
 * Prints TAP (one test point per case, "# SKIP reason" for what the host does not offer yet)
 * and ends with one "N passed, N failed" line (", N skipped" appended when some were). Exit
 * status 0 if nothing failed. Built fully static too, to run inside a minimal VM. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vf_guest/include/vgpu_vf.h"
#include "vf_guest/vft.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: vgpu-vf-test --socket PATH [--only NAME] [--list] [--big] [-v]\n"
		   "  --socket PATH  the VF's endpoint socket (<runtime-dir>/vf<N>.sock)\n"
		   "  --only NAME    run the cases whose name contains NAME\n"
		   "  --list         print the case names and exit\n"
		   "  --big          buffers up to 256 MiB (default up to 16 MiB)\n"
		   "  --reset-wait S also run \"reset recovery\": after printing \"# ready for\n"
		   "                 reset\" wait up to S seconds for the VF to be reset (vgpuctl\n"
		   "                 reset) or vgpud to restart, then recover\n"
		   "  -v             print the driver's messages\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "only", required_argument, NULL, 'o' },
		{ "list", no_argument, NULL, 'l' },
		{ "big", no_argument, NULL, 'b' },
		{ "reset-wait", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct vft_opts o = { 0 };
	bool list = false;
	int c;

	while ((c = getopt_long(argc, argv, "s:o:lbvh", lo, NULL)) != -1) {
		switch (c) {
		case 's': o.socket = optarg; break;
		case 'o': o.only = optarg; break;
		case 'l': list = true; break;
		case 'b': o.big = true; break;
		case 'r': o.reset_wait_s = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'v': o.verbose = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (list) {
		vft_list(stdout);
		return 0;
	}
	if (!o.socket || optind != argc) {
		usage(stderr);
		return 2;
	}
	return vft_run(&o, stdout) ? 1 : 0;
}
