#!/usr/bin/env bash
# ycsb against real servers: kvserver, redis-server, memcached and echo_server (the loopback
# limit) on free loopback ports, load and run of workload A on every binding and E on those
# with scans, the summary lines YCSB prints, and clear errors for a bad workload file and an
# unreachable server.
set -euo pipefail
YCSB=client/ycsb/ycsb
WL=client/ycsb/workloads
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v redis-server >/dev/null || fail "redis-server is not installed (./quickstart.sh installs it)"
command -v memcached >/dev/null || fail "memcached is not installed (./quickstart.sh installs it)"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port); KP=$(port); MP=$(port); EP=$(port)
T=$(mktemp -d)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --logfile "$T/redis.log" &
R=$!
server/kvserver --listen=127.0.0.1:$KP --metrics= --arena_bytes=67108864 >"$T/kv.log" 2>&1 &
K=$!
memcached -l 127.0.0.1 -p "$MP" -U 0 -m 64 -u "$(id -un)" >"$T/mc.log" 2>&1 &
M=$!
client/ycsb/echo_server --listen=127.0.0.1:$EP >"$T/echo.log" 2>&1 &
E=$!
trap 'kill $R $M $E 2>/dev/null; kill -TERM $K 2>/dev/null; wait; rm -rf "$T"' EXIT
for _ in $(seq 100); do
  redis-cli -p "$RP" ping >/dev/null 2>&1 && grep -q listening "$T/kv.log" &&
    grep -q listening "$T/echo.log" && (exec 3<>"/dev/tcp/127.0.0.1/$MP") 2>/dev/null && break
  sleep 0.1
done

for store in unloadkv redis memcached echo; do
  args=(-p recordcount=300 -p redis.port="$RP" -p unloadkv.server=127.0.0.1:$KP -threads 3
        -p memcached.port="$MP" -p echo.port="$EP")
  "$YCSB" load "$store" -P "$WL/workloada" "${args[@]}" >"$T/load" || fail "$store load"
  grep -qx '\[INSERT\], Return=OK, 300' "$T/load" || fail "$store load summary: $(cat "$T/load")"
  "$YCSB" run "$store" -P "$WL/workloada" "${args[@]}" -p operationcount=600 \
    -p hdrhistogram.percentiles=50,99 >"$T/run" || fail "$store run A"
  grep -q '^\[OVERALL\], Throughput(ops/sec), [0-9.]*$' "$T/run" || fail "$store throughput line"
  grep -q '^\[READ\], 99thPercentileLatency(us), [0-9]*$' "$T/run" || fail "$store p99 line"
  ops=$(awk -F', ' '$2 ~ /^Return=/ && ($1=="[READ]" || $1=="[UPDATE]") {s+=$3} END {print s}' "$T/run")
  [[ $ops == 600 ]] || fail "$store: $ops operations answered, want 600"
  ! grep -q 'Return=NOT_FOUND\|Return=ERROR' "$T/run" || fail "$store: missing records: $(cat "$T/run")"
  [[ $store == memcached || $store == echo ]] && continue  # no scans
  "$YCSB" run "$store" -P "$WL/workloade" "${args[@]}" -p operationcount=60 >"$T/scan" || fail "$store run E"
  grep -q '^\[SCAN\], Return=OK, ' "$T/scan" || fail "$store scans: $(cat "$T/scan")"
done

# Bad input: a malformed workload file, a bad value, an unreachable server.
printf 'recordcount=10\nthis is not a property\n' >"$T/bad"
if "$YCSB" run unloadkv -P "$T/bad" 2>"$T/err"; then fail "bad file accepted"; fi
grep -q "bad:2" "$T/err" || fail "bad file error does not name the line: $(cat "$T/err")"
if "$YCSB" run unloadkv -P "$WL/workloada" -p readproportion=2 2>"$T/err"; then fail "bad value accepted"; fi
grep -q "readproportion=2" "$T/err" || fail "bad value error: $(cat "$T/err")"
if "$YCSB" run redis -P "$WL/workloada" -p redis.port=1 2>"$T/err"; then fail "unreachable accepted"; fi
grep -q "cannot connect to redis at 127.0.0.1:1" "$T/err" || fail "unreachable error: $(cat "$T/err")"
if "$YCSB" run echo -P "$WL/workloada" -p echo.port=1 2>"$T/err"; then fail "unreachable echo accepted"; fi
grep -q "echo: connect to 127.0.0.1:1" "$T/err" || fail "unreachable echo error: $(cat "$T/err")"
if "$YCSB" load memcached -P "$WL/workloada" -p recordcount=5 -p memcached.port=1 >"$T/out" 2>"$T/err"; then
  fail "unreachable memcached accepted"
fi
grep -q 'Return=ERROR' "$T/out" || fail "unreachable memcached: $(cat "$T/out" "$T/err")"
echo PASS
