#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/gateway/callgrind.sh - user-space instructions per request of a
# gateway (issue 12), counted by valgrind's callgrind: unlike req/s on a
# shared 2-core machine, nearly the same from run to run (spread about
# 1k instructions: timers and GC fire at other moments under valgrind).
#
#   bash bench/gateway/callgrind.sh [--lib build/libnres.so] [N1 N2]
#
# Each gateway runs as one nginx process (master_process off, 1 worker)
# under callgrind in front of the test upstream (spec/nginx/
# nres_upstream.lua, outside valgrind, healthy), on 127.0.0.1 high ports;
# curl sends N1 requests on one keepalive connection, then nginx is
# stopped; the same again with N2 requests. Instructions per request =
# (Ir(N2) - Ir(N1)) / (N2 - N1): start-up, JIT warm-up and exit cancel.
# Kernel time (the sockets) is not counted: these figures are the part of
# the gateway's CPU that its own code decides.
#   plain       nginx proxy_pass (bench/gateway/nginx.conf.in)
#   plain-lua   the same with lua-nginx-module loaded and the module
#               arm's init_by_lua (bench/gateway/with-lua.sh): what loading
#               the Lua module costs by itself (only when NRES_CG_VARIANTS
#               names it)
#   balancer    balancer_by_lua setting the peer, nothing else
#   phases      that, plus a set_by_lua block returning a constant
#               X-Deadline-Ms (sent upstream) and an empty log_by_lua: what
#               lua-nginx-module costs before any nres code runs
#   nres        nres balancer mode (bench/gateway/nres-balancer.conf.in)
#   nres-module the same through the nginx module (bench/gateway/
#               nres-module.conf.in: no Lua phase per request), when
#               ngx_http_nres_module.so is built beside the library
#   nres-base   the same on NRES_BENCH_BASE_LUA (a baseline Lua tree), if set,
#               rendered from NRES_BENCH_BASE_CONF (default: the same
#               template; a baseline of another config shape needs its own)
# Defaults N1=300 N2=2300; about 3 minutes. NRES_CG_VARIANTS="plain nres"
# narrows a run; NRES_KEEP=1 keeps the runs' files (callgrind's among
# them). NRES_CG_PROFILE=K adds each variant's K costliest functions per
# request (callgrind_annotate of the N2 run minus that of the N1 run, over
# N2 - N1): self and inclusive instructions. NRES_CG_CACHE=1 simulates
# the caches too (callgrind --cache-sim=yes, valgrind's model of this
# machine's caches; slower): the table adds first-level and last-level
# cache misses per request (instructions and data, reads and writes), what
# an instruction count does not show.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

gw_counts_args 300 2300 "$@"
gw_need "$lib" valgrind curl
base_lua=${NRES_BENCH_BASE_LUA:-}
base_conf=${NRES_BENCH_BASE_CONF:-$here/nres-balancer.conf.in}
gw_scratch cg
vg_pid=""
cleanup() {
  [ -n "$vg_pid" ] && nres_stop_pid "$vg_pid"
  gw_scratch_remove
}
trap cleanup EXIT
export NRES_REGION_DIR=$regions
gw_test_upstream

# render NAME PREFIX: the gateway's nginx.conf, one process.
render() {
  local name=$1 p=$2 lua="$repo/lua/?.lua;${jit_dir}?.lua"
  local bal='balancer_by_lua_block { require("ngx.balancer").set_current_peer("127.0.0.1", '"$up"') }'
  case $name in
    plain|plain-lua)
      nres_render "$here/nginx.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="    server 127.0.0.1:$up;" NEXT="proxy_next_upstream off;"
      [ "$name" = plain-lua ] && gw_with_lua "$p" "$gw_port" "{ \"127.0.0.1:$up\" }" "$lua" ;;
    nres|nres-base|balancer|phases)
      local tpl=$here/nres-balancer.conf.in
      [ "$name" = nres-base ] && lua="$work/base/lua/?.lua;${jit_dir}?.lua" && tpl=$base_conf
      nres_render "$tpl" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="{ \"127.0.0.1:$up\" }" LUA="$lua" ;;
    nres-module)
      nres_render "$here/nres-module.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="{ \"127.0.0.1:$up\" }" LUA="$lua" MODULE="$module" ;;
  esac
  case $name in
    balancer)
      sed -i -e "s|balancer_by_lua_block {.*}|$bal|" -e "/set_by_lua_block /d" \
             -e '/if ($nres_deadline_ms/d' -e '/X-Deadline-Ms $nres_deadline_ms/d' \
             -e "s|log_by_lua_block {.*}||" "$p/nginx.conf" ;;
    phases)
      sed -i -e "s|balancer_by_lua_block {.*}|$bal|" \
             -e 's|set_by_lua_block \$nres_deadline_ms {.*}|set_by_lua_block $nres_deadline_ms { return "5000" }|' \
             -e "s|log_by_lua_block {.*}|log_by_lua_block { }|" "$p/nginx.conf" ;;
  esac
  sed -i 's/^worker_processes 2;/worker_processes 1; master_process off; daemon off;/' \
    "$p/nginx.conf"
}

