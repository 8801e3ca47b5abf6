#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/migrate.sh LIBNRES [MODULE] - a reload that changes the
# tables' layout keeps their state (issue 25), in the Lua balancer mode
# and (with MODULE, the ngx_http_nres_module.so) in module mode:
#   1. an upstream of four peers, all down (503): the scope's breaker for
#      the upstream opens (3 failures in a row, a 30 s break), the retry
#      budget is below its 10 tokens, peers are ejected;
#   2. the configuration changes every layout: the scope's slots 64 -> 128
#      and its breaker's window 5 s -> 10 s (a policy field), a fifth peer
#      (the peers' table 8 -> 16 slots); `nginx -s reload` as systemd's
#      ExecReload runs it;
#   3. after the reload the breaker is still open, with the rest of its
#      break (break_left below what it was, trips still 1), so 20 requests
#      are refused and the dead upstream sees none of them (its counted
#      requests unchanged: no burst); the budget has its level; each peer
#      is as it was (ejected or not), the new one closed;
#   4. one log line per table says what moved, and what was reset and why
#      (the scope's: the breaker's window counts, its window changed).
# On main (before the migration) step 3 fails: the reload started every
# table afresh, the breaker closed and the dead upstream got a burst.
# Skipped (exit 0) without nginx's Lua module; the module's half without
# MODULE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
[ -n "$module" ] && [ -f "$module" ] && module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
nres_spec_begin migrate "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 6)
gw_port=${ports[0]}; peers=("${ports[@]:1}")
gw="http://127.0.0.1:$gw_port"
gwp=$work/gw
nres_render_upstream "$work/up" "${peers[@]}"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:${peers[0]}/admin"

admin() { curl -sf "http://127.0.0.1:$1/admin?$2"; }
json() { luajit "$here/json.lua" "$1"; }
# upstream: the requests every peer of the test upstream has counted
upstream() {
  local p n=0
  for p in "${peers[@]}"; do n=$(( n + $(admin "$p" "" | json "j.requests") )); done
  echo "$n"
}
status() { curl -sf "$gw/nres/status"; }
key_field() { printf '%s' "$1" | json "key('upstreams', 'backend').$2"; }
# peer_states JSON: "port:state" of each peer, in declaration order
peer_states() {
  printf '%s' "$1" | json "(function() local t = {} for _, p in ipairs(j.upstreams.backend.peers)
    do t[#t + 1] = p.peer:match(':(%d+)$') .. ':' .. p.state end return table.concat(t, ' ') end)()"
}
# render MODE SLOTS WINDOW NPEERS
render() {
  local list="" i
  for i in $(seq 0 $(( $4 - 1 ))); do list="$list\"127.0.0.1:${peers[$i]}\", "; done
  nres_mode_lines "$1" "$module"
  nres_render "$here/migrate.conf.in" "$gwp/nginx.conf" PREFIX="$gwp" PORT="$gw_port" \
    LUA="$repo/lua/?.lua" LOAD="$nres_load" BALANCER="$nres_balancer" ADMIT="$nres_admit" \
    SLOTS="$2" WINDOW="$3" PEERS="{ $list}"
}
# workers MASTER: its worker pids, sorted, on one line
workers() { pgrep -P "$1" | sort | tr '\n' ' '; }
# codes N: N requests one after the other; their statuses, counted
codes() {
  local i
  for i in $(seq 1 "$1"); do curl -s -o /dev/null --max-time 5 -w '%{http_code}\n' "$gw/r$i"; done |
    sort | uniq -c | awk '{printf "%s x %s ", $1, $2}'
}

modes=(lua)
if [ -n "$module" ] && [ -f "$module" ]; then modes+=(module); else echo "skipped: the module's half (no ngx_http_nres_module.so)"; fi

for mode in "${modes[@]}"; do
  rm -rf "$gwp"; mkdir -p "$gwp"
  for p in "${peers[@]}"; do admin "$p" "mode=down&reset=1" >/dev/null; done
  render "$mode" 64 5 4
  nres_nginx_start "$gwp" "$gwp/nginx.conf"
  master=$(cat "$gwp/nginx.pid")
  nres_wait_http "$gw/nres/status"

  # 1. the outage: the breaker opens, the budget is spent, the peers ejected
  codes 12 >/dev/null
  s=$(status)
  [ "$(key_field "$s" breaker)" = open ] || fail "$mode: the breaker did not open: $s"
  trips=$(key_field "$s" breaker_trips)
  left=$(key_field "$s" break_left)
  level=$(key_field "$s" budget)
  before=$(upstream)
  states=$(peer_states "$s")
  awk -v l="$level" 'BEGIN { exit !(l < 10) }' || fail "$mode: the budget was not spent: $level"
  [[ "$states " == *":open "* ]] || fail "$mode: no peer ejected: $states"

  # 2. another layout for every table, then nginx -s reload
  render "$mode" 128 10 5
  old=$(workers "$master")
  nres_nginx_signal "$gwp" "$gwp/nginx.conf" reload || fail "$mode: nginx -s reload failed"
  for _ in $(seq 1 100); do
    new=$(workers "$master")
    [ -n "$new" ] && [ -z "$(comm -12 <(printf '%s\n' $old) <(printf '%s\n' $new))" ] && break
    sleep 0.05
  done
  grep -q 'peers "backend": .*made a new region' "$gwp/error.log" || fail "$mode: the reload made no new peers' table: $(tail -3 "$gwp/error.log")"

  # 3. still open with the rest of its break; no burst; the budget's level
  r=$(codes 20)
  after=$(upstream)
  [ "$after" = "$before" ] ||
    fail "$mode: the dead upstream got $(( after - before )) requests after the reload ($r)"
  s=$(status)
  [ "$(key_field "$s" breaker)" = open ] || fail "$mode: after the reload the breaker is $(key_field "$s" breaker)"
  [ "$(key_field "$s" breaker_trips)" = "$trips" ] || fail "$mode: the breaker tripped again: $s"
  left2=$(key_field "$s" break_left)
  awk -v a="$left" -v b="$left2" 'BEGIN { exit !(b <= a && b > a - 10) }' ||
    fail "$mode: break left $left before the reload, $left2 after: not the same break"
  level2=$(key_field "$s" budget)
  [ "$level2" = "$level" ] || fail "$mode: the budget was $level, after the reload $level2"
  states2=$(peer_states "$s")
  [ "$states2" = "$states ${peers[4]}:closed" ] ||
    fail "$mode: peers were '$states', after the reload '$states2'"
  pass "$mode: after a reload with another layout the breaker is open (${left2}s of its break left), $r, the dead upstream got no request; budget $level2; peers $states2"

  # 4. one line per table: what moved, what was reset and why
  grep -q 'scope "upstreams": .*: a size of .*; made a new region there and moved the state into it (changed: slots 64 -> 128, breaker (window); moved the state of 1 of 1 keys; reset: breaker window counts (the window changed from 5 s in 5 buckets to 10 s in 5))' "$gwp/error.log" ||
    fail "$mode: no line for the scope's migration: $(grep 'nres:' "$gwp/error.log" | tail -3)"
  grep -q 'peers "backend": .*moved the state into it (changed: slots 8 -> 16; moved the state of 4 of 4 keys; nothing reset)' "$gwp/error.log" ||
    fail "$mode: no line for the peers' migration: $(grep 'nres:' "$gwp/error.log" | tail -3)"
  pass "$mode: one log line per table names what moved and what was reset and why"
  nres_stop_pid "$master"
done
failed=0
