# SPDX-License-Identifier: MIT
# tests/vm/libvirt-migrate-lib.sh - two "hosts" on one machine for the migration suites
# (tests/vm/libvirt-migrate*.sh), on top of tests/vm/libvirt-lib.sh. Source it instead:
#
#	. "$(dirname "$0")/libvirt-migrate-lib.sh"
#	mh_init NAME			# vm_init + teardown of both hosts at exit, even on failure
#	mh_require			# lv_require + ip, unshare, nsenter; else skipped
#	mh_net				# two network namespaces joined by a veth pair
#	mh_host a; mh_host b		# each: virtlogd + libvirtd (tcp, auth none) + vgpud
#	mh_slice a g			# a slice on host a for libvirt's QEMU: MH_UUID[g]
#	mh_launch a g g migratable vfio ARGS...	# vgpu-vm launch on host a (no --wait)
#	mh_launch_bg ...; mh_launch_end g	# the same in the background, then its result
#	mh_migrate a b g [ARGS...]	# vgpu-vm migrate of g's domain from a to b
#	mh_in a CMD...			# CMD in host a's network and mount namespaces
#
# A host H is: network namespace vgpu-m<pid>-H holding one end of the veth pair, address
# $MH_NET.1 (a) or $MH_NET.2 (b), nothing outside the namespaces; and a mount namespace (the
# one its libvirtd runs in) where /etc/libvirt, /run/libvirt, /var/lib/libvirt and
# /var/log/libvirt are the host's own directories under $VM_TMP/host-H, so that the two
# libvirtds share no runtime, state, configuration or hook (libvirtd finds hooks in
# /etc/libvirt/hooks). Each libvirtd listens on its address with listen_tcp and auth_tcp
# "none" (for this test only; doc/vms.md says how to use TLS) and has its own host UUID (libvirt
# refuses to migrate to the host it migrates from). QEMU's capability cache
# (/var/cache/libvirt) and /dev/shm are shared: vgpud names its objects per instance. Each
# host's vgpud runs in the host's network namespace (its migration stream goes over the veth)
# with its runtime and state under $VM_TMP/host-H/vgpud; its control socket is a plain path,
# reachable from everywhere. Teardown (EXIT trap) destroys the domains, stops both
# libvirtds, virtlogds and vgpuds by their recorded pids, and deletes the namespaces.
MH_LIBDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$MH_LIBDIR/libvirt-lib.sh"

MH_NET=10.77.0
declare -A MH_NS MH_IP MH_ROOT MH_VGPUD MH_UUID MH_VF MH_DOM MH_DOMHOST

mh_init() {
	vm_init "$1"
	trap 'mh_cleanup; vm_cleanup' EXIT
}

mh_require() {
	local t

	lv_require
	for t in ip unshare nsenter mount; do
		command -v "$t" >/dev/null || vm_skip_all "$t not installed"
	done
	ip netns list >/dev/null 2>&1 || vm_skip_all "no network namespaces here (ip netns)"
	lv_locked mh_kvm_enter
}

# /dev/kvm as Debian's udev leaves it (root:kvm 0660), as the libvirt tier sets it for its
# runs (lv_kvm_fix): with a root-only /dev/kvm each libvirtd re-probes QEMU several times
# per domain start, most of a minute on a loaded machine. This run counts as one of the
# tier's users (under its lock), so that the last one to leave puts the mode back.
mh_kvm_enter() {
	touch "$LV_STATE/users/$$"
	lv_prune_users
	lv_kvm_fix
}

# mh_net: the namespaces and the veth pair; addresses only inside them.
mh_net() {
	local h i=1

	for h in a b; do
		MH_NS[$h]=vgpu-m$$-$h
		MH_IP[$h]=$MH_NET.$i
		i=$((i + 1))
		ip netns add "${MH_NS[$h]}" || { vm_point fail "$VM_NAME: netns ${MH_NS[$h]}"; vm_finish; }
		ip -n "${MH_NS[$h]}" link set lo up
	done
	if ! ip link add "vgm$$a" type veth peer name "vgm$$b" ||
	   ! ip link set "vgm$$a" netns "${MH_NS[a]}" || ! ip link set "vgm$$b" netns "${MH_NS[b]}"; then
		vm_point fail "$VM_NAME: veth pair between the hosts"
		vm_finish
	fi
	for h in a b; do
		ip -n "${MH_NS[$h]}" addr add "${MH_IP[$h]}/24" dev "vgm$$$h" &&
			ip -n "${MH_NS[$h]}" link set "vgm$$$h" up ||
			{ vm_point fail "$VM_NAME: address of host $h"; vm_finish; }
	done
	vm_diag "hosts a (${MH_IP[a]}) and b (${MH_IP[b]}) in namespaces ${MH_NS[a]}, ${MH_NS[b]}"
}

