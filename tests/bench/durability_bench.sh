#!/usr/bin/env bash
# durability_bench: PUT throughput and latency of a single kvserver logging to disk under each
# --fsync policy, next to a real redis-server with appendonly yes and the matching appendfsync,
# both with their data on the same file system, alternated in one run (docs/durability.md).
# The load is YCSB's load phase (inserts of 1 KiB records) from the same runner for both, at 1,
# 16 and 64 client threads; unloadkv's records per fsync (the group commit's batch) beside; and
# the disk's fdatasync latency under the 16- and 64-thread loads, which bounds `always`. Each figure is the median of --runs fresh pairs of servers.
# Then recovery: a node holding --recovery_mib of live values (15,000-byte values) is stopped
# and started again; the time until it serves, and the log's MB/s, next to the disk's
# sequential read speed of the same files (page cache dropped before each, when allowed).
# Then rejoin: a cluster of two (a real etcd), the backup SIGKILLed and away for --away_s while
# writes go on, restarted with its data dir (delta catch-up) and then without (a whole
# transfer): the time until it is a backup again and the value bytes sent.
#   bazel run -c opt //tests/bench:durability_bench -- [--records N] [--runs 3] [--dir DIR]
#       [--recovery_mib 1024] [--rejoin_records 50000] [--away_s 10] [--only throughput|recovery|rejoin]
# Pairs: never / appendfsync no, interval:1000 / everysec, always / always.
set -euo pipefail

RECORDS=5000
RUNS=3
DIR=""
RECOVERY_MIB=1024
REJOIN_RECORDS=50000
AWAY_S=10
ONLY=""
while (($#)); do
  case "$1" in
    --records) RECORDS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --recovery_mib) RECOVERY_MIB=$2; shift 2 ;;
    --rejoin_records) REJOIN_RECORDS=$2; shift 2 ;;
    --away_s) AWAY_S=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) echo "durability_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$ONLY" in
  "" | throughput | recovery | rejoin) ;;
  *) echo "durability_bench: --only takes throughput, recovery or rejoin" >&2; exit 2 ;;
