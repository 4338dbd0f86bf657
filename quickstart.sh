#!/usr/bin/env bash
# unloadkv quick start. Installs the Debian packages that are missing, then:
#   ./quickstart.sh demo   builds kvserver and kvclient, runs a KV workload on embedded defaults,
#                          then a short MODELED run on the simulated fabric (docs/sim-kv.md)
#   ./quickstart.sh cluster  a local etcd and three kvservers: replication, SIGKILL of the
#                            primary under load, failover, rejoin, a whole-cluster restart,
#                            a fourth node taking its share under load, a shard split and
#                            merged back (docs/cluster.md)
#   ./quickstart.sh test   builds and runs the whole test suite (what CI runs)
#   ./quickstart.sh package [--out=DIR | --prefix=DIR]  the Debian package
#                          unloadkv_VERSION_amd64.deb, or the same files installed under DIR
#                          (docs/build.md, "Packages"; docs/sdk.md)
# Idempotent; needs root or sudo for apt-get only when something is missing.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms g++
  libabsl-dev libprotobuf-dev protobuf-compiler libgflags-dev libgtest-dev libgmock-dev
  prometheus-cpp-dev libibverbs-dev rdma-core libbenchmark-dev
  clang libclang-rt-14-dev gnuplot-nox redis-server libhiredis-dev
  etcd-server libcurl4-openssl-dev curl prometheus python3 python3-kubernetes chromium
  memcached libmemcached-dev linux-perf strace libssl-dev openssl zlib1g-dev
  dpkg-dev lintian help2man make cmake pkgconf python3-dev pybind11-dev python3-pytest
)

