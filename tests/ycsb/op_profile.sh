#!/usr/bin/env bash
# op_profile: where an operation's cost goes, per system, for one YCSB workload at N client
# threads on loopback: CPU time per operation on the server and on the client (from
# /proc/<pid>/stat and perf stat's task-clock), context switches per operation on each side
# (every thread's voluntary + involuntary switches), bytes (sent + received) and packets on the
# loopback interface per operation (/proc/net/dev), and, in a second run under `strace -c -f` on the server, system
# calls per operation by name (strace slows that run; only its counts are used).
#   bazel run -c opt //tests/ycsb:op_profile -- [--workload c] [--threads 8] [--records 20000]
#                                                [--ops 50000] [--systems unloadkv,redis,memcached]
# Needs perf (linux-perf) and strace; prints one table.
set -euo pipefail
WORKLOAD=c
THREADS=8
RECORDS=20000
OPS=50000
SYSTEMS=unloadkv,redis,memcached
while (($#)); do
  case "$1" in
    --workload) WORKLOAD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --records) RECORDS=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --systems) SYSTEMS=$2; shift 2 ;;
    *) echo "op_profile: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for v in "$THREADS" "$RECORDS" "$OPS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "op_profile: counts must be positive integers" >&2; exit 2; }
done
for tool in perf strace redis-server memcached; do
  command -v "$tool" >/dev/null || { echo "op_profile: $tool not found" >&2; exit 1; }
done
if [[ -x server/kvserver ]]; then ROOT=$PWD; else ROOT="$0.runfiles/unloadkv"; fi
YCSB=$ROOT/client/ycsb/ycsb
WL=$ROOT/client/ycsb/workloads/workload$WORKLOAD
[[ -f $WL ]] || { echo "op_profile: no workload '$WORKLOAD'" >&2; exit 2; }
WORK=$(mktemp -d)
PID=""
cleanup() {
  [[ -n $PID ]] && kill -TERM "$PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
clk=$(getconf CLK_TCK)

start() {  # start SYSTEM: the server on a free port; sets PID and ARGS
  local p
  p=$(port)
  case "$1" in
    unloadkv)
      "$ROOT/server/kvserver" --listen=127.0.0.1:$p --metrics= --arena_bytes=$((1 << 30)) >"$WORK/s.log" 2>&1 &
      ARGS=(-p unloadkv.server=127.0.0.1:$p) ;;
    redis)
      redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --logfile "$WORK/s.log" &
      ARGS=(-p redis.port=$p) ;;
    memcached)
      memcached -l 127.0.0.1 -p "$p" -U 0 -m 1024 -t 4 -u "$(id -un)" >"$WORK/s.log" 2>&1 &
      ARGS=(-p memcached.port=$p) ;;
    *) echo "op_profile: unknown system '$1'" >&2; exit 2 ;;
  esac
  PID=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && return
    sleep 0.1
  done
  echo "op_profile: $1 did not start: $(cat "$WORK/s.log")" >&2
  exit 1
}
stop() { kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
lo_bytes() { awk -F'[: ]+' '$2 == "lo" {print $3 + $11}' /proc/net/dev; }
lo_packets() { awk -F'[: ]+' '$2 == "lo" {print $4}' /proc/net/dev; }  # each crosses lo once

printf '%-9s | %9s %9s | %8s %8s | %8s %7s | %s\n' "system" "srv us/op" "cli us/op" "srv cs/op" \
  "cli cs/op" "lo B/op" "pkt/op" "server system calls per op (strace -c, top 4)"
for system in ${SYSTEMS//,/ }; do
  common=(-P "$WL" -p recordcount="$RECORDS" -p operationcount="$OPS" -threads "$THREADS")
  start "$system"
  "$YCSB" load "$system" "${common[@]}" "${ARGS[@]}" >/dev/null 2>&1
  c0=$(cpu_ticks "$PID"); s0=$(switches "$PID"); b0=$(lo_bytes); p0=$(lo_packets)
  perf stat -x, -e task-clock,context-switches -o "$WORK/perf.txt" -- \
    "$YCSB" run "$system" "${common[@]}" "${ARGS[@]}" >"$WORK/run.txt" 2>/dev/null
  c1=$(cpu_ticks "$PID"); s1=$(switches "$PID"); b1=$(lo_bytes); p1=$(lo_packets)
  ops=$(awk -F', ' '$2 ~ /^Return=/ {s += $3} END {print s + 0}' "$WORK/run.txt")
  cli_ms=$(awk -F, '$3 == "task-clock" {print $1}' "$WORK/perf.txt")
  cli_cs=$(awk -F, '$3 == "context-switches" {print $1}' "$WORK/perf.txt")
  # The strace run: the same operations again, the server's system calls counted.
  strace -c -f -q -U calls,name -p "$PID" -o "$WORK/strace.txt" &
  st=$!
  sleep 0.5
  "$YCSB" run "$system" "${common[@]}" "${ARGS[@]}" >"$WORK/run2.txt" 2>/dev/null
  kill -INT "$st"; wait "$st" 2>/dev/null || true
  ops2=$(awk -F', ' '$2 ~ /^Return=/ {s += $3} END {print s + 0}' "$WORK/run2.txt")
  calls=$(awk -v n="$ops2" '$1 ~ /^[0-9]+$/ && $2 != "total" {printf "%s %.2f\n", $2, $1 / n}' \
            "$WORK/strace.txt" | sort -k2 -nr | head -4 |
            awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')
  total=$(awk -v n="$ops2" '$2 == "total" {printf "%.1f", $1 / n}' "$WORK/strace.txt")
  stop
  awk -v sys="$system" -v ops="$ops" -v c0="$c0" -v c1="$c1" -v clk="$clk" -v cms="$cli_ms" \
      -v s0="$s0" -v s1="$s1" -v ccs="$cli_cs" -v b0="$b0" -v b1="$b1" -v p0="$p0" -v p1="$p1" \
      -v calls="$calls" -v total="$total" \
      'BEGIN {printf "%-9s | %9.1f %9.1f | %8.2f %8.2f | %8.0f %7.2f | %s in all: %s\n", sys,
              (c1 - c0) / clk * 1e6 / ops, cms * 1000 / ops, (s1 - s0) / ops, ccs / ops,
              (b1 - b0) / ops, (p1 - p0) / ops, total, calls}'
done
echo "workload ${WORKLOAD^^}, $THREADS client threads, $OPS operations, $RECORDS records, loopback (measured)"
