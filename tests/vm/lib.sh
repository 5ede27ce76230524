# SPDX-License-Identifier: MIT
# tests/vm/lib.sh - shell functions of the VM suites (bash), shared by the direct-QEMU tier
# (tests/vm/qemu-*.sh) and the libvirt tier (tests/vm/libvirt-*.sh). Source it:
#
#	. "$(dirname "$0")/lib.sh"
#	vm_init my-suite		# $VM_TMP, cleanup trap, TAP state
#	vm_require_qemu			# or the whole suite is one skipped point, with the reason
#	vm_vgpud_start			# a private vgpud in $VM_TMP
#	vm_slice a vgpu-512M		# define + start a slice: ${VM_VF[a]}, ${VM_SOCK[a]}
#	vm_qemu g1 q35 "${VM_SOCK[a]}" vfio --big	# boot the guest image in the background
#	vm_wait g1			# until its result line, its exit or VM_TIMEOUT
#	vm_report g1			# its TAP points as "ok N - g1: <case>"
#	vm_managed_point g1		# its managed-memory case ran, faults counted
#	vm_finish			# plan line, exit status
#
# CONVENTIONS (the guest side is vmm_glue/guest/README and the comment of vmm_glue/guest/init)
#  - Image: $VGPU_GUEST/vmlinux (PVH ELF) and $VGPU_GUEST/initramfs.cpio.gz, built by
#    `make guest-image`. $VGPU_GUEST/unavailable, if present, says why there is no kernel
#    (no network): the suites then report themselves skipped with that reason.
#  - Kernel command line: console=ttyS0 panic=-1 quiet [intel_iommu=on] vgpu_test=MODE
#    [vgpu_args=A,B,...] [vgpu_dev=BDF]; MODE is vfio (q35 + intel-iommu), sysfs (polling
#    tier, any machine) or attack (q35 + intel-iommu). vm_cmdline prints it.
#  - Console (ttyS0): "VGPU-VM-START MODE KVER", the suite's TAP lines ("ok N - case",
#    "not ok N - case", "# ..." diagnostics, "# ready for reset" when the reset case waits),
#    then one "VGPU-VM-RESULT: N passed, N failed[, N skipped]", then the guest powers off.
#    Boot with -no-reboot (libvirt: on_poweroff/on_reboot/on_crash destroy, <acpi/>).
#  - QEMU: -cpu max (the binaries are built for x86-64-v2; TCG's default CPU lacks it; libvirt:
#    <cpu mode='maximum'/>), 1 vCPU, VM_MEM MiB, ivshmem-doorbell with vectors=3 (the driver
#    wants as many vectors as the BAR2 header announces).
#  - Accelerator: VGPU_ACCEL, default tcg. /dev/kvm exists on these machines but does not
#    run ordinary guests (kvm_pvm), so kvm is used only when asked for.
#  - Binaries: $VGPU_BIN (default build/rel/bin; vm.mk exports the right one).
#  - Everything lives in $VM_TMP (mktemp -d, mode 0755 so that libvirt's QEMU, running as
#    libvirt-qemu, can traverse it); vgpud's runtime dir is $VM_RUN, its state $VM_STATE.
#    Cleanup kills only the processes these functions started (by pid).
#  - Per VM NAME (vm_qemu, or vm_register for a VM started otherwise, e.g. by libvirt):
#    ${VM_CONSOLE[NAME]} the console log, ${VM_PID[NAME]} QEMU's pid (may be empty),
#    ${VM_VFOF[NAME]} the VF it uses (for the reset hook), ${VM_SECS[NAME]} launch -> result.
#  - Reset: when a guest prints "# ready for reset", vm_wait calls vm_on_reset NAME once
#    (default: vgpuctl reset of ${VM_VFOF[NAME]}); a suite may redefine vm_on_reset.
#  - Output: TAP points of the suite ("ok N - VM: case"), "# ..." diagnostics, the plan last.
#    A missing result line, a timeout or a guest point never reported is "not ok".
#    Console logs are kept in ${VGPU_TEST_LOGS:-build/test-logs}/vm-<suite>-<VM>.console.

VGPU_BIN=${VGPU_BIN:-build/rel/bin}
VGPU_GUEST=${VGPU_GUEST:-build/guest}
VGPU_ACCEL=${VGPU_ACCEL:-tcg}
VM_TIMEOUT=${VM_TIMEOUT:-120}	# seconds per vm_wait (a suite takes 5-10 s; the reset case waits up to 60)
VM_MEM=${VM_MEM:-256}		# guest RAM, MiB

