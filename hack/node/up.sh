#!/usr/bin/env bash
# Starts the local node world: a real two-node Kubernetes cluster on this machine.
#
#   etcd, kube-apiserver (its own PKI), kube-controller-manager and kube-scheduler in the
#   root network namespace, on 10.77.0.1; and per node a network namespace (bn-node-a,
#   bn-node-b) holding that node's containerd + runc and kubelet, a bridge pod network,
#   and Multus (thin) with the host-device and static plugins for the gateway's NIC2.
#
# Each node is a network namespace so that an interface placed in it (the stand-in for a
# Neutron port Nova hot-plugs into that node's server) is seen by that node's CNI only,
# as on two machines. The nodes' providerIDs name the Nova servers of
# examples/sim-estate.yaml (vpn01-worker-a and -b).
#
# Every binary is built here (hack/controlplane.sh, Multus from the Go module proxy, the
# images by hack/images) and cached by version under ~/.cache/bnerd-vpn-operator.
#
# The images reach the nodes the way they reach a provider's cluster: a real OCI registry
# (Debian's docker-registry, the CNCF distribution server) runs on the control plane's
# address with TLS from the world's CA; the release is pushed to it (hack/release.sh:
# every image for RELEASE_PLATFORMS with its SBOMs, and the chart), and each node's
# containerd pulls from it through its registry hosts configuration. Nothing is imported.
#
# Idempotent: a second run finds everything running and returns. Everything it starts is
# recorded in $STATE/pids; hack/node/down.sh stops exactly those.
#
# Addresses (nothing else is routed; forwarding from or to 10.77.0.0/16 and anything
# outside it is dropped, and pods get a resolver-less resolv.conf, so nothing leaves the
# machine):
#   10.77.0.1            control plane (root namespace), 10.77.0.4k+1/30 per node link
#   10.77.0.1:5000       the registry (https, the world's CA)
#   10.77.0.4k+2         node k's address (k = 0 for a, 1 for b)
#   10.77.8.0/24         Services (kubernetes = 10.77.8.1, DNAT in each node namespace)
#   10.77.16+k.0/24      node k's pods
#
# Env: BNERD_NODE_STATE (default ${TMPDIR:-/tmp}/bnerd-node), BNERD_CACHE,
# BNERD_NODE_IMAGES=1 to also release the operator's images and chart into the registry
# (version: hack/release.sh --dev-version), BNERD_RELEASE_PLATFORMS (default
# linux/amd64,linux/arm64). $STATE/release/ then lists what was pushed (images.txt,
# chart.txt); $STATE/registry names the registry.
# --build-only installs and builds everything (packages, buildah for the Dockerfile test,
# control plane, Multus, the images with their SBOMs, the chart tools, GoReleaser) and
# starts nothing: `make test` runs it before the tests.
set -euo pipefail
BUILD_ONLY=0
[[ ${1:-} == --build-only ]] && BUILD_ONLY=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE_ROOT=${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}
STATE=${BNERD_NODE_STATE:-${TMPDIR:-/tmp}/bnerd-node}
MULTUS_VERSION=${MULTUS_VERSION:-v4.2.2}
MULTUS_BIN=$CACHE_ROOT/multus/$MULTUS_VERSION/multus

CP_IP=10.77.0.1 APISERVER_PORT=6443 ETCD_PORT=2379
SVC_CIDR=10.77.8.0/24 SVC_IP=10.77.8.1
NODES=(a b)
declare -A SERVER=([a]=11111111-1111-4111-8111-111111111111 [b]=22222222-2222-4222-8222-222222222222)
node_name() { echo "vpn01-worker-$1"; }
node_ns() { echo "bn-node-$1"; }
node_idx() { case $1 in a) echo 0 ;; b) echo 1 ;; esac; }
node_ip() { echo "10.77.0.$(( $(node_idx "$1") * 4 + 2 ))"; }
link_ip() { echo "10.77.0.$(( $(node_idx "$1") * 4 + 1 ))"; }
pod_cidr() { echo "10.77.$(( 16 + $(node_idx "$1") )).0/24"; }

