#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/members.sh LIBNRES [MODULE] - peers added and removed at run
# time (issue 25; docs/gateway-peers.md "Add and remove peers at run
# time") in a real nginx, about 20 s; with MODULE (ngx_http_nres_module.so)
# through the module's nres_balancer, else the Lua balancer.
#
# Four ports of the test upstream; the gateway (2 workers, round robin,
# slow_start 3 s, max_peers 4) declares p1 and p2.
#   1. add p3 (weight 2) under load: no request fails; its share ramps up
#      (slow start: at most a quarter at first, about half of the tries
#      after the ramp); the status (JSON, Prometheus, the HTML page) and
#      the control API list it;
#   2. remove p1 under load: no request fails, p1 gets no try after the
#      change (its tries in flight finish), the status drops it;
#   3. long requests in flight on p2 (p3 drained meanwhile) when p2 is
#      removed complete (200), and the control API's answer counted all
#      four in flight;
#   4. bad input (unknown upstream, malformed address, duplicate, the last
#      primary, a full upstream, an unknown field) gets a 4xx naming the
#      field and changes nothing;
#   5. two workers racing adds and removes of one peer leave a sane
#      membership (listed once at most, within max_peers);
#   6. nginx -s reload with the same configuration keeps the membership;
#   7. one [notice] per change; error.log has no [error] or worse.
# Skipped (exit 0) only when nginx or its Lua module is missing.
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
nres_spec_begin members "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 5)
p1=${ports[0]}; p2=${ports[1]}; p3=${ports[2]}; p4=${ports[3]}; gw_port=${ports[4]}
gw="http://127.0.0.1:$gw_port"

nres_render_upstream "$work/up" "$p1" "$p2" "$p3" "$p4"
nres_render "$here/${conf[0]}" "$work/gw/nginx.conf" "${conf[@]:1}" \
  PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua" \
  POLICY='"gateway"' CHOICE=round-robin \
  PEERS="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\" }"
# the upstream's run-time options, on the declaration's line
sed -i 's/choice = "round-robin"/choice = "round-robin", slow_start = 3, max_peers = 4/' \
  "$work/gw/nginx.conf"
grep -q "max_peers = 4" "$work/gw/nginx.conf" || fail "the declaration was not rendered"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"
nres_wait_http "$gw/nres/status"

