// SPDX-License-Identifier: MIT
/* vgpu-vf-test - the guest suite: proves that a vGPU slice works, from inside the tenant.
 *
 *   vgpu-vf-test --socket <runtime>/vf<N>.sock [--only NAME] [--list] [--big] [--reset-wait S]
 *   vgpu-vf-test --vfio[=BDF] | --sysfs[=BDF] [same options]     inside a VM
 *   vgpu-vf-test --kmod[=DEV] [same options]      inside a VM, on the kernel driver vgpu_vf.ko
 *   vgpu-vf-test --attack[=BDF]                                     inside a VM: isolation
 *   vgpu-vf-test --socket PATH | --kmod[=DEV] | --sysfs[=BDF] | --vfio[=BDF] --bench-submit N
 *                                                                   figures, not the suite
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
#include "vf_guest/include/vgpu_vf_kmod.h"
#include "vf_guest/vft/vft.h"

enum { T_LOCAL, T_VFIO, T_SYSFS, T_KMOD, T_ATTACK };

static void usage(FILE *f)
{
	fprintf(f, "usage: vgpu-vf-test --socket PATH | --vfio[=BDF] | --sysfs[=BDF] | --kmod[=DEV]\n"
		   "                    [--only NAME]\n"
		   "                    [--list] [--big] [--reset-wait S] [-v]\n"
		   "       vgpu-vf-test --attack[=BDF] [-v]\n"
		   "  --socket PATH  the VF's endpoint socket (<runtime-dir>/vf<N>.sock)\n"
		   "  --vfio[=BDF]   in a VM: the VF's PCI device through vfio-pci (needs a vIOMMU);\n"
		   "                 BDF like 0000:00:03.0, default the first with the VF magic\n"
		   "  --sysfs[=BDF]  in a VM: the same device through sysfs, polling (no vIOMMU)\n"
		   "  --kmod[=DEV]   in a VM: the VF through the kernel driver vgpu_vf.ko\n"
		   "                 (DEV like /dev/vgpu-vf1, default the first of them)\n"
		   "  --attack[=BDF] in a VM (vfio): the isolation attacks instead of the suite\n"
		   "  --only NAME    run the cases whose name contains NAME (A|B: A or B)\n"
		   "  --list         print the case names and exit\n"
		   "  --big          buffers up to 256 MiB (default up to 16 MiB)\n"
		   "  --reset-wait S also run \"reset recovery\": after printing \"# ready for\n"
		   "                 reset\" wait up to S seconds for the VF to be reset (vgpuctl\n"
		   "                 reset) or vgpud to restart, then recover\n"
		   "  --loop S       repeat the selected cases in rounds, in one attachment,\n"
		   "                 for S seconds (a point per case: ok if every round passed)\n"
		   "  --bench-submit N  not the suite: N one-NOP submissions, one at a time, and\n"
		   "                 one JSON line (keys <transport>_submit_*)\n"
		   "  -v             print the driver's messages\n");
}

/* A count for --bench-submit: 1 to 10,000,000, or 0 for anything else. */
static unsigned int parse_count(const char *arg)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	return errno || end == arg || *end || arg[0] == '-' || v > 10000000 ? 0 : (unsigned int)v;
}

/* One transport choice only; a second is a usage error. */
static int pick(int *kind, int want, const char **bdf, const char *arg)
{
	if (*kind != T_LOCAL)
		return -1;
	*kind = want;
	*bdf = arg;
	return 0;
}

/* The in-VM transports; a failure here prints the TAP an attach failure would. */
static int vm_transport(int kind, const char *bdf, struct vgpu_vf_transport **t)
{
	int ret = kind == T_VFIO ? vgpu_vf_transport_vfio(bdf, t) :
		  kind == T_KMOD ? vgpu_vf_transport_kmod(bdf, t) : vgpu_vf_transport_sysfs(bdf, t);

	if (ret) {
		printf("1..1\nnot ok 1 - attach: no VF device%s%s: %s\n0 passed, 1 failed\n",
		       bdf ? " at " : "", bdf ? bdf : "", vgpu_vf_strerror(ret));
		return ret;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "vfio", optional_argument, NULL, 'V' },
		{ "sysfs", optional_argument, NULL, 'S' },
		{ "kmod", optional_argument, NULL, 'K' },
		{ "attack", optional_argument, NULL, 'A' },
		{ "only", required_argument, NULL, 'o' },
		{ "list", no_argument, NULL, 'l' },
		{ "big", no_argument, NULL, 'b' },
		{ "reset-wait", required_argument, NULL, 'r' },
		{ "loop", required_argument, NULL, 'L' },
		{ "bench-submit", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct vft_opts o = { 0 };
	const char *bdf = NULL;
	int c, kind = T_LOCAL, bad = 0, ret;
	unsigned int bench = 0;
	bool list = false;

	while ((c = getopt_long(argc, argv, "s:o:lbvh", lo, NULL)) != -1) {
		switch (c) {
		case 's': o.socket = optarg; break;
		case 'V': bad |= pick(&kind, T_VFIO, &bdf, optarg); break;
		case 'S': bad |= pick(&kind, T_SYSFS, &bdf, optarg); break;
		case 'K': bad |= pick(&kind, T_KMOD, &bdf, optarg); break;
		case 'A': bad |= pick(&kind, T_ATTACK, &bdf, optarg); break;
		case 'o': o.only = optarg; break;
		case 'l': list = true; break;
		case 'b': o.big = true; break;
		case 'r': o.reset_wait_s = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'L': o.loop_s = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'B':
			bench = parse_count(optarg);
			if (!bench) {
				fprintf(stderr, "vgpu-vf-test: --bench-submit '%s': not a count "
					"from 1 to 10000000\n", optarg);
				return 2;
			}
			break;
		case 'v': o.verbose = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (list) {
		vft_list(stdout);
		return 0;
	}
	if (bad || optind != argc || !!o.socket == (kind != T_LOCAL)) {
		usage(stderr);
		return 2;
	}
	if (bench && kind == T_ATTACK) {
		fprintf(stderr, "vgpu-vf-test: --bench-submit and --attack: pick one\n");
		return 2;
	}
	if (kind == T_ATTACK) {
		struct vft_vm_opts vo = { .bdf = bdf, .verbose = o.verbose };

		return vft_vm_attack(&vo, stdout) ? 1 : 0;
	}
	if (bench && kind == T_LOCAL) {
		ret = vgpu_vf_transport_local(o.socket, &o.transport);
		if (ret) {
			fprintf(stderr, "vgpu-vf-test: %s: %s\n", o.socket, vgpu_vf_strerror(ret));
			return 1;
		}
		return vft_bench_submit(o.transport, "local", bench, stdout) ? 1 : 0;
	}
	if (kind != T_LOCAL) {
		ret = vm_transport(kind, bdf, &o.transport);
		if (ret)
			return 1;
		if (bench)
			return vft_bench_submit(o.transport, kind == T_VFIO ? "vfio" :
						kind == T_KMOD ? "kmod" : "sysfs", bench, stdout) ? 1 : 0;
		/* a label for messages */
		o.socket = kind == T_VFIO ? "vfio" : kind == T_KMOD ? "kmod" : "sysfs";
	}
	return vft_run(&o, stdout) ? 1 : 0;
}
