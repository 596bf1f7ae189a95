# shellcheck shell=bash
# Sourced by the set-up scripts that install Debian packages on the host (install-deps.sh,
# node/up.sh, vm/image.sh, vm/libreswan.sh, openstack.sh, openstack-rootfs.sh).
#
# `make test` runs several of them at once (the 2025.1 OpenStack's preparation in the
# background beside the dataplane packages, the two OpenStacks' installs side by side), and
# on a fresh machine a second apt-get failed on the first one's dpkg lock ("Could not get
# lock /var/lib/dpkg/lock-frontend"). So every install here takes one lock of its own first,
# and apt-get also waits for dpkg's locks (someone else's apt), instead of failing.

# apt_install PKG...: installs the packages with no recommends and no service started by
# their maintainer scripts (rabbitmq-server and docker-registry would start their own; the
# project starts what it runs itself). The package lists are refreshed only when the
# install fails without it, so a machine whose lists are current makes no index download.
apt_install() {
	mkdir -p /run/lock
	(
		flock -w 3600 9 || { echo "apt_install: another install held the lock for an hour" >&2; exit 1; }
		export DEBIAN_FRONTEND=noninteractive
		local created=0 rc=0
		if [ ! -e /usr/sbin/policy-rc.d ]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
			chmod +x /usr/sbin/policy-rc.d
			created=1
		fi
		apt-get -o DPkg::Lock::Timeout=1200 install -y -qq --no-install-recommends "$@" >&2 ||
			{ apt-get -o DPkg::Lock::Timeout=1200 update -qq >&2 &&
				apt-get -o DPkg::Lock::Timeout=1200 install -y -qq --no-install-recommends "$@" >&2; } || rc=$?
		[ "$created" = 1 ] && rm -f /usr/sbin/policy-rc.d
		exit "$rc"
	) 9>/run/lock/bnerd-vpn-operator-apt.lock
}
