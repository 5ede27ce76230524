#!/bin/sh
# SPDX-License-Identifier: MIT
# mkimage.sh - build the guest image of the VM tier: an uncompressed PVH kernel and a busybox
# initramfs that runs vgpu-vf-test (see README in this folder for the conventions).
#
#   vmm_glue/guest/mkimage.sh OUTDIR STATIC_VGPU_VF_TEST
#
# Produces OUTDIR/vmlinux and OUTDIR/initramfs.cpio.gz, incrementally:
#  - the guest kernel driver vgpu_vf.ko (guest-kmod/) is built against the headers of the
#    image's kernel, fetched once at its exact version (see build_kmod below);
#  - the Debian kernel package is resolved from linux-image-amd64's dependency (never a
#    pinned ABI number) and fetched once with `apt-get download` into OUTDIR;
#  - only the kernel and the vfio modules are taken out of it (not the 391 MB tree);
#  - vmlinux is the XZ payload of vmlinuz: QEMU boots it through PVH, which saves the
#    ~2.5 s XZ decompression costs per boot under TCG.
# If the kernel cannot be had (no network, no apt), OUTDIR/unavailable holds the reason and
# the script exits 0: the VM suites then report themselves skipped with that reason.
# Every output is written to a temporary name and renamed, so concurrent builds are safe.
set -eu

out=${1:?usage: mkimage.sh OUTDIR STATIC_VGPU_VF_TEST}
bin=${2:?usage: mkimage.sh OUTDIR STATIC_VGPU_VF_TEST}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
# The modules of the vfio tiers (the type1 IOMMU backend is no symbol dependency of
# vfio-pci, so it is named); their dependencies come from modules.dep.
MODS="vfio_iommu_type1 vfio-pci"

unavailable() {
	echo "mkimage: $*" >&2
	echo "$*" >"$out/unavailable.tmp.$$" && mv -f "$out/unavailable.tmp.$$" "$out/unavailable"
	exit 0
}

# ---- the kernel package -------------------------------------------------------------------
find_deb() {
	ls -t "$out"/linux-image-[0-9]*-amd64_*.deb 2>/dev/null | head -1
}
deb=$(find_deb)
if [ -z "$deb" ]; then
	command -v apt-cache >/dev/null || unavailable "no apt-cache: cannot resolve the guest kernel"
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
	      awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	[ -n "$pkg" ] || unavailable "apt-cache knows no linux-image-amd64 dependency (run apt-get update)"
	tmp=$(mktemp -d "$out/dl.XXXXXX")
	# The kernel package is tens of MiB: say what is fetched and how far it got, every 2 s
	# (on a terminal in place, else one line each).
	size=$(apt-cache show "$pkg" 2>/dev/null | awk '/^Size:/ { print $2; exit }')
	echo "mkimage: downloading $pkg ($(( ${size:-0} >> 20 )) MiB) from the Debian archive"
	(cd "$tmp" && exec apt-get download "$pkg" >/dev/null 2>"$tmp/err") &
	dl=$!
	[ -t 1 ] && eol='\r' || eol='\n'
	while kill -0 "$dl" 2>/dev/null; do
		sleep 2
		have=$(du -sk "$tmp" 2>/dev/null | cut -f1)
		[ -n "$size" ] && [ "$size" -gt 0 ] &&
			printf "mkimage: %s: %d of %d MiB (%d%%)$eol" "$pkg" $(( ${have:-0} >> 10 )) \
				$(( size >> 20 )) $(( ${have:-0} * 1024 * 100 / size ))
	done
	[ "$eol" = '\n' ] || echo
	if ! wait "$dl"; then
		why=$(tail -1 "$tmp/err")
		rm -rf "$tmp"
		unavailable "apt-get download $pkg failed: $why"
	fi
	mv -f "$tmp"/*.deb "$out/" && rm -rf "$tmp"
	deb=$(find_deb)
fi
rm -f "$out/unavailable"

# ---- kernel and modules out of the package (only when the package is newer) ---------------
kroot=$out/kroot
if [ ! -f "$kroot/stamp" ] || [ "$deb" -nt "$kroot/stamp" ]; then
	tmp=$(mktemp -d "$out/kroot.XXXXXX")
	dpkg-deb --fsys-tarfile "$deb" |
		tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' \
		    './lib/modules/*/kernel/drivers/vfio/*' './lib/modules/*/kernel/virt/lib/*'
	# The package has no modules.dep (depmod runs at install): make one for these modules.
	v=$(ls "$tmp/lib/modules")
	/bin/busybox depmod -b "$tmp" "$v"
	basename "$deb" >"$tmp/stamp"
	# A concurrent build may have put its own copy there first: keep whichever landed.
	rm -rf "$kroot"
	mv -T "$tmp" "$kroot" 2>/dev/null || rm -rf "$tmp"
fi
vmlinuz=$(ls "$kroot"/boot/vmlinuz-* | head -1)
kver=${vmlinuz##*/vmlinuz-}

