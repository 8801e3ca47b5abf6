#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# consumer.sh BUILD_DIR VERSION - install a build into a temporary prefix
# and build spec/install/consumer.c against it the way C users do, through
# pkg-config, with gcc and with clang: linked with libnres.so, with
# libnres.a (pkg-config --static, from a prefix holding only the -dev
# files), and with all of libnres.a (--whole-archive: every object's
# dependencies must be in nres.pc's Requires.private/Libs.private). Runs
# each binary. Nothing outside the temporary directory is written.
set -euo pipefail
build=$(cd "$1" && pwd)
version=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nres-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cflags="-std=c11 -Wall -Wextra -Werror"   # a consumer as strict as a careful user
fail() { echo "consumer.sh: $*" >&2; exit 1; }

# Everything, and a prefix with only the -dev component (no libnres.so*):
# there -lnres can only be libnres.a.
cmake --install "$build" --prefix "$tmp/full" >/dev/null
cmake --install "$build" --prefix "$tmp/static" --component dev >/dev/null
libdir=$(dirname "$(find "$tmp/full" -name nres.pc)")/..
slibdir=$(dirname "$(find "$tmp/static" -name nres.pc)")/..
rm -f "$slibdir"/libnres.so "$slibdir"/libnres_sync.so   # the namelinks, dangling without lib
[ -f "$slibdir/libnres.a" ] || fail "no libnres.a in the -dev component"
[ -z "$(find "$tmp/static" -name 'libnres.so*')" ] || fail "shared library in the static prefix"

pc() { PKG_CONFIG_PATH="$1/pkgconfig" pkg-config "${@:2}" nres; }
[ "$(pc "$libdir" --modversion)" = "$version" ] || fail "nres.pc version $(pc "$libdir" --modversion), want $version"
static_libs=$(pc "$slibdir" --static --libs)
for lib in -lnres -luv -lhttp_parser -lpthread -lm; do
  case " $static_libs " in *" $lib "*) ;; *) fail "pkg-config --static --libs nres lacks $lib: $static_libs" ;; esac
done

# The archive holds real code, not only GCC's LTO bytecode.
[ "$(objdump -d "$slibdir/libnres.a" | grep -c '<nres_run>:')" -eq 1 ] || fail "libnres.a: no code for nres_run (slim LTO objects?)"

for cc in gcc clang; do
  command -v "$cc" >/dev/null || fail "$cc not installed"
  # Shared: the libnres.so of the prefix (rpath, as an installed one would
  # be found by ld.so in a system directory).
  # shellcheck disable=SC2046
  "$cc" -o "$tmp/shared-$cc" "$here/consumer.c" $cflags $(pc "$libdir" --cflags --libs) \
    -Wl,-rpath,"$(cd "$libdir" && pwd)"
  readelf -d "$tmp/shared-$cc" | grep 'NEEDED.*libnres\.so' >/dev/null || fail "$cc shared: libnres.so not needed"
  "$tmp/shared-$cc" "$version" || fail "$cc shared: consumer failed"

  # Static libnres (system libraries stay shared).
  # shellcheck disable=SC2046
  "$cc" -o "$tmp/static-$cc" "$here/consumer.c" $cflags $(pc "$slibdir" --static --cflags --libs)
  if readelf -d "$tmp/static-$cc" | grep 'NEEDED.*libnres' >/dev/null; then fail "$cc static: still needs libnres"; fi
  "$tmp/static-$cc" "$version" || fail "$cc static: consumer failed"

  # Every object of the archive: nres.pc must name all they need.
  # shellcheck disable=SC2046
  "$cc" -o "$tmp/whole-$cc" "$here/consumer.c" $cflags $(pc "$slibdir" --static --cflags) \
    -Wl,--whole-archive "$slibdir/libnres.a" -Wl,--no-whole-archive \
    $(pc "$slibdir" --static --libs)
  "$tmp/whole-$cc" "$version" || fail "$cc whole archive: consumer failed"
done
# The fleet agent's library, when built (hiredis): libnres_sync.pc, shared
# and static, with gcc and clang (its archive holds real code too).
sync=
if [ -f "$build/libnres_sync.so" ]; then
  sync=", libnres_sync"
  [ -f "$libdir/pkgconfig/libnres_sync.pc" ] || fail "no libnres_sync.pc installed"
  spc() { PKG_CONFIG_PATH="$1/pkgconfig" pkg-config "${@:2}" libnres_sync; }
  [ "$(spc "$libdir" --modversion)" = "$version" ] || fail "libnres_sync.pc version $(spc "$libdir" --modversion)"
  [ "$(objdump -d "$slibdir/libnres_sync.a" | grep -c '<nres_sync_new>:')" -eq 1 ] ||
    fail "libnres_sync.a: no code for nres_sync_new (slim LTO objects?)"
  for cc in gcc clang; do
    # shellcheck disable=SC2046
    "$cc" -o "$tmp/sync-shared-$cc" "$here/sync_consumer.c" $cflags $(spc "$libdir" --cflags --libs) \
      -Wl,-rpath,"$(cd "$libdir" && pwd)"
    "$tmp/sync-shared-$cc" >/dev/null || fail "$cc shared: sync consumer failed"
    # shellcheck disable=SC2046
    "$cc" -o "$tmp/sync-static-$cc" "$here/sync_consumer.c" $cflags $(spc "$slibdir" --static --cflags --libs)
    if readelf -d "$tmp/sync-static-$cc" | grep 'NEEDED.*libnres' >/dev/null; then fail "$cc static: sync consumer still needs libnres"; fi
    "$tmp/sync-static-$cc" >/dev/null || fail "$cc static: sync consumer failed"
  done
fi
echo "consumer.sh: gcc and clang, shared, static and whole-archive$sync: ok"
