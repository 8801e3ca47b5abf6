#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/c/callgrind.sh - instructions per call for each arm of bench_call,
# counted by valgrind --tool=callgrind: deterministic, unlike nanoseconds.
# Each arm runs twice (N and 2N calls); the difference divided by N is the
# cost of one call, free of start-up.
#
#   bench/c/callgrind.sh [BUILD_DIR]                     the table
#   bench/c/callgrind.sh BUILD_DIR --check FILE [--build-type T]
#       the instruction budget (ctest 'callgrind_budget', label perf): fails
#       (exit 1) when an arm costs more than 3 % over FILE's figure; exit 77
#       (skipped) when valgrind is missing or T is not FILE's build type
#   bench/c/callgrind.sh BUILD_DIR --update FILE [--build-type T]
#       rewrites FILE with the figures measured now (one line per arm, so
#       lowering the budget is a one-line diff)
#   bench/c/callgrind.sh BUILD_DIR --threads             bench_threads arms at
#       1 and 2 threads: instructions per call when threads share a policy
set -euo pipefail
build=${1:-build}
[ $# -gt 0 ] && shift
mode=table file="" build_type=""
while [ $# -gt 0 ]; do
  case $1 in
    --check) mode=check; file=$2; shift 2 ;;
    --update) mode=update; file=$2; shift 2 ;;
    --build-type) build_type=$2; shift 2 ;;
    --threads) mode=threads; shift ;;
    *) echo "callgrind.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
n=100000
tolerance=3   # per cent

if ! command -v valgrind >/dev/null 2>&1; then
  echo "callgrind.sh: SKIPPED: valgrind is not installed (bash .ci/deps installs it)"
  exit 77
fi

# Instructions callgrind collected for one run of argv.
collected() {
  local c
  c=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
      sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
  if [ -z "$c" ]; then
    echo "callgrind.sh: no count from valgrind for: $*" >&2
    exit 1
  fi
  echo "$c"
}

per_call() {   # arm -> instructions per call
  local a b
  a=$(collected "$build/bench_call" --arm "$1" --calls "$n")
  b=$(collected "$build/bench_call" --arm "$1" --calls $((2 * n)))
  echo $(( (b - a) / n ))
}

arms="raw passthrough trivial default raw-retry-twice retry-twice"

if [ "$mode" = threads ]; then
  echo "| arm | threads | instructions/call |"
  echo "|---|---|---|"
  for arm in raw trivial default; do
    for t in 1 2; do
      a=$(collected "$build/bench_threads" --arm "$arm" --threads "$t" --calls "$n")
      b=$(collected "$build/bench_threads" --arm "$arm" --threads "$t" --calls $((2 * n)))
      echo "| $arm | $t | $(( (b - a) / (n * t) )) |"
    done
  done
  exit 0
fi

if [ "$mode" != table ]; then
  # The baseline's build type (a "# build-type: T" line) must be this one:
  # counts of a Debug or sanitizer build mean nothing against it.
  want=$(sed -n 's/^# build-type: *//p' "$file" 2>/dev/null || true)
  if [ "$mode" = check ] && [ -n "$want" ] && [ -n "$build_type" ] && [ "$want" != "$build_type" ]; then
    echo "callgrind.sh: SKIPPED: $file holds $want figures; this is a $build_type build"
    exit 77
  fi
fi

declare -A got
echo "| arm | instructions/call | over raw |"
echo "|---|---|---|"
raw=""
for arm in $arms; do
  per=$(per_call "$arm")
  got[$arm]=$per
  case $arm in raw|raw-retry-twice) raw=$per; over="-" ;; *) over="+$((per - raw))" ;; esac
  echo "| $arm | $per | $over |"
done

if [ "$mode" = update ]; then
  {
    echo "# Instruction budget: instructions per call of each bench_call arm, counted"
    echo "# by bench/c/callgrind.sh (valgrind --tool=callgrind), checked by ctest"
    echo "# 'callgrind_budget' (label perf): an arm more than ${tolerance} % above its line fails."
    echo "# Lower a line when a change makes an arm cheaper (bench/c/callgrind.sh BUILD"
    echo "# --update this-file rewrites them all)."
    echo "# build-type: ${build_type:-RelWithDebInfo}"
    for arm in $arms; do echo "$arm ${got[$arm]}"; done
  } >"$file"
  echo "wrote $file"
  exit 0
fi

if [ "$mode" = check ]; then
  status=0
  for arm in $arms; do
    base=$(awk -v a="$arm" '$1 == a { print $2 }' "$file")
    if [ -z "$base" ]; then
      echo "FAIL $arm: no line in $file"
      status=1
      continue
    fi
    limit=$(( base + (base * tolerance + 99) / 100 ))
    if [ "${got[$arm]}" -gt "$limit" ]; then
      echo "FAIL $arm: ${got[$arm]} instructions/call, budget $base (+${tolerance} % = $limit)"
      status=1
    elif [ $(( got[$arm] * 100 )) -lt $(( base * 99 )) ]; then   # > 1 % cheaper
      echo "ok   $arm: ${got[$arm]} <= $base (cheaper: lower the line in $file)"
    else
      echo "ok   $arm: ${got[$arm]} <= $limit (budget $base)"
    fi
  done
  exit $status
fi
