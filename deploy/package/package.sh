#!/usr/bin/env bash
# Builds the installable unloadkv (docs/build.md, "Packages"):
#   deploy/package/package.sh [--out=DIR]      unloadkv_VERSION_amd64.deb in DIR (default .),
#                                              checked with lintian when it is installed
#   deploy/package/package.sh --prefix=DIR     the same files installed under DIR instead
# Both hold kvserver, kvclient, libunloadkv.so.1 (and .so, .a), include/unloadkv/client.h,
# unloadkv.pc, the CMake package unloadkv, the Python module, kvserver@.service and man pages.
# Runs from the repository root (./quickstart.sh package calls it); needs bazel, help2man,
# dpkg-dev (dpkg-shlibdeps) and python3-dev and pybind11-dev for the module.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '[package %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'package: %s\n' "$*" >&2; exit 2; }

PREFIX=
OUT=.
for arg in "$@"; do
  case $arg in
    --prefix=*) PREFIX=${arg#--prefix=} ;;
    --out=*) OUT=${arg#--out=} ;;
    *) die "unknown argument '$arg' (usage: package.sh [--out=DIR] | --prefix=DIR)" ;;
  esac
done
if [[ -n $PREFIX ]]; then
  [[ $PREFIX == /* ]] || die "--prefix must be an absolute path, not '$PREFIX'"
  PREFIX=${PREFIX%/}
fi

VERSION=$(sed -n 's/^inline constexpr char kVersion\[\] = "\([0-9.]*\)";/\1/p' \
  transport/base/version.h)
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "no version in transport/base/version.h"
MAJOR=${VERSION%%.*}
grep -q "#define UNLOADKV_VERSION \"$VERSION\"" client/client.h ||
  die "client/client.h's UNLOADKV_VERSION is not $VERSION"
# Reproducible: the man pages' dates and the files' times come from the last commit.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

log "building kvserver, kvclient, the SDK library and the Python module (-c opt)"
bazel build -c opt //server:kvserver //client:kvclient //client:libunloadkv.so.1 \
  //client:libunloadkv //client/python:unloadkv.so
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
PYTHON_SUFFIX=$(/usr/bin/python3 -c \
  'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')

# What a static link needs besides libunloadkv.a: the system libraries Bazel linked, as -l
# options (pkg-config) and as library names (CMake).
LINKOPTS=$(grep -v '^$' "$BIN/client/libunloadkv.linkopts" | tr '\n' ' ')
LINKOPTS=${LINKOPTS% }
LINKOPTS_CMAKE=$(printf '%s\n' $LINKOPTS | sed -n 's/^-l//p' | tr '\n' ';')
LINKOPTS_CMAKE="${LINKOPTS_CMAKE%;};stdc++;m"

# fill TEMPLATE OUTPUT KEY=VALUE...: @KEY@ replaced by VALUE.
fill() {
  local in=$1 out=$2 kv expr=()
  shift 2
  for kv in "$@"; do expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
  sed "${expr[@]}" "$in" >"$out"
  if grep -q '@[A-Z_]*@' "$out"; then die "$out: unfilled placeholder"; fi
}

# stage ROOT PREFIX LIBDIR PYDIR UNITDIR: every file under ROOT/PREFIX (LIBDIR and PYDIR
# relative to PREFIX; UNITDIR absolute, under ROOT).
stage() {
  local root=$1 prefix=$2 libdir=$3 pydir=$4 unitdir=$5
  local dest=$root$prefix up
  install -d "$dest/bin" "$dest/$libdir/pkgconfig" "$dest/$libdir/cmake/unloadkv" \
    "$dest/include/unloadkv" "$dest/$pydir" "$dest/share/man/man1" \
    "$dest/share/doc/unloadkv" "$root$unitdir"
  install -m 755 "$BIN/server/kvserver" "$BIN/client/kvclient" "$dest/bin/"
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$dest/bin/kvserver" \
    "$dest/bin/kvclient"
  install -m 644 "$BIN/client/libunloadkv.so.1" "$dest/$libdir/libunloadkv.so.$VERSION"
  strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    "$dest/$libdir/libunloadkv.so.$VERSION"
  ln -sf "libunloadkv.so.$VERSION" "$dest/$libdir/libunloadkv.so.$MAJOR"
  ln -sf "libunloadkv.so.$MAJOR" "$dest/$libdir/libunloadkv.so"
  install -m 644 "$BIN/client/libunloadkv.a" "$dest/$libdir/libunloadkv.a"
  strip --strip-debug --remove-section=.comment "$dest/$libdir/libunloadkv.a"
  install -m 644 client/client.h "$dest/include/unloadkv/client.h"
  install -m 644 "$BIN/client/python/unloadkv.so" "$dest/$pydir/unloadkv$PYTHON_SUFFIX"
  strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    "$dest/$pydir/unloadkv$PYTHON_SUFFIX"

  fill deploy/package/unloadkv.pc.in "$dest/$libdir/pkgconfig/unloadkv.pc" \
    "PREFIX=$prefix" "LIBDIR=$libdir" "VERSION=$VERSION" "LIBS_PRIVATE=$LINKOPTS"
  up=$(awk -F/ '{ s = ".."; for (i = 1; i <= NF + 1; i++) s = s "/.."; print s }' <<<"$libdir")
  fill deploy/package/unloadkvConfig.cmake.in "$dest/$libdir/cmake/unloadkv/unloadkvConfig.cmake" \
    "LIBDIR=$libdir" "UP=$up" "VERSION=$VERSION" "MAJOR=$MAJOR" \
    "LIBS_PRIVATE_CMAKE=$LINKOPTS_CMAKE"
  fill deploy/package/unloadkvConfigVersion.cmake.in \
    "$dest/$libdir/cmake/unloadkv/unloadkvConfigVersion.cmake" "VERSION=$VERSION" "MAJOR=$MAJOR"

  sed "s|/usr/local/bin/kvserver|$prefix/bin/kvserver|g" deploy/systemd/kvserver@.service \
    >"$root$unitdir/kvserver@.service"
  chmod 644 "$root$unitdir/kvserver@.service"
  install -m 644 deploy/systemd/kvserver.conf.example "$dest/share/doc/unloadkv/"
  install -m 644 deploy/package/copyright "$dest/share/doc/unloadkv/copyright"
  gzip -9n <deploy/package/changelog >"$dest/share/doc/unloadkv/changelog.gz"
  chmod 644 "$dest/share/doc/unloadkv/changelog.gz"

  help2man --no-info --no-discard-stderr --help-option=--helpshort -N \
    -n "unloadkv key-value server" "$BIN/server/kvserver" | gzip -9n >"$dest/share/man/man1/kvserver.1.gz"
  help2man --no-info --no-discard-stderr --help-option=--helpshort -N \
    -n "unloadkv client: keys, loads and cluster administration" "$BIN/client/kvclient" |
    gzip -9n >"$dest/share/man/man1/kvclient.1.gz"
  chmod 644 "$dest/share/man/man1/"*.gz
  if [[ -n $root ]]; then find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +; fi
}

if [[ -n $PREFIX ]]; then
  log "installing under $PREFIX"
  stage "" "$PREFIX" lib lib/python3/dist-packages "$PREFIX/lib/systemd/system"
  log "installed: $PREFIX/bin/kvserver, $PREFIX/lib/libunloadkv.so.$MAJOR,"
  log "  $PREFIX/lib/pkgconfig/unloadkv.pc, $PREFIX/lib/cmake/unloadkv, $PREFIX/include/unloadkv,"
  log "  Python: PYTHONPATH=$PREFIX/lib/python3/dist-packages"
  exit 0
fi

command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null ||
  die "dpkg-deb and dpkg-shlibdeps are needed (Debian's dpkg-dev)"
WORK=$(mktemp -d -t unloadkv-package.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root
LIBDIR=lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)
stage "$ROOT" /usr "$LIBDIR" lib/python3/dist-packages /lib/systemd/system
install -d "$ROOT/usr/share/lintian/overrides"
install -m 644 deploy/package/lintian-overrides "$ROOT/usr/share/lintian/overrides/unloadkv"
touch -d "@$SOURCE_DATE_EPOCH" "$ROOT/usr/share/lintian/overrides/unloadkv"

# Dependencies: Debian's packages of every library the ELF files need (dpkg-shlibdeps),
# plus the Python the module was built for.
mkdir -p "$WORK/src/debian"
printf 'Source: unloadkv\n\nPackage: unloadkv\nArchitecture: amd64\n' >"$WORK/src/debian/control"
DEPENDS=$(cd "$WORK/src" && dpkg-shlibdeps -O -l"$ROOT/usr/$LIBDIR" "$ROOT/usr/bin/kvserver" \
  "$ROOT/usr/bin/kvclient" "$ROOT/usr/$LIBDIR/libunloadkv.so.$VERSION" \
  "$ROOT/usr/lib/python3/dist-packages/unloadkv$PYTHON_SUFFIX" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[[ -n $DEPENDS ]] || die "dpkg-shlibdeps found no dependencies"
PYVER=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYNEXT=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % (sys.version_info[0], sys.version_info[1] + 1))')
DEPENDS="$DEPENDS, python3 (>= $PYVER), python3 (<< $PYNEXT)"

install -d -m 755 "$ROOT/DEBIAN"
fill deploy/package/control.in "$ROOT/DEBIAN/control" "VERSION=$VERSION" "DEPENDS=$DEPENDS"
printf 'libunloadkv %s unloadkv (>= %s)\n' "$MAJOR" "$VERSION" >"$ROOT/DEBIAN/shlibs"
# The exported symbols (the public API of client.h: docs/sdk.md), for dpkg-shlibdeps of
# programs that link the library.
(cd "$WORK/src" && dpkg-gensymbols -q -punloadkv -v"$VERSION" \
  -e"$ROOT/usr/$LIBDIR/libunloadkv.so.$VERSION" -O"$ROOT/DEBIAN/symbols" >/dev/null)
sed -i '1a * Build-Depends-Package: unloadkv' "$ROOT/DEBIAN/symbols"
printf 'activate-noawait ldconfig\n' >"$ROOT/DEBIAN/triggers"
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
chmod 644 "$ROOT/DEBIAN/"*
mkdir -p "$OUT"
DEB=$OUT/unloadkv_${VERSION}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
log "built $DEB ($(du -k "$DEB" | cut -f1) KiB): $(dpkg-deb -c "$DEB" | grep -vc '/$') files"
log "Depends: $DEPENDS"
if command -v lintian >/dev/null; then
  log "lintian:"
  lintian --tag-display-limit 0 "$DEB" >&2 || log "lintian reported errors (above)"
fi
echo "$DEB"
