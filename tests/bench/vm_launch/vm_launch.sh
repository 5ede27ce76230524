#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# vm_launch - VM launch -> guest suite result, direct QEMU against libvirt, in one run.
#
#	tests/bench/vm_launch/vm_launch.sh [--runs N] [--args A,B,...] [--json]
#	make BUILD=... vm-bench			(the same with --json, image and binaries built)
#
# Each run boots the guest image of `make guest-image` twice, one path after the other (the
# order alternates between runs, so that a drifting load favours neither): directly on QEMU
# (tests/vm/lib.sh vm_qemu) and through libvirt with `vgpu-vm launch --wait`
# (tests/vm/libvirt-lib.sh lv_launch). Both are q35 + intel-iommu, TCG, 1 vCPU, VM_MEM MiB,
# the guest running vgpu-vf-test over vfio-pci on a vgpu-512M slice of a private vgpud, with
# vgpu_args A,B,... (default --only,attach: boot, bind vfio-pci, attach, handshake).
#
# Stages, seconds after the launch command was started, seen by polling every 20 ms:
#   qemu_exec_s        the QEMU process exists (its start time in /proc, 10 ms ticks)
#   domain_started_s   libvirt only: virDomainCreateXML returned (vgpu-vm's "[booting]";
#                      the hook has run, QEMU was set up over QMP and let go)
#   guest_start_s      the guest's "VGPU-VM-START" on the console (kernel booted, init ran)
#   attached_s         vgpud reports the slice's endpoint attached (the guest's driver)
#   result_s           the guest's "VGPU-VM-RESULT" line: the figure compared
#   qemu_cpu_s         CPU time QEMU had used by then (user + system): more wall time for
#                      the same CPU time is waiting for a CPU, not more work
#   vgpu_vm_cpu_s, daemons_cpu_s   libvirt only: CPU time of vgpu-vm, and of libvirtd +
#                      virtlogd during the launch, by then
# and, once per run of the script, libvirtd_ready_s: virtlogd + libvirtd started (if they were
# not running) until libvirtd answers, with caps_probed saying whether it had to probe QEMU's
# capabilities again (its cache in /var/cache/libvirt/qemu/capabilities was rewritten).
#
# Output: a table, or with --json one object: cpu_model, cpu_cores, cpu_family, cpu_model_id
# (tests/bench/bench_cpu.sh), the load average, the medians vm_launch_direct_s,
# vm_launch_libvirt_s, vm_launch_ratio (libvirt / direct), every run, and the median of each
# stage per path. Needs what the libvirt tier needs (root,
# libvirtd, virtlogd, QEMU); otherwise it says why and exits 77.
. "$(dirname "$0")/../../vm/libvirt-lib.sh"
. "$(dirname "$0")/../bench_cpu.sh"

RUNS=5
ARGS=--only,attach
JSON=0
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) RUNS=$2; shift 2 ;;
	--args) ARGS=$2; shift 2 ;;
	--json) JSON=1; shift ;;
	*) echo "usage: $0 [--runs N] [--args A,B,...] [--json]" >&2; exit 2 ;;
	esac
done
case "$RUNS" in
''|*[!0-9]*|0) echo "vm_launch: --runs wants a positive number, not \"$RUNS\"" >&2; exit 2 ;;
esac

# The tier's helpers speak TAP; a benchmark only needs to know why it cannot run.
vm_point() {
	case "$1" in
	ok) ;;
	skip) echo "vm_launch: cannot run: ${3:-$2}" >&2; exit 77 ;;
	*) echo "vm_launch: $2${3:+: $3}" >&2; exit 1 ;;
	esac
}
vm_diag() { :; }

IFS=, read -r -a GUEST_ARGS <<<"$ARGS"
CLK_TCK=$(getconf CLK_TCK)

# Seconds since boot, as /proc/<pid>/stat counts a process's start.
uptime_s() {
	cut -d' ' -f1 /proc/uptime
}

# qemu_start PID: when the process started, in seconds since boot ("" if gone).
qemu_start() {
	local stat

	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	# Field 22 of the whole line is field 20 after "pid (comm) ".
	awk -v hz="$CLK_TCK" '{ printf "%.2f", $20 / hz }' <<<"$stat"
}

# qemu_cpu PID: the CPU time (user + system) the process has used so far, seconds.
qemu_cpu() {
	local stat

	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	awk -v hz="$CLK_TCK" '{ printf "%.2f", ($12 + $13) / hz }' <<<"$stat"
}

