#!/bin/sh
# Memory of a durable `bloomgate serve` holding one 10 M-item 1 % Bloom
# filter: BF.RESERVE big 0.01 10000000, 10 M BF.ADDs of random items
# (redis-benchmark -P 64 -c 4), then the process's resident set (VmRSS) and
# peak (VmHWM), and the filter's bytes (BF.INFO Size).
#
#   bench/serve-mem.sh [serve flags…]      (e.g. -appendfsync always)
#
# Needs redis-benchmark, redis-cli and go on PATH.
set -eu
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
go build -o "$TMP/bloomgate" ./cmd/bloomgate
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$TMP/bloomgate" serve -resp "127.0.0.1:$PORT" -http "" -data "$TMP/data" "$@" >"$TMP/out" 2>"$TMP/err" &
PID=$!
until grep -q ready "$TMP/out" 2>/dev/null; do sleep 0.1; done
redis-cli -p "$PORT" BF.RESERVE big 0.01 10000000 >/dev/null
redis-benchmark -p "$PORT" -n 10000000 -P 64 -c 4 -r 1000000000 -q BF.ADD big __rand_int__ >/dev/null 2>&1
sleep 2
size=$(redis-cli -p "$PORT" BF.INFO big SIZE | tail -1)
rss=$(awk '/VmRSS/{print $2}' /proc/$PID/status)
hwm=$(awk '/VmHWM/{print $2}' /proc/$PID/status)
awk -v s="$size" -v r="$rss" -v h="$hwm" 'BEGIN{
	printf "filter %.1f MB, RSS %.1f MB (%.2fx the filter), peak %.1f MB; goal 1.3x + 20 MB = %.1f MB\n",
		s/1e6, r*1024/1e6, r*1024/s, h*1024/1e6, 1.3*s/1e6+20 }'
