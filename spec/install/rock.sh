#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# rock.sh VERSION - `luarocks make` of the top-level rockspec into a
# temporary tree, from a copy of the sources (the checkout is not written
# to), then a fresh LuaJIT with only that tree's paths (`luarocks path`)
# and no NRES_LIB: require "nres" must find the rock's libnres, load the
# presets, run a policy call (two failures, then success) and report
# VERSION; require "nresrun" must resolve too. Then `luarocks lint`, the
# licence, `luarocks pack` of a release tarball made from the tree, and
# the error under plain Lua 5.1. HOME points into the
# temporary directory, so LuaRocks' cache and config stay there.
set -euo pipefail
version=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nres-rock.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "rock.sh: $*" >&2; exit 1; }
command -v luarocks >/dev/null || fail "luarocks not installed (apt-get install luarocks)"

# The checkout's files as they are (tracked, and untracked but not ignored:
# no build trees; outside git, all but build*/), without the peer driver's
# npm packages.
mkdir -p "$tmp/src" "$tmp/home"
sources() {
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$src" ls-files -z -co --exclude-standard
  else
    (cd "$src" && find . -path './build*' -prune -o -type f -print0)
  fi
}
sources | (cd "$src" && while IFS= read -r -d '' f; do
    [ -e "$f" ] && [[ $f != */node_modules/* ]] && printf '%s\0' "$f"
  done | tar --null -T - -cf -) | tar -xf - -C "$tmp/src"
[ -f "$tmp/src/nres-$version-1.rockspec" ] || fail "nres-$version-1.rockspec not copied"
export HOME="$tmp/home"
unset NRES_LIB LUA_PATH LUA_CPATH LUA_INIT
(cd "$tmp/src" && luarocks make --tree "$tmp/tree" "nres-$version-1.rockspec") \
  >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; fail "luarocks make failed"; }

# Everything the rock installed is in its tree: nothing in a prefix.
outside=$(sed -n 's/^-- \(Installing\|Up-to-date\): //p' "$tmp/make.log" | grep -v "^$tmp/" || true)
[ -z "$outside" ] || fail "luarocks make installed outside its tree: $outside"

lpath=$(luarocks path --tree "$tmp/tree" --lr-path)
lcpath=$(luarocks path --tree "$tmp/tree" --lr-cpath)
[ -n "$(find "$tmp/tree" -name libnres.so)" ] || fail "no libnres.so in the tree"

ROCK_PATH=$lpath ROCK_CPATH=$lcpath WANT=$version TREE=$tmp/tree luajit -e '
  package.path, package.cpath = os.getenv("ROCK_PATH"), os.getenv("ROCK_CPATH")
  local want, tree = os.getenv("WANT"), os.getenv("TREE")
  local nres = require "nres"
  assert(nres._VERSION == want, "nres._VERSION " .. tostring(nres._VERSION) .. ", want " .. want)
  assert(nres.library:sub(1, #tree) == tree, "libnres loaded from " .. nres.library .. ", not the tree")
  local n = 0
  local p = nres.policy{ base = "trivial", attempts = 3 }   -- a preset: nres/policies
  local res, reason = p:run(function(x)
    n = n + 1
    if n < 3 then return nil, "boom" end
    return x * 2
  end, 21)
  assert(res == 42 and n == 3, "run: " .. tostring(res) .. " " .. tostring(reason) .. " after " .. n)
  local st = p:stats()
  assert(st.calls == 1 and st.attempts == 3 and st.retries == 2, "stats")
  local run = require "nresrun"
  assert(run._VERSION == want, "nresrun._VERSION")
  print("rock.sh: nres " .. nres._VERSION .. " from " .. nres.library)
' || fail "the rock does not work"

# The rockspec itself: luarocks lint, the licence, and a source that
# `luarocks pack` accepts for a release tarball made from the tree (the
# tarball is written here, so the URL's folder is this test's; the file
# name and the folder inside the tarball are the rockspec's own).
spec=$tmp/src/nres-$version-1.rockspec
(cd "$tmp/src" && luarocks lint "nres-$version-1.rockspec") >"$tmp/lint.log" 2>&1 ||
  { cat "$tmp/lint.log" >&2; fail "luarocks lint failed"; }
fields=$(SPEC=$spec luajit -e '
  local env = {}
  assert(setfenv(loadfile(os.getenv("SPEC")), env))()
  io.write(tostring(env.description and env.description.license), " ",
           tostring(env.source and env.source.url), " ", tostring(env.source and env.source.dir))')
read -r license url srcdir <<<"$fields"
[ "$license" = MIT ] || fail "rockspec: description.license is '$license', want MIT"
tarball=${url##*/}
[ "$tarball" = "nres-$version.tar.gz" ] && [ "$srcdir" = "nres-$version" ] ||
  fail "rockspec: source.url '$url' and source.dir '$srcdir' do not name nres-$version.tar.gz and nres-$version"
mkdir -p "$tmp/release" "$tmp/pack"
(cd "$tmp" && ln -s src "nres-$version" && tar -chzf "$tmp/release/$tarball" --exclude="nres-$version/.git" --exclude="nres-$version/build-rock" "nres-$version")
sed "s|url = \"$url\"|url = \"file://$tmp/release/$tarball\"|" "$spec" >"$tmp/pack/nres-$version-1.rockspec"
(cd "$tmp/pack" && luarocks pack "nres-$version-1.rockspec") >"$tmp/pack.log" 2>&1 ||
  { cat "$tmp/pack.log" >&2; fail "luarocks pack failed"; }
listing=$(cd "$tmp/pack" && unzip -l "nres-$version-1.src.rock")
for f in "nres-$version-1.rockspec" "$tarball"; do
  grep -q " $f\$" <<<"$listing" || fail "the source rock lacks $f: $listing"
done

# LuaJIT, not plain Lua 5.1 (which Debian's luarocks runs): the rock says
# so when loaded under another Lua.
if command -v lua5.1 >/dev/null; then
  out=$(ROCK_PATH=$lpath lua5.1 -e 'package.path = os.getenv("ROCK_PATH"); require "nres"' 2>&1 || true)
  grep -q "nres needs LuaJIT" <<<"$out" || fail "under plain Lua 5.1 require \"nres\" says: $out"
fi
echo "rock.sh: lint, licence, luarocks pack of a release tarball and the LuaJIT check ok"
