#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/gateway/run.sh - gateways against failing upstreams and pools
# (issues 7 and 12).
#
#   bash bench/gateway/run.sh [--lib build/libnres.so] [--out FILE.md] [--quick]
#   bash bench/gateway/run.sh --healthy [--out FILE.md]   # the throughput check only
#
# --healthy: only the healthy one-upstream throughput comparison (nginx
# proxy_pass, nres balancer mode and the nginx module, HREPS=25 interleaved runs of D=2 s
# each, about 3 minutes), printed as a summary (and written to --out, if
# given; the full report's file is left alone). NRES_BENCH_BASE_LUA=DIR
# (any mode) adds "nres-balancer-base": balancer mode again, on the Lua
# tree DIR (e.g. `git archive` of another commit's lua/), so a change is
# measured against its baseline in the same run; NRES_BENCH_BASE_CONF=FILE
# renders it from another nginx.conf template (a baseline whose config
# shape differs, e.g. the commit's own bench/gateway/nres-balancer.conf.in).
# NRES_BENCH_BASE_BUILD=DIR (with NRES_BENCH_BASE_LUA, the same commit's
# lua/) adds "nres-module-base": the module arm on DIR's
# ngx_http_nres_module.so and libnres.so (another commit's build).
# NRES_BENCH_HREPS overrides HREPS. The arm nginx-plain-b, proxy_pass
# again with the same config, is a control: its ratio to nginx-plain is
# what the method reads for two equal gateways
# (NRES_BENCH_GATEWAYS="nginx-plain nginx-plain-b ...").
# The healthy cells also record each
# gateway's CPU per request (its processes' utime + stime over the run,
# from /proc, divided by the requests: less sensitive to what else runs on
# the machine than req/s, though not immune).
#
# One command: starts the test upstream (nginx + Lua, spec/nginx/
# nres_upstream.lua, listening on three ports, each its own upstream) and,
# one at a time, each gateway on 127.0.0.1 high ports, drives it, stops it
# by pid (a trap stops everything on failure):
#   nginx-plain       proxy_pass, no retries (round-robin over a pool)
#   nginx-plain-lua   nginx-plain with lua-nginx-module loaded and the
#                     module arm's init_by_lua (bench/gateway/with-lua.sh),
#                     no nres directive: what loading the Lua module costs
#                     by itself; only when NRES_BENCH_GATEWAYS names it
#   nginx-retry       proxy_next_upstream error timeout http_503, 3 tries,
#                     default passive checks (max_fails=1 fail_timeout=10s)
#   nginx-retry-mf0   the same with max_fails=0
#   haproxy           retries 2, retry-on 503 (+ connection failures,
#                     response timeouts), option redispatch, active TCP
#                     checks with observe layer7 + on-error mark-down
#   nres-balancer     nginx's proxy + nres balancer mode (the "gateway"
#                     preset; peers with ejection and latency-aware choice)
#   nres-module       balancer mode through the nginx module
#                     (ngx_http_nres_module.so, built beside the library:
#                     no Lua phase per request; same policy); left out
#                     when the module is not built
#   nres-cosocket     nginx + nres cosocket mode (the "gateway" preset; one
#                     host:port, so no pool scenarios)
# One upstream (a single upstream; nginx-retry lists it 3 times, since
# nginx retries only on another server): healthy, fails every 4th, every
# 2nd, down, a 3 s blip, and a reload (HUP) during an outage. A pool of
# three peers: all healthy (1 ms each), one peer failing every 2nd
# request, one peer down, one peer 10x slower (10 ms). Per cell: wrk
# (2 threads, 16 connections) for REPS runs of D s after a 1 s healthy
# warm-up; pool cells skip the first second after the fault starts (one
# more 1 s run, not counted). Healthy with one upstream, the throughput
# comparison, runs every gateway at once on its own port and interleaves
# HREPS runs of each (so outside load hits all alike). The blip: one wrk run of BLIP_D s with the
# blip from 1 s to 4 s. The reload: wrk for 6 s against a down upstream,
# a reload at 3.5 s; upstream requests in the 1.5 s before and after it.
# About 8 minutes (--quick: about 3).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/gateway/common.sh
. "$here/common.sh"

