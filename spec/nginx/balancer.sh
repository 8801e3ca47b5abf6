#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/balancer.sh LIBNRES - balancer mode in a real nginx (issue 12).
#
# Three peers (one test upstream nginx listening on three ports, each port
# its own upstream: spec/nginx/nres_upstream.lua) behind the gateway in
# balancer mode (spec/nginx/balancer.conf.in, 2 workers), on 127.0.0.1
# high ports with their own prefixes; about 25 s:
#   1. healthy: every answer 200, every peer used, X-Deadline-Ms on every
#      upstream request; inbound X-Deadline-Ms: 0 -> 504 + X-Nres-Reason
#      on a connection kept open, a bad value ignored, 300 -> the upstream
#      sees at most 300; gw.admit with a limiter answers 429 + Retry-After;
#   2. one peer down: every client request still succeeds (a retry never
#      goes back to the peer that failed), the peer's failures are in the
#      shared table and then it gets almost nothing (ejected, or avoided by
#      its latency estimate, where a failure counts as the attempt timeout);
#   3. reload during an outage: every peer down, the upstream's breaker
#      opens; `nginx -s reload` (HUP); the new workers (new pids) see the
#      breaker still open and the budget level kept (region file
#      reattached), and the dead upstream gets no request across the reload
#      while clients keep coming;
#   3b. a binary upgrade (USR2, then QUIT to the old master): the new
#      master's workers share the tables (breaker still not closed, no
#      burst to the dead upstream);
#   4. a layout change on reload (more slots) makes a new region with one
#      log line and the state moved into it; a scope no longer declared has
#      its file removed;
#   4b. criticality: with the budget below half, a sheddable request
#      (X-Criticality) gets no retry while a default one still does;
#   4c. nginx's own 502/504 carry X-Nres-Reason (error_page to the named
#      locations in balancer.conf.in), the upstream's own do not: a second
#      gateway with one peer (a plain nginx: /own502 and /own504 answer
#      those, /close closes without a response, /slow answers after the
#      attempt timeout) -> none, none, "upstream failed", "upstream
#      timeout"; that peer stopped (connect refused) -> "upstream failed";
#      each of nginx's own answers still counted once by gw.log (which the
#      named locations run); X-Deadline-Ms: 0 keeps its one "deadline
#      exceeded" (nres's own answer, not caught by error_page); a retry
#      carries the first try's X-Deadline-Ms (nginx resends its bytes);
#   4d. one worker on one connection (callgrind.sh's setting) answers 1500
#      requests, its phases compiled (checked in 5);
#   5. error.log has no [error], [crit], [alert] or [emerg] line; the
#      workers' jit.v logs show the phases compiled (no NYI in them, no
#      abort repeated at one place).
# Both nginx masters are stopped by pid on exit. Skipped (exit 0) only
# when nginx or its Lua module is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
nres_spec_begin balancer "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 4)
p1=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; gw_port=${ports[3]}
gw="http://127.0.0.1:$gw_port"

nres_render_upstream "$work/up" "$p1" "$p2" "$p3"
# The gateway preset, breaks of 4 s: no probe falls inside the reload check.
policy='{ base = "gateway", breaker = { break_for = 4, break_max = 4 } }'
render_gw() {   # SLOTS
  nres_render "$here/balancer.conf.in" "$work/gw/nginx.conf" \
    PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua" \
    POLICY="$policy" CHOICE=p2c \
    PEERS="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\", \"127.0.0.1:$p3\" }"
  sed -i "s/slots = 64/slots = $1/" "$work/gw/nginx.conf"
}
render_gw 64
mkdir -p "$work/jit" && chmod 777 "$work/jit"   # workers may run as nobody
export NRES_JITV="$work/jit/jit.log"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
gw_master=$(cat "$work/gw/nginx.pid")
nres_wait_http "http://127.0.0.1:$p1/admin"
nres_wait_http "$gw/nres/status"

# shellcheck source=spec/nginx/peers.sh
. "$here/peers.sh"

# ------------------------------------------------------------ 1. healthy
admin_all "mode=healthy&reset=1"
r=$(load 300 8 /healthy)
[ "$(count "$r" 200)" = 300 ] || fail "healthy: expected 300 x 200, got: $r"
for p in "$p1" "$p2" "$p3"; do
  n=$(ups "$p"); [ "$n" -gt 0 ] || fail "healthy: peer $p got no request"
  d=$(admin "$p" "" | json "j.with_deadline")
  [ "$d" = "$n" ] || fail "healthy: X-Deadline-Ms on $d of $n requests to peer $p"
