#!/bin/bash
# SPDX-License-Identifier: MIT
# Copy the benchmarks, the daemons they start and every shared library they need beyond
# glibc into one folder, so `make bench`'s figures can be taken on a machine that has none
# of the build's Debian packages (another CPU, more cores).
#   tests/tools/bench-bundle.sh BUILD_DIR OUT_DIR
# then, on that machine: LD_LIBRARY_PATH=OUT_DIR/lib OUT_DIR/bin/pma_bench --json
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; }
src=$1/rel/bin
out=$2
[ -x "$src/vgpud" ] || { echo "$0: $src/vgpud not built (make BUILD=$1 rel)" >&2; exit 1; }
mkdir -p "$out/bin" "$out/lib"
bins=$(ls "$src"/*_bench "$src/vgpud" "$src/vgpu-gsp" "$src/vgpu-gsp-test" "$src/vgpuctl")
cp -f $bins "$out/bin/"
# glibc's own libraries stay the target's: its loader must match them.
for b in $bins; do
	ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
	while read -r lib; do cp -fL "$lib" "$out/lib/"; done
echo "$out: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries"
