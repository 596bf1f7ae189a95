#!/usr/bin/env bash
# Prints the path of a helm CLI, building it first if needed: the Helm version the chart
# tests already use through the SDK (test/chart/go.mod), from the Go module proxy, cached under
# ~/.cache/bnerd-vpn-operator/helm/<version>. Nothing is downloaded from get.helm.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_ROOT=${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}
version=$(awk '$1=="helm.sh/helm/v3"{print $2; exit}' "$ROOT/test/chart/go.mod")
[[ -n $version ]] || { echo "helm.sh: no helm.sh/helm/v3 requirement in test/chart/go.mod" >&2; exit 1; }
bin=$CACHE_ROOT/helm/$version/helm
if [[ ! -x $bin ]]; then
  mkdir -p "$(dirname "$bin")"
  exec 9>"$(dirname "$bin")/.lock"
  flock 9
  if [[ ! -x $bin ]]; then
    echo "helm.sh: building helm $version from the Go module proxy (a few minutes the first time)" >&2
    # Its own throwaway module: the CLI's extra dependencies stay out of test/chart.
    w=$CACHE_ROOT/helm/build
    mkdir -p "$w"
    printf 'module bnerd.net/vpn-operator/helm-build\n\ngo 1.26\n\nrequire helm.sh/helm/v3 %s\n' "$version" >"$w/go.mod"
    printf 'package tools\n\nimport _ "helm.sh/helm/v3/cmd/helm"\n' >"$w/tools.go"
    (cd "$w" && GOFLAGS=-mod=mod go mod tidy >&2 &&
      CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
        -o "$bin.tmp" helm.sh/helm/v3/cmd/helm >&2)
    mv "$bin.tmp" "$bin"
  fi
fi
echo "$bin"
