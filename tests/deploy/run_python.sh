#!/usr/bin/env bash
# Runs the Python test named as the first argument with Debian's python3 (/usr/bin/python3:
# the one that sees Debian's python3-* packages), from the runfiles root, where the data it
# names (deploy/, server/, client/) lies.
set -euo pipefail
py=/usr/bin/python3
[[ -x $py ]] || { echo "FAIL: $py not found: install Debian's python3 (./quickstart.sh test does)" >&2; exit 1; }
exec "$py" "$@"