log() { printf '[quickstart %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

install_missing() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    log "all ${#PACKAGES[@]} Debian packages present"
    return
  fi
  log "installing: ${missing[*]}"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# Bazel's own progress lines stay on stderr; results are summarized by us.
BAZEL=(bazel)

# The main job: a kvserver on embedded defaults (soft transport, loopback), a short mixed
# workload through the SDK (kvclient load), the per-path counters from /metrics, a clean stop.
KV_ADDR=127.0.0.1:7070
METRICS_ADDR=127.0.0.1:9464
run_demo() {
  log "building kvserver and kvclient (first build takes a few minutes)"
  "${BAZEL[@]}" build -c opt //server:kvserver //client:kvclient
  local bin line
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
  # Globals, not locals: the EXIT trap runs after this function returned.
  DEMO_DIR=$(mktemp -d -t unloadkv-demo.XXXXXX)
  SERVER_PID=
  stop_demo() {
    if [[ -n ${SERVER_PID:-} ]]; then
      kill -KILL "$SERVER_PID" 2>/dev/null || true
      wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "${DEMO_DIR:-}"
  }
  trap stop_demo EXIT
  mkfifo "$DEMO_DIR/out"
  "$bin/server/kvserver" --listen="$KV_ADDR" --metrics="$METRICS_ADDR" >"$DEMO_DIR/out" &
  SERVER_PID=$!
  exec 4<"$DEMO_DIR/out"
  while IFS= read -r -t 30 line <&4; do  # start-up lines, then on to the workload
    printf '%s\n' "$line"
    [[ $line == *"metrics at"* ]] && break
  done
  [[ $line == *"metrics at"* ]] || { log "kvserver did not start (see its error above)"; exit 1; }
  log "live status page while the demo runs: http://$METRICS_ADDR/status (figures: /status.json)"
  log "a mixed workload through the SDK: 60% GET, 40% PUT of 1 KiB values over 20000 keys"
  "$bin/client/kvclient" --server="$KV_ADDR" load --ops=200000 --in_flight=32 --keys=20000 \
    --value_size=1024 --read_fraction=0.6
  log "the same values through the write engine (--policy=adaptive,inline:0): offload or unload"
  "$bin/client/kvclient" --server="$KV_ADDR" load --ops=50000 --in_flight=32 --keys=20000 \
    --value_size=1024 --read_fraction=0.6 --policy=adaptive,inline:0
  log "per-path value-write counters from http://$METRICS_ADDR/metrics:"
  exec 3<>"/dev/tcp/${METRICS_ADDR%:*}/${METRICS_ADDR#*:}"
  printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  grep -E '^unloadkv_(value_writes_total|unload_applied_writes_total|keys|arena_used_bytes)' <&3 || true
  exec 3<&-
  log "stopping kvserver with SIGTERM"
  kill -TERM "$SERVER_PID"
  cat <&4
  exec 4<&-
  wait "$SERVER_PID"
  SERVER_PID=
  run_sim_demo
  rm -rf "$DEMO_DIR"
  trap - EXIT
}

# Why the engine exists, in one short MODELED run: the same kvserver and SDK code on the
# simulated fabric (docs/sim-kv.md), where the target NIC's translation cache can miss. On the
# soft transport above there is no such cache, and the adaptive policy sends values of up to
# 4 KiB inline in the PUT (there the engine's write costs more than the server's copy), so the
# counters above show them as path="inline".
run_sim_demo() {
  log "MODELED: YCSB workload A on the simulated fabric, 256 MiB of values (16x the reach of the"
  log "modeled NIC's translation cache): offload-only, unload-only and adaptive (about 2 minutes)"
  "${BAZEL[@]}" build -c opt //tests/sim:sim_compare
  local bin out="$DEMO_DIR/sim"
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
  mkdir "$out"
  (cd "$bin/tests/sim/sim_compare.runfiles/unloadkv" &&
    "$bin/tests/sim/sim_compare" --sizes=large --large_records=262144 --workloads=load,a \
      --policies=offload,unload,adaptive --bound=false --operations=400000 --out_dir="$out" \
      >/dev/null)
  awk -F, '$5 == "a" { ops[$4] = $8; share[$4] = $15 }
    END {
      if (!("offload" in ops) || !("unload" in ops) || !("adaptive" in ops)) { print "no result"; exit 1 }
      printf "MODELED, workload A over 262144 records of 1 KiB, 8 clients:\n"
      for (i = 1; i <= 3; i++) {
        p = i == 1 ? "offload" : i == 2 ? "unload" : "adaptive"
        printf "  %-8s %.2f Mops/s  %.2fx offload-only  %3.0f%% of value writes unloaded\n",
          p, ops[p] / 1e6, ops[p] / ops["offload"], 100 * share[p]
      }
    }' "$out/sim_compare.csv"
  log "where the gain comes from and where it stops: docs/sim-kv.md;"
  log "the whole comparison (A-F, two sizes): bazel run -c opt //tests/sim:sim_compare"
}

# The cluster demo (docs/cluster.md): a local etcd and three kvservers on loopback, four shards
# replicated three times; a load through the SDK; SIGKILL of the primary in the middle; the
# map before and after; the killed node restarted, rejoining by state transfer; then every
# node SIGKILLed at once and restarted from its data dir, every key back
# (docs/durability.md); then automatic placement turned on and a fourth node started under
# load: the placer moves its share of the roles onto it with no command; all stopped.
ETCD_ADDR=127.0.0.1:12379
ETCD_PEER=127.0.0.1:12380
CLUSTER=demo
run_cluster() {
  log "building kvserver and kvclient (first build takes a few minutes)"
  "${BAZEL[@]}" build -c opt //server:kvserver //client:kvclient
  local bin i
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
  # Globals, not locals: the EXIT trap runs after this function returned.
  CLUSTER_DIR=$(mktemp -d -t unloadkv-cluster.XXXXXX)
  ETCD_PID=
  LOAD_PID=
  declare -gA NODE_PID=()
  stop_all() {
    local p
    for p in "${NODE_PID[@]}" ${LOAD_PID:-} ${ETCD_PID:-}; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${NODE_PID[@]}" ${LOAD_PID:-} ${ETCD_PID:-}; do wait "$p" 2>/dev/null || true; done
    rm -rf "${CLUSTER_DIR:-}"
  }
  trap stop_all EXIT
  # Every node and client authenticates (docs/security.md): a file of users with fresh secrets.
  local auth="$CLUSTER_DIR/auth"
  (umask 077 && {
    echo "# NAME ROLE SECRET (made by ./quickstart.sh cluster)"
    echo "app client $(openssl rand -hex 32)"
    for i in 1 2 3 4; do echo "n$i node $(openssl rand -hex 32)"; done
  } >"$auth")
  log "users and secrets in $auth: app (client), n1 n2 n3 n4 (node)"
  log "starting etcd on $ETCD_ADDR (data in $CLUSTER_DIR)"
  etcd --name=demo --data-dir="$CLUSTER_DIR/etcd" --listen-client-urls="http://$ETCD_ADDR" \
    --advertise-client-urls="http://$ETCD_ADDR" --listen-peer-urls="http://$ETCD_PEER" \
    --initial-advertise-peer-urls="http://$ETCD_PEER" --initial-cluster="demo=http://$ETCD_PEER" \
    >"$CLUSTER_DIR/etcd.log" 2>&1 &
  ETCD_PID=$!
  for ((i = 0; i < 100; i++)); do
    curl -s "http://$ETCD_ADDR/health" | grep -q true && break
    sleep 0.1
  done
  curl -s "http://$ETCD_ADDR/health" | grep -q true || { tail "$CLUSTER_DIR/etcd.log"; log "etcd did not start"; exit 1; }
  local kv=("$bin/client/kvclient" --etcd="$ETCD_ADDR" --cluster="$CLUSTER")
  local app=("${kv[@]}" --auth_file="$auth" --user=app)
  # Four shards (the load's keys are key0..key19999), three replicas each.
  local shards=4
  "${kv[@]}" cluster init --shards=$shards --replicas=3 --split_keys=key2,key4,key6
  start_node() {  # name index
    "$bin/server/kvserver" --etcd="$ETCD_ADDR" --cluster="$CLUSTER" --node="$1" \
      --auth_file="$auth" --listen="127.0.0.1:$((7100 + $2))" \
      --metrics="127.0.0.1:$((9200 + $2))" --arena_bytes=$((64 << 20)) \
      --data_dir="$CLUSTER_DIR/$1" --fsync=always \
      --placement_interval_s=1 --load_interval_s=1 >>"$CLUSTER_DIR/$1.log" 2>&1 &
    NODE_PID[$1]=$!
  }
  log "starting three kvservers (n1 n2 n3): the first claims the shards, the others join them"
  for i in 1 2 3; do start_node "n$i" "$i"; done
  wait_serving() {  # until every shard has its replicas in place (state serving), at most 30 s
    local j status serving
    for ((j = 0; j < 300; j++)); do
      status=$("${kv[@]}" cluster status --json 2>/dev/null || true)
      serving=$(grep -o '"state":"serving"' <<<"$status" | wc -l)
      # Every shard the map holds now (a split adds one, a merge takes one away).
      [[ $serving -ge $shards && $serving -eq $(grep -o '"id":' <<<"$status" | wc -l) &&
        $status != *'"joining":["'* ]] && return 0
      sleep 0.1
    done
    return 1
  }
  wait_serving || { "${kv[@]}" cluster status; log "the cluster did not form"; exit 1; }
  log "cluster status:"
  "${kv[@]}" cluster status
  log "a client without the secret is turned away:"
  "${kv[@]}" put greeting hello 2>&1 | sed 's/^/  /' || true
  log "a load through the SDK as user app (routed by the map): 50% GET, 50% PUT of 1 KiB values"
  "${app[@]}" load --ops=150000 --in_flight=16 --keys=20000 --value_size=1024 &
  LOAD_PID=$!
  sleep 3
  local primary
  primary=$("${kv[@]}" cluster status --json | grep -o '"primary":"[^"]*"' | head -1 | cut -d'"' -f4)
  log "SIGKILL of shard 0's primary, $primary (pid ${NODE_PID[$primary]}): its lease expires, a backup takes over each shard it led"
  kill -KILL "${NODE_PID[$primary]}"
  wait "${NODE_PID[$primary]}" 2>/dev/null || true
  unset "NODE_PID[$primary]"
  wait "$LOAD_PID" || log "the load reported failures (see above)"
  LOAD_PID=
  log "cluster status after the failover:"
  "${kv[@]}" cluster status
  log "restarting $primary: it rejoins as a backup by state transfer"
  start_node "$primary" "${primary#n}"
  wait_serving || log "$primary did not rejoin within 30 s"
  "${kv[@]}" cluster status
  log "replication and failover counters from the new primary's /metrics:"
  primary=$("${kv[@]}" cluster status --json | grep -o '"primary":"[^"]*"' | head -1 | cut -d'"' -f4)
  curl -s "http://127.0.0.1:$((9200 + ${primary#n}))/metrics" |
    grep -E '^unloadkv_(replication_value_writes_total|catchup_bytes_total|failovers_total|shard_epoch|connections_refused_total)' || true
  keys_on() {  # the keys of the shards node $1 is primary of
    "$bin/client/kvclient" --server="127.0.0.1:$((7100 + ${1#n}))" --auth_file="$auth" --user=app \
      stats | awk '$1 == "keys" { print $2 }'
  }
  total_keys() {  # the keys of every shard, each counted at its primary
    local n sum=0
    for n in "${!NODE_PID[@]}"; do sum=$((sum + $(keys_on "$n"))); done
    echo "$sum"
  }
  "${app[@]}" put durable-greeting "written before the power cut" >/dev/null
  local before after epoch
  before=$(total_keys)
  epoch=$("${kv[@]}" cluster status --json | grep -o '"epoch":[0-9]*' | head -1 | cut -d: -f2)
  log "a whole-cluster stop: SIGKILL of every kvserver at once, as a power cut would; each logs its replicas in its --data_dir ($CLUSTER_DIR/n1 ..., --fsync=always)"
  for i in "${!NODE_PID[@]}"; do kill -KILL "${NODE_PID[$i]}"; done
  for i in "${!NODE_PID[@]}"; do wait "${NODE_PID[$i]}" 2>/dev/null || true; done
  NODE_PID=()
  log "restarting all three: each replays its log, and the map in etcd says who serves what"
  for i in 1 2 3; do start_node "n$i" "$i"; done
  # The map says "serving" until the killed nodes' leases lapse: wait for the new incarnations'
  # epoch, then for the group to be whole.
  local j
  for ((j = 0; j < 300; j++)); do
    [[ $("${kv[@]}" cluster status --json 2>/dev/null | grep -o '"epoch":[0-9]*' | head -1 |
      cut -d: -f2) -gt $epoch ]] 2>/dev/null && break
    sleep 0.1
  done
  wait_serving || { "${kv[@]}" cluster status; log "the cluster did not come back within 30 s"; exit 1; }
  "${kv[@]}" cluster status
  after=$(total_keys)
  for i in 1 2 3; do grep -h "durability:" "$CLUSTER_DIR/n$i.log" | tail -1 | sed "s/^/  n$i: /"; done
  log "keys before the stop: $before; after the restart: $after; durable-greeting = $("${app[@]}" get durable-greeting)"
  [[ -n $before && $before == "$after" ]] || { log "keys were lost across the restart"; exit 1; }
  log "automatic placement on; a fourth node, n4, started under load takes its share of the roles with no command"
  "${kv[@]}" cluster config --auto_rebalance=true
  "${app[@]}" load --ops=100000 --in_flight=16 --keys=20000 --value_size=1024 --seed=2 &
  LOAD_PID=$!
  start_node n4 4
  n4_roles() {  # "ROLES PRIMARIES" of n4 in the map
    "${kv[@]}" cluster status --json 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin)
print(sum((s["primary"] == "n4") + s["backups"].count("n4") for s in v["shards"]),
      sum(s["primary"] == "n4" for s in v["shards"]))' 2>/dev/null || echo "0 0"
  }
  local roles=(0 0)
  for ((j = 0; j < 600; j++)); do  # at most 60 s: 12 roles over 4 nodes, 3 of them n4's
    read -r -a roles < <(n4_roles)
    ((roles[0] >= 3 && roles[1] >= 1)) && break
    sleep 0.1
  done
  ((roles[0] >= 3 && roles[1] >= 1)) || { "${kv[@]}" cluster status; log "n4 did not take its share within 60 s"; exit 1; }
  wait_serving || { "${kv[@]}" cluster status; log "the shards did not settle within 30 s"; exit 1; }
  "${kv[@]}" cluster status | grep '^placement'
  for i in 1 2 3 4; do
    curl -s "http://127.0.0.1:$((9200 + i))/metrics" | awk -v n="n$i" '/^unloadkv_placement_changes_total/ { print "  " n ": " $0 }'
  done
  log "n4 holds ${roles[0]} roles, ${roles[1]} of them primary; automatic placement off for the operator's split and merge"
  "${kv[@]}" cluster config --auto_rebalance=false
  log "cluster split: shard 3 [key6, +inf) splits at key8; a new shard 4 takes [key8, +inf) on the same nodes"
  "${kv[@]}" cluster split --shard=3 --at=key8 || { "${kv[@]}" cluster status; log "the split failed"; exit 1; }
  [[ $("${kv[@]}" cluster status --json) == *'"id":4,"start":"key8"'* ]] ||
    { log "the map has no shard 4 from key8"; exit 1; }
  log "cluster merge: shards 3 and 4 back into one (shard 4's keys written into shard 3, then one transaction)"
  "${kv[@]}" cluster merge --shards=3,4 || { "${kv[@]}" cluster status; log "the merge failed"; exit 1; }
  wait "$LOAD_PID" || log "the load reported failures (see above)"
  LOAD_PID=
  wait_serving || { "${kv[@]}" cluster status; log "the shards did not settle within 30 s"; exit 1; }
  "${kv[@]}" cluster status
  local n4_keys n4_requests
  n4_keys=$(keys_on n4)
  n4_requests=$(curl -s "http://127.0.0.1:9204/metrics" |
    awk '/^unloadkv_rpc_requests_total/ { sum += $NF } END { printf "%d", sum }')
  log "n4 is primary of shards holding $n4_keys keys and answered $n4_requests RPC requests; every shard: $(total_keys) keys"
  ((n4_keys > 0)) || { log "n4 took no primary role"; exit 1; }
  [[ $("${kv[@]}" cluster status --json) != *'"id":4,'* ]] || { log "shard 4 is still in the map"; exit 1; }
  log "stopping the kvservers (SIGTERM) and etcd"
  for i in "${!NODE_PID[@]}"; do kill -TERM "${NODE_PID[$i]}"; done
  for i in "${!NODE_PID[@]}"; do wait "${NODE_PID[$i]}" 2>/dev/null || true; done
  NODE_PID=()
  kill -TERM "$ETCD_PID"
  wait "$ETCD_PID" 2>/dev/null || true
  ETCD_PID=
  rm -rf "$CLUSTER_DIR"
  trap - EXIT
}

