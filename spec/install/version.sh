#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# version.sh BUILD_DIR VERSION - the one version (CMake's project version,
# VERSION here) is what every face reports: the generated nres/version.h,
# nres_version_string() through the Lua face (nres._VERSION, nres.version),
# nres.pc, the top-level rockspec (its file name and `version`), and the
# first release heading of CHANGELOG.md.
set -euo pipefail
build=$(cd "$1" && pwd)
version=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "version.sh: $*" >&2; exit 1; }

grep -q "^#define NRES_VERSION_STRING \"$version\"$" "$build/include/nres/version.h" \
  || fail "$build/include/nres/version.h does not say $version"
grep -q "^Version: $version$" "$build/nres.pc" || fail "nres.pc does not say $version"

LUA_PATH="$src/lua/?.lua;;" NRES_LIB="$build/libnres.so" WANT=$version luajit -e '
  local want = os.getenv("WANT")
  local nres = require "nres"
  assert(nres._VERSION == want, "nres._VERSION is " .. tostring(nres._VERSION) .. ", want " .. want)
  assert(nres.version == want, "nres.version is " .. tostring(nres.version) .. ", want " .. want)
'  || fail "the Lua face disagrees"

rockspecs=("$src"/nres-*.rockspec)
[ ${#rockspecs[@]} -eq 1 ] || fail "want one top-level rockspec, found: ${rockspecs[*]}"
[ "$(basename "${rockspecs[0]}")" = "nres-$version-1.rockspec" ] \
  || fail "rockspec is $(basename "${rockspecs[0]}"), want nres-$version-1.rockspec"
ROCKSPEC=${rockspecs[0]} WANT=$version luajit -e '
  local env = {}
  local chunk = assert(loadfile(os.getenv("ROCKSPEC")))
  setfenv(chunk, env)()
  assert(env.package == "nres", "rockspec package is " .. tostring(env.package))
  assert(env.version == os.getenv("WANT") .. "-1", "rockspec version is " .. tostring(env.version))
' || fail "the rockspec disagrees"

first=$(grep -m1 -E '^## ' "$src/CHANGELOG.md" || true)
case "$first" in
  "## $version "*|"## $version") ;;
  *) fail "CHANGELOG.md's first release is '$first', want '## $version'" ;;
esac
echo "version.sh: $version everywhere"
