#!/bin/sh
# Install what the GPU node simulator needs on a Debian controller:
# OpenSSH server (one sshd per simulated node), real Slurm and munge,
# iproute2 and util-linux (unshare, nsenter, mount).
# Idempotent and quiet: does nothing when every package is already there.
set -eu

PACKAGES="openssh-server openssh-client slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux procps"

missing=""
for pkg in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing="$missing $pkg"
    fi
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps.sh: must run as root to install:$missing" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d keeps the packages' own services (sshd, munge, slurmd) from starting:
    # the simulator starts its own copies with its own configuration.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    log=$(mktemp)
    # shellcheck disable=SC2086
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "install-deps.sh: installing$missing failed" >&2
        rm -f "$log"
        [ "$made_policy" = 0 ] || rm -f "$policy"
        exit 1
    fi
    rm -f "$log"
    if [ "$made_policy" = 1 ]; then
        rm -f "$policy"
    fi
fi