# Runs `bazel test` with the given flags; appends PASSED/FAILED target counts to the totals.
PASSED=0
FAILED=0
test_phase() {
  local out rc=0
  out=$(mktemp)
  "${BAZEL[@]}" test --test_summary=short "$@" 2>&1 | tee "$out" | grep -E '^(//|FAIL|ERROR)' || true
  rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -cE '^//.* PASSED' "$out" || true)
  f=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$out" || true)
  if ((rc != 0 && f == 0)); then f=1; fi  # a build error counts as a failure
  # A failing test's own log, so that CI's output says why (Bazel prints only its path).
  local testlog
  for testlog in $(grep -oE '^FAIL: //[^ ]+ \(see [^)]+\)' "$out" | sed -E 's/.*\(see ([^)]+)\)/\1/'); do
    [[ -f $testlog ]] || continue
    log "the last 60 lines of $testlog:"
    tail -60 "$testlog" | sed 's/^/  | /' >&2
  done
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
  log "$p passed, $f failed"
  rm -f "$out"
}

# Counts one check: passes when the command exits 0.
check() {
  if "$@"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); log "FAILED: $*"; fi
}

# The layering the BUILD files promise (docs/testing.md, "Static checks").
static_phase() {
  check python3 tests/layering/layer_check.py
  check python3 tests/layering/include_check.py
  check python3 tests/layering/function_length.py
}