# instructions NAME N: callgrind's totals for N requests: instructions,
# and with NRES_CG_CACHE first-level and last-level misses.
instructions() {
  local p="$work/$1.$2" user=()
  mkdir -p "$p/tmp"; chmod 777 "$p"
  render "$1" "$p"
  [ "$(id -u)" = 0 ] && user=(-g "user root root;")
  # each run its own region files, made anew: a run that attached the
  # files an earlier run left would start up at another cost (seen: ~0.3M
  # instructions more in init_by_lua), which the N2 - N1 difference would
  # put on the requests
  mkdir -p "$regions/$1.$2"
  local sim=(); [ -n "${NRES_CG_CACHE:-}" ] && sim=(--cache-sim=yes)
  NRES_REGION_DIR=$regions/$1.$2 valgrind --tool=callgrind "${sim[@]}" --callgrind-out-file="$p/cg.out" \
    "$NGINX" -p "$p" -e "$p/error.log" -c "$p/nginx.conf" "${user[@]}" 2>"$p/valgrind.log" &
  vg_pid=$!
  local up_ok=""
  for _ in $(seq 1 300); do
    curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$gw_port/warm" && { up_ok=1; break; }
    sleep 0.1
  done
  [ -n "$up_ok" ] || { echo "$1 did not start under valgrind:" >&2; tail -5 "$p/error.log" >&2; exit 1; }
  local bad
  bad=$(curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$gw_port/bench?[1-$2]" |
        grep -vc '^200$' || true)
  [ "$bad" = 0 ] || { echo "$1: $bad of $2 answers were not 200" >&2; exit 1; }
  kill -QUIT "$vg_pid"; wait "$vg_pid" || true; vg_pid=""
  awk '/^events:/ { for (i = 2; i <= NF; i++) at[$i] = i }
       /^(summary|totals):/ {
         printf "%s", $(at["Ir"])
         if ("D1mr" in at)
           printf " %s %s", $(at["I1mr"]) + $(at["D1mr"]) + $(at["D1mw"]),
                  $(at["ILmr"]) + $(at["DLmr"]) + $(at["DLmw"])
         print ""; exit }' "$p/cg.out"
}

# per_function FILE INCLUSIVE: "function<TAB>count" for every function of
# a callgrind file (INCLUSIVE yes or no; directories dropped), sorted.
per_function() {
  callgrind_annotate --auto=no --threshold=100 --inclusive="$2" "$1" 2>/dev/null |
    awk '$1 ~ /^[0-9,]+$/ && $2 ~ /^\(/ {
           n = $1; gsub(",", "", n); f = $0
           sub(/^ *[0-9,]+ *\( *[0-9.]+%\) */, "", f); sub(/ \[.*\]$/, "", f)
           sub(/^.*\//, "", f); print f "\t" n }' | LC_ALL=C sort -t $'\t' -k1,1
}

# per_request NAME INCLUSIVE: "function<TAB>count per request" of NAME's
# two runs (the N2 run's count minus the N1 run's, over N2 - N1).
per_request() {
  LC_ALL=C join -t $'\t' -a 1 -e 0 -o 0,1.2,2.2 \
    <(per_function "$work/$1.$N2/cg.out" "$2") <(per_function "$work/$1.$N1/cg.out" "$2") |
    awk -F'\t' -v d=$((N2 - N1)) '{ printf "%s\t%.0f\n", $1, ($2 - $3) / d }'
}

# profile NAME: NAME's NRES_CG_PROFILE costliest functions per request
# (by self instructions), with their inclusive count.
profile() {
  echo ""
  echo "| $1: function | self per request | inclusive per request |"
  echo "|---|---|---|"
  LC_ALL=C join -t $'\t' -o 0,1.2,2.2 <(per_request "$1" no) <(per_request "$1" yes) |
    sort -t $'\t' -k2,2nr | awk -v k="$NRES_CG_PROFILE" 'NR <= k' |
    awk -F'\t' '{ printf "| %s | %s | %s |\n", $1, $2, $3 }'
}

variants="plain balancer phases nres"
[ -n "$module" ] && variants="$variants nres-module"
variants=${NRES_CG_VARIANTS:-$variants}
if [ -n "$base_lua" ]; then
  mkdir -p "$work/base" && cp -r "$base_lua" "$work/base/lua" && cp -r "$repo/policies" "$work/base/"
  variants="$variants nres-base"
fi
if [ -n "${NRES_CG_CACHE:-}" ]; then
  echo "| gateway | instructions per request | over plain proxy_pass | L1 misses per request | LL misses per request |"
  echo "|---|---|---|---|---|"
else
  echo "| gateway | instructions per request | over plain proxy_pass |"
  echo "|---|---|---|"
fi
plain=""
for v in $variants; do
  read -r a a1 aL < <(instructions "$v" "$N1"); read -r b b1 bL < <(instructions "$v" "$N2")
  per=$(( (b - a) / (N2 - N1) ))
  [ -z "$plain" ] && plain=$per
  misses=""
  [ -n "${NRES_CG_CACHE:-}" ] &&
    misses=$(awk -v a1="$a1" -v b1="$b1" -v aL="$aL" -v bL="$bL" -v d=$((N2 - N1)) \
               'BEGIN { printf " %.1f | %.1f |", (b1 - a1) / d, (bL - aL) / d }')
  echo "| $v | $per | +$(( per - plain )) |$misses"
  if [ -n "${NRES_CG_PROFILE:-}" ]; then profile "$v" >>"$work/profiles.md"; fi
done
if [ -n "${NRES_CG_PROFILE:-}" ]; then cat "$work/profiles.md"; fi