declare -A VM_VF VM_SOCK VM_UUID VM_PID VM_CONSOLE VM_T0 VM_SECS VM_VFOF VM_STATUS VM_RESET_DONE
VM_N=0
VM_FAILED=0
VM_NAME=
VM_TMP=
VM_RUN=
VM_STATE=
VM_DAEMON_PID=

# ---- TAP ------------------------------------------------------------------------------------

# vm_point ok|fail|skip DESCRIPTION [REASON]: one TAP point of this suite.
vm_point() {
	VM_N=$((VM_N + 1))
	case "$1" in
	ok) echo "ok $VM_N - $2" ;;
	skip) echo "ok $VM_N - $2 # SKIP ${3:-skipped}" ;;
	*) echo "not ok $VM_N - $2"; VM_FAILED=$((VM_FAILED + 1))
	   [ -n "${3:-}" ] && echo "# $3" ;;
	esac
	return 0
}

# vm_diag TEXT: a TAP diagnostic line.
vm_diag() {
	echo "# $*"
}

# vm_finish: the plan line (last) and the exit status (non-zero if any point failed).
vm_finish() {
	echo "1..$VM_N"
	[ "$VM_FAILED" -eq 0 ]
	exit $?
}

# vm_skip_all REASON: the whole suite is one skipped point; exits.
vm_skip_all() {
	vm_point skip "$VM_NAME" "$1"
	vm_finish
}

# ---- setup and cleanup ------------------------------------------------------------------------

# vm_init NAME: private temp dir, cleanup on exit.
vm_init() {
	VM_NAME=$1
	VM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-vm-$1.XXXXXX") || exit 1
	chmod 0755 "$VM_TMP"
	VM_RUN=$VM_TMP/run
	VM_STATE=$VM_TMP/state
	mkdir -p "$VM_RUN" "$VM_STATE"
	chmod 0755 "$VM_RUN"
	trap vm_cleanup EXIT
	trap 'exit 130' INT TERM
}

vm_cleanup() {
	local name pid logs=${VGPU_TEST_LOGS:-build/test-logs}

	for name in "${!VM_PID[@]}"; do
		pid=${VM_PID[$name]}
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	done
	mkdir -p "$logs" 2>/dev/null
	for name in "${!VM_CONSOLE[@]}"; do
		[ -f "${VM_CONSOLE[$name]}" ] &&
			cp "${VM_CONSOLE[$name]}" "$logs/vm-$VM_NAME-$name.console" 2>/dev/null
	done
	vm_vgpud_stop
	if [ -n "$VM_TMP" ] && [ -z "${VGPU_KEEP_TMP:-}" ]; then
		rm -rf "$VM_TMP"
	fi
	return 0
}

# vm_require_qemu: skip the suite if QEMU cannot run here or the image cannot be had.
vm_require_qemu() {
	command -v qemu-system-x86_64 >/dev/null ||
		vm_skip_all "qemu-system-x86_64 not installed (Debian package qemu-system-x86)"
	qemu-system-x86_64 -accel help 2>/dev/null | grep -qx "$VGPU_ACCEL" ||
		vm_skip_all "this QEMU has no $VGPU_ACCEL accelerator"
	if [ "$VGPU_ACCEL" = kvm ] && [ ! -w /dev/kvm ]; then
		vm_skip_all "VGPU_ACCEL=kvm but /dev/kvm is not usable"
	fi
	if [ -f "$VGPU_GUEST/unavailable" ]; then
		vm_skip_all "no guest kernel: $(cat "$VGPU_GUEST/unavailable")"
	fi
	if [ ! -f "$VGPU_GUEST/vmlinux" ] || [ ! -f "$VGPU_GUEST/initramfs.cpio.gz" ]; then
		vm_point fail "$VM_NAME: guest image" "no $VGPU_GUEST/vmlinux or initramfs: run make guest-image"
		vm_finish
	fi
}

# vm_vgpud_start [VGPUD-ARGS...]: a private vgpud on $VM_RUN; fails the suite if it won't come up.
# vm_vgpud_up: the daemon answers on its socket, or it is gone (vm_until's test).
vm_vgpud_up() {
	[ -S "$VM_RUN/control.sock" ] || ! kill -0 "$VM_DAEMON_PID" 2>/dev/null
}

