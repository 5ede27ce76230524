# tests/vm/libvirt-lib.sh - helpers of the libvirt tier (tests/vm/libvirt-*.sh), on top of
# tests/vm/lib.sh. Source it instead of lib.sh:
#
#	. "$(dirname "$0")/libvirt-lib.sh"
#	lv_init NAME			# vm_init + libvirt cleanup on exit
#	lv_require			# QEMU, libvirt's tools, root; else the suite is skipped
#	lv_start			# virtlogd + libvirtd if not running (hook installed first)
#	vm_vgpud_start; lv_slice a	# a slice QEMU (libvirt-qemu) may attach to
#	lv_launch g1 a vfio [ARGS]	# vgpu-vm launch --wait in the background
#	vm_wait g1; vm_report g1; vm_finish
#
# libvirtd and virtlogd are started only when not running (their pid files /run/libvirtd.pid,
# /run/virtlogd.pid name a live process otherwise) and stopped at exit only if started here,
# by the pid recorded at start. Domains are named vgpu-t<pid>-<vm> so that concurrent runs
# never meet. The hook goes to /etc/libvirt/hooks/qemu.d/vgpu-test-<pid>, pointing at this
# build's vgpu-vm, and is removed at exit; libvirtd reads hooks only when it starts, so a
# libvirtd that was already running may not run it (LV_HOOK says: yes, or unknown).
. "$(dirname "$0")/lib.sh"

LV_URI=qemu:///system
LV_HOOK_DIR=${LV_HOOK_DIR:-/etc/libvirt/hooks/qemu.d}
LV_HOOK_FILE=
LV_HOOK=unknown
LV_LIBVIRTD_PID=
LV_VIRTLOGD_PID=
LV_KVM_MODE=
declare -A LV_DOM

lv_init() {
	vm_init "$1"
	trap 'lv_cleanup; vm_cleanup' EXIT
}

lv_require() {
	local t

	vm_require_qemu
	for t in libvirtd virtlogd virsh virt-xml-validate; do
		command -v "$t" >/dev/null ||
			vm_skip_all "$t not installed (Debian: libvirt-daemon-system, libvirt-clients)"
	done
	[ "$(id -u)" = 0 ] || vm_skip_all "qemu:///system and its libvirtd need root"
	id libvirt-qemu >/dev/null 2>&1 || vm_skip_all "no libvirt-qemu user (libvirt-daemon-system)"
	[ -x "$VGPU_BIN/vgpu-vm" ] || { vm_point fail "$VM_NAME: $VGPU_BIN/vgpu-vm built"; vm_finish; }
	# The same kernel and initrd for every VM, in a directory libvirt-qemu can traverse;
	# libvirt's DAC driver chowns them for the VM's lifetime, so they are private copies.
	cp "$VGPU_GUEST/vmlinux" "$VGPU_GUEST/initramfs.cpio.gz" "$VM_TMP/" ||
		{ vm_point fail "$VM_NAME: copy the guest image"; vm_finish; }
}

lv_pid_alive() {
	local p

	[ -s "$1" ] && p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null
}

# libvirt caches QEMU's capabilities only while /dev/kvm's accessibility for libvirt-qemu
# matches what the probe saw; a root-only /dev/kvm (no udev here) makes it re-probe QEMU
# (~4 s) several times per domain start. udev's Debian default is root:kvm 0660.
lv_kvm_fix() {
	[ -c /dev/kvm ] || return 0
	[ "$(stat -c '%a %G' /dev/kvm)" = "600 root" ] || return 0
	LV_KVM_MODE=600
	chgrp kvm /dev/kvm && chmod 0660 /dev/kvm &&
		vm_diag "set /dev/kvm to Debian's default root:kvm 0660 (libvirt re-probes QEMU otherwise); restored at exit"
}