done
[ "$(ups_all)" = 300 ] || fail "healthy: the peers saw $(ups_all) requests for 300"
h=$(curl -s -o /dev/null -w '%{http_code} %header{x-nres-reason}' -H "X-Deadline-Ms: 0" "$gw/d0")
[ "$h" = "504 deadline exceeded" ] || fail "X-Deadline-Ms: 0 gave '$h', expected 504 deadline exceeded"
# The header is found whatever its case and place: after other headers,
# and after more than the 100 headers gw.admit lists in place (then it
# reads $http_x_deadline_ms); the first one counts.
many=(); for i in $(seq 1 120); do many+=(-H "X-Filler-$i:$i"); done
for args in "-H x-DEADLINE-ms:0" "-H X-Deadline-Ms:0 -H X-Deadline-Ms:5000" "${many[*]} -H X-Deadline-Ms:0"; do
  # shellcheck disable=SC2086  # the headers split on purpose
  h=$(curl -s -o /dev/null -w '%{http_code}' -H "A: b" $args "$gw/d0")
  [ "$h" = 504 ] || fail "X-Deadline-Ms: 0 after $(wc -w <<<"$args") words of headers gave $h"
done
# A refusal keeps the client's connection (gw.refused answers a 599, not
# nginx's 500, which would close it): two on one connection, one connect.
h=$(curl -s -w '%{http_code} %{num_connects}\n' -H "X-Deadline-Ms: 0" \
  -o /dev/null "$gw/d0" -o /dev/null "$gw/d0" | paste -sd' ')
[ "$h" = "504 1 504 0" ] || fail "two refusals on one connection: '$h', expected '504 1 504 0'"
# gw.admit with a limiter (1/s, burst 1, one key): of 4 at once, 429s
# with Retry-After >= 1 and X-Nres-Reason.
r=$(curl -s -w '%{http_code} %header{retry-after} [%header{x-nres-reason}]\n' \
  -o /dev/null "$gw/limited" -o /dev/null "$gw/limited" -o /dev/null "$gw/limited" \
  -o /dev/null "$gw/limited")
grep -q '^200 ' <<<"$r" || fail "/limited: no request admitted: $r"
grep -Eq '^429 [1-9][0-9]* \[rate limited\]$' <<<"$r" || fail "/limited: no 429 with Retry-After: $r"
# gw.access (access_by_lua) admits the same way: 0 -> 504, else the time
# left upstream.
h=$(curl -s -o /dev/null -w '%{http_code} %header{x-nres-reason}' -H "X-Deadline-Ms: 0" "$gw/via-access")
[ "$h" = "504 deadline exceeded" ] || fail "/via-access with X-Deadline-Ms: 0 gave '$h'"
read -r c d < <(deadline_sent "$gw/via-access")
[ "$c" = 200 ] && [ "$d" -gt 0 ] && [ "$d" -le 250 ] ||
  fail "/via-access with X-Deadline-Ms: 250: $c, upstream saw $d"
admin_all "reset=1"
for bad in abc -5 1e400 "" nan inf -inf "5, 100" 9007199254740993; do
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: $bad" "$gw/bad")
  [ "$c" = 200 ] || fail "X-Deadline-Ms: '$bad' gave $c, expected it ignored (200)"
done
c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: 0.5" "$gw/bad")
[ "$c" = 504 ] || fail "X-Deadline-Ms: 0.5 (under 1 ms) gave $c, expected 504"
# Two X-Deadline-Ms headers: nginx before 1.23 reads the first, later ones
# join them ("0, 300": not a number, ignored); never an error either way.
for pair in "0 300" "300 0"; do
  first=${pair% *} second=${pair#* }
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: $first" -H "X-Deadline-Ms: $second" "$gw/bad")
  case $c in 200|504) ;; *) fail "X-Deadline-Ms: $first and $second gave $c, expected 200 or 504" ;; esac
done
admin_all "reset=1"
c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: 300" "$gw/short")
[ "$c" = 200 ] || fail "X-Deadline-Ms: 300 gave $c"
dmax=0
for p in "$p1" "$p2" "$p3"; do
  d=$(admin "$p" "" | json "j.deadline_max or 0")
  dmax=$(awk -v a="$dmax" -v b="$d" 'BEGIN {print (b > a) ? b : a}')
done
awk -v d="$dmax" 'BEGIN {exit !(d > 0 && d <= 300)}' ||
  fail "X-Deadline-Ms: 300 reached the upstream as $dmax"
