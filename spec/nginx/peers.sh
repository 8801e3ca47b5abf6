# SPDX-License-Identifier: MIT
# peers.sh - the pool checks balancer.sh (the Lua balancer) and cbalancer.sh
# (the nginx module) share: a client of the three-peer test upstream
# (spec/nginx/nres_upstream.lua: its /admin modes and counts) and of the
# gateway's /nres/status, the "one peer down" check both must pass, and
# the one-peer gateway their checks of nginx's own 502 / 504 run on.
# Sourced after lib.sh; the callers set here, gw (the gateway's URL), p1,
# p2, p3 (the peers' ports) and fail/pass.

admin() { curl -sf "http://127.0.0.1:$1/admin?$2"; }
admin_all() { for p in "$p1" "$p2" "$p3"; do admin "$p" "$1" >/dev/null; done; }
json() { luajit "$here/json.lua" "$1"; }
ups() { admin "$1" "" | json "j.requests"; }
ups_all() { echo $(( $(ups "$p1") + $(ups "$p2") + $(ups "$p3") )); }
# load N PAR PATH: N requests, PAR at a time, new connections (both
# workers serve them); prints "code count" lines.
load() {
  curl -s --no-progress-meter --parallel --parallel-max "$2" -H "Connection: close" \
    -o /dev/null -w '%{http_code}\n' "$gw$3?i=[1-$1]" 2>/dev/null |
    sort | uniq -c | awk '{print $2, $1}'
}
count() { printf '%s\n' "$1" | awk -v c="$2" '$1 == c {n += $2} END {print n + 0}'; }
total() { printf '%s\n' "$1" | awk '{n += $2} END {print n + 0}'; }
status() { curl -sf -H "Connection: close" "$gw/nres/status"; }
peer_field() {   # JSON PORT FIELD
  printf '%s' "$1" | json "(function() for _, p in ipairs(j.upstreams.backend.peers) do
    if p.peer == '127.0.0.1:$2' then return p.$3 end end end)()"
}
up_field() { printf '%s' "$1" | json "key('upstreams', 'backend').$2"; }
# deadline_sent URL: a request to URL with X-Deadline-Ms: 250, the peers'
# counts reset first; prints its status and the X-Deadline-Ms the peer it
# reached saw (the peers' largest, summed: the others saw none).
deadline_sent() {
  local c d=0 p
  admin_all "reset=1"
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: 250" "$1")
  for p in "$p1" "$p2" "$p3"; do d=$(( d + $(admin "$p" "" | json "j.deadline_max or 0") )); done
  echo "$c $d"
}

# One peer down: p1 and p3 made slower first, so the choice prefers p2 when
# it dies: its failures then happen and the retries have to go elsewhere.
# Every request still succeeds; once ejected, the dead peer gets probes only.
check_one_peer_down() {
  local r s st fails before after
  admin "$p1" "mode=healthy&delay=5&reset=1" >/dev/null
  admin "$p3" "mode=healthy&delay=5&reset=1" >/dev/null
  admin "$p2" "mode=healthy&reset=1" >/dev/null
  load 100 8 /prefer >/dev/null
  admin "$p2" "mode=down&reset=1" >/dev/null
  r=$(load 300 8 /down1)
  [ "$(count "$r" 200)" = 300 ] || fail "one peer down: expected 300 x 200, got: $r"
  s=$(status)
  st=$(peer_field "$s" "$p2" state)
  fails=$(peer_field "$s" "$p2" failures)
  [ "$fails" -ge 1 ] || fail "the dead peer shows no failure: $s"
  [ "$(ups "$p2")" -ge 1 ] || fail "the dead peer got no request, so no retry was tested"
  before=$(ups "$p2")
  r=$(load 600 8 /down2)
  [ "$(count "$r" 200)" = 600 ] || fail "one peer down, after ejection: $r"
  after=$(( $(ups "$p2") - before ))
  [ "$after" -le 6 ] || fail "the ejected peer got $after of 600 requests (probes only expected)"
  pass "one peer down: 900/900 ok; dead peer $st with $fails failures; $after of the next 600 requests reached it"
}

