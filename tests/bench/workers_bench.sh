#!/usr/bin/env bash
# workers_bench: requests per second of one kvserver with one engine worker and with several
# (--unload_workers; on soft each worker has a device port of its own, docs/engine.md "A port
# per worker"), served to several kvclient load processes at once, alternated in one run. Each
# figure: the clients' own ops/s summed, and the kvserver's CPU (user + system, from /proc, in
# clock ticks, so coarse) per operation; the median of --runs rounds, with the range.
#   bazel run -c opt //tests/bench:workers_bench -- [--workers 2] [--clients 2]
#       [--in_flight 1,32] [--ops 30000] [--runs 3]
set -euo pipefail

WORKERS=2
CLIENTS=2
IN_FLIGHT=1,32
OPS=30000
RUNS=3
while (($#)); do
  case "$1" in
    --workers) WORKERS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --in_flight) IN_FLIGHT=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    *) echo "workers_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for v in "$WORKERS" "$CLIENTS" "$OPS" "$RUNS" ${IN_FLIGHT//,/ }; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "workers_bench: counts must be positive integers" >&2; exit 2; }
done
((WORKERS >= 2 && WORKERS <= 64)) || { echo "workers_bench: --workers must be in 2..64" >&2; exit 2; }
if [[ -x server/kvserver ]]; then ROOT=$PWD; else ROOT="$0.runfiles/unloadkv"; fi
KVSERVER=$ROOT/server/kvserver
KVCLIENT=$ROOT/client/kvclient
WORK=$(mktemp -d)
CLK=$(getconf CLK_TCK)
KV_PID=""
CLIENT_PIDS=()
cleanup() {
  for p in "${CLIENT_PIDS[@]}" $KV_PID; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { printf '[workers_bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# One round: prints "OPS_PER_S CPU_US_PER_OP".
round() {
  local workers=$1 in_flight=$2 port
  port=$(free_port)
  "$KVSERVER" --listen=127.0.0.1:"$port" --metrics= --arena_bytes=$((1 << 30)) \
    --unload_workers="$workers" >"$WORK/kvserver.log" 2>&1 &
  KV_PID=$!
  local i
  for i in $(seq 1 100); do
    "$KVCLIENT" --server=127.0.0.1:"$port" put ready 1 >/dev/null 2>&1 && break
    kill -0 "$KV_PID" 2>/dev/null || { cat "$WORK/kvserver.log" >&2; exit 1; }
    ((i < 100)) || { echo "workers_bench: kvserver did not answer within 10 s" >&2; exit 1; }
    sleep 0.1
  done
  local cpu0 cpu1
  cpu0=$(awk '{print $14 + $15}' /proc/$KV_PID/stat)
  CLIENT_PIDS=()
  for i in $(seq 1 "$CLIENTS"); do
    "$KVCLIENT" --server=127.0.0.1:"$port" load --in_flight="$in_flight" --ops="$OPS" \
      --value_size=100 --seed="$i" >"$WORK/client$i.log" 2>&1 &
    CLIENT_PIDS+=($!)
  done
  for p in "${CLIENT_PIDS[@]}"; do wait "$p" || { cat "$WORK"/client*.log >&2; exit 1; }; done
  CLIENT_PIDS=()
  cpu1=$(awk '{print $14 + $15}' /proc/$KV_PID/stat)
  kill "$KV_PID"
  wait "$KV_PID" 2>/dev/null || true
  KV_PID=""
  local sum
  sum=$(grep -ho '= [0-9]* ok ops/s' "$WORK"/client*.log | awk '{s += $2} END {print s}')
  python3 -c "print($sum, round(($cpu1 - $cpu0) / $CLK * 1e6 / ($CLIENTS * $OPS), 2))"
}

declare -A RESULTS
for r in $(seq 1 "$RUNS"); do
  for f in ${IN_FLIGHT//,/ }; do
    for w in 1 "$WORKERS"; do
      log "round $r/$RUNS: $CLIENTS clients x $f in flight, $w worker(s)"
      RESULTS["$f $w"]+="$(round "$w" "$f");"
    done
  done
done

echo "# workers_bench: $CLIENTS kvclient load processes at once, $OPS ops each (100 B values, half GETs), medians of $RUNS [range]"
printf '%-10s %-8s %-32s %-26s\n' in_flight workers "ops/s (clients' sum)" "kvserver CPU us/op"
for f in ${IN_FLIGHT//,/ }; do
  for w in 1 "$WORKERS"; do
    python3 - "$f" "$w" "${RESULTS["$f $w"]}" <<'PY'
import statistics, sys
f, w, raw = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [tuple(float(x) for x in r.split()) for r in raw.split(';') if r]
ops = [r[0] for r in rows]
cpu = [r[1] for r in rows]
print(f"{f:<10} {w:<8} {statistics.median(ops):>9,.0f} [{min(ops):,.0f}-{max(ops):,.0f}]     "
      f"{statistics.median(cpu):>5.2f} [{min(cpu):.2f}-{max(cpu):.2f}]")
PY
  done
done