# mh_in H CMD...: CMD in host H's network namespace and its libvirtd's mount namespace.
mh_in() {
	local h=$1 pid
	shift
	pid=$(cat "${MH_ROOT[$h]}/libvirtd.pid" 2>/dev/null)
	nsenter --net="/run/netns/${MH_NS[$h]}" --mount="/proc/$pid/ns/mnt" "$@"
}

# The host's copy of a system directory: the tree of directories with their owners and
# modes, no files (libvirt makes what it needs; /etc/libvirt is copied whole instead).
mh_dirs() {
	local from=$1 to=$2 d

	mkdir -p "$to"
	(cd "$from" && find . -type d -printf '%P|%u|%g|%m\n') |
	while IFS='|' read -r d u g m; do
		[ -n "$d" ] || { chown "$u:$g" "$to"; chmod "$m" "$to"; continue; }
		mkdir -p "$to/$d" && chown "$u:$g" "$to/$d" && chmod "$m" "$to/$d"
	done
}

# The libvirtd configuration of host H: tcp on its address, no authentication, no TLS, its
# own host UUID; the vgpu hook pointing at this build's vgpu-vm.
mh_config() {
	local h=$1 r=${MH_ROOT[$1]}

	cp -a /etc/libvirt/. "$r/etc/"
	rm -rf "$r/etc/hooks"
	mkdir -p "$r/etc/hooks/qemu.d"
	sed "s|@VGPU_VM@|$VGPU_BIN/vgpu-vm|" "$MH_LIBDIR/../../vmm_glue/hook/qemu-hook.in" \
		>"$r/etc/hooks/qemu.d/vgpu" && chmod 0755 "$r/etc/hooks/qemu.d/vgpu"
	cat >>"$r/etc/libvirtd.conf" <<-EOF
	# tests/vm/libvirt-migrate-lib.sh, host $h: the test network only
	listen_tls = 0
	listen_tcp = 1
	listen_addr = "${MH_IP[$h]}"
	auth_tcp = "none"
	host_uuid = "$(cat /proc/sys/kernel/random/uuid)"
	EOF
}

# mh_vgpud_up SOCKET PID: the host's vgpud answers on SOCKET, or it is gone (for vm_until).
mh_vgpud_up() {
	[ -S "$1" ] || ! kill -0 "$2" 2>/dev/null
}

# mh_host H: host H's directories, daemons and vgpud; the suite fails if one won't come up.
mh_host() {
	local h=$1 r=$VM_TMP/host-$1 i
	local uri cpus first

	MH_ROOT[$h]=$r
	mkdir -p "$r/etc" "$r/run" "$r/log/qemu" "$r/vgpud/run" "$r/vgpud/state"
	chmod 0755 "$r" "$r/vgpud" "$r/vgpud/run"
	mh_dirs /var/lib/libvirt "$r/lib"
	mh_config "$h"
	# libvirtd on the first allowed CPU until it answers, as lv_libvirtd_start does: the
	# shared capability cache stays valid instead of QEMU being probed again.
	cpus=$(taskset -pc $$ 2>/dev/null | sed 's/.*: *//')
	first=$(echo "$cpus" | sed 's/[-,].*//')
	ip netns exec "${MH_NS[$h]}" unshare -m --propagation private bash -c '
		r=$1 pin=$2
		mount --bind "$r/etc" /etc/libvirt && mount --bind "$r/run" /run/libvirt &&
		mount --bind "$r/lib" /var/lib/libvirt && mount --bind "$r/log" /var/log/libvirt &&
		virtlogd -d -p "$r/virtlogd.pid" &&
		${pin:+taskset -c "$pin"} libvirtd -d --listen -p "$r/libvirtd.pid"' \
		mh-host "$r" "$first" >"$r/daemons.log" 2>&1 ||
		{ vm_point fail "$VM_NAME: host $h: virtlogd and libvirtd start" "$(tail -3 "$r/daemons.log")"; vm_finish; }
	uri="qemu+tcp://${MH_IP[$h]}/system"
	for i in $(seq 600); do
		mh_in "$h" virsh -c "$uri" version >/dev/null 2>&1 && break
		sleep 0.1
	done
	mh_in "$h" virsh -c "$uri" version >/dev/null 2>&1 ||
		{ vm_point fail "$VM_NAME: host $h: libvirtd answers on $uri"; vm_finish; }
	[ -n "$first" ] && taskset -a -pc "$cpus" "$(cat "$r/libvirtd.pid")" >/dev/null 2>&1
	ip netns exec "${MH_NS[$h]}" "$VGPU_BIN/vgpud" --runtime-dir "$r/vgpud/run" \
		--state-dir "$r/vgpud/state" --vram "${VM_VRAM:-4G}" --max-vfs 4 --num-vfs 4 \
		--spare-vram 256M --log-level info >"$r/vgpud.log" 2>&1 &
	MH_VGPUD[$h]=$!
	vm_until mh_vgpud_up "$r/vgpud/run/control.sock" "${MH_VGPUD[$h]}"
	[ -S "$r/vgpud/run/control.sock" ] ||
		{ vm_point fail "$VM_NAME: host $h: vgpud starts" "$(tail -3 "$r/vgpud.log")"; vm_finish; }
	vm_diag "host $h: libvirtd (pid $(cat "$r/libvirtd.pid")) on $uri, vgpud (pid ${MH_VGPUD[$h]})"
}

