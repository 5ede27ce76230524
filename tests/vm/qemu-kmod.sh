#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier, direct QEMU, the guest kernel driver vgpu_vf.ko (guest-kmod/): the guest loads it,
# it binds the VF's ivshmem device, takes its three MSI-X vectors and makes /dev/vgpu-vfN;
# vgpu-vf-test then runs over the kmod transport (mailbox by interrupt, fence waits asleep
# in the kernel). Four q35 guests at once, each on a slice of its own:
#   solo    the full suite, one process, then its managed-memory point; the suite's kmod
#           cases include GPU work on malloc'd memory through the kernel's own SVM address
#           space (the GPU faults, the kernel services the faults)
#   reset   "reset recovery" alone (as qemu-vfio.sh runs it): the guest waits, this script
#           resets its VF when it prints "# ready for reset"; vgpud announces the reset (ABI
#           2.5), the driver moves the pages a process migrated into VRAM back to system
#           memory and acknowledges, the reset runs: the driver forgets every file's
#           objects, the process recovers, and the one holding pages keeps their data
#   noack   the same with the driver told not to evict or acknowledge (reset_evict=0):
#           vgpud's wait runs out, the reset scrubs the pages, their process ends by SIGBUS;
#           a second one catches its SIGBUS and keeps mapping its lost pages, and another
#           process that takes all the VRAM it can after the reset must get none of theirs
#   shared  a process SIGKILLed in the middle of its GPU work, then two processes on the
#           one VF at the same time, each running the cases that do not need the whole
#           slice to themselves (allocating to the quota, every channel, every DMA byte, a
#           2 MiB DMA buffer out of the slice's 4 MiB cannot pass twice on one function at
#           once); each has a kernel address space of its own
# vgpud gives a guest 5 s to acknowledge (TCG is slow; an acknowledged reset does not wait
# for it). Each guest then runs the driver's own checks (vgpu-kmod-test: bad ioctls,
# mappings, memory another process freed reads as zeros, a file's lock holding up no other
# file, clients freed on close and kill, SVM and its 64 tracked processes, the kernel
# address space, the VF unbound while a pool page cannot move and bound again), unloads
# the module and checks that its kernel log has no WARN, BUG or oops. Prints TAP
# (conventions in tests/vm/lib.sh).
. "$(dirname "$0")/lib.sh"

# The cases two processes run at once ('|' separates the names' parts; no spaces: they
# travel on the kernel command line).
SHARED_CASES='handshake|mailbox|FILL|REDUCE|semaphore|threads|attack|malloc'

vm_init qemu-kmod
vm_require_qemu
if [ -f "$VGPU_GUEST/kmod-unavailable" ]; then
	vm_skip_all "no vgpu_vf.ko in the guest image: $(cat "$VGPU_GUEST/kmod-unavailable")"
fi
vm_vgpud_start --reset-evict-ms 5000
vm_slice a vgpu-512M || { vm_point fail "qemu-kmod: slice a"; vm_finish; }
vm_slice b vgpu-512M || { vm_point fail "qemu-kmod: slice b"; vm_finish; }
vm_slice c vgpu-512M || { vm_point fail "qemu-kmod: slice c"; vm_finish; }
vm_slice d vgpu-512M || { vm_point fail "qemu-kmod: slice d"; vm_finish; }

vm_qemu solo q35 "${VM_SOCK[a]}" kmod
vm_qemu shared q35 "${VM_SOCK[b]}" kmod:2 --only "$SHARED_CASES"
vm_qemu reset q35 "${VM_SOCK[c]}" kmod --only reset --reset-wait 60
vm_qemu noack q35 "${VM_SOCK[d]}" kmod --only reset --reset-wait 60 --kmod-no-evict
vm_wait solo shared reset noack
vm_report solo
vm_managed_point solo
vm_report shared
vm_report reset
vm_report noack
vm_finish
