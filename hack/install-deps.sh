#!/usr/bin/env bash
# Installs the Debian packages the dataplane tests use (strongSwan with kernel-libipsec,
# nftables, iproute2, tcpdump, iperf3, ...; shellcheck for the workflow lint). Idempotent:
# packages already installed are not touched, and apt is only consulted when something is
# missing.
set -euo pipefail

pkgs=(strongswan-swanctl strongswan-charon charon-systemd libcharon-extra-plugins
      libstrongswan-extra-plugins libstrongswan-standard-plugins nftables iptables iproute2 tcpdump iperf3 curl openssl
      iputils-ping wireguard-tools wireguard-go shellcheck conntrack)

if [[ $(id -u) != 0 ]]; then
  echo "install-deps: not root; the dataplane tests will skip (they need root and: ${pkgs[*]})" >&2
  exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
# shellcheck source=hack/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
apt_install "${missing[@]}"
