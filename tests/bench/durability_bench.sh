#!/usr/bin/env bash
# durability_bench: PUT throughput and latency of a single kvserver logging to disk under each
# --fsync policy, next to a real redis-server with appendonly yes and the matching appendfsync,
# both with their data on the same file system, alternated in one run (docs/durability.md).
# The load is YCSB's load phase (inserts of 1 KiB records) from the same runner for both, at 1
# and 16 client threads. Each figure is the median of --runs fresh pairs of servers.
#   bazel run -c opt //tests/bench:durability_bench -- [--records N] [--runs 3] [--dir DIR]
# Pairs: never / appendfsync no, interval:1000 / everysec, always / always.
set -euo pipefail

RECORDS=5000
RUNS=3
DIR=""
while (($#)); do
  case "$1" in
    --records) RECORDS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    *) echo "durability_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for v in "$RECORDS" "$RUNS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "durability_bench: counts must be positive integers" >&2; exit 2; }
done
command -v redis-server >/dev/null || {
  echo "durability_bench: redis-server not found; install it with: sudo apt-get install redis-server" >&2
  exit 1
}
if [[ -x server/kvserver ]]; then ROOT=$PWD; else ROOT="$0.runfiles/unloadkv"; fi
YCSB=$ROOT/client/ycsb/ycsb
KVSERVER=$ROOT/server/kvserver
WL=$ROOT/client/ycsb/workloads/workloada
BASE=${DIR:-$(mktemp -d)}
mkdir -p "$BASE"
WORK=$(mktemp -d "$BASE/durability-bench.XXXXXX")
log() { printf '[durability_bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PID=""
KV_PID=""
cleanup() {
  [[ -n $REDIS_PID ]] && kill "$REDIS_PID" 2>/dev/null || true
  [[ -n $KV_PID ]] && kill -TERM "$KV_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# field(file, "[INSERT]", "99thPercentileLatency(us)")
field() { awk -F', ' -v s="$2" -v k="$3" '$1==s && $2==k {print $3}' "$1"; }

# run_pair RUN KV_POLICY REDIS_POLICY THREADS: one fresh server of each, loaded in turn.
run_pair() {
  local run=$1 kvp=$2 rp=$3 threads=$4 port store out
  rm -rf "$WORK/kv" "$WORK/redis" && mkdir -p "$WORK/kv" "$WORK/redis"
  for store in redis unloadkv; do
    port=$(free_port)
    if [[ $store == redis ]]; then
      redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes \
        --appendfsync "$rp" --dir "$WORK/redis" --logfile "$WORK/redis.log" &
      REDIS_PID=$!
      for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    else
      "$KVSERVER" --listen=127.0.0.1:$port --metrics= --arena_bytes=$((256 << 20)) \
        --data_dir="$WORK/kv" --fsync="$kvp" >"$WORK/kvserver.log" 2>&1 &
      KV_PID=$!
      for _ in $(seq 100); do grep -q "listening" "$WORK/kvserver.log" && break; sleep 0.1; done
    fi
    out=$WORK/load-$store.txt
    "$YCSB" load "$store" -P "$WL" -p recordcount="$RECORDS" -threads "$threads" \
      -p hdrhistogram.percentiles=50,99 -p redis.port="$port" \
      -p unloadkv.server=127.0.0.1:$port >"$out"
    echo "$run,$kvp,$threads,$store,$(field "$out" "[OVERALL]" "Throughput(ops/sec)"),$(field "$out" "[INSERT]" "50thPercentileLatency(us)"),$(field "$out" "[INSERT]" "99thPercentileLatency(us)"),$(awk -F', ' '$1=="[INSERT]" && $2=="Return=ERROR" {s+=$3} END {print s+0}' "$out")" >>"$WORK/results.csv"
    if [[ $store == redis ]]; then
      kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
    else
      kill -TERM "$KV_PID"; wait "$KV_PID" 2>/dev/null || true; KV_PID=""
    fi
  done
}

log "data on $(df -P "$WORK" | awk 'NR==2 {print $1 " (" $6 ")"}'), $RECORDS inserts of 1 KiB records per load, $RUNS runs"
for run in $(seq "$RUNS"); do
  for pair in "never no" "interval:1000 everysec" "always always"; do
    read -r kvp rp <<<"$pair"
    for threads in 1 16; do
      log "run $run/$RUNS: fsync $kvp / appendfsync $rp, $threads threads"
      run_pair "$run" "$kvp" "$rp" "$threads"
    done
  done
done

python3 - "$WORK/results.csv" <<'PY'
import statistics, sys
rows = [l.strip().split(",") for l in open(sys.argv[1])]
by = {}
for run, policy, threads, store, tput, p50, p99, errors in rows:
    by.setdefault((policy, threads, store), []).append((float(tput), float(p50), float(p99), int(errors)))
print("MEASURED on this machine; medians over %d runs, min-max of unloadkv/Redis in brackets" % len({r[0] for r in rows}))
print("%-22s %-7s | %12s %8s %8s | %12s %8s %8s | %s" % ("fsync", "threads", "unloadkv op/s", "p50 us", "p99 us", "Redis op/s", "p50 us", "p99 us", "throughput unloadkv/Redis"))
redis_name = {"never": "no", "interval:1000": "everysec", "always": "always"}
for policy in ("never", "interval:1000", "always"):
    for threads in ("1", "16"):
        kv = by[(policy, threads, "unloadkv")]
        rd = by[(policy, threads, "redis")]
        med = lambda xs, i: statistics.median(x[i] for x in xs)
        ratios = [k[0] / r[0] for k, r in zip(kv, rd)]
        errors = sum(x[3] for x in kv + rd)
        print("%-22s %-7s | %12.0f %8.0f %8.0f | %12.0f %8.0f %8.0f | %.2fx [%.2f-%.2f]%s" % (
            policy + "/" + redis_name[policy], threads, med(kv, 0), med(kv, 1), med(kv, 2),
            med(rd, 0), med(rd, 1), med(rd, 2), statistics.median(ratios), min(ratios),
            max(ratios), "  ERRORS: %d" % errors if errors else ""))
PY