if [ ! -f "$out/vmlinux" ] || [ "$vmlinuz" -nt "$out/vmlinux" ]; then
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
	[ -n "$off" ] || { echo "mkimage: no XZ payload in $vmlinuz" >&2; exit 1; }
	# xz stops with an error at the bytes after the stream; the kernel before them is whole.
	tail -c +$((off + 1)) "$vmlinuz" | xz -dc >"$out/vmlinux.tmp.$$" 2>/dev/null || true
	readelf -h "$out/vmlinux.tmp.$$" >/dev/null 2>&1 ||
		{ rm -f "$out/vmlinux.tmp.$$"; echo "mkimage: extracted vmlinux is no ELF" >&2; exit 1; }
	mv -f "$out/vmlinux.tmp.$$" "$out/vmlinux"
fi

# ---- the guest kernel driver (guest-kmod/: vgpu_vf.ko) ------------------------------------
# Built against the headers of exactly this kernel: the three Debian packages of its version
# (linux-headers-KVER, linux-headers-KVER-minus-flavour-common, linux-kbuild-MAJOR.MINOR),
# fetched once and unpacked under OUTDIR/kheaders (nothing is installed). A build that warns
# fails the image; if the headers cannot be had, OUTDIR/kmod-unavailable says why and the
# image goes without the driver (the kmod suite then skips itself with that reason).
kmod=$out/kmod/vgpu_vf.ko
kmod_test=$out/kmod/vgpu-kmod-test
build_kmod() {
	src=$here/../../guest-kmod
	khdr=$out/kheaders
	kdir=$khdr/usr/src/linux-headers-$kver
	if [ "$(cat "$khdr/stamp" 2>/dev/null)" != "$kver" ]; then
		command -v apt-get >/dev/null ||
			{ kmod_why="no apt-get: cannot fetch the kernel headers"; return 1; }
		ver=$(dpkg-deb -f "$deb" Version)
		series=$(echo "$kver" | cut -d. -f1,2)
		kbver=$(apt-cache madison "linux-kbuild-$series" 2>/dev/null |
			"$here/kbuild-version.sh" "$ver")
		tmp=$(mktemp -d "$out/kheaders.XXXXXX")
		echo "mkimage: downloading the headers of $kver ($ver) from the Debian archive"
		if ! (cd "$tmp" && apt-get download "linux-headers-$kver=$ver" \
			"linux-headers-${kver%-*}-common=$ver" "linux-kbuild-$series=$kbver" \
			>/dev/null 2>"$tmp/err"); then
			why=$(grep -v '^W:' "$tmp/err" | tail -1)
			rm -rf "$tmp"
			kmod_why="apt-get download of the kernel headers failed: $why"
			return 1
		fi
		mkdir "$tmp/root"
		for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
		rm -f "$tmp"/*.deb
		# The flavour's Makefile includes the common tree by its installed path.
		sed -i "s|^include /usr/src/|include $khdr/usr/src/|" \
			"$tmp/root/usr/src/linux-headers-$kver/Makefile"
		echo "$kver" >"$tmp/root/stamp"
		rm -rf "$khdr"
		mv -T "$tmp/root" "$khdr" 2>/dev/null || true
		rm -rf "$tmp"
		[ -f "$khdr/stamp" ] || { kmod_why="unpacking the kernel headers failed"; return 1; }
	fi
	# Kbuild writes next to the sources: build in a copy (only changed files are copied,
	# so Kbuild's own dependency tracking keeps the rebuild incremental).
	mkdir -p "$out/kmod"
	for f in "$src"/*.c "$src"/*.h "$src"/Kbuild; do
		cmp -s "$f" "$out/kmod/${f##*/}" || cp "$f" "$out/kmod/"
	done
	# Not the outer make's flags or variables (BUILD=, CC=, -j): the kernel's build is its own.
	if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$kdir" M="$out/kmod" \
		VGPU_INCLUDE="$(cd "$here/../../include" && pwd)" modules >"$out/kmod/build.log" 2>&1
	then
		cat "$out/kmod/build.log" >&2
		echo "mkimage: vgpu_vf.ko does not build" >&2
		exit 1
	fi
	if grep -qi 'warning' "$out/kmod/build.log"; then
		cat "$out/kmod/build.log" >&2
		rm -f "$kmod"
		echo "mkimage: vgpu_vf.ko builds with warnings" >&2
		exit 1
	fi
	# Its own checks (bad ioctls, mappings, clients freed), a static guest program.
	stale=0
	for f in "$src/test/vgpu-kmod-test.c" "$here/../../include/vgpu/"*.h; do
		[ -f "$kmod_test" ] && [ ! "$f" -nt "$kmod_test" ] || stale=1
	done
	if [ $stale -eq 1 ]; then
		${CC:-gcc} -static -O2 -std=gnu11 -Wall -Wextra -Werror -I"$here/../../include" \
			-o "$kmod_test.tmp.$$" "$src/test/vgpu-kmod-test.c" &&
			mv -f "$kmod_test.tmp.$$" "$kmod_test" ||
			{ rm -f "$kmod_test.tmp.$$"; echo "mkimage: vgpu-kmod-test does not build" >&2; exit 1; }
	fi
	return 0
}
kmod_why=
if build_kmod; then
	rm -f "$out/kmod-unavailable"
