# SPDX-License-Identifier: MIT
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
# libvirtd and virtlogd are shared by every run on the machine (several engineers' `make
# check` at once): a run starts them only when they are not running, and the last run of
# this tier to leave stops them, and only if a run of this tier started them (by the pid it
# recorded). The bookkeeping is in $LV_STATE (users/<pid>, libvirtd.pid, virtlogd.pid,
# kvm.mode) under a flock. Domains are named vgpu-t<pid>-<vm> so that runs never meet. The
# hook goes to /etc/libvirt/hooks/qemu.d/vgpu-test-<pid>, pointing at this build's vgpu-vm,
# and is removed at exit; libvirtd finds hooks only if one existed when it started, so a
# libvirtd started outside this tier may not run it (LV_HOOK says: yes, or unknown).
# Found next to this file, so that scripts elsewhere (tests/bench/vm_launch) can source it.
LV_LIBDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$LV_LIBDIR/lib.sh"

LV_URI=qemu:///system
LV_HOOK_DIR=${LV_HOOK_DIR:-/etc/libvirt/hooks/qemu.d}
LV_HOOK_FILE=
LV_HOOK=unknown
LV_LIBVIRTD_PID=
LV_STATE=${LV_STATE:-/run/vgpu-libvirt-tier}
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

# lv_alive PID [NAME]: a live (not zombie: PID 1 here may not reap) process, NAME if given.
lv_alive() {
	local st comm

	[ -n "$1" ] && st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) &&
		[ -n "$st" ] && [ "$st" != Z ] || return 1
	[ -z "${2:-}" ] && return 0
	comm=$(cat "/proc/$1/comm" 2>/dev/null)
	[ "$comm" = "$2" ]
}

# lv_pid_alive PIDFILE NAME: the pid file names a live NAME.
lv_pid_alive() {
	local p

	[ -s "$1" ] && p=$(cat "$1" 2>/dev/null) && lv_alive "$p" "$2"
}

# libvirt caches QEMU's capabilities only while /dev/kvm's accessibility for libvirt-qemu
# matches what the probe saw; a root-only /dev/kvm (no udev here) makes it re-probe QEMU
# (~4 s) several times per domain start. udev's Debian default is root:kvm 0660; the last
# run to leave puts the old mode back. Called with the lock held.
lv_kvm_fix() {
	[ -c /dev/kvm ] || return 0
	[ "$(stat -c '%a %G' /dev/kvm)" = "600 root" ] || return 0
	echo 600 >"$LV_STATE/kvm.mode"
	chgrp kvm /dev/kvm && chmod 0660 /dev/kvm &&
		vm_diag "set /dev/kvm to Debian's default root:kvm 0660 (libvirt re-probes QEMU otherwise); restored by the last run"
}

# lv_locked CMD...: run CMD under the tier's lock.
# The daemons started under it must not inherit the lock's fd (LV_LOCK_FD): a flock belongs to
# the open file, and a daemon holding it would block every later run.
lv_locked() {
	local rc

	mkdir -p "$LV_STATE/users"
	exec {LV_LOCK_FD}>"$LV_STATE/lock"
	flock "$LV_LOCK_FD"
	"$@"
	rc=$?
	exec {LV_LOCK_FD}>&-
	return $rc
}

# Forget users whose run has gone (killed): their pid is dead.
lv_prune_users() {
	local f

	for f in "$LV_STATE"/users/*; do
		[ -e "$f" ] || continue
		lv_alive "${f##*/}" || rm -f "$f"
	done
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
	sed "s|@VGPU_VM@|$VGPU_BIN/vgpu-vm|" "$LV_LIBDIR/../../vmm_glue/hook/qemu-hook.in" \
		>"$LV_HOOK_FILE.tmp" && chmod 0755 "$LV_HOOK_FILE.tmp" &&
		mv -f "$LV_HOOK_FILE.tmp" "$LV_HOOK_FILE"
}

# libvirtd keeps QEMU's capabilities (/var/cache/libvirt/qemu/capabilities) only while the
# host's CPUID reads as it did when they were probed, and libvirt 9.0 compares leaves that
# carry the APIC ID of the CPU the daemon happens to start on: on a 2-CPU host every other
# start finds "host cpuid changed" and probes each qemu-system-* again (about 8 s idle, 20 s
# and more under load). Started on the first CPU it may use, it reads the same CPUID every
# time; once it answers, its threads get the whole CPU set back (libvirt gives QEMU the host's
# CPUs itself). The first start after a change probes once and writes the cache for the next.
lv_libvirtd_start() {
	local cpus first i pid

	cpus=$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//')
	first=$(echo "$cpus" | sed 's/[-,].*//')
	if [ -n "$first" ] && command -v taskset >/dev/null; then
		taskset -c "$first" libvirtd -d || return 1
	else
		libvirtd -d || return 1
	fi
	for i in $(seq 100); do lv_pid_alive /run/libvirtd.pid libvirtd && break; sleep 0.05; done
	pid=$(cat /run/libvirtd.pid 2>/dev/null)
	[ -n "$first" ] && [ -n "$pid" ] || return 0
	# Its capabilities are read while it starts: wait for an answer before unpinning.
	for i in $(seq 600); do virsh -c "$LV_URI" version >/dev/null 2>&1 && break; sleep 0.05; done
	taskset -a -pc "$cpus" "$pid" >/dev/null 2>&1
	return 0
}

