#!/usr/bin/env bash
# writebench end to end on the simulated fabric: the CSV it appends (header and one row per
# policy with the issue's columns), the per-path paths actually taken, that two runs of one seed
# are identical (the fabric is deterministic), and clear errors with exit code 2 for bad flags.
set -euo pipefail
WB=transport/bench/writebench
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

"$WB" --working_set=1GiB --ops=1000 --warmup=200 --policy=offload,unload,adaptive,split:0.5 \
  --csv="$T/a.csv" >"$T/out" || fail "writebench run: $(cat "$T/out")"
grep -q 'MODELED' "$T/out" || fail "output does not say the numbers are modeled"
head -1 "$T/a.csv" | grep -qx 'fabric,policy,pattern,working_set_bytes,write_size,ops,mean_us,p50_us,p99_us,throughput_ops,throughput_gbps,unload_fraction' \
  || fail "CSV header: $(head -1 "$T/a.csv")"
[ "$(wc -l <"$T/a.csv")" -eq 5 ] || fail "expected 4 rows: $(cat "$T/a.csv")"
# unload_fraction: 0 for offload, 1 for unload, 0.5 for split:0.5.
awk -F, '$2=="offload" && $12!="0.0000" {exit 1}' "$T/a.csv" || fail "offload unloaded writes"
awk -F, '$2=="unload" && $12!="1.0000" {exit 1}' "$T/a.csv" || fail "unload offloaded writes"
awk -F, '$2=="split:0.5" && ($12<0.45 || $12>0.55) {exit 1}' "$T/a.csv" || fail "split:0.5"
awk -F, 'NR>1 && ($7<=0 || $10<=0) {exit 1}' "$T/a.csv" || fail "non-positive latency or throughput"

"$WB" --working_set=1GiB --ops=1000 --warmup=200 --policy=offload,unload,adaptive,split:0.5 \
  --csv="$T/b.csv" >/dev/null || fail "second run"
cmp -s "$T/a.csv" "$T/b.csv" || fail "two runs of one seed differ: $(diff "$T/a.csv" "$T/b.csv")"

"$WB" --working_set=64MiB --pattern=zipfian --ops=1000 --warmup=0 --policy=oracle:10 \
  --csv="$T/z.csv" >/dev/null || fail "oracle run"
grep -q '^sim,oracle:10,zipfian,' "$T/z.csv" || fail "oracle row: $(cat "$T/z.csv")"

# The sweep: targets printed, CSV rows for every point, a PNG drawn by gnuplot.
"$WB" --sweep --sweep_sizes=64 --ops=1000 --warmup=0 --csv="$T/s.csv" --png="$T/s.png" \
  >"$T/sweep" 2>"$T/sweep.err" || fail "sweep: $(cat "$T/sweep" "$T/sweep.err")"
grep -q '^Targets (modeled):' "$T/sweep" || fail "sweep printed no targets"
grep -q 'adaptive vs the better static policy, worst point' "$T/sweep" || fail "no worst point"
# 11 working sets x 3 policies + zipfian and phased x 3, and the header.
[ "$(wc -l <"$T/s.csv")" -eq 40 ] || fail "sweep CSV has $(wc -l <"$T/s.csv") lines"
[ "$(head -c 4 "$T/s.png" | tail -c 3)" = "PNG" ] || fail "no PNG drawn"

bad() {
  local want="$1"; shift
  if "$WB" "$@" >"$T/bad" 2>&1; then fail "accepted: $*"; else rc=$?; fi
  [ "$rc" -eq 2 ] || fail "exit code $rc for: $*"
  grep -q "$want" "$T/bad" || fail "error for '$*' does not mention '$want': $(cat "$T/bad")"
}
bad "unknown write policy" --policy=sometimes
bad "zipfian only" --policy=oracle:5
bad "staging_lanes" --staging_lanes=9
bad "not a byte size" --working_set=lots
bad "ops" --ops=10
echo PASS
