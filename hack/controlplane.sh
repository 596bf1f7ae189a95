#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests and the sandbox run (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl) and etcd, from the Go module proxy, into a
# per-version cache outside the work tree so that a fresh clone on the same machine reuses
# them. Prints the directory holding the binaries.
#
# Each binary is built as a dependency of a throwaway module generated here: neither
# `go install pkg@version` nor the operator's own module can build them, because
# k8s.io/kubernetes carries replace directives for its staging modules.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}"
BIN_DIR="$CACHE_ROOT/controlplane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

log() { printf 'controlplane: %s\n' "$*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$BIN_DIR"
  exit 0
fi

K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
complete() {
  local c
  for c in etcd "${K8S_CMDS[@]}"; do [[ -x "$BIN_DIR/$c" ]] || return 1; done
}
if complete; then
  echo "$BIN_DIR"
  exit 0
fi
# One build at a time: two concurrent callers (make test's jobs, a sandbox) would both
# spend ten minutes compiling the same thing.
mkdir -p "$CACHE_ROOT/controlplane"
exec 9>"$CACHE_ROOT/controlplane/.lock"
flock 9
if complete; then
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$BIN_DIR"
work="$CACHE_ROOT/controlplane/build"
mkdir -p "$work/etcd" "$work/k8s"
export GOFLAGS=-mod=mod
export CGO_ENABLED=0

if [[ ! -x "$BIN_DIR/etcd" ]]; then
  log "building etcd $ETCD_VERSION (about 1.5 minutes the first time)"
  cat >"$work/etcd/go.mod" <<MOD
module bnerd.net/vpn-operator/controlplane-etcd

go 1.26

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION
MOD
  printf 'package tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$work/etcd/tools.go"
  (cd "$work/etcd" && go mod tidy >&2 && go build -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3 >&2)
  mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
fi

want=()
for c in "${K8S_CMDS[@]}"; do [[ -x "$BIN_DIR/$c" ]] || want+=("$c"); done
if ((${#want[@]})); then
  log "building ${want[*]} $K8S_VERSION in one go build (about 15 minutes on two idle cores the first time)"
  modfile=$(cd "$work/k8s" && GOFLAGS= go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    printf 'module bnerd.net/vpn-operator/controlplane-k8s\n\ngo 1.26\n\nrequire k8s.io/kubernetes v%s\n\n' "$K8S_VERSION"
    # One replace per staging module, derived from kubernetes' own go.mod.
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$modfile" |
      while read -r m; do printf 'replace %s => %s v0.%s\n' "$m" "$m" "${K8S_VERSION#1.}"; done
  } >"$work/k8s/go.mod"
  {
    printf 'package tools\n\nimport (\n'
    for c in "${K8S_CMDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } >"$work/k8s/tools.go"
  (cd "$work/k8s" && go mod tidy >&2)
  # Without the version stamp a node reports kubeletVersion v0.0.0-master.
  v=k8s.io/component-base/version minor=${K8S_VERSION#1.}
  minor=${minor%%.*}
  ldflags="-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  tmp="$work/out"
  rm -rf "$tmp" && mkdir -p "$tmp"
  pkgs=()
  for c in "${want[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  (cd "$work/k8s" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}" >&2)
  for c in "${want[@]}"; do mv "$tmp/$c" "$BIN_DIR/$c"; done
fi

echo "$BIN_DIR"
