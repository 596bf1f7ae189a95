#!/usr/bin/env bash
# Stops the local node world hack/node/up.sh started: only the PIDs it recorded in
# $STATE/pids. Pods are deleted through their kubelet first, so CNI DEL runs and
# host-device hands every NIC2 back; then containerd's leftovers, mounts under $STATE,
# the sandbox network namespaces our containerds made, the nodes' cgroups, namespaces,
# links and nftables tables. BNERD_NODE_WIPE=1 also deletes $STATE (caches stay).
set -uo pipefail
STATE=${BNERD_NODE_STATE:-${TMPDIR:-/tmp}/bnerd-node}
NODES=(a b)
t_start=$(date +%s%N)
log() { printf '[node-down %6.1fs] %s\n' "$(( ($(date +%s%N) - t_start) / 1000000 ))e-3" "$*" >&2; }
[[ $(id -u) == 0 ]] || { log "needs root"; exit 1; }
[[ -d $STATE ]] || { log "nothing at $STATE"; exit 0; }
touch "$STATE/pids"

pid_of() { awk -v n="$1" '$1==n{print $2}' "$STATE/pids" | tail -1; }
comm_of() { awk -v n="$1" '$1==n{print $3}' "$STATE/pids" | tail -1; }
# alive: the recorded PID runs the recorded program (a reused PID is not ours) and has
# not exited (a zombie waiting for its reaper has).
alive() {
  local p; p=$(pid_of "$1"); [[ -n $p ]] || return 1
  [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$(comm_of "$1")" ]] || return 1
  [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]]
}
stop() { # name [seconds]: SIGTERM, SIGKILL after the grace
  alive "$1" || return 0
  local p; p=$(pid_of "$1")
  kill "$p" 2>/dev/null
  for _ in $(seq $(( ${2:-10} * 10 ))); do alive "$1" || { log "stopped $1 ($p)"; return 0; }; sleep 0.1; done
  kill -9 "$p" 2>/dev/null; log "killed $1 ($p)"
}

# 1. Nothing may recreate pods; then every pod is deleted through its kubelet (CNI DEL).
stop kube-controller-manager
stop kube-scheduler
if [[ -f $STATE/env ]] && alive kube-apiserver; then
  # shellcheck disable=SC1091
  source "$STATE/env"
  kubectl delete pods -A --all --grace-period=2 --wait=false >/dev/null 2>&1
  # A node whose kubelet is gone (a test powered it off) never confirms its pods'
  # deletion: remove them from the API at once instead of waiting out the loop below.
  for n in "${NODES[@]}"; do
    alive "kubelet-$n" || kubectl delete pods -A --field-selector "spec.nodeName=vpn01-worker-$n" \
      --force --grace-period=0 --wait=false >/dev/null 2>&1
  done
  for _ in $(seq 150); do
    [[ -z $(kubectl get pods -A -o name 2>/dev/null) ]] && break
    sleep 0.2
  done
fi
for n in "${NODES[@]}"; do stop "kubelet-$n"; done

# 2. Whatever our containerds still run: kill and delete their tasks and containers, so
#    their shims exit.
for n in "${NODES[@]}"; do
  sock=$STATE/node-$n/run/containerd.sock
  alive "containerd-$n" || continue
  CTR=(ctr -a "$sock" -n k8s.io)
  for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
  sleep 0.5
  for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1; done
  stop "containerd-$n"
done
# A shim is ours when it was started with our containerd's address.
for n in "${NODES[@]}"; do
  for p in $(pgrep -f -- "-address $STATE/node-$n/run/containerd.sock" 2>/dev/null); do
    kill -9 "$p" 2>/dev/null && log "killed leftover shim $p of node $n"
  done
done
stop kube-apiserver
stop etcd
stop registry

# 3. Mounts under $STATE (volumes, rootfs, shm), deepest first.
awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done
# A world starts from an empty cluster: the data of etcd, the kubelets, IPAM and Multus
# goes; the PKI and the containerds' image stores stay (warm starts pull only the layers
# they lack).
# The registry's storage and what was released into it go too: each world pushes its
# release into an empty registry.
for d in "$STATE/etcd" "$STATE/registry-storage" "$STATE/release" "$STATE"/node-*/kubelet "$STATE"/node-*/run/ipam "$STATE"/node-*/run/multus "$STATE"/node-*/pod-logs "$STATE"/node-*/containerd/state; do
  [[ -e $d ]] && rm -rf "$d"
done
# Sandbox network namespaces made by our containerds: cni-* that appeared after up.sh
# first ran and that no process of another runtime could have made (only ours runs).
for n in "${NODES[@]}"; do
  before=$STATE/node-$n/netns.before
  [[ -f $before ]] || continue
  for f in /var/run/netns/cni-*; do
    [[ -e $f ]] || continue
    grep -qx "$(basename "$f")" "$before" && continue
    [[ $f -nt $before ]] || continue
    umount "$f" 2>/dev/null; rm -f "$f" && log "removed netns $(basename "$f")"
  done
done

# 4. The nodes' cgroup trees (rmdir only removes empty cgroups: nothing running is hit).
for n in "${NODES[@]}"; do
  for h in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do
    [[ -d $h/bn-node-$n ]] && find "$h/bn-node-$n" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
done
# Container log links the kubelets made in the fixed /var/log/containers.
for l in /var/log/containers/*.log; do
  [[ -L $l ]] || continue
  [[ $(readlink "$l") == "$STATE"/* ]] && rm -f "$l"
done

# 5. Namespaces, links, nftables.
for n in "${NODES[@]}"; do
  ns=bn-node-$n
  ip link del "$ns" 2>/dev/null && log "deleted link $ns"
  if [[ -e /var/run/netns/$ns ]]; then ip netns del "$ns" && log "deleted netns $ns"; fi
done
nft delete table ip bn-node 2>/dev/null && log "deleted nftables table ip bn-node"

: >"$STATE/pids"
rm -f "$STATE/env" "$STATE/nodes" "$STATE/registry"
if [[ ${BNERD_NODE_WIPE:-0} == 1 ]]; then
  rm -rf "$STATE" && log "removed $STATE"
fi
log "done"
