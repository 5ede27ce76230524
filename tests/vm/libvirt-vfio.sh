#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier through libvirt: two q35 + intel-iommu domains at once, launched by vgpu-vm (real
# libvirtd and virtlogd, no systemd), each with its own slice of a private vgpud and running
# the full vgpu-vf-test over vfio-pci in the guest. Each VM's TAP points, its result line,
# and host-side checks: the owner token is the domain's while it runs and released after;
# `vgpu-vm list` shows the domains with their slices. Conventions: tests/vm/libvirt-lib.sh.
. "$(dirname "$0")/libvirt-lib.sh"

lv_init libvirt-vfio
lv_require
lv_start
vm_vgpud_start
lv_slice a || { vm_point fail "libvirt-vfio: slice a"; vm_finish; }
lv_slice b || { vm_point fail "libvirt-vfio: slice b"; vm_finish; }

# test_vmm_xml's domxml-to-native case skips in the unit tier (no libvirtd runs there); here
# one does, so it must run and pass: libvirt itself turns vgpu-vm's XML into QEMU arguments.
xml_test=$VGPU_BIN/../tests/vmm_glue/test_vmm_xml
if [ -x "$xml_test" ] &&
   CMOCKA_MESSAGE_OUTPUT=TAP "$xml_test" >"$VM_TMP/xml.tap" 2>&1 &&
   grep -q "^ok [0-9]* - test_domxml_to_native$" "$VM_TMP/xml.tap"; then
	vm_point ok "host: libvirt turns vgpu-vm's XML into QEMU arguments (test_domxml_to_native)"
else
	vm_point fail "host: libvirt turns vgpu-vm's XML into QEMU arguments (test_domxml_to_native)" \
		"$(grep -E "domxml|^#" "$VM_TMP/xml.tap" 2>/dev/null | head -5)"
fi

lv_launch vm1 a vfio --big
lv_launch vm2 b vfio

# While they run: each slice owned by its domain, both listed with their slices. vgpu-vm
# sets the owner token before it defines the domain, so once libvirt knows both domains the
# tokens must be theirs: wait for that (or for a launch to end), not for a time window.
lv_domuuid() {
	virsh -c "$LV_URI" domuuid "${LV_DOM[$1]}" 2>/dev/null | head -1
}
lv_both_defined() {
	{ [ -n "$(lv_domuuid vm1)" ] && [ -n "$(lv_domuuid vm2)" ]; } ||
		! kill -0 "${VM_PID[vm1]}" 2>/dev/null || ! kill -0 "${VM_PID[vm2]}" 2>/dev/null
}
vm_until lv_both_defined
dom1=$(lv_domuuid vm1)
dom2=$(lv_domuuid vm2)
if [ -n "$dom1" ] && [ "$(lv_owner a)" = "$dom1" ] && [ "$(lv_owner b)" = "$dom2" ]; then
	vm_point ok "host: each slice is owned by its running domain"
else
	vm_point fail "host: each slice is owned by its running domain" \
		"a: $(lv_owner a) (domain $dom1), b: $(lv_owner b) (domain $dom2)"
fi
listed=$(lv_vm --json list 2>&1 | tr -d ' \n')
if [[ $listed == *"\"name\":\"${LV_DOM[vm1]}\""*"\"slice\":\"${VM_UUID[a]}\""* ||
      $listed == *"\"slice\":\"${VM_UUID[a]}\""*"\"name\":\"${LV_DOM[vm1]}\""* ]] &&
   [[ $listed == *"\"slice\":\"${VM_UUID[b]}\""* ]]; then
	vm_point ok "host: vgpu-vm list shows both domains with their slices"
else
	vm_point fail "host: vgpu-vm list shows both domains with their slices" "${listed:0:300}"
fi

vm_wait vm1 vm2
vm_report vm1
vm_report vm2
for s in a b; do
	if [ -z "$(lv_owner $s)" ]; then
		vm_point ok "host: slice $s released after its domain ended"
	else
		vm_point fail "host: slice $s released after its domain ended" "owner $(lv_owner $s)"
	fi
done
vm_finish