# mh_ctl H ARGS...: vgpuctl against host H's vgpud.
mh_ctl() {
	local h=$1
	shift
	"$VGPU_BIN/vgpuctl" --socket "${MH_ROOT[$h]}/vgpud/run/control.sock" "$@"
}

# mh_vm H ARGS...: vgpu-vm on host H (its libvirtd, its vgpud).
mh_vm() {
	local h=$1
	shift
	mh_in "$h" "$VGPU_BIN/vgpu-vm" --socket "${MH_ROOT[$h]}/vgpud/run/control.sock" \
		--connect qemu:///system "$@"
}

# mh_virsh H ARGS...: virsh on host H.
mh_virsh() {
	local h=$1
	shift
	mh_in "$h" virsh -c qemu:///system "$@"
}

# mh_slice H NAME [TYPE]: a running slice on host H that libvirt's QEMU may attach to.
mh_slice() {
	local h=$1 name=$2 uuid vf

	uuid=$(cat /proc/sys/kernel/random/uuid)
	if ! mh_ctl "$h" define -t "${3:-vgpu-512M}" -u "$uuid" --manual --owner-uid libvirt-qemu \
		>>"$VM_TMP/vgpuctl.log" 2>&1 || ! mh_ctl "$h" start -u "$uuid" >>"$VM_TMP/vgpuctl.log" 2>&1; then
		vm_diag "slice $name on host $h: $(tail -2 "$VM_TMP/vgpuctl.log" | tr '\n' ' ')"
		return 1
	fi
	vf=$(mh_ctl "$h" --json list -u "$uuid" 2>/dev/null | grep -o '"vf": *[0-9]*' | head -1 |
	     grep -o '[0-9]*$')
	MH_UUID[$name]=$uuid
	MH_VF[$name]=$vf
	return 0
}

# mh_launch H NAME SLICE migratable|peer MODE [SUITE-ARGS...]: the guest image on host H
# through vgpu-vm launch (a transient domain, not waited for: it may move), console to
# $VM_TMP/NAME.console; vm_wait/vm_report follow it by its console.
mh_launch() {
	mh_launch_bg "$@"
	mh_launch_end "$2"
}

# mh_launch_bg ARGS...: mh_launch's vgpu-vm launch in the background (libvirt takes a
# while to start a domain: two can start at once); mh_launch_end NAME waits for it and
# returns its result.
declare -A MH_LAUNCH_PID MH_LAUNCH_VF
mh_launch_bg() {
	local h=$1 name=$2 slice=$3 kind=$4 mode=$5 log=$VM_TMP/$2.console dom=vgpu-t$$-$2
	local -a extra=()
	shift 5

	[ "$kind" = migratable ] && extra=(--migratable)
	: >"$log"
	chmod 0666 "$log"
	MH_DOM[$name]=$dom
	MH_DOMHOST[$name]=$h
	MH_LAUNCH_VF[$name]=${MH_VF[$slice]}
	mh_vm "$h" --json launch --slice "${MH_UUID[$slice]}" --name "$dom" "${extra[@]}" \
		--kernel "$VM_TMP/vmlinux" --initrd "$VM_TMP/initramfs.cpio.gz" \
		--cmdline "$(vm_cmdline q35 "$mode" "$@")" --memory "$VM_MEM" \
		--accel "$VGPU_ACCEL" --console-log "$log" \
		>"$VM_TMP/$name.launch.json" 2>"$VM_TMP/$name.launch.err" &
	MH_LAUNCH_PID[$name]=$!
}

mh_launch_end() {
	local name=$1

	if ! wait "${MH_LAUNCH_PID[$name]}"; then
		vm_diag "$name: $(cat "$VM_TMP/$name.launch.err")"
		return 1
	fi
	vm_register "$name" "$VM_TMP/$name.console" "" "${MH_LAUNCH_VF[$name]}"
	return 0
}