# The one-peer gateway nginx's own 502 / 504 are checked on: its peer
# (answers.conf.in) and the gateway rendered from TEMPLATE with the extra
# nres_render arguments given (prefixes up2 and gw2; no jit.v log).
# start_answers_gateway TEMPLATE ARGS... sets gw2 (its URL), up2_master
# and gw2_master.
start_answers_gateway() {
  local tpl=$1 ports=() p4 port
  shift
  mapfile -t ports < <(nres_free_ports 2)
  p4=${ports[0]}; port=${ports[1]}
  mkdir -p "$work/up2" "$work/gw2" && chmod 777 "$work/up2" "$work/gw2"
  nres_render "$here/answers.conf.in" "$work/up2/nginx.conf" PREFIX="$work/up2" PORT="$p4"
  nres_render "$tpl" "$work/gw2/nginx.conf" PREFIX="$work/gw2" PORT="$port" \
    POLICY='{ base = "gateway", attempt_timeout = 0.2, breaker = { min_calls = 1000 } }' CHOICE=p2c \
    PEERS="{ \"127.0.0.1:$p4\" }" "$@"
  nres_nginx_start "$work/up2" "$work/up2/nginx.conf"
  NRES_JITV="" nres_nginx_start "$work/gw2" "$work/gw2/nginx.conf"
  up2_master=$(cat "$work/up2/nginx.pid")
  gw2_master=$(cat "$work/gw2/nginx.pid")
  gw2="http://127.0.0.1:$port"
  nres_wait_http "$gw2/nres/status"
}
# reason PATH [CURL ARGS]: gw2's "status [reason]"; the header's count checked.
reason() {
  local p=$1; shift
  curl -s -D "$work/gw2/h" -o /dev/null -w '%{http_code} [%header{x-nres-reason}]' "$@" "$gw2$p"
  [ "$(grep -ci '^x-nres-reason:' "$work/gw2/h")" -le 1 ] || fail "$p: X-Nres-Reason twice: $(cat "$work/gw2/h")"
}
# calls: gw2's upstream's calls so far (0 before its first request makes its slot).
calls() {
  curl -sf "$gw2/nres/status" | json "key('upstreams', 'backend').calls or 0"
}
# counted_once PATH C0: a call ends after the answer is sent (and the
# status request may reach the other worker first): wait for the count to
# move (5 s at most), then it must have moved by exactly one.
counted_once() {
  local c
  for _ in $(seq 1 100); do c=$(calls); [ "$c" -gt "$2" ] && break; sleep 0.05; done
  [ "$c" = $(($2 + 1)) ] || fail "$1: counted $((c - $2)) calls for one request"
}
# check_own_answers: the peer's own 502 and 504 pass as they are, nginx's
# own (a close, the attempt timeout) carry X-Nres-Reason, each request is
# counted once; sets got (what each answered).
check_own_answers() {
  local p h c0
  declare -A want=([/own502]="502 []" [/own504]="504 []" [/close]="502 [upstream failed]"
    [/slow]="504 [upstream timeout]" [/ok]="404 []")
  got=""
  for p in /own502 /own504 /close /slow /ok; do
    c0=$(calls)
    h=$(reason "$p")
    [ "$h" = "${want[$p]}" ] || fail "$p answered '$h', expected '${want[$p]}'"
    counted_once "$p" "$c0"
    got="$got $p: $h;"
  done
}

# open_breaker: every peer down until the upstream's breaker opens.
open_breaker() {
  local opened=""
  admin_all "mode=down&reset=1"
  for _ in $(seq 1 40); do
    load 20 4 /outage >/dev/null
    [ "$(up_field "$(status)" breaker)" = open ] && { opened=1; break; }
  done
  [ -n "$opened" ] || fail "the upstream's breaker did not open with every peer down: $(status)"
}
# reload_gateway: `nginx -s reload` as systemd's reload runs it
# (nres_nginx_signal, $work/gw's configuration) and wait for two new
# workers of gw_master; sets old_pids (the workers before it).
reload_gateway() {
  local new="" pids fresh p
  old_pids=$(pgrep -P "$gw_master" | sort | tr '\n' ' ')
  nres_nginx_signal "$work/gw" "$work/gw/nginx.conf" reload ||
    fail "nginx -s reload failed (see above)"
  for _ in $(seq 1 100); do
    pids=$(pgrep -P "$gw_master" | sort | tr '\n' ' ')
    fresh=0
    for p in $pids; do case " $old_pids " in *" $p "*) ;; *) fresh=$((fresh + 1)) ;; esac; done
    [ "$fresh" -ge 2 ] && { new=1; break; }
    sleep 0.05
  done
  [ -n "$new" ] || fail "no new workers after the reload (old: $old_pids, now: $pids)"
}
