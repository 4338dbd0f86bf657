#!/usr/bin/env bash
# Runs the Python test named as the first argument with the system python3 (Debian's), from
# the runfiles root, where the data it names (deploy/, server/, client/) lies.
set -euo pipefail
exec python3 "$@"
