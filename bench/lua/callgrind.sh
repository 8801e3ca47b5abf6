#!/usr/bin/env bash
# bench/lua/callgrind.sh - instructions per p:run for each arm of
# bench/lua/run_cost.lua, counted by valgrind --tool=callgrind: deterministic,
# unlike nanoseconds on this shared machine. Each arm runs twice (N and 2N
# calls after the same warm-up); the difference divided by N is one call.
# Split by where the instructions run: libnres (the C executor and the
# step wrappers), the rest (LuaJIT's compiled traces, its VM and libc).
#
#   bench/lua/callgrind.sh [BUILD_DIR] [ARM...]
set -euo pipefail
build=${1:-build}
[ $# -gt 0 ] && shift
arms=${*:-raw passthrough trivial default lua-classifier raw-retry-twice retry-twice raw-fail-1in4 passthrough-fail-1in4}
n=100000
here=$(cd "$(dirname "$0")/../.." && pwd)
lua_dir=${LUA_DIR:-$here/lua}   # LUA_DIR: another tree of lua/ to count (a baseline)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_annotate >/dev/null 2>&1; then
  echo "callgrind.sh: SKIPPED: valgrind is not installed"
  exit 77
fi

# Instructions of one run (total, and in libnres) -> "total nres".
counts() {   # arm calls
  local out=$tmp/cg.out
  ARM=$1 CALLS=$2 LUA_PATH="$lua_dir/?.lua;;" NRES_LIB="$build/libnres.so" \
    valgrind --tool=callgrind --callgrind-out-file="$out" luajit "$here/bench/lua/run_cost.lua" \
    >/dev/null 2>&1
  callgrind_annotate --inclusive=no --show-percs=no --threshold=100 "$out" 2>/dev/null |
    awk '/PROGRAM TOTALS/ { c = $1; gsub(",", "", c); total = c }
         /\[.*libnres[^]]*\]$/ { c = $1; gsub(",", "", c); nres += c }
         END { printf "%d %d\n", total, nres }'
}

echo "| arm | instructions/call | in libnres | Lua (traces, VM) and libc |"
echo "|---|---|---|---|"
for arm in $arms; do
  read -r ta na < <(counts "$arm" "$n")
  read -r tb nb < <(counts "$arm" $((2 * n)))
  total=$(( (tb - ta) / n )) nres=$(( (nb - na) / n ))
  echo "| $arm | $total | $nres | $((total - nres)) |"
done
