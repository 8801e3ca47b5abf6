#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/lua/clock_floor.sh - what p:run's two clock reads cost: the default
# policy's success path timed with this build's libnres and with a copy of
# it whose clock counts instead of reading the TSC (no rdtsc; time moves
# 30 ticks a read), run alternately, each run's median over the raw call of
# the same repetition (bench/lua/run_cost.lua, CALLS=300000 REPS=7). The
# counter copy is for this measurement only: its time barely moves, so no
# deadline or timeout it decides means anything. Also the cost of one
# rdtsc alone (back to back, thread CPU time), and the load average.
#
#   bench/lua/clock_floor.sh [BUILD_DIR] [ROUNDS]
#
# The counter copy is built once from HEAD's committed tree (git archive)
# into a temporary directory, -j2, and removed at the end.
set -euo pipefail
build=${1:-build}
rounds=${2:-4}
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$build/libnres.so" ]; then
  echo "clock_floor.sh: BUILD_DIR: expected a build with libnres.so, got '$build'" >&2
  exit 2
fi
case $rounds in
  ''|*[!0-9]*|0) echo "clock_floor.sh: ROUNDS: expected a whole number above 0, got '$rounds'" >&2; exit 2 ;;
esac
build=$(cd "$build" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The counter copy: the TSC read in core/clock.h replaced by a counter.
mkdir "$tmp/src"
git -C "$here" archive HEAD | tar -x -C "$tmp/src"
read_line='    uint64_t ticks = __rdtsc() - nres__tsc_scale.base_tsc;'
counter_line='    static uint64_t counter; uint64_t ticks = (counter += 30);'
if ! grep -qF "$read_line" "$tmp/src/runtime/src/core/clock.h"; then
  echo "clock_floor.sh: runtime/src/core/clock.h: expected the line '$read_line', not found (update this script)" >&2
  exit 2
fi
awk -v from="$read_line" -v to="$counter_line" '$0 == from { $0 = to } 1' \
  "$tmp/src/runtime/src/core/clock.h" > "$tmp/clock.h"
mv "$tmp/clock.h" "$tmp/src/runtime/src/core/clock.h"
cmake -S "$tmp/src" -B "$tmp/build" -DNRES_TESTS=OFF -DNRES_BENCH=OFF >/dev/null
cmake --build "$tmp/build" --target nres -j2 >/dev/null
if objdump -d "$tmp/build/libnres.so" | grep -A400 '<nres_step_sync_report>:' | grep -q rdtsc; then
  echo "clock_floor.sh: the counter copy still reads the TSC in nres_step_sync_report" >&2
  exit 1
fi

cat > "$tmp/rdtsc.c" <<'EOF'
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>
static double cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(void) {
  const long n = 5000000;
  uint64_t s = 0;
  double t0 = cpu();
  for (long i = 0; i < n; i++) s += __rdtsc();
  printf("%.1f%s\n", (cpu() - t0) / n, s ? "" : " ");
  return 0;
}
EOF
rdtsc_ns=none
if [ "$(uname -m)" = x86_64 ] && cc -O2 -o "$tmp/rdtsc" "$tmp/rdtsc.c" 2>/dev/null; then rdtsc_ns=yes; fi

over() {   # LIBDIR -> default's and trivial's medians over raw
  LUA_PATH="$here/lua/?.lua;;" NRES_LIB="$1/libnres.so" CALLS=300000 REPS=7 \
    luajit "$here/bench/lua/run_cost.lua" |
    awk -F'|' '$2 ~ /^ (default|trivial) $/ { gsub(/ /, "", $6); v[$2] = $6 }
               END { printf "%s %s\n", v[" default "], v[" trivial "] }'
}

echo "| round | load average | one rdtsc, ns | default over raw: TSC | default: counter | TSC - counter | trivial: TSC | trivial: counter |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  tsc=none
  [ "$rdtsc_ns" = yes ] && tsc=$("$tmp/rdtsc")
  read -r d_tsc t_tsc < <(over "$build")
  read -r d_cnt t_cnt < <(over "$tmp/build")
  diff=$(awk -v a="$d_tsc" -v b="$d_cnt" 'BEGIN { printf "%+.1f", a - b }')
  echo "| $r | $load | $tsc | $d_tsc | $d_cnt | $diff | $t_tsc | $t_cnt |"
done
