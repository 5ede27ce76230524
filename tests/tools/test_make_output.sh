#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TAP test of the build's output: without V one line per target ("  CC      rel/<source>",
# "  AR ...", "  LD ..."), with V=1 the commands themselves. Builds common's objects and
# library into a private BUILD directory.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 bad=0
echo "1..3"

result() {	# result DESCRIPTION OUTPUT STATUS
	n=$((n + 1))
	if [ "$3" -eq 0 ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		printf '%s\n' "$2" | head -n 20 | sed 's/^/# /'
		bad=1
	fi
}

mk() {
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$here" --no-print-directory -j1 --output-sync=none BUILD="$tmp/$1" "${@:2}" 2>&1
}

out=$(mk q "$tmp/q/rel/obj/common/bitops.o")
[ "$out" = "  CC      rel/common/bitops.c" ]
result "quiet: one CC line naming the source" "$out" $?

srcs=$(cd "$here" && ls common/*.c | wc -l)
out=$(mk q "$tmp/q/rel/lib/libcommon.a")
[ "$(printf '%s\n' "$out" | grep -c '^  CC      rel/common/')" -eq $((srcs - 1)) ] &&
	[ "$(printf '%s\n' "$out" | tail -n 1)" = "  AR      rel/lib/libcommon.a" ] &&
	! printf '%s\n' "$out" | grep -q -- '-Werror'
result "quiet: a CC line per object, then one AR line, no commands" "$out" $?

out=$(mk v V=1 "$tmp/v/rel/obj/common/bitops.o")
printf '%s\n' "$out" | grep -q -- "-c common/bitops.c -o $tmp/v/rel/obj/common/bitops.o" &&
	! printf '%s\n' "$out" | grep -q '^  CC '
result "V=1: the compiler command instead" "$out" $?
exit $bad