t_start=$(date +%s%N)
log() { printf '[node-up %6.1fs] %s\n' "$(( ($(date +%s%N) - t_start) / 1000000 ))e-3" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (network namespaces, cgroups, mounts)"
mkdir -p "$STATE"/{etc,pki,logs} "$CACHE_ROOT"
touch "$STATE/pids"

# ---------------------------------------------------------------- packages
need=()
for p in containerd runc containernetworking-plugins nftables iproute2 openssl util-linux debootstrap docker-registry qemu-user-static curl buildah; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  log "apt-get install ${need[*]}"
  # docker-registry's package would start its own registry on :5000: this world starts
  # its own, and apt_install starts no service.
  # shellcheck source=hack/apt.sh
  . "$ROOT/hack/apt.sh"
  apt_install "${need[@]}"
fi
CNI_SYS=/usr/lib/cni
for p in bridge host-local loopback host-device static; do
  [[ -x $CNI_SYS/$p ]] || die "CNI plugin $p missing in $CNI_SYS (containernetworking-plugins)"
done

# ---------------------------------------------------------------- builds (cached)
CP_DIR=$(bash "$ROOT/hack/controlplane.sh")
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [[ -x $CP_DIR/$b ]] || die "$CP_DIR/$b missing after hack/controlplane.sh"
done
KUBECTL=$CP_DIR/kubectl

if [[ ! -x $MULTUS_BIN ]]; then
  w=$CACHE_ROOT/multus/build
  mkdir -p "$w" "$(dirname "$MULTUS_BIN")"
  log "building Multus (thin plugin) $MULTUS_VERSION from the Go module proxy (a few minutes the first time)"
  printf 'module bnerd.net/vpn-operator/multus-build\n\ngo 1.26\n\nrequire gopkg.in/k8snetworkplumbingwg/multus-cni.v4 %s\n' "$MULTUS_VERSION" >"$w/go.mod"
  printf 'package tools\n\nimport _ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus"\n' >"$w/tools.go"
  (cd "$w" && GOFLAGS=-mod=mod go mod tidy >&2 &&
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -o "$MULTUS_BIN.tmp" gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus >&2)
  mv "$MULTUS_BIN.tmp" "$MULTUS_BIN"
fi

RELEASE_PLATFORMS=${BNERD_RELEASE_PLATFORMS:-linux/amd64,linux/arm64}
RELEASE=0
[[ ${BNERD_NODE_IMAGES:-0} == 1 || $BUILD_ONLY == 1 ]] && RELEASE=1
REGISTRY_ADDR=$CP_IP:5000
REGISTRY=$REGISTRY_ADDR/bnerd
if ((RELEASE)); then
  VERSION=$(bash "$ROOT/hack/release.sh" --dev-version)
  log "release $VERSION: images for $RELEASE_PLATFORMS with their SBOMs (hack/images; cached by content)"
  SYFT=$(bash "$ROOT/hack/tool.sh" syft)
  (cd "$ROOT" && go run ./hack/images --platforms "$RELEASE_PLATFORMS" --version "$VERSION" --sbom --syft "$SYFT") >/dev/null ||
    die "building the release images failed"
fi
(cd "$ROOT" && go run ./hack/images pause) >/dev/null || die "building the pause image failed"
if ((BUILD_ONLY)); then
  # The chart's push and install (the Helm SDK, from the chart tests' module), and the
  # release's plugin packaging (TestRelease runs the whole `make release`).
  (cd "$ROOT/test/chart" && GOFLAGS=-mod=readonly go build -o /dev/null ./cmd/chart-install ./cmd/chart-push)
  bash "$ROOT/hack/tool.sh" goreleaser >/dev/null
  log "builds ready (--build-only: nothing started)"
  exit 0
fi
log "builds ready"

# ---------------------------------------------------------------- processes
pid_of() { awk -v n="$1" '$1==n{print $2}' "$STATE/pids" | tail -1; }
comm_of() { awk -v n="$1" '$1==n{print $3}' "$STATE/pids" | tail -1; }
# alive: the recorded PID runs the recorded program (a reused PID is not ours).
alive() {
  local p; p=$(pid_of "$1"); [[ -n $p ]] || return 1
  [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$(comm_of "$1")" ]] || return 1
  # An exited daemon not yet reaped is a zombie: dead, though its comm still reads.
  [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]]
}
start() { # name netns|- cmd...: in its own session, logged, PID recorded
  local name=$1 ns=$2; shift 2
  if alive "$name"; then return 0; fi
  local pre=()
  [[ $ns != - ]] && pre=(nsenter "--net=/var/run/netns/$ns" --)
  # The inner shell records its own PID, then execs (nsenter execs too): the recorded PID
  # is the daemon's.
  local comm; comm=$(basename "$1"); comm=${comm:0:15}
  setsid bash -c 'echo "$1 $$ $3" >>"$2"; shift 3; exec "$@"' _ "$name" "$STATE/pids" "$comm" "${pre[@]}" "$@" \
    >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  for _ in $(seq 50); do [[ -n $(pid_of "$name") ]] && break; sleep 0.05; done
  log "started $name (pid $(pid_of "$name"))"
}
wait_for() { # seconds what cmd...
  local s=$1 what=$2 deadline; shift 2
  deadline=$(( $(date +%s) + s ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || die "timed out after ${s}s waiting for $what (logs in $STATE/logs)"
    sleep 0.2
  done
}

# ---------------------------------------------------------------- network
# Root namespace: one veth per node and the control plane's address. No route for
# anything but 10.77.0.0/16 is added, and forwarding is never switched on here.
nft -f - <<EOF
table ip bn-node {
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip saddr 10.77.0.0/16 ip daddr != 10.77.0.0/16 counter drop
    ip daddr 10.77.0.0/16 ip saddr != 10.77.0.0/16 counter drop
  }
}
EOF
for n in "${NODES[@]}"; do
  ns=$(node_ns "$n")
  [[ -e /var/run/netns/$ns ]] || ip netns add "$ns"
  if ! ip link show "$ns" >/dev/null 2>&1; then
    ip link add "$ns" type veth peer name eth0 netns "$ns"
    ip addr add "$(link_ip "$n")/30" dev "$ns"
    ip link set "$ns" up
    ip -n "$ns" addr add "$(node_ip "$n")/30" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$(link_ip "$n")"
  fi
  ip route replace "$(pod_cidr "$n")" via "$(node_ip "$n")" dev "$ns"
  # Inside the node: pods forward through it; the kubernetes Service is one DNAT rule
  # (no kube-proxy); the same drop of anything leaving 10.77.0.0/16.
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.disable_ipv6=1
  ip netns exec "$ns" nft -f - <<EOF
table ip bn-node
delete table ip bn-node
table ip bn-node {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr $SVC_IP tcp dport 443 dnat to $CP_IP:$APISERVER_PORT
  }
  chain output {
    type nat hook output priority -100; policy accept;
    ip daddr $SVC_IP tcp dport 443 dnat to $CP_IP:$APISERVER_PORT
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip saddr 10.77.0.0/16 ip daddr != 10.77.0.0/16 counter drop
  }
}
EOF
done
# 10.77.0.1 is the link address of node a's veth; node b reaches it through its own link
# (the root namespace answers for any of its addresses on any link).

# ---------------------------------------------------------------- PKI (openssl)
pki() {
  local d=$STATE/pki
  [[ -f $d/done ]] && return 0
  cd "$d"
  openssl genrsa -out ca.key 2048 2>/dev/null
  openssl req -x509 -new -key ca.key -days 30 -subj /CN=bnerd-node-ca -out ca.crt 2>/dev/null
  cert() { # name subject [altnames]
    local name=$1 subj=$2 alt=${3:-}
    openssl genrsa -out "$name.key" 2048 2>/dev/null
    openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
    local ext
    ext=$(mktemp)
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
    [[ -n $alt ]] && printf 'subjectAltName=%s\n' "$alt" >>"$ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$ext" -out "$name.crt" 2>/dev/null
    rm -f "$ext" "$name.csr"
  }
  cert apiserver /CN=kube-apiserver "IP:$CP_IP,IP:$SVC_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=bnerd-admin"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert controller-manager /CN=system:kube-controller-manager
  cert scheduler /CN=system:kube-scheduler
  for n in "${NODES[@]}"; do
    cert "kubelet-$n" "/O=system:nodes/CN=system:node:$(node_name "$n")"
    cert "kubelet-$n-serving" "/CN=$(node_name "$n")" "IP:$(node_ip "$n")"
  done
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ./*.key
  touch done
  cd - >/dev/null
}
kubeconfig() { # file user
  local u=$2
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bnerd-node
  cluster: {server: "https://$CP_IP:$APISERVER_PORT", certificate-authority-data: $(base64 -w0 "$STATE/pki/ca.crt")}
users:
- name: $u
  user: {client-certificate-data: $(base64 -w0 "$STATE/pki/$u.crt"), client-key-data: $(base64 -w0 "$STATE/pki/$u.key")}
contexts:
- name: bnerd-node
  context: {cluster: bnerd-node, user: $u}
current-context: bnerd-node
EOF
  chmod 600 "$1"
}
pki
# The registry's serving certificate (also for a state made before there was a registry).
if [[ ! -f $STATE/pki/registry.crt ]]; then
  (
    d=$STATE/pki
    cd "$d"
    openssl genrsa -out registry.key 2048 2>/dev/null
    openssl req -new -key registry.key -subj /CN=bnerd-registry -out registry.csr 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:%s\n' "$CP_IP" >registry.ext
    openssl x509 -req -in registry.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile registry.ext -out registry.crt 2>/dev/null
    chmod 600 registry.key
    rm -f registry.csr registry.ext
  )
fi
for u in admin controller-manager scheduler; do kubeconfig "$STATE/etc/$u.kubeconfig" "$u"; done
for n in "${NODES[@]}"; do kubeconfig "$STATE/etc/kubelet-$n.kubeconfig" "kubelet-$n"; done
ADMIN_KC=$STATE/etc/admin.kubeconfig
K() { "$KUBECTL" --kubeconfig "$ADMIN_KC" "$@"; }

# ---------------------------------------------------------------- control plane
start etcd - "$CP_DIR/etcd" --name bnerd-node --data-dir "$STATE/etcd" \
  --listen-client-urls "http://$CP_IP:$ETCD_PORT" --advertise-client-urls "http://$CP_IP:$ETCD_PORT" \
  --listen-peer-urls "http://$CP_IP:2380" --initial-advertise-peer-urls "http://$CP_IP:2380" \
  --initial-cluster "bnerd-node=http://$CP_IP:2380" --listen-metrics-urls "http://$CP_IP:2381" \
  --unsafe-no-fsync
start kube-apiserver - "$CP_DIR/kube-apiserver" --etcd-servers "http://$CP_IP:$ETCD_PORT" \
  --bind-address "$CP_IP" --advertise-address "$CP_IP" --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$STATE/pki/apiserver.crt" --tls-private-key-file "$STATE/pki/apiserver.key" \
  --client-ca-file "$STATE/pki/ca.crt" --service-cluster-ip-range "$SVC_CIDR" \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$STATE/pki/sa.pub" \
  --service-account-signing-key-file "$STATE/pki/sa.key" --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction --allow-privileged=true \
  --kubelet-client-certificate "$STATE/pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$STATE/pki/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$STATE/pki/ca.crt" \
  --kubelet-preferred-address-types InternalIP
wait_for 120 "kube-apiserver /readyz" K get --raw /readyz
# The node controller keeps its default grace period (node-monitor-grace-period, 50 s in
# this release): a gateway's failover is timed from the failure, not from NotReady.
start kube-controller-manager - "$CP_DIR/kube-controller-manager" \
  --kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
  --root-ca-file "$STATE/pki/ca.crt" --service-account-private-key-file "$STATE/pki/sa.key" \
  --use-service-account-credentials=true --leader-elect=false \
  --bind-address "$CP_IP" --secure-port 10257
start kube-scheduler - "$CP_DIR/kube-scheduler" --kubeconfig "$STATE/etc/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/etc/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/etc/scheduler.kubeconfig" \
  --leader-elect=false --bind-address "$CP_IP" --secure-port 10259
K apply --server-side -f "$ROOT/config/thirdparty/k8s.cni.cncf.io_network-attachment-definitions.yaml" >/dev/null

# Pods get no resolver: nothing they look up can leave the machine.
printf '# bnerd node world: no resolver, so no lookup leaves this machine\noptions ndots:0\n' >"$STATE/etc/resolv.conf"

# ---------------------------------------------------------------- registry
# Debian's docker-registry (distribution 2.8) on the control plane's address, TLS with the
# world's CA; its storage goes with the world (hack/node/down.sh), so each world's release
# is pushed into an empty registry.
mkdir -p "$STATE/registry-storage"
cat >"$STATE/etc/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $STATE/registry-storage}
  delete: {enabled: true}
http:
  addr: $REGISTRY_ADDR
  tls:
    certificate: $STATE/pki/registry.crt
    key: $STATE/pki/registry.key
EOF
start registry - /usr/bin/docker-registry serve "$STATE/etc/registry.yml"
wait_for 30 "the registry on $REGISTRY_ADDR" curl -fsS --cacert "$STATE/pki/ca.crt" "https://$REGISTRY_ADDR/v2/"
echo "$REGISTRY $STATE/pki/ca.crt" >"$STATE/registry"
# The release, pushed as a provider pushes it: the Go tools trust the world's CA through
# SSL_CERT_FILE.
mkdir -p "$STATE/release"
(cd "$ROOT" && SSL_CERT_FILE=$STATE/pki/ca.crt go run ./hack/images --push "$REGISTRY" pause) >"$STATE/release/pause.txt" ||
  die "pushing the pause image failed"
PAUSE_REF=$(awk '$1=="pause"{print $2}' "$STATE/release/pause.txt")
if ((RELEASE)); then
  log "pushing release $VERSION to $REGISTRY (hack/release.sh: images for $RELEASE_PLATFORMS with SBOMs, the chart)"
  SSL_CERT_FILE=$STATE/pki/ca.crt VERSION=$VERSION REGISTRY=$REGISTRY PLATFORMS=$RELEASE_PLATFORMS \
    RELEASE_PARTS=images,chart DIST=$STATE/release bash "$ROOT/hack/release.sh" >"$STATE/logs/release.log" 2>&1 ||
    { tail -20 "$STATE/logs/release.log" >&2; die "the release failed (log: $STATE/logs/release.log)"; }
  log "release $VERSION pushed: $(awk '{print $1}' "$STATE/release/images.txt" | tr '\n' ' ')and $(awk '{print $2" --version "$3}' "$STATE/release/chart.txt")"
fi

# ---------------------------------------------------------------- nodes
cgroup_root() { # create /bn-node-<n> in every v1 hierarchy (kubelet's cgroupRoot must exist)
  local h
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    # A cgroup v2-only host (this project's machines are v1 hybrid; not exercised here).
    mkdir -p "/sys/fs/cgroup/$1"
    return 0
  fi
  for h in /sys/fs/cgroup/*/; do
    [[ -f $h/cgroup.procs ]] || continue
    [[ $h == */unified/ ]] && continue
    mkdir -p "$h/$1"
    if [[ -f $h/cpuset.cpus ]]; then
      [[ -s $h/$1/cpuset.cpus ]] || cat "$h/cpuset.cpus" >"$h/$1/cpuset.cpus"
      [[ -s $h/$1/cpuset.mems ]] || cat "$h/cpuset.mems" >"$h/$1/cpuset.mems"
    fi
  done
}

start_kubelet() { # n: the node's kubelet, in the node's namespace, with its config
  local n=$1 d=$STATE/node-$1
  start "kubelet-$n" "$(node_ns "$n")" "$CP_DIR/kubelet" --config "$d/kubelet.yaml" \
    --kubeconfig "$STATE/etc/kubelet-$n.kubeconfig" --root-dir "$d/kubelet" \
    --hostname-override "$(node_name "$n")" --node-ip "$(node_ip "$n")" --v 1
}

for n in "${NODES[@]}"; do
  ns=$(node_ns "$n") name=$(node_name "$n") ip=$(node_ip "$n") d=$STATE/node-$n
  mkdir -p "$d"/{cni/bin,cni/net.d,cni/delegates,run,pod-logs}
  for p in bridge host-local loopback host-device static; do ln -sf "$CNI_SYS/$p" "$d/cni/bin/$p"; done
  ln -sf "$MULTUS_BIN" "$d/cni/bin/multus"
  cp "$ADMIN_KC" "$d/multus.kubeconfig"
  # The primary network is inlined as Multus' delegate: with clusterNetwork pointing at a
  # .conflist file, Multus v4.2.2 drops the bridge's ipam ranges on DEL and sandboxes
  # never die.
  delegate=$(printf '{"cniVersion":"1.0.0","name":"bn-pods","plugins":[{"type":"bridge","bridge":"bn-cni0","isGateway":true,"ipMasq":false,"hairpinMode":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"%s"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"%s"}}]}' "$(pod_cidr "$n")" "$d/run/ipam")
  cat >"$d/cni/net.d/00-multus.conf" <<EOF
{"cniVersion":"1.0.0","name":"multus-cni-network","type":"multus",
 "kubeconfig":"$d/multus.kubeconfig","delegates":[$delegate],
 "confDir":"$d/cni/delegates","cniDir":"$d/run/multus","binDir":"$d/cni/bin",
 "logFile":"$STATE/logs/multus-$n.log","logLevel":"error"}
EOF
  # The registry as containerd's hosts configuration names it: pulls go to it over TLS,
  # trusting the world's CA.
  mkdir -p "$d/certs.d/$REGISTRY_ADDR"
  cat >"$d/certs.d/$REGISTRY_ADDR/hosts.toml" <<EOF
server = "https://$REGISTRY_ADDR"

[host."https://$REGISTRY_ADDR"]
  capabilities = ["pull", "resolve"]
  ca = "$STATE/pki/ca.crt"
EOF
  cat >"$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$d/run/containerd.sock"
[ttrpc]
  address = "$d/run/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_REF"
  disable_apparmor = true
  # This machine withholds CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below the
  # daemon's own, and every sandbox would fail without this.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/run/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$d/cni/bin"
    conf_dir = "$d/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$d/certs.d"
EOF
  [[ -f $d/netns.before ]] || { ls /var/run/netns 2>/dev/null || true; } >"$d/netns.before"
  start "containerd-$n" "$ns" containerd --config "$d/containerd.toml"
  wait_for 30 "containerd on node $n" ctr -a "$d/run/containerd.sock" version

  cgroup_root "bn-node-$n"
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /bn-node-$n
failSwapOn: false
containerRuntimeEndpoint: unix://$d/run/containerd.sock
providerID: openstack:///${SERVER[$n]}
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: $d/pod-logs
tlsCertFile: $STATE/pki/kubelet-$n-serving.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-$n-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: AlwaysAllow}
resolvConf: $STATE/etc/resolv.conf
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 5s
EOF
  start_kubelet "$n"
