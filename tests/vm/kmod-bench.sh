#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The guest kernel driver's figures (make vm-kmod-bench): one q35 TCG guest on a slice of a
# private vgpud boots with vgpu_test=kmod-bench (vmm_glue/guest/init) and prints
# vgpu-kmod-test's two JSON objects (the driver's: mailbox round trip by interrupt, SVM
# migration GB/s with a guest memcpy baseline; then, the driver unloaded, the polling round
# trip); this script prints them as one JSON object, or says why there is none (exit 1).
. "$(dirname "$0")/lib.sh"

vm_init kmod-bench
# vm_require_qemu would print TAP and exit 0: say why there are no figures instead.
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -f "$VGPU_GUEST/vmlinux" ]; then
	echo "kmod-bench: needs qemu-system-x86_64 and the guest image (make guest-image)" >&2
	exit 1
fi
if [ -f "$VGPU_GUEST/kmod-unavailable" ]; then
	echo "kmod-bench: no vgpu_vf.ko: $(cat "$VGPU_GUEST/kmod-unavailable")" >&2
	exit 1
fi
vm_vgpud_start >/dev/null
vm_slice a vgpu-512M || { echo "kmod-bench: no slice" >&2; exit 1; }
vm_qemu bench q35 "${VM_SOCK[a]}" kmod-bench
vm_wait bench
json=$(tr -d '\r' <"${VM_CONSOLE[bench]}" | grep -a '^{' | sed 's/^{//; s/}$//' | paste -sd, -)
if ! grep -aq 'VGPU-VM-RESULT: 1 passed' "${VM_CONSOLE[bench]}" || [ -z "$json" ]; then
	echo "kmod-bench: the guest printed no figures; its console:" >&2
	tr -d '\r' <"${VM_CONSOLE[bench]}" | tail -15 >&2
	exit 1
fi
echo "{$json}"