lib="$repo/build/libnres.so"
out="$repo/bench/results/gateway-$(date +%Y-%m-%d).md"
D=2; REPS=3; HREPS=${NRES_BENCH_HREPS:-15}; BLIP_D=8
healthy_only=""
while [ $# -gt 0 ]; do
  case $1 in
    --lib) lib=$2; shift 2 ;;
    --out) out=$2; out_given=1; shift 2 ;;
    --quick) D=1; REPS=1; HREPS=2; BLIP_D=6; shift ;;
    --healthy) healthy_only=1; HREPS=${NRES_BENCH_HREPS:-25}; shift ;;
    *) echo "usage: $0 [--lib libnres.so] [--out FILE.md] [--quick | --healthy]" >&2; exit 2 ;;
  esac
done
D=${NRES_BENCH_D:-$D}   # whole seconds of each wrk run (2; wrk takes no fraction)
[[ "$D" =~ ^[1-9][0-9]*$ ]] ||
  { echo "NRES_BENCH_D: expected whole seconds >= 1 (wrk takes no fraction), got '$D'" >&2; exit 2; }
base_lua=${NRES_BENCH_BASE_LUA:-}
base_build=${NRES_BENCH_BASE_BUILD:-}
if [ -n "$base_build" ]; then
  [ -f "$base_build/ngx_http_nres_module.so" ] && [ -f "$base_build/libnres.so" ] ||
    { echo "NRES_BENCH_BASE_BUILD: no ngx_http_nres_module.so and libnres.so in $base_build" >&2; exit 2; }
  [ -n "$base_lua" ] ||
    { echo "NRES_BENCH_BASE_BUILD needs NRES_BENCH_BASE_LUA (its commit's lua/)" >&2; exit 2; }
  base_build=$(cd "$base_build" && pwd)
fi
base_conf=${NRES_BENCH_BASE_CONF:-$here/nres-balancer.conf.in}
if [ -n "$base_lua" ] && [ ! -f "$base_lua/nres/ngx.lua" ]; then
  echo "NRES_BENCH_BASE_LUA: no nres/ngx.lua under $base_lua" >&2; exit 2
fi
# the nginx module, built beside the library, is an arm of its own when present
gw_need "$lib" wrk haproxy curl luajit
gw_scratch gw
export NRES_REGION_DIR_FIXED=$regions
haproxy_pid=""
cleanup() {
  [ -n "$haproxy_pid" ] && nres_stop_pid "$haproxy_pid"
  nres_nginx_stop_all
  rm -rf "$work" "$regions"
}
trap cleanup EXIT

# A snapshot of the Lua tree, the policies and the library for the whole
# run: a checkout that changes during the run must not change the gateways.
mkdir -p "$work/src"
cp -r "$repo/lua" "$repo/policies" "$work/src/"
cp "$NRES_LIB" "$work/src/libnres.so"
# The module links the build's libnres (its rpath), and must share it with
# the Lua declarations (one registry): the module arm runs on the build's
# library and module as they are, not on the snapshot (build_lib).
build_lib=$NRES_LIB
[ -n "$base_lua" ] && mkdir -p "$work/base" && cp -r "$base_lua" "$work/base/lua" &&
  cp -r "$work/src/policies" "$work/base/"   # the same policies
export NRES_LIB=$work/src/libnres.so
lua_dir=$work/src/lua
jit_dir=$(ls -d /usr/share/luajit-2.1*/ 2>/dev/null | head -1)
mapfile -t ports < <(nres_free_ports 4)
p1=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; gw_port=${ports[3]}
gw="http://127.0.0.1:$gw_port"
tsv="$work/results.tsv"
: >"$tsv"

mkdir -p "$work/up" && chmod 777 "$work/up"
nres_render "$repo/spec/nginx/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$p1" SPEC="$repo/spec/nginx" EXTRA_LISTEN="
    listen 127.0.0.1:$p2 reuseport backlog=4096;
    listen 127.0.0.1:$p3 reuseport backlog=4096;"
