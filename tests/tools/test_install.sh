#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# TAP test of `make install` / `make uninstall` (PREFIX /usr/local, into a DESTDIR) and of
# the installed programs where the install put them: in a private mount namespace the
# DESTDIR's usr/local is bound over /usr/local and a group vgpu is added to a private
# /etc/group, so nothing of the machine changes. Checks: the file list; the units name
# installed paths; the vgpud.service ExecStart line starts vgpud with the shipped
# configuration and vgpud finds vgpu-gsp in libexec (nothing beside it); the installed
# vgpuctl defines and starts a slice; the configuration example in doc/vgpud.8 is accepted
# as written; a bad value exits 2 naming its line; a state file of a newer vgpud exits 3
# naming it; the units allow the socket families live migration uses and do not restart
# exit 2 or 3; vgpuctl --version is the package's; uninstall removes every file.
# Binaries: $VGPU_BIN (make check sets it), else build/rel/bin.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${VGPU_BIN:-$here/build/rel/bin}
build=$(dirname "$(dirname "$bin")")

if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
	echo "1..1"
	echo "ok 1 - install test # SKIP needs root and unshare (private mounts)"
	exit 0
fi
if [ -z "${VGPU_INSTALL_NS-}" ]; then
	exec unshare --mount --propagation private env VGPU_INSTALL_NS=1 "$0" "$@"
fi

tmp=$(mktemp -d /tmp/vgpu-install-XXXXXX)
dest=$tmp/dest
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"; wait "$pid" 2>/dev/null
	fi
	for f in /dev/shm/vgpud-*; do	# the VRAM objects of this test's instances only
		[ -e "$f" ] || continue
		grep -qs "\"instance\":\"$(basename "${f%-vf*}")\"" "$tmp"/state*/journal.json &&
			rm -f "$f"
	done
	umount /usr/local /etc/group 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
n=0 bad=0
echo "1..12"

check() {	# check DESCRIPTION COMMAND...: one TAP line, the output as comments on failure
	local out
	n=$((n + 1))
	if out=$("${@:2}" 2>&1); then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		printf '%s\n' "$out" | tail -n 30 | sed 's/^/# /'
		bad=1
	fi
}

do_install() {
	make -C "$here" --no-print-directory BUILD="$build" DESTDIR="$dest" install
}

installed_files() {
	local want="usr/local/sbin/vgpud usr/local/sbin/vgpuctl usr/local/bin/vgpu-vm
		usr/local/libexec/vgpu/vgpu-gsp usr/local/share/man/man8/vgpud.8
		usr/local/share/man/man8/vgpuctl.8 usr/local/share/man/man1/vgpu-vm.1
		usr/local/share/bash-completion/completions/vgpuctl
		usr/local/share/bash-completion/completions/vgpu-vm
		usr/local/lib/systemd/system/vgpud.service
		usr/local/lib/systemd/system/vgpud@.service usr/local/lib/sysusers.d/vgpu.conf
		usr/local/lib/tmpfiles.d/vgpu.conf usr/local/etc/vgpud/vgpud.conf
		etc/libvirt/hooks/qemu.d/vgpu" f
	for f in $want; do
		[ -f "$dest/$f" ] || { echo "missing $f"; return 1; }
	done
	[ -x "$dest/usr/local/sbin/vgpud" ] && [ -x "$dest/etc/libvirt/hooks/qemu.d/vgpu" ] &&
	[ ! -e "$dest/usr/local/sbin/vgpu-gsp" ] &&
	bash -n "$dest/usr/local/share/bash-completion/completions/vgpuctl" &&
	bash -n "$dest/usr/local/share/bash-completion/completions/vgpu-vm"
}