esac
for v in "$RECORDS" "$RUNS" "$RECOVERY_MIB" "$REJOIN_RECORDS" "$AWAY_S"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "durability_bench: counts must be positive integers" >&2; exit 2; }
done
command -v redis-server >/dev/null || {
  echo "durability_bench: redis-server not found; install it with: sudo apt-get install redis-server" >&2
  exit 1
}
if [[ -x server/kvserver ]]; then ROOT=$PWD; else ROOT="$0.runfiles/unloadkv"; fi
YCSB=$ROOT/client/ycsb/ycsb
KVSERVER=$ROOT/server/kvserver
KVCLIENT=$ROOT/client/kvclient
WL=$ROOT/client/ycsb/workloads/workloada
BASE=${DIR:-$(mktemp -d)}
mkdir -p "$BASE"
WORK=$(mktemp -d "$BASE/durability-bench.XXXXXX")
log() { printf '[durability_bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PID=""
KV_PID=""
ETCD_PID=""
declare -A NODE_PID=()
cleanup() {
  local p
  [[ -n $REDIS_PID ]] && kill "$REDIS_PID" 2>/dev/null || true
  [[ -n $KV_PID ]] && kill -TERM "$KV_PID" 2>/dev/null || true
  for p in "${NODE_PID[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  [[ -n $ETCD_PID ]] && kill "$ETCD_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# field(file, "[INSERT]", "99thPercentileLatency(us)")
field() { awk -F', ' -v s="$2" -v k="$3" '$1==s && $2==k {print $3}' "$1"; }

# run_pair RUN KV_POLICY REDIS_POLICY THREADS: one fresh server of each, loaded in turn.
run_pair() {
  local run=$1 kvp=$2 rp=$3 threads=$4 port mport store out per_sync=""
  rm -rf "$WORK/kv" "$WORK/redis" && mkdir -p "$WORK/kv" "$WORK/redis"
  for store in redis unloadkv; do
    port=$(free_port)
    if [[ $store == redis ]]; then
      redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes \
        --appendfsync "$rp" --dir "$WORK/redis" --logfile "$WORK/redis.log" &
      REDIS_PID=$!
      for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    else
      mport=$(free_port)
      "$KVSERVER" --listen=127.0.0.1:$port --metrics=127.0.0.1:$mport --arena_bytes=$((256 << 20)) \
        --data_dir="$WORK/kv" --fsync="$kvp" >"$WORK/kvserver.log" 2>&1 &
      KV_PID=$!
      for _ in $(seq 100); do grep -q "listening" "$WORK/kvserver.log" && break; sleep 0.1; done
    fi
    out=$WORK/load-$store.txt
    "$YCSB" load "$store" -P "$WL" -p recordcount="$RECORDS" -threads "$threads" \
      -p hdrhistogram.percentiles=50,99 -p redis.port="$port" \
      -p unloadkv.server=127.0.0.1:$port >"$out"
    # The group commit's batch: records acknowledged per fsync of the log.
    [[ $store == unloadkv ]] && per_sync=$(curl -s "http://127.0.0.1:$mport/metrics" | awk '
      $1 == "unloadkv_log_records_total" { r = $2 } $1 == "unloadkv_log_syncs_total" { s = $2 }
      END { if (s > 0) printf "%.1f", r / s }')
    echo "$run,$kvp,$threads,$store,$(field "$out" "[OVERALL]" "Throughput(ops/sec)"),$(field "$out" "[INSERT]" "50thPercentileLatency(us)"),$(field "$out" "[INSERT]" "99thPercentileLatency(us)"),$(awk -F', ' '$1=="[INSERT]" && $2=="Return=ERROR" {s+=$3} END {print s+0}' "$out"),$per_sync" >>"$WORK/results.csv"
    if [[ $store == redis ]]; then
      kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
    else
      kill -TERM "$KV_PID"; wait "$KV_PID" 2>/dev/null || true; KV_PID=""
    fi
  done
}

# fsync_under_load THREADS: the disk's fdatasync latency (8 KiB appended before each) while a
# `never` node takes the load phase at THREADS: what an `always` write waits for at least once
# on top of a `never` write's path. A run of its own, not in the table (the probe adds load).
fsync_under_load() {
  local port probe_pid i
  rm -rf "$WORK/kv" && mkdir -p "$WORK/kv"
  port=$(free_port)
  "$KVSERVER" --listen=127.0.0.1:$port --metrics= --arena_bytes=$((256 << 20)) \
    --data_dir="$WORK/kv" --fsync=never >"$WORK/kvserver.log" 2>&1 &
  KV_PID=$!
  wait_line "$WORK/kvserver.log" listening 10 || { log "kvserver did not start"; exit 1; }
  rm -f "$WORK/probe.stop" "$WORK/probe.ready"
  python3 - "$WORK/probe.dat" "$WORK/probe.stop" "$1" >>"$WORK/fsync.csv" <<'PY' &
import os, sys, time
path, stop, threads = sys.argv[1:]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
lat, end = [], time.monotonic() + 300  # bounded
open(os.path.dirname(path) + "/probe.ready", "w").close()
while not os.path.exists(stop) and time.monotonic() < end:
    os.write(fd, b"x" * 8192)
    t = time.perf_counter()
    os.fdatasync(fd)
    lat.append(time.perf_counter() - t)
os.close(fd)
os.unlink(path)
lat.sort()
if lat:
    print("%s,%d,%.0f,%.0f" % (threads, len(lat), lat[len(lat) // 2] * 1e6, lat[len(lat) * 9 // 10] * 1e6))
PY
  probe_pid=$!
  for ((i = 0; i < 1000; i++)); do [[ -e $WORK/probe.ready ]] && break; sleep 0.01; done
  # At least 20,000 inserts: long enough for a few thousand probes.
  "$YCSB" load unloadkv -P "$WL" -p recordcount=$((RECORDS > 20000 ? RECORDS : 20000)) -threads "$1" \
    -p unloadkv.server=127.0.0.1:$port >/dev/null
  touch "$WORK/probe.stop"
  wait "$probe_pid"
  kill -TERM "$KV_PID"; wait "$KV_PID" 2>/dev/null || true; KV_PID=""
}

# Monotonic seconds, with a fraction.
now() { python3 -c 'import time; print("%.3f" % time.monotonic())'; }
# Drops the page cache, so that reads come from the disk; false when not allowed.
drop_caches() { sync && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; }
# wait_line FILE PATTERN SECONDS: until FILE has a line matching PATTERN (bounded).
wait_line() {
  local i
  for ((i = 0; i < $3 * 100; i++)); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done
  return 1
}

# Reads files sequentially in 4 MiB blocks, bypassing the page cache when the file system
# allows (O_DIRECT): the disk's own sequential read speed.
read_disk() {
  local f
  for f in "$@"; do
    dd if="$f" of=/dev/null bs=4M iflag=direct status=none 2>/dev/null ||
      dd if="$f" of=/dev/null bs=4M status=none
  done
}

# timed_start DATA_DIR LOG ARENA: starts a kvserver on DATA_DIR, prints the seconds until it
# listens (bounded: 600 s), and stops it; fails (the server stopped) when it does not listen.
# Runs in a command substitution: it stops its own server on every path.
timed_start() {
  local port t0 pid ok=0
  port=$(free_port)
  t0=$(now)
  "$KVSERVER" --listen=127.0.0.1:$port --metrics= --arena_bytes="$3" --data_dir="$1" >"$2" 2>&1 &
  pid=$!
  wait_line "$2" listening 600 && python3 -c "print($(now) - $t0)" || ok=1
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  ((ok == 0)) || { log "kvserver did not start"; cat "$2" >&2; }
  return $ok
}
# timed_read FILES...: the seconds a direct sequential read of FILES takes.
timed_read() {
  local t0
  t0=$(now)
  read_disk "$@"
  python3 -c "print($(now) - $t0)"
}

recovery_phase() {
  local dir=$WORK/recovery port mport records empty_s read_s read2_s serve_s bytes cold=yes line
  rm -rf "$dir" && mkdir -p "$dir/kv" "$dir/empty"
  local arena=$(((RECOVERY_MIB * 3 / 2 + 64) << 20))
  records=$((RECOVERY_MIB * 1048576 / 15000))
  port=$(free_port)
  mport=$(free_port)
  log "recovery: loading $records values of 15,000 bytes (${RECOVERY_MIB} MiB) into a node (--fsync=interval:1000)"
  "$KVSERVER" --listen=127.0.0.1:$port --metrics=127.0.0.1:$mport --arena_bytes=$arena --data_dir="$dir/kv" \
    --fsync=interval:1000 >"$dir/load.log" 2>&1 &
  KV_PID=$!
  wait_line "$dir/load.log" listening 30 || { log "kvserver did not start"; cat "$dir/load.log" >&2; exit 1; }
  "$YCSB" load unloadkv -P "$WL" -p recordcount="$records" -p fieldcount=1 -p fieldlength=15000 \
    -threads 16 -p unloadkv.server=127.0.0.1:$port >"$dir/ycsb.txt"
  # Compactions during the load, and the slowest insert: what a compaction holds up.
  curl -s "http://127.0.0.1:$mport/metrics" | awk '
    $1 == "unloadkv_log_compactions_total" { n = $2 }
    $1 == "unloadkv_log_compaction_seconds_total" { s = $2 } END { print n + 0 "," s + 0 }' \
    >"$WORK/compactions.csv"
  field "$dir/ycsb.txt" "[INSERT]" "MaxLatency(us)" >"$WORK/load-max-us.txt"
  kill -TERM "$KV_PID"; wait "$KV_PID" 2>/dev/null || true; KV_PID=""
  bytes=$(du -cb "$dir"/kv/shard-0/*.log | awk 'END { print $1 }')
  # Each step from a cold page cache. The same node started empty: what starting costs without
  # a log to replay (loading the binary and its libraries from the disk included). The disk's
  # read before and after the recovery: a virtual disk's host may cache what was read before,
  # so the faster of the two is the limit.
  drop_caches || cold=no
  empty_s=$(timed_start "$dir/empty" "$dir/empty.log" "$arena") || exit 1
  drop_caches || cold=no
  read_s=$(timed_read "$dir"/kv/shard-0/*.log)
  drop_caches || cold=no
  serve_s=$(timed_start "$dir/kv" "$dir/recover.log" "$arena") || exit 1
  line=$(grep -m1 "durability:" "$dir/recover.log")
  drop_caches || cold=no
  read2_s=$(timed_read "$dir"/kv/shard-0/*.log)
  read_s=$(python3 -c "print(min($read_s, $read2_s))")
  echo "$records,$bytes,$read_s,$serve_s,$empty_s,$cold" >"$WORK/recovery.csv"
  log "recovery: $line"
}

# A cluster of two for the rejoin phase: etcd, n1 (primary), n2; every start appends to its log.
ETCD_ADDR=""
start_etcd() {
  local client peer
  client=$(free_port); peer=$(free_port)
  ETCD_ADDR=127.0.0.1:$client
  etcd --name=bench --data-dir="$WORK/etcd" --listen-client-urls="http://$ETCD_ADDR" \
    --advertise-client-urls="http://$ETCD_ADDR" --listen-peer-urls="http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="bench=http://127.0.0.1:$peer" >"$WORK/etcd.log" 2>&1 &
  ETCD_PID=$!
  local i
  for ((i = 0; i < 100; i++)); do
    curl -s "http://$ETCD_ADDR/health" | grep -q true && return 0
    sleep 0.1
  done
  log "etcd did not start"; tail "$WORK/etcd.log" >&2; exit 1
}
start_node() {  # NAME DATA_DIR
  local port mport
  port=$(free_port); mport=$(free_port)
  "$KVSERVER" --etcd="$ETCD_ADDR" --cluster=bench --node="$1" --auth_file="$WORK/auth" \
    --listen=127.0.0.1:$port --metrics=127.0.0.1:$mport --arena_bytes=$REJOIN_ARENA \
    --lease_ttl_s=2 --data_dir="$2" --fsync=always >>"$WORK/$1.log" 2>&1 &
  NODE_PID[$1]=$!
  echo "127.0.0.1:$mport" >"$WORK/$1.metrics"
}
cluster_json() { "$KVCLIENT" --etcd="$ETCD_ADDR" --cluster=bench cluster status --json 2>/dev/null || true; }
# Until n2 is n1's backup again at an epoch above $1, nobody joining (bounded: 120 s).
wait_rejoined() {
  local i status epoch
  for ((i = 0; i < 12000; i++)); do
    status=$(cluster_json)
    epoch=$(grep -o '"epoch":[0-9]*' <<<"$status" | head -1 | cut -d: -f2)
    if [[ $status == *'"backups":["n2"]'* && $status == *'"joining":[]'* && ${epoch:-0} -gt $1 ]]; then
      return 0
    fi
    sleep 0.01
  done
  return 1
}
catchup_bytes() {
  curl -s "http://$(cat "$WORK/n1.metrics")/metrics" |
    awk '$1 == "unloadkv_catchup_bytes_total" { printf "%d", $2 }'
}

rejoin_phase() {
  # Room for the records (1 KiB values, each slot rounded up) three times over: 256 MiB at least.
  REJOIN_ARENA=$((REJOIN_RECORDS * 3 * 1024))
  ((REJOIN_ARENA >= 256 << 20)) || REJOIN_ARENA=$((256 << 20))
  start_etcd
  (umask 077 && {
    echo "app client $(openssl rand -hex 32)"
    echo "n1 node $(openssl rand -hex 32)"
    echo "n2 node $(openssl rand -hex 32)"
  } >"$WORK/auth")
  "$KVCLIENT" --etcd="$ETCD_ADDR" --cluster=bench cluster init --shards=1 --replicas=2 >/dev/null
  start_node n1 "$WORK/n1"
  local i
  for ((i = 0; i < 3000; i++)); do [[ $(cluster_json) == *'"primary":"n1"'* ]] && break; sleep 0.01; done
  start_node n2 "$WORK/n2"
  wait_rejoined 0 || { log "the cluster did not form"; exit 1; }
  local props=(-p unloadkv.etcd="$ETCD_ADDR" -p unloadkv.cluster=bench
    -p unloadkv.auth_file="$WORK/auth" -p unloadkv.user=app)
  log "rejoin: loading $REJOIN_RECORDS records of 1 KiB into the cluster of two"
  "$YCSB" load unloadkv -P "$WL" -p recordcount="$REJOIN_RECORDS" -threads 16 "${props[@]}" \
    >"$WORK/rejoin-load.txt"
  local mode epoch t0 t1 away bytes0 ops
  for mode in delta whole; do
    epoch=$(cluster_json | grep -o '"epoch":[0-9]*' | head -1 | cut -d: -f2)
    kill -KILL "${NODE_PID[n2]}"; wait "${NODE_PID[n2]}" 2>/dev/null || true
    log "rejoin ($mode): n2 SIGKILLed; writes go on for ${AWAY_S} s"
    t0=$(now)
    ops=0
    while python3 -c "import sys; sys.exit(0 if $(now) - $t0 < $AWAY_S else 1)"; do
      "$YCSB" run unloadkv -P "$WL" -p recordcount="$REJOIN_RECORDS" -p operationcount=2000 \
        -threads 8 "${props[@]}" >"$WORK/rejoin-run.txt"
      ops=$((ops + 2000))
    done
    [[ $mode == whole ]] && rm -rf "$WORK/n2"  # its data dir gone: a whole transfer
    bytes0=$(catchup_bytes)
    t0=$(now)
    start_node n2 "$WORK/n2"
    wait_rejoined "$epoch" || { log "n2 did not rejoin within 120 s"; tail -20 "$WORK/n2.log" >&2; exit 1; }
    t1=$(now)
    echo "$mode,$ops,$(python3 -c "print($t1 - $t0)"),$(($(catchup_bytes) - bytes0))" >>"$WORK/rejoin.csv"
  done
}

if [[ -z $ONLY || $ONLY == recovery ]]; then recovery_phase; fi
if [[ -z $ONLY || $ONLY == rejoin ]]; then
  command -v etcd >/dev/null || { echo "durability_bench: etcd not found; install it with: sudo apt-get install etcd-server" >&2; exit 1; }
  rejoin_phase
fi
[[ -z $ONLY || $ONLY == throughput ]] || RUNS=0

log "data on $(df -P "$WORK" | awk 'NR==2 {print $1 " (" $6 ")"}'), $RECORDS inserts of 1 KiB records per load, $RUNS runs"
for run in $(seq "$RUNS"); do
  for pair in "never no" "interval:1000 everysec" "always always"; do
    read -r kvp rp <<<"$pair"
    for threads in 1 16 64; do
      log "run $run/$RUNS: fsync $kvp / appendfsync $rp, $threads threads"
      run_pair "$run" "$kvp" "$rp" "$threads"
    done
  done
done
if ((RUNS > 0)); then
  for threads in 16 64; do
    log "the disk's fdatasync latency while a never node takes $threads threads' load"
    fsync_under_load "$threads"
  done
fi

python3 - "$WORK" <<'PY'
import os, statistics, sys
work = sys.argv[1]
if os.path.exists(work + "/recovery.csv"):
    records, size, read_s, serve_s, empty_s, cold = open(work + "/recovery.csv").read().strip().split(",")
    mb = int(size) / 1e6
    read_s, serve_s, empty_s = float(read_s), float(serve_s), float(empty_s)
    print("MEASURED recovery of a node holding %s values of 15,000 bytes: %.0f MB of log" % (records, mb))
    print("  disk read of the same files (the faster of a read before and after the recovery): %.2f s = %.0f MB/s%s" % (read_s, mb / read_s, "" if cold == "yes" else " (page cache NOT dropped: not allowed here)"))
    replay_s = serve_s - empty_s
    print("  start to serving: %.2f s; the same start with an empty data dir: %.2f s" % (serve_s, empty_s))
    print("  log replayed: %.0f MB in %.2f s = %.0f MB/s, %.0f%% of the disk's read speed" % (
        mb, replay_s, mb / replay_s, 100 * (mb / replay_s) / (mb / read_s)))
if os.path.exists(work + "/compactions.csv"):
    n, secs = open(work + "/compactions.csv").read().strip().split(",")
    print("  during that load: %s compactions of the log, %.2f s in all (built beside the appends); "
          "the longest insert took %.2f s" % (n, float(secs),
          float(open(work + "/load-max-us.txt").read().strip() or 0) / 1e6))
if os.path.exists(work + "/rejoin.csv"):
    print("MEASURED rejoin of a backup SIGKILLed while writes went on (cluster of two, --fsync=always):")
    for line in open(work + "/rejoin.csv"):
        mode, ops, secs, sent = line.strip().split(",")
        print("  %-6s ops while away: %6s; restart to backup again: %.2f s; value bytes sent: %s" % (
            mode, ops, float(secs), sent))
if not os.path.exists(work + "/results.csv"):
    sys.exit(0)
rows = [l.strip().split(",") for l in open(work + "/results.csv")]
by = {}
for run, policy, threads, store, tput, p50, p99, errors, per_sync in rows:
    by.setdefault((policy, threads, store), []).append(
        (float(tput), float(p50), float(p99), int(errors), float(per_sync) if per_sync else 0.0))
print("MEASURED on this machine; medians over %d runs, min-max of unloadkv/Redis in brackets" % len({r[0] for r in rows}))
print("%-22s %-7s | %12s %8s %8s %9s | %12s %8s %8s | %s" % ("fsync", "threads", "unloadkv op/s", "p50 us", "p99 us", "rec/fsync", "Redis op/s", "p50 us", "p99 us", "throughput unloadkv/Redis"))
redis_name = {"never": "no", "interval:1000": "everysec", "always": "always"}
med = lambda xs, i: statistics.median(x[i] for x in xs)
for policy in ("never", "interval:1000", "always"):
    for threads in ("1", "16", "64"):
        kv = by[(policy, threads, "unloadkv")]
        rd = by[(policy, threads, "redis")]
        ratios = [k[0] / r[0] for k, r in zip(kv, rd)]
        errors = sum(x[3] for x in kv + rd)
        print("%-22s %-7s | %12.0f %8.0f %8.0f %9s | %12.0f %8.0f %8.0f | %.2fx [%.2f-%.2f]%s" % (
            policy + "/" + redis_name[policy], threads, med(kv, 0), med(kv, 1), med(kv, 2),
            "%.1f" % med(kv, 4) if med(kv, 4) else "-", med(rd, 0), med(rd, 1), med(rd, 2),
            statistics.median(ratios), min(ratios), max(ratios),
            "  ERRORS: %d" % errors if errors else ""))
print("unloadkv always / never (medians):", ", ".join(
    "%s threads %.2fx" % (t, med(by[("always", t, "unloadkv")], 0) / med(by[("never", t, "unloadkv")], 0))
    for t in ("1", "16", "64")))
if os.path.exists(work + "/fsync.csv"):
    for line in open(work + "/fsync.csv"):
        threads, n, p50, p90 = line.strip().split(",")
        never_us = int(threads) / med(by[("never", threads, "unloadkv")], 0) * 1e6
        print("  at %s threads: a never write takes %.0f us (threads / op/s); the disk's fdatasync "
              "under that load, which an always write waits for at least once: p50 %s us, p90 %s us (%s probes)" % (
                  threads, never_us, p50, p90, n))
PY
