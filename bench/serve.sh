#!/bin/sh
# Throughput of `bloomgate serve` against a private redis-server, in one
# interleaved run: redis-benchmark sends GET to redis-server and BF.EXISTS
# to bloomgate (a durable server, appendfsync everysec, one 1 M-item 1 %
# Bloom filter), unpipelined and at -P 16, -c 50, ROUNDS times alternating,
# and prints each figure and the ratio bloomgate / redis-server.
#
#   bench/serve.sh [ROUNDS] [REQUESTS]      (defaults 3 and 500000)
#   REDISBLOOM_MODULE=/path/to/redisbloom.so bench/serve.sh …
#
# With REDISBLOOM_MODULE naming a RedisBloom module the user already has, a
# third server (redis-server --loadmodule it, no persistence) gets the same
# filter and the same BF.ADDs, its BF.EXISTS is measured in each round right
# after bloomgate's, and the ratios bloomgate / RedisBloom are printed too.
#
# Needs redis-server, redis-benchmark, redis-cli and go on PATH. The servers
# listen on free loopback ports and are stopped on exit. The machine's other
# load shows in the figures: compare the ratios, which come from the same
# minutes.
set -eu
ROUNDS=${1:-3}
N=${2:-500000}
RB=${REDISBLOOM_MODULE:-}
if [ -n "$RB" ] && [ ! -f "$RB" ]; then
	echo "REDISBLOOM_MODULE=$RB: no such file" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
REDIS_PID= BG_PID= RB_PID=
cleanup() {
	[ -n "$BG_PID" ] && kill "$BG_PID" 2>/dev/null && wait "$BG_PID" 2>/dev/null || true
	[ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
	[ -n "$RB_PID" ] && kill "$RB_PID" 2>/dev/null && wait "$RB_PID" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fill() { # port: one 1 M-item 1 % filter, 1 M random adds
	redis-cli -p "$1" BF.RESERVE bf 0.01 1000000 >/dev/null
	redis-benchmark -p "$1" -n 1000000 -P 64 -c 4 -r 1000000 -q BF.ADD bf __rand_int__ >/dev/null 2>&1
}

go build -o "$TMP/bloomgate" ./cmd/bloomgate
RP=$(freeport)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" --logfile "$TMP/redis.log" &
REDIS_PID=$!
BP=$(freeport)
"$TMP/bloomgate" serve -resp "127.0.0.1:$BP" -http "" -data "$TMP/data" -appendfsync everysec >"$TMP/bg.out" 2>"$TMP/bg.err" &
BG_PID=$!
if [ -n "$RB" ]; then
	RBP=$(freeport)
	mkdir "$TMP/rb"
	redis-server --port "$RBP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/rb" --logfile "$TMP/rb.log" --loadmodule "$RB" &
	RB_PID=$!
fi
for i in $(seq 100); do
	grep -q ready "$TMP/bg.out" 2>/dev/null && redis-cli -p "$RP" PING >/dev/null 2>&1 &&
		{ [ -z "$RB" ] || redis-cli -p "$RBP" PING >/dev/null 2>&1; } && break
	sleep 0.1
done
redis-cli -p "$RP" SET foo bar >/dev/null
fill "$BP"
if [ -n "$RB" ]; then
	if ! redis-cli -p "$RBP" MODULE LIST | grep -qx bf; then
		echo "redis-server did not load $RB:" >&2
		tail -5 "$TMP/rb.log" >&2
		exit 1
	fi
	fill "$RBP"
fi

rps() { # port pipeline command…
	port=$1 p=$2; shift 2
	redis-benchmark -p "$port" -n "$N" -c 50 -P "$p" -r 1000000 --csv "$@" 2>/dev/null | tail -1 | awk -F'"' '{print $4}'
}
ratio() { awk "BEGIN{printf \"%.2f\", $1/$2}"; }
if [ -z "$RB" ]; then
	echo "round pipeline redis_GET bloomgate_BF.EXISTS ratio"
else
	echo "round pipeline redis_GET bloomgate_BF.EXISTS redisbloom_BF.EXISTS bloomgate/GET bloomgate/redisbloom"
fi
for r in $(seq "$ROUNDS"); do
	for p in 1 16; do
		g=$(rps "$RP" "$p" GET foo)
		b=$(rps "$BP" "$p" BF.EXISTS bf __rand_int__)
		if [ -z "$RB" ]; then
			echo "$r $p $g $b $(ratio "$b" "$g")"
		else
			x=$(rps "$RBP" "$p" BF.EXISTS bf __rand_int__)
			echo "$r $p $g $b $x $(ratio "$b" "$g") $(ratio "$b" "$x")"
		fi
	done
done
