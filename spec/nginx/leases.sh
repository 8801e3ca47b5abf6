#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/leases.sh LIBNRES [MODULE] - a probe permit whose holder
# never reports is given back by its lease (issue 28, docs/leases.md), in
# about 40 s. One peer (the test upstream), the upstream's breaker
# (break_for 3 s) opened by a dead peer, then a probe that never ends:
#   1. Lua balancer, no crash: the probe times out and its 504 goes to an
#      `error_page 500 502 503 504 /50x.html` location that runs no gw.log
#      (Debian's default shape): the call is never ended (its record is let
#      go when a later request reuses its address); then the probe's
#      worker is killed with -9 while it waits on a slow peer;
#   2. module mode (MODULE given): the probe is in flight on a slow peer
#      when every worker is killed with -9; then again, and nginx is
#      stopped and started (the region file keeps the breaker);
# Each time requests are refused ("503 circuit open") while the lease
# runs, and answered 200 once it is over: the first 200 comes within the
# lease (min(break_for, attempt_timeout + 1 s)) plus a margin of the
# probe's start, and /nres/status counts the lapse (leases_expired).
# Without leases the breaker stays half-open for good: every later
# request is 503. Skipped (exit 0) without nginx's Lua module.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
nres_spec_begin leases "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 2)
p1=${ports[0]}; gw_port=${ports[1]}
gw="http://127.0.0.1:$gw_port"
peers="{ \"127.0.0.1:$p1\" }"

nres_render_upstream "$work/up" "$p1"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"

# stop_gateway: stop the gateway's nginx (QUIT), not the upstream's.
stop_gateway() {
  local pid; pid=$(cat "$work/gw/nginx.pid")
  nres_stop_pid "$pid"
  NRES_STARTED_PIDS=${NRES_STARTED_PIDS/ $pid/}
}

admin() { curl -sf "http://127.0.0.1:$p1/admin?$1" >/dev/null; }
status() { curl -sf -H "Connection: close" "$gw/nres/status"; }
leases_expired() { status | luajit "$here/json.lua" "key('upstreams', 'backend').leases_expired or 0"; }
answer() { curl -s -o /dev/null --max-time 5 -H "Connection: close" \
             -w '%{http_code} %header{x-nres-reason}' "$gw/$1"; }
now_ms() { date +%s%3N; }

# open_breaker: the peer down (503) until a request is refused.
open_breaker() {
  admin "mode=down&reset=1"
  for _ in $(seq 1 100); do
    [ "$(answer trip)" = "503 circuit open" ] && return 0
  done
  fail "$1: the breaker did not open with the peer down: $(status)"
}

# probe_after_break WHAT DELAY_MS MAXTIME: once the break (3 s) is over,
# one request in the background becomes the probe, on a peer that answers
# after DELAY_MS; sets probe_at (ms) and probe_pid. Checks that the next
# request is refused while it runs.
probe_after_break() {
  sleep 3.1
  admin "mode=healthy&delay=$2"
  probe_at=$(now_ms)
  curl -s -o /dev/null --max-time "$3" -H "Connection: close" "$gw/probe" &
  probe_pid=$!
  sleep 0.3
  local a; a=$(answer held)
  [ "$a" = "503 circuit open" ] || fail "$1: beside the probe a request answered '$a'"
}

# recovers WHAT LEASE_S: requests every 0.1 s until one is 200; fails if
# that takes past the probe's start + LEASE_S + 2 s (10 s at most).
recovers() {
  local a t
  admin "mode=healthy&delay=0"
  for _ in $(seq 1 100); do
    a=$(answer after)
    t=$(( $(now_ms) - probe_at ))
    [ "${a%% *}" = 200 ] && break
    [ "$t" -gt $(( $2 * 1000 + 2000 )) ] && break
    sleep 0.1
  done
  [ "${a%% *}" = 200 ] ||
    fail "$1: still '$a' $t ms after the probe began (lease $2 s): the breaker is wedged half-open"
  [ "$t" -le $(( $2 * 1000 + 2000 )) ] || fail "$1: the first 200 came $t ms after the probe (lease $2 s)"
  recovered_ms=$t
}

# kill_workers: kill -9 every worker of the gateway's master.
kill_workers() {
  local master pids
  master=$(cat "$work/gw/nginx.pid")
  pids=$(ps -o pid= --ppid "$master" | tr -s ' \n' ' ')
  [ -n "${pids// /}" ] || fail "no workers under master $master"
  # shellcheck disable=SC2086
  kill -9 $pids
}

# ------------------------------ 1. Lua balancer: a probe's error_page location runs no gw.log
policy='{ base = "gateway", attempts = 1, attempt_timeout = 1, deadline = 5,
          breaker = { consecutive = 3, break_for = 3, break_max = 3, jitter = 0 } }'
