#!/usr/bin/env bash
# Prints the path of a pinned release tool, built the first time with `go install` from
# the Go module proxy (the tool's own go.mod, verified against the checksum database) and
# cached by version under ~/.cache/bnerd-vpn-operator/tools.
#
#   bash hack/tool.sh goreleaser|syft
set -euo pipefail
CACHE_ROOT=${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}
case ${1:-} in
  # GoReleaser 2.17 is the newest that builds with Go 1.26 (2.18 needs 1.27).
  goreleaser) pkg=github.com/goreleaser/goreleaser/v2 version=v2.17.0 bin=goreleaser ;;
  syft) pkg=github.com/anchore/syft/cmd/syft version=v1.57.2 bin=syft ;;
  *) echo "usage: hack/tool.sh goreleaser|syft" >&2; exit 2 ;;
esac
dir=$CACHE_ROOT/tools/$1-$version
if [[ ! -x $dir/$bin ]]; then
  mkdir -p "$CACHE_ROOT/tools"
  exec 9>"$CACHE_ROOT/tools/.lock"
  flock 9
  if [[ ! -x $dir/$bin ]]; then
    echo "tool: building $1 $version from the Go module proxy (minutes the first time)" >&2
    t0=$(date +%s)
    rm -rf "$dir.tmp"
    GOBIN=$dir.tmp GOFLAGS= go install "$pkg@$version" >&2
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    echo "tool: $1 $version built in $(( $(date +%s) - t0 ))s" >&2
  fi
fi
echo "$dir/$bin"
