#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/weights.sh LIBNRES [MODULE] - peer weights and a backup peer
# in a real nginx (issue 25; docs/gateway-peers.md), about 10 s; with
# MODULE (ngx_http_nres_module.so) through the module's nres_balancer
# (spec/nginx/cbalancer.conf.in), else the Lua balancer.
#
# Three peers (one test upstream nginx on three ports, each port its own
# peer, /admin counts its requests) behind the gateway in balancer mode
# (spec/nginx/balancer.conf.in, 2 workers, round robin): p1 weight 3, p2
# weight 1, p3 a backup.
#   1. healthy: p1 gets about 3/4 of the requests, p2 the rest, the backup
#      none; /nres/status shows the weights and the backup;
#   2. the control API weights p2 at 3: p1 and p2 about even, no reload;
#   3. both primaries answer 503: they are ejected and every request
#      still succeeds, on the backup;
#   4. they recover and are restored (control API): the backup gets
#      nothing again;
#   5. error.log has no [error], [crit], [alert] or [emerg] line.
# Both nginx masters are stopped by pid on exit. Skipped (exit 0) only
# when nginx or its Lua module is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
module=${2:-}
conf=(balancer.conf.in)
if [ -n "$module" ]; then
  [ -f "$module" ] || { echo "skipped: no ngx_http_nres_module.so (got '$module')"; exit 0; }
  conf=(cbalancer.conf.in MODULE="$(cd "$(dirname "$module")" && pwd)/$(basename "$module")")
fi
nres_spec_begin weights "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 4)
p1=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; gw_port=${ports[3]}
gw="http://127.0.0.1:$gw_port"

nres_render "$here/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$p1" SPEC="$here" EXTRA_LISTEN="
    listen 127.0.0.1:$p2 reuseport;
    listen 127.0.0.1:$p3 reuseport;"
nres_render "$here/${conf[0]}" "$work/gw/nginx.conf" "${conf[@]:1}" \
  PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua" \
  POLICY='"gateway"' CHOICE=round-robin \
  PEERS="{ { \"127.0.0.1:$p1\", weight = 3 }, \"127.0.0.1:$p2\",
           { \"127.0.0.1:$p3\", backup = true } }"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"
nres_wait_http "$gw/nres/status"

# shellcheck source=spec/nginx/peers.sh
. "$here/peers.sh"
control() {   # JSON: the control API's answer code
  curl -s -o "$work/control.out" -w '%{http_code}' -H "Connection: close" \
    -H "Content-Type: application/json" --data "$1" "$gw/nres/control"
}
# share N: N requests (all must answer 200), the peers' counts reset
# first; prints "n1 n2 n3".
share() {
  local out
  admin_all "reset=1"
  out=$(load "$1" 8 /)
  [ "$(count "$out" 200)" = "$1" ] || fail "not every request answered 200: $out"
  echo "$(ups "$p1") $(ups "$p2") $(ups "$p3")"
}
in_range() { [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }

# 1. weights 3:1, the backup idle
read -r n1 n2 n3 < <(share 400)
[ "$n3" = 0 ] || fail "the backup got $n3 requests with both primaries up"
in_range $(( n1 * 100 / (n1 + n2) )) 65 85 || fail "p1 (weight 3) got $n1, p2 (weight 1) $n2"
pass "weights 3:1: p1 $n1, p2 $n2, backup $n3"
st=$(status)
[ "$(peer_field "$st" "$p1" weight)" = 3 ] || fail "status: p1's weight is not 3: $st"
[ "$(peer_field "$st" "$p3" backup)" = true ] || fail "status: p3 is not a backup: $st"
pass "status shows the weights and the backup"

# 2. p2 weighted 3 at run time
code=$(control "{\"action\":\"weight\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p2\",\"weight\":3}")
[ "$code" = 200 ] || fail "control weight: $code $(cat "$work/control.out")"
sleep 0.2   # each worker's view is at most 50 ms old
read -r n1 n2 n3 < <(share 400)
[ "$n3" = 0 ] || fail "the backup got $n3 requests with both primaries up"
in_range $(( n1 * 100 / (n1 + n2) )) 40 60 || fail "after weight 3:3, p1 got $n1, p2 $n2"
pass "weight set through the control API: p1 $n1, p2 $n2"
grep -q "control from 127.0.0.1: upstream backend peer 127.0.0.1:$p2: weight 3 (was 1)" \
  "$work/gw/error.log" || fail "the weight change is not logged"

# 3. both primaries fail: ejected, the backup serves every request
admin "$p1" "mode=down&status=503" >/dev/null
admin "$p2" "mode=down&status=503" >/dev/null
load 60 4 / >/dev/null   # enough failures in a row to eject both
sleep 0.2
read -r n1 n2 n3 < <(share 100)
[ "$n3" = 100 ] || fail "the backup answered $n3 of 100 with both primaries ejected"
[ $(( n1 + n2 )) -le 10 ] || fail "ejected primaries still got $n1 + $n2 tries"
pass "both primaries ejected: every request answered by the backup ($n1 + $n2 probe tries)"

# 4. recovered and restored: the backup idle again
admin "$p1" "mode=healthy" >/dev/null
admin "$p2" "mode=healthy" >/dev/null
for p in "$p1" "$p2"; do
  code=$(control "{\"action\":\"restore\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p\"}")
  [ "$code" = 200 ] || fail "control restore: $code $(cat "$work/control.out")"
done
sleep 0.2
read -r n1 n2 n3 < <(share 200)
[ "$n3" = 0 ] || fail "the backup got $n3 requests after the primaries were restored"
pass "primaries restored: p1 $n1, p2 $n2, backup $n3"

nres_nginx_stop_all
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "error.log clean"
failed=0
echo "nginx weights (${conf[0]}): all checks passed"
