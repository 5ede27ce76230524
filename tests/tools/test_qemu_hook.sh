#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TAP test of the libvirt qemu hook script (vmm_glue/hook/qemu-hook.in): what it hands to
# vgpu-vm for the operations it passes on, a domain named like an option included (libvirt
# accepts such names; vgpu-vm must see it after "--", as an argument, never as an option).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A stand-in for vgpu-vm that records its arguments, one per line.
cat >"$tmp/vgpu-vm" <<STUB
#!/bin/sh
cat >/dev/null
printf '%s\n' "\$@" >"$tmp/args"
STUB
chmod +x "$tmp/vgpu-vm"
sed "s|@VGPU_VM@|$tmp/vgpu-vm|" "$here/vmm_glue/hook/qemu-hook.in" >"$tmp/hook"
echo "1..4"

n=0
check() {	# check NAME WANT-ARGS HOOK-ARGS...: WANT-ARGS one per line, "" for no call
	local name=$1 want=$2 got
	shift 2
	n=$((n + 1))
	rm -f "$tmp/args"
	echo '<domain/>' | sh "$tmp/hook" "$@" >/dev/null 2>&1
	got=$(cat "$tmp/args" 2>/dev/null)
	if [ "$got" = "$want" ]; then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name: vgpu-vm got '$(echo $got)', want '$(echo $want)'"
	fi
}

nl='
'
args() { local IFS=$nl; echo "$*"; }
check "prepare begin goes to vgpu-vm hook after --" "$(args hook -- vm1 prepare begin -)" \
	vm1 prepare begin -
check "a domain named --help stays an argument" "$(args hook -- --help prepare begin -)" \
	--help prepare begin -
check "a domain named -cfoo stays an argument" "$(args hook -- -cfoo release end -)" \
	-cfoo release end -
check "other operations never reach vgpu-vm" "" --json start begin -
