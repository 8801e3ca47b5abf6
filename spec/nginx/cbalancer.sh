#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/cbalancer.sh LIBNRES MODULE - balancer mode through the nginx
# module (ngx_http_nres_module.so: nres_balancer, nres_admit,
# $nres_deadline_ms; no Lua phase per request), what spec/nginx/balancer.sh
# checks for the Lua balancer, in about 25 s:
#   0. hostile configurations: nres_balancer naming no gw.upstream, or
#      nres_admit naming no gw.limiter, fails the start with the name, file
#      and line; a limiter without a key, nres_balancer outside an upstream
#      block, nres_admit without a name: nginx -t fails naming it;
#   1. healthy (three peers, spec/nginx/cbalancer.conf.in, 2 workers):
#      every answer 200, every peer used, X-Deadline-Ms on every upstream
#      request; inbound X-Deadline-Ms 0 -> 504 + X-Nres-Reason on a kept
#      connection, bad values ignored, 0.5 -> 504, 300 -> at most 300
#      upstream; nres_admit's client limiter answers 429 + Retry-After (with
#      nres_admit_dry_run on: 200, counted in would_refuse; $nres_reason in
#      the access log, one [warn] line a refusal at nres_admit_log_level
#      warn, none at the default; a long key one bucket with Lua's); two
#      locations' upstream confs (one hides a header) stay apart in the
#      tries' timed copies; a location without nres_admit still balances;
#      an internal redirect to a location that proxies keeps the first
#      admission (its X-Deadline-Ms, one call); /nres/status counts C-mode
#      calls;
#   2. one peer down: every request still succeeds (a retry never goes back
#      to the peer that failed), its failures in the shared table, then it
#      gets almost nothing (ejected or avoided);
#   3. reload during an outage: every peer down, the upstream's breaker
#      opens (503 "circuit open" from nres_admit); after `nginx -s reload`
#      new workers still refuse and the dead upstream gets no request;
#   4. criticality: with the budget below half a sheddable request gets no
#      retry while a default one does; healthy requests in flight hold no
#      retry token; a 429 is retried on every peer, a failed POST is not
#      (proxy_next_upstream without non_idempotent); $nres_tries and
#      $nres_retry log them ("attempts exhausted", "permanent", "budget
#      exhausted");
#   5. nginx's own 502/504 carry X-Nres-Reason (error_page), each call
#      counted once (the pool's cleanup ends it, error_page or not); a
#      retry's X-Deadline-Ms is its own time left, less than the first's;
#   6. error.log has no [error], [crit], [alert] or [emerg] line.
# Skipped (exit 0) when nginx, its Lua module or the module is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
if [ -z "$module" ] || [ ! -f "$module" ]; then
  echo "skipped: no ngx_http_nres_module.so (got '${module}'; needs nginx-dev to build)"
  exit 0
fi
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
nres_spec_begin cbalancer "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 4)
p1=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; gw_port=${ports[3]}
gw="http://127.0.0.1:$gw_port"

