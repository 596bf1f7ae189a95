#!/usr/bin/env bash
# make release: one release of bnerd-vpn-operator, pushed to any OCI registry.
#
#   VERSION=0.2.0 REGISTRY=registry.example.com/team bash hack/release.sh
#
# produces, in order:
#   images  the operator, gateway, gateway-wireguard and status-agent images for every
#           platform in PLATFORMS (default linux/amd64,linux/arm64), as OCI image indexes
#           tagged v$VERSION at $REGISTRY/bnerd-vpn-<name>, each platform image with its
#           SPDX SBOM (syft) attached as an OCI referrer (hack/images);
#   chart   the Helm chart, version $VERSION and appVersion v$VERSION, its image defaults
#           moved to $REGISTRY, pushed to oci://$REGISTRY/charts/bnerd-vpn-operator with
#           the Helm SDK's registry client (test/chart/cmd/chart-push);
#   plugin  kubectl-vpn for linux and darwin on amd64 and arm64: tar.gz archives,
#           checksums.txt and the krew manifest (GoReleaser, .goreleaser.yaml), in
#           $DIST/kubectl-vpn.
# RELEASE_PARTS (default images,chart,plugin) selects some of them. What was pushed is
# listed in $DIST (default ./dist): images.txt, chart.txt.
#
# Credentials are the registry client's: `docker login` (or any Docker config, also
# through DOCKER_CONFIG) serves both the images and the chart; a registry behind a private
# CA is trusted with SSL_CERT_FILE. Making the Debian roots needs root and debootstrap,
# and for another architecture than this machine's Debian's qemu-user-static
# (hack/images). Everything is cached by content under ~/.cache/bnerd-vpn-operator.
#
#   bash hack/release.sh --dev-version   prints 0.0.0-dev.g<12 hex>, a version named by
#                                        the work tree's content (the local world's)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ ${1:-} == --dev-version ]]; then
  # Every file git would see (tracked, and untracked but not ignored), by content.
  sum=$(git ls-files -z -c -o --exclude-standard |
    while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
    sort -z | xargs -0 sha256sum | sha256sum)
  echo "0.0.0-dev.g${sum:0:12}"
  exit 0
fi

t_start=$(date +%s%N)
log() { printf '[release %6.1fs] %s\n' "$(( ($(date +%s%N) - t_start) / 1000000 ))e-3" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

VERSION=${VERSION:-}
REGISTRY=${REGISTRY:-}
[[ -n $VERSION ]] || die "VERSION is required (make release VERSION=0.2.0 REGISTRY=registry.example.com/team)"
[[ -n $REGISTRY ]] || die "REGISTRY is required: the registry and prefix to push to (registry.example.com/team)"
V=${VERSION#v}
[[ $V =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION $VERSION is not MAJOR.MINOR.PATCH[-PRERELEASE]"
REGISTRY=${REGISTRY%/}
REGISTRY=${REGISTRY#oci://}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
DIST=${DIST:-$ROOT/dist}
RELEASE_PARTS=${RELEASE_PARTS:-images,chart,plugin}
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
part() { [[ ,$RELEASE_PARTS, == *,$1,* ]]; }

log "release v$V to $REGISTRY (${RELEASE_PARTS}; images for $PLATFORMS) into $DIST"
if part images; then
  syft=$(bash hack/tool.sh syft)
  go run ./hack/images --platforms "$PLATFORMS" --version "$V" --push "$REGISTRY" \
    --sbom --syft "$syft" --out "$DIST/images.txt" >/dev/null
  while read -r name ref digest; do log "image $name: $ref@$digest"; done <"$DIST/images.txt"
fi
if part chart; then
  (cd test/chart && GOFLAGS=-mod=readonly go run ./cmd/chart-push --chart "$ROOT/charts/bnerd-vpn-operator" \
    --version "$V" --images "$REGISTRY" --push "oci://$REGISTRY/charts" \
    --package-dir "$DIST/chart" --out "$DIST/chart.txt") >/dev/null
  read -r _ ref version digest <"$DIST/chart.txt"
  log "chart: $ref --version $version ($digest)"
fi
if part plugin; then
  goreleaser=$(bash hack/tool.sh goreleaser)
  cfg=$(mktemp)
  trap 'rm -f "$cfg"' EXIT
  # GoReleaser's dist directory is fixed in its config: this run's goes last.
  { cat .goreleaser.yaml; printf '\ndist: %s\n' "$DIST/kubectl-vpn"; } >"$cfg"
  RELEASE_VERSION=$V GOFLAGS=-mod=readonly "$goreleaser" release --snapshot --clean --config "$cfg" >"$DIST/goreleaser.log" 2>&1 ||
    { tail -30 "$DIST/goreleaser.log" >&2; die "goreleaser failed (log: $DIST/goreleaser.log)"; }
  log "kubectl-vpn: $(cd "$DIST/kubectl-vpn" && ls -1 ./*.tar.gz checksums.txt krew/vpn.yaml | tr '\n' ' ')"
fi
log "done"