nres_render "$here/balancer.conf.in" "$work/gw/lua.conf.in" \
  PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua;$jit_dir?.lua" \
  POLICY="$policy" PEERS="$peers" CHOICE=p2c
# Debian's default: error_page 500 502 503 504 /50x.html, a static page
sed -e 's|^      error_page 502 @nres_502;|      error_page 500 502 503 504 /50x.html;|' \
    -e '/^      error_page 504 @nres_504;/d' \
    -e "s|^    location @nres_refused {|    location = /50x.html { root $work/gw/html; }\n    location @nres_refused {|" \
    "$work/gw/lua.conf.in" >"$work/gw/nginx.conf"
grep -q "location = /50x.html" "$work/gw/nginx.conf" || fail "the error_page edit did not apply"
mkdir -p "$work/gw/html"
echo "sorry" >"$work/gw/html/50x.html"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "$gw/nres/status"

open_breaker "Lua balancer"
probe_after_break "Lua balancer" 3000 5
wait "$probe_pid" || true   # timed out after 1 s: 504, answered by /50x.html
recovers "Lua balancer, error_page without gw.log" 2
# Given back either way: by its lease (leases_expired), or earlier, when a
# later request took the address of the probe's request and let its
# record go unjudged (counted canceled; docs/leases.md).
n=$(leases_expired)
c=$(status | luajit "$here/json.lua" "key('upstreams', 'backend').stops.canceled or 0")
[ "$n" -ge 1 ] || [ "$c" -ge 1 ] ||
  fail "Lua balancer: /nres/status leases_expired is '$n' and canceled '$c', expected either >= 1"
if [ "$n" -ge 1 ]; then
  prom=$(curl -sf "$gw/nres/status?format=prometheus")
  grep -q '^nres_leases_expired_total{.*key="backend"} [1-9]' <<<"$prom" ||
    fail "Lua balancer: no nres_leases_expired_total for backend in the Prometheus output"
fi
pass "Lua balancer: a probe ending in error_page /50x.html (no gw.log) held the breaker for its lease at most: 200 again ${recovered_ms} ms after it began (lease 2 s), leases_expired $n, canceled $c"

open_breaker "Lua balancer, kill -9"
probe_after_break "Lua balancer, kill -9" 3000 5
kill_workers
wait "$probe_pid" || true   # its connection died with the worker
nres_wait_http "$gw/nres/status"
recovers "Lua balancer, the probe's worker killed with -9" 2
pass "Lua balancer: the probe's worker killed with -9: 200 again ${recovered_ms} ms after the probe began (lease 2 s)"
stop_gateway

# ------------------------------------------- 2. module mode: kill -9 the probe's worker
if [ -z "$module" ] || [ ! -f "$module" ]; then
  echo "skipped: module mode (no ngx_http_nres_module.so: got '${module}')"
  failed=0
  exit 0
fi
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
policy='{ base = "gateway", attempts = 1, attempt_timeout = 20, deadline = 30,
          breaker = { consecutive = 3, break_for = 3, break_max = 3, jitter = 0 } }'
rm -rf "$work/gw"; mkdir -p "$work/gw"; chmod 777 "$work/gw"
nres_render "$here/cbalancer.conf.in" "$work/gw/nginx.conf" \
  PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua" MODULE="$module" \
  POLICY="$policy" CHOICE=p2c PEERS="$peers"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "$gw/nres/status"

open_breaker "module"
probe_after_break "module" 15000 30
kill_workers
wait "$probe_pid" || true   # its connection died with the worker
nres_wait_http "$gw/nres/status"   # the master's new workers
recovers "module, workers killed with -9" 3
pass "module: the probe's worker killed with -9: 200 again ${recovered_ms} ms after the probe began (lease 3 s)"

open_breaker "module, restart"
probe_after_break "module, restart" 15000 30
kill_workers
wait "$probe_pid" || true
stop_gateway
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "$gw/nres/status"
recovers "module, workers killed with -9, nginx stopped and started" 3
n=$(leases_expired)
[ "$n" -ge 1 ] || fail "module: /nres/status leases_expired is '$n', expected >= 1"
pass "module: killed with -9, then nginx stopped and started: 200 again ${recovered_ms} ms after the probe began (lease 3 s), leases_expired $n"

if grep -E "\[(crit|emerg)\]" "$work/gw/error.log" | grep -v "nres-region" >/dev/null; then
  fail "error.log: $(grep -E "\[(crit|emerg)\]" "$work/gw/error.log" | head -3)"
fi
failed=0