nres_render_upstream "$work/up" "$p1" "$p2" "$p3"
policy='{ base = "gateway", breaker = { break_for = 4, break_max = 4 } }'
render_gw() {   # OUT [POLICY [PEERS]]
  nres_render "$here/cbalancer.conf.in" "$1" \
    PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua" MODULE="$module" \
    POLICY="${2:-$policy}" CHOICE=p2c \
    PEERS="${3:-{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\", \"127.0.0.1:$p3\" \}}"
}

# ------------------------------------------------- 0. hostile configurations
render_gw "$work/gw/nginx.conf"
# the named upstream must be a gw.upstream with peers: checked at start
# (nginx -t runs no init_by_lua), the error names it, the file and line
mkdir -p "$work/gw/regions" "$work/gw/tmp"
# refused NAME EDIT MODE PATTERN WHAT: nginx.conf edited by the sed script
# EDIT (as NAME.conf) must fail to start (MODE start: init_by_lua runs)
# or nginx -t (MODE test) with an error matching PATTERN.
refused() {
  local name=$1 edit=$2 mode=$3 pattern=$4 what=$5 out
  sed "$edit" "$work/gw/nginx.conf" >"$work/gw/$name.conf"
  if [ "$mode" = test ]; then
    out=$("$NGINX" -t -p "$work/gw" -e "$work/gw/bad.log" -c "$work/gw/$name.conf" 2>&1) &&
      fail "$what passed nginx -t"
  else
    out=$(NRES_REGION_DIR="$work/gw/regions" "$NGINX" -p "$work/gw" -e "$work/gw/bad.log" \
          -c "$work/gw/$name.conf" 2>&1) && fail "$what started: $out"
  fi
  printf '%s' "$out" | grep -q "$pattern" || fail "$what: unclear error: $out"
}
refused bad1 's/nres_balancer;/nres_balancer nosuch;/' start \
  'nres_balancer "nosuch": expected an upstream declared with peers in init_by_lua.*bad1.conf:[0-9]' \
  "an unknown upstream name"
# NRES_LIB naming another copy of libnres than the module's: init_by_lua
# declares into the copy, the module finds nothing; the error says why
mkdir -p "$work/gw/copy" && cp "$NRES_LIB" "$work/gw/copy/libnres.so"
NRES_LIB="$work/gw/copy/libnres.so" refused copy '' start \
  "and another libnres is loaded, $work/gw/copy/libnres.so: NRES_LIB must name the module's" \
  "NRES_LIB naming another libnres"
refused bad5 's/limiter=tight/limiter=nosuch/' start \
  'nres_admit limiter=nosuch: expected a limiter declared in init_by_lua.*bad5.conf:[0-9]' \
  "an unknown limiter name"
refused bad6 's/ "key=one client"//' test \
  'nres_admit: expected limiter=NAME and key=VALUE together.*got a limiter without a key' \
  "nres_admit with a limiter and no key"
refused bad3 's/^      nres_admit backend;   #.*/      nres_balancer;/' test \
  '"nres_balancer" directive is not allowed here' "nres_balancer in a location"
refused bad4 's/^      nres_admit backend;   #.*/      nres_admit;/' test \
  'invalid number of arguments in "nres_admit" directive' "nres_admit without a name"
pass "hostile configurations: unknown upstream or limiter (at start, with file:line), a limiter without a key, directive place and arguments"

nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
gw_master=$(cat "$work/gw/nginx.pid")
nres_wait_http "http://127.0.0.1:$p1/admin"
nres_wait_http "$gw/nres/status"

# shellcheck source=spec/nginx/peers.sh
. "$here/peers.sh"

# ------------------------------------------------------------ 1. healthy
admin_all "mode=healthy&reset=1"
c0=$(up_field "$(status)" calls)
r=$(load 300 8 /healthy)
[ "$(count "$r" 200)" = 300 ] || fail "healthy: expected 300 x 200, got: $r"
for p in "$p1" "$p2" "$p3"; do
  n=$(ups "$p"); [ "$n" -gt 0 ] || fail "healthy: peer $p got no request"
  d=$(admin "$p" "" | json "j.with_deadline")
  [ "$d" = "$n" ] || fail "healthy: X-Deadline-Ms on $d of $n requests to peer $p"
done
[ "$(ups_all)" = 300 ] || fail "healthy: the peers saw $(ups_all) requests for 300"
c1=$(up_field "$(status)" calls)
[ $((c1 - c0)) = 300 ] || fail "/nres/status counted $((c1 - c0)) calls for 300 C-mode requests"
tries=0
for p in "$p1" "$p2" "$p3"; do tries=$((tries + $(peer_field "$(status)" "$p" tries))); done
[ "$tries" -ge 300 ] || fail "/nres/status counted $tries peer tries for 300 requests"
h=$(curl -s -w '%{http_code} %header{x-nres-reason} %{num_connects}\n' -H "X-Deadline-Ms: 0" \
  -o /dev/null "$gw/d0" -o /dev/null "$gw/d0" | paste -sd' ')
[ "$h" = "504 deadline exceeded 1 504 deadline exceeded 0" ] ||
  fail "two X-Deadline-Ms: 0 on one connection: '$h', expected 504s on one connection"
admin_all "reset=1"
for bad in abc -5 1e400 "" nan inf -inf "5, 100" 9007199254740993; do
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: $bad" "$gw/bad")
  [ "$c" = 200 ] || fail "X-Deadline-Ms: '$bad' gave $c, expected it ignored (200)"
done
c=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Deadline-Ms: 0.5" "$gw/bad")
[ "$c" = 504 ] || fail "X-Deadline-Ms: 0.5 (under 1 ms) gave $c, expected 504"
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
r=$(curl -s -w '%{http_code} %header{retry-after} [%header{x-nres-reason}]\n' \
  -o /dev/null "$gw/limited" -o /dev/null "$gw/limited" -o /dev/null "$gw/limited" \
  -o /dev/null "$gw/limited")
printf '%s\n' "$r" | grep -q '^200 ' || fail "/limited: no request admitted: $r"
printf '%s\n' "$r" | grep -Eq '^429 [1-9][0-9]* \[rate limited\]$' || fail "/limited: no 429 with Retry-After: $r"
# $nres_reason in the access log; each refusal one line at
# nres_admit_log_level (warn there; the default, info, is below error.log's
# notice: the X-Deadline-Ms: 0 refusals above left none)
grep -qx '429 \[rate limited\]' "$work/gw/limited.log" && grep -qx '200 \[-\]' "$work/gw/limited.log" ||
  fail "\$nres_reason: /limited's access log says: $(cat "$work/gw/limited.log")"
grep -q '\[warn\].*nres_admit: refused, rate limited, upstream "backend" by limiter "tight"' \
  "$work/gw/error.log" || fail "no [warn] line for /limited's refusals: $(tail -3 "$work/gw/error.log")"
# a key longer than a slot, shortened alike by the module and Lua
# (nres_gw_key): the Lua limiter's admission leaves the module's refused
r=$(curl -s -w '%{http_code} ' -o /dev/null "$gw/lua-limited-long" -o /dev/null "$gw/limited-long")
[ "$r" = "200 429 " ] || fail "one long key in Lua and the module: $r (expected 200 429: one bucket)"
if grep -q 'nres_admit: refused, deadline exceeded' "$work/gw/error.log"; then
  fail "a refusal logged above nres_admit_log_level's default (info)"
fi
# nres_admit_dry_run on: the same limiter's refusals counted, every request let through
r=$(curl -s -w '%{http_code} ' -o /dev/null "$gw/dry" -o /dev/null "$gw/dry" -o /dev/null "$gw/dry")
[ "$r" = "200 200 200 " ] || fail "/dry (nres_admit_dry_run on): $r"
w=$(curl -sf "$gw/nres/status" | json 'j.limiters.tight.would_refuse["rate limited"]')
[ "${w:-0}" -ge 2 ] || fail "nres_admit_dry_run: would_refuse $w (2 expected)"
# a try's timeouts come with a copy of its location's upstream conf,
# kept per location and worker: another location's (hiding Content-Type)
# is not used (one connection: one worker sees both)
types=$(curl -s -w '%{http_code}:%{content_type} ' -o /dev/null "$gw/typed" \
          -o /dev/null "$gw/hidden" -o /dev/null "$gw/typed" -o /dev/null "$gw/hidden")
[ "$types" = "200:text/plain 200: 200:text/plain 200: " ] ||
  fail "two locations' upstream confs mixed up: $types (expected /hidden without Content-Type)"
c=$(curl -s -o /dev/null -w '%{http_code}' "$gw/unadmitted")
[ "$c" = 200 ] || fail "a location without nres_admit gave $c"
# set_by_lua's $nres_deadline_ms (the Lua balancer's config) in the same
# nginx as the module's variable: it starts, and each location has its own
c=$(curl -s "$gw/lua-admit")
[ "$c" = "[7]" ] || fail "set_by_lua \$nres_deadline_ms beside the module gave '$c', expected '[7]'"
# and its value is what proxy_set_header sends (the variable cached for
# the request: set_by_lua's value, not the module's, empty there)
admin_all "reset=1"
c=$(curl -s -o /dev/null -w '%{http_code}' "$gw/lua-deadline")
d=0
for p in "$p1" "$p2" "$p3"; do d=$(( d + $(admin "$p" "" | json "j.deadline_max or 0") )); done
[ "$c" = 200 ] && [ "$d" = 7 ] ||
  fail "set_by_lua \$nres_deadline_ms 7 and proxy_set_header beside the module: $c, the upstream saw X-Deadline-Ms $d"
# an internal redirect keeps the admission: X-Deadline-Ms from it, one call
admin_all "reset=1"
r0=$(up_field "$(status)" calls)
c=$(curl -s -o /dev/null -w '%{http_code}' -H "Connection: close" -H "X-Deadline-Ms: 250" "$gw/redirected")
d=0
for p in "$p1" "$p2" "$p3"; do d=$(( d + $(admin "$p" "" | json "j.deadline_max or 0") )); done
[ "$c" = 200 ] && [ "$d" -gt 0 ] && [ "$d" -le 250 ] ||
  fail "a redirected request: $c, the upstream saw X-Deadline-Ms $d (expected 1..250)"
for _ in $(seq 1 40); do r1=$(up_field "$(status)" calls); [ "$r1" -gt "$r0" ] && break; sleep 0.05; done
[ $((r1 - r0)) = 1 ] || fail "a redirected request counted $((r1 - r0)) calls"
# $nres_deadline_ms read before the admission (nginx caches a variable's
# value for the request): the admission's value reaches the upstream
read -r c d < <(deadline_sent "$gw/early")
[ "$c" = 200 ] && [ "$d" -gt 0 ] && [ "$d" -le 250 ] ||
  fail "\$nres_deadline_ms read before the admission: $c, the upstream saw X-Deadline-Ms $d (expected 1..250)"
pass "healthy: 300/300 ok over 3 peers, X-Deadline-Ms on each, $((c1 - c0)) calls and $tries tries in /nres/status; inbound 0 -> 504 (connection kept), bad values ignored, 300 -> upstream saw $dmax; nres_admit's limiter: 429 + Retry-After; a redirect keeps its admission; \$nres_deadline_ms read before the admission still sent"

# ------------------------------------------------------- 2. one peer down
check_one_peer_down

# ------------------------------------------- 3. reload during an outage
open_breaker
h=$(curl -s -o /dev/null -w '%{http_code} %header{x-nres-reason}' "$gw/refused")
[ "$h" = "503 circuit open" ] || fail "a refused request answered '$h', expected 503 circuit open"
u0=$(ups_all)
reload_gateway
sleep 0.3   # the old workers finish their connections
r=$(load 200 8 /during)
[ "$(count "$r" 503)" = 200 ] || fail "during the outage after reload: $r (expected 200 x 503)"
u1=$(ups_all)
[ "$u1" = "$u0" ] || fail "the dead upstream got $((u1 - u0)) requests across the reload"
pass "reload in an outage: the new workers' nres_admit refused 200 of 200 (breaker kept open), 0 upstream requests"

# --------------- 4. criticality: sheddable retries only from the upper half
admin_all "mode=healthy&reset=1"
sleep 4.2   # the upstream's breaker (break_for 4) lets probes in again
for _ in $(seq 1 50); do
  load 10 2 /recover >/dev/null
  [ "$(up_field "$(status)" breaker)" = closed ] && break
  sleep 0.2
done
[ "$(up_field "$(status)" breaker)" = closed ] || fail "the upstream's breaker did not close: $(status)"
admin_all "mode=every&n=2&reset=1"
level() { status | json "key('upstreams', 'backend').budget"; }
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
for i in $(seq 1 10); do
  below_half
  u0=$(ups_all)
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "Connection: close" -H "X-Criticality: sheddable" "$gw/shed$i")
  [ "$c" = 200 ] || shed_fail=$((shed_fail + 1))
  u1=$(ups_all)
  [ $((u1 - u0)) = 1 ] || fail "a sheddable request at a budget of $lvl tokens sent $((u1 - u0)) upstream requests (a retry?)"
done
below_half
u2=$(ups_all)
for i in $(seq 1 10); do curl -s -o /dev/null -H "Connection: close" "$gw/def$i"; done
u3=$(ups_all)
[ $((u3 - u2)) -gt 10 ] || fail "default requests below half a budget got no retry ($((u3 - u2)) upstream requests for 10)"
pass "criticality: 10 sheddable requests below half a budget went upstream once each ($shed_fail failed); 10 default ones retried ($((u3 - u2)) upstream requests)"
# healthy requests in flight hold no retry token: the module asks the
# budget only after a try failed (the budget's words are shared by every
# worker; a token held by each request in flight wrote them twice a request)
# (here, where the slow answers' latency in the peers' estimates cannot
# spoil a later check; once the budget has refilled)
for _ in $(seq 1 150); do
  full=$(up_field "$(status)" budget)
  [ "$full" = 30 ] && break
  sleep 0.1
done
admin_all "mode=healthy&delay=1500&reset=1"
for i in 1 2 3 4 5 6; do curl -s -o /dev/null "$gw/slow$i" & done
sleep 0.7
held=$(up_field "$(status)" budget)
wait
[ "$held" = "$full" ] ||
  fail "6 healthy requests in flight: the budget read $held tokens, $full before (a token held per request?)"
# a retry is granted for what proxy_next_upstream retries: a 429 (seen by
# the header parser's wrapper, before nginx decides) goes to the other
# peers; a POST already sent is not retried without non_idempotent (here,
# where a failure that raises a peer's cost cannot spoil a later check)
admin_all "mode=down&status=429&reset=1"
c=$(curl -s -o /dev/null -w '%{http_code}' "$gw/throttled")
n429=$(ups_all)
admin_all "mode=down&reset=1"
c2=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data 'x=1' "$gw/posted")
npost=$(ups_all)
[ "$c" = 429 ] && [ "$n429" = 3 ] ||
  fail "every peer answering 429: $c after $n429 upstream requests (expected 429 after 3, one per peer)"
