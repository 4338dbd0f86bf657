#!/usr/bin/env bash
# YCSB on the simulated fabric (docs/sim-kv.md): the real kvserver and SDK clients in one
# process, virtual time. For two seeds and both write paths: the same seed prints the same
# results byte for byte, every read returned values that were written (the sim binding checks
# each one), no operation failed, and the first line says the figures are modeled. Different
# seeds give different runs; bad sim properties are refused with the property named.
set -euo pipefail
YCSB=tests/sim/ycsb
WL=client/ycsb/workloads
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

run() {  # run NAME WORKLOAD POLICY SEED
  "$YCSB" run unloadkv -P "$WL/$2" -p unloadkv.transport=sim -p unloadkv.policy="$3" \
    -p sim.seed="$4" -p recordcount=300 -p operationcount=1500 -threads 4 \
    -p hdrhistogram.percentiles=50,99 >"$T/$1" 2>"$T/$1.err" ||
    fail "$1: exit $? $(cat "$T/$1.err" "$T/$1")"
}

for seed in 1 2; do
  cases=("workloada unload" "workloada adaptive")
  if ((seed == 1)); then cases+=("workloadf offload" "workloade unload"); fi
  for case in "${cases[@]}"; do
    set -- $case
    name="$1-$2-$seed"
    run "$name" "$1" "$2" "$seed"
    run "$name.again" "$1" "$2" "$seed"
    cmp -s "$T/$name" "$T/$name.again" ||
      fail "$name: the same seed printed different results: $(diff "$T/$name" "$T/$name.again")"
    head -1 "$T/$name" | grep -q '^\[MODELED\]' || fail "$name: first line: $(head -1 "$T/$name")"
    grep -qx '\[SIM\], BadReads, 0' "$T/$name" || fail "$name: $(grep SIM "$T/$name")"
    grep -qx '\[SIM\], BadScanValues, 0' "$T/$name" || fail "$name: $(grep SIM "$T/$name")"
    if grep -q 'Return=ERROR' "$T/$name"; then fail "$name: errors: $(cat "$T/$name")"; fi
    if grep -q 'Return=NOT_FOUND' "$T/$name"; then fail "$name: lost records: $(cat "$T/$name")"; fi
  done
  # Reads were checked, and with the unload policy every value was written through a staging
  # pool buffer and copied into place by the server's unload worker.
  checked=$(grep '^\[SIM\], CheckedReads, ' "$T/workloada-unload-$seed" | cut -d' ' -f3)
  ((checked > 300)) || fail "only $checked reads checked"
  grep -qx '\[SIM\], UnloadedShare(%), 100.0' "$T/workloada-unload-$seed" ||
    fail "unload policy: $(grep UnloadedShare "$T/workloada-unload-$seed")"
done
grep -qx '\[SIM\], UnloadedShare(%), 0.0' "$T/workloadf-offload-1" ||
  fail "offload policy: $(grep UnloadedShare "$T/workloadf-offload-1")"
scanned=$(grep '^\[SIM\], CheckedScanValues, ' "$T/workloade-unload-1" | cut -d' ' -f3)
((scanned > 1000)) || fail "only $scanned scanned values checked"
if cmp -s "$T/workloada-adaptive-1" "$T/workloada-adaptive-2"; then
  fail "seeds 1 and 2 gave the same run"
fi

# The load command measures the inserts themselves.
"$YCSB" load unloadkv -P "$WL/workloada" -p unloadkv.transport=sim -p recordcount=300 \
  >"$T/load" 2>/dev/null || fail "load: $(cat "$T/load")"
grep -qx '\[INSERT\], Return=OK, 300' "$T/load" || fail "load summary: $(cat "$T/load")"

# Bad properties: a clear error naming the property, exit 2, nothing run.
bad() {  # bad EXPECTED-TEXT ARGS...
  local want=$1
  shift
  if "$YCSB" run unloadkv -P "$WL/workloada" -p unloadkv.transport=sim "$@" >"$T/bad" \
      2>"$T/bad.err"; then
    fail "accepted $*"
  fi
  grep -q -- "$want" "$T/bad.err" || fail "$*: expected '$want' in: $(cat "$T/bad.err")"
}
bad "sim.mtt_cache_entries" -p sim.mtt_cache_entries=0
bad "sim.seed" -p sim.seed=banana
bad "unloadkv.policy" -p unloadkv.policy=sideways
bad "sim.arena_bytes" -p sim.arena_bytes=12
echo PASS