# Runs a libFuzzer target (clang, own output base) for $2 seconds on a fresh corpus.
fuzz_run() {
  local target=$1 seconds=$2 fuzz_base="${HOME}/.cache/unloadkv-fuzz" corpus
  log "libFuzzer: $target, ${seconds} s"
  corpus=$(mktemp -d)
  if bazel --output_base="$fuzz_base" run --config=fuzz "$target" -- \
      -max_total_time="$seconds" -print_final_stats=1 "$corpus" >"$corpus.log" 2>&1; then
    PASSED=$((PASSED + 1))
    log "libFuzzer: $(grep -E 'stat::number_of_executed_units' "$corpus.log" | awk '{print $2}') inputs, no crash"
  else
    FAILED=$((FAILED + 1))
    tail -40 "$corpus.log" >&2
  fi
  rm -rf "$corpus" "$corpus.log"
}

# Every test target tagged "fuzz" (a decoder's fuzzer), 15 s of libFuzzer each.
fuzz_phase() {
  local targets target
  targets=$(bazel query 'attr(tags, "\bfuzz\b", tests(//...))' 2>/dev/null) || { check false; return; }
  for target in $targets; do fuzz_run "$target" 15; done
}

# The whole cluster under seeded faults, 100 seeds on the release build, then the seeds that
# found bugs with today's fault generator (docs/sim-cluster.md, "Bugs it found"; those below
# 101 are in the range already).
SIM_SEEDS=1..100,216
SIM_DURABLE_SEEDS=1..50
SIM_INTERVAL_SEEDS=1..30
SIM_MOVE_SEEDS=1..50
SIM_LOST_ANSWER_SEEDS=1..40
SIM_SPLIT_SEEDS=1..30
SIM_PLACEMENT_SEEDS=1..20
SIM_INLINE_SEEDS=1..20
sim_phase() {
  local out args
  out=$(mktemp)
  # Every node in memory, then every node logging to a simulated disk, with power losses, full
  # disks and crashes mid-compaction among the faults, under --fsync=always (nothing
  # acknowledged lost) and interval:1000 (nothing acknowledged a second before a power loss
  # lost; docs/durability.md); then with operators' `cluster move`s, `split`s and `merge`s
  # among the faults, some with a node crashed mid-way, in memory and (splits, merges) logging;
  # moves again with the map's answers to the nodes moving a role lost (applied, unheard); then
  # with automatic placement deciding splits and moves by itself; then with the clients' small
  # values inline in their PUTs (a client's first 100, docs/sim-cluster.md).
  for args in "--seeds=$SIM_SEEDS" "--durable --seeds=$SIM_DURABLE_SEEDS" \
    "--durable --fsync=interval:1000 --seeds=$SIM_INTERVAL_SEEDS" \
    "--moves --splits --merges --seeds=$SIM_MOVE_SEEDS" \
    "--moves --lost_answers --seeds=$SIM_LOST_ANSWER_SEEDS" \
    "--durable --splits --merges --seeds=$SIM_SPLIT_SEEDS" \
    "--placement --seeds=$SIM_PLACEMENT_SEEDS" "--inline_bytes=5 --seeds=$SIM_INLINE_SEEDS"; do
    # shellcheck disable=SC2086  # two flags in one string
    if bazel run -c opt //tests/sim:cluster_sim -- $args >"$out" 2>&1; then
      PASSED=$((PASSED + 1))
    else
      FAILED=$((FAILED + 1))
      grep -A2 -E '^seed [0-9]+: FAIL' "$out" >&2 || tail -20 "$out" >&2
    fi
    tail -2 "$out"
  done
  rm -f "$out"
}

