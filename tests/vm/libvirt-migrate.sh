#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# VM tier through libvirt, live migration between two hosts on one machine
# (tests/vm/libvirt-migrate-lib.sh: two network namespaces, a libvirtd and a vgpud each).
#   - A domain launched in ivshmem peer mode (what every ABI 2 guest, 2.1 ones too, needs)
#     is refused by vgpu-vm migrate with the reason, before anything moves, and keeps
#     running on host a.
#   - A migratable domain (vgpu-vm launch --migratable: the guest is ivshmem peer 0) runs
#     the guest workload in a loop in one attachment (FILL and COPY, REDUCE_ADD_U32 and
#     AXPY_F32, each checked against the CPU: vgpu-vf-test --only vs --loop S) and moves a
#     -> b -> a while it runs: each move is vgpu-vm migrate's report, the domain then runs
#     on the other host only, and its slice is attached there; the workload went on after
#     the last move, and every round of it passed.
#   - On host b, while the workload's domain is there, an attacker domain (the in-VM
#     isolation attacks, vgpu-vf-test --attack, as libvirt-attack.sh) gets nothing but its
#     own errors.
# The peer-mode domain and the workload's start together. Every wait is for a console line,
# a domain state or a command's end; only the workload's loop has a length of its own
# (MIG_LOOP_S: about twice what both moves take).
. "$(dirname "$0")/libvirt-migrate-lib.sh"

MIG_LOOP_S=${MIG_LOOP_S:-120}	# the guest's workload: about twice what the moves take under TCG
PEER_LOOP_S=${PEER_LOOP_S:-10}	# the peer-mode guest: running while vgpu-vm migrate refuses

mh_init libvirt-migrate
mh_require
mh_net
mh_host a
mh_host b

# mig_point NAME DESCRIPTION: one point for the last mh_migrate (its error if it failed).
mig_point() {
	local rc=$1 what=$2 f=$MH_LAST_MIGRATE

	if [ "$rc" -eq 0 ]; then
		vm_point ok "$what"
		vm_diag "$(tr -d '\n' <"$f.json" | tr -s ' ')"
	else
		vm_point fail "$what" "vgpu-vm exit $rc: $(grep -v '^slice:\|^vm:' "$f.err" | tail -2 | tr '\n' ' ')"
	fi
	grep '^slice:\|^vm:' "$f.err" | tail -3 | while read -r l; do vm_diag "  $l"; done
}

# wait_console NAME PATTERN: until the console shows PATTERN or the guest ends (0 or 1).
wait_console() {
	local i

	for i in $(seq $((VM_TIMEOUT * 10))); do
		grep -q "$2" "${VM_CONSOLE[$1]}" 2>/dev/null && return 0
		grep -q 'VGPU-VM-RESULT:' "${VM_CONSOLE[$1]}" 2>/dev/null && return 1
		sleep 0.1
	done
	return 1
}

# ---- both domains start on host a ----------------------------------------------------------
mh_slice a old || { vm_point fail "libvirt-migrate: slice old"; vm_finish; }
mh_slice a g || { vm_point fail "libvirt-migrate: slice g"; vm_finish; }
mh_launch_bg a old old peer vfio --only,ping,--loop,"$PEER_LOOP_S"
mh_launch_bg a g g migratable vfio --only,vs,--loop,"$MIG_LOOP_S"

# ---- a guest in peer mode is refused -------------------------------------------------------
old_up=
if mh_launch_end old && wait_console old '^# loop: round 1'; then
	old_up=1
	mh_migrate a b old
	rc=$?
	err=$(grep -v '^slice:\|^vm:' "$MH_LAST_MIGRATE.err" | tail -1)
	if [ $rc -ne 0 ] && echo "$err" | grep -q 'peer mode' &&
	   echo "$err" | grep -q -- '--migratable'; then
		vm_point ok "peer mode (an ABI 2.1 guest's): vgpu-vm migrate refuses, naming why"
	else
		vm_point fail "peer mode (an ABI 2.1 guest's): vgpu-vm migrate refuses, naming why" \
			"exit $rc: $err"
	fi
	[ -z "$(mh_state b old)" ] && vm_point ok "peer mode: nothing arrived on host b" ||
		vm_point fail "peer mode: nothing arrived on host b" "b has it: $(mh_state b old)"
