#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/health.sh LIBNRES [MODULE] - active health checks (issue 25)
# in a real nginx, with the Lua balancer (spec/nginx/balancer.conf.in) and,
# when MODULE (ngx_http_nres_module.so) is given, the nginx module
# (spec/nginx/cbalancer.conf.in); both gateways run 2 workers. The peers
# are the three-port test upstream (spec/nginx/nres_upstream.lua: requests
# to /_health are counted apart, as `health`). The upstream gets
# health = { path = "/_health", interval = 0.5 s, timeout = 250 ms,
# healthy = 2, unhealthy = 2 } (the PEERS placeholder carries it), choice
# round-robin (so that a failing peer is ejected passively in 4b). Per mode:
#   1. the checks run once per interval for the whole nginx, not once per
#      worker: about 6 health requests per peer in 3 s (12 would be two
#      workers each checking);
#   2. a peer answering 500 on the health path is ejected (ejected_by
#      "active") within unhealthy x interval + timeout (+ 0.5 s slack)
#      with no client request sent to it; client traffic then avoids it;
#      the Prometheus text has the check results and the ejection;
#   3. it is restored (closed) within healthy x interval (+ slack) after it
#      recovers, still with no client request sent to it;
#   4. a peer that hangs on the health path (a delay past the timeout) is
#      ejected likewise (last result "timeout"), and restored;
#   4b. a peer ejected passively (its client requests fail, its health
#      path passes) is closed once it recovers by the checks, which are
#      its half-open probes: within its break (2 s) + 3 passes, with no
#      client request sent to it;
#   5. kill -9 of the worker holding the checks' lease: another takes over
#      and the checks reach the peers again within the lease (2 x interval)
#      + a look (interval / 4) (+ slack);
#   5b. (the Lua balancer) after nginx -s reload a new worker checks, still
#      once per interval;
#   6. error.log has no [error], [crit], [alert] or [emerg] line.
# First, once: TCP checks (health = { tcp = true }) eject a fourth peer
# where nothing listens, with no try sent to it.
# About 40 s. Skipped (exit 0) when nginx or its Lua module is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
nres_spec_begin health "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 5)
p1=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; gw_port=${ports[3]}
dead=${ports[4]}   # nothing listens there (the TCP check's failing peer)
gw="http://127.0.0.1:$gw_port"
# shellcheck source=spec/nginx/peers.sh
. "$here/peers.sh"

nres_render "$here/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$p1" SPEC="$here" EXTRA_LISTEN="
    listen 127.0.0.1:$p2 reuseport;
    listen 127.0.0.1:$p3 reuseport;"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"

INTERVAL=0.5 TIMEOUT=0.25 HEALTHY=2 UNHEALTHY=2
peers="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\", \"127.0.0.1:$p3\" }, health = {
      path = \"/_health\", interval = \"${INTERVAL}s\", timeout = \"250ms\",
      healthy = $HEALTHY, unhealthy = $UNHEALTHY }"