# the upstream keeps no X-Deadline-Ms counts (nres_upstream.lua: the tests'
# bookkeeping, which would load the upstream more, on the same cores, for
# the gateways sending the header)
NRES_UPSTREAM_DEADLINES=off nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"

admin() { curl -sf "http://127.0.0.1:$1/admin?$2"; }
admin_all() { for p in "$p1" "$p2" "$p3"; do admin "$p" "$1" >/dev/null; done; }
json() { luajit "$repo/spec/nginx/json.lua" "$1"; }
ups() { curl -sf "http://127.0.0.1:$1/admin" | grep -o '"requests":[0-9]*' | cut -d: -f2; }
gw_pid=""

# start_gateway NAME POOL(0|1)
start_gateway() {
  local name=$1 pool=$2 p="$work/$1"
  rm -rf "$p"; mkdir -p "$p/tmp"; chmod 777 "$p"
  # each gateway its own region files, fresh for each cell: gateways
  # running at once (the healthy cells) must not write one upstream's
  # slots, nor a cell start with the breakers the one before left
  export NRES_REGION_DIR_FIXED=$regions/$name
  rm -rf "$NRES_REGION_DIR_FIXED"; mkdir -p "$NRES_REGION_DIR_FIXED"
  chmod 777 "$NRES_REGION_DIR_FIXED"
  local s1="    server 127.0.0.1:$p1" s2="    server 127.0.0.1:$p2" s3="    server 127.0.0.1:$p3"
  local servers="$s1;
$s1;
$s1;" lua_peers="{ \"127.0.0.1:$p1\" }" hservers="  server up 127.0.0.1:$p1 maxconn 1000 check observe layer7 error-limit 5 on-error mark-down inter 1s fall 3 rise 2"
  if [ "$pool" = 1 ]; then
    servers="$s1;
$s2;
$s3;"
    lua_peers="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\", \"127.0.0.1:$p3\" }"
    hservers=""
    for port in "$p1" "$p2" "$p3"; do
      hservers="$hservers
  server up$port 127.0.0.1:$port maxconn 1000 check observe layer7 error-limit 5 on-error mark-down inter 1s fall 3 rise 2"
    done
  fi
  case $name in
    nginx-plain|nginx-plain-b|nginx-plain-lua)
      local one="$s1;"; [ "$pool" = 1 ] && one=$servers
      nres_render "$here/nginx.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="$one" NEXT="proxy_next_upstream off;"
      [ "$name" = nginx-plain-lua ] && gw_with_lua "$p" "$gw_port" "$lua_peers" \
        "$lua_dir/?.lua;${jit_dir}?.lua" ;;
    nginx-retry|nginx-retry-mf0)
      local mf=""; [ "$name" = nginx-retry-mf0 ] && mf=" max_fails=0"
      nres_render "$here/nginx.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="${servers//;/$mf;}" \
        NEXT="proxy_next_upstream error timeout http_503; proxy_next_upstream_tries 3;" ;;
    nres-balancer|nres-balancer-base)
      local ld=$lua_dir; [ "$name" = nres-balancer-base ] && ld=$work/base/lua
      local tpl=$here/nres-balancer.conf.in
      [ "$name" = nres-balancer-base ] && tpl=$base_conf
      nres_render "$tpl" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="$lua_peers" LUA="$ld/?.lua;${jit_dir}?.lua" ;;
    nres-module)
      nres_render "$here/nres-module.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="$lua_peers" LUA="$lua_dir/?.lua;${jit_dir}?.lua" \
        MODULE="$module" ;;
    nres-module-base)
      nres_render "$here/nres-module.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="$lua_peers" LUA="$work/base/lua/?.lua;${jit_dir}?.lua" \
        MODULE="$base_build/ngx_http_nres_module.so" ;;
    nres-cosocket)
      nres_render "$here/nres.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        UPSTREAM_PORT="$p1" LUA="$lua_dir/?.lua;${jit_dir}?.lua" ;;
    haproxy)
      nres_render "$here/haproxy.cfg.in" "$p/haproxy.cfg" PREFIX="$p" PORT="$gw_port" \
        SERVERS="$hservers"
      haproxy -q -f "$p/haproxy.cfg"
      for _ in $(seq 1 100); do [ -s "$p/haproxy.pid" ] && break; sleep 0.05; done
      haproxy_pid=$(head -1 "$p/haproxy.pid")
      gw_pid=$haproxy_pid
      nres_wait_http "$gw/warm"
      return ;;
  esac
  if [ "$name" = nres-module ]; then
    NRES_LIB=$build_lib nres_nginx_start "$p" "$p/nginx.conf"
  elif [ "$name" = nres-module-base ]; then
    NRES_LIB=$base_build/libnres.so nres_nginx_start "$p" "$p/nginx.conf"
  else
    nres_nginx_start "$p" "$p/nginx.conf"
  fi
  gw_pid=$(cat "$p/nginx.pid")
  nres_wait_http "$gw/warm"
}