pass "healthy: 300/300 ok over 3 peers, X-Deadline-Ms on every upstream request; inbound 0 -> 504 (connection kept), bad values ignored, 300 -> upstream saw $dmax; admit's limiter: 429 + Retry-After"

# ------------------------------------------------------- 2. one peer down
check_one_peer_down

# ------------------------------------------- 3. reload during an outage
open_breaker
s=$(status)
level=$(up_field "$s" budget)
trips=$(up_field "$s" breaker_trips)
u0=$(ups_all)
reload_gateway
r=$(load 200 8 /during)
declare -A seen=()
for _ in $(seq 1 40); do
  s=$(status)
  pid=$(printf '%s' "$s" | json "j.pid")
  case " $old_pids " in *" $pid "*) continue ;; esac
  st=$(up_field "$s" breaker)
  [ "$st" = open ] || fail "new worker $pid sees the breaker $st after the reload: $s"
  seen[$pid]=$(up_field "$s" budget)
  [ "${#seen[@]}" -ge 2 ] && break
done
[ "${#seen[@]}" -ge 2 ] || fail "reached only ${#seen[@]} new workers: $(declare -p seen)"
u1=$(ups_all)
[ "$(count "$r" 503)" = 200 ] || fail "during the outage after reload: $r (expected 200 x 503)"
h=$(curl -s -o /dev/null -w '%{http_code} %header{x-nres-reason}' "$gw/refused")
[ "$h" = "503 circuit open" ] || fail "a refused request answered '$h', expected 503 circuit open"
[ "$u1" = "$u0" ] || fail "the dead upstream got $((u1 - u0)) requests across the reload"
for pid in "${!seen[@]}"; do
  # kept: not refilled to its capacity (50), at most what the floor (5/s)
  # added in the few seconds since
  awk -v a="$level" -v b="${seen[$pid]}" 'BEGIN {exit !(b >= a - 1 && b <= a + 15 && b < 49)}' ||
    fail "budget level $level before the reload, ${seen[$pid]} in new worker $pid"
done
trips2=$(up_field "$(status)" breaker_trips)
[ "$trips2" -ge "$trips" ] || fail "breaker trips went from $trips to $trips2 (counters lost)"
grep -q 'kept the state in .*scope.upstreams.shm' "$work/gw/error.log" ||
  fail "no 'kept the state' line in error.log for the reload"
pass "reload in an outage: new workers $(for k in "${!seen[@]}"; do printf '%s(budget %s) ' "$k" "${seen[$k]}"; done)see the breaker open (budget $level before), 200 clients refused, 0 upstream requests across the reload"

# ------------------------------- 3b. binary upgrade (USR2) shares the tables
kill -USR2 "$gw_master"
new_master=""
for _ in $(seq 1 100); do
  if [ -s "$work/gw/nginx.pid.oldbin" ] && [ -s "$work/gw/nginx.pid" ]; then
    new_master=$(cat "$work/gw/nginx.pid")
    [ "$new_master" != "$gw_master" ] && break
  fi
  new_master=""; sleep 0.05
done
[ -n "$new_master" ] || fail "USR2: no new master"
NRES_STARTED_PIDS="$NRES_STARTED_PIDS $new_master"
for _ in $(seq 1 100); do [ "$(pgrep -P "$new_master" | wc -l)" -ge 2 ] && break; sleep 0.05; done
kill -QUIT "$gw_master"   # the old master and its workers leave
for _ in $(seq 1 100); do kill -0 "$gw_master" 2>/dev/null || break; sleep 0.05; done
gw_master=$new_master
u0=$(ups_all)
s=$(status)
pid=$(printf '%s' "$s" | json "j.pid")
[ "$(ps -o ppid= -p "$pid" | tr -d ' ')" = "$new_master" ] || fail "status answered by $pid, not a new worker"
st=$(up_field "$s" breaker)
[ "$st" = open ] || [ "$st" = half-open ] || fail "after USR2 the breaker is $st: $s"
r=$(load 100 8 /upgraded)
u1=$(ups_all)
[ $((u1 - u0)) -le 2 ] || fail "after USR2 the dead upstream got $((u1 - u0)) requests for 100 clients"
pass "binary upgrade (USR2): the new master's workers see the breaker $st; $((u1 - u0)) upstream requests for 100 clients"

