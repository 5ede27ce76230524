#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# vgpud demo: a 16 GiB GPU, four slices created with vgpuctl, four local guests doing real
# work on them at once (vf_work: COPY, REDUCE_ADD, FILL, AXPY each round, checked against the
# CPU, one progress line per round), then list, stats and the VRAM map, and a clean stop.
# Runs in a temporary runtime/state dir; needs `make rel` first.
#   pf_manager/demo.sh [BINDIR]      (default build/rel/bin)
set -euo pipefail
bin=${1:-build/rel/bin}
dir=$(mktemp -d /tmp/vgpud-demo-XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"; wait "$pid" || true
	fi
	# the VRAM objects of this instance (named from the state dir) and the dirs
	for f in /dev/shm/vgpud-*; do
		[ -e "$f" ] || continue
		grep -qs "\"instance\":\"$(basename "${f%-vf*}")\"" "$dir/state/journal.json" && rm -f "$f"
	done
	rm -rf "$dir"
}
trap cleanup EXIT

export VGPUD_SOCKET=$dir/run/control.sock
ctl() { echo "\$ vgpuctl $*"; "$bin/vgpuctl" "$@"; }

"$bin/vgpud" --vram 16G --max-vfs 8 --model demo --runtime-dir "$dir/run" \
	--state-dir "$dir/state" --log-level warn &
pid=$!
for _ in $(seq 100); do [ -S "$VGPUD_SOCKET" ] && break; sleep 0.05; done

ctl set-vfs 4
ctl types | head -16
ctl define -u 00000000-0000-4000-8000-000000000001 -t demo-4G --auto
ctl define -u 00000000-0000-4000-8000-000000000002 -t demo-2G --auto
ctl define -u 00000000-0000-4000-8000-000000000003 -t demo-2G --exec-quantum-ms 5
ctl define -u 00000000-0000-4000-8000-000000000004 -t demo-1G --vram 1000M --channels 16
ctl start -u 00000000-0000-4000-8000-000000000003 --dry-run
for i in 1 2 3 4; do ctl start -u 00000000-0000-4000-8000-00000000000$i; done
ctl define -u 00000000-0000-4000-8000-000000000005 -t demo-8G
ctl start -u 00000000-0000-4000-8000-000000000005 || echo "(exit $?: as expected)"
echo "\$ vf_work on every slice at once (rounds of COPY, REDUCE_ADD_U32, FILL, AXPY_F32 vs the CPU)"
guests=()
for i in 1 2 3 4; do
	# bounded: a guest that stalls fails the demo instead of hanging it
	timeout 60 "$bin/vf_work" "$dir/run/vf$i.sock" --label "slice $i" --rounds 6 --mib 8 &
	guests+=($!)
done
for g in "${guests[@]}"; do wait "$g"; done	# the guests only, not vgpud; set -e: a failure ends it
ctl list -v
ctl stats
ctl reset 2
ctl vram-map --svg "${VGPU_DEMO_SVG:-${TMPDIR:-/tmp}/vgpu-vram-map.svg}"
ctl status
kill -TERM "$pid"
wait "$pid" && echo "vgpud stopped cleanly (exit 0)"
pid=
