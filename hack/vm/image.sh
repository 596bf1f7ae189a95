#!/usr/bin/env bash
# Builds, once, the VM image the kernel-dataplane tests boot: Debian's stock kernel (XFRM,
# ESP, nftables, WireGuard as modules), strongSwan with kernel-netlink, swanctl, nftables,
# tcpdump, iperf3, iproute2, wireguard-tools. Prints the directory holding it:
#
#   vmlinux      the kernel's ELF, booted through its PVH entry (no decompression: under
#                software emulation that saves ~40 s per boot)
#   vmlinuz      the packaged kernel, used when no vmlinux could be extracted
#   initrd.img   busybox and the modules to reach the root disk and the 9p shares
#   rootfs.img   ext4; the VM boots it with snapshot=on, so the cached file never changes
#   manifest     versions, sizes, build time
#
# Cached under ~/.cache/bnerd-vpn-operator/vm/<suite>-<hash of this script> (BNERD_CACHE
# moves the root); a changed package list or guest init rebuilds, older images are
# removed. Downloaded .debs are cached beside it. Needs root (debootstrap, chroot, mkfs);
# installs the host tools it lacks with apt-get.
#
#   hack/vm/image.sh               build if missing, print the directory
#   hack/vm/image.sh --print-dir   print the directory only (it may not exist yet)
set -euo pipefail

SUITE=bookworm
CACHE_ROOT="${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}"
VM_CACHE="$CACHE_ROOT/vm"
# Guest packages. strongswan-charon carries charon and (through strongswan-libcharon)
# kernel-netlink, socket-default and vici; openssl is in libstrongswan-standard-plugins.
# No libcharon-extra-plugins: the guest has no kernel-libipsec, so kernel IPsec it is.
PACKAGES=busybox-static,linux-image-amd64,strongswan-charon,charon-systemd,strongswan-swanctl,libstrongswan-standard-plugins,iproute2,nftables,tcpdump,iperf3,wireguard-tools,kmod,procps,iputils-ping,curl,openssl,util-linux
# Module trees a headless VM without devices never loads (about 60% of /lib/modules).
PRUNE="drivers/gpu drivers/media drivers/infiniband drivers/net/wireless drivers/net/ethernet
drivers/staging drivers/scsi drivers/usb drivers/bluetooth drivers/isdn drivers/iio drivers/hid
drivers/input drivers/mtd drivers/comedi drivers/net/can drivers/net/usb drivers/platform
drivers/hwmon drivers/edac drivers/watchdog drivers/mfd drivers/thunderbolt drivers/firewire
drivers/atm drivers/nfc drivers/leds drivers/power drivers/pinctrl drivers/rtc drivers/spi
drivers/i2c drivers/w1 drivers/video drivers/misc drivers/target drivers/md drivers/ata
drivers/mmc drivers/memstick drivers/nvme drivers/accessibility sound net/bluetooth
net/mac80211 net/wireless net/nfc net/can fs/nfs fs/nfsd fs/ocfs2 fs/xfs fs/btrfs fs/f2fs
fs/gfs2 fs/cifs fs/smb fs/ceph fs/ubifs fs/jfs fs/reiserfs fs/nilfs2"
# Loaded by the initrd, in dependency order (modprobe resolves it at build time).
INITRD_MODULES="virtio_pci virtio_blk virtio_console ext4 9pnet_virtio 9p"

KEY=$(grep -v '^[[:space:]]*#' "$0" | sha256sum | cut -c1-12)
OUT="$VM_CACHE/$SUITE-$KEY"
if [[ "${1:-}" == "--print-dir" ]]; then
	echo "$OUT"
	exit 0
fi
if [[ -f "$OUT/manifest" ]]; then
	echo "$OUT"
	exit 0
fi

