// SPDX-License-Identifier: MIT
/* vgpuctl - admin CLI for vgpud. See doc/vgpuctl.8. */
#include "vgpuctl/vgpuctl.h"

int main(int argc, char **argv)
{
	return vgpuctl_main(argc, argv);
}
