#!/usr/bin/env bash
# run-peer.sh NAME MODE PORT — start a comparison peer in the background, wait
# until its port accepts connections, and print its pid on stdout.
#
#   NAME  gorilla | gws | gobwas | coder   (Go, bench/peers/cmd/peer)
#         tornado                          (Debian python3-tornado, fanout only)
#         node                             (Node's ws; alias: ws, nodews)
#         uws                              (uWebSockets.js, uWS's C++ server under Node)
#   MODE  fanout | echo
#   PORT  TCP port on PEER_HOST (default 127.0.0.1); the route is /core
#
# Environment:
#   PEER_HOST  listen address (default 127.0.0.1)
#   PEER_OUT   where the Go binary and logs go (default <repo>/bench/out/peers)
#   PEER_LOG   the peer's log file (default $PEER_OUT/NAME-MODE-PORT.log)
#   PEER_ARGS  extra flags for the Go peer, e.g. "-queue 8192 -v"
#
# The pid printed is the server process itself (no wrapper), so its CPU time
# can be read from /proc/<pid>/stat. Stop it with: kill <pid>
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -eq 3 ]] || usage
name=$1 mode=$2 port=$3
[[ $mode == fanout || $mode == echo ]] || usage
[[ $port =~ ^[0-9]+$ ]] || usage

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
host=${PEER_HOST:-127.0.0.1}
out=${PEER_OUT:-$here/../out/peers}
mkdir -p "$out"
log=${PEER_LOG:-$out/$name-$mode-$port.log}

die() { echo "run-peer: $*" >&2; exit 1; }

if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
	die "port $host:$port already accepts connections"
fi

case $name in
gorilla | gws | gobwas | coder)
	bin=$out/peer
	(cd "$here" && go build -o "$bin" ./cmd/peer) || die "go build failed"
	# shellcheck disable=SC2086
	"$bin" -lib "$name" -mode "$mode" -addr "$host:$port" -route /core ${PEER_ARGS:-} \
		</dev/null >"$log" 2>&1 &
	;;
tornado)
	[[ $mode == fanout ]] || die "tornado has only the fanout (bus) mode"
	/usr/bin/python3 -c 'import tornado' 2>/dev/null ||
		die "/usr/bin/python3 has no tornado: apt-get install python3-tornado"
	/usr/bin/python3 "$here/tornado_bus.py" "$port" "$host" </dev/null >"$log" 2>&1 &
	;;
node | ws | nodews)
	command -v node >/dev/null || die "node is not installed"
	if [[ ! -d $here/node/node_modules/ws ]]; then
		(cd "$here/node" && npm ci --no-audit --no-fund >&2) || die "npm ci failed"
	fi
	script=ws_bus.js
	[[ $mode == echo ]] && script=ws_echo.js
	node "$here/node/$script" "$port" "$host" /core </dev/null >"$log" 2>&1 &
	;;
uws)
	command -v node >/dev/null || die "node is not installed"
	if [[ ! -d $here/node/node_modules/uwebsockets ]]; then
		(cd "$here/node" && npm ci --no-audit --no-fund >&2) || die "npm ci failed"
	fi
	if ! err=$(cd "$here/node" && node -e 'require("uwebsockets")' 2>&1); then
		die "uWebSockets.js does not load on node $(node --version): $(grep -m1 Error <<<"$err")"
	fi
	script=uws_bus.js
	[[ $mode == echo ]] && script=uws_echo.js
	node "$here/node/$script" "$port" "$host" /core </dev/null >"$log" 2>&1 &
	;;
*)
	usage
	;;
esac
pid=$!

for _ in $(seq 1 200); do # up to 20 s
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$log" >&2
		die "$name exited before accepting on $host:$port"
	fi
	if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
		echo "$pid"
		exit 0
	fi
	sleep 0.1
done
kill "$pid" 2>/dev/null || true
cat "$log" >&2
die "$name did not accept on $host:$port within 20 s"
