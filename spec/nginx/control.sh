#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/control.sh LIBNRES MODULE - the control API through the nginx
# module's nres_control (issue 26) in a real nginx (spec/nginx/
# control.conf.in, 2 workers), in a few seconds:
#   1. the same operations sent to nres_control and to the Lua handler get
#      the same status and the same reason or change (one C for both);
#   2. a change through nres_control acts in every worker (an isolated
#      breaker: 503 from nres_admit; closed: 200 again), each one [notice]
#      line with the client's address; GET answers the state;
#   3. a client that is not loopback (a unix socket) gets 403, PUT 405, an
#      empty body 400; a bad nres_control_allow fails nginx -t by name.
# Skipped (exit 0) without nginx's Lua module or the module's .so.
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
nres_spec_begin control "${1:-${NRES_LIB:-}}"   # sets $work

mapfile -t ports < <(nres_free_ports 3)
p1=${ports[0]}; p2=${ports[1]}; gw_port=${ports[2]}
gw="http://127.0.0.1:$gw_port"
nres_render_upstream "$work/up" "$p1" "$p2"
nres_render "$here/control.conf.in" "$work/gw/nginx.conf" PREFIX="$work/gw" PORT="$gw_port" \
  LUA="$repo/lua/?.lua" MODULE="$module" PEERS="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\" }"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "$gw/lua/control"

json() { luajit "$here/json.lua" "$1"; }
ctl() {   # ctl PATH JSON [METHOD]: "status body"
  curl -s -o "$work/ctl.out" -w '%{http_code}' -X "${3:-POST}" --data-binary "$2" "$gw$1"
  printf ' %s' "$(cat "$work/ctl.out")"
}
text() {   # text ANSWER: its error or changed
  json 'j.error or j.changed' <<<"${1#* }"
}
codes() {   # codes N: the statuses of N requests to /
  for _ in $(seq 1 "$1"); do curl -s -o /dev/null -w '%{http_code}\n' "$gw/"; done | sort | uniq -c |
    awk '{printf "%s:%s ", $2, $1}'
}
for _ in 1 2 3 4; do curl -s -o /dev/null "$gw/"; done   # the upstream's key in its scope

# ------------------------------------------------ 1. one C for both doors
peer1="127.0.0.1:$p1"
ops=(
  'not json'
  '{"action":"explode"}'
  '{"action":"isolate","upstream":"backend","color":"red"}'
  '{"action":"isolate","upstream":"nope"}'
  '{"action":"isolate","scope":"upstreams","key":"nope"}'
  '{"action":"rate","limiter":"clients","rate":-1}'
  '{"action":"dry_run","scope":"upstreams","on":"yes"}'
  '{"action":"weight","upstream":"backend","peer":"'"$peer1"'","weight":0.5}'
  '{"action":"drain","upstream":"backend","peer":"10.9.9.9:1"}'
)
for op in "${ops[@]}"; do
  m=$(ctl /nres/control "$op"); l=$(ctl /lua/control "$op")
  [ "${m%% *}" = "${l%% *}" ] && [ "$(text "$m")" = "$(text "$l")" ] ||
    fail "$op: nres_control answered $m, the Lua handler $l"
  [ "${m%% *}" -ge 400 ] || fail "$op: expected a refusal, got $m"
done
# a change, then the other door's answer to the same change
m=$(ctl /nres/control '{"action":"drain","upstream":"backend","peer":"'"$peer1"'"}')
l=$(ctl /lua/control '{"action":"drain","upstream":"backend","peer":"127.0.0.1:'"$p2"'"}')
[ "$(text "$m")" = "upstream backend peer $peer1: drained (was closed, now closed, drained)" ] ||
  fail "drain: $m"
[ "${l%% *}" = 409 ] && [ "$(text "$l")" = "peer: expected a peer whose upstream keeps another one not drained, got \"127.0.0.1:$p2\"" ] ||
  fail "the last peer's drain through Lua: $l"
