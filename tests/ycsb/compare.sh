#!/usr/bin/env bash
# ycsb compare: unloadkv next to Redis and memcached on the same machine, same YCSB workloads,
# same client concurrency, with the loopback limit measured in the same run: echo_server
# answering each operation with the bytes a KV store would, doing nothing else
# (client/ycsb/echo_db.h). Starts redis-server (no persistence), memcached, echo_server and
# kvserver on loopback, loads and runs workloads A, B, C, E and F against each (memcached and the
# limit have no scans: not E), then prints a side-by-side table, writes it as CSV and draws PNG
# plots with gnuplot. The table runs every workload --runs times (fresh servers each time) and
# gives each figure's median with the spread (min-max) of unloadkv's ratios over the runs.
#   bazel run -c opt //tests/ycsb:compare -- [--records N] [--ops N] [--threads N] [--runs 3]
#                                             [--workloads a,b,c,e,f] [--sweep 1,4,8,16,64]
#                                             [--sweep_workload a] [--pipeline_ops N] [--out DIR]
#                                             [--policy adaptive[,inline:N]]
# The pipelined table: one client with 1, 16 and 64 requests in flight, GET and SET of 100 B
# and 1 KiB, unloadkv's async SDK and Redis's pipelining through one driver
# (client/ycsb/pipeline_bench.cc; --pipeline_ops 0 skips it).
# The thread sweep runs one workload at each client thread count against every system
# (--sweep none skips it). --auth also runs a second kvserver with an auth file (its clients
# prove a user; docs/security.md) right after the plain one in every run of every workload,
# and the table gains its throughput over the plain one's (authentication's cost). --policy is
# unloadkv's value path policy (ClientOptions::policy; ",inline:N" sends values of at most N
# bytes in the PUT itself), for every unloadkv client of the run.
set -euo pipefail

RECORDS=20000
OPS=50000
SCAN_OPS=5000  # workload E: scans read up to 100 records each
THREADS=8
RUNS=3
WORKLOADS=a,b,c,e,f
SWEEP=1,4,8,16,64
SWEEP_WORKLOAD=a
PIPELINE_OPS=100000
AUTH=0
POLICY=adaptive
OUT=${BUILD_WORKSPACE_DIRECTORY:-$PWD}/ycsb-compare
while (($#)); do
  case "$1" in
    --records) RECORDS=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --scan_ops) SCAN_OPS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --sweep) SWEEP=$2; shift 2 ;;
    --sweep_workload) SWEEP_WORKLOAD=$2; shift 2 ;;
    --pipeline_ops) PIPELINE_OPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --auth) AUTH=1; shift ;;
    --policy) POLICY=$2; shift 2 ;;
    *) echo "compare: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for v in "$RECORDS" "$OPS" "$SCAN_OPS" "$THREADS" "$RUNS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "compare: counts must be positive integers" >&2; exit 2; }