# stop_gateway: gw_stop (common.sh), no graceful wait between cells.
stop_gateway() {
  gw_stop "$gw_pid"
  [ "$gw_pid" = "$haproxy_pid" ] && haproxy_pid=""
  gw_pid=""
}

# reload_gateway NAME: nginx -s reload (HUP), or an HAProxy soft reload
# (a new process takes over with -sf).
reload_gateway() {
  if [ "$1" = haproxy ]; then
    local p="$work/haproxy"
    rm -f "$p/haproxy.pid"
    haproxy -q -f "$p/haproxy.cfg" -sf "$haproxy_pid"
    for _ in $(seq 1 100); do [ -s "$p/haproxy.pid" ] && break; sleep 0.02; done
    haproxy_pid=$(head -1 "$p/haproxy.pid")
    gw_pid=$haproxy_pid
  else
    kill -HUP "$gw_pid"
  fi
}

set_mode() {
  case $1 in
    healthy) admin_all "mode=healthy&reset=1" ;;
    every4) admin_all "mode=healthy&reset=1"; admin "$p1" "mode=every&n=4&reset=1" ;;
    every2) admin_all "mode=healthy&reset=1"; admin "$p1" "mode=every&n=2&reset=1" ;;
    down|reload) admin_all "mode=healthy&reset=1"; admin "$p1" "mode=down&reset=1" ;;
    blip) admin_all "mode=healthy&reset=1"; admin "$p1" "mode=blip&in=1&for=3&reset=1" ;;
    pool-healthy) admin_all "mode=healthy&delay=1&reset=1" ;;
    pool-every2) admin_all "mode=healthy&reset=1"; admin "$p2" "mode=every&n=2&reset=1" ;;
    pool-down1) admin_all "mode=healthy&reset=1"; admin "$p2" "mode=down&reset=1" ;;
    pool-slow) admin_all "mode=healthy&delay=1&reset=1"; admin "$p2" "mode=healthy&delay=10&reset=1" ;;
  esac
}

# cpu_ticks PID: clock ticks (utime + stime) of PID and its children (an
# nginx master's workers), from /proc.
cpu_ticks() {
  local t=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    [ -r "/proc/$p/stat" ] || continue
    t=$(( t + $(sed 's/^.*) //' "/proc/$p/stat" | cut -d' ' -f12,13 | tr ' ' '+') ))
  done
  echo "$t"
}

