#!/usr/bin/env bash
# Boots the test VM (hack/vm/image.sh), runs one command in it as root, streams the
# command's output, and exits with its exit code.
#
#   hack/vm/run.sh [options] SHARE_DIR COMMAND [ARGS...]
#
# SHARE_DIR (host) is mounted read-write at /share in the guest (9p) and is the command's
# working directory: put binaries and inputs there, have the command write results there.
# COMMAND is a path inside the guest (for example /share/dataplane.test).
#
# The VM has no network device at all; tests build network namespaces inside it. Its root
# disk is the cached image with snapshot=on: every write is discarded when it stops.
#
# Options:
#   --env K=V           set K=V for the command (repeatable)
#   --port NAME=SOCKET  connect the host's listening unix SOCKET to a virtio-serial port
#                       that appears in the guest as /dev/virtio-ports/NAME (repeatable)
#   --timeout SECONDS   stop the VM after this long (default BNERD_VM_TIMEOUT or 1800)
#   --disk FILE         attach the raw image FILE as a further virtio disk, /dev/vdb for the
#                       first (repeatable), with snapshot=on: the guest may write, FILE
#                       never changes (hack/vm/libreswan.sh builds one)
#
# Environment: BNERD_VM_MEM (MiB, default 1024), BNERD_VM_CPUS (default: host CPUs, at most
# 4), BNERD_VM_ACCEL (kvm|tcg; default kvm only with hardware-assisted /dev/kvm),
# BNERD_VM_KEEP=1 keeps the run directory (console.log) for debugging.
#
# One VM at a time (a lock in the cache directory; a second caller waits). Exit codes: the
# command's; 124 timeout (the VM is stopped); 125 the VM ended without reporting one; 2
# usage. Nothing outlives the script: qemu runs under `timeout` and is killed with the
# script's process group on exit, and the run directory is removed.
set -euo pipefail

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
envs=() ports=() disks=()
TIMEOUT=${BNERD_VM_TIMEOUT:-1800}
while (($#)); do
	case $1 in
	--env) envs+=("$2"); shift 2 ;;
	--port) ports+=("$2"); shift 2 ;;
	--timeout) TIMEOUT=$2; shift 2 ;;
	--disk) disks+=("$2"); shift 2 ;;
	--) shift; break ;;
	-*) usage ;;
	*) break ;;
	esac
done
(($# >= 2)) || usage
SHARE=$(cd "$1" && pwd)
shift

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE_ROOT="${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}"
MEM=${BNERD_VM_MEM:-1024}
CPUS=${BNERD_VM_CPUS:-$(n=$(nproc); ((n > 4)) && n=4; echo "$n")}
command -v qemu-system-x86_64 >/dev/null || { echo "hack/vm/run.sh: qemu-system-x86_64 missing (hack/vm/image.sh installs it)" >&2; exit 2; }
IMAGE=$("$HERE/image.sh")
for f in initrd.img rootfs.img; do
	[[ -f "$IMAGE/$f" ]] || { echo "hack/vm/run.sh: $IMAGE/$f missing" >&2; exit 2; }
done
KERNEL=$IMAGE/vmlinux
[[ -f $KERNEL ]] || KERNEL=$IMAGE/vmlinuz

# KVM only where it is hardware-assisted. A /dev/kvm backed by kvm_pvm (pagetable-based
# virtualization without VMX/SVM) runs only PVM-enlightened guests: a stock Debian kernel
# never prints a byte there. Software emulation (TCG) works everywhere, several times
# slower.
ACCEL=${BNERD_VM_ACCEL:-}
if [[ -z $ACCEL ]]; then
	ACCEL=tcg
	if [[ -c /dev/kvm && ! -d /sys/module/kvm_pvm ]] && [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]] &&
		{ exec 7<>/dev/kvm; } 2>/dev/null; then
		ACCEL=kvm
		exec 7>&-
	fi
fi
case $ACCEL in
kvm) accel=(-accel kvm -cpu host,-arch-capabilities) ;;
tcg) accel=(-accel tcg,thread=multi -cpu max) ;;
*) echo "hack/vm/run.sh: BNERD_VM_ACCEL must be kvm or tcg" >&2; exit 2 ;;
esac

# One VM at a time on this machine.
mkdir -p "$CACHE_ROOT/vm"
exec 8>"$CACHE_ROOT/vm/.run.lock"
flock 8

