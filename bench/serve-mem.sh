#!/bin/sh
# Memory of a durable `bloomgate serve` holding one 10 M-item 1 % Bloom
# filter: BF.RESERVE big 0.01 10000000, 10 M BF.ADDs of random items
# (redis-benchmark -P 64 -c 4), then the process's resident set (VmRSS) and
# peak (VmHWM), split into anonymous memory (RssAnon: the heap, the stacks)
# and file pages (RssFile: the binary's pages, shared through the page
# cache), the filter's bytes (BF.INFO Size) and how long the adds took;
# then the resident set of a private redis-server holding one string of the
# filter's size, for comparison.
#
#   bench/serve-mem.sh [serve flags…]      (e.g. -appendfsync always)
#   BLOOMGATE=/path/to/bloomgate bench/serve-mem.sh …   (a built binary, instead
#                                                        of building ./cmd/bloomgate
#                                                        statically, as deploy/build.sh)
#   REDISBLOOM_MODULE=/path/to/redisbloom.so bench/serve-mem.sh …
#
# With REDISBLOOM_MODULE naming a RedisBloom module the user already has, the
# same filter and adds then go to a private redis-server --loadmodule it (no
# persistence; started after bloomgate's figures are taken), and its figures
# and the ratios bloomgate / RedisBloom are printed too.
#
# Needs redis-server, redis-benchmark, redis-cli and go on PATH.
set -eu
RB=${REDISBLOOM_MODULE:-}
if [ -n "$RB" ] && [ ! -f "$RB" ]; then
	echo "REDISBLOOM_MODULE=$RB: no such file" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
PID= RB_PID= STR_PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	[ -n "$STR_PID" ] && kill "$STR_PID" 2>/dev/null && wait "$STR_PID" 2>/dev/null || true
	[ -n "$RB_PID" ] && kill "$RB_PID" 2>/dev/null && wait "$RB_PID" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
fill() { # port: prints the seconds the adds took
	redis-cli -p "$1" BF.RESERVE big 0.01 10000000 >/dev/null
	t0=$(date +%s.%N)
	redis-benchmark -p "$1" -n 10000000 -P 64 -c 4 -r 1000000000 -q BF.ADD big __rand_int__ >/dev/null 2>&1
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}'
	sleep 2
}
BIN=${BLOOMGATE:-}
if [ -z "$BIN" ]; then
	BIN=$TMP/bloomgate
	CGO_ENABLED=0 go build -trimpath -o "$BIN" ./cmd/bloomgate # as deploy/build.sh: static
fi
PORT=$(freeport)
"$BIN" serve -resp "127.0.0.1:$PORT" -http "" -data "$TMP/data" "$@" >"$TMP/out" 2>"$TMP/err" &
PID=$!
until grep -q ready "$TMP/out" 2>/dev/null; do sleep 0.1; done
secs=$(fill "$PORT")
size=$(redis-cli -p "$PORT" BF.INFO big SIZE | tail -1)
rss=$(awk '/VmRSS/{print $2}' /proc/$PID/status)
hwm=$(awk '/VmHWM/{print $2}' /proc/$PID/status)
anon=$(awk '/RssAnon/{print $2}' /proc/$PID/status)
file=$(awk '/RssFile/{print $2}' /proc/$PID/status)
awk -v s="$size" -v r="$rss" -v h="$hwm" -v t="$secs" -v a="$anon" -v f="$file" 'BEGIN{
	printf "filter %.1f MB, RSS %.1f MB (%.2fx the filter; anonymous %.1f MB, file %.1f MB), peak %.1f MB, adds took %s s\n",
		s/1e6, r*1024/1e6, r*1024/s, a*1024/1e6, f*1024/1e6, h*1024/1e6, t }'

# The anchor: a private redis-server holding one string of the filter's
# size (SETRANGE, no persistence).
SP=$(freeport)
mkdir "$TMP/str"
redis-server --port "$SP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/str" --logfile "$TMP/str.log" &
STR_PID=$!
for i in $(seq 100); do
	redis-cli -p "$SP" PING >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$SP" SETRANGE big $((size - 1)) x >/dev/null
srss=$(awk '/VmRSS/{print $2}' /proc/$STR_PID/status)
kill "$STR_PID" && wait "$STR_PID" 2>/dev/null || true
STR_PID=
awk -v r="$rss" -v sr="$srss" 'BEGIN{
	printf "redis-server holding a string of the filter'"'"'s size: RSS %.1f MB; bloomgate / it: %.2f\n", sr*1024/1e6, r/sr }'
[ -n "$RB" ] || exit 0

RBP=$(freeport)
mkdir "$TMP/rb"
redis-server --port "$RBP" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP/rb" --logfile "$TMP/rb.log" --loadmodule "$RB" &
RB_PID=$!
for i in $(seq 100); do
	redis-cli -p "$RBP" PING >/dev/null 2>&1 && break
	sleep 0.1
done
if ! redis-cli -p "$RBP" MODULE LIST | grep -qx bf; then
	echo "redis-server did not load $RB:" >&2
	tail -5 "$TMP/rb.log" >&2
	exit 1
fi
idle=$(awk '/VmRSS/{print $2}' /proc/$RB_PID/status)
rsecs=$(fill "$RBP")
rsize=$(redis-cli -p "$RBP" BF.INFO big SIZE | tail -1)
rrss=$(awk '/VmRSS/{print $2}' /proc/$RB_PID/status)
rhwm=$(awk '/VmHWM/{print $2}' /proc/$RB_PID/status)
ranon=$(awk '/RssAnon/{print $2}' /proc/$RB_PID/status)
rfile=$(awk '/RssFile/{print $2}' /proc/$RB_PID/status)
awk -v s="$rsize" -v r="$rrss" -v h="$rhwm" -v i="$idle" -v t="$rsecs" -v a="$ranon" -v f="$rfile" 'BEGIN{
	printf "RedisBloom: filter %.1f MB, RSS %.1f MB (%.2fx the filter; anonymous %.1f MB, file %.1f MB), peak %.1f MB, adds took %s s; idle redis-server %.1f MB\n",
		s/1e6, r*1024/1e6, r*1024/s, a*1024/1e6, f*1024/1e6, h*1024/1e6, t, i*1024/1e6 }'
awk -v s="$size" -v r="$rss" -v h="$hwm" -v rs="$rsize" -v rr="$rrss" -v rh="$rhwm" -v a="$anon" -v ra="$ranon" 'BEGIN{
	printf "bloomgate / RedisBloom: filter %.2f, RSS %.2f, anonymous %.2f, peak %.2f\n", s/rs, r/rr, a/ra, h/rh }'