health_of() { admin "$1" "" | json "j.health"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
within() { awk -v e="$1" -v l="$2" 'BEGIN { exit !(e <= l) }'; }
bound() { awk -v n="$1" -v i="$INTERVAL" -v x="$2" 'BEGIN { print n * i + x + 0.5 }'; }
# wait_peer PORT EXPR: until the peer's status entry p makes EXPR true (10 s)
wait_peer() {
  local i
  for i in $(seq 1 200); do
    [ "$(status | json "(function() for _, p in ipairs(j.upstreams.backend.peers) do
      if p.peer == '127.0.0.1:$1' then return $2 end end end)()")" = true ] && return 0
    sleep 0.05
  done
  fail "$mode: peer $1 never got to '$2': $(status)"
}

# eject_and_restore PORT MODE WANT_LAST: the peer set to MODE (its health
# path fails: WANT_LAST is the last result) is ejected by the checks with no
# client request, traffic avoids it, and it comes back once healthy again.
# (Not $p: admin_all's loop sets it - bash's scoping is dynamic.)
eject_and_restore() {
  local peer=$1 t e lim r
  admin_all "mode=healthy&reset=1"
  t=$(now)
  admin "$peer" "$2&reset=1" >/dev/null
  wait_peer "$peer" "p.ejected_by == 'active'"
  e=$(elapsed "$t"); lim=$(bound "$UNHEALTHY" "$TIMEOUT")
  within "$e" "$lim" || fail "$mode: peer $peer ejected after $e s (bound $lim s)"
  [ "$(ups "$peer")" = 0 ] || fail "$mode: a client request reached $peer before its ejection"
  [ "$(peer_field "$(status)" "$peer" "health.last")" = "$3" ] ||
    fail "$mode: peer $peer's last check: $(peer_field "$(status)" "$peer" "health.last"), expected $3"
  [ "$(peer_field "$(status)" "$peer" state)" = isolated ] || fail "$mode: $peer not isolated: $(status)"
  r=$(load 60 4 /traffic)
  [ "$(count "$r" 200)" = 60 ] || fail "$mode: 60 requests with $peer ejected: $r"
  [ "$(ups "$peer")" = 0 ] || fail "$mode: the ejected peer $peer got $(ups "$peer") client requests"
  pass "$mode: $2 on the health path: $peer ejected by the checks in $e s (bound $lim s), no client request sent to it; 60/60 ok"
  if [ "$peer" = "$p3" ]; then
    curl -sf "$gw/nres/status?format=prometheus" >"$work/prom.txt"
    grep -q "^nres_peer_ejected_by{upstream=\"backend\",peer=\"127.0.0.1:$peer\",by=\"active\"} 1" \
      "$work/prom.txt" || fail "$mode: no nres_peer_ejected_by for $peer: $(grep ejected "$work/prom.txt")"
    grep -q "^nres_peer_health_checks_total{upstream=\"backend\",peer=\"127.0.0.1:$peer\",result=\"status\"} [1-9]" \
      "$work/prom.txt" || fail "$mode: no failed checks of $peer in nres_peer_health_checks_total"
  fi
  t=$(now)
  admin "$peer" "mode=healthy&delay=0" >/dev/null
  wait_peer "$peer" "p.state == 'closed' and p.ejected_by == nil"
  e=$(elapsed "$t"); lim=$(bound "$HEALTHY" "$TIMEOUT")
  within "$e" "$lim" || fail "$mode: peer $peer restored after $e s (bound $lim s)"
  [ "$(ups "$peer")" = 0 ] || fail "$mode: a client request was spent on $peer's recovery"
  r=$(load 60 4 /after)
  [ "$(count "$r" 200)" = 60 ] || fail "$mode: 60 requests after $peer's recovery: $r"
  [ "$(ups "$peer")" -gt 0 ] || fail "$mode: the restored peer $peer gets no request"
  pass "$mode: $peer restored by the checks in $e s (bound $lim s) with no client probe; then $(ups "$peer") of 60 requests"
}

run_mode() {   # MODE TEMPLATE PREFIX [nres_render ARGS...]
  mode=$1
  local tpl=$2 prefix=$3 n pid newpid t e lim
  shift 3
  mkdir -p "$prefix" && chmod 777 "$prefix"
  nres_render "$tpl" "$prefix/nginx.conf" PREFIX="$prefix" PORT="$gw_port" \
    LUA="$repo/lua/?.lua" POLICY='"gateway"' CHOICE=round-robin PEERS="$peers" "$@"
  NRES_JITV="" nres_nginx_start "$prefix" "$prefix/nginx.conf"
  nres_wait_http "$gw/nres/status"
  sleep 1

  # 1. once per interval for the whole nginx
  local got=() t w lo hi c
  for p in "$p1" "$p2" "$p3"; do   # each peer's window: from its reset to its read
    t=$(now); admin "$p" "mode=healthy&reset=1" >/dev/null
    sleep 3
    c=$(admin "$p" ""); w=$(elapsed "$t")
    n=$(json "j.health" <<<"$c")
    # one check per interval: w / 0.5 of them, give or take one at each
    # end; once per worker would be twice that
    lo=$(awk -v w="$w" -v i="$INTERVAL" 'BEGIN { print int(w / i) - 1 }')
    hi=$(awk -v w="$w" -v i="$INTERVAL" 'BEGIN { print int(w / i) + 1 }')
    [ "$n" -ge "$lo" ] && [ "$n" -le "$hi" ] ||
      fail "$mode: $n health checks of $p in $w s at one per $INTERVAL s (want $lo..$hi)"
    [ "$(json "j.requests" <<<"$c")" = 0 ] || fail "$mode: client requests counted with none sent: $c"
    got+=("$n in $w s")
  done
  pass "$mode: checks once per interval for the whole nginx (2 workers): ${got[*]}"

  # 2-3. 500 on the health path; 4. a hang past the timeout
  eject_and_restore "$p3" "mode=down&status=500" status
  eject_and_restore "$p2" "mode=healthy&delay=3000" timeout

  # 2b. ejected passively (its client requests fail, its health path
  # passes): once its break is over the checks are its half-open probes,
  # so it is closed with no client request (eject.successes = 3 of them)
  admin_all "mode=healthy&reset=1"
  admin "$p1" "mode=down&health=pass&reset=1" >/dev/null
  for _ in $(seq 1 50); do
    load 20 4 /passive >/dev/null
    [ "$(peer_field "$(status)" "$p1" ejected_by)" = passive ] && break
  done
  [ "$(peer_field "$(status)" "$p1" ejected_by)" = passive ] ||
    fail "$mode: $p1 not ejected passively: $(status)"
  t=$(now)
  admin "$p1" "mode=healthy&health=&reset=1" >/dev/null
  wait_peer "$p1" "p.state == 'closed'"
  e=$(elapsed "$t"); lim=$(awk -v i="$INTERVAL" 'BEGIN { print 2 + 3 * i + i + 0.5 }')
  within "$e" "$lim" || fail "$mode: $p1 closed $e s after it recovered (bound $lim s)"
  [ "$(ups "$p1")" = 0 ] || fail "$mode: $(ups "$p1") client requests spent on $p1's probes"
  pass "$mode: $p1 ejected passively, closed by the checks as its probes $e s after it recovered (break 2 s + 3 x $INTERVAL s), no client request sent"

  # 5. the checking worker killed
  pid=$(status | json "j.upstreams.backend.health.checker_pid")
  [ -n "$pid" ] && [ "$(ps -o ppid= -p "$pid" | tr -d ' ')" = "$(cat "$prefix/nginx.pid")" ] ||
    fail "$mode: no checking worker in the status ($pid)"
  kill -9 "$pid"
  t=$(now)
  admin_all "reset=1"
  for _ in $(seq 1 100); do [ "$(health_of "$p1")" -gt 0 ] && break; sleep 0.05; done
  e=$(elapsed "$t"); lim=$(awk -v i="$INTERVAL" 'BEGIN { print 2 * i + i / 4 + 0.5 }')
  [ "$(health_of "$p1")" -gt 0 ] && within "$e" "$lim" ||
    fail "$mode: checks resumed after $e s with the checker killed (bound $lim s)"
  sleep 2
  newpid=$(status | json "j.upstreams.backend.health.checker_pid")
  [ -n "$newpid" ] && [ "$newpid" != "$pid" ] || fail "$mode: checker still $pid ($newpid)"
  n=$(health_of "$p2")
  [ "$n" -ge 3 ] || fail "$mode: $n checks of $p2 in the 2 s after the takeover"
  pass "$mode: checker $pid killed (-9): checks resumed in $e s (bound $lim s) from $newpid"

  # 5b. nginx -s reload: the old checker lets its lease go as it exits,
  # a new worker checks, still once per interval (the Lua balancer's run)
  if [ "$prefix" = "$work/gw" ]; then
    gw_master=$(cat "$prefix/nginx.pid")
    reload_gateway
    sleep 1.5
    t=$(now); admin "$p1" "reset=1" >/dev/null
    sleep 3
    n=$(health_of "$p1"); e=$(elapsed "$t")
    newpid=$(status | json "j.upstreams.backend.health.checker_pid")
    case " $old_pids " in *" $newpid "*) fail "$mode: the checker after the reload is an old worker ($newpid)" ;; esac
    lim=$(awk -v w="$e" -v i="$INTERVAL" 'BEGIN { print int(w / i) + 1 }')
    [ "$n" -ge 4 ] && [ "$n" -le "$lim" ] || fail "$mode: $n checks of $p1 in $e s after a reload"
    pass "$mode: after nginx -s reload, new worker $newpid checks: $n checks of $p1 in $e s"
  fi

  # 6.
  # (lua-nginx-module logs a cosocket's timeout at [error]: the hanging
  # peer's checks; lua_socket_log_errors off silences them)
  if grep -E "\[(error|crit|alert|emerg)\]" "$prefix/error.log" |
     grep -v "worker process $pid exited on signal 9" |
     grep -v "lua tcp socket read timed out, context: ngx.timer"; then
    fail "$mode: error.log has errors"
  fi
  nres_stop_pid "$(cat "$prefix/nginx.pid")"
}