CTL=$(mktemp -d "${TMPDIR:-/tmp}/bnerd-vm-run.XXXXXX")
: >"$CTL/args"
for a in "$@"; do printf '%s\n' "$a" >>"$CTL/args"; done
: >"$CTL/env"
for e in "${envs[@]}"; do printf 'export %s=%q\n' "${e%%=*}" "${e#*=}" >>"$CTL/env"; done
: >"$CTL/output"
# The guest's PID 1 (the image's bnerd-vm-init) mounts this share and runs stage2.
cat >"$CTL/stage2" <<'STAGE2'
mkdir -p /dev/pts /dev/shm /run /tmp /share
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin; ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mkdir -p /run/netns /run/lock
hostname bnerd-vm
ip link set lo up
# Without udev nothing loads modules for CPU features: AES-NI and CLMUL (emulated, still
# faster than table AES) must be asked for.
modprobe -q aesni_intel 2>/dev/null; modprobe -q ghash_clmulni_intel 2>/dev/null
mkdir -p /dev/virtio-ports
for p in /sys/class/virtio-ports/*; do
	[ -f "$p/name" ] && ln -sf "/dev/$(basename "$p")" "/dev/virtio-ports/$(cat "$p/name")"
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none share /share
. /ctl/env
cd /share
echo "bnerd-vm: up after $(cut -d' ' -f1 /proc/uptime)s ($(uname -r)), running $(head -n1 /ctl/args)" >>/ctl/output
mapfile -t args </ctl/args
"${args[@]}" </dev/null >>/ctl/output 2>&1
rc=$?
echo "bnerd-vm: exit $rc after $(cut -d' ' -f1 /proc/uptime)s" >>/ctl/output
echo "$rc" >/ctl/rc
cd /
sync
umount /share
umount /ctl
# Reboot, not power-off: qemu runs with -no-reboot and exits; works without ACPI.
echo b >/proc/sysrq-trigger
sleep 10
STAGE2

portargs=()
if ((${#ports[@]})); then
	portargs+=(-device virtio-serial-pci,id=vser0)
	i=0
	for p in "${ports[@]}"; do
		portargs+=(-chardev "socket,id=port$i,path=${p#*=}" -device "virtserialport,bus=vser0.0,chardev=port$i,name=${p%%=*}")
		i=$((i + 1))
	done
fi

diskargs=()
for d in "${disks[@]}"; do
	[[ -f $d ]] || { echo "hack/vm/run.sh: --disk $d: no such file" >&2; exit 2; }
	diskargs+=(-drive "file=$d,if=virtio,format=raw,snapshot=on,cache=unsafe")
done

qpid="" tpid=""
finish() {
	for p in $tpid $qpid; do kill "$p" 2>/dev/null || true; done
	for p in $tpid $qpid; do wait "$p" 2>/dev/null || true; done
	if [[ -n ${BNERD_VM_KEEP:-} ]]; then echo "hack/vm/run.sh: run directory kept: $CTL" >&2; else rm -rf "$CTL"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM HUP

t0=$(date +%s.%N)
# snapshot=on puts its overlay in TMPDIR: keep it in the run directory.
# --foreground keeps qemu in this script's process group: killing the group (as the tests
# do) takes qemu with it even when this script gets no chance to clean up.
TMPDIR=$CTL timeout --foreground -k 10 "$TIMEOUT" qemu-system-x86_64 \
	-name bnerd-vm -nodefaults -no-user-config -display none -vga none -no-reboot \
	"${accel[@]}" -m "$MEM" -smp "$CPUS" \
	-kernel "$KERNEL" -initrd "$IMAGE/initrd.img" \
	-append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off random.trust_cpu=on ${BNERD_VM_APPEND:-}" \
	-drive "file=$IMAGE/rootfs.img,if=virtio,format=raw,snapshot=on,cache=unsafe" \
	"${diskargs[@]}" \
	-device virtio-rng-pci \
	-virtfs "local,path=$CTL,mount_tag=ctl,security_model=none,id=ctl" \
	-virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=share" \
	"${portargs[@]}" \
	-serial "file:$CTL/console.log" \
	</dev/null >"$CTL/qemu.log" 2>&1 &
qpid=$!
tail -n +1 -s 0.2 -F --pid="$qpid" "$CTL/output" 2>/dev/null &
tpid=$!
qrc=0
wait "$qpid" || qrc=$?
qpid=""
wait "$tpid" 2>/dev/null || true
tpid=""
t1=$(date +%s.%N)

rc=125
if [[ -s $CTL/rc ]]; then
	rc=$(cat "$CTL/rc")
elif [[ $qrc == 124 ]]; then
	echo "hack/vm/run.sh: timeout after ${TIMEOUT}s; VM stopped" >&2
	rc=124
fi
if [[ $rc == 124 || $rc == 125 ]]; then
	[[ -s $CTL/qemu.log ]] && sed 's/^/hack\/vm\/run.sh: qemu: /' "$CTL/qemu.log" >&2
	[[ -s $CTL/console.log ]] && tail -n 40 "$CTL/console.log" | tr -d '\r' | sed 's/^/hack\/vm\/run.sh: console: /' >&2
fi
printf 'hack/vm/run.sh: accel=%s mem=%sM cpus=%s wall=%.1fs rc=%s\n' "$ACCEL" "$MEM" "$CPUS" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$rc" >&2
exit "$rc"
