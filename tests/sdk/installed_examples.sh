#!/usr/bin/env bash
# The installed SDK used from outside (docs/sdk.md): builds the package
# (./quickstart.sh package), installs the .deb with dpkg into a throwaway root (its own dpkg
# database; the dependencies, which that root's database lacks, are checked against this
# machine's) and the same files with --prefix into another, then builds client/examples
# against those files only (CMake: the .deb's files; make + pkg-config, shared and static: the
# --prefix install), and runs them and the Python example against a kvserver started from the
# package's binary; at the end dpkg removes the package and nothing of it may remain.
# Run from the repository root by ./quickstart.sh test.
set -euo pipefail
log() { printf '[sdk %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

WORK=$(mktemp -d -t unloadkv-sdk.XXXXXX)
SERVER_PID=
cleanup() {
  if [[ -n $SERVER_PID ]]; then
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

DEB=$(./quickstart.sh package --out="$WORK")
ROOT=$WORK/root
PREFIX=$WORK/prefix
mkdir -p "$ROOT/var/lib/dpkg/info" "$ROOT/var/lib/dpkg/updates" "$ROOT/var/lib/dpkg/triggers"
touch "$ROOT/var/lib/dpkg/status"
mkdir -p "$WORK/deps/debian"
printf 'Source: deps\n\nPackage: deps\nArchitecture: any\n' >"$WORK/deps/debian/control"
(cd "$WORK/deps" && dpkg-checkbuilddeps -d "$(dpkg-deb -f "$DEB" Depends)" -c "") ||
  { log "FAIL: this machine lacks what the package depends on"; exit 1; }
DPKG=(dpkg --root="$ROOT")
if [[ $(id -u) -ne 0 ]]; then DPKG+=(--force-not-root); fi
"${DPKG[@]}" --force-depends -i "$DEB" >"$WORK/dpkg.log" 2>&1 ||
  { cat "$WORK/dpkg.log" >&2; log "FAIL: dpkg -i"; exit 1; }
status=$("${DPKG[@]}" -s unloadkv)
grep -q '^Status: install ok installed' <<<"$status" ||
  { log "FAIL: dpkg does not list unloadkv as installed"; exit 1; }
log "dpkg installed $("${DPKG[@]}" -L unloadkv | wc -l) paths of $(basename "$DEB")"
deploy/package/package.sh --prefix="$PREFIX"
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

log "kvserver from the package: $("$ROOT/usr/bin/kvserver" --version)"
"$ROOT/usr/bin/kvserver" --listen=127.0.0.1:0 --metrics= --arena_bytes=67108864 \
  >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
ADDR=
for _ in $(seq 100); do  # bounded: 10 s for the first line
  ADDR=$(sed -n 's/^kvserver: listening on \([0-9.:]*\) .*/\1/p' "$WORK/server.log")
  [[ -n $ADDR ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
[[ -n $ADDR ]] || { cat "$WORK/server.log" >&2; log "FAIL: kvserver did not start"; exit 1; }
log "kvserver at $ADDR"

# Copies of the examples, so nothing resolves against this repository.
cp -r client/examples "$WORK/examples"

log "CMake example against the installed .deb's files (find_package(unloadkv), unloadkv::client)"
cmake -S "$WORK/examples/cmake" -B "$WORK/cmake-build" -DCMAKE_PREFIX_PATH="$ROOT/usr" \
  -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; exit 1; }
cmake --build "$WORK/cmake-build" >>"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; exit 1; }
# ldd's output first, then grep: `ldd | grep -q` fails under pipefail when grep's early exit
# cuts ldd off (SIGPIPE).
libs=$(ldd "$WORK/cmake-build/kv_example")
grep -q "$ROOT/usr/lib/$MULTIARCH/libunloadkv.so.1" <<<"$libs" ||
  { echo "$libs" >&2; log "FAIL: not linked to the package's library"; exit 1; }
"$WORK/cmake-build/kv_example" "$ADDR"

log "Makefile example against the --prefix install (pkg-config unloadkv)"
PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" make -s -C "$WORK/examples/make" counter counter-static
libs=$(ldd "$WORK/examples/make/counter")
grep -q "$PREFIX/lib/libunloadkv.so.1" <<<"$libs" ||
  { echo "$libs" >&2; log "FAIL: counter is not linked to the installed library"; exit 1; }
libs=$(ldd "$WORK/examples/make/counter-static")
if grep -q libunloadkv <<<"$libs"; then
  log "FAIL: counter-static needs libunloadkv.so"
  exit 1
fi
text="the quick brown fox jumps over the lazy dog the fox the end"
printf '%s\n' "$text" | "$WORK/examples/make/counter" "$ADDR" | tee "$WORK/counter.out"
grep -qE '^ +4 the$' "$WORK/counter.out" || { log "FAIL: 'the' was not counted 4 times"; exit 1; }
printf '%s\n' "$text" | "$WORK/examples/make/counter-static" "$ADDR" | tee "$WORK/counter.out"
grep -qE '^ +8 the$' "$WORK/counter.out" || { log "FAIL: the static counter did not add up"; exit 1; }

log "Python example against the .deb's module"
PYTHONPATH="$ROOT/usr/lib/python3/dist-packages" /usr/bin/python3 -c \
  'import unloadkv, sys; assert unloadkv.__file__.startswith(sys.argv[1]), unloadkv.__file__' \
  "$ROOT/usr"
PYTHONPATH="$ROOT/usr/lib/python3/dist-packages" /usr/bin/python3 \
  "$WORK/examples/python/load_csv.py" "$ADDR" "$WORK/examples/python/cities.csv"

log "man pages: $(zcat "$ROOT/usr/share/man/man1/kvserver.1.gz" | grep -c '^\.HP') kvserver flags"
kill -TERM "$SERVER_PID"
wait "$SERVER_PID"
SERVER_PID=
"${DPKG[@]}" -r unloadkv >"$WORK/dpkg.log" 2>&1 ||
  { cat "$WORK/dpkg.log" >&2; log "FAIL: dpkg -r"; exit 1; }
left=$(cd "$ROOT" && find . -path ./var -prune -o ! -type d -print)
[[ -z $left ]] || { log "FAIL: left after dpkg -r: $left"; exit 1; }
log "OK: the package's CMake, Makefile (shared and static) and Python examples ran"
