#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Clean-machine check: does a fresh minimal Debian 12 build, run and package this tree from
# the README alone, and does the package work where nothing else was ever built?
#
#   tests/tools/clean-machine.sh          (as root; .ci/run calls it after make check)
#
# 1. A minimal bookworm root (mmdebstrap --variant=minbase, from the Debian archive) is
#    cached in $VGPU_CI_CACHE (default /var/cache/vgpu-ci/bookworm-minbase) and rebuilt
#    when missing; downloaded .debs are kept in $VGPU_CI_CACHE/apt-archives.
# 2. In a copy of it, from `git archive HEAD`: the README's steps (apt-get install make,
#    make deps, make demo), then apt-get build-dep and make deb; lintian (on this machine)
#    must report no errors.
# 3. In a second fresh copy: apt-get installs the .deb (the group vgpu must exist without
#    systemd), then systemd and man-db; the ExecStart lines of vgpud.service and of
#    vgpud@gpu1.service run vgpud from the installed paths (systemd is not PID 1 here),
#    the installed vgpuctl defines and starts a slice, systemd-analyze verify accepts the
#    units, man -w vgpuctl resolves, vgpuctl --version is the package's version. With
#    systemd taken as running (/run/systemd/system and a systemctl that logs), a reinstall
#    (an upgrade) try-restarts the vgpud@ instances and a remove stops them; the remove
#    keeps the state, the slice's VRAM object and the configuration; a purge removes the
#    programs, the state, the runtime directories, the VRAM objects and the instances'
#    enablement links, and keeps the group vgpu.
# Everything runs in a private mount namespace; the roots are under /var/tmp and removed at
# the end (kept with their logs if a step fails: the path is printed). Prints one TAP line
# per step with its time; any failure prints the log's tail and exits 1.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${VGPU_CI_CACHE:-/var/cache/vgpu-ci}
mirror=${VGPU_CI_MIRROR:-http://deb.debian.org/debian}
security=${VGPU_CI_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
base=$cache/bookworm-minbase
archives=$cache/apt-archives

if [ "$(id -u)" != 0 ]; then
	echo "clean-machine: needs root (chroot, mounts)" >&2
	exit 2
fi
if [ -z "${VGPU_CLEAN_NS-}" ]; then
	exec unshare --mount --propagation private env VGPU_CLEAN_NS=1 "$0" "$@"
fi

work=$(mktemp -d /var/tmp/vgpu-clean-XXXXXX)
logs=$work/logs
mkdir -p "$logs" "$archives"
n=0 step_start=$SECONDS ok=0 pids=()
echo "# clean-machine: work dir $work, cache $cache"

# ---- mounts: a root gets /proc, /sys, /dev (its own /dev/shm), /run and the apt cache ----
mount_root() {
	local r=$1
	mount -t proc proc "$r/proc"
	mount --rbind /sys "$r/sys" && mount --make-rslave "$r/sys"
	mount --rbind /dev "$r/dev" && mount --make-rslave "$r/dev"
	mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
	mount -t tmpfs -o mode=0755 tmpfs "$r/run"
	mkdir -p "$r/var/cache/apt/archives"
	mount --bind "$archives" "$r/var/cache/apt/archives"
	cp /etc/resolv.conf "$r/etc/resolv.conf"
	# No daemon of an installed package starts in the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
	chmod 0755 "$r/usr/sbin/policy-rc.d"
}

umount_root() {
	local r=$1 m
	# deepest first; -l for what a lingering process may hold
	for m in $(awk -v r="$r/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
}

# Never delete a root while anything is mounted in it (its /dev is the machine's).
remove_root() {
	local r=$1
	umount_root "$r"
	if awk -v r="$r/" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts
	then
		echo "# clean-machine: $r still has mounts; not removed" >&2
		return 1
	fi
	rm -rf --one-file-system "$r"
}

cleanup() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "$work"/root*; do [ -d "$p" ] && umount_root "$p"; done
	if [ "$ok" = 1 ]; then
		for p in "$work"/root*; do [ -d "$p" ] && remove_root "$p"; done
		rm -rf --one-file-system "$work"
	else
		echo "# clean-machine: FAILED; roots and logs kept in $work" >&2
	fi
}
trap cleanup EXIT

# step DESCRIPTION LOGNAME COMMAND...: run it, one TAP line with the time, or fail loudly.
step() {
	local desc=$1 log=$logs/$2.log t0=$SECONDS rc=0
	shift 2
	n=$((n + 1))
	# a subshell outside any || list, so that set -e stops the step at its first failure
	set +e
	(set -e; "$@") >"$log" 2>&1
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		echo "ok $n - $desc ($((SECONDS - t0)) s)"
	else
		echo "not ok $n - $desc ($((SECONDS - t0)) s, exit $rc)"
		tail -n 40 "$log" | sed 's/^/#   /'
		echo "# full log: $log"
		exit 1
	fi
}

in_root() {	# in_root ROOT COMMAND: a login-like shell in the chroot
	local r=$1
	shift
	chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive TERM=dumb /bin/bash -euo pipefail -c "$*"
}

# ---- 1. the cached base -----------------------------------------------------------------
host_tools() {
	local missing=""
	command -v mmdebstrap >/dev/null || missing+=" mmdebstrap"
	command -v lintian >/dev/null || missing+=" lintian"
	command -v git >/dev/null || missing+=" git"
	if [ -n "$missing" ]; then
		apt-get update && apt-get install -y --no-install-recommends $missing
	fi
}

build_base() {
	if [ -f "$base/.complete" ]; then
		echo "cached: $base"
		return 0
	fi
	rm -rf --one-file-system "$base.tmp"
	mmdebstrap --variant=minbase --mode=root --components=main bookworm "$base.tmp" \
		"deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
		"deb $security bookworm-security main"
	touch "$base.tmp/.complete"
	rm -rf --one-file-system "$base"
	mv "$base.tmp" "$base"
}

new_root() {	# new_root NAME: a fresh copy of the base, mounted
	cp -a "$base" "$work/$1"
	mount_root "$work/$1"
}

# ---- 2. build, demo and package from the README ------------------------------------------
r1=$work/root1
r2=$work/root2

copy_tree() {
	mkdir -p "$r1/src"
	git -C "$here" archive --format=tar HEAD | tar -x -C "$r1/src"
}

readme_setup() {
	# the steps of README.md's "Set up" section, nothing else
	in_root "$r1" 'apt-get update && apt-get install -y --no-install-recommends make'
	in_root "$r1" 'cd /src && make deps'
}

readme_demo() {
	in_root "$r1" 'cd /src && make demo'
}

make_deb() {
	in_root "$r1" 'cd /src && apt-get build-dep -y --no-install-recommends ./ && make deb'
	deb=$(ls "$r1"/src/build/deb/vgpu_*_amd64.deb)
	cp "$deb" "$work/"
}

run_lintian() {
	lintian --fail-on error --info "$work"/vgpu_*_amd64.deb
}

# ---- 3. the package in a fresh root ------------------------------------------------------
install_deb() {
	cp "$work"/vgpu_*_amd64.deb "$r2/tmp/"
	in_root "$r2" 'apt-get update &&
		apt-get install -y --no-install-recommends /tmp/vgpu_*_amd64.deb &&
		getent group vgpu && ! command -v systemd-sysusers'
	in_root "$r2" 'apt-get install -y --no-install-recommends systemd man-db'
}

# run_unit UNIT INSTANCE: the unit's ExecStart line (%i = INSTANCE) in the background;
# waits for the control socket named by the unit's RuntimeDirectory.
run_unit() {
	local unit=/lib/systemd/system/$1 inst=$2 cmd rundir
	cmd=$(sed -n 's/^ExecStart=//p' "$r2$unit" | sed "s/%i/$inst/g")
	rundir=/run/$(sed -n 's/^RuntimeDirectory=//p' "$r2$unit" | sed "s/%i/$inst/g")
	echo "ExecStart: $cmd"
	# exec all the way down: the background job's pid is vgpud's
	(exec chroot "$r2" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh -c \
		"mkdir -p $rundir && exec $cmd" >"$logs/vgpud-$1.log" 2>&1) &
	pids+=($!)
	for _ in $(seq 200); do
		[ -S "$r2$rundir/control.sock" ] && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || break
		sleep 0.05
	done
	cat "$logs/vgpud-$1.log"
	return 1
}

stop_units() {
	local p rc=0
	for p in "${pids[@]}"; do
		kill -TERM "$p" && wait "$p" || rc=1
	done
	pids=()
	return $rc
}

installed_vgpud_serves() {
	local u=00000000-0000-4000-8000-0000000000c1
	trap 'for p in "${pids[@]}"; do kill -TERM "$p"; done' EXIT
	run_unit vgpud.service ""
	in_root "$r2" "vgpuctl set-vfs 2 && vgpuctl define -u $u -t vgpu-1G &&
		vgpuctl start -u $u && vgpuctl list && test -S /run/vgpud/vf1.sock &&
		vgpuctl status"
	# a second device through the template, configured from a copy of the default
	in_root "$r2" "sed 's/^id = .*/id = 0000:00:01.0/' /etc/vgpud/vgpud.conf \
		>/etc/vgpud/gpu1.conf"
	run_unit vgpud@.service gpu1
	in_root "$r2" "vgpuctl --socket /run/vgpud-gpu1/control.sock -p 0000:00:01.0 status"
	stop_units
}

units_verify() {
	# the template is verified as instance "i"; --man checks Documentation= resolves
	in_root "$r2" 'systemd-analyze verify --man=yes /lib/systemd/system/vgpud.service \
		/lib/systemd/system/vgpud@.service'
}

man_and_version() {
	in_root "$r2" 'man -w vgpuctl && man -w vgpud && man -w vgpu-vm &&
		v=$(dpkg-query -W -f="\${Version}" vgpu) && echo "package $v" &&
		vgpuctl --version && test "$(vgpuctl --version)" = "vgpuctl $v" &&
		test "$(vgpud --version)" = "vgpud $v" &&
		test -x /usr/libexec/vgpu/vgpu-gsp && test ! -e /usr/sbin/vgpu-gsp'
}

# What the served slice left: the state of both units, the slice's VRAM object (a clean
# stop keeps it), the runtime directories. The purge must remove each of these.
left_behind() {
	in_root "$r2" 'test -f /var/lib/vgpud/journal.json && test -d /var/lib/vgpud-gpu1 &&
		test -d /run/vgpud && test -d /run/vgpud-gpu1 && ls -l /dev/shm/vgpud-*-vf1'
}

# systemctl as a running systemd would be asked, logged to /tmp/systemctl.log: two loaded
# vgpud@ instances (one failed: its line starts with a bullet). It goes in /usr/sbin, ahead
# of the real one in apt's PATH for dpkg (DPkg::Path). The policy-rc.d that keeps daemons
# from starting in the chroot would stop deb-systemd-invoke before systemctl.
fake_systemd() {
	mkdir -p "$r2/run/systemd/system"
	mv "$r2/usr/sbin/policy-rc.d" "$r2/usr/sbin/policy-rc.d.off"
	cat >"$r2/usr/sbin/systemctl" <<-'EOF'
	#!/bin/sh
	echo "$*" >>/tmp/systemctl.log
	case "$*" in
	*list-units*)
		echo 'vgpud@gpu1.service loaded active running vGPU PF manager daemon'
		printf '\342\227\217 vgpud@gpu2.service loaded failed failed vGPU PF manager\n' ;;
	esac
	EOF
	chmod 0755 "$r2/usr/sbin/systemctl"
}

unfake_systemd() {
	rm -f "$r2/usr/sbin/systemctl"
	rmdir "$r2/run/systemd/system"
	mv "$r2/usr/sbin/policy-rc.d.off" "$r2/usr/sbin/policy-rc.d"
}

upgrade_and_remove() {
	left_behind
	# an instance enabled as an administrator does (in a chroot systemctl edits links only)
	in_root "$r2" 'systemctl enable vgpud@gpu1.service &&
		test -L /etc/systemd/system/multi-user.target.wants/vgpud@gpu1.service'
	fake_systemd
	in_root "$r2" 'apt-get install -y --reinstall /tmp/vgpu_*_amd64.deb &&
		cat /tmp/systemctl.log &&
		grep -qx "try-restart vgpud@gpu1.service vgpud@gpu2.service" /tmp/systemctl.log &&
		! grep -q "^stop vgpud@" /tmp/systemctl.log && rm /tmp/systemctl.log'
	in_root "$r2" 'apt-get remove -y vgpu && cat /tmp/systemctl.log &&
		grep -qx "stop vgpud@gpu1.service vgpud@gpu2.service" /tmp/systemctl.log'
	unfake_systemd
}

remove_keeps_state() {
	in_root "$r2" '! test -e /usr/sbin/vgpud && test -f /etc/vgpud/vgpud.conf &&
		test -f /var/lib/vgpud/journal.json && test -d /var/lib/vgpud-gpu1 &&
		ls -l /dev/shm/vgpud-*-vf1'
}

purge() {
	in_root "$r2" 'apt-get purge -y vgpu && ! test -e /usr/sbin/vgpud &&
		! test -e /etc/vgpud/vgpud.conf && getent group vgpu &&
		for p in /var/lib/vgpud* /run/vgpud* /dev/shm/vgpud-* \
			/etc/systemd/system/*.wants/vgpud@*; do
			if [ -e "$p" ] || [ -L "$p" ]; then echo "left: $p"; exit 1; fi
		done'
}

echo "1..16"
step "host tools (mmdebstrap, lintian, git)" host-tools host_tools
step "cached bookworm minbase root" base build_base
step "fresh root 1 from the cache" root1 new_root root1
step "git archive HEAD into root 1" tree copy_tree
step "README: apt-get install make; make deps" deps readme_setup
step "README: make demo" demo readme_demo
step "apt-get build-dep; make deb" deb make_deb
step "lintian: no errors" lintian run_lintian
step "fresh root 2 from the cache" root2 new_root root2
step "apt-get install the .deb (group vgpu without systemd), then systemd, man-db" \
	install install_deb
step "units' ExecStart run vgpud; installed vgpuctl starts a slice" serve \
	installed_vgpud_serves
step "systemd-analyze verify the units" verify units_verify
step "man -w; --version is the package's; vgpu-gsp in libexec" man man_and_version
step "systemd running: an upgrade restarts vgpud@ instances, a remove stops them" \
	remove upgrade_and_remove
step "apt-get remove keeps the state, the VRAM object and the configuration" kept \
	remove_keeps_state
step "apt-get purge removes it, its state, runtime dirs and VRAM objects" purge purge
ok=1
echo "# clean-machine: all passed in $((SECONDS - step_start)) s"
