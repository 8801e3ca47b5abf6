#!/usr/bin/env bash
# bench/c/callgrind.sh - instructions per call for each arm of bench_call,
# counted by valgrind --tool=callgrind: deterministic, unlike nanoseconds.
# Each arm runs twice (N and 2N calls); the difference divided by N is the
# cost of one call, free of start-up. Usage: bench/c/callgrind.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
n=100000
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$build/bench_call" --arm "$1" --calls "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| arm | instructions/call | over raw |"
echo "|---|---|---|"
raw=""
for arm in raw passthrough trivial default raw-retry-twice retry-twice; do
  a=$(count "$arm" "$n")
  b=$(count "$arm" $((2 * n)))
  per=$(( (b - a) / n ))
  case $arm in raw|raw-retry-twice) raw=$per; over="-" ;; *) over="+$((per - raw))" ;; esac
  echo "| $arm | $per | $over |"
done