units_name_installed_paths() {
	local u exe
	for u in "$dest"/usr/local/lib/systemd/system/*.service; do
		! grep -n '@[A-Z_]*@' "$u" || return 1
		exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$u")
		[ "$exe" = /usr/local/sbin/vgpud ] || { echo "$u: ExecStart $exe"; return 1; }
	done
	grep -q "^VGPU_VM='/usr/local/bin/vgpu-vm'" "$dest/etc/libvirt/hooks/qemu.d/vgpu"
}

# From here the installed tree is /usr/local, and a group vgpu exists.
enter_installed() {
	cp /etc/group "$tmp/group"
	getent group vgpu >/dev/null || echo "vgpu:x:64999:" >>"$tmp/group"
	mount --bind "$tmp/group" /etc/group &&
	mount --bind "$dest/usr/local" /usr/local
}

# start_vgpud NAME ARGS...: run vgpud with ARGS and private dirs, wait for its socket.
start_vgpud() {
	local name=$1
	shift
	export VGPUD_SOCKET=$tmp/run-$name/control.sock
	"$@" --runtime-dir "$tmp/run-$name" --state-dir "$tmp/state-$name" \
		--log-level warn 2>"$tmp/$name.err" &
	pid=$!
	for _ in $(seq 200); do
		[ -S "$VGPUD_SOCKET" ] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	wait "$pid"
	echo "vgpud exited $?:"
	cat "$tmp/$name.err"
	return 1
}

stop_vgpud() {
	local p=$pid
	pid=
	kill -TERM "$p" && wait "$p"
}

unit_execstart_serves_slices() {
	local cmd uuid=00000000-0000-4000-8000-0000000000a1
	cmd=$(sed -n 's/^ExecStart=//p' /usr/local/lib/systemd/system/vgpud.service)
	# shellcheck disable=SC2086 # the unit's command line, split as systemd does
	start_vgpud unit $cmd || return 1
	/usr/local/sbin/vgpuctl set-vfs 2 &&
	/usr/local/sbin/vgpuctl define -u $uuid -t vgpu-1G &&
	/usr/local/sbin/vgpuctl start -u $uuid &&
	/usr/local/sbin/vgpuctl list | grep -q "$uuid" &&
	[ -S "$tmp/run-unit/vf1.sock" ] &&
	completes_uuid $uuid &&
	stop_vgpud
}

# The installed bash completion offers the running vgpud's slices after vgpuctl -u.
completes_uuid() {
	PATH=/usr/local/sbin:$PATH bash -c '
		source /usr/local/share/bash-completion/completions/vgpuctl
		COMP_WORDS=(vgpuctl start -u ""); COMP_CWORD=3; _vgpuctl
		echo "completions: ${COMPREPLY[*]}"
		[ "${COMPREPLY[*]}" = "$1" ]' sh "$1"
}

manpage_example_accepted() {
	sed -n '/^\.SH CONFIGURATION/,/^\.fi/p' "$here/doc/vgpud.8" | sed -e '1,/^\.nf/d' \
		-e '/^\.fi/d' -e 's/\\-/-/g' >"$tmp/example.conf"
	grep -q '^admin_group = vgpu' "$tmp/example.conf" &&
	# the page shows the shipped file (less its leading comments)
	grep -v '^;' "$here/dist/vgpud.conf" | diff - "$tmp/example.conf" &&
	start_vgpud example /usr/local/sbin/vgpud --config "$tmp/example.conf" &&
	/usr/local/sbin/vgpuctl status >/dev/null &&
	stop_vgpud
}

bad_value_names_line() {
	local rc
	printf '[gpu]\nmodel = vgpu\nvram = lots\n' >"$tmp/bad.conf"
	/usr/local/sbin/vgpud --config "$tmp/bad.conf" --runtime-dir "$tmp/run-bad" \
		--state-dir "$tmp/state-bad" 2>"$tmp/bad.err"
	rc=$?
	cat "$tmp/bad.err"
	[ $rc -eq 2 ] && grep -q "bad.conf: line 3: \[gpu\] vram = lots: bad value" "$tmp/bad.err"
}

missing_config_is_2() {
	/usr/local/sbin/vgpud --config "$tmp/none.conf" --runtime-dir "$tmp/run-none" \
		--state-dir "$tmp/state-none"
	[ $? -eq 2 ]
}

# The units' list of a key (KEY=A B C), with a space either side.
unit_list() {
	echo " $(sed -n "s/^$2=//p" "$1" | tr '\n' ' ') "
}

# Every installed unit's setting KEY lists each of VALUES.
units_have() {	# units_have KEY VALUES...
	local key=$1 u v have
	shift
	for u in /usr/local/lib/systemd/system/*.service; do
		have=$(unit_list "$u" "$key")
		for v in "$@"; do
			[[ $have == *" $v "* ]] && continue
			echo "$u: $key=$have lacks $v"
			return 1
		done
	done
}

# vgpud opens live migration's sockets itself: tcp:HOST:PORT is AF_INET or AF_INET6.
units_allow_migration_families() {
	units_have RestrictAddressFamilies AF_UNIX AF_INET AF_INET6
}

# A journal of a newer schema is refused by name with an exit status that, as a
# configuration error's, the units do not restart (a restart would refuse it again).
refused_state_not_restarted() {
	local rc
	mkdir -p "$tmp/state-newer"
	echo '{"kind":"vgpud-journal","schema":2,"slices":[]}' >"$tmp/state-newer/journal.json"
	/usr/local/sbin/vgpud --runtime-dir "$tmp/run-newer" --state-dir "$tmp/state-newer" \
		2>"$tmp/newer.err"
	rc=$?
	cat "$tmp/newer.err"
	[ "$rc" -eq 3 ] || { echo "exit $rc, not 3"; return 1; }
	grep -q "journal.json: journal schema 2, written by a newer vgpud" "$tmp/newer.err" ||
		return 1
	units_have RestartPreventExitStatus 2 "$rc"
}

version_is_the_package() {
	local want
	want=$(sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' "$here/debian/changelog")
	[ "$(/usr/local/sbin/vgpuctl --version)" = "vgpuctl $want" ] &&
	[ "$(/usr/local/sbin/vgpud --version)" = "vgpud $want" ]
}

uninstall_removes_all() {
	umount /usr/local &&
	make -C "$here" --no-print-directory BUILD="$build" DESTDIR="$dest" uninstall &&
	[ -z "$(find "$dest" -type f)" ] || { find "$dest" -type f; return 1; }
}

check "make install into DESTDIR (PREFIX /usr/local)" do_install
check "every file is installed; vgpu-gsp only in libexec" installed_files
check "units and hook name the installed paths" units_name_installed_paths
check "the installed tree is mounted on /usr/local" enter_installed
check "vgpud.service's ExecStart serves slices with the shipped config; completion" \
	unit_execstart_serves_slices
check "vgpud(8)'s example is the shipped file and is accepted as written" manpage_example_accepted
check "a bad config value exits 2 naming file, line and key" bad_value_names_line
check "a missing config file exits 2" missing_config_is_2
check "the units allow AF_INET and AF_INET6 (live migration over TCP)" \
	units_allow_migration_families
check "a journal of a newer schema exits 3, which the units do not restart" \
	refused_state_not_restarted
check "vgpud and vgpuctl --version are debian/changelog's version" version_is_the_package
check "make uninstall removes every installed file" uninstall_removes_all
exit $bad
