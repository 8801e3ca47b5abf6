#!/usr/bin/env bash
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
nres_render "$here/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$p1" SPEC="$here" EXTRA_LISTEN="
    listen 127.0.0.1:$p2 reuseport;"
policy='{ base = "gateway", breaker = { break_for = 4, break_max = 4 } }'
nres_render "$here/ops.conf.in" "$work/gw/nginx.conf" \
  PREFIX="$work/gw" PORT="$gw_port" LUA="$repo/lua/?.lua" POLICY="$policy" \
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

# ------------------------------------------------------------ 9. error.log
nres_nginx_stop_all
if grep -E "\[(error|crit|alert|emerg)\]" "$work/gw/error.log"; then
  fail "error.log has the lines above"
fi
pass "error.log clean"
failed=0