# daemons_cpu: CPU time libvirtd and virtlogd have used so far, seconds.
daemons_cpu() {
	local a b

	a=$(qemu_cpu "$(cat /run/libvirtd.pid 2>/dev/null)")
	b=$(qemu_cpu "$(cat /run/virtlogd.pid 2>/dev/null)")
	awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { printf "%.2f", a + b }'
}

sub() {
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'
}

declare -A ST		# ST[path,run,stage] = seconds

# watch PATH RUN NAME T0 UP0 SLICE QEMU-PID-OR-PIDFILE: poll the VM until its result line,
# the end of the process that started it, or VM_TIMEOUT.
watch() {
	local path=$1 run=$2 name=$3 t0=$4 up0=$5 slice=$6 qsrc=$7 now qpid= qs log=${VM_CONSOLE[$3]}
	local deadline=$(( ${t0%.*} + VM_TIMEOUT ))

	while :; do
		now=$EPOCHREALTIME
		if [ -z "${ST[$path,$run,qemu_exec_s]:-}" ]; then
			qpid=$qsrc
			[ -f "$qsrc" ] && qpid=$(cat "$qsrc" 2>/dev/null)
			qs=
			[ -n "$qpid" ] && qs=$(qemu_start "$qpid")
			if [ -n "$qs" ]; then
				ST[$path,$run,qemu_exec_s]=$(sub "$qs" "$up0")
			else
				qpid=
			fi
		fi
		if [ -z "${ST[$path,$run,guest_start_s]:-}" ] && grep -qa VGPU-VM-START "$log" 2>/dev/null; then
			ST[$path,$run,guest_start_s]=$(sub "$now" "$t0")
		fi
		if [ -z "${ST[$path,$run,attached_s]:-}" ] && [ -n "${ST[$path,$run,guest_start_s]:-}" ] &&
		   vm_ctl --json list -u "${VM_UUID[$slice]}" 2>/dev/null | grep -q '"attached": *true'; then
			ST[$path,$run,attached_s]=$(sub "$EPOCHREALTIME" "$t0")
		fi
		if grep -qa VGPU-VM-RESULT "$log" 2>/dev/null; then
			ST[$path,$run,result_s]=$(sub "$now" "$t0")
			[ -n "$qpid" ] && ST[$path,$run,qemu_cpu_s]=$(qemu_cpu "$qpid")
			if [ "$path" = libvirt ]; then
				# VM_PID is the shell lv_launch put in the background; vgpu-vm is its child.
				ST[$path,$run,vgpu_vm_cpu_s]=$(qemu_cpu "$(pgrep -P "${VM_PID[$name]}" -x vgpu-vm | head -1)")
				ST[$path,$run,daemons_cpu_s]=$(sub "$(daemons_cpu)" "$DAEMONS_CPU0")
			fi
			return 0
		fi
		kill -0 "${VM_PID[$name]}" 2>/dev/null || return 1
		[ "${now%.*}" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# launch_direct RUN / launch_libvirt RUN: one launch, watched; 1 if it gave no result.
launch_direct() {
	local run=$1 name=d$1 t0 up0

	t0=$EPOCHREALTIME
	up0=$(uptime_s)
	vm_qemu "$name" q35 "${VM_SOCK[d]}" vfio "${GUEST_ARGS[@]}"
	watch direct "$run" "$name" "$t0" "$up0" d "${VM_PID[$name]}"
	local rc=$?
	vm_wait "$name"
	return $rc
}

launch_libvirt() {
	local run=$1 name=l$1 t0 up0 booted rc

	DAEMONS_CPU0=$(daemons_cpu)
	t0=$EPOCHREALTIME
	up0=$(uptime_s)
	lv_launch "$name" l vfio "${GUEST_ARGS[@]}"
	watch libvirt "$run" "$name" "$t0" "$up0" l "/run/libvirt/qemu/${LV_DOM[$name]}.pid"
	rc=$?
	vm_wait "$name"
	# vgpu-vm's own clock for "libvirt started the domain" (its stages end in "(+S s)").
	booted=$(sed -n 's/.*\[booting\].*(+\([0-9.]*\) s)$/\1/p' "$VM_TMP/$name.qemu.log" | head -1)
	[ -n "$booted" ] && ST[libvirt,$run,domain_started_s]=$booted
	return $rc
}

# median V...: the middle value (the mean of the two middle ones for an even count).
median() {
	[ $# -gt 0 ] || { echo null; return; }
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		if (!NR) { print "null"; exit }
		if (NR % 2) printf "%.2f\n", v[(NR + 1) / 2]
		else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# values PATH STAGE: that stage of every run that has it.
values() {
	local i

	for i in $(seq "$RUNS"); do
		[ -n "${ST[$1,$i,$2]:-}" ] && echo "${ST[$1,$i,$2]}"
	done
}

caps_stamp() {
	ls -l --time-style=+%s.%N /var/cache/libvirt/qemu/capabilities/ 2>/dev/null | md5sum
}

lv_init vm_launch
lv_require
caps0=$(caps_stamp)
t=$EPOCHREALTIME
lv_start
LIBVIRTD_READY=$(sub "$EPOCHREALTIME" "$t")
LIBVIRTD_STARTED=false
[ -n "$LV_LIBVIRTD_PID" ] && [ "$(cat "$LV_STATE/libvirtd.pid" 2>/dev/null)" = "$LV_LIBVIRTD_PID" ] &&
	LIBVIRTD_STARTED=true
CAPS_PROBED=false
[ "$(caps_stamp)" != "$caps0" ] && CAPS_PROBED=true
vm_vgpud_start
vm_slice d vgpu-512M || vm_point fail "slice for the direct path"
lv_slice l || vm_point fail "slice for the libvirt path"

for i in $(seq "$RUNS"); do
	if [ $((i % 2)) -eq 1 ]; then
		launch_direct "$i" || vm_point fail "direct run $i gave no result line"
		launch_libvirt "$i" || vm_point fail "libvirt run $i gave no result line"
	else
		launch_libvirt "$i" || vm_point fail "libvirt run $i gave no result line"
		launch_direct "$i" || vm_point fail "direct run $i gave no result line"
	fi
done

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
CPU_JSON=$(bench_cpu_json)
DIRECT=$(median $(values direct result_s))
LIBVIRT=$(median $(values libvirt result_s))
RATIO=$(awk -v a="$LIBVIRT" -v b="$DIRECT" 'BEGIN { printf "%.2f", a / b }')
STAGES="qemu_exec_s domain_started_s guest_start_s attached_s result_s qemu_cpu_s vgpu_vm_cpu_s daemons_cpu_s"

# stages_json PATH: {"stage": median, ...} of the stages that path has.
stages_json() {
	local s v out=

	for s in $STAGES; do
		v=$(values "$1" "$s")
		[ -n "$v" ] || continue
		out+="${out:+, }\"$s\": $(median $v)"
	done
	echo "{$out}"
}

runs_json() {
	local v

	v=$(values "$1" result_s | paste -sd, | sed 's/,/, /g')
	echo "[$v]"
}

if [ "$JSON" = 1 ]; then
	cat <<EOF
{$CPU_JSON, "bench": "vm_launch", "runs": $RUNS, "guest_args": "$ARGS", "loadavg": "$LOAD",
 "vm_launch_direct_s": $DIRECT, "vm_launch_libvirt_s": $LIBVIRT, "vm_launch_ratio": $RATIO,
 "vm_launch_direct_runs_s": $(runs_json direct), "vm_launch_libvirt_runs_s": $(runs_json libvirt),
 "libvirtd_ready_s": $LIBVIRTD_READY, "libvirtd_started": $LIBVIRTD_STARTED, "caps_probed": $CAPS_PROBED,
 "stages_direct": $(stages_json direct),
 "stages_libvirt": $(stages_json libvirt)}
EOF
else
	echo "vm_launch: $(echo "$CPU_JSON" | tr -d '"'), load $LOAD; guest args $ARGS; $RUNS runs"
	echo "libvirtd ready after $LIBVIRTD_READY s (started by this run: $LIBVIRTD_STARTED, QEMU capabilities probed: $CAPS_PROBED)"
	printf '%-18s %-10s %s\n' "stage (median s)" direct libvirt
	for s in $STAGES; do
		printf '%-18s %-10s %s\n' "$s" "$(median $(values direct $s) | sed 's/null/-/')" \
			"$(median $(values libvirt $s) | sed 's/null/-/')"
	done
	echo "launch -> result: direct $(runs_json direct) median $DIRECT s; libvirt $(runs_json libvirt) median $LIBVIRT s; ratio $RATIO"
fi
exit 0
