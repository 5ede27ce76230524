#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TAP test of the licence tags: every source file the repository tracks (C, headers, make
# files, scripts, units, man pages, the shipped config) carries an SPDX identifier in its
# first two lines, MIT everywhere except a guest kernel module's folder (GPL-2.0 OR MIT),
# and debian/copyright's licence is LICENSE's.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here" || exit 1
echo "1..2"

sources() {
	if [ -d .git ]; then
		git ls-files
	else
		find . -path ./build -prune -o -type f -print | sed 's|^\./||'
	fi | grep -E '\.(c|h|mk|sh|1|8|in)$|(^|/)Makefile$|^tests/(run-suites|fuzz/run-fuzz)$|^\.ci/run$|^debian/(rules|vgpu\.postinst)$|^dist/(vgpud|sysusers|tmpfiles)\.conf$|^dist/bash-completion/|^vmm_glue/guest/init$' |
		grep -v '^build'
}

want() {	# the identifier a file must carry
	case "$1" in
	guest-kmod/*) echo 'GPL-2.0 OR MIT' ;;
	*) echo 'MIT' ;;
	esac
}

missing=""
count=0
while IFS= read -r f; do
	[ -f "$f" ] || continue
	count=$((count + 1))
	head -n 2 "$f" | grep -q "SPDX-License-Identifier: $(want "$f")\( \*/\)\?\$" ||
		missing="$missing $f"
done < <(sources)
if [ "$count" -gt 300 ] && [ -z "$missing" ]; then
	echo "ok 1 - $count source files carry their SPDX identifier"
else
	echo "not ok 1 - SPDX identifier missing or wrong ($count files looked at)"
	printf '# %s\n' $missing | head -n 20
fi

if grep -q '^Permission is hereby granted' LICENSE && grep -q '^License: Expat' debian/copyright &&
	grep -q '^ Permission is hereby granted' debian/copyright; then
	echo "ok 2 - debian/copyright's licence is LICENSE's (MIT, Expat in Debian's terms)"
else
	echo "not ok 2 - debian/copyright does not carry LICENSE's MIT text"
fi