vm_vgpud_start() {

	"$VGPU_BIN/vgpud" --runtime-dir "$VM_RUN" --state-dir "$VM_STATE" --vram "${VM_VRAM:-4G}" \
		--max-vfs 4 --num-vfs 4 --spare-vram 256M --log-level warn "$@" \
		>"$VM_TMP/vgpud.log" 2>&1 &
	VM_DAEMON_PID=$!
	vm_until vm_vgpud_up && [ -S "$VM_RUN/control.sock" ] && return 0
	vm_point fail "$VM_NAME: vgpud starts" "vgpud did not come up: $(tail -3 "$VM_TMP/vgpud.log")"
	VM_DAEMON_PID=
	vm_finish
}

# vm_vgpud_stop: SIGTERM the daemon vm_vgpud_start started; remove its slices' shm objects.
vm_vgpud_stop() {
	local i inst

	if [ -n "$VM_DAEMON_PID" ] && kill -0 "$VM_DAEMON_PID" 2>/dev/null; then
		kill -TERM "$VM_DAEMON_PID"
		for i in $(seq 100); do
			kill -0 "$VM_DAEMON_PID" 2>/dev/null || break
			sleep 0.05
		done
		kill -0 "$VM_DAEMON_PID" 2>/dev/null && kill -KILL "$VM_DAEMON_PID"
		wait "$VM_DAEMON_PID" 2>/dev/null
	fi
	VM_DAEMON_PID=
	# BAR2 objects outlive a clean stop on purpose (persistence); this instance's are
	# /dev/shm/<instance>-vf<N>, the instance named in its journal.
	inst=$(sed -n 's/.*"instance": *"\([^"]*\)".*/\1/p' "$VM_STATE/journal.json" 2>/dev/null |
	       head -1)
	[ -n "$inst" ] && rm -f "/dev/shm/$inst"-vf*
	return 0
}

# vm_ctl ARGS...: vgpuctl against the private daemon.
vm_ctl() {
	"$VGPU_BIN/vgpuctl" --socket "$VM_RUN/control.sock" "$@"
}

# vm_slice NAME TYPE [DEFINE-ARGS...]: define and start a manual slice; sets VM_UUID[NAME],
# VM_VF[NAME] (its VF number) and VM_SOCK[NAME] (its endpoint). 0 or 1.
vm_slice() {
	local name=$1 type=$2 uuid vf
	shift 2

	uuid=$(cat /proc/sys/kernel/random/uuid)
	if ! vm_ctl define -t "$type" -u "$uuid" --manual "$@" >>"$VM_TMP/vgpuctl.log" 2>&1 ||
	   ! vm_ctl start -u "$uuid" >>"$VM_TMP/vgpuctl.log" 2>&1; then
		vm_diag "slice $name ($type): $(tail -2 "$VM_TMP/vgpuctl.log" | tr '\n' ' ')"
		return 1
	fi
	vf=$(vm_ctl --json list -u "$uuid" 2>/dev/null | grep -o '"vf": *[0-9]*' | head -1 |
	     grep -o '[0-9]*$')
	[ -n "$vf" ] || return 1
	VM_UUID[$name]=$uuid
	VM_VF[$name]=$vf
	VM_SOCK[$name]=$VM_RUN/vf$vf.sock
	return 0
}

# vm_vf_stats VF: vgpuctl's JSON stats of one VF on one line (for before/after comparisons).
vm_vf_stats() {
	vm_ctl --json stats "$1" 2>/dev/null | tr -d '\n'
}

# ---- guests ---------------------------------------------------------------------------------

# vm_cmdline MACHINE MODE [SUITE-ARGS...]: the guest kernel command line. no_timer_check: on
# a loaded 2-core host a TCG guest's early IO-APIC timer check can miss its tick and, with the
# interrupt remapping vfio needs, panic ("timer doesn't work through Interrupt-remapped
# IO-APIC"). VGPU_VM_KARGS replaces "quiet" (e.g. "nokaslr" for a guest whose kernel
# messages and fixed addresses are wanted while debugging).
vm_cmdline() {
	local machine=$1 mode=$2 args iommu=
	shift 2

	args=$(IFS=,; echo "$*")
	[ "$machine" = q35 ] && iommu=" intel_iommu=on"
	echo "console=ttyS0 panic=-1 ${VGPU_VM_KARGS:-quiet} no_timer_check$iommu vgpu_test=$mode${args:+ vgpu_args=$args}"
}