# Runs `./quickstart.sh $1` as the README says, within $2 seconds, in its own process group
# and with its own TMPDIR. Fails if it fails or hangs, if any process of its group outlives it
# (the leftovers are listed, then killed), or if it leaves anything in its TMPDIR.
readme_run() {
  local cmd=$1 limit=$2 box pid rc=0 left
  box=$(mktemp -d -t unloadkv-readme.XXXXXX)
  mkdir "$box/tmp"
  log "./quickstart.sh $cmd (at most ${limit} s; output in the log below if it fails)"
  # timeout(1) makes its own process group and, on expiry, signals the whole group.
  TMPDIR="$box/tmp" timeout --kill-after=10 "$limit" ./quickstart.sh "$cmd" >"$box/log" 2>&1 &
  pid=$!
  wait "$pid" || rc=$?
  left=$(pgrep -g "$pid" -a || true)
  local failure=
  if ((rc == 124 || rc == 137)); then
    failure="still running after ${limit} s (hung)"
  elif ((rc != 0)); then
    failure="exited with status $rc"
  elif [[ -n $left ]]; then
    failure="left processes behind: $(echo "$left" | tr '\n' ';')"
  elif [[ -n $(ls -A "$box/tmp") ]]; then
    failure="left temporary files behind: $(ls -A "$box/tmp" | tr '\n' ' ')"
  fi
  if [[ -n $failure ]]; then
    tail -30 "$box/log" >&2
    log "FAILED: ./quickstart.sh $cmd $failure"
    FAILED=$((FAILED + 1))
  else
    grep -E 'MODELED|offload-only|failover|rejoin' "$box/log" | head -12 | sed 's/^/  /' >&2 || true
    PASSED=$((PASSED + 1))
  fi
  [[ -n $left ]] && pkill -KILL -g "$pid" 2>/dev/null || true
  rm -rf "$box"
}

