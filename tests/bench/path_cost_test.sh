#!/usr/bin/env bash
# path_cost runs end to end (a behavior check, not its figures): a short run prints every row
# of the ledger with numbers, no row failed, and the counting allocator counts (a protobuf
# message with a string field allocates; the soft RNIC's header codec never does).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
tests/bench/path_cost --ops=2000 --micro_ops=2000 --keys=500 >"$T/out" 2>"$T/err" ||
  fail "exit $?: $(cat "$T/err" "$T/out")"
if grep -q 'failed' "$T/out"; then fail "a row failed: $(cat "$T/out")"; fi
num='[0-9]+\.[0-9]+'
for row in 'soft rnic: WRITE header' 'rpc: request frame' 'protobuf: PutRequest' \
  'protobuf: PutResponse' 'protobuf: GetRequest' 'protobuf: GetResponse' 'protobuf: GRANT' \
  'kv store: GrantSlots' 'kv store: Get'; do
  grep -qE "^$row.* $num +$num$" "$T/out" || fail "no figures for '$row': $(cat "$T/out")"
done
for row in 'engine message echo, 1 ' 'engine message echo, 64 ' 'rpc echo, 1 ' 'rpc echo, 64 ' \
  'PUT, 1 ' 'GET, 1 ' 'PUT, 64 ' 'GET, 64 '; do
  grep -qE "^$row.*( +$num){6} +[0-9]+$" "$T/out" || fail "no figures for '$row': $(cat "$T/out")"
done
[[ $(grep -E '^soft rnic: WRITE header' "$T/out" | awk '{print $NF}') == 0.00 ]] ||
  fail "the header codec allocates: $(grep -E '^soft rnic' "$T/out")"
awk '/^protobuf: PutRequest/ { exit !($NF >= 1) }' "$T/out" ||
  fail "no allocation counted for a PutRequest: the counting allocator is not linked"
echo "PASS: $(grep -cE " $num +$num$| [0-9]+$" "$T/out") rows"