done

# node_ready: the node's Ready condition is True. While waiting, a kubelet that exited
# is started again: on a loaded machine its first CRI handshake can time out before
# containerd's CRI plugin has loaded, and the kubelet exits instead of retrying. Three
# restarts at most; each is logged with the reason the kubelet gave.
node_ready() {
  local n=$1 name; name=$(node_name "$n")
  "$KUBECTL" --kubeconfig "$ADMIN_KC" get node "$name" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}
for n in "${NODES[@]}"; do
  name=$(node_name "$n") restarts=0 deadline=$(( $(date +%s) + 180 ))
  until node_ready "$n"; do
    if ! alive "kubelet-$n"; then
      (( restarts < 3 )) || die "kubelet-$n exited $restarts times; last lines of its log: $(tail -5 "$STATE/logs/kubelet-$n.log" | tr '\n' ' ')"
      log "kubelet-$n exited ($(grep -E '^[EF][0-9]{4}' "$STATE/logs/kubelet-$n.log" | tail -1 | cut -c1-300)); starting it again"
      restarts=$((restarts + 1))
      start_kubelet "$n"
    fi
    if (( $(date +%s) >= deadline )); then
      die "timed out after 180s waiting for node $name Ready: $(K get node "$name" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}; {end}' 2>&1 | cut -c1-600); kubelet log tail: $(grep -E '^[EF][0-9]{4}' "$STATE/logs/kubelet-$n.log" | tail -3 | cut -c1-300 | tr '\n' ' ') (logs in $STATE/logs)"
    fi
    sleep 0.5
  done
done
log "nodes Ready: $(K get nodes -o name | tr '\n' ' ')"

{
  printf 'export KUBECONFIG=%s\n' "$ADMIN_KC"
  printf 'export PATH=%s:$PATH\n' "$CP_DIR"
} >"$STATE/env"
{
  for n in "${NODES[@]}"; do
    printf '%s %s %s %s %s\n' "$(node_name "$n")" "$(node_ns "$n")" "${SERVER[$n]}" "$(node_ip "$n")" "$STATE/node-$n/run/containerd.sock"
  done
} >"$STATE/nodes"
log "ready: source $STATE/env for kubectl; hack/node/down.sh stops it"