# 0. TCP checks (the Lua balancer): a fourth peer where nothing listens is
# ejected (last "error") with no try sent to it; the others stay closed.
tcp_check() {
  local prefix=$work/gwt
  mode=tcp
  mkdir -p "$prefix" && chmod 777 "$prefix"
  nres_render "$here/balancer.conf.in" "$prefix/nginx.conf" PREFIX="$prefix" PORT="$gw_port" \
    LUA="$repo/lua/?.lua" POLICY='"gateway"' CHOICE=round-robin \
    PEERS="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\", \"127.0.0.1:$p3\", \"127.0.0.1:$dead\" },
      health = { tcp = true, interval = 0.5, timeout = 0.25, unhealthy = 2 }"
  NRES_JITV="" nres_nginx_start "$prefix" "$prefix/nginx.conf"
  nres_wait_http "$gw/nres/status"
  wait_peer "$dead" "p.ejected_by == 'active' and p.health.last == 'error'"
  [ "$(peer_field "$(status)" "$dead" tries)" = 0 ] || fail "tcp: tries sent to the dead peer"
  for p in "$p1" "$p2" "$p3"; do
    [ "$(peer_field "$(status)" "$p" "health.last")" = ok ] &&
      [ "$(peer_field "$(status)" "$p" state)" = closed ] || fail "tcp: peer $p: $(status)"
  done
  [ "$(health_of "$p1")" = 0 ] || fail "tcp: a TCP check sent an HTTP request"
  nres_stop_pid "$(cat "$prefix/nginx.pid")"
  pass "tcp: the peer with nothing listening ejected by TCP checks, no try sent to it; the others closed"
}
admin_all "mode=healthy&reset=1"
tcp_check

run_mode lua "$here/balancer.conf.in" "$work/gw"
if [ -n "$module" ] && [ -f "$module" ]; then
  module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
  run_mode module "$here/cbalancer.conf.in" "$work/gwm" MODULE="$module"
else
  echo "skipped: the module mode (no ngx_http_nres_module.so: needs nginx-dev to build)"
fi
failed=0
