#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier, direct QEMU, isolation: an attacker VM (vgpu-vf-test --attack over vfio) next to
# a victim VM running the full suite, and a third slice nobody uses. The attacker rings
# other peers' doorbells and vgpud's missing vectors through BAR0, reads/writes/maps past
# its BAR2, frees through RM handles forged with other VFs' ids and posts other channels'
# tokens in its doorbell page. It must get nothing but its own errors:
#  - its guest points pass (each checks the refusal it gets);
#  - the victim's suite still passes;
#  - the idle slice's doorbell and mailbox counters do not move (vgpuctl stats);
#  - the attacker's invalid tokens are counted against the attacker itself.
. "$(dirname "$0")/lib.sh"

vm_init qemu-attack
vm_require_qemu
vm_vgpud_start
for s in victim attacker idle; do
	vm_slice "$s" vgpu-512M || { vm_point fail "qemu-attack: slice $s"; vm_finish; }
done

# "doorbell":{...} and "rpc":{...} of a VF's stats (scheduler times move on their own).
counters() {
	vm_vf_stats "$1" | grep -o '"\(doorbell\|rpc\)": *{[^}]*}' | tr -d ' \n'
}
invalid_tokens() {
	vm_vf_stats "$1" | grep -o '"doorbell": *{[^}]*}' | grep -o '"invalid": *[0-9]*' |
		grep -o '[0-9]*$'
}

idle_before=$(counters "${VM_VF[idle]}")
inv_before=$(invalid_tokens "${VM_VF[attacker]}")
vm_qemu victim q35 "${VM_SOCK[victim]}" vfio
vm_qemu attacker q35 "${VM_SOCK[attacker]}" attack
vm_wait victim attacker
vm_report attacker
vm_report victim
idle_after=$(counters "${VM_VF[idle]}")
inv_after=$(invalid_tokens "${VM_VF[attacker]}")

if [ -n "$idle_before" ] && [ "$idle_before" = "$idle_after" ]; then
	vm_point ok "host: the idle VF's doorbell and mailbox counters did not move"
else
	vm_point fail "host: the idle VF's doorbell and mailbox counters did not move" \
		"before $idle_before, after $idle_after"
fi
if [ -n "$inv_after" ] && [ "$inv_after" -gt "${inv_before:-0}" ]; then
	vm_point ok "host: the attacker's foreign tokens counted as invalid on its own VF ($inv_before -> $inv_after)"
else
	vm_point fail "host: the attacker's foreign tokens counted as invalid on its own VF" \
		"invalid before ${inv_before:-?}, after ${inv_after:-?}"
fi
vm_finish