# wrk_cell GW SCENARIO REP DURATION [RECOVERY_AT]: one wrk run; upstream
# requests in all (the sum of the three ports) and at the "bad" peer (p2 in
# a pool, p1 alone otherwise); the gateway's CPU per request (us).
wrk_cell() {
  local line bad_port=$p1 t0 t1
  case $2 in pool-*) bad_port=$p2 ;; esac
  t0=$(cpu_ticks "$gw_pid")
  line=$(RECOVERY_AT=${5:-0} wrk -t2 -c16 -d"$4"s --timeout 5s -s "$here/wrk.lua" "$gw/bench" |
         grep "^RESULT")
  t1=$(cpu_ticks "$gw_pid")
  local u1 u2 u3; u1=$(ups "$p1"); u2=$(ups "$p2"); u3=$(ups "$p3")
  local bad; bad=$(ups "$bad_port")
  local req=${line#*requests=}; req=${req%% *}
  local cpu_us; cpu_us=$(( (t1 - t0) * 1000000 / $(getconf CLK_TCK) / (req > 0 ? req : 1) ))
  printf 'wrk\t%s\t%s\t%s\t%s upstream=%s bad_peer=%s recovery=%s gw_cpu_us=%s\n' "$1" "$2" "$3" \
    "${line#RESULT }" "$((u1 + u2 + u3))" "$bad" "${5:-0}" "$cpu_us" >>"$tsv"
}

# redeal_upstream: the test upstream reloaded (HUP) and waited for, so
# every gateway opens its keepalive connections to it anew. They are
# spread over its two workers by a hash of each connection: kept for a
# whole healthy comparison, an uneven spread (one worker serving most of
# one gateway's requests) would favour or slow that gateway in every run;
# dealt anew before each repetition, it is noise that the runs average.
redeal_upstream() {
  local master old p gone
  master=$(cat "$work/up/nginx.pid")
  old=$(pgrep -P "$master" || true)
  kill -HUP "$master"
  for _ in $(seq 1 200); do
    gone=1
    for p in $old; do kill -0 "$p" 2>/dev/null && gone=0; done
    [ "$gone" = 1 ] && [ "$(pgrep -c -P "$master" || true)" -ge 2 ] && return 0
    sleep 0.02
  done
  echo "redeal_upstream: the upstream's old workers did not exit" >&2
  return 1
}

# reload_cell GW: wrk for 6 s against a down upstream; a reload at 3.5 s;
# the upstream's requests in the 1.5 s before and the 1.5 s after it.
reload_cell() {
  set_mode reload >/dev/null
  wrk -t2 -c16 -d6s --timeout 5s -s "$here/wrk.lua" "$gw/bench" >"$work/reload.out" &
  local wpid=$!
  sleep 2
  local a b c; a=$(ups "$p1")
  sleep 1.5
  b=$(ups "$p1")
  reload_gateway "$1"
  sleep 1.5
  c=$(ups "$p1")
  wait "$wpid" || true
  local line; line=$(grep "^RESULT" "$work/reload.out")
  printf 'reload\t%s\treload\t1\t%s before=%s after=%s\n' "$1" "${line#RESULT }" \
    "$((b - a))" "$((c - b))" >>"$tsv"
}

# NRES_BENCH_GATEWAYS / _SINGLE / _POOLS / _EXTRA narrow a run (for
# development; a report of a narrowed run says "no figure" where it lacks).
single=${NRES_BENCH_SINGLE-healthy every4 every2 down}
pools=${NRES_BENCH_POOLS-pool-healthy pool-every2 pool-down1 pool-slow}
mod_arm=""; [ -n "$module" ] && mod_arm=" nres-module"
gateways=${NRES_BENCH_GATEWAYS-nginx-plain nginx-retry nginx-retry-mf0 haproxy nres-balancer$mod_arm nres-cosocket}
extra=${NRES_BENCH_EXTRA-blip reload}
if [ -n "$healthy_only" ]; then
  single=healthy; pools=""; extra=""
  gateways=${NRES_BENCH_GATEWAYS-nginx-plain nres-balancer$mod_arm}
fi
[ -n "$base_lua" ] && [ -z "$base_build" ] && gateways="$gateways nres-balancer-base"
[ -n "$base_build" ] && gateways="$gateways nres-module-base"
started=$(date +%s)