# Start the daemons that are not running (with the lock held); a started one's pid is
# recorded in $LV_STATE so that the last run stops it.
lv_start_daemons() {
	local i

	touch "$LV_STATE/users/$$"
	lv_prune_users
	lv_kvm_fix
	lv_hook_install || vm_diag "cannot install the hook in $LV_HOOK_DIR"
	if ! lv_pid_alive /run/virtlogd.pid virtlogd; then
		virtlogd -d {LV_LOCK_FD}>&- || return 1
		for i in $(seq 100); do lv_pid_alive /run/virtlogd.pid virtlogd && break; sleep 0.05; done
		cp /run/virtlogd.pid "$LV_STATE/virtlogd.pid"
	fi
	if ! lv_pid_alive /run/libvirtd.pid libvirtd; then
		lv_libvirtd_start {LV_LOCK_FD}>&- || return 2
		cp /run/libvirtd.pid "$LV_STATE/libvirtd.pid"
		LV_LIBVIRTD_PID=$(cat /run/libvirtd.pid)
	fi
	# A libvirtd this tier started had a hook installed before it started: it runs ours.
	if [ -s "$LV_STATE/libvirtd.pid" ] &&
	   [ "$(cat "$LV_STATE/libvirtd.pid")" = "$(cat /run/libvirtd.pid 2>/dev/null)" ]; then
		LV_HOOK=yes
	fi
	return 0
}

# lv_start: virtlogd and libvirtd running and answering, or the suite fails.
lv_start() {
	local i t0 rc

	t0=$(date +%s.%N)
	lv_locked lv_start_daemons
	rc=$?
	[ $rc -eq 1 ] && { vm_point fail "$VM_NAME: virtlogd starts"; vm_finish; }
	[ $rc -eq 2 ] && { vm_point fail "$VM_NAME: libvirtd starts"; vm_finish; }
	LV_LIBVIRTD_PID=$(cat /run/libvirtd.pid 2>/dev/null)
	[ "$LV_HOOK" = yes ] || LV_LIBVIRTD_PID=
	for i in $(seq 600); do
		virsh -c "$LV_URI" version >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! virsh -c "$LV_URI" version >/dev/null 2>&1; then
		vm_point fail "$VM_NAME: libvirtd answers on $LV_URI" "no answer within 60 s"
		vm_finish
	fi
	vm_diag "libvirtd ${LV_LIBVIRTD_PID:+(pid $LV_LIBVIRTD_PID, started by this tier) }ready after $(vm_elapsed "$t0" "$(date +%s.%N)") s"
}

# lv_stop_pid PID NAME: SIGTERM (then SIGKILL) the process if it still is NAME.
lv_stop_pid() {
	local pid=$1 i

	lv_alive "$pid" "$2" || return 0
	kill -TERM "$pid"
	for i in $(seq 100); do lv_alive "$pid" || return 0; sleep 0.05; done
	kill -KILL "$pid" 2>/dev/null
}

# The last run of the tier to leave stops the daemons a run of the tier started and puts
# /dev/kvm's mode back (with the lock held).
lv_leave() {
	rm -f "$LV_STATE/users/$$"
	lv_prune_users
	[ -n "$LV_HOOK_FILE" ] && rm -f "$LV_HOOK_FILE" "$LV_HOOK_FILE.tmp"
	[ -z "$(ls -A "$LV_STATE/users" 2>/dev/null)" ] || return 0
	if [ -s "$LV_STATE/libvirtd.pid" ]; then
		lv_stop_pid "$(cat "$LV_STATE/libvirtd.pid")" libvirtd
		rm -f "$LV_STATE/libvirtd.pid"
	fi
	if [ -s "$LV_STATE/virtlogd.pid" ]; then
		lv_stop_pid "$(cat "$LV_STATE/virtlogd.pid")" virtlogd
		rm -f "$LV_STATE/virtlogd.pid"
	fi
	if [ -s "$LV_STATE/kvm.mode" ]; then
		chmod "$(cat "$LV_STATE/kvm.mode")" /dev/kvm && chgrp root /dev/kvm
		rm -f "$LV_STATE/kvm.mode"
	fi
	return 0
}

lv_cleanup() {
	local name

	for name in "${!LV_DOM[@]}"; do
		virsh -c "$LV_URI" destroy "${LV_DOM[$name]}" >/dev/null 2>&1
		virsh -c "$LV_URI" undefine "${LV_DOM[$name]}" >/dev/null 2>&1
	done
	[ -d "$LV_STATE/users" ] && lv_locked lv_leave
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
# $VM_TMP/NAME.console; vm_wait/vm_report follow it.
lv_launch() {
	local name=$1 slice=$2 mode=$3 log=$VM_TMP/$1.console dom=vgpu-t$$-$1
	shift 3

	: >"$log"
	LV_DOM[$name]=$dom
	lv_vm --json launch --slice "${VM_UUID[$slice]}" --name "$dom" \
		--kernel "$VM_TMP/vmlinux" --initrd "$VM_TMP/initramfs.cpio.gz" \
		--cmdline "$(vm_cmdline q35 "$mode" "$@")" --memory "$VM_MEM" \
		--accel "$VGPU_ACCEL" --console-log "$log" --wait --timeout "$VM_TIMEOUT" \
		>"$VM_TMP/$name.launch.json" 2>"$VM_TMP/$name.qemu.log" &
	vm_register "$name" "$log" $! "${VM_VF[$slice]}"
}

# lv_owner SLICE: the VM UUID of the slice's owner token ("" if none).
lv_owner() {
	vm_ctl --json list -u "${VM_UUID[$1]}" 2>/dev/null | tr -d ' \n' |
		sed -n 's/.*"owner":{"vm":"\([^"]*\)".*/\1/p'
}