log() { printf '[vm-image %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
[[ $(id -u) == 0 ]] || { echo "hack/vm/image.sh: needs root (debootstrap, chroot, mkfs)" >&2; exit 2; }

mkdir -p "$VM_CACHE"
exec 9>"$VM_CACHE/.build.lock"
flock 9
if [[ -f "$OUT/manifest" ]]; then
	echo "$OUT"
	exit 0
fi

# --- host tools ---------------------------------------------------------------------
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
command -v cpio >/dev/null || missing+=(cpio)
command -v zstd >/dev/null || missing+=(zstd)
command -v flock >/dev/null || missing+=(util-linux)
if ((${#missing[@]})); then
	log "installing host packages: ${missing[*]}"
	# shellcheck source=hack/apt.sh
	. "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"
	apt_install "${missing[@]}"
fi

# --- the Debian mirror the host already uses -----------------------------------------
mirror() {
	if [[ -n "${BNERD_VM_MIRROR:-}" ]]; then echo "$BNERD_VM_MIRROR"; return; fi
	local m=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		# deb822: the first enabled "deb" stanza listing the suite and "main".
		m=$(awk -v suite="$SUITE" 'BEGIN { RS = ""; FS = "\n" } {
			t = ""; u = ""; s = ""; c = ""; e = "yes"
			for (i = 1; i <= NF; i++) {
				l = $i
				if (l ~ /^Types:/) t = " " l " "
				if (l ~ /^URIs:/) { u = l; sub(/^URIs:[ \t]*/, "", u) }
				if (l ~ /^Suites:/) s = " " l " "
				if (l ~ /^Components:/) c = " " l " "
				if (l ~ /^Enabled:/) { e = tolower(l); sub(/^enabled:[ \t]*/, "", e) }
			}
			if (e != "no" && t ~ /[ \t]deb[ \t]/ && s ~ "[ \t]" suite "[ \t]" && c ~ /[ \t]main[ \t]/ && u != "") { split(u, a, /[ \t]+/); print a[1]; exit }
		}' /etc/apt/sources.list.d/*.sources)
	fi
	if [[ -z "$m" ]]; then
		m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | sed -e 's/#.*//' -e 's/\[[^]]*\]//' |
			awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }')
	fi
	echo "${m:-http://deb.debian.org/debian}"
}
MIRROR=$(mirror)
MIRROR=${MIRROR%/}

# --- root file system ---------------------------------------------------------------
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/bnerd-vm-build.XXXXXX")
ROOT=$BUILD/root
unmount() {
	local m
	for m in proc sys dev/pts dev; do
		if mountpoint -q "$ROOT/$m" 2>/dev/null; then umount -l "$ROOT/$m" || true; fi
	done
}
trap 'unmount; rm -rf "$BUILD" "$OUT.tmp"' EXIT
mkdir -p "$ROOT" "$VM_CACHE/debs"

t0=$SECONDS
log "debootstrap $SUITE from $MIRROR (packages cached in $VM_CACHE/debs)"
# Two stages with a policy-rc.d in between: no maintainer script may start a daemon
# (charon!) in the host's network namespace.
debootstrap --foreign --variant=minbase --components=main --include="$PACKAGES" \
	--cache-dir="$VM_CACHE/debs" "$SUITE" "$ROOT" "$MIRROR" >"$BUILD/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$BUILD/debootstrap.log" >&2; exit 1; }
mkdir -p "$ROOT/usr/sbin"
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
# initramfs-tools would build a large initrd (minutes); the VM uses its own tiny one.
chroot "$ROOT" dpkg-divert --quiet --local --rename --divert /usr/sbin/update-initramfs.real \
	--add /usr/sbin/update-initramfs >>"$BUILD/debootstrap.log" 2>&1
ln -sf /bin/true "$ROOT/usr/sbin/update-initramfs"
chroot "$ROOT" /debootstrap/debootstrap --second-stage >>"$BUILD/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$BUILD/debootstrap.log" >&2; exit 1; }
rm -f "$ROOT/usr/sbin/policy-rc.d" "$ROOT/usr/sbin/update-initramfs"
chroot "$ROOT" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs
t_debootstrap=$((SECONDS - t0))
log "debootstrap done in ${t_debootstrap}s"

KVER=$(basename "$(ls -d "$ROOT"/lib/modules/* | sort -V | tail -n 1)")
[[ -f "$ROOT/boot/vmlinuz-$KVER" && -x "$ROOT/bin/busybox" ]] ||
	{ echo "hack/vm/image.sh: kernel or busybox missing in the root file system" >&2; exit 1; }

# --- PID 1 of the guest --------------------------------------------------------------
# The initrd switch_roots to this; it mounts the run's control share ("ctl", written by
# hack/vm/run.sh for every run) and hands over to its stage2, so what a run does changes
# without rebuilding the image.
cat >"$ROOT/usr/local/sbin/bnerd-vm-init" <<'INIT'
#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /ctl
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none ctl /ctl && [ -f /ctl/stage2 ]; then
	exec bash /ctl/stage2
fi
echo "bnerd-vm-init: no control share with a stage2" >/dev/console
echo b >/proc/sysrq-trigger
sleep 5
INIT
chmod 0755 "$ROOT/usr/local/sbin/bnerd-vm-init"
echo bnerd-vm >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost bnerd-vm\n' >"$ROOT/etc/hosts"

# --- kernel, initrd, pruned modules, ext4 image ---------------------------------------
mkdir -p "$OUT.tmp"
cp "$ROOT/boot/vmlinuz-$KVER" "$OUT.tmp/vmlinuz"
# The ELF inside the bzImage: find a compressed stream that decompresses to an ELF.
extract_vmlinux() {
	local spec tool off
	for spec in '\xfd7zXZ\x00:xz -dc' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dc'; do
		tool=${spec#*:}
		for off in $(LC_ALL=C grep -aboP "${spec%%:*}" "$1" | cut -d: -f1); do
			tail -c +$((off + 1)) "$1" | $tool 2>/dev/null >"$2" || true
			[[ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" == '177ELF' ]] && return 0
		done
	done
	rm -f "$2"
	return 1
}
extract_vmlinux "$OUT.tmp/vmlinuz" "$OUT.tmp/vmlinux" || log "no vmlinux extracted; hack/vm/run.sh boots the bzImage (slower)"

# initrd: busybox, the modules above, an /init that mounts /dev/vda and switch_roots.
# No udev and no scripts: under emulation it takes about a second.
IRD=$ROOT/tmp/bnerd-initrd
mkdir -p "$IRD/bin" "$IRD/dev" "$IRD/proc" "$IRD/sys" "$IRD/newroot"
cp "$ROOT/bin/busybox" "$IRD/bin/busybox"
: >"$IRD/modules"
for m in $INITRD_MODULES; do
	chroot "$ROOT" modprobe -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
	mkdir -p "$IRD$(dirname "$ko")"
	cp "$ROOT$ko" "$IRD$ko"
	echo "$ko" >>"$IRD/modules"
done
cat >"$IRD/init" <<'RDINIT'
#!/bin/busybox sh
b=/bin/busybox
$b mount -t devtmpfs devtmpfs /dev
$b mount -t proc proc /proc
for m in $($b cat /modules); do $b insmod "$m" 2>/dev/null; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 400 ]; do $b sleep 0.05; i=$((i + 1)); done
if ! $b mount -t ext4 -o rw,noatime /dev/vda /newroot; then
	echo "initrd: cannot mount /dev/vda" >/dev/console
	echo b >/proc/sysrq-trigger
	$b sleep 5
fi
$b umount /proc
$b mount --move /dev /newroot/dev
exec $b switch_root /newroot /usr/local/sbin/bnerd-vm-init
RDINIT
chmod 0755 "$IRD/init"
(cd "$IRD" && find . | cpio -o -H newc --quiet) >"$OUT.tmp/initrd.img"
rm -rf "$IRD"

rm -f "$ROOT"/boot/initrd.img-* "$ROOT"/boot/vmlinuz-* "$ROOT"/boot/System.map-*
for d in $PRUNE; do rm -rf "$ROOT/lib/modules/$KVER/kernel/$d"; done
chroot "$ROOT" depmod -a "$KVER"
versions=$(chroot "$ROOT" dpkg-query -W -f '${Package}=${Version}\n' "linux-image-$KVER" strongswan-charon nftables iproute2 wireguard-tools iperf3 tcpdump 2>/dev/null || true)
rm -rf "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
	"$ROOT"/usr/share/locale/* "$ROOT"/var/cache/apt/archives/*.deb \
	"$ROOT"/var/cache/apt/*.bin "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/*.log
unmount
used_kib=$(du -sk "$ROOT" | cut -f1)
size_mib=$((used_kib / 1024 * 13 / 10 + 256))
mkfs.ext4 -q -F -L bnerd-vm -O ^has_journal -E root_owner=0:0 -d "$ROOT" "$OUT.tmp/rootfs.img" "${size_mib}M"

{
	echo "suite=$SUITE"
	echo "kernel=$KVER"
	echo "mirror=$MIRROR"
	echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "debootstrap_seconds=$t_debootstrap"
	echo "build_seconds=$((SECONDS - t0))"
	echo "rootfs_used_mib=$((used_kib / 1024))"
	echo "rootfs_image_mib=$size_mib"
	echo "$versions" | sed 's/^/version: /'
} >"$OUT.tmp/manifest"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
# Only this image stays: older keys are dead weight in a CI cache.
for d in "$VM_CACHE/$SUITE"-*; do
	[[ "$d" == "$OUT" || ! -f "$d/manifest" ]] || rm -rf "$d"
done
log "image ready in $OUT ($((SECONDS - t0))s)"
echo "$OUT"
