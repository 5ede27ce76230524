#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier through libvirt: the qemu hook (vmm_glue/hook/qemu-hook.in, installed into this
# libvirtd as qemu.d/vgpu-test-<pid>) with plain `virsh create` of vgpu-vm's XML, so that
# only the hook stands between libvirt and vgpud:
#  - a slice another VM owns: the start fails early with the hook's message, nothing runs;
#  - a stopped slice: the hook starts it and takes it for the domain on "prepare begin",
#    the guest runs the vfio suite on it, "release end" gives it back;
# a persistent domain stopped by `vgpu-vm stop --undefine` (gone, slice released); and the
# mdev form of the XML: libvirt defines it, and refuses to start it on a host without a
# kernel mdev driver. Conventions: tests/vm/libvirt-lib.sh.
. "$(dirname "$0")/libvirt-lib.sh"

lv_init libvirt-hook
lv_require
lv_start
vm_vgpud_start
lv_slice h || { vm_point fail "libvirt-hook: slice h"; vm_finish; }
dom=vgpu-t$$-hook
LV_DOM[hook]=$dom
if ! lv_vm xml --slice "${VM_UUID[h]}" --name "$dom" --kernel "$VM_TMP/vmlinux" \
	--initrd "$VM_TMP/initramfs.cpio.gz" --cmdline "$(vm_cmdline q35 vfio)" \
	--memory "$VM_MEM" --accel "$VGPU_ACCEL" --console-log "$VM_TMP/hook.console" \
	>"$VM_TMP/hook.xml" 2>"$VM_TMP/xml.err"; then
	vm_point fail "libvirt-hook: vgpu-vm xml" "$(cat "$VM_TMP/xml.err")"
	vm_finish
fi
domuuid=$(sed -n 's|.*<uuid>\(.*\)</uuid>.*|\1|p' "$VM_TMP/hook.xml")

# 1. Another VM owns the slice: the hook refuses on "prepare begin".
other=$(cat /proc/sys/kernel/random/uuid)
vm_ctl modify -u "${VM_UUID[h]}" --owner "$other" >>"$VM_TMP/vgpuctl.log" 2>&1
if virsh -c "$LV_URI" create "$VM_TMP/hook.xml" >"$VM_TMP/create1.out" 2>&1; then
	virsh -c "$LV_URI" destroy "$dom" >/dev/null 2>&1
	if [ "$LV_HOOK" != yes ]; then
		vm_point skip "hook: refuses a slice another VM owns" \
			"libvirtd was already running when the hook was installed (it reads hooks at start)"
		vm_point skip "hook: starts a stopped slice for its domain" "the hook is not active"
		vm_finish
	fi
	vm_point fail "hook: refuses a slice another VM owns" "the domain started"
elif grep -q "vgpu hook: domain $dom: slice ${VM_UUID[h]} is owned by VM $other" "$VM_TMP/create1.out"; then
	vm_point ok "hook: refuses a slice another VM owns (libvirt: $(grep -o 'vgpu hook:.*' "$VM_TMP/create1.out" | head -1 | cut -c1-120))"
else
	vm_point fail "hook: refuses a slice another VM owns" "$(head -3 "$VM_TMP/create1.out")"
fi
vm_ctl modify -u "${VM_UUID[h]}" --release-owner "$other" >>"$VM_TMP/vgpuctl.log" 2>&1

# 2. The slice is stopped: "prepare begin" starts it (same VF: the only one) and owns it.
vm_ctl stop -u "${VM_UUID[h]}" >>"$VM_TMP/vgpuctl.log" 2>&1
: >"$VM_TMP/hook.console"
vm_register hook "$VM_TMP/hook.console" "" "${VM_VF[h]}"
if virsh -c "$LV_URI" create "$VM_TMP/hook.xml" >"$VM_TMP/create2.out" 2>&1; then
	owner=$(lv_owner h)
	if [ "$owner" = "$domuuid" ]; then
		vm_point ok "hook: starts a stopped slice and owns it for its domain"
	else
		vm_point fail "hook: starts a stopped slice and owns it for its domain" \
			"owner \"$owner\", domain $domuuid"
	fi
	vm_wait hook
	vm_report hook
	hook_dom_gone() { ! virsh -c "$LV_URI" domstate "$dom" >/dev/null 2>&1; }
	hook_released() { [ -z "$(lv_owner h)" ]; }
	vm_until hook_dom_gone
	vm_until hook_released
	if [ -z "$(lv_owner h)" ]; then
		vm_point ok "hook: release end gives the slice back"
	else
		vm_point fail "hook: release end gives the slice back" "owner $(lv_owner h)"
	fi
else
	vm_point fail "hook: starts a stopped slice and owns it for its domain" \
		"$(head -3 "$VM_TMP/create2.out")"
fi

# 3. A persistent domain (its guest waits in a shell) stopped and undefined by vgpu-vm.
pdom=vgpu-t$$-persist
LV_DOM[persist]=$pdom
if lv_vm launch --persistent --slice "${VM_UUID[h]}" --name "$pdom" --kernel "$VM_TMP/vmlinux" \
	--initrd "$VM_TMP/initramfs.cpio.gz" --cmdline "$(vm_cmdline q35 shell)" \
	--memory "$VM_MEM" --accel "$VGPU_ACCEL" --console-log "$VM_TMP/persist.console" \
	>"$VM_TMP/persist.out" 2>&1 &&
   [ "$(virsh -c "$LV_URI" dominfo "$pdom" 2>/dev/null | awk '/^Persistent:/ {print $2}')" = yes ] &&
   [ -n "$(lv_owner h)" ]; then
	vm_point ok "vgpu-vm launch --persistent: defined, running, the slice owned"
else
	vm_point fail "vgpu-vm launch --persistent: defined, running, the slice owned" \
		"$(head -3 "$VM_TMP/persist.out")"
fi
if lv_vm stop --undefine "$pdom" >"$VM_TMP/stop.out" 2>&1 &&
   ! virsh -c "$LV_URI" dominfo "$pdom" >/dev/null 2>&1 && [ -z "$(lv_owner h)" ]; then
	vm_point ok "vgpu-vm stop --undefine: domain gone, slice released"
else
	vm_point fail "vgpu-vm stop --undefine: domain gone, slice released" \
		"$(cat "$VM_TMP/stop.out") owner $(lv_owner h)"
fi

# 4. The mdev form: valid for libvirt, not startable without a kernel mdev driver.
mdom=vgpu-t$$-mdev
LV_DOM[mdev]=$mdom
if lv_vm xml --mdev --slice "${VM_UUID[h]}" --name "$mdom" --kernel "$VM_TMP/vmlinux" \
	>"$VM_TMP/mdev.xml" 2>"$VM_TMP/mdev.err" &&
   virsh -c "$LV_URI" define "$VM_TMP/mdev.xml" >"$VM_TMP/mdev.out" 2>&1; then
	if virsh -c "$LV_URI" start "$mdom" >"$VM_TMP/mdev-start.out" 2>&1; then
		vm_point fail "mdev form: defined, and refused at start without an mdev driver" \
			"it started"
	else
		vm_point ok "mdev form: defined, and refused at start ($(grep -o 'error: .*' "$VM_TMP/mdev-start.out" | tail -1 | cut -c1-100))"
	fi
	virsh -c "$LV_URI" undefine "$mdom" >/dev/null 2>&1
else
	vm_point fail "mdev form: defined, and refused at start without an mdev driver" \
		"$(cat "$VM_TMP/mdev.err" "$VM_TMP/mdev.out" 2>/dev/null | head -3)"
fi
vm_finish
