#!/usr/bin/env bash
# deploy/systemd/kvserver@.service passes `systemd-analyze verify` with no warning, for an
# instance, with ExecStart pointing at the kvserver built here (verify checks the executable).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed (Debian's systemd package provides it)"
  exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
bin=$(realpath server/kvserver)
sed "s|/usr/local/bin/kvserver|$bin|" deploy/systemd/kvserver@.service >"$T/kvserver@.service"
grep -q "ExecStart=$bin --flagfile=/etc/unloadkv/%i.conf" "$T/kvserver@.service" ||
  fail "ExecStart is not /usr/local/bin/kvserver --flagfile=/etc/unloadkv/%i.conf"
for key in LimitMEMLOCK=infinity Restart=on-failure NoNewPrivileges=yes ProtectSystem=strict; do
  grep -qx "$key" "$T/kvserver@.service" || fail "no $key"
done
out=$(cd "$T" && systemd-analyze verify ./kvserver@n1.service 2>&1) || fail "verify: $out"
[[ -z $out ]] || fail "verify warns: $out"
# The check bites: a misspelled directive is a warning.
sed 's/^Restart=on-failure/Restart=on-falure/' "$T/kvserver@.service" >"$T/x.tmp"
mv "$T/x.tmp" "$T/kvserver@.service"
out=$(cd "$T" && systemd-analyze verify ./kvserver@n1.service 2>&1) || true
[[ -n $out ]] || fail "systemd-analyze verify took a misspelled Restart= silently"
echo "PASS: kvserver@.service verified ($(systemd-analyze --version | head -1))"
