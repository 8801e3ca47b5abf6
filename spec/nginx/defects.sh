#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/defects.sh LIBNRES [MODULE] - issue 28's gateway defects, each
# checked in both balancer modes: the Lua balancer (balancer.conf.in) and,
# when MODULE is given, the nginx module (cbalancer.conf.in); about 15 s a
# mode. Each check starts a gateway of its own (one peer) and stops it.
#   6. client aborts are no successes: the upstream's breaker half-open,
#      the peer hanging, two probes whose clients give up (499) leave it
#      half-open (they closed it); two answered probes then close it;
#  10. an X-Deadline-Ms of 64 bytes or more (leading zeros) is read as any
#      other: 300 ms reach the peer (the module ignored it);
#  11. an HTTP/0.9 answer (bytes with no status line) is the peer's
#      failure: every try counted failed, the peer ejected (it counted as
#      the peer's success);
#  12. a peer on the IPv6 loopback, "[::1]:PORT", is declared and answers
#      (gw.upstream refused it);
#   7. (module) nres_balancer followed by least_conn, hash, ip_hash or
#      random fails nginx -t, naming the upstream and the file (nginx
#      warned and sent every request to the placeholder server).
# NRES_DEFECTS="6 11" runs only those checks (default: all). Skipped
# (exit 0) without nginx's Lua module; the module's half without MODULE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
nres_spec_begin defects "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 4)
p1=${ports[0]}; pg=${ports[1]}; p6=${ports[2]}; gw_port=${ports[3]}
gw="http://127.0.0.1:$gw_port"
nres_render "$here/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$p1" SPEC="$here" EXTRA_LISTEN="
    listen 127.0.0.1:$pg reuseport;
    listen [::1]:$p6 reuseport;"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"
admin() { curl -sf "http://127.0.0.1:$1/admin?$2"; }
admin "$pg" "mode=garbage" >/dev/null
json() { luajit "$here/json.lua" "$1"; }
status() { curl -sf -H "Connection: close" "$gw/nres/status"; }
breaker() { status | json "key('upstreams', 'backend').breaker"; }
peer() { status | json "j.upstreams.backend.peers[1].$1"; }

# One try per call, the upstream's breaker opening after 2 failures in a
# row for 1 s, closing after 2 successful probes.
policy='{ base = "gateway", attempts = 1, breaker = { consecutive = 2, ratio = 1,
  min_calls = 1000, break_for = 1, break_max = 1, jitter = 0, successes = 2 } }'

# gateway PEERS [POLICY]: this mode's gateway ($tpl) with PEERS (a Lua
# list) and POLICY (default $policy), started
gateway() {
  local prefix="$work/$mode-$((++n))"
  mkdir -p "$prefix"
  nres_render "$tpl" "$prefix/nginx.conf" PREFIX="$prefix" PORT="$gw_port" \
    LUA="$repo/lua/?.lua" POLICY="${2:-$policy}" CHOICE=p2c PEERS="$1" MODULE="${module:-}"
  sed -i 's/^env NRES_JITV;//' "$prefix/nginx.conf"
  nres_nginx_start "$prefix" "$prefix/nginx.conf" ||
    fail "$mode: the gateway with peers $1 did not start: $(tail -3 "$prefix/error.log")"
  nres_wait_http "$gw/nres/status"
  gw_pid=$(cat "$prefix/nginx.pid")
}
# stop_gateway: the gateway gateway() started (the upstream stays)
stop_gateway() { nres_stop_pid "$gw_pid"; }
# wanted N: check N is in NRES_DEFECTS (all by default)
wanted() { case " ${NRES_DEFECTS:-6 7 10 11 12} " in *" $1 "*) return 0 ;; esac; return 1; }
code() { curl -s -o /dev/null -w '%{http_code}' "$@" || true; }

# 6. client aborts
check_6() {
  local st c d i fails tries zeros
  gateway "{ \"127.0.0.1:$p1\" }"
  admin "$p1" "mode=down&reset=1" >/dev/null
  for i in 1 2; do code "$gw/down" >/dev/null; done
  [ "$(breaker)" = open ] || fail "$mode: the upstream's breaker did not open: $(status)"
  admin "$p1" "mode=healthy&delay=3000" >/dev/null
  sleep 1.2
  for i in 1 2; do
    c=$(code --max-time 0.4 "$gw/hang")
    [ "$c" = 000 ] || fail "$mode: a probe to the hanging peer answered $c before the client gave up"
    sleep 0.2   # the gateway sees the client gone and ends the call
  done
  st=$(breaker)
  [ "$st" = half-open ] ||
    fail "$mode: two probes whose clients gave up left the breaker $st (expected half-open)"
  admin "$p1" "mode=healthy&delay=0" >/dev/null
  for i in 1 2; do c=$(code "$gw/ok"); [ "$c" = 200 ] || fail "$mode: a probe answered $c"; done
  [ "$(breaker)" = closed ] || fail "$mode: two answered probes did not close the breaker"
  pass "$mode (6): two probes whose clients gave up leave the breaker half-open; two answered ones close it"
  stop_gateway
}

