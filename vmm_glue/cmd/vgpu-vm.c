// SPDX-License-Identifier: MIT
/* vgpu-vm: libvirt VMs with vGPU slices (doc/vgpu-vm.1). */
#include "vmm_glue/vmm_glue.h"

int main(int argc, char **argv)
{
	return vmm_vm_main(argc, argv);
}
