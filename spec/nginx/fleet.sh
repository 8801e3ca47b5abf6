#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/fleet.sh LIBNRES NRES_SYNCD - two nginx gateways, one breaker
# view, through Redis (issue 13, in a real nginx).
#
# Two gateways in balancer mode (spec/nginx/balancer.conf.in, each its own
# prefix and region directory) in front of one upstream, a redis-server of
# the test's own, and one nres-syncd per gateway on its scope's region
# file (--breaker, 50 ms interval, --status); each gateway declares
# gw.fleet(status file). About 10 s:
#   1. both healthy: /nres/status of each shows the agent connected and
#      its scope's entries synced;
#   2. the upstream goes down and only gateway A is sent traffic: A's
#      breaker opens; gateway B, which saw no failure, shows its breaker
#      open within a few intervals, and B's requests are refused (503,
#      circuit open) without reaching the upstream;
#   3. error.log of both has no [error], [crit], [alert] or [emerg] line.
# Everything it started is stopped on exit. Skipped (exit 0) without
# nginx's Lua module or redis-server.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
syncd=${2:-}
if ! command -v redis-server >/dev/null 2>&1; then
  echo "skipped: no redis-server"
  exit 0
fi
[ -x "$syncd" ] || { echo "usage: $0 LIBNRES NRES_SYNCD (got '$syncd')" >&2; exit 2; }
nres_spec_begin fleet "${1:-${NRES_LIB:-}}"   # sets $work
mkdir -p "$work/gwb" "$work/redis"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; nres_nginx_stop_all;
      [ "${failed:-1}" = 0 ] && [ -z "${NRES_KEEP:-}" ] && rm -rf "$work" || echo "logs kept in $work"' EXIT

mapfile -t ports < <(nres_free_ports 4)
up_port=${ports[0]}; a_port=${ports[1]}; b_port=${ports[2]}; redis_port=${ports[3]}

redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work/redis" \
  --save "" --appendonly no --daemonize no >"$work/redis/log" 2>&1 &
pids+=($!)

nres_render "$here/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$up_port" SPEC="$here" EXTRA_LISTEN=""
# Breaks of 4 s: the shared view is seen before any probe.
policy='{ base = "gateway", breaker = { break_for = 4, break_max = 4 } }'
render() {   # DIR PORT
  nres_render "$here/balancer.conf.in" "$1/nginx.conf" \
    PREFIX="$1" PORT="$2" LUA="$repo/lua/?.lua;${jit_dir}?.lua" \
    POLICY="$policy" CHOICE=p2c PEERS="{ \"127.0.0.1:$up_port\" }"
  sed -i "s|gw.upstream(\"backend\"|gw.fleet(\"$1/fleet.json\")\n    gw.upstream(\"backend\"|" "$1/nginx.conf"
  grep -q 'gw.fleet(' "$1/nginx.conf" || fail "could not declare gw.fleet in $1/nginx.conf"
}
render "$work/gw" "$a_port"
render "$work/gwb" "$b_port"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_nginx_start "$work/gwb" "$work/gwb/nginx.conf"
nres_wait_http "http://127.0.0.1:$up_port/admin"
nres_wait_http "http://127.0.0.1:$a_port/nres/status"
nres_wait_http "http://127.0.0.1:$b_port/nres/status"

json() { luajit "$here/json.lua" "$1"; }
admin() { curl -sf "http://127.0.0.1:$up_port/admin?$1"; }
ups() { admin "" | json "j.requests"; }
get() { curl -s -o /dev/null -w '%{http_code} %header{x-nres-reason}\n' -H "Connection: close" "$1"; }
status() { curl -sf -H "Connection: close" "http://127.0.0.1:$1/nres/status"; }
key_breaker() { status "$1" | json "key('upstreams', 'backend').breaker"; }

# A key exists in a table once a request used it: one each, healthy.
admin "mode=healthy&reset=1" >/dev/null
[ "$(get "http://127.0.0.1:$a_port/a0")" = "200 " ] || fail "gateway A: first request"
[ "$(get "http://127.0.0.1:$b_port/b0")" = "200 " ] || fail "gateway B: first request"

start_syncd() {   # DIR NODE
  local file
  file=$(ls "$1"/regions/*.scope.upstreams.shm 2>/dev/null | head -1)
  [ -n "$file" ] || fail "no scope region file under $1/regions: $(ls "$1/regions")"
  # --quorum 0: the first host that opens opens the fleet (B saw a success
  # and would otherwise vote closed: sync.h "breaker_quorum").
  "$syncd" --fleet spec --region "$file=upstreams" --redis "127.0.0.1:$redis_port" --interval 50 \
    --breaker --quorum 0 --node "$2" --status "$1/fleet.json" >"$1/syncd.log" 2>&1 </dev/null &
  pids+=($!)
}
start_syncd "$work/gw" gwa
start_syncd "$work/gwb" gwb

# ------------------------------------------------------ 1. both synced
ok=""
for _ in $(seq 1 60); do
  a=$(status "$a_port" | json "j.fleet and j.fleet.connected and #j.fleet.entries > 0 and j.fleet.entries[1].synced == 1")
  b=$(status "$b_port" | json "j.fleet and j.fleet.connected and #j.fleet.entries > 0 and j.fleet.entries[1].synced == 1")
  [ "$a" = true ] && [ "$b" = true ] && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || fail "the fleet agents are not synced: A $(status "$a_port" | json "j.fleet") B $(status "$b_port" | json "j.fleet")"
pass "both gateways show their agent connected and the scope synced in /nres/status"

# ---------------------------------------- 2. one gateway sees the outage
admin "mode=down&reset=1" >/dev/null
opened=""
for i in $(seq 1 200); do
  get "http://127.0.0.1:$a_port/down$i" >/dev/null
  if [ "$(key_breaker "$a_port")" != closed ]; then opened=$i; break; fi
done
[ -n "$opened" ] || fail "gateway A's breaker did not open"
seen=""
for i in $(seq 1 40); do   # 2 s at most; expected within a few 50 ms intervals
  st=$(key_breaker "$b_port")
  if [ "$st" = open ]; then seen=$i; break; fi
  sleep 0.05
done
[ -n "$seen" ] || fail "gateway B's breaker is still '$(key_breaker "$b_port")' 2 s after A's opened"
before=$(ups)
for i in $(seq 1 20); do
  r=$(get "http://127.0.0.1:$b_port/b$i")
  [ "$r" = "503 circuit open" ] || fail "gateway B answered '$r' with the fleet's breaker open"
done
after=$(ups)
[ "$after" = "$before" ] || fail "gateway B's refused requests reached the upstream ($before -> $after)"
pass "A's breaker opened after $opened failing requests; B, which saw no failure, showed it open after ~$((seen * 50)) ms and refused 20/20 without an upstream request"

for d in "$work/up" "$work/gw" "$work/gwb"; do
  if grep -E "\[(error|crit|alert|emerg)\]" "$d/error.log"; then fail "$d/error.log has errors"; fi
done
pass "no error in the nginx logs"
failed=0
