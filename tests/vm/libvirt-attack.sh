#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier through libvirt, isolation: an attacker domain (vgpu-vf-test --attack over vfio)
# next to a victim domain running the full suite, both launched by vgpu-vm, and an idle
# slice. The attacker must get nothing but its own errors: its guest points pass, the
# victim's suite passes, the idle VF's doorbell and mailbox counters do not move, and the
# attacker's foreign tokens are counted against the attacker's own VF.
. "$(dirname "$0")/libvirt-lib.sh"

lv_init libvirt-attack
lv_require
lv_start
vm_vgpud_start
for s in victim attacker idle; do
	lv_slice "$s" || { vm_point fail "libvirt-attack: slice $s"; vm_finish; }
done

counters() {
	vm_vf_stats "$1" | grep -o '"\(doorbell\|rpc\)": *{[^}]*}' | tr -d ' \n'
}
invalid_tokens() {
	vm_vf_stats "$1" | grep -o '"doorbell": *{[^}]*}' | grep -o '"invalid": *[0-9]*' |
		grep -o '[0-9]*$'
}

idle_before=$(counters "${VM_VF[idle]}")
inv_before=$(invalid_tokens "${VM_VF[attacker]}")
lv_launch victim victim vfio
lv_launch attacker attacker attack
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
