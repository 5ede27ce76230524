#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The guest kernel driver's figures (make vm-kmod-bench), printed as one JSON object. Two TCG
# guests on slices of a private vgpud, one after the other:
#  - q35 boots with vgpu_test=kmod-bench (vmm_glue/guest/init): vgpu-kmod-test --bench
#    (mailbox round trip by interrupt, SVM migration GB/s against a guest memcpy),
#    --bench-bar (BAR2 write/read GB/s through the driver's mmap, its MTRR and memory type),
#    vgpu-vf-test --kmod --bench-submit (submission through libvgpu-vf's kmod transport);
#    then, the driver unloaded, --bench-poll and vgpu-vf-test --sysfs --bench-submit;
#  - pc boots with vgpu_test=kmod-bench-bar: --bench-bar only, its keys prefixed "pc_",
#    since SeaBIOS may leave BAR2 there under an uncached MTRR.
# The last keys compare BAR2 with guest memory in each guest, and the two guests so. Exit 1, saying why, if a guest
# printed no figures.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../bench/bench_cpu.sh"

vm_init kmod-bench
# vm_require_qemu would print TAP and exit 0: say why there are no figures instead.
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -f "$VGPU_GUEST/vmlinux" ]; then
	echo "kmod-bench: needs qemu-system-x86_64 and the guest image (make guest-image)" >&2
	exit 1
fi
if [ -f "$VGPU_GUEST/kmod-unavailable" ]; then
	echo "kmod-bench: no vgpu_vf.ko: $(cat "$VGPU_GUEST/kmod-unavailable")" >&2
	exit 1
fi

# The JSON lines a guest printed, as one comma-separated list of members, each key
# prefixed with $2; empty (and its console's tail on stderr) if it did not pass.
figures() {
	local name=$1 prefix=$2 json

	json=$(tr -d '\r' <"${VM_CONSOLE[$name]}" | grep -a '^{' | sed 's/^{//; s/}$//' |
	       sed "s/\"\([a-z0-9_]*\)\":/\"$prefix\1\":/g" | paste -sd, -)
	if ! grep -aq 'VGPU-VM-RESULT: 1 passed' "${VM_CONSOLE[$name]}" || [ -z "$json" ]; then
		echo "kmod-bench: the $name guest printed no figures; its console:" >&2
		tr -d '\r' <"${VM_CONSOLE[$name]}" | tail -15 >&2
		return 1
	fi
	echo "$json"
}

# The number under key $2 in members $1.
num() {
	echo "$1" | grep -o "\"$2\": *[0-9.]*" | grep -o '[0-9.]*$'
}

vm_vgpud_start >/dev/null
if ! vm_slice a vgpu-512M || ! vm_slice b vgpu-512M; then
	echo "kmod-bench: no slice" >&2
	exit 1
fi
# One at a time: the figures are the emulator's, and two guests would share its CPU time.
vm_qemu q35 q35 "${VM_SOCK[a]}" kmod-bench
vm_wait q35
vm_qemu pc pc "${VM_SOCK[b]}" kmod-bench-bar
vm_wait pc
q35=$(figures q35 "") || exit 1
pc=$(figures pc pc_) || exit 1
# Two boots on a shared host can run at different speeds: the comparison that holds is of
# each guest's BAR2 against its own memory, measured in turns in the same run.
ratios=
for k in write read; do
	ratios+=$(awk -v k="$k" -v qb="$(num "$q35" "bar2_${k}_gbps")" \
		-v qr="$(num "$q35" "ram_${k}_gbps")" -v pb="$(num "$pc" "pc_bar2_${k}_gbps")" \
		-v pr="$(num "$pc" "pc_ram_${k}_gbps")" 'BEGIN {
			q = qr > 0 ? qb / qr : 0; p = pr > 0 ? pb / pr : 0
			printf ", \"bar2_over_ram_%s\": %.2f, \"pc_bar2_over_ram_%s\": %.2f", k, q, k, p
			printf ", \"pc_over_q35_bar2_%s\": %.2f", k, (q > 0 ? p / q : 0) }')
done
# What the guests said of BAR2's cache attributes (MTRRs, the PAT), for the reader.
for name in q35 pc; do
	tr -d '\r' <"${VM_CONSOLE[$name]}" | grep -a '^# \(mtrr\|.*PAT\|.*MTRR\)' |
		sed "s/^# /kmod-bench: $name: /" >&2
done
echo "{$(bench_cpu_json), $q35, $pc$ratios}"