# ---------------------------- 4. a new layout; an undeclared region removed
admin_all "mode=healthy&reset=1"
scope_file=$(ls "$work/gw/regions"/*.scope.upstreams.shm)
ino=$(stat -c %i "$scope_file")
touch "${scope_file%.scope.upstreams.shm}.scope.gone.shm"
render_gw 128
nres_nginx_signal "$work/gw" "$work/gw/nginx.conf" reload || fail "nginx -s reload failed"
for _ in $(seq 1 100); do
  grep -q 'scope "upstreams": .* made a new region' "$work/gw/error.log" && break
  sleep 0.05
done
grep -q 'scope "upstreams": .*: a size of .*; made a new region' "$work/gw/error.log" ||
  fail "no log line for the new layout: $(tail -5 "$work/gw/error.log")"
[ "$(stat -c %i "$scope_file")" != "$ino" ] || fail "the region file was not replaced"
for _ in $(seq 1 100); do
  [ -e "${scope_file%.scope.upstreams.shm}.scope.gone.shm" ] || break
  sleep 0.05
done
[ ! -e "${scope_file%.scope.upstreams.shm}.scope.gone.shm" ] ||
  fail "a region no declaration uses was not removed: $(ls "$work/gw/regions")"
grep -q 'scope "upstreams": .*moved the state into it (changed: slots 64 -> 128; moved the state of 1 of 1 keys' "$work/gw/error.log" ||
  fail "the layout change did not move the state: $(tail -5 "$work/gw/error.log")"
# The breaker's state moved with it (open or half-open since the outage,
# docs/gateway-regions.md "Reloads keep state"): the healthy upstream
# gets probes when its break ends (4 s at most), and they close it.
for _ in $(seq 1 60); do
  r=$(load 20 4 /probing)
  [ "$(count "$r" 200)" = 20 ] && break
  sleep 0.2
done
r=$(load 100 8 /relaid)
[ "$(count "$r" 200)" = 100 ] || fail "after the layout change: $r"
pass "layout change: new region with one log line, state moved, unused region removed"

# --------------- 4b. criticality: sheddable retries only from the upper half
# Every peer fails every 2nd request. Default requests spend the budget
# (the gateway preset's capacity is 30) below half with their retries;
# then a sheddable request gets no retry (each reaches the upstream once)
# while a default one still does.
admin_all "mode=every&n=2&reset=1"
level() { status | json "key('upstreams', 'backend').budget"; }
# below_half: spend the budget with default requests until it holds 1 to
# 12 tokens. The budget refills (3 tokens a second and a tenth of each
# success), so it is brought down again before every sheddable request:
# on a slow machine 20 requests in a row would let it climb past half.
below_half() {
  lvl=$(level)
  for _ in $(seq 1 30); do
    awk -v b="$lvl" 'BEGIN {exit !(b < 12)}' && break
    load 10 2 /drain >/dev/null
    lvl=$(level)
  done
  awk -v b="$lvl" 'BEGIN {exit !(b < 12 && b >= 1)}' || fail "could not bring the budget between 1 and 12 tokens (at $lvl)"
}
shed_fail=0
levels=""
for i in $(seq 1 20); do
  below_half
  levels="$levels $lvl"
  u0=$(ups_all)
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "Connection: close" -H "X-Criticality: sheddable" "$gw/shed$i")
  [ "$c" = 200 ] || shed_fail=$((shed_fail + 1))
  u1=$(ups_all)
  [ $((u1 - u0)) = 1 ] || fail "a sheddable request at a budget of $lvl tokens sent $((u1 - u0)) upstream requests (a retry?)"
done
[ "$shed_fail" -ge 5 ] || fail "sheddable requests without retries should fail about half the time, $shed_fail of 20 did"
below_half
lvl2=$(level)
u2=$(ups_all)
def_fail=0
for i in $(seq 1 10); do
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "Connection: close" "$gw/def$i")
  [ "$c" = 200 ] || def_fail=$((def_fail + 1))
done
u3=$(ups_all)
[ $((u3 - u2)) -gt 10 ] || fail "default requests at a budget of $lvl2 got no retry ($((u3 - u2)) upstream requests for 10)"
pass "criticality: at budgets of$levels tokens 20 sheddable requests went upstream once each ($shed_fail failed); 10 default ones retried ($((u3 - u2)) upstream requests, $def_fail failed)"
admin_all "mode=healthy&reset=1"

# ------------------------- 4c. X-Nres-Reason on nginx's own 502 / 504
# Its own upstream and gateway (prefixes up2, gw2): connect errors and
# timeouts log [error] lines, which section 5 must not find in gw's log.
# error_page takes only the answers nginx makes itself; $upstream_status
# could not tell them apart ("502, 502, 502" after three tries both for an
# upstream's own 502 and for a refused connect).
start_answers_gateway "$here/balancer.conf.in" LUA="$repo/lua/?.lua;${jit_dir}?.lua"
check_own_answers
# a retry resends the first try's bytes, X-Deadline-Ms included (README:
# lua-nginx-module's recreate_request is not safe to call here)
read -r first second _ < <(curl -s "$gw2/pertry")
[[ "$first" =~ ^[0-9]+$ ]] && [ "$second" = "$first" ] ||
  fail "a retry carried X-Deadline-Ms '$second' after the first try's '$first' (expected the same)"
got="$got /pertry: X-Deadline-Ms $first on both tries;"
h=$(reason /d0 -H "X-Deadline-Ms: 0")
[ "$h" = "504 [deadline exceeded]" ] || fail "X-Deadline-Ms: 0 on gw2 answered '$h'"
nres_stop_pid "$up2_master"
c0=$(calls)
h=$(reason /refused)
counted_once /refused "$c0"
[ "$h" = "502 [upstream failed]" ] || fail "a refused connect answered '$h', expected '502 [upstream failed]'"
nres_stop_pid "$gw2_master"
pass "X-Nres-Reason, each request counted once by gw.log:$got /d0: 504 [deadline exceeded]; /refused: $h"

# ----------------- 4d. one worker, one connection: the phases stay compiled
# (callgrind.sh's setting, where a blacklisted gw.log once cost 6k
# instructions a request while the 2-worker load above compiled fine)
mapfile -t ports < <(nres_free_ports 1)
gw3_port=${ports[0]}
mkdir -p "$work/gw3" "$work/jit3" && chmod 777 "$work/gw3" "$work/jit3"
nres_render "$here/balancer.conf.in" "$work/gw3/nginx.conf" \
  PREFIX="$work/gw3" PORT="$gw3_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua" \
  POLICY='"gateway"' CHOICE=p2c PEERS="{ \"127.0.0.1:$p1\" }"
sed -i 's/^worker_processes 2;/worker_processes 1;/' "$work/gw3/nginx.conf"
admin "$p1" "mode=healthy&reset=1" >/dev/null
NRES_JITV="$work/jit3/jit.log" nres_nginx_start "$work/gw3" "$work/gw3/nginx.conf"
nres_wait_http "http://127.0.0.1:$gw3_port/nres/status"
r=$(curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$gw3_port/seq?[1-1500]" | sort | uniq -c)
[ "$(printf '%s' "$r" | awk '$2 == 200 {print $1}')" = 1500 ] || fail "one worker, one connection: $r"
nres_stop_pid "$(cat "$work/gw3/nginx.pid")"
pass "one worker, one connection: 1500 x 200 (its jit.v log checked below)"

# ------------------------------------------------------------ 5. logs
nres_nginx_stop_all
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "error.log clean"
# The phases compile: jit.v shows traces in balancer.lua and no NYI there
# or in request.lua (jit.v names files by their base name; resty.core's
# ngx/balancer.lua is loaded but not called on these paths). An abort at
# status.lua is the /nres/status handler's, not a phase's: a trace started
# in balancer.lua's refresh can run on into it (seen: "balancer.lua:243 --
# NYI: bytecode 51 at status.lua:116" in one run of two).
ls "$work/jit"/jit.log.* >/dev/null 2>&1 || fail "no jit.v log was written"
if grep -h "NYI" "$work/jit"/jit.log.* | grep -v " at status\.lua:" |
   grep -E "(balancer|request)\.lua"; then
  fail "the jit.v logs show NYI in balancer mode's phases (above)"
fi
# An abort repeated at one place blacklists it (LuaJIT gives up after a
# few): seen once, "leaving loop in root trace at ffi.meta.__call" five
# times in gw.log, which then ran interpreted (+6k instructions a request).
for f in "$work/jit"/jit.log.* "$work/jit3"/jit.log.*; do
  rep=$(grep -h "^\[TRACE --- " "$f" | grep -v " at status\.lua:" |
        grep -E "(balancer|request)\.lua:" | sed 's/([0-9]*\/[0-9]*) //' | sort | uniq -c |
        awk '$1 >= 3' || true)
  [ -z "$rep" ] || fail "jit.v: a phase's trace aborts again and again in $f: $rep"
done
traces=$(cat "$work/jit"/jit.log.* | grep -c "^\[TRACE  *[0-9].* balancer\.lua:" || true)
[ "$traces" -gt 0 ] || fail "jit.v: no trace in balancer.lua: the phases run interpreted"
pass "jit.v: $traces traces in balancer.lua, no NYI in balancer mode's phases"
failed=0
echo "nginx balancer: all checks passed"
