#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# deb.sh BUILD_DIR VERSION SOVERSION - the Debian packages of a build
# (cpack -G DEB into a temporary directory), unpacked with dpkg-deb -x into
# a temporary root, never installed: their names, versions and
# inter-package dependencies; spec/install/consumer.c built against the
# root through the packaged nres.pc and run; the packaged Lua face loading
# the packaged libnres.so.SOVERSION (no NRES_LIB) and running a policy
# call; the packaged nresrun and nres-depserver starting; the packaged
# nginx module (when built) in nginx's module directory, finding the
# packaged libnres; no dangling link, a copyright file in each, and
# lintian clean (spec/install/lintian.sh).
set -euo pipefail
build=$(cd "$1" && pwd)
version=$2
so=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nres-deb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cflags="-std=c11 -Wall -Wextra -Werror"   # a consumer as strict as a careful user
fail() { echo "deb.sh: $*" >&2; exit 1; }

(cd "$tmp" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/out") >"$tmp/cpack.log" 2>&1 \
  || { cat "$tmp/cpack.log" >&2; fail "cpack failed"; }

field() { dpkg-deb -f "$1" "$2"; }
declare -A arch=([libnres$so]=amd64 [libnres-dev]=amd64 [lua-nres]=all [nresrun]=amd64)
# The fleet agent's packages, when the build has them (hiredis found).
if [ -f "$build/nres-syncd" ]; then arch[nres-sync]=amd64; arch[libnres-sync$so]=amd64; fi
# The nginx module's, when the build has it (nginx-dev found).
[ -f "$build/ngx_http_nres_module.so" ] && arch[libnginx-mod-http-nres]=amd64
for pkg in "${!arch[@]}"; do
  deb=$(ls "$tmp/out/${pkg}_${version}_"*.deb 2>/dev/null || true)
  [ -n "$deb" ] || fail "no package $pkg $version: $(ls "$tmp/out")"
  [ "$(field "$deb" Package)" = "$pkg" ] && [ "$(field "$deb" Version)" = "$version" ] \
    || fail "$deb: wrong Package/Version"
  case "$(field "$deb" Architecture)" in
    all|amd64|"$(dpkg --print-architecture)") ;;
    *) fail "$deb: architecture $(field "$deb" Architecture)" ;;
  esac
  dpkg-deb -x "$deb" "$tmp/root"
done
deps() { field "$(ls "$tmp/out/${1}_${version}_"*.deb)" Depends; }
for pkg in libnres-dev lua-nres nresrun; do
  case "$(deps "$pkg")" in *"libnres$so (= $version)"*) ;; *) fail "$pkg does not depend on libnres$so (= $version): $(deps "$pkg")" ;; esac
done
case "$(deps nresrun)" in *"lua-nres (= $version)"*) ;; *) fail "nresrun does not depend on lua-nres" ;; esac
case "$(deps "libnres$so")" in *libuv1*) ;; *) fail "libnres$so does not depend on libuv1: $(deps "libnres$so")" ;; esac
# Every file of every package is there: no symbolic link dangles in the
# unpacked root (libnres-dev's libnres_sync.so needs libnres-sync, which
# libnres-dev depends on).
dangling=$(find "$tmp/root" -xtype l)
[ -z "$dangling" ] || fail "dangling links: $dangling"
if [ -n "${arch[nres-sync]:-}" ]; then
  case "$(deps libnres-dev)" in *"libnres-sync$so (= $version)"*) ;; *) fail "libnres-dev does not depend on libnres-sync$so: $(deps libnres-dev)" ;; esac
fi
# Each package says its licence: the machine-readable copyright file.
for pkg in "${!arch[@]}"; do
  head -1 "$tmp/root/usr/share/doc/$pkg/copyright" 2>/dev/null |
    grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
    fail "$pkg: no machine-readable /usr/share/doc/$pkg/copyright"
done

# C: headers, nres.pc (relocatable: it finds the root from its own place).
pcdir=$(dirname "$(find "$tmp/root" -name nres.pc)")
libdir=$(cd "$pcdir/.." && pwd)
[ -f "$libdir/libnres.so.$so" ] && [ -f "$libdir/libnres.a" ] || fail "libraries missing under $libdir"
# shellcheck disable=SC2046
gcc -o "$tmp/consumer" "$here/consumer.c" $cflags $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs nres) \
  -Wl,-rpath,"$libdir"
