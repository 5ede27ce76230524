#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier, direct QEMU, vfio: two q35 + intel-iommu guests at once, each with its own slice of
# a private vgpud, both driving their VF through vfio-pci with MSI-X interrupts:
#   vfio        the full vgpu-vf-test with --big buffers, and one point that its
#               managed-memory case ran with GPU and CPU faults counted (second views of
#               the vfio BAR2 region)
#   vfio-reset  "reset recovery": the guest waits, this script resets its VF (vgpuctl
#               reset) when it prints "# ready for reset", the guest must recover
# Prints TAP: one point per guest test ("ok N - vfio: <case>"), launch -> result times as
# diagnostics. Conventions in tests/vm/lib.sh.
. "$(dirname "$0")/lib.sh"

vm_init qemu-vfio
vm_require_qemu
vm_vgpud_start
vm_slice a vgpu-512M || { vm_point fail "qemu-vfio: slice a"; vm_finish; }
vm_slice b vgpu-512M || { vm_point fail "qemu-vfio: slice b"; vm_finish; }

vm_qemu vfio q35 "${VM_SOCK[a]}" vfio --big
# --only takes a substring: "reset" names only the "reset recovery" case.
vm_qemu vfio-reset q35 "${VM_SOCK[b]}" vfio --only reset --reset-wait 60
vm_wait vfio vfio-reset
vm_report vfio
vm_managed_point vfio
vm_report vfio-reset
vm_finish
