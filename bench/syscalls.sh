#!/usr/bin/env bash
# bench/syscalls.sh — what a server and the client do per delivery in one
# fan-out burst: system calls counted by `perf stat` (tracepoints) on the
# server process and on the client, beside `ovbus bench`'s own figures, one
# row per run, the targets interleaved (A B A B ...), then the medians.
#
#   bench/syscalls.sh [--repeat N] [--clients M] [--messages N] [--pin CPU]
#                     [--ovbus BIN] [--out FILE] NAME=URL@PID ...
#
#   --repeat N    runs of every target (default 7)
#   --clients M   subscribers (default 5); --messages N: the burst (default 2000)
#   --pin CPU     run the client on this CPU (taskset; default: not pinned)
#   --ovbus BIN   the ovbus binary whose `bench` is the client (default: ovbus on PATH)
#   --out FILE    also write the markdown there
#
# Each run is `ovbus bench --url URL --clients M --messages N --repeat 1`,
# under `perf stat`, while a second `perf stat -p PID` counts the server's
# calls over the same run (connects and the warm-up included: a few dozen
# calls). Columns per delivery: the server's reads (recv included) and
# those that found nothing (EAGAIN and other errors), its writes (writev,
# send, sendto, sendmsg), epoll waits, context switches; the client's
# reads, its read errors, and all its system calls. Needs perf and the
# syscalls tracepoints (root, or perf_event_paranoid ≤ -1).
set -euo pipefail

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
repeat=7 clients=5 messages=2000 pin= ovbus=ovbus out=
targets=()
while (($#)); do
	case $1 in
	--repeat) repeat=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--messages) messages=$2; shift 2 ;;
	--pin) pin=$2; shift 2 ;;
	--ovbus) ovbus=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	-h | --help) usage ;;
	-*) usage ;;
	*=*@*) targets+=("$1"); shift ;;
	*) usage ;;
	esac
done
((${#targets[@]})) || usage
command -v perf >/dev/null || { echo "syscalls.sh: perf is not installed" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
events=syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_write,syscalls:sys_enter_writev
events+=,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_wait
events+=,raw_syscalls:sys_enter,sched:sched_switch
errors=(-e syscalls:sys_exit_read --filter 'ret < 0' -e syscalls:sys_exit_recvfrom --filter 'ret < 0')
client=("$ovbus")
[[ -n $pin ]] && client=(taskset -c "$pin" "$ovbus")

rows=$work/rows.tsv
for ((r = 1; r <= repeat; r++)); do
	for t in "${targets[@]}"; do
		name=${t%%=*} rest=${t#*=}
		url=${rest%@*} pid=${rest##*@}
		perf stat -x, -e "$events" "${errors[@]}" -p "$pid" -o "$work/srv.perf" &
		pp=$!
		sleep 0.3 # perf attached
		perf stat -x, -e "$events" "${errors[@]}" -o "$work/cli.perf" -- "${client[@]}" bench --url "$url" \
			--clients "$clients" --messages "$messages" --repeat 1 --json >"$work/run.json"
		kill -INT "$pp"
		wait "$pp" || true
		python3 - "$name" "$r" "$work" >>"$rows" <<'EOF'
import json, sys
name, run, work = sys.argv[1:4]
def perf(f):
    d = {}
    for line in open(f):
        p = line.strip().split(',')
        if len(p) > 3 and p[0].isdigit():
            k = p[2].split(':')[-1]
            d[k] = d.get(k, 0) + int(p[0])
    return d
s, c = perf(work + '/srv.perf'), perf(work + '/cli.perf')
r = json.load(open(work + '/run.json'))['results'][0]['summary']
g = lambda k: r[k]['median'] if k in r else float('nan')
n = g('delivered')
def calls(d):
    rd = d.get('sys_enter_read', 0) + d.get('sys_enter_recvfrom', 0)
    err = d.get('sys_exit_read', 0) + d.get('sys_exit_recvfrom', 0)
    wr = sum(d.get(k, 0) for k in ('sys_enter_write', 'sys_enter_writev', 'sys_enter_sendto', 'sys_enter_sendmsg'))
    ep = d.get('sys_enter_epoll_pwait', 0) + d.get('sys_enter_epoll_wait', 0)
    return rd / n, err / n, wr / n, ep / n, d.get('sched_switch', 0) / n, d.get('sys_enter', 0) / n
sr, se, sw, sp, ss, sa = calls(s)
cr, ce, _, _, _, ca = calls(c)
print('\t'.join(map(str, [name, run, g('deliveries_per_sec') / 1e6, g('send_ms'), g('latency_p99_ms'),
    g('server_cpu_us_per_delivery'), g('client_cpu_us_per_delivery'), sr, se, sw, sp, ss, sa, cr, ce, ca])))
EOF
		sleep 0.5
	done
done

python3 - "$rows" "$clients" "$messages" >"$work/out.md" <<'EOF'
import statistics, sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
head = ['bus', 'run', 'deliveries/s (M)', 'send ms', 'p99 ms', 'server µs/delivery', 'client µs/delivery',
        'server reads', 'reads EAGAIN', 'server writes', 'epoll waits', 'switches', 'server calls',
        'client reads', 'client read EAGAIN', 'client calls']
fmt = lambda v: f'{float(v):.3f}'
print(f'{sys.argv[2]} subscribers × {sys.argv[3]} messages; every column after the latency is per delivery.\n')
print('| ' + ' | '.join(head) + ' |')
print('|' + '---|' * 2 + '---:|' * (len(head) - 2))
for r in rows:
    print('| ' + ' | '.join(r[:2] + [fmt(v) for v in r[2:]]) + ' |')
print('\nMedians:\n')
print('| ' + ' | '.join(['bus', 'runs'] + head[2:]) + ' |')
print('|' + '---|' * 2 + '---:|' * (len(head) - 2))
for name in dict.fromkeys(r[0] for r in rows):
    mine = [r for r in rows if r[0] == name]
    med = [statistics.median(float(r[i]) for r in mine) for i in range(2, len(head))]
    print('| ' + ' | '.join([name, str(len(mine))] + [fmt(v) for v in med]) + ' |')
EOF
cat "$work/out.md"
[[ -z $out ]] || cp "$work/out.md" "$out"