# 10. a long X-Deadline-Ms (module and cosocket and Lua balancer: one parser)
check_10() {
  local st c d i fails tries zeros
  gateway "{ \"127.0.0.1:$p1\" }"
  zeros=$(printf '0%.0s' $(seq 1 67))
  admin "$p1" "reset=1" >/dev/null
  c=$(code -H "X-Deadline-Ms: ${zeros}300" "$gw/long")
  d=$(admin "$p1" "" | json "j.deadline_max or 0")
  [ "$c" = 200 ] && [ "$d" -ge 1 ] && [ "$d" -le 300 ] ||
    fail "$mode (10): a 70-byte X-Deadline-Ms of 300: $c, the peer saw $d ms"
  pass "$mode (10): a 70-byte X-Deadline-Ms of 300 reached the peer as $d ms"
  stop_gateway
}

# 11. an HTTP/0.9 answer is the peer's failure
check_11() {
  local st c d i fails tries zeros
  gateway "{ \"127.0.0.1:$pg\" }" '"gateway"'   # no upstream breaker in the way
  for i in $(seq 1 8); do code "$gw/garbage" >/dev/null; done
  tries=$(peer tries)
  fails=$(peer failures)
  [ "$tries" -ge 8 ] && [ "$fails" = "$tries" ] &&
    [ "$(status | json "key('upstreams', 'backend').stops.ok or 0")" = 0 ] ||
    fail "$mode (11): $fails of $tries tries to a peer answering garbage counted failed: $(status)"
  st=$(peer state)
  [ "$st" = open ] || [ "$st" = half-open ] ||
    fail "$mode (11): the peer answering garbage is $st, expected ejected"
  pass "$mode (11): $fails of $tries tries answered with no status line counted failed; the peer $st"
  stop_gateway
}

# 12. an IPv6 peer
check_12() {
  local st c d i fails tries zeros
  gateway "{ \"[::1]:$p6\" }"
  c=$(code "$gw/v6")
  [ "$c" = 200 ] || fail "$mode (12): a request to the [::1]:$p6 peer gave $c"
  [ "$(curl -sf "http://[::1]:$p6/admin" | json "j.requests")" -ge 1 ] ||
    fail "$mode (12): the IPv6 peer got no request"
  pass "$mode (12): the peer [::1]:$p6 declared and answering"
  stop_gateway
}

# check_mode MODE TEMPLATE: the wanted checks on gateways from TEMPLATE
check_mode() {
  mode=$1 tpl=$2 n=0
  local k
  for k in 6 10 11 12; do
    if wanted "$k"; then "check_$k"; fi
  done
}

check_mode lua "$here/balancer.conf.in"
if [ -z "$module" ] || [ ! -f "$module" ]; then
  echo "skipped: the module's half (no ngx_http_nres_module.so; needs nginx-dev to build)"
  failed=0
  exit 0
fi
module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
check_mode module "$here/cbalancer.conf.in"

# 7. another balancing method after nres_balancer
wanted 7 || { failed=0; exit 0; }
prefix="$work/methods"
mkdir -p "$prefix/tmp"
nres_render "$here/cbalancer.conf.in" "$prefix/nginx.conf" PREFIX="$prefix" PORT="$gw_port" \
  LUA="$repo/lua/?.lua" POLICY="$policy" CHOICE=p2c PEERS="{ \"127.0.0.1:$p1\" }" MODULE="$module"
for method in least_conn "hash \$request_uri" ip_hash random; do
  sed "s/^    nres_balancer;/    nres_balancer;\n    $method;/" "$prefix/nginx.conf" >"$prefix/m.conf"
  grep -q "^    $method;" "$prefix/m.conf" || fail "(7) the test did not add $method"
  out=$("$NGINX" -t -p "$prefix" -e "$prefix/error.log" -c "$prefix/m.conf" 2>&1) &&
    fail "(7) nres_balancer then $method passed nginx -t: $out"
  printf '%s' "$out" | grep -q 'nres_balancer "backend": expected no other balancing method.*m.conf:[0-9]' ||
    fail "(7) nres_balancer then $method: unclear error: $out"
done
pass "module (7): nres_balancer followed by least_conn, hash, ip_hash or random fails nginx -t, naming the upstream"
failed=0
