#!/bin/sh
# Start of a server holding one 10 M-item 1 % Bloom filter, from its own
# files: a durable `bloomgate serve` (its snapshot, written on shutdown,
# and the log since) and, with REDISBLOOM_MODULE naming a RedisBloom module
# the user already has, a redis-server --loadmodule it loading an RDB
# (SAVE) of the same filter. Each is filled the same way (BF.RESERVE big
# 0.01 10000000, 10 M random BF.ADDs with redis-benchmark -P 64 -c 4) and
# stopped, then bench/cmd/startclock starts it ROUNDS times, alternating
# the two servers, and times exec until the first answer to BF.EXISTS big
# (not an error: a refused connection, redis-server's LOADING). Prints each
# start, the medians and bloomgate / RedisBloom.
#
#   bench/serve-start.sh [ROUNDS]                       (default 5)
#   BLOOMGATE=/path/to/bloomgate bench/serve-start.sh …   (a built binary)
#   REDISBLOOM_MODULE=/path/to/redisbloom.so bench/serve-start.sh …
#
# Needs redis-server (with the module), redis-benchmark, redis-cli and go on
# PATH.
set -eu
ROUNDS=${1:-5}
RB=${REDISBLOOM_MODULE:-}
if [ -n "$RB" ] && [ ! -f "$RB" ]; then
	echo "REDISBLOOM_MODULE=$RB: no such file" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
waitping() { # port
	for i in $(seq 300); do
		redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "no server on port $1" >&2
	exit 1
}
fill() { # port
	redis-cli -p "$1" BF.RESERVE big 0.01 10000000 >/dev/null
	redis-benchmark -p "$1" -n 10000000 -P 64 -c 4 -r 1000000000 -q BF.ADD big __rand_int__ >/dev/null 2>&1
}
BIN=${BLOOMGATE:-}
if [ -z "$BIN" ]; then
	BIN=$TMP/bloomgate
	go build -o "$BIN" ./cmd/bloomgate
fi
(cd bench && go build -o "$TMP/startclock" ./cmd/startclock)

BP=$(freeport)
set -- "$BIN" serve -resp "127.0.0.1:$BP" -http "127.0.0.1:$(freeport)" -data "$TMP/bg"
"$@" >"$TMP/bg.out" 2>&1 &
PID=$!
waitping "$BP"
fill "$BP"
kill "$PID" && wait "$PID" || true # SIGTERM: a snapshot, then exit
PID=
BG="$*"

RBG=
if [ -n "$RB" ]; then
	RP=$(freeport)
	mkdir "$TMP/rb"
	set -- redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/rb" \
		--dbfilename dump.rdb --logfile "$TMP/rb.log" --loadmodule "$RB"
	"$@" &
	PID=$!
	waitping "$RP"
	fill "$RP"
	redis-cli -p "$RP" SAVE >/dev/null
	redis-cli -p "$RP" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
	wait "$PID" || true
	PID=
	RBG="$*"
	ls -l "$TMP/rb/dump.rdb" | awk '{printf "RedisBloom RDB: %.1f MB\n", $5/1e6}'
fi
du -sb "$TMP/bg" | awk '{printf "bloomgate data directory: %.1f MB\n", $1/1e6}'

for r in $(seq "$ROUNDS"); do
	# shellcheck disable=SC2086
	"$TMP/startclock" -addr "127.0.0.1:$BP" -n 1 -- $BG | sed "s/^start 1:/bloomgate $r:/" | grep -v median
	if [ -n "$RBG" ]; then
		# shellcheck disable=SC2086
		"$TMP/startclock" -addr "127.0.0.1:$RP" -n 1 -- $RBG | sed "s/^start 1:/RedisBloom $r:/" | grep -v median
	fi
done | tee "$TMP/starts"
python3 - "$TMP/starts" <<'PY'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    name, _, ms, _ = line.split()
    v.setdefault(name, []).append(float(ms))
m = {k: statistics.median(x) for k, x in v.items()}
for k, x in m.items():
    print(f"{k} median {x:.1f} ms")
if "RedisBloom" in m:
    print(f"bloomgate / RedisBloom: {m['bloomgate'] / m['RedisBloom']:.2f}")
PY
