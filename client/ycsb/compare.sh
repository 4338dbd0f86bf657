#!/usr/bin/env bash
# ycsb compare: unloadkv next to Redis on the same machine, same YCSB workloads, same client
# concurrency. Starts redis-server (no persistence) and kvserver on loopback, loads and runs
# workloads A, B, C, E and F against each, then prints a side-by-side table, writes it as CSV
# and draws PNG plots with gnuplot.
#   bazel run -c opt //client/ycsb:compare -- [--records N] [--ops N] [--threads N]
#                                             [--workloads a,b,c,e,f] [--out DIR]
set -euo pipefail

RECORDS=20000
OPS=50000
SCAN_OPS=5000  # workload E: scans read up to 100 records each
THREADS=8
WORKLOADS=a,b,c,e,f
OUT=${BUILD_WORKSPACE_DIRECTORY:-$PWD}/ycsb-compare
while (($#)); do
  case "$1" in
    --records) RECORDS=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --scan_ops) SCAN_OPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "compare: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for v in "$RECORDS" "$OPS" "$SCAN_OPS" "$THREADS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "compare: counts must be positive integers" >&2; exit 2; }
done
command -v redis-server >/dev/null || {
  echo "compare: redis-server not found; install it with: sudo apt-get install redis-server" >&2
  exit 1
}
command -v gnuplot >/dev/null || {
  echo "compare: gnuplot not found; install it with: sudo apt-get install gnuplot-nox" >&2
  exit 1
}

# Runfiles: bazel run starts us in the runfiles tree; a direct run finds them beside us.
if [[ -x server/kvserver ]]; then ROOT=$PWD; else ROOT="$0.runfiles/unloadkv"; fi
YCSB=$ROOT/client/ycsb/ycsb
KVSERVER=$ROOT/server/kvserver
WL=$ROOT/client/ycsb/workloads
mkdir -p "$OUT"
WORK=$(mktemp -d)
log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(free_port)
KV_PORT=$(free_port)
REDIS_PID=""
KV_PID=""
cleanup() {
  [[ -n $REDIS_PID ]] && kill "$REDIS_PID" 2>/dev/null || true
  [[ -n $KV_PID ]] && kill -TERM "$KV_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

start_servers() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --protected-mode yes --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  "$KVSERVER" --listen=127.0.0.1:$KV_PORT --metrics= --arena_bytes=$((1 << 30)) \
    >"$WORK/kvserver.log" 2>&1 &
  KV_PID=$!
  for _ in $(seq 100); do
    if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && grep -q "listening" "$WORK/kvserver.log"; then
      return
    fi
    sleep 0.1
  done
  echo "compare: servers did not start:" >&2
  cat "$WORK/redis.log" "$WORK/kvserver.log" >&2
  exit 1
}
stop_servers() {
  kill "$REDIS_PID"; kill -TERM "$KV_PID"
  wait "$REDIS_PID" "$KV_PID" 2>/dev/null || true
  REDIS_PID=""; KV_PID=""
}

# field(file, "[READ]", "99thPercentileLatency(us)")
field() { awk -F', ' -v s="$2" -v k="$3" '$1==s && $2==k {print $3}' "$1"; }