# Healthy, one upstream - the throughput comparison: every gateway at once,
# each on its own port, the runs interleaved (run 1 of each, then run 2,
# ...), so load on the machine from elsewhere hits all of them alike.
case " $single " in *" healthy "*)
  declare -A hport hpid
  main_port=$gw_port
  for g in $gateways; do
    p=$(nres_free_port)
    while [ "$p" = "$p1" ] || [ "$p" = "$p2" ] || [ "$p" = "$p3" ] || [ "$p" = "$main_port" ]; do
      p=$(nres_free_port)
    done
    hport[$g]=$p; gw_port=$p; gw="http://127.0.0.1:$p"
    echo "== $g / healthy (start)" >&2
    start_gateway "$g" 0
    hpid[$g]=$gw_pid
  done
  admin_all "mode=healthy&reset=1"
  for g in $gateways; do wrk -t2 -c16 -d1s "http://127.0.0.1:${hport[$g]}/warmup" >/dev/null; done
  read -r -a order <<<"$gateways"
  for rep in $(seq 1 "$HREPS"); do
    redeal_upstream
    # the upstream's new workers warmed (their Lua compiled) before any
    # run counts; each round starts with the next gateway, so no gateway
    # always runs first after the reload
    wrk -t2 -c16 -d1s "http://127.0.0.1:${hport[${order[0]}]}/warmup" >/dev/null
    for k in $(seq 0 $(( ${#order[@]} - 1 ))); do
      g=${order[$(( (k + rep) % ${#order[@]} ))]}
      echo "== $g / healthy run $rep" >&2
      gw_port=${hport[$g]}; gw="http://127.0.0.1:$gw_port"; gw_pid=${hpid[$g]}
      admin_all "reset=1"
      wrk_cell "$g" healthy "$rep" "$D"
    done
  done
  for g in $gateways; do gw_pid=${hpid[$g]}; stop_gateway; done
  gw_port=$main_port; gw="http://127.0.0.1:$gw_port"
  single=${single/healthy/} ;;
esac

for g in $gateways; do
  for s in $single $pools; do
    pool=0
    case $s in pool-*) pool=1; [ "$g" = nres-cosocket ] && continue ;; esac
    echo "== $g / $s" >&2
    start_gateway "$g" "$pool"
    admin_all "mode=healthy&reset=1"
    wrk -t2 -c16 -d1s "$gw/warmup" >/dev/null
    set_mode "$s" >/dev/null
    # pools: the first second after the fault starts is not counted
    [ "$pool" = 1 ] && wrk -t2 -c16 -d1s "$gw/settle" >/dev/null
    for rep in $(seq 1 "$REPS"); do
      admin_all "reset=1"
      wrk_cell "$g" "$s" "$rep" "$D"
    done
    stop_gateway
  done
  case " $extra " in *" blip "*) ;; *) continue ;; esac
  echo "== $g / blip" >&2
  start_gateway "$g" 0
  admin_all "mode=healthy&reset=1"
  wrk -t2 -c16 -d1s "$gw/warmup" >/dev/null
  set_mode blip >/dev/null
  recovery=$(admin "$p1" "" | json "j.blip_until")
  wrk_cell "$g" blip 1 "$BLIP_D" "$recovery"
  stop_gateway
  case " $extra " in *" reload "*) ;; *) continue ;; esac
  echo "== $g / reload during an outage" >&2
  start_gateway "$g" 0
  admin_all "mode=healthy&reset=1"
  wrk -t2 -c16 -d1s "$gw/warmup" >/dev/null
  reload_cell "$g"
  stop_gateway
done
elapsed=$(( $(date +%s) - started ))

if [ -n "$healthy_only" ]; then
  luajit "$here/report.lua" "$tsv" "$D" "$REPS" "$BLIP_D" "$elapsed" "$HREPS" healthy |
    tee "$work/healthy.md"
  if [ -n "${out_given:-}" ]; then
    mkdir -p "$(dirname "$out")"
    cp "$work/healthy.md" "$out"; cp "$tsv" "${out%.md}.tsv"
    echo "wrote $out (${elapsed}s)" >&2
  fi
  exit 0
fi
mkdir -p "$(dirname "$out")"
luajit "$here/report.lua" "$tsv" "$D" "$REPS" "$BLIP_D" "$elapsed" "$HREPS" >"$out"
cp "$tsv" "${out%.md}.tsv"
echo "wrote $out (${elapsed}s)" >&2
