#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier, direct QEMU, the guest kernel driver: a q35 guest loads vgpu_vf.ko (guest-kmod/),
# which binds the VF's ivshmem device, takes its three MSI-X vectors and makes /dev/vgpu-vfN;
# two vgpu-vf-test processes then run the full suite on that one VF at the same time over
# the kmod transport (each with its own RM client, mailbox rings and memory), and the guest
# checks that its kernel log has no WARN, BUG or oops. Prints TAP (conventions in
# tests/vm/lib.sh).
. "$(dirname "$0")/lib.sh"

vm_init qemu-kmod
vm_require_qemu
if [ -f "$VGPU_GUEST/kmod-unavailable" ]; then
	vm_skip_all "no vgpu_vf.ko in the guest image: $(cat "$VGPU_GUEST/kmod-unavailable")"
fi
vm_vgpud_start
vm_slice a vgpu-512M || { vm_point fail "qemu-kmod: slice a"; vm_finish; }

# Two suites at once on one 1-vCPU TCG guest take about twice one suite's time.
VM_TIMEOUT=$((VM_TIMEOUT * 2))
vm_qemu kmod q35 "${VM_SOCK[a]}" kmod:2
vm_wait kmod
vm_report kmod
vm_finish