done
[[ $PIPELINE_OPS =~ ^[0-9]+$ ]] || { echo "compare: --pipeline_ops must be a count" >&2; exit 2; }
if [[ $SWEEP != none ]]; then
  [[ $SWEEP =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    { echo "compare: --sweep takes thread counts like 1,4,8,16,64, or none" >&2; exit 2; }
  [[ $SWEEP_WORKLOAD =~ ^[abcdf]$ ]] ||
    { echo "compare: --sweep_workload must be one of a, b, c, d, f (no scans)" >&2; exit 2; }
fi
command -v redis-server >/dev/null || {
  echo "compare: redis-server not found; install it with: sudo apt-get install redis-server" >&2
  exit 1
}
command -v memcached >/dev/null || {
  echo "compare: memcached not found; install it with: sudo apt-get install memcached" >&2
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
ECHO_SERVER=$ROOT/client/ycsb/echo_server
PIPELINE_BENCH=$ROOT/client/ycsb/pipeline_bench
WL=$ROOT/client/ycsb/workloads
mkdir -p "$OUT"
WORK=$(mktemp -d)
log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(free_port)
KV_PORT=$(free_port)
KVA_PORT=$(free_port)
MC_PORT=$(free_port)
ECHO_PORT=$(free_port)
REDIS_PID=""
KV_PID=""
KVA_PID=""
MC_PID=""
ECHO_PID=""
cleanup() {
  [[ -n $REDIS_PID ]] && kill "$REDIS_PID" 2>/dev/null || true
  [[ -n $KV_PID ]] && kill -TERM "$KV_PID" 2>/dev/null || true
  [[ -n $KVA_PID ]] && kill -TERM "$KVA_PID" 2>/dev/null || true
  [[ -n $MC_PID ]] && kill "$MC_PID" 2>/dev/null || true
  [[ -n $ECHO_PID ]] && kill "$ECHO_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
AUTH_FILE=$WORK/auth
(umask 077 && echo "bench client $(openssl rand -hex 32)" >"$AUTH_FILE")

start_servers() {
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --protected-mode yes --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  "$KVSERVER" --listen=127.0.0.1:$KV_PORT --metrics= --arena_bytes=$((1 << 30)) \
    >"$WORK/kvserver.log" 2>&1 &
  KV_PID=$!
  if ((AUTH)); then
    "$KVSERVER" --listen=127.0.0.1:$KVA_PORT --metrics= --arena_bytes=$((1 << 30)) \
      --auth_file="$AUTH_FILE" >"$WORK/kvserver-auth.log" 2>&1 &
    KVA_PID=$!
  else
    echo listening >"$WORK/kvserver-auth.log"
  fi
  # memcached as root needs -u; 1 GiB of memory, 4 worker threads (its default), no UDP.
  memcached -l 127.0.0.1 -p "$MC_PORT" -U 0 -m 1024 -t 4 -u "$(id -un)" >"$WORK/memcached.log" 2>&1 &
  MC_PID=$!
  "$ECHO_SERVER" --listen=127.0.0.1:$ECHO_PORT >"$WORK/echo.log" 2>&1 &
  ECHO_PID=$!
  for _ in $(seq 100); do
    if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && grep -q "listening" "$WORK/kvserver.log" &&
      grep -q "listening" "$WORK/kvserver-auth.log" &&
      grep -q "listening" "$WORK/echo.log" &&
      (exec 3<>"/dev/tcp/127.0.0.1/$MC_PORT") 2>/dev/null; then
      return
    fi
    sleep 0.1
  done
  echo "compare: servers did not start:" >&2
  cat "$WORK/redis.log" "$WORK/kvserver.log" "$WORK/memcached.log" "$WORK/echo.log" >&2
  exit 1
}
stop_servers() {
  kill "$REDIS_PID" "$MC_PID" "$ECHO_PID"; kill -TERM "$KV_PID" ${KVA_PID:+"$KVA_PID"}
  wait "$REDIS_PID" "$KV_PID" ${KVA_PID:+"$KVA_PID"} "$MC_PID" "$ECHO_PID" 2>/dev/null || true
  REDIS_PID=""; KV_PID=""; KVA_PID=""; MC_PID=""; ECHO_PID=""
}

# field(file, "[READ]", "99thPercentileLatency(us)")
field() { awk -F', ' -v s="$2" -v k="$3" '$1==s && $2==k {print $3}' "$1"; }

CSV=$OUT/ycsb-compare.csv
echo "run,workload,store,throughput_ops,read_p50_us,read_p99_us,update_p50_us,update_p99_us,scan_p50_us,scan_p99_us,errors" >"$CSV"
log "unloadkv vs Redis and memcached, with the loopback limit: $RECORDS records, $OPS operations ($SCAN_OPS for E), $THREADS client threads, loopback, $RUNS runs"
for run in $(seq "$RUNS"); do
for w in ${WORKLOADS//,/ }; do
  [[ -f $WL/workload$w ]] || { echo "compare: no workload '$w'" >&2; exit 2; }
  ops=$OPS
  [[ $w == e ]] && ops=$SCAN_OPS
  # A fresh pair of servers per workload, so that no workload sees another's inserts.
  start_servers
  stores="echo redis memcached unloadkv"
  [[ $w == e ]] && stores="redis unloadkv"  # no scans on memcached or the limit
  ((AUTH)) && stores="$stores unloadkv_auth"
  for store in $stores; do
    common=(-P "$WL/workload$w" -p recordcount="$RECORDS" -p operationcount="$ops"
            -threads "$THREADS" -p hdrhistogram.percentiles=50,95,99
            -p redis.port="$REDIS_PORT" -p unloadkv.server=127.0.0.1:$KV_PORT
            -p unloadkv.policy="$POLICY" -p memcached.port="$MC_PORT" -p echo.port="$ECHO_PORT")
    binding=$store
    if [[ $store == unloadkv_auth ]]; then
      binding=unloadkv
      common+=(-p unloadkv.server=127.0.0.1:$KVA_PORT -p unloadkv.auth_file="$AUTH_FILE")
    fi
    log "run $run/$RUNS, workload $w: loading $store"
    "$YCSB" load "$binding" "${common[@]}" >"$WORK/load-$w-$store.txt"
    log "run $run/$RUNS, workload $w: running $store"
    "$YCSB" run "$binding" "${common[@]}" -s -p status.interval=5 >"$WORK/run-$w-$store.txt"
    r=$WORK/run-$w-$store.txt
    errors=$(awk -F', ' '$2=="Return=ERROR" {s+=$3} END {print s+0}' "$r")
    read_op="[READ]"
    echo "$run,$w,$store,$(field "$r" "[OVERALL]" "Throughput(ops/sec)"),$(field "$r" "$read_op" "50thPercentileLatency(us)"),$(field "$r" "$read_op" "99thPercentileLatency(us)"),$(field "$r" "[UPDATE]" "50thPercentileLatency(us)"),$(field "$r" "[UPDATE]" "99thPercentileLatency(us)"),$(field "$r" "[SCAN]" "50thPercentileLatency(us)"),$(field "$r" "[SCAN]" "99thPercentileLatency(us)"),$errors" >>"$CSV"
    cp "$r" "$OUT/run-$w-$store-$run.txt"
  done
  stats=$("$ROOT/client/kvclient" --server=127.0.0.1:$KV_PORT stats 2>/dev/null || true)
  echo "$w $(echo "$stats" | awk '/^offload_writes/ {o=$2} /^unload_writes/ {u=$2} END {print o+0, u+0}')" >>"$WORK/split.txt"
  stop_servers
done
done

# The side-by-side table: throughput and the first latency column each workload has.
python3 - "$CSV" "$WORK/split.txt" "$OUT/ycsb-compare.txt" "$WORK/throughput.dat" \
  "$WORK/median.csv" <<'PY'
import csv, sys
import statistics
rows = list(csv.DictReader(open(sys.argv[1])))
split = {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in open(sys.argv[2])}  # last run
def num(x): return float(x) if x else None
runs = {}  # run -> workload -> store -> row
for r in rows: runs.setdefault(r["run"], {}).setdefault(r["workload"], {})[r["store"]] = r
# Each figure is the median over the runs; a latency column of a store keeps its median too.
by = {}
for w in {r["workload"] for r in rows}:
    for s in {r["store"] for r in rows if r["workload"] == w}:
        rs = [runs[k][w][s] for k in runs if s in runs[k].get(w, {})]
        med = dict(rs[0])
        for col in rs[0]:
            if col in ("run", "workload", "store", "errors"): continue
            vals = [num(x[col]) for x in rs if x[col] not in ("", None)]
            if vals: med[col] = str(statistics.median(vals))
        med["errors"] = str(sum(int(x["errors"]) for x in rs))
        by.setdefault(w, {})[s] = med
def tput(w, s): return num(by[w][s]["throughput_ops"]) if s in by[w] else None
def ratio_of(w, a, b):  # unloadkv over `b`, per run: median and min-max
    rs = [num(runs[k][w][a]["throughput_ops"]) / num(runs[k][w][b]["throughput_ops"])
          for k in runs if a in runs[k].get(w, {}) and b in runs[k].get(w, {})]
    return (statistics.median(rs), min(rs), max(rs)) if rs else None
def ratio(w, b):
    r = ratio_of(w, "unloadkv", b)
    if not r: return "    -          "
    return "%4.2fx %4.2f-%4.2f" % r if len(runs) > 1 else "%5.2fx" % r[0]
out = []
out.append("YCSB on loopback, same machine, same client threads (measured; medians of %d runs, "
           "ratios with their min-max)" % len(runs))
out.append("%-3s | %9s %9s %9s %9s | %-15s %-15s %-15s | %-20s %-20s %-20s | %s" % (
    "wl", "unloadkv", "redis", "memcached", "limit", "/redis", "/memc", "/limit",
    "unloadkv p50/p99 us", "redis p50/p99 us", "memcached p50/p99", "unloadkv writes offload/unload"))
dat = []
for w in sorted(by):
    u, r, m = by[w].get("unloadkv"), by[w].get("redis"), by[w].get("memcached")
    if not u or not r: continue
    lat = "read" if u["read_p50_us"] else "scan"
    def pp(x): return "%s %.0f / %.0f" % (lat, num(x[lat + "_p50_us"]), num(x[lat + "_p99_us"])) if x and x[lat + "_p50_us"] else "-"
    o, ul = split.get(w, (0, 0))
    tu, tr, tm, tl = tput(w, "unloadkv"), tput(w, "redis"), tput(w, "memcached"), tput(w, "echo")
    out.append("%-3s | %9.0f %9.0f %9s %9s | %-15s %-15s %-15s | %-20s %-20s %-20s | %d / %d" % (
        w.upper(), tu, tr, "%.0f" % tm if tm else "-", "%.0f" % tl if tl else "-",
        ratio(w, "redis"), ratio(w, "memcached"), ratio(w, "echo"), pp(u), pp(r), pp(m), o, ul))
    for s in ("unloadkv", "redis", "memcached", "echo"):
        if s in by[w] and int(by[w][s]["errors"]):
            out.append("    errors: %s %s" % (s, by[w][s]["errors"]))
    dat.append("%s %s %s %s %s" % (w.upper(), *["%.0f" % t if t else "NaN" for t in (tu, tr, tm, tl)]))
if any("unloadkv_auth" in by[w] for w in by):
    out.append("")
    out.append("authentication on / off (unloadkv with an auth file over the plain one, run in turn): "
               "throughput ratio, median and min-max over the runs")
    for w in sorted(by):
        r = ratio_of(w, "unloadkv_auth", "unloadkv")
        if r:
            out.append("%-3s | %5.3fx %5.3f-%5.3f" % (w.upper(), *r))
out.append("/redis, /memc: unloadkv's throughput over Redis's and memcached's (>= 1.0 is the target on "
           "A, B, C, F); /limit: over the loopback limit (echo_server: the same request and reply "
           "sizes, no work; >= 0.6 is the target)")
open(sys.argv[3], "w").write("\n".join(out) + "\n")
open(sys.argv[4], "w").write("\n".join(dat) + "\n")
with open(sys.argv[5], "w") as f:  # the medians, in the layout of the CSV without its run column
    cols = [c for c in rows[0] if c != "run"]
    f.write(",".join(cols) + "\n")
    for w in sorted(by):
        for s in sorted(by[w]):
            f.write(",".join(by[w][s][c] for c in cols) + "\n")
print("\n".join(out))
PY

# Plots: throughput bars, and p50/p99 per workload and store.
gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set datafile separator whitespace
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top right
set ylabel "throughput (ops/s)"
set title "YCSB throughput, $THREADS client threads, loopback (measured)"
set output "$OUT/ycsb-throughput.png"
plot "$WORK/throughput.dat" using 2:xtic(1) title "unloadkv", \
     "" using 3 title "redis", "" using 4 title "memcached", "" using 5 title "loopback limit"
set datafile separator ","
set ylabel "latency (us)"
set logscale y
set title "YCSB read (A, B, C, F) and scan (E) latency p50 / p99 (measured)"
set output "$OUT/ycsb-latency.png"
plot "< awk -F, 'NR>1 && \$2==\"unloadkv\" {print \$1\",\"(\$4?\$4:\$8)\",\"(\$5?\$5:\$9)}' $WORK/median.csv" using 2:xtic(1) title "unloadkv p50", \
     "" using 3 title "unloadkv p99", \
     "< awk -F, 'NR>1 && \$2==\"redis\" {print \$1\",\"(\$4?\$4:\$8)\",\"(\$5?\$5:\$9)}' $WORK/median.csv" using 2 title "redis p50", \
     "" using 3 title "redis p99"
GP
log "wrote $OUT/ycsb-compare.txt, $CSV, $OUT/ycsb-throughput.png, $OUT/ycsb-latency.png"

# The pipelined table.
if ((PIPELINE_OPS > 0)); then
  start_servers
  log "pipelined: 1, 16, 64 in flight, $PIPELINE_OPS requests each"
  "$PIPELINE_BENCH" --unloadkv=127.0.0.1:$KV_PORT --redis=127.0.0.1:$REDIS_PORT \
    --policy="$POLICY" --ops="$PIPELINE_OPS" --csv="$OUT/ycsb-pipeline.csv" | tee "$OUT/ycsb-pipeline.txt"
  stop_servers
  log "wrote $OUT/ycsb-pipeline.txt, $OUT/ycsb-pipeline.csv"
fi

# The thread sweep: workload $SWEEP_WORKLOAD at each thread count, every system, fresh servers
# per thread count (each loaded with 8 threads).
[[ $SWEEP == none ]] && exit 0
SWEEP_CSV=$OUT/ycsb-sweep.csv
echo "threads,store,throughput_ops,read_p99_us,update_p99_us,errors" >"$SWEEP_CSV"
for t in ${SWEEP//,/ }; do
  start_servers
  for store in echo redis memcached unloadkv; do
    common=(-P "$WL/workload$SWEEP_WORKLOAD" -p recordcount="$RECORDS" -p operationcount="$OPS"
            -p hdrhistogram.percentiles=50,99 -p redis.port="$REDIS_PORT"
            -p unloadkv.server=127.0.0.1:$KV_PORT -p unloadkv.policy="$POLICY"
            -p memcached.port="$MC_PORT" -p echo.port="$ECHO_PORT")
    log "sweep: $t threads, $store"
    "$YCSB" load "$store" "${common[@]}" -threads 8 >"$WORK/sweep-load.txt"
    r=$WORK/sweep-$t-$store.txt
    "$YCSB" run "$store" "${common[@]}" -threads "$t" >"$r"
    errors=$(awk -F', ' '$2=="Return=ERROR" {s+=$3} END {print s+0}' "$r")
    echo "$t,$store,$(field "$r" "[OVERALL]" "Throughput(ops/sec)"),$(field "$r" "[READ]" "99thPercentileLatency(us)"),$(field "$r" "[UPDATE]" "99thPercentileLatency(us)"),$errors" >>"$SWEEP_CSV"
  done
  stop_servers
done
python3 - "$SWEEP_CSV" "$OUT/ycsb-sweep.txt" "$SWEEP_WORKLOAD" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
stores = ["unloadkv", "redis", "memcached", "echo"]
by = {(int(r["threads"]), r["store"]): r for r in rows}
threads = sorted({t for t, _ in by})
out = ["Thread sweep, workload %s, loopback (measured): throughput ops/s (read p99 us)" % sys.argv[3].upper(),
       "%-7s | " % "threads" + " | ".join("%-20s" % (s if s != "echo" else "loopback limit") for s in stores)
       + " | unloadkv/redis  unloadkv/memcached"]
for t in threads:
    cells, tp = [], {}
    for s in stores:
        r = by.get((t, s))
        tp[s] = float(r["throughput_ops"]) if r and r["throughput_ops"] else None
        cells.append("%-20s" % ("%.0f (%s)" % (tp[s], r["read_p99_us"] or "-") if tp[s] else "-"))
    ratio = lambda a, b: "%.2fx" % (tp[a] / tp[b]) if tp[a] and tp[b] else "-"
    out.append("%-7d | " % t + " | ".join(cells) + " | %-14s  %s" % (ratio("unloadkv", "redis"), ratio("unloadkv", "memcached")))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set datafile separator ","
set logscale x 2
set key top left
set xlabel "client threads"
set title "Workload ${SWEEP_WORKLOAD^^} throughput against client threads, loopback (measured)"
set ylabel "throughput (ops/s)"
set yrange [0:*]
set output "$OUT/ycsb-sweep-throughput.png"
plot for [s in "unloadkv redis memcached echo"] "< awk -F, -v s=".s." 'NR>1 && \$2==s' $SWEEP_CSV" \
     using 1:3 with linespoints title (s eq "echo" ? "loopback limit" : s)
set logscale y
set yrange [*:*]
set ylabel "read p99 (us)"
set title "Workload ${SWEEP_WORKLOAD^^} read p99 against client threads, loopback (measured)"
set output "$OUT/ycsb-sweep-p99.png"
plot for [s in "unloadkv redis memcached echo"] "< awk -F, -v s=".s." 'NR>1 && \$2==s' $SWEEP_CSV" \
     using 1:4 with linespoints title (s eq "echo" ? "loopback limit" : s)
GP
log "wrote $OUT/ycsb-sweep.txt, $SWEEP_CSV, $OUT/ycsb-sweep-throughput.png, $OUT/ycsb-sweep-p99.png"
