#!/usr/bin/env bash
# deploy/prometheus with Debian's promtool: the configuration (and the sample file-discovery
# targets) load without error or warning, the rule files are valid, every alert has a test
# that makes it fire and one that keeps it quiet, and the alert and recording-rule tests pass.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v promtool >/dev/null ||
  fail "promtool not found: install Debian's prometheus package (./quickstart.sh test does)"
SRC=deploy/prometheus
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cp -rL "$SRC/." "$T/"
cp "$T/targets/example.json.sample" "$T/targets/example.json"

out=$(promtool check config "$T/prometheus.yml" 2>&1) || fail "check config: $out"
grep -q WARNING <<<"$out" && fail "check config warns: $out"
echo "$out" | grep -E 'SUCCESS' | sed 's/^/  /'

for f in "$T"/rules/*.yml; do
  out=$(promtool check rules "$f" 2>&1) || fail "check rules $f: $out"
  grep -q WARNING <<<"$out" && fail "check rules $f warns: $out"
done

# Every alert is evaluated by a test both firing (exp_alerts with labels) and quiet.
alerts=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$SRC/rules/alerts.yml")
[[ $(wc -w <<<"$alerts") -ge 10 ]] || fail "expected the 10 alerts, found: $alerts"
for a in $alerts; do
  n=$(grep -c "alertname: $a\$" "$SRC/tests/alerts_test.yml" || true)
  ((n >= 2)) || fail "alert $a: $n evaluations in tests/alerts_test.yml, want a firing and a quiet one"
done

for t in alerts_test recording_test; do
  out=$(cd "$T/tests" && promtool test rules "$t.yml" 2>&1) || fail "test rules $t: $out"
  echo "  $t: $(grep -c 'eval_time' "$T/tests/$t.yml") evaluations passed"
done

# The checks bite: a rule that names a metric wrongly makes an alert test fail.
sed 's/unloadkv_lease_valid == 0/unloadkv_lease_vaild == 0/' "$SRC/rules/alerts.yml" \
  >"$T/rules/alerts.yml"
if (cd "$T/tests" && promtool test rules alerts_test.yml >/dev/null 2>&1); then
  fail "a misspelled metric in an alert went unnoticed by the alert tests"
fi
echo "PASS: $(wc -w <<<"$alerts") alerts, $(grep -c 'record:' "$SRC/rules/recording.yml") recording rules"
