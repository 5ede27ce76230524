#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier, direct QEMU, the polling tier: a plain pc guest without a vIOMMU (no vfio there)
# runs the full vgpu-vf-test over sysfs resource2 with --big buffers: rings through BAR0,
# no interrupts, every wait polls; then one point that its managed-memory case ran there
# with GPU and CPU faults counted (second views of resource2). Prints TAP (conventions in
# tests/vm/lib.sh).
. "$(dirname "$0")/lib.sh"

vm_init qemu-sysfs
vm_require_qemu
vm_vgpud_start
vm_slice a vgpu-512M || { vm_point fail "qemu-sysfs: slice a"; vm_finish; }

vm_qemu sysfs pc "${VM_SOCK[a]}" sysfs --big
vm_wait sysfs
vm_report sysfs
vm_managed_point sysfs
vm_finish