readme_phase() {
  readme_run demo 600
  readme_run cluster 300
}

# The installed SDK from outside Bazel (docs/sdk.md): the package built, unpacked and
# installed with --prefix, the CMake, Makefile and Python examples built and run against it.
sdk_phase() {
  check timeout --kill-after=10 600 tests/sdk/installed_examples.sh
}

# Runs one phase and records its wall time and outcome for the table at the end.
PHASE_ROWS=()
phase() {
  local name=$1 start=$SECONDS failed_before=$FAILED
  shift
  log "phase: $name"
  "$@"
  local secs=$((SECONDS - start)) result=ok
  ((FAILED == failed_before)) || result="FAILED ($((FAILED - failed_before)))"
  PHASE_ROWS+=("$(printf '%-58s %3d:%02d  %s' "$name" $((secs / 60)) $((secs % 60)) "$result")")
}

run_tests() {
  local start=$SECONDS row
  phase "static checks (layers, declared includes, function length)" static_phase
  phase "unit, conformance, process and fuzz-regression tests" test_phase //...
  # The sanitizers see every unit and fuzz-regression test; the process-level suites (tag
  # "process": real kvservers, etcd, Prometheus, browsers) ran once above.
  phase "AddressSanitizer + UBSan (all but process suites)" test_phase --config=asan \
    --build_tests_only --test_tag_filters=-process //...
  phase "ThreadSanitizer (the concurrent code)" test_phase --config=tsan --build_tests_only \
    --test_tag_filters=-process,-fuzz //transport/... //client/... //server/... //tests/kv/... \
    //tests/cluster/... //tests/security:memory_protection_test
  phase "cluster simulation, seeds $SIM_SEEDS, durable $SIM_DURABLE_SEEDS, interval $SIM_INTERVAL_SEEDS, moves+splits+merges $SIM_MOVE_SEEDS, moves with lost answers $SIM_LOST_ANSWER_SEEDS, durable splits+merges $SIM_SPLIT_SEEDS, placement $SIM_PLACEMENT_SEEDS, inline PUTs $SIM_INLINE_SEEDS (release build)" sim_phase
  phase "README commands (./quickstart.sh demo, cluster)" readme_phase
  phase "installed SDK: package, CMake/Makefile/Python examples" sdk_phase
  phase "libFuzzer, 15 s per decoder" fuzz_phase
  echo
  printf '%-58s %6s  %s\n' phase time result
  for row in "${PHASE_ROWS[@]}"; do echo "$row"; done
  local secs=$((SECONDS - start))
  printf '%-58s %3d:%02d\n' total $((secs / 60)) $((secs % 60))
  echo "${PASSED} passed, ${FAILED} failed"
  ((FAILED == 0))
}

case "${1:-}" in
  demo) install_missing; run_demo ;;
  cluster) install_missing; run_cluster ;;
  test) install_missing; run_tests ;;
  package) install_missing; exec deploy/package/package.sh "${@:2}" ;;
  *) echo "usage: $0 demo|cluster|test|package" >&2; exit 2 ;;
esac
