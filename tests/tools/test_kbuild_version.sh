#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TAP test of vmm_glue/guest/kbuild-version.sh: which linux-kbuild the guest driver is built
# with, for the archive listings (`apt-cache madison` lines) a kernel version may meet.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
pick=$here/vmm_glue/guest/kbuild-version.sh
echo "1..5"

n=0
check() {	# check NAME WANT-VERSION EXPECTED [madison line ...]
	local name=$1 want=$2 expect=$3 got
	shift 3
	n=$((n + 1))
	got=$(printf '%s\n' "$@" | "$pick" "$want")
	if [ "$got" = "$expect" ]; then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name: got '$got', want '$expect'"
	fi
}

sec='http://deb.debian.org/debian-security bookworm-security/main amd64 Packages'
main='http://deb.debian.org/debian bookworm/main amd64 Packages'
check "the kernel's own version when the archive has it" 6.1.192-2 6.1.192-2 \
	"linux-kbuild-6.1 |  6.1.192-3 | $sec" "linux-kbuild-6.1 |  6.1.192-2 | $sec"
check "another Debian revision of the same upstream version" 6.1.192-2 6.1.192-3 \
	"linux-kbuild-6.1 |  6.1.192-3 | $sec" "linux-kbuild-6.1 |  6.1.176-1 | $main"
check "never another upstream version" 6.1.192-2 6.1.192-2 \
	"linux-kbuild-6.1 |  6.1.193-1 | $sec" "linux-kbuild-6.1 |  6.1.176-1 | $main"
check "an upstream version is not a prefix of a longer one" 6.1.19-2 6.1.19-2 \
	"linux-kbuild-6.1 |  6.1.192-3 | $sec"
check "nothing listed" 6.1.192-2 6.1.192-2 ""
