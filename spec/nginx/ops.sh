#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# spec/nginx/ops.sh LIBNRES - the gateway as an operator runs it (issue
# 26), the Lua balancer in a real nginx (spec/nginx/ops.conf.in, 2 workers,
# two peers), in about 15 s:
#   1. a scrape that never breaks: clients from several loopback addresses
#      (127.0.0.2, 127.200.200.1, 127.128.0.1, 127.255.254.3 - bytes >= 0x80
#      in $binary_remote_addr - and ::1) are refused by a limiter keyed by
#      $binary_remote_addr; the JSON status is valid UTF-8 with the keys as
#      addresses, only the `top` most refused keys are listed by name (the
#      rest aggregated), and `promtool check metrics` passes on the
#      Prometheus text;
#   2. latency histograms: each request's duration per upstream and each
#      try's per peer, Prometheus histograms in seconds (promtool clean);
#   3. a slow peer the choice avoids says so in the status (avoided, its
#      share of recent tries, its score); a peer that goes down is ejected
#      with one [warn] line in error.log (why, counts), restored with a
#      [notice] line;
#   4. the control API (/nres/control, loopback): bad input gets 400, 404,
#      405 or 409 with the reason and changes nothing; a drained peer gets
#      no new tries; an isolated breaker refuses in every worker, a
#      dry-run lets the requests through and counts would_refuse (JSON,
#      Prometheus), in the cosocket mode (gw.proxy) too; a limiter's new rate applies at once; dry-run and rate
#      survive `nginx -s reload`; each change is one [notice] line;
#   5. the status page (?format=html, Accept: text/html) in headless
#      Chromium with an open breaker and an ejected peer: the rendered DOM
#      shows both, the upstreams, scope and limiter; no external asset;
#      it refreshes itself; the screenshot is kept (NRES_OPS_OUT);
#   6. a balanced request whose gw.log never runs (/nolog: no log_by_lua)
#      is let go when the next request reuses its address: 30 of them on
#      one connection leave at most one try in flight;
#   9. error.log has no [error], [crit], [alert] or [emerg] line.
# Skipped (exit 0) without nginx's Lua module; without promtool (Debian
# prometheus) section 1's promtool check fails the test (.ci/deps installs
# it).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$here/lib.sh"
nres_spec_begin ops "${1:-${NRES_LIB:-}}"   # sets $work
out=${NRES_OPS_OUT:-$work/out}   # what the test keeps (the status page's screenshot)
mkdir -p "$out"

