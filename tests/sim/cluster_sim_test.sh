#!/usr/bin/env bash
# cluster_sim's contract (docs/sim-cluster.md): a range of seeds runs clean and is summarized,
# the same seed replays to the same trace hash in another process, --trace prints the run's
# events in virtual time, and bad flags are refused with the flag named. (The 100-seed sweep
# is a phase of ./quickstart.sh test, on the release build.)
set -euo pipefail
SIM=tests/sim/cluster_sim
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

"$SIM" --seeds=1..3,4 --workload_seconds=8 >"$T/range" 2>&1 || fail "seeds 1..3,4: $(cat "$T/range")"
[[ $(grep -c '^seed [0-9]*: ok ' "$T/range") == 4 ]] || fail "not four clean runs: $(cat "$T/range")"
grep -q '^4 runs, 0 failed; .* ops, [0-9]* scans; faults: ' "$T/range" || fail "no summary: $(cat "$T/range")"
grep -q 'simulated cluster-hours' "$T/range" || fail "no speed line: $(cat "$T/range")"
grep -q '^fault points fired: ' "$T/range" || fail "no fault point line: $(cat "$T/range")"
grep -qE '^engine invariants checked: [1-9][0-9]* writes in place .*\(1\), [1-9][0-9]* messages handed over after the [1-9][0-9]* unfinished writes .*\(2\)' "$T/range" ||
  fail "engine invariants 1 and 2 not checked: $(cat "$T/range")"

# Without the code's fault points: another run of the same seed (a different trace).
"$SIM" --seed=3 --workload_seconds=8 --buggify=false >"$T/plain" 2>&1 || fail "--buggify=false: $(cat "$T/plain")"
grep -q '^seed 3: ok ' "$T/plain" || fail "--buggify=false: $(cat "$T/plain")"

# The same seed, another process: the same shape, operations and trace hash.
"$SIM" --seed=3 --workload_seconds=8 >"$T/again" 2>&1 || fail "seed 3 again: $(cat "$T/again")"
hash() { grep -o 'trace [0-9a-f]*' "$1" | head -1; }
[[ -n $(hash "$T/again") && $(grep '^seed 3:' "$T/range" | grep -o 'trace [0-9a-f]*') == $(hash "$T/again") ]] ||
  fail "seed 3 did not replay: $(grep '^seed 3:' "$T/range") vs $(cat "$T/again")"

# --trace: faults, operations and the servers' log lines, stamped with virtual time.
"$SIM" --seed=2 --workload_seconds=8 --trace >"$T/out" 2>"$T/trace" || fail "trace run failed"
grep -qE '^ +[0-9]+\.[0-9]{6} fault (crash|pause|cut_cluster|cut_map) n[0-9]' "$T/trace" ||
  fail "no fault in the trace: $(head -20 "$T/trace")"
grep -qE '^ +[0-9]+\.[0-9]{6} c[0-9] put k[0-9]+=c[0-9]-[0-9]+ -> ' "$T/trace" || fail "no operation in the trace"
grep -qE '^ +[0-9]+\.[0-9]{6} log I cluster: shard 0: claim' "$T/trace" || fail "no server log line in the trace"

# Bad flags: exit 2, the flag named, nothing run.
bad() {  # expected-text flags...
  local want=$1 rc=0
  shift
  "$SIM" "$@" >"$T/bad" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "$*: exit $rc, expected 2"
  grep -q -- "$want" "$T/bad" || fail "$*: message lacks '$want': $(cat "$T/bad")"
  ! grep -q '^seed ' "$T/bad" || fail "$*: ran anyway"
}
bad "--seeds must be ranges A..B" --seeds=5..1
bad "--seeds must be ranges A..B" --seeds=abc
bad "--seeds must be ranges A..B" --seeds=1..4,
bad "--seeds must be ranges A..B" --seeds=0..1000000
bad "--clients must be in 1..16" --clients=0
bad "--workload_seconds" --workload_seconds=-1
bad "unexpected argument" extra
bad "--lost_answers needs --moves" --lost_answers
echo PASS
