#!/usr/bin/env bash
# cluster-faults.sh [N]: the cluster's fault suite (e2e TestClusterFaults,
# TestClusterStartFirst and TestClusterPartialLink: three `ovbus serve`
# processes, built with the race detector, under SIGKILL, SIGSTOP, cut routes
# and a late start, in both orders) N times in a row (default 20) beside two
# busy loops, by scripts/stress.sh.
exec "$(dirname "$0")/stress.sh" "${1:-20}" go test -race -count=1 -timeout 20m \
  -run '^(TestClusterFaults|TestClusterStartFirst|TestClusterPartialLink)$' -v ./e2e/
