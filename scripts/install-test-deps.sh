#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine: the third-party
# WebSocket peers of the interop tests (Python's websockets, autobahn and
# websocket-client, Tornado for the reference bus, wsproto for the protocol
# benchmark), Chromium for the browser test, systemd for systemd-analyze (the
# check of the units in deploy/systemd), and the Node packages of the Node
# peers (bench/peers/node, interop/node). Packages already present are not
# downloaded again.
#
# When another apt or dpkg holds the package lock (an unattended upgrade, a
# parallel install), apt-get waits up to 10 minutes for it instead of failing.
# The output of apt-get and npm goes to a log file (DEPS_LOG, default
# $TMPDIR/ovbus-test-deps.log) and is printed only when a step fails, so that
# the test output shows one line per install at most.
set -euo pipefail
cd "$(dirname "$0")/.."

log="${DEPS_LOG:-${TMPDIR:-/tmp}/ovbus-test-deps.log}"
: >"$log"

# quiet runs a command with its output in the log; on failure it prints the log and fails.
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    echo "install-test-deps: failed: $*" >&2
    cat "$log" >&2
    exit 1
  fi
}

debs=(python3 python3-websockets python3-autobahn python3-websocket python3-tornado python3-wsproto chromium nodejs systemd)
missing=()
for p in "${debs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Debian packages npm apart from nodejs (NodeSource's nodejs bundles it).
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]} (log: $log)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  lock=(-o DPkg::Lock::Timeout=600)
  quiet $SUDO apt-get "${lock[@]}" update -q
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi

for dir in bench/peers/node interop/node; do
  if [ -f "$dir/package-lock.json" ] && [ ! -d "$dir/node_modules" ]; then
    echo "installing Node packages of $dir (log: $log)"
    quiet sh -c "cd '$dir' && npm ci --no-audit --no-fund --loglevel=error"
  fi
done