[ "$npost" = 1 ] || fail "a POST every peer fails (503): $c2 after $npost upstream requests (expected 1)"
# the try log's variables: the tries nres began, and why no more
grep -qx '/throttled 429 \[3\] \[attempts exhausted\]' "$work/gw/tries.log" &&
  grep -qx '/posted 503 \[1\] \[permanent\]' "$work/gw/tries.log" &&
  grep -Eq '^/def[0-9]+ [0-9]{3} \[[23]\] \[' "$work/gw/tries.log" ||
  fail "\$nres_tries, \$nres_retry: the access log says: $(grep -E '^/(throttled|posted|def)' "$work/gw/tries.log")"
if [ "$shed_fail" -gt 0 ]; then
  grep -Eq '^/shed[0-9]+ 50[0-9] \[1\] \[budget exhausted\]$' "$work/gw/tries.log" ||
    fail "a sheddable request that failed below half a budget: $(grep '^/shed' "$work/gw/tries.log")"
fi
pass "healthy requests in flight hold no budget token ($held of $full); a 429 retried on every peer (3 upstream requests), a failed POST not retried (1); \$nres_tries and \$nres_retry say so"
admin_all "mode=healthy&reset=1"

# ------------------------- 5. X-Nres-Reason on nginx's own 502 / 504
start_answers_gateway "$here/cbalancer.conf.in" LUA="$repo/lua/?.lua" MODULE="$module"
check_own_answers
# check_per_try_deadline URL: each try's X-Deadline-Ms is its own time
# left (answers.conf.in's /pertry: the first try takes 50 ms and fails,
# the retry answers both values); the retry's request is made again with
# the request's body (a PUT of 100 kB: in a file at the gateway). Sets
# first and second (the GET's values).
check_per_try_deadline() {
  local size f2 s2
  read -r first second size < <(curl -s "$1")
  [[ "$first" =~ ^[0-9]+$ && "$second" =~ ^[0-9]+$ ]] && [ "$second" -lt "$first" ] && [ "$size" = 0 ] ||
    fail "a retry carried X-Deadline-Ms '$second' after the first try's '$first' (expected less)"
  head -c 100000 /dev/zero | tr '\0' x >"$work/pertry.body"
  read -r f2 s2 size < <(curl -s -X PUT --data-binary "@$work/pertry.body" "$1")
  [ "$size" = 100000 ] && [ "$s2" -lt "$f2" ] ||
    fail "a retried PUT of 100000 bytes: the retry got $size bytes, X-Deadline-Ms '$f2' then '$s2'"
}
check_per_try_deadline "$gw2/pertry"
got="$got /pertry: X-Deadline-Ms $first then $second;"
nres_stop_pid "$up2_master"
c0=$(calls)
h=$(reason /refused)
counted_once /refused "$c0"
[ "$h" = "502 [upstream failed]" ] || fail "a refused connect answered '$h', expected '502 [upstream failed]'"
nres_stop_pid "$gw2_master"
pass "X-Nres-Reason, each request counted once:$got /refused: $h"

# ------------------------------------------------------------ 6. logs
nres_nginx_stop_all
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "error.log clean"
failed=0
echo "nginx C balancer: all checks passed"