mapfile -t ports < <(nres_free_ports 3)
p1=${ports[0]}; p2=${ports[1]}; gw_port=${ports[2]}
gw="http://127.0.0.1:$gw_port"
nres_render_upstream "$work/up" "$p1" "$p2"
policy='{ base = "gateway", breaker = { break_for = 4, break_max = 4 } }'
nres_render "$here/ops.conf.in" "$work/gw/nginx.conf" \
  PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua" POLICY="$policy" DIRECT="$p1" \
  PEERS="{ \"127.0.0.1:$p1\", \"127.0.0.1:$p2\" }"
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_nginx_start "$work/gw" "$work/gw/nginx.conf"
nres_wait_http "http://127.0.0.1:$p1/admin"
nres_wait_http "$gw/nres/status"

json() { luajit "$here/json.lua" "$1"; }
status() { curl -sf "$gw/nres/status"; }
prom() { curl -sf "$gw/nres/status?format=prometheus"; }
utf8() { iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1; }

# ------------------------------------------- 1. a scrape that never breaks
# Client i sends i + 2 requests at a limit of 1/s, burst 1: at least i
# refused, the most refused last.
addrs=(127.0.0.2 127.200.200.1 127.128.0.1 127.255.254.3)
i=0
refused=0
for a in "${addrs[@]}"; do
  i=$((i + 1))
  for _ in $(seq 1 $((i + 2))); do
    c=$(curl -s -o /dev/null -w '%{http_code}' --interface "$a" "$gw/") || true
    [ "$c" = 429 ] && refused=$((refused + 1))
  done
done
for _ in 1 2 3; do
  c=$(curl -s -g -o /dev/null -w '%{http_code}' "http://[::1]:$gw_port/") || true
  [ "$c" = 429 ] && refused=$((refused + 1))
done
[ "$refused" -ge 10 ] || fail "expected at least 10 refusals (429), got $refused"
s=$(status)
utf8 <<<"$s" || fail "the JSON status is not valid UTF-8"
top=$(json '(function() local t = {} for _, k in ipairs(j.limiters.clients.keys) do
            t[#t + 1] = k.key end return require("table").concat(t, " ") end)()' <<<"$s")
[ "$(wc -w <<<"$top")" = 3 ] || fail "the limiter lists its 3 most refused keys by name: $top"
[ "${top%% *}" = 127.255.254.3 ] || fail "the most refused key first, as its address: $top"
others=$(json "j.limiters.clients.others_refused" <<<"$s")
total=$(json "j.limiters.clients.refused" <<<"$s")
[ "$others" -ge 1 ] && [ "$total" -ge "$refused" ] ||
  fail "the keys not listed are aggregated (others_refused $others of $total)"
curl -sf -o "$out/metrics.txt" "$gw/nres/status?format=prometheus"
utf8 <"$out/metrics.txt" || fail "the Prometheus text is not valid UTF-8"
p=$(cat "$out/metrics.txt")
grep -q "^nres_limiter_key_refused{limiter=\"clients\",key=\"127.255.254.3\"} [1-9]" <<<"$p" ||
  fail "no per-key series for the most refused address: $(grep limiter_key <<<"$p")"
grep -q "^nres_limiter_others_refused{limiter=\"clients\"} $others" <<<"$p" ||
  fail "no aggregate of the other keys"
command -v promtool >/dev/null || fail "promtool is missing (Debian prometheus, .ci/deps)"
promtool check metrics <"$out/metrics.txt" >"$out/promtool.txt" 2>&1 ||
  fail "promtool check metrics: $(cat "$out/promtool.txt")"
pass "scrape: $refused refusals from 5 addresses (3 listed: $top; others $others),"\
" JSON and Prometheus valid UTF-8, promtool check metrics clean"

# ------------------------------------------------ 2. latency histograms
for _ in $(seq 1 20); do curl -sf -o /dev/null "$gw/free" || fail "a healthy request failed"; done
curl -sf -o "$out/metrics.txt" "$gw/nres/status?format=prometheus"
p=$(cat "$out/metrics.txt")
grep -q "^# TYPE nres_upstream_request_duration_seconds histogram" <<<"$p" ||
  fail "no request duration histogram"
n=$(sed -n 's/^nres_upstream_request_duration_seconds_count{upstream="backend"} //p' <<<"$p")
[ "${n:-0}" -ge 20 ] || fail "request histogram count: '${n}' (20 requests at least)"
inf=$(sed -n 's/^nres_upstream_request_duration_seconds_bucket{upstream="backend",le="+Inf"} //p' <<<"$p")
[ "$inf" = "$n" ] || fail "+Inf bucket $inf != count $n"
tries=0
for port in "$p1" "$p2"; do
  c=$(sed -n "s/^nres_peer_try_duration_seconds_count{upstream=\"backend\",peer=\"127.0.0.1:$port\"} //p" <<<"$p")
  tries=$((tries + ${c:-0}))
done
[ "$tries" -ge 20 ] || fail "peer try histograms count $tries tries (20 at least)"
promtool check metrics <"$out/metrics.txt" >"$out/promtool.txt" 2>&1 ||
  fail "promtool check metrics (histograms): $(cat "$out/promtool.txt")"
pass "histograms: $n requests, $tries tries, in seconds buckets; promtool clean"

# ------------------------------------- 3. transitions you can see, honest status
admin() { curl -sf "http://127.0.0.1:$1/admin?$2" >/dev/null; }
peer2="127.0.0.1:$p2"
# one peer down: ejected ([warn], once), then restored ([notice])
admin "$p2" "mode=down&reset=1"
for _ in $(seq 1 20); do curl -s -o /dev/null "$gw/rr"; done
ejected=""
for _ in $(seq 1 40); do
  grep -q "peer $peer2 of upstream rr ejected" "$work/gw/error.log" && { ejected=1; break; }
  curl -s -o /dev/null "$gw/rr"
  sleep 0.1
done
[ -n "$ejected" ] || fail "no error.log line for the ejection: $(grep nres: "$work/gw/error.log" | tail -3)"
line=$(grep "peer $peer2 of upstream rr ejected" "$work/gw/error.log" | head -1)
grep -q "\[warn\].*failures in a row; [0-9]* tries, [0-9]* failed; opened [0-9]* times" <<<"$line" ||
  fail "the ejection line is [warn] with why and counts: $line"
admin "$p2" "mode=healthy&reset=1"
restored=""
for _ in $(seq 1 100); do
  curl -s -o /dev/null "$gw/rr"
  grep -q "\[notice\].*peer $peer2 of upstream rr restored" "$work/gw/error.log" &&
    { restored=1; break; }
  sleep 0.1
done
[ -n "$restored" ] || fail "no [notice] line for the restored peer: $(grep nres: "$work/gw/error.log" | tail -5)"
n=$(grep -c "peer $peer2 of upstream rr ejected" "$work/gw/error.log")
[ "$n" -le 2 ] || fail "the ejection logged $n times (once per change, both workers)"
pass "transitions: $(grep -c "nres: peer $peer2" "$work/gw/error.log") error.log lines for the peer's changes: $line"

# a slow peer: the choice avoids it, and the status says so
admin "$p2" "mode=healthy&delay=300&reset=1"
for _ in $(seq 1 4); do curl -sf -o /dev/null "$gw/free" || true; done
for _ in $(seq 1 30); do curl -sf -o /dev/null "$gw/free" || fail "a request failed (slow peer)"; done
s=$(status)
av=$(json 'j.upstreams.backend.peers[2].avoided' <<<"$s")
share=$(json 'j.upstreams.backend.peers[2].recent_share' <<<"$s")
score=$(json 'j.upstreams.backend.peers[2].score_ms' <<<"$s")
[ "$av" = true ] || fail "a slow peer the choice avoids says so: avoided=$av share=$share score=$score"
pass "honest status: the slow peer avoided (share $share, score $score ms)"

# ------------------------------------------------------- 4. control API
ctl() {   # ctl JSON [METHOD]: prints "status body"
  curl -s -o "$work/ctl.out" -w '%{http_code}' -X "${2:-POST}" --data-binary "$1" \
    -H 'Content-Type: application/json' "$gw/nres/control"
  printf ' %s' "$(cat "$work/ctl.out")"
}
expect_ctl() {   # expect_ctl CODE JSON [METHOD]
  local r
  r=$(ctl "$2" "${3:-POST}")
  [ "${r%% *}" = "$1" ] || fail "control $2: expected $1, got $r"
}
codes() {   # codes N PATH: the statuses of N requests, each on a new connection
  for _ in $(seq 1 "$1"); do curl -s -o /dev/null -w '%{http_code}\n' "$gw$2"; done | sort | uniq -c |
    awk '{printf "%s:%s ", $2, $1}'
}
admin "$p1" "mode=healthy&reset=1"
admin "$p2" "mode=healthy&reset=1"
sleep 0.3
# bad input: 4xx with the reason, nothing changed
expect_ctl 400 '{"action":"explode","upstream":"backend"}'
grep -q 'action: expected one of' "$work/ctl.out" || fail "no reason: $(cat "$work/ctl.out")"
expect_ctl 404 '{"action":"isolate","upstream":"nope"}'
expect_ctl 404 '{"action":"isolate","scope":"upstreams","key":"nope"}'
expect_ctl 400 '{"action":"isolate","upstream":"backend","color":"red"}'
expect_ctl 400 '{"action":"rate","limiter":"clients","rate":-1}'
expect_ctl 400 '{"action":"rate","limiter":"clients","rate":5,"burst":0.5}'
expect_ctl 400 '{"action":"dry_run","scope":"upstreams","on":"yes"}'
expect_ctl 400 'not json'
expect_ctl 405 '' PUT
expect_ctl 200 '{"action":"drain","upstream":"backend","peer":"127.0.0.1:'"$p1"'"}'
expect_ctl 409 '{"action":"drain","upstream":"backend","peer":"127.0.0.1:'"$p2"'"}'
grep -q 'another one not drained' "$work/ctl.out" || fail "409 without its reason: $(cat "$work/ctl.out")"
[ "$(status | json 'j.upstreams.backend.peers[2].drained')" = false ] ||
  fail "a refused drain changed the peer"
pass "control: bad input answered 400/404/405/409 with the reason, nothing changed"
# drain: no new tries on the drained peer, from every worker
sleep 0.1
admin "$p1" "reset=1"
r=$(codes 20 /free)
n1=$(curl -sf "http://127.0.0.1:$p1/admin" | json j.requests)
[ "$r" = "200:20 " ] && [ "$n1" = 0 ] || fail "drained peer: $r, it got $n1 requests"
expect_ctl 200 '{"action":"restore","upstream":"backend","peer":"127.0.0.1:'"$p1"'"}'
pass "drain: 20/20 ok, the drained peer got none; restored"
# isolate the upstream's breaker: every worker refuses (503), then dry-run lets through
expect_ctl 200 '{"action":"isolate","upstream":"backend"}'
grep -q '"state":"isolated"' "$work/ctl.out" || fail "isolate: $(cat "$work/ctl.out")"
r=$(codes 10 /free)
[ "$r" = "503:10 " ] || fail "isolated breaker: expected 10 x 503, got $r"
r=$(codes 4 /direct)
[ "$r" = "503:4 " ] || fail "isolated breaker, cosocket mode: expected 4 x 503, got $r"
expect_ctl 200 '{"action":"dry_run","scope":"upstreams","on":true}'
r=$(codes 10 /free)
[ "$r" = "200:10 " ] || fail "dry-run: expected 10 x 200, got $r"
would=$(status | json 'j.scopes.upstreams.would_refuse["circuit open"]')
[ "${would:-0}" -ge 10 ] || fail "dry-run counted $would would_refuse"
r=$(codes 5 /direct)
[ "$r" = "200:5 " ] || fail "dry-run, cosocket mode: expected 5 x 200, got $r"
w2=$(status | json 'j.scopes.upstreams.would_refuse["circuit open"]')
[ "$w2" = $((would + 5)) ] || fail "dry-run, cosocket mode: would_refuse $would then $w2 (5 more expected)"
would=$w2
curl -sf -o "$out/metrics.txt" "$gw/nres/status?format=prometheus"
grep -q "^nres_would_refuse_total{scope=\"upstreams\",reason=\"circuit open\"} $would" "$out/metrics.txt" ||
  fail "no nres_would_refuse_total: $(grep would "$out/metrics.txt")"
promtool check metrics <"$out/metrics.txt" >"$out/promtool.txt" 2>&1 ||
  fail "promtool check metrics (control): $(cat "$out/promtool.txt")"
expect_ctl 200 '{"action":"close","upstream":"backend"}'
expect_ctl 200 '{"action":"dry_run","scope":"upstreams","on":false}'
r=$(codes 5 /free)
[ "$r" = "200:5 " ] || fail "closed again: $r"
pass "isolate: 10 x 503 in every worker (4 in the cosocket mode); dry-run: 15 x 200 (5 cosocket), would_refuse $would; closed"
# a limiter's rate, and its dry-run, kept across a reload
expect_ctl 200 '{"action":"rate","limiter":"clients","rate":1000,"burst":50}'
r=$(for _ in $(seq 1 20); do curl -s -o /dev/null -w '%{http_code}\n' --interface 127.0.0.9 "$gw/"; done | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')
[ "$r" = "200:20 " ] || fail "rate 1000/s burst 50: expected 20 x 200, got $r"
expect_ctl 200 '{"action":"dry_run","limiter":"clients","on":true}'
"$NGINX" -p "$work/gw" -e "$work/gw/error.log" -c "$work/gw/nginx.conf" -g "user root root;" -s reload
sleep 1.5
st=$(curl -sf "$gw/nres/control")
[ "$(json 'j.limiters.clients.dry_run' <<<"$st")" = true ] &&
  [ "$(json 'j.limiters.clients.rate' <<<"$st")" = 1000 ] ||
  fail "after a reload the limiter's dry-run and rate are gone: $st"
expect_ctl 200 '{"action":"dry_run","limiter":"clients","on":false}'
n=$(grep -c "nres: control from 127.0.0.1: " "$work/gw/error.log")
[ "$n" = 9 ] || fail "expected 9 control lines in error.log (one per change), got $n"
grep -q "\[notice\].*nres: control from 127.0.0.1: scope upstreams key backend: breaker isolate (was closed, now isolated)" \
  "$work/gw/error.log" || fail "the isolate line: $(grep 'control from' "$work/gw/error.log" | head -3)"
pass "limiter rate 1000/s: 20/20 ok; dry-run and rate kept across nginx -s reload; $n [notice] lines"

# ------------------------------------------------ 5. the status page
# An open breaker (every peer of rr down: its key's breaker in scope
# upstreams opens) and an ejected peer (backend's first, by the control
# API), then the page in headless Chromium: the rendered DOM is checked
# and a screenshot kept in $out.
command -v chromium >/dev/null || fail "chromium is missing (Debian chromium, .ci/deps)"
admin "$p1" "mode=down&reset=1"
admin "$p2" "mode=down&reset=1"
open_=""
for _ in $(seq 1 60); do
  curl -s -o /dev/null "$gw/rr"
  [ "$(status | json 'key("upstreams", "rr").breaker')" = open ] && { open_=1; break; }
done
[ -n "$open_" ] || fail "the rr key's breaker did not open: $(status)"
expect_ctl 200 '{"action":"eject","upstream":"backend","peer":"127.0.0.1:'"$p1"'"}'
expect_ctl 200 '{"action":"dry_run","limiter":"clients","on":true}'
chrome() {
  timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$work/chrome" "$@" 2>>"$out/chromium.log"
}
page="$gw/nres/status?format=html"
chrome --dump-dom "$page" >"$out/status.dom.html" || fail "chromium --dump-dom failed: $(tail -3 "$out/chromium.log")"
chrome --screenshot="$out/status.png" --window-size=1280,1400 "$page" >/dev/null ||
  fail "chromium --screenshot failed"
[ -s "$out/status.png" ] || fail "no screenshot"
dom=$(cat "$out/status.dom.html")
grep -q '<title>nres status</title>' <<<"$dom" || fail "not the status page: ${dom:0:300}"
grep -q "data-key=\"rr\" data-state=\"open\"" <<<"$dom" || fail "the open breaker is not shown"
grep -q "data-peer=\"127.0.0.1:$p1\" data-state=\"isolated\"" <<<"$dom" ||
  fail "the ejected peer is not shown: $(grep -o "data-peer=[^>]*" <<<"$dom")"
grep -q 'data-upstream="backend"' <<<"$dom" && grep -q 'data-upstream="rr"' <<<"$dom" &&
  grep -q 'data-limiter="clients"' <<<"$dom" && grep -q 'DRY-RUN' <<<"$dom" &&
  grep -q 'data-scope="upstreams"' <<<"$dom" || fail "upstreams, scope or limiter missing"
grep -q 'http-equiv="refresh"' <<<"$dom" || fail "the page does not refresh itself"
if grep -Eq '(src|href)="?(https?:)?//' <<<"$dom"; then fail "the page loads an external asset"; fi
c=$(curl -s -o /dev/null -w '%{content_type}' -H 'Accept: text/html' "$gw/nres/status")
[ "$c" = "text/html; charset=utf-8" ] || fail "Accept: text/html gets $c"
expect_ctl 200 '{"action":"restore","upstream":"backend","peer":"127.0.0.1:'"$p1"'"}'
expect_ctl 200 '{"action":"dry_run","limiter":"clients","on":false}'
admin "$p1" "mode=healthy&reset=1"
admin "$p2" "mode=healthy&reset=1"
pass "status page: Chromium renders the open breaker, the ejected peer, upstreams, limiter (dry-run); screenshot $out/status.png"

# ------------------------------- 6. a balanced request gw.log never sees
# 30 requests through the balancer on one connection (one worker, nginx
# gives each the memory of the one before), then the status on the same
# connection: that worker's in-flight tries. A record held by a request
# whose log phase never ran kept its try in flight for good (30 here).
curl -s -o "$work/nolog#1" "$gw/nolog?[1-30]" -o "$work/nolog.json" "$gw/nres/status"
n=$(json 'j.upstreams.backend.peers[1].inflight_this_worker + j.upstreams.backend.peers[2].inflight_this_worker' \
      <"$work/nolog.json")
[ "$n" -le 1 ] || fail "requests without gw.log: $n tries still in flight after 30 (at most 1)"
pass "requests without gw.log: $n of 30 tries still in flight"

# ------------------------------------------------------------ 9. error.log
nres_nginx_stop_all
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "error.log clean"
failed=0
