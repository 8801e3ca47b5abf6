#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/gateway/closed-loop.sh - from real traffic to a proven policy, on a
# real nginx (issue 27): record, tune, replay through the gateway, and set
# the prediction beside the measurement.
#
#   bash bench/gateway/closed-loop.sh [--lib build/libnres.so] [--out FILE.md]
#        [--faults "failures brownout overload"] [--reps N] [--quick] [--keep DIR]
#
# One command. The gateway benchmark's test upstream (nginx + Lua,
# spec/nginx/nres_upstream.lua) runs healthy answers in 5 ms. For each
# fault, the same paced traffic (wrk, bench/gateway/wrk.lua with RATE: 400
# requests/s from 32 connections for T=10 s, the fault from 3 s to 7 s,
# started on a whole second so the fit's windows meet the fault's edges):
#   failures  every 3rd request answered 500
#   brownout  answers in 25 ms instead of 5
#   overload  answers in 20 ms instead of 5, and 4 in flight at most
#             instead of 16 (beyond: 503 at once): its capacity drops from
#             3200 to 200 answers/s
# 1. record: plain nginx proxy_pass, no retries, its access log in the
#    nres_tune log_format (closed-loop-record.conf.in);
# 2. tune: `nresrun tune access.log` (the default objective), and the
#    fit's prediction for the tuned policy and for `default`
#    (closed-loop.lua predict);
# 3. replay: the same traffic through the nginx module's balancer mode
#    with the tuned policy and with `default`, which goes first on even
#    reps (closed-loop-gw.conf.in),
#    each with fresh shared state, its access log the JSON try log of
#    docs/tune.md, measured as the prediction is (closed-loop.lua measure;
#    the prediction also as the balancer runs a policy: no waits between
#    tries, no hedge):
#    goodput (2xx within the SLO), success, the upstream's own count of
#    requests per client request, p99 of the successes.
# --reps N (default 2) does it all N times, each with its own recording
# and tune. The report (--out, default bench/results/closed-loop-DATE.md)
# has the table, medians over the reps with their range; its reading,
# "where the prediction misses", is written by hand under it. --quick
# (the ctest smoke): 1 fault, 1 rep, T=3 s, 100 requests/s. --keep DIR
# keeps the logs, policies and tune reports. About 4 minutes on 2 cores
# (--quick: 20 s). Exit 2: a tool or the module is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

lib="$repo/build/libnres.so"
out="$repo/bench/results/closed-loop-$(date +%Y-%m-%d).md"
faults="failures brownout overload"
T=10; H=3; F=4; RATE=400; CONNS=32; SEEDS=1; REPS=2; keep=""
while [ $# -gt 0 ]; do
  case $1 in
    --lib) lib=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --quick) T=3; H=1; F=1; RATE=100; CONNS=8; REPS=1; faults=${faults%% *}; shift ;;
    *) echo "usage: $0 [--lib libnres.so] [--out FILE.md] [--faults LIST] [--reps N] [--quick] [--keep DIR]" >&2; exit 2 ;;
  esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "--reps: expected a whole number >= 1, got '$REPS'" >&2; exit 2; }
for f in $faults; do
  case $f in failures|brownout|overload) ;; *) echo "--faults: expected failures, brownout or overload, got '$f'" >&2; exit 2 ;; esac
done
gw_need "$lib" wrk curl luajit
nresrun=$(dirname "$NRES_LIB")/nresrun
[ -x "$nresrun" ] || { echo "no $nresrun: build first" >&2; exit 2; }
[ -n "$module" ] || { echo "missing: ngx_http_nres_module.so beside $NRES_LIB (needs nginx-dev)" >&2; exit 2; }
gw_scratch loop
cleanup() {   # --keep: the run's files, kept on failure too
  if [ -n "$keep" ]; then mkdir -p "$keep" && cp -r "$work"/. "$keep"/ 2>/dev/null || true; fi
  gw_scratch_remove
}
trap cleanup EXIT
export NRES_UPSTREAM_DEADLINES=off
export LUA_PATH="$repo/lua/?.lua;;"
gw_test_upstream   # $up, $gw_port, $jit_dir
helper() { luajit "$here/closed-loop.lua" "$@"; }

