#!/usr/bin/env bash
# Builds, once, the libreswan clients the kernel VM tier runs against the gateway: Debian
# 12's libreswan 4.10 and Debian 13's libreswan 5.2, each in a minimal root file system of
# its own release. A separate step from hack/vm/image.sh: libreswan conflicts with the
# strongSwan packages the VM image carries, and 5.2 needs Debian 13's libraries, so each
# version runs in a chroot of its release. Prints the directory holding:
#
#   clients.img  ext4 with /bookworm and /trixie (chroots: libreswan, an initialised NSS
#                database); hack/vm/run.sh --disk attaches it with snapshot=on
#   root/        the same two trees, for checks on this host (chroot root/trixie ipsec ...)
#   manifest     versions, sizes, build time
#
# Cached under ~/.cache/bnerd-vpn-operator/vm/libreswan-<hash of this script> (BNERD_CACHE
# moves the root); older builds are removed. Downloaded .debs are cached beside the VM
# image's. Needs root (debootstrap, chroot, mkfs).
#
#   hack/vm/libreswan.sh               build if missing, print the directory
#   hack/vm/libreswan.sh --print-dir   print the directory only (it may not exist yet)
set -euo pipefail

SUITES="bookworm trixie"
# libreswan's own dependencies come with it; bind9-host is what its "host" dependency
# resolves to (a virtual package in Debian 13, which debootstrap cannot resolve).
PACKAGES=libreswan,bind9-host
CACHE_ROOT="${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}"
VM_CACHE="$CACHE_ROOT/vm"

KEY=$(grep -v '^[[:space:]]*#' "$0" | sha256sum | cut -c1-12)
OUT="$VM_CACHE/libreswan-$KEY"
if [[ "${1:-}" == "--print-dir" ]]; then
	echo "$OUT"
	exit 0
fi
if [[ -f "$OUT/manifest" ]]; then
	echo "$OUT"
	exit 0
fi

log() { printf '[vm-libreswan %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
[[ $(id -u) == 0 ]] || { echo "hack/vm/libreswan.sh: needs root (debootstrap, chroot, mkfs)" >&2; exit 2; }

mkdir -p "$VM_CACHE"
exec 9>"$VM_CACHE/.libreswan.lock"
flock 9
if [[ -f "$OUT/manifest" ]]; then
	echo "$OUT"
	exit 0
fi

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
if ((${#missing[@]})); then
	log "installing host packages: ${missing[*]}"
	# shellcheck source=hack/apt.sh
	. "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"
	apt_install "${missing[@]}"
fi

# The Debian archive the host's apt uses (it serves every release), else Debian's own.
mirror() {
	if [[ -n "${BNERD_VM_MIRROR:-}" ]]; then echo "$BNERD_VM_MIRROR"; return; fi
	local m=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		m=$(awk 'BEGIN { RS = ""; FS = "\n" } {
			u = ""; c = ""; e = "yes"
			for (i = 1; i <= NF; i++) {
				l = $i
				if (l ~ /^URIs:/) { u = l; sub(/^URIs:[ \t]*/, "", u) }
				if (l ~ /^Components:/) c = " " l " "
				if (l ~ /^Enabled:/) { e = tolower(l); sub(/^enabled:[ \t]*/, "", e) }
			}
			if (e != "no" && c ~ /[ \t]main[ \t]/ && u ~ /\/debian\/?$/) { split(u, a, /[ \t]+/); print a[1]; exit }
		}' /etc/apt/sources.list.d/*.sources)
	fi
	echo "${m:-http://deb.debian.org/debian}"
}
MIRROR=$(mirror)
MIRROR=${MIRROR%/}

BUILD=$(mktemp -d "${TMPDIR:-/tmp}/bnerd-vm-libreswan.XXXXXX")
unmount() {
	local s m
	for s in $SUITES; do
		for m in proc sys dev/pts dev; do
			if mountpoint -q "$BUILD/root/$s/$m" 2>/dev/null; then umount -l "$BUILD/root/$s/$m" || true; fi
		done
	done
}
trap 'unmount; rm -rf "$BUILD" "$OUT.tmp"' EXIT
mkdir -p "$VM_CACHE/debs"

t0=$SECONDS
versions=""
for s in $SUITES; do
	R=$BUILD/root/$s
	mkdir -p "$R"
	log "debootstrap $s with $PACKAGES from $MIRROR"
	# Two stages with a policy-rc.d in between: no maintainer script may start pluto on
	# this host.
	debootstrap --foreign --variant=minbase --components=main --include="$PACKAGES" \
		--cache-dir="$VM_CACHE/debs" "$s" "$R" "$MIRROR" >"$BUILD/$s.log" 2>&1 ||
		{ tail -n 30 "$BUILD/$s.log" >&2; exit 1; }
	printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
	chmod 0755 "$R/usr/sbin/policy-rc.d"
	chroot "$R" /debootstrap/debootstrap --second-stage >>"$BUILD/$s.log" 2>&1 ||
		{ tail -n 30 "$BUILD/$s.log" >&2; exit 1; }
	rm -f "$R/usr/sbin/policy-rc.d"
	unmount
	# pluto refuses to start without an NSS database (the systemd unit would make it).
	chroot "$R" ipsec initnss >>"$BUILD/$s.log" 2>&1
	v=$(chroot "$R" dpkg-query -W -f '${Version}' libreswan)
	versions+="version: $s libreswan=$v"$'\n'
	rm -rf "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/usr/share/locale/* \
		"$R"/var/cache/apt/archives/*.deb "$R"/var/cache/apt/*.bin "$R"/var/lib/apt/lists/* "$R"/var/log/*.log
	log "$s: libreswan $v"
done

mkdir -p "$OUT.tmp"
used_kib=$(du -sk "$BUILD/root" | cut -f1)
size_mib=$((used_kib / 1024 * 13 / 10 + 64))
mkfs.ext4 -q -F -L bnerd-clients -O ^has_journal -E root_owner=0:0 -d "$BUILD/root" "$OUT.tmp/clients.img" "${size_mib}M"
mv "$BUILD/root" "$OUT.tmp/root"
{
	echo "suites=$SUITES"
	echo "mirror=$MIRROR"
	echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "build_seconds=$((SECONDS - t0))"
	echo "used_mib=$((used_kib / 1024))"
	echo "image_mib=$size_mib"
	printf '%s' "$versions"
} >"$OUT.tmp/manifest"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
for d in "$VM_CACHE"/libreswan-*; do
	[[ "$d" == "$OUT" || ! -f "$d/manifest" ]] || rm -rf "$d"
done
log "libreswan clients ready in $OUT ($((SECONDS - t0))s)"
echo "$OUT"
