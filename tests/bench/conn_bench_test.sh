#!/usr/bin/env bash
# conn_bench runs end to end (a behavior check, not its targets): a short run at 1 and 20
# connections from two client processes prints a row for each policy and count, every
# connection was held and served without errors, the server's sockets do not grow with the
# connections, and nothing reports a failure. (It once
# printed only client errors after an engine option changed, and nothing noticed.)
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
tests/bench/conn_bench --connections=1,20 --processes=2 --seconds=0.5 >"$T/out" 2>"$T/err" ||
  fail "exit $?: $(cat "$T/err" "$T/out")"
if grep -qi 'error ' "$T/out"; then fail "errors: $(cat "$T/out")"; fi
for policy in offload unload; do
  for conns in 1 20; do
    row=$(grep -E "^$policy +$conns \|" "$T/out") || fail "no row for $policy $conns: $(cat "$T/out")"
    # policy conns | idle active sockets | ops/s p50 p99 errors
    read -r _ _ _ idle active sockets _ ops _ _ errors <<<"$row"
    [[ "$errors" == 0 ]] || fail "$policy $conns: $errors errors: $row"
    # The soft RNIC carries all QPs between two devices on at most two streams: the server holds
    # at least one and at most two sockets per client process that has a connection, whatever
    # the count (docs/wire-soft.md).
    awk -v s="$sockets" -v c="$conns" 'BEGIN { p = c < 2 ? c : 2; t = s * c;
      exit !(t >= 0.99 && t <= 2 * p + 0.01) }' ||
      fail "$policy $conns: $sockets sockets per connection: $row"
    awk -v o="$ops" 'BEGIN { exit !(o > 0) }' || fail "$policy $conns: no operations: $row"
  done
done
echo "PASS: $(grep -c -E '^(offload|unload) ' "$T/out") rows"