else
	echo "mkimage: no vgpu_vf.ko: $kmod_why" >&2
	echo "$kmod_why" >"$out/kmod-unavailable"
	rm -f "$kmod" "$kmod_test"
fi

# ---- initramfs ----------------------------------------------------------------------------
img=$out/initramfs.cpio.gz
need=0
for f in "$bin" "$here/init" "$0" "$kroot/stamp" /bin/busybox $([ -f "$kmod" ] && echo "$kmod") \
	 $([ -f "$kmod_test" ] && echo "$kmod_test"); do
	[ -f "$img" ] && [ ! "$f" -nt "$img" ] || need=1
done
[ $need -eq 1 ] || exit 0

root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/etc" \
	 "$root/lib/modules"
cp /bin/busybox "$root/bin/busybox"
cp "$bin" "$root/bin/vgpu-vf-test"
cp "$here/init" "$root/init"
chmod 755 "$root/init" "$root/bin/vgpu-vf-test"
# modules.dep lists a module's dependencies so that the first depends on the later ones:
# load them last to first, then the module itself.
dep=$kroot/lib/modules/$kver/modules.dep
: >"$root/etc/modules"
for m in $MODS; do
	line=$(grep -E "/$m\.ko(\.xz)?:" "$dep") ||
		{ echo "mkimage: $m not in $dep" >&2; exit 1; }
	list=$(echo "$line" | awk -F': *' '{ n = split($2, d, " "); for (i = n; i >= 1; i--) print d[i]; print $1 }')
	for k in $list; do
		grep -qx "/lib/modules/$k" "$root/etc/modules" && continue
		mkdir -p "$root/lib/modules/$(dirname "$k")"
		cp "$kroot/lib/modules/$kver/$k" "$root/lib/modules/$k"
		echo "/lib/modules/$k" >>"$root/etc/modules"
	done
done
if [ -f "$kmod" ]; then
	cp "$kmod" "$root/lib/modules/vgpu_vf.ko"
	cp "$kmod_test" "$root/bin/vgpu-kmod-test"
fi
echo "$kver" >"$root/etc/kernel-release"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$img.tmp.$$"
mv -f "$img.tmp.$$" "$img"
echo "mkimage: $img ($(du -k "$img" | cut -f1) KiB, kernel $kver)"