# mh_migrate FROM TO NAME [ARGS...]: vgpu-vm migrate of NAME's domain, its JSON report in
# $VM_TMP/NAME.migrate-N.json and its progress and errors in .err. 0 or vgpu-vm's status.
mh_migrate() {
	local from=$1 to=$2 name=$3 n rc
	shift 3

	n=$(ls "$VM_TMP/$name".migrate-*.json 2>/dev/null | wc -l)
	mh_vm "$from" --json migrate "${MH_DOM[$name]}" --to "qemu+tcp://${MH_IP[$to]}/system" \
		--dest-socket "${MH_ROOT[$to]}/vgpud/run/control.sock" "$@" \
		>"$VM_TMP/$name.migrate-$n.json" 2>"$VM_TMP/$name.migrate-$n.err"
	rc=$?
	[ $rc -eq 0 ] && MH_DOMHOST[$name]=$to
	MH_LAST_MIGRATE=$VM_TMP/$name.migrate-$n
	return $rc
}

# mh_guest_probe H NAME: what domain NAME's vCPU does on host H, for a guest that stopped
# making progress: its registers and the guest kernel's jiffies twice, two seconds apart (the
# address from the "# ksym" line its init printed), then the instructions at its RIP, so
# the log tells a spinning kernel, a guest whose clock stands still and a stuck test apart.
mh_guest_probe() {
	local h=$1 dom=${MH_DOM[$2]} j i l
	j=$(grep -a '^# ksym .* jiffies_64' "${VM_CONSOLE[$2]}" 2>/dev/null | tail -1 | awk '{print $3}')
	for i in 1 2; do
		mh_virsh "$h" qemu-monitor-command "$dom" --hmp 'info registers' 2>&1 | tr -d '\r' |
			grep -E '^(RIP|RSP|CS |EFL|CR0)' | while read -r l; do vm_diag "  $h: $l"; done
		[ -n "$j" ] && vm_diag "  $h: jiffies $(mh_virsh "$h" qemu-monitor-command "$dom" \
			--hmp "x /1gx 0x$j" 2>&1 | tr -d '\r' | awk 'NF { print $2 }')"
		[ "$i" = 1 ] && sleep 2
	done
	mh_virsh "$h" qemu-monitor-command "$dom" --hmp 'x/8i $pc' 2>&1 | tr -d '\r' |
		while read -r l; do [ -n "$l" ] && vm_diag "  $h: $l"; done
}

# mh_state H NAME: the domain's state on host H ("" if it has none there).
mh_state() {
	mh_virsh "$1" domstate "${MH_DOM[$2]}" 2>/dev/null | head -1
}

# Stop what mh_* started, by pid, and delete the namespaces (also after a failure).
mh_stop_pidfile() {
	[ -s "$1" ] && lv_stop_pid "$(cat "$1")" "$2"
}

mh_cleanup() {
	local h name pid log

	for name in "${!MH_DOM[@]}"; do
		for h in a b; do
			[ -s "${MH_ROOT[$h]}/libvirtd.pid" ] &&
				mh_virsh "$h" destroy "${MH_DOM[$name]}" >/dev/null 2>&1
		done
	done
	for h in a b; do
		[ -n "${MH_ROOT[$h]:-}" ] || continue
		mh_stop_pidfile "${MH_ROOT[$h]}/libvirtd.pid" libvirtd
		mh_stop_pidfile "${MH_ROOT[$h]}/virtlogd.pid" virtlogd
		pid=${MH_VGPUD[$h]:-}
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid"
			for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
		mh_shm_cleanup "${MH_ROOT[$h]}/vgpud/state"
		cp "${MH_ROOT[$h]}/vgpud.log" "${VGPU_TEST_LOGS:-build/test-logs}/vm-$VM_NAME-vgpud-$h.log" \
			2>/dev/null
		# each domain's QEMU log on this host: why a QEMU ended, when one did
		for name in "${!MH_DOM[@]}"; do
			log=${VGPU_TEST_LOGS:-build/test-logs}/vm-$VM_NAME-$name-qemu-$h.log
			rm -f "$log"
			cp "${MH_ROOT[$h]}/log/qemu/${MH_DOM[$name]}.log" "$log" 2>/dev/null
		done
	done
	for h in a b; do
		[ -n "${MH_NS[$h]:-}" ] && ip netns del "${MH_NS[$h]}" 2>/dev/null
	done
	[ -e "$LV_STATE/users/$$" ] && lv_locked lv_leave
	return 0
}

# A vgpud's BAR2 objects (/dev/shm/<instance>-vf<N>, the instance named in its journal).
mh_shm_cleanup() {
	local inst

	inst=$(sed -n 's/.*"instance": *"\([^"]*\)".*/\1/p' "$1/journal.json" 2>/dev/null | head -1)
	[ -n "$inst" ] && rm -f "/dev/shm/$inst"-vf*
	return 0
}