m=$(ctl /nres/control '{"action":"restore","upstream":"backend","peer":"'"$peer1"'"}')
[ "${m%% *}" = 200 ] || fail "restore: $m"
pass "the same ${#ops[@]} refusals from both doors, word for word; drain, 409, restore across them"

# ----------------------------------------- 2. changes act in every worker
m=$(ctl /nres/control '{"action":"isolate","upstream":"backend"}')
[ "$(json j.state <<<"${m#* }")" = isolated ] || fail "isolate: $m"
r=$(codes 10)
[ "$r" = "503:10 " ] || fail "isolated through nres_control: expected 10 x 503, got $r"
m=$(ctl /nres/control '{"action":"close","upstream":"backend"}')
r=$(codes 6)
[ "$r" = "200:6 " ] || fail "closed: expected 6 x 200, got $r"
ctl /nres/control '{"action":"weight","upstream":"backend","peer":"'"$peer1"'","weight":7}' >/dev/null
st=$(curl -sf "$gw/nres/control")
[ "$(json "j.upstreams.backend.weights[\"$peer1\"]" <<<"$st")" = 7 ] &&
  [ "$(json 'j.scopes.upstreams.dry_run' <<<"$st")" = false ] || fail "GET: $st"
[ "$(curl -sf "$gw/lua/control" | json "j.upstreams.backend.weights[\"$peer1\"]")" = 7 ] ||
  fail "the Lua handler's GET does not show the weight"
n=$(grep -c "\[notice\].*nres: control from 127.0.0.1: " "$work/gw/error.log" || true)
[ "$n" = 5 ] || fail "expected 5 [notice] lines (drain, restore, isolate, close, weight), got $n"
grep -q "\[notice\].*nres: control from 127.0.0.1: scope upstreams key backend: breaker isolate (was closed, now isolated)" \
  "$work/gw/error.log" || fail "the isolate line: $(grep 'control from' "$work/gw/error.log" | head -3)"
pass "isolate: 10 x 503 from nres_admit, close: 6 x 200; GET shows the weight; $n [notice] lines"

# ------------------------------------------- 3. who and how may use it
c=$(curl -s -o "$work/ctl.out" -w '%{http_code}' --unix-socket "$work/gw/gw.sock" \
  --data-binary '{"action":"isolate","upstream":"backend"}' http://localhost/nres/control)
[ "$c" = 403 ] && grep -q 'is not allowed (loopback, or nres_control_allow)' "$work/ctl.out" ||
  fail "a unix-socket client: $c $(cat "$work/ctl.out")"
r=$(ctl /nres/control '' PUT)
[ "${r%% *}" = 405 ] && [ "$(text "$r")" = "method: expected GET or POST, got PUT" ] || fail "PUT: $r"
r=$(ctl /nres/control '')
[ "${r%% *}" = 400 ] && [ "$(text "$r")" = "body: expected a JSON object, got none" ] ||
  fail "an empty POST: $r"
r=$(codes 3)
[ "$r" = "200:3 " ] || fail "the refused requests changed something: $r"
sed 's|nres_control_allow 192.0.2.0/24 2001:db8::7;|nres_control_allow 192.0.2.0/33;|' \
  "$work/gw/nginx.conf" >"$work/gw/bad.conf"
if "$NGINX" -p "$work/gw" -c "$work/gw/bad.conf" -t >"$work/t.out" 2>&1; then
  fail "nginx -t accepted nres_control_allow 192.0.2.0/33"
fi
grep -q 'nres_control_allow: expected an address or a CIDR block' "$work/t.out" ||
  fail "nginx -t: $(cat "$work/t.out")"
pass "403 for a unix-socket client, 405 for PUT, 400 for no body; nginx -t names a bad nres_control_allow"

nres_nginx_stop_all
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "error.log clean"
failed=0
echo "nginx control: all checks passed"
