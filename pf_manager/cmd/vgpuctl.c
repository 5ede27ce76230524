/* vgpuctl - admin CLI for vgpud. See doc/vgpuctl.8. */
#include "pf_manager/pf_manager.h"

int main(int argc, char **argv)
{
	return vgpuctl_main(argc, argv);
}