"$tmp/consumer" "$version" || fail "consumer against the packages failed"
ldd "$tmp/consumer" | grep "libnres.so.$so => $libdir/" >/dev/null || fail "consumer did not load the packaged libnres"

# Lua: the packaged modules find libnres.so.SOVERSION; in a real install
# that is one of nres.cdef's install locations, here package.cpath.
luadir=$tmp/root/usr/share/lua/5.1
grep -F "\"/libnres.so.$so\"" "$luadir/nres/cdef.lua" >/dev/null \
  || fail "nres/cdef.lua does not look for libnres.so.$so"
env -u NRES_LIB -u LUA_PATH -u LUA_CPATH LUADIR="$luadir" LIBDIR="$libdir" SO="$so" WANT="$version" luajit -e '
  package.path = os.getenv("LUADIR") .. "/?.lua"
  package.cpath = os.getenv("LIBDIR") .. "/?.so." .. os.getenv("SO")
  local nres = require "nres"
  assert(nres._VERSION == os.getenv("WANT"), "nres._VERSION " .. nres._VERSION)
  assert(nres.library == os.getenv("LIBDIR") .. "/libnres.so." .. os.getenv("SO"), nres.library)
  local n = 0
  local p = nres.policy{ base = "default", attempts = 2, backoff = { base = 0.001 } }
  local res = p:run(function() n = n + 1; if n < 2 then return nil, "boom" end; return "ok" end)
  assert(res == "ok" and n == 2, "run")
' || fail "the packaged Lua face does not work"

# The harness: nresrun finds its libnres and Lua modules from its own place.
out=$(env -u NRES_LIB -u LUA_PATH "$tmp/root/usr/bin/nresrun" --version) || fail "nresrun --version failed"
case "$out" in "nresrun $version "*) ;; *) fail "nresrun --version: $out" ;; esac
"$tmp/root/usr/bin/nres-depserver" --help >/dev/null || fail "nres-depserver --help failed"
if [ -n "${arch[nres-sync]:-}" ]; then
  LD_LIBRARY_PATH=$libdir "$tmp/root/usr/bin/nres-syncd" --help >/dev/null 2>&1 \
    || fail "nres-syncd --help failed"
  case "$(deps nres-sync)" in *"libnres$so (= $version)"*) ;; *) fail "nres-sync does not depend on libnres$so" ;; esac
fi
if [ -n "${arch[libnginx-mod-http-nres]:-}" ]; then
  d=$(deps libnginx-mod-http-nres)
  for want in "libnres$so (= $version)" "lua-nres (= $version)" libnginx-mod-http-lua; do
    case "$d" in *"$want"*) ;; *) fail "libnginx-mod-http-nres does not depend on $want: $d" ;; esac
  done
  abi=$(sed -n 's/^nginx:abi=//p' /usr/share/nginx/src/debian/libnginx-mod.abisubstvars 2>/dev/null || true)
  if [ -n "$abi" ]; then
    case "$d" in *"$abi"*) ;; *) fail "libnginx-mod-http-nres does not depend on $abi: $d" ;; esac
  fi
  mod=$tmp/root/usr/lib/nginx/modules/ngx_http_nres_module.so
  [ -f "$mod" ] || fail "no usr/lib/nginx/modules/ngx_http_nres_module.so in libnginx-mod-http-nres"
  found=$(ldd "$mod" | awk '$1 == "libnres.so.'"$so"'" {print $3}')
  [ "$(readlink -f "$found")" = "$(readlink -f "$libdir/libnres.so.$so")" ] ||
    fail "the packaged module loads libnres from '$found', expected $libdir/libnres.so.$so"
fi
# lintian: no error, no warning that cmake/packaging.cmake does not justify.
bash "$here/lintian.sh" "$tmp/out" "$here/../../cmake/packaging.cmake" || fail "lintian"
echo "deb.sh: $(ls "$tmp/out" | grep -c '\.deb$') packages, consumer, Lua face, nresrun, nginx module and lintian ok"