admin() { curl -sf "http://127.0.0.1:$up/admin?$1" >/dev/null; }
upstream_requests() { curl -sf "http://127.0.0.1:$up/admin" | grep -o '"requests":[0-9]*' | cut -d: -f2; }
# fault_mode FAULT on|off: the upstream's mode in and out of the fault
fault_mode() {
  case $1/$2 in
    failures/on) admin "mode=every&n=3&status=500&delay=5" ;;
    brownout/on) admin "mode=healthy&delay=25" ;;
    overload/on) admin "mode=healthy&delay=20&capacity=4" ;;
    overload/off) admin "mode=healthy&delay=5&capacity=16" ;;
    */off) admin "mode=healthy&delay=5" ;;
  esac
}
# traffic FAULT DIR: the paced run against $gw_port, the fault from H to
# H+F s; DIR/wrk.out, and DIR/upstream (the upstream's request count)
traffic() {
  local fault=$1 dir=$2
  fault_mode "$fault" off
  admin "reset=1"
  sleep "$(date +%N | awk '{ printf "%.3f", 1 - $1 / 1e9 }')"   # to the next whole second
  RATE=$((RATE / 2)) wrk -t2 -c"$CONNS" -d"${T}s" --timeout 5s -s "$here/wrk.lua" \
    "http://127.0.0.1:$gw_port/" >"$dir/wrk.out" 2>&1 &
  local wrk_pid=$!
  sleep "$H"; fault_mode "$fault" on
  sleep "$F"; fault_mode "$fault" off
  wait "$wrk_pid"
  upstream_requests >"$dir/upstream"
}
# serve CONF DIR FAULT: nginx with CONF (prefix DIR) for one traffic run
serve() {
  local conf=$1 dir=$2 fault=$3
  nres_nginx_start "$dir" "$conf"
  nres_wait_http "http://127.0.0.1:$gw_port/"
  # 1 s of healthy traffic first, not logged: the first arm after a tune
  # was the slower one, whichever policy it had
  fault_mode "$fault" off
  RATE=$((RATE / 2)) wrk -t2 -c"$CONNS" -d1s -s "$here/wrk.lua" "http://127.0.0.1:$gw_port/" >/dev/null 2>&1
  local log; for log in "$dir/access.log" "$dir/tries.log"; do [ -f "$log" ] && : >"$log"; done
  traffic "$fault" "$dir"
  nres_stop_pid "$(cat "$dir/nginx.pid")"   # this one; the upstream runs on
}

tsv="$work/figures.tsv"
: >"$tsv"
started=$(date -u +%s)
for rep in $(seq 1 "$REPS"); do
for fault in $faults; do
  d="$work/$fault/$rep"
  mkdir -p "$d/record" "$d/tuned" "$d/default" && chmod -R 777 "$work/$fault"
  echo "closed-loop: $fault, rep $rep: record" >&2
  nres_render "$here/closed-loop-record.conf.in" "$d/record/nginx.conf" \
    PREFIX="$d/record" PORT="$gw_port" UPSTREAM_PORT="$up"
  serve "$d/record/nginx.conf" "$d/record" "$fault"
  echo "closed-loop: $fault, rep $rep: tune" >&2
  "$nresrun" tune "$d/record/access.log" --out "$d/tune" >"$d/tune.out" 2>&1 ||
    { cat "$d/tune.out" >&2; exit 1; }
  helper predict "$d/record/access.log" "$d/tune/policy.lua" "$SEEDS" "$fault" "$tsv" "$rep"
  slo=$(awk -F'\t' -v f="$fault" -v r="$rep" '$1 == f && $3 == "predicted" && $11 == r { print $8; exit }' "$tsv")
  arms="tuned default"; [ $((rep % 2)) = 0 ] && arms="default tuned"   # each first in turn
  for arm in $arms; do
    echo "closed-loop: $fault, rep $rep: gateway, $arm" >&2
    policy='"default"'
    [ "$arm" = tuned ] && policy=$(helper policy "$d/tune/policy.lua")
    nres_render "$here/closed-loop-gw.conf.in" "$d/$arm/nginx.conf" PREFIX="$d/$arm" PORT="$gw_port" \
      LUA="$repo/lua/?.lua;${jit_dir}?.lua" MODULE="$module" POLICY="$policy" PEERS="{ \"127.0.0.1:$up\" }"
    mkdir -p "$regions/$fault-$rep-$arm"
    NRES_REGION_DIR_FIXED="$regions/$fault-$rep-$arm" serve "$d/$arm/nginx.conf" "$d/$arm" "$fault"
    helper measure "$d/$arm/tries.log" "$(cat "$d/$arm/upstream")" "$slo" "$fault" "$arm" "$tsv" "$rep"
  done
done
done
took=$(( $(date -u +%s) - started ))

header="$work/header.md"
{
  echo "# The closed loop on a real nginx, $(date -u +%Y-%m-%d)"
  echo
  echo "\`bash bench/gateway/closed-loop.sh\` (bench/gateway/closed-loop.sh says what it does), $took s."
  echo "Traffic: ${RATE} requests/s paced from $CONNS connections for $T s, the fault from $H s to $((H + F)) s; $REPS reps."
  echo "Machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; shared with other engineers' builds and tests."
  echo
  echo "What nresrun tune chose on each rep's recording (its report's verdict, then the policy's fields):"
  echo
  for fault in $faults; do
    for rep in $(seq 1 "$REPS"); do
      t="$work/$fault/$rep/tune"
      echo "- $fault, rep $rep: $(grep -m1 'Verdict' "$t/report.md" | sed 's/\*\*//g; s/ The file: policy.lua.//')" \
        "Fields: $(grep -v '^ *--' "$t/policy.lua" | grep -v '^return\|^}' | tr -s ' \n' ' ')"
    done
  done
  echo
  echo "Predicted: the fit of the recorded access log, replayed on the simulator (seed 1). Measured: the"
  echo "gateway's JSON try log; dependency requests per request from the upstream's own count."
  echo "Predicted, the gateway's tries: the same policy replayed without waits between tries and without"
  echo "hedging, as the balancer runs it. Each cell: the median over the reps, with the range [min-max] when"
  echo "they differ."
  echo
} >"$header"
mkdir -p "$(dirname "$out")"
helper report "$tsv" "$out" "$header"
echo "written: $out" >&2