else
	vm_point fail "peer mode: domain launched on host a" "$(cat "$VM_TMP/old.launch.err" 2>/dev/null)"
fi

# ---- the workload moves a -> b -> a --------------------------------------------------------
if ! mh_launch_end g; then
	vm_point fail "migratable domain launched on host a" "$(cat "$VM_TMP/g.launch.err")"
	vm_finish
fi
if ! wait_console g '^# loop: round 1'; then
	vm_point fail "the guest's workload runs on host a" "$(tail -5 "${VM_CONSOLE[g]}" | tr '\n' ' ')"
	vm_finish
fi
vm_point ok "the guest's workload runs on host a"

mh_migrate a b g
moved=$?
mig_point $moved "move a -> b while the workload runs"
# Live, unless TCG on a QEMU before 9.0 (it loses guest writes in a live RAM copy).
qemu_major=$(qemu-system-x86_64 --version | sed -n '1s/.*version \([0-9]*\)\..*/\1/p')
want_live=true
[ "$VGPU_ACCEL" = tcg ] && [ "${qemu_major:-0}" -lt 9 ] && want_live=false
if [ $moved -eq 0 ] && grep -q "\"vm_live\": $want_live" "$MH_LAST_MIGRATE.json"; then
	vm_point ok "the VM's RAM moved live: $want_live (QEMU $qemu_major, $VGPU_ACCEL)"
else
	vm_point fail "the VM's RAM moved live: $want_live (QEMU $qemu_major, $VGPU_ACCEL)" \
		"$(grep vm_live "$MH_LAST_MIGRATE.json" 2>/dev/null)"
fi
if [ "$(mh_state b g)" = running ] && [ -z "$(mh_state a g)" ]; then
	vm_point ok "after a -> b the domain runs on host b only"
else
	vm_point fail "after a -> b the domain runs on host b only" \
		"a: '$(mh_state a g)', b: '$(mh_state b g)'"
fi
if mh_ctl b --json list -u "${MH_UUID[g]}" 2>/dev/null | grep -q '"attached": true'; then
	vm_point ok "after a -> b the slice is attached on host b"
else
	vm_point fail "after a -> b the slice is attached on host b"
fi

# The isolation attacks on host b, next to the domain that moved there.
if mh_slice b attacker && mh_launch b attacker attacker migratable attack; then
	vm_wait attacker
	vm_report attacker
else
	vm_point fail "host b: attacker domain launched" "$(cat "$VM_TMP/attacker.launch.err" 2>/dev/null)"
fi

if [ $moved -eq 0 ]; then
	mh_migrate b a g
	mig_point $? "move b -> a while the workload runs"
	if [ "$(mh_state a g)" = running ] && [ -z "$(mh_state b g)" ]; then
		vm_point ok "after b -> a the domain runs on host a only"
	else
		vm_point fail "after b -> a the domain runs on host a only" \
			"a: '$(mh_state a g)', b: '$(mh_state b g)'"
	fi
else
	vm_point fail "move b -> a while the workload runs" "not tried: a -> b failed"
fi
# The guest prints a round line at most once a second: one more line is a later round.
lines_then=$(grep -c '^# loop: round' "${VM_CONSOLE[g]}")
went_on=
for _ in $(seq $((VM_TIMEOUT * 10))); do
	[ "$(grep -c '^# loop: round' "${VM_CONSOLE[g]}")" -gt "$lines_then" ] && { went_on=1; break; }
	grep -q 'VGPU-VM-RESULT:' "${VM_CONSOLE[g]}" && break
	sleep 0.1
done
if [ -n "$went_on" ]; then
	vm_point ok "the workload went on after the moves ($(grep '^# loop: round' "${VM_CONSOLE[g]}" | tail -1 | tr -d '\r#'))"
else
	vm_point fail "the workload went on after the moves" "no round line after the last move"
	for h in a b; do
		[ "$(mh_state "$h" g)" = running ] && mh_guest_probe "$h" g
	done
fi
# The peer-mode guest ended long ago (its loop is short): its result.
if [ -n "$old_up" ]; then
	vm_wait old
	vm_report old
fi
VM_TIMEOUT=$((MIG_LOOP_S + 120))	# the rest of the loop, then the result
vm_wait g
vm_report g
vm_finish
