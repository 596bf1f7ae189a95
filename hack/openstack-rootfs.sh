#!/usr/bin/env bash
# The Debian root file system a newer OpenStack release runs from, for hack/openstack.sh
# (which sources this file): Debian 13 (trixie) with the OpenStack 2025.1 packages, built
# once with debootstrap and apt-get and kept under
# ~/.cache/bnerd-vpn-operator/openstack/rootfs-<suite>-<recipe hash>/ (BNERD_CACHE moves
# the cache root). The services later run in it with chroot, each in a private mount
# namespace that binds the run's state directory to /srv/state (see inroot).
#
#   bash hack/openstack-rootfs.sh [SUITE]   build if missing, print the directory
#
# The directory holds root/ (the file system) and manifest (the versions installed,
# build time, size). The recipe hash covers the package list and the functions that
# build the root, so a change to either makes a new root; older roots of the suite are
# removed after a build. debootstrap's packages are kept in debs-<suite>/ beside it, so a
# rebuild downloads only the OpenStack packages again.
# No maintainer script may start a daemon: a policy-rc.d refuses every start.

ROOTFS_REV=1
# What the OpenStack services of hack/openstack.sh need in the root: the python libraries
# and their entry points, uwsgi, sqlite, RabbitMQ for Nova's RPC, and the tools the
# services call (procps for pid checks, iproute2 and sudo which neutron's and nova's
# privsep helpers expect to find).
rootfs_packages() {
	echo "python3-keystone python3-neutron python3-nova python3-placement python3-glance
uwsgi-core uwsgi-plugin-python3 sqlite3 rabbitmq-server procps iproute2 sudo ca-certificates"
}

rootfs_log() { printf '[openstack-rootfs %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

rootfs_cache_root() { echo "${BNERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bnerd-vpn-operator}/openstack"; }

# rootfs_dir SUITE: where the root of SUITE is (or will be) kept.
rootfs_dir() {
	local suite=$1 key
	key=$({
		echo "rev=$ROOTFS_REV suite=$suite"
		rootfs_packages
		declare -f rootfs_build rootfs_mounts
	} | sha256sum | cut -c1-12)
	echo "$(rootfs_cache_root)/rootfs-$suite-$key"
}

# rootfs_mirror: the Debian mirror apt already uses (deb822 or one-line sources).
rootfs_mirror() {
	if [ -n "${BNERD_DEBIAN_MIRROR:-}" ]; then
		echo "${BNERD_DEBIAN_MIRROR%/}"
		return
	fi
	local m=""
	if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
		m=$(awk 'BEGIN { RS = ""; FS = "\n" } {
			t = ""; u = ""; c = ""; e = "yes"
			for (i = 1; i <= NF; i++) {
				l = $i
				if (l ~ /^Types:/) t = " " l " "
				if (l ~ /^URIs:/) { u = l; sub(/^URIs:[ \t]*/, "", u) }
				if (l ~ /^Components:/) c = " " l " "
				if (l ~ /^Enabled:/) { e = tolower(l); sub(/^enabled:[ \t]*/, "", e) }
			}
			if (e != "no" && t ~ /[ \t]deb[ \t]/ && c ~ /[ \t]main[ \t]/ && u ~ /\/debian\/?$/) { split(u, a, /[ \t]+/); print a[1]; exit }
		}' /etc/apt/sources.list.d/*.sources)
	fi
	if [ -z "$m" ]; then
		m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | sed -e 's/#.*//' -e 's/\[[^]]*\]//' |
			awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }')
	fi
	m=${m:-http://deb.debian.org/debian}
	echo "${m%/}"
}

# rootfs_mounts ROOT: make /dev and /proc of the host visible in ROOT. Only ever called
# inside a private mount namespace (unshare -m), so nothing leaks into the host's.
rootfs_mounts() {
	mount --rbind /dev "$1/dev"
	mount --rbind /proc "$1/proc"
	mount --rbind /sys "$1/sys"
}

# rootfs_build SUITE OUT: debootstrap, then the packages, into OUT.tmp, renamed to OUT.
rootfs_build() {
	local suite=$1 out=$2 mirror debs t0 root log
	mirror=$(rootfs_mirror)
	debs="$(rootfs_cache_root)/debs-$suite"
	rm -rf "$out.tmp"
	mkdir -p "$out.tmp/root" "$debs/archives/partial"
	root=$out.tmp/root
	log=$out.tmp/build.log
	t0=$SECONDS
	rootfs_log "debootstrap $suite (minbase) from $mirror into $out (about 2 minutes)"
	debootstrap --variant=minbase --components=main --cache-dir="$debs/archives" "$suite" "$root" "$mirror" >"$log" 2>&1 ||
		{
			tail -n 30 "$log" >&2
			return 1
		}
	local t_boot=$((SECONDS - t0))
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
	local security=${mirror%/debian}/debian-security
	printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
		"$mirror" "$suite" "$mirror" "$suite" "$security" "$suite" >"$root/etc/apt/sources.list"
	# No documentation, no translations: a smaller root and a quicker install.
	cat >"$root/etc/dpkg/dpkg.cfg.d/01-bnerd-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
	rootfs_log "installing the OpenStack packages (several minutes)"
	# shellcheck disable=SC2046
	if ! unshare -m --propagation private bash -c "$(declare -f rootfs_mounts)"'
		set -e
		r=$1
		rootfs_mounts "$r"
		mount --bind "$2" "$r/var/cache/apt/archives"
		shift 2
		export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
		chroot "$r" apt-get -qq update
		chroot "$r" apt-get install -y -qq --no-install-recommends "$@"
		chroot "$r" apt-get -qq clean' _ "$root" "$debs/archives" $(rootfs_packages) >>"$log" 2>&1; then
		tail -n 30 "$log" >&2
		return 1
	fi
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/log/apt/*
	mkdir -p "$root/srv/state"
	{
		echo "suite=$suite mirror=$mirror"
		echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) debootstrap=${t_boot}s total=$((SECONDS - t0))s"
		echo "size=$(du -sh "$root" | cut -f1)"
		chroot "$root" dpkg-query -W -f='${Package}=${Version}\n' python3-keystone python3-neutron python3-nova \
			python3-placement python3-glance python3-neutron-lib python3-oslo.policy uwsgi-core rabbitmq-server
	} >"$out.tmp/manifest"
	mv "$out.tmp" "$out"
	rootfs_log "root file system built in $((SECONDS - t0))s: $out"
	# Older roots of this suite are of no further use.
	local old
	for old in "$(rootfs_cache_root)/rootfs-$suite-"*; do
		[ "$old" = "$out" ] || case "$old" in *.tmp) ;; *) rm -rf "$old" ;; esac
	done
}

# ensure_rootfs SUITE: the root's directory, built once under a lock. Needs root.
ensure_rootfs() {
	local suite=$1 out
	out=$(rootfs_dir "$suite")
	if [ -f "$out/manifest" ]; then
		echo "$out"
		return 0
	fi
	[ "$(id -u)" = 0 ] || {
		rootfs_log "building the $suite root needs root (debootstrap, chroot)"
		return 1
	}
	command -v debootstrap >/dev/null || {
		rootfs_log "installing debootstrap"
		apt_install debootstrap
	}
	mkdir -p "$(rootfs_cache_root)"
	(
		flock 7
		[ -f "$out/manifest" ] || rootfs_build "$suite" "$out"
	) 7>"$(rootfs_cache_root)/.rootfs-$suite.lock" || return 1
	echo "$out"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	ensure_rootfs "${1:-trixie}"
fi