lv_hook_install() {
	local f pid

	mkdir -p "$LV_HOOK_DIR" || return 1
	# A run that was killed leaves its hook behind; its pid is gone.
	for f in "$LV_HOOK_DIR"/vgpu-test-*; do
		[ -e "$f" ] || continue
		pid=${f##*-}
		kill -0 "${pid%.tmp}" 2>/dev/null || rm -f "$f"
	done
	LV_HOOK_FILE=$LV_HOOK_DIR/vgpu-test-$$
	sed "s|@VGPU_VM@|$VGPU_BIN/vgpu-vm|" "$(dirname "$0")/../../vmm_glue/hook/qemu-hook.in" \
		>"$LV_HOOK_FILE.tmp" && chmod 0755 "$LV_HOOK_FILE.tmp" &&
		mv -f "$LV_HOOK_FILE.tmp" "$LV_HOOK_FILE"
}

# lv_start: virtlogd and libvirtd running and answering, or the suite fails.
lv_start() {
	local i t0

	lv_kvm_fix
	lv_hook_install || vm_diag "cannot install the hook in $LV_HOOK_DIR"
	if ! lv_pid_alive /run/virtlogd.pid; then
		virtlogd -d || { vm_point fail "$VM_NAME: virtlogd starts"; vm_finish; }
		for i in $(seq 100); do lv_pid_alive /run/virtlogd.pid && break; sleep 0.05; done
		LV_VIRTLOGD_PID=$(cat /run/virtlogd.pid 2>/dev/null)
	fi
	t0=$(date +%s.%N)
	if ! lv_pid_alive /run/libvirtd.pid; then
		libvirtd -d || { vm_point fail "$VM_NAME: libvirtd starts"; vm_finish; }
		for i in $(seq 100); do lv_pid_alive /run/libvirtd.pid && break; sleep 0.05; done
		LV_LIBVIRTD_PID=$(cat /run/libvirtd.pid 2>/dev/null)
		LV_HOOK=yes
	fi
	for i in $(seq 600); do
		virsh -c "$LV_URI" version >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! virsh -c "$LV_URI" version >/dev/null 2>&1; then
		vm_point fail "$VM_NAME: libvirtd answers on $LV_URI" "no answer within 60 s"
		vm_finish
	fi
	vm_diag "libvirtd ${LV_LIBVIRTD_PID:+started (pid $LV_LIBVIRTD_PID) and }ready after $(vm_elapsed "$t0" "$(date +%s.%N)") s"
}

lv_stop_pid() {
	local pid=$1 i

	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid"
	for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
	kill -KILL "$pid" 2>/dev/null
}

lv_cleanup() {
	local name

	for name in "${!LV_DOM[@]}"; do
		virsh -c "$LV_URI" destroy "${LV_DOM[$name]}" >/dev/null 2>&1
		virsh -c "$LV_URI" undefine "${LV_DOM[$name]}" >/dev/null 2>&1
	done
	lv_stop_pid "$LV_LIBVIRTD_PID"
	lv_stop_pid "$LV_VIRTLOGD_PID"
	[ -n "$LV_HOOK_FILE" ] && rm -f "$LV_HOOK_FILE" "$LV_HOOK_FILE.tmp"
	if [ -n "$LV_KVM_MODE" ]; then
		chmod "$LV_KVM_MODE" /dev/kvm && chgrp root /dev/kvm
	fi
	return 0
}

# lv_vm ARGS...: vgpu-vm against this suite's vgpud and libvirt.
lv_vm() {
	"$VGPU_BIN/vgpu-vm" --socket "$VM_RUN/control.sock" --connect "$LV_URI" "$@"
}

# lv_slice NAME [TYPE]: vm_slice for libvirt's QEMU (owner uid libvirt-qemu).
lv_slice() {
	vm_slice "$1" "${2:-vgpu-512M}" --owner-uid libvirt-qemu
}

# lv_launch NAME SLICE MODE [SUITE-ARGS...]: boot the guest image through libvirt with
# `vgpu-vm launch --wait` in the background (a transient domain), console to
# $VM_TMP/NAME.console; vm_wait/vm_report follow it. no_timer_check: on a loaded 2-core
# host a TCG guest's early IO-APIC timer check can miss its tick and, with the interrupt
# remapping vfio needs, panic ("timer doesn't work through Interrupt-remapped IO-APIC").
lv_launch() {
	local name=$1 slice=$2 mode=$3 log=$VM_TMP/$1.console dom=vgpu-t$$-$1
	shift 3

	: >"$log"
	LV_DOM[$name]=$dom
	lv_vm --json launch --slice "${VM_UUID[$slice]}" --name "$dom" \
		--kernel "$VM_TMP/vmlinux" --initrd "$VM_TMP/initramfs.cpio.gz" \
		--cmdline "$(vm_cmdline q35 "$mode" "$@") no_timer_check" --memory "$VM_MEM" \
		--accel "$VGPU_ACCEL" --console-log "$log" --wait --timeout "$VM_TIMEOUT" \
		>"$VM_TMP/$name.launch.json" 2>"$VM_TMP/$name.qemu.log" &
	vm_register "$name" "$log" $! "${VM_VF[$slice]}"
}

# lv_owner SLICE: the VM UUID of the slice's owner token ("" if none).
lv_owner() {
	vm_ctl --json list -u "${VM_UUID[$1]}" 2>/dev/null | tr -d ' \n' |
		sed -n 's/.*"owner":{"vm":"\([^"]*\)".*/\1/p'
}