# vm_register NAME CONSOLE-LOG [PID] [VF]: follow a VM started elsewhere (e.g. libvirt).
vm_register() {
	VM_CONSOLE[$1]=$2
	VM_PID[$1]=${3:-}
	VM_VFOF[$1]=${4:-}
	VM_T0[$1]=$(date +%s.%N)
	VM_STATUS[$1]=running
}

# vm_qemu NAME q35|pc SOCKET MODE [SUITE-ARGS...]: boot the guest image on QEMU in the
# background with the VF at SOCKET as an ivshmem-doorbell device. q35 gets an intel-iommu
# (for vfio); pc has none (the polling tier). The console goes to $VM_TMP/NAME.console.
vm_qemu() {
	local name=$1 machine=$2 sock=$3 mode=$4 log=$VM_TMP/$1.console vf
	local -a dev
	shift 4

	dev=(-M "$machine")
	[ "$machine" = q35 ] && dev+=(-device intel-iommu)
	vf=${sock##*/vf}
	vf=${vf%.sock}
	: >"$log"
	qemu-system-x86_64 -accel "$VGPU_ACCEL" -cpu max "${dev[@]}" -m "$VM_MEM" -smp 1 \
		-display none -monitor none -nodefaults -no-reboot -serial "file:$log" \
		-kernel "$VGPU_GUEST/vmlinux" -initrd "$VGPU_GUEST/initramfs.cpio.gz" \
		-append "$(vm_cmdline "$machine" "$mode" "$@")" \
		-chardev "socket,path=$sock,id=vf" \
		-device "ivshmem-doorbell,chardev=vf,vectors=${VM_VECTORS:-3}" \
		>"$VM_TMP/$name.qemu.log" 2>&1 &
	vm_register "$name" "$log" $! "$vf"
}

# The default reset hook: an FLR of the guest's VF through vgpuctl.
vm_on_reset() {
	local vf=${VM_VFOF[$1]}

	[ -n "$vf" ] || return 1
	vm_ctl reset "$vf" >>"$VM_TMP/vgpuctl.log" 2>&1
}

# vm_until CMD...: poll CMD until it succeeds (0) or VM_TIMEOUT seconds pass (1). The wait
# is for an event; the deadline only guards a hang, so a loaded machine is never a failure.
vm_until() {
	local deadline=$((SECONDS + VM_TIMEOUT))

	until "$@"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.05
	done
}

# vm_elapsed T0 T1: seconds between two `date +%s.%N` stamps, two decimals.
vm_elapsed() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'
}

# vm_wait NAME...: wait until every named VM printed its result line and its QEMU exited
# (or VM_TIMEOUT seconds pass); serves "# ready for reset". Sets VM_STATUS[NAME] to
# done, exited (QEMU gone without a result) or timeout, and VM_SECS[NAME].
vm_wait() {
	local deadline name pid busy now

	deadline=$(( $(date +%s) + VM_TIMEOUT ))
	while :; do
		busy=0
		now=$(date +%s.%N)
		for name in "$@"; do
			[ "${VM_STATUS[$name]}" = running ] || continue
			pid=${VM_PID[$name]}
			if [ -z "${VM_RESET_DONE[$name]:-}" ] &&
			   grep -q '^# ready for reset' "${VM_CONSOLE[$name]}" 2>/dev/null; then
				VM_RESET_DONE[$name]=1
				vm_on_reset "$name" || vm_diag "$name: the reset hook failed"
			fi
			if grep -q 'VGPU-VM-RESULT:' "${VM_CONSOLE[$name]}" 2>/dev/null; then
				VM_SECS[$name]=$(vm_elapsed "${VM_T0[$name]}" "$now")
				VM_STATUS[$name]=done
			elif [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
				VM_SECS[$name]=$(vm_elapsed "${VM_T0[$name]}" "$now")
				VM_STATUS[$name]=exited
			else
				busy=1
			fi
		done
		[ $busy -eq 0 ] && break
		if [ "$(date +%s)" -ge "$deadline" ]; then
			for name in "$@"; do
				[ "${VM_STATUS[$name]}" = running ] && VM_STATUS[$name]=timeout
			done
			break
		fi
		sleep 0.1
	done
	# A guest powers off right after its result line: give QEMU a moment, then make sure.
	for name in "$@"; do
		pid=${VM_PID[$name]}
		[ -n "$pid" ] || continue
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		VM_PID[$name]=
	done
	return 0
}

# vm_managed_point NAME: one point for the managed-memory case of guest NAME (issue 8:
# managed memory inside a VM), from the guest's "# managed: ..." line: ok, with the
# counters, if the case passed with GPU faults serviced and CPU faults taken (both > 0);
# skipped with the guest's reason if the guest skipped the case; not ok otherwise (a
# case that did not run, failed or counted nothing). Returns 1 if not ok.
vm_managed_point() {
	local name=$1 log=${VM_CONSOLE[$1]} res line gpu cpu

	res=$(tr -d '\r' <"$log" 2>/dev/null | grep -a -m1 '^\(not \)\?ok [0-9]* - managed memory')
	line=$(tr -d '\r' <"$log" 2>/dev/null | grep -a -m1 '^# managed: ')
	line=${line#\# }
	case "$res" in
	*"# SKIP"*)
		vm_point skip "$name: managed memory in the VM" "${res#*# SKIP }"
		return 0 ;;
	"ok "*)
		gpu=$(echo "$line" | sed -n 's/.*GPU faults: \([0-9]*\) entries.*/\1/p')
		cpu=$(echo "$line" | sed -n 's/.*CPU faults: \([0-9]*\),.*/\1/p')
		if [ "${gpu:-0}" -gt 0 ] && [ "${cpu:-0}" -gt 0 ]; then
			vm_point ok "$name: managed memory in the VM ($gpu GPU fault entries, $cpu CPU faults)"
			return 0
		fi
		vm_point fail "$name: managed memory in the VM" "no faults counted: ${line:-no # managed: line}" ;;
	"")	vm_point fail "$name: managed memory in the VM" "the guest never reported the case" ;;
	*)	vm_point fail "$name: managed memory in the VM" "${line:-the case failed}" ;;
	esac
	return 1
}

