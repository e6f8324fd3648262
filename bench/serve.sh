#!/bin/sh
# Throughput and CPU cost of `bloomgate serve` against a private
# redis-server, in one interleaved run: redis-benchmark sends GET and SET to
# redis-server and BF.EXISTS and BF.ADD to bloomgate (a durable server,
# appendfsync everysec), unpipelined and at -P 16, -c 50, ROUNDS times
# alternating. Each line gives the requests per second and the server
# process's CPU time per request (utime + stime from /proc/PID/stat, before
# and after), and the ratios bloomgate / redis-server: BF.EXISTS / GET and
# BF.ADD / SET for throughput, and the same pairs for CPU (below 1 is
# cheaper). CPU time per request does not depend on the machine's other load
# the way requests per second do.
#
#   bench/serve.sh [ROUNDS] [REQUESTS]      (defaults 5 and 500000)
#   BLOOMGATE=/path/to/bloomgate bench/serve.sh …   (a built binary, instead
#                                                    of building ./cmd/bloomgate
#                                                    statically, as deploy/build.sh)
#   REDISBLOOM_MODULE=/path/to/redisbloom.so bench/serve.sh …
#   RESPFLOOR=1 bench/serve.sh …       (or RESPFLOOR=loop)
#
# BF.EXISTS asks for random items of a 1 M-item 1 % filter holding 1 M
# random adds (from the same million); BF.ADD adds random items from a
# billion to a filter reserved for 100 M, so nearly every add is new and
# logged. With REDISBLOOM_MODULE naming a RedisBloom module the user already
# has, a third server (redis-server --loadmodule it, no persistence) gets the
# same filters, its BF.EXISTS and BF.ADD are measured right after
# bloomgate's, and the ratios bloomgate / RedisBloom are printed too. With
# RESPFLOOR=1, bench/cmd/respfloor (a Go server that answers every command
# without looking at it) gets the same BF.EXISTS right after bloomgate's, at
# the end of each line: the floor of a goroutine-per-connection server; with
# RESPFLOOR=loop, respfloor -loop answers from gnet's event loops instead:
# the floor of an event-loop server.
#
# Needs redis-server, redis-benchmark, redis-cli and go on PATH. The servers
# listen on free loopback ports and are stopped on exit.
set -eu
ROUNDS=${1:-5}
N=${2:-500000}
RB=${REDISBLOOM_MODULE:-}
if [ -n "$RB" ] && [ ! -f "$RB" ]; then
	echo "REDISBLOOM_MODULE=$RB: no such file" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
REDIS_PID= BG_PID= RB_PID= FL_PID=
cleanup() {
	[ -n "$FL_PID" ] && kill "$FL_PID" 2>/dev/null && wait "$FL_PID" 2>/dev/null || true
	[ -n "$BG_PID" ] && kill "$BG_PID" 2>/dev/null && wait "$BG_PID" 2>/dev/null || true
	[ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
	[ -n "$RB_PID" ] && kill "$RB_PID" 2>/dev/null && wait "$RB_PID" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fill() { # port
	redis-cli -p "$1" BF.RESERVE bf 0.01 1000000 >/dev/null
	redis-cli -p "$1" BF.RESERVE add 0.01 100000000 >/dev/null
	redis-benchmark -p "$1" -n 1000000 -P 64 -c 4 -r 1000000 -q BF.ADD bf __rand_int__ >/dev/null 2>&1
}

BIN=${BLOOMGATE:-}
if [ -z "$BIN" ]; then
	BIN=$TMP/bloomgate
	CGO_ENABLED=0 go build -trimpath -o "$BIN" ./cmd/bloomgate # as deploy/build.sh: static
fi
RP=$(freeport)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" --logfile "$TMP/redis.log" &
REDIS_PID=$!
BP=$(freeport)
"$BIN" serve -resp "127.0.0.1:$BP" -http "" -data "$TMP/data" -appendfsync everysec >"$TMP/bg.out" 2>"$TMP/bg.err" &
BG_PID=$!
if [ -n "$RB" ]; then
	RBP=$(freeport)
	mkdir "$TMP/rb"
	redis-server --port "$RBP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/rb" --logfile "$TMP/rb.log" --loadmodule "$RB" &
	RB_PID=$!
fi
if [ -n "${RESPFLOOR:-}" ]; then
	(cd bench && go build -o "$TMP/respfloor" ./cmd/respfloor)
	FP=$(freeport)
	if [ "$RESPFLOOR" = loop ]; then
		"$TMP/respfloor" -loop "127.0.0.1:$FP" >/dev/null 2>&1 &
	else
		"$TMP/respfloor" "127.0.0.1:$FP" &
	fi
	FL_PID=$!
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

HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# run port pid pipeline range command…: prints "rps cpu-µs-per-request"
run() {
	port=$1 pid=$2 p=$3 range=$4
	shift 4
	t0=$(ticks "$pid")
	rps=$(redis-benchmark -p "$port" -n "$N" -c 50 -P "$p" -r "$range" --csv "$@" 2>/dev/null | tail -1 | awk -F'"' '{print $4}')
	t1=$(ticks "$pid")
	awk -v r="$rps" -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$N" 'BEGIN{printf "%s %.2f", r, (b-a)/hz*1e6/n}'
}
ratio() { awk "BEGIN{printf \"%.2f\", $1/$2}"; }
printf 'round P redis_GET(rps cpu_us) bg_BF.EXISTS redis_SET bg_BF.ADD | EXISTS/GET ADD/SET rps, cpu'
[ -n "$RB" ] && printf ' | rb_BF.EXISTS rb_BF.ADD | bg/rb EXISTS ADD rps, cpu'
[ -n "$FL_PID" ] && printf ' | floor_BF.EXISTS | bg/floor rps, cpu'
echo
for r in $(seq "$ROUNDS"); do
	for p in 1 16; do
		set -- $(run "$RP" "$REDIS_PID" "$p" 1 GET foo)
		g=$1 gc=$2
		set -- $(run "$BP" "$BG_PID" "$p" 1000000 BF.EXISTS bf __rand_int__)
		e=$1 ec=$2
		set -- $(run "$RP" "$REDIS_PID" "$p" 1 SET foo bar)
		s=$1 sc=$2
		set -- $(run "$BP" "$BG_PID" "$p" 1000000000 BF.ADD add __rand_int__)
		a=$1 ac=$2
		line="$r $p $g $gc $e $ec $s $sc $a $ac | $(ratio "$e" "$g") $(ratio "$a" "$s") $(ratio "$ec" "$gc") $(ratio "$ac" "$sc")"
		if [ -n "$RB" ]; then
			set -- $(run "$RBP" "$RB_PID" "$p" 1000000 BF.EXISTS bf __rand_int__)
			x=$1 xc=$2
			set -- $(run "$RBP" "$RB_PID" "$p" 1000000000 BF.ADD add __rand_int__)
			y=$1 yc=$2
			line="$line | $x $xc $y $yc | $(ratio "$e" "$x") $(ratio "$a" "$y") $(ratio "$ec" "$xc") $(ratio "$ac" "$yc")"
		fi
		if [ -n "$FL_PID" ]; then
			set -- $(run "$FP" "$FL_PID" "$p" 1000000 BF.EXISTS bf __rand_int__)
			line="$line | $1 $2 | $(ratio "$e" "$1") $(ratio "$ec" "$2")"
		fi
		echo "$line"
	done
done