CSV=$OUT/ycsb-compare.csv
echo "workload,store,throughput_ops,read_p50_us,read_p99_us,update_p50_us,update_p99_us,scan_p50_us,scan_p99_us,errors" >"$CSV"
log "unloadkv vs Redis: $RECORDS records, $OPS operations ($SCAN_OPS for E), $THREADS client threads, loopback"
for w in ${WORKLOADS//,/ }; do
  [[ -f $WL/workload$w ]] || { echo "compare: no workload '$w'" >&2; exit 2; }
  ops=$OPS
  [[ $w == e ]] && ops=$SCAN_OPS
  # A fresh pair of servers per workload, so that no workload sees another's inserts.
  start_servers
  for store in redis unloadkv; do
    common=(-P "$WL/workload$w" -p recordcount="$RECORDS" -p operationcount="$ops"
            -threads "$THREADS" -p hdrhistogram.percentiles=50,95,99
            -p redis.port="$REDIS_PORT" -p unloadkv.server=127.0.0.1:$KV_PORT)
    log "workload $w: loading $store"
    "$YCSB" load "$store" "${common[@]}" >"$WORK/load-$w-$store.txt"
    log "workload $w: running $store"
    "$YCSB" run "$store" "${common[@]}" -s -p status.interval=5 >"$WORK/run-$w-$store.txt"
    r=$WORK/run-$w-$store.txt
    errors=$(awk -F', ' '$2=="Return=ERROR" {s+=$3} END {print s+0}' "$r")
    read_op="[READ]"
    echo "$w,$store,$(field "$r" "[OVERALL]" "Throughput(ops/sec)"),$(field "$r" "$read_op" "50thPercentileLatency(us)"),$(field "$r" "$read_op" "99thPercentileLatency(us)"),$(field "$r" "[UPDATE]" "50thPercentileLatency(us)"),$(field "$r" "[UPDATE]" "99thPercentileLatency(us)"),$(field "$r" "[SCAN]" "50thPercentileLatency(us)"),$(field "$r" "[SCAN]" "99thPercentileLatency(us)"),$errors" >>"$CSV"
    cp "$r" "$OUT/run-$w-$store.txt"
  done
  stats=$("$ROOT/client/kvclient" --server=127.0.0.1:$KV_PORT stats 2>/dev/null || true)
  echo "$w $(echo "$stats" | awk '/^offload_writes/ {o=$2} /^unload_writes/ {u=$2} END {print o+0, u+0}')" >>"$WORK/split.txt"
  stop_servers
done

# The side-by-side table: throughput and the first latency column each workload has.
python3 - "$CSV" "$WORK/split.txt" "$OUT/ycsb-compare.txt" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
split = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(sys.argv[2])}
by = {}
for r in rows: by.setdefault(r["workload"], {})[r["store"]] = r
def num(x): return float(x) if x else None
out = []
out.append("YCSB on loopback, same machine, same client threads (measured)")
out.append("%-3s | %-10s %-10s %-6s | %-22s %-22s %-6s | %s" % ("wl", "unloadkv", "redis", "ratio",
           "unloadkv p50/p99 us", "redis p50/p99 us", "p99 x", "unloadkv value writes offload/unload"))
for w in sorted(by):
    u, r = by[w].get("unloadkv"), by[w].get("redis")
    if not u or not r: continue
    lat = "read" if u["read_p50_us"] else "scan"
    up50, up99 = num(u[lat + "_p50_us"]), num(u[lat + "_p99_us"])
    rp50, rp99 = num(r[lat + "_p50_us"]), num(r[lat + "_p99_us"])
    o, ul = split.get(w, (0, 0))
    out.append("%-3s | %10.0f %10.0f %5.2fx | %-22s %-22s %5.2fx | %d / %d" % (
        w.upper(), num(u["throughput_ops"]), num(r["throughput_ops"]),
        num(u["throughput_ops"]) / num(r["throughput_ops"]),
        "%s %.0f / %.0f" % (lat, up50, up99), "%s %.0f / %.0f" % (lat, rp50, rp99),
        up99 / rp99 if rp99 else 0, o, ul))
    if int(u["errors"]) or int(r["errors"]):
        out.append("    errors: unloadkv %s, redis %s" % (u["errors"], r["errors"]))
out.append("ratio = unloadkv / redis throughput (>= 1.0 is the target on A, B, C); "
           "p99 x = unloadkv / redis p99 (<= 1.2 is the target)")
open(sys.argv[3], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY

# Plots: throughput bars, and p50/p99 per workload and store.
gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set datafile separator ","
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top right
set ylabel "throughput (ops/s)"
set title "YCSB throughput, $THREADS client threads, loopback (measured)"
set output "$OUT/ycsb-throughput.png"
plot "< awk -F, 'NR>1 && \$2==\"unloadkv\"' $CSV" using 3:xtic(1) title "unloadkv", \
     "< awk -F, 'NR>1 && \$2==\"redis\"' $CSV" using 3 title "redis"
set ylabel "latency (us)"
set logscale y
set title "YCSB read (A, B, C, F) and scan (E) latency p50 / p99 (measured)"
set output "$OUT/ycsb-latency.png"
plot "< awk -F, 'NR>1 && \$2==\"unloadkv\" {print \$1\",\"(\$4?\$4:\$8)\",\"(\$5?\$5:\$9)}' $CSV" using 2:xtic(1) title "unloadkv p50", \
     "" using 3 title "unloadkv p99", \
     "< awk -F, 'NR>1 && \$2==\"redis\" {print \$1\",\"(\$4?\$4:\$8)\",\"(\$5?\$5:\$9)}' $CSV" using 2 title "redis p50", \
     "" using 3 title "redis p99"
GP
log "wrote $OUT/ycsb-compare.txt, $CSV, $OUT/ycsb-throughput.png, $OUT/ycsb-latency.png"
