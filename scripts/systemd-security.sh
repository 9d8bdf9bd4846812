#!/usr/bin/env bash
# Rates the systemd units of deploy/systemd with `systemd-analyze security` (offline: nothing is
# started), as cmd/ovbus's TestSystemdUnits does: each scope's ovbus.service, and the drop-in
# laid over the model of ovos-installer's ovos-messagebus.service in cmd/ovbus/testdata. With a
# commit as argument it rates that commit's deploy/ovbus.service too (the unit before the scopes).
# Prints the commit, the systemd version and one line per unit; the full reports follow.
#   scripts/systemd-security.sh [BEFORE_COMMIT] > bench/results/systemd-security-DATE.txt
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_RUNTIME_DIR="$tmp/run" SYSTEMD_COLORS=0
mkdir -m700 "$XDG_RUNTIME_DIR"

echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (dirty tree)')"
echo "systemd-analyze: $(systemd-analyze --version | head -1)"
echo "command: scripts/systemd-security.sh $*"

rate() { # rate LABEL SCOPE FILE
  local flags=(security --offline=true --no-pager)
  [ "$2" = user ] && flags=(--user "${flags[@]}")
  systemd-analyze "${flags[@]}" "$3" >"$tmp/report" 2>&1 || true
  printf '%-76s %s\n' "$1" "$(grep -o 'Overall exposure level.*' "$tmp/report" | sed 's/^Overall exposure level for [^:]*: //')"
  { echo; echo "== $1"; cat "$tmp/report"; } >>"$tmp/all"
}

: >"$tmp/all"
if [ $# -ge 1 ]; then
  mkdir -p "$tmp/before"
  git show "$1:deploy/ovbus.service" >"$tmp/before/ovbus.service"
  rate "before ($1) deploy/ovbus.service, user scope" user "$tmp/before/ovbus.service"
  rate "before ($1) deploy/ovbus.service, rated as a system unit" system "$tmp/before/ovbus.service"
fi
for scope in user system; do
  mkdir -p "$tmp/$scope"
  cp "deploy/systemd/$scope/ovbus.service" "$tmp/$scope/ovbus.service"
  # A drop-in's settings follow the unit's: appended, they are what systemd runs.
  { cat "cmd/ovbus/testdata/ovos-installer/$scope/ovos-messagebus.service"; echo; \
    cat "deploy/systemd/$scope/ovos-messagebus.service.d/ovbus.conf"; } >"$tmp/$scope/ovos-messagebus.service"
  rate "deploy/systemd/$scope/ovbus.service" "$scope" "$tmp/$scope/ovbus.service"
  rate "deploy/systemd/$scope/ovos-messagebus.service.d over ovos-installer's unit" "$scope" "$tmp/$scope/ovos-messagebus.service"
  cp "cmd/ovbus/testdata/ovos-installer/$scope/ovos-messagebus.service" "$tmp/$scope/installer.service"
  rate "ovos-installer's unit alone (model), $scope scope" "$scope" "$tmp/$scope/installer.service"
done
cat "$tmp/all"
