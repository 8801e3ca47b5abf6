# peers.sh - the pool checks balancer.sh (the Lua balancer) and cbalancer.sh
# (the nginx module) share: a client of the three-peer test upstream
# (spec/nginx/nres_upstream.lua: its /admin modes and counts) and of the
# gateway's /nres/status, and the "one peer down" check both must pass.
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
