#!/bin/sh
# Install Debian's chromium for the report's rendering test (tests/integration/test_report_render.py).
# Idempotent and quiet: does nothing when chromium is already there; prints apt's log only on failure.
set -eu

PACKAGES="chromium fonts-dejavu-core"

missing=""
for pkg in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing="$missing $pkg"
    fi
done
[ -n "$missing" ] || exit 0

if [ "$(id -u)" != 0 ]; then
    echo "tests/browser/install.sh: must run as root to install:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
# shellcheck disable=SC2086
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "tests/browser/install.sh: installing$missing failed" >&2
    rm -f "$log"
    exit 1
fi
rm -f "$log"
