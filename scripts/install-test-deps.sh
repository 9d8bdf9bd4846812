#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine: the third-party
# WebSocket peers of the interop tests (Python's websockets, autobahn and
# websocket-client, Tornado for the reference bus, wsproto for the protocol
# benchmark), Chromium for the browser test, and the Node packages of the
# Node peers (bench/peers/node, interop/node). Packages already present are
# not downloaded again.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(python3 python3-websockets python3-autobahn python3-websocket python3-tornado python3-wsproto chromium nodejs)
missing=()
for p in "${debs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Debian packages npm apart from nodejs (NodeSource's nodejs bundles it).
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f bench/peers/node/package-lock.json ] && [ ! -d bench/peers/node/node_modules ]; then
  echo "installing Node packages of bench/peers/node"
  (cd bench/peers/node && npm ci --no-audit --no-fund --loglevel=error)
fi

# The Node ws peer of the interop tests (interop/, a nested module).
if [ -f interop/node/package-lock.json ] && [ ! -d interop/node/node_modules ]; then
  echo "installing Node packages of interop/node"
  (cd interop/node && npm ci --no-audit --no-fund --loglevel=error)
fi
