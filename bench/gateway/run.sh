#!/usr/bin/env bash
# bench/gateway/run.sh - gateways against a failing upstream (issue 7).
#
#   bash bench/gateway/run.sh [--lib build/libnres.so] [--out FILE.md] [--quick]
#
# One command: starts the test upstream (nginx + Lua, spec/nginx/
# nres_upstream.lua) and, one at a time, each gateway on 127.0.0.1 high
# ports, drives it, stops it by pid (a trap stops everything on failure):
#   nginx-plain       proxy_pass, no retries
#   nginx-retry       proxy_next_upstream error timeout http_503, 3 tries,
#                     default passive checks (max_fails=1 fail_timeout=10s)
#   nginx-retry-mf0   the same with max_fails=0
#   haproxy           retries 2, retry-on 503 (+ conn-failure, response-timeout)
#   nres              nginx + nres, the "gateway" preset (3 attempts, budget,
#                     breaker, shared by the workers)
# Scenarios: the upstream is healthy, fails every 4th, every 2nd, is down,
# or has a 3 s blip. Per gateway and scenario: wrk (2 threads, 16
# connections) for REPS runs of D s after a 1 s warm-up, then a fixed count
# of N requests with curl (16 in parallel); the blip is one 15 s wrk run
# with the blip from 1 s to 4 s. Reported: client success rate, upstream
# requests per client request, requests/s (median, min-max), p99, and for
# the blip the time from recovery to the first 2xx. About 6 minutes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=spec/nginx/lib.sh
. "$repo/spec/nginx/lib.sh"

lib="$repo/build/libnres.so"
out="$repo/bench/results/gateway-$(date +%Y-%m-%d).md"
D=3; REPS=3; N=1000; BLIP_D=15
while [ $# -gt 0 ]; do
  case $1 in
    --lib) lib=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) D=1; REPS=1; N=200; BLIP_D=8; shift ;;
    *) echo "usage: $0 [--lib libnres.so] [--out FILE.md] [--quick]" >&2; exit 2 ;;
  esac
done
for tool in wrk haproxy curl luajit; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done
nres_have_nginx_lua || { echo "missing: nginx with libnginx-mod-http-lua" >&2; exit 2; }
[ -f "$lib" ] || { echo "no $lib: build first (cmake --build build)" >&2; exit 2; }
export NRES_LIB=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")

work=$(mktemp -d /tmp/nres-bench-gw.XXXXXX)
chmod 755 "$work"
haproxy_pid=""
cleanup() {
  [ -n "$haproxy_pid" ] && nres_stop_pid "$haproxy_pid"
  nres_nginx_stop_all
  rm -rf "$work"
}
trap cleanup EXIT

jit_dir=$(ls -d /usr/share/luajit-2.1*/ 2>/dev/null | head -1)
up_port=$(nres_free_port)
gw_port=$(nres_free_port)
while [ "$gw_port" = "$up_port" ]; do gw_port=$(nres_free_port); done
up="http://127.0.0.1:$up_port"
gw="http://127.0.0.1:$gw_port"
tsv="$work/results.tsv"
: >"$tsv"

mkdir -p "$work/up" && chmod 777 "$work/up"
nres_render "$repo/spec/nginx/upstream.conf.in" "$work/up/nginx.conf" \
  PREFIX="$work/up" PORT="$up_port" SPEC="$repo/spec/nginx" EXTRA_LISTEN=""
nres_nginx_start "$work/up" "$work/up/nginx.conf"
nres_wait_http "$up/admin"

admin() { curl -sf "$up/admin?$1"; }
json() { luajit "$repo/spec/nginx/json.lua" "$1"; }
gw_pid=""

start_gateway() {
  local name=$1 p="$work/$1"
  rm -rf "$p"; mkdir -p "$p/tmp"; chmod 777 "$p"
  local peer="    server 127.0.0.1:$up_port"
  case $name in
    nginx-plain)
      nres_render "$here/nginx.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="$peer;" NEXT="proxy_next_upstream off;" ;;
    nginx-retry|nginx-retry-mf0)
      local mf=""; [ "$name" = nginx-retry-mf0 ] && mf=" max_fails=0"
      nres_render "$here/nginx.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        PEERS="$peer$mf;