# shellcheck source=spec/nginx/peers.sh
. "$here/peers.sh"
admin_all() { for p in "$p1" "$p2" "$p3" "$p4"; do admin "$p" "$1" >/dev/null; done; }
control() {   # JSON: the control API's answer code (its body in control.out)
  curl -s -o "$work/control.out" -w '%{http_code}' -H "Connection: close" \
    -H "Content-Type: application/json" --data "$1" "$gw/nres/control"
}
op() {   # ACTION PORT [MORE JSON]
  control "{\"action\":\"$1\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$2\"${3:-}}"
}
members() {   # the control API's list of members, sorted ports
  curl -sf -H "Connection: close" "$gw/nres/control" |
    json "table.concat(j.upstreams.backend.peers, ' ')" | tr ' ' '\n' | sed 's/.*://' |
    sort -n | tr '\n' ' '
}
status_ports() {
  status | json "(function() local t = {} for _, p in ipairs(j.upstreams.backend.peers) do
    t[#t + 1] = p.peer end return table.concat(t, ' ') end)()" | tr ' ' '\n' |
    sed 's/.*://' | sort -n | tr '\n' ' '
}
sorted() { printf '%s\n' "$@" | sort -n | tr '\n' ' '; }
counts() { echo "$(ups "$p1") $(ups "$p2") $(ups "$p3") $(ups "$p4")"; }
all_ok() {   # LOAD-OUTPUT N WHAT
  [ "$(count "$1" 200)" = "$2" ] || fail "$3: not every request answered 200: $1"
}

# 1. add p3 under load, slow start (after the declared peers' own: every
# worker's peers ramp from its first request)
load 40 4 / >/dev/null
sleep 3.2
admin_all "mode=healthy&reset=1"
load 600 8 / >"$work/load1" &
bg=$!
sleep 0.3
code=$(op add "$p3" ',"weight":2')
[ "$code" = 200 ] || fail "add: $code $(cat "$work/control.out")"
t_add=$(date +%s.%N)
admin_all "reset=1"
out=$(load 80 4 /)
all_ok "$out" 80 "right after the add"
read -r a b c _ < <(counts)
early=$(( c * 100 / (a + b + c) ))
wait "$bg"
all_ok "$(cat "$work/load1")" 600 "load across the add"
[ "$c" -gt 0 ] || fail "the added peer got no try ($a $b $c)"
[ "$early" -le 25 ] || fail "slow start: the added peer (weight 2) got $early % at once ($a $b $c)"
sleep "$(awk -v t="$t_add" -v now="$(date +%s.%N)" 'BEGIN { w = t + 3.3 - now; print (w > 0 ? w : 0) }')"
admin_all "reset=1"
out=$(load 200 4 /)
all_ok "$out" 200 "after the ramp"
read -r a b c _ < <(counts)
late=$(( c * 100 / (a + b + c) ))
[ "$late" -ge 38 ] && [ "$late" -le 62 ] ||
  fail "after slow start the added peer (weight 2 of 4) got $late % ($a $b $c)"
pass "p3 added under load (0 failed): its share ramped from $early % to $late %"
[ "$(members)" = "$(sorted "$p1" "$p2" "$p3")" ] || fail "control API members: $(members)"
[ "$(status_ports)" = "$(sorted "$p1" "$p2" "$p3")" ] || fail "status peers: $(status_ports)"
[ "$(peer_field "$(status)" "$p3" weight)" = 2 ] || fail "status: p3's weight is not 2"
# (read whole, then searched: a grep -q in a pipe may leave before the
# writer is done, which pipefail counts as a failure)
prom() { curl -sf -H "Connection: close" "$gw/nres/status?format=prometheus"; }
html() { curl -sf -H "Connection: close" -H "Accept: text/html" "$gw/nres/status?format=html"; }
grep -q "peer=\"127.0.0.1:$p3\"" <<<"$(prom)" || fail "Prometheus lacks the added peer"
grep -q "127.0.0.1:$p3" <<<"$(html)" || fail "the status page lacks the added peer"
pass "status and the control API list the added peer"

# 2. remove p1 under load: nothing fails, no new try on p1
load 600 8 / >"$work/load2" &
bg=$!
sleep 0.3
code=$(op remove "$p1")
[ "$code" = 200 ] || fail "remove: $code $(cat "$work/control.out")"
sleep 0.2   # the tries begun before the change end (each takes ms)
admin_all "reset=1"
wait "$bg"
all_ok "$(cat "$work/load2")" 600 "load across the remove"
out=$(load 200 8 /)
all_ok "$out" 200 "after the remove"
read -r a b c _ < <(counts)
[ "$a" = 0 ] || fail "the removed peer got $a tries after the change ($a $b $c)"
[ "$(members)" = "$(sorted "$p2" "$p3")" ] || fail "members after the remove: $(members)"
[ "$(status_ports)" = "$(sorted "$p2" "$p3")" ] || fail "status still shows the removed peer: $(status_ports)"
p=$(prom)
[ -n "$p" ] && ! grep -q "peer=\"127.0.0.1:$p1\"" <<<"$p" ||
  fail "Prometheus still shows the removed peer"
p=$(html)
[ -n "$p" ] && ! grep -q "127.0.0.1:$p1" <<<"$p" || fail "the status page still shows the removed peer"
pass "p1 removed under load: 0 failed, 0 tries on it after the change ($b $c)"

# 3. a long request in flight on p2 when it is removed completes
admin "$p2" "mode=healthy&delay=1500" >/dev/null
code=$(op drain "$p3")   # the long requests all go to p2
[ "$code" = 200 ] || fail "drain p3: $code $(cat "$work/control.out")"
sleep 0.2   # every worker sees a drain within 50 ms
for k in 1 2 3 4; do
  curl -s -o /dev/null -w '%{http_code}\n' -H "Connection: close" "$gw/long$k" \
    >"$work/long$k" &
done
sleep 0.5
code=$(op restore "$p3")
[ "$code" = 200 ] || fail "restore p3: $code $(cat "$work/control.out")"
code=$(op remove "$p2")
[ "$code" = 200 ] || fail "remove p2: $code $(cat "$work/control.out")"
inflight=$(json "j.inflight" <"$work/control.out")
wait
for k in 1 2 3 4; do
  [ "$(cat "$work/long$k")" = 200 ] || fail "request $k in flight at the removal got $(cat "$work/long$k")"
done
[ "$inflight" = 4 ] || fail "the removal counted $inflight tries in flight on p2, not 4: $(cat "$work/control.out")"
admin "$p2" "mode=healthy&delay=0" >/dev/null
pass "a long request in flight on the removed peer completed ($inflight in flight at the change)"

# 4. bad input: 4xx naming the field, nothing changed
before=$(members)
bad() {   # EXPECTED-CODE FIELD JSON
  local code
  code=$(control "$3")
  [ "$code" = "$1" ] || fail "bad input $3: got $code, expected $1: $(cat "$work/control.out")"
  grep -q "$2: expected" "$work/control.out" || fail "bad input $3: reason $(cat "$work/control.out")"
}
bad 404 upstream '{"action":"add","upstream":"nope","peer":"127.0.0.1:1"}'
bad 400 peer '{"action":"add","upstream":"backend","peer":"localhost:80"}'
bad 400 peer '{"action":"add","upstream":"backend","peer":"127.0.0.1:99999"}'
bad 400 peer '{"action":"add","upstream":"backend","peer":"[::1:80"}'
bad 400 weight "{\"action\":\"add\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p4\",\"weight\":0}"
bad 400 backup "{\"action\":\"add\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p4\",\"backup\":1}"
bad 400 port "{\"action\":\"add\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p4\",\"port\":1}"
bad 409 peer "{\"action\":\"add\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p3\"}"
bad 409 peer "{\"action\":\"remove\",\"upstream\":\"backend\",\"peer\":\"127.0.0.1:$p3\"}"
bad 404 peer '{"action":"remove","upstream":"backend","peer":"127.0.0.1:1"}'
[ "$(members)" = "$before" ] || fail "bad input changed the members: $before -> $(members) (p1 $p1, p2 $p2, p3 $p3, p4 $p4)"
# capacity: p3 and three more fill max_peers 4 (p1 and p2 freed by now:
# their tries ended more than a second ago)
sleep 1.1
for p in "$p1" "$p2" "$p4"; do
  code=$(op add "$p")
  [ "$code" = 200 ] || fail "add $p: $code $(cat "$work/control.out")"
done
before=$(members)
bad 409 upstream '{"action":"add","upstream":"backend","peer":"127.0.0.1:1"}'
grep -q "max_peers 4" "$work/control.out" || fail "a full upstream's reason: $(cat "$work/control.out")"
[ "$(members)" = "$before" ] || fail "a full upstream changed: $before -> $(members)"
pass "bad input: 4xx naming the field, members unchanged ($before)"

# 5. two workers race: adds and removes of p4 at once, many connections
for k in $(seq 1 20); do
  op remove "$p4" >/dev/null &
  op add "$p4" >/dev/null &
done
wait
m=$(members)
n=$(echo "$m" | wc -w)
[ "$n" -le 4 ] || fail "after the race: $n members ($m)"
[ "$(echo "$m" | tr ' ' '\n' | grep -c "^$p4$" || true)" -le 1 ] || fail "p4 listed twice: $m"
out=$(load 200 8 /)
all_ok "$out" 200 "after the race"
pass "adds and removes racing from two workers: members $m, requests fine"

# 6. a reload with the same configuration keeps the membership
before=$(members)
nres_nginx_signal "$work/gw" "$work/gw/nginx.conf" reload
for _ in $(seq 1 50); do
  sleep 0.1
  [ "$(grep -c "reconfiguring" "$work/gw/error.log" || true)" -ge 1 ] && break
done
sleep 0.5
[ "$(members)" = "$before" ] || fail "the reload changed the members: $before -> $(members)"
admin_all "reset=1"
out=$(load 200 8 /)
all_ok "$out" 200 "after the reload"
read -r a b c d < <(counts)
for p in $before; do
  case $p in
    "$p1") [ "$a" -gt 0 ] || fail "p1 got no try after the reload";;
    "$p3") [ "$c" -gt 0 ] || fail "p3 got no try after the reload";;
  esac
done
pass "nginx -s reload kept the members ($before; tries $a $b $c $d)"

nres_nginx_stop_all
grep -q "control from 127.0.0.1: upstream backend peer 127.0.0.1:$p3: added (weight 2" \
  "$work/gw/error.log" || fail "no [notice] for the add"
grep -q "control from 127.0.0.1: upstream backend peer 127.0.0.1:$p1: removed" \
  "$work/gw/error.log" || fail "no [notice] for the remove"
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "one [notice] per change; error.log clean"
failed=0
echo "nginx members (${conf[0]}): all checks passed"
