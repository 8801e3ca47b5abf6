#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/lua/callgrind.sh - instructions per p:run for each arm of
# bench/lua/run_cost.lua, counted by valgrind --tool=callgrind: deterministic,
# unlike nanoseconds on this shared machine. Each arm runs twice (N and 2N
# calls after the same warm-up); the difference divided by N is one call.
# Split by where the instructions run: LuaJIT (the compiled traces and
# the VM: what nres.run's Lua costs), and C (the executor, the step
# wrappers, the clock, libc).
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

# Instructions of one run -> "total lua": lua = LuaJIT's compiled traces
# (callgrind's [???]) and its VM; the rest is libnres, libc and ld.so
# (callgrind names the object of a C function only on some lines, so C is
# what is left).
counts() {   # arm calls
  local out=$tmp/cg.out
  ARM=$1 CALLS=$2 LUA_PATH="$lua_dir/?.lua;;" NRES_LIB="$build/libnres.so" \
    valgrind --tool=callgrind --callgrind-out-file="$out" luajit "$here/bench/lua/run_cost.lua" \
    >/dev/null 2>&1
  callgrind_annotate --inclusive=no --show-percs=no --threshold=100 "$out" 2>/dev/null |
    awk '/PROGRAM TOTALS/ { c = $1; gsub(",", "", c); total = c }
         / \[(\?\?\?|[^]]*luajit[^]]*)\]$/ { c = $1; gsub(",", "", c); lua += c }
         END { printf "%d %d\n", total, lua }'
}

echo "| arm | instructions/call | LuaJIT (traces, VM) | C (libnres, libc) |"
echo "|---|---|---|---|"
for arm in $arms; do
  read -r ta la < <(counts "$arm" "$n")
  read -r tb lb < <(counts "$arm" $((2 * n)))
  total=$(( (tb - ta) / n )) lua=$(( (lb - la) / n ))
  echo "| $arm | $total | $lua | $((total - lua)) |"
done
