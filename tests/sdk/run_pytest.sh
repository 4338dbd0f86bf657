#!/usr/bin/env bash
# Runs pytest on the test file named first, with Debian's python3 (whose pybind11 module ABI
# the build targets), the built module's directory and kvserver in the environment.
set -euo pipefail
py=/usr/bin/python3
"$py" -c 'import pytest' 2>/dev/null ||
  { echo "FAIL: python3-pytest missing (./quickstart.sh test installs it)" >&2; exit 1; }
export UNLOADKV_MODULE_DIR=$PWD/client/python
export KVSERVER=$PWD/server/kvserver
exec "$py" -m pytest -q -p no:cacheprovider "$@"
