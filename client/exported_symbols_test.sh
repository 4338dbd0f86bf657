#!/usr/bin/env bash
# libunloadkv.so.1 exports the public API of client/client.h and nothing else, under its
# SONAME; the installed header includes nothing generated or internal (docs/sdk.md).
set -euo pipefail
lib=client/libunloadkv.so.1
header=client/client.h
fail() { echo "FAIL: $*" >&2; exit 1; }

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $soname == libunloadkv.so.1 ]] || fail "SONAME is '$soname', want libunloadkv.so.1"
if readelf -d "$lib" | grep -q 'TEXTREL'; then fail "text relocations"; fi

# Every defined dynamic symbol another object can bind to, demangled, without its version
# suffix. Local ones (nm's b, d, r, t: a hidden template's thread_local, which dynamic TLS
# needs in the table) bind to nothing outside the library.
mapfile -t symbols < <(nm -D --defined-only -C "$lib" | awk '$2 !~ /^[bdrt]$/' | cut -d' ' -f3- |
  sed 's/@@\?UNLOADKV_1$//' | sort -u)
((${#symbols[@]} > 0)) || fail "no exported symbols"
# A public free function, a function of the public classes (its name, then its parameters),
# or their vtables and type information. Not "unloadkv::Client::.*": that would pass std::
# templates instantiated on Client's types, whose demangled names start with their return type.
public='^(unloadkv::Version\(\)|unloadkv::(Encode|Decode)Fields(\[abi:cxx11\])?\(.*\)|unloadkv::Client(::[A-Za-z_~][A-Za-z_0-9]*)+\(.*\)|(vtable|typeinfo|typeinfo name) for unloadkv::Client(::Batch::State)?|UNLOADKV_1)$'
bad=0
for s in "${symbols[@]}"; do
  if [[ ! $s =~ $public ]]; then
    echo "exported but not public: $s" >&2
    bad=1
  fi
done
((bad == 0)) || fail "symbols outside the public API"
for want in 'unloadkv::Version()' 'unloadkv::Client::Connect(unloadkv::ClientOptions const&)' \
  'vtable for unloadkv::Client' 'unloadkv::DecodeFields[abi:cxx11](absl::debian3::string_view)'; do
  # Not grep -q: it exits at the first match, printf then dies of SIGPIPE, and pipefail makes
  # that a failure (a TSan build in a fresh clone reported DecodeFields missing while nm listed
  # it).
  printf '%s\n' "${symbols[@]}" | grep -xF "$want" >/dev/null || fail "missing: $want"
done
# Nothing undefined that the library should have brought itself (protobuf-generated code,
# transport): only libc, libstdc++ and Debian's libraries.
if nm -D --undefined-only -C "$lib" | grep -E ' unloadkv::|proto::' >&2; then
  fail "undefined symbols of this project"
fi

includes=$(sed -n 's/^#include [<"]\([^>"]*\)[>"].*/\1/p' "$header")
while read -r inc; do
  case $inc in
    absl/*) ;;
    */*) fail "$header includes $inc (only the standard library and Abseil may be)" ;;
    *) ;;
  esac
done <<<"$includes"
echo "OK: ${#symbols[@]} exported symbols, all public; SONAME $soname"
printf '  %s\n' "${symbols[@]}"
