#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TAP self-test of tests/run-suites: a suite that prints no plan, more results than its plan,
# fewer results than its plan or exits non-zero after "ok" lines must fail; several cmocka
# groups in one program sum their plans; a SKIP is never a pass, in either form (cmocka 1.1
# prints "not ok N # SKIP name") nor a failure; a program killed by a signal, or by the
# runner's timeout (VGPU_TEST_TIMEOUT) after reporting all its tests, fails; --env reaches the
# programs after it until the next --label, and a malformed one is refused; each program's
# line says how long it ran.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 bad=0

fake() {	# fake NAME BODY: a program that prints BODY's lines
	printf '#!/bin/sh\n%s\n' "$2" >"$tmp/$1"
	chmod +x "$tmp/$1"
}

expect() {	# expect DESCRIPTION PROGRAM SUMMARY-LINE EXIT
	local out rc
	out=$(VGPU_TEST_LOGS="$tmp/logs" "$here/tests/run-suites" "$tmp/$2" 2>&1)
	rc=$?
	n=$((n + 1))
	if [ "$(printf '%s\n' "$out" | tail -n 1)" = "$3" ] && [ $rc -eq "$4" ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		printf '%s\n' "$out" | sed 's/^/# /'
		bad=1
	fi
}

expect_args() {	# expect_args DESCRIPTION SUMMARY-LINE EXIT ARGS...: run-suites ARGS
	local desc=$1 want=$2 code=$3 out rc
	shift 3
	out=$(cd "$tmp" && VGPU_TEST_LOGS="$tmp/logs" "$here/tests/run-suites" "$@" 2>&1)
	rc=$?
	n=$((n + 1))
	if [ "$(printf '%s\n' "$out" | tail -n 1)" = "$want" ] && [ $rc -eq "$code" ]; then
		echo "ok $n - $desc"
	else
		echo "not ok $n - $desc"
		printf '%s\n' "$out" | sed 's/^/# /'
		bad=1
	fi
}

fake good 'echo 1..2; echo ok 1; echo ok 2'
fake envcheck 'echo 1..1; if [ "${RS_FOO-}" = "a b" ]; then echo ok 1; else echo "not ok 1"; fi'
fake groups 'echo 1..1; echo ok 1; echo 1..2; echo ok 1; echo ok 2'
fake noplan 'echo ok 1'
fake silent 'exit 0'
fake extra 'echo 1..1; echo ok 1; echo ok 2'
fake short 'echo 1..3; echo ok 1'
fake died 'echo 1..1; echo ok 1; exit 3'
fake skip 'echo 1..2; echo ok 1; echo "ok 2 # SKIP no device"'
fake cmskip 'echo 1..2; echo ok 1 - a; echo "not ok 2 # SKIP x"'
fake segv 'ulimit -c 0; echo 1..1; echo ok 1; kill -SEGV $$'
fake hang 'echo 1..1; echo ok 1; exec sleep 3600'
fake slow 'echo 1..1; sleep 0.3; echo ok 1'

echo 1..16
expect "a clean suite passes" good "2 passed, 0 failed" 0
expect "several groups sum their plans" groups "3 passed, 0 failed" 0
expect "no plan fails" noplan "1 passed, 1 failed" 1
expect "a silent exit 0 fails" silent "0 passed, 1 failed" 1
expect "results beyond the plan fail" extra "2 passed, 1 failed" 1
expect "planned tests never reported fail" short "1 passed, 2 failed" 1
expect "a non-zero exit fails" died "1 passed, 1 failed" 1
expect "a skip is counted as skipped" skip "1 passed, 0 failed, 1 skipped" 0
expect "cmocka's skip line (not ok, then the SKIP directive) is a skip" cmskip "1 passed, 0 failed, 1 skipped" 0
expect "a program killed by a signal fails" segv "1 passed, 1 failed" 1
# Only the runner's timeout ends this program: its kill is a failure.
VGPU_TEST_TIMEOUT=1 expect "a hang killed by the runner's timeout fails" hang "1 passed, 1 failed" 1
expect_args "--env reaches the programs after it" "2 passed, 0 failed" 0 \
	--label e --env "RS_FOO=a b" ./envcheck ./envcheck
expect_args "--label starts without the earlier --env" "1 passed, 1 failed" 1 \
	--label e --env "RS_FOO=a b" ./envcheck --label f ./envcheck
expect_args "programs before --env run without it" "1 passed, 1 failed" 1 \
	--label e ./envcheck --env "RS_FOO=a b" ./envcheck
expect_args "a malformed --env is refused" \
	"run-suites: --env wants VAR=VALUE, got 'RS_FOO'" 2 --env RS_FOO ./good

# The elapsed time is at least the program's own 0.3 s and printed as seconds with one decimal.
n=$((n + 1))
line=$(VGPU_TEST_LOGS="$tmp/logs" "$here/tests/run-suites" "$tmp/slow" 2>&1 | head -n 1)
if [[ $line =~ ^ok\ +.*/slow:\ 1\ passed\ \(([0-9]+)\.([0-9])\ s\)$ ]] &&
   [ $((BASH_REMATCH[1] * 10 + BASH_REMATCH[2])) -ge 3 ]; then
	echo "ok $n - a program's line gives its elapsed time"
else
	echo "not ok $n - a program's line gives its elapsed time"
	echo "# $line"
	bad=1
fi
exit $bad
