#!/usr/bin/env bash
# Runs pytest on the test file named first, with Debian's python3 (whose pybind11 module ABI
# the build targets), the built module's directory, kvserver and kvclient in the environment.
# The cluster test needs Debian's etcd-server (./quickstart.sh test installs it).
set -euo pipefail
py=/usr/bin/python3
"$py" -c 'import pytest' 2>/dev/null ||
  { echo "FAIL: python3-pytest missing (./quickstart.sh test installs it)" >&2; exit 1; }
export UNLOADKV_MODULE_DIR=$PWD/client/python
export KVSERVER=$PWD/server/kvserver
export KVCLIENT=$PWD/client/kvclient
exec "$py" -m pytest -q -p no:cacheprovider "$@"