$peer$mf;
$peer$mf;" \
        NEXT="proxy_next_upstream error timeout http_503; proxy_next_upstream_tries 3;" ;;
    nres)
      nres_render "$here/nres.conf.in" "$p/nginx.conf" PREFIX="$p" PORT="$gw_port" \
        UPSTREAM_PORT="$up_port" LUA="$repo/lua/?.lua;${jit_dir}?.lua" ;;
    haproxy)
      nres_render "$here/haproxy.cfg.in" "$p/haproxy.cfg" PREFIX="$p" PORT="$gw_port" \
        UPSTREAM_PORT="$up_port"
      haproxy -q -f "$p/haproxy.cfg"
      for _ in $(seq 1 100); do [ -s "$p/haproxy.pid" ] && break; sleep 0.05; done
      haproxy_pid=$(head -1 "$p/haproxy.pid")
      gw_pid=$haproxy_pid
      nres_wait_http "$gw/warm"
      return ;;
  esac
  nres_nginx_start "$p" "$p/nginx.conf"
  gw_pid=$(cat "$p/nginx.pid")
  nres_wait_http "$gw/warm"
}

stop_gateway() {
  nres_stop_pid "$gw_pid"
  [ "$gw_pid" = "$haproxy_pid" ] && haproxy_pid=""
  gw_pid=""
}

set_mode() {
  case $1 in
    healthy) admin "mode=healthy&reset=1" ;;
    every4) admin "mode=every&n=4&reset=1" ;;
    every2) admin "mode=every&n=2&reset=1" ;;
    down) admin "mode=down&reset=1" ;;
    blip) admin "mode=blip&in=1&for=3&reset=1" ;;
  esac
}

# wrk_cell GW SCENARIO REP DURATION [RECOVERY_AT]
wrk_cell() {
  local line
  line=$(RECOVERY_AT=${5:-0} wrk -t2 -c16 -d"$4"s --timeout 5s -s "$here/wrk.lua" "$gw/bench" |
         grep "^RESULT")
  local ups; ups=$(admin "" | json "j.requests")
  printf 'wrk\t%s\t%s\t%s\t%s upstream=%s recovery=%s\n' "$1" "$2" "$3" \
    "${line#RESULT }" "$ups" "${5:-0}" >>"$tsv"
}

# fixed_cell GW SCENARIO: N requests, 16 at a time (curl, keep-alive)
fixed_cell() {
  admin "reset=1" >/dev/null
  local codes ok total ups
  codes=$(curl -s --no-progress-meter --parallel --parallel-max 16 -o /dev/null \
            -w '%{http_code}\n' "$gw/fixed?i=[1-$N]" 2>/dev/null || true)
  total=$(printf '%s\n' "$codes" | grep -c . || true)
  ok=$(printf '%s\n' "$codes" | grep -c '^2' || true)
  ups=$(admin "" | json "j.requests")
  printf 'fixed\t%s\t%s\t1\trequests=%s ok=%s upstream=%s\n' "$1" "$2" "$total" "$ok" "$ups" >>"$tsv"
}

gateways="nginx-plain nginx-retry nginx-retry-mf0 haproxy nres"
started=$(date +%s)
for g in $gateways; do
  for s in healthy every4 every2 down; do
    echo "== $g / $s" >&2
    start_gateway "$g"
    admin "mode=healthy&reset=1" >/dev/null
    wrk -t2 -c16 -d1s "$gw/warmup" >/dev/null
    set_mode "$s" >/dev/null
    for rep in $(seq 1 "$REPS"); do
      admin "reset=1" >/dev/null
      wrk_cell "$g" "$s" "$rep" "$D"
    done
    fixed_cell "$g" "$s"
    stop_gateway
  done
  echo "== $g / blip" >&2
  start_gateway "$g"
  admin "mode=healthy&reset=1" >/dev/null
  wrk -t2 -c16 -d1s "$gw/warmup" >/dev/null
  recovery=$(set_mode blip | json "j.blip_until")
  wrk_cell "$g" blip 1 "$BLIP_D" "$recovery"
  stop_gateway
done
elapsed=$(( $(date +%s) - started ))

mkdir -p "$(dirname "$out")"
{
  luajit "$here/report.lua" "$tsv" "$D" "$REPS" "$N" "$BLIP_D" "$elapsed"
} >"$out"
cp "$tsv" "${out%.md}.tsv"
echo "wrote $out (${elapsed}s)" >&2