# vm_report NAME: the guest's TAP points as this suite's points ("ok N - NAME: case"), a
# failed point for a missing result line (timeout, crash) and for every point the guest
# announced in its plan but never reported. Returns 1 if anything failed.
vm_report() {
	local name=$1 log=${VM_CONSOLE[$1]} line desc plan=0 seen=0 result fails=$VM_FAILED
	local gfail=0 rfail

	while IFS= read -r line; do
		line=${line%$'\r'}
		case "$line" in
		"ok "*|"not ok "*)
			seen=$((seen + 1))
			desc=${line#ok }
			desc=${desc#not ok }
			desc=${desc#* - }
			case "$line" in
			*"# SKIP"*) vm_point skip "$name: ${desc%% # SKIP*}" "${line#*# SKIP }" ;;
			"ok "*) vm_point ok "$name: $desc" ;;
			*) vm_point fail "$name: $desc"; gfail=$((gfail + 1)) ;;
			esac ;;
		1..[0-9]*) plan=${line#1..}; plan=${plan%% *} ;;
		"#"*) echo "# $name: ${line#\# }" ;;
		esac
	done < <(sed -n '/VGPU-VM-START/,/VGPU-VM-RESULT:/p' "$log" 2>/dev/null)
	while [ "$seen" -lt "$plan" ]; do
		seen=$((seen + 1))
		vm_point fail "$name: guest test $seen of $plan never reported"
	done
	result=$(grep -a -o 'VGPU-VM-RESULT:.*' "$log" 2>/dev/null | tr -d '\r' | tail -1)
	# Failures the guest counted without a point of their own (init: no summary).
	rfail=$(echo "$result" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
	if [ -n "$rfail" ] && [ "$rfail" -gt "$gfail" ]; then
		vm_point fail "$name: the guest reports $rfail failure(s), $gfail with a test point"
	fi
	case "${VM_STATUS[$name]}" in
	done) vm_diag "$name: ${result#VGPU-VM-RESULT: } (launch -> result ${VM_SECS[$name]} s)" ;;
	timeout) vm_point fail "$name: result line" "no VGPU-VM-RESULT within ${VM_TIMEOUT} s" ;;
	*) vm_point fail "$name: result line" "the VM ended without a VGPU-VM-RESULT line" ;;
	esac
	if [ "$VM_FAILED" -ne "$fails" ]; then
		vm_diag "$name: last console lines:"
		tr -d '\r' <"$log" 2>/dev/null | tail -15 | sed "s/^/#   /"
		[ -s "$VM_TMP/$name.qemu.log" ] && sed "s/^/#   qemu: /" "$VM_TMP/$name.qemu.log" | head -5
		return 1
	fi
	return 0
}
